//! One decoder for every door: generated request bodies (valid, invalid, repeated keys, numbers
//! at and beyond every bound, nulls, unknown fields, bytes that are not JSON) are sent to each
//! single endpoint that has a batch op, and the same fields as that op in `POST /v1/batch`; the
//! two answers must match, status and body.
//!
//! What may differ, and only that:
//! - a decoding refusal inside a batch starts with `ops[0]: `;
//! - a 400 (not JSON) refuses the whole batch, and says where in the batch's body, not the
//!   single body's, the JSON broke;
//! - for confirm, release, refund and extend, the op's fields include the `hold_id` the single
//!   endpoint takes from its path, so the list of known fields an "unknown field" refusal gives
//!   differs;
//! - a single endpoint reads its path before its body (a bad hold id in the path is 422 whatever
//!   the body), while an op's `hold_id` is in the body, so a batch whose body is not JSON is 400.
//!
//! Bounded: `STOCKD_DECODE_CASES` cases (default 4000) from `STOCKD_DECODE_SEED` (default fixed),
//! on two in-memory servers with the same pool and hold, which the
//! answers keep in step.

mod support;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use support::*;

/// A small deterministic generator (SplitMix64), so that a failure names a seed that replays it.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }
}

/// Values as JSON text, each of which some field takes and others refuse.
const IDS: &[&str] = &[
    r#""h""#,
    r#""p""#,
    r#""h2""#,
    r#""u1""#,
    r#""\u0068""#,
    r#""-h""#,
    r#""""#,
    r#""a b""#,
    r#""é""#,
    r#""xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx""#,
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "5",
    "6",
    "-1",
    "-0",
    "1.5",
    "1.0",
    "1e3",
    "999",
    "1000",
    "60000",
    "30000",
    "30001",
    "86400000",
    "86400001",
    "1000000000",
    "1000000001",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e400",
    "-1e999",
    "1e-400",
];

