//! The lab's driver: the same closed loop for every variant. Each buyer owns one connection to
//! the server its variant talks to (opened before the clock starts) and tries to take one unit,
//! again and again, until the variant answers "sold out" (to any buyer) or the time cap is up;
//! every attempt is timed into one HDR histogram.
//!
//! It knows nothing of Redis, PostgreSQL or HTTP: a variant is a [`Buyer`] whose attempt says
//! what happened. It never decides whether anything was oversold; the variant's verdict does,
//! from these counts and the server's own counter.

use std::future::Future;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What one attempt to take a unit gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// The variant told its buyer the unit is theirs.
    Sold,
    /// The variant said there is no stock left.
    SoldOut,
    /// A lock was held by another buyer: nothing was tried (the buyer's loop is the retry).
    Busy,
    /// The buyer played a crash (see [`Fault::CrashedHolder`]): it stops for good, leaving
    /// behind whatever it held, as a process that died would.
    Crashed,
}

/// A fault the lab plays once, in the first critical section of a run: what the seed says
/// happens to a lock's holder on sale day, and what each kind of lock does about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    #[default]
    None,
    /// The holder stops between its read and its write for three leases (a GC pause, a slow
    /// payment call), then writes what it decided on the stale read.
    SlowHolder,
    /// The holder dies right after taking the lock, without releasing it.
    CrashedHolder,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::SlowHolder => "slow-holder",
            Fault::CrashedHolder => "crashed-holder",
        }
    }

    /// What happens, for the report; `None` when nothing does.
    pub fn description(self) -> Option<&'static str> {
        match self {
            Fault::None => None,
            Fault::SlowHolder => Some(
                "the first buyer to take the lock pauses for three leases between its read \
                 and its write",
            ),
            Fault::CrashedHolder => {
                Some("the first buyer to take the lock dies holding it, without releasing it")
            }
        }
    }

    /// How long a slow holder pauses: long enough for any lease that is not renewed to run out.
    pub fn pause(lease: Duration) -> Duration {
        lease * 3
    }
}

/// Where a buyer that holds a lock asks whether the run's fault strikes now. The buyers of one
/// variant share the fault: it strikes once, in whichever critical section comes first.
#[derive(Clone)]
pub struct FaultPoint {
    fault: Fault,
    pause: Duration,
    armed: Arc<AtomicBool>,
}

/// What the buyer does after [`FaultPoint::strike`].
#[derive(Debug, PartialEq, Eq)]
pub enum Strike {
    /// Carry on (after the pause, for a slow holder).
    Go,
    /// Die now, holding what it holds.
    Crash,
}

impl FaultPoint {
    pub fn new(fault: Fault, lease: Duration) -> FaultPoint {
        FaultPoint {
            fault,
            pause: Fault::pause(lease),
            armed: Arc::new(AtomicBool::new(fault != Fault::None)),
        }
    }

    /// A point where nothing ever strikes.
    pub fn none() -> FaultPoint {
        FaultPoint::new(Fault::None, Duration::ZERO)
    }

    /// Plays the fault if it has not struck yet in this run.
    pub async fn strike(&self) -> Strike {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return Strike::Go;
        }
        match self.fault {
            Fault::None => Strike::Go,
            Fault::SlowHolder => {
                tokio::time::sleep(self.pause).await;
                Strike::Go
            }
            Fault::CrashedHolder => Strike::Crash,
        }
    }
}

/// One buyer of a variant, with its own connection.
pub trait Buyer: Send + 'static {
    /// Tries to take one unit. `Err` is an error of the attempt (no answer, an unexpected
    /// answer): whether it took a unit is unknown to the buyer.
    fn attempt(&mut self) -> impl Future<Output = Result<Take, String>> + Send;
}

/// An attempt that takes longer than this is an error (a server that stopped answering must
/// not hang the lab).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the buyers of one variant did.
#[derive(Clone)]
pub struct Measured {
    pub attempts: u64,
    pub sold: u64,
    pub sold_out: u64,
    pub busy: u64,
    pub errors: u64,
    /// The first few errors, to say why.
    pub error_samples: Vec<String>,
    /// Every attempt's latency, in microseconds.
    pub latency_us: Histogram<u64>,
    /// From the start to the last answer; when the cap was hit, to the cap if that is later.
    pub window: Duration,
    /// When the first "sold out" answer came, from the start: how long selling the stock took.
    /// `None`: the time cap came first.
    pub first_sold_out: Option<Duration>,
    /// The longest time without a sale while the stock lasted (a stuck lock shows here).
    pub longest_stall: Duration,
    /// When the cap came first: the time from the last sale (or the start) to the end of the
    /// window, a stall still under way; zero when the stock sold out.
    pub final_stall: Duration,
    /// When a buyer played a crash, from the start.
    pub crashed_at: Option<Duration>,
}

