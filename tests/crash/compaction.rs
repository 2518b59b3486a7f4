//! Log compaction under SIGKILL: a child process produces keyed records to a compacted
//! topic while its cleaner thread cleans as fast as it can, and is killed at random moments
//! (mid-pass included); each reopen finds a valid log, no record twice, every record the one
//! sent at its offset, and each key's last acknowledged value (or a later one) present.

use std::collections::HashMap;
use std::time::Duration;

use logbus::broker::{Broker, CleanupPolicy, TopicConfig, TopicPartition};
use logbus::consumer::ConsumerConfig;
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;

use crate::persisted_common::{assert_verifies, check_read_back, note_acked, one_at_a_time};

const KEYS: u64 = 13;

fn open(dir: &std::path::Path) -> Broker {
    Broker::builder()
        .data_dir(dir)
        .create(true)
        .log_cleaner_threads(1)
        .log_cleaner_backoff(Duration::from_millis(1))
        .open()
        .unwrap()
}

/// The child: sends `v<offset>` under key `k<offset % KEYS>`, printing each acknowledged
/// offset, until killed.
#[test]
#[ignore = "run by compaction_sigkill_rounds as a child process"]
fn compaction_crash_child() {
    let Ok(dir) = std::env::var("LOGBUS_COMPACTION_CRASH_DIR") else {
        return;
    };
    use std::io::Write;
    let broker = open(std::path::Path::new(&dir));
    let _ = broker.create_topic::<String, String>(
        "kv",
        TopicConfig::new(1)
            .records_in_memory(64)
            .cleanup_policy(CleanupPolicy::Compact)
            .min_cleanable_dirty_ratio(0.0)
            .persist(
                PersistConfig::new()
                    .segment_bytes(4096)
                    .flush(FlushPolicy::EveryBatch),
            ),
    );
    broker.topic::<String, String>("kv").unwrap();
    let end = broker.describe_topic("kv").unwrap().partitions[0].log_end;
    let p = broker.producer::<String, String>();
    let mut out = std::io::stdout().lock();
    for i in end.. {
        let m = p
            .send(
                Record::new("kv", format!("v{i}-{}", "x".repeat((i % 60) as usize)))
                    .key(format!("k{}", i % KEYS)),
            )
            .unwrap();
        writeln!(out, "acked {}", m.offset).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn compaction_sigkill_rounds() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    // Per key, the last offset acknowledged.
    let mut acked: HashMap<u64, u64> = HashMap::new();
    let mut checked = 0;
    let mut compacted = 0;
    let rounds: u64 = std::env::var("LOGBUS_COMPACTION_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    for round in 0..rounds {
        let stdout = crate::kill_child_after(
            module_path!(),
            "compaction_crash_child",
            "LOGBUS_COMPACTION_CRASH_DIR",
            dir.path(),
            Duration::from_millis(80 + (round * 53) % 200),
        );
        note_acked(&stdout, KEYS, &mut acked);
        let broker = open(dir.path());
        if !broker.topics().contains(&"kv".to_string()) {
            broker.close().unwrap();
            continue;
        }
        broker.topic::<String, String>("kv").unwrap();
        let end = broker.describe_topic("kv").unwrap().partitions[0].log_end;
        let mut c = broker
            .consumer::<String, String>(ConsumerConfig::new())
            .unwrap();
        let tp = TopicPartition::new("kv", 0);
        c.assign(std::slice::from_ref(&tp)).unwrap();
        c.seek(&tp, 0).unwrap();
        let mut got: Vec<(u64, String, String)> = Vec::new();
        loop {
            let records = c.poll(Duration::from_millis(200)).unwrap();
            if records.is_empty() {
                break;
            }
            for r in records.iter() {
                got.push((r.offset, r.key.clone().unwrap(), r.value.clone()));
            }
        }
        drop(c);
        check_read_back(&got, KEYS, &acked, &format!("round {round}"));
        compacted += usize::from((got.len() as u64) < end);
        broker.close().unwrap();
        assert_verifies(&dir.path().join("kv-0"), &format!("round {round}"));
        checked += 1;
    }
    assert!(checked > rounds / 2, "only {checked} rounds checked");
    assert!(compacted > 0, "the cleaner never removed a record");
}
