//! The backend's settings: where Redis is (`Target`), how many partitions the dataset has, the
//! retention settings the whole fleet shares, and the hooks test builds may set (a test clock,
//! call faults). It owns their defaults and the checks that need no Redis; it must never reach
//! Redis (the checks that do are `dataset`'s and `checks`') nor decide a rule.

use stockd_core::limits::{CONFIRMED_RETENTION_MS_DEFAULT, HOLD_RETENTION_MS_DEFAULT};

#[cfg(feature = "call-faults")]
use crate::call_faults;
use crate::link::Target;

/// Events kept per partition by default (the stream is trimmed to exactly this many): the
/// core's one default.
pub use stockd_core::limits::EVENT_RETENTION_MAX_DEFAULT;

/// Partitions of a Redis Cluster dataset by default: enough to spread over many primaries.
pub const CLUSTER_PARTITIONS_DEFAULT: u32 = 16;
/// Most partitions a dataset may have.
pub const PARTITIONS_MAX: u32 = 1024;
/// Most replicas a change may be made to wait for (`--redis-replicas`).
pub const REPLICAS_MAX: u32 = 16;
/// How long a change waits for its replicas by default (`--redis-replica-timeout-ms`).
pub const REPLICA_TIMEOUT_MS_DEFAULT: u64 = 1000;
/// The longest such wait: half the time one Redis call may take, which the call and its
/// `WAIT` share.
pub const REPLICA_TIMEOUT_MS_MAX: u64 = crate::link::RESPONSE_TIMEOUT.as_millis() as u64 / 2;

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub target: Target,
    /// Event feed partitions: 1 on a single Redis; on a Cluster, fixed when the dataset is made.
    pub partitions: u32,
    pub hold_retention_ms: u64,
    pub confirmed_retention_ms: u64,
    pub event_retention_max: usize,
    /// Replicas that must have a change before it is answered (Redis `WAIT`, once per call);
    /// 0 answers once the primary has it.
    pub replicas: u32,
    /// How long a call waits for its replicas before it is answered 503 (outcome unknown).
    pub replica_timeout_ms: u64,
    /// Test builds only (feature `test-clock`): the time every call uses instead of Redis's
    /// `TIME`, so that model tests can drive time. Production builds cannot set it.
    #[cfg(feature = "test-clock")]
    pub clock: Option<TestClock>,
    /// Test builds only (feature `test-clock`): false stops the background sweeper, so that
    /// expiries happen only when the test calls [`RedisBackend::sweep_now`].
    #[cfg(feature = "test-clock")]
    pub background_sweep: bool,
    /// Test builds only (feature `call-faults`): faults injected around every library call
    /// (see [`call_faults`]). Production builds cannot set it.
    #[cfg(feature = "call-faults")]
    pub call_faults: Option<call_faults::CallFaultsHook>,
}

/// A clock for tests: milliseconds since the epoch, as the test decides.
#[cfg(feature = "test-clock")]
#[derive(Clone)]
pub struct TestClock(pub std::sync::Arc<dyn Fn() -> u64 + Send + Sync>);

#[cfg(feature = "test-clock")]
impl std::fmt::Debug for TestClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestClock")
    }
}

