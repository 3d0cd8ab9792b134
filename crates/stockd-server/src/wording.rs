//! Decoding errors in the contract's words: which field, what was sent, what is allowed.
//!
//! serde knows where it stopped and why, but says it in Rust ("invalid type: floating point
//! `1e+23`, expected u64"). [`describe`] takes the field's path (from `serde_path_to_error`) and
//! serde's message and says it as the contract does ("total: must be an integer from 0 to
//! 1000000000000, got 1e+23"), using [`rule`] for what each field of the API takes. A message it
//! does not recognise is kept, behind the field's path: never lost, never a guess.

use stockd_core::limits::{
    BATCH_OPS_MAX, EVENT_LIMIT_MAX, HOLD_ITEMS_MAX, HOLD_LIST_LIMIT_MAX, HOLD_TTL_MS_MAX,
    HOLD_TTL_MS_MIN, ID_LEN_MAX, LOCK_TTL_MS_MAX, LOCK_TTL_MS_MIN, PER_USER_LIMIT_MAX,
    POOL_LIST_LIMIT_MAX, QTY_MAX, TIME_MS_MAX, TOTAL_MAX, WAIT_MS_MAX,
};

/// The identifier rule, as the contract states it.
pub(crate) fn id_rule() -> String {
    format!(
        "an identifier: 1 to {ID_LEN_MAX} bytes of ASCII letters, digits, '.', '_', ':' or '-', \
         starting with an ASCII letter or digit"
    )
}

/// What the field named `field` (the last segment of its path) takes, when the API gives it one
/// rule wherever it appears. `ttl_ms` differs between holds and locks, so the path decides.
pub(crate) fn rule(path: &str, field: &str) -> Option<String> {
    let time = || format!("a time in Unix epoch milliseconds (an integer from 0 to {TIME_MS_MAX})");
    Some(match field {
        "total" => format!("an integer from 0 to {TOTAL_MAX}"),
        "qty" => format!("an integer from 1 to {QTY_MAX}"),
        "per_user_limit" => format!("an integer from 1 to {PER_USER_LIMIT_MAX}, or null"),
        "low_stock_threshold" => format!("an integer from 0 to {TOTAL_MAX}, or null"),
        "starts_at_ms" | "ends_at_ms" => format!("{}, or null", time()),
        "ttl_ms" if path.starts_with("lock") => {
            format!("an integer from {LOCK_TTL_MS_MIN} to {LOCK_TTL_MS_MAX} (milliseconds)")
        }
        "ttl_ms" => {
            format!("an integer from {HOLD_TTL_MS_MIN} to {HOLD_TTL_MS_MAX} (milliseconds)")
        }
        "wait_ms" => format!("an integer from 0 to {WAIT_MS_MAX} (milliseconds)"),
        "delta" => format!("a non-zero integer from -{TOTAL_MAX} to {TOTAL_MAX}"),
        "token" => "the fencing token acquire answered (a non-negative integer)".to_string(),
        "confirm" | "if_absent" => "true or false".to_string(),
        "hold_id" | "pool" | "user" | "owner" | "request_id" => id_rule(),
        "items" => format!("a list of 1 to {HOLD_ITEMS_MAX} objects {{\"pool\", \"qty\"}}"),
        "ops" => format!("a list of 1 to {BATCH_OPS_MAX} ops"),
        "limit" if path.starts_with("events") => format!("an integer from 1 to {EVENT_LIMIT_MAX}"),
        "limit" if path.starts_with("holds") => {
            format!("an integer from 1 to {HOLD_LIST_LIMIT_MAX}")
        }
        "limit" => format!("an integer from 1 to {POOL_LIST_LIMIT_MAX}"),
        "status" => "one of held, confirmed, released, expired, refunded".to_string(),
        "after" if path.starts_with("events") => {
            "an event sequence number (a non-negative integer)".to_string()
        }
        "after" | "prefix" => "a string".to_string(),
        _ => return None,
    })
}

