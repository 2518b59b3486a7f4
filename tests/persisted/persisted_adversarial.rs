//! Persisted topics under attack through the public API: closing the broker under sends
//! (racing and blocked), and user codecs that panic on the writer thread. Nothing may
//! hang; every failure is a typed error that says what happened.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::{Payload, Record};
use logbus::{Codec, Error};

/// Runs `f` on its own thread; fails the test if it has not finished within `secs` (the
/// bound turns a hang into a failure; it measures nothing).
fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung for {secs} s"),
        _ => match t.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        },
    }
}

fn tp(topic: &str, p: u32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

/// Whether `e` says the broker was closed.
fn says_closed_broker(e: &Error) -> bool {
    matches!(e, Error::Closed { what } if what.contains("broker") && what.contains("closed"))
}

/// A broker on a new data directory (formatted here: its first open).
fn created(dir: &std::path::Path) -> Broker {
    Broker::builder().data_dir(dir).create(true).open().unwrap()
}

/// After `Broker::close`, every send path fails with an error saying the broker is closed
/// (not that the topic was deleted: it was not), and hands the record back.
#[test]
fn sends_after_close_say_the_broker_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let b = created(dir.path());
    b.create_topic::<(), u64>("t", TopicConfig::new(1).persist(PersistConfig::new()))
        .unwrap();
    let p = b.producer::<(), u64>();
    p.send(Record::new("t", 0)).unwrap();
    b.close().unwrap();
    let e = p.send(Record::new("t", 1)).unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    assert_eq!(e.into_record().unwrap().value, 1);
    let e = p.try_send(Record::new("t", 2)).unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    let mut batch = vec![Record::new("t", 3), Record::new("t", 4)];
    let e = p.send_batch(&mut batch).unwrap_err();
    assert!(says_closed_broker(&e.error), "{e:?}");
    let e = p
        .partition("t", 0)
        .unwrap()
        .send_iter([Payload::new(5)])
        .unwrap_err();
    assert!(says_closed_broker(&e.error), "{e:?}");
    assert_eq!(e.sent, 0);
    // A producer created after the close is told the same.
    let e = b
        .producer::<(), u64>()
        .send(Record::new("t", 6))
        .unwrap_err();
    assert!(says_closed_broker(e.error()), "{e:?}");
    // What was sent before the close is there after a reopen.
    drop(b);
    let b = Broker::open(dir.path()).unwrap();
    b.topic::<(), u64>("t").unwrap();
    let mut c = b
        .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let got: Vec<u64> = c
        .poll(Duration::from_secs(5))
        .unwrap()
        .iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(got, [0]);
    b.close().unwrap();
}

