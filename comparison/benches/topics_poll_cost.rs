//! What one consumer poll costs, apart from the producer: one thread sends a batch to a
//! `Block` topic's only partition (`send_to`), then its group consumer reads it
//! (`poll_with`) and commits (`commit_sync`), in lockstep, so every poll reads exactly one
//! batch and never waits. Meant for callgrind, whose counts do not depend on the load (in
//! `topics_vs_peers` under callgrind the threads run one at a time, so each poll there
//! lends a whole ring, not the few dozen records it lends in real runs):
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench topics_poll_cost --no-run
//! POLL_COST_BATCH=64 valgrind --tool=callgrind --callgrind-out-file=/tmp/pc.out \
//!     target/release/deps/topics_poll_cost-<hash> --bench
//! callgrind_annotate --inclusive=yes /tmp/pc.out | grep -E 'poll_with|commit_sync|send_to'
//! ```
//!
//! Divide `poll_with`'s and `commit_sync`'s inclusive counts by the polls printed; two
//! batch sizes separate the per-poll from the per-record part. Without valgrind it prints
//! nanoseconds per poll (single-threaded: no cache line moves between cores).

use std::hint::black_box;
use std::time::{Duration, Instant};

use logbus::broker::Broker;
use logbus::producer::Payload;
use logbus_comparison::{env_u64 as env, one_partition_in_lockstep};

fn main() {
    let batch = env("POLL_COST_BATCH", 64).clamp(1, 1024);
    let polls = env("POLL_COST_POLLS", 20_000);
    let broker = Broker::in_memory();
    let (mut c, p) = one_partition_in_lockstep(&broker);
    let mut sum = 0u64;
    let mut v = 0u64;
    let start = Instant::now();
    for _ in 0..polls {
        let from = v;
        v += batch;
        p.send_to(
            "t",
            0,
            (from..v).map(|x| Payload::new(x).timestamp(x as i64)),
        )
        .unwrap();
        let n = c
            .poll_with(1024, Duration::ZERO, |r| {
                sum = sum.wrapping_add(*r.value ^ r.timestamp as u64);
            })
            .unwrap();
        assert_eq!(n as u64, batch);
        c.commit_sync().unwrap();
    }
    let took = start.elapsed();
    black_box(sum);
    println!(
        "polls {polls}, batch {batch}: {:.1} ns per send + poll + commit",
        took.as_nanos() as f64 / polls as f64
    );
}
