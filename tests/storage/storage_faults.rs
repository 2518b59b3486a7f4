//! Fault injection: each fault the storage layer's simulated I/O (`storage::fault`) can inject ends in a typed error or a
//! documented recovery, never a panic, and never loses what was synced.

use crate::storage_common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use logbus::error::Corruption;
use logbus::storage::checkpoint::{self, TopicPartitionOffset};
use logbus::storage::fault::{Fault, FaultyIo};
use logbus::storage::file_names::file_name;
use logbus::storage::{Checkpoints, FsIo, Io, LogConfig, SegmentSet};
use logbus::Error;
use storage_common::*;

/// Writes `n` one-record batches to a fresh directory with real files; returns the recovery
/// point from a clean close and each batch's (segment base, position).
fn write_real(dir: &Path, config: &LogConfig, n: u64) -> (Checkpoints, Vec<(u64, u64)>) {
    let (mut log, _) = open(
        dir,
        config.clone(),
        Arc::new(FsIo),
        clock(),
        Checkpoints::default(),
    );
    let mut places = Vec::new();
    for i in 0..n {
        let info = log.append(&[record(i, 100)]).unwrap();
        places.push((info.segment_base_offset, info.position));
    }
    (log.close().unwrap(), places)
}

fn log_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(file_name(base, "log"))
}

fn reopen_real(
    dir: &Path,
    config: &LogConfig,
    cp: Checkpoints,
) -> (SegmentSet, logbus::storage::RecoveryReport) {
    open(dir, config.clone(), Arc::new(FsIo), clock(), cp)
}

fn check_records(log: &SegmentSet, n: u64) {
    let all = read_all(log);
    assert_eq!(all.len() as u64, n);
    for (i, (offset, r)) in all.iter().enumerate() {
        assert_eq!(*offset, i as u64);
        assert_eq!(r, &record(i as u64, 100));
    }
}

#[test]
fn torn_tail_is_cut_at_the_last_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig::default();
    let (cp, places) = write_real(dir.path(), &config, 20);
    let path = log_path(dir.path(), 0);
    let len = fs::metadata(&path).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 7).unwrap();
    drop(f);

    let (log, report) = reopen_real(dir.path(), &config, cp);
    let t = report.truncation.expect("truncated");
    assert_eq!(t.file, path);
    assert_eq!(t.position, places[19].1);
    assert_eq!(t.bytes_dropped, len - 7 - places[19].1);
    assert_eq!(t.first_lost_offset, 19);
    assert_eq!(log.log_end_offset(), 19);
    check_records(&log, 19);
    assert_consistent(&FsIo, dir.path());
}

#[test]
fn zero_filled_tail_is_cut_and_nothing_valid_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig::default();
    let (cp, _) = write_real(dir.path(), &config, 20);
    let path = log_path(dir.path(), 0);
    let len = fs::metadata(&path).unwrap().len();
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0u8; 4096]);
    fs::write(&path, bytes).unwrap();

    let (log, report) = reopen_real(dir.path(), &config, cp);
    let t = report.truncation.expect("truncated");
    assert_eq!(
        (t.position, t.bytes_dropped, t.first_lost_offset),
        (len, 4096, 20)
    );
    assert!(t.reason.contains("batchLength 0"), "{}", t.reason);
    check_records(&log, 20);
    assert_eq!(fs::metadata(&path).unwrap().len(), len);
}

#[test]
fn bit_flip_mid_segment_cuts_there_and_drops_later_segments() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let (_, places) = write_real(dir.path(), &config, 60);
    let segments: Vec<u64> = {
        let mut s: Vec<u64> = places.iter().map(|p| p.0).collect();
        s.dedup();
        s
    };
    assert!(segments.len() >= 3, "{segments:?}");
    // A batch in the middle of the second segment.
    let victims: Vec<(usize, &(u64, u64))> = places
        .iter()
        .enumerate()
        .filter(|(_, p)| p.0 == segments[1])
        .collect();
    let (victim, &(base, position)) = victims[victims.len() / 2];
    let path = log_path(dir.path(), base);
    let mut bytes = fs::read(&path).unwrap();
    bytes[position as usize + 70] ^= 0x04; // inside the record, under the CRC
    fs::write(&path, bytes).unwrap();

    // Recover everything (recovery point 0), as after an unclean shutdown.
    let (log, report) = reopen_real(dir.path(), &config, Checkpoints::default());
    let t = report.truncation.clone().expect("truncated");
    assert_eq!((t.file.clone(), t.position), (path, position));
    assert!(t.reason.contains("CRC-32C mismatch"), "{}", t.reason);
    assert_eq!(t.first_lost_offset, victim as u64);
    assert_eq!(report.deleted_segments.len(), segments.len() - 2);
    assert_eq!(log.log_end_offset(), victim as u64);
    check_records(&log, victim as u64);
    assert_consistent(&FsIo, dir.path());
}

