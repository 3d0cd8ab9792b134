//! The connection to Redis: one multiplexed connection to a single primary (reconnected by
//! redis-rs's `ConnectionManager`), or a Redis Cluster connection (redis-rs follows MOVED and
//! ASK and keeps the slot map). Also loads the function library where it is missing.
//!
//! A command whose answer is lost (a timeout or a dropped connection after it was sent) is an
//! error here, never retried: the caller answers 503 and the client's retry, keyed by its
//! hold_id, finds out what happened. Only "the library is not there" is retried, once, after
//! loading it: that answer means nothing ran.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, RedisError, RedisResult, Value};

use crate::library;

/// Where the data lives, as given by `--backend`. Its `Debug` hides passwords.
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://[:PASSWORD@]HOST:PORT[/DB]`: one primary.
    Single(String),
    /// `redis+cluster://[:PASSWORD@]HOST:PORT,HOST:PORT,...`: a Redis Cluster, as `redis://` URLs
    /// of its seed nodes.
    Cluster(Vec<String>),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Single(url) => f.debug_tuple("Single").field(&redact(url)).finish(),
            Target::Cluster(urls) => f
                .debug_tuple("Cluster")
                .field(&urls.iter().map(|url| redact(url)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// `url` with the user and password between `://` and `@` replaced by `***`, for messages and
/// logs: a `--backend` value may carry the Redis password.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((_, hosts)) => format!("{scheme}://***@{hosts}"),
        None => url.to_string(),
    }
}

impl Target {
    /// Parses a `--backend` value other than `embedded`. Errors name the value with its
    /// password hidden.
    pub fn parse(text: &str) -> Result<Target, String> {
        let bad = |why: String| format!("--backend {:?}: {why}", redact(text));
        if text.starts_with("redis://") {
            redis::Client::open(text).map_err(|e| bad(e.to_string()))?;
            return Ok(Target::Single(text.to_string()));
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
            "expected embedded, redis://[:PASSWORD@]HOST:PORT[/DB] or \
             redis+cluster://[:PASSWORD@]HOST:PORT,HOST:PORT,..."
                .into(),
        ))
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// The URLs a pub/sub subscriber may connect to (any node of a Cluster hears every
    /// PUBLISH).
    fn node_urls(&self) -> Vec<String> {
        match self {
            Target::Single(url) => vec![url.clone()],
            Target::Cluster(urls) => urls.clone(),
        }
    }
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

#[derive(Clone)]
pub struct Link {
    connection: Connection,
    node_urls: Vec<String>,
}

/// Times the Cluster client sends a call again after MOVED, ASK or a broken connection. A call
/// sent twice is answered once: each call carries an id the library remembers (main.lua).
const CLUSTER_RETRIES: u32 = 3;

/// How long one Redis call may take before its answer counts as lost.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl Link {
    pub async fn connect(target: &Target) -> RedisResult<Link> {
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
            node_urls: target.node_urls(),
        })
    }

    /// The node URLs a dedicated pub/sub connection may use, in order of preference.
    pub fn node_urls(&self) -> &[String] {
        &self.node_urls
    }

    pub async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        match &self.connection {
            Connection::Single(connection) => cmd.query_async(&mut connection.clone()).await,
            Connection::Cluster(connection) => cmd.query_async(&mut connection.clone()).await,
        }
    }

    /// Runs `cmd` on every primary (the one, or each of a Cluster's): each node's address with
    /// what it answered, an error it answered included. Not reaching a node is an error.
    pub async fn on_every_primary(
        &self,
        cmd: Cmd,
    ) -> RedisResult<Vec<(String, RedisResult<Value>)>> {
        match &self.connection {
            Connection::Single(connection) => {
                let node = redact(&self.node_urls[0]);
                match cmd.query_async(&mut connection.clone()).await {
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
        if matches!(self.connection, Connection::Single(_)) {
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
    pub async fn fcall(&self, cmd: &Cmd) -> RedisResult<Value> {
        match self.query(cmd).await {
            Err(error) if is_missing_library(&error) => {
                self.load_library().await?;
                self.query(cmd).await
            }
            other => other,
        }
    }

    pub async fn load_library(&self) -> RedisResult<()> {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(library::source());
        self.query(&load).await.map(|_| ())
    }
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
/// not yet whole, a replica not yet promoted) rather than that something is wrong with this
/// server's settings or rights: a start that failed so is retried.
pub(crate) fn is_unreachable(error: &RedisError) -> bool {
    use redis::ServerErrorKind;
    matches!(
        error.kind(),
        redis::ErrorKind::Io
            | redis::ErrorKind::ClusterConnectionNotFound
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
