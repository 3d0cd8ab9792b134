//! `stockd events tail`: print the event feed and follow it, every partition at once.
//!
//! One task per partition long-polls `GET /v1/events?partition=K&after=SEQ&wait_ms=...` and
//! hands each page to one printer, which writes it and moves that partition's cursor. Order is
//! kept within a partition; partitions interleave as their events arrive (the feed has no order
//! across partitions). A partition whose `after` fell out of the server's window (410
//! `events_expired`) stops the tail with an error that says which events are lost: never a
//! silent gap. Ctrl-C and SIGTERM stop it cleanly and print the cursor to resume from; a reader
//! of stdout that goes away (`| head`) stops it quietly.
//!
//! This module never interprets events beyond showing them: `--json` prints each event's bytes
//! as the server sent them, one a line.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write as _};

use serde::Deserialize;
use serde_json::{Map, Value};
use stockd_client::{Call, Client, ClientError, ErrorCode, EventPartitions};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::{human, print_stderr, Exit, Session};

/// Events asked for per request, the API's maximum.
const PAGE_LIMIT: usize = 1_000;
/// How long one long poll waits for new events, the API's maximum.
const LONG_POLL_MS: u64 = 30_000;
/// Events shown from the end of each partition before following, unless `--lines` or `--after`
/// says otherwise (as `tail`).
const LINES_DEFAULT: u64 = 10;

/// The event feed (`stockd events ...`).
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum EventsCommand {
    /// Print the last events of every partition, then follow the feed as events arrive (like
    /// `tail -f`); Ctrl-C stops it and prints the cursor to resume from.
    Tail(TailArgs),
}

/// What `stockd events tail` takes.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct TailArgs {
    /// Start after this cursor instead of the last events: SEQ on a one-partition feed, or
    /// K:SEQ,K:SEQ,... with a seq per partition (a partition left out starts from its
    /// beginning, as K:0). The cursor tail prints when it stops resumes where it stopped.
    #[arg(long, value_name = "CURSOR", value_parser = parse_cursor, conflicts_with = "lines")]
    pub after: Option<Cursor>,
    /// How many of the latest events of each partition to print first (0: only new ones).
    #[arg(short = 'n', long, value_name = "N", default_value_t = LINES_DEFAULT)]
    pub lines: u64,
    /// Print the events there are now, then exit, instead of following.
    #[arg(long)]
    pub no_follow: bool,
}

/// Where to start reading: after one seq (a one-partition feed), or after a seq per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    Seq(u64),
    PerPartition(BTreeMap<u32, u64>),
}

/// Parses `--after`: `SEQ` or `K:SEQ,K:SEQ,...`.
fn parse_cursor(text: &str) -> Result<Cursor, String> {
    const SHAPE: &str = "expected SEQ, or K:SEQ,K:SEQ,... with a seq per partition \
                         (e.g. 0:120,1:97)";
    if let Ok(seq) = text.parse::<u64>() {
        return Ok(Cursor::Seq(seq));
    }
    let mut per_partition = BTreeMap::new();
    for entry in text.split(',') {
        let (partition, seq) = entry
            .split_once(':')
            .ok_or_else(|| format!("{entry:?} is not K:SEQ; {SHAPE}"))?;
        let partition: u32 = partition
            .parse()
            .map_err(|_| format!("partition {partition:?} is not a whole number; {SHAPE}"))?;
        let seq: u64 = seq
            .parse()
            .map_err(|_| format!("seq {seq:?} is not a whole number; {SHAPE}"))?;
        if per_partition.insert(partition, seq).is_some() {
            return Err(format!("partition {partition} is given twice; {SHAPE}"));
        }
    }
    Ok(Cursor::PerPartition(per_partition))
}

