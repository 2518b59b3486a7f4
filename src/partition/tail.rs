//! The ring's one producer with what every append to a one-replica partition updates under
//! the same lock: the idempotent producers' states and, on a persisted partition, the
//! producer stamps the disk writer puts in its batch headers ([`Tail`]).
//!
//! **Why under the ring producer's lock.** A one-replica partition's appends already
//! serialize there (module `appender`: one lock per publish), so the sequence a send gets
//! and the order of the records in the log are decided in one critical section: the
//! sequence of a fresh idempotent send is its producer's next one *by construction*, and no
//! check can race an append (the lock-free alternative would need its own loom model; this
//! one reuses the lock appends take anyway, and `loom_models::
//! idempotent_sequences_follow_the_log` checks it against a concurrent append). A send with
//! a sequence given by its caller (a retry across a broker restart,
//! [`Appender::append_stamped`](super::Appender)) is checked there too.
//!
//! **Cost.** A send of the producer that appended last (the common case) compares a few
//! words and moves the end of the hot run; the states' map is touched only when another
//! producer appends ([`Tail::hot`]). Plain sends compare one word. Nothing allocates in the
//! steady state.
//!
//! **Expiry.** Idle producer ids go (Kafka's `producer.id.expiration.ms`,
//! [`ProducerExpiry`]) when a producer id the states do not know first appends, and before
//! a send with a sequence its caller gives is checked, at most once a second of the
//! broker's clock each: the states grow only by a new id, and the check is where a
//! forgotten producer's sequence is accepted anew; a send going on from the hot run never
//! reads the clock. States restored from disk are expired at once (as Kafka skips the
//! expired producers of a snapshot it loads). A transaction's records carry no sequences
//! here (the transaction table fences them), so a producer of an open transaction is in
//! these states only as restored from disk, its open transaction with it
//! ([`Tail::txn_ended`] clears that): it is never expired while that transaction is open.
//!
//! **Stamps for the writer.** `stamps` holds `(first offset, stamp)` runs (the stamp's
//! `seq` counting offsets: the record at offset `o` has sequence `stamp.at(o)`), pushed
//! *before* the publish of the first record they cover, so a writer that sees a record
//! published (Acquire on the ring's cursor) and then takes the runs' lock finds its run.

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};

use super::producer_state::{ProducerExpiry, ProducerStates, Stamp};
use super::{Entry, ProducerIdentity};
use crate::ring::SingleProducer as RingProducer;
use crate::sync::Mutex;
use crate::sync::StdArc as Arc;

/// Producer stamps by offset (module docs): `(first offset, stamp)`, first offsets
/// increasing; a run covers up to the next one's first offset.
pub(crate) type StampRuns = Arc<Mutex<VecDeque<(u64, Stamp)>>>;

/// The hot run: the last idempotent producer's records, contiguous in sequence and offset,
/// not yet in `producers`.
#[derive(Debug, Clone, Copy)]
struct Hot {
    /// Offset-based (module docs).
    stamp: Stamp,
    first: u64,
    end: u64,
    max_timestamp: i64,
}

/// The ring's producer and the producer state its appends update (module docs).
pub(crate) struct Tail<K, V> {
    ring: RingProducer<Entry<K, V>>,
    producers: ProducerStates,
    hot: Option<Hot>,
    /// Persisted partitions: the runs the writer reads.
    stamps: Option<StampRuns>,
    /// The stamp of the last run pushed to `stamps`.
    pushed: Stamp,
    /// How idle producer ids expire (`None`: never, as in a partition of no broker).
    expiry: Option<ProducerExpiry>,
}

impl<K, V> Deref for Tail<K, V> {
    type Target = RingProducer<Entry<K, V>>;
    fn deref(&self) -> &Self::Target {
        &self.ring
    }
}

impl<K, V> DerefMut for Tail<K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.ring
    }
}

impl<K, V> Tail<K, V> {
    pub(crate) fn new(ring: RingProducer<Entry<K, V>>) -> Self {
        Self {
            ring,
            producers: ProducerStates::new(),
            hot: None,
            stamps: None,
            pushed: Stamp::NONE,
            expiry: None,
        }
    }

    /// Expires idle producer ids by `expiry` from now on (module docs).
    pub(crate) fn expire_producers(&mut self, expiry: ProducerExpiry) {
        self.expiry = Some(expiry);
    }

    /// How idle producer ids expire, if they do.
    pub(crate) fn producer_expiry(&self) -> Option<&ProducerExpiry> {
        self.expiry.as_ref()
    }

