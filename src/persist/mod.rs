//! Persisted topics: a broker opened on a data directory, whose persisted topics keep their
//! records in Kafka's segment format (layer 5's disk half; see [`crate::storage`]).
//!
//! This module is the one write path to disk, used by every persisted topic whatever its
//! replication factor: one encoder, batcher and flush policy (`append.rs`), driven by a
//! writer thread per partition for RF 1 and inline, under the replica set's lock, for each
//! replica of a replicated topic (see "How a record reaches the disk").
//!
//! # Layout
//!
//! ```text
//! <data dir>/meta.properties                    the directory's marker: its id, its broker's
//!                                               (see [`BrokerBuilder::create`])
//! <data dir>/.lock                              one broker per directory (a file lock)
//! <data dir>/<topic>.topic                      topic metadata: partitions, codec type ids, config
//! <data dir>/<topic>-<partition>/               a segment set (.log, .index, .timeindex)
//! <data dir>/recovery-point-offset-checkpoint   Kafka's files, `topic partition offset`
//! <data dir>/log-start-offset-checkpoint
//! <data dir>/consumer-offsets-checkpoint        `group topic partition offset`
//! <data dir>/cleaner-offset-checkpoint          compacted partitions' first dirty offsets
//! <data dir>/.logbus_cleanshutdown              written by `close`, removed at open
//! ```
//!
//! A broker opened on several directories ([`BrokerBuilder::data_dirs`](crate::broker::BrokerBuilder::data_dirs)) keeps its
//! replicated topics' replicas across them: `<dir>/<topic>-<partition>/` (a segment set
//! with its `leader-epoch-checkpoint`) and `<dir>/<topic>.replicas` (see
//! [`crate::replica`]).
//!
//! # How a record reaches the disk
//!
//! The partition's ring is the cache of the tail. One writer thread per partition is a
//! *gating* reader of the ring: it encodes the published records it finds (up to 256 KiB)
//! into one RecordBatch, appends it, applies the [`FlushPolicy`], and only then moves its
//! gate, so a record leaves the ring only once it is in the segment set, and producers wait
//! only when the ring is full of records not yet written. A thread per partition (rather
//! than one per broker) keeps a slow fsync of one partition from delaying the others.
//!
//! A replicated topic's replicas write the same batches through the same path, inline: the
//! leader appends under its replica set's lock before the records count in its log end,
//! and a follower appends what it fetched before acknowledging it, so no replica's log end
//! (what HW is computed from) passes its disk.
//!
//! A consumer whose position is below the ring's oldest record reads from the segments and,
//! once it reaches the ring, from the ring: the offsets are the same, so there is no gap
//! and no duplicate.
//!
//! # Durability
//!
//! - [`FlushPolicy::EveryBatch`]: a send returns only once the batch holding its record is
//!   fsynced; producers sending at the same time share one fsync (group commit).
//! - The other policies acknowledge a send once its record is in the ring; they fsync every
//!   N records, every N bytes, every interval, or never (the OS writes back). The default,
//!   [`FlushPolicy::Interval`] of 1 s, loses at most the last second on a power loss.
//!   A process crash loses only what was still in the ring, not yet written: the writer
//!   hands its buffer to the OS whenever it catches up.
//! - [`Topic::fsync`](crate::broker::Topic::fsync) and [`Broker::fsync_and_checkpoint`](crate::broker::Broker::fsync_and_checkpoint) force an fsync of
//!   everything sent before the call; [`Topic::write_to_files`](crate::broker::Topic::write_to_files) only
//!   waits until it is in the files (safe from a process crash, not from a power loss).
//! - Committed group offsets are written to `consumer-offsets-checkpoint` (atomically) every
//!   [`BrokerBuilder::offsets_checkpoint_interval`](crate::broker::BrokerBuilder::offsets_checkpoint_interval) (5 s by default), by [`Broker::fsync_and_checkpoint`](crate::broker::Broker::fsync_and_checkpoint)
//!   and on close — one writer at a time, each a new file renamed over the old one, so a
//!   crash leaves the old checkpoint or the new one, never a mix. After a
//!   crash a group resumes from the last checkpoint: it re-reads at most what it committed
//!   since (at-least-once). An offset beyond a recovered log end is clamped to it and
//!   reported ([`Broker::clamped_offsets`](crate::broker::Broker::clamped_offsets)).
//!   The checkpoint, on the first data directory, holds the groups' offsets on replicated
//!   topics too; a replicated partition's recovered end is its high watermark, saved with
//!   its state by `fsync_and_checkpoint` once its replicas are fsynced (so it covers the
//!   offsets that checkpoint writes), and at leader or ISR changes and close. A checkpoint
//!   the background thread writes in between may hold offsets above the saved HW: after a
//!   crash those are clamped to it and reported.
//!   Creating a topic first rewrites the checkpoint without a deleted namesake's offsets,
//!   unless no checkpoint file read at open or written since names the topic.
//! - [`Broker::close`](crate::broker::Broker::close) stops the writers (draining the rings), closes every segment set,
//!   writes the checkpoints and the clean-shutdown marker, and joins every thread; the next
//!   open then skips revalidation, as Kafka does.

