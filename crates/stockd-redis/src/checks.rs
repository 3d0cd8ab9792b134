//! The Redis is checked at start, on every primary (the one, or each of a Cluster's): a setting
//! under which Redis may drop stockd's keys on its own is refused, one under which a crash loses
//! acknowledged changes is a warning (the log at start, and `/readyz` for as long as the server
//! runs). This module only reads settings; it never changes them.
//!
//! Managed Redis services often rename or forbid `CONFIG`: a node whose settings cannot be read
//! is a warning that they could not be checked, never a refusal.

use redis::Value;

use crate::link::Link;
use crate::StartError;

/// Checks every primary's settings; the warnings to show, or why the server must not start.
/// An error reaching Redis is `StartError::Redis` (the start may be retried).
pub(crate) async fn check(link: &Link) -> Result<Vec<String>, StartError> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET")
        .arg("maxmemory-policy")
        .arg("appendonly")
        .arg("appendfsync");
    let mut warnings = Vec::new();
    let mut refusals = Vec::new();
    for (node, answer) in link.on_every_primary(cmd).await? {
        let settings = match answer {
            Ok(value) => settings(value),
            Err(error) => {
                warnings.push(format!(
                    "the settings of Redis {node} could not be checked (CONFIG GET: {error}): \
                     make sure it has maxmemory-policy noeviction (any other policy may evict \
                     holds and stock counters) and appendonly yes with appendfsync always (or \
                     a crash loses acknowledged changes)"
                ));
                continue;
            }
        };
        let get = |name: &str| {
            settings
                .iter()
                .find(|(setting, _)| setting == name)
                .map(|(_, value)| value.as_str())
        };
        match get("maxmemory-policy") {
            Some("noeviction") => {}
            Some(policy) => refusals.push(format!(
                "Redis {node} has maxmemory-policy {policy}: when its memory is full it may \
                 evict stockd's keys (holds, pool counters, the dataset marker), losing \
                 acknowledged changes without a trace; set maxmemory-policy noeviction (CONFIG \
                 SET maxmemory-policy noeviction, and in its configuration file)"
            )),
            None => warnings.push(format!(
                "the maxmemory-policy of Redis {node} could not be checked: make sure it is \
                 noeviction"
            )),
        }
        match (get("appendonly"), get("appendfsync")) {
            (Some("yes"), Some("always")) => {}
            (Some("no"), _) => warnings.push(format!(
                "Redis {node} has appendonly no: a Redis restart loses every acknowledged change \
                 since its last snapshot; set appendonly yes and appendfsync always"
            )),
            (Some("yes"), Some(fsync)) => warnings.push(format!(
                "Redis {node} has appendfsync {fsync}: a machine crash loses the acknowledged \
                 changes of up to the last second; set appendfsync always"
            )),
            _ => warnings.push(format!(
                "the persistence of Redis {node} could not be checked: make sure it has \
                 appendonly yes and appendfsync always"
            )),
        }
    }
    if refusals.is_empty() {
        Ok(warnings)
    } else {
        Err(StartError::Config(refusals.join("; ")))
    }
}

/// `CONFIG GET`'s answer as (name, value) pairs: a flat array (RESP2) or a map (RESP3).
fn settings(value: Value) -> Vec<(String, String)> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        other => format!("{other:?}"),
    };
    match value {
        Value::Array(items) => items
            .chunks(2)
            .filter(|pair| pair.len() == 2)
            .map(|pair| (text(&pair[0]), text(&pair[1])))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(name, value)| (text(name), text(value)))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn config_get_answers_in_either_protocol() {
        let flat = Value::Array(vec![bulk("appendonly"), bulk("yes")]);
        let map = Value::Map(vec![(bulk("appendonly"), bulk("yes"))]);
        for value in [flat, map] {
            assert_eq!(settings(value), [("appendonly".into(), "yes".into())]);
        }
    }
}
