//! One partition's side of transactions (KIP-98): which transactions are open on it (so
//! its last stable offset), which were aborted (the ranges read-committed readers skip),
//! and the epoch fence that keeps a late record or marker of one transaction out of the
//! next (KIP-890).
//!
//! Every transactional append and every marker is placed under the partition's
//! [`TxnTable`] lock, which is also where a reader takes its snapshot (LSO and the aborted
//! ranges it may meet). So the three questions a read-committed fetch asks (where the LSO
//! is, whether an offset below it belongs to an aborted transaction, whether the record is a
//! marker) are answered by one consistent state:
//!
//! - a record of producer `p` at epoch `e` is appended only while no marker of `p` at an
//!   epoch `>= e` was written (else [`TxnRefusal::Fenced`]): a zombie's late send cannot
//!   land after its transaction's end and be taken for a committed record;
//! - the first record of a transaction on the partition opens it at its own offset; the
//!   LSO is the smallest open first offset, else the high watermark;
//! - a marker of `p` at epoch `e` closes `p`'s open transaction only if that transaction
//!   is at epoch `e`; a marker of an older epoch (delayed, duplicated) is refused and
//!   writes nothing: it can never commit or abort a later transaction of the same producer
//!   (the torn-transaction anomaly Jepsen found in Kafka's protocol);
//! - an ABORT adds `(p, first, marker offset)` to the aborted list (Kafka's `AbortedTxn`,
//!   with the LSO when it was written): a reader skips the records of `p` in that range.
//!
//! A record carries its transaction (producer id and epoch) in its entry, except the
//! records of a run sent with `send_batch` to a partition held in its ring alone
//! ([`Appender::append_txn_run`]): those are plain entries, as a plain batch's are (no
//! per-record box), and the table keeps instead the offsets they were appended at, as
//! spans. A span of a committed transaction is forgotten with its COMMIT; an ABORT moves
//! the spans of its transaction to the aborted spans, which a read-committed reader skips
//! like the aborted ranges. On such a partition the aborted transactions and spans wholly
//! below the ring's lap are forgotten at each marker ([`TxnTable::forget_below`]): no reader
//! finds those records any more. The fence is the same either way: it is checked at the
//! append, under this lock, never from the entry.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Which records a consumer reads (Kafka's `isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum IsolationLevel {
    /// Every record below the high watermark, open and aborted transactions' records too
    /// (Kafka's default). Control records (COMMIT/ABORT markers) are never returned.
    #[default]
    ReadUncommitted,
    /// Records below the last stable offset only, without the records of aborted
    /// transactions and without control records.
    ReadCommitted,
}

/// An aborted transaction on one partition: Kafka's `AbortedTxn` (the `.txnindex` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The transaction's producer id.
    pub producer_id: i64,
    /// Its first offset on the partition.
    pub first_offset: u64,
    /// The offset of its ABORT marker.
    pub last_offset: u64,
    /// The partition's last stable offset when the marker was written.
    pub last_stable_offset: u64,
}

/// A transaction open on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTxn {
    /// The producer id.
    pub producer_id: i64,
    /// The transaction's producer epoch.
    pub epoch: i16,
    /// The offset of its first record on this partition.
    pub first_offset: u64,
}

/// Why a transactional append or a marker was refused by the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnRefusal {
    /// A marker of this producer at epoch `fenced_at` (or a newer transaction at that
    /// epoch) is already in the log: the record's epoch `epoch` is over.
    Fenced { epoch: i16, current: i16 },
    /// A marker for an epoch other than the open transaction's (a delayed or duplicated
    /// marker): nothing is written.
    StaleMarker { epoch: i16, open: Option<i16> },
    /// A record at epoch `epoch` while the producer's transaction at epoch `open` is still
    /// open on this partition (its marker not written yet).
    PreviousOpen { epoch: i16, open: i16 },
}

