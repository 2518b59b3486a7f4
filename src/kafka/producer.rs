//! The producer: logbus's `send` / `send_batch` / `flush` over librdkafka's producer.

use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
use rdkafka::message::{Header, Message as _, OwnedHeaders};
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer as _, ProducerContext, PurgeConfig, ThreadedProducer,
};
use rdkafka::ClientContext;

use super::broker::{config_error, KafkaBroker, KafkaConfig};
use super::error::{from_code, from_kafka, At};
use super::txn::KafkaTxn;
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::producer::{
    Acks, ProduceBatchError, ProduceError, ProduceTimeoutError, ProducerConfig, Record,
    RecordMetadata, TryProduceError,
};
use crate::sync::{Arc, Condvar, Mutex};

/// A record handed to librdkafka, with the batch slot its delivery report fills.
type Outgoing<'a> = BaseRecord<'a, [u8], [u8], Box<(Arc<Batch>, usize)>>;

/// What the cluster said about one record: where it went, or why not (with the partition
/// librdkafka had chosen, when it had).
type Outcome = std::result::Result<(u32, u64, i64), (Code, String, Option<u32>)>;

/// The outcomes of one `send` or `send_batch`, filled in by the delivery callbacks.
pub(crate) struct Batch {
    state: Mutex<BatchState>,
    done: Condvar,
}

pub(crate) struct BatchState {
    outcomes: Vec<Option<Outcome>>,
    left: usize,
    /// Whether some record of the batch failed.
    failed: bool,
    /// The waiter wants waking when `left` falls to this: the records it never enqueued
    /// get no outcome, so `left` stops there, not at 0.
    wake_at: usize,
}

impl Batch {
    fn new(len: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(BatchState {
                outcomes: vec![None; len],
                left: len,
                failed: false,
                wake_at: 0,
            }),
            done: Condvar::new(),
        })
    }

    fn settle(&self, index: usize, outcome: Outcome) {
        let mut s = self.state.lock();
        if s.outcomes[index].is_none() {
            let failed = outcome.is_err();
            s.outcomes[index] = Some(outcome);
            s.left -= 1;
            if s.left <= s.wake_at || (failed && !s.failed) {
                self.done.notify_all();
            }
            s.failed |= failed;
        }
    }

    /// Waits until every record enqueued (the first `enqueued`) has its outcome, or one has
    /// failed; returns whether one has failed.
    fn wait_all_or_failure(&self, enqueued: usize) -> bool {
        let mut s = self.state.lock();
        let never = s.outcomes.len() - enqueued;
        s.wake_at = never;
        while s.left > never && !s.failed {
            self.done.wait(&mut s);
        }
        s.failed
    }

    /// Waits until every record enqueued (the first `enqueued`) has its outcome.
    fn wait(&self, enqueued: usize) -> Vec<Option<Outcome>> {
        let mut s = self.state.lock();
        // Records never enqueued get no callback: count them settled.
        let never = s.outcomes.len() - enqueued;
        s.wake_at = never;
        while s.left > never {
            self.done.wait(&mut s);
        }
        std::mem::take(&mut s.outcomes)
    }
}

/// Routes delivery reports to the batch that sent the record.
pub(crate) struct DeliveryContext;

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<(Arc<Batch>, usize)>;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: Self::DeliveryOpaque) {
        let (batch, index) = *opaque;
        let outcome = match result {
            Ok(m) => Ok((
                m.partition().max(0) as u32,
                m.offset().max(0) as u64,
                m.timestamp().to_millis().unwrap_or(0),
            )),
            Err((e, m)) => Err((
                super::error::code_of(e).unwrap_or(Code::Fail),
                e.to_string(),
                u32::try_from(m.partition()).ok(),
            )),
        };
        batch.settle(index, outcome);
    }
}

/// The one librdkafka producer a broker's producers share, with the timeout its records
/// are delivered within.
pub(crate) struct SharedProducer {
    pub(crate) client: ThreadedProducer<DeliveryContext>,
    delivery_timeout: Duration,
    /// librdkafka's limit on one record (`message.max.bytes`, 1,000,000 by default).
    max_message_bytes: u64,
}

