//! The sequences: a small universe of ids, the ops a step is made of, what the driver remembers
//! of earlier answers (tokens, reserves to send again), and the proptest strategies.
//!
//! Everything here is data: an op becomes a `Command` only at the time it runs, so that the
//! same sequence drives every implementation the same way. No rule of the contract lives here.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use proptest::prelude::*;
use stockd_core::{
    Command, HoldId, HoldItem, HoldStatus, LockName, LockRequest, Outcome, OwnerId, PoolId,
    PoolSpec, Reply, RequestId, ReserveRequest, StateConfig, UserId,
};

// ------------------------------------------------------------------------------------ universe

pub const POOLS: [&str; 3] = ["p1", "p2", "q1"];
pub const HOLDS: [&str; 6] = ["h1", "h2", "h3", "h4", "h5", "h6"];
const USERS: [&str; 2] = ["u1", "u2"];
const LOCKS: [&str; 2] = ["l1", "l2"];
/// Few request ids, so that restocks retry and conflict often.
pub const REQUEST_IDS: [&str; 2] = ["r1", "r2"];
const OWNERS: [&str; 2] = ["o1", "o2"];
const LIST_PREFIXES: [&str; 4] = ["", "p", "p1", "q"];
const LIST_AFTERS: [&str; 4] = ["a0", "p1", "p2", "q1"];
const STATUSES: [HoldStatus; 5] = [
    HoldStatus::Held,
    HoldStatus::Confirmed,
    HoldStatus::Released,
    HoldStatus::Expired,
    HoldStatus::Refunded,
];

/// Time starts well above zero so that windows can open before "now".
pub const START_MS: u64 = 1_000_000;

/// Short retention, so that random runs of a few minutes see holds purged and ids reused.
pub const CONFIG: StateConfig = StateConfig {
    hold_retention_ms: 5_000,
    confirmed_retention_ms: 12_000,
};

pub fn pool_id(text: &str) -> PoolId {
    PoolId::parse(text).expect("model pool id")
}

pub fn hold_id(text: &str) -> HoldId {
    HoldId::parse(text).expect("model hold id")
}

fn user_id(text: &str) -> UserId {
    UserId::parse(text).expect("model user id")
}

fn lock_name(text: &str) -> LockName {
    LockName::parse(text).expect("model lock name")
}

fn owner_id(text: &str) -> OwnerId {
    OwnerId::parse(text).expect("model owner id")
}

// ------------------------------------------------------------------------------------ ops

/// Which fencing token a renew or release names.
#[derive(Debug, Clone, Copy)]
pub enum TokenPick {
    /// The last token granted on that lock name.
    Current,
    /// One below it: a stale fence.
    Previous,
    Literal(u64),
}

/// One command, as indices into the universe above; [`Op::command`] makes the `Command`.
#[derive(Debug, Clone)]
pub enum Op {
    PutPool {
        pool: usize,
        total: u64,
        per_user_limit: Option<u64>,
        starts_offset_ms: Option<i64>,
        ends_offset_ms: Option<i64>,
        low_stock_threshold: Option<u64>,
        /// The segment count asked for: none, a valid one, or 0 (out of range).
        segments: Option<u64>,
        if_absent: bool,
    },
    Restock {
        pool: usize,
        delta: i64,
        /// An index into `REQUEST_IDS`, or no request id.
        request: Option<usize>,
    },
    DeletePool {
        pool: usize,
    },
    GetPool {
        pool: usize,
    },
    ListPools {
        prefix: usize,
        after: Option<usize>,
        limit: usize,
    },
    Reserve {
        hold: usize,
        user: Option<usize>,
        items: Vec<(usize, u64)>,
        ttl_ms: u64,
        confirm: bool,
        wait_ms: u64,
    },
    /// The last reserve sent for this hold id again: a replay or a conflict.
    ReserveAgain {
        hold: usize,
        rotate: usize,
        tweak: u8,
    },
    Confirm {
        hold: usize,
    },
    Release {
        hold: usize,
    },
    Refund {
        hold: usize,
        restock: bool,
    },
    Extend {
        hold: usize,
        ttl_ms: u64,
    },
    GetHold {
        hold: usize,
    },
    ListHolds {
        pool: Option<usize>,
        user: Option<usize>,
        status: Option<usize>,
        after: Option<usize>,
        limit: usize,
    },
    LockAcquire {
        lock: usize,
        owner: usize,
        ttl_ms: u64,
        wait_ms: u64,
    },
    LockRenew {
        lock: usize,
        owner: usize,
        token: TokenPick,
        ttl_ms: u64,
    },
    LockRelease {
        lock: usize,
        owner: usize,
        token: TokenPick,
    },
}

