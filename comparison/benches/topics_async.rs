//! The async API against the sync one, 1 → 1: one partition, a producer and a consumer.
//! Ours: a producer task (`send_async(..).await` per record) and a consumer task
//! (`poll_async().await`, then `commit_sync`) on a tokio multi-thread runtime of two
//! workers. Theirs (the sync path): a producer thread (`send` per record) and a consumer
//! thread (`poll`, then `commit_sync`). Same topic (one `Block` partition of
//! `ASYNC_BENCH_CAPACITY` records in memory), same group consumer, same
//! `max_poll_records` (`ASYNC_BENCH_MAX_POLL`); both readers check the count and the
//! ordered checksum of every record. Runs interleaved (A B A B) and prints the row
//! `async1to1` (`ROW|...`, ratio async / sync: above 1 favours the async path).
//!
//! ```sh
//! scripts/bench -p logbus-comparison --bench topics_async
//! LOGBUS_BENCH_LOSE=ours ASYNC_BENCH_RECORDS=20000 ASYNC_BENCH_PAIRS=1 \
//!     cargo bench -p logbus-comparison --bench topics_async   # must panic
//! ```

use std::thread;
use std::time::{Duration, Instant};

use logbus::broker::{Broker, Overflow, TopicConfig, TopicPartition};
use logbus::consumer::{Consumer, ConsumerConfig, OffsetReset};
use logbus::producer::Record;
use logbus_comparison::{env_u64, env_usize, print_row, Pairs, Side, Source, Stall, Tally};

const ROW: &str = "async1to1";

/// A fresh broker with the topic, its group consumer, and a producer.
fn setup(capacity: usize, max_poll: usize) -> (Broker, Consumer<(), u64>) {
    let broker = Broker::in_memory();
    broker
        .create_topic::<(), u64>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(capacity)
                .overflow(Overflow::Block),
        )
        .unwrap();
    let mut consumer = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(max_poll),
        )
        .unwrap();
    consumer.assign(&[TopicPartition::new("t", 0)]).unwrap();
    (broker, consumer)
}

/// Records a second through the async path.
fn ours(rt: &tokio::runtime::Runtime, n: u64, capacity: usize, max_poll: usize) -> f64 {
    let (broker, mut consumer) = setup(capacity, max_poll);
    let producer = broker.producer::<(), u64>();
    let want = Tally::of(0..n);
    let start = Instant::now();
    let tally = rt.block_on(async move {
        let sender = tokio::spawn(async move {
            for v in Source::all(Side::Ours, n) {
                producer.send_async(Record::new("t", v)).await.unwrap();
            }
        });
        let reader = tokio::spawn(async move {
            let mut tally = Tally::default();
            let mut stall = Stall::new();
            while tally.count < n {
                // `poll_async` is cancel safe: the timeout only lets the stall check run.
                let got =
                    match tokio::time::timeout(Duration::from_millis(100), consumer.poll_async())
                        .await
                    {
                        Ok(records) => records.unwrap(),
                        Err(_) => {
                            stall.after(0, Side::Ours, ROW, tally.count, n);
                            continue;
                        }
                    };
                for r in got.iter() {
                    tally.add(r.value);
                }
                consumer.commit_sync().unwrap();
                stall.after(got.len(), Side::Ours, ROW, tally.count, n);
            }
            tally
        });
        sender.await.unwrap();
        reader.await.unwrap()
    });
    let secs = start.elapsed().as_secs_f64();
    tally.assert_in_order(Side::Ours, ROW, &want);
    n as f64 / secs
}

/// Records a second through the sync path (threads).
fn theirs(n: u64, capacity: usize, max_poll: usize) -> f64 {
    let (broker, mut consumer) = setup(capacity, max_poll);
    let producer = broker.producer::<(), u64>();
    let want = Tally::of(0..n);
    let start = Instant::now();
    let sender = thread::spawn(move || {
        for v in Source::all(Side::Theirs, n) {
            producer.send(Record::new("t", v)).unwrap();
        }
    });
    let reader = thread::spawn(move || {
        let mut tally = Tally::default();
        let mut stall = Stall::new();
        while tally.count < n {
            let got = consumer.poll(Duration::from_millis(100)).unwrap();
            for r in got.iter() {
                tally.add(r.value);
            }
            consumer.commit_sync().unwrap();
            stall.after(got.len(), Side::Theirs, ROW, tally.count, n);
        }
        tally
    });
    sender.join().unwrap();
    let tally = reader.join().unwrap();
    let secs = start.elapsed().as_secs_f64();
    tally.assert_in_order(Side::Theirs, ROW, &want);
    n as f64 / secs
}

fn main() {
    let n = env_u64("ASYNC_BENCH_RECORDS", 1_000_000);
    let pairs = env_usize("ASYNC_BENCH_PAIRS", 7);
    let capacity = env_usize("ASYNC_BENCH_CAPACITY", 4096);
    let max_poll = env_usize("ASYNC_BENCH_MAX_POLL", 500);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let p = Pairs::interleave(
        pairs,
        || ours(&rt, n, capacity, max_poll),
        || theirs(n, capacity, max_poll),
    );
    for (i, (a, b)) in p.ours.iter().zip(&p.theirs).enumerate() {
        println!(
            "pair {i}: async {:.2} M/s, sync {:.2} M/s, ratio {:.2}",
            a / 1e6,
            b / 1e6,
            a / b
        );
    }
    println!(
        "medians: async {:.2} M/s, sync {:.2} M/s",
        p.ours_median() / 1e6,
        p.theirs_median() / 1e6
    );
    print_row(ROW, "sync threads", &p);
}
