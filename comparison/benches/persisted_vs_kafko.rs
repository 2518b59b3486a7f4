//! Persisted topics against `kafko` 0.3, the closest Rust crate (an in-process log with
//! Kafka-like semantics, async on tokio, its own segment format), interleaved in one run
//! (logbus, kafko, logbus, kafko …) in directories under the target dir; the table gives
//! each side's median and the median of the per-pair ratios.
//!
//! Same records on both sides: 256-byte values, no key, one partition, fresh directory per
//! run. No fsync while sending on either side (logbus `FlushPolicy::Os`; kafko never fsyncs
//! on send, its `send` resolves once its writer task has written the record to the OS
//! file). A run ends, inside the timing, when every record is in the files:
//! - `KAFKO_BENCH_END=written` (the default; the issue's "no fsync on either side"): logbus
//!   `Topic::flush` (waits for its writer to write every record, no fsync), kafko its last
//!   awaited send; kafko's `shutdown` (which fsyncs) is outside the timing;
//! - `KAFKO_BENCH_END=fsync`: then one fsync of everything on both sides, inside the timing:
//!   logbus `Topic::sync`, kafko `shutdown` (drains its writer task, fsyncs the active
//!   segment). The disk's write-back speed, shared with every other tenant of the machine,
//!   then weighs on both sides.
//!
//! Where they differ: a logbus `send` returns once the record is in the partition's ring
//! (its writer thread hands it to the OS within about a millisecond); kafko's once its
//! writer task has written it. Opening and closing the logbus broker (checkpoints,
//! clean-shutdown marker) are outside the timing.
//!
//! Rows (issue 14's bars in brackets):
//! - `single`: one `send` per record, each awaited for kafko (`block_on(producer.send(..))`
//!   on a multi-thread tokio runtime, as a sync caller would), [logbus ≥ 10×];
//! - `batch 1024`: logbus `send_batch` of 1024 records, kafko `send_batch` of 1024
//!   (awaited), [≥ 1.2×].
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench persisted_vs_kafko
//! KAFKO_BENCH_PAIRS=7 KAFKO_BENCH_SINGLE=100000 cargo bench -p logbus-comparison --bench persisted_vs_kafko
//! KAFKO_BENCH_ROWS=batch cargo bench -p logbus-comparison --bench persisted_vs_kafko  # one row
//! KAFKO_BENCH_ROWS=batch KAFKO_BENCH_ONLY=logbus perf record …  # one side alone (for a profile; the ratio is then void)
//! KAFKO_BENCH_END=fsync cargo bench -p logbus-comparison --bench persisted_vs_kafko  # an fsync at the end
//! KAFKO_BENCH_SPLIT=1 …  # also print each run's sending time and its end (flush or fsync)
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use logbus::broker::{Broker, TopicConfig};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus_comparison::{env_u64, Pairs};

