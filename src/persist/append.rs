//! The write path to disk: how every persisted partition's records reach its segment set,
//! whatever the topic's replication factor. Records are encoded once into a RecordBatch v2
//! ([`BatchBuilder`]), cut where the segment set would refuse the batch, appended, and
//! fsynced as the topic's [`FlushPolicy`] says.
//!
//! Two callers drive it, the choice being where the records wait before the disk:
//! - RF 1 ([`super::log`]): a writer thread per partition, a gating reader of the ring, so
//!   producers never encode or write and a batch collects whatever they published
//!   meanwhile (group commit under [`FlushPolicy::EveryBatch`]).
//! - RF > 1 ([`super::replica_store`]): inline, under the replica set's lock, because a
//!   replica's log end (what followers fetch and HW counts) must not pass what its disk
//!   holds; the set's combined appends already batch concurrent senders there.

use std::time::{Duration, Instant};

use super::encoded::EncodedEntry;
use super::{CompressionType, FlushPolicy};
use crate::codec::Codec;
use crate::partition::Entry;
use crate::storage::record_batch::Compression;
use crate::storage::{BatchBuilder, SegmentSet};
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::sync::StdArc as Arc;
use crate::Result;

/// A batch stops taking records once it reaches this size.
pub(crate) const BATCH_TARGET: usize = 256 << 10;

/// Which codec a partition's batches are compressed with, as Kafka decides it: the topic's
/// `compression.type` when it names a codec (the broker recompresses), else
/// ([`CompressionType::Producer`]) the producers' codec. logbus's writer batches the records
/// of every producer of a partition together (a producer does not build batches), so the
/// producers' codec is the one of the producer that most recently began sending to the
/// partition ([`ProducerConfig::compression`](crate::producer::ProducerConfig::compression)).
#[derive(Debug)]
pub(crate) struct CodecChoice {
    topic: CompressionType,
    /// The producers' codec id (attribute bits 0–2).
    producer: AtomicU32,
}

impl CodecChoice {
    pub(crate) fn new(topic: CompressionType) -> Arc<Self> {
        Arc::new(Self {
            topic,
            producer: AtomicU32::new(0),
        })
    }

    /// A producer with codec `codec` began sending to the partition.
    pub(crate) fn note_producer(&self, codec: Compression) {
        // Relaxed: a hint for the next batch, ordered with nothing else.
        let id = u32::from(codec.id());
        if self.producer.load(Ordering::Relaxed) != id {
            self.producer.store(id, Ordering::Relaxed);
        }
    }

    /// The codec of the next batch.
    pub(crate) fn for_batch(&self) -> Compression {
        match self.topic.codec() {
            Some(codec) => codec,
            // An id `note_producer` stored (0..=4): the cast keeps it.
            None => Compression::from_attributes(self.producer.load(Ordering::Relaxed) as i16),
        }
    }
}

/// When the flush policy wants an fsync: what was appended since the last one.
#[derive(Debug)]
pub(crate) struct Flush {
    policy: FlushPolicy,
    unsynced_records: u64,
    unsynced_bytes: u64,
    last_sync: Instant,
}

impl Flush {
    pub(crate) fn new(policy: FlushPolicy) -> Self {
        Self {
            policy,
            unsynced_records: 0,
            unsynced_bytes: 0,
            last_sync: Instant::now(),
        }
    }

    /// Counts an append of `records` records in `bytes` bytes: whether an fsync is due.
    pub(crate) fn appended(&mut self, records: u64, bytes: u64) -> bool {
        self.unsynced_records += records;
        self.unsynced_bytes += bytes;
        match self.policy {
            FlushPolicy::EveryBatch => true,
            FlushPolicy::Messages(m) => self.unsynced_records >= m,
            FlushPolicy::Bytes(b) => self.unsynced_bytes >= b,
            FlushPolicy::Interval(d) => self.last_sync.elapsed() >= d,
            FlushPolicy::Os => false,
        }
    }

    /// Under an interval policy with records not yet fsynced: how long until the fsync is
    /// due (zero once it is). `None` otherwise.
    pub(crate) fn interval_left(&self) -> Option<Duration> {
        match self.policy {
            FlushPolicy::Interval(d) if self.unsynced_records > 0 => {
                Some(d.saturating_sub(self.last_sync.elapsed()))
            }
            _ => None,
        }
    }

