//! Interop with an independent implementation of Kafka's format: kafka-python.
//!
//! - kafka-python parses a partition directory the storage layer wrote
//!   (`scripts/interop/check_segments.py`): CRCs, records (nulls included), and every `.index`
//!   and `.timeindex` entry against Kafka's rules.
//! - The storage layer opens a segment kafka-python's own batch builder wrote
//!   (`scripts/interop/write_segment.py`), rebuilds its indexes, and reads every record back;
//!   the rebuilt indexes pass the same checker.
//!
//! - kafka-python checks the data directory `examples/persisted_log.rs` leaves behind.
//! - kafka-python reads a compacted log (`--gaps`): records and offsets equal, gaps included.
//! - kafka-python reads a `None` value a typed send wrote (`Topic<K, Option<V>>`) as null
//!   (`None`), and an empty value as empty.
//! - kafka-python checks every replica of a replicated persisted topic after its leader
//!   crashed: records, and each batch's `partitionLeaderEpoch` against the
//!   replica's `leader-epoch-checkpoint`.
//!
//! These tests need Python with kafka-python: `scripts/test-all.sh` (step `interop`) creates a
//! virtual environment, sets `LOGBUS_PYTHON` and runs them with `--ignored`. Run that way
//! without `LOGBUS_PYTHON`, they fail rather than pass without checking anything.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use logbus::storage::record_batch::{BatchIter, BatchRecord, Compression, Header};
use logbus::storage::{Checkpoints, LogConfig, LogSetup, SegmentSet};

fn python() -> String {
    std::env::var("LOGBUS_PYTHON").unwrap_or_else(|_| {
        panic!(
            "LOGBUS_PYTHON is not set: it must name a Python with kafka-python>=2.2 (run \
             `LOGBUS_STEPS=interop scripts/test-all.sh`, which creates .venv and sets it)"
        )
    })
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts/interop")
        .join(name)
}

/// Runs a script under `$LOGBUS_PYTHON`, asserting it exits 0 (printing its output if not).
fn run_python(name: &str, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(python())
        .arg(script(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run $LOGBUS_PYTHON ({}): {e}", python()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

/// kafka-python's check of the segments in `dir` against the records in `expected`
/// (`--closed`: each segment as a close or a reopen leaves it), with the index interval the
/// log was written with when its `.index` entries are to be checked too, and `flags` of the
/// script; its output, for the caller's assertions.
fn check_segments(
    dir: &Path,
    expected: &Path,
    index_interval: Option<i64>,
    flags: &[&str],
) -> String {
    let interval = index_interval.map(|i| i.to_string());
    let mut args = vec![dir.as_os_str(), expected.as_os_str()];
    if let Some(i) = &interval {
        args.extend([OsStr::new("--index-interval"), OsStr::new(i)]);
    }
    args.push(OsStr::new("--closed"));
    args.extend(flags.iter().map(OsStr::new));
    run_python("check_segments.py", &args)
}

fn hex(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "-".into(),
        Some(b) => b.iter().fold(String::new(), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        }),
    }
}

fn unhex(field: &str) -> Option<Vec<u8>> {
    if field == "-" {
        return None;
    }
    let bytes = (0..field.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&field[i..i + 2], 16).expect("hex"))
        .collect();
    Some(bytes)
}

/// One line of the checker's EXPECTED format: offset, timestamp, key, value, headers.
fn expected_line(offset: u64, r: &BatchRecord) -> String {
    let headers: Vec<String> = r
        .headers
        .iter()
        .map(|h| {
            format!(
                "{}:{}",
                hex(Some(h.key.as_bytes())),
                hex(h.value.as_deref())
            )
        })
        .collect();
    format!(
        "{offset}\t{}\t{}\t{}\t{}",
        r.timestamp,
        hex(r.key.as_deref()),
        hex(r.value.as_deref()),
        headers.join(",")
    )
}

