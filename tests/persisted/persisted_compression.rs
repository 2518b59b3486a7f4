//! Compressed batches through durable topics: each codec round trips (send, close, reopen,
//! consume from disk), the topic's and the producer's codec as Kafka combines them, several
//! codecs in one segment, and damaged compressed batches (typed errors; recovery cuts a torn
//! or corrupt compressed tail).

use std::path::Path;
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::error::Corruption;
use logbus::persist::{CompressionType, FlushPolicy, PersistConfig};
use logbus::producer::{Compression, ProducerConfig, Record};
use logbus::storage::record_batch::{BatchBuilder, BatchRecord, HEADER_SIZE};
use logbus::storage::{BatchIter, Checkpoints, LogConfig, LogSetup, SegmentSet};
use logbus::Error;

const CODECS: [(CompressionType, Compression); 4] = [
    (CompressionType::Gzip, Compression::Gzip),
    (CompressionType::Snappy, Compression::Snappy),
    (CompressionType::Lz4, Compression::Lz4),
    (CompressionType::Zstd, Compression::Zstd),
];

fn value(i: u64) -> String {
    format!("order {i}: {} units of item {}, shipped", i % 7 + 1, i % 13)
}

fn open(dir: &Path) -> Broker {
    Broker::builder().data_dir(dir).create(true).open().unwrap()
}

/// Every value of `t`-0 from offset 0, by a consumer (what the ring no longer holds comes
/// from disk).
fn consume(broker: &Broker, count: u64) -> Vec<(u64, String)> {
    // A reopened broker's topics open when named with their types.
    broker.topic::<String, String>("t").unwrap();
    let mut c = broker
        .consumer::<String, String>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let mut out = Vec::new();
    while (out.len() as u64) < count {
        let batch = c.poll(Duration::from_secs(10)).unwrap();
        assert!(!batch.is_empty(), "nothing read at {}", out.len());
        for r in batch.iter() {
            assert_eq!(
                r.key.as_deref(),
                Some(format!("k{}", r.offset % 10).as_str())
            );
            assert_eq!(r.headers[0].0, "trace");
            out.push((r.offset, r.value.clone()));
        }
    }
    out
}

/// The codecs of the batches of `t`-0 on disk.
fn codecs_on_disk(dir: &Path) -> Vec<Compression> {
    let (set, _) = SegmentSet::open(dir.join("t-0"), LogSetup::default()).unwrap();
    let bytes = set.read(0, 64 << 20).unwrap();
    let out = BatchIter::new(&bytes)
        .map(|b| b.unwrap().header().compression())
        .collect();
    set.close().unwrap();
    out
}

fn send_all(broker: &Broker, producer: ProducerConfig, n: u64) {
    let p = broker
        .producer_with_config::<String, String>(producer)
        .unwrap();
    for i in 0..n {
        let record = Record::new("t", value(i))
            .key(format!("k{}", i % 10))
            .partition(0)
            .header("trace", Some(logbus::Bytes::from(format!("t-{i}"))));
        p.send(record).unwrap();
    }
}

fn create(broker: &Broker, compression: CompressionType) {
    broker
        .create_topic::<String, String>(
            "t",
            TopicConfig::new(1).records_in_memory(64).persist(
                PersistConfig::new()
                    .compression(compression)
                    .flush(FlushPolicy::Os)
                    .segment_bytes(64 << 10),
            ),
        )
        .unwrap();
}