#[test]
fn bit_flip_below_the_recovery_point_is_caught_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let (cp, places) = write_real(dir.path(), &config, 60);
    let (base, position) = places[1];
    let path = log_path(dir.path(), base);
    let mut bytes = fs::read(&path).unwrap();
    bytes[position as usize + 70] ^= 0x04;
    fs::write(&path, bytes).unwrap();
    let (log, report) = reopen_real(dir.path(), &config, cp);
    assert!(
        report.truncation.is_none(),
        "not re-read below the recovery point"
    );
    match log.read_records(1, 1) {
        Err(Error::Corrupt {
            file: Some(file),
            position: p,
            reason: Corruption::CrcMismatch { .. },
        }) => {
            assert_eq!(file, path);
            assert_eq!(p, position + 17);
        }
        other => panic!("expected a CRC error, got {other:?}"),
    }
    let problem = logbus::storage::verify_dir(&FsIo, dir.path())
        .unwrap()
        .problem
        .unwrap();
    assert_eq!((problem.file, problem.position), (path, position + 17));
}

fn index_fault(damage: impl Fn(&Path)) -> (SegmentSet, logbus::storage::RecoveryReport, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let (cp, _) = write_real(dir.path(), &config, 60);
    damage(dir.path());
    let (log, report) = reopen_real(dir.path(), &config, cp);
    check_records(&log, 60);
    for i in 0..60 {
        assert_eq!(log.read_records(i, 1).unwrap()[0].0, i);
        assert_eq!(
            log.offset_for_timestamp(T0 + i as i64).unwrap(),
            Some((i, T0 + i as i64))
        );
    }
    assert_consistent(&FsIo, dir.path());
    (log, report, dir.keep())
}