fn parse_expected(text: &str) -> Vec<(u64, BatchRecord)> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 5, "bad EXPECTED line {line:?}");
            let headers = f[4]
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once(':').expect("name:value");
                    Header {
                        key: String::from_utf8(unhex(k).expect("a header name is not null"))
                            .expect("UTF-8 header name"),
                        value: unhex(v),
                    }
                })
                .collect();
            let record = BatchRecord {
                timestamp: f[1].parse().expect("timestamp"),
                key: unhex(f[2]),
                value: unhex(f[3]),
                headers,
            };
            (f[0].parse().expect("offset"), record)
        })
        .collect()
}

fn random_bytes(rng: &mut fastrand::Rng, max: usize) -> Option<Vec<u8>> {
    match rng.u8(0..10) {
        0 => None,
        1 => Some(Vec::new()),
        _ => Some((0..rng.usize(1..=max)).map(|_| rng.u8(..)).collect()),
    }
}

/// A random record: null, empty and random keys, values and header values; header names
/// ASCII, non-ASCII or empty; timestamps out of order (and, never first in a batch, a record
/// without one).
fn random_record(rng: &mut fastrand::Rng, first_in_batch: bool) -> BatchRecord {
    let names = ["h", "trace-id", "é", "", "content-type"];
    let headers = (0..rng.usize(0..=3))
        .map(|_| Header {
            key: names[rng.usize(..names.len())].to_string(),
            value: random_bytes(rng, 12),
        })
        .collect();
    let timestamp = if !first_in_batch && rng.u8(0..20) == 0 {
        -1
    } else {
        1_700_000_000_000 + rng.i64(-5_000..5_000)
    };
    BatchRecord {
        timestamp,
        key: random_bytes(rng, 16),
        value: random_bytes(rng, 120),
        headers,
    }
}

const INDEX_INTERVAL: i64 = 300;

fn open(dir: &Path, index_interval_bytes: i64, checkpoints: Checkpoints) -> SegmentSet {
    let config = LogConfig {
        segment_bytes: 4096,
        index_interval_bytes,
        ..LogConfig::default()
    };
    SegmentSet::open(
        dir,
        LogSetup {
            config,
            checkpoints,
            ..LogSetup::default()
        },
    )
    .expect("open the partition directory")
    .0
}

#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_what_logbus_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("interop-0");
    let mut rng = fastrand::Rng::with_seed(0x10_6b05);
    let mut expected = String::new();
    let mut written = 0u64;

    // Two sessions: the first ends with a roll and a clean close, the second reopens from the
    // checkpoints and goes on.
    let mut checkpoints = Checkpoints::default();
    for session in 0..2 {
        let mut log = open(&dir, INDEX_INTERVAL, checkpoints);
        assert_eq!(log.log_end_offset(), written);
        for _ in 0..150 {
            let count = rng.usize(1..=5);
            let records: Vec<BatchRecord> = (0..count)
                .map(|i| random_record(&mut rng, i == 0))
                .collect();
            let info = log.append(&records).expect("append");
            assert_eq!(info.base_offset, written);
            for r in &records {
                expected.push_str(&expected_line(written, r));
                expected.push('\n');
                written += 1;
            }
        }
        if session == 0 {
            log.roll().expect("roll");
        }
        checkpoints = log.close().expect("close");
    }
    let segments = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(segments >= 5, "expected several segments, got {segments}");

    let expected_path = tmp.path().join("expected.tsv");
    std::fs::write(&expected_path, &expected).unwrap();
    let out = check_segments(&dir, &expected_path, Some(INDEX_INTERVAL), &[]);
    assert!(
        out.contains(&format!(
            "checked {segments} segments, {written} records: OK"
        )),
        "{out}"
    );
}

