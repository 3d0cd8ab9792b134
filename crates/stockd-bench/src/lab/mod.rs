//! `stockd bench lab`: the seed's oversell experiment (seed 002) in one command on one machine.
//! Every variant sells the same stock to the same number of concurrent buyers, each buyer on its
//! own connection looping "try to take one unit", until the variant answers "sold out" or a
//! time cap comes first (reported). The lab measures units sold per second until sold out (the
//! headline), attempts per second with the refusals beside it, the p99 of an attempt and
//! errors, and counts the units sold twice over: the sales the variant told its buyers about,
//! and its own counter read back afterwards. A row is flagged for lost updates (told "yours",
//! not counted), for units oversold beyond the stock, or for getting stuck with stock left.
//!
//! - [`driver`]: the buyer loop, the same for every variant.
//! - [`servers`]: `redis-server`, PostgreSQL (`initdb`) and `stockd serve`, started on free
//!   loopback ports in a temporary directory, stopped and removed afterwards.
//! - [`redis`], [`postgres`], [`stockd`]: the variants, one module per family.
//!
//! A variant whose server is not installed is skipped with the reason, never faked.
//!
//! With a [`Fault`], the lab plays the seed's second act: the first buyer to take a lock is slow
//! (it pauses for three leases between its read and its write) or crashes (it dies holding the
//! lock). Only the variants that hold a lock across round trips run then, and the flags and the
//! stall column show what each lock does about it.

pub mod driver;
pub mod postgres;
pub mod redis;
pub mod servers;
pub mod stockd;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

pub use driver::Fault;
use driver::Measured;
use servers::{LabDir, Postgres, RedisServer, StockdServer};

/// Every variant of the lab, in the order it runs and is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    RedisNaive,
    RedisSetnxLock,
    RedisExpiringLock,
    RedisLeaseLock,
    RedisLua,
    PgUpdate,
    PgForUpdate,
    StockdEmbedded,
    StockdRedis,
}

/// Which servers a variant needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Redis,
    Postgres,
    Stockd,
}

impl Variant {
    pub const ALL: [Variant; 9] = [
        Variant::RedisNaive,
        Variant::RedisSetnxLock,
        Variant::RedisExpiringLock,
        Variant::RedisLeaseLock,
        Variant::RedisLua,
        Variant::PgUpdate,
        Variant::PgForUpdate,
        Variant::StockdEmbedded,
        Variant::StockdRedis,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::RedisNaive => "redis-naive",
            Variant::RedisSetnxLock => "redis-setnx-lock",
            Variant::RedisExpiringLock => "redis-expiring-lock",
            Variant::RedisLeaseLock => "redis-lease-lock",
            Variant::RedisLua => "redis-lua",
            Variant::PgUpdate => "pg-update",
            Variant::PgForUpdate => "pg-for-update",
            Variant::StockdEmbedded => "stockd-embedded",
            Variant::StockdRedis => "stockd-redis",
        }
    }

    pub fn family(self) -> Family {
        match self {
            Variant::RedisNaive
            | Variant::RedisSetnxLock
            | Variant::RedisExpiringLock
            | Variant::RedisLeaseLock
            | Variant::RedisLua => Family::Redis,
            Variant::PgUpdate | Variant::PgForUpdate => Family::Postgres,
            Variant::StockdEmbedded | Variant::StockdRedis => Family::Stockd,
        }
    }

    /// What one attempt does, for the report.
    pub fn description(self) -> &'static str {
        match self {
            Variant::RedisNaive => "GET stock, then SET stock n-1 if n > 0",
            Variant::RedisSetnxLock => "SETNX lock (no expiry) or busy; GET, SET; DEL lock",
            Variant::RedisExpiringLock => "SET lock NX PX lease or busy; GET, SET; DEL lock",
            Variant::RedisLeaseLock => {
                "SET lock token NX PX lease or busy, watchdog renewing; GET, SET; \
                 compare-and-delete"
            }
            Variant::RedisLua => "one Lua script: HGET, compare, HINCRBY",
            Variant::PgUpdate => "UPDATE ... SET available = available - 1 WHERE available >= 1",
            Variant::PgForUpdate => {
                "BEGIN; SELECT ... FOR UPDATE; UPDATE ... SET available = n-1; COMMIT"
            }
            Variant::StockdEmbedded => "POST /v1/holds confirm=true to stockd serve (embedded)",
            Variant::StockdRedis => "POST /v1/holds confirm=true to stockd serve --backend redis",
        }
    }

    /// The variants the experiment expects to be flagged, and must catch: the naive one loses
    /// updates and oversells (it is the control); the expiring lock loses updates when its
    /// holder is slow (its lease runs out while the holder is inside: the seed's case against
    /// it); the SETNX lock gets stuck when its holder dies (the seed's case against it).
    pub fn fails_by_design(self, fault: Fault) -> bool {
        match self {
            Variant::RedisNaive => true,
            Variant::RedisExpiringLock => fault == Fault::SlowHolder,
            Variant::RedisSetnxLock => fault == Fault::CrashedHolder,
            _ => false,
        }
    }

    /// Whether the variant holds a lock across round trips, where a holder can be slow or die:
    /// the variants a [`Fault`] applies to.
    pub fn holds_a_lock(self) -> bool {
        matches!(
            self,
            Variant::RedisSetnxLock
                | Variant::RedisExpiringLock
                | Variant::RedisLeaseLock
                | Variant::PgForUpdate
        )
    }

    /// Whether `word` (a variant's name, or a family: `redis`, `postgres`/`pg`, `stockd`)
    /// names this variant.
    fn matches(self, word: &str) -> bool {
        word == self.name()
            || match self.family() {
                Family::Redis => word == "redis",
                Family::Postgres => word == "postgres" || word == "pg",
                Family::Stockd => word == "stockd",
            }
    }
}

