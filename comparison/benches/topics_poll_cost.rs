//! What one consumer poll costs, apart from the producer: one thread sends a batch to a
//! `Block` topic's only partition (`PartitionProducer::send_iter`), then its group consumer reads it
//! (`poll_with`) and commits (`commit_sync`), in lockstep, so every poll reads exactly one
//! batch and never waits. Meant for callgrind, whose counts do not depend on the load (in
//! `topics_vs_peers` under callgrind the threads run one at a time, so each poll there
//! lends a whole ring, not the few dozen records it lends in real runs):
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench topics_poll_cost --no-run
//! POLL_COST_BATCH=64 valgrind --tool=callgrind --callgrind-out-file=/tmp/pc.out \
//!     target/release/deps/topics_poll_cost-<hash> --bench
//! callgrind_annotate --inclusive=yes /tmp/pc.out | grep -E 'poll_with|commit_sync|send_iter'
//! ```
//!
//! The reader asserts that each poll read the batch just sent, and at the end the count and
//! ordered checksum of every record (`LOGBUS_BENCH_LOSE=ours` skips one send's middle
//! record: the run must then panic).
//!
//! Divide `poll_with`'s and `commit_sync`'s inclusive counts by the polls printed; two
//! batch sizes separate the per-poll from the per-record part. Without valgrind it prints
//! nanoseconds per poll (single-threaded: no cache line moves between cores).

use std::hint::black_box;
use std::time::{Duration, Instant};

use logbus::broker::Broker;
use logbus::producer::Payload;
use logbus_comparison::{env_u64 as env, one_partition_in_lockstep, Side, Source, Tally};

fn main() {
    let batch = env("POLL_COST_BATCH", 64).clamp(1, 1024);
    let polls = env("POLL_COST_POLLS", 20_000);
    let broker = Broker::in_memory();
    let (mut c, p) = one_partition_in_lockstep(&broker);
    let total = polls * batch;
    let want = Tally::of(0..total);
    let mut src = Source::all(Side::Ours, total);
    let mut values = vec![0u64; batch as usize];
    let mut tally = Tally::default();
    let to = p.partition("t", 0).unwrap();
    let start = Instant::now();
    for _ in 0..polls {
        let k = src.fill(&mut values);
        to.send_iter(
            values[..k]
                .iter()
                .map(|&x| Payload::new(x).timestamp(x as i64)),
        )
        .unwrap();
        let n = c
            .poll_with(1024, Duration::ZERO, |r| tally.add(*r.value))
            .unwrap();
        assert_eq!(
            n, k,
            "topics_poll_cost: a poll read {n} records, not the {k} just sent"
        );
        c.commit_sync().unwrap();
    }
    let took = start.elapsed();
    black_box(&tally);
    tally.assert_in_order(Side::Ours, "topics_poll_cost", &want);
    println!(
        "polls {polls}, batch {batch}: {:.1} ns per send + poll + commit",
        took.as_nanos() as f64 / polls as f64
    );
}
