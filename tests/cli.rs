//! The `logbus` binary (`dump`, `verify`) on partition directories written by the storage
//! layer, intact and damaged. Needs the `cli` feature (`cargo test --all-features`).
#![cfg(feature = "cli")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use logbus::storage::record_batch::{encode_batch, BatchHeader, BatchRecord, Header};
use logbus::storage::{offset_index, time_index};
use logbus::storage::{LogConfig, LogSetup, SegmentSet};

/// The tests of this file one at a time: a child spawned by one test inherits the open
/// directory locks of another (a broker or log it has open) until the child execs, and that
/// other test's own child could then find its directory still locked after the broker
/// closed.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn logbus(args: &[&std::ffi::OsStr]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_logbus"))
        .args(args)
        .output()
        .expect("run the logbus binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "logbus panicked: {stderr}");
    out
}

fn run(args: &[&str], path: &Path) -> (i32, String, String) {
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    all.push(path.as_os_str());
    let out = logbus(&all);
    (
        out.status.code().expect("exited normally"),
        String::from_utf8(out.stdout).expect("UTF-8 output"),
        String::from_utf8(out.stderr).expect("UTF-8 errors"),
    )
}

/// The first batch every test partition starts with: three records, one with a null key, one
/// with a null value, timestamps out of order, headers.
fn first_batch() -> Vec<BatchRecord> {
    let header = |k: &str, v: Option<&[u8]>| Header {
        key: k.into(),
        value: v.map(<[u8]>::to_vec),
    };
    vec![
        BatchRecord {
            timestamp: 1_700_000_000_000,
            key: Some(b"k0".to_vec()),
            value: Some(b"v0".to_vec()),
            headers: vec![header("h", Some(b"x"))],
        },
        BatchRecord {
            timestamp: 1_700_000_000_005,
            key: None,
            value: Some(b"v1".to_vec()),
            headers: vec![],
        },
        BatchRecord {
            timestamp: 1_699_999_999_990,
            key: Some(b"k2".to_vec()),
            value: None,
            headers: vec![header("a", None), header("b", Some(b""))],
        },
    ]
}

/// Writes a partition: the first batch, then 120 one-record batches, in segments of about
/// 1 KiB with index entries every 200 bytes; closed cleanly.
fn write_partition(dir: &Path) {
    let config = LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 200,
        ..LogConfig::default()
    };
    let (mut log, _) = SegmentSet::open(
        dir,
        LogSetup {
            config,
            ..LogSetup::default()
        },
    )
    .unwrap();
    log.append(&first_batch()).unwrap();
    for i in 0..120i64 {
        let ts = 1_700_000_001_000 + (i % 9) * 100;
        log.append(&[BatchRecord::new(
            ts,
            Some(b"key"),
            format!("value-{i}").as_bytes(),
        )])
        .unwrap();
    }
    log.close().unwrap();
}

fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == suffix))
        .collect();
    out.sort();
    out
}

fn base_of(path: &Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// Start positions of the batches of a `.log` file.
fn batch_starts(log: &Path) -> Vec<u64> {
    let bytes = fs::read(log).unwrap();
    let mut starts = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        starts.push(pos as u64);
        pos += BatchHeader::parse(&bytes[pos..]).unwrap().size() as usize;
    }
    starts
}