pub(crate) mod append;
mod data_dir;
pub(crate) mod dir_io;
pub(crate) mod encoded;
mod log;
pub(crate) mod replica_store;
pub(crate) mod replicated;

use std::path::PathBuf;
use std::time::Duration;

pub use data_dir::{
    compact_data_dir, describe_data_dir, read_dir_marker, ClampedOffset, CleanerProgress,
    DataDirDescription, DataDirMarker, PartitionRecovery,
};
pub(crate) use data_dir::{plan_markers, BrokerClock, DataDir, MarkerConfig, MetaLine, TopicMeta};
pub use replica_store::producer_states;

use std::path::Path;

use crate::partition::topic_config::{CleanupPolicy, TopicConfig};
use crate::storage::Io;
use crate::{Error, Result};

/// An I/O error naming what was done to which path.
pub(crate) fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("{what} {}", path.display()), e)
}

/// When a persisted topic's writer fsyncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushPolicy {
    /// After every batch the writer appends; a send is acknowledged only after its batch is
    /// fsynced, and concurrent producers share an fsync (group commit).
    EveryBatch,
    /// After this many records (Kafka's `flush.messages`).
    Messages(u64),
    /// After this many bytes of batches.
    Bytes(u64),
    /// When this long has passed since the last fsync (Kafka's `flush.ms`).
    Interval(Duration),
    /// Never explicitly: the operating system writes back (Kafka's default), when it
    /// chooses (the writer does not start write-back itself).
    Os,
}

impl Default for FlushPolicy {
    /// An fsync every second: a power loss loses at most the last second's records.
    fn default() -> Self {
        FlushPolicy::Interval(Duration::from_secs(1))
    }
}

/// A persisted topic's `compression.type` (Kafka's topic setting): which codec its batches
/// are compressed with on disk.
///
/// | value | what the batches get | costs (see [`record_batch`](crate::storage::record_batch#compression)) |
/// |---|---|---|
/// | `Producer` (default) | the producers' codec ([`ProducerConfig::compression`](crate::producer::ProducerConfig::compression); none unless one sets it; none for a replicated topic) | that codec's |
/// | `Uncompressed` | none, whatever the producers ask | none: reads are zero-copy |
/// | `Gzip` | gzip, level 6 | the slowest writes, good ratio |
/// | `Snappy` | snappy (xerial-framed, as Kafka's Java client) | fast, a modest ratio |
/// | `Lz4` | lz4 frame | the fastest, a modest ratio |
/// | `Zstd` | zstd, level 3 | the best ratio; writes slower than lz4, reads fast |
///
/// As in Kafka, a topic codec other than `Producer` is applied by the broker: logbus
/// compresses each batch as its writer builds it, so a codec costs CPU on the writer thread
/// (off the producers' path) and on every read from disk (a batch is decompressed once per
/// read, its records then shared out of the decompressed bytes), and saves disk bytes and
/// I/O. Records still in memory are read without any codec. Batches of any codec are read
/// whatever the setting, so changing it (a new topic config) leaves old batches readable.
/// A batch whose compressed records would not be smaller is written uncompressed.
///
/// Each codec needs its cargo feature (`gzip`, `snappy`, `lz4`, `zstd`, all on by default);
/// creating a topic with one that is off is [`Error::InvalidConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CompressionType {
    /// Keep the producers' codec (Kafka's `producer`, its default).
    #[default]
    Producer,
    /// No compression (Kafka's `uncompressed`).
    Uncompressed,
    /// gzip.
    Gzip,
    /// snappy.
    Snappy,
    /// lz4.
    Lz4,
    /// zstd.
    Zstd,
}

