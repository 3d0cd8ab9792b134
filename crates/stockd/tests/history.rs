//! History checking against the real server: concurrent clients send random reserves (several
//! pools, per-user limits, confirm: true, short ttl_ms so that holds expire, waits, idempotent
//! retries, two copies at once now and then), confirms, releases, extends, refunds, restocks,
//! reads and lock operations, over
//! several connections and (on Redis) several stockd servers, while servers or Redis are killed
//! with SIGKILL and restarted. Every request is recorded with its send and answer times and its
//! answer, or as unknown (timeout, connection error, 503). At the end the feed is read and
//! `stockd_history::check` must explain the whole history by the feed's order (see that crate).
//!
//! Each test runs against its own backend, whatever `STOCKD_TEST_BACKEND` says: the embedded
//! engine, a single Redis with two stockd servers, a single Redis (AOF, appendfsync always) that
//! is itself killed, a primary with its replica and three Sentinels whose primary is killed and
//! failed over (two stockd servers with `--redis-replicas 1`), and a 3-primary Redis Cluster
//! with two stockd servers, one killed, or, with `--redis-replicas 1`, its primaries killed and
//! failed over to their replicas.
//!
//! Bounded by default (one history of 3 s per test); `STOCKD_HISTORY_RUNS=N` and
//! `STOCKD_HISTORY_SECS=S` make long runs, `STOCKD_HISTORY_SEED` repeats the random choices of a
//! run (not the interleaving the machine produced: a failing history is written to a file, which
//! `stockd_history::check` reads back).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use stockd_history::{check, Bounds, History, Item, Op, Outcome, Request};
use support::{
    Api, EmbeddedBackend, RedisBackend, RedisClusterBackend, SentinelGroup, Server, TestBackend,
};

/// Clients sending requests at once, each one request at a time.
const CLIENTS: u32 = 12;
/// A request without an answer after this long is unknown (a timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a killed process stays down before it is started again.
const DOWN_FOR: Duration = Duration::from_millis(300);
/// Kills per history.
const KILLS: u32 = 2;
const USERS: u32 = 24;
const LOCK_NAMES: [&str; 2] = ["job-a", "job-b"];
/// The longest an unfinished hold can live: the largest ttl_ms of a reserve or an extend.
const TTL_MAX_MS: u64 = 2_500;

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text}: not a number")),
        Err(_) => default,
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock before 1970")
        .as_micros() as u64
}

/// Every request sent and what came back, shared by the clients.
#[derive(Default)]
struct Recorder {
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    /// Sends `request`, records it, and returns the outcome.
    async fn perform(&self, api: &Api, process: u32, request: Request) -> Outcome {
        let (method, path, body) = request.http();
        let invoke_us = now_us();
        let result = tokio::time::timeout(REQUEST_TIMEOUT, api.try_call(method, &path, body)).await;
        let complete_us = now_us();
        let outcome = match result {
            Ok(Ok((status, body))) => Outcome::Answered { status, body },
            Ok(Err(error)) => Outcome::Unknown { why: error },
            Err(_) => Outcome::Unknown {
                why: format!("no answer within {REQUEST_TIMEOUT:?}"),
            },
        };
        self.ops.lock().unwrap().push(Op {
            process,
            invoke_us,
            complete_us,
            request,
            outcome: outcome.clone(),
        });
        outcome
    }
}

/// What the clients share: the pools a hold may combine (pools of one partition), and the
/// latest holds anyone tried to make, so that clients race each other on one hold.
struct Shared {
    groups: Vec<Vec<String>>,
    recent_holds: Mutex<Vec<String>>,
    stop: AtomicBool,
}

const RECENT_HOLDS: usize = 48;

/// The process number of a client's concurrent copy of a request: the client's plus this.
const COPY_PROCESS: u32 = 1_000;

