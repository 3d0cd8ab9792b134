//! Memory per retained hold: resident set growth of the pure state while it takes 1,000,000
//! confirmed holds (1 item, 12-byte ids, one user each), measured from /proc/self/statm; and
//! the time to encode them as a snapshot (work of the snapshot thread, not the writer).
//! Run: `cargo bench -p stockd-engine --bench hold_memory`.

// The allocator the stockd binary uses, so the figures match production.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use stockd_core::{
    Command, Effects, HoldId, HoldItem, PoolId, PoolSpec, ReserveRequest, State, StateConfig,
    UserId,
};

const HOLDS: u64 = 1_000_000;

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    // Arguments from `cargo bench` (such as --bench) are ignored.
    let mut state = State::new(StateConfig::default());
    let mut effects = Effects::default();
    let pool = PoolId::parse("sku-1").unwrap();
    state.execute(
        Command::PutPool {
            pool: pool.clone(),
            spec: PoolSpec {
                total: 10 * HOLDS,
                ..PoolSpec::default()
            },
            segments: None,
            if_absent: false,
        },
        1,
        &mut effects,
    );
    let before = resident_bytes();
    for n in 0..HOLDS {
        let command = Command::Reserve(ReserveRequest {
            hold_id: HoldId::parse(&format!("o-{n:010}")).unwrap(),
            user: Some(UserId::parse(&format!("u-{n:010}")).unwrap()),
            items: vec![HoldItem {
                pool: pool.clone(),
                qty: 1,
            }]
            .into(),
            ttl_ms: 600_000,
            confirm: true,
            wait_ms: 0,
        });
        state.execute(command, 1_000, &mut effects);
        effects.clear();
    }
    let after = resident_bytes();
    assert_eq!(state.hold_count() as u64, HOLDS);
    // Encoding cost of a snapshot of this state: paid by the snapshot thread, not the writer.
    let started = std::time::Instant::now();
    let encoded = postcard::to_allocvec(state.snapshot()).expect("encode");
    let encode_ms = started.elapsed().as_secs_f64() * 1e3;
    println!(
        "hold_memory: {HOLDS} confirmed holds, resident +{:.1} MiB, {:.0} bytes per hold \
         (hold record, indexes, per-user usage entry)",
        (after - before) as f64 / (1024.0 * 1024.0),
        (after - before) as f64 / HOLDS as f64
    );
    println!(
        "snapshot_encode: {HOLDS} holds in {encode_ms:.0} ms ({:.1} MiB), on the snapshot thread",
        encoded.len() as f64 / (1024.0 * 1024.0)
    );
}
