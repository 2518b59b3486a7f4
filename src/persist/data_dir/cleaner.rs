//! The log cleaner of a data directory: Kafka's `LogCleanerManager` and `CleanerThread`s
//! over the storage layer's passes ([`crate::storage::cleaner`]).
//!
//! - **Which log.** Each round a thread takes the dirtiest log of a topic whose
//!   [`CleanupPolicy`](crate::broker::CleanupPolicy) compacts, among those no other thread is
//!   cleaning, whose dirty ratio (bytes not yet cleaned over cleanable bytes, below the
//!   first uncleanable offset) reaches the topic's `min_cleanable_dirty_ratio`; with none, it
//!   sleeps `log_cleaner_backoff` (woken early by `close`).
//! - **A pass** plans under the log's lock, builds the key map and the `.cleaned` files
//!   without it (the writer appends meanwhile; readers are never held for the rewrite), and
//!   swaps under the lock again; the replaced segments' files are removed after the pass
//!   (`data_dir/removals.rs`). The cell's `cleaning` lock is held for the whole pass, so
//!   the log is never closed or its directory removed under a pass (`close_partition_log`
//!   takes it first).
//! - **Where it got.** The first dirty offset of each partition is kept in Kafka's
//!   `cleaner-offset-checkpoint` in the data directory, written after every pass; a lost
//!   or stale checkpoint costs only a pass over the clean section again.
//! - **Metrics** ([`CleanerProgress`]): per partition, passes, records and bytes removed,
//!   and the dirty section's bytes, in `Broker::describe_topic`'s partitions.
//!
//! The replicas of replicated persisted topics are cleaned by the same threads, each replica's
//! log on its own below its high watermark (`data_dir/replica_cleaner.rs`), in rounds where
//! no single-replica log is dirty enough.

use std::collections::BTreeSet;

use super::{read_tpo, tpo, DataDir, CLEANER_OFFSETS};
use crate::persist::log::LogCell;
use crate::storage::checkpoint;
use crate::storage::{CleanConfig, CleanStats, DirtyInfo};
use crate::sync::StdArc as Arc;
use crate::Result;

/// One compacted partition's cleaner metrics, as
/// [`PartitionInfo::cleaner`](crate::broker::PartitionInfo::cleaner) shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanerProgress {
    /// The first offset not yet cleaned.
    pub first_dirty: u64,
    /// Bytes of the cleanable segments below `first_dirty` (cleaned before), at the last
    /// look.
    pub clean_bytes: u64,
    /// Bytes of the cleanable segments from `first_dirty` on, at the last look.
    pub dirty_bytes: u64,
    /// Cleaning passes that swapped segments since the broker opened.
    pub passes: u64,
    /// Records removed since the broker opened (superseded, or expired tombstones).
    pub records_removed: u64,
    /// Bytes removed since the broker opened (the old segments' less the cleaned ones').
    pub bytes_removed: u64,
}

impl CleanerProgress {
    /// The dirty ratio: `dirty_bytes / (clean_bytes + dirty_bytes)`, 0 when nothing is
    /// cleanable (the active segment is never cleanable).
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }
}

/// A compacted partition's log and its topic's settings.
struct Candidate {
    cell: Arc<LogCell>,
    min_ratio: f64,
    config: CleanConfig,
}

impl DataDir {
    /// The partitions of every open topic whose policy compacts.
    fn compacted_logs(&self) -> Vec<Candidate> {
        let topics: Vec<(String, u32, f64, CleanConfig)> = self
            .metas
            .lock()
            .values()
            .filter(|m| m.cleanup.compacts())
            .map(|m| {
                (
                    m.name.clone(),
                    m.partitions,
                    m.min_cleanable_dirty_ratio,
                    m.clean_config(self.options.dedupe_buffer_size),
                )
            })
            .collect();
        let cells = self.cells.lock();
        let mut out = Vec::new();
        for (name, partitions, min_ratio, config) in topics {
            for p in 0..partitions {
                if let Some(cell) = cells.get(&(name.clone(), p)) {
                    out.push(Candidate {
                        cell: Arc::clone(cell),
                        min_ratio,
                        config,
                    });
                }
            }
        }
        out
    }

    fn first_dirty(&self, cell: &LogCell) -> u64 {
        self.cleaner
            .progress
            .lock()
            .get(&(cell.topic.clone(), cell.partition))
            .map_or(0, |p| p.first_dirty)
    }

    /// Measures `c`'s dirty section now (its first dirty offset and limit set), and
    /// records it in the partition's metrics; `None` for a closed or offline log.
    fn measure(&self, c: &mut Candidate) -> Option<DirtyInfo> {
        c.config.first_dirty = self.first_dirty(&c.cell);
        let info = {
            let log = c.cell.log.lock();
            match log.as_ref() {
                Some(set) if !set.is_offline() => {
                    c.config.limit_offset = set.log_end_offset();
                    set.dirty_info(&c.config)
                }
                _ => return None,
            }
        };
        let mut progress = self.cleaner.progress.lock();
        let p = progress
            .entry((c.cell.topic.clone(), c.cell.partition))
            .or_default();
        p.clean_bytes = info.clean_bytes;
        p.dirty_bytes = info.dirty_bytes;
        Some(info)
    }

