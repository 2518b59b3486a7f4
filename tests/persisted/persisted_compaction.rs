//! Log compaction (`CleanupPolicy::Compact`) of persisted topics: the settings, their
//! validation and persistence, keyless sends refused.

use std::time::Duration;

use logbus::broker::{Broker, CleanupPolicy, TopicConfig};
use logbus::consumer::IsolationLevel::{ReadCommitted, ReadUncommitted};
use logbus::persist::{PersistConfig, PersistedTopicConfig};
use logbus::producer::Record;
use logbus::Error;

use crate::replay_common::{latest, replay};

fn compacted() -> TopicConfig {
    TopicConfig::new(2)
        .cleanup_policy(CleanupPolicy::Compact)
        .min_cleanable_dirty_ratio(0.25)
        .delete_retention(Duration::from_secs(7))
        .min_compaction_lag(Duration::from_millis(1500))
}

/// A broker on data directory `dir`, created there if new.
fn created_broker(dir: &std::path::Path) -> Broker {
    Broker::builder().data_dir(dir).create(true).open().unwrap()
}

/// Topic `kv` of the tests of cleaning passes: one partition, a short in-memory tail, 4 KiB
/// segments (of `persist` otherwise) and a pass at the slightest dirt.
fn eagerly_compacted(persist: PersistConfig) -> PersistedTopicConfig {
    TopicConfig::new(1)
        .records_in_memory(16)
        .cleanup_policy(CleanupPolicy::Compact)
        .min_cleanable_dirty_ratio(0.01)
        .persist(persist.segment_bytes(4096))
}

/// Topic `kv` of the tests of tombstones (`Option` values): one partition, a short
/// in-memory tail, 4 KiB segments, tombstones kept for 10 s.
fn with_tombstones() -> PersistedTopicConfig {
    TopicConfig::new(1)
        .records_in_memory(4)
        .cleanup_policy(CleanupPolicy::Compact)
        .delete_retention(Duration::from_secs(10))
        .persist(PersistConfig::new().segment_bytes(4096))
}

/// The policy and its knobs are written to the topic's metadata: a reopen keeps them.
#[test]
fn cleanup_policy_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = created_broker(dir.path());
        broker
            .create_topic::<String, String>("c", compacted().persist(PersistConfig::new()))
            .unwrap();
        broker
            .create_topic::<String, String>(
                "d",
                TopicConfig::new(1)
                    .cleanup_policy(CleanupPolicy::CompactAndDelete)
                    .retention(Duration::from_secs(60))
                    .persist(PersistConfig::new()),
            )
            .unwrap();
        broker.close().unwrap();
    }
    let broker = Broker::open(dir.path()).unwrap();
    let _c = broker.topic::<String, String>("c").unwrap();
    let _d = broker.topic::<String, String>("d").unwrap();
    let c = broker.describe_topic("c").unwrap().config;
    assert_eq!(c.cleanup(), CleanupPolicy::Compact);
    assert_eq!(c.min_dirty_ratio(), 0.25);
    assert_eq!(c.tombstone_retention(), Duration::from_secs(7));
    assert_eq!(c.compaction_lag(), Duration::from_millis(1500));
    let d = broker.describe_topic("d").unwrap().config;
    assert_eq!(d.cleanup(), CleanupPolicy::CompactAndDelete);
    assert_eq!(d.retention_age(), Some(Duration::from_secs(60)));
    broker.close().unwrap();
}

/// A metadata file written before the policy existed reads as `delete` with Kafka's defaults.
#[test]
fn metadata_without_a_policy_reads_as_delete() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = created_broker(dir.path());
        broker
            .create_topic::<String, String>("t", compacted().persist(PersistConfig::new()))
            .unwrap();
        broker.close().unwrap();
    }
    let path = dir.path().join("t.topic");
    let text = std::fs::read_to_string(&path).unwrap();
    // Kafka's checkpoint layout: a version line, the entry count, the entries.
    let kept: Vec<&str> = text
        .lines()
        .skip(2)
        .filter(|l| {
            ![
                "cleanup_policy",
                "min_cleanable",
                "delete_retention",
                "min_compaction",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        })
        .collect();
    let version = text.lines().next().unwrap();
    let old = format!("{version}\n{}\n{}\n", kept.len(), kept.join("\n"));
    assert_ne!(old, text, "the fields are in the file: {text}");
    std::fs::write(&path, old).unwrap();
    let broker = Broker::open(dir.path()).unwrap();
    let _t = broker.topic::<String, String>("t").unwrap();
    let c = broker.describe_topic("t").unwrap().config;
    assert_eq!(c.cleanup(), CleanupPolicy::Delete);
    assert_eq!(c.min_dirty_ratio(), 0.5);
    assert_eq!(c.tombstone_retention(), Duration::from_secs(86_400));
    broker.close().unwrap();
}

