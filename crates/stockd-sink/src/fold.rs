//! What a page of one partition's events does to the tables, worked out in memory before any SQL
//! runs: the rows of `stockd_events`, each touched hold's row, and each touched pool's changes.
//!
//! Holds: all events of one hold are in one partition, in order, so a hold's row is set from its
//! events as they come. Pools: a pool's own events (`pool_upserted`, `restocked`,
//! `pool_deleted`) are in the pool's partition, but the events of holds on it may be in other
//! partitions, read in no particular order against the pool's. So pool numbers are never set
//! from an event's absolute `total` or `available`; every event adds a delta, and sums do not
//! depend on the order they are added in. Once every partition has been read to the same quiet
//! moment, the sums are the pool's numbers.

use std::collections::BTreeMap;

use serde_json::Value;
use stockd_client::{Event, EventKind, HoldItem};

/// Why a page cannot be applied. The sink stops on it: applying part of a page, or guessing,
/// would make the tables wrong without anybody knowing.
#[derive(Debug, thiserror::Error)]
pub enum FoldError {
    #[error("event {seq} cannot be read: {why}")]
    Unreadable { seq: u64, why: String },
    #[error(
        "event {seq} ({kind}) has no {field}: this stockd is older than the sink; \
         upgrade the stockd servers first"
    )]
    MissingField {
        seq: u64,
        kind: &'static str,
        field: &'static str,
    },
}

/// One row of `stockd_events`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub seq: i64,
    pub at_ms: i64,
    pub kind: String,
    /// The event exactly as the feed gave it (seq, at_ms and type included).
    pub body: String,
}

/// A hold's row as the page leaves it. Every event of a status change carries the hold's user,
/// items and deadline, so the row is whole after one; only `created_at_ms` comes from the
/// `held` event alone (`None`: keep what the row has).
#[derive(Debug, Clone, PartialEq)]
pub struct HoldRow {
    pub hold_id: String,
    pub status: &'static str,
    pub user: Option<String>,
    pub items: Vec<HoldItem>,
    pub created_at_ms: Option<i64>,
    pub expires_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub updated_at_ms: i64,
}

/// An `extended` event of a hold whose row this page did not otherwise set.
#[derive(Debug, Clone, PartialEq)]
pub struct Extension {
    pub hold_id: String,
    pub expires_at_ms: i64,
    pub updated_at_ms: i64,
}

/// What the page adds to one pool's numbers, and the `deleted` flag its last pool event leaves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolDelta {
    pub total: i64,
    pub available: i64,
    pub held: i64,
    pub sold: i64,
    /// `Some` when a pool event of this page says whether the pool exists.
    pub deleted: Option<bool>,
    pub updated_at_ms: i64,
}

/// Everything one page does, ready to be written in one transaction.
#[derive(Debug, Default)]
pub struct Fold {
    pub events: Vec<EventRow>,
    /// By hold id; iteration in id order keeps row locks in one order.
    pub holds: BTreeMap<String, HoldRow>,
    pub extensions: BTreeMap<String, Extension>,
    /// By pool id, in order, so that two partitions' transactions lock pool rows in the same
    /// order and never deadlock.
    pub pools: BTreeMap<String, PoolDelta>,
}

impl Fold {
    /// Folds one page of events (in feed order) of one partition.
    pub fn page(events: &[Value]) -> Result<Fold, FoldError> {
        let mut fold = Fold::default();
        for raw in events {
            let event: Event =
                serde_json::from_value(raw.clone()).map_err(|error| FoldError::Unreadable {
                    seq: raw.get("seq").and_then(Value::as_u64).unwrap_or(0),
                    why: error.to_string(),
                })?;
            fold.add(&event, raw)?;
        }
        Ok(fold)
    }

