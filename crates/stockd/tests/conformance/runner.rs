//! The conformance runner: one server per group, every case of the group run concurrently under
//! its own id prefix, each step's answer matched against its expectation, every failing case
//! reported (not only the first).
//!
//! It knows how to run a [`Case`], never what a case should expect.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::case::*;
use crate::support::{
    error_shape_problem, match_events, match_subset, now_ms, partition_rules_problem,
    percent_encode, short, substitute_vars, vars_with_partitions, Api, FeedEvent, Server,
    ServerConfig, TimeWindow, Vars,
};

pub(crate) async fn run_table(group: &str, config: ServerConfig, cases: Vec<Case>) {
    assert!(!cases.is_empty(), "{group}: empty table");
    assert!(cases.len() < 10_000, "the per-case prefix has four digits");
    let mut names = std::collections::HashSet::new();
    for case in &cases {
        assert!(!case.steps.is_empty(), "case {:?} has no step", case.name);
        assert!(
            names.insert(case.name.clone()),
            "duplicate case name {:?}",
            case.name
        );
    }
    let server = Server::start_with(config).await;
    let api = server.api();
    let partitions = api.partitions().await;
    // Per partition: every event of a case starting now comes after this seq.
    let event_hint: Arc<Vec<AtomicU64>> =
        Arc::new((0..partitions).map(|_| AtomicU64::new(0)).collect());
    let slots = Arc::new(Semaphore::new(CASE_CONCURRENCY));
    let total = cases.len();
    let mut skipped = 0;
    let mut tasks = Vec::new();
    for (index, case) in cases.into_iter().enumerate() {
        let prefix = format!("c{index:04}");
        if !case.when.applies(partitions) {
            skipped += 1;
            continue;
        }
        let (api, event_hint, slots) = (api.clone(), event_hint.clone(), slots.clone());
        let name = format!("{prefix} {}", case.name);
        tasks.push((
            name,
            tokio::spawn(async move {
                let _slot = slots.acquire_owned().await.expect("semaphore");
                run_case(&api, &prefix, &case, &event_hint).await
            }),
        ));
    }
    let mut failures = Vec::new();
    for (name, task) in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => failures.push(format!("[{name}]\n    {why}")),
            Err(join_error) => failures.push(format!("[{name}]\n    panicked: {join_error}")),
        }
    }
    eprintln!(
        "{group}: {total} cases, {skipped} not for {partitions} partition(s), {} failed (backend {})",
        failures.len(),
        server.backend_name()
    );
    if !failures.is_empty() {
        panic!(
            "{group} (backend {}): {} of {total} cases failed:\n\n{}\n\n{}",
            server.backend_name(),
            failures.len(),
            failures.join("\n\n"),
            server.log_tail_bytes(4096)
        );
    }
}

pub(crate) async fn run_case(
    api: &Api,
    prefix: &str,
    case: &Case,
    event_hint: &[AtomicU64],
) -> Result<(), String> {
    // Every event of this case comes after these seqs, one per partition: ids with this prefix
    // do not exist yet.
    let events_from: Vec<u64> = event_hint
        .iter()
        .map(|hint| hint.load(Ordering::SeqCst))
        .collect();
    let partitions = api.partitions().await;
    let mut vars = vars_with_partitions(partitions);
    for (index, step) in case.steps.iter().enumerate() {
        run_step(api, prefix, step, &mut vars, &events_from, event_hint)
            .await
            .map_err(|why| format!("step {} of {}: {why}", index + 1, case.steps.len()))?;
    }
    Ok(())
}

