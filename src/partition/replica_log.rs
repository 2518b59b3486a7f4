//! One replica's log: its records with the leader epoch each was written in, and the
//! leader-epoch cache (Kafka's `leader-epoch-checkpoint`: `(epoch, start offset)` pairs).
//!
//! Truncation follows Kafka's `OffsetsForLeaderEpoch` exchange (KIP-101, iterated as in
//! KIP-279): a follower asks the leader where its latest epoch ends
//! ([`ReplicaLog::end_offset_for_epoch`]) and cuts its log there
//! ([`truncation_point`]), never at its high watermark (the pre-KIP-101 rule that let
//! replicas diverge).
//!
//! Records live in [`Chunk`]s, one per batch, shared by every replica holding any of them:
//! a log is a sequence of [`Run`]s, each a slice of one chunk written in one leader epoch.
//! A follower's fetch copies slices, not records, so a batch of 64 costs each log one
//! reference count and one entry, not 64 of each.
//!
//! Single records go into an *open* chunk: the leader fills its slots one send at a time
//! ([`ReplicaLog::append_one`]) and extends its last run over each, so a log of single
//! records holds one run per chunk, and a follower in sync copies by moving its run's end.
//! A slot is written once (`chunk`), and only the slot at a run's end is ever tried: a log
//! whose last run ends below the chunk's written slots (truncated, or a new leader whose
//! log stopped short of the old one's) finds that slot taken and starts a new chunk, so no
//! log's records ever change under it.

use std::collections::VecDeque;

use crate::partition::producer_state::{ProducerStates, Stamp};
use crate::partition::Entry;

mod chunk;
#[cfg(all(test, not(logbus_loom)))]
mod model_tests;
mod time_index;
pub(crate) use chunk::{Chunk, SendRecords, CHUNK_MAX};
use time_index::TimestampBlocks;

/// The most records a log holds whose producer state is not applied yet (`applied_to`):
/// a few thousand, so that applying them (one update per run) is a matter of microseconds
/// for whoever needs the state next, while a producer's single records cost one update
/// per run.
const PENDING_MAX: u64 = 4096;

/// No epoch (Kafka's `UNDEFINED_EPOCH`).
pub(crate) const NO_EPOCH: i32 = -1;

/// Records `lo..hi` of `chunk`, written in leader epoch `epoch` by the producer `stamp`
/// names (its `seq` counts chunk slots: slot `i`'s record has sequence `stamp.at(i)`,
/// `producer_state`); in a log, `first` is the offset of record `lo` (48 bytes: a log holds
/// one per batch, and one per open chunk of single records of one producer).
pub(crate) struct Run<K, V> {
    pub(crate) chunk: Chunk<K, V>,
    first: u64,
    pub(crate) epoch: i32,
    lo: u32,
    hi: u32,
    pub(crate) stamp: Stamp,
}

impl<K, V> Clone for Run<K, V> {
    fn clone(&self) -> Self {
        Self {
            chunk: self.chunk.clone(),
            first: self.first,
            epoch: self.epoch,
            lo: self.lo,
            hi: self.hi,
            stamp: self.stamp,
        }
    }
}

impl<K, V> Run<K, V> {
    /// The whole of `chunk`.
    pub(crate) fn whole(epoch: i32, chunk: Chunk<K, V>) -> Self {
        // `Chunk::many` holds at most `CHUNK_MAX` records; a longer one (never built) would
        // be cut, not wrapped.
        let hi = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
        Self {
            chunk,
            first: 0,
            epoch,
            lo: 0,
            hi,
            stamp: Stamp::NONE,
        }
    }

    /// The same records, written by the producer `stamp` names (slot-based, as the field).
    pub(crate) fn stamped(mut self, stamp: Stamp) -> Self {
        self.stamp = stamp;
        self
    }

    /// Record `i` of `chunk` alone (a retried send's record, appended again).
    pub(crate) fn slot(epoch: i32, chunk: Chunk<K, V>, i: u32) -> Self {
        Self {
            chunk,
            first: 0,
            epoch,
            lo: i,
            hi: i.saturating_add(1),
            stamp: Stamp::NONE,
        }
    }

    pub(crate) fn len(&self) -> usize {
        (self.hi - self.lo) as usize
    }

    /// Its records, each with its epoch.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (i32, &Entry<K, V>)> {
        self.chunk
            .slice(self.lo, self.hi)
            .map(move |e| (self.epoch, e))
    }

    /// Its records, each with its epoch and stamp (the stamp's `seq` the record's own
    /// sequence), as a store appends them.
    pub(crate) fn stamped_entries(&self) -> impl Iterator<Item = (i32, Stamp, &Entry<K, V>)> {
        let lo = u64::from(self.lo);
        self.chunk
            .slice(self.lo, self.hi)
            .enumerate()
            .map(move |(j, e)| (self.epoch, self.stamp.moved(lo + j as u64, 0), e))
    }

    fn end(&self) -> u64 {
        self.first + u64::from(self.hi - self.lo)
    }
}

/// Records with their epochs and stamps (each stamp's `seq` the record's own sequence) as
/// runs, one shared chunk per epoch and producer run (a log read from disk).
pub(crate) fn runs_of<K, V>(records: Vec<(i32, Stamp, Entry<K, V>)>) -> Vec<Run<K, V>> {
    let mut runs = Vec::new();
    let mut records = records.into_iter().peekable();
    while let Some((epoch, stamp, first)) = records.next() {
        let mut chunk = vec![first];
        while let Some((_, _, e)) = records.next_if(|(next, s, _)| {
            *next == epoch && chunk.len() < CHUNK_MAX && *s == stamp.moved(chunk.len() as u64, 0)
        }) {
            chunk.push(e);
        }
        runs.push(Run::whole(epoch, Chunk::many(chunk)).stamped(stamp));
    }
    runs
}