/// `Broker::close` while producers send to a persisted topic (each send waiting for its
/// fsync) and while one waits for room on a full in-memory `Block` topic of the same
/// broker: every send returns, acknowledged or with a typed error, and whatever was
/// acknowledged is on disk after a reopen, in order.
#[test]
fn close_during_racing_and_blocked_sends() {
    within(120, || {
        let dir = tempfile::tempdir().unwrap();
        let b = created(dir.path());
        b.create_topic::<(), u64>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(4)
                .persist(PersistConfig::new().flush(FlushPolicy::EveryBatch)),
        )
        .unwrap();
        b.create_topic::<(), u64>("mem", TopicConfig::new(1).records_in_memory(2))
            .unwrap();
        {
            let mut c = b
                .consumer::<(), u64>(ConsumerConfig::new().group_id("g"))
                .unwrap();
            c.assign(&[tp("mem", 0)]).unwrap();
        }
        let threads = 3u64;
        let senders: Vec<_> = (0..threads)
            .map(|t| {
                let p = b.producer::<(), u64>();
                std::thread::spawn(move || {
                    let mut acked = Vec::new();
                    for i in 0.. {
                        let v = t << 32 | i;
                        match p.send(Record::new("t", v)) {
                            Ok(m) => acked.push((m.offset, v)),
                            Err(e) => return (acked, e.into_error()),
                        }
                    }
                    unreachable!()
                })
            })
            .collect();
        let blocked = {
            let p = b.producer::<(), u64>();
            std::thread::spawn(move || {
                for v in 0..3 {
                    if let Err(e) = p.send(Record::new("mem", v)) {
                        return Some(e.into_error());
                    }
                }
                None
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        b.close().unwrap();
        let mut acked = Vec::new();
        for s in senders {
            let (a, e) = s.join().unwrap();
            assert!(says_closed_broker(&e), "{e:?}");
            acked.extend(a);
        }
        let e = blocked.join().unwrap();
        assert!(e.as_ref().is_some_and(says_closed_broker), "{e:?}");
        drop(b);
        let b = Broker::open(dir.path()).unwrap();
        b.topic::<(), u64>("t").unwrap();
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        let mut read = std::collections::HashMap::new();
        let mut v = Vec::new();
        while c
            .poll_with(10_000, Duration::ZERO, |r| v.push(r.to_record()))
            .unwrap()
            > 0
        {
            read.extend(v.drain(..).map(|r| (r.offset, r.value)));
        }
        for (o, v) in acked {
            assert_eq!(read.get(&o), Some(&v), "acknowledged at {o}, lost");
        }
        b.close().unwrap();
    });
}

/// A value whose encoding panics the second time it is encoded: once at send (the size
/// check, on the sender's thread), again on the partition's writer thread.
#[derive(Debug, Default)]
struct Flaky {
    v: u64,
    encodes: AtomicU32,
}

impl Clone for Flaky {
    fn clone(&self) -> Self {
        Self {
            v: self.v,
            encodes: AtomicU32::new(self.encodes.load(Ordering::SeqCst)),
        }
    }
}

impl Codec for Flaky {
    const TYPE_ID: &'static str = "test.Flaky";
    fn encode(&self, out: &mut Vec<u8>) {
        if self.v == 13 && self.encodes.fetch_add(1, Ordering::SeqCst) == 1 {
            panic!("a user codec panics on the writer thread");
        }
        self.v.encode(out)
    }
    fn decode(bytes: &[u8]) -> logbus::Result<Self> {
        u64::decode(bytes).map(|v| Flaky {
            v,
            encodes: AtomicU32::new(0),
        })
    }
}

/// A codec panicking on the writer thread takes the partition offline (typed errors from
/// then on), instead of killing the writer silently and leaving sends waiting for an
/// acknowledgement that never comes; the broker still closes.
#[test]
fn a_codec_panicking_on_the_writer_takes_the_partition_offline() {
    within(120, || {
        for flush in [FlushPolicy::EveryBatch, FlushPolicy::Os] {
            let dir = tempfile::tempdir().unwrap();
            let b = created(dir.path());
            b.create_topic::<(), Flaky>(
                "t",
                TopicConfig::new(1)
                    .records_in_memory(4)
                    .persist(PersistConfig::new().flush(flush)),
            )
            .unwrap();
            let p = b.producer::<(), Flaky>();
            let flaky = |v| Flaky {
                v,
                encodes: AtomicU32::new(0),
            };
            p.send(Record::new("t", flaky(1))).unwrap();
            let _ = p.send(Record::new("t", flaky(13)));
            // Enough sends to fill the ring: the writer no longer frees it.
            let e = (0..10)
                .find_map(|v| p.send(Record::new("t", flaky(v))).err())
                .expect("sends to a partition whose writer died succeed");
            assert!(
                matches!(e.error(), Error::PartitionOffline { .. }),
                "{flush:?}: {e:?}"
            );
            let _ = b.close();
        }
    });
}

/// Zero-sized values and timestamps at the edges (0, `MAX_TIMESTAMP`) on a persisted topic,
/// read from disk after a reopen: dense offsets, every timestamp intact, and the time
/// index finds both ends.
#[test]
fn zero_sized_values_and_edge_timestamps_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1000u64;
    {
        let b = created(dir.path());
        b.create_topic::<(), ()>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(16)
                .persist(PersistConfig::new().segment_bytes(4096)),
        )
        .unwrap();
        let p = b.producer::<(), ()>();
        for i in 0..n {
            let ts = match i {
                0 => 0,
                i if i == n - 1 => logbus::MAX_TIMESTAMP,
                i => i as i64,
            };
            let mut r = Record::new("t", ()).timestamp(ts);
            if i % 3 == 0 {
                r = r.header("h", None);
            }
            assert_eq!(p.send(r).unwrap().offset, i);
        }
        b.close().unwrap();
    }
    let b = Broker::open(dir.path()).unwrap();
    b.topic::<(), ()>("t").unwrap();
    let mut c = b
        .consumer::<(), ()>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let mut v = Vec::new();
    let mut read = Vec::new();
    while c
        .poll_with(100, Duration::ZERO, |r| v.push(r.to_record()))
        .unwrap()
        > 0
    {
        read.extend(
            v.drain(..)
                .map(|r| (r.offset, r.timestamp, r.headers.len())),
        );
    }
    assert_eq!(read.len() as u64, n);
    for (k, &(o, ts, h)) in read.iter().enumerate() {
        let k = k as u64;
        assert_eq!(o, k);
        assert_eq!(h, usize::from(k % 3 == 0), "headers at {k}");
        let want = if k == n - 1 {
            logbus::MAX_TIMESTAMP
        } else {
            k as i64
        };
        assert_eq!(ts, want, "timestamp at {k}");
    }
    let at = |ts: i64| c.offsets_for_times(&[(tp("t", 0), ts)]).unwrap()[&tp("t", 0)];
    assert_eq!(at(0).map(|o| o.offset), Some(0));
    assert_eq!(at(500).map(|o| o.offset), Some(500));
    assert_eq!(at(logbus::MAX_TIMESTAMP).map(|o| o.offset), Some(n - 1));
    b.close().unwrap();
}

