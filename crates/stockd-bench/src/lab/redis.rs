//! The Redis family, each variant as the seed (docs/benchmarks.md, "The oversell lab") and its
//! users write it, one connection per buyer:
//!
//! - naive: `GET stock`, then `SET stock n-1` if `n > 0` (the seed's first controller);
//! - SETNX lock without expiry: `SETNX lock`, or give up ("busy"); `GET`, `SET`, and `DEL lock`
//!   in a `finally` (the seed's second solution);
//! - expiring lock: `SET lock NX PX lease` in one command, the same `finally` (the seed's fix
//!   for a holder that dies, and the lock it then shows failing a slow holder);
//! - lease lock with a watchdog: `SET lock TOKEN NX PX lease`, a task renewing the lease every
//!   third of it while it is held (compare-and-`PEXPIRE` in Lua), `GET`, `SET`, release by
//!   compare-and-delete in Lua (Redisson's lock, as the seed dissects it);
//! - Lua check-and-deduct: `HGET`, compare, `HINCRBY` in one script (the seeds' Lua scripts).
//!
//! The lock variants hold their lock across round trips, so the run's [`Fault`](super::driver::Fault) strikes inside
//! them, between the read and the write. The final counter is read back after the run: it is
//! what the shop's stock says is left.

use std::sync::LazyLock;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::Script;

use super::driver::{Buyer, FaultPoint, Strike, Take};
use super::servers::RedisServer;
use super::{LabConfig, Variant, VariantRun};

fn redis_error(what: &str, error: redis::RedisError) -> String {
    format!("{what}: {error}")
}

async fn get_stock(connection: &mut MultiplexedConnection, key: &str) -> Result<i64, String> {
    let stock: Option<i64> = redis::cmd("GET")
        .arg(key)
        .query_async(connection)
        .await
        .map_err(|error| redis_error("GET", error))?;
    stock.ok_or_else(|| format!("GET {key}: no such key"))
}

async fn set_stock(
    connection: &mut MultiplexedConnection,
    key: &str,
    stock: i64,
) -> Result<(), String> {
    redis::cmd("SET")
        .arg(key)
        .arg(stock)
        .query_async::<()>(connection)
        .await
        .map_err(|error| redis_error("SET", error))
}

/// The read, the decision and the write, as the seed's controller does them: correct only if
/// nobody else runs it at the same time. `fault` strikes between the read and the write.
async fn read_decide_write(
    connection: &mut MultiplexedConnection,
    key: &str,
    fault: &FaultPoint,
) -> Result<Take, String> {
    let stock = get_stock(connection, key).await?;
    if fault.strike().await == Strike::Crash {
        return Ok(Take::Crashed);
    }
    if stock > 0 {
        set_stock(connection, key, stock - 1).await?;
        Ok(Take::Sold)
    } else {
        Ok(Take::SoldOut)
    }
}

/// GET, then SET: two round trips, nothing in between to stop another buyer.
struct Naive {
    connection: MultiplexedConnection,
    stock_key: String,
}

impl Buyer for Naive {
    async fn attempt(&mut self) -> Result<Take, String> {
        read_decide_write(&mut self.connection, &self.stock_key, &FaultPoint::none()).await
    }
}

/// SETNX without expiry: a buyer that dies holding it blocks every sale until someone deletes
/// the key by hand.
struct SetnxLock {
    connection: MultiplexedConnection,
    stock_key: String,
    lock_key: String,
    /// With a lease, `SET NX PX` (the expiring lock); without, `SETNX`.
    lease: Option<Duration>,
    fault: FaultPoint,
}