#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn logbus_reads_what_kafka_python_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("from-python-0");
    let expected_path = tmp.path().join("expected.tsv");
    run_python(
        "write_segment.py",
        &[dir.as_os_str(), expected_path.as_os_str()],
    );
    let expected = parse_expected(&std::fs::read_to_string(&expected_path).unwrap());
    assert!(expected.len() > 50, "the script writes several batches");

    // Only a .log: opening recovers the segment and rebuilds both indexes.
    let interval = 64;
    let log = open(&dir, interval, Checkpoints::default());
    assert_eq!(log.log_end_offset(), expected.len() as u64);
    let mut got = Vec::new();
    let mut offset = 0;
    while offset < log.log_end_offset() {
        let records = log.read_records(offset, 1 << 20).expect("read");
        offset = records.last().expect("records up to the log end").0 + 1;
        got.extend(records);
    }
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(g, e);
    }
    // The leader epoch kafka-python's bytes carry (patched in, outside the CRC).
    let bytes = log.read(0, 1 << 20).unwrap();
    for batch in BatchIter::new(&bytes) {
        assert_eq!(batch.unwrap().header().partition_leader_epoch, 3);
    }
    // Lookups through the rebuilt indexes.
    for (offset, _) in expected.iter().step_by(7) {
        assert_eq!(log.read_records(*offset, 1).unwrap()[0].0, *offset);
    }
    log.close().expect("close");

    // Recovery wrote Kafka's final time index entry, so the checker's closed rule applies.
    let out = check_segments(&dir, &expected_path, Some(interval), &[]);
    assert!(out.contains(": OK"), "{out}");
    let index = std::fs::read(dir.join("00000000000000000000.index")).unwrap();
    assert!(!index.is_empty(), "a 64-byte interval gives index entries");
}

/// The codecs, by Kafka's names.
const CODECS: [(&str, Compression); 4] = [
    ("gzip", Compression::Gzip),
    ("snappy", Compression::Snappy),
    ("lz4", Compression::Lz4),
    ("zstd", Compression::Zstd),
];

/// A record a codec shrinks: text values, some repeated keys, nulls and headers.
fn compressible_record(rng: &mut fastrand::Rng, first_in_batch: bool) -> BatchRecord {
    let mut r = random_record(rng, first_in_batch);
    let words = ["order", "shipped", "customer", "paid", "refund", "item"];
    if r.value.as_ref().is_some_and(|v| !v.is_empty()) {
        let n = rng.usize(5..60);
        let text: Vec<&str> = (0..n).map(|_| words[rng.usize(..words.len())]).collect();
        r.value = Some(text.join(" ").into_bytes());
    }
    r
}

/// kafka-python reads the batches logbus writes with each codec: every batch carries the
/// codec (gzip stream, xerial-framed snappy, lz4 frame, zstd frame), and kafka-python's own
/// decompression gives the records written (offsets, timestamps, keys, values, headers),
/// with the indexes by Kafka's rules.
#[test]
#[ignore = "needs kafka-python with its codec libraries: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_every_codec_logbus_writes() {
    for (name, codec) in CODECS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(format!("{name}-0"));
        let mut rng = fastrand::Rng::with_seed(0x000c_0dec);
        let mut expected = String::new();
        let mut written = 0u64;
        let mut log = open(&dir, INDEX_INTERVAL, Checkpoints::default());
        log.set_compression(codec).unwrap();
        for _ in 0..120 {
            let count = rng.usize(3..=12);
            let records: Vec<BatchRecord> = (0..count)
                .map(|i| compressible_record(&mut rng, i == 0))
                .collect();
            let info = log.append(&records).expect("append");
            assert_eq!(info.base_offset, written);
            for r in &records {
                expected.push_str(&expected_line(written, r));
                expected.push('\n');
                written += 1;
            }
        }
        log.close().expect("close");
        let expected_path = tmp.path().join("expected.tsv");
        std::fs::write(&expected_path, &expected).unwrap();
        let out = check_segments(
            &dir,
            &expected_path,
            Some(INDEX_INTERVAL),
            &["--codec", name],
        );
        assert!(
            out.contains(&format!("{written} records: OK")),
            "{name}: {out}"
        );
        assert!(out.contains(&format!("codecs: {name} ")), "{name}: {out}");
    }
}

