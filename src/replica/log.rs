//! One replica's log: its records with the leader epoch each was written in, and the
//! leader-epoch cache (Kafka's `leader-epoch-checkpoint`: `(epoch, start offset)` pairs).
//!
//! Truncation follows Kafka's `OffsetsForLeaderEpoch` exchange (KIP-101, iterated as in
//! KIP-279): a follower asks the leader where its latest epoch ends
//! ([`ReplicaLog::end_offset_for_epoch`]) and cuts its log there
//! ([`truncation_point`]), never at its high watermark (the pre-KIP-101 rule that let
//! replicas diverge).

use std::collections::VecDeque;

use crate::partition::Entry;
// Std's Arc: entries are shared between the replicas' logs (no loom-visible counts needed,
// they are immutable once appended).
use crate::sync::StdArc as Arc;

/// No epoch (Kafka's `UNDEFINED_EPOCH`).
pub(crate) const NO_EPOCH: i32 = -1;

/// A replica's log (see the module docs).
pub(crate) struct ReplicaLog<K, V> {
    /// The log start offset: the first record held, in memory or (persisted) on disk.
    floor: u64,
    /// The offset of `records[0]` (the tail held in memory).
    start: u64,
    /// Backed by a log on disk: memory holds a tail, trimming it keeps `floor` and the
    /// epochs (the disk still has those records).
    persistent: bool,
    /// Each record with the leader epoch it was appended in.
    records: VecDeque<(i32, Arc<Entry<K, V>>)>,
    /// `(epoch, first offset of that epoch)`, both strictly increasing.
    epochs: Vec<(i32, u64)>,
}

impl<K, V> ReplicaLog<K, V> {
    /// An empty log starting at `start`.
    pub(crate) fn new(start: u64) -> Self {
        Self {
            floor: start,
            start,
            persistent: false,
            records: VecDeque::new(),
            epochs: Vec::new(),
        }
    }

    /// A log recovered from disk: `floor` is its start on disk, `records` (with their
    /// epochs) the tail from `start` to its end, `epochs` its leader-epoch cache.
    pub(crate) fn restored(
        floor: u64,
        start: u64,
        records: VecDeque<(i32, Arc<Entry<K, V>>)>,
        epochs: Vec<(i32, u64)>,
    ) -> Self {
        Self {
            floor,
            start,
            persistent: true,
            records,
            epochs,
        }
    }

    /// The log start offset (on disk, for a persisted replica).
    pub(crate) fn log_start(&self) -> u64 {
        self.floor
    }

    /// The first offset held in memory.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// The log end offset (LEO).
    pub(crate) fn end(&self) -> u64 {
        self.start + self.records.len() as u64
    }

    /// The latest epoch in the cache ([`NO_EPOCH`] when empty).
    pub(crate) fn latest_epoch(&self) -> i32 {
        self.epochs.last().map_or(NO_EPOCH, |e| e.0)
    }

    /// The epoch cache, oldest first.
    pub(crate) fn epochs(&self) -> &[(i32, u64)] {
        &self.epochs
    }

    /// The record at `offset` and its epoch, if held.
    pub(crate) fn get(&self, offset: u64) -> Option<&(i32, Arc<Entry<K, V>>)> {
        let i = offset.checked_sub(self.start)?;
        self.records.get(usize::try_from(i).ok()?)
    }

    /// Starts `epoch` at the log end (a leader taking over); no-op if it is the latest.
    pub(crate) fn begin_epoch(&mut self, epoch: i32) {
        let end = self.end();
        match self.epochs.last_mut() {
            Some(last) if last.0 == epoch => {}
            // An earlier epoch that never got a record: replaced, so starts stay increasing.
            Some(last) if last.1 == end && last.0 < epoch => *last = (epoch, end),
            _ => self.epochs.push((epoch, end)),
        }
    }