    /// Everything appended so far is fsynced.
    pub(crate) fn synced(&mut self) {
        self.unsynced_records = 0;
        self.unsynced_bytes = 0;
        self.last_sync = Instant::now();
    }
}

/// One partition's batch being built, with its encoding scratch (reused across batches, so
/// a steady stream allocates nothing), and its flush accounting.
#[derive(Debug)]
pub(crate) struct Appender {
    builder: BatchBuilder,
    key: Vec<u8>,
    value: Vec<u8>,
    /// No batch grows past this (what the segment set takes), unless one record alone does.
    limit: usize,
    /// A batch stops taking records at this size.
    target: usize,
    /// The codec of each batch, read as the batch begins.
    codec: Arc<CodecChoice>,
    pub(crate) flush: Flush,
}

/// What [`Appender::push`] did with a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// In the batch.
    Added,
    /// Not added: the batch is full (it holds at least one record).
    Full,
}

impl Appender {
    /// Batches of at most `limit` bytes (unless one record alone is larger), cut at
    /// `target`.
    pub(crate) fn new(
        policy: FlushPolicy,
        limit: usize,
        target: usize,
        codec: Arc<CodecChoice>,
    ) -> Self {
        Self {
            builder: BatchBuilder::new(0),
            key: Vec::new(),
            value: Vec::new(),
            limit,
            target,
            codec,
            flush: Flush::new(policy),
        }
    }

    /// Starts a new batch whose first record gets offset `base`, compressed with the codec
    /// the partition's [`CodecChoice`] names now (records are encoded as they are pushed;
    /// the batch is compressed once, when it is appended).
    pub(crate) fn begin(&mut self, base: u64) {
        self.builder.clear(base);
        // Every codec a CodecChoice names is one this build has (checked at config).
        let _ = self.builder.set_compression(self.codec.for_batch());
    }

    /// Whether the batch reached its target size.
    pub(crate) fn is_ripe(&self) -> bool {
        self.builder.size() >= self.target
    }

    /// Encodes `entry` into the batch, unless it could take a non-empty batch past the
    /// limit (a refused batch would take the log offline).
    ///
    /// # Errors
    ///
    /// The record cannot be encoded (too large for a record batch).
    pub(crate) fn push<K: Codec, V: Codec>(&mut self, entry: &Entry<K, V>) -> Result<Pushed> {
        let encoded = EncodedEntry::new(entry, &mut self.key, &mut self.value);
        if !self.builder.is_empty() && self.builder.size() + encoded.bound() > self.limit {
            return Ok(Pushed::Full);
        }
        encoded.append_to(&mut self.builder)?;
        Ok(Pushed::Added)
    }

    /// The encoded size bound of `entry` (as `push` counts it).
    pub(crate) fn bound<K: Codec, V: Codec>(&mut self, entry: &Entry<K, V>) -> usize {
        EncodedEntry::new(entry, &mut self.key, &mut self.value).bound()
    }

    /// Appends the batch to `set` at `set`'s log end, in leader epoch `epoch` (`None`: the
    /// set's current one): the bytes appended.
    ///
    /// # Errors
    ///
    /// The segment set's append errors.
    pub(crate) fn append(&mut self, set: &mut SegmentSet, epoch: Option<i32>) -> Result<u64> {
        if let Some(e) = epoch {
            set.set_partition_leader_epoch(e);
        }
        set.append_built(&mut self.builder)?;
        Ok(self.builder.finished_size() as u64)
    }

    /// Appends the batch to `set` at offset `base`, past the set's log end (a gap the
    /// leader's log has), in leader epoch `epoch`: the bytes appended.
    ///
    /// # Errors
    ///
    /// The segment set's append errors.
    pub(crate) fn append_at(&mut self, set: &mut SegmentSet, base: u64, epoch: i32) -> Result<u64> {
        set.set_partition_leader_epoch(epoch);
        self.builder.set_base_offset(base);
        self.builder.set_partition_leader_epoch(epoch);
        set.append_batch(self.builder.finish())?;
        Ok(self.builder.finished_size() as u64)
    }

    /// Counts the records just appended and fsyncs `set` when the policy says so: whether
    /// it did.
    ///
    /// # Errors
    ///
    /// The fsync's error.
    pub(crate) fn apply_policy(
        &mut self,
        set: &mut SegmentSet,
        records: u64,
        bytes: u64,
    ) -> Result<bool> {
        if self.flush.appended(records, bytes) {
            set.fsync()?;
            self.flush.synced();
            return Ok(true);
        }
        Ok(false)
    }
}
