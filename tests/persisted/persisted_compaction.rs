//! Log compaction (`CleanupPolicy::Compact`) of persisted topics: the settings, their
//! validation and persistence, keyless sends refused.

use std::time::Duration;

use logbus::broker::{Broker, CleanupPolicy, TopicConfig};
use logbus::persist::PersistConfig;
use logbus::producer::Record;
use logbus::Error;

fn compacted() -> TopicConfig {
    TopicConfig::new(2)
        .cleanup_policy(CleanupPolicy::Compact)
        .min_cleanable_dirty_ratio(0.25)
        .delete_retention(Duration::from_secs(7))
        .min_compaction_lag(Duration::from_millis(1500))
}

/// The policy and its knobs are written to the topic's metadata: a reopen keeps them.
#[test]
fn cleanup_policy_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .open()
            .unwrap();
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
        let broker = Broker::builder()
            .data_dir(dir.path())
            .create(true)
            .open()
            .unwrap();
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
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
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
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
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
