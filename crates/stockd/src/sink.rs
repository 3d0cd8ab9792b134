//! `stockd sink postgres` and `stockd reconcile`: the command lines of `stockd-sink`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use stockd_sink::follow::{self, SinkConfig};
use stockd_sink::metrics::{self, Metrics};
use stockd_sink::{reconcile, schema};

use crate::cli::Exit;
use crate::connection::{Connection, ForSink};

#[derive(Debug, clap::Subcommand)]
pub enum SinkCommand {
    /// Apply every partition of the event feed to PostgreSQL, exactly once: the tables
    /// stockd_events, stockd_holds and stockd_pools, made and migrated by the sink (docs/sink.md).
    Postgres(PostgresArgs),
}

/// Where stockd and PostgreSQL are; shared by the sink and reconcile.
#[derive(Debug, Clone, clap::Args)]
pub struct Endpoints {
    #[command(flatten)]
    connection: Connection<ForSink>,
    /// PostgreSQL connection string: `postgres://USER:PASSWORD@HOST:PORT/DB` or
    /// `host=... port=... user=... dbname=...` (no TLS: run the sink next to the database or
    /// through a local TLS tunnel).
    #[arg(long, env = "STOCKD_SINK_DSN", hide_env_values = true)]
    dsn: String,
    /// The PostgreSQL schema of the tables, for databases shared with other applications
    /// (made when missing).
    #[arg(long, env = "STOCKD_SINK_SCHEMA", default_value = "public")]
    schema: String,
}

impl Endpoints {
    fn check(&self) -> Result<(), String> {
        schema::check_name(&self.schema).map_err(|error| format!("--schema: {error}"))?;
        tokio_postgres_config(&self.dsn)
    }
}

fn tokio_postgres_config(dsn: &str) -> Result<(), String> {
    dsn.parse::<stockd_sink::follow::PgConfig>()
        .map(|_| ())
        // The value is not repeated: it may hold a password.
        .map_err(|error| {
            format!(
                "--dsn is not a PostgreSQL connection string ({error}): write \
                 postgres://USER:PASSWORD@HOST:PORT/DB or host=HOST port=PORT user=USER dbname=DB"
            )
        })
}

#[derive(Debug, clap::Args)]
pub struct PostgresArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    /// Stop once every partition has been read to its end (for cron jobs and tests) instead of
    /// following the feed.
    #[arg(long)]
    once: bool,
    /// Events per page, and so per transaction (1 to 1000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u16).range(1..=1000))]
    batch: u16,
    /// How long one long poll of the feed waits for new events, in ms (0 to 30000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(0..=30_000))]
    wait_ms: u64,
    /// Longest pause between retries while stockd or PostgreSQL is unreachable, in ms.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    backoff_max_ms: u64,
    /// How often each partition logs its progress, in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    progress_every_s: u64,
    /// Serve the sink's Prometheus metrics on this address at /metrics (e.g. 127.0.0.1:9470).
    #[arg(long, env = "STOCKD_SINK_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

/// Runs `stockd sink ...`.
pub async fn run(command: SinkCommand) -> ExitCode {
    let SinkCommand::Postgres(args) = command;
    if let Err(why) = args.endpoints.check() {
        eprintln!("error: {why}");
        return Exit::Usage.into();
    }
    let metrics = Metrics::new();
    if let Some(address) = args.metrics_listen {
        match metrics::bind(address).await {
            Ok(listener) => {
                tracing::info!(%address, "metrics on /metrics");
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    if let Err(error) = metrics::serve(listener, metrics).await {
                        tracing::error!(%error, "the metrics listener stopped");
                    }
                });
            }
            Err(error) => {
                eprintln!("error: --metrics-listen {address}: {error}");
                return Exit::Usage.into();
            }
        }
    }
    let config = SinkConfig {
        dsn: args.endpoints.dsn.clone(),
        schema: args.endpoints.schema.clone(),
        once: args.once,
        batch: usize::from(args.batch),
        wait_ms: args.wait_ms,
        backoff_max: Duration::from_millis(args.backoff_max_ms),
        progress_every: Duration::from_secs(args.progress_every_s),
    };
    let stockd = args.endpoints.connection.client();
    tokio::select! {
        ended = follow::run(stockd, config, metrics) => match ended {
            Ok(()) => Exit::Success.into(),
            Err(error) => {
                tracing::error!(%error, "the sink stopped");
                eprintln!("error: {error}");
                Exit::Failure.into()
            }
        },
        () = crate::signals::stop_requested() => {
            // Every page is one transaction: stopping between two, or in one, loses nothing.
            tracing::info!("stopped; the stored cursors say where to resume");
            Exit::Success.into()
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    /// Print the report as JSON (`{"differences": [...], "summary": ..., ...}`).
    #[arg(long)]
    json: bool,
    /// Write stockd's side of every difference into the tables (pools, holds) and mark
    /// recorded gaps repaired. Run it while the feed is quiet, or run reconcile again after it:
    /// a change made during the repair shows up again.
    #[arg(long)]
    repair: bool,
}

/// Runs `stockd reconcile`: exit 0 when stockd and the tables agree (or every difference was
/// repaired), 1 when they differ, 3 when either could not be read.
pub async fn reconcile(args: ReconcileArgs) -> ExitCode {
    if let Err(why) = args.endpoints.check() {
        eprintln!("error: {why}");
        return Exit::Usage.into();
    }
    let stockd = args.endpoints.connection.client();
    let mut db = match follow::connect(&args.endpoints.dsn).await {
        Ok(db) => db,
        Err(error) => {
            eprintln!("error: postgres: {error}");
            return Exit::NoAnswer.into();
        }
    };
    let report = match reconcile::run(&stockd, &mut db, &args.endpoints.schema, args.repair).await {
        Ok(report) => report,
        Err(error) => {
            eprintln!("error: {error}");
            return Exit::NoAnswer.into();
        }
    };
    if args.json {
        let body = serde_json::json!({
            "differences": report.differences,
            "behind": report.behind,
            "pools": report.pools,
            "holds": report.holds,
            "clean": report.clean(),
            "summary": report.summary(),
        });
        println!("{body}");
    } else {
        for difference in &report.differences {
            println!("{}", difference.line());
        }
        println!("{}", report.summary());
    }
    if report.clean() {
        Exit::Success.into()
    } else {
        Exit::Failure.into()
    }
}
