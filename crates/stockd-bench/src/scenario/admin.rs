//! Sequential requests for a run's set-up and read-back, on a connection of their own: they
//! retry what a dropped connection or a 503 cut short, since a verdict must not fail on one
//! lost answer. Every path comes from `stockd_api`'s operations. This module never judges an
//! answer beyond reading it: the verdict does that.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use stockd_api as api;

use crate::http::{Answer, Connection, Endpoint, Request};
use crate::paths;

/// Sequential requests for set-up and read-back.
pub struct Admin {
    connection: Connection,
}

impl Admin {
    pub fn new(endpoint: &Endpoint) -> Result<Admin, String> {
        Ok(Admin {
            connection: Connection::new(endpoint)?,
        })
    }

    pub async fn send(&mut self, request: &Request) -> Result<Answer, String> {
        // Read-back must not fail on one dropped connection: retry reads and idempotent writes.
        let mut last = String::new();
        for _ in 0..5 {
            match self.connection.send(request).await {
                Ok(answer) if answer.status == 503 => {
                    last = format!("503: {}", String::from_utf8_lossy(&answer.body));
                }
                Ok(answer) => return Ok(answer),
                Err(error) => last = error,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(last)
    }

    /// [`Admin::send`] of `operation`, a `GET`, on the path its `values` make.
    pub async fn get(
        &mut self,
        operation: api::Operation,
        values: &[&str],
    ) -> Result<Answer, String> {
        debug_assert_eq!(operation.method, "GET");
        self.send(&paths::request(operation, values, Bytes::new()))
            .await
    }

    /// Creates or replaces `pool`; returns the pool view the server answered with.
    pub async fn put_pool(
        &mut self,
        pool: &str,
        body: Value,
        if_absent: bool,
    ) -> Result<Value, String> {
        let mut request = paths::request(api::PUT_POOL, &[pool], Bytes::from(body.to_string()));
        if if_absent {
            request.path.push_str("?if_absent=true");
        }
        let answer = self.send(&request).await?;
        match answer.status {
            200 | 201 => answer.json().ok_or_else(|| {
                format!(
                    "setting up pool {pool}: {} with a body that is not JSON: {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                )
            }),
            401 | 403 => Err(format!(
                "setting up pool {pool}: {} (the bench needs an admin token to create its pools: --token)",
                answer.status
            )),
            status => Err(format!(
                "setting up pool {pool}: {status} {}",
                String::from_utf8_lossy(&answer.body)
            )),
        }
    }

    /// Deletes `pool` (one the run created and does not use).
    pub async fn delete_pool(&mut self, pool: &str) -> Result<(), String> {
        let request = paths::request(api::DELETE_POOL, &[pool], Bytes::new());
        let answer = self.send(&request).await?;
        match answer.status {
            // 404: a retried delete whose first answer was lost.
            204 | 404 => Ok(()),
            status => Err(format!(
                "deleting pool {pool}: {status} {}",
                String::from_utf8_lossy(&answer.body)
            )),
        }
    }

    /// How many partitions the server's backend has (`GET /v1/events/partitions`): 1 on the
    /// embedded engine and on one Redis, the configured count on a Redis Cluster.
    pub async fn partitions(&mut self) -> Result<u64, String> {
        let answer = self.get(api::EVENT_PARTITIONS, &[]).await?;
        answer
            .json()
            .filter(|_| answer.status == 200)
            .and_then(|body| body["partitions"].as_u64())
            .ok_or_else(|| {
                format!(
                    "reading the partition count: {} {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                )
            })
    }

    pub async fn pool(&mut self, pool: &str) -> Result<PoolState, String> {
        let answer = self.get(api::GET_POOL, &[pool]).await?;
        let body = answer
            .json()
            .filter(|_| answer.status == 200)
            .ok_or_else(|| {
                format!(
                    "reading pool {pool}: {} {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                )
            })?;
        let n = |field: &str| body[field].as_u64().unwrap_or(u64::MAX);
        Ok(PoolState {
            total: n("total"),
            available: n("available"),
            held: n("held"),
            sold: n("sold"),
        })
    }

    /// The hold's status and user, or `None` when the server has no such hold.
    pub async fn hold(
        &mut self,
        hold_id: &str,
    ) -> Result<Option<(String, Option<String>)>, String> {
        let answer = self.get(api::GET_HOLD, &[hold_id]).await?;
        match answer.status {
            200 => {
                let body = answer.json().unwrap_or_default();
                Ok(Some((
                    body["status"].as_str().unwrap_or("").to_string(),
                    body["user"].as_str().map(str::to_string),
                )))
            }
            404 => Ok(None),
            status => Err(format!(
                "reading hold {hold_id}: {status} {}",
                String::from_utf8_lossy(&answer.body)
            )),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct PoolState {
    pub total: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

impl PoolState {
    pub(super) fn adds_up(&self) -> bool {
        self.available
            .checked_add(self.held)
            .and_then(|n| n.checked_add(self.sold))
            == Some(self.total)
    }
}
