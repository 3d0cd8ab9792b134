//! The scenarios of `stockd bench run`: what they set up, what they send, and how their
//! verdict is read back from the server.
//!
//! Every scenario names its pools and holds after the run's id, so runs against one server never
//! mix. The verdict trusts nothing the load generator believes: it reads every pool back, and
//! every hold whose outcome is unknown, and checks the arithmetic against the answers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use http::Method;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::Rng;
use serde::Serialize;
use serde_json::{json, Value};

use crate::http::{Answer, Connection, Endpoint, Request};
use crate::load::{Timing, Workload};
use crate::race::{race_order, Entrant, RaceOrder};

/// Which scenario, with its knobs.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "scenario", rename_all = "snake_case")]
pub enum Scenario {
    /// One hot pool of `stock` units, `buyers` distinct users, each limited to `per_user_limit`.
    Flash {
        stock: u64,
        buyers: u64,
        per_user_limit: Option<u64>,
    },
    /// `teams` pools of `team_size` slots, set up with `?if_absent=true`; `buyers` users race
    /// for each team, each trying once.
    Team {
        teams: u64,
        team_size: u64,
        buyers: u64,
    },
    /// Holds of `items` units, each from a different one of `pools` pools. With
    /// `spread_partitions`, every pool lives in a partition of its own, so that a hold of `items`
    /// units spans `items` partitions (on a Redis Cluster: the cross-partition protocol).
    Cart {
        pools: u64,
        items: u64,
        stock: u64,
        spread_partitions: bool,
    },
    /// Reserve with a short `ttl_ms`, then confirm, release or let expire, in these shares.
    Lifecycle {
        confirm_share: f64,
        release_share: f64,
        ttl_ms: u64,
    },
    /// The batch endpoint: `ops` reserve-and-confirm ops per request, on one pool.
    Batch { ops: u64 },
}

impl Scenario {
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Flash { .. } => "flash",
            Scenario::Team { .. } => "team",
            Scenario::Cart { .. } => "cart",
            Scenario::Lifecycle { .. } => "lifecycle",
            Scenario::Batch { .. } => "batch",
        }
    }
}

/// One check of a verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// What the server says after the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verdict {
    pub ok: bool,
    pub checks: Vec<Check>,
    /// Units sold beyond what the pools had: 0 unless the server oversold.
    pub oversold_units: u64,
}

impl Verdict {
    fn check(&mut self, name: impl Into<String>, ok: bool, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.into(),
            ok,
            detail: detail.into(),
        });
    }

    fn finish(mut self) -> Verdict {
        self.ok = self.checks.iter().all(|check| check.ok);
        self
    }
}

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

    /// Creates or replaces `pool`; returns the pool view the server answered with.
    pub async fn put_pool(
        &mut self,
        pool: &str,
        body: Value,
        if_absent: bool,
    ) -> Result<Value, String> {
        let path = if if_absent {
            format!("/v1/pools/{pool}?if_absent=true")
        } else {
            format!("/v1/pools/{pool}")
        };
        let answer = self.send(&Request::json(Method::PUT, path, &body)).await?;
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
        let request = Request {
            method: Method::DELETE,
            path: format!("/v1/pools/{pool}"),
            body: Default::default(),
        };
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
        let answer = self.send(&Request::get("/v1/events/partitions")).await?;
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
        let answer = self
            .send(&Request::get(format!("/v1/pools/{pool}")))
            .await?;
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
        let answer = self
            .send(&Request::get(format!("/v1/holds/{hold_id}")))
            .await?;
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
    fn adds_up(&self) -> bool {
        self.available
            .checked_add(self.held)
            .and_then(|n| n.checked_add(self.sold))
            == Some(self.total)
    }
}

/// `POST /v1/holds`'s body, or a `reserve` op of `POST /v1/batch` (with `op`).
struct ReserveBody<'a> {
    op: bool,
    hold_id: &'a str,
    items: &'a [(usize, u64)],
    pools: &'a [String],
    user: Option<&'a str>,
    confirm: bool,
    ttl_ms: Option<u64>,
}

