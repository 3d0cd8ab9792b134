//! `stockd serve`: the settings (declared in settings.rs: flags, environment and a config file)
//! turned into the backend's and the server's configuration, then the engine and the HTTP
//! server, until SIGTERM or SIGINT.
//!
//! This module wires pieces together; it must never decide anything about stock.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use stockd_core::{Backend, StateConfig};
use stockd_engine::{Engine, EngineConfig, SystemClock};
use stockd_redis::{RedisBackend, RedisConfig, StartError, StartingBackend, Target};
use stockd_server::{ConnectionLimits, Role, ServerConfig};

pub use crate::settings::ServeArgs;

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

/// Which backend, with its settings.
#[derive(Debug)]
pub enum BackendSettings {
    Embedded(EngineConfig),
    Redis(RedisConfig),
}

/// Settings after every source is merged. Its `Debug` hides the token secrets (the server's
/// configuration's does) and the Redis password (the target's does).
#[derive(Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub backend: BackendSettings,
    pub insecure_no_auth: bool,
    /// The HTTP server's: tokens, body limit and timeout, connection limits.
    pub server: ServerConfig,
    /// HTTP worker threads of the runtime main.rs builds.
    pub worker_threads: usize,
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
    /// The settings from every source ([`crate::settings`]), and what they make: the backend's
    /// configuration, the tokens, the connection limits.
    pub fn settings(&self) -> Result<Settings, String> {
        let values = self.read()?;
        let tokens = values
            .tokens
            .0
            .iter()
            .map(|entry| parse_token(entry))
            .collect::<Result<Vec<_>, _>>()?;
        let mut engine = EngineConfig::new(values.data_dir);
        engine.state = StateConfig {
            hold_retention_ms: values.hold_retention_ms,
            confirmed_retention_ms: values.confirmed_retention_ms,
        };
        engine.event_retention_max = values.event_retention_max;
        // 0 is taken as 1, as it always was.
        engine.snapshot_every_records = values.snapshot_every_records.max(1);
        let backend = match values.backend.as_str() {
            "embedded" => BackendSettings::Embedded(engine),
            url => {
                let mut redis = RedisConfig::new(Target::parse(url)?);
                if let Some(partitions) = values.redis_partitions {
                    redis.partitions = partitions;
                }
                redis.replicas = values.redis_replicas;
                redis.replica_timeout_ms = values.redis_replica_timeout_ms;
                redis.validate()?;
                redis.hold_retention_ms = engine.state.hold_retention_ms;
                redis.confirmed_retention_ms = engine.state.confirmed_retention_ms;
                redis.event_retention_max = engine.event_retention_max;
                BackendSettings::Redis(redis)
            }
        };
        let connections = ConnectionLimits {
            max_connections: values.max_connections,
            header_timeout: Duration::from_millis(values.header_timeout_ms),
            idle_timeout: Duration::from_millis(values.idle_timeout_ms),
            write_timeout: Duration::from_millis(values.write_timeout_ms),
            max_header_bytes: values.max_header_bytes,
        };
        Ok(Settings {
            listen: values.listen,
            backend,
            insecure_no_auth: values.insecure_no_auth,
            server: ServerConfig {
                tokens,
                body_limit_bytes: BODY_LIMIT_BYTES,
                body_timeout: Duration::from_millis(values.body_timeout_ms),
                connections,
            },
            worker_threads: values.worker_threads,
        })
    }
}

/// Serves with `settings` (read before the runtime started: its worker threads are one of
/// them) until SIGTERM or SIGINT.
pub async fn run(settings: Settings) -> ExitCode {
    if settings.server.tokens.is_empty()
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
    stockd_server::serve(listener, backend.clone(), settings.server, stop).await;
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
        /// The Redis to accept: `redis://[:PASSWORD@]HOST:PORT[/DB]`,
        /// `redis+sentinel://HOST:PORT,.../MASTER_NAME` or `redis+cluster://HOST:PORT,...`.
        #[arg(long, env = "STOCKD_BACKEND")]
        backend: String,
        /// The dataset's partitions (a Redis Cluster's; default 16 there, 1 on a single Redis).
        #[arg(long, env = "STOCKD_REDIS_PARTITIONS")]
        redis_partitions: Option<u32>,
        /// Replicas that must have the accept before it is done (as the servers'
        /// `--redis-replicas`; default 0).
        #[arg(long, env = "STOCKD_REDIS_REPLICAS", default_value_t = 0)]
        redis_replicas: u32,
    },
}

pub async fn run_redis(command: RedisCommand) -> ExitCode {
    match command {
        RedisCommand::Accept {
            backend,
            redis_partitions,
            redis_replicas,
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
            match stockd_redis::accept(&target, partitions, redis_replicas).await {
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
    let opened = tokio::task::spawn_blocking(move || {
        let opened = Engine::open(config, Arc::new(SystemClock));
        // On the thread that recovered, whose heap holds the scratch it freed.
        crate::give_back_freed_memory();
        opened
    })
    .await;
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
    use crate::settings::{parse_listen, DATA_DIR_DEFAULT, LISTEN_DEFAULT};
    use stockd_server::BODY_TIMEOUT_DEFAULT;

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

    #[test]
    fn worker_threads_come_from_the_flag_or_the_config_file_and_are_checked() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("stockd.toml");
        let config = path.to_str().expect("UTF-8");
        std::fs::write(&path, "worker_threads = 3\n").expect("write the config");
        assert_eq!(settings(&["--config", config]).unwrap().worker_threads, 3);
        let flag_wins = settings(&["--config", config, "--worker-threads", "2"]).unwrap();
        assert_eq!(flag_wins.worker_threads, 2);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let default = settings(&[]).unwrap().worker_threads;
        assert_eq!(default, crate::settings::serve_worker_threads(cores));
        for bad in ["0", "1025"] {
            std::fs::write(&path, format!("worker_threads = {bad}\n")).expect("write the config");
            let error = settings(&["--config", config]).unwrap_err();
            assert_eq!(
                error,
                format!("worker_threads must be from 1 to 1024, got {bad}")
            );
        }
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
            ("redis_replicas", "(default 0:".into()),
            (
                "redis_replica_timeout_ms",
                format!("(default {})", stockd_redis::REPLICA_TIMEOUT_MS_DEFAULT),
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
        let limits = limits.server;
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
