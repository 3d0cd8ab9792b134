//! `stockd serve`: settings from flags, environment and a config file, then the engine and the
//! HTTP server, until SIGTERM or SIGINT.
//!
//! Precedence is flag > environment > config file > default. This module wires pieces together;
//! it must never decide anything about stock.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use stockd_core::{Backend, StateConfig};
use stockd_engine::{Engine, EngineConfig, SystemClock};
use stockd_redis::{RedisBackend, RedisConfig, StartError, StartingBackend, Target};
use stockd_server::{ConnectionLimits, Role, ServerConfig, BODY_TIMEOUT_DEFAULT};

pub const LISTEN_DEFAULT: &str = "127.0.0.1:7070";
pub const DATA_DIR_DEFAULT: &str = "./stockd-data";

/// The listening socket. Its accept queue is as deep as the kernel allows
/// (`net.core.somaxconn`, 4096 on current Linux): a sale opens a thousand connections in the same
/// millisecond, and with std's and tokio's default of 1,024 (or Redis's 511) the SYNs past a full
/// queue are dropped, and those clients retry only after the kernel's one-second SYN timeout,
/// which was the whole tail of a 1,000-connection race.
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    const BACKLOG: u32 = 65_535;
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // What std's TcpListener::bind does too: a restarted server can bind while old
    // connections linger in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Request bodies above this are refused with 413.
pub const BODY_LIMIT_BYTES: usize = 1024 * 1024;

/// Environment variables `stockd serve` reads that have no flag; shown under `serve --help`.
const ENVIRONMENT_HELP: &str = "\
Environment without a flag:
  STOCKD_LOG=FILTER         what to log, as a tracing filter (default info; e.g. warn, or
                            info,stockd_server=debug)
  STOCKD_LOG_FORMAT=FORMAT  text (default; coloured only on a terminal, never with NO_COLOR
                            set) or json (one object a line, for log shippers)

Flags win over the environment, which wins over the --config file, which wins over the
defaults. A flag shown with [env: STOCKD_...] may be given as that variable instead.";