#[derive(Debug, Default)]
struct ProducerTxn {
    /// The open transaction: (epoch, first offset).
    open: Option<(i16, u64)>,
    /// The highest epoch whose marker was written here.
    closed: Option<i16>,
    /// Where that marker was appended (a replicated log may lose it to a leader change
    /// before it is acknowledged: the coordinator's retry checks it is still there).
    closed_at: u64,
    /// The offsets of the open transaction's records appended as plain entries (module
    /// docs): `[first, end)` spans in offset order, disjoint. Emptied, not dropped, when
    /// the transaction ends: the producer's next one reuses it.
    plain_spans: Vec<(u64, u64)>,
}

/// One partition's transaction state (module docs).
#[derive(Debug, Default)]
pub(crate) struct TxnTable {
    producers: HashMap<i64, ProducerTxn, foldhash::fast::RandomState>,
    /// Open transactions by first offset: the LSO is the first.
    open: BTreeSet<(u64, i64)>,
    /// Aborted transactions, in marker order (so by `last_offset`).
    aborted: Vec<AbortedTxn>,
    /// The spans of aborted transactions' plain entries, `first -> end`; disjoint, as every
    /// offset holds one record.
    unmarked_aborted: BTreeMap<u64, u64>,
}

/// What a read-committed reader needs to filter one read: the LSO and the aborted
/// transactions it may meet.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadView {
    pub(crate) stable: u64,
    pub(crate) aborted: Vec<AbortedTxn>,
    /// The aborted spans of plain entries the read may meet, by first offset.
    pub(crate) aborted_spans: Vec<(u64, u64)>,
}

impl ReadView {
    /// Whether the record of producer `producer_id` at `offset` belongs to an aborted
    /// transaction.
    pub(crate) fn is_aborted(&self, producer_id: i64, offset: u64) -> bool {
        self.aborted.iter().any(|a| {
            a.producer_id == producer_id && a.first_offset <= offset && offset < a.last_offset
        })
    }

    /// Whether the plain entry at `offset` is a record of an aborted transaction (one
    /// appended without its mark: module docs).
    #[inline]
    pub(crate) fn is_aborted_plain(&self, offset: u64) -> bool {
        if self.aborted_spans.is_empty() {
            return false;
        }
        let at = self
            .aborted_spans
            .partition_point(|&(_, end)| end <= offset);
        self.aborted_spans
            .get(at)
            .is_some_and(|&(first, _)| first <= offset)
    }
}

impl TxnTable {
    /// Whether producer `p` may append a record at epoch `epoch` (checked under the lock
    /// just before the append).
    pub(crate) fn check_append(&self, p: i64, epoch: i16) -> Result<(), TxnRefusal> {
        let Some(s) = self.producers.get(&p) else {
            return Ok(());
        };
        if let Some(closed) = s.closed {
            if epoch <= closed {
                return Err(TxnRefusal::Fenced {
                    epoch,
                    current: closed,
                });
            }
        }
        match s.open {
            Some((open, _)) if epoch < open => Err(TxnRefusal::Fenced {
                epoch,
                current: open,
            }),
            // The coordinator writes a transaction's markers before the next one begins:
            // an older transaction still open here means its marker has not landed yet.
            Some((open, _)) if epoch > open => Err(TxnRefusal::PreviousOpen { epoch, open }),
            _ => Ok(()),
        }
    }

    /// Records that producer `p`'s record at `epoch` was appended at `offset` (after
    /// [`check_append`](Self::check_append) passed, under the same lock).
    pub(crate) fn appended(&mut self, p: i64, epoch: i16, offset: u64) {
        self.opened(p, epoch, offset);
    }

    /// Producer `p`'s state, its transaction at `epoch` open from `offset` unless open
    /// already (`check_append` refused every other epoch).
    fn opened(&mut self, p: i64, epoch: i16, offset: u64) -> &mut ProducerTxn {
        let s = self.producers.entry(p).or_default();
        if s.open.is_none() {
            s.open = Some((epoch, offset));
            self.open.insert((offset, p));
        }
        s
    }

