//! A second decoder of stockd's HTTP requests, written from the contract
//! (the API contract, docs/api.md) and kept deliberately simple: it predicts, for one request, either
//! the refusal the edge must answer (and that the backend is not called), or exactly the call the
//! server must make to the backend. The `decode_request` target compares the prediction with what
//! the server really did.
//!
//! Where the contract leaves a detail open or the prediction would need the server's own code
//! (an `Authorization` header that is neither absent nor exactly one of the tokens, an empty path
//! segment), it says [`Expect::Unsure`] and only the general oracles apply. It must never call
//! the server's parsing code; it reads JSON through serde_json into its own tree that keeps
//! duplicate keys (so that `{"a":1,"a":2}` can be refused), and percent-decodes by hand.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use stockd_core::{
    Command, HoldId, HoldItem, HoldStatus, LockName, LockRequest, OwnerId, PoolId, PoolSpec,
    RequestId, ReserveRequest, UserId,
};

/// The bearer secrets the router of the target is configured with.
pub const ADMIN_TOKEN: &str = "fuzz-admin";
pub const CLIENT_TOKEN: &str = "fuzz-client";

/// Largest body the target's router accepts (413 above), small so that fuzz inputs reach it.
pub const BODY_LIMIT_BYTES: usize = 2_048;

/// What the server must do with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The prediction would need more than the contract says; only the general oracles apply.
    Unsure,
    /// Answered at the edge with this status; the backend is not called.
    Refused(u16),
    /// Answered without a backend command (probes, metrics, the OpenAPI document): this status.
    Served(u16),
    /// A web console file by name: 200 when it is one of the console's files, else 404
    /// `not_found` (which names exist is the server's business); the backend is not called.
    File,
    /// Exactly one backend `execute` with these commands (one for a single route, the ops that
    /// parse for a batch; a batch whose every op is refused makes no call, and answers 200).
    Execute { commands: Vec<Command>, batch: bool },
    /// Exactly one read of the event feed with these arguments.
    Events {
        after: u64,
        limit: usize,
        wait_ms: u64,
    },
}

