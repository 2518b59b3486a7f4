//! A replicated partition's disk side: persisted replicas' appends, truncations and epoch
//! files, a failing directory taking its replica offline, the partition state handed to
//! the topic's metadata files, and a partition rebuilt from disk at open.

use super::{ReplicaSet, State, Status};
use crate::partition::producer_state::Stamp;
use crate::partition::replica_log::ReplicaLog;
use crate::partition::{AppendError, Entry};
use crate::persist::replica_store::{ReplicaStore, Stored};
use crate::persist::replicated::{Backing, DiskPartition, PartState};
use crate::replica::events::EventKind;
use crate::storage::{CleanConfig, CleanStats, DeletedFiles, DirtyInfo};
use crate::sync::atomic::Ordering;
use crate::sync::StdArc as Arc;
use crate::Result;

/// One replica as opened from disk: its store and log, or `None` if its directory failed.
pub(crate) type Opened<K, V> = Option<(Box<dyn ReplicaStore<K, V>>, ReplicaLog<K, V>)>;

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicaSet<K, V> {
    /// Makes this a persisted partition: `replicas[i]` is replica `i`'s disk side (`None`:
    /// its directory is unusable), `state` what the metadata files last said (`None`: a
    /// new partition, led by its first replica in epoch 0). A reopened partition elects
    /// the in-sync replica with the latest epoch and longest log, in a new epoch; every
    /// other replica truncates by epoch before it fetches.
    pub(crate) fn attach_disk(
        mut self,
        backing: Arc<dyn Backing<K, V>>,
        replicas: Vec<Opened<K, V>>,
        state: Option<&PartState>,
    ) -> Self {
        self.backing = Some(backing);
        self.init_from_disk(replicas, state);
        self
    }

    fn init_from_disk(&self, replicas: Vec<Opened<K, V>>, state: Option<&PartState>) {
        let mut st = self.state.lock();
        for (r, opened) in st.replicas.iter_mut().zip(replicas) {
            match opened {
                Some((store, log)) => {
                    r.store = Some(store);
                    r.log = log;
                    r.known_leo = r.log.end();
                }
                None => {
                    r.status = Status::DirFailed;
                    r.log = ReplicaLog::new(0);
                    r.known_leo = 0;
                }
            }
        }
        if let Some(saved) = state {
            let ids: Vec<u32> = st.replicas.iter().map(|r| r.id).collect();
            let isr: Vec<usize> = saved
                .isr
                .iter()
                .filter_map(|id| ids.iter().position(|x| x == id))
                .collect();
            if !isr.is_empty() {
                st.isr = isr;
            }
            st.epoch = saved.epoch;
            self.mirror_epoch(&st);
            st.hw = saved.hw;
            // Release: as in `advance_hw`.
            self.hw.store(saved.hw, Ordering::Release);
        }
        let failed: Vec<usize> = (0..st.replicas.len())
            .filter(|&i| st.replicas[i].status != Status::Online)
            .collect();
        for i in failed {
            self.remove_from_isr(&mut st, i, "directory failed");
        }
        let fresh_leader_ok = state.is_none() && st.replicas[0].status == Status::Online;
        if fresh_leader_ok {
            st.replicas[0].log.begin_epoch(0);
            if self.save_epochs(&mut st, 0) {
                self.save_state(&st);
                return;
            }
        }
        st.leader = None;
        self.elect_from(&mut st, state.is_some());
    }

    /// Appends `records` to replica `i`'s disk, if persisted. Nothing is appended on an
    /// error: `TooLarge` for a record the topic does not take, `NotLeader` when the
    /// directory failed (the replica is offline now).
    pub(super) fn append_to_disk<'a>(
        &self,
        st: &mut State<K, V>,
        i: usize,
        records: impl Iterator<Item = (i32, Stamp, &'a Entry<K, V>)>,
    ) -> std::result::Result<(), AppendError> {
        let r = &mut st.replicas[i];
        let Some(store) = r.store.as_mut() else {
            return Ok(());
        };
        let records: Vec<_> = records.collect();
        if let Some((size, max)) = store.too_large(&records) {
            // Refused before anything is written: the directory is fine.
            return Err(AppendError::TooLarge(size, max));
        }
        match store.append(r.log.end(), &records) {
            Ok(()) => Ok(()),
            Err(_) => {
                self.disk_failed(st, i);
                Err(AppendError::NotLeader)
            }
        }
    }

    /// Writes replica `i`'s leader-epoch cache if it changed; `false` when its directory
    /// failed.
    pub(super) fn save_epochs(&self, st: &mut State<K, V>, i: usize) -> bool {
        let r = &mut st.replicas[i];
        let Some(store) = r.store.as_mut() else {
            return true;
        };
        match store.save_epochs(r.log.epochs()) {
            Ok(()) => true,
            Err(_) => {
                self.disk_failed(st, i);
                false
            }
        }
    }

    /// Cuts replica `i`'s log at `offset` (its disk first: whole batches, so perhaps
    /// lower); `false` when its directory failed.
    pub(super) fn cut(&self, st: &mut State<K, V>, i: usize, offset: u64) -> bool {
        let r = &mut st.replicas[i];
        r.disk_generation += 1;
        let at = match r.store.as_mut().map(|s| s.truncate_to(offset)) {
            None => offset,
            Some(Ok(end)) => end,
            Some(Err(_)) => {
                self.disk_failed(st, i);
                return false;
            }
        };
        st.replicas[i].log.truncate_to(at);
        self.save_epochs(st, i)
    }

    /// Starts replica `i`'s log over at `start` (too far behind the leader).
    pub(super) fn reset_replica(&self, st: &mut State<K, V>, i: usize, start: u64) {
        if st.replicas[i].store.is_some() {
            if !self.cut(st, i, start) {
                return;
            }
            let r = &mut st.replicas[i];
            if r.log.end() == start {
                return;
            }
        }
        st.replicas[i].log.reset_to(start);
        // Its producers' states: the leader's as of `start` (Kafka's follower takes the
        // leader's snapshot when it starts over); the records it copies next apply theirs.
        if let Some(l) = st.leader.filter(|&l| l != i) {
            let mut states = st.replicas[l].log.producers().clone();
            states.truncate(start);
            *st.replicas[i].log.producers_mut() = states;
        }
    }

    /// Replica `i`'s records in `from..to` from its disk, with their offsets (gaps kept),
    /// and the next offset to read (past the last record or batch read; `from` when nothing
    /// was there); `None` when its directory failed.
    pub(super) fn read_disk_sparse(
        &self,
        st: &mut State<K, V>,
        i: usize,
        from: u64,
        to: u64,
    ) -> Option<(Vec<Stored<K, V>>, u64)> {
        let r = &st.replicas[i];
        let store = r.store.as_ref()?;
        let max = usize::try_from(to.saturating_sub(from)).unwrap_or(usize::MAX);
        match store.read(from, to, max) {
            Ok(read) => Some(read),
            Err(_) => {
                self.disk_failed(st, i);
                None
            }
        }
    }

    /// Where leader `l`'s disk answers `offset_for_time` (a record below its tail in
    /// memory, hence below HW): `Some(answer)`, or `None` to look in memory.
    pub(super) fn disk_offset_for_time(
        &self,
        st: &mut State<K, V>,
        l: usize,
        timestamp: i64,
    ) -> Option<Option<(u64, i64)>> {
        let r = &st.replicas[l];
        if r.log.log_start() >= r.log.start() {
            return None;
        }
        match r.store.as_ref()?.offset_for_time(timestamp) {
            Ok(Some((offset, ts))) if offset < r.log.start() => Some(Some((offset, ts))),
            Ok(_) => None,
            Err(_) => {
                self.disk_failed(st, l);
                Some(None)
            }
        }
    }

    /// Replica `i`'s directory returned an I/O error: it goes offline with its log, leaves
    /// the ISR, a new leader is elected if it led, and the topic's files hear of it (so
    /// every other replica on that directory goes too).
    pub(super) fn disk_failed(&self, st: &mut State<K, V>, i: usize) {
        let r = &mut st.replicas[i];
        if r.status == Status::DirFailed {
            return;
        }
        let id = r.id;
        let start = r.log.start();
        r.log.reset_to(start);
        r.status = Status::DirFailed;
        r.known_leo = 0;
        drop(r.store.take());
        r.disk_generation += 1;
        self.event(EventKind::Crashed {
            replica: id,
            lost_from: Some(start),
        });
        self.remove_from_isr(st, i, "directory failed");
        if st.leader == Some(i) {
            st.leader = None;
            self.elect(st);
        }
        let moved = self.advance_hw(st);
        self.notify(moved);
        if let Some(b) = &self.backing {
            b.dir_failed(id);
        }
    }

    /// Hands the partition's state to its metadata files (persisted partitions).
    pub(super) fn save_state(&self, st: &State<K, V>) {
        if let Some(b) = &self.backing {
            b.save_state(self.partition, &Self::part_state(st));
        }
    }

    fn part_state(st: &State<K, V>) -> PartState {
        PartState {
            replicas: st.replicas.iter().map(|r| r.id).collect(),
            leader: st.leader.map(|l| st.replicas[l].id),
            epoch: st.epoch,
            isr: Self::isr_ids(st),
            hw: st.hw,
        }
    }

    /// Fsyncs every replica's log (`Topic::fsync`, `Broker::fsync_and_checkpoint`). A replica whose sync
    /// fails goes offline; the first error.
    pub(crate) fn sync_disk(&self) -> Result<()> {
        let mut st = self.state.lock();
        let mut first = Ok(());
        for i in 0..st.replicas.len() {
            let Some(store) = st.replicas[i].store.as_mut() else {
                continue;
            };
            if let Err(e) = store.sync() {
                self.disk_failed(&mut st, i);
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// [`sync_disk`](Self::sync_disk), then the partition state saved with its high
    /// watermark (`Broker::fsync_and_checkpoint`): every replica holds what lies below
    /// the HW, fsynced now, so after a crash the partition reopens with those records (and
    /// the group offsets checkpointed up to them) readable, not with the HW of its last
    /// leader or ISR change. Not on every sync: a metadata write per batch.
    pub(crate) fn sync_and_save_state(&self) -> Result<()> {
        self.sync_disk()?;
        let st = self.state.lock();
        if !st.closed {
            self.save_state(&st);
        }
        Ok(())
    }

    /// Closes a persisted partition: no more appends or fetches, every replica's log
    /// closed (fsynced), the final state (with HW) saved. The first error.
    /// `for_broker`: closed by `Broker::close` (sends then say so), not by a delete; the
    /// partition's flag is marked already then, unless the topic was registered after
    /// `Broker::close` closed the broker's topics.
    pub(crate) fn close_disk(&self, for_broker: bool) -> Result<()> {
        if for_broker {
            // Before the lock: a send that finds the set closed under it reads the flag set.
            self.broker_closed.mark();
        }
        // A cleaning pass in progress ends first (it writes in the replicas' directories).
        let _cleaning = self.cleaning.lock();
        let mut st = self.state.lock();
        st.closed = true;
        let mut first = Ok(());
        for r in &mut st.replicas {
            if let Some(store) = r.store.take() {
                if let Err(e) = store.close() {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        self.save_state(&st);
        drop(st);
        self.changed.notify_all();
        self.arrivals.notify_all();
        first
    }

    /// A dead process: stops, writing nothing more.
    pub(crate) fn abandon_disk(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        for r in &mut st.replicas {
            if let Some(store) = r.store.take() {
                store.abandon();
            }
        }
        drop(st);
        self.changed.notify_all();
        self.arrivals.notify_all();
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> DiskPartition for ReplicaSet<K, V> {
    fn topic_name(&self) -> &str {
        ReplicaSet::topic(self)
    }
    fn close_disk(&self, for_broker: bool) -> Result<()> {
        ReplicaSet::close_disk(self, for_broker)
    }
    fn sync_and_save_state(&self) -> Result<()> {
        ReplicaSet::sync_and_save_state(self)
    }
    fn abandon_disk(&self) {
        ReplicaSet::abandon_disk(self);
    }
    fn partition_number(&self) -> u32 {
        ReplicaSet::partition(self)
    }
    fn replica_ids(&self) -> Vec<u32> {
        ReplicaSet::replica_ids(self)
    }
    fn replica_dirty_info(&self, id: u32, config: &mut CleanConfig) -> Option<(DirtyInfo, u64)> {
        ReplicaSet::replica_dirty_info(self, id, config)
    }
    fn clean_replica(
        &self,
        id: u32,
        config: &CleanConfig,
    ) -> Option<Result<(CleanStats, DeletedFiles)>> {
        ReplicaSet::clean_replica(self, id, config)
    }
}
