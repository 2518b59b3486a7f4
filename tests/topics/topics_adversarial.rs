//! Adversarial cases for topics, producers and consumers: boundary values and user code
//! that panics. Nothing may abort, wedge the broker, lose or duplicate a record.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Partitioner, Payload, ProducerConfig, Record};
use logbus::{Error, ManualClock, MAX_TIMESTAMP};

const T0: i64 = 1_700_000_000_000;

fn broker() -> (Broker, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    (
        Broker::builder().clock(clock.clone()).build().unwrap(),
        clock,
    )
}

fn tp(topic: &str, p: u32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn drain(c: &mut logbus::consumer::Consumer<(), u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut v = Vec::new();
    while c
        .poll_with(1000, Duration::ZERO, |r| v.push(r.to_record()))
        .unwrap()
        > 0
    {
        out.extend(v.drain(..).map(|r| (r.offset, r.value)));
    }
    out
}

#[test]
fn seek_to_u64_max_resets_or_errors_without_panicking() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    for v in 0..3 {
        p.send(Record::new("t", v)).unwrap();
    }
    for reset in [
        OffsetReset::Earliest,
        OffsetReset::Latest,
        OffsetReset::None,
    ] {
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(reset))
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        c.seek(&tp("t", 0), u64::MAX).unwrap();
        let got = c.poll(Duration::ZERO);
        match reset {
            OffsetReset::Earliest => {
                assert_eq!(got.unwrap().len(), 3);
                assert_eq!(c.position(&tp("t", 0)).unwrap(), 3);
            }
            OffsetReset::Latest => {
                assert_eq!(got.unwrap().len(), 0);
                assert_eq!(c.position(&tp("t", 0)).unwrap(), 3);
            }
            OffsetReset::None => assert!(matches!(
                got,
                Err(Error::OffsetOutOfRange {
                    requested: u64::MAX,
                    start: 0,
                    end: 3,
                    ..
                })
            )),
        }
        // Seeking past the end is not a gap: nothing was skipped.
        assert_eq!(c.metrics().total_skipped(), 0, "{reset:?}");
    }
}

#[test]
fn commit_offsets_u64_max_is_a_typed_error() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    let e = c.commit_offsets(&[(tp("t", 0), u64::MAX)]).unwrap_err();
    assert!(matches!(e, Error::OffsetOutOfRange { .. }), "{e:?}");
    assert_eq!(c.committed(&tp("t", 0)).unwrap(), None);
}

#[test]
fn boundary_configs_are_typed_errors() {
    let (b, _) = broker();
    for cfg in [
        TopicConfig::new(0),
        TopicConfig::new(u32::MAX),
        TopicConfig::new(1).records_in_memory(1),
        TopicConfig::new(1).records_in_memory(0),
        TopicConfig::new(1).records_in_memory(3),
        TopicConfig::new(1).records_in_memory(usize::MAX),
        TopicConfig::new(1).retention(Duration::ZERO),
    ] {
        let e = b.create_topic::<(), u64>("t", cfg).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{cfg:?}: {e:?}");
    }
    assert!(matches!(
        b.consumer::<(), u64>(ConsumerConfig::new().max_poll_records(0)),
        Err(Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        b.producer_with_config::<(), u64>(ProducerConfig::new().sticky_batch(0)),
        Err(Error::InvalidConfig { .. })
    ));
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    for n in [0, 1, 2] {
        assert!(matches!(
            b.add_partitions("t", n),
            Err(Error::PartitionsCannotShrink { .. })
        ));
    }
    assert!(matches!(
        b.add_partitions("t", u32::MAX),
        Err(Error::InvalidConfig { .. })
    ));
    assert_eq!(b.describe_topic("t").unwrap().partitions.len(), 2);
}

#[test]
fn empty_batches_and_zero_timeouts() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
        .unwrap();
    let p = b.producer::<(), u64>();
    assert_eq!(p.send_batch(&mut Vec::new()).unwrap(), 0);
    assert_eq!(
        p.partition("t", 0)
            .unwrap()
            .send_iter(std::iter::empty())
            .unwrap(),
        0
    );
    let mut c = b
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 0);
    assert_eq!(
        c.poll_with(0, Duration::ZERO, |_| panic!("no record"))
            .unwrap(),
        0
    );
    p.send(Record::new("t", 1)).unwrap();
    p.send(Record::new("t", 2)).unwrap();
    // Full and gated on "g": a zero timeout fails at once, with the record handed back.
    let e = p
        .send_timeout(Record::new("t", 3), Duration::ZERO)
        .unwrap_err();
    assert!(matches!(e.error(), Error::Timeout { .. }), "{e:?}");
    assert_eq!(e.into_record().unwrap().value, 3);
    let e = p.try_send(Record::new("t", 3)).unwrap_err();
    assert!(matches!(e.error(), Error::Full { .. }), "{e:?}");
}

struct Boom;
impl Partitioner<u64> for Boom {
    fn partition(&self, _: &str, key: Option<&u64>, _: u32) -> Option<u32> {
        if key == Some(&13) {
            panic!("unlucky key");
        }
        None
    }
}

#[test]
fn a_panicking_partitioner_leaves_the_producer_usable() {
    let (b, _) = broker();
    b.create_topic::<u64, u64>("t", TopicConfig::new(3))
        .unwrap();
    let p = b
        .producer_with_partitioner::<u64, u64>(ProducerConfig::new(), Boom)
        .unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| p.send(Record::new("t", 0).key(13))));
    assert!(r.is_err());
    let mut batch = vec![Record::new("t", 1).key(1), Record::new("t", 2).key(13)];
    let r = catch_unwind(AssertUnwindSafe(|| p.send_batch(&mut batch)));
    assert!(r.is_err());
    // A panic inside a batch drops the batch's records (documented on `send_batch`):
    // none was sent, and the producer still sends, from offset 0.
    assert!(batch.is_empty());
    let m = p.send(Record::new("t", 3).partition(0)).unwrap();
    assert_eq!(m.offset, 0);
    let total: u64 = b
        .describe_topic("t")
        .unwrap()
        .partitions
        .iter()
        .map(|d| d.log_end)
        .sum();
    assert_eq!(total, 1);
}

#[test]
fn a_panicking_poll_with_closure_leaves_the_consumer_usable() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    for v in 0..10 {
        p.send(Record::new("t", v)).unwrap();
    }
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        c.poll_with(4, Duration::ZERO, |r| {
            if r.offset == 1 {
                panic!("user code");
            }
        })
    }));
    assert!(r.is_err());
    // As documented: positions moved with the copy.
    assert_eq!(c.position(&tp("t", 0)).unwrap(), 4);
    let mut seen = Vec::new();
    while c
        .poll_with(100, Duration::ZERO, |r| seen.push(*r.value))
        .unwrap()
        > 0
    {}
    assert_eq!(seen, (4..10).collect::<Vec<_>>());
    c.seek(&tp("t", 0), 1).unwrap();
    assert_eq!(drain(&mut c).len(), 9);
}

static BOMB: AtomicBool = AtomicBool::new(false);