impl Buyer for SetnxLock {
    async fn attempt(&mut self) -> Result<Take, String> {
        let acquired = match self.lease {
            None => redis::cmd("SETNX")
                .arg(&self.lock_key)
                .arg("this is lock")
                .query_async::<bool>(&mut self.connection)
                .await
                .map_err(|error| redis_error("SETNX", error))?,
            Some(lease) => redis::cmd("SET")
                .arg(&self.lock_key)
                .arg("this is lock")
                .arg("NX")
                .arg("PX")
                .arg(lease.as_millis() as u64)
                .query_async::<Option<String>>(&mut self.connection)
                .await
                .map_err(|error| redis_error("SET NX PX", error))?
                .is_some(),
        };
        if !acquired {
            return Ok(Take::Busy);
        }
        let taken = read_decide_write(&mut self.connection, &self.stock_key, &self.fault).await;
        if taken == Ok(Take::Crashed) {
            return taken; // Dead: no `finally` runs.
        }
        // The `finally`: delete the lock whatever happened in between, whoever holds it now.
        let deleted = redis::cmd("DEL")
            .arg(&self.lock_key)
            .query_async::<i64>(&mut self.connection)
            .await;
        match (taken, deleted) {
            (Err(why), _) => Err(why),
            (Ok(_), Err(error)) => Err(redis_error("DEL of the lock (now stuck)", error)),
            (Ok(take), Ok(_)) => Ok(take),
        }
    }
}

/// Renews the lease if the lock still holds our token.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
            return redis.call('PEXPIRE', KEYS[1], ARGV[2]) \
         end \
         return 0",
    )
});

/// Deletes the lock if it still holds our token: never someone else's lock.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
            return redis.call('DEL', KEYS[1]) \
         end \
         return 0",
    )
});

/// A lease lock: a random token per acquisition, a lease, and a watchdog task that keeps
/// extending the lease while the lock is held, as Redisson does.
pub struct LeaseLock {
    pub key: String,
    pub lease: Duration,
}

/// A held lease lock. Dropping it stops its watchdog (the lease then runs out by itself).
pub struct Held {
    token: String,
    watchdog: tokio::task::JoinHandle<()>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.watchdog.abort();
    }
}

impl LeaseLock {
    /// `SET key token NX PX lease`; on success, starts the watchdog on a clone of the
    /// connection (a multiplexed connection carries both).
    pub async fn try_acquire(
        &self,
        connection: &mut MultiplexedConnection,
        token: String,
    ) -> Result<Option<Held>, String> {
        let lease_ms = self.lease.as_millis() as u64;
        let answer: Option<String> = redis::cmd("SET")
            .arg(&self.key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(lease_ms)
            .query_async(connection)
            .await
            .map_err(|error| redis_error("SET NX PX", error))?;
        if answer.is_none() {
            return Ok(None);
        }
        let mut watchdog_connection = connection.clone();
        let key = self.key.clone();
        let watched = token.clone();
        let every = self.lease / 3;
        let watchdog = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let renewed: Result<i64, _> = RENEW
                    .key(&key)
                    .arg(&watched)
                    .arg(lease_ms)
                    .invoke_async(&mut watchdog_connection)
                    .await;
                if !matches!(renewed, Ok(1)) {
                    return; // Lost, or Redis unreachable: the lease runs out on its own.
                }
            }
        });
        Ok(Some(Held { token, watchdog }))
    }

    /// Stops the watchdog and deletes the lock if it is still ours. `Err` if it was not: the
    /// lease ran out while held, and another buyer may have been inside at the same time.
    pub async fn release(
        &self,
        connection: &mut MultiplexedConnection,
        held: Held,
    ) -> Result<(), String> {
        held.watchdog.abort();
        let deleted: i64 = RELEASE
            .key(&self.key)
            .arg(&held.token)
            .invoke_async(connection)
            .await
            .map_err(|error| redis_error("release", error))?;
        if deleted == 1 {
            Ok(())
        } else {
            Err("the lease ran out while the lock was held".into())
        }
    }
}

struct LeaseLocked {
    connection: MultiplexedConnection,
    stock_key: String,
    lock: LeaseLock,
    fault: FaultPoint,
    /// Tokens: this buyer's random prefix and a counter, unique per acquisition.
    token_prefix: String,
    acquisitions: u64,
}

impl Buyer for LeaseLocked {
    async fn attempt(&mut self) -> Result<Take, String> {
        self.acquisitions += 1;
        let token = format!("{}:{}", self.token_prefix, self.acquisitions);
        let Some(held) = self.lock.try_acquire(&mut self.connection, token).await? else {
            return Ok(Take::Busy);
        };
        let taken = read_decide_write(&mut self.connection, &self.stock_key, &self.fault).await;
        if taken == Ok(Take::Crashed) {
            drop(held); // Its watchdog dies with it; the lease runs out by itself.
            return taken;
        }
        let released = self.lock.release(&mut self.connection, held).await;
        match (taken, released) {
            (Err(why), _) | (Ok(_), Err(why)) => Err(why),
            (Ok(take), Ok(())) => Ok(take),
        }
    }
}

