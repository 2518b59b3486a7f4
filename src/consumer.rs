//! Consumers (layer 7): assigned partitions, positions, polling, committing, seeking.
//!
//! A [`Consumer<K, V>`](Consumer) is created by [`Broker::consumer`] from a
//! [`ConsumerConfig`], and is used by one thread at a time (`Send`, not `Sync`), as
//! Kafka's `KafkaConsumer`. It reads the partitions it is [assigned](Consumer::assign),
//! each from its own *position* (the offset of the next record it will read), and with a
//! group id it commits positions as the group's *committed offsets* (Kafka's meaning: the
//! next record to read). A consumer either is assigned its partitions by hand
//! ([`assign`](Consumer::assign)), or [subscribes](Consumer::subscribe) to topics and lets
//! its group share their partitions among its members, rebalancing as members come and go
//! (see [`group`](crate::group)): never both at once.
//!
//! # Where a consumer starts, and what happens behind the tail
//!
//! On assignment a partition's position is the group's committed offset, else per
//! [`OffsetReset`]: the log start (`Earliest`), the log end (`Latest`, the default, as in
//! Kafka), or none (`None`: [`poll`](Consumer::poll) fails with
//! [`Error::NoOffsetForPartition`] until you seek).
//!
//! When a position falls below the log start (overwritten on a `DropOldest` topic, expired
//! by retention) or lies past the log end: with `None`, `poll` fails with
//! [`Error::OffsetOutOfRange`] carrying the valid range and the position stays for
//! you to seek; with `Earliest` or `Latest` the consumer moves to the log start or end and
//! counts the records it skipped in its [metrics](Consumer::metrics), per partition — a gap
//! is never silent.
//!
//! # Gating
//!
//! On an [`Overflow::Block`](crate::broker::Overflow::Block) topic, a group registers on a
//! partition when a consumer with that group id is first assigned it: from then on
//! producers never overwrite a record at or above the group's committed offset (its
//! starting position until its first commit), until [`Broker::delete_group`], or until the
//! group has had no open consumer for the broker's
//! [`empty_group_timeout`](crate::broker::BrokerBuilder::empty_group_timeout) (a member
//! leaving and another joining within it keeps the group's records; after it, a consumer
//! of the group assigned the partition again holds producers back from the committed
//! offset once more and counts what was overwritten meanwhile as skipped). Consumers
//! without a group id never hold producers back. What a `Block` topic overwrites while no
//! group holds it is counted (see [`Overflow::Block`](crate::broker::Overflow::Block)). A subscribed consumer auto-commits by
//! default, also every half partition capacity it reads, so producers never wait for the
//! commit interval (see [`ConsumerConfig::enable_auto_commit`]); with auto-commit off,
//! commit at least that often or producers wait.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use crate::broker::{Broker, TopicInner, TopicPartition};
use crate::partition::{GroupSlot, Handed, Partition, ReadOutcome};
#[cfg(not(logbus_loom))]
use crate::sync::thread;
use crate::sync::time::{self, Instant};
// Std's Arc (also under loom): topic names are `Arc<str>` (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::{Error, Result};

mod async_poll;
mod config;
pub(crate) mod group_config;
mod lending;
pub(crate) mod listener;
pub(crate) mod membership;
mod records;
mod table;
pub use crate::partition::IsolationLevel;
pub use async_poll::{PollAsync, RecordStream};
pub use config::{ConsumerConfig, OffsetReset};
pub use lending::RecordRef;
pub use records::{ConsumerMetrics, ConsumerRecord, ConsumerRecords, OffsetAndTimestamp};
pub use table::{Table, TableMetrics};

/// Yields a waiting poll takes before parking (none under loom, which models no time).
#[cfg(not(logbus_loom))]
const YIELDS: u32 = 64;