#[derive(Clone)]
struct Bomb(u64);
impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 == 0 && BOMB.load(Ordering::SeqCst) && !std::thread::panicking() {
            panic!("drop of the oldest value");
        }
    }
}

#[test]
fn a_panicking_drop_of_an_overwritten_value_does_not_wedge_the_partition() {
    let (b, _) = broker();
    b.create_topic::<(), Bomb>(
        "t",
        TopicConfig::new(1)
            .records_in_memory(2)
            .overflow(Overflow::DropOldest),
    )
    .unwrap();
    let p = b.producer::<(), Bomb>();
    p.send(Record::new("t", Bomb(0))).unwrap();
    p.send(Record::new("t", Bomb(1))).unwrap();
    BOMB.store(true, Ordering::SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| p.send(Record::new("t", Bomb(2)))));
    BOMB.store(false, Ordering::SeqCst);
    let _ = r;
    // Whatever happened to record 2, the partition goes on: sends succeed and a consumer
    // reads what is there, in dense offsets.
    for v in 3..6 {
        p.send_timeout(Record::new("t", Bomb(v)), Duration::from_secs(5))
            .unwrap();
    }
    let mut c = b
        .consumer::<(), Bomb>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let got = c.poll(Duration::from_secs(5)).unwrap();
    let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
    let values: Vec<u64> = got.iter().map(|r| r.value.0).collect();
    assert_eq!(offsets.len(), 2, "{offsets:?} {values:?}");
    assert_eq!(values, [4, 5]);
}

#[test]
fn offsets_for_times_ties_and_absent() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    for (v, ts) in [(0u64, 10i64), (1, 20), (2, 20), (3, 15), (4, 30)] {
        p.send(Record::new("t", v).timestamp(ts)).unwrap();
    }
    let c = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    let at = |ts: i64| {
        c.offsets_for_times(&[(tp("t", 0), ts)]).unwrap()[&tp("t", 0)]
            .map(|o| (o.offset, o.timestamp))
    };
    assert_eq!(at(0), Some((0, 10)));
    assert_eq!(at(10), Some((0, 10)));
    assert_eq!(at(11), Some((1, 20)));
    assert_eq!(at(20), Some((1, 20)));
    // Kafka: the earliest offset whose timestamp is >= the target (15 at offset 3 is
    // after 20 at offset 1).
    assert_eq!(at(15), Some((1, 20)));
    assert_eq!(at(30), Some((4, 30)));
    assert_eq!(at(31), None);
    assert_eq!(at(logbus::MAX_TIMESTAMP), None);
    assert!(matches!(
        c.offsets_for_times(&[(tp("t", 0), -1)]),
        Err(Error::InvalidTimestamp {
            timestamp: -1,
            offset: None
        })
    ));
    assert!(matches!(
        c.offsets_for_times(&[(tp("t", 0), i64::MAX)]),
        Err(Error::InvalidTimestamp {
            timestamp: i64::MAX,
            offset: None
        })
    ));
}

#[test]
fn send_iter_with_a_bad_timestamp_mid_stream_sends_those_before() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    let it = (0..5).map(|v| Payload::new(v).timestamp(if v == 3 { -1 } else { v as i64 }));
    let e = p.partition("t", 0).unwrap().send_iter(it).unwrap_err();
    assert_eq!(e.sent, 3);
    assert!(matches!(
        e.error,
        Error::InvalidTimestamp {
            timestamp: -1,
            offset: None
        }
    ));
    assert_eq!(b.describe_topic("t").unwrap().partitions[0].log_end, 3);
    let e = p.partition("t", 1).unwrap_err();
    assert!(matches!(e, Error::PartitionOutOfRange { count: 1, .. }));
    let e = p.partition("nope", 0).unwrap_err();
    assert!(matches!(e, Error::UnknownTopic { .. }));
}

#[test]
fn committed_offset_is_the_next_to_read_and_seek_to_end_waits_for_new() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    for v in 0..5 {
        p.send(Record::new("t", v)).unwrap();
    }
    {
        let mut c = b
            .consumer::<(), u64>(
                ConsumerConfig::new()
                    .group_id("g")
                    .auto_offset_reset(OffsetReset::Earliest)
                    .max_poll_records(2),
            )
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        let got = c.poll(Duration::ZERO).unwrap();
        assert_eq!(got.len(), 2);
        c.commit_sync().unwrap();
        assert_eq!(c.committed(&tp("t", 0)).unwrap(), Some(2));
    }
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    assert_eq!(c.position(&tp("t", 0)).unwrap(), 2);
    c.seek_to_end(&[]).unwrap();
    assert_eq!(c.position(&tp("t", 0)).unwrap(), 5);
    assert!(drain(&mut c).is_empty());
    p.send(Record::new("t", 5)).unwrap();
    assert_eq!(drain(&mut c), [(5, 5)]);
}

#[test]
fn a_producer_blocked_on_a_gate_wakes_when_the_topic_is_deleted_or_the_group_goes() {
    let (b, _) = broker();
    for (topic, by_delete) in [("del", true), ("grp", false)] {
        b.create_topic::<(), u64>(topic, TopicConfig::new(1).records_in_memory(2))
            .unwrap();
        {
            let mut c = b
                .consumer::<(), u64>(ConsumerConfig::new().group_id(topic))
                .unwrap();
            c.assign(&[tp(topic, 0)]).unwrap();
        }
        let p = b.producer::<(), u64>();
        p.send(Record::new(topic, 0)).unwrap();
        p.send(Record::new(topic, 1)).unwrap();
        let blocked = {
            let p = p.clone();
            std::thread::spawn(move || p.send(Record::new(topic, 2)).map(|m| m.offset))
        };
        std::thread::sleep(Duration::from_millis(20));
        if by_delete {
            b.delete_topic(topic).unwrap();
            let e = blocked.join().unwrap().unwrap_err();
            // Closed if it was waiting, UnknownTopic if the delete came first.
            assert!(
                matches!(e.error(), Error::Closed { .. } | Error::UnknownTopic { .. }),
                "{e:?}"
            );
            assert_eq!(e.into_record().unwrap().value, 2);
        } else {
            b.delete_group(topic).unwrap();
            assert_eq!(blocked.join().unwrap().unwrap(), 2);
        }
    }
}

#[test]
fn delete_and_recreate_a_topic_with_other_types_under_a_cached_producer() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(2)).unwrap();
    let p = b.producer::<(), u64>();
    p.send(Record::new("t", 0).partition(1)).unwrap();
    b.delete_topic("t").unwrap();
    let e = p.send(Record::new("t", 1)).unwrap_err();
    assert!(matches!(e.error(), Error::UnknownTopic { .. }), "{e:?}");
    b.create_topic::<String, String>("t", TopicConfig::new(1))
        .unwrap();
    let e = p.send(Record::new("t", 1)).unwrap_err();
    assert!(matches!(e.error(), Error::TypeMismatch { .. }), "{e:?}");
    b.delete_topic("t").unwrap();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    // The old cache had 2 partitions; the new topic has 1.
    let e = p.send(Record::new("t", 1).partition(1)).unwrap_err();
    assert!(
        matches!(e.error(), Error::PartitionOutOfRange { count: 1, .. }),
        "{e:?}"
    );
    assert_eq!(p.send(Record::new("t", 2)).unwrap().offset, 0);
    let e = p.partition("t", 1).unwrap_err();
    assert!(matches!(e, Error::PartitionOutOfRange { count: 1, .. }));
}

