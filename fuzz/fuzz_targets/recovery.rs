//! Arbitrary bytes laid out as a partition directory — one or two segments' `.log`, `.index`
//! and `.timeindex` files and a recovery-point checkpoint — opened with Kafka's recovery on
//! the in-memory `FaultyIo`, then read end to end, appended to, closed and reopened. Nothing
//! may panic; when recovery revalidated everything (recovery point 0), the directory it leaves
//! must pass `verify_partition_with` (gaps allowed).
//!
//! Input layout: a flags byte, three big-endian u16 lengths (index, time index, checkpoint),
//! a u16 split point and a u8 second base offset, then the bytes of each file in that order;
//! the rest is the `.log` data (split in two segments when flag bit 3 is set).
#![no_main]

use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use logbus::storage::checkpoint::{self, TopicPartitionOffset};
use logbus::storage::fault::FaultyIo;
use logbus::storage::io::{Io, OpenMode};
use logbus::storage::file_names::{file_name, MAX_OFFSET};
use logbus::storage::verify::{verify_partition_with, VerifyConfig};
use logbus::storage::{Checkpoints, LogConfig, BatchRecord, LogSetup, SegmentSet};
use logbus::ManualClock;

struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn u8(&mut self) -> u8 {
        let (first, rest) = self.data.split_first().unwrap_or((&0, &[]));
        self.data = rest;
        *first
    }
    fn u16(&mut self) -> usize {
        usize::from(self.u8()) << 8 | usize::from(self.u8())
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.data.split_at(n.min(self.data.len()));
        self.data = b;
        a
    }
}

fn write(io: &FaultyIo, path: &Path, bytes: &[u8]) {
    let file = io.open(path, OpenMode::Truncate).unwrap();
    file.write_all_at(bytes, 0).unwrap();
    file.sync_data().unwrap();
}

/// Reads every record from the log start to the log end, batch by batch.
fn read_everything(log: &SegmentSet) {
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        match log.read_records(offset, 1 << 12) {
            Ok(records) if !records.is_empty() => {
                let last = records.last().unwrap().0;
                assert!(last >= offset);
                offset = last + 1;
            }
            // A gap (offsets missing between batches) or an unreadable batch below the
            // recovery point: step over it.
            _ => offset += 1,
        }
        if offset > log.log_start_offset() + 10_000 {
            break;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input { data };
    let flags = input.u8();
    let index_len = input.u16();
    let time_len = input.u16();
    let checkpoint_len = input.u16();
    let split = input.u16();
    let second_base = u64::from(input.u8());
    let index = input.take(index_len);
    let time = input.take(time_len);
    let checkpoint_text = input.take(checkpoint_len);
    let log_bytes = input.data;

    let io = FaultyIo::new(u64::from(flags));
    let dir = Path::new("/data/topic-0");
    io.create_dir_all(dir).unwrap();
    let two_segments = flags & 8 != 0 && second_base > 0;
    let (first, second) = if two_segments {
        log_bytes.split_at(split.min(log_bytes.len()))
    } else {
        (log_bytes, &[][..])
    };
    write(&io, &dir.join(file_name(0, "log")), first);
    if flags & 1 != 0 {
        write(&io, &dir.join(file_name(0, "index")), index);
    }
    if flags & 2 != 0 {
        write(&io, &dir.join(file_name(0, "timeindex")), time);
    }
    if two_segments {
        write(&io, &dir.join(file_name(second_base, "log")), second);
        // The same index bytes, for the second segment, when asked.
        if flags & 16 != 0 {
            write(&io, &dir.join(file_name(second_base, "index")), index);
            write(&io, &dir.join(file_name(second_base, "timeindex")), time);
        }
    }
    if flags & 32 != 0 {
        // A stray index and a leftover of an interrupted deletion.
        write(&io, &dir.join(file_name(7_000, "index")), index);
        write(&io, &dir.join("00000000000000000003.log.deleted"), first);
    }
    let checkpoint_path = Path::new("/data/recovery-point-offset-checkpoint");
    let mut checkpoints = Checkpoints::default();
    if flags & 4 != 0 {
        write(&io, checkpoint_path, checkpoint_text);
        if let Ok(Some(entries)) = checkpoint::read::<TopicPartitionOffset>(&io, checkpoint_path) {
            if let Some(e) = entries
                .iter()
                .find(|e| e.topic == "topic" && e.partition == 0)
            {
                checkpoints.recovery_point = e.offset;
            }
        }
    }
    let config = LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: i64::from(flags >> 6) * 64,
        write_buffer_bytes: 0,
        ..LogConfig::default()
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let Ok((mut log, report)) = SegmentSet::open(dir, LogSetup { config: config.clone(), io: Arc::new(io.clone()), clock: clock.clone(), checkpoints }) else {
        return;
    };
    assert!(report.log_start_offset <= report.log_end_offset);
    if checkpoints.recovery_point == 0 {
        // Recovery keeps offset gaps it finds (as Kafka does): only increasing offsets.
        let options = VerifyConfig::default().dense_offsets(false);
        let verified =
            verify_partition_with(&io, dir, options).expect("verify reads the recovered directory");
        assert_eq!(
            verified.problem, None,
            "recovery left an inconsistent directory: {report:?}"
        );
    }
    read_everything(&log);
    let _ = log.offset_for_timestamp(1_700_000_000_000);
    let _ = log.offset_for_timestamp(i64::MIN);

    // The log stays writable, and a clean close reopens without repairs.
    let end = log.log_end_offset();
    if end < MAX_OFFSET - 10 {
        let info = log
            .append(&[BatchRecord::new(
                1_700_000_000_000,
                Some(b"k"),
                b"after recovery",
            )])
            .expect("append after recovery");
        assert_eq!(info.base_offset, end);
        let closed = log.close().expect("close");
        let (log, again) =
            SegmentSet::open(dir, LogSetup { config, io: Arc::new(io.clone()), clock, checkpoints: closed }).expect("reopen");
        assert!(again.truncation.is_none(), "{again:?}");
        assert_eq!(log.log_end_offset(), end + 1);
        let records = log
            .read_records(end, 1 << 12)
            .expect("read the appended record");
        assert_eq!(records[0].0, end);
    }
});
