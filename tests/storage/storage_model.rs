//! Segment-set operations (append, roll, truncate, retention, reopen, lookups) against a plain
//! in-memory model: a list of batches and a log start offset.

use crate::storage_common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use logbus::storage::fault::FaultyIo;
use logbus::storage::{BatchRecord, Checkpoints, Io, LogConfig, LogSetup, SegmentSet};
use logbus::{Clock, ManualClock};
use proptest::prelude::*;
use storage_common::*;

#[derive(Debug, Clone)]
enum Op {
    /// Records with these value sizes and timestamp offsets from the clock.
    Append(Vec<(usize, i64)>),
    Sync,
    Roll,
    /// Truncate to start + frac * (end - start) / 256.
    Truncate(u8),
    AdvanceClock(u32),
    /// Retention with limit = start + frac * (end - start) / 255 (255: the log end).
    Retention(u8),
    Reopen,
    /// Check a read at start + frac * (end - start) / 256.
    Read(u8),
    /// Check a timestamp lookup at clock + delta.
    FindTime(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::collection::vec((0usize..250, -50i64..50), 1..5).prop_map(Op::Append),
        1 => Just(Op::Sync),
        1 => Just(Op::Roll),
        1 => any::<u8>().prop_map(Op::Truncate),
        1 => (0u32..20_000).prop_map(Op::AdvanceClock),
        1 => any::<u8>().prop_map(Op::Retention),
        1 => Just(Op::Reopen),
        2 => any::<u8>().prop_map(Op::Read),
        2 => (-30_000i64..1000).prop_map(Op::FindTime),
    ]
}

fn config() -> impl Strategy<Value = LogConfig> {
    (
        1500u64..5000,
        prop_oneof![Just(i64::MAX / 4), 5_000i64..50_000],
        prop_oneof![Just(10u64 << 20), 24u64..200],
        0i64..1200,
        prop_oneof![Just(-1i64), 1_000i64..60_000],
        prop_oneof![Just(-1i64), 2_000i64..20_000],
        prop_oneof![Just(0usize), Just(4096)],
    )
        .prop_map(
            |(
                segment_bytes,
                segment_ms,
                index_bytes,
                interval,
                retention_ms,
                retention_bytes,
                buffer,
            )| {
                LogConfig {
                    segment_bytes,
                    segment_ms,
                    segment_index_bytes: index_bytes,
                    index_interval_bytes: interval,
                    retention_ms,
                    retention_bytes,
                    write_buffer_bytes: buffer,
                    ..LogConfig::default()
                }
            },
        )
}

struct Model {
    batches: Vec<Vec<(u64, BatchRecord)>>,
    start: u64,
    end: u64,
}

impl Model {
    fn records(&self) -> Vec<(u64, BatchRecord)> {
        self.batches
            .iter()
            .flatten()
            .filter(|(o, _)| *o >= self.start)
            .cloned()
            .collect()
    }
}

fn at(start: u64, end: u64, frac: u8, denom: u64) -> u64 {
    start + (end - start) * u64::from(frac) / denom
}

