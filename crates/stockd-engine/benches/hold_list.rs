//! Listing holds (`GET /v1/holds`) on a pool with 1,000,000 retained holds, in process.
//!
//! One state with a million confirmed holds on one pool (ids `order-0000000` ...), then criterion
//! times one page of 100 at the start, after 500,000 and after 900,000 holds (the cost must not
//! grow with the cursor's position), unfiltered, by pool, by user, and with a status that no hold
//! has (the page examines its bound of index entries and answers an empty page with a next).
//! Run: `cargo bench -p stockd-engine --bench hold_list`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use stockd_core::{Command, Effects, HoldStatus, PoolId, Reply, State, StateConfig, Step, UserId};

use hot_pool::{claim, put_pool};

mod hot_pool;

const HOLDS: u64 = 1_000_000;
const USERS: u64 = 1_000;
const PAGE: usize = 100;

fn hold_id(n: u64) -> String {
    format!("order-{n:07}")
}

fn filled_state() -> State {
    let mut state = State::new(StateConfig::default());
    let mut effects = Effects::default();
    state.execute(put_pool(), 1, &mut effects);
    let started = Instant::now();
    for n in 0..HOLDS {
        effects.clear();
        let user = format!("user-{}", n % USERS);
        state.execute(claim(&hold_id(n), Some(&user)), 2, &mut effects);
    }
    eprintln!(
        "{} retained holds made in {:.1} s",
        state.hold_count(),
        started.elapsed().as_secs_f64()
    );
    state
}

fn list(
    pool: Option<&str>,
    user: Option<&str>,
    status: Option<HoldStatus>,
    after: Option<u64>,
) -> Command {
    Command::ListHolds {
        pool: pool.map(|p| PoolId::parse(p).unwrap()),
        user: user.map(|u| UserId::parse(u).unwrap()),
        status,
        after: after.map(hold_id),
        limit: PAGE,
    }
}

fn bench(c: &mut Criterion) {
    let mut state = filled_state();
    let mut effects = Effects::default();
    let mut page = |state: &mut State, command: Command| -> (usize, bool) {
        effects.clear();
        match state.execute(command, 3, &mut effects) {
            Step::Done(Ok(Reply::HoldList { holds, next })) => (holds.len(), next.is_some()),
            other => panic!("expected a page, got {other:?}"),
        }
    };
    // What each page answers, so the timings below are of real pages.
    assert_eq!(
        page(&mut state, list(Some("hot"), None, None, Some(900_000))),
        (PAGE, true)
    );
    assert_eq!(
        page(
            &mut state,
            list(Some("hot"), None, Some(HoldStatus::Refunded), None)
        ),
        (0, true)
    );
    assert_eq!(
        page(&mut state, list(None, Some("user-7"), None, None)),
        (PAGE, true)
    );

    let mut group = c.benchmark_group("hold_list_1m");
    group.sample_size(50);
    group.measurement_time(Duration::from_secs(3));
    for (name, after) in [
        ("start", None),
        ("after_500k", Some(500_000)),
        ("after_900k", Some(900_000)),
    ] {
        group.bench_function(format!("pool_{name}"), |b| {
            b.iter(|| page(&mut state, list(Some("hot"), None, None, after)))
        });
        group.bench_function(format!("all_{name}"), |b| {
            b.iter(|| page(&mut state, list(None, None, None, after)))
        });
    }
    group.bench_function("user_after_500k", |b| {
        b.iter(|| page(&mut state, list(None, Some("user-7"), None, Some(500_000))))
    });
    group.bench_function("pool_status_none_match_start", |b| {
        b.iter(|| {
            page(
                &mut state,
                list(Some("hot"), None, Some(HoldStatus::Refunded), None),
            )
        })
    });
    group.bench_function("pool_status_none_match_after_900k", |b| {
        b.iter(|| {
            page(
                &mut state,
                list(Some("hot"), None, Some(HoldStatus::Refunded), Some(900_000)),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
