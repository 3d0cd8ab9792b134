//! `confirm`: turns a held hold into a sale.
//!
//! It decides from the hold's status, after settling it (an overdue hold is expired first, so a
//! confirm can never beat its deadline): held is confirmed, confirmed is a replay, anything else
//! is an error naming why. It must never move units itself.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/confirm.lua`.

use crate::command::Outcome;
use crate::error::Error;
use crate::ids::HoldId;
use crate::record::Change;
use crate::state::{Effects, State};
use crate::view::HoldStatus;

impl State {
    pub(in crate::state) fn confirm(
        &mut self,
        hold_id: HoldId,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        match self.settled_status(&hold_id, now_ms, effects)? {
            HoldStatus::Held => {
                let change = Change::Confirmed {
                    hold_id: hold_id.clone(),
                };
                self.commit_to_hold(&hold_id, now_ms, change, effects)
            }
            HoldStatus::Confirmed => self.hold_reply(&hold_id, false),
            HoldStatus::Expired => Err(Error::HoldExpired { hold_id }),
            HoldStatus::Released => Err(Error::HoldReleased { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }
}