fn run(config: LogConfig, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fs = FaultyIo::new(0);
    let io: Arc<dyn Io> = Arc::new(fs.clone());
    let dir = PathBuf::from("/model/p-0");
    let clock = Arc::new(ManualClock::new(T0));
    let reopen = |cp: Checkpoints| -> SegmentSet {
        let (log, report) = SegmentSet::open(
            &dir,
            LogSetup {
                config: config.clone(),
                io: io.clone(),
                clock: clock.clone() as Arc<dyn Clock>,
                checkpoints: cp,
            },
        )
        .expect("open");
        assert!(report.truncation.is_none(), "{report:?}");
        if cp.clean_shutdown {
            assert_eq!(report.segments_recovered, 0, "clean shutdown: {report:?}");
        }
        log
    };
    let mut log = reopen(Checkpoints::default());
    let mut model = Model {
        batches: Vec::new(),
        start: 0,
        end: 0,
    };
    for op in ops {
        match op {
            Op::Append(specs) => {
                let now = clock.now_ms();
                let records: Vec<BatchRecord> = specs
                    .iter()
                    .enumerate()
                    .map(|(k, &(size, dt))| {
                        let mut r = record(model.end + k as u64, size);
                        r.timestamp = now + dt;
                        if k == 1 {
                            r.headers.push(logbus::storage::Header {
                                key: "h".into(),
                                value: None,
                            });
                        }
                        r
                    })
                    .collect();
                let info = log.append(&records).expect("append");
                prop_assert_eq!(info.base_offset, model.end);
                let batch: Vec<(u64, BatchRecord)> = records
                    .into_iter()
                    .enumerate()
                    .map(|(k, r)| (model.end + k as u64, r))
                    .collect();
                model.end += batch.len() as u64;
                model.batches.push(batch);
            }
            Op::Sync => {
                log.fsync().expect("sync");
                prop_assert_eq!(log.recovery_point(), model.end);
            }
            Op::Roll => log.roll().expect("roll"),
            Op::Truncate(frac) => {
                let target = at(model.start, model.end, frac, 256);
                let new_end = log.truncate_to(target).expect("truncate");
                // Whole batches: the batch holding `target` goes too.
                model.batches.retain(|b| b.last().unwrap().0 < target);
                model.end = model
                    .batches
                    .last()
                    .map_or(model.start, |b| b.last().unwrap().0 + 1)
                    .max(model.start);
                if target == model.start {
                    model.end = target;
                }
                prop_assert_eq!(new_end, model.end);
            }
            Op::AdvanceClock(ms) => clock.advance(Duration::from_millis(u64::from(ms))),
            Op::Retention(frac) => {
                let limit = at(model.start, model.end, frac, 255);
                let before = log.log_start_offset();
                log.delete_old_segments(limit).expect("retention");
                let after = log.log_start_offset();
                prop_assert!(after >= before);
                prop_assert!(after <= limit.max(before), "deleted above the limit");
                model.start = after;
                model.batches.retain(|b| b.last().unwrap().0 >= after);
                // What stays is not expired by time, unless it reaches the limit.
                let segments = log.segments();
                let first = segments[0];
                let upper = segments
                    .get(1)
                    .map_or(log.log_end_offset(), |s| s.base_offset);
                if config.retention_ms >= 0
                    && config.retention_bytes < 0
                    && upper <= limit
                    && first.size > 0
                {
                    prop_assert!(
                        clock.now_ms() - first.max_timestamp <= config.retention_ms
                            || first.max_timestamp < 0,
                        "an expired segment below the limit was kept: {:?}",
                        segments
                    );
                }
            }
            Op::Reopen => {
                let cp = log.close().expect("close");
                prop_assert_eq!(cp.recovery_point, model.end);
                log = reopen(cp);
            }
            Op::Read(frac) => {
                if model.end > model.start {
                    let o = at(model.start, model.end, frac, 256);
                    let got = log.read_records(o, 1).expect("read");
                    prop_assert_eq!(got[0].0, o);
                }
            }
            Op::FindTime(delta) => {
                let t = clock.now_ms() + delta;
                let want = model
                    .records()
                    .into_iter()
                    .find(|(_, r)| r.timestamp >= t)
                    .map(|(o, r)| (o, r.timestamp));
                prop_assert_eq!(log.offset_for_timestamp(t).expect("find"), want);
            }
        }
        prop_assert_eq!(log.log_start_offset(), model.start);
        prop_assert_eq!(log.log_end_offset(), model.end);
    }
    prop_assert_eq!(read_all(&log), model.records());
    log.write_to_files().expect("flush");
    assert_consistent(&fs, &dir);
    let cp = log.close().expect("close");
    let log = reopen(cp);
    prop_assert_eq!(read_all(&log), model.records());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn segment_set_matches_the_model(
        config in config(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run(config, ops)?;
    }
}
