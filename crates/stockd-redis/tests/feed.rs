//! The event feed's window on Redis, which the library decides (lua/main.lua `events`): a page
//! after `after` is `events_expired` exactly when an event after `after` is no longer kept (the
//! stream, trimmed to `event_retention_max`, starts past `after + 1`), with the oldest seq kept;
//! at the edge, and past every seq (`u64::MAX`), it is a page. The embedded backend's feed
//! decides the same (stockd-engine's feed).
//!
//! A real `redis-server` of the test's own, on a free loopback port.

use stockd_core::{Backend, Command, Error, EventPage, EventsRequest, PoolId, PoolSpec};
use stockd_redis::{RedisBackend, RedisConfig, Target};

mod common;
use common::RedisProcess;

const RETAINED: usize = 3;

async fn page(backend: &RedisBackend, after: u64) -> Result<EventPage, Error> {
    backend
        .events(EventsRequest::at_once(0, after, 100))
        .await
        .expect("Redis answers")
}

/// A redis-server of the test's own, a runtime and a plain connection to read keys with.
fn start() -> (RedisProcess, tokio::runtime::Runtime, redis::Connection) {
    let server = RedisProcess::start(&[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let redis = redis::Client::open(server.url())
        .and_then(|client| client.get_connection())
        .expect("redis connection");
    (server, runtime, redis)
}

/// `PUT` of pool `p`, 10 units, no rules.
fn put_p() -> Command {
    Command::PutPool {
        pool: PoolId::parse("p").unwrap(),
        spec: PoolSpec {
            total: 10,
            per_user_limit: None,
            starts_at_ms: None,
            ends_at_ms: None,
            low_stock_threshold: None,
        },
        segments: None,
        if_absent: false,
    }
}

/// One more unit in pool `p`.
fn restock_p() -> Command {
    Command::Restock {
        pool: PoolId::parse("p").unwrap(),
        delta: 1,
        request_id: None,
    }
}

/// A backend keeping RETAINED events, on a new dataset in `layout` (set before any event, as if
/// an older version had made the dataset), or in the layout a new dataset is made in (2).
async fn backend_in_layout(
    server: &RedisProcess,
    redis: &mut redis::Connection,
    layout: Option<&str>,
) -> RedisBackend {
    let mut config = RedisConfig::new(Target::Single(server.url()));
    config.event_retention_max = RETAINED;
    let backend = RedisBackend::connect(config).await.expect("connect");
    let meta = "stockd:{p0.0}:meta";
    if let Some(layout) = layout {
        let _: i64 = redis::cmd("HSET")
            .arg(meta)
            .arg("layout")
            .arg(layout)
            .query(redis)
            .expect("HSET layout");
    }
    let made_in: String = redis::cmd("HGET")
        .arg(meta)
        .arg("layout")
        .query(redis)
        .expect("HGET layout");
    assert_eq!(made_in, layout.unwrap_or("2"));
    backend
}

/// In the layout a new dataset is made in (2: a call's events in one stream entry, so the
/// window's edge falls inside an entry).
#[test]
fn a_page_is_expired_exactly_when_an_event_after_it_is_no_longer_kept() {
    window_is_exact(None);
}

/// The same on a dataset of layout 1 (made by stockd_v9 or earlier: one entry per event).
#[test]
fn a_page_is_expired_exactly_when_an_event_after_it_is_no_longer_kept_in_layout_1() {
    window_is_exact(Some("1"));
}

fn window_is_exact(layout: Option<&str>) {
    let (server, runtime, mut redis) = start();
    runtime.block_on(async {
        let backend = backend_in_layout(&server, &mut redis, layout).await;
        let outcomes = backend.execute(vec![put_p()]).await.expect("put");
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        // Nothing trimmed yet: the whole feed from the start.
        let first = page(&backend, 0).await.expect("nothing trimmed yet");
        assert!(!first.events.is_empty() && first.events.len() <= RETAINED);

        let restocks = (0..2 * RETAINED).map(|_| restock_p()).collect();
        let outcomes = backend.execute(restocks).await.expect("restocks");
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
        // Layout 1 keeps one entry per event, the newest RETAINED; layout 2 only the restocks'
        // entry (one call: the put's is trimmed), the window's edge inside it.
        let entries: usize = redis::cmd("XLEN")
            .arg("stockd:{p0.0}:events")
            .query(&mut redis)
            .expect("XLEN");
        assert_eq!(entries, if layout == Some("1") { RETAINED } else { 1 });

        let Err(Error::EventsExpired { after, oldest_seq }) = page(&backend, 0).await else {
            panic!("the events from the start are trimmed");
        };
        assert_eq!(after, 0);
        assert!(oldest_seq > 2, "{oldest_seq}");
        // One before the edge: the event at `oldest_seq - 1` is gone.
        assert_eq!(
            page(&backend, oldest_seq - 2).await.unwrap_err(),
            Error::EventsExpired {
                after: oldest_seq - 2,
                oldest_seq
            }
        );
        // At the edge: every event after it is kept.
        let kept = page(&backend, oldest_seq - 1).await.expect("at the edge");
        let seqs: Vec<u64> = kept.events.iter().map(|event| event.seq).collect();
        let want: Vec<u64> = (oldest_seq..oldest_seq + RETAINED as u64).collect();
        assert_eq!(seqs, want);
        assert_eq!(kept.next_after, oldest_seq + RETAINED as u64 - 1);
        // Past the last seq, and past every seq: an empty page, not an expired one.
        let last = kept.next_after;
        for after in [last, u64::MAX] {
            let empty = page(&backend, after).await.expect("past the end");
            assert!(empty.events.is_empty());
            assert_eq!(empty.next_after, after);
        }
        backend.shutdown().await.expect("shutdown");
    });
}

/// After an accepted loss the seq jumps up to the clock; the window still counts the newest
/// `event_retention_max` events, those from before the jump included, in both layouts.
#[test]
fn the_window_counts_the_events_kept_from_before_an_accept() {
    window_counts_across_an_accept(None);
}

#[test]
fn the_window_counts_the_events_kept_from_before_an_accept_in_layout_1() {
    window_counts_across_an_accept(Some("1"));
}

fn window_counts_across_an_accept(layout: Option<&str>) {
    let (server, runtime, mut redis) = start();
    runtime.block_on(async {
        let backend = backend_in_layout(&server, &mut redis, layout).await;
        // Seqs 1, 2 and 3, one call each: all kept.
        for command in [put_p(), restock_p(), restock_p()] {
            let outcomes = backend.execute(vec![command]).await.expect("execute");
            assert!(outcomes[0].is_ok(), "{outcomes:?}");
        }
        let seqs = |page: &EventPage| page.events.iter().map(|e| e.seq).collect::<Vec<u64>>();
        assert_eq!(seqs(&page(&backend, 0).await.expect("all kept")), [1, 2, 3]);

        stockd_redis::accept(&Target::Single(server.url()), 1, 0)
            .await
            .expect("accept");
        // The first event after the jump pushes out seq 1 only.
        let mut outcomes = backend.execute(vec![restock_p()]).await.expect("restock");
        for _ in 0..50 {
            if outcomes[0].is_ok() {
                break;
            }
            // The server adopts the accepted marker at its next call.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            outcomes = backend.execute(vec![restock_p()]).await.expect("restock");
        }
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        assert_eq!(
            page(&backend, 0).await.unwrap_err(),
            Error::EventsExpired {
                after: 0,
                oldest_seq: 2
            }
        );
        let kept = page(&backend, 1).await.expect("from the oldest kept");
        let after_jump = kept.events[2].seq;
        assert_eq!(seqs(&kept), [2, 3, after_jump]);
        assert!(after_jump > 1_000_000, "the seq jumped: {after_jump}");

        // The next one pushes out seq 2.
        let outcomes = backend.execute(vec![restock_p()]).await.expect("restock");
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        assert_eq!(
            page(&backend, 1).await.unwrap_err(),
            Error::EventsExpired {
                after: 1,
                oldest_seq: 3
            }
        );
        assert_eq!(
            seqs(&page(&backend, 2).await.expect("from the oldest kept")),
            [3, after_jump, after_jump + 1]
        );
        backend.shutdown().await.expect("shutdown");
    });
}
