//! What Redis holds for one hold id, and each step of the protocol as one atomic change of it.
//!
//! This is the model's mirror of `crates/stockd-redis/lua/cross.lua`: one function per library
//! function, same name, each written from the tables of docs/redis.md ("Holds over several
//! partitions"), row for row. A step sees the whole state, as a Lua function sees its partition
//! (a step only ever touches one partition, its own). It never decides who calls it or when: that
//! is `system.rs`. A step that reaches a case the specification does not cover, or that moves the
//! units of an attempt other than its own, reports it as a [`Breach`] instead of guessing.

use std::fmt;

/// An attempt number. Attempts start at 1; 0 never names one.
pub type Attempt = u8;

/// Partitions a hold can span in the model: its home (partition 0, the first item's) and up to
/// two others. Item `i` of the hold lives in partition `i`, one unit each.
pub const PARTITIONS_MAX: usize = 3;

/// Units each item of the hold asks for.
pub const QTY_PER_ITEM: i8 = 1;

/// The status of the hold record at home (absent is `Option::None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordStatus {
    Pending,
    Aborting,
    Held,
    Confirmed,
    Released,
    Expired,
    Refunded,
}

impl RecordStatus {
    /// A decided record: a hold, as on a single partition.
    pub fn decided(self) -> bool {
        !matches!(self, RecordStatus::Pending | RecordStatus::Aborting)
    }

    fn name(self) -> &'static str {
        match self {
            RecordStatus::Pending => "pending",
            RecordStatus::Aborting => "aborting",
            RecordStatus::Held => "held",
            RecordStatus::Confirmed => "confirmed",
            RecordStatus::Released => "released",
            RecordStatus::Expired => "expired",
            RecordStatus::Refunded => "refunded",
        }
    }
}

/// A part transition decided at home (`ap`), applied to each part by `part_apply`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PartOp {
    Commit,
    Confirm,
    Return,
    Refund,
    Writeoff,
}

impl fmt::Display for PartOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PartOp::Commit => "commit",
            PartOp::Confirm => "confirm",
            PartOp::Return => "return",
            PartOp::Refund => "refund",
            PartOp::Writeoff => "writeoff",
        })
    }
}

/// The hold record at home: its status, its attempt (`at`) and the transition still to apply to
/// the parts (`ap`, which also stands for the `applyq` entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    pub status: RecordStatus,
    pub attempt: Attempt,
    pub apply: Option<PartOp>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PartStatus {
    Held,
    Confirmed,
    Returned,
    Refunded,
}

impl PartStatus {
    fn name(self) -> &'static str {
        match self {
            PartStatus::Held => "held",
            PartStatus::Confirmed => "confirmed",
            PartStatus::Returned => "returned",
            PartStatus::Refunded => "refunded",
        }
    }
}

/// A part: `st`, `at` (whose units these are) and `hi` (the highest attempt that ever wrote it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Part {
    pub status: PartStatus,
    pub attempt: Attempt,
    pub highest: Attempt,
}

/// The one pool of the hold's item in a partition. Signed, so that a unit moved that was not
/// there shows as a negative count instead of wrapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Pool {
    pub available: i8,
    pub held: i8,
    pub sold: i8,
    pub total: i8,
}

impl Pool {
    pub fn with_available(units: i8) -> Pool {
        Pool {
            available: units,
            held: 0,
            sold: 0,
            total: units,
        }
    }
}

/// The protocol's rules that the model can switch off, to show that the checker finds the
/// defects they prevent. [`Rules::DESIGN`] is docs/redis.md and lua/cross.lua.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// `part_apply(return, A)` returns only a part held by A. Off: it returns a held part of any
    /// attempt, as the library did before attempts were fences (the defect of the outside run).
    pub return_checks_attempt: bool,
    /// `part_reserve(A)` refuses when `A <= hi`. Off: it replaces a finished part of any other
    /// attempt, a newer attempt's tombstone included, and sets `hi = A`.
    pub reserve_checks_highest: bool,
    /// `x_forget(A)` also writes `xdead = A` (as `x_owner` does), so that a late `x_begin(A)`
    /// cannot bring a rolled-back attempt back. Off: the design as first written, with the hole
    /// this model found in it (see the crate's tests, `late_begin`).
    pub forget_marks_attempt_dead: bool,
}

impl Rules {
    /// The design of docs/redis.md and lua/cross.lua.
    pub const DESIGN: Rules = Rules {
        return_checks_attempt: true,
        reserve_checks_highest: true,
        forget_marks_attempt_dead: true,
    };