impl SharedProducer {
    /// The client for `config`'s cluster; with `producer`, that producer's own settings
    /// (acks, idempotence, retries, timeouts, codec, transactional id) override the broker's.
    pub(crate) fn new(config: &KafkaConfig, producer: Option<&ProducerConfig>) -> Result<Self> {
        let (c, delivery) = client_config(config, producer);
        let client = c
            .create_with_context::<_, ThreadedProducer<DeliveryContext>>(DeliveryContext)
            .map_err(|e| config_error(e).unwrap_or_else(|e| from_kafka(e, At::op("producer"))))?;
        let max_message_bytes = config
            .get("message.max.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        Ok(Self {
            client,
            delivery_timeout: delivery,
            max_message_bytes,
        })
    }

    /// The client's fatal error as a logbus error, if it has one.
    pub(crate) fn fatal(&self, transactional_id: Option<&str>) -> Option<Error> {
        let (code, reason) = self.client.client().fatal_error()?;
        Some(fatal_error(code, reason, transactional_id))
    }
}

/// The client settings of a producer of the cluster `config` names (with `producer`'s own
/// settings, if given), and its delivery timeout.
fn client_config(
    config: &KafkaConfig,
    producer: Option<&ProducerConfig>,
) -> (rdkafka::ClientConfig, Duration) {
    let mut c = config.client(true);
    // Java's partitioner, so that keys land where logbus's in-process partitioner puts
    // them.
    if config.get("partitioner").is_none() {
        c.set("partitioner", "murmur2_random");
    }
    let delivery = match producer {
        None => {
            // acks=all unless the user chose otherwise, and then idempotence, as in
            // process (librdkafka's own default is off).
            if config.get("acks").is_none() && config.get("request.required.acks").is_none() {
                c.set("acks", "all");
            }
            if config.get("enable.idempotence").is_none() && config.idempotent() {
                c.set("enable.idempotence", "true");
            }
            Duration::from_millis(
                config
                    .get("message.timeout.ms")
                    .or(config.get("delivery.timeout.ms"))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(300_000),
            )
        }
        Some(p) => apply(&mut c, p),
    };
    (c, delivery)
}

/// A fatal error of a producer's client: fenced, or failed for good.
pub(crate) fn fatal_error(code: Code, reason: String, transactional_id: Option<&str>) -> Error {
    if super::error::is_fenced(code) {
        return super::error::fenced();
    }
    Error::ProducerFatal {
        transactional_id: transactional_id.map(str::to_owned),
        name: format!("{code:?}"),
        reason,
    }
}

/// Sets `p`'s settings on the client configuration `c`; returns the delivery timeout.
fn apply(c: &mut rdkafka::ClientConfig, p: &ProducerConfig) -> Duration {
    let acks = match p.acks_level() {
        Acks::None => "0",
        Acks::Leader => "1",
        Acks::All => "all",
    };
    c.remove("request.required.acks").set("acks", acks);
    let transactional = p.transactional();
    c.set(
        "enable.idempotence",
        (p.is_idempotent() || transactional.is_some()).to_string(),
    );
    let (retries, mut delivery, request) = p.retry_settings();
    c.remove("message.send.max.retries")
        .set("retries", retries.min(i32::MAX as u32).to_string());
    c.set("request.timeout.ms", millis(request));
    c.set("compression.type", p.compression_codec().to_string());
    if let Some(id) = transactional {
        let timeout = p.transaction_timeout_value();
        c.set("transactional.id", id);
        c.set("transaction.timeout.ms", millis(timeout));
        // librdkafka refuses a delivery timeout past the transaction's: a record may not
        // outlive the transaction it belongs to.
        delivery = delivery.min(timeout);
    }
    c.remove("delivery.timeout.ms")
        .set("message.timeout.ms", millis(delivery));
    delivery
}

/// A duration as librdkafka's milliseconds (at least 1, at most `i32::MAX`).
fn millis(d: Duration) -> String {
    d.as_millis().clamp(1, i32::MAX as u128).to_string()
}

