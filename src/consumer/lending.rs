//! [`Consumer::poll_with`], the borrowed form of `poll`: records lent to a closure
//! ([`RecordRef`]) instead of cloned into [`ConsumerRecord`]s.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use super::{read_one, Consumer, ConsumerRecord};
use crate::partition::{Entry, Handed, Parts, ReadOutcome};
use crate::Result;

/// One record as [`Consumer::poll_with`] lends it: the fields of a
/// [`ConsumerRecord`](super::ConsumerRecord), borrowed.
pub struct RecordRef<'a, K, V> {
    /// The topic.
    pub topic: &'static str,
    /// The partition.
    pub partition: u32,
    /// The record's offset in the partition.
    pub offset: u64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// The key, if any.
    pub key: Option<&'a K>,
    /// The value.
    pub value: &'a V,
    /// The headers, in order.
    pub headers: &'a [(String, Option<Bytes>)],
}

impl<K: Clone, V: Clone> RecordRef<'_, K, V> {
    /// The record, cloned (what [`Consumer::poll`] returns for it).
    pub fn to_record(&self) -> ConsumerRecord<K, V> {
        ConsumerRecord {
            topic: self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.cloned(),
            value: self.value.clone(),
            headers: self.headers.to_vec(),
        }
    }
}

impl<K, V> fmt::Debug for RecordRef<'_, K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordRef")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("timestamp", &self.timestamp)
            .finish_non_exhaustive()
    }
}

/// What [`Consumer::poll_with`] copies out of partitions that cannot lend in place, kept
/// for reuse.
pub(crate) struct Buffers<K, V> {
    entries: Vec<Entry<K, V>>,
    /// The offsets of `entries`, for a partition whose log may have gaps (on disk,
    /// replicated); empty for one in memory, whose runs are dense.
    offsets: Vec<u64>,
    /// A lending read of the last poll caught up with its producer after a short run: the
    /// next poll paces itself first, as the ring's readers do ([`ring::pace_reader`]). A
    /// consumer that looks again at once keeps pulling a producer's cursor and the lines it
    /// is writing into its own cache, and reads runs of a few dozen records, paying its
    /// per-poll costs on each (`BENCHMARKS.md`, "cons10").
    ///
    /// [`ring::pace_reader`]: crate::ring::pace_reader
    caught_up: bool,
}

impl<K, V> Default for Buffers<K, V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            offsets: Vec::new(),
            caught_up: false,
        }
    }
}

/// The record of `entry` at `offset`, borrowed.
#[inline(always)]
fn record_ref<'a, K, V>(
    topic: &'static str,
    partition: u32,
    offset: u64,
    (timestamp, key, value, headers): Parts<'a, K, V>,
) -> RecordRef<'a, K, V> {
    RecordRef {
        topic,
        partition,
        offset,
        timestamp,
        key,
        value,
        headers,
    }
}

/// Moves a partition's position past the records lent so far when dropped: also when the
/// caller's function panics, so that the record it panicked on is not lent again.
struct Lent<'a> {
    position: &'a mut Option<u64>,
    from: u64,
    /// One past the last record lent (set when the read ends, or by [`PanicAt`]).
    next: u64,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if self.next > self.from {
            *self.position = Some(self.next);
        }
    }
}

/// Dropped only when the caller's function unwinds on the record at `offset` (forgotten
/// otherwise): the partition's position goes past that record.
struct PanicAt<'a> {
    next: &'a mut u64,
    offset: u64,
}

impl Drop for PanicAt<'_> {
    fn drop(&mut self) {
        *self.next = self.offset + 1;
    }
}

