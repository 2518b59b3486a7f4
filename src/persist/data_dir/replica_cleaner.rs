//! The log cleaner over the replicas of replicated persisted topics: which replica's log a
//! cleaner thread takes, as `data_dir/cleaner.rs` chooses among single-replica logs.
//!
//! - **Every replica** of a partition whose topic's policy compacts is a log of its own,
//!   cleaned independently (as each Kafka broker's cleaner cleans the replicas it hosts);
//!   each round takes the dirtiest replica log at or above its topic's
//!   `min_cleanable_dirty_ratio` that no other thread cleans.
//! - **Never past the replica's high watermark**: the replica set computes each replica's
//!   cleanable bound and runs the pass under its own locks (`replica::set::clean`).
//! - **Where it got** is kept in memory per replica, with the replica's disk generation
//!   when it was taken: once the replica's log was cut or reopened since (a truncation by
//!   leader epoch, a directory back), it starts again from the log start, as Kafka truncates
//!   its cleaner checkpoint with the log. After a restart every replica log is cleaned again
//!   from its start once (no record is lost by that; only the pass's work is repeated).
//! - **Of one partition, not of a name**: the progress also names the partition it was
//!   taken on. A topic deleted and created again under the same name starts from its log
//!   start: were the old first dirty offset kept, the new log's records below it would count
//!   as cleaned, never enter a pass's key map, and an expired tombstone there would be dropped
//!   while the older value of its key stayed (the deleted key read again).

use super::{CleanerProgress, DataDir, ReplicaKey};
use crate::persist::replicated::{DiskDirs, DiskPartition};
use crate::storage::{CleanConfig, CleanStats};
use crate::sync::StdArc as Arc;
use crate::sync::StdWeak as Weak;
use crate::Result;

/// Where one replica's cleaning got: its metrics, the replica's disk generation when its
/// first dirty offset was taken, and the partition it was taken on.
pub(super) struct ReplicaProgress {
    pub(super) progress: CleanerProgress,
    generation: u64,
    /// Weak: the progress does not keep a deleted partition alive, and while it is held the
    /// partition's allocation is not reused, so an equal address is the same partition.
    of: Weak<dyn DiskPartition>,
}

impl ReplicaProgress {
    fn new(part: &Arc<dyn DiskPartition>) -> Self {
        Self {
            progress: CleanerProgress::default(),
            generation: 0,
            of: Arc::downgrade(part),
        }
    }

    fn is_of(&self, part: &Arc<dyn DiskPartition>) -> bool {
        std::ptr::addr_eq(self.of.as_ptr(), Arc::as_ptr(part))
    }
}

/// `key`'s progress on `part`: a progress taken on another partition of the same name (a
/// topic deleted and created again) is started over.
fn progress_of<'a>(
    progress: &'a mut std::collections::BTreeMap<ReplicaKey, ReplicaProgress>,
    key: &ReplicaKey,
    part: &Arc<dyn DiskPartition>,
) -> &'a mut ReplicaProgress {
    let entry = progress
        .entry(key.clone())
        .or_insert_with(|| ReplicaProgress::new(part));
    if !entry.is_of(part) {
        *entry = ReplicaProgress::new(part);
    }
    entry
}

/// One replica's log and its topic's settings.
struct ReplicaCandidate {
    part: Arc<dyn DiskPartition>,
    key: ReplicaKey,
    min_ratio: f64,
    config: CleanConfig,
}

impl DataDir {
    /// Lets the cleaner threads compact the replicas of `dirs`' replicated topics.
    pub(crate) fn clean_replicas_of(&self, dirs: &Arc<DiskDirs>) {
        *self.replicated.lock() = Some(Arc::clone(dirs));
    }

    /// Whether no cleaning pass runs, over a single-replica log or a replica's.
    pub(super) fn no_pass_in_progress(&self) -> bool {
        self.cleaner.in_progress.lock().is_empty()
            && self.cleaner.replicas_in_progress.lock().is_empty()
    }

    /// Every replica of every open partition whose topic's policy compacts; the progress
    /// of replicas no longer open (a topic deleted or closed) is forgotten.
    fn compacted_replicas(&self) -> Vec<ReplicaCandidate> {
        let Some(dirs) = self.replicated.lock().clone() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (meta, part) in dirs.compacted_partitions() {
            let config = meta.clean_config(self.options.dedupe_buffer_size);
            let partition = part.partition_number();
            for id in part.replica_ids() {
                out.push(ReplicaCandidate {
                    part: Arc::clone(&part),
                    key: (meta.name.clone(), partition, id),
                    min_ratio: meta.min_cleanable_dirty_ratio,
                    config,
                });
            }
        }
        self.cleaner
            .replica_progress
            .lock()
            .retain(|key, _| out.iter().any(|c| c.key == *key));
        out
    }