/// One producer shared by threads (it is `Sync`): a `send` waiting for room on a full
/// `Block` partition must not hold the others back: a `try_send` elsewhere returns at
/// once, a `send_timeout` within its timeout. (A bound of 60 s only turns a hang into a
/// failure; it measures nothing.)
#[test]
fn a_send_waiting_for_room_does_not_block_other_threads_of_the_same_producer() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("full", TopicConfig::new(1).records_in_memory(2))
        .unwrap();
    b.create_topic::<(), u64>("free", TopicConfig::new(1))
        .unwrap();
    {
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
            .unwrap();
        c.assign(&[tp("full", 0)]).unwrap();
    }
    let p = Arc::new(b.producer::<(), u64>());
    p.send(Record::new("full", 0)).unwrap();
    p.send(Record::new("full", 1)).unwrap();
    let waiting = {
        let p = Arc::clone(&p);
        std::thread::spawn(move || p.send(Record::new("full", 2)).map(|m| m.offset))
    };
    // Let it start waiting (if it has not yet, the test passes without testing much).
    std::thread::sleep(Duration::from_millis(50));
    let (tx, rx) = std::sync::mpsc::channel();
    let other = {
        let p = Arc::clone(&p);
        std::thread::spawn(move || {
            let a = p.try_send(Record::new("free", 7)).map(|m| m.offset);
            let b = p
                .send_timeout(Record::new("full", 8), Duration::from_millis(1))
                .map_err(|e| e.into_error());
            tx.send((a.map_err(|e| e.into_error()), b)).unwrap();
        })
    };
    let got = rx.recv_timeout(Duration::from_secs(60));
    b.delete_group("g").unwrap();
    let (a, timed) = got.expect("try_send/send_timeout were held behind another thread's send");
    assert_eq!(a.unwrap(), 0);
    assert!(matches!(timed, Err(Error::Timeout { .. })), "{timed:?}");
    other.join().unwrap();
    assert_eq!(waiting.join().unwrap().unwrap(), 2);
}

/// A header value that counts its drops.
struct Counted(Arc<std::sync::atomic::AtomicUsize>);

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        b"h"
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Records without headers are overwritten without being read back (their drop does
/// nothing); a record with headers among them still has its headers dropped when a
/// record without headers overwrites it, by `send_iter` runs and by single sends, on both
/// overflow policies.
#[test]
fn headers_overwritten_by_plain_records_are_dropped() {
    for overflow in [Overflow::DropOldest, Overflow::Block] {
        let (b, _) = broker();
        b.create_topic::<(), u64>(
            "t",
            TopicConfig::new(1).records_in_memory(4).overflow(overflow),
        )
        .unwrap();
        let p = b.producer::<(), u64>();
        let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let with_header = |v: u64| {
            Payload::new(v).header(
                "h",
                Some(bytes::Bytes::from_owner(Counted(Arc::clone(&drops)))),
            )
        };
        // Plain records first, so the ring has only ever held plain ones; then one with
        // headers; then enough plain records, by runs and one at a time, to overwrite it.
        p.partition("t", 0)
            .unwrap()
            .send_iter((0..3).map(Payload::new))
            .unwrap();
        p.partition("t", 0)
            .unwrap()
            .send_iter([with_header(3)])
            .unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        p.partition("t", 0)
            .unwrap()
            .send_iter((4..7).map(Payload::new))
            .unwrap();
        p.send(Record::new("t", 7).partition(0)).unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1, "{overflow:?}");
        // And once the ring has held headers, later overwrites still drop them.
        p.partition("t", 0)
            .unwrap()
            .send_iter([with_header(8)])
            .unwrap();
        p.partition("t", 0)
            .unwrap()
            .send_iter((9..13).map(Payload::new))
            .unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 2, "{overflow:?}");
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        assert_eq!(drain(&mut c), (9..13).map(|v| (v, v)).collect::<Vec<_>>());
    }
}

// ---------------------------------------------------------------------------------------
// Races through the public API (review8). Every test runs its body under a watchdog: a
// hang becomes a failure (the bound measures nothing).

/// Runs `f` on its own thread; fails the test if it has not finished within `secs`.
fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => t.join().unwrap(),
        // The body panicked: re-raise its panic.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung for {secs} s"),
    }
}

/// Records each producer thread sends in the race tests.
const PER_THREAD: u64 = if cfg!(debug_assertions) {
    2_000
} else {
    20_000
};

/// `(thread, sequence)` packed in one value.
fn tag(thread: u64, i: u64) -> u64 {
    (thread << 32) | i
}

/// `threads` threads running `send_mixed` to topic `t`: the even ones share one producer
/// (clones), the odd ones each make their own. Each returns how many it sent.
fn spawn_mixed_senders(b: &Broker, threads: u64) -> Vec<std::thread::JoinHandle<u64>> {
    let shared = b.producer::<(), u64>();
    (0..threads)
        .map(|t| {
            let p = if t % 2 == 0 {
                shared.clone()
            } else {
                b.producer::<(), u64>()
            };
            std::thread::spawn(move || send_mixed(&p, "t", t))
        })
        .collect()
}

/// Sends `PER_THREAD` tagged values to `topic`-0 from thread `t`, through `send`,
/// `send_batch` and `send_iter` in turn, every seventh record with a header (plain and
/// tagged runs interleave).
fn send_mixed(p: &logbus::producer::Producer<(), u64>, topic: &'static str, t: u64) -> u64 {
    let mut i = 0;
    let mut round = 0u64;
    while i < PER_THREAD {
        let n = (round % 5 + 1).min(PER_THREAD - i);
        let header = |v: u64| v % 7 == 0;
        match round % 3 {
            0 => {
                for j in i..i + n {
                    let mut r = Record::new(topic, tag(t, j)).partition(0);
                    if header(j) {
                        r = r.header("h", Some(bytes::Bytes::from_static(b"x")));
                    }
                    p.send(r).unwrap();
                }
            }
            1 => {
                let mut batch: Vec<_> = (i..i + n)
                    .map(|j| {
                        let r = Record::new(topic, tag(t, j)).partition(0);
                        if header(j) {
                            r.header("h", None)
                        } else {
                            r
                        }
                    })
                    .collect();
                assert_eq!(p.send_batch(&mut batch).unwrap(), n as usize);
            }
            _ => {
                let it = (i..i + n).map(|j| {
                    let v = Payload::new(tag(t, j));
                    if header(j) {
                        v.header("h", Some(bytes::Bytes::from_static(b"y")))
                    } else {
                        v
                    }
                });
                assert_eq!(
                    p.partition(topic, 0).unwrap().send_iter(it).unwrap(),
                    n as usize
                );
            }
        }
        i += n;
        round += 1;
    }
    i
}