/// A replica's log (see the module docs).
pub(crate) struct ReplicaLog<K, V> {
    /// The log start offset: the first record held, in memory or (persisted) on disk.
    floor: u64,
    /// The first offset held in memory.
    start: u64,
    /// The log end offset.
    end: u64,
    /// Backed by a log on disk: memory holds a tail, trimming it keeps `floor` and the
    /// epochs (the disk still has those records).
    persistent: bool,
    /// `(offset of the run's first record, run)`, covering `start..end` without gaps.
    runs: VecDeque<Run<K, V>>,
    /// `(epoch, first offset of that epoch)`, both strictly increasing.
    epochs: Vec<(i32, u64)>,
    /// Where `offset_for_time` looks (module `time_index`); built by the lookups, so
    /// appends never touch it.
    times: TimestampBlocks,
    /// Its producers' states (`producer_state`) as of the records below `applied_to`.
    producers: ProducerStates,
    /// The records from here to `end` are not yet applied to `producers`: appends and
    /// copies only add records, and their producer state is applied run by run
    /// (`apply_pending`) before anything reads or changes `producers` or removes one of
    /// them. A send or a follower's copy of a producer sending one record at a time then
    /// costs no producer-state work, and the state is updated once per run, not per record.
    applied_to: u64,
    /// The last run's producer is at that run's epoch in `producers` (once applied), so
    /// `continues` may answer for it. False after a truncation, which keeps a producer's
    /// newer epoch (`ProducerStates::truncate`) while an older run of it may end the log;
    /// true again once a record is appended.
    tail_current: bool,
}

impl<K, V> ReplicaLog<K, V> {
    /// An empty log starting at `start`.
    pub(crate) fn new(start: u64) -> Self {
        Self {
            floor: start,
            start,
            end: start,
            persistent: false,
            runs: VecDeque::new(),
            epochs: Vec::new(),
            times: TimestampBlocks::default(),
            producers: ProducerStates::new(),
            applied_to: start,
            tail_current: true,
        }
    }

    /// A log recovered from disk: `floor` is its start on disk, `records` (with their
    /// epochs) the tail from `start` to its end, `epochs` its leader-epoch cache.
    ///
    /// `producers`: the producer states of the log below `start` (a snapshot and the
    /// batches after it); the records from `start` on are applied to them here.
    pub(crate) fn restored(
        floor: u64,
        start: u64,
        records: Vec<Run<K, V>>,
        epochs: Vec<(i32, u64)>,
        producers: ProducerStates,
    ) -> Self {
        let mut log = Self {
            floor,
            start,
            end: start,
            persistent: true,
            runs: VecDeque::with_capacity(records.len()),
            epochs,
            times: TimestampBlocks::default(),
            producers,
            applied_to: start,
            tail_current: true,
        };
        for run in records {
            log.push(run);
        }
        log
    }

    /// Its producers' states (the records not yet applied applied first: `applied_to`).
    pub(crate) fn producers(&mut self) -> &ProducerStates {
        self.apply_pending();
        &self.producers
    }

    /// Its producers' states, to change (expiry, transaction markers).
    pub(crate) fn producers_mut(&mut self) -> &mut ProducerStates {
        self.apply_pending();
        &mut self.producers
    }

    /// Applies the producer state of the records from `applied_to` to the end.
    #[inline]
    fn apply_pending(&mut self) {
        if self.applied_to < self.end {
            self.apply_runs();
        }
    }

    /// Applies the pending records once they are [`PENDING_MAX`]: one apply's work, done
    /// under the partition's lock by whoever needs the state next, stays small.
    #[inline]
    fn bound_pending(&mut self) {
        if self.end - self.applied_to > PENDING_MAX {
            self.apply_runs();
        }
    }

    /// `apply_pending`'s work: each stamped run's records from `applied_to` on, in offset
    /// order, with the timestamp of the run's last record.
    fn apply_runs(&mut self) {
        let from = self.applied_to.max(self.start);
        self.applied_to = self.end;
        let Some(k) = self.run_at(from) else {
            debug_assert!(false, "pending records {from}.. left memory unapplied");
            return;
        };
        for run in self.runs.range(k..) {
            if run.stamp.is_none() {
                continue;
            }
            // Within the run: `from` is below its end (runs cover the log without gaps).
            let skip = from.saturating_sub(run.first);
            let lo = run.lo + skip as u32;
            // The last record's timestamp stands for the run's: one read per run, not one per
            // record, which would cost a batch send about as much as the rest of its work.
            let timestamp = run
                .chunk
                .slice(run.hi - 1, run.hi)
                .next()
                .map_or(-1, Entry::timestamp);
            self.producers.applied(
                &run.stamp,
                u64::from(lo),
                run.first + skip,
                u64::from(run.hi - lo),
                timestamp,
            );
        }
    }

    /// Whether the log's last record is the one before the first record of `stamp` (at
    /// position `at`): the same producer and epoch, the sequence before, appended since the
    /// last truncation. A leader's check of such records finds them in order
    /// (`ProducerStates::check` answers `Append`): the producer's last range ends at that
    /// record, in that epoch, and its ranges hold increasing sequences, so none holds the
    /// next one. After a truncation the producer's state may hold a newer epoch than its
    /// last run's (`tail_current`), so the check answers.
    #[inline]
    pub(crate) fn continues(&self, stamp: &Stamp, at: u64) -> bool {
        self.tail_current
            && self.runs.back().is_some_and(|last| {
                last.hi > last.lo
                    && !stamp.is_none()
                    && last.stamp.id == stamp.id
                    && last.stamp.epoch == stamp.epoch
                    && last.stamp.at(u64::from(last.hi)) == stamp.at(at)
            })
    }