fn status_of(outcome: &Outcome) -> Option<(u16, &Value)> {
    match outcome {
        Outcome::Answered { status, body } if *status != 503 => Some((*status, body)),
        _ => None,
    }
}

/// One client: a random mix of every request, with idempotent retries of reserves whose outcome
/// it does not know.
async fn client(api: Api, process: u32, seed: u64, shared: Arc<Shared>, recorder: Arc<Recorder>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut made = 0;
    let mut retries: Vec<Request> = Vec::new();
    // This client's latest reserves that made (or may have made) a hold.
    let mut sent: Vec<Request> = Vec::new();
    let mut lease: Option<(String, u64)> = None;
    let owner = format!("owner-{process}");
    while !shared.stop.load(Ordering::Relaxed) {
        let roll = rng.gen_range(0..100);
        let pick_hold = |rng: &mut StdRng| {
            let recent = shared.recent_holds.lock().unwrap();
            (!recent.is_empty()).then(|| recent[rng.gen_range(0..recent.len())].clone())
        };
        let request = if !retries.is_empty() && roll < 20 {
            retries.swap_remove(rng.gen_range(0..retries.len()))
        } else if !sent.is_empty() && (20..24).contains(&roll) {
            // The same request again, as a client does that did not see the answer: a replay.
            sent[rng.gen_range(0..sent.len())].clone()
        } else if roll < 45 {
            made += 1;
            let group = &shared.groups[rng.gen_range(0..shared.groups.len())];
            let mut pools = group.clone();
            let count = if pools.len() > 1 && rng.gen_bool(0.3) {
                2
            } else {
                1
            };
            let items = (0..count)
                .map(|_| Item {
                    pool: pools.swap_remove(rng.gen_range(0..pools.len())),
                    qty: rng.gen_range(1..=3),
                })
                .collect();
            Request::Reserve {
                hold_id: format!("h{process}-{made}"),
                user: Some(format!("u{}", rng.gen_range(0..USERS))),
                items,
                ttl_ms: rng.gen_range(1_000..=TTL_MAX_MS),
                confirm: rng.gen_bool(0.15),
                wait_ms: if rng.gen_bool(0.1) {
                    rng.gen_range(100..=600)
                } else {
                    0
                },
            }
        } else if roll < 83 {
            let Some(hold_id) = pick_hold(&mut rng) else {
                continue;
            };
            match roll {
                45..=59 => Request::Confirm { hold_id },
                60..=67 => Request::Release { hold_id },
                68..=72 => Request::Extend {
                    hold_id,
                    ttl_ms: rng.gen_range(1_000..=TTL_MAX_MS),
                },
                73..=77 => Request::Refund {
                    hold_id,
                    restock: rng.gen_bool(0.5),
                },
                _ => Request::GetHold { hold_id },
            }
        } else if roll < 86 {
            let group = &shared.groups[rng.gen_range(0..shared.groups.len())];
            Request::GetPool {
                pool: group[rng.gen_range(0..group.len())].clone(),
            }
        } else if roll < 88 {
            let group = &shared.groups[rng.gen_range(0..shared.groups.len())];
            let delta = if rng.gen_bool(0.5) {
                rng.gen_range(1..=4)
            } else {
                -rng.gen_range(1..=6)
            };
            // Half of them name a request id: a new one, or now and then one every client
            // shares (a conflict, unless it is the first). They are sent again below, as
            // reserves are: retries that must change nothing.
            made += 1;
            let request_id = rng.gen_bool(0.5).then(|| match rng.gen_bool(0.1) {
                true => "r-shared".to_string(),
                false => format!("r{process}-{made}"),
            });
            Request::Restock {
                pool: group[rng.gen_range(0..group.len())].clone(),
                delta,
                request_id,
            }
        } else {
            let ttl_ms = rng.gen_range(150..=400);
            match lease.take() {
                None => Request::LockAcquire {
                    name: LOCK_NAMES[rng.gen_range(0..LOCK_NAMES.len())].to_string(),
                    owner: owner.clone(),
                    ttl_ms,
                },
                Some((name, token)) if rng.gen_bool(0.6) => {
                    lease = Some((name.clone(), token));
                    Request::LockRenew {
                        name,
                        owner: owner.clone(),
                        token,
                        ttl_ms,
                    }
                }
                Some((name, token)) => Request::LockRelease {
                    name,
                    owner: owner.clone(),
                    token,
                },
            }
        };

        // Now and then two copies of a change at once, as a client whose first copy seems slow
        // sends a second without waiting, or two tabs of one shopper: both are recorded (the
        // copy as another process), and at most one may take effect.
        let copied = !matches!(
            request,
            Request::LockAcquire { .. }
                | Request::LockRenew { .. }
                | Request::LockRelease { .. }
                | Request::GetHold { .. }
                | Request::GetPool { .. }
        ) && rng.gen_bool(0.08);
        let outcome = if copied {
            let copy = recorder.perform(&api, process + COPY_PROCESS, request.clone());
            let first = recorder.perform(&api, process, request.clone());
            tokio::join!(first, copy).0
        } else {
            recorder.perform(&api, process, request.clone()).await
        };
        // Holds that may exist are the ones others race on.
        if let (
            Request::Restock {
                request_id: Some(_),
                ..
            },
            None | Some((200, _)),
        ) = (&request, status_of(&outcome))
        {
            if !sent.contains(&request) {
                sent.push(request.clone());
                if sent.len() > 8 {
                    sent.remove(0);
                }
            }
        }
        if let (Request::Reserve { hold_id, .. }, None | Some((200 | 201, _))) =
            (&request, status_of(&outcome))
        {
            if !sent.contains(&request) {
                sent.push(request.clone());
                if sent.len() > 8 {
                    sent.remove(0);
                }
            }
            let mut recent = shared.recent_holds.lock().unwrap();
            if !recent.contains(hold_id) {
                recent.push(hold_id.clone());
                if recent.len() > RECENT_HOLDS {
                    recent.remove(0);
                }
            }
        }
        match (&request, status_of(&outcome)) {
            (Request::Reserve { .. }, None)
            | (
                Request::Restock {
                    request_id: Some(_),
                    ..
                },
                None,
            ) => retries.push(request),
            (Request::LockAcquire { name, .. }, Some((200, body))) => {
                lease = body["token"].as_u64().map(|token| (name.clone(), token));
            }
            (Request::LockRenew { .. }, Some((status, _))) if status != 200 => lease = None,
            _ => {}
        }
        if status_of(&outcome).is_none() {
            // The server is down or Redis is: do not spin on refused connections.
            tokio::time::sleep(Duration::from_millis(rng.gen_range(20..=60))).await;
        }
    }
}

