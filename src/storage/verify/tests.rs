use super::*;
use crate::storage::fault::FaultyIo;
use crate::storage::file_names::{file_name, parse_file_name, LOG_SUFFIX, SEGMENT_SUFFIXES};
use crate::storage::io::OpenMode;
use crate::storage::record_batch::BatchRecord;
use crate::storage::segment_set::{LogConfig, LogSetup, SegmentSet};
use crate::sync::Arc;

fn write_partition(io: Arc<dyn Io>, dir: &Path, records: u32) {
    let config = LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        ..LogConfig::default()
    };
    let (mut log, _) = SegmentSet::open(
        dir,
        LogSetup {
            config,
            io,
            ..LogSetup::default()
        },
    )
    .unwrap();
    for i in 0..records {
        let ts = 1_700_000_000_000 + i64::from(i % 7) * 10;
        log.append(&[BatchRecord::new(ts, Some(b"k"), &[i as u8; 40])])
            .unwrap();
    }
    log.close().unwrap();
}

#[test]
fn clean_partition_then_damage() {
    let io = FaultyIo::new(3);
    let dir = Path::new("/data/t-0");
    write_partition(Arc::new(io.clone()), dir, 200);
    let report = verify_partition(&io, dir).unwrap();
    assert_eq!(report.problem, None);
    assert!(report.segments > 3, "{report:?}");
    assert_eq!(report.batches, 200);

    // A bit flip in the second segment's third batch.
    let names = io.list_dir(dir).unwrap();
    let second_log = names.iter().filter(|n| n.ends_with(".log")).nth(1).unwrap();
    let path = dir.join(second_log);
    let mut bytes = io.read_file(&path).unwrap();
    // Every batch here has the same size: one record of the same shape.
    let batch = 12 + i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    let at = 2 * batch + 70;
    bytes[at] ^= 0x40;
    assert!(io.write_file(&path, &bytes));
    let damaged = verify_partition(&io, dir).unwrap();
    // The check stops there and says how many segments it did not reach.
    assert_eq!(report.unchecked_segments, 0);
    assert_eq!(
        (damaged.segments, damaged.unchecked_segments),
        (2, report.segments - 2)
    );
    let problem = damaged.problem.unwrap();
    assert_eq!(problem.file, path);
    assert_eq!(problem.position, (2 * batch + 17) as u64, "{problem:?}");
    assert!(
        matches!(
            (
                problem.kind,
                crate::storage::verify_dir(&io, dir).unwrap().problem
            ),
            (
                ProblemKind::CorruptBatch,
                Some(Problem {
                    kind: ProblemKind::CorruptBatch,
                    ..
                })
            )
        ),
        "{problem:?}"
    );
}

/// Regression (found by the `recovery` fuzz target): closing or recovering a segment
/// without timestamps wrote a time index entry `(-1, base)` naming no batch.
#[test]
fn segments_without_timestamps_get_no_time_index_entry() {
    let io = FaultyIo::new(5);
    let dir = Path::new("/data/t-2");
    let open = || {
        SegmentSet::open(
            dir,
            LogSetup {
                io: Arc::new(io.clone()),
                ..LogSetup::default()
            },
        )
        .unwrap()
        .0
    };
    open().close().unwrap(); // an empty segment, closed
    assert_eq!(verify_partition(&io, dir).unwrap().problem, None);
    let index = dir.join("00000000000000000000.timeindex");
    assert_eq!(io.read_file(&index).unwrap(), b"");

    let mut log = open(); // recovered from offset 0: indexes rebuilt
    log.append(&[BatchRecord::new(-1, None, b"no timestamp")])
        .unwrap();
    log.close().unwrap();
    assert_eq!(verify_partition(&io, dir).unwrap().problem, None);
    assert_eq!(io.read_file(&index).unwrap(), b"");
    drop(open());
    assert_eq!(verify_partition(&io, dir).unwrap().problem, None);
}

#[test]
fn gaps_fail_the_dense_check_only() {
    let io = FaultyIo::new(6);
    let dir = Path::new("/data/t-3");
    write_partition(Arc::new(io.clone()), dir, 200);
    let dense = VerifyConfig::default();
    let gaps = VerifyConfig::default().dense_offsets(false);
    assert_eq!(
        verify_partition_with(&io, dir, dense).unwrap().problem,
        None
    );

    // A segment deleted by hand: the next one names the gap.
    let logs: Vec<String> = io
        .list_dir(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".log"))
        .collect();
    let (doomed, after) = (parse_file_name(&logs[2]).unwrap().0, &logs[3]);
    for suffix in SEGMENT_SUFFIXES {
        io.remove_file(&dir.join(file_name(doomed, suffix)))
            .unwrap();
    }
    let problem = verify_partition(&io, dir).unwrap().problem.unwrap();
    assert_eq!((problem.file, problem.position), (dir.join(after), 0));
    assert_eq!(problem.kind, ProblemKind::NotDense);
    assert_eq!(verify_partition_with(&io, dir, gaps).unwrap().problem, None);

    // A batch appended with a gap inside the active segment.
    let dir = Path::new("/data/t-4");
    let (mut log, _) = SegmentSet::open(
        dir,
        LogSetup {
            io: Arc::new(io.clone()),
            ..LogSetup::default()
        },
    )
    .unwrap();
    log.append(&[BatchRecord::new(1, None, b"a")]).unwrap();
    let batch =
        crate::storage::record_batch::encode_batch(9, &[BatchRecord::new(2, None, b"b")]).unwrap();
    let info = log.append_batch(&batch).unwrap();
    log.close().unwrap();
    // The gap is inside the segment, or at the start of a new one if the set rolled.
    let problem = verify_partition(&io, dir).unwrap().problem.unwrap();
    let segment = dir.join(file_name(info.segment_base_offset, LOG_SUFFIX));
    assert_eq!((problem.file, problem.position), (segment, info.position));
    assert_eq!(problem.kind, ProblemKind::NotDense);
    assert_eq!(verify_partition_with(&io, dir, gaps).unwrap().problem, None);
}

