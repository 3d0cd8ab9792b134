//! Helpers shared by the core's integration tests: identifiers from literals, command builders,
//! and a driver that runs one command against a [`State`] and hands back everything it did.
//!
//! Nothing here knows a rule of the contract; expectations live in the tests themselves.

#![allow(dead_code)]

use stockd_core::limits::HOLD_TTL_MS_DEFAULT;
use stockd_core::{
    Command, Effects, Error, Event, HoldId, HoldItem, LockName, LockRequest, Outcome, OwnerId,
    PoolId, PoolSpec, Record, RequestId, ReserveRequest, State, Step, UserId, WaiterId,
};

pub fn pool_id(text: &str) -> PoolId {
    PoolId::parse(text).expect("test pool id")
}

pub fn hold_id(text: &str) -> HoldId {
    HoldId::parse(text).expect("test hold id")
}

pub fn user_id(text: &str) -> UserId {
    UserId::parse(text).expect("test user id")
}

pub fn lock_name(text: &str) -> LockName {
    LockName::parse(text).expect("test lock name")
}

pub fn owner_id(text: &str) -> OwnerId {
    OwnerId::parse(text).expect("test owner id")
}

pub fn put_pool(pool: &str, total: u64) -> Command {
    put_pool_with(
        pool,
        PoolSpec {
            total,
            ..PoolSpec::default()
        },
    )
}

pub fn put_pool_with(pool: &str, spec: PoolSpec) -> Command {
    Command::PutPool {
        pool: pool_id(pool),
        spec,
        segments: None,
        if_absent: false,
    }
}

pub fn restock(pool: &str, delta: i64) -> Command {
    Command::Restock {
        pool: pool_id(pool),
        delta,
        request_id: None,
    }
}

/// A restock naming a request id.
pub fn restock_once(pool: &str, delta: i64, request: &str) -> Command {
    Command::Restock {
        pool: pool_id(pool),
        delta,
        request_id: Some(RequestId::parse(request).unwrap()),
    }
}

pub fn delete_pool(pool: &str) -> Command {
    Command::DeletePool {
        pool: pool_id(pool),
    }
}

pub fn get_pool(pool: &str) -> Command {
    Command::GetPool {
        pool: pool_id(pool),
    }
}

/// A reserve request with the contract's defaults: no user, default ttl, no confirm, no wait.
pub fn reserve_request(hold: &str, items: &[(&str, u64)]) -> ReserveRequest {
    ReserveRequest {
        hold_id: hold_id(hold),
        user: None,
        items: items
            .iter()
            .map(|(pool, qty)| HoldItem {
                pool: pool_id(pool),
                qty: *qty,
            })
            .collect(),
        ttl_ms: HOLD_TTL_MS_DEFAULT,
        confirm: false,
        wait_ms: 0,
    }
}

pub fn reserve(hold: &str, items: &[(&str, u64)]) -> Command {
    Command::Reserve(reserve_request(hold, items))
}

pub fn reserve_waiting(hold: &str, items: &[(&str, u64)], wait_ms: u64) -> Command {
    Command::Reserve(ReserveRequest {
        wait_ms,
        ..reserve_request(hold, items)
    })
}

pub fn confirm(hold: &str) -> Command {
    Command::Confirm {
        hold_id: hold_id(hold),
    }
}

pub fn release(hold: &str) -> Command {
    Command::Release {
        hold_id: hold_id(hold),
    }
}

pub fn refund(hold: &str) -> Command {
    Command::Refund {
        hold_id: hold_id(hold),
        restock: true,
    }
}

/// A refund whose units leave the pool (`restock: false`).
pub fn refund_without_restock(hold: &str) -> Command {
    Command::Refund {
        hold_id: hold_id(hold),
        restock: false,
    }
}

pub fn extend(hold: &str, ttl_ms: u64) -> Command {
    Command::Extend {
        hold_id: hold_id(hold),
        ttl_ms,
    }
}

pub fn get_hold(hold: &str) -> Command {
    Command::GetHold {
        hold_id: hold_id(hold),
    }
}

pub fn lock_acquire(name: &str, owner: &str, ttl_ms: u64, wait_ms: u64) -> Command {
    Command::LockAcquire(LockRequest {
        name: lock_name(name),
        owner: owner_id(owner),
        ttl_ms,
        wait_ms,
    })
}

pub fn lock_renew(name: &str, owner: &str, token: u64, ttl_ms: u64) -> Command {
    Command::LockRenew {
        name: lock_name(name),
        owner: owner_id(owner),
        token,
        ttl_ms,
    }
}

pub fn lock_release(name: &str, owner: &str, token: u64) -> Command {
    Command::LockRelease {
        name: lock_name(name),
        owner: owner_id(owner),
        token,
    }
}

/// Everything one call did, flattened for assertions.
#[derive(Debug)]
pub struct Done {
    /// The answer of `execute`; `None` for a tick.
    pub step: Option<Step>,
    pub records: Vec<Record>,
    pub events: Vec<Event>,
    pub woken: Vec<(WaiterId, Outcome)>,
}

impl Done {
    /// The immediate outcome; panics if the command was parked.
    pub fn outcome(&self) -> &Outcome {
        match &self.step {
            Some(Step::Done(outcome)) => outcome,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    pub fn waiter(&self) -> WaiterId {
        match &self.step {
            Some(Step::Waiting(id)) => *id,
            other => panic!("expected a waiter, got {other:?}"),
        }
    }

    pub fn error_code(&self) -> Option<&'static str> {
        self.outcome().as_ref().err().map(Error::code)
    }
}

/// Runs `command` at `now_ms` and checks the invariants afterwards.
pub fn run(state: &mut State, command: Command, now_ms: u64) -> Done {
    let mut effects = Effects::default();
    let step = state.execute(command, now_ms, &mut effects);
    state
        .check_invariants()
        .unwrap_or_else(|e| panic!("invariant broken: {e}"));
    Done {
        step: Some(step),
        records: effects.records,
        events: effects.events,
        woken: effects.woken,
    }
}

/// Runs `tick` at `now_ms` and checks the invariants afterwards.
pub fn tick(state: &mut State, now_ms: u64) -> Done {
    let mut effects = Effects::default();
    state.tick(now_ms, &mut effects);
    state
        .check_invariants()
        .unwrap_or_else(|e| panic!("invariant broken: {e}"));
    Done {
        step: None,
        records: effects.records,
        events: effects.events,
        woken: effects.woken,
    }
}
