//! The wire between the Rust side and the Lua library: commands as words, answers as JSON.
//!
//! A command becomes `OP ARGC ARGS...` (numbers in decimal, `-` for an unset optional value: ids
//! start with a letter or digit, so `-` is never an id). An answer comes back as one JSON object
//! per command, or for the hot path, a hold a `reserve` made, as `N` and the time it was made
//! (the server knows the rest: `made_hold`), and becomes the core's `Outcome`. Both directions
//! are written once, here.

use serde::Deserialize;
use serde_json::Value;
use stockd_core::{
    Command, DetailKind, DetailValue, Error, HoldId, HoldItem, HoldStatus, HoldView, PoolView,
    Reply, ReserveRequest, SegmentView,
};

/// One command as the library's `call` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub name: &'static str,
    pub args: Vec<String>,
}

impl Op {
    /// A reserve sent to the partition its hold id hashes to (`Route::Dir`) for a hold whose
    /// home is another partition. At `partition` it makes no hold: it writes the hold's directory
    /// entry and answers {"moved"}, or finds the entry (the same move again) or a record of the
    /// id (a replay or a conflict, as any retry). A second run answers what the first did, so a
    /// call of these alone needs no record of its answers (`Shared::call`). (A held hold found
    /// past its deadline is expired by the first run; the second answers it expired too, and a
    /// cross-partition hold's parts are then returned by the sweeper, not by this call.)
    pub(crate) fn moves_elsewhere(&self, partition: u32) -> bool {
        let n = self.args.len();
        self.name == "reserve"
            && n >= 3
            && self.args[n - 3] == "dir"
            && self.args[n - 2] != partition.to_string()
    }
}

/// The library's commands that change nothing (main.lua's `S.READ_OPS`, which a test holds
/// this list to). A `sweep` that finds nothing to do changes nothing; one that does changes.
pub(crate) const READ_OPS: [&str; 10] = [
    "get_pool",
    "get_segments",
    "get_hold",
    "list_pools",
    "list_holds",
    "x_state",
    "part_refundable",
    "sweep",
    "pop_owner",
    "seg_get",
];

/// Whether a call of `groups` may answer what it read without writing anything: every command
/// reads only, and one of them answers something (a call of sweeps alone tells nothing it did
/// not write). Such a call writes nothing itself, so when changes wait for replicas it is
/// followed by a write that `WAIT` can count (link.rs `fcall`).
pub(crate) fn reads_only(groups: &[&[Op]]) -> bool {
    let mut ops = groups.iter().flat_map(|group| group.iter());
    ops.clone().all(|op| READ_OPS.contains(&op.name)) && ops.any(|op| op.name != "sweep")
}

fn opt(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Where a command naming a hold is sent, and what that partition is to the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The dataset has one partition.
    Only,
    /// The partition the hold id hashes to: the hold is here, or its directory entry says where.
    /// `home` is where a new hold would live (its first pool's partition).
    Dir { home: u32, local: bool },
    /// The hold's home partition, after a {"moved"}.
    Home { local: bool },
}

impl Route {
    fn words(self) -> [String; 3] {
        let flag = |local: bool| if local { "1" } else { "0" }.to_string();
        match self {
            Route::Only => ["only".into(), "0".into(), "1".into()],
            Route::Dir { home, local } => ["dir".into(), home.to_string(), flag(local)],
            Route::Home { local } => ["home".into(), "0".into(), flag(local)],
        }
    }
}

