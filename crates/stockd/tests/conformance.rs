//! The contract conformance suite: every rule of the HTTP API's contract (docs/api.md), as a table
//! of cases run against a real `stockd` process.
//!
//! A case is data: a list of steps, each a request (method, path, JSON body) with the expected
//! status and an expected *subset* of the answer (see `support::match_subset`: generated fields
//! can be left out, `$any`/`$now`/`$save:NAME`/`$same:NAME` markers cover the rest), and whether
//! the answer carries `Stockd-Replayed: true` (only a restock's retry may). Every case
//! gets a fresh five-byte id prefix, substituted for `{p}` in paths and bodies, so all cases of a
//! group share one server and run concurrently without touching each other's pools or holds. A
//! group runs all its cases and reports every failing one, not only the first.
//!
//! The suite must only speak HTTP to the binary: it never links the server's crates, so the same
//! table can run against any backend (`STOCKD_TEST_BACKEND`).

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{
    backend_partitions, error_shape_problem, free_port, match_events, match_subset, now_ms,
    partition_rules_problem, percent_encode, short, substitute_vars, vars_with_partitions, Api,
    FeedEvent, Server, ServerConfig, TimeWindow, Vars, ADMIN_TOKEN, CLIENT_TOKEN,
};
use tokio::sync::Semaphore;

/// Cases of one group in flight at once: enough to overlap the cases that wait on real time
/// (expiry, lease deadlines), few enough for a 2-core machine.
const CASE_CONCURRENCY: usize = 8;
/// How often a polling step repeats its request.
const POLL_EVERY: Duration = Duration::from_millis(25);
/// A sale bound far in the future (2100-01-01) and one far in the past (2001-09-09).
const FAR_FUTURE_MS: u64 = 4_102_444_800_000;
const LONG_AGO_MS: u64 = 1_000_000_000_000;
/// Expiry: units come back no later than 1 s after `expires_at_ms`; polls allow 0.5 s more.
const EXPIRY_LAG_MAX_MS: u64 = 1_000;
const POLL_SLACK_MS: u64 = 500;
/// The body limit: over 1 MiB is 413.
const BODY_LIMIT_BYTES: usize = 1024 * 1024;
/// The header on the answer to a restock retried with its request id (and on no other answer).
const REPLAYED_HEADER: &str = "stockd-replayed";

// =============================================================================================
// The case model
// =============================================================================================

#[derive(Clone, Copy, Debug)]
enum Auth {
    /// The server's default token (admin on an auth server, none otherwise).
    Default,
    NoToken,
    Bearer(&'static str),
    /// A raw `Authorization` header value.
    Header(&'static str),
}

#[derive(Clone, Debug)]
enum Body {
    None,
    Json(Value),
    Raw(Vec<u8>),
}

#[derive(Clone, Debug)]
enum Action {
    Request {
        method: &'static str,
        path: String,
        body: Body,
        auth: Auth,
    },
    /// Repeat a GET until the answer matches, for at most `within_ms` (real time under test).
    Poll { path: String, within_ms: u64 },
    /// The events of this case so far (those naming a pool or hold with the case's prefix), read
    /// from every partition and compared with the expected array in order within each partition
    /// (see `support::match_events`; element-wise with one partition).
    Events,
    /// Wait until the wall clock has passed the saved deadline `var` (real time under test).
    WaitPast { var: &'static str },
}

#[derive(Clone, Debug)]
struct Step {
    action: Action,
    status: u16,
    expect: Value,
    /// The answer carries `Stockd-Replayed: true` (a restock retried with its request id);
    /// every other answer must not carry that header.
    replayed: bool,
}

/// Which servers a case applies to, by their event-feed partition count P.
#[derive(Clone, Copy, Debug, PartialEq)]
enum When {
    Always,
    /// P == 1 (the embedded engine, a single Redis).
    OnePartition,
    /// P > 1 (a Redis Cluster).
    ManyPartitions,
}

impl When {
    fn applies(self, partitions: u32) -> bool {
        match self {
            When::Always => true,
            When::OnePartition => partitions == 1,
            When::ManyPartitions => partitions > 1,
        }
    }
}

#[derive(Clone, Debug)]
struct Case {
    name: String,
    when: When,
    steps: Vec<Step>,
}

fn case(name: &str) -> Case {
    Case {
        name: name.to_string(),
        when: When::Always,
        steps: Vec::new(),
    }
}

/// Builders: each appends one step; they keep the table one line per step.
impl Case {
    /// Run this case only on servers whose partition count fits.
    fn only(mut self, when: When) -> Case {
        self.when = when;
        self
    }

    fn req(
        self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
        status: u16,
        expect: Value,
    ) -> Case {
        let body = body.map_or(Body::None, Body::Json);
        self.req_full(Auth::Default, method, path, body, status, expect)
    }

    fn req_as(
        self,
        auth: Auth,
        method: &'static str,
        path: &str,
        body: Option<Value>,
        status: u16,
        expect: Value,
    ) -> Case {
        let body = body.map_or(Body::None, Body::Json);
        self.req_full(auth, method, path, body, status, expect)
    }

    fn req_full(
        mut self,
        auth: Auth,
        method: &'static str,
        path: &str,
        body: Body,
        status: u16,
        expect: Value,
    ) -> Case {
        let action = Action::Request {
            method,
            path: path.to_string(),
            body,
            auth,
        };
        self.steps.push(Step {
            action,
            status,
            expect,
            replayed: false,
        });
        self
    }

    /// The last step's answer says it was a replay: `Stockd-Replayed: true`.
    fn replayed(mut self) -> Case {
        let step = self.steps.last_mut().expect("a step to mark");
        assert!(
            matches!(step.action, Action::Request { .. }),
            "only a request's answer has headers"
        );
        step.replayed = true;
        self
    }

    fn raw(
        self,
        method: &'static str,
        path: &str,
        body: impl Into<Vec<u8>>,
        status: u16,
        expect: Value,
    ) -> Case {
        self.req_full(
            Auth::Default,
            method,
            path,
            Body::Raw(body.into()),
            status,
            expect,
        )
    }

    fn get(self, path: &str, status: u16, expect: Value) -> Case {
        self.req("GET", path, None, status, expect)
    }

    fn put_pool(self, pool: &str, body: Value, status: u16, expect: Value) -> Case {
        self.req(
            "PUT",
            &format!("/v1/pools/{pool}"),
            Some(body),
            status,
            expect,
        )
    }

    fn get_pool(self, pool: &str, expect: Value) -> Case {
        self.get(&format!("/v1/pools/{pool}"), 200, expect)
    }

    fn restock(self, pool: &str, delta: i64, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/pools/{pool}/restock"),
            Some(json!({ "delta": delta })),
            status,
            expect,
        )
    }

    /// A restock with a whole body (a `request_id`, or a bad one).
    fn restock_with(self, pool: &str, body: Value, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/pools/{pool}/restock"),
            Some(body),
            status,
            expect,
        )
    }

    fn delete_pool(self, pool: &str, status: u16, expect: Value) -> Case {
        self.req("DELETE", &format!("/v1/pools/{pool}"), None, status, expect)
    }

    fn reserve(self, body: Value, status: u16, expect: Value) -> Case {
        self.req("POST", "/v1/holds", Some(body), status, expect)
    }

    fn get_hold(self, hold: &str, status: u16, expect: Value) -> Case {
        self.get(&format!("/v1/holds/{hold}"), status, expect)
    }

    fn confirm(self, hold: &str, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/confirm"),
            None,
            status,
            expect,
        )
    }

    fn release(self, hold: &str, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/release"),
            None,
            status,
            expect,
        )
    }

    fn refund(self, hold: &str, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/refund"),
            None,
            status,
            expect,
        )
    }

    /// A refund with a body (`{"restock": false}`, or a bad one).
    fn refund_with(self, hold: &str, body: Value, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/refund"),
            Some(body),
            status,
            expect,
        )
    }

    fn extend(self, hold: &str, ttl_ms: u64, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/holds/{hold}/extend"),
            Some(json!({ "ttl_ms": ttl_ms })),
            status,
            expect,
        )
    }

    fn batch(self, ops: Value, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            "/v1/batch",
            Some(json!({ "ops": ops })),
            status,
            expect,
        )
    }

    fn lock(self, name: &str, verb: &str, body: Value, status: u16, expect: Value) -> Case {
        self.req(
            "POST",
            &format!("/v1/locks/{name}/{verb}"),
            Some(body),
            status,
            expect,
        )
    }

    fn poll(mut self, path: &str, within_ms: u64, expect: Value) -> Case {
        let action = Action::Poll {
            path: path.to_string(),
            within_ms,
        };
        self.steps.push(Step {
            action,
            status: 200,
            expect,
            replayed: false,
        });
        self
    }

    /// Poll a pool until its units are back (expiry), within the contract's bound.
    fn poll_pool(self, pool: &str, ttl_ms: u64, expect: Value) -> Case {
        self.poll(
            &format!("/v1/pools/{pool}"),
            ttl_ms + EXPIRY_LAG_MAX_MS + POLL_SLACK_MS,
            expect,
        )
    }

    fn events(mut self, expect: Value) -> Case {
        assert!(expect.is_array(), "events expects an array");
        self.steps.push(Step {
            action: Action::Events,
            status: 200,
            expect,
            replayed: false,
        });
        self
    }

    fn wait_past(mut self, var: &'static str) -> Case {
        self.steps.push(Step {
            action: Action::WaitPast { var },
            status: 200,
            expect: Value::Null,
            replayed: false,
        });
        self
    }
}

// Small expected-value helpers.

fn err(code: &str) -> Value {
    json!({ "error": code })
}

fn counts(total: u64, available: u64, held: u64, sold: u64) -> Value {
    json!({ "total": total, "available": available, "held": held, "sold": sold })
}

fn status(hold_status: &str) -> Value {
    json!({ "status": hold_status })
}

/// `{"$unordered": [...]}`: hold items may come back in any order.
fn items(list: Value) -> Value {
    json!({ "$unordered": list })
}

/// An identifier of exactly `len` bytes once `{p}` (five bytes) is substituted.
fn id_of_len(len: usize) -> String {
    format!("{{p}}{}", "x".repeat(len - 5))
}

fn ev(kind: &str, fields: Value) -> Value {
    let mut event = json!({ "seq": "$int", "at_ms": "$int", "type": kind });
    for (key, value) in fields.as_object().expect("event fields").clone() {
        event[key] = value;
    }
    event
}

// =============================================================================================
// The runner
// =============================================================================================