/// logbus reads the batches kafka-python writes with each codec (its own compression:
/// kafka/codec.py), rebuilding the indexes, records equal to what the script wrote.
#[test]
#[ignore = "needs kafka-python with its codec libraries: run by scripts/test-all.sh (interop step)"]
fn logbus_reads_every_codec_kafka_python_writes() {
    for (name, codec) in CODECS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(format!("from-python-{name}-0"));
        let expected_path = tmp.path().join("expected.tsv");
        let out = run_python(
            "write_segment.py",
            &[
                dir.as_os_str(),
                expected_path.as_os_str(),
                "--codec".as_ref(),
                name.as_ref(),
            ],
        );
        assert!(
            out.contains(&format!("codecs: {name},{name},{name}")),
            "{name}: {out}"
        );
        let expected = parse_expected(&std::fs::read_to_string(&expected_path).unwrap());
        let log = open(&dir, 64, Checkpoints::default());
        assert_eq!(log.log_end_offset(), expected.len() as u64, "{name}");
        let bytes = log.read(0, 1 << 20).unwrap();
        for batch in BatchIter::new(&bytes) {
            assert_eq!(batch.unwrap().header().compression(), codec);
        }
        let mut got = Vec::new();
        let mut offset = 0;
        while offset < log.log_end_offset() {
            let records = log.read_records(offset, 1 << 20).expect("read");
            offset = records.last().expect("records up to the log end").0 + 1;
            got.extend(records);
        }
        assert!(got == expected, "{name}: records differ");
        // Lookups through the rebuilt indexes land inside compressed batches.
        for (offset, _) in expected.iter().step_by(7) {
            assert_eq!(
                log.read_records(*offset, 1).unwrap()[0].0,
                *offset,
                "{name}"
            );
        }
        log.close().expect("close");
        let out = check_segments(&dir, &expected_path, Some(64), &["--codec", name]);
        assert!(out.contains(": OK"), "{name}: {out}");
    }
}

/// The data directory `examples/persisted_log.rs` leaves behind (a child produced, aborted,
/// the parent recovered, replayed and closed) passes kafka-python's check, indexes
/// included: every partition holds a prefix of the orders the example sends, rebuilt here
/// from the example's deterministic scheme (key, value, headers and timestamp of order `i`).
#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_the_persisted_log_example() {
    use logbus::producer::partition_for_key;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("orders-data");
    // `cargo test` builds the examples next to the test binaries' directory.
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join(format!("persisted_log{}", std::env::consts::EXE_SUFFIX));
    assert!(
        example.exists(),
        "{} is missing: build it first (`cargo build --example persisted_log`, as \
         scripts/test-all.sh does)",
        example.display()
    );
    let out = Command::new(&example)
        .arg(&data)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", example.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let description = logbus::persist::describe_data_dir(&data).unwrap();
    // The example's scheme (examples/persisted_log.rs: `order`, BASE_TS, ORDERS).
    let (base_ts, orders, partitions) = (1_700_000_000_000i64, 20_000u64, 2u32);
    let mut expected = vec![String::new(); partitions as usize];
    let mut next = vec![0u64; partitions as usize];
    let mut checked = 0;
    for i in 0..orders {
        let key = format!("customer-{}", i % 50);
        let p = partition_for_key(key.as_bytes(), partitions) as usize;
        let (_, _, start, end) = description.partitions[p].clone();
        assert_eq!(start, 0);
        if next[p] < end {
            let record = BatchRecord {
                timestamp: base_ts + i as i64 * 10,
                key: Some(key.into_bytes()),
                value: Some(format!("order {i}: {} units", i % 7 + 1).into_bytes()),
                headers: vec![
                    Header {
                        key: "trace-id".into(),
                        value: Some(format!("t-{i}").into_bytes()),
                    },
                    Header {
                        key: "replayed".into(),
                        value: None,
                    },
                ],
            };
            expected[p].push_str(&expected_line(next[p], &record));
            expected[p].push('\n');
            checked += 1;
        }
        next[p] += 1;
    }
    assert!(checked > 1000, "the child wrote only {checked} records");
    for p in 0..partitions {
        let expected_path = tmp.path().join(format!("expected-{p}"));
        std::fs::write(&expected_path, &expected[p as usize]).unwrap();
        let dir = data.join(format!("orders-{p}"));
        let out = check_segments(&dir, &expected_path, Some(4096), &[]);
        assert!(out.contains("OK"), "{out}");
    }
}