/// Encodes a validated command. `ListPools` and `ListHolds` ask one partition; the caller merges. `route`
/// matters only for commands naming a hold.
pub fn encode(command: &Command, route: Route) -> Op {
    let [route_name, home, local] = route.words();
    let (name, args): (&'static str, Vec<String>) = match command {
        Command::PutPool {
            pool,
            spec,
            segments,
            if_absent,
        } => (
            "put_pool",
            vec![
                pool.to_string(),
                spec.total.to_string(),
                opt(spec.per_user_limit),
                opt(spec.starts_at_ms),
                opt(spec.ends_at_ms),
                opt(spec.low_stock_threshold),
                if *if_absent { "1" } else { "0" }.to_string(),
                opt(*segments),
            ],
        ),
        Command::Restock {
            pool,
            delta,
            request_id,
        } => (
            "restock",
            vec![
                pool.to_string(),
                delta.to_string(),
                request_id
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |r| r.to_string()),
            ],
        ),
        Command::GetPool { pool } => ("get_pool", vec![pool.to_string()]),
        Command::GetSegments { pool } => ("get_segments", vec![pool.to_string()]),
        Command::ListPools {
            prefix,
            after,
            limit,
        } => (
            "list_pools",
            vec![
                prefix.clone(),
                after.clone().unwrap_or_default(),
                limit.to_string(),
            ],
        ),
        Command::DeletePool { pool } => ("delete_pool", vec![pool.to_string()]),
        Command::Reserve(request) => {
            let mut args = vec![
                request.hold_id.to_string(),
                request
                    .user
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |u| u.to_string()),
                if request.confirm { "1" } else { "0" }.to_string(),
                request.ttl_ms.to_string(),
                request.wait_ms.to_string(),
                request.items.len().to_string(),
            ];
            for item in request.items.iter() {
                args.push(item.pool.to_string());
                args.push(item.qty.to_string());
            }
            args.extend([route_name, home, local]);
            ("reserve", args)
        }
        Command::Confirm { hold_id } => ("confirm", vec![hold_id.to_string(), route_name]),
        Command::Release { hold_id } => ("release", vec![hold_id.to_string(), route_name]),
        Command::Refund { hold_id, restock } => (
            "refund",
            vec![
                hold_id.to_string(),
                route_name,
                "0".to_string(),
                if *restock { "1" } else { "0" }.to_string(),
            ],
        ),
        Command::Extend { hold_id, ttl_ms } => (
            "extend",
            vec![hold_id.to_string(), route_name, ttl_ms.to_string()],
        ),
        Command::GetHold { hold_id } => ("get_hold", vec![hold_id.to_string(), route_name]),
        Command::ListHolds {
            pool,
            user,
            status,
            after,
            limit,
        } => (
            "list_holds",
            vec![
                pool.as_ref()
                    .map_or_else(String::new, |pool| pool.to_string()),
                user.as_ref()
                    .map_or_else(String::new, |user| user.to_string()),
                status.map_or("", |status| status.as_str()).to_string(),
                after.clone().unwrap_or_default(),
                limit.to_string(),
            ],
        ),
        Command::LockAcquire(request) => (
            "lock_acquire",
            vec![
                request.name.to_string(),
                request.owner.to_string(),
                request.ttl_ms.to_string(),
                request.wait_ms.to_string(),
            ],
        ),
        Command::LockRenew {
            name,
            owner,
            token,
            ttl_ms,
        } => (
            "lock_renew",
            vec![
                name.to_string(),
                owner.to_string(),
                token.to_string(),
                ttl_ms.to_string(),
            ],
        ),
        Command::LockRelease { name, owner, token } => (
            "lock_release",
            vec![name.to_string(), owner.to_string(), token.to_string()],
        ),
    };
    Op { name, args }
}

