//! Commands and answers of the scenarios, from literals.

use stockd_core::limits::HOLD_TTL_MS_DEFAULT;
use stockd_core::{
    Command, Error, HoldId, HoldItem, HoldStatus, HoldView, LockName, LockRequest, Outcome,
    OwnerId, PoolId, PoolSpec, Reply, RequestId, ReserveRequest, UserId,
};

use super::Ticket;

pub fn pool_id(text: &str) -> PoolId {
    PoolId::parse(text).expect("scenario pool id")
}

pub(crate) fn hold_id(text: &str) -> HoldId {
    HoldId::parse(text).expect("scenario hold id")
}

pub(crate) fn put_pool(pool: &str, total: u64) -> Command {
    Command::PutPool {
        pool: pool_id(pool),
        spec: PoolSpec {
            total,
            ..PoolSpec::default()
        },
        segments: None,
        if_absent: false,
    }
}

pub(crate) fn restock(pool: &str, delta: i64) -> Command {
    Command::Restock {
        pool: pool_id(pool),
        delta,
        request_id: None,
    }
}

pub(crate) fn reserve_with(
    hold: &str,
    items: &[(&str, u64)],
    ttl_ms: u64,
    wait_ms: u64,
) -> Command {
    Command::Reserve(ReserveRequest {
        hold_id: hold_id(hold),
        user: None,
        items: items
            .iter()
            .map(|(pool, qty)| HoldItem {
                pool: pool_id(pool),
                qty: *qty,
            })
            .collect(),
        ttl_ms,
        confirm: false,
        wait_ms,
    })
}

pub(crate) fn reserve(hold: &str, items: &[(&str, u64)]) -> Command {
    reserve_with(hold, items, HOLD_TTL_MS_DEFAULT, 0)
}

pub(crate) fn reserve_waiting(hold: &str, items: &[(&str, u64)], wait_ms: u64) -> Command {
    reserve_with(hold, items, HOLD_TTL_MS_DEFAULT, wait_ms)
}

pub(crate) fn with_confirm(command: Command) -> Command {
    match command {
        Command::Reserve(request) => Command::Reserve(ReserveRequest {
            confirm: true,
            ..request
        }),
        other => other,
    }
}

pub(crate) fn confirm(hold: &str) -> Command {
    Command::Confirm {
        hold_id: hold_id(hold),
    }
}

pub(crate) fn release(hold: &str) -> Command {
    Command::Release {
        hold_id: hold_id(hold),
    }
}

pub(crate) fn refund(hold: &str) -> Command {
    Command::Refund {
        hold_id: hold_id(hold),
        restock: true,
    }
}

pub(crate) fn get_hold(hold: &str) -> Command {
    Command::GetHold {
        hold_id: hold_id(hold),
    }
}

pub(crate) fn delete_pool(pool: &str) -> Command {
    Command::DeletePool {
        pool: pool_id(pool),
    }
}

pub(crate) fn lock_acquire(name: &str, owner: &str, ttl_ms: u64, wait_ms: u64) -> Command {
    Command::LockAcquire(LockRequest {
        name: LockName::parse(name).expect("scenario lock name"),
        owner: OwnerId::parse(owner).expect("scenario owner"),
        ttl_ms,
        wait_ms,
    })
}

pub(crate) fn lock_renew(name: &str, owner: &str, token: u64, ttl_ms: u64) -> Command {
    Command::LockRenew {
        name: LockName::parse(name).expect("scenario lock name"),
        owner: OwnerId::parse(owner).expect("scenario owner"),
        token,
        ttl_ms,
    }
}

pub(crate) fn lock_release(name: &str, owner: &str, token: u64) -> Command {
    Command::LockRelease {
        name: LockName::parse(name).expect("scenario lock name"),
        owner: OwnerId::parse(owner).expect("scenario owner"),
        token,
    }
}

// ------------------------------------------------------------------------------------ answers

pub(crate) fn hold_view(outcome: &Outcome) -> &HoldView {
    match outcome {
        Ok(Reply::Hold { hold, .. }) => hold,
        other => panic!("expected a hold, got {other:?}"),
    }
}

