//! Benchmark baseline, not part of stockd: the leanest axum JSON handler (parse the same hold
//! body, answer a small JSON object, no state, no log). `scripts/bench-http.sh` runs it under
//! the same wrk load as stockd to show what the HTTP stack alone costs on this machine.
//! Run: `cargo run --release -p stockd-server --example bare_axum -- 127.0.0.1:7171`.

use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
#[allow(dead_code)]
struct Item {
    pool: String,
    qty: u64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Hold {
    hold_id: String,
    items: Vec<Item>,
    confirm: Option<bool>,
}

#[derive(Serialize)]
struct Answer {
    hold_id: String,
    status: &'static str,
}

async fn hold(Json(hold): Json<Hold>) -> Json<Answer> {
    Json(Answer {
        hold_id: hold.hold_id,
        status: "confirmed",
    })
}

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7171".into());
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
    let app = Router::new().route("/v1/holds", post(hold));
    axum::serve(listener, app).await.expect("serve");
}
