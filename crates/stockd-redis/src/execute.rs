//! A request's commands, run: each is validated (before any lookup), the commands bound for
//! one partition travel as one group, and each answer is finished here: a hold found elsewhere
//! is followed to its home, a parked command waits (`parked`), a hold over several partitions
//! runs the cross-partition steps (`cross`). It orders calls; every decision is the library's.

use stockd_core::{BackendError, Command, Error, Outcome, Reply};

use crate::backend::RedisBackend;
use crate::cross;
#[cfg(feature = "fault-injection")]
use crate::fault;
use crate::shared::decode;
use crate::wire::{self, Answer, Op};

/// Runs the steps of a cross-partition hold to the end even if the request that started them goes
/// away (its client disconnected): stopping half-way would leave work for the sweepers, and units
/// held meanwhile.
async fn detached<T: Send + 'static>(
    steps: impl std::future::Future<Output = Result<T, BackendError>> + Send + 'static,
) -> Result<T, BackendError> {
    tokio::spawn(steps).await.map_err(|error| {
        BackendError::Unavailable(format!("cross-partition steps failed: {error}"))
    })?
}

/// Times one command is sent again before the request is answered 503: each is a pool op
/// waited out or a rebalance, a few milliseconds.
const AGAIN_MAX: u32 = 2_000;

fn unexpected_answer(answer: &Answer) -> BackendError {
    BackendError::Unavailable(format!("unexpected answer from Redis: {answer:?}"))
}

