//! Subset matching of JSON answers against expectations written as data ([`match_subset`]):
//! markers for generated values (`$any`, `$now`, `$save:NAME`, `$partition`, ...) and the
//! [`Vars`] they capture, substituted into later requests by [`substitute_vars`].
//!
//! Pure functions of values: nothing here sends a request or starts a process.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::api::short;

/// Values captured by `$save:NAME` markers, referred to by `$same:NAME`, `$gt:NAME` and `{$NAME}`.
/// [`PARTITIONS_VAR`] holds the server's partition count for the `$partition` markers.
pub type Vars = HashMap<String, Value>;

/// The name under which [`Vars`] carry the server's partition count P, for `$partition` markers.
pub const PARTITIONS_VAR: &str = "$partitions";

/// Fresh [`Vars`] knowing the server's partition count.
pub fn vars_with_partitions(partitions: u32) -> Vars {
    let mut vars = Vars::new();
    vars.insert(PARTITIONS_VAR.to_string(), json!(partitions));
    vars
}

/// The wall-clock window around the request that produced a value, for `$now` markers.
#[derive(Clone, Copy, Debug)]
pub struct TimeWindow {
    pub before_ms: u64,
    pub after_ms: u64,
}

impl TimeWindow {
    /// Slack for clock granularity; the server reads the same clock as the test.
    pub const SLACK_MS: u64 = 50;
}

/// Checks that `actual` contains `expected`:
/// - objects: every expected key present in actual and matching (extra actual keys are fine);
/// - arrays: same length, element-wise; `{"$unordered": [...]}` matches in any order;
///   `{"$len": N}` matches any array of length N; `{"$sum": {"FIELD": N, ...}}` matches a
///   non-empty array of objects whose FIELDs add up to each N (a segmented pool's segments);
/// - strings starting with `$` are markers: `$any` (present, anything), `$int` (an integer),
///   `$now` / `$now+N` (an integer within the request's time window, plus N), `$save:NAME`
///   (anything, captured), `$same:NAME` (equal to the captured value), `$gt:NAME` (an integer
///   greater than the captured one), `$contains:TEXT` and `$prefix:TEXT` (strings),
///   `$partition` (an integer in 0..P, P from [`PARTITIONS_VAR`]: exactly 0 with one partition)
///   and `$partition:NAME` (the same, and equal to the value captured as NAME, captured when
///   none is yet: every answer about one pool or hold names one partition);
/// - anything else: equality.
///
/// Returns the first mismatch as `path: explanation`.
pub fn match_subset(
    expected: &Value,
    actual: &Value,
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    match_at("$", expected, actual, vars, window)
}

pub(super) fn match_at(
    path: &str,
    expected: &Value,
    actual: &Value,
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    match expected {
        Value::String(text) if text.starts_with('$') => {
            match_marker(path, text, actual, vars, window)
        }
        Value::Object(map) if map.len() == 1 && map.contains_key("$unordered") => {
            let wanted = map["$unordered"]
                .as_array()
                .expect("$unordered takes an array");
            let got = actual
                .as_array()
                .ok_or_else(|| format!("{path}: expected an array, got {}", short(actual)))?;
            if wanted.len() != got.len() {
                return Err(format!(
                    "{path}: expected {} elements (any order), got {}",
                    wanted.len(),
                    short(actual)
                ));
            }
            let mut used = vec![false; got.len()];
            if match_unordered(path, wanted, got, &mut used, vars, window) {
                Ok(())
            } else {
                Err(format!(
                    "{path}: no ordering of {} matches {}",
                    short(actual),
                    short(&map["$unordered"])
                ))
            }
        }
        Value::Object(map) if map.len() == 1 && map.contains_key("$len") => {
            let want = map["$len"].as_u64().expect("$len takes an integer") as usize;
            match actual.as_array() {
                Some(items) if items.len() == want => Ok(()),
                _ => Err(format!(
                    "{path}: expected an array of {want} elements, got {}",
                    short(actual)
                )),
            }
        }
        Value::Object(map) if map.len() == 1 && map.contains_key("$sum") => {
            let sums = map["$sum"].as_object().expect("$sum takes an object");
            let items = actual
                .as_array()
                .filter(|items| !items.is_empty())
                .ok_or_else(|| {
                    format!("{path}: expected a non-empty array, got {}", short(actual))
                })?;
            for (field, want) in sums {
                let got: Option<u64> = items
                    .iter()
                    .map(|item| item.get(field).and_then(Value::as_u64))
                    .sum();
                if got != want.as_u64() {
                    return Err(format!(
                        "{path}: {field} adds up to {got:?}, expected {want}: {}",
                        short(actual)
                    ));
                }
            }
            Ok(())
        }
        Value::Object(map) => {
            let object = actual
                .as_object()
                .ok_or_else(|| format!("{path}: expected an object, got {}", short(actual)))?;
            for (key, want) in map {
                let got = object
                    .get(key)
                    .ok_or_else(|| format!("{path}.{key}: missing in {}", short(actual)))?;
                match_at(&format!("{path}.{key}"), want, got, vars, window)?;
            }
            Ok(())
        }
        Value::Array(wanted) => {
            let got = actual
                .as_array()
                .ok_or_else(|| format!("{path}: expected an array, got {}", short(actual)))?;
            if wanted.len() != got.len() {
                return Err(format!(
                    "{path}: expected {} elements, got {}: {}",
                    wanted.len(),
                    got.len(),
                    short(actual)
                ));
            }
            for (index, (want, have)) in wanted.iter().zip(got).enumerate() {
                match_at(&format!("{path}[{index}]"), want, have, vars, window)?;
            }
            Ok(())
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!(
            "{path}: expected {}, got {}",
            short(expected),
            short(actual)
        )),
    }
}

