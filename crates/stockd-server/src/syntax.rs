//! What the API counts as JSON, decided in one pass over the bytes: the line between 400
//! `invalid_json` (not JSON) and 422 `invalid_request` (JSON of the wrong shape or value).
//!
//! JSON here is RFC 8259 text in UTF-8 with
//! - strings free of lone surrogates (`"\ud800"` cannot become text, so no reader can agree on
//!   what it says),
//! - at most [`DEPTH_MAX`] levels of nesting (serde_json's own limit; RFC 8259 lets a reader set
//!   one),
//! - nothing after the value but white space.
//!
//! A number of any size is JSON: `1e400` is well formed, only too large for every field of the
//! API, so it is a wrong value (422) and not a syntax error. serde_json cannot read such a
//! number at all, so [`check`] lists the ones it meets, by serde_json's own reading of each, for
//! the caller to name in its 422.
//!
//! The request decoder ([`crate::json`]) reads bodies with serde_json and calls [`check`] only
//! when serde_json refused something, to tell which of the two refusals it is; the batch calls it
//! on its whole body when an op is refused. A body serde_json reads whole into a request type is
//! JSON by this definition too (that reading is at least as strict), so the hot path never pays
//! for a second pass.

use std::fmt;
use std::ops::Range;

/// Deepest nesting of objects and arrays that is JSON to stockd, as serde_json reads it: the
/// 128th level is refused.
pub(crate) const DEPTH_MAX: usize = 127;

/// Why bytes are not JSON, and where (line and column, from 1, counted in bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotJson {
    pub(crate) why: &'static str,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl fmt::Display for NotJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.why, self.line, self.column
        )
    }
}

impl std::error::Error for NotJson {}

/// What a successful [`check`] found that serde_json will not read: numbers too large for a
/// 64-bit float, as byte ranges of the input, in document order.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub(crate) huge_numbers: Vec<Range<usize>>,
}

/// Checks that `bytes` are one JSON value by the rules above.
pub(crate) fn check(bytes: &[u8]) -> Result<Scan, NotJson> {
    let mut reader = Reader {
        bytes,
        at: 0,
        scan: Scan::default(),
    };
    if let Err(error) = std::str::from_utf8(bytes) {
        reader.at = error.valid_up_to();
        return Err(reader.fail("a byte that is not UTF-8"));
    }
    reader.value()?;
    reader.blank();
    if reader.at < bytes.len() {
        return Err(reader.fail("trailing characters after the JSON value"));
    }
    Ok(reader.scan)
}

/// Where in an open container the reader is.
#[derive(Clone, Copy)]
enum Open {
    Object,
    Array,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    scan: Scan,
}

