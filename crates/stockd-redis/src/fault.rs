//! Fault injection for tests: a named point in the cross-partition protocol (`cross.*`), in a
//! pool op on a segmented pool (`pop.*`), or right after a restock's library call
//! (`restock.after_call`) where a test can make this process die, to show that what it leaves
//! behind is rolled forward or back, or that a retry elsewhere finishes it.
//!
//! Compiled in only with the `fault-injection` feature (the test suite turns it on; release
//! builds never have it). `STOCKD_FAULT=NAME` or `NAME:N` aborts the process the N-th time
//! (default the first) the point NAME is reached.

#[cfg(feature = "fault-injection")]
pub fn point(name: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static HITS: AtomicU64 = AtomicU64::new(0);
    let Ok(spec) = std::env::var("STOCKD_FAULT") else {
        return;
    };
    let (wanted, nth) = match spec.split_once(':') {
        Some((wanted, nth)) => (wanted.to_string(), nth.parse().unwrap_or(1)),
        None => (spec, 1),
    };
    if wanted == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == nth {
        eprintln!("fault injection: dying at {name}");
        std::process::abort();
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_name: &str) {}