    /// Appends one record written in `epoch` (never older than the latest epoch holding
    /// records).
    pub(crate) fn append(&mut self, epoch: i32, entry: Arc<Entry<K, V>>) {
        // A newer epoch that never got a record goes (as Kafka's cache drops entries at or
        // past a new entry's start): a replica that led an epoch without appending may
        // later copy older-epoch records from its new leader.
        let end = self.end();
        while self
            .epochs
            .last()
            .is_some_and(|last| last.1 == end && last.0 > epoch)
        {
            self.epochs.pop();
        }
        debug_assert!(epoch >= self.latest_epoch());
        self.begin_epoch(epoch);
        self.records.push_back((epoch, entry));
    }

    /// Removes every record at or above `offset` (and the epochs starting there). A
    /// persisted log cut below its memory tail keeps no records in memory (the disk has
    /// those below `offset`).
    pub(crate) fn truncate_to(&mut self, offset: u64) {
        let offset = offset.max(self.floor);
        if offset >= self.end() {
            return;
        }
        if offset < self.start {
            self.records.clear();
            self.start = offset;
        } else {
            self.records.truncate((offset - self.start) as usize);
        }
        self.epochs.retain(|e| e.1 < offset);
    }

    /// Empties the log and moves its start to `start` (a replica too far behind the leader).
    pub(crate) fn reset_to(&mut self, start: u64) {
        self.records.clear();
        self.epochs.clear();
        self.start = start;
        self.floor = start;
    }

    /// Drops the oldest records beyond `capacity`, never one at or above `floor`.
    pub(crate) fn trim(&mut self, capacity: usize, floor: u64) {
        while self.records.len() > capacity && self.start < floor {
            self.records.pop_front();
            self.start += 1;
        }
        if self.persistent {
            return;
        }
        self.floor = self.start;
        // Epochs wholly below the start go; the first one left starts at the start at most.
        while self.epochs.len() > 1 && self.epochs[1].1 <= self.start {
            self.epochs.remove(0);
        }
    }

    /// Kafka's `OffsetsForLeaderEpoch` answer for `epoch`: the largest epoch in the cache
    /// not above it, and where that epoch ends (the next epoch's start, or the LEO for the
    /// latest). `(NO_EPOCH, log start)` when every cached epoch is newer (or none is known).
    pub(crate) fn end_offset_for_epoch(&self, epoch: i32) -> (i32, u64) {
        let Some(i) = self.epochs.iter().rposition(|e| e.0 <= epoch) else {
            return (NO_EPOCH, self.floor);
        };
        let end = self.epochs.get(i + 1).map_or(self.end(), |next| next.1);
        (self.epochs[i].0, end)
    }
}

