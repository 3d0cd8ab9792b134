//! `stockd pool ...` and `stockd hold ...`: administer pools and work holds on a running server,
//! over its HTTP API, through `stockd-client`.
//!
//! This module owns argument parsing, output formatting and exit codes of those subcommands. It
//! never decides a stock rule and never checks what the server checks (ranges, id grammar): the
//! server is the one judge, and its refusal is shown as it is. Only the shape of an argument that
//! has no JSON form (`--item POOL=QTY`) is checked here.
//!
//! Output is a short human summary by default, the server's JSON body with `--json`. Exit codes:
//! 0 success, 1 the server refused (any 4xx/5xx; `error: <code>: <message>` on stderr), 2 no
//! usable answer (cannot connect, timeout, unreadable answer; also clap's code for bad usage).

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::process::ExitCode;

use serde::Serialize;
use stockd_client::{
    Client, ClientError, HoldItemBody, HoldStatus, HoldView, PoolPage, PoolSpecBody, PoolView,
    ReserveBody,
};

/// Exit code when the server answered with an error status.
const EXIT_API_ERROR: u8 = 1;
/// Exit code when no usable answer came back.
const EXIT_NO_ANSWER: u8 = 2;

/// Where the server is and how to talk to it; shared by `stockd pool` and `stockd hold`.
///
/// The flags are global so that they may follow the subcommand (`stockd pool get sku-1 --json`).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ClientArgs {
    /// Base URL of the stockd server.
    #[arg(
        long,
        env = "STOCKD_URL",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    pub url: String,
    /// Bearer token (an admin token for pool writes).
    #[arg(long, env = "STOCKD_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Print the server's JSON body instead of a summary.
    #[arg(long, global = true)]
    pub json: bool,
}

impl ClientArgs {
    fn client(&self) -> Client {
        // An empty STOCKD_TOKEN means "no token", not "send an empty bearer token".
        let token = self.token.clone().filter(|token| !token.is_empty());
        Client::new(&self.url, token)
    }
}

/// Pool administration (`stockd pool ...`); writes need an admin token when auth is on.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum PoolCommand {
    /// Create or replace a pool (rules left out are unset).
    Put {
        pool: String,
        /// Total units of the pool.
        #[arg(long)]
        total: u64,
        /// Most units one user may hold or have bought at once.
        #[arg(long)]
        per_user_limit: Option<u64>,
        /// The sale opens at this time (Unix epoch ms).
        #[arg(long)]
        starts_at_ms: Option<u64>,
        /// The sale closes at this time (Unix epoch ms).
        #[arg(long)]
        ends_at_ms: Option<u64>,
        /// Emit a low_stock event when available falls to this or below.
        #[arg(long)]
        low_stock_threshold: Option<u64>,
        /// Create only when missing; an existing pool is left unchanged.
        #[arg(long)]
        if_absent: bool,
    },
    /// Show one pool.
    Get { pool: String },
    /// List pools in id order, one page at a time.
    List {
        /// Only pools whose id starts with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Start after this pool id (the `next` cursor of the previous page).
        #[arg(long)]
        after: Option<String>,
        /// Page size (server default 100, max 1000).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Add units to a pool, or remove available ones with a negative delta.
    Restock {
        pool: String,
        /// Units to add (negative to remove).
        #[arg(long, allow_negative_numbers = true)]
        delta: i64,
    },
    /// Delete a pool (refused while units are held).
    Delete { pool: String },
}

/// Reservations (`stockd hold ...`).
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum HoldCommand {
    /// Reserve units from one or more pools, all or nothing.
    Reserve {
        /// Client-chosen id (an order id); retrying with the same id is idempotent.
        hold_id: String,
        /// A pool and a quantity; repeat for several pools.
        #[arg(
            long = "item",
            value_name = "POOL=QTY",
            required = true,
            value_parser = parse_item
        )]
        items: Vec<HoldItemBody>,
        /// The buyer (required by pools with a per-user limit).
        #[arg(long)]
        user: Option<String>,
        /// How long the hold lasts unless confirmed (server default 600000).
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Reserve and confirm in one step.
        #[arg(long)]
        confirm: bool,
        /// Wait up to this long for units released by others.
        #[arg(long)]
        wait_ms: Option<u64>,
    },
    /// Confirm a held hold (paid): its units are sold.
    Confirm { hold_id: String },
    /// Release a held hold (cancelled): its units are available again.
    Release { hold_id: String },
    /// Refund a confirmed hold: its sold units are available again.
    Refund { hold_id: String },
    /// Push a held hold's expiry to now + ttl_ms.
    Extend {
        hold_id: String,
        #[arg(long)]
        ttl_ms: u64,
    },
    /// Show one hold.
    Get { hold_id: String },
}

