//! The requests a running scenario sends, and what their answers tell: [`Workload::next`]
//! picks each worker's next request (a reserve, a lifecycle's confirm or release, a batch) and
//! [`Workload::answered`] files its outcome in the ledger. The driver times them; nothing here
//! waits or measures.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::Rng;
use stockd_api as api;

use super::body::{numbered, write_batch, ReserveBody};
use super::{Run, Scenario, Sent};
use crate::http::{Answer, Request};
use crate::load::{Timing, Workload};
use crate::paths;
use crate::race::Entrant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    Confirm,
    Release,
}

/// Tags: which hold a request was (or which holds, for a batch).
pub enum Tag {
    Hold(Sent),
    Holds(Vec<Sent>),
    Confirm(Sent),
    Release,
}

/// Of a batch's answer, only each op's status is read; the rest is skipped unparsed.
#[derive(serde::Deserialize)]
struct BatchAnswer {
    results: Vec<OpStatus>,
}

#[derive(serde::Deserialize)]
struct OpStatus {
    status: u16,
}

impl Run {
    fn hold_id(&self) -> String {
        numbered(
            &self.hold_prefix,
            self.next_id.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// A reserve's body (or a batch's reserve op), written straight from the hold's fields.
    fn reserve_body<'a>(
        &'a self,
        sent: &'a Sent,
        confirm: bool,
        ttl_ms: Option<u64>,
    ) -> ReserveBody<'a> {
        ReserveBody {
            op: false,
            hold_id: &sent.hold_id,
            items: &sent.units,
            pools: &self.pools,
            user: sent.user.as_deref(),
            confirm,
            ttl_ms,
        }
    }

    /// `POST /v1/holds` with `body`.
    fn reserve_request(body: &ReserveBody) -> Request {
        let mut json = Vec::with_capacity(128);
        body.write(&mut json);
        paths::request(api::RESERVE, &[], json.into())
    }

    /// Files the hold in the ledger; returns whether it was created.
    fn record_hold(&self, sent: Sent, answer: &Result<Answer, String>) -> bool {
        self.ledger
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .file(sent, answer)
    }
}

impl Workload for Run {
    type Tag = Tag;

    fn next(&self, worker: usize, rng: &mut StdRng) -> Option<(Request, Tag)> {
        match &self.scenario {
            Scenario::Flash { buyers, .. } => {
                let sent = Sent {
                    hold_id: self.hold_id(),
                    user: Some(numbered("u", rng.gen_range(0..(*buyers).max(1)))),
                    units: vec![(0, 1)],
                };
                let body = self.reserve_body(&sent, true, None);
                Some((Self::reserve_request(&body), Tag::Hold(sent)))
            }
            Scenario::Team { teams, buyers, .. } => {
                let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
                if ticket >= teams * buyers {
                    return None;
                }
                let (team, buyer) = (ticket % teams, ticket / teams);
                let sent = Sent {
                    hold_id: format!("{}-t{team}-b{buyer}", self.run_id),
                    user: Some(format!("b{buyer}")),
                    units: vec![(team as usize, 1)],
                };
                let body = self.reserve_body(&sent, true, None);
                Some((Self::reserve_request(&body), Tag::Hold(sent)))
            }
            Scenario::Cart { pools, items, .. } => {
                let picked = sample(rng, *pools as usize, (*items).min(*pools) as usize);
                let sent = Sent {
                    hold_id: self.hold_id(),
                    user: None,
                    units: picked.into_iter().map(|pool| (pool, 1)).collect(),
                };
                let body = self.reserve_body(&sent, true, None);
                Some((Self::reserve_request(&body), Tag::Hold(sent)))
            }
            Scenario::Lifecycle {
                confirm_share,
                release_share,
                ttl_ms,
            } => {
                let pending = self.pending[worker]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if let Some((hold_id, action)) = pending {
                    let (operation, tag) = match action {
                        Action::Confirm => (
                            api::CONFIRM,
                            Tag::Confirm(Sent {
                                hold_id: hold_id.clone(),
                                user: None,
                                units: vec![(0, 1)],
                            }),
                        ),
                        Action::Release => (api::RELEASE, Tag::Release),
                    };
                    let request = paths::request(operation, &[&hold_id], Bytes::new());
                    return Some((request, tag));
                }
                let roll: f64 = rng.gen();
                let action = if roll < *confirm_share {
                    Some(Action::Confirm)
                } else if roll < confirm_share + release_share {
                    Some(Action::Release)
                } else {
                    None // left to expire
                };
                let sent = Sent {
                    hold_id: self.hold_id(),
                    user: None,
                    units: vec![(0, 1)],
                };
                if let Some(action) = action {
                    // Set before the answer; cleared by `answered` if the reserve fails.
                    *self.pending[worker]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some((sent.hold_id.clone(), action));
                }
                let body = self.reserve_body(&sent, false, Some(*ttl_ms));
                Some((Self::reserve_request(&body), Tag::Hold(sent)))
            }
            Scenario::Batch { ops } => {
                let sents: Vec<Sent> = (0..*ops)
                    .map(|_| Sent {
                        hold_id: self.hold_id(),
                        user: None,
                        units: vec![(0, 1)],
                    })
                    .collect();
                let json =
                    write_batch(sents.iter().map(|sent| self.reserve_body(sent, true, None)));
                let request = paths::request(api::BATCH, &[], json.into());
                Some((request, Tag::Holds(sents)))
            }
        }
    }