/// What gets killed during a run.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL one stockd server (the first, then the next...), restart it on its data dir.
    Server,
    /// SIGKILL Redis (AOF, appendfsync always) and restart it.
    Redis,
    /// SIGKILL the primary of a primary and its replica watched by three Sentinels (servers on
    /// `redis+sentinel://` with `--redis-replicas 1`); once the replica is promoted, the killed
    /// node comes back as its replica, as a supervisor would restart it.
    Failover,
    /// SIGKILL a primary of a 3-primary Redis Cluster with replicas (servers with
    /// `--redis-replicas 1`); once its replica took over, the killed node comes back as the new
    /// primary's replica.
    ClusterFailover,
}

/// What a scenario kills besides stockd servers.
#[derive(Clone)]
enum Killable {
    Nothing,
    Redis(Arc<RedisBackend>),
    Sentinels(Arc<SentinelGroup>),
    Cluster(Arc<RedisClusterBackend>),
}

/// A backend for the stockd servers, and what the scenario's faults kill.
type Backends = (Arc<dyn TestBackend>, Killable);

struct Scenario {
    name: &'static str,
    servers: usize,
    fault: Fault,
    backend: fn() -> Backends,
}

fn embedded() -> Backends {
    (Arc::new(EmbeddedBackend), Killable::Nothing)
}