#[derive(Debug, clap::Args)]
#[command(after_help = ENVIRONMENT_HELP)]
pub struct ServeArgs {
    /// Where the data lives: `embedded` (this process, its --data-dir), or
    /// `redis://[:PASSWORD@]HOST:PORT[/DB]` (one Redis primary shared by any number of servers),
    /// or `redis+cluster://HOST:PORT,HOST:PORT,...` (default embedded).
    #[arg(long, env = "STOCKD_BACKEND", value_name = "BACKEND")]
    pub backend: Option<String>,
    /// Event feed partitions of a Redis Cluster dataset, fixed when the dataset is made
    /// (default 16 on a Cluster; a single Redis and the embedded engine have 1).
    #[arg(long, env = "STOCKD_REDIS_PARTITIONS", value_name = "N")]
    pub redis_partitions: Option<u32>,
    /// Address to listen on, an IP address and port; host names are not resolved (default
    /// 127.0.0.1:7070; 0.0.0.0:PORT for every interface, which needs --tokens).
    #[arg(long, env = "STOCKD_LISTEN", value_name = "IP:PORT", value_parser = parse_listen)]
    pub listen: Option<SocketAddr>,
    /// Directory of the write-ahead log and snapshots of the embedded engine (default
    /// ./stockd-data).
    #[arg(long, env = "STOCKD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML config file (default none). Keys: backend, redis_partitions, listen, data_dir,
    /// tokens (a list of "role:secret"), hold_retention_ms, confirmed_retention_ms,
    /// event_retention_max, snapshot_every_records, max_connections, header_timeout_ms,
    /// body_timeout_ms, idle_timeout_ms, write_timeout_ms, max_header_bytes.
    #[arg(long, env = "STOCKD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Bearer tokens as `role:secret` pairs separated by commas, roles admin and client,
    /// secrets of 8 bytes or more (default none: no auth, and only a loopback --listen).
    #[arg(
        long,
        env = "STOCKD_TOKENS",
        hide_env_values = true,
        value_name = "ROLE:SECRET,..."
    )]
    pub tokens: Option<String>,
    /// Serve without tokens on a non-loopback address (default off; never do this in
    /// production).
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// How long released, expired and refunded holds are kept, for idempotent retries
    /// (default 86400000, 24 h). On Redis, the dataset's: stored when it is made.
    #[arg(long, env = "STOCKD_HOLD_RETENTION_MS", value_name = "MS")]
    pub hold_retention_ms: Option<u64>,
    /// How long confirmed holds are kept, the refund window (default 604800000, 7 days). On
    /// Redis, the dataset's: stored when it is made.
    #[arg(long, env = "STOCKD_CONFIRMED_RETENTION_MS", value_name = "MS")]
    pub confirmed_retention_ms: Option<u64>,
    /// Events kept for the feed; a consumer further behind gets 410 events_expired (default
    /// 1000000). On Redis, the dataset's: stored when it is made.
    #[arg(long, env = "STOCKD_EVENT_RETENTION_MAX", value_name = "N")]
    pub event_retention_max: Option<usize>,
    /// Log records between snapshots of the embedded engine (default 1000000).
    #[arg(long, env = "STOCKD_SNAPSHOT_EVERY_RECORDS", value_name = "N")]
    pub snapshot_every_records: Option<u64>,
    /// Connections open at once; past it, new ones wait in the listen backlog. Keep it under
    /// the process's open-files limit, `ulimit -n` (default 10000).
    #[arg(long, env = "STOCKD_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// How long a request head may take to arrive from its first byte, and a new connection to
    /// send its first request, before the connection is closed (default 10000).
    #[arg(long, env = "STOCKD_HEADER_TIMEOUT_MS", value_name = "MS")]
    pub header_timeout_ms: Option<u64>,
    /// How long a request body may take to arrive in full once its head has; slower gets 408
    /// request_timeout and the connection is closed (default 10000).
    #[arg(long, env = "STOCKD_BODY_TIMEOUT_MS", value_name = "MS")]
    pub body_timeout_ms: Option<u64>,
    /// How long a keep-alive connection may wait for its next request (default 60000).
    #[arg(long, env = "STOCKD_IDLE_TIMEOUT_MS", value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,
    /// How long a write may stay blocked on a client that does not read (default 10000).
    #[arg(long, env = "STOCKD_WRITE_TIMEOUT_MS", value_name = "MS")]
    pub write_timeout_ms: Option<u64>,
    /// Largest request head, request line and headers, in bytes; larger gets 431 (default
    /// 16384).
    #[arg(long, env = "STOCKD_MAX_HEADER_BYTES", value_name = "BYTES")]
    pub max_header_bytes: Option<usize>,
    /// HTTP worker threads (default one per core but one, at least one: the engine's writer
    /// thread keeps a core). Not a config file key: the threads start before the file is read.
    #[arg(
        long,
        env = "STOCKD_WORKER_THREADS",
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=WORKER_THREADS_MAX)
    )]
    pub worker_threads: Option<u16>,
}

/// More HTTP worker threads than this is a typo, not a machine.
const WORKER_THREADS_MAX: i64 = 1024;

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

/// The config file. Every key is optional; unknown keys are refused so typos are caught.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    backend: Option<String>,
    redis_partitions: Option<u32>,
    /// Parsed with [`parse_listen`], for the same message as the flag's.
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    tokens: Option<Vec<String>>,
    hold_retention_ms: Option<u64>,
    confirmed_retention_ms: Option<u64>,
    event_retention_max: Option<usize>,
    snapshot_every_records: Option<u64>,
    max_connections: Option<usize>,
    header_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    write_timeout_ms: Option<u64>,
    max_header_bytes: Option<usize>,
}

/// Which backend, with its settings.
#[derive(Debug)]
pub enum BackendSettings {
    Embedded(EngineConfig),
    Redis(RedisConfig),
}

/// Settings after every source is merged. Its `Debug` hides the token secrets.
pub struct Settings {
    pub listen: SocketAddr,
    pub backend: BackendSettings,
    pub tokens: Vec<(String, Role)>,
    pub insecure_no_auth: bool,
    pub body_timeout: Duration,
    pub connections: ConnectionLimits,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let roles: Vec<Role> = self.tokens.iter().map(|(_, role)| *role).collect();
        f.debug_struct("Settings")
            .field("listen", &self.listen)
            .field("backend", &self.backend)
            .field(
                "tokens",
                &format_args!("{} redacted ({roles:?})", roles.len()),
            )
            .field("insecure_no_auth", &self.insecure_no_auth)
            .field("body_timeout", &self.body_timeout)
            .field("connections", &self.connections)
            .finish()
    }
}

