//! The idempotent producer's state on disk: Kafka's `.snapshot` files written at each
//! segment roll, loaded at recovery with the batches after them, a corrupt or stray one
//! ignored (rebuilt from the log), and a retried send deduplicated after each restart.

use logbus::persist::PersistConfig;
use logbus::producer::{ProducerConfig, Record};
use logbus::storage::producer_snapshot;
use logbus::{Broker, TopicConfig};

fn snapshots(dir: &std::path::Path) -> Vec<u64> {
    producer_snapshot::list(&logbus::storage::FsIo, dir)
        .unwrap()
        .into_iter()
        .map(|(o, _)| o)
        .collect()
}

#[test]
fn snapshots_at_rolls_and_retries_after_restarts_one_replica() {
    run(1);
}

#[test]
fn snapshots_at_rolls_and_retries_after_restarts_three_replicas() {
    run(3);
}

fn run(rf: u32) {
    let tmp: Vec<_> = (0..rf).map(|_| tempfile::tempdir().unwrap()).collect();
    let dirs: Vec<_> = tmp.iter().map(|t| t.path().to_path_buf()).collect();
    let open = || {
        Broker::builder()
            .data_dirs(&dirs)
            .create(true)
            .open()
            .unwrap()
    };
    let broker = open();
    let config = TopicConfig::new(1)
        .replication_factor(rf)
        .min_insync_replicas(rf.min(2))
        .persist(PersistConfig::new().segment_bytes(4096));
    broker.create_topic::<(), u64>("s", config).unwrap();
    let p = broker
        .producer_with_config::<(), u64>(ProducerConfig::new())
        .unwrap();
    let id = p.producer_identity().unwrap();
    let mut last = None;
    let n = 2_000u64;
    for v in 0..n {
        last = Some(p.send(Record::new("s", v)).unwrap());
    }
    let last = last.unwrap();
    drop(p);
    broker.close().unwrap();
    drop(broker);
    let part = dirs[0].join("s-0");
    let snaps = snapshots(&part);
    assert!(snaps.len() >= 2, "a snapshot at each roll: {snaps:?}");

    // Restart: the retry of the last send is answered with its offset.
    let retry = |expect_end: u64| {
        let broker = open();
        broker.topic::<(), u64>("s").unwrap();
        let p = broker.producer::<(), u64>();
        let again = p
            .send_sequenced(Record::new("s", n - 1), id, (n - 1) as i32)
            .unwrap();
        assert_eq!(again.offset, last.offset);
        let d = broker.describe_topic("s").unwrap();
        assert_eq!(
            d.partitions[0].log_end.max(d.partitions[0].high_watermark),
            expect_end
        );
        drop(p);
        broker.close().unwrap();
    };
    retry(n);

    // The latest snapshot damaged, and a stray one past the log end: ignored, rebuilt from
    // the log; the retry is still recognised.
    let latest = *snapshots(&part).last().unwrap();
    let path = part.join(producer_snapshot::file_name(latest));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    std::fs::write(part.join(producer_snapshot::file_name(n + 500)), b"stray").unwrap();
    retry(n);
    let left = snapshots(&part);
    assert!(
        !left.contains(&(n + 500)),
        "the stray snapshot is gone: {left:?}"
    );
    assert!(
        !left.contains(&latest),
        "the corrupt snapshot is gone: {left:?}"
    );
}