/// Sends records to a Kafka cluster, as [`Producer`](crate::Producer) does in process.
/// `Clone` and `Send + Sync`; every clone shares the client it was made with: the broker's
/// one ([`KafkaBroker::producer`]) or its own ([`KafkaBroker::producer_with_config`]; a
/// transactional producer's clones share its transaction, as in process).
///
/// Idempotent with `acks=all` (the default); transactional with a `transactional_id`: see
/// the [module docs](super#idempotence-and-transactions).
///
/// `send` returns once the cluster acknowledged the record (per `acks`), with its partition
/// and offset; `send_batch` hands librdkafka every record, then waits for every
/// acknowledgement (one round trip for the batch: the throughput form).
///
/// No async face yet: the in-process [`Producer::send_async`](crate::Producer::send_async)
/// returns a [`PendingSend`](crate::producer::PendingSend) that is a `Future`; here every
/// send blocks its thread until the cluster answers (from a task, call it through your
/// runtime's blocking pool, such as `tokio::task::spawn_blocking`).
pub struct KafkaProducer<K, V> {
    broker: KafkaBroker,
    /// The broker's shared client, or this producer's own (made by
    /// [`KafkaBroker::producer_with_config`]), shared by its clones.
    shared: Arc<SharedProducer>,
    /// A transactional producer's state, shared by its clones.
    pub(crate) txn: Option<Arc<KafkaTxn>>,
    _types: PhantomData<fn(K, V)>,
}

impl<K, V> Clone for KafkaProducer<K, V> {
    fn clone(&self) -> Self {
        Self {
            broker: self.broker.clone(),
            shared: Arc::clone(&self.shared),
            txn: self.txn.clone(),
            _types: PhantomData,
        }
    }
}

impl<K, V> fmt::Debug for KafkaProducer<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaProducer").finish_non_exhaustive()
    }
}

fn send_error<K, V>(error: Error, record: Record<K, V>) -> ProduceError<K, V> {
    ProduceError::new(error, record)
}