impl Measured {
    fn new() -> Measured {
        Measured {
            attempts: 0,
            sold: 0,
            sold_out: 0,
            busy: 0,
            errors: 0,
            error_samples: Vec::new(),
            latency_us: crate::load::histogram(),
            window: Duration::ZERO,
            first_sold_out: None,
            longest_stall: Duration::ZERO,
            final_stall: Duration::ZERO,
            crashed_at: None,
        }
    }

    fn merge(&mut self, other: Measured) {
        self.attempts += other.attempts;
        self.sold += other.sold;
        self.sold_out += other.sold_out;
        self.busy += other.busy;
        self.errors += other.errors;
        for sample in other.error_samples {
            if self.error_samples.len() < 5 {
                self.error_samples.push(sample);
            }
        }
        let _ = self.latency_us.add(&other.latency_us);
        self.window = self.window.max(other.window);
        self.first_sold_out = match (self.first_sold_out, other.first_sold_out) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.longest_stall = self.longest_stall.max(other.longest_stall);
        self.crashed_at = self.crashed_at.or(other.crashed_at);
    }

    /// Attempts of any outcome (sold, sold out, busy, error) per second of the window.
    pub fn attempts_per_s(&self) -> f64 {
        per_s(self.attempts, self.window)
    }

    /// How long the stock took to sell: to the first "sold out" answer, or the whole window
    /// when the time cap came first.
    pub fn selling(&self) -> Duration {
        self.first_sold_out.unwrap_or(self.window)
    }

    /// Units the buyers were told are theirs, per second of [`Measured::selling`]: what a shop
    /// sells per second, the refusals (busy, sold out) left out.
    pub fn sold_per_s(&self) -> f64 {
        per_s(self.sold, self.selling())
    }

    /// The latency at quantile `q`, in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.latency_us.is_empty() {
            0.0
        } else {
            self.latency_us.value_at_quantile(q) as f64 / 1000.0
        }
    }
}