const OTHERS: &[&str] = &["null", "true", "false", r#""1""#, "[]", "{}", r#"{"a": 1}"#];

/// Rare: bytes that are not JSON, each in a different way.
const NOT_JSON: &[&str] = &[
    r#""\ud800""#,
    r#""h\udc00""#,
    "[1,]",
    "tru",
    "01",
    "\"\u{1}\"",
    r#"{"a" 1}"#,
];

const HOLD_FIELDS: &[&str] = &["hold_id", "user", "items", "ttl_ms", "confirm", "wait_ms"];

fn value(gen: &mut Gen, depth: usize) -> String {
    match gen.below(100) {
        0..=29 => gen.pick(IDS).to_string(),
        30..=59 => gen.pick(NUMBERS).to_string(),
        60..=74 => gen.pick(OTHERS).to_string(),
        75..=77 => gen.pick(NOT_JSON).to_string(),
        78 => format!("{}{}", "[".repeat(130), "]".repeat(130)),
        _ if depth < 2 => items(gen, depth + 1),
        _ => "[]".to_string(),
    }
}

/// An `items` list: mostly objects with pool and qty, sometimes anything.
fn items(gen: &mut Gen, depth: usize) -> String {
    let count = gen.below(4);
    let entries: Vec<String> = (0..count)
        .map(|_| {
            if gen.chance(85) {
                let mut fields = vec![
                    format!(
                        r#""pool": {}"#,
                        if gen.chance(80) {
                            r#""p""#
                        } else {
                            gen.pick(IDS)
                        }
                    ),
                    format!(
                        r#""qty": {}"#,
                        if gen.chance(60) {
                            "1"
                        } else {
                            gen.pick(NUMBERS)
                        }
                    ),
                ];
                match gen.below(10) {
                    0 => {
                        fields.remove(gen.below(2));
                    }
                    1 => fields.push(format!(r#""qty": {}"#, gen.pick(NUMBERS))),
                    2 => fields.push(format!(r#""x": {}"#, value(gen, depth + 1))),
                    3 => fields.reverse(),
                    _ => {}
                }
                format!("{{{}}}", fields.join(", "))
            } else {
                value(gen, depth + 1)
            }
        })
        .collect();
    format!("[{}]", entries.join(", "))
}

/// The fields of one request (each `"key": value`), for an op that takes `known`.
fn fields(gen: &mut Gen, known: &[&str], hold: bool) -> Vec<String> {
    let mut fields = Vec::new();
    if hold && gen.chance(60) {
        // Most reserves are near a valid one, so that many reach the engine.
        fields.push(format!(r#""hold_id": "h{}""#, gen.below(3)));
        fields.push(format!(r#""items": {}"#, items(gen, 1)));
    }
    for _ in 0..gen.below(4) {
        let key = match gen.below(10) {
            0 => gen.pick(&["x", "ttl", "op2", "Hold_id", "ttl_ms "]),
            _ => gen.pick(known),
        };
        let value = match key {
            "items" if gen.chance(70) => items(gen, 1),
            "ttl_ms" if gen.chance(50) => {
                gen.pick(&["1000", "60000", "86400000", "100"]).to_string()
            }
            "restock" if gen.chance(50) => gen.pick(&["true", "false"]).to_string(),
            _ => value(gen, 0),
        };
        let at = gen.below(fields.len() + 1);
        fields.insert(at, format!(r#""{key}": {value}"#));
    }
    fields
}

/// `message` without where serde or the syntax check stopped in the text.
fn without_position(message: &str) -> &str {
    match message.rsplit_once(" at line ") {
        Some((message, _)) => message,
        None => message,
    }
}

/// The message of an "unknown field" refusal up to the list of the fields there are.
fn without_known_fields(message: &str) -> &str {
    for tail in [": the fields are ", ": this object takes no fields"] {
        if let Some((head, _)) = message.split_once(tail) {
            return head;
        }
    }
    message
}

async fn fresh_server() -> stockd_server::Api {
    let (_, router) = open_server();
    let answer = send(
        &router,
        Method::PUT,
        "/v1/pools/p",
        None,
        json!({"total": 5}).to_string(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED);
    let answer = post(
        &router,
        "/v1/holds",
        json!({"hold_id": "h", "items": [{"pool": "p", "qty": 1}]}),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED);
    router
}

#[tokio::test]
async fn the_same_fields_get_the_same_answer_alone_and_in_a_batch() {
    let seed: u64 = std::env::var("STOCKD_DECODE_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0x5EED_0009);
    let cases: usize = std::env::var("STOCKD_DECODE_CASES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(4000);
    let mut gen = Gen(seed);
    let mut seen = std::collections::BTreeMap::<(String, u16), usize>::new();
    let mut servers = (fresh_server().await, fresh_server().await);
    for case in 0..cases {
        let op = gen.pick(&[
            "reserve", "reserve", "confirm", "release", "refund", "extend",
        ]);
        let path_hold = gen.pick(&["h", "h", "h", "nope", "-h"]);
        let (uri, body, op_text) = match op {
            "reserve" => {
                let fields = fields(&mut gen, HOLD_FIELDS, true);
                let mut with_op = fields.clone();
                let at = gen.below(with_op.len() + 1);
                with_op.insert(at, r#""op": "reserve""#.to_string());
                (
                    "/v1/holds".to_string(),
                    format!("{{{}}}", fields.join(", ")),
                    format!("{{{}}}", with_op.join(", ")),
                )
            }
            op => {
                let known: &[&str] = match op {
                    "extend" => &["ttl_ms"],
                    "refund" => &["restock"],
                    _ => &["x"],
                };
                let fields = if op != "extend" && gen.chance(60) {
                    Vec::new()
                } else {
                    fields(&mut gen, known, false)
                };
                let mut with_hold = vec![format!(r#""hold_id": "{path_hold}""#)];
                with_hold.extend(fields.iter().cloned());
                let at = gen.below(with_hold.len() + 1);
                with_hold.insert(at, format!(r#""op": "{op}""#));
                // No body and `null` are no fields to confirm, release and refund; extend's
                // body must be an object.
                let body = match (fields.is_empty() && op != "extend", gen.below(3)) {
                    (true, 0) => String::new(),
                    (true, 1) => "null".to_string(),
                    _ => format!("{{{}}}", fields.join(", ")),
                };
                (
                    format!("/v1/holds/{path_hold}/{op}"),
                    body,
                    format!("{{{}}}", with_hold.join(", ")),
                )
            }
        };
        let batch_body = format!(r#"{{"ops": [{op_text}]}}"#);
        let context = format!("seed {seed} case {case}: {op} {uri} {body} / {batch_body}");

        // Both servers get the same commands if the decoders agree, so they stay in step; they
        // start afresh now and then, so that the pool has stock again.
        if case % 20 == 0 {
            servers = (fresh_server().await, fresh_server().await);
        }
        let (single, batch) = &servers;
        let alone = send(single, Method::POST, &uri, None, body.clone()).await;
        let batched = send(batch, Method::POST, "/v1/batch", None, batch_body.clone()).await;
        assert!(
            !alone.status.is_server_error() && !batched.status.is_server_error(),
            "{context}: {} / {}",
            alone.text(),
            batched.text()
        );
        *seen
            .entry((op.to_string(), alone.status.as_u16()))
            .or_default() += 1;

        if alone.status == StatusCode::BAD_REQUEST {
            // Not JSON: the whole batch is refused, for the same reason.
            assert_eq!(
                batched.status,
                StatusCode::BAD_REQUEST,
                "{context}: {}",
                batched.text()
            );
            assert_eq!(batched.code(), "invalid_json", "{context}");
            assert_eq!(
                without_position(batched.json()["message"].as_str().unwrap_or_default()),
                without_position(alone.json()["message"].as_str().unwrap_or_default()),
                "{context}"
            );
            continue;
        }
        if path_hold == "-h" && batched.status == StatusCode::BAD_REQUEST {
            // The single endpoint refused its path before reading its body; the op's hold_id is
            // in the body, which is not JSON.
            assert_eq!(alone.status, StatusCode::UNPROCESSABLE_ENTITY, "{context}");
            assert_eq!(batched.code(), "invalid_json", "{context}");
            continue;
        }
        assert_eq!(
            batched.status,
            StatusCode::OK,
            "{context}: {}",
            batched.text()
        );
        let result = batched.json()["results"][0].clone();
        assert_eq!(
            result["status"],
            alone.status.as_u16(),
            "{context}: alone {} / batched {result}",
            alone.text()
        );
        let mut expected: Value = if alone.bytes.is_empty() {
            Value::Null
        } else {
            alone.json()
        };
        let got = &result["body"];
        if let (Some(message), Some(got_message)) =
            (expected["message"].as_str(), got["message"].as_str())
        {
            let prefixed = format!("ops[0]: {message}");
            let same = if op != "reserve" && message.contains("unknown field") {
                without_known_fields(got_message) == without_known_fields(&prefixed)
            } else {
                got_message == prefixed || got_message == message
            };
            assert!(
                same,
                "{context}: alone {message:?} / batched {got_message:?}"
            );
            expected["message"] = got["message"].clone();
        }
        assert_eq!(got, &expected, "{context}");
    }
    // The generator reaches every kind of answer it is meant to: successes, refusals by the
    // decoder (400 and 422) and by the engine (404, 409).
    for (op, status) in [
        ("reserve", 201),
        ("reserve", 400),
        ("reserve", 409),
        ("reserve", 422),
        ("confirm", 200),
        ("confirm", 404),
        ("confirm", 422),
        ("extend", 200),
        ("extend", 422),
    ] {
        assert!(
            seen.contains_key(&(op.to_string(), status)),
            "no {op} case got {status} in {cases} cases: {seen:?}"
        );
    }
}
