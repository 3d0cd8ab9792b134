//! The load driver: workers, each with its own keep-alive connection, sending a workload's
//! requests closed loop (the next request when the answer is in) or open loop (at a fixed rate),
//! and recording every answer's latency and outcome.
//!
//! Open loop follows wrk2: each worker owns every N-th slot of the global schedule
//! (`start + i / rate`) and measures latency from the slot's intended time, not from when it
//! managed to send. A stalled server therefore shows up as latency of every request that should
//! have been sent meanwhile, instead of being hidden by the sender waiting (coordinated
//! omission).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::time::Instant;

use crate::http::{Answer, Connection, Endpoint, Request};

/// A stream of requests, and what to remember of their answers for the verdict.
pub trait Workload: Send + Sync + 'static {
    /// What the workload needs back with an answer (which hold, which user...).
    type Tag: Send;

    /// The next request for `worker`, or `None` when the workload has nothing more for it.
    fn next(&self, worker: usize, rng: &mut StdRng) -> Option<(Request, Self::Tag)>;

    /// The answer to a request `next` gave; `Err` when its outcome is unknown (the connection
    /// failed after sending, or before an answer came). `timing` says when the request went.
    /// Returns how many holds the answer says the server created (a batch's answer carries
    /// many), which the driver adds up over the measured requests only, as it does the requests
    /// themselves: holds per second and requests per second share one window.
    fn answered(
        &self,
        worker: usize,
        tag: Self::Tag,
        answer: &Result<Answer, String>,
        timing: Timing,
    ) -> u64;
}

/// When a request went to the server, as the client saw it. On loopback a request reaches the
/// server's socket between the two instants: not before `began`, not after `written`.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Just before `send`: before its first byte was written, and before the connect when the
    /// connection had to be opened again first (earlier than the write, never later).
    pub began: Instant,
    /// Just after its last byte was; `None` when it was never all written.
    pub written: Option<Instant>,
}

/// Closed or open loop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pace {
    /// Each connection sends its next request as soon as the previous answer is in.
    Closed,
    /// Requests at this many per second in all, spread over the connections.
    Open { rate_per_s: f64 },
}

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub connections: usize,
    pub pace: Pace,
    /// How long to measure, after the warm-up. With `requests`, whichever ends first; with
    /// neither, until the workload has nothing more to send.
    pub duration: Option<Duration>,
    /// How many requests to measure, after the warm-up.
    pub requests: Option<u64>,
    /// Requests during this time are sent but not measured.
    pub warmup: Duration,
    pub seed: u64,
    /// Show a progress line on stderr (only drawn when stderr is a terminal).
    pub progress: bool,
}

/// Latencies are recorded in microseconds, up to an hour, at 3 significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Per-second histograms are coarser: they only draw the plot.
fn second_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

/// One second of the measured window.
#[derive(Clone)]
pub struct Second {
    pub requests: u64,
    /// Unknown outcomes and 5xx answers.
    pub errors: u64,
    pub latency_us: Histogram<u64>,
}

impl Second {
    fn new() -> Second {
        Second {
            requests: 0,
            errors: 0,
            latency_us: second_histogram(),
        }
    }
}

/// What the measured requests gave.
#[derive(Clone)]
pub struct Recorded {
    pub latency_us: Histogram<u64>,
    /// `"201"`, `"409 insufficient_stock"`, `"unknown"`, ... and how many.
    pub outcomes: BTreeMap<String, u64>,
    pub timeline: Vec<Second>,
    /// The first few unknown outcomes' reasons, to say why.
    pub unknown_samples: Vec<String>,
    /// Holds the server created with the measured requests (the warm-up's are not counted, as
    /// its requests are not).
    pub holds_created: u64,
}

impl Recorded {
    pub(crate) fn new() -> Recorded {
        Recorded {
            latency_us: histogram(),
            outcomes: BTreeMap::new(),
            timeline: Vec::new(),
            unknown_samples: Vec::new(),
            holds_created: 0,
        }
    }

    pub(crate) fn record(
        &mut self,
        second: usize,
        latency: Duration,
        outcome: &Result<Answer, String>,
    ) {
        let micros = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let _ = self.latency_us.record(micros.min(self.latency_us.high()));
        let mut status = itoa::Buffer::new();
        let labelled: String;
        let (label, error) = match outcome {
            Ok(answer) => {
                let status_text = status.format(answer.status);
                let label = match answer.error_code() {
                    Some(code) => {
                        labelled = format!("{status_text} {code}");
                        labelled.as_str()
                    }
                    None => status_text,
                };
                (label, answer.status >= 500)
            }
            Err(why) => {
                if self.unknown_samples.len() < 5 {
                    self.unknown_samples.push(why.clone());
                }
                ("unknown", true)
            }
        };
        // Looked up before it is inserted: a label is a new `String` only the first time.
        match self.outcomes.get_mut(label) {
            Some(count) => *count += 1,
            None => {
                self.outcomes.insert(label.to_string(), 1);
            }
        }
        if self.timeline.len() <= second {
            self.timeline.resize_with(second + 1, Second::new);
        }
        let slot = &mut self.timeline[second];
        slot.requests += 1;
        slot.errors += u64::from(error);
        let _ = slot.latency_us.record(micros.min(slot.latency_us.high()));
    }

