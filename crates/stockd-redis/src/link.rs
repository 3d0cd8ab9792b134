//! The connection to Redis: one multiplexed connection to a single primary (reconnected by
//! redis-rs's `ConnectionManager`), the primary Redis Sentinel names (found again after a
//! failover), or a Redis Cluster connection (redis-rs follows MOVED and ASK and keeps the slot
//! map). Also loads the function library where it is missing, and, with `--redis-replicas N`,
//! holds every function call's answer until N replicas have what it wrote and read (`WAIT`).
//!
//! A command whose answer is lost (a timeout or a dropped connection after it was sent) is an
//! error here, never retried: the caller answers 503 and the client's retry, keyed by its
//! hold_id, finds out what happened. Only "the library is not there" is retried, once, after
//! loading it: that answer means nothing ran.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, RedisConnectionInfo, RedisError, RedisResult, Value,
};

use crate::library;

/// Where the data lives, as given by `--backend`. Its `Debug` hides passwords.
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://[:PASSWORD@]HOST:PORT[/DB]`: one primary.
    Single(String),
    /// `redis+sentinel://HOST:PORT,HOST:PORT/MASTER_NAME[?db=N&password=...]`: the primary that
    /// Redis Sentinel names.
    Sentinel(SentinelTarget),
    /// `redis+cluster://[:PASSWORD@]HOST:PORT,HOST:PORT,...`: a Redis Cluster, as `redis://` URLs
    /// of its seed nodes.
    Cluster(Vec<String>),
}

/// A primary found through Redis Sentinel.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    /// The Sentinels, as `redis://` URLs (with their own credentials, if any).
    pub sentinels: Vec<String>,
    /// The name the Sentinels monitor the primary under.
    pub master: String,
    pub db: i64,
    pub username: Option<String>,
    pub password: Option<String>,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
}

impl SentinelTarget {
    /// The Sentinels' connection settings, their credentials included.
    fn sentinel_infos(&self) -> RedisResult<Vec<redis::ConnectionInfo>> {
        self.sentinels
            .iter()
            .map(|host| {
                let info: redis::ConnectionInfo = redis::IntoConnectionInfo::into_connection_info(
                    format!("redis://{host}").as_str(),
                )?;
                let mut settings = info.redis_settings().clone();
                if let Some(username) = &self.sentinel_username {
                    settings = settings.set_username(username);
                }
                if let Some(password) = &self.sentinel_password {
                    settings = settings.set_password(password);
                }
                Ok(info.set_redis_settings(settings))
            })
            .collect()
    }

