//! The rule scenarios of stockd-model (`rules`), against the core's `State`: every rule checked
//! here is checked the same way on the engine and on Redis.

use std::collections::BTreeMap;

use stockd_core::{Command, Effects, Event, Outcome, PoolId, PoolView, State, Step, WaiterId};
use stockd_model::rules::{self, RuleTarget, Sent, Ticket};

struct StateTarget {
    state: State,
    sent: Ticket,
    tickets: BTreeMap<WaiterId, Ticket>,
    answers: Vec<(Ticket, Outcome)>,
    events: Vec<Event>,
}

impl StateTarget {
    fn new() -> StateTarget {
        StateTarget {
            state: State::new(rules::CONFIG),
            sent: 0,
            tickets: BTreeMap::new(),
            answers: Vec::new(),
            events: Vec::new(),
        }
    }

    fn take(&mut self, effects: Effects) -> Result<(), String> {
        self.state
            .check_invariants()
            .map_err(|e| format!("invariant broken: {e}"))?;
        self.events.extend(effects.events);
        for (waiter, outcome) in effects.woken {
            let ticket = self
                .tickets
                .remove(&waiter)
                .ok_or_else(|| format!("an answer for {waiter:?}, which is not parked"))?;
            self.answers.push((ticket, outcome));
        }
        Ok(())
    }
}

impl RuleTarget for StateTarget {
    fn send(&mut self, command: Command, now_ms: u64) -> Result<Sent, String> {
        let ticket = self.sent;
        self.sent += 1;
        let mut effects = Effects::default();
        let step = self.state.execute(command, now_ms, &mut effects);
        self.take(effects)?;
        Ok(match step {
            Step::Done(outcome) => Sent::Answered(outcome),
            Step::Waiting(waiter) => {
                self.tickets.insert(waiter, ticket);
                Sent::Parked
            }
        })
    }

    fn tick(&mut self, now_ms: u64) -> Result<(), String> {
        let mut effects = Effects::default();
        self.state.tick(now_ms, &mut effects);
        self.take(effects)
    }

    fn parked(&mut self) -> Result<usize, String> {
        Ok(self.state.waiter_count())
    }

    fn answers(&mut self, _count: usize) -> Result<Vec<(Ticket, Outcome)>, String> {
        Ok(std::mem::take(&mut self.answers))
    }

    fn events(&mut self) -> Result<Vec<Event>, String> {
        Ok(std::mem::take(&mut self.events))
    }

    fn pool(&mut self, pool: &PoolId) -> Result<PoolView, String> {
        self.state
            .pool(pool)
            .ok_or_else(|| format!("no pool {pool}"))
    }
}

#[test]
fn state_follows_the_rule_scenarios() {
    rules::run_scenarios(|| Box::new(StateTarget::new()));
}