/// Checks one partition's read: offsets dense from `first`, each thread's values in order
/// with no duplicates; returns the next sequence expected of each thread.
fn check_order(read: &[(u64, u64)], first: u64, threads: u64) -> Vec<u64> {
    let mut next = vec![0u64; threads as usize];
    for (k, &(offset, v)) in read.iter().enumerate() {
        assert_eq!(offset, first + k as u64, "offsets not dense");
        let (t, i) = ((v >> 32) as usize, v & 0xffff_ffff);
        assert_eq!(i, next[t], "thread {t}: out of order or duplicated");
        next[t] = i + 1;
    }
    next
}

/// Many producers (clones and separate producers) on one `Block` partition gated by a
/// group that reads and commits as it goes: no loss, no duplicate, order per producer,
/// dense offsets; headers on some records, so plain and tagged runs interleave.
#[test]
fn many_producers_on_one_blocking_partition_lose_nothing() {
    within(300, || {
        let (b, _) = broker();
        b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(8))
            .unwrap();
        let mut c = b
            .consumer::<(), u64>(
                ConsumerConfig::new()
                    .group_id("g")
                    .auto_offset_reset(OffsetReset::Earliest),
            )
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        let threads = 4u64;
        let senders = spawn_mixed_senders(&b, threads);
        let total = threads * PER_THREAD;
        let mut read = Vec::new();
        let mut v = Vec::new();
        let mut lent = 0u64;
        while (read.len() as u64) < total {
            // Alternate the copying and the lending read (the gate's lock-free run).
            if lent % 2 == 0 {
                c.poll_with(100, Duration::from_millis(10), |r| v.push(r.to_record()))
                    .unwrap();
                read.extend(v.drain(..).map(|r| (r.offset, r.value)));
            } else {
                c.poll_with(100, Duration::from_millis(10), |r| {
                    read.push((r.offset, *r.value))
                })
                .unwrap();
            }
            lent += 1;
            c.commit_sync().unwrap();
        }
        for s in senders {
            assert_eq!(s.join().unwrap(), PER_THREAD);
        }
        assert_eq!(read.len() as u64, total);
        let next = check_order(&read, 0, threads);
        assert!(next.iter().all(|&n| n == PER_THREAD), "{next:?}");
        assert_eq!(c.poll(Duration::ZERO).unwrap().len(), 0);
    });
}

/// Many producers on one `DropOldest` partition, read by a consumer without a group that
/// falls behind: what it reads is dense between gaps, and the gaps it is told of add up
/// exactly to what it missed.
#[test]
fn many_producers_on_one_dropping_partition_count_every_gap() {
    within(300, || {
        let (b, _) = broker();
        b.create_topic::<(), u64>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(16)
                .overflow(Overflow::DropOldest),
        )
        .unwrap();
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        let threads = 4u64;
        let senders = spawn_mixed_senders(&b, threads);
        let total = threads * PER_THREAD;
        let mut read: Vec<(u64, u64)> = Vec::new();
        let mut v = Vec::new();
        let mut k = 0u64;
        loop {
            let done = senders.iter().all(|s| s.is_finished());
            let n = if k % 2 == 0 {
                c.poll_with(7, Duration::from_millis(1), |r| v.push(r.to_record()))
                    .unwrap();
                let n = v.len();
                read.extend(v.drain(..).map(|r| (r.offset, r.value)));
                n
            } else {
                c.poll_with(7, Duration::from_millis(1), |r| {
                    read.push((r.offset, *r.value))
                })
                .unwrap()
            };
            k += 1;
            if done && n == 0 {
                break;
            }
        }
        for s in senders {
            s.join().unwrap();
        }
        // Gaps between consecutive reads, and before the first.
        let mut expected_gap = read.first().map_or(total, |r| r.0);
        let mut last_per_thread = vec![None::<u64>; threads as usize];
        for w in read.windows(2) {
            assert!(w[1].0 > w[0].0, "offsets went backwards: {w:?}");
            expected_gap += w[1].0 - w[0].0 - 1;
        }
        for &(_, v) in &read {
            let (t, i) = ((v >> 32) as usize, v & 0xffff_ffff);
            if let Some(prev) = last_per_thread[t] {
                assert!(i > prev, "thread {t}: {i} after {prev}");
            }
            last_per_thread[t] = Some(i);
        }
        assert_eq!(
            read.last().map(|r| r.0 + 1),
            Some(total),
            "the end was read"
        );
        assert_eq!(c.metrics().total_skipped(), expected_gap);
        assert_eq!(c.position(&tp("t", 0)).unwrap(), total);
    });
}

/// Copies of [`Tracked`] alive (only `every_value_is_dropped_exactly_once` makes them).
static LIVE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// A value that counts how many of its copies are alive (clones and drops).
struct Tracked(u64);

impl Tracked {
    fn new(v: u64) -> Self {
        LIVE.fetch_add(1, Ordering::SeqCst);
        Self(v)
    }
}