/// Out-of-range knobs and retention without the delete policy are typed errors.
#[test]
fn invalid_compaction_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = created_broker(dir.path());
    let refused = |config: TopicConfig, persist: PersistConfig| match broker
        .create_topic::<String, String>("x", config.persist(persist))
    {
        Err(Error::InvalidConfig { name, .. }) => name,
        other => panic!("expected InvalidConfig, got {:?}", other.map(|_| ())),
    };
    let p = PersistConfig::new;
    assert_eq!(
        refused(compacted().min_cleanable_dirty_ratio(1.5), p()),
        "min_cleanable_dirty_ratio"
    );
    assert_eq!(
        refused(compacted().min_cleanable_dirty_ratio(f64::NAN), p()),
        "min_cleanable_dirty_ratio"
    );
    assert_eq!(
        refused(compacted().retention(Duration::from_secs(1)), p()),
        "retention"
    );
    assert_eq!(
        refused(compacted(), p().retention_bytes(1 << 20)),
        "retention_bytes"
    );
    assert_eq!(
        refused(compacted().delete_retention(Duration::MAX), p()),
        "delete_retention"
    );
    broker.close().unwrap();
    for (builder, name) in [
        (
            Broker::builder().log_cleaner_threads(65),
            "log_cleaner_threads",
        ),
        (
            Broker::builder().log_cleaner_dedupe_buffer_size(10),
            "log_cleaner_dedupe_buffer_size",
        ),
        (
            Broker::builder().log_cleaner_backoff(Duration::ZERO),
            "log_cleaner_backoff",
        ),
    ] {
        match builder.data_dir(dir.path()).open() {
            Err(Error::InvalidConfig { name: n, .. }) => assert_eq!(n, name),
            other => panic!("expected InvalidConfig, got {:?}", other.map(|_| ())),
        }
    }
}

/// Compaction keeps the latest record per key: a record without one is refused at send,
/// by every send path, and nothing is appended.
#[test]
fn keyless_send_to_a_compacted_topic_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = created_broker(dir.path());
    broker
        .create_topic::<String, String>("c", compacted().persist(PersistConfig::new()))
        .unwrap();
    let producer = broker.producer::<String, String>();
    let err = producer
        .send(Record::new("c", "v".to_string()))
        .unwrap_err();
    assert!(
        matches!(err.error(), Error::KeyRequired { topic } if topic == "c"),
        "{err:?}"
    );
    let err = producer
        .send(Record::new("c", "v".to_string()).partition(1))
        .unwrap_err();
    assert!(matches!(err.error(), Error::KeyRequired { .. }), "{err:?}");
    let mut batch = vec![
        Record::new("c", "v".to_string()).key("k".to_string()),
        Record::new("c", "w".to_string()),
    ];
    let err = producer.send_batch(&mut batch).unwrap_err();
    assert_eq!(err.sent, 1);
    assert!(matches!(err.error, Error::KeyRequired { .. }), "{err:?}");
    let part = producer.partition("c", 0).unwrap();
    let payload = |key: Option<&str>| logbus::producer::Payload {
        timestamp: None,
        key: key.map(str::to_owned),
        value: "p".to_string(),
        headers: Default::default(),
    };
    let err = part
        .send_iter([payload(Some("a")), payload(None)])
        .unwrap_err();
    assert_eq!(err.sent, 1);
    assert!(matches!(err.error, Error::KeyRequired { .. }), "{err:?}");
    producer
        .send(Record::new("c", "v".to_string()).key("k".to_string()))
        .unwrap();
    broker.fsync_and_checkpoint().unwrap();
    let ends: u64 = broker
        .describe_topic("c")
        .unwrap()
        .partitions
        .iter()
        .map(|p| p.log_end)
        .sum();
    assert_eq!(ends, 3);
    broker.close().unwrap();
}

