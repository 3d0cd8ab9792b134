//! The embedded engine end to end, in process: durability across restarts, expiry with no
//! traffic, waiters, snapshots and fencing tokens. Time is a [`ManualClock`]; nothing sleeps.

use std::sync::Arc;
use std::time::Duration;

use stockd_core::{
    Command, Error, EventKind, EventsRequest, HoldId, HoldItem, HoldStatus, LockName, LockRequest,
    Outcome, OwnerId, PoolId, PoolSpec, Reply, RequestId, ReserveRequest,
};
use stockd_engine::{Engine, EngineConfig, ManualClock};
use tokio::task::JoinHandle;

const T0: u64 = 1_700_000_000_000;

fn pool(id: &str) -> PoolId {
    PoolId::parse(id).unwrap()
}
fn hold(id: &str) -> HoldId {
    HoldId::parse(id).unwrap()
}

fn put(id: &str, total: u64) -> Command {
    Command::PutPool {
        pool: pool(id),
        spec: PoolSpec {
            total,
            ..PoolSpec::default()
        },
        segments: None,
        if_absent: false,
    }
}

fn reserve(id: &str, pool_id: &str, qty: u64, ttl_ms: u64, wait_ms: u64) -> Command {
    Command::Reserve(ReserveRequest {
        hold_id: hold(id),
        user: None,
        items: vec![HoldItem {
            pool: pool(pool_id),
            qty,
        }]
        .into(),
        ttl_ms,
        confirm: false,
        wait_ms,
    })
}

fn get(id: &str) -> Command {
    Command::GetPool { pool: pool(id) }
}

fn confirm(id: &str) -> Command {
    Command::Confirm { hold_id: hold(id) }
}

fn release(id: &str) -> Command {
    Command::Release { hold_id: hold(id) }
}

struct Harness {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
}

impl Harness {
    fn new() -> Self {
        Harness {
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(ManualClock::new(T0)),
        }
    }
    fn config(&self) -> EngineConfig {
        EngineConfig::new(self.dir.path())
    }
    fn open(&self) -> Engine {
        self.open_with(self.config())
    }
    fn open_with(&self, config: EngineConfig) -> Engine {
        Engine::open(config, self.clock.clone()).unwrap()
    }
}

async fn one(engine: &Engine, command: Command) -> Result<Reply, Error> {
    engine.execute(vec![command]).await.unwrap().remove(0)
}

/// Runs one command that must succeed.
async fn ok(engine: &Engine, command: Command) -> Reply {
    one(engine, command).await.unwrap()
}

/// Holds `o-0` to `o-{count - 1}` of one unit of `sku` each, each a request of its own.
async fn hold_each(engine: &Engine, count: usize) {
    for i in 0..count {
        ok(engine, reserve(&format!("o-{i}"), "sku", 1, 60_000, 0)).await;
    }
}

/// Runs `commands` as one request on a task of its own, for a test to act meanwhile.
fn spawn_execute(engine: &Engine, commands: Vec<Command>) -> JoinHandle<Vec<Outcome>> {
    let engine = engine.clone();
    tokio::spawn(async move { engine.execute(commands).await.unwrap() })
}

/// Pokes the engine until `task` has finished, moving the clock `step_ms` before each poke;
/// bounded, so a task that never finishes fails the test with `what`.
async fn poke_until_finished<T>(
    h: &Harness,
    engine: &Engine,
    task: &JoinHandle<T>,
    step_ms: u64,
    what: &str,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !task.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        h.clock.advance(step_ms);
        engine.poke();
        tokio::task::yield_now().await;
    }
}

async fn pool_counts(engine: &Engine, id: &str) -> (u64, u64, u64, u64) {
    match one(engine, Command::GetPool { pool: pool(id) }).await {
        Ok(Reply::Pool { pool, .. }) => (pool.total, pool.available, pool.held, pool.sold),
        other => panic!("get pool: {other:?}"),
    }
}

async fn status(engine: &Engine, id: &str) -> HoldStatus {
    match one(engine, Command::GetHold { hold_id: hold(id) }).await {
        Ok(Reply::Hold { hold, .. }) => hold.status,
        other => panic!("get hold: {other:?}"),
    }
}