pub(crate) fn created(outcome: &Outcome) -> bool {
    match outcome {
        Ok(Reply::Hold { created, .. }) => *created,
        other => panic!("expected a hold, got {other:?}"),
    }
}

pub(crate) fn status(outcome: &Outcome) -> HoldStatus {
    hold_view(outcome).status
}

pub(crate) fn lock_token(outcome: &Outcome) -> u64 {
    match outcome {
        Ok(Reply::Lock { token, .. }) => *token,
        other => panic!("expected a lock, got {other:?}"),
    }
}

pub(crate) fn insufficient(pool: &str, available: u64, requested: u64) -> Outcome {
    Err(Error::InsufficientStock {
        pool: pool_id(pool),
        available,
        requested,
    })
}

pub(crate) fn tickets(woken: &[(Ticket, Outcome)]) -> Vec<Ticket> {
    woken.iter().map(|(ticket, _)| *ticket).collect()
}

// ------------------------------------------------------------------------------------ more commands

pub(crate) fn put_pool_with(pool: &str, spec: PoolSpec) -> Command {
    Command::PutPool {
        pool: pool_id(pool),
        spec,
        segments: None,
        if_absent: false,
    }
}

/// A restock naming a request id.
pub(crate) fn restock_once(pool: &str, delta: i64, request: &str) -> Command {
    Command::Restock {
        pool: pool_id(pool),
        delta,
        request_id: Some(request_id(request)),
    }
}

pub(crate) fn request_id(text: &str) -> RequestId {
    RequestId::parse(text).expect("scenario request id")
}

pub(crate) fn with_user(command: Command, user: &str) -> Command {
    match command {
        Command::Reserve(request) => Command::Reserve(ReserveRequest {
            user: Some(user_id(user)),
            ..request
        }),
        other => other,
    }
}

pub(crate) fn with_ttl(command: Command, ttl_ms: u64) -> Command {
    match command {
        Command::Reserve(request) => Command::Reserve(ReserveRequest { ttl_ms, ..request }),
        other => other,
    }
}

pub(crate) fn extend(hold: &str, ttl_ms: u64) -> Command {
    Command::Extend {
        hold_id: hold_id(hold),
        ttl_ms,
    }
}

pub(crate) fn get_pool(pool: &str) -> Command {
    Command::GetPool {
        pool: pool_id(pool),
    }
}

/// A put that creates the pool only when it does not exist (`If-None-Match: *`).
pub(crate) fn put_pool_if_absent(pool: &str, spec: PoolSpec) -> Command {
    Command::PutPool {
        pool: pool_id(pool),
        spec,
        segments: None,
        if_absent: true,
    }
}

/// A refund whose units leave the pool (`restock: false`).
pub(crate) fn refund_without_restock(hold: &str) -> Command {
    Command::Refund {
        hold_id: hold_id(hold),
        restock: false,
    }
}

pub(crate) fn list_pools(prefix: &str, after: Option<&str>, limit: usize) -> Command {
    Command::ListPools {
        prefix: prefix.to_string(),
        after: after.map(str::to_string),
        limit,
    }
}

pub(crate) fn user_id(text: &str) -> UserId {
    UserId::parse(text).expect("scenario user")
}

pub(crate) fn item(pool: &str, qty: u64) -> HoldItem {
    HoldItem {
        pool: pool_id(pool),
        qty,
    }
}

/// A reserve changed by `change` (any other command as it is).
pub(crate) fn edit_reserve(command: Command, change: impl FnOnce(&mut ReserveRequest)) -> Command {
    match command {
        Command::Reserve(mut request) => {
            change(&mut request);
            Command::Reserve(request)
        }
        other => other,
    }
}

/// Changes a request's items (shared, so edited as a copy).
pub(crate) fn edit_items(request: &mut ReserveRequest, edit: impl FnOnce(&mut Vec<HoldItem>)) {
    let mut items = request.items.to_vec();
    edit(&mut items);
    request.items = items.into();
}