#[test]
fn dump_prints_batches_records_and_indexes_like_kafka() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let (code, out, err) = run(&["dump"], &dir);
    assert_eq!(code, 0, "{err}");

    // The first batch, field by field (size and CRC from the same records encoded here: the
    // CRC does not cover the base offset).
    let bytes = encode_batch(0, &first_batch()).unwrap();
    let h = BatchHeader::parse(&bytes).unwrap();
    let first_log = dir.join("00000000000000000000.log");
    let expected = [
        format!("Dumping {}", first_log.display()),
        "Log starting offset: 0".to_string(),
        format!(
            "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 \
             producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false \
             isControl: false position: 0 CreateTime: 1700000000005 size: {} magic: 2 \
             compresscodec: none crc: {} isvalid: true",
            bytes.len(),
            h.crc
        ),
        "| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: -1 \
         headerKeys: [h]"
            .to_string(),
        "| offset: 1 CreateTime: 1700000000005 keySize: -1 valueSize: 2 sequence: -1 \
         headerKeys: []"
            .to_string(),
        "| offset: 2 CreateTime: 1699999999990 keySize: 2 valueSize: -1 sequence: -1 \
         headerKeys: [a,b]"
            .to_string(),
    ];
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..expected.len()], expected.map(|s| s), "{out}");
    assert!(!out.contains("payload:"), "payloads only with --print-data");

    // Every batch of every segment, every index and time index entry, in file order.
    let logs = files(&dir, "log");
    assert!(logs.len() >= 4, "expected several segments: {logs:?}");
    let mut batches = 0;
    let mut index_entries = 0;
    for log in &logs {
        let base = base_of(log);
        let stem = log.with_extension("");
        batches += batch_starts(log).len();
        let dump_of = |path: &Path| {
            let start = out
                .find(&format!("Dumping {}\n", path.display()))
                .unwrap_or_else(|| panic!("no dump of {}", path.display()));
            let rest = &out[start..];
            let end = rest[1..].find("Dumping ").map_or(rest.len(), |e| e + 1);
            // Files are separated by a blank line.
            rest[..end].trim_end().to_string()
        };
        let log_dump = dump_of(log);
        for pos in batch_starts(log) {
            assert!(
                log_dump.contains(&format!(" position: {pos} ")),
                "{log_dump}"
            );
        }
        let index = stem.with_extension("index");
        let index_dump = dump_of(&index);
        let entries = offset_index::parse(&fs::read(&index).unwrap(), base);
        index_entries += entries.len();
        let want: Vec<String> = entries
            .iter()
            .map(|e| format!("offset: {} position: {}", e.offset, e.position))
            .collect();
        assert_eq!(index_dump.lines().skip(1).collect::<Vec<_>>(), want);
        let time = stem.with_extension("timeindex");
        let time_dump = dump_of(&time);
        let entries = time_index::parse(&fs::read(&time).unwrap(), base);
        assert!(
            !entries.is_empty(),
            "a closed segment has its final time entry"
        );
        let want: Vec<String> = entries
            .iter()
            .map(|e| format!("timestamp: {} offset: {}", e.timestamp, e.offset))
            .collect();
        assert_eq!(time_dump.lines().skip(1).collect::<Vec<_>>(), want);
    }
    assert_eq!(batches, 121);
    assert!(
        index_entries > 10,
        "the 200-byte interval gives many entries"
    );
    assert_eq!(out.matches("isvalid: true").count(), 121);
    assert_eq!(out.matches("| offset: ").count(), 123);
}

#[test]
fn dump_with_data_and_of_single_files() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let log = dir.join("00000000000000000000.log");
    let (code, out, _) = run(&["dump", "--print-data"], &log);
    assert_eq!(code, 0);
    assert!(
        out.contains("headerKeys: [h] key: k0 payload: v0\n"),
        "{out}"
    );
    assert!(out.contains("headerKeys: [] payload: v1\n"), "{out}");
    assert!(out.contains("headerKeys: [a,b] key: k2\n"), "{out}");
    assert!(out.contains("key: key payload: value-0\n"), "{out}");
    assert!(!out.contains("Dumping") || out.matches("Dumping").count() == 1);

    let index = files(&dir, "index").remove(1);
    let (code, out, _) = run(&["dump"], &index);
    assert_eq!(code, 0);
    assert!(
        out.starts_with(&format!("Dumping {}\n", index.display())),
        "{out}"
    );
    assert!(
        out.lines().skip(1).all(|l| l.starts_with("offset: ")),
        "{out}"
    );

    // A damaged batch is shown as invalid, and a torn tail is named.
    let mut bytes = fs::read(&log).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 1, 0, 0, 0, 0, 0, 2, 7]);
    fs::write(&log, &bytes).unwrap();
    let (code, out, _) = run(&["dump"], &log);
    assert_eq!(code, 0);
    assert!(out.contains("isvalid: false"), "{out}");
    assert!(
        out.contains("records not shown: the CRC does not match"),
        "{out}"
    );
    assert!(
        out.contains("Found 18 invalid bytes at the end of 00000000000000000000.log"),
        "{out}"
    );
}

