//! The settings of `stockd serve`, each declared once: one row of the table in
//! [`serve_settings!`] holds its flag and environment variable (clap's attributes), its
//! config-file key, its default, its allowed range and its help. From the table come the command
//! line ([`ServeArgs`]), the config file's keys ([`FileConfig`], and the list `--config --help`
//! shows), the merge (flag > environment > config file > default) and the range checks
//! ([`Values`]).
//!
//! This module reads and checks settings; it never acts on them (serve.rs and main.rs do), and
//! never decides anything about stock.

use std::fmt::Display;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use stockd_core::limits::{CONFIRMED_RETENTION_MS_DEFAULT, HOLD_RETENTION_MS_DEFAULT};
use stockd_engine::EngineConfig;
use stockd_server::{ConnectionLimits, BODY_TIMEOUT_DEFAULT};

pub const LISTEN_DEFAULT: &str = "127.0.0.1:7070";
pub const DATA_DIR_DEFAULT: &str = "./stockd-data";

/// A setting's allowed values, and the unit its error message names.
struct Bounds<T> {
    range: RangeInclusive<T>,
    unit: &'static str,
}

/// Timeouts are 100 ms to 1 hour.
const TIMEOUT_MS: Bounds<u64> = Bounds {
    range: 100..=3_600_000,
    unit: " (milliseconds)",
};
const REDIS_REPLICAS: Bounds<u32> = Bounds {
    range: 0..=stockd_redis::REPLICAS_MAX,
    unit: "",
};
/// At most half the time one Redis call may take: the call and its WAIT share it.
const REDIS_REPLICA_TIMEOUT_MS: Bounds<u64> = Bounds {
    range: 1..=stockd_redis::REPLICA_TIMEOUT_MS_MAX,
    unit: " (milliseconds)",
};
const MAX_CONNECTIONS: Bounds<usize> = Bounds {
    range: 1..=1_000_000,
    unit: "",
};
const MAX_HEADER_BYTES: Bounds<usize> = Bounds {
    range: 1024..=1024 * 1024,
    unit: "",
};
/// More HTTP worker threads than this is a typo, not a machine.
const WORKER_THREADS_MAX: u64 = 1024;
const WORKER_THREADS: Bounds<usize> = Bounds {
    range: 1..=WORKER_THREADS_MAX as usize,
    unit: "",
};

/// Environment variables `stockd serve` reads that have no flag; shown under `serve --help`.
const ENVIRONMENT_HELP: &str = "\
Environment without a flag:
  STOCKD_LOG=FILTER         what to log, as a tracing filter (default info; e.g. warn, or
                            info,stockd_server=debug)
  STOCKD_LOG_FORMAT=FORMAT  text (default; coloured only on a terminal, never with NO_COLOR
                            set) or json (one object a line, for log shippers)

Flags win over the environment, which wins over the --config file, which wins over the
defaults. A flag shown with [env: STOCKD_...] may be given as that variable instead.";

