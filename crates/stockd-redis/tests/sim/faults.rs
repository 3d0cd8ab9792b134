//! The fault plan at work: each server's [`CallFaults`], deciding every library call's fate from
//! the seed, the server, and the call itself.
//!
//! A call's fate is a function of (seed, server number, partition, the commands it carries, how
//! many times this server sent those same commands before), never of when it happens, so that a
//! replay of a seed strikes the same calls wherever the interleaving lets it. Which commands
//! travel together in one call still depends on timing (the dispatcher batches whatever is
//! queued), so a replay is close to, not exactly, the run that failed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stockd_redis::call_faults::{CallAction, CallFault, CallFaults};
use stockd_redis::wire::Op;

use crate::plan::{hash_bytes, mix, Death, FaultRates, Plan, Rng};
use crate::Trace;

/// How often each kind of trouble happened, over one seed or many.
#[derive(Debug, Default)]
pub struct Tally {
    pub calls: AtomicU64,
    pub delayed: AtomicU64,
    pub failed_unsent: AtomicU64,
    pub replies_dropped: AtomicU64,
    pub sent_twice: AtomicU64,
    pub deaths_at_call: AtomicU64,
    pub kills: AtomicU64,
}

impl Tally {
    pub fn add(&self, other: &Tally) {
        for (mine, theirs) in self.fields().into_iter().zip(other.fields()) {
            mine.fetch_add(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    fn fields(&self) -> [&AtomicU64; 7] {
        [
            &self.calls,
            &self.delayed,
            &self.failed_unsent,
            &self.replies_dropped,
            &self.sent_twice,
            &self.deaths_at_call,
            &self.kills,
        ]
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// One server's faults.
pub struct ServerFaults {
    seed: u64,
    number: u64,
    rates: FaultRates,
    death: Option<Death>,
    slow_ms: Option<(u64, u64)>,
    /// Set once the run is over: no more faults (a dead server stays dead).
    calm: Arc<AtomicBool>,
    killed: AtomicBool,
    calls: AtomicU64,
    /// Per call content: how many times this server sent it.
    seen: Mutex<HashMap<u64, u64>>,
    tally: Arc<Tally>,
    trace: Arc<Trace>,
    /// `STOCKD_SIM_TRACE_CALLS=1`: every call goes to the trace, not only the faulted ones.
    trace_calls: bool,
}

impl ServerFaults {
    /// The faults of server number `number` under `plan`; `calm` set stops them.
    pub fn new(
        plan: &Plan,
        number: u64,
        calm: Arc<AtomicBool>,
        tally: Arc<Tally>,
        trace: Arc<Trace>,
    ) -> ServerFaults {
        ServerFaults {
            seed: plan.seed,
            number,
            rates: plan.rates,
            death: plan.death(number),
            slow_ms: plan.slow_ms(number),
            calm,
            killed: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            seen: Mutex::new(HashMap::new()),
            tally,
            trace,
            trace_calls: std::env::var("STOCKD_SIM_TRACE_CALLS").is_ok_and(|v| v == "1"),
        }
    }

    /// The server dies now: every call from now on fails unsent.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
    }

    pub fn is_dead(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }
}

/// A short description of a call's commands for the trace: `x_begin h3, part_reserve h3`.
fn describe(groups: &[&[Op]]) -> String {
    let ops: Vec<String> = groups
        .iter()
        .flat_map(|group| group.iter())
        .map(|op| match op.args.first() {
            Some(_) if op.name == "part_reserve" && op.args.len() > 2 => {
                format!("{} {} {}", op.name, op.args[1], op.args[2])
            }
            Some(first) if op.name == "part_apply" && op.args.len() > 2 => {
                format!("{} {} {} {}", op.name, first, op.args[1], op.args[2])
            }
            Some(first) => format!("{} {first}", op.name),
            None => op.name.to_string(),
        })
        .collect();
    ops.join(", ")
}

impl CallFaults for ServerFaults {
    fn fault(&self, partition: u32, groups: &[&[Op]]) -> CallFault {
        if self.is_dead() {
            return CallFault {
                delay: Duration::ZERO,
                action: CallAction::Fail,
            };
        }
        if self.calm.load(Ordering::SeqCst) {
            return CallFault::NONE;
        }
        bump(&self.tally.calls);
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(death) = self.death.filter(|death| death.call == n) {
            self.kill();
            bump(&self.tally.deaths_at_call);
            let how = if death.after_running {
                "after Redis ran it"
            } else {
                "before sending it"
            };
            self.trace.note(format!(
                "server {} dies at its call #{n} to partition {partition} ({}), {how}",
                self.number,
                describe(groups)
            ));
            return CallFault {
                delay: Duration::ZERO,
                action: if death.after_running {
                    CallAction::DropReply
                } else {
                    CallAction::Fail
                },
            };
        }
        let mut content = hash_bytes(0xCBF2_9CE4_8422_2325, &partition.to_le_bytes());
        for group in groups {
            content = hash_bytes(content, b"|");
            for op in *group {
                content = hash_bytes(content, op.name.as_bytes());
                for arg in &op.args {
                    content = hash_bytes(content, b" ");
                    content = hash_bytes(content, arg.as_bytes());
                }
            }
        }
        let occurrence = {
            let mut seen = self.seen.lock().expect("seen lock");
            let count = seen.entry(content).or_insert(0);
            *count += 1;
            *count
        };
        let mut rng = Rng::new(mix(mix(
            mix(self.seed ^ self.number.rotate_left(32)) ^ content
        ) ^ occurrence));
        let rates = self.rates;
        let jitter = if rng.chance(rates.delay_per_mille) {
            Duration::from_millis(rng.range(1, rates.delay_ms_max.max(1)))
        } else {
            Duration::ZERO
        };
        let slow = self.slow_ms.map_or(Duration::ZERO, |(low, high)| {
            Duration::from_millis(rng.range(low, high))
        });
        let delay = jitter + slow;
        let roll = rng.below(1000);
        let action = if roll < rates.fail_per_mille {
            CallAction::Fail
        } else if roll < rates.fail_per_mille + rates.drop_reply_per_mille {
            CallAction::DropReply
        } else if roll < rates.fail_per_mille + rates.drop_reply_per_mille + rates.twice_per_mille {
            CallAction::Twice {
                concurrent: rng.chance(500),
            }
        } else {
            CallAction::Send
        };
        if !delay.is_zero() {
            bump(&self.tally.delayed);
        }
        match action {
            CallAction::Send => {}
            CallAction::Fail => bump(&self.tally.failed_unsent),
            CallAction::DropReply => bump(&self.tally.replies_dropped),
            CallAction::Twice { .. } => bump(&self.tally.sent_twice),
        }
        if action != CallAction::Send || jitter >= Duration::from_millis(3) || self.trace_calls {
            self.trace.note(format!(
                "server {} call #{n} to partition {partition} ({}): {} ms delay, {action:?}",
                self.number,
                describe(groups),
                delay.as_millis()
            ));
        }
        CallFault { delay, action }
    }

    fn killed(&self) -> bool {
        self.is_dead()
    }
}