/// Parses `--item POOL=QTY`. Only the shape is checked; ranges and id grammar are the server's.
fn parse_item(text: &str) -> Result<HoldItemBody, String> {
    const EXPECTED: &str = "expected POOL=QTY, e.g. sku-1=2";
    let (pool, qty) = text
        .split_once('=')
        .ok_or_else(|| format!("missing '='; {EXPECTED}"))?;
    if pool.is_empty() {
        return Err(format!("empty pool; {EXPECTED}"));
    }
    let qty: u64 = qty
        .parse()
        .map_err(|_| format!("quantity {qty:?} is not a whole number; {EXPECTED}"))?;
    Ok(HoldItemBody::new(pool, qty))
}

/// Runs one `stockd pool` subcommand and reports its outcome.
pub async fn run_pool(args: &ClientArgs, command: PoolCommand) -> ExitCode {
    let client = args.client();
    let shown = match command {
        PoolCommand::Put {
            pool,
            total,
            per_user_limit,
            starts_at_ms,
            ends_at_ms,
            low_stock_threshold,
            if_absent,
        } => {
            let spec = PoolSpecBody {
                total,
                per_user_limit,
                starts_at_ms,
                ends_at_ms,
                low_stock_threshold,
            };
            client
                .put_pool(&pool, &spec, if_absent)
                .await
                .map(|(view, created)| {
                    let note = match (created, if_absent) {
                        (true, _) => "created",
                        (false, true) => "exists, unchanged",
                        (false, false) => "updated",
                    };
                    Shown::Pool(view, Some(note))
                })
        }
        PoolCommand::Get { pool } => client
            .get_pool(&pool)
            .await
            .map(|view| Shown::Pool(view, None)),
        PoolCommand::List {
            prefix,
            after,
            limit,
        } => client
            .list_pools(prefix.as_deref(), after.as_deref(), limit)
            .await
            .map(Shown::PoolPage),
        PoolCommand::Restock { pool, delta } => client
            .restock(&pool, delta)
            .await
            .map(|view| Shown::Pool(view, Some("restocked"))),
        PoolCommand::Delete { pool } => client
            .delete_pool(&pool)
            .await
            .map(|()| Shown::PoolDeleted(pool)),
    };
    finish(args, shown)
}

/// Runs one `stockd hold` subcommand and reports its outcome.
pub async fn run_hold(args: &ClientArgs, command: HoldCommand) -> ExitCode {
    let client = args.client();
    let shown = match command {
        HoldCommand::Reserve {
            hold_id,
            items,
            user,
            ttl_ms,
            confirm,
            wait_ms,
        } => {
            let body = ReserveBody {
                hold_id,
                user,
                items,
                ttl_ms,
                confirm,
                wait_ms,
            };
            client.reserve(&body).await.map(|(view, created)| {
                // 200 instead of 201: this hold_id was already reserved with the same request.
                let note = (!created).then_some("existing hold, unchanged");
                Shown::Hold(view, note)
            })
        }
        HoldCommand::Confirm { hold_id } => client.confirm(&hold_id).await.map(Shown::hold),
        HoldCommand::Release { hold_id } => client.release(&hold_id).await.map(Shown::hold),
        HoldCommand::Refund { hold_id } => client.refund(&hold_id).await.map(Shown::hold),
        HoldCommand::Extend { hold_id, ttl_ms } => {
            client.extend(&hold_id, ttl_ms).await.map(Shown::hold)
        }
        HoldCommand::Get { hold_id } => client.get_hold(&hold_id).await.map(Shown::hold),
    };
    finish(args, shown)
}

