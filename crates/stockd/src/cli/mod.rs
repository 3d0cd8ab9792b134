//! `stockd pool ...` and `stockd hold ...`: administer pools and work holds on a running server,
//! over its HTTP API, through `stockd-client`. One file per command group (`pool.rs`,
//! `hold.rs`); this one has what they share: where the server is, printing, errors, exit codes.
//!
//! This module owns argument parsing, output formatting and exit codes of those subcommands. It
//! never decides a stock rule and never checks what the server checks (ranges, id grammar): the
//! server is the one judge, and its refusal is shown as it is. Only the shape of an argument that
//! has no JSON form (`--item POOL=QTY`) is checked here.
//!
//! Output is a short human summary by default, the server's JSON body with `--json`. Exit codes:
//! 0 success, 1 the server refused (any 4xx/5xx; `error: <code>: <message>` on stderr), 2 no
//! usable answer (cannot connect, timeout, unreadable answer; also clap's code for bad usage).

mod hold;
mod pool;

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::process::ExitCode;

use serde::Serialize;
use stockd_client::{Client, ClientError, HoldView, PoolPage, PoolView};

use hold::hold_line;
pub use hold::{run_hold, HoldCommand};
use pool::{pool_line, pool_table};
pub use pool::{run_pool, PoolCommand};

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

/// What a successful command shows; the optional note says what the command did.
#[derive(Debug)]
pub(super) enum Shown {
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

/// Prints the outcome and picks the exit code.
pub(super) fn finish(args: &ClientArgs, shown: Result<Shown, ClientError>) -> ExitCode {
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

    use stockd_client::HoldItemBody;

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
}