/// Every replica of a replicated persisted topic, after its leader crashed mid-stream
/// (epoch 0 up to 120, epoch 1 from there) and came back as a follower, passes
/// kafka-python's check: its records, and each batch's `partitionLeaderEpoch` against its
/// `leader-epoch-checkpoint`. (A crash, not a directory failure: a reopened directory's
/// recovery adds Kafka's final time index entry, which the checker's replay of one
/// session does not expect.)
#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_every_replica_with_its_leader_epochs() {
    use logbus::broker::{Broker, TopicConfig};
    use logbus::persist::PersistConfig;
    use logbus::producer::Record as Sent;

    let tmp: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let dirs: Vec<PathBuf> = tmp.iter().map(|t| t.path().to_path_buf()).collect();
    let broker = Broker::builder()
        .data_dirs(&dirs)
        .create(true)
        .open()
        .unwrap();
    let config = TopicConfig::new(1)
        .replication_factor(3)
        .min_insync_replicas(2);
    broker
        .create_topic::<(), u64>("epochs", config.persist(PersistConfig::new()))
        .unwrap();
    let p = broker.producer::<(), u64>();
    let ts = |v: u64| 1_700_000_000_000 + v as i64;
    for v in 0..120u64 {
        p.send(Sent::new("epochs", v).timestamp(ts(v))).unwrap();
    }
    broker.faults().crash_replica("epochs", 0, 0).unwrap();
    for v in 120..300u64 {
        p.send(Sent::new("epochs", v).timestamp(ts(v))).unwrap();
    }
    broker.faults().restart_replica("epochs", 0, 0).unwrap();
    assert!(broker
        .faults()
        .wait_in_sync("epochs", 0, std::time::Duration::from_secs(20))
        .unwrap());
    drop(p);
    broker.close().unwrap();

    let expected: String = (0..300u64)
        .map(|v| {
            let r = BatchRecord::new(ts(v), None, &v.to_be_bytes());
            expected_line(v, &r) + "\n"
        })
        .collect();
    let expected_path = tmp[0].path().join("expected.tsv");
    std::fs::write(&expected_path, &expected).unwrap();
    for dir in &dirs {
        let part = dir.join("epochs-0");
        assert_eq!(
            std::fs::read_to_string(part.join("leader-epoch-checkpoint")).unwrap(),
            "0\n2\n0 0\n1 120\n"
        );
        let out = check_segments(&part, &expected_path, None, &["--epochs"]);
        assert!(out.contains("records: OK"), "{}: {out}", part.display());
        assert!(out.contains("batches agree"), "{}: {out}", part.display());
    }
}