/// Timeouts are 100 ms to 1 hour.
const TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=3_600_000;
const MAX_CONNECTIONS_RANGE: std::ops::RangeInclusive<usize> = 1..=1_000_000;
const MAX_HEADER_BYTES_RANGE: std::ops::RangeInclusive<usize> = 1024..=1024 * 1024;

/// A timeout setting: the first source that has it, checked, or the default.
fn timeout(name: &str, value: Option<u64>, default: Duration) -> Result<Duration, String> {
    match value {
        None => Ok(default),
        Some(ms) if TIMEOUT_MS_RANGE.contains(&ms) => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(format!(
            "{name} must be from {} to {} (milliseconds), got {ms}",
            TIMEOUT_MS_RANGE.start(),
            TIMEOUT_MS_RANGE.end()
        )),
    }
}

fn within(
    name: &str,
    value: Option<usize>,
    range: std::ops::RangeInclusive<usize>,
    default: usize,
) -> Result<usize, String> {
    match value {
        None => Ok(default),
        Some(n) if range.contains(&n) => Ok(n),
        Some(n) => Err(format!(
            "{name} must be from {} to {}, got {n}",
            range.start(),
            range.end()
        )),
    }
}

fn parse_token(entry: &str) -> Result<(String, Role), String> {
    let (role, secret) = entry
        .trim()
        .split_once(':')
        .ok_or_else(|| format!("token entry {entry:?} must be role:secret"))?;
    let role = match role {
        "admin" => Role::Admin,
        "client" => Role::Client,
        other => return Err(format!("unknown role {other:?} (admin or client)")),
    };
    if secret.len() < 8 {
        return Err("a token secret must be at least 8 bytes".into());
    }
    Ok((secret.to_string(), role))
}

impl ServeArgs {
    pub fn settings(self) -> Result<Settings, String> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| format!("config {}: {e}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let file_listen = match &file.listen {
            Some(text) => Some(parse_listen(text).map_err(|why| {
                let path = self.config.as_deref().unwrap_or(std::path::Path::new("?"));
                format!("config {}: listen = {text:?}: {why}", path.display())
            })?),
            None => None,
        };
        let listen = self
            .listen
            .or(file_listen)
            .unwrap_or_else(|| LISTEN_DEFAULT.parse().expect("valid default"));
        let data_dir = self
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from(DATA_DIR_DEFAULT));
        let token_entries: Vec<String> = match self.tokens {
            Some(list) => list
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(str::to_string)
                .collect(),
            None => file.tokens.unwrap_or_default(),
        };
        let tokens = token_entries
            .iter()
            .map(|entry| parse_token(entry))
            .collect::<Result<Vec<_>, _>>()?;
        let mut engine = EngineConfig::new(data_dir);
        let defaults = StateConfig::default();
        engine.state = StateConfig {
            hold_retention_ms: self
                .hold_retention_ms
                .or(file.hold_retention_ms)
                .unwrap_or(defaults.hold_retention_ms),
            confirmed_retention_ms: self
                .confirmed_retention_ms
                .or(file.confirmed_retention_ms)
                .unwrap_or(defaults.confirmed_retention_ms),
        };
        if let Some(n) = self.event_retention_max.or(file.event_retention_max) {
            engine.event_retention_max = n;
        }
        if let Some(n) = self.snapshot_every_records.or(file.snapshot_every_records) {
            engine.snapshot_every_records = n.max(1);
        }
        let backend = match self.backend.or(file.backend).as_deref() {
            None | Some("embedded") => BackendSettings::Embedded(engine),
            Some(url) => {
                let mut redis = RedisConfig::new(Target::parse(url)?);
                if let Some(partitions) = self.redis_partitions.or(file.redis_partitions) {
                    redis.partitions = partitions;
                }
                redis.validate()?;
                redis.hold_retention_ms = engine.state.hold_retention_ms;
                redis.confirmed_retention_ms = engine.state.confirmed_retention_ms;
                redis.event_retention_max = engine.event_retention_max;
                BackendSettings::Redis(redis)
            }
        };
        let limits = ConnectionLimits::default();
        let connections = ConnectionLimits {
            max_connections: within(
                "max_connections",
                self.max_connections.or(file.max_connections),
                MAX_CONNECTIONS_RANGE,
                limits.max_connections,
            )?,
            header_timeout: timeout(
                "header_timeout_ms",
                self.header_timeout_ms.or(file.header_timeout_ms),
                limits.header_timeout,
            )?,
            idle_timeout: timeout(
                "idle_timeout_ms",
                self.idle_timeout_ms.or(file.idle_timeout_ms),
                limits.idle_timeout,
            )?,
            write_timeout: timeout(
                "write_timeout_ms",
                self.write_timeout_ms.or(file.write_timeout_ms),
                limits.write_timeout,
            )?,
            max_header_bytes: within(
                "max_header_bytes",
                self.max_header_bytes.or(file.max_header_bytes),
                MAX_HEADER_BYTES_RANGE,
                limits.max_header_bytes,
            )?,
        };
        let body_timeout = timeout(
            "body_timeout_ms",
            self.body_timeout_ms.or(file.body_timeout_ms),
            BODY_TIMEOUT_DEFAULT,
        )?;
        Ok(Settings {
            listen,
            backend,
            tokens,
            insecure_no_auth: self.insecure_no_auth,
            body_timeout,
            connections,
        })
    }
}

