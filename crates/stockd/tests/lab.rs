//! `stockd bench lab`, briefly, against the real servers it starts itself (`redis-server`,
//! PostgreSQL through `initdb`, and this `stockd`): every variant runs until it sells out; the
//! naive variant must be caught losing updates and overselling, every other variant must sell
//! exactly the stock and not a unit more; each lock fault must be caught on the lock it is the
//! case against (lost updates for a slow holder, a stuck lock for a crashed one); nothing may be
//! skipped, and with stderr a pipe there is no progress line (on a terminal there is).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::Value;

const VARIANTS: [&str; 9] = [
    "redis-naive",
    "redis-setnx-lock",
    "redis-expiring-lock",
    "redis-lease-lock",
    "redis-lua",
    "pg-update",
    "pg-for-update",
    "stockd-embedded",
    "stockd-redis",
];

/// `row[field]` as a number.
fn n(row: &Value, field: &str) -> f64 {
    row[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {row:#}"))
}

/// The row's flags, as named in the JSON report.
fn flags(row: &Value) -> Vec<&str> {
    row["flags"]
        .as_array()
        .unwrap_or_else(|| panic!("flags in {row:#}"))
        .iter()
        .map(|flag| flag.as_str().unwrap())
        .collect()
}

/// A row that must not be flagged: sold out within the cap, exactly the stock by its answers and
/// by its counter.
fn assert_clean(row: &Value, stock: u64) {
    assert_eq!(flags(row), Vec::<&str>::new(), "{row:#}");
    assert_eq!(row["flagged"], false, "{row:#}");
    assert_eq!(row["fails_by_design"], false, "{row:#}");
    assert_eq!(row["cap_hit"], false, "{row:#}");
    assert!(n(row, "sold_out_ms") > 0.0, "{row:#}");
    assert_eq!(n(row, "sold_units"), stock as f64, "{row:#}");
    assert_eq!(n(row, "counter_sold_units"), stock as f64, "{row:#}");
    assert_eq!(n(row, "lost_updates_units"), 0.0, "{row:#}");
    assert_eq!(n(row, "oversold_units"), 0.0, "{row:#}");
    assert_eq!(n(row, "errors"), 0.0, "{row:#}");
}

#[test]
fn the_naive_variant_is_caught_and_every_other_sells_exactly_the_stock() {
    // The lab's files go here, so that we can see they are gone afterwards. Traversable by the
    // `postgres` user, which runs PostgreSQL when the tests run as root.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let stock = 100;
    let mut command = Command::new(env!("CARGO_BIN_EXE_stockd"));
    command
        .args(["bench", "lab", "--max-duration", "10s", "--buyers", "20"])
        .args(["--stock", &stock.to_string(), "--json", "-"])
        .env("TMPDIR", tmp.path());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("STOCKD_") {
            command.env_remove(name);
        }
    }
    let output = command.output().expect("stockd bench lab runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {stdout}\nstderr: {stderr}"));
    assert!(
        output.status.success(),
        "{:?}: {report:#}\n{stderr}",
        output.status
    );
    // Not a terminal: no progress line; and nothing skipped or failed to say.
    assert!(stderr.is_empty(), "stderr: {stderr}");
    assert_eq!(report["skipped"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["max_duration_s"], 10.0, "{report:#}");
    let rows = report["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|row| row["variant"].as_str().unwrap())
        .collect();
    assert_eq!(names, VARIANTS, "{report:#}");
    for row in rows {
        assert!(n(row, "attempts") > 0.0, "{row:#}");
        assert!(n(row, "attempts_per_s") > 0.0, "{row:#}");
        assert!(n(row, "sold_per_s") > 0.0, "{row:#}");
        assert!(n(row, "p99_ms") > 0.0, "{row:#}");
        if row["variant"] == "redis-naive" {
            // More buyers told "yours" than the counter counts, and than the stock had.
            assert_eq!(flags(row), ["lost_updates", "oversold"], "{row:#}");
            assert_eq!(row["fails_by_design"], true, "{row:#}");
            let sold = n(row, "sold_units");
            let counter = n(row, "counter_sold_units");
            assert_eq!(n(row, "lost_updates_units"), sold - counter, "{row:#}");
            assert_eq!(n(row, "oversold_units"), sold - stock as f64, "{row:#}");
        } else {
            // Sold out within the cap, every unit accounted for by the answers and the counter.
            assert_clean(row, stock);
            assert!(row["note"].is_null(), "{row:#}");
        }
    }
    // Every server stopped and its files removed.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Runs `stockd bench lab` with `args` and the JSON report on stdout; asserts it succeeded
/// and said nothing on stderr (not a terminal, nothing skipped).
fn lab(args: &[&str]) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_stockd"))
        .args(["bench", "lab", "--json", "-"])
        .args(args)
        .env("TMPDIR", tmp.path())
        .output()
        .expect("stockd bench lab runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {stdout}\nstderr: {stderr}"));
    assert!(
        output.status.success() && stderr.is_empty(),
        "{:?}: {report:#}\n{stderr}",
        output.status
    );
    report
}

/// The rows of `report` by variant name, in the lab's order.
fn rows(report: &Value) -> Vec<(&str, &Value)> {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["variant"].as_str().unwrap(), row))
        .collect()
}

const LOCKS: [&str; 4] = [
    "redis-setnx-lock",
    "redis-expiring-lock",
    "redis-lease-lock",
    "pg-for-update",
];