/// `logbus dump` of a segment with batches of every codec: each batch's line names its
/// codec (`compresscodec:`, as Kafka's DumpLogSegments), and its records are decompressed
/// and shown like an uncompressed batch's; `verify` passes; a compressed batch whose stream
/// does not decode is shown with the reason.
#[test]
fn dump_shows_each_batchs_codec_and_its_decompressed_records() {
    use logbus::storage::record_batch::Compression;
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("codecs-0");
    let (mut set, _) = SegmentSet::open(&dir, LogSetup::default()).unwrap();
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    for (i, codec) in codecs.iter().enumerate() {
        set.set_compression(*codec).unwrap();
        let records: Vec<BatchRecord> = (0..10)
            .map(|j| {
                let value = format!("{codec} value {j} {}", "repeat ".repeat(10));
                BatchRecord::new(1_700_000_000_000 + j, Some(b"key"), value.as_bytes())
            })
            .collect();
        let info = set.append(&records).unwrap();
        assert_eq!(info.base_offset, i as u64 * 10);
    }
    set.close().unwrap();
    let log = dir.join("00000000000000000000.log");
    let (code, out, err) = run(&["dump", "--print-data"], &log);
    assert_eq!(code, 0, "{err}");
    for (i, codec) in codecs.iter().enumerate() {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("baseOffset: {} ", i * 10)))
            .unwrap_or_else(|| panic!("no batch line at {}: {out}", i * 10));
        assert!(line.contains(&format!("compresscodec: {codec} ")), "{line}");
        assert!(line.contains("isvalid: true"), "{line}");
        assert!(
            out.contains(&format!(
                "| offset: {} CreateTime: 1700000000003 keySize: 3 valueSize: ",
                i * 10 + 3
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!("payload: {codec} value 9 repeat")),
            "{out}"
        );
    }
    assert!(!out.contains("records not shown"), "{out}");
    let (code, out, err) = run(&["verify"], &dir);
    assert_eq!(code, 0, "{out}{err}");

    // The zstd batch's stream damaged under a CRC that matches: shown, with the reason.
    let mut bytes = fs::read(&log).unwrap();
    let start = batch_starts(&log)[4] as usize;
    let mid = start + 61 + 10;
    for b in &mut bytes[mid..mid + 6] {
        *b ^= 0x5a;
    }
    let crc = crc32c::crc32c(&bytes[start + 21..]);
    bytes[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
    fs::write(&log, &bytes).unwrap();
    let (code, out, _) = run(&["dump"], &log);
    assert_eq!(code, 0);
    assert!(
        out.contains("records not shown") && out.contains("zstd stream"),
        "{out}"
    );
    let (code, out, err) = run(&["verify"], &dir);
    assert_ne!(code, 0, "{out}");
    assert!(
        format!("{out}{err}").contains(&format!("byte {}", start + 61)),
        "{out}{err}"
    );
}

#[test]
fn verify_accepts_what_the_storage_layer_wrote() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    write_partition(&tmp.path().join("orders-0"));
    write_partition(&tmp.path().join("orders-1"));
    // A partition directory, and a directory of them.
    for path in [tmp.path().join("orders-0"), tmp.path().to_path_buf()] {
        let (code, out, err) = run(&["verify"], &path);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("orders-0: OK ("), "{out}");
        assert!(out.contains("all consistent"), "{out}");
    }
}

/// Runs `verify` on `dir` expecting a problem in `file` at byte `position`.
fn assert_problem(dir: &Path, file: &Path, position: u64, what: &str) {
    let (code, out, err) = run(&["verify"], dir);
    assert_eq!(code, 1, "{out}{err}");
    let want = format!("PROBLEM in {} at byte {position}: ", file.display());
    let line = out
        .lines()
        .find(|l| l.contains("PROBLEM"))
        .unwrap_or_else(|| panic!("no problem reported: {out}"));
    assert!(line.contains(&want), "expected `{want}` in {line}");
    assert!(line.contains(what), "expected `{what}` in {line}");
}

#[test]
fn verify_names_the_file_and_position_of_a_flipped_byte() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let log = files(&dir, "log").remove(2);
    let starts = batch_starts(&log);
    let mut bytes = fs::read(&log).unwrap();
    bytes[starts[3] as usize + 70] ^= 0x10; // inside the fourth batch's record
    fs::write(&log, &bytes).unwrap();
    // The problem is at the batch's CRC field.
    assert_problem(&dir, &log, starts[3] + 17, "CRC-32C mismatch");
}