/// `KAFKO_BENCH_END=fsync`: each run ends with an fsync of everything (module docs).
fn fsync_at_end() -> bool {
    std::env::var("KAFKO_BENCH_END").is_ok_and(|v| v == "fsync")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn logbus_run(value: &Bytes, count: u64, batch: usize) -> Duration {
    let dir = scratch("kafko-bench-logbus");
    let broker = Broker::builder()
        .data_dir(&dir)
        .create(true)
        .open()
        .unwrap();
    broker
        .create_persisted_topic::<(), Bytes>(
            "t",
            TopicConfig::new(1).records_in_memory(8192),
            PersistConfig::new().flush(FlushPolicy::Os),
        )
        .unwrap();
    let topic = broker.topic::<(), Bytes>("t").unwrap();
    let producer = broker.producer::<(), Bytes>();
    let started = Instant::now();
    if batch <= 1 {
        for _ in 0..count {
            producer
                .send(Record::new("t", value.clone()).partition(0))
                .unwrap();
        }
    } else {
        let mut records = Vec::with_capacity(batch);
        let mut sent = 0;
        while sent < count {
            let n = (count - sent).min(batch as u64);
            for _ in 0..n {
                records.push(Record::new("t", value.clone()).partition(0));
            }
            producer.send_batch(&mut records).unwrap();
            sent += n;
        }
    }
    let sent_at = started.elapsed();
    if fsync_at_end() {
        topic.sync().unwrap();
    } else {
        topic.flush().unwrap();
    }
    let elapsed = started.elapsed();
    if std::env::var_os("KAFKO_BENCH_SPLIT").is_some() {
        eprintln!("logbus send {:?} total {:?}", sent_at, elapsed);
    }
    broker.close().unwrap();
    assert_eq!(end_of(&dir), count);
    elapsed
}

/// The log end of the closed logbus directory (the run wrote every record).
fn end_of(dir: &Path) -> u64 {
    let d = logbus::persist::describe_data_dir(dir).unwrap();
    d.partitions[0].3
}

fn kafko_run(rt: &tokio::runtime::Runtime, value: &Bytes, count: u64, batch: usize) -> Duration {
    let dir = scratch("kafko-bench-kafko");
    rt.block_on(async {
        let broker = kafko::Kafko::open(&dir).await.unwrap();
        broker.create_topic("t").await.unwrap();
        let producer = broker.producer_for("t").await.unwrap();
        let started = Instant::now();
        let mut last = 0;
        if batch <= 1 {
            for _ in 0..count {
                last = producer.send(None, value.clone()).await.unwrap().offset();
            }
        } else {
            let mut sent = 0;
            while sent < count {
                let n = (count - sent).min(batch as u64);
                let items = (0..n).map(|_| (None, value.clone())).collect();
                let pos = producer.send_batch(items).await.unwrap();
                last = pos.last().unwrap().offset();
                sent += n;
            }
        }
        let sent_at = started.elapsed();
        drop(producer);
        broker.shutdown().await.unwrap();
        if std::env::var_os("KAFKO_BENCH_SPLIT").is_some() {
            eprintln!("kafko send {:?} total {:?}", sent_at, started.elapsed());
        }
        let elapsed = if fsync_at_end() {
            started.elapsed()
        } else {
            sent_at
        };
        assert_eq!(last + 1, count);
        elapsed
    })
}

fn row(name: &str, rt: &tokio::runtime::Runtime, count: u64, batch: usize, pairs: usize) {
    let value = Bytes::from(vec![0x5a; 256]);
    let only = std::env::var("KAFKO_BENCH_ONLY").unwrap_or_default();
    let rate = |t: Duration| count as f64 / t.as_secs_f64();
    let p = Pairs::interleave(
        pairs,
        || {
            rate(if only == "kafko" {
                Duration::from_secs(1)
            } else {
                logbus_run(&value, count, batch)
            })
        },
        || {
            rate(if only == "logbus" {
                Duration::from_secs(1)
            } else {
                kafko_run(rt, &value, count, batch)
            })
        },
    );
    let (lo, hi) = p.ratio_range();
    println!(
        "{name:<11} logbus {:>12.0} rec/s   kafko {:>12.0} rec/s   ratio (median of pairs) {:.2}x  (pairs {lo:.2}..{hi:.2})",
        p.ours_median(),
        p.theirs_median(),
        p.median_ratio(),
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let pairs = env_u64("KAFKO_BENCH_PAIRS", 5) as usize;
    let single = env_u64("KAFKO_BENCH_SINGLE", 50_000);
    let batched = env_u64("KAFKO_BENCH_BATCHED", 500_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let end = if fsync_at_end() {
        "each run ends with an fsync of everything"
    } else {
        "each run ends once every record is in the files, no fsync"
    };
    println!("persisted topics vs kafko 0.3: 256-byte records, {end}, {pairs} pairs");
    // `KAFKO_BENCH_ROWS=batch` (say) runs only that row.
    let rows = std::env::var("KAFKO_BENCH_ROWS").unwrap_or_else(|_| "single,batch".into());
    let wanted = |row: &str| rows.split(',').any(|r| r.trim() == row);
    if wanted("single") {
        row("single", &rt, single, 1, pairs);
    }
    if wanted("batch") {
        row("batch 1024", &rt, batched, 1024, pairs);
    }
}
