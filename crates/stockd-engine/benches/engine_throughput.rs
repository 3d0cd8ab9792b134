//! In-process throughput: reserve-and-confirm holds on one hot pool, in batches.
//!
//! Two measurements in the same process, so their ratio means something on a noisy machine:
//! `core` runs the pure state machine alone (no log, no threads: the ceiling), `engine` runs the
//! embedded engine with its write-ahead log fsync'd (group commit) and 4 concurrent submitters.
//! Run: `cargo bench -p stockd-engine --bench engine_throughput`.

// The allocator the stockd binary uses, so the figures match production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use stockd_core::{Command, Effects, State, StateConfig};

use hot_pool::{engine_without_snapshots, put_pool};

mod hot_pool;

const BATCH: usize = 1_000;
const SUBMITTERS: usize = 4;

fn claim(n: u64) -> Command {
    hot_pool::claim(&format!("order-{n}"), None)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("reserve_confirm");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));

    let mut state = State::new(StateConfig::default());
    let mut effects = Effects::default();
    state.execute(put_pool(), 1, &mut effects);
    let mut next = 0u64;
    group.bench_function("core", |b| {
        b.iter_custom(|iters| {
            let batches: Vec<Vec<Command>> = (0..iters)
                .map(|_| {
                    (0..BATCH)
                        .map(|_| {
                            next += 1;
                            claim(next)
                        })
                        .collect()
                })
                .collect();
            let start = Instant::now();
            for batch in batches {
                for command in batch {
                    state.execute(command, 1_000, &mut effects);
                }
                effects.clear();
            }
            start.elapsed()
        })
    });

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (engine, _dir) = engine_without_snapshots();
    runtime.block_on(engine.execute(vec![put_pool()])).unwrap();
    let next = Arc::new(AtomicU64::new(0));
    group.bench_function("engine_wal", |b| {
        b.iter_custom(|iters| {
            let per_submitter = iters.div_ceil(SUBMITTERS as u64);
            let batches: Vec<Vec<Vec<Command>>> = (0..SUBMITTERS)
                .map(|_| {
                    (0..per_submitter)
                        .map(|_| {
                            (0..BATCH)
                                .map(|_| claim(next.fetch_add(1, Ordering::Relaxed)))
                                .collect()
                        })
                        .collect()
                })
                .collect();
            let start = Instant::now();
            runtime.block_on(async {
                let tasks: Vec<_> = batches
                    .into_iter()
                    .map(|mine| {
                        let engine = engine.clone();
                        tokio::spawn(async move {
                            for batch in mine {
                                let outcomes = engine.execute(batch).await.unwrap();
                                assert!(outcomes.iter().all(|o| o.is_ok()));
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
            });
            // Scale to the iterations asked for (the last round may have done a few more).
            start
                .elapsed()
                .mul_f64(iters as f64 / (per_submitter * SUBMITTERS as u64) as f64)
        })
    });
    group.finish();
    runtime.block_on(engine.shutdown());
}

criterion_group!(benches, bench);
criterion_main!(benches);