    /// Records that producer `p`'s records at `epoch` were appended as plain entries at
    /// offsets `from..end` (module docs; after [`check_append`](Self::check_append)
    /// passed, under the same lock).
    pub(crate) fn appended_plain(&mut self, p: i64, epoch: i16, from: u64, end: u64) {
        debug_assert!(from < end, "an empty span {from}..{end}");
        let spans = &mut self.opened(p, epoch, from).plain_spans;
        match spans.last_mut() {
            Some(last) if last.1 == from => last.1 = end,
            _ => spans.push((from, end)),
        }
    }

    /// Whether a marker of producer `p` at `epoch` may be written: it must close the open
    /// transaction at that same epoch, or (no record of it reached this partition) be the
    /// newest epoch seen.
    pub(crate) fn check_marker(&self, p: i64, epoch: i16) -> Result<(), TxnRefusal> {
        let (open, closed) = self
            .producers
            .get(&p)
            .map_or((None, None), |s| (s.open, s.closed));
        match open {
            Some((open, _)) if open == epoch => Ok(()),
            Some((open, _)) => Err(TxnRefusal::StaleMarker {
                epoch,
                open: Some(open),
            }),
            None if closed.is_some_and(|c| c >= epoch) => {
                Err(TxnRefusal::StaleMarker { epoch, open: None })
            }
            None => Ok(()),
        }
    }

    /// Records the marker of producer `p` at `epoch`, written at `offset` (after
    /// [`check_marker`](Self::check_marker) passed, under the same lock); `hw` is the
    /// partition's high watermark, for the aborted entry's LSO.
    pub(crate) fn marked(&mut self, p: i64, epoch: i16, commit: bool, offset: u64, hw: u64) {
        let stable_before = self.stable(hw);
        let s = self.producers.entry(p).or_default();
        if let Some((_, first)) = s.open.take() {
            self.open.remove(&(first, p));
            if commit {
                s.plain_spans.clear();
            } else {
                self.unmarked_aborted.extend(s.plain_spans.drain(..));
                self.aborted.push(AbortedTxn {
                    producer_id: p,
                    first_offset: first,
                    last_offset: offset,
                    last_stable_offset: stable_before.min(first),
                });
            }
        }
        if s.closed.is_none_or(|c| c <= epoch) {
            s.closed = Some(epoch);
            s.closed_at = offset;
        }
    }

    /// Forgets the aborted transactions whose marker, and the aborted spans whose records,
    /// lie below `floor`: on a partition held in its ring alone, the ring's start, below
    /// which no reader finds a record to filter (as Kafka's aborted-transaction index goes
    /// with its segments). Without it both would grow by every aborted transaction.
    pub(crate) fn forget_below(&mut self, floor: u64) {
        // Sorted by marker offset (`aborted`), and the spans are disjoint: both by end.
        let gone = self.aborted.partition_point(|a| a.last_offset < floor);
        self.aborted.drain(..gone);
        while let Some(span) = self.unmarked_aborted.first_entry() {
            if *span.get() > floor {
                break;
            }
            span.remove();
        }
    }

    /// Where producer `p`'s marker at `epoch` was appended, if that is its last marker.
    pub(crate) fn marker_at(&self, p: i64, epoch: i16) -> Option<u64> {
        let s = self.producers.get(&p)?;
        (s.closed == Some(epoch) && s.open.is_none()).then_some(s.closed_at)
    }

    /// The marker of producer `p` at `epoch` was appended again at `offset` (the first
    /// copy was lost to a leader change).
    pub(crate) fn marked_again(&mut self, p: i64, epoch: i16, offset: u64) {
        if let Some(s) = self.producers.get_mut(&p) {
            if s.closed == Some(epoch) {
                s.closed_at = offset;
            }
        }
    }

    /// The last stable offset given the high watermark `hw`.
    pub(crate) fn stable(&self, hw: u64) -> u64 {
        self.open.first().map_or(hw, |&(first, _)| first.min(hw))
    }

