//! A topic's configuration and the rules its name and partition count follow.

use std::time::Duration;

use crate::partition::PartitionConfig;
use crate::{Error, Result};

/// The most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 1 << 16;
/// The most records a partition may keep in memory.
pub const MAX_RECORDS_IN_MEMORY: usize = 1 << 28;
/// The longest name of a logbus topic, whatever its kind (in memory, persisted, replicated):
/// Kafka's [`KAFKA_MAX_TOPIC_NAME_LEN`] less the 7 characters by which a replicated topic's
/// metadata file, written as `<name>.replicas.tmp` and renamed, outgrows Kafka's longest
/// name, `<name>-<partition>`, within the 255 bytes a file name may take.
pub const MAX_TOPIC_NAME_LEN: usize = 242;
/// The longest topic name Kafka accepts (the names of a Kafka cluster's topics, reached with
/// the `kafka` feature, and of topics found on disk, follow this rule).
pub const KAFKA_MAX_TOPIC_NAME_LEN: usize = 249;

/// What a producer does when a partition's memory is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Overflow {
    /// Producers wait while the oldest record in memory is not yet committed by every
    /// registered consumer group: no record a group has not committed is overwritten.
    /// Consumers without a group id never hold producers back.
    ///
    /// Where nothing holds them, records are overwritten, never silently: with no group
    /// registered on a partition yet (or after the last one was deleted or expired), a
    /// `Block` topic overwrites its oldest records like `DropOldest`, and counts them in
    /// [`PartitionInfo::overwritten_unread`](crate::broker::PartitionInfo::overwritten_unread)
    /// (what [`Broker::describe_topic`](crate::Broker::describe_topic) shows); a consumer
    /// that then starts at `Earliest` counts the records overwritten before it as skipped
    /// ([`ConsumerMetrics::skipped`](crate::consumer::ConsumerMetrics::skipped)). A group
    /// with no open consumer stops holding producers back after the broker's
    /// [`empty_group_timeout`](crate::broker::BrokerBuilder::empty_group_timeout) (45 s by
    /// default). By default a partition keeps 4,096 records in memory
    /// ([`TopicConfig::records_in_memory`]) and consumers start at `Latest`.
    #[default]
    Block,
    /// Producers never wait: the oldest record is overwritten, and a consumer that falls
    /// behind is reset per its `auto_offset_reset` and told how much it skipped.
    DropOldest,
}

/// What happens to a persisted topic's old records (Kafka's `cleanup.policy`).
///
/// [`Delete`](Self::Delete) is the retention logbus always had: segments older than
/// [`TopicConfig::retention`] (or beyond `PersistConfig::retention_bytes`) are deleted.
/// [`Compact`](Self::Compact) keeps, per key, the latest record (Kafka's log compaction): the
/// broker's log cleaner threads rewrite the log's closed segments without the records a
/// later record of the same key replaced; offsets never change, so a compacted log has gaps,
/// and a consumer moves on to the next offset present. A record with a null value (a
/// tombstone, as Kafka's producers write them; logbus's typed sends always carry a value)
/// deletes its key: it is kept until it is older than [`TopicConfig::delete_retention`] (by
/// its timestamp, on the broker's clock), so that consumers reading behind see the deletion,
/// then dropped by the next pass.
/// [`CompactAndDelete`](Self::CompactAndDelete) does both.
///
/// Compaction needs keys: on a topic whose policy compacts, a send without a key is refused
/// with [`Error::KeyRequired`] (Kafka refuses it too). A persisted topic is compacted on
/// disk by the log cleaner; a replicated one on every replica, each replica's log on its own
/// and never at or past that replica's high watermark (Kafka's rule); see
/// `Broker::compact_now`, `PartitionInfo::cleaner` and `logbus compact`. An in-memory topic
/// made from [`TopicConfig::compacted`] keeps,
/// besides its ring, the latest record of each key the ring let go (at most
/// [`TopicConfig::max_compacted_keys`] keys per partition), so that a replay from offset 0
/// still reads every key's latest value; [`Broker::create_topic`](crate::Broker::create_topic)
/// refuses a compacting policy for an in-memory topic, whose key type need not have the
/// [`Codec`](crate::Codec) compaction compares keys by.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::broker::{CleanupPolicy, TopicConfig};
///
/// let config = TopicConfig::new(1)
///     .cleanup_policy(CleanupPolicy::Compact)
///     .min_cleanable_dirty_ratio(0.25)
///     .delete_retention(Duration::from_secs(3600))
///     .min_compaction_lag(Duration::from_secs(60));
/// assert_eq!(config.cleanup(), CleanupPolicy::Compact);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CleanupPolicy {
    /// Retention by age and size only (Kafka's `delete`, the default).
    #[default]
    Delete,
    /// Log compaction only: the latest record per key stays whatever its age (Kafka's
    /// `compact`); [`TopicConfig::retention`] and `retention_bytes` are refused with it.
    Compact,
    /// Compaction, and retention by age and size (Kafka's `compact,delete`).
    CompactAndDelete,
}

