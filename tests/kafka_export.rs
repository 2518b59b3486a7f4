//! `export` / `import` through librdkafka's mock cluster: every record's partition, key,
//! value, timestamp and headers survive the round trip; an interrupted export resumes
//! without duplicates; the offset mapping says where each record went.
#![cfg(feature = "kafka")]

use std::ops::ControlFlow;
use std::time::Duration;

use bytes::Bytes;
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::kafka::export::{export, import, ExportOptions};
use logbus::kafka::{KafkaBroker, KafkaConfig, MockCluster};
use logbus::persist::PersistConfig;
use logbus::{Broker, Codec, Record, TopicConfig, TopicPartition};

/// `(partition, offset, key, value, timestamp, headers)`, all as bytes.
type Row = (
    u32,
    u64,
    Option<Vec<u8>>,
    Vec<u8>,
    i64,
    Vec<(String, Option<Vec<u8>>)>,
);

const T0: i64 = 1_704_067_200_000;

fn idempotent_mock() -> KafkaBroker {
    let config = KafkaConfig::new("").set("enable.idempotence", "true");
    KafkaBroker::mock_with(MockCluster::start(3).unwrap(), config).unwrap()
}

/// A closed data directory with topic `orders` (3 partitions, String keys, u64 values) and
/// topic `audit` (1 partition, no keys).
fn source_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::builder()
        .data_dir(dir.path())
        .create(true)
        .open()
        .unwrap();
    broker
        .create_persisted_topic::<String, u64>(
            "orders",
            TopicConfig::new(3),
            PersistConfig::default(),
        )
        .unwrap();
    broker
        .create_persisted_topic::<(), String>(
            "audit",
            TopicConfig::new(1),
            PersistConfig::default(),
        )
        .unwrap();
    let orders = broker.producer::<String, u64>();
    for i in 0..250u64 {
        let mut r = Record::new("orders", i)
            .key(format!("customer-{}", i % 17))
            .timestamp(T0 + i as i64 * 1000)
            .header("trace", Some(Bytes::from(format!("t-{i}"))));
        if i % 5 == 0 {
            r = r.header("flag", None);
        }
        orders.send(r).unwrap();
    }
    let audit = broker.producer::<(), String>();
    for i in 0..30 {
        audit
            .send(Record::new("audit", format!("event {i}")).timestamp(T0 + i))
            .unwrap();
    }
    broker.close().unwrap();
    dir
}

/// Every record of `topic` in the data directory `dir`, read back with types `K`, `V`.
fn rows_in_dir<K, V>(dir: &std::path::Path, topic: &str) -> Vec<Row>
where
    K: Codec + Clone + Send + Sync + 'static,
    V: Codec + Clone + Send + Sync + 'static,
{
    let broker = Broker::builder().data_dir(dir).create(true).open().unwrap();
    let t = broker.open_topic::<K, V>(topic).unwrap();
    let mut c = broker
        .consumer::<K, V>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    let all: Vec<_> = (0..t.partition_count())
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    c.assign(&all).unwrap();
    let mut rows = Vec::new();
    loop {
        let records = c.poll(Duration::from_millis(50)).unwrap();
        if records.is_empty() {
            break;
        }
        for r in records {
            rows.push((
                r.partition,
                r.offset,
                r.key.map(|k| k.to_bytes()),
                r.value.to_bytes(),
                r.timestamp,
                r.headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_ref().map(|b| b.to_vec())))
                    .collect(),
            ));
        }
    }
    drop(c);
    broker.close().unwrap();
    rows.sort();
    rows
}

/// Every record of `topic` on the cluster.
fn rows_on_cluster(broker: &KafkaBroker, topic: &str) -> Vec<Row> {
    let mut c = broker
        .consumer::<Bytes, Bytes>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    let n = broker.partition_count(topic).unwrap();
    let all: Vec<_> = (0..n).map(|p| TopicPartition::new(topic, p)).collect();
    c.assign(&all).unwrap();
    let mut rows = Vec::new();
    loop {
        let records = c.poll(Duration::from_millis(100)).unwrap();
        if records.is_empty() {
            break;
        }
        for r in records {
            rows.push((
                r.partition,
                r.offset,
                r.key.map(|k| k.to_vec()),
                r.value.to_vec(),
                r.timestamp,
                r.headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_ref().map(|b| b.to_vec())))
                    .collect(),
            ));
        }
    }
    rows.sort();
    rows
}

