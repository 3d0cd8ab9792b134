//! Every limit of the stockd API as a named constant, so that edges are tested and documented
//! in one place. Nothing here does anything; changing a value here changes the contract.

/// Identifiers (pool, hold id, user, lock name) are 1 to this many bytes.
pub const ID_LEN_MAX: usize = 128;
/// Units per hold item: `qty` 1..=QTY_MAX.
pub const QTY_MAX: u64 = 1_000_000_000;
/// A pool's `total`: 0..=TOTAL_MAX.
pub const TOTAL_MAX: u64 = 1_000_000_000_000;
/// `per_user_limit`: 1..=PER_USER_LIMIT_MAX.
pub const PER_USER_LIMIT_MAX: u64 = 1_000_000_000;
/// Segments of one pool: `segments` 1..=SEGMENTS_MAX (default 1).
pub const SEGMENTS_MAX: u64 = 64;
/// Items in one hold.
pub const HOLD_ITEMS_MAX: usize = 64;
/// Hold time-to-live bounds and default.
pub const HOLD_TTL_MS_MIN: u64 = 1_000;
pub const HOLD_TTL_MS_MAX: u64 = 86_400_000;
pub const HOLD_TTL_MS_DEFAULT: u64 = 600_000;
/// Longest a reserve or lock acquire may wait for stock or for the lock.
pub const WAIT_MS_MAX: u64 = 30_000;
/// Lease lock time-to-live bounds.
pub const LOCK_TTL_MS_MIN: u64 = 100;
pub const LOCK_TTL_MS_MAX: u64 = 3_600_000;
/// Ops in one batch request.
pub const BATCH_OPS_MAX: usize = 1_000;
/// Pools per list page.
pub const POOL_LIST_LIMIT_DEFAULT: usize = 100;
pub const POOL_LIST_LIMIT_MAX: usize = 1_000;
/// Holds per list page (`GET /v1/holds`).
pub const HOLD_LIST_LIMIT_DEFAULT: usize = 100;
pub const HOLD_LIST_LIMIT_MAX: usize = 1_000;
/// Index entries one hold list page may examine. A page walks one ordered index (the user's, the
/// pool's or all holds) and checks the other filters on each entry; when they are selective (a
/// rare status in a pool of a million holds) the page stops here and answers fewer than `limit`
/// holds with a `next` cursor, so that no page is a full scan. As many as the largest page: a
/// selective page costs no more than a full one (on Redis it is one library call, and a call
/// over 10,000 holds held the partition for about 90 ms; docs/benchmarks.md).
pub const HOLD_LIST_EXAMINED_MAX: usize = 1_000;
/// Events per feed page.
pub const EVENT_LIMIT_DEFAULT: usize = 100;
pub const EVENT_LIMIT_MAX: usize = 1_000;
/// Waiting requests queued on one pool or one lock; past it a request fails at once instead of
/// queueing, so a crowd cannot grow the queue without bound.
pub const WAITERS_PER_KEY_MAX: usize = 10_000;
/// Time values (`*_ms`) must be below this (year ~2255) so that `now + ttl` never overflows and
/// every value survives a round trip through a JSON double.
pub const TIME_MS_MAX: u64 = 9_007_199_254_740_991;
/// Finished holds are kept this long by default so retries stay idempotent (24 h).
pub const HOLD_RETENTION_MS_DEFAULT: u64 = 86_400_000;
/// Confirmed holds are kept this long by default so they can be refunded (7 days).
pub const CONFIRMED_RETENTION_MS_DEFAULT: u64 = 7 * 86_400_000;
/// Events the feed keeps by default (per partition on Redis); a consumer further behind gets
/// `events_expired`. The embedded engine, the Redis backend and `serve` all read this one.
pub const EVENT_RETENTION_MAX_DEFAULT: usize = 1_000_000;
/// Holds one tick may expire. Each expiry is a log record; the bound keeps one batch's records
/// far below the log's frame limit and the writer's pause short when a crowd of holds lapses at
/// once. The rest expire on the ticks that follow immediately.
pub const EXPIRIES_PER_TICK_MAX: usize = 10_000;
/// Finished holds one tick may forget (no records, but each is a hash-table removal).
pub const PURGES_PER_TICK_MAX: usize = 100_000;