impl CleanupPolicy {
    /// Whether the log cleaner compacts the topic.
    pub const fn compacts(self) -> bool {
        matches!(self, Self::Compact | Self::CompactAndDelete)
    }

    /// Whether retention deletes old segments.
    pub const fn deletes(self) -> bool {
        matches!(self, Self::Delete | Self::CompactAndDelete)
    }

    /// Kafka's name of the policy (`delete`, `compact`, `compact,delete`), as stored in the
    /// topic's metadata.
    pub const fn kafka_name(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Compact => "compact",
            Self::CompactAndDelete => "compact,delete",
        }
    }

    /// The policy of a Kafka name (either order of `compact,delete`); `None` for another.
    pub fn from_kafka_name(name: &str) -> Option<Self> {
        match name {
            "delete" => Some(Self::Delete),
            "compact" => Some(Self::Compact),
            "compact,delete" | "delete,compact" => Some(Self::CompactAndDelete),
            _ => None,
        }
    }
}

/// The default [`TopicConfig::min_cleanable_dirty_ratio`] (Kafka's).
pub const DEFAULT_MIN_CLEANABLE_DIRTY_RATIO: f64 = 0.5;
/// The default [`TopicConfig::max_compacted_keys`].
pub const DEFAULT_MAX_COMPACTED_KEYS: usize = 1 << 20;
/// The largest [`TopicConfig::max_compacted_keys`].
pub const MAX_COMPACTED_KEYS: usize = 1 << 30;
/// The default [`TopicConfig::delete_retention`] (Kafka's `delete.retention.ms`, one day).
pub const DEFAULT_DELETE_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// How a topic is shaped.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::broker::{Overflow, TopicConfig};
///
/// let config = TopicConfig::new(8)
///     .records_in_memory(1 << 16)
///     .retention(Duration::from_secs(3600))
///     .overflow(Overflow::DropOldest);
/// assert_eq!(config.partitions(), 8);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicConfig {
    pub(crate) partitions: u32,
    pub(crate) records_in_memory: usize,
    pub(crate) retention: Option<Duration>,
    pub(crate) overflow: Overflow,
    pub(crate) replication_factor: u32,
    pub(crate) min_insync_replicas: u32,
    pub(crate) unclean_leader_election: bool,
    pub(crate) replica_lag_time_max: Duration,
    pub(crate) cleanup_policy: CleanupPolicy,
    /// `f64::to_bits` of the ratio, so that the config stays `Eq`.
    pub(crate) min_cleanable_dirty_ratio_bits: u64,
    pub(crate) delete_retention: Duration,
    pub(crate) min_compaction_lag: Duration,
    pub(crate) max_compacted_keys: usize,
    pub(crate) producer_id_expiration: Duration,
}

/// The most replicas a partition may have.
pub const MAX_REPLICATION_FACTOR: u32 = 16;

impl TopicConfig {
    /// `partitions` partitions, 4096 records in memory each, no retention limit,
    /// [`Overflow::Block`].
    pub const fn new(partitions: u32) -> Self {
        Self {
            partitions,
            records_in_memory: 4096,
            retention: None,
            overflow: Overflow::Block,
            replication_factor: 1,
            min_insync_replicas: 1,
            unclean_leader_election: false,
            replica_lag_time_max: Duration::from_secs(30),
            cleanup_policy: CleanupPolicy::Delete,
            min_cleanable_dirty_ratio_bits: DEFAULT_MIN_CLEANABLE_DIRTY_RATIO.to_bits(),
            delete_retention: DEFAULT_DELETE_RETENTION,
            min_compaction_lag: Duration::ZERO,
            max_compacted_keys: DEFAULT_MAX_COMPACTED_KEYS,
            producer_id_expiration: Duration::from_secs(24 * 60 * 60),
        }
    }

