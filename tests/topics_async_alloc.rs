//! No allocation per record on the async paths once warmed up: `send_async(..).await` on
//! an in-memory topic (acks = 1: one replica), `Consumer::stream` (its buffer reused), and
//! a consumer task that parks in `poll_async` for every record (its registrations kept
//! in the consumer); measured with a counting global allocator, in one test (the windows
//! are process-wide).

mod alloc_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use alloc_common::allocations_during;
use futures::StreamExt;
use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{Consumer, ConsumerConfig, OffsetReset};
use logbus::producer::{Acks, Producer, ProducerConfig, Record};

const N: u64 = 10_000;

#[test]
fn no_allocation_per_record() {
    send_async_awaited_and_stream_allocate_nothing_per_record();
    a_task_parking_for_every_record_allocates_nothing_per_record();
}

fn topic() -> (Broker, Producer<(), u64>, Consumer<(), u64>) {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>("t", TopicConfig::new(1).records_in_memory(1 << 15))
        .unwrap();
    let producer = broker
        .producer_with_config::<(), u64>(ProducerConfig::new().acks(Acks::Leader))
        .unwrap();
    let mut consumer = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest),
        )
        .unwrap();
    consumer.assign(&[TopicPartition::new("t", 0)]).unwrap();
    (broker, producer, consumer)
}

fn send_async_awaited_and_stream_allocate_nothing_per_record() {
    let (_broker, producer, mut consumer) = topic();
    let round = |producer: &Producer<(), u64>, consumer: &mut Consumer<(), u64>, base: u64| {
        futures::executor::block_on(async {
            for v in base..base + N {
                producer.send_async(Record::new("t", v)).await.unwrap();
            }
            let mut stream = consumer.stream();
            let mut sum = 0;
            for _ in 0..N {
                sum += stream.next().await.unwrap().unwrap().value;
            }
            assert_eq!(sum, (base..base + N).sum::<u64>());
            drop(stream);
            consumer.commit_sync().unwrap();
        });
    };
    round(&producer, &mut consumer, 0); // warm-up
    let allocations = allocations_during(|| round(&producer, &mut consumer, N));
    // The stream's buffer is its own (one per stream), grown a few times at most.
    assert!(
        allocations <= 16,
        "{allocations} allocations for {N} records sent and streamed"
    );
}

fn a_task_parking_for_every_record_allocates_nothing_per_record() {
    let (_broker, producer, mut consumer) = topic();
    let consumed = Arc::new(AtomicU64::new(0));
    let round = |consumer: &mut Consumer<(), u64>, base: u64| {
        let c = Arc::clone(&consumed);
        let p = producer.clone();
        let sender = std::thread::spawn(move || {
            for v in base..base + 1000 {
                p.send(Record::new("t", v)).unwrap();
                // One record at a time: the consumer parks before each.
                while c.load(Ordering::SeqCst) <= v {
                    std::thread::yield_now();
                }
            }
        });
        futures::executor::block_on(async {
            let mut stream = consumer.stream();
            for v in base..base + 1000 {
                assert_eq!(stream.next().await.unwrap().unwrap().value, v);
                consumed.store(v + 1, Ordering::SeqCst);
            }
        });
        sender.join().unwrap();
    };
    round(&mut consumer, 0); // warm-up
    let allocations = allocations_during(|| round(&mut consumer, 1000));
    // The sender thread's spawn (a few), the stream's buffer: nothing per park.
    assert!(
        allocations <= 32,
        "{allocations} allocations for 1000 records, each awaited by a parked task"
    );
}