/// How a waiting poll watches for the next record when records come one at a time (the
/// last poll read one: one in flight): a dense poll of its partitions' readability, one
/// spin hint apart, before the yields (`sync::wait`; the queue's receivers wait the same
/// way). A record published while the consumer is inside a `sched_yield` is seen only when
/// the call returns; polled, it is seen within a hint. A consumer reading runs yields at
/// once, as the ring's readers do: with more runnable threads than cores (a fan-out on two
/// cores) the poll only delays the yield that lets the producer run. The poll is skipped
/// (but for probes) once polls keep seeing nothing (BENCHMARKS.md, "Tuning constants").
/// None under loom, which models no time.
#[cfg(not(logbus_loom))]
const WAIT_POLICY: crate::sync::wait::Policy = crate::sync::wait::Policy {
    dense_polls: 128,
    skip_after_misses: 2,
    spin_rounds: 0,
    yields: YIELDS,
    pace_spins: 0,
};
#[cfg(logbus_loom)]
const WAIT_POLICY: crate::sync::wait::Policy = crate::sync::wait::Policy {
    dense_polls: 0,
    skip_after_misses: 0,
    spin_rounds: 0,
    yields: 0,
    pace_spins: 0,
};

/// One assigned partition.
pub(crate) struct Assigned<K, V> {
    pub(crate) tp: TopicPartition,
    /// The topic's interned name, copied into each record.
    name: &'static str,
    pub(crate) topic: Arc<TopicInner<K, V>>,
    pub(crate) partition: Arc<Partition<K, V>>,
    /// The next offset to read; `None` without committed offset under `OffsetReset::None`.
    pub(crate) position: Option<u64>,
    /// The consumer's group on this partition (reads at or after its gate take no slot
    /// locks).
    pub(crate) group: Option<Arc<GroupSlot<K, V>>>,
    paused: bool,
    /// The consumer's isolation level (`ConsumerConfig::isolation_level`).
    pub(crate) isolation: crate::partition::IsolationLevel,
}

/// Reads the partitions it is assigned; commits under its group id. `Send`, not `Sync`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::broker::{Broker, TopicConfig, TopicPartition};
/// use logbus::consumer::{ConsumerConfig, OffsetReset};
/// use logbus::producer::Record;
///
/// let broker = Broker::in_memory();
/// broker.create_topic::<(), u64>("ticks", TopicConfig::new(1))?;
/// let producer = broker.producer::<(), u64>();
/// for i in 0..10 {
///     producer.send(Record::new("ticks", i))?;
/// }
/// let tp = TopicPartition::new("ticks", 0);
/// let mut consumer = broker.consumer::<(), u64>(
///     ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
/// )?;
/// consumer.assign(&[tp.clone()])?;
/// assert_eq!(consumer.poll(Duration::ZERO)?.len(), 10);
/// consumer.seek(&tp, 7)?; // replay from offset 7
/// let mut replayed = Vec::new();
/// consumer.poll_with(16, Duration::ZERO, |r| replayed.push(*r.value))?; // borrowed
/// assert_eq!(replayed, [7, 8, 9]);
/// # Ok::<(), logbus::Error>(())
/// ```
pub struct Consumer<K, V> {
    pub(crate) broker: Broker,
    pub(crate) config: ConsumerConfig,
    pub(crate) group: Option<Arc<str>>,
    pub(crate) assigned: Vec<Assigned<K, V>>,
    /// Set while subscribed (group management): see `crate::consumer::membership`.
    pub(crate) membership: Option<crate::consumer::membership::Membership<K, V>>,
    /// Where the next poll starts, for fairness over partitions.
    pub(crate) next: usize,
    pub(crate) metrics: ConsumerMetrics,
    /// [`poll_with`](Consumer::poll_with)'s reused buffers.
    pub(crate) borrowed: lending::Buffers<K, V>,
    /// Whether waiting polls' dense polls have been seeing records (see `WAIT_POLICY`).
    polls: crate::sync::wait::PollHistory,
    /// [`poll`](Consumer::poll)'s buffer, handed back by the records it returned.
    spare: records::Spare<K, V>,
    /// The last poll that read something read one record: records come one at a time (one
    /// in flight), so a waiting poll polls densely for the next (see `WAIT_POLICY`).
    trickle: bool,
    /// A task's registrations while it waits in [`poll_async`](Consumer::poll_async).
    pub(crate) task_waits: async_poll::TaskWaits,
    /// One thread at a time, as Kafka's consumer.
    _not_sync: PhantomData<Cell<()>>,
}

