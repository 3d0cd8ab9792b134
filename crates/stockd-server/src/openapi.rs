//! The OpenAPI 3 document of the HTTP API, derived with utoipa from the handlers' annotations,
//! the request types ([`crate::dto`]) and the response types ([`crate::wire`]): the types that
//! are on the wire are the ones described. Tests check that real responses and the schemas name
//! the same fields. This module must never be on the request path: the document is serialised
//! once, when the router is built. No UI, no downloads.

use std::collections::BTreeMap;

use axum::http::Method;
use stockd_api as api;
use stockd_core::limits::{
    BATCH_OPS_MAX, EVENT_LIMIT_DEFAULT, EVENT_LIMIT_MAX, HOLD_ITEMS_MAX, HOLD_LIST_LIMIT_DEFAULT,
    HOLD_LIST_LIMIT_MAX, HOLD_TTL_MS_DEFAULT, HOLD_TTL_MS_MAX, HOLD_TTL_MS_MIN, ID_LEN_MAX,
    LOCK_TTL_MS_MAX, LOCK_TTL_MS_MIN, PER_USER_LIMIT_MAX, POOL_LIST_LIMIT_DEFAULT,
    POOL_LIST_LIMIT_MAX, QTY_MAX, SEGMENTS_MAX, TIME_MS_MAX, TOTAL_MAX, WAIT_MS_MAX,
};
use stockd_core::{DetailKind, ErrorKind, ErrorSpec, ERRORS};
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{
    AdditionalProperties, AllOfBuilder, AnyOfBuilder, ArrayItems, Discriminator, Object,
    ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, Number, OpenApi};

use crate::error::{
    BACKEND_UNAVAILABLE, EDGE_ERRORS, FORBIDDEN, INVALID_JSON, PAYLOAD_TOO_LARGE, REQUEST_TIMEOUT,
    UNAUTHORIZED,
};
use crate::routes::{batch, events, holds, locks, ops, pools, RouteId};
use crate::{dto, wire};

/// Declares [`ApiDoc`] with the operations of `$handler`s: the route table's API routes
/// (`routes::api_handlers!`), so that the document has exactly the routes the router has.
macro_rules! api_doc {
    ($($handler:path,)*) => {
        #[derive(OpenApi)]
        #[openapi(
            info(
                title = "stockd",
                description = "Oversell-proof stock reservation: pools of countable stock, all-or-nothing \
                               holds with deadlines, an ordered event feed and lease locks with fencing.\n\n\
                               Besides the answers listed per operation: a path no route has is 404 \
                               `not_found` (before any token check); a known path with another method is \
                               405 `method_not_allowed` with an `Allow` header (after the token check). \
                               Unknown query parameters and unknown body fields are refused with 422 \
                               `invalid_request`; `null` is the same as leaving an optional field out."
            ),
            paths($($handler),*),
            components(schemas(
            dto::PoolBody,
            dto::RestockBody,
            dto::HoldBody,
            dto::ExtendBody,
            dto::RefundBody,
            dto::LockAcquireBody,
            dto::LockRenewBody,
            dto::LockReleaseBody,
            dto::BatchBody,
            wire::EmptyObject,
            wire::HoldItem,
            wire::PoolObject,
            wire::PoolList,
            wire::SegmentObject,
            wire::SegmentList,
            wire::SegmentTake,
            wire::HoldList,
            wire::HoldStatus,
            wire::HoldObject,
            wire::LockGrant,
            wire::LockReleased,
            wire::BatchResponse,
            wire::BatchResult,
            wire::EventType,
            wire::EventObject,
            wire::EventPage,
            wire::EventPartitions,
            wire::ErrorBody,
            wire::StatusBody,
            wire::ReadyBody,
        )),
            modifiers(&Exact),
            security(("bearer" = [])),
            tags(
                (name = "pools", description = "Countable stock: create, restock, read, list, delete."),
                (name = "holds", description = "All-or-nothing reservations and their lifecycle."),
                (name = "batch", description = "Many hold operations in one request."),
                (name = "events", description = "The ordered feed of every state change."),
                (name = "locks", description = "Lease locks with fencing tokens."),
                (name = "ops", description = "Probes, metrics and this document; no token needed."),
            )
        )]
        struct ApiDoc;
    };
}

crate::routes::api_handlers!(api_doc);

/// Makes the derived document exact: see [`make_exact`].
struct Exact;

impl Modify for Exact {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for problem in make_exact(openapi) {
            // Caught by the unit tests; never worth refusing to serve over.
            tracing::error!(%problem, "the OpenAPI document is not exact");
        }
    }
}

/// The characters of an identifier after the first (`stockd_core::is_id_byte`), as a regex class.
const ID_BYTES: &str = "A-Za-z0-9._:-";

/// The identifier grammar of `stockd_core::check_id`: the first byte alphanumeric, the rest from
/// [`ID_BYTES`]; the length (1..=ID_LEN_MAX) is `minLength`/`maxLength` (ASCII only, so
/// characters are bytes).
fn id_pattern() -> String {
    format!("^[A-Za-z0-9][{ID_BYTES}]*$")
}

/// What a request value must be, in the core's own constants.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// An identifier (pool, hold_id, user, lock name, owner, list cursor).
    Id,
    /// A pool-list prefix: at most ID_LEN_MAX identifier bytes, possibly none.
    Prefix,
    /// An integer in `min..=max`, and the value the server uses when it is absent or null.
    Int {
        min: u64,
        max: u64,
        default: Option<u64>,
    },
    /// A non-zero integer in `-max..=max`.
    NonZero { max: u64 },
    /// An array of `min..=max` entries; `unique` when two equal entries are refused.
    Items {
        min: usize,
        max: usize,
        unique: bool,
    },
    /// A boolean, and the value the server uses when it is absent or null.
    Bool { default: Option<bool> },
    /// A hold status: the `HoldStatus` schema, whose values say it all.
    Status,
}

const TOTAL: Rule = Rule::Int {
    min: 0,
    max: TOTAL_MAX,
    default: None,
};
const TIME_MS: Rule = Rule::Int {
    min: 0,
    max: TIME_MS_MAX,
    default: None,
};
const WAIT: Rule = Rule::Int {
    min: 0,
    max: WAIT_MS_MAX,
    default: Some(0),
};
const HOLD_TTL: Rule = Rule::Int {
    min: HOLD_TTL_MS_MIN,
    max: HOLD_TTL_MS_MAX,
    default: Some(HOLD_TTL_MS_DEFAULT),
};
const HOLD_TTL_REQUIRED: Rule = Rule::Int {
    min: HOLD_TTL_MS_MIN,
    max: HOLD_TTL_MS_MAX,
    default: None,
};
const LOCK_TTL: Rule = Rule::Int {
    min: LOCK_TTL_MS_MIN,
    max: LOCK_TTL_MS_MAX,
    default: None,
};
/// Fencing tokens and event seqs: any u64.
const U64: Rule = Rule::Int {
    min: 0,
    max: u64::MAX,
    default: None,
};