    fn merge(&mut self, other: Recorded) {
        let _ = self.latency_us.add(&other.latency_us);
        for (label, count) in other.outcomes {
            *self.outcomes.entry(label).or_insert(0) += count;
        }
        if self.timeline.len() < other.timeline.len() {
            self.timeline.resize_with(other.timeline.len(), Second::new);
        }
        for (mine, theirs) in self.timeline.iter_mut().zip(other.timeline) {
            mine.requests += theirs.requests;
            mine.errors += theirs.errors;
            let _ = mine.latency_us.add(&theirs.latency_us);
        }
        for sample in other.unknown_samples {
            if self.unknown_samples.len() < 5 {
                self.unknown_samples.push(sample);
            }
        }
        self.holds_created += other.holds_created;
    }

    pub fn measured(&self) -> u64 {
        self.latency_us.len()
    }
}

/// The result of a load run.
pub struct LoadResult {
    pub recorded: Recorded,
    /// How long each connection took to open (connect and handshake), all at once before the
    /// first request; kept apart from the requests' latency, as redis-benchmark does.
    pub connect_us: Histogram<u64>,
    /// Connections that could not be opened before the start (each retries on its first
    /// request, which then counts the connect).
    pub connect_failures: u64,
    /// The measured window: from the end of the warm-up to the last measured answer.
    pub window: Duration,
    /// Requests sent in all, warm-up included.
    pub sent: u64,
    /// From the first request to the last answer, warm-up included.
    pub elapsed: Duration,
}

impl LoadResult {
    pub fn throughput_per_s(&self) -> f64 {
        let seconds = self.window.as_secs_f64();
        if seconds > 0.0 {
            self.recorded.measured() as f64 / seconds
        } else {
            0.0
        }
    }
}

/// Counters the workers share with the progress line.
#[derive(Default)]
struct Live {
    sent: AtomicU64,
    answered: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    /// Measured requests claimed so far, against `LoadConfig::requests`.
    claimed: AtomicU64,
    stop: AtomicBool,
}

