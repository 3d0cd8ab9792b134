//! Test builds only (feature `call-faults`): faults a test injects around every library call a
//! server makes, so that a simulation can drive the real dispatcher and the real library through
//! the schedules a network and a crash produce (tests/sim.rs).
//!
//! A test gives [`RedisConfig::call_faults`](crate::RedisConfig) a [`CallFaults`]; each
//! `LIBRARY_call` asks it what to do: delay before sending (which reorders the call against
//! the server's other calls and other servers'), fail without sending (nothing ran), send and
//! then lose the reply (it ran: the caller sees the error a broken connection gives), send the
//! same call twice with its call id, or fail because the server is dead (every call from the
//! moment it was killed, including one whose reply was on its way). It must never change what a
//! call carries or what a reply says: a fault is something a real network or a real crash can do.
//! Production builds do not have this module.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};

use crate::shared::Shared;
use crate::wire::Op;

/// What happens to one call, decided before it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallAction {
    /// Sent as usual.
    Send,
    /// Not sent: the caller gets an error and nothing ran.
    Fail,
    /// Sent and run, and the reply is lost: the caller gets an error although the call ran.
    DropReply,
    /// Sent twice with the same call id, both at once or the second after the first's reply;
    /// the caller gets the second reply (a resend after a broken connection). Only a Cluster's
    /// calls carry an id; elsewhere a real connection never resends, and the call is sent once.
    Twice { concurrent: bool },
}

/// A call's fate: wait `delay`, then `action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallFault {
    pub delay: Duration,
    pub action: CallAction,
}

impl CallFault {
    pub const NONE: CallFault = CallFault {
        delay: Duration::ZERO,
        action: CallAction::Send,
    };
}

/// The test's side: decides each call's fate, and says whether the server is dead.
pub trait CallFaults: Send + Sync {
    /// The fate of a call to `partition` carrying `groups` (one per request, in order). A dead
    /// server answers `Fail`; a server dying at this very call answers `Fail` (before sending)
    /// or `DropReply` (after Redis ran it) and is dead from then on.
    fn fault(&self, partition: u32, groups: &[&[Op]]) -> CallFault;
    /// Whether the server is dead: asked after a delay (it may have died meanwhile: the call is
    /// not sent) and once a reply is in (it died before hearing it: the reply is lost).
    fn killed(&self) -> bool;
}

/// The hook as `RedisConfig` holds it.
#[derive(Clone)]
pub struct CallFaultsHook(pub Arc<dyn CallFaults>);

impl std::fmt::Debug for CallFaultsHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallFaultsHook")
    }
}

fn lost(why: &'static str) -> RedisError {
    RedisError::from((ErrorKind::Io, "call fault", why.to_string()))
}

/// `link.fcall(cmd, touch)` as the faults decide.
pub(crate) async fn fcall(
    shared: &Shared,
    partition: u32,
    groups: &[&[Op]],
    cmd: &Cmd,
    touch: Option<&str>,
) -> RedisResult<Value> {
    let Some(hook) = &shared.config.call_faults else {
        return shared.link.fcall(cmd, touch).await;
    };
    let fault = hook.0.fault(partition, groups);
    if !fault.delay.is_zero() {
        tokio::time::sleep(fault.delay).await;
        if hook.0.killed() {
            return Err(lost("the server died while the call waited: not sent"));
        }
    }
    let reply = match fault.action {
        CallAction::Send => shared.link.fcall(cmd, touch).await,
        CallAction::Fail => return Err(lost("not sent")),
        CallAction::DropReply => {
            let _ = shared.link.fcall(cmd, touch).await;
            return Err(lost("sent, reply lost"));
        }
        CallAction::Twice { .. } if shared.call_prefix.is_none() => {
            shared.link.fcall(cmd, touch).await
        }
        CallAction::Twice { concurrent: true } => {
            let (_, second) = futures_util::future::join(
                shared.link.fcall(cmd, touch),
                shared.link.fcall(cmd, touch),
            )
            .await;
            second
        }
        CallAction::Twice { concurrent: false } => {
            let _ = shared.link.fcall(cmd, touch).await;
            shared.link.fcall(cmd, touch).await
        }
    };
    if hook.0.killed() {
        return Err(lost("the server died before the reply came"));
    }
    reply
}