impl Clone for Tracked {
    fn clone(&self) -> Self {
        Self::new(self.0)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

impl logbus::Codec for Tracked {
    const TYPE_ID: &'static str = "test.Tracked";
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
    fn decode(bytes: &[u8]) -> logbus::Result<Self> {
        u64::decode(bytes).map(Tracked::new)
    }
}

/// Every value (and key) is dropped exactly once, however it leaves: overwritten by plain
/// or tagged runs from several producers, read by copying or lending, handed back by a
/// failed send, dropped with its deleted topic or with the broker.
#[test]
fn every_value_is_dropped_exactly_once() {
    within(300, || {
        for overflow in [Overflow::DropOldest, Overflow::Block] {
            let (b, _) = broker();
            for name in ["a", "b"] {
                b.create_topic::<Tracked, Tracked>(
                    name,
                    TopicConfig::new(2).records_in_memory(8).overflow(overflow),
                )
                .unwrap();
            }
            let mut c = b
                .consumer::<Tracked, Tracked>(
                    ConsumerConfig::new()
                        .group_id("g")
                        .auto_offset_reset(OffsetReset::Earliest),
                )
                .unwrap();
            c.assign(&[tp("a", 0), tp("a", 1), tp("b", 0)]).unwrap();
            let senders: Vec<_> = (0..3u64)
                .map(|t| {
                    let p = b.producer::<Tracked, Tracked>();
                    std::thread::spawn(move || {
                        for i in 0..PER_THREAD / 10 {
                            let topic = if i % 3 == 0 { "b" } else { "a" };
                            let mut r = Record::new(topic, Tracked::new(i))
                                .key(Tracked::new(t))
                                .partition((i % 2) as u32 & u32::from(topic == "a"));
                            if i % 5 == 0 {
                                r = r.header("h", Some(bytes::Bytes::from_static(b"z")));
                            }
                            if i % 4 == 0 {
                                let mut batch = vec![r, Record::new(topic, Tracked::new(i))];
                                // A full partition on `Block` hands the records back.
                                match p.send_batch(&mut batch) {
                                    Ok(_) => {}
                                    Err(e) => drop(e),
                                }
                            } else {
                                match p.send_timeout(r, Duration::from_millis(1)) {
                                    Ok(_) => {}
                                    Err(e) => drop(e.into_record()),
                                }
                            }
                        }
                    })
                })
                .collect();
            while !senders.iter().all(|s| s.is_finished()) {
                let got = c.poll(Duration::from_millis(1)).unwrap();
                drop(got);
                let mut n = 0;
                c.poll_with(10, Duration::ZERO, |r| n += r.value.0).unwrap();
                c.commit_sync().unwrap();
            }
            for s in senders {
                s.join().unwrap();
            }
            b.delete_topic("b").unwrap();
            drop(c);
            drop(b);
            assert_eq!(LIVE.load(Ordering::SeqCst), 0, "{overflow:?}");
        }
    });
}

/// A group member's lending read (`poll_with` on a `Block` topic holds the group's gate
/// for the run) whose closure panics: the gate is released, so a commit afterwards still
/// frees the producers.
#[test]
fn a_panicking_lending_read_releases_the_groups_gate() {
    within(60, || {
        let (b, _) = broker();
        b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))
            .unwrap();
        let mut c = b
            .consumer::<(), u64>(
                ConsumerConfig::new()
                    .group_id("g")
                    .auto_offset_reset(OffsetReset::Earliest),
            )
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        let p = b.producer::<(), u64>();
        for v in 0..4 {
            p.send(Record::new("t", v)).unwrap();
        }
        let r = catch_unwind(AssertUnwindSafe(|| {
            c.poll_with(4, Duration::ZERO, |r| {
                if r.offset == 2 {
                    panic!("user code");
                }
            })
        }));
        assert!(r.is_err());
        // As documented: the position is past the record the closure panicked on.
        c.commit_sync().unwrap();
        assert_eq!(c.committed(&tp("t", 0)).unwrap(), Some(3));
        // Committed at 3: the ring has room for three more, not a fourth.
        for v in 4..7 {
            let m = p
                .send_timeout(Record::new("t", v), Duration::from_secs(10))
                .unwrap();
            assert_eq!(m.offset, v);
        }
        let e = p.try_send(Record::new("t", 7)).unwrap_err();
        assert!(matches!(e.error(), Error::Full { .. }), "{e:?}");
        let mut seen = Vec::new();
        c.poll_with(10, Duration::ZERO, |r| seen.push(*r.value))
            .unwrap();
        assert_eq!(seen, [3, 4, 5, 6]);
        c.commit_sync().unwrap();
        p.try_send(Record::new("t", 7)).unwrap();
    });
}

/// A `poll_with` closure that sends to the partition being read (consume-transform-
/// produce into the same log): no lock held by the read blocks the send; with no room, a
/// `try_send` says the partition is full instead of waiting for the read.
#[test]
fn a_poll_with_closure_sends_to_the_partition_it_reads() {
    within(60, || {
        for (overflow, group) in [
            (Overflow::Block, true),
            (Overflow::Block, false),
            (Overflow::DropOldest, true),
        ] {
            let (b, _) = broker();
            b.create_topic::<(), u64>(
                "t",
                TopicConfig::new(1).records_in_memory(8).overflow(overflow),
            )
            .unwrap();
            let mut config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
            if group {
                config = config.group_id("g");
            }
            let mut c = b.consumer::<(), u64>(config).unwrap();
            c.assign(&[tp("t", 0)]).unwrap();
            let p = b.producer::<(), u64>();
            p.send(Record::new("t", 0)).unwrap();
            let mut seen = Vec::new();
            // Each record read sends its successor, until 5.
            for _ in 0..10 {
                c.poll_with(10, Duration::ZERO, |r| {
                    seen.push(*r.value);
                    if *r.value < 5 {
                        p.send(Record::new("t", *r.value + 1)).unwrap();
                    }
                })
                .unwrap();
                c.commit_sync().ok();
            }
            assert_eq!(seen, [0, 1, 2, 3, 4, 5], "{overflow:?} {group}");
            if overflow == Overflow::Block && group {
                // Fill the ring past the commit (at 6): a send from the closure that
                // would need the read's own commit gets `Full`, not a hang.
                for v in 6..14 {
                    p.send(Record::new("t", v)).unwrap();
                }
                let mut full = 0;
                c.poll_with(1, Duration::ZERO, |_| {
                    let e = p.try_send(Record::new("t", 99)).unwrap_err();
                    assert!(matches!(e.error(), Error::Full { .. }), "{e:?}");
                    full += 1;
                })
                .unwrap();
                assert_eq!(full, 1);
            }
        }
    });
}

/// `delete_topic` and re-creation under the same name while producers send and a
/// consumer polls: every failure is a typed error about the topic, nothing hangs, and the
/// last incarnation holds each producer's records in order, once, at dense offsets.
#[test]
fn delete_and_recreate_while_sending_and_polling() {
    within(300, || {
        let (b, _) = broker();
        let config = TopicConfig::new(1).records_in_memory(8);
        b.create_topic::<(), u64>("t", config).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = 3u64;
        let senders: Vec<_> = (0..threads)
            .map(|t| {
                let p = b.producer::<(), u64>();
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    let mut ok = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let r = if i % 2 == 0 {
                            p.send_timeout(Record::new("t", tag(t, i)), Duration::from_millis(5))
                                .map(|_| 1)
                                .map_err(|e| e.into_error())
                        } else {
                            p.partition("t", 0).and_then(|h| {
                                h.send_iter([Payload::new(tag(t, i))]).map_err(|e| e.error)
                            })
                        };
                        match r {
                            Ok(n) => ok += n as u64,
                            Err(
                                Error::UnknownTopic { .. }
                                | Error::Closed { .. }
                                | Error::Timeout { .. }
                                | Error::Full { .. },
                            ) => {}
                            Err(e) => panic!("unexpected: {e:?}"),
                        }
                        i += 1;
                    }
                    ok
                })
            })
            .collect();
        let poller = {
            let b = b.clone();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok(mut c) = b.consumer::<(), u64>(
                        ConsumerConfig::new()
                            .group_id("g")
                            .auto_offset_reset(OffsetReset::Earliest),
                    ) else {
                        continue;
                    };
                    if c.assign(&[tp("t", 0)]).is_err() {
                        continue;
                    }
                    for _ in 0..20 {
                        match c.poll(Duration::from_millis(1)) {
                            Ok(_) => {
                                let _ = c.commit_sync();
                            }
                            Err(Error::UnknownTopic { .. } | Error::Closed { .. }) => break,
                            Err(e) => panic!("unexpected: {e:?}"),
                        }
                    }
                }
            })
        };
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(2));
            b.delete_topic("t").unwrap();
            std::thread::sleep(Duration::from_millis(1));
            b.create_topic::<(), u64>("t", config).unwrap();
        }
        // The last incarnation, without gates: a fresh group-less read sees it all.
        let _ = b.delete_group("g");
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::SeqCst);
        for s in senders {
            s.join().unwrap();
        }
        poller.join().unwrap();
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        let read = drain(&mut c);
        let start = b.describe_topic("t").unwrap().partitions[0].log_start;
        let mut last = vec![None::<u64>; threads as usize];
        for (k, &(offset, v)) in read.iter().enumerate() {
            assert_eq!(offset, start + k as u64);
            let (t, i) = ((v >> 32) as usize, v & 0xffff_ffff);
            assert!(
                last[t].is_none_or(|l| i > l),
                "thread {t}: {i} after {last:?}"
            );
            last[t] = Some(i);
        }
    });
}

