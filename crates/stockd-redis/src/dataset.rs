//! The dataset marker: how a server tells the Redis it served from one that came back with less.
//!
//! Every partition's meta hash holds the same marker, `RANDOM@EPOCH`, written once when the first
//! server meets an empty Redis (epoch 0) and rewritten only by an operator's `stockd redis
//! accept` (epoch = the Redis clock in ms, so later accepts have larger epochs). Every call
//! carries the marker the server knows and the highest event seq it has seen; the library
//! refuses the call before reading anything when either does not match. A server adopts a
//! marker only when its epoch is larger than the one it knows: that is an operator's accept,
//! never a Redis that restarted empty and was re-initialised by a newly started server.
//!
//! The meta hash also holds the fleet's settings, stored when the dataset is made: the partition
//! count and the retention settings (`fleet_settings`). A server whose settings differ refuses
//! to start, naming each one; a dataset made by an earlier version, which stored no retention
//! settings, takes those of the first server of this version that meets it.
//!
//! It also holds the dataset's `placement` (keys::Placement): the partitions grouped by the
//! primary that served them when the dataset was made, which says where a segmented pool's
//! segments live. It is the first server's, read from the Cluster's slot map, and every server
//! adopts the stored one: a pool's segments are found by it for the dataset's life, whatever
//! the Cluster's slots did since.

use rand::Rng;
use redis::Value;

use crate::keys::{self, PartitionKeys, Placement};
use crate::library;
use crate::link::{Link, Target};
use crate::{RedisConfig, StartError};

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

/// The settings every server of a fleet must share besides the partition count, as (meta hash
/// field, flag, this server's value). A server that kept holds for less time than its peers
/// would forget a hold they keep (a retry through it would make a second hold), and one that
/// trimmed the feed shorter would answer 410 where they answer events; so the dataset stores
/// them when it is made, and every server is held to them.
fn fleet_settings(config: &RedisConfig) -> [(&'static str, &'static str, String); 3] {
    [
        (
            "hold_retention_ms",
            "--hold-retention-ms",
            config.hold_retention_ms.to_string(),
        ),
        (
            "confirmed_retention_ms",
            "--confirmed-retention-ms",
            config.confirmed_retention_ms.to_string(),
        ),
        (
            "event_retention_max",
            "--event-retention-max",
            config.event_retention_max.to_string(),
        ),
    ]
}

/// The meta field of the dataset's placement, stored after the fleet settings.
const PLACEMENT: &str = "placement";

/// The placement this server would give a new dataset: the partitions grouped by the primary
/// serving each one's slot now (one group on a single Redis).
pub(crate) async fn proposed_placement(
    link: &Link,
    partitions: u32,
) -> Result<Placement, StartError> {
    let Some(owners) = link.slot_owners().await? else {
        return Ok(Placement::whole(partitions));
    };
    Ok(Placement::by_owner(partitions, |k| {
        let slot = keys::slot(&keys::partition_tag(k, partitions));
        owners
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, primary)| primary.clone())
    }))
}

/// What one partition's meta holds: the marker, the partition count, the layout, the stored
/// value of each fleet setting (in `fleet_settings` order) and the placement, after the library
/// stored this server's where the dataset had none. With `marker` empty, no marker is written.
async fn init_partition(
    link: &Link,
    partition_keys: &PartitionKeys,
    marker: &str,
    config: &RedisConfig,
    placement: &Placement,
) -> Result<Vec<Option<String>>, StartError> {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(library::FN_INIT)
        .arg(1)
        .arg(partition_keys.meta())
        .arg(marker)
        .arg(config.partitions);
    for (field, _, value) in fleet_settings(config) {
        cmd.arg(field).arg(value);
    }
    cmd.arg(PLACEMENT).arg(placement.text());
    let Value::Array(values) = link.fcall(&cmd, Some(&partition_keys.touch())).await? else {
        return Err(StartError::Dataset("unexpected answer to init".into()));
    };
    Ok(values.iter().map(text).collect())
}

/// The settings of this server that are not the dataset's, each as "FLAG is THEIRS in the
/// dataset, OURS here"; an error when there are any.
fn compare_settings(
    meta: &[Option<String>],
    config: &RedisConfig,
    partition_keys: &PartitionKeys,
) -> Result<(), StartError> {
    let mut differing = Vec::new();
    if let Some(Some(count)) = meta.get(1) {
        if count != &config.partitions.to_string() {
            differing.push(format!(
                "--redis-partitions is {count} in the dataset, {} here",
                config.partitions
            ));
        }
    }
    for (index, (_, flag, ours)) in fleet_settings(config).iter().enumerate() {
        match meta.get(3 + index) {
            Some(Some(stored)) if stored == ours => {}
            Some(Some(stored)) => {
                differing.push(format!("{flag} is {stored} in the dataset, {ours} here"))
            }
            _ => {
                return Err(StartError::Dataset(format!(
                    "partition meta {} has no {flag} stored",
                    partition_keys.meta()
                )))
            }
        }
    }
    if differing.is_empty() {
        return Ok(());
    }
    Err(StartError::Dataset(format!(
        "this server's settings are not the dataset's: {}. Every server of a fleet runs with \
         the settings stored when the dataset was made; start this one with them",
        differing.join("; ")
    )))
}