    /// How to talk to the primary once found.
    fn node_info(&self) -> RedisConnectionInfo {
        let mut info = RedisConnectionInfo::default().set_db(self.db);
        if let Some(username) = &self.username {
            info = info.set_username(username);
        }
        if let Some(password) = &self.password {
            info = info.set_password(password);
        }
        info
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Single(url) => f.debug_tuple("Single").field(&redact(url)).finish(),
            Target::Sentinel(target) => f
                .debug_struct("Sentinel")
                .field(
                    "sentinels",
                    &target
                        .sentinels
                        .iter()
                        .map(|url| redact(url))
                        .collect::<Vec<_>>(),
                )
                .field("master", &target.master)
                .field("db", &target.db)
                .field("password", &target.password.as_ref().map(|_| "***"))
                .finish(),
            Target::Cluster(urls) => f
                .debug_tuple("Cluster")
                .field(&urls.iter().map(|url| redact(url)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// `url` with the user and password between `://` and `@` replaced by `***`, and a
/// `password=` or `sentinel_password=` query value by `***`, for messages and logs: a
/// `--backend` value may carry the Redis password.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let mut shown = match rest.rsplit_once('@') {
        Some((_, hosts)) => format!("{scheme}://***@{hosts}"),
        None => format!("{scheme}://{rest}"),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.ends_with("password") => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();
        shown = format!("{shown}?{}", pairs.join("&"));
    }
    shown
}

const SENTINEL_QUERY: &str = "db, username, password, sentinel_username, sentinel_password";

impl Target {
    /// Parses a `--backend` value other than `embedded`. Errors name the value with its
    /// password hidden.
    pub fn parse(text: &str) -> Result<Target, String> {
        let bad = |why: String| format!("--backend {:?}: {why}", redact(text));
        if text.starts_with("redis://") {
            redis::Client::open(text).map_err(|e| bad(e.to_string()))?;
            return Ok(Target::Single(text.to_string()));
        }
        if let Some(rest) = text.strip_prefix("redis+sentinel://") {
            return parse_sentinel(rest).map(Target::Sentinel).map_err(bad);
        }
        if let Some(rest) = text.strip_prefix("redis+cluster://") {
            let (auth, nodes) = match rest.rsplit_once('@') {
                Some((auth, nodes)) => (format!("{auth}@"), nodes),
                None => (String::new(), rest),
            };
            let urls: Vec<String> = nodes
                .split(',')
                .filter(|node| !node.is_empty())
                .map(|node| format!("redis://{auth}{node}"))
                .collect();
            if urls.is_empty() {
                return Err(bad("name at least one HOST:PORT".into()));
            }
            for url in &urls {
                redis::Client::open(url.as_str()).map_err(|e| bad(e.to_string()))?;
            }
            return Ok(Target::Cluster(urls));
        }
        Err(bad(
            "expected embedded, redis://[:PASSWORD@]HOST:PORT[/DB], \
             redis+sentinel://HOST:PORT,HOST:PORT,.../MASTER_NAME[?db=N&password=...] or \
             redis+cluster://[:PASSWORD@]HOST:PORT,HOST:PORT,..."
                .into(),
        ))
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }
}

/// `HOST:PORT,HOST:PORT/MASTER_NAME[?QUERY]`, after `redis+sentinel://`.
fn parse_sentinel(rest: &str) -> Result<SentinelTarget, String> {
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let Some((hosts, master)) = rest.split_once('/') else {
        return Err("name the primary after the Sentinels: HOST:PORT,.../MASTER_NAME".into());
    };
    if master.is_empty() || master.contains('/') {
        return Err(format!(
            "the primary's name must follow the Sentinels' HOST:PORT list, one path segment, \
             got {master:?}"
        ));
    }
    let mut target = SentinelTarget {
        sentinels: Vec::new(),
        master: master.to_string(),
        db: 0,
        username: None,
        password: None,
        sentinel_username: None,
        sentinel_password: None,
    };
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let value = value.into_owned();
        match name.as_ref() {
            "db" => {
                target.db = value
                    .parse()
                    .ok()
                    .filter(|db| *db >= 0)
                    .ok_or_else(|| format!("db must be a database number, got {value:?}"))?;
            }
            "username" => target.username = Some(value),
            "password" => target.password = Some(value),
            "sentinel_username" => target.sentinel_username = Some(value),
            "sentinel_password" => target.sentinel_password = Some(value),
            other => {
                return Err(format!(
                    "unknown setting {other:?} in the query; allowed: {SENTINEL_QUERY}"
                ))
            }
        }
    }
    for host in hosts.split(',').filter(|host| !host.is_empty()) {
        if host.contains('@') {
            return Err(
                "credentials go in the query (sentinel_password=..., password=...), not \
                 before the hosts"
                    .into(),
            );
        }
        redis::Client::open(format!("redis://{host}").as_str())
            .map_err(|e| format!("Sentinel {host:?}: {e}"))?;
        target.sentinels.push(host.to_string());
    }
    if target.sentinels.is_empty() {
        return Err("name at least one Sentinel HOST:PORT".into());
    }
    Ok(target)
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Sentinel(Arc<Follower>),
    Cluster(ClusterConnection),
}

/// The primary a Sentinel names, and the connection to it. A connection that broke, or whose
/// node answered that it is no longer a primary, is dropped; the next command asks the
/// Sentinels again, so a failover is followed by the first command after it.
struct Follower {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    /// The connection in use, its primary's address, and a number that changes with each
    /// connection (so that a failure drops only the connection it happened on).
    current: Mutex<Option<(u64, String, MultiplexedConnection)>>,
    connections: AtomicU64,
}

impl Follower {
    async fn connection(&self) -> RedisResult<(u64, String, MultiplexedConnection)> {
        if let Some(current) = self.current.lock().expect("follower lock").clone() {
            return Ok(current);
        }
        // One lookup at a time: the others wait for it and take its connection.
        let mut sentinel = self.sentinel.lock().await;
        if let Some(current) = self.current.lock().expect("follower lock").clone() {
            return Ok(current);
        }
        let client = sentinel.async_get_client().await?;
        let address = client.get_connection_info().addr().to_string();
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT));
        let connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let number = self.connections.fetch_add(1, Ordering::Relaxed);
        tracing::info!(primary = %address, "redis: connected to the primary the Sentinels name");
        let current = (number, address, connection);
        *self.current.lock().expect("follower lock") = Some(current.clone());
        Ok(current)
    }

    /// After `error` on connection `number`: drops it when the error says the node is gone or
    /// no longer the primary.
    fn failed(&self, number: u64, error: &RedisError) {
        use redis::ServerErrorKind;
        let lost = !answered(error)
            || matches!(
                error.kind(),
                ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
            );
        let mut current = self.current.lock().expect("follower lock");
        if lost && matches!(&*current, Some((n, _, _)) if *n == number) {
            tracing::warn!(%error, "redis: the primary is lost; asking the Sentinels again");
            *current = None;
        }
    }
}

