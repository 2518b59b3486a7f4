//! Segment-set behaviour on real files: Kafka's index rule, roll triggers, retention, lookups,
//! config validation and the typed errors of bad requests.

use crate::storage_common;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use logbus::storage::file_names::file_name;
use logbus::storage::{
    offset_index, time_index, BatchBuilder, BatchRecord, Checkpoints, DirLock, FsIo, Io, IoFile,
    LogConfig, LogSetup, OpenMode, SegmentSet,
};
use logbus::{Clock, Error, ManualClock};
use storage_common::*;

fn open_real(dir: &Path, config: LogConfig, clock: Arc<ManualClock>) -> SegmentSet {
    open(dir, config, Arc::new(FsIo), clock, Checkpoints::default()).0
}

#[test]
fn storage_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SegmentSet>();
    assert_send_sync::<logbus::storage::fault::FaultyIo>();
    assert_send_sync::<BatchBuilder>();
}

#[test]
fn index_entries_follow_kafkas_rule() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_real(dir.path(), LogConfig::default(), clock());
    let mut batches = Vec::new(); // (position, size, last offset)
    for i in 0..100 {
        let n = 1 + (i % 3) as usize;
        let records: Vec<BatchRecord> = (0..n).map(|k| record(i * 3 + k as u64, 1000)).collect();
        let info = log.append(&records).unwrap();
        let size = log.read(info.base_offset, 1).unwrap().len() as u64;
        batches.push((info.position, size, info.last_offset));
    }
    log.close().unwrap();

    // Kafka's rule, replayed: an entry for the incoming batch when more than 4096 bytes were
    // appended since the last entry, checked before counting the batch's own bytes.
    let mut expected = Vec::new();
    let mut since = 0u64;
    for &(position, size, last) in &batches {
        if since > 4096 {
            expected.push(offset_index::OffsetEntry {
                offset: last,
                position: position as u32,
            });
            since = 0;
        }
        since += size;
    }
    let bytes = fs::read(dir.path().join(file_name(0, "index"))).unwrap();
    let got = offset_index::parse(&bytes, 0);
    assert!(!got.is_empty());
    assert_eq!(got, expected);
    assert_ne!(got[0].position, 0, "the first batch never gets an entry");

    // The time index: strictly increasing, ending with the segment's max timestamp.
    let bytes = fs::read(dir.path().join(file_name(0, "timeindex"))).unwrap();
    let times = time_index::parse(&bytes, 0);
    assert!(times.windows(2).all(|w| w[0].timestamp < w[1].timestamp));
    // The last batch holds the largest timestamp: record id 3 * 99 (one record).
    let last = batches.last().unwrap().2;
    assert_eq!(
        *times.last().unwrap(),
        time_index::TimeEntry {
            timestamp: T0 + 297,
            offset: last
        }
    );
    assert_consistent(&FsIo, dir.path());

    // Recovery rebuilds the same indexes by the same rule.
    let index = dir.path().join(file_name(0, "index"));
    let timeindex = dir.path().join(file_name(0, "timeindex"));
    let (index_bytes, time_bytes) = (fs::read(&index).unwrap(), fs::read(&timeindex).unwrap());
    fs::remove_file(&index).unwrap();
    fs::remove_file(&timeindex).unwrap();
    let (log, report) = open(
        dir.path(),
        LogConfig::default(),
        Arc::new(FsIo),
        clock(),
        Checkpoints::default(),
    );
    assert_eq!(report.rebuilt_indexes.len(), 2);
    log.close().unwrap();
    assert_eq!(fs::read(&index).unwrap(), index_bytes);
    assert_eq!(fs::read(&timeindex).unwrap(), time_bytes);
}