/// The routes of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Healthz,
    Readyz,
    Metrics,
    OpenApi,
    Pools,
    Pool,
    PoolRestock,
    PoolSegments,
    Holds,
    Hold,
    HoldAction(HoldAction),
    Batch,
    Events,
    EventPartitions,
    Lock(LockAction),
    /// The web console (not API): `/ui` (a redirect), `/ui/`, `/ui/assets/{file}`.
    Console,
    ConsolePage,
    ConsoleAsset,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HoldAction {
    Confirm,
    Release,
    Extend,
    Refund,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockAction {
    Acquire,
    Renew,
    Release,
}

/// A path matched against the route table: the route and its raw (still percent-encoded) id.
fn route(path: &str) -> Result<Option<(Route, Option<&str>)>, ()> {
    if path == "/ui/" {
        return Ok(Some((Route::ConsolePage, None)));
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(());
    };
    let segments: Vec<&str> = rest.split('/').collect();
    if segments.iter().any(|segment| segment.is_empty()) {
        // How a router treats `//` or a trailing `/` is its business, not the contract's.
        return Err(());
    }
    Ok(match segments.as_slice() {
        ["healthz"] => Some((Route::Healthz, None)),
        ["readyz"] => Some((Route::Readyz, None)),
        ["metrics"] => Some((Route::Metrics, None)),
        ["openapi.json"] => Some((Route::OpenApi, None)),
        ["ui"] => Some((Route::Console, None)),
        // The file name is the server's to judge (undecoded): no id to decode here.
        ["ui", "assets", _] => Some((Route::ConsoleAsset, None)),
        ["v1", "pools"] => Some((Route::Pools, None)),
        ["v1", "pools", id] => Some((Route::Pool, Some(*id))),
        ["v1", "pools", id, "restock"] => Some((Route::PoolRestock, Some(*id))),
        ["v1", "pools", id, "segments"] => Some((Route::PoolSegments, Some(*id))),
        ["v1", "holds"] => Some((Route::Holds, None)),
        ["v1", "holds", id] => Some((Route::Hold, Some(*id))),
        ["v1", "holds", id, action] => {
            let action = match *action {
                "confirm" => HoldAction::Confirm,
                "release" => HoldAction::Release,
                "extend" => HoldAction::Extend,
                "refund" => HoldAction::Refund,
                _ => return Ok(None),
            };
            Some((Route::HoldAction(action), Some(*id)))
        }
        ["v1", "batch"] => Some((Route::Batch, None)),
        ["v1", "events"] => Some((Route::Events, None)),
        ["v1", "events", "partitions"] => Some((Route::EventPartitions, None)),
        ["v1", "locks", id, action] => {
            let action = match *action {
                "acquire" => LockAction::Acquire,
                "renew" => LockAction::Renew,
                "release" => LockAction::Release,
                _ => return Ok(None),
            };
            Some((Route::Lock(action), Some(*id)))
        }
        _ => None,
    })
}

/// The method a route takes (HEAD is served as GET).
fn method_of(route: Route, method: &str) -> bool {
    let method = if method == "HEAD" { "GET" } else { method };
    match route {
        Route::Healthz
        | Route::Readyz
        | Route::Metrics
        | Route::OpenApi
        | Route::Pools
        | Route::PoolSegments
        | Route::Hold
        | Route::Events
        | Route::EventPartitions
        | Route::Console
        | Route::ConsolePage
        | Route::ConsoleAsset => method == "GET",
        Route::Pool => matches!(method, "GET" | "PUT" | "DELETE"),
        Route::Holds => matches!(method, "GET" | "POST"),
        Route::PoolRestock | Route::HoldAction(_) | Route::Batch | Route::Lock(_) => {
            method == "POST"
        }
    }
}

fn is_open(route: Route) -> bool {
    matches!(
        route,
        Route::Healthz
            | Route::Readyz
            | Route::Metrics
            | Route::OpenApi
            | Route::Console
            | Route::ConsolePage
            | Route::ConsoleAsset
    )
}

fn admin_only(route: Route, method: &str) -> bool {
    match route {
        Route::Pool => matches!(method, "PUT" | "DELETE"),
        Route::PoolRestock => method == "POST",
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Admin,
    Client,
}

/// The role the `Authorization` headers give: `Ok(None)` for certainly none, `Err` when the
/// answer depends on how leniently the scheme and spaces are read.
fn role(authorization: &[&[u8]]) -> Result<Option<Role>, ()> {
    match authorization {
        [] => Ok(None),
        [value] => {
            let admin = format!("Bearer {ADMIN_TOKEN}");
            let client = format!("Bearer {CLIENT_TOKEN}");
            if *value == admin.as_bytes() {
                Ok(Some(Role::Admin))
            } else if *value == client.as_bytes() {
                Ok(Some(Role::Client))
            } else if contains(value, ADMIN_TOKEN.as_bytes())
                || contains(value, CLIENT_TOKEN.as_bytes())
            {
                Err(())
            } else {
                // A secret must equal the token: without it anywhere, no role.
                Ok(None)
            }
        }
        _ => Err(()),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// One request as the harness sends it.
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// Values of every `Authorization` header, in order.
    pub authorization: Vec<&'a [u8]>,
    /// Whether it carries `If-None-Match` (a console file may then answer 304).
    pub if_none_match: bool,
    pub body: &'a [u8],
}

/// What the server must do with `request`.
pub fn expect(request: &Request) -> Expect {
    if request.body.len() > BODY_LIMIT_BYTES {
        return Expect::Refused(413);
    }
    let (route, raw_id) = match route(request.path) {
        Err(()) => return Expect::Unsure,
        Ok(None) => return Expect::Refused(404),
        Ok(Some(found)) => found,
    };
    if !is_open(route) {
        let role = match role(&request.authorization) {
            Err(()) => return Expect::Unsure,
            Ok(role) => role,
        };
        match role {
            None => return Expect::Refused(401),
            Some(Role::Client) if admin_only(route, request.method) => return Expect::Refused(403),
            Some(_) => {}
        }
    }
    if !method_of(route, request.method) {
        return Expect::Refused(405);
    }
    match decode(route, request.method, raw_id, request.query, request.body) {
        // 304 when the tag is the file's: which tag that is is the server's business.
        Ok(_)
            if request.if_none_match
                && matches!(route, Route::ConsolePage | Route::ConsoleAsset) =>
        {
            Expect::Unsure
        }
        Ok(expect) => expect,
        Err(Refusal(status)) => Expect::Refused(status),
    }
}

/// A refusal by the request's decoding: 400 (not JSON) or 422 (wrong shape or value).
struct Refusal(u16);

const SHAPE: Refusal = Refusal(422);

fn decode(
    route: Route,
    method: &str,
    raw_id: Option<&str>,
    query: Option<&str>,
    body: &[u8],
) -> Result<Expect, Refusal> {
    // Extractors run in this order: the path id, the query, then the body.
    let id = raw_id.map(percent_decode).transpose()?;
    let id = id.as_deref().unwrap_or("");
    let method = if method == "HEAD" { "GET" } else { method };
    let command = match route {
        Route::Healthz | Route::Metrics | Route::OpenApi | Route::Readyz => {
            no_query(query)?;
            return Ok(Expect::Served(200));
        }
        Route::EventPartitions | Route::ConsolePage => {
            no_query(query)?;
            return Ok(Expect::Served(200));
        }
        Route::Console => {
            no_query(query)?;
            return Ok(Expect::Served(308));
        }
        Route::ConsoleAsset => {
            no_query(query)?;
            return Ok(Expect::File);
        }
        Route::Events => return events(query),
        Route::Pools => list_pools(query)?,
        Route::Pool => {
            let pool = parse_id(id, PoolId::parse)?;
            match method {
                "PUT" => {
                    let if_absent = put_query(query)?;
                    let (spec, segments) = pool_body(&object(body)?)?;
                    Command::PutPool {
                        pool,
                        spec,
                        segments,
                        if_absent,
                    }
                }
                "DELETE" => {
                    no_query(query)?;
                    Command::DeletePool { pool }
                }
                _ => {
                    no_query(query)?;
                    Command::GetPool { pool }
                }
            }
        }
        Route::PoolSegments => {
            let pool = parse_id(id, PoolId::parse)?;
            no_query(query)?;
            Command::GetSegments { pool }
        }
        Route::PoolRestock => {
            let pool = parse_id(id, PoolId::parse)?;
            no_query(query)?;
            let body = object(body)?;
            let fields = Fields::new(&body, &["delta", "request_id"])?;
            let delta = fields.required("delta", as_i64)?;
            let request_id = fields.optional("request_id", id_of(RequestId::parse))?;
            Command::Restock {
                pool,
                delta,
                request_id,
            }
        }
        Route::Holds if method == "GET" => list_holds(query)?,
        Route::Holds => {
            no_query(query)?;
            reserve(&object(body)?)?
        }
        Route::Hold => {
            let hold_id = parse_id(id, HoldId::parse)?;
            no_query(query)?;
            Command::GetHold { hold_id }
        }
        Route::HoldAction(action) => {
            let hold_id = parse_id(id, HoldId::parse)?;
            no_query(query)?;
            match action {
                HoldAction::Extend => {
                    let body = object(body)?;
                    let fields = Fields::new(&body, &["ttl_ms"])?;
                    let ttl_ms = fields.required("ttl_ms", as_u64)?;
                    Command::Extend { hold_id, ttl_ms }
                }
                HoldAction::Refund => {
                    // No body, `null`, or `{"restock"?: bool}` (default true).
                    let trimmed = body.trim_ascii();
                    let restock = if trimmed.is_empty() || trimmed == b"null" {
                        None
                    } else {
                        let body = object(body)?;
                        let fields = Fields::new(&body, &["restock"])?;
                        fields.optional("restock", as_bool)?
                    };
                    Command::Refund {
                        hold_id,
                        restock: restock.unwrap_or(true),
                    }
                }
                HoldAction::Confirm | HoldAction::Release => {
                    empty_body(body)?;
                    match action {
                        HoldAction::Confirm => Command::Confirm { hold_id },
                        _ => Command::Release { hold_id },
                    }
                }
            }
        }
        Route::Batch => {
            no_query(query)?;
            return batch(body);
        }
        Route::Lock(action) => {
            let name = parse_id(id, LockName::parse)?;
            no_query(query)?;
            let body = object(body)?;
            match action {
                LockAction::Acquire => {
                    let fields = Fields::new(&body, &["owner", "ttl_ms", "wait_ms"])?;
                    Command::LockAcquire(LockRequest {
                        name,
                        owner: fields.required("owner", id_of(OwnerId::parse))?,
                        ttl_ms: fields.required("ttl_ms", as_u64)?,
                        wait_ms: fields.optional("wait_ms", as_u64)?.unwrap_or(0),
                    })
                }
                LockAction::Renew => {
                    let fields = Fields::new(&body, &["owner", "token", "ttl_ms"])?;
                    Command::LockRenew {
                        name,
                        owner: fields.required("owner", id_of(OwnerId::parse))?,
                        token: fields.required("token", as_u64)?,
                        ttl_ms: fields.required("ttl_ms", as_u64)?,
                    }
                }
                LockAction::Release => {
                    let fields = Fields::new(&body, &["owner", "token"])?;
                    Command::LockRelease {
                        name,
                        owner: fields.required("owner", id_of(OwnerId::parse))?,
                        token: fields.required("token", as_u64)?,
                    }
                }
            }
        }
    };
    Ok(Expect::Execute {
        commands: vec![command],
        batch: false,
    })
}

// ------------------------------------------------------------------------------------ path, query

/// `%XX` becomes the byte; anything else stays as it is. Not UTF-8 afterwards: 422.
fn percent_decode(raw: &str) -> Result<String, Refusal> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[index] == b'%' && index + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[index + 1]), hex(bytes[index + 2])) {
                out.push((high * 16 + low) as u8);
                index += 3;
                continue;
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8(out).map_err(|_| SHAPE)
}

/// The contract's identifier: 1 to 128 bytes of `[A-Za-z0-9._:-]`, first byte alphanumeric.
fn valid_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    (1..=128).contains(&bytes.len())
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Builds the core's id type for an id the contract allows. The core's own check must agree.
fn parse_id<T, E: fmt::Debug>(text: &str, parse: fn(&str) -> Result<T, E>) -> Result<T, Refusal> {
    let parsed = parse(text);
    match (valid_id(text), parsed) {
        (true, Ok(id)) => Ok(id),
        (false, Err(_)) => Err(SHAPE),
        (true, Err(why)) => panic!("the core refuses the valid identifier {text:?}: {why:?}"),
        (false, Ok(_)) => panic!("the core accepts the invalid identifier {text:?}"),
    }
}

/// A route without query parameters: any non-empty `&`-separated piece is one (422).
fn no_query(query: Option<&str>) -> Result<(), Refusal> {
    match query {
        Some(query) if query.split('&').any(|piece| !piece.is_empty()) => Err(SHAPE),
        _ => Ok(()),
    }
}

/// The query's parameters, form-decoded; each name at most once, and only `known` ones.
fn query_params(query: Option<&str>, known: &[&str]) -> Result<Vec<(String, String)>, Refusal> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect();
    let mut seen = BTreeSet::new();
    for (name, _) in &pairs {
        if !known.contains(&name.as_str()) || !seen.insert(name.clone()) {
            return Err(SHAPE);
        }
    }
    Ok(pairs)
}

fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

fn parse_param<T: std::str::FromStr>(value: Option<&str>) -> Result<Option<T>, Refusal> {
    value
        .map(|text| text.parse::<T>().map_err(|_| SHAPE))
        .transpose()
}

fn put_query(query: Option<&str>) -> Result<bool, Refusal> {
    let pairs = query_params(query, &["if_absent"])?;
    Ok(parse_param::<bool>(param(&pairs, "if_absent"))?.unwrap_or(false))
}

fn list_pools(query: Option<&str>) -> Result<Command, Refusal> {
    let pairs = query_params(query, &["prefix", "after", "limit"])?;
    Ok(Command::ListPools {
        prefix: param(&pairs, "prefix").unwrap_or("").to_string(),
        after: param(&pairs, "after").map(str::to_string),
        limit: parse_param::<usize>(param(&pairs, "limit"))?.unwrap_or(100),
    })
}

fn list_holds(query: Option<&str>) -> Result<Command, Refusal> {
    let pairs = query_params(query, &["pool", "user", "status", "after", "limit"])?;
    let status = match param(&pairs, "status") {
        None => None,
        Some("held") => Some(HoldStatus::Held),
        Some("confirmed") => Some(HoldStatus::Confirmed),
        Some("released") => Some(HoldStatus::Released),
        Some("expired") => Some(HoldStatus::Expired),
        Some("refunded") => Some(HoldStatus::Refunded),
        Some(_) => return Err(SHAPE),
    };
    Ok(Command::ListHolds {
        pool: param(&pairs, "pool")
            .map(|pool| parse_id(pool, PoolId::parse))
            .transpose()?,
        user: param(&pairs, "user")
            .map(|user| parse_id(user, UserId::parse))
            .transpose()?,
        status,
        after: param(&pairs, "after").map(str::to_string),
        limit: parse_param::<usize>(param(&pairs, "limit"))?.unwrap_or(100),
    })
}

