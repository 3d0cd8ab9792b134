//! The dataset marker: how a server tells the Redis it served from one that came back with less.
//!
//! Every partition's meta hash holds the same marker, `RANDOM@EPOCH`, written once when the first
//! server meets an empty Redis (epoch 0) and rewritten only by an operator's `stockd redis
//! accept` (epoch = the Redis clock in ms, so later accepts have larger epochs). Every call
//! carries the marker the server knows and the highest event seq it has seen; the library
//! refuses the call before reading anything when either does not match. A server adopts a
//! marker only when its epoch is larger than the one it knows: that is an operator's accept,
//! never a Redis that restarted empty and was re-initialised by a newly started server.

use rand::Rng;
use redis::Value;

use crate::keys::PartitionKeys;
use crate::library;
use crate::link::{Link, Target};
use crate::StartError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub text: String,
    pub epoch: u64,
}

impl Marker {
    pub fn parse(text: &str) -> Marker {
        let epoch = text
            .rsplit_once('@')
            .and_then(|(_, epoch)| epoch.parse().ok())
            .unwrap_or(0);
        Marker {
            text: text.to_string(),
            epoch,
        }
    }

    fn new(epoch: u64) -> Marker {
        let id: u64 = rand::thread_rng().gen();
        Marker::parse(&format!("{id:016x}@{epoch}"))
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads the marker of every partition, writing a new one where Redis has none (an empty Redis),
/// and checks that all partitions agree, with this layout and partition count.
pub(crate) async fn init(
    link: &Link,
    keys: &[PartitionKeys],
    partitions: u32,
) -> Result<Marker, StartError> {
    let fresh = Marker::new(0);
    let mut found: Option<Marker> = None;
    for partition_keys in keys {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(library::FN_INIT)
            .arg(1)
            .arg(partition_keys.meta())
            .arg(&fresh.text)
            .arg(partitions);
        let Value::Array(values) = link.fcall(&cmd).await? else {
            return Err(StartError::Dataset("unexpected answer to init".into()));
        };
        let fields: Vec<Option<String>> = values.iter().map(text).collect();
        let [Some(marker), Some(count), Some(layout)] = fields.as_slice() else {
            return Err(StartError::Dataset(format!(
                "partition meta {} is incomplete: {fields:?}",
                partition_keys.meta()
            )));
        };
        if layout != library::LAYOUT_VERSION {
            return Err(StartError::Dataset(format!(
                "Redis holds a stockd dataset of layout version {layout}; this server knows \
                 version {}",
                library::LAYOUT_VERSION
            )));
        }
        if count != &partitions.to_string() {
            return Err(StartError::Dataset(format!(
                "the dataset was made with {count} partitions; this server is set up for \
                 {partitions}"
            )));
        }
        let marker = Marker::parse(marker);
        match &found {
            Some(first) if first != &marker => {
                return Err(StartError::Dataset(format!(
                    "partitions disagree on the dataset marker ({} and {}): run `stockd redis \
                     accept` after checking them",
                    first.text, marker.text
                )))
            }
            _ => found = Some(marker),
        }
    }
    found.ok_or_else(|| StartError::Dataset("no partitions".into()))
}

/// The marker partition 0 holds now, if any.
pub(crate) async fn read(link: &Link, keys: &PartitionKeys) -> redis::RedisResult<Option<Marker>> {
    let mut cmd = redis::cmd("HGET");
    cmd.arg(keys.meta()).arg("dataset");
    Ok(text(&link.query(&cmd).await?).map(|t| Marker::parse(&t)))
}

/// `stockd redis accept`: the operator accepts the data Redis holds now as the dataset. Every
/// running server adopts the new marker at its next call and forgets the seqs it had seen.
pub async fn accept(target: &Target, partitions: u32) -> Result<Marker, StartError> {
    let link = Link::connect(target).await?;
    link.load_library().await?;
    let Value::Array(time) = link.query(&redis::cmd("TIME")).await? else {
        return Err(StartError::Dataset("unexpected answer to TIME".into()));
    };
    let seconds: u64 = time
        .first()
        .and_then(text)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let marker = Marker::new(seconds * 1000);
    for k in 0..partitions {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(library::FN_ACCEPT)
            .arg(1)
            .arg(PartitionKeys::new(k, partitions).meta())
            .arg(&marker.text)
            .arg(partitions);
        link.fcall(&cmd).await?;
    }
    Ok(marker)
}