fn counter(engine: &Engine, name: &str) -> u64 {
    engine
        .stats()
        .counters
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| *v)
}

/// Polls (bounded) until the engine reports a parked waiter.
async fn wait_for_parked_waiter(engine: &Engine) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while engine
        .stats()
        .gauges
        .iter()
        .any(|(n, v)| *n == "waiters" && *v == 0.0)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waiter never parked"
        );
        tokio::task::yield_now().await;
        engine.poke();
    }
}

#[tokio::test]
async fn acknowledged_changes_survive_restart() {
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 10)).await;
    ok(&engine, reserve("o-1", "sku", 3, 60_000, 0)).await;
    ok(&engine, reserve("o-2", "sku", 2, 60_000, 0)).await;
    ok(&engine, confirm("o-2")).await;
    let before = engine.events(0, 0, 1000, 0).await.unwrap().events;
    // Dropped without shutdown: no final snapshot, recovery must replay the log.
    drop(engine);

    let engine = h.open();
    assert_eq!(pool_counts(&engine, "sku").await, (10, 5, 3, 2));
    assert_eq!(status(&engine, "o-1").await, HoldStatus::Held);
    assert_eq!(status(&engine, "o-2").await, HoldStatus::Confirmed);
    let after = engine.events(0, 0, 1000, 0).await.unwrap().events;
    assert_eq!(before, after, "the event feed is rebuilt exactly");
    ok(&engine, release("o-1")).await;
    let next = engine
        .events(0, before.last().unwrap().seq, 10, 0)
        .await
        .unwrap();
    assert_eq!(next.events[0].seq, before.last().unwrap().seq + 1);
    assert_eq!(next.events[0].kind, EventKind::Released);
    engine.shutdown().await;
}

/// A segmented pool's count is fixed for its life: the log replays it, a snapshot keeps it.
#[tokio::test]
async fn segment_counts_survive_log_replay_and_snapshots() {
    let h = Harness::new();
    let engine = h.open();
    let put_in = |id: &str, segments: Option<u64>| match put(id, 8) {
        Command::PutPool {
            pool,
            spec,
            if_absent,
            ..
        } => Command::PutPool {
            pool,
            spec,
            segments,
            if_absent,
        },
        _ => unreachable!("put makes a PutPool"),
    };
    ok(&engine, put_in("flash", Some(4))).await;
    ok(&engine, put_in("plain", None)).await;
    ok(&engine, put_in("flash", None)).await;
    let segments = |reply: Reply| match reply {
        Reply::Pool { pool, .. } => pool.segments,
        other => panic!("not a pool: {other:?}"),
    };
    // Dropped without shutdown: the log is replayed.
    drop(engine);
    let engine = h.open();
    assert_eq!(segments(ok(&engine, get("flash")).await), 4);
    assert_eq!(segments(ok(&engine, get("plain")).await), 1);
    assert!(matches!(
        one(&engine, put_in("flash", Some(2))).await,
        Err(Error::SegmentsFixed {
            segments: 4,
            requested: 2,
            ..
        })
    ));
    // Shut down: the snapshot carries the count.
    engine.shutdown().await;
    let engine = h.open();
    assert_eq!(segments(ok(&engine, get("flash")).await), 4);
    engine.shutdown().await;
}

#[tokio::test]
async fn graceful_shutdown_snapshots_and_restart_replays_nothing() {
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 10)).await;
    hold_each(&engine, 5).await;
    engine.shutdown().await;
    let engine = h.open();
    let stats = engine.stats();
    assert!(stats
        .counters
        .iter()
        .any(|(n, _)| *n == "wal_records_total"));
    assert_eq!(pool_counts(&engine, "sku").await, (10, 5, 5, 0));
    engine.shutdown().await;
    let snapshots = std::fs::read_dir(h.dir.path())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("snapshot-")
        })
        .count();
    assert_eq!(snapshots, 1, "one snapshot kept, older ones removed");
}