fn events(query: Option<&str>) -> Result<Expect, Refusal> {
    let pairs = query_params(query, &["partition", "after", "limit", "wait_ms"])?;
    let after = parse_param::<u64>(param(&pairs, "after"))?.unwrap_or(0);
    let limit = parse_param::<usize>(param(&pairs, "limit"))?.unwrap_or(100);
    let wait_ms = parse_param::<u64>(param(&pairs, "wait_ms"))?.unwrap_or(0);
    if !(1..=1_000).contains(&limit) || wait_ms > 30_000 {
        return Err(SHAPE);
    }
    // One partition: only partition 0 may be named.
    if let Some(partition) = param(&pairs, "partition") {
        if partition.parse::<u32>() != Ok(0) {
            return Err(SHAPE);
        }
    }
    Ok(Expect::Events {
        after,
        limit,
        wait_ms,
    })
}

// ------------------------------------------------------------------------------------ JSON

/// JSON as read, object entries in order with duplicates kept.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// A non-negative integer that fits u64.
    U64(u64),
    /// A negative integer that fits i64.
    I64(i64),
    /// Anything else serde_json reads as a number (fractions, exponents, huge integers).
    F64(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct JsonVisitor;

        impl<'de> Visitor<'de> for JsonVisitor {
            type Value = Json;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_none<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, value: bool) -> Result<Json, E> {
                Ok(Json::Bool(value))
            }
            fn visit_u64<E>(self, value: u64) -> Result<Json, E> {
                Ok(Json::U64(value))
            }
            fn visit_i64<E>(self, value: i64) -> Result<Json, E> {
                Ok(if value >= 0 {
                    Json::U64(value as u64)
                } else {
                    Json::I64(value)
                })
            }
            fn visit_f64<E>(self, value: f64) -> Result<Json, E> {
                Ok(Json::F64(value))
            }
            fn visit_str<E>(self, value: &str) -> Result<Json, E> {
                Ok(Json::Str(value.to_string()))
            }
            fn visit_string<E>(self, value: String) -> Result<Json, E> {
                Ok(Json::Str(value))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Json::Arr(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Json>()? {
                    entries.push(entry);
                }
                Ok(Json::Obj(entries))
            }
        }

        deserializer.deserialize_any(JsonVisitor)
    }
}

