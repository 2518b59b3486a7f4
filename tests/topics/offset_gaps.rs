//! Consumers over logs whose offsets have gaps (a segment deleted by hand, a Kafka-written
//! directory with gaps between batches and a transaction marker): every read path delivers
//! each record once, offsets strictly increasing, and moves to the last offset read + 1.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{Consumer, ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus::storage::{BatchBuilder, LogSetup, SegmentSet};

const TOPIC: &str = "t";

/// The ways a consumer reads.
#[derive(Debug, Clone, Copy)]
enum Path_ {
    Poll,
    PollInto,
    PollWith,
}

const PATHS: [Path_; 3] = [Path_::Poll, Path_::PollInto, Path_::PollWith];

fn open(dir: &Path) -> Broker {
    Broker::builder().data_dir(dir).create(true).open().unwrap()
}

fn consumer(broker: &Broker, group: Option<&str>) -> Consumer<(), String> {
    let mut config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    if let Some(g) = group {
        config = config.group_id(g).enable_auto_commit(false);
    }
    let mut c = broker.consumer::<(), String>(config).unwrap();
    c.assign(&[TopicPartition::new(TOPIC, 0)]).unwrap();
    c
}

/// Everything `c` reads through `path` until a poll finds nothing, as `(offset, value)`.
/// Bounded, so a consumer that re-reads for ever fails instead of hanging.
fn drain(c: &mut Consumer<(), String>, path: Path_, max: usize) -> Vec<(u64, String)> {
    let mut got = Vec::new();
    for _ in 0..10_000 {
        let n = match path {
            Path_::Poll => {
                let records = c.poll(Duration::ZERO).unwrap();
                let n = records.len();
                got.extend(records.into_iter().map(|r| (r.offset, r.value)));
                n
            }
            Path_::PollInto => {
                let mut batch = Vec::new();
                let n = c
                    .poll_with(max, Duration::ZERO, |r| batch.push(r.to_record()))
                    .unwrap();
                got.extend(batch.into_iter().map(|r| (r.offset, r.value)));
                n
            }
            Path_::PollWith => c
                .poll_with(max, Duration::ZERO, |r| {
                    got.push((r.offset, r.value.clone()))
                })
                .unwrap(),
        };
        if n == 0 {
            return got;
        }
    }
    panic!(
        "{path:?}: still reading after 10,000 polls ({} records)",
        got.len()
    );
}