#[test]
fn truncated_index_is_rebuilt() {
    let (_, report, dir) = index_fault(|dir| {
        let path = dir.join(file_name(0, "index"));
        let len = fs::metadata(&path).unwrap().len();
        assert!(len >= 16, "the first segment has index entries");
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
    });
    assert_eq!(
        report.rebuilt_indexes,
        vec![dir.join(file_name(0, "index"))]
    );
    assert!(report.truncation.is_none());
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn missing_index_is_rebuilt() {
    let (_, report, dir) =
        index_fault(|dir| fs::remove_file(dir.join(file_name(0, "index"))).unwrap());
    assert_eq!(
        report.rebuilt_indexes,
        vec![dir.join(file_name(0, "index"))]
    );
    assert!(fs::metadata(dir.join(file_name(0, "index"))).unwrap().len() > 0);
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn missing_time_index_is_rebuilt() {
    let (_, report, dir) =
        index_fault(|dir| fs::remove_file(dir.join(file_name(0, "timeindex"))).unwrap());
    assert_eq!(
        report.rebuilt_indexes,
        vec![dir.join(file_name(0, "timeindex"))]
    );
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn garbage_checkpoint_files_are_typed_errors_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recovery-point-offset-checkpoint");
    let cases: [(&[u8], usize); 8] = [
        (b"", 1),
        (b"1\n0\n", 1),
        (b"0\nmany\n", 2),
        (b"0\n2\norders 0 5\n", 4),
        (b"0\n1\norders 0\n", 3),
        (b"0\n1\norders x 5\n", 3),
        (b"0\n1\norders 0 -5\n", 3),
        (b"0\n0\nextra\n", 3),
    ];
    for (bytes, line) in cases {
        fs::write(&path, bytes).unwrap();
        match checkpoint::read::<TopicPartitionOffset>(&FsIo, &path) {
            Err(Error::InvalidCheckpoint {
                file,
                line: l,
                reason,
            }) => {
                assert_eq!((file.as_path(), l), (path.as_path(), line), "{reason}");
            }
            other => panic!(
                "{:?}: expected InvalidCheckpoint, got {other:?}",
                String::from_utf8_lossy(bytes)
            ),
        }
    }
    fs::write(&path, [0xff, 0xfe, b'\n']).unwrap();
    assert!(matches!(
        checkpoint::read::<TopicPartitionOffset>(&FsIo, &path),
        Err(Error::InvalidCheckpoint { line: 1, .. })
    ));
    // A missing file is "no checkpoint yet", and a good one round-trips.
    fs::remove_file(&path).unwrap();
    assert_eq!(
        checkpoint::read::<TopicPartitionOffset>(&FsIo, &path).unwrap(),
        None
    );
}

#[test]
fn checkpoint_replacement_survives_power_loss_as_old_or_new() {
    for seed in 0..50 {
        let fs = FaultyIo::new(seed);
        let dir = Path::new("/logs");
        fs.create_dir_all(dir).unwrap();
        let path = dir.join("log-start-offset-checkpoint");
        let entry = |offset| {
            vec![TopicPartitionOffset {
                topic: "t".into(),
                partition: 0,
                offset,
            }]
        };
        checkpoint::write(&fs, &path, &entry(1)).unwrap();
        checkpoint::write(&fs, &path, &entry(2)).unwrap();
        fs.crash();
        let got = checkpoint::read::<TopicPartitionOffset>(&fs, &path).unwrap();
        assert_eq!(
            got,
            Some(entry(2)),
            "both writes completed with their fsyncs"
        );

        // A crash in the middle of a replacement leaves the old or the new file.
        fs.inject(Fault::DirSyncError, 0);
        let _ = checkpoint::write(&fs, &path, &entry(3));
        fs.crash();
        let got = checkpoint::read::<TopicPartitionOffset>(&fs, &path).unwrap();
        assert!(
            got == Some(entry(2)) || got == Some(entry(3)),
            "seed {seed}: {got:?}"
        );
    }
}

fn sim_dir() -> PathBuf {
    PathBuf::from("/data/topic-0")
}

/// Appends until `fail` makes an append or a sync fail; returns the records synced before.
fn run_until_failure(fs: &FaultyIo, arm: impl FnOnce(&FaultyIo)) -> (u64, Checkpoints, Error) {
    let config = LogConfig {
        write_buffer_bytes: 1024,
        ..small_config()
    };
    let (mut log, _) = open(
        &sim_dir(),
        config,
        Arc::new(fs.clone()),
        clock(),
        Checkpoints::default(),
    );
    let mut synced = 0;
    for i in 0..20 {
        log.append(&[record(i, 100)]).unwrap();
    }
    log.fsync().unwrap();
    synced = synced.max(log.log_end_offset());
    let cp = Checkpoints {
        recovery_point: log.recovery_point(),
        log_start_offset: log.log_start_offset(),
        clean_shutdown: false,
    };
    arm(fs);
    let mut i = 20;
    let err =
        loop {
            let r = log.append(&[record(i, 100)]).and_then(|_| {
                if i % 5 == 0 {
                    log.fsync()
                } else {
                    Ok(())
                }
            });
            match r {
                Ok(()) => {
                    if i % 5 == 0 {
                        synced = log.log_end_offset();
                    }
                }
                Err(e) => break e,
            }
            i += 1;
            assert!(i < 10_000, "the fault never fired");
        };
    // Once failed, the log refuses writes with a typed error.
    assert!(matches!(
        log.append(&[record(i, 100)]),
        Err(Error::LogOffline { .. })
    ));
    assert!(matches!(log.fsync(), Err(Error::LogOffline { .. })));
    (synced, cp, err)
}

fn check_prefix_after_reopen(fs: &FaultyIo, synced: u64, cp: Checkpoints) {
    fs.clear_faults();
    fs.set_capacity(None);
    let (log, _report) = open(
        &sim_dir(),
        small_config(),
        Arc::new(fs.clone()),
        clock(),
        cp,
    );
    let all = read_all(&log);
    assert!(
        all.len() as u64 >= synced,
        "lost synced records: {} < {synced}",
        all.len()
    );
    for (i, (offset, r)) in all.iter().enumerate() {
        assert_eq!((*offset, r), (i as u64, &record(i as u64, 100)));
    }
    assert_consistent(fs, &sim_dir());
}

#[test]
fn enospc_during_append_is_a_typed_error_and_loses_nothing_synced() {
    let fs = FaultyIo::new(1);
    let (synced, cp, err) =
        run_until_failure(&fs, |fs| fs.set_capacity(Some(fs.used_bytes() + 3000)));
    match &err {
        Error::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(28), "{err}"),
        other => panic!("expected ENOSPC, got {other:?}"),
    }
    assert!(synced >= 20);
    // Without a crash, and again after one.
    check_prefix_after_reopen(&fs, synced, cp);
    fs.crash();
    check_prefix_after_reopen(&fs, synced, cp);
}

#[test]
fn failing_fsync_is_a_typed_error_and_loses_nothing_synced() {
    let fs = FaultyIo::new(2);
    let (synced, cp, err) = run_until_failure(&fs, |fs| fs.inject(Fault::SyncError, 2));
    assert!(
        matches!(&err, Error::Io { context, .. } if context.contains("syncing")),
        "{err}"
    );
    fs.crash();
    check_prefix_after_reopen(&fs, synced, cp);
}

#[test]
fn failing_write_is_a_typed_error_and_loses_nothing_synced() {
    let fs = FaultyIo::new(3);
    let (synced, cp, err) = run_until_failure(&fs, |fs| fs.inject(Fault::WriteError, 3));
    assert!(
        matches!(&err, Error::Io { context, .. } if context.contains("writing")),
        "{err}"
    );
    fs.crash();
    check_prefix_after_reopen(&fs, synced, cp);
}

#[test]
fn short_writes_are_retried() {
    let fs = FaultyIo::new(4);
    let (mut log, _) = open(
        &sim_dir(),
        small_config(),
        Arc::new(fs.clone()),
        clock(),
        Checkpoints::default(),
    );
    for i in 0..30 {
        fs.inject(Fault::ShortWrite, 0);
        log.append(&[record(i, 100)]).unwrap();
    }
    log.fsync().unwrap();
    let all = read_all(&log);
    assert_eq!(all.len(), 30);
    assert_consistent(&fs, &sim_dir());
}

#[test]
fn segment_deleted_by_hand_leaves_a_reported_gap() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let (cp, places) = write_real(dir.path(), &config, 60);
    let mut bases: Vec<u64> = places.iter().map(|p| p.0).collect();
    bases.dedup();
    assert!(bases.len() >= 4);
    // A middle segment's log: its indexes become strays; its offsets a gap.
    fs::remove_file(log_path(dir.path(), bases[1])).unwrap();
    let (log, report) = reopen_real(dir.path(), &config, cp);
    assert_eq!(report.gaps, vec![(bases[1], bases[2])]);
    assert!(report
        .removed_files
        .contains(&dir.path().join(file_name(bases[1], "index"))));
    // A read inside the gap returns the next records held, as a fetch would.
    let got = log.read_records(bases[1], 1).unwrap();
    assert_eq!(got[0].0, bases[2]);
    drop(log);

    // The first segment's log: the log now starts at the next segment.
    fs::remove_file(log_path(dir.path(), 0)).unwrap();
    let (log, report) = reopen_real(dir.path(), &config, cp);
    assert_eq!(report.log_start_offset, bases[2]);
    assert_eq!(log.log_start_offset(), bases[2]);
    assert!(matches!(
        log.read(0, 100),
        Err(Error::OffsetOutOfRange { topic: None, partition: None, requested: 0, start, end: 60 }) if start == bases[2]
    ));
    assert_eq!(read_all(&log).len() as u64, 60 - bases[2]);
}

