//! Defects found in the combining of replicated sends (`replica/set/combine.rs`): a send
//! queued for the lock's holder is appended by that holder, so what goes wrong with it
//! must reach its own sender, not the holder's.

use crate::replicas_adversarial_common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use logbus::codec::Codec;
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::PersistConfig;
use logbus::producer::{Acks, ProducerConfig, Record};
use logbus::TopicPartition;
use replicas_adversarial_common::*;

/// The value whose encoding panics.
const BOMB: u64 = u64::MAX;

/// A value whose codec panics on `BOMB` (a user codec with a bug).
#[derive(Clone, Debug)]
struct Bomb(u64);

impl Codec for Bomb {
    const TYPE_ID: &'static str = "test.CombineBomb";
    fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.0 != BOMB, "the codec panics on this value");
        self.0.encode(out)
    }
    fn decode(bytes: &[u8]) -> logbus::Result<Self> {
        u64::decode(bytes).map(Bomb)
    }
}

/// Two producers send to one persisted RF 3 partition, one of them only records whose
/// codec panics. The other's sends must never panic: before the fix, when the bomb's send
/// was queued and the other producer held the lock, the holder appended it and the
/// codec's panic unwound through the holder's send (whose own records were appended, so
/// a caller retrying after the panic duplicated them), while the bomb's sender appended
/// its send again itself.
#[test]
fn a_queued_send_whose_codec_panics_does_not_panic_the_holder() {
    let (_t, dirs) = tempdirs(3);
    let broker = open(&dirs);
    broker
        .create_topic::<(), Bomb>(T, config(1).persist(PersistConfig::new()))
        .unwrap();
    let config = ProducerConfig::new()
        .acks(Acks::All)
        .retries(10)
        .request_timeout(WAIT);
    let stop = Arc::new(AtomicBool::new(false));
    let bombs = Arc::new(AtomicU64::new(0));
    let bomber = {
        let p = broker.producer_with_config::<(), Bomb>(config).unwrap();
        let (stop, bombs) = (Arc::clone(&stop), Arc::clone(&bombs));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let sent = catch_unwind(AssertUnwindSafe(|| {
                    p.send(Record::new(T, Bomb(BOMB)).partition(0))
                }));
                assert!(sent.is_err(), "the bomb's own send panics");
                bombs.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let p = broker.producer_with_config::<(), Bomb>(config).unwrap();
    // The bomb's panics are expected: keep their messages out of the output.
    std::panic::set_hook(Box::new(|_| {}));
    let start = Instant::now();
    let mut sent = 0u64;
    let mut holder_panicked = None;
    let mut failed = None;
    while start.elapsed() < Duration::from_secs(1) && sent < 20_000 {
        match catch_unwind(AssertUnwindSafe(|| {
            p.send(Record::new(T, Bomb(sent)).partition(0))
        })) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                failed = Some((sent, e.to_string()));
                break;
            }
            Err(payload) => {
                let why = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()));
                holder_panicked = Some((sent, why));
                break;
            }
        }
        sent += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let bomber = bomber.join();
    let _ = std::panic::take_hook();
    bomber.unwrap();
    assert_eq!(failed, None, "a send of a good record failed");
    assert!(bombs.load(Ordering::Relaxed) > 0, "the bomb was never sent");
    assert_eq!(
        holder_panicked,
        None,
        "a send of a good record panicked (after {sent} sends and {} bombs)",
        bombs.load(Ordering::Relaxed)
    );
    assert_eq!(read_partition_bombs(&broker), (0..sent).collect::<Vec<_>>());
    broker.close().unwrap();
}

/// Every value in partition 0 below HW, in order (`read_partition` for `Bomb` values).
fn read_partition_bombs(broker: &logbus::Broker) -> Vec<u64> {
    let end = broker.describe_topic(T).unwrap().replicas[0].high_watermark;
    let config = ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest);
    let mut c = broker.consumer::<(), Bomb>(config).unwrap();
    let tp = TopicPartition::new(T, 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let mut out = Vec::new();
    while c.position(&tp).unwrap() < end {
        let batch = c.poll(WAIT).unwrap();
        assert!(!batch.is_empty(), "nothing read at {}", out.len());
        out.extend(batch.iter().map(|r| r.value.0));
    }
    out
}
