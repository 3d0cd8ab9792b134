//! `stockd hold ...`: reserve, confirm, release, refund, extend, read and list holds.

use std::fmt::Write as _;
use stockd_client::{Call, HoldItem, HoldPage, HoldQuery, HoldStatus, HoldView, ReserveBody};

use super::{human, Exit, Session};

/// Reservations (`stockd hold ...`).
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum HoldCommand {
    /// Reserve units from one or more pools, all or nothing.
    Reserve {
        /// Client-chosen id (an order id); retrying with the same id is idempotent.
        hold_id: String,
        /// A pool and a quantity; repeat for several pools.
        #[arg(
            long = "item",
            value_name = "POOL=QTY",
            required = true,
            value_parser = parse_item
        )]
        items: Vec<HoldItem>,
        /// The buyer (required by pools with a per-user limit).
        #[arg(long)]
        user: Option<String>,
        /// How long the hold lasts unless confirmed (server default 600000).
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Reserve and confirm in one step.
        #[arg(long)]
        confirm: bool,
        /// Wait up to this long for units released by others.
        #[arg(long)]
        wait_ms: Option<u64>,
    },
    /// Confirm a held hold (paid): its units are sold.
    Confirm {
        /// The hold's id, the one reserve was given.
        hold_id: String,
    },
    /// Release a held hold (cancelled): its units are available again.
    Release {
        /// The hold's id, the one reserve was given.
        hold_id: String,
    },
    /// Refund a confirmed hold: its sold units are available again (or, with --no-restock,
    /// leave the pool).
    Refund {
        /// The hold's id, the one reserve was given.
        hold_id: String,
        /// The units cannot be sold again: they leave the pool (sold and total both shrink).
        #[arg(long)]
        no_restock: bool,
    },
    /// Push a held hold's expiry to now + ttl_ms.
    Extend {
        /// The hold's id, the one reserve was given.
        hold_id: String,
        /// The hold's new deadline, in ms from now (1000 to 86400000).
        #[arg(long)]
        ttl_ms: u64,
    },
    /// Show one hold.
    Get {
        /// The hold's id, the one reserve was given.
        hold_id: String,
    },
    /// List the retained holds in hold id order, one page at a time (or all with --all).
    List {
        /// Only holds with an item in this pool.
        #[arg(long)]
        pool: Option<String>,
        /// Only holds of this user.
        #[arg(long)]
        user: Option<String>,
        /// Only holds in this status: held, confirmed, released, expired or refunded.
        #[arg(long, value_parser = parse_status)]
        status: Option<HoldStatus>,
        /// Start after this hold id (the `next` of the previous page).
        #[arg(long)]
        after: Option<String>,
        /// Holds per page, 1 to 1000 (server default 100).
        #[arg(long)]
        limit: Option<usize>,
        /// Follow `next` to the end: every page, one after another (with --json, each page's
        /// body on a line of its own).
        #[arg(long)]
        all: bool,
    },
}

/// Parses `--status`: one of the contract's hold statuses.
fn parse_status(text: &str) -> Result<HoldStatus, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| "expected held, confirmed, released, expired or refunded".to_owned())
}

/// Parses `--item POOL=QTY`. Only the shape is checked; ranges and id grammar are the server's.
fn parse_item(text: &str) -> Result<HoldItem, String> {
    const EXPECTED: &str = "expected POOL=QTY, e.g. sku-1=2";
    let (pool, qty) = text
        .split_once('=')
        .ok_or_else(|| format!("missing '='; {EXPECTED}"))?;
    if pool.is_empty() {
        return Err(format!("empty pool; {EXPECTED}"));
    }
    let qty: u64 = qty
        .parse()
        .map_err(|_| format!("quantity {qty:?} is not a whole number; {EXPECTED}"))?;
    Ok(HoldItem::new(pool, qty))
}

/// Runs one `stockd hold` subcommand.
pub(super) async fn run(session: &Session, command: HoldCommand) -> Exit {
    let call = match command {
        HoldCommand::Reserve {
            hold_id,
            items,
            user,
            ttl_ms,
            confirm,
            wait_ms,
        } => {
            let body = ReserveBody {
                hold_id,
                user,
                items,
                ttl_ms,
                confirm,
                wait_ms,
            };
            return session
                .show(Call::reserve(&body), |answer| {
                    // 200 instead of 201: this hold_id was already reserved with the same request.
                    let note = (answer.status != 201).then_some("existing hold, unchanged");
                    Ok(hold_line(&answer.decode()?, note, human::now_ms()))
                })
                .await;
        }
        HoldCommand::Confirm { hold_id } => Call::confirm(&hold_id),
        HoldCommand::Release { hold_id } => Call::release(&hold_id),
        HoldCommand::Refund {
            hold_id,
            no_restock,
        } => Call::refund(&hold_id, !no_restock),
        HoldCommand::Extend { hold_id, ttl_ms } => Call::extend(&hold_id, ttl_ms),
        HoldCommand::Get { hold_id } => Call::get_hold(&hold_id),
        HoldCommand::List {
            pool,
            user,
            status,
            after,
            limit,
            all,
        } => {
            let query = HoldQuery {
                pool,
                user,
                status,
                after,
                limit,
            };
            return list(session, query, all).await;
        }
    };
    session
        .show(call, |answer| {
            Ok(hold_line(&answer.decode()?, None, human::now_ms()))
        })
        .await
}