#[test]
fn verify_names_a_truncated_log() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let log = files(&dir, "log").remove(1);
    let starts = batch_starts(&log);
    let len = fs::metadata(&log).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    assert_problem(&dir, &log, *starts.last().unwrap(), "incomplete batch");
}

#[test]
fn verify_names_a_corrupt_index_entry() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let index = files(&dir, "index").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    assert!(bytes.len() >= 16, "two entries at least");
    bytes[8 + 7] ^= 0x01; // the second entry's position, off by one
    fs::write(&index, &bytes).unwrap();
    assert_problem(&dir, &index, 8, "no batch starts at that position");

    // A time index cut mid-entry.
    fs::write(&index, {
        bytes[8 + 7] ^= 0x01;
        &bytes
    })
    .unwrap();
    let time = files(&dir, "timeindex").remove(1);
    let len = fs::metadata(&time).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&time)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    assert_problem(&dir, &time, len - 12, "not a multiple");
}

#[test]
fn verify_names_a_segment_deleted_by_hand_unless_gaps_are_allowed() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let logs = files(&dir, "log");
    let doomed = logs[1].with_extension("");
    for suffix in ["log", "index", "timeindex"] {
        fs::remove_file(doomed.with_extension(suffix)).unwrap();
    }
    assert_problem(&dir, &logs[2], 0, "offsets are not dense");
    let (code, out, err) = run(&["verify", "--allow-gaps"], &dir);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("all consistent"), "{out}");
}

/// A partition with a segment deleted by hand (a gap in its offsets): `dump` prints every
/// record left once, offsets strictly increasing, each the one stored.
#[test]
fn dump_of_a_log_with_a_gap_prints_each_offset_once_in_order() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let logs = files(&dir, "log");
    let base = |p: &Path| -> u64 { p.file_stem().unwrap().to_str().unwrap().parse().unwrap() };
    let lost = base(&logs[1])..base(&logs[2]);
    let doomed = logs[1].with_extension("");
    for suffix in ["log", "index", "timeindex"] {
        fs::remove_file(doomed.with_extension(suffix)).unwrap();
    }
    let (code, out, err) = run(&["dump"], &dir);
    assert_eq!(code, 0, "{err}");
    let offsets: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("| offset: "))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    // 3 records in the first batch, then 120.
    let want: Vec<u64> = (0..123).filter(|o| !lost.contains(o)).collect();
    assert!(!lost.is_empty());
    assert_eq!(offsets, want);
}

#[test]
fn bad_input_is_a_message_and_exit_code_2() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-dir");
    for cmd in ["dump", "verify"] {
        let (code, _, err) = run(&[cmd], &missing);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(
            err.contains("no-such-dir") && err.contains("No such file"),
            "{err}"
        );
    }

    let notes = tmp.path().join("notes.txt");
    fs::write(&notes, "hello").unwrap();
    let (code, _, err) = run(&["dump"], &notes);
    assert_eq!(code, 2);
    assert!(err.contains("not a segment file"), "{err}");
    let (code, _, err) = run(&["verify"], &notes);
    assert_eq!(code, 2);
    assert!(err.contains("not a directory"), "{err}");

    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let (code, _, err) = run(&["verify"], &empty);
    assert_eq!(code, 2);
    assert!(err.contains("no segment files"), "{err}");

    // An unreadable segment: a directory where a .log file should be.
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    fs::create_dir(dir.join("00000000000000099998.log")).unwrap();
    let (code, _, err) = run(&["verify"], &dir);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("00000000000000099998.log"), "{err}");

    // Usage errors come from clap, also with exit code 2.
    let out = logbus(&["frobnicate".as_ref()]);
    assert_eq!(out.status.code(), Some(2));
}