impl Cursor {
    /// The seq to start after in each of `partitions` partitions, or why this cursor does not
    /// fit the feed.
    fn resolve(&self, partitions: u32) -> Result<Vec<u64>, String> {
        match self {
            Cursor::Seq(seq) if partitions == 1 => Ok(vec![*seq]),
            Cursor::Seq(seq) => Err(format!(
                "--after {seq} is one seq, but this feed has {partitions} partitions, each with \
                 seqs of its own: give one per partition, as K:SEQ,K:SEQ,... (e.g. \
                 --after 0:{seq},1:0)"
            )),
            Cursor::PerPartition(per_partition) => {
                if let Some((&partition, _)) = per_partition
                    .iter()
                    .find(|(&partition, _)| partition >= partitions)
                {
                    return Err(format!(
                        "--after names partition {partition}, but this feed has {partitions} \
                         partition{} (0 to {})",
                        if partitions == 1 { "" } else { "s" },
                        partitions - 1
                    ));
                }
                Ok((0..partitions)
                    .map(|partition| per_partition.get(&partition).copied().unwrap_or(0))
                    .collect())
            }
        }
    }
}

/// The cursor of the positions reached, as `--after` takes it: `SEQ` on a one-partition feed,
/// else `K:SEQ,...` for the partitions whose position is known.
fn cursor_text(after: &[Option<u64>]) -> String {
    if let [Some(seq)] = after {
        return seq.to_string();
    }
    after
        .iter()
        .enumerate()
        .filter_map(|(partition, seq)| seq.map(|seq| format!("{partition}:{seq}")))
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs one `stockd events` subcommand.
pub(super) async fn run(session: &Session, command: EventsCommand) -> Exit {
    match command {
        EventsCommand::Tail(args) => tail(session, args).await,
    }
}

/// Where one partition's reading starts.
#[derive(Debug, Clone, Copy)]
enum Start {
    After(u64),
    /// The last N events (fewer when the feed keeps fewer).
    Last(u64),
}

/// What a partition's task tells the printer.
enum Message {
    /// Reading starts after `after` (known only once the task has looked for the end).
    Position { partition: u32, after: u64 },
    /// A page with at least one event, as received.
    Page { partition: u32, body: Vec<u8> },
    /// The partition cannot go on.
    Failed { partition: u32, error: ClientError },
}

async fn tail(session: &Session, args: TailArgs) -> Exit {
    let partitions = match session.send(&Call::partitions()).await {
        Ok(answer) => match answer.decode::<EventPartitions>() {
            Ok(count) => count.partitions,
            Err(error) => return session.report_error(error),
        },
        Err(exit) => return exit,
    };
    let starts: Vec<Start> = match &args.after {
        Some(cursor) => match cursor.resolve(partitions) {
            Ok(after) => after.into_iter().map(Start::After).collect(),
            Err(why) => {
                print_stderr(&format!("error: {why}"));
                return Exit::Usage;
            }
        },
        None => vec![Start::Last(args.lines); partitions as usize],
    };
    let mut after: Vec<Option<u64>> = starts
        .iter()
        .map(|start| match start {
            Start::After(seq) => Some(*seq),
            Start::Last(_) => None,
        })
        .collect();

    // Each task may be one page ahead of the printer, so a slow reader slows the polls.
    let (sender, mut receiver) = mpsc::channel(starts.len().max(1));
    let mut tasks = JoinSet::new();
    for (partition, start) in (0..partitions).zip(starts) {
        tasks.spawn(read_partition(
            session.client.clone(),
            partition,
            start,
            !args.no_follow,
            sender.clone(),
        ));
    }
    drop(sender);

    let stop = crate::signals::stop_requested();
    let closed = stdout_closed();
    tokio::pin!(stop, closed);
    let json = session.args.json;
    loop {
        let message = tokio::select! {
            message = receiver.recv() => message,
            () = &mut stop => {
                print_resume("stopped; to resume from here", &after);
                return Exit::Success;
            }
            // The reader went away (`| head`): it had what it wanted; nothing to say.
            () = &mut closed => return Exit::Success,
        };
        match message {
            // Every partition is done: only without following.
            None => {
                print_resume("to go on from here", &after);
                return Exit::Success;
            }
            Some(Message::Position {
                partition,
                after: seq,
            }) => after[partition as usize] = Some(seq),
            Some(Message::Page { partition, body }) => {
                let page = match render_page(partition, &body, json, human::now_ms()) {
                    Ok(page) => page,
                    Err(error) => {
                        let exit = session.report_error(ClientError::Decode(error));
                        print_resume("to resume from here", &after);
                        return exit;
                    }
                };
                match write_stdout(page.text.as_bytes()) {
                    Ok(()) => after[partition as usize] = Some(page.next_after),
                    Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                        return Exit::Success
                    }
                    Err(error) => {
                        print_stderr(&format!("error: cannot write to stdout: {error}"));
                        print_resume("to resume from here", &after);
                        return Exit::Failure;
                    }
                }
            }
            Some(Message::Failed { partition, error }) => {
                let expired = (error.error_code() == Some(ErrorCode::EventsExpired))
                    .then(|| error.detail("oldest_seq").and_then(Value::as_u64))
                    .flatten();
                let exit = session.report_error(error);
                match expired {
                    Some(oldest_seq) => {
                        let reached = after[partition as usize].unwrap_or(0);
                        let mut resume = after.clone();
                        resume[partition as usize] = Some(oldest_seq.saturating_sub(1));
                        print_stderr(&format!(
                            "hint: partition {partition}: events {} to {} are no longer kept, \
                             so this tail cannot show them; repair your copy (for example from \
                             `stockd pool list` and the holds you know), then resume with \
                             --after {}",
                            reached + 1,
                            oldest_seq.saturating_sub(1),
                            cursor_text(&resume)
                        ));
                    }
                    None => print_resume("to resume from here", &after),
                }
                return exit;
            }
        }
    }
}