/// The variants `--only` (all when empty) and `--skip` leave, in the lab's order; with a fault,
/// only the ones that hold a lock (naming another is an error). An unknown name is an error that
/// lists the known ones.
pub fn select(only: &[String], skip: &[String], fault: Fault) -> Result<Vec<Variant>, String> {
    for word in only.iter().chain(skip) {
        if !Variant::ALL.iter().any(|variant| variant.matches(word)) {
            let names: Vec<&str> = Variant::ALL.iter().map(|variant| variant.name()).collect();
            return Err(format!(
                "unknown variant {word:?}: expected one of {}, or a family (redis, postgres, stockd)",
                names.join(", ")
            ));
        }
    }
    if fault != Fault::None {
        for word in only {
            if let Some(variant) = Variant::ALL
                .iter()
                .find(|variant| variant.name() == word && !variant.holds_a_lock())
            {
                let locks: Vec<&str> = Variant::ALL
                    .iter()
                    .filter(|variant| variant.holds_a_lock())
                    .map(|variant| variant.name())
                    .collect();
                return Err(format!(
                    "--fault {} plays a lock holder's fault, and {} holds no lock: \
                     the variants that do are {}",
                    fault.name(),
                    variant.name(),
                    locks.join(", ")
                ));
            }
        }
    }
    let selected: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|variant| only.is_empty() || only.iter().any(|word| variant.matches(word)))
        .filter(|variant| !skip.iter().any(|word| variant.matches(word)))
        .filter(|variant| fault == Fault::None || variant.holds_a_lock())
        .collect();
    if selected.is_empty() {
        return Err("--only and --skip leave no variant to run".into());
    }
    Ok(selected)
}

/// One `stockd bench lab`.
#[derive(Clone, Debug)]
pub struct LabConfig {
    /// Units every variant starts with.
    pub stock: u64,
    /// Concurrent buyers, each with its own connection.
    pub buyers: usize,
    /// The time cap of each variant: it runs until it answers "sold out", or this long at most.
    pub max_duration: Duration,
    pub seed: u64,
    pub variants: Vec<Variant>,
    /// A progress line per variant (drawn only when stderr is a terminal).
    pub progress: bool,
    /// The `stockd` executable to run `serve` with; the stockd variants are skipped without it.
    pub stockd_executable: Option<PathBuf>,
    /// The fault played in the first critical section, if any.
    pub fault: Fault,
    /// The lease of the expiring and the lease lock (Redisson's default is 30 s; the lab's is
    /// short, so that a lease running out shows within a run).
    pub lease: Duration,
}

/// What a variant's run gave, before it becomes a row.
pub struct VariantRun {
    measured: Measured,
    stock: u64,
    /// Units the variant's own counter says were taken (`stock - left`, or `held + sold`).
    counter_taken: i64,
    /// Checks of the variant's own verdict that failed (stockd's, read back from the server).
    failed_checks: Vec<String>,
}

impl VariantRun {
    /// The variant's counter, read back after the run, shows `left` units of `stock`.
    pub fn counter_left(measured: Measured, stock: u64, left: i64) -> VariantRun {
        let taken = i64::try_from(stock)
            .unwrap_or(i64::MAX)
            .saturating_sub(left);
        VariantRun::counter_taken(measured, stock, taken)
    }