/// The body as JSON: not JSON at all is 400. A number too large for a 64-bit float is JSON
/// (RFC 8259 sets no bound), which serde_json cannot read: it is read as `1.5`, which no field
/// takes either, so the prediction is the 422 (or the op's refusal) the number itself gets.
fn json(body: &[u8]) -> Result<Json, Refusal> {
    serde_json::from_slice::<Json>(&tame_huge_numbers(body)).map_err(|_| Refusal(400))
}

/// `body` with every number token (outside strings) that serde_json finds out of range written
/// as `1.5`. A token is a maximal run of number characters; only one that is a well-formed JSON
/// number is replaced, by another well-formed number, so text that is not JSON stays not JSON.
fn tame_huge_numbers(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut at = 0;
    while at < body.len() {
        match body[at] {
            b'"' => {
                let start = at;
                at += 1;
                while at < body.len() && body[at] != b'"' {
                    at += if body[at] == b'\\' { 2 } else { 1 };
                }
                at = (at + 1).min(body.len());
                out.extend_from_slice(&body[start..at]);
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                while at < body.len()
                    && matches!(body[at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    at += 1;
                }
                let token = &body[start..at];
                // Skipping checks a number's form but not its size; reading it checks both.
                let huge = serde_json::from_slice::<serde::de::IgnoredAny>(token).is_ok()
                    && serde_json::from_slice::<f64>(token).is_err();
                out.extend_from_slice(if huge { b"1.5" } else { token });
            }
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
    out
}

/// The body as a JSON object (400 if not JSON, 422 if JSON but not an object).
fn object(body: &[u8]) -> Result<Json, Refusal> {
    match json(body)? {
        object @ Json::Obj(_) => Ok(object),
        _ => Err(SHAPE),
    }
}

/// Confirm and release: no body, `null`, or `{}`.
fn empty_body(body: &[u8]) -> Result<(), Refusal> {
    let trimmed = body.trim_ascii();
    if trimmed.is_empty() || trimmed == b"null" {
        return Ok(());
    }
    match object(body)? {
        Json::Obj(entries) if entries.is_empty() => Ok(()),
        _ => Err(SHAPE),
    }
}

/// The fields of one object: each at most once, only `known` ones, `null` the same as absent.
struct Fields<'a> {
    entries: &'a [(String, Json)],
}

impl<'a> Fields<'a> {
    fn new(object: &'a Json, known: &[&str]) -> Result<Self, Refusal> {
        let Json::Obj(entries) = object else {
            return Err(SHAPE);
        };
        let mut seen = BTreeSet::new();
        for (name, _) in entries {
            if !known.contains(&name.as_str()) || !seen.insert(name.as_str()) {
                return Err(SHAPE);
            }
        }
        Ok(Fields { entries })
    }

    fn raw(&self, name: &str) -> Option<&'a Json> {
        self.entries
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value)
    }

    fn optional<T>(
        &self,
        name: &str,
        read: impl Fn(&Json) -> Result<T, Refusal>,
    ) -> Result<Option<T>, Refusal> {
        match self.raw(name) {
            None | Some(Json::Null) => Ok(None),
            Some(value) => read(value).map(Some),
        }
    }

    fn required<T>(
        &self,
        name: &str,
        read: impl Fn(&Json) -> Result<T, Refusal>,
    ) -> Result<T, Refusal> {
        match self.raw(name) {
            None => Err(SHAPE),
            Some(value) => read(value),
        }
    }
}

