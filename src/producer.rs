//! Producers (layer 7): records, Kafka's partitioner, and sending.
//!
//! A [`Producer<K, V>`](Producer) sends [`Record`]s to the topics of its broker. Where a
//! record goes is decided as Kafka's `KafkaProducer` decides it:
//!
//! 1. the record's explicit partition;
//! 2. else a user [`Partitioner`], if the producer has one (it may decline);
//! 3. else, with a key, `toPositive(murmur2(key bytes)) % partitions` over the key's
//!    [`Codec`] bytes ([`partition_for_key`]), so a key lands on the same partition number
//!    here as in a Kafka cluster with the same partition count;
//! 4. else sticky batches: the producer keeps sending to one partition for
//!    [`ProducerConfig::sticky_batch`] records, then moves to the next (Kafka's
//!    `BuiltInPartitioner` switches after `batch.size` bytes; records here are not
//!    serialized, so the batch is counted in records).
//!
//! # Delivery semantics
//!
//! What a record may go through between `send` and a consumer's `poll`, and the settings
//! for each guarantee (as Kafka's, on a replicated topic; one replica meets every acks
//! level at append):
//!
//! | guarantee | producer | consumer | may lose | may repeat |
//! |---|---|---|---|---|
//! | at most once | `acks(Acks::None)` or `Acks::Leader`, `retries(0)` | commits before it processes (`commit_sync` right after `poll`) | a record whose leader failed before a follower copied it; records polled but not processed when the consumer crashed | nothing |
//! | at least once | `acks(Acks::All)` with retries (the defaults), idempotence off | commits after it processes | nothing acknowledged | a record retried after an append whose acknowledgement was lost (counted in [`ProducerMetrics`]); records processed since the last commit, after a crash or rebalance |
//! | at least once, no duplicates from retries | the defaults: `acks = all`, idempotence on ([`ProducerConfig::enable_idempotence`]) | commits after it processes | nothing acknowledged | records processed since the last commit (the consumer side) |
//! | exactly once (consume → transform → produce) | [`ProducerConfig::transactional_id`]; each batch of work in [`begin_transaction`](Producer::begin_transaction) .. [`commit_transaction`](Producer::commit_transaction), the input offsets given to [`send_offsets_to_transaction`](Producer::send_offsets_to_transaction) | `isolation_level(IsolationLevel::ReadCommitted)`, no commits of its own | nothing committed | nothing: a transaction's output and its input offsets commit together or not at all; a crashed worker's open transaction is aborted by the next `init_transactions` with its id, which resumes from the committed offsets |
//!
//! Exactly once holds within logbus: for side effects outside it (a database, a mail) a
//! transaction can still be retried after a crash; make those idempotent.
//!
//! A transaction's records are in the log before it commits: read-uncommitted consumers
//! (the default) see them, aborted ones too. Read-committed consumers read up to each
//! partition's last stable offset (the first offset of its earliest open transaction) and
//! skip aborted records; no consumer ever returns a COMMIT/ABORT marker, whose offset is a
//! gap. A transaction open longer than its
//! [`transaction_timeout`](ProducerConfig::transaction_timeout) is aborted by the
//! coordinator (on the broker's clock) so that it cannot hold the LSO back for ever.
//!
//! ```
//! use std::time::Duration;
//! use logbus::consumer::{ConsumerConfig, IsolationLevel, OffsetReset};
//! use logbus::producer::{ProducerConfig, Record};
//! use logbus::{Broker, TopicConfig, TopicPartition};
//!
//! let broker = Broker::in_memory();
//! broker.create_topic::<(), u64>("out", TopicConfig::new(1))?;
//! let producer = broker
//!     .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("worker"))?;
//! producer.init_transactions()?;
//! producer.begin_transaction()?;
//! producer.send(Record::new("out", 1))?;
//! producer.abort_transaction()?;
//! producer.begin_transaction()?;
//! producer.send(Record::new("out", 2))?;
//! producer.commit_transaction()?;
//!
//! let mut consumer = broker.consumer::<(), u64>(
//!     ConsumerConfig::new()
//!         .auto_offset_reset(OffsetReset::Earliest)
//!         .isolation_level(IsolationLevel::ReadCommitted),
//! )?;
//! consumer.assign(&[TopicPartition::new("out", 0)])?;
//! let got = consumer.poll(Duration::from_millis(100))?;
//! assert_eq!(got.iter().map(|r| r.value).collect::<Vec<_>>(), [2]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `examples/exactly_once.rs` runs the whole loop with a consumer group and crashes.
//! # Idempotence
//!
//! With `acks = all` (the default) a producer is idempotent, as Kafka's producers are since
//! 3.0 (KIP-98; [`ProducerConfig::enable_idempotence`]): the broker gives it a producer id
//! and epoch ([`Producer::producer_identity`]), and every record it sends to a partition
//! carries the next sequence number of that (producer, partition), given under the lock its
//! append takes anyway (the ring producer's with one replica, the replica set's otherwise),
//! so sequences follow the log's order. The partition's leader checks a retry's sequence in
//! the same critical section as the append: a retry of records it holds is answered with
//! their offsets and not appended again, so a send retried across a leader crash and
//! election never leaves a duplicate. What follows from the sequences:
//! - [`Error::OutOfOrderSequence`]: a record's sequence is not the next one (the records
//!   before it are missing from the new leader's log and their own retries have not come);
//!   the producer retries it within its `delivery_timeout`.
//! - A send that gives up after its sequence was given bumps the producer's epoch
//!   ([`Broker::bump_producer_epoch`], KIP-360): its sequences restart at 0 everywhere,
//!   and older retries still in flight are [`Error::ProducerFenced`].
//! - The producer's state per partition follows the log on disk (batch headers and
//!   Kafka's `.snapshot` files), so after a broker restart a retry made with
//!   [`Producer::send_sequenced`] is still recognised.
//!
//! # Examples
//!
//! ```
//! use logbus::broker::{Broker, TopicConfig};
//! use logbus::producer::{partition_for_key, Record};
//!
//! let broker = Broker::in_memory();
//! broker.create_topic::<String, u64>("clicks", TopicConfig::new(6))?;
//! let producer = broker.producer::<String, u64>();
//! let meta = producer.send(Record::new("clicks", 1).key("user-7".to_string()))?;
//! assert_eq!(meta.partition, partition_for_key(b"user-7", 6));
//! # Ok::<(), logbus::Error>(())
//! ```

use std::borrow::Cow;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use crate::broker::{Broker, TopicInner};
use crate::codec::Codec;
pub use crate::partition::Acks;
use crate::partition::{
    append_error, valid_timestamp, AppendError, AppendWait, Appender, Entry, SendCounters,
    SendPolicy,
};
pub use crate::partition::{ProducerIdentity, ProducerState};
use crate::sync::time;
// Std's Arc (also under loom): partitioners are trait objects (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::sync::{Mutex, MutexGuard};
use crate::{Error, Result};