pub(crate) async fn run_step(
    api: &Api,
    prefix: &str,
    step: &Step,
    vars: &mut Vars,
    events_from: &[u64],
    event_hint: &[AtomicU64],
) -> Result<(), String> {
    let partitions = api.partitions().await;
    let expect = fill_expect(&step.expect, prefix, partitions);
    match &step.action {
        Action::Request {
            method,
            path,
            body,
            auth,
        } => {
            let path = fill_path(path, prefix, vars, partitions);
            let (bytes, shown) = match body {
                Body::None => (None, String::new()),
                Body::Json(value) => {
                    let value = fill_body(value, prefix, vars);
                    (Some(serde_json::to_vec(&value).unwrap()), short(&value))
                }
                Body::Raw(raw) => {
                    let raw = match std::str::from_utf8(raw) {
                        Ok(text) => text.replace("{p}", prefix).into_bytes(),
                        Err(_) => raw.clone(),
                    };
                    let shown = format!(
                        "<{} raw bytes: {}>",
                        raw.len(),
                        short(&Value::String(
                            String::from_utf8_lossy(&raw[..raw.len().min(80)]).into()
                        ))
                    );
                    (Some(raw), shown)
                }
            };
            let what = format!("{method} {path} {shown}");
            let authorization = match auth {
                Auth::Default => api.default_authorization(),
                Auth::NoToken => None,
                Auth::Bearer(token) => Some(format!("Bearer {token}")),
                Auth::Header(value) => Some(value.to_string()),
            };
            let before_ms = now_ms();
            let (status, headers, body) = api
                .send_with_headers(
                    authorization.as_deref(),
                    method,
                    &path,
                    bytes,
                    Some("application/json"),
                )
                .await
                .map_err(|error| format!("{what}: {error}"))?;
            let window = TimeWindow {
                before_ms,
                after_ms: now_ms(),
            };
            let replayed = headers.get_all(REPLAYED_HEADER).iter().collect::<Vec<_>>();
            let expected: &[&str] = if step.replayed { &["true"] } else { &[] };
            if replayed != expected {
                return Err(format!(
                    "{what}\n    expected {REPLAYED_HEADER} {expected:?}, got {replayed:?} \
                     (status {status}: {})",
                    short(&body)
                ));
            }
            check_reply(&what, step.status, &expect, (status, body), vars, window)
        }
        Action::Poll { path, within_ms } => {
            let path = fill_path(path, prefix, vars, partitions);
            let deadline = Instant::now() + Duration::from_millis(*within_ms);
            loop {
                let before_ms = now_ms();
                let reply = api.call("GET", &path, None).await;
                let window = TimeWindow {
                    before_ms,
                    after_ms: now_ms(),
                };
                let mut trial = vars.clone();
                let what = format!("polling GET {path} for {within_ms} ms");
                match check_reply(&what, step.status, &expect, reply, &mut trial, window) {
                    Ok(()) => {
                        *vars = trial;
                        return Ok(());
                    }
                    Err(why) if Instant::now() >= deadline => {
                        return Err(format!("never matched; last: {why}"))
                    }
                    Err(_) => tokio::time::sleep(POLL_EVERY).await,
                }
            }
        }
        Action::Events => {
            let all = api.events_since(events_from).await;
            let mut last_seq = events_from.to_vec();
            for read in &all {
                let seq = read.event["seq"]
                    .as_u64()
                    .ok_or_else(|| format!("event without integer seq: {}", short(&read.event)))?;
                let last = &mut last_seq[read.partition as usize];
                if seq <= *last {
                    return Err(format!(
                        "partition {}: seq not strictly increasing: {seq} after {last}",
                        read.partition
                    ));
                }
                *last = seq;
            }
            for (hint, last) in event_hint.iter().zip(&last_seq) {
                hint.fetch_max(*last, Ordering::SeqCst);
            }
            let mine: Vec<FeedEvent> = all
                .into_iter()
                .filter(|read| event_mentions(&read.event, prefix))
                .collect();
            let shown = || {
                short(&Value::Array(
                    mine.iter().map(FeedEvent::with_partition).collect(),
                ))
            };
            if let Some(problem) = partition_rules_problem(&mine) {
                return Err(format!("events: {problem}\n    events were: {}", shown()));
            }
            let window = TimeWindow {
                before_ms: 0,
                after_ms: u64::MAX / 2,
            };
            match_events(&expect, &mine, vars, window)
                .map_err(|why| format!("events: {why}\n    events were: {}", shown()))
        }
        Action::WaitPast { var } => {
            let deadline = vars
                .get(*var)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("wait_past: no integer saved as {var}"))?;
            let now = now_ms();
            if deadline > now + 30_000 {
                return Err(format!(
                    "wait_past: {var} = {deadline} is more than 30 s away"
                ));
            }
            // Real time is what is under test here: the deadline itself.
            while now_ms() <= deadline {
                tokio::time::sleep(Duration::from_millis(
                    (deadline + 1).saturating_sub(now_ms()).clamp(1, 50),
                ))
                .await;
            }
            Ok(())
        }
    }
}

