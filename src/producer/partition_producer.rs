//! [`PartitionProducer`]: one partition of one topic, for hot loops that already know
//! where their records go: [`send_iter`](PartitionProducer::send_iter) builds records
//! straight into the partition's run, [`send_slice`](PartitionProducer::send_slice) copies
//! `Copy` values from a slice straight into the partition's ring slots.

use std::fmt;

use bytes::Bytes;

use super::{append_error, ProduceBatchError, Producer};
use crate::partition::{valid_timestamp, AppendError, AppendWait, Entry, Headers};
use crate::sync::StdArc as Arc;
use crate::Error;

/// What [`PartitionProducer::send_iter`] sends for one record: a [`Record`](super::Record)
/// without topic and partition (the handle names those once).
///
/// # Examples
///
/// ```
/// use logbus::producer::Payload;
///
/// let p = Payload::<String, u64>::new(7).key("k".into()).timestamp(1_700_000_000_000);
/// assert_eq!(p.value, 7);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Payload<K, V> {
    /// Milliseconds since the Unix epoch, or `None` for the broker clock's time at send.
    pub timestamp: Option<i64>,
    /// The key, if any (kept with the record; it does not choose the partition here).
    pub key: Option<K>,
    /// The value.
    pub value: V,
    /// Headers (none costs no allocation).
    pub headers: Headers,
}

impl<K, V> fmt::Debug for Payload<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payload")
            .field("timestamp", &self.timestamp)
            .field("has_key", &self.key.is_some())
            .field("headers", &self.headers.len())
            .finish_non_exhaustive()
    }
}

impl<K, V> Payload<K, V> {
    /// `value`, without key, timestamp or headers.
    #[inline]
    pub fn new(value: V) -> Self {
        Self {
            timestamp: None,
            key: None,
            value,
            headers: Vec::new(),
        }
    }

    /// With a key.
    #[inline]
    pub fn key(mut self, key: K) -> Self {
        self.key = Some(key);
        self
    }

    /// With a timestamp (milliseconds since the Unix epoch, in `0..=`[`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP)).
    #[inline]
    pub fn timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    /// With one more header.
    pub fn header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push((key.into(), value));
        self
    }
}

/// One partition of one topic, from [`Producer::partition`]: the zero-copy hot path for
/// records whose partition the caller already knows. It borrows its producer (and shares
/// its cache and lock); each call sends to the partition in order, waiting for room as
/// [`Producer::send`] does, and checks again that the topic still exists.
///
/// # Examples
///
/// ```
/// use logbus::broker::{Broker, TopicConfig};
/// use logbus::producer::Payload;
///
/// let broker = Broker::in_memory();
/// broker.create_topic::<(), u64>("ticks", TopicConfig::new(2))?;
/// let producer = broker.producer::<(), u64>();
/// let ticks = producer.partition("ticks", 1)?;
/// assert_eq!(ticks.send_iter((0..100).map(|v| Payload::new(v).timestamp(v as i64)))?, 100);
/// let slice: Vec<(i64, u64)> = (0..64).map(|v| (1_700_000_000_000 + v as i64, v)).collect();
/// assert_eq!(ticks.send_slice(&slice)?, 64);
/// # Ok::<(), logbus::Error>(())
/// ```
pub struct PartitionProducer<'a, K, V> {
    producer: &'a Producer<K, V>,
    /// The topic's name (shared with the topic: no copy).
    topic: Arc<str>,
    partition: u32,
}

impl<K, V> fmt::Debug for PartitionProducer<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartitionProducer")
            .field("topic", &&*self.topic)
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

