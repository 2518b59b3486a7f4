//! In-memory compacted topics (`TopicConfig::compacted`) and tables
//! (`Broker::table`).
//!
//! - A model (proptest): sends of a few keys, tombstones (`None` values, Kafka's null) and
//!   empty values (values, not tombstones) among them, through a ring of 4 that
//!   overwrites, with a manual clock moving between them; a replay from offset 0 must read
//!   exactly what the model keeps (each key's latest record the ring let go, less tombstones
//!   past `delete_retention`, then the ring), and a table must equal the model's live keys.
//! - Stress: producers overwrite keys while readers replay from 0 again and again; every
//!   replay reads offsets in increasing order (no record twice), each key's values in
//!   send order, and at least every key's latest value as of the replay's start.
//! - Tables: catch-up, tombstones, reading one's own writes, a timeout, a persisted topic
//!   after a restart, keyless records counted.
//! - Bad input: keyless sends, policies that do not compact, a compacting policy through
//!   `create_topic`, the key bound and its counted drops.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use logbus::broker::{Broker, CleanupPolicy, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::ConsumerConfig;
use logbus::consumer::IsolationLevel::ReadUncommitted;
use logbus::persist::PersistConfig;
use logbus::producer::Record;
use logbus::{Clock as _, Error, ManualClock};
use proptest::prelude::*;

use crate::replay_common::replay;

const RING: u64 = 4;
const DELETE_RETENTION_MS: i64 = 50;

fn compact(partitions: u32, ring: usize) -> TopicConfig {
    TopicConfig::new(partitions)
        .records_in_memory(ring)
        .overflow(Overflow::DropOldest)
        .cleanup_policy(CleanupPolicy::Compact)
        .delete_retention(Duration::from_millis(DELETE_RETENTION_MS as u64))
}

#[derive(Debug, Clone)]
enum Op {
    /// A record of key `k`: a value (0 is an empty one), or a tombstone (`None`).
    Send(u8, Option<u16>),
    /// The clock moves on, in milliseconds.
    Advance(u8),
    /// A replay from 0 and a table, checked against the model.
    Check,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..6, proptest::option::weighted(0.8, prop_oneof![Just(0u16), any::<u16>()]))
            .prop_map(|(k, v)| Op::Send(k, v)),
        2 => (0u8..40).prop_map(Op::Advance),
        1 => Just(Op::Check),
    ]
}

/// A value: `None` is Kafka's null, a tombstone; `Some` of empty bytes is a value.
type Value = Option<Bytes>;

/// What the model keeps: each key's latest record the ring let go, with when it went.
#[derive(Default)]
struct Model {
    /// Every record sent: `(key, value)`, by offset.
    history: Vec<(String, Value)>,
    /// The kept records: offset -> (key, value, when the ring let it go).
    kept: BTreeMap<u64, (String, Value, i64)>,
    by_key: HashMap<String, u64>,
}

impl Model {
    fn send(&mut self, key: String, value: Value, now: i64) {
        self.history.push((key, value));
        let end = self.history.len() as u64;
        if end > RING {
            let gone = end - RING - 1;
            let (key, value) = self.history[gone as usize].clone();
            if let Some(old) = self.by_key.insert(key.clone(), gone) {
                self.kept.remove(&old);
            }
            self.kept.insert(gone, (key, value, now));
        }
    }

    /// What a replay reads now.
    fn expected(&mut self, now: i64) -> Vec<(u64, String, Value)> {
        let expired: Vec<u64> = self
            .kept
            .iter()
            .filter(|(_, (_, v, at))| v.is_none() && now - at >= DELETE_RETENTION_MS)
            .map(|(&o, _)| o)
            .collect();
        for o in expired {
            let (key, _, _) = self.kept.remove(&o).unwrap();
            self.by_key.remove(&key);
        }
        let end = self.history.len() as u64;
        let ring = end.saturating_sub(RING)..end;
        let mut out: Vec<_> = self
            .kept
            .iter()
            .map(|(&o, (k, v, _))| (o, k.clone(), v.clone()))
            .collect();
        out.extend(ring.map(|o| {
            let (k, v) = &self.history[o as usize];
            (o, k.clone(), v.clone())
        }));
        out
    }

