//! The command line over a running server's HTTP API, through `stockd-client`: `stockd pool`,
//! `stockd hold`, `stockd lock`, `stockd batch` and `stockd events`. One file per command group
//! (`pool.rs`, `hold.rs`, `lock.rs`, `batch.rs`, `events.rs`; `human.rs` shows times); this one
//! has what they share: where the server is, printing, errors and exit codes.
//!
//! This module owns argument parsing, output formatting and exit codes of those subcommands. It
//! never decides a stock rule and never checks what the server checks (ranges, id grammar): the
//! server is the one judge, and its refusal is shown as it is. Only the shape of an argument that
//! has no JSON form (`--item POOL=QTY`) is checked here.
//!
//! Output is a short human summary by default; with `--json`, the server's body exactly as
//! received (never re-encoded), on success and on refusal alike. Exit codes are chosen in one
//! place, [`Exit`]; docs/cli.md has the table.

mod batch;
mod events;
mod hold;
mod human;
mod lock;
mod pool;

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use stockd_client::{Answer, Call, Client, ClientError, ErrorCode};

use crate::connection::{Connection, ForClient};

pub use batch::BatchArgs;
pub use events::EventsCommand;
pub use hold::HoldCommand;
pub use lock::LockCommand;
pub use pool::PoolCommand;