/// Leftovers go; a compaction's leftovers are finished as Kafka's `LogLoader` does: a
/// `.cleaned` file is removed, a whole `.swap` replaces the segments it covers (here, two
/// segments merged byte for byte: the same records, read once).
#[test]
fn leftovers_are_removed_swaps_finished_and_foreign_files_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let (cp, places) = write_real(dir.path(), &config, 60);
    let mut bases: Vec<u64> = places.iter().map(|p| p.0).collect();
    bases.dedup();
    let d = dir.path();
    fs::write(d.join("00000000000000000999.log.deleted"), b"x").unwrap();
    fs::write(d.join("00000000000000099999.index"), b"stray").unwrap();
    fs::write(d.join("00000000000000099999.timeindex"), b"stray").unwrap();
    fs::write(d.join("leader-epoch-checkpoint"), b"0\n0\n").unwrap();
    let cleaned = d.join("00000000000000000998.index.cleaned");
    fs::write(&cleaned, b"x").unwrap();
    let mut merged = fs::read(log_path(d, bases[0])).unwrap();
    merged.extend(fs::read(log_path(d, bases[1])).unwrap());
    let swap = d.join(format!("{}.swap", file_name(0, "log")));
    fs::write(&swap, &merged).unwrap();

    let (log, report) = reopen_real(d, &config, cp);
    assert_eq!(report.foreign_files, Vec::<std::path::PathBuf>::new());
    assert_eq!(report.swaps_completed, vec![log_path(d, 0)]);
    let removed: Vec<String> = report
        .removed_files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for name in [
        "00000000000000000999.log.deleted",
        "00000000000000099999.index",
        "00000000000000099999.timeindex",
        "00000000000000000998.index.cleaned",
    ] {
        assert!(
            removed.contains(&name.to_string()),
            "{name} not in {removed:?}"
        );
    }
    assert!(d.join("leader-epoch-checkpoint").exists());
    for gone in [cleaned, swap, log_path(d, bases[1])] {
        assert!(!gone.exists(), "{} is still there", gone.display());
    }
    check_records(&log, 60);
}

