//! The model sequences of stockd-model, run through the `Backend` trait against the Redis
//! library (`lua/`), the second implementation of the core's rules: every outcome, event (read
//! back from the partition's stream) and view must be the model's, as they are for `State`.
//!
//! A real `redis-server` of the test's own runs on a free loopback port, without persistence;
//! each case starts from `FLUSHALL` with a fresh backend. Time is the backend's test clock
//! (feature `test-clock`, so the `NOW` of every call), which only the runner moves; the
//! background sweeper is off and the target sweeps every partition (`sweep_now`, the sweeper's
//! own code) right after moving the clock, as `State::tick` runs after time passes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command as Process, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::test_runner::{Config, TestCaseError, TestRunner};
use stockd_core::{Backend, Command, Event, HoldId, Outcome};
use stockd_model::{self as model, Views, CONFIG, START_MS};
use stockd_redis::{RedisBackend, RedisConfig, TestClock};
use tokio::runtime::Runtime;

/// A `redis-server` child on a free loopback port, in a directory of its own; killed on drop.
struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    const READY_TIMEOUT: Duration = Duration::from_secs(10);

    fn start() -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let dir = tempfile::tempdir().expect("temporary directory");
        let child = Process::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (scripts/test.sh installs it)");
        let server = RedisServer {
            child,
            port,
            _dir: dir,
        };
        // Polls until it answers: the process is up, not guessed with a sleep.
        let deadline = Instant::now() + Self::READY_TIMEOUT;
        while !server.answers_ping() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct RedisTarget<'a> {
    runtime: &'a Runtime,
    now_ms: Arc<AtomicU64>,
    backend: RedisBackend,
}

impl<'a> RedisTarget<'a> {
    /// A fresh backend on an empty Redis, its clock at [`START_MS`].
    fn open(runtime: &'a Runtime, url: &str) -> Result<Self, String> {
        let now_ms = Arc::new(AtomicU64::new(START_MS));
        let clock = now_ms.clone();
        let config = RedisConfig {
            hold_retention_ms: CONFIG.hold_retention_ms,
            confirmed_retention_ms: CONFIG.confirmed_retention_ms,
            clock: Some(TestClock(Arc::new(move || clock.load(Ordering::SeqCst)))),
            background_sweep: false,
            ..RedisConfig::new(stockd_redis::Target::Single(url.to_string()))
        };
        let backend = runtime.block_on(async {
            let client = redis::Client::open(url).map_err(|e| e.to_string())?;
            let mut connection = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            redis::cmd("FLUSHALL")
                .query_async::<()>(&mut connection)
                .await
                .map_err(|e| e.to_string())?;
            RedisBackend::connect(config)
                .await
                .map_err(|e| e.to_string())
        })?;
        Ok(RedisTarget {
            runtime,
            now_ms,
            backend,
        })
    }
}

impl model::Target for RedisTarget<'_> {
    fn execute(&mut self, commands: &[Command]) -> Result<Vec<Outcome>, String> {
        self.runtime
            .block_on(Backend::execute(&self.backend, commands.to_vec()))
            .map_err(|e| e.to_string())
    }

    fn advance(&mut self, ms: u64, sweep: bool) -> Result<(), String> {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
        if !sweep {
            return Ok(());
        }
        self.runtime
            .block_on(self.backend.sweep_now())
            .map_err(|e| e.to_string())
    }

    fn events_after(&mut self, after: u64) -> Result<Vec<Event>, String> {
        self.runtime
            .block_on(model::read_events(&self.backend, after))
    }

    fn views(&mut self, holds: &[HoldId]) -> Result<Views, String> {
        self.runtime
            .block_on(model::read_views(&self.backend, holds))
    }
}

/// The Redis library agrees with the model at every step (64 sequences of 50-200 steps by
/// default; `PROPTEST_CASES` changes the count).
#[test]
fn redis_matches_model() {
    let server = RedisServer::start();
    let url = server.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // Backends are made and dropped inside the runtime (their tasks live there).
    let _entered = runtime.enter();
    let mut runner = TestRunner::new(Config {
        cases: model::cases(64),
        max_shrink_iters: 1_024,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&model::sequences(50..=200), |steps| {
        let mut target = RedisTarget::open(&runtime, &url)
            .map_err(|e| TestCaseError::fail(format!("connecting to Redis: {e}")))?;
        model::check_sequence(&mut target, &steps)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
