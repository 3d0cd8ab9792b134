//! `stockd sink postgres`: one task per partition, each with its own PostgreSQL connection,
//! reading its partition with long polls and writing each page in one transaction with the
//! partition's cursor ([`crate::store::apply`]).
//!
//! The cursor in the database is the only truth. A task reads it when it (re)connects, and after
//! any error whose outcome it cannot know (a commit the connection lost the answer of), it drops
//! the connection and reads it again: a page committed is never applied again, a page not
//! committed is read again from stockd.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;
use stockd_client::{Call, Client, ClientError, ErrorCode};
/// A parsed `--dsn`, to check it before anything runs.
pub use tokio_postgres::Config as PgConfig;
use tokio_postgres::NoTls;

use crate::fold::{Fold, FoldError};
use crate::metrics::Metrics;
use crate::schema;
use crate::store::{self, Written};

/// What `stockd sink postgres` was asked to do.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub dsn: String,
    pub schema: String,
    /// Stop once every partition has been read to its end.
    pub once: bool,
    /// Events per page, hence per transaction (1..=1000).
    pub batch: usize,
    /// The long poll's wait.
    pub wait_ms: u64,
    /// Longest pause between retries after an error.
    pub backoff_max: Duration,
    /// How often a partition logs its progress.
    pub progress_every: Duration,
}

/// Why the sink stopped (it retries everything else).
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error(transparent)]
    Schema(#[from] schema::SchemaError),
    #[error("partition {partition}: {source}")]
    Fold {
        partition: u32,
        #[source]
        source: FoldError,
    },
    #[error("stockd refused the sink: {0} (check --url and the token)")]
    Refused(ClientError),
    #[error(
        "partition {partition}: stockd_events already has events after the stored cursor \
         ({after}): the tables were changed by hand or restored apart from their cursors; \
         stopping rather than write an event twice"
    )]
    Inconsistent { partition: u32, after: u64 },
    #[error(
        "partition {partition}: the feed went back below the stored cursor ({after}): {why}. \
         stockd's dataset has less than the sink applied (a Redis that lost data, accepted with \
         `stockd redis accept`?); stopping rather than skip the new events under the cursor. \
         See docs/sink.md, \"A feed that went back\""
    )]
    Rewound {
        partition: u32,
        after: u64,
        why: String,
    },
}

#[derive(Deserialize)]
struct RawPage {
    events: Vec<Value>,
    next_after: u64,
}

/// Connects to PostgreSQL; the connection runs on its own task until it breaks.
pub async fn connect(dsn: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "postgres connection ended");
        }
    });
    Ok(client)
}

/// Exponential backoff from 100 ms to `max`, reset by a success.
struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    fn new(max: Duration) -> Backoff {
        Backoff {
            next: Duration::from_millis(100),
            max,
        }
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }

    fn reset(&mut self) {
        self.next = Duration::from_millis(100);
    }
}

/// A refusal that retrying will not change (a bad token, a wrong URL): stop and say so. A 5xx,
/// a 429 or a lost connection is retried.
fn is_permanent(error: &ClientError) -> bool {
    matches!(error.status(), Some(status) if (400..500).contains(&status) && status != 429 && status != 410)
}

/// Runs the sink until it is stopped (or, with `once`, until it has caught up).
pub async fn run(
    stockd: Client,
    config: SinkConfig,
    metrics: Arc<Metrics>,
) -> Result<(), SinkError> {
    let config = Arc::new(config);
    let mut backoff = Backoff::new(config.backoff_max);
    // The tables first: nothing is read from stockd before they are ready.
    loop {
        match connect(&config.dsn).await {
            Ok(mut client) => match schema::migrate(&mut client, &config.schema).await {
                Ok(applied) => {
                    if !applied.is_empty() {
                        tracing::info!(schema = %config.schema, ?applied, "migrations applied");
                    }
                    break;
                }
                Err(schema::SchemaError::Postgres(error)) => {
                    tracing::warn!(%error, "postgres: cannot migrate yet; retrying");
                }
                Err(other) => return Err(other.into()),
            },
            Err(error) => tracing::warn!(%error, "postgres: cannot connect; retrying"),
        }
        metrics.retries.get_or_create(&cause("postgres")).inc();
        backoff.wait().await;
    }
    backoff.reset();
    let partitions = loop {
        match stockd.partitions().await {
            Ok(partitions) => break partitions,
            Err(error) if is_permanent(&error) => return Err(SinkError::Refused(error)),
            Err(error) => tracing::warn!(%error, "stockd: cannot read the partitions; retrying"),
        }
        metrics.retries.get_or_create(&cause("stockd")).inc();
        backoff.wait().await;
    };
    tracing::info!(
        partitions,
        url = stockd.base_url(),
        "following the event feed"
    );
    let mut tasks = tokio::task::JoinSet::new();
    for partition in 0..partitions {
        let stockd = stockd.clone();
        let config = config.clone();
        let metrics = metrics.clone();
        tasks.spawn(async move { follow(partition, partitions, stockd, config, metrics).await });
    }
    while let Some(ended) = tasks.join_next().await {
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error),
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
    tracing::info!("caught up on every partition");
    Ok(())
}