/// What a successful command shows; the optional note says what the command did.
#[derive(Debug)]
enum Shown {
    Pool(PoolView, Option<&'static str>),
    PoolPage(PoolPage),
    PoolDeleted(String),
    Hold(HoldView, Option<&'static str>),
}

impl Shown {
    fn hold(view: HoldView) -> Shown {
        Shown::Hold(view, None)
    }

    /// The server's JSON body, re-encoded from the typed answer (same fields, same names).
    /// A delete answers 204 with no body, so it shows nothing.
    fn json(&self) -> Result<String, serde_json::Error> {
        fn encode(value: &impl Serialize) -> Result<String, serde_json::Error> {
            serde_json::to_string_pretty(value)
        }
        match self {
            Shown::Pool(view, _) => encode(view),
            Shown::PoolPage(page) => encode(page),
            Shown::PoolDeleted(_) => Ok(String::new()),
            Shown::Hold(view, _) => encode(view),
        }
    }

    fn human(&self) -> String {
        match self {
            Shown::Pool(view, note) => pool_line(view, *note),
            Shown::PoolPage(page) => pool_table(page),
            Shown::PoolDeleted(pool) => format!("pool {pool} deleted"),
            Shown::Hold(view, note) => hold_line(view, *note),
        }
    }
}

/// `pool sku-1: total 100, available 95, held 3, sold 2; per-user limit 2`.
fn pool_line(view: &PoolView, note: Option<&str>) -> String {
    let mut line = format!("pool {}", view.pool);
    if let Some(note) = note {
        let _ = write!(line, " {note}");
    }
    let _ = write!(
        line,
        ": total {}, available {}, held {}, sold {}",
        view.total, view.available, view.held, view.sold
    );
    let rules: Vec<String> = [
        view.per_user_limit.map(|n| format!("per-user limit {n}")),
        view.starts_at_ms.map(|t| format!("starts at {t}")),
        view.ends_at_ms.map(|t| format!("ends at {t}")),
        view.low_stock_threshold
            .map(|n| format!("low-stock threshold {n}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !rules.is_empty() {
        let _ = write!(line, "; {}", rules.join(", "));
    }
    line
}

/// An aligned table: pool ids left-aligned, counts right-aligned, then the next-page cursor.
fn pool_table(page: &PoolPage) -> String {
    if page.pools.is_empty() {
        return "no pools".to_owned();
    }
    const HEADERS: [&str; 5] = ["POOL", "TOTAL", "AVAILABLE", "HELD", "SOLD"];
    let rows: Vec<[String; 5]> = page
        .pools
        .iter()
        .map(|view| {
            [
                view.pool.to_string(),
                view.total.to_string(),
                view.available.to_string(),
                view.held.to_string(),
                view.sold.to_string(),
            ]
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut table = String::new();
    let header = HEADERS.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = format!("{:<width$}", row[0], width = widths[0]);
        for (cell, width) in row.iter().zip(widths).skip(1) {
            let _ = write!(line, "  {cell:>width$}");
        }
        table.push_str(line.trim_end());
        table.push('\n');
    }
    match &page.next {
        Some(next) => {
            let _ = write!(table, "more: --after {next}");
        }
        None => {
            table.pop();
        }
    }
    table
}

/// `hold o-1: held, expires at <ms>, items sku-1 x2, sku-2 x1, user u-1`.
fn hold_line(view: &HoldView, note: Option<&str>) -> String {
    let mut line = format!("hold {}: {}", view.hold_id, view.status.as_str());
    match (view.status, view.finished_at_ms) {
        (HoldStatus::Held, _) => {
            let _ = write!(line, ", expires at {}", view.expires_at_ms);
        }
        (_, Some(finished_at_ms)) => {
            let _ = write!(line, " at {finished_at_ms}");
        }
        (_, None) => {}
    }
    let items: Vec<String> = view
        .items
        .iter()
        .map(|item| format!("{} x{}", item.pool, item.qty))
        .collect();
    let _ = write!(line, ", items {}", items.join(", "));
    if let Some(user) = &view.user {
        let _ = write!(line, ", user {user}");
    }
    if let Some(note) = note {
        let _ = write!(line, " ({note})");
    }
    line
}

/// Prints the outcome and picks the exit code.
fn finish(args: &ClientArgs, shown: Result<Shown, ClientError>) -> ExitCode {
    let shown = match shown {
        Ok(shown) => shown,
        Err(error) => return report_error(args, error),
    };
    let text = if args.json {
        match shown.json() {
            Ok(text) => text,
            Err(error) => return report_error(args, ClientError::Decode(error)),
        }
    } else {
        shown.human()
    };
    print_stdout(&text)
}

/// `error: <code>: <message>` on stderr; with `--json` the server's error body also goes to
/// stdout, so that a script sees the details (`available`, `requested`, ...).
fn report_error(args: &ClientArgs, error: ClientError) -> ExitCode {
    match error {
        ClientError::Api {
            code,
            message,
            body,
            ..
        } => {
            if args.json && !body.is_null() {
                let _ = print_stdout(&body.to_string());
            }
            print_stderr(&format!("error: {code}: {message}"));
            ExitCode::from(EXIT_API_ERROR)
        }
        ClientError::Transport(error) => {
            print_stderr(&format!(
                "error: transport: cannot reach {}: {}",
                args.url,
                with_causes(&error)
            ));
            ExitCode::from(EXIT_NO_ANSWER)
        }
        ClientError::Decode(error) => {
            print_stderr(&format!(
                "error: decode: unreadable answer from {}: {error}",
                args.url
            ));
            ExitCode::from(EXIT_NO_ANSWER)
        }
    }
}

/// An error and its chain of causes, because reqwest's own message ("error sending request")
/// leaves out the useful part ("Connection refused").
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            let _ = write!(text, ": {inner_text}");
        }
        cause = inner.source();
    }
    text
}

fn print_stdout(text: &str) -> ExitCode {
    if text.is_empty() {
        return ExitCode::SUCCESS;
    }
    let mut stdout = io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`): nothing left to tell anyone.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::FAILURE,
        Err(error) => {
            print_stderr(&format!("error: stdout: {error}"));
            ExitCode::FAILURE
        }
    }
}

fn print_stderr(text: &str) {
    // If stderr itself is gone there is nowhere left to report to.
    let _ = writeln!(io::stderr().lock(), "{text}");
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::{CommandFactory, Parser};

    use super::*;

    /// The shape main.rs gives these commands: `stockd pool|hold [client flags] <command>`.
    #[derive(Parser, Debug)]
    #[command(name = "stockd")]
    struct TestCli {
        #[command(subcommand)]
        command: TestCommand,
    }

    #[derive(clap::Subcommand, Debug)]
    enum TestCommand {
        Pool {
            #[command(flatten)]
            client: ClientArgs,
            #[command(subcommand)]
            command: PoolCommand,
        },
        Hold {
            #[command(flatten)]
            client: ClientArgs,
            #[command(subcommand)]
            command: HoldCommand,
        },
    }

    fn parse(args: &[&str]) -> Result<TestCommand, clap::Error> {
        TestCli::try_parse_from(std::iter::once("stockd").chain(args.iter().copied()))
            .map(|cli| cli.command)
    }

    fn hold(args: &[&str]) -> HoldCommand {
        match parse(args) {
            Ok(TestCommand::Hold { command, .. }) => command,
            other => panic!("expected a hold command, got {other:?}"),
        }
    }

    fn pool(args: &[&str]) -> (ClientArgs, PoolCommand) {
        match parse(args) {
            Ok(TestCommand::Pool { client, command }) => (client, command),
            other => panic!("expected a pool command, got {other:?}"),
        }
    }

    #[test]
    fn definitions_are_consistent() {
        TestCli::command().debug_assert();
    }

    #[test]
    fn reserve_takes_repeated_items_and_every_option() {
        let command = hold(&[
            "hold",
            "reserve",
            "o-1",
            "--item",
            "a=2",
            "--item",
            "b=3",
            "--user",
            "u-1",
            "--ttl-ms",
            "5000",
            "--confirm",
            "--wait-ms",
            "100",
        ]);
        assert_eq!(
            command,
            HoldCommand::Reserve {
                hold_id: "o-1".into(),
                items: vec![HoldItemBody::new("a", 2), HoldItemBody::new("b", 3)],
                user: Some("u-1".into()),
                ttl_ms: Some(5000),
                confirm: true,
                wait_ms: Some(100),
            }
        );
    }

    #[test]
    fn reserve_defaults_leave_options_to_the_server() {
        let command = hold(&["hold", "reserve", "o-1", "--item", "sku-1=1"]);
        assert_eq!(
            command,
            HoldCommand::Reserve {
                hold_id: "o-1".into(),
                items: vec![HoldItemBody::new("sku-1", 1)],
                user: None,
                ttl_ms: None,
                confirm: false,
                wait_ms: None,
            }
        );
    }

    #[test]
    fn bad_items_are_refused_with_the_expected_shape() {
        for bad in [
            "sku-1",
            "=2",
            "sku-1=",
            "sku-1=x",
            "sku-1=-1",
            "a=2=3",
            "sku-1=2.5",
        ] {
            let error = parse(&["hold", "reserve", "o-1", "--item", bad])
                .expect_err(&format!("{bad:?} must be refused"));
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{bad:?}");
            let text = error.to_string();
            assert!(text.contains("--item <POOL=QTY>"), "{bad:?}: {text}");
            assert!(text.contains("expected POOL=QTY"), "{bad:?}: {text}");
        }
    }

    #[test]
    fn reserve_needs_at_least_one_item() {
        let error = parse(&["hold", "reserve", "o-1"]).expect_err("no item");
        assert_eq!(error.kind(), ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn restock_accepts_negative_deltas() {
        for args in [
            &["pool", "restock", "sku-1", "--delta", "-5"][..],
            &["pool", "restock", "sku-1", "--delta=-5"][..],
        ] {
            let (_, command) = pool(args);
            assert_eq!(
                command,
                PoolCommand::Restock {
                    pool: "sku-1".into(),
                    delta: -5
                }
            );
        }
        let (_, command) = pool(&["pool", "restock", "sku-1", "--delta", "7"]);
        assert_eq!(
            command,
            PoolCommand::Restock {
                pool: "sku-1".into(),
                delta: 7
            }
        );
    }

    #[test]
    fn put_takes_every_rule() {
        let (_, command) = pool(&[
            "pool",
            "put",
            "sku-1",
            "--total",
            "100",
            "--per-user-limit",
            "2",
            "--starts-at-ms",
            "1000",
            "--ends-at-ms",
            "2000",
            "--low-stock-threshold",
            "5",
            "--if-absent",
        ]);
        assert_eq!(
            command,
            PoolCommand::Put {
                pool: "sku-1".into(),
                total: 100,
                per_user_limit: Some(2),
                starts_at_ms: Some(1000),
                ends_at_ms: Some(2000),
                low_stock_threshold: Some(5),
                if_absent: true,
            }
        );
        let error = parse(&["pool", "put", "sku-1"]).expect_err("total is required");
        assert_eq!(error.kind(), ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn client_flags_may_come_before_or_after_the_command() {
        let (client, command) = pool(&[
            "pool",
            "get",
            "sku-1",
            "--json",
            "--url",
            "http://10.0.0.1:7070",
            "--token",
            "t",
        ]);
        assert_eq!(
            command,
            PoolCommand::Get {
                pool: "sku-1".into()
            }
        );
        assert!(client.json);
        assert_eq!(client.url, "http://10.0.0.1:7070");
        assert_eq!(client.token.as_deref(), Some("t"));

        let (client, _) = pool(&["pool", "--json", "list", "--limit", "10"]);
        assert!(client.json);
    }

    fn view(pool: &str, total: u64, available: u64, held: u64, sold: u64) -> PoolView {
        serde_json::from_value(serde_json::json!({
            "pool": pool, "total": total, "available": available, "held": held, "sold": sold,
            "per_user_limit": null, "starts_at_ms": null, "ends_at_ms": null,
            "low_stock_threshold": null, "partition": 0,
        }))
        .expect("a valid pool view")
    }

    #[test]
    fn pool_summary_reads_as_one_line() {
        let mut pool = view("sku-1", 100, 95, 3, 2);
        assert_eq!(
            pool_line(&pool, None),
            "pool sku-1: total 100, available 95, held 3, sold 2"
        );
        pool.per_user_limit = Some(2);
        pool.low_stock_threshold = Some(10);
        assert_eq!(
            pool_line(&pool, Some("created")),
            "pool sku-1 created: total 100, available 95, held 3, sold 2; \
             per-user limit 2, low-stock threshold 10"
        );
    }

    #[test]
    fn pool_list_is_an_aligned_table() {
        let page = PoolPage {
            pools: vec![view("a", 5, 5, 0, 0), view("long-pool-id", 1000, 990, 7, 3)],
            next: Some("long-pool-id".into()),
        };
        assert_eq!(
            pool_table(&page),
            "POOL          TOTAL  AVAILABLE  HELD  SOLD\n\
             a                 5          5     0     0\n\
             long-pool-id   1000        990     7     3\n\
             more: --after long-pool-id"
        );
        let empty = PoolPage {
            pools: vec![],
            next: None,
        };
        assert_eq!(pool_table(&empty), "no pools");
    }

    #[test]
    fn hold_summary_says_status_deadline_and_items() {
        let mut hold: HoldView = serde_json::from_value(serde_json::json!({
            "hold_id": "o-1", "status": "held", "user": null,
            "items": [{"pool": "sku-1", "qty": 2}, {"pool": "sku-2", "qty": 1}],
            "created_at_ms": 1000, "expires_at_ms": 601000, "finished_at_ms": null,
            "partition": 0,
        }))
        .expect("a valid hold view");
        assert_eq!(
            hold_line(&hold, None),
            "hold o-1: held, expires at 601000, items sku-1 x2, sku-2 x1"
        );
        hold.status = HoldStatus::Confirmed;
        hold.finished_at_ms = Some(2000);
        assert_eq!(
            hold_line(&hold, Some("existing hold, unchanged")),
            "hold o-1: confirmed at 2000, items sku-1 x2, sku-2 x1 (existing hold, unchanged)"
        );
    }
}