/// Every property of every request body, with its rule. A property without a rule, or a rule
/// without a property, is a problem `make_exact` reports (and the tests fail on).
const BODY_RULES: &[(&str, &[(&str, Rule)])] = &[
    (
        "PoolBody",
        &[
            ("total", TOTAL),
            (
                "per_user_limit",
                Rule::Int {
                    min: 1,
                    max: PER_USER_LIMIT_MAX,
                    default: None,
                },
            ),
            ("starts_at_ms", TIME_MS),
            ("ends_at_ms", TIME_MS),
            ("low_stock_threshold", TOTAL),
            (
                "segments",
                Rule::Int {
                    min: 1,
                    max: SEGMENTS_MAX,
                    default: Some(1),
                },
            ),
        ],
    ),
    (
        "RestockBody",
        &[
            ("delta", Rule::NonZero { max: TOTAL_MAX }),
            ("request_id", Rule::Id),
        ],
    ),
    (
        "HoldItem",
        &[
            ("pool", Rule::Id),
            (
                "qty",
                Rule::Int {
                    min: 1,
                    max: QTY_MAX,
                    default: None,
                },
            ),
        ],
    ),
    (
        "HoldBody",
        &[
            ("hold_id", Rule::Id),
            ("user", Rule::Id),
            (
                "items",
                // Pools must be distinct: two equal items name the same pool (JSON Schema cannot
                // say that items with different qty must differ in pool; the description does).
                Rule::Items {
                    min: 1,
                    max: HOLD_ITEMS_MAX,
                    unique: true,
                },
            ),
            ("ttl_ms", HOLD_TTL),
            (
                "confirm",
                Rule::Bool {
                    default: Some(false),
                },
            ),
            ("wait_ms", WAIT),
        ],
    ),
    ("ExtendBody", &[("ttl_ms", HOLD_TTL_REQUIRED)]),
    (
        "RefundBody",
        &[(
            "restock",
            Rule::Bool {
                default: Some(true),
            },
        )],
    ),
    (
        "LockAcquireBody",
        &[("owner", Rule::Id), ("ttl_ms", LOCK_TTL), ("wait_ms", WAIT)],
    ),
    (
        "LockRenewBody",
        &[("owner", Rule::Id), ("token", U64), ("ttl_ms", LOCK_TTL)],
    ),
    ("LockReleaseBody", &[("owner", Rule::Id), ("token", U64)]),
    (
        "BatchBody",
        &[(
            "ops",
            Rule::Items {
                min: 1,
                max: BATCH_OPS_MAX,
                unique: false,
            },
        )],
    ),
];

/// A list's `limit` parameter: 1 to the list's maximum page, absent meaning its default page.
const fn page_limit(max: usize, default: usize) -> (&'static str, Rule) {
    (
        "limit",
        Rule::Int {
            min: 1,
            max: max as u64,
            default: Some(default as u64),
        },
    )
}

/// Every query parameter, by operation. Path parameters are all identifiers.
const QUERY_RULES: &[(api::Operation, &[(&str, Rule)])] = &[
    (
        api::PUT_POOL,
        &[(
            "if_absent",
            Rule::Bool {
                default: Some(false),
            },
        )],
    ),
    (
        api::LIST_POOLS,
        &[
            ("prefix", Rule::Prefix),
            ("after", Rule::Id),
            page_limit(POOL_LIST_LIMIT_MAX, POOL_LIST_LIMIT_DEFAULT),
        ],
    ),
    (
        api::LIST_HOLDS,
        &[
            ("pool", Rule::Id),
            ("user", Rule::Id),
            ("status", Rule::Status),
            ("after", Rule::Id),
            page_limit(HOLD_LIST_LIMIT_MAX, HOLD_LIST_LIMIT_DEFAULT),
        ],
    ),
    (
        api::EVENTS,
        &[
            // 0..=P-1; P is the backend's configuration, not known to the document.
            (
                "partition",
                Rule::Int {
                    min: 0,
                    max: u32::MAX as u64 - 1,
                    default: None,
                },
            ),
            (
                "after",
                Rule::Int {
                    min: 0,
                    max: u64::MAX,
                    default: Some(0),
                },
            ),
            page_limit(EVENT_LIMIT_MAX, EVENT_LIMIT_DEFAULT),
            ("wait_ms", WAIT),
        ],
    ),
];

/// Every error the server sends: the core's table and the edge's.
fn all_errors() -> impl Iterator<Item = &'static ErrorSpec> {
    ERRORS.iter().chain(EDGE_ERRORS)
}

/// A core error, by its row in the core's table.
const fn core(kind: ErrorKind) -> &'static ErrorSpec {
    kind.spec()
}

/// The row of `code`: the core's table's or the edge's (tests check that each code has exactly
/// one).
fn spec_of(code: api::ErrorCode) -> Option<&'static ErrorSpec> {
    all_errors().find(|spec| spec.code == code.as_str())
}

/// Whether a route's handler asks the backend (and so can answer 503). The match is exhaustive
/// so that a new route does not compile until someone decides.
fn reaches_backend(route: RouteId) -> bool {
    match route {
        RouteId::Healthz | RouteId::Metrics | RouteId::OpenApi => false,
        // Not API (not in the document), and files compiled into the binary.
        RouteId::Console | RouteId::ConsolePage | RouteId::ConsoleAsset => false,
        // The partition count is the backend's configuration, known without asking it.
        RouteId::EventPartitions => false,
        RouteId::Readyz
        | RouteId::Pools
        | RouteId::Pool
        | RouteId::PoolRestock
        | RouteId::PoolSegments
        | RouteId::Holds
        | RouteId::Hold
        | RouteId::HoldConfirm
        | RouteId::HoldRelease
        | RouteId::HoldExtend
        | RouteId::HoldRefund
        | RouteId::Batch
        | RouteId::Events
        | RouteId::LockAcquire
        | RouteId::LockRenew
        | RouteId::LockRelease => true,
    }
}

/// The errors the HTTP edge can give any operation of `route` called with `method`.
fn edge_errors(route: RouteId, method: &Method) -> Vec<&'static ErrorSpec> {
    // Every request's body is read in full first (json::Api), on every route: a body
    // that cannot be read is 400, one over the limit 413, one that is too slow 408. Every route
    // checks its query string (unknown parameters are refused) and, with a body, the body: 422.
    let mut specs = vec![
        &INVALID_JSON,
        &REQUEST_TIMEOUT,
        &PAYLOAD_TOO_LARGE,
        core(ErrorKind::InvalidRequest),
    ];
    if !route.is_open() {
        specs.push(&UNAUTHORIZED);
        if route.is_admin_only(method) {
            specs.push(&FORBIDDEN);
        }
    }
    if reaches_backend(route) {
        specs.push(&BACKEND_UNAVAILABLE);
    }
    specs
}

/// `insufficient_stock` -> `InsufficientStockError`.
fn error_schema_name(code: &str) -> String {
    let mut name = String::with_capacity(code.len() + 5);
    for word in code.split('_') {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            name.push(first.to_ascii_uppercase());
            name.extend(chars);
        }
    }
    name.push_str("Error");
    name
}