fn cause(cause: &str) -> crate::metrics::CauseLabel {
    crate::metrics::CauseLabel {
        cause: cause.to_owned(),
    }
}

/// One partition's loop.
async fn follow(
    partition: u32,
    partitions: u32,
    stockd: Client,
    config: Arc<SinkConfig>,
    metrics: Arc<Metrics>,
) -> Result<(), SinkError> {
    let label = crate::metrics::PartitionLabel {
        partition: partition.to_string(),
    };
    // Every series exists from the start, at zero: a rate over a counter that appears late
    // misses its first increase.
    drop(metrics.applied.get_or_create(&label));
    drop(metrics.gaps.get_or_create(&label));
    drop(metrics.lag.get_or_create(&label));
    let mut backoff = Backoff::new(config.backoff_max);
    let mut db: Option<tokio_postgres::Client> = None;
    let mut after = 0u64;
    let mut last_log = Instant::now();
    let mut applied_since_log = 0u64;
    let mut caught_up_once = false;
    // When the feed was last seen to still have, at the cursor, the event the tables have there.
    let mut verified_at: Option<Instant> = None;
    // The page after the cursor, read while the previous one was being written.
    let mut prefetched: Option<(u64, RawPage)> = None;
    loop {
        // (Re)connect and read the cursor: the database says where this partition is.
        let client = match db.as_mut() {
            Some(client) if !client.is_closed() => client,
            _ => {
                let ready = async {
                    let client = connect(&config.dsn).await?;
                    schema::use_schema(&client, &config.schema).await?;
                    store::ensure_cursors(&client, partitions).await?;
                    let after = store::cursor(&client, partition).await?;
                    Ok::<_, tokio_postgres::Error>((client, after))
                };
                match ready.await {
                    Ok((client, cursor)) => {
                        after = cursor;
                        metrics.cursor.get_or_create(&label).set(after as i64);
                        tracing::info!(
                            partition,
                            after,
                            "postgres: connected; resuming after the stored cursor"
                        );
                        verified_at = None;
                        db.insert(client)
                    }
                    Err(error) => {
                        tracing::warn!(partition, %error, "postgres: cannot connect; retrying");
                        metrics.retries.get_or_create(&cause("postgres")).inc();
                        backoff.wait().await;
                        continue;
                    }
                }
            }
        };

        let wait_ms = if config.once { 0 } else { config.wait_ms };
        let call = Call::events(Some(partition), after, Some(config.batch), Some(wait_ms));
        let read = match prefetched.take() {
            Some((read_after, page)) if read_after == after => Ok(page),
            _ => stockd
                .call(&call)
                .await
                .and_then(|answer| answer.decode::<RawPage>()),
        };
        let page = match read {
            Ok(page) => page,
            Err(error) if error.error_code() == Some(ErrorCode::EventsExpired) => {
                let oldest_seq = error
                    .detail("oldest_seq")
                    .and_then(Value::as_u64)
                    .unwrap_or(after + 1);
                tracing::error!(
                    partition,
                    after,
                    oldest_seq,
                    "the feed no longer has the events after this partition's cursor: the \
                     tables miss events {}..={}; recording the gap and going on from {oldest_seq} \
                     (run `stockd reconcile --repair` to repair the rows)",
                    after + 1,
                    oldest_seq.saturating_sub(1),
                );
                match store::record_gap(client, partition, after, oldest_seq).await {
                    Ok(Written::Applied) => {
                        metrics.gaps.get_or_create(&label).inc();
                        after = oldest_seq.saturating_sub(1);
                    }
                    other => {
                        unapplied(other, partition, after, &mut db, &metrics, &mut backoff).await?
                    }
                }
                continue;
            }
            Err(error) if is_permanent(&error) => return Err(SinkError::Refused(error)),
            Err(error) => {
                tracing::warn!(partition, %error, "stockd: cannot read the feed; retrying");
                metrics.retries.get_or_create(&cause("stockd")).inc();
                backoff.wait().await;
                continue;
            }
        };

        if page.events.is_empty() {
            // Nothing after the cursor: either the sink is caught up, or the feed went back
            // below it (an engine started on a wiped data dir starts its seqs again; a Redis
            // accepted after a loss does not, its seqs go on above), and new events are hiding
            // under the cursor. Tell the two apart now and
            // then: after each connect, then every VERIFY_EVERY while idle.
            if verified_at.is_none_or(|at| at.elapsed() >= VERIFY_EVERY) {
                if let Some(why) = rewound(&stockd, client, partition, after).await {
                    return Err(SinkError::Rewound {
                        partition,
                        after,
                        why,
                    });
                }
                verified_at = Some(Instant::now());
            }
            metrics.lag.get_or_create(&label).set(0.0);
            if !caught_up_once {
                caught_up_once = true;
                tracing::info!(partition, after, "caught up");
            }
            if config.once {
                return Ok(());
            }
            continue;
        }
        let fold =
            Fold::page(&page.events).map_err(|source| SinkError::Fold { partition, source })?;
        let count = page.events.len() as u64;
        // Behind (a full page): read the next page while this one commits.
        let full = page.events.len() >= config.batch;
        let next = Call::events(
            Some(partition),
            page.next_after,
            Some(config.batch),
            Some(0),
        );
        let (written, next) = tokio::join!(
            store::apply(client, partition, after, page.next_after, &fold),
            async {
                if full {
                    let answer = stockd.call(&next).await.ok()?;
                    answer.decode::<RawPage>().ok()
                } else {
                    None
                }
            }
        );
        match written {
            Ok(Written::Applied) => {
                backoff.reset();
                after = page.next_after;
                prefetched = next.map(|next| (after, next));
                metrics.applied.get_or_create(&label).inc_by(count);
                metrics.transactions.inc();
                metrics.cursor.get_or_create(&label).set(after as i64);
                let last_at_ms = fold.events.last().map_or(0, |e| e.at_ms);
                let lag_s = if page.events.len() < config.batch {
                    0.0
                } else {
                    (now_ms() - last_at_ms).max(0) as f64 / 1000.0
                };
                metrics.lag.get_or_create(&label).set(lag_s);
                applied_since_log += count;
                if last_log.elapsed() >= config.progress_every {
                    tracing::info!(
                        partition,
                        after,
                        applied = applied_since_log,
                        lag_s,
                        "progress"
                    );
                    applied_since_log = 0;
                    last_log = Instant::now();
                }
            }
            other => unapplied(other, partition, after, &mut db, &metrics, &mut backoff).await?,
        }
    }
}

