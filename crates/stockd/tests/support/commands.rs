//! One-shot `stockd` commands a suite runs beside its servers, as an operator would: each runs the
//! binary, waits for it, and insists on success with its stderr in the failure message.
//!
//! Only the command line is used here; what the command changed is the suite's to check.

use std::process::Command;

/// The `stockd` binary under test.
pub const STOCKD: &str = env!("CARGO_BIN_EXE_stockd");

/// `stockd redis accept --backend URL EXTRA...`: an operator accepts the dataset as it is now
/// (after a loss); panics unless it exits 0.
pub fn redis_accept(backend_url: &str, extra: &[&str]) {
    let accept = Command::new(STOCKD)
        .args(["redis", "accept", "--backend", backend_url])
        .args(extra)
        .output()
        .expect("run stockd redis accept");
    assert!(
        accept.status.success(),
        "{}",
        String::from_utf8_lossy(&accept.stderr)
    );
}