/// One step of a sequence.
#[derive(Debug, Clone)]
pub enum Step {
    /// One request: its commands run in order, at the current time.
    Commands(Vec<Op>),
    /// Time passes by `ms`. With `sweep`, what time does then happens (expiry, lapsed leases,
    /// forgetting past retention), as `State::tick` does it; without, nothing runs, and only
    /// the commands that follow notice (a hold they name expires or is forgotten lazily).
    Advance { ms: u64, sweep: bool },
}

fn at_offset(now_ms: u64, offset_ms: i64) -> u64 {
    (now_ms as i64 + offset_ms).max(0) as u64
}

/// What the test driver remembers of earlier answers, so that later ops can reuse (or misuse)
/// it: the last lock token granted per name and the last reserve sent per hold id.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    last_token: BTreeMap<LockName, u64>,
    last_reserve: BTreeMap<HoldId, ReserveRequest>,
}

impl Memory {
    /// Notes a command sent, with its answer once there is one (a parked one has none yet).
    pub fn note(&mut self, command: &Command, outcome: Option<&Outcome>) {
        match (command, outcome) {
            (Command::LockAcquire(request), Some(Ok(Reply::Lock { token, .. }))) => {
                self.last_token.insert(request.name.clone(), *token);
            }
            (Command::Reserve(request), _) => {
                self.last_reserve
                    .insert(request.hold_id.clone(), request.clone());
            }
            _ => {}
        }
    }
}

/// The same reserve again, items rotated, with at most one field changed (`tweak`).
fn reserve_again(memory: &Memory, hold: usize, rotate: usize, tweak: u8) -> ReserveRequest {
    let id = hold_id(HOLDS[hold]);
    let mut request = memory
        .last_reserve
        .get(&id)
        .cloned()
        .unwrap_or(ReserveRequest {
            hold_id: id,
            user: None,
            items: vec![HoldItem {
                pool: pool_id(POOLS[0]),
                qty: 1,
            }]
            .into(),
            ttl_ms: 1_000,
            confirm: false,
            wait_ms: 0,
        });
    // The last reserve may have had no items (an invalid request, as the fuzz target sends).
    let mut items = request.items.to_vec();
    let len = items.len();
    items.rotate_left(rotate % len.max(1));
    match tweak {
        // Not part of the identity: still a replay.
        0 => request.ttl_ms = 2_000,
        1 => request.confirm = !request.confirm,
        2 => {
            request.user = match request.user.as_ref().map(|u| u.as_str()) {
                None => Some(user_id(USERS[0])),
                Some("u1") => Some(user_id(USERS[1])),
                Some(_) => None,
            }
        }
        3 => {
            if let Some(item) = items.first_mut() {
                item.qty += 1;
            }
        }
        4 if len > 1 => {
            items.pop();
        }
        _ => {}
    }
    request.items = items.into();
    request
}

fn pick_token(pick: TokenPick, last_token: &BTreeMap<LockName, u64>, name: &LockName) -> u64 {
    let current = last_token.get(name).copied().unwrap_or(1);
    match pick {
        TokenPick::Current => current,
        TokenPick::Previous => current.saturating_sub(1),
        TokenPick::Literal(token) => token,
    }
}

impl Op {
    /// The command this op stands for at `now_ms`, given what earlier answers said.
    pub fn command(&self, now_ms: u64, memory: &Memory) -> Command {
        to_command(self, now_ms, memory)
    }
}

