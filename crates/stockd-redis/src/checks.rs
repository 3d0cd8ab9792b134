//! The Redis is checked at start, on every primary (the one, or each of a Cluster's): a setting
//! under which Redis may drop stockd's keys on its own is refused, one under which a crash loses
//! acknowledged changes is a warning (the log at start, and `/readyz` for as long as the server
//! runs). This module only reads settings; it never changes them.
//!
//! With `--redis-replicas N`, a primary with fewer than N replicas connected is a warning: every
//! change is answered 503 until they are (a replica may be starting, so it is no refusal).
//!
//! Managed Redis services often rename or forbid `CONFIG`: a node whose settings cannot be read
//! is a warning that they could not be checked, never a refusal.

use redis::Value;

use crate::link::Link;
use crate::StartError;

/// Checks every primary's settings; the warnings to show, or why the server must not start.
/// An error reaching Redis is `StartError::Redis` (the start may be retried).
pub(crate) async fn check(link: &Link, replicas: u32) -> Result<Vec<String>, StartError> {
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
    if replicas > 0 {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("replication");
        for (node, answer) in link.on_every_primary(cmd).await? {
            let connected = answer.ok().and_then(|info| connected_replicas(&info));
            match connected {
                Some(connected) if connected >= u64::from(replicas) => {}
                Some(connected) => warnings.push(format!(
                    "Redis {node} has {connected} replicas connected, and --redis-replicas is \
                     {replicas}: every change is answered 503 until {replicas} are"
                )),
                None => warnings.push(format!(
                    "the replicas of Redis {node} could not be counted (INFO replication): \
                     --redis-replicas is {replicas}"
                )),
            }
        }
    }
    if refusals.is_empty() {
        Ok(warnings)
    } else {
        Err(StartError::Config(refusals.join("; ")))
    }
}

/// `connected_slaves` of an `INFO replication` answer.
fn connected_replicas(info: &Value) -> Option<u64> {
    let text = match info {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    text.lines()
        .find_map(|line| line.trim().strip_prefix("connected_slaves:"))
        .and_then(|count| count.parse().ok())
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
    fn replicas_are_counted_from_info_replication() {
        let info = bulk("# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=x\r\n");
        assert_eq!(connected_replicas(&info), Some(2));
        assert_eq!(connected_replicas(&bulk("role:master\r\n")), None);
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