/// The cleaner threads compact a topic while a producer appends and a consumer reads it
/// from disk: the consumer sees offsets strictly increasing, each record the one sent at its
/// offset; afterwards every key's latest value is there, in order, and superseded records
/// went.
#[test]
fn cleaner_threads_compact_under_a_producer_and_a_disk_reader() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .log_cleaner_threads(2)
        .log_cleaner_backoff(Duration::from_millis(5))
        .open()
        .unwrap();
    broker
        .create_topic::<String, String>("kv", eagerly_compacted(PersistConfig::new()))
        .unwrap();
    let n: u64 = if cfg!(debug_assertions) {
        6_000
    } else {
        40_000
    };
    const KEYS: u64 = 37;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let p = broker.producer::<String, String>();
            for i in 0..n {
                let v = format!("{i}-{}", "v".repeat((i % 50) as usize));
                p.send(Record::new("kv", v).key(format!("k{}", i % KEYS)))
                    .unwrap();
            }
            broker.fsync_and_checkpoint().unwrap();
            done.store(true, Ordering::SeqCst);
        });
        let reader = s.spawn(|| {
            use logbus::broker::TopicPartition;
            use logbus::consumer::ConsumerConfig;
            let mut c = broker
                .consumer::<String, String>(ConsumerConfig::new())
                .unwrap();
            c.assign(&[TopicPartition::new("kv", 0)]).unwrap();
            c.seek(&TopicPartition::new("kv", 0), 0).unwrap();
            let mut last: Option<u64> = None;
            let mut seen = 0u64;
            let mut rounds = 0;
            loop {
                let records = c.poll(Duration::from_millis(20)).unwrap();
                for r in records.iter() {
                    assert!(
                        last.map_or(true, |l| r.offset > l),
                        "offset {} after {last:?}",
                        r.offset
                    );
                    assert!(
                        r.value.starts_with(&format!("{}-", r.offset)),
                        "{} at {}",
                        r.value,
                        r.offset
                    );
                    assert_eq!(
                        r.key.as_deref(),
                        Some(format!("k{}", r.offset % KEYS).as_str())
                    );
                    last = Some(r.offset);
                    seen += 1;
                }
                if records.is_empty() && done.load(Ordering::SeqCst) {
                    if last == Some(n - 1) {
                        break;
                    }
                    // Read again from the start now and then: over what the cleaner rewrote.
                    rounds += 1;
                    assert!(
                        rounds < 10_000,
                        "the reader never reached the end: {last:?}"
                    );
                }
                if seen > 0 && seen % 1_000 == 0 {
                    c.seek(&TopicPartition::new("kv", 0), 0).unwrap();
                    last = None;
                }
            }
        });
        producer.join().unwrap();
        reader.join().unwrap();
    });
    broker.compact_now().unwrap();
    let info = broker.describe_topic("kv").unwrap().partitions[0];
    let progress = info
        .cleaner
        .expect("a compacted partition has cleaner metrics");
    assert!(
        progress.passes > 0 && progress.records_removed > 0,
        "{progress:?}"
    );
    let got = replay::<String>(&broker, "kv", 0, ReadUncommitted);
    assert!(
        (got.len() as u64) < n / 2,
        "little was removed: {}",
        got.len()
    );
    let mut latest = std::collections::HashMap::new();
    for w in got.windows(2) {
        assert!(w[0].0 < w[1].0);
    }
    for (o, k, v) in &got {
        assert!(v.starts_with(&format!("{o}-")));
        latest.insert(k.clone(), *o);
    }
    for k in 0..KEYS {
        let want = (0..n).filter(|i| i % KEYS == k).max().unwrap();
        assert_eq!(latest.get(&format!("k{k}")), Some(&want), "key k{k}");
    }
    broker.close().unwrap();
    // Reopened, the same.
    let broker = Broker::open(dir.path()).unwrap();
    let _t = broker.topic::<String, String>("kv").unwrap();
    assert_eq!(replay::<String>(&broker, "kv", 0, ReadUncommitted), got);
    broker.close().unwrap();
}