    /// A reader's view of `[from, ..)`: the LSO and the aborted transactions ending after
    /// `from`.
    pub(crate) fn view(&self, from: u64, hw: u64) -> ReadView {
        let stable = self.stable(hw);
        // Markers are appended in offset order: the aborted list is sorted by last offset.
        let at = self.aborted.partition_point(|a| a.last_offset < from);
        // A span starting before `from` may reach past it: the last one starting there.
        // (`from` may be past the LSO: a reader positioned at the log end, say.)
        let before = self.unmarked_aborted.range(..from).next_back();
        let spans = before
            .into_iter()
            .chain(self.unmarked_aborted.range(from..stable.max(from)))
            .filter(|&(_, &end)| end > from)
            .map(|(&first, &end)| (first, end));
        ReadView {
            stable,
            aborted: self.aborted[at..]
                .iter()
                .filter(|a| a.first_offset < stable)
                .copied()
                .collect(),
            aborted_spans: spans.collect(),
        }
    }

    /// The open transactions, by first offset.
    pub(crate) fn open(&self) -> Vec<OpenTxn> {
        self.open
            .iter()
            .map(|&(first_offset, producer_id)| OpenTxn {
                producer_id,
                epoch: self.producers[&producer_id].open.map_or(0, |o| o.0),
                first_offset,
            })
            .collect()
    }

    /// Every aborted transaction, in marker order.
    pub(crate) fn aborted(&self) -> &[AbortedTxn] {
        &self.aborted
    }

