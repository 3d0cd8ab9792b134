//! The API's request and response bodies, as this client reads and writes them: the contract's
//! types ([`stockd_api::wire`], which the server writes and documents from the same
//! definitions), named as this client has always named them, with plain string ids. The core's
//! parsed ids are not used: the server is the one judge of what is valid, and a client that
//! pre-judged would hide the server's `invalid_request` answer.
//!
//! Request bodies serialise exactly the contract's field names and leave out every `None`
//! (the contract treats a missing field and `null` alike, and refuses unknown ones). Responses
//! accept fields they do not know (a newer server may add some) and read a field that is absent
//! as `None`.

pub use stockd_api::wire::{
    BatchBody, BatchResult, EventPartitions, ExtendBody, HoldItem, HoldStatus, LockAcquireBody,
    LockReleaseBody, LockReleased, LockRenewBody, RefundBody, RestockBody, SegmentList,
    SegmentObject,
};

/// Body of `PUT /v1/pools/{pool}`. A rule left as `None` is unset by the PUT.
pub use stockd_api::wire::PoolBody as PoolSpecBody;

/// Body of `POST /v1/holds`.
pub use stockd_api::wire::HoldBody as ReserveBody;

/// A pool. `total = available + held + sold`; a rule is `None` when unset.
pub use stockd_api::wire::PoolObject as PoolView;

/// A hold. `finished_at_ms` is `None` while held, else the time of the latest transition.
pub use stockd_api::wire::HoldObject as HoldView;

/// What an event of the feed records.
pub use stockd_api::wire::EventType as EventKind;

/// One entry of the event feed. Fields that do not apply to the event's type are absent.
pub use stockd_api::wire::EventObject as Event;

/// Answer of `GET /v1/pools`: one page, ordered by pool id. `next` is the cursor to pass as
/// `after` for the following page, `None` on the last page.
pub use stockd_api::wire::PoolList as PoolPage;

/// Answer of `GET /v1/holds`: one page, ordered by hold id. A page may hold fewer than `limit`
/// holds (even none) when the filters are selective; only `next: None` means the end.
pub use stockd_api::wire::HoldList as HoldPage;

/// Answer of `GET /v1/events`: one page of one partition. `next_after` is the `after` of the
/// following call on the same partition.
pub use stockd_api::wire::EventPage;

/// Answer of `POST /v1/batch`: one result per op, in order.
pub use stockd_api::wire::BatchResponse as BatchAnswer;

/// A granted lease (acquire and renew). `token` is the fencing token: it strictly increases per
/// lock name, so a resource guarded by the lock can refuse writes carrying an older one.
pub use stockd_api::wire::LockGrant as LockLease;

/// The filters and paging of `GET /v1/holds`, each optional: holds with an item in `pool`, of
/// `user`, in `status`, after the cursor `after`, at most `limit` (server default 100, max 1000).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HoldQuery {
    pub pool: Option<String>,
    pub user: Option<String>,
    pub status: Option<HoldStatus>,
    pub after: Option<String>,
    pub limit: Option<usize>,
}