fn per_s(count: u64, window: Duration) -> f64 {
    let seconds = window.as_secs_f64();
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Counters the buyers share with the progress line.
#[derive(Default)]
struct Live {
    attempts: AtomicU64,
    sold: AtomicU64,
    errors: AtomicU64,
    /// Set by the first "sold out" answer: no buyer starts another attempt.
    sold_out: AtomicBool,
    /// Set when every buyer has stopped: the progress line goes.
    stop: AtomicBool,
    /// When the latest sale came, in microseconds from the start.
    last_sale_us: AtomicU64,
    /// The longest gap between two sales so far, in microseconds.
    longest_gap_us: AtomicU64,
}

impl Live {
    /// Records a sale at `at_us`, and the gap since the one before.
    fn sale(&self, at_us: u64) {
        self.sold.fetch_add(1, Ordering::Relaxed);
        let before = self.last_sale_us.fetch_max(at_us, Ordering::Relaxed);
        self.longest_gap_us
            .fetch_max(at_us.saturating_sub(before), Ordering::Relaxed);
    }
}

/// Runs every buyer from the same instant until the first "sold out" answer, or for `cap` at
/// most, and merges what they measured. An attempt under way when the stock runs out or the
/// time is up is finished and counted (a slow holder's stale write lands in the counter read
/// back afterwards); none starts after it. `progress` names the variant on a progress line drawn
/// only when stderr is a terminal.
pub async fn drive<B: Buyer>(buyers: Vec<B>, cap: Duration, progress: Option<&str>) -> Measured {
    let live = Arc::new(Live::default());
    let start = Instant::now();
    let deadline = start + cap;
    let progress = progress
        .filter(|_| std::io::stderr().is_terminal())
        .map(|name| spawn_progress(name.to_string(), Arc::clone(&live), start, cap));
    // A JoinSet: if the lab is dropped (Ctrl-C), its buyers are aborted with it.
    let mut tasks = JoinSet::new();
    for mut buyer in buyers {
        let live = Arc::clone(&live);
        tasks.spawn(async move {
            let mut measured = Measured::new();
            while !live.sold_out.load(Ordering::Relaxed) && Instant::now() < deadline {
                let sent = Instant::now();
                let outcome = match tokio::time::timeout(ATTEMPT_TIMEOUT, buyer.attempt()).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err(format!("no answer within {} s", ATTEMPT_TIMEOUT.as_secs())),
                };
                let done = Instant::now();
                let micros = u64::try_from((done - sent).as_micros())
                    .unwrap_or(u64::MAX)
                    .clamp(1, measured.latency_us.high());
                let _ = measured.latency_us.record(micros);
                measured.attempts += 1;
                measured.window = done - start;
                live.attempts.fetch_add(1, Ordering::Relaxed);
                match outcome {
                    Ok(Take::Sold) => {
                        measured.sold += 1;
                        live.sale(micros_since(start, done));
                    }
                    Ok(Take::SoldOut) => {
                        measured.sold_out += 1;
                        measured.first_sold_out.get_or_insert(done - start);
                        live.sold_out.store(true, Ordering::Relaxed);
                    }
                    Ok(Take::Busy) => measured.busy += 1,
                    Ok(Take::Crashed) => {
                        measured.crashed_at = Some(done - start);
                        break;
                    }
                    Err(why) => {
                        measured.errors += 1;
                        live.errors.fetch_add(1, Ordering::Relaxed);
                        if measured.error_samples.len() < 5 {
                            measured.error_samples.push(why);
                        }
                        // A server that is down would otherwise be hammered.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            measured
        });
    }
    let mut total = Measured::new();
    while let Some(result) = tasks.join_next().await {
        match result {
            Ok(measured) => total.merge(measured),
            Err(error) => {
                total.errors += 1;
                total.error_samples.push(format!("a buyer failed: {error}"));
            }
        }
    }
    // Without a "sold out", the buyers were at it until the cap at least (the last attempt may
    // end before it, when its buyer paused after an error).
    if total.first_sold_out.is_none() {
        total.window = total.window.max(cap);
    }
    // While stock is left, the time since the last sale is a stall too (a lock stuck for good).
    let end_us = u64::try_from(total.window.as_micros()).unwrap_or(u64::MAX);
    let tail_us = match total.first_sold_out {
        Some(_) => 0,
        None => end_us.saturating_sub(live.last_sale_us.load(Ordering::Relaxed)),
    };
    total.final_stall = Duration::from_micros(tail_us);
    total.longest_stall =
        Duration::from_micros(live.longest_gap_us.load(Ordering::Relaxed).max(tail_us));
    live.stop.store(true, Ordering::Relaxed);
    if let Some(progress) = progress {
        let _ = progress.await;
    }
    total
}

fn micros_since(start: Instant, at: Instant) -> u64 {
    u64::try_from((at - start).as_micros()).unwrap_or(u64::MAX)
}

/// A spinner with the variant's counts, four times a second; only ever started on a terminal.
fn spawn_progress(
    name: String,
    live: Arc<Live>,
    start: Instant,
    cap: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        while !live.stop.load(Ordering::Relaxed) {
            bar.set_message(format!(
                "{name}: {:.1} s (cap {:.0} s), {} attempts, {} sold, {} errors",
                start.elapsed().as_secs_f64(),
                cap.as_secs_f64(),
                live.attempts.load(Ordering::Relaxed),
                live.sold.load(Ordering::Relaxed),
                live.errors.load(Ordering::Relaxed),
            ));
            bar.tick();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        bar.finish_and_clear();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sells `left` units, one per attempt, then says sold out; fails every `fail_every`-th.
    struct Counter {
        left: Arc<AtomicU64>,
        calls: u64,
        fail_every: u64,
    }

    impl Buyer for Counter {
        async fn attempt(&mut self) -> Result<Take, String> {
            self.calls += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
            if self.calls.is_multiple_of(self.fail_every) {
                return Err("failed on purpose".into());
            }
            let taken = self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                });
            Ok(if taken.is_ok() {
                Take::Sold
            } else {
                Take::SoldOut
            })
        }
    }

    fn counters(stock: u64, fail_every: u64) -> Vec<Counter> {
        let left = Arc::new(AtomicU64::new(stock));
        (0..4)
            .map(|_| Counter {
                left: Arc::clone(&left),
                calls: 0,
                fail_every,
            })
            .collect()
    }

    #[tokio::test]
    async fn every_attempt_is_counted_and_timed_until_the_stock_sells_out() {
        let cap = Duration::from_secs(5);
        let measured = drive(counters(20, 3), cap, None).await;
        assert_eq!(measured.sold, 20);
        assert_eq!(
            measured.attempts,
            measured.sold + measured.sold_out + measured.busy + measured.errors
        );
        assert_eq!(measured.latency_us.len(), measured.attempts);
        assert!(measured.errors > 0 && measured.error_samples.len() <= 5);
        // The first "sold out" stops every buyer after the attempt it has under way.
        assert!(
            (1..=4).contains(&measured.sold_out),
            "{}",
            measured.sold_out
        );
        let sold_out_at = measured.first_sold_out.expect("the stock ran out");
        assert!(sold_out_at <= measured.window, "{sold_out_at:?}");
        assert!(measured.window < cap / 2, "{:?}", measured.window);
        assert_eq!(measured.selling(), sold_out_at);
        let expected = 20.0 / sold_out_at.as_secs_f64();
        assert!((measured.sold_per_s() - expected).abs() < 1e-6 * expected);
        assert!(measured.attempts_per_s() > measured.sold_per_s() * 0.5);
        assert!(measured.quantile_ms(0.99) >= 1.0);
    }

    #[tokio::test]
    async fn a_stock_that_outlasts_the_cap_is_sold_for_the_cap_and_no_longer() {
        let cap = Duration::from_millis(300);
        let measured = drive(counters(1_000_000_000, 7), cap, None).await;
        assert_eq!((measured.first_sold_out, measured.sold_out), (None, 0));
        assert!(measured.sold > 0);
        assert!(measured.window >= cap);
        assert!(measured.window < cap + ATTEMPT_TIMEOUT);
        assert_eq!(measured.selling(), measured.window);
        let expected = measured.sold as f64 / measured.window.as_secs_f64();
        assert!((measured.sold_per_s() - expected).abs() < 1e-6 * expected);
    }

    /// A lock around a counter, the lock's first holder playing `fault`.
    struct Locked {
        lock: Arc<AtomicBool>,
        left: Arc<AtomicU64>,
        fault: FaultPoint,
    }

    impl Buyer for Locked {
        async fn attempt(&mut self) -> Result<Take, String> {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if self.lock.swap(true, Ordering::SeqCst) {
                return Ok(Take::Busy);
            }
            if self.fault.strike().await == Strike::Crash {
                return Ok(Take::Crashed); // The lock stays taken.
            }
            let taken = self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                });
            self.lock.store(false, Ordering::SeqCst);
            Ok(if taken.is_ok() {
                Take::Sold
            } else {
                Take::SoldOut
            })
        }
    }

    async fn locked_run(fault: Fault) -> Measured {
        let lock = Arc::new(AtomicBool::new(false));
        let left = Arc::new(AtomicU64::new(50));
        let point = FaultPoint::new(fault, Duration::from_millis(100));
        let buyers: Vec<Locked> = (0..4)
            .map(|_| Locked {
                lock: Arc::clone(&lock),
                left: Arc::clone(&left),
                fault: point.clone(),
            })
            .collect();
        drive(buyers, Duration::from_millis(800), None).await
    }

    #[tokio::test]
    async fn a_stall_is_the_longest_time_without_a_sale_while_stock_is_left() {
        let calm = locked_run(Fault::None).await;
        assert_eq!((calm.sold, calm.crashed_at), (50, None));
        assert!(
            calm.longest_stall < Duration::from_millis(200),
            "{:?}",
            calm.longest_stall
        );

        // Everyone waits out the slow holder's pause (three leases), then the stock sells.
        let slow = locked_run(Fault::SlowHolder).await;
        assert_eq!(slow.sold, 50);
        assert!(
            slow.longest_stall >= Duration::from_millis(290),
            "{:?}",
            slow.longest_stall
        );

        // The crashed holder's lock is never released: nothing sells, to the end of the run;
        // the crashed buyer stops, the others keep trying.
        let crashed = locked_run(Fault::CrashedHolder).await;
        assert_eq!(crashed.sold, 0);
        assert!(crashed.crashed_at.is_some());
        assert!(crashed.busy > 0);
        assert!(
            crashed.window - crashed.longest_stall < Duration::from_millis(1),
            "{:?} of {:?}",
            crashed.longest_stall,
            crashed.window
        );
        assert_eq!(crashed.final_stall, crashed.longest_stall);
        assert_eq!(
            (calm.final_stall, slow.final_stall),
            (Duration::ZERO, Duration::ZERO)
        );
    }
}
