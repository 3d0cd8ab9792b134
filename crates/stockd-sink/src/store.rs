//! The writes: one page of one partition in one transaction, with the partition's cursor.
//!
//! The transaction first locks the partition's cursor row and checks it is where this sink
//! thinks it is. If another sink moved it (two sinks started by mistake), nothing is written
//! and the caller reloads the cursor: the page is someone else's now. Then the events, the holds
//! and the pools, then the cursor moves to the page's last seq, and all of it commits together.
//! A crash before the commit leaves nothing; after it, everything and the cursor past it.

use serde_json::json;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

use crate::fold::{to_i64, Fold};

/// How a page's transaction ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Applied; the cursor is now at the page's end.
    Applied,
    /// The cursor was not where this sink thought: nothing written. Reload it.
    CursorMoved { found: u64 },
    /// The cursor was where this sink thought, but some event after it was already in
    /// `stockd_events`: the tables were changed apart from their cursor. Nothing written.
    AlreadyThere,
}

/// Makes sure a cursor row exists for each partition (at 0 for a new one).
pub async fn ensure_cursors(client: &Client, partitions: u32) -> Result<(), tokio_postgres::Error> {
    let partitions: Vec<i32> = (0..partitions).map(|p| p as i32).collect();
    client
        .execute(
            "INSERT INTO stockd_sink_cursors (partition, after_seq)
             SELECT p, 0 FROM unnest($1::int4[]) AS p
             ON CONFLICT (partition) DO NOTHING",
            &[&partitions],
        )
        .await?;
    Ok(())
}

/// The partition's cursor: the seq of the last event applied (0: none yet).
pub async fn cursor(client: &Client, partition: u32) -> Result<u64, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT after_seq FROM stockd_sink_cursors WHERE partition = $1",
            &[&(partition as i32)],
        )
        .await?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

/// Locks the cursor row; `Some(found)` when it is not at `expected`.
async fn lock_cursor(
    transaction: &Transaction<'_>,
    partition: u32,
    expected: u64,
) -> Result<Option<u64>, tokio_postgres::Error> {
    let row = transaction
        .query_one(
            "SELECT after_seq FROM stockd_sink_cursors WHERE partition = $1 FOR UPDATE",
            &[&(partition as i32)],
        )
        .await?;
    let found = row.get::<_, i64>(0).max(0) as u64;
    Ok((found != expected).then_some(found))
}

async fn move_cursor(
    transaction: &Transaction<'_>,
    partition: u32,
    to: u64,
) -> Result<(), tokio_postgres::Error> {
    transaction
        .execute(
            "UPDATE stockd_sink_cursors SET after_seq = $2, updated_at = now() WHERE partition = $1",
            &[&(partition as i32), &to_i64(to)],
        )
        .await?;
    Ok(())
}