    fn add(&mut self, event: &Event, raw: &Value) -> Result<(), FoldError> {
        let seq = event.seq;
        let at_ms = to_i64(event.at_ms);
        self.events.push(EventRow {
            seq: to_i64(seq),
            at_ms,
            kind: kind_name(event.kind).to_owned(),
            body: raw.to_string(),
        });
        let kind = kind_name(event.kind);
        let need = |field: &'static str| FoldError::MissingField { seq, kind, field };
        match event.kind {
            EventKind::PoolUpserted => {
                let pool = event.pool.as_deref().ok_or_else(|| need("pool"))?;
                let delta = event.delta.ok_or_else(|| need("delta"))?;
                let entry = self.pool(pool, at_ms);
                entry.total += delta;
                entry.available += delta;
                entry.deleted = Some(false);
            }
            EventKind::Restocked => {
                let pool = event.pool.as_deref().ok_or_else(|| need("pool"))?;
                let delta = event.delta.ok_or_else(|| need("delta"))?;
                let entry = self.pool(pool, at_ms);
                entry.total += delta;
                entry.available += delta;
            }
            EventKind::PoolDeleted => {
                let pool = event.pool.as_deref().ok_or_else(|| need("pool"))?;
                let total = to_i64(event.total.ok_or_else(|| need("total"))?);
                let available = to_i64(event.available.ok_or_else(|| need("available"))?);
                // A pool is deleted with nothing held: what is not available was sold. Taking
                // the pool's last numbers away leaves zero once every partition is read, so a
                // pool created later under the same id starts from zero, as it does in stockd.
                let entry = self.pool(pool, at_ms);
                entry.total -= total;
                entry.available -= available;
                entry.sold -= total - available;
                entry.deleted = Some(true);
            }
            EventKind::Held
            | EventKind::Confirmed
            | EventKind::Released
            | EventKind::Expired
            | EventKind::Refunded => {
                let hold_id = event.hold_id.clone().ok_or_else(|| need("hold_id"))?;
                let items = event.items.clone().ok_or_else(|| need("items"))?;
                let expires_at_ms =
                    to_i64(event.expires_at_ms.ok_or_else(|| need("expires_at_ms"))?);
                let restock = event.restock.unwrap_or(true);
                for item in &items {
                    let qty = to_i64(item.qty);
                    let entry = self.pool(&item.pool, at_ms);
                    match event.kind {
                        EventKind::Held => {
                            entry.available -= qty;
                            entry.held += qty;
                        }
                        EventKind::Confirmed => {
                            entry.held -= qty;
                            entry.sold += qty;
                        }
                        EventKind::Released | EventKind::Expired => {
                            entry.held -= qty;
                            entry.available += qty;
                        }
                        _ => {
                            entry.sold -= qty;
                            if restock {
                                entry.available += qty;
                            } else {
                                entry.total -= qty;
                            }
                        }
                    }
                }
                let (status, finished_at_ms) = match event.kind {
                    EventKind::Held => ("held", None),
                    EventKind::Confirmed => ("confirmed", Some(at_ms)),
                    EventKind::Released => ("released", Some(at_ms)),
                    // An expired hold finished at its deadline, whenever the expiry was applied.
                    EventKind::Expired => ("expired", Some(expires_at_ms)),
                    _ => ("refunded", Some(at_ms)),
                };
                let created_at_ms = match (event.kind, self.holds.get(&hold_id)) {
                    // The hold's own created_at_ms: on a Redis Cluster a hold over several
                    // partitions is created a little before its `held` event. A stockd older
                    // than the field sends none; there the event's at_ms is it.
                    (EventKind::Held, _) => Some(event.created_at_ms.map_or(at_ms, to_i64)),
                    (_, Some(row)) => row.created_at_ms,
                    (_, None) => None,
                };
                self.extensions.remove(&hold_id);
                self.holds.insert(
                    hold_id.clone(),
                    HoldRow {
                        hold_id,
                        status,
                        user: event.user.clone(),
                        items,
                        created_at_ms,
                        expires_at_ms,
                        finished_at_ms,
                        updated_at_ms: at_ms,
                    },
                );
            }
            EventKind::Extended => {
                let hold_id = event.hold_id.clone().ok_or_else(|| need("hold_id"))?;
                let expires_at_ms =
                    to_i64(event.expires_at_ms.ok_or_else(|| need("expires_at_ms"))?);
                match self.holds.get_mut(&hold_id) {
                    Some(row) => {
                        row.expires_at_ms = expires_at_ms;
                        row.updated_at_ms = at_ms;
                    }
                    None => {
                        self.extensions.insert(
                            hold_id.clone(),
                            Extension {
                                hold_id,
                                expires_at_ms,
                                updated_at_ms: at_ms,
                            },
                        );
                    }
                }
            }
            EventKind::LowStock => {}
        }
        Ok(())
    }

