//! Replaying a keyed topic's partition through a consumer, shared by the test binaries that
//! check compaction (in memory, persisted, replicated): the records read and each key's
//! latest value.
// Each binary uses the part it needs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use logbus::consumer::{ConsumerConfig, IsolationLevel};
use logbus::{Broker, Consumer, TopicPartition};

/// Every record of `topic`-`partition` from its log start, read at `isolation` up to the
/// partition's end as it moves: `(offset, key, value)`. Up to the moving end because, while
/// a replay reads, a cleaner may replace a key's record below the end it started with by a
/// newer one past it, which a replay stopping at that first end would miss (as a Kafka
/// consumer stopping there would). Fails after a minute without reaching the end.
pub fn replay<V: Clone + Send + Sync + 'static>(
    broker: &Broker,
    topic: &str,
    partition: u32,
    isolation: IsolationLevel,
) -> Vec<(u64, String, V)> {
    let tp = TopicPartition::new(topic, partition);
    let mut c = broker
        .consumer::<String, V>(ConsumerConfig::new().isolation_level(isolation))
        .unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek_to_beginning(&[]).unwrap();
    let end = |c: &Consumer<String, V>| c.end_offsets(std::slice::from_ref(&tp)).unwrap()[&tp];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while c.position(&tp).unwrap() < end(&c) {
        assert!(
            Instant::now() < deadline,
            "{tp:?}: the replay is stuck at {} below the end {}",
            c.position(&tp).unwrap(),
            end(&c)
        );
        for r in c.poll(Duration::from_millis(10)).unwrap().iter() {
            let key = r
                .key
                .clone()
                .expect("a compacted topic's records have keys");
            got.push((r.offset, key, r.value.clone()));
        }
    }
    got
}

/// Each key's latest value in `records` (a tombstone included, as its value).
pub fn latest<V: Clone>(records: &[(u64, String, V)]) -> BTreeMap<String, V> {
    records
        .iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect()
}