    /// The design as first written, before this model found that a late `x_begin(A)` could
    /// revive a rolled-back attempt: `x_forget(A)` did not mark A dead.
    pub const FIRST_DESIGN: Rules = Rules {
        forget_marks_attempt_dead: false,
        ..Rules::DESIGN
    };
}

/// Something a step did that the specification forbids or does not cover: an invariant broken
/// by the step itself (not visible in the state after it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breach {
    pub invariant: Invariant,
    pub what: String,
}

/// The invariants, numbered as in the crate's documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invariant {
    /// 1. every pool: total = available + held + sold, none negative; its held and sold units
    ///    are exactly those of the parts that hold or sold them (no unit returned twice).
    Units,
    /// 2. a decided record's parts are its attempt's, in a state its decision allows: no
    ///    committed hold with a part returned or missing unless released or expired.
    CommittedParts,
    /// 3. no unit of one attempt returned or committed by another attempt's step.
    AttemptFence,
    /// 4. at the end: every hold id decided, no part held without its hold, every committed
    ///    hold's units held or sold.
    End,
    /// 5. `pendingq` lists the hold id exactly while its record is pending or aborting.
    PendingQueue,
    /// 6. from every state, the sweepers alone (no faults) reach an end that satisfies 4.
    Quiescence,
    /// 7. a step met a case the specification's tables do not cover.
    Unspecified,
    /// 8. no orphan: a held part's attempt is the record's at home. Only a home that lost data
    ///    makes one (the orphan sweep is for that); otherwise a unit would stay hidden until the
    ///    orphan sweep finds it.
    Orphan,
}

impl Invariant {
    pub const ALL: [Invariant; 8] = [
        Invariant::Units,
        Invariant::CommittedParts,
        Invariant::AttemptFence,
        Invariant::End,
        Invariant::PendingQueue,
        Invariant::Quiescence,
        Invariant::Unspecified,
        Invariant::Orphan,
    ];
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invariant::Units => "1 (units: total = available + held + sold, parts own the held and sold units)",
            Invariant::CommittedParts => "2 (a committed hold's parts are its attempt's, none returned or missing)",
            Invariant::AttemptFence => "3 (no unit of one attempt moved by another attempt's step)",
            Invariant::End => "4 (at the end: decided, no part held without its hold, committed units held or sold)",
            Invariant::PendingQueue => "5 (pendingq lists the hold exactly while pending or aborting)",
            Invariant::Quiescence => "6 (the sweepers alone reach an end that satisfies 4)",
            Invariant::Unspecified => "7 (a case the specification does not cover)",
            Invariant::Orphan => "8 (no part held by an attempt the record at home is not of)",
        })
    }
}

/// Answers of the steps, as the caller sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// `x_attempt`: a new attempt number.
    NextAttempt(Attempt),
    /// `x_begin`: go on with this attempt (a new one, or the pending one, joined).
    Begun(Attempt),
    /// `x_begin` on an aborting record: rolled back, retry.
    BeginRolledBack,
    /// `x_begin` on a decided record, or `x_commit` of an attempt that already committed: the
    /// hold's replay.
    Replay,
    /// `part_reserve`: the units are taken (or were, by this attempt).
    PartOk,
    /// `part_reserve`: refused, rolled back or a newer attempt has been here.
    PartAborted,
    /// `part_reserve`: refused, the pool has too few units (writes nothing).
    PartShort,
    /// `x_commit`: committed, with the part transition to apply.
    Committed(PartOp),
    /// `x_commit`: rolled back (or another attempt).
    CommitAborted,
    /// `x_abort`: the record is aborting; return every part of this attempt.
    Aborting(Attempt),
    /// `x_abort`: nothing of that attempt to roll back.
    Gone,
    /// A decision at home: the record's attempt and the transition for the parts.
    Decided(Attempt, PartOp),
    /// A decision the record's status does not allow.
    DecisionRefused,
    /// Steps that answer nothing (`x_forget`, `part_apply`, `x_applied`).
    Done,
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::NextAttempt(a) => write!(f, "attempt {a}"),
            Reply::Begun(a) => write!(f, "begun({a})"),
            Reply::BeginRolledBack => f.write_str("rolled back, retry"),
            Reply::Replay => f.write_str("replay of the hold"),
            Reply::PartOk => f.write_str("ok"),
            Reply::PartAborted => f.write_str("aborted"),
            Reply::PartShort => f.write_str("insufficient stock"),
            Reply::Committed(op) => write!(f, "committed (ap = {op})"),
            Reply::CommitAborted => f.write_str("rolled back"),
            Reply::Aborting(a) => write!(f, "aborting({a})"),
            Reply::Gone => f.write_str("gone"),
            Reply::Decided(a, op) => write!(f, "decided (attempt {a}, ap = {op})"),
            Reply::DecisionRefused => f.write_str("refused"),
            Reply::Done => f.write_str("done"),
        }
    }
}

