//! A private PostgreSQL for the suites that need one: `initdb` in a temporary directory and
//! `postgres` on a free loopback port, started by the oversell lab's launcher in stockd-bench
//! (the same one `stockd bench lab` uses, so it is not copied here).
//!
//! It never touches a PostgreSQL it did not start (no default port, no packaged service).

use std::path::Path;

use stockd_bench::lab::servers::Postgres;

/// Starts a private PostgreSQL with its files under `dir`; panics with what is missing when it
/// cannot (scripts/test.sh installs Debian's postgresql).
pub async fn postgres(dir: &Path) -> Postgres {
    Postgres::start(dir, 40).await.unwrap_or_else(|why| {
        panic!("a private PostgreSQL is needed (scripts/test.sh installs it): {why}")
    })
}

/// A client of `pg`'s `postgres` database.
pub async fn db(pg: &Postgres) -> tokio_postgres::Client {
    pg.connect().await.expect("connect to the test postgres")
}