    /// Every compacted partition's metrics, its dirty section measured now.
    pub(crate) fn cleaner_snapshot(&self) -> Vec<(String, u32, CleanerProgress)> {
        let mut out = Vec::new();
        for mut c in self.compacted_logs() {
            if self.measure(&mut c).is_some() {
                let key = (c.cell.topic.clone(), c.cell.partition);
                let p = self.cleaner.progress.lock().get(&key).copied();
                out.push((key.0, key.1, p.unwrap_or_default()));
            }
        }
        out
    }

    /// Looks at every compacted log's dirty ratio (updating its metrics) and takes the
    /// dirtiest at or above its topic's minimum (any dirty log with `force`) that no other
    /// thread cleans; marks it in progress.
    fn grab_dirtiest(&self, force: bool) -> Option<Candidate> {
        let mut best: Option<(f64, Candidate)> = None;
        for mut c in self.compacted_logs() {
            let Some(info) = self.measure(&mut c) else {
                continue;
            };
            let key = (c.cell.topic.clone(), c.cell.partition);
            let ratio = info.ratio();
            let eligible = info.dirty_bytes > 0 && (force || ratio >= c.min_ratio);
            if !eligible || self.cleaner.in_progress.lock().contains(&key) {
                continue;
            }
            if best.as_ref().map_or(true, |(r, _)| ratio > *r) {
                best = Some((ratio, c));
            }
        }
        let (_, c) = best?;
        let key = (c.cell.topic.clone(), c.cell.partition);
        // Another thread may have taken it since the look.
        self.cleaner.in_progress.lock().insert(key).then_some(c)
    }

    /// Passes over every dirty compacted log, whatever its ratio, until none is dirty:
    /// `Broker::compact_now` and `logbus compact`.
    ///
    /// # Errors
    ///
    /// The first pass's error (the other logs are still cleaned).
    pub(crate) fn compact_all(&self) -> Result<CleanStats> {
        let mut total = CleanStats::default();
        let mut first_error = None;
        // A pass leaves its log clean up to its first uncleanable offset, or as far as its
        // key map reached (the next pass goes on): bounded by the logs' batches, and by a
        // count for passes that swap nothing (their segments changed meanwhile).
        let mut idle = 0;
        loop {
            let Some(r) = self.clean_dirtiest(true) else {
                // Nothing left to take: once the threads' passes (over logs this call
                // skipped) end, a last look.
                if self.no_pass_in_progress() {
                    break;
                }
                self.cleaner
                    .pass_ended
                    .wait_until(None, || self.no_pass_in_progress().then_some(()));
                continue;
            };
            match r {
                Ok(s) => {
                    total.segments_cleaned += s.segments_cleaned;
                    total.bytes_read += s.bytes_read;
                    total.bytes_written += s.bytes_written;
                    total.records_read += s.records_read;
                    total.records_removed += s.records_removed;
                    total.tombstones_removed += s.tombstones_removed;
                    total.aborted_removed += s.aborted_removed;
                    total.map_full |= s.map_full;
                    total.groups_abandoned += s.groups_abandoned;
                    idle += usize::from(s.segments_cleaned == 0);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                    idle += 1;
                }
            }
            if idle > 64 {
                break;
            }
        }
        // The passes' replaced files are gone when this returns.
        if let Err(e) = self.cleaner.removals.finish() {
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(total), Err)
    }

    /// One pass over the dirtiest compacted log (see the module docs); `None` when no log
    /// is dirty enough. An I/O error in the swap takes that partition offline.
    ///
    /// # Errors
    ///
    /// The pass's error (the partition's log is offline after a failed swap).
    pub(crate) fn clean_dirtiest(&self, force: bool) -> Option<Result<CleanStats>> {
        let Some(c) = self.grab_dirtiest(force) else {
            // The replicas of replicated topics, once no single-replica log is dirty enough.
            return self.clean_dirtiest_replica(force);
        };
        let key = (c.cell.topic.clone(), c.cell.partition);
        let result = self.clean_log(&c);
        self.cleaner.in_progress.lock().remove(&key);
        self.cleaner.pass_ended.notify_all();
        Some(result)
    }

