//! Reading a [`Backend`] for the runner, the same way for every backend: events through
//! `Backend::events` (partition 0: the engine and a single Redis have one), views through read
//! commands in one request. Time is not here: each backend's test moves its own clock.

use stockd_core::limits::{EVENT_LIMIT_MAX, POOL_LIST_LIMIT_MAX};
use stockd_core::{Backend, Command, Event, EventsRequest, HoldId, Reply};

use crate::runner::Views;

/// Every event of partition 0 with seq above `after`, page by page.
pub async fn read_events(backend: &dyn Backend, after: u64) -> Result<Vec<Event>, String> {
    let mut events = Vec::new();
    let mut after = after;
    loop {
        let page = backend
            .events(EventsRequest::at_once(0, after, EVENT_LIMIT_MAX))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("events after {after}: {e}"))?;
        if page.events.is_empty() {
            return Ok(events);
        }
        after = page.next_after;
        events.extend(page.events);
    }
}

/// Every pool (a list of them all) and each of `holds` (a get of each), in one request.
/// Neither changes anything as long as no hold is past its deadline, which the runner ensures
/// by reading only after time's effects have happened.
pub async fn read_views(backend: &dyn Backend, holds: &[HoldId]) -> Result<Views, String> {
    let mut commands = vec![Command::ListPools {
        prefix: String::new(),
        after: None,
        limit: POOL_LIST_LIMIT_MAX,
    }];
    commands.extend(holds.iter().map(|id| Command::GetHold {
        hold_id: id.clone(),
    }));
    let mut outcomes = backend
        .execute(commands)
        .await
        .map_err(|e| e.to_string())?
        .into_iter();
    let pools = match outcomes.next() {
        Some(Ok(Reply::PoolList { pools, next: None })) => pools,
        other => return Err(format!("listing every pool: {other:?}")),
    };
    let holds = outcomes
        .map(|outcome| match outcome {
            Ok(Reply::Hold { hold, .. }) => Ok(Some(hold)),
            Err(stockd_core::Error::HoldNotFound { .. }) => Ok(None),
            other => Err(format!("getting a hold: {other:?}")),
        })
        .collect::<Result<_, _>>()?;
    Ok(Views { pools, holds })
}