    fn pool(&mut self, pool: &str, at_ms: i64) -> &mut PoolDelta {
        let entry = self.pools.entry(pool.to_owned()).or_default();
        entry.updated_at_ms = entry.updated_at_ms.max(at_ms);
        entry
    }
}

/// The feed's name of an event type.
pub fn kind_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::PoolUpserted => "pool_upserted",
        EventKind::Restocked => "restocked",
        EventKind::PoolDeleted => "pool_deleted",
        EventKind::Held => "held",
        EventKind::Confirmed => "confirmed",
        EventKind::Released => "released",
        EventKind::Expired => "expired",
        EventKind::Refunded => "refunded",
        EventKind::Extended => "extended",
        EventKind::LowStock => "low_stock",
    }
}

/// PostgreSQL has no unsigned integers; every number of the feed is far below `i64::MAX`
/// (totals are at most 10^12, times are epoch milliseconds, seqs count events).
pub fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fold(events: Value) -> Fold {
        Fold::page(events.as_array().unwrap()).unwrap()
    }

    /// A pool delta's (total, available, held, sold).
    fn numbers(pool: &PoolDelta) -> (i64, i64, i64, i64) {
        (pool.total, pool.available, pool.held, pool.sold)
    }

    /// A `held` event names the hold's created_at_ms, which on a Redis Cluster is a little
    /// before the event's at_ms: the row takes the hold's.
    #[test]
    fn a_hold_row_takes_created_at_ms_from_its_held_event() {
        let items = json!([{"pool": "a", "qty": 2}]);
        let page = fold(json!([
            {"seq": 1, "at_ms": 15, "type": "held", "hold_id": "h", "items": items, "created_at_ms": 12, "expires_at_ms": 100},
            {"seq": 2, "at_ms": 16, "type": "released", "hold_id": "h", "items": items, "expires_at_ms": 100},
        ]));
        let row = &page.holds["h"];
        assert_eq!(row.created_at_ms, Some(12));
        assert_eq!(row.finished_at_ms, Some(16));
        assert_eq!(row.updated_at_ms, 16);
    }

    #[test]
    fn a_hold_row_follows_its_events_and_the_pool_adds_deltas() {
        let items = json!([{"pool": "a", "qty": 2}]);
        let page = fold(json!([
            {"seq": 1, "at_ms": 10, "type": "pool_upserted", "pool": "a", "total": 5, "available": 5, "delta": 5},
            {"seq": 2, "at_ms": 11, "type": "held", "hold_id": "h", "user": "u", "items": items, "expires_at_ms": 100},
            {"seq": 3, "at_ms": 12, "type": "extended", "hold_id": "h", "expires_at_ms": 200},
            {"seq": 4, "at_ms": 13, "type": "confirmed", "hold_id": "h", "user": "u", "items": items, "expires_at_ms": 200},
            {"seq": 5, "at_ms": 14, "type": "low_stock", "pool": "a", "total": 5, "available": 3, "low_stock_threshold": 3},
        ]));
        assert_eq!(page.events.len(), 5);
        assert_eq!(page.events[1].kind, "held");
        let row = &page.holds["h"];
        assert_eq!(row.status, "confirmed");
        assert_eq!(row.created_at_ms, Some(11));
        assert_eq!(row.expires_at_ms, 200);
        assert_eq!(row.finished_at_ms, Some(13));
        assert!(page.extensions.is_empty());
        let pool = &page.pools["a"];
        assert_eq!((numbers(pool), pool.deleted), ((5, 3, 0, 2), Some(false)));
    }

    #[test]
    fn hold_events_of_a_pool_read_before_its_creation_still_sum_to_its_numbers() {
        // Partition 1 (the hold's) is read before partition 0 (the pool's).
        let items = json!([{"pool": "a", "qty": 1}]);
        let mut pool = PoolDelta::default();
        for page in [
            json!([
                {"seq": 1, "at_ms": 2, "type": "held", "hold_id": "h", "items": items, "expires_at_ms": 9},
                {"seq": 2, "at_ms": 3, "type": "confirmed", "hold_id": "h", "items": items, "expires_at_ms": 9},
                {"seq": 3, "at_ms": 3, "type": "refunded", "hold_id": "h", "items": items, "expires_at_ms": 9, "restock": false},
            ]),
            json!([
                {"seq": 1, "at_ms": 1, "type": "pool_upserted", "pool": "a", "total": 4, "available": 4, "delta": 4},
                {"seq": 2, "at_ms": 4, "type": "pool_upserted", "pool": "a", "total": 9, "available": 9, "delta": 6},
            ]),
        ] {
            let delta = &fold(page).pools["a"];
            pool.total += delta.total;
            pool.available += delta.available;
            pool.held += delta.held;
            pool.sold += delta.sold;
        }
        // Created with 4, one sold and written off (3), then raised to 9 (+6).
        assert_eq!(numbers(&pool), (9, 9, 0, 0));
    }

    #[test]
    fn a_deleted_pool_sums_to_zero_and_an_expiry_finishes_at_the_deadline() {
        let items = json!([{"pool": "a", "qty": 3}]);
        let page = fold(json!([
            {"seq": 1, "at_ms": 1, "type": "pool_upserted", "pool": "a", "total": 10, "available": 10, "delta": 10},
            {"seq": 2, "at_ms": 2, "type": "held", "hold_id": "h", "items": items, "expires_at_ms": 5},
            {"seq": 3, "at_ms": 3, "type": "confirmed", "hold_id": "h", "items": items, "expires_at_ms": 5},
            {"seq": 4, "at_ms": 4, "type": "held", "hold_id": "g", "items": items, "expires_at_ms": 6},
            {"seq": 5, "at_ms": 8, "type": "expired", "hold_id": "g", "items": items, "expires_at_ms": 6},
            {"seq": 6, "at_ms": 9, "type": "pool_deleted", "pool": "a", "total": 10, "available": 7},
        ]));
        let pool = &page.pools["a"];
        assert_eq!((numbers(pool), pool.deleted), ((0, 0, 0, 0), Some(true)));
        assert_eq!(page.holds["g"].finished_at_ms, Some(6));
        assert_eq!(page.holds["g"].status, "expired");
    }

    #[test]
    fn an_extension_of_a_hold_made_on_an_earlier_page_is_kept_apart() {
        let page = fold(json!([
            {"seq": 7, "at_ms": 1, "type": "extended", "hold_id": "h", "expires_at_ms": 50},
        ]));
        assert!(page.holds.is_empty());
        assert_eq!(page.extensions["h"].expires_at_ms, 50);
    }

    #[test]
    fn a_status_change_of_a_hold_made_earlier_leaves_its_creation_time_alone() {
        let page = fold(json!([
            {"seq": 7, "at_ms": 20, "type": "released", "hold_id": "h", "items": [{"pool": "a", "qty": 1}], "expires_at_ms": 50},
        ]));
        assert_eq!(page.holds["h"].created_at_ms, None);
        assert_eq!(page.holds["h"].finished_at_ms, Some(20));
    }

    #[test]
    fn an_event_without_the_delta_the_sums_need_stops_the_page() {
        let events = json!([
            {"seq": 3, "at_ms": 1, "type": "pool_upserted", "pool": "a", "total": 4, "available": 4},
        ]);
        let error = Fold::page(events.as_array().unwrap()).unwrap_err();
        assert!(error.to_string().contains("has no delta"), "{error}");
    }
}