    /// What happens to old records (Kafka's `cleanup.policy`; [`CleanupPolicy::Delete`] by
    /// default). A compacting policy needs a persisted topic's log to act on, and keys on
    /// every record sent (see [`CleanupPolicy`]).
    pub const fn cleanup_policy(mut self, policy: CleanupPolicy) -> Self {
        self.cleanup_policy = policy;
        self
    }

    /// How dirty a log must be before the cleaner takes it: the bytes of its segments not
    /// yet cleaned over the bytes of its closed segments (Kafka's
    /// `min.cleanable.dirty.ratio`; 0 to 1, 0.5 by default). The cleaner takes the dirtiest
    /// log above its ratio first.
    pub const fn min_cleanable_dirty_ratio(mut self, ratio: f64) -> Self {
        self.min_cleanable_dirty_ratio_bits = ratio.to_bits();
        self
    }

    /// How long a tombstone (a record with a null value) stays, by its timestamp against the
    /// broker's clock, so that a consumer reading behind sees the deletion (Kafka's
    /// `delete.retention.ms`; one day by default).
    pub const fn delete_retention(mut self, age: Duration) -> Self {
        self.delete_retention = age;
        self
    }

    /// The youngest a record may be (by its timestamp, against the broker's clock) and
    /// still be compacted away: younger records, and everything after them, stay as they are
    /// (Kafka's `min.compaction.lag.ms`; 0 by default).
    pub const fn min_compaction_lag(mut self, lag: Duration) -> Self {
        self.min_compaction_lag = lag;
        self
    }

    /// The cleanup policy.
    pub const fn cleanup(&self) -> CleanupPolicy {
        self.cleanup_policy
    }

    /// `min_cleanable_dirty_ratio`.
    pub const fn min_dirty_ratio(&self) -> f64 {
        f64::from_bits(self.min_cleanable_dirty_ratio_bits)
    }

    /// `delete_retention`.
    pub const fn tombstone_retention(&self) -> Duration {
        self.delete_retention
    }

    /// The most keys an in-memory compacted partition keeps beyond its ring (1 to
    /// [`MAX_COMPACTED_KEYS`]; [`DEFAULT_MAX_COMPACTED_KEYS`] by default): what bounds its
    /// memory, with `records_in_memory`. A record of a new key the ring lets go while the
    /// partition already keeps this many is not kept, and counted
    /// ([`CompactedInfo::dropped`](crate::broker::CompactedInfo::dropped), which
    /// [`Broker::describe_topic`](crate::Broker::describe_topic) shows). Persisted topics
    /// compact on disk and do not use it.
    pub const fn max_compacted_keys(mut self, keys: usize) -> Self {
        self.max_compacted_keys = keys;
        self
    }

    /// `max_compacted_keys`.
    pub const fn compacted_keys_max(&self) -> usize {
        self.max_compacted_keys
    }

    /// `min_compaction_lag`.
    pub const fn compaction_lag(&self) -> Duration {
        self.min_compaction_lag
    }

    /// How long a partition keeps an idempotent producer's state after its last record
    /// (by record timestamp, on the broker's clock), when no transaction of it is open:
    /// Kafka's `producer.id.expiration.ms`, 24 hours by default. An expired producer's
    /// retries are no longer recognised (its next record is accepted whatever its
    /// sequence, as Kafka accepts a producer it does not know).
    ///
    /// Applied on every topic, at most once a second of the broker's clock: on a
    /// replicated one at the replicas' lag checks; on a one-replica one when a producer id
    /// the partition does not know first appends to it (so its states never grow by more
    /// than the producers of one expiration window) and before a send with a sequence its
    /// caller gives ([`Producer::send_sequenced`](crate::producer::Producer::send_sequenced))
    /// is checked. A persisted one-replica partition leaves expired ids out of the
    /// `.snapshot` files it writes at each roll and expires the states it recovers when it
    /// opens, so a reopen never brings an expired producer back.
    pub const fn producer_id_expiration(mut self, expiration: Duration) -> Self {
        self.producer_id_expiration = expiration;
        self
    }

    /// Replicas per partition (Kafka's `replication.factor`; 1 to
    /// [`MAX_REPLICATION_FACTOR`], default 1). With more than one, each partition keeps a
    /// log per replica on different data directories, a leader and followers (see
    /// [`crate::replica`]); `Overflow` then does not apply: each replica keeps
    /// `records_in_memory` records, dropping the oldest.
    pub const fn replication_factor(mut self, replicas: u32) -> Self {
        self.replication_factor = replicas;
        self
    }

