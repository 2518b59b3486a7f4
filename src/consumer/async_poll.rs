//! Asynchronous polling: [`Consumer::poll_async`] and [`Consumer::stream`], for a consumer
//! driven by a task rather than a thread.
//!
//! A task that finds nothing to read first reschedules itself a few times
//! (`TASK_YIELDS` looks in a row, counted per consumer), as a blocking poll yields its
//! thread before parking; then it registers its waker in the wait sets a blocking
//! [`poll`](Consumer::poll) would park on: the arrivals of every topic it reads (producers
//! and HW advances notify them) and, for a group member, its group signal's (the
//! coordinator raises it for a rebalance, an eviction, a deleted group). The handshake is
//! the wait set's (`WaitSet::register_waker`: count, then fence, then the caller checks
//! again), completed by the heavy asymmetric fence once per park, as the blocking poll's
//! `wait_until_heavy`, since producers notify arrivals with the light one. A member's task
//! parked so tells its coordinator, which counts it as polling (Kafka's heartbeat while a
//! consumer waits in `poll`) until it raises the member's signal, which wakes the task;
//! the member's duties (rejoin, revoke, assign, listener callbacks, auto-commit) then run
//! in the woken task's next poll, as in a blocking poll.
//!
//! A position moves only in the poll that returns the records read (the poll that reads
//! them is the one that completes): a future dropped at any point, woken or not, takes no
//! record with it. The registrations are kept in the consumer (`TaskWaits`), so a task
//! that parks again and again allocates nothing once they have grown.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use super::{Consumer, ConsumerRecord, ConsumerRecords};
use crate::broker::groups::coordinator::Signal;
use crate::sync::asym_fence;
// Std's Arc (also under loom): wait sets are shared with the topics (see `sync::StdArc`).
use crate::sync::StdArc as Arc;
use crate::sync::{WaitSet, WakerSlot};
use crate::Result;

/// Times a poll reads again after its check said something is readable, before it lets
/// other tasks run (a readable check that no read confirms, such as a record being
/// written, must not spin the executor's thread).
const ROUNDS: u32 = 4;

/// Times a consumer's task that found nothing reschedules itself (wakes itself and returns
/// `Pending`: the executor runs its other tasks, then polls it again) before it registers
/// and parks, as a blocking poll yields its thread before parking: a record usually comes
/// within a few, and a parked task costs its producer a wake-up and itself the heavy fence.
/// None under loom, which models no time.
#[cfg(not(logbus_loom))]
pub(crate) const TASK_YIELDS: u32 = 64;

/// A consumer's registrations while its task waits (module docs).
#[derive(Debug, Default)]
pub(crate) struct TaskWaits {
    /// One per distinct arrivals wait set of the assigned topics (kept when cancelled, so
    /// that parking again reuses them).
    arrivals: Vec<(Arc<WaitSet>, WakerSlot)>,
    /// The group signal's wait set (a member).
    events: Option<(Arc<Signal>, WakerSlot)>,
    /// Whether the coordinator counts the member's task as parked in a poll.
    parked: bool,
    /// Looks that found nothing since records last came (its futures' and streams'
    /// alike): the task reschedules itself for the first `TASK_YIELDS`, then parks.
    #[cfg_attr(logbus_loom, allow(dead_code))]
    yields: u32,
}

impl<K, V> Consumer<K, V> {
    /// Cancels every registration of the task, and tells the coordinator the member's task
    /// is no longer parked.
    pub(crate) fn stop_waiting(&mut self) {
        let waits = &mut self.task_waits;
        for (set, slot) in &mut waits.arrivals {
            set.cancel_waker(slot);
        }
        if let Some((signal, slot)) = &mut waits.events {
            signal.events.cancel_waker(slot);
        }
        if waits.parked {
            waits.parked = false;
            if let Some(m) = &self.membership {
                m.set_parked(&self.broker, false);
            }
        }
    }
}

