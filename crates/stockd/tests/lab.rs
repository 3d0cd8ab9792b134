//! `stockd bench lab`, briefly, against the real servers it starts itself (`redis-server`,
//! PostgreSQL through `initdb`, and this `stockd`): the naive variant must be caught
//! overselling, every other variant must sell exactly the stock and not a unit more, nothing may
//! be skipped, and with stderr a pipe there is no progress line (on a terminal there is).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::Value;

const VARIANTS: [&str; 8] = [
    "redis-naive",
    "redis-setnx-lock",
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