/// `got` is exactly `want`, in order: each record once, offsets strictly increasing, and
/// every value the one stored at its offset.
fn assert_once_in_order(got: &[(u64, String)], want: &[(u64, String)], what: &str) {
    for w in got.windows(2) {
        assert!(
            w[0].0 < w[1].0,
            "{what}: offset {} came after {} (re-delivered or out of order)",
            w[1].0,
            w[0].0
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: record count");
    assert_eq!(got, want, "{what}");
}

fn value(i: u64) -> String {
    format!("v{i}")
}

/// The `.log` files of `t-0`, sorted by base offset.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = fs::read_dir(dir.join(format!("{TOPIC}-0")))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

fn base_of(log: &Path) -> u64 {
    log.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// 2,000 records in 4 KiB segments (16 in memory), closed; then one middle segment deleted
/// by hand. Returns the directory and the records left, in order.
fn log_with_a_deleted_segment() -> (tempfile::TempDir, Vec<(u64, String)>) {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path());
        broker
            .create_topic::<(), String>(
                TOPIC,
                TopicConfig::new(1).records_in_memory(16).persist(
                    PersistConfig::new()
                        .segment_bytes(4096)
                        .flush(FlushPolicy::Os),
                ),
            )
            .unwrap();
        let p = broker.producer::<(), String>();
        for i in 0..2000 {
            p.send(Record::new(TOPIC, value(i)).partition(0)).unwrap();
        }
        broker.close().unwrap();
    }
    let logs = segments(dir.path());
    assert!(logs.len() > 4, "{} segments", logs.len());
    let doomed = logs.len() / 2;
    let (from, to) = (base_of(&logs[doomed]), base_of(&logs[doomed + 1]));
    for ext in ["log", "index", "timeindex"] {
        fs::remove_file(logs[doomed].with_extension(ext)).unwrap();
    }
    let left = (0..2000)
        .filter(|o| !(from..to).contains(o))
        .map(|o| (o, value(o)))
        .collect();
    (dir, left)
}

#[test]
fn a_deleted_middle_segment_is_read_once_in_order() {
    let (dir, want) = log_with_a_deleted_segment();
    let broker = open(dir.path());
    broker.topic::<(), String>(TOPIC).unwrap();
    for path in PATHS {
        for max in [7, 500] {
            let mut c = consumer(&broker, None);
            let got = drain(&mut c, path, max);
            assert_once_in_order(&got, &want, &format!("{path:?}, max {max}"));
            let tp = TopicPartition::new(TOPIC, 0);
            assert_eq!(c.position(&tp).unwrap(), 2000, "{path:?}");
            // A group member, which also commits what it read.
            let mut c = consumer(&broker, Some(&format!("g-{path:?}-{max}")));
            let got = drain(&mut c, path, max);
            assert_once_in_order(&got, &want, &format!("{path:?}, max {max}, grouped"));
            c.commit_sync().unwrap();
            assert_eq!(c.committed(&tp).unwrap(), Some(2000));
        }
    }
}

#[test]
fn a_seek_into_a_gap_reads_from_the_next_record_once() {
    let (dir, all) = log_with_a_deleted_segment();
    let broker = open(dir.path());
    broker.topic::<(), String>(TOPIC).unwrap();
    // The first offset missing, and the last record before the gap.
    let gap = all.windows(2).find(|w| w[1].0 != w[0].0 + 1).unwrap()[0].0 + 1;
    let tp = TopicPartition::new(TOPIC, 0);
    for path in PATHS {
        for at in [gap - 3, gap, gap + 1] {
            let mut c = consumer(&broker, None);
            c.seek(&tp, at).unwrap();
            let want: Vec<_> = all.iter().filter(|(o, _)| *o >= at).cloned().collect();
            let got = drain(&mut c, path, 64);
            assert_once_in_order(&got, &want, &format!("{path:?}, seek to {at}"));
        }
    }
}

/// A Kafka-written directory: batches with gaps between them (as compaction leaves), and a
/// transaction marker as the last batch on disk, then records sent after the reopen.
#[test]
fn a_kafka_directory_with_gaps_between_batches_is_read_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = open(dir.path());
        broker
            .create_topic::<(), String>(
                TOPIC,
                TopicConfig::new(1)
                    .records_in_memory(16)
                    .persist(PersistConfig::new().flush(FlushPolicy::Os)),
            )
            .unwrap();
        broker.close().unwrap();
    }
    let mut want = Vec::new();
    {
        let (mut set, _) =
            SegmentSet::open(dir.path().join(format!("{TOPIC}-0")), LogSetup::default()).unwrap();
        // Runs of 3 records at 0, 10, 11 (no gap), 40 and 100.
        for base in [0u64, 10, 13, 40, 100] {
            let mut b = BatchBuilder::new(base);
            for o in base..base + 3 {
                b.append(1_000 + o as i64, None, Some(value(o).as_bytes()), &[])
                    .unwrap();
                want.push((o, value(o)));
            }
            set.append_batch(b.finish()).unwrap();
        }
        // A commit marker at 103 (control and transactional attributes), re-sealed.
        let mut marker = BatchBuilder::new(103)
            .with_record(2_000, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 0]))
            .unwrap()
            .finish()
            .to_vec();
        marker[22] |= 0x30;
        let crc = crc32c::crc32c(&marker[21..]);
        marker[17..21].copy_from_slice(&crc.to_be_bytes());
        set.append_batch(&marker).unwrap();
        assert_eq!(set.log_end_offset(), 104);
        set.close().unwrap();
    }
    let broker = open(dir.path());
    broker.topic::<(), String>(TOPIC).unwrap();
    let p = broker.producer::<(), String>();
    for o in 104..110 {
        let sent = p.send(Record::new(TOPIC, value(o)).partition(0)).unwrap();
        assert_eq!(sent.offset, o);
        want.push((o, value(o)));
    }
    let tp = TopicPartition::new(TOPIC, 0);
    for path in PATHS {
        for max in [1, 2, 4, 100] {
            let mut c = consumer(&broker, None);
            let got = drain(&mut c, path, max);
            assert_once_in_order(&got, &want, &format!("{path:?}, max {max}"));
            assert_eq!(c.position(&tp).unwrap(), 110);
            // From inside each gap, and from the marker.
            for at in [3u64, 20, 43, 99, 103] {
                c.seek(&tp, at).unwrap();
                let from: Vec<_> = want.iter().filter(|(o, _)| *o >= at).cloned().collect();
                let got = drain(&mut c, path, max);
                assert_once_in_order(&got, &from, &format!("{path:?}, max {max}, seek {at}"));
            }
        }
    }
}