/// Defect 11 of issue 10: one unreadable file or dangling symlink must not hide the report on
/// every other partition.
#[cfg(unix)]
#[test]
fn cli_reports_every_partition_and_fails_at_the_end() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    write_partition(&tmp.path().join("a-0"));
    let broken = tmp.path().join("b-0");
    fs::create_dir(&broken).unwrap();
    std::os::unix::fs::symlink(
        tmp.path().join("nowhere"),
        broken.join("00000000000000000000.log"),
    )
    .unwrap();
    write_partition(&tmp.path().join("c-0"));
    for command in ["verify", "dump"] {
        let (code, out, err) = run(&[command], tmp.path());
        assert_ne!(code, 0, "{command}: {out}{err}");
        let a = tmp.path().join("a-0");
        let c = tmp.path().join("c-0");
        let all = format!("{out}{err}");
        for dir in [&a, &broken, &c] {
            assert!(
                all.contains(&dir.display().to_string()),
                "{command}: {} not reported:\n{all}",
                dir.display()
            );
        }
        if command == "verify" {
            assert!(out.contains(&format!("{}: OK", a.display())), "{out}");
            assert!(out.contains(&format!("{}: OK", c.display())), "{out}");
        }
    }
}

/// Batches over `--max-batch-bytes` are never read into memory: dump says so and goes on,
/// verify reports them unchecked.
#[test]
fn batches_over_the_limit_are_not_read() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let (code, out, err) = run(&["dump", "--max-batch-bytes", "90"], &dir);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("over --max-batch-bytes 90: not shown"),
        "{out}"
    );
    // The one-record batches that follow the first (larger) one are still shown.
    assert!(out.contains("baseOffset: 3 lastOffset: 3"), "{out}");
    let (code, out, _) = run(&["verify", "--max-batch-bytes", "90"], &dir);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("over the 90-byte limit"), "{out}");
    let (code, out, _) = run(&["verify"], &dir);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn describe_lists_topics_partitions_and_group_lag() {
    let _serial = one_at_a_time();
    use logbus::broker::{Broker, TopicConfig, TopicPartition};
    use logbus::consumer::ConsumerConfig;
    use logbus::persist::PersistConfig;
    use logbus::producer::Record as Sent;

    let tmp = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(tmp.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<String, u64>("clicks", TopicConfig::new(2).persist(PersistConfig::new()))
        .unwrap();
    let p = broker.producer::<String, u64>();
    for i in 0..10 {
        p.send(Sent::new("clicks", i).partition(0)).unwrap();
    }
    let mut c = broker
        .consumer::<String, u64>(ConsumerConfig::new().group_id("g 1"))
        .unwrap();
    c.commit_offsets(&[(TopicPartition::new("clicks", 0), 4)])
        .unwrap();
    drop(c);
    broker.close().unwrap();

    let (code, out, err) = run(&["describe"], tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Topic: clicks\tPartitions: 2\tKey: logbus.string\tValue: logbus.u64"),
        "{out}"
    );
    assert!(
        out.contains("\tPartition: 0\tLogStartOffset: 0\tLogEndOffset: 10"),
        "{out}"
    );
    assert!(
        out.contains("\tPartition: 1\tLogStartOffset: 0\tLogEndOffset: 0"),
        "{out}"
    );
    assert!(
        out.contains(
            "Group: g 1\tTopic: clicks\tPartition: 0\tCommitted: 4\tLogEndOffset: 10\tLag: 6"
        ),
        "{out}"
    );
    let marker = logbus::persist::read_dir_marker(tmp.path())
        .unwrap()
        .unwrap();
    assert!(
        out.contains(&format!(
            "Marker: meta.properties\tVersion: 1\tDirectoryId: {}\tClusterId: {}\tNodeId: 0\t\
             Directory: 0 of 1\tDirectories: {}",
            marker.directory_id, marker.cluster_id, marker.directory_id
        )),
        "{out}"
    );

    // In use: a typed error, exit 2.
    let broker = Broker::builder()
        .data_dir(tmp.path())
        .create(true)
        .open()
        .unwrap();
    let (code, _, err) = run(&["describe"], tmp.path());
    assert_eq!(code, 2);
    assert!(err.contains("in use"), "{err}");
    broker.close().unwrap();
}

/// `verify` finds partition directories at any depth (a directory of log directories, as
/// a broker with several `log.dirs` has), not only one level down.
#[test]
fn verify_finds_partitions_at_any_depth() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let deep = [
        tmp.path().join("disk-1/kafka-logs/orders-0"),
        tmp.path().join("disk-2/orders-1"),
    ];
    for dir in &deep {
        fs::create_dir_all(dir.parent().unwrap()).unwrap();
        write_partition(dir);
    }
    fs::create_dir_all(tmp.path().join("disk-3/empty")).unwrap();
    let (code, out, err) = run(&["verify"], tmp.path());
    assert_eq!(code, 0, "{out}{err}");
    for dir in &deep {
        assert!(out.contains(&format!("{}: OK (", dir.display())), "{out}");
    }
    assert!(out.contains("verified 2 partition(s)"), "{out}");

    // A problem deep down is found and fails the run.
    let log = files(&deep[0], "log").remove(0);
    let len = fs::metadata(&log).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let (code, out, err) = run(&["verify"], tmp.path());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("PROBLEM in {}", log.display())),
        "{out}"
    );
}