impl<K, V> Consumer<K, V>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Waits for records without blocking the thread: completes with what is available
    /// (at most `max_poll_records`, at least one), read as [`poll`](Self::poll) reads
    /// them, once there is something. Like an rdkafka `StreamConsumer`'s `recv`, it has no
    /// timeout of its own: put it under your runtime's (`tokio::time::timeout`), which is
    /// safe (see below). With nothing assigned and no subscription it completes at once,
    /// empty, as `poll` does.
    ///
    /// A group member's membership goes on while its task waits: a rebalance wakes the
    /// task, and the woken poll rejoins, revokes and takes its assignment (calling the
    /// rebalance listener) and auto-commits, as a blocking `poll` does. A member parked
    /// here counts as polling for its `max_poll_interval` until its group needs it; from
    /// then on the task must be polled within it (a task that is woken but not run is
    /// evicted, as a thread that does not call `poll` is).
    ///
    /// It has no timeout of its own: where nothing can come any more (the broker closed,
    /// a subscribed topic deleted) it stays pending, as a blocking `poll` returns empty
    /// at each of its timeouts. Await it under the runtime's timeout where that can happen.
    ///
    /// # Errors
    ///
    /// Those of [`poll`](Self::poll).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a position moves only in the poll that completes the future with the
    /// records it read, so dropping the future (in a `select!`, under a timeout, after it
    /// was woken but before it ran again) loses no record; the next poll reads them.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::broker::{Broker, TopicConfig, TopicPartition};
    /// use logbus::consumer::{ConsumerConfig, OffsetReset};
    /// use logbus::producer::Record;
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("ticks", TopicConfig::new(1))?;
    /// let producer = broker.producer::<(), u64>();
    /// let mut consumer = broker.consumer::<(), u64>(
    ///     ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.assign(&[TopicPartition::new("ticks", 0)])?;
    /// futures::executor::block_on(async {
    ///     producer.send_async(Record::new("ticks", 7)).await?;
    ///     let records = consumer.poll_async().await?;
    ///     assert_eq!(records.iter().map(|r| r.value).collect::<Vec<_>>(), [7]);
    ///     Ok::<(), logbus::Error>(())
    /// })?;
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn poll_async(&mut self) -> PollAsync<'_, K, V> {
        PollAsync { consumer: self }
    }

    /// The records of the assigned partitions as a [`Stream`], one at a time, read in
    /// batches of up to `max_poll_records` as [`poll_async`](Self::poll_async) reads them
    /// (the batch is kept in the stream's buffer, reused). Items are `Err` where `poll`
    /// would fail; the stream goes on after one. It ends only when nothing is assigned and
    /// there is no subscription.
    ///
    /// It borrows the consumer: [`RecordStream::consumer`] lends it back (to commit, seek,
    /// pause) after putting the records read but not yet yielded back.
    ///
    /// # Cancel safety
    ///
    /// Dropping a `next()` future loses nothing (a record leaves the stream only in the
    /// poll that yields it). Dropping the stream, or calling
    /// [`consumer`](RecordStream::consumer), moves each partition's position back to its
    /// first record read but not yet yielded: the consumer's next read returns them again,
    /// and a commit never covers a record the stream has not yielded.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::StreamExt;
    /// use logbus::broker::{Broker, TopicConfig, TopicPartition};
    /// use logbus::consumer::{ConsumerConfig, OffsetReset};
    /// use logbus::producer::Record;
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("ticks", TopicConfig::new(1))?;
    /// let producer = broker.producer::<(), u64>();
    /// for v in 0..10 {
    ///     producer.send(Record::new("ticks", v))?;
    /// }
    /// let mut consumer = broker.consumer::<(), u64>(
    ///     ConsumerConfig::new().group_id("tally").auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.assign(&[TopicPartition::new("ticks", 0)])?;
    /// let sum = futures::executor::block_on(async {
    ///     let mut stream = consumer.stream();
    ///     let mut sum = 0;
    ///     while let Some(record) = stream.next().await {
    ///         sum += record?.value;
    ///         if sum >= 10 {
    ///             break; // after 0 + 1 + 2 + 3 + 4
    ///         }
    ///     }
    ///     stream.consumer().commit_sync()?; // commits offset 5: what was yielded
    ///     Ok::<u64, logbus::Error>(sum)
    /// })?;
    /// assert_eq!(sum, 10);
    /// assert_eq!(consumer.committed(&TopicPartition::new("ticks", 0))?, Some(5));
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn stream(&mut self) -> RecordStream<'_, K, V> {
        RecordStream {
            consumer: self,
            buffer: Vec::new(),
        }
    }

    /// One asynchronous poll: group duties, a read into `out` (at most `max`), else the
    /// task's registration and a last check. `Ready(Ok(0))` only when nothing can ever
    /// come (nothing assigned, no subscription).
    fn poll_fetch(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Vec<ConsumerRecord<K, V>>,
        headers: &mut bool,
        max: usize,
    ) -> Poll<Result<usize>> {
        for _ in 0..ROUNDS {
            if max == 0 || (self.assigned.is_empty() && self.membership.is_none()) {
                self.stop_waiting();
                return Poll::Ready(Ok(0));
            }
            if self.membership.is_some() {
                if let Err(e) = self.group_poll() {
                    self.stop_waiting();
                    return Poll::Ready(Err(e));
                }
            }
            if !self.assigned.is_empty() {
                match self.fetch(out, headers, max) {
                    Ok(0) => {}
                    done => {
                        self.stop_waiting();
                        self.task_waits.yields = 0;
                        return Poll::Ready(done);
                    }
                }
            }
            #[cfg(not(logbus_loom))]
            if self.task_waits.yields < TASK_YIELDS {
                self.task_waits.yields += 1;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.register_task(cx);
            if !self.task_ready() {
                if !self.task_waits.parked {
                    if let Some(m) = &self.membership {
                        m.set_parked(&self.broker, true);
                        self.task_waits.parked = true;
                    }
                }
                return Poll::Pending;
            }
        }
        // Said readable, read nothing, several times: let other tasks run first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Whether the task should read again: what a parked `poll` wakes for.
    fn task_ready(&self) -> bool {
        let called = self.membership.as_ref().is_some_and(|m| m.signal.raised());
        called
            || self.assigned.iter().any(|a| {
                !a.paused
                    && (a.topic.is_deleted()
                        || a.position.map_or(true, |p| a.partition.readable(p)))
            })
    }

    /// Registers the task's waker in the arrivals of every assigned topic and in the
    /// member's signal, then the heavy fence (producers notify arrivals with the light
    /// one); the caller checks after. Registrations of topics no longer assigned, or of a
    /// signal replaced (the member rejoined), are cancelled.
    fn register_task(&mut self, cx: &mut Context<'_>) {
        let assigned = &self.assigned;
        let waits = &mut self.task_waits;
        waits.arrivals.retain_mut(|(set, slot)| {
            let keep = assigned.iter().any(|a| Arc::ptr_eq(&a.topic.arrivals, set));
            if !keep {
                set.cancel_waker(slot);
            }
            keep
        });
        for a in assigned {
            if !waits
                .arrivals
                .iter()
                .any(|(set, _)| Arc::ptr_eq(set, &a.topic.arrivals))
            {
                waits
                    .arrivals
                    .push((Arc::clone(&a.topic.arrivals), WakerSlot::new()));
            }
        }
        for (set, slot) in &mut waits.arrivals {
            set.register_waker(slot, cx.waker());
        }
        match &self.membership {
            Some(m) => {
                let same = waits
                    .events
                    .as_ref()
                    .is_some_and(|(s, _)| Arc::ptr_eq(s, &m.signal));
                if !same {
                    if let Some((old, mut slot)) = waits.events.take() {
                        old.events.cancel_waker(&mut slot);
                    }
                    waits.events = Some((Arc::clone(&m.signal), WakerSlot::new()));
                }
                if let Some((signal, slot)) = &mut waits.events {
                    signal.events.register_waker(slot, cx.waker());
                }
            }
            None => {
                if let Some((old, mut slot)) = waits.events.take() {
                    old.events.cancel_waker(&mut slot);
                }
            }
        }
        // The heavy side of the handshake with the producers' light notification.
        asym_fence::heavy();
    }
}

/// The future of [`Consumer::poll_async`]: the records read, once there are some.
/// Cancel safe (see there).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::{Broker, ConsumerConfig, Record, TopicConfig, TopicPartition};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), logbus::Error> {
/// let broker = Broker::in_memory();
/// broker.create_topic::<(), u64>("ticks", TopicConfig::new(1))?;
/// let mut consumer = broker.consumer::<(), u64>(ConsumerConfig::new())?;
/// consumer.assign(&[TopicPartition::new("ticks", 0)])?;
/// // Nothing comes: the timeout drops the future, which takes nothing with it.
/// let waited = tokio::time::timeout(Duration::from_millis(5), consumer.poll_async()).await;
/// assert!(waited.is_err());
/// broker.producer::<(), u64>().send(Record::new("ticks", 3))?;
/// assert_eq!(consumer.poll_async().await?.len(), 1);
/// # Ok(())
/// # }
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct PollAsync<'a, K, V> {
    consumer: &'a mut Consumer<K, V>,
}