    /// Keeps stamp runs for a writer from offset `at` on (a persisted partition).
    pub(crate) fn keep_stamps(&mut self, at: u64) -> StampRuns {
        let runs = Arc::new(Mutex::new(VecDeque::from([(at, Stamp::NONE)])));
        self.stamps = Some(Arc::clone(&runs));
        runs
    }

    /// Puts the states recovered from disk.
    pub(crate) fn restore(&mut self, producers: ProducerStates) {
        self.producers = producers;
        self.hot = None;
        if let Some(expiry) = &mut self.expiry {
            expiry.expire_now(&mut self.producers);
        }
    }

    /// A marker of producer `id`'s transaction was appended: its transaction, if the
    /// states hold it open (restored from disk), is over (module docs, "Expiry").
    pub(crate) fn txn_ended(&mut self, id: i64) {
        self.producers.marker(id, -1);
    }

    /// Expires idle producer ids if a second of the clock passed since the last time
    /// (after a fold: the hot run's producer is in the states).
    #[cold]
    fn expire_due(&mut self) {
        debug_assert!(self.hot.is_none(), "the hot run is folded first");
        if let Some(expiry) = &mut self.expiry {
            expiry.expire_due(&mut self.producers);
        }
    }

    /// Every producer's state (the hot run folded in first).
    #[allow(
        dead_code,
        reason = "for the transactions (issue 30, second half) and tools"
    )]
    pub(crate) fn producers(&mut self) -> &mut ProducerStates {
        self.fold();
        &mut self.producers
    }

    fn fold(&mut self) {
        if let Some(h) = self.hot.take() {
            self.producers
                .applied(&h.stamp, h.first, h.first, h.end - h.first, h.max_timestamp);
        }
    }

    /// Before a publish by `producer` (`None`: not idempotent) at the ring's next
    /// sequence: the offset-based stamp its records get (their sequences the producer's
    /// next ones), pushed for the writer if it starts a new run.
    #[inline]
    pub(crate) fn stamp_next(&mut self, producer: Option<ProducerIdentity>) -> Stamp {
        let at = self.ring.next_sequence();
        let stamp = match producer {
            None => Stamp::NONE,
            Some(id) => match self.hot {
                Some(h) if h.stamp.id == id.id && h.stamp.epoch == id.epoch && h.end == at => {
                    h.stamp
                }
                Some(h) if h.stamp.id == id.id && h.stamp.epoch == id.epoch => {
                    Stamp::based(id, h.stamp.at(h.end), at, false)
                }
                _ => {
                    self.fold();
                    let seq = match self.producers.next_seq(id) {
                        Some(seq) => seq,
                        None => {
                            // A new id: the states grow, so the idle ones go first.
                            self.expire_due();
                            0
                        }
                    };
                    Stamp::based(id, seq, at, false)
                }
            },
        };
        self.push_stamp(at, stamp);
        stamp
    }

    /// Before a publish of `count` records by `id` whose first sequence its caller gives
    /// (`seq`): the leader's check (`producer_state`), and the offset-based stamp to
    /// publish them with if they are to be appended (pushed for the writer).
    pub(crate) fn check_next(
        &mut self,
        id: ProducerIdentity,
        seq: i32,
        count: u64,
    ) -> (super::producer_state::Check, Stamp) {
        self.fold();
        // A producer idle past the expiration is forgotten before its sequence is judged.
        self.expire_due();
        let check = self
            .producers
            .check(&Stamp::based(id, seq, 0, false), 0, count);
        let at = self.ring.next_sequence();
        let stamp = Stamp::based(id, seq, at, false);
        if check == super::producer_state::Check::Append {
            self.push_stamp(at, stamp);
        }
        (check, stamp)
    }

    /// Pushes `stamp` from `at` on for the writer, if it changes.
    #[inline(always)]
    fn push_stamp(&mut self, at: u64, stamp: Stamp) {
        if stamp != self.pushed {
            self.push_slow(at, stamp);
        }
    }

    #[cold]
    fn push_slow(&mut self, at: u64, stamp: Stamp) {
        self.pushed = stamp;
        if let Some(runs) = &self.stamps {
            let mut runs = runs.lock();
            match runs.back_mut() {
                // A run pushed for a publish that published nothing: replaced.
                Some(last) if last.0 == at => last.1 = stamp,
                _ => runs.push_back((at, stamp)),
            }
        }
    }

    /// After a publish stamped `stamp` (from [`stamp_next`](Self::stamp_next)) put `n`
    /// records at `at..at + n`, the last stamped `timestamp`.
    #[inline]
    pub(crate) fn published(&mut self, stamp: Stamp, at: u64, n: u64, timestamp: i64) {
        if stamp.is_none() || n == 0 {
            return;
        }
        match &mut self.hot {
            Some(h) if h.stamp == stamp && h.end == at => {
                h.end += n;
                h.max_timestamp = h.max_timestamp.max(timestamp);
            }
            _ => {
                self.fold();
                self.hot = Some(Hot {
                    stamp,
                    first: at,
                    end: at + n,
                    max_timestamp: timestamp,
                });
            }
        }
    }
}

