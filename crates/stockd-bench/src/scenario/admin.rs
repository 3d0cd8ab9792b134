//! Sequential requests for a run's set-up and read-back: calls of `stockd-client`, whose every
//! request is built from `stockd_api`'s operations, retried when a dropped connection or a 503
//! cut them short, since a verdict must not fail on one lost answer. (The load itself goes
//! through the bench's own connections, [`crate::http`], for speed.) This module never judges
//! an answer beyond reading it: the verdict does that.

use std::time::Duration;

use serde_json::Value;
use stockd_client::{Call, Client, ClientError, PoolSpecBody};

use crate::http::{Answer, Endpoint};

/// Sequential requests for set-up and read-back.
pub struct Admin {
    client: Client,
}

impl Admin {
    pub fn new(endpoint: &Endpoint) -> Result<Admin, String> {
        Ok(Admin {
            client: Client::new(&endpoint.base_url(), endpoint.token.clone()),
        })
    }

    /// Sends `call`; its answer, whatever its status, unless five tries in a row found no
    /// server or a 503.
    pub async fn send(&mut self, call: &Call) -> Result<Answer, String> {
        // Read-back must not fail on one dropped connection: retry reads and idempotent writes.
        let mut last = String::new();
        for _ in 0..5 {
            match self.client.call(call).await {
                Ok(answer) => {
                    return Ok(Answer {
                        status: answer.status,
                        body: answer.body.into(),
                    })
                }
                Err(ClientError::Api {
                    status: 503,
                    raw_body,
                    ..
                }) => last = format!("503: {}", String::from_utf8_lossy(&raw_body)),
                Err(ClientError::Api {
                    status, raw_body, ..
                }) => {
                    return Ok(Answer {
                        status,
                        body: raw_body.into(),
                    })
                }
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(last)
    }

    /// Creates or replaces `pool`; returns the pool view the server answered with.
    pub async fn put_pool(
        &mut self,
        pool: &str,
        spec: &PoolSpecBody,
        if_absent: bool,
    ) -> Result<Value, String> {
        let answer = self.send(&Call::put_pool(pool, spec, if_absent)).await?;
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
            // Said apart from other refusals: the run cannot go on with another pool's shape.
            409 if answer.error_code().as_deref() == Some("segments_fixed") => {
                let body = answer.json().unwrap_or_default();
                Err(format!(
                    "setting up pool {pool}: 409 segments_fixed: the pool exists with {} \
                     segment(s) and a pool's segments are fixed when it is created, but the run \
                     asked for {} (--segments)",
                    body["segments"], body["requested"]
                ))
            }
            status => Err(format!(
                "setting up pool {pool}: {status} {}",
                String::from_utf8_lossy(&answer.body)
            )),
        }
    }

    /// Deletes `pool` (one the run created and does not use).
    pub async fn delete_pool(&mut self, pool: &str) -> Result<(), String> {
        let answer = self.send(&Call::delete_pool(pool)).await?;
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
        let answer = self.send(&Call::partitions()).await?;
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
        let answer = self.send(&Call::get_pool(pool)).await?;
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
        let answer = self.send(&Call::get_hold(hold_id)).await?;
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