#[test]
fn each_codec_round_trips_through_a_durable_topic() {
    for (topic, codec) in CODECS {
        let tmp = tempfile::tempdir().unwrap();
        let broker = open(tmp.path());
        create(&broker, topic);
        send_all(&broker, ProducerConfig::new(), 3000);
        // Read while open too: the oldest records are on disk only (64 in memory).
        let want: Vec<(u64, String)> = (0..3000).map(|i| (i, value(i))).collect();
        assert!(consume(&broker, 3000) == want, "{codec}: read while open");
        broker.close().unwrap();

        let codecs = codecs_on_disk(tmp.path());
        assert!(!codecs.is_empty());
        let compressed = codecs.iter().filter(|c| **c == codec).count();
        assert!(
            codecs
                .iter()
                .all(|c| *c == codec || *c == Compression::None),
            "{codec}: {codecs:?}"
        );
        assert!(
            compressed * 2 >= codecs.len(),
            "{codec}: mostly compressed: {codecs:?}"
        );
        // The codec saves bytes: the segments hold far less than the records' text.
        let on_disk: u64 = std::fs::read_dir(tmp.path().join("t-0"))
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .map(|e| e.metadata().unwrap().len())
            .sum();
        let text: u64 = (0..3000).map(|i| value(i).len() as u64).sum();
        assert!(
            on_disk < text,
            "{codec}: {on_disk} bytes on disk for {text} of values"
        );

        // Reopened (a clean shutdown: no revalidation), and again after a crash-like open
        // (the clean-shutdown marker removed: recovery revalidates every batch).
        for unclean in [false, true] {
            if unclean {
                let _ = std::fs::remove_file(tmp.path().join(".logbus_cleanshutdown"));
                let _ = std::fs::remove_file(tmp.path().join("recovery-point-offset-checkpoint"));
            }
            let broker = open(tmp.path());
            assert!(
                consume(&broker, 3000) == want,
                "{codec}: reopened (unclean {unclean})"
            );
            broker.close().unwrap();
        }
        let report =
            logbus::storage::verify_dir(&logbus::storage::FsIo, &tmp.path().join("t-0")).unwrap();
        assert!(report.problem.is_none(), "{codec}: {:?}", report.problem);
    }
}

/// Kafka's `compression.type`: `producer` keeps the producer's codec; a named codec (or
/// `uncompressed`) is the broker's, whatever the producer asked.
#[test]
fn the_topic_codec_overrides_the_producers_as_in_kafka() {
    let cases = [
        (
            CompressionType::Producer,
            Compression::Lz4,
            Compression::Lz4,
        ),
        (
            CompressionType::Producer,
            Compression::None,
            Compression::None,
        ),
        (CompressionType::Gzip, Compression::Lz4, Compression::Gzip),
        (
            CompressionType::Uncompressed,
            Compression::Zstd,
            Compression::None,
        ),
    ];
    for (topic, producer, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let broker = open(tmp.path());
        create(&broker, topic);
        send_all(&broker, ProducerConfig::new().compression(producer), 2000);
        broker.close().unwrap();
        let codecs = codecs_on_disk(tmp.path());
        let hits = codecs.iter().filter(|c| **c == want).count();
        assert!(
            hits * 2 >= codecs.len()
                && codecs.iter().all(|c| *c == want || *c == Compression::None),
            "topic {topic:?}, producer {producer}: {codecs:?}"
        );
        // The setting survives a reopen (the topic's metadata).
        let broker = open(tmp.path());
        let want_values: Vec<(u64, String)> = (0..2000).map(|i| (i, value(i))).collect();
        assert!(consume(&broker, 2000) == want_values);
        broker.close().unwrap();
    }
}

