//! The two text formats `/metrics` speaks, and which one a scraper asked for.
//!
//! `prometheus-client` writes OpenMetrics 1.0: a counter's family is typed without its `_total`
//! suffix (`# TYPE x counter`, samples `x_total`), and the text ends with `# EOF`. Served as the
//! classic Prometheus text format (0.0.4), that loses every counter's type: a 0.0.4 parser
//! matches `# TYPE` to sample names, finds no samples named `x`, and reads `x_total` as untyped.
//! So the classic format is made from the OpenMetrics text by [`to_classic`], and
//! [`negotiate`] picks the format by the scraper's `Accept` header, as Prometheus does.
//!
//! It is part of the contract, not of the server: stockd's `/metrics` and the sink's speak it
//! alike, and this pure text work is all either needs of it.

/// A text exposition format, with its content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The classic Prometheus text format 0.0.4: the default.
    Classic,
    /// OpenMetrics 1.0.0: when the scraper prefers it.
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The format an `Accept` header prefers: OpenMetrics when its quality is above zero and at
/// least that of the classic text (`text/plain`, `text/*`, `*/*`); the classic text otherwise,
/// and without a header or with one that names neither.
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Classic;
    };
    let mut openmetrics = 0.0f32;
    let mut classic = 0.0f32;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let quality = parts
            .filter_map(|param| param.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, value)| value.trim().parse::<f32>().ok())
            .filter(|q| (0.0..=1.0).contains(q))
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
            "text/plain" | "text/*" | "*/*" => classic = classic.max(quality),
            _ => {}
        }
    }
    if openmetrics > 0.0 && openmetrics >= classic {
        Format::OpenMetrics
    } else {
        Format::Classic
    }
}

/// The classic text format of an OpenMetrics text: counter families named after their samples
/// (`x_total`), info families as gauges named `x_info`, `unknown` as `untyped`; `# UNIT`, `# EOF`,
/// `_created` samples of counters and exemplars (which 0.0.4 has no place for) left out.
pub fn to_classic(openmetrics: &str) -> String {
    // A family's TYPE line comes after its HELP line: learn the types first.
    let mut renamed: Vec<(&str, String)> = Vec::new();
    let mut counters: Vec<&str> = Vec::new();
    for line in openmetrics.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let Some((name, kind)) = rest.split_once(' ') else {
            continue;
        };
        match kind {
            "counter" => {
                counters.push(name);
                renamed.push((name, format!("{name}_total")));
            }
            "info" => renamed.push((name, format!("{name}_info"))),
            _ => {}
        }
    }
    let family_name = |name: &str| -> String {
        renamed
            .iter()
            .find(|(from, _)| *from == name)
            .map_or_else(|| name.to_string(), |(_, to)| to.clone())
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str("# HELP ");
            out.push_str(&family_name(name));
            if !help.is_empty() {
                out.push(' ');
                out.push_str(help);
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let kind = match kind {
                "info" => "gauge",
                "unknown" | "stateset" => "untyped",
                "gaugehistogram" => "histogram",
                other => other,
            };
            out.push_str("# TYPE ");
            out.push_str(&family_name(name));
            out.push(' ');
            out.push_str(kind);
        } else if line.starts_with('#') {
            out.push_str(line);
        } else {
            let sample_name = line.split(['{', ' ']).next().unwrap_or("");
            if counters
                .iter()
                .any(|counter| sample_name.strip_suffix("_created") == Some(counter))
            {
                continue;
            }
            // An exemplar follows the value as ` # {labels} value`.
            let sample = match line.find(" # {") {
                Some(at) => &line[..at],
                None => line,
            };
            out.push_str(sample);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
        application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

    #[test]
    fn the_scraper_gets_what_it_prefers_and_the_classic_text_by_default() {
        assert_eq!(negotiate(None), Format::Classic);
        assert_eq!(negotiate(Some("*/*")), Format::Classic);
        assert_eq!(negotiate(Some("text/plain")), Format::Classic);
        assert_eq!(negotiate(Some("application/json")), Format::Classic);
        assert_eq!(negotiate(Some(PROMETHEUS_ACCEPT)), Format::OpenMetrics);
        assert_eq!(
            negotiate(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(Some(
                "text/plain;version=0.0.4,application/openmetrics-text;q=0.5"
            )),
            Format::Classic
        );
        assert_eq!(
            negotiate(Some("Application/OpenMetrics-Text; q=0")),
            Format::Classic
        );
        // A quality that is not a number in 0..=1 counts as 1, as if it were absent.
        assert_eq!(
            negotiate(Some("text/plain;q=0.5, application/openmetrics-text;q=7")),
            Format::OpenMetrics
        );
    }

    #[test]
    fn counters_are_typed_by_their_sample_names_in_the_classic_text() {
        let openmetrics = "\
# HELP stockd_http_requests HTTP requests.
# TYPE stockd_http_requests counter
stockd_http_requests_total{route=\"/v1/holds\",status=\"201\"} 3 # {trace=\"a\"} 1.0
stockd_http_requests_created{route=\"/v1/holds\",status=\"201\"} 1700000000.0
# HELP stockd_expiry_lag_ms Expiry lag.
# TYPE stockd_expiry_lag_ms histogram
# UNIT stockd_expiry_lag_ms ms
stockd_expiry_lag_ms_bucket{le=\"+Inf\"} 0
stockd_expiry_lag_ms_sum 0.0
stockd_expiry_lag_ms_count 0
# HELP stockd_build Build.
# TYPE stockd_build info
stockd_build_info{version=\"1\"} 1
# TYPE stockd_pools gauge
stockd_pools 2.0
# EOF
";
        assert_eq!(
            to_classic(openmetrics),
            "\
# HELP stockd_http_requests_total HTTP requests.
# TYPE stockd_http_requests_total counter
stockd_http_requests_total{route=\"/v1/holds\",status=\"201\"} 3
# HELP stockd_expiry_lag_ms Expiry lag.
# TYPE stockd_expiry_lag_ms histogram
stockd_expiry_lag_ms_bucket{le=\"+Inf\"} 0
stockd_expiry_lag_ms_sum 0.0
stockd_expiry_lag_ms_count 0
# HELP stockd_build_info Build.
# TYPE stockd_build_info gauge
stockd_build_info{version=\"1\"} 1
# TYPE stockd_pools gauge
stockd_pools 2.0
"
        );
    }
}