#[tokio::test]
async fn periodic_snapshots_keep_state_and_feed() {
    let h = Harness::new();
    let mut config = h.config();
    config.snapshot_every_records = 7;
    config.segment_bytes_max = 4 << 10;
    let engine = h.open_with(config.clone());
    ok(&engine, put("sku", 1000)).await;
    for i in 0..150 {
        ok(&engine, reserve(&format!("o-{i}"), "sku", 1, 60_000, 0)).await;
        if i % 3 == 0 {
            ok(&engine, confirm(&format!("o-{i}"))).await;
        }
    }
    let events = engine.events(0, 0, 1000, 0).await.unwrap().events;
    // Snapshots are built in the background; make sure at least two exist (so old segments
    // were dropped and recovery starts from a built snapshot, not from the log alone).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while counter(&engine, "snapshots_total") < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no snapshot was built"
        );
        one(&engine, Command::GetPool { pool: pool("sku") })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(engine);
    let first_segment = std::fs::read_dir(h.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("wal-"))
        .min()
        .unwrap();
    assert_ne!(
        first_segment,
        format!("wal-{:020}.log", 1),
        "old segments are removed"
    );
    let engine = h.open_with(config);
    assert_eq!(pool_counts(&engine, "sku").await, (1000, 850, 100, 50));
    assert_eq!(engine.events(0, 0, 1000, 0).await.unwrap().events, events);
    engine.shutdown().await;
}

#[tokio::test]
async fn holds_expire_without_traffic_and_across_restart() {
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 5)).await;
    ok(&engine, reserve("o-1", "sku", 2, 1_000, 0)).await;
    ok(&engine, reserve("o-2", "sku", 3, 5_000, 0)).await;
    let seen = engine.events(0, 0, 100, 0).await.unwrap().next_after;

    h.clock.advance(1_000);
    engine.poke();
    let page = engine.events(0, seen, 100, 5_000).await.unwrap();
    assert_eq!(page.events[0].kind, EventKind::Expired);
    assert_eq!(page.events[0].hold_id, Some(hold("o-1")));
    assert_eq!(pool_counts(&engine, "sku").await, (5, 2, 3, 0));
    drop(engine);

    // o-2's deadline passes while the engine is down: it expires on start, with no request.
    h.clock.advance(10_000);
    let engine = h.open();
    let page = engine.events(0, page.next_after, 100, 5_000).await.unwrap();
    assert_eq!(page.events[0].kind, EventKind::Expired);
    assert_eq!(page.events[0].hold_id, Some(hold("o-2")));
    assert_eq!(pool_counts(&engine, "sku").await, (5, 5, 0, 0));
    engine.shutdown().await;
}

#[tokio::test]
async fn waiter_gets_released_units() {
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 1)).await;
    ok(&engine, reserve("o-1", "sku", 1, 60_000, 0)).await;
    let waiting = spawn_execute(&engine, vec![reserve("o-2", "sku", 1, 60_000, 10_000)]);
    wait_for_parked_waiter(&engine).await;
    ok(&engine, release("o-1")).await;
    match waiting.await.unwrap().remove(0) {
        Ok(Reply::Hold { hold, created }) => {
            assert!(created);
            assert_eq!(hold.status, HoldStatus::Held);
        }
        other => panic!("waiter: {other:?}"),
    }
    assert_eq!(pool_counts(&engine, "sku").await, (1, 0, 1, 0));
    engine.shutdown().await;
}

#[tokio::test]
async fn waiter_times_out_with_insufficient_stock() {
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 0)).await;
    let waiting = spawn_execute(&engine, vec![reserve("o-1", "sku", 1, 60_000, 2_000)]);
    poke_until_finished(&h, &engine, &waiting, 100, "waiter never timed out").await;
    assert!(matches!(
        waiting.await.unwrap().remove(0),
        Err(Error::InsufficientStock { .. })
    ));
    engine.shutdown().await;
}

#[tokio::test]
async fn fencing_tokens_grow_across_restarts() {
    let h = Harness::new();
    let acquire = |owner: &str| {
        Command::LockAcquire(LockRequest {
            name: LockName::parse("job").unwrap(),
            owner: OwnerId::parse(owner).unwrap(),
            ttl_ms: 1_000,
            wait_ms: 0,
        })
    };
    let engine = h.open();
    let Ok(Reply::Lock { token: first, .. }) = one(&engine, acquire("a")).await else {
        panic!("acquire")
    };
    drop(engine);
    h.clock.advance(2_000);
    let engine = h.open();
    let Ok(Reply::Lock { token: second, .. }) = one(&engine, acquire("b")).await else {
        panic!("acquire after restart")
    };
    assert!(second > first, "{second} > {first}");
    assert!(matches!(
        one(&engine, acquire("a")).await,
        Err(Error::LockHeld { .. })
    ));
    engine.shutdown().await;
}