/// The writer's side of [`StampRuns`]: the stamps of the records from an offset on.
#[derive(Debug, Default)]
pub(crate) struct StampCursor {
    /// A copy of the runs from the batch's first offset: `(first offset, stamp)`.
    runs: Vec<(u64, Stamp)>,
    /// Whether `runs` holds every run pushed when it was copied (else the last copied
    /// one's end is not known: the batch stops at its start).
    complete: bool,
    k: usize,
}

/// Runs copied per batch at most.
const CURSOR_RUNS: usize = 256;

impl StampCursor {
    /// Copies the runs covering `pos` on, dropping those wholly below it.
    pub(crate) fn load(&mut self, runs: &StampRuns, pos: u64) {
        let mut runs = runs.lock();
        while runs.len() > 1 && runs[1].0 <= pos {
            runs.pop_front();
        }
        self.runs.clear();
        self.runs.extend(runs.iter().take(CURSOR_RUNS).copied());
        self.complete = runs.len() <= CURSOR_RUNS;
        self.k = 0;
    }

    /// The stamp of the record at `offset` (its own sequence as `seq`), or `None` when
    /// the copy does not reach it (the batch ends before it). Offsets asked increase.
    #[inline]
    pub(crate) fn at(&mut self, offset: u64) -> Option<Stamp> {
        while self.k + 1 < self.runs.len() && self.runs[self.k + 1].0 <= offset {
            self.k += 1;
        }
        if self.k + 1 == self.runs.len() && !self.complete {
            return None;
        }
        let (_, stamp) = self.runs.get(self.k)?;
        Some(stamp.moved(offset, 0))
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use std::time::Duration;

    use super::super::producer_state::{ProducerExpiry, ProducerHandle};
    use super::super::*;
    use crate::clock::{Clock, ManualClock};

    /// A one-replica partition expiring producers idle 10 s on `clock`.
    fn expiring(clock: &Arc<ManualClock>) -> Partition<(), u64> {
        let config = PartitionConfig {
            capacity: 256,
            gated: false,
            retention_ms: None,
        };
        let clock = Arc::clone(clock) as Arc<dyn Clock>;
        Partition::new(config, Arc::new(WaitSet::new()))
            .unwrap()
            .with_producer_expiry(ProducerExpiry::new(clock, Duration::from_secs(10)))
    }

    fn send(p: &Partition<(), u64>, clock: &ManualClock, id: i64) {
        let identity = ProducerIdentity { id, epoch: 0 };
        let policy = SendPolicy {
            producer: Some(Arc::new(ProducerHandle::new(identity, Ok))),
            ..SendPolicy::default()
        };
        let entry = Entry::new(clock.now_ms(), None, id as u64, Vec::new());
        p.appender()
            .with_policy(policy)
            .append(entry, AppendWait::No)
            .map_err(|(_, e)| e)
            .unwrap();
    }

    #[test]
    fn a_new_producer_id_expires_the_idle_ones_and_the_hot_one_reads_no_clock() {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let p = expiring(&clock);
        for id in 0..100 {
            send(&p, &clock, id);
        }
        assert_eq!(p.with_producers(|s| s.len()), 100);
        clock.advance(Duration::from_secs(11));
        // The producer that appended last goes on: nothing expires.
        send(&p, &clock, 99);
        // A producer the partition knows, not the last: nothing expires either.
        send(&p, &clock, 5);
        assert_eq!(p.with_producers(|s| s.len()), 100);
        // A new id: the idle ones go first (not 5 and 99, which just sent).
        send(&p, &clock, 100);
        let mut left: Vec<i64> = p.with_producers(|s| s.iter().map(|(id, _)| id).collect());
        left.sort_unstable();
        assert_eq!(left, [5, 99, 100]);
        // Within a second of the clock, another new id reads the clock but expires nothing.
        clock.advance(Duration::from_millis(500));
        send(&p, &clock, 101);
        assert_eq!(p.with_producers(|s| s.len()), 4);
        // 10.1 s after the last expiry: 5, 99 and 100 are idle past it, 101 is not.
        clock.advance(Duration::from_millis(9_600));
        send(&p, &clock, 102);
        let mut left: Vec<i64> = p.with_producers(|s| s.iter().map(|(id, _)| id).collect());
        left.sort_unstable();
        assert_eq!(left, [101, 102]);
    }
}