/// `<what>: --after 0:57,1:12` on stderr: the cursor of what was printed.
fn print_resume(what: &str, after: &[Option<u64>]) {
    if after.iter().any(Option::is_some) {
        print_stderr(&format!("{what}: --after {}", cursor_text(after)));
    }
}

/// Reads one partition from `start`, page by page, until it is caught up (without `follow`)
/// or fails; with `follow`, long-polls for new events for ever.
async fn read_partition(
    client: Client,
    partition: u32,
    start: Start,
    follow: bool,
    printer: mpsc::Sender<Message>,
) {
    let failed = |error| Message::Failed { partition, error };
    let mut after = match start {
        Start::After(seq) => seq,
        Start::Last(lines) => match newest_seq(&client, partition).await {
            Ok(newest) => newest.saturating_sub(lines),
            Err(error) => {
                let _ = printer.send(failed(error)).await;
                return;
            }
        },
    };
    // "The last N" may reach before the kept window; then the kept ones are the last N.
    let mut may_start_later = matches!(start, Start::Last(_));
    if printer
        .send(Message::Position { partition, after })
        .await
        .is_err()
    {
        return;
    }
    loop {
        let wait_ms = follow.then_some(LONG_POLL_MS);
        let call = Call::events(Some(partition), after, Some(PAGE_LIMIT), wait_ms);
        let answer = match client.call(&call).await {
            Ok(answer) => answer,
            Err(error)
                if may_start_later && error.error_code() == Some(ErrorCode::EventsExpired) =>
            {
                may_start_later = false;
                let oldest_seq = error.detail("oldest_seq").and_then(Value::as_u64);
                after = oldest_seq.unwrap_or(after + 1).saturating_sub(1);
                if printer
                    .send(Message::Position { partition, after })
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            Err(error) => {
                let _ = printer.send(failed(error)).await;
                return;
            }
        };
        may_start_later = false;
        let head: PageHead = match answer.decode() {
            Ok(head) => head,
            Err(error) => {
                let _ = printer.send(failed(error)).await;
                return;
            }
        };
        after = head.next_after;
        let count = head.events.len();
        if count > 0 {
            let page = Message::Page {
                partition,
                body: answer.body,
            };
            if printer.send(page).await.is_err() {
                return;
            }
        }
        if !follow && count < PAGE_LIMIT {
            return;
        }
    }
}

/// The parts of a page a reader needs to go on.
#[derive(Deserialize)]
struct PageHead {
    events: Vec<serde::de::IgnoredAny>,
    next_after: u64,
}

/// The seq of a partition's newest event (0 when it has none): a galloping search over
/// `after`, two requests per doubling, since the API has no "newest" endpoint.
async fn newest_seq(client: &Client, partition: u32) -> Result<u64, ClientError> {
    // Whether the partition has an event with seq > after.
    let has_after = |after: u64| async move {
        match client
            .call(&Call::events(Some(partition), after, Some(1), None))
            .await
        {
            Ok(answer) => Ok(!answer.decode::<PageHead>()?.events.is_empty()),
            // Some event after `after` is no longer kept: there are events after it.
            Err(error) if error.error_code() == Some(ErrorCode::EventsExpired) => Ok(true),
            Err(error) => Err(error),
        }
    };
    // lo < newest <= hi once the doubling stops.
    let mut lo = 0;
    if !has_after(lo).await? {
        return Ok(0);
    }
    let mut hi = 1;
    while has_after(hi).await? {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if has_after(mid).await? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(hi)
}

/// A page made ready for stdout, and the cursor after it.
struct RenderedPage {
    text: String,
    next_after: u64,
}

/// One line per event: with `json`, the event's bytes as received with `"partition":K` added in
/// front (events do not carry it); else a summary with times for people.
fn render_page(
    partition: u32,
    body: &[u8],
    json: bool,
    now_ms: u64,
) -> Result<RenderedPage, serde_json::Error> {
    let page: Value = serde_json::from_slice(body)?;
    let next_after = page
        .get("next_after")
        .and_then(Value::as_u64)
        .ok_or_else(|| serde::de::Error::missing_field("next_after"))?;
    let events = page
        .get("events")
        .and_then(Value::as_array)
        .ok_or_else(|| serde::de::Error::missing_field("events"))?;
    let mut text = String::new();
    if json {
        // `page` parsed, so the body is UTF-8 JSON and the scan finds every event.
        let raw = std::str::from_utf8(body)
            .ok()
            .and_then(|body| raw_elements(body, "events"))
            .filter(|raw| raw.len() == events.len())
            .ok_or_else(|| serde::de::Error::custom("the events array could not be split"))?;
        for (raw, event) in raw.iter().zip(events) {
            text.push_str(&with_partition(raw, event, partition));
            text.push('\n');
        }
    } else {
        for event in events {
            let event = event
                .as_object()
                .ok_or_else(|| serde::de::Error::custom("an event is not an object"))?;
            text.push_str(&event_line(partition, event, now_ms));
            text.push('\n');
        }
    }
    Ok(RenderedPage { text, next_after })
}

/// `{"partition":K,` then the event's own bytes after its `{`; unchanged when the event already
/// says its partition, or is not an object.
fn with_partition(raw: &str, event: &Value, partition: u32) -> String {
    let single_line = !raw.contains(['\n', '\r']);
    let own = match event.get("partition") {
        Some(_) => raw.to_owned(),
        None => match raw.strip_prefix('{') {
            Some(rest) if rest.trim_start().starts_with('}') => {
                format!("{{\"partition\":{partition}}}")
            }
            Some(rest) => format!("{{\"partition\":{partition},{rest}"),
            None => raw.to_owned(),
        },
    };
    if single_line {
        own
    } else {
        // One event a line: a server that pretty-printed would break that. Only whitespace
        // between tokens can hold a line break (JSON strings escape theirs).
        own.lines().map(str::trim).collect::<Vec<_>>().join(" ")
    }
}

/// `0:12 2026-11-25 22:06:24.923 UTC held hold o-1, user ann, items sku-1 x2, expires ...`.
fn event_line(partition: u32, event: &Map<String, Value>, now_ms: u64) -> String {
    let number = |field: &str| event.get(field).and_then(Value::as_u64);
    let mut line = format!("{partition}:{}", number("seq").unwrap_or(0));
    if let Some(at_ms) = number("at_ms") {
        let _ = write!(line, " {}", human::utc_ms(at_ms));
    }
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("event");
    let _ = write!(line, " {kind}");
    // The fields people look for first, in this order; any other after them.
    const ORDER: [&str; 9] = [
        "pool",
        "hold_id",
        "user",
        "items",
        "delta",
        "total",
        "available",
        "low_stock_threshold",
        "expires_at_ms",
    ];
    let others = event
        .keys()
        .filter(|field| !ORDER.contains(&field.as_str()))
        .filter(|field| !matches!(field.as_str(), "seq" | "at_ms" | "type"))
        // A held hold's created_at_ms is its event's time but on a Redis Cluster, for a hold
        // over several partitions: shown only then.
        .filter(|field| field.as_str() != "created_at_ms" || number(field) != number("at_ms"))
        .map(String::as_str);
    let fields: Vec<String> = ORDER
        .into_iter()
        .chain(others)
        .filter_map(|field| field_text(kind, field, event.get(field)?, now_ms))
        .collect();
    if !fields.is_empty() {
        let _ = write!(line, " {}", fields.join(", "));
    }
    line
}

/// One field of an event of type `kind` for people; `None` for a field that says nothing to
/// them there: the deadline a confirmed, released or refunded hold no longer has.
fn field_text(kind: &str, field: &str, value: &Value, now_ms: u64) -> Option<String> {
    if field == "expires_at_ms" && matches!(kind, "confirmed" | "released" | "refunded") {
        return None;
    }
    Some(field_text_of(kind, field, value, now_ms))
}

fn field_text_of(kind: &str, field: &str, value: &Value, now_ms: u64) -> String {
    let plain = |value: &Value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    match (field, value) {
        ("hold_id", _) => format!("hold {}", plain(value)),
        ("low_stock_threshold", _) => format!("threshold {}", plain(value)),
        ("delta", Value::Number(delta)) if delta.as_i64().is_some_and(|delta| delta > 0) => {
            format!("delta +{delta}")
        }
        ("items", Value::Array(items)) => {
            let items: Vec<String> = items
                .iter()
                .map(|item| {
                    let pool = item.get("pool").map(plain).unwrap_or_default();
                    let qty = item.get("qty").map(plain).unwrap_or_default();
                    format!("{pool} x{qty}")
                })
                .collect();
            format!("items {}", items.join(", "))
        }
        ("created_at_ms", Value::Number(ms)) if ms.as_u64().is_some() => {
            format!("created {}", human::utc_ms(ms.as_u64().unwrap_or(0)))
        }
        // An expired hold's deadline passed: "expires ... ago" would read as still to come.
        ("expires_at_ms", Value::Number(ms)) if ms.as_u64().is_some() && kind == "expired" => {
            format!("deadline {}", human::when(ms.as_u64().unwrap_or(0), now_ms))
        }
        ("expires_at_ms", Value::Number(ms)) if ms.as_u64().is_some() => {
            format!("expires {}", human::when(ms.as_u64().unwrap_or(0), now_ms))
        }
        (field, Value::Number(ms)) if field.ends_with("_at_ms") && ms.as_u64().is_some() => {
            format!("{field} {}", human::when(ms.as_u64().unwrap_or(0), now_ms))
        }
        (field, value) => format!("{field} {}", plain(value)),
    }
}

/// The text of each element of the array under `key` in the top-level object of `text`,
/// exactly as written there; `None` when there is no such array. `text` must be JSON (the
/// caller parsed it): this scan only tracks strings and nesting.
fn raw_elements<'a>(text: &'a str, key: &str) -> Option<Vec<&'a str>> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut string_start = 0;
    // The latest string seen directly in the top-level object: the key of the value that
    // follows it, when a value follows.
    let mut last_key: Option<&str> = None;
    // Inside the wanted array (at depth 2): where the current element began.
    let mut collecting = false;
    let mut element_start: Option<usize> = None;
    let mut elements = Vec::new();
    for (index, &byte) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
                if depth == 1 {
                    last_key = text.get(string_start + 1..index);
                }
            }
            continue;
        }
        let in_array = collecting && depth == 2;
        match byte {
            b' ' | b'\t' | b'\n' | b'\r' | b':' => {}
            b',' if in_array => {
                if let Some(start) = element_start.take() {
                    elements.push(text[start..index].trim_end());
                }
            }
            b']' | b'}' if in_array => {
                if let Some(start) = element_start.take() {
                    elements.push(text[start..index].trim_end());
                }
                return Some(elements);
            }
            b',' => {}
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {
                if in_array && element_start.is_none() {
                    element_start = Some(index);
                }
                match byte {
                    b'"' => {
                        in_string = true;
                        string_start = index;
                    }
                    b'[' if depth == 1 && !collecting && last_key == Some(key) => {
                        collecting = true;
                        depth += 1;
                    }
                    b'[' | b'{' => depth += 1,
                    _ => {}
                }
            }
        }
    }
    None
}