impl<K, V> PartitionProducer<'_, K, V>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// Sends every record `records` yields, in order, building each straight into the
    /// partition's run: no [`Record`](super::Record) per record, one topic lookup per call,
    /// one claim per run of up to 1,024 records. Waits for room as
    /// [`send`](Producer::send) does. Records without a timestamp get the broker clock's
    /// time, read once per run. The iterator runs with no lock held (it may send through
    /// the same producer too). Returns how many were sent. If the iterator panics, the
    /// records it gave for the run not yet appended (at most 1,024) are dropped and the
    /// panic goes on to the caller.
    ///
    /// # Errors
    ///
    /// [`ProduceBatchError`] with how many were sent and: [`Error::UnknownTopic`] (the
    /// topic was deleted and not made again), [`Error::TypeMismatch`] (made again with
    /// other types), [`Error::PartitionOutOfRange`] (made again with fewer partitions),
    /// [`Error::InvalidTimestamp`] (the records before it were sent, those
    /// after it not taken from the iterator), [`Error::Closed`] (the topic was deleted
    /// meanwhile), [`Error::RecordTooLarge`] (persisted topics). The records of the run
    /// that failed are dropped; the iterator keeps those it did not yield.
    #[inline]
    pub fn send_iter<I>(&self, records: I) -> Result<usize, ProduceBatchError>
    where
        I: IntoIterator<Item = Payload<K, V>>,
    {
        self.producer
            .send_iter_to(&self.topic, self.partition, records)
    }

    /// Sends `records`, each a `(timestamp, value)` without key or headers, in order,
    /// copying each straight into its slot of the partition's log: the Disruptor's batch
    /// publish, for values that are `Copy`. One lock, one topic lookup and one claim per
    /// call (more claims only when the log is full); no user code runs while the partition
    /// is held, so nothing here can deadlock on it or leave it half-written. Waits for room
    /// as [`send`](Producer::send) does. Timestamps are milliseconds since the Unix epoch
    /// (in `0..=`[`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP); `broker.clock().now_ms()` gives
    /// the broker clock's). Returns how many were sent (all of them).
    ///
    /// # Errors
    ///
    /// [`ProduceBatchError`] with how many were sent (`records[..sent]`) and:
    /// [`Error::UnknownTopic`], [`Error::TypeMismatch`], [`Error::PartitionOutOfRange`] (as
    /// for [`send_iter`](Self::send_iter)), [`Error::InvalidTimestamp`] for the first timestamp
    /// outside that range, [`Error::Closed`] (the topic was deleted meanwhile),
    /// [`Error::RecordTooLarge`] (persisted topics).
    #[inline]
    pub fn send_slice(&self, records: &[(i64, V)]) -> Result<usize, ProduceBatchError>
    where
        V: Copy,
    {
        self.producer
            .send_slice_to(&self.topic, self.partition, records)
    }
}

/// Entries gathered per append: one claim per run, a bounded buffer.
const CHUNK: usize = 1024;

/// Keeps the larger of the producer's run buffer and `run` (empty) for the next send.
fn give_back<K, V>(state: &mut super::State<K, V>, run: Vec<Entry<K, V>>) {
    if state.run.capacity() < run.capacity() {
        state.run = run;
    }
}

