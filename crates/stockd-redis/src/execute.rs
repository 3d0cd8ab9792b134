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

fn unexpected_answer(answer: &Answer) -> BackendError {
    BackendError::Unavailable(format!("unexpected answer from Redis: {answer:?}"))
}

impl RedisBackend {
    /// Runs a request's commands in order and answers each (a command that fails validation
    /// is answered without reaching Redis).
    pub(crate) async fn run(&self, commands: Vec<Command>) -> Result<Vec<Outcome>, BackendError> {
        let shared = &self.shared;
        let mut outcomes: Vec<Option<Outcome>> = commands
            .iter()
            .map(|command| command.validate().err().map(Err))
            .collect();
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
            if let Command::ListHolds { .. } = &commands[next] {
                outcomes[next] = Some(self.list_holds(&commands[next]).await?);
                next += 1;
                continue;
            }
            // Only a restock naming a request id on a partitioned dataset asks the other
            // partitions first; every other command goes straight to its group.
            if shared.asks_other_partitions(&commands[next]) {
                if let Some(conflict) = self.restock_seen_elsewhere(&commands[next]).await? {
                    outcomes[next] = Some(Err(conflict));
                    next += 1;
                    continue;
                }
            }
            // The rest of the request, up to the next command that goes elsewhere, in one group.
            let partition = shared.first_partition(&commands[next]);
            let group: Vec<usize> = (next..commands.len())
                .take_while(|&i| {
                    !matches!(
                        commands[i],
                        Command::ListPools { .. } | Command::ListHolds { .. }
                    ) && shared.first_partition(&commands[i]) == partition
                        // Such a restock starts a group of its own, after its check.
                        && (i == next || !shared.asks_other_partitions(&commands[i]))
                })
                .filter(|&i| outcomes[i].is_none())
                .collect();
            let last = *group.last().expect("group has the first command");
            let ops = group
                .iter()
                .map(|&i| wire::encode(&commands[i], shared.route(&commands[i], partition, false)))
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
                outcomes[i] = Some(self.resolve(partition, &commands[i], answer).await?);
                if !finished_here {
                    resume_at = i + 1;
                    break;
                }
            }
            next = resume_at;
        }
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every command answered"))
            .collect())
    }

    /// A restock naming a request id, on a dataset of several partitions: the id is remembered
    /// in the partition of the pool it first restocked, so every other partition is asked
    /// whether it remembers the id for another pool (a conflict) before the restock runs in its
    /// own. A retry of the same pool is decided atomically in that pool's partition; only two
    /// first uses of one id on pools of different partitions, at the same moment, can both
    /// pass this check.
    async fn restock_seen_elsewhere(
        &self,
        command: &Command,
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
        let own = shared.first_partition(command);
        for partition in (0..shared.partitions).filter(|&k| k != own) {
            let op = Op {
                name: "restock_seen",
                args: vec![request_id.to_string(), pool.to_string(), delta.to_string()],
            };
            match shared.submit_one(partition, op).await? {
                Answer::Unseen => {}
                Answer::Done(Err(conflict)) => return Ok(Some(conflict)),
                other => return Err(unexpected_answer(&other)),
            }
        }
        Ok(None)
    }

    /// Finishes one command from the library's answer to it at `partition`.
    async fn resolve(
        &self,
        partition: u32,
        command: &Command,
        answer: Answer,
    ) -> Result<Outcome, BackendError> {
        let shared = &self.shared;
        let mut partition = partition;
        let mut answer = answer;
        // At most one move: the directory points at the home, and the home never moves on.
        for _ in 0..2 {
            match answer {
                Answer::Done(outcome) => return Ok(outcome),
                Answer::Made { created_at_ms } => {
                    let Command::Reserve(request) = command else {
                        return Err(unexpected_answer(&answer));
                    };
                    return Ok(Ok(Reply::Hold {
                        hold: wire::made_hold(request, partition, created_at_ms),
                        created: true,
                    }));
                }
                Answer::Settled { error, settled } => {
                    let shared = shared.clone();
                    detached(async move {
                        for expired in settled {
                            let (hold, apply) = (&expired.hold, &expired.apply);
                            cross::apply_parts(&shared, partition, hold, apply, &expired.attempt)
                                .await?;
                        }
                        Ok(())
                    })
                    .await?;
                    return Ok(Err(error));
                }
                Answer::Decided {
                    reply,
                    apply,
                    attempt,
                } => {
                    if let Reply::Hold { hold, .. } = &reply {
                        let (shared, hold) = (shared.clone(), hold.clone());
                        detached(async move {
                            cross::apply_parts(&shared, partition, &hold, &apply, &attempt).await
                        })
                        .await?;
                    }
                    return Ok(Ok(reply));
                }
                Answer::Parked(ticket) => return self.wait(partition, ticket, command).await,
                Answer::Cross => {
                    let Command::Reserve(request) = command else {
                        return Err(unexpected_answer(&Answer::Cross));
                    };
                    let (shared, request) = (shared.clone(), request.clone());
                    return detached(
                        async move { cross::reserve(&shared, partition, &request).await },
                    )
                    .await;
                }
                Answer::Precheck(hold) => {
                    let Command::Refund { restock, .. } = command else {
                        return Err(unexpected_answer(&Answer::Precheck(hold)));
                    };
                    let (shared, restock) = (shared.clone(), *restock);
                    return detached(async move {
                        cross::refund(&shared, partition, &hold, restock).await
                    })
                    .await;
                }
                Answer::Moved(home) => {
                    partition = home;
                    let op = wire::encode(command, shared.route(command, home, true));
                    answer = shared.submit_one(home, op).await?;
                }
                other => return Err(unexpected_answer(&other)),
            }
        }
        Err(BackendError::Unavailable(
            "the hold's directory entry points at a partition that does not hold it".into(),
        ))
    }
}