/// Writes a page at once and flushes it, so that a consumer sees whole pages as they come.
fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(bytes)?;
    stdout.flush()
}

/// Resolves when stdout is a pipe (or terminal) whose reader has gone: `stockd events tail |
/// head -3` must end once head has its lines, even when no event arrives to fail a write.
/// Never resolves for stdout that cannot be watched (a regular file).
async fn stdout_closed() {
    #[cfg(unix)]
    {
        use tokio::io::unix::AsyncFd;
        use tokio::io::Interest;
        // Only error readiness: a closed pipe's write end reports EPOLLERR.
        // SAFETY: `io::stdout()` is always descriptor 1, which std never closes and nothing in
        // stockd closes, so it stays open and the same for the whole life of this `AsyncFd`
        // (which ends with this function). A descriptor epoll cannot watch (a regular file)
        // is an error here, not unsoundness.
        let registered = unsafe { AsyncFd::register_with_interest(io::stdout(), Interest::ERROR) };
        if let Ok(stdout) = registered {
            if stdout.ready(Interest::ERROR).await.is_ok() {
                return;
            }
        }
    }
    std::future::pending::<()>().await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn cursors_are_a_seq_or_a_seq_per_partition() {
        assert_eq!(parse_cursor("12"), Ok(Cursor::Seq(12)));
        assert_eq!(
            parse_cursor("0:120,2:97"),
            Ok(Cursor::PerPartition(BTreeMap::from([(0, 120), (2, 97)])))
        );
        for (bad, why) in [
            ("", "is not K:SEQ"),
            ("-1", "is not K:SEQ"),
            ("0:1,,1:2", "is not K:SEQ"),
            ("a:1", "partition \"a\" is not a whole number"),
            ("0:x", "seq \"x\" is not a whole number"),
            ("0:1,0:2", "partition 0 is given twice"),
        ] {
            let error = parse_cursor(bad).expect_err(bad);
            assert!(error.contains(why), "{bad}: {error}");
            assert!(error.contains("K:SEQ,K:SEQ"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_cursor_must_fit_the_feed() {
        assert_eq!(Cursor::Seq(5).resolve(1), Ok(vec![5]));
        let error = Cursor::Seq(5).resolve(3).expect_err("ambiguous");
        assert!(
            error.contains("this feed has 3 partitions") && error.contains("--after 0:5,1:0"),
            "{error}"
        );
        let cursor = parse_cursor("1:40").expect("a cursor");
        assert_eq!(cursor.resolve(3), Ok(vec![0, 40, 0]));
        let error = parse_cursor("3:1")
            .expect("a cursor")
            .resolve(2)
            .expect_err("no partition 3");
        assert!(
            error.contains("partition 3, but this feed has 2 partitions (0 to 1)"),
            "{error}"
        );
        assert_eq!(cursor_text(&[Some(7)]), "7");
        assert_eq!(cursor_text(&[Some(7), None, Some(0)]), "0:7,2:0");
        // What tail prints, --after takes back.
        let text = cursor_text(&[Some(7), Some(9)]);
        assert_eq!(
            parse_cursor(&text).expect("a cursor").resolve(2),
            Ok(vec![7, 9])
        );
    }

    #[test]
    fn elements_are_split_as_written() {
        let text = r#"{"next_after":9, "odd":"events", "events" : [ {"a":"]},\"[{"} ,{"b":[1,{"c":2}]},3,"s" ], "after":[0]}"#;
        assert_eq!(
            raw_elements(text, "events"),
            Some(vec![
                r#"{"a":"]},\"[{"}"#,
                r#"{"b":[1,{"c":2}]}"#,
                "3",
                r#""s""#
            ])
        );
        assert_eq!(raw_elements(r#"{"events":[]}"#, "events"), Some(vec![]));
        assert_eq!(raw_elements(r#"{"x":{"events":[1]}}"#, "events"), None);
        assert_eq!(raw_elements(r#"{"events":5}"#, "events"), None);
    }

    #[test]
    fn json_lines_are_the_events_as_received_with_their_partition() {
        let body = br#"{"events":[{"seq":4,"at_ms":1,"type":"pool_deleted","pool":"p"},{"seq":5, "type":"x", "partition":9},{}],"next_after":5}"#;
        let page = render_page(2, body, true, 0).expect("a page");
        assert_eq!(page.next_after, 5);
        assert_eq!(
            page.text,
            "{\"partition\":2,\"seq\":4,\"at_ms\":1,\"type\":\"pool_deleted\",\"pool\":\"p\"}\n\
             {\"seq\":5, \"type\":\"x\", \"partition\":9}\n\
             {\"partition\":2}\n"
        );
        let pretty = "{\n  \"seq\": 1,\n  \"type\": \"x\"\n}";
        assert_eq!(
            with_partition(pretty, &json!({"seq": 1, "type": "x"}), 0),
            "{\"partition\":0, \"seq\": 1, \"type\": \"x\" }"
        );
    }

    #[test]
    fn human_lines_show_partition_seq_time_type_and_fields() {
        let now_ms = 1_795_644_384_923;
        let event = json!({
            "seq": 12, "at_ms": now_ms, "type": "held", "hold_id": "claim-1", "user": "ann",
            "items": [{"pool": "coupon-a", "qty": 1}, {"pool": "b", "qty": 2}],
            "created_at_ms": now_ms, "expires_at_ms": now_ms + 600_000,
        });
        assert_eq!(
            event_line(0, event.as_object().expect("object"), now_ms),
            "0:12 2026-11-25 22:06:24.923 UTC held hold claim-1, user ann, \
             items coupon-a x1, b x2, expires 2026-11-25 22:16:24 UTC (in 10m)"
        );
        // Created before it was held (a hold over several partitions of a Redis Cluster).
        let mut event = event;
        event["created_at_ms"] = json!(now_ms - 4);
        assert_eq!(
            event_line(0, event.as_object().expect("object"), now_ms),
            "0:12 2026-11-25 22:06:24.923 UTC held hold claim-1, user ann, \
             items coupon-a x1, b x2, expires 2026-11-25 22:16:24 UTC (in 10m), \
             created 2026-11-25 22:06:24.919 UTC"
        );
        // A confirmed hold has no deadline any more; an expired one's has passed.
        let confirmed = json!({
            "seq": 14, "at_ms": now_ms, "type": "confirmed", "hold_id": "claim-1", "user": "ann",
            "items": [{"pool": "coupon-a", "qty": 1}], "expires_at_ms": now_ms + 595_000,
        });
        assert_eq!(
            event_line(0, confirmed.as_object().expect("object"), now_ms),
            "0:14 2026-11-25 22:06:24.923 UTC confirmed hold claim-1, user ann, items coupon-a x1"
        );
        let expired = json!({
            "seq": 16, "at_ms": now_ms, "type": "expired", "hold_id": "claim-2",
            "items": [{"pool": "coupon-a", "qty": 1}], "expires_at_ms": now_ms - 2_000,
        });
        assert_eq!(
            event_line(0, expired.as_object().expect("object"), now_ms),
            "0:16 2026-11-25 22:06:24.923 UTC expired hold claim-2, items coupon-a x1, \
             deadline 2026-11-25 22:06:22 UTC (2s ago)"
        );
        let restocked = json!({
            "seq": 4, "at_ms": now_ms, "type": "restocked", "pool": "sku-2", "available": 8,
            "total": 8, "delta": 3, "restock": false,
        });
        assert_eq!(
            event_line(1, restocked.as_object().expect("object"), now_ms),
            "1:4 2026-11-25 22:06:24.923 UTC restocked pool sku-2, delta +3, total 8, \
             available 8, restock false"
        );
        let low = json!({
            "seq": 5, "at_ms": now_ms, "type": "low_stock", "pool": "p", "available": 2,
            "total": 10, "low_stock_threshold": 2, "delta": -1,
        });
        assert_eq!(
            event_line(0, low.as_object().expect("object"), now_ms),
            "0:5 2026-11-25 22:06:24.923 UTC low_stock pool p, delta -1, total 10, \
             available 2, threshold 2"
        );
    }
}
