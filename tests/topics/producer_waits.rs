//! A batch send (`send_batch`, `PartitionProducer::send_iter`) waiting for room on a full `Block` partition, on
//! a producer shared by threads (it is `Sync`): the wait must not hold the producer's lock,
//! so the other threads' `try_send` returns and their `send_timeout` keeps its deadline;
//! the waiting batch itself ends when the group goes (everything sent, in order) or when the
//! topic is deleted (`Closed`, the records not appended handed back).
//!
//! The 60 s bounds only turn a hang into a failure; they measure nothing.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Payload, Producer, Record};
use logbus::Error;

const HANG: Duration = Duration::from_secs(60);

/// A broker with `full` (1 partition, room for 2 records, gated by group `g`, which never
/// commits) and `free` (no gate).
fn gated() -> (Broker, Arc<Producer<(), u64>>) {
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
    let p = Arc::new(b.producer::<(), u64>());
    (b, p)
}

/// Waits until `full` holds 2 records: the batch sent in the background is then waiting for
/// room (before the fix, inside the producer's lock).
fn until_full(b: &Broker) {
    let start = std::time::Instant::now();
    while b.describe_topic("full").unwrap().partitions[0].log_end < 2 {
        assert!(
            start.elapsed() < HANG,
            "the batch never filled the partition"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

/// From another thread of the same producer: a `try_send` to `free` and a `send_timeout`
/// to `full`, each with its answer; `None` if they were held behind the waiting batch.
fn others(p: &Arc<Producer<(), u64>>) -> Option<(Result<u64, Error>, Result<u64, Error>)> {
    let (tx, rx) = mpsc::channel();
    let p = Arc::clone(p);
    thread::spawn(move || {
        let free = p
            .try_send(Record::new("free", 7))
            .map(|m| m.offset)
            .map_err(|e| e.into_error());
        let timed = p
            .send_timeout(Record::new("full", 8), Duration::from_millis(1))
            .map(|m| m.offset)
            .map_err(|e| e.into_error());
        let _ = tx.send((free, timed));
    });
    rx.recv_timeout(HANG).ok()
}

fn values(b: &Broker) -> Vec<u64> {
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[TopicPartition::new("full", 0)]).unwrap();
    let mut out = Vec::new();
    c.poll_with(100, Duration::ZERO, |r| out.push(r.to_record()))
        .unwrap();
    out.into_iter().map(|r| r.value).collect()
}

#[test]
fn a_waiting_send_batch_does_not_hold_back_other_threads_of_the_producer() {
    let (b, p) = gated();
    let waiting = {
        let p = Arc::clone(&p);
        thread::spawn(move || {
            let mut batch: Vec<_> = (0..4).map(|v| Record::new("full", v)).collect();
            p.send_batch(&mut batch).map_err(|e| e.error)
        })
    };
    until_full(&b);
    let got = others(&p);
    // Lets the batch finish either way (the gate goes with the group).
    b.delete_group("g").unwrap();
    let (free, timed) = got.expect("try_send/send_timeout were held behind send_batch's wait");
    assert_eq!(free.unwrap(), 0);
    assert!(matches!(timed, Err(Error::Timeout { .. })), "{timed:?}");
    assert_eq!(waiting.join().unwrap().unwrap(), 4);
    // The ring keeps the last 2 (no gate any more): the batch's last two, in order.
    assert_eq!(values(&b), [2, 3]);
    assert_eq!(b.describe_topic("full").unwrap().partitions[0].log_end, 4);
}

#[test]
fn a_waiting_send_iter_does_not_hold_back_other_threads_of_the_producer() {
    let (b, p) = gated();
    let waiting = {
        let p = Arc::clone(&p);
        thread::spawn(move || {
            p.partition("full", 0)
                .unwrap()
                .send_iter((0..5).map(Payload::new))
        })
    };
    until_full(&b);
    let got = others(&p);
    b.delete_group("g").unwrap();
    let (free, timed) = got.expect("try_send/send_timeout were held behind send_iter's wait");
    assert_eq!(free.unwrap(), 0);
    assert!(matches!(timed, Err(Error::Timeout { .. })), "{timed:?}");
    assert_eq!(waiting.join().unwrap().unwrap(), 5);
    assert_eq!(values(&b), [3, 4]);
}

#[test]
fn a_send_batch_waiting_for_room_ends_when_the_topic_is_deleted() {
    let (b, p) = gated();
    let waiting = {
        let p = Arc::clone(&p);
        thread::spawn(move || {
            let mut batch: Vec<_> = (0..4)
                .map(|v| Record::new("full", v))
                .chain([Record::new("free", 9)])
                .collect();
            let e = p.send_batch(&mut batch).unwrap_err();
            (e, batch)
        })
    };
    until_full(&b);
    b.delete_topic("full").unwrap();
    let (e, rest) = waiting.join().unwrap();
    assert!(matches!(e.error, Error::Closed { .. }), "{e:?}");
    assert_eq!(e.sent, 2);
    // The records not appended stay, in order, the one that failed first.
    assert_eq!(rest[0].value, 2);
    let rest = &rest[1..];
    let rest: Vec<_> = rest
        .iter()
        .map(|r| (r.topic.to_string(), r.value))
        .collect();
    assert_eq!(rest, [("full".to_string(), 3), ("free".to_string(), 9)]);
    // The producer still works, and its cache follows a topic made again.
    b.create_topic::<(), u64>("full", TopicConfig::new(1))
        .unwrap();
    let mut again = vec![Record::new("full", 10), Record::new("free", 11)];
    assert_eq!(p.send_batch(&mut again).unwrap(), 2);
}

#[test]
fn a_send_iter_waiting_for_room_ends_when_the_topic_is_deleted() {
    let (b, p) = gated();
    let waiting = {
        let p = Arc::clone(&p);
        thread::spawn(move || {
            p.partition("full", 0)
                .unwrap()
                .send_iter((0..5).map(Payload::new))
        })
    };
    until_full(&b);
    b.delete_topic("full").unwrap();
    let e = waiting.join().unwrap().unwrap_err();
    assert_eq!(e.sent, 2);
    assert!(matches!(e.error, Error::Closed { .. }), "{e:?}");
}

/// A batch whose runs switch partitions while another thread of the producer changes the
/// producer's topic cache (a send to a topic made meanwhile, a topic deleted and made
/// again): after each wait the batch finds its topic again, so no record lands in the
/// wrong topic or partition.
#[test]
fn a_batch_finds_its_topic_again_after_waiting() {
    let (b, p) = gated();
    b.create_topic::<(), u64>("other", TopicConfig::new(2))
        .unwrap();
    let waiting = {
        let p = Arc::clone(&p);
        thread::spawn(move || {
            let mut batch: Vec<_> = (0..3)
                .map(|v| Record::new("full", v))
                .chain((10..14).map(|v| Record::new("other", v).partition((v % 2) as u32)))
                .collect();
            p.send_batch(&mut batch).map_err(|e| e.error)
        })
    };
    until_full(&b);
    // Reorders the shared producer's cache: "free" first cached now, "other" deleted and
    // made again with 2 partitions (the old cache entry is dropped on its next use).
    let (tx, rx) = mpsc::channel();
    {
        let (b, p) = (b.clone(), Arc::clone(&p));
        thread::spawn(move || {
            p.send(Record::new("free", 1)).unwrap();
            b.delete_topic("other").unwrap();
            b.create_topic::<(), u64>("other", TopicConfig::new(2))
                .unwrap();
            p.send(Record::new("other", 99).partition(0)).unwrap();
            let _ = tx.send(());
        });
    }
    let done = rx.recv_timeout(HANG);
    b.delete_group("g").unwrap();
    done.expect("sends were held behind send_batch's wait");
    assert_eq!(waiting.join().unwrap().unwrap(), 7);
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[
        TopicPartition::new("other", 0),
        TopicPartition::new("other", 1),
    ])
    .unwrap();
    let mut out = Vec::new();
    c.poll_with(100, Duration::ZERO, |r| out.push(r.to_record()))
        .unwrap();
    let mut got: Vec<_> = out.iter().map(|r| (r.partition, r.value)).collect();
    got.sort();
    assert_eq!(got, [(0, 10), (0, 12), (0, 99), (1, 11), (1, 13)]);
}

/// Each single send says, in its own error type, why it did not send and hands the record
/// back: `try_send` on a full partition (`is_full`), `send_timeout` and `send_deadline`
/// whose deadline passes (`is_timeout`), and any of them for an unknown topic.
#[test]
fn each_single_send_hands_the_record_back_with_its_own_reason() {
    let (b, p) = gated();
    p.partition("full", 0)
        .unwrap()
        .send_slice(&[(1, 1), (2, 2)])
        .unwrap();
    let e = p.try_send(Record::new("full", 3)).unwrap_err();
    assert!(e.is_full(), "{e}");
    assert!(
        matches!(e.error(), Error::Full { topic, partition: 0 } if topic == "full"),
        "{e}"
    );
    assert_eq!(e.into_record().map(|r| r.value), Some(3));
    let e = p
        .send_timeout(Record::new("full", 4), Duration::from_millis(5))
        .unwrap_err();
    assert!(e.is_timeout(), "{e}");
    assert_eq!(e.into_record().map(|r| r.value), Some(4));
    let deadline = std::time::Instant::now() + Duration::from_millis(5);
    let e = p
        .send_deadline(Record::new("full", 5), deadline)
        .unwrap_err();
    assert!(e.is_timeout(), "{e}");
    assert!(std::time::Instant::now() >= deadline);
    assert_eq!(e.into_record().map(|r| r.value), Some(5));
    // A deadline already past still sends where there is room.
    let past = std::time::Instant::now();
    assert_eq!(
        p.send_deadline(Record::new("free", 6), past)
            .unwrap()
            .offset,
        0
    );
    // Not full, not a timeout: the reason says what was wrong.
    let e = p.try_send(Record::new("nope", 7)).unwrap_err();
    assert!(!e.is_full());
    assert!(matches!(e.error(), Error::UnknownTopic { .. }), "{e}");
    let e = p
        .send_timeout(
            Record::new("free", 8).partition(4),
            Duration::from_millis(5),
        )
        .unwrap_err();
    assert!(!e.is_timeout());
    assert!(
        matches!(
            e.error(),
            Error::PartitionOutOfRange {
                partition: 4,
                count: 1,
                ..
            }
        ),
        "{e}"
    );
    // Every one converts into the crate's error with `?`, and into `ProduceError`.
    let f = || -> logbus::Result<()> {
        p.try_send(Record::new("full", 9))?;
        Ok(())
    };
    assert!(matches!(f(), Err(Error::Full { .. })));
    let e: logbus::producer::ProduceError<(), u64> =
        p.try_send(Record::new("full", 10)).unwrap_err().into();
    assert_eq!(e.into_record().map(|r| r.value), Some(10));
    b.delete_group("g").unwrap();
}
