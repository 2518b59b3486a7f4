//! `PartitionProducer::send_slice`: records copied from a slice straight into a partition's ring
//! slots. Order and contents, every error path (bad timestamps, unknown topic or
//! partition, the topic deleted while the send waits), a full partition under both
//! overflow policies, drops of what the copied records overwrite, persisted and replicated
//! topics (the paths that take whole entries), and a stress run of two threads sharing a
//! producer.
//!
//! The 60 s bounds only turn a hang into a failure; they measure nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Payload, Record};
use logbus::Error;

const HANG: Duration = Duration::from_secs(60);

/// Every record of partition `p` of `topic` still held: `(offset, timestamp, value)`.
fn read_all<K>(b: &Broker, topic: &str, p: u32) -> Vec<(u64, i64, u64)>
where
    K: Clone + Send + Sync + 'static,
{
    let mut c = b
        .consumer::<K, u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(100_000),
        )
        .unwrap();
    c.assign(&[TopicPartition::new(topic, p)]).unwrap();
    let mut out = Vec::new();
    loop {
        let before = out.len();
        c.poll_with(100_000, Duration::ZERO, |r| out.push(r.to_record()))
            .unwrap();
        if out.len() == before {
            break;
        }
    }
    out.iter()
        .map(|r| (r.offset, r.timestamp, r.value))
        .collect()
}

fn stamped(range: std::ops::Range<u64>) -> Vec<(i64, u64)> {
    range.map(|v| (1_000 + v as i64, v)).collect()
}

#[test]
fn a_slice_lands_in_order_with_its_timestamps() {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>("t", TopicConfig::new(3)).unwrap();
    let p = b.producer::<(), u64>();
    assert_eq!(
        p.partition("t", 2)
            .unwrap()
            .send_slice(&stamped(0..100))
            .unwrap(),
        100
    );
    assert_eq!(
        p.partition("t", 2)
            .unwrap()
            .send_slice(&stamped(100..164))
            .unwrap(),
        64
    );
    // Mixed with the other sends on the same partition, offsets stay dense.
    p.send(Record::new("t", 164).partition(2).timestamp(1_164))
        .unwrap();
    p.partition("t", 2)
        .unwrap()
        .send_iter([Payload::new(165).timestamp(1_165)])
        .unwrap();
    assert_eq!(
        p.partition("t", 2)
            .unwrap()
            .send_slice(&stamped(166..170))
            .unwrap(),
        4
    );
    let want: Vec<_> = (0..170).map(|v| (v, 1_000 + v as i64, v)).collect();
    assert_eq!(read_all::<()>(&b, "t", 2), want);
    assert!(read_all::<()>(&b, "t", 0).is_empty());
}

#[test]
fn an_empty_slice_sends_nothing_but_still_checks_the_destination() {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    assert_eq!(p.partition("t", 0).unwrap().send_slice(&[]).unwrap(), 0);
    let e = p.partition("nope", 0).unwrap_err();
    assert!(matches!(e, Error::UnknownTopic { .. }), "{e}");
    assert_eq!(b.describe_topic("t").unwrap().partitions[0].log_end, 0);
}