    /// The fewest in-sync replicas an `acks = all` send accepts (Kafka's
    /// `min.insync.replicas`; 1 to the replication factor, default 1).
    pub const fn min_insync_replicas(mut self, replicas: u32) -> Self {
        self.min_insync_replicas = replicas;
        self
    }

    /// Whether a replica outside the ISR may lead when no in-sync replica is alive,
    /// losing the committed records it lacks (Kafka's `unclean.leader.election.enable`;
    /// off by default).
    pub const fn unclean_leader_election(mut self, enabled: bool) -> Self {
        self.unclean_leader_election = enabled;
        self
    }

    /// How long a follower may stay behind before it leaves the ISR, on the broker's
    /// clock (Kafka's `replica.lag.time.max.ms`; 30 s by default).
    pub const fn replica_lag_time_max(mut self, lag: Duration) -> Self {
        self.replica_lag_time_max = lag;
        self
    }

    /// Replicas per partition.
    pub const fn replicas_per_partition(&self) -> u32 {
        self.replication_factor
    }

    /// `min_insync_replicas`.
    pub const fn min_insync(&self) -> u32 {
        self.min_insync_replicas
    }

    /// Whether unclean leader election is on.
    pub const fn unclean_election(&self) -> bool {
        self.unclean_leader_election
    }

    /// `replica_lag_time_max`.
    pub const fn replica_lag_max(&self) -> Duration {
        self.replica_lag_time_max
    }

    /// `producer_id_expiration`.
    pub const fn producer_expiration(&self) -> Duration {
        self.producer_id_expiration
    }

    /// Records each partition keeps in memory: a power of two from 2 to
    /// [`MAX_RECORDS_IN_MEMORY`]. Memory is taken at creation.
    pub const fn records_in_memory(mut self, records: usize) -> Self {
        self.records_in_memory = records;
        self
    }

    /// Records older than this (by their timestamp, against the broker's clock) are
    /// expired: below the log start, no longer read.
    pub const fn retention(mut self, age: Duration) -> Self {
        self.retention = Some(age);
        self
    }

    /// What producers do when a partition is full.
    pub const fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// The partition count.
    pub const fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Records kept in memory per partition.
    pub const fn records_in_memory_per_partition(&self) -> usize {
        self.records_in_memory
    }

    /// The retention age, if any.
    pub const fn retention_age(&self) -> Option<Duration> {
        self.retention
    }

    /// The overflow policy.
    pub const fn overflow_policy(&self) -> Overflow {
        self.overflow
    }

    pub(crate) fn validate(&self) -> Result<()> {
        check_partition_count(self.partitions)?;
        let r = self.records_in_memory;
        if !(2..=MAX_RECORDS_IN_MEMORY).contains(&r) || !r.is_power_of_two() {
            return Err(Error::InvalidConfig {
                name: "records_in_memory",
                value: r.to_string(),
                valid: format!("a power of two from 2 to {MAX_RECORDS_IN_MEMORY}"),
            });
        }
        if self.retention == Some(Duration::ZERO) {
            return Err(Error::InvalidConfig {
                name: "retention",
                value: "0s".into(),
                valid: "a positive duration (or no retention limit)".into(),
            });
        }
        let rf = self.replication_factor;
        if !(1..=MAX_REPLICATION_FACTOR).contains(&rf) {
            return Err(Error::InvalidConfig {
                name: "replication_factor",
                value: rf.to_string(),
                valid: format!("1 to {MAX_REPLICATION_FACTOR}"),
            });
        }
        if !(1..=rf).contains(&self.min_insync_replicas) {
            return Err(Error::InvalidConfig {
                name: "min_insync_replicas",
                value: self.min_insync_replicas.to_string(),
                valid: format!("1 to the replication factor ({rf})"),
            });
        }
        if self.replica_lag_time_max.is_zero() {
            return Err(Error::InvalidConfig {
                name: "replica_lag_time_max",
                value: "0s".into(),
                valid: "a positive duration".into(),
            });
        }
        if !(1..=MAX_COMPACTED_KEYS).contains(&self.max_compacted_keys) {
            return Err(Error::InvalidConfig {
                name: "max_compacted_keys",
                value: self.max_compacted_keys.to_string(),
                valid: format!("1 to {MAX_COMPACTED_KEYS}"),
            });
        }
        let ratio = self.min_dirty_ratio();
        if !(0.0..=1.0).contains(&ratio) {
            return Err(Error::InvalidConfig {
                name: "min_cleanable_dirty_ratio",
                value: ratio.to_string(),
                valid: "a ratio from 0 to 1".into(),
            });
        }
        // Both are stored in milliseconds, as Kafka's `.ms` settings.
        for (name, d) in [
            ("delete_retention", self.delete_retention),
            ("min_compaction_lag", self.min_compaction_lag),
        ] {
            if d.as_millis() > MAX_TIMESTAMP_MS {
                return Err(Error::InvalidConfig {
                    name,
                    value: format!("{d:?}"),
                    valid: format!("at most {MAX_TIMESTAMP_MS} ms"),
                });
            }
        }
        if self.cleanup_policy == CleanupPolicy::Compact {
            if let Some(r) = self.retention {
                return Err(Error::InvalidConfig {
                    name: "retention",
                    value: format!("{r:?}"),
                    valid: "no retention limit with CleanupPolicy::Compact (retention \
                            deletes: use CleanupPolicy::CompactAndDelete for both)"
                        .into(),
                });
            }
        }
        Ok(())
    }

