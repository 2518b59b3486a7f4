//! What the Kafka-style API costs per record: one thread sends `Record`s to a `Block`
//! topic's only partition, singly (`send`, `RECORD_COST_BATCH=1`) or in `send_batch` calls
//! of `RECORD_COST_BATCH` records, then its group consumer reads them (`poll`) and commits
//! (`commit_sync`), once every `RECORD_COST_PER_POLL` records, in lockstep, so no send
//! waits. Meant for callgrind, whose counts do not depend on the load:
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench topics_record_cost --no-run
//! RECORD_COST_BATCH=1 valgrind --tool=callgrind --callgrind-out-file=/tmp/rc.out \
//!     target/release/deps/topics_record_cost-<hash> --bench
//! callgrind_annotate --inclusive=yes /tmp/rc.out | grep -E 'send|poll|commit_sync'
//! ```
//!
//! Divide the inclusive counts of `send`/`send_batch`, `poll` and `commit_sync` by the
//! records printed. Without valgrind it prints nanoseconds per record.

use std::hint::black_box;
use std::time::{Duration, Instant};

use logbus::broker::Broker;
use logbus::producer::Record;
use logbus_comparison::{env_u64 as env, one_partition_in_lockstep};

fn main() {
    let batch = env("RECORD_COST_BATCH", 1).clamp(1, 1024) as usize;
    // At most a ring's worth between polls, so that no send finds the ring full.
    let per_poll = (env("RECORD_COST_PER_POLL", 64).clamp(1, 1024) as usize).max(batch);
    let total = env("RECORD_COST_RECORDS", 640_000) as usize;
    let broker = Broker::in_memory();
    let (mut c, p) = one_partition_in_lockstep(&broker);
    let mut records: Vec<Record<(), u64>> = Vec::with_capacity(batch);
    let mut sum = 0u64;
    let (mut v, mut read) = (0u64, 0usize);
    let start = Instant::now();
    while (v as usize) < total {
        let mut since_poll = 0;
        while since_poll < per_poll && (v as usize) < total {
            if batch == 1 {
                p.send(Record::new("t", v)).unwrap();
                v += 1;
                since_poll += 1;
            } else {
                let n = batch.min(total - v as usize);
                records.extend((v..v + n as u64).map(|x| Record::new("t", x)));
                assert_eq!(p.send_batch(black_box(&mut records)).unwrap(), n);
                v += n as u64;
                since_poll += n;
            }
        }
        let polled = c.poll(Duration::ZERO).unwrap();
        for r in &polled {
            sum = sum.wrapping_add(r.value.wrapping_mul(r.offset | 1));
        }
        read += polled.len();
        c.commit_sync().unwrap();
        assert_eq!(read as u64, v);
    }
    let took = start.elapsed();
    assert_eq!(read, total);
    let expect = (0..total as u64).fold(0u64, |s, x| s.wrapping_add(x.wrapping_mul(x | 1)));
    assert_eq!(black_box(sum), expect);
    println!(
        "records {total}, batch {batch}, per poll {per_poll}: {:.1} ns per record",
        took.as_nanos() as f64 / total as f64
    );
}
