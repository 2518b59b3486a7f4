//! Helpers shared by the storage integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use logbus::storage::{verify_dir, Checkpoints, Io, LogConfig, Record, RecoveryReport, SegmentSet};
use logbus::{Clock, ManualClock};

pub const T0: i64 = 1_700_000_000_000;

pub fn record(i: u64, size: usize) -> Record {
    let mut value = vec![(i % 251) as u8; size];
    value[..8.min(size)].copy_from_slice(&i.to_be_bytes()[..8.min(size)]);
    Record {
        timestamp: T0 + i as i64,
        key: if i % 3 == 0 {
            None
        } else {
            Some(format!("key-{i}").into_bytes())
        },
        value: Some(value),
        headers: Vec::new(),
    }
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        write_buffer_bytes: 0,
        ..LogConfig::default()
    }
}

pub fn open(
    dir: &Path,
    config: LogConfig,
    io: Arc<dyn Io>,
    clock: Arc<dyn Clock>,
    checkpoints: Checkpoints,
) -> (SegmentSet, RecoveryReport) {
    SegmentSet::open(dir, config, io, clock, checkpoints).expect("open")
}

pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0))
}

/// Every record from the log start to the log end, by repeated reads (a read that returns
/// nothing means no record lies between it and the log end: offsets may end in a gap).
pub fn read_all(log: &SegmentSet) -> Vec<(u64, Record)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let batch = log.read_records(next, 64 << 10).expect("read");
        let Some(last) = batch.last() else {
            break;
        };
        assert!(last.0 >= next, "read at {next} went back to {}", last.0);
        next = last.0 + 1;
        out.extend(batch);
    }
    out
}

/// Asserts that `verify_dir` finds no problem.
pub fn assert_consistent(io: &dyn Io, dir: &Path) {
    let report = verify_dir(io, dir).expect("verify");
    assert_eq!(report.problem, None, "verify_dir: {report:?}");
}