    fn clean_log(&self, c: &Candidate) -> Result<CleanStats> {
        let cell = &c.cell;
        let _cleaning = cell.cleaning.lock();
        let (plan, size_before) = {
            let log = cell.log.lock();
            let Some(set) = log.as_ref() else {
                return Ok(CleanStats::default());
            };
            (set.plan_clean(&c.config)?, set.size_bytes())
        };
        if plan.is_empty() {
            return Ok(CleanStats::default());
        }
        let planned: Vec<(u64, u64)> = plan.segments.iter().map(|s| (s.base, s.size)).collect();
        let cleaned = match plan.build() {
            Ok(cleaned) => cleaned,
            Err(e) => {
                // Retention may have deleted a planned segment meanwhile (or a truncation cut
                // one): nothing wrong, the pass is given up and the next one plans again.
                let log = cell.log.lock();
                let changed = log.as_ref().is_none_or(|set| {
                    let now: Vec<(u64, u64)> = set
                        .segments()
                        .iter()
                        .map(|s| (s.base_offset, s.size))
                        .collect();
                    !planned.iter().all(|p| now.contains(p))
                });
                return if changed {
                    Ok(CleanStats {
                        groups_abandoned: 1,
                        ..CleanStats::default()
                    })
                } else {
                    Err(e)
                };
            }
        };
        let stats = {
            let mut log = cell.log.lock();
            let Some(set) = log.as_mut() else {
                cleaned.discard();
                return Ok(CleanStats::default());
            };
            match set.commit_clean(cleaned) {
                Ok(stats) => (
                    stats,
                    size_before.saturating_sub(set.size_bytes()),
                    set.take_deleted_files(),
                ),
                Err(e) => {
                    drop(log);
                    cell.fail(&e);
                    return Err(e);
                }
            }
        };
        let (stats, removed_bytes, deleted) = stats;
        // The replaced segments' files go after the pass (`data_dir/removals.rs`).
        self.cleaner.removals.defer(deleted);
        {
            let mut progress = self.cleaner.progress.lock();
            let p = progress
                .entry((cell.topic.clone(), cell.partition))
                .or_default();
            p.first_dirty = stats.first_dirty;
            if stats.segments_cleaned > 0 {
                p.passes += 1;
            }
            p.records_removed += stats.records_removed;
            p.bytes_removed += removed_bytes;
            // The section is clean up to `first_dirty` now: looked at again next round.
            p.clean_bytes += p.dirty_bytes;
            p.dirty_bytes = 0;
        }
        // A failure leaves the previous file: the next pass re-cleans a little more.
        let _ = self.write_cleaner_checkpoint();
        Ok(stats)
    }

    /// Writes `cleaner-offset-checkpoint` (the first dirty offset of every partition still
    /// open), with the directory's other checkpoint writers.
    pub(crate) fn write_cleaner_checkpoint(&self) -> Result<()> {
        let _writing = self.checkpointing.lock();
        self.check_open()?;
        let open: BTreeSet<(String, u32)> = self.cells.lock().keys().cloned().collect();
        let entries: Vec<_> = self
            .cleaner
            .progress
            .lock()
            .iter()
            .filter(|(k, _)| open.contains(*k))
            .map(|((t, p), prog)| tpo(t, *p, prog.first_dirty))
            .collect();
        self.note_checkpointed(entries.iter());
        checkpoint::write(&*self.io, &self.dir.join(CLEANER_OFFSETS), &entries)
    }

    /// Forgets the cleaner's progress over topic `topic`'s partitions (deleted, or about
    /// to be created again).
    pub(crate) fn forget_cleaner_progress(&self, topic: &str) {
        self.cleaner.progress.lock().retain(|(t, _), _| t != topic);
    }

    /// The first dirty offsets of the checkpoint (at open).
    pub(crate) fn read_cleaner_checkpoint(&self) -> Result<()> {
        let read = read_tpo(&*self.io, &self.dir.join(CLEANER_OFFSETS))?;
        self.checkpointed
            .lock()
            .extend(read.keys().map(|(t, _)| t.clone()));
        let mut progress = self.cleaner.progress.lock();
        for (key, first_dirty) in read {
            progress.entry(key).or_default().first_dirty = first_dirty;
        }
        Ok(())
    }

    /// A compacted partition's cleaner metrics (`None` for other partitions).
    pub(crate) fn cleaner_progress(&self, topic: &str, partition: u32) -> Option<CleanerProgress> {
        let compacts = self
            .metas
            .lock()
            .get(topic)
            .is_some_and(|m| m.cleanup.compacts());
        if !compacts {
            return None;
        }
        Some(
            self.cleaner
                .progress
                .lock()
                .get(&(topic.to_owned(), partition))
                .copied()
                .unwrap_or_default(),
        )
    }

    /// A cleaner thread's loop: the replaced files of the passes so far removed, then a pass
    /// while a log is dirty enough, else a nap of `log_cleaner_backoff`, until `close`.
    pub(super) fn cleaner_thread(&self) {
        while !self.stopping() {
            // The replaced files of the passes so far (this thread's and others'); what a
            // failed removal leaves, the next open removes.
            let _ = self.cleaner.removals.remove_queued();
            match self.clean_dirtiest(false) {
                Some(Ok(_)) => continue,
                // An error backs off as an idle round does: it may recur.
                Some(Err(_)) | None => {
                    let deadline = crate::sync::time::deadline_after(self.options.cleaner_backoff);
                    self.stop_wait
                        .wait_until(deadline, || self.stopping().then_some(()));
                }
            }
        }
    }
}