/// Power loss at random points of an append sequence: what was synced survives, the log is
/// a prefix of what was written, and the indexes are consistent.
#[test]
fn power_loss_at_random_points_keeps_a_consistent_prefix() {
    let mut crashes = 0;
    // LOGBUS_CRASH_SEEDS runs more seeds (e.g. 5000) for a longer search.
    let seeds: u64 = std::env::var("LOGBUS_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    for seed in 0..seeds {
        let fs = FaultyIo::new(seed);
        let mut rng = fastrand::Rng::with_seed(seed);
        let config = LogConfig {
            segment_bytes: rng.u64(1000..4000),
            index_interval_bytes: rng.i64(0..600),
            write_buffer_bytes: [0, 300, 4096][rng.usize(0..3)],
            ..LogConfig::default()
        };
        let io: Arc<dyn Io> = Arc::new(fs.clone());
        let mut cp = Checkpoints::default();
        let mut written = 0u64;
        let mut synced = 0u64;
        // Several crash/reopen rounds on the same disk.
        for round in 0..rng.usize(1..4) {
            let (mut log, report) = open(&sim_dir(), config.clone(), io.clone(), clock(), cp);
            let all = read_all(&log);
            assert!(
                all.len() as u64 >= synced,
                "seed {seed} round {round}: lost synced records ({} < {synced}); {report:?}",
                all.len()
            );
            for (i, (offset, r)) in all.iter().enumerate() {
                let i = i as u64;
                assert_eq!(*offset, i, "seed {seed}: offsets are dense from 0");
                assert_eq!(
                    r,
                    &record(i, r.value.as_ref().unwrap().len()),
                    "seed {seed}: not a prefix"
                );
            }
            assert!(all.len() as u64 <= written);
            assert_consistent(&fs, &sim_dir());
            written = all.len() as u64;
            synced = written; // recovery made the recovered log durable
            cp = Checkpoints {
                recovery_point: log.recovery_point(),
                log_start_offset: log.log_start_offset(),
                clean_shutdown: false,
            };
            for _ in 0..rng.usize(1..40) {
                let n = rng.usize(1..4);
                let records: Vec<_> = (0..n)
                    .map(|k| record(written + k as u64, rng.usize(1..250)))
                    .collect();
                log.append(&records).unwrap();
                written += n as u64;
                if rng.u8(0..4) == 0 {
                    log.fsync().unwrap();
                    synced = written;
                    cp.recovery_point = log.recovery_point();
                }
            }
            drop(log);
            fs.crash();
            crashes += 1;
        }
    }
    assert!(crashes >= 100, "{crashes} crashes");
}