impl ReserveBody<'_> {
    /// Appends the body as JSON, written by hand: the load generator shares the machine with
    /// the server it measures, so every microsecond it spends per request is taken from the
    /// server, and serde's writer took about 2,000 instructions for these hundred bytes. The
    /// fields and their order are what `#[derive(Serialize)]` would write (a test compares).
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.op {
            b"{\"op\":\"reserve\",\"hold_id\":"
        } else {
            b"{\"hold_id\":"
        });
        json_str(out, self.hold_id);
        out.extend_from_slice(b",\"items\":[");
        for (n, &(pool, qty)) in self.items.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"pool\":");
            json_str(out, &self.pools[pool]);
            out.extend_from_slice(b",\"qty\":");
            out.extend_from_slice(itoa::Buffer::new().format(qty).as_bytes());
            out.push(b'}');
        }
        out.push(b']');
        if let Some(user) = self.user {
            out.extend_from_slice(b",\"user\":");
            json_str(out, user);
        }
        if self.confirm {
            out.extend_from_slice(b",\"confirm\":true");
        }
        if let Some(ttl_ms) = self.ttl_ms {
            out.extend_from_slice(b",\"ttl_ms\":");
            out.extend_from_slice(itoa::Buffer::new().format(ttl_ms).as_bytes());
        }
        out.push(b'}');
    }
}

/// Appends `text` as a JSON string. The bench's ids are made of characters JSON never escapes
/// and go in as they are; anything else goes through serde's escaping.
fn json_str(out: &mut Vec<u8>, text: &str) {
    let plain = text
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b':'));
    if plain {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(out, text).expect("writing to memory cannot fail");
    }
}

/// `{prefix}{n}`, as `format!` would make it at a fraction of its cost (ids are made for every
/// request).
fn numbered(prefix: &str, n: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    let mut id = String::with_capacity(prefix.len() + digits.len());
    id.push_str(prefix);
    id.push_str(digits);
    id
}

/// Of a batch's answer, only each op's status is read; the rest is skipped unparsed.
#[derive(serde::Deserialize)]
struct BatchAnswer {
    results: Vec<OpStatus>,
}

#[derive(serde::Deserialize)]
struct OpStatus {
    status: u16,
}

/// One hold the run sent: its id, its user and the units it asked of each pool.
#[derive(Clone, Debug)]
pub struct Sent {
    pub hold_id: String,
    pub user: Option<String>,
    pub units: Vec<(usize, u64)>,
}

/// A list that grows by chunks of fixed size: appending never moves what is already there. The
/// ledger of a run that creates millions of holds was a doubling vector, and the append that
/// doubled one of a million entries held the ledger's lock for a few hundred milliseconds,
/// which every worker then measured as the server's latency.
#[derive(Clone)]
struct Chunked<T> {
    chunks: Vec<Vec<T>>,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: Vec::new() }
    }
}

impl<T> Chunked<T> {
    const CHUNK: usize = 1 << 14;

    fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < Self::CHUNK => chunk.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(Self::CHUNK);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
    }

    fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

/// What came of the holds the run sent: created (201), refused, or unknown.
#[derive(Default)]
struct Ledger {
    created: Chunked<Sent>,
    unknown: Vec<Sent>,
    /// Per-op refusals and other answers, for the record.
    other: u64,
}

/// A running scenario: the workload the driver runs, and its verdict afterwards.
pub struct Run {
    scenario: Scenario,
    run_id: String,
    /// `{run_id}-`: what every numbered hold id of the run starts with.
    hold_prefix: String,
    pools: Vec<String>,
    /// Units each pool was set up with.
    stock: Vec<u64>,
    next_id: AtomicU64,
    ledger: Mutex<Ledger>,
    /// Lifecycle: per worker, the hold waiting for its confirm or release.
    pending: Vec<Mutex<Option<(String, Action)>>>,
    /// Lifecycle: confirms and releases the server accepted.
    confirmed: Mutex<Vec<Sent>>,
    released: AtomicU64,
    /// Team: tickets handed out (team, buyer).
    tickets: AtomicU64,
    /// Team: every buyer whose outcome is known, and when its request went.
    entrants: Mutex<Vec<Entrant>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Confirm,
    Release,
}

/// Tags: which hold a request was (or which holds, for a batch).
pub enum Tag {
    Hold(Sent),
    Holds(Vec<Sent>),
    Confirm(Sent),
    Release,
}