    /// The live keys: each key's latest value, unless it is a tombstone.
    fn live(&self) -> HashMap<String, Value> {
        let mut m = HashMap::new();
        for (k, v) in &self.history {
            if v.is_none() {
                m.remove(k);
            } else {
                m.insert(k.clone(), v.clone());
            }
        }
        m
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(debug_assertions) { 200 } else { 1000 },
        ..ProptestConfig::default()
    })]

    /// The in-memory compacted topic against the model (module docs), on a `DropOldest`
    /// topic and on a `Block` one with no group (it overwrites too).
    #[test]
    fn compacted_topic_replays_what_the_model_keeps(
        block in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let clock = Arc::new(ManualClock::new(1_000));
        let broker = Broker::builder().clock(clock.clone()).build().unwrap();
        let overflow = if block { Overflow::Block } else { Overflow::DropOldest };
        broker
            .create_topic::<String, Value>("c", compact(1, RING as usize).overflow(overflow).compacted())
            .unwrap();
        let producer = broker.producer::<String, Value>();
        let mut model = Model::default();
        for op in ops.into_iter().chain([Op::Check]) {
            match op {
                Op::Send(k, v) => {
                    let key = format!("k{k}");
                    let value = v.map(|v| if v == 0 { Bytes::new() } else { Bytes::from(v.to_string()) });
                    producer
                        .send(Record::new("c", value.clone()).key(key.clone()).timestamp(clock.now_ms()))
                        .unwrap();
                    model.send(key, value, clock.now_ms());
                }
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms.into())),
                Op::Check => {
                    let got = replay::<Value>(&broker, "c", 0, ReadUncommitted);
                    prop_assert_eq!(got, model.expected(clock.now_ms()));
                    let mut table = broker.table::<String, Value>("c").unwrap();
                    table.catch_up(Duration::from_secs(10)).unwrap();
                    prop_assert_eq!(table.as_map(), &model.live());
                }
            }
        }
    }
}