fn match_unordered(
    path: &str,
    wanted: &[Value],
    got: &[Value],
    used: &mut [bool],
    vars: &mut Vars,
    window: TimeWindow,
) -> bool {
    let Some((first, rest)) = wanted.split_first() else {
        return true;
    };
    for index in 0..got.len() {
        if used[index] {
            continue;
        }
        let mut trial = vars.clone();
        if match_at(path, first, &got[index], &mut trial, window).is_ok() {
            used[index] = true;
            if match_unordered(path, rest, got, used, &mut trial, window) {
                *vars = trial;
                return true;
            }
            used[index] = false;
        }
    }
    false
}

fn match_marker(
    path: &str,
    marker: &str,
    actual: &Value,
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    let fail = |why: String| Err(format!("{path}: {why}, got {}", short(actual)));
    let (name, arg) = marker.split_once(':').unwrap_or((marker, ""));
    match name {
        "$any" => Ok(()),
        "$int" if actual.is_u64() || actual.is_i64() => Ok(()),
        "$int" => fail("expected an integer".into()),
        "$save" => {
            vars.insert(arg.to_string(), actual.clone());
            Ok(())
        }
        "$same" => match vars.get(arg) {
            Some(saved) if saved == actual => Ok(()),
            Some(saved) => fail(format!(
                "expected the value saved as {arg} ({})",
                short(saved)
            )),
            None => fail(format!("nothing saved as {arg}")),
        },
        "$gt" => match (vars.get(arg).and_then(Value::as_u64), actual.as_u64()) {
            (Some(saved), Some(now)) if now > saved => Ok(()),
            (Some(saved), _) => fail(format!("expected an integer greater than {arg} = {saved}")),
            (None, _) => fail(format!("no integer saved as {arg}")),
        },
        "$partition" => {
            let partitions = vars
                .get(PARTITIONS_VAR)
                .and_then(Value::as_u64)
                .unwrap_or_else(|| {
                    panic!("{path}: $partition needs the partition count in vars (vars_with_partitions)")
                });
            match actual.as_u64() {
                Some(k) if k < partitions => {}
                _ => {
                    return fail(format!(
                        "expected a partition, an integer in 0..{partitions}"
                    ))
                }
            }
            if arg.is_empty() {
                return Ok(());
            }
            match vars.get(arg) {
                Some(saved) if saved == actual => Ok(()),
                Some(saved) => fail(format!(
                    "expected the partition saved as {arg} ({})",
                    short(saved)
                )),
                None => {
                    vars.insert(arg.to_string(), actual.clone());
                    Ok(())
                }
            }
        }
        "$contains" => match actual.as_str() {
            Some(text) if text.contains(arg) => Ok(()),
            _ => fail(format!("expected a string containing {arg:?}")),
        },
        "$prefix" => match actual.as_str() {
            Some(text) if text.starts_with(arg) => Ok(()),
            _ => fail(format!("expected a string starting with {arg:?}")),
        },
        _ if marker == "$now" || marker.starts_with("$now+") => {
            let offset: u64 = marker
                .strip_prefix("$now+")
                .map_or(0, |n| n.parse().expect("$now+N"));
            let low = window.before_ms + offset - TimeWindow::SLACK_MS;
            let high = window.after_ms + offset + TimeWindow::SLACK_MS;
            match actual.as_u64() {
                Some(at) if (low..=high).contains(&at) => Ok(()),
                _ => fail(format!(
                    "expected now+{offset}, i.e. within [{low}, {high}]"
                )),
            }
        }
        _ => panic!("unknown marker {marker:?} at {path}"),
    }
}

/// Replace `{$NAME}` in a string with the captured value (a string's text, or any other JSON).
pub fn substitute_vars(text: &str, vars: &Vars) -> String {
    let mut out = text.to_string();
    while let Some(start) = out.find("{$") {
        let end = out[start..]
            .find('}')
            .map(|i| start + i)
            .expect("unterminated {$");
        let name = &out[start + 2..end];
        let value = vars
            .get(name)
            .unwrap_or_else(|| panic!("nothing saved as {name}"));
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.replace_range(start..=end, &text);
    }
    out
}