/// `add_partitions` while producers send unkeyed records (sticky, so new partitions get
/// used): every record a send acknowledged is read back at the partition and offset it was
/// given, once.
#[test]
fn add_partitions_while_sending_loses_nothing() {
    within(300, || {
        let (b, _) = broker();
        // Room for every record in each partition: nothing is overwritten.
        b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(1 << 15))
            .unwrap();
        let threads = 3u64;
        let n = PER_THREAD / 4;
        let senders: Vec<_> = (0..threads)
            .map(|t| {
                let p = b
                    .producer_with_config::<(), u64>(ProducerConfig::new().sticky_batch(3))
                    .unwrap();
                std::thread::spawn(move || {
                    let mut acked = Vec::new();
                    for i in 0..n {
                        if i % 3 == 0 {
                            let mut batch = vec![
                                Record::new("t", tag(t, i)),
                                Record::new("t", tag(t, i) | 1 << 31),
                            ];
                            p.send_batch(&mut batch).unwrap();
                        } else {
                            let m = p.send(Record::new("t", tag(t, i))).unwrap();
                            acked.push((m.partition, m.offset, tag(t, i)));
                        }
                    }
                    acked
                })
            })
            .collect();
        for total in 2..=8 {
            std::thread::sleep(Duration::from_millis(1));
            b.add_partitions("t", total).unwrap();
        }
        let acked: Vec<_> = senders
            .into_iter()
            .flat_map(|s| s.join().unwrap())
            .collect();
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&(0..8).map(|p| tp("t", p)).collect::<Vec<_>>())
            .unwrap();
        let mut all = std::collections::HashMap::new();
        let mut v = Vec::new();
        while c
            .poll_with(1000, Duration::ZERO, |r| v.push(r.to_record()))
            .unwrap()
            > 0
        {
            for r in v.drain(..) {
                assert!(all.insert((r.partition, r.offset), r.value).is_none());
            }
        }
        let sent = threads * (n + n.div_ceil(3));
        assert_eq!(all.len() as u64, sent);
        let values: std::collections::HashSet<_> = all.values().collect();
        assert_eq!(values.len() as u64, sent, "a value read twice");
        for (p, o, v) in acked {
            assert_eq!(all.get(&(p, o)), Some(&v), "acknowledged at {p}/{o}");
        }
        assert_eq!(c.metrics().total_skipped(), 0);
    });
}

/// A poll waiting for records wakes when its topic is deleted (an error or an empty
/// poll, not its whole timeout); a producer blocked on a gate wakes when the group is
/// deleted, and one blocked again wakes when the topic is.
#[test]
fn waiting_polls_and_sends_wake_on_deletes() {
    within(60, || {
        let (b, _) = broker();
        b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
            .unwrap();
        let poller = {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut c = b
                    .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
                    .unwrap();
                c.assign(&[tp("t", 0)]).unwrap();
                let started = std::time::Instant::now();
                let r = c.poll(Duration::from_secs(3600)).map(|r| r.len());
                (r, started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(30));
        b.delete_topic("t").unwrap();
        let (r, _) = poller.join().unwrap();
        assert!(
            matches!(
                r,
                Ok(0) | Err(Error::UnknownTopic { .. } | Error::Closed { .. })
            ),
            "{r:?}"
        );
        // Blocked on a group, freed by deleting it; blocked again by a second group,
        // freed by deleting the topic.
        b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(2))
            .unwrap();
        for g in ["g1", "g2"] {
            let mut c = b
                .consumer::<(), u64>(ConsumerConfig::new().group_id(g))
                .unwrap();
            c.assign(&[tp("t", 0)]).unwrap();
        }
        let p = b.producer::<(), u64>();
        let blocked = {
            let p = p.clone();
            std::thread::spawn(move || {
                (0..4)
                    .map(|v| {
                        p.send(Record::new("t", v))
                            .map(|m| m.offset)
                            .map_err(|e| e.into_error())
                    })
                    .collect::<Vec<_>>()
            })
        };
        std::thread::sleep(Duration::from_millis(30));
        b.delete_group("g1").unwrap();
        std::thread::sleep(Duration::from_millis(30));
        b.delete_topic("t").unwrap();
        let got = blocked.join().unwrap();
        assert_eq!(
            got[..2]
                .iter()
                .map(|r| *r.as_ref().unwrap())
                .collect::<Vec<_>>(),
            [0, 1]
        );
        assert!(
            matches!(
                got[2],
                Err(Error::Closed { .. } | Error::UnknownTopic { .. })
            ),
            "{got:?}"
        );
    });
}

/// Zero-sized values (a ring of nothing but offsets) and large ones, across wraps of the
/// ring, on both overflow policies: offsets stay dense and counts exact.
#[test]
fn zero_sized_and_large_values_keep_dense_offsets() {
    within(120, || {
        for overflow in [Overflow::DropOldest, Overflow::Block] {
            let (b, _) = broker();
            b.create_topic::<(), ()>(
                "unit",
                TopicConfig::new(1).records_in_memory(4).overflow(overflow),
            )
            .unwrap();
            b.create_topic::<(), Vec<u8>>(
                "big",
                TopicConfig::new(1).records_in_memory(2).overflow(overflow),
            )
            .unwrap();
            let mut c = b
                .consumer::<(), ()>(
                    ConsumerConfig::new()
                        .group_id("g")
                        .auto_offset_reset(OffsetReset::Earliest),
                )
                .unwrap();
            c.assign(&[tp("unit", 0)]).unwrap();
            let p = b.producer::<(), ()>();
            let mut offsets = Vec::new();
            for round in 0..10u64 {
                p.partition("unit", 0)
                    .unwrap()
                    .send_iter((0..3).map(|_| Payload::new(())))
                    .unwrap();
                if round % 2 == 0 {
                    p.send(Record::new("unit", ()).header("h", None)).unwrap();
                }
                c.poll_with(100, Duration::ZERO, |r| offsets.push(r.offset))
                    .unwrap();
                c.commit_sync().unwrap();
            }
            assert_eq!(offsets, (0..35).collect::<Vec<_>>(), "{overflow:?}");
            let big = b.producer::<(), Vec<u8>>();
            let mut cb = b
                .consumer::<(), Vec<u8>>(
                    ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest),
                )
                .unwrap();
            cb.assign(&[tp("big", 0)]).unwrap();
            for i in 0..6u8 {
                big.send(Record::new("big", vec![i; 4 << 20])).unwrap();
                let got = cb.poll(Duration::ZERO).unwrap();
                assert_eq!(got.len(), 1);
                let r = got.iter().next().unwrap();
                assert_eq!(
                    (r.offset, r.value.len(), r.value[0]),
                    (i as u64, 4 << 20, i)
                );
            }
        }
    });
}