/// A decision a client (or the expiry sweep) makes at home once the hold is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Decision {
    Release,
    Expire,
    Confirm,
    Refund,
    RefundWithoutRestock,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Decision::Release => "release",
            Decision::Expire => "expiry",
            Decision::Confirm => "confirm",
            Decision::Refund => "refund",
            Decision::RefundWithoutRestock => "refund (restock: false)",
        })
    }
}

/// Everything Redis holds for the hold id, in every partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct World {
    pub record: Option<Record>,
    pub pending_queued: bool,
    /// `xdead:HOLD` at home: `x_begin(A)` refuses an attempt at or below it (0: no key).
    pub dead_attempt: Attempt,
    pub attempt_counter: Attempt,
    pub parts: [Option<Part>; PARTITIONS_MAX],
    pub pools: [Pool; PARTITIONS_MAX],
}

impl World {
    pub fn new(pools: [Pool; PARTITIONS_MAX]) -> World {
        World {
            record: None,
            pending_queued: false,
            dead_attempt: 0,
            attempt_counter: 0,
            parts: [None; PARTITIONS_MAX],
            pools,
        }
    }

    /// `x_attempt` (the hold id's partition): a new attempt number from its counter.
    pub fn x_attempt(&mut self) -> Reply {
        self.attempt_counter += 1;
        Reply::NextAttempt(self.attempt_counter)
    }

    /// `x_begin(A)` at home; `candidate` 0 is `-`: home is the hold id's partition and takes
    /// the number from its own counter.
    pub fn x_begin(&mut self, candidate: Attempt) -> Reply {
        match self.record {
            None => {
                let attempt = if candidate == 0 {
                    self.attempt_counter += 1;
                    self.attempt_counter
                } else if candidate <= self.dead_attempt {
                    return Reply::BeginRolledBack;
                } else {
                    candidate
                };
                self.record = Some(Record {
                    status: RecordStatus::Pending,
                    attempt,
                    apply: None,
                });
                self.pending_queued = true;
                Reply::Begun(attempt)
            }
            Some(Record {
                status: RecordStatus::Pending,
                attempt,
                ..
            }) => Reply::Begun(attempt),
            Some(Record {
                status: RecordStatus::Aborting,
                ..
            }) => Reply::BeginRolledBack,
            Some(_) => Reply::Replay,
        }
    }

    /// `part_reserve(A)` in `partition`: the table of docs/redis.md, row by row.
    pub fn part_reserve(
        &mut self,
        rules: &Rules,
        attempt: Attempt,
        partition: usize,
        breach: &mut Option<Breach>,
    ) -> Reply {
        if let Some(part) = self.parts[partition] {
            if part.attempt == attempt {
                // `at = A`: a repeat, or refused once A's roll back reached this part.
                if part.status == PartStatus::Returned {
                    return Reply::PartAborted;
                }
                return Reply::PartOk;
            }
            if rules.reserve_checks_highest && attempt <= part.highest {
                return Reply::PartAborted;
            }
            match part.status {
                // An older attempt's units: returned by its own roll back or the orphan sweep.
                PartStatus::Held => return Reply::PartAborted,
                PartStatus::Returned | PartStatus::Refunded => {}
                PartStatus::Confirmed => {
                    *breach = Some(Breach {
                        invariant: Invariant::Unspecified,
                        what: format!(
                            "part_reserve({attempt}) in P{partition} met a confirmed part of attempt {}, \
                             a case of no row of the table",
                            part.attempt
                        ),
                    });
                    return Reply::PartAborted;
                }
            }
        }
        let pool = &mut self.pools[partition];
        if pool.available < QTY_PER_ITEM {
            return Reply::PartShort;
        }
        pool.available -= QTY_PER_ITEM;
        pool.held += QTY_PER_ITEM;
        self.parts[partition] = Some(Part {
            status: PartStatus::Held,
            attempt,
            highest: attempt,
        });
        Reply::PartOk
    }