/// What the library answered for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Done(Result<Reply, Error>),
    /// `reserve` made the hold the request describes, in the partition the command was sent to,
    /// at this time (Redis's clock): held, or confirmed at once for `confirm: true`. The library
    /// does not spell out a hold the server already knows (`made_hold` does).
    Made {
        created_at_ms: u64,
    },
    /// The pool is spread over partitions in this many segments (segments.rs): a command on the
    /// whole pool runs as a pool op or a collect, a reserve goes to a segment.
    Segmented {
        pool: String,
        segments: u32,
    },
    /// A pool op (number `op`) is under way on the pool (or froze the segment): ask again once
    /// it is over.
    Frozen {
        pool: String,
        op: u64,
    },
    /// An error, after the command expired holds over several partitions on its way (a confirm
    /// of a hold past its deadline): each one's parts must follow its expiry (`part_apply` of
    /// that op and attempt in each partition, then `x_applied`).
    Settled {
        error: Error,
        settled: Vec<SettledHold>,
    },
    /// A hold (or a decision on one) whose pools span partitions: the parts of `attempt` must
    /// follow the decision (`part_apply` with this op in each partition, then `x_applied`).
    Decided {
        reply: Reply,
        apply: String,
        attempt: String,
        /// The hold's items as the library keeps them (`wire_items`): where its parts are.
        parts: Vec<HoldItem>,
    },
    /// One partition's page of `list_pools`: its pools in id order, and whether more follow.
    PoolPage {
        pools: Vec<PoolView>,
        more: bool,
        /// The listed pools spread over partitions: their counts here are segment 0's.
        spread: Vec<String>,
    },
    /// One partition's page of `list_holds`: its holds in id order, and where to go on from
    /// (every hold id up to it was examined), or `None` when the partition has no more.
    HoldPage {
        holds: Vec<HoldView>,
        next: Option<HoldId>,
    },
    /// Parked until stock or the lock comes back; the ticket names the waiter.
    Parked(u64),
    /// Not run: an earlier command of the same request parked.
    NotRun,
    /// A sweep's result: whether more holds are due, cross-partition holds to roll forward
    /// (decided, parts not applied) and back (reserves that never finished), and held parts
    /// whose home is to be asked whether it still owns them (`ATTEMPT HOME HOLD`).
    Swept {
        more: bool,
        forward: Vec<String>,
        back: Vec<String>,
        parts: Vec<String>,
        /// Pools (in this partition, their segment 0) whose op is older than the timeout.
        pool_ops: Vec<String>,
        /// Segments frozen longer than the timeout: `POOL SEGMENT OP`.
        frozen: Vec<String>,
        /// Spread pools whose low-stock watch a change crossed.
        low: Vec<String>,
    },
    /// The hold lives in another partition.
    Moved(u32),
    /// `rid_claim`: the request id is claimed for this restock (`rid_unclaim`: taken back).
    Unseen,
    /// The hold's pools span partitions: run the cross-partition protocol with this partition
    /// as home.
    Cross,
    /// A cross-partition refund of this hold: the parts (its items as the library keeps
    /// them) must be checked first.
    Precheck {
        hold: HoldView,
        parts: Vec<HoldItem>,
    },
    /// Cross protocol steps: go on; a part is written; rolled back (or being rolled back); the
    /// items of a record being rolled back; nothing to roll back.
    Begun(String),
    /// `x_attempt`: a new attempt number for the hold id.
    NextAttempt(String),
    /// `x_owner`: whether home's record is of the attempt asked about.
    Owner(bool),
    PartOk,
    Aborted,
    /// The items as the library keeps them (`wire_items`).
    Aborting {
        items: Vec<HoldItem>,
        attempt: String,
    },
    Gone,
    /// A cross-partition hold as a sweeper sees it: the record, the transition to apply and
    /// the attempt whose parts must apply it.
    State {
        hold: HoldView,
        apply: Option<String>,
        attempt: String,
        parts: Vec<HoldItem>,
    },
}

/// The hold a `reserve` made (`Answer::Made`) in `partition`, as the library keeps it: the
/// request's id, user and items in its order, held until `created_at_ms + ttl_ms`, or
/// confirmed at once (finished when made) for `confirm: true`.
pub fn made_hold(request: &ReserveRequest, partition: u32, created_at_ms: u64) -> HoldView {
    HoldView {
        hold_id: request.hold_id.clone(),
        status: if request.confirm {
            HoldStatus::Confirmed
        } else {
            HoldStatus::Held
        },
        user: request.user.clone(),
        items: request.items.clone(),
        created_at_ms,
        expires_at_ms: created_at_ms + request.ttl_ms,
        finished_at_ms: request.confirm.then_some(created_at_ms),
        partition,
    }
}

/// A hold over several partitions that a command expired, and the part transition to apply.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SettledHold {
    pub hold: HoldView,
    pub apply: String,
    pub attempt: String,
    /// The hold's items as the library keeps them (`wire_items`), filled in by `decode`.
    #[serde(skip)]
    pub parts: Vec<HoldItem>,
}

