//! The stockd family: a `stockd serve` of the lab's own (embedded engine, or on a fresh Redis),
//! loaded with `stockd bench run`'s flash workload (one pool of `--stock` units, holds of one
//! unit with `confirm: true`), one keep-alive HTTP connection per buyer. The verdict is the
//! flash scenario's: the pool and every hold whose outcome is unknown are read back from the
//! server, and the pool's `held + sold` is the counter.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;
use stockd_api::ErrorCode;

use super::driver::{Buyer, Take};
use super::{LabConfig, Variant, VariantRun};
use crate::http::{Connection, Endpoint, Request};
use crate::load::{Timing, Workload};
use crate::scenario::{Admin, Run, Scenario};

struct HttpBuyer {
    connection: Connection,
    run: Arc<Run>,
    worker: usize,
    rng: StdRng,
}

impl Buyer for HttpBuyer {
    async fn attempt(&mut self) -> Result<Take, String> {
        let (request, tag) = self
            .run
            .next(self.worker, &mut self.rng)
            .ok_or("the flash workload ran dry")?;
        let began = tokio::time::Instant::now();
        let answer = self.connection.send(&request).await;
        let timing = Timing {
            began,
            written: self.connection.written_at(),
        };
        let take = match &answer {
            Ok(answer) if answer.status == 201 => Ok(Take::Sold),
            Ok(answer)
                if answer.status == 409
                    && answer.error_code().as_deref().and_then(ErrorCode::parse)
                        == Some(ErrorCode::InsufficientStock) =>
            {
                Ok(Take::SoldOut)
            }
            Ok(answer) => Err(format!(
                "{} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            )),
            Err(why) => Err(why.clone()),
        };
        // The ledger the verdict checks: created, refused, or unknown (then asked afterwards).
        self.run.answered(self.worker, tag, &answer, timing);
        take
    }
}

/// Runs the flash workload against the stockd at `url` and reads its verdict back.
pub async fn run(variant: Variant, url: &str, config: &LabConfig) -> Result<VariantRun, String> {
    let endpoint = Endpoint::parse(url, None)?;
    let mut admin = Admin::new(&endpoint)?;
    let scenario = Scenario::Flash {
        stock: config.stock,
        buyers: config.buyers as u64,
        per_user_limit: None,
        segments: None,
    };
    let run_id = format!("lab-{}", variant.name());
    let run = Arc::new(Run::set_up(&mut admin, scenario, &run_id, config.buyers).await?);
    let mut buyers = Vec::with_capacity(config.buyers);
    for worker in 0..config.buyers {
        let mut connection = Connection::new(&endpoint)?;
        // Connected before the clock starts, as every other variant's buyers are.
        let answer = connection
            .send(&Request::get(stockd_api::paths::HEALTHZ))
            .await?;
        if answer.status != 200 {
            return Err(format!("{url}/healthz answered {}", answer.status));
        }
        buyers.push(HttpBuyer {
            connection,
            run: Arc::clone(&run),
            worker,
            rng: StdRng::seed_from_u64(
                config.seed ^ (worker as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
        });
    }
    let measured = super::driver::drive(
        buyers,
        config.max_duration,
        config.progress.then_some(variant.name()),
    )
    .await;
    let verdict = run.verdict(&mut admin).await?;
    let pool = admin.pool(&run.pools()[0]).await?;
    let committed = i64::try_from(pool.held.saturating_add(pool.sold)).unwrap_or(i64::MAX);
    let failed: Vec<String> = verdict
        .checks
        .iter()
        .filter(|check| !check.ok)
        .map(|check| format!("{}: {}", check.name, check.detail))
        .collect();
    Ok(VariantRun::counter_taken(measured, config.stock, committed).with_failed_checks(failed))
}
