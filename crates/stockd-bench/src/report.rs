//! The report of a run: a table for people, one JSON document for machines, and an SVG plot of
//! throughput and latency over time.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::load::{LoadResult, Pace};
use crate::race::RaceOrder;
use crate::scenario::{Scenario, Verdict};

#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SecondReport {
    pub second: usize,
    pub requests: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Everything a run measured and what the server said afterwards.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub run_id: String,
    /// The servers the load went to, connections spread over them in turn; set-up and the
    /// verdict went through the first.
    pub urls: Vec<String>,
    /// The pools the run set up (named after the run, so that a run can be looked into after;
    /// not `pools`, which is the cart scenario's count).
    pub pool_ids: Vec<String>,
    #[serde(flatten)]
    pub scenario: Scenario,
    pub connections: usize,
    /// `null` for a closed loop.
    pub rate_per_s: Option<f64>,
    pub seed: u64,
    pub window_s: f64,
    pub requests: u64,
    pub throughput_per_s: f64,
    /// Holds the server created per second, over the whole run (a batch request carries many).
    pub holds_per_s: f64,
    pub latency: Latency,
    /// Opening the connections, all at once before the first request (not in `latency`).
    pub connect: Latency,
    pub connect_failures: u64,
    /// By status, and error code for errors: `"201"`, `"409 insufficient_stock"`, `"unknown"`.
    pub outcomes: BTreeMap<String, u64>,
    pub unknown_samples: Vec<String>,
    pub verdict: Verdict,
    /// The team race only: whether the buyers who came first won.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub race_order: Option<RaceOrder>,
    pub timeline: Vec<SecondReport>,
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