/// When `verify` stops at a partition's first problem, its summary says so and counts the
/// segments it did not reach, rather than reporting only the segments it checked.
#[test]
fn verify_says_when_it_stopped_early() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("orders-0");
    write_partition(&dir);
    let logs = files(&dir, "log");
    assert!(logs.len() >= 4, "{logs:?}");
    let log = &logs[1];
    let mut bytes = fs::read(log).unwrap();
    bytes[70] ^= 0x10; // the first batch of the second segment
    fs::write(log, &bytes).unwrap();
    let (code, out, err) = run(&["verify"], &dir);
    assert_eq!(code, 1, "{out}{err}");
    let not_checked = logs.len() - 2;
    assert!(
        out.contains(&format!(
            "stopped at the problem: {not_checked} later segment(s) not checked"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "verified 1 partition(s), 2 of {} segment(s)",
            logs.len()
        )),
        "{out}"
    );
}

/// `describe` on one directory of a broker opened on three: the replicated topic's
/// replicas, leader, epoch and ISR as last recorded, and the replica kept there.
#[test]
fn describe_shows_replicas_isr_and_epochs() {
    let _serial = one_at_a_time();
    use logbus::broker::{Broker, TopicConfig};
    use logbus::persist::PersistConfig;
    use logbus::producer::Record as Sent;

    let tmp: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let dirs: Vec<_> = tmp.iter().map(|t| t.path().to_path_buf()).collect();
    let broker = Broker::builder()
        .data_dirs(&dirs)
        .create(true)
        .open()
        .unwrap();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2);
    broker
        .create_topic::<(), u64>("pay", config.persist(PersistConfig::new()))
        .unwrap();
    let p = broker.producer::<(), u64>();
    for i in 0..10 {
        p.send(Sent::new("pay", i)).unwrap();
    }
    broker.faults().fail_data_dir(0).unwrap();
    for i in 10..15 {
        p.send(Sent::new("pay", i)).unwrap();
    }
    broker.close().unwrap();

    let (code, out, err) = run(&["describe"], &dirs[1]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Topic: pay\tPartitions: 1\tReplicationFactor: 3\tKey: logbus.unit"),
        "{out}"
    );
    assert!(
        out.contains("\tPartition: 0\tLeader: 1\tLeaderEpoch: 1\tReplicas: 0,1,2\tIsr: 1,2\tHighWatermark: 15"),
        "{out}"
    );
    assert!(
        out.contains("\tPartition: 0\tReplicaHere: LogStartOffset: 0\tLogEndOffset: 15\tLeaderEpochs: 0@0 1@10"),
        "{out}"
    );
    // The failed directory kept the state from before its failure.
    let (code, out, err) = run(&["describe"], &dirs[0]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Leader: 0\tLeaderEpoch: 0\tReplicas: 0,1,2\tIsr: 0,1,2"),
        "{out}"
    );
}