#[tokio::test]
async fn batch_keeps_order_around_a_waiting_command() {
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 2)).await;
    let batch = spawn_execute(
        &engine,
        vec![
            reserve("o-1", "sku", 2, 60_000, 0),
            reserve("o-2", "sku", 1, 60_000, 1_000),
            release("o-1"),
        ],
    );
    // The release comes after o-2 in the batch, so it cannot feed o-2: o-2 waits out its
    // 1 s and fails, and only then is o-1 released.
    wait_for_parked_waiter(&engine).await;
    // Move time past o-2's wait but nowhere near o-1's deadline.
    h.clock.advance(1_500);
    poke_until_finished(&h, &engine, &batch, 0, "batch never finished").await;
    let outcomes = batch.await.unwrap();
    assert!(matches!(
        &outcomes[0],
        Ok(Reply::Hold { created: true, .. })
    ));
    assert!(matches!(&outcomes[1], Err(Error::InsufficientStock { .. })));
    assert!(
        matches!(&outcomes[2], Ok(Reply::Hold { hold, .. }) if hold.status == HoldStatus::Released)
    );
    assert_eq!(pool_counts(&engine, "sku").await, (2, 2, 0, 0));
    engine.shutdown().await;
}

#[tokio::test]
async fn a_data_dir_serves_one_engine_at_a_time() {
    let h = Harness::new();
    let engine = h.open();
    let second = Engine::open(h.config(), h.clock.clone());
    assert!(
        matches!(&second, Err(e) if e.to_string().contains("in use")),
        "second open must fail"
    );
    engine.shutdown().await;
    // The lock goes with the engine.
    h.open().shutdown().await;
}

#[tokio::test]
async fn events_after_the_largest_seq_are_empty_not_a_panic() {
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 1)).await;
    let page = engine.events(0, u64::MAX, 10, 0).await.unwrap();
    assert!(page.events.is_empty());
    assert_eq!(page.next_after, u64::MAX);
    let page = engine.events(0, u64::MAX, 10, 20).await.unwrap();
    assert!(page.events.is_empty());
    engine.shutdown().await;
}

#[tokio::test]
async fn a_crowd_of_holds_lapsing_during_downtime_expires_after_restart() {
    use stockd_core::Backend;
    let h = Harness::new();
    let engine = h.open();
    let holds = 25_000;
    ok(&engine, put("sku", holds)).await;
    for chunk in 0..(holds / 1_000) {
        let batch = (0..1_000)
            .map(|i| {
                let n = chunk * 1_000 + i;
                // Long ids make the expiry records big, as order UUIDs would.
                reserve(&format!("{n:0>120}"), "sku", 1, 1_000, 0)
            })
            .collect();
        let outcomes = engine.execute(batch).await.unwrap();
        assert!(outcomes.iter().all(|o| o.is_ok()));
    }
    drop(engine);
    h.clock.advance(3_600_000);
    let engine = h.open();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, available, held, _) = pool_counts(&engine, "sku").await;
        if available == holds {
            assert_eq!(held, 0);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "holds never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        Backend::ready(&engine).await.is_ok(),
        "the engine still takes writes"
    );
    engine.shutdown().await;
}

/// The newest log segment of the harness's data directory.
fn last_segment(h: &Harness) -> std::path::PathBuf {
    std::fs::read_dir(h.dir.path())
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("wal-"))
        .max()
        .unwrap()
}

/// Where the records in a segment end: the preformatted zeros after them are not records. (If
/// the last frame itself ends in zero bytes, this is a few bytes short of its end, still inside
/// it.)
fn records_end(segment: &std::path::Path) -> usize {
    let bytes = std::fs::read(segment).unwrap();
    bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |last| last + 1)
}