impl<K, V> fmt::Debug for Consumer<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("config", &self.config)
            .field(
                "assignment",
                &self.assigned.iter().map(|a| &a.tp).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A consumer with `config`. With a group id, the group is known to the broker from
    /// now on (until [`delete_group`](Broker::delete_group)), and counts this consumer as
    /// open until it is closed or dropped.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] (`max_poll_records` of 0, an empty group id).
    pub fn consumer<K, V>(&self, config: ConsumerConfig) -> Result<Consumer<K, V>>
    where
        K: Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        config.validate()?;
        let group: Option<Arc<str>> = config.group_id.as_deref().map(Arc::from);
        if let Some(g) = &group {
            self.join_group(g);
            if config.isolation_level == IsolationLevel::ReadCommitted {
                self.note_read_committed_group(g);
            }
        }
        Ok(Consumer {
            broker: self.clone(),
            config,
            group,
            assigned: Vec::new(),
            membership: None,
            next: 0,
            metrics: ConsumerMetrics::default(),
            borrowed: lending::Buffers::default(),
            polls: crate::sync::wait::PollHistory::new(),
            spare: Arc::new(crate::sync::Mutex::new(Vec::new())),
            trickle: false,
            task_waits: async_poll::TaskWaits::default(),
            _not_sync: PhantomData,
        })
    }
}