/// Replicas a change must reach before it is answered (`--redis-replicas`), and how long a call
/// waits for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    pub count: u32,
    pub timeout_ms: u64,
}

#[derive(Clone)]
pub struct Link {
    connection: Connection,
    target: Target,
    replicas: Option<Replicas>,
    /// Calls whose replicas did not acknowledge them in time (a metric).
    replica_timeouts: Arc<AtomicU64>,
}

/// Times the Cluster client sends a call again after MOVED, ASK or a broken connection. A call
/// sent twice is answered once: each call carries an id the library remembers (main.lua).
const CLUSTER_RETRIES: u32 = 3;

/// How long one Redis call may take before its answer counts as lost.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl Link {
    /// Connects to `target`; function calls are answered once `replicas` (if any) have them.
    pub async fn connect(target: &Target, replicas: Option<Replicas>) -> RedisResult<Link> {
        let connection = match target {
            Target::Single(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(500));
                Connection::Single(client.get_connection_manager_with_config(config).await?)
            }
            Target::Sentinel(sentinel) => {
                let client = SentinelClient::build(
                    sentinel.sentinel_infos()?,
                    sentinel.master.clone(),
                    Some(
                        SentinelNodeConnectionInfo::default()
                            .set_redis_connection_info(sentinel.node_info()),
                    ),
                    SentinelServerType::Master,
                )?;
                let follower = Arc::new(Follower {
                    sentinel: tokio::sync::Mutex::new(client),
                    current: Mutex::new(None),
                    connections: AtomicU64::new(0),
                });
                follower.connection().await?;
                Connection::Sentinel(follower)
            }
            Target::Cluster(urls) => {
                let client = ClusterClient::builder(urls.clone())
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(50)
                    .max_retry_wait(500)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .build()?;
                Connection::Cluster(client.get_async_connection().await?)
            }
        };
        Ok(Link {
            connection,
            target: target.clone(),
            replicas: replicas.filter(|replicas| replicas.count > 0),
            replica_timeouts: Arc::default(),
        })
    }

    /// Calls so far whose replicas did not acknowledge them within the timeout.
    pub fn replica_timeouts(&self) -> u64 {
        self.replica_timeouts.load(Ordering::Relaxed)
    }

    /// A client for a dedicated pub/sub connection: the single Redis, the primary the
    /// Sentinels name now, or the `attempt`-th seed node of a Cluster (any node hears every
    /// PUBLISH).
    pub async fn pubsub_client(&self, attempt: usize) -> RedisResult<redis::Client> {
        match &self.target {
            Target::Single(url) => redis::Client::open(url.as_str()),
            Target::Cluster(urls) => redis::Client::open(urls[attempt % urls.len()].as_str()),
            Target::Sentinel(target) => {
                let Connection::Sentinel(follower) = &self.connection else {
                    return Err(RedisError::from((
                        ErrorKind::Client,
                        "a Sentinel target without its Sentinel connection",
                    )));
                };
                let (_, address, _) = follower.connection().await?;
                let info = redis::IntoConnectionInfo::into_connection_info(
                    format!("redis://{address}").as_str(),
                )?;
                redis::Client::open(info.set_redis_settings(target.node_info()))
            }
        }
    }

    pub async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        match &self.connection {
            Connection::Single(connection) => cmd.query_async(&mut connection.clone()).await,
            Connection::Sentinel(follower) => {
                let (number, _, mut connection) = follower.connection().await?;
                let answer = cmd.query_async(&mut connection).await;
                if let Err(error) = &answer {
                    follower.failed(number, error);
                }
                answer
            }
            Connection::Cluster(connection) => cmd.query_async(&mut connection.clone()).await,
        }
    }

    /// Sends `pipe` in one round trip on one connection (a Cluster's: the node of its first
    /// keyed command); each command's answer, errors as `Value::ServerError`. A command that
    /// found the Sentinels' primary no longer one (`READONLY`) drops the connection, as a failed
    /// round trip does.
    async fn query_pipe(&self, pipe: &redis::Pipeline) -> RedisResult<Vec<Value>> {
        match &self.connection {
            Connection::Single(connection) => pipe.query_async(&mut connection.clone()).await,
            Connection::Sentinel(follower) => {
                let (number, _, mut connection) = follower.connection().await?;
                let answer = pipe.query_async::<Vec<Value>>(&mut connection).await;
                match &answer {
                    Err(error) => follower.failed(number, error),
                    Ok(values) => {
                        for value in values {
                            if let Value::ServerError(error) = value {
                                follower.failed(number, &RedisError::from(error.clone()));
                            }
                        }
                    }
                }
                answer
            }
            Connection::Cluster(connection) => pipe.query_async(&mut connection.clone()).await,
        }
    }

    /// Runs `cmd` on every primary (the one, or each of a Cluster's): each node's address with
    /// what it answered, an error it answered included. Not reaching a node is an error.
    pub async fn on_every_primary(
        &self,
        cmd: Cmd,
    ) -> RedisResult<Vec<(String, RedisResult<Value>)>> {
        match &self.connection {
            Connection::Single(_) | Connection::Sentinel(_) => {
                let node = match (&self.target, &self.connection) {
                    (_, Connection::Sentinel(follower)) => follower.connection().await?.1,
                    (Target::Single(url), _) => redact(url),
                    _ => String::new(),
                };
                match self.query(&cmd).await {
                    Err(error) if !answered(&error) => Err(error),
                    answer => Ok(vec![(node, answer)]),
                }
            }
            Connection::Cluster(connection) => {
                let every_primary =
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let Value::Map(answers) =
                    connection.clone().route_command(cmd, every_primary).await?
                else {
                    return Err(RedisError::from((
                        redis::ErrorKind::UnexpectedReturnType,
                        "expected an answer per primary",
                    )));
                };
                Ok(answers
                    .into_iter()
                    .map(|(node, answer)| {
                        let node = match node {
                            Value::BulkString(bytes) => {
                                String::from_utf8_lossy(&bytes).into_owned()
                            }
                            other => format!("{other:?}"),
                        };
                        let answer = match answer {
                            Value::ServerError(error) => Err(RedisError::from(error)),
                            value => Ok(value),
                        };
                        (node, answer)
                    })
                    .collect())
            }
        }
    }

    /// Who serves each slot range of a Cluster, as `(first slot, last slot, primary's
    /// HOST:PORT)` from `CLUSTER SLOTS`; `None` for a single Redis.
    pub async fn slot_owners(&self) -> RedisResult<Option<Vec<(u16, u16, String)>>> {
        if !matches!(self.connection, Connection::Cluster(_)) {
            return Ok(None);
        }
        let Value::Array(ranges) = self
            .query(&redis::cmd("CLUSTER").arg("SLOTS").clone())
            .await?
        else {
            return Err(unexpected_slots());
        };
        let slot = |value: Option<&Value>| match value {
            Some(Value::Int(n)) => u16::try_from(*n).ok(),
            _ => None,
        };
        let word = |value: Option<&Value>| match value {
            Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Some(Value::SimpleString(text)) => Some(text.clone()),
            Some(Value::Int(n)) => Some(n.to_string()),
            _ => None,
        };
        let mut owners = Vec::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err(unexpected_slots());
            };
            let Some(Value::Array(primary)) = fields.get(2) else {
                return Err(unexpected_slots());
            };
            let (Some(first), Some(last), Some(host), Some(port)) = (
                slot(fields.first()),
                slot(fields.get(1)),
                word(primary.first()),
                word(primary.get(1)),
            ) else {
                return Err(unexpected_slots());
            };
            owners.push((first, last, format!("{host}:{port}")));
        }
        Ok(Some(owners))
    }

    /// Runs a function call, loading the library first if Redis does not have it (a new server,
    /// `FUNCTION FLUSH`, a restart without persistence).
    ///
    /// With `--redis-replicas N`, the call is followed, in the same round trip and on the same
    /// connection, by `WAIT N TIMEOUT`, and it is answered only when N replicas have everything
    /// this connection wrote up to it; else it is an error (its outcome unknown, as a lost
    /// answer). Since Redis 7.2, `WAIT` waits for the primary's offset after the connection's
    /// last command that wrote (7.0 moved it after every command, reads included), so `touch`
    /// (a key of the call's partition) is written between the two for a call that may read
    /// without writing: what the call read, maybe another server's unacknowledged change, is
    /// then covered too, whatever the version.
    pub async fn fcall(&self, cmd: &Cmd, touch: Option<&str>) -> RedisResult<Value> {
        match self.fcall_once(cmd, touch).await {
            Err(error) if is_missing_library(&error) => {
                self.load_library().await?;
                self.fcall_once(cmd, touch).await
            }
            other => other,
        }
    }

    async fn fcall_once(&self, cmd: &Cmd, touch: Option<&str>) -> RedisResult<Value> {
        let Some(replicas) = self.replicas else {
            return self.query(cmd).await;
        };
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone());
        if let Some(key) = touch {
            pipe.cmd("INCR").arg(key);
        }
        pipe.cmd("WAIT")
            .arg(replicas.count)
            .arg(replicas.timeout_ms);
        let answers = self.query_pipe(pipe.ignore_errors()).await?;
        let unexpected = || {
            RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "a call and its WAIT answered in an unexpected shape",
            ))
        };
        let mut answers = answers.into_iter().map(|value| match value {
            Value::ServerError(error) => Err(RedisError::from(error)),
            value => Ok(value),
        });
        let answer = answers.next().ok_or_else(unexpected)??;
        if touch.is_some() {
            answers.next().ok_or_else(unexpected)??;
        }
        match answers.next().ok_or_else(unexpected)?? {
            Value::Int(acked) if acked >= i64::from(replicas.count) => Ok(answer),
            Value::Int(acked) => {
                self.replica_timeouts.fetch_add(1, Ordering::Relaxed);
                Err(not_replicated(acked, replicas))
            }
            _ => Err(unexpected()),
        }
    }

    pub async fn load_library(&self) -> RedisResult<()> {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(library::source());
        self.query(&load).await.map(|_| ())
    }
}

