//! Where a command goes: the partition it is sent to first, whether it must ask the other
//! partitions first, and the route it names there (`wire::Route`). Pure functions of the command
//! and the partition count; the library decides what happens at each partition, so this module
//! must never decide a rule, only an address.

use stockd_core::Command;

use crate::keys;
use crate::shared::Shared;
use crate::wire::Route;

impl Shared {
    /// The partition a command is sent to first: its pool's, its lock's, or (for a command
    /// naming a hold) the one its hold id hashes to, which knows where the hold lives.
    pub(crate) fn first_partition(&self, command: &Command) -> u32 {
        let id = match command {
            Command::PutPool { pool, .. }
            | Command::Restock { pool, .. }
            | Command::GetPool { pool }
            | Command::GetSegments { pool }
            | Command::DeletePool { pool } => pool.as_str(),
            Command::Reserve(request) => request.hold_id.as_str(),
            Command::Confirm { hold_id }
            | Command::Release { hold_id }
            | Command::Refund { hold_id, .. }
            | Command::Extend { hold_id, .. }
            | Command::GetHold { hold_id } => hold_id.as_str(),
            Command::LockAcquire(request) => request.name.as_str(),
            Command::LockRenew { name, .. } | Command::LockRelease { name, .. } => name.as_str(),
            Command::ListPools { .. } | Command::ListHolds { .. } => return 0,
        };
        keys::partition_of(id, self.partitions)
    }

    /// Whether `command` must first claim its request id (see
    /// `RedisBackend::claim_request_id`): a restock naming a request id, on a dataset of
    /// several partitions.
    pub(crate) fn claims_request_id(&self, command: &Command) -> bool {
        self.partitions > 1
            && matches!(
                command,
                Command::Restock {
                    request_id: Some(_),
                    ..
                }
            )
    }

    /// How a command sent to `at` names its route (see `wire::Route`).
    pub(crate) fn route(&self, command: &Command, at: u32, moved: bool) -> Route {
        if self.partitions == 1 {
            return Route::Only;
        }
        let local = match command {
            Command::Reserve(request) => request
                .items
                .iter()
                .all(|item| self.placement.pool_partition(item.pool.as_str()) == at),
            _ => true,
        };
        if moved {
            return Route::Home { local };
        }
        let home = match command {
            Command::Reserve(request) => self
                .placement
                .pool_partition(request.items[0].pool.as_str()),
            _ => at,
        };
        Route::Dir { home, local }
    }
}
