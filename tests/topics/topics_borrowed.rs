//! The hot-loop forms of sending and polling: `PartitionProducer::send_iter` (records built straight
//! into one partition's run) and `Consumer::poll_with` (records lent to a closure), each
//! behaviour and error path, against what `send` and `poll` do.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Payload, Record};
use logbus::{Error, ManualClock};

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

/// Every record of `topic`'s partition `p`, through `poll_with`: (offset, timestamp, key,
/// value, headers).
type Seen = (u64, i64, Option<String>, u64, Vec<(String, Option<Bytes>)>);

fn read_all(b: &Broker, topic: &str, p: u32) -> Vec<Seen> {
    let mut c = b
        .consumer::<String, u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[tp(topic, p)]).unwrap();
    let mut out = Vec::new();
    loop {
        let n = c
            .poll_with(3, Duration::ZERO, |r| {
                assert_eq!((r.topic, r.partition), (topic, p));
                out.push((
                    r.offset,
                    r.timestamp,
                    r.key.cloned(),
                    *r.value,
                    r.headers.to_vec(),
                ));
            })
            .unwrap();
        if n == 0 {
            return out;
        }
    }
}

#[test]
fn send_iter_appends_in_order_with_keys_timestamps_and_headers() {
    let (b, _) = broker();
    b.create_topic::<String, u64>("t", TopicConfig::new(3))
        .unwrap();
    let p = b.producer::<String, u64>();
    let sent = p
        .partition("t", 2)
        .unwrap()
        .send_iter(vec![
            Payload::new(10).key("a".into()),
            Payload::new(11).timestamp(5),
            Payload::new(12).header("h", Some(Bytes::from_static(b"x"))),
        ])
        .unwrap();
    assert_eq!(sent, 3);
    // The key does not choose the partition: the call names it.
    let got = read_all(&b, "t", 2);
    assert_eq!(
        got,
        vec![
            (0, T0, Some("a".into()), 10, vec![]),
            (1, 5, None, 11, vec![]),
            (
                2,
                T0,
                None,
                12,
                vec![("h".into(), Some(Bytes::from_static(b"x")))]
            ),
        ]
    );
    assert!(read_all(&b, "t", 0).is_empty());
    // An empty iterator sends nothing, and still checks the destination.
    assert_eq!(
        p.partition("t", 1).unwrap().send_iter(Vec::new()).unwrap(),
        0
    );
    // More than one run's worth (runs of 1,024) keeps the order across runs.
    b.create_topic::<String, u64>("big", TopicConfig::new(1).records_in_memory(4096))
        .unwrap();
    assert_eq!(
        p.partition("big", 0)
            .unwrap()
            .send_iter((0..3000).map(Payload::new))
            .unwrap(),
        3000
    );
    let values: Vec<u64> = read_all(&b, "big", 0).iter().map(|s| s.3).collect();
    assert_eq!(values, (0..3000).collect::<Vec<_>>());
}

#[test]
fn partition_handle_errors_say_what_was_wrong_and_how_many_were_sent() {
    let (b, _) = broker();
    b.create_topic::<String, u64>("t", TopicConfig::new(2))
        .unwrap();
    let p = b.producer::<String, u64>();
    let e = p.partition("nope", 0).unwrap_err();
    assert!(matches!(e, Error::UnknownTopic { .. }));
    let e = p.partition("t", 2).unwrap_err();
    assert!(matches!(
        e,
        Error::PartitionOutOfRange {
            partition: 2,
            count: 2,
            ..
        }
    ));
    let wrong = b.producer::<(), u64>();
    let e = wrong.partition("t", 0).unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { .. }));
    // A bad timestamp: the records before it are sent, it and those after it are not, and
    // the iterator is not asked for more.
    let mut asked = 0;
    let records = (0..10u64).map(|v| {
        asked += 1;
        let p = Payload::new(v);
        if v == 2 {
            p.timestamp(-7)
        } else {
            p
        }
    });
    let e = p.partition("t", 1).unwrap().send_iter(records).unwrap_err();
    assert_eq!(e.sent, 2);
    assert!(matches!(
        e.error,
        Error::InvalidTimestamp {
            timestamp: -7,
            offset: None
        }
    ));
    assert_eq!(asked, 3);
    let values: Vec<u64> = read_all(&b, "t", 1).iter().map(|s| s.3).collect();
    assert_eq!(values, [0, 1]);
    // Converts into the crate error with `?`, and says what happened.
    assert_eq!(
        e.to_string(),
        format!(
            "sent 2 records, then: {}",
            Error::InvalidTimestamp {
                timestamp: -7,
                offset: None
            }
        )
    );
    let f =
        || -> logbus::Result<usize> { Ok(p.partition("nope", 0)?.send_iter([Payload::new(1)])?) };
    assert!(matches!(f(), Err(Error::UnknownTopic { .. })));
    // A deleted topic: unknown from then on (the producer's cache notices).
    let handle = p.partition("t", 0).unwrap();
    handle.send_iter([Payload::new(1)]).unwrap();
    b.delete_topic("t").unwrap();
    let e = handle.send_iter([Payload::new(2)]).unwrap_err();
    assert_eq!(e.sent, 0);
    assert!(matches!(e.error, Error::UnknownTopic { .. }));
    assert!(matches!(
        p.partition("t", 0),
        Err(Error::UnknownTopic { .. })
    ));
}