/// Applies `fold`, the events of `partition` after `expected` up to `to`.
///
/// Every statement of the page is sent at once, with its parameter types (so that none needs a
/// round trip of its own to be prepared): tokio-postgres pipelines the statements of futures
/// polled together, in the order they are first polled, which `try_join!` does in the order
/// written. A page costs about one round trip and its commit. The cursor row is locked first and checked when the answers are in: if it was
/// not at `expected`, or a seq of the page was already there, the whole transaction is rolled
/// back, so whatever the other statements did is gone with it.
pub async fn apply(
    client: &mut Client,
    partition: u32,
    expected: u64,
    to: u64,
    fold: &Fold,
) -> Result<Written, tokio_postgres::Error> {
    let transaction = client.transaction().await?;
    let partition_sql = partition as i32;

    let seqs: Vec<i64> = fold.events.iter().map(|e| e.seq).collect();
    let ats: Vec<i64> = fold.events.iter().map(|e| e.at_ms).collect();
    let kinds: Vec<&str> = fold.events.iter().map(|e| e.kind.as_str()).collect();
    let bodies: Vec<&str> = fold.events.iter().map(|e| e.body.as_str()).collect();

    let holds: Vec<_> = fold.holds.values().collect();
    let hold_ids: Vec<&str> = holds.iter().map(|h| h.hold_id.as_str()).collect();
    let statuses: Vec<&str> = holds.iter().map(|h| h.status).collect();
    let users: Vec<Option<&str>> = holds.iter().map(|h| h.user.as_deref()).collect();
    let items: Vec<String> = holds.iter().map(|h| json!(h.items).to_string()).collect();
    let created: Vec<Option<i64>> = holds.iter().map(|h| h.created_at_ms).collect();
    let expires: Vec<i64> = holds.iter().map(|h| h.expires_at_ms).collect();
    let finished: Vec<Option<i64>> = holds.iter().map(|h| h.finished_at_ms).collect();
    let hold_updated: Vec<i64> = holds.iter().map(|h| h.updated_at_ms).collect();

    let extensions: Vec<_> = fold.extensions.values().collect();
    let extension_ids: Vec<&str> = extensions.iter().map(|x| x.hold_id.as_str()).collect();
    let extension_expires: Vec<i64> = extensions.iter().map(|x| x.expires_at_ms).collect();
    let extension_updated: Vec<i64> = extensions.iter().map(|x| x.updated_at_ms).collect();

    // In pool id order (a BTreeMap), so that partitions lock pool rows in one order.
    let names: Vec<&str> = fold.pools.keys().map(String::as_str).collect();
    let deltas: Vec<_> = fold.pools.values().collect();
    let total: Vec<i64> = deltas.iter().map(|d| d.total).collect();
    let available: Vec<i64> = deltas.iter().map(|d| d.available).collect();
    let held: Vec<i64> = deltas.iter().map(|d| d.held).collect();
    let sold: Vec<i64> = deltas.iter().map(|d| d.sold).collect();
    let deleted: Vec<Option<bool>> = deltas.iter().map(|d| d.deleted).collect();
    let pool_updated: Vec<i64> = deltas.iter().map(|d| d.updated_at_ms).collect();
    let to_sql = to_i64(to);

    // Made in this order, sent in this order: the cursor's lock first.
    let lock = async {
        transaction
            .query_typed_one(
                "SELECT after_seq FROM stockd_sink_cursors WHERE partition = $1 FOR UPDATE",
                &[(&partition_sql, Type::INT4)],
            )
            .await
    };
    // A seq already there is left alone here and counted: fewer rows than events means the
    // cursor and the rows disagree, and nothing of the page is kept.
    let events = async {
        transaction
            .execute_typed(
                "INSERT INTO stockd_events (partition, seq, at_ms, type, body)
             SELECT $1, s, a, t, b::jsonb
             FROM unnest($2::int8[], $3::int8[], $4::text[], $5::text[]) AS e(s, a, t, b)
             ON CONFLICT (partition, seq) DO NOTHING",
                &[
                    (&partition_sql, Type::INT4),
                    (&seqs, Type::INT8_ARRAY),
                    (&ats, Type::INT8_ARRAY),
                    (&kinds, Type::TEXT_ARRAY),
                    (&bodies, Type::TEXT_ARRAY),
                ],
            )
            .await
    };
    let holds = async {
        transaction
            .execute_typed(
                "INSERT INTO stockd_holds AS h (hold_id, status, user_id, items, created_at_ms,
                 expires_at_ms, finished_at_ms, partition, updated_at_ms)
             SELECT i, s, u, it::jsonb, c, e, f, $1, up
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int8[],
                 $7::int8[], $8::int8[], $9::int8[]) AS r(i, s, u, it, c, e, f, up)
             ON CONFLICT (hold_id) DO UPDATE SET
                 status = EXCLUDED.status,
                 user_id = EXCLUDED.user_id,
                 items = EXCLUDED.items,
                 created_at_ms = coalesce(EXCLUDED.created_at_ms, h.created_at_ms),
                 expires_at_ms = EXCLUDED.expires_at_ms,
                 finished_at_ms = EXCLUDED.finished_at_ms,
                 partition = EXCLUDED.partition,
                 updated_at_ms = EXCLUDED.updated_at_ms",
                &[
                    (&partition_sql, Type::INT4),
                    (&hold_ids, Type::TEXT_ARRAY),
                    (&statuses, Type::TEXT_ARRAY),
                    (&users, Type::TEXT_ARRAY),
                    (&items, Type::TEXT_ARRAY),
                    (&created, Type::INT8_ARRAY),
                    (&expires, Type::INT8_ARRAY),
                    (&finished, Type::INT8_ARRAY),
                    (&hold_updated, Type::INT8_ARRAY),
                ],
            )
            .await
    };
    // A hold the tables never saw made (the feed's window had dropped its `held`) stays
    // missing: reconcile reports it.
    let extended = async {
        transaction
            .execute_typed(
                "UPDATE stockd_holds AS h SET expires_at_ms = x.e, updated_at_ms = x.up
             FROM unnest($1::text[], $2::int8[], $3::int8[]) AS x(i, e, up)
             WHERE h.hold_id = x.i",
                &[
                    (&extension_ids, Type::TEXT_ARRAY),
                    (&extension_expires, Type::INT8_ARRAY),
                    (&extension_updated, Type::INT8_ARRAY),
                ],
            )
            .await
    };
    let pools = async {
        transaction
            .execute_typed(
                "INSERT INTO stockd_pools AS p (pool, total, available, held, sold, deleted,
                 updated_at_ms)
             SELECT n, t, a, h, s, coalesce(d, false), up
             FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::int8[],
                 $6::bool[], $7::int8[]) AS x(n, t, a, h, s, d, up)
             ORDER BY n
             ON CONFLICT (pool) DO UPDATE SET
                 total = p.total + EXCLUDED.total,
                 available = p.available + EXCLUDED.available,
                 held = p.held + EXCLUDED.held,
                 sold = p.sold + EXCLUDED.sold,
                 updated_at_ms = greatest(p.updated_at_ms, EXCLUDED.updated_at_ms)",
                &[
                    (&names, Type::TEXT_ARRAY),
                    (&total, Type::INT8_ARRAY),
                    (&available, Type::INT8_ARRAY),
                    (&held, Type::INT8_ARRAY),
                    (&sold, Type::INT8_ARRAY),
                    (&deleted, Type::BOOL_ARRAY),
                    (&pool_updated, Type::INT8_ARRAY),
                ],
            )
            .await
    };
    // `deleted` is set by the pool's own events only, which are in one partition in order:
    // the last one of the page says.
    let flags = async {
        transaction
            .execute_typed(
                "UPDATE stockd_pools AS p SET deleted = x.d
             FROM unnest($1::text[], $2::bool[]) AS x(n, d)
             WHERE p.pool = x.n AND x.d IS NOT NULL",
                &[(&names, Type::TEXT_ARRAY), (&deleted, Type::BOOL_ARRAY)],
            )
            .await
    };
    let cursor = async {
        transaction.execute_typed(
            "UPDATE stockd_sink_cursors SET after_seq = $2, updated_at = now() WHERE partition = $1",
            &[(&partition_sql, Type::INT4), (&to_sql, Type::INT8)],
        )
        .await
    };
    let (row, inserted, ..) =
        tokio::try_join!(lock, events, holds, extended, pools, flags, cursor)?;

    let found = row.get::<_, i64>(0).max(0) as u64;
    if found != expected {
        transaction.rollback().await?;
        return Ok(Written::CursorMoved { found });
    }
    if inserted != fold.events.len() as u64 {
        transaction.rollback().await?;
        return Ok(Written::AlreadyThere);
    }
    transaction.commit().await?;
    Ok(Written::Applied)
}

/// The feed no longer has the events after `after` (410 `events_expired`): records the gap and
/// moves the cursor to `oldest_seq - 1`, in one transaction, so that the gap is never forgotten
/// while the sink goes on. Reconcile reports it until a repair marks it repaired.
pub async fn record_gap(
    client: &mut Client,
    partition: u32,
    expected: u64,
    oldest_seq: u64,
) -> Result<Written, tokio_postgres::Error> {
    let transaction = client.transaction().await?;
    if let Some(found) = lock_cursor(&transaction, partition, expected).await? {
        transaction.rollback().await?;
        return Ok(Written::CursorMoved { found });
    }
    transaction
        .execute(
            "INSERT INTO stockd_sink_gaps (partition, after_seq, oldest_seq) VALUES ($1, $2, $3)
             ON CONFLICT (partition, after_seq) DO UPDATE SET oldest_seq = EXCLUDED.oldest_seq",
            &[&(partition as i32), &to_i64(expected), &to_i64(oldest_seq)],
        )
        .await?;
    move_cursor(&transaction, partition, oldest_seq.saturating_sub(1)).await?;
    transaction.commit().await?;
    Ok(Written::Applied)
}
