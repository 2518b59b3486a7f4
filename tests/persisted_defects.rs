//! Persisted (unreplicated) topics at their limits: batches and records against a small
//! segment size.

use std::path::Path;
use std::time::Duration;

use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus::storage::verify::{verify_path_with, VerifyOptions};
use logbus::Error;

/// Every record of `t`-`p` from offset 0, read through a consumer (from disk when the ring
/// has moved on).
fn read_partition(broker: &Broker, p: u32) -> Vec<(u64, String)> {
    let mut c = broker
        .consumer::<(), String>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[TopicPartition::new("t", p)]).unwrap();
    let mut got = Vec::new();
    while c.poll_into(&mut got, 10_000, Duration::ZERO).unwrap() > 0 {}
    got.into_iter().map(|r| (r.offset, r.value)).collect()
}

/// Every partition directory under `dir` verifies clean, offsets dense; returns the number
/// of segments.
fn verify_clean(dir: &Path) -> usize {
    let tree = verify_path_with(dir, VerifyOptions::default()).unwrap();
    assert_eq!(tree.first_problem(), None);
    tree.partitions.iter().map(|p| p.report.segments).sum()
}

/// `segment_bytes` 4096 (the smallest taken), with batches sent many times larger and records
/// that alone nearly fill a segment: the writer cuts batches a segment holds, a record no
/// segment could hold is refused at send with a typed error (the partition stays online),
/// and everything acknowledged survives a reopen, dense and verifiable.
#[test]
fn batches_larger_than_a_segment_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let value = |round: usize, i: usize| {
        let len = if i % 50 == 7 { 3900 } else { 40 + i % 90 };
        format!("{round}-{i}-{}", "x".repeat(len))
    };
    let mut want: Vec<String> = Vec::new();
    {
        let broker = Broker::open(dir.path()).unwrap();
        let topic = broker
            .create_persisted_topic::<(), String>(
                "t",
                TopicConfig::new(1).records_in_memory(16),
                PersistConfig::new()
                    .segment_bytes(4096)
                    .flush(FlushPolicy::Os),
            )
            .unwrap();
        let p = broker.producer::<(), String>();
        for round in 0..4 {
            let mut batch: Vec<_> = (0..400)
                .map(|i| Record::new("t", value(round, i)).partition(0))
                .collect();
            want.extend((0..400).map(|i| value(round, i)));
            assert_eq!(p.send_batch(&mut batch).unwrap(), 400);
            // The largest record a segment's batch holds, whatever its encoding's varints
            // (a batch header of 61 bytes, at most 36 bytes of record overhead).
            let largest = "z".repeat(4096 - 61 - 36);
            p.send(Record::new("t", largest.clone()).partition(0))
                .unwrap();
            want.push(largest);
            // Within max_message_bytes (1 MiB by default) but larger than a segment holds.
            for len in [4096 - 61 - 35, 4096, 5000, 100_000] {
                let refused = p
                    .send(Record::new("t", "y".repeat(len)).partition(0))
                    .map_err(|e| e.into_error());
                assert!(
                    matches!(refused, Err(Error::RecordTooLarge { .. })),
                    "{len} bytes: {refused:?}"
                );
            }
        }
        topic.flush().unwrap();
        let got = read_partition(&broker, 0);
        assert_eq!(got.len(), want.len());
        for (i, (o, v)) in got.iter().enumerate() {
            assert_eq!((*o, v), (i as u64, &want[i]), "offset {i}");
        }
        broker.close().unwrap();
    }
    // About 190 KB of records: dozens of segments.
    assert!(verify_clean(dir.path()) > 20);
    let broker = Broker::open(dir.path()).unwrap();
    assert!(broker
        .recovery_reports()
        .iter()
        .all(|r| r.report.is_clean()));
    broker.open_topic::<(), String>("t").unwrap();
    let got = read_partition(&broker, 0);
    assert_eq!(got.len(), want.len());
    for (i, (o, v)) in got.iter().enumerate() {
        assert_eq!((*o, v), (i as u64, &want[i]), "offset {i} after reopen");
    }
    broker.close().unwrap();
    verify_clean(dir.path());
}
