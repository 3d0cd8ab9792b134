//! The server's logs as a log shipper and a person read them: stderr is a file here, so the text
//! format must carry no colour codes; `STOCKD_LOG_FORMAT=json` gives one JSON object a line; an
//! unknown format is refused before the server starts.

mod support;

use std::process::Command;

use support::{Server, ServerConfig};

#[tokio::test]
async fn text_logs_to_a_file_have_no_colour_codes() {
    let server = Server::start_with(ServerConfig::default()).await;
    let log = server.log_tail();
    assert!(log.contains("INFO"), "no log lines: {log}");
    assert!(!log.contains('\u{1b}'), "colour codes in a file: {log:?}");
}

#[tokio::test]
async fn json_logs_are_one_object_a_line() {
    let mut config = ServerConfig::default();
    config
        .env
        .push(("STOCKD_LOG_FORMAT".to_string(), "json".to_string()));
    let server = Server::start_with(config).await;
    let log = server.log_tail();
    // The test support frames the log between two marker lines of its own.
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with("---- "))
        .collect();
    assert!(!lines.is_empty(), "no log lines");
    for line in lines {
        let object: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {line:?}"));
        assert!(object["timestamp"].is_string(), "{object}");
        assert!(object["level"].is_string(), "{object}");
        assert!(object["fields"].is_object(), "{object}");
    }
}

#[test]
fn an_unknown_log_format_is_refused_with_the_choices() {
    let output = Command::new(env!("CARGO_BIN_EXE_stockd"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("STOCKD_LOG_FORMAT", "logfmt")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("STOCKD_LOG_FORMAT must be text or json, got \"logfmt\""),
        "{stderr}"
    );
}