    /// The stamp of the record at `offset` (its own sequence as `seq`), if held in memory.
    #[allow(
        dead_code,
        reason = "for the transactions (issue 30, second half) and tools"
    )]
    pub(crate) fn stamp_at(&self, offset: u64) -> Option<Stamp> {
        let run = &self.runs[self.run_at(offset)?];
        let slot = u64::from(run.lo) + (offset - run.first);
        Some(run.stamp.moved(slot, 0))
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
        self.end
    }

    /// The latest epoch in the cache ([`NO_EPOCH`] when empty).
    pub(crate) fn latest_epoch(&self) -> i32 {
        self.epochs.last().map_or(NO_EPOCH, |e| e.0)
    }

    /// The epoch cache, oldest first.
    pub(crate) fn epochs(&self) -> &[(i32, u64)] {
        &self.epochs
    }

    /// The index of the run holding `offset`, if held in memory.
    fn run_at(&self, offset: u64) -> Option<usize> {
        if offset < self.start || offset >= self.end {
            return None;
        }
        // Most lookups are at the tail (a follower's fetch, a consumer keeping up).
        let last = self.runs.len().checked_sub(1)?;
        if self.runs[last].first <= offset {
            return Some(last);
        }
        Some(self.runs.partition_point(|run| run.end() <= offset))
    }

    /// The record at `offset` and its epoch, if held in memory.
    #[cfg(test)]
    pub(crate) fn get(&self, offset: u64) -> Option<(i32, &Entry<K, V>)> {
        let run = &self.runs[self.run_at(offset)?];
        let i = usize::try_from(offset - run.first).ok()?;
        run.chunk.get(run.lo as usize + i).map(|e| (run.epoch, e))
    }

    /// Calls `f(offset, epoch, record)` for every record held in memory in `from..to`.
    pub(crate) fn for_each(&self, from: u64, to: u64, mut f: impl FnMut(u64, i32, &Entry<K, V>)) {
        let Some(k) = self.run_at(from) else { return };
        for run in self.runs.range(k..) {
            if run.first >= to {
                break;
            }
            for (j, (epoch, e)) in run.entries().enumerate() {
                let o = run.first + j as u64;
                if o >= to {
                    break;
                }
                if o >= from {
                    f(o, epoch, e);
                }
            }
        }
    }

    /// Calls `f(offset, epoch, stamp, record)` for every record held in memory in
    /// `from..to`, the stamp's `seq` the record's own sequence.
    #[allow(
        dead_code,
        reason = "for the transactions (issue 30, second half) and tools"
    )]
    pub(crate) fn for_each_stamped(
        &self,
        from: u64,
        to: u64,
        mut f: impl FnMut(u64, i32, Stamp, &Entry<K, V>),
    ) {
        let Some(k) = self.run_at(from) else { return };
        for run in self.runs.range(k..) {
            if run.first >= to {
                break;
            }
            for (j, (epoch, e)) in run.entries().enumerate() {
                let o = run.first + j as u64;
                if o >= to {
                    break;
                }
                if o >= from {
                    f(
                        o,
                        epoch,
                        run.stamp.moved(u64::from(run.lo) + j as u64, 0),
                        e,
                    );
                }
            }
        }
    }

    /// The first record held in memory below `to` whose timestamp is at or after
    /// `timestamp`, with that timestamp (Kafka's ListOffsets by time). Brings the time index
    /// up to the log end first (reading each record appended since the last lookup once),
    /// then reads only the block where a match can start.
    pub(crate) fn offset_for_time(&mut self, to: u64, timestamp: i64) -> Option<(u64, i64)> {
        let from = self.times.update(self.start, self.end);
        let (runs, start) = (&self.runs, self.start);
        let held = |from: u64, to: u64, f: &mut dyn FnMut(u64, i64) -> bool| {
            Self::scan(runs, start, from, to, f)
        };
        if from < self.end {
            let times = &mut self.times;
            held(from, self.end, &mut |o, ts| {
                times.add(o, ts);
                true
            });
        }
        let times = &self.times;
        times.find(start, to, timestamp, |from, to| {
            let mut found = None;
            held(from, to, &mut |o, ts| {
                if ts >= timestamp {
                    found = Some((o, ts));
                }
                found.is_none()
            });
            found
        })
    }

    /// Calls `f(offset, timestamp)` for the records of `runs` (the log's, `start` its first
    /// offset in memory) in `from..to`, in order, while `f` returns `true`.
    fn scan(
        runs: &VecDeque<Run<K, V>>,
        start: u64,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, i64) -> bool,
    ) {
        let from = from.max(start);
        // The run holding `from` (runs cover the log from `start` without gaps).
        let k = runs.partition_point(|run| run.end() <= from);
        for run in runs.range(k..) {
            if run.first >= to {
                return;
            }
            let skip = from.saturating_sub(run.first) as usize;
            for (j, (_, e)) in run.entries().enumerate().skip(skip) {
                let o = run.first + j as u64;
                if o >= to || !f(o, e.timestamp()) {
                    return;
                }
            }
        }
    }

    /// Pushes the runs holding `from..to` (cut to it) onto `out`: references, not copies.
    pub(crate) fn runs_in(&self, from: u64, to: u64, out: &mut Vec<Run<K, V>>) {
        let cut = |run: &Run<K, V>| {
            let mut cut = run.clone();
            // Both within the run (at most its length, a `u32`): `from` and `to` are cut
            // to its offsets first.
            cut.lo += (from.max(run.first) - run.first) as u32;
            cut.hi -= (run.end() - to.min(run.end())) as u32;
            cut
        };
        let Some(k) = self.run_at(from) else { return };
        if k + 1 == self.runs.len() {
            // A follower keeping up copies from the last run only.
            out.push(cut(&self.runs[k]));
            return;
        }
        for run in self.runs.range(k..) {
            if run.first >= to {
                break;
            }
            out.push(cut(run));
        }
    }

    /// Appends `src`'s records from this log's end up to `to` (an in-memory follower
    /// copying from its leader, which holds them): a follower in sync whose last run ends
    /// where `src`'s run goes on, in the same chunk and epoch, moves that run's end (no
    /// reference taken); the rest as `runs_in` slices, through `spare`.
    #[inline]
    pub(crate) fn copy_from(&mut self, src: &Self, to: u64, spare: &mut Vec<Run<K, V>>) {
        let from = self.end;
        if from >= to {
            return;
        }
        if let (Some(k), Some(last)) = (src.run_at(from), self.runs.back_mut()) {
            let run = &src.runs[k];
            // Within the run: `from` is at or past its first offset and below its end.
            let lo = run.lo + (from - run.first) as u32;
            if last.hi == lo
                && last.epoch == run.epoch
                && last.stamp == run.stamp
                && self.epochs.last().is_some_and(|e| e.0 == run.epoch)
                && last.chunk.same(&run.chunk)
            {
                let n = run.end().min(to) - from;
                // At most the run's length, a `u32`.
                last.hi += n as u32;
                self.end += n;
                self.bound_pending();
                if self.end >= to {
                    return;
                }
            }
        }
        src.runs_in(self.end, to, spare);
        for run in spare.drain(..) {
            self.append_run(run);
        }
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
    #[cfg(all(test, not(logbus_loom)))]
    pub(crate) fn append(&mut self, epoch: i32, entry: Entry<K, V>) {
        self.append_one(epoch, entry, 4, None);
    }

    /// Appends one record written in `epoch` (the leader's, never older than the latest
    /// epoch holding records) into the open chunk its last run ends in, when that run is of
    /// `epoch` and the slot after it is free (module docs); else into a new open chunk of
    /// `room` slots. `producer`: the idempotent producer's id and the record's sequence
    /// (`None`: no idempotence). Returns where it went: the chunk and the slot.
    #[inline]
    pub(crate) fn append_one(
        &mut self,
        epoch: i32,
        entry: Entry<K, V>,
        room: usize,
        producer: Option<(crate::partition::ProducerIdentity, i32)>,
    ) -> (Chunk<K, V>, u32) {
        let stamp = match producer {
            None => Stamp::NONE,
            Some((id, seq)) => Stamp::based(id, seq, 0, false),
        };
        match self.fill_last(epoch, entry, &stamp, false) {
            Ok(placed) => placed,
            Err(entry) => {
                let chunk = Chunk::open(room, entry);
                self.append_run(Run::slot(epoch, chunk.clone(), 0).stamped(stamp));
                (chunk, 0)
            }
        }
    }

    /// Appends `entry`, the record of `stamp` (at position 0), to the last run if it goes
    /// on from that run's last record ([`ReplicaLog::continues`]: a leader's check would
    /// find it in order) in `epoch` and the run's chunk has room; hands it back otherwise.
    #[inline]
    pub(crate) fn extend_continued(
        &mut self,
        epoch: i32,
        entry: Entry<K, V>,
        stamp: &Stamp,
    ) -> Result<(Chunk<K, V>, u32), Entry<K, V>> {
        if stamp.is_none() {
            return Err(entry);
        }
        self.fill_last(epoch, entry, stamp, true)
    }

    /// Fills the last run's next slot with `entry` if the run is in `epoch` (the latest),
    /// its records share `stamp`'s producer and sequences (`stamp` at position 0 is the
    /// slot's), and, if `continuing`, it holds at least one record.
    #[inline]
    fn fill_last(
        &mut self,
        epoch: i32,
        entry: Entry<K, V>,
        stamp: &Stamp,
        continuing: bool,
    ) -> Result<(Chunk<K, V>, u32), Entry<K, V>> {
        let Some(last) = self.runs.back_mut() else {
            return Err(entry);
        };
        if last.epoch != epoch
            || (continuing && (last.hi == last.lo || !self.tail_current))
            || last.stamp != stamp.moved(0, u64::from(last.hi))
            || self.epochs.last().is_none_or(|e| e.0 != epoch)
        {
            return Err(entry);
        }
        last.chunk.fill(last.hi, entry)?;
        let at = last.hi;
        last.hi += 1;
        self.end += 1;
        self.tail_current = true;
        let chunk = last.chunk.clone();
        self.bound_pending();
        Ok((chunk, at))
    }

    /// Appends a run of records written in its epoch (never older than the latest epoch
    /// holding records).
    #[inline]
    pub(crate) fn append_run(&mut self, run: Run<K, V>) {
        // The common case, inline: the run continues the latest epoch.
        if self.epochs.last().is_some_and(|last| last.0 == run.epoch) {
            self.push(run);
        } else {
            self.append_in_new_epoch(run);
        }
    }

    fn append_in_new_epoch(&mut self, run: Run<K, V>) {
        if run.len() == 0 {
            return;
        }
        // A newer epoch that never got a record goes (as Kafka's cache drops entries at or
        // past a new entry's start): a replica that led an epoch without appending may
        // later copy older-epoch records from its new leader.
        let end = self.end();
        while self
            .epochs
            .last()
            .is_some_and(|last| last.1 == end && last.0 > run.epoch)
        {
            self.epochs.pop();
        }
        debug_assert!(run.epoch >= self.latest_epoch());
        self.begin_epoch(run.epoch);
        self.push(run);
    }

    /// Adds `run` at the end, joined to the last run when it continues it (a follower
    /// that copied a chunk in two fetches).
    #[inline]
    fn push(&mut self, mut run: Run<K, V>) {
        if run.len() == 0 {
            return;
        }
        run.first = self.end;
        self.end += run.len() as u64;
        self.tail_current = true;
        self.bound_pending();
        if let Some(last) = self.runs.back_mut() {
            if last.hi == run.lo
                && last.epoch == run.epoch
                && last.stamp == run.stamp
                && last.chunk.same(&run.chunk)
            {
                last.hi = run.hi;
                return;
            }
        }
        self.runs.push_back(run);
    }

    /// Removes every record at or above `offset` (and the epochs starting there; all of
    /// them when no record is left). A persisted log cut below its memory tail keeps no
    /// records in memory (the disk has those below `offset`).
    pub(crate) fn truncate_to(&mut self, offset: u64) {
        let offset = offset.max(self.floor);
        if offset >= self.end() {
            return;
        }
        // Applied with the records cut, then rolled back with them (`producer_state`).
        self.apply_pending();
        if offset < self.start {
            self.runs.clear();
            self.start = offset;
        } else {
            while let Some(run) = self.runs.back_mut() {
                if run.first >= offset {
                    self.runs.pop_back();
                } else {
                    // Below its end: the cut is shorter than the run.
                    run.hi = run.lo + (offset - run.first) as u32;
                    break;
                }
            }
        }
        self.end = offset;
        self.applied_to = offset;
        self.producers.truncate(offset);
        self.tail_current = false;
        if offset == self.floor {
            // Nothing is left, on disk either: the epochs of the records cut go with them.
            // Kept, they would outlive every record of theirs, and the next run appended (a
            // leader's older epoch, where this log's divergent records began below its
            // start) would go in behind a newer epoch.
            self.epochs.clear();
        } else {
            self.epochs.retain(|e| e.1 < offset);
        }
        self.times.truncated(offset);
    }

    /// Continues the log at `offset`, past a gap in the leader's log (on disk: a
    /// Kafka-written directory, a segment deleted by hand): memory then holds nothing below
    /// it (the disk has what came before); the log start and the epochs stay.
    pub(crate) fn skip_to(&mut self, offset: u64) {
        if offset <= self.end {
            return;
        }
        self.apply_pending();
        self.applied_to = offset;
        self.runs.clear();
        self.times = TimestampBlocks::default();
        self.start = offset;
        self.end = offset;
    }

    /// Empties the log and moves its start to `start` (a replica too far behind the leader).
    pub(crate) fn reset_to(&mut self, start: u64) {
        self.runs.clear();
        self.epochs.clear();
        self.applied_to = start;
        self.producers = ProducerStates::new();
        self.times = TimestampBlocks::default();
        self.start = start;
        self.end = start;
        self.floor = start;
    }

    /// Drops the oldest records beyond `capacity`, never one at or above `floor`.
    #[inline]
    pub(crate) fn trim(&mut self, capacity: usize, floor: u64) {
        // Inline: most calls find nothing to drop.
        if self.end - self.start > capacity as u64 && self.start < floor {
            self.drop_front(capacity, floor);
        }
        if self.persistent {
            return;
        }
        self.floor = self.start;
        if self.epochs.len() > 1 && self.epochs[1].1 <= self.start {
            self.drop_epochs();
        }
    }

    fn drop_front(&mut self, capacity: usize, floor: u64) {
        let held = self.end - self.start;
        let to = self.start + (held - capacity as u64).min(floor - self.start);
        if to > self.applied_to {
            self.apply_pending();
        }
        while let Some(run) = self.runs.front_mut() {
            if run.end() <= to {
                self.runs.pop_front();
            } else {
                // Inside the run: fewer than its length.
                let cut = to.saturating_sub(run.first);
                run.lo += cut as u32;
                run.first += cut;
                break;
            }
        }
        self.start = to;
    }

    /// Epochs wholly below the start go; the first one left starts at the start at most.
    fn drop_epochs(&mut self) {
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

    fn entry(v: u64) -> Entry<(), u64> {
        Entry::plain(0, v)
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

    fn chunk(values: std::ops::Range<u64>) -> Chunk<(), u64> {
        Chunk::many(values.map(entry).collect())
    }

    fn values(l: &ReplicaLog<(), u64>) -> Vec<(u64, i32, u64)> {
        let mut out = Vec::new();
        l.for_each(l.start(), l.end(), |o, e, r| out.push((o, e, *r.value())));
        out
    }

    /// A follower copying one chunk in two fetches holds one run; reads, cuts and trims
    /// inside a run see exactly the records asked for.
    #[test]
    fn runs_share_chunks_and_cut_inside_them() {
        let mut leader = ReplicaLog::new(0);
        leader.append_run(Run::whole(0, chunk(0..5)));
        leader.append_run(Run::whole(1, chunk(5..8)));
        assert_eq!(leader.runs.len(), 2);
        assert_eq!(
            std::mem::size_of::<Run<(), u64>>(),
            48,
            "a run per batch (its producer stamp: 16)"
        );
        let mut follower = ReplicaLog::new(0);
        for (from, to) in [(0, 2), (2, 6), (6, 8)] {
            let mut got = Vec::new();
            leader.runs_in(from, to, &mut got);
            assert_eq!(
                got.iter().map(Run::len).sum::<usize>(),
                (to - from) as usize
            );
            for run in got {
                follower.append_run(run);
            }
        }
        assert_eq!(follower.runs.len(), 2, "the copies of one chunk join");
        assert_eq!(values(&follower), values(&leader));
        assert_eq!(follower.epochs(), &[(0, 0), (1, 5)]);
        assert_eq!(follower.get(6).map(|(e, r)| (e, *r.value())), Some((1, 6)));
        assert!(follower.get(8).is_none());
        follower.truncate_to(3);
        assert_eq!(values(&follower), vec![(0, 0, 0), (1, 0, 1), (2, 0, 2)]);
        follower.trim(1, u64::MAX);
        assert_eq!((follower.start(), follower.end()), (2, 3));
        assert_eq!(follower.get(2).map(|(_, r)| *r.value()), Some(2));
        assert!(follower.get(1).is_none());
        let mut rest = Vec::new();
        leader.runs_in(3, 8, &mut rest);
        for run in rest {
            follower.append_run(run);
        }
        assert_eq!(values(&follower), values(&leader)[2..].to_vec());
    }

    /// Runs of `log`: `(epoch, lo, hi)` each.
    fn runs(l: &ReplicaLog<(), u64>) -> Vec<(i32, u32, u32)> {
        l.runs.iter().map(|r| (r.epoch, r.lo, r.hi)).collect()
    }

    /// Copies `leader`'s records from the follower's end up to `to`, as a fetch does.
    fn copy(follower: &mut ReplicaLog<(), u64>, leader: &ReplicaLog<(), u64>, to: u64) {
        let mut got = Vec::new();
        leader.runs_in(follower.end(), to, &mut got);
        for run in got {
            follower.append_run(run);
        }
    }

    /// Single records fill one open chunk: one run in the leader's log, one in a follower
    /// that copies them in several fetches; a full chunk starts another.
    #[test]
    fn single_records_share_an_open_chunk() {
        let mut leader = ReplicaLog::new(0);
        leader.begin_epoch(0);
        let mut follower = ReplicaLog::new(0);
        for v in 0..6 {
            let (_, at) = leader.append_one(0, entry(v), 4, None);
            assert_eq!(u64::from(at), v % 4);
            copy(&mut follower, &leader, leader.end());
        }
        assert_eq!(runs(&leader), vec![(0, 0, 4), (0, 0, 2)]);
        assert_eq!(runs(&follower), runs(&leader));
        // The same by moving the follower's run end (a helping sender's copy), from a
        // follower that starts in the middle of the first chunk.
        let mut other = ReplicaLog::new(0);
        copy(&mut other, &leader, 1);
        let mut spare = Vec::new();
        for to in [2, 3, 5, 6] {
            other.copy_from(&leader, to, &mut spare);
            assert_eq!(other.end(), to);
        }
        assert_eq!(runs(&other), runs(&leader));
        assert_eq!(values(&other), values(&leader));
        assert!(leader.runs[0].chunk.same(&follower.runs[0].chunk));
        assert_eq!(values(&follower), values(&leader));
        assert_eq!(values(&leader).len(), 6);
    }

    /// A log cut inside a shared open chunk never writes into it again: the slot after its
    /// cut is taken (the other logs still hold that record), so the next record goes into a
    /// new chunk, and the other logs keep what they had.
    #[test]
    fn truncate_then_append_on_a_shared_open_chunk() {
        let mut leader = ReplicaLog::new(0);
        leader.begin_epoch(0);
        for v in 0..4 {
            leader.append_one(0, entry(v), 8, None);
        }
        let mut follower = ReplicaLog::new(0);
        copy(&mut follower, &leader, 4);
        let before = values(&leader);
        // The follower cut inside the chunk, then appending in the same epoch (as a leader
        // would): a new chunk, not the slot at its cut.
        follower.truncate_to(2);
        let (chunk, at) = follower.append_one(0, entry(100), 8, None);
        assert_eq!(at, 0);
        assert!(!chunk.same(&leader.runs[0].chunk));
        assert_eq!(
            values(&leader),
            before,
            "the leader's records are untouched"
        );
        assert_eq!(values(&follower), vec![(0, 0, 0), (1, 0, 1), (2, 0, 100)]);
        // The same for the leader cut in its own chunk.
        leader.truncate_to(3);
        leader.append_one(0, entry(200), 8, None);
        assert_eq!(
            values(&leader),
            vec![(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 0, 200)]
        );
        assert_eq!(values(&follower)[2], (2, 0, 100));
        assert_eq!(leader.runs.len(), 2, "a new chunk after the cut");
    }

    /// An election while a chunk is open: the new leader's records (its own, and a record
    /// of the old leader's chunk sent again by a retry) never land in the old leader's
    /// slots, and a replica that copied only part of the chunk keeps its prefix.
    #[test]
    fn an_election_while_a_chunk_is_open() {
        let mut old = ReplicaLog::new(0);
        old.begin_epoch(0);
        let (chunk, _) = old.append_one(0, entry(0), 8, None);
        old.append_one(0, entry(1), 8, None);
        old.append_one(0, entry(2), 8, None);
        // The new leader copied offset 0 only, then was elected in epoch 1.
        let mut new = ReplicaLog::new(0);
        copy(&mut new, &old, 1);
        new.begin_epoch(1);
        // A retry sends offset 1's record again (it was never acknowledged): shared.
        new.append_run(Run::slot(1, chunk.clone(), 1));
        // The next record: slot 2 is the old leader's, so a new chunk.
        let (next, at) = new.append_one(1, entry(3), 8, None);
        assert_eq!(at, 0);
        assert!(!next.same(&chunk));
        assert_eq!(values(&old), vec![(0, 0, 0), (1, 0, 1), (2, 0, 2)]);
        assert_eq!(values(&new), vec![(0, 0, 0), (1, 1, 1), (2, 1, 3)]);
        // In the new epoch the new chunk is extended in place.
        new.append_one(1, entry(4), 8, None);
        assert_eq!(runs(&new), vec![(0, 0, 1), (1, 1, 2), (1, 0, 2)]);
        // The old leader, truncated by epoch, then copies the new leader's tail.
        let answer = new.end_offset_for_epoch(old.latest_epoch());
        if let Some(at) = truncation_point(&old, answer) {
            old.truncate_to(at);
        }
        assert_eq!(old.end(), 1);
        copy(&mut old, &new, new.end());
        assert_eq!(values(&old), values(&new));
        assert_eq!(runs(&old), runs(&new));
    }

    /// A chunk drops exactly the records written into it, when the last log holding any of
    /// them lets go.
    #[test]
    fn an_open_chunk_drops_what_was_written() {
        let value = crate::sync::StdArc::new(());
        let mut leader: ReplicaLog<(), crate::sync::StdArc<()>> = ReplicaLog::new(0);
        leader.begin_epoch(0);
        for _ in 0..3 {
            leader.append_one(0, Entry::plain(0, value.clone()), 8, None);
        }
        let mut follower = ReplicaLog::new(0);
        let mut got = Vec::new();
        leader.runs_in(0, 2, &mut got);
        for run in got {
            follower.append_run(run);
        }
        assert_eq!(crate::sync::StdArc::strong_count(&value), 4);
        drop(leader);
        assert_eq!(
            crate::sync::StdArc::strong_count(&value),
            4,
            "the follower holds the chunk"
        );
        follower.trim(0, u64::MAX);
        assert_eq!(crate::sync::StdArc::strong_count(&value), 1);
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

    /// A leader skips the check of a send going on from its producer's last record
    /// (`continues`) only where the check would append it; the state it applies later is
    /// the same, also once the records left memory.
    #[test]
    fn a_continued_producer_is_in_order_and_its_state_survives_a_trim() {
        use crate::partition::producer_state::Check;
        use crate::partition::ProducerIdentity;
        let a = ProducerIdentity { id: 7, epoch: 0 };
        let b = ProducerIdentity { id: 8, epoch: 0 };
        let next = |id, seq| Stamp::based(id, seq, 0, false);
        let mut l: ReplicaLog<(), u64> = ReplicaLog::new(0);
        assert!(
            !l.continues(&next(a, 0), 0),
            "an empty log continues nothing"
        );
        // One run applied at once: its last record's timestamp is the producer's.
        for (seq, ts) in [(0, 5), (1, 3), (2, 9)] {
            l.append_one(1, Entry::plain(ts, seq as u64), 4, Some((a, seq)));
        }
        assert!(l.continues(&next(a, 3), 0));
        assert_eq!(l.producers().check(&next(a, 3), 0, 1), Check::Append);
        assert_eq!(l.producers().get(a.id).map(|e| e.last_timestamp), Some(9));
        for other in [
            next(a, 4),
            next(b, 3),
            next(ProducerIdentity { id: 7, epoch: 1 }, 3),
            Stamp::NONE,
        ] {
            assert!(!l.continues(&other, 0), "{other:?}");
        }
        // Across a new chunk (room 4): still one producer going on.
        for seq in 3..6 {
            assert!(l.continues(&next(a, seq), 0));
            l.append_one(1, Entry::plain(1, seq as u64), 4, Some((a, seq)));
        }
        l.append_one(1, Entry::plain(1, 6), 4, Some((b, 0)));
        assert!(!l.continues(&next(a, 6), 0), "b's record came last");
        // Every record a's leaves memory before the state is read.
        l.trim(1, u64::MAX);
        assert_eq!(l.start(), 6);
        let state = l.producers().get(a.id).cloned().expect("known");
        assert_eq!(state.last(), Some((5, 5)));
        assert_eq!(state.last_timestamp, 9);
        assert_eq!(
            l.producers().check(&next(a, 0), 0, 1),
            Check::Duplicate(0, 0)
        );
        assert_eq!(
            l.producers().check(&next(a, 7), 0, 1),
            Check::OutOfOrder { expected: 6 }
        );
    }

    /// A producer's run crossing `i32::MAX` goes on at sequence 0 (wrapped), and the check
    /// agrees; after a truncation, `continues` and `extend_continued` decline (the check
    /// answers).
    #[test]
    fn extend_continued_goes_across_the_sequence_wrap_and_not_after_a_truncation() {
        use crate::partition::producer_state::Check;
        use crate::partition::ProducerIdentity;
        let a = ProducerIdentity { id: 7, epoch: 0 };
        let next = |seq| Stamp::based(a, seq, 0, false);
        let mut l: ReplicaLog<(), u64> = ReplicaLog::new(0);
        l.append_one(1, Entry::plain(1, 0), 8, Some((a, i32::MAX - 1)));
        for (v, seq) in [(1u64, i32::MAX), (2, 0), (3, 1)] {
            assert!(l.continues(&next(seq), 0));
            assert_eq!(l.producers().check(&next(seq), 0, 1), Check::Append);
            l.extend_continued(1, Entry::plain(1, v), &next(seq))
                .unwrap_or_else(|_| panic!("{seq} continues"));
        }
        assert_eq!(l.end(), 4);
        assert!(matches!(
            l.producers().check(&next(0), 0, 1),
            Check::Duplicate(2, 2)
        ));
        l.truncate_to(3);
        assert!(!l.continues(&next(1), 0));
        assert!(l.extend_continued(1, Entry::plain(1, 9), &next(1)).is_err());
        assert_eq!(l.producers().check(&next(1), 0, 1), Check::Append);
    }

    /// `extend_continued` places a record exactly where `continues` holds and the last
    /// chunk has room, and hands every other record back untouched.
    #[test]
    fn only_a_continuing_record_extends_the_last_run() {
        use crate::partition::ProducerIdentity;
        let a = ProducerIdentity { id: 7, epoch: 0 };
        let b = ProducerIdentity { id: 8, epoch: 0 };
        let next = |id, seq| Stamp::based(id, seq, 0, false);
        let mut l: ReplicaLog<(), u64> = ReplicaLog::new(0);
        let back = |r: Result<(Chunk<(), u64>, u32), Entry<(), u64>>| match r {
            Ok(_) => panic!("placed"),
            Err(e) => *e.value(),
        };
        assert_eq!(
            back(l.extend_continued(1, Entry::plain(1, 0), &next(a, 0))),
            0
        );
        l.append_one(1, Entry::plain(1, 0), 2, Some((a, 0)));
        for (epoch, stamp) in [
            (1, next(a, 2)),
            (1, next(b, 1)),
            (1, next(ProducerIdentity { id: 7, epoch: 1 }, 1)),
            (1, Stamp::NONE),
            (2, next(a, 1)),
        ] {
            assert!(!l.continues(&stamp, 0) || epoch != 1);
            assert_eq!(
                back(l.extend_continued(epoch, Entry::plain(1, 9), &stamp)),
                9
            );
            assert_eq!(l.end(), 1, "{epoch} {stamp:?}");
        }
        let (_, at) = l
            .extend_continued(1, Entry::plain(1, 1), &next(a, 1))
            .unwrap_or_else(|_| panic!("a continues"));
        assert_eq!((at, l.end()), (1, 2));
        // The chunk (room 2) is full: handed back, though it continues.
        assert!(l.continues(&next(a, 2), 0));
        assert_eq!(
            back(l.extend_continued(1, Entry::plain(1, 2), &next(a, 2))),
            2
        );
        assert_eq!(l.end(), 2);
        for offset in 0..2 {
            assert_eq!(l.get(offset).map(|(_, e)| *e.value()), Some(offset));
            assert_eq!(l.stamp_at(offset).map(|s| s.seq), Some(offset as i32));
        }
    }

    /// Pending producer state is applied before a log holds more than `PENDING_MAX`
    /// records without it.
    #[test]
    fn pending_producer_state_stays_bounded() {
        use crate::partition::ProducerIdentity;
        let a = ProducerIdentity { id: 7, epoch: 0 };
        let mut l: ReplicaLog<(), u64> = ReplicaLog::new(0);
        for seq in 0..3 * PENDING_MAX as i32 {
            l.append_one(1, Entry::plain(1, seq as u64), 64, Some((a, seq)));
            assert!(l.end() - l.applied_to <= PENDING_MAX);
        }
        assert_eq!(
            l.producers().get(a.id).and_then(|e| e.last()),
            Some((3 * PENDING_MAX as i32 - 1, 3 * PENDING_MAX - 1))
        );
    }

    /// A follower copying an idempotent producer's records one at a time defers their
    /// producer state (`applied_to`): what it reports is the leader's, after each copy, a
    /// record of another producer, a second run and a truncation.
    #[test]
    fn a_followers_deferred_producer_state_is_the_leaders() {
        use crate::partition::ProducerIdentity;
        let a = ProducerIdentity { id: 7, epoch: 0 };
        let b = ProducerIdentity { id: 8, epoch: 0 };
        let mut leader = ReplicaLog::new(0);
        let mut follower = ReplicaLog::new(0);
        let mut spare = Vec::new();
        let same = |l: &mut ReplicaLog<(), u64>, f: &mut ReplicaLog<(), u64>| {
            for id in [a.id, b.id] {
                assert_eq!(
                    f.producers().get(id).cloned(),
                    l.producers().get(id).cloned(),
                    "producer {id} at offset {}",
                    f.end()
                );
            }
        };
        let sends = [(a, 0), (a, 1), (a, 2), (b, 0), (a, 3), (a, 4), (a, 5)];
        for (i, &(id, seq)) in sends.iter().enumerate() {
            leader.append_one(1, Entry::plain(i as i64, i as u64), 4, Some((id, seq)));
            let to = leader.end();
            follower.copy_from(&leader, to, &mut spare);
            // Read from the fifth copy on only: before, the copies stay deferred and join,
            // and runs change (another producer, a new chunk) with some still deferred.
            if i >= 4 {
                same(&mut leader, &mut follower);
            }
        }
        follower.copy_from(&leader, leader.end(), &mut spare);
        leader.truncate_to(5);
        follower.truncate_to(5);
        same(&mut leader, &mut follower);
        let a_state = follower.producers().get(a.id).cloned().expect("known");
        assert_eq!(a_state.last(), Some((3, 4)));
    }
}
