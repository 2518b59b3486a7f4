//! Helpers shared by the storage integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use logbus::storage::record_batch::crc32c;
use logbus::storage::{
    verify_dir, BatchRecord, Checkpoints, Io, LogConfig, LogSetup, RecoveryReport, SegmentSet,
};
use logbus::{Clock, ManualClock};

pub const T0: i64 = 1_700_000_000_000;

pub fn record(i: u64, size: usize) -> BatchRecord {
    let mut value = vec![(i % 251) as u8; size];
    value[..8.min(size)].copy_from_slice(&i.to_be_bytes()[..8.min(size)]);
    BatchRecord {
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
    SegmentSet::open(
        dir,
        LogSetup {
            config,
            io,
            clock,
            checkpoints,
        },
    )
    .expect("open")
}

pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0))
}

/// Every record from the log start to the log end, by repeated reads (a read that returns
/// nothing means no record lies between it and the log end: offsets may end in a gap).
pub fn read_all(log: &SegmentSet) -> Vec<(u64, BatchRecord)> {
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

// Hand-made batches (the builder only writes well-formed ones).

pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// One record, length-prefixed: `key_len` is written as given (so it may lie).
pub fn raw_record(offset_delta: i64, key_len: i64, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8]; // attributes
    put_varint(&mut body, 0); // timestamp delta
    put_varint(&mut body, offset_delta);
    put_varint(&mut body, key_len);
    body.extend_from_slice(key);
    put_varint(&mut body, value.len() as i64);
    body.extend_from_slice(value);
    put_varint(&mut body, 0); // headers
    let mut out = Vec::new();
    put_varint(&mut out, body.len() as i64);
    out.extend(body);
    out
}

/// A batch with a valid CRC around whatever records it is given.
pub fn raw_batch(
    base: i64,
    last_offset_delta: i32,
    attributes: i16,
    producer_id: i64,
    records: &[Vec<u8>],
) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&base.to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // length, below
    b.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
    b.push(2);
    b.extend_from_slice(&0u32.to_be_bytes()); // crc, below
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&last_offset_delta.to_be_bytes());
    b.extend_from_slice(&T0.to_be_bytes());
    b.extend_from_slice(&T0.to_be_bytes());
    b.extend_from_slice(&producer_id.to_be_bytes());
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&(records.len() as i32).to_be_bytes());
    for r in records {
        b.extend_from_slice(r);
    }
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}