/// One page, or with `all` every page following `next` until it is null. A page may be empty
/// and still have a `next` (the server examines a bounded number of holds per page).
async fn list(session: &Session, mut query: HoldQuery, all: bool) -> Exit {
    let mut listed = 0;
    loop {
        let answer = match session.send(&Call::list_holds(&query)).await {
            Ok(answer) => answer,
            Err(exit) => return exit,
        };
        let page: HoldPage = match answer.decode() {
            Ok(page) => page,
            Err(error) => return session.report_error(error),
        };
        listed += page.holds.len();
        let last = page.next.is_none() || !all;
        let exit = session.present(&answer, |_| {
            Ok(hold_lines(
                &page,
                !all,
                last && listed == 0,
                human::now_ms(),
            ))
        });
        if !matches!(exit, Exit::Success) || last {
            return exit;
        }
        query.after = page.next;
    }
}

/// One `hold_line` per hold; `more: --after NEXT` when `more_hint` and a page follows; `no
/// holds` when `say_none` and the page is empty.
fn hold_lines(page: &HoldPage, more_hint: bool, say_none: bool, now_ms: u64) -> String {
    let mut lines: Vec<String> = page
        .holds
        .iter()
        .map(|hold| hold_line(hold, None, now_ms))
        .collect();
    if lines.is_empty() && say_none {
        lines.push("no holds".to_owned());
    }
    if let (true, Some(next)) = (more_hint, &page.next) {
        lines.push(format!("more: --after {next}"));
    }
    lines.join("\n")
}

/// `hold o-1: held, expires <time> (in 9m 59s), items sku-1 x2, sku-2 x1, user u-1`; a finished
/// hold says when it finished. Times relative to `now_ms`.
pub(super) fn hold_line(view: &HoldView, note: Option<&str>, now_ms: u64) -> String {
    let mut line = format!("hold {}: {}", view.hold_id, view.status.as_str());
    match (view.status, view.finished_at_ms) {
        (HoldStatus::Held, _) => {
            let _ = write!(
                line,
                ", expires {}",
                human::when(view.expires_at_ms, now_ms)
            );
        }
        (_, Some(finished_at_ms)) => {
            let _ = write!(line, " {}", human::when(finished_at_ms, now_ms));
        }
        (_, None) => {}
    }
    let items: Vec<String> = view
        .items
        .iter()
        .map(|item| format!("{} x{}", item.pool, item.qty))
        .collect();
    let _ = write!(line, ", items {}", items.join(", "));
    if let Some(user) = &view.user {
        let _ = write!(line, ", user {user}");
    }
    if let Some(note) = note {
        let _ = write!(line, " ({note})");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_page_is_a_line_per_hold_and_says_where_more_starts() {
        let page: HoldPage = serde_json::from_value(serde_json::json!({
            "holds": [{
                "hold_id": "o-1", "status": "released", "user": "u-1",
                "items": [{"pool": "sku-1", "qty": 2}],
                "created_at_ms": 1_000, "expires_at_ms": 601_000, "finished_at_ms": 2_000,
                "partition": 0,
            }],
            "next": "o-1",
        }))
        .expect("a valid page");
        let now_ms = 1_795_644_384_923;
        let lines = hold_lines(&page, true, true, now_ms);
        assert!(lines.starts_with("hold o-1: released "), "{lines}");
        assert!(
            lines.ends_with(", items sku-1 x2, user u-1\nmore: --after o-1"),
            "{lines}"
        );
        assert!(!hold_lines(&page, false, true, now_ms).contains("more"));
        let empty = HoldPage {
            holds: Vec::new(),
            next: None,
        };
        assert_eq!(hold_lines(&empty, true, true, now_ms), "no holds");
        assert_eq!(hold_lines(&empty, false, false, now_ms), "");
        assert!(parse_status("refunded").is_ok());
        assert!(parse_status("sold").is_err());
    }

    #[test]
    fn hold_summary_says_status_deadline_and_items() {
        let mut hold: HoldView = serde_json::from_value(serde_json::json!({
            "hold_id": "o-1", "status": "held", "user": null,
            "items": [{"pool": "sku-1", "qty": 2}, {"pool": "sku-2", "qty": 1}],
            "created_at_ms": 1_795_644_384_923_u64, "expires_at_ms": 1_795_644_984_923_u64,
            "finished_at_ms": null,
            "partition": 0,
        }))
        .expect("a valid hold view");
        let now_ms = 1_795_644_384_923 + 1_000;
        assert_eq!(
            hold_line(&hold, None, now_ms),
            "hold o-1: held, expires 2026-11-25 22:16:24 UTC (in 9m 59s), items sku-1 x2, sku-2 x1"
        );
        hold.status = HoldStatus::Confirmed;
        hold.finished_at_ms = Some(1_795_644_384_923);
        assert_eq!(
            hold_line(&hold, Some("existing hold, unchanged"), now_ms + 2_000),
            "hold o-1: confirmed 2026-11-25 22:06:24 UTC (3s ago), items sku-1 x2, sku-2 x1 \
             (existing hold, unchanged)"
        );
    }
}
