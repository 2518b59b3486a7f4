//! Adversarial cases for topics, producers and consumers: boundary values and user code
//! that panics. Nothing may abort, wedge the broker, lose or duplicate a record.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Partitioner, Payload, ProducerConfig, Record};
use logbus::{Error, ManualClock};

const T0: i64 = 1_700_000_000_000;

fn broker() -> (Broker, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    (Broker::builder().clock(clock.clone()).build(), clock)
}

fn tp(topic: &str, p: u32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn drain(c: &mut logbus::consumer::Consumer<(), u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut v = Vec::new();
    while c.poll_into(&mut v, 1000, Duration::ZERO).unwrap() > 0 {
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
                Err(Error::PartitionOffsetOutOfRange {
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
    assert!(
        matches!(e, Error::PartitionOffsetOutOfRange { .. }),
        "{e:?}"
    );
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
    assert_eq!(p.send_to("t", 0, std::iter::empty()).unwrap(), 0);
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
    assert!(matches!(e.error(), Error::Timeout), "{e:?}");
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
    assert_eq!(at(i64::MAX), None);
    assert!(matches!(
        c.offsets_for_times(&[(tp("t", 0), -1)]),
        Err(Error::InvalidTimestamp { timestamp: -1 })
    ));
}

#[test]
fn send_to_with_a_bad_timestamp_mid_stream_sends_those_before() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let p = b.producer::<(), u64>();
    let it = (0..5).map(|v| Payload::new(v).timestamp(if v == 3 { -1 } else { v as i64 }));
    let e = p.send_to("t", 0, it).unwrap_err();
    assert_eq!(e.sent, 3);
    assert!(matches!(e.error, Error::InvalidTimestamp { timestamp: -1 }));
    assert_eq!(b.describe_topic("t").unwrap().partitions[0].log_end, 3);
    let e = p
        .send_to("t", 1, std::iter::once(Payload::new(0)))
        .unwrap_err();
    assert!(matches!(
        e.error,
        Error::PartitionOutOfRange { count: 1, .. }
    ));
    let e = p
        .send_to("nope", 0, std::iter::once(Payload::new(0)))
        .unwrap_err();
    assert!(matches!(e.error, Error::UnknownTopic { .. }));
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
    let e = p
        .send_to("t", 1, std::iter::once(Payload::new(3)))
        .unwrap_err();
    assert!(matches!(
        e.error,
        Error::PartitionOutOfRange { count: 1, .. }
    ));
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
    assert!(matches!(timed, Err(Error::Timeout)), "{timed:?}");
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
/// record without headers overwrites it, by `send_to` runs and by single sends, on both
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
        p.send_to("t", 0, (0..3).map(Payload::new)).unwrap();
        p.send_to("t", 0, [with_header(3)]).unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        p.send_to("t", 0, (4..7).map(Payload::new)).unwrap();
        p.send(Record::new("t", 7).partition(0)).unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1, "{overflow:?}");
        // And once the ring has held headers, later overwrites still drop them.
        p.send_to("t", 0, [with_header(8)]).unwrap();
        p.send_to("t", 0, (9..13).map(Payload::new)).unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 2, "{overflow:?}");
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        assert_eq!(drain(&mut c), (9..13).map(|v| (v, v)).collect::<Vec<_>>());
    }
}