fn as_u64(value: &Json) -> Result<u64, Refusal> {
    match value {
        Json::U64(number) => Ok(*number),
        _ => Err(SHAPE),
    }
}

fn as_i64(value: &Json) -> Result<i64, Refusal> {
    match value {
        Json::U64(number) => i64::try_from(*number).map_err(|_| SHAPE),
        Json::I64(number) => Ok(*number),
        _ => Err(SHAPE),
    }
}

fn as_bool(value: &Json) -> Result<bool, Refusal> {
    match value {
        Json::Bool(flag) => Ok(*flag),
        _ => Err(SHAPE),
    }
}

fn id_of<T, E: fmt::Debug>(
    parse: fn(&str) -> Result<T, E>,
) -> impl Fn(&Json) -> Result<T, Refusal> {
    move |value| match value {
        Json::Str(text) => parse_id(text, parse),
        _ => Err(SHAPE),
    }
}

/// A pool's total and rules, and the segment count (the command's own field).
fn pool_body(body: &Json) -> Result<(PoolSpec, Option<u64>), Refusal> {
    let fields = Fields::new(
        body,
        &[
            "total",
            "per_user_limit",
            "starts_at_ms",
            "ends_at_ms",
            "low_stock_threshold",
            "segments",
        ],
    )?;
    let spec = PoolSpec {
        total: fields.required("total", as_u64)?,
        per_user_limit: fields.optional("per_user_limit", as_u64)?,
        starts_at_ms: fields.optional("starts_at_ms", as_u64)?,
        ends_at_ms: fields.optional("ends_at_ms", as_u64)?,
        low_stock_threshold: fields.optional("low_stock_threshold", as_u64)?,
    };
    Ok((spec, fields.optional("segments", as_u64)?))
}

const HOLD_FIELDS: [&str; 6] = ["hold_id", "user", "items", "ttl_ms", "confirm", "wait_ms"];