fn ref_to(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

fn number(value: u64) -> Number {
    Number::UInt(usize::try_from(value).unwrap_or(usize::MAX))
}

/// Applies `rule` to a property or parameter schema; what it cannot apply is a problem.
fn apply_rule(schema: &mut RefOr<Schema>, rule: Rule, what: &str, problems: &mut Vec<String>) {
    match (schema, rule) {
        (RefOr::T(Schema::Object(object)), Rule::Id) => {
            object.min_length = Some(1);
            object.max_length = Some(ID_LEN_MAX);
            object.pattern = Some(id_pattern());
        }
        (RefOr::T(Schema::Object(object)), Rule::Prefix) => {
            object.max_length = Some(ID_LEN_MAX);
            object.pattern = Some(format!("^[{ID_BYTES}]*$"));
        }
        (RefOr::T(Schema::Object(object)), Rule::Int { min, max, default }) => {
            object.minimum = Some(number(min));
            object.maximum = Some(number(max));
            if max > i64::MAX as u64 {
                // Beyond int64: the bounds say what it is.
                object.format = None;
            }
            object.default = default.map(serde_json::Value::from);
        }
        (RefOr::T(Schema::Object(object)), Rule::NonZero { max }) => {
            object.minimum = Some(Number::Int(-isize::try_from(max).unwrap_or(isize::MAX)));
            object.maximum = Some(number(max));
            object
                .extensions
                .get_or_insert_with(Default::default)
                .insert("not".into(), serde_json::json!({"const": 0}));
        }
        (RefOr::T(Schema::Object(object)), Rule::Bool { default }) => {
            object.default = default.map(serde_json::Value::from);
        }
        (RefOr::T(Schema::Array(array)), Rule::Items { min, max, unique }) => {
            array.min_items = Some(min);
            array.max_items = Some(max);
            array.unique_items = unique;
        }
        (RefOr::Ref(reference), Rule::Status)
            if reference.ref_location.ends_with("/HoldStatus") => {}
        (_, rule) => problems.push(format!("{what}: cannot apply {rule:?} to this schema")),
    }
}

/// Moves a request body field's `default` into its description. A `default` on a request field
/// makes openapi-typescript (with its default `defaultNonNullable`) type the field as required,
/// so every reserve would have to pass `ttl_ms`, `confirm` and `wait_ms`; the contract makes them
/// optional. Query parameters keep their `default`: generators leave those optional.
fn default_in_words(schema: &mut RefOr<Schema>) {
    let RefOr::T(Schema::Object(object)) = schema else {
        return;
    };
    let Some(default) = object.default.take() else {
        return;
    };
    let words = format!("Absent or null: {default}.");
    object.description = Some(match object.description.take() {
        Some(description) => format!("{description} {words}"),
        None => words,
    });
}

/// The properties of a component object schema.
fn object_mut<'a>(
    schemas: &'a mut BTreeMap<String, RefOr<Schema>>,
    name: &str,
) -> Option<&'a mut Object> {
    match schemas.get_mut(name) {
        Some(RefOr::T(Schema::Object(object))) => Some(object),
        _ => None,
    }
}

/// Makes the document derived from the handlers' annotations exact, from the core's constants
/// and the route table, so that it cannot drift from the server:
/// - every request field, path id and query parameter carries its range or grammar;
/// - every operation lists every status the server can send, each error status with the exact
///   error codes (one schema per code, with its detail fields) and headers (401
///   `WWW-Authenticate`, 408 `Connection: close`);
/// - response objects list every field they always carry as required.
///
/// Returns what it could not do (a rule without a field, an operation it does not know, ...):
/// empty when the document is exact.
pub(crate) fn make_exact(openapi: &mut utoipa::openapi::OpenApi) -> Vec<String> {
    let mut problems = Vec::new();
    let components = openapi.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
    );
    let schemas = &mut components.schemas;
    for (schema_name, rules) in BODY_RULES {
        let Some(object) = object_mut(schemas, schema_name) else {
            problems.push(format!("request schema {schema_name} is missing"));
            continue;
        };
        for (property, rule) in *rules {
            match object.properties.get_mut(*property) {
                Some(schema) => {
                    apply_rule(
                        schema,
                        *rule,
                        &format!("{schema_name}.{property}"),
                        &mut problems,
                    );
                    default_in_words(schema);
                }
                None => problems.push(format!("{schema_name} has no property {property}")),
            }
        }
        for property in object.properties.keys() {
            if !rules.iter().any(|(name, _)| name == property) {
                problems.push(format!("{schema_name}.{property} has no rule"));
            }
        }
    }
    for name in [
        "PoolObject",
        "PoolList",
        "HoldObject",
        "HoldList",
        "LockGrant",
        "LockReleased",
        "BatchResponse",
        "BatchResult",
        "EventPage",
        "EventPartitions",
        "StatusBody",
        "ReadyBody",
    ] {
        // Null fields are sent as null, never left out.
        match object_mut(schemas, name) {
            Some(object) => object.required = object.properties.keys().cloned().collect(),
            None => problems.push(format!("response schema {name} is missing")),
        }
    }
    if let Some(object) = object_mut(schemas, "BatchResult") {
        object.properties.insert(
            "body".into(),
            Schema::AnyOf(
                AnyOfBuilder::new()
                    .item(ref_to("HoldObject"))
                    .item(ref_to("ErrorBody"))
                    .description(Some(
                        "The hold, or the error body, the single endpoint would answer",
                    ))
                    .build(),
            )
            .into(),
        );
    }
    for spec in all_errors() {
        schemas.insert(error_schema_name(spec.code), error_schema(spec));
    }

    for (path, item) in openapi.paths.paths.iter_mut() {
        let Some(route) = RouteId::from_path(path) else {
            problems.push(format!("{path} is not a route"));
            continue;
        };
        let operations = [
            (Method::GET, &mut item.get),
            (Method::PUT, &mut item.put),
            (Method::POST, &mut item.post),
            (Method::DELETE, &mut item.delete),
        ];
        for (method, operation) in operations {
            if let Some(operation) = operation.as_mut() {
                exact_operation(route, &method, operation, &mut problems);
            }
        }
        for (name, operation) in [
            ("options", &item.options),
            ("head", &item.head),
            ("patch", &item.patch),
            ("trace", &item.trace),
        ] {
            if operation.is_some() {
                problems.push(format!("{name} {path}: the router has no such method"));
            }
        }
    }
    batch_ops(openapi, &mut problems);
    problems
}

/// The ops of a batch, by `op`, and the operation of the single endpoint whose request each is
/// (`dto::decode_op` decodes an op with that endpoint's body type).
const BATCH_OPS: &[(&str, api::Operation)] = &[
    ("reserve", api::RESERVE),
    ("confirm", api::CONFIRM),
    ("release", api::RELEASE),
    ("refund", api::REFUND),
    ("extend", api::EXTEND),
];

/// `ReserveOp`, `ConfirmOp`, ...: each the fields of its single endpoint's request (the path's
/// `{hold_id}` and the body's fields) and `op`; `BatchOp` is one of them.
///
/// A batch's `ops` are items of `BatchOp` *or anything else*: by the contract each op is
/// applied on its own with exactly the result its single endpoint would give, so an op that is
/// not a good `BatchOp` (a field out of range, of the wrong type, unknown, missing; not an
/// object at all) is not refused with the batch: its result is the endpoint's 422, inside the
/// 200, and the other ops still run. Only the batch's own shape (`{"ops": [...]}` with 1..=1000
/// ops) is refused whole. The document says exactly that, so that what it calls invalid is what
/// the server refuses; `BatchOp` documents what a good op is, for readers and generated clients.
fn batch_ops(openapi: &mut utoipa::openapi::OpenApi, problems: &mut Vec<String>) {
    let mut endpoints = BTreeMap::new();
    for (path, item) in &openapi.paths.paths {
        for (method, operation) in [
            ("GET", &item.get),
            ("PUT", &item.put),
            ("POST", &item.post),
            ("DELETE", &item.delete),
        ] {
            if let Some(operation) = operation {
                let what = format!("{method} {path}");
                endpoints.insert((method, path.as_str()), (what, operation.clone()));
            }
        }
    }
    let schemas = &mut openapi
        .components
        .get_or_insert_with(Default::default)
        .schemas;
    let mut one_of = OneOfBuilder::new()
        .description(Some(
            "One op of a batch: `op` names it; the other fields are those of its single \
             endpoint's request (the path's `hold_id` and the body's fields), with the same \
             rules and defaults.",
        ))
        .discriminator(Some(Discriminator::new("op")));
    let mut mapping = BTreeMap::new();
    for (op, operation) in BATCH_OPS {
        let Some((what, endpoint)) = endpoints.get(&(operation.method, operation.path)) else {
            problems.push(format!(
                "batch op {op}: no operation {} {}",
                operation.method, operation.path
            ));
            continue;
        };
        let Some(mut object) = endpoint_request(endpoint, schemas, problems) else {
            continue;
        };
        let mut name = op[..1].to_ascii_uppercase();
        name.push_str(&op[1..]);
        name.push_str("Op");
        let summary = endpoint.summary.clone().unwrap_or_default();
        object.description = Some(format!("`{op}`, as `{what}`: {summary}."));
        let mut op_schema = ObjectBuilder::new().schema_type(Type::String).build();
        op_schema
            .extensions
            .get_or_insert_with(Default::default)
            .insert("const".into(), serde_json::json!(op));
        object.properties.insert("op".into(), op_schema.into());
        object.required.insert(0, "op".into());
        let reference = format!("#/components/schemas/{name}");
        mapping.insert(op.to_string(), reference);
        one_of = one_of.item(ref_to(&name));
        schemas.insert(name, Schema::Object(object).into());
    }
    let mut one_of = one_of.build();
    if let Some(discriminator) = one_of.discriminator.as_mut() {
        discriminator.mapping = mapping;
    }
    schemas.insert("BatchOp".into(), Schema::OneOf(one_of).into());
    let Some(batch) = object_mut(schemas, "BatchBody") else {
        problems.push("request schema BatchBody is missing".into());
        return;
    };
    match batch.properties.get_mut("ops") {
        Some(RefOr::T(Schema::Array(array))) => {
            let anything_else = ObjectBuilder::new()
                .schema_type(SchemaType::AnyValue)
                .description(Some(
                    "Any other value is not refused with the batch: its result is the 422 \
                 `invalid_request` its single endpoint would answer (the message starts with \
                 `ops[INDEX]: `), and the other ops still run.",
                ));
            array.items = ArrayItems::RefOrSchema(Box::new(
                Schema::AnyOf(
                    AnyOfBuilder::new()
                        .item(ref_to("BatchOp"))
                        .item(anything_else)
                        .build(),
                )
                .into(),
            ));
        }
        _ => problems.push("BatchBody.ops is not an array".into()),
    }
}