impl<K, V> KafkaProducer<K, V>
where
    K: Codec + Send + Sync + 'static,
    V: Codec + Send + Sync + 'static,
{
    pub(crate) fn new(broker: KafkaBroker) -> Self {
        Self {
            shared: Arc::clone(&broker.inner.producer),
            broker,
            txn: None,
            _types: PhantomData,
        }
    }

    /// A producer with its own client, configured by `config`.
    pub(crate) fn with_config(broker: KafkaBroker, config: &ProducerConfig) -> Result<Self> {
        config.validate()?;
        let shared = Arc::new(SharedProducer::new(&broker.inner.config, Some(config))?);
        let txn = config.transactional().map(|id| {
            Arc::new(KafkaTxn::new(
                id,
                Arc::clone(&shared),
                broker.inner.config.timeout(),
            ))
        });
        Ok(Self {
            broker,
            shared,
            txn,
            _types: PhantomData,
        })
    }

    pub(crate) fn shared(&self) -> &SharedProducer {
        &self.shared
    }

    /// Sends `record` and waits for the cluster's acknowledgement. A key goes to the
    /// partition Kafka's (and logbus's) murmur2 partitioner gives; an unset timestamp is the
    /// client's clock.
    ///
    /// # Errors
    ///
    /// [`ProduceError`] with the record and: [`Error::InvalidTimestamp`],
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`] (an explicit partition past
    /// the count), [`Error::RecordTooLarge`], [`Error::Kafka`] (the cluster refused it,
    /// retriable or not, after librdkafka's own retries), [`Error::Timeout`] (not
    /// acknowledged within `message.timeout.ms`).
    pub fn send(&self, record: Record<K, V>) -> Result<RecordMetadata, ProduceError<K, V>> {
        self.send_one(record, Some(self.shared().delivery_timeout))
    }

    /// Like [`send`](Self::send), giving up on a full local queue after `timeout` (the
    /// record's delivery itself is bounded by `message.timeout.ms`).
    ///
    /// # Errors
    ///
    /// [`ProduceTimeoutError`]: [`is_timeout`](ProduceTimeoutError::is_timeout)
    /// ([`Error::Timeout`]) when the local queue stayed full, else those of
    /// [`send`](Self::send).
    pub fn send_timeout(
        &self,
        record: Record<K, V>,
        timeout: Duration,
    ) -> Result<RecordMetadata, ProduceTimeoutError<K, V>> {
        self.send_one(record, Some(timeout))
            .map_err(ProduceTimeoutError)
    }

    /// Like [`send_timeout`](Self::send_timeout), giving up on a full local queue at
    /// `deadline`.
    ///
    /// # Errors
    ///
    /// As [`send_timeout`](Self::send_timeout).
    pub fn send_deadline(
        &self,
        record: Record<K, V>,
        deadline: Instant,
    ) -> Result<RecordMetadata, ProduceTimeoutError<K, V>> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        self.send_timeout(record, timeout)
    }

    /// Sends `record` if the local queue has room now.
    ///
    /// # Errors
    ///
    /// [`TryProduceError`]: [`is_full`](TryProduceError::is_full) ([`Error::Full`]) when
    /// the local queue was full, else those of [`send`](Self::send).
    pub fn try_send(&self, record: Record<K, V>) -> Result<RecordMetadata, TryProduceError<K, V>> {
        let topic = record.topic.to_string();
        let partition = record.partition.unwrap_or(0);
        match self.send_one(record, Some(Duration::ZERO)) {
            Ok(meta) => Ok(meta),
            Err(e) if matches!(e.error(), Error::Timeout { .. }) => {
                let (_, record) = e.into_parts();
                let full = Error::Full { topic, partition };
                Err(TryProduceError(match record {
                    Some(record) => ProduceError::new(full, record),
                    None => ProduceError::unacknowledged(full),
                }))
            }
            Err(e) => Err(TryProduceError(e)),
        }
    }

    /// Sends every record of `records` in order (draining it) and waits for all their
    /// acknowledgements. Returns how many were sent.
    ///
    /// # Errors
    ///
    /// [`ProduceBatchError`] with how many were sent and the first failure (in `records`'
    /// order). The records the cluster did not acknowledge stay in `records`, in order, the
    /// one that failed first (Kafka pipelines a batch, so records after a failed one may be
    /// written already: those are not handed back, and sending `records` again duplicates
    /// nothing).
    pub fn send_batch(&self, records: &mut Vec<Record<K, V>>) -> Result<usize, ProduceBatchError> {
        let total = records.len();
        match self.send_all(records, None) {
            Ok(metas) => Ok(metas.len()),
            Err(e) => {
                let (error, record) = e.into_parts();
                let left = records.len() + usize::from(record.is_some());
                if let Some(record) = record {
                    records.insert(0, record);
                }
                Err(ProduceBatchError {
                    sent: total - left,
                    error,
                })
            }
        }
    }

    /// Sends one record, waiting at most `queue_wait` for room in the local queue.
    fn send_one(
        &self,
        record: Record<K, V>,
        queue_wait: Option<Duration>,
    ) -> Result<RecordMetadata, ProduceError<K, V>> {
        let mut one = vec![record];
        match self.send_all(&mut one, queue_wait) {
            Ok(mut metas) => Ok(metas.remove(0)),
            Err(e) => Err(e),
        }
    }

    /// Sends `records` (draining them on success), returning each one's metadata.
    fn send_all(
        &self,
        records: &mut Vec<Record<K, V>>,
        queue_wait: Option<Duration>,
    ) -> Result<Vec<RecordMetadata>, ProduceError<K, V>> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        // A transactional producer sends inside a transaction only, one send at a time (so
        // that a commit finds every send of its transaction finished, as in process).
        let mut phase = match &self.txn {
            Some(txn) => match txn.enter_send() {
                Ok(guard) => Some(guard),
                Err(e) => return Err(send_error(e, records.remove(0))),
            },
            None => None,
        };
        let shared = self.shared();
        let batch = Batch::new(records.len());
        let mut key = Vec::new();
        let mut value = Vec::new();
        let mut enqueued = 0;
        let mut failed: Option<(usize, Error)> = None;
        for (i, r) in records.iter().enumerate() {
            if let Some(ts) = r.timestamp {
                if !crate::partition::valid_timestamp(ts) {
                    failed = Some((
                        i,
                        Error::InvalidTimestamp {
                            timestamp: ts,
                            offset: None,
                        },
                    ));
                    break;
                }
            }
            key.clear();
            value.clear();
            if let Some(k) = &r.key {
                k.encode(&mut key);
            }
            r.value.encode(&mut value);
            let mut base: Outgoing<'_> =
                BaseRecord::with_opaque_to(&r.topic, Box::new((Arc::clone(&batch), i)));
            // A null value (a tombstone) has no payload: Kafka's length -1.
            if !r.value.is_null() {
                base = base.payload(&value[..]);
            }
            if r.key.is_some() {
                base = base.key(&key[..]);
            }
            if let Some(p) = r.partition {
                base = base.partition(p as i32);
            }
            if let Some(ts) = r.timestamp {
                base = base.timestamp(ts);
            }
            if !r.headers.is_empty() {
                base = base.headers(to_headers(&r.headers));
            }
            let deadline = queue_wait.and_then(|w| Instant::now().checked_add(w));
            match enqueue(&shared.client, base, deadline) {
                Ok(()) => enqueued += 1,
                Err(Code::MessageSizeTooLarge) => {
                    // Refused by the client before sending: over `message.max.bytes`.
                    let error = Error::RecordTooLarge {
                        what: "record (message.max.bytes)",
                        size: (key.len() + value.len()) as u64,
                        max: shared.max_message_bytes,
                    };
                    failed = Some((i, error));
                    break;
                }
                Err(code) => {
                    let at = At::op("send").topic(&r.topic);
                    let at = match r.partition {
                        Some(p) => at.partition(p),
                        None => at,
                    };
                    failed = Some((i, self.enqueue_error(code, r, at)));
                    break;
                }
            }
        }
        let outcomes = batch.wait(enqueued);
        // The first record that failed, in order: enqueueing stopped at `failed`, and a
        // record before it may have failed in delivery.
        let mut metas = Vec::with_capacity(enqueued);
        for (i, o) in outcomes.iter().enumerate().take(enqueued) {
            match o {
                Some(Ok((partition, offset, acked))) => metas.push(RecordMetadata {
                    partition: *partition,
                    offset: *offset,
                    // The record's own time when it has one (CreateTime, Kafka's default;
                    // a LogAppendTime topic stamps its own, which consumers see).
                    timestamp: records[i].timestamp.unwrap_or(*acked),
                }),
                Some(Err((code, reason, chosen))) => {
                    let r = &records[i];
                    let mut at = At::op("send")
                        .topic(&r.topic)
                        .timeout(shared.delivery_timeout);
                    // The record's partition, or the one the partitioner chose for it.
                    if let Some(p) = r.partition.or(*chosen) {
                        at = at.partition(p);
                    }
                    let error = self.delivery_error(*code, reason.clone(), r, at);
                    failed = Some((i, error));
                    break;
                }
                // Only records never enqueued have none, and they come after `enqueued`.
                None => break,
            }
        }
        if let (Some(phase), Some((_, error))) = (phase.as_mut(), &failed) {
            // librdkafka makes a transaction with a failed send abortable only; say so.
            super::txn::after_failed_send(phase, error);
        }
        drop(phase);
        if let Some((i, error)) = failed {
            // Kafka pipelines a batch: records after the failed one may be acknowledged
            // already. Hand back only those that were not, so sending them again does not
            // duplicate the others.
            let rest = records.split_off(i);
            records.clear();
            let mut rest = rest.into_iter().enumerate();
            let record = match rest.next() {
                Some((_, r)) => r,
                None => return Ok(metas),
            };
            records.extend(rest.filter_map(|(j, r)| {
                let acked = matches!(outcomes.get(i + j), Some(Some(Ok(_))));
                (!acked).then_some(r)
            }));
            return Err(send_error(error, record));
        }
        records.clear();
        Ok(metas)
    }

    /// The client's fatal error, as the error of a send that failed with `_FATAL`.
    fn fatal_or(&self, code: Code, reason: String, at: At<'_>) -> Error {
        let id = self.txn.as_ref().map(|t| t.id());
        self.shared()
            .fatal(id)
            .unwrap_or_else(|| from_code(code, reason, at))
    }

    fn enqueue_error(&self, code: Code, r: &Record<K, V>, at: At<'_>) -> Error {
        match code {
            Code::Fatal => self.fatal_or(code, "refused by the client".into(), at),
            Code::QueueFull => crate::kafka::error::timed_out(at),
            Code::UnknownPartition => self.partition_error(r),
            c => from_code(c, "refused by the client".into(), at),
        }
    }

    fn delivery_error(&self, code: Code, reason: String, r: &Record<K, V>, at: At<'_>) -> Error {
        match code {
            Code::Fatal => self.fatal_or(code, reason, at),
            Code::UnknownPartition => self.partition_error(r),
            c => from_code(c, reason, at),
        }
    }

    /// [`Error::PartitionOutOfRange`] for `r`'s explicit partition (with the topic's
    /// count), else the client's unknown-partition error.
    fn partition_error(&self, r: &Record<K, V>) -> Error {
        let partition = r.partition.unwrap_or(0);
        match self.broker.partition_count(&r.topic) {
            Ok(count) => Error::PartitionOutOfRange {
                topic: r.topic.to_string(),
                partition,
                count,
            },
            Err(e) => e,
        }
    }

    /// Waits until every record sent so far by any producer of this broker is
    /// acknowledged (or failed: their `send` reports it).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when records are still unacknowledged after
    /// `message.timeout.ms`.
    pub fn flush(&self) -> Result<()> {
        let shared = self.shared();
        shared
            .client
            .flush(shared.delivery_timeout)
            .map_err(|e| from_kafka(e, At::op("flush").timeout(shared.delivery_timeout)))
    }
}

/// Hands `record` to librdkafka, retrying while its queue is full until `deadline` (`None`:
/// without limit).
fn enqueue(
    client: &ThreadedProducer<DeliveryContext>,
    mut record: Outgoing<'_>,
    deadline: Option<Instant>,
) -> std::result::Result<(), Code> {
    loop {
        match client.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(Code::QueueFull), back)) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Code::QueueFull);
                }
                record = back;
                // The polling thread drains delivery reports; give it the time one takes.
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(super::error::code_of(&e).unwrap_or(Code::Fail)),
        }
    }
}

/// A record of bytes, as an export reads it from a segment.
pub(crate) struct RawRecord<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: u32,
    pub(crate) timestamp: i64,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
    pub(crate) headers: &'a [crate::storage::Header],
}

/// What became of one record [`send_raw`] was given.
pub(crate) enum RawOutcome {
    /// Acknowledged at this offset of its partition.
    Acked(u64),
    /// Refused by the client or the cluster.
    Failed(Error),
    /// Never sent: an earlier record failed and the records still queued were withdrawn,
    /// or the client refused an earlier one.
    NotSent,
}

/// Sends `records` and waits for each one's outcome, in order. At the first failure the
/// records still in the client's queues are withdrawn (purged), so that as few as possible
/// land after a failed one: only those already in a request on the wire can.
pub(crate) fn send_raw(shared: &SharedProducer, records: &[RawRecord<'_>]) -> Vec<RawOutcome> {
    let batch = Batch::new(records.len());
    let mut enqueued = 0;
    let mut refused = None;
    for (i, r) in records.iter().enumerate() {
        let mut base: Outgoing<'_> =
            BaseRecord::with_opaque_to(r.topic, Box::new((Arc::clone(&batch), i)))
                .partition(r.partition as i32);
        if let Some(v) = r.value {
            base = base.payload(v);
        }
        if let Some(k) = r.key {
            base = base.key(k);
        }
        if r.timestamp >= 0 {
            base = base.timestamp(r.timestamp);
        }
        if !r.headers.is_empty() {
            let mut h = OwnedHeaders::new_with_capacity(r.headers.len());
            for header in r.headers {
                h = h.insert(Header {
                    key: header.key.as_str(),
                    value: header.value.as_deref(),
                });
            }
            base = base.headers(h);
        }
        match enqueue(&shared.client, base, None) {
            Ok(()) => enqueued += 1,
            Err(code) => {
                let at = At::op("export").topic(r.topic).partition(r.partition);
                refused = Some(from_code(code, "refused by the client".into(), at));
                break;
            }
        }
    }
    if batch.wait_all_or_failure(enqueued) {
        shared.client.purge(PurgeConfig::default().queue());
    }
    let outcomes = batch.wait(enqueued);
    let mut out = Vec::with_capacity(records.len());
    for (i, (r, o)) in records.iter().zip(outcomes).enumerate() {
        out.push(match o {
            Some(Ok((_, offset, _))) => RawOutcome::Acked(offset),
            Some(Err((Code::PurgeQueue, ..))) => RawOutcome::NotSent,
            Some(Err((code, reason, _))) => {
                let at = At::op("export")
                    .topic(r.topic)
                    .partition(r.partition)
                    .timeout(shared.delivery_timeout);
                RawOutcome::Failed(from_code(code, reason, at))
            }
            None if i == enqueued => match refused.take() {
                Some(e) => RawOutcome::Failed(e),
                None => RawOutcome::NotSent,
            },
            None => RawOutcome::NotSent,
        });
    }
    out
}

/// logbus headers as Kafka's.
pub(crate) fn to_headers(headers: &crate::Headers) -> OwnedHeaders {
    let mut out = OwnedHeaders::new_with_capacity(headers.len());
    for (k, v) in headers {
        out = out.insert(Header {
            key: k.as_str(),
            value: v.as_deref(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(producer: Option<&ProducerConfig>) -> (rdkafka::ClientConfig, Duration) {
        client_config(&KafkaConfig::new("localhost:9092"), producer)
    }

    #[test]
    fn the_shared_producer_is_idempotent_with_acks_all_as_in_process() {
        let (c, _) = settings(None);
        assert_eq!(c.get("acks"), Some("all"));
        assert_eq!(c.get("enable.idempotence"), Some("true"));
        let leader = KafkaConfig::new("x").acks("1");
        let (c, _) = client_config(&leader, None);
        assert_eq!(c.get("enable.idempotence"), None, "acks=1: not idempotent");
        let off = KafkaConfig::new("x").set("enable.idempotence", "false");
        let (c, _) = client_config(&off, None);
        assert_eq!(
            c.get("enable.idempotence"),
            Some("false"),
            "the user's choice"
        );
    }

    #[test]
    fn producer_config_maps_onto_the_client() {
        let config = ProducerConfig::new()
            .acks(Acks::Leader)
            .retries(7)
            .delivery_timeout(Duration::from_secs(9))
            .request_timeout(Duration::from_secs(3));
        let (c, delivery) = settings(Some(&config));
        assert_eq!(c.get("acks"), Some("1"));
        assert_eq!(c.get("enable.idempotence"), Some("false"));
        assert_eq!(c.get("retries"), Some("7"));
        assert_eq!(c.get("message.timeout.ms"), Some("9000"));
        assert_eq!(c.get("request.timeout.ms"), Some("3000"));
        assert_eq!(c.get("transactional.id"), None);
        assert_eq!(delivery, Duration::from_secs(9));

        let txn = ProducerConfig::new()
            .transactional_id("worker")
            .transaction_timeout(Duration::from_secs(20));
        let (c, delivery) = settings(Some(&txn));
        assert_eq!(c.get("acks"), Some("all"));
        assert_eq!(c.get("enable.idempotence"), Some("true"));
        assert_eq!(c.get("transactional.id"), Some("worker"));
        assert_eq!(c.get("transaction.timeout.ms"), Some("20000"));
        // The default delivery timeout (120 s) is cut to the transaction's.
        assert_eq!(c.get("message.timeout.ms"), Some("20000"));
        assert_eq!(delivery, Duration::from_secs(20));
    }
}