impl<K, V> Consumer<K, V>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// The borrowed form of [`poll`](Self::poll): lends each record to `f` instead of
    /// returning a [`ConsumerRecord`] (clone one with [`RecordRef::to_record`]): at most
    /// `max` records, in the order `poll` returns them; returns how many. `f` runs with no lock held (it may
    /// use the broker freely) and nothing is allocated per record.
    ///
    /// Where the consumer's group holds the records (a group member on a
    /// [`Block`](crate::broker::Overflow::Block) topic in memory, reading at or after its
    /// group's committed offset) `f` borrows each record in place, from the partition's
    /// memory: no clone, no copy. The records lent stay put until `f` is done with them: a
    /// commit made meanwhile (by any member) moves the group's hold when the read ends.
    /// Otherwise the partition's records are copied out first (a value clone each, into a
    /// buffer the consumer keeps), then lent. If `f` panics, its partition's position is
    /// past the record it panicked on; records already copied out after it are not lent
    /// again, and partitions not yet read in this poll are read by the next one.
    ///
    /// A poll that follows one whose in-place read caught up with the producer after a
    /// short run (more than one record, fewer than asked, and fewer than a quarter of the
    /// partition's capacity) first spins about half a microsecond without touching shared
    /// memory, so that it finds a longer run and leaves the producer's cache lines alone
    /// meanwhile (as the ring's readers do). A run of one record is a record in flight (a
    /// producer sending one at a time, waiting for it to be seen): the next poll looks at
    /// once, since a pause would only delay the next record.
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll); `f` is not called then.
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
    /// for v in 0..3 {
    ///     producer.send(Record::new("ticks", v))?;
    /// }
    /// let mut consumer = broker.consumer::<(), u64>(
    ///     ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
    /// )?;
    /// consumer.assign(&[TopicPartition::new("ticks", 0)])?;
    /// let mut sum = 0;
    /// let n = consumer.poll_with(100, Duration::from_secs(1), |r| sum += *r.value)?;
    /// assert_eq!((n, sum), (3, 3));
    /// # Ok::<(), logbus::Error>(())
    /// ```
    #[inline]
    pub fn poll_with(
        &mut self,
        max: usize,
        timeout: Duration,
        mut f: impl FnMut(RecordRef<'_, K, V>),
    ) -> Result<usize> {
        let mut buffers = std::mem::take(&mut self.borrowed);
        if std::mem::take(&mut buffers.caught_up) {
            crate::ring::pace_reader();
        }
        let read = self.poll_loop(max, timeout, |c, max| {
            c.fetch_lending(max, &mut f, &mut buffers)
        });
        // What `take` left in its place allocated nothing: forgotten, not dropped (a call).
        std::mem::forget(std::mem::replace(&mut self.borrowed, buffers));
        read
    }

    /// The fetch of [`poll_with`](Self::poll_with): each partition's run lent in place
    /// where its group's gate holds it, else copied out and lent from the copies.
    #[inline(always)]
    fn fetch_lending(
        &mut self,
        max: usize,
        f: &mut impl FnMut(RecordRef<'_, K, V>),
        buffers: &mut Buffers<K, V>,
    ) -> Result<usize> {
        self.walk(max, |a, left, now, reset, metrics| {
            if let (Some(group), Some(from), false) = (&a.group, a.position, a.topic.is_deleted()) {
                let (name, partition) = (a.name, a.tp.partition);
                let mut lent = Lent {
                    position: &mut a.position,
                    from,
                    next: from,
                };
                let outcome = a.partition.lend(from, left, now, group, |offset, parts| {
                    // Nothing is stored per record: the guard lives in registers and
                    // writes the position only if `f` unwinds.
                    let unwinding = PanicAt {
                        next: &mut lent.next,
                        offset,
                    };
                    f(record_ref(name, partition, offset, parts));
                    std::mem::forget(unwinding);
                });
                // A lending read is of the ring, whose runs are dense (never `Sparse`).
                if let Some(ReadOutcome::Read(n)) = outcome {
                    lent.next = from + n as u64;
                    // Short of what was asked: the read took everything published. A
                    // run of one is a record in flight, not a stream: nothing to pace.
                    buffers.caught_up |=
                        n > 1 && n < left && (n as u64) < a.partition.capacity() / 4;
                }
                drop(lent);
                match outcome {
                    Some(ReadOutcome::Read(n)) => return Ok(n),
                    Some(_) => return Ok(0),
                    None => {}
                }
            }
            // Copied out, then lent from the copies.
            let entries = &mut buffers.entries;
            entries.clear();
            let (name, partition) = (a.name, a.tp.partition);
            let mut headers = false;
            let n = if a.partition.may_have_gaps() || a.partition.has_transactions() {
                // Each offset kept: a log on disk may have gaps between them.
                let offsets = &mut buffers.offsets;
                offsets.clear();
                let n = read_one(
                    a,
                    &mut |_, _, o, e: Handed<'_, K, V>| {
                        offsets.push(o);
                        entries.push(e.into_entry());
                    },
                    left,
                    now,
                    reset,
                    metrics,
                )?;
                for (&o, e) in offsets.iter().zip(entries.iter()) {
                    headers |= e.has_headers();
                    f(record_ref(name, partition, o, e.parts()));
                }
                n
            } else {
                let n = read_one(
                    a,
                    &mut |_, _, _, e: Handed<'_, K, V>| entries.push(e.into_entry()),
                    left,
                    now,
                    reset,
                    metrics,
                )?;
                // The ring's runs are dense: the run ends where the position now is.
                let from = a.position.map_or(0, |p| p - n as u64);
                for (k, e) in entries.iter().enumerate() {
                    headers |= e.has_headers();
                    f(record_ref(name, partition, from + k as u64, e.parts()));
                }
                n
            };
            if std::mem::needs_drop::<K>() || std::mem::needs_drop::<V>() || headers {
                entries.clear();
            } else {
                // SAFETY: shrinking only; every entry's drop is a no-op (neither `K` nor `V`
                // has drop glue, and no entry holds headers), so forgetting them leaks
                // nothing and skips a pass over the buffer.
                unsafe { entries.set_len(0) };
            }
            Ok(n)
        })
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use std::time::Duration;

    use crate::broker::{Broker, Overflow, TopicConfig, TopicPartition};
    use crate::consumer::{ConsumerConfig, OffsetReset};
    use crate::producer::Payload;

    /// A lending read that takes everything published after a short run marks the
    /// consumer caught up (the next poll paces itself and clears the mark); a read cut
    /// short by `max`, or a long one, does not.
    #[test]
    fn a_short_lending_read_that_catches_up_paces_the_next() {
        let b = Broker::in_memory();
        let config = TopicConfig::new(1)
            .records_in_memory(64)
            .overflow(Overflow::Block);
        b.create_topic::<(), u64>("t", config).unwrap();
        let mut c = b
            .consumer::<(), u64>(
                ConsumerConfig::new()
                    .group_id("g")
                    .auto_offset_reset(OffsetReset::Earliest),
            )
            .unwrap();
        c.assign(&[TopicPartition::new("t", 0)]).unwrap();
        let p = b.producer::<(), u64>();
        let poll = |c: &mut crate::Consumer<(), u64>, max| {
            c.poll_with(max, Duration::ZERO, |_| ()).unwrap()
        };
        p.partition("t", 0)
            .unwrap()
            .send_iter((0..3).map(Payload::new))
            .unwrap();
        assert_eq!(poll(&mut c, 10), 3);
        assert!(c.borrowed.caught_up, "3 of 10 asked for: caught up");
        assert_eq!(poll(&mut c, 10), 0);
        assert!(!c.borrowed.caught_up, "the paced poll took the mark");
        p.partition("t", 0)
            .unwrap()
            .send_iter((0..20).map(Payload::new))
            .unwrap();
        assert_eq!(poll(&mut c, 10), 10);
        assert!(!c.borrowed.caught_up, "cut short by max");
        c.commit_sync().unwrap();
        assert_eq!(poll(&mut c, 100), 10);
        assert!(c.borrowed.caught_up, "10 is under a quarter of 64");
        p.partition("t", 0)
            .unwrap()
            .send_iter((0..40).map(Payload::new))
            .unwrap();
        c.commit_sync().unwrap();
        assert_eq!(poll(&mut c, 100), 40);
        assert!(
            !c.borrowed.caught_up,
            "40 is a long run (a quarter of 64 or more)"
        );
    }

    /// A run of one record is a record in flight: the next poll does not pace (it would
    /// only delay the next record), and a poll that must wait after it polls densely.
    #[test]
    fn a_run_of_one_record_does_not_pace_the_next_poll() {
        let b = Broker::in_memory();
        let config = TopicConfig::new(1)
            .records_in_memory(64)
            .overflow(Overflow::Block);
        b.create_topic::<(), u64>("t", config).unwrap();
        let mut c = b
            .consumer::<(), u64>(
                ConsumerConfig::new()
                    .group_id("g")
                    .auto_offset_reset(OffsetReset::Earliest),
            )
            .unwrap();
        c.assign(&[TopicPartition::new("t", 0)]).unwrap();
        let p = b.producer::<(), u64>();
        let to = p.partition("t", 0).unwrap();
        to.send_iter((0..1).map(Payload::new)).unwrap();
        assert_eq!(c.poll_with(16, Duration::ZERO, |_| ()).unwrap(), 1);
        assert!(!c.borrowed.caught_up, "one record: not a stream");
        assert!(c.trickle, "one record: the next wait polls densely");
        to.send_iter((0..2).map(Payload::new)).unwrap();
        assert_eq!(c.poll_with(16, Duration::ZERO, |_| ()).unwrap(), 2);
        assert!(c.borrowed.caught_up, "two of 16: a short run of a stream");
        assert!(!c.trickle, "two records: the next wait yields at once");
    }
}
