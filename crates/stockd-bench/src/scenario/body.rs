//! The request bodies and ids the load sends, written by hand: the load generator shares the
//! machine with the server it measures, so every microsecond it spends per request is taken
//! from the server, and serde's writer took about 2,000 instructions for a hundred bytes. What
//! is written here is what `#[derive(Serialize)]` would write (a test compares); it never reads
//! an answer.

/// `POST /v1/holds`'s body, or a `reserve` op of `POST /v1/batch` (with `op`).
pub(super) struct ReserveBody<'a> {
    pub op: bool,
    pub hold_id: &'a str,
    /// `(pool, qty)`, the pool as an index into `pools`.
    pub items: &'a [(usize, u64)],
    pub pools: &'a [String],
    pub user: Option<&'a str>,
    pub confirm: bool,
    pub ttl_ms: Option<u64>,
}

impl ReserveBody<'_> {
    /// Appends the body as JSON: the fields, in the order `#[derive(Serialize)]` would write
    /// them (a test compares).
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.op {
            b"{\"op\":\"reserve\",\"hold_id\":"
        } else {
            b"{\"hold_id\":"
        });
        json_str(out, self.hold_id);
        out.extend_from_slice(b",\"items\":[");
        for (n, &(pool, qty)) in self.items.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"pool\":");
            json_str(out, &self.pools[pool]);
            out.extend_from_slice(b",\"qty\":");
            out.extend_from_slice(itoa::Buffer::new().format(qty).as_bytes());
            out.push(b'}');
        }
        out.push(b']');
        if let Some(user) = self.user {
            out.extend_from_slice(b",\"user\":");
            json_str(out, user);
        }
        if self.confirm {
            out.extend_from_slice(b",\"confirm\":true");
        }
        if let Some(ttl_ms) = self.ttl_ms {
            out.extend_from_slice(b",\"ttl_ms\":");
            out.extend_from_slice(itoa::Buffer::new().format(ttl_ms).as_bytes());
        }
        out.push(b'}');
    }
}

/// Appends `text` as a JSON string. The bench's ids are made of characters JSON never escapes
/// and go in as they are; anything else goes through serde's escaping.
fn json_str(out: &mut Vec<u8>, text: &str) {
    let plain = text
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b':'));
    if plain {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, text).expect("writing to memory cannot fail");
    }
}

/// `{prefix}{n}`, as `format!` would make it at a fraction of its cost (ids are made for every
/// request).
pub(super) fn numbered(prefix: &str, n: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    let mut id = String::with_capacity(prefix.len() + digits.len());
    id.push_str(prefix);
    id.push_str(digits);
    id
}

/// `POST /v1/batch`'s body: `{"ops":[...]}` with each of `ops` written as a reserve op.
pub(super) fn write_batch<'a>(ops: impl ExactSizeIterator<Item = ReserveBody<'a>>) -> Vec<u8> {
    let mut json = Vec::with_capacity(ops.len() * 128 + 16);
    json.extend_from_slice(b"{\"ops\":[");
    for (n, op) in ops.enumerate() {
        if n > 0 {
            json.push(b',');
        }
        ReserveBody { op: true, ..op }.write(&mut json);
    }
    json.extend_from_slice(b"]}");
    json
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;

    /// What `ReserveBody::write` replaces: serde's writer of the same fields.
    #[derive(Serialize)]
    struct Derived<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        op: Option<&'static str>,
        hold_id: &'a str,
        items: Vec<DerivedItem<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        user: Option<&'a str>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        confirm: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
    }

    #[derive(Serialize)]
    struct DerivedItem<'a> {
        pool: &'a str,
        qty: u64,
    }

    #[test]
    fn reserve_bodies_are_written_as_serde_would() {
        let pools = vec![
            "bench-1f-hot".to_string(),
            "odd \"pool\"\\\n".to_string(),
            "caf\u{e9}".to_string(),
        ];
        let ids = ["bench-1f-0", "b:1.2_3", "q\"uote", ""];
        let item_sets: [&[(usize, u64)]; 3] = [&[(0, 1)], &[(0, 2), (1, 3), (2, u64::MAX)], &[]];
        for op in [false, true] {
            for hold_id in ids {
                for items in item_sets {
                    for user in [None, Some("u42"), Some("\u{1}ctl")] {
                        for confirm in [false, true] {
                            for ttl_ms in [None, Some(0), Some(90_000)] {
                                let body = ReserveBody {
                                    op,
                                    hold_id,
                                    items,
                                    pools: &pools,
                                    user,
                                    confirm,
                                    ttl_ms,
                                };
                                let mut written = Vec::new();
                                body.write(&mut written);
                                let derived = Derived {
                                    op: op.then_some("reserve"),
                                    hold_id,
                                    items: items
                                        .iter()
                                        .map(|&(pool, qty)| DerivedItem {
                                            pool: &pools[pool],
                                            qty,
                                        })
                                        .collect(),
                                    user,
                                    confirm,
                                    ttl_ms,
                                };
                                assert_eq!(
                                    String::from_utf8(written).unwrap(),
                                    serde_json::to_string(&derived).unwrap()
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn batch_bodies_are_their_ops_as_serde_would_write_them() {
        let pools = vec!["bench-1f-batch".to_string()];
        let ops = ["bench-1f-0", "bench-1f-1"].map(|hold_id| ReserveBody {
            op: false,
            hold_id,
            items: &[(0, 1)],
            pools: &pools,
            user: None,
            confirm: true,
            ttl_ms: None,
        });
        let derived: Vec<Derived> = ["bench-1f-0", "bench-1f-1"]
            .map(|hold_id| Derived {
                op: Some("reserve"),
                hold_id,
                items: vec![DerivedItem {
                    pool: &pools[0],
                    qty: 1,
                }],
                user: None,
                confirm: true,
                ttl_ms: None,
            })
            .into();
        #[derive(Serialize)]
        struct Batch<'a> {
            ops: Vec<Derived<'a>>,
        }
        assert_eq!(
            String::from_utf8(write_batch(ops.into_iter())).unwrap(),
            serde_json::to_string(&Batch { ops: derived }).unwrap()
        );
        assert_eq!(write_batch(std::iter::empty()), b"{\"ops\":[]}");
    }

    #[test]
    fn numbered_ids_are_their_prefix_and_number() {
        assert_eq!(numbered("bench-7-", 0), "bench-7-0");
        assert_eq!(numbered("u", u64::MAX), format!("u{}", u64::MAX));
        assert_eq!(numbered("", 120), "120");
    }
}
