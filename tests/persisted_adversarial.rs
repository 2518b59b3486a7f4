//! Durable topics under attack through the public API: closing the broker under sends
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

/// After `Broker::close`, every send path fails with an error saying the broker is closed
/// (not that the topic was deleted: it was not), and hands the record back.
#[test]
fn sends_after_close_say_the_broker_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::open(dir.path()).unwrap();
    b.create_persisted_topic::<(), u64>("t", TopicConfig::new(1), PersistConfig::new())
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
    assert!(says_closed_broker(e.error()), "{e:?}");
    let e = p.send_to("t", 0, [Payload::new(5)]).unwrap_err();
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
    b.open_topic::<(), u64>("t").unwrap();
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
        let b = Broker::open(dir.path()).unwrap();
        b.create_persisted_topic::<(), u64>(
            "t",
            TopicConfig::new(1).records_in_memory(4),
            PersistConfig::new().flush(FlushPolicy::EveryBatch),
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
        b.open_topic::<(), u64>("t").unwrap();
        let mut c = b
            .consumer::<(), u64>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
            .unwrap();
        c.assign(&[tp("t", 0)]).unwrap();
        let mut read = std::collections::HashMap::new();
        let mut v = Vec::new();
        while c.poll_into(&mut v, 10_000, Duration::ZERO).unwrap() > 0 {
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
            let b = Broker::open(dir.path()).unwrap();
            b.create_persisted_topic::<(), Flaky>(
                "t",
                TopicConfig::new(1).records_in_memory(4),
                PersistConfig::new().flush(flush),
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