/// How often an idle partition checks that the feed has not gone back below its cursor.
const VERIFY_EVERY: Duration = Duration::from_secs(10);

/// `Some(why)` when the feed no longer has, at seq `after`, the event the tables applied there:
/// the feed went back (its seqs start again below the cursor). `None` when it still has it, or
/// when that cannot be told (the event is past the feed's window, stockd or PostgreSQL did not
/// answer, or the tables never had it: the cursor was moved past a gap); a later check tries
/// again.
async fn rewound(
    stockd: &Client,
    client: &tokio_postgres::Client,
    partition: u32,
    after: u64,
) -> Option<String> {
    if after == 0 {
        return None;
    }
    let call = Call::events(Some(partition), after - 1, Some(1), Some(0));
    let page = stockd.call(&call).await.ok()?.decode::<RawPage>().ok()?;
    let stored = client
        .query_opt(
            "SELECT body::text FROM stockd_events WHERE partition = $1 AND seq = $2",
            &[&(partition as i32), &crate::fold::to_i64(after)],
        )
        .await
        .ok()?;
    let stored: Value = serde_json::from_str(&stored?.get::<_, String>(0)).ok()?;
    match page.events.first() {
        None => Some(format!(
            "the feed ends before seq {after}, the last event applied"
        )),
        Some(event) if *event != stored => Some(format!(
            "the feed's event {after} is not the one applied: feed {event}, tables {stored}"
        )),
        Some(_) => None,
    }
}

/// What follows a transaction that did not apply its page (or gap):
/// - another sink moved the cursor: read it again from the database;
/// - the tables already had an event the cursor says is not applied: stop, with the reason;
/// - it failed, or its outcome is unknown: drop the connection, so that the next round
///   reconnects and reads the cursor the database has, after a pause.
async fn unapplied(
    outcome: Result<Written, tokio_postgres::Error>,
    partition: u32,
    after: u64,
    db: &mut Option<tokio_postgres::Client>,
    metrics: &Metrics,
    backoff: &mut Backoff,
) -> Result<(), SinkError> {
    match outcome {
        Ok(Written::Applied) => {}
        Ok(Written::CursorMoved { found }) => {
            tracing::warn!(
                partition,
                expected = after,
                found,
                "the stored cursor moved under this sink (is another sink running on these \
                 tables?); reading it again"
            );
            *db = None;
        }
        Ok(Written::AlreadyThere) => return Err(SinkError::Inconsistent { partition, after }),
        Err(error) => {
            tracing::warn!(partition, %error, "postgres: the page was not applied; reconnecting");
            metrics.retries.get_or_create(&cause("postgres")).inc();
            *db = None;
            backoff.wait().await;
        }
    }
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
