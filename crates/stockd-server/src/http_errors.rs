//! Answers hyper sends by itself, in the contract's shape.
//!
//! A request hyper cannot parse (a head over `max_header_bytes`: 431; a path over hyper's limit:
//! 414; a `Content-Length: abc`, a garbled request line or header, an unknown HTTP version:
//! 400) never reaches the router: hyper answers it with an empty body and closes the
//! connection. The contract promises `{"error", "message"}` on every error, so the connection's
//! writer ([`crate::conn`]) hands each answer's first bytes to [`replace`], which recognises
//! hyper's own error answer and returns the same status with a JSON body instead.
//!
//! Recognised by its shape, which none of stockd's own answers has: a status of 400 or more
//! with `content-length: 0`, `connection: close` and no `content-type` (every error stockd
//! writes is JSON, with its content type).

use std::fmt::Write as _;

/// hyper's error answer at the start of `head`, and what to send instead; `None` for anything
/// else (stockd's own answers, a head split across writes).
pub(crate) fn replace(head: &[u8], max_header_bytes: usize) -> Option<Vec<u8>> {
    let rest = head.strip_prefix(b"HTTP/1.1 ")?;
    let status: u16 = std::str::from_utf8(rest.get(..3)?).ok()?.parse().ok()?;
    if status < 400 {
        return None;
    }
    let end = find(head, b"\r\n\r\n")?;
    let head = std::str::from_utf8(&head[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let mut empty = false;
    let mut closes = false;
    let mut date = None;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-type" => return None,
            "content-length" => empty = value == "0",
            "connection" => closes = value.eq_ignore_ascii_case("close"),
            "date" => date = Some(value),
            _ => {}
        }
    }
    if !(empty && closes) {
        return None;
    }
    let body = body(status, max_header_bytes);
    let mut answer = String::with_capacity(256 + body.len());
    let _ = write!(
        answer,
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n",
        body.len()
    );
    if let Some(date) = date {
        let _ = write!(answer, "date: {date}\r\n");
    }
    answer.push_str("\r\n");
    answer.push_str(&body);
    Some(answer.into_bytes())
}

/// The error body for `status`, as the contract's error bodies are.
fn body(status: u16, max_header_bytes: usize) -> String {
    let (code, message, limit) = match status {
        431 => (
            "headers_too_large",
            format!(
                "the request line and headers are larger than {max_header_bytes} bytes \
                 (max_header_bytes)"
            ),
            Some(max_header_bytes),
        ),
        414 => (
            "uri_too_long",
            "the request's path and query are longer than this server reads".to_string(),
            None,
        ),
        _ => (
            "bad_request",
            "the request is not valid HTTP/1.1: its request line, a header (such as \
             Content-Length) or its framing could not be read"
                .to_string(),
            None,
        ),
    };
    let mut body = serde_json::json!({"error": code, "message": message});
    if let Some(limit) = limit {
        body["limit_bytes"] = limit.into();
    }
    body.to_string()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYPER_431: &[u8] =
        b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
        content-length: 0\r\ndate: Thu, 26 Nov 2026 07:07:45 GMT\r\n\r\n";

    #[test]
    fn hypers_empty_error_answers_get_the_contracts_body() {
        let answer = String::from_utf8(replace(HYPER_431, 16_384).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(head.contains("\r\ncontent-type: application/json\r\n"));
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())));
        assert!(head.contains("\r\nconnection: close\r\n"));
        assert!(head.contains("\r\ndate: Thu, 26 Nov 2026 07:07:45 GMT"));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"], "headers_too_large");
        assert_eq!(body["limit_bytes"], 16_384);
        assert!(body["message"].as_str().unwrap().contains("16384 bytes"));

        let bad = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let answer = String::from_utf8(replace(bad, 1).unwrap()).unwrap();
        assert!(answer.contains("\"error\":\"bad_request\""), "{answer}");
    }

    #[test]
    fn stockds_own_answers_are_left_alone() {
        for head in [
            &b"HTTP/1.1 422 Unprocessable Entity\r\ncontent-type: application/json\r\n\
               content-length: 0\r\nconnection: close\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n",
            b"{\"error\":\"x\"}",
            b"HTTP/1.1 4",
        ] {
            assert_eq!(replace(head, 1), None, "{}", String::from_utf8_lossy(head));
        }
    }
}