fn redis() -> Backends {
    (Arc::new(RedisBackend::start()), Killable::Nothing)
}

fn sentinels() -> Backends {
    let group = Arc::new(SentinelGroup::start(1));
    (group.clone(), Killable::Sentinels(group))
}

fn durable_redis() -> Backends {
    let redis = Arc::new(RedisBackend::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]));
    (redis.clone(), Killable::Redis(redis))
}

fn cluster() -> Backends {
    (Arc::new(RedisClusterBackend::start(4)), Killable::Nothing)
}

fn cluster_with_replicas() -> Backends {
    let mut cluster = RedisClusterBackend::start(4);
    cluster.server_args = vec!["--redis-replicas".into(), "1".into()];
    let cluster = Arc::new(cluster);
    (cluster.clone(), Killable::Cluster(cluster))
}

/// A pool of the run.
struct PoolSpec {
    name: String,
    total: u64,
    per_user_limit: Option<u64>,
    low_stock_threshold: Option<u64>,
    segments: Option<u64>,
}

/// Pools of the run. On a Cluster, more pools, so that some partitions get several (a hold
/// combines pools of one partition, as far as the client knows). Two pools are segmented, one
/// with a per-user limit and a low-stock threshold: on a Cluster their segments live in other
/// partitions than their own events (the checker judges them in real time); elsewhere they are
/// kept whole.
fn pool_specs(many: bool) -> Vec<PoolSpec> {
    let base = [
        (100, Some(8), Some(20), Some(3)),
        (60, None, Some(10), None),
        (30, Some(4), None, None),
        (120, None, None, Some(2)),
    ];
    let copies = if many { 3 } else { 1 };
    (0..copies)
        .flat_map(|copy| {
            base.iter()
                .enumerate()
                .map(
                    move |(i, &(total, per_user_limit, low, segments))| PoolSpec {
                        name: format!("pool-{copy}-{i}"),
                        total,
                        per_user_limit,
                        low_stock_threshold: low,
                        segments: segments.filter(|_| copy == 0),
                    },
                )
        })
        .collect()
}