/// The placement a partition's meta holds (after the fleet settings).
fn stored_placement(
    meta: &[Option<String>],
    config: &RedisConfig,
    partition_keys: &PartitionKeys,
) -> Result<Placement, StartError> {
    match meta.get(3 + fleet_settings(config).len()) {
        Some(Some(text)) => Placement::parse(text, config.partitions).map_err(|why| {
            StartError::Dataset(format!("partition meta {}: {why}", partition_keys.meta()))
        }),
        _ => Err(StartError::Dataset(format!(
            "partition meta {} has no {PLACEMENT} stored",
            partition_keys.meta()
        ))),
    }
}

/// Reads the marker of every partition, writing a new one where Redis has none (an empty Redis),
/// and checks that all partitions agree, with this layout, partition count and fleet settings
/// (storing this server's settings in a dataset that has none yet). Answers the marker and the
/// dataset's placement (`proposed` where it had none).
pub(crate) async fn init(
    link: &Link,
    keys: &[PartitionKeys],
    config: &RedisConfig,
    proposed: &Placement,
) -> Result<(Marker, Placement), StartError> {
    let fresh = Marker::new(0);
    let mut found: Option<Marker> = None;
    let mut placement: Option<Placement> = None;
    for partition_keys in keys {
        let meta = init_partition(link, partition_keys, &fresh.text, config, proposed).await?;
        let [Some(marker), Some(_), Some(layout), ..] = meta.as_slice() else {
            return Err(StartError::Dataset(format!(
                "partition meta {} is incomplete: {meta:?}",
                partition_keys.meta()
            )));
        };
        if !library::LAYOUTS.contains(&layout.as_str()) {
            return Err(StartError::Dataset(format!(
                "Redis holds a stockd dataset of layout version {layout}; this server knows \
                 versions {}",
                library::LAYOUTS.join(" and ")
            )));
        }
        compare_settings(&meta, config, partition_keys)?;
        let stored = stored_placement(&meta, config, partition_keys)?;
        match &placement {
            Some(first) if first != &stored => {
                return Err(StartError::Dataset(format!(
                    "partitions disagree on the dataset's placement of segments ({} and {}, \
                     at {}): the Cluster's slots moved while the dataset was being made; \
                     flush it and start again",
                    first.text(),
                    stored.text(),
                    partition_keys.meta()
                )))
            }
            _ => placement = Some(stored),
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
    match (found, placement) {
        (Some(marker), Some(placement)) => Ok((marker, placement)),
        _ => Err(StartError::Dataset("no partitions".into())),
    }
}

/// Checks (storing them where the dataset has none) this server's fleet settings and placement
/// against the dataset's, without writing any marker: for a server about to adopt a dataset an
/// operator accepted.
pub(crate) async fn check_settings(
    link: &Link,
    keys: &[PartitionKeys],
    config: &RedisConfig,
    placement: &Placement,
) -> Result<(), StartError> {
    for partition_keys in keys {
        let meta = init_partition(link, partition_keys, "", config, placement).await?;
        if let [Some(_), Some(_), Some(layout), ..] = meta.as_slice() {
            if library::LAYOUTS.contains(&layout.as_str()) {
                compare_settings(&meta, config, partition_keys)?;
                let stored = stored_placement(&meta, config, partition_keys)?;
                if &stored != placement {
                    return Err(StartError::Dataset(format!(
                        "the dataset places segments as {}, this server as {}",
                        stored.text(),
                        placement.text()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The marker partition 0 holds now, if any.
pub(crate) async fn read(link: &Link, keys: &PartitionKeys) -> redis::RedisResult<Option<Marker>> {
    let mut cmd = redis::cmd("HGET");
    cmd.arg(keys.meta()).arg("dataset");
    Ok(text(&link.query(&cmd).await?).map(|t| Marker::parse(&t)))
}

/// `stockd redis accept`: the operator accepts the data Redis holds now as the dataset. Every
/// running server adopts the new marker at its next call and forgets the seqs it had seen. The
/// library also moves every partition's counters (event seqs, fencing tokens, attempts, waiter
/// tickets, pool generations) up to Redis's clock in microseconds, above every value handed out
/// before the loss (main.lua's `accept` says why). With `replicas` > 0 each partition's accept is
/// answered only once that many replicas have it (a failover right after must not undo it).
pub async fn accept(target: &Target, partitions: u32, replicas: u32) -> Result<Marker, StartError> {
    let replicas = crate::link::Replicas {
        count: replicas,
        timeout_ms: crate::config::REPLICA_TIMEOUT_MS_MAX,
    };
    let link = Link::connect(target, Some(replicas)).await?;
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
        let partition_keys = PartitionKeys::new(k, partitions);
        link.fcall(&cmd, Some(&partition_keys.touch())).await?;
    }
    Ok(marker)
}