/// Timestamps at the edges: 0 and `MAX_TIMESTAMP` (2^62 - 1) are valid (and found by a time
/// lookup), one below or above is a typed error handed back with its record, through every
/// send path and the lookup; `MAX_TIMESTAMP` does not expire by retention while the clock
/// is at it, and a clock near either end of `i64` does not overflow (records stamped by a
/// clock past `MAX_TIMESTAMP` get `MAX_TIMESTAMP`).
#[test]
fn timestamps_at_the_edges() {
    let clock = Arc::new(ManualClock::new(0));
    let b = Broker::builder().clock(clock.clone()).build().unwrap();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).retention(Duration::from_secs(1)))
        .unwrap();
    let p = b.producer::<(), u64>();
    assert_eq!(
        p.send(Record::new("t", 0).timestamp(0)).unwrap().timestamp,
        0
    );
    assert_eq!(
        p.send(Record::new("t", 1).timestamp(MAX_TIMESTAMP))
            .unwrap()
            .timestamp,
        MAX_TIMESTAMP
    );
    let bads = [-1, i64::MIN, MAX_TIMESTAMP + 1, i64::MAX, -(1 << 62)];
    for bad in bads {
        let e = p.send(Record::new("t", 9).timestamp(bad)).unwrap_err();
        assert!(
            matches!(e.error(), Error::InvalidTimestamp { timestamp, offset: None } if *timestamp == bad),
            "{e:?}"
        );
        assert_eq!(e.into_record().unwrap().value, 9);
        let mut batch = vec![Record::new("t", 8), Record::new("t", 9).timestamp(bad)];
        let e = p.send_batch(&mut batch).unwrap_err();
        assert!(matches!(e.error, Error::InvalidTimestamp { .. }), "{e:?}");
        let e = p
            .partition("t", 0)
            .unwrap()
            .send_iter([Payload::new(9).timestamp(bad)])
            .unwrap_err();
        assert!(matches!(e.error, Error::InvalidTimestamp { .. }), "{e:?}");
        let e = p
            .partition("t", 0)
            .unwrap()
            .send_slice(&[(bad, 9)])
            .unwrap_err();
        assert!(
            matches!(e.error, Error::InvalidTimestamp { timestamp, offset: None } if timestamp == bad),
            "{e:?}"
        );
        assert_eq!(e.sent, 0);
        if bad > MAX_TIMESTAMP {
            let c = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
            let e = c.offsets_for_times(&[(tp("t", 0), bad)]).unwrap_err();
            assert!(
                matches!(e, Error::InvalidTimestamp { timestamp, offset: None } if timestamp == bad),
                "{e:?}"
            );
            assert!(e.to_string().contains("0..=4611686018427387903"), "{e}");
        }
    }
    let c = b.consumer::<(), u64>(ConsumerConfig::new()).unwrap();
    let at = |ts: i64| c.offsets_for_times(&[(tp("t", 0), ts)]).unwrap()[&tp("t", 0)];
    assert_eq!(at(0).map(|o| o.offset), Some(0));
    assert_eq!(at(1).map(|o| o.offset), Some(1));
    assert_eq!(at(MAX_TIMESTAMP).map(|o| o.offset), Some(1));
    // A clock past the valid range stamps records with `MAX_TIMESTAMP`.
    clock.set_ms(i64::MAX);
    assert_eq!(
        p.send(Record::new("t", 5)).unwrap().timestamp,
        MAX_TIMESTAMP
    );
    // The clock at the far end: the record stamped 0 expired; retention expires a prefix
    // (Kafka's segments), so the two sent by the batches after the one stamped
    // `MAX_TIMESTAMP`, and the one stamped by the clock just now, stay.
    clock.set_ms(MAX_TIMESTAMP);
    let d = b.describe_topic("t").unwrap().partitions[0];
    let end = 3 + bads.len() as u64;
    assert_eq!(d.log_end, end);
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let got: Vec<u64> = c
        .poll(Duration::ZERO)
        .unwrap()
        .iter()
        .map(|r| r.value)
        .collect();
    let mut want = vec![1];
    want.extend(bads.map(|_| 8));
    want.push(5);
    assert_eq!(got, want);
    // And a clock at `i64::MAX` overflows nothing (every record is then older than the
    // retention).
    clock.set_ms(i64::MAX);
    assert_eq!(b.describe_topic("t").unwrap().partitions[0].log_end, end);
}

/// A consumer that seeks, pauses and resumes between polls while producers send: each
/// poll's records start at the position it had and are dense, and nothing is read from a
/// paused partition.
#[test]
fn seeking_and_pausing_between_polls_while_producers_send() {
    within(300, || {
        let (b, _) = broker();
        b.create_topic::<(), u64>(
            "t",
            TopicConfig::new(2)
                .records_in_memory(64)
                .overflow(Overflow::DropOldest),
        )
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let senders: Vec<_> = (0..2u32)
            .map(|part| {
                let p = b.producer::<(), u64>();
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        // The value is the offset it lands at (one producer per partition).
                        let m = p.send(Record::new("t", i).partition(part)).unwrap();
                        assert_eq!(m.offset, i);
                        i += 1;
                    }
                })
            })
            .collect();
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        let (t0, t1) = (tp("t", 0), tp("t", 1));
        c.assign(&[t0.clone(), t1.clone()]).unwrap();
        // Every seek below lands inside the log or below its tail: a seek past the log end
        // is out of range, and the `Earliest` reset then moves the position back (as
        // Kafka's), which is not what this test checks. A slow producer would get there.
        while c.end_offsets(std::slice::from_ref(&t0)).unwrap()[&t0] < 3000 {
            std::thread::yield_now();
        }
        let mut v = Vec::new();
        for k in 0..3000u64 {
            match k % 7 {
                0 => c.seek(&t0, k).unwrap(),
                1 => c.pause(std::slice::from_ref(&t1)).unwrap(),
                2 => c.seek_to_beginning(std::slice::from_ref(&t1)).unwrap(),
                3 => c.resume(std::slice::from_ref(&t1)).unwrap(),
                4 => c.seek_to_end(std::slice::from_ref(&t0)).unwrap(),
                _ => {}
            }
            let paused = c.paused().contains(&t1);
            let before = [c.position(&t0).unwrap(), c.position(&t1).unwrap()];
            let skipped = [c.metrics().skipped(&t0), c.metrics().skipped(&t1)];
            c.poll_with(50, Duration::ZERO, |r| v.push(r.to_record()))
                .unwrap();
            let mut next = before;
            for r in v.drain(..) {
                let p = r.partition as usize;
                assert!(!(paused && p == 1), "read from a paused partition");
                // Dense, unless the ring moved past the position (told as skipped).
                let gap = c.metrics().skipped([&t0, &t1][p]) - skipped[p];
                assert!(
                    r.offset >= next[p] && r.offset <= next[p] + gap,
                    "{r:?} {next:?}"
                );
                assert_eq!(r.value, r.offset);
                next[p] = r.offset + 1;
            }
        }
        stop.store(true, Ordering::SeqCst);
        for s in senders {
            s.join().unwrap();
        }
    });
}