async fn run_table(group: &str, config: ServerConfig, cases: Vec<Case>) {
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

async fn run_case(
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

async fn run_step(
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
                Auth::Default => api.default_token().map(|token| format!("Bearer {token}")),
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

fn check_reply(
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
fn event_mentions(event: &Value, prefix: &str) -> bool {
    let starts = |value: &Value| value.as_str().is_some_and(|text| text.starts_with(prefix));
    starts(&event["pool"])
        || starts(&event["hold_id"])
        || event["items"]
            .as_array()
            .is_some_and(|list| list.iter().any(|item| starts(&item["pool"])))
}

/// `{p}` becomes the prefix; partition-count templates (`{P}`, `{P-1}`, `{P+N}`) become numbers,
/// a JSON number when they are the whole string.
fn fill_expect(value: &Value, prefix: &str, partitions: u32) -> Value {
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
fn partition_template(text: &str, partitions: u32) -> Option<u64> {
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
fn fill_partitions(text: &str, partitions: u32) -> String {
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
fn fill_body(value: &Value, prefix: &str, vars: &Vars) -> Value {
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
fn fill_path(path: &str, prefix: &str, vars: &Vars, partitions: u32) -> String {
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

// =============================================================================================
// Tests: one server per group
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_pools() {
    run_table("pools", ServerConfig::default(), pool_cases()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_holds() {
    run_table("holds", ServerConfig::default(), hold_cases()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_hold_list() {
    run_table("hold list", ServerConfig::default(), hold_list_cases()).await;
}

/// Holds forgotten after retention leave the list (a short retention, on its own server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_hold_list_retention() {
    let config = ServerConfig::default()
        .arg("--hold-retention-ms")
        .arg("1500");
    run_table("hold list retention", config, hold_list_retention_cases()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_batch_and_events() {
    let mut cases = batch_cases();
    cases.extend(event_cases());
    run_table("batch and events", ServerConfig::default(), cases).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_locks() {
    run_table("locks", ServerConfig::default(), lock_cases()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_errors_and_limits() {
    run_table("errors and limits", ServerConfig::default(), error_cases()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_auth_and_operations() {
    run_table(
        "auth and operations",
        ServerConfig::default().with_auth(),
        auth_cases(),
    )
    .await;
}

/// The table must stay complete: a guard against cases silently dropped from a group.
#[test]
fn table_size() {
    let sizes = [
        ("pools", pool_cases().len()),
        ("holds", hold_cases().len()),
        ("hold list", hold_list_cases().len()),
        ("batch", batch_cases().len()),
        ("events", event_cases().len()),
        ("locks", lock_cases().len()),
        ("errors", error_cases().len()),
        ("auth", auth_cases().len()),
    ];
    let total: usize = sizes.iter().map(|(_, n)| n).sum();
    let steps: usize = [
        pool_cases(),
        hold_cases(),
        hold_list_cases(),
        batch_cases(),
        event_cases(),
        lock_cases(),
        error_cases(),
        auth_cases(),
    ]
    .iter()
    .flatten()
    .map(|case| case.steps.len())
    .sum();
    eprintln!("conformance table: {sizes:?}, {total} cases, {steps} steps in all");
    for (group, size) in sizes {
        assert!(size >= 5, "group {group} has only {size} cases");
    }
    assert!(total >= 200, "the table shrank to {total} cases");
}

// =============================================================================================
// Pools
// =============================================================================================

fn full_pool(pool: &str, total: u64) -> Value {
    json!({
        "pool": pool, "total": total, "available": total, "held": 0, "sold": 0,
        "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null, "low_stock_threshold": null,
        "partition": "$partition",
    })
}

fn pool_cases() -> Vec<Case> {
    let rules = json!({
        "total": 5, "per_user_limit": 2, "starts_at_ms": LONG_AGO_MS, "ends_at_ms": FAR_FUTURE_MS,
        "low_stock_threshold": 1,
    });
    let mut cases = vec![
        case("pool: create is 201 with the full pool object, rule fields null")
            .put_pool("{p}-a", json!({"total": 10}), 201, full_pool("{p}-a", 10))
            .get_pool("{p}-a", full_pool("{p}-a", 10))
            .put_pool("{p}-a", json!({"total": 10}), 200, full_pool("{p}-a", 10)),
        case("pool: rule fields are echoed; a PUT that leaves them out unsets them")
            .put_pool("{p}-a", rules.clone(), 201, {
                let mut expect = rules.clone();
                expect["pool"] = json!("{p}-a");
                expect["available"] = json!(5);
                expect["held"] = json!(0);
                expect["sold"] = json!(0);
                expect
            })
            .get_pool("{p}-a", json!({"per_user_limit": 2, "starts_at_ms": LONG_AGO_MS, "ends_at_ms": FAR_FUTURE_MS, "low_stock_threshold": 1}))
            .put_pool("{p}-a", json!({"total": 5}), 200, full_pool("{p}-a", 5))
            .get_pool("{p}-a", full_pool("{p}-a", 5)),
        case("pool: a PUT replaces rules one by one (left out = unset)")
            .put_pool("{p}-a", json!({"total": 5, "per_user_limit": 3}), 201, json!({"per_user_limit": 3, "low_stock_threshold": null}))
            .put_pool("{p}-a", json!({"total": 5, "low_stock_threshold": 0}), 200, json!({"per_user_limit": null, "low_stock_threshold": 0}))
            .put_pool("{p}-a", json!({"total": 5, "starts_at_ms": LONG_AGO_MS}), 200, json!({"low_stock_threshold": null, "starts_at_ms": LONG_AGO_MS, "ends_at_ms": null}))
            .put_pool("{p}-a", json!({"total": 5, "ends_at_ms": FAR_FUTURE_MS}), 200, json!({"starts_at_ms": null, "ends_at_ms": FAR_FUTURE_MS})),
        case("pool: null rule fields are the same as leaving them out")
            .put_pool(
                "{p}-a",
                json!({"total": 3, "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null, "low_stock_threshold": null}),
                201,
                full_pool("{p}-a", 3),
            )
            .put_pool("{p}-a", json!({"total": 3, "per_user_limit": 4}), 200, json!({"per_user_limit": 4}))
            .put_pool("{p}-a", json!({"total": 3, "per_user_limit": null}), 200, full_pool("{p}-a", 3)),
        case("pool: changing total moves available by the same delta")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 3}]}), 201, status("held"))
            .put_pool("{p}-a", json!({"total": 15}), 200, counts(15, 12, 3, 0))
            .put_pool("{p}-a", json!({"total": 5}), 200, counts(5, 2, 3, 0))
            .confirm("{p}-h", 200, status("confirmed"))
            .put_pool("{p}-a", json!({"total": 3}), 200, counts(3, 0, 0, 3))
            .get_pool("{p}-a", counts(3, 0, 0, 3)),
        case("pool: a total below held + sold is 409 total_below_committed and changes nothing")
            .put_pool("{p}-a", json!({"total": 10, "per_user_limit": 5}), 201, counts(10, 10, 0, 0))
            .reserve(json!({"hold_id": "{p}-h1", "user": "u1", "items": [{"pool": "{p}-a", "qty": 4}]}), 201, status("held"))
            .reserve(json!({"hold_id": "{p}-h2", "user": "u2", "items": [{"pool": "{p}-a", "qty": 2}], "confirm": true}), 201, status("confirmed"))
            .put_pool("{p}-a", json!({"total": 5, "low_stock_threshold": 1}), 409, err("total_below_committed"))
            .put_pool("{p}-a", json!({"total": 0}), 409, err("total_below_committed"))
            .get_pool("{p}-a", json!({"total": 10, "available": 4, "held": 4, "sold": 2, "per_user_limit": 5, "low_stock_threshold": null}))
            .put_pool("{p}-a", json!({"total": 6, "per_user_limit": 5}), 200, counts(6, 0, 4, 2)),
        case("pool: total 0 and 1_000_000_000_000 are accepted")
            .put_pool("{p}-a", json!({"total": 0}), 201, counts(0, 0, 0, 0))
            .put_pool("{p}-b", json!({"total": 1_000_000_000_000u64}), 201, counts(1_000_000_000_000, 1_000_000_000_000, 0, 0))
            .put_pool("{p}-a", json!({"total": 1_000_000_000_000u64}), 200, counts(1_000_000_000_000, 1_000_000_000_000, 0, 0))
            .put_pool("{p}-b", json!({"total": 0}), 200, counts(0, 0, 0, 0)),
        case("pool: if_absent=true creates a missing pool, then leaves it unchanged")
            .put_pool("{p}-a?if_absent=true", json!({"total": 7, "low_stock_threshold": 2}), 201, json!({"pool": "{p}-a", "total": 7, "available": 7, "low_stock_threshold": 2}))
            .put_pool("{p}-a?if_absent=true", json!({"total": 99}), 200, json!({"pool": "{p}-a", "total": 7, "available": 7, "low_stock_threshold": 2}))
            .get_pool("{p}-a", json!({"total": 7, "available": 7, "low_stock_threshold": 2, "per_user_limit": null}))
            .events(json!([ev("pool_upserted", json!({"pool": "{p}-a"}))])),
        case("pool: if_absent=true on a pool with holds answers the pool as it is")
            .put_pool("{p}-a", json!({"total": 5}), 201, counts(5, 5, 0, 0))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 2}]}), 201, status("held"))
            .put_pool("{p}-a?if_absent=true", json!({"total": 1, "per_user_limit": 1}), 200, json!({"total": 5, "available": 3, "held": 2, "per_user_limit": null})),
        case("pool: if_absent=false is a plain upsert")
            .put_pool("{p}-a?if_absent=false", json!({"total": 3}), 201, counts(3, 3, 0, 0))
            .put_pool("{p}-a?if_absent=false", json!({"total": 4}), 200, counts(4, 4, 0, 0)),
        case("restock: a positive delta raises total and available")
            .put_pool("{p}-a", json!({"total": 10, "per_user_limit": 7}), 201, counts(10, 10, 0, 0))
            .reserve(json!({"hold_id": "{p}-h", "user": "u", "items": [{"pool": "{p}-a", "qty": 4}]}), 201, status("held"))
            .restock("{p}-a", 5, 200, json!({"pool": "{p}-a", "total": 15, "available": 11, "held": 4, "sold": 0, "per_user_limit": 7}))
            .get_pool("{p}-a", counts(15, 11, 4, 0)),
        case("restock: a negative delta lowers total and available, down to available 0")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 4}]}), 201, status("held"))
            .restock("{p}-a", -6, 200, counts(4, 0, 4, 0))
            .restock("{p}-a", -1, 409, err("insufficient_stock"))
            .get_pool("{p}-a", counts(4, 0, 4, 0)),
        case("restock: a negative delta larger than available is 409 insufficient_stock, nothing changes")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .restock("{p}-a", -11, 409, err("insufficient_stock"))
            .get_pool("{p}-a", counts(10, 10, 0, 0))
            .restock("{p}-a", -10, 200, counts(0, 0, 0, 0))
            .restock("{p}-a", 1, 200, counts(1, 1, 0, 0)),
        case("restock: a retry with its request_id changes nothing and answers the pool as it is now, with Stockd-Replayed: true")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r"}), 200, json!({"pool": "{p}-a", "total": 15, "available": 15}))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 4}]}), 201, status("held"))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r"}), 200, counts(15, 11, 4, 0)).replayed()
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r"}), 200, counts(15, 11, 4, 0)).replayed()
            .restock_with("{p}-a", json!({"delta": 6, "request_id": "{p}-r"}), 409, err("request_id_conflict"))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r2"}), 200, counts(20, 16, 4, 0))
            .restock("{p}-a", 5, 200, counts(25, 21, 4, 0))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r2"}), 200, counts(25, 21, 4, 0)).replayed()
            .get_pool("{p}-a", counts(25, 21, 4, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": "{p}-a"})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 5, "total": 15, "available": 15, "request_id": "{p}-r"})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 5, "total": 20, "available": 16, "request_id": "{p}-r2"})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 5, "total": 25, "available": 21})),
            ])),
        case("restock: a request_id with another delta or on another pool is 409 request_id_conflict, nothing changes")
            .put_pool("{p}-a", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .put_pool("{p}-b", json!({"total": 10}), 201, counts(10, 10, 0, 0))
            .restock_with("{p}-a", json!({"delta": 5, "request_id": "{p}-r"}), 200, counts(15, 15, 0, 0))
            .restock_with("{p}-a", json!({"delta": 4, "request_id": "{p}-r"}), 409,
                json!({"error": "request_id_conflict", "request_id": "{p}-r", "pool": "{p}-a", "delta": 5}))
            .restock_with("{p}-a", json!({"delta": -5, "request_id": "{p}-r"}), 409,
                json!({"error": "request_id_conflict", "request_id": "{p}-r", "pool": "{p}-a", "delta": 5}))
            .restock_with("{p}-b", json!({"delta": 5, "request_id": "{p}-r"}), 409,
                json!({"error": "request_id_conflict", "request_id": "{p}-r", "pool": "{p}-a", "delta": 5}))
            .restock_with("{p}-nope", json!({"delta": 5, "request_id": "{p}-r"}), 409,
                json!({"error": "request_id_conflict", "request_id": "{p}-r", "pool": "{p}-a", "delta": 5}))
            .get_pool("{p}-a", counts(15, 15, 0, 0))
            .get_pool("{p}-b", counts(10, 10, 0, 0)),
        case("restock: without request_id each restock adds; null is absent")
            .put_pool("{p}-a", json!({"total": 1}), 201, counts(1, 1, 0, 0))
            .restock("{p}-a", 2, 200, counts(3, 3, 0, 0))
            .restock("{p}-a", 2, 200, counts(5, 5, 0, 0))
            .restock_with("{p}-a", json!({"delta": 2, "request_id": null}), 200, counts(7, 7, 0, 0))
            .restock_with("{p}-a", json!({"delta": 2, "request_id": null}), 200, counts(9, 9, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": "{p}-a"})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 2, "total": 3})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 2, "total": 5})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 2, "total": 7})),
                ev("restocked", json!({"pool": "{p}-a", "delta": 2, "total": 9})),
            ])),
        case("restock: a bad request_id is 422 invalid_request, nothing changes")
            .put_pool("{p}-a", json!({"total": 1}), 201, counts(1, 1, 0, 0))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": ""}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": "-r"}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": "a b"}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": id_of_len(129)}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": 7}), 422, err("invalid_request"))
            .restock_with("{p}-a", json!({"delta": 0, "request_id": "{p}-r"}), 422, err("invalid_request"))
            .get_pool("{p}-a", counts(1, 1, 0, 0))
            .restock_with("{p}-a", json!({"delta": 1, "request_id": "{p}-r"}), 200, counts(2, 2, 0, 0)),
        case("restock: a refused restock is not remembered: its request_id is new after it")
            .put_pool("{p}-a", json!({"total": 3}), 201, counts(3, 3, 0, 0))
            .restock_with("{p}-a", json!({"delta": -5, "request_id": "{p}-r"}), 409, err("insufficient_stock"))
            .restock_with("{p}-nope", json!({"delta": 5, "request_id": "{p}-r2"}), 404, err("pool_not_found"))
            .restock("{p}-a", 10, 200, counts(13, 13, 0, 0))
            .restock_with("{p}-a", json!({"delta": -5, "request_id": "{p}-r"}), 200, counts(8, 8, 0, 0))
            .restock_with("{p}-a", json!({"delta": -5, "request_id": "{p}-r"}), 200, counts(8, 8, 0, 0)).replayed()
            .restock_with("{p}-a", json!({"delta": 1, "request_id": "{p}-r2"}), 200, counts(9, 9, 0, 0))
            .get_pool("{p}-a", counts(9, 9, 0, 0)),
        case("restock: a missing pool is 404 pool_not_found")
            .restock("{p}-nope", 5, 404, err("pool_not_found"))
            .get("/v1/pools/{p}-nope", 404, err("pool_not_found")),
        case("pool: GET of a missing pool is 404 pool_not_found")
            .get("/v1/pools/{p}-missing", 404, err("pool_not_found")),
        case("pools list: prefix filters, ordered by pool id, full objects, paged with next")
            .put_pool("{p}-c", json!({"total": 3}), 201, json!({}))
            .put_pool("{p}-a", json!({"total": 1}), 201, json!({}))
            .put_pool("{p}-e", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 2}), 201, json!({}))
            .put_pool("{p}-d", json!({"total": 4}), 201, json!({}))
            .put_pool("{p}Xa", json!({"total": 9}), 201, json!({}))
            .get("/v1/pools?prefix={p}-", 200, json!({
                "pools": [full_pool("{p}-a", 1), full_pool("{p}-b", 2), full_pool("{p}-c", 3), full_pool("{p}-d", 4), full_pool("{p}-e", 5)],
                "next": null,
            }))
            .get("/v1/pools?prefix={p}X", 200, json!({"pools": [{"pool": "{p}Xa", "total": 9}], "next": null}))
            .get("/v1/pools?prefix={p}-&limit=2", 200, json!({"pools": [{"pool": "{p}-a"}, {"pool": "{p}-b"}], "next": "$save:n1"}))
            .get("/v1/pools?prefix={p}-&limit=2&after={$n1}", 200, json!({"pools": [{"pool": "{p}-c"}, {"pool": "{p}-d"}], "next": "$save:n2"}))
            .get("/v1/pools?prefix={p}-&limit=2&after={$n2}", 200, json!({"pools": [{"pool": "{p}-e"}], "next": null}))
            .get("/v1/pools?prefix={p}-&limit=1000", 200, json!({"pools": {"$len": 5}, "next": null}))
            .get("/v1/pools?prefix={p}Y", 200, json!({"pools": [], "next": null}))
            .get("/v1/pools", 200, json!({"pools": "$any", "next": "$any"})),
        case("pools list: a deleted pool is not listed")
            .put_pool("{p}-a", json!({"total": 1}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 1}), 201, json!({}))
            .delete_pool("{p}-a", 204, Value::Null)
            .get("/v1/pools?prefix={p}-", 200, json!({"pools": [{"pool": "{p}-b"}], "next": null})),
        case("pool delete: 204, then the pool is gone everywhere")
            .put_pool("{p}-a", json!({"total": 3}), 201, json!({}))
            .delete_pool("{p}-a", 204, Value::Null)
            .get("/v1/pools/{p}-a", 404, err("pool_not_found"))
            .delete_pool("{p}-a", 404, err("pool_not_found"))
            .restock("{p}-a", 1, 404, err("pool_not_found"))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 1}]}), 404, json!({"error": "pool_not_found", "pool": "{p}-a"})),
        case("pool delete: 409 pool_has_active_holds while held > 0; allowed once released")
            .put_pool("{p}-a", json!({"total": 3}), 201, json!({}))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 1}]}), 201, status("held"))
            .delete_pool("{p}-a", 409, err("pool_has_active_holds"))
            .get_pool("{p}-a", counts(3, 2, 1, 0))
            .release("{p}-h", 200, status("released"))
            .delete_pool("{p}-a", 204, Value::Null)
            .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
        case("pool delete: refunds on a deleted pool are 409 pool_deleted, even after re-creating it")
            .put_pool("{p}-a", json!({"total": 5}), 201, json!({}))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 2}], "confirm": true}), 201, status("confirmed"))
            .delete_pool("{p}-a", 204, Value::Null)
            .refund("{p}-h", 409, err("pool_deleted"))
            .get_hold("{p}-h", 200, status("confirmed"))
            .put_pool("{p}-a", json!({"total": 5}), 201, counts(5, 5, 0, 0))
            .refund("{p}-h", 409, err("pool_deleted"))
            .get_pool("{p}-a", counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, status("confirmed"))
            .events(json!([
                ev("pool_upserted", json!({"pool": "{p}-a"})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
                ev("pool_deleted", json!({"pool": "{p}-a"})),
                ev("pool_upserted", json!({"pool": "{p}-a"})),
            ])),
        case("pool delete: a refund spanning a deleted pool changes no other pool")
            .put_pool("{p}-a", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 5}), 201, json!({}))
            .reserve(json!({"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 1}, {"pool": "{p}-b", "qty": 2}], "confirm": true}), 201, status("confirmed"))
            .delete_pool("{p}-a", 204, Value::Null)
            .refund("{p}-h", 409, err("pool_deleted"))
            .get_pool("{p}-b", counts(5, 3, 0, 2))
            .get_hold("{p}-h", 200, status("confirmed")),
    ];
    // Default page size: 101 pools, the first page holds 100.
    let mut many = case("pools list: limit defaults to 100");
    for index in 0..101 {
        many = many.put_pool(
            &format!("{{p}}-{index:03}"),
            json!({"total": 1}),
            201,
            json!({}),
        );
    }
    cases.push(
        many.get(
            "/v1/pools?prefix={p}-",
            200,
            json!({"pools": {"$len": 100}, "next": "$save:next"}),
        )
        .get(
            "/v1/pools?prefix={p}-&limit=1",
            200,
            json!({"pools": [{"pool": "{p}-000"}], "next": "$any"}),
        )
        .get(
            "/v1/pools?prefix={p}-&after={$next}",
            200,
            json!({"pools": [{"pool": "{p}-100"}], "next": null}),
        ),
    );
    cases
}

// =============================================================================================
// Holds
// =============================================================================================

/// `{"hold_id": ..., "items": [...]}` plus optional extra fields, ids written with `{p}`.
fn hold_req(hold_id: &str, items: &[(&str, u64)], extra: Value) -> Value {
    let list: Vec<Value> = items
        .iter()
        .map(|(pool, qty)| json!({"pool": pool, "qty": qty}))
        .collect();
    let mut body = json!({"hold_id": hold_id, "items": list});
    for (key, value) in extra.as_object().expect("extra fields").clone() {
        body[key] = value;
    }
    body
}

fn hold_cases() -> Vec<Case> {
    let a = "{p}-a";
    let b = "{p}-b";
    let c = "{p}-c";
    let none = json!({});
    vec![
        case("hold: a single-item reserve is 201 with the hold object; available moves to held")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 3)], none.clone()), 201, json!({
                "hold_id": "{p}-h", "status": "held", "user": null, "items": [{"pool": a, "qty": 3}],
                "created_at_ms": "$now", "expires_at_ms": "$now+600000", "finished_at_ms": null,
                "partition": "$partition:h",
            }))
            .get_pool(a, counts(10, 7, 3, 0))
            .get_hold("{p}-h", 200, json!({
                "hold_id": "{p}-h", "status": "held", "user": null, "items": [{"pool": a, "qty": 3}],
                "created_at_ms": "$save:created", "expires_at_ms": "$save:expires", "finished_at_ms": null,
                "partition": "$partition:h",
            }))
            .get_hold("{p}-h", 200, json!({"created_at_ms": "$same:created", "expires_at_ms": "$same:expires"})),
        case("hold: a multi-item reserve takes every item")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .put_pool(b, json!({"total": 5}), 201, json!({}))
            .put_pool(c, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2), (c, 5)], json!({"user": "u1"})), 201, json!({
                "hold_id": "{p}-h", "status": "held", "user": "u1",
                "items": items(json!([{"pool": a, "qty": 1}, {"pool": b, "qty": 2}, {"pool": c, "qty": 5}])),
                "finished_at_ms": null,
            }))
            .get_pool(a, counts(5, 4, 1, 0))
            .get_pool(b, counts(5, 3, 2, 0))
            .get_pool(c, counts(5, 0, 5, 0))
            .get_hold("{p}-h", 200, json!({"user": "u1", "items": items(json!([{"pool": a, "qty": 1}, {"pool": b, "qty": 2}, {"pool": c, "qty": 5}]))})),
        case("hold: ttl_ms sets expires_at_ms = now + ttl_ms, at both edges")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$now+1000"}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"ttl_ms": 86_400_000})), 201, json!({"expires_at_ms": "$now+86400000"})),
        case("hold: null optional fields are the same as leaving them out")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"user": null, "ttl_ms": null, "confirm": null, "wait_ms": null})),
                201,
                json!({"status": "held", "user": null, "expires_at_ms": "$now+600000"}),
            )
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, status("held")),
        case("hold: all-or-nothing: a failing item changes nothing anywhere, and is not remembered")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 3), (b, 2)], json!({"user": "u1"})), 409, json!({"error": "insufficient_stock", "pool": b, "available": 1, "requested": 2}))
            .get_pool(a, counts(10, 10, 0, 0))
            .get_pool(b, counts(1, 1, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found"))
            .restock(b, 1, 200, counts(2, 2, 0, 0))
            .reserve(hold_req("{p}-h", &[(a, 3), (b, 2)], json!({"user": "u1"})), 201, status("held"))
            .get_pool(a, counts(10, 7, 3, 0))
            .get_pool(b, counts(2, 0, 2, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("restocked", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h", "user": "u1", "items": items(json!([{"pool": a, "qty": 3}, {"pool": b, "qty": 2}]))})),
            ])),
        case("hold: all-or-nothing with confirm:true")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 1)], json!({"confirm": true})), 409, json!({"error": "insufficient_stock", "pool": b, "available": 0, "requested": 1}))
            .get_pool(a, counts(10, 10, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found")),
        case("hold: request validation comes before any lookup")
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1), ("{p}-missing2", 0)], none.clone()), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1)], json!({"ttl_ms": 5})), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1), ("{p}-missing", 1)], none.clone()), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1)], json!({"user": "-bad"})), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1)], json!({"wait_ms": 30_001})), 422, err("invalid_request"))
            .reserve(hold_req("{p}-h", &[("{p}-missing", 1)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-missing"})),
        case("hold: pool_not_found names the first missing pool in item order")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), ("{p}-m1", 1), ("{p}-m2", 1)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-m1"}))
            .reserve(hold_req("{p}-h", &[("{p}-m2", 1), (a, 1), ("{p}-m1", 1)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-m2"}))
            .get_pool(a, counts(10, 10, 0, 0)),
        case("hold: first failure wins in item order: insufficient_stock vs pool_not_found")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2), ("{p}-m", 1)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": a, "available": 1, "requested": 2}))
            .reserve(hold_req("{p}-h", &[("{p}-m", 1), (a, 2)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-m"})),
        case("hold: user_required when a pool has a per-user limit and no user is given")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool("{p}-u", json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), ("{p}-u", 1)], none.clone()), 422, err("user_required"))
            .reserve(hold_req("{p}-h", &[(a, 1), ("{p}-u", 1)], json!({"user": null})), 422, err("user_required"))
            .get_pool(a, counts(10, 10, 0, 0))
            .get_pool("{p}-u", counts(10, 10, 0, 0))
            .reserve(hold_req("{p}-h", &[(a, 1), ("{p}-u", 1)], json!({"user": "u1"})), 201, status("held")),
        case("hold: within one item, user_required comes before the sale window and stock")
            .put_pool("{p}-u", json!({"total": 0, "per_user_limit": 1, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-u", 1)], none.clone()), 422, err("user_required")),
        case("hold: item order decides between user_required and insufficient_stock")
            .put_pool("{p}-u", json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .put_pool("{p}-s", json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-s", 1), ("{p}-u", 1)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": "{p}-s"}))
            .reserve(hold_req("{p}-h", &[("{p}-u", 1), ("{p}-s", 1)], none.clone()), 422, err("user_required")),
        case("hold: item order decides between user_required and pool_not_found")
            .put_pool("{p}-u", json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-m", 1), ("{p}-u", 1)], none.clone()), 404, json!({"error": "pool_not_found", "pool": "{p}-m"}))
            .reserve(hold_req("{p}-h", &[("{p}-u", 1), ("{p}-m", 1)], none.clone()), 422, err("user_required")),
        case("hold: sale window: open, not started, ended; first failing item wins")
            .put_pool("{p}-open", json!({"total": 5, "starts_at_ms": LONG_AGO_MS, "ends_at_ms": FAR_FUTURE_MS}), 201, json!({}))
            .put_pool("{p}-early", json!({"total": 5, "starts_at_ms": FAR_FUTURE_MS}), 201, json!({}))
            .put_pool("{p}-late", json!({"total": 5, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-open", 1)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[("{p}-early", 1)], none.clone()), 409, err("sale_not_started"))
            .reserve(hold_req("{p}-h2", &[("{p}-late", 1)], none.clone()), 409, err("sale_ended"))
            .reserve(hold_req("{p}-h2", &[("{p}-late", 1), ("{p}-early", 1)], none.clone()), 409, err("sale_ended"))
            .reserve(hold_req("{p}-h2", &[("{p}-early", 1), ("{p}-late", 1)], none.clone()), 409, err("sale_not_started"))
            .reserve(hold_req("{p}-h2", &[("{p}-open", 1), ("{p}-late", 1)], none.clone()), 409, err("sale_ended"))
            .get_pool("{p}-open", counts(5, 4, 1, 0))
            .get_pool("{p}-early", counts(5, 5, 0, 0))
            .get_pool("{p}-late", counts(5, 5, 0, 0)),
        case("hold: only one bound set: starts in the past or ends in the future is open")
            .put_pool("{p}-s", json!({"total": 5, "starts_at_ms": LONG_AGO_MS}), 201, json!({}))
            .put_pool("{p}-e", json!({"total": 5, "ends_at_ms": FAR_FUTURE_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-s", 1), ("{p}-e", 1)], none.clone()), 201, status("held")),
        case("hold: within one item, the sale window comes before stock")
            .put_pool("{p}-late", json!({"total": 0, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .put_pool("{p}-early", json!({"total": 0, "starts_at_ms": FAR_FUTURE_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-late", 1)], none.clone()), 409, err("sale_ended"))
            .reserve(hold_req("{p}-h", &[("{p}-early", 1)], none.clone()), 409, err("sale_not_started")),
        case("hold: item order decides between a sale window and insufficient_stock")
            .put_pool("{p}-late", json!({"total": 5, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .put_pool("{p}-s", json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[("{p}-s", 1), ("{p}-late", 1)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": "{p}-s"}))
            .reserve(hold_req("{p}-h", &[("{p}-late", 1), ("{p}-s", 1)], none.clone()), 409, err("sale_ended")),
        case("hold: insufficient_stock carries pool, available and requested")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 4)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": a, "available": 1, "requested": 2}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h3", &[(a, 1)], none.clone()), 409, json!({"error": "insufficient_stock", "pool": a, "available": 0, "requested": 1})),
        case("hold: within one item, stock comes before the per-user limit")
            .put_pool(a, json!({"total": 2, "per_user_limit": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 3)], json!({"user": "u1"})), 409, json!({"error": "insufficient_stock", "pool": a, "available": 2, "requested": 3})),
        case("hold: user_limit_exceeded carries pool, limit, used and requested; other users unaffected")
            .put_pool(a, json!({"total": 10, "per_user_limit": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a, "limit": 3, "used": 2, "requested": 2}))
            .reserve(hold_req("{p}-h3", &[(a, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h4", &[(a, 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a, "limit": 3, "used": 3, "requested": 1}))
            .reserve(hold_req("{p}-h5", &[(a, 3)], json!({"user": "u2"})), 201, status("held"))
            .get_pool(a, counts(10, 4, 6, 0)),
        case("hold: one request above the limit is user_limit_exceeded with used 0")
            .put_pool(a, json!({"total": 10, "per_user_limit": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 4)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a, "limit": 3, "used": 0, "requested": 4}))
            .get_pool(a, counts(10, 10, 0, 0)),
        case("hold: per-user usage counts confirmed holds")
            .put_pool(a, json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1", "confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "used": 2, "requested": 1, "limit": 2})),
        case("hold: per-user usage is kept per pool")
            .put_pool(a, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .put_pool(b, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(b, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h3", &[(b, 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": b, "used": 1})),
        case("hold: a user on a pool without a limit is fine; the limit applies only where set")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 9), (b, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 1), (b, 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": b})),
        case("hold: item order decides between user_limit_exceeded and insufficient_stock")
            .put_pool(a, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .put_pool("{p}-s", json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h0", &[(a, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h1", &[(a, 1), ("{p}-s", 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a, "limit": 1, "used": 1, "requested": 1}))
            .reserve(hold_req("{p}-h1", &[("{p}-s", 1), (a, 1)], json!({"user": "u1"})), 409, json!({"error": "insufficient_stock", "pool": "{p}-s"})),
        case("hold: item order decides between user_limit_exceeded and a sale window")
            .put_pool(a, json!({"total": 10, "per_user_limit": 1}), 201, json!({}))
            .put_pool("{p}-late", json!({"total": 10, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2), ("{p}-late", 1)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "pool": a}))
            .reserve(hold_req("{p}-h1", &[("{p}-late", 1), (a, 2)], json!({"user": "u1"})), 409, err("sale_ended")),
        case("hold: release gives per-user usage back")
            .put_pool(a, json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "used": 2}))
            .release("{p}-h1", 200, status("released"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 201, status("held")),
        case("hold: refund gives per-user usage back")
            .put_pool(a, json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1", "confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "used": 2}))
            .refund("{p}-h1", 200, status("refunded"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 201, status("held")),
        case("hold: expiry gives per-user usage back")
            .put_pool(a, json!({"total": 10, "per_user_limit": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1", "ttl_ms": 1000})), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 409, json!({"error": "user_limit_exceeded", "used": 2}))
            .poll_pool(a, 1000, counts(10, 10, 0, 0))
            .reserve(hold_req("{p}-h2", &[(a, 2)], json!({"user": "u1"})), 201, status("held")),
        case("hold: the same request again is 200 with the same hold, in any item order, nothing changes")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], json!({"user": "u1"})), 201, json!({"created_at_ms": "$save:created", "expires_at_ms": "$save:expires"}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], json!({"user": "u1"})), 200, json!({
                "hold_id": "{p}-h", "status": "held", "user": "u1", "created_at_ms": "$same:created", "expires_at_ms": "$same:expires",
                "items": items(json!([{"pool": a, "qty": 1}, {"pool": b, "qty": 2}])),
            }))
            .reserve(hold_req("{p}-h", &[(b, 2), (a, 1)], json!({"user": "u1"})), 200, json!({"created_at_ms": "$same:created"}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], json!({"user": "u1", "ttl_ms": 5000, "wait_ms": 0})), 200, json!({"expires_at_ms": "$same:expires"}))
            .get_pool(a, counts(10, 9, 1, 0))
            .get_pool(b, counts(10, 8, 2, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: a replay after confirm answers the current state")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, status("held"))
            .confirm("{p}-h", 200, status("confirmed"))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, status("confirmed"))
            .get_pool(a, counts(10, 9, 0, 1)),
        case("hold: a replay after release answers released and takes no stock")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, status("held"))
            .release("{p}-h", 200, status("released"))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, status("released"))
            .get_pool(a, counts(10, 10, 0, 0)),
        case("hold: a replay after refund answers refunded and takes no stock")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .refund("{p}-h", 200, status("refunded"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 200, status("refunded"))
            .get_pool(a, counts(10, 10, 0, 0)),
        case("hold: confirm left out equals confirm false, user left out equals user null")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": false, "user": null})), 200, status("held"))
            .get_pool(a, counts(10, 9, 1, 0)),
        case("hold: hold_id_conflict for a different user, items or confirm flag; nothing changes")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .put_pool(b, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"user": "u1"})), 201, status("held"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"user": "u2"})), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"user": "u1"})), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(b, 1)], json!({"user": "u1"})), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 1)], json!({"user": "u1"})), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"user": "u1", "confirm": true})), 409, err("hold_id_conflict"))
            .get_pool(a, counts(10, 9, 1, 0))
            .get_pool(b, counts(10, 10, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "held", "user": "u1", "items": [{"pool": a, "qty": 1}]})),
        case("hold: hold_id_conflict when a confirm:true hold is replayed without confirm")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 409, err("hold_id_conflict"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 200, status("confirmed"))
            .get_pool(a, counts(10, 9, 0, 1)),
        case("hold: confirm:true reserves and confirms in one step")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"confirm": true})), 201, json!({
                "hold_id": "{p}-h", "status": "confirmed", "items": [{"pool": a, "qty": 2}],
                "created_at_ms": "$now", "finished_at_ms": "$now",
            }))
            .get_pool(a, counts(5, 3, 0, 2))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: confirm moves held to sold; repeating it is 200 with no change")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], none.clone()), 201, status("held"))
            .confirm("{p}-h", 200, json!({"hold_id": "{p}-h", "status": "confirmed", "finished_at_ms": "$now", "items": [{"pool": a, "qty": 2}]}))
            .get_pool(a, counts(5, 3, 0, 2))
            .get_hold("{p}-h", 200, json!({"status": "confirmed", "finished_at_ms": "$save:finished"}))
            .confirm("{p}-h", 200, json!({"status": "confirmed", "finished_at_ms": "$same:finished"}))
            .get_pool(a, counts(5, 3, 0, 2))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: confirm refuses released and refunded holds; a missing hold is 404")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, status("held"))
            .release("{p}-h1", 200, status("released"))
            .confirm("{p}-h1", 409, err("hold_released"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .refund("{p}-h2", 200, status("refunded"))
            .confirm("{p}-h2", 409, err("hold_refunded"))
            .confirm("{p}-nope", 404, err("hold_not_found"))
            .get_pool(a, counts(5, 5, 0, 0)),
        case("hold: past its deadline a hold is expired even before any sweep: confirm refuses it")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:deadline"}))
            .wait_past("deadline")
            .confirm("{p}-h", 409, err("hold_expired"))
            .poll_pool(a, 0, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "expired", "finished_at_ms": "$int"})),
        case("hold: release returns units; repeating it is 200 with no change")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], none.clone()), 201, status("held"))
            .release("{p}-h", 200, json!({"hold_id": "{p}-h", "status": "released", "finished_at_ms": "$now"}))
            .get_pool(a, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "released", "finished_at_ms": "$save:finished"}))
            .release("{p}-h", 200, json!({"status": "released", "finished_at_ms": "$same:finished"}))
            .get_pool(a, counts(5, 5, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("released", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: release refuses confirmed and refunded holds; a missing hold is 404")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .release("{p}-h", 409, err("hold_confirmed"))
            .get_pool(a, counts(5, 4, 0, 1))
            .refund("{p}-h", 200, status("refunded"))
            .release("{p}-h", 409, err("hold_refunded"))
            .release("{p}-nope", 404, err("hold_not_found"))
            .get_pool(a, counts(5, 5, 0, 0)),
        case("hold: release past the deadline is 200 with status expired")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:deadline"}))
            .wait_past("deadline")
            .release("{p}-h", 200, json!({"hold_id": "{p}-h", "status": "expired"}))
            .poll_pool(a, 0, counts(5, 5, 0, 0))
            .release("{p}-h", 200, status("expired"))
            .get_pool(a, counts(5, 5, 0, 0)),
        case("hold: an expired hold: units back without traffic, and every transition answers per contract")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 3)], json!({"user": "u1", "ttl_ms": 1000})), 201, status("held"))
            .poll_pool(a, 1000, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "expired", "finished_at_ms": "$int", "user": "u1"}))
            .confirm("{p}-h", 409, err("hold_expired"))
            .extend("{p}-h", 5000, 409, err("hold_expired"))
            .refund("{p}-h", 409, err("hold_not_confirmed"))
            .release("{p}-h", 200, status("expired"))
            .reserve(hold_req("{p}-h", &[(a, 3)], json!({"user": "u1", "ttl_ms": 1000})), 200, status("expired"))
            .get_pool(a, counts(5, 5, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h", "user": "u1", "items": [{"pool": a, "qty": 3}]})),
                ev("expired", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: extend sets expires_at_ms = now + ttl_ms, at both edges")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 1000})), 201, status("held"))
            .extend("{p}-h", 86_400_000, 200, json!({"hold_id": "{p}-h", "status": "held", "expires_at_ms": "$now+86400000", "finished_at_ms": null}))
            .get_hold("{p}-h", 200, json!({"status": "held", "expires_at_ms": "$save:expires"}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, json!({"expires_at_ms": "$same:expires"}))
            .extend("{p}-h", 1000, 200, json!({"expires_at_ms": "$now+1000"}))
            .get_pool(a, counts(5, 4, 1, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("extended", json!({"hold_id": "{p}-h"})),
                ev("extended", json!({"hold_id": "{p}-h"})),
            ])),
        case("hold: extend keeps a hold alive past its first deadline")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:first"}))
            .extend("{p}-h", 60_000, 200, status("held"))
            .wait_past("first")
            .confirm("{p}-h", 200, status("confirmed"))
            .get_pool(a, counts(5, 4, 0, 1)),
        case("hold: extend refuses confirmed, released, refunded and expired holds; missing is 404")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .extend("{p}-h1", 5000, 409, err("hold_confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, status("held"))
            .release("{p}-h2", 200, status("released"))
            .extend("{p}-h2", 5000, 409, err("hold_released"))
            .reserve(hold_req("{p}-h3", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .refund("{p}-h3", 200, status("refunded"))
            .extend("{p}-h3", 5000, 409, err("hold_refunded"))
            .reserve(hold_req("{p}-h4", &[(a, 1)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:deadline"}))
            .wait_past("deadline")
            .extend("{p}-h4", 5000, 409, err("hold_expired"))
            .extend("{p}-nope", 5000, 404, err("hold_not_found"))
            .poll_pool(a, 0, counts(5, 4, 0, 1)),
        case("hold: refund returns sold units to available; repeating it is 200 with no change")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"confirm": true})), 201, status("confirmed"))
            .refund("{p}-h", 200, json!({"hold_id": "{p}-h", "status": "refunded", "finished_at_ms": "$now"}))
            .get_pool(a, counts(5, 5, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$save:finished"}))
            .refund("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$same:finished"}))
            .get_pool(a, counts(5, 5, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
                ev("refunded", json!({"hold_id": "{p}-h", "restock": true})),
            ])),
        case("hold: refund with restock false takes the sold units out of every pool; a repeat is 200 unchanged")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .put_pool(b, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2), (b, 1)], json!({"confirm": true, "user": "u1"})), 201, status("confirmed"))
            .get_pool(a, counts(5, 3, 0, 2))
            .refund_with("{p}-h", json!({"restock": false}), 200, json!({"hold_id": "{p}-h", "status": "refunded", "finished_at_ms": "$now"}))
            .get_pool(a, counts(3, 3, 0, 0))
            .get_pool(b, counts(4, 4, 0, 0))
            .get_hold("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$save:finished"}))
            .refund("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$same:finished"}))
            .refund_with("{p}-h", json!({"restock": false}), 200, json!({"status": "refunded", "finished_at_ms": "$same:finished"}))
            .refund_with("{p}-h", json!({"restock": true}), 200, json!({"status": "refunded", "finished_at_ms": "$same:finished"}))
            .get_pool(a, counts(3, 3, 0, 0))
            .get_pool(b, counts(4, 4, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
                ev("refunded", json!({"hold_id": "{p}-h", "restock": false})),
            ])),
        case("hold: refund's body: empty, null, {} and restock true put the units back; a bad restock is 422")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h3", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h4", &[(a, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .refund_with("{p}-h1", json!({"restock": "no"}), 422, err("invalid_request"))
            .refund_with("{p}-h1", json!({"restock": 0}), 422, err("invalid_request"))
            .refund_with("{p}-h1", json!({"restok": false}), 422, err("invalid_request"))
            .refund_with("{p}-h1", json!([false]), 422, err("invalid_request"))
            .get_pool(a, counts(5, 1, 0, 4))
            .raw("POST", "/v1/holds/{p}-h1/refund", "null", 200, status("refunded"))
            .raw("POST", "/v1/holds/{p}-h2/refund", "{}", 200, status("refunded"))
            .refund_with("{p}-h3", json!({"restock": null}), 200, status("refunded"))
            .refund_with("{p}-h4", json!({"restock": true}), 200, status("refunded"))
            .get_pool(a, counts(5, 5, 0, 0)),
        case("hold: refund refuses held, released and expired holds; missing is 404")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, status("held"))
            .refund("{p}-h1", 409, err("hold_not_confirmed"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, status("held"))
            .release("{p}-h2", 200, status("released"))
            .refund("{p}-h2", 409, err("hold_not_confirmed"))
            .refund("{p}-nope", 404, err("hold_not_found"))
            .get_pool(a, counts(5, 4, 1, 0))
            .get_hold("{p}-h1", 200, status("held")),
        case("hold: a multi-pool hold moves every pool on each transition")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .put_pool(b, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], none.clone()), 201, status("held"))
            .confirm("{p}-h", 200, status("confirmed"))
            .get_pool(a, counts(5, 4, 0, 1))
            .get_pool(b, counts(5, 3, 0, 2))
            .refund("{p}-h", 200, status("refunded"))
            .get_pool(a, counts(5, 5, 0, 0))
            .get_pool(b, counts(5, 5, 0, 0)),
        case("hold: finished_at_ms follows the latest transition")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true})), 201, json!({"finished_at_ms": "$save:confirmed_at"}))
            .refund("{p}-h", 200, json!({"finished_at_ms": "$now"}))
            .get_hold("{p}-h", 200, json!({"status": "refunded", "finished_at_ms": "$int"})),
        case("hold: GET of a missing hold is 404 hold_not_found")
            .get_hold("{p}-nope", 404, err("hold_not_found")),
        case("hold: wait_ms with stock short fails with insufficient_stock when nothing comes back")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({"wait_ms": 200})), 409, json!({"error": "insufficient_stock", "pool": a, "available": 0, "requested": 1}))
            .get_pool(a, counts(1, 0, 1, 0))
            .get_hold("{p}-h2", 404, err("hold_not_found")),
        case("hold: wait_ms 30000 with stock available succeeds at once")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"wait_ms": 30_000})), 201, status("held")),
        case("hold: a failed reserve of one hold_id does not block a later one")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], none.clone()), 409, err("insufficient_stock"))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"user": "u9"})), 201, json!({"status": "held", "user": "u9", "items": [{"pool": a, "qty": 1}]})),
        case("hold: identifiers use the whole alphabet: . _ : - after an alphanumeric first byte")
            .put_pool("{p}.a_b:c-d", json!({"total": 2}), 201, json!({"pool": "{p}.a_b:c-d"}))
            .reserve(hold_req("{p}.h_1:x-y", &[("{p}.a_b:c-d", 1)], json!({"user": "0.u_1:x-Y"})), 201, json!({"hold_id": "{p}.h_1:x-y", "user": "0.u_1:x-Y"}))
            .get_hold("{p}.h_1:x-y", 200, status("held"))
            .confirm("{p}.h_1:x-y", 200, status("confirmed")),
    ]
}