impl Run {
    /// Creates the scenario's pools on the server.
    pub async fn set_up(
        admin: &mut Admin,
        scenario: Scenario,
        run_id: &str,
        connections: usize,
    ) -> Result<Run, String> {
        let (pools, stock) = create_pools(admin, &scenario, run_id).await?;
        Ok(Run {
            scenario,
            run_id: run_id.to_string(),
            hold_prefix: format!("{run_id}-"),
            pools,
            stock,
            next_id: AtomicU64::new(0),
            ledger: Mutex::new(Ledger::default()),
            pending: (0..connections).map(|_| Mutex::new(None)).collect(),
            confirmed: Mutex::new(Vec::new()),
            released: AtomicU64::new(0),
            tickets: AtomicU64::new(0),
            entrants: Mutex::new(Vec::new()),
        })
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// The pools the scenario set up, by id.
    pub fn pools(&self) -> &[String] {
        &self.pools
    }

    fn hold_id(&self) -> String {
        numbered(
            &self.hold_prefix,
            self.next_id.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// A reserve's body (or a batch's reserve op), written straight from the hold's fields.
    fn reserve_body<'a>(
        &'a self,
        sent: &'a Sent,
        confirm: bool,
        ttl_ms: Option<u64>,
    ) -> ReserveBody<'a> {
        ReserveBody {
            op: false,
            hold_id: &sent.hold_id,
            items: &sent.units,
            pools: &self.pools,
            user: sent.user.as_deref(),
            confirm,
            ttl_ms,
        }
    }

    /// `POST /v1/holds` with `body`.
    fn reserve_request(body: &ReserveBody) -> Request {
        let mut json = Vec::with_capacity(128);
        body.write(&mut json);
        Request {
            method: Method::POST,
            path: "/v1/holds".to_string(),
            body: json.into(),
        }
    }

    /// Files the hold under created, unknown or refused; returns whether it was created.
    fn record_hold(&self, sent: Sent, answer: &Result<Answer, String>) -> bool {
        let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        match answer {
            Ok(answer) if answer.status == 201 => {
                ledger.created.push(sent);
                return true;
            }
            Ok(answer) if answer.status == 503 => ledger.unknown.push(sent),
            Ok(_) => ledger.other += 1,
            Err(_) => ledger.unknown.push(sent),
        }
        false
    }

    /// The team race's order (`None` for other scenarios), given the server's mean time per
    /// group commit during the load when it is known.
    pub fn race_order(&self, group_commit: Option<Duration>) -> Option<RaceOrder> {
        matches!(self.scenario, Scenario::Team { .. }).then(|| {
            race_order(
                &self.entrants.lock().unwrap_or_else(|e| e.into_inner()),
                group_commit,
            )
        })
    }
}

/// Creates the pools `scenario` runs on, named after the run; returns their names and the units
/// each was set up with.
async fn create_pools(
    admin: &mut Admin,
    scenario: &Scenario,
    run_id: &str,
) -> Result<(Vec<String>, Vec<u64>), String> {
    if let Scenario::Cart {
        pools,
        stock,
        spread_partitions: true,
        ..
    } = scenario
    {
        let names = pools_in_distinct_partitions(admin, run_id, *pools, *stock).await?;
        return Ok((names, vec![*stock; *pools as usize]));
    }
    let (pools, stock): (Vec<String>, Vec<u64>) = match scenario {
        Scenario::Flash { stock, .. } => (vec![format!("{run_id}-hot")], vec![*stock]),
        Scenario::Team {
            teams, team_size, ..
        } => (
            (0..*teams).map(|t| format!("{run_id}-team-{t}")).collect(),
            vec![*team_size; *teams as usize],
        ),
        Scenario::Cart { pools, stock, .. } => (
            (0..*pools).map(|p| format!("{run_id}-cart-{p}")).collect(),
            vec![*stock; *pools as usize],
        ),
        Scenario::Lifecycle { .. } => (vec![format!("{run_id}-life")], vec![BIG_STOCK]),
        Scenario::Batch { .. } => (vec![format!("{run_id}-batch")], vec![BIG_STOCK]),
    };
    for (pool, &units) in pools.iter().zip(&stock) {
        let mut body = json!({ "total": units });
        if let Scenario::Flash {
            per_user_limit: Some(limit),
            ..
        } = scenario
        {
            body["per_user_limit"] = json!(limit);
        }
        // Teams are set up as many services would: create if absent, never overwrite.
        let if_absent = matches!(scenario, Scenario::Team { .. });
        admin.put_pool(pool, body, if_absent).await?;
    }
    Ok((pools, stock))
}

/// Pools that must not run out during the run: big enough for any run on one machine.
const BIG_STOCK: u64 = 1_000_000_000_000;

/// Pools a spread cart may create per pool it keeps before it gives up: a pool's partition is a
/// hash of its name, so covering P of P partitions takes about P ln P tries (54 for 16), and this
/// many tries per pool fails only for a server whose partitions are not what it says.
const SPREAD_TRIES_PER_POOL: u64 = 64;

/// Creates pools `{run_id}-cart-N` until `count` of them sit in pairwise different partitions
/// (the pool view names its partition), deleting each one that lands in a partition already
/// covered. Errors before creating anything when the server has fewer than `count` partitions.
async fn pools_in_distinct_partitions(
    admin: &mut Admin,
    run_id: &str,
    count: u64,
    stock: u64,
) -> Result<Vec<String>, String> {
    let partitions = admin.partitions().await?;
    if partitions < count {
        return Err(format!(
            "--spread-partitions puts each of the --pools {count} pools in a partition of its \
             own, but the server has {partitions} partition(s): give at most --pools {partitions} \
             (a Redis Cluster backend has as many as its --redis-partitions)"
        ));
    }
    let mut covered = HashSet::new();
    let mut chosen = Vec::new();
    for candidate in 0..count.saturating_mul(SPREAD_TRIES_PER_POOL) {
        let pool = format!("{run_id}-cart-{candidate}");
        let view = admin
            .put_pool(&pool, json!({ "total": stock }), false)
            .await?;
        let partition = view["partition"].as_u64().ok_or_else(|| {
            format!("setting up pool {pool}: the pool view has no partition: {view}")
        })?;
        if covered.insert(partition) {
            chosen.push(pool);
            if chosen.len() as u64 == count {
                return Ok(chosen);
            }
        } else {
            admin.delete_pool(&pool).await?;
        }
    }
    Err(format!(
        "--spread-partitions: {} pools created cover only {} of the {count} partitions asked, \
         though the server says it has {partitions}",
        count.saturating_mul(SPREAD_TRIES_PER_POOL),
        chosen.len()
    ))
}

impl Workload for Run {
    type Tag = Tag;