fn to_command(op: &Op, now_ms: u64, memory: &Memory) -> Command {
    let last_token = &memory.last_token;
    match op {
        Op::ReserveAgain {
            hold,
            rotate,
            tweak,
        } => Command::Reserve(reserve_again(memory, *hold, *rotate, *tweak)),
        Op::PutPool {
            pool,
            total,
            per_user_limit,
            starts_offset_ms,
            ends_offset_ms,
            low_stock_threshold,
            segments,
            if_absent,
        } => Command::PutPool {
            pool: pool_id(POOLS[*pool]),
            spec: PoolSpec {
                total: *total,
                per_user_limit: *per_user_limit,
                starts_at_ms: starts_offset_ms.map(|o| at_offset(now_ms, o)),
                ends_at_ms: ends_offset_ms.map(|o| at_offset(now_ms, o)),
                low_stock_threshold: *low_stock_threshold,
            },
            segments: *segments,
            if_absent: *if_absent,
        },
        Op::Restock {
            pool,
            delta,
            request,
        } => Command::Restock {
            pool: pool_id(POOLS[*pool]),
            delta: *delta,
            request_id: request.map(|r| RequestId::parse(REQUEST_IDS[r]).expect("valid id")),
        },
        Op::DeletePool { pool } => Command::DeletePool {
            pool: pool_id(POOLS[*pool]),
        },
        Op::GetPool { pool } => Command::GetPool {
            pool: pool_id(POOLS[*pool]),
        },
        Op::ListPools {
            prefix,
            after,
            limit,
        } => Command::ListPools {
            prefix: LIST_PREFIXES[*prefix].to_string(),
            after: after.map(|a| LIST_AFTERS[a].to_string()),
            limit: *limit,
        },
        Op::Reserve {
            hold,
            user,
            items,
            ttl_ms,
            confirm,
            wait_ms,
        } => Command::Reserve(ReserveRequest {
            hold_id: hold_id(HOLDS[*hold]),
            user: user.map(|u| user_id(USERS[u])),
            items: items
                .iter()
                .map(|(pool, qty)| HoldItem {
                    pool: pool_id(POOLS[*pool]),
                    qty: *qty,
                })
                .collect(),
            ttl_ms: *ttl_ms,
            confirm: *confirm,
            wait_ms: *wait_ms,
        }),
        Op::Confirm { hold } => Command::Confirm {
            hold_id: hold_id(HOLDS[*hold]),
        },
        Op::Release { hold } => Command::Release {
            hold_id: hold_id(HOLDS[*hold]),
        },
        Op::Refund { hold, restock } => Command::Refund {
            hold_id: hold_id(HOLDS[*hold]),
            restock: *restock,
        },
        Op::Extend { hold, ttl_ms } => Command::Extend {
            hold_id: hold_id(HOLDS[*hold]),
            ttl_ms: *ttl_ms,
        },
        Op::GetHold { hold } => Command::GetHold {
            hold_id: hold_id(HOLDS[*hold]),
        },
        Op::ListHolds {
            pool,
            user,
            status,
            after,
            limit,
        } => Command::ListHolds {
            pool: pool.map(|p| pool_id(POOLS[p])),
            user: user.map(|u| user_id(USERS[u])),
            status: status.map(|s| STATUSES[s]),
            after: after.map(|h| HOLDS[h].to_string()),
            limit: *limit,
        },
        Op::LockAcquire {
            lock,
            owner,
            ttl_ms,
            wait_ms,
        } => Command::LockAcquire(LockRequest {
            name: lock_name(LOCKS[*lock]),
            owner: owner_id(OWNERS[*owner]),
            ttl_ms: *ttl_ms,
            wait_ms: *wait_ms,
        }),
        Op::LockRenew {
            lock,
            owner,
            token,
            ttl_ms,
        } => {
            let name = lock_name(LOCKS[*lock]);
            Command::LockRenew {
                token: pick_token(*token, last_token, &name),
                name,
                owner: owner_id(OWNERS[*owner]),
                ttl_ms: *ttl_ms,
            }
        }
        Op::LockRelease { lock, owner, token } => {
            let name = lock_name(LOCKS[*lock]);
            Command::LockRelease {
                token: pick_token(*token, last_token, &name),
                name,
                owner: owner_id(OWNERS[*owner]),
            }
        }
    }
}

