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
use redis::{Cmd, RedisError, RedisResult, Value};

use crate::library;

/// Where the data lives, as given by `--backend`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://[:PASSWORD@]HOST:PORT[/DB]`: one primary.
    Single(String),
}

impl Target {
    /// Parses a `--backend` value other than `embedded`.
    pub fn parse(text: &str) -> Result<Target, String> {
        if text.starts_with("redis://") {
            redis::Client::open(text).map_err(|e| format!("--backend {text:?}: {e}"))?;
            return Ok(Target::Single(text.to_string()));
        }
        Err(format!(
            "--backend {text:?}: expected embedded or redis://[:PASSWORD@]HOST:PORT[/DB]"
        ))
    }
}

#[derive(Clone)]
pub struct Link {
    connection: ConnectionManager,
    client: redis::Client,
}

/// How long one Redis call may take before its answer counts as lost.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl Link {
    pub async fn connect(target: &Target) -> RedisResult<Link> {
        let Target::Single(url) = target;
        let client = redis::Client::open(url.as_str())?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connection = client.get_connection_manager_with_config(config).await?;
        Ok(Link { connection, client })
    }

    /// A client for a second, dedicated connection (pub/sub).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    pub async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut connection = self.connection.clone();
        cmd.query_async(&mut connection).await
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

fn is_missing_library(error: &RedisError) -> bool {
    error.to_string().contains("Function not found")
}
