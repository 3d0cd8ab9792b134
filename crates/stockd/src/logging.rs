//! Logs go to stderr: text for people by default, coloured only on a terminal (and never with
//! `NO_COLOR` set), or one JSON object a line with `STOCKD_LOG_FORMAT=json` for log shippers.
//! `STOCKD_LOG` takes a tracing filter (`info` by default).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The log formats `STOCKD_LOG_FORMAT` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

fn format_from(value: Option<&str>) -> Result<Format, String> {
    match value.map(str::trim) {
        None | Some("") | Some("text") => Ok(Format::Text),
        Some("json") => Ok(Format::Json),
        Some(other) => Err(format!(
            "STOCKD_LOG_FORMAT must be text or json, got {other:?}"
        )),
    }
}

/// Installs the global subscriber from `STOCKD_LOG_FORMAT`, `STOCKD_LOG` and `NO_COLOR`.
pub fn init() -> Result<(), String> {
    let format = format_from(std::env::var("STOCKD_LOG_FORMAT").ok().as_deref())?;
    let filter = match std::env::var("STOCKD_LOG") {
        Ok(directives) => EnvFilter::try_new(&directives)
            .map_err(|error| format!("STOCKD_LOG={directives:?} is not a log filter: {error}"))?,
        Err(_) => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        Format::Text => {
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
            builder.with_ansi(colour).init();
        }
        Format::Json => builder.json().with_ansi(false).init(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_text_or_json_and_anything_else_is_named() {
        assert_eq!(format_from(None), Ok(Format::Text));
        assert_eq!(format_from(Some("text")), Ok(Format::Text));
        assert_eq!(format_from(Some("json")), Ok(Format::Json));
        let why = format_from(Some("logfmt")).unwrap_err();
        assert!(
            why.contains("\"logfmt\"") && why.contains("text or json"),
            "{why}"
        );
    }
}