impl Reader<'_> {
    fn fail(&self, why: &'static str) -> NotJson {
        let upto = &self.bytes[..self.at.min(self.bytes.len())];
        let line = 1 + upto.iter().filter(|&&byte| byte == b'\n').count();
        let line_start = upto
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(0, |newline| newline + 1);
        NotJson {
            why,
            line,
            column: upto.len() - line_start + 1,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eof(&self) -> NotJson {
        self.fail("the body ends before the JSON value does")
    }

    /// One whole value; containers are followed with an explicit stack, so that nesting costs
    /// no recursion.
    fn value(&mut self) -> Result<(), NotJson> {
        let mut open: Vec<Open> = Vec::new();
        loop {
            // A value is expected here.
            self.blank();
            match self.peek() {
                None => return Err(self.eof()),
                Some(b'{') => {
                    self.descend(&mut open, Open::Object)?;
                    self.blank();
                    if self.peek() == Some(b'}') {
                        self.at += 1;
                        open.pop();
                    } else {
                        self.key()?;
                        continue;
                    }
                }
                Some(b'[') => {
                    self.descend(&mut open, Open::Array)?;
                    self.blank();
                    if self.peek() == Some(b']') {
                        self.at += 1;
                        open.pop();
                    } else {
                        continue;
                    }
                }
                Some(b'"') => self.string()?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.word(b"true")?,
                Some(b'f') => self.word(b"false")?,
                Some(b'n') => self.word(b"null")?,
                Some(_) => return Err(self.fail("expected a JSON value")),
            }
            // A value has ended: close what it ends, or go on to the next one.
            loop {
                let Some(&innermost) = open.last() else {
                    return Ok(());
                };
                self.blank();
                match (innermost, self.peek()) {
                    (_, None) => return Err(self.eof()),
                    (Open::Object, Some(b',')) => {
                        self.at += 1;
                        self.key()?;
                        break;
                    }
                    (Open::Array, Some(b',')) => {
                        self.at += 1;
                        break;
                    }
                    (Open::Object, Some(b'}')) | (Open::Array, Some(b']')) => {
                        self.at += 1;
                        open.pop();
                    }
                    (Open::Object, Some(_)) => {
                        return Err(self.fail("expected ',' or '}' after an object's member"))
                    }
                    (Open::Array, Some(_)) => {
                        return Err(self.fail("expected ',' or ']' after a list's element"))
                    }
                }
            }
        }
    }

    fn descend(&mut self, open: &mut Vec<Open>, kind: Open) -> Result<(), NotJson> {
        if open.len() == DEPTH_MAX {
            return Err(self.fail("nested deeper than 127 levels"));
        }
        self.at += 1;
        open.push(kind);
        Ok(())
    }

    /// A member's key and its colon.
    fn key(&mut self) -> Result<(), NotJson> {
        self.blank();
        match self.peek() {
            None => return Err(self.eof()),
            Some(b'"') => self.string()?,
            Some(_) => return Err(self.fail("expected a string key")),
        }
        self.blank();
        match self.peek() {
            None => Err(self.eof()),
            Some(b':') => {
                self.at += 1;
                Ok(())
            }
            Some(_) => Err(self.fail("expected ':' after a key")),
        }
    }

    fn word(&mut self, word: &[u8]) -> Result<(), NotJson> {
        for &expected in word {
            match self.peek() {
                None => return Err(self.eof()),
                Some(byte) if byte == expected => self.at += 1,
                Some(_) => return Err(self.fail("expected a JSON value")),
            }
        }
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Result<(), NotJson> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            None => return Err(self.eof()),
            Some(b'0') => {
                self.at += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return Err(self.fail("a number with a leading zero"));
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            Some(_) => return Err(self.fail("a '-' that no digit follows")),
        }
        let mut scaled = false;
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(self.fail("a '.' that no digit follows"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            scaled = true;
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(self.fail("an exponent that no digit follows"));
            }
        }
        // Only an exponent or more than 308 digits can go beyond a 64-bit float; such a number
        // is read as serde_json reads it, so that both agree on which are too large.
        let token = &self.bytes[start..self.at];
        if (scaled || token.len() > 308) && serde_json::from_slice::<f64>(token).is_err() {
            self.scan.huge_numbers.push(start..self.at);
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u16, NotJson> {
        let mut unit = 0u16;
        for _ in 0..4 {
            let digit = match self.peek() {
                None => return Err(self.eof()),
                Some(byte @ b'0'..=b'9') => byte - b'0',
                Some(byte @ b'a'..=b'f') => byte - b'a' + 10,
                Some(byte @ b'A'..=b'F') => byte - b'A' + 10,
                Some(_) => return Err(self.fail("a \\u escape without four hex digits")),
            };
            unit = unit << 4 | u16::from(digit);
            self.at += 1;
        }
        Ok(unit)
    }

    /// A string, from its opening quote to past its closing one.
    fn string(&mut self) -> Result<(), NotJson> {
        self.at += 1;
        loop {
            match self.peek() {
                None => return Err(self.eof()),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(0x00..=0x1f) => {
                    return Err(self.fail("a control character inside a string"));
                }
                Some(b'\\') => {
                    self.at += 1;
                    match self.peek() {
                        None => return Err(self.eof()),
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.at += 1;
                        }
                        Some(b'u') => {
                            self.at += 1;
                            self.unicode_escape()?;
                        }
                        Some(_) => return Err(self.fail("an invalid escape")),
                    }
                }
                // UTF-8 was checked whole; multi-byte characters pass byte by byte.
                Some(_) => self.at += 1,
            }
        }
    }

    /// The four hex digits after `\u`, and the low surrogate's escape a high surrogate needs.
    fn unicode_escape(&mut self) -> Result<(), NotJson> {
        match self.hex4()? {
            0xD800..=0xDBFF => {
                if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
                    return Err(self.fail("a lone surrogate in a \\u escape"));
                }
                self.at += 2;
                match self.hex4()? {
                    0xDC00..=0xDFFF => Ok(()),
                    _ => Err(self.fail("a lone surrogate in a \\u escape")),
                }
            }
            0xDC00..=0xDFFF => Err(self.fail("a lone surrogate in a \\u escape")),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_json(text: &[u8]) -> bool {
        check(text).is_ok()
    }

    #[test]
    fn json_as_rfc_8259_writes_it() {
        for good in [
            "0",
            "-0",
            "1.5e-3",
            "1E+2",
            "\"\"",
            "\"\\u00e8\\ud83d\\ude00\\/\\b\"",
            " {\"a\" : [1, {}, [], null, true, false] }\r\n",
            "\"\u{7f}é\"",
        ] {
            assert!(is_json(good.as_bytes()), "{good}");
        }
        for bad in [
            "",
            " ",
            "01",
            "1.",
            ".5",
            "1e",
            "-",
            "+1",
            "[1,]",
            "{\"a\":1,}",
            "{a:1}",
            "{\"a\" 1}",
            "[1 2]",
            "\"\t\"",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\ud800\"",
            "\"\\ud800\\u0041\"",
            "\"\\udc00\"",
            "nul",
            "truex",
            "{} {}",
            "\"abc",
            "[",
            "NaN",
            "Infinity",
        ] {
            assert!(!is_json(bad.as_bytes()), "{bad:?}");
        }
        assert!(!is_json(b"\"\xff\""));
        assert!(!is_json(b"\xef\xbb\xbf{}"), "a byte order mark is not JSON");
    }

    #[test]
    fn numbers_beyond_a_float_are_json_and_listed() {
        let text =
            br#"{"a": 1e400, "b": [-1e999, 1e308, 1e-400, 99999999999999999999999], "c": "1e400"}"#;
        let scan = check(text).unwrap();
        let huge: Vec<&[u8]> = scan
            .huge_numbers
            .iter()
            .map(|range| &text[range.clone()])
            .collect();
        assert_eq!(huge, [&b"1e400"[..], &b"-1e999"[..]]);
        let long = format!("[{}]", "9".repeat(400));
        assert_eq!(check(long.as_bytes()).unwrap().huge_numbers, vec![1..401]);
    }

    #[test]
    fn nesting_stops_where_serde_json_stops() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        for depth in [DEPTH_MAX - 1, DEPTH_MAX, DEPTH_MAX + 1, 10_000] {
            let text = nested(depth);
            let ours = is_json(text.as_bytes());
            let theirs = serde_json::from_str::<serde_json::Value>(&text).is_ok();
            assert_eq!(ours, theirs, "depth {depth}");
            assert_eq!(ours, depth <= DEPTH_MAX, "depth {depth}");
        }
    }

    #[test]
    fn agrees_with_serde_json_where_serde_json_can_read() {
        // Every well-formed text serde_json reads is JSON here, and every text serde_json refuses
        // for its syntax is refused here, over a family of near misses.
        let pieces = [
            "{", "}", "[", "]", ",", ":", "\"a\"", "1", "-", "0", ".5", "e3", "true", "nul", " ",
            "\"\\u", "d800", "\\", "\"", "\n",
        ];
        let mut seed = 7u64;
        for _ in 0..20_000 {
            let mut text = String::new();
            for _ in 0..(seed % 9) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push_str(pieces[(seed >> 33) as usize % pieces.len()]);
            }
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let theirs = serde_json::from_str::<serde_json::Value>(&text).is_ok();
            assert_eq!(is_json(text.as_bytes()), theirs, "{text:?}");
        }
    }

    #[test]
    fn says_where() {
        let error = check(b"{\n  \"a\": 01}").unwrap_err();
        assert_eq!((error.line, error.column), (2, 9));
        assert_eq!(
            error.to_string(),
            "a number with a leading zero at line 2 column 9"
        );
    }
}
