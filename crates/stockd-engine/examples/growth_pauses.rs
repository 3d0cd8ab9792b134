//! The longest pauses of the embedded engine while its state grows: one submitter sends
//! batches of 1,000 reserve+confirm commands on one pool until `HOLDS` (default 4,000,000)
//! holds exist, the log fsync'd as in production, and every batch that took over 30 ms is
//! printed with the hold count it ended at. Growing tables (the hold table, the retention
//! queues) show up here as pauses at the counts where they grow.
//!
//! Run: `cargo run --release -p stockd-engine --example growth_pauses [HOLDS]`.

// The allocator the stockd binary uses, so the figures match production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use stockd_core::Command;

use hot_pool::{engine_without_snapshots, put_pool};

#[path = "../benches/hot_pool/mod.rs"]
mod hot_pool;

const BATCH: u64 = 1_000;
const REPORTED: Duration = Duration::from_millis(30);

fn claim(n: u64) -> Command {
    hot_pool::claim(&format!("order-{n}"), None)
}

fn main() {
    let holds: u64 = match std::env::args().nth(1) {
        Some(arg) => arg.parse().expect("HOLDS must be a number"),
        None => 4_000_000,
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // Snapshots are a pause of their own kind (another thread); this measures growth alone.
    let (engine, _dir) = engine_without_snapshots();
    runtime.block_on(async {
        engine.execute(vec![put_pool()]).await.expect("pool");
        let started = Instant::now();
        let (mut longest, mut reported) = (Duration::ZERO, 0);
        let mut made = 0;
        while made < holds {
            let batch: Vec<Command> = (made..made + BATCH).map(claim).collect();
            let sent = Instant::now();
            engine.execute(batch).await.expect("batch");
            let took = sent.elapsed();
            made += BATCH;
            longest = longest.max(took);
            if took > REPORTED {
                reported += 1;
                println!(
                    "{made:>10} holds at {:>6.2} s: batch took {:.1} ms",
                    started.elapsed().as_secs_f64(),
                    took.as_secs_f64() * 1e3
                );
            }
        }
        println!(
            "{made} holds in {:.1} s ({:.0} holds/s); longest batch {:.1} ms; {reported} over {} ms",
            started.elapsed().as_secs_f64(),
            made as f64 / started.elapsed().as_secs_f64(),
            longest.as_secs_f64() * 1e3,
            REPORTED.as_millis()
        );
        engine.shutdown().await;
    });
}