async fn wait_ready(apis: &[Api]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for api in apis {
        while !matches!(api.try_call("GET", "/readyz", None).await, Ok((200, _))) {
            assert!(
                std::time::Instant::now() < deadline,
                "the service did not come back after the faults"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Runs one history of `secs` seconds and checks it.
async fn run_history(scenario: &Scenario, seed: u64, secs: u64) -> stockd_history::Stats {
    let (backend, killable) = tokio::task::block_in_place(scenario.backend);
    let mut servers = Server::fleet(backend.clone(), scenario.servers).await;
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    let recorder = Arc::new(Recorder::default());

    // Pools, recorded like every other request; grouped by the partition their answer names.
    let specs = pool_specs(matches!(scenario.name, "cluster" | "cluster-failover"));
    let mut by_partition: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for spec in specs {
        let pool = spec.name;
        let request = Request::PutPool {
            pool: pool.clone(),
            total: spec.total,
            per_user_limit: spec.per_user_limit,
            low_stock_threshold: spec.low_stock_threshold,
            segments: spec.segments,
        };
        let outcome = recorder.perform(&apis[0], CLIENTS, request).await;
        let Some((201, body)) = status_of(&outcome) else {
            panic!("create {pool}: {outcome:?}");
        };
        let partition = body["partition"].as_u64().expect("partition");
        by_partition.entry(partition).or_default().push(pool);
    }
    let shared = Arc::new(Shared {
        groups: by_partition.into_values().collect(),
        recent_holds: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });

    let clients: Vec<_> = (0..CLIENTS)
        .map(|process| {
            let api = apis[process as usize % apis.len()].clone();
            let client_seed = seed.wrapping_mul(1_000).wrapping_add(process as u64);
            tokio::spawn(client(
                api,
                process,
                client_seed,
                shared.clone(),
                recorder.clone(),
            ))
        })
        .collect();

    // Faults, spread over the run.
    let mut outage_max = Duration::ZERO;
    let gap = Duration::from_millis(secs * 1_000 / (KILLS as u64 + 1));
    for kill in 0..KILLS {
        tokio::time::sleep(gap).await;
        match scenario.fault {
            Fault::Server => {
                let server = &mut servers[kill as usize % scenario.servers];
                server.kill();
                tokio::time::sleep(DOWN_FOR).await;
                server.start_again().await;
            }
            Fault::Redis => {
                let Killable::Redis(redis) = &killable else {
                    panic!("no Redis to kill")
                };
                redis.redis.kill();
                tokio::time::sleep(DOWN_FOR).await;
                tokio::task::block_in_place(|| redis.redis.start_again());
            }
            Fault::Failover => {
                let Killable::Sentinels(group) = &killable else {
                    panic!("no primary to fail over")
                };
                let killed = std::time::Instant::now();
                tokio::task::block_in_place(|| {
                    let old = group.kill_primary();
                    let promoted = group.wait_promoted(old);
                    group.bring_back(old);
                    eprintln!(
                        "failover: the replica promoted {promoted:?} after the kill, its own \
                         replica back {:?} after it",
                        killed.elapsed()
                    );
                });
                // No change is acknowledged from the kill until the new primary has a replica
                // again: expiries wait that long too.
                outage_max = outage_max.max(killed.elapsed());
            }
            Fault::ClusterFailover => {
                let Killable::Cluster(cluster) = &killable else {
                    panic!("no Cluster to fail over")
                };
                let killed = std::time::Instant::now();
                tokio::task::block_in_place(|| {
                    let primary = cluster.primaries()[kill as usize % 3];
                    let replica = cluster
                        .replica_of(primary.port)
                        .expect("the primary has a replica");
                    primary.kill();
                    let deadline = killed + Duration::from_secs(30);
                    while !replica.cli(&["ROLE"]).starts_with("master") {
                        assert!(std::time::Instant::now() < deadline, "no replica took over");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    let promoted = killed.elapsed();
                    primary.start_again();
                    cluster.wait_healthy();
                    eprintln!(
                        "cluster failover: the replica took over {promoted:?} after the kill, the \
                         killed node back as its replica {:?} after it",
                        killed.elapsed()
                    );
                });
                outage_max = outage_max.max(killed.elapsed());
            }
        }
    }
    tokio::time::sleep(gap).await;
    shared.stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.expect("client panicked");
    }

    // The end: every deadline passed (plus the sweeper's second), then every pool and every
    // hold read, and the feed last, so that it holds whatever those reads caused.
    let apis: Vec<Api> = servers.iter().map(Server::api).collect();
    wait_ready(&apis).await;
    tokio::time::sleep(Duration::from_millis(TTL_MAX_MS + 1_200)).await;
    let mut reads = Vec::new();
    for group in &shared.groups {
        reads.extend(
            group
                .iter()
                .map(|pool| Request::GetPool { pool: pool.clone() }),
        );
    }
    let mut hold_ids: Vec<String> = recorder
        .ops
        .lock()
        .unwrap()
        .iter()
        .filter_map(|op| match &op.request {
            Request::Reserve { hold_id, .. } => Some(hold_id.clone()),
            _ => None,
        })
        .collect();
    hold_ids.sort();
    hold_ids.dedup();
    reads.extend(
        hold_ids
            .into_iter()
            .map(|hold_id| Request::GetHold { hold_id }),
    );
    let readers: Vec<_> = (0..4u32)
        .map(|reader| {
            let mine: Vec<Request> = reads
                .iter()
                .skip(reader as usize)
                .step_by(4)
                .cloned()
                .collect();
            let (api, recorder) = (apis[reader as usize % apis.len()].clone(), recorder.clone());
            tokio::spawn(async move {
                for request in mine {
                    recorder.perform(&api, CLIENTS + 1 + reader, request).await;
                }
            })
        })
        .collect();
    for reader in readers {
        reader.await.expect("reader panicked");
    }
    let partitions = apis[0].partitions().await;
    let mut feed = Vec::new();
    for partition in 0..partitions {
        feed.push(apis[0].events_in(partition, 0).await);
    }
    let history = History {
        ops: std::mem::take(&mut *recorder.ops.lock().unwrap()),
        feed,
        feed_read_us: now_us(),
    };

    let mut bounds = Bounds::default();
    bounds.expiry_lag_max_ms += outage_max.as_millis() as u64;
    let report = check(&history, bounds);
    let stats = report.stats.clone();
    eprintln!(
        "history {} (seed {seed}): {} ops ({} answered, {} unknown), {} events over {} \
         partitions, {} holds, {} expiries (lag at most {} ms), {} lock grants, {} ops whose \
         place in the feed is a guess, {} pools judged in real time ({} answers of theirs not \
         judged exactly); answers: {:?}",
        scenario.name,
        stats.ops,
        stats.answered,
        stats.unknown,
        stats.events,
        partitions,
        stats.holds,
        stats.expiries,
        stats.expiry_lag_max_ms,
        stats.lock_grants,
        stats.unsure,
        stats.spread_pools,
        stats.spread_unchecked,
        stats.answers.iter().collect::<BTreeMap<_, _>>()
    );
    if !report.ok() {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("history-{}-{seed}.json", scenario.name));
        std::fs::write(&path, serde_json::to_vec(&history).expect("serialise"))
            .expect("write the history");
        let shown: Vec<&String> = report.violations.iter().take(20).collect();
        panic!(
            "history {} (seed {seed}) is not explained by the feed: {} violations; the history \
             is in {}\n{shown:#?}\nanswers: {:?}",
            scenario.name,
            report.violations.len(),
            path.display(),
            stats.answers
        );
    }
    tampered_copies_are_rejected(&history, scenario.name);
    // A run that tested nothing must not pass.
    assert!(
        stats.answered >= 300 && stats.holds >= 50 && stats.expiries >= 5,
        "history {} (seed {seed}) too thin to mean anything: {stats:?}",
        scenario.name
    );
    // On a Cluster the segmented pools' units are taken in other partitions than their events.
    assert!(
        !scenario.name.starts_with("cluster") || stats.spread_pools >= 2,
        "history {} (seed {seed}): the segmented pools were not judged in real time: {stats:?}",
        scenario.name
    );
    assert!(
        stats.unknown >= 1,
        "history {}: the kills left no request without an answer",
        scenario.name
    );
    stats
}

/// The checker is not blind on real histories: copies of this one, each with one thing made
/// wrong, are rejected.
fn tampered_copies_are_rejected(history: &History, name: &str) {
    let rejected = |tampered: &History, what: &str| {
        let report = check(tampered, Bounds::default());
        assert!(!report.ok(), "history {name}: the checker missed {what}");
    };

    // An acknowledged hold lost: its held event (and everything after it) gone.
    let created = history.ops.iter().rposition(|op| {
        matches!(op.request, Request::Reserve { .. })
            && matches!(op.outcome, Outcome::Answered { status: 201, .. })
    });
    let created = created.expect("a hold was made");
    let Request::Reserve { hold_id, .. } = &history.ops[created].request else {
        unreachable!("a reserve");
    };
    let mut lost = history.clone();
    for events in &mut lost.feed {
        if let Some(at) = events.iter().position(|e| e["hold_id"] == hold_id.as_str()) {
            events.truncate(at);
        }
    }
    rejected(&lost, "a lost acknowledged hold");

    // A hold applied twice: its held event again at the end of its partition.
    let mut twice = history.clone();
    for events in &mut twice.feed {
        let held = events
            .iter()
            .find(|e| e["type"] == "held" && e["hold_id"] == hold_id.as_str())
            .cloned();
        if let (Some(mut again), Some(last)) = (held, events.last().cloned()) {
            again["seq"] = serde_json::json!(events.len() + 1);
            again["at_ms"] = last["at_ms"].clone();
            events.push(again);
        }
    }
    rejected(&twice, "a hold applied twice");

    // A stale or invented read: a pool answer with a total it never had.
    let mut read = history.clone();
    let pool_read = read.ops.iter_mut().find(|op| {
        matches!(op.request, Request::GetPool { .. })
            && matches!(op.outcome, Outcome::Answered { status: 200, .. })
    });
    if let Some(Op {
        outcome: Outcome::Answered { body, .. },
        ..
    }) = pool_read
    {
        body["total"] = serde_json::json!(body["total"].as_u64().unwrap_or(0) + 1_000);
        body["available"] = serde_json::json!(body["available"].as_u64().unwrap_or(0) + 1_000);
        rejected(&read, "a pool read no state explains");
    }

    // A fencing token handed out twice: the last grant gets the first grant's token.
    let grants: Vec<usize> = history
        .ops
        .iter()
        .enumerate()
        .filter(|(_, op)| {
            matches!(&op.request, Request::LockAcquire { name, .. } if name == LOCK_NAMES[0])
                && matches!(op.outcome, Outcome::Answered { status: 200, .. })
        })
        .map(|(i, _)| i)
        .collect();
    if let [first, .., last] = grants[..] {
        let mut reused = history.clone();
        let token = match &history.ops[first].outcome {
            Outcome::Answered { body, .. } => body["token"].clone(),
            Outcome::Unknown { .. } => unreachable!("answered"),
        };
        if let Outcome::Answered { body, .. } = &mut reused.ops[last].outcome {
            body["token"] = token;
        }
        rejected(&reused, "a fencing token handed out twice");
    }
}

async fn run_scenario(scenario: Scenario) {
    let runs = env_number("STOCKD_HISTORY_RUNS", 1);
    let secs = env_number("STOCKD_HISTORY_SECS", 3);
    let first_seed = env_number("STOCKD_HISTORY_SEED", rand::thread_rng().gen());
    let (mut ops, mut events, mut unknown) = (0, 0, 0);
    for run in 0..runs {
        let seed = first_seed.wrapping_add(run);
        let stats = run_history(&scenario, seed, secs).await;
        ops += stats.ops;
        events += stats.events;
        unknown += stats.unknown;
    }
    eprintln!(
        "history {}: {runs} histories checked, {ops} operations ({unknown} unknown), {events} \
         events",
        scenario.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_engine_killed_history_is_explained() {
    run_scenario(Scenario {
        name: "embedded",
        servers: 1,
        fault: Fault::Server,
        backend: embedded,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_two_servers_one_killed_history_is_explained() {
    run_scenario(Scenario {
        name: "redis",
        servers: 2,
        fault: Fault::Server,
        backend: redis,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_itself_killed_history_is_explained() {
    run_scenario(Scenario {
        name: "redis-killed",
        servers: 2,
        fault: Fault::Redis,
        backend: durable_redis,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_primary_failed_over_to_its_replica_history_is_explained() {
    run_scenario(Scenario {
        name: "failover",
        servers: 2,
        fault: Fault::Failover,
        backend: sentinels,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_primaries_failed_over_to_their_replicas_history_is_explained() {
    run_scenario(Scenario {
        name: "cluster-failover",
        servers: 2,
        fault: Fault::ClusterFailover,
        backend: cluster_with_replicas,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_two_servers_one_killed_history_is_explained() {
    run_scenario(Scenario {
        name: "cluster",
        servers: 2,
        fault: Fault::Server,
        backend: cluster,
    })
    .await;
}