/// How a command ended; each has its own exit code, so that a script can tell a typo from a
/// server that is down from a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done (also when the reader of stdout went away, as in `| head`).
    Success,
    /// 1: a local failure after the command ran, such as stdout that cannot be written.
    Failure,
    /// 2: bad usage, nothing was sent: an unknown flag, a malformed value (clap's own code).
    Usage,
    /// 3: no usable answer: cannot connect, timed out, connection lost, or an answer that is
    /// not stockd's. The request may or may not have been applied.
    NoAnswer,
    /// 4: the server refused (a 4xx answer: `insufficient_stock`, `unauthorized`, ...).
    /// Nothing changed.
    Refused,
    /// 5: the server failed (a 5xx answer, such as 503 `backend_unavailable`): it could not
    /// tell whether the change happened; retrying is safe (same hold_id).
    ServerError,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::NoAnswer => 3,
            Exit::Refused => 4,
            Exit::ServerError => 5,
        }
    }

    /// The exit code of an HTTP error status.
    fn of_status(status: u16) -> Exit {
        if status >= 500 {
            Exit::ServerError
        } else {
            Exit::Refused
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// Where the server is and how to talk to it, and how to print; shared by every client command.
///
/// The flags are global so that they may follow the subcommand (`stockd pool get sku-1 --json`);
/// `--json` may also come first (`stockd --json pool get sku-1`, see main.rs).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ClientArgs {
    #[command(flatten)]
    pub connection: Connection<ForClient>,
    /// Print the server's JSON answer exactly as received instead of a summary.
    #[arg(long, global = true)]
    pub json: bool,
}

impl ClientArgs {
    /// These flags, with `--json` also on when it was given before the command.
    pub fn json_if(mut self, json_before_the_command: bool) -> ClientArgs {
        self.json |= json_before_the_command;
        self
    }

    /// The client these flags describe, or why the URL cannot be one (a usage error: nothing
    /// was sent).
    fn session(&self) -> Result<Session, String> {
        let connection = &self.connection;
        check_url(connection.url()).map_err(|(why, instead)| {
            let mut message = format!(
                "{} is {:?}: {why}",
                connection.url_source(),
                connection.url()
            );
            if let Some(instead) = instead {
                let _ = write!(message, "; write {}", connection.url_instead(&instead));
            }
            message
        })?;
        Ok(Session {
            client: connection.client(),
            args: self.clone(),
            warned_token_unchecked: AtomicBool::new(false),
        })
    }
}

/// Checks that `url` is something the client can send to: `http://HOST[:PORT][/PREFIX]`, or
/// `https://...` (a TLS proxy in front of stockd, docs/security.md).
/// On failure: what is wrong, and the URL to write instead when one can be guessed.
fn check_url(url: &str) -> Result<(), (String, Option<String>)> {
    const SHAPE: &str = "http://HOST:PORT or https://HOST[:PORT], e.g. http://127.0.0.1:7070";
    let Some((scheme, rest)) = url.split_once("://") else {
        let instead = format!("http://{}", url.trim_start_matches('/'));
        return Err(("it has no scheme".to_owned(), Some(instead)));
    };
    match scheme {
        "http" | "https" => {}
        other => {
            let why = format!("scheme {other:?} is not supported, only http and https");
            return Err((why, Some(format!("http://{rest}"))));
        }
    }
    match reqwest::Url::parse(url) {
        Ok(parsed) if parsed.host_str().is_some_and(|host| !host.is_empty()) => Ok(()),
        Ok(_) => Err((format!("it has no host; the shape is {SHAPE}"), None)),
        Err(error) => Err((
            format!("it is not a URL ({error}); the shape is {SHAPE}"),
            None,
        )),
    }
}

/// A client command group with its subcommand, as main.rs hands it over.
#[derive(Debug)]
pub enum Group {
    Pool(PoolCommand),
    Hold(HoldCommand),
    Lock(LockCommand),
    Batch(BatchArgs),
    Events(EventsCommand),
}

/// Runs one client command and reports its outcome.
pub async fn run(args: &ClientArgs, group: Group) -> ExitCode {
    let session = match args.session() {
        Ok(session) => session,
        Err(why) => {
            print_stderr(&format!("error: {why}"));
            return Exit::Usage.into();
        }
    };
    let exit = match group {
        Group::Pool(command) => pool::run(&session, command).await,
        Group::Hold(command) => hold::run(&session, command).await,
        Group::Lock(command) => lock::run(&session, command).await,
        Group::Batch(args) => batch::run(&session, args).await,
        Group::Events(command) => events::run(&session, command).await,
    };
    exit.into()
}

/// The client and the flags it came from, for the commands to send with and report through.
struct Session {
    client: Client,
    args: ClientArgs,
    /// Whether the warning that the server checks no tokens was printed (once a command).
    warned_token_unchecked: AtomicBool,
}

impl Session {
    /// Sends one request and shows its answer: the body as received with `--json`, else what
    /// `human` makes of it.
    async fn show(
        &self,
        call: Call,
        human: impl FnOnce(&Answer) -> stockd_client::Result<String>,
    ) -> Exit {
        match self.send(&call).await {
            Ok(answer) => self.present(&answer, human),
            Err(exit) => exit,
        }
    }

    /// Sends one request; a failure is reported here and comes back as its exit code.
    async fn send(&self, call: &Call) -> Result<Answer, Exit> {
        let answer = self.client.call(call).await;
        self.warn_if_token_unchecked();
        answer.map_err(|error| self.report_error(error))
    }

    /// Once a command: a token was given, and the server said it has none to check it against
    /// (`Stockd-Auth: none`), so it serves anyone, which the user believed it did not.
    fn warn_if_token_unchecked(&self) {
        if self.client.token_unchecked()
            && !self.warned_token_unchecked.swap(true, Ordering::Relaxed)
        {
            let connection = &self.args.connection;
            print_stderr(&format!(
                "warning: {} has no tokens configured, so the token from {} was not checked: \
                 this server serves anyone who can reach it (docs/security.md)",
                connection.url(),
                connection.token_source()
            ));
        }
    }

    /// Prints a 2xx answer: the body as received with `--json`, else what `human` makes of it.
    fn present(
        &self,
        answer: &Answer,
        human: impl FnOnce(&Answer) -> stockd_client::Result<String>,
    ) -> Exit {
        if self.args.json {
            return print_body(&answer.body);
        }
        match human(answer) {
            Ok(text) => print_line(&text),
            Err(error) => self.report_error(error),
        }
    }

    /// `error: <code>: <message>` on stderr, and a `hint:` line where the way out is known;
    /// with `--json` the server's error body, as received, also goes to stdout, so that a
    /// script sees the details (`available`, ...).
    fn report_error(&self, error: ClientError) -> Exit {
        match error {
            ClientError::Api {
                status,
                code,
                message,
                body,
                raw_body,
            } => {
                if self.args.json {
                    let _ = print_body(&raw_body);
                }
                print_stderr(&format!("error: {code}: {message}"));
                for (field, time) in times_in(&body) {
                    print_stderr(&format!(
                        "note: {field} {time} is {}",
                        human::when(time, human::now_ms())
                    ));
                }
                if let Some(hint) = self.hint(status, &code) {
                    print_stderr(&format!("hint: {hint}"));
                }
                Exit::of_status(status)
            }
            ClientError::Transport(error) => {
                let url = self.args.connection.url();
                let origin = self.args.connection.url_source();
                let why = with_causes(&error);
                print_stderr(&format!(
                    "error: transport: cannot reach {url} (from {origin}): {why}"
                ));
                if why.contains("certificate") {
                    print_stderr(
                        "hint: the server's TLS certificate is not trusted here; if a private CA \
                         signed it, set SSL_CERT_FILE to that CA's certificate (a PEM file), \
                         as for curl and OpenSSL",
                    );
                } else if error.is_connect() {
                    print_stderr(
                        "hint: is `stockd serve` running there? Give its address with --url or \
                         STOCKD_URL (http://HOST:PORT)",
                    );
                }
                Exit::NoAnswer
            }
            ClientError::Decode(error) => {
                print_stderr(&format!(
                    "error: decode: unreadable answer from {}: {error}",
                    self.args.connection.url()
                ));
                print_stderr(&format!(
                    "hint: is {} the address of a stockd server? (--url or STOCKD_URL)",
                    self.args.connection.url()
                ));
                Exit::NoAnswer
            }
        }
    }

    /// What to do about a refusal that is about how the command was run rather than about
    /// stock: no token, an unknown token, a token whose role is not enough, a lock that is
    /// taken or not yours.
    fn hint(&self, status: u16, code: &str) -> Option<String> {
        match ErrorCode::parse(code) {
            Some(ErrorCode::LockHeld) => {
                return Some(
                    "wait for the lock with --wait-ms (up to 30000), or, if the lease is yours, \
                     extend it with `stockd lock renew`"
                        .to_owned(),
                )
            }
            Some(ErrorCode::NotLockOwner) => {
                return Some(
                    "renew and release need the --owner and --fence that acquire answered, \
                     before the lease ends; a lease that ended is free: acquire the lock again"
                        .to_owned(),
                )
            }
            _ => {}
        }
        let origin = self.args.connection.token_source();
        match (status, self.args.connection.bearer_token()) {
            (401, None) => Some(
                "this server needs a bearer token: pass --token TOKEN or set STOCKD_TOKEN (an \
                 admin token for pool writes, a client token for the rest)"
                    .to_owned(),
            ),
            (401, Some(_)) => Some(format!(
                "the server does not know the token from {origin}: check it against the \
                 secrets in the server's --tokens / STOCKD_TOKENS"
            )),
            (403, _) => Some(format!(
                "this needs an admin token (pool put, restock and delete are admin only), and \
                 the token from {origin} has the client role: pass an admin token with --token \
                 or STOCKD_TOKEN"
            )),
            _ => None,
        }
    }
}

/// The `*_at_ms` details of an error body (`expires_at_ms` of `lock_held`, `starts_at_ms` of
/// `sale_not_started`, ...), for showing them as times.
fn times_in(body: &serde_json::Value) -> Vec<(&str, u64)> {
    body.as_object()
        .into_iter()
        .flatten()
        .filter(|(field, _)| field.ends_with("_at_ms"))
        .filter_map(|(field, value)| Some((field.as_str(), value.as_u64()?)))
        .collect()
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

/// A body as received, then a newline unless it ends with one; an empty body (204) prints
/// nothing.
fn print_body(body: &[u8]) -> Exit {
    if body.is_empty() {
        return Exit::Success;
    }
    let newline: &[u8] = if body.ends_with(b"\n") { b"" } else { b"\n" };
    write_stdout(&[body, newline])
}

/// One line of text; an empty text prints nothing.
fn print_line(text: &str) -> Exit {
    if text.is_empty() {
        return Exit::Success;
    }
    write_stdout(&[text.as_bytes(), b"\n"])
}

fn write_stdout(parts: &[&[u8]]) -> Exit {
    let mut stdout = io::stdout().lock();
    let written = parts
        .iter()
        .try_for_each(|part| stdout.write_all(part))
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => Exit::Success,
        // The reader went away (`| head`): it had what it wanted, and nothing is left to tell.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Exit::Success,
        Err(error) => {
            print_stderr(&format!("error: cannot write to stdout: {error}"));
            Exit::Failure
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
    use clap::CommandFactory;

    use stockd_client::HoldItem;

    use super::*;
    use crate::connection::Origin;

    /// Parses `stockd ARGS` with the binary's own command line (main.rs).
    fn parse(args: &[&str]) -> Result<crate::Cli, clap::Error> {
        crate::Cli::read_from(std::iter::once("stockd").chain(args.iter().copied()))
    }

    fn hold(args: &[&str]) -> HoldCommand {
        match parse(args).map(|cli| cli.command) {
            Ok(crate::Command::Hold { command, .. }) => command,
            other => panic!("expected a hold command, got {other:?}"),
        }
    }

    /// The client flags as `run` sees them (`--json` before the command included), and the
    /// pool command.
    fn pool(args: &[&str]) -> (ClientArgs, PoolCommand) {
        match parse(args) {
            Ok(crate::Cli {
                json,
                command: crate::Command::Pool { client, command },
            }) => (client.json_if(json), command),
            other => panic!("expected a pool command, got {other:?}"),
        }
    }

    #[test]
    fn urls_must_be_http_or_https_with_a_host() {
        for good in [
            "http://127.0.0.1:7070",
            "http://stock.internal:7070/",
            "http://[::1]:7070/prefix",
            "https://stock.example.com",
            "https://localhost:8443/",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
        for (bad, why, instead) in [
            ("127.0.0.1:7070", "no scheme", Some("http://127.0.0.1:7070")),
            ("localhost:7070", "no scheme", Some("http://localhost:7070")),
            ("//host:1", "no scheme", Some("http://host:1")),
            ("ftp://h:1", "scheme \"ftp\"", Some("http://h:1")),
            ("http://", "http://HOST:PORT", None),
            ("http://h:99999", "not a URL", None),
        ] {
            let (message, suggested) = check_url(bad).expect_err(bad);
            assert!(message.contains(why), "{bad}: {message}");
            assert_eq!(suggested.as_deref(), instead, "{bad}");
        }
    }

    #[test]
    fn the_origin_of_url_and_token_is_noted() {
        let (client, _) = pool(&["pool", "get", "p", "--url", "http://a:1", "--token", "t"]);
        let connection = client.connection;
        assert_eq!(
            (connection.url_source(), connection.token_source()),
            ("--url".to_owned(), "--token".to_owned())
        );
        let (client, _) = pool(&["pool", "--url", "http://a:1", "get", "p"]);
        assert_eq!(client.connection.url_origin, Origin::Flag);
        assert_eq!(
            client.connection.url_instead("http://h:1"),
            "--url http://h:1"
        );
    }

    #[test]
    fn definitions_are_consistent() {
        crate::Cli::command().debug_assert();
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
                items: vec![HoldItem::new("a", 2), HoldItem::new("b", 3)],
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
                items: vec![HoldItem::new("sku-1", 1)],
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
                    delta: -5,
                    request_id: None,
                }
            );
        }
        let (_, command) = pool(&["pool", "restock", "sku-1", "--delta", "7"]);
        assert_eq!(
            command,
            PoolCommand::Restock {
                pool: "sku-1".into(),
                delta: 7,
                request_id: None,
            }
        );
        let (_, command) = pool(&[
            "pool",
            "restock",
            "sku-1",
            "--delta",
            "7",
            "--request-id",
            "r-1",
        ]);
        assert_eq!(
            command,
            PoolCommand::Restock {
                pool: "sku-1".into(),
                delta: 7,
                request_id: Some("r-1".into()),
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
            "--segments",
            "4",
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
                segments: Some(4),
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
        assert_eq!(client.connection.url(), "http://10.0.0.1:7070");
        assert_eq!(client.connection.token.as_deref(), Some("t"));

        let (client, _) = pool(&["pool", "--json", "list", "--limit", "10"]);
        assert!(client.json);
        let (client, _) = pool(&["--json", "pool", "list"]);
        assert!(client.json, "--json before the command");
        let (client, _) = pool(&["pool", "list"]);
        assert!(!client.json);
    }
}