/// Stress (module docs): 4 producers, each with its own 200 keys over 3 partitions of a
/// 64-record ring, and 3 readers replaying from 0 while they send.
#[test]
fn replays_racing_overwrites_read_every_latest_value_once_in_order() {
    const PRODUCERS: u64 = 4;
    const KEYS: u64 = 200;
    const PARTITIONS: u32 = 3;
    let sends: u64 = if cfg!(debug_assertions) {
        30_000
    } else {
        200_000
    };
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, u64>("s", compact(PARTITIONS, 64).compacted())
        .unwrap();
    // What each producer has sent (its next sequence): the values below it are in the log.
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..PRODUCERS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (broker, sent) = (broker.clone(), Arc::clone(&sent));
            thread::spawn(move || {
                let producer = broker.producer::<String, u64>();
                for seq in 0..sends {
                    let key = format!("p{p}-k{}", seq % KEYS);
                    producer.send(Record::new("s", seq).key(key)).unwrap();
                    sent[p as usize].store(seq + 1, Ordering::Release);
                }
            })
        })
        .collect();
    let check = {
        let (broker, sent) = (broker.clone(), Arc::clone(&sent));
        move || -> u64 {
            // The latest value of every key sent before the replay starts.
            let floor: Vec<u64> = sent.iter().map(|s| s.load(Ordering::Acquire)).collect();
            let mut latest: HashMap<String, u64> = HashMap::new();
            let mut read = 0;
            for p in 0..PARTITIONS {
                let mut last_offset = None;
                for (offset, key, value) in replay::<u64>(&broker, "s", p, ReadUncommitted) {
                    read += 1;
                    assert!(
                        last_offset < Some(offset),
                        "offset {offset} after {last_offset:?}"
                    );
                    last_offset = Some(offset);
                    let old = latest.insert(key.clone(), value);
                    assert!(old < Some(value), "{key}: {value} after {old:?}");
                }
            }
            for (p, &n) in floor.iter().enumerate() {
                for k in 0..KEYS.min(n) {
                    let want = (n - 1) - ((n - 1 + KEYS - k) % KEYS);
                    let key = format!("p{p}-k{k}");
                    let got = latest.get(&key).copied();
                    assert!(
                        got >= Some(want),
                        "{key}: latest {got:?}, sent {want} before"
                    );
                }
            }
            read
        }
    };
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (check, done) = (check.clone(), Arc::clone(&done));
            thread::spawn(move || {
                let mut replays = 0;
                while !done.load(Ordering::Acquire) {
                    check();
                    replays += 1;
                }
                replays
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    // At the end: every key's last value, and no more than the keys plus the rings.
    let read = check();
    assert!(
        read <= PRODUCERS * KEYS + u64::from(PARTITIONS) * 64,
        "{read} records"
    );
    let mut table = broker.table::<String, u64>("s").unwrap();
    table.catch_up(Duration::from_secs(10)).unwrap();
    assert_eq!(table.len() as u64, PRODUCERS * KEYS);
    for p in 0..PRODUCERS {
        for k in 0..KEYS {
            let want = sends - KEYS + k;
            assert_eq!(table.get(&format!("p{p}-k{k}")), Some(&want));
        }
    }
}

/// A table catches up, drops tombstoned keys, reads its own writes with `wait_for`, and
/// says `Timeout` (typed, with the topic and partition) for an offset never written.
#[test]
fn table_catches_up_applies_tombstones_and_reads_its_own_writes() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, Option<Bytes>>("t", compact(2, 8).compacted())
        .unwrap();
    let producer = broker.producer::<String, Option<Bytes>>();
    for n in 0..1_000u32 {
        let key = format!("k{}", n % 20);
        producer
            .send(Record::new("t", Some(Bytes::from(n.to_string()))).key(key))
            .unwrap();
    }
    for k in [3, 7] {
        producer
            .send(Record::new("t", None).key(format!("k{k}")))
            .unwrap();
    }
    // An empty value is a value: its key stays.
    producer
        .send(Record::new("t", Some(Bytes::new())).key("k5".to_string()))
        .unwrap();
    let mut table = broker.table::<String, Option<Bytes>>("t").unwrap();
    assert!(table.is_empty(), "nothing read before a catch-up");
    table.catch_up(Duration::from_secs(10)).unwrap();
    assert_eq!(table.len(), 18);
    assert!(table.get(&"k3".to_string()).is_none());
    assert_eq!(table.get(&"k5".to_string()), Some(&Some(Bytes::new())));
    assert_eq!(
        table.get(&"k19".to_string()),
        Some(&Some(Bytes::from("999")))
    );
    let m = table.metrics();
    assert!(
        m.records_read < 1_003,
        "{m:?}: compacted, fewer than the history"
    );
    assert!(m.tombstones >= 2, "{m:?}");
    // Its own write, then the table waits for it.
    let sent = producer
        .send(Record::new("t", Some(Bytes::from_static(b"new"))).key("k3".to_string()))
        .unwrap();
    table
        .wait_for(
            &[(sent.partition, sent.offset + 1)],
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(
        table.get(&"k3".to_string()),
        Some(&Some(Bytes::from("new")))
    );
    assert_eq!(table.update().unwrap(), 0, "nothing new");
    let err = table
        .wait_for(&[(0, 1 << 40)], Duration::from_millis(30))
        .unwrap_err();
    assert!(
        matches!(err, Error::Timeout { topic: Some(ref t), partition: Some(0), .. } if t == "t"),
        "{err}"
    );
    let err = table.wait_for(&[(9, 1)], Duration::ZERO).unwrap_err();
    assert!(
        matches!(err, Error::PartitionOutOfRange { partition: 9, .. }),
        "{err}"
    );
}

/// A table of a plain (uncompacted) topic: every record read, keyless ones counted, not
/// applied.
#[test]
fn table_of_a_plain_topic_counts_records_without_a_key() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, u64>("plain", TopicConfig::new(1).records_in_memory(64))
        .unwrap();
    let producer = broker.producer::<String, u64>();
    for n in 0..10u64 {
        let r = Record::new("plain", n);
        let r = if n % 2 == 0 {
            r.key(format!("k{}", n % 4))
        } else {
            r
        };
        producer.send(r).unwrap();
    }
    let mut table = broker.table::<String, u64>("plain").unwrap();
    table.catch_up(Duration::from_secs(10)).unwrap();
    assert_eq!(table.metrics().records_read, 10);
    assert_eq!(table.metrics().unkeyed, 5);
    assert_eq!(table.len(), 2);
    assert_eq!(table.get(&"k0".to_string()), Some(&8));
    assert_eq!(table.get(&"k2".to_string()), Some(&6));
}