/// A replicated persisted topic takes a compacting policy (both of them), and its replicas
/// compact: `compact_now` removes superseded records and a replay keeps each key's latest
/// value (the replication cases are in `tests/replicas/replicas_compaction.rs`).
#[test]
fn a_compacted_replicated_topic_compacts() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let broker = Broker::builder()
        .data_dirs(dirs.iter().map(|d| d.path()))
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<String, String>(
            "both",
            TopicConfig::new(1)
                .cleanup_policy(CleanupPolicy::CompactAndDelete)
                .retention(Duration::from_secs(3600))
                .replication_factor(2)
                .persist(PersistConfig::new()),
        )
        .unwrap();
    broker
        .create_topic::<String, String>(
            "r",
            TopicConfig::new(1)
                .records_in_memory(16)
                .cleanup_policy(CleanupPolicy::Compact)
                .replication_factor(2)
                .persist(PersistConfig::new().segment_bytes(4096)),
        )
        .unwrap();
    let producer = broker.producer::<String, String>();
    let mut model = std::collections::BTreeMap::new();
    for i in 0..600 {
        let (key, value) = (format!("k{}", i % 7), format!("{i:040}"));
        producer
            .send(
                Record::new("r", value.clone())
                    .key(key.clone())
                    .partition(0),
            )
            .unwrap();
        model.insert(key, value);
    }
    assert!(broker
        .faults()
        .wait_in_sync("r", 0, Duration::from_secs(20))
        .unwrap());
    let stats = broker.compact_now().unwrap();
    assert!(stats.records_removed > 0, "{stats:?}");
    let got = replay::<String>(&broker, "r", 0, ReadUncommitted);
    assert!(got.len() < 600, "{} records left", got.len());
    assert_eq!(latest(&got), model);
    broker.close().unwrap();
}

/// Tombstones written by typed sends (`Topic<String, Option<String>>`, `None` is Kafka's
/// null): a compaction keeps them while younger than `delete_retention` (on a manual clock),
/// drops them after, together with everything of their keys; an empty string is a value,
/// kept through both passes and in the table; a reopen replays the same, and the topic
/// opens only with `Option` values.
#[test]
fn none_values_are_tombstones_kept_for_delete_retention_then_dropped() {
    use logbus::{Clock, ManualClock};
    use std::collections::BTreeMap;
    use std::sync::Arc;
    let t0 = 1_700_000_000_000;
    let clock = Arc::new(ManualClock::new(t0));
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .clock(clock.clone() as Arc<dyn Clock>)
            .open()
            .unwrap()
    };
    let broker = open();
    broker
        .create_topic::<String, Option<String>>("kv", with_tombstones())
        .unwrap();
    let producer = broker.producer::<String, Option<String>>();
    let mut model: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut send = |key: String, value: Option<String>| {
        producer
            .send(Record::new("kv", value.clone()).key(key.clone()))
            .unwrap();
        model.insert(key, value);
    };
    for round in 0..3 {
        for k in 0..10 {
            send(format!("k{k}"), Some(format!("v{round}-{k}")));
        }
    }
    for k in 1..=3 {
        send(format!("k{k}"), None);
    }
    send("k4".into(), Some(String::new()));
    send("k5".into(), None);
    send("k5".into(), Some("back".into())); // a value after a tombstone revives the key
                                            // Enough records of other keys to roll the tombstones out of the active segment.
    for i in 0..200 {
        send(format!("filler-{}", i % 5), Some(format!("{i:040}")));
    }
    let history = replay::<Option<String>>(&broker, "kv", 0, ReadUncommitted);
    assert_eq!(latest(&history), model);

    // Younger than delete_retention: superseded records go, tombstones stay.
    clock.advance(Duration::from_secs(5));
    let stats = broker.compact_now().unwrap();
    assert!(stats.records_removed > 0, "{stats:?}");
    assert_eq!(stats.tombstones_removed, 0, "{stats:?}");
    let kept = replay::<Option<String>>(&broker, "kv", 0, ReadUncommitted);
    assert!(kept.len() < history.len());
    assert_eq!(latest(&kept), model);
    for k in 1..=3 {
        let key = format!("k{k}");
        assert_eq!(
            kept.iter()
                .filter(|(_, k, _)| *k == key)
                .collect::<Vec<_>>()
                .len(),
            1,
            "only {key}'s tombstone is left of it"
        );
    }
    assert!(kept
        .iter()
        .any(|(_, k, v)| k == "k4" && v.as_deref() == Some("")));

    // Past delete_retention: the tombstones go, the empty value stays. (A pass runs over a
    // dirty log: more records of other keys make it dirty again.)
    clock.advance(Duration::from_secs(10));
    for i in 0..200 {
        let (key, value) = (
            format!("filler-{}", i % 5),
            Some(format!("{:040}", i + 200)),
        );
        producer
            .send(Record::new("kv", value.clone()).key(key.clone()))
            .unwrap();
        model.insert(key, value);
    }
    let stats = broker.compact_now().unwrap();
    assert_eq!(stats.tombstones_removed, 3, "{stats:?}");
    let live: BTreeMap<String, Option<String>> = model
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let cleaned = replay::<Option<String>>(&broker, "kv", 0, ReadUncommitted);
    assert!(cleaned.iter().all(|(_, _, v)| v.is_some()), "{cleaned:?}");
    assert_eq!(latest(&cleaned), live);
    let mut table = broker.table::<String, Option<String>>("kv").unwrap();
    table.catch_up(Duration::from_secs(10)).unwrap();
    assert_eq!(table.get(&"k4".to_string()), Some(&Some(String::new())));
    assert_eq!(
        table.get(&"k5".to_string()),
        Some(&Some("back".to_string()))
    );
    assert!(table.get(&"k1".to_string()).is_none());
    assert_eq!(table.len(), live.len());
    drop(table);
    broker.close().unwrap();

    let broker = open();
    match broker.topic::<String, String>("kv") {
        Err(Error::TypeMismatch { existing, .. }) => {
            assert!(existing.contains("nullable(logbus.string)"), "{existing}");
        }
        other => panic!("expected TypeMismatch, got {:?}", other.map(|_| ())),
    }
    broker.topic::<String, Option<String>>("kv").unwrap();
    assert_eq!(
        replay::<Option<String>>(&broker, "kv", 0, ReadUncommitted),
        cleaned
    );
    broker.close().unwrap();
}