// =============================================================================================
// Batch
// =============================================================================================

/// One op with the single endpoint's expected answer. The batch case and the single-endpoint case
/// are built from the same list, so "each op gets exactly the single endpoint's result" is checked
/// by both cases passing against the same expectations.
fn batch_script() -> Vec<(Value, u16, Value)> {
    let a = "{p}-a";
    vec![
        (
            json!({"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 2}]}),
            201,
            json!({"hold_id": "{p}-h1", "status": "held", "finished_at_ms": null}),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": a, "qty": 2}]}),
            409,
            json!({"error": "insufficient_stock", "pool": a, "available": 1, "requested": 2}),
        ),
        (
            json!({"op": "confirm", "hold_id": "{p}-h1"}),
            200,
            json!({"hold_id": "{p}-h1", "status": "confirmed"}),
        ),
        (
            json!({"op": "release", "hold_id": "{p}-h1"}),
            409,
            err("hold_confirmed"),
        ),
        (
            json!({"op": "refund", "hold_id": "{p}-h1"}),
            200,
            status("refunded"),
        ),
        (
            json!({"op": "refund", "hold_id": "{p}-h1"}),
            200,
            status("refunded"),
        ),
        (
            json!({"op": "confirm", "hold_id": "{p}-nope"}),
            404,
            err("hold_not_found"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h3", "user": "u1", "items": [{"pool": a, "qty": 1}], "ttl_ms": 5000}),
            201,
            json!({"status": "held", "user": "u1", "expires_at_ms": "$now+5000"}),
        ),
        (
            json!({"op": "extend", "hold_id": "{p}-h3", "ttl_ms": 60_000}),
            200,
            json!({"status": "held", "expires_at_ms": "$now+60000"}),
        ),
        (
            json!({"op": "release", "hold_id": "{p}-h3"}),
            200,
            status("released"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 2}]}),
            200,
            status("refunded"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 1}]}),
            409,
            err("hold_id_conflict"),
        ),
        (
            json!({"op": "refund", "hold_id": "{p}-h3"}),
            409,
            err("hold_not_confirmed"),
        ),
        (
            json!({"op": "extend", "hold_id": "{p}-h3", "ttl_ms": 5000}),
            409,
            err("hold_released"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h4", "items": [{"pool": a, "qty": 3}], "confirm": true}),
            201,
            status("confirmed"),
        ),
        (
            json!({"op": "confirm", "hold_id": "{p}-h4"}),
            200,
            status("confirmed"),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h5", "items": [{"pool": a, "qty": 1}]}),
            409,
            json!({"error": "insufficient_stock", "pool": a, "available": 0, "requested": 1}),
        ),
        (
            json!({"op": "reserve", "hold_id": "{p}-h5", "items": [{"pool": "{p}-m", "qty": 1}]}),
            404,
            json!({"error": "pool_not_found", "pool": "{p}-m"}),
        ),
        (
            json!({"op": "release", "hold_id": "{p}-h4"}),
            409,
            err("hold_confirmed"),
        ),
    ]
}

fn batch_script_events() -> Value {
    json!([
        ev("pool_upserted", json!({"pool": "{p}-a"})),
        ev("held", json!({"hold_id": "{p}-h1"})),
        ev("confirmed", json!({"hold_id": "{p}-h1"})),
        ev("refunded", json!({"hold_id": "{p}-h1"})),
        ev("held", json!({"hold_id": "{p}-h3", "user": "u1"})),
        ev("extended", json!({"hold_id": "{p}-h3"})),
        ev("released", json!({"hold_id": "{p}-h3"})),
        ev("held", json!({"hold_id": "{p}-h4"})),
        ev("confirmed", json!({"hold_id": "{p}-h4"})),
    ])
}

/// The single-endpoint form of a batch op.
fn single_step(case: Case, op: &Value, status: u16, expect: Value) -> Case {
    let hold = op["hold_id"].as_str().expect("hold_id").to_string();
    match op["op"].as_str().expect("op") {
        "reserve" => {
            let mut body = op.clone();
            body.as_object_mut().unwrap().remove("op");
            case.reserve(body, status, expect)
        }
        "extend" => case.extend(&hold, op["ttl_ms"].as_u64().unwrap(), status, expect),
        verb @ ("confirm" | "release" | "refund") => case.req(
            "POST",
            &format!("/v1/holds/{hold}/{verb}"),
            None,
            status,
            expect,
        ),
        other => panic!("unknown op {other}"),
    }
}