#[test]
fn a_bad_timestamp_sends_those_before_it() {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    b.create_topic::<(), u64>("u", TopicConfig::new(1).records_in_memory(1 << 10))
        .unwrap();
    let mut records = stamped(0..10);
    records[3].0 = -5;
    records[7].0 = -1;
    let e = p
        .partition("t", 0)
        .unwrap()
        .send_slice(&records)
        .unwrap_err();
    assert_eq!(e.sent, 3);
    // The first bad one is reported.
    assert!(
        matches!(
            e.error,
            Error::InvalidTimestamp {
                timestamp: -5,
                offset: None
            }
        ),
        "{e}"
    );
    assert_eq!(b.describe_topic("t").unwrap().partitions[0].log_end, 3);
    // A bad first record sends nothing; `i64::MIN` is bad too.
    let e = p
        .partition("t", 0)
        .unwrap()
        .send_slice(&[(i64::MIN, 1)])
        .unwrap_err();
    assert_eq!(e.sent, 0);
    assert!(matches!(
        e.error,
        Error::InvalidTimestamp {
            timestamp: i64::MIN,
            offset: None
        }
    ));
    // Past `MAX_TIMESTAMP` (2^62 - 1) is bad, in any lane of the eight-at-a-time check.
    for lane in 0..9 {
        let mut records = stamped(0..9);
        records[lane].0 = logbus::MAX_TIMESTAMP + 1;
        let e = p
            .partition("u", 0)
            .unwrap()
            .send_slice(&records)
            .unwrap_err();
        assert_eq!(e.sent, lane);
        assert!(
            matches!(e.error, Error::InvalidTimestamp { timestamp, offset: None } if timestamp == 1 << 62),
            "{e}"
        );
    }
    // Zero is a valid timestamp.
    assert_eq!(
        p.partition("t", 0).unwrap().send_slice(&[(0, 3)]).unwrap(),
        1
    );
    let got = read_all::<()>(&b, "t", 0);
    assert_eq!(
        got,
        [(0, 1_000, 0), (1, 1_001, 1), (2, 1_002, 2), (3, 0, 3)]
    );
    // The error converts with `?`.
    let as_error: Error = p
        .partition("t", 0)
        .unwrap()
        .send_slice(&[(-2, 0)])
        .unwrap_err()
        .into();
    assert!(matches!(
        as_error,
        Error::InvalidTimestamp {
            timestamp: -2,
            offset: None
        }
    ));
}

#[test]
fn unknown_topic_or_partition_sends_nothing() {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let p = b.producer::<(), u64>();
    let e = p.partition("t", 2).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PartitionOutOfRange {
                partition: 2,
                count: 2,
                ..
            }
        ),
        "{e}"
    );
    let e = p.partition("nope", 0).unwrap_err();
    assert!(matches!(e, Error::UnknownTopic { .. }), "{e}");
    // A topic of another value type.
    b.create_topic::<(), u32>("u32s", TopicConfig::new(1))
        .unwrap();
    let e = p.partition("u32s", 0).unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
    // A topic deleted and made again is found again, also by a handle taken before.
    let handle = p.partition("t", 0).unwrap();
    handle.send_slice(&stamped(0..4)).unwrap();
    b.delete_topic("t").unwrap();
    let e = handle.send_slice(&stamped(0..4)).unwrap_err();
    assert_eq!(e.sent, 0);
    assert!(matches!(e.error, Error::UnknownTopic { .. }), "{e}");
    let e = p.partition("t", 0).unwrap_err();
    assert!(matches!(e, Error::UnknownTopic { .. }), "{e}");
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    assert_eq!(handle.send_slice(&stamped(7..9)).unwrap(), 2);
    assert_eq!(read_all::<()>(&b, "t", 0), [(0, 1_007, 7), (1, 1_008, 8)]);
}

#[test]
fn drop_oldest_keeps_the_last_records_of_a_slice_longer_than_the_ring() {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>(
        "t",
        TopicConfig::new(1)
            .records_in_memory(8)
            .overflow(Overflow::DropOldest),
    )
    .unwrap();
    let p = b.producer::<(), u64>();
    assert_eq!(
        p.partition("t", 0)
            .unwrap()
            .send_slice(&stamped(0..21))
            .unwrap(),
        21
    );
    let want: Vec<_> = (13..21).map(|v| (v, 1_000 + v as i64, v)).collect();
    assert_eq!(read_all::<()>(&b, "t", 0), want);
}

/// A broker with `full` (1 partition, room for 2 records, gated by group `g`, which never
/// commits) and `free`.
fn gated() -> (Broker, Arc<logbus::Producer<(), u64>>) {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>("full", TopicConfig::new(1).records_in_memory(2))
        .unwrap();
    b.create_topic::<(), u64>("free", TopicConfig::new(1))
        .unwrap();
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    c.assign(&[TopicPartition::new("full", 0)]).unwrap();
    drop(c);
    (b.clone(), Arc::new(b.producer::<(), u64>()))
}

