//! The way every long-running command is asked to stop.

/// Resolves on Ctrl-C (SIGINT) or SIGTERM: `serve` then drains and exits, `events tail` prints
/// its resume cursor, `bench` stops its servers and removes their files.
pub async fn stop_requested() {
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
}