/// kafka-python reads a compacted log: over several segments of random records with a few
/// keys (overwrites, null values, null keys), a cleaning pass; every record kafka-python
/// parses equals the one appended at its offset (gaps included), and exactly the records
/// the cleaner must keep are there: each key's latest below the active segment, every
/// keyless record, and the active segment's.
#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_a_compacted_log() {
    use logbus::storage::CleanConfig;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("compacted-0");
    let mut rng = fastrand::Rng::with_seed(0xc0_3a5c);
    let mut log = open(&dir, INDEX_INTERVAL, Checkpoints::default());
    let mut all: Vec<(u64, BatchRecord)> = Vec::new();
    for _ in 0..300 {
        let count = rng.usize(1..=5);
        let records: Vec<BatchRecord> = (0..count)
            .map(|i| {
                let mut r = random_record(&mut rng, i == 0);
                r.key = match rng.u8(0..12) {
                    0 => None,
                    _ => Some(vec![b'k', rng.u8(0..9)]),
                };
                r
            })
            .collect();
        let info = log.append(&records).expect("append");
        for (i, r) in records.into_iter().enumerate() {
            all.push((info.base_offset + i as u64, r));
        }
    }
    let active = log.segments().last().unwrap().base_offset;
    let stats = log
        .clean(&CleanConfig {
            // No tombstone expires: which survive depends on keys and offsets alone.
            delete_retention_ms: i64::MAX / 4,
            ..CleanConfig::default()
        })
        .expect("clean");
    assert!(stats.records_removed > 100, "{stats:?}");
    log.close().expect("close");

    // The key map covers the cleanable segments only (the active segment is not cleaned,
    // and what it supersedes stays until it is).
    let mut latest = std::collections::HashMap::new();
    for (o, r) in all.iter().filter(|(o, _)| *o < active) {
        if let Some(k) = &r.key {
            latest.insert(k.clone(), *o);
        }
    }
    let mut expected = String::new();
    let mut kept = 0;
    for (o, r) in &all {
        let keep = *o >= active || r.key.as_ref().map_or(true, |k| latest[k] == *o);
        if keep {
            expected.push_str(&expected_line(*o, r));
            expected.push('\n');
            kept += 1;
        }
    }
    assert!(kept < all.len() / 2, "{kept} of {}", all.len());
    let expected_path = tmp.path().join("expected.tsv");
    std::fs::write(&expected_path, &expected).unwrap();
    let segments = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    let out = check_segments(&dir, &expected_path, Some(INDEX_INTERVAL), &["--gaps"]);
    assert!(
        out.contains(&format!("checked {segments} segments, {kept} records: OK")),
        "{out}"
    );
}

#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_transaction_markers_and_the_txn_index() {
    use logbus::broker::{Broker, TopicConfig};
    use logbus::persist::PersistConfig;
    use logbus::producer::{ProducerConfig, Record as Sent};

    let tmp = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(tmp.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), u64>("tx", TopicConfig::new(1).persist(PersistConfig::new()))
        .unwrap();
    let p = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().transactional_id("interop"))
        .unwrap();
    p.init_transactions().unwrap();
    let plain = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().enable_idempotence(false))
        .unwrap();
    let mut expected = String::new();
    let mut offset = 0u64;
    // (records, commit) per transaction, with a plain record after the second.
    for (n, commit) in [(2, true), (2, false), (1, false), (1, true)] {
        p.begin_transaction().unwrap();
        let (pid, epoch) = p.transaction_ids().unwrap();
        let first = offset;
        for _ in 0..n {
            let meta = p.send(Sent::new("tx", offset)).unwrap();
            assert_eq!(meta.offset, offset);
            expected += &format!("txn {offset} {pid} {epoch}\n");
            offset += 1;
        }
        if commit {
            p.commit_transaction().unwrap();
        } else {
            p.abort_transaction().unwrap();
            expected += &format!("aborted {pid} {first} {offset} {first}\n");
        }
        let kind = if commit { "commit" } else { "abort" };
        expected += &format!("marker {offset} {kind} {pid} {epoch} 0\n");
        offset += 1;
        if n == 2 && !commit {
            assert_eq!(plain.send(Sent::new("tx", offset)).unwrap().offset, offset);
            expected += &format!("plain {offset}\n");
            offset += 1;
        }
    }
    drop((p, plain));
    broker.close().unwrap();
    let expected_path = tmp.path().join("expected-transactions.txt");
    std::fs::write(&expected_path, &expected).unwrap();
    let part = tmp.path().join("tx-0");
    let out = run_python(
        "check_transactions.py",
        &[part.as_os_str(), expected_path.as_os_str()],
    );
    assert!(out.contains("transactions: OK"), "{out}");
}

