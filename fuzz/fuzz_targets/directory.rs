//! Arbitrary partition directories of several files — segment logs and indexes under any of
//! a handful of base offsets (up to `i64::MAX` and beyond), leftovers, swap and cleaner files,
//! odd names — laid out on the in-memory `FaultyIo`, then verified, opened (with a recovery
//! point or after a clean shutdown), read end to end, appended to, closed and reopened.
//! Nothing may panic; a full recovery leaves a directory that verifies (once the files logbus
//! reports as foreign are set aside); a clean close reopens without repairs.
//!
//! Input layout: a flags byte, then records of (a name byte, a u16 length, that many bytes):
//! the name byte picks a base offset (low 3 bits) and a suffix (next 4 bits).
#![no_main]

use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use logbus::storage::fault::FaultyIo;
use logbus::storage::file_names::MAX_OFFSET;
use logbus::storage::io::{Io, OpenMode};
use logbus::storage::verify::{verify_partition_with, VerifyConfig};
use logbus::storage::{Checkpoints, LogConfig, BatchRecord, LogSetup, SegmentSet};
use logbus::ManualClock;

const BASES: [u64; 8] = [0, 1, 5, 40, 300, 70_000, MAX_OFFSET - 1, MAX_OFFSET];

const SUFFIXES: [&str; 16] = [
    "log",
    "index",
    "timeindex",
    "log",
    "log",
    "txnindex",
    "log.deleted",
    "log.swap",
    "index.swap",
    "log.cleaned",
    "snapshot",
    "index",
    "timeindex",
    "log",
    "log",
    "log",
];

fn name(byte: u8) -> String {
    let suffix = SUFFIXES[usize::from(byte >> 3) & 15];
    if byte & 0x80 != 0 && byte & 7 == 7 {
        // Names that look like segments but are not: above i64::MAX, or not 20 digits.
        return match byte & 0x18 {
            0 => format!("18446744073709551615.{suffix}"),
            8 => format!("09223372036854775808.{suffix}"),
            16 => format!("42.{suffix}"),
            _ => format!("0000000000000000000x.{suffix}"),
        };
    }
    format!("{:020}.{suffix}", BASES[usize::from(byte & 7)])
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let io = FaultyIo::new(u64::from(flags));
    let dir = Path::new("/data/topic-0");
    io.create_dir_all(dir).unwrap();
    while rest.len() >= 3 {
        let file = name(rest[0]);
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        let bytes = &rest[3..3 + len.min(rest.len() - 3)];
        rest = &rest[3 + bytes.len()..];
        let f = io.open(&dir.join(file), OpenMode::Truncate).unwrap();
        f.write_all_at(bytes, 0).unwrap();
        f.sync_data().unwrap();
    }
    io.sync_dir(dir).unwrap();

    let options = VerifyConfig::default().dense_offsets(flags & 1 != 0);
    let _ = verify_partition_with(&io, dir, options);

    let full = flags & 2 == 0;
    let checkpoints = Checkpoints {
        recovery_point: if full { 0 } else { u64::from(flags) * 7 },
        log_start_offset: 0,
        clean_shutdown: flags & 4 != 0 && !full,
    };
    let config = LogConfig {
        segment_bytes: 2048,
        segment_index_bytes: 4096,
        index_interval_bytes: i64::from(flags >> 4) * 32,
        write_buffer_bytes: usize::from(flags & 8) * 64,
        max_batch_bytes: 8192,
        ..LogConfig::default()
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let open = |cp| SegmentSet::open(dir, LogSetup { config: config.clone(), io: Arc::new(io.clone()), clock: clock.clone(), checkpoints: cp });
    let Ok((mut log, report)) = open(checkpoints) else {
        return;
    };
    assert!(report.log_start_offset <= report.log_end_offset);
    assert!(report.recovery_point <= report.log_end_offset);
    if full {
        for foreign in &report.foreign_files {
            io.remove_file(foreign).unwrap();
        }
        let gaps = VerifyConfig::default().dense_offsets(false);
        let verified = verify_partition_with(&io, dir, gaps).expect("verify after recovery");
        assert_eq!(verified.problem, None, "recovery left an inconsistent directory: {report:?}");
    }
    // Read everything: each read makes progress or ends.
    let mut offset = log.log_start_offset();
    let mut reads = 0;
    while offset < log.log_end_offset() && reads < 10_000 {
        reads += 1;
        match log.read_records(offset, 1 << 12) {
            Ok(records) if records.is_empty() => break,
            Ok(records) => {
                let last = records.last().unwrap().0;
                assert!(last >= offset, "read at {offset} went back to {last}");
                offset = last + 1;
            }
            // Only a log trusted without revalidation may hold a bad batch; step over it.
            Err(_) if !full => offset += 1,
            Err(e) => match e {
                logbus::Error::UnsupportedCompression { .. } => offset += 1,
                e => panic!("read at {offset} after a full recovery: {e}"),
            },
        }
    }
    let _ = log.offset_for_timestamp(1_700_000_000_000);

    let end = log.log_end_offset();
    if end >= MAX_OFFSET {
        // The last offset must be below i64::MAX: nothing more fits.
        assert!(log.append(&[BatchRecord::new(1, None, b"x")]).is_err());
        return;
    }
    let info = log
        .append(&[BatchRecord::new(1_700_000_000_000, Some(b"k"), b"after")])
        .expect("append after recovery");
    assert_eq!(info.base_offset, end);
    let closed = log.close().expect("close");
    let (log, again) = open(closed).expect("reopen after a clean close");
    assert!(again.truncation.is_none(), "{again:?}");
    assert_eq!(log.log_end_offset(), end + 1);
    let records = log.read_records(end, 1 << 12).expect("read the appended record");
    assert_eq!(records[0].0, end);
});
