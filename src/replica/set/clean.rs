//! The log cleaner's access to a persisted partition's replicas: every replica's log is
//! compacted on its own, as each Kafka broker's cleaner compacts the replicas it hosts.
//!
//! **The cleanable bound.** A pass never cleans at or past the replica's own high
//! watermark, Kafka's rule (its cleaner stops at the last stable offset, which is never past
//! the replica's high watermark): for the leader, the partition's HW; for a follower,
//! `min(partition HW, its log end)` — what it fetched from the current leader below the HW
//! —, and nothing while it must still truncate by leader epoch after an election or a
//! restart (its tail may diverge from the leader's until then). The storage layer's pass
//! lowers the bound further to the active segment's base, the first segment holding a record
//! younger than `min_compaction_lag` and the first unstable offset (an open transaction).
//!
//! Why a clean never has to be undone: a cleaned record is dropped only for a later record
//! of its key below the bound, and a clean election's truncation (KIP-101, by leader epoch)
//! never cuts below the high watermark, since every in-sync replica holds the committed
//! prefix. What can cut below it is what loses committed records anyway, reported as
//! `RecordsLost`: an unclean election, or the last in-sync replica reopening after a power
//! loss took its unsynced tail; a key whose later record is lost that way may then have lost
//! its older value to cleaning too, as in Kafka. A truncation or a replaced store between a pass's plan
//! and its swap makes the pass swap nothing (`disk_generation`), and the storage layer
//! swaps no group whose segments changed.
//!
//! **Tombstones wait for every replica.** A replica that holds a key's value but not yet its
//! tombstone, fetching after the leader's cleaner dropped both (the tombstone expired),
//! would step over the gap and keep the value: a deleted key back when it leads. So a
//! tombstone expires only below every replica's log end, the offline ones' included (Kafka
//! lets it expire by age alone, and documents the divergence for a replica behind longer
//! than `delete.retention.ms`). A replica offline for good holds tombstones back: space, not
//! correctness.
//!
//! Offsets never change: a cleaned log has gaps, which follower fetches and consumer reads
//! step over (a fetch at a cleaned-away offset continues at the next record). The records
//! in memory (the tail) are not cleaned: a reader there sees superseded values as well,
//! which compaction allows (it promises each key's latest value, not only it).

use super::{ReplicaSet, State, Status};
use crate::storage::{CleanConfig, CleanStats, DeletedFiles, DirtyInfo};
use crate::Result;

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicaSet<K, V> {
    /// Replica `i`'s cleanable bound (module docs); `None` when it cannot be cleaned now.
    fn cleanable_bound(st: &State<K, V>, i: usize) -> Option<u64> {
        let l = st.leader?;
        let r = st.replicas.get(i)?;
        if st.closed || r.status != Status::Online || r.store.is_none() || r.needs_truncation {
            return None;
        }
        Some(if i == l {
            st.hw
        } else {
            st.hw.min(r.log.end())
        })
    }

    /// The replica ids (data directories) of the partition.
    pub(crate) fn replica_ids(&self) -> Vec<u32> {
        self.state.lock().replicas.iter().map(|r| r.id).collect()
    }

    /// How dirty replica `id`'s log is below its cleanable bound (set in
    /// `config.limit_offset`), and its disk generation; `None` when it cannot be cleaned
    /// now.
    pub(crate) fn replica_dirty_info(
        &self,
        id: u32,
        config: &mut CleanConfig,
    ) -> Option<(DirtyInfo, u64)> {
        let st = self.state.lock();
        let i = Self::index(&st, id)?;
        config.limit_offset = Self::cleanable_bound(&st, i)?;
        let r = &st.replicas[i];
        Some((r.store.as_ref()?.dirty_info(config), r.disk_generation))
    }

    /// One cleaning pass over replica `id`'s log: planned under the partition's lock, built
    /// without it (appends and fetches go on), swapped in under it again; the replaced
    /// segments' files are returned, for the caller to remove without the lock. `None` when
    /// the replica cannot be cleaned now. An I/O error in the swap takes the replica offline, as
    /// a failed write does.
    ///
    /// # Errors
    ///
    /// The pass's error.
    pub(crate) fn clean_replica(
        &self,
        id: u32,
        config: &CleanConfig,
    ) -> Option<Result<(CleanStats, DeletedFiles)>> {
        let _cleaning = self.cleaning.lock();
        let (plan, generation) = {
            let st = self.state.lock();
            let i = Self::index(&st, id)?;
            let bound = Self::cleanable_bound(&st, i)?;
            let r = &st.replicas[i];
            // Every replica's log end, the offline ones' too (a restarted replica fetches
            // from its end): a tombstone none of them lacks may expire.
            let fetched_by_all = st.replicas.iter().map(|r| r.log.end()).min().unwrap_or(0);
            let config = CleanConfig {
                limit_offset: bound.min(config.limit_offset),
                keep_tombstones_from: fetched_by_all.min(config.keep_tombstones_from),
                ..*config
            };
            (r.store.as_ref()?.plan_clean(&config), r.disk_generation)
        };
        let plan = match plan {
            Ok(plan) => plan,
            Err(e) => return Some(Err(e)),
        };
        if plan.is_empty() {
            return Some(Ok((
                CleanStats {
                    first_dirty: config.first_dirty,
                    ..CleanStats::default()
                },
                DeletedFiles::default(),
            )));
        }
        let built = plan.build();
        let mut st = self.state.lock();
        let i = Self::index(&st, id)?;
        let unchanged = !st.closed
            && st.replicas[i].status == Status::Online
            && st.replicas[i].disk_generation == generation;
        // The pass given up, its progress unchanged: planned again next time.
        let abandoned = || {
            let stats = CleanStats {
                groups_abandoned: 1,
                first_dirty: config.first_dirty,
                ..CleanStats::default()
            };
            Some(Ok((stats, DeletedFiles::default())))
        };
        let cleaned = match built {
            Ok(cleaned) => cleaned,
            // Cut or reopened meanwhile (a planned segment gone).
            Err(_) if !unchanged => return abandoned(),
            Err(e) => return Some(Err(e)),
        };
        let store = match st.replicas[i].store.as_mut() {
            Some(store) if unchanged => store,
            _ => {
                cleaned.discard();
                return abandoned();
            }
        };
        match store.commit_clean(cleaned) {
            Ok(committed) => Some(Ok(committed)),
            Err(e) => {
                self.disk_failed(&mut st, i);
                Some(Err(e))
            }
        }
    }
}