    /// Measures `c`'s dirty section now, from its first dirty offset (the log start when
    /// the replica's log changed since it was taken); `None` when it cannot be cleaned now.
    fn measure_replica(&self, c: &mut ReplicaCandidate) -> Option<f64> {
        let (first_dirty, generation) = {
            let mut progress = self.cleaner.replica_progress.lock();
            let p = progress_of(&mut progress, &c.key, &c.part);
            (p.progress.first_dirty, p.generation)
        };
        c.config.first_dirty = first_dirty;
        let (mut info, now) = c.part.replica_dirty_info(c.key.2, &mut c.config)?;
        if now != generation && first_dirty != 0 {
            c.config.first_dirty = 0;
            (info, _) = c.part.replica_dirty_info(c.key.2, &mut c.config)?;
        }
        let mut progress = self.cleaner.replica_progress.lock();
        let entry = progress_of(&mut progress, &c.key, &c.part);
        let p = &mut entry.progress;
        p.first_dirty = c.config.first_dirty;
        p.clean_bytes = info.clean_bytes;
        p.dirty_bytes = info.dirty_bytes;
        entry.generation = now;
        Some(info.ratio()).filter(|_| info.dirty_bytes > 0)
    }

    /// The dirtiest replica log at or above its topic's minimum ratio (any dirty one with
    /// `force`) that no other thread cleans, marked in progress.
    fn grab_dirtiest_replica(&self, force: bool) -> Option<ReplicaCandidate> {
        let mut best: Option<(f64, ReplicaCandidate)> = None;
        for mut c in self.compacted_replicas() {
            let Some(ratio) = self.measure_replica(&mut c) else {
                continue;
            };
            let eligible = force || ratio >= c.min_ratio;
            if !eligible || self.cleaner.replicas_in_progress.lock().contains(&c.key) {
                continue;
            }
            if best.as_ref().map_or(true, |(r, _)| ratio > *r) {
                best = Some((ratio, c));
            }
        }
        let (_, c) = best?;
        // Another thread may have taken it since the look.
        self.cleaner
            .replicas_in_progress
            .lock()
            .insert(c.key.clone())
            .then_some(c)
    }

    /// One pass over the dirtiest replica log; `None` when none is dirty enough.
    ///
    /// # Errors
    ///
    /// The pass's error (the replica is offline after a failed swap).
    pub(super) fn clean_dirtiest_replica(&self, force: bool) -> Option<Result<CleanStats>> {
        let c = self.grab_dirtiest_replica(force)?;
        let result = c.part.clean_replica(c.key.2, &c.config).map(|r| {
            r.map(|(stats, deleted)| {
                // Removed after the pass (`data_dir/removals.rs`).
                self.cleaner.removals.defer(deleted);
                stats
            })
        });
        if let Some(Ok(stats)) = &result {
            let mut progress = self.cleaner.replica_progress.lock();
            let p = &mut progress_of(&mut progress, &c.key, &c.part).progress;
            p.first_dirty = stats.first_dirty;
            if stats.segments_cleaned > 0 {
                p.passes += 1;
                p.clean_bytes += p.dirty_bytes;
                p.dirty_bytes = 0;
            }
            p.records_removed += stats.records_removed;
            p.bytes_removed += stats.bytes_read.saturating_sub(stats.bytes_written);
        }
        self.cleaner.replicas_in_progress.lock().remove(&c.key);
        self.cleaner.pass_ended.notify_all();
        // A replica that cannot be cleaned now (it went offline, or must truncate first) is
        // a pass that did nothing.
        Some(result.unwrap_or_else(|| Ok(CleanStats::default())))
    }

    /// Each replica's cleaner metrics of a replicated topic's partition, by replica id.
    pub(crate) fn replica_cleaner_progress(
        &self,
        topic: &str,
        partition: u32,
    ) -> Vec<(u32, CleanerProgress)> {
        self.cleaner
            .replica_progress
            .lock()
            .iter()
            .filter(|((t, p, _), _)| t == topic && *p == partition)
            .map(|((_, _, id), p)| (*id, p.progress))
            .collect()
    }
}