/// A hold's items as the library keeps them, from its JSON: the API's pool id, or for an item
/// in a segment J >= 1 of a pool spread over partitions (`"segment": J`), that segment's name
/// (`PoolId::segment`), so that the cross-partition steps find the partition of each part.
fn wire_items(items: Option<&Value>) -> Result<Vec<HoldItem>, DecodeError> {
    #[derive(Deserialize)]
    struct Item {
        pool: stockd_core::PoolId,
        qty: u64,
        #[serde(default)]
        segment: Option<u32>,
    }
    let items = items.ok_or_else(|| DecodeError("a hold without items".into()))?;
    let items: Vec<Item> =
        serde_json::from_value(items.clone()).map_err(|e| DecodeError(e.to_string()))?;
    Ok(items
        .into_iter()
        .map(|item| HoldItem {
            pool: match item.segment {
                Some(segment) => item.pool.segment(segment),
                None => item.pool,
            },
            qty: item.qty,
        })
        .collect())
}

/// Why an answer could not be read: a library that does not speak this wire is a bug or a
/// foreign library, never a client error.
#[derive(Debug, thiserror::Error)]
#[error("unreadable answer from the Redis library: {0}")]
pub struct DecodeError(pub String);

#[derive(Deserialize)]
struct PoolAnswer {
    pool: PoolView,
    created: bool,
    /// A restock retried with its request id: nothing changed (`cmd/restock.lua`).
    replayed: bool,
}

#[derive(Deserialize)]
struct HoldAnswer {
    hold: HoldView,
    created: bool,
    apply: Option<String>,
    #[serde(default)]
    attempt: String,
}

#[derive(Deserialize)]
struct SweptAnswer {
    more: bool,
    forward: Vec<String>,
    back: Vec<String>,
    #[serde(default)]
    parts: Vec<String>,
    #[serde(default)]
    pops: Vec<String>,
    #[serde(default)]
    frozen: Vec<String>,
    #[serde(default)]
    low: Vec<String>,
}

#[derive(Deserialize)]
struct StateAnswer {
    state: HoldView,
    apply: Option<String>,
    #[serde(default)]
    attempt: String,
}

#[derive(Deserialize)]
struct HoldsAnswer {
    holds: Vec<HoldView>,
    next: Option<HoldId>,
}

#[derive(Deserialize)]
struct SegmentsAnswer {
    segments: Vec<SegmentView>,
}

#[derive(Deserialize)]
struct PoolsAnswer {
    pools: Vec<PoolView>,
    more: bool,
    #[serde(default)]
    spread: Vec<String>,
}

/// An answer's spread pools whose low-stock watch the command crossed (`L POOL,POOL ` before
/// it, segments.lua), and the answer.
pub fn split_low(text: &str) -> (Vec<String>, &str) {
    match text.strip_prefix('L').and_then(|rest| rest.split_once(' ')) {
        Some((pools, answer)) => (pools.split(',').map(str::to_string).collect(), answer),
        None => (Vec::new(), text),
    }
}