    /// `x_commit(A)` at home.
    pub fn x_commit(&mut self, attempt: Attempt, confirm_on_commit: bool) -> Reply {
        match &mut self.record {
            Some(record) if record.status == RecordStatus::Pending && record.attempt == attempt => {
                let op = if confirm_on_commit {
                    record.status = RecordStatus::Confirmed;
                    PartOp::Confirm
                } else {
                    record.status = RecordStatus::Held;
                    PartOp::Commit
                };
                record.apply = Some(op);
                self.pending_queued = false;
                Reply::Committed(op)
            }
            Some(record) if record.attempt == attempt && record.status.decided() => Reply::Replay,
            _ => Reply::CommitAborted,
        }
    }

    /// `x_abort(A)` at home; `attempt` 0 is a sweeper's `x_abort(*)`, whichever attempt.
    pub fn x_abort(&mut self, attempt: Attempt) -> Reply {
        match &mut self.record {
            Some(record)
                if matches!(
                    record.status,
                    RecordStatus::Pending | RecordStatus::Aborting
                ) && (attempt == 0 || record.attempt == attempt) =>
            {
                record.status = RecordStatus::Aborting;
                Reply::Aborting(record.attempt)
            }
            _ => Reply::Gone,
        }
    }

    /// `x_forget(A)` at home: forgets only `aborting(A)`; the `pendingq` entry goes with it, or
    /// when there is no record at all, and stays for a record of another attempt.
    pub fn x_forget(&mut self, rules: &Rules, attempt: Attempt) -> Reply {
        match self.record {
            Some(record)
                if record.status == RecordStatus::Aborting && record.attempt == attempt =>
            {
                self.record = None;
                self.pending_queued = false;
                if rules.forget_marks_attempt_dead {
                    self.dead_attempt = self.dead_attempt.max(attempt);
                }
            }
            None => self.pending_queued = false,
            Some(_) => {}
        }
        Reply::Done
    }

    /// `part_apply(OP, A)` in `partition`: the table of docs/redis.md, row by row.
    pub fn part_apply(
        &mut self,
        rules: &Rules,
        op: PartOp,
        attempt: Attempt,
        partition: usize,
        breach: &mut Option<Breach>,
    ) -> Reply {
        let part = self.parts[partition];
        if op == PartOp::Return {
            match part {
                Some(p)
                    if p.status == PartStatus::Held
                        && (p.attempt == attempt || !rules.return_checks_attempt) =>
                {
                    let pool = &mut self.pools[partition];
                    pool.held -= QTY_PER_ITEM;
                    pool.available += QTY_PER_ITEM;
                    self.parts[partition] = Some(Part {
                        status: PartStatus::Returned,
                        ..p
                    });
                    if p.attempt != attempt {
                        *breach = Some(Breach {
                            invariant: Invariant::AttemptFence,
                            what: format!(
                                "part_apply(return, {attempt}) in P{partition} returned the units \
                                 of attempt {}",
                                p.attempt
                            ),
                        });
                    }
                }
                // A tombstone: a late part_reserve(A) takes nothing.
                None => {
                    self.parts[partition] = Some(Part {
                        status: PartStatus::Returned,
                        attempt,
                        highest: attempt,
                    })
                }
                Some(p) if p.attempt != attempt && attempt > p.highest => {
                    if p.status == PartStatus::Held {
                        // An older attempt's units stay its own; only the fence moves.
                        self.parts[partition] = Some(Part {
                            highest: attempt,
                            ..p
                        });
                    } else {
                        if p.status == PartStatus::Confirmed {
                            *breach = Some(Breach {
                                invariant: Invariant::Unspecified,
                                what: format!(
                                    "part_apply(return, {attempt}) in P{partition} would make a \
                                     tombstone over a confirmed part of attempt {}",
                                    p.attempt
                                ),
                            });
                        }
                        self.parts[partition] = Some(Part {
                            status: PartStatus::Returned,
                            attempt,
                            highest: attempt,
                        });
                    }
                }
                Some(_) => {}
            }
            return Reply::Done;
        }
        let Some(p) = part else {
            return Reply::Done;
        };
        if p.attempt != attempt {
            return Reply::Done;
        }
        let pool = &mut self.pools[partition];
        let status = match (p.status, op) {
            (PartStatus::Held, PartOp::Confirm) => {
                pool.held -= QTY_PER_ITEM;
                pool.sold += QTY_PER_ITEM;
                PartStatus::Confirmed
            }
            (PartStatus::Held, PartOp::Refund) => {
                pool.held -= QTY_PER_ITEM;
                pool.available += QTY_PER_ITEM;
                PartStatus::Refunded
            }
            (PartStatus::Confirmed, PartOp::Refund) => {
                pool.sold -= QTY_PER_ITEM;
                pool.available += QTY_PER_ITEM;
                PartStatus::Refunded
            }
            (PartStatus::Held, PartOp::Writeoff) => {
                pool.held -= QTY_PER_ITEM;
                pool.total -= QTY_PER_ITEM;
                PartStatus::Refunded
            }
            (PartStatus::Confirmed, PartOp::Writeoff) => {
                pool.sold -= QTY_PER_ITEM;
                pool.total -= QTY_PER_ITEM;
                PartStatus::Refunded
            }
            // Forward only: anything else (a commit, a repeat, an older transition) is nothing.
            (status, _) => status,
        };
        self.parts[partition] = Some(Part { status, ..p });
        Reply::Done
    }