    fn answered(
        &self,
        worker: usize,
        tag: Tag,
        answer: &Result<Answer, String>,
        timing: Timing,
    ) -> u64 {
        match tag {
            Tag::Hold(sent) => {
                if let (Scenario::Team { .. }, Ok(answer), Some(written)) =
                    (&self.scenario, answer, timing.written)
                {
                    let won = answer.status == 201;
                    let lost = answer.status == 409
                        && answer
                            .error_code()
                            .as_deref()
                            .and_then(api::ErrorCode::parse)
                            == Some(api::ErrorCode::InsufficientStock);
                    if won || lost {
                        self.entrants
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Entrant {
                                team: sent.units[0].0,
                                began: timing.began,
                                written,
                                won,
                            });
                    }
                }
                let created = matches!(answer, Ok(answer) if answer.status == 201);
                if !created && matches!(self.scenario, Scenario::Lifecycle { .. }) {
                    let mut pending = self.pending[worker]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    if pending.as_ref().is_some_and(|(id, _)| *id == sent.hold_id) {
                        *pending = None;
                    }
                }
                u64::from(self.record_hold(sent, answer))
            }
            Tag::Holds(sents) => {
                // A batch answers 200 with one result per op; anything else leaves them all
                // unknown (503, no answer) or refused (4xx: nothing was applied).
                let results = match answer {
                    Ok(answer) if answer.status == 200 => {
                        serde_json::from_slice::<BatchAnswer>(&answer.body).ok()
                    }
                    _ => None,
                };
                let mut created = 0;
                match results {
                    Some(BatchAnswer { results }) => {
                        for (sent, OpStatus { status }) in sents.into_iter().zip(results) {
                            let answer = Ok(Answer {
                                status,
                                body: Default::default(),
                            });
                            created += u64::from(self.record_hold(sent, &answer));
                        }
                    }
                    None => {
                        for sent in sents {
                            created += u64::from(self.record_hold(sent, answer));
                        }
                    }
                }
                created
            }
            Tag::Confirm(sent) => {
                if matches!(answer, Ok(answer) if answer.status == 200) {
                    self.confirmed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(sent);
                }
                0
            }
            Tag::Release => {
                if matches!(answer, Ok(answer) if answer.status == 200) {
                    self.released.fetch_add(1, Ordering::Relaxed);
                }
                0
            }
        }
    }
}