    /// How an in-memory compacted partition's section is bounded.
    pub(crate) fn compaction_config(&self) -> crate::partition::compacted::CompactionConfig {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        crate::partition::compacted::CompactionConfig {
            max_keys: self.max_compacted_keys,
            delete_retention_ms: ms(self.delete_retention),
            retention_ms: self
                .retention
                .filter(|_| self.cleanup_policy.deletes())
                .map(ms),
        }
    }

    pub(crate) fn partition_config(&self) -> PartitionConfig {
        PartitionConfig {
            capacity: self.records_in_memory,
            gated: self.overflow == Overflow::Block,
            retention_ms: self
                .retention
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

/// The longest duration a millisecond setting takes: Kafka's largest timestamp.
const MAX_TIMESTAMP_MS: u128 = (1 << 62) - 1;

pub(crate) fn check_partition_count(n: u32) -> Result<()> {
    if !(1..=MAX_PARTITIONS).contains(&n) {
        return Err(Error::InvalidConfig {
            name: "partitions",
            value: n.to_string(),
            valid: format!("1 to {MAX_PARTITIONS}"),
        });
    }
    Ok(())
}

/// Checks the name of a logbus topic: 1 to [`MAX_TOPIC_NAME_LEN`] (242) characters of
/// `[a-zA-Z0-9._-]`, not `.` or `..` — Kafka's rule, with a limit that holds for every topic
/// kind (a persisted topic's longest file name, `<name>.replicas.tmp`, must fit in the 255
/// bytes a file name may take). Such a name can never reach outside a directory it names a
/// child of.
///
/// # Errors
///
/// [`Error::InvalidTopicName`] saying why (for a long name, the valid length).
///
/// # Examples
///
/// ```
/// use logbus::broker::{validate_topic_name, MAX_TOPIC_NAME_LEN};
///
/// assert!(validate_topic_name("orders.eu-west_1").is_ok());
/// assert!(validate_topic_name("../etc").is_err());
/// assert!(validate_topic_name(&"x".repeat(MAX_TOPIC_NAME_LEN)).is_ok());
/// assert!(validate_topic_name(&"x".repeat(MAX_TOPIC_NAME_LEN + 1)).is_err());
/// ```
pub fn validate_topic_name(name: &str) -> Result<()> {
    check_topic_name(name, MAX_TOPIC_NAME_LEN)
}

/// Kafka's own rule (up to [`KAFKA_MAX_TOPIC_NAME_LEN`] characters): for a Kafka cluster's
/// topics, and for names already on disk.
pub(crate) fn validate_kafka_topic_name(name: &str) -> Result<()> {
    check_topic_name(name, KAFKA_MAX_TOPIC_NAME_LEN)
}

fn check_topic_name(name: &str, max: usize) -> Result<()> {
    let fail = |reason: String| {
        Err(Error::InvalidTopicName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return fail(format!(
            "a topic name needs 1 to {max} characters; it is empty"
        ));
    }
    if name == "." || name == ".." {
        return fail("`.` and `..` are not allowed as topic names".into());
    }
    if name.len() > max {
        return fail(format!(
            "{} characters is longer than the limit of {max} (a topic name needs 1 to {max} \
             characters)",
            name.len()
        ));
    }
    if let Some((i, c)) = name
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return fail(format!(
            "character {c:?} at byte {i} is not allowed: only ASCII letters, digits, `.`, `_` \
             and `-`"
        ));
    }
    Ok(())
}