fn batch_cases() -> Vec<Case> {
    let a = "{p}-a";
    let script = batch_script();
    let mut single = case(
        "batch: the script through single endpoints (reference for the batch case)",
    )
    .put_pool(a, json!({"total": 3}), 201, json!({}));
    for (op, status, expect) in &script {
        single = single_step(single, op, *status, expect.clone());
    }
    single = single
        .get_pool(a, counts(3, 0, 0, 3))
        .events(batch_script_events());

    let ops: Vec<Value> = script.iter().map(|(op, _, _)| op.clone()).collect();
    let results: Vec<Value> = script
        .iter()
        .map(|(_, status, body)| json!({"status": status, "body": body}))
        .collect();
    let batched =
        case("batch: the same script in one batch gives every single-endpoint answer, in order")
            .put_pool(a, json!({"total": 3}), 201, json!({}))
            .batch(json!(ops), 200, json!({"results": results}))
            .get_pool(a, counts(3, 0, 0, 3))
            .get_hold("{p}-h1", 200, status("refunded"))
            .get_hold("{p}-h4", 200, status("confirmed"))
            .events(batch_script_events());

    let b = "{p}-b";
    let refund_without_restock = case("batch: a refund op takes restock, as its single endpoint")
        .put_pool(a, json!({"total": 5}), 201, json!({}))
        .put_pool(b, json!({"total": 5}), 201, json!({}))
        .reserve(
            hold_req("{p}-h1", &[(a, 2), (b, 1)], json!({"confirm": true})),
            201,
            status("confirmed"),
        )
        .reserve(
            hold_req("{p}-h2", &[(a, 1)], json!({"confirm": true})),
            201,
            status("confirmed"),
        )
        .batch(
            json!([
                {"op": "refund", "hold_id": "{p}-h1", "restock": "no"},
                {"op": "refund", "hold_id": "{p}-h1", "restock": false},
                {"op": "refund", "hold_id": "{p}-h1", "restock": true},
                {"op": "refund", "hold_id": "{p}-h2", "restock": null},
            ]),
            200,
            json!({"results": [
                {"status": 422, "body": {"error": "invalid_request"}},
                {"status": 200, "body": {"hold_id": "{p}-h1", "status": "refunded"}},
                {"status": 200, "body": {"hold_id": "{p}-h1", "status": "refunded"}},
                {"status": 200, "body": {"hold_id": "{p}-h2", "status": "refunded"}},
            ]}),
        )
        .get_pool(a, counts(3, 3, 0, 0))
        .get_pool(b, counts(4, 4, 0, 0))
        .events(json!([
            ev("pool_upserted", json!({"pool": a})),
            ev("pool_upserted", json!({"pool": b})),
            ev("held", json!({"hold_id": "{p}-h1"})),
            ev("confirmed", json!({"hold_id": "{p}-h1"})),
            ev("held", json!({"hold_id": "{p}-h2"})),
            ev("confirmed", json!({"hold_id": "{p}-h2"})),
            ev("refunded", json!({"hold_id": "{p}-h1", "restock": false})),
            ev("refunded", json!({"hold_id": "{p}-h2", "restock": true})),
        ]));

    let thousand: Vec<Value> = (0..1000)
        .map(|i| json!({"op": "reserve", "hold_id": format!("{{p}}-h{i}"), "items": [{"pool": a, "qty": 1}]}))
        .collect();
    let thousand_results: Vec<Value> = (0..1000)
        .map(|i| json!({"status": 201, "body": {"hold_id": format!("{{p}}-h{i}")}}))
        .collect();
    let mut too_many = thousand.clone();
    too_many
        .push(json!({"op": "reserve", "hold_id": "{p}-h1000", "items": [{"pool": a, "qty": 1}]}));

    vec![
        single,
        batched,
        refund_without_restock,
        case("batch: one op is accepted")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .batch(json!([{"op": "reserve", "hold_id": "{p}-h", "items": [{"pool": a, "qty": 1}]}]), 200, json!({"results": [{"status": 201, "body": status("held")}]}))
            .get_pool(a, counts(1, 0, 1, 0)),
        case("batch: 1000 ops are accepted and all applied")
            .put_pool(a, json!({"total": 1000}), 201, json!({}))
            .batch(json!(thousand), 200, json!({"results": thousand_results}))
            .get_pool(a, counts(1000, 0, 1000, 0))
            .get_hold("{p}-h999", 200, status("held")),
        case("batch: 0 ops and 1001 ops are 422 invalid_request and apply nothing")
            .put_pool(a, json!({"total": 2000}), 201, json!({}))
            .batch(json!([]), 422, err("invalid_request"))
            .batch(json!(too_many), 422, err("invalid_request"))
            .get_pool(a, counts(2000, 2000, 0, 0))
            .get_hold("{p}-h0", 404, err("hold_not_found")),
        case("batch: ops are independent: a failing op does not stop the next")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .batch(
                json!([
                    {"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 2}]},
                    {"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": a, "qty": 1}]},
                    {"op": "confirm", "hold_id": "{p}-h1"},
                    {"op": "confirm", "hold_id": "{p}-h2"},
                ]),
                200,
                json!({"results": [
                    {"status": 409, "body": {"error": "insufficient_stock", "pool": a, "available": 1, "requested": 2}},
                    {"status": 201, "body": {"hold_id": "{p}-h2", "status": "held"}},
                    {"status": 404, "body": err("hold_not_found")},
                    {"status": 200, "body": status("confirmed")},
                ]}),
            )
            .get_pool(a, counts(1, 0, 0, 1)),
        case("batch: an invalid op answers its own 422, the other ops still apply")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .batch(
                json!([
                    {"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 0}]},
                    {"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": a, "qty": 1}]},
                    {"op": "confirm", "hold_id": "-bad"},
                    {"op": "extend", "hold_id": "{p}-h2", "ttl_ms": 999},
                    {"op": "extend", "hold_id": "{p}-h2", "ttl_ms": 1000},
                ]),
                200,
                json!({"results": [
                    {"status": 422, "body": err("invalid_request")},
                    {"status": 201, "body": status("held")},
                    {"status": 422, "body": err("invalid_request")},
                    {"status": 422, "body": err("invalid_request")},
                    {"status": 200, "body": {"expires_at_ms": "$now+1000"}},
                ]}),
            )
            .get_hold("{p}-h1", 404, err("hold_not_found"))
            .get_pool(a, counts(5, 4, 1, 0)),
        case("batch: a reserve replayed inside one batch is 201 then 200, stock taken once")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .batch(
                json!([
                    {"op": "reserve", "hold_id": "{p}-h", "items": [{"pool": a, "qty": 2}], "confirm": true},
                    {"op": "reserve", "hold_id": "{p}-h", "items": [{"pool": a, "qty": 2}], "confirm": true},
                ]),
                200,
                json!({"results": [
                    {"status": 201, "body": {"status": "confirmed", "created_at_ms": "$save:created"}},
                    {"status": 200, "body": {"status": "confirmed", "created_at_ms": "$same:created"}},
                ]}),
            )
            .get_pool(a, counts(5, 3, 0, 2))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("batch: per-op failure kinds carry their details")
            .put_pool(a, json!({"total": 5, "per_user_limit": 1}), 201, json!({}))
            .put_pool("{p}-late", json!({"total": 5, "ends_at_ms": LONG_AGO_MS}), 201, json!({}))
            .batch(
                json!([
                    {"op": "reserve", "hold_id": "{p}-h1", "items": [{"pool": a, "qty": 1}]},
                    {"op": "reserve", "hold_id": "{p}-h1", "user": "u1", "items": [{"pool": a, "qty": 2}]},
                    {"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": "{p}-late", "qty": 1}]},
                ]),
                200,
                json!({"results": [
                    {"status": 422, "body": err("user_required")},
                    {"status": 409, "body": {"error": "user_limit_exceeded", "pool": a, "limit": 1, "used": 0, "requested": 2}},
                    {"status": 409, "body": err("sale_ended")},
                ]}),
            )
            .get_pool(a, counts(5, 5, 0, 0)),
    ]
}

// =============================================================================================
// Events (per-case, filtered by prefix; the fresh-server properties are tested further down)
// =============================================================================================

fn event_cases() -> Vec<Case> {
    let a = "{p}-a";
    let b = "{p}-b";
    let none = json!({});
    vec![
        case("partitions: the feed has the backend's partition count (1 on the embedded engine and a single Redis)")
            .get("/v1/events/partitions", 200, json!({"partitions": backend_partitions()})),
        case("partitions: partition=K reads partition K: a pool's events are in the partition its object names")
            .get("/v1/events/partitions", 200, json!({"partitions": "{P}"}))
            .put_pool(a, json!({"total": 1}), 201, json!({"partition": "$partition:pa"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1", 200, json!({"events": {"$len": 1}, "next_after": "$int"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1000", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?partition={P-1}&after=0", 200, json!({"events": "$any", "next_after": "$int"}))
            .events(json!([ev("pool_upserted", json!({"pool": a, "partition": "$same:pa"}))])),
        // The largest `after` there is: nothing comes after it, and nothing before it was
        // dropped, so it is an empty page (not 410), waiting or not; one more is not a u64.
        case("events: after = 2^64 - 1 is 200 with no events and next_after the same after")
            .put_pool(a, json!({"total": 1}), 201, json!({"partition": "$partition:pa"}))
            .get("/v1/events?partition={$pa}&after=18446744073709551615", 200, json!({"events": [], "next_after": u64::MAX}))
            .get("/v1/events?partition={$pa}&after=18446744073709551615&limit=1&wait_ms=100", 200, json!({"events": [], "next_after": u64::MAX}))
            .get("/v1/events?partition={$pa}&after=18446744073709551616", 422, err("invalid_request"))
            .events(json!([ev("pool_upserted", json!({"pool": a, "partition": "$same:pa"}))])),
        case("partitions: with one partition, leaving partition out reads partition 0")
            .only(When::OnePartition)
            .put_pool(a, json!({"total": 1}), 201, json!({"partition": 0}))
            .get("/v1/events?after=0&limit=1", 200, json!({"events": [{"seq": 1, "type": "$save:t", "at_ms": "$save:at"}], "next_after": 1}))
            .get("/v1/events?partition=0&after=0&limit=1", 200, json!({"events": [{"seq": 1, "type": "$same:t", "at_ms": "$same:at"}], "next_after": 1}))
            .get("/v1/events?after=0&limit=1000", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?partition=0&after=0&limit=1000", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events", 200, json!({"events": "$any", "next_after": "$int"})),
        case("partitions: with several partitions, leaving partition out is 422 partition_required")
            .only(When::ManyPartitions)
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .get("/v1/events?after=0", 422, json!({"error": "partition_required", "message": "$contains:partition"}))
            .get("/v1/events", 422, err("partition_required"))
            .get("/v1/events?after=0&limit=1&wait_ms=30000", 422, err("partition_required"))
            .get("/v1/events?partition=0&after=0", 200, json!({"events": "$any", "next_after": "$int"})),
        case("partitions: a partition outside 0..P-1 is 422 invalid_request naming the field and the value")
            .get("/v1/events?partition={P}", 422, json!({"error": "invalid_request", "message": "$contains:partition"}))
            .get("/v1/events?partition={P+6}&after=0", 422, json!({"error": "invalid_request", "message": "$contains:{P+6}"}))
            .get("/v1/events?partition=abc", 422, json!({"error": "invalid_request", "message": "$contains:abc"}))
            .get("/v1/events?partition=-1", 422, err("invalid_request"))
            .get("/v1/events?partition=4294967296", 422, err("invalid_request"))
            .get("/v1/events?partition=0.5", 422, err("invalid_request"))
            .get("/v1/events?partition=", 422, err("invalid_request")),
        case("partitions: pool and hold objects carry their partition (0 with one), the same in every answer")
            .put_pool(a, json!({"total": 5}), 201, json!({"partition": "$partition:pa"}))
            .put_pool("{p}-a?if_absent=true", json!({"total": 5}), 200, json!({"partition": "$partition:pa"}))
            .restock(a, 1, 200, json!({"partition": "$partition:pa"}))
            .get_pool(a, json!({"partition": "$partition:pa"}))
            .get("/v1/pools?prefix={p}", 200, json!({"pools": [{"pool": a, "partition": "$partition:pa"}], "next": null}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, json!({"partition": "$partition:ph"}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 200, json!({"partition": "$partition:ph"}))
            .get_hold("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .extend("{p}-h", 60_000, 200, json!({"partition": "$partition:ph"}))
            .confirm("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .refund("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .batch(
                json!([{"op": "reserve", "hold_id": "{p}-h2", "items": [{"pool": a, "qty": 1}]}, {"op": "release", "hold_id": "{p}-h2"}]),
                200,
                json!({"results": [{"status": 201, "body": {"partition": "$partition:ph2"}}, {"status": 200, "body": {"status": "released", "partition": "$partition:ph2"}}]}),
            )
            .get_hold("{p}-h2", 200, json!({"partition": "$partition:ph2"}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a, "partition": "$same:pa"})),
                ev("restocked", json!({"pool": a, "partition": "$same:pa"})),
                ev("held", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("extended", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("confirmed", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("refunded", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("held", json!({"hold_id": "{p}-h2", "partition": "$same:ph2"})),
                ev("released", json!({"hold_id": "{p}-h2", "partition": "$same:ph2"})),
            ])),
        case("partitions: a multi-pool hold names one partition in every answer, and its events are all there")
            .put_pool(a, json!({"total": 5}), 201, json!({"partition": "$partition:pa"}))
            .put_pool(b, json!({"total": 5}), 201, json!({"partition": "$partition:pb"}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], none.clone()), 201, json!({"partition": "$partition:ph"}))
            .get_hold("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .extend("{p}-h", 60_000, 200, json!({"partition": "$partition:ph"}))
            .confirm("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .refund("{p}-h", 200, json!({"partition": "$partition:ph"}))
            .get_pool(a, json!({"partition": "$partition:pa", "available": 5}))
            .get_pool(b, json!({"partition": "$partition:pb", "available": 5}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a, "partition": "$same:pa"})),
                ev("pool_upserted", json!({"pool": b, "partition": "$same:pb"})),
                ev("held", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("extended", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("confirmed", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
                ev("refunded", json!({"hold_id": "{p}-h", "partition": "$same:ph"})),
            ])),
        case("events: every change appends one event of its type, in order, with its fields")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .restock(a, 5, 200, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 2)], json!({"user": "u1"})), 201, json!({}))
            .confirm("{p}-h1", 200, json!({}))
            .refund("{p}-h1", 200, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, json!({}))
            .extend("{p}-h2", 5000, 200, json!({}))
            .release("{p}-h2", 200, json!({}))
            .delete_pool(a, 204, Value::Null)
            .events(json!([
                ev("pool_upserted", json!({"pool": a, "total": 10, "available": 10, "delta": 10})),
                ev("restocked", json!({"pool": a, "total": 15, "available": 15, "delta": 5})),
                ev("held", json!({"hold_id": "{p}-h1", "user": "u1", "items": [{"pool": a, "qty": 2}]})),
                ev("confirmed", json!({"hold_id": "{p}-h1"})),
                ev("refunded", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h2", "items": [{"pool": a, "qty": 1}]})),
                ev("extended", json!({"hold_id": "{p}-h2"})),
                ev("released", json!({"hold_id": "{p}-h2"})),
                ev("pool_deleted", json!({"pool": a, "total": 15, "available": 15})),
            ])),
        // A consumer keeps a pool's numbers by adding deltas, whatever order it reads the
        // partitions in: a PUT says how it moved total (and so available), a delete what it took.
        case("events: pool_upserted carries the change of total, pool_deleted the pool's last numbers")
            .put_pool(a, json!({"total": 5}), 201, counts(5, 5, 0, 0))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"confirm": true})), 201, status("confirmed"))
            .put_pool(a, json!({"total": 8}), 200, counts(8, 6, 0, 2))
            .put_pool(a, json!({"total": 4}), 200, counts(4, 2, 0, 2))
            .put_pool(a, json!({"total": 4}), 200, counts(4, 2, 0, 2))
            .delete_pool(a, 204, Value::Null)
            .put_pool(a, json!({"total": 3}), 201, counts(3, 3, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a, "delta": 5, "total": 5, "available": 5})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
                ev("pool_upserted", json!({"pool": a, "delta": 3, "total": 8, "available": 6})),
                ev("pool_upserted", json!({"pool": a, "delta": -4, "total": 4, "available": 2})),
                ev("pool_upserted", json!({"pool": a, "delta": 0, "total": 4, "available": 2})),
                ev("pool_deleted", json!({"pool": a, "total": 4, "available": 2})),
                ev("pool_upserted", json!({"pool": a, "delta": 3, "total": 3, "available": 3})),
            ])),
        case("events: confirm:true gives held then confirmed")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"confirm": true, "user": "u1"})), 201, status("confirmed"))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h", "user": "u1", "items": [{"pool": a, "qty": 2}]})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("events: refused, replayed and repeated requests append nothing")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 409, err("insufficient_stock"))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 200, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({"user": "x"})), 409, err("hold_id_conflict"))
            .confirm("{p}-h1", 200, json!({}))
            .confirm("{p}-h1", 200, json!({}))
            .put_pool("{p}-a?if_absent=true", json!({"total": 50}), 200, json!({"total": 1}))
            .restock(a, -2, 409, err("insufficient_stock"))
            .put_pool(a, json!({"total": 0}), 409, err("total_below_committed"))
            .refund("{p}-h1", 200, json!({}))
            .refund("{p}-h1", 200, json!({}))
            .release("{p}-h1", 409, err("hold_refunded"))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h1"})),
                ev("confirmed", json!({"hold_id": "{p}-h1"})),
                ev("refunded", json!({"hold_id": "{p}-h1"})),
            ])),
        case("events: a multi-pool hold is one held event with every item")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .put_pool(b, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 2)], none.clone()), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h", "items": items(json!([{"pool": a, "qty": 1}, {"pool": b, "qty": 2}]))})),
            ])),
        case("events: expiry appends expired")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 1000})), 201, json!({}))
            .poll_pool(a, 1000, counts(5, 5, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("expired", json!({"hold_id": "{p}-h"})),
            ])),
        case("low_stock: fires once each time available crosses from above the threshold to at or below")
            .put_pool(a, json!({"total": 10, "low_stock_threshold": 3}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 6)], none.clone()), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, json!({}))
            .reserve(hold_req("{p}-h3", &[(a, 1)], none.clone()), 201, json!({}))
            .release("{p}-h3", 200, json!({}))
            .release("{p}-h2", 200, json!({}))
            .release("{p}-h1", 200, json!({}))
            .reserve(hold_req("{p}-h4", &[(a, 8)], none.clone()), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h2"})),
                ev("low_stock", json!({"pool": a, "available": 3})),
                ev("held", json!({"hold_id": "{p}-h3"})),
                ev("released", json!({"hold_id": "{p}-h3"})),
                ev("released", json!({"hold_id": "{p}-h2"})),
                ev("released", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h4"})),
                ev("low_stock", json!({"pool": a, "available": 2})),
            ])),
        case("low_stock: fires when a pool is created or updated at or below the threshold")
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 2}), 201, json!({}))
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 2}), 200, json!({}))
            .put_pool(a, json!({"total": 5, "low_stock_threshold": 2}), 200, json!({}))
            .put_pool(a, json!({"total": 5, "low_stock_threshold": 5}), 200, json!({}))
            .put_pool("{p}-a?if_absent=true", json!({"total": 1, "low_stock_threshold": 9}), 200, json!({}))
            .put_pool(a, json!({"total": 5}), 200, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("low_stock", json!({"pool": a, "available": 2})),
                ev("pool_upserted", json!({"pool": a})),
                ev("low_stock", json!({"pool": a, "available": 2})),
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": a})),
                ev("low_stock", json!({"pool": a, "available": 5})),
                ev("pool_upserted", json!({"pool": a})),
            ])),
        case("low_stock: threshold 0 fires when the pool sells out, and on an empty pool's creation")
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], none.clone()), 201, json!({}))
            .put_pool(b, json!({"total": 0, "low_stock_threshold": 0}), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h1"})),
                ev("held", json!({"hold_id": "{p}-h2"})),
                ev("low_stock", json!({"pool": a, "available": 0})),
                ev("pool_upserted", json!({"pool": b})),
                ev("low_stock", json!({"pool": b, "available": 0})),
            ])),
        case("low_stock: a negative restock across the threshold fires")
            .put_pool(a, json!({"total": 10, "low_stock_threshold": 3}), 201, json!({}))
            .restock(a, -7, 200, counts(3, 3, 0, 0))
            .restock(a, 1, 200, counts(4, 4, 0, 0))
            .restock(a, -4, 200, counts(0, 0, 0, 0))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("restocked", json!({"pool": a, "total": 3, "available": 3})),
                ev("low_stock", json!({"pool": a, "available": 3})),
                ev("restocked", json!({"pool": a, "total": 4, "available": 4})),
                ev("restocked", json!({"pool": a, "total": 0, "available": 0})),
                ev("low_stock", json!({"pool": a, "available": 0})),
            ])),
        case("low_stock: never fires without a threshold")
            .put_pool(a, json!({"total": 2}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], none.clone()), 201, json!({}))
            .put_pool(b, json!({"total": 0}), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("pool_upserted", json!({"pool": b})),
            ])),
        case("low_stock: a multi-pool hold fires only for the pool that crosses")
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 1}), 201, json!({}))
            .put_pool(b, json!({"total": 5, "low_stock_threshold": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1), (b, 1)], none.clone()), 201, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("low_stock", json!({"pool": a, "available": 1})),
            ])),
        case("low_stock: confirm leaves available alone and does not fire")
            .put_pool(a, json!({"total": 2, "low_stock_threshold": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], none.clone()), 201, json!({}))
            .confirm("{p}-h", 200, json!({}))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("held", json!({"hold_id": "{p}-h"})),
                ev("low_stock", json!({"pool": a, "available": 1})),
                ev("confirmed", json!({"hold_id": "{p}-h"})),
            ])),
        case("low_stock: a failed reserve does not fire")
            .put_pool(a, json!({"total": 5, "low_stock_threshold": 1}), 201, json!({}))
            .put_pool(b, json!({"total": 0}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 5), (b, 1)], none.clone()), 409, err("insufficient_stock"))
            .events(json!([
                ev("pool_upserted", json!({"pool": a})),
                ev("pool_upserted", json!({"pool": b})),
            ])),
    ]
}