impl RedisConfig {
    /// Checks the settings that need no Redis: the partition count (1 on a single Redis,
    /// 1..=PARTITIONS_MAX on a Cluster).
    pub fn validate(&self) -> Result<(), String> {
        let partitions = self.partitions;
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(format!(
                "--redis-partitions must be from 1 to {PARTITIONS_MAX}, got {partitions}"
            ));
        }
        if partitions > 1 && !self.target.is_cluster() {
            return Err(format!(
                "--redis-partitions is {partitions}, but a single Redis has one partition; \
                 partitions are for a Redis Cluster (redis+cluster://...)"
            ));
        }
        if self.replicas > REPLICAS_MAX {
            return Err(format!(
                "--redis-replicas must be from 0 to {REPLICAS_MAX}, got {}",
                self.replicas
            ));
        }
        if self.replica_timeout_ms == 0 || self.replica_timeout_ms > REPLICA_TIMEOUT_MS_MAX {
            return Err(format!(
                "--redis-replica-timeout-ms must be from 1 to {REPLICA_TIMEOUT_MS_MAX}, got {}",
                self.replica_timeout_ms
            ));
        }
        Ok(())
    }

    pub fn new(target: Target) -> Self {
        RedisConfig {
            partitions: if target.is_cluster() {
                CLUSTER_PARTITIONS_DEFAULT
            } else {
                1
            },
            target,
            hold_retention_ms: HOLD_RETENTION_MS_DEFAULT,
            confirmed_retention_ms: CONFIRMED_RETENTION_MS_DEFAULT,
            event_retention_max: EVENT_RETENTION_MAX_DEFAULT,
            replicas: 0,
            replica_timeout_ms: REPLICA_TIMEOUT_MS_DEFAULT,
            #[cfg(feature = "test-clock")]
            clock: None,
            #[cfg(feature = "test-clock")]
            background_sweep: true,
            #[cfg(feature = "call-faults")]
            call_faults: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link;

    fn config(target: &str, partitions: u32) -> RedisConfig {
        let mut config = RedisConfig::new(Target::parse(target).expect("target"));
        config.partitions = partitions;
        config
    }

    #[test]
    fn partitions_at_their_edges() {
        let cluster = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001";
        assert_eq!(
            RedisConfig::new(Target::parse(cluster).unwrap()).partitions,
            16
        );
        assert_eq!(
            RedisConfig::new(Target::parse("redis://127.0.0.1:6379").unwrap()).partitions,
            1
        );
        assert!(config(cluster, 0).validate().unwrap_err().contains("got 0"));
        assert!(config(cluster, 1).validate().is_ok());
        assert!(config(cluster, PARTITIONS_MAX).validate().is_ok());
        assert!(config(cluster, PARTITIONS_MAX + 1)
            .validate()
            .unwrap_err()
            .contains("from 1 to 1024"));
        assert!(config("redis://127.0.0.1:6379", 1).validate().is_ok());
        assert!(config("redis://127.0.0.1:6379", 2)
            .validate()
            .unwrap_err()
            .contains("single Redis"));
        let mut replicas = config("redis://127.0.0.1:6379", 1);
        replicas.replicas = REPLICAS_MAX + 1;
        assert!(replicas
            .validate()
            .unwrap_err()
            .contains("--redis-replicas"));
        replicas.replicas = 1;
        replicas.replica_timeout_ms = REPLICA_TIMEOUT_MS_MAX + 1;
        assert!(replicas
            .validate()
            .unwrap_err()
            .contains("--redis-replica-timeout-ms"));
        replicas.replica_timeout_ms = REPLICA_TIMEOUT_MS_MAX;
        assert!(replicas.validate().is_ok());
    }

    #[test]
    fn backend_urls() {
        assert_eq!(
            Target::parse("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000").unwrap(),
            Target::Cluster(vec![
                "redis://:pw@10.0.0.1:7000".to_string(),
                "redis://:pw@10.0.0.2:7000".to_string()
            ])
        );
        assert!(Target::parse("redis+cluster://").is_err());
        let Target::Sentinel(sentinel) = Target::parse(
            "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/shop?db=2&password=p%26w&sentinel_password=s",
        )
        .unwrap() else {
            panic!("a Sentinel target")
        };
        assert_eq!(sentinel.sentinels, ["10.0.0.1:26379", "10.0.0.2:26379"]);
        assert_eq!(sentinel.master, "shop");
        assert_eq!(sentinel.db, 2);
        assert_eq!(sentinel.password.as_deref(), Some("p&w"));
        assert_eq!(sentinel.sentinel_password.as_deref(), Some("s"));
        for (bad, why) in [
            ("redis+sentinel://10.0.0.1:26379", "name the primary"),
            ("redis+sentinel:///shop", "at least one Sentinel"),
            ("redis+sentinel://h:1/shop?dbb=1", "unknown setting \"dbb\""),
            (
                "redis+sentinel://h:1/shop?db=x",
                "db must be a database number",
            ),
            (
                "redis+sentinel://:pw@h:1/shop",
                "credentials go in the query",
            ),
            (
                "redis+sentinel://h:notaport/shop",
                "Sentinel \"h:notaport\"",
            ),
        ] {
            let error = Target::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
        assert!(Target::parse("memcached://127.0.0.1:1")
            .unwrap_err()
            .contains("expected embedded"));
    }

    #[test]
    fn passwords_never_show() {
        let target =
            Target::parse("redis+cluster://:s3cret-pw@10.0.0.1:7000,10.0.0.2:7000").unwrap();
        let shown = format!("{target:?}");
        assert!(!shown.contains("s3cret-pw"), "{shown}");
        assert!(shown.contains("redis://***@10.0.0.1:7000"), "{shown}");
        let single = format!(
            "{:?}",
            Target::parse("redis://user:s3cret-pw@h:1/0").unwrap()
        );
        assert!(!single.contains("s3cret-pw"), "{single}");
        let config = format!("{:?}", RedisConfig::new(target));
        assert!(!config.contains("s3cret-pw"), "{config}");
        let refused = Target::parse("redis://:s3cret-pw@h:notaport").unwrap_err();
        assert!(!refused.contains("s3cret-pw"), "{refused}");
        assert_eq!(link::redact("redis://h:1"), "redis://h:1");
        let sentinel = "redis+sentinel://h:1/shop?password=s3cret-pw&sentinel_password=s3cret-pw";
        let shown = format!("{:?}", Target::parse(sentinel).unwrap());
        assert!(!shown.contains("s3cret-pw"), "{shown}");
        let refused = Target::parse(&format!("{sentinel}&db=x")).unwrap_err();
        assert!(!refused.contains("s3cret-pw"), "{refused}");
    }
}
