//! `stockd lock ...`: acquire, renew and release lease locks with fencing tokens.
//!
//! The contract's `token` field (the fencing token) is `--fence` here, because `--token` is the
//! bearer token of every client command.

use stockd_client::{Call, LockLease};

use super::{human, Exit, Session};

/// Lease locks with fencing tokens (`stockd lock ...`), for singleton jobs.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum LockCommand {
    /// Take a lease on a lock; prints its fencing token (the fence) and when the lease ends.
    Acquire {
        /// The lock's name (1 to 128 bytes of [A-Za-z0-9._:-], first alphanumeric).
        name: String,
        /// Who takes the lock; renew and release must give the same owner.
        #[arg(long)]
        owner: String,
        /// How long the lease lasts unless renewed, in ms (100 to 3600000).
        #[arg(long)]
        ttl_ms: u64,
        /// Wait up to this long, in ms, for a held lock to become free (0 to 30000; without
        /// it, a held lock is refused at once with lock_held).
        #[arg(long)]
        wait_ms: Option<u64>,
    },
    /// Extend a lease you hold to now + ttl_ms; the fence stays the same.
    Renew {
        /// The lock's name.
        name: String,
        /// The owner that acquired the lease.
        #[arg(long)]
        owner: String,
        /// The fencing token acquire answered (the contract's `token` field).
        #[arg(long, value_name = "FENCE")]
        fence: u64,
        /// The lease's new length from now, in ms (100 to 3600000).
        #[arg(long)]
        ttl_ms: u64,
    },
    /// Give a lease back: the lock is free at once.
    Release {
        /// The lock's name.
        name: String,
        /// The owner that acquired the lease.
        #[arg(long)]
        owner: String,
        /// The fencing token acquire answered (the contract's `token` field).
        #[arg(long, value_name = "FENCE")]
        fence: u64,
    },
}

/// Runs one `stockd lock` subcommand.
pub(super) async fn run(session: &Session, command: LockCommand) -> Exit {
    match command {
        LockCommand::Acquire {
            name,
            owner,
            ttl_ms,
            wait_ms,
        } => {
            let call = Call::lock_acquire(&name, &owner, ttl_ms, wait_ms);
            show_lease(session, call, &name, "acquired", &owner).await
        }
        LockCommand::Renew {
            name,
            owner,
            fence,
            ttl_ms,
        } => {
            let call = Call::lock_renew(&name, &owner, fence, ttl_ms);
            show_lease(session, call, &name, "renewed", &owner).await
        }
        LockCommand::Release { name, owner, fence } => {
            let call = Call::lock_release(&name, &owner, fence);
            session
                .show(call, |_| {
                    Ok(format!("lock {name} released by {owner} (fence {fence})"))
                })
                .await
        }
    }
}

/// Sends an acquire or a renew and shows the lease it answers with ([`lease_line`]).
async fn show_lease(session: &Session, call: Call, name: &str, what: &str, owner: &str) -> Exit {
    session
        .show(call, |answer| {
            let lease = answer.decode()?;
            Ok(lease_line(name, what, owner, &lease, human::now_ms()))
        })
        .await
}

/// `lock nightly acquired by worker-a: fence 7, expires <time> (in 30s)`.
fn lease_line(name: &str, what: &str, owner: &str, lease: &LockLease, now_ms: u64) -> String {
    format!(
        "lock {name} {what} by {owner}: fence {}, expires {}",
        lease.token,
        human::when(lease.expires_at_ms, now_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_shows_its_fence_and_deadline() {
        let lease = LockLease {
            token: 7,
            expires_at_ms: 1_795_644_434_556,
        };
        assert_eq!(
            lease_line("nightly", "acquired", "worker-a", &lease, 1_795_644_404_556),
            "lock nightly acquired by worker-a: fence 7, expires 2026-11-25 22:07:14 UTC (in 30s)"
        );
    }
}