impl CompressionType {
    /// The codec this setting imposes; `None` for `Producer`.
    pub const fn codec(self) -> Option<crate::storage::record_batch::Compression> {
        use crate::storage::record_batch::Compression as C;
        match self {
            CompressionType::Producer => None,
            CompressionType::Uncompressed => Some(C::None),
            CompressionType::Gzip => Some(C::Gzip),
            CompressionType::Snappy => Some(C::Snappy),
            CompressionType::Lz4 => Some(C::Lz4),
            CompressionType::Zstd => Some(C::Zstd),
        }
    }

    /// Kafka's name for it (`producer`, `uncompressed`, `gzip`, `snappy`, `lz4`, `zstd`).
    pub const fn name(self) -> &'static str {
        match self {
            CompressionType::Producer => "producer",
            CompressionType::Uncompressed => "uncompressed",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        }
    }

    /// The setting Kafka's name names (`none` is `uncompressed`).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "producer" => CompressionType::Producer,
            "uncompressed" | "none" => CompressionType::Uncompressed,
            "gzip" => CompressionType::Gzip,
            "snappy" => CompressionType::Snappy,
            "lz4" => CompressionType::Lz4,
            "zstd" => CompressionType::Zstd,
            _ => return None,
        })
    }
}

/// How a persisted topic is kept on disk.
///
/// # Examples
///
/// ```
/// use logbus::persist::{FlushPolicy, PersistConfig};
///
/// let config = PersistConfig::new()
///     .flush(FlushPolicy::Bytes(1 << 20))
///     .segment_bytes(64 << 20)
///     .retention_bytes(1 << 30)
///     .max_message_bytes(1 << 20);
/// assert_eq!(config.flush_policy(), FlushPolicy::Bytes(1 << 20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistConfig {
    flush: FlushPolicy,
    segment_bytes: u64,
    retention_bytes: Option<u64>,
    max_message_bytes: u64,
    compression: CompressionType,
}

impl Default for PersistConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl PersistConfig {
    /// The default flush policy, 1 GiB segments, no size limit, 1 MiB records at most
    /// (Kafka's defaults).
    pub const fn new() -> Self {
        Self {
            flush: FlushPolicy::Interval(Duration::from_secs(1)),
            segment_bytes: 1 << 30,
            retention_bytes: None,
            max_message_bytes: 1_048_588,
            compression: CompressionType::Producer,
        }
    }

    /// The topic's `compression.type`: which codec its batches are compressed with on
    /// disk ([`CompressionType`]; `Producer` by default, as Kafka).
    pub const fn compression(mut self, compression: CompressionType) -> Self {
        self.compression = compression;
        self
    }

    /// The `compression.type` set.
    pub const fn compression_type(&self) -> CompressionType {
        self.compression
    }

    /// When to fsync.
    pub const fn flush(mut self, policy: FlushPolicy) -> Self {
        self.flush = policy;
        self
    }

    /// Roll segments at this size (`segment.bytes`; 4 KiB to 2^31 - 1).
    pub const fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    /// Delete the oldest segments while a partition stays at or above this size
    /// (`retention.bytes`).
    pub const fn retention_bytes(mut self, bytes: u64) -> Self {
        self.retention_bytes = Some(bytes);
        self
    }