#[test]
fn send_iter_blocked_on_a_deleted_topic_reports_what_it_appended() {
    let (b, _) = broker();
    let config = TopicConfig::new(1)
        .records_in_memory(4)
        .overflow(Overflow::Block);
    b.create_topic::<String, u64>("t", config).unwrap();
    let mut c = b
        .consumer::<String, u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let p = b.producer::<String, u64>();
    let sender = std::thread::spawn(move || {
        p.partition("t", 0)
            .unwrap()
            .send_iter((0..10).map(Payload::new))
    });
    // The group never commits: the sender fills the 4 slots and waits.
    while b.describe_topic("t").unwrap().partitions[0].log_end < 4 {
        std::thread::yield_now();
    }
    c.close();
    b.delete_topic("t").unwrap();
    let e = sender.join().unwrap().unwrap_err();
    assert_eq!(e.sent, 4);
    assert!(matches!(e.error, Error::Closed { .. }), "{:?}", e.error);
}

#[test]
fn poll_with_lends_what_poll_returns_and_moves_the_position() {
    let (b, _) = broker();
    b.create_topic::<String, u64>("t", TopicConfig::new(2))
        .unwrap();
    let p = b.producer::<String, u64>();
    for v in 0..6u64 {
        p.send(
            Record::new("t", v)
                .partition((v % 2) as u32)
                .key(format!("k{v}"))
                .header("v", None),
        )
        .unwrap();
    }
    let consumer = || {
        let config = ConsumerConfig::new()
            .auto_offset_reset(OffsetReset::Earliest)
            .max_poll_records(4);
        let mut c = b.consumer::<String, u64>(config).unwrap();
        c.assign(&[tp("t", 0), tp("t", 1)]).unwrap();
        c
    };
    let (mut by_value, mut lent) = (consumer(), consumer());
    let mut seen = Vec::new();
    let n = lent
        .poll_with(4, Duration::ZERO, |r| {
            seen.push((
                r.partition,
                r.offset,
                r.timestamp,
                r.key.cloned(),
                *r.value,
                r.headers.len(),
            ));
        })
        .unwrap();
    let recs = by_value.poll(Duration::ZERO).unwrap().len();
    assert_eq!((n, recs), (4, 4));
    let mut expected = Vec::new();
    let mut by_value = consumer();
    for r in by_value.poll(Duration::ZERO).unwrap() {
        expected.push((
            r.partition,
            r.offset,
            r.timestamp,
            r.key,
            r.value,
            r.headers.len(),
        ));
    }
    assert_eq!(seen, expected);
    // Positions moved past exactly what was lent.
    let after: u64 = [0, 1]
        .iter()
        .map(|&q| lent.position(&tp("t", q)).unwrap())
        .sum();
    assert_eq!(after, 4);
    assert_eq!(lent.metrics().records_consumed(), 4);
    // `max` 0 and nothing left return 0 without calling the closure.
    assert_eq!(lent.poll_with(0, Duration::ZERO, |_| panic!()).unwrap(), 0);
    assert_eq!(lent.poll_with(10, Duration::ZERO, |_| ()).unwrap(), 2);
    assert_eq!(lent.poll_with(10, Duration::ZERO, |_| panic!()).unwrap(), 0);
}