/// serde's message `message` about the value at `path` (`items[0].qty`; `.` or empty for the
/// whole body), in the contract's words. `context` names the door for the rules that depend on
/// it (`lock` for lock bodies, `events` for the feed's query), and is otherwise empty.
pub(crate) fn describe(context: &str, path: &str, message: &str) -> String {
    // serde_json ends its messages with where in the text it stopped; the path says it better.
    let message = match message.rsplit_once(" at line ") {
        Some((message, position)) if position.contains(" column ") => message,
        _ => message,
    };
    let path = path.trim_start_matches('.');
    let (parent, field) = match path.rsplit_once('.') {
        Some((parent, field)) => (parent, field),
        None => ("", path),
    };
    // A list element (`items[0]`) takes the list's rule for its shape, not a field's.
    let field_name = field.split('[').next().unwrap_or(field);
    let rule_key = if field.ends_with(']') { "" } else { field_name };
    let scoped = |text: String| {
        if path.is_empty() {
            text
        } else {
            format!("{path}: {text}")
        }
    };

    if let Some(rest) = message.strip_prefix("missing field ") {
        let missing = unquote(rest);
        return match path {
            "" => format!("{missing} is required"),
            _ => format!("{path}: {missing} is required"),
        };
    }
    // Where the path ends at the field itself, the message names it: say where it sits.
    let around = |name: &str, text: String| {
        let place = if field_name == name { parent } else { path };
        match place {
            "" => text,
            place => format!("{place}: {text}"),
        }
    };
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (unknown, known) = rest.split_once(", ").unwrap_or((rest, ""));
        let known = known_names(known);
        let text = match known.is_empty() {
            true => format!(
                "unknown field {:?}: this object takes no fields",
                unquote(unknown)
            ),
            false => format!(
                "unknown field {:?}: the fields are {}",
                unquote(unknown),
                known.join(", ")
            ),
        };
        return around(unquote(unknown), text);
    }
    // The one enum a query takes (`GET /v1/holds?status=`); any other is a batch op. The query
    // decoder adds what was sent.
    if let (Some(_), "status") = (message.strip_prefix("unknown variant "), rule_key) {
        let allowed = rule(context, rule_key).unwrap_or_default();
        return scoped(format!("must be {allowed}"));
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (unknown, known) = rest.split_once(", ").unwrap_or((rest, ""));
        return scoped(format!(
            "unknown op {:?}: the ops are {}",
            unquote(unknown),
            known_names(known).join(", ")
        ));
    }
    if let Some(rest) = message.strip_prefix("duplicate field ") {
        return around(
            unquote(rest),
            format!(
                "{:?} appears more than once: a field may appear once",
                unquote(rest)
            ),
        );
    }
    let sent_and_expected = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.split_once(", expected "));
    if let Some((sent, expected)) = sent_and_expected {
        let allowed = rule(context, rule_key).unwrap_or_else(|| expected_words(expected));
        return scoped(format!("must be {allowed}, got {}", sent_words(sent)));
    }
    if let Some(rest) = message.strip_prefix("invalid length ") {
        let allowed = rule(context, rule_key).unwrap_or_else(|| "a list".to_string());
        let length = rest.split(',').next().unwrap_or(rest);
        return scoped(format!("must be {allowed}, got {length} entries"));
    }
    // The query string's parsers (`serde_urlencoded`) speak of the text they could not read.
    let query_value = [
        "invalid digit found in string",
        "cannot parse integer from empty string",
        "number too large to fit in target type",
        "provided string was not `true` or `false`",
    ]
    .contains(&message);
    if query_value {
        if let Some(allowed) = rule(context, rule_key) {
            return scoped(format!("must be {allowed}"));
        }
    }
    scoped(message.to_string())
}

/// `` `name` `` as `name`.
fn unquote(text: &str) -> &str {
    text.trim().trim_matches('`')
}