/// The same rule on a replicated topic (three data directories, replication factor 3):
/// every replica writes its batches with the codec Kafka's rule picks, a restarted one too
/// (its followers compress what they fetch as the leader does).
#[test]
fn every_replica_takes_the_codec_the_topic_and_producer_pick() {
    let cases = [
        (
            CompressionType::Producer,
            Compression::Lz4,
            Compression::Lz4,
        ),
        (
            CompressionType::Producer,
            Compression::None,
            Compression::None,
        ),
        (
            CompressionType::Zstd,
            Compression::Snappy,
            Compression::Zstd,
        ),
    ];
    for (topic, producer, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dirs: Vec<_> = (0..3).map(|d| tmp.path().join(format!("d{d}"))).collect();
        let broker = Broker::builder()
            .data_dirs(&dirs)
            .create(true)
            .open()
            .unwrap();
        broker
            .create_topic::<String, String>(
                "t",
                TopicConfig::new(1)
                    .replication_factor(3)
                    .min_insync_replicas(2)
                    .records_in_memory(64)
                    .persist(PersistConfig::new().compression(topic)),
            )
            .unwrap();
        // In batches: a batch of one short record does not shrink, and is written
        // uncompressed whatever the codec.
        let p = broker
            .producer_with_config::<String, String>(ProducerConfig::new().compression(producer))
            .unwrap();
        let send = |from: u64| {
            let mut batch: Vec<_> = (from..from + 100)
                .map(|i| {
                    Record::new("t", value(i))
                        .key(format!("k{}", i % 10))
                        .partition(0)
                })
                .collect();
            p.send_batch(&mut batch).unwrap();
        };
        for from in (0..500).step_by(100) {
            send(from);
        }
        // A follower restarted mid-stream reopens its log and goes on with the same codec.
        let follower = broker.describe_topic("t").unwrap().replicas[0]
            .replicas
            .iter()
            .map(|r| r.id)
            .find(|id| Some(*id) != broker.describe_topic("t").unwrap().replicas[0].leader)
            .unwrap();
        broker.faults().crash_replica("t", 0, follower).unwrap();
        broker.faults().restart_replica("t", 0, follower).unwrap();
        for from in (500..1000).step_by(100) {
            send(from);
        }
        drop(p);
        assert!(broker
            .faults()
            .wait_in_sync("t", 0, Duration::from_secs(20))
            .unwrap());
        broker.close().unwrap();
        for dir in &dirs {
            let codecs = codecs_on_disk(dir);
            let hits = codecs.iter().filter(|c| **c == want).count();
            assert!(
                !codecs.is_empty() && hits * 2 >= codecs.len(),
                "{}: topic {topic:?}, producer {producer}: {hits} of {} batches in {want}",
                dir.display(),
                codecs.len()
            );
        }
    }
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn open_set(dir: &Path) -> (SegmentSet, logbus::storage::RecoveryReport) {
    SegmentSet::open(
        dir,
        LogSetup {
            config: log_config(),
            checkpoints: Checkpoints::default(),
            ..LogSetup::default()
        },
    )
    .unwrap()
}

fn records(from: u64, n: u64) -> Vec<BatchRecord> {
    (from..from + n)
        .map(|i| {
            BatchRecord::new(
                1_700_000_000_000 + i as i64,
                Some(b"key"),
                value(i).as_bytes(),
            )
        })
        .collect()
}

fn read_everything(set: &SegmentSet) -> Vec<(u64, BatchRecord)> {
    let mut out = Vec::new();
    let mut at = set.log_start_offset();
    while at < set.log_end_offset() {
        let r = set.read_records(at, 1 << 20).unwrap();
        at = r.last().unwrap().0 + 1;
        out.extend(r);
    }
    out
}

/// Batches of every codec, and uncompressed ones, in one segment: read back, found by
/// offset and by timestamp through the indexes, verified, and recovered after a reopen
/// that revalidates them.
#[test]
fn mixed_codecs_in_one_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mixed-0");
    let (mut set, _) = open_set(&dir);
    let order = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut want = Vec::new();
    for round in 0..4u64 {
        for (i, codec) in order.iter().enumerate() {
            set.set_compression(*codec).unwrap();
            let from = set.log_end_offset();
            let batch = records(from, 20 + round * 5 + i as u64);
            set.append(&batch).unwrap();
            want.extend(
                batch
                    .into_iter()
                    .enumerate()
                    .map(|(j, r)| (from + j as u64, r)),
            );
        }
    }
    assert_eq!(set.segments().len(), 1, "one segment");
    let bytes = set.read(0, 1 << 20).unwrap();
    let codecs: Vec<Compression> = BatchIter::new(&bytes)
        .map(|b| b.unwrap().header().compression())
        .collect();
    assert_eq!(codecs.len(), 20);
    for (i, c) in codecs.iter().enumerate() {
        assert_eq!(*c, order[i % 5]);
    }
    assert!(read_everything(&set) == want);
    // Every offset found through the index, inside compressed batches too.
    for (offset, _) in want.iter().step_by(3) {
        assert_eq!(set.read_records(*offset, 1).unwrap()[0].0, *offset);
    }
    // By timestamp: the record's own offset (found by decompressing the batch).
    for (offset, r) in want.iter().step_by(11) {
        assert_eq!(
            set.offset_for_timestamp(r.timestamp).unwrap(),
            Some((*offset, r.timestamp))
        );
    }
    set.close().unwrap();
    // Revalidated at open (no checkpoints): every batch decompressed and checked.
    let (set, report) = open_set(&dir);
    assert!(report.truncation.is_none(), "{report:?}");
    assert_eq!(report.batches_validated, 20);
    assert!(read_everything(&set) == want);
    set.close().unwrap();
    let report = logbus::storage::verify_dir(&logbus::storage::FsIo, &dir).unwrap();
    assert!(report.problem.is_none(), "{:?}", report.problem);
    assert_eq!(report.batches, 20);
}