#[test]
fn export_interrupted_resumes_then_import_round_trips() {
    let source = source_dir();
    let expected_orders = rows_in_dir::<String, u64>(source.path(), "orders");
    let expected_audit = rows_in_dir::<(), String>(source.path(), "audit");
    assert_eq!(expected_orders.len(), 250);
    let kafka = idempotent_mock();

    // First run: stopped after the batch that reaches 80 records (batches of 40 per
    // partition; `audit` sorts first).
    let mut seen = Vec::new();
    let first = export(
        source.path(),
        &kafka,
        ExportOptions::new().batch(40).progress(|p| {
            seen.push((
                p.topic.clone(),
                p.partition,
                p.done,
                p.total,
                p.copied_total,
            ));
            if p.copied_total >= 80 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }),
    )
    .unwrap();
    assert!(first.stopped);
    let copied: u64 = first.partitions.iter().map(|m| m.copied).sum();
    let last = seen.last().unwrap().clone();
    assert!((80..250).contains(&copied), "{seen:?}");
    assert_eq!(copied, last.4);
    assert_eq!(
        seen[0],
        ("audit".to_string(), 0, 30, 30, 30),
        "progress after each batch"
    );
    assert!(seen.iter().all(|(_, _, done, total, _)| done <= total));
    assert_eq!(
        kafka.partition_count("orders").unwrap(),
        3,
        "created with the source's count"
    );

    // Second run: resumes, copies only the rest.
    let second = export(source.path(), &kafka, ExportOptions::new().batch(40)).unwrap();
    assert!(!second.stopped);
    let already: u64 = second.partitions.iter().map(|m| m.already_copied).sum();
    let rest: u64 = second.partitions.iter().map(|m| m.copied).sum();
    assert_eq!(already, copied);
    assert_eq!(rest, 280 - copied);
    // A third run finds everything there.
    let third = export(source.path(), &kafka, ExportOptions::new()).unwrap();
    assert_eq!(third.partitions.iter().map(|m| m.copied).sum::<u64>(), 0);

    // On the cluster: every record once, on its partition, with its key, value, timestamp
    // and headers; the mapping says where (here: the same offsets, the targets were new).
    let on_kafka = rows_on_cluster(&kafka, "orders");
    assert_eq!(on_kafka, expected_orders);
    assert_eq!(rows_on_cluster(&kafka, "audit"), expected_audit);
    for m in &third.partitions {
        for (p, offset, ..) in expected_orders
            .iter()
            .filter(|r| m.topic == "orders" && r.0 == m.partition)
        {
            assert_eq!(m.target_of(*offset), Some(*offset), "{m} {p}");
        }
        assert!(m.to_string().contains("source [0, "), "{m}");
    }

    // Import into a new data directory: the same records again, as bytes.
    let target = tempfile::tempdir().unwrap();
    let imported = import(
        target.path(),
        &kafka,
        ExportOptions::new().topics(["orders", "audit"]),
    )
    .unwrap();
    assert_eq!(imported.partitions.len(), 4);
    assert_eq!(
        imported.partitions.iter().map(|m| m.copied).sum::<u64>(),
        280
    );
    assert_eq!(
        rows_in_dir::<Bytes, Bytes>(target.path(), "orders"),
        expected_orders
    );
    assert_eq!(
        rows_in_dir::<Bytes, Bytes>(target.path(), "audit"),
        expected_audit
    );
    // Importing again is refused: the topics exist.
    assert!(matches!(
        import(
            target.path(),
            &kafka,
            ExportOptions::new().topics(["orders"])
        ),
        Err(logbus::Error::TopicExists { .. })
    ));
}

#[test]
fn export_refuses_what_it_cannot_resume() {
    let source = source_dir();
    let plain = KafkaBroker::mock(1).unwrap();
    assert!(matches!(
        export(source.path(), &plain, ExportOptions::new()),
        Err(logbus::Error::InvalidConfig {
            name: "enable.idempotence",
            ..
        })
    ));
    let kafka = idempotent_mock();
    assert!(matches!(
        export(source.path(), &kafka, ExportOptions::new().topics(["nope"])),
        Err(logbus::Error::UnknownTopic { .. })
    ));
    // A target with fewer partitions than the source.
    kafka
        .create_topic::<(), u64>("orders", TopicConfig::new(2))
        .unwrap();
    assert!(matches!(
        export(
            source.path(),
            &kafka,
            ExportOptions::new().topics(["orders"])
        ),
        Err(logbus::Error::InvalidConfig {
            name: "target partitions",
            ..
        })
    ));
}

/// The command line: progress on stderr, the mapping on stdout, resumable.
#[cfg(feature = "cli")]
#[test]
fn cli_export_shows_progress_and_resumes() {
    use std::process::Command;
    let source = source_dir();
    let kafka = idempotent_mock();
    // The mock cluster answers no CreateTopics request (a real cluster does): create the
    // topics on it directly.
    kafka
        .create_topic::<String, u64>("orders", TopicConfig::new(3))
        .unwrap();
    kafka
        .create_topic::<(), String>("audit", TopicConfig::new(1))
        .unwrap();
    let servers = kafka.config().get("bootstrap.servers").unwrap().to_owned();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_logbus"))
            .arg("export")
            .arg(source.path())
            .args(["--bootstrap-servers", &servers, "--batch", "50"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (stdout, stderr) = run(&["--max-records", "100"]);
    assert!(stderr.contains("export audit-0: 30/30 records"), "{stderr}");
    assert!(stdout.contains("stopped before the end"), "{stdout}");
    let (stdout, _) = run(&[]);
    assert!(!stdout.contains("stopped"), "{stdout}");
    assert!(stdout.contains("orders-2: "), "{stdout}");
    assert!(stdout.contains("-> target [0, "), "{stdout}");
    let total: usize = (0..3)
        .map(|p| {
            let tp = TopicPartition::new("orders", p);
            let mut c = kafka
                .consumer::<Bytes, Bytes>(ConsumerConfig::new())
                .unwrap();
            c.assign(std::slice::from_ref(&tp)).unwrap();
            c.end_offsets(std::slice::from_ref(&tp)).unwrap()[&tp] as usize
        })
        .sum();
    assert_eq!(total, 250, "no duplicates after the resumed export");
}
