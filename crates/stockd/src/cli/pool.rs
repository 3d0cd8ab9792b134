//! `stockd pool ...`: create, read, list, restock and delete pools.

use std::fmt::Write as _;
use stockd_client::{Call, PoolPage, PoolSpecBody, PoolView, SegmentList};

use super::{human, Exit, Session};

/// Pool administration (`stockd pool ...`); writes need an admin token when auth is on.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum PoolCommand {
    /// Create or replace a pool (rules left out are unset).
    Put {
        /// The pool's id (1 to 128 bytes of [A-Za-z0-9._:-], first alphanumeric).
        pool: String,
        /// Total units of the pool.
        #[arg(long)]
        total: u64,
        /// Most units one user may hold or have bought at once.
        #[arg(long)]
        per_user_limit: Option<u64>,
        /// The sale opens at this time (Unix epoch ms).
        #[arg(long)]
        starts_at_ms: Option<u64>,
        /// The sale closes at this time (Unix epoch ms).
        #[arg(long)]
        ends_at_ms: Option<u64>,
        /// Emit a low_stock event when available falls to this or below.
        #[arg(long)]
        low_stock_threshold: Option<u64>,
        /// Split the pool into this many segments (1 to 64), fixed when the pool is created: on
        /// a Redis Cluster they spread one hot pool over the primaries. Left out, a new pool has
        /// one and an existing pool keeps its count.
        #[arg(long)]
        segments: Option<u32>,
        /// Create only when missing; an existing pool is left unchanged.
        #[arg(long)]
        if_absent: bool,
    },
    /// Show one pool.
    Get {
        /// The pool's id (1 to 128 bytes of [A-Za-z0-9._:-], first alphanumeric).
        pool: String,
    },
    /// Show a pool's segments and each one's counts.
    Segments {
        /// The pool's id (1 to 128 bytes of [A-Za-z0-9._:-], first alphanumeric).
        pool: String,
    },
    /// List pools in id order, one page at a time.
    List {
        /// Only pools whose id starts with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Start after this pool id (the `next` cursor of the previous page).
        #[arg(long)]
        after: Option<String>,
        /// Page size (server default 100, max 1000).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Add units to a pool, or remove available ones with a negative delta.
    Restock {
        /// The pool's id (1 to 128 bytes of [A-Za-z0-9._:-], first alphanumeric).
        pool: String,
        /// Units to add (negative to remove).
        #[arg(long, allow_negative_numbers = true)]
        delta: i64,
        /// Names this restock so that running it again (a retry) changes nothing; the same id
        /// with another pool or delta is refused (request_id_conflict).
        #[arg(long)]
        request_id: Option<String>,
    },
    /// Delete a pool (refused while units are held).
    Delete {
        /// The pool's id (1 to 128 bytes of [A-Za-z0-9._:-], first alphanumeric).
        pool: String,
    },
}

/// Runs one `stockd pool` subcommand.
pub(super) async fn run(session: &Session, command: PoolCommand) -> Exit {
    match command {
        PoolCommand::Put {
            pool,
            total,
            per_user_limit,
            starts_at_ms,
            ends_at_ms,
            low_stock_threshold,
            segments,
            if_absent,
        } => {
            let spec = PoolSpecBody {
                total,
                per_user_limit,
                starts_at_ms,
                ends_at_ms,
                low_stock_threshold,
                segments,
            };
            session
                .show(Call::put_pool(&pool, &spec, if_absent), |answer| {
                    let note = match (answer.status == 201, if_absent) {
                        (true, _) => "created",
                        (false, true) => "exists, unchanged",
                        (false, false) => "updated",
                    };
                    Ok(pool_line(&answer.decode()?, Some(note), human::now_ms()))
                })
                .await
        }
        PoolCommand::Get { pool } => {
            session
                .show(Call::get_pool(&pool), |answer| {
                    Ok(pool_line(&answer.decode()?, None, human::now_ms()))
                })
                .await
        }
        PoolCommand::Segments { pool } => {
            session
                .show(Call::get_pool_segments(&pool), |answer| {
                    Ok(segment_table(&pool, &answer.decode()?))
                })
                .await
        }
        PoolCommand::List {
            prefix,
            after,
            limit,
        } => {
            let call = Call::list_pools(prefix.as_deref(), after.as_deref(), limit);
            session
                .show(call, |answer| Ok(pool_table(&answer.decode()?)))
                .await
        }
        PoolCommand::Restock {
            pool,
            delta,
            request_id,
        } => {
            session
                .show(
                    Call::restock(&pool, delta, request_id.as_deref()),
                    |answer| {
                        Ok(restock_line(
                            &answer.decode()?,
                            delta,
                            request_id.as_deref(),
                            answer.replayed,
                            human::now_ms(),
                        ))
                    },
                )
                .await
        }
        PoolCommand::Delete { pool } => {
            session
                .show(Call::delete_pool(&pool), |_| {
                    Ok(format!("pool {pool} deleted"))
                })
                .await
        }
    }
}

