//! `release`: gives a held hold's units back before it expires.
//!
//! It decides from the settled hold's status: held is released, released or expired is a replay
//! (the units are back either way), confirmed or refunded is an error. It must never move units
//! itself.
//!
//! Its Lua twin is `crates/stockd-redis/lua/cmd/release.lua`.

use crate::command::Outcome;
use crate::error::Error;
use crate::ids::HoldId;
use crate::record::Change;
use crate::state::{Effects, State};
use crate::view::HoldStatus;

impl State {
    pub(in crate::state) fn release(
        &mut self,
        hold_id: HoldId,
        now_ms: u64,
        effects: &mut Effects,
    ) -> Outcome {
        match self.settled_status(&hold_id, now_ms, effects)? {
            HoldStatus::Held => {
                let change = Change::Released {
                    hold_id: hold_id.clone(),
                };
                self.commit_to_hold(&hold_id, now_ms, change, effects)
            }
            // Released, or expired: the stock is back either way.
            HoldStatus::Released | HoldStatus::Expired => self.hold_reply(&hold_id, false),
            HoldStatus::Confirmed => Err(Error::HoldConfirmed { hold_id }),
            HoldStatus::Refunded => Err(Error::HoldRefunded { hold_id }),
        }
    }
}