/// `POST /v1/holds`, and a batch's `reserve` op (whose fields are checked by the caller).
fn reserve_fields(fields: &Fields) -> Result<Command, Refusal> {
    let hold_id = fields.required("hold_id", id_of(HoldId::parse))?;
    let user = fields.optional("user", id_of(UserId::parse))?;
    let items = fields.required("items", |value| {
        let Json::Arr(items) = value else {
            return Err(SHAPE);
        };
        items
            .iter()
            .map(|item| {
                let item = Fields::new(item, &["pool", "qty"])?;
                Ok(HoldItem {
                    pool: item.required("pool", id_of(PoolId::parse))?,
                    qty: item.required("qty", as_u64)?,
                })
            })
            .collect::<Result<Vec<_>, Refusal>>()
    })?;
    Ok(Command::Reserve(ReserveRequest {
        hold_id,
        user,
        items: items.into(),
        ttl_ms: fields.optional("ttl_ms", as_u64)?.unwrap_or(600_000),
        confirm: fields.optional("confirm", as_bool)?.unwrap_or(false),
        wait_ms: fields.optional("wait_ms", as_u64)?.unwrap_or(0),
    }))
}

fn reserve(body: &Json) -> Result<Command, Refusal> {
    reserve_fields(&Fields::new(body, &HOLD_FIELDS)?)
}

/// `POST /v1/batch`: 1..=1000 ops; each op that reads as its single endpoint's request is sent,
/// in order, in one call; the others get their own 422 result.
fn batch(body: &[u8]) -> Result<Expect, Refusal> {
    let body = object(body)?;
    let fields = Fields::new(&body, &["ops"])?;
    let Some(Json::Arr(ops)) = fields.raw("ops") else {
        return Err(SHAPE);
    };
    if ops.is_empty() || ops.len() > 1_000 {
        return Err(SHAPE);
    }
    let commands = ops.iter().filter_map(|op| batch_op(op).ok()).collect();
    Ok(Expect::Execute {
        commands,
        batch: true,
    })
}

fn batch_op(op: &Json) -> Result<Command, Refusal> {
    let Json::Obj(entries) = op else {
        return Err(SHAPE);
    };
    let Some((_, Json::Str(kind))) = entries.iter().find(|(key, _)| key == "op") else {
        return Err(SHAPE);
    };
    let hold = |fields: &Fields| fields.required("hold_id", id_of(HoldId::parse));
    Ok(match kind.as_str() {
        "reserve" => {
            let mut known = HOLD_FIELDS.to_vec();
            known.push("op");
            reserve_fields(&Fields::new(op, &known)?)?
        }
        "confirm" => Command::Confirm {
            hold_id: hold(&Fields::new(op, &["op", "hold_id"])?)?,
        },
        "release" => Command::Release {
            hold_id: hold(&Fields::new(op, &["op", "hold_id"])?)?,
        },
        "refund" => {
            let fields = Fields::new(op, &["op", "hold_id", "restock"])?;
            Command::Refund {
                hold_id: hold(&fields)?,
                restock: fields.optional("restock", as_bool)?.unwrap_or(true),
            }
        }
        "extend" => {
            let fields = Fields::new(op, &["op", "hold_id", "ttl_ms"])?;
            Command::Extend {
                hold_id: hold(&fields)?,
                ttl_ms: fields.required("ttl_ms", as_u64)?,
            }
        }
        _ => return Err(SHAPE),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb").ok(), Some("a/b".to_string()));
        assert_eq!(percent_decode("a%2").ok(), Some("a%2".to_string()));
        assert_eq!(percent_decode("%41%").ok(), Some("A%".to_string()));
        assert!(percent_decode("%ff").is_err());
    }

    #[test]
    fn huge_numbers_are_json_of_no_field() {
        assert_eq!(
            tame_huge_numbers(br#"{"a": [1e400, -1e999, 1e308, "1e400"], "b": 1e400x}"#),
            br#"{"a": [1.5, 1.5, 1e308, "1e400"], "b": 1.5x}"#
        );
        assert!(json(br#"{"a": 1e400}"#).is_ok());
        assert!(json(br#"{"a": 1e400-}"#).is_err());
        assert!(json(br#"{"a": "\"1e400"}"#).is_ok());
    }

    #[test]
    fn duplicate_keys_are_kept() {
        let value: Json = serde_json::from_slice(br#"{"a":1,"a":-2}"#).unwrap();
        assert_eq!(
            value,
            Json::Obj(vec![
                ("a".into(), Json::U64(1)),
                ("a".into(), Json::I64(-2))
            ])
        );
    }
}
