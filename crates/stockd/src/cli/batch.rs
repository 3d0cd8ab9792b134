//! `stockd batch FILE`: many hold operations in one request, from a JSON file or standard input.
//!
//! The file is the batch endpoint's body, `{"ops": [...]}`, and goes to the server byte for
//! byte: the server judges the ops (a repeated field, an unknown op), so nothing here re-encodes
//! them. Only what keeps a request from being sent is checked here: the file can be read, is at
//! most the body limit, and is JSON at all.

use std::fmt::Write as _;
use std::io::Read;
use std::path::PathBuf;

use serde_json::Value;
use stockd_client::{BatchAnswer, BatchResult, Call, HoldView};

use super::{human, print_stderr, Exit, Session};

/// The most a request body may be (the server answers 413 above it); a bigger file is refused
/// here, before it is sent, because a server may close the connection on a body far above its
/// limit before it can answer.
const BODY_LIMIT_BYTES: usize = crate::serve::BODY_LIMIT_BYTES;

/// What `stockd batch` takes.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct BatchArgs {
    /// A JSON file with the batch endpoint's body, {"ops": [{"op": "reserve", ...}, ...]} (1 to
    /// 1000 ops: reserve, confirm, release, refund, extend), or - for standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

impl BatchArgs {
    fn is_stdin(&self) -> bool {
        self.file.as_os_str() == "-"
    }

    /// `FILE` or `standard input`, for messages.
    fn source(&self) -> String {
        if self.is_stdin() {
            "standard input".to_owned()
        } else {
            self.file.display().to_string()
        }
    }

    /// The body to send, or why there is none (a usage error: nothing was sent).
    fn read_body(&self) -> Result<Vec<u8>, String> {
        let source = self.source();
        let mut body = Vec::new();
        // One byte over the limit is enough to know the body is too big.
        let limit = u64::try_from(BODY_LIMIT_BYTES + 1).unwrap_or(u64::MAX);
        let read = if self.is_stdin() {
            std::io::stdin().lock().take(limit).read_to_end(&mut body)
        } else {
            std::fs::File::open(&self.file).and_then(|file| file.take(limit).read_to_end(&mut body))
        };
        read.map_err(|error| format!("cannot read {source}: {error}"))?;
        if body.len() > BODY_LIMIT_BYTES {
            return Err(format!(
                "{source} is over {BODY_LIMIT_BYTES} bytes (1 MiB), the most a request body may \
                 be: split the ops over several batches"
            ));
        }
        if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
            return Err(format!(
                "{source} is not JSON ({error}); a batch is the batch endpoint's body: \
                 {{\"ops\": [{{\"op\": \"reserve\", \"hold_id\": ..., \"items\": [...]}}, \
                 {{\"op\": \"confirm\", \"hold_id\": ...}}, ...]}}"
            ));
        }
        Ok(body)
    }
}

/// Runs `stockd batch`. Exit 0 when every op succeeded, 4 when one or more were refused, 5 when
/// one or more failed on the server (whatever the others did).
pub(super) async fn run(session: &Session, args: BatchArgs) -> Exit {
    let body = match args.read_body() {
        Ok(body) => body,
        Err(why) => {
            print_stderr(&format!("error: batch: {why}"));
            return Exit::Usage;
        }
    };
    let labels = op_labels(&body);
    let answer = match session.send(&Call::batch_body(body)).await {
        Ok(answer) => answer,
        Err(exit) => return exit,
    };
    let printed = session.present(&answer, |answer| {
        let batch: BatchAnswer = answer.decode()?;
        Ok(results_text(&batch.results, &labels, human::now_ms()))
    });
    if printed != Exit::Success {
        return printed;
    }
    // The ops' own statuses decide the exit code, with --json too.
    match answer.decode::<BatchAnswer>() {
        Ok(batch) => {
            let exit = outcome(&batch.results);
            if exit != Exit::Success {
                print_stderr(&format!(
                    "error: batch: not every op succeeded: {}",
                    count(&batch.results)
                ));
            }
            exit
        }
        Err(error) => session.report_error(error),
    }
}