impl RedisBackend {
    /// Runs a request's commands in order and answers each (a command that fails validation
    /// is answered without reaching Redis).
    pub(crate) async fn run(&self, commands: Vec<Command>) -> Result<Vec<Outcome>, BackendError> {
        let shared = &self.shared;
        let started = tokio::time::Instant::now();
        let mut outcomes: Vec<Option<Outcome>> = commands
            .iter()
            .map(|command| command.validate().err().map(Err))
            .collect();
        // Times each command was sent again (a spread pool found, a pool op waited out).
        let mut again = vec![0u32; commands.len()];
        // Restocks whose request id this request claimed (`claim_request_id`).
        let mut claimed = vec![false; commands.len()];
        let mut next = 0;
        while next < commands.len() {
            if outcomes[next].is_some() {
                next += 1;
                continue;
            }
            if let Command::ListPools { .. } = &commands[next] {
                outcomes[next] = Some(self.list_pools(&commands[next]).await?);
                next += 1;
                continue;
            }
            // A pool made with several segments on a dataset of several partitions is spread
            // over them: a pool op (spread_ops.rs), which falls back to the plain command for a
            // pool kept whole.
            if let Command::PutPool {
                segments: Some(segments),
                ..
            } = &commands[next]
            {
                if *segments > 1 && shared.partitions > 1 {
                    outcomes[next] =
                        Some(self.put_spread(&commands[next], *segments as u32).await?);
                    next += 1;
                    continue;
                }
            }
            if let Command::ListHolds { .. } = &commands[next] {
                outcomes[next] = Some(self.list_holds(&commands[next]).await?);
                next += 1;
                continue;
            }
            // Only a restock naming a request id on a partitioned dataset claims its id first
            // (once, even when it is sent again); every other command goes straight to its group.
            if shared.claims_request_id(&commands[next]) && !claimed[next] {
                // An earlier restock of the request that was refused gives its claim back
                // first: the same id may come again for another pool in this request.
                self.take_back_refused_claims(&commands[..next], &mut claimed, &outcomes)
                    .await?;
                if let Some(conflict) = self.claim_request_id(&commands[next], "rid_claim").await? {
                    outcomes[next] = Some(Err(conflict));
                    next += 1;
                    continue;
                }
                claimed[next] = true;
            }
            // The rest of the request, up to the next command that goes elsewhere, in one group.
            let partition = shared.first_partition(&commands[next]);
            let group: Vec<usize> = (next..commands.len())
                .take_while(|&i| {
                    !matches!(
                        commands[i],
                        Command::ListPools { .. } | Command::ListHolds { .. }
                    ) && shared.first_partition(&commands[i]) == partition
                        // Such a restock starts a group of its own, after its claim.
                        && (i == next || !shared.claims_request_id(&commands[i]))
                })
                .filter(|&i| outcomes[i].is_none())
                .collect();
            let last = *group.last().expect("group has the first command");
            let ops = group
                .iter()
                .map(|&i| {
                    let wire = shared.wire_command(&commands[i]);
                    wire::encode(&wire, shared.route(&wire, partition, false))
                })
                .collect();
            let answers = shared.submit(partition, ops).await?;
            // Test builds only: die after a restock is written, before it is answered, so that
            // a test can retry it on another server.
            #[cfg(feature = "fault-injection")]
            if group
                .iter()
                .any(|&i| matches!(commands[i], Command::Restock { .. }))
            {
                fault::point("restock.after_call");
            }
            let mut resume_at = last + 1;
            for (&i, text) in group.iter().zip(&answers) {
                let (low, text) = wire::split_low(text);
                let answer = decode(text)?;
                // A command the library could not finish in this call (it parked, or the hold
                // lives elsewhere, or spans partitions) ends the group's run: it is finished
                // here, and the commands after it are sent again.
                let finished_here = matches!(
                    answer,
                    Answer::Done(_)
                        | Answer::Made { .. }
                        | Answer::Decided { .. }
                        | Answer::Settled { .. }
                );
                // A spread pool whose low-stock watch this command crossed is counted before
                // the command is answered, so that its low_stock follows the change.
                for pool in &low {
                    if let Ok(pool) = stockd_core::PoolId::parse(pool) {
                        shared.low_check(&pool).await?;
                    }
                }
                match self
                    .resolve(partition, &commands[i], answer, started)
                    .await?
                {
                    Some(outcome) => outcomes[i] = Some(outcome),
                    None => {
                        again[i] += 1;
                        if again[i] > AGAIN_MAX {
                            return Err(BackendError::Unavailable(
                                "a pool kept changing under this request".into(),
                            ));
                        }
                        resume_at = i;
                        break;
                    }
                }
                if !finished_here {
                    resume_at = i + 1;
                    break;
                }
            }
            next = resume_at;
        }
        self.take_back_refused_claims(&commands, &mut claimed, &outcomes)
            .await?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every command answered"))
            .collect())
    }

    /// A refused restock takes its claim back, so that its id stays new (as the core has it).
    /// A request that failed on the way keeps its claims: whether its restock ran is not known,
    /// and the id stays bound to that pool and delta.
    async fn take_back_refused_claims(
        &self,
        commands: &[Command],
        claimed: &mut [bool],
        outcomes: &[Option<Outcome>],
    ) -> Result<(), BackendError> {
        for (i, command) in commands.iter().enumerate() {
            if claimed[i] && matches!(outcomes[i], Some(Err(_))) {
                self.claim_request_id(command, "rid_unclaim").await?;
                claimed[i] = false;
            }
        }
        Ok(())
    }

    /// A restock naming a request id, on a dataset of several partitions: the id is remembered
    /// in its pool's partition by the call that restocks, so before that call the id is
    /// claimed (`rid_claim`) in the partition it hashes to, where two first uses of it on pools
    /// of different partitions meet: the second is a conflict. `rid_unclaim` takes back the
    /// claim of a restock that was refused. Answers the conflict, if any.
    async fn claim_request_id(
        &self,
        command: &Command,
        name: &'static str,
    ) -> Result<Option<Error>, BackendError> {
        let Command::Restock {
            pool,
            delta,
            request_id: Some(request_id),
        } = command
        else {
            return Ok(None);
        };
        let shared = &self.shared;
        let op = Op {
            name,
            args: vec![request_id.to_string(), pool.to_string(), delta.to_string()],
        };
        let partition = crate::keys::partition_of(request_id.as_str(), shared.partitions);
        match shared.submit_one(partition, op).await? {
            Answer::Unseen => Ok(None),
            Answer::Done(Err(conflict)) => Ok(Some(conflict)),
            other => Err(unexpected_answer(&other)),
        }
    }

    /// Finishes one command from the library's answer to it at `partition`.
    /// Finishes one command's answer. `None`: send the command again (the library found a pool
    /// spread over partitions that this server did not know of, a pool op was under way, or a
    /// rebalance moved units to the request's segment).
    async fn resolve(
        &self,
        partition: u32,
        command: &Command,
        answer: Answer,
        started: tokio::time::Instant,
    ) -> Result<Option<Outcome>, BackendError> {
        let shared = &self.shared;
        let mut partition = partition;
        let mut answer = answer;
        let wired = shared.wire_command(command);
        // At most one move: the directory points at the home, and the home never moves on.
        for _ in 0..2 {
            match answer {
                Answer::Segmented { pool, segments } => {
                    shared.spread.note(&pool, segments);
                    if let Command::Reserve(_) = command {
                        return Ok(None);
                    }
                    return self.on_spread_pool(command, segments).await.map(Some);
                }
                Answer::Frozen { pool, op } => {
                    return self.frozen(command, &pool, op, started).await;
                }
                Answer::Done(Err(error)) if wired != *command => {
                    return self.spread_refusal(command, error, started).await;
                }
                Answer::Done(outcome) => return Ok(Some(outcome)),
                Answer::Made { created_at_ms } => {
                    let Command::Reserve(request) = command else {
                        return Err(unexpected_answer(&answer));
                    };
                    return Ok(Some(Ok(Reply::Hold {
                        hold: wire::made_hold(request, partition, created_at_ms),
                        created: true,
                    })));
                }
                Answer::Settled { error, settled } => {
                    let shared = shared.clone();
                    detached(async move {
                        for expired in settled {
                            cross::apply_parts(
                                &shared,
                                partition,
                                expired.hold.hold_id.as_str(),
                                &expired.parts,
                                &expired.apply,
                                &expired.attempt,
                            )
                            .await?;
                        }
                        Ok(())
                    })
                    .await?;
                    return Ok(Some(Err(error)));
                }
                Answer::Decided {
                    reply,
                    apply,
                    attempt,
                    parts,
                } => {
                    if let Reply::Hold { hold, .. } = &reply {
                        let (shared, hold_id) = (shared.clone(), hold.hold_id.clone());
                        detached(async move {
                            cross::apply_parts(
                                &shared,
                                partition,
                                hold_id.as_str(),
                                &parts,
                                &apply,
                                &attempt,
                            )
                            .await
                        })
                        .await?;
                    }
                    return Ok(Some(Ok(reply)));
                }
                Answer::Parked(ticket) => {
                    return self.wait(partition, ticket, &wired).await.map(Some)
                }
                Answer::Cross => {
                    let Command::Reserve(request) = &wired else {
                        return Err(unexpected_answer(&Answer::Cross));
                    };
                    let (shared, request) = (shared.clone(), request.clone());
                    let outcome =
                        detached(async move { cross::reserve(&shared, partition, &request).await })
                            .await?;
                    return match outcome {
                        Some(Err(error)) if wired != *command => {
                            self.spread_refusal(command, error, started).await
                        }
                        // A part met a pool it did not know was spread, or a segment a pool op
                        // froze: the attempt was rolled back; sent again after a pause, for as
                        // long as a request waits for a pool op.
                        None => {
                            if started.elapsed() > crate::segments::OP_WAIT {
                                return Err(BackendError::Unavailable(
                                    "a pool of this hold is being changed as a whole; try again"
                                        .into(),
                                ));
                            }
                            tokio::time::sleep(crate::segments::OP_POLL).await;
                            Ok(None)
                        }
                        other => Ok(other),
                    };
                }
                Answer::Precheck { hold, parts } => {
                    let Command::Refund { restock, .. } = command else {
                        return Err(unexpected_answer(&Answer::Precheck { hold, parts }));
                    };
                    let (shared, restock) = (shared.clone(), *restock);
                    return detached(async move {
                        cross::refund(&shared, partition, &hold, &parts, restock).await
                    })
                    .await
                    .map(Some);
                }
                Answer::Moved(home) => {
                    partition = home;
                    let op = wire::encode(&wired, shared.route(&wired, home, true));
                    let text = shared.submit_raw(home, op).await?;
                    let (low, text) = wire::split_low(&text);
                    for pool in &low {
                        if let Ok(pool) = stockd_core::PoolId::parse(pool) {
                            shared.low_check(&pool).await?;
                        }
                    }
                    answer = decode(text)?;
                }
                other => return Err(unexpected_answer(&other)),
            }
        }
        Err(BackendError::Unavailable(
            "the hold's directory entry points at a partition that does not hold it".into(),
        ))
    }
}