impl<K, V> Producer<K, V>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    /// A handle on partition `partition` of `topic`, to send records there without
    /// choosing a partition per record ([`PartitionProducer::send_iter`],
    /// [`PartitionProducer::send_slice`]).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::TypeMismatch`], [`Error::PartitionOutOfRange`]
    /// (with the topic's partition count).
    pub fn partition(
        &self,
        topic: &str,
        partition: u32,
    ) -> crate::Result<PartitionProducer<'_, K, V>> {
        let mut state = self.state.lock();
        let t = self.destination(&mut state, topic, partition)?;
        Ok(PartitionProducer {
            producer: self,
            topic: Arc::clone(&state.topics[t].topic.name),
            partition,
        })
    }

    /// [`PartitionProducer::send_iter`] to partition `partition` of `topic`.
    #[inline]
    fn send_iter_to<I>(
        &self,
        topic: &str,
        partition: u32,
        records: I,
    ) -> Result<usize, ProduceBatchError>
    where
        I: IntoIterator<Item = Payload<K, V>>,
    {
        let failed = |sent, error| ProduceBatchError { sent, error };
        // The iterator is user code: it runs with no lock held (it may use this producer);
        // the producer's lock is taken per run, to append it.
        let (mut run, compacts) = {
            let mut state = self.state.lock();
            let t = self
                .destination(&mut state, topic, partition)
                .map_err(|e| failed(0, e))?;
            let compacts = state.topics[t].topic.compacts();
            (std::mem::take(&mut state.run), compacts)
        };
        run.clear();
        let mut records = records.into_iter();
        let mut sent = 0;
        loop {
            let mut now = None;
            let mut bad = None;
            for p in records.by_ref() {
                if p.key.is_none() && compacts {
                    bad = Some(super::key_required(topic));
                    break;
                }
                let timestamp = match p.timestamp {
                    Some(ts) if !valid_timestamp(ts) => {
                        bad = Some(Error::InvalidTimestamp {
                            timestamp: ts,
                            offset: None,
                        });
                        break;
                    }
                    Some(ts) => ts,
                    None => *now
                        .get_or_insert_with(|| self.broker.now_ms().clamp(0, crate::MAX_TIMESTAMP)),
                };
                run.push(Entry::new(timestamp, p.key, p.value, p.headers));
                if run.len() == CHUNK {
                    break;
                }
            }
            let gathered = run.len();
            let last = bad.is_some() || gathered < CHUNK;
            if gathered > 0 {
                let mut state = self.state.lock();
                // Found again: another thread's send on this producer may have changed its
                // cache, or the topic may have been deleted (and made again) meanwhile.
                let appended = self
                    .destination(&mut state, topic, partition)
                    .and_then(|t| {
                        Self::append_run(&mut state, t, partition, &mut run)
                            .0
                            .map_err(|why| append_error(why, topic, partition))
                    });
                sent += gathered - run.len();
                if appended.is_err() || last {
                    // Done: the run's buffer goes back under the same lock.
                    run.clear();
                    give_back(&mut state, run);
                    break match (appended, bad) {
                        (Err(error), _) | (Ok(()), Some(error)) => Err(failed(sent, error)),
                        (Ok(()), None) => Ok(sent),
                    };
                }
            } else {
                give_back(&mut self.state.lock(), run);
                break match bad {
                    Some(error) => Err(failed(sent, error)),
                    None => Ok(sent),
                };
            }
        }
    }

    /// [`PartitionProducer::send_slice`] to partition `partition` of `topic`.
    #[inline]
    fn send_slice_to(
        &self,
        topic: &str,
        partition: u32,
        records: &[(i64, V)],
    ) -> Result<usize, ProduceBatchError>
    where
        V: Copy,
    {
        let failed = |sent, error| ProduceBatchError { sent, error };
        // Branch-free, eight at a time (one `or` from memory each): a timestamp is valid
        // exactly when its two high bits are clear (`valid_timestamp`), so the `or` of
        // them all is valid exactly when they all are. The search only when one is not.
        let mut chunks = records.chunks_exact(8);
        let mut acc = 0;
        for c in &mut chunks {
            acc |= c[0].0 | c[1].0 | c[2].0 | c[3].0 | c[4].0 | c[5].0 | c[6].0 | c[7].0;
        }
        let any_bad = !valid_timestamp(chunks.remainder().iter().fold(acc, |acc, r| acc | r.0));
        let good = if any_bad {
            records.iter().take_while(|r| valid_timestamp(r.0)).count()
        } else {
            records.len()
        };
        let mut state = self.state.lock();
        let t = self
            .destination(&mut state, topic, partition)
            .map_err(|e| failed(0, e))?;
        let cached = &mut state.topics[t];
        // Its records have no keys.
        if cached.topic.compacts() && !records.is_empty() {
            return Err(failed(0, super::key_required(topic)));
        }
        let (mut sent, mut done) =
            cached.appenders[partition as usize].append_copied(&records[..good], AppendWait::No);
        if let Err(AppendError::Full) = done {
            // Wait for room with the producer's lock released, on a handle of our own (as
            // `send` does): other threads sharing this producer are not held behind us.
            let mut own = cached.topic.partitions()[partition as usize]
                .appender()
                .with_policy(cached.policy.clone());
            drop(state);
            let (more, rest) = own.append_copied(&records[sent..good], AppendWait::Until(None));
            sent += more;
            done = rest;
        }
        match done {
            Err(why) => Err(failed(sent, append_error(why, topic, partition))),
            Ok(()) if any_bad => Err(failed(
                sent,
                Error::InvalidTimestamp {
                    timestamp: records[good].0,
                    offset: None,
                },
            )),
            Ok(()) => Ok(sent),
        }
    }

    /// The cache index of `topic`, after checking that it has `partition`.
    pub(super) fn destination(
        &self,
        state: &mut super::State<K, V>,
        topic: &str,
        partition: u32,
    ) -> crate::Result<usize> {
        let t = self.find_topic(state, topic, None)?;
        let count = state.topics[t].appenders.len() as u32;
        if partition >= count {
            return Err(Error::PartitionOutOfRange {
                topic: topic.to_owned(),
                partition,
                count,
            });
        }
        Ok(t)
    }
}
