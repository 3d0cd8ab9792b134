//! The OpenAPI document names exactly the fields each endpoint accepts, both ways. For every
//! documented operation the server's own decoders are asked what they take: a request with an
//! unknown query parameter or body field is refused with the list of the known ones, so the
//! answer is what the request types (`dto.rs`) and their deserialisers accept, not what anyone
//! wrote down. That list must be the document's: query parameters, body properties, the objects
//! nested in bodies (a hold's items) and every op of a batch. A field added to a request type and
//! not to the document, or to the document and not to the server, fails here; so does a body the
//! document calls optional that the server requires, or the other way round.

mod support;

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use serde_json::{json, Map, Value};
use support::*;

/// The name of a field or parameter no request type has.
const PROBE: &str = "zz_probe";

type Names = BTreeSet<String>;

/// The names a refusal of the unknown [`PROBE`] lists: `unknown field "zz_probe": the fields
/// are a, b` (or `this object takes no fields`), worded the same for query parameters.
fn known_names(message: &str, what: &str) -> Names {
    let marker = format!("{PROBE:?}: ");
    let Some(at) = message.find(&marker) else {
        panic!("{what}: the server did not refuse the unknown {PROBE}: {message}");
    };
    let rest = &message[at + marker.len()..];
    if rest.starts_with("this object takes no fields")
        || rest.starts_with("this route takes no query parameters")
    {
        return Names::new();
    }
    let list = rest
        .strip_prefix("the fields are ")
        .or_else(|| rest.strip_prefix("the parameters are "))
        .unwrap_or_else(|| panic!("{what}: no list of the known names in {message:?}"));
    list.split(", ").map(str::to_string).collect()
}

/// `schema`, with a `$ref` followed into the document's components.
fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(reference) => {
            let name = reference
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("not a component: {reference}"));
            let component = &document["components"]["schemas"][name];
            assert!(component.is_object(), "{reference} is not in the document");
            component
        }
        None => schema,
    }
}

fn property_names(schema: &Value) -> Names {
    schema["properties"]
        .as_object()
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// One step from a body to a nested object: into a field, or into the first entry of a list.
#[derive(Clone, Debug)]
enum Step {
    Field(String),
    First,
}

/// `inner` placed at `path` in an otherwise empty body.
fn nest(path: &[Step], inner: Value) -> Value {
    path.iter().rev().fold(inner, |value, step| match step {
        Step::Field(name) => {
            let mut object = Map::new();
            object.insert(name.clone(), value);
            Value::Object(object)
        }
        Step::First => Value::Array(vec![value]),
    })
}

/// Where a probe goes and how its refusal comes back: the single endpoint's body, or one op of
/// a batch (whose refusal is its result, inside the 200).
#[derive(Clone, Copy)]
enum Door<'a> {
    Body,
    BatchOp(&'a str),
}

struct Prober<'a> {
    router: &'a stockd_server::Api,
    document: &'a Value,
    method: Method,
    uri: String,
    what: String,
}

impl Prober<'_> {
    /// The names the server's decoder knows for the object at `path` of the body.
    async fn server_names(&self, door: Door<'_>, path: &[Step]) -> Names {
        let inner = nest(path, json!({ PROBE: 1 }));
        let (body, where_) = match door {
            Door::Body => (inner, self.what.clone()),
            Door::BatchOp(op) => {
                let mut op_fields = inner;
                op_fields
                    .as_object_mut()
                    .expect("an op is an object")
                    .insert("op".into(), json!(op));
                (
                    json!({ "ops": [op_fields] }),
                    format!("{} op {op}", self.what),
                )
            }
        };
        let where_ = format!("{where_} at {path:?}");
        let answer = send(
            self.router,
            self.method.clone(),
            &self.uri,
            None,
            body.to_string(),
        )
        .await;
        let refusal = match door {
            Door::Body => {
                assert_eq!(
                    answer.status,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "{where_}: {}",
                    answer.text()
                );
                answer.json()
            }
            Door::BatchOp(_) => {
                assert_eq!(answer.status, StatusCode::OK, "{where_}: {}", answer.text());
                let result = answer.json()["results"][0].clone();
                assert_eq!(result["status"], 422, "{where_}: {result}");
                result["body"].clone()
            }
        };
        known_names(refusal["message"].as_str().unwrap_or_default(), &where_)
    }

    /// Compares the object schema `schema`, found at `path` of the body, with what the server
    /// takes there, and every object nested in it.
    async fn compare(&self, door: Door<'_>, path: Vec<Step>, schema: &Value, skip: &[&str]) {
        let schema = resolve(self.document, schema);
        let mut documented = property_names(schema);
        for name in skip {
            documented.remove(*name);
        }
        let accepted = self.server_names(door, &path).await;
        assert_eq!(
            documented,
            accepted,
            "{} {door_name} at {path:?}: the document's fields (left) are not the ones the \
             server takes (right)",
            self.what,
            door_name = match door {
                Door::Body => "body".to_string(),
                Door::BatchOp(op) => format!("op {op}"),
            }
        );
        // The server refuses unknown fields: the document must say so.
        assert_eq!(
            schema["additionalProperties"],
            json!(false),
            "{} at {path:?}: the schema is not closed",
            self.what
        );
        for name in &documented {
            let property = resolve(self.document, &schema["properties"][name]);
            let mut nested = path.clone();
            nested.push(Step::Field(name.clone()));
            if property["properties"].is_object() {
                Box::pin(self.compare(door, nested, property, &[])).await;
            } else if property["items"].is_object() {
                let items = resolve(self.document, &property["items"]);
                if items["properties"].is_object() {
                    nested.push(Step::First);
                    Box::pin(self.compare(door, nested, items, &[])).await;
                }
            }
        }
    }
}

