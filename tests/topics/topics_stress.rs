//! Stress: 4 producers, 3 groups of 2 manually assigned consumers committing after every
//! poll, on a `Block` and on a `DropOldest` topic.
//!
//! `Block`: nothing is lost; each group sees every record of its partitions exactly once,
//! offsets dense from 0, each producer's records in its send order. `DropOldest`: producers
//! never wait; per partition, what a consumer read plus what it was told it skipped is
//! exactly the partition's log end. Producers mix `send_batch`, `send_iter` and `send`;
//! group 1 reads with the borrowing `poll_with`, the others with `poll_with` + `to_record`.
//!
//! Each test sends 1 000 000 records (about 3 s for both in a debug build on 2 cores);
//! `LOGBUS_STRESS_RECORDS` overrides the count.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::{Payload, ProducerConfig, Record};

const PRODUCERS: u64 = 4;
const PARTITIONS: u32 = 6;
const GROUPS: usize = 3;

fn count(default: u64) -> u64 {
    std::env::var("LOGBUS_STRESS_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// What one consumer saw.
#[derive(Default)]
struct Seen {
    /// Per partition: records read, the next offset expected, the last sequence per producer.
    read: HashMap<u32, u64>,
    next: HashMap<u32, u64>,
    last_seq: HashMap<(u32, u64), u64>,
    sum: u128,
    skipped: HashMap<u32, u64>,
}

fn run(overflow: Overflow, total: u64) {
    let broker = Broker::in_memory();
    let topic = "stress";
    broker
        .create_topic::<(), u64>(
            topic,
            TopicConfig::new(PARTITIONS)
                .records_in_memory(256)
                .overflow(overflow),
        )
        .unwrap();
    let block = overflow == Overflow::Block;
    let per_producer = total / PRODUCERS;
    let total = per_producer * PRODUCERS;
    let producers_done = Arc::new(AtomicBool::new(false));

    // Consumers first: their groups register (and gate, under Block) before any record.
    let mut consumers = Vec::new();
    for g in 0..GROUPS {
        for half in 0..2u32 {
            let mut c = broker
                .consumer::<(), u64>(
                    ConsumerConfig::new()
                        .group_id(format!("group-{g}"))
                        .client_id(format!("group-{g}-{half}"))
                        .auto_offset_reset(OffsetReset::Earliest)
                        .max_poll_records(100 + 50 * g),
                )
                .unwrap();
            let mine: Vec<_> = (0..PARTITIONS)
                .filter(|p| p % 2 == half)
                .map(|p| TopicPartition::new(topic, p))
                .collect();
            c.assign(&mine).unwrap();
            let done = Arc::clone(&producers_done);
            let broker = broker.clone();
            consumers.push((
                g,
                thread::spawn(move || {
                    let mut seen = Seen::default();
                    let mut batch = Vec::with_capacity(256);
                    loop {
                        // Read the flag before polling: once set and nothing is left, done.
                        let finished = done.load(Ordering::Acquire);
                        let mut check = |partition: u32, offset: u64, value: u64| {
                            let next = seen.next.entry(partition).or_insert(0);
                            if block {
                                assert_eq!(offset, *next, "a gap under Block");
                            } else {
                                assert!(offset >= *next, "out of order");
                            }
                            *next = offset + 1;
                            *seen.read.entry(partition).or_insert(0) += 1;
                            let (producer, seq) = (value >> 32, value & 0xffff_ffff);
                            if let Some(last) = seen.last_seq.insert((partition, producer), seq) {
                                assert!(seq > last, "producer {producer} reordered");
                            }
                            seen.sum += u128::from(value);
                        };
                        // Group 1 reads through the borrowing poll, the others by value.
                        let n = if g == 1 {
                            c.poll_with(256, Duration::from_millis(5), |r| {
                                check(r.partition, r.offset, *r.value)
                            })
                            .unwrap()
                        } else {
                            batch.clear();
                            let n = c
                                .poll_with(256, Duration::from_millis(5), |r| {
                                    batch.push(r.to_record())
                                })
                                .unwrap();
                            for r in &batch {
                                check(r.partition, r.offset, r.value);
                            }
                            n
                        };
                        if n > 0 {
                            c.commit_sync().unwrap();
                        }
                        if finished && n == 0 {
                            let ends = broker.describe_topic(topic).unwrap();
                            let all_read = c.assignment().iter().all(|tp| {
                                c.position(tp).unwrap()
                                    == ends.partitions[tp.partition as usize].log_end
                            });
                            if all_read {
                                break;
                            }
                        }
                    }
                    for tp in c.assignment() {
                        seen.skipped.insert(tp.partition, c.metrics().skipped(&tp));
                    }
                    seen
                }),
            ));
        }
    }

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|id| {
            let p = broker
                .producer_with_config::<(), u64>(ProducerConfig::new().sticky_batch(37))
                .unwrap();
            thread::spawn(move || {
                let mut batch = Vec::with_capacity(64);
                let mut seq = 0;
                while seq < per_producer {
                    if seq % 3 == 0 {
                        // Most records through send_batch, some through send_iter, the rest
                        // one by one.
                        let n = 64.min(per_producer - seq);
                        batch.extend((seq..seq + n).map(|s| Record::new(topic, id << 32 | s)));
                        assert_eq!(p.send_batch(&mut batch).unwrap(), n as usize);
                        seq += n;
                    } else if seq % 3 == 1 {
                        let n = 16.min(per_producer - seq);
                        let partition = (seq / 3 % u64::from(PARTITIONS)) as u32;
                        let sent = p
                            .partition(topic, partition)
                            .unwrap()
                            .send_iter((seq..seq + n).map(|s| Payload::new(id << 32 | s)))
                            .unwrap();
                        assert_eq!(sent, n as usize);
                        seq += n;
                    } else {
                        p.send(Record::new(topic, id << 32 | seq)).unwrap();
                        seq += 1;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    producers_done.store(true, Ordering::Release);

    let ends = broker.describe_topic(topic).unwrap();
    let log_end_total: u64 = ends.partitions.iter().map(|p| p.log_end).sum();
    assert_eq!(log_end_total, total, "every send got an offset");
    let expected_sum: u128 = (0..PRODUCERS)
        .map(|id| {
            (0..per_producer)
                .map(|s| u128::from(id << 32 | s))
                .sum::<u128>()
        })
        .sum();

    let mut per_group: Vec<(u64, u64, u128)> = vec![(0, 0, 0); GROUPS];
    for (g, h) in consumers {
        let seen = h.join().unwrap();
        for (&p, &end) in ends.partitions.iter().map(|i| (&i.partition, &i.log_end)) {
            if let Some(&skipped) = seen.skipped.get(&p) {
                let read = seen.read.get(&p).copied().unwrap_or(0);
                assert_eq!(
                    read + skipped,
                    end,
                    "partition {p}: read + skipped = log end"
                );
                if block {
                    assert_eq!(skipped, 0, "nothing skipped under Block");
                }
            }
        }
        let g = &mut per_group[g];
        g.0 += seen.read.values().sum::<u64>();
        g.1 += seen.skipped.values().sum::<u64>();
        g.2 += seen.sum;
    }
    for (g, (read, skipped, sum)) in per_group.into_iter().enumerate() {
        println!("{overflow:?}: group {g} read {read}, skipped {skipped} of {total}");
        assert_eq!(read + skipped, total, "group {g}");
        if block {
            assert_eq!(read, total, "group {g} read everything");
            assert_eq!(sum, expected_sum, "group {g} read each record once");
        }
    }
}

#[test]
fn block_stress() {
    run(Overflow::Block, count(1_000_000));
}

#[test]
fn drop_oldest_stress() {
    run(Overflow::DropOldest, count(1_000_000));
}