impl Latency {
    fn of(histogram: &hdrhistogram::Histogram<u64>) -> Latency {
        let quantile = |q: f64| {
            if histogram.is_empty() {
                0.0
            } else {
                ms(histogram.value_at_quantile(q))
            }
        };
        Latency {
            p50_ms: quantile(0.50),
            p90_ms: quantile(0.90),
            p99_ms: quantile(0.99),
            p999_ms: quantile(0.999),
            max_ms: if histogram.is_empty() {
                0.0
            } else {
                ms(histogram.max())
            },
        }
    }
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        run_id: &str,
        urls: &[String],
        pools: &[String],
        scenario: Scenario,
        connections: usize,
        pace: Pace,
        seed: u64,
        load: &LoadResult,
        holds_created: u64,
        verdict: Verdict,
        race_order: Option<RaceOrder>,
    ) -> Report {
        // Holds are counted over the whole run, warm-up included.
        let elapsed = load.elapsed.as_secs_f64();
        let window = load.window.as_secs_f64();
        Report {
            run_id: run_id.to_string(),
            urls: urls.to_vec(),
            pool_ids: pools.to_vec(),
            scenario,
            connections,
            rate_per_s: match pace {
                Pace::Closed => None,
                Pace::Open { rate_per_s } => Some(rate_per_s),
            },
            seed,
            window_s: window,
            requests: load.recorded.measured(),
            throughput_per_s: load.throughput_per_s(),
            holds_per_s: if elapsed > 0.0 {
                holds_created as f64 / elapsed
            } else {
                0.0
            },
            latency: Latency::of(&load.recorded.latency_us),
            connect: Latency::of(&load.connect_us),
            connect_failures: load.connect_failures,
            outcomes: load.recorded.outcomes.clone(),
            unknown_samples: load.recorded.unknown_samples.clone(),
            verdict,
            race_order,
            timeline: load
                .recorded
                .timeline
                .iter()
                .enumerate()
                .map(|(second, slot)| SecondReport {
                    second,
                    requests: slot.requests,
                    errors: slot.errors,
                    p50_ms: if slot.latency_us.is_empty() {
                        0.0
                    } else {
                        ms(slot.latency_us.value_at_quantile(0.5))
                    },
                    p99_ms: if slot.latency_us.is_empty() {
                        0.0
                    } else {
                        ms(slot.latency_us.value_at_quantile(0.99))
                    },
                })
                .collect(),
        }
    }

    /// The table people read.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let pace = match self.rate_per_s {
            None => "closed loop".to_string(),
            Some(rate) => format!("open loop at {rate:.0}/s"),
        };
        let _ = writeln!(
            out,
            "stockd bench: {} against {} ({} connections, {pace}, seed {}, run {})",
            self.scenario.name(),
            self.urls.join(", "),
            self.connections,
            self.seed,
            self.run_id
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  requests      {:>12}  in {:.1} s",
            self.requests, self.window_s
        );
        let _ = writeln!(
            out,
            "  throughput    {:>12.0}  requests/s",
            self.throughput_per_s
        );
        let _ = writeln!(out, "  holds created {:>12.0}  per s", self.holds_per_s);
        let l = &self.latency;
        let _ = writeln!(
            out,
            "  latency ms    p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
        );
        let c = &self.connect;
        let _ = writeln!(
            out,
            "  connect ms    p50 {:.2}  p99 {:.2}  max {:.2}  (all {} at once, before the first request{})",
            c.p50_ms,
            c.p99_ms,
            c.max_ms,
            self.connections,
            match self.connect_failures {
                0 => String::new(),
                n => format!("; {n} failed and retried on their first request"),
            }
        );
        let _ = writeln!(out);
        let _ = writeln!(out, "  outcomes");
        for (label, count) in &self.outcomes {
            let _ = writeln!(out, "    {label:<36} {count:>12}");
        }
        for sample in &self.unknown_samples {
            let _ = writeln!(out, "    (unknown: {sample})");
        }
        if let Some(order) = &self.race_order {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "  race order    {} of {} losers lost to a winner of their team who surely came later",
                order.overtaken, order.losers
            );
            if order.overtaken > 0 {
                let _ = writeln!(
                    out,
                    "                by p50 {:.2}  p99 {:.2}  max {:.2} ms",
                    order.overtaken_by_p50_ms, order.overtaken_by_p99_ms, order.overtaken_by_max_ms
                );
            }
            match (order.group_commit_ms, order.beyond_one_commit) {
                (Some(commit), Some(beyond)) => {
                    let _ = writeln!(
                        out,
                        "                {beyond} by more than one group of the server's writer ({commit:.2} ms on average over the load)"
                    );
                }
                _ => {
                    let _ = writeln!(
                        out,
                        "                (no group to compare with: the server has no writer of its own)"
                    );
                }
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  verdict: {}",
            if self.verdict.ok {
                "OK, read back from the server"
            } else {
                "FAILED"
            }
        );
        for check in &self.verdict.checks {
            let _ = writeln!(
                out,
                "    [{}] {}: {}",
                if check.ok { "ok" } else { "FAIL" },
                check.name,
                check.detail
            );
        }
        out
    }

    /// Throughput and latency (p50, p99) per second, as an SVG document.
    pub fn svg(&self) -> String {
        let (width, height) = (900.0f64, 560.0f64);
        let (left, right) = (70.0, 20.0);
        let panel = 200.0;
        let tops = [50.0, 320.0];
        let seconds = self.timeline.len().max(1) as f64;
        let x = |second: f64| left + (width - left - right) * (second + 0.5) / seconds;
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{left}" y="22" font-size="15">stockd bench {}: {:.0} requests/s, p99 {:.2} ms, verdict {}</text>"#,
            self.scenario.name(),
            self.throughput_per_s,
            self.latency.p99_ms,
            if self.verdict.ok { "OK" } else { "FAILED" }
        );
        for (index, title) in ["requests per second", "latency ms (p50, p99)"]
            .iter()
            .enumerate()
        {
            let top = tops[index];
            let values: Vec<Vec<f64>> = if index == 0 {
                vec![self.timeline.iter().map(|s| s.requests as f64).collect()]
            } else {
                vec![
                    self.timeline.iter().map(|s| s.p50_ms).collect(),
                    self.timeline.iter().map(|s| s.p99_ms).collect(),
                ]
            };
            let max = values
                .iter()
                .flatten()
                .copied()
                .fold(0.0f64, f64::max)
                .max(1e-9);
            let y = |value: f64| top + panel - panel * value / max;
            let _ = writeln!(
                svg,
                r##"<text x="{left}" y="{}">{title}</text><line x1="{left}" y1="{}" x2="{left}" y2="{}" stroke="#444"/><line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#444"/>"##,
                top - 8.0,
                top,
                top + panel,
                top + panel,
                width - right,
                top + panel
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="end">{:.1}</text><text x="{}" y="{}" text-anchor="end">0</text>"#,
                left - 6.0,
                top + 4.0,
                max,
                left - 6.0,
                top + panel + 4.0
            );
            for (line, colour) in values.iter().zip(["#1f6feb", "#d1242f"]) {
                let points: Vec<String> = line
                    .iter()
                    .enumerate()
                    .map(|(second, &value)| format!("{:.1},{:.1}", x(second as f64), y(value)))
                    .collect();
                let _ = writeln!(
                    svg,
                    r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                    points.join(" ")
                );
            }
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">seconds of the measured window ({} s)</text>"#,
            (left + width - right) / 2.0,
            height - 10.0,
            self.timeline.len()
        );
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" fill="#1f6feb">p50</text><text x="{}" y="{}" fill="#d1242f">p99</text>"##,
            width - right - 70.0,
            tops[1] - 8.0,
            width - right - 35.0,
            tops[1] - 8.0
        );
        svg.push_str("</svg>\n");
        svg
    }
}