    fn next(&self, worker: usize, rng: &mut StdRng) -> Option<(Request, Tag)> {
        match &self.scenario {
            Scenario::Flash { buyers, .. } => {
                let sent = Sent {
                    hold_id: self.hold_id(),
                    user: Some(numbered("u", rng.gen_range(0..(*buyers).max(1)))),
                    units: vec![(0, 1)],
                };
                let body = self.reserve_body(&sent, true, None);
                Some((Self::reserve_request(&body), Tag::Hold(sent)))
            }
            Scenario::Team { teams, buyers, .. } => {
                let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
                if ticket >= teams * buyers {
                    return None;
                }
                let (team, buyer) = (ticket % teams, ticket / teams);
                let sent = Sent {
                    hold_id: format!("{}-t{team}-b{buyer}", self.run_id),
                    user: Some(format!("b{buyer}")),
                    units: vec![(team as usize, 1)],
                };
                let body = self.reserve_body(&sent, true, None);
                Some((Self::reserve_request(&body), Tag::Hold(sent)))
            }
            Scenario::Cart { pools, items, .. } => {
                let picked = sample(rng, *pools as usize, (*items).min(*pools) as usize);
                let sent = Sent {
                    hold_id: self.hold_id(),
                    user: None,
                    units: picked.into_iter().map(|pool| (pool, 1)).collect(),
                };
                let body = self.reserve_body(&sent, true, None);
                Some((Self::reserve_request(&body), Tag::Hold(sent)))
            }
            Scenario::Lifecycle {
                confirm_share,
                release_share,
                ttl_ms,
            } => {
                let pending = self.pending[worker]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if let Some((hold_id, action)) = pending {
                    let (verb, tag) = match action {
                        Action::Confirm => (
                            "confirm",
                            Tag::Confirm(Sent {
                                hold_id: hold_id.clone(),
                                user: None,
                                units: vec![(0, 1)],
                            }),
                        ),
                        Action::Release => ("release", Tag::Release),
                    };
                    let path = format!("/v1/holds/{hold_id}/{verb}");
                    return Some((
                        Request {
                            method: Method::POST,
                            path,
                            body: Default::default(),
                        },
                        tag,
                    ));
                }
                let roll: f64 = rng.gen();
                let action = if roll < *confirm_share {
                    Some(Action::Confirm)
                } else if roll < confirm_share + release_share {
                    Some(Action::Release)
                } else {
                    None // left to expire
                };
                let sent = Sent {
                    hold_id: self.hold_id(),
                    user: None,
                    units: vec![(0, 1)],
                };
                if let Some(action) = action {
                    // Set before the answer; cleared by `answered` if the reserve fails.
                    *self.pending[worker]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some((sent.hold_id.clone(), action));
                }
                let body = self.reserve_body(&sent, false, Some(*ttl_ms));
                Some((Self::reserve_request(&body), Tag::Hold(sent)))
            }
            Scenario::Batch { ops } => {
                let sents: Vec<Sent> = (0..*ops)
                    .map(|_| Sent {
                        hold_id: self.hold_id(),
                        user: None,
                        units: vec![(0, 1)],
                    })
                    .collect();
                let mut json = Vec::with_capacity(sents.len() * 128 + 16);
                json.extend_from_slice(b"{\"ops\":[");
                for (n, sent) in sents.iter().enumerate() {
                    if n > 0 {
                        json.push(b',');
                    }
                    ReserveBody {
                        op: true,
                        ..self.reserve_body(sent, true, None)
                    }
                    .write(&mut json);
                }
                json.extend_from_slice(b"]}");
                let request = Request {
                    method: Method::POST,
                    path: "/v1/batch".to_string(),
                    body: json.into(),
                };
                Some((request, Tag::Holds(sents)))
            }
        }
    }