/// Declares the settings of `stockd serve`, one row each, in the order `--help` lists them:
///
/// ```text
/// name: Type {
///     arg: [clap's attributes besides `long` and `help`],
///     key: name ["note for --config's list"] [from FileType, by parse],   (a config-file key)
///     default: expression,               (else the value stays an Option)
///     range: Bounds,                     (the allowed values)
///     help: "text, {} standing for the default",
///     showing: expression,               (optional: what {} stands for instead of the default)
/// }
/// ```
///
/// The flag and its variable are clap's (clap lets a flag win over its variable); a key's value
/// is used when neither is given, then the default. A key `from` another type is turned into the
/// setting's by `parse`, whose error is shown with the file and the line's key and value.
macro_rules! serve_settings {
    ($(
        $name:ident: $ty:ty {
            arg: [$($arg:tt)*],
            $(key: $key:ident $($note:literal)? $(from $file_ty:ty, by $parse:path)?,)?
            $(default: $default:expr,)?
            $(range: $bounds:expr,)?
            help: $help:literal,
            $(showing: $shown:expr,)?
        }
    )*) => {
        #[derive(Debug, clap::Args)]
        #[command(after_help = ENVIRONMENT_HELP)]
        pub struct ServeArgs {
            $(
                #[arg(
                    long,
                    help = serve_settings!(@help $help; $($shown)?; $($default)?),
                    $($arg)*
                )]
                pub $name: Option<$ty>,
            )*
        }

        /// The config file. Every key is optional; unknown keys are refused so typos are
        /// caught.
        #[derive(Debug, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct FileConfig {
            $($(pub $key: Option<serve_settings!(@file_ty $ty $(, $file_ty)?)>,)?)*
        }

        /// The config file's keys, as `--config --help` lists them.
        const FILE_KEYS: &[&str] = &[$($(concat!(stringify!($key) $(, " ", $note)?),)?)*];

        /// Every setting from the first source that has it, checked; an Option where there
        /// is no one default (the backend decides). No `Debug`: it holds secrets.
        #[allow(dead_code, reason = "`config` is used before the rest: it names their file")]
        pub struct Values {
            $(pub $name: serve_settings!(@value_ty $ty; $($default)?),)*
        }

        impl ServeArgs {
            /// Merges the flags (and their variables) with `file`, read from `path`: the first
            /// source that has a setting gives it, checked against its range; else its default.
            pub fn values(&self, file: FileConfig, path: &Path) -> Result<Values, String> {
                $(
                    let $name = self.$name.clone();
                    $(
                        let $name = match $name {
                            Some(value) => Some(value),
                            None => serve_settings!(
                                @from_file file.$key, stringify!($key), path $(, $parse)?
                            )?,
                        };
                    )?
                    $(check_range(stringify!($name), $name.as_ref(), &$bounds)?;)?
                    $(let $name = $name.unwrap_or_else(|| $default);)?
                )*
                Ok(Values { $($name),* })
            }
        }
    };
    (@help $help:literal; ; $default:expr) => { with_shown($help, $default) };
    (@help $help:literal; ; ) => { with_shown($help, "") };
    (@help $help:literal; $shown:expr; $($default:expr)?) => { with_shown($help, $shown) };
    (@file_ty $ty:ty) => { $ty };
    (@file_ty $ty:ty, $file_ty:ty) => { $file_ty };
    (@value_ty $ty:ty; $default:expr) => { $ty };
    (@value_ty $ty:ty; ) => { Option<$ty> };
    (@from_file $value:expr, $key:expr, $path:expr) => { Ok::<_, String>($value) };
    (@from_file $value:expr, $key:expr, $path:expr, $parse:path) => {
        $value
            .map(|text| {
                $parse(&text).map_err(|why| {
                    format!("config {}: {} = {text:?}: {why}", $path.display(), $key)
                })
            })
            .transpose()
    };
}