/// Every documented operation's query parameters and body fields, nested objects included, are
/// exactly the ones its decoders take; a batch's ops too, one by one.
#[tokio::test]
async fn the_document_names_every_field_each_endpoint_accepts() {
    let (_, router) = open_server();
    let document = serde_json::to_value(stockd_server::openapi()).unwrap();
    let mut operations = 0;
    let mut bodies = 0;
    let mut batch_ops = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            operations += 1;
            let method: Method = method.to_uppercase().parse().unwrap();
            let what = format!("{method} {path}");
            let uri = path
                .replace("{pool}", "p")
                .replace("{hold_id}", "h")
                .replace("{name}", "l");

            // Query parameters.
            let answer = send(
                &router,
                method.clone(),
                &format!("{uri}?{PROBE}=1"),
                None,
                Vec::new(),
            )
            .await;
            assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY, "{what}");
            let accepted = known_names(answer.json()["message"].as_str().unwrap(), &what);
            let documented: Names = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|parameter| parameter["in"] == "query")
                .map(|parameter| parameter["name"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(documented, accepted, "{what}: query parameters");

            // The body.
            let prober = Prober {
                router: &router,
                document: &document,
                method: method.clone(),
                uri: uri.clone(),
                what: what.clone(),
            };
            let request_body = &operation["requestBody"];
            let Some(schema) = request_body["content"]["application/json"]["schema"].as_object()
            else {
                // No body documented: the endpoint reads none, so it refuses no field.
                assert!(
                    request_body.is_null(),
                    "{what}: a body without a JSON schema"
                );
                let answer = send(
                    &router,
                    method.clone(),
                    &uri,
                    None,
                    json!({ PROBE: 1 }).to_string(),
                )
                .await;
                assert!(
                    !answer.text().contains(PROBE),
                    "{what}: the server reads a body the document does not have: {}",
                    answer.text()
                );
                continue;
            };
            bodies += 1;
            let schema = Value::Object(schema.clone());
            prober.compare(Door::Body, Vec::new(), &schema, &[]).await;

            // Required or optional, as the server reads an empty body and `null`.
            let required = request_body["required"] == json!(true);
            for empty in ["", "null"] {
                let answer = send(&router, method.clone(), &uri, None, empty).await;
                let refused = ["invalid_json", "invalid_request"].contains(&answer.code().as_str());
                assert_eq!(
                    refused,
                    required,
                    "{what}: body {empty:?} answered {} {}, the document says required: {required}",
                    answer.status,
                    answer.text()
                );
            }

            // A batch: the ops the server knows, and each op's fields.
            let resolved = resolve(&document, &schema);
            let ops_items = &resolved["properties"]["ops"]["items"];
            if ops_items.is_null() {
                continue;
            }
            let batch_op = resolve(&document, &ops_items["anyOf"][0]);
            let mut documented_ops = Names::new();
            for variant in batch_op["oneOf"].as_array().expect("BatchOp is a oneOf") {
                let variant = resolve(&document, variant);
                let op = variant["properties"]["op"]["const"]
                    .as_str()
                    .expect("each op variant names its op")
                    .to_string();
                prober
                    .compare(Door::BatchOp(&op), Vec::new(), variant, &["op"])
                    .await;
                documented_ops.insert(op);
                batch_ops += 1;
            }
            let answer = post(&router, &uri, json!({"ops": [{"op": PROBE}]})).await;
            let message = answer.json()["results"][0]["body"]["message"]
                .as_str()
                .unwrap()
                .to_string();
            let known = message
                .split_once("the ops are ")
                .unwrap_or_else(|| panic!("{what}: {message}"))
                .1;
            let known: Names = known.split(", ").map(str::to_string).collect();
            assert_eq!(documented_ops, known, "{what}: the ops");
        }
    }
    // The walk reached what it is for.
    assert!(operations >= 20, "{operations} operations");
    assert!(bodies >= 10, "{bodies} bodies");
    assert_eq!(batch_ops, 5);
}

/// The probe reads the server's lists as the server words them: a field the document lacks
/// would show in the server's list and fail the comparison.
#[test]
fn known_names_reads_the_refusals() {
    assert_eq!(
        known_names(
            "items[0]: unknown field \"zz_probe\": the fields are pool, qty",
            "t"
        ),
        Names::from(["pool".to_string(), "qty".to_string()])
    );
    assert_eq!(
        known_names(
            "unknown query parameter \"zz_probe\": this route takes no query parameters",
            "t"
        ),
        Names::new()
    );
    assert_eq!(
        known_names(
            "unknown field \"zz_probe\": this object takes no fields",
            "t"
        ),
        Names::new()
    );
}
