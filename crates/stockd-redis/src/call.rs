//! The call path: one `LIBRARY_call` to one partition, with the dataset marker and the seq and
//! change counter this server has seen (so that the library refuses a Redis that came back with
//! less), and the reading of its reply. A refusal for a dataset an operator accepted is retried
//! once on the new dataset (`adopt`); every other failure is `BackendError::Unavailable`,
//! never retried here: an answer that was lost may have run.

use std::sync::atomic::Ordering;

use redis::Value;
use stockd_core::BackendError;

#[cfg(feature = "call-faults")]
use crate::call_faults;
use crate::shared::Shared;
use crate::wire::{self, Op};
use crate::{dispatch, library};

impl Shared {
    pub(crate) fn call_args(&self, function: &str, partition: u32) -> redis::Cmd {
        let marker = self.marker.lock().expect("marker lock").text.clone();
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function)
            .arg(1)
            .arg(self.keys[partition as usize].meta())
            .arg(partition)
            .arg(marker)
            .arg(self.seq_seen[partition as usize].load(Ordering::Acquire));
        cmd
    }

    /// One `LIBRARY_call` carrying `groups`; returns the answers in order.
    pub(crate) async fn call(
        &self,
        partition: u32,
        groups: &[&[Op]],
    ) -> Result<Vec<String>, BackendError> {
        let result = self.call_once(partition, groups).await;
        let result = match result {
            Err(CallError::Refused(why)) if self.adopt_newer_marker(&why).await => {
                self.call_once(partition, groups).await
            }
            other => other,
        };
        match result {
            Ok(answers) => {
                self.healthy.store(true, Ordering::Release);
                Ok(answers)
            }
            Err(error) => {
                self.healthy.store(false, Ordering::Release);
                let error = error.into_backend_error();
                tracing::warn!(partition, %error, "redis call failed");
                Err(error)
            }
        }
    }

    async fn call_once(&self, partition: u32, groups: &[&[Op]]) -> Result<Vec<String>, CallError> {
        let mut cmd = self.call_args(library::FN_CALL, partition);
        // A resent call (a Cluster connection broke) must not run twice, so it carries an id the
        // library remembers its answers under; a call of directory moves alone answers the same
        // when it runs again, and spares Redis the record (`Op::moves_elsewhere`).
        let replayable = groups
            .iter()
            .all(|group| group.iter().all(|op| op.moves_elsewhere(partition)));
        let call_id = match &self.call_prefix {
            Some(prefix) if !replayable => format!(
                "{prefix}-{}",
                self.next_call.fetch_add(1, Ordering::Relaxed)
            ),
            _ => String::new(),
        };
        cmd.arg(self.now_override())
            .arg(self.config.hold_retention_ms)
            .arg(self.config.confirmed_retention_ms)
            .arg(self.config.event_retention_max)
            .arg(call_id)
            .arg(self.rev_seen[partition as usize].load(Ordering::Acquire));
        let mut commands = 0;
        for group in groups {
            cmd.arg(group.len());
            for op in *group {
                cmd.arg(op.name).arg(op.args.len()).arg(&op.args);
            }
            commands += group.len();
        }
        self.calls_total.fetch_add(1, Ordering::Relaxed);
        self.commands_total
            .fetch_add(commands as u64, Ordering::Relaxed);
        // A call that only reads is followed by a write when changes wait for replicas, so that
        // their WAIT covers what it read (link.rs `fcall`).
        let touch = wire::reads_only(groups).then(|| self.keys[partition as usize].touch());
        let touch = touch.as_deref();
        #[cfg(not(feature = "call-faults"))]
        let value = self.link.fcall(&cmd, touch).await;
        #[cfg(feature = "call-faults")]
        let value = call_faults::fcall(self, partition, groups, &cmd, touch).await;
        let mut values = into_array(value.map_err(CallError::Redis)?)?;
        if values.is_empty() {
            return Err(CallError::Protocol("empty reply".into()));
        }
        let head = values.remove(0);
        let seq = match head {
            Value::Int(seq) => seq as u64,
            other => return Err(refusal(other)),
        };
        let Some(Value::Int(rev)) = (!values.is_empty()).then(|| values.remove(0)) else {
            return Err(CallError::Protocol("no change counter in the reply".into()));
        };
        self.rev_seen[partition as usize].fetch_max(rev as u64, Ordering::AcqRel);
        self.saw_seq(partition, seq);
        let answers = dispatch::answers(values).map_err(|e| CallError::Protocol(e.to_string()))?;
        if answers.len() != commands {
            return Err(CallError::Protocol(format!(
                "{} answers for {commands} commands",
                answers.len()
            )));
        }
        Ok(answers)
    }

    /// The time calls run at: Redis's own clock (empty), unless a test build set a clock.
    fn now_override(&self) -> String {
        #[cfg(feature = "test-clock")]
        if let Some(clock) = &self.config.clock {
            return (clock.0)().to_string();
        }
        String::new()
    }

    pub(crate) fn saw_seq(&self, partition: u32, seq: u64) {
        self.seq_seen[partition as usize].fetch_max(seq, Ordering::AcqRel);
        self.seq_watch[partition as usize].send_if_modified(|known| {
            let newer = seq > *known;
            if newer {
                *known = seq;
            }
            newer
        });
    }
}

pub(crate) enum CallError {
    Redis(redis::RedisError),
    Refused(String),
    Protocol(String),
}

impl CallError {
    pub(crate) fn into_backend_error(self) -> BackendError {
        BackendError::Unavailable(match self {
            CallError::Redis(error) => format!("redis: {error}"),
            CallError::Refused(why) => format!(
                "Redis does not hold the dataset this server served ({why}): it may have \
                 restarted empty, been restored from an old backup or failed over to a lagging \
                 replica; check it, then run `stockd redis accept`"
            ),
            CallError::Protocol(what) => format!("redis library protocol: {what}"),
        })
    }
}

pub(crate) fn into_array(value: Value) -> Result<Vec<Value>, CallError> {
    match value {
        Value::Array(values) => Ok(values),
        other => Err(CallError::Protocol(format!(
            "expected an array, got {other:?}"
        ))),
    }
}

pub(crate) fn refusal(value: Value) -> CallError {
    match value {
        Value::BulkString(bytes) => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            match text.strip_prefix('!') {
                Some(why) => CallError::Refused(why.to_string()),
                None => CallError::Protocol(text),
            }
        }
        other => CallError::Protocol(format!("{other:?}")),
    }
}
