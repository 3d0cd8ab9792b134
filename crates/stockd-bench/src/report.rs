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
    /// Holds the server created with the measured requests (a batch request carries many).
    pub holds_created: u64,
    /// `holds_created` per second of the measured window: the same requests over the same
    /// window as `throughput_per_s`, so at most it for every scenario but `batch`.
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
        verdict: Verdict,
        race_order: Option<RaceOrder>,
    ) -> Report {
        let window = load.window.as_secs_f64();
        let holds_created = load.recorded.holds_created;
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
            holds_created,
            holds_per_s: if window > 0.0 {
                holds_created as f64 / window
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
        // The settings that change what the server does with the same requests.
        let shape = match self.scenario {
            Scenario::Flash {
                segments: Some(segments),
                ..
            } => format!(" on a pool of {segments} segment(s)"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "stockd bench: {}{shape} against {} ({} connections, {pace}, seed {}, run {})",
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
        let _ = writeln!(
            out,
            "  holds created {:>12.0}  per s  ({} in the same window)",
            self.holds_per_s, self.holds_created
        );
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

    /// Throughput and latency (p50, p99) per second, as an SVG document: two panels over the
    /// seconds of the measured window, each with ticks and labels on both axes.
    pub fn svg(&self) -> String {
        let (width, height) = (900.0f64, 580.0f64);
        let (left, right) = (70.0, 20.0);
        let panel = 200.0;
        let tops = [50.0, 320.0];
        let plot_width = width - left - right;
        let seconds = self.timeline.len().max(1) as f64;
        // Second `s` of the window spans [s, s + 1): its point sits in the middle.
        let x = |second: f64| left + plot_width * second / seconds;
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
        let x_ticks = Ticks::whole(seconds, 10);
        for (index, title) in ["requests per second", "latency ms (p50, p99)"]
            .iter()
            .enumerate()
        {
            let top = tops[index];
            let bottom = top + panel;
            let values: Vec<Vec<f64>> = if index == 0 {
                vec![self.timeline.iter().map(|s| s.requests as f64).collect()]
            } else {
                vec![
                    self.timeline.iter().map(|s| s.p50_ms).collect(),
                    self.timeline.iter().map(|s| s.p99_ms).collect(),
                ]
            };
            let max = values.iter().flatten().copied().fold(0.0f64, f64::max);
            let y_ticks = Ticks::over(max, 5);
            let y = |value: f64| bottom - panel * value / y_ticks.top;
            let _ = writeln!(
                svg,
                r##"<text x="{left}" y="{}">{title}</text><line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#444"/><line x1="{left}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#444"/>"##,
                top - 8.0,
                width - right,
            );
            for value in y_ticks.values() {
                let at = y(value);
                let _ = writeln!(
                    svg,
                    r##"<line class="tick" x1="{}" y1="{at:.1}" x2="{left}" y2="{at:.1}" stroke="#444"/><line x1="{left}" y1="{at:.1}" x2="{}" y2="{at:.1}" stroke="#e5e5e5"/><text class="tick-label" x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                    left - 5.0,
                    width - right,
                    left - 8.0,
                    at + 4.0,
                    y_ticks.label(value)
                );
            }
            for value in x_ticks.values().filter(|&second| second <= seconds) {
                let at = x(value);
                let _ = writeln!(
                    svg,
                    r##"<line class="tick" x1="{at:.1}" y1="{bottom}" x2="{at:.1}" y2="{}" stroke="#444"/><text class="tick-label" x="{at:.1}" y="{}" text-anchor="middle">{}</text>"##,
                    bottom + 5.0,
                    bottom + 18.0,
                    x_ticks.label(value)
                );
            }
            for (line, colour) in values.iter().zip(["#1f6feb", "#d1242f"]) {
                let points: Vec<String> = line
                    .iter()
                    .enumerate()
                    .map(|(second, &value)| {
                        format!("{:.1},{:.1}", x(second as f64 + 0.5), y(value))
                    })
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
            left + plot_width / 2.0,
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

/// The ticks of an axis from 0 to at least `max`: a step of 1, 2 or 5 times a power of ten,
/// chosen so that there are at most `count` steps, and the axis ends on the first tick at or
/// above `max` (so that every value plotted lies under the top tick).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ticks {
    step: f64,
    top: f64,
}

impl Ticks {
    fn over(max: f64, count: usize) -> Ticks {
        let max = if max.is_finite() && max > 0.0 {
            max
        } else {
            1.0
        };
        let rough = max / count.max(1) as f64;
        let power = 10f64.powf(rough.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|factor| factor * power)
            .find(|&step| step >= rough)
            .unwrap_or(10.0 * power);
        Ticks {
            step,
            top: (max / step).ceil() * step,
        }
    }

    /// As [`Ticks::over`], for a count of whole things (seconds): a step of at least 1.
    fn whole(max: f64, count: usize) -> Ticks {
        let ticks = Ticks::over(max, count);
        if ticks.step >= 1.0 {
            return ticks;
        }
        Ticks {
            step: 1.0,
            top: if max.is_finite() {
                max.ceil().max(1.0)
            } else {
                1.0
            },
        }
    }

    /// 0, step, 2 step... up to the top.
    fn values(self) -> impl Iterator<Item = f64> {
        let steps = (self.top / self.step).round() as u64;
        (0..=steps).map(move |n| n as f64 * self.step)
    }

    /// A tick's value with as many decimals as the step needs (none for a step of 1 or more).
    fn label(self, value: f64) -> String {
        let decimals = (-self.step.log10().floor()).max(0.0) as usize;
        format!("{value:.decimals$}")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::http::Answer;
    use crate::load::Recorded;

    /// A flash report of `requests` answers 201 spread over `seconds` seconds of window, the
    /// `p99`-ish latency growing with the second.
    fn report(seconds: usize, requests_per_s: u64) -> Report {
        let mut recorded = Recorded::new();
        let created = Ok(Answer {
            status: 201,
            body: Default::default(),
        });
        for second in 0..seconds {
            for n in 0..requests_per_s {
                let latency = Duration::from_micros(200 + 100 * second as u64 + n % 50);
                recorded.record(second, latency, &created);
            }
        }
        recorded.holds_created = seconds as u64 * requests_per_s;
        let load = LoadResult {
            recorded,
            connect_us: hdrhistogram::Histogram::new(3).unwrap(),
            connect_failures: 0,
            window: Duration::from_secs(seconds as u64),
            // One second of warm-up before the window, its requests sent but not measured.
            sent: (seconds as u64 + 1) * requests_per_s,
            elapsed: Duration::from_secs(seconds as u64 + 1),
        };
        Report::new(
            "bench-test",
            &["http://127.0.0.1:1".to_string()],
            &["bench-test-hot".to_string()],
            Scenario::Flash {
                stock: 1_000_000,
                buyers: 10,
                per_user_limit: None,
                segments: None,
            },
            4,
            Pace::Closed,
            1,
            &load,
            Verdict::default(),
            None,
        )
    }

    #[test]
    fn holds_per_second_and_throughput_share_the_measured_window() {
        let report = report(4, 1_000);
        assert_eq!(report.requests, 4_000);
        assert_eq!(report.holds_created, 4_000);
        assert_eq!(report.throughput_per_s, 1_000.0);
        assert_eq!(report.holds_per_s, report.throughput_per_s);
        let table = report.table();
        assert!(
            table.contains("holds created         1000  per s  (4000 in the same window)"),
            "{table}"
        );
    }

    #[test]
    fn a_segmented_flash_says_its_segments_in_the_table_and_the_json() {
        let mut report = report(1, 10);
        let unsegmented = serde_json::to_value(&report).unwrap();
        assert!(unsegmented.get("segments").is_none(), "{unsegmented:#}");
        assert!(
            report
                .table()
                .starts_with("stockd bench: flash against http://127.0.0.1:1 ("),
            "{}",
            report.table()
        );
        report.scenario = Scenario::Flash {
            stock: 1_000_000,
            buyers: 10,
            per_user_limit: None,
            segments: Some(4),
        };
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["segments"], 4, "{json:#}");
        assert!(
            report
                .table()
                .starts_with("stockd bench: flash on a pool of 4 segment(s) against http://"),
            "{}",
            report.table()
        );
    }

    #[test]
    fn ticks_are_round_steps_that_cover_the_largest_value() {
        // (largest value, steps at most, step, top)
        for (max, steps, step, top) in [
            (1234.0, 5, 500.0, 1500.0),
            (10.0, 10, 1.0, 10.0),
            (0.0, 5, 0.2, 1.0),
        ] {
            assert_eq!(Ticks::over(max, steps), Ticks { step, top }, "{max}");
        }
        let small = Ticks::over(0.37, 5);
        assert_eq!(small.step, 0.1);
        assert!((small.top - 0.4).abs() < 1e-9, "{small:?}");
        assert_eq!(small.label(0.30000000000000004), "0.3");
        let labels: Vec<String> = Ticks::over(1234.0, 5)
            .values()
            .map(|value| Ticks::over(1234.0, 5).label(value))
            .collect();
        assert_eq!(labels, ["0", "500", "1000", "1500"]);
        // Seconds: whole steps, however short the window.
        for (max, steps, step, top) in [
            (1.0, 10, 1.0, 1.0),
            (3.0, 10, 1.0, 3.0),
            (60.0, 10, 10.0, 60.0),
        ] {
            assert_eq!(Ticks::whole(max, steps), Ticks { step, top }, "{max}");
        }
        // Never more steps than asked, whatever the value.
        for max in [0.001, 0.7, 3.0, 9.99, 42.0, 99_999.0, 1e9] {
            let ticks = Ticks::over(max, 5);
            assert!(ticks.top >= max, "{max}: {ticks:?}");
            assert!(ticks.values().count() <= 6, "{max}: {ticks:?}");
        }
    }

    #[test]
    fn the_plot_has_labelled_ticks_on_both_axes_of_both_panels() {
        let svg = report(12, 1_000).svg();
        let labels: Vec<&str> = svg
            .split(r#"class="tick-label""#)
            .skip(1)
            .map(|rest| {
                let text = &rest[rest.find('>').unwrap() + 1..];
                &text[..text.find('<').unwrap()]
            })
            .collect();
        // Requests per second: 0 to 1000 by 200; latency (p99 up to about 1.35 ms) by 0.5 ms;
        // under each panel, the seconds 0 to 12 by 2.
        let seconds = ["0", "2", "4", "6", "8", "10", "12"];
        let mut want: Vec<&str> = vec!["0", "200", "400", "600", "800", "1000"];
        want.extend(seconds);
        want.extend(["0.0", "0.5", "1.0", "1.5"]);
        want.extend(seconds);
        assert_eq!(labels, want, "{svg}");
        assert_eq!(
            svg.matches(r#"class="tick""#).count(),
            labels.len(),
            "a tick mark for each label"
        );
    }
}