/// A null value on disk read as a type without null (here a topic's metadata says
/// `logbus.string`, as an import of Kafka data written with nulls would) is an error naming
/// the type and the null: never a panic, never an empty string.
#[test]
fn a_null_value_read_as_a_type_without_null_is_a_decode_error() {
    use logbus::broker::TopicPartition;
    use logbus::consumer::ConsumerConfig;
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = created_broker(dir.path());
        broker
            .create_topic::<String, Option<String>>(
                "t",
                TopicConfig::new(1)
                    .records_in_memory(4)
                    .persist(PersistConfig::new()),
            )
            .unwrap();
        let producer = broker.producer::<String, Option<String>>();
        producer
            .send(Record::new("t", None).key("gone".to_string()))
            .unwrap();
        broker.close().unwrap();
    }
    let path = dir.path().join("t.topic");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("nullable(logbus.string)"), "{text}");
    std::fs::write(
        &path,
        text.replace("nullable(logbus.string)", "logbus.string"),
    )
    .unwrap();
    let broker = Broker::open(dir.path()).unwrap();
    broker.topic::<String, String>("t").unwrap();
    let mut c = broker
        .consumer::<String, String>(ConsumerConfig::new())
        .unwrap();
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek(&tp, 0).unwrap();
    let err = c.poll(Duration::from_secs(5)).map(|r| r.len()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("logbus.string") && text.contains("null"),
        "{err:?}"
    );
    broker.close().unwrap();
}

/// The control batches (transaction markers) in the `.log` files of `partition_dir`.
fn control_batches(partition_dir: &std::path::Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(partition_dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "log") {
            let bytes = std::fs::read(&path).unwrap();
            for b in logbus::storage::BatchIter::new(&bytes) {
                n += usize::from(b.unwrap().header().is_control());
            }
        }
    }
    n
}