impl<K, V> Consumer<K, V>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Reads exactly `partitions` from now on (replacing the previous assignment; positions
    /// of partitions that stay assigned are kept). Each new partition starts at the group's
    /// committed offset, else per [`OffsetReset`]; with a group id on a `Block` topic the
    /// group registers on it (see the module docs). Nothing changes if any partition is
    /// refused.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::TypeMismatch`], [`Error::PartitionOutOfRange`];
    /// [`Error::SubscriptionConflict`] while subscribed.
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        if self.membership.is_some() {
            return Err(Error::SubscriptionConflict {
                operation: "assign",
                current: "is subscribed to topics",
            });
        }
        self.assign_inner(partitions)
    }

    /// `assign` without the subscription check: the group's assignments go through here.
    pub(crate) fn assign_inner(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        // Linear in the partitions (a group may hand a member thousands at once): topics
        // resolved once each, duplicates and kept partitions found by hash.
        let mut resolved = Vec::with_capacity(partitions.len());
        let mut unique: HashSet<&TopicPartition> = HashSet::with_capacity(partitions.len());
        let mut topics: Vec<Arc<TopicInner<K, V>>> = Vec::new();
        for tp in partitions {
            if !unique.insert(tp) {
                continue;
            }
            let topic = match topics.iter().find(|t| *t.name == *tp.topic) {
                Some(t) => Arc::clone(t),
                None => {
                    let t = self.broker.topic_inner::<K, V>(&tp.topic)?;
                    topics.push(Arc::clone(&t));
                    t
                }
            };
            let partition = topic.partition(tp.partition)?;
            resolved.push((tp.clone(), topic, partition));
        }
        let mut old: Vec<Option<Assigned<K, V>>> = std::mem::take(&mut self.assigned)
            .into_iter()
            .map(Some)
            .collect();
        let index: HashMap<TopicPartition, usize> = old
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.as_ref().map(|a| (a.tp.clone(), i)))
            .collect();
        let now = self.broker.now_ms();
        for (tp, topic, partition) in resolved {
            if let Some(&i) = index.get(&tp) {
                if old[i]
                    .as_ref()
                    .is_some_and(|a| Arc::ptr_eq(&a.partition, &partition))
                {
                    if let Some(a) = old[i].take() {
                        self.assigned.push(a);
                        continue;
                    }
                }
            }
            let (position, group) = match self.group.clone() {
                Some(g) => {
                    let committed = partition.committed(&g);
                    let position = committed.or_else(|| self.reset_target(&partition, now));
                    let start = position.unwrap_or_else(|| partition.log_start(now));
                    partition.register_group(&g, start)?;
                    if committed.is_none() {
                        self.count_overwritten(&tp, &partition, position);
                    }
                    (position, partition.group_slot(&g))
                }
                None => {
                    let position = self.reset_target(&partition, now);
                    self.count_overwritten(&tp, &partition, position);
                    (position, None)
                }
            };
            self.assigned.push(Assigned {
                group,
                name: crate::sync::intern(&topic.name),
                tp,
                topic,
                partition,
                position,
                paused: false,
                isolation: self.config.isolation_level,
            });
        }
        self.next = 0;
        Ok(())
    }

    /// The partitions assigned, in assignment order.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assigned.iter().map(|a| a.tp.clone()).collect()
    }

    /// A consumer starting from the earliest record of a `Block` topic whose ring has
    /// overwritten records misses them: counted, per partition, as when a position falls
    /// behind the log start (a `Block` topic is expected to keep what a reader has not
    /// seen, so its losses are never silent; a `DropOldest` topic drops by design).
    fn count_overwritten(
        &mut self,
        tp: &TopicPartition,
        partition: &Partition<K, V>,
        position: Option<u64>,
    ) {
        if self.config.auto_offset_reset != OffsetReset::Earliest || !partition.is_gated() {
            return;
        }
        let gone = partition
            .overwritten_below()
            .min(position.unwrap_or(u64::MAX));
        if gone > 0 {
            *self.metrics.skipped.entry(tp.clone()).or_insert(0) += gone;
        }
    }

    /// Where [`OffsetReset`] puts a position (`None` for `OffsetReset::None`).
    fn reset_target(&self, partition: &Partition<K, V>, now: i64) -> Option<u64> {
        match self.config.auto_offset_reset {
            OffsetReset::Earliest => Some(partition.log_start(now)),
            OffsetReset::Latest => Some(readable_end(partition, self.config.isolation_level)),
            OffsetReset::None => None,
        }
    }

    /// Waits up to `timeout` for records and returns what is available (at most
    /// `max_poll_records`), reading the assigned, unpaused partitions in turn.
    /// With nothing assigned it returns at once, empty. Each record is a clone of the
    /// log's; [`poll_with`](Self::poll_with) lends them instead (no clone where the
    /// consumer's group holds them, no allocation per record).
    ///
    /// # Errors
    ///
    /// [`Error::OffsetOutOfRange`] (position out of range with `OffsetReset::None`),
    /// [`Error::NoOffsetForPartition`], [`Error::UnknownTopic`] (an assigned topic was
    /// deleted), [`Error::PartitionOffline`] (a persisted partition's log failed, and this
    /// consumer has read every record it holds). Records read before the problem are
    /// returned first; the error comes with the next poll.
    pub fn poll(&mut self, timeout: Duration) -> Result<ConsumerRecords<K, V>> {
        let max = self.config.max_poll_records;
        // The buffer the last poll's records handed back when dropped (`ConsumerRecords`),
        // grown at once to what is readable now, not once per doubling while it fills: no
        // allocation per poll (a fresh one of up to `max` records costs page faults when
        // the allocator gives the last one's memory back to the system).
        let mut records = std::mem::take(&mut *self.spare.lock());
        records.reserve(self.readable_now(max));
        let mut headers = false;
        self.poll_loop(max, timeout, |c, max| {
            c.fetch(&mut records, &mut headers, max)
        })?;
        Ok(ConsumerRecords {
            records,
            spare: Some(Arc::clone(&self.spare)),
            headers,
        })
    }

    /// How many records the unpaused partitions hold from their positions on, at most
    /// `max`: an estimate (a record may be lapped, the assignment may change).
    fn readable_now(&self, max: usize) -> usize {
        let mut n = 0u64;
        for a in &self.assigned {
            if let (false, Some(p)) = (a.paused, a.position) {
                n += a.partition.high_watermark().saturating_sub(p);
                if n >= max as u64 {
                    return max;
                }
            }
        }
        n as usize
    }

    /// The poll loop: group duties, `fetch(self, max)` over the assigned partitions, and
    /// waiting for records until `timeout`.
    #[inline(always)]
    pub(crate) fn poll_loop(
        &mut self,
        max: usize,
        timeout: Duration,
        mut fetch: impl FnMut(&mut Self, usize) -> Result<usize>,
    ) -> Result<usize> {
        if max == 0 || (self.assigned.is_empty() && self.membership.is_none()) {
            return Ok(0);
        }
        let mut deadline: Option<Option<Instant>> = None;
        loop {
            if self.membership.is_some() {
                self.group_poll()?;
            }
            let n = if self.assigned.is_empty() {
                0
            } else {
                fetch(self, max)?
            };
            if n > 0 {
                self.trickle = n == 1;
                return Ok(n);
            }
            let d = *deadline.get_or_insert_with(|| time::deadline_after(timeout));
            if d.is_some_and(time::expired) {
                return Ok(0);
            }
            self.wait(d);
        }
    }

    /// Reads what is available now from the unpaused partitions, starting with the one
    /// after where the last fetch started. Sets `owned` when a record's headers own memory.
    fn fetch(
        &mut self,
        out: &mut Vec<ConsumerRecord<K, V>>,
        owned: &mut bool,
        max: usize,
    ) -> Result<usize> {
        self.walk(max, |a, left, now, reset, metrics| {
            read_one(
                a,
                &mut |name, partition, offset, e: Handed<'_, K, V>| {
                    let (timestamp, key, value, headers) = e.into_parts();
                    *owned |= headers.capacity() != 0;
                    out.push(ConsumerRecord {
                        topic: name,
                        partition,
                        offset,
                        timestamp,
                        key,
                        value,
                        headers,
                    });
                },
                left,
                now,
                reset,
                metrics,
            )
        })
    }

    /// The one walk over the assigned partitions that every fetch takes: the unpaused
    /// ones in turn, starting with the one after where the last walk started, each read by
    /// `read(partition, at most this many records, now, reset, metrics)` until `max` are
    /// read; counts them in the metrics. When a read fails after others have read
    /// something, what was read is handed over and the failing partition is read first
    /// next time, so the problem surfaces then.
    ///
    /// The clock is asked at most once per walk, and only for a partition that expires
    /// records by age: nothing else about a read depends on the time (others get 0).
    #[inline(always)]
    pub(crate) fn walk(
        &mut self,
        max: usize,
        mut read: impl FnMut(
            &mut Assigned<K, V>,
            usize,
            i64,
            OffsetReset,
            &mut ConsumerMetrics,
        ) -> Result<usize>,
    ) -> Result<usize> {
        let len = self.assigned.len();
        // Compared, not divided: a division costs tens of cycles, on every poll.
        let first = if self.next < len { self.next } else { 0 };
        self.next = if first + 1 < len { first + 1 } else { 0 };
        let reset = self.config.auto_offset_reset;
        let mut clock = None;
        let mut total = 0;
        for i in 0..len {
            if total >= max {
                break;
            }
            let at = if first + i < len {
                first + i
            } else {
                first + i - len
            };
            let a = &mut self.assigned[at];
            if a.paused {
                continue;
            }
            let now = if a.partition.expires_by_age() {
                *clock.get_or_insert_with(|| self.broker.now_ms())
            } else {
                0
            };
            match read(a, max - total, now, reset, &mut self.metrics) {
                Ok(n) => total += n,
                Err(_) if total > 0 => {
                    self.next = at;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        self.metrics.records += total as u64;
        Ok(total)
    }

    /// Parks until an unpaused assigned partition has something at its position, or the
    /// deadline. Waits on one topic's arrivals at a time: with partitions of several topics
    /// it wakes at least every millisecond to look at the others.
    fn wait(&self, deadline: Option<Instant>) {
        let signal = self.membership.as_ref().map(|m| &*m.signal);
        // A member waiting in poll still polls, as far as its group is concerned: it wakes
        // at least every half `max_poll_interval` to say so (Kafka's heartbeat thread).
        let deadline = match (signal, deadline) {
            (None, d) => d,
            (Some(_), d) => {
                let slice = time::deadline_after(self.config.member.max_poll_interval / 2);
                match (d, slice) {
                    (Some(d), Some(s)) => Some(d.min(s)),
                    (None, s) => s,
                    (d, None) => d,
                }
            }
        };
        let called = || signal.is_some_and(|s| s.raised());
        if let (Some(s), true) = (signal, self.assigned.iter().all(|a| a.paused)) {
            // A member with nothing to read waits for its group.
            s.events.wait_until(deadline, || called().then_some(()));
            return;
        }
        let Some(first) = self.assigned.iter().find(|a| !a.paused) else {
            // Everything paused: wait out the deadline on the first topic's arrivals.
            if let Some(a) = self.assigned.first() {
                a.topic
                    .arrivals
                    .wait_until(deadline, || a.topic.is_deleted().then_some(()));
            }
            return;
        };
        let several = self
            .assigned
            .iter()
            .any(|a| !Arc::ptr_eq(&a.topic.arrivals, &first.topic.arrivals));
        let deadline = if several {
            let slice = time::deadline_after(Duration::from_millis(1));
            match (deadline, slice) {
                (Some(d), Some(s)) => Some(d.min(s)),
                (None, s) => s,
                (d, None) => d,
            }
        } else {
            deadline
        };
        let ready = || {
            called()
                || self.assigned.iter().any(|a| {
                    !a.paused
                        && (a.topic.is_deleted()
                            || a.position.map_or(true, |p| a.partition.readable(p)))
                })
        };
        // Poll densely for a record in flight (`WAIT_POLICY`), then yield a few times
        // before parking: a record usually arrives within a yield or two, and a parked
        // consumer costs every producer a wake-up system call.
        if self.trickle {
            crate::sync::wait::Waiter::new(WAIT_POLICY).dense_poll_adaptive(&self.polls, ready);
        }
        #[cfg(not(logbus_loom))]
        for _ in 0..YIELDS {
            if ready() || deadline.is_some_and(time::expired) {
                return;
            }
            thread::yield_now();
        }
        // The heavy side of the handshake with the producers' light notification.
        first
            .topic
            .arrivals
            .wait_until_heavy(deadline, || true, || ready().then_some(()));
    }

    fn find(&self, tp: &TopicPartition) -> Result<usize> {
        self.assigned
            .iter()
            .position(|a| a.tp == *tp)
            .ok_or_else(|| Error::NotAssigned {
                topic: tp.topic.clone(),
                partition: tp.partition,
            })
    }

    pub(crate) fn group(&self, operation: &'static str) -> Result<Arc<str>> {
        self.group.clone().ok_or(Error::NoGroupId { operation })
    }

    /// Commits the current position of every assigned partition that has one, as the
    /// group's committed offsets.
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`]; [`Error::UnknownTopic`] when an assigned topic was deleted.
    pub fn commit_sync(&mut self) -> Result<()> {
        // Borrowed, not cloned: no reference count to touch on every commit.
        let Some(group) = &self.group else {
            return Err(Error::NoGroupId {
                operation: "commit_sync",
            });
        };
        match &self.membership {
            Some(m) => m.commit(&self.broker, || self.commit_positions(group)),
            None => self.commit_positions(group),
        }
    }

    /// Commits the given offsets (each the next record to read) for the group, on any
    /// existing partitions (assigned or not). All are checked before any is stored.
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`], [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`],
    /// [`Error::OffsetOutOfRange`] (an offset past the log end).
    pub fn commit_offsets(&mut self, offsets: &[(TopicPartition, u64)]) -> Result<()> {
        let group = self.group("commit_offsets")?;
        match &self.membership {
            Some(m) => m.commit(&self.broker, || self.commit_offsets_inner(&group, offsets)),
            None => self.commit_offsets_inner(&group, offsets),
        }
    }

    fn commit_offsets_inner(
        &self,
        group: &Arc<str>,
        offsets: &[(TopicPartition, u64)],
    ) -> Result<()> {
        for (tp, offset) in offsets {
            self.broker.check_partition(tp)?;
            let o = self.broker.offsets(tp)?;
            if *offset > o.log_end {
                return Err(Error::OffsetOutOfRange {
                    topic: Some(tp.topic.clone()),
                    partition: Some(tp.partition),
                    requested: *offset,
                    start: o.log_start,
                    end: o.log_end,
                });
            }
        }
        for (tp, offset) in offsets {
            self.broker.commit(group, tp, *offset)?;
        }
        Ok(())
    }

    /// The group's committed offset for `tp`, if it committed one.
    ///
    /// # Errors
    ///
    /// [`Error::NoGroupId`], [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`].
    pub fn committed(&self, tp: &TopicPartition) -> Result<Option<u64>> {
        let group = self.group("committed")?;
        self.broker.committed(&group, tp)
    }

    /// The offset of the next record this consumer will read from `tp`.
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`]; [`Error::NoOffsetForPartition`] (no position yet under
    /// `OffsetReset::None`).
    pub fn position(&self, tp: &TopicPartition) -> Result<u64> {
        let a = &self.assigned[self.find(tp)?];
        a.position.ok_or_else(|| Error::NoOffsetForPartition {
            topic: tp.topic.clone(),
            partition: tp.partition,
        })
    }

    /// Moves the position in `tp` to `offset`; the next poll reads from there. An offset
    /// out of range is handled at that poll (see the module docs).
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`].
    pub fn seek(&mut self, tp: &TopicPartition, offset: u64) -> Result<()> {
        let i = self.find(tp)?;
        self.assigned[i].position = Some(offset);
        Ok(())
    }

    /// Moves the positions in `partitions` (every assigned partition if empty) to their
    /// log start.
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing moves).
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_each(partitions, |p, now| p.log_start(now))
    }

    /// Moves the positions in `partitions` (every assigned partition if empty) to their
    /// end: the log end, or with [`IsolationLevel::ReadCommitted`] the last stable offset,
    /// so that the records of a transaction still open are read once it commits.
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing moves).
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        let isolation = self.config.isolation_level;
        self.seek_each(partitions, move |p, _| readable_end(p, isolation))
    }

    fn seek_each(
        &mut self,
        partitions: &[TopicPartition],
        to: impl Fn(&Partition<K, V>, i64) -> u64,
    ) -> Result<()> {
        let indices: Vec<usize> = if partitions.is_empty() {
            (0..self.assigned.len()).collect()
        } else {
            partitions
                .iter()
                .map(|tp| self.find(tp))
                .collect::<Result<_>>()?
        };
        let now = self.broker.now_ms();
        for i in indices {
            let a = &mut self.assigned[i];
            a.position = Some(to(&a.partition, now));
        }
        Ok(())
    }

    /// For each `(partition, timestamp)`, the first offset whose record's timestamp is at
    /// or after `timestamp`, with that timestamp (`None` when no record is). Partitions
    /// need not be assigned.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTimestamp`] (outside `0..=`[`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP)), [`Error::UnknownTopic`],
    /// [`Error::PartitionOutOfRange`].
    pub fn offsets_for_times(
        &self,
        query: &[(TopicPartition, i64)],
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndTimestamp>>> {
        let mut out = HashMap::with_capacity(query.len());
        for (tp, ts) in query {
            if !crate::partition::valid_timestamp(*ts) {
                return Err(Error::InvalidTimestamp {
                    timestamp: *ts,
                    offset: None,
                });
            }
            let found = self.broker.offset_for_time(tp, *ts)?;
            out.insert(
                tp.clone(),
                found.map(|(offset, timestamp)| OffsetAndTimestamp { offset, timestamp }),
            );
        }
        Ok(out)
    }

    /// The log start offset of each partition. Partitions need not be assigned.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`].
    pub fn beginning_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, u64>> {
        self.offsets_of(partitions, |o| o.log_start)
    }

    /// The end offset of each partition, as far as this consumer can read: the high watermark,
    /// or with [`IsolationLevel::ReadCommitted`] the last stable offset (the first offset of
    /// a transaction still open), as Kafka's `endOffsets`. Partitions need not be assigned.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`], [`Error::PartitionOutOfRange`].
    pub fn end_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, u64>> {
        match self.config.isolation_level {
            IsolationLevel::ReadCommitted => self.offsets_of(partitions, |o| o.last_stable_offset),
            IsolationLevel::ReadUncommitted => self.offsets_of(partitions, |o| o.high_watermark),
        }
    }

    /// One of each partition's offsets, chosen by `pick`.
    fn offsets_of(
        &self,
        partitions: &[TopicPartition],
        pick: impl Fn(&crate::partition::Offsets) -> u64,
    ) -> Result<HashMap<TopicPartition, u64>> {
        partitions
            .iter()
            .map(|tp| Ok((tp.clone(), pick(&self.broker.offsets(tp)?))))
            .collect()
    }

    /// Stops reading `partitions` until [`resume`](Self::resume) (positions stay).
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing changes).
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.set_paused(partitions, true)
    }

    /// Reads `partitions` again.
    ///
    /// # Errors
    ///
    /// [`Error::NotAssigned`] (nothing changes).
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.set_paused(partitions, false)
    }

    /// The paused partitions.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.assigned
            .iter()
            .filter(|a| a.paused)
            .map(|a| a.tp.clone())
            .collect()
    }

    fn set_paused(&mut self, partitions: &[TopicPartition], paused: bool) -> Result<()> {
        let indices = partitions
            .iter()
            .map(|tp| self.find(tp))
            .collect::<Result<Vec<_>>>()?;
        for i in indices {
            self.assigned[i].paused = paused;
        }
        Ok(())
    }

    /// What this consumer counted: records consumed, records skipped per partition.
    pub fn metrics(&self) -> &ConsumerMetrics {
        &self.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Closes the consumer (as dropping it does): its group no longer counts it as open.
    /// A subscribed consumer first commits its positions if `enable_auto_commit` is on,
    /// runs its listener's `on_partitions_revoked`, and leaves the group (which
    /// rebalances; a static member keeps its place until `max_poll_interval`). Positions
    /// not committed are lost; committed offsets stay, and so do the group's gates, until
    /// the group has had no open consumer for the broker's
    /// [`empty_group_timeout`](crate::broker::BrokerBuilder::empty_group_timeout).
    pub fn close(self) {
        drop(self);
    }
}