/// One step of the follower's truncation (KIP-279): given the leader's answer `(epoch,
/// end)` for the follower's latest epoch, where the follower cuts its log. `None` when the
/// follower's log already agrees with the leader's up to its end (nothing to cut, no
/// further step); otherwise the offset to truncate to, after which the follower asks again.
pub(crate) fn truncation_point<K, V>(
    follower: &ReplicaLog<K, V>,
    answer: (i32, u64),
) -> Option<u64> {
    let (leader_epoch, leader_end) = answer;
    let own_latest = follower.latest_epoch();
    let target = if leader_epoch == NO_EPOCH {
        // The leader knows no epoch as old as ours: nothing of ours can be trusted.
        follower.log_start()
    } else if leader_epoch == own_latest {
        leader_end.min(follower.end())
    } else {
        // The leader never had our later epochs: cut at the end of the latest epoch we
        // share (its end on our side or the leader's, whichever is lower).
        leader_end.min(follower.end_offset_for_epoch(leader_epoch).1)
    };
    (target < follower.end()).then_some(target)
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;

    fn entry(v: u64) -> Arc<Entry<(), u64>> {
        Arc::new(Entry {
            timestamp: 0,
            key: None,
            value: v,
            headers: None,
        })
    }

    fn log(epochs: &[i32]) -> ReplicaLog<(), u64> {
        let mut l = ReplicaLog::new(0);
        for (i, e) in epochs.iter().enumerate() {
            l.append(*e, entry(i as u64));
        }
        l
    }

    /// Repeats the exchange until the follower agrees with the leader (KIP-279's loop).
    fn reconcile(follower: &mut ReplicaLog<(), u64>, leader: &ReplicaLog<(), u64>) {
        while follower.end() > follower.log_start() {
            let answer = leader.end_offset_for_epoch(follower.latest_epoch());
            match truncation_point(follower, answer) {
                Some(at) => follower.truncate_to(at),
                None => break,
            }
        }
    }

    #[test]
    fn epoch_cache_tracks_starts() {
        let l = log(&[0, 0, 2, 2, 5]);
        assert_eq!(l.epochs(), &[(0, 0), (2, 2), (5, 4)]);
        assert_eq!(l.end_offset_for_epoch(0), (0, 2));
        assert_eq!(l.end_offset_for_epoch(1), (0, 2));
        assert_eq!(l.end_offset_for_epoch(4), (2, 4));
        assert_eq!(l.end_offset_for_epoch(9), (5, 5));
        assert_eq!(log(&[3]).end_offset_for_epoch(1), (NO_EPOCH, 0));
    }

    #[test]
    fn truncate_drops_epochs_starting_at_or_above() {
        let mut l = log(&[0, 0, 2, 2, 5]);
        l.truncate_to(2);
        assert_eq!((l.end(), l.epochs()), (2, &[(0, 0)][..]));
        l.truncate_to(7);
        assert_eq!(l.end(), 2);
    }

    #[test]
    fn begin_epoch_replaces_an_empty_epoch() {
        let mut l = log(&[0]);
        l.begin_epoch(1);
        l.begin_epoch(2);
        assert_eq!(l.epochs(), &[(0, 0), (2, 1)]);
    }

    #[test]
    fn an_empty_newer_epoch_goes_when_older_records_follow() {
        let mut l = log(&[0]);
        l.begin_epoch(3);
        l.append(1, entry(1));
        assert_eq!(l.epochs(), &[(0, 0), (1, 1)]);
        assert_eq!(l.end_offset_for_epoch(3), (1, 2));
    }

    #[test]
    fn trim_keeps_the_epoch_of_the_start() {
        let mut l = log(&[0, 0, 1, 1, 2]);
        l.trim(2, 1);
        assert_eq!((l.start(), l.end()), (1, 5), "never at or above the floor");
        l.trim(2, u64::MAX);
        assert_eq!((l.start(), l.end()), (3, 5));
        assert_eq!(l.epochs(), &[(1, 2), (2, 4)]);
    }

    /// KIP-101: a follower holding a tail of the old leader's epoch that the new leader
    /// never got cuts exactly that tail (not to its high watermark, not more).
    #[test]
    fn follower_cuts_only_the_divergent_tail() {
        let leader = log(&[0, 0, 1, 1]);
        let mut follower = log(&[0, 0, 0]);
        reconcile(&mut follower, &leader);
        assert_eq!(follower.end(), 2);
        // A follower that is merely behind keeps everything.
        let mut behind = log(&[0]);
        reconcile(&mut behind, &leader);
        assert_eq!(behind.end(), 1);
    }

    /// KIP-279: two back-to-back leader changes; a follower whose latest epoch the new
    /// leader never saw needs more than one exchange.
    #[test]
    fn back_to_back_elections_need_iteration() {
        // Leader C saw epochs 0 and 2 (never 1); B wrote offsets 1..3 in epoch 1.
        let leader = log(&[0, 2]);
        let mut b = log(&[0, 1, 1]);
        let first = truncation_point(&b, leader.end_offset_for_epoch(b.latest_epoch()));
        assert_eq!(first, Some(1));
        reconcile(&mut b, &leader);
        assert_eq!((b.end(), b.epochs()), (1, &[(0, 0)][..]));
        // A wrote offsets 1..3 in epoch 0 (the first leader): cut at epoch 0's end.
        let mut a = log(&[0, 0, 0]);
        reconcile(&mut a, &leader);
        assert_eq!(a.end(), 1);
    }

    #[test]
    fn unknown_epochs_truncate_everything() {
        let mut leader = ReplicaLog::new(0);
        leader.append(4, entry(0));
        let mut f = log(&[1, 1]);
        reconcile(&mut f, &leader);
        assert_eq!(f.end(), 0);
    }
}
