//! The reserve+confirm path, for counting instructions: `HOLDS` (default 200,000) confirmed
//! holds on one pool, in batches of 1,000, either through the pure state machine (`core`) or
//! through the embedded engine with its write-ahead log (`engine`: the writer decides, encodes
//! and hands the feed its events; one submitter). `scripts/bench-instructions.sh` runs it under
//! callgrind and counts what `State::execute` and `Writer::decide_batch` cost per hold: a figure
//! this shared machine's noise cannot move, unlike the throughput benches.
//!
//! Ids are `PREFIX` and the hold's number, unpadded: `order-` by default; give the prefix stockd
//! bench uses (`bench-` and 12 hex digits and `-`) to count ids that share more than the hold
//! index's 16-byte heads, as shops' order numbers often do.
//!
//! Run: `cargo run --release -p stockd-engine --example hold_path -- core|engine [HOLDS [PREFIX]]`.

// The allocator the stockd binary uses, so the figures match production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use stockd_core::{Command, Effects, State, StateConfig};

use hot_pool::{engine_without_snapshots, put_pool};

#[path = "../benches/hot_pool/mod.rs"]
mod hot_pool;

const BATCH: u64 = 1_000;

fn claim(prefix: &str, n: u64) -> Command {
    hot_pool::claim(&format!("{prefix}{n}"), None)
}

fn batches(holds: u64, prefix: &str) -> impl Iterator<Item = Vec<Command>> + '_ {
    (0..holds.div_ceil(BATCH)).map(move |b| {
        (b * BATCH..(b + 1) * BATCH)
            .map(|n| claim(prefix, n))
            .collect()
    })
}

fn core(holds: u64, prefix: &str) {
    let mut state = State::new(StateConfig::default());
    let mut effects = Effects::default();
    state.execute(put_pool(), 1, &mut effects);
    for batch in batches(holds, prefix) {
        for command in batch {
            state.execute(command, 1_000, &mut effects);
        }
        effects.clear();
    }
    assert_eq!(state.hold_count() as u64, holds.div_ceil(BATCH) * BATCH);
}

fn engine(holds: u64, prefix: &str) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (engine, _dir) = engine_without_snapshots();
    runtime.block_on(async {
        engine.execute(vec![put_pool()]).await.expect("pool");
        for batch in batches(holds, prefix) {
            let outcomes = engine.execute(batch).await.expect("batch");
            assert!(outcomes.iter().all(Result::is_ok));
        }
        engine.shutdown().await;
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "core".to_string());
    let holds: u64 = match args.next() {
        Some(arg) => arg.parse().expect("HOLDS must be a number"),
        None => 200_000,
    };
    let prefix = args.next().unwrap_or_else(|| "order-".to_string());
    match mode.as_str() {
        "core" => core(holds, &prefix),
        "engine" => engine(holds, &prefix),
        other => panic!("mode must be core or engine, not {other:?}"),
    }
}