/// `verify` and `describe` report a data directory's marker; a damaged marker, or none
/// beside topic metadata, is a problem (`verify`, exit 1) or a typed error (`describe`,
/// exit 2), never a panic.
#[test]
fn verify_and_describe_report_the_marker() {
    let _serial = one_at_a_time();
    use logbus::broker::{Broker, TopicConfig};
    use logbus::persist::PersistConfig;

    let tmp = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(tmp.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1).persist(PersistConfig::new()))
        .unwrap();
    broker.close().unwrap();
    drop(broker);
    let marker = logbus::persist::read_dir_marker(tmp.path())
        .unwrap()
        .unwrap();
    let (code, out, err) = run(&["verify"], tmp.path());
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("DirectoryId: {}", marker.directory_id)),
        "{out}"
    );
    let file = tmp.path().join("meta.properties");
    let good = std::fs::read(&file).unwrap();
    std::fs::write(&file, &good[..good.len() / 2]).unwrap();
    let (code, out, _) = run(&["verify"], tmp.path());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("PROBLEM in the marker") && out.contains("truncated"),
        "{out}"
    );
    let (code, _, err) = run(&["describe"], tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid data directory marker"), "{err}");
    std::fs::remove_file(&file).unwrap();
    let (code, out, _) = run(&["verify"], tmp.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("without its marker"), "{out}");
    let (code, _, err) = run(&["describe"], tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a logbus data directory"), "{err}");
    // A partition directory (Kafka's, or one inside a data directory) has no marker.
    let (code, out, _) = run(&["verify"], &tmp.path().join("t-0"));
    assert_eq!(code, 0, "{out}");
}

/// `compact` runs the log cleaner over a closed data directory: superseded records go, the
/// latest of each key stays at its offset, `describe` shows the cleaner's progress per
/// partition, and a directory in use is refused with a message saying why.
#[test]
fn compact_cleans_a_closed_data_directory_and_describe_shows_progress() {
    let _serial = one_at_a_time();
    use logbus::broker::{Broker, CleanupPolicy, TopicConfig, TopicPartition};
    use logbus::consumer::{ConsumerConfig, OffsetReset};
    use logbus::persist::PersistConfig;
    use logbus::producer::Record as Sent;
    use std::time::Duration;

    let tmp = tempfile::tempdir().unwrap();
    let open = || {
        Broker::builder()
            .data_dir(tmp.path())
            .create(true)
            .log_cleaner_threads(0)
            .open()
            .unwrap()
    };
    let broker = open();
    let config = TopicConfig::new(1)
        .cleanup_policy(CleanupPolicy::Compact)
        .persist(PersistConfig::new().segment_bytes(4096));
    broker.create_topic::<String, String>("kv", config).unwrap();
    let p = broker.producer::<String, String>();
    for i in 0..400u32 {
        let key = format!("k{}", i % 10);
        p.send(Sent::new("kv", format!("v{i}-{}", "x".repeat(40))).key(key))
            .unwrap();
        if i % 25 == 0 {
            broker.fsync_and_checkpoint().unwrap();
        }
    }
    broker.close().unwrap();

    let (code, out, err) = run(&["describe"], tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Cleaner: FirstDirtyOffset: 0\tDirtyRatio: 1.000"),
        "{out}"
    );

    let (code, out, err) = run(&["compact"], tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("RecordsRemoved: "), "{out}");
    assert!(!out.contains("RecordsRemoved: 0\t"), "{out}");
    let (code, out, err) = run(&["describe"], tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("DirtyRatio: 0.000"), "{out}");

    // The latest value of each key is read back, at its offset; what went was superseded.
    let broker = open();
    let _topic = broker.topic::<String, String>("kv").unwrap();
    let mut c = broker
        .consumer::<String, String>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[TopicPartition::new("kv", 0)]).unwrap();
    let mut got = Vec::new();
    loop {
        let records = c.poll(Duration::from_millis(200)).unwrap();
        if records.is_empty() {
            break;
        }
        for r in records.iter() {
            got.push((r.offset, r.key.clone().unwrap(), r.value.clone()));
        }
    }
    assert!(got.len() < 400, "nothing was removed: {}", got.len());
    for w in got.windows(2) {
        assert!(w[0].0 < w[1].0);
    }
    let mut last = std::collections::HashMap::new();
    for (o, k, v) in &got {
        assert!(v.starts_with(&format!("v{o}-")), "offset {o} holds {v}");
        last.insert(k.clone(), *o);
    }
    for k in 0..10 {
        let latest = (0..400u64).filter(|i| i % 10 == k).max().unwrap();
        assert_eq!(last.get(&format!("k{k}")), Some(&latest));
    }

    // In use: refused, saying so.
    let (code, _, err) = run(&["compact"], tmp.path());
    assert_eq!(code, 2);
    assert!(err.contains("is in use"), "{err}");
    broker.close().unwrap();
}
