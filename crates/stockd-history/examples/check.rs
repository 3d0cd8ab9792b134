//! Checks recorded histories again: `cargo run -p stockd-history --example check -- FILE...`
//! (the JSON files the history tests write when a history is not explained). Prints every
//! violation and the totals; exits 1 when any history is not explained.

use stockd_history::{check, Bounds, History};

fn main() {
    let mut failed = false;
    for path in std::env::args().skip(1) {
        let text = std::fs::read(&path).unwrap_or_else(|error| panic!("read {path}: {error}"));
        let history: History =
            serde_json::from_slice(&text).unwrap_or_else(|error| panic!("parse {path}: {error}"));
        let report = check(&history, Bounds::default());
        for violation in &report.violations {
            println!("{path}: {violation}");
        }
        let mut answers: Vec<_> = report.stats.answers.iter().collect();
        answers.sort();
        println!(
            "{path}: {} violations; {:?}",
            report.violations.len(),
            answers
        );
        failed |= !report.ok();
    }
    std::process::exit(i32::from(failed));
}
