//! Locks, from their answers alone (locks make no events): fencing tokens strictly increase per
//! lock in acquisition order, no lease is granted while another is surely still valid, an owner
//! cannot renew or release a lease after a newer one was granted, and a live lease is not refused
//! to its owner.
//!
//! A lease granted with token T ends at the deadline its latest renew set (`now + ttl_ms`, which
//! may shorten it) or when released. Only bounds the history proves are used: at a moment within
//! `[from, until]`, the lease lasts at least until the smallest of: the deadline of the last
//! acknowledged grant or renew answered before `from`; the deadline of any acknowledged renew
//! still in flight then; `sent + ttl_ms` of any renew without a trusted answer sent before
//! `until`; and the send time of any release (acknowledged or not) sent before `until`. This
//! relies on an owner sending its renews one at a time, as the recorder's clients do.

use std::collections::HashMap;

use serde_json::Value;

use crate::{answered, Bounds, History, Op, Request};

/// A renew that may have applied: acknowledged with a deadline, or without a trusted answer.
struct Renew<'a> {
    op: &'a Op,
    ttl_ms: u64,
    expires: Option<u64>,
}

struct Grant<'a> {
    index: usize,
    op: &'a Op,
    owner: &'a str,
    token: u64,
    expires: u64,
}

/// Checks every lock answer; returns how many leases were granted.
pub(crate) fn check_locks(
    history: &History,
    bounds: Bounds,
    violations: &mut Vec<String>,
) -> usize {
    let mut grants: HashMap<&str, Vec<Grant>> = HashMap::new();
    // Per (lock, token): renews that may have applied, and the send times of releases that may
    // have.
    let mut renews: HashMap<(&str, u64), Vec<Renew>> = HashMap::new();
    let mut releases: HashMap<(&str, u64), Vec<u64>> = HashMap::new();
    let mut fail = |index: usize, op: &Op, why: String| {
        violations.push(format!(
            "op #{index} (client {}, {:?}) answered {:?}: {why}",
            op.process, op.request, op.outcome
        ));
    };

    for (index, op) in history.ops.iter().enumerate() {
        let answer = answered(op);
        let granted = |body: &Value| {
            (
                body.get("token").and_then(Value::as_u64),
                body.get("expires_at_ms").and_then(Value::as_u64),
            )
        };
        match (&op.request, answer) {
            (
                Request::LockAcquire {
                    name,
                    owner,
                    ttl_ms,
                },
                Some((200, body)),
            )
            | (
                Request::LockRenew {
                    name,
                    owner,
                    ttl_ms,
                    ..
                },
                Some((200, body)),
            ) => {
                let (Some(token), Some(expires)) = granted(body) else {
                    fail(index, op, "no token or expires_at_ms".to_string());
                    continue;
                };
                let from = (op.invoke_us / 1000).saturating_sub(bounds.slack_ms);
                let until = op.complete_us / 1000 + bounds.slack_ms;
                if !(from..=until).contains(&expires.saturating_sub(*ttl_ms)) {
                    fail(
                        index,
                        op,
                        format!("expires_at_ms - ttl_ms is not within [{from}, {until}]"),
                    );
                }
                if let Request::LockRenew { token: sent, .. } = &op.request {
                    if *sent != token {
                        fail(index, op, format!("renew of token {sent} answered {token}"));
                    }
                    renews.entry((name, token)).or_default().push(Renew {
                        op,
                        ttl_ms: *ttl_ms,
                        expires: Some(expires),
                    });
                } else {
                    grants.entry(name).or_default().push(Grant {
                        index,
                        op,
                        owner,
                        token,
                        expires,
                    });
                }
            }
            (
                Request::LockRenew {
                    name,
                    token,
                    ttl_ms,
                    ..
                },
                None,
            ) => {
                renews.entry((name, *token)).or_default().push(Renew {
                    op,
                    ttl_ms: *ttl_ms,
                    expires: None,
                });
            }
            (Request::LockRelease { name, token, .. }, None)
            | (Request::LockRelease { name, token, .. }, Some((200, _))) => {
                releases
                    .entry((name, *token))
                    .or_default()
                    .push(op.invoke_us);
            }
            (Request::LockAcquire { .. }, Some((409, body))) if body["error"] == "lock_held" => {}
            (Request::LockRenew { .. } | Request::LockRelease { .. }, Some((409, body)))
                if body["error"] == "not_lock_owner" => {}
            (Request::LockRelease { .. }, Some((status, body))) if status != 200 => {
                fail(index, op, format!("unexpected answer {status} {body}"));
            }
            (Request::LockAcquire { .. } | Request::LockRenew { .. }, Some((status, body))) => {
                fail(index, op, format!("unexpected answer {status} {body}"));
            }
            _ => {}
        }
    }

    // The earliest a lease can have ended, at a moment within [from_us, until_us] (module doc).
    let lease_end_lower = |grant: &Grant, name: &str, from_us: u64, until_us: u64| -> u64 {
        let mut bound = u64::MAX;
        // (answered_us, deadline) of the last acknowledged decision known before `from_us`.
        let mut latest = None;
        if grant.op.complete_us < from_us {
            latest = Some((grant.op.complete_us, grant.expires));
        } else {
            bound = grant.expires;
        }
        for renew in renews.get(&(name, grant.token)).into_iter().flatten() {
            let known_before = renew.op.complete_us < from_us;
            let maybe_during = renew.op.invoke_us < until_us;
            let later_than_latest =
                latest.is_none_or(|(answered_us, _)| renew.op.complete_us > answered_us);
            match renew.expires {
                Some(expires) if known_before && later_than_latest => {
                    latest = Some((renew.op.complete_us, expires));
                }
                Some(_) if known_before => {}
                Some(expires) if maybe_during => bound = bound.min(expires),
                None if maybe_during => {
                    bound = bound.min(renew.op.invoke_us / 1000 + renew.ttl_ms);
                }
                _ => {}
            }
        }
        if let Some((_, expires)) = latest {
            bound = bound.min(expires);
        }
        for &sent_us in releases.get(&(name, grant.token)).into_iter().flatten() {
            if sent_us < until_us {
                bound = bound.min(sent_us / 1000);
            }
        }
        bound
    };

    let mut total = 0;
    for (name, list) in &grants {
        total += list.len();
        for a in list {
            for b in list {
                if a.index == b.index {
                    continue;
                }
                if a.token == b.token {
                    fail(
                        b.index,
                        b.op,
                        format!(
                            "token {} granted twice on {name} (op #{})",
                            b.token, a.index
                        ),
                    );
                    continue;
                }
                if a.op.complete_us < b.op.invoke_us && b.token < a.token {
                    fail(
                        b.index,
                        b.op,
                        format!(
                            "token went backwards on {name}: {} after op #{} got {}",
                            b.token, a.index, a.token
                        ),
                    );
                }
                // b granted after a (tokens give the order) while a's lease was surely still
                // valid.
                if b.token > a.token {
                    let end = lease_end_lower(a, name, b.op.invoke_us, b.op.complete_us);
                    let granted_by = b.op.complete_us / 1000 + bounds.slack_ms;
                    if granted_by < end {
                        fail(
                            b.index,
                            b.op,
                            format!(
                                "two owners at once on {name}: token {} granted by {granted_by} \
                                 while {}'s token {} (op #{}) was valid until at least {end}",
                                b.token, a.owner, a.token, a.index
                            ),
                        );
                    }
                }
            }
        }
    }

    // Renews and releases: acknowledged only while not superseded; refused only when not live.
    for (index, op) in history.ops.iter().enumerate() {
        let (name, owner, token) = match &op.request {
            Request::LockRenew {
                name, owner, token, ..
            }
            | Request::LockRelease { name, owner, token } => (name.as_str(), owner, *token),
            _ => continue,
        };
        let Some((status, body)) = answered(op) else {
            continue;
        };
        let list = grants.get(name).map(Vec::as_slice).unwrap_or(&[]);
        if status == 200 {
            if let Some(newer) = list
                .iter()
                .find(|g| g.token > token && g.op.complete_us < op.invoke_us)
            {
                fail(
                    index,
                    op,
                    format!(
                        "accepted token {token} after token {} was granted (op #{})",
                        newer.token, newer.index
                    ),
                );
            }
        } else if body["error"] == "not_lock_owner" {
            let mine = list
                .iter()
                .find(|g| g.token == token && g.owner == owner.as_str());
            let decided_by = op.complete_us / 1000 + bounds.slack_ms;
            let end = mine.map_or(0, |grant| {
                lease_end_lower(grant, name, op.invoke_us, op.complete_us)
            });
            if decided_by < end {
                fail(
                    index,
                    op,
                    format!("refused, yet the lease was valid until at least {end}"),
                );
            }
        }
    }
    total
}