mod error;
mod held_line;
mod partition_producer;
mod partitioner;
mod pending_send;
mod record;
pub use crate::storage::record_batch::Compression;
pub(crate) mod txn;
pub use error::{ProduceBatchError, ProduceError, ProduceTimeoutError, TryProduceError};
pub use partition_producer::{PartitionProducer, Payload};
pub use partitioner::{murmur2, partition_for_key, to_positive, Partitioner};
pub use pending_send::PendingSend;
use pending_send::Sent;
pub use record::{Record, RecordMetadata};

/// How a producer behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerConfig {
    sticky_batch: u32,
    acks: Acks,
    retries: u32,
    delivery_timeout: Duration,
    request_timeout: Duration,
    compression: Compression,
    /// Interned: the config stays `Copy`.
    transactional_id: Option<&'static str>,
    transaction_timeout: Duration,
    /// `None`: Kafka's default (on exactly when `acks = all`).
    idempotence: Option<bool>,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl ProducerConfig {
    /// Sticky batches of 256 records; `acks = all`, retries without limit within a
    /// 120 s delivery timeout, 30 s per attempt, idempotence on (Kafka's defaults since
    /// 3.0).
    pub const fn new() -> Self {
        Self {
            sticky_batch: 256,
            acks: Acks::All,
            retries: u32::MAX,
            delivery_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            compression: Compression::None,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
            idempotence: None,
        }
    }

    /// The idempotent producer (Kafka's `enable.idempotence`, KIP-98): the broker gives
    /// the producer an id and epoch, every record carries a per-partition sequence number,
    /// and a partition's leader appends a retried record once only (it answers the retry
    /// with the first append's offset), so retries after a leader change never duplicate.
    ///
    /// Kafka's default since 3.0: on with `acks = all` (the default), off with any other
    /// level unless asked. Turning it on explicitly with `acks` other than `All` is an
    /// [`Error::InvalidConfig`] when the producer is made, as in Kafka.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::producer::{Acks, ProducerConfig};
    ///
    /// assert!(ProducerConfig::new().is_idempotent());
    /// assert!(!ProducerConfig::new().acks(Acks::Leader).is_idempotent());
    /// let broker = logbus::Broker::in_memory();
    /// let bad = ProducerConfig::new().acks(Acks::Leader).enable_idempotence(true);
    /// assert!(broker.producer_with_config::<(), u64>(bad).is_err());
    /// ```
    pub const fn enable_idempotence(mut self, on: bool) -> Self {
        self.idempotence = Some(on);
        self
    }

    /// Whether the producer will be idempotent (see
    /// [`enable_idempotence`](Self::enable_idempotence)).
    pub const fn is_idempotent(&self) -> bool {
        match self.idempotence {
            Some(on) => on,
            None => matches!(self.acks, Acks::All),
        }
    }

    /// Makes the producer transactional (Kafka's `transactional.id`; it implies
    /// idempotence): call [`Producer::init_transactions`] once, then send only inside
    /// [`begin_transaction`](Producer::begin_transaction) ..
    /// [`commit_transaction`](Producer::commit_transaction) or
    /// [`abort_transaction`](Producer::abort_transaction). A new producer with the same
    /// id fences the previous one (see [`Producer::init_transactions`]).
    pub fn transactional_id(mut self, id: &str) -> Self {
        self.transactional_id = Some(crate::sync::intern(id));
        self
    }

    /// How long a transaction may stay open before the coordinator aborts it (Kafka's
    /// `transaction.timeout.ms`, default 60 s), on the broker's clock.
    pub const fn transaction_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }

    /// The producer's codec (Kafka's producer `compression.type`; none by default): the
    /// batches of a persisted topic whose own `compression.type` is
    /// [`Producer`](crate::persist::CompressionType::Producer) (its default) are compressed
    /// with it on disk. A topic that names a codec compresses with that one instead, as a
    /// Kafka broker recompresses. In-memory topics keep records as objects and ignore it.
    ///
    /// logbus's producers hand records to the partition, whose writer batches the records
    /// of all its producers together; a batch therefore takes the codec of the producer that
    /// most recently began sending to the partition. Replicated persisted topics take
    /// their topic's codec only (with `Producer`, their batches are uncompressed): their
    /// replicas write inline, and the producers' codec does not reach them yet. Codec costs:
    /// see [`CompressionType`](crate::persist::CompressionType).
    pub const fn compression(mut self, codec: Compression) -> Self {
        self.compression = codec;
        self
    }

    /// The codec set.
    pub const fn compression_codec(&self) -> Compression {
        self.compression
    }

    /// How many replicas must have a record before `send` returns (replicated topics;
    /// with one replica every level is met at append). See [`Acks`].
    pub const fn acks(mut self, acks: Acks) -> Self {
        self.acks = acks;
        self
    }

    /// How often a failed attempt on a replicated topic is retried (no leader, not enough
    /// replicas, the leader changed, no acknowledgement in time). A retry after the record
    /// was appended may duplicate it ([`ProducerMetrics`]). Never with `Acks::None`.
    pub const fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// How long one send may take, retries included (Kafka's `delivery.timeout.ms`).
    pub const fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// How long one attempt waits for its acknowledgement (Kafka's `request.timeout.ms`).
    pub const fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The acks level.
    pub const fn acks_level(&self) -> Acks {
        self.acks
    }

    /// Records without key or partition go to one partition for this many records, then
    /// to the next (at least 1).
    pub const fn sticky_batch(mut self, records: u32) -> Self {
        self.sticky_batch = records;
        self
    }

    /// The transactional id, if set (for the `kafka` face's `transactional.id`).
    #[cfg(feature = "kafka")]
    pub(crate) fn transactional(&self) -> Option<&'static str> {
        self.transactional_id
    }

    /// The transaction timeout (the `kafka` face's `transaction.timeout.ms`).
    #[cfg(feature = "kafka")]
    pub(crate) fn transaction_timeout_value(&self) -> Duration {
        self.transaction_timeout
    }

    /// The retries, delivery timeout and request timeout (the `kafka` face's `retries`,
    /// `delivery.timeout.ms` and `request.timeout.ms`).
    #[cfg(feature = "kafka")]
    pub(crate) fn retry_settings(&self) -> (u32, Duration, Duration) {
        (self.retries, self.delivery_timeout, self.request_timeout)
    }

    /// Checks the settings (the in-process and the `kafka` face's producers alike).
    pub(crate) fn validate(&self) -> Result<()> {
        if !crate::storage::record_batch::codec_available(self.compression) {
            return Err(Error::InvalidConfig {
                name: "compression",
                value: self.compression.to_string(),
                valid: "none, or a codec this build has (gzip, snappy, lz4, zstd: each its \
                        cargo feature)"
                    .into(),
            });
        }
        if self.idempotence == Some(true) && !matches!(self.acks, Acks::All) {
            return Err(Error::InvalidConfig {
                name: "enable_idempotence",
                value: format!("true with acks = {:?}", self.acks),
                valid: "acks = All with idempotence (or enable_idempotence(false))".into(),
            });
        }
        if self.sticky_batch == 0 {
            return Err(Error::InvalidConfig {
                name: "sticky_batch",
                value: "0".into(),
                valid: "at least 1 record".into(),
            });
        }
        if self.transactional_id == Some("") {
            return Err(Error::InvalidConfig {
                name: "transactional_id",
                value: "\"\"".into(),
                valid: "a non-empty id".into(),
            });
        }
        for (name, d) in [
            ("delivery_timeout", self.delivery_timeout),
            ("request_timeout", self.request_timeout),
            ("transaction_timeout", self.transaction_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::InvalidConfig {
                    name,
                    value: "0s".into(),
                    valid: "a positive duration".into(),
                });
            }
        }
        Ok(())
    }
}