/// What a restock's answer says happened: `restocked` only when this call applied the delta.
/// A retry with the request id of a restock already applied answers as the first run did (200,
/// the pool as it is now) plus `Stockd-Replayed: true` (`replayed`): then nothing changed, and
/// the line says the delta was applied before.
fn restock_line(
    view: &PoolView,
    delta: i64,
    request_id: Option<&str>,
    replayed: bool,
    now_ms: u64,
) -> String {
    let change = if delta > 0 {
        format!("+{delta}")
    } else {
        delta.to_string()
    };
    match (request_id, replayed) {
        (Some(request_id), true) => format!(
            "pool {}: restock {change} for request {request_id} was already applied (nothing \
             changed); now {}",
            view.pool,
            pool_numbers(view, now_ms)
        ),
        (Some(request_id), false) => pool_line(
            view,
            Some(&format!("restocked {change} for request {request_id}")),
            now_ms,
        ),
        // Only a restock with a request id can be a replay.
        (None, _) => pool_line(view, Some(&format!("restocked {change}")), now_ms),
    }
}

/// `pool sku-1: total 100, available 95, held 3, sold 2; per-user limit 2, starts <time>`, the
/// sale window's times relative to `now_ms`.
fn pool_line(view: &PoolView, note: Option<&str>, now_ms: u64) -> String {
    let mut line = format!("pool {}", view.pool);
    if let Some(note) = note {
        let _ = write!(line, " {note}");
    }
    let _ = write!(line, ": {}", pool_numbers(view, now_ms));
    line
}

