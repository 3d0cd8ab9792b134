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

#[test]
fn a_page_is_expired_exactly_when_an_event_after_it_is_no_longer_kept() {
    let server = RedisProcess::start(&[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let mut config = RedisConfig::new(Target::Single(server.url()));
        config.event_retention_max = RETAINED;
        let backend = RedisBackend::connect(config).await.expect("connect");
        let pool = PoolId::parse("p").unwrap();
        let spec = PoolSpec {
            total: 10,
            per_user_limit: None,
            starts_at_ms: None,
            ends_at_ms: None,
            low_stock_threshold: None,
        };
        let put = Command::PutPool {
            pool: pool.clone(),
            spec,
            segments: None,
            if_absent: false,
        };
        let outcomes = backend.execute(vec![put]).await.expect("put");
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        // Nothing trimmed yet: the whole feed from the start.
        let first = page(&backend, 0).await.expect("nothing trimmed yet");
        assert!(!first.events.is_empty() && first.events.len() <= RETAINED);

        let restocks = (0..2 * RETAINED)
            .map(|_| Command::Restock {
                pool: pool.clone(),
                delta: 1,
                request_id: None,
            })
            .collect();
        let outcomes = backend.execute(restocks).await.expect("restocks");
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");

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
