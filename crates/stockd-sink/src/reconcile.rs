//! `stockd reconcile`: compares stockd's pools and retained holds with the sink's tables, lists
//! every difference, and with `repair` writes stockd's side into the tables.
//!
//! stockd is read through its API (`GET /v1/pools`, `GET /v1/holds`, page by page), the tables
//! by the ids of each page, so memory grows with the number of ids, not of rows. The comparison
//! is of two moving things: a change made while it runs, or still in the sink's queue, shows up
//! as a difference, so the report says when the sink is behind, and a difference worth acting on
//! is one that a second run still shows.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::{json, Value};
use stockd_client::{Client, ClientError, ErrorCode, HoldItem, HoldQuery, HoldView, PoolView};
use tokio_postgres::types::ToSql;

use crate::fold::to_i64;
use crate::schema;

/// Why a reconcile could not run (differences are not errors: they are its result).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("stockd: {0}")]
    Stockd(#[from] ClientError),
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Schema(#[from] schema::SchemaError),
    #[error("schema {0:?} has no sink tables: has `stockd sink postgres` run with this --dsn and --schema?")]
    NoTables(String),
}

/// One difference between stockd and the tables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    /// `pool_missing`, `pool_differs`, `pool_not_deleted`, `hold_missing`, `hold_differs`,
    /// `hold_unknown` or `gap`.
    pub kind: &'static str,
    /// The pool or hold id, or `partition K` for a gap.
    pub subject: String,
    /// The fields that differ, for `*_differs`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<&'static str>,
    /// stockd's side (`null`: it has none).
    pub stockd: Value,
    /// The table's side (`null`: no row).
    pub database: Value,
    /// Whether `--repair` wrote stockd's side into the tables.
    pub repaired: bool,
}

impl Difference {
    /// One line for people.
    pub fn line(&self) -> String {
        let mut line = format!("{} {}", self.kind, self.subject);
        if !self.fields.is_empty() {
            let fields: Vec<String> = self
                .fields
                .iter()
                .map(|field| {
                    format!(
                        "{field}: stockd {} database {}",
                        self.stockd.get(*field).unwrap_or(&Value::Null),
                        self.database.get(*field).unwrap_or(&Value::Null)
                    )
                })
                .collect();
            line.push_str(": ");
            line.push_str(&fields.join(", "));
        } else if self.kind == "gap" {
            line.push_str(&format!(": {}", self.database));
        } else if self.kind == "hold_unknown" {
            line.push_str(": the table says held, stockd has no such hold");
        } else if self.kind == "pool_not_deleted" {
            line.push_str(": the table has it, stockd has no such pool");
        } else {
            line.push_str(": stockd has it, the table has no row");
        }
        if self.repaired {
            line.push_str(" (repaired)");
        }
        line
    }
}

/// A partition the sink has not read to the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Behind {
    pub partition: u32,
    pub cursor: u64,
}

/// The whole result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub pools: usize,
    pub holds: usize,
    pub differences: Vec<Difference>,
    /// Partitions whose stored cursor is behind the feed while reconcile ran: their differences
    /// may be events still on their way.
    pub behind: Vec<Behind>,
}

impl Report {
    /// Whether every difference (if any) was repaired.
    pub fn clean(&self) -> bool {
        self.differences.iter().all(|d| d.repaired)
    }

    /// The one-line summary.
    pub fn summary(&self) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for difference in &self.differences {
            match counts.iter_mut().find(|(kind, _)| *kind == difference.kind) {
                Some((_, count)) => *count += 1,
                None => counts.push((difference.kind, 1)),
            }
        }
        let repaired = self.differences.iter().filter(|d| d.repaired).count();
        let mut line = format!(
            "reconcile: {} pools and {} holds compared, {} differences",
            self.pools,
            self.holds,
            self.differences.len()
        );
        if !counts.is_empty() {
            let listed: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
            line.push_str(&format!(" ({})", listed.join(", ")));
        }
        if repaired > 0 {
            line.push_str(&format!(", {repaired} repaired"));
        }
        if !self.behind.is_empty() {
            let listed: Vec<String> = self
                .behind
                .iter()
                .map(|b| format!("{} at {}", b.partition, b.cursor))
                .collect();
            line.push_str(&format!(
                "; the sink is behind on partition {}: differences there may be in flight",
                listed.join(", ")
            ));
        }
        line
    }
}

