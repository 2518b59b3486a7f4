//! Lives of a partition log on one simulated disk ([`FaultyIo`]): each life opens the
//! directory, appends (with offset gaps now and then), syncs, flushes, and ends in a clean
//! close, a killed process (the page cache keeps every write), a power loss, or a failed fsync
//! or write followed by a kill or a power loss. Across every life, nothing the log called
//! durable — a `sync` or `close` that returned `Ok`, or the recovery point an open reported —
//! is ever lost, and the log is always a prefix of what was appended.
//!
//! `LOGBUS_POWER_LOSS_SEEDS` runs more seeds (default 1000).

use crate::storage_common;

use std::path::PathBuf;
use std::sync::Arc;

use logbus::storage::fault::{Fault, FaultyIo};
use logbus::storage::record_batch::encode_batch;
use logbus::storage::{BatchRecord, Checkpoints, Io, LogConfig, LogSetup, SegmentSet};
use storage_common::*;

fn dir() -> PathBuf {
    PathBuf::from("/data/orders-0")
}

/// How a life ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Close,
    Kill,
    PowerLoss,
    FailedSyncThenKill,
    FailedSyncThenPowerLoss,
    FailedWriteThenKill,
}

const ENDS: [End; 6] = [
    End::Close,
    End::Kill,
    End::PowerLoss,
    End::FailedSyncThenKill,
    End::FailedSyncThenPowerLoss,
    End::FailedWriteThenKill,
];

struct Disk {
    seed: u64,
    fs: FaultyIo,
    /// Every record appended that may be in the log, in order: what is read back must be a
    /// prefix of it.
    written: Vec<(u64, BatchRecord)>,
    /// Records below this offset were called durable.
    durable: u64,
    /// What the application persisted for the next open.
    checkpoints: Checkpoints,
}

impl Disk {
    fn durable_count(&self) -> usize {
        self.written.partition_point(|(o, _)| *o < self.durable)
    }

    /// Opens the log and checks it against what was written and called durable.
    fn open(&mut self, config: &LogConfig, life: usize) -> SegmentSet {
        let io: Arc<dyn Io> = Arc::new(self.fs.clone());
        let (log, report) = SegmentSet::open(
            dir(),
            LogSetup {
                config: config.clone(),
                io,
                clock: clock(),
                checkpoints: self.checkpoints,
            },
        )
        .unwrap();
        let seed = self.seed;
        let all = read_all(&log);
        assert!(
            all.len() >= self.durable_count(),
            "seed {seed} life {life}: lost durable records ({} < {}, durable below {}); {report:?}",
            all.len(),
            self.durable_count(),
            self.durable
        );
        assert!(
            all.len() <= self.written.len(),
            "seed {seed} life {life}: records from nowhere"
        );
        for (got, want) in all.iter().zip(&self.written) {
            assert_eq!(
                got, want,
                "seed {seed} life {life}: not a prefix of what was appended"
            );
        }
        assert_consistent(&self.fs, &dir());
        self.written.truncate(all.len());
        // The recovery point an open reports is a promise too.
        assert!(report.recovery_point <= log.log_end_offset());
        self.durable = self.durable.max(report.recovery_point);
        self.checkpoints = Checkpoints {
            recovery_point: log.recovery_point(),
            log_start_offset: log.log_start_offset(),
            clean_shutdown: false,
        };
        log
    }
}