/// A compressed batch cut short by a crash (a torn tail) is cut by recovery, as an
/// uncompressed one is; a whole compressed batch whose stream does not decode (its CRC
/// matching: a buggy writer) is corruption, reported with its file and position, and
/// recovery cuts the log there.
#[test]
fn recovery_cuts_a_torn_or_corrupt_compressed_tail() {
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        // Torn: the last batch loses its last bytes.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("torn-0");
        let (mut set, _) = open_set(&dir);
        set.set_compression(codec).unwrap();
        for _ in 0..5 {
            let from = set.log_end_offset();
            set.append(&records(from, 40)).unwrap();
        }
        let good_end = 160;
        set.close().unwrap();
        let log = dir.join("00000000000000000000.log");
        let len = std::fs::metadata(&log).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        f.set_len(len - 7).unwrap();
        drop(f);
        std::fs::remove_file(dir.join("00000000000000000000.index")).ok();
        let (set, report) = open_set(&dir);
        assert_eq!(set.log_end_offset(), good_end, "{codec}");
        assert!(report.truncation.is_some(), "{codec}: {report:?}");
        assert_eq!(read_everything(&set).len() as u64, good_end);
        set.close().unwrap();

        // Corrupt: a whole batch whose CRC holds over a stream that is not one.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("corrupt-0");
        let (mut set, _) = open_set(&dir);
        set.set_compression(codec).unwrap();
        set.append(&records(0, 40)).unwrap();
        let position = set.read(0, 1 << 20).unwrap().len() as u64;
        set.close().unwrap();
        let mut bad = BatchBuilder::new(40).with_compression(codec).unwrap();
        for r in records(40, 40) {
            bad.append_record(&r).unwrap();
        }
        let mut bad = bad.finish().to_vec();
        let mid = HEADER_SIZE + (bad.len() - HEADER_SIZE) / 2;
        for b in &mut bad[mid..mid + 4] {
            *b ^= 0xa5;
        }
        let crc = crc32c::crc32c(&bad[21..]);
        bad[17..21].copy_from_slice(&crc.to_be_bytes());
        let log = dir.join("00000000000000000000.log");
        let mut bytes = std::fs::read(&log).unwrap();
        bytes.extend_from_slice(&bad);
        std::fs::write(&log, &bytes).unwrap();
        // verify names the file and the stream's first byte.
        let report = logbus::storage::verify_dir(&logbus::storage::FsIo, &dir).unwrap();
        let problem = format!("{:?}", report.problem);
        assert!(report.problem.is_some(), "{codec}");
        assert!(
            problem.contains(&format!("{}", position + HEADER_SIZE as u64)),
            "{codec}: {problem}"
        );
        let (set, report) = open_set(&dir);
        assert_eq!(set.log_end_offset(), 40, "{codec}: {report:?}");
        let cut = report.truncation.expect("cut");
        assert!(
            format!("{cut:?}").contains(&position.to_string()),
            "{codec}: {cut:?}"
        );
        set.close().unwrap();

        // Read without recovery (a log trusted at open): a typed error, not a panic.
        let batch = logbus::storage::record_batch::Batch::decode(&bad).unwrap();
        match batch.validate_records() {
            Err(Error::Corrupt {
                position,
                reason: Corruption::BadCompressedData { .. },
                ..
            }) => assert_eq!(position, HEADER_SIZE as u64),
            // A flip inside an lz4 literal run decodes to other bytes: the records then
            // fail their own checks, or (for a value's bytes) decode as other values.
            Err(Error::Corrupt { .. }) | Ok(()) => {}
            other => panic!("{codec}: {other:?}"),
        }
    }
}
