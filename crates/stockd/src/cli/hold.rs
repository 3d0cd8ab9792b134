//! `stockd hold ...`: reserve, confirm, release, refund, extend and read holds.

use std::fmt::Write as _;
use stockd_client::{Call, HoldItem, HoldStatus, HoldView, ReserveBody};

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
    };
    session
        .show(call, |answer| {
            Ok(hold_line(&answer.decode()?, None, human::now_ms()))
        })
        .await
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
