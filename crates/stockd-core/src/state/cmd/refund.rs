//! `refund`: gives a confirmed hold's sold units back to available, or, without restock, takes
//! them out of the pool (sold and total both shrink).
//!
//! It decides from the settled hold's status and refuses when any of its pools was deleted
//! (or deleted and created again) since the hold was made: the units have nowhere to go back
//! to. It must never move units itself.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/refund.lua`.

use crate::command::Outcome;
use crate::error::Error;
use crate::ids::HoldId;
use crate::record::Change;
use crate::state::{Effects, State};
use crate::view::HoldStatus;

impl State {
    pub(in crate::state) fn refund(
        &mut self,
        hold_id: HoldId,
        restock: bool,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        match self.settled_status(&hold_id, now_ms, effects)? {
            HoldStatus::Confirmed => {
                let hold = &self.data.holds[&hold_id];
                for item in hold.items.iter() {
                    let alive = self
                        .data
                        .pools
                        .get(&item.pool)
                        .is_some_and(|pool| pool.generation < hold.generation_watermark);
                    if !alive {
                        return Err(Error::PoolDeleted {
                            pool: item.pool.clone(),
                        });
                    }
                }
                let hold_id_recorded = hold_id.clone();
                let change = if restock {
                    Change::Refunded {
                        hold_id: hold_id_recorded,
                    }
                } else {
                    Change::RefundedWithoutRestock {
                        hold_id: hold_id_recorded,
                    }
                };
                self.commit_to_hold(&hold_id, now_ms, change, effects)
            }
            // A repeat answers the hold as it is, whatever restock it asks for: the first
            // refund decided where the units went.
            HoldStatus::Refunded => self.hold_reply(&hold_id, false),
            HoldStatus::Held | HoldStatus::Released | HoldStatus::Expired => {
                Err(Error::HoldNotConfirmed { hold_id })
            }
        }
    }
}