pub async fn run(args: ServeArgs) -> ExitCode {
    let settings = match args.settings() {
        Ok(settings) => settings,
        Err(why) => {
            eprintln!("error: {why}");
            return ExitCode::from(2);
        }
    };
    if settings.tokens.is_empty()
        && !settings.listen.ip().is_loopback()
        && !settings.insecure_no_auth
    {
        eprintln!(
            "error: refusing to serve without tokens on non-loopback address {}; set \
             STOCKD_TOKENS or pass --insecure-no-auth",
            settings.listen
        );
        return ExitCode::from(2);
    }
    let listener = match listen(settings.listen) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("error: cannot listen on {}: {error}", settings.listen);
            return ExitCode::from(1);
        }
    };
    // A Redis that cannot be reached at start is retried while the server listens (503 until
    // then); one found, once reached, to be a Redis to refuse stops the server as a failed
    // start would.
    let mut refused_later = None;
    let backend: Arc<dyn Backend> = match settings.backend {
        BackendSettings::Embedded(engine) => match open_engine(engine).await {
            Ok(engine) => Arc::new(engine),
            Err(code) => return code,
        },
        BackendSettings::Redis(config) => match RedisBackend::connect(config.clone()).await {
            Ok(backend) => {
                tracing::info!("backend: redis");
                Arc::new(backend)
            }
            Err(error) if error.is_unreachable() => {
                tracing::warn!(%error, "Redis cannot be reached at start: answering 503 and retrying");
                let (backend, refused) = StartingBackend::spawn(config, &error);
                refused_later = Some(refused);
                backend
            }
            Err(error) => {
                eprintln!("error: cannot start the Redis backend: {error}");
                return ExitCode::from(1);
            }
        },
    };
    let config = ServerConfig {
        tokens: settings.tokens,
        body_limit_bytes: BODY_LIMIT_BYTES,
        body_timeout: settings.body_timeout,
        connections: settings.connections,
    };
    let worker_threads = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(listen = %settings.listen, worker_threads, "stockd serving");
    let refusal: Arc<std::sync::Mutex<Option<StartError>>> = Arc::default();
    let stop = {
        let refusal = refusal.clone();
        async move {
            let refused = async {
                match refused_later {
                    Some(refused) => refused.await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = crate::signals::stop_requested() => {
                    tracing::info!("stop signal received; finishing in-flight requests");
                }
                Some(error) = refused => {
                    tracing::error!(%error, "cannot start the Redis backend; stopping");
                    *refusal.lock().expect("refusal lock") = Some(error);
                }
            }
        }
    };
    stockd_server::serve(listener, backend.clone(), config, stop).await;
    // In-flight requests are done; make everything durable before exiting.
    if let Err(error) = backend.shutdown().await {
        tracing::warn!(%error, "backend shutdown");
    }
    if let Some(error) = refusal.lock().expect("refusal lock").take() {
        eprintln!("error: cannot start the Redis backend: {error}");
        return ExitCode::from(1);
    }
    tracing::info!("stopped cleanly");
    ExitCode::SUCCESS
}

