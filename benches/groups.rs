//! Rebalance cost: the time from a group member leaving to its partitions being consumed
//! by another member, for 1, 8, 64 and 1024 partitions, eager (range) against cooperative
//! (cooperative-sticky). Goal: under 1 ms for 64 partitions.
//!
//! Both members live on the bench thread, so the figure is the protocol's cost (leave with
//! its commit, rejoin, assignment, taking the partitions with their committed offsets, and
//! reading one record from each), without the wake-up of a parked thread (a few µs).
//!
//! ```sh
//! cargo bench --bench groups
//! ```

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use logbus::group::{CooperativeStickyAssignor, RangeAssignor};
use logbus::{Broker, ConsumerConfig, OffsetReset, Overflow, Record, TopicConfig};

fn config(client: &str, cooperative: bool) -> ConsumerConfig {
    let c = ConsumerConfig::new()
        .group_id("bench")
        .client_id(client)
        .auto_offset_reset(OffsetReset::Latest)
        .max_poll_records(1 << 16);
    if cooperative {
        c.assignor(CooperativeStickyAssignor)
    } else {
        c.assignor(RangeAssignor)
    }
}

/// One measured hand-off: a member `a` (joined first, so it owns partitions under every
/// assignor) closes; `z` polls until it has read a record from every partition `a` had.
fn handoff(broker: &Broker, partitions: u32, cooperative: bool) -> Duration {
    let mut leaver = broker
        .consumer::<(), u64>(config("a", cooperative))
        .unwrap();
    leaver.subscribe(&["t"]).unwrap();
    leaver.poll(Duration::ZERO).unwrap();
    let mut stayer = broker
        .consumer::<(), u64>(config("z", cooperative))
        .unwrap();
    stayer.subscribe(&["t"]).unwrap();
    while leaver.generation() != stayer.generation()
        || leaver.assignment().len() + stayer.assignment().len() != partitions as usize
    {
        leaver.poll(Duration::ZERO).unwrap();
        stayer.poll(Duration::ZERO).unwrap();
    }
    let moving = leaver.assignment();
    assert!(!moving.is_empty());
    let producer = broker.producer::<(), u64>();
    for tp in &moving {
        producer
            .send(Record::new("t", 1).partition(tp.partition))
            .unwrap();
    }
    let mut left = moving.len();
    let mut seen = vec![false; partitions as usize];
    let start = Instant::now();
    drop(leaver);
    while left > 0 {
        for r in stayer.poll(Duration::ZERO).unwrap() {
            let s = &mut seen[r.partition as usize];
            if !*s {
                *s = true;
                left -= 1;
            }
        }
    }
    start.elapsed()
}

fn rebalance(c: &mut Criterion) {
    let mut g = c.benchmark_group("groups/member_leaves_partitions_consumed");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for partitions in [1u32, 8, 64, 1024] {
        for cooperative in [false, true] {
            let broker = Broker::in_memory();
            broker
                .create_topic::<(), u64>(
                    "t",
                    TopicConfig::new(partitions)
                        .records_in_memory(64)
                        .overflow(Overflow::DropOldest),
                )
                .unwrap();
            let name = if cooperative { "cooperative" } else { "eager" };
            g.bench_with_input(BenchmarkId::new(name, partitions), &partitions, |b, &n| {
                b.iter_custom(|iters| (0..iters).map(|_| handoff(&broker, n, cooperative)).sum())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, rebalance);
criterion_main!(benches);