/// The fields of `endpoint`'s request as one closed object: its path's `{hold_id}` (if any)
/// and its body's fields.
fn endpoint_request(
    endpoint: &Operation,
    schemas: &BTreeMap<String, RefOr<Schema>>,
    problems: &mut Vec<String>,
) -> Option<Object> {
    let id = endpoint.operation_id.clone().unwrap_or_default();
    let body = endpoint
        .request_body
        .as_ref()
        .and_then(|body| body.content.get("application/json"))
        .and_then(|content| content.schema.as_ref());
    let Some(RefOr::Ref(reference)) = body else {
        problems.push(format!("{id}: the request body is not a named schema"));
        return None;
    };
    let name = reference
        .ref_location
        .trim_start_matches("#/components/schemas/");
    let Some(RefOr::T(Schema::Object(body))) = schemas.get(name) else {
        problems.push(format!("{id}: request schema {name} is missing"));
        return None;
    };
    let mut object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .build();
    for parameter in endpoint.parameters.iter().flatten() {
        if parameter.parameter_in == ParameterIn::Path && parameter.name == "hold_id" {
            let Some(mut schema) = parameter.schema.clone() else {
                problems.push(format!("{id}: the path's hold_id has no schema"));
                return None;
            };
            if let RefOr::T(Schema::Object(object)) = &mut schema {
                object.description = parameter.description.clone();
            }
            object.properties.insert("hold_id".into(), schema);
            object.required.push("hold_id".into());
        }
    }
    for (property, schema) in &body.properties {
        if object
            .properties
            .insert(property.clone(), schema.clone())
            .is_some()
        {
            problems.push(format!("{id}: {property} is in both the path and the body"));
        }
    }
    object.required.extend(body.required.iter().cloned());
    Some(object)
}

/// `{"error": code, "message", ...details}` for one code: `ErrorBody` with the code fixed and
/// the details required.
fn error_schema(spec: &ErrorSpec) -> RefOr<Schema> {
    let mut details = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property(
            "error",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([spec.code])),
        )
        .required("error");
    for field in spec.details() {
        let name = field.name;
        let schema: RefOr<Schema> = match field.kind {
            // Not a detail: `details()` leaves the message out (it is the body's `message`).
            DetailKind::Message | DetailKind::Id => {
                let mut schema: RefOr<Schema> =
                    ObjectBuilder::new().schema_type(Type::String).into();
                apply_rule(&mut schema, Rule::Id, name, &mut Vec::new());
                schema
            }
            DetailKind::Int { min } => ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(number(min)))
                .into(),
            DetailKind::Delta => {
                let mut schema: RefOr<Schema> =
                    ObjectBuilder::new().schema_type(Type::Integer).into();
                apply_rule(
                    &mut schema,
                    Rule::NonZero { max: TOTAL_MAX },
                    name,
                    &mut Vec::new(),
                );
                schema
            }
        };
        details = details.property(name, schema).required(name);
    }
    Schema::AllOf(
        AllOfBuilder::new()
            .item(ref_to("ErrorBody"))
            .item(details)
            .description(Some(format!(
                "`{}` ({}): {}.",
                spec.code, spec.status, spec.meaning
            )))
            .build(),
    )
    .into()
}

/// The row of `table` for `operation`.
fn row<T>(table: &'static [(api::Operation, T)], operation: api::Operation) -> Option<&'static T> {
    table
        .iter()
        .find(|(key, _)| *key == operation)
        .map(|(_, value)| value)
}

fn exact_operation(
    route: RouteId,
    method: &Method,
    operation: &mut Operation,
    problems: &mut Vec<String>,
) {
    let what = format!("{method} {}", route.path());
    // The API's operation this is (the route table's), the key of the tables.
    let Some(this) = route
        .operations()
        .iter()
        .copied()
        .find(|operation| operation.method == method.as_str())
    else {
        problems.push(format!("{what}: the route table has no such operation"));
        return;
    };
    // Open routes opt out of the global bearer requirement with `security: [{}]`.
    if route.is_open() != operation.security.is_some() {
        problems.push(format!("{what}: security does not match the auth rules"));
    }
    // Parameters.
    let query_rules = row(QUERY_RULES, this).map_or(&[][..], |rules| *rules);
    for parameter in operation.parameters.iter_mut().flatten() {
        let name = parameter.name.clone();
        let rule = match parameter.parameter_in {
            ParameterIn::Path => Some(Rule::Id),
            ParameterIn::Query => query_rules
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, r)| *r),
            _ => None,
        };
        match (rule, parameter.schema.as_mut()) {
            (Some(rule), Some(schema)) => {
                apply_rule(schema, rule, &format!("{what} ?{name}"), problems)
            }
            _ => problems.push(format!("{what}: parameter {name} has no rule")),
        }
    }
    for (name, _) in query_rules {
        let present = operation
            .parameters
            .iter()
            .flatten()
            .any(|parameter| parameter.name == *name);
        if !present {
            problems.push(format!("{what}: query rule {name} has no parameter"));
        }
    }
    // An optional body (`Option<T>` in the annotation, which utoipa writes as `oneOf: [null,
    // T]`) is documented as `T`, not required. Generators handle that form (no body by
    // default), not the union: openapi-python-client's default argument was sent as `json=UNSET`
    // and crashed. A `null` body, which the server takes as no body, is said in words.
    if let Some(body) = operation.request_body.as_mut() {
        if let Some(content) = body.content.get_mut("application/json") {
            if let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema {
                match one_of.items.as_slice() {
                    [RefOr::T(Schema::Object(null)), RefOr::Ref(reference)]
                        if null.schema_type == Type::Null.into() =>
                    {
                        content.schema = Some(RefOr::Ref(reference.clone()));
                        body.required = Some(utoipa::openapi::Required::False);
                        body.description = Some(
                            "Optional: no body, an empty body and `null` are the same as `{}` \
                             (every field absent)."
                                .into(),
                        );
                    }
                    _ => problems.push(format!("{what}: a request body of another union")),
                }
            }
        }
    }
    // Responses: the annotated successes, then every error status from the edge's rules and
    // the operation's own errors (`stockd_api`, the one list of them: the annotations name none).
    let mut particular = Vec::with_capacity(this.errors.len());
    for code in this.errors {
        match spec_of(*code) {
            Some(spec) => particular.push(spec),
            None => problems.push(format!("{what}: no error table has {code}")),
        }
    }
    let mut by_status: BTreeMap<u16, Vec<&'static ErrorSpec>> = BTreeMap::new();
    for spec in edge_errors(route, method).into_iter().chain(particular) {
        by_status.entry(spec.status).or_default().push(spec);
    }
    let mut errors: BTreeMap<String, RefOr<Response>> = by_status
        .into_iter()
        .map(|(status, specs)| (status.to_string(), error_response(&specs)))
        .collect();
    let responses = &mut operation.responses.responses;
    for (status, response) in responses.iter() {
        let error_status = status.parse::<u16>().map_or(true, |status| status >= 400);
        // What the tables make is exact already (this runs again on an exact document).
        if error_status && errors.get(status) != Some(response) {
            problems.push(format!(
                "{what}: annotated {status}: error responses come from the operation's errors only"
            ));
        }
    }
    responses.append(&mut errors);
}