#[derive(Debug, clap::Subcommand)]
pub enum RedisCommand {
    /// Accept the data Redis holds now as the dataset, after it came back with less than it had
    /// (restarted empty, restored from a backup, failed over to a lagging replica). Servers
    /// answer 503 until this is run; check what was lost first (see docs/redis.md). Event seqs,
    /// fencing tokens and the other counters then go on above every value handed out before
    /// the loss (Redis's clock in microseconds).
    Accept {
        /// The Redis to accept: `redis://[:PASSWORD@]HOST:PORT[/DB]` or
        /// `redis+cluster://HOST:PORT,...`.
        #[arg(long, env = "STOCKD_BACKEND")]
        backend: String,
        /// The dataset's partitions (a Redis Cluster's; default 16 there, 1 on a single Redis).
        #[arg(long, env = "STOCKD_REDIS_PARTITIONS")]
        redis_partitions: Option<u32>,
    },
}

pub async fn run_redis(command: RedisCommand) -> ExitCode {
    match command {
        RedisCommand::Accept {
            backend,
            redis_partitions,
        } => {
            let target = match Target::parse(&backend) {
                Ok(target) => target,
                Err(why) => {
                    eprintln!("error: {why}");
                    return ExitCode::from(2);
                }
            };
            let partitions =
                redis_partitions.unwrap_or(RedisConfig::new(target.clone()).partitions);
            match stockd_redis::accept(&target, partitions).await {
                Ok(marker) => {
                    println!("accepted: dataset marker is now {}", marker.text);
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

async fn open_engine(config: EngineConfig) -> Result<Engine, ExitCode> {
    let data_dir = config.data_dir.clone();
    let opened =
        tokio::task::spawn_blocking(move || Engine::open(config, Arc::new(SystemClock))).await;
    match opened {
        Ok(Ok(engine)) => {
            tracing::info!(data_dir = %data_dir.display(), "backend: embedded");
            Ok(engine)
        }
        Ok(Err(error)) => {
            eprintln!(
                "error: cannot open data dir {}: {error}",
                data_dir.display()
            );
            Err(ExitCode::from(1))
        }
        Err(error) => {
            eprintln!("error: engine start panicked: {error}");
            Err(ExitCode::from(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_entries() {
        assert_eq!(
            parse_token("admin:secret-123").unwrap(),
            ("secret-123".to_string(), Role::Admin)
        );
        assert!(parse_token("root:secret-123").is_err());
        assert!(parse_token("admin").is_err());
        assert!(parse_token("client:short").is_err());
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn settings(args: &[&str]) -> Result<Settings, String> {
        use clap::Parser;
        let cli = Cli::try_parse_from(std::iter::once("stockd").chain(args.iter().copied()))
            .map_err(|error| error.to_string())?;
        cli.serve.settings()
    }

    #[test]
    fn listen_takes_an_ip_and_port_and_says_what_to_write_instead() {
        assert_eq!(
            parse_listen("127.0.0.1:7070"),
            Ok(([127, 0, 0, 1], 7070).into())
        );
        assert_eq!(
            parse_listen("[::1]:8080"),
            Ok("[::1]:8080".parse().expect("an address"))
        );
        for (bad, why, port) in [
            (
                "localhost:7070",
                "\"localhost\" is not an IP address, and host names are not resolved",
                "7070",
            ),
            (
                "stock.example:9000",
                "\"stock.example\" is not an IP address",
                "9000",
            ),
            (
                "::1:7070",
                "an IPv6 address takes brackets: [::1]:7070",
                "7070",
            ),
            ("7070", "an IP address and a port are needed", "7070"),
            (":8080", "an IP address and a port are needed", "8080"),
            ("127.0.0.1:http", "\"http\" is not a port number", "7070"),
        ] {
            let error = parse_listen(bad).expect_err(bad);
            assert!(error.contains(why), "{bad}: {error}");
            assert!(
                error.contains(&format!(
                    "write 127.0.0.1:{port} (this machine only), 0.0.0.0:{port}"
                )),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_config_files_listen_is_checked_like_the_flag() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("stockd.toml");
        std::fs::write(&path, "listen = \"localhost:7070\"\n").expect("write the config");
        let error = settings(&["--config", path.to_str().expect("UTF-8")]).unwrap_err();
        assert!(
            error.contains("listen = \"localhost:7070\"") && error.contains("write 127.0.0.1:7070"),
            "{error}"
        );
        std::fs::write(&path, "listen = \"127.0.0.1:7171\"\n").expect("write the config");
        let settings = settings(&["--config", path.to_str().expect("UTF-8")]).unwrap();
        assert_eq!(settings.listen, ([127, 0, 0, 1], 7171).into());
    }

    /// Every setting's help says its default, and the defaults said are the ones the code
    /// uses.
    #[test]
    fn help_says_every_default_as_the_code_has_it() {
        use clap::Args;
        let command = ServeArgs::augment_args(clap::Command::new("serve"));
        let state = StateConfig::default();
        let engine = EngineConfig::new(DATA_DIR_DEFAULT);
        let limits = ConnectionLimits::default();
        let expected: Vec<(&str, String)> = vec![
            ("backend", "(default embedded)".into()),
            (
                "redis_partitions",
                format!(
                    "(default {} on a Cluster",
                    stockd_redis::CLUSTER_PARTITIONS_DEFAULT
                ),
            ),
            ("listen", format!("(default {LISTEN_DEFAULT};")),
            ("data_dir", format!("(default {DATA_DIR_DEFAULT})")),
            ("config", "(default none)".into()),
            ("tokens", "(default none:".into()),
            ("insecure_no_auth", "(default off;".into()),
            (
                "hold_retention_ms",
                format!("(default {}, 24 h)", state.hold_retention_ms),
            ),
            (
                "confirmed_retention_ms",
                format!("(default {}, 7 days)", state.confirmed_retention_ms),
            ),
            (
                "event_retention_max",
                format!("(default {})", engine.event_retention_max),
            ),
            (
                "snapshot_every_records",
                format!("(default {})", engine.snapshot_every_records),
            ),
            (
                "max_connections",
                format!("(default {})", limits.max_connections),
            ),
            (
                "header_timeout_ms",
                format!("(default {})", limits.header_timeout.as_millis()),
            ),
            (
                "body_timeout_ms",
                format!("(default {})", BODY_TIMEOUT_DEFAULT.as_millis()),
            ),
            (
                "idle_timeout_ms",
                format!("(default {})", limits.idle_timeout.as_millis()),
            ),
            (
                "write_timeout_ms",
                format!("(default {})", limits.write_timeout.as_millis()),
            ),
            (
                "max_header_bytes",
                format!("(default {})", limits.max_header_bytes),
            ),
            ("worker_threads", "(default one per core but one".into()),
        ];
        let arguments: Vec<&clap::Arg> = command.get_arguments().collect();
        assert_eq!(
            arguments.len(),
            expected.len(),
            "a setting was added: say its default here and in its help"
        );
        for (id, default) in expected {
            let argument = arguments
                .iter()
                .find(|argument| argument.get_id() == id)
                .unwrap_or_else(|| panic!("no argument {id}"));
            let help = argument
                .get_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(help.contains(&default), "{id}: {default:?} not in {help:?}");
        }
    }

    #[test]
    fn secrets_never_show_in_settings() {
        let settings = settings(&[
            "--tokens",
            "admin:admin-s3cret,client:client-s3cret",
            "--backend",
            "redis://:redis-s3cret@127.0.0.1:6379",
        ])
        .unwrap();
        let shown = format!("{settings:?}");
        for secret in ["admin-s3cret", "client-s3cret", "redis-s3cret"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("2 redacted"), "{shown}");
    }

    #[test]
    fn connection_limits_are_checked() {
        let limits = settings(&[
            "--header-timeout-ms",
            "100",
            "--idle-timeout-ms",
            "3600000",
            "--max-connections",
            "1",
            "--max-header-bytes",
            "1024",
            "--body-timeout-ms",
            "2500",
        ])
        .unwrap();
        assert_eq!(
            limits.connections.header_timeout,
            Duration::from_millis(100)
        );
        assert_eq!(limits.connections.idle_timeout, Duration::from_secs(3600));
        assert_eq!(limits.connections.max_connections, 1);
        assert_eq!(limits.connections.max_header_bytes, 1024);
        assert_eq!(limits.body_timeout, Duration::from_millis(2500));
        for (flag, value, named) in [
            ("--header-timeout-ms", "99", "header_timeout_ms"),
            ("--idle-timeout-ms", "3600001", "idle_timeout_ms"),
            ("--write-timeout-ms", "0", "write_timeout_ms"),
            ("--body-timeout-ms", "0", "body_timeout_ms"),
            ("--max-connections", "0", "max_connections"),
            ("--max-header-bytes", "1023", "max_header_bytes"),
        ] {
            let error = settings(&[flag, value]).unwrap_err();
            assert!(
                error.contains(named) && error.contains(value),
                "{flag} {value}: {error}"
            );
        }
    }
}
