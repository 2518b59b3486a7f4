//! The replaced segments' files of the cleaning passes (`.deleted`), removed after the pass
//! rather than inside it, as Kafka's log manager hands a replaced segment's deletion to its
//! scheduler (`file.delete.delay.ms`) instead of unlinking in the cleaner: an unlink costs a
//! journal update, milliseconds on some file systems, which neither the pass nor its log's
//! readers and writers need to wait for.
//!
//! - **Who removes them.** Each cleaner thread, at the start of its next round (so a pass
//!   returns, publishes its progress and writes the cleaner checkpoint once its swap is
//!   durable); `Broker::compact_now` before it returns; `close` (and the drop of the last
//!   broker handle) after the cleaner threads are joined, so a clean close leaves none.
//! - **Why it is safe to wait.** A swap's old files are renamed `.deleted` before the swap
//!   completes, and no live file is ever named so: nothing reads them, and nothing brings
//!   them back. Retention, truncation, recovery at open and the deletion of a topic may
//!   remove a file of the same name meanwhile (a segment based at the same offset, deleted
//!   in its turn, or the whole directory): each side takes a file already gone as removed.
//! - **A crash** (or `simulate_process_death`) leaves them: the next open of the log removes
//!   every `.deleted` file, as recovery does for any interrupted deletion.
//! - **A removal that fails** (a failing disk, a directory failed by fault injection) leaves
//!   its pass's remaining files to the next open, which removes them, rather than queuing
//!   them again: a directory that stays failed would fail every later round, and every
//!   `compact_now` and `close` with it. The round that met it reports the error: to
//!   `compact_now` or `close` when they ran it; a cleaner thread's round drops it, as it
//!   drops its passes' errors (the files are garbage nothing reads).

use crate::storage::DeletedFiles;
use crate::sync::{Mutex, WaitSet};
use crate::Result;

/// The deferred removals of one data directory's cleaning passes.
#[derive(Default)]
pub(super) struct PendingRemovals {
    queue: Mutex<Queue>,
    /// Notified when a removal round ends (`finish` waits for the other threads' rounds).
    round_ended: WaitSet,
}

#[derive(Default)]
struct Queue {
    files: Vec<DeletedFiles>,
    /// Removal rounds running (their files taken off `files`).
    rounds: usize,
}

impl PendingRemovals {
    /// Queues a pass's replaced files.
    pub(super) fn defer(&self, files: DeletedFiles) {
        if !files.is_empty() {
            self.queue.lock().files.push(files);
        }
    }

    /// Removes every file queued so far (files another thread is removing meanwhile are
    /// left to it).
    ///
    /// # Errors
    ///
    /// The first removal that failed (its files, and the rest of its pass's, are left to
    /// the next open).
    pub(super) fn remove_queued(&self) -> Result<()> {
        let taken = {
            let mut q = self.queue.lock();
            if q.files.is_empty() {
                return Ok(());
            }
            q.rounds += 1;
            std::mem::take(&mut q.files)
        };
        let mut first_error = None;
        for files in taken {
            if let Err(e) = files.remove() {
                first_error.get_or_insert(e);
            }
        }
        self.queue.lock().rounds -= 1;
        self.round_ended.notify_all();
        first_error.map_or(Ok(()), Err)
    }