/// A record on disk whose timestamp lies past `MAX_TIMESTAMP` (a segment written by Kafka
/// or edited) is reported by the read as a typed error naming its offset and timestamp,
/// never stored with its timestamp cut short; the record before it is read.
#[test]
fn a_stored_timestamp_past_the_valid_range_is_a_typed_error() {
    use logbus::storage::record_batch::crc32c;
    let dir = tempfile::tempdir().unwrap();
    {
        let b = created(dir.path());
        b.create_topic::<(), u64>("t", TopicConfig::new(1).persist(PersistConfig::new()))
            .unwrap();
        let p = b.producer::<(), u64>();
        // Two batches: the second one's timestamps are edited below.
        p.send(Record::new("t", 1).timestamp(5)).unwrap();
        b.fsync_and_checkpoint().unwrap();
        p.send(Record::new("t", 2).timestamp(6)).unwrap();
        b.close().unwrap();
    }
    let log = dir.path().join("t-0").join("00000000000000000000.log");
    let mut bytes = std::fs::read(&log).unwrap();
    // The second batch: past the first (its length at bytes 8..12, plus 12).
    let first = 12 + u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
    assert!(bytes.len() > first, "two batches on disk");
    let bad = 1i64 << 62;
    let batch = &mut bytes[first..];
    // baseTimestamp (27..35) and maxTimestamp (35..43); the CRC covers bytes 21 on.
    batch[27..35].copy_from_slice(&bad.to_be_bytes());
    batch[35..43].copy_from_slice(&bad.to_be_bytes());
    let crc = crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    std::fs::write(&log, &bytes).unwrap();

    let b = Broker::open(dir.path()).unwrap();
    b.topic::<(), u64>("t").unwrap();
    // One record a poll: a read that meets the bad record fails whole.
    let mut c = b
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(1),
        )
        .unwrap();
    c.assign(&[tp("t", 0)]).unwrap();
    let mut got = Vec::new();
    let err = loop {
        match c.poll(Duration::ZERO) {
            Ok(records) if records.is_empty() => panic!("the bad record was skipped"),
            Ok(records) => got.extend(records.iter().map(|r| (r.offset, r.timestamp))),
            Err(e) => break e,
        }
    };
    assert_eq!(got, [(0, 5)]);
    assert!(
        matches!(
            err,
            Error::InvalidTimestamp {
                offset: Some(1),
                timestamp
            } if timestamp == bad
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("0..=4611686018427387903"), "{err}");
    b.close().unwrap();
}