#[test]
fn poll_with_errors_call_nothing_and_keep_the_position() {
    let (b, _) = broker();
    let config = TopicConfig::new(1)
        .records_in_memory(4)
        .overflow(Overflow::DropOldest);
    b.create_topic::<(), u64>("t", config).unwrap();
    let p = b.producer::<(), u64>();
    let t = tp("t", 0);
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::None))
        .unwrap();
    c.assign(std::slice::from_ref(&t)).unwrap();
    // No offset yet under `None`.
    assert!(matches!(
        c.poll_with(10, Duration::ZERO, |_| panic!("nothing to lend")),
        Err(Error::NoOffsetForPartition { .. })
    ));
    c.seek(&t, 0).unwrap();
    p.partition("t", 0)
        .unwrap()
        .send_iter((0..10).map(Payload::new))
        .unwrap();
    match c.poll_with(10, Duration::ZERO, |_| panic!("nothing to lend")) {
        Err(Error::OffsetOutOfRange {
            requested,
            start,
            end,
            ..
        }) => assert_eq!((requested, start, end), (0, 6, 10)),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.position(&t).unwrap(), 0);
    c.seek(&t, 7).unwrap();
    let mut values = Vec::new();
    assert_eq!(
        c.poll_with(10, Duration::ZERO, |r| values.push(*r.value))
            .unwrap(),
        3
    );
    assert_eq!(values, [7, 8, 9]);
    // A deleted topic.
    b.delete_topic("t").unwrap();
    assert!(matches!(
        c.poll_with(10, Duration::ZERO, |_| panic!()),
        Err(Error::UnknownTopic { .. })
    ));
}

#[test]
fn poll_with_may_use_the_broker_inside_the_closure() {
    // The closure runs with no lock held: producing to the same (full, drop-oldest)
    // partition and asking for the group's committed offsets from inside it cannot
    // deadlock.
    let (b, _) = broker();
    let config = TopicConfig::new(1)
        .records_in_memory(2)
        .overflow(Overflow::DropOldest);
    b.create_topic::<(), u64>("t", config).unwrap();
    let p = b.producer::<(), u64>();
    p.partition("t", 0)
        .unwrap()
        .send_iter((0..2).map(Payload::new))
        .unwrap();
    let mut c = b
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    c.commit_sync().unwrap();
    let mut other = b
        .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
        .unwrap();
    let mut lent = Vec::new();
    let n = c
        .poll_with(2, Duration::ZERO, |r| {
            lent.push(*r.value);
            // Overwrites the slots just read.
            p.partition("t", 0)
                .unwrap()
                .send_iter((100..102).map(Payload::new))
                .unwrap();
            assert_eq!(other.committed(&tp("t", 0)).unwrap(), Some(0));
            other.commit_offsets(&[(tp("t", 0), 0)]).unwrap();
        })
        .unwrap();
    assert_eq!((n, lent), (2, vec![0, 1]));
}

#[test]
fn send_iter_runs_the_iterator_with_no_lock_held() {
    // The iterator is user code: it may send through the same producer (and over more than
    // one run) without deadlocking on the producer's state.
    let (b, _) = broker();
    b.create_topic::<String, u64>("t", TopicConfig::new(2))
        .unwrap();
    let p = b.producer::<String, u64>();
    let records = (0..2000u64).map(|v| {
        if v % 500 == 0 {
            p.send(Record::new("t", v).partition(1)).unwrap();
        }
        Payload::new(v)
    });
    assert_eq!(
        p.partition("t", 0).unwrap().send_iter(records).unwrap(),
        2000
    );
    let values: Vec<u64> = read_all(&b, "t", 0).iter().map(|s| s.3).collect();
    assert_eq!(values, (0..2000).collect::<Vec<_>>());
    let side: Vec<u64> = read_all(&b, "t", 1).iter().map(|s| s.3).collect();
    assert_eq!(side, [0, 500, 1000, 1500]);
}

#[test]
fn poll_with_serves_a_subscribed_member() {
    // Group duties (joining, the assignment, auto-commit) run as in `poll`.
    let (b, _) = broker();
    b.create_topic::<String, u64>("t", TopicConfig::new(3))
        .unwrap();
    let p = b.producer::<String, u64>();
    for q in 0..3 {
        p.partition("t", q)
            .unwrap()
            .send_iter((0..4).map(|v| Payload::new(u64::from(q) * 10 + v)))
            .unwrap();
    }
    let mut c = b
        .consumer::<String, u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.subscribe(&["t"]).unwrap();
    let mut got = Vec::new();
    while got.len() < 12 {
        c.poll_with(100, Duration::from_millis(10), |r| {
            got.push((r.partition, r.offset, *r.value))
        })
        .unwrap();
    }
    got.sort_unstable();
    let expected: Vec<_> = (0..3u32)
        .flat_map(|q| (0..4u64).map(move |o| (q, o, u64::from(q) * 10 + o)))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(c.assignment().len(), 3);
    c.commit_sync().unwrap();
    assert_eq!(c.committed(&tp("t", 2)).unwrap(), Some(4));
}