#[test]
fn nothing_called_durable_is_lost_across_kills_power_losses_and_failed_fsyncs() {
    let seeds: u64 = std::env::var("LOGBUS_POWER_LOSS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let mut ends = [0usize; ENDS.len()];
    for seed in 0..seeds {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
        let config = LogConfig {
            segment_bytes: rng.u64(1000..3000),
            index_interval_bytes: rng.i64(0..500),
            write_buffer_bytes: [0, 300, 4096][rng.usize(0..3)],
            ..LogConfig::default()
        };
        let mut disk = Disk {
            seed,
            fs: FaultyIo::new(seed),
            written: Vec::new(),
            durable: 0,
            checkpoints: Checkpoints::default(),
        };
        for life in 0..rng.usize(2..6) {
            let mut log = disk.open(&config, life);
            let end = ENDS[rng.usize(0..ENDS.len())];
            ends[ENDS.iter().position(|e| *e == end).unwrap_or(0)] += 1;
            let mut failed = false;
            for step in 0..rng.usize(1..30) {
                let next = log.log_end_offset();
                let n = rng.usize(1..4);
                let base = if rng.u8(0..8) == 0 {
                    next + rng.u64(1..50)
                } else {
                    next
                };
                let records: Vec<BatchRecord> = (0..n)
                    .map(|k| record(base + k as u64, rng.usize(1..150)))
                    .collect();
                if matches!(end, End::FailedWriteThenKill) && step > 2 && !failed {
                    disk.fs.inject(Fault::WriteError, 0);
                }
                let appended = if base == next && rng.bool() {
                    log.append(&records).map(|_| ())
                } else {
                    log.append_batch(&encode_batch(base, &records).unwrap())
                        .map(|_| ())
                };
                match appended {
                    Ok(()) => {
                        for (k, r) in records.into_iter().enumerate() {
                            disk.written.push((base + k as u64, r));
                        }
                    }
                    Err(e) => {
                        // A failed write took the log offline; what it wrote may be anywhere.
                        assert!(matches!(end, End::FailedWriteThenKill), "seed {seed}: {e}");
                        assert!(log.is_offline());
                        failed = true;
                        break;
                    }
                }
                let done = match rng.u8(0..6) {
                    0 => log.fsync().map(|()| {
                        disk.durable = log.log_end_offset();
                        disk.checkpoints.recovery_point = log.recovery_point();
                    }),
                    1 => log.write_to_files(),
                    _ => Ok(()),
                };
                if let Err(e) = done {
                    // Only the injected write error may fail a step.
                    assert!(matches!(end, End::FailedWriteThenKill), "seed {seed}: {e}");
                    assert!(log.is_offline());
                    failed = true;
                    break;
                }
                // A roll fsyncs what it leaves: the recovery point may move on its own.
                disk.durable = disk.durable.max(log.recovery_point());
            }
            disk.fs.clear_faults();
            match end {
                End::Close if !failed => {
                    disk.checkpoints = log.close().unwrap();
                    disk.durable = disk.checkpoints.recovery_point;
                }
                End::FailedSyncThenKill | End::FailedSyncThenPowerLoss if !failed => {
                    // Appends since the last sync (if any) meet a failing fsync; with nothing
                    // to fsync, sync succeeds without one.
                    disk.fs.inject(Fault::SyncError, 0);
                    if log.fsync().is_ok() {
                        disk.durable = log.log_end_offset();
                    }
                    disk.fs.clear_faults();
                    drop(log);
                }
                _ => drop(log),
            }
            match end {
                End::PowerLoss | End::FailedSyncThenPowerLoss => disk.fs.crash(),
                _ => disk.fs.kill(),
            }
            // Now and then the power goes right after a kill, too.
            if rng.u8(0..4) == 0 {
                disk.fs.crash();
            }
        }
        // A last life checks the final state.
        drop(disk.open(&config, usize::MAX));
    }
    assert!(ends.iter().all(|&n| n > 0 || seeds < 100), "{ends:?}");
}

/// An index file that open recreates (it was missing) is in the directory durably once the
/// open returns: a power loss right after does not take it away again, so the directory
/// verifies with every index present (the recovery point the open reported covers it).
#[test]
fn an_index_rebuilt_at_open_survives_a_power_loss() {
    let config = LogConfig {
        segment_bytes: 4096,
        ..LogConfig::default()
    };
    for seed in 0..16 {
        let fs = FaultyIo::new(seed);
        let io: Arc<dyn Io> = Arc::new(fs.clone());
        let mut log = SegmentSet::open(
            dir(),
            LogSetup {
                config: config.clone(),
                io: Arc::clone(&io),
                clock: clock(),
                ..LogSetup::default()
            },
        )
        .unwrap()
        .0;
        for i in 0..200u64 {
            log.append(&[BatchRecord::new(1_000 + i as i64, None, &[i as u8; 100])])
                .unwrap();
        }
        let closed = log.close().unwrap();
        let index = dir().join("00000000000000000000.index");
        io.remove_file(&index).unwrap();
        io.sync_dir(&dir()).unwrap();
        let (log, report) = SegmentSet::open(
            dir(),
            LogSetup {
                config: config.clone(),
                io: Arc::clone(&io),
                clock: clock(),
                checkpoints: closed,
            },
        )
        .unwrap();
        assert!(report.rebuilt_indexes.contains(&index), "{report:?}");
        std::mem::forget(log);
        fs.crash();
        let verified = logbus::storage::verify_dir(&fs, &dir()).unwrap();
        assert!(
            verified.problem.is_none(),
            "seed {seed}: {:?}",
            verified.problem
        );
    }
}