fn until_full(b: &Broker) {
    let start = std::time::Instant::now();
    while b.describe_topic("full").unwrap().partitions[0].log_end < 2 {
        assert!(
            start.elapsed() < HANG,
            "the send never filled the partition"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn block_waits_for_room_without_holding_back_the_producers_other_threads() {
    let (b, p) = gated();
    let waiting = {
        let p = Arc::clone(&p);
        thread::spawn(move || p.partition("full", 0).unwrap().send_slice(&stamped(0..5)))
    };
    until_full(&b);
    // Another thread of the same producer is not held behind the wait.
    let (tx, rx) = mpsc::channel();
    {
        let p = Arc::clone(&p);
        thread::spawn(move || {
            let free = p.partition("free", 0).unwrap().send_slice(&stamped(7..8));
            let timed = p
                .send_timeout(Record::new("full", 8), Duration::from_millis(1))
                .map_err(|e| e.into_error());
            let _ = tx.send((free.map_err(|e| e.error), timed.map(|m| m.offset)));
        });
    }
    let got = rx.recv_timeout(HANG);
    b.delete_group("g").unwrap();
    let (free, timed) = got.expect("the producer's other threads were held behind the wait");
    assert_eq!(free.unwrap(), 1);
    assert!(matches!(timed, Err(Error::Timeout { .. })), "{timed:?}");
    assert_eq!(waiting.join().unwrap().unwrap(), 5);
    let got: Vec<_> = read_all::<()>(&b, "full", 0)
        .into_iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(got, [3, 4]);
}

#[test]
fn a_send_waiting_for_room_ends_when_the_topic_is_deleted() {
    let (b, p) = gated();
    let waiting = {
        let p = Arc::clone(&p);
        thread::spawn(move || p.partition("full", 0).unwrap().send_slice(&stamped(0..5)))
    };
    until_full(&b);
    b.delete_topic("full").unwrap();
    let e = waiting.join().unwrap().unwrap_err();
    assert_eq!(e.sent, 2);
    assert!(matches!(e.error, Error::Closed { .. }), "{e}");
    // A full partition without a wait (`try_` sends) is not involved: the next send to a
    // topic made again goes through.
    b.create_topic::<(), u64>("full", TopicConfig::new(1))
        .unwrap();
    assert_eq!(
        p.partition("full", 0)
            .unwrap()
            .send_slice(&stamped(0..3))
            .unwrap(),
        3
    );
}

/// Counts drops of the values it is cloned into.
#[derive(Clone)]
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Keys need a codec (the producer hashes keys); these encode nothing and are never decoded
/// here (in-memory topics).
impl logbus::codec::Codec for Counted {
    const TYPE_ID: &'static str = "test.Counted";

    fn encode(&self, _out: &mut Vec<u8>) {}

    fn decode(_bytes: &[u8]) -> logbus::Result<Self> {
        Ok(Counted(Arc::new(AtomicUsize::new(0))))
    }
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &[]
    }
}

/// Copied records carry no headers or key, so the ring overwrites them unread while it has
/// only held such records; a record with headers, or with a key whose type has drop glue,
/// is still dropped exactly once when copied records overwrite it, on both overflow
/// policies.
#[test]
fn what_copied_records_overwrite_is_dropped_once() {
    for overflow in [Overflow::DropOldest, Overflow::Block] {
        // Headers on a plain key type.
        let b = Broker::in_memory();
        b.create_topic::<(), u64>(
            "t",
            TopicConfig::new(1).records_in_memory(4).overflow(overflow),
        )
        .unwrap();
        let p = b.producer::<(), u64>();
        let drops = Arc::new(AtomicUsize::new(0));
        let with_header = |v: u64| {
            Payload::new(v).header(
                "h",
                Some(bytes::Bytes::from_owner(Counted(Arc::clone(&drops)))),
            )
        };
        p.partition("t", 0)
            .unwrap()
            .send_slice(&stamped(0..3))
            .unwrap();
        p.partition("t", 0)
            .unwrap()
            .send_iter([with_header(3)])
            .unwrap();
        p.partition("t", 0)
            .unwrap()
            .send_slice(&stamped(4..7))
            .unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 0, "{overflow:?}: still held");
        p.partition("t", 0)
            .unwrap()
            .send_slice(&stamped(7..8))
            .unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1, "{overflow:?}");
        p.partition("t", 0)
            .unwrap()
            .send_slice(&stamped(8..20))
            .unwrap();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "{overflow:?}: dropped once"
        );

        // Keys with drop glue: the copied records' keys are `None`.
        let b = Broker::in_memory();
        b.create_topic::<Counted, u64>(
            "k",
            TopicConfig::new(1).records_in_memory(4).overflow(overflow),
        )
        .unwrap();
        let p = b.producer::<Counted, u64>();
        let keys = Arc::new(AtomicUsize::new(0));
        p.send(
            Record::new("k", 0)
                .partition(0)
                .key(Counted(Arc::clone(&keys))),
        )
        .unwrap();
        p.partition("k", 0)
            .unwrap()
            .send_slice(&stamped(1..4))
            .unwrap();
        assert_eq!(keys.load(Ordering::SeqCst), 0, "{overflow:?}: still held");
        p.partition("k", 0)
            .unwrap()
            .send_slice(&stamped(4..9))
            .unwrap();
        assert_eq!(keys.load(Ordering::SeqCst), 1, "{overflow:?}");
        let got: Vec<_> = read_all::<Counted>(&b, "k", 0)
            .into_iter()
            .map(|r| r.2)
            .collect();
        assert_eq!(got, [5, 6, 7, 8]);
    }
}

