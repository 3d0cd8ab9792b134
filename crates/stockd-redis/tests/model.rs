//! The model sequences of stockd-model, run through the `Backend` trait against the Redis
//! library (`lua/`), the second implementation of the core's rules: every outcome, event (read
//! back from the partition's stream) and view must be the model's, as they are for `State`.
//!
//! Twice: on a single Redis (one partition), and on a Redis Cluster of one node that owns every
//! slot, with 16 partitions, so that the model's pools fall in different partitions and its
//! holds span several: there the cross-partition protocol (lua/cross.lua) must be invisible, and
//! each partition's events must be the model's events of that partition, in order.
//!
//! A real `redis-server` of the test's own runs on a free loopback port, without persistence;
//! each case starts from `FLUSHALL` with a fresh backend. Time is the backend's test clock
//! (feature `test-clock`, so the `NOW` of every call), which only the runner moves; the
//! background sweeper is off and the target sweeps every partition (`sweep_now`, the sweeper's
//! own code) right after moving the clock, as `State::tick` runs after time passes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::test_runner::{Config, TestCaseError, TestRunner};
use stockd_core::limits::EVENT_LIMIT_MAX;
use stockd_core::{
    Backend, Command, Event, EventsRequest, HoldId, HoldView, Outcome, PoolView, Reply,
};
use stockd_model::rules::{self, OnBackend, Parking};
use stockd_model::{self as model, Views, CONFIG, START_MS};
use stockd_redis::{RedisBackend, RedisConfig, TestClock};
use tokio::runtime::Runtime;

mod common;
use common::RedisProcess;

/// A backend on an emptied Redis (a one-node cluster when `partitions` > 1), with the
/// retention of `config`, no background sweeper, and a test clock that starts at `start_ms` and
/// that only the caller moves (the returned counter).
fn fresh_backend(
    runtime: &Runtime,
    url: &str,
    partitions: u32,
    config: stockd_core::StateConfig,
    start_ms: u64,
) -> Result<(RedisBackend, Arc<AtomicU64>), String> {
    let now_ms = Arc::new(AtomicU64::new(start_ms));
    let clock = now_ms.clone();
    let target = if partitions > 1 {
        stockd_redis::Target::Cluster(vec![url.to_string()])
    } else {
        stockd_redis::Target::Single(url.to_string())
    };
    let config = RedisConfig {
        hold_retention_ms: config.hold_retention_ms,
        confirmed_retention_ms: config.confirmed_retention_ms,
        clock: Some(TestClock(Arc::new(move || clock.load(Ordering::SeqCst)))),
        background_sweep: false,
        partitions,
        ..RedisConfig::new(target)
    };
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut connection = client.get_connection().map_err(|e| e.to_string())?;
    redis::cmd("FLUSHALL")
        .query::<()>(&mut connection)
        .map_err(|e| e.to_string())?;
    let backend = runtime
        .block_on(RedisBackend::connect(config))
        .map_err(|e| e.to_string())?;
    Ok((backend, now_ms))
}

struct RedisTarget<'a> {
    runtime: &'a Runtime,
    now_ms: Arc<AtomicU64>,
    backend: RedisBackend,
    partitions: u32,
    /// With several partitions: the last seq read of each (see `Target::events_after`).
    read: Vec<u64>,
    /// The partition of every hold seen (its home: its first pool's, or the one a directory
    /// entry left by an earlier attempt of its id points to), for its events.
    homes: std::collections::HashMap<HoldId, u32>,
}

impl<'a> RedisTarget<'a> {
    /// A fresh backend on an empty Redis (a one-node cluster when `partitions` > 1), its clock
    /// at [`START_MS`].
    fn open(runtime: &'a Runtime, url: &str, partitions: u32) -> Result<Self, String> {
        let (backend, now_ms) = fresh_backend(runtime, url, partitions, CONFIG, START_MS)?;
        Ok(RedisTarget {
            runtime,
            now_ms,
            backend,
            partitions,
            read: vec![0; partitions as usize],
            homes: std::collections::HashMap::new(),
        })
    }

    fn partition_of(&self, pool: &str) -> u32 {
        stockd_redis::keys::partition_of(pool, self.partitions)
    }

    /// A pool view's partition must be its pool's, and a hold's must stay the same while the hold
    /// lives; it is then set to 0, as the model (one partition) has it.
    fn normalise_pool(&self, pool: &mut PoolView) -> Result<(), String> {
        let want = self.partition_of(pool.pool.as_str());
        if pool.partition != want {
            return Err(format!(
                "pool {} in partition {}, not {want}",
                pool.pool, pool.partition
            ));
        }
        pool.partition = 0;
        Ok(())
    }