/// A persisted topic deleted and re-created under its name while producers send to it:
/// every failure is a typed error about the topic, nothing hangs, and after a reopen the
/// last incarnation's files hold what its acknowledged sends put there.
#[test]
fn delete_and_recreate_a_persisted_topic_while_sending() {
    within(300, || {
        let dir = tempfile::tempdir().unwrap();
        let b = created(dir.path());
        let create = |b: &Broker| {
            b.create_topic::<(), u64>(
                "t",
                TopicConfig::new(2)
                    .records_in_memory(8)
                    .persist(PersistConfig::new().flush(FlushPolicy::Os)),
            )
            .unwrap()
        };
        create(&b);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let senders: Vec<_> = (0..2u64)
            .map(|t| {
                let p = b.producer::<(), u64>();
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        match p.send(Record::new("t", t << 32 | i).partition(t as u32)) {
                            Ok(_) => {}
                            Err(e) => match e.error() {
                                // `TopicNotOpen`: while `create_topic` with a persisted config runs, between
                                // its metadata and its registration with the broker.
                                Error::UnknownTopic { .. }
                                | Error::Closed { .. }
                                | Error::TopicNotOpen { .. } => {}
                                other => panic!("unexpected: {other:?}"),
                            },
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(3));
            b.delete_topic("t").unwrap();
            create(&b);
        }
        std::thread::sleep(Duration::from_millis(3));
        stop.store(true, Ordering::SeqCst);
        for s in senders {
            s.join().unwrap();
        }
        let ends: Vec<u64> = b
            .describe_topic("t")
            .unwrap()
            .partitions
            .iter()
            .map(|d| d.log_end)
            .collect();
        b.close().unwrap();
        drop(b);
        let b = Broker::open(dir.path()).unwrap();
        b.topic::<(), u64>("t").unwrap();
        for (p, &end) in ends.iter().enumerate() {
            let mut c = b
                .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
                .unwrap();
            c.assign(&[tp("t", p as u32)]).unwrap();
            let mut read = Vec::new();
            let mut v = Vec::new();
            while c
                .poll_with(10_000, Duration::ZERO, |r| v.push(r.to_record()))
                .unwrap()
                > 0
            {
                read.extend(v.drain(..).map(|r| (r.offset, r.value)));
            }
            assert_eq!(read.len() as u64, end, "partition {p}");
            let mut last = None;
            for (k, &(o, v)) in read.iter().enumerate() {
                assert_eq!(o, k as u64);
                assert_eq!(v >> 32, p as u64, "a record of the other partition");
                assert!(last.is_none_or(|l| v > l), "out of order at {o}");
                last = Some(v);
            }
        }
        b.close().unwrap();
    });
}

/// `topic` racing `create_topic` with a persisted config of the same name (a service that opens
/// the topic if it exists while another thread creates it), and a send racing both: the
/// create starts the one set of partition writers (the opener waits for it, and finds the
/// topic open); the racing send finds no topic (`UnknownTopic`) or sends, never one to open
/// (`TopicNotOpen`); sends then succeed and the log verifies after close.
#[test]
fn topic_racing_create_starts_one_writer_per_partition() {
    within(300, || {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let b = created(dir.path());
            let opener = {
                let b = b.clone();
                std::thread::spawn(move || loop {
                    // Before the create registers the topic, it is unknown; after, open.
                    match b.topic::<(), u64>("t") {
                        Ok(_) => return,
                        Err(Error::UnknownTopic { .. }) => {}
                        Err(e) => panic!("round {round}: {e:?}"),
                    }
                    std::thread::yield_now();
                })
            };
            // A send racing the create finds no topic, or sends: never one to open.
            let sender = {
                let p = b.producer::<(), u64>();
                std::thread::spawn(move || loop {
                    match p.send(Record::new("t", 1000).partition(0)) {
                        Ok(_) => return,
                        Err(e) if matches!(e.error(), Error::UnknownTopic { .. }) => {}
                        Err(e) => panic!("round {round}: {e:?}"),
                    }
                    std::thread::yield_now();
                })
            };
            // The opener never starts the topic first (its writers would be a second set).
            b.create_topic::<(), u64>(
                "t",
                TopicConfig::new(2).persist(PersistConfig::new().flush(FlushPolicy::Os)),
            )
            .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
            opener.join().unwrap();
            sender.join().unwrap();
            let p = b.producer::<(), u64>();
            for v in 0..100 {
                p.send(Record::new("t", v).partition((v % 2) as u32))
                    .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
            }
            b.close().unwrap_or_else(|e| panic!("round {round}: {e:?}"));
            drop(b);
            let b = Broker::open(dir.path()).unwrap();
            b.topic::<(), u64>("t").unwrap();
            let ends: Vec<u64> = b
                .describe_topic("t")
                .unwrap()
                .partitions
                .iter()
                .map(|d| d.log_end)
                .collect();
            assert_eq!(ends, [51, 50], "round {round}");
            b.close().unwrap();
        }
    });
}