pub fn decode(text: &str) -> Result<Answer, DecodeError> {
    let (_, text) = split_low(text);
    if text == "~" {
        return Ok(Answer::NotRun);
    }
    if let Some(time) = text.strip_prefix('N') {
        let created_at_ms = time
            .parse()
            .map_err(|_| DecodeError(format!("not a hold's creation time: {text}")))?;
        return Ok(Answer::Made { created_at_ms });
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| DecodeError(format!("{e}: {text}")))?;
    let bad = |e: serde_json::Error| DecodeError(format!("{e}: {text}"));
    let object = value
        .as_object()
        .ok_or_else(|| DecodeError(text.to_string()))?;
    if let Some(code) = object.get("error").and_then(Value::as_str) {
        let pool = || {
            object
                .get("pool")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        match code {
            "segmented" => {
                let segments = object.get("segments").and_then(Value::as_u64).unwrap_or(1);
                return Ok(Answer::Segmented {
                    pool: pool(),
                    segments: segments as u32,
                });
            }
            "frozen" => {
                let op = object.get("op").and_then(Value::as_u64).unwrap_or(0);
                return Ok(Answer::Frozen { pool: pool(), op });
            }
            _ => {}
        }
        let error = error(code, &value)?;
        if let Some(settled) = object.get("settled") {
            let mut holds: Vec<SettledHold> =
                serde_json::from_value(settled.clone()).map_err(bad)?;
            for (hold, value) in holds
                .iter_mut()
                .zip(settled.as_array().into_iter().flatten())
            {
                hold.parts = wire_items(value.get("hold").and_then(|h| h.get("items")))?;
            }
            return Ok(Answer::Settled {
                error,
                settled: holds,
            });
        }
        return Ok(Answer::Done(Err(error)));
    }
    if object.contains_key("hold") {
        let parts = match object.get("apply") {
            Some(_) => wire_items(object.get("hold").and_then(|h| h.get("items")))?,
            None => Vec::new(),
        };
        let answer: HoldAnswer = serde_json::from_value(value).map_err(bad)?;
        let reply = Reply::Hold {
            hold: answer.hold,
            created: answer.created,
        };
        return Ok(match answer.apply {
            Some(apply) => Answer::Decided {
                reply,
                apply,
                attempt: answer.attempt,
                parts,
            },
            None => Answer::Done(Ok(reply)),
        });
    }
    if object.contains_key("state") {
        let parts = wire_items(object.get("state").and_then(|h| h.get("items")))?;
        let answer: StateAnswer = serde_json::from_value(value).map_err(bad)?;
        return Ok(Answer::State {
            hold: answer.state,
            apply: answer.apply,
            attempt: answer.attempt,
            parts,
        });
    }
    if object.contains_key("expired") {
        let answer: SweptAnswer = serde_json::from_value(value).map_err(bad)?;
        return Ok(Answer::Swept {
            more: answer.more,
            forward: answer.forward,
            back: answer.back,
            parts: answer.parts,
            pool_ops: answer.pops,
            frozen: answer.frozen,
            low: answer.low,
        });
    }
    if let Some(items) = object.get("aborting") {
        if items.is_array() {
            let items = wire_items(Some(items))?;
            let attempt = object
                .get("attempt")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Ok(Answer::Aborting {
                items,
                attempt: attempt.to_string(),
            });
        }
        return Ok(Answer::Aborted);
    }
    if let Some(attempt) = object.get("begun").and_then(Value::as_str) {
        return Ok(Answer::Begun(attempt.to_string()));
    }
    if let Some(attempt) = object.get("next_attempt").and_then(Value::as_str) {
        return Ok(Answer::NextAttempt(attempt.to_string()));
    }
    if let Some(owner) = object.get("owner").and_then(Value::as_bool) {
        return Ok(Answer::Owner(owner));
    }
    let flag = |name: &str| object.get(name).and_then(Value::as_bool) == Some(true);
    if flag("cross") {
        return Ok(Answer::Cross);
    }
    if let Some(hold) = object.get("precheck") {
        let parts = wire_items(hold.get("items"))?;
        let hold: HoldView = serde_json::from_value(hold.clone()).map_err(bad)?;
        return Ok(Answer::Precheck { hold, parts });
    }
    if flag("aborted") {
        return Ok(Answer::Aborted);
    }
    if flag("gone") {
        return Ok(Answer::Gone);
    }
    if flag("unseen") {
        return Ok(Answer::Unseen);
    }
    if object.get("part").and_then(Value::as_str) == Some("ok") {
        return Ok(Answer::PartOk);
    }
    if object.contains_key("holds") {
        let answer: HoldsAnswer = serde_json::from_value(value).map_err(bad)?;
        return Ok(Answer::HoldPage {
            holds: answer.holds,
            next: answer.next,
        });
    }
    if object.contains_key("pools") {
        let answer: PoolsAnswer = serde_json::from_value(value).map_err(bad)?;
        return Ok(Answer::PoolPage {
            pools: answer.pools,
            more: answer.more,
            spread: answer.spread,
        });
    }
    if object.contains_key("segments") {
        let answer: SegmentsAnswer = serde_json::from_value(value).map_err(bad)?;
        return Ok(Answer::Done(Ok(Reply::Segments {
            segments: answer.segments,
        })));
    }
    if object.contains_key("pool") {
        let answer: PoolAnswer = serde_json::from_value(value).map_err(bad)?;
        return Ok(Answer::Done(Ok(Reply::Pool {
            pool: answer.pool,
            created: answer.created,
            replayed: answer.replayed,
        })));
    }
    let number = |name: &str| object.get(name).and_then(Value::as_u64);
    if let (Some(token), Some(expires_at_ms)) = (number("token"), number("expires_at_ms")) {
        return Ok(Answer::Done(Ok(Reply::Lock {
            token,
            expires_at_ms,
        })));
    }
    if let Some(ticket) = number("wait") {
        return Ok(Answer::Parked(ticket));
    }
    if let Some(partition) = number("moved") {
        let partition = u32::try_from(partition).map_err(|_| DecodeError(text.to_string()))?;
        return Ok(Answer::Moved(partition));
    }
    if object.contains_key("deleted") {
        return Ok(Answer::Done(Ok(Reply::PoolDeleted)));
    }
    if object.contains_key("released") {
        return Ok(Answer::Done(Ok(Reply::LockReleased)));
    }
    Err(DecodeError(text.to_string()))
}

/// The core's error for a code and its detail fields, read by the core's table of errors: each
/// field by its name and kind (the message of `invalid_request` is the answer's `message`).
fn error(code: &str, value: &Value) -> Result<Error, DecodeError> {
    Error::from_details(code, |name, kind| {
        let field = value.get(name)?;
        match kind {
            DetailKind::Message | DetailKind::Id => field.as_str().map(DetailValue::Text),
            DetailKind::Int { .. } => field.as_u64().map(DetailValue::Unsigned),
            DetailKind::Delta => field.as_i64().map(DetailValue::Signed),
        }
    })
    .map_err(|e| DecodeError(format!("{e}: {value}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockd_core::{HoldId, PoolId};

    #[test]
    fn the_read_ops_are_the_librarys() {
        let main = include_str!("../lua/main.lua");
        let start = main
            .find("S.READ_OPS = {")
            .expect("main.lua declares S.READ_OPS")
            + 14;
        let end = start + main[start..].find('}').expect("the end of S.READ_OPS");
        let mut library: Vec<&str> = main[start..end]
            .split(',')
            .filter_map(|entry| entry.trim().strip_suffix("= true"))
            .map(str::trim)
            .collect();
        library.sort_unstable();
        let mut ours = READ_OPS.to_vec();
        ours.sort_unstable();
        assert_eq!(ours, library);
    }

    #[test]
    fn a_call_reads_only_when_every_command_reads_and_one_answers_something() {
        let op = |name| Op {
            name,
            args: Vec::new(),
        };
        let (get, sweep, reserve) = ([op("get_hold")], [op("sweep")], [op("reserve")]);
        assert!(reads_only(&[&get]));
        assert!(reads_only(&[&sweep, &get]));
        assert!(!reads_only(&[&sweep]));
        assert!(!reads_only(&[&get, &reserve]));
        assert!(!reads_only(&[&reserve]));
    }

    #[test]
    fn only_a_reserve_sent_where_its_id_hashes_for_a_home_elsewhere_moves_elsewhere() {
        let reserve = Command::Reserve(ReserveRequest {
            hold_id: HoldId::parse("h1").unwrap(),
            user: None,
            items: vec![HoldItem {
                pool: PoolId::parse("p").unwrap(),
                qty: 1,
            }]
            .into(),
            ttl_ms: 60_000,
            confirm: false,
            wait_ms: 0,
        });
        let dir = |home| Route::Dir { home, local: false };
        assert!(encode(&reserve, dir(3)).moves_elsewhere(1));
        assert!(!encode(&reserve, dir(1)).moves_elsewhere(1));
        assert!(!encode(&reserve, Route::Home { local: true }).moves_elsewhere(1));
        assert!(!encode(&reserve, Route::Only).moves_elsewhere(0));
        let confirm = Command::Confirm {
            hold_id: HoldId::parse("h1").unwrap(),
        };
        assert!(!encode(&confirm, dir(3)).moves_elsewhere(1));
    }
}