    /// Rebuilds the state from a log read back at recovery: each transactional record
    /// and marker in offset order.
    pub(crate) fn replay(&mut self, offset: u64, p: i64, epoch: i16, marker: Option<bool>) {
        match marker {
            None => self.appended(p, epoch, offset),
            Some(commit) => self.marked(p, epoch, commit, offset, offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delayed_marker_of_an_earlier_epoch_cannot_close_a_later_transaction() {
        let mut t = TxnTable::default();
        t.check_append(7, 1).unwrap();
        t.appended(7, 1, 0);
        t.check_marker(7, 1).unwrap();
        t.marked(7, 1, true, 1, 2);
        t.check_append(7, 2).unwrap();
        t.appended(7, 2, 2);
        // The first transaction's marker, delivered again late: refused.
        assert!(t.check_marker(7, 1).is_err());
        assert_eq!(t.stable(10), 2);
        // A late record of the first transaction: fenced.
        assert!(t.check_append(7, 1).is_err());
        t.marked(7, 2, false, 5, 6);
        assert_eq!(t.stable(10), 10);
        let v = t.view(0, 10);
        assert!(v.is_aborted(7, 2) && !v.is_aborted(8, 3) && !v.is_aborted(7, 0));
    }

    #[test]
    fn plain_spans_of_an_aborted_transaction_are_skipped_and_a_committed_ones_forgotten() {
        let mut t = TxnTable::default();
        // Producer 7's runs at 0..3 and 5..7 (another producer's records between), 8
        // after a third run right behind the second.
        t.check_append(7, 0).unwrap();
        t.appended_plain(7, 0, 0, 3);
        t.appended_plain(7, 0, 5, 7);
        t.appended_plain(7, 0, 7, 8);
        t.check_append(9, 0).unwrap();
        t.appended_plain(9, 0, 3, 5);
        assert_eq!(t.stable(20), 0);
        t.marked(9, 0, true, 8, 9);
        t.marked(7, 0, false, 9, 10);
        assert_eq!(t.stable(20), 20);
        let v = t.view(0, 20);
        let skipped: Vec<u64> = (0..12).filter(|&o| v.is_aborted_plain(o)).collect();
        assert_eq!(skipped, vec![0, 1, 2, 5, 6, 7]);
        // A view from inside a span still sees it; one past every span sees none.
        assert!(t.view(6, 20).is_aborted_plain(6));
        assert!(t.view(8, 20).aborted_spans.is_empty());
        // The committed producer's spans are gone, the aborted one's moved.
        assert!(t.producers.values().all(|s| s.plain_spans.is_empty()));
        assert_eq!(t.unmarked_aborted.len(), 2);
        // A view from past the LSO (a transaction open below it).
        t.check_append(9, 1).unwrap();
        t.appended_plain(9, 1, 12, 14);
        assert_eq!(t.stable(20), 12);
        assert!(t.view(15, 20).aborted_spans.is_empty());
    }

    #[test]
    fn what_lies_below_the_floor_is_forgotten_and_what_reaches_it_kept() {
        let mut t = TxnTable::default();
        for (p, first) in [(1, 0), (2, 10)] {
            t.check_append(p, 0).unwrap();
            t.appended_plain(p, 0, first, first + 4);
            t.marked(p, 0, false, first + 4, first + 5);
        }
        // Producer 1's records and marker (0..5) are below 5; producer 2's (10..15) not.
        t.forget_below(5);
        assert_eq!(t.aborted().len(), 1);
        assert_eq!(t.unmarked_aborted.len(), 1);
        t.forget_below(13);
        assert_eq!(t.aborted().len(), 1, "its marker at 14 is still there");
        assert!(t.view(12, 20).is_aborted_plain(13));
        t.forget_below(15);
        assert!(t.aborted().is_empty() && t.unmarked_aborted.is_empty());
    }
}

use super::{
    AppendError, AppendWait, Appender, ControlMarker, Entry, GroupSlot, Handed, Partition,
    ReadOutcome,
};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Backoff, Mutex};

/// A partition's transaction state, shared by the partition and its appenders.
#[derive(Debug, Default)]
pub(crate) struct TxnShared {
    table: Mutex<TxnTable>,
    /// Set (once, for good) by the first transactional append or marker: until then reads
    /// take the plain path, with no lock and no look at entries' shapes.
    active: AtomicBool,
}

impl TxnShared {
    fn activate(&self) {
        // Release: pairs with the Acquire in `is_active`; set before the first entry a
        // reader must filter is appended (under the table's lock, before the append).
        if !self.active.load(Ordering::Relaxed) {
            self.active.store(true, Ordering::Release);
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        // Acquire: pairs with the Release in `activate`.
        self.active.load(Ordering::Acquire)
    }
}

/// Why a transactional append or a marker failed.
pub(crate) enum TxnAppendError<K, V> {
    /// The partition refused it (nothing appended); the entry is handed back.
    Refused(TxnRefusal, Entry<K, V>),
    /// The append failed ([`AppendError`]), the entry handed back unless it is in the log.
    Append(Option<Entry<K, V>>, AppendError),
}

impl<K, V> Appender<K, V> {
    /// Appends a record of producer `producer_id`'s transaction at `epoch` (or, with
    /// `marker`, that transaction's end marker) under the partition's transaction lock,
    /// then waits for its acknowledgement outside it (module docs).
    pub(crate) fn append_txn(
        &mut self,
        entry: Entry<K, V>,
        producer_id: i64,
        epoch: i16,
        wait: AppendWait,
    ) -> Result<u64, TxnAppendError<K, V>> {
        let marker = entry.txn().and_then(|t| t.control).map(|c| c.commit);
        let mut entry = entry;
        let mut backoff = Backoff::new();
        loop {
            let txn = crate::sync::StdArc::clone(&self.txn);
            let mut table = txn.table.lock();
            let checked = match marker {
                None => table.check_append(producer_id, epoch),
                Some(_) => table.check_marker(producer_id, epoch),
            };
            if let Err(why) = checked {
                return Err(TxnAppendError::Refused(why, entry));
            }
            txn.activate();
            let note = |table: &mut TxnTable, offset: u64, hw: u64| match marker {
                None => table.appended(producer_id, epoch, offset),
                Some(commit) => table.marked(producer_id, epoch, commit, offset, hw),
            };
            if let Some(r) = self.replicated.clone() {
                let hw = r.high_watermark();
                let pending = r
                    .append_pending(entry, &self.policy)
                    .map_err(|(e, why)| TxnAppendError::Append(e, why))?;
                if let Some((_, offset)) = pending.at() {
                    note(&mut table, offset, hw);
                }
                drop(table);
                return r
                    .await_pending(pending, &self.policy)
                    .map_err(|(e, why)| TxnAppendError::Append(e, why));
            }
            // Never waits for room under the lock: a reader needs the lock to read, and on
            // a gated topic room comes from readers.
            match self.append(entry, AppendWait::No) {
                Ok(offset) => {
                    let hw = offset + 1;
                    note(&mut table, offset, hw);
                    if marker.is_some() && self.disk.is_some() {
                        // Its open transaction may be in the producers' states, restored
                        // from disk (module `tail`, "Expiry").
                        self.handle.lock().txn_ended(producer_id);
                    }
                    if marker.is_some() && self.direct {
                        // Every offset below the published cursor's lap was overwritten.
                        let floor = self
                            .ring
                            .cursor()
                            .saturating_sub(self.ring.capacity() as u64);
                        table.forget_below(floor);
                    }
                    return Ok(offset);
                }
                Err((Some(back), AppendError::Full)) => {
                    drop(table);
                    entry = back;
                    if let AppendWait::Until(Some(deadline)) = wait {
                        if crate::sync::time::Instant::now() >= deadline {
                            return Err(TxnAppendError::Append(Some(entry), AppendError::Timeout));
                        }
                    }
                    if let AppendWait::No = wait {
                        return Err(TxnAppendError::Append(Some(entry), AppendError::Full));
                    }
                    backoff.snooze();
                }
                Err((back, why)) => return Err(TxnAppendError::Append(back, why)),
            }
        }
    }
}

impl<K, V> Appender<K, V> {
    /// Appends a run of records of producer `producer_id`'s transaction at `epoch`, under
    /// the transaction lock, on a partition held in its ring alone (`None` elsewhere: the
    /// caller sends them one by one). `entries` are plain entries (made with
    /// [`Entry::new`], not [`Entry::transactional`]): the table keeps the offsets they get
    /// (module docs). Appends what fits now; the rest stays in `entries`.
    pub(crate) fn append_txn_run(
        &mut self,
        entries: &mut Vec<Entry<K, V>>,
        producer_id: i64,
        epoch: i16,
    ) -> Option<Result<(), TxnRefusal>> {
        if self.replicated.is_some() || self.disk.is_some() {
            return None;
        }
        debug_assert!(entries.iter().all(|e| e.txn().is_none()));
        let txn = crate::sync::StdArc::clone(&self.txn);
        let mut table = txn.table.lock();
        if let Err(why) = table.check_append(producer_id, epoch) {
            return Some(Err(why));
        }
        // Before the publish: a reader that sees these entries filters (`read_as`).
        txn.activate();
        let _ = self.publish_batch_spans(entries, AppendWait::No, &mut |from, end| {
            table.appended_plain(producer_id, epoch, from, end)
        });
        Some(Ok(()))
    }
}

impl<K, V> Partition<K, V> {
    /// Writes producer `producer_id`'s end marker for its transaction at `epoch` under
    /// `policy` (the coordinator's: `acks = all`), returning its offset; a stale marker
    /// (its transaction is already closed here, or a later one is open) is refused.
    pub(crate) fn write_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        marker: ControlMarker,
        timestamp: i64,
        policy: crate::sync::StdArc<super::SendPolicy>,
        timeout: std::time::Duration,
    ) -> Result<u64, TxnAppendError<K, V>> {
        let mut appender = self.appender_with(policy);
        let mut backoff = Backoff::new();
        // Read from the clock at the first wait only: a marker that finds room waits for
        // nothing.
        let mut deadline_at = None;
        let mut deadline = || {
            *deadline_at
                .get_or_insert_with(|| crate::sync::time::Instant::now().checked_add(timeout))
        };
        let mut wait = AppendWait::No;
        loop {
            let entry = Entry::control(timestamp, producer_id, epoch, marker);
            match appender.append_txn(entry, producer_id, epoch, wait) {
                Err(TxnAppendError::Append(_, AppendError::Full))
                    if matches!(wait, AppendWait::No) =>
                {
                    // No room now: wait for it, until the timeout.
                    wait = AppendWait::Until(deadline());
                }
                Err(TxnAppendError::Refused(
                    why @ TxnRefusal::StaleMarker { open: None, .. },
                    e,
                )) => {
                    // Written before: still in the log? (Module docs: a leader change may
                    // have cut it before its acknowledgement.)
                    let Some(r) = self.replicated.clone() else {
                        return Err(TxnAppendError::Refused(why, e));
                    };
                    let mut table = self.txn.table.lock();
                    let Some(at) = table.marker_at(producer_id, epoch) else {
                        return Err(TxnAppendError::Refused(why, e));
                    };
                    let hw = r.high_watermark();
                    let mut found = None;
                    if at < hw {
                        r.read(at, 1, &mut |o, x| {
                            found = Some(
                                o == at
                                    && x.txn().is_some_and(|t| {
                                        t.producer_id == producer_id
                                            && t.epoch == epoch
                                            && t.control.is_some()
                                    }),
                            )
                        });
                    } else if at < r.log_end() {
                        // Appended, not yet acknowledged: wait for it to settle.
                        drop(table);
                        if deadline().is_some_and(|d| crate::sync::time::Instant::now() >= d) {
                            return Err(TxnAppendError::Append(None, AppendError::Timeout));
                        }
                        backoff.snooze();
                        continue;
                    }
                    if found == Some(true) {
                        return Err(TxnAppendError::Refused(why, e));
                    }
                    // Lost: append it again (no record of the producer at this epoch can
                    // have come after the first copy: the fence held them off).
                    let pending = r
                        .append_pending(e, &appender.policy)
                        .map_err(|(e, why)| TxnAppendError::Append(e, why))?;
                    if let Some((_, offset)) = pending.at() {
                        table.marked_again(producer_id, epoch, offset);
                    }
                    drop(table);
                    return r
                        .await_pending(pending, &appender.policy)
                        .map_err(|(e, why)| TxnAppendError::Append(e, why));
                }
                other => return other,
            }
        }
    }

    /// The LSO given a high watermark loaded before this call.
    pub(crate) fn stable_below(&self, hw: u64) -> u64 {
        if !self.txn.is_active() {
            return hw;
        }
        self.txn.table.lock().stable(hw)
    }

    /// The open transactions and the aborted ones.
    pub(crate) fn transactions(&self) -> (Vec<OpenTxn>, Vec<AbortedTxn>) {
        let t = self.txn.table.lock();
        (t.open(), t.aborted().to_vec())
    }

    /// Whether this partition ever held a transactional record or a marker (reads then
    /// filter, and offsets may have gaps for readers).
    pub(crate) fn has_transactions(&self) -> bool {
        self.txn.is_active()
    }

    /// Rebuilds the transaction table from the log (a partition opened from disk): every
    /// transactional record and marker from the log start to the high watermark, in
    /// offset order. Linear in the log (Kafka bounds it with producer-state snapshots).
    pub(crate) fn rebuild_transactions(&self) {
        let end = self.high_watermark();
        let mut at = self.offsets(0).log_start;
        let mut found: Vec<(u64, i64, i16, Option<bool>)> = Vec::new();
        while at < end {
            let outcome = self.read(at, 4096, 0, None, |o, e| {
                let entry = match &e {
                    Handed::Lent(x) => *x,
                    Handed::Owned(x) => x,
                };
                if let Some(t) = entry.txn() {
                    found.push((o, t.producer_id, t.epoch, t.control.map(|c| c.commit)));
                }
            });
            at = match outcome {
                ReadOutcome::Read(n) => at + n as u64,
                ReadOutcome::Sparse { next, .. } => next,
                ReadOutcome::OutOfRange { start, .. } if start > at => start,
                _ => break,
            };
        }
        if found.is_empty() {
            return;
        }
        self.txn.activate();
        let mut table = self.txn.table.lock();
        for (offset, p, epoch, marker) in found {
            table.replay(offset, p, epoch, marker);
        }
    }

    /// [`read`](Self::read) at an isolation level: control records are never passed to
    /// `given`; under [`IsolationLevel::ReadCommitted`] the read stops at the LSO and
    /// skips the records of aborted transactions. Skipped records make the outcome
    /// [`ReadOutcome::Sparse`], whose `next` moves past them.
    pub(crate) fn read_as(
        &self,
        isolation: IsolationLevel,
        offset: u64,
        max: usize,
        now_ms: i64,
        group: Option<&GroupSlot<K, V>>,
        mut given: impl FnMut(u64, Handed<'_, K, V>),
    ) -> ReadOutcome {
        // A log on disk or replicated may hold markers read back from disk (a directory
        // Kafka wrote, say) before its table saw any: those reads always filter.
        //
        // The high watermark first, then the flag: a transaction's appender sets the flag
        // before it publishes, so if the flag is still clear every record below this high
        // watermark was published before any transactional one, and a read capped there
        // needs no filter. Checked the other way round, the read could reach a record
        // published after the check (loom:
        // `a_read_committed_fetch_never_reads_a_transaction_opening_meanwhile`).
        let hw_first = self.high_watermark();
        if !self.txn.is_active() && !self.may_have_gaps() && offset < hw_first {
            let cap = (hw_first - offset).min(usize::MAX as u64) as usize;
            return self.read(offset, max.min(cap), now_ms, group, given);
        }
        let view = match isolation {
            IsolationLevel::ReadUncommitted => None,
            IsolationLevel::ReadCommitted => {
                // The high watermark is loaded before the lock: a transaction that opens
                // after the snapshot puts its first record at or past the log end of
                // then, so at or past this high watermark. Loaded after, it could include
                // such a record while the snapshot shows no open transaction.
                let hw = self.high_watermark();
                Some(self.txn.table.lock().view(offset, hw))
            }
        };
        let mut max = max;
        if let Some(v) = &view {
            if offset >= v.stable && offset <= self.high_watermark() {
                return ReadOutcome::Empty;
            }
            if offset < v.stable {
                max = max.min((v.stable - offset).min(usize::MAX as u64) as usize);
            }
        }
        let mut passed = 0;
        let outcome = self.read(offset, max, now_ms, group, |o, e| {
            let entry = match &e {
                Handed::Lent(x) => *x,
                Handed::Owned(x) => x,
            };
            // The count cap above is no offset cap where the log has gaps (a compacted
            // log): nothing at or past the LSO is passed.
            if view.as_ref().is_some_and(|v| o >= v.stable) {
                return;
            }
            if let Some(t) = entry.txn() {
                if t.control.is_some() {
                    return;
                }
                if view
                    .as_ref()
                    .is_some_and(|v| v.is_aborted(t.producer_id, o))
                {
                    return;
                }
            } else if view.as_ref().is_some_and(|v| v.is_aborted_plain(o)) {
                return;
            }
            passed += 1;
            given(o, e);
        });
        // A read past the LSO (over gaps) resumes there.
        let capped = |next: u64| match &view {
            Some(v) if offset < v.stable => next.min(v.stable),
            _ => next,
        };
        match outcome {
            ReadOutcome::Read(n) => ReadOutcome::of(offset, passed, capped(offset + n as u64)),
            ReadOutcome::Sparse { next, .. } => ReadOutcome::of(offset, passed, capped(next)),
            other => other,
        }
    }
}