// ------------------------------------------------------------------------------------ strategies

fn qty() -> impl Strategy<Value = u64> {
    prop_oneof![30 => 1..=4u64, 1 => Just(0u64)]
}

/// 1-3 distinct pools in random order; sometimes a repeated pool (invalid).
fn items() -> impl Strategy<Value = Vec<(usize, u64)>> {
    (
        proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3).prop_shuffle(),
        proptest::collection::vec(qty(), 3),
        0..20u8,
    )
        .prop_map(|(pools, qtys, duplicate)| {
            let mut items: Vec<(usize, u64)> = pools.into_iter().zip(qtys).collect();
            if duplicate == 0 {
                items.push(items[0]);
            }
            items
        })
}

fn hold_ttl_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        20 => prop::sample::select(vec![1_000u64, 1_500, 2_500, 4_000, 8_000]),
        1 => Just(999u64),
    ]
}

fn lock_ttl_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => prop::sample::select(vec![100u64, 1_000, 2_500, 5_000]),
        1 => Just(99u64),
    ]
}

fn token_pick() -> impl Strategy<Value = TokenPick> {
    prop_oneof![
        6 => Just(TokenPick::Current),
        2 => Just(TokenPick::Previous),
        1 => (0..6u64).prop_map(TokenPick::Literal),
    ]
}

fn window_offset_ms() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![6 => Just(None), 1 => (-4_000..=4_000i64).prop_map(Some)]
}

fn put_pool_op(pool: impl Strategy<Value = usize>) -> impl Strategy<Value = Op> {
    (
        pool,
        0..=10u64,
        prop_oneof![8 => Just(None), 6 => (1..=3u64).prop_map(Some), 1 => Just(Some(0u64))],
        window_offset_ms(),
        window_offset_ms(),
        prop_oneof![1 => Just(None), 1 => (0..=4u64).prop_map(Some)],
        (
            prop_oneof![8 => Just(None), 4 => (1..=3u64).prop_map(Some), 1 => Just(Some(0u64))],
            prop::bool::weighted(0.2),
        ),
    )
        .prop_map(
            |(
                pool,
                total,
                per_user_limit,
                starts_offset_ms,
                ends_offset_ms,
                low_stock_threshold,
                (segments, if_absent),
            )| {
                Op::PutPool {
                    pool,
                    total,
                    per_user_limit,
                    starts_offset_ms,
                    ends_offset_ms,
                    low_stock_threshold,
                    segments,
                    if_absent,
                }
            },
        )
}