/// The idempotent producer's header fields, read by kafka-python: two idempotent producers
/// and a plain one interleave on a one-replica persisted partition (batches cut where the
/// producer changes), the broker restarts, and a retried send (the same producer id, epoch
/// and sequence, `send_sequenced`) is answered with its first offset and not appended again;
/// a send out of sequence is refused. kafka-python then finds every batch's producer id,
/// epoch and base sequence, contiguous per producer, with no sequence twice.
#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_producer_ids_and_sequences_across_a_restart() {
    use logbus::broker::{Broker, TopicConfig};
    use logbus::persist::PersistConfig;
    use logbus::producer::{Acks, ProducerConfig, Record as Sent};

    let tmp = tempfile::tempdir().unwrap();
    let open = || {
        Broker::builder()
            .data_dirs([tmp.path()])
            .create(true)
            .open()
            .unwrap()
    };
    let broker = open();
    broker
        .create_topic::<(), u64>("idem", TopicConfig::new(1).persist(PersistConfig::new()))
        .unwrap();
    let a = broker.producer::<(), u64>();
    let b = broker.producer::<(), u64>();
    let plain = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().acks(Acks::Leader))
        .unwrap();
    assert!(plain.producer_identity().is_none());
    let (ida, idb) = (
        a.producer_identity().unwrap(),
        b.producer_identity().unwrap(),
    );
    assert_ne!(ida.id, idb.id);
    let mut sent = 0u64;
    for round in 0..50u64 {
        for _ in 0..(round % 4 + 1) {
            a.send(Sent::new("idem", sent)).unwrap();
            sent += 1;
        }
        b.send(Sent::new("idem", sent)).unwrap();
        sent += 1;
        if round % 5 == 0 {
            plain.send(Sent::new("idem", sent)).unwrap();
            sent += 1;
        }
    }
    // A's sequences so far: how many records it sent.
    let a_sent = (0..50u64).map(|r| r % 4 + 1).sum::<u64>() as i32;
    let last_a = a.send(Sent::new("idem", 1_000)).unwrap();
    sent += 1;
    drop((a, b, plain));
    broker.close().unwrap();
    drop(broker);

    // After a restart the broker knows A's sequences from the batch headers on disk.
    let broker = open();
    broker.topic::<(), u64>("idem").unwrap();
    let p = broker.producer::<(), u64>();
    let retried = p
        .send_sequenced(Sent::new("idem", 1_000), ida, a_sent)
        .expect("a retry of A's last send");
    assert_eq!(
        retried.offset, last_a.offset,
        "answered with its first offset"
    );
    let gap = p.send_sequenced(Sent::new("idem", 1_001), ida, a_sent + 5);
    assert!(
        matches!(
            gap.as_ref().map_err(|e| e.error()),
            Err(logbus::Error::OutOfOrderSequence { expected, got, .. })
                if *expected == a_sent + 1 && *got == a_sent + 5
        ),
        "{:?}",
        gap.map_err(|e| e.to_string())
    );
    let next = p
        .send_sequenced(Sent::new("idem", 1_001), ida, a_sent + 1)
        .unwrap();
    assert_eq!(next.offset, sent, "appended after every earlier record");
    sent += 1;
    let end = broker.describe_topic("idem").unwrap().partitions[0].log_end;
    assert_eq!(end, sent, "the retry appended nothing");
    drop(p);
    broker.close().unwrap();

    let out = run_python(
        "check_producers.py",
        &[tmp.path().join("idem-0").as_os_str()],
    );
    assert!(out.contains("producers OK"), "{out}");
    // Batches of both producers and plain ones, and A's last batch after the restart.
    let batches: Vec<Vec<i64>> = out
        .lines()
        .filter_map(|l| l.strip_prefix("BATCH "))
        .map(|l| l.split(' ').map(|f| f.parse().unwrap()).collect())
        .collect();
    for id in [ida.id, idb.id, -1] {
        assert!(
            batches.iter().any(|b| b[2] == id),
            "no batch of producer {id}: {out}"
        );
    }
    let last = batches.last().unwrap();
    assert_eq!(
        (last[0], last[2], last[3], last[4]),
        (
            sent as i64 - 1,
            ida.id,
            i64::from(ida.epoch),
            i64::from(a_sent + 1)
        ),
        "{out}"
    );
}