impl<K, V> Drop for Consumer<K, V> {
    fn drop(&mut self) {
        crate::consumer::membership::on_close(self);
        if let Some(g) = &self.group {
            self.broker.leave_group(g);
        }
    }
}

/// Reads from one assigned partition, passing each record to `sink`, handling an
/// out-of-range position per `reset`.
/// The end of what a consumer at `isolation` may read: the log end (the high watermark when
/// replicated), or for read-committed the last stable offset below it. A position reset to
/// the end starts there, so a transaction open at that moment is read once it commits.
fn readable_end<K, V>(partition: &Partition<K, V>, isolation: IsolationLevel) -> u64 {
    let end = partition.log_end();
    match isolation {
        IsolationLevel::ReadCommitted => partition.stable_below(end),
        IsolationLevel::ReadUncommitted => end,
    }
}

fn read_one<K: Clone, V: Clone>(
    a: &mut Assigned<K, V>,
    sink: &mut impl FnMut(&'static str, u32, u64, Handed<'_, K, V>),
    max: usize,
    now: i64,
    reset: OffsetReset,
    metrics: &mut ConsumerMetrics,
) -> Result<usize> {
    if a.topic.is_deleted() {
        return Err(Error::UnknownTopic {
            topic: a.tp.topic.clone(),
        });
    }
    let Some(mut position) = a.position else {
        return Err(Error::NoOffsetForPartition {
            topic: a.tp.topic.clone(),
            partition: a.tp.partition,
        });
    };
    // At most two reads after a reset per call: a reset target is in range when chosen. A
    // read that found only a gap moves past it and reads again (it always moves forward).
    let mut resets = 0;
    loop {
        let name = a.name;
        let partition = a.tp.partition;
        let outcome = a.partition.read_as(
            a.isolation,
            position,
            max,
            now,
            a.group.as_deref(),
            |offset, e| sink(name, partition, offset, e),
        );
        match outcome {
            ReadOutcome::Read(n) => {
                a.position = Some(position + n as u64);
                return Ok(n);
            }
            // To the last offset read + 1 (or past a gap), never by the count.
            ReadOutcome::Sparse { n, next } => {
                debug_assert!(next > position);
                a.position = Some(next);
                if n > 0 {
                    return Ok(n);
                }
                position = next;
            }
            // An offline log gets no more records: say why rather than wait.
            ReadOutcome::Empty => return a.partition.offline_error().map_or(Ok(0), Err),
            ReadOutcome::Failed => return Err(a.partition.disk_error()),
            ReadOutcome::OutOfRange { start, end } => {
                let target = match reset {
                    OffsetReset::None => {
                        return Err(Error::OffsetOutOfRange {
                            topic: Some(a.tp.topic.clone()),
                            partition: Some(a.tp.partition),
                            requested: position,
                            start,
                            end,
                        })
                    }
                    OffsetReset::Earliest => start,
                    OffsetReset::Latest => readable_end(&a.partition, a.isolation).min(end),
                };
                if target > position {
                    *metrics.skipped.entry(a.tp.clone()).or_insert(0) += target - position;
                }
                position = target;
                a.position = Some(target);
                resets += 1;
                if resets == 2 {
                    return Ok(0);
                }
            }
        }
    }
}