/// The `.log` files of partition 0 of `topic` under `dir`, sorted by base offset.
fn segments_in(dir: &Path, topic: &str) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = fs::read_dir(dir.join(format!("{topic}-0")))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

/// A replicated topic (two replicas on two directories) whose replicas each lost a middle
/// segment by hand: a consumer reads the leader's log from disk through the gap, each record
/// once, in order.
#[test]
fn a_replicated_log_with_a_deleted_segment_is_read_once_in_order() {
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths: Vec<PathBuf> = dirs.iter().map(|d| d.path().to_path_buf()).collect();
    let open_both = || {
        Broker::builder()
            .data_dirs(paths.iter())
            .create(true)
            .open()
            .unwrap()
    };
    {
        let broker = open_both();
        broker
            .create_topic::<(), String>(
                TOPIC,
                TopicConfig::new(1)
                    .replication_factor(2)
                    .min_insync_replicas(1)
                    .records_in_memory(16)
                    .persist(PersistConfig::new().segment_bytes(4096)),
            )
            .unwrap();
        let p = broker.producer::<(), String>();
        for i in 0..2000 {
            p.send(Record::new(TOPIC, value(i)).partition(0)).unwrap();
        }
        broker.close().unwrap();
    }
    // Each replica loses the segment holding offset 1000 (their segments need not align).
    let mut lost = Vec::new();
    for dir in &paths {
        let logs = segments_in(dir, TOPIC);
        let k = logs.iter().rposition(|l| base_of(l) <= 1000).unwrap();
        assert!(k + 1 < logs.len(), "a middle segment");
        lost.push(base_of(&logs[k])..base_of(&logs[k + 1]));
        for ext in ["log", "index", "timeindex"] {
            fs::remove_file(logs[k].with_extension(ext)).unwrap();
        }
    }
    let broker = open_both();
    broker.topic::<(), String>(TOPIC).unwrap();
    let d = broker.describe_topic(TOPIC).unwrap().replicas[0].clone();
    let leader = d.leader.expect("a leader") as usize;
    assert_eq!(d.high_watermark, 2000);
    let want: Vec<(u64, String)> = (0..2000)
        .filter(|o| !lost[leader].contains(o))
        .map(|o| (o, value(o)))
        .collect();
    let tp = TopicPartition::new(TOPIC, 0);
    for path in PATHS {
        for max in [7, 500] {
            let mut c = consumer(&broker, None);
            let got = drain(&mut c, path, max);
            assert_once_in_order(&got, &want, &format!("replicated, {path:?}, max {max}"));
            assert_eq!(c.position(&tp).unwrap(), 2000);
            let at = lost[leader].start + 1;
            c.seek(&tp, at).unwrap();
            let from: Vec<_> = want.iter().filter(|(o, _)| *o >= at).cloned().collect();
            let got = drain(&mut c, path, max);
            assert_once_in_order(&got, &from, &format!("replicated, {path:?}, seek {at}"));
        }
    }
    broker.close().unwrap();
}