#[test]
fn rolls_by_size_time_full_index_and_clock() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1000,
        ..LogConfig::default()
    };
    let mut log = open_real(dir.path(), config.clone(), clock());
    for i in 0..20 {
        log.append(&[record(i, 100)]).unwrap();
    }
    let segments = log.segments();
    assert!(segments.len() >= 3);
    assert!(segments.iter().all(|s| s.size <= 1000));
    for w in segments.windows(2) {
        assert_eq!(w[0].next_offset, w[1].base_offset);
    }
    drop(log);

    // segment_ms counts from the first batch's timestamp.
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let mut log = open_real(dir.path(), config.clone(), clock());
    log.append(&[BatchRecord::new(T0, None, b"a")]).unwrap();
    log.append(&[BatchRecord::new(T0 + 1000, None, b"b")])
        .unwrap();
    assert_eq!(
        log.segments().len(),
        1,
        "1000 ms waited is not more than segment_ms"
    );
    log.append(&[BatchRecord::new(T0 + 1001, None, b"c")])
        .unwrap();
    assert_eq!(log.segments().len(), 2);
    drop(log);

    // Without timestamps, the clock decides.
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let mut log = open_real(dir.path(), config, c.clone());
    log.append(&[BatchRecord::new(-1, None, b"a")]).unwrap();
    c.advance(Duration::from_millis(1001));
    log.append(&[BatchRecord::new(-1, None, b"b")]).unwrap();
    assert_eq!(log.segments().len(), 2);
    drop(log);

    // A full index: 24 bytes hold 3 offset entries and 2 time entries (one kept free).
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_index_bytes: 24,
        index_interval_bytes: 0,
        ..LogConfig::default()
    };
    let mut log = open_real(dir.path(), config, clock());
    for i in 0..10 {
        log.append(&[record(i, 10)]).unwrap();
    }
    assert!(log.segments().len() >= 3, "{:?}", log.segments());
    log.close().unwrap();
    assert_consistent(&FsIo, dir.path());
}

#[test]
fn lookups_by_offset_and_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 8000,
        index_interval_bytes: 500,
        ..LogConfig::default()
    };
    let mut log = open_real(dir.path(), config, clock());
    // Timestamps out of order inside each batch: 10 * i + {5, 0, 9}.
    for i in 0..200i64 {
        let records: Vec<BatchRecord> = [5, 0, 9]
            .iter()
            .map(|d| BatchRecord::new(T0 + 10 * i + d, None, &i.to_be_bytes()))
            .collect();
        log.append(&records).unwrap();
    }
    for o in [0u64, 1, 2, 3, 299, 300, 599] {
        assert_eq!(log.read_records(o, 1).unwrap()[0].0, o);
    }
    // The first record at or after each time, by offset order.
    for i in [0i64, 1, 57, 199] {
        assert_eq!(
            log.offset_for_timestamp(T0 + 10 * i + 1).unwrap(),
            Some((3 * i as u64, T0 + 10 * i + 5))
        );
        assert_eq!(
            log.offset_for_timestamp(T0 + 10 * i + 6).unwrap(),
            Some((3 * i as u64 + 2, T0 + 10 * i + 9))
        );
    }
    assert_eq!(
        log.offset_for_timestamp(T0 - 100).unwrap(),
        Some((0, T0 + 5))
    );
    assert_eq!(log.offset_for_timestamp(T0 + 2000).unwrap(), None);
    // Bad offsets are typed errors with the valid range.
    assert!(matches!(
        log.read(601, 10),
        Err(Error::OffsetOutOfRange {
            topic: None,
            partition: None,
            requested: 601,
            start: 0,
            end: 600
        })
    ));
    assert!(log.read(600, 10).unwrap().is_empty());
}

#[test]
fn retention_by_time_and_size_deletes_whole_old_segments_below_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let c = clock();
    let config = LogConfig {
        segment_bytes: 1000,
        retention_ms: 60_000,
        ..LogConfig::default()
    };
    let mut log = open_real(dir.path(), config, c.clone());
    for i in 0..30 {
        log.append(&[record(i, 100)]).unwrap();
    }
    let segments = log.segments();
    assert!(segments.len() >= 4);
    // Nothing has expired yet.
    assert!(log.delete_old_segments(30).unwrap().is_empty());
    c.advance(Duration::from_millis(60_000 + 30));
    // Expired, but only whole segments below the limit go.
    let limit = segments[2].base_offset;
    let deleted = log.delete_old_segments(limit).unwrap();
    assert_eq!(
        deleted,
        vec![segments[0].base_offset, segments[1].base_offset]
    );
    assert_eq!(log.log_start_offset(), limit);
    assert!(!dir.path().join(file_name(0, "log")).exists());
    // Everything expired and below the limit: the active segment goes after a roll.
    let deleted = log.delete_old_segments(30).unwrap();
    assert_eq!(deleted.len(), segments.len() - 2);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (30, 30));
    assert_eq!(log.segments().len(), 1);
    log.append(&[record(30, 100)]).unwrap();
    assert_eq!(read_all(&log).len(), 1);
    drop(log);

    // By size: delete the oldest while the rest stays at or above retention_bytes.
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1000,
        retention_bytes: 2500,
        ..LogConfig::default()
    };
    let mut log = open_real(dir.path(), config, clock());
    for i in 0..40 {
        log.append(&[record(i, 100)]).unwrap();
    }
    let before = log.size_bytes();
    log.delete_old_segments(40).unwrap();
    let after = log.size_bytes();
    assert!(after >= 2500 && after < before, "{before} -> {after}");
    let first = log.segments()[0].size;
    assert!(
        after - first < 2500,
        "one more deletion would have gone below the limit"
    );
    assert_consistent(&FsIo, dir.path());
}