/// Kafka's cleaner rules for transactions: committed and aborted transactions write the
/// same keys, then a transaction stays open while plain records follow. After compaction a
/// read_committed replay gives every key its last committed value, no aborted record is
/// left in the log, nothing from the open transaction's first offset on was touched, and a
/// reopen reads the same.
#[test]
fn compaction_follows_the_transaction_rules() {
    use logbus::producer::ProducerConfig;
    let dir = tempfile::tempdir().unwrap();
    let broker = created_broker(dir.path());
    broker
        .create_topic::<String, String>("kv", eagerly_compacted(PersistConfig::new()))
        .unwrap();
    let p = broker
        .producer_with_config::<String, String>(ProducerConfig::new().transactional_id("w"))
        .unwrap();
    p.init_transactions().unwrap();
    let plain = broker.producer::<String, String>();
    let mut model = std::collections::BTreeMap::new();
    const KEYS: u64 = 5;
    for i in 0..60u64 {
        let k = format!("k{}", i % KEYS);
        p.begin_transaction().unwrap();
        p.send(
            Record::new("kv", format!("c{i}"))
                .key(k.clone())
                .partition(0),
        )
        .unwrap();
        p.commit_transaction().unwrap();
        model.insert(k.clone(), format!("c{i}"));
        // An aborted transaction after the commit: its value must never win.
        p.begin_transaction().unwrap();
        p.send(
            Record::new("kv", format!("a{i}"))
                .key(k.clone())
                .partition(0),
        )
        .unwrap();
        p.abort_transaction().unwrap();
        if i % 7 == 0 {
            let k = format!("k{}", (i + 1) % KEYS);
            plain
                .send(
                    Record::new("kv", format!("p{i}"))
                        .key(k.clone())
                        .partition(0),
                )
                .unwrap();
            model.insert(k, format!("p{i}"));
        }
    }
    // An open transaction, then plain records past it, several segments' worth.
    p.begin_transaction().unwrap();
    let open = p
        .send(
            Record::new("kv", "open".to_string())
                .key("k0".to_string())
                .partition(0),
        )
        .unwrap()
        .offset;
    for j in 0..200u64 {
        plain
            .send(
                Record::new("kv", format!("q{j}"))
                    .key(format!("q{}", j % 3))
                    .partition(0),
            )
            .unwrap();
    }
    let before = replay::<String>(&broker, "kv", 0, ReadUncommitted);
    broker.fsync_and_checkpoint().unwrap();
    assert_eq!(control_batches(&dir.path().join("kv-0")), 120);
    let stats = broker.compact_now().unwrap();
    assert!(stats.records_removed > 0, "{stats:?}");
    assert!(stats.aborted_removed > 0, "{stats:?}");
    // Every marker stays (the cleaner keeps markers; see `storage::cleaner`).
    assert_eq!(control_batches(&dir.path().join("kv-0")), 120);
    let below = |v: Vec<(u64, String, String)>| -> Vec<(u64, String, String)> {
        v.into_iter().filter(|r| r.0 < open).collect()
    };
    let committed = replay::<String>(&broker, "kv", 0, ReadCommitted);
    // A read_committed reader stops at the LSO, gaps or not.
    assert!(committed.iter().all(|r| r.0 < open), "{committed:?}");
    assert_eq!(latest(&committed), model);
    let after = replay::<String>(&broker, "kv", 0, ReadUncommitted);
    // Nothing at or past the open transaction's first offset was cleaned.
    let tail = |v: &[(u64, String, String)]| -> Vec<(u64, String, String)> {
        v.iter().filter(|r| r.0 >= open).cloned().collect()
    };
    assert_eq!(tail(&after), tail(&before));
    assert!(tail(&after).len() > 200);
    // Below it: no aborted record, and one record a key.
    let head: Vec<_> = after.iter().filter(|r| r.0 < open).collect();
    assert!(head.iter().all(|(_, _, v)| !v.starts_with('a')), "{head:?}");
    assert_eq!(head.len() as u64, KEYS, "{head:?}");
    // The markers stayed: a read_committed reader still tells committed from aborted.
    broker.close().unwrap();
    let broker = Broker::open(dir.path()).unwrap();
    let _t = broker.topic::<String, String>("kv").unwrap();
    // The open transaction was never ended: after the reopen it is still open (or aborted
    // by the coordinator), never committed.
    let again = replay::<String>(&broker, "kv", 0, ReadCommitted);
    assert_eq!(latest(&below(again.clone())), model);
    assert!(again.iter().all(|(_, _, v)| v != "open"));
    assert_eq!(replay::<String>(&broker, "kv", 0, ReadUncommitted), after);
    broker.close().unwrap();
}

/// An idempotent producer's last batch, superseded by another producer's later record of
/// its key, keeps its header through compaction (emptied of its record): after a reopen a
/// retry of it is still a duplicate, and the next sequence is accepted.
#[test]
fn compaction_keeps_idempotent_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let broker = created_broker(dir.path());
    broker
        .create_topic::<String, String>("kv", eagerly_compacted(PersistConfig::new()))
        .unwrap();
    let p = broker.producer::<String, String>();
    let id = broker.init_producer_id();
    let n = 40i32;
    let mut last = 0;
    for s in 0..n {
        let r = Record::new("kv", format!("s{s}")).key(format!("k{}", s % 4));
        last = p.send_sequenced(r.partition(0), id, s).unwrap().offset;
    }
    // Another producer supersedes every key, for several segments.
    for j in 0..300 {
        p.send(
            Record::new("kv", format!("o{j}"))
                .key(format!("k{}", j % 4))
                .partition(0),
        )
        .unwrap();
    }
    let stats = broker.compact_now().unwrap();
    assert!(stats.records_removed >= n as u64, "{stats:?}");
    let got = replay::<String>(&broker, "kv", 0, ReadUncommitted);
    assert!(got.iter().all(|(_, _, v)| !v.starts_with('s')), "{got:?}");
    broker.close().unwrap();
    // Without its snapshots, recovery rebuilds producer state from the log alone.
    for e in std::fs::read_dir(dir.path().join("kv-0")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let broker = Broker::open(dir.path()).unwrap();
    let _t = broker.topic::<String, String>("kv").unwrap();
    let p = broker.producer::<String, String>();
    let retry = Record::new("kv", format!("s{}", n - 1)).key(format!("k{}", (n - 1) % 4));
    let again = p.send_sequenced(retry.partition(0), id, n - 1).unwrap();
    assert_eq!(again.offset, last, "the retry was appended again");
    let next = Record::new("kv", "next".to_string()).key("k0".to_string());
    p.send_sequenced(next.partition(0), id, n).unwrap();
    let skip = Record::new("kv", "gap".to_string()).key("k0".to_string());
    assert!(p.send_sequenced(skip.partition(0), id, n + 5).is_err());
    broker.close().unwrap();
}