    fn normalise_hold(&mut self, hold: &mut HoldView) -> Result<(), String> {
        if hold.partition >= self.partitions {
            return Err(format!(
                "hold {} in partition {}",
                hold.hold_id, hold.partition
            ));
        }
        self.homes.insert(hold.hold_id.clone(), hold.partition);
        hold.partition = 0;
        Ok(())
    }

    fn normalise(&mut self, outcome: &mut Outcome) -> Result<(), String> {
        match outcome {
            Ok(Reply::Pool { pool, .. }) => self.normalise_pool(pool),
            Ok(Reply::PoolList { pools, .. }) => pools
                .iter_mut()
                .try_for_each(|pool| self.normalise_pool(pool)),
            Ok(Reply::Hold { hold, .. }) => self.normalise_hold(hold),
            Ok(Reply::HoldList { holds, .. }) => holds
                .iter_mut()
                .try_for_each(|hold| self.normalise_hold(hold)),
            _ => Ok(()),
        }
    }
}

impl model::Target for RedisTarget<'_> {
    fn execute(&mut self, commands: &[Command]) -> Result<Vec<Outcome>, String> {
        let mut outcomes = self
            .runtime
            .block_on(Backend::execute(&self.backend, commands.to_vec()))
            .map_err(|e| e.to_string())?;
        for outcome in &mut outcomes {
            self.normalise(outcome)?;
        }
        Ok(outcomes)
    }

    fn partitions(&self) -> u32 {
        self.partitions
    }

    fn event_partition(&self, event: &Event) -> u32 {
        match (&event.hold_id, &event.pool) {
            (Some(hold_id), _) => self.homes.get(hold_id).copied().unwrap_or(u32::MAX),
            (None, Some(pool)) => self.partition_of(pool.as_str()),
            (None, None) => u32::MAX,
        }
    }

    fn advance(&mut self, ms: u64, sweep: bool) -> Result<(), String> {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
        if !sweep {
            return Ok(());
        }
        self.runtime
            .block_on(self.backend.sweep_now())
            .map_err(|e| e.to_string())
    }

    fn events_after(&mut self, after: u64) -> Result<Vec<Event>, String> {
        if self.partitions == 1 {
            return self
                .runtime
                .block_on(model::read_events(&self.backend, after));
        }
        let mut all = Vec::new();
        for partition in 0..self.partitions {
            let after = self.read[partition as usize];
            let request = EventsRequest::at_once(partition, after, EVENT_LIMIT_MAX);
            let page = self
                .runtime
                .block_on(self.backend.events(request))
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("events of partition {partition}: {e}"))?;
            let mut last = after;
            for event in page.events {
                if event.seq <= last {
                    return Err(format!(
                        "partition {partition}: seq {} after {last}",
                        event.seq
                    ));
                }
                if self.event_partition(&event) != partition {
                    return Err(format!("partition {partition} carries {event:?}"));
                }
                last = event.seq;
                all.push(event);
            }
            self.read[partition as usize] = last;
        }
        Ok(all)
    }

    fn views(&mut self, holds: &[HoldId]) -> Result<Views, String> {
        let mut views = self
            .runtime
            .block_on(model::read_views(&self.backend, holds))?;
        for pool in &mut views.pools {
            self.normalise_pool(pool)?;
        }
        for hold in views.holds.iter_mut().flatten() {
            self.normalise_hold(hold)?;
        }
        Ok(views)
    }
}