/// The check and the deduction in one script, as the seeds write it (a hash of SKUs).
static CHECK_AND_DEDUCT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1') \
         local quantity = tonumber(ARGV[2]) \
         if current < quantity then \
             return 0 \
         end \
         redis.call('HINCRBY', KEYS[1], ARGV[1], -quantity) \
         return 1",
    )
});

/// The SKU field of the Lua variant's stock hash.
const SKU: &str = "lab-sku";

struct Lua {
    connection: MultiplexedConnection,
    stock_key: String,
}

impl Buyer for Lua {
    async fn attempt(&mut self) -> Result<Take, String> {
        let taken: i64 = CHECK_AND_DEDUCT
            .key(&self.stock_key)
            .arg(SKU)
            .arg(1)
            .invoke_async(&mut self.connection)
            .await
            .map_err(|error| redis_error("check-and-deduct", error))?;
        match taken {
            1 => Ok(Take::Sold),
            0 => Ok(Take::SoldOut),
            other => Err(format!("check-and-deduct answered {other}")),
        }
    }
}

/// Runs one Redis variant on `server`: sets its stock, runs the buyers, reads the counter.
pub async fn run(
    variant: Variant,
    server: &RedisServer,
    config: &LabConfig,
) -> Result<VariantRun, String> {
    let stock_key = format!("lab:{}:stock", variant.name());
    let lock_key = format!("lab:{}:lock", variant.name());
    let mut admin = server.connect().await?;
    let stock = i64::try_from(config.stock).map_err(|_| "--stock is too large for Redis")?;
    let mut setup = redis::pipe();
    setup.atomic().del(&stock_key).del(&lock_key);
    if variant == Variant::RedisLua {
        setup.hset(&stock_key, SKU, stock);
    } else {
        setup.set(&stock_key, stock);
    }
    setup
        .query_async::<()>(&mut admin)
        .await
        .map_err(|error| redis_error("setting the stock", error))?;
    let mut connections = Vec::with_capacity(config.buyers);
    for _ in 0..config.buyers {
        let mut connection = server.connect().await?;
        if variant == Variant::RedisLua {
            // Loaded before the clock starts, so that every attempt is one EVALSHA.
            CHECK_AND_DEDUCT
                .load_async(&mut connection)
                .await
                .map_err(|error| redis_error("SCRIPT LOAD", error))?;
        }
        connections.push(connection);
    }
    let progress = config.progress.then_some(variant.name());
    let fault = FaultPoint::new(config.fault, config.lease);
    let measured = match variant {
        Variant::RedisNaive => {
            let buyers = connections
                .into_iter()
                .map(|connection| Naive {
                    connection,
                    stock_key: stock_key.clone(),
                })
                .collect();
            super::driver::drive(buyers, config.max_duration, progress).await
        }
        Variant::RedisSetnxLock | Variant::RedisExpiringLock => {
            let lease = (variant == Variant::RedisExpiringLock).then_some(config.lease);
            let buyers = connections
                .into_iter()
                .map(|connection| SetnxLock {
                    connection,
                    stock_key: stock_key.clone(),
                    lock_key: lock_key.clone(),
                    lease,
                    fault: fault.clone(),
                })
                .collect();
            super::driver::drive(buyers, config.max_duration, progress).await
        }
        Variant::RedisLeaseLock => {
            let buyers = connections
                .into_iter()
                .enumerate()
                .map(|(buyer, connection)| {
                    let mut rng = StdRng::seed_from_u64(
                        config.seed ^ (buyer as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    );
                    LeaseLocked {
                        connection,
                        stock_key: stock_key.clone(),
                        lock: LeaseLock {
                            key: lock_key.clone(),
                            lease: config.lease,
                        },
                        fault: fault.clone(),
                        token_prefix: format!("{:016x}:{buyer}", rng.gen::<u64>()),
                        acquisitions: 0,
                    }
                })
                .collect();
            super::driver::drive(buyers, config.max_duration, progress).await
        }
        Variant::RedisLua => {
            let buyers = connections
                .into_iter()
                .map(|connection| Lua {
                    connection,
                    stock_key: stock_key.clone(),
                })
                .collect();
            super::driver::drive(buyers, config.max_duration, progress).await
        }
        other => return Err(format!("{} is not a Redis variant", other.name())),
    };
    let left: Option<i64> = if variant == Variant::RedisLua {
        redis::cmd("HGET")
            .arg(&stock_key)
            .arg(SKU)
            .query_async(&mut admin)
            .await
    } else {
        redis::cmd("GET")
            .arg(&stock_key)
            .query_async(&mut admin)
            .await
    }
    .map_err(|error| redis_error("reading the stock back", error))?;
    let left = left.ok_or("the stock key is gone after the run")?;
    Ok(VariantRun::counter_left(measured, config.stock, left))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::servers::LabDir;

    /// A Redis server of its own (gone with the directory and server returned), and two
    /// connections to it: the buyer's and another.
    async fn two_connections() -> (
        LabDir,
        RedisServer,
        MultiplexedConnection,
        MultiplexedConnection,
    ) {
        let dir = LabDir::create().unwrap();
        let server = RedisServer::start(dir.path()).await.unwrap();
        let connection = server.connect().await.unwrap();
        let other = server.connect().await.unwrap();
        (dir, server, connection, other)
    }

    /// The lock under test, with a 300 ms lease, acquired on `connection` as "mine".
    async fn acquired_as_mine(connection: &mut MultiplexedConnection) -> (LeaseLock, Held) {
        let lock = LeaseLock {
            key: "lab:test:lock".into(),
            lease: Duration::from_millis(300),
        };
        let held = lock
            .try_acquire(connection, "mine".into())
            .await
            .unwrap()
            .expect("a free lock is acquired");
        (lock, held)
    }

    /// Who holds the lock at `key` now, if anyone.
    async fn lock_owner(connection: &mut MultiplexedConnection, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query_async(connection)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_watchdog_keeps_a_lease_alive_while_it_is_held_and_stops_after() {
        let (_dir, _server, mut connection, mut other) = two_connections().await;
        let (lock, held) = acquired_as_mine(&mut connection).await;
        assert!(lock
            .try_acquire(&mut other, "theirs".into())
            .await
            .unwrap()
            .is_none());
        // Three leases long: only the watchdog keeps it.
        tokio::time::sleep(Duration::from_millis(900)).await;
        let owner = lock_owner(&mut other, &lock.key).await;
        assert_eq!(owner.as_deref(), Some("mine"));
        lock.release(&mut connection, held).await.unwrap();
        // Released: free for the next buyer, whose lease runs out once its watchdog is gone.
        let theirs = lock
            .try_acquire(&mut other, "theirs".into())
            .await
            .unwrap()
            .expect("a released lock is free");
        drop(theirs);
        tokio::time::sleep(Duration::from_millis(600)).await;
        let owner = lock_owner(&mut connection, &lock.key).await;
        assert_eq!(owner, None, "the lease outlived its dropped holder");
    }

    #[tokio::test]
    async fn a_lease_that_ran_out_is_not_released_and_says_so() {
        let (_dir, _server, mut connection, mut other) = two_connections().await;
        let (lock, held) = acquired_as_mine(&mut connection).await;
        // Someone deletes it by hand (a stuck-lock "fix"), and another buyer takes it.
        redis::cmd("DEL")
            .arg(&lock.key)
            .query_async::<i64>(&mut other)
            .await
            .unwrap();
        let _theirs = lock
            .try_acquire(&mut other, "theirs".into())
            .await
            .unwrap()
            .unwrap();
        let why = lock.release(&mut connection, held).await.unwrap_err();
        assert!(why.contains("lease ran out"), "{why}");
        let owner = lock_owner(&mut other, &lock.key).await;
        assert_eq!(
            owner.as_deref(),
            Some("theirs"),
            "released someone else's lock"
        );
    }
}