serve_settings! {
    backend: String {
        arg: [env = "STOCKD_BACKEND", value_name = "BACKEND"], key: backend,
        default: "embedded".to_owned(),
        help: "Where the data lives: `embedded` (this process, its --data-dir), or \
               `redis://[:PASSWORD@]HOST:PORT[/DB]` (one Redis primary shared by any number of \
               servers), or `redis+sentinel://HOST:PORT,.../MASTER_NAME` (the primary Redis \
               Sentinel names, followed through failovers; `?db=N&password=...` after it), or \
               `redis+cluster://HOST:PORT,HOST:PORT,...` (default {})",
    }
    redis_partitions: u32 {
        arg: [env = "STOCKD_REDIS_PARTITIONS", value_name = "N"], key: redis_partitions,
        help: "Event feed partitions of a Redis Cluster dataset, fixed when the dataset is made \
               (default {} on a Cluster; a single Redis and the embedded engine have 1)",
        showing: stockd_redis::CLUSTER_PARTITIONS_DEFAULT,
    }
    redis_replicas: u32 {
        arg: [env = "STOCKD_REDIS_REPLICAS", value_name = "N"], key: redis_replicas,
        default: 0, range: REDIS_REPLICAS,
        help: "On Redis, replicas that must have a change before it is answered (one `WAIT` per \
               batched call); a change they do not acknowledge in time is answered 503 \
               (default {}: answered once the primary has it)",
    }
    redis_replica_timeout_ms: u64 {
        arg: [env = "STOCKD_REDIS_REPLICA_TIMEOUT_MS", value_name = "MS"],
        key: redis_replica_timeout_ms,
        default: stockd_redis::REPLICA_TIMEOUT_MS_DEFAULT, range: REDIS_REPLICA_TIMEOUT_MS,
        help: "How long a change waits for its --redis-replicas before it is answered 503, \
               outcome unknown (default {})",
    }
    listen: SocketAddr {
        arg: [env = "STOCKD_LISTEN", value_name = "IP:PORT", value_parser = parse_listen],
        key: listen from String, by parse_listen,
        default: LISTEN_DEFAULT.parse::<SocketAddr>().expect("a valid default"),
        help: "Address to listen on, an IP address and port; host names are not resolved \
               (default {}; 0.0.0.0:PORT for every interface, which needs --tokens)",
    }
    data_dir: PathBuf {
        arg: [env = "STOCKD_DATA_DIR", value_name = "DIR"], key: data_dir,
        default: PathBuf::from(DATA_DIR_DEFAULT),
        help: "Directory of the write-ahead log and snapshots of the embedded engine \
               (default {})",
        showing: DATA_DIR_DEFAULT,
    }
    config: PathBuf {
        arg: [env = "STOCKD_CONFIG", value_name = "FILE"],
        help: "TOML config file (default none). Keys: {}",
        showing: FILE_KEYS.join(", "),
    }
    tokens: TokenEntries {
        arg: [
            env = "STOCKD_TOKENS",
            hide_env_values = true,
            value_name = "ROLE:SECRET,...",
            value_parser = TokenEntries::from_list,
        ],
        key: tokens "(a list of \"role:secret\")",
        default: TokenEntries::default(),
        help: "Bearer tokens as `role:secret` pairs separated by commas, roles admin and \
               client, secrets of 8 bytes or more (default {}: no auth, and only a loopback \
               --listen)",
        showing: "none",
    }
    insecure_no_auth: bool {
        arg: [action = clap::ArgAction::SetTrue],
        default: false,
        help: "Serve without tokens on a non-loopback address (default off; never do this in \
               production)",
    }
    hold_retention_ms: u64 {
        arg: [env = "STOCKD_HOLD_RETENTION_MS", value_name = "MS"], key: hold_retention_ms,
        default: HOLD_RETENTION_MS_DEFAULT,
        help: "How long released, expired and refunded holds are kept, for idempotent retries \
               (default {}, 24 h). On Redis, the dataset's: stored when it is made",
    }
    confirmed_retention_ms: u64 {
        arg: [env = "STOCKD_CONFIRMED_RETENTION_MS", value_name = "MS"],
        key: confirmed_retention_ms,
        default: CONFIRMED_RETENTION_MS_DEFAULT,
        help: "How long confirmed holds are kept, the refund window (default {}, 7 days). On \
               Redis, the dataset's: stored when it is made",
    }
    event_retention_max: usize {
        arg: [env = "STOCKD_EVENT_RETENTION_MAX", value_name = "N"], key: event_retention_max,
        default: stockd_core::limits::EVENT_RETENTION_MAX_DEFAULT,
        help: "Events kept for the feed; a consumer further behind gets 410 events_expired \
               (default {}). On Redis, the dataset's: stored when it is made",
    }
    snapshot_every_records: u64 {
        arg: [env = "STOCKD_SNAPSHOT_EVERY_RECORDS", value_name = "N"], key: snapshot_every_records,
        default: EngineConfig::new(DATA_DIR_DEFAULT).snapshot_every_records,
        help: "Log records between snapshots of the embedded engine (default {})",
    }
    max_connections: usize {
        arg: [env = "STOCKD_MAX_CONNECTIONS", value_name = "N"], key: max_connections,
        default: ConnectionLimits::default().max_connections, range: MAX_CONNECTIONS,
        help: "Connections open at once; past it, new ones wait in the listen backlog. Keep it \
               under the process's open-files limit, `ulimit -n` (default {})",
    }
    header_timeout_ms: u64 {
        arg: [env = "STOCKD_HEADER_TIMEOUT_MS", value_name = "MS"], key: header_timeout_ms,
        default: millis(ConnectionLimits::default().header_timeout), range: TIMEOUT_MS,
        help: "How long a request head may take to arrive from its first byte, and a new \
               connection to send its first request, before the connection is closed \
               (default {})",
    }
    body_timeout_ms: u64 {
        arg: [env = "STOCKD_BODY_TIMEOUT_MS", value_name = "MS"], key: body_timeout_ms,
        default: millis(BODY_TIMEOUT_DEFAULT), range: TIMEOUT_MS,
        help: "How long a request body may take to arrive in full once its head has; slower \
               gets 408 request_timeout and the connection is closed (default {})",
    }
    idle_timeout_ms: u64 {
        arg: [env = "STOCKD_IDLE_TIMEOUT_MS", value_name = "MS"], key: idle_timeout_ms,
        default: millis(ConnectionLimits::default().idle_timeout), range: TIMEOUT_MS,
        help: "How long a keep-alive connection may wait for its next request (default {})",
    }
    write_timeout_ms: u64 {
        arg: [env = "STOCKD_WRITE_TIMEOUT_MS", value_name = "MS"], key: write_timeout_ms,
        default: millis(ConnectionLimits::default().write_timeout), range: TIMEOUT_MS,
        help: "How long a write may stay blocked on a client that does not read (default {})",
    }
    max_header_bytes: usize {
        arg: [env = "STOCKD_MAX_HEADER_BYTES", value_name = "BYTES"], key: max_header_bytes,
        default: ConnectionLimits::default().max_header_bytes, range: MAX_HEADER_BYTES,
        help: "Largest request head, request line and headers, in bytes; larger gets 431 \
               (default {})",
    }
    worker_threads: usize {
        arg: [
            env = "STOCKD_WORKER_THREADS",
            value_name = "N",
            value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
                .range(1..=WORKER_THREADS_MAX),
        ],
        key: worker_threads,
        default: serve_worker_threads(
            std::thread::available_parallelism().map_or(1, usize::from),
        ),
        range: WORKER_THREADS,
        help: "HTTP worker threads (default one per core but one, at least one: the engine's \
               writer thread keeps a core)",
    }
}

