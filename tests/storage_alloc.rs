//! No allocation per append in steady state: a counting global allocator sees only the
//! amortized growth of the in-memory index entry vectors (one entry per 4 KiB, vectors that
//! double: a few allocations in all) while 1 KiB records, one per batch, are appended to a
//! warmed-up segment set whose write buffer is written out many times; and the batches written
//! that way are byte for byte what the batch builder encodes.

mod alloc_common;

use std::sync::Arc;

use alloc_common::allocations_during;

use logbus::storage::record_batch::encode_batch;
use logbus::storage::{BatchRecord, LogConfig, LogSetup, SegmentSet};
use logbus::{Clock, SystemClock};

fn record(i: u64) -> BatchRecord {
    BatchRecord {
        timestamp: 1_700_000_000_000 + i as i64,
        key: None,
        value: Some(vec![(i % 251) as u8; 1024]),
        headers: Vec::new(),
    }
}

#[test]
fn steady_state_appends_do_not_allocate_and_write_the_builders_bytes() {
    const WARM_UP: u64 = 256;
    const WINDOW: u64 = 2_048; // 2 MiB: the 64 KiB write buffer is written out ~32 times
    let dir = tempfile::tempdir().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let config = LogConfig::default();
    let write_buffer = config.write_buffer_bytes as u64;
    let (mut log, _) = SegmentSet::open(
        dir.path(),
        LogSetup {
            config,
            clock,
            ..LogSetup::default()
        },
    )
    .unwrap();
    // The records are built before counting: only the log's own work is counted.
    let records: Vec<BatchRecord> = (0..WARM_UP + WINDOW).map(record).collect();
    for r in &records[..WARM_UP as usize] {
        log.append(std::slice::from_ref(r)).unwrap();
    }
    let mut positions = Vec::with_capacity(WINDOW as usize);
    let allocations = allocations_during(|| {
        for r in &records[WARM_UP as usize..] {
            let info = log.append(std::slice::from_ref(r)).unwrap();
            positions.push(info.position);
        }
    });
    // About 540 index entries in the window: each of the two entry vectors doubles at most
    // 10 times. One allocation per append would be 2048.
    assert!(
        allocations <= 24,
        "{allocations} allocations in {WINDOW} appends of 1 KiB records"
    );
    let batch_size = positions[1] - positions[0];
    assert!(
        WINDOW * batch_size > 16 * write_buffer,
        "the buffer was written out"
    );

    // What went through the write buffer is exactly what the builder encodes.
    log.fsync().unwrap();
    let file = std::fs::read(dir.path().join("00000000000000000000.log")).unwrap();
    for (i, r) in records.iter().enumerate() {
        let expected = encode_batch(i as u64, std::slice::from_ref(r)).unwrap();
        let at = i * expected.len();
        assert_eq!(&file[at..at + expected.len()], &expected[..], "batch {i}");
    }
    assert_eq!(file.len() as u64, (WARM_UP + WINDOW) * batch_size);
}