#[test]
fn records_must_fill_their_batch() {
    use crate::storage::record_batch::{crc32c, BatchBuilder};
    let io = FaultyIo::new(7);
    let dir = Path::new("/data/t-5");
    io.create_dir_all(dir).unwrap();
    let log = dir.join("00000000000000000000.log");
    for suffix in SEGMENT_SUFFIXES {
        io.open(&dir.join(file_name(0, suffix)), OpenMode::CreateNew)
            .unwrap();
    }
    let good = BatchBuilder::new(0)
        .with_record(7, None, Some(b"a"))
        .unwrap()
        .with_record(7, None, Some(b"b"))
        .unwrap()
        .finish()
        .to_vec();
    let with_crc = |mut b: Vec<u8>| {
        let crc = crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    };
    let check = |bytes: &[u8]| {
        assert!(io.write_file(&log, bytes));
        verify_partition(&io, dir).unwrap().problem
    };
    assert_eq!(check(&good), None);

    // lastOffsetDelta 2 for two records.
    let mut b = good.clone();
    b[26] = 2;
    let problem = check(&with_crc(b)).unwrap();
    assert_eq!(problem.kind, ProblemKind::NotDense);

    // The second record's offset delta 0 instead of 1 (zig-zag 2 -> 0).
    let mut b = good.clone();
    let second = 61 + 1 + usize::from(b[61] / 2);
    assert_eq!(b[second + 3], 2, "offsetDelta of record 1");
    b[second + 3] = 0;
    // Deltas must increase inside a batch: a structural rule, found with or without the
    // dense check.
    let b = with_crc(b);
    let problem = check(&b).unwrap();
    assert_eq!(problem.kind, ProblemKind::CorruptBatch, "{problem:?}");
    let gaps = VerifyConfig::default().dense_offsets(false);
    assert!(verify_partition_with(&io, dir, gaps)
        .unwrap()
        .problem
        .is_some());
}

#[test]
fn misnamed_and_stray_files() {
    let io = FaultyIo::new(4);
    let dir = Path::new("/data/t-1");
    write_partition(Arc::new(io.clone()), dir, 5);
    io.open(&dir.join("leader-epoch-checkpoint"), OpenMode::CreateNew)
        .unwrap();
    assert_eq!(verify_partition(&io, dir).unwrap().problem, None);

    io.open(&dir.join("7.log"), OpenMode::CreateNew).unwrap();
    let report = verify_partition(&io, dir).unwrap();
    // A problem in the names: no segment was checked.
    assert_eq!(report.segments, 0);
    assert!(report.unchecked_segments > 0, "{report:?}");
    let problem = report.problem.unwrap();
    assert_eq!(problem.file, dir.join("7.log"));
    assert_eq!(problem.kind, ProblemKind::Misnamed, "{problem:?}");
    io.remove_file(&dir.join("7.log")).unwrap();

    let stray = dir.join("00000000000000000099.timeindex");
    io.open(&stray, OpenMode::CreateNew).unwrap();
    let problem = verify_partition(&io, dir).unwrap().problem.unwrap();
    assert_eq!(problem.file, stray);
    assert_eq!(problem.kind, ProblemKind::StrayIndex, "{problem:?}");
}

#[test]
fn tree_of_partitions() {
    let root = tempfile::tempdir().unwrap();
    write_partition(Arc::new(FsIo), &root.path().join("a-0"), 30);
    write_partition(Arc::new(FsIo), &root.path().join("a-1"), 30);
    fs::write(
        root.path().join("recovery-point-offset-checkpoint"),
        "0\n0\n",
    )
    .unwrap();
    fs::create_dir(root.path().join("unrelated")).unwrap();
    let report = verify_path(root.path()).unwrap();
    let dirs: Vec<&Path> = report.partitions.iter().map(|p| p.dir.as_path()).collect();
    assert_eq!(dirs, [root.path().join("a-0"), root.path().join("a-1")]);
    assert_eq!(report.first_problem(), None);
    assert_eq!(report.batches(), 60);

    // Truncate a .log mid-batch in the second partition: only it reports a problem.
    let log = root.path().join("a-1/00000000000000000000.log");
    let len = fs::metadata(&log).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let report = verify_path(root.path()).unwrap();
    assert_eq!(report.partitions[0].report.problem, None);
    let problem = report.first_problem().unwrap();
    assert_eq!(problem.file, log);
    assert_eq!(problem.kind, ProblemKind::IncompleteBatch, "{problem:?}");
    assert_eq!(report.problems().count(), 1);

    // A partition directory given directly.
    let one = verify_path(&root.path().join("a-0")).unwrap();
    assert_eq!(one.partitions.len(), 1);
    assert_eq!(one.first_problem(), None);
}

#[test]
fn bad_paths() {
    let root = tempfile::tempdir().unwrap();
    assert!(matches!(
        verify_path(root.path()),
        Err(Error::NotASegment { .. })
    ));
    let file = root.path().join("file");
    fs::write(&file, b"x").unwrap();
    assert!(matches!(verify_path(&file), Err(Error::NotASegment { .. })));
    match verify_path(&root.path().join("missing")) {
        Err(Error::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
}