impl<K, V> std::fmt::Debug for PollAsync<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollAsync").finish_non_exhaustive()
    }
}

impl<K, V> Future for PollAsync<'_, K, V>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    type Output = Result<ConsumerRecords<K, V>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let consumer = &mut *self.get_mut().consumer;
        let max = consumer.config.max_poll_records;
        // The buffer the last poll's records handed back (as `poll` takes it): no
        // allocation per poll once warmed, and back to the spare while pending.
        let mut records = std::mem::take(&mut *consumer.spare.lock());
        let mut headers = false;
        match consumer.poll_fetch(cx, &mut records, &mut headers, max) {
            Poll::Ready(Ok(_)) => Poll::Ready(Ok(ConsumerRecords {
                records,
                spare: Some(Arc::clone(&consumer.spare)),
                headers,
            })),
            Poll::Ready(Err(e)) => {
                // As `poll`: an error comes alone, with no records read before it.
                records.clear();
                *consumer.spare.lock() = records;
                Poll::Ready(Err(e))
            }
            Poll::Pending => {
                *consumer.spare.lock() = records;
                Poll::Pending
            }
        }
    }
}

impl<K, V> Drop for PollAsync<'_, K, V> {
    fn drop(&mut self) {
        self.consumer.stop_waiting();
    }
}