/// What a producer's retries did on replicated topics (shared by its clones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProducerMetrics {
    /// Attempts retried.
    pub retries: u64,
    /// Retries of records already appended once: without idempotence each may have left
    /// a duplicate in the log; with it, the leader recognises those it still has
    /// (`deduplicated`).
    pub possible_duplicates: u64,
    /// Retries the partition leader answered with the first append's offsets instead of
    /// appending again (the idempotent producer).
    pub deduplicated: u64,
}

/// How a producer chooses partitions for records without an explicit one.
enum Choice<K> {
    /// Kafka's default: the key's codec bytes, hashed.
    KeyHash(fn(&K, &mut Vec<u8>)),
    /// A user partitioner; when it declines, sticky batches (the key type may have no
    /// codec to hash).
    User(Arc<dyn Partitioner<K>>),
}

/// One topic as a producer caches it: its partitions' appenders and the sticky state.
struct Cached<K, V> {
    topic: Arc<TopicInner<K, V>>,
    /// Address and length of the last `&'static str` name that found this topic.
    static_name: Option<(usize, usize)>,
    generation: u64,
    appenders: Vec<Appender<K, V>>,
    /// Per partition: the line of `send_async` records held for room, in call order.
    held: Vec<Arc<held_line::HeldLine<K, V>>>,
    sticky: u32,
    sticky_left: u32,
    /// Acks, retries and timeouts for replicated partitions.
    policy: SendPolicy,
}

impl<K, V> Cached<K, V> {
    /// Whether this is the topic `name` names: a `&'static str` seen before by its address
    /// (static strings are never freed, so address and length say the bytes), others by
    /// their bytes.
    #[inline]
    // The `Cow` itself, not a `&str`: whether it borrows says whether its address lasts.
    #[allow(clippy::ptr_arg)]
    fn is_named(&self, name: &Cow<'static, str>) -> bool {
        match name {
            Cow::Borrowed(s) => {
                self.static_name == Some((s.as_ptr() as usize, s.len())) || *self.topic.name == **s
            }
            Cow::Owned(s) => *self.topic.name == **s,
        }
    }

    fn new(topic: Arc<TopicInner<K, V>>, policy: SendPolicy) -> Self {
        let mut c = Self {
            static_name: None,
            generation: u64::MAX,
            topic,
            appenders: Vec::new(),
            held: Vec::new(),
            sticky: 0,
            sticky_left: 0,
            policy,
        };
        c.refresh();
        // Producers start their sticky rotation at different partitions: std's per-thread
        // random hash keys, which differ at every `RandomState::new`, are seed enough.
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        c.sticky = (seed % c.appenders.len().max(1) as u64) as u32;
        c
    }

    /// Picks up added partitions (the check inline: it runs on every send).
    #[inline]
    fn refresh(&mut self) {
        let generation = self.topic.generation();
        if generation != self.generation {
            self.add_partitions(generation);
        }
    }

    #[cold]
    fn add_partitions(&mut self, generation: u64) {
        let parts = self.topic.partitions();
        for p in parts.iter().skip(self.appenders.len()) {
            p.note_producer_codec(self.policy.compression);
            self.appenders
                .push(p.appender().with_policy(self.policy.clone()));
            self.held.push(Arc::default());
        }
        self.generation = generation;
    }
}

struct State<K, V> {
    /// The topics this producer sent to, searched by name: a producer usually sends to a
    /// few topics, and comparing a short name beats hashing it.
    topics: Vec<Cached<K, V>>,
    /// The index in `topics` of the topic the last send went to: a producer usually sends
    /// to one topic again, and one comparison then finds it (a hint only: checked by name).
    last: usize,
    /// Key bytes for the partitioner (reused).
    scratch: Vec<u8>,
    /// `send_batch`: the run of entries for one partition being gathered, and what each
    /// record said about its partition and timestamp (to hand it back unchanged).
    run: Vec<Entry<K, V>>,
    run_meta: Vec<(Option<u32>, Option<i64>)>,
}

impl<K, V> State<K, V> {
    fn new() -> Self {
        Self {
            topics: Vec::new(),
            last: 0,
            scratch: Vec::new(),
            run: Vec::new(),
            run_meta: Vec::new(),
        }
    }
}

/// A `send_batch` that stopped: the error with its record, and the records after it not
/// sent, in order.
type RunFailure<K, V> = (ProduceError<K, V>, Vec<Record<K, V>>);

/// A fresh producer id from `broker` when `config` is idempotent.
fn identity_of(
    broker: &Broker,
    config: &ProducerConfig,
) -> Option<Arc<crate::partition::producer_state::ProducerHandle>> {
    if !config.is_idempotent() {
        return None;
    }
    let bumper = broker.clone();
    Some(Arc::new(
        crate::partition::producer_state::ProducerHandle::new(
            broker.init_producer_id(),
            move |from| bumper.bump_producer_epoch(from),
        ),
    ))
}

/// Sends records to a broker's topics. `Clone` (each clone has its own per-partition
/// handles, so threads that each hold a clone never contend) and `Send + Sync`.
///
/// A producer checks a topic's types once, when it first sends to it, then caches it.
/// `send` blocks only on an [`Overflow::Block`](crate::broker::Overflow::Block) topic whose
/// partition is full of records a registered group has not committed.
pub struct Producer<K, V> {
    broker: Broker,
    config: ProducerConfig,
    choice: Arc<Choice<K>>,
    state: Mutex<State<K, V>>,
    /// Retries on replicated topics, shared by clones ([`ProducerMetrics`]).
    counters: Arc<SendCounters>,
    /// A transactional producer's state, shared by its clones (`txn`).
    txn: Option<Arc<txn::TxnClient>>,
    /// The broker-assigned producer id and epoch of an idempotent producer (each clone
    /// its own: sequences are per producer id and partition).
    identity: Option<Arc<crate::partition::producer_state::ProducerHandle>>,
}

impl<K, V> fmt::Debug for Producer<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<K, V> Clone for Producer<K, V> {
    fn clone(&self) -> Self {
        Self {
            broker: self.broker.clone(),
            config: self.config,
            choice: Arc::clone(&self.choice),
            state: Mutex::new(State::new()),
            counters: Arc::clone(&self.counters),
            txn: self.txn.clone(),
            identity: identity_of(&self.broker, &self.config),
        }
    }
}