#[test]
fn replicated_topics_take_copied_records_through_their_replicas() {
    let b = Broker::in_memory();
    b.create_topic::<(), u64>(
        "r",
        TopicConfig::new(1)
            .replication_factor(3)
            .min_insync_replicas(2),
    )
    .unwrap();
    let p = b.producer::<(), u64>();
    assert_eq!(
        p.partition("r", 0)
            .unwrap()
            .send_slice(&stamped(0..50))
            .unwrap(),
        50
    );
    let d = b.describe_topic("r").unwrap();
    assert_eq!(d.partitions[0].log_end, 50);
    let want: Vec<_> = (0..50).map(|v| (v, 1_000 + v as i64, v)).collect();
    assert_eq!(read_all::<()>(&b, "r", 0), want);
}

#[test]
fn persisted_topics_take_copied_records_to_disk() {
    let dir = tempfile::tempdir().unwrap();
    {
        let b = Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .open()
            .unwrap();
        b.create_topic::<(), u64>(
            "d",
            TopicConfig::new(1)
                .records_in_memory(16)
                .persist(logbus::persist::PersistConfig::new()),
        )
        .unwrap();
        let p = b.producer::<(), u64>();
        assert_eq!(
            p.partition("d", 0)
                .unwrap()
                .send_slice(&stamped(0..100))
                .unwrap(),
            100
        );
        b.close().unwrap();
    }
    let b = Broker::open(dir.path()).unwrap();
    b.topic::<(), u64>("d").unwrap();
    let want: Vec<_> = (0..100).map(|v| (v, 1_000 + v as i64, v)).collect();
    assert_eq!(read_all::<()>(&b, "d", 0), want);
}

