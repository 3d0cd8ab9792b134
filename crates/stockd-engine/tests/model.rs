//! The model sequences of stockd-model, run through the `Backend` trait against the embedded
//! engine: every outcome, event (read back from the feed) and view must be the model's, as they
//! are for the core's `State`.
//!
//! Time is a [`ManualClock`] that only the runner moves. Every batch the writer runs first does
//! what time did up to the clock's now (`State::tick`), so after moving the clock the target
//! sends an empty request: a batch with nothing else in it, answered once the expiries it wrote
//! are durable and in the feed. A writer that wakes by itself in between ticks at the same now,
//! which changes nothing the next tick would not. The engine checks the core's invariants after
//! every batch (tests are debug builds); a broken one stops its writer, which `ready` reports.

use std::sync::Arc;

use proptest::test_runner::{Config, TestRunner};
use stockd_core::{Backend, Command, Event, HoldId, Outcome};
use stockd_engine::{Engine, EngineConfig, ManualClock};
use stockd_model::rules::{self, OnBackend, Parking};
use stockd_model::{self as model, Target, Views, CONFIG, START_MS};
use tokio::runtime::Runtime;

struct EngineTarget<'a> {
    runtime: &'a Runtime,
    clock: Arc<ManualClock>,
    engine: Engine,
    // Dropped after the engine, which has let go of the directory by then.
    _dir: tempfile::TempDir,
}

impl<'a> EngineTarget<'a> {
    fn open(runtime: &'a Runtime) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let clock = Arc::new(ManualClock::new(START_MS));
        let mut config = EngineConfig::new(dir.path());
        config.state = CONFIG;
        let engine = Engine::open(config, clock.clone()).map_err(|e| e.to_string())?;
        Ok(EngineTarget {
            runtime,
            clock,
            engine,
            _dir: dir,
        })
    }
}

impl Target for EngineTarget<'_> {
    fn execute(&mut self, commands: &[Command]) -> Result<Vec<Outcome>, String> {
        self.runtime
            .block_on(Backend::execute(&self.engine, commands.to_vec()))
            .map_err(|e| e.to_string())
    }

    fn advance(&mut self, ms: u64, _sweep: bool) -> Result<(), String> {
        self.clock.advance(ms);
        self.execute(&[]).map(drop)
    }

    fn sweeps_before_every_request(&self) -> bool {
        true
    }

    fn events_after(&mut self, after: u64) -> Result<Vec<Event>, String> {
        self.runtime
            .block_on(model::read_events(&self.engine, after))
    }

    fn views(&mut self, holds: &[HoldId]) -> Result<Views, String> {
        self.runtime
            .block_on(model::read_views(&self.engine, holds))
    }

    fn check_invariants(&mut self) -> Result<(), String> {
        self.runtime
            .block_on(Backend::ready(&self.engine))
            .map_err(|e| e.to_string())
    }
}

/// The engine agrees with the model at every step (128 sequences of 50-200 steps by default;
/// `PROPTEST_CASES` changes the count).
#[test]
fn engine_matches_model() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut runner = TestRunner::new(Config {
        cases: model::cases(128),
        max_shrink_iters: 1_024,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&model::sequences(50..=200), |steps| {
        let mut target = EngineTarget::open(&runtime).map_err(|e| {
            proptest::test_runner::TestCaseError::fail(format!("opening the engine: {e}"))
        })?;
        model::check_sequence(&mut target, &steps)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// The engine for stockd-model's rule scenarios: its parked requests are the `waiters` gauge.
struct EngineParking {
    clock: Arc<ManualClock>,
    engine: Engine,
    /// The seq of the last event read.
    seen: u64,
    _dir: tempfile::TempDir,
}

impl EngineParking {
    fn open() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let clock = Arc::new(ManualClock::new(rules::T0));
        let mut config = EngineConfig::new(dir.path());
        config.state = rules::CONFIG;
        let engine = Engine::open(config, clock.clone()).map_err(|e| e.to_string())?;
        Ok(EngineParking {
            clock,
            engine,
            seen: 0,
            _dir: dir,
        })
    }
}

impl Parking for EngineParking {
    fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.engine.clone())
    }

    fn set_clock(&mut self, now_ms: u64) {
        self.clock.set(now_ms);
    }

    /// The writer does what time did before every batch: an empty one is a sweep.
    fn sweep(&mut self, runtime: &Runtime) -> Result<(), String> {
        runtime
            .block_on(Backend::execute(&self.engine, Vec::new()))
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn parked_with(&mut self, _command: &Command) -> Result<usize, String> {
        self.parked()
    }

    fn parked(&mut self) -> Result<usize, String> {
        let stats = self.engine.stats();
        let waiters = stats
            .gauges
            .iter()
            .find(|(name, _)| *name == "waiters")
            .ok_or("the engine has no waiters gauge")?;
        Ok(waiters.1 as usize)
    }

    fn events(&mut self, runtime: &Runtime) -> Result<Vec<Event>, String> {
        let events = runtime.block_on(model::read_events(&self.engine, self.seen))?;
        if let Some(last) = events.last() {
            self.seen = last.seq;
        }
        Ok(events)
    }
}

/// The engine follows stockd-model's rule scenarios (the same scenarios run on the core's
/// `State` and on Redis).
#[test]
fn engine_follows_the_rule_scenarios() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let runtime = &runtime;
    rules::run_scenarios(|| {
        let parking = EngineParking::open().expect("opening the engine");
        Box::new(OnBackend::new(runtime, parking))
    });
}