impl Broker {
    /// A producer with the default configuration and Kafka's default partitioner.
    pub fn producer<K, V>(&self) -> Producer<K, V>
    where
        K: Codec + Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        Producer::new(
            self.clone(),
            ProducerConfig::new(),
            Choice::KeyHash(<K as Codec>::encode),
        )
    }

    /// A producer with `config` and Kafka's default partitioner.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] (a sticky batch of 0).
    pub fn producer_with_config<K, V>(&self, config: ProducerConfig) -> Result<Producer<K, V>>
    where
        K: Codec + Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        config.validate()?;
        Ok(Producer::new(
            self.clone(),
            config,
            Choice::KeyHash(<K as Codec>::encode),
        ))
    }

    /// A producer whose records without an explicit partition go where `partitioner`
    /// says (or, when it declines, to sticky batches: keys of a type without a [`Codec`]
    /// cannot be hashed).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] (a sticky batch of 0).
    pub fn producer_with_partitioner<K, V>(
        &self,
        config: ProducerConfig,
        partitioner: impl Partitioner<K>,
    ) -> Result<Producer<K, V>>
    where
        K: Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        config.validate()?;
        Ok(Producer::new(
            self.clone(),
            config,
            Choice::User(Arc::new(partitioner)),
        ))
    }
}

impl<K, V> Producer<K, V>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    fn new(broker: Broker, config: ProducerConfig, choice: Choice<K>) -> Self {
        let identity = identity_of(&broker, &config);
        Self {
            txn: config
                .transactional_id
                .map(|id| Arc::new(txn::TxnClient::new(id, broker.clone()))),
            broker,
            config,
            choice: Arc::new(choice),
            state: Mutex::new(State::new()),
            counters: Arc::default(),
            identity,
        }
    }

    /// The broker-assigned producer id and epoch (`None`: not idempotent). The epoch
    /// goes up when a send gives up after its sequence was assigned (KIP-360): the
    /// producer's sequences start again at 0 in the new epoch.
    pub fn producer_identity(&self) -> Option<crate::partition::ProducerIdentity> {
        self.identity.as_ref().map(|h| h.current())
    }

    /// What this producer's retries did on replicated topics (with its clones').
    pub fn metrics(&self) -> ProducerMetrics {
        use crate::sync::atomic::Ordering;
        ProducerMetrics {
            // Relaxed: counters, read for reporting only.
            retries: self.counters.retries.load(Ordering::Relaxed),
            // Relaxed: as above.
            possible_duplicates: self.counters.resent_after_append.load(Ordering::Relaxed),
            // Relaxed: as above.
            deduplicated: self.counters.deduplicated.load(Ordering::Relaxed),
        }
    }

    /// Sends `record` as record `sequence` of producer `producer` on its partition: the
    /// sequence given, not this producer's next one (Kafka's produce request carries the
    /// producer id, epoch and base sequence of every batch). This is how a send is retried
    /// from outside the producer, e.g. after the broker restarted: the partition's leader
    /// recognises a record it already holds (from the log, recovered from the batch
    /// headers on disk) and answers with its first offset, appending nothing; a sequence
    /// that is not the next one is [`Error::OutOfOrderSequence`], an old epoch
    /// [`Error::ProducerFenced`]. `producer` comes from
    /// [`Broker::init_producer_id`](crate::Broker::init_producer_id) (or this producer's
    /// [`producer_identity`](Self::producer_identity)).
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::producer::Record;
    /// use logbus::{Broker, TopicConfig};
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("t", TopicConfig::new(1))?;
    /// let producer = broker.producer::<(), u64>();
    /// let id = broker.init_producer_id();
    /// let first = producer.send_sequenced(Record::new("t", 7), id, 0)?;
    /// // The same send again (a retry): its offset, nothing appended.
    /// let again = producer.send_sequenced(Record::new("t", 7), id, 0)?;
    /// assert_eq!(first.offset, again.offset);
    /// assert!(producer.send_sequenced(Record::new("t", 9), id, 5).is_err()); // 1 expected
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send), and [`Error::OutOfOrderSequence`],
    /// [`Error::ProducerFenced`].
    pub fn send_sequenced(
        &self,
        record: Record<K, V>,
        producer: crate::partition::ProducerIdentity,
        sequence: i32,
    ) -> Result<RecordMetadata, ProduceError<K, V>> {
        let mut state = self.state.lock();
        let (t, partition) = match self.route(&mut state, &record) {
            Ok(at) => at,
            Err(error) => return Err(ProduceError::new(error, record)),
        };
        let (entry, sent) = self.entry_of(record, partition);
        let appender = &mut state.topics[t].appenders[partition as usize];
        let done = appender.append_sequenced(entry, producer, sequence);
        drop(state);
        sent.outcome(done)
    }

    /// The policy replicated partitions apply to this producer's appends.
    fn policy(&self) -> SendPolicy {
        SendPolicy {
            acks: self.config.acks,
            retries: self.config.retries,
            delivery_timeout: self.config.delivery_timeout,
            request_timeout: self.config.request_timeout,
            counters: Arc::clone(&self.counters),
            compression: self.config.compression,
            producer: self.identity.clone(),
        }
    }

    /// Sends `record` and returns where it went once the topic's acks level holds,
    /// waiting while its partition is full of records a registered group has not committed
    /// ([`Overflow::Block`](crate::broker::Overflow::Block)); never waits for room on a
    /// `DropOldest` topic. On a replicated partition it retries as [`ProducerConfig`]
    /// says, within its `delivery_timeout`.
    ///
    /// # Errors
    ///
    /// [`ProduceError`] with the record and: [`Error::UnknownTopic`],
    /// [`Error::TypeMismatch`], [`Error::PartitionOutOfRange`] (explicit or user-chosen
    /// partition, with the topic's partition count), [`Error::InvalidTimestamp`],
    /// [`Error::RecordTooLarge`] (persisted topics), [`Error::Closed`] (the topic was
    /// deleted meanwhile, or the broker closed), [`Error::PartitionOffline`] (a persisted
    /// partition's log failed); on replicated partitions [`Error::NotEnoughReplicas`],
    /// [`Error::LeaderNotAvailable`], [`Error::Timeout`] (the `delivery_timeout` ran out),
    /// and [`Error::NotAcknowledged`] (in the log, not acknowledged: no record handed back).
    pub fn send(&self, record: Record<K, V>) -> Result<RecordMetadata, ProduceError<K, V>> {
        self.send_with(record, AppendWait::Until(None))
    }

    /// Sends `record` if its partition has room now; otherwise hands it back at once.
    ///
    /// # Errors
    ///
    /// [`TryProduceError`]: [`is_full`](TryProduceError::is_full) ([`Error::Full`]) when
    /// the partition had no room, else those of [`send`](Self::send).
    pub fn try_send(&self, record: Record<K, V>) -> Result<RecordMetadata, TryProduceError<K, V>> {
        self.send_with(record, AppendWait::No)
            .map_err(TryProduceError)
    }

    /// Like [`send`](Self::send), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// [`ProduceTimeoutError`]: [`is_timeout`](ProduceTimeoutError::is_timeout)
    /// ([`Error::Timeout`]) when `timeout` passed first, else those of
    /// [`send`](Self::send).
    pub fn send_timeout(
        &self,
        record: Record<K, V>,
        timeout: Duration,
    ) -> Result<RecordMetadata, ProduceTimeoutError<K, V>> {
        self.send_with(record, AppendWait::Until(time::deadline_after(timeout)))
            .map_err(ProduceTimeoutError)
    }

    /// Like [`send`](Self::send), giving up at `deadline`.
    ///
    /// # Errors
    ///
    /// As [`send_timeout`](Self::send_timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::producer::Record;
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("ticks", TopicConfig::new(1))?;
    /// let producer = broker.producer::<(), u64>();
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// assert_eq!(producer.send_deadline(Record::new("ticks", 7), deadline)?.offset, 0);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn send_deadline(
        &self,
        record: Record<K, V>,
        deadline: Instant,
    ) -> Result<RecordMetadata, ProduceTimeoutError<K, V>> {
        self.send_with(record, AppendWait::Until(Some(deadline)))
            .map_err(ProduceTimeoutError)
    }

    /// Sends every record of `records` in order (draining it; its capacity is kept for
    /// reuse), taking the producer's lock once. Returns how many were sent. Records without
    /// a timestamp get the broker clock's time, read once per run of consecutive records
    /// for one partition (as [`PartitionProducer::send_iter`] reads it once per chunk).
    /// Each record goes where [`send`](Self::send) would send it; consecutive records for
    /// one partition are appended with one claim.
    ///
    /// If user code panics meanwhile (a [`Partitioner`], the key's [`Codec`]), the panic
    /// goes on to the caller and the records not yet appended are dropped: those of the
    /// run being gathered for one partition and those after it (`records` is left empty).
    ///
    /// # Errors
    ///
    /// [`ProduceBatchError`] with how many were sent and the first failure (the errors of
    /// [`send`](Self::send)). The records not sent stay in `records`, in order, the one
    /// that failed first (unless it reached the log unacknowledged:
    /// [`Error::NotAcknowledged`]); those before it were sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig};
    /// use logbus::producer::Record;
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("ticks", TopicConfig::new(2))?;
    /// let producer = broker.producer::<(), u64>();
    /// let mut batch: Vec<_> = (0..10).map(|v| Record::new("ticks", v)).collect();
    /// batch.push(Record::new("ticks", 10).partition(7)); // no partition 7
    /// batch.push(Record::new("ticks", 11));
    /// let failed = producer.send_batch(&mut batch).unwrap_err();
    /// assert_eq!(failed.sent, 10);
    /// assert!(matches!(failed.error, logbus::Error::PartitionOutOfRange { count: 2, .. }));
    /// assert_eq!(batch.iter().map(|r| r.value).collect::<Vec<_>>(), [10, 11]);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn send_batch(&self, records: &mut Vec<Record<K, V>>) -> Result<usize, ProduceBatchError> {
        if let Some(txn) = &self.txn {
            return self.send_batch_txn(txn, records);
        }
        let mut state = self.state.lock();
        let moved = self.send_batch_moved(&mut state, records);
        if records.is_empty() {
            return Ok(moved);
        }
        // Consecutive records for one partition are appended as one run (one claim per
        // run of the ring's capacity, one notification).
        let mut run = std::mem::take(&mut state.run);
        let mut meta = std::mem::take(&mut state.run_meta);
        let mut run_at: Option<(usize, u32)> = None;
        let mut sent = 0;
        let mut failed: Option<RunFailure<K, V>> = None;
        let mut rest = records.drain(..);
        // The topic of the previous record: a batch usually names one topic throughout.
        let mut hint = None;
        // The clock's time for the run being gathered (one read per run, not per record).
        let mut now = None;
        for record in rest.by_ref() {
            let (mut t, partition) = match self.route_hinted(&mut state, &record, &mut hint) {
                Ok(at) => at,
                Err(error) => {
                    // The records before it are sent first.
                    let flushed = Self::flush_run(&mut state, run_at, &mut run, &mut meta);
                    failed = Some(match flushed.0 {
                        Ok(()) => (ProduceError::new(error, record), Vec::new()),
                        Err(mut e) => {
                            e.1.push(record);
                            e
                        }
                    });
                    break;
                }
            };
            if run_at.is_some_and(|at| at != (t, partition)) {
                let (flushed, relocked) = Self::flush_run(&mut state, run_at, &mut run, &mut meta);
                if let Err(mut e) = flushed {
                    e.1.push(record);
                    failed = Some(e);
                    break;
                }
                sent += meta.len();
                meta.clear();
                now = None;
                if relocked {
                    // Another thread sharing this producer may have changed its cache
                    // while the lock was released: find the record's topic again.
                    hint = None;
                    t = match self.destination(&mut state, &record.topic, partition) {
                        Ok(t) => t,
                        Err(error) => {
                            failed = Some((ProduceError::new(error, record), Vec::new()));
                            break;
                        }
                    };
                }
            }
            let timestamp = match record.timestamp {
                Some(ts) => ts,
                None => {
                    *now.get_or_insert_with(|| self.broker.now_ms().clamp(0, crate::MAX_TIMESTAMP))
                }
            };
            meta.push((record.partition, record.timestamp));
            run.push(Entry::new(
                timestamp,
                record.key,
                record.value,
                record.headers,
            ));
            run_at = Some((t, partition));
        }
        if failed.is_none() && !run.is_empty() {
            match Self::flush_run(&mut state, run_at, &mut run, &mut meta).0 {
                Ok(()) => sent += meta.len(),
                Err(e) => failed = Some(e),
            }
        }
        // After a failure `meta` holds the appended records of the run that failed.
        let appended = moved + sent + if failed.is_some() { meta.len() } else { 0 };
        meta.clear();
        let outcome = match failed {
            None => Ok(appended),
            Some((error, unsent)) => {
                let unsent: Vec<Record<K, V>> = unsent.into_iter().chain(rest.by_ref()).collect();
                drop(rest);
                let error = error.into_parts();
                records.extend(error.1);
                records.extend(unsent);
                Err(ProduceBatchError {
                    sent: appended,
                    error: error.0,
                })
            }
        };
        run.clear();
        state.run = run;
        state.run_meta = meta;
        outcome
    }

    /// `send_batch`'s straight path, for a batch whose records all go to one in-memory
    /// partition of the topic the producer sent to last with nothing to partition by (no
    /// key or partition, the default partitioner, the sticky partition's window covering
    /// the batch) and nothing to box (no headers): the records are moved into the ring's
    /// slots from `records` itself, as many as fit now. Returns how many were sent; the
    /// others (all of them when the batch does not qualify) stay in `records`, in order, for
    /// the general path, which waits for room or says what failed.
    fn send_batch_moved(&self, state: &mut State<K, V>, records: &mut Vec<Record<K, V>>) -> usize {
        if !matches!(*self.choice, Choice::KeyHash(_)) {
            return 0;
        }
        let Some(cached) = state.topics.get_mut(state.last) else {
            return 0;
        };
        let n = records.len();
        let count = cached.appenders.len() as u32;
        // One pass over the batch; `&` rather than `&&`: no branch per record.
        let (mut fits, mut timeless) = (n > 0, false);
        for r in records.iter() {
            fits &= r.key.is_none()
                & r.partition.is_none()
                & r.headers.is_empty()
                & r.timestamp.map_or(true, valid_timestamp)
                & cached.is_named(&r.topic);
            timeless |= r.timestamp.is_none();
        }
        // A compacted topic refuses keyless records: the general path says so.
        if !fits || cached.topic.is_deleted() || cached.topic.compacts() {
            return 0;
        }
        cached.refresh();
        let count_now = cached.appenders.len() as u32;
        // One partition: every record goes there, whatever the window says.
        let covered = cached.sticky < count && cached.sticky_left as usize >= n;
        if count_now != count || !(covered || count == 1) {
            return 0;
        }
        let partition = if covered { cached.sticky } else { 0 };
        let appender = &mut cached.appenders[partition as usize];
        if !appender.in_memory() {
            return 0;
        }
        let now = if timeless {
            self.broker.now_ms().clamp(0, crate::MAX_TIMESTAMP)
        } else {
            0
        };
        let entry = move |r: *mut Record<K, V>| {
            // SAFETY: `append_moved` passes each record once, initialised and no longer
            // owned by the vector: its value is moved out and its other fields dropped
            // here, once (the key is `None`, checked above: nothing to drop). Dropping
            // the name and the empty headers frees memory at most: no panic, no user code.
            unsafe {
                let timestamp = (*r).timestamp.unwrap_or(now);
                let value = std::ptr::read(&(*r).value);
                std::ptr::drop_in_place(&mut (*r).topic);
                std::ptr::drop_in_place(&mut (*r).headers);
                // Checked above: a valid timestamp, no key, no headers.
                Entry::plain(timestamp, value)
            }
        };
        // SAFETY: `entry` takes each record as `append_moved` requires (above); every
        // record has neither key nor headers (checked above).
        let sent = unsafe { appender.append_moved(records, entry) };
        // The sticky window as `choose` would have left it after these records.
        if covered {
            cached.sticky_left -= sent as u32;
        } else {
            for _ in 0..sent {
                self.sticky(cached, count);
            }
        }
        sent
    }

    /// Appends `run` to partition `partition` of the cached topic `t`. When the partition
    /// is full, waits for room with the producer's lock released, on a handle of its own
    /// (as `send` does): the other threads sharing this producer are not held behind the
    /// wait. Returns the outcome, whether the lock was released (the cache may have
    /// changed meanwhile: indices into it are stale), and the topic.
    fn append_run(
        state: &mut MutexGuard<'_, State<K, V>>,
        t: usize,
        partition: u32,
        run: &mut Vec<Entry<K, V>>,
    ) -> (Result<(), AppendError>, bool, Arc<TopicInner<K, V>>) {
        let cached = &mut state.topics[t];
        let topic = Arc::clone(&cached.topic);
        match cached.appenders[partition as usize].append_batch(run, AppendWait::No) {
            Err(AppendError::Full) => {
                let mut own = topic.partitions()[partition as usize]
                    .appender()
                    .with_policy(cached.policy.clone());
                let done =
                    crate::sync::unlocked(state, || own.append_batch(run, AppendWait::Until(None)));
                (done, true, topic)
            }
            done => (done, false, topic),
        }
    }

    /// Appends the gathered run to partition `at`, waiting for room (with the lock
    /// released: see [`append_run`](Self::append_run), whose `bool` it passes on). On
    /// failure, hands back the error (with the first record not appended) and the other
    /// records not appended, in order; `meta` then holds the appended records' entries
    /// only.
    fn flush_run(
        state: &mut MutexGuard<'_, State<K, V>>,
        at: Option<(usize, u32)>,
        run: &mut Vec<Entry<K, V>>,
        meta: &mut Vec<(Option<u32>, Option<i64>)>,
    ) -> (Result<(), RunFailure<K, V>>, bool) {
        let Some((t, partition)) = at else {
            return (Ok(()), false);
        };
        let total = run.len();
        let (done, relocked, topic) = Self::append_run(state, t, partition, run);
        let flushed = match done {
            Ok(()) => Ok(()),
            Err(why) => {
                let name: &str = &topic.name;
                let done = total - run.len();
                let mut unsent: Vec<Record<K, V>> = run
                    .drain(..)
                    .zip(meta.drain(done..))
                    .map(|(e, (explicit, given))| {
                        let (_, key, value, headers) = e.into_parts();
                        Record {
                            topic: Cow::Owned(name.to_owned()),
                            partition: explicit,
                            timestamp: given,
                            key,
                            value,
                            headers,
                        }
                    })
                    .collect();
                if unsent.is_empty() {
                    if let AppendError::Unacknowledged(e) = why {
                        return (
                            Err((ProduceError::unacknowledged(*e), Vec::new())),
                            relocked,
                        );
                    }
                    // The ring stops a batch early only with entries left; nothing to hand back.
                    return (Ok(()), relocked);
                }
                let first = unsent.remove(0);
                Err((
                    ProduceError::new(append_error(why, name, partition), first),
                    unsent,
                ))
            }
        };
        (flushed, relocked)
    }

    /// Waits until every record sent so far is acknowledged, or can no longer be: the
    /// records of [`send_async`](Self::send_async) whose [`PendingSend`] was not waited on yet
    /// (every other send returns acknowledged). Waits at most the producer's
    /// `delivery_timeout`. As Kafka's `flush`, it reports no errors: each delivery's
    /// outcome is on its handle (whose `wait` also does the retries).
    ///
    /// # Errors
    ///
    /// None today.
    pub fn flush(&self) -> Result<()> {
        let deadline = time::deadline_after(self.config.delivery_timeout);
        let mut state = self.state.lock();
        for cached in &mut state.topics {
            for appender in &mut cached.appenders {
                appender.settle(deadline);
            }
        }
        Ok(())
    }

    /// Sends `record` without waiting for its acknowledgement (Kafka's `send`, which
    /// returns a future): the returned [`PendingSend`] gives the outcome when waited on.
    /// Many records can be in flight at once, so a producer's throughput under
    /// `acks = all` is no longer one replication round trip per record.
    ///
    /// On a replicated partition under [`Acks::All`] this returns once the record is in
    /// the leader's log (after retrying refusals such as [`Error::NotEnoughReplicas`], as
    /// `send` does); [`PendingSend::wait`] waits until the in-sync replicas have it. If that
    /// fails (the leader changed, the ISR shrank, no acknowledgement within
    /// `request_timeout`), `wait` retries as `send` does: it appends the record again, so
    /// it lands after records sent since (Kafka's producer reorders the same way with
    /// `max.in.flight.requests.per.connection > 1` and no idempotence), and the first copy
    /// may survive too ([`ProducerMetrics::possible_duplicates`]). A `PendingSend` dropped
    /// without `wait` is not retried. On a replicated partition under `acks = 0 / 1` the
    /// send completes before this returns, exactly as [`send`](Self::send), and the
    /// handle holds its outcome.
    ///
    /// On a partition that is not replicated this call never waits: with room, it appends
    /// the record and returns (in memory, the handle holds the outcome; persisted under
    /// `FlushPolicy::EveryBatch`, the handle awaits the fsync). On a full
    /// [`Overflow::Block`](crate::broker::Overflow::Block) partition it returns at once
    /// with the record held (in call order, below): [`PendingSend::wait`] waits for room on the
    /// thread, `.await` in the task, and either appends it then.
    ///
    /// `PendingSend` is a [`Future`](std::future::Future): `producer.send_async(r).await`
    /// waits for room, for the fsync or for the in-sync replicas without blocking the
    /// executor's thread (see [`PendingSend`] for what differs without a timer).
    ///
    /// The records of one producer's `send_async` calls to one partition are appended in
    /// call order: once a record is held, the records of later calls to that partition are
    /// held behind it, and each is appended only after the ones before it were appended
    /// (or dropped unsent), by the poll or `wait` of its own handle. So a held record
    /// appends only once its handle is polled: await (or `wait` on) the handles in call
    /// order, or together (`join_all`). Other forms of send (`send`, `send_batch`, a
    /// partition producer) do not wait for records held by `send_async`.
    /// [`flush`](Self::flush) waits for every record appended (their acknowledgement, their
    /// fsync), not for held ones.
    ///
    /// # Cancel safety
    ///
    /// The record was appended by this call unless the handle holds it; a held record is
    /// appended by a poll (or `wait`) of a handle of its line, so dropping its handle while
    /// it is still held drops the record unsent; once appended it is never appended again
    /// by dropping or polling (only the documented retries of `acks = all` append again).
    /// See [`PendingSend`].
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::{Broker, TopicConfig};
    /// use logbus::producer::Record;
    ///
    /// let broker = Broker::in_memory();
    /// let config = TopicConfig::new(1).replication_factor(3).min_insync_replicas(2);
    /// broker.create_topic::<(), u64>("payments", config)?;
    /// let producer = broker.producer::<(), u64>(); // acks = all
    /// let in_flight: Vec<_> = (0..100).map(|v| producer.send_async(Record::new("payments", v))).collect();
    /// for (v, delivery) in in_flight.into_iter().enumerate() {
    ///     assert_eq!(delivery.wait()?.offset, v as u64);
    /// }
    /// # Ok::<(), logbus::Error>(())
    /// ```
    ///
    /// Awaited from a task (a `Block` topic kept full, a consumer task freeing room):
    ///
    /// ```
    /// use logbus::{Broker, ConsumerConfig, OffsetReset, Record, TopicConfig, TopicPartition};
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("jobs", TopicConfig::new(1).records_in_memory(2))?;
    /// let producer = broker.producer::<(), u64>();
    /// let mut consumer = broker.consumer::<(), u64>(
    ///     ConsumerConfig::new().group_id("workers").auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.assign(&[TopicPartition::new("jobs", 0)])?;
    /// futures::executor::block_on(async {
    ///     let send = async {
    ///         for v in 0..10 {
    ///             producer.send_async(Record::new("jobs", v)).await?; // parks while full
    ///         }
    ///         Ok::<(), logbus::Error>(())
    ///     };
    ///     let work = async {
    ///         let mut done = 0;
    ///         while done < 10 {
    ///             done += consumer.poll_async().await?.len();
    ///             consumer.commit_sync()?; // frees room: wakes the send
    ///         }
    ///         Ok::<(), logbus::Error>(())
    ///     };
    ///     futures::try_join!(send, work)
    /// })?;
    /// # Ok::<(), logbus::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// None here: every error, with its record, comes from [`PendingSend::wait`] or the
    /// future's output (those of [`send`](Self::send)).
    pub fn send_async(&self, record: Record<K, V>) -> PendingSend<K, V> {
        if let Some(txn) = &self.txn {
            // A transaction's sends are appended in order under its lock (`txn`).
            return PendingSend::done(self.send_txn(txn, record, AppendWait::Until(None)));
        }
        let mut state = self.state.lock();
        let (t, partition) = match self.route(&mut state, &record) {
            Ok(at) => at,
            Err(error) => return PendingSend::done(Err(ProduceError::new(error, record))),
        };
        let cached = &mut state.topics[t];
        let appender = &mut cached.appenders[partition as usize];
        if !appender.is_replicated() {
            // Appended now if there is room; otherwise the handle holds the record and
            // appends it when polled or waited on, on a handle of its own (the producer's
            // lock is not held meanwhile); a persisted record's fsync is left to it too.
            let (entry, sent) = self.entry_of(record, partition);
            let line = &cached.held[partition as usize];
            // Behind records held earlier it is held too: appended after them, in call order.
            let entry = if line.has_held() {
                entry
            } else {
                match appender.try_append_unsynced(entry) {
                    Err((Some(entry), AppendError::Full)) => entry,
                    done => return PendingSend::unsynced(done, sent),
                }
            };
            let own = cached.topic.partitions()[partition as usize]
                .appender()
                .with_policy(cached.policy.clone());
            let ticket = line.hold(entry);
            return PendingSend::held(own, sent, Arc::clone(line), ticket);
        }
        let Some((log, policy)) = appender.pipeline() else {
            return PendingSend::done(self.send_routed(
                state,
                t,
                partition,
                record,
                AppendWait::Until(None),
            ));
        };
        let (log, policy) = (Arc::clone(log), Arc::clone(policy));
        let (entry, sent) = self.entry_of(record, partition);
        match log.append_pending(entry, &policy) {
            Ok(pending) => {
                if let Some(at) = pending.at() {
                    appender.pipelined(at);
                }
                PendingSend::in_flight(log, policy, pending, sent)
            }
            Err(failed) => PendingSend::done(sent.outcome(Err(failed))),
        }
    }

    /// `record` as the log stores it, and what its send must remember to report.
    #[inline]
    fn entry_of(&self, record: Record<K, V>, partition: u32) -> (Entry<K, V>, Sent) {
        let timestamp = match record.timestamp {
            Some(ts) => ts,
            None => self.broker.now_ms().clamp(0, crate::MAX_TIMESTAMP),
        };
        let Record {
            topic,
            partition: explicit,
            timestamp: given,
            key,
            value,
            headers,
        } = record;
        let entry = Entry::new(timestamp, key, value, headers);
        let sent = Sent {
            topic,
            partition,
            explicit,
            given,
            timestamp,
        };
        (entry, sent)
    }

    #[inline]
    fn send_with(
        &self,
        record: Record<K, V>,
        wait: AppendWait,
    ) -> Result<RecordMetadata, ProduceError<K, V>> {
        if let Some(txn) = &self.txn {
            return self.send_txn(txn, record, wait);
        }
        let mut state = self.state.lock();
        let (t, partition) = match self.route(&mut state, &record) {
            Ok(at) => at,
            Err(error) => return Err(ProduceError::new(error, record)),
        };
        self.send_routed(state, t, partition, record, wait)
    }

    /// Sends `record` to partition `partition` of the cached topic `t`.
    #[inline]
    fn send_routed(
        &self,
        mut state: MutexGuard<'_, State<K, V>>,
        t: usize,
        partition: u32,
        record: Record<K, V>,
        wait: AppendWait,
    ) -> Result<RecordMetadata, ProduceError<K, V>> {
        let (entry, sent) = self.entry_of(record, partition);
        let cached = &mut state.topics[t];
        let appender = &mut cached.appenders[partition as usize];
        // A replicated partition never lacks room: its wait is for acks, bounded by `wait`.
        let first = if appender.is_replicated() {
            wait
        } else {
            AppendWait::No
        };
        let mut done = appender.append(entry, first);
        if let (Err((_, AppendError::Full)), AppendWait::Until(_)) = (&done, wait) {
            // Wait for room with the producer's lock released, on a handle of our own:
            // the other threads sharing this producer (a `try_send`, a `send_timeout`, a
            // send elsewhere) are not held behind this wait.
            let mut appender = cached.topic.partitions()[partition as usize]
                .appender()
                .with_policy(cached.policy.clone());
            drop(state);
            if let Err((Some(entry), _)) = done {
                done = appender.append(entry, wait);
            }
        }
        sent.outcome(done)
    }

    /// [`route`](Self::route) within one `send_batch`: a record naming the same topic as the
    /// one before (`hint`, its cache index) skips the lookup and the checks for deletion and
    /// added partitions, done once for the batch's run of that topic (an append to a topic
    /// deleted meanwhile still fails, as `Closed`).
    #[inline]
    fn route_hinted(
        &self,
        state: &mut State<K, V>,
        record: &Record<K, V>,
        hint: &mut Option<usize>,
    ) -> Result<(usize, u32)> {
        if let Some(t) = *hint {
            if state.topics[t].is_named(&record.topic) {
                if let Some(ts) = record.timestamp {
                    if !valid_timestamp(ts) {
                        return Err(Error::InvalidTimestamp {
                            timestamp: ts,
                            offset: None,
                        });
                    }
                }
                let State {
                    topics, scratch, ..
                } = state;
                let cached = &mut topics[t];
                let count = cached.appenders.len() as u32;
                let partition = self.choose(cached, record, count, scratch)?;
                return Ok((t, partition));
            }
        }
        let at = self.route(state, record)?;
        *hint = Some(at.0);
        Ok(at)
    }

    /// Finds (or caches) the record's topic and chooses its partition: the index of the
    /// topic in the producer's cache, and the partition.
    #[inline(always)]
    fn route(&self, state: &mut State<K, V>, record: &Record<K, V>) -> Result<(usize, u32)> {
        if let Some(ts) = record.timestamp {
            if !valid_timestamp(ts) {
                return Err(Error::InvalidTimestamp {
                    timestamp: ts,
                    offset: None,
                });
            }
        }
        let t = match state.topics.get_mut(state.last) {
            Some(cached) if cached.is_named(&record.topic) && !cached.topic.is_deleted() => {
                cached.refresh();
                state.last
            }
            _ => {
                // A `&'static str` name is remembered by its address (see `is_named`).
                let at_static = match &record.topic {
                    Cow::Borrowed(s) => Some((s.as_ptr() as usize, s.len())),
                    Cow::Owned(_) => None,
                };
                let t = self.find_topic(state, &record.topic, at_static)?;
                state.last = t;
                t
            }
        };
        let State {
            topics, scratch, ..
        } = state;
        let cached = &mut topics[t];
        let count = cached.appenders.len() as u32;
        let partition = self.choose(cached, record, count, scratch)?;
        Ok((t, partition))
    }

    /// The index in the producer's cache of topic `name` (looked up and cached when not
    /// there or deleted since), its added partitions picked up. `at_static`: the address
    /// and length of `name` when it is a `&'static str`.
    #[inline(never)]
    fn find_topic(
        &self,
        state: &mut State<K, V>,
        name: &str,
        at_static: Option<(usize, usize)>,
    ) -> Result<usize> {
        let topics = &mut state.topics;
        let found = match at_static {
            Some(key) => topics.iter().position(|c| c.static_name == Some(key)),
            None => None,
        };
        let found = found.or_else(|| {
            topics
                .iter()
                .position(|c| c.topic.name.len() == name.len() && *c.topic.name == *name)
        });
        let t = match found {
            Some(t) if !topics[t].topic.is_deleted() => t,
            found => {
                if let Some(t) = found {
                    topics.swap_remove(t);
                }
                topics.push(Cached::new(
                    self.broker.topic_inner::<K, V>(name)?,
                    self.policy(),
                ));
                topics.len() - 1
            }
        };
        let cached = &mut topics[t];
        if at_static.is_some() {
            cached.static_name = at_static;
        }
        cached.refresh();
        Ok(t)
    }

    /// The partition for `record` (module docs).
    #[inline]
    fn choose(
        &self,
        cached: &mut Cached<K, V>,
        record: &Record<K, V>,
        count: u32,
        scratch: &mut Vec<u8>,
    ) -> Result<u32> {
        if record.key.is_none() && cached.topic.compacts() {
            return Err(key_required(&cached.topic.name));
        }
        // The common cases inline: an explicit partition in range; sticky batches for a
        // record without key under the default partitioner.
        match record.partition {
            Some(p) if p < count => return Ok(p),
            Some(_) => {}
            None => {
                if record.key.is_none() && matches!(*self.choice, Choice::KeyHash(_)) {
                    return Ok(self.sticky(cached, count));
                }
            }
        }
        self.choose_slow(cached, record, count, scratch)
    }

    /// The next partition of the sticky rotation: stay for `sticky_batch` records, then
    /// move on.
    #[inline]
    fn sticky(&self, cached: &mut Cached<K, V>, count: u32) -> u32 {
        if cached.sticky_left == 0 || cached.sticky >= count {
            cached.sticky = (cached.sticky + 1) % count;
            cached.sticky_left = self.config.sticky_batch;
        }
        cached.sticky_left -= 1;
        cached.sticky
    }

    /// [`choose`](Self::choose) for the other cases: out of range, a user partitioner, a
    /// key to hash.
    #[inline(never)]
    fn choose_slow(
        &self,
        cached: &mut Cached<K, V>,
        record: &Record<K, V>,
        count: u32,
        scratch: &mut Vec<u8>,
    ) -> Result<u32> {
        let out_of_range = |partition| Error::PartitionOutOfRange {
            topic: record.topic.to_string(),
            partition,
            count,
        };
        if let Some(p) = record.partition {
            return if p < count {
                Ok(p)
            } else {
                Err(out_of_range(p))
            };
        }
        let encode = match &*self.choice {
            Choice::KeyHash(encode) => Some(*encode),
            Choice::User(partitioner) => {
                if let Some(p) = partitioner.partition(&record.topic, record.key.as_ref(), count) {
                    return if p < count {
                        Ok(p)
                    } else {
                        Err(out_of_range(p))
                    };
                }
                None
            }
        };
        if let (Some(key), Some(encode)) = (&record.key, encode) {
            scratch.clear();
            encode(key, scratch);
            return Ok(partition_for_key(scratch, count));
        }
        Ok(self.sticky(cached, count))
    }
}

/// A keyless record sent to a compacted topic.
#[cold]
pub(crate) fn key_required(topic: &str) -> Error {
    Error::KeyRequired {
        topic: topic.to_owned(),
    }
}