/// Set while [`Brittle`] clones panic.
static BRITTLE: AtomicBool = AtomicBool::new(false);

/// A value whose `Clone` panics while [`BRITTLE`] is set.
struct Brittle(u64);

impl Clone for Brittle {
    fn clone(&self) -> Self {
        if BRITTLE.load(Ordering::SeqCst) {
            panic!("clone of {}", self.0);
        }
        Brittle(self.0)
    }
}

impl logbus::Codec for Brittle {
    const TYPE_ID: &'static str = "test.Brittle";
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
    fn decode(bytes: &[u8]) -> logbus::Result<Self> {
        u64::decode(bytes).map(Brittle)
    }
}

/// A value whose `Clone` panics while a consumer copies it out of the ring (a read holds
/// the slot's lock for the length of one clone): the panic reaches the consumer, and the
/// slot is not left locked, so producers overwrite it and readers read on.
#[test]
fn a_panicking_clone_during_a_read_leaves_no_slot_locked() {
    within(60, || {
        for (overflow, group) in [
            (Overflow::DropOldest, false),
            (Overflow::Block, false),
            (Overflow::Block, true),
        ] {
            let (b, _) = broker();
            b.create_topic::<(), Brittle>(
                "t",
                TopicConfig::new(1).records_in_memory(4).overflow(overflow),
            )
            .unwrap();
            let p = b.producer::<(), Brittle>();
            for v in 0..3 {
                p.send(Record::new("t", Brittle(v))).unwrap();
            }
            let mut config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
            if group {
                config = config.group_id("g");
            }
            let mut c = b.consumer::<(), Brittle>(config).unwrap();
            c.assign(&[tp("t", 0)]).unwrap();
            BRITTLE.store(true, Ordering::SeqCst);
            let r = catch_unwind(AssertUnwindSafe(|| c.poll(Duration::ZERO).map(|r| r.len())));
            BRITTLE.store(false, Ordering::SeqCst);
            assert!(r.is_err(), "{overflow:?} {group}: the clone did not panic");
            if group {
                c.commit_offsets(&[(tp("t", 0), 3)]).unwrap();
            }
            // Every slot is overwritten twice over: none may still be locked.
            for v in 3..11 {
                p.send_timeout(Record::new("t", Brittle(v)), Duration::from_secs(10))
                    .unwrap();
                if group {
                    c.commit_offsets(&[(tp("t", 0), v + 1)]).unwrap();
                }
            }
            c.seek(&tp("t", 0), 7).unwrap();
            let got: Vec<u64> = c
                .poll(Duration::ZERO)
                .unwrap()
                .iter()
                .map(|r| r.value.0)
                .collect();
            assert_eq!(got, [7, 8, 9, 10], "{overflow:?} {group}");
        }
    });
}

/// A key whose encoding panics (the default partitioner hashes its bytes, as Kafka's
/// does) in `send` and mid-`send_batch`: the producer stays usable and sends nothing
/// left over from the batch that panicked.
#[test]
fn a_key_codec_panicking_in_the_partitioner_leaves_no_leftovers() {
    #[derive(Clone)]
    struct Key(u64);
    impl logbus::Codec for Key {
        const TYPE_ID: &'static str = "test.Key";
        fn encode(&self, out: &mut Vec<u8>) {
            if self.0 == 13 {
                panic!("unlucky key");
            }
            self.0.encode(out)
        }
        fn decode(bytes: &[u8]) -> logbus::Result<Self> {
            u64::decode(bytes).map(Key)
        }
    }
    let (b, _) = broker();
    b.create_topic::<Key, u64>("t", TopicConfig::new(3))
        .unwrap();
    let p = b.producer::<Key, u64>();
    let r = catch_unwind(AssertUnwindSafe(|| {
        p.send(Record::new("t", 0).key(Key(13)))
    }));
    assert!(r.is_err());
    let mut batch: Vec<_> = (1..6)
        .map(|v| Record::new("t", v).key(Key(if v == 4 { 13 } else { v })))
        .collect();
    let r = catch_unwind(AssertUnwindSafe(|| p.send_batch(&mut batch)));
    assert!(r.is_err());
    let before: u64 = b
        .describe_topic("t")
        .unwrap()
        .partitions
        .iter()
        .map(|d| d.log_end)
        .sum();
    let m = p.send(Record::new("t", 100).key(Key(1))).unwrap();
    let mut batch = vec![Record::new("t", 101).key(Key(2))];
    p.send_batch(&mut batch).unwrap();
    let after: Vec<_> = b.describe_topic("t").unwrap().partitions;
    assert_eq!(after.iter().map(|d| d.log_end).sum::<u64>(), before + 2);
    let mut c = b
        .consumer::<Key, u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[tp("t", m.partition)]).unwrap();
    let got: Vec<u64> = c
        .poll(Duration::ZERO)
        .unwrap()
        .iter()
        .map(|r| r.value)
        .collect();
    assert!(got.contains(&100), "{got:?}");
    assert!(
        !got.contains(&0),
        "the panicking send's record was sent: {got:?}"
    );
}

/// `delete_group` racing members of the group that come and go (a member open refuses
/// the delete) while a producer waits for room on a `Block` topic the group gates: once
/// a delete succeeds with no member left, the producer is free; nothing hangs.
#[test]
fn delete_group_racing_members_that_come_and_go() {
    within(120, || {
        let (b, _) = broker();
        b.create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(4))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let members = {
            let b = b.clone();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let mut c = b
                        .consumer::<(), u64>(
                            ConsumerConfig::new()
                                .group_id("g")
                                .auto_offset_reset(OffsetReset::Earliest),
                        )
                        .unwrap();
                    c.assign(&[tp("t", 0)]).unwrap();
                    let mut last = None::<u64>;
                    c.poll_with(3, Duration::from_millis(1), |r| {
                        assert!(last.is_none_or(|l| r.offset == l + 1));
                        last = Some(r.offset);
                    })
                    .unwrap();
                    if rounds % 2 == 0 {
                        c.commit_sync().unwrap();
                    }
                    rounds += 1;
                }
                rounds
            })
        };
        let producer = {
            let p = b.producer::<(), u64>();
            std::thread::spawn(move || {
                for v in 0..2000 {
                    assert_eq!(p.send(Record::new("t", v)).unwrap().offset, v);
                }
            })
        };
        let mut deleted = 0;
        for _ in 0..200 {
            match b.delete_group("g") {
                Ok(()) => deleted += 1,
                Err(Error::GroupNotEmpty { .. } | Error::UnknownGroup { .. }) => {}
                Err(e) => panic!("{e:?}"),
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        stop.store(true, Ordering::SeqCst);
        assert!(members.join().unwrap() > 0);
        // No member is left: the next delete succeeds (or the group is gone already)
        // and frees the producer.
        match b.delete_group("g") {
            Ok(()) | Err(Error::UnknownGroup { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
        producer.join().unwrap();
        let _ = deleted;
    });
}
