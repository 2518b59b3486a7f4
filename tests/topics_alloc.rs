//! No allocation per record in steady state: `Producer::send` (no key, no headers, a
//! `&'static str` topic) and `Consumer::poll_with` cloning into a vector with room, each poll
//! followed by `commit_sync`; `Producer::send_batch` from a reused vector, and
//! `Consumer::poll` (one vector per poll, sized once); and `PartitionProducer::send_iter` with
//! `Consumer::poll_with`; measured with a counting global allocator, in one test (the
//! windows are process-wide).

mod alloc_common;

use std::time::Duration;

use alloc_common::allocations_during;
use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{Consumer, ConsumerConfig, OffsetReset};
use logbus::producer::{Payload, Producer, Record};

const N: u64 = 10_000;

/// One test: the counting windows are process-wide, so a second test in this binary (or
/// the harness reporting on it) would allocate inside them.
#[test]
fn no_allocation_per_record() {
    produce_and_poll_with_to_record_allocate_nothing_per_record();
    send_batch_and_poll_allocate_nothing_per_record();
    send_iter_and_poll_with_allocate_nothing_per_record();
}

/// A broker with topic `t` of `partitions`, a producer, and a consumer in group `g`
/// assigned `t`'s partition `assigned` from the earliest offset.
fn topic_of(
    overflow: Overflow,
    partitions: u32,
    assigned: u32,
) -> (Broker, Producer<(), u64>, Consumer<(), u64>) {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>(
            "t",
            TopicConfig::new(partitions)
                .records_in_memory(1 << 15)
                .overflow(overflow),
        )
        .unwrap();
    let producer = broker.producer::<(), u64>();
    let mut consumer = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    consumer
        .assign(&[TopicPartition::new("t", assigned)])
        .unwrap();
    (broker, producer, consumer)
}

fn produce_and_poll_with_to_record_allocate_nothing_per_record() {
    for overflow in [Overflow::Block, Overflow::DropOldest] {
        let (_broker, producer, mut consumer) = topic_of(overflow, 1, 0);
        let mut out = Vec::with_capacity(N as usize);
        // Warm-up: the producer caches the topic; the consumer's first poll of a full run
        // sizes the buffer it copies records into where it cannot lend them in place.
        for i in 0..1000 {
            producer.send(Record::new("t", i)).unwrap();
        }
        let warm = consumer
            .poll_with(1000, Duration::ZERO, |r| out.push(r.to_record()))
            .unwrap();
        assert_eq!(warm, 1000);
        consumer.commit_sync().unwrap();
        out.clear();

        let produced = allocations_during(|| {
            for i in 1..=N {
                producer.send(Record::new("t", i)).unwrap();
            }
        });
        let mut read = 0;
        let polled = allocations_during(|| {
            while read < N as usize {
                read += consumer
                    .poll_with(1000, Duration::ZERO, |r| out.push(r.to_record()))
                    .unwrap();
                consumer.commit_sync().unwrap();
            }
        });
        assert_eq!(read, N as usize);
        assert_eq!(out.last().unwrap().value, N);
        assert_eq!(
            produced, 0,
            "{overflow:?}: allocations while producing {N} records"
        );
        assert_eq!(
            polled, 0,
            "{overflow:?}: allocations while polling {N} records"
        );
    }
}

/// `send_batch` of 64 records from a reused vector allocates nothing; `poll`, followed by
/// `commit_sync`, allocates nothing once the records of the poll before were dropped (they
/// hand their buffer back to the consumer).
fn send_batch_and_poll_allocate_nothing_per_record() {
    const BATCH: u64 = 64;
    for overflow in [Overflow::Block, Overflow::DropOldest] {
        let (_broker, producer, mut consumer) = topic_of(overflow, 1, 0);
        let mut batch = Vec::with_capacity(BATCH as usize);
        // Warm-up: the producer caches the topic and sizes its run buffers.
        batch.extend((0..BATCH).map(|v| Record::new("t", v)));
        producer.send_batch(&mut batch).unwrap();
        let warm = consumer.poll(Duration::ZERO).unwrap();
        assert_eq!(warm.len(), BATCH as usize);
        drop(warm);
        consumer.commit_sync().unwrap();

        let (mut sent, mut read, mut sum, mut polls) = (BATCH, 0u64, 0u64, 0usize);
        let (mut produced, mut allocated) = (0, 0);
        // Whole batches: about N records.
        let total = N / BATCH * BATCH;
        while sent < BATCH + total {
            produced += allocations_during(|| {
                batch.extend((sent..sent + BATCH).map(|v| Record::new("t", v)));
                producer.send_batch(&mut batch).unwrap();
            });
            sent += BATCH;
            let mut records = None;
            allocated += allocations_during(|| {
                records = Some(consumer.poll(Duration::ZERO).unwrap());
                consumer.commit_sync().unwrap();
            });
            let records = records.unwrap();
            polls += 1;
            read += records.len() as u64;
            sum += records.iter().map(|r| r.value).sum::<u64>();
        }
        assert_eq!(read, total, "{overflow:?}");
        assert_eq!(sum, (BATCH..BATCH + total).sum::<u64>(), "{overflow:?}");
        assert_eq!(
            produced, 0,
            "{overflow:?}: allocations while sending {total} records in batches of {BATCH}"
        );
        assert_eq!(
            allocated, 0,
            "{overflow:?}: allocations in {polls} polls of {BATCH} records"
        );
    }
}

fn send_iter_and_poll_with_allocate_nothing_per_record() {
    for overflow in [Overflow::Block, Overflow::DropOldest] {
        let (_broker, producer, mut consumer) = topic_of(overflow, 2, 1);
        // Warm-up: the producer caches the topic and grows its run; the consumer's first
        // poll grows its buffers to the poll size used below.
        producer
            .partition("t", 1)
            .unwrap()
            .send_iter((0..1000).map(Payload::new))
            .unwrap();
        let mut read = 0;
        while read < 1000 {
            read += consumer.poll_with(1000, Duration::ZERO, |_| ()).unwrap();
        }
        consumer.commit_sync().unwrap();

        let produced = allocations_during(|| {
            for i in 0..N / 100 {
                let from = 1000 + i * 100;
                let sent = producer
                    .partition("t", 1)
                    .unwrap()
                    .send_iter((from..from + 100).map(|v| Payload::new(v).timestamp(5)))
                    .unwrap();
                assert_eq!(sent, 100);
            }
        });
        let mut read = 0;
        let mut last = 0;
        let polled = allocations_during(|| {
            while read < N as usize {
                read += consumer
                    .poll_with(1000, Duration::ZERO, |r| last = *r.value)
                    .unwrap();
                consumer.commit_sync().unwrap();
            }
        });
        assert_eq!(read, N as usize);
        assert_eq!(last, 1000 + N - 1);
        assert_eq!(
            produced, 0,
            "{overflow:?}: allocations while sending {N} records with send_iter"
        );
        assert_eq!(
            polled, 0,
            "{overflow:?}: allocations while polling {N} records with poll_with"
        );
    }
}