fn error_response(specs: &[&ErrorSpec]) -> RefOr<Response> {
    let description = specs
        .iter()
        .map(|spec| format!("`{}`: {}", spec.code, spec.meaning))
        .collect::<Vec<_>>()
        .join("; ");
    let schema: RefOr<Schema> = match specs {
        [spec] => ref_to(&error_schema_name(spec.code)),
        _ => {
            let mut one_of = OneOfBuilder::new();
            for spec in specs {
                one_of = one_of.item(ref_to(&error_schema_name(spec.code)));
            }
            Schema::OneOf(one_of.build()).into()
        }
    };
    let mut response = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new().schema(Some(schema)).build(),
    );
    for spec in specs {
        let header = if *spec == &UNAUTHORIZED {
            Some(("WWW-Authenticate", "Bearer", "The scheme to use: `Bearer`."))
        } else if *spec == &REQUEST_TIMEOUT {
            Some(("Connection", "close", "The server closes the connection."))
        } else {
            None
        };
        if let Some((name, value, description)) = header {
            response = response.header(
                name,
                HeaderBuilder::new()
                    .schema(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .enum_values(Some([value])),
                    )
                    .description(Some(description))
                    .build(),
            );
        }
    }
    RefOr::T(response.build())
}

pub(crate) fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use serde_json::{json, Value};
    use stockd_core::ids::{check_id, is_id_byte};
    use stockd_core::{
        Backend, BackendError, BackendFuture, BackendStats, Command, Error, EventPage,
        EventsRequest, HoldId, HoldItem, LockName, LockRequest, OwnerId, PoolId, PoolSpec,
        ReserveRequest,
    };
    use tower::ServiceExt;

    use super::*;
    use crate::error::ApiError;
    use crate::ServerConfig;

    fn document_json() -> Value {
        serde_json::to_value(document()).unwrap()
    }

    fn error_spec(code: &str) -> Option<&'static ErrorSpec> {
        all_errors().find(|spec| spec.code == code)
    }

    /// Each error an operation names has one row, in the core's table or the edge's, so its
    /// response in the document is that row's.
    #[test]
    fn every_error_of_an_operation_has_exactly_one_row() {
        for operation in api::OPERATIONS {
            for code in operation.errors {
                let rows = all_errors()
                    .filter(|spec| spec.code == code.as_str())
                    .count();
                assert_eq!(rows, 1, "{} {code}", operation.name);
                assert_eq!(spec_of(*code).map(|spec| spec.code), Some(code.as_str()));
            }
        }
    }

    #[test]
    fn the_document_is_exact_by_its_own_account() {
        let mut openapi = ApiDoc::openapi();
        assert_eq!(make_exact(&mut openapi), Vec::<String>::new());
    }

    /// A backend that is never reachable: enough to find out which methods the router routes.
    struct Down;

    fn down<T: Send + 'static>() -> BackendFuture<'static, T> {
        Box::pin(async { Err(BackendError::Unavailable("test".into())) })
    }

    impl Backend for Down {
        fn execute(&self, _: Vec<Command>) -> BackendFuture<'_, Vec<stockd_core::Outcome>> {
            down()
        }
        fn partitions(&self) -> u32 {
            1
        }
        fn events(&self, _: EventsRequest) -> BackendFuture<'_, Result<EventPage, Error>> {
            down()
        }
        fn ready(&self) -> BackendFuture<'_, ()> {
            down()
        }
        fn stats(&self) -> BackendStats {
            BackendStats::default()
        }
        fn shutdown(&self) -> BackendFuture<'_, ()> {
            Box::pin(async { Ok(()) })
        }
    }

    /// Every route of the router is in the document with exactly the methods the router
    /// serves (a method it does not serve answers 405), and nothing else is.
    #[tokio::test]
    async fn every_route_is_documented_with_the_methods_the_router_serves() {
        let router = crate::routes::router(Arc::new(Down), ServerConfig::default()).0;
        let document = document_json();
        let paths = document["paths"].as_object().unwrap();
        for route in RouteId::ALL {
            let template = route.path();
            let uri = template
                .replace("{pool}", "p")
                .replace("{hold_id}", "h")
                .replace("{name}", "l");
            for method in [
                Method::GET,
                Method::PUT,
                Method::POST,
                Method::DELETE,
                Method::PATCH,
            ] {
                let request = Request::builder()
                    .method(method.clone())
                    .uri(&uri)
                    .body(Body::empty())
                    .unwrap();
                let status = router.clone().oneshot(request).await.unwrap().status();
                let served = status != StatusCode::METHOD_NOT_ALLOWED;
                let documented = paths
                    .get(template)
                    .and_then(|item| item.get(method.as_str().to_lowercase()))
                    .is_some();
                // The console's page and files are served by stockd but are not API.
                let api = route.access() != crate::routes::Access::Console;
                assert_eq!(
                    served && api,
                    documented,
                    "{method} {template}: served {served} ({status}), documented {documented}"
                );
                if !api {
                    assert_eq!(served, method == Method::GET, "{method} {template}");
                }
            }
        }
        for path in paths.keys() {
            assert!(
                RouteId::from_path(path).is_some(),
                "{path} is documented, not routed"
            );
        }
    }

    fn operations(document: &Value) -> Vec<(String, String, &Value)> {
        let mut operations = Vec::new();
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                operations.push((method.to_uppercase(), path.clone(), operation));
            }
        }
        operations
    }

    /// The header the server adds to a restock's retry (`reply::REPLAYED`) is documented on the
    /// restock's 200, and on no other success: a generated client can read it there.
    #[test]
    fn the_replayed_header_is_documented_on_the_restock_only() {
        let document = document_json();
        let (name, value) = crate::reply::REPLAYED;
        let mut documented = Vec::new();
        for (method, path, operation) in operations(&document) {
            for (status, response) in operation["responses"].as_object().unwrap() {
                let headers = response["headers"].as_object();
                for (header, spec) in headers.into_iter().flatten() {
                    if header.eq_ignore_ascii_case(name.as_str()) {
                        assert_eq!(spec["schema"]["type"], "string", "{header}");
                        let description = spec["description"].as_str().unwrap_or_default();
                        assert!(
                            description.contains(&format!("`{}`", value.to_str().unwrap())),
                            "{description}"
                        );
                        documented.push(format!("{method} {path} {status}"));
                    }
                }
            }
        }
        assert_eq!(documented, ["POST /v1/pools/{pool}/restock 200"]);
    }

    /// The error codes a documented response allows, read back from its schema.
    fn codes_of(document: &Value, response: &Value) -> Vec<String> {
        let schema = &response["content"]["application/json"]["schema"];
        let refs: Vec<&Value> = match schema.get("oneOf") {
            Some(items) => items.as_array().unwrap().iter().collect(),
            None => vec![schema],
        };
        refs.into_iter()
            .map(|item| {
                let reference = item["$ref"]
                    .as_str()
                    .expect("an error response refers to a schema");
                let name = reference.strip_prefix("#/components/schemas/").unwrap();
                let error = &document["components"]["schemas"][name];
                assert_eq!(
                    error["allOf"][0]["$ref"], "#/components/schemas/ErrorBody",
                    "{name} is an ErrorBody"
                );
                error["allOf"][1]["properties"]["error"]["enum"][0]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn every_operation_lists_every_error_the_edge_can_give() {
        let document = document_json();
        for (method, path, operation) in operations(&document) {
            let route = RouteId::from_path(&path).unwrap();
            let responses = operation["responses"].as_object().unwrap();
            let statuses: Vec<&str> = responses.keys().map(String::as_str).collect();
            let what = format!("{method} {path}");
            for always in ["400", "408", "413", "422"] {
                assert!(statuses.contains(&always), "{what} lacks {always}");
            }
            let method: Method = method.parse().unwrap();
            assert_eq!(statuses.contains(&"401"), !route.is_open(), "{what} 401");
            assert_eq!(
                statuses.contains(&"403"),
                route.is_admin_only(&method),
                "{what} 403"
            );
            assert_eq!(
                statuses.contains(&"503"),
                reaches_backend(route),
                "{what} 503"
            );
            assert!(
                statuses.iter().any(|status| status.starts_with('2')),
                "{what} has no success"
            );
            for (status, response) in responses {
                if status.starts_with('2') {
                    continue;
                }
                let codes = codes_of(&document, response);
                for code in &codes {
                    let spec = error_spec(code).unwrap();
                    assert_eq!(spec.status.to_string(), *status, "{what}: {code}");
                }
                let headers = &response["headers"];
                match status.as_str() {
                    "401" => assert!(headers["WWW-Authenticate"].is_object(), "{what}"),
                    "408" => assert!(headers["Connection"].is_object(), "{what}"),
                    _ => {}
                }
            }
            let all: Vec<String> = responses
                .iter()
                .filter(|(status, _)| !status.starts_with('2'))
                .flat_map(|(_, response)| codes_of(&document, response))
                .collect();
            for code in [
                "invalid_json",
                "request_timeout",
                "payload_too_large",
                "invalid_request",
            ] {
                assert!(all.iter().any(|c| c == code), "{what} lacks {code}");
            }
        }
        // Spot checks of the particular errors.
        let paths = &document["paths"];
        let codes = |path: &str, method: &str, status: &str| {
            codes_of(&document, &paths[path][method]["responses"][status])
        };
        assert_eq!(
            codes("/v1/holds/{hold_id}/confirm", "post", "409"),
            ["hold_expired", "hold_released", "hold_refunded"]
        );
        assert_eq!(
            codes("/v1/holds/{hold_id}/refund", "post", "409"),
            ["hold_not_confirmed", "pool_deleted"]
        );
        assert_eq!(codes("/v1/events", "get", "410"), ["events_expired"]);
        assert_eq!(
            codes("/v1/events", "get", "422"),
            ["invalid_request", "partition_required"]
        );
        assert_eq!(
            codes("/v1/holds", "post", "422"),
            ["invalid_request", "user_required"]
        );
        assert!(paths["/v1/events/partitions"]["get"]["responses"]
            .get("503")
            .is_none());
        assert!(paths["/healthz"]["get"]["responses"].get("503").is_none());
        assert!(paths["/readyz"]["get"]["responses"]["503"].is_object());
    }

    /// One sample of every error the server can send.
    fn samples() -> Vec<ApiError> {
        let pool = PoolId::parse("p").unwrap();
        let hold_id = HoldId::parse("h").unwrap();
        let core = [
            Error::invalid("x"),
            Error::PoolNotFound { pool: pool.clone() },
            Error::UserRequired { pool: pool.clone() },
            Error::SaleNotStarted {
                pool: pool.clone(),
                starts_at_ms: 1,
            },
            Error::SaleEnded {
                pool: pool.clone(),
                ends_at_ms: 1,
            },
            Error::InsufficientStock {
                pool: pool.clone(),
                available: 1,
                requested: 2,
            },
            Error::UserLimitExceeded {
                pool: pool.clone(),
                limit: 1,
                used: 1,
                requested: 1,
            },
            Error::TotalBelowCommitted {
                pool: pool.clone(),
                total: 1,
                committed: 2,
            },
            Error::SegmentsFixed {
                pool: pool.clone(),
                segments: 1,
                requested: 2,
            },
            Error::PoolHasActiveHolds {
                pool: pool.clone(),
                held: 1,
            },
            Error::PoolDeleted { pool },
            Error::HoldNotFound {
                hold_id: hold_id.clone(),
            },
            Error::HoldIdConflict {
                hold_id: hold_id.clone(),
            },
            Error::HoldExpired {
                hold_id: hold_id.clone(),
            },
            Error::HoldReleased {
                hold_id: hold_id.clone(),
            },
            Error::HoldConfirmed {
                hold_id: hold_id.clone(),
            },
            Error::HoldRefunded {
                hold_id: hold_id.clone(),
            },
            Error::HoldNotConfirmed { hold_id },
            Error::RequestIdConflict {
                request_id: stockd_core::RequestId::parse("r").unwrap(),
                pool: PoolId::parse("p").unwrap(),
                delta: 1,
            },
            Error::LockHeld { expires_at_ms: 1 },
            Error::NotLockOwner,
            Error::EventsExpired {
                after: 1,
                oldest_seq: 3,
            },
        ];
        for error in &core {
            // Exhaustive: a new core error does not compile until it has a sample above.
            match error {
                Error::InvalidRequest { .. }
                | Error::PoolNotFound { .. }
                | Error::UserRequired { .. }
                | Error::SaleNotStarted { .. }
                | Error::SaleEnded { .. }
                | Error::InsufficientStock { .. }
                | Error::UserLimitExceeded { .. }
                | Error::TotalBelowCommitted { .. }
                | Error::SegmentsFixed { .. }
                | Error::PoolHasActiveHolds { .. }
                | Error::PoolDeleted { .. }
                | Error::HoldNotFound { .. }
                | Error::HoldIdConflict { .. }
                | Error::HoldExpired { .. }
                | Error::HoldReleased { .. }
                | Error::HoldConfirmed { .. }
                | Error::HoldRefunded { .. }
                | Error::HoldNotConfirmed { .. }
                | Error::RequestIdConflict { .. }
                | Error::LockHeld { .. }
                | Error::NotLockOwner
                | Error::EventsExpired { .. } => {}
            }
        }
        let mut samples: Vec<ApiError> = core.into_iter().map(ApiError::Core).collect();
        samples.extend([
            ApiError::InvalidJson("x".into()),
            ApiError::PayloadTooLarge { limit_bytes: 1 },
            ApiError::RequestTimeout { timeout_ms: 1 },
            ApiError::NotFound {
                tried: "GET /x".into(),
                advice: "x".into(),
            },
            ApiError::MethodNotAllowed,
            ApiError::Unauthorized,
            ApiError::Forbidden,
            ApiError::BackendUnavailable("x".into()),
            ApiError::PartitionRequired { partitions: 2 },
        ]);
        for sample in &samples {
            match sample {
                ApiError::Core(_)
                | ApiError::InvalidJson(_)
                | ApiError::PayloadTooLarge { .. }
                | ApiError::RequestTimeout { .. }
                | ApiError::NotFound { .. }
                | ApiError::MethodNotAllowed
                | ApiError::Unauthorized
                | ApiError::Forbidden
                | ApiError::BackendUnavailable(_)
                | ApiError::PartitionRequired { .. } => {}
            }
        }
        samples
    }

    /// Each error schema has the status and exactly the fields the server's error body has.
    #[test]
    fn error_schemas_match_the_error_bodies_on_the_wire() {
        let document = document_json();
        let schemas = &document["components"]["schemas"];
        let mut sent = Vec::new();
        for sample in samples() {
            let code = sample.code();
            sent.push(code);
            let spec = error_spec(code).unwrap_or_else(|| panic!("{code} is not documented"));
            assert_eq!(sample.status().as_u16(), spec.status, "{code}");
            let body = serde_json::to_value(&sample).unwrap();
            let mut on_the_wire: Vec<&str> = body
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            on_the_wire.sort();
            let schema = &schemas[error_schema_name(code)];
            let mut documented: Vec<&str> = vec!["message"];
            documented.extend(
                schema["allOf"][1]["properties"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str),
            );
            documented.sort();
            assert_eq!(on_the_wire, documented, "{code}");
            for required in schema["allOf"][1]["required"].as_array().unwrap() {
                assert!(
                    !body[required.as_str().unwrap()].is_null(),
                    "{code} {required}"
                );
            }
        }
        for spec in all_errors() {
            assert!(
                sent.contains(&spec.code),
                "{}: documented, but never sent",
                spec.code
            );
        }
        assert_eq!(
            schemas["ErrorBody"]["required"],
            json!(["error", "message"])
        );
    }

    fn schema_of<'a>(document: &'a Value, name: &str, property: &str) -> &'a Value {
        let schema = &document["components"]["schemas"][name]["properties"][property];
        assert!(schema.is_object(), "{name}.{property}");
        schema
    }

    fn range(schema: &Value) -> (i128, i128) {
        (
            schema["minimum"]
                .as_i64()
                .map(i128::from)
                .unwrap_or_else(|| i128::from(schema["minimum"].as_u64().unwrap())),
            i128::from(schema["maximum"].as_u64().unwrap()),
        )
    }

    fn pool_id() -> PoolId {
        PoolId::parse("p").unwrap()
    }

    fn reserve(qty: u64, items: usize, ttl_ms: u64, wait_ms: u64) -> Command {
        Command::Reserve(ReserveRequest {
            hold_id: HoldId::parse("h").unwrap(),
            user: None,
            items: (0..items)
                .map(|index| HoldItem {
                    pool: PoolId::parse(&format!("p{index}")).unwrap(),
                    qty,
                })
                .collect(),
            ttl_ms,
            confirm: false,
            wait_ms,
        })
    }

    fn put_pool(
        total: u64,
        per_user_limit: Option<u64>,
        time: Option<u64>,
        threshold: Option<u64>,
    ) -> Command {
        put_pool_in(total, per_user_limit, time, threshold, None)
    }

    fn put_pool_in(
        total: u64,
        per_user_limit: Option<u64>,
        time: Option<u64>,
        threshold: Option<u64>,
        segments: Option<u64>,
    ) -> Command {
        Command::PutPool {
            pool: pool_id(),
            spec: PoolSpec {
                total,
                per_user_limit,
                starts_at_ms: time,
                ends_at_ms: time,
                low_stock_threshold: threshold,
            },
            segments,
            if_absent: false,
        }
    }

    fn acquire(ttl_ms: u64, wait_ms: u64) -> Command {
        Command::LockAcquire(LockRequest {
            name: LockName::parse("l").unwrap(),
            owner: OwnerId::parse("o").unwrap(),
            ttl_ms,
            wait_ms,
        })
    }

    /// The documented range of every bounded field is exactly what `Command::validate` accepts:
    /// the bounds pass, one past them fails.
    #[test]
    fn documented_ranges_are_the_ones_the_core_enforces() {
        let document = document_json();
        type Make = Box<dyn Fn(u64) -> Command>;
        let cases: Vec<(&str, &str, Make)> = vec![
            (
                "PoolBody",
                "total",
                Box::new(|v| put_pool(v, None, None, None)),
            ),
            (
                "PoolBody",
                "per_user_limit",
                Box::new(|v| put_pool(1, Some(v), None, None)),
            ),
            (
                "PoolBody",
                "starts_at_ms",
                Box::new(|v| put_pool(1, None, Some(v), None)),
            ),
            (
                "PoolBody",
                "low_stock_threshold",
                Box::new(|v| put_pool(1, None, None, Some(v))),
            ),
            (
                "PoolBody",
                "segments",
                Box::new(|v| put_pool_in(1, None, None, None, Some(v))),
            ),
            ("HoldItem", "qty", Box::new(|v| reserve(v, 1, 1_000, 0))),
            ("HoldBody", "ttl_ms", Box::new(|v| reserve(1, 1, v, 0))),
            ("HoldBody", "wait_ms", Box::new(|v| reserve(1, 1, 1_000, v))),
            (
                "ExtendBody",
                "ttl_ms",
                Box::new(|v| Command::Extend {
                    hold_id: HoldId::parse("h").unwrap(),
                    ttl_ms: v,
                }),
            ),
            ("LockAcquireBody", "ttl_ms", Box::new(|v| acquire(v, 0))),
            ("LockAcquireBody", "wait_ms", Box::new(|v| acquire(100, v))),
            (
                "LockRenewBody",
                "ttl_ms",
                Box::new(|v| Command::LockRenew {
                    name: LockName::parse("l").unwrap(),
                    owner: OwnerId::parse("o").unwrap(),
                    token: 1,
                    ttl_ms: v,
                }),
            ),
        ];
        for (schema, property, make) in cases {
            let (min, max) = range(schema_of(&document, schema, property));
            let (min, max) = (min as u64, max as u64);
            assert!(make(min).validate().is_ok(), "{schema}.{property} = {min}");
            assert!(make(max).validate().is_ok(), "{schema}.{property} = {max}");
            assert!(
                make(max + 1).validate().is_err(),
                "{schema}.{property} = {max} + 1"
            );
            if min > 0 {
                assert!(
                    make(min - 1).validate().is_err(),
                    "{schema}.{property} = {min} - 1"
                );
            }
        }
        // Items per hold.
        let items = schema_of(&document, "HoldBody", "items");
        let max = items["maxItems"].as_u64().unwrap() as usize;
        assert_eq!(items["minItems"], 1);
        assert!(reserve(1, 0, 1_000, 0).validate().is_err());
        assert!(reserve(1, max, 1_000, 0).validate().is_ok());
        assert!(reserve(1, max + 1, 1_000, 0).validate().is_err());
        // Restock delta: -max..=max, not 0.
        let delta = schema_of(&document, "RestockBody", "delta");
        let (min, max) = range(delta);
        assert_eq!(min, -max);
        assert_eq!(delta["not"], json!({"const": 0}));
        let restock = |delta: i64| Command::Restock {
            pool: pool_id(),
            delta,
            request_id: None,
        };
        let max = max as i64;
        assert!(restock(max).validate().is_ok() && restock(-max).validate().is_ok());
        assert!(restock(max + 1).validate().is_err() && restock(-max - 1).validate().is_err());
        assert!(restock(0).validate().is_err());
        // Batch ops.
        let ops = schema_of(&document, "BatchBody", "ops");
        assert_eq!(ops["minItems"], 1);
        assert_eq!(ops["maxItems"].as_u64(), Some(BATCH_OPS_MAX as u64));
        // List limits.
        let parameter = |path: &str, name: &str| -> Value {
            document["paths"][path]["get"]["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|parameter| parameter["name"] == name)
                .unwrap()["schema"]
                .clone()
        };
        let list = |limit: u64| Command::ListPools {
            prefix: String::new(),
            after: None,
            limit: limit as usize,
        };
        let (min, max) = range(&parameter("/v1/pools", "limit"));
        assert!(list(min as u64).validate().is_ok() && list(max as u64).validate().is_ok());
        assert!(
            list(min as u64 - 1).validate().is_err() && list(max as u64 + 1).validate().is_err()
        );
        assert_eq!(
            range(&parameter("/v1/events", "limit")),
            (1, EVENT_LIMIT_MAX as i128)
        );
        assert_eq!(
            range(&parameter("/v1/events", "wait_ms")),
            (0, WAIT_MS_MAX as i128)
        );
        let prefix = parameter("/v1/pools", "prefix");
        assert_eq!(prefix["maxLength"].as_u64(), Some(ID_LEN_MAX as u64));
    }

    /// A regex character class such as `A-Za-z0-9._:-`, as a byte predicate.
    fn in_class(class: &str, byte: u8) -> bool {
        let class = class.as_bytes();
        let mut index = 0;
        while index < class.len() {
            if index + 2 < class.len() && class[index + 1] == b'-' {
                if (class[index]..=class[index + 2]).contains(&byte) {
                    return true;
                }
                index += 3;
            } else {
                if class[index] == byte {
                    return true;
                }
                index += 1;
            }
        }
        false
    }

    /// Every identifier field and path id carries the grammar of `check_id`.
    #[test]
    fn identifiers_carry_the_core_grammar() {
        for byte in 0..=u8::MAX {
            assert_eq!(in_class(ID_BYTES, byte), is_id_byte(byte), "byte {byte}");
            let first = String::from_utf8(vec![byte]).unwrap_or_default();
            if !first.is_empty() {
                assert_eq!(
                    check_id(&first).is_ok(),
                    byte.is_ascii_alphanumeric(),
                    "first byte {byte}"
                );
            }
        }
        assert!(check_id(&"a".repeat(ID_LEN_MAX)).is_ok());
        assert!(check_id(&"a".repeat(ID_LEN_MAX + 1)).is_err());
        let id = |schema: &Value, what: &str| {
            assert_eq!(schema["pattern"], id_pattern(), "{what}");
            assert_eq!(schema["minLength"], 1, "{what}");
            assert_eq!(
                schema["maxLength"].as_u64(),
                Some(ID_LEN_MAX as u64),
                "{what}"
            );
        };
        let document = document_json();
        for (name, property) in [
            ("HoldBody", "hold_id"),
            ("HoldBody", "user"),
            ("HoldItem", "pool"),
            ("LockAcquireBody", "owner"),
            ("LockRenewBody", "owner"),
            ("LockReleaseBody", "owner"),
        ] {
            id(
                schema_of(&document, name, property),
                &format!("{name}.{property}"),
            );
        }
        for (method, path, operation) in operations(&document) {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                if parameter["in"] == "path" {
                    id(
                        &parameter["schema"],
                        &format!("{method} {path} {}", parameter["name"]),
                    );
                }
            }
        }
        for variant in document["components"]["schemas"]["BatchOp"]["oneOf"]
            .as_array()
            .unwrap()
        {
            let name = variant["$ref"]
                .as_str()
                .unwrap()
                .trim_start_matches("#/components/schemas/");
            let variant = &document["components"]["schemas"][name];
            id(
                &variant["properties"]["hold_id"],
                &format!("{name}.hold_id"),
            );
            assert_eq!(variant["additionalProperties"], false, "{name}");
        }
    }

    /// Request bodies refuse unknown fields, like the server; bodies of confirm, release and
    /// refund are optional, each a plain object schema (what generators handle: a union with
    /// `null` made openapi-python-client send its default argument, `UNSET`, as the body).
    #[test]
    fn request_bodies_are_closed_and_action_bodies_optional() {
        let document = document_json();
        for (name, _) in BODY_RULES {
            assert_eq!(
                document["components"]["schemas"][name]["additionalProperties"], false,
                "{name}"
            );
        }
        for (action, schema) in [
            ("confirm", "EmptyObject"),
            ("release", "EmptyObject"),
            ("refund", "RefundBody"),
        ] {
            let body = &document["paths"][format!("/v1/holds/{{hold_id}}/{action}")]["post"]
                ["requestBody"];
            assert_eq!(body["required"], false, "{action}");
            assert_eq!(
                body["content"]["application/json"]["schema"],
                json!({"$ref": format!("#/components/schemas/{schema}")}),
                "{action}"
            );
            assert!(
                body["description"].as_str().unwrap().contains("`null`"),
                "{action}"
            );
        }
    }

    /// No request field has a `default`: openapi-typescript types a field with one as required
    /// (its `defaultNonNullable`), so every reserve would have to pass `ttl_ms`, `confirm` and
    /// `wait_ms`. The default is in the description, from the same rule.
    #[test]
    fn request_fields_state_their_defaults_in_words() {
        let document = document_json();
        let schemas = &document["components"]["schemas"];
        for (name, rules) in BODY_RULES {
            for (property, rule) in *rules {
                let schema = &schemas[name]["properties"][property];
                assert!(schema.get("default").is_none(), "{name}.{property}");
                let default = match rule {
                    Rule::Int {
                        default: Some(value),
                        ..
                    } => value.to_string(),
                    Rule::Bool {
                        default: Some(value),
                    } => value.to_string(),
                    _ => continue,
                };
                let description = schema["description"].as_str().unwrap_or_default();
                assert!(
                    description.ends_with(&format!("Absent or null: {default}.")),
                    "{name}.{property}: {description}"
                );
            }
        }
        assert_eq!(schemas["HoldBody"]["required"], json!(["hold_id", "items"]));
    }

    /// A batch's ops are `BatchOp`s or anything else: an op is never refused with the batch
    /// (its result is its own 422), so the document calls no op invalid; only the count is.
    #[test]
    fn batch_ops_are_documented_as_the_server_answers_them() {
        let document = document_json();
        let schemas = &document["components"]["schemas"];
        let ops = &schemas["BatchBody"]["properties"]["ops"];
        assert_eq!(ops["minItems"], 1);
        assert_eq!(ops["maxItems"].as_u64(), Some(BATCH_OPS_MAX as u64));
        let items = ops["items"]["anyOf"].as_array().unwrap();
        assert_eq!(items[0], json!({"$ref": "#/components/schemas/BatchOp"}));
        // Anything: no type, no constraint.
        let anything: Vec<&String> = items[1].as_object().unwrap().keys().collect();
        assert_eq!(anything, ["description"]);
        let variants = schemas["BatchOp"]["oneOf"].as_array().unwrap();
        assert_eq!(variants.len(), BATCH_OPS.len());
        for (variant, (op, _)) in variants.iter().zip(BATCH_OPS) {
            let name = variant["$ref"]
                .as_str()
                .unwrap()
                .trim_start_matches("#/components/schemas/");
            assert_eq!(schemas[name]["properties"]["op"]["const"], *op, "{name}");
            assert_eq!(
                schemas["BatchOp"]["discriminator"]["mapping"][op],
                variant["$ref"]
            );
        }
        assert!(schemas["RefundOp"]["properties"]["restock"].is_object());
        assert_eq!(
            schemas["ExtendOp"]["required"],
            json!(["op", "hold_id", "ttl_ms"])
        );
    }
}
