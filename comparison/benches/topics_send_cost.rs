//! What one `send_slice` costs, apart from the consumer: one thread sends a batch of
//! `SEND_COST_BATCH` records to a `Block` topic's only partition (`send_slice`), then its
//! group consumer reads it (`poll_with`) and commits (`commit_sync`), in lockstep, so every
//! send finds room and never waits. Meant for callgrind, whose counts do not depend on the
//! load (the 1 → 1 row of `topics_vs_peers` under callgrind runs its threads one at a time):
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench topics_send_cost --no-run
//! SEND_COST_BATCH=64 valgrind --tool=callgrind --callgrind-out-file=/tmp/sc.out \
//!     target/release/deps/topics_send_cost-<hash> --bench
//! callgrind_annotate --inclusive=yes /tmp/sc.out | grep -E 'send_slice'
//! ```
//!
//! The reader asserts the count and ordered checksum of every record at the end
//! (`LOGBUS_BENCH_LOSE=ours` skips one record: the run must then panic).
//!
//! Divide `send_slice`'s inclusive count by the sends printed; two batch sizes separate
//! the per-call from the per-record part. Without valgrind it prints nanoseconds per send
//! (single-threaded: no cache line moves between cores; `SEND_COST_POLL_EVERY=k` polls
//! once every `k` sends, so that the sends run back to back).

use std::hint::black_box;
use std::time::{Duration, Instant};

use logbus::broker::Broker;
use logbus_comparison::{env_u64 as env, one_partition_in_lockstep, Side, Source, Tally};

fn main() {
    let batch = env("SEND_COST_BATCH", 64).clamp(1, 1024);
    let sends = env("SEND_COST_SENDS", 20_000);
    // At most a ring's worth between polls, so that no send finds the ring full.
    let every = env("SEND_COST_POLL_EVERY", 1).clamp(1, (1024 / batch).max(1));
    let broker = Broker::in_memory();
    let (mut c, p) = one_partition_in_lockstep(&broker);
    let total = sends * batch;
    let want = Tally::of(0..total);
    let mut src = Source::all(Side::Ours, total);
    let mut values = vec![0u64; batch as usize];
    let mut records = vec![(0i64, 0u64); batch as usize];
    let mut tally = Tally::default();
    let mut in_send = Duration::ZERO;
    let to = p.partition("t", 0).unwrap();
    for s in 0..sends {
        let k = src.fill(&mut values);
        for (r, &v) in records.iter_mut().zip(&values[..k]) {
            *r = (v as i64, v);
        }
        let t = Instant::now();
        let sent = to.send_slice(black_box(&records[..k])).unwrap();
        in_send += t.elapsed();
        assert_eq!(sent, k);
        if (s + 1) % every == 0 || s + 1 == sends {
            c.poll_with(1024, Duration::ZERO, |r| tally.add(*r.value))
                .unwrap();
            c.commit_sync().unwrap();
        }
    }
    black_box(&tally);
    tally.assert_in_order(Side::Ours, "topics_send_cost", &want);
    println!(
        "sends {sends}, batch {batch}: {:.1} ns per send_slice",
        in_send.as_nanos() as f64 / sends as f64
    );
}