/// `total 100, available 95, held 3, sold 2; per-user limit 2, ...`: a pool's counts, then its
/// rules, the sale window's times relative to `now_ms`.
fn pool_numbers(view: &PoolView, now_ms: u64) -> String {
    let mut line = format!(
        "total {}, available {}, held {}, sold {}",
        view.total, view.available, view.held, view.sold
    );
    let rules: Vec<String> = [
        (view.segments > 1).then(|| format!("{} segments", view.segments)),
        view.per_user_limit.map(|n| format!("per-user limit {n}")),
        view.starts_at_ms
            .map(|t| format!("sale starts {}", human::when(t, now_ms))),
        view.ends_at_ms
            .map(|t| format!("sale ends {}", human::when(t, now_ms))),
        view.low_stock_threshold
            .map(|n| format!("low-stock threshold {n}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !rules.is_empty() {
        let _ = write!(line, "; {}", rules.join(", "));
    }
    line
}

/// `pool P: N segments`, then one aligned line per segment with its partition and counts.
fn segment_table(pool: &str, list: &SegmentList) -> String {
    let count = list.segments.len();
    let plural = if count == 1 { "" } else { "s" };
    let mut out = format!("pool {pool}: {count} segment{plural}");
    for segment in &list.segments {
        let _ = write!(
            out,
            "\n  segment {:>2}  partition {:>2}  total {:>8}  available {:>8}  held {:>8}  sold {:>8}",
            segment.segment,
            segment.partition,
            segment.total,
            segment.available,
            segment.held,
            segment.sold
        );
    }
    out
}

/// An aligned table: pool ids left-aligned, counts right-aligned, then the next-page cursor.
fn pool_table(page: &PoolPage) -> String {
    if page.pools.is_empty() {
        return "no pools".to_owned();
    }
    const HEADERS: [&str; 5] = ["POOL", "TOTAL", "AVAILABLE", "HELD", "SOLD"];
    let rows: Vec<[String; 5]> = page
        .pools
        .iter()
        .map(|view| {
            [
                view.pool.to_string(),
                view.total.to_string(),
                view.available.to_string(),
                view.held.to_string(),
                view.sold.to_string(),
            ]
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut table = String::new();
    let header = HEADERS.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = format!("{:<width$}", row[0], width = widths[0]);
        for (cell, width) in row.iter().zip(widths).skip(1) {
            let _ = write!(line, "  {cell:>width$}");
        }
        table.push_str(line.trim_end());
        table.push('\n');
    }
    match &page.next {
        Some(next) => {
            let _ = write!(table, "more: --after {next}");
        }
        None => {
            table.pop();
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(pool: &str, total: u64, available: u64, held: u64, sold: u64) -> PoolView {
        serde_json::from_value(serde_json::json!({
            "pool": pool, "total": total, "available": available, "held": held, "sold": sold,
            "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null,
            "low_stock_threshold": null, "partition": 0,
        }))
        .expect("a valid pool view")
    }

    #[test]
    fn pool_summary_reads_as_one_line() {
        let mut pool = view("sku-1", 100, 95, 3, 2);
        assert_eq!(
            pool_line(&pool, None, 0),
            "pool sku-1: total 100, available 95, held 3, sold 2"
        );
        pool.per_user_limit = Some(2);
        pool.low_stock_threshold = Some(10);
        assert_eq!(
            pool_line(&pool, Some("created"), 0),
            "pool sku-1 created: total 100, available 95, held 3, sold 2; \
             per-user limit 2, low-stock threshold 10"
        );
        pool.starts_at_ms = Some(1_795_644_384_923);
        pool.ends_at_ms = Some(1_795_644_384_923 + 7_200_000);
        assert_eq!(
            pool_line(&pool, None, 1_795_644_384_923 - 90_000),
            "pool sku-1: total 100, available 95, held 3, sold 2; per-user limit 2, \
             sale starts 2026-11-25 22:06:24 UTC (in 1m 30s), \
             sale ends 2026-11-26 00:06:24 UTC (in 2h 1m), low-stock threshold 10"
        );
    }

    #[test]
    fn a_restock_says_restocked_only_when_this_run_applied_it() {
        let pool = view("sku-2", 12, 12, 0, 0);
        let line =
            |delta, request_id, replayed| restock_line(&pool, delta, request_id, replayed, 0);
        assert_eq!(
            line(3, None, false),
            "pool sku-2 restocked +3: total 12, available 12, held 0, sold 0"
        );
        assert_eq!(
            line(-2, None, false),
            "pool sku-2 restocked -2: total 12, available 12, held 0, sold 0"
        );
        assert_eq!(
            line(4, Some("po-7781"), false),
            "pool sku-2 restocked +4 for request po-7781: total 12, available 12, held 0, sold 0"
        );
        assert_eq!(
            line(4, Some("po-7781"), true),
            "pool sku-2: restock +4 for request po-7781 was already applied (nothing changed); \
             now total 12, available 12, held 0, sold 0"
        );
    }

    #[test]
    fn pool_list_is_an_aligned_table() {
        let page = PoolPage {
            pools: vec![view("a", 5, 5, 0, 0), view("long-pool-id", 1000, 990, 7, 3)],
            next: Some("long-pool-id".into()),
        };
        assert_eq!(
            pool_table(&page),
            "POOL          TOTAL  AVAILABLE  HELD  SOLD\n\
             a                 5          5     0     0\n\
             long-pool-id   1000        990     7     3\n\
             more: --after long-pool-id"
        );
        let empty = PoolPage {
            pools: vec![],
            next: None,
        };
        assert_eq!(pool_table(&empty), "no pools");
    }
}