/// kafka-python reads the empty batch an emptied group keeps (its header only: base offset
/// and last offset delta, no records), with the records after it at their offsets.
#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_an_emptied_group() {
    use logbus::storage::CleanConfig;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("emptied-0");
    let mut log = open(&dir, INDEX_INTERVAL, Checkpoints::default());
    let rec = |k: u8, v: u8| BatchRecord::new(1_700_000_000_000, Some(&[b'k', k]), &[v; 1200]);
    let tombstone = |k: u8| BatchRecord {
        value: None,
        ..rec(k, 0)
    };
    // Segment 0, the only cleanable one: tombstones of k1 and k2, long expired. The pass
    // removes both, which leaves its one group empty.
    log.append(&[tombstone(1), tombstone(2)]).unwrap();
    log.roll().unwrap();
    log.append(&[rec(1, 3), rec(2, 4), rec(3, 5)]).unwrap();
    let stats = log
        .clean(&CleanConfig {
            delete_retention_ms: 0,
            ..CleanConfig::default()
        })
        .expect("clean");
    assert_eq!(
        (stats.records_removed, stats.tombstones_removed),
        (2, 2),
        "{stats:?}"
    );
    let first = log.read(0, 1 << 20).unwrap();
    let batch = BatchIter::new(&first).next().unwrap().unwrap();
    assert_eq!(
        (
            batch.header().base_offset,
            batch.header().last_offset(),
            batch.header().records_count
        ),
        (0, 1, 0),
        "the emptied segment keeps an empty batch"
    );
    log.close().expect("close");
    let expected: String = [(2, rec(1, 3)), (3, rec(2, 4)), (4, rec(3, 5))]
        .iter()
        .map(|(o, r)| format!("{}\n", expected_line(*o, r)))
        .collect();
    let expected_path = tmp.path().join("expected.tsv");
    std::fs::write(&expected_path, expected).unwrap();
    let out = check_segments(&dir, &expected_path, Some(INDEX_INTERVAL), &["--gaps"]);
    assert!(out.contains("checked 2 segments, 3 records: OK"), "{out}");
}

/// A persisted topic of `Option<String>` values through the broker: kafka-python reads the
/// `None` values (tombstones) as null and the empty string as an empty value, each record
/// as sent.
#[test]
#[ignore = "needs kafka-python: run by scripts/test-all.sh (interop step)"]
fn kafka_python_reads_a_none_value_as_null() {
    use logbus::broker::{Broker, CleanupPolicy, TopicConfig};
    use logbus::persist::PersistConfig;
    use logbus::producer::Record;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let sent: Vec<(&str, Option<&str>)> = vec![
        ("a", Some("x")),
        ("b", None),
        ("c", Some("")),
        ("a", None),
        ("d", Some("y")),
    ];
    let base_ts = 1_700_000_000_000i64;
    {
        let broker = Broker::builder()
            .data_dir(&data)
            .create(true)
            .open()
            .unwrap();
        let config = TopicConfig::new(1)
            .cleanup_policy(CleanupPolicy::Compact)
            .persist(PersistConfig::new());
        broker
            .create_topic::<String, Option<String>>("kv", config)
            .unwrap();
        let producer = broker.producer::<String, Option<String>>();
        for (i, (k, v)) in sent.iter().enumerate() {
            let record = Record::new("kv", v.map(str::to_owned))
                .key(k.to_string())
                .timestamp(base_ts + i as i64);
            producer.send(record).unwrap();
        }
        broker.close().unwrap();
    }
    let mut expected = String::new();
    for (i, (k, v)) in sent.iter().enumerate() {
        let record = BatchRecord {
            timestamp: base_ts + i as i64,
            key: Some(k.as_bytes().to_vec()),
            value: v.map(|v| v.as_bytes().to_vec()),
            headers: Vec::new(),
        };
        expected.push_str(&expected_line(i as u64, &record));
        expected.push('\n');
    }
    assert!(
        expected.contains("\t-\t"),
        "nulls are in the expectation: {expected}"
    );
    let expected_path = tmp.path().join("expected.tsv");
    std::fs::write(&expected_path, &expected).unwrap();
    let dir = data.join("kv-0");
    let out = check_segments(&dir, &expected_path, Some(4096), &[]);
    assert!(out.contains("5 records: OK"), "{out}");
}
