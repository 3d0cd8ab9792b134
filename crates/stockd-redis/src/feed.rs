//! The event feed: a page of a partition's events after a seq (`LIBRARY_events`, read-only),
//! and the long-poll that waits for newer events (told by the seqs this server sees, its own
//! calls' and the wake-ups'). Events are read as the library wrote them; it must never make up
//! or reorder one.

use std::time::Duration;

use redis::Value;
use stockd_core::{BackendError, Error, Event, EventPage};

use crate::backend::RedisBackend;
use crate::call::{into_array, refusal, CallError};
use crate::{dispatch, library};

impl RedisBackend {
    /// One page of `LIBRARY_events`: the events after `after`, or `events_expired` when the
    /// library finds one of them no longer kept.
    async fn read_events(
        &self,
        partition: u32,
        after: u64,
        limit: usize,
    ) -> Result<Result<EventPage, Error>, BackendError> {
        let shared = &self.shared;
        let mut cmd = shared.call_args(library::FN_EVENTS, partition);
        cmd.arg(after)
            .arg(limit)
            .arg(shared.config.event_retention_max);
        // A read: with replicas to wait for, a write after it makes the WAIT cover the events it
        // read, so that no event is served that a failover could take back (link.rs `fcall`).
        let touch = shared.keys[partition as usize].touch();
        let value = shared
            .link
            .fcall(&cmd, Some(&touch))
            .await
            .map_err(|e| CallError::Redis(e).into_backend_error())?;
        let mut values = into_array(value).map_err(CallError::into_backend_error)?;
        if values.len() < 2 {
            return Err(refusal(values.pop().unwrap_or(Value::Nil)).into_backend_error());
        }
        let mut rest = values.split_off(2);
        let (Value::Int(seq), Value::Int(expired_oldest)) = (&values[0], &values[1]) else {
            return Err(refusal(values.swap_remove(0)).into_backend_error());
        };
        let (seq, expired_oldest) = (*seq as u64, *expired_oldest as u64);
        shared.saw_seq(partition, seq);
        // The library decided that an event after `after` is gone (it answers the oldest seq it
        // keeps instead of 0); this only says so in the core's words.
        if expired_oldest > 0 {
            return Ok(Err(Error::EventsExpired {
                after,
                oldest_seq: expired_oldest,
            }));
        }
        let texts = dispatch::answers(std::mem::take(&mut rest))?;
        let events = texts
            .iter()
            .map(|text| serde_json::from_str::<Event>(text))
            .collect::<Result<Vec<Event>, _>>()
            .map_err(|e| BackendError::Unavailable(format!("unreadable event: {e}")))?;
        let next_after = events.last().map_or(after, |event| event.seq);
        Ok(Ok(EventPage { events, next_after }))
    }

    /// Events after `after`; when there are none yet, waits up to `wait_ms` for newer ones.
    pub(crate) async fn events_after(
        &self,
        partition: u32,
        after: u64,
        limit: usize,
        wait_ms: u64,
    ) -> Result<Result<EventPage, Error>, BackendError> {
        let mut newer = self.shared.seq_watch[partition as usize].subscribe();
        let page = self.read_events(partition, after, limit).await?;
        let waiting = matches!(&page, Ok(page) if page.events.is_empty()) && wait_ms > 0;
        if !waiting {
            return Ok(page);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        let arrived = tokio::time::timeout_at(deadline, async {
            newer.wait_for(|seq| *seq > after).await.is_ok()
        })
        .await
        .unwrap_or(false);
        if arrived {
            self.read_events(partition, after, limit).await
        } else {
            Ok(page)
        }
    }
}