    /// The variant's counter, read back after the run, shows `taken` units taken.
    pub fn counter_taken(measured: Measured, stock: u64, taken: i64) -> VariantRun {
        VariantRun {
            measured,
            stock,
            counter_taken: taken,
            failed_checks: Vec::new(),
        }
    }

    /// The variant's own verdict failed these checks: the lab fails with it.
    pub fn with_failed_checks(mut self, failed: Vec<String>) -> VariantRun {
        self.failed_checks = failed;
        self
    }

    fn into_row(self, variant: Variant, fault: Fault) -> Row {
        let measured = &self.measured;
        let stock = i64::try_from(self.stock).unwrap_or(i64::MAX);
        let sold = i64::try_from(measured.sold).unwrap_or(i64::MAX);
        // The worse of what the buyers were told and what the counter says.
        let worst = sold.max(self.counter_taken);
        let oversold_units = u64::try_from(worst.saturating_sub(stock)).unwrap_or(0);
        let lost_updates_units =
            u64::try_from(sold.saturating_sub(self.counter_taken)).unwrap_or(0);
        let cap_hit = measured.first_sold_out.is_none();
        // Nothing sold in the last half of the run, and the cap came with stock left.
        let stuck = cap_hit && measured.final_stall * 2 >= measured.window;
        let mut flags = Vec::new();
        if lost_updates_units > 0 {
            flags.push(Flag::LostUpdates);
        }
        if oversold_units > 0 {
            flags.push(Flag::Oversold);
        }
        if stuck {
            flags.push(Flag::Stuck);
        }
        let mut notes = Vec::new();
        if !self.failed_checks.is_empty() {
            notes.push(format!("verdict failed: {}", self.failed_checks.join("; ")));
        }
        if let Some(at) = measured.crashed_at {
            notes.push(format!(
                "a buyer crashed holding the lock at {:.2} s",
                at.as_secs_f64()
            ));
        }
        if measured.errors > 0 {
            notes.push(format!(
                "{} errors, e.g. {}",
                measured.errors,
                measured.error_samples.join("; ")
            ));
        }
        Row {
            variant: variant.name().to_string(),
            sold_per_s: measured.sold_per_s(),
            sold_out_ms: measured.first_sold_out.map(|at| at.as_secs_f64() * 1000.0),
            cap_hit,
            sold_units: measured.sold,
            counter_sold_units: self.counter_taken,
            lost_updates_units,
            oversold_units,
            flagged: !flags.is_empty(),
            flags,
            fails_by_design: variant.fails_by_design(fault),
            attempts_per_s: measured.attempts_per_s(),
            attempts: measured.attempts,
            busy: measured.busy,
            sold_out_answers: measured.sold_out,
            errors: measured.errors,
            p50_ms: measured.quantile_ms(0.50),
            p99_ms: measured.quantile_ms(0.99),
            longest_stall_ms: measured.longest_stall.as_secs_f64() * 1000.0,
            window_s: measured.window.as_secs_f64(),
            does: variant.description().to_string(),
            verdict_failed: !self.failed_checks.is_empty(),
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        }
    }
}

/// What a row is flagged for: each is a sale the shop cannot honour, now or later, or a sale
/// that stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    /// Units told "yours" that the variant's counter does not count: its stock will sell them
    /// again (the oversell of the future, even when the run ended before it).
    LostUpdates,
    /// Units taken beyond the stock, by the answers or by the counter.
    Oversold,
    /// The time cap came with stock left and nothing sold in the last half of the run.
    Stuck,
}

impl Flag {
    fn name(self) -> &'static str {
        match self {
            Flag::LostUpdates => "lost updates",
            Flag::Oversold => "oversold",
            Flag::Stuck => "stuck",
        }
    }
}