/// A change answered by the primary that `replicas.count` replicas did not all acknowledge in
/// time: it may be lost in a failover, so it is not acknowledged to the client (503, outcome
/// unknown), and it counts as not reaching Redis (a start retries).
fn not_replicated(acked: i64, replicas: Replicas) -> RedisError {
    RedisError::from((
        ErrorKind::Io,
        "a change did not reach its replicas in time",
        format!(
            "{acked} of the {} replicas --redis-replicas asks for acknowledged it within \
             --redis-replica-timeout-ms {} ms; its outcome is unknown: retry it with the same id",
            replicas.count, replicas.timeout_ms
        ),
    ))
}

fn unexpected_slots() -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "CLUSTER SLOTS answered in an unexpected shape",
    ))
}

/// Whether `error` is Redis's own answer (it was reached), not a failure to reach it.
fn answered(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

/// Whether `error` says Redis cannot serve yet (not reached, still loading its data, a Cluster
/// not yet whole, a replica not yet promoted, Sentinels that name no primary yet, a change
/// its replicas did not acknowledge in time) rather than that something is wrong with this
/// server's settings or rights: a start that failed so is retried.
pub(crate) fn is_unreachable(error: &RedisError) -> bool {
    use redis::ServerErrorKind;
    matches!(
        error.kind(),
        redis::ErrorKind::Io
            | redis::ErrorKind::ClusterConnectionNotFound
            | redis::ErrorKind::MasterNameNotFoundBySentinel
            | redis::ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
    )
}

fn is_missing_library(error: &RedisError) -> bool {
    error.to_string().contains("Function not found")
}