/// The seed's second act, a slow holder: with the default lease of 500 ms, the first holder
/// pauses 1.5 s between its read and its write. The expiring lock's lease runs out under it, the
/// others sell, then the slow holder writes back its stale count: units told "yours" that the
/// counter no longer counts. The lab must catch it (lost updates, the row flagged, as expected)
/// whether or not the stock ran out before the stale write; SETNX, the watchdog's lease and
/// PostgreSQL's row lock make everyone wait instead, and sell exactly the stock. (A shorter
/// lease is flaky on a loaded machine: the watchdog renews every third of the lease, and a
/// renewal delayed past the lease loses the lease lock's lease too, which the lab then flags.)
#[test]
fn a_slow_holder_is_caught_losing_updates_under_the_expiring_lock() {
    let (stock, lease_ms) = (100u64, 500.0);
    let report = lab(&[
        "--fault",
        "slow-holder",
        "--lease",
        "500ms",
        "--max-duration",
        "6s",
        "--buyers",
        "10",
        "--stock",
        "100",
    ]);
    assert_eq!(report["fault"], "slow-holder");
    let rows = rows(&report);
    let names: Vec<&str> = rows.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, LOCKS, "{report:#}");
    for (name, row) in rows {
        if name == "redis-expiring-lock" {
            assert!(n(row, "lost_updates_units") > 0.0, "{row:#}");
            assert!(flags(row).contains(&"lost_updates"), "{row:#}");
            assert_eq!(row["flagged"], true, "{row:#}");
            assert_eq!(row["fails_by_design"], true, "{row:#}");
            assert_eq!(n(row, "errors"), 0.0, "{row:#}");
        } else {
            assert_clean(row, stock);
            // Everyone waited out the pause.
            assert!(
                n(row, "longest_stall_ms") >= 0.9 * 3.0 * lease_ms,
                "{row:#}"
            );
        }
    }
}

/// A holder that dies: SETNX has no expiry, so its lock stays taken and nothing sells until the
/// cap; the lab must catch it (stuck, the row flagged, as expected). The leases free again after
/// one lease and PostgreSQL at once (the connection closes); they sell exactly the stock.
#[test]
fn a_crashed_holder_is_caught_leaving_the_setnx_lock_stuck() {
    let (stock, lease_ms, cap_ms) = (100u64, 500.0, 3000.0);
    let report = lab(&[
        "--fault",
        "crashed-holder",
        "--lease",
        "500ms",
        "--max-duration",
        "3s",
        "--buyers",
        "10",
        "--stock",
        "100",
    ]);
    let rows = rows(&report);
    let names: Vec<&str> = rows.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, LOCKS, "{report:#}");
    for (name, row) in rows {
        assert!(row["note"].as_str().unwrap().contains("crashed"), "{row:#}");
        let stall = n(row, "longest_stall_ms");
        if name == "redis-setnx-lock" {
            // Stuck from the crash to the cap: nothing sold after it.
            assert_eq!(flags(row), ["stuck"], "{row:#}");
            assert_eq!(row["flagged"], true, "{row:#}");
            assert_eq!(row["fails_by_design"], true, "{row:#}");
            assert_eq!(row["cap_hit"], true, "{row:#}");
            assert!(row["sold_out_ms"].is_null(), "{row:#}");
            assert!(n(row, "sold_units") < stock as f64, "{row:#}");
            assert!(stall >= 0.5 * cap_ms, "{row:#}");
        } else {
            assert_eq!(flags(row), Vec::<&str>::new(), "{row:#}");
            assert_eq!(n(row, "sold_units"), stock as f64, "{row:#}");
            assert_eq!(n(row, "counter_sold_units"), stock as f64, "{row:#}");
            assert_eq!(row["cap_hit"], false, "{row:#}");
            if name != "pg-for-update" {
                assert!(stall >= 0.9 * lease_ms, "{row:#}");
                assert!(stall < cap_ms / 2.0, "{row:#}");
            }
        }
    }
}

#[test]
fn a_fault_refuses_a_variant_without_a_lock_and_a_run_too_short_to_show_it() {
    for (args, expected) in [
        (
            &["--fault", "slow-holder", "--only", "redis-lua"][..],
            "redis-lua holds no lock",
        ),
        (
            &[
                "--fault",
                "crashed-holder",
                "--lease",
                "1s",
                "--duration",
                "5s",
            ][..],
            "--max-duration must be at least twice",
        ),
        (&["--lease", "5s"][..], "--lease must be 10ms..=3s"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_stockd"))
            .args(["bench", "lab"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn unknown_variants_are_refused_with_the_known_names() {
    let output = Command::new(env!("CARGO_BIN_EXE_stockd"))
        .args(["bench", "lab", "--only", "memcached"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("memcached") && stderr.contains("pg-for-update"),
        "{stderr}"
    );
}

/// The other side of "no progress line on a pipe": on a terminal (a pty from `script(1)`, in
/// Debian's essential bsdutils) the line is there, and `--quiet` removes it.
#[test]
fn the_progress_line_shows_on_a_terminal_only_unless_quiet() {
    let run = |extra: &str| {
        let lab = format!(
            "'{}' bench lab --only redis-lua --duration 1s --stock 1000000000 --buyers 4 {extra}",
            env!("CARGO_BIN_EXE_stockd")
        );
        let output = Command::new("script")
            .args(["-qec", &lab, "/dev/null"])
            .output()
            .expect("script(1) runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).replace('\r', "\n")
    };
    let shown = run("");
    assert!(shown.contains("redis-lua: "), "no progress line: {shown}");
    let quiet = run("--quiet");
    assert!(
        !quiet.contains("redis-lua: "),
        "progress despite --quiet: {quiet}"
    );
    assert!(quiet.contains("redis-lua "), "no table: {quiet}");
}
