//! Log compaction of a replicated persisted topic under SIGKILL: a child process produces
//! keyed records (`acks = all`) to an RF 3 compacted topic on three data directories while
//! its cleaner thread cleans every replica as fast as it can, and is killed at random
//! moments (mid-pass included). Each reopen elects a leader, the replicas truncate by epoch
//! and catch up across the cleaned gaps; then every record read is the one sent at its
//! offset, each key's last acknowledged value (or a later one) is there, and every
//! replica's directory verifies and holds the same key → latest offset view.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use logbus::broker::{Broker, CleanupPolicy, TopicConfig, TopicPartition};
use logbus::consumer::ConsumerConfig;
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus::storage::BatchIter;

use crate::persisted_common::{
    assert_verifies, check_read_back, latest_by_key, note_acked, one_at_a_time,
};

const KEYS: u64 = 11;
const T: &str = "kv";

fn dirs(root: &Path) -> Vec<PathBuf> {
    (0..3).map(|i| root.join(format!("d{i}"))).collect()
}

fn open(root: &Path) -> Broker {
    Broker::builder()
        .data_dirs(dirs(root).iter())
        .create(true)
        .log_cleaner_threads(1)
        .log_cleaner_backoff(Duration::from_millis(1))
        .open()
        .unwrap()
}

/// The child: sends `v<offset>` under key `k<offset % KEYS>`, printing each acknowledged
/// offset, until killed.
#[test]
#[ignore = "run by replicated_compaction_sigkill_rounds as a child process"]
fn replicated_compaction_crash_child() {
    let Ok(root) = std::env::var("LOGBUS_REPLICATED_COMPACTION_CRASH_DIR") else {
        return;
    };
    use std::io::Write;
    let broker = open(Path::new(&root));
    let _ = broker.create_topic::<String, String>(
        T,
        TopicConfig::new(1)
            .replication_factor(3)
            .min_insync_replicas(2)
            .records_in_memory(32)
            .cleanup_policy(CleanupPolicy::Compact)
            .min_cleanable_dirty_ratio(0.0)
            .persist(
                PersistConfig::new()
                    .segment_bytes(4096)
                    .flush(FlushPolicy::Os),
            ),
    );
    broker.topic::<String, String>(T).unwrap();
    let end = broker.describe_topic(T).unwrap().partitions[0].log_end;
    let p = broker.producer::<String, String>();
    let mut out = std::io::stdout().lock();
    for i in end.. {
        let Ok(m) = p.send(
            Record::new(T, format!("v{i}-{}", "x".repeat((i % 50) as usize)))
                .key(format!("k{}", i % KEYS))
                .partition(0),
        ) else {
            continue;
        };
        writeln!(out, "acked {}", m.offset).unwrap();
        out.flush().unwrap();
    }
}

/// Every data record of a closed replica directory: `(offset, key, value)`.
fn disk_records(part: &Path) -> Vec<(u64, String, String)> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for path in logs {
        let bytes = std::fs::read(&path).unwrap();
        for batch in BatchIter::new(&bytes) {
            let batch = batch.unwrap();
            for r in batch.records(&mut buf).unwrap() {
                let r = r.unwrap();
                out.push((
                    r.offset,
                    String::from_utf8(r.key.unwrap().to_vec()).unwrap(),
                    String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                ));
            }
        }
    }
    out
}

#[test]
fn replicated_compaction_sigkill_rounds() {
    let _serial = one_at_a_time();
    let root = tempfile::tempdir().unwrap();
    // Per key, the last offset acknowledged.
    let mut acked: HashMap<u64, u64> = HashMap::new();
    let mut checked = 0;
    let mut compacted = 0;
    let rounds: u64 = std::env::var("LOGBUS_COMPACTION_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    for round in 0..rounds {
        let stdout = crate::kill_child_after(
            module_path!(),
            "replicated_compaction_crash_child",
            "LOGBUS_REPLICATED_COMPACTION_CRASH_DIR",
            root.path(),
            Duration::from_millis(150 + (round * 53) % 250),
        );
        note_acked(&stdout, KEYS, &mut acked);
        let broker = open(root.path());
        if !broker.topics().contains(&T.to_string()) {
            broker.close().unwrap();
            continue;
        }
        broker.topic::<String, String>(T).unwrap();
        assert!(broker
            .faults()
            .wait_in_sync(T, 0, Duration::from_secs(20))
            .unwrap());
        let end = broker.describe_topic(T).unwrap().partitions[0].high_watermark;
        let mut c = broker
            .consumer::<String, String>(ConsumerConfig::new())
            .unwrap();
        let tp = TopicPartition::new(T, 0);
        c.assign(std::slice::from_ref(&tp)).unwrap();
        c.seek(&tp, 0).unwrap();
        let mut got: Vec<(u64, String, String)> = Vec::new();
        while c.position(&tp).is_ok_and(|at| at < end) {
            for r in c.poll(Duration::from_millis(200)).unwrap().iter() {
                got.push((r.offset, r.key.clone().unwrap(), r.value.clone()));
            }
        }
        drop(c);
        let latest = check_read_back(&got, KEYS, &acked, &format!("round {round}: read"));
        broker.close().unwrap();
        for dir in dirs(root.path()) {
            let part = dir.join(format!("{T}-0"));
            let what = format!("round {round}: {}", part.display());
            assert_verifies(&part, &what);
            let records = disk_records(&part);
            assert_eq!(latest_by_key(&records, KEYS, &what), latest, "{what}");
            compacted += usize::from((records.len() as u64) < end);
        }
        checked += 1;
    }
    assert!(checked > rounds / 2, "only {checked} rounds checked");
    assert!(compacted > 0, "the cleaner never removed a record");
}
