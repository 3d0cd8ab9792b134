//! The PostgreSQL family, one connection per buyer, statements prepared before the clock
//! starts, on a table `stock (sku text primary key, available bigint)`:
//!
//! - conditional update: `UPDATE stock SET available = available - $1 WHERE sku = $2 AND
//!   available >= $1` in autocommit; one row changed is a sale, none is "sold out";
//! - `SELECT ... FOR UPDATE`: `BEGIN`, read the row locked, decide, `UPDATE ... SET available =
//!   <the value read - 1>`, `COMMIT`: the naive read-decide-write, made safe by the row lock.
//!   The row lock is held across round trips, so the run's fault strikes between the read and
//!   the write: a slow holder keeps the others waiting; a crashed one drops its connection with
//!   the transaction open, and PostgreSQL rolls it back and frees the row.
//!
//! The table has no `CHECK (available >= 0)` on purpose: the counter must show what the
//! variant's own code did, not what a constraint refused.

use tokio_postgres::{Client, Statement};

use super::driver::{Buyer, FaultPoint, Strike, Take};
use super::servers::Postgres;
use super::{LabConfig, Variant, VariantRun};

fn pg_error(what: &str, error: tokio_postgres::Error) -> String {
    format!("{what}: {error}")
}

struct ConditionalUpdate {
    client: Client,
    update: Statement,
    sku: String,
}

impl Buyer for ConditionalUpdate {
    async fn attempt(&mut self) -> Result<Take, String> {
        let changed = self
            .client
            .execute(&self.update, &[&1i64, &self.sku])
            .await
            .map_err(|error| pg_error("UPDATE", error))?;
        Ok(if changed == 1 {
            Take::Sold
        } else {
            Take::SoldOut
        })
    }
}

struct ForUpdate {
    /// `None` once the buyer has crashed: its connection is gone.
    client: Option<Client>,
    select: Statement,
    update: Statement,
    sku: String,
    fault: FaultPoint,
}

impl Buyer for ForUpdate {
    async fn attempt(&mut self) -> Result<Take, String> {
        let client = self.client.as_mut().ok_or("the buyer has crashed")?;
        let transaction = client
            .transaction()
            .await
            .map_err(|error| pg_error("BEGIN", error))?;
        let row = transaction
            .query_one(&self.select, &[&self.sku])
            .await
            .map_err(|error| pg_error("SELECT ... FOR UPDATE", error))?;
        let available: i64 = row.get(0);
        if self.fault.strike().await == Strike::Crash {
            // Die with the transaction open: no ROLLBACK is sent, the socket just closes.
            std::mem::forget(transaction);
            self.client = None;
            return Ok(Take::Crashed);
        }
        if available <= 0 {
            transaction
                .rollback()
                .await
                .map_err(|error| pg_error("ROLLBACK", error))?;
            return Ok(Take::SoldOut);
        }
        transaction
            .execute(&self.update, &[&(available - 1), &self.sku])
            .await
            .map_err(|error| pg_error("UPDATE", error))?;
        transaction
            .commit()
            .await
            .map_err(|error| pg_error("COMMIT", error))?;
        Ok(Take::Sold)
    }
}

/// Creates the stock table in the lab's fresh cluster, once for every variant.
pub async fn set_up(server: &Postgres) -> Result<(), String> {
    server
        .connect()
        .await?
        .batch_execute("CREATE TABLE stock (sku text PRIMARY KEY, available bigint NOT NULL)")
        .await
        .map_err(|error| pg_error("CREATE TABLE", error))
}

/// Runs one PostgreSQL variant: sets its row, runs the buyers, reads the row back.
pub async fn run(
    variant: Variant,
    server: &Postgres,
    config: &LabConfig,
) -> Result<VariantRun, String> {
    let sku = variant.name().to_string();
    let stock = i64::try_from(config.stock).map_err(|_| "--stock is too large")?;
    let admin = server.connect().await?;
    admin
        .execute(
            "INSERT INTO stock (sku, available) VALUES ($1, $2) \
             ON CONFLICT (sku) DO UPDATE SET available = excluded.available",
            &[&sku, &stock],
        )
        .await
        .map_err(|error| pg_error("setting the stock", error))?;
    let progress = config.progress.then_some(variant.name());
    let fault = FaultPoint::new(config.fault, config.lease);
    let measured = match variant {
        Variant::PgUpdate => {
            let mut buyers = Vec::with_capacity(config.buyers);
            for _ in 0..config.buyers {
                let client = server.connect().await?;
                let update = client
                    .prepare(
                        "UPDATE stock SET available = available - $1 \
                         WHERE sku = $2 AND available >= $1",
                    )
                    .await
                    .map_err(|error| pg_error("PREPARE", error))?;
                buyers.push(ConditionalUpdate {
                    client,
                    update,
                    sku: sku.clone(),
                });
            }
            super::driver::drive(buyers, config.max_duration, progress).await
        }
        Variant::PgForUpdate => {
            let mut buyers = Vec::with_capacity(config.buyers);
            for _ in 0..config.buyers {
                let client = server.connect().await?;
                let select = client
                    .prepare("SELECT available FROM stock WHERE sku = $1 FOR UPDATE")
                    .await
                    .map_err(|error| pg_error("PREPARE", error))?;
                let update = client
                    .prepare("UPDATE stock SET available = $1 WHERE sku = $2")
                    .await
                    .map_err(|error| pg_error("PREPARE", error))?;
                buyers.push(ForUpdate {
                    client: Some(client),
                    select,
                    update,
                    sku: sku.clone(),
                    fault: fault.clone(),
                });
            }
            super::driver::drive(buyers, config.max_duration, progress).await
        }
        other => return Err(format!("{} is not a PostgreSQL variant", other.name())),
    };
    let left: i64 = admin
        .query_one("SELECT available FROM stock WHERE sku = $1", &[&sku])
        .await
        .map_err(|error| pg_error("reading the stock back", error))?
        .get(0);
    Ok(VariantRun::counter_left(measured, config.stock, left))
}