pub(crate) fn check_reply(
    what: &str,
    status: u16,
    expect: &Value,
    reply: (u16, Value),
    vars: &mut Vars,
    window: TimeWindow,
) -> Result<(), String> {
    let (got_status, body) = reply;
    if got_status != status {
        return Err(format!(
            "{what}\n    expected status {status}, got {got_status}: {}",
            short(&body)
        ));
    }
    if let Some(problem) = error_shape_problem(got_status, &body) {
        return Err(format!("{what}\n    {problem}"));
    }
    match_subset(expect, &body, vars, window)
        .map_err(|why| format!("{what}\n    status {got_status}, body mismatch at {why}"))
}

/// Whether an event belongs to the case with this prefix: it names one of its pools or holds.
pub(crate) fn event_mentions(event: &Value, prefix: &str) -> bool {
    let starts = |value: &Value| value.as_str().is_some_and(|text| text.starts_with(prefix));
    starts(&event["pool"])
        || starts(&event["hold_id"])
        || event["items"]
            .as_array()
            .is_some_and(|list| list.iter().any(|item| starts(&item["pool"])))
}

/// `{p}` becomes the prefix; partition-count templates (`{P}`, `{P-1}`, `{P+N}`) become numbers,
/// a JSON number when they are the whole string.
pub(crate) fn fill_expect(value: &Value, prefix: &str, partitions: u32) -> Value {
    match value {
        Value::String(text) => {
            if let Some(number) = partition_template(text, partitions) {
                return json!(number);
            }
            Value::String(fill_partitions(&text.replace("{p}", prefix), partitions))
        }
        Value::Array(list) => Value::Array(
            list.iter()
                .map(|v| fill_expect(v, prefix, partitions))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_expect(v, prefix, partitions)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The value of a partition-count template: `{P}` is the server's partition count P, `{P-1}` the
/// last partition, `{P+N}` a partition N past the end.
pub(crate) fn partition_template(text: &str, partitions: u32) -> Option<u64> {
    let inner = text.strip_prefix("{P")?.strip_suffix('}')?;
    let partitions = u64::from(partitions);
    match inner {
        "" => Some(partitions),
        "-1" => Some(partitions - 1),
        _ => inner
            .strip_prefix('+')
            .and_then(|n| n.parse::<u64>().ok())
            .map(|n| partitions + n),
    }
}

/// Replaces every partition-count template in `text` (see [`partition_template`]).
pub(crate) fn fill_partitions(text: &str, partitions: u32) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{P") {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        match tail
            .find('}')
            .and_then(|end| Some((end, partition_template(&tail[..=end], partitions)?)))
        {
            Some((end, number)) => {
                out.push_str(&number.to_string());
                rest = &tail[end + 1..];
            }
            None => {
                out.push_str("{P");
                rest = &tail[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `{p}` becomes the prefix; a string that is exactly `{$NAME}` becomes the saved value (any JSON
/// type, so a saved integer token stays an integer); `{$NAME}` inside text is replaced textually.
pub(crate) fn fill_body(value: &Value, prefix: &str, vars: &Vars) -> Value {
    match value {
        Value::String(text) => {
            let text = text.replace("{p}", prefix);
            if let Some(name) = text
                .strip_prefix("{$")
                .and_then(|rest| rest.strip_suffix('}'))
            {
                if let Some(saved) = vars.get(name) {
                    return saved.clone();
                }
            }
            if text.contains("{$") {
                Value::String(substitute_vars(&text, vars))
            } else {
                Value::String(text)
            }
        }
        Value::Array(list) => {
            Value::Array(list.iter().map(|v| fill_body(v, prefix, vars)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_body(v, prefix, vars)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `{p}` becomes the prefix; `{P}`, `{P-1}`, `{P+N}` the partition count's numbers; `{$NAME}`
/// becomes the saved value, percent-encoded (cursors are opaque and may hold any character).
pub(crate) fn fill_path(path: &str, prefix: &str, vars: &Vars, partitions: u32) -> String {
    let mut out = fill_partitions(&path.replace("{p}", prefix), partitions);
    while let Some(start) = out.find("{$") {
        let end = out[start..]
            .find('}')
            .map(|i| start + i)
            .expect("unterminated {$");
        let name = out[start + 2..end].to_string();
        let text = match vars.get(&name) {
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => panic!("nothing saved as {name}"),
        };
        out.replace_range(start..=end, &percent_encode(&text));
    }
    out
}