/// `help` with its `{}` replaced by `shown`, the default as the help says it.
fn with_shown(help: &str, shown: impl Display) -> String {
    help.replacen("{}", &shown.to_string(), 1)
}

/// A duration as the whole milliseconds a `_ms` setting takes.
fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Refuses a setting outside its range, naming it and what was given.
fn check_range<T: PartialOrd + Display>(
    name: &str,
    value: Option<&T>,
    bounds: &Bounds<T>,
) -> Result<(), String> {
    let Bounds { range, unit } = bounds;
    match value {
        Some(value) if !range.contains(value) => Err(format!(
            "{name} must be from {} to {}{unit}, got {value}",
            range.start(),
            range.end()
        )),
        _ => Ok(()),
    }
}

/// `serve`'s HTTP worker threads when --worker-threads is not given: one per core but one,
/// and at least one. The engine's writer thread decides every change and waits for its fsync:
/// while it is preempted, no request anywhere is answered, so it gets a core of its own.
///
/// Measured on 2 cores (docs/benchmarks.md, "Worker threads"), one worker against two: the team
/// race at 1,000 connections lost its slow mode (p99 96-263 ms in 5 of 6 runs with two, 43-55
/// ms in all of them with one), CPU per request fell from 21.0-23.1 to 17.5-17.6 µs and context
/// switches per request from 0.28-0.30 to 0.05-0.07; the writer's group grew from 31-33
/// requests per fsync to 42-44.
pub fn serve_worker_threads(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

/// The token entries (`role:secret`) as given, not yet checked: from `--tokens` /
/// `STOCKD_TOKENS`, a comma-separated list (empty entries left out), or the config file's
/// list. Their `Debug` hides them: they hold secrets.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct TokenEntries(pub Vec<String>);

impl TokenEntries {
    /// Splits the flag's list; never fails, so that clap never shows a secret in an error
    /// (the entries are checked with the settings, by `serve::parse_token`).
    fn from_list(list: &str) -> Result<TokenEntries, std::convert::Infallible> {
        let entries = list.split(',').filter(|entry| !entry.trim().is_empty());
        Ok(TokenEntries(entries.map(str::to_string).collect()))
    }
}

impl std::fmt::Debug for TokenEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} token entries (redacted)", self.0.len())
    }
}

/// Parses `--listen` / `STOCKD_LISTEN` / the config file's `listen`: an IP address and port.
///
/// Host names are not resolved, on purpose: whether the address is loopback decides whether
/// stockd may serve without tokens, and `localhost` or a host name can resolve to another
/// address than the one meant (IPv6 only, a public address). The error says what to write.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let (host, port_text) = text.rsplit_once(':').unwrap_or(("", text));
    let port = port_text.parse::<u16>().ok();
    let suggested_port = port.map_or_else(|| "7070".to_owned(), |port| port.to_string());
    let why = if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("an IPv6 address takes brackets: [{host}]:{suggested_port}")
    } else if host.is_empty() {
        "an IP address and a port are needed, as IP:PORT".to_owned()
    } else if port.is_none() {
        format!("{port_text:?} is not a port number (0 to 65535)")
    } else {
        format!(
            "{host:?} is not an IP address, and host names are not resolved (the address \
             decides whether stockd may serve without tokens)"
        )
    };
    let port = suggested_port;
    Err(format!(
        "{why}; write 127.0.0.1:{port} (this machine only), 0.0.0.0:{port} (every \
         interface; needs --tokens) or [::1]:{port} (IPv6 loopback)"
    ))
}

impl ServeArgs {
    /// Reads the `--config` file, if any, and merges it with the flags: [`ServeArgs::values`].
    pub fn read(&self) -> Result<Values, String> {
        let Some(path) = &self.config else {
            return self.values(FileConfig::default(), Path::new("?"));
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file = toml::from_str::<FileConfig>(&text)
            .map_err(|e| format!("config {}: {e}", path.display()))?;
        self.values(file, path)
    }
}