/// The [`Stream`] of [`Consumer::stream`]: the assigned partitions' records, one at a time.
/// Dropping it puts back the records read but not yet yielded (see there).
///
/// # Examples
///
/// ```
/// use futures::StreamExt;
/// use logbus::{Broker, ConsumerConfig, OffsetReset, Record, TopicConfig, TopicPartition};
///
/// let broker = Broker::in_memory();
/// broker.create_topic::<(), u64>("ticks", TopicConfig::new(1))?;
/// let producer = broker.producer::<(), u64>();
/// for v in 0..4 {
///     producer.send(Record::new("ticks", v))?;
/// }
/// let mut consumer = broker.consumer::<(), u64>(
///     ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
/// )?;
/// consumer.assign(&[TopicPartition::new("ticks", 0)])?;
/// let firsts: Vec<u64> = futures::executor::block_on(
///     consumer.stream().take(2).map(|r| r.map(|r| r.value)).collect::<Vec<_>>(),
/// )
/// .into_iter()
/// .collect::<Result<_, _>>()?;
/// assert_eq!(firsts, [0, 1]);
/// // The two read with them and not yielded were put back.
/// assert_eq!(consumer.position(&TopicPartition::new("ticks", 0))?, 2);
/// # Ok::<(), logbus::Error>(())
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct RecordStream<'a, K, V> {
    consumer: &'a mut Consumer<K, V>,
    /// Records read and not yet yielded, the next one last.
    buffer: Vec<ConsumerRecord<K, V>>,
}

impl<K, V> std::fmt::Debug for RecordStream<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStream")
            .field("buffered", &self.buffer.len())
            .finish_non_exhaustive()
    }
}

impl<K, V> RecordStream<'_, K, V> {
    /// The consumer, to commit, seek or pause between records: the records read but not
    /// yet yielded are put back first (each partition's position moves back to its first
    /// one), so [`commit_sync`](Consumer::commit_sync) commits what the stream yielded.
    pub fn consumer(&mut self) -> &mut Consumer<K, V> {
        self.put_back();
        self.consumer
    }

    /// Moves each partition's position back to its first record not yet yielded.
    fn put_back(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let n = self.buffer.len() as u64;
        for r in self.buffer.drain(..) {
            let at = self
                .consumer
                .assigned
                .iter_mut()
                .find(|a| a.tp.partition == r.partition && *a.tp.topic == *r.topic);
            if let Some(a) = at {
                if a.position.map_or(true, |p| r.offset < p) {
                    a.position = Some(r.offset);
                }
            }
        }
        // Not returned after all.
        self.consumer.metrics.records = self.consumer.metrics.records.saturating_sub(n);
    }
}

// Never pinned in place: the buffer is a vector (its records live on the heap).
impl<K, V> Unpin for RecordStream<'_, K, V> {}

impl<K, V> Stream for RecordStream<'_, K, V>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    type Item = Result<ConsumerRecord<K, V>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(r) = this.buffer.pop() {
            return Poll::Ready(Some(Ok(r)));
        }
        let max = this.consumer.config.max_poll_records;
        // The stream's records are its own (no spare to hand back): their headers are
        // dropped with them.
        let mut headers = false;
        match this
            .consumer
            .poll_fetch(cx, &mut this.buffer, &mut headers, max)
        {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(_)) => {
                this.buffer.reverse();
                Poll::Ready(this.buffer.pop().map(Ok))
            }
        }
    }
}

impl<K, V> Drop for RecordStream<'_, K, V> {
    fn drop(&mut self) {
        self.consumer.stop_waiting();
        self.put_back();
    }
}