/// Ten holds, each acknowledged in a batch (a log frame) of its own, then a crash (drop).
async fn ten_acknowledged_holds(h: &Harness) {
    let engine = h.open();
    ok(&engine, put("sku", 100)).await;
    hold_each(&engine, 10).await;
    drop(engine);
}

#[tokio::test]
async fn a_torn_log_tail_is_cut_and_everything_before_it_recovers() {
    let h = Harness::new();
    ten_acknowledged_holds(&h).await;
    // A crash mid-write: the last frame lost its last bytes.
    let segment = last_segment(&h);
    let end = records_end(&segment) as u64;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(end - 3)
        .unwrap();
    let engine = h.open();
    assert_eq!(pool_counts(&engine, "sku").await, (100, 91, 9, 0));
    assert!(matches!(
        one(
            &engine,
            Command::GetHold {
                hold_id: hold("o-9")
            }
        )
        .await,
        Err(Error::HoldNotFound { .. })
    ));
    // Appending after the cut works, and survives another restart.
    ok(&engine, reserve("o-10", "sku", 1, 60_000, 0)).await;
    drop(engine);
    let engine = h.open();
    assert_eq!(pool_counts(&engine, "sku").await, (100, 90, 10, 0));
    engine.shutdown().await;
}

#[tokio::test]
async fn a_bit_flip_in_the_last_frame_drops_it_and_in_a_middle_frame_refuses_to_start() {
    let h = Harness::new();
    ten_acknowledged_holds(&h).await;
    let segment = last_segment(&h);
    let end = records_end(&segment);
    let mut bytes = std::fs::read(&segment).unwrap();
    let last = end - 2;
    bytes[last] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    let engine = h.open();
    assert_eq!(pool_counts(&engine, "sku").await, (100, 91, 9, 0));
    drop(engine);

    // Damage well before the tail: acknowledged data would be lost, so the engine refuses.
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = end / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    let opened = Engine::open(h.config(), h.clock.clone());
    let error = opened
        .err()
        .expect("a corrupt log must not open")
        .to_string();
    assert!(error.contains("storage"), "{error}");
}

#[tokio::test]
async fn a_batch_parks_behind_its_waiting_command_and_resumes_in_order() {
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 0)).await;
    let batch = spawn_execute(
        &engine,
        vec![
            reserve("w", "sku", 1, 60_000, 10_000),
            Command::GetPool { pool: pool("sku") },
        ],
    );
    wait_for_parked_waiter(&engine).await;
    // Other clients are not held up by the parked batch.
    assert_eq!(pool_counts(&engine, "sku").await, (0, 0, 0, 0));
    one(
        &engine,
        Command::Restock {
            pool: pool("sku"),
            delta: 1,
            request_id: None,
        },
    )
    .await
    .unwrap();
    let outcomes = batch.await.unwrap();
    assert!(matches!(
        &outcomes[0],
        Ok(Reply::Hold { created: true, .. })
    ));
    // The GetPool ran after the waiter was served, so it sees the unit held.
    match &outcomes[1] {
        Ok(Reply::Pool { pool, .. }) => assert_eq!((pool.available, pool.held), (0, 1)),
        other => panic!("get pool: {other:?}"),
    }
    engine.shutdown().await;
}