    /// Removes every file queued so far and waits for the rounds other threads run: once
    /// it returns, every file queued before the call is gone, or left to the next open
    /// after a failed removal (reported here when this call's own round met it).
    ///
    /// # Errors
    ///
    /// As [`remove_queued`](Self::remove_queued).
    pub(super) fn finish(&self) -> Result<()> {
        let removed = self.remove_queued();
        self.round_ended
            .wait_until(None, || (self.queue.lock().rounds == 0).then_some(()));
        removed
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::storage::io::{DirLock, IoFile, OpenMode};
    use crate::storage::{BatchRecord, CleanConfig, FsIo, Io, LogConfig, LogSetup, SegmentSet};
    use std::path::{Path, PathBuf};

    fn open_on(dir: &Path, io: crate::sync::Arc<dyn Io>) -> SegmentSet {
        let setup = LogSetup {
            config: LogConfig {
                segment_bytes: 4096,
                ..LogConfig::default()
            },
            io,
            ..LogSetup::default()
        };
        SegmentSet::open(dir, setup).unwrap().0
    }

    fn open(dir: &Path) -> SegmentSet {
        open_on(dir, crate::sync::Arc::new(FsIo))
    }

    /// The file system, with removals failing (`EIO`) while `failing` is set.
    #[derive(Debug, Default)]
    struct FailingRemovals {
        failing: crate::sync::atomic::AtomicBool,
    }

    impl Io for FailingRemovals {
        fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<Box<dyn IoFile>> {
            FsIo.open(path, mode)
        }
        fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
            FsIo.list_dir(dir)
        }
        fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
            FsIo.create_dir_all(dir)
        }
        fn remove_file(&self, path: &Path) -> std::io::Result<()> {
            if self.failing.load(crate::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::other("injected removal failure"));
            }
            FsIo.remove_file(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            FsIo.rename(from, to)
        }
        fn remove_dir(&self, dir: &Path) -> std::io::Result<()> {
            FsIo.remove_dir(dir)
        }
        fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
            FsIo.sync_dir(dir)
        }
        fn exists(&self, path: &Path) -> std::io::Result<bool> {
            FsIo.exists(path)
        }
        fn lock_dir(&self, dir: &Path) -> std::io::Result<Box<dyn DirLock>> {
            FsIo.lock_dir(dir)
        }
    }

    /// A log of several segments overwriting 4 keys, cleaned once: its replaced files are
    /// left `.deleted`, taken from the set.
    fn cleaned_log(dir: &Path) -> (SegmentSet, DeletedFiles) {
        clean(open(dir), dir)
    }

    fn clean(mut log: SegmentSet, dir: &Path) -> (SegmentSet, DeletedFiles) {
        let value = [7u8; 100];
        for i in 0..200u32 {
            let key = format!("k{}", i % 4);
            log.append(&[BatchRecord::new(1, Some(key.as_bytes()), &value)])
                .unwrap();
        }
        log.roll().unwrap();
        let stats = log
            .commit_clean(
                log.plan_clean(&CleanConfig::default())
                    .unwrap()
                    .build()
                    .unwrap(),
            )
            .unwrap();
        assert!(stats.segments_cleaned > 1, "{stats:?}");
        let deleted = log.take_deleted_files();
        assert!(!deleted.is_empty());
        assert!(!deleted_files(dir).is_empty());
        (log, deleted)
    }

    fn deleted_files(dir: &Path) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".deleted"))
            .collect()
    }

    /// Deferred files are removed by the next round, and none is left queued.
    #[test]
    fn a_round_removes_the_deferred_files() {
        let tmp = tempfile::tempdir().unwrap();
        let (_log, deleted) = cleaned_log(tmp.path());
        let pending = PendingRemovals::default();
        pending.defer(deleted);
        pending.defer(DeletedFiles::default());
        assert_eq!(
            pending.queue.lock().files.len(),
            1,
            "an empty set is not queued"
        );
        pending.remove_queued().unwrap();
        assert_eq!(deleted_files(tmp.path()), Vec::<PathBuf>::new());
        assert!(pending.queue.lock().files.is_empty());
        pending.finish().unwrap();
    }

    /// Retention (a segment at a replaced file's base deleted in its turn) or a topic's
    /// deletion may take the files first: the round takes them as removed; and the log
    /// reopened beside the pending removal is whole.
    #[test]
    fn files_taken_first_by_retention_or_a_deletion_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let (log, deleted) = cleaned_log(tmp.path());
        let end = log.log_end_offset();
        drop(log);
        let pending = PendingRemovals::default();
        pending.defer(deleted);
        // Retention took one of them (renamed its own file over it and removed it).
        let first = deleted_files(tmp.path())[0].clone();
        std::fs::remove_file(&first).unwrap();
        // The log reopened meanwhile: recovery removes the others first.
        let log = open(tmp.path());
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(deleted_files(tmp.path()), Vec::<PathBuf>::new());
        pending.finish().unwrap();
        drop(log);

        // The whole directory deleted with its topic before the round.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("t-0");
        std::fs::create_dir(&dir).unwrap();
        let (log, deleted) = cleaned_log(&dir);
        drop(log);
        pending.defer(deleted);
        std::fs::remove_dir_all(&dir).unwrap();
        pending.finish().unwrap();
        assert!(pending.queue.lock().files.is_empty());
    }

    /// A crash with removals pending leaves the `.deleted` files; the next open removes them
    /// and reads the cleaned log.
    #[test]
    fn a_crash_with_pending_removals_leaves_files_the_next_open_removes() {
        let tmp = tempfile::tempdir().unwrap();
        let (log, deleted) = cleaned_log(tmp.path());
        let end = log.log_end_offset();
        let start = log.log_start_offset();
        let kept: Vec<u64> = log
            .read_records(start, 1 << 20)
            .unwrap()
            .iter()
            .map(|r| r.0)
            .collect();
        let pending = PendingRemovals::default();
        pending.defer(deleted);
        // The process dies: nothing more runs.
        std::mem::forget(log);
        drop(pending);
        let left = deleted_files(tmp.path());
        assert!(!left.is_empty());
        std::fs::remove_file(tmp.path().join(crate::storage::io::LOCK_FILE)).ok();
        let (log, report) = SegmentSet::open(tmp.path(), LogSetup::default()).unwrap();
        for f in &left {
            assert!(report.removed_files.contains(f), "{f:?} in {report:?}");
        }
        assert_eq!(deleted_files(tmp.path()), Vec::<PathBuf>::new());
        assert_eq!(log.log_end_offset(), end);
        let again: Vec<u64> = log
            .read_records(start, 1 << 20)
            .unwrap()
            .iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(again, kept);
    }

    /// A removal that fails is reported by the round that met it, and its files are left
    /// to the next open, not queued again (a directory that stays failed would fail every
    /// later round, `compact_now` and `close` with it).
    #[test]
    fn a_failed_removal_is_reported_once_and_left_to_the_next_open() {
        let tmp = tempfile::tempdir().unwrap();
        let io = crate::sync::Arc::new(FailingRemovals::default());
        let (log, deleted) = clean(open_on(tmp.path(), io.clone()), tmp.path());
        drop(log);
        let pending = PendingRemovals::default();
        pending.defer(deleted);
        io.failing
            .store(true, crate::sync::atomic::Ordering::SeqCst);
        let err = pending.remove_queued().unwrap_err();
        assert!(err.to_string().contains(".deleted"), "{err}");
        assert!(pending.queue.lock().files.is_empty());
        pending.finish().unwrap();
        let left = deleted_files(tmp.path());
        assert!(!left.is_empty());
        io.failing
            .store(false, crate::sync::atomic::Ordering::SeqCst);
        let (_log, report) = SegmentSet::open(tmp.path(), LogSetup::default()).unwrap();
        for f in &left {
            assert!(report.removed_files.contains(f), "{f:?} in {report:?}");
        }
        assert_eq!(deleted_files(tmp.path()), Vec::<PathBuf>::new());
    }
}