/// Each op's `op` field (`reserve`, `confirm`, ...), to label its result; empty when the file
/// has no readable ops array (the server says what is wrong with it).
fn op_labels(body: &[u8]) -> Vec<String> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|value| value.get("ops").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .map(|op| {
            op.get("op")
                .and_then(Value::as_str)
                .unwrap_or("op")
                .to_owned()
        })
        .collect()
}

/// The exit code of a batch's results: the worst of its ops.
fn outcome(results: &[BatchResult]) -> Exit {
    if results.iter().any(|result| result.status >= 500) {
        Exit::ServerError
    } else if results.iter().any(|result| result.status >= 400) {
        Exit::Refused
    } else {
        Exit::Success
    }
}

/// One line per op, `1. reserve (201) hold o-1: held, ...`, then a count.
fn results_text(results: &[BatchResult], labels: &[String], now_ms: u64) -> String {
    let mut text = String::new();
    for (index, result) in results.iter().enumerate() {
        let label = labels.get(index).map_or("op", String::as_str);
        let _ = write!(text, "{}. {label} ({}) ", index + 1, result.status);
        text.push_str(&result_line(result, now_ms));
        text.push('\n');
    }
    text.push_str(&count(results));
    text
}

/// `3 ops: 2 done, 1 refused, 0 failed on the server`.
fn count(results: &[BatchResult]) -> String {
    let refused = results
        .iter()
        .filter(|result| (400..500).contains(&result.status))
        .count();
    let failed = results.iter().filter(|result| result.status >= 500).count();
    let done = results.len() - refused - failed;
    format!(
        "{} ops: {done} done, {refused} refused, {failed} failed on the server",
        results.len()
    )
}

/// A hold for a success, `error: <code>: <message>` for a refusal.
fn result_line(result: &BatchResult, now_ms: u64) -> String {
    if (200..300).contains(&result.status) {
        if let Ok(hold) = serde_json::from_value::<HoldView>(result.body.clone()) {
            return super::hold::hold_line(&hold, None, now_ms);
        }
        return result.body.to_string();
    }
    let field = |name: &str| {
        result
            .body
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    format!("error: {}: {}", field("error"), field("message"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn result(status: u16, body: Value) -> BatchResult {
        BatchResult { status, body }
    }

    #[test]
    fn the_worst_op_decides_the_exit_code() {
        let ok = result(200, json!({}));
        let refused = result(409, json!({}));
        let failed = result(503, json!({}));
        assert_eq!(outcome(&[ok.clone(), ok.clone()]), Exit::Success);
        assert_eq!(outcome(&[ok.clone(), refused.clone()]), Exit::Refused);
        assert_eq!(outcome(&[refused, failed, ok]), Exit::ServerError);
    }

    #[test]
    fn each_op_gets_a_line_and_the_batch_a_count() {
        let hold = json!({
            "hold_id": "o-1", "status": "held", "user": null,
            "items": [{"pool": "sku-1", "qty": 1}],
            "created_at_ms": 0, "expires_at_ms": 600_000_u64, "finished_at_ms": null,
            "partition": 0,
        });
        let results = [
            result(201, hold),
            result(
                404,
                json!({"error": "hold_not_found", "message": "no hold o-9", "hold_id": "o-9"}),
            ),
        ];
        let labels = op_labels(
            br#"{"ops":[{"op":"reserve","hold_id":"o-1"},{"op":"confirm","hold_id":"o-9"}]}"#,
        );
        assert_eq!(
            results_text(&results, &labels, 0),
            "1. reserve (201) hold o-1: held, expires 1970-01-01 00:10:00 UTC (in 10m), \
             items sku-1 x1\n\
             2. confirm (404) error: hold_not_found: no hold o-9\n\
             2 ops: 1 done, 1 refused, 0 failed on the server"
        );
    }
}
