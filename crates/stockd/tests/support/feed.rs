//! The event feed and its partitions, as the suites check it: [`FeedEvent`] (an event with the
//! partition it was read from), the contract's partition rules ([`partition_rules_problem`]) and
//! the match of a list of expected events against what every partition returned
//! ([`match_events`]: order compared only within a partition).
//!
//! It reads values already fetched (by [`super::Api`]); it never talks to a server.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::api::short;
use super::matching::{match_at, TimeWindow, Vars};

/// One event as read from the feed, with the partition it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedEvent {
    pub partition: u32,
    pub event: Value,
}

impl FeedEvent {
    /// The event with its partition as a `"partition"` field (the feed's events carry none), so
    /// that an expectation can say which partition an event is in.
    pub fn with_partition(&self) -> Value {
        let mut event = self.event.clone();
        if let Some(map) = event.as_object_mut() {
            map.insert("partition".to_string(), json!(self.partition));
        }
        event
    }
}

/// Types of events about one pool, and about one hold: the contract puts all events of one pool in
/// one partition, and all events of one hold in one partition.
pub const POOL_EVENT_TYPES: [&str; 4] = ["pool_upserted", "restocked", "pool_deleted", "low_stock"];
pub const HOLD_EVENT_TYPES: [&str; 6] = [
    "held",
    "confirmed",
    "released",
    "expired",
    "refunded",
    "extended",
];

/// Where `events` (any set read from the feed) break the partition rules: seq must strictly
/// increase within each partition (in the order read), the events of one pool must all be in one
/// partition, and the events of one hold must all be in one partition.
pub fn partition_rules_problem(events: &[FeedEvent]) -> Option<String> {
    let mut last_seq: HashMap<u32, u64> = HashMap::new();
    let mut home: HashMap<(&str, String), (u32, &Value)> = HashMap::new();
    for read in events {
        let Some(seq) = read.event["seq"].as_u64() else {
            return Some(format!("event without integer seq: {}", short(&read.event)));
        };
        if let Some(last) = last_seq.insert(read.partition, seq) {
            if seq <= last {
                return Some(format!(
                    "partition {}: seq not strictly increasing: {seq} after {last}",
                    read.partition
                ));
            }
        }
        let kind = read.event["type"].as_str().unwrap_or("");
        let owner = if POOL_EVENT_TYPES.contains(&kind) {
            read.event["pool"]
                .as_str()
                .map(|pool| ("pool", pool.to_string()))
        } else if HOLD_EVENT_TYPES.contains(&kind) {
            read.event["hold_id"]
                .as_str()
                .map(|hold| ("hold", hold.to_string()))
        } else {
            None
        };
        let Some(owner) = owner else { continue };
        let (partition, first) = *home
            .entry(owner.clone())
            .or_insert((read.partition, &read.event));
        if partition != read.partition {
            return Some(format!(
                "the events of {} {} are in two partitions: {} in {partition}, {} in {}",
                owner.0,
                owner.1,
                short(first),
                short(&read.event),
                read.partition
            ));
        }
    }
    None
}

/// Matches `actual` (events read from every partition) against `expected`, an array of event
/// expectations (see [`match_subset`]) in the order the changes were made. Order is only compared
/// within a partition: the expected list must be an interleaving of the partitions' sequences,
/// every event matched exactly once. With one partition this is an element-wise match. Each actual
/// event is matched with its `"partition"` field added ([`FeedEvent::with_partition`]).
pub fn match_events(
    expected: &Value,
    actual: &[FeedEvent],
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    let wanted = expected
        .as_array()
        .expect("expected events are an array of event expectations");
    let mut queues: Vec<(u32, Vec<Value>)> = Vec::new();
    for read in actual {
        match queues.iter_mut().find(|(k, _)| *k == read.partition) {
            Some((_, queue)) => queue.push(read.with_partition()),
            None => queues.push((read.partition, vec![read.with_partition()])),
        }
    }
    if wanted.len() != actual.len() {
        return Err(format!(
            "expected {} events, got {}",
            wanted.len(),
            actual.len()
        ));
    }
    let mut search = Interleaving {
        wanted,
        queues: &queues,
        window,
        deepest: (0, Vec::new()),
        steps: 0,
    };
    let mut positions = vec![0; queues.len()];
    if search.extend(0, &mut positions, vars) {
        return Ok(());
    }
    let (index, why) = search.deepest;
    Err(format!(
        "no order within partitions matches: the first {index} expected events match, then \
         expected[{index}] ({}) matches no partition's next event: {}",
        short(&wanted[index]),
        why.join("; ")
    ))
}

/// The backtracking search of [`match_events`]: `positions[q]` is how many events of queue `q`
/// are matched so far.
struct Interleaving<'a> {
    wanted: &'a [Value],
    queues: &'a [(u32, Vec<Value>)],
    window: TimeWindow,
    /// The furthest expected index reached, with why each partition's next event failed there.
    deepest: (usize, Vec<String>),
    steps: usize,
}

impl Interleaving<'_> {
    /// Bounds the search; lists in the suites are short and rarely ambiguous.
    const MAX_STEPS: usize = 1_000_000;

    fn extend(&mut self, index: usize, positions: &mut [usize], vars: &mut Vars) -> bool {
        if index == self.wanted.len() {
            return true;
        }
        self.steps += 1;
        assert!(
            self.steps < Self::MAX_STEPS,
            "match_events: the expected events are too ambiguous to match"
        );
        let mut why = Vec::new();
        for queue in 0..self.queues.len() {
            let (partition, events) = &self.queues[queue];
            let Some(next) = events.get(positions[queue]) else {
                continue;
            };
            let mut trial = vars.clone();
            match match_at(
                &format!("partition {partition}"),
                &self.wanted[index],
                next,
                &mut trial,
                self.window,
            ) {
                Ok(()) => {
                    positions[queue] += 1;
                    if self.extend(index + 1, positions, &mut trial) {
                        *vars = trial;
                        return true;
                    }
                    positions[queue] -= 1;
                }
                Err(error) => why.push(error),
            }
        }
        if index >= self.deepest.0 {
            self.deepest = (index, why);
        }
        false
    }
}
