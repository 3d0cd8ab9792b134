//! The request bodies a client sends (`stockd_api::wire`) are the ones the OpenAPI document
//! describes. The server reads requests with its own strict types (`dto.rs`, which
//! `openapi_fields.rs` holds to the document); the contract's request bodies are the client's
//! side of the same shapes. Each is written here with every field set, and its fields must be
//! exactly the document's properties of the body of that name (and of a hold's items); written
//! with none of its optional fields, it must still carry every field the document requires.

use serde::Serialize;
use serde_json::{json, Value};
use stockd_api::wire::{
    BatchBody, ExtendBody, HoldBody, HoldItem, LockAcquireBody, LockReleaseBody, LockRenewBody,
    PoolBody, RefundBody, RestockBody,
};

fn fields(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body
        .as_object()
        .expect("a body is a JSON object")
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

fn documented(schemas: &Value, name: &str, key: &str) -> Vec<String> {
    let mut names: Vec<String> = match &schemas[name][key] {
        Value::Object(properties) => properties.keys().cloned().collect(),
        Value::Array(required) => required
            .iter()
            .map(|name| name.as_str().unwrap().to_string())
            .collect(),
        Value::Null => Vec::new(),
        other => panic!("{name}.{key} is neither a map nor a list: {other}"),
    };
    names.sort();
    names
}

/// `full` sets every field, `minimal` none of the optional ones.
fn check(schemas: &Value, name: &str, full: impl Serialize, minimal: impl Serialize) {
    let full = serde_json::to_value(full).unwrap();
    let minimal = serde_json::to_value(minimal).unwrap();
    assert_eq!(
        fields(&full),
        documented(schemas, name, "properties"),
        "{name}: the client writes other fields than the document describes"
    );
    let written = fields(&minimal);
    for required in documented(schemas, name, "required") {
        assert!(
            written.contains(&required),
            "{name}: the document requires {required:?}, a minimal body leaves it out: {minimal}"
        );
    }
}

#[test]
fn the_client_sends_the_bodies_the_document_describes() {
    let document = serde_json::to_value(stockd_server::openapi()).unwrap();
    let schemas = &document["components"]["schemas"];
    let pool = PoolBody {
        total: 10,
        per_user_limit: Some(2),
        starts_at_ms: Some(1),
        ends_at_ms: Some(2),
        low_stock_threshold: Some(3),
        segments: Some(4),
    };
    check(schemas, "PoolBody", pool, PoolBody::with_total(10));
    let restock = |request_id: Option<&str>| RestockBody {
        delta: 5,
        request_id: request_id.map(str::to_string),
    };
    check(schemas, "RestockBody", restock(Some("r-1")), restock(None));
    let item = HoldItem::new("sku-1", 1);
    let reserve = HoldBody {
        hold_id: "o-1".into(),
        user: Some("u-1".into()),
        items: vec![item.clone()],
        ttl_ms: Some(60_000),
        confirm: true,
        wait_ms: Some(100),
    };
    let minimal = HoldBody {
        hold_id: "o-1".into(),
        items: vec![item.clone()],
        ..HoldBody::default()
    };
    check(schemas, "HoldBody", reserve, minimal);
    check(schemas, "HoldItem", &item, &item);
    check(
        schemas,
        "ExtendBody",
        ExtendBody { ttl_ms: 5_000 },
        ExtendBody { ttl_ms: 5_000 },
    );
    check(
        schemas,
        "RefundBody",
        RefundBody { restock: false },
        RefundBody { restock: true },
    );
    let batch = || BatchBody {
        ops: vec![json!({"op": "confirm", "hold_id": "o-1"})],
    };
    check(schemas, "BatchBody", batch(), batch());
    let acquire = |wait_ms: Option<u64>| LockAcquireBody {
        owner: "w-1".into(),
        ttl_ms: 1_000,
        wait_ms,
    };
    check(schemas, "LockAcquireBody", acquire(Some(10)), acquire(None));
    let renew = || LockRenewBody {
        owner: "w-1".into(),
        token: 1,
        ttl_ms: 1_000,
    };
    check(schemas, "LockRenewBody", renew(), renew());
    let release = || LockReleaseBody {
        owner: "w-1".into(),
        token: 1,
    };
    check(schemas, "LockReleaseBody", release(), release());
}
