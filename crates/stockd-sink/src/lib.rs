//! The path from stockd's event feed into an order database.
//!
//! - `stockd sink postgres` ([`follow`]) reads every partition of the feed and applies each
//!   event to PostgreSQL exactly once: a page of events, the rows it changes and the partition's
//!   cursor are written in one transaction ([`store`]), so a crash of the sink, of stockd or of
//!   PostgreSQL at any moment neither loses nor repeats an event.
//! - What a page changes is worked out in memory first ([`fold`]): the events' rows, each hold's
//!   latest state, and per-pool deltas (sums do not depend on the order partitions are read in).
//! - The tables are the sink's own, made and migrated by it ([`schema`]).
//! - `stockd reconcile` ([`reconcile`]) compares stockd's pools and holds with the tables and,
//!   asked to, repairs the rows from stockd.
//!
//! docs/sink.md is the user's guide, with the exactly-once argument.

pub mod fold;
pub mod follow;
pub mod metrics;
pub mod reconcile;
pub mod schema;
pub mod store;