/// Runs `workload` against `endpoints` as `config` says, until the duration or the request count
/// is reached or the workload runs dry. Connection `i` goes to `endpoints[i % len]`: a fleet of
/// servers gets the connections evenly, as a round-robin balancer in front of it would spread
/// them.
pub async fn run<W: Workload>(
    endpoints: &[Endpoint],
    workload: Arc<W>,
    config: &LoadConfig,
) -> Result<LoadResult, String> {
    if config.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    if endpoints.is_empty() {
        return Err("no server to send the load to: give --url".into());
    }
    // Every connection opens before the clock starts, all at once, as a crowd arrives; how long
    // that took is reported on its own line.
    let opening: Vec<_> = (0..config.connections)
        .map(|worker| {
            let connection = Connection::new(&endpoints[worker % endpoints.len()]);
            tokio::spawn(async move {
                let mut connection = connection?;
                let began = Instant::now();
                let opened = connection.open().await.map(|()| began.elapsed());
                Ok::<_, String>((connection, opened))
            })
        })
        .collect();
    let mut connections = Vec::with_capacity(config.connections);
    let mut connect_us = histogram();
    let mut connect_failures = 0;
    for task in opening {
        let (connection, opened) = task
            .await
            .map_err(|error| format!("opening a connection failed: {error}"))??;
        match opened {
            Ok(took) => connect_us.saturating_record(took.as_micros().max(1) as u64),
            Err(_) => connect_failures += 1,
        }
        connections.push(connection);
    }
    let live = Arc::new(Live::default());
    let start = Instant::now();
    let measure_from = start + config.warmup;
    let stop_at = config.duration.map(|duration| measure_from + duration);
    let progress = config
        .progress
        .then(|| spawn_progress(Arc::clone(&live), start));
    let mut workers = Vec::with_capacity(config.connections);
    for (worker, mut connection) in connections.into_iter().enumerate() {
        let workload = Arc::clone(&workload);
        let live = Arc::clone(&live);
        let config = config.clone();
        workers.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(
                config.seed ^ (worker as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            let mut recorded = Recorded::new();
            let mut last_answer = measure_from;
            let mut slot = worker as u64;
            loop {
                if live.stop.load(Ordering::Relaxed) {
                    break;
                }
                // When this request is meant to go: now (closed loop) or its slot (open loop).
                let intended = match config.pace {
                    Pace::Closed => Instant::now(),
                    Pace::Open { rate_per_s } => {
                        let at = start + Duration::from_secs_f64(slot as f64 / rate_per_s);
                        slot += config.connections as u64;
                        tokio::time::sleep_until(at).await;
                        at
                    }
                };
                if stop_at.is_some_and(|stop_at| intended >= stop_at) {
                    break;
                }
                let measured = intended >= measure_from;
                if measured {
                    if let Some(limit) = config.requests {
                        if live.claimed.fetch_add(1, Ordering::Relaxed) >= limit {
                            break;
                        }
                    }
                }
                let Some((request, tag)) = workload.next(worker, &mut rng) else {
                    break;
                };
                live.sent.fetch_add(1, Ordering::Relaxed);
                let began = Instant::now();
                let outcome = connection.send(&request).await;
                let done = Instant::now();
                let timing = Timing {
                    began,
                    written: connection.written_at(),
                };
                match &outcome {
                    Ok(answer) if answer.status >= 500 => {
                        live.errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(answer) if answer.status >= 400 => {
                        live.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => {
                        live.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                live.answered.fetch_add(1, Ordering::Relaxed);
                let holds_created = workload.answered(worker, tag, &outcome, timing);
                if measured {
                    let second = (intended - measure_from).as_secs() as usize;
                    recorded.record(second, done - intended, &outcome);
                    recorded.holds_created += holds_created;
                    last_answer = last_answer.max(done);
                }
                if outcome.is_err() {
                    // A server that is down would otherwise be hammered with connects.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            (recorded, last_answer)
        }));
    }
    let mut recorded = Recorded::new();
    let mut last_answer = measure_from;
    for worker in workers {
        let (part, last) = worker
            .await
            .map_err(|error| format!("a load worker failed: {error}"))?;
        recorded.merge(part);
        last_answer = last_answer.max(last);
    }
    live.stop.store(true, Ordering::Relaxed);
    if let Some(progress) = progress {
        let _ = progress.await;
    }
    let window = match stop_at {
        Some(stop_at) if config.requests.is_none() => {
            stop_at.saturating_duration_since(measure_from)
        }
        _ => last_answer.saturating_duration_since(measure_from),
    };
    Ok(LoadResult {
        recorded,
        connect_us,
        connect_failures,
        window,
        sent: live.sent.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
    })
}

/// A progress line on stderr, four times a second, while the run lasts. Nothing at all when
/// stderr is not a terminal (a pipe, a file, CI).
fn spawn_progress(live: Arc<Live>, start: Instant) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        let mut last = (Instant::now(), 0u64);
        while !live.stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = Instant::now();
            let answered = live.answered.load(Ordering::Relaxed);
            let rate = (answered - last.1) as f64 / (now - last.0).as_secs_f64().max(1e-3);
            last = (now, answered);
            bar.set_message(format!(
                "{answered} answered, {rate:.0}/s now, {} refused (4xx), {} errors (5xx or no answer), {:.0}s",
                live.refused.load(Ordering::Relaxed),
                live.errors.load(Ordering::Relaxed),
                (now - start).as_secs_f64()
            ));
            bar.tick();
        }
        bar.finish_and_clear();
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A server that answers every request head with `201` and an empty JSON object.
    async fn always_created() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut input = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(read) = stream.read(&mut chunk).await {
                        if read == 0 {
                            break;
                        }
                        input.extend_from_slice(&chunk[..read]);
                        while let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") {
                            input.drain(..end + 4);
                            let answer = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}";
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        url
    }

    /// Every answer 201 is one hold; counts the answers it was given, measured or not.
    #[derive(Default)]
    struct Holds {
        answered: AtomicU64,
    }

    impl Workload for Holds {
        type Tag = ();

        fn next(&self, _worker: usize, _rng: &mut StdRng) -> Option<(Request, ())> {
            Some((Request::get("/hold"), ()))
        }

        fn answered(&self, _: usize, (): (), answer: &Result<Answer, String>, _: Timing) -> u64 {
            self.answered.fetch_add(1, Ordering::Relaxed);
            u64::from(matches!(answer, Ok(answer) if answer.status == 201))
        }
    }

    #[tokio::test]
    async fn holds_created_in_the_warm_up_are_not_counted_with_the_measured_requests() {
        let url = always_created().await;
        let endpoint = Endpoint::parse(&url, None).unwrap();
        let workload = Arc::new(Holds::default());
        let config = LoadConfig {
            connections: 2,
            pace: Pace::Closed,
            duration: Some(Duration::from_millis(300)),
            requests: None,
            warmup: Duration::from_millis(300),
            seed: 1,
            progress: false,
        };
        let load = run(&[endpoint], Arc::clone(&workload), &config)
            .await
            .unwrap();
        let measured = load.recorded.measured();
        let answered = workload.answered.load(Ordering::Relaxed);
        assert!(measured > 0, "nothing measured");
        assert!(
            answered > measured,
            "the warm-up created holds too: {answered} answered, {measured} measured"
        );
        assert_eq!(load.recorded.holds_created, measured);
        assert_eq!(load.recorded.outcomes.get("201"), Some(&measured));
    }
}