/// A compressed (lz4) compacted topic compacts: superseded records inside compressed
/// batches go, the survivors are written in lz4 batches again, and every key's latest
/// value reads back, before and after a reopen.
#[test]
fn compressed_batches_are_compacted() {
    use logbus::persist::CompressionType;
    let dir = tempfile::tempdir().unwrap();
    let broker = created_broker(dir.path());
    let config = eagerly_compacted(PersistConfig::new().compression(CompressionType::Lz4));
    broker.create_topic::<String, String>("kv", config).unwrap();
    let p = broker.producer::<String, String>();
    let mut model = std::collections::BTreeMap::new();
    for round in 0..150u64 {
        let mut batch: Vec<_> = (0..8u64)
            .map(|i| {
                let k = format!("k{}", (round * 3 + i) % 11);
                let v = format!("{round}-{i}-{}", "x".repeat(20));
                model.insert(k.clone(), v.clone());
                Record::new("kv", v).key(k).partition(0)
            })
            .collect();
        p.send_batch(&mut batch).unwrap();
    }
    let before = replay::<String>(&broker, "kv", 0, ReadUncommitted);
    let stats = broker.compact_now().unwrap();
    assert!(stats.records_removed > 0, "{stats:?}");
    let after = replay::<String>(&broker, "kv", 0, ReadUncommitted);
    assert!(
        after.len() < before.len() / 2,
        "{} of {}",
        after.len(),
        before.len()
    );
    assert_eq!(latest(&after), model);
    for w in after.windows(2) {
        assert!(w[0].0 < w[1].0);
    }
    // Each surviving record is the one written at its offset.
    let at: std::collections::HashMap<_, _> = before.iter().map(|r| (r.0, r)).collect();
    assert!(after.iter().all(|r| at[&r.0] == r));
    // The cleaned segments hold lz4 batches.
    let mut lz4 = 0;
    for e in std::fs::read_dir(dir.path().join("kv-0")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "log") {
            let bytes = std::fs::read(&path).unwrap();
            for b in logbus::storage::BatchIter::new(&bytes) {
                let b = b.unwrap();
                if b.header().records_count > 0 {
                    assert_eq!(
                        b.header().compression(),
                        logbus::storage::record_batch::Compression::Lz4
                    );
                    lz4 += 1;
                }
            }
        }
    }
    assert!(lz4 > 0);
    broker.close().unwrap();
    let broker = Broker::open(dir.path()).unwrap();
    let _t = broker.topic::<String, String>("kv").unwrap();
    assert_eq!(replay::<String>(&broker, "kv", 0, ReadUncommitted), after);
    broker.close().unwrap();
}