    fn answered(
        &self,
        worker: usize,
        tag: Tag,
        answer: &Result<Answer, String>,
        timing: Timing,
    ) -> u64 {
        match tag {
            Tag::Hold(sent) => {
                if let (Scenario::Team { .. }, Ok(answer), Some(written)) =
                    (&self.scenario, answer, timing.written)
                {
                    let won = answer.status == 201;
                    let lost = answer.status == 409
                        && answer.error_code().as_deref() == Some("insufficient_stock");
                    if won || lost {
                        self.entrants
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Entrant {
                                team: sent.units[0].0,
                                began: timing.began,
                                written,
                                won,
                            });
                    }
                }
                let created = matches!(answer, Ok(answer) if answer.status == 201);
                if !created && matches!(self.scenario, Scenario::Lifecycle { .. }) {
                    let mut pending = self.pending[worker]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    if pending.as_ref().is_some_and(|(id, _)| *id == sent.hold_id) {
                        *pending = None;
                    }
                }
                u64::from(self.record_hold(sent, answer))
            }
            Tag::Holds(sents) => {
                // A batch answers 200 with one result per op; anything else leaves them all
                // unknown (503, no answer) or refused (4xx: nothing was applied).
                let results = match answer {
                    Ok(answer) if answer.status == 200 => {
                        serde_json::from_slice::<BatchAnswer>(&answer.body).ok()
                    }
                    _ => None,
                };
                let mut created = 0;
                match results {
                    Some(BatchAnswer { results }) => {
                        for (sent, OpStatus { status }) in sents.into_iter().zip(results) {
                            let answer = Ok(Answer {
                                status,
                                body: Default::default(),
                            });
                            created += u64::from(self.record_hold(sent, &answer));
                        }
                    }
                    None => {
                        for sent in sents {
                            created += u64::from(self.record_hold(sent, answer));
                        }
                    }
                }
                created
            }
            Tag::Confirm(sent) => {
                if matches!(answer, Ok(answer) if answer.status == 200) {
                    self.confirmed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(sent);
                }
                0
            }
            Tag::Release => {
                if matches!(answer, Ok(answer) if answer.status == 200) {
                    self.released.fetch_add(1, Ordering::Relaxed);
                }
                0
            }
        }
    }
}