/// The names serde lists between backticks (`` expected one of `a`, `b` ``, `` expected `a` or
/// `b` ``); none for `there are no fields`.
fn known_names(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// serde's description of the value it met, as the client wrote it.
fn sent_words(sent: &str) -> String {
    let quoted = |prefix: &str| {
        sent.strip_prefix(prefix)
            .map(|rest| rest.trim_matches('`').to_string())
    };
    if let Some(number) = quoted("floating point ").or_else(|| quoted("integer ")) {
        return number;
    }
    if let Some(text) = sent.strip_prefix("string ") {
        return format!("the string {text}");
    }
    if let Some(boolean) = quoted("boolean ") {
        return boolean;
    }
    match sent {
        "map" => "an object".to_string(),
        "sequence" => "a list".to_string(),
        "unit value" | "null" => "null".to_string(),
        other => other.to_string(),
    }
}

/// serde's description of what it expected, for a field with no rule of its own.
fn expected_words(expected: &str) -> String {
    match expected {
        "u64" | "u32" | "u16" | "u8" | "usize" => "a non-negative integer".to_string(),
        "i64" | "i32" => "an integer".to_string(),
        "a boolean" => "true or false".to_string(),
        "a sequence" => "a list".to_string(),
        "a string" | "a borrowed string" => "a string".to_string(),
        other if other.starts_with("struct ") || other.contains("object") => {
            "an object".to_string()
        }
        other if other.starts_with("internally tagged enum") => {
            "an object with an \"op\" field".to_string()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each case is (context, field path, serde's message, what the client reads).
    fn assert_describes(cases: &[(&str, &str, &str, &str)]) {
        for &(context, path, message, expected) in cases {
            assert_eq!(
                describe(context, path, message),
                expected,
                "context {context:?}, path {path:?}, message {message:?}"
            );
        }
    }

    #[test]
    fn wrong_types_name_the_field_what_was_sent_and_what_is_allowed() {
        assert_describes(&[
            (
                "",
                "total",
                "invalid type: floating point `1e+23`, expected u64 at line 1 column 13",
                "total: must be an integer from 0 to 1000000000000, got 1e+23",
            ),
            (
                "",
                "items[0].qty",
                "invalid value: integer `-1`, expected u64",
                "items[0].qty: must be an integer from 1 to 1000000000, got -1",
            ),
            (
                "",
                "confirm",
                "invalid type: string \"yes\", expected a boolean",
                "confirm: must be true or false, got the string \"yes\"",
            ),
            (
                "lock",
                "ttl_ms",
                "invalid type: null, expected u64",
                "ttl_ms: must be an integer from 100 to 3600000 (milliseconds), got null",
            ),
            (
                "",
                "items[0]",
                "invalid type: sequence, expected a JSON object",
                "items[0]: must be an object, got a list",
            ),
            (
                "",
                ".",
                "invalid type: sequence, expected a JSON object",
                "must be an object, got a list",
            ),
        ]);
        assert_eq!(
            describe("", "user", "invalid type: integer `5`, expected a string"),
            format!("user: must be {}, got 5", id_rule())
        );
    }

    #[test]
    fn missing_unknown_and_repeated_fields_are_named() {
        assert_describes(&[
            (
                "",
                ".",
                "missing field `items` at line 1 column 16",
                "items is required",
            ),
            (
                "",
                "items[0]",
                "missing field `qty`",
                "items[0]: qty is required",
            ),
            (
                "",
                "extra",
                "unknown field `extra`, expected one of `hold_id`, `user`",
                "unknown field \"extra\": the fields are hold_id, user",
            ),
            (
                "",
                "items[0].x",
                "unknown field `x`, there are no fields",
                "items[0]: unknown field \"x\": this object takes no fields",
            ),
            (
                "",
                "n",
                "duplicate field `n`",
                "\"n\" appears more than once: a field may appear once",
            ),
            (
                "",
                "items[0].x",
                "unknown field `x`, expected `pool` or `qty`",
                "items[0]: unknown field \"x\": the fields are pool, qty",
            ),
            (
                "",
                "op",
                "unknown variant `nope`, expected one of `reserve`, `confirm`",
                "op: unknown op \"nope\": the ops are reserve, confirm",
            ),
        ]);
    }

    #[test]
    fn query_values_say_what_the_parameter_takes_and_unknown_messages_are_kept() {
        assert_describes(&[
            (
                "events",
                "after",
                "invalid digit found in string",
                "after: must be an event sequence number (a non-negative integer)",
            ),
            (
                "",
                "limit",
                "invalid digit found in string",
                "limit: must be an integer from 1 to 1000",
            ),
            (
                "",
                "if_absent",
                "provided string was not `true` or `false`",
                "if_absent: must be true or false",
            ),
            (
                "",
                "hold_id",
                "\"a b\": may only contain ASCII letters",
                "hold_id: \"a b\": may only contain ASCII letters",
            ),
        ]);
    }
}