/// Two threads share a producer and send slices to one `Block` partition of 64 records
/// while a group consumer reads and commits: every record arrives once, each thread's in
/// its order, and a slice is never split by another's unless it waited for room.
#[test]
fn two_threads_sharing_a_producer_lose_and_duplicate_nothing() {
    const PER: u64 = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let b = Broker::in_memory();
    b.create_topic::<(), u64>("s", TopicConfig::new(1).records_in_memory(64))
        .unwrap();
    let mut c = b
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[TopicPartition::new("s", 0)]).unwrap();
    let p = Arc::new(b.producer::<(), u64>());
    let senders: Vec<_> = (0..2u64)
        .map(|t| {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                let mut v = 0;
                while v < PER {
                    let k = (1 + (v % 37)).min(PER - v);
                    let slice: Vec<_> = (v..v + k).map(|v| (v as i64, t << 32 | v)).collect();
                    assert_eq!(
                        p.partition("s", 0).unwrap().send_slice(&slice).unwrap(),
                        k as usize
                    );
                    v += k;
                }
            })
        })
        .collect();
    let mut next = [0u64; 2];
    let mut out = Vec::new();
    let start = std::time::Instant::now();
    while next != [PER; 2] {
        assert!(start.elapsed() < HANG, "stuck at {next:?}");
        out.clear();
        c.poll_with(1000, Duration::from_millis(10), |r| out.push(r.to_record()))
            .unwrap();
        for r in &out {
            let (t, v) = ((r.value >> 32) as usize, r.value & 0xffff_ffff);
            assert_eq!(v, next[t], "thread {t}: out of order, lost or duplicated");
            assert_eq!(r.timestamp, v as i64);
            next[t] += 1;
        }
        c.commit_sync().unwrap();
    }
    for s in senders {
        s.join().unwrap();
    }
    assert_eq!(
        b.describe_topic("s").unwrap().partitions[0].log_end,
        2 * PER
    );
}

/// A key whose drop panics once armed.
#[derive(Clone)]
struct Bomb(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0.swap(false, Ordering::SeqCst) {
            panic!("the key's drop panicked");
        }
    }
}

impl logbus::codec::Codec for Bomb {
    const TYPE_ID: &'static str = "test.Bomb";

    fn encode(&self, _out: &mut Vec<u8>) {}

    fn decode(_bytes: &[u8]) -> logbus::Result<Self> {
        Ok(Bomb(Arc::default()))
    }
}

/// No user code runs while a copied run is written, but the records it overwrites may have
/// a key whose drop panics: the panic reaches the caller, the run is still written whole
/// and published (nothing half-written, no slot left empty), and the partition and the
/// producer keep working.
#[test]
fn a_panicking_drop_of_an_overwritten_key_leaves_the_partition_whole() {
    let b = Broker::in_memory();
    b.create_topic::<Bomb, u64>(
        "t",
        TopicConfig::new(1)
            .records_in_memory(4)
            .overflow(Overflow::DropOldest),
    )
    .unwrap();
    let p = b.producer::<Bomb, u64>();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    p.send(
        Record::new("t", 0)
            .partition(0)
            .key(Bomb(Arc::clone(&armed))),
    )
    .unwrap();
    armed.store(true, Ordering::SeqCst);
    p.partition("t", 0)
        .unwrap()
        .send_slice(&stamped(1..4))
        .unwrap();
    // Offsets 4..7 overwrite 0..3: the first overwrite drops the armed key.
    let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.partition("t", 0).unwrap().send_slice(&stamped(4..7))
    }));
    assert!(sent.is_err(), "the key's panic reaches the caller");
    assert!(!armed.load(Ordering::SeqCst), "the key was dropped once");
    assert_eq!(b.describe_topic("t").unwrap().partitions[0].log_end, 7);
    let got: Vec<_> = read_all::<Bomb>(&b, "t", 0)
        .into_iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(got, [3, 4, 5, 6]);
    // Both the partition and the producer go on.
    assert_eq!(
        p.partition("t", 0)
            .unwrap()
            .send_slice(&stamped(7..9))
            .unwrap(),
        2
    );
    p.send(Record::new("t", 9).partition(0)).unwrap();
    let got: Vec<_> = read_all::<Bomb>(&b, "t", 0)
        .into_iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(got, [6, 7, 8, 9]);
}