    /// The largest record accepted at send, encoded (`max.message.bytes`; 64 B to 64 MiB).
    pub const fn max_message_bytes(mut self, bytes: u64) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// The largest record accepted (the `max_message_bytes` set).
    pub(crate) const fn message_limit(&self) -> u64 {
        self.max_message_bytes
    }

    /// The flush policy.
    pub const fn flush_policy(&self) -> FlushPolicy {
        self.flush
    }

    /// The settings of both halves that only fit together: size retention deletes, so a
    /// topic that only compacts refuses it.
    pub(crate) fn validate_with(&self, topic: &TopicConfig) -> Result<()> {
        if topic.cleanup() == CleanupPolicy::Compact {
            if let Some(b) = self.retention_bytes {
                return Err(Error::InvalidConfig {
                    name: "retention_bytes",
                    value: b.to_string(),
                    valid: "no size limit with CleanupPolicy::Compact (retention deletes: use \
                            CleanupPolicy::CompactAndDelete for both)"
                        .into(),
                });
            }
        }
        Ok(())
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |name, value: String, valid: &str| {
            Err(Error::InvalidConfig {
                name,
                value,
                valid: valid.into(),
            })
        };
        if !(4096..=i32::MAX as u64).contains(&self.segment_bytes) {
            return bad(
                "segment_bytes",
                self.segment_bytes.to_string(),
                "4096 ..= 2147483647",
            );
        }
        if !(64..=64 << 20).contains(&self.max_message_bytes) {
            return bad(
                "max_message_bytes",
                self.max_message_bytes.to_string(),
                "64 ..= 67108864",
            );
        }
        if let Some(codec) = self.compression.codec() {
            if !crate::storage::record_batch::codec_available(codec) {
                return bad(
                    "compression",
                    self.compression.name().into(),
                    "a codec this build has (its cargo feature on)",
                );
            }
        }
        match self.flush {
            FlushPolicy::Messages(0) | FlushPolicy::Bytes(0) => bad(
                "flush",
                format!("{:?}", self.flush),
                "a count of at least 1",
            ),
            FlushPolicy::Interval(d) if d.is_zero() => {
                bad("flush", "Interval(0s)".into(), "a positive interval")
            }
            _ => Ok(()),
        }
    }
}

/// A topic's configuration with persistence set: what [`TopicConfig::persist`] returns and
/// [`Broker::create_topic`](crate::broker::Broker::create_topic) takes to create a persisted
/// topic. A type of its own because a persisted topic encodes its records, so its key and
/// value types need a [`Codec`](crate::codec::Codec), which an in-memory topic's do not:
/// the compiler checks it where the types are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistedTopicConfig {
    topic: TopicConfig,
    persist: PersistConfig,
}

impl PersistedTopicConfig {
    /// The topic's settings (partitions, replication, retention).
    pub const fn topic_config(&self) -> TopicConfig {
        self.topic
    }

    /// The persistence settings (flush policy, segment size, size retention).
    pub const fn persist_config(&self) -> PersistConfig {
        self.persist
    }
}

/// The topic's settings without the persistence ones: what a Kafka cluster's topic is made
/// from (`KafkaBroker::create_topic`, feature `kafka`, takes either config, so code creating a
/// persisted topic runs against a cluster unchanged; the cluster keeps every topic on disk by
/// its own settings).
impl From<PersistedTopicConfig> for TopicConfig {
    fn from(config: PersistedTopicConfig) -> Self {
        config.topic
    }
}

impl TopicConfig {
    /// Keeps the topic's records in the broker's data directory, in Kafka's segment format,
    /// with `persist`'s flush policy and segment settings. Set it last: the partition count,
    /// the replication settings and the rest are [`TopicConfig`]'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::persist::{FlushPolicy, PersistConfig};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let broker = Broker::builder().data_dir(dir.path()).create(true).open()?;
    /// let config = TopicConfig::new(2).persist(PersistConfig::new().flush(FlushPolicy::EveryBatch));
    /// broker.create_topic::<String, String>("orders", config)?;
    /// broker.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const fn persist(self, persist: PersistConfig) -> PersistedTopicConfig {
        PersistedTopicConfig {
            topic: self,
            persist,
        }
    }
}