/// A restock retried with its request id is answered as a replay (the pool as it is, marked
/// `replayed`) and writes nothing to the log, before a crash and after the recovery that rebuilt
/// the remembered id from the log; the first run is not a replay, and a conflict is still 409.
#[tokio::test]
async fn a_restock_retried_before_and_after_a_restart_is_a_replay_that_writes_nothing() {
    let restock = |delta| Command::Restock {
        pool: pool("sku"),
        delta,
        request_id: Some(RequestId::parse("po-1").unwrap()),
    };
    let total_and_replayed = |outcome: Result<Reply, Error>| match outcome {
        Ok(Reply::Pool {
            pool,
            created: false,
            replayed,
        }) => (pool.total, replayed),
        other => panic!("restock: {other:?}"),
    };
    let h = Harness::new();
    let engine = h.open();
    ok(&engine, put("sku", 10)).await;
    let first = one(&engine, restock(5)).await;
    assert_eq!(total_and_replayed(first), (15, false));
    let records = counter(&engine, "wal_records_total");
    let retry = one(&engine, restock(5)).await;
    assert_eq!(total_and_replayed(retry), (15, true));
    assert_eq!(
        counter(&engine, "wal_records_total"),
        records,
        "a replay writes nothing"
    );
    let events = engine.events(0, 0, 1000, 0).await.unwrap().events;
    // Dropped without shutdown: recovery replays the log, which remembers the id.
    drop(engine);

    let engine = h.open();
    let records = counter(&engine, "wal_records_total");
    let retry = one(&engine, restock(5)).await;
    assert_eq!(total_and_replayed(retry), (15, true));
    let conflict = one(&engine, restock(4)).await;
    assert_eq!(
        conflict.map_err(|error| error.code()),
        Err("request_id_conflict")
    );
    assert_eq!(
        counter(&engine, "wal_records_total"),
        records,
        "a replay writes nothing"
    );
    assert_eq!(
        engine.events(0, 0, 1000, 0).await.unwrap().events,
        events,
        "neither adds an event"
    );
    assert_eq!(pool_counts(&engine, "sku").await, (15, 15, 0, 0));
    engine.shutdown().await;
}

#[tokio::test]
async fn the_feed_keeps_the_newest_events_up_to_its_retention() {
    let h = Harness::new();
    let mut config = h.config();
    config.event_retention_max = 5;
    let engine = h.open_with(config.clone());
    ok(&engine, put("sku", 100)).await;
    hold_each(&engine, 6).await;
    // 7 events so far (seq 1..=7); the 5 newest (3..=7) are kept.
    let seqs =
        |page: &stockd_core::EventPage| page.events.iter().map(|e| e.seq).collect::<Vec<_>>();
    let expired = Err(Error::EventsExpired {
        after: 0,
        oldest_seq: 3,
    });
    assert_eq!(
        engine.events(0, 0, 100, 0).await,
        expired,
        "a consumer far behind learns of its gap, even from the very start"
    );
    assert_eq!(
        engine.events(0, 1, 100, 0).await,
        Err(Error::EventsExpired {
            after: 1,
            oldest_seq: 3
        }),
        "seq 2 is gone"
    );
    // Waiting changes nothing: the gap is reported at once.
    assert_eq!(engine.events(0, 0, 100, 5_000).await, expired);
    let page = engine.events(0, 2, 100, 0).await.unwrap();
    assert_eq!(
        seqs(&page),
        [3, 4, 5, 6, 7],
        "resuming from oldest_seq - 1 reads the whole window"
    );
    assert_eq!(page.next_after, 7);
    assert_eq!(seqs(&engine.events(0, 5, 100, 0).await.unwrap()), [6, 7]);
    assert!(engine.events(0, 7, 100, 0).await.unwrap().events.is_empty());
    assert!(engine
        .events(0, 99, 100, 0)
        .await
        .unwrap()
        .events
        .is_empty());
    drop(engine);
    // The same window after recovery by replay.
    let engine = h.open_with(config);
    assert_eq!(engine.events(0, 0, 100, 0).await, expired);
    assert_eq!(
        seqs(&engine.events(0, 2, 100, 0).await.unwrap()),
        [3, 4, 5, 6, 7]
    );
    engine.shutdown().await;
}

#[tokio::test]
async fn the_feed_is_one_partition_and_an_empty_feed_never_expires() {
    let h = Harness::new();
    let engine = h.open();
    assert_eq!(stockd_core::Backend::partitions(&engine), 1);
    let empty = engine.events(0, 0, 100, 0).await.unwrap();
    assert!(empty.events.is_empty());
    assert_eq!(empty.next_after, 0);
    assert!(engine.events(0, 5, 100, 0).await.unwrap().events.is_empty());
    match engine.events(1, 0, 100, 0).await {
        Err(Error::InvalidRequest { message }) => {
            assert!(message.contains("partition"), "{message}")
        }
        other => panic!("partition 1 of a one-partition feed: {other:?}"),
    }
    ok(&engine, put("sku", 1)).await;
    let page = stockd_core::Backend::events(&engine, EventsRequest::at_once(0, 0, 100))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.events.len(), 1);
    engine.shutdown().await;
}