#[test]
fn truncation_is_batch_granular_and_durable() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1500,
        ..LogConfig::default()
    };
    let mut log = open_real(dir.path(), config.clone(), clock());
    for i in 0..30u64 {
        let records: Vec<BatchRecord> = (0..3).map(|k| record(3 * i + k, 50)).collect();
        log.append(&records).unwrap();
    }
    // 43 lies in the batch [42, 44]: that batch goes too.
    assert_eq!(log.truncate_to(43).unwrap(), 42);
    assert_eq!(log.log_end_offset(), 42);
    // Rolls advanced the recovery point; the cut took it back to at most the new end.
    assert!(log.recovery_point() <= 42);
    log.append(&[record(42, 50)]).unwrap();
    let cp = log.close().unwrap();
    let (log, report) = open(dir.path(), config, Arc::new(FsIo), clock(), cp);
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(read_all(&log).len(), 43);
    assert_consistent(&FsIo, dir.path());
}

#[test]
fn append_batch_checks_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_real(dir.path(), LogConfig::default(), clock());
    log.append(&[record(0, 10)]).unwrap();
    // Below the log end.
    let old = BatchBuilder::new(0)
        .with_record(T0, None, Some(b"x"))
        .unwrap()
        .finish()
        .to_vec();
    assert!(matches!(
        log.append_batch(&old),
        Err(Error::OffsetBelowLogEnd {
            base_offset: 0,
            log_end_offset: 1
        })
    ));
    // Corrupt.
    let mut bad = BatchBuilder::new(1)
        .with_record(T0, None, Some(b"x"))
        .unwrap()
        .finish()
        .to_vec();
    let n = bad.len();
    bad[n - 2] ^= 1;
    assert!(matches!(
        log.append_batch(&bad),
        Err(Error::Corrupt { file: None, .. })
    ));
    // Compressed (re-sealed so only the codec is wrong).
    let mut gz = BatchBuilder::new(1)
        .with_record(T0, None, Some(b"x"))
        .unwrap()
        .finish()
        .to_vec();
    // The codec bits say gzip, the records are not a gzip stream: a corrupt stream.
    gz[22] = 1;
    let crc = crc32c::crc32c(&gz[21..]);
    gz[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        log.append_batch(&gz),
        Err(Error::Corrupt {
            position: 61,
            reason: logbus::error::Corruption::BadCompressedData { codec: "gzip", .. },
            ..
        })
    ));
    // A codec id Kafka does not define.
    gz[22] = 5;
    let crc = crc32c::crc32c(&gz[21..]);
    gz[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        log.append_batch(&gz),
        Err(Error::UnsupportedCompression { ref codec, .. }) if codec == "unknown(5)"
    ));
    // A follower's batch with a gap is accepted, in the active segment (as Kafka does).
    let gap = BatchBuilder::new(10)
        .with_record(T0, None, Some(b"x"))
        .unwrap()
        .finish()
        .to_vec();
    let info = log.append_batch(&gap).unwrap();
    assert_eq!((info.base_offset, log.log_end_offset()), (10, 11));
    assert_eq!(info.segment_base_offset, 0, "a gap alone rolls no segment");
    assert_eq!(log.read_records(1, 100).unwrap()[0].0, 10);
    // No records.
    assert!(matches!(
        log.append(&[]),
        Err(Error::EmptyBatch {
            records_count: 0,
            ..
        })
    ));
    // Still online: input errors do not take the log offline.
    assert!(!log.is_offline());
    // Too large.
    let big = vec![0u8; 2 << 20];
    assert!(matches!(
        log.append(&[BatchRecord::new(T0, None, &big)]),
        Err(Error::RecordTooLarge { .. })
    ));
}

#[test]
fn partition_leader_epoch_is_written_when_set() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_real(dir.path(), LogConfig::default(), clock());
    log.append(&[record(0, 10)]).unwrap();
    log.set_partition_leader_epoch(7);
    log.append(&[record(1, 10)]).unwrap();
    let epochs: Vec<i32> = logbus::storage::BatchIter::new(&log.read(0, 1 << 20).unwrap())
        .map(|b| b.unwrap().header().partition_leader_epoch)
        .collect();
    assert_eq!(epochs, vec![0, 7]);
}