/// Runs the model sequences against a Redis of `partitions` partitions at `url`.
fn matches_model(url: &str, partitions: u32, cases: u32) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // Backends are made and dropped inside the runtime (their tasks live there).
    let _entered = runtime.enter();
    let mut runner = TestRunner::new(Config {
        cases: model::cases(cases),
        // A case on 16 partitions takes seconds: shrink less there.
        max_shrink_iters: if partitions > 1 { 64 } else { 1_024 },
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&model::sequences(50..=200), |steps| {
        let mut target = RedisTarget::open(&runtime, url, partitions)
            .map_err(|e| TestCaseError::fail(format!("connecting to Redis: {e}")))?;
        model::check_sequence(&mut target, &steps)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// The Redis library agrees with the model at every step (64 sequences of 50-200 steps by
/// default; `PROPTEST_CASES` changes the count).
#[test]
fn redis_matches_model() {
    let server = RedisProcess::start(&[]);
    matches_model(&server.url(), 1, 64);
}

/// The same on 16 partitions of a one-node Cluster: the model's three pools fall in different
/// partitions, so most of its holds span several and go through the cross-partition protocol.
#[test]
fn redis_cluster_of_16_partitions_matches_model() {
    let server = RedisProcess::start_one_node_cluster();
    matches_model(&server.url(), 16, 16);
}

/// Runs `steps` against the model `runs` times, each on a fresh dataset of 16 partitions of a
/// one-node Cluster.
fn fixed_sequence_on_16_partitions(steps: &[model::Step], runs: usize) {
    let server = RedisProcess::start_one_node_cluster();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _entered = runtime.enter();
    for _ in 0..runs {
        let mut target = RedisTarget::open(&runtime, &server.url(), 16).expect("connecting");
        if let Err(failure) = model::check_sequence(&mut target, steps) {
            panic!("{failure}");
        }
    }
}

/// `PUT` of pool `pool` (an index into the model's pools) with `total` units and no rules.
fn put_pool(pool: usize, total: u64, segments: Option<u64>) -> model::Op {
    model::Op::PutPool {
        pool,
        total,
        per_user_limit: None,
        starts_offset_ms: None,
        ends_offset_ms: None,
        low_stock_threshold: None,
        segments,
        if_absent: false,
    }
}

/// A hold of a segmented pool refunded in the request that deletes the pool: its event names
/// a segment of a pool that no longer exists once the request is over, and is checked against
/// the segments the pool had (the runner once read them after the request, found the pool
/// gone and took it for a pool of one segment).
#[test]
fn a_hold_refunded_as_its_segmented_pool_is_deleted_matches_model() {
    use model::{Op, Step};
    let steps = [
        Step::Commands(vec![put_pool(0, 6, Some(3))]),
        Step::Commands(vec![put_pool(1, 0, None)]),
        Step::Commands(vec![Op::Reserve {
            hold: 4,
            user: Some(1),
            items: vec![(0, 2)],
            ttl_ms: 2_500,
            confirm: true,
            wait_ms: 0,
        }]),
        Step::Commands(vec![
            Op::Refund {
                hold: 4,
                restock: true,
            },
            Op::DeletePool { pool: 0 },
        ]),
    ];
    // Refunds go to a segment in the order of the partitions' answers: a few runs reach
    // segments past the first.
    fixed_sequence_on_16_partitions(&steps, 8);
}

/// A refused restock and a restock of another pool with the same request id, in one request:
/// the first leaves the id new, so the second applies (on a Cluster the first's claim of the
/// id is taken back before the second claims it).
#[test]
fn a_request_id_refused_then_used_for_another_pool_in_one_request_matches_model() {
    use model::{Op, Step};
    let restock = |pool, delta| Op::Restock {
        pool,
        delta,
        request: Some(0),
    };
    let steps = [
        Step::Commands(vec![put_pool(0, 5, None), put_pool(2, 5, None)]),
        Step::Commands(vec![restock(0, -100), restock(2, 1)]),
    ];
    fixed_sequence_on_16_partitions(&steps, 1);
}

/// A Redis for stockd-model's rule scenarios: a single Redis, or a one-node Cluster of several
/// partitions. Its parked requests are the members of the queues of the hold ids and lock names
/// sent with a wait (`holdq:ID` in the reserve's home, `lockq:NAME` in the lock's partition).
struct RedisParking {
    now_ms: Arc<AtomicU64>,
    backend: Arc<RedisBackend>,
    redis: redis::Connection,
    partitions: u32,
    keys: Vec<stockd_redis::keys::PartitionKeys>,
    /// The queues of every hold id and lock name sent with a wait.
    queues: std::collections::BTreeSet<String>,
    /// Per partition, the seq of the last event read.
    read: Vec<u64>,
}

impl RedisParking {
    /// A fresh backend on an empty Redis (a one-node cluster when `partitions` > 1), its clock at
    /// the scenarios' start.
    fn open(runtime: &Runtime, url: &str, partitions: u32) -> Result<Self, String> {
        let (backend, now_ms) = fresh_backend(runtime, url, partitions, rules::CONFIG, rules::T0)?;
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let redis = client.get_connection().map_err(|e| e.to_string())?;
        Ok(RedisParking {
            now_ms,
            backend: Arc::new(backend),
            redis,
            partitions,
            keys: (0..partitions)
                .map(|k| stockd_redis::keys::PartitionKeys::new(k, partitions))
                .collect(),
            queues: std::collections::BTreeSet::new(),
            read: vec![0; partitions as usize],
        })
    }

    fn queue_of(&self, command: &Command) -> Option<String> {
        let in_partition = |id: &str| {
            let k = stockd_redis::keys::partition_of(id, self.partitions);
            &self.keys[k as usize].prefix
        };
        match command {
            Command::Reserve(request) => {
                let home = in_partition(request.items.first()?.pool.as_str());
                Some(format!("{home}holdq:{}", request.hold_id))
            }
            Command::LockAcquire(request) => {
                let at = in_partition(request.name.as_str());
                Some(format!("{at}lockq:{}", request.name))
            }
            _ => None,
        }
    }
}

impl Parking for RedisParking {
    fn backend(&self) -> Arc<dyn Backend> {
        self.backend.clone()
    }

    fn set_clock(&mut self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    fn sweep(&mut self, runtime: &Runtime) -> Result<(), String> {
        runtime
            .block_on(self.backend.sweep_now())
            .map_err(|e| e.to_string())
    }

    fn parked_with(&mut self, command: &Command) -> Result<usize, String> {
        let queue = self.queue_of(command).ok_or("a command that cannot wait")?;
        self.queues.insert(queue.clone());
        redis::cmd("ZCARD")
            .arg(&queue)
            .query(&mut self.redis)
            .map_err(|e| e.to_string())
    }

    fn parked(&mut self) -> Result<usize, String> {
        if self.queues.is_empty() {
            return Ok(0);
        }
        let mut pipe = redis::pipe();
        for queue in &self.queues {
            pipe.cmd("ZCARD").arg(queue);
        }
        let counts: Vec<usize> = pipe.query(&mut self.redis).map_err(|e| e.to_string())?;
        Ok(counts.iter().sum())
    }

    /// Partition by partition, each in seq order.
    fn events(&mut self, runtime: &Runtime) -> Result<Vec<Event>, String> {
        let mut all = Vec::new();
        for partition in 0..self.partitions {
            let after = self.read[partition as usize];
            let request = EventsRequest::at_once(partition, after, EVENT_LIMIT_MAX);
            let page = runtime
                .block_on(self.backend.events(request))
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("events of partition {partition}: {e}"))?;
            if let Some(last) = page.events.last() {
                self.read[partition as usize] = last.seq;
            }
            all.extend(page.events);
        }
        Ok(all)
    }

    /// Partitions as the core has them (0): a scenario's views do not depend on where a pool
    /// or a hold lives.
    fn normalise(&mut self, outcome: &mut Outcome) {
        match outcome {
            Ok(Reply::Pool { pool, .. }) => pool.partition = 0,
            Ok(Reply::PoolList { pools, .. }) => pools.iter_mut().for_each(|p| p.partition = 0),
            Ok(Reply::Hold { hold, .. }) => hold.partition = 0,
            Ok(Reply::HoldList { holds, .. }) => holds.iter_mut().for_each(|h| h.partition = 0),
            _ => {}
        }
    }
}

/// The Redis library follows stockd-model's rule scenarios (the same scenarios run on the core's
/// `State` and on the engine), on a single Redis.
#[test]
fn redis_follows_the_rule_scenarios() {
    let server = RedisProcess::start(&[]);
    follows_the_rule_scenarios(&server.url(), 1, &[]);
}

/// The same on 16 partitions of a one-node Cluster, where most multi-pool holds go through the
/// cross-partition protocol. Left out: the two scenarios of waits over pools of several
/// partitions (such a reserve does not queue there: docs/redis.md, "Waiting, expiry, the
/// feed"), and the full wait queue, the same code as on one partition but 10,000 requests sent
/// through the directory, which outlast the minute a waiter's hash lives past its deadline by
/// Redis's real clock (the test clock stands still meanwhile).
#[test]
fn redis_cluster_of_16_partitions_follows_the_rule_scenarios() {
    let server = RedisProcess::start_one_node_cluster();
    follows_the_rule_scenarios(
        &server.url(),
        16,
        &[
            rules::WAITERS_ACROSS_POOLS,
            rules::WAIT_DEADLINE_ACROSS_POOLS,
            rules::WAIT_QUEUE_BOUNDED,
        ],
    );
}

fn follows_the_rule_scenarios(url: &str, partitions: u32, left_out: &[&str]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _entered = runtime.enter();
    let runtime = &runtime;
    let open = || -> Box<dyn rules::RuleTarget> {
        let parking = RedisParking::open(runtime, url, partitions).expect("connecting to Redis");
        Box::new(OnBackend::new(runtime, parking))
    };
    rules::run_scenarios_but(open, left_out);
}