/// Where and how a broker's data directory is opened (the builder's part).
#[derive(Debug, Clone)]
pub(crate) struct DataDirConfig {
    pub(crate) dir: Option<PathBuf>,
    /// Every data directory (the first is `dir`), for replicated persisted topics.
    pub(crate) dirs: Vec<PathBuf>,
    /// `None`: the real file system (made at open, so that building an in-memory broker
    /// allocates nothing here).
    pub(crate) io: Option<crate::sync::Arc<dyn Io>>,
    pub(crate) offsets_interval: Duration,
    pub(crate) retention_interval: Duration,
    /// Start a partition whose directory is missing empty instead of refusing to open.
    pub(crate) recreate_missing: bool,
    /// Format missing or empty data directories (`BrokerBuilder::create`).
    pub(crate) create: bool,
    /// Format again a data directory that lost its marker while its siblings kept theirs.
    pub(crate) replace_lost: bool,
    /// Open one directory of a set alone, to read it (`describe_data_dir`): its siblings
    /// are not required, and no marker is written.
    pub(crate) one_of_set: bool,
    /// `data_dirs` was given an empty list: a directory was meant, none named.
    pub(crate) no_dirs: bool,
    /// The log cleaner's threads (Kafka's `log.cleaner.threads`).
    pub(crate) cleaner_threads: usize,
    /// The memory of each cleaner thread's key → offset map (Kafka's
    /// `log.cleaner.dedupe.buffer.size`, shared by its threads there).
    pub(crate) dedupe_buffer_size: usize,
    /// How long a cleaner thread sleeps when no log is dirty enough (Kafka's
    /// `log.cleaner.backoff.ms`).
    pub(crate) cleaner_backoff: Duration,
}

/// The smallest `log_cleaner_dedupe_buffer_size`: room for a few thousand keys.
pub const MIN_DEDUPE_BUFFER_SIZE: usize = 64 << 10;
/// The most `log_cleaner_threads`.
pub const MAX_LOG_CLEANER_THREADS: usize = 64;

impl DataDirConfig {
    /// The cleaner's settings, as `BrokerBuilder::open` accepts them.
    pub(crate) fn validate_cleaner(&self) -> Result<()> {
        if self.cleaner_threads > MAX_LOG_CLEANER_THREADS {
            return Err(Error::InvalidConfig {
                name: "log_cleaner_threads",
                value: self.cleaner_threads.to_string(),
                valid: format!("0 (no cleaner) to {MAX_LOG_CLEANER_THREADS}"),
            });
        }
        if self.dedupe_buffer_size < MIN_DEDUPE_BUFFER_SIZE {
            return Err(Error::InvalidConfig {
                name: "log_cleaner_dedupe_buffer_size",
                value: self.dedupe_buffer_size.to_string(),
                valid: format!("at least {MIN_DEDUPE_BUFFER_SIZE} bytes"),
            });
        }
        if self.cleaner_backoff.is_zero() {
            return Err(Error::InvalidConfig {
                name: "log_cleaner_backoff",
                value: "0s".into(),
                valid: "a positive duration".into(),
            });
        }
        Ok(())
    }
}

/// [`BrokerBuilder::data_dirs`](crate::broker::BrokerBuilder::data_dirs) given an empty list: refused rather than built in memory.
pub(crate) fn no_data_dirs() -> Error {
    Error::InvalidConfig {
        name: "data_dirs",
        value: "an empty list".into(),
        valid: "at least one directory".into(),
    }
}

impl Default for DataDirConfig {
    fn default() -> Self {
        Self {
            dir: None,
            dirs: Vec::new(),
            io: None,
            offsets_interval: Duration::from_secs(5),
            retention_interval: Duration::from_secs(1),
            recreate_missing: false,
            create: false,
            replace_lost: false,
            one_of_set: false,
            no_dirs: false,
            cleaner_threads: 1,
            dedupe_buffer_size: 32 << 20,
            cleaner_backoff: Duration::from_secs(15),
        }
    }
}