const PAGE: usize = 1000;

/// Runs a reconcile of `stockd` against the tables in `schema`.
pub async fn run(
    stockd: &Client,
    db: &mut tokio_postgres::Client,
    schema_name: &str,
    repair: bool,
) -> Result<Report, ReconcileError> {
    schema::check_name(schema_name)?;
    schema::use_schema(db, schema_name).await?;
    let has_tables: bool = db
        .query_one("SELECT to_regclass('stockd_sink_cursors') IS NOT NULL", &[])
        .await?
        .get(0);
    if !has_tables {
        return Err(ReconcileError::NoTables(schema_name.to_owned()));
    }
    let mut report = Report {
        pools: 0,
        holds: 0,
        differences: Vec::new(),
        behind: Vec::new(),
    };
    let mut pool_fixes: Vec<PoolView> = Vec::new();
    let mut pool_removals: Vec<String> = Vec::new();
    let mut hold_fixes: Vec<HoldView> = Vec::new();

    // Pools, page by page.
    let mut seen_pools = HashSet::new();
    let mut after: Option<String> = None;
    loop {
        let page = stockd
            .list_pools(None, after.as_deref(), Some(PAGE))
            .await?;
        let ids: Vec<&str> = page.pools.iter().map(|p| p.pool.as_str()).collect();
        let rows = db
            .query(
                "SELECT pool, total, available, held, sold, deleted FROM stockd_pools
                 WHERE pool = ANY($1)",
                &[&ids],
            )
            .await?;
        let rows: HashMap<String, Value> = rows
            .iter()
            .map(|row| {
                let pool: String = row.get(0);
                let value = json!({
                    "pool": pool,
                    "total": row.get::<_, i64>(1),
                    "available": row.get::<_, i64>(2),
                    "held": row.get::<_, i64>(3),
                    "sold": row.get::<_, i64>(4),
                    "deleted": row.get::<_, bool>(5),
                });
                (pool, value)
            })
            .collect();
        for pool in &page.pools {
            report.pools += 1;
            seen_pools.insert(pool.pool.clone());
            let ours = json!({
                "pool": pool.pool, "total": pool.total, "available": pool.available,
                "held": pool.held, "sold": pool.sold, "deleted": false,
            });
            let compared = compare(
                &pool.pool,
                ours,
                rows.get(&pool.pool),
                ("pool_missing", "pool_differs"),
                &["total", "available", "held", "sold", "deleted"],
                repair,
            );
            if let Some(difference) = compared {
                report.differences.push(difference);
                pool_fixes.push(pool.clone());
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let live = db
        .query(
            "SELECT pool, total, available, held, sold FROM stockd_pools WHERE NOT deleted
             ORDER BY pool",
            &[],
        )
        .await?;
    for row in &live {
        let pool: String = row.get(0);
        if seen_pools.contains(&pool) {
            continue;
        }
        report.differences.push(Difference {
            kind: "pool_not_deleted",
            subject: pool.clone(),
            fields: Vec::new(),
            stockd: Value::Null,
            database: json!({
                "pool": pool, "total": row.get::<_, i64>(1), "available": row.get::<_, i64>(2),
                "held": row.get::<_, i64>(3), "sold": row.get::<_, i64>(4), "deleted": false,
            }),
            repaired: repair,
        });
        pool_removals.push(pool);
    }

    // Holds, page by page.
    let mut seen_holds = HashSet::new();
    let mut after: Option<String> = None;
    loop {
        let query = HoldQuery {
            after: after.clone(),
            limit: Some(PAGE),
            ..HoldQuery::default()
        };
        let page = stockd.list_holds(&query).await?;
        let ids: Vec<&str> = page.holds.iter().map(|h| h.hold_id.as_str()).collect();
        let rows = db
            .query(
                "SELECT hold_id, status, user_id, items::text, created_at_ms, expires_at_ms,
                     finished_at_ms
                 FROM stockd_holds WHERE hold_id = ANY($1)",
                &[&ids],
            )
            .await?;
        let rows: HashMap<String, Value> = rows
            .iter()
            .map(|row| {
                let hold_id: String = row.get(0);
                let items: Value =
                    serde_json::from_str(&row.get::<_, String>(3)).unwrap_or(Value::Null);
                let value = json!({
                    "hold_id": hold_id,
                    "status": row.get::<_, String>(1),
                    "user": row.get::<_, Option<String>>(2),
                    "items": sorted_items(&items),
                    "created_at_ms": row.get::<_, Option<i64>>(4),
                    "expires_at_ms": row.get::<_, i64>(5),
                    "finished_at_ms": row.get::<_, Option<i64>>(6),
                });
                (hold_id, value)
            })
            .collect();
        for hold in &page.holds {
            report.holds += 1;
            seen_holds.insert(hold.hold_id.clone());
            let ours = hold_value(hold);
            let compared = compare(
                &hold.hold_id,
                ours,
                rows.get(&hold.hold_id),
                ("hold_missing", "hold_differs"),
                &[
                    "status",
                    "user",
                    "items",
                    "expires_at_ms",
                    "finished_at_ms",
                    "created_at_ms",
                ],
                repair,
            );
            if let Some(difference) = compared {
                report.differences.push(difference);
                hold_fixes.push(hold.clone());
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let held = db
        .query(
            "SELECT hold_id, expires_at_ms FROM stockd_holds WHERE status = 'held' ORDER BY hold_id",
            &[],
        )
        .await?;
    for row in &held {
        let hold_id: String = row.get(0);
        if seen_holds.contains(&hold_id) {
            continue;
        }
        // stockd forgets a hold only once it is finished and its retention is over, so the
        // table missed how it finished; there is nothing left to repair it from.
        report.differences.push(Difference {
            kind: "hold_unknown",
            subject: hold_id.clone(),
            fields: Vec::new(),
            stockd: Value::Null,
            database: json!({"hold_id": hold_id, "status": "held", "expires_at_ms": row.get::<_, i64>(1)}),
            repaired: false,
        });
    }

    // Gaps the sink recorded and nobody repaired.
    let gaps = db
        .query(
            "SELECT partition, after_seq, oldest_seq, detected_at::text FROM stockd_sink_gaps
             WHERE repaired_at IS NULL ORDER BY partition, after_seq",
            &[],
        )
        .await?;
    for row in &gaps {
        let partition: i32 = row.get(0);
        let after: i64 = row.get(1);
        let oldest: i64 = row.get(2);
        report.differences.push(Difference {
            kind: "gap",
            subject: format!("partition {partition}"),
            fields: Vec::new(),
            stockd: Value::Null,
            database: json!({
                "partition": partition,
                "missed": format!("{}..={}", after + 1, oldest - 1),
                "detected_at": row.get::<_, String>(3),
            }),
            repaired: repair,
        });
    }

    // Is the sink caught up? Its cursor against the feed, one event's look ahead.
    let partitions = stockd.partitions().await?;
    let cursors = db
        .query("SELECT partition, after_seq FROM stockd_sink_cursors", &[])
        .await?;
    let cursors: HashMap<i32, i64> = cursors.iter().map(|r| (r.get(0), r.get(1))).collect();
    for partition in 0..partitions {
        let cursor = cursors
            .get(&(partition as i32))
            .copied()
            .unwrap_or(0)
            .max(0) as u64;
        let ahead = match stockd.events(Some(partition), cursor, Some(1), None).await {
            Ok(page) => !page.events.is_empty(),
            Err(error) if error.error_code() == Some(ErrorCode::EventsExpired) => true,
            Err(error) => return Err(error.into()),
        };
        if ahead {
            report.behind.push(Behind { partition, cursor });
        }
    }

    if repair && report.differences.iter().any(|d| d.repaired) {
        write_repairs(
            db,
            &pool_fixes,
            &pool_removals,
            &hold_fixes,
            !gaps.is_empty(),
        )
        .await?;
    }
    Ok(report)
}

/// The difference between stockd's `ours` and the table's `row` for one pool or hold, if any:
/// `kinds.0` when there is no row, `kinds.1` naming the `fields` that differ. A `created_at_ms`
/// the row does not have is not compared: a row made from a status event alone (its `held` was
/// outside the feed's window when the sink read it) has no creation time.
fn compare(
    subject: &str,
    ours: Value,
    row: Option<&Value>,
    kinds: (&'static str, &'static str),
    fields: &[&'static str],
    repaired: bool,
) -> Option<Difference> {
    let (kind, fields, database) = match row {
        None => (kinds.0, Vec::new(), Value::Null),
        Some(row) => {
            let fields: Vec<&'static str> = fields
                .iter()
                .copied()
                .filter(|field| !(*field == "created_at_ms" && row[*field].is_null()))
                .filter(|field| ours[*field] != row[*field])
                .collect();
            if fields.is_empty() {
                return None;
            }
            (kinds.1, fields, row.clone())
        }
    };
    Some(Difference {
        kind,
        subject: subject.to_owned(),
        fields,
        stockd: ours,
        database,
        repaired,
    })
}

/// A hold as reconcile compares it (items in pool order: the order of a hold's lines is not
/// part of what it is).
fn hold_value(hold: &HoldView) -> Value {
    json!({
        "hold_id": hold.hold_id,
        "status": hold.status.as_str(),
        "user": hold.user,
        "items": sorted_items(&json!(hold.items)),
        "created_at_ms": hold.created_at_ms,
        "expires_at_ms": hold.expires_at_ms,
        "finished_at_ms": hold.finished_at_ms,
    })
}

fn sorted_items(items: &Value) -> Value {
    let mut items: Vec<HoldItem> = serde_json::from_value(items.clone()).unwrap_or_default();
    items.sort_by(|a, b| a.pool.cmp(&b.pool));
    json!(items)
}

/// Writes stockd's side of every repaired difference, in one transaction.
async fn write_repairs(
    db: &mut tokio_postgres::Client,
    pools: &[PoolView],
    removals: &[String],
    holds: &[HoldView],
    gaps: bool,
) -> Result<(), tokio_postgres::Error> {
    let transaction = db.transaction().await?;
    let now = now_ms();
    for pool in pools {
        let params: [&(dyn ToSql + Sync); 6] = [
            &pool.pool,
            &to_i64(pool.total),
            &to_i64(pool.available),
            &to_i64(pool.held),
            &to_i64(pool.sold),
            &now,
        ];
        transaction
            .execute(
                "INSERT INTO stockd_pools (pool, total, available, held, sold, deleted, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5, false, $6)
                 ON CONFLICT (pool) DO UPDATE SET total = $2, available = $3, held = $4,
                     sold = $5, deleted = false, updated_at_ms = $6",
                &params,
            )
            .await?;
    }
    for pool in removals {
        // What the sums of a deleted pool come to once every partition is read.
        transaction
            .execute(
                "UPDATE stockd_pools SET total = 0, available = 0, held = 0, sold = 0,
                     deleted = true, updated_at_ms = $2 WHERE pool = $1",
                &[pool, &now],
            )
            .await?;
    }
    for hold in holds {
        let items = json!(hold.items).to_string();
        let params: [&(dyn ToSql + Sync); 9] = [
            &hold.hold_id,
            &hold.status.as_str(),
            &hold.user,
            &items,
            &to_i64(hold.created_at_ms),
            &to_i64(hold.expires_at_ms),
            &hold.finished_at_ms.map(to_i64),
            &(hold.partition as i32),
            &now,
        ];
        transaction
            .execute(
                "INSERT INTO stockd_holds (hold_id, status, user_id, items, created_at_ms,
                     expires_at_ms, finished_at_ms, partition, updated_at_ms)
                 VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8, $9)
                 ON CONFLICT (hold_id) DO UPDATE SET status = $2, user_id = $3,
                     items = $4::text::jsonb, created_at_ms = $5, expires_at_ms = $6,
                     finished_at_ms = $7, partition = $8, updated_at_ms = $9",
                &params,
            )
            .await?;
    }
    if gaps {
        transaction
            .execute(
                "UPDATE stockd_sink_gaps SET repaired_at = now() WHERE repaired_at IS NULL",
                &[],
            )
            .await?;
    }
    transaction.commit().await
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