/// A persisted topic's table after a restart: read from disk, then from the ring; a `None`
/// value (null on disk) removed its key, an empty one is a value.
#[test]
fn table_restores_a_persisted_topic_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .open()
            .unwrap()
    };
    {
        let broker = open();
        let config = TopicConfig::new(2)
            .records_in_memory(16)
            .cleanup_policy(CleanupPolicy::Compact);
        broker
            .create_topic::<String, Option<String>>("state", config.persist(PersistConfig::new()))
            .unwrap();
        let producer = broker.producer::<String, Option<String>>();
        for n in 0..500 {
            producer
                .send(Record::new("state", Some(n.to_string())).key(format!("k{}", n % 25)))
                .unwrap();
        }
        producer
            .send(Record::new("state", None).key("k0".to_string()))
            .unwrap();
        producer
            .send(Record::new("state", Some(String::new())).key("k1".to_string()))
            .unwrap();
        broker.close().unwrap();
    }
    let broker = open();
    let mut table = broker.table::<String, Option<String>>("state").unwrap();
    table.catch_up(Duration::from_secs(10)).unwrap();
    assert_eq!(table.len(), 24);
    assert_eq!(
        table.get(&"k24".to_string()),
        Some(&Some("499".to_string()))
    );
    assert_eq!(table.get(&"k1".to_string()), Some(&Some(String::new())));
    assert!(table.get(&"k0".to_string()).is_none());
    broker.close().unwrap();
}

/// Bad input: keyless sends to an in-memory compacted topic are refused (a single send and
/// a batch); a replicated topic and a key bound of 0 are refused for a compacted config;
/// `create_topic` refuses a plain in-memory config whose policy compacts and says where to
/// go. `compacted` sets `Compact` on a config that does not compact and keeps
/// `CompactAndDelete`.
#[test]
fn bad_input_to_compacted_topics_gets_typed_errors() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, u64>("c", compact(1, 4).compacted())
        .unwrap();
    let producer = broker.producer::<String, u64>();
    let err = producer.send(Record::new("c", 1)).unwrap_err();
    assert!(
        matches!(err.error(), Error::KeyRequired { topic } if topic == "c"),
        "{err}"
    );
    let mut batch = vec![
        Record::new("c", 1).key("a".to_string()),
        Record::new("c", 2),
    ];
    let err = producer.send_batch(&mut batch).unwrap_err();
    assert!(matches!(err.error, Error::KeyRequired { .. }), "{err}");
    assert_eq!(
        TopicConfig::new(1).compacted().topic_config().cleanup(),
        CleanupPolicy::Compact
    );
    let both = TopicConfig::new(1).cleanup_policy(CleanupPolicy::CompactAndDelete);
    assert_eq!(
        both.compacted().topic_config().cleanup(),
        CleanupPolicy::CompactAndDelete
    );
    let err = broker
        .create_topic::<String, u64>("d", compact(1, 4).replication_factor(2).compacted())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                name: "replication_factor",
                ..
            }
        ),
        "{err}"
    );
    let err = broker
        .create_topic::<String, u64>("d", compact(1, 4).max_compacted_keys(0).compacted())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                name: "max_compacted_keys",
                ..
            }
        ),
        "{err}"
    );
    let err = broker
        .create_topic::<String, u64>("d", compact(1, 4))
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidConfig { name: "cleanup_policy", ref valid, .. } if valid.contains("TopicConfig::compacted")),
        "{err}"
    );
}

