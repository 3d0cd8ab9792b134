//! `extend`: sets a new deadline, `now_ms + ttl_ms`, on a held hold.
//!
//! It decides from the settled hold's status: only a hold still held can be extended, so an
//! overdue hold is expired first and stays expired. It must never move units.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/extend.lua`.

use crate::command::Outcome;
use crate::error::Error;
use crate::ids::HoldId;
use crate::record::Change;
use crate::state::{Effects, State};
use crate::view::HoldStatus;

impl State {
    pub(in crate::state) fn extend(
        &mut self,
        hold_id: HoldId,
        ttl_ms: u64,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        match self.settled_status(&hold_id, now_ms, effects)? {
            HoldStatus::Held => {
                let change = Change::Extended {
                    hold_id: hold_id.clone(),
                    expires_at_ms: now_ms + ttl_ms,
                };
                self.commit_to_hold(&hold_id, now_ms, change, effects)
            }
            HoldStatus::Expired => Err(Error::HoldExpired { hold_id }),
            HoldStatus::Confirmed => Err(Error::HoldConfirmed { hold_id }),
            HoldStatus::Released => Err(Error::HoldReleased { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }
}