#[test]
fn invalid_config_names_the_setting() {
    let cases: Vec<(LogConfig, &str)> = vec![
        (
            LogConfig {
                segment_bytes: 10,
                ..LogConfig::default()
            },
            "segment_bytes",
        ),
        (
            LogConfig {
                segment_bytes: 1 << 40,
                ..LogConfig::default()
            },
            "segment_bytes",
        ),
        (
            LogConfig {
                segment_ms: 0,
                ..LogConfig::default()
            },
            "segment_ms",
        ),
        (
            LogConfig {
                segment_index_bytes: 8,
                ..LogConfig::default()
            },
            "segment_index_bytes",
        ),
        (
            LogConfig {
                index_interval_bytes: -1,
                ..LogConfig::default()
            },
            "index_interval_bytes",
        ),
        (
            LogConfig {
                retention_ms: -2,
                ..LogConfig::default()
            },
            "retention_ms",
        ),
        (
            LogConfig {
                retention_bytes: -5,
                ..LogConfig::default()
            },
            "retention_bytes",
        ),
        (
            LogConfig {
                max_batch_bytes: 0,
                ..LogConfig::default()
            },
            "max_batch_bytes",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (config, name) in cases {
        let clock: Arc<dyn Clock> = clock();
        match SegmentSet::open(
            dir.path(),
            LogSetup {
                config,
                clock,
                ..LogSetup::default()
            },
        ) {
            Err(Error::InvalidConfig {
                name: got, valid, ..
            }) => {
                assert_eq!(got, name);
                assert!(!valid.is_empty());
            }
            other => panic!("{name}: expected InvalidConfig, got {other:?}"),
        }
    }
}

#[test]
fn reads_kafka_preallocated_indexes() {
    // Kafka leaves index files preallocated (zero entries at the end) after a crash.
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let mut log = open_real(dir.path(), config.clone(), clock());
    for i in 0..50 {
        log.append(&[record(i, 100)]).unwrap();
    }
    let cp = log.close().unwrap();
    let index = dir.path().join(file_name(0, "index"));
    let mut bytes = fs::read(&index).unwrap();
    let real = offset_index::parse(&bytes, 0);
    bytes.resize(bytes.len() + 8 * 100, 0);
    fs::write(&index, &bytes).unwrap();
    assert_eq!(offset_index::parse(&bytes, 0), real);
    let (log, _) = open(dir.path(), config, Arc::new(FsIo), clock(), cp);
    assert_eq!(read_all(&log).len(), 50);
}

/// The real file system, counting the write-back starts of the files it opens.
#[derive(Debug, Default)]
struct CountingIo(Arc<std::sync::atomic::AtomicUsize>);

#[derive(Debug)]
struct CountingFile(Box<dyn IoFile>, Arc<std::sync::atomic::AtomicUsize>);

impl IoFile for CountingFile {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, pos)
    }
    fn write_at(&self, buf: &[u8], pos: u64) -> std::io::Result<usize> {
        self.0.write_at(buf, pos)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.0.sync_all()
    }
    fn start_writeback(&self, pos: u64, len: u64) -> std::io::Result<()> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.start_writeback(pos, len)
    }
}

impl Io for CountingIo {
    fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<Box<dyn IoFile>> {
        Ok(Box::new(CountingFile(
            FsIo.open(path, mode)?,
            self.0.clone(),
        )))
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        FsIo.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        FsIo.create_dir_all(dir)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
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

#[test]
fn write_outs_start_write_back_only_when_configured() {
    for start_writeback in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let io = CountingIo::default();
        let starts = io.0.clone();
        let config = LogConfig {
            write_buffer_bytes: 4096,
            start_writeback,
            ..LogConfig::default()
        };
        let (mut log, _) = open(
            dir.path(),
            config,
            Arc::new(io),
            clock(),
            Checkpoints::default(),
        );
        // Small batches through the write buffer, then one larger than it (written directly).
        for i in 0..40 {
            log.append(&[record(i, 1000)]).unwrap();
        }
        let big: Vec<BatchRecord> = (40..60).map(|i| record(i, 1000)).collect();
        log.append(&big).unwrap();
        log.fsync().unwrap();
        let n = starts.load(std::sync::atomic::Ordering::Relaxed);
        if start_writeback {
            assert!(n >= 2, "{n} write-back starts");
        } else {
            assert_eq!(n, 0, "write-back left to the OS");
        }
        assert_eq!(read_all(&log).len(), 60);
        log.close().unwrap();
    }
}