#[test]
fn poll_with_on_a_block_topic_lends_in_place_and_holds_the_records_until_it_returns() {
    // A group member on a `Block` topic borrows the records in the partition's memory: a
    // commit past them by another member, made from inside the closure, does not let the
    // producer overwrite them until the poll returns; then it does.
    let (b, _) = broker();
    let config = TopicConfig::new(1)
        .records_in_memory(2)
        .overflow(Overflow::Block);
    b.create_topic::<(), u64>("t", config).unwrap();
    let member = |name| {
        let mut c = b
            .consumer::<(), u64>(
                ConsumerConfig::new()
                    .group_id(name)
                    .auto_offset_reset(OffsetReset::Earliest),
            )
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        c
    };
    let mut c = member("g");
    let mut other = member("g");
    let p = b.producer::<(), u64>();
    p.partition("t", 0)
        .unwrap()
        .send_iter((0..2).map(Payload::new))
        .unwrap();
    let mut lent = Vec::new();
    let n = c
        .poll_with(2, Duration::ZERO, |r| {
            other.commit_offsets(&[(tp("t", 0), 2)]).unwrap();
            let full = p
                .try_send(Record::new("t", 100))
                .err()
                .map(|e| matches!(e.error(), Error::Full { .. }));
            assert_eq!(full, Some(true), "the lent records are held");
            lent.push((r.offset, *r.value));
        })
        .unwrap();
    assert_eq!((n, lent), (2, vec![(0, 0), (1, 1)]));
    // The poll returned: the commit made meanwhile holds, and frees the ring.
    assert_eq!(c.committed(&tp("t", 0)).unwrap(), Some(2));
    p.try_send(Record::new("t", 2)).unwrap();
    p.try_send(Record::new("t", 3)).unwrap();
    let mut seen = Vec::new();
    c.poll_with(10, Duration::ZERO, |r| seen.push((r.offset, *r.value)))
        .unwrap();
    assert_eq!(seen, [(2, 2), (3, 3)]);
}

#[test]
fn poll_with_lending_in_place_moves_past_the_record_a_panicking_closure_was_given() {
    let (b, _) = broker();
    b.create_topic::<(), u64>("t", TopicConfig::new(1).overflow(Overflow::Block))
        .unwrap();
    let p = b.producer::<(), u64>();
    p.partition("t", 0)
        .unwrap()
        .send_iter((0..4).map(Payload::new))
        .unwrap();
    let mut c = b
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.poll_with(10, Duration::ZERO, |r| assert!(*r.value < 1, "boom"))
    }));
    assert!(panicked.is_err());
    assert_eq!(c.position(&tp("t", 0)).unwrap(), 2);
    let mut seen = Vec::new();
    c.poll_with(10, Duration::ZERO, |r| seen.push(*r.value))
        .unwrap();
    assert_eq!(seen, [2, 3]);
    // The group's hold went with the panicking read: a commit moves it.
    c.commit_sync().unwrap();
    assert_eq!(c.committed(&tp("t", 0)).unwrap(), Some(4));
}

/// What a lending poll of `K`-keyed records on a `Block` topic saw: (offset, timestamp,
/// key, value, header names).
type Lent<K> = Vec<(u64, i64, Option<K>, u64, Vec<String>)>;

/// Reads everything a group member can lend in place, in as few polls as it takes.
fn lend_all<K: Clone + Send + Sync + 'static>(c: &mut logbus::Consumer<K, u64>) -> Lent<K> {
    let mut out = Vec::new();
    while c
        .poll_with(1024, Duration::ZERO, |r| {
            let names = r.headers.iter().map(|(k, _)| k.clone()).collect();
            out.push((r.offset, r.timestamp, r.key.cloned(), *r.value, names));
        })
        .unwrap()
        > 0
    {}
    out
}

