//! `stockd bench lab`, briefly, against the real servers it starts itself (`redis-server`,
//! PostgreSQL through `initdb`, and this `stockd`): the naive variant must be caught
//! overselling, every other variant must sell exactly the stock and not a unit more, nothing may
//! be skipped, and with stderr a pipe there is no progress line (on a terminal there is).

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

#[test]
fn the_naive_variant_oversells_and_no_other_does() {
    // The lab's files go here, so that we can see they are gone afterwards. Traversable by the
    // `postgres` user, which runs PostgreSQL when the tests run as root.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let stock = 100;
    let mut command = Command::new(env!("CARGO_BIN_EXE_stockd"));
    command
        .args(["bench", "lab", "--duration", "1s", "--buyers", "20"])
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
    let rows = report["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|row| row["variant"].as_str().unwrap())
        .collect();
    assert_eq!(names, VARIANTS, "{report:#}");
    for row in rows {
        let n = |field: &str| {
            row[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{field} in {row:#}"))
        };
        assert!(n("attempts") > 0, "{row:#}");
        assert!(row["throughput_per_s"].as_f64().unwrap() > 0.0, "{row:#}");
        assert!(row["p99_ms"].as_f64().unwrap() > 0.0, "{row:#}");
        assert_eq!(n("errors"), 0, "{row:#}");
        if row["variant"] == "redis-naive" {
            // Lost updates: more buyers told "yours" than the stock had, the counter at zero.
            assert!(n("oversold_units") > 0, "{row:#}");
            assert_eq!(n("oversold_units"), n("sold_units") - stock, "{row:#}");
            assert_eq!(row["oversells_by_design"], true);
        } else {
            // Sold out within the run, every unit accounted for by the answers and the counter.
            assert_eq!(n("oversold_units"), 0, "{row:#}");
            assert_eq!(n("sold_units"), stock, "{row:#}");
            assert_eq!(n("counter_sold_units"), stock, "{row:#}");
            assert!(row["sold_out_ms"].as_f64().is_some(), "{row:#}");
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

/// The seed's second act: a lock's holder that is slow or dies. With a lease of 200 ms, a slow
/// holder pauses 600 ms inside its lock: the expiring lock's lease runs out under it and the
/// stock is oversold (expected, and flagged); SETNX, the watchdog's lease and PostgreSQL's row
/// lock make everyone wait instead. A holder that dies leaves SETNX stuck for the rest of the
/// run, the leases free again after one lease, and PostgreSQL at once (the connection closes).
#[test]
fn lock_faults_show_which_lock_oversells_and_which_gets_stuck() {
    let (stock, lease_ms, duration_ms) = (100u64, 200.0, 2000.0);
    let common = [
        "--lease",
        "200ms",
        "--duration",
        "2s",
        "--buyers",
        "10",
        "--stock",
        "100",
    ];
    let locks = [
        "redis-setnx-lock",
        "redis-expiring-lock",
        "redis-lease-lock",
        "pg-for-update",
    ];
    let n = |row: &Value, field: &str| {
        row[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} in {row:#}"))
    };

    let slow = lab(&[&common[..], &["--fault", "slow-holder"]].concat());
    assert_eq!(slow["fault"], "slow-holder");
    let slow_rows = rows(&slow);
    let names: Vec<&str> = slow_rows.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, locks, "{slow:#}");
    for (name, row) in slow_rows {
        assert_eq!(n(row, "errors"), 0.0, "{row:#}");
        if name == "redis-expiring-lock" {
            assert!(n(row, "oversold_units") > 0.0, "{row:#}");
            assert_eq!(row["oversells_by_design"], true, "{row:#}");
        } else {
            assert_eq!(n(row, "oversold_units"), 0.0, "{row:#}");
            assert_eq!(n(row, "sold_units"), stock as f64, "{row:#}");
            // Everyone waited out the pause.
            assert!(
                n(row, "longest_stall_ms") >= 0.9 * 3.0 * lease_ms,
                "{row:#}"
            );
        }
    }

    let crashed = lab(&[&common[..], &["--fault", "crashed-holder"]].concat());
    for (name, row) in rows(&crashed) {
        assert_eq!(n(row, "oversold_units"), 0.0, "{row:#}");
        assert!(row["note"].as_str().unwrap().contains("crashed"), "{row:#}");
        let stall = n(row, "longest_stall_ms");
        match name {
            "redis-setnx-lock" => {
                // Stuck from the crash to the end: nothing sold after it.
                assert!(n(row, "sold_units") < stock as f64, "{row:#}");
                assert!(row["sold_out_ms"].is_null(), "{row:#}");
                assert!(stall >= 0.8 * duration_ms, "{row:#}");
            }
            "redis-expiring-lock" | "redis-lease-lock" => {
                assert_eq!(n(row, "sold_units"), stock as f64, "{row:#}");
                assert!(stall >= 0.9 * lease_ms, "{row:#}");
                assert!(stall < duration_ms / 2.0, "{row:#}");
            }
            _ => assert_eq!(n(row, "sold_units"), stock as f64, "{row:#}"),
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
            "--duration must be at least twice",
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
            "'{}' bench lab --only redis-lua --duration 1s --stock 100 --buyers 4 {extra}",
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