/// Beyond `max_compacted_keys`, records of new keys the ring lets go are not kept and are
/// counted where `describe_topic` shows them; keys already kept go on being replaced.
#[test]
fn keys_beyond_the_bound_are_counted_not_kept() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, u64>("b", compact(1, 4).max_compacted_keys(3).compacted())
        .unwrap();
    let producer = broker.producer::<String, u64>();
    // Keys k0..k5 once each, then k0 again four times: the ring lets k0..k5 go.
    for n in 0..6u64 {
        producer
            .send(Record::new("b", n).key(format!("k{n}")))
            .unwrap();
    }
    for n in 6..10u64 {
        producer
            .send(Record::new("b", n).key("k0".to_string()))
            .unwrap();
    }
    let info = broker.describe_topic("b").unwrap().partitions[0];
    let c = info
        .compacted
        .expect("a compacted partition says what it keeps");
    assert_eq!((c.keys, c.dropped, c.retained_below), (3, 3, 6), "{c:?}");
    let got: Vec<u64> = replay::<u64>(&broker, "b", 0, ReadUncommitted)
        .into_iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(got, [0, 1, 2, 6, 7, 8, 9]);
    assert!(broker.describe_topic("b").is_ok());
    let plain = broker
        .create_topic::<String, u64>("p", TopicConfig::new(1))
        .unwrap();
    assert!(broker.describe_topic(plain.name()).unwrap().partitions[0]
        .compacted
        .is_none());
}

/// `offsets_for_times` on a compacted topic: the first record kept or in the ring at or
/// after the time (a record compacted away is passed over to the next one present).
#[test]
fn offsets_for_times_finds_kept_records_first() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<String, u64>("ts", compact(1, 4).compacted())
        .unwrap();
    let producer = broker.producer::<String, u64>();
    // Offsets 0..20, timestamp 10 × offset, keys k0..k4 in turn: the ring holds 16..20;
    // below it the latest of each key it let go is kept, offsets 11..16.
    for n in 0..20u64 {
        producer
            .send(
                Record::new("ts", n)
                    .key(format!("k{}", n % 5))
                    .timestamp(n as i64 * 10),
            )
            .unwrap();
    }
    let c = broker
        .consumer::<String, u64>(ConsumerConfig::new())
        .unwrap();
    let tp = TopicPartition::new("ts", 0);
    let at = |ts: i64| {
        c.offsets_for_times(&[(tp.clone(), ts)]).unwrap()[&tp]
            .as_ref()
            .map(|o| (o.offset, o.timestamp))
    };
    assert_eq!(at(0), Some((11, 110)), "the oldest kept record");
    assert_eq!(at(101), Some((11, 110)), "10 was compacted away");
    assert_eq!(at(155), Some((16, 160)), "the ring's oldest");
    assert_eq!(at(190), Some((19, 190)));
    assert_eq!(at(191), None);
}

/// A partition added to an in-memory compacted topic compacts as the first ones do; an
/// in-memory compacted topic cannot take the name of a persisted topic on disk (open or
/// not), nor a persisted one the name of an in-memory compacted topic.
#[test]
fn added_partitions_compact_and_names_do_not_clash_with_disk() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .open()
            .unwrap()
    };
    {
        let broker = open();
        broker
            .create_topic::<String, u64>(
                "disk",
                TopicConfig::new(1)
                    .cleanup_policy(CleanupPolicy::Compact)
                    .persist(PersistConfig::new()),
            )
            .unwrap();
        broker.close().unwrap();
    }
    let broker = open();
    let err = broker
        .create_topic::<String, u64>("disk", compact(1, 4).compacted())
        .unwrap_err();
    assert!(matches!(err, Error::TopicExists { .. }), "{err}");
    broker
        .create_topic::<String, u64>("mem", compact(1, 4).compacted())
        .unwrap();
    let err = broker
        .create_topic::<String, u64>(
            "mem",
            TopicConfig::new(1)
                .cleanup_policy(CleanupPolicy::Compact)
                .persist(PersistConfig::new()),
        )
        .unwrap_err();
    assert!(matches!(err, Error::TopicExists { .. }), "{err}");
    broker.add_partitions("mem", 2).unwrap();
    let producer = broker.producer::<String, u64>();
    for v in 0..40u64 {
        producer
            .send(
                Record::new("mem", v)
                    .key(format!("k{}", v % 5))
                    .partition(1),
            )
            .unwrap();
    }
    let got = replay::<u64>(&broker, "mem", 1, ReadUncommitted);
    let mut latest = BTreeMap::new();
    for (_, k, v) in &got {
        latest.insert(k.clone(), *v);
    }
    let want: BTreeMap<String, u64> = (35..40).map(|v| (format!("k{}", v % 5), v)).collect();
    assert_eq!(latest, want);
    assert!(got.len() < 40, "compacted: {} records", got.len());
    broker.close().unwrap();
}