impl Run {
    /// Reads every pool back, and every hold whose outcome is unknown, and checks the run's
    /// answers against them.
    pub async fn verdict(&self, admin: &mut Admin) -> Result<Verdict, String> {
        let mut verdict = Verdict::default();
        if let Scenario::Lifecycle { ttl_ms, .. } = &self.scenario {
            // Holds left to expire: wait for the sweeper (the contract: within a second of the
            // deadline), then some slack.
            let deadline = tokio::time::Instant::now() + Duration::from_millis(ttl_ms + 5_000);
            loop {
                let pool = admin.pool(&self.pools[0]).await?;
                if pool.held == 0 || tokio::time::Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let (created, unknown) = {
            let ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
            (ledger.created.clone(), ledger.unknown.clone())
        };
        // Which unknown outcomes did happen: ask the server.
        let mut happened = Vec::new();
        for sent in &unknown {
            if let Some((status, user)) = admin.hold(&sent.hold_id).await? {
                happened.push((sent.clone(), status, user));
            }
        }
        let mut states = Vec::with_capacity(self.pools.len());
        for pool in &self.pools {
            states.push(admin.pool(pool).await?);
        }
        let mut broken = Vec::new();
        let mut oversold = 0u64;
        for ((pool, state), &stock) in self.pools.iter().zip(&states).zip(&self.stock) {
            if !state.adds_up() {
                broken.push(format!(
                    "{pool}: total {} != available {} + held {} + sold {}",
                    state.total, state.available, state.held, state.sold
                ));
            }
            let committed = state.held.saturating_add(state.sold);
            if committed > stock || state.total != stock {
                oversold += committed.saturating_sub(stock);
                broken.push(format!(
                    "{pool}: set up with {stock}, now total {} with held + sold = {committed}",
                    state.total
                ));
            }
        }
        verdict.oversold_units = oversold;
        verdict.check(
            "every pool adds up and none is oversold",
            broken.is_empty(),
            if broken.is_empty() {
                format!(
                    "{} pools: total = available + held + sold, held + sold <= the stock set up",
                    self.pools.len()
                )
            } else {
                broken.join("; ")
            },
        );
        // Units each pool must have committed: the created holds, plus the unknown ones the
        // server has, minus what was released or expired (lifecycle).
        let mut expected = vec![0u64; self.pools.len()];
        for sent in created
            .iter()
            .chain(happened.iter().map(|(sent, _, _)| sent))
        {
            for &(pool, qty) in &sent.units {
                expected[pool] += qty;
            }
        }
        match &self.scenario {
            Scenario::Lifecycle { .. } => {
                // Only confirmed holds stay committed; everything else was released or expired.
                let confirmed = self
                    .confirmed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .len() as u64;
                let confirmed_unknown = happened
                    .iter()
                    .filter(|(_, status, _)| status == "confirmed")
                    .count() as u64;
                let state = states[0];
                let low = confirmed;
                // A confirm whose answer was lost can still have been applied.
                let high = created.len() as u64 + happened.len() as u64;
                verdict.check(
                    "sold equals the confirms acknowledged",
                    state.sold >= low && state.sold <= high && state.held == 0,
                    format!(
                        "sold {} (confirms acknowledged {confirmed}, unknown that happened {confirmed_unknown}), held {} after expiry, released {}",
                        state.sold,
                        state.held,
                        self.released.load(Ordering::Relaxed)
                    ),
                );
            }
            _ => {
                let mut mismatched = Vec::new();
                for ((pool, state), want) in self.pools.iter().zip(&states).zip(&expected) {
                    let committed = state.held + state.sold;
                    if committed != *want {
                        mismatched.push(format!(
                            "{pool}: held + sold {committed}, holds created {want}"
                        ));
                    }
                }
                verdict.check(
                    "units committed equal the holds acknowledged",
                    mismatched.is_empty(),
                    if mismatched.is_empty() {
                        format!(
                            "{} holds acknowledged, {} unknown outcomes of which {} happened",
                            created.len(),
                            unknown.len(),
                            happened.len()
                        )
                    } else {
                        mismatched.join("; ")
                    },
                );
            }
        }
        if let Scenario::Flash {
            per_user_limit: Some(limit),
            ..
        } = &self.scenario
        {
            let mut per_user: HashMap<&str, u64> = HashMap::new();
            for sent in created
                .iter()
                .chain(happened.iter().map(|(sent, _, _)| sent))
            {
                if let Some(user) = &sent.user {
                    *per_user.entry(user).or_insert(0) += sent.units[0].1;
                }
            }
            let over: Vec<String> = per_user
                .iter()
                .filter(|(_, &units)| units > *limit)
                .map(|(user, units)| format!("{user}: {units}"))
                .collect();
            let most = per_user.values().copied().max().unwrap_or(0);
            verdict.check(
                "no user over the per-user limit",
                over.is_empty(),
                if over.is_empty() {
                    format!(
                        "{} users bought, at most {most} each (limit {limit})",
                        per_user.len()
                    )
                } else {
                    format!("over the limit of {limit}: {}", over.join(", "))
                },
            );
        }
        if let Scenario::Team {
            team_size, buyers, ..
        } = &self.scenario
        {
            let mut winners: BTreeMap<usize, u64> = BTreeMap::new();
            for sent in created
                .iter()
                .chain(happened.iter().map(|(sent, _, _)| sent))
            {
                *winners.entry(sent.units[0].0).or_insert(0) += 1;
            }
            let want = (*team_size).min(*buyers);
            let wrong: Vec<String> = (0..self.pools.len())
                .filter_map(|team| {
                    let got = winners.get(&team).copied().unwrap_or(0);
                    let sold = states[team].sold;
                    (got != want || sold != want)
                        .then(|| format!("{}: {got} winners, sold {sold}", self.pools[team]))
                })
                .collect();
            verdict.check(
                format!("exactly {want} winners per team"),
                wrong.is_empty(),
                if wrong.is_empty() {
                    format!("{} teams, {want} winners each", self.pools.len())
                } else {
                    wrong.join("; ")
                },
            );
        }
        Ok(verdict.finish())
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;

    /// What `ReserveBody::write` replaces: serde's writer of the same fields.
    #[derive(Serialize)]
    struct Derived<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        op: Option<&'static str>,
        hold_id: &'a str,
        items: Vec<DerivedItem<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        user: Option<&'a str>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        confirm: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
    }

    #[derive(Serialize)]
    struct DerivedItem<'a> {
        pool: &'a str,
        qty: u64,
    }

    #[test]
    fn reserve_bodies_are_written_as_serde_would() {
        let pools = vec![
            "bench-1f-hot".to_string(),
            "odd \"pool\"\\\n".to_string(),
            "caf\u{e9}".to_string(),
        ];
        let ids = ["bench-1f-0", "b:1.2_3", "q\"uote", ""];
        let item_sets: [&[(usize, u64)]; 3] = [&[(0, 1)], &[(0, 2), (1, 3), (2, u64::MAX)], &[]];
        for op in [false, true] {
            for hold_id in ids {
                for items in item_sets {
                    for user in [None, Some("u42"), Some("\u{1}ctl")] {
                        for confirm in [false, true] {
                            for ttl_ms in [None, Some(0), Some(90_000)] {
                                let body = ReserveBody {
                                    op,
                                    hold_id,
                                    items,
                                    pools: &pools,
                                    user,
                                    confirm,
                                    ttl_ms,
                                };
                                let mut written = Vec::new();
                                body.write(&mut written);
                                let derived = Derived {
                                    op: op.then_some("reserve"),
                                    hold_id,
                                    items: items
                                        .iter()
                                        .map(|&(pool, qty)| DerivedItem {
                                            pool: &pools[pool],
                                            qty,
                                        })
                                        .collect(),
                                    user,
                                    confirm,
                                    ttl_ms,
                                };
                                assert_eq!(
                                    String::from_utf8(written).unwrap(),
                                    serde_json::to_string(&derived).unwrap()
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn numbered_ids_are_their_prefix_and_number() {
        assert_eq!(numbered("bench-7-", 0), "bench-7-0");
        assert_eq!(numbered("u", u64::MAX), format!("u{}", u64::MAX));
        assert_eq!(numbered("", 120), "120");
    }
}