/// `wait_ms` for reserves and lock acquisitions: `waits` allows values above zero.
fn op(waits: bool) -> impl Strategy<Value = Op> {
    let wait_ms = move || {
        if waits {
            prop_oneof![3 => Just(0u64), 1 => Just(2_000u64)].boxed()
        } else {
            Just(0u64).boxed()
        }
    };
    let hold = || 0..HOLDS.len();
    let pool = || 0..POOLS.len();
    prop_oneof![
        4 => put_pool_op(0..POOLS.len()),
        2 => (pool(), -5..=5i64, prop::option::of(0..REQUEST_IDS.len()))
            .prop_map(|(pool, delta, request)| Op::Restock { pool, delta, request }),
        // The same restock again: each request id with a pool and delta of its own, so that
        // retries (replays) come often, not only when a random delta happens to match.
        1 => (0..REQUEST_IDS.len()).prop_map(|request| Op::Restock {
            pool: request % POOLS.len(),
            delta: 3,
            request: Some(request),
        }),
        2 => pool().prop_map(|pool| Op::DeletePool { pool }),
        1 => pool().prop_map(|pool| Op::GetPool { pool }),
        1 => (0..LIST_PREFIXES.len(), prop::option::of(0..LIST_AFTERS.len()), 0..=3usize)
            .prop_map(|(prefix, after, limit)| Op::ListPools { prefix, after, limit }),
        14 => (
            hold(),
            prop_oneof![2 => (0..USERS.len()).prop_map(Some), 1 => Just(None)],
            items(),
            hold_ttl_ms(),
            prop::bool::weighted(0.25),
            wait_ms(),
        )
            .prop_map(|(hold, user, items, ttl_ms, confirm, wait_ms)| Op::Reserve {
                hold,
                user,
                items,
                ttl_ms,
                confirm,
                wait_ms,
            }),
        4 => (hold(), 0..3usize, 0..10u8)
            .prop_map(|(hold, rotate, tweak)| Op::ReserveAgain { hold, rotate, tweak }),
        3 => hold().prop_map(|hold| Op::Confirm { hold }),
        3 => hold().prop_map(|hold| Op::Release { hold }),
        3 => (hold(), any::<bool>()).prop_map(|(hold, restock)| Op::Refund { hold, restock }),
        3 => (hold(), hold_ttl_ms()).prop_map(|(hold, ttl_ms)| Op::Extend { hold, ttl_ms }),
        1 => hold().prop_map(|hold| Op::GetHold { hold }),
        1 => (
            prop::option::of(pool()),
            prop::option::of(0..USERS.len()),
            prop::option::of(0..STATUSES.len()),
            prop::option::of(hold()),
            0..=3usize,
        )
            .prop_map(|(pool, user, status, after, limit)| Op::ListHolds { pool, user, status, after, limit }),
        2 => (0..LOCKS.len(), 0..OWNERS.len(), lock_ttl_ms(), wait_ms())
            .prop_map(|(lock, owner, ttl_ms, wait_ms)| Op::LockAcquire { lock, owner, ttl_ms, wait_ms }),
        2 => (0..LOCKS.len(), 0..OWNERS.len(), token_pick(), lock_ttl_ms())
            .prop_map(|(lock, owner, token, ttl_ms)| Op::LockRenew { lock, owner, token, ttl_ms }),
        2 => (0..LOCKS.len(), 0..OWNERS.len(), token_pick())
            .prop_map(|(lock, owner, token)| Op::LockRelease { lock, owner, token }),
    ]
}

/// Mostly one command per request; sometimes a few in one batch, which a backend must answer
/// exactly as if they came one by one.
fn step(waits: bool) -> impl Strategy<Value = Step> {
    prop_oneof![
        // Time passes a little more often than once in ten steps.
        47 => prop_oneof![
            10 => op(waits).prop_map(|op| vec![op]),
            1 => proptest::collection::vec(op(waits), 2..=4),
        ]
        .prop_map(Step::Commands),
        // Round steps land exactly on deadlines (ttls are multiples of 100 ms), where `<` vs `<=`
        // decides; random ones land anywhere. One in three leaves the sweep for later, so that
        // commands meet holds past their deadline or retention.
        7 => (
            prop_oneof![
                (0..=3_000u64),
                prop::sample::select(vec![0u64, 100, 500, 1_000, 1_500, 2_500, 3_000]),
            ],
            prop::bool::weighted(0.7),
        )
            .prop_map(|(ms, sweep)| Step::Advance { ms, sweep }),
    ]
}

fn sequence(waits: bool, steps: RangeInclusive<usize>) -> impl Strategy<Value = Vec<Step>> {
    let setup: Vec<_> = (0..POOLS.len())
        .map(|pool| put_pool_op(Just(pool)).prop_map(|op| Step::Commands(vec![op])))
        .collect();
    (setup, proptest::collection::vec(step(waits), steps)).prop_map(|(mut setup, rest)| {
        setup.extend(rest);
        setup
    })
}

/// Random sequences for the model: they start by creating the three pools (most reserves need
/// one), then `steps` steps, every `wait_ms` 0.
pub fn sequences(steps: RangeInclusive<usize>) -> impl Strategy<Value = Vec<Step>> {
    sequence(false, steps)
}

/// As [`sequences`], but some reserves and lock acquisitions wait (`wait_ms` 2,000): for
/// properties that do not compare against the model (replay, snapshots).
pub fn sequences_with_waits(steps: RangeInclusive<usize>) -> impl Strategy<Value = Vec<Step>> {
    sequence(true, steps)
}