// =============================================================================================
// Locks
// =============================================================================================

/// A token no server hands out in these tests.
const WRONG_TOKEN: u64 = 987_654_321_987;

fn lock_cases() -> Vec<Case> {
    let l = "{p}-lock";
    vec![
        case("lock: acquire is 200 with a token; others and the owner itself get lock_held")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 10_000}), 200, json!({"token": "$save:t1", "expires_at_ms": "$now+10000"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000}), 409, json!({"error": "lock_held", "expires_at_ms": "$int"}))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 409, json!({"error": "lock_held", "expires_at_ms": "$int"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 20_000}), 200, json!({"token": "$same:t1", "expires_at_ms": "$now+20000"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 30_000}), 200, json!({"token": "$same:t1", "expires_at_ms": "$save:e1"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000}), 409, json!({"error": "lock_held", "expires_at_ms": "$same:e1"}))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000}), 200, json!({"token": "$gt:t1", "expires_at_ms": "$now+1000"})),
        case("lock: a wrong owner or token is not_lock_owner and changes nothing")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 10_000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "renew", json!({"owner": "o2", "token": "{$t1}", "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "renew", json!({"owner": "o1", "token": WRONG_TOKEN, "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o2", "token": "{$t1}"}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o1", "token": WRONG_TOKEN}), 409, err("not_lock_owner"))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000}), 409, err("lock_held"))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000}), 200, json!({"token": "$same:t1"}))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true})),
        case("lock: renew or release of a never-acquired lock is not_lock_owner")
            .lock(l, "renew", json!({"owner": "o1", "token": WRONG_TOKEN, "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o1", "token": WRONG_TOKEN}), 409, err("not_lock_owner")),
        case("lock: an expired lease is free for others; its old owner gets not_lock_owner")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 100}), 200, json!({"token": "$save:t1", "expires_at_ms": "$save:e1"}))
            .wait_past("e1")
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 10_000}), 200, json!({"token": "$gt:t1"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 409, err("not_lock_owner"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 409, err("lock_held")),
        case("lock: an expired lease cannot be renewed or released by its owner, even if nobody took it")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 100}), 200, json!({"token": "$save:t1", "expires_at_ms": "$save:e1"}))
            .wait_past("e1")
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000}), 409, err("not_lock_owner"))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 409, err("not_lock_owner"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 200, json!({"token": "$gt:t1"})),
        case("lock: fencing tokens strictly increase per name over acquisitions")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true}))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$gt:t1"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 5000}), 409, err("lock_held"))
            .lock("{p}-other", "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$int"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 5000}), 409, err("not_lock_owner")),
        case("lock: tokens of successive holders increase")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 5000}), 200, json!({"token": "$gt:t1"}))
            .lock(l, "renew", json!({"owner": "o2", "token": "{$t1}", "ttl_ms": 5000}), 409, err("not_lock_owner")),
        case("lock: acquire with wait_ms gets the lock once the lease runs out")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 300}), 200, json!({"token": "$save:t1"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000, "wait_ms": 5000}), 200, json!({"token": "$gt:t1"})),
        case("lock: acquire with wait_ms gives up with lock_held when the lease outlives it")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 60_000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 1000, "wait_ms": 200}), 409, json!({"error": "lock_held", "expires_at_ms": "$int"})),
        case("lock: different names are independent")
            .lock("{p}-l1", "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$int"}))
            .lock("{p}-l2", "acquire", json!({"owner": "o2", "ttl_ms": 5000}), 200, json!({"token": "$int"}))
            .lock("{p}-l2", "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 409, err("lock_held")),
        case("lock: ttl_ms edges: 100 and 3_600_000 accepted")
            .lock("{p}-l1", "acquire", json!({"owner": "o1", "ttl_ms": 100}), 200, json!({"expires_at_ms": "$now+100"}))
            .lock("{p}-l2", "acquire", json!({"owner": "o1", "ttl_ms": 3_600_000}), 200, json!({"token": "$save:t2", "expires_at_ms": "$now+3600000"}))
            .lock("{p}-l2", "renew", json!({"owner": "o1", "token": "{$t2}", "ttl_ms": 100}), 200, json!({"expires_at_ms": "$now+100"}))
            .lock("{p}-l2", "renew", json!({"owner": "o1", "token": "{$t2}", "ttl_ms": 3_600_000}), 200, json!({"expires_at_ms": "$now+3600000"})),
        case("lock: ttl_ms edges: 99 and 3_600_001 refused on acquire and renew")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 99}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 3_600_001}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 5000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 99}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 3_600_001}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o2", "ttl_ms": 100}), 409, err("lock_held")),
        case("lock: wait_ms edges: 30_000 accepted, 30_001 refused")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000, "wait_ms": 30_001}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000, "wait_ms": 30_000}), 200, json!({"token": "$int"})),
        case("lock: null wait_ms is the same as absent")
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000, "wait_ms": null}), 200, json!({"token": "$int"})),
        case("lock: required fields, unknown fields and wrong types are 422")
            .lock(l, "acquire", json!({"ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1"}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000, "ttl": 5}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": "1000"}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000.5}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": -1000}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": 7, "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 200, json!({"token": "$save:t1"}))
            .lock(l, "renew", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}"}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": "x", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": 1.5, "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock(l, "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000, "x": 1}), 422, err("invalid_request"))
            .lock(l, "release", json!({"owner": "o1"}), 422, err("invalid_request"))
            .lock(l, "release", json!({"token": "{$t1}"}), 422, err("invalid_request"))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}", "x": 1}), 422, err("invalid_request"))
            .lock(l, "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({"released": true})),
        case("lock: lock name and owner identifiers at their edges")
            .lock("K", "acquire", json!({"owner": "O", "ttl_ms": 1000}), 200, json!({"token": "$int"}))
            .lock(&id_of_len(128), "acquire", json!({"owner": id_of_len(128), "ttl_ms": 1000}), 200, json!({"token": "$int"}))
            .lock(&id_of_len(129), "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}-l", "acquire", json!({"owner": id_of_len(129), "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}-l", "acquire", json!({"owner": "", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}-l", "acquire", json!({"owner": "-o", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}-l", "acquire", json!({"owner": "o o", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("-{p}", "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}*l", "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request"))
            .lock("{p}%20l", "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 422, err("invalid_request")),
        case("lock: locks append no events")
            .put_pool("{p}-a", json!({"total": 1}), 201, json!({}))
            .lock("{p}-l", "acquire", json!({"owner": "o1", "ttl_ms": 1000}), 200, json!({"token": "$save:t1"}))
            .lock("{p}-l", "renew", json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 1000}), 200, json!({}))
            .lock("{p}-l", "release", json!({"owner": "o1", "token": "{$t1}"}), 200, json!({}))
            .events(json!([ev("pool_upserted", json!({"pool": "{p}-a"}))])),
    ]
}

// =============================================================================================
// Errors and limits: validation at every edge
// =============================================================================================

/// Identifiers that must be refused, written with `{p}` so each stays unique per case.
fn bad_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "",
        "-{p}",
        ".{p}",
        ":{p}",
        "_{p}",
        "{p} x",
        "{p}/x",
        "{p}*x",
        "{p}@x",
        "{p}é",
        "{p}+x",
        "{p}!x",
        "{p}\u{0}x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    ids.push(id_of_len(129));
    ids
}

/// Identifiers in a path that must be refused (percent-encoded where needed).
fn bad_path_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "-{p}",
        ".{p}",
        ":{p}",
        "_{p}",
        "{p}%20x",
        "{p}*x",
        "{p}@x",
        "{p}%C3%A9",
        "{p}+x",
        "{p}!x",
        "{p}~x",
        "{p}%00x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    ids.push(id_of_len(129));
    ids
}

fn as_refs(list: &[(String, u64)]) -> Vec<(&str, u64)> {
    list.iter()
        .map(|(pool, qty)| (pool.as_str(), *qty))
        .collect()
}

fn padded_body(json_text: &str, len: usize) -> Vec<u8> {
    assert!(json_text.len() <= len);
    let mut body = json_text.as_bytes().to_vec();
    body.resize(len, b' ');
    body
}

fn error_cases() -> Vec<Case> {
    let a = "{p}-a";
    let none = json!({});
    let invalid = || err("invalid_request");
    let mut cases = Vec::new();

    // ---- identifiers ----
    let mut pool_ids = case(
        "identifiers: pool in the path: 1 and 128 bytes accepted, bad ones refused before lookup",
    )
    .put_pool("P", json!({"total": 1}), 201, json!({"pool": "P"}))
    .put_pool(
        &id_of_len(128),
        json!({"total": 1}),
        201,
        json!({"pool": id_of_len(128)}),
    )
    .get_pool(&id_of_len(128), json!({"pool": id_of_len(128)}));
    for bad in bad_path_ids() {
        pool_ids = pool_ids
            .put_pool(&bad, json!({"total": 1}), 422, invalid())
            .get(&format!("/v1/pools/{bad}"), 422, invalid())
            .delete_pool(&bad, 422, invalid())
            .restock(&bad, 1, 422, invalid());
    }
    cases.push(pool_ids.get(
        "/v1/pools?prefix={p}",
        200,
        json!({"pools": [{"pool": id_of_len(128)}]}),
    ));

    let mut hold_ids =
        case("identifiers: hold_id: 1 and 128 bytes accepted, 0, 129 and bad characters refused")
            .put_pool(a, json!({"total": 10}), 201, json!({}))
            .reserve(
                hold_req("H", &[(a, 1)], none.clone()),
                201,
                json!({"hold_id": "H"}),
            )
            .reserve(
                hold_req(&id_of_len(128), &[(a, 1)], none.clone()),
                201,
                json!({"hold_id": id_of_len(128)}),
            )
            .get_hold(&id_of_len(128), 200, status("held"));
    for bad in bad_ids() {
        hold_ids = hold_ids.reserve(hold_req(&bad, &[(a, 1)], none.clone()), 422, invalid());
    }
    for bad in [json!(5), json!(null), json!(true), json!(["x"])] {
        hold_ids = hold_ids.reserve(
            json!({"hold_id": bad, "items": [{"pool": a, "qty": 1}]}),
            422,
            invalid(),
        );
    }
    cases.push(
        hold_ids
            .reserve(json!({"items": [{"pool": a, "qty": 1}]}), 422, invalid())
            .get_pool(a, counts(10, 8, 2, 0)),
    );

    let mut hold_paths = case("identifiers: hold_id in the path is validated before lookup");
    for bad in bad_path_ids() {
        hold_paths = hold_paths
            .get_hold(&bad, 422, invalid())
            .confirm(&bad, 422, invalid())
            .release(&bad, 422, invalid())
            .refund(&bad, 422, invalid())
            .extend(&bad, 5000, 422, invalid());
    }
    cases.push(
        hold_paths
            .get_hold(&id_of_len(128), 404, err("hold_not_found"))
            .get_hold("h", 404, err("hold_not_found")),
    );

    let mut users =
        case("identifiers: user: 1 and 128 bytes accepted, 0, 129 and bad characters refused")
            .put_pool(a, json!({"total": 10, "per_user_limit": 5}), 201, json!({}))
            .reserve(
                hold_req("{p}-h1", &[(a, 1)], json!({"user": "U"})),
                201,
                json!({"user": "U"}),
            )
            .reserve(
                hold_req("{p}-h2", &[(a, 1)], json!({"user": id_of_len(128)})),
                201,
                json!({"user": id_of_len(128)}),
            );
    for bad in bad_ids() {
        users = users.reserve(
            hold_req("{p}-h3", &[(a, 1)], json!({"user": bad})),
            422,
            invalid(),
        );
    }
    cases.push(
        users
            .reserve(
                hold_req("{p}-h3", &[(a, 1)], json!({"user": 42})),
                422,
                invalid(),
            )
            .get_pool(a, counts(10, 8, 2, 0)),
    );

    let mut item_pools =
        case("identifiers: item pool: 1 and 128 bytes accepted, 0, 129 and bad characters refused")
            .reserve(
                hold_req("{p}-h", &[("Q", 1)], none.clone()),
                404,
                json!({"error": "pool_not_found", "pool": "Q"}),
            )
            .put_pool(&id_of_len(128), json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(&id_of_len(128), 1)], none.clone()),
                201,
                json!({"items": [{"pool": id_of_len(128), "qty": 1}]}),
            );
    for bad in bad_ids() {
        item_pools = item_pools.reserve(
            hold_req("{p}-h2", &[(&bad, 1)], none.clone()),
            422,
            invalid(),
        );
    }
    cases.push(item_pools.reserve(
        json!({"hold_id": "{p}-h2", "items": [{"pool": 7, "qty": 1}]}),
        422,
        invalid(),
    ));

    // ---- quantities ----
    let mut qty = case("qty: 1 and 1_000_000_000 accepted; 0, 1_000_000_001, negative, float, string, null refused")
        .put_pool(a, json!({"total": 3_000_000_000u64}), 201, json!({}))
        .reserve(hold_req("{p}-h1", &[(a, 1)], none.clone()), 201, json!({"items": [{"pool": a, "qty": 1}]}))
        .reserve(hold_req("{p}-h2", &[(a, 1_000_000_000)], none.clone()), 201, json!({"items": [{"pool": a, "qty": 1_000_000_000}]}));
    for bad in [
        json!(0),
        json!(1_000_000_001u64),
        json!(-1),
        json!(1.5),
        json!(1.0),
        json!("1"),
        json!(null),
        json!(true),
        json!([1]),
        json!(1e3),
    ] {
        qty = qty.reserve(
            json!({"hold_id": "{p}-h3", "items": [{"pool": a, "qty": bad}]}),
            422,
            invalid(),
        );
    }
    cases.push(
        qty.reserve(
            json!({"hold_id": "{p}-h3", "items": [{"pool": a}]}),
            422,
            invalid(),
        )
        .raw(
            "POST",
            "/v1/holds",
            r#"{"hold_id": "{p}-h3", "items": [{"pool": "{p}-a", "qty": 18446744073709551617}]}"#,
            422,
            invalid(),
        )
        .get_pool(a, counts(3_000_000_000, 1_999_999_999, 1_000_000_001, 0)),
    );

    let mut total = case(
        "total: 1_000_000_000_001, negative, float, string, null, missing refused; nothing created",
    )
    .put_pool(a, json!({}), 422, invalid());
    for bad in [
        json!(1_000_000_000_001u64),
        json!(-1),
        json!(2.5),
        json!(10.0),
        json!("10"),
        json!(null),
        json!(true),
        json!({}),
    ] {
        total = total.put_pool(a, json!({"total": bad}), 422, invalid());
    }
    cases.push(
        total
            .raw(
                "PUT",
                "/v1/pools/{p}-a",
                r#"{"total": 18446744073709551616}"#,
                422,
                invalid(),
            )
            .raw(
                "PUT",
                "/v1/pools/{p}-a",
                r#"{"total": 1e3}"#,
                422,
                invalid(),
            )
            .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
    );

    cases.push(
        case("pool body: JSON that is not an object is 422")
            .put_pool(a, json!([]), 422, invalid())
            .put_pool(a, json!(42), 422, invalid())
            .put_pool(a, json!("total"), 422, invalid())
            .put_pool(a, json!(null), 422, invalid())
            .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
    );

    let mut rules = case("pool rules: per_user_limit 1 and 1e9 accepted, 0 and 1e9+1 refused; low_stock_threshold >= 0")
        .put_pool(a, json!({"total": 5, "per_user_limit": 1}), 201, json!({"per_user_limit": 1}))
        .put_pool(a, json!({"total": 5, "per_user_limit": 1_000_000_000}), 200, json!({"per_user_limit": 1_000_000_000}))
        .put_pool(a, json!({"total": 5, "low_stock_threshold": 0}), 200, json!({"low_stock_threshold": 0, "per_user_limit": null}));
    for bad in [
        json!(0),
        json!(1_000_000_001u64),
        json!(-1),
        json!(1.5),
        json!("2"),
        json!(true),
    ] {
        rules = rules.put_pool(
            a,
            json!({"total": 6, "per_user_limit": bad}),
            422,
            invalid(),
        );
    }
    for bad in [json!(-1), json!(1.5), json!("1"), json!(false)] {
        rules = rules.put_pool(
            a,
            json!({"total": 6, "low_stock_threshold": bad}),
            422,
            invalid(),
        );
    }
    for field in ["starts_at_ms", "ends_at_ms"] {
        for bad in [json!("soon"), json!(1.5), json!(true), json!([1])] {
            rules = rules.put_pool(a, json!({"total": 6, field: bad}), 422, invalid());
        }
    }
    cases.push(
        rules
            .put_pool(a, json!({"total": 6, "totl": 6}), 422, invalid())
            .put_pool(a, json!({"total": 6, "per_user_limt": 6}), 422, invalid())
            .get_pool(
                a,
                json!({"total": 5, "low_stock_threshold": 0, "per_user_limit": null}),
            ),
    );

    cases.push(
        case("restock: delta 0, missing, float, string, null and unknown fields are 422")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": 0})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": 1.5})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": "1"})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": null})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"delta": 1, "x": 1})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-a/restock",
                Some(json!({"total": 1})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/pools/{p}-nope/restock",
                Some(json!({"delta": 0})),
                422,
                invalid(),
            )
            .get_pool(a, counts(5, 5, 0, 0)),
    );

    // ---- items ----
    let pools64: Vec<(String, u64)> = (0..65).map(|i| (format!("{{p}}-{i:02}"), 1)).collect();
    let mut items_case =
        case("items: 1 and 64 accepted; 0, 65, a repeated pool and wrong shapes refused");
    for (pool, _) in &pools64 {
        items_case = items_case.put_pool(pool, json!({"total": 2}), 201, json!({}));
    }
    items_case = items_case
        .reserve(
            hold_req("{p}-h65", &as_refs(&pools64), none.clone()),
            422,
            invalid(),
        )
        .reserve(
            hold_req("{p}-h64", &as_refs(&pools64[..64]), none.clone()),
            201,
            json!({"items": {"$len": 64}}),
        )
        .reserve(
            hold_req("{p}-h1", &as_refs(&pools64[..1]), none.clone()),
            201,
            json!({"items": {"$len": 1}}),
        )
        .reserve(hold_req("{p}-h0", &[], none.clone()), 422, invalid())
        .reserve(
            hold_req("{p}-hd", &[("{p}-64", 1), ("{p}-64", 1)], none.clone()),
            422,
            invalid(),
        )
        .reserve(
            hold_req(
                "{p}-hd",
                &[("{p}-64", 1), ("{p}-63", 1), ("{p}-64", 1)],
                none.clone(),
            ),
            422,
            invalid(),
        )
        .reserve(json!({"hold_id": "{p}-hx"}), 422, invalid())
        .reserve(json!({"hold_id": "{p}-hx", "items": null}), 422, invalid())
        .reserve(
            json!({"hold_id": "{p}-hx", "items": {"pool": "{p}-64", "qty": 1}}),
            422,
            invalid(),
        )
        .reserve(json!({"hold_id": "{p}-hx", "items": [1]}), 422, invalid())
        .reserve(
            json!({"hold_id": "{p}-hx", "items": [{"qty": 1}]}),
            422,
            invalid(),
        )
        .reserve(
            json!({"hold_id": "{p}-hx", "items": [{"pool": "{p}-64", "qty": 1, "x": 1}]}),
            422,
            invalid(),
        )
        .get_pool("{p}-00", counts(2, 0, 2, 0))
        .get_pool("{p}-63", counts(2, 1, 1, 0))
        .get_pool("{p}-64", counts(2, 2, 0, 0));
    cases.push(items_case);

    // ---- times ----
    let mut ttl = case("ttl_ms on reserve: 999 and 86_400_001 refused, and wrong types");
    for bad in [
        json!(999),
        json!(86_400_001),
        json!(0),
        json!(-1),
        json!(1000.5),
        json!("1000"),
        json!(true),
    ] {
        ttl = ttl.reserve(
            hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": bad})),
            422,
            invalid(),
        );
    }
    cases.push(
        ttl.put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"ttl": 1000})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 999})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"ttl_ms": 1000})),
                201,
                json!({"expires_at_ms": "$now+1000"}),
            ),
    );

    let mut extend =
        case("ttl_ms on extend: 1000 and 86_400_000 accepted, 999 and 86_400_001 refused")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], none.clone()),
                201,
                json!({"expires_at_ms": "$save:first"}),
            );
    for bad in [
        json!(999),
        json!(86_400_001),
        json!(0),
        json!(-5),
        json!(1000.5),
        json!("1000"),
        json!(null),
    ] {
        extend = extend.req(
            "POST",
            "/v1/holds/{p}-h/extend",
            Some(json!({"ttl_ms": bad})),
            422,
            invalid(),
        );
    }
    cases.push(
        extend
            .req(
                "POST",
                "/v1/holds/{p}-h/extend",
                Some(json!({})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/holds/{p}-h/extend",
                Some(json!({"ttl": 5000})),
                422,
                invalid(),
            )
            .req(
                "POST",
                "/v1/holds/{p}-h/extend",
                Some(json!({"ttl_ms": 5000, "x": 1})),
                422,
                invalid(),
            )
            .get_hold("{p}-h", 200, json!({"expires_at_ms": "$same:first"}))
            .extend("{p}-h", 1000, 200, json!({"expires_at_ms": "$now+1000"}))
            .extend(
                "{p}-h",
                86_400_000,
                200,
                json!({"expires_at_ms": "$now+86400000"}),
            ),
    );

    let mut wait = case("wait_ms on reserve: 30_000 accepted, 30_001 and wrong types refused")
        .put_pool(a, json!({"total": 1}), 201, json!({}));
    for bad in [
        json!(30_001),
        json!(-1),
        json!(1.5),
        json!("0"),
        json!(true),
    ] {
        wait = wait.reserve(
            hold_req("{p}-h", &[(a, 1)], json!({"wait_ms": bad})),
            422,
            invalid(),
        );
    }
    cases.push(wait.reserve(
        hold_req("{p}-h", &[(a, 1)], json!({"wait_ms": 30_000})),
        201,
        status("held"),
    ));

    cases.push(
        case("confirm flag: only booleans")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"confirm": "true"})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"confirm": 1})),
                422,
                invalid(),
            )
            .get_pool(a, counts(1, 1, 0, 0)),
    );

    cases.push(
        case("unknown fields are refused: a typo such as ttl for ttl_ms is caught")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"ttl": 1000})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"usr": "u1"})),
                422,
                invalid(),
            )
            .reserve(
                hold_req("{p}-h", &[(a, 1)], json!({"confirmed": true})),
                422,
                invalid(),
            )
            .get_pool(a, counts(1, 1, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found")),
    );

    cases.push(
        case("hold body: JSON that is not an object is 422")
            .reserve(json!([]), 422, invalid())
            .reserve(json!(1), 422, invalid())
            .reserve(json!(null), 422, invalid())
            .reserve(json!("hold"), 422, invalid()),
    );

    cases.push(
        case("batch body: wrong shapes are 422 and apply nothing")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .req("POST", "/v1/batch", Some(json!({})), 422, invalid())
            .req("POST", "/v1/batch", Some(json!({"ops": {}})), 422, invalid())
            .req("POST", "/v1/batch", Some(json!({"ops": null})), 422, invalid())
            .req("POST", "/v1/batch", Some(json!([{"op": "confirm", "hold_id": "{p}-h"}])), 422, invalid())
            .req(
                "POST",
                "/v1/batch",
                Some(json!({"ops": [{"op": "reserve", "hold_id": "{p}-h", "items": [{"pool": a, "qty": 1}]}], "x": 1})),
                422,
                invalid(),
            )
            .get_pool(a, counts(1, 1, 0, 0)),
    );

    // ---- query parameters ----
    cases.push(
        case("events query: limit 1000 and wait_ms 30000 accepted; limit 1001, wait_ms 30001 and bad values refused")
            .put_pool(a, json!({"total": 1}), 201, json!({"partition": "$partition:pa"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1000", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1&wait_ms=30000", 200, json!({"events": {"$len": 1}, "next_after": "$int"}))
            .get("/v1/events?partition={$pa}&after=0&limit=1001", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&wait_ms=30001", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&limit=abc", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&limit=-1", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&limit=1.5", 422, invalid())
            .get("/v1/events?partition={$pa}&after=-1", 422, invalid())
            .get("/v1/events?partition={$pa}&after=x", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&wait_ms=1.5", 422, invalid())
            .get("/v1/events?partition={$pa}&after=0&wait_ms=-1", 422, invalid())
            .get("/v1/events?after=0&partition=0", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?after=0&partition={P-1}", 200, json!({"events": "$any", "next_after": "$int"}))
            .get("/v1/events?after=0&partition={P}", 422, invalid())
            .get("/v1/events?after=0&partition=x", 422, invalid()),
    );
    cases.push(
        case("events query: with one partition, the same bounds hold without partition")
            .only(When::OnePartition)
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .get(
                "/v1/events?after=0&limit=1000",
                200,
                json!({"events": "$any", "next_after": "$int"}),
            )
            .get(
                "/v1/events?after=0&limit=1&wait_ms=30000",
                200,
                json!({"events": {"$len": 1}, "next_after": "$int"}),
            )
            .get("/v1/events?after=0&limit=1001", 422, invalid())
            .get("/v1/events?after=0&wait_ms=30001", 422, invalid())
            .get("/v1/events?after=0&limit=abc", 422, invalid())
            .get("/v1/events?after=0&limit=-1", 422, invalid())
            .get("/v1/events?after=0&limit=1.5", 422, invalid())
            .get("/v1/events?after=-1", 422, invalid())
            .get("/v1/events?after=x", 422, invalid())
            .get("/v1/events?after=0&wait_ms=1.5", 422, invalid())
            .get("/v1/events?after=0&wait_ms=-1", 422, invalid()),
    );
    cases.push(
        case("pools list query: limit 1000 accepted; 1001 and bad values refused")
            .get(
                "/v1/pools?prefix={p}&limit=1000",
                200,
                json!({"pools": [], "next": null}),
            )
            .get("/v1/pools?limit=1001", 422, invalid())
            .get("/v1/pools?limit=x", 422, invalid())
            .get("/v1/pools?limit=-1", 422, invalid())
            .put_pool("{p}-a?if_absent=maybe", json!({"total": 1}), 422, invalid())
            .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
    );

    // ---- malformed JSON ----
    let malformed: Vec<&[u8]> = vec![
        b"{\"total\": ",
        b"not json",
        b"{\"total\": 1,}",
        b"{\"total\": 1} x",
        b"{'total': 1}",
        b"\xff\xfe{}",
        b"{\"total\": 1",
        b"[",
    ];
    let routes: [(&'static str, &str); 8] = [
        ("PUT", "/v1/pools/{p}-a"),
        ("POST", "/v1/pools/{p}-a/restock"),
        ("POST", "/v1/holds"),
        ("POST", "/v1/holds/{p}-h/extend"),
        ("POST", "/v1/batch"),
        ("POST", "/v1/locks/{p}-l/acquire"),
        ("POST", "/v1/locks/{p}-l/renew"),
        ("POST", "/v1/locks/{p}-l/release"),
    ];
    // One case per route and body, so every wrong answer is reported, not only the first.
    for (method, path) in routes {
        for body in &malformed {
            let shown = String::from_utf8_lossy(body).escape_debug().to_string();
            cases.push(
                case(&format!(
                    "malformed JSON on {method} {path} is 400 invalid_json: {shown}"
                ))
                .raw(method, path, body.to_vec(), 400, err("invalid_json"))
                .get("/v1/pools/{p}-a", 404, err("pool_not_found")),
            );
        }
    }

    // ---- body size ----
    cases.push(
        case("body size: exactly 1 MiB is accepted, 1 MiB + 1 byte is 413 payload_too_large")
            .raw(
                "PUT",
                "/v1/pools/{p}-a",
                padded_body(r#"{"total": 1}"#, BODY_LIMIT_BYTES + 1),
                413,
                err("payload_too_large"),
            )
            .get("/v1/pools/{p}-a", 404, err("pool_not_found"))
            .raw(
                "PUT",
                "/v1/pools/{p}-a",
                padded_body(r#"{"total": 1}"#, BODY_LIMIT_BYTES),
                201,
                counts(1, 1, 0, 0),
            )
            .raw(
                "POST",
                "/v1/holds",
                padded_body(
                    r#"{"hold_id": "{p}-h", "items": [{"pool": "{p}-a", "qty": 1}]}"#,
                    BODY_LIMIT_BYTES + 1,
                ),
                413,
                err("payload_too_large"),
            )
            .raw(
                "POST",
                "/v1/batch",
                padded_body(
                    r#"{"ops": [{"op": "confirm", "hold_id": "{p}-h"}]}"#,
                    BODY_LIMIT_BYTES + 1,
                ),
                413,
                err("payload_too_large"),
            )
            .get_pool("{p}-a", counts(1, 1, 0, 0))
            .get_hold("{p}-h", 404, err("hold_not_found")),
    );

    // ---- routing ----
    let mut not_found = case("unknown routes are 404 not_found");
    for (method, path) in [
        ("GET", "/v1/nope"),
        ("GET", "/nope"),
        ("GET", "/v2/pools"),
        ("POST", "/v1/pools/{p}-a/nope"),
        ("GET", "/v1/holds/{p}-h/nope/more"),
        ("POST", "/v1/locks/{p}-l/steal"),
    ] {
        not_found = not_found.req(method, path, None, 404, err("not_found"));
    }
    cases.push(not_found);

    let mut wrong_method = case("known routes with the wrong method are 405 method_not_allowed");
    for (method, path) in [
        ("DELETE", "/v1/holds"),
        ("PUT", "/v1/holds"),
        ("GET", "/v1/holds/{p}-h/confirm"),
        ("GET", "/v1/holds/{p}-h/release"),
        ("PUT", "/v1/holds/{p}-h"),
        ("DELETE", "/v1/holds/{p}-h"),
        ("PATCH", "/v1/pools/{p}-a"),
        ("POST", "/v1/pools/{p}-a"),
        ("GET", "/v1/pools/{p}-a/restock"),
        ("DELETE", "/v1/pools"),
        ("GET", "/v1/batch"),
        ("POST", "/v1/events"),
        ("POST", "/v1/events/partitions"),
        ("DELETE", "/v1/events/partitions"),
        ("GET", "/v1/locks/{p}-l/acquire"),
        ("POST", "/healthz"),
    ] {
        wrong_method = wrong_method.req(method, path, None, 405, err("method_not_allowed"));
    }
    cases.push(wrong_method.get("/v1/pools/{p}-a", 404, err("pool_not_found")));

    cases
}

// =============================================================================================
// Hold list (GET /v1/holds)
// =============================================================================================

/// A page of the given hold ids (with the case's prefix) in this order, and its `next`.
fn hold_page(ids: &[&str], next: Value) -> Value {
    let holds: Vec<Value> = ids
        .iter()
        .map(|id| json!({"hold_id": format!("{{p}}-{id}")}))
        .collect();
    json!({"holds": holds, "next": next})
}

fn hold_list_cases() -> Vec<Case> {
    let a = "{p}-a";
    let b = "{p}-b";
    let as_user =
        |user: &str, confirm: bool| json!({"user": format!("{{p}}-{user}"), "confirm": confirm});
    vec![
        case("hold list: ordered by hold_id, each filter alone and combined, in every status")
            .put_pool(a, json!({"total": 100}), 201, json!({}))
            .put_pool(b, json!({"total": 100}), 201, json!({}))
            .reserve(hold_req("{p}-h3", &[(a, 1)], as_user("u1", false)), 201, status("held"))
            .reserve(hold_req("{p}-h1", &[(a, 1), (b, 2)], as_user("u2", false)), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[(b, 1)], json!({"confirm": true})), 201, status("confirmed"))
            .reserve(hold_req("{p}-h4", &[(b, 1)], as_user("u1", false)), 201, status("held"))
            .release("{p}-h4", 200, status("released"))
            .reserve(hold_req("{p}-h5", &[(a, 1)], as_user("u2", true)), 201, status("confirmed"))
            .refund("{p}-h5", 200, status("refunded"))
            .get("/v1/holds?pool={p}-a", 200, hold_page(&["h1", "h3", "h5"], json!(null)))
            .get("/v1/holds?pool={p}-b", 200, hold_page(&["h1", "h2", "h4"], json!(null)))
            .get("/v1/holds?user={p}-u1", 200, hold_page(&["h3", "h4"], json!(null)))
            .get("/v1/holds?user={p}-u2&pool={p}-b", 200, hold_page(&["h1"], json!(null)))
            .get("/v1/holds?status=held&pool={p}-a", 200, hold_page(&["h1", "h3"], json!(null)))
            .get("/v1/holds?status=confirmed&pool={p}-b", 200, hold_page(&["h2"], json!(null)))
            .get("/v1/holds?status=released&user={p}-u1", 200, hold_page(&["h4"], json!(null)))
            .get("/v1/holds?status=refunded&user={p}-u2&pool={p}-a", 200, hold_page(&["h5"], json!(null)))
            .get("/v1/holds?status=expired&pool={p}-a", 200, hold_page(&[], json!(null)))
            .get("/v1/holds?user={p}-nobody", 200, hold_page(&[], json!(null)))
            .get("/v1/holds?pool={p}-none", 200, hold_page(&[], json!(null)))
            // Without filters every retained hold is listed; this case's ids follow `{p}`.
            .get("/v1/holds?after={p}&limit=4", 200, hold_page(&["h1", "h2", "h3", "h4"], json!("$any")))
            // Each hold as GET /v1/holds/{id} shows it.
            .get("/v1/holds?pool={p}-a&user={p}-u1", 200, json!({"holds": [{
                "hold_id": "{p}-h3", "status": "held", "user": "{p}-u1", "items": [{"pool": a, "qty": 1}],
                "created_at_ms": "$int", "expires_at_ms": "$int", "finished_at_ms": null,
                "partition": "$partition",
            }], "next": null}))
            .get("/v1/holds?pool={p}-b&status=released", 200, json!({"holds": [{
                "hold_id": "{p}-h4", "status": "released", "user": "{p}-u1", "items": [{"pool": b, "qty": 1}],
                "finished_at_ms": "$int",
            }], "next": null})),
        case("hold list: pages follow next to null, each hold once; limit default 100, 1..=1000")
            .put_pool(a, json!({"total": 200}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h3", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h4", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h5", &[(a, 1)], json!({})), 201, json!({}))
            .get("/v1/holds?pool={p}-a&limit=2", 200, hold_page(&["h1", "h2"], json!("$save:n1")))
            .get("/v1/holds?pool={p}-a&limit=2&after={$n1}", 200, hold_page(&["h3", "h4"], json!("$save:n2")))
            .get("/v1/holds?pool={p}-a&limit=2&after={$n2}", 200, hold_page(&["h5"], json!(null)))
            .get("/v1/holds?pool={p}-a&limit=1&after={p}-h4", 200, hold_page(&["h5"], json!(null)))
            .get("/v1/holds?pool={p}-a&after={p}-h2x", 200, hold_page(&["h3", "h4", "h5"], json!(null)))
            .get("/v1/holds?pool={p}-a&limit=1000", 200, json!({"holds": {"$len": 5}, "next": null}))
            .get("/v1/holds?pool={p}-a", 200, json!({"holds": {"$len": 5}, "next": null})),
        case("hold list: bad query values are 422 invalid_request, unknown parameters refused")
            .get("/v1/holds?limit=0", 422, err("invalid_request"))
            .get("/v1/holds?limit=1001", 422, err("invalid_request"))
            .get("/v1/holds?limit=-1", 422, err("invalid_request"))
            .get("/v1/holds?limit=ten", 422, err("invalid_request"))
            .get("/v1/holds?status=sold", 422, json!({"error": "invalid_request", "message": "status: must be one of held, confirmed, released, expired, refunded, got \"sold\""}))
            .get("/v1/holds?status=", 422, err("invalid_request"))
            .get("/v1/holds?pool=-x", 422, err("invalid_request"))
            .get("/v1/holds?user=a%20b", 422, err("invalid_request"))
            .get("/v1/holds?after=", 422, err("invalid_request"))
            .get("/v1/holds?prefix=a", 422, err("invalid_request"))
            .get("/v1/holds?pool={p}-a&pool={p}-b", 422, err("invalid_request")),
        case("hold list: a hold past its deadline is listed as expired, swept or not, as GET shows it")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 2)], json!({"ttl_ms": 1000})), 201, json!({"expires_at_ms": "$save:expires"}))
            .get("/v1/holds?pool={p}-a&status=held", 200, hold_page(&["h"], json!(null)))
            .wait_past("expires")
            .get("/v1/holds?pool={p}-a&status=held", 200, hold_page(&[], json!(null)))
            .get("/v1/holds?pool={p}-a&status=expired", 200, json!({"holds": [{
                "hold_id": "{p}-h", "status": "expired", "finished_at_ms": "$same:expires",
            }], "next": null}))
            .get_hold("{p}-h", 200, json!({"status": "expired", "finished_at_ms": "$same:expires"}))
            .get("/v1/holds?pool={p}-a", 200, json!({"holds": [{"status": "expired", "finished_at_ms": "$same:expires"}], "next": null})),
        case("hold list: a hold over several pools (and partitions) is listed once")
            .put_pool("{p}-a", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-b", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-c", json!({"total": 5}), 201, json!({}))
            .put_pool("{p}-d", json!({"total": 5}), 201, json!({}))
            .reserve(hold_req("{p}-h1", &[("{p}-a", 1), ("{p}-b", 1), ("{p}-c", 1), ("{p}-d", 1)], as_user("u", false)), 201, status("held"))
            .reserve(hold_req("{p}-h2", &[("{p}-d", 1)], as_user("u", false)), 201, status("held"))
            .reserve(hold_req("{p}-h3", &[("{p}-c", 1), ("{p}-a", 1)], as_user("u", true)), 201, status("confirmed"))
            .get("/v1/holds?user={p}-u", 200, hold_page(&["h1", "h2", "h3"], json!(null)))
            .get("/v1/holds?user={p}-u&limit=1", 200, hold_page(&["h1"], json!("{p}-h1")))
            .get("/v1/holds?user={p}-u&limit=1&after={p}-h1", 200, hold_page(&["h2"], json!("{p}-h2")))
            .get("/v1/holds?user={p}-u&limit=2&after={p}-h1", 200, hold_page(&["h2", "h3"], json!(null)))
            .get("/v1/holds?pool={p}-a", 200, hold_page(&["h1", "h3"], json!(null)))
            .get("/v1/holds?pool={p}-b", 200, hold_page(&["h1"], json!(null)))
            .get("/v1/holds?pool={p}-c&status=confirmed", 200, hold_page(&["h3"], json!(null)))
            .get("/v1/holds?pool={p}-d", 200, hold_page(&["h1", "h2"], json!(null)))
            .get("/v1/holds?after={p}&limit=3", 200, hold_page(&["h1", "h2", "h3"], json!("$any")))
            .release("{p}-h1", 200, status("released"))
            .get("/v1/holds?pool={p}-b", 200, json!({"holds": [{"hold_id": "{p}-h1", "status": "released"}], "next": null}))
            .get("/v1/holds?user={p}-u&status=held", 200, hold_page(&["h2"], json!(null))),
    ]
}

/// Run on a server that keeps finished holds 1.5 s.
fn hold_list_retention_cases() -> Vec<Case> {
    let a = "{p}-a";
    vec![case(
        "hold list: finished holds leave the list once forgotten after retention; held ones stay",
    )
    .put_pool(a, json!({"total": 5}), 201, json!({}))
    .reserve(
        hold_req("{p}-h1", &[(a, 1)], json!({"user": "{p}-u"})),
        201,
        status("held"),
    )
    .reserve(
        hold_req("{p}-h2", &[(a, 1)], json!({"user": "{p}-u"})),
        201,
        status("held"),
    )
    .reserve(
        hold_req("{p}-h3", &[(a, 1)], json!({"user": "{p}-u"})),
        201,
        status("held"),
    )
    .release("{p}-h1", 200, status("released"))
    .confirm("{p}-h3", 200, status("confirmed"))
    .confirm("{p}-h3", 200, status("confirmed"))
    .refund("{p}-h3", 200, status("refunded"))
    .get(
        "/v1/holds?pool={p}-a",
        200,
        hold_page(&["h1", "h2", "h3"], json!(null)),
    )
    .poll(
        "/v1/holds?pool={p}-a",
        5_000,
        hold_page(&["h2"], json!(null)),
    )
    .get("/v1/holds?user={p}-u", 200, hold_page(&["h2"], json!(null)))
    .get(
        "/v1/holds?after={p}&limit=1",
        200,
        json!({"holds": [{"hold_id": "{p}-h2"}], "next": "$any"}),
    )
    .get_hold("{p}-h1", 404, err("hold_not_found"))
    // The id is free again: made anew, it is listed anew.
    .reserve(
        hold_req("{p}-h1", &[(a, 1)], json!({})),
        201,
        status("held"),
    )
    .get(
        "/v1/holds?pool={p}-a",
        200,
        hold_page(&["h1", "h2"], json!(null)),
    )
    .get("/v1/holds?user={p}-u", 200, hold_page(&["h2"], json!(null)))]
}

// =============================================================================================
// Auth and operations (server started with an admin and a client token)
// =============================================================================================

const CLIENT: Auth = Auth::Bearer(CLIENT_TOKEN);
const ADMIN: Auth = Auth::Bearer(ADMIN_TOKEN);

fn auth_cases() -> Vec<Case> {
    let a = "{p}-a";
    let unauthorized = || err("unauthorized");
    let forbidden = || err("forbidden");
    let api_routes: [(&'static str, &str, Option<Value>); 12] = [
        ("GET", "/v1/pools/{p}-a", None),
        ("GET", "/v1/holds?pool={p}-a", None),
        ("GET", "/v1/pools", None),
        ("PUT", "/v1/pools/{p}-a", Some(json!({"total": 1}))),
        ("POST", "/v1/pools/{p}-a/restock", Some(json!({"delta": 1}))),
        ("DELETE", "/v1/pools/{p}-a", None),
        (
            "POST",
            "/v1/holds",
            Some(hold_req("{p}-h", &[(a, 1)], json!({}))),
        ),
        ("GET", "/v1/holds/{p}-h", None),
        (
            "POST",
            "/v1/batch",
            Some(json!({"ops": [{"op": "confirm", "hold_id": "{p}-h"}]})),
        ),
        ("GET", "/v1/events?after=0", None),
        ("GET", "/v1/events/partitions", None),
        (
            "POST",
            "/v1/locks/{p}-l/acquire",
            Some(json!({"owner": "o1", "ttl_ms": 1000})),
        ),
    ];
    let mut no_token =
        case("auth: no token is 401 unauthorized on every API route, and changes nothing")
            .put_pool(a, json!({"total": 5}), 201, json!({}));
    let mut bad_token = case(
        "auth: a bad token or scheme is 401 unauthorized, and changes nothing",
    )
    .put_pool(a, json!({"total": 5}), 201, json!({}));
    for (method, path, body) in &api_routes {
        no_token = no_token.req_as(
            Auth::NoToken,
            method,
            path,
            body.clone(),
            401,
            unauthorized(),
        );
        bad_token = bad_token
            .req_as(
                Auth::Bearer("not-a-token"),
                method,
                path,
                body.clone(),
                401,
                unauthorized(),
            )
            .req_as(
                Auth::Header("Basic YWRtaW46c2VjcmV0"),
                method,
                path,
                body.clone(),
                401,
                unauthorized(),
            )
            .req_as(
                Auth::Header(ADMIN_TOKEN),
                method,
                path,
                body.clone(),
                401,
                unauthorized(),
            );
    }
    no_token = no_token
        .get_pool(a, counts(5, 5, 0, 0))
        .get_hold("{p}-h", 404, err("hold_not_found"))
        .lock(
            "{p}-l",
            "acquire",
            json!({"owner": "o2", "ttl_ms": 1000}),
            200,
            json!({"token": "$int"}),
        );
    bad_token = bad_token
        .get_pool(a, counts(5, 5, 0, 0))
        .get_hold("{p}-h", 404, err("hold_not_found"))
        .lock(
            "{p}-l",
            "acquire",
            json!({"owner": "o2", "ttl_ms": 1000}),
            200,
            json!({"token": "$int"}),
        );

    vec![
        no_token,
        bad_token,
        case("auth: a client token cannot write or delete pools (403 forbidden); nothing changes")
            .put_pool(a, json!({"total": 5}), 201, json!({}))
            .req_as(CLIENT, "PUT", "/v1/pools/{p}-a", Some(json!({"total": 10})), 403, forbidden())
            .req_as(CLIENT, "PUT", "/v1/pools/{p}-b", Some(json!({"total": 10})), 403, forbidden())
            .req_as(CLIENT, "PUT", "/v1/pools/{p}-b?if_absent=true", Some(json!({"total": 10})), 403, forbidden())
            .req_as(CLIENT, "POST", "/v1/pools/{p}-a/restock", Some(json!({"delta": 1})), 403, forbidden())
            .req_as(CLIENT, "POST", "/v1/pools/{p}-a/restock", Some(json!({"delta": -1})), 403, forbidden())
            .req_as(CLIENT, "DELETE", "/v1/pools/{p}-a", None, 403, forbidden())
            .req_as(CLIENT, "GET", "/v1/pools/{p}-a", None, 200, counts(5, 5, 0, 0))
            .get("/v1/pools/{p}-b", 404, err("pool_not_found"))
            .events(json!([ev("pool_upserted", json!({"pool": a}))])),
        case("auth: a client token can reserve, confirm, release, extend, refund and read holds")
            .put_pool(a, json!({"total": 5}), 201, json!({"partition": "$partition:pa"}))
            .req_as(CLIENT, "POST", "/v1/holds", Some(hold_req("{p}-h1", &[(a, 1)], json!({}))), 201, status("held"))
            .req_as(CLIENT, "POST", "/v1/holds/{p}-h1/extend", Some(json!({"ttl_ms": 60_000})), 200, status("held"))
            .req_as(CLIENT, "POST", "/v1/holds/{p}-h1/confirm", None, 200, status("confirmed"))
            .req_as(CLIENT, "POST", "/v1/holds/{p}-h1/refund", None, 200, status("refunded"))
            .req_as(CLIENT, "POST", "/v1/holds", Some(hold_req("{p}-h2", &[(a, 2)], json!({}))), 201, status("held"))
            .req_as(CLIENT, "POST", "/v1/holds/{p}-h2/release", None, 200, status("released"))
            .req_as(CLIENT, "GET", "/v1/holds/{p}-h2", None, 200, status("released"))
            .req_as(CLIENT, "GET", "/v1/holds?pool={p}-a", None, 200, json!({"holds": [status("refunded"), status("released")], "next": null}))
            .req_as(CLIENT, "GET", "/v1/pools/{p}-a", None, 200, counts(5, 5, 0, 0))
            .req_as(CLIENT, "GET", "/v1/pools?prefix={p}", None, 200, json!({"pools": [{"pool": a}], "next": null}))
            .req_as(CLIENT, "POST", "/v1/batch", Some(json!({"ops": [{"op": "reserve", "hold_id": "{p}-h3", "items": [{"pool": a, "qty": 1}]}]})), 200, json!({"results": [{"status": 201, "body": status("held")}]}))
            .req_as(CLIENT, "GET", "/v1/events?partition={$pa}&after=0&limit=1", None, 200, json!({"events": {"$len": 1}, "next_after": "$int"}))
            .req_as(CLIENT, "GET", "/v1/events?partition={P-1}&after=0&limit=1", None, 200, json!({"events": "$any", "next_after": "$int"}))
            .req_as(CLIENT, "GET", "/v1/events/partitions", None, 200, json!({"partitions": "{P}"})),
        case("auth: a client token can use locks")
            .req_as(CLIENT, "POST", "/v1/locks/{p}-l/acquire", Some(json!({"owner": "o1", "ttl_ms": 5000})), 200, json!({"token": "$save:t1"}))
            .req_as(CLIENT, "POST", "/v1/locks/{p}-l/renew", Some(json!({"owner": "o1", "token": "{$t1}", "ttl_ms": 5000})), 200, json!({"token": "$same:t1"}))
            .req_as(CLIENT, "POST", "/v1/locks/{p}-l/release", Some(json!({"owner": "o1", "token": "{$t1}"})), 200, json!({"released": true})),
        case("auth: an admin token can do everything")
            .req_as(ADMIN, "PUT", "/v1/pools/{p}-a", Some(json!({"total": 5})), 201, json!({"total": 5, "available": 5, "held": 0, "sold": 0, "partition": "$partition:pa"}))
            .req_as(ADMIN, "POST", "/v1/pools/{p}-a/restock", Some(json!({"delta": 2})), 200, counts(7, 7, 0, 0))
            .req_as(ADMIN, "POST", "/v1/holds", Some(hold_req("{p}-h", &[(a, 1)], json!({"confirm": true}))), 201, status("confirmed"))
            .req_as(ADMIN, "POST", "/v1/holds/{p}-h/refund", None, 200, status("refunded"))
            .req_as(ADMIN, "GET", "/v1/events?partition={$pa}&after=0&limit=1", None, 200, json!({"events": {"$len": 1}}))
            .req_as(ADMIN, "GET", "/v1/events/partitions", None, 200, json!({"partitions": "{P}"}))
            .req_as(ADMIN, "POST", "/v1/locks/{p}-l/acquire", Some(json!({"owner": "o1", "ttl_ms": 5000})), 200, json!({"token": "$int"}))
            .req_as(ADMIN, "DELETE", "/v1/pools/{p}-a", None, 204, Value::Null)
            .req_as(ADMIN, "GET", "/v1/pools/{p}-a", None, 404, err("pool_not_found")),
        case("operations: healthz, readyz, metrics and openapi.json need no token")
            .req_as(Auth::NoToken, "GET", "/healthz", None, 200, json!("$any"))
            .req_as(Auth::NoToken, "GET", "/readyz", None, 200, json!("$any"))
            .req_as(Auth::NoToken, "GET", "/metrics", None, 200, json!("$any"))
            .req_as(Auth::NoToken, "GET", "/openapi.json", None, 200, json!("$any")),
        case("operations: /metrics is Prometheus text with a latency histogram")
            .put_pool(a, json!({"total": 1}), 201, json!({}))
            .reserve(hold_req("{p}-h", &[(a, 1)], json!({})), 201, json!({}))
            .reserve(hold_req("{p}-h2", &[(a, 1)], json!({})), 409, json!({}))
            .get_pool(a, json!({}))
            .req_as(Auth::NoToken, "GET", "/metrics", None, 200, json!("$contains:_bucket{"))
            .req_as(Auth::NoToken, "GET", "/metrics", None, 200, json!("$contains:# TYPE"))
            .req_as(Auth::NoToken, "GET", "/metrics", None, 200, json!("$contains:le=\"+Inf\"")),
        case("operations: /openapi.json is an OpenAPI 3 document of this API")
            .req_as(Auth::NoToken, "GET", "/openapi.json", None, 200, json!({
                "openapi": "$prefix:3",
                "info": "$any",
                "paths": {"/v1/holds": "$any", "/v1/batch": "$any", "/v1/events": "$any", "/v1/events/partitions": "$any"},
            })),
    ]
}

// =============================================================================================
// Properties that need a server of their own
// =============================================================================================

/// Asserts a 200 whose body contains `expected` (see `match_subset`).
fn expect_subset(status: u16, body: &Value, expected: Value, what: &str) {
    assert_eq!(status, 200, "{what}: {}", short(body));
    let window = TimeWindow {
        before_ms: 0,
        after_ms: u64::MAX / 2,
    };
    if let Err(why) = match_subset(&expected, body, &mut Vars::new(), window) {
        panic!("{what}: {why}");
    }
}

/// Every partition of a fresh server's feed is empty (and has dropped nothing).
async fn expect_empty_feed(api: &Api) {
    for partition in 0..api.partitions().await {
        let path = api.events_path(partition, "after=0").await;
        let (status, body) = api.call("GET", &path, None).await;
        expect_subset(
            status,
            &body,
            json!({"events": [], "next_after": 0}),
            &format!("an empty feed: {path}"),
        );
    }
}

/// On a fresh server, in every partition: seq starts at 1 and strictly increases, `next_after` is
/// the last returned seq or the given `after`, `limit` defaults to 100 and is at most 1000, paging
/// sees every event once, and locks append nothing. Order is compared within a partition only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_feed_on_a_fresh_server() {
    let server = Server::start().await;
    let api = server.api();
    let partitions = api.partitions().await;

    expect_empty_feed(&api).await;

    let (status, pool) = api
        .call("PUT", "/v1/pools/ev-a", Some(json!({"total": 5000})))
        .await;
    assert_eq!(status, 201, "{pool}");
    let home = partition_of(&pool, partitions);
    let window = TimeWindow {
        before_ms: 0,
        after_ms: u64::MAX / 2,
    };
    for partition in 0..partitions {
        let path = api.events_path(partition, "after=0").await;
        let (status, body) = api.call("GET", &path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        let expected = if partition == home {
            json!({"events": [{"seq": 1, "type": "pool_upserted", "pool": "ev-a", "at_ms": "$int"}], "next_after": 1})
        } else {
            json!({"events": [], "next_after": 0})
        };
        match_subset(&expected, &body, &mut Vars::new(), window).unwrap_or_else(|why| {
            panic!("{path}: the first event is in the pool's partition {home}, with seq 1: {why}")
        });
    }

    // 1000 held events in one batch, then 200 more: 1201 events in all.
    const HOLDS: usize = 1200;
    let ops: Vec<Value> = (0..1000)
        .map(|i| json!({"op": "reserve", "hold_id": format!("ev-h{i}"), "items": [{"pool": "ev-a", "qty": 1}]}))
        .collect();
    let (status, body) = api
        .call("POST", "/v1/batch", Some(json!({"ops": ops})))
        .await;
    assert_eq!(status, 200, "batch: {}", short(&body));
    let ops: Vec<Value> = (1000..HOLDS)
        .map(|i| json!({"op": "reserve", "hold_id": format!("ev-h{i}"), "items": [{"pool": "ev-a", "qty": 1}]}))
        .collect();
    let (status, body) = api
        .call("POST", "/v1/batch", Some(json!({"ops": ops})))
        .await;
    assert_eq!(status, 200, "batch: {}", short(&body));

    // Paging each partition with an odd page size sees every event exactly once: per partition
    // seq starts at 1 and strictly increases.
    let mut seen: Vec<Vec<Value>> = Vec::new();
    for partition in 0..partitions {
        let mut events_of_partition = Vec::new();
        let mut after = 0u64;
        loop {
            let path = api
                .events_path(partition, &format!("after={after}&limit=333"))
                .await;
            let (status, page) = api.call("GET", &path, None).await;
            assert_eq!(status, 200, "{path}: {}", short(&page));
            let events = page["events"].as_array().unwrap().clone();
            let next = page["next_after"].as_u64().expect("next_after");
            if events.is_empty() {
                assert_eq!(
                    next, after,
                    "{path}: an empty page gives back the given after"
                );
                break;
            }
            assert!(events.len() <= 333);
            assert_eq!(Some(next), events.last().unwrap()["seq"].as_u64(), "{path}");
            events_of_partition.extend(events);
            after = next;
        }
        let seqs: Vec<u64> = events_of_partition
            .iter()
            .map(|e| e["seq"].as_u64().expect("integer seq"))
            .collect();
        if let Some(first) = seqs.first() {
            assert_eq!(*first, 1, "partition {partition}: seq starts at 1");
        }
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "partition {partition}: seq must strictly increase"
        );
        seen.push(events_of_partition);
    }
    let total: usize = seen.iter().map(Vec::len).sum();
    assert_eq!(total, 1 + HOLDS, "1 pool_upserted + {HOLDS} held events");
    assert_eq!(seen[home as usize][0]["type"], "pool_upserted");
    // One held event per hold; within a partition they follow batch order.
    let mut held = vec![0; HOLDS];
    for (partition, events) in seen.iter().enumerate() {
        let mut last_index = None;
        for event in events {
            if event["type"] == "pool_upserted" && partition == home as usize {
                continue;
            }
            assert_eq!(
                event["type"],
                "held",
                "partition {partition}: {}",
                short(event)
            );
            let index: usize = event["hold_id"]
                .as_str()
                .and_then(|id| id.strip_prefix("ev-h"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("not one of ours: {}", short(event)));
            held[index] += 1;
            assert!(
                last_index < Some(index),
                "partition {partition}: events follow batch order: ev-h{index} after ev-h{}",
                last_index.unwrap()
            );
            last_index = Some(index);
        }
    }
    assert!(held.iter().all(|n| *n == 1), "one held event per hold");
    assert_eq!(api.all_events().await.len(), 1 + HOLDS);
    let mut heads: Vec<u64> = seen
        .iter()
        .map(|events| events.last().map_or(0, |e| e["seq"].as_u64().unwrap()))
        .collect();

    // Default limit 100, max 1000, 1001 refused, read on the busiest partition. Should no
    // partition hold more than 1000 events (holds spread over partitions), restocks of ev-a add
    // pool events to its partition (all of a pool's events are in one) until one does.
    let mut busiest = (0..partitions)
        .max_by_key(|k| seen[*k as usize].len())
        .unwrap();
    if seen[busiest as usize].len() <= 1000 {
        busiest = home;
        let mut count = seen[home as usize].len();
        while count <= 1000 {
            let (status, body) = api
                .call("POST", "/v1/pools/ev-a/restock", Some(json!({"delta": 1})))
                .await;
            assert_eq!(status, 200, "{body}");
            let new = api.events_in(home, heads[home as usize]).await;
            count += new.len();
            if let Some(last) = new.last() {
                heads[home as usize] = last["seq"].as_u64().unwrap();
            }
        }
    }
    let path = api.events_path(busiest, "after=0").await;
    let (status, page) = api.call("GET", &path, None).await;
    assert_eq!(status, 200, "{}", short(&page));
    let events = page["events"].as_array().expect("events array");
    assert_eq!(events.len(), 100, "{path}: limit defaults to 100");
    assert_eq!(
        page["next_after"], events[99]["seq"],
        "next_after is the seq of the last event returned"
    );
    let path = api.events_path(busiest, "after=0&limit=1000").await;
    let (status, page) = api.call("GET", &path, None).await;
    assert_eq!(status, 200, "{}", short(&page));
    assert_eq!(
        page["events"].as_array().unwrap().len(),
        1000,
        "{path}: limit=1000 returns 1000 events"
    );
    let path = api.events_path(busiest, "after=0&limit=1001").await;
    let (status, body) = api.call("GET", &path, None).await;
    assert_eq!(
        (status, body["error"].clone()),
        (422, json!("invalid_request")),
        "{path}"
    );

    // After each partition's head: nothing, next_after = after.
    for partition in 0..partitions {
        let head = heads[partition as usize];
        for after in [head, head + 1000] {
            let path = api.events_path(partition, &format!("after={after}")).await;
            let (status, page) = api.call("GET", &path, None).await;
            expect_subset(
                status,
                &page,
                json!({"events": [], "next_after": after}),
                &path,
            );
        }
    }

    // Locks append no event.
    let (status, lock) = api
        .call(
            "POST",
            "/v1/locks/ev-l/acquire",
            Some(json!({"owner": "o1", "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(status, 200, "{lock}");
    let token = lock["token"].clone();
    let (status, _) = api
        .call(
            "POST",
            "/v1/locks/ev-l/renew",
            Some(json!({"owner": "o1", "token": token, "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = api
        .call(
            "POST",
            "/v1/locks/ev-l/release",
            Some(json!({"owner": "o1", "token": token})),
        )
        .await;
    assert_eq!(status, 200);
    for partition in 0..partitions {
        let head = heads[partition as usize];
        let path = api.events_path(partition, &format!("after={head}")).await;
        let (status, page) = api.call("GET", &path, None).await;
        expect_subset(
            status,
            &page,
            json!({"events": [], "next_after": head}),
            &format!("locks give no events: {path}"),
        );
    }

    // The next change continues the sequence of its hold's partition; the others stay as they were.
    let (status, hold) = api.call("POST", "/v1/holds/ev-h0/confirm", None).await;
    assert_eq!(status, 200, "{hold}");
    let hold_partition = partition_of(&hold, partitions);
    for partition in 0..partitions {
        let head = heads[partition as usize];
        let path = api.events_path(partition, &format!("after={head}")).await;
        let (status, page) = api.call("GET", &path, None).await;
        assert_eq!(status, 200, "{path}: {page}");
        let events = page["events"].as_array().unwrap();
        if partition != hold_partition {
            assert!(events.is_empty(), "{path}: {}", short(&page));
            continue;
        }
        assert_eq!(events.len(), 1, "{path}: {}", short(&page));
        assert!(events[0]["seq"].as_u64().unwrap() > head);
        assert_eq!(events[0]["type"], "confirmed");
        assert_eq!(events[0]["hold_id"], "ev-h0");
    }
}

/// The `"partition"` of a pool or hold object, checked to be in 0..P.
fn partition_of(object: &Value, partitions: u32) -> u32 {
    let partition = object["partition"]
        .as_u64()
        .and_then(|k| u32::try_from(k).ok())
        .unwrap_or_else(|| panic!("no integer partition: {object}"));
    assert!(
        partition < partitions,
        "partition {partition} of {partitions}: {object}"
    );
    partition
}

/// The feed keeps a bounded window (`--event-retention-max`). A consumer whose `after` is older
/// than the window gets 410 `events_expired` with `oldest_seq`, never a silent gap, including a
/// consumer starting from 0; `after = oldest_seq - 1` resumes with the whole window; the window
/// and the answer survive a restart. One pool's events are all in its partition: that one is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_behind_the_window_are_410_with_the_oldest_kept() {
    const WINDOW: u64 = 5;
    let config = ServerConfig::default()
        .arg("--event-retention-max")
        .arg(WINDOW.to_string());
    let mut server = Server::start_with(config).await;
    let api = server.api();
    let partitions = api.partitions().await;
    expect_empty_feed(&api).await;

    // Seq 1 (pool_upserted) and 2..=8 (restocked) in the pool's partition: 8 events, the newest 5
    // (4..=8) kept.
    let (status, pool) = api
        .call("PUT", "/v1/pools/win-a", Some(json!({"total": 1})))
        .await;
    assert_eq!(status, 201, "{pool}");
    let home = partition_of(&pool, partitions);
    for _ in 0..7 {
        let (status, body) = api
            .call("POST", "/v1/pools/win-a/restock", Some(json!({"delta": 1})))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let oldest_seq = 8 - WINDOW + 1;

    for pass in ["before a restart", "after a restart"] {
        let api = server.api();
        let mut paths = Vec::new();
        for query in [
            "after=0".to_string(),
            "after=1".to_string(),
            format!("after={}", oldest_seq - 2),
            "after=0&wait_ms=30000".to_string(),
        ] {
            paths.push(api.events_path(home, &query).await);
        }
        paths.push(format!("/v1/events?partition={home}&after=0"));
        for path in paths {
            let started = Instant::now();
            let (status, body) = api.call("GET", &path, None).await;
            assert_eq!(status, 410, "{pass}, {path}: {body}");
            assert_eq!(body["error"], "events_expired", "{path}: {body}");
            assert_eq!(body["oldest_seq"], oldest_seq, "{path}: {body}");
            assert!(
                error_shape_problem(status, &body).is_none(),
                "{path}: {body}"
            );
            let resume = format!("after={}", oldest_seq - 1);
            assert!(
                body["message"].as_str().unwrap_or("").contains(&resume),
                "{path}: the message says where to resume: {body}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{path}: a long poll behind the window is answered at once"
            );
        }

        // Resuming from oldest_seq - 1 reads the whole window, then the head as usual.
        let path = api
            .events_path(home, &format!("after={}", oldest_seq - 1))
            .await;
        let (status, page) = api.call("GET", &path, None).await;
        assert_eq!(status, 200, "{path}: {page}");
        let seqs: Vec<u64> = page["events"]
            .as_array()
            .expect("events array")
            .iter()
            .map(|event| event["seq"].as_u64().expect("integer seq"))
            .collect();
        assert_eq!(seqs, (oldest_seq..=8).collect::<Vec<_>>(), "{pass}: {page}");
        assert_eq!(page["next_after"], 8);
        for after in [oldest_seq, 8, 1000] {
            let path = api.events_path(home, &format!("after={after}")).await;
            let (status, page) = api.call("GET", &path, None).await;
            assert_eq!(status, 200, "{pass}, {path}: {page}");
        }
        // The other partitions dropped nothing.
        for partition in (0..partitions).filter(|k| *k != home) {
            let path = api.events_path(partition, "after=0").await;
            let (status, body) = api.call("GET", &path, None).await;
            expect_subset(
                status,
                &body,
                json!({"events": [], "next_after": 0}),
                &format!("{pass}: {path}"),
            );
        }
        if pass == "before a restart" {
            // SIGKILL: the window comes back from the log, as it was.
            server.restart().await;
        }
    }
}

/// `wait_ms` long-polls: with nothing new it waits about that long and returns empty; when an
/// event arrives meanwhile it returns early with it. Real time is what is under test. The pool's
/// events are all in its partition: that one is polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_long_poll_waits_and_returns_early() {
    let server = Server::start().await;
    let api = server.api();
    let partitions = api.partitions().await;
    let (status, pool) = api
        .call("PUT", "/v1/pools/lp-a", Some(json!({"total": 5})))
        .await;
    assert_eq!(status, 201);
    let home = partition_of(&pool, partitions);
    let head = api.events_in(home, 0).await.last().expect("one event")["seq"]
        .as_u64()
        .unwrap();

    // Nothing new: the answer comes after about wait_ms, empty.
    let started = Instant::now();
    let path = api
        .events_path(home, &format!("after={head}&wait_ms=400"))
        .await;
    let (status, page) = api.call("GET", &path, None).await;
    let waited = started.elapsed();
    expect_subset(
        status,
        &page,
        json!({"events": [], "next_after": head}),
        "a long-poll with nothing new",
    );
    assert!(
        waited >= Duration::from_millis(350),
        "wait_ms=400 returned after {waited:?}: it did not wait"
    );
    assert!(
        waited < Duration::from_secs(5),
        "wait_ms=400 took {waited:?}"
    );

    // An event arrives while a long-poll waits: it returns early with that event.
    let poller = {
        let api = api.clone();
        let path = api
            .events_path(home, &format!("after={head}&wait_ms=20000"))
            .await;
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = api.call("GET", &path, None).await;
            (reply, started.elapsed())
        })
    };
    // Give the long-poll time to be parked before the change; the assertion below only needs the
    // event to arrive well before wait_ms ends, so a slow start cannot make this test pass wrongly.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let changed_at = Instant::now();
    let (status, _) = api
        .call("POST", "/v1/pools/lp-a/restock", Some(json!({"delta": 1})))
        .await;
    assert_eq!(status, 200);
    let ((status, page), waited) = tokio::time::timeout(Duration::from_secs(25), poller)
        .await
        .expect("long-poll did not return")
        .expect("poller task");
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{}", short(&page));
    assert_eq!(events[0]["type"], "restocked");
    assert_eq!(page["next_after"], events[0]["seq"]);
    assert!(
        waited < Duration::from_secs(5),
        "long-poll returned after {waited:?}, not early"
    );
    assert!(changed_at.elapsed() < Duration::from_secs(5));

    // wait_ms on a feed that already has events after `after` answers at once.
    let started = Instant::now();
    let path = api.events_path(home, "after=0&wait_ms=30000").await;
    let (status, page) = api.call("GET", &path, None).await;
    assert_eq!(status, 200);
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "events were there: no waiting"
    );
}

/// Fencing tokens strictly increase per lock name across all acquisitions, restarts included:
/// after a released lease, after a lease that ran out while the server was down, and after a
/// graceful stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_across_restarts() {
    let mut server = Server::start().await;
    let acquire = |api: Api, name: &'static str, ttl_ms: u64| async move {
        let (status, body) = api
            .call(
                "POST",
                &format!("/v1/locks/{name}/acquire"),
                Some(json!({"owner": "o1", "ttl_ms": ttl_ms})),
            )
            .await;
        assert_eq!(status, 200, "acquire {name}: {body}");
        (
            body["token"].as_u64().expect("integer token"),
            body["expires_at_ms"].as_u64().expect("expires_at_ms"),
        )
    };

    let (t1, _) = acquire(server.api(), "fence", 5000).await;
    let (status, body) = server
        .api()
        .call(
            "POST",
            "/v1/locks/fence/release",
            Some(json!({"owner": "o1", "token": t1})),
        )
        .await;
    expect_subset(status, &body, json!({"released": true}), "release");

    server.restart().await;
    let (t2, expires) = acquire(server.api(), "fence", 100).await;
    assert!(
        t2 > t1,
        "after SIGKILL + restart: token {t2} not above {t1}"
    );

    // Let the lease run out across a restart, then take it again.
    server.restart().await;
    while now_ms() <= expires {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (t3, _) = acquire(server.api(), "fence", 5000).await;
    assert!(
        t3 > t2,
        "expired lease after restart: token {t3} not above {t2}"
    );
    let (status, body) = server
        .api()
        .call(
            "POST",
            "/v1/locks/fence/renew",
            Some(json!({"owner": "o1", "token": t2, "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("not_lock_owner")),
        "old token after restart"
    );

    // A held lease survives a restart: still held, same token renews.
    server.stop_graceful().await;
    server.start_again().await;
    let (status, body) = server
        .api()
        .call(
            "POST",
            "/v1/locks/fence/acquire",
            Some(json!({"owner": "o2", "ttl_ms": 1000})),
        )
        .await;
    assert_eq!(
        (status, body["error"].clone()),
        (409, json!("lock_held")),
        "lease lost on graceful restart: {body}"
    );
    let (status, body) = server
        .api()
        .call(
            "POST",
            "/v1/locks/fence/release",
            Some(json!({"owner": "o1", "token": t3})),
        )
        .await;
    expect_subset(
        status,
        &body,
        json!({"released": true}),
        "release after a graceful restart",
    );
    let (t4, _) = acquire(server.api(), "fence", 5000).await;
    assert!(t4 > t3, "after graceful restart: token {t4} not above {t3}");
}

/// With no tokens configured the server refuses a non-loopback address unless told
/// `--insecure-no-auth`; with tokens, or with that flag, it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_auth_refuses_a_non_loopback_address() {
    let data = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_stockd"))
        .arg("serve")
        .arg("--listen")
        .arg(format!("0.0.0.0:{}", free_port()))
        .arg("--data-dir")
        .arg(data.path())
        .env_remove("STOCKD_TOKENS")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn stockd");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stockd kept serving on 0.0.0.0 without tokens and without --insecure-no-auth");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        !status.success(),
        "refusing to serve must exit non-zero, got {status}"
    );

    let mut insecure = ServerConfig::default().arg("--insecure-no-auth");
    insecure.listen_host = "0.0.0.0".to_string();
    let server = Server::start_with(insecure).await;
    let (status, _) = server.api().call("GET", "/v1/pools", None).await;
    assert_eq!(status, 200, "--insecure-no-auth serves without tokens");
    drop(server);

    let mut with_tokens = ServerConfig::default().with_auth();
    with_tokens.listen_host = "0.0.0.0".to_string();
    let server = Server::start_with(with_tokens).await;
    let (status, body) = server.api().call_as(None, "GET", "/v1/pools", None).await;
    assert_eq!(
        (status, &body["error"]),
        (401, &json!("unauthorized")),
        "{body}"
    );
}

/// The retention flags are accepted, and finished holds stay readable and idempotent while
/// retained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_flags_keep_finished_holds() {
    let config = ServerConfig::default()
        .arg("--hold-retention-ms")
        .arg("60000")
        .arg("--confirmed-retention-ms")
        .arg("120000");
    let server = Server::start_with(config).await;
    let api = server.api();
    let (status, _) = api
        .call("PUT", "/v1/pools/r-a", Some(json!({"total": 3})))
        .await;
    assert_eq!(status, 201);
    for (hold, confirm) in [("r-released", false), ("r-confirmed", true)] {
        let body =
            json!({"hold_id": hold, "items": [{"pool": "r-a", "qty": 1}], "confirm": confirm});
        let (status, reply) = api.call("POST", "/v1/holds", Some(body.clone())).await;
        assert_eq!(status, 201, "{reply}");
        if !confirm {
            let (status, _) = api
                .call("POST", &format!("/v1/holds/{hold}/release"), None)
                .await;
            assert_eq!(status, 200);
        }
        let (status, reply) = api.call("POST", "/v1/holds", Some(body)).await;
        assert_eq!(
            status, 200,
            "a retained hold answers a retry idempotently: {reply}"
        );
        let want = if confirm { "confirmed" } else { "released" };
        assert_eq!(reply["status"], want, "{reply}");
    }
    let pool = api.pool("r-a").await;
    assert_eq!(
        (&pool["available"], &pool["sold"]),
        (&json!(2), &json!(1)),
        "{pool}"
    );
}

/// The harness's own partition-aware matching: order is compared within a partition only, never
/// weaker than element-wise with one partition.
#[test]
fn event_matching_compares_order_within_partitions() {
    let window = TimeWindow {
        before_ms: 0,
        after_ms: u64::MAX / 2,
    };
    let read = |partition: u32, seq: u64, kind: &str, key: &str, id: &str| FeedEvent {
        partition,
        event: json!({"seq": seq, "at_ms": 1, "type": kind, key: id}),
    };
    let expected = json!([
        ev("pool_upserted", json!({"pool": "a"})),
        ev("held", json!({"hold_id": "h"})),
        ev("confirmed", json!({"hold_id": "h"})),
    ]);
    let check = |actual: &[FeedEvent], partitions: u32| {
        match_events(
            &expected,
            actual,
            &mut vars_with_partitions(partitions),
            window,
        )
    };
    // One partition: exactly the expected order.
    let one = [
        read(0, 1, "pool_upserted", "pool", "a"),
        read(0, 2, "held", "hold_id", "h"),
        read(0, 3, "confirmed", "hold_id", "h"),
    ];
    assert!(check(&one, 1).is_ok());
    let swapped = [one[1].clone(), one[0].clone(), one[2].clone()];
    assert!(check(&swapped, 1).is_err());
    assert!(check(&one[..2], 1).is_err(), "a missing event");
    // Two partitions: any interleaving, but a hold's own events in order.
    let two = [
        read(0, 1, "held", "hold_id", "h"),
        read(0, 2, "confirmed", "hold_id", "h"),
        read(1, 1, "pool_upserted", "pool", "a"),
    ];
    assert!(check(&two, 2).is_ok());
    let reordered = [
        read(0, 1, "confirmed", "hold_id", "h"),
        read(0, 2, "held", "hold_id", "h"),
        read(1, 1, "pool_upserted", "pool", "a"),
    ];
    assert!(check(&reordered, 2).is_err());
    // The events of one hold must share a partition, and seq must increase within one.
    let split = [
        read(0, 1, "held", "hold_id", "h"),
        read(1, 1, "confirmed", "hold_id", "h"),
    ];
    assert!(partition_rules_problem(&split).is_some());
    assert!(partition_rules_problem(&two).is_none());
    let backwards = [
        read(0, 2, "held", "hold_id", "h"),
        read(0, 1, "held", "hold_id", "g"),
    ];
    assert!(partition_rules_problem(&backwards).is_some());
    // An event names the partition it was read from, for `$same:NAME`.
    let mut vars = vars_with_partitions(2);
    vars.insert("ph".to_string(), json!(0));
    let pinned = json!([
        ev("held", json!({"hold_id": "h", "partition": "$same:ph"})),
        ev("confirmed", json!({"hold_id": "h"})),
        ev(
            "pool_upserted",
            json!({"pool": "a", "partition": "$same:ph"})
        ),
    ]);
    assert!(match_events(&pinned, &two, &mut vars, window).is_err());

    // `$partition`: an integer in 0..P (exactly 0 with one partition); `$partition:NAME` also the
    // same every time.
    let mut vars = vars_with_partitions(1);
    assert!(match_subset(&json!("$partition"), &json!(0), &mut vars, window).is_ok());
    assert!(match_subset(&json!("$partition"), &json!(1), &mut vars, window).is_err());
    let mut vars = vars_with_partitions(16);
    assert!(match_subset(&json!("$partition:k"), &json!(15), &mut vars, window).is_ok());
    assert!(match_subset(&json!("$partition:k"), &json!(15), &mut vars, window).is_ok());
    assert!(match_subset(&json!("$partition:k"), &json!(3), &mut vars, window).is_err());
    assert!(match_subset(&json!("$partition"), &json!(16), &mut vars, window).is_err());
    assert!(match_subset(&json!("$partition"), &json!("0"), &mut vars, window).is_err());

    // Partition-count templates.
    assert_eq!(
        fill_partitions("/v1/events?partition={P}&x={P-1}&y={P+6}&{p}", 16),
        "/v1/events?partition=16&x=15&y=22&{p}"
    );
    assert_eq!(fill_expect(&json!("{P}"), "c0001", 1), json!(1));
    assert_eq!(
        fill_expect(&json!("$contains:{P+6}"), "c0001", 1),
        json!("$contains:7")
    );
}

/// A `held` event carries the hold's created_at_ms, as GET /v1/holds/{id} shows it, also for a
/// hold over several partitions (on a Redis Cluster created a little before it is held); no
/// other event has the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_events_carry_the_holds_created_at_ms() {
    let server = Server::start().await;
    let api = server.api();
    let partitions = api.partitions().await;
    // Pools until two are in different partitions (or eight, with one partition).
    let mut pools: Vec<(String, u32)> = Vec::new();
    for n in 0..64 {
        let pool = format!("ca-p{n}");
        let (status, body) = api
            .call(
                "PUT",
                &format!("/v1/pools/{pool}"),
                Some(json!({"total": 10, "low_stock_threshold": 9})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let partition = partition_of(&body, partitions);
        if pools.iter().all(|(_, p)| *p != partition) {
            pools.push((pool, partition));
        }
        if pools.len() == 2 || (partitions == 1 && n == 1) {
            break;
        }
    }
    if partitions == 1 {
        pools = vec![("ca-p0".into(), 0), ("ca-p1".into(), 0)];
    }
    assert_eq!(pools.len(), 2, "no two pools in different partitions");
    let holds = [
        ("ca-h1", vec![&pools[0].0], false),
        ("ca-h2", vec![&pools[0].0, &pools[1].0], false),
        ("ca-h3", vec![&pools[0].0, &pools[1].0], true),
    ];
    let mut created = std::collections::HashMap::new();
    for (hold_id, on, confirm) in &holds {
        let items: Vec<Value> = on.iter().map(|p| json!({"pool": p, "qty": 1})).collect();
        let (status, body) = api
            .call(
                "POST",
                "/v1/holds",
                Some(json!({"hold_id": hold_id, "items": items, "confirm": confirm})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        let (status, hold) = api.call("GET", &format!("/v1/holds/{hold_id}"), None).await;
        assert_eq!(status, 200, "{hold}");
        assert_eq!(hold["created_at_ms"], body["created_at_ms"], "{hold}");
        created.insert(hold_id.to_string(), hold["created_at_ms"].clone());
    }
    let (status, body) = api.call("POST", "/v1/holds/ca-h2/release", None).await;
    assert_eq!(status, 200, "{body}");
    let mut held = 0;
    for read in api.all_events().await {
        let event = &read.event;
        if event["type"] == "held" {
            let hold_id = event["hold_id"].as_str().unwrap();
            assert_eq!(event["created_at_ms"], created[hold_id], "{event}");
            assert!(
                event["created_at_ms"].as_u64().unwrap() <= event["at_ms"].as_u64().unwrap(),
                "{event}"
            );
            held += 1;
        } else {
            assert!(event.get("created_at_ms").is_none(), "{event}");
        }
    }
    assert_eq!(held, holds.len());
}