/// A lending poll reads a partition that never held a record with headers without asking
/// each entry's shape (the timestamp is the entry's word, masked); once one arrives it
/// asks again. Records with keys and headers interleaved with plain ones in one run must
/// read right both before and after, for a key type with bytes (`u64`) and without (`()`).
#[test]
fn poll_with_lending_in_place_reads_keys_and_headers_interleaved_with_plain_records() {
    fn run<K>(key: K)
    where
        K: Clone + Send + Sync + PartialEq + std::fmt::Debug + logbus::codec::Codec + 'static,
    {
        let (b, _) = broker();
        let config = TopicConfig::new(1)
            .records_in_memory(64)
            .overflow(Overflow::Block);
        b.create_topic::<K, u64>("t", config).unwrap();
        let mut c = b
            .consumer::<K, u64>(
                ConsumerConfig::new()
                    .group_id("g")
                    .auto_offset_reset(OffsetReset::Earliest),
            )
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        let p = b.producer::<K, u64>();
        let h = || Some(Bytes::from_static(b"x"));
        // No headers yet: keyed and plain records, one run.
        let first = vec![
            Payload::new(0).timestamp(0),
            Payload::new(1).key(key.clone()).timestamp(1),
            Payload::new(2),
            Payload::new(3).key(key.clone()).timestamp(MAX_TS),
        ];
        assert_eq!(p.partition("t", 0).unwrap().send_iter(first).unwrap(), 4);
        assert_eq!(
            lend_all(&mut c),
            vec![
                (0, 0, None, 0, vec![]),
                (1, 1, Some(key.clone()), 1, vec![]),
                (2, T0, None, 2, vec![]),
                (3, MAX_TS, Some(key.clone()), 3, vec![]),
            ]
        );
        c.commit_sync().unwrap();
        // Headers, with and without a key, between plain and keyed records in one run.
        let mixed = vec![
            Payload::new(4).timestamp(4),
            Payload::new(5).header("a", h()).timestamp(5),
            Payload::new(6).key(key.clone()).timestamp(6),
            Payload::new(7)
                .key(key.clone())
                .header("b", None)
                .header("c", h()),
            Payload::new(8).timestamp(8),
        ];
        assert_eq!(p.partition("t", 0).unwrap().send_iter(mixed).unwrap(), 5);
        // And a plain run after them.
        assert_eq!(
            p.partition("t", 0)
                .unwrap()
                .send_iter((9..12).map(Payload::new))
                .unwrap(),
            3
        );
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            lend_all(&mut c),
            vec![
                (4, 4, None, 4, vec![]),
                (5, 5, None, 5, names(&["a"])),
                (6, 6, Some(key.clone()), 6, vec![]),
                (7, T0, Some(key.clone()), 7, names(&["b", "c"])),
                (8, 8, None, 8, vec![]),
                (9, T0, None, 9, vec![]),
                (10, T0, None, 10, vec![]),
                (11, T0, None, 11, vec![]),
            ]
        );
        c.commit_sync().unwrap();
        // Re-read from the start of the log: the same records, after the headers came.
        c.seek(&tp("t", 0), 0).unwrap();
        let again = lend_all(&mut c);
        assert_eq!(again.len(), 12);
        assert_eq!(again[3], (3, MAX_TS, Some(key.clone()), 3, vec![]));
        assert_eq!(again[7], (7, T0, Some(key), 7, names(&["b", "c"])));
    }
    run(7u64);
    run(());
}

const MAX_TS: i64 = logbus::MAX_TIMESTAMP;

/// A partition handle taken before its topic was deleted and made again: with fewer
/// partitions, `PartitionOutOfRange` (nothing sent, through both methods); with other
/// types, `TypeMismatch`; with the same shape, it sends to the new topic from offset 0.
#[test]
fn a_partition_handle_follows_its_topic_deleted_and_made_again() {
    let (b, _) = broker();
    b.create_topic::<String, u64>("t", TopicConfig::new(3))
        .unwrap();
    let p = b.producer::<String, u64>();
    let high = p.partition("t", 2).unwrap();
    let low = p.partition("t", 0).unwrap();
    assert_eq!(high.send_slice(&[(1, 1), (2, 2)]).unwrap(), 2);
    b.delete_topic("t").unwrap();
    b.create_topic::<String, u64>("t", TopicConfig::new(1))
        .unwrap();
    let e = high.send_slice(&[(1, 1)]).unwrap_err();
    assert_eq!(e.sent, 0);
    assert!(
        matches!(
            e.error,
            Error::PartitionOutOfRange {
                partition: 2,
                count: 1,
                ..
            }
        ),
        "{}",
        e.error
    );
    let e = high.send_iter([Payload::new(3)]).unwrap_err();
    assert!(
        matches!(e.error, Error::PartitionOutOfRange { .. }),
        "{}",
        e.error
    );
    assert_eq!(low.send_slice(&[(1, 7)]).unwrap(), 1);
    assert_eq!(
        read_all(&b, "t", 0).iter().map(|s| s.3).collect::<Vec<_>>(),
        [7]
    );
    b.delete_topic("t").unwrap();
    b.create_topic::<(), u64>("t", TopicConfig::new(1)).unwrap();
    let e = low.send_iter([Payload::new(4)]).unwrap_err();
    assert!(matches!(e.error, Error::TypeMismatch { .. }), "{}", e.error);
}