/// Every record of the replica log in `dir` (partition 0 of `t`), `(offset, value)`.
fn replica_records(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let (set, _) = SegmentSet::open(dir.join(format!("{TOPIC}-0")), LogSetup::default()).unwrap();
    let mut out = Vec::new();
    let mut at = set.log_start_offset();
    loop {
        let got = set.read_records(at, 1 << 20).unwrap();
        let Some(last) = got.last().map(|r| r.0) else {
            return out;
        };
        out.extend(got.into_iter().map(|(o, r)| (o, r.value.unwrap())));
        at = last + 1;
    }
}

/// A follower fetching across a gap in its leader's log on disk (the leader lost a middle
/// segment; the follower was cut just before it) continues past the gap, as Kafka's
/// followers copy batches with their offsets: it catches up with the leader's log end and
/// holds exactly the leader's records.
#[test]
fn a_follower_fetches_across_a_gap_in_its_leaders_log() {
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths: Vec<PathBuf> = dirs.iter().map(|d| d.path().to_path_buf()).collect();
    let open_both = || {
        Broker::builder()
            .data_dirs(paths.iter())
            .create(true)
            .open()
            .unwrap()
    };
    {
        let broker = open_both();
        broker
            .create_topic::<(), String>(
                TOPIC,
                TopicConfig::new(1)
                    .replication_factor(2)
                    .min_insync_replicas(1)
                    .records_in_memory(16)
                    .persist(PersistConfig::new().segment_bytes(4096)),
            )
            .unwrap();
        let d = broker.describe_topic(TOPIC).unwrap().replicas[0].clone();
        assert_eq!(d.leader, Some(0));
        let p = broker.producer::<(), String>();
        for i in 0..2000 {
            p.send(Record::new(TOPIC, value(i)).partition(0)).unwrap();
        }
        broker.close().unwrap();
    }
    // The leader (replica 0, on the first directory) loses the segment holding 1000.
    let logs = segments_in(&paths[0], TOPIC);
    let k = logs.iter().rposition(|l| base_of(l) <= 1000).unwrap();
    let gap = base_of(&logs[k])..base_of(&logs[k + 1]);
    for ext in ["log", "index", "timeindex"] {
        fs::remove_file(logs[k].with_extension(ext)).unwrap();
    }
    // The follower is cut at the gap's start (whole batches: at or below it).
    {
        let (mut set, _) =
            SegmentSet::open(paths[1].join(format!("{TOPIC}-0")), LogSetup::default()).unwrap();
        set.truncate_to(gap.start).unwrap();
        assert!(set.log_end_offset() <= gap.start);
        set.close().unwrap();
    }
    let broker = open_both();
    broker.topic::<(), String>(TOPIC).unwrap();
    let caught_up = || {
        let d = broker.describe_topic(TOPIC).unwrap().replicas[0].clone();
        assert_eq!(d.leader, Some(0), "the leader keeps its place");
        d.replicas[1].log_end == 2000
    };
    let mut tries = 0;
    while !caught_up() {
        tries += 1;
        assert!(
            tries < 1000,
            "the follower is stuck at the gap: {:?}",
            broker.describe_topic(TOPIC).unwrap().replicas[0]
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Consumers read the leader's log once, in order.
    let want: Vec<(u64, String)> = (0..2000)
        .filter(|o| !gap.contains(o))
        .map(|o| (o, value(o)))
        .collect();
    let mut c = consumer(&broker, None);
    assert_once_in_order(
        &drain(&mut c, Path_::PollInto, 500),
        &want,
        "after the catch-up",
    );
    broker.close().unwrap();
    let leader = replica_records(&paths[0]);
    let follower = replica_records(&paths[1]);
    assert_eq!(leader.len(), want.len());
    assert_eq!(
        follower, leader,
        "the follower holds exactly the leader's records"
    );
}
