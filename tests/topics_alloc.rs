//! No allocation per record in steady state: `Producer::send` (no key, no headers, a
//! `&'static str` topic) and `Consumer::poll_into` into a vector with room, each poll
//! followed by `commit_sync`, measured with a counting global allocator.

mod alloc_common;

use std::time::Duration;

use alloc_common::allocations_during;
use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::producer::Record;

const N: u64 = 10_000;

#[test]
fn produce_and_poll_into_allocate_nothing_per_record() {
    for overflow in [Overflow::Block, Overflow::DropOldest] {
        let broker = Broker::in_memory();
        broker
            .create_topic::<(), u64>(
                "t",
                TopicConfig::new(1)
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
        consumer.assign(&[TopicPartition::new("t", 0)]).unwrap();
        let mut out = Vec::with_capacity(N as usize);
        // Warm-up: the producer caches the topic, the consumer's first poll.
        producer.send(Record::new("t", 0)).unwrap();
        consumer.poll_into(&mut out, 1, Duration::ZERO).unwrap();
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
                read += consumer.poll_into(&mut out, 1000, Duration::ZERO).unwrap();
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
