//! Replays the committed corpus of every target through the same checks the fuzz targets run,
//! on the stable toolchain and without libFuzzer: each seed, each input the fuzzer kept, and
//! each crash that was fixed (kept as a regression) must pass. `cargo test` in `fuzz/` runs it.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "{} holds no input", dir.display());
    for path in &entries {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{} fails", path.display());
    }
    println!("{target}: {} inputs replayed", entries.len());
}

#[test]
fn decode_request_corpus_passes() {
    replay("decode_request", stockd_fuzz::request::run);
}

#[test]
fn core_sequence_corpus_passes() {
    replay("core_sequence", stockd_fuzz::sequence::run);
}

#[test]
fn storage_recovery_corpus_passes() {
    replay("storage_recovery", stockd_fuzz::storage::run);
}