/// One variant's line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub variant: String,
    /// Units sold per second until sold out ([`Row::sold_units`] over [`Row::sold_out_ms`], or
    /// over the whole run when the cap came first): the headline.
    pub sold_per_s: f64,
    /// When the first "sold out" answer came, from the start: how long selling the stock took.
    /// `None` when the time cap came first.
    pub sold_out_ms: Option<f64>,
    /// The time cap came before any "sold out" answer.
    pub cap_hit: bool,
    /// Units the buyers were told are theirs.
    pub sold_units: u64,
    /// Units the variant's own counter says were taken, read back after the run.
    pub counter_sold_units: i64,
    /// Units told "yours" that the counter does not count: `sold_units - counter_sold_units`,
    /// when positive.
    pub lost_updates_units: u64,
    /// Units taken beyond the stock: the worse of `sold_units` and `counter_sold_units`.
    pub oversold_units: u64,
    /// Whether any of [`Row::flags`] is set.
    pub flagged: bool,
    /// What the row is flagged for: `lost_updates`, `oversold`, `stuck`.
    pub flags: Vec<Flag>,
    /// True for the variants the experiment expects to be flagged in this run, and must catch:
    /// the naive one, the expiring lock under a slow holder, the SETNX lock under a crashed one.
    pub fails_by_design: bool,
    /// Attempts per second, whatever their outcome (sold, sold out, lock busy, error).
    pub attempts_per_s: f64,
    pub attempts: u64,
    /// Attempts refused because another buyer held the lock.
    pub busy: u64,
    /// Attempts answered "sold out".
    pub sold_out_answers: u64,
    /// Attempts that failed (no answer, an unexpected answer).
    pub errors: u64,
    pub p50_ms: f64,
    /// The 99th percentile of an attempt's latency.
    pub p99_ms: f64,
    /// The longest time without a sale while stock was left: a lock that got stuck, or kept
    /// every buyer waiting.
    pub longest_stall_ms: f64,
    /// How long the variant ran: to its last answer after "sold out", or to the cap.
    pub window_s: f64,
    /// What one attempt does.
    pub does: String,
    /// The variant's own verdict read back from its server failed (stockd's); see the note.
    pub verdict_failed: bool,
    pub note: Option<String>,
}

impl Row {
    /// "lost updates, oversold", the flags for people.
    fn flag_names(&self) -> String {
        let names: Vec<&str> = self.flags.iter().map(|flag| flag.name()).collect();
        names.join(", ")
    }
}

/// A variant that did not run, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub variant: String,
    pub reason: String,
    /// True when it was selected and its server ran, but the variant itself failed.
    pub failed: bool,
}

/// The lab's result: one row per variant that ran, and the ones that did not.
#[derive(Clone, Debug, Serialize)]
pub struct LabReport {
    pub stock: u64,
    pub buyers: usize,
    /// The time cap of each variant (it runs until it sells out, or this long).
    pub max_duration_s: f64,
    pub seed: u64,
    /// The fault played in the first critical section (`none`, `slow-holder`,
    /// `crashed-holder`).
    pub fault: Fault,
    pub lease_ms: f64,
    pub redis_persistence: &'static str,
    pub postgres_persistence: &'static str,
    pub rows: Vec<Row>,
    pub skipped: Vec<Skipped>,
}

impl LabReport {
    fn new(config: &LabConfig) -> LabReport {
        LabReport {
            stock: config.stock,
            buyers: config.buyers,
            max_duration_s: config.max_duration.as_secs_f64(),
            seed: config.seed,
            fault: config.fault,
            lease_ms: config.lease.as_secs_f64() * 1000.0,
            redis_persistence: RedisServer::PERSISTENCE,
            postgres_persistence: Postgres::PERSISTENCE,
            rows: Vec::new(),
            skipped: Vec::new(),
        }
    }

    fn record(&mut self, variant: Variant, result: Result<VariantRun, String>) {
        match result {
            Ok(run) => self.rows.push(run.into_row(variant, self.fault)),
            Err(reason) => self.skipped.push(Skipped {
                variant: variant.name().to_string(),
                reason,
                failed: true,
            }),
        }
    }

    fn skip(&mut self, variants: &[Variant], reason: &str) {
        for variant in variants {
            self.skipped.push(Skipped {
                variant: variant.name().to_string(),
                reason: reason.to_string(),
                failed: false,
            });
        }
    }

    /// Rows flagged (lost updates, oversold, stuck) whose variant must never be.
    pub fn unexpected_flags(&self) -> Vec<&Row> {
        self.rows
            .iter()
            .filter(|row| row.flagged && !row.fails_by_design)
            .collect()
    }

    /// Whether a variant failed (as opposed to being skipped for a missing server), or its own
    /// verdict did.
    pub fn any_failed(&self) -> bool {
        self.skipped.iter().any(|skipped| skipped.failed)
            || self.rows.iter().any(|row| row.verdict_failed)
    }