    /// `x_applied(A, OP)` at home: clears `ap` only if the record is A's and `ap` is still OP.
    pub fn x_applied(&mut self, attempt: Attempt, op: PartOp) -> Reply {
        if let Some(record) = &mut self.record {
            if record.attempt == attempt && record.apply == Some(op) {
                record.apply = None;
            }
        }
        Reply::Done
    }

    /// Whether the record at home is of attempt A (what `x_owner` answers).
    pub fn owns(&self, attempt: Attempt) -> bool {
        self.record.is_some_and(|r| r.attempt == attempt)
    }

    /// `x_owner(A)` at home, for the orphan sweep: whether the record is of attempt A; when it
    /// is not, A is declared dead first (`xdead`), so that no late `x_begin(A)` makes a record
    /// whose part is about to be returned.
    pub fn x_owner(&mut self, attempt: Attempt) -> bool {
        let owner = self.owns(attempt);
        if !owner {
            self.dead_attempt = self.dead_attempt.max(attempt);
        }
        owner
    }

    /// A decision at home (confirm, release, expiry, refund): the status, and `ap` for the parts.
    pub fn decide(&mut self, decision: Decision) -> Reply {
        let Some(record) = &mut self.record else {
            return Reply::DecisionRefused;
        };
        let (from, to, op) = match decision {
            Decision::Release => (RecordStatus::Held, RecordStatus::Released, PartOp::Return),
            Decision::Expire => (RecordStatus::Held, RecordStatus::Expired, PartOp::Return),
            Decision::Confirm => (RecordStatus::Held, RecordStatus::Confirmed, PartOp::Confirm),
            Decision::Refund => (
                RecordStatus::Confirmed,
                RecordStatus::Refunded,
                PartOp::Refund,
            ),
            Decision::RefundWithoutRestock => (
                RecordStatus::Confirmed,
                RecordStatus::Refunded,
                PartOp::Writeoff,
            ),
        };
        if record.status != from {
            return Reply::DecisionRefused;
        }
        record.status = to;
        record.apply = Some(op);
        Reply::Decided(record.attempt, op)
    }

    /// A restock of the pool in `partition` by `delta` units; false when it would take more
    /// than is available (refused, nothing changes).
    pub fn restock(&mut self, partition: usize, delta: i8) -> bool {
        let pool = &mut self.pools[partition];
        if pool.available + delta < 0 {
            return false;
        }
        pool.available += delta;
        pool.total += delta;
        true
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.record {
            None => f.write_str("home: absent")?,
            Some(r) => {
                write!(f, "home: {}({})", r.status.name(), r.attempt)?;
                if let Some(op) = r.apply {
                    write!(f, " ap={op}")?;
                }
            }
        }
        if self.pending_queued {
            f.write_str(" in pendingq")?;
        }
        if self.dead_attempt > 0 {
            write!(f, "; xdead {}", self.dead_attempt)?;
        }
        write!(f, "; counter {}", self.attempt_counter)?;
        for (partition, (part, pool)) in self.parts.iter().zip(&self.pools).enumerate() {
            if *pool == Pool::default() && part.is_none() {
                continue;
            }
            write!(f, "; P{partition} ")?;
            match part {
                None => f.write_str("no part")?,
                Some(p) => write!(
                    f,
                    "part {}({}) hi {}",
                    p.status.name(),
                    p.attempt,
                    p.highest
                )?,
            }
            write!(
                f,
                ", pool {}/{}/{} of {}",
                pool.available, pool.held, pool.sold, pool.total
            )?;
        }
        Ok(())
    }
}