/// A topic deleted and created again under the same name is cleaned from its log start:
/// the old topic's first dirty offset is forgotten with it (were it kept, an expired
/// tombstone of the new log below it would be dropped while its key's older value stayed).
#[test]
fn a_topic_created_again_is_cleaned_from_its_start() {
    use logbus::{Clock, ManualClock};
    use std::collections::BTreeMap;
    use std::sync::Arc;
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .clock(clock.clone() as Arc<dyn Clock>)
            // Only `compact_now`'s passes: a background pass over the new log while it is
            // still shorter than the old first dirty offset would hide a kept one.
            .log_cleaner_threads(0)
            .open()
            .unwrap()
    };
    let broker = open();
    // The new log is twice the old one: the old first dirty offset lies in its cleanable
    // segments, whatever the writer's batches.
    let write = |model: &mut BTreeMap<String, Option<String>>,
                 first: &[(&str, Option<&str>)],
                 fillers: usize| {
        let producer = broker.producer::<String, Option<String>>();
        let mut send = |key: String, value: Option<String>| {
            producer
                .send(Record::new("kv", value.clone()).key(key.clone()))
                .unwrap();
            model.insert(key, value);
        };
        for (k, v) in first {
            send(k.to_string(), v.map(str::to_string));
        }
        for i in 0..fillers {
            send(format!("filler-{}", i % 5), Some(format!("{i:040}")));
        }
    };
    broker
        .create_topic::<String, Option<String>>("kv", with_tombstones())
        .unwrap();
    write(&mut BTreeMap::new(), &[], 300);
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    let cleaner = broker.describe_topic("kv").unwrap().partitions[0].cleaner;
    assert!(cleaner.is_some_and(|c| c.first_dirty > 100), "{cleaner:?}");
    broker.delete_topic("kv").unwrap();
    broker
        .create_topic::<String, Option<String>>("kv", with_tombstones())
        .unwrap();
    let mut model = BTreeMap::new();
    write(
        &mut model,
        &[("gone", Some("before the deletion")), ("gone", None)],
        600,
    );
    // Every record on disk before the pass (the writer is asynchronous), and the progress
    // as a reopen reads it from the cleaner's checkpoint.
    broker.close().unwrap();
    let broker = open();
    let _t = broker.topic::<String, Option<String>>("kv").unwrap();
    clock.advance(Duration::from_secs(30));
    broker.compact_now().unwrap();
    let kept = replay::<Option<String>>(&broker, "kv", 0, ReadUncommitted);
    let live = |m: BTreeMap<String, Option<String>>| {
        m.into_iter()
            .filter(|(_, v)| v.is_some())
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(live(latest(&kept)), live(model));
    broker.close().unwrap();
}

/// Every `.deleted` file under `dir`, recursively.
fn replaced_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(replaced_files(&p));
        } else if p.to_string_lossy().ends_with(".deleted") {
            out.push(p);
        }
    }
    out
}

/// The cleaner threads remove their passes' replaced files after the passes: while a
/// producer writes, the topic is deleted and created again under the threads' passes and
/// their pending removals (the deletion of its directories meeting the removals), the
/// broker is closed, and no `.deleted` file is left; `compact_now` leaves none either, and
/// the reopened log replays each key's latest value.
#[test]
fn replaced_files_are_removed_after_the_passes_through_deletes_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .log_cleaner_threads(2)
            .log_cleaner_backoff(Duration::from_millis(1))
            .open()
            .unwrap()
    };
    let config = || {
        TopicConfig::new(1)
            .records_in_memory(16)
            .cleanup_policy(CleanupPolicy::Compact)
            .min_cleanable_dirty_ratio(0.01)
            .persist(PersistConfig::new().segment_bytes(4096))
    };
    const KEYS: u64 = 11;
    let broker = open();
    for round in 0..6u64 {
        broker
            .create_topic::<String, String>("kv", config())
            .unwrap();
        let p = broker.producer::<String, String>();
        for i in 0..1_500u64 {
            p.send(Record::new("kv", format!("{round}-{i}")).key(format!("k{}", i % KEYS)))
                .unwrap();
        }
        p.flush().unwrap();
        broker.fsync_and_checkpoint().unwrap();
        if round < 5 {
            broker.delete_topic("kv").unwrap();
        }
    }
    broker.compact_now().unwrap();
    let progress = broker.describe_topic("kv").unwrap().partitions[0].cleaner;
    assert!(progress.is_some_and(|p| p.passes > 0), "{progress:?}");
    assert_eq!(
        replaced_files(dir.path()),
        Vec::<std::path::PathBuf>::new(),
        "after compact_now"
    );
    let p = broker.producer::<String, String>();
    for i in 0..1_500u64 {
        p.send(Record::new("kv", format!("last-{i}")).key(format!("k{}", i % KEYS)))
            .unwrap();
    }
    p.flush().unwrap();
    broker.fsync_and_checkpoint().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    broker.close().unwrap();
    assert_eq!(
        replaced_files(dir.path()),
        Vec::<std::path::PathBuf>::new(),
        "after close"
    );
    let broker = open();
    broker.topic::<String, String>("kv").unwrap();
    let kept = latest(&replay::<String>(&broker, "kv", 0, ReadUncommitted));
    for k in 0..KEYS {
        let i = (0..1_500u64).rev().find(|i| i % KEYS == k).unwrap();
        assert_eq!(
            kept.get(&format!("k{k}")).map(String::as_str),
            Some(format!("last-{i}").as_str()),
            "key k{k}"
        );
    }
    broker.close().unwrap();
}
