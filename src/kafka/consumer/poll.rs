//! Reading: `poll` and its borrowed form `poll_with`, and when a poll has caught up.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
use rdkafka::topic_partition_list::Offset;
use rdkafka::types::RDKafkaRespErr;

use super::{queue, Assigned, GroupContext, KafkaConsumer};
use crate::codec::Codec;
use crate::consumer::{ConsumerRecord, ConsumerRecords, IsolationLevel, RecordRef};
use crate::error::{Error, Result};
use crate::kafka::error::{from_kafka, At};
use crate::TopicPartition;

impl<K, V> KafkaConsumer<K, V>
where
    K: Codec + Clone + Send + Sync + 'static,
    V: Codec + Clone + Send + Sync + 'static,
{
    /// Up to `max_poll_records` records from the assigned, unpaused partitions, waiting up
    /// to `timeout` for the first. Rebalances (and the listener) run here.
    ///
    /// Unlike in process, records can be on the cluster and not yet fetched. `poll` returns
    /// when it has read everything its partitions held at their last fetch (the high
    /// watermarks the fetch responses carry; the cluster is asked for a partition not
    /// fetched yet), or `max_poll_records`, or — with nothing read — when the timeout passed
    /// and nothing is left to fetch; it keeps waiting past the timeout (up to
    /// [`KafkaConfig::poll_catch_up`]) while records it has not fetched are known to be
    /// there. So, as in process, a poll returns what is there, and an empty poll means
    /// "caught up". (A subscribed consumer still joining its group waits only the timeout.)
    ///
    /// # Errors
    ///
    /// [`Error::PollInListener`], [`Error::NoOffsetForPartition`] (no position under
    /// `OffsetReset::None`), [`Error::Decode`], [`Error::Kafka`]. Records read before the
    /// problem are returned first; the error comes with the next poll.
    ///
    /// [`KafkaConfig::poll_catch_up`]: crate::kafka::KafkaConfig::poll_catch_up
    pub fn poll(&mut self, timeout: Duration) -> Result<ConsumerRecords<K, V>> {
        let mut out = Vec::new();
        let max = self.config.poll_records();
        self.read(max, timeout, |r| out.push(r))?;
        Ok(ConsumerRecords::from_vec(out))
    }

    /// The borrowed form of [`poll`](Self::poll): lends each record to `f` instead of
    /// returning it (as [`Consumer::poll_with`](crate::Consumer::poll_with)): at most
    /// `max` records, in the order `poll` returns them; returns how many. Each record is
    /// decoded from librdkafka's buffer, lent, and dropped before the next is read, so a
    /// hot loop keeps no batch of records alive. The position moves past a record before
    /// `f` sees it: if `f` panics, that record is not lent again (seek back to re-read
    /// it).
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll); an error met after some records were lent comes with the
    /// next poll.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use logbus::consumer::{ConsumerConfig, OffsetReset};
    /// use logbus::kafka::{KafkaBroker, KafkaConfig};
    /// use logbus::TopicPartition;
    ///
    /// let broker = KafkaBroker::connect(KafkaConfig::new("localhost:9092"))?;
    /// let mut consumer = broker.consumer::<String, u64>(
    ///     ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.assign(&[TopicPartition::new("orders", 0)])?;
    /// let mut sum = 0;
    /// let n = consumer.poll_with(1024, Duration::from_secs(1), |r| sum += *r.value)?;
    /// println!("{n} records, sum {sum}");
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn poll_with(
        &mut self,
        max: usize,
        timeout: Duration,
        mut f: impl FnMut(RecordRef<'_, K, V>),
    ) -> Result<usize> {
        self.read(max, timeout, |r| {
            f(RecordRef {
                topic: r.topic,
                partition: r.partition,
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key.as_ref(),
                value: &r.value,
                headers: &r.headers,
            });
        })
    }

    /// The poll loop: hands each record read (at most `max`) to `sink`; returns how many.
    ///
    /// Messages come in batches from the consumer's own queue (see [`queue`](super::queue));
    /// the consumer queue, polled once per batch and whenever the own queue is empty, serves
    /// librdkafka's events (rebalances, errors) and the messages of any partition it could
    /// not forward. A partition's messages are only ever in one of the two (forwarding is
    /// set before its fetching starts, and librdkafka never undoes it), so order holds.
    fn read(
        &mut self,
        max: usize,
        timeout: Duration,
        mut sink: impl FnMut(ConsumerRecord<K, V>),
    ) -> Result<usize> {
        if self.in_listener {
            return Err(Error::PollInListener);
        }
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.rebalance()?;
        if max == 0 || (self.assigned.is_empty() && self.subscription.is_empty()) {
            return Ok(0);
        }
        if let Some(a) = self.assigned.iter().find(|a| a.position.is_none()) {
            return Err(Error::NoOffsetForPartition {
                topic: a.tp.topic.clone(),
                partition: a.tp.partition,
            });
        }
        let mut n = 0usize;
        let deadline = Instant::now().checked_add(timeout);
        let mut catch_up: Option<Instant> = None;
        // The assigned partition and interned topic name of the last record.
        let mut last: Option<(usize, &'static str)> = None;
        // Whether the last round took something: the next one then does not wait.
        let mut flowing = false;
        let mut buf = [std::ptr::null_mut(); queue::BATCH];
        // Whether an error cut a batch short, dropping messages after it.
        let mut cut = false;
        loop {
            // No clock read per record (a clock read costs about as much as a record here).
            let wait = match (catch_up, deadline) {
                _ if flowing => Duration::ZERO,
                // Waiting for records the cluster has and this consumer has not fetched.
                (Some(c), _) => c
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
                _ if n > 0 => Duration::ZERO,
                (None, Some(d)) => d.saturating_duration_since(Instant::now()),
                (None, None) => Duration::from_secs(1),
            };
            let arrived = next_arrival(
                &self.client,
                &mut self.fetched,
                &self.assigned,
                &mut buf[..(max - n).min(queue::BATCH)],
                wait,
            );
            flowing = !matches!(arrived, Arrival::Nothing);
            let outcome = match arrived {
                Arrival::Batch(taken) => {
                    let mut taken = queue::Taken::new(&mut buf[..taken]);
                    let mut outcome = Ok(());
                    while let Some(m) = taken.next_message() {
                        outcome = accept(&mut self.assigned, m.raw(), &mut last, &mut n, &mut sink);
                        if outcome.is_err() {
                            // The rest of the batch is dropped with `taken`: the
                            // client fetches it again from the positions.
                            cut |= taken.left() > 0;
                            break;
                        }
                    }
                    outcome
                }
                Arrival::One(m) => {
                    // SAFETY: the message is alive while `m` (which borrows the client)
                    // is; `accept` keeps nothing of it past the call.
                    let raw = unsafe { &*m.ptr() };
                    accept(&mut self.assigned, raw, &mut last, &mut n, &mut sink)
                }
                Arrival::Error(e) => Err(from_kafka(e, At::op("poll"))),
                Arrival::Nothing => {
                    // A revocation commits what is stored: what this poll handed out first.
                    if self.store_positions {
                        self.store_positions();
                    }
                    let checked = self.rebalance().and_then(|()| {
                        let now = Instant::now();
                        if n > 0 || deadline.is_some_and(|d| now >= d) {
                            self.fetched().map(|done| Some((done, now)))
                        } else {
                            Ok(None)
                        }
                    });
                    match checked {
                        Err(e) => Err(e),
                        Ok(Some((true, _))) => break,
                        Ok(Some((false, now))) => {
                            let limit =
                                *catch_up.get_or_insert(now + self.broker.inner.config.catch_up());
                            if now >= limit {
                                break;
                            }
                            Ok(())
                        }
                        Ok(None) => Ok(()),
                    }
                }
            };
            match outcome {
                // Records read are returned first (their positions moved past them
                // already: an error now would drop them); the error comes with the next
                // poll (or now, if none was read).
                Err(e) => {
                    self.pending = Some(e);
                    break;
                }
                Ok(()) if n >= max => break,
                Ok(()) => {}
            }
        }
        // Before the seek below: librdkafka wants offsets stored before a seek, not after.
        if self.store_positions {
            self.store_positions();
        }
        if cut {
            let all: Vec<usize> = (0..self.assigned.len()).collect();
            if let Err(e) = self.reposition(&all) {
                self.pending.get_or_insert(e);
            }
        }
        self.metrics.add_consumed(n as u64);
        if n == 0 {
            if let Some(e) = self.pending.take() {
                return Err(e);
            }
        }
        Ok(n)
    }

    /// Gives the client's offset store (what auto-commit commits) the positions that moved
    /// past records handed out since the last call.
    fn store_positions(&mut self) {
        let moved = self
            .assigned
            .iter()
            .filter(|a| a.unstored && a.position.is_some());
        let list = Self::client_list(moved);
        for a in &mut self.assigned {
            a.unstored = false;
        }
        if list.count() == 0 {
            return;
        }
        match self.client.store_offsets(&list) {
            Ok(())
            // Partitions the client has let go of already (a rebalance under way): it
            // commits nothing for them.
            | Err(KafkaError::StoreOffset(Code::State | Code::UnknownPartition)) => {}
            Err(e) => {
                self.pending
                    .get_or_insert(from_kafka(e, At::op("poll (storing offsets)")));
            }
        }
    }

    /// Whether this consumer read everything the cluster holds in its assigned, unpaused
    /// partitions: by the high watermarks the last fetch responses carried (kept by
    /// librdkafka, no request), or, for a partition not fetched yet and for a read-committed
    /// consumer (whose end is the last stable offset, which librdkafka does not keep), by
    /// asking the cluster.
    fn fetched(&mut self) -> Result<bool> {
        if self.config.isolation_level == IsolationLevel::ReadCommitted {
            return self.caught_up();
        }
        let mut unknown = false;
        let mut moved = false;
        for i in 0..self.assigned.len() {
            if self.assigned[i].paused {
                continue;
            }
            match self.cached_high(&self.assigned[i].tp) {
                Some(high) if !self.reached(i, high, &mut moved) => return Ok(false),
                Some(_) => {}
                None => unknown = true,
            }
        }
        if unknown {
            self.caught_up()
        } else {
            Ok(true)
        }
    }

    /// Whether assigned partition `i`'s position is at `end` or past it, once moved past
    /// the records the client skipped (`moved`: whether that was done already).
    fn reached(&mut self, i: usize, end: u64, moved: &mut bool) -> bool {
        let at = |a: &Assigned| a.position.is_none_or(|p| p >= end);
        if at(&self.assigned[i]) {
            return true;
        }
        if !*moved {
            *moved = true;
            self.move_past_skipped();
        }
        at(&self.assigned[i])
    }

    /// Moves the positions past the records the client read and did not hand out:
    /// transaction markers (control records, never returned) and, read committed, the
    /// records of aborted transactions. The client's own position of a partition (the
    /// offset after the last message it served, control records included) is past them;
    /// it is past this consumer's only then, since every message the client serves for an
    /// unpaused assigned partition is handed out, and a batch cut short by an error, a
    /// seek, a resume or an assignment resets it. As in process, a position skips the
    /// offsets no consumer reads.
    fn move_past_skipped(&mut self) {
        let Ok(list) = self.client.position() else {
            return;
        };
        for e in list.elements() {
            let Offset::Offset(o) = e.offset() else {
                continue;
            };
            let found = self.assigned.iter_mut().find(|a| {
                !a.paused && a.tp.partition as i32 == e.partition() && a.tp.topic == e.topic()
            });
            if let Some(a) = found {
                if o >= 0 && a.position.is_some_and(|p| (o as u64) > p) {
                    a.position = Some(o as u64);
                    a.unstored = true;
                }
            }
        }
    }

    /// The high watermark of `tp` in the last fetch response, if one came.
    fn cached_high(&self, tp: &TopicPartition) -> Option<u64> {
        let topic = std::ffi::CString::new(tp.topic.as_str()).ok()?;
        let (mut low, mut high) = (-1i64, -1i64);
        // SAFETY: the handle is this consumer's client, alive for the whole call; `topic` is
        // a NUL-terminated string that outlives it; `low` and `high` are valid for writes.
        // librdkafka reads its cached offsets under its own partition lock (thread-safe).
        let err = unsafe {
            rdkafka::bindings::rd_kafka_get_watermark_offsets(
                self.client.client().native_ptr(),
                topic.as_ptr(),
                tp.partition as i32,
                &mut low,
                &mut high,
            )
        };
        (err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high as u64)
    }

    /// Whether every assigned, unpaused partition's position is at its end, asking the
    /// cluster (`readable_watermarks`).
    fn caught_up(&mut self) -> Result<bool> {
        let mut moved = false;
        for i in 0..self.assigned.len() {
            if self.assigned[i].paused {
                continue;
            }
            let tp = &self.assigned[i].tp;
            let (_, end) = self.readable_watermarks(tp)?;
            if !self.reached(i, end, &mut moved) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// What came next: a message or error from the consumer queue (serving its events on the
/// way), else a batch from the consumer's own queue (taken into `buf`), waiting up to
/// `wait` for either. The consumer queue is looked at once per batch, so that a rebalance
/// never waits for the own queue to run dry.
fn next_arrival<'a>(
    client: &'a BaseConsumer<GroupContext>,
    fetched: &mut Option<queue::Fetched>,
    assigned: &[Assigned],
    buf: &mut [*mut rdkafka::bindings::rd_kafka_message_t],
    wait: Duration,
) -> Arrival<'a> {
    let f = match fetched.as_mut() {
        Some(f) if !assigned.is_empty() => f,
        // Nothing forwarded to wait on: the consumer queue alone (what the own queue may
        // still hold belongs to partitions no longer assigned).
        _ => {
            return match client.poll(wait) {
                Some(Ok(m)) => Arrival::One(m),
                Some(Err(e)) => Arrival::Error(e),
                None => Arrival::Nothing,
            }
        }
    };
    // The consumer queue first, until it is empty: a message there (of a partition not
    // forwarded when its fetching started) is older than any of the same partition on the
    // own queue. Each poll serves at least one event; a bounded number per round.
    for _ in 0..64 {
        match client.poll(Duration::ZERO) {
            Some(Ok(m)) => return Arrival::One(m),
            Some(Err(e)) => return Arrival::Error(e),
            None if f.consumer_queue_empty() => break,
            None => {}
        }
    }
    let taken = f.take(buf, 0);
    if taken > 0 {
        return Arrival::Batch(taken);
    }
    if wait.is_zero() {
        return Arrival::Nothing;
    }
    // Both queues empty: wait on the own queue, in slices, so that an event on the
    // consumer queue waits at most a slice (and so that a partition whose forwarding
    // librdkafka cleared since is forwarded again).
    f.forward(assigned.iter().map(|a| &a.tp));
    let slice = wait.min(WAIT_SLICE).as_millis().max(1) as i32;
    if f.take(&mut buf[..1], slice) > 0 {
        Arrival::Batch(1)
    } else {
        Arrival::Nothing
    }
}

/// One fetched message: handed to `sink` as a record when its partition is assigned and
/// not paused (moving the position past it), skipped otherwise.
fn accept<K: Codec, V: Codec>(
    assigned: &mut [Assigned],
    m: &rdkafka::bindings::rd_kafka_message_t,
    last: &mut Option<(usize, &'static str)>,
    n: &mut usize,
    sink: &mut impl FnMut(ConsumerRecord<K, V>),
) -> Result<()> {
    let topic = queue::topic_of(m);
    if m.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        let code = Code::from(m.err);
        let mut at = At::op("poll");
        if let Some(t) = topic {
            at = at.topic(t);
        }
        if m.partition >= 0 {
            at = at.partition(m.partition as u32);
        }
        return Err(from_kafka(KafkaError::MessageConsumption(code), at));
    }
    let Some(topic) = topic else { return Ok(()) };
    let partition = m.partition as u32;
    // Records come in runs of one partition: try the last one first.
    let i = match *last {
        Some((i, name))
            if assigned
                .get(i)
                .is_some_and(|a| a.tp.partition == partition && name == topic) =>
        {
            Some(i)
        }
        _ => assigned
            .iter()
            .position(|a| a.tp.partition == partition && a.tp.topic == topic),
    };
    let Some(i) = i.filter(|&i| !assigned[i].paused) else {
        // Fetched before a pause or a revocation: read again from the position on
        // resume.
        return Ok(());
    };
    let name = match *last {
        Some((_, name)) if name == topic => name,
        _ => crate::sync::intern(topic),
    };
    *last = Some((i, name));
    match queue::decode::<K, V>(m, name) {
        Ok(record) => {
            assigned[i].position = Some(record.offset + 1);
            assigned[i].unstored = true;
            *n += 1;
            sink(record);
            Ok(())
        }
        Err(e) => {
            // Skip the record that cannot be decoded, as the position says.
            assigned[i].position = Some(m.offset.max(0) as u64 + 1);
            assigned[i].unstored = true;
            Err(e)
        }
    }
}

/// What [`next_arrival`] found.
enum Arrival<'a> {
    /// This many messages, taken into the caller's buffer.
    Batch(usize),
    /// A message from the consumer queue.
    One(rdkafka::message::BorrowedMessage<'a>),
    Error(KafkaError),
    Nothing,
}

/// The longest the poll waits on its own queue before looking at the consumer queue's
/// events again.
const WAIT_SLICE: Duration = Duration::from_millis(20);