    /// What fails the lab, one line each: a variant's own verdict that failed, and a row
    /// flagged that must never be. Empty when the lab passes (skipped variants aside, see
    /// [`LabReport::any_failed`]).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for row in self.rows.iter().filter(|row| row.verdict_failed) {
            problems.push(format!(
                "{}: {}",
                row.variant,
                row.note.as_deref().unwrap_or("its verdict failed")
            ));
        }
        for row in self.unexpected_flags() {
            let mut what = Vec::new();
            if row.lost_updates_units > 0 {
                what.push(format!(
                    "told buyers {} units were theirs that its counter does not count \
                     (lost updates)",
                    row.lost_updates_units
                ));
            }
            if row.oversold_units > 0 {
                what.push(format!(
                    "oversold {} units beyond the stock",
                    row.oversold_units
                ));
            }
            if row.flags.contains(&Flag::Stuck) {
                what.push(format!(
                    "got stuck: nothing sold in the last {:.2} s of the {:.1} s cap, stock left",
                    row.longest_stall_ms / 1000.0,
                    self.max_duration_s
                ));
            }
            problems.push(format!(
                "{} {}, and it must never",
                row.variant,
                what.join(", ")
            ));
        }
        problems
    }

    /// The table for people.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "stockd bench lab: {} units, {} buyers, each variant until it sells out \
             (at most {:.1} s), seed {}",
            thousands(self.stock),
            self.buyers,
            self.max_duration_s,
            self.seed
        );
        let _ = writeln!(
            out,
            "each buyer: its own connection, one attempt at a time, one unit per attempt"
        );
        if let Some(fault) = self.fault.description() {
            let _ = writeln!(
                out,
                "fault: {fault} (lease {:.0} ms; only the variants holding a lock run)",
                self.lease_ms
            );
        }
        let _ = writeln!(out);
        let embedded = self
            .rows
            .iter()
            .find(|row| row.variant == Variant::StockdEmbedded.name())
            .map(|row| row.sold_per_s)
            .filter(|rate| *rate > 0.0);
        let _ = writeln!(
            out,
            "{:<19} {:>9} {:>8} {:>10} {:>8} {:>8} {:>9} {:>8} {:>11} {:>9} {:>8} {:>6} {:>8}",
            "variant",
            "sold/s",
            "vs emb.",
            "sold out",
            "sold",
            "counter",
            "lost upd.",
            "oversold",
            "attempts/s",
            "busy",
            "p99 ms",
            "errors",
            "stall"
        );
        for row in &self.rows {
            let ratio = embedded.map_or("-".to_string(), |embedded| {
                format!("{:.2}x", row.sold_per_s / embedded)
            });
            let counter = match u64::try_from(row.counter_sold_units) {
                Ok(counter) => thousands(counter),
                Err(_) => row.counter_sold_units.to_string(),
            };
            let sold_out = row.sold_out_ms.map_or_else(
                || format!("cap {:.1} s", self.max_duration_s),
                |ms| format!("{:.2} s", ms / 1000.0),
            );
            let flag = if !row.flagged {
                String::new()
            } else if row.fails_by_design {
                format!("  ({}, as expected)", row.flag_names())
            } else {
                format!("  {}", row.flag_names().to_uppercase())
            };
            let _ = writeln!(
                out,
                "{:<19} {:>9} {:>8} {:>10} {:>8} {:>8} {:>9} {:>8} {:>11} {:>9} {:>8.2} {:>6} {:>8}{flag}",
                row.variant,
                thousands(row.sold_per_s.round() as u64),
                ratio,
                sold_out,
                thousands(row.sold_units),
                counter,
                thousands(row.lost_updates_units),
                thousands(row.oversold_units),
                thousands(row.attempts_per_s.round() as u64),
                thousands(row.busy),
                row.p99_ms,
                thousands(row.errors),
                format!("{:.2} s", row.longest_stall_ms / 1000.0),
            );
        }
        let _ = writeln!(out);
        for line in [
            "sold/s: units sold per second until sold out (over the whole run when the cap came \
             first); vs emb.: against stockd-embedded",
            "sold out: when the first \"sold out\" answer came, which ends the variant's run; \
             \"cap\" when the time cap came first",
            "sold: units the buyers were told are theirs",
            "counter: units the variant's own counter says were taken, read back after the run",
            "lost upd.: sold minus counter, units told \"yours\" that the counter does not count \
             (its stock sells them again: the oversell of the future)",
            "oversold: the worse of sold and counter, beyond the stock",
            "attempts/s: attempts of any outcome (sold, sold out, lock busy, error) per second; \
             busy: attempts refused because another buyer held the lock",
            "stall: the longest time without a sale while stock was left; stuck: the cap came \
             with stock left and nothing sold in the last half of the run",
        ] {
            let _ = writeln!(out, "  {line}");
        }
        let _ = writeln!(out, "  redis persistence: {}", self.redis_persistence);
        let _ = writeln!(out, "  postgres persistence: {}", self.postgres_persistence);
        let _ = writeln!(
            out,
            "  stockd embedded persistence: its log fsync'd before it answers"
        );
        for row in self.rows.iter().filter(|row| row.cap_hit) {
            let _ = writeln!(
                out,
                "cap: {} did not sell out within the {:.1} s cap: {} of {} units sold",
                row.variant,
                self.max_duration_s,
                thousands(row.sold_units),
                thousands(self.stock)
            );
        }
        for row in &self.rows {
            if let Some(note) = &row.note {
                let _ = writeln!(out, "note: {}: {note}", row.variant);
            }
        }
        for skipped in &self.skipped {
            let what = if skipped.failed { "failed" } else { "skipped" };
            let _ = writeln!(out, "{}: {what}, {}", skipped.variant, skipped.reason);
        }
        out
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Runs the selected variants, family by family, each family on servers of its own, and
/// stops and removes every server before it returns (or when the future is dropped).
pub async fn run(config: &LabConfig) -> LabReport {
    let mut report = LabReport::new(config);
    let dir = match LabDir::create() {
        Ok(dir) => dir,
        Err(reason) => {
            report.skip(&config.variants, &reason);
            return report;
        }
    };
    let of = |family: Family| -> Vec<Variant> {
        config
            .variants
            .iter()
            .copied()
            .filter(|variant| variant.family() == family)
            .collect()
    };

    let redis_variants = of(Family::Redis);
    if !redis_variants.is_empty() {
        match async { RedisServer::start(&dir.subdir("redis")?).await }.await {
            Ok(server) => {
                for variant in redis_variants {
                    report.record(variant, redis::run(variant, &server, config).await);
                }
            }
            Err(reason) => report.skip(&redis_variants, &reason),
        }
    }

    let postgres_variants = of(Family::Postgres);
    if !postgres_variants.is_empty() {
        // The buyers, the lab's own connection, and a few to spare.
        let max_connections = config.buyers + 10;
        let server = async {
            let server = Postgres::start(&dir.subdir("postgres")?, max_connections).await?;
            postgres::set_up(&server).await?;
            Ok::<_, String>(server)
        };
        match server.await {
            Ok(server) => {
                for variant in postgres_variants {
                    report.record(variant, postgres::run(variant, &server, config).await);
                }
            }
            Err(reason) => report.skip(&postgres_variants, &reason),
        }
    }

    for variant in of(Family::Stockd) {
        let Some(executable) = &config.stockd_executable else {
            report.skip(&[variant], "no stockd executable to run `serve` with");
            continue;
        };
        let result = async {
            let path = dir.subdir(variant.name())?;
            // stockd on Redis gets a Redis of its own, fresh, persisted like the lab's.
            let (redis, backend) = if variant == Variant::StockdRedis {
                let redis =
                    RedisServer::start(&dir.subdir(&format!("{}-redis", variant.name()))?).await?;
                let url = redis.url();
                (Some(redis), Some(url))
            } else {
                (None, None)
            };
            let server = StockdServer::start(executable, &path, backend.as_deref()).await?;
            let result = stockd::run(variant, &server.url(), config).await;
            drop(server);
            drop(redis);
            result
        }
        .await;
        match result {
            Err(reason) if reason.contains("redis-server not found") => {
                report.skip(&[variant], &reason)
            }
            result => report.record(variant, result),
        }
    }
    drop(dir);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|word| word.to_string()).collect()
    }

    #[test]
    fn variants_are_selected_by_name_or_family_in_the_lab_order() {
        let none = Fault::None;
        assert_eq!(select(&[], &[], none).unwrap(), Variant::ALL.to_vec());
        assert_eq!(
            select(&words(&["stockd-redis", "redis-naive"]), &[], none).unwrap(),
            [Variant::RedisNaive, Variant::StockdRedis]
        );
        assert_eq!(
            select(&words(&["postgres"]), &[], none).unwrap(),
            [Variant::PgUpdate, Variant::PgForUpdate]
        );
        assert_eq!(
            select(&words(&["redis"]), &words(&["redis-lease-lock"]), none).unwrap(),
            [
                Variant::RedisNaive,
                Variant::RedisSetnxLock,
                Variant::RedisExpiringLock,
                Variant::RedisLua
            ]
        );
        let why = select(&words(&["memcached"]), &[], none).unwrap_err();
        assert!(
            why.contains("redis-naive") && why.contains("memcached"),
            "{why}"
        );
        assert!(select(&[], &words(&["redis", "pg", "stockd"]), none).is_err());
        // A fault leaves the variants that hold a lock, and refuses one named that does not.
        assert_eq!(
            select(&[], &[], Fault::SlowHolder).unwrap(),
            [
                Variant::RedisSetnxLock,
                Variant::RedisExpiringLock,
                Variant::RedisLeaseLock,
                Variant::PgForUpdate
            ]
        );
        assert_eq!(
            select(&words(&["postgres"]), &[], Fault::CrashedHolder).unwrap(),
            [Variant::PgForUpdate]
        );
        let why = select(&words(&["redis-lua"]), &[], Fault::CrashedHolder).unwrap_err();
        assert!(
            why.contains("redis-lua holds no lock") && why.contains("redis-lease-lock"),
            "{why}"
        );
    }

    /// 100 attempts in 2 s, `sold` of them sales, the first "sold out" at 1.5 s.
    fn measured(sold: u64, errors: u64) -> Measured {
        let mut latency_us = hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for micros in 1..=100u64 {
            latency_us.record(micros * 100).unwrap();
        }
        Measured {
            attempts: 100,
            sold,
            sold_out: 100 - sold - errors,
            busy: 0,
            errors,
            error_samples: (0..errors).map(|n| format!("error {n}")).collect(),
            latency_us,
            window: Duration::from_secs(2),
            first_sold_out: Some(Duration::from_millis(1500)),
            longest_stall: Duration::from_millis(20),
            final_stall: Duration::ZERO,
            crashed_at: None,
        }
    }

    /// `sold` sales and 100 "busy" answers until the 2 s cap; the last sale `final_stall`
    /// before the end.
    fn capped(sold: u64, final_stall: Duration) -> Measured {
        Measured {
            attempts: sold + 100,
            sold,
            sold_out: 0,
            busy: 100,
            first_sold_out: None,
            longest_stall: final_stall,
            final_stall,
            ..measured(0, 0)
        }
    }

    #[test]
    fn lost_updates_and_oversold_units_are_counted_apart_and_each_flags_the_row() {
        // Issue 27's run: the cap came first, 436 told "yours", the counter says 223: nothing
        // beyond the stock yet, 213 units that the stock will sell again.
        let row = VariantRun::counter_left(capped(436, Duration::from_millis(10)), 500, 277)
            .into_row(Variant::RedisExpiringLock, Fault::SlowHolder);
        assert_eq!((row.sold_units, row.counter_sold_units), (436, 223));
        assert_eq!((row.lost_updates_units, row.oversold_units), (213, 0));
        assert_eq!(row.flags, [Flag::LostUpdates]);
        assert!(row.flagged && row.fails_by_design && row.cap_hit);
        assert_eq!(row.sold_out_ms, None);
        assert_eq!(row.sold_per_s, 436.0 / 2.0);
        // Told 60 buyers yes, the counter went down by 50 only: both.
        let row = VariantRun::counter_left(measured(60, 0), 50, 0)
            .into_row(Variant::RedisNaive, Fault::None);
        assert_eq!((row.lost_updates_units, row.oversold_units), (10, 10));
        assert_eq!(row.flags, [Flag::LostUpdates, Flag::Oversold]);
        // Told 50 yes, but the counter went below zero: oversold, no update lost.
        let row = VariantRun::counter_left(measured(50, 0), 50, -3)
            .into_row(Variant::PgUpdate, Fault::None);
        assert_eq!((row.lost_updates_units, row.oversold_units), (0, 3));
        assert_eq!(row.flags, [Flag::Oversold]);
        assert!(!row.fails_by_design);
        // Exactly the stock: nothing flagged; errors are counted and explained.
        let row = VariantRun::counter_taken(measured(50, 2), 50, 50)
            .into_row(Variant::StockdEmbedded, Fault::None);
        assert_eq!((row.lost_updates_units, row.oversold_units), (0, 0));
        assert_eq!((row.flagged, row.cap_hit, row.errors), (false, false, 2));
        assert!(!row.verdict_failed);
        assert!(row.note.unwrap().contains("error 1"));
        let row = VariantRun::counter_taken(measured(50, 0), 50, 50)
            .with_failed_checks(vec!["holds: 49 acknowledged, 50 found".into()])
            .into_row(Variant::StockdEmbedded, Fault::None);
        assert!(row.verdict_failed);
        assert!(row.note.unwrap().contains("verdict failed: holds"));
        // Sold per second of selling (1.5 s to "sold out"); attempts over the whole run.
        assert!(
            (row.sold_per_s - 50.0 / 1.5).abs() < 1e-9,
            "{}",
            row.sold_per_s
        );
        assert_eq!(row.attempts_per_s, 50.0);
        assert_eq!(row.sold_out_ms, Some(1500.0));
        assert!((row.p99_ms - 9.9).abs() < 0.01, "{}", row.p99_ms);
    }

    #[test]
    fn a_run_that_sells_nothing_in_the_last_half_of_its_cap_is_stuck() {
        let stuck = VariantRun::counter_left(capped(3, Duration::from_millis(1900)), 50, 47)
            .into_row(Variant::RedisSetnxLock, Fault::CrashedHolder);
        assert_eq!(stuck.flags, [Flag::Stuck]);
        assert!(stuck.fails_by_design);
        // Slow, not stuck: still selling when the cap came.
        let slow = VariantRun::counter_left(capped(30, Duration::from_millis(50)), 50, 20)
            .into_row(Variant::PgForUpdate, Fault::None);
        assert!(slow.cap_hit && !slow.flagged, "{slow:?}");
        // The same stall on a variant that must never get stuck is not expected.
        let stuck = VariantRun::counter_left(capped(3, Duration::from_millis(1900)), 50, 47)
            .into_row(Variant::RedisLeaseLock, Fault::CrashedHolder);
        assert!(stuck.flagged && !stuck.fails_by_design);
    }

    #[test]
    fn the_table_flags_what_was_not_expected_and_names_the_cap_and_what_was_skipped() {
        let config = LabConfig {
            stock: 50,
            buyers: 4,
            max_duration: Duration::from_secs(2),
            seed: 1,
            variants: Variant::ALL.to_vec(),
            progress: false,
            stockd_executable: None,
            fault: Fault::None,
            lease: Duration::from_secs(1),
        };
        let mut report = LabReport::new(&config);
        report.record(
            Variant::RedisNaive,
            Ok(VariantRun::counter_left(measured(60, 0), 50, 0)),
        );
        // Lost updates only, and the cap came first.
        report.record(
            Variant::RedisLua,
            Ok(VariantRun::counter_left(
                capped(40, Duration::from_millis(5)),
                50,
                20,
            )),
        );
        report.record(
            Variant::StockdEmbedded,
            Ok(VariantRun::counter_taken(measured(50, 0), 50, 50)),
        );
        report.skip(&[Variant::PgUpdate], "initdb not found");
        report.record(Variant::StockdRedis, Err("stockd did not start".into()));
        let table = report.table();
        assert!(
            table.contains("(lost updates, oversold, as expected)"),
            "{table}"
        );
        assert!(table.contains("  LOST UPDATES\n"), "{table}");
        assert!(table.contains("cap 2.0 s"), "{table}");
        assert!(
            table.contains("cap: redis-lua did not sell out within the 2.0 s cap: 40 of 50"),
            "{table}"
        );
        assert!(
            table.contains("pg-update: skipped, initdb not found"),
            "{table}"
        );
        assert!(
            table.contains("stockd-redis: failed, stockd did not start"),
            "{table}"
        );
        assert!(table.contains("1.00x"), "{table}");
        let unexpected: Vec<&str> = report
            .unexpected_flags()
            .iter()
            .map(|row| row.variant.as_str())
            .collect();
        assert_eq!(unexpected, ["redis-lua"]);
        let problems = report.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("redis-lua told buyers 10 units were theirs"),
            "{problems:?}"
        );
        assert!(report.any_failed());
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["max_duration_s"], 2.0);
        assert_eq!(
            json["rows"][0]["flags"],
            serde_json::json!(["lost_updates", "oversold"])
        );
        assert_eq!(json["rows"][1]["flagged"], true);
        assert_eq!(json["rows"][1]["cap_hit"], true);
        assert_eq!(json["rows"][2]["flags"], serde_json::json!([]));
        for field in [
            "variant",
            "sold_per_s",
            "sold_out_ms",
            "lost_updates_units",
            "oversold_units",
            "attempts_per_s",
            "busy",
            "p99_ms",
            "errors",
        ] {
            assert!(json["rows"][0].get(field).is_some(), "{field}: {json}");
        }
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
