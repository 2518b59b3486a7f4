//! Persisted topics against `kafko` 0.3, the closest Rust crate (an in-process log with
//! Kafka-like semantics, async on tokio, its own segment format), interleaved in one run
//! (logbus, kafko, logbus, kafko …) in directories under the target dir; the table gives
//! each side's median and the median of the per-pair ratios, with their spread.
//!
//! Same records on both sides: 256-byte values (the first 8 bytes the record's index), no
//! key, one partition, fresh directory per run. No fsync while sending on either side
//! (logbus `FlushPolicy::Os`; kafko never fsyncs on send, its `send` resolves once its
//! writer task has written the record to the OS file). Both sides are pipelined, with the
//! same bound on records sent but not yet in the file: kafko keeps at most
//! `KAFKO_BENCH_WINDOW` (default 8192) sends in flight (each `send` / `send_batch` a task
//! on a multi-thread runtime, the oldest awaited before a new one once the window is full:
//! kafko's partition task coalesces concurrent sends); logbus's `send` returns once the
//! record is in the partition's ring of 8192 records, whose writer thread is a gating
//! reader, so at most 8192 records are unwritten. A run ends, inside the timing, at the same
//! acknowledgement level on both sides, every record in the files:
//! - `KAFKO_BENCH_END=written` (the default): logbus `Topic::write_to_files` (waits for its writer to
//!   write every record, no fsync), kafko its last send acknowledged; kafko's `shutdown`
//!   (which fsyncs) is outside the timing;
//! - `KAFKO_BENCH_END=fsync`: then one fsync of everything on both sides, inside the timing:
//!   logbus `Topic::fsync`, kafko `shutdown` (drains its writer task, fsyncs the active
//!   segment).
//!
//! Opening and closing the logbus broker (checkpoints, clean-shutdown marker) are outside
//! the timing.
//!
//! Rows (`KAFKO_BENCH_ROWS` names them):
//! - `single`: one `send` per record (kafko: one task per `send`, pipelined as above);
//! - `batch`: `send_batch` of 1024 records on both sides (kafko: pipelined, 8 batches in
//!   flight with the default window).
//!
//! Checks: after the timing each run's data is read back once — logbus's through a consumer
//! before the broker closes, kafko's after its `shutdown` by decoding its segment files with
//! kafko's own `Record::decode` (CRC-checked; kafko's `Consumer` reads each record by
//! re-reading the rest of its segment, quadratic in the records: see
//! `for_each_kafko_record`) — and the count and checksum of the records' indices must match
//! what was to be sent (in order for logbus's one partition; in any order for kafko, whose
//! concurrent sends may land in any order). A logbus read-back that waits 10 s for a record
//! that does not come panics with the count. `LOGBUS_BENCH_LOSE=ours` (or `theirs`) makes that side skip its
//! middle record: the run must then panic naming the side. Each row also prints a `ROW|…`
//! line for `scripts/bench-table`.
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench persisted_vs_kafko
//! KAFKO_BENCH_PAIRS=7 KAFKO_BENCH_SINGLE=100000 cargo bench -p logbus-comparison --bench persisted_vs_kafko
//! KAFKO_BENCH_ROWS=batch cargo bench -p logbus-comparison --bench persisted_vs_kafko  # one row
//! KAFKO_BENCH_ROWS=batch KAFKO_BENCH_ONLY=logbus perf record …  # one side alone (for a profile; the ratio is then void)
//! KAFKO_BENCH_END=fsync cargo bench -p logbus-comparison --bench persisted_vs_kafko  # an fsync at the end
//! KAFKO_BENCH_SPLIT=1 …  # also print each run's sending time and its end (flush or fsync)
//! ```

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus_comparison::{env_u64, print_row, scratch_dir, Pairs, Side, Source, Stall, Tally};

/// `KAFKO_BENCH_END=fsync`: each run ends with an fsync of everything (module docs).
fn fsync_at_end() -> bool {
    std::env::var("KAFKO_BENCH_END").is_ok_and(|v| v == "fsync")
}

/// The records of a run: 256-byte values, record i starting with i.
fn values(count: u64) -> Vec<Bytes> {
    (0..count)
        .map(|i| {
            let mut v = vec![0x5a; 256];
            v[..8].copy_from_slice(&i.to_le_bytes());
            Bytes::from(v)
        })
        .collect()
}

/// The index a record carries (its first 8 bytes).
fn index_of(value: &[u8]) -> u64 {
    u64::from_le_bytes(value[..8].try_into().unwrap())
}

fn logbus_run(values: &[Bytes], batch: usize) -> Duration {
    let dir = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "kafko-bench-logbus");
    let broker = Broker::builder()
        .data_dir(&dir)
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), Bytes>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(8192)
                .persist(PersistConfig::new().flush(FlushPolicy::Os)),
        )
        .unwrap();
    let topic = broker.topic::<(), Bytes>("t").unwrap();
    let producer = broker.producer::<(), Bytes>();
    let count = values.len() as u64;
    let mut src = Source::all(Side::Ours, count);
    let started = Instant::now();
    if batch <= 1 {
        for i in src {
            producer
                .send(Record::new("t", values[i as usize].clone()).partition(0))
                .unwrap();
        }
    } else {
        let mut records = Vec::with_capacity(batch);
        loop {
            records.extend(
                src.by_ref()
                    .take(batch)
                    .map(|i| Record::new("t", values[i as usize].clone()).partition(0)),
            );
            if records.is_empty() {
                break;
            }
            producer.send_batch(&mut records).unwrap();
        }
    }
    let sent_at = started.elapsed();
    if fsync_at_end() {
        topic.fsync().unwrap();
    } else {
        topic.write_to_files().unwrap();
    }
    let elapsed = started.elapsed();
    if std::env::var_os("KAFKO_BENCH_SPLIT").is_some() {
        eprintln!("logbus send {:?} total {:?}", sent_at, elapsed);
    }
    // Read back once, outside the timing.
    let mut c = broker
        .consumer::<(), Bytes>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let mut tally = Tally::default();
    let mut stall = Stall::new();
    let mut out = Vec::new();
    while tally.count < count {
        out.clear();
        let k = c
            .poll_with(4096, Duration::from_millis(100), |r| {
                out.push(r.to_record())
            })
            .unwrap();
        for r in &out {
            tally.add(index_of(&r.value));
        }
        stall.after(
            k,
            Side::Ours,
            "persisted sends vs kafko",
            tally.count,
            count,
        );
    }
    tally.assert_in_order(Side::Ours, "persisted sends vs kafko", &Tally::of(0..count));
    drop(c);
    broker.close().unwrap();
    elapsed
}

fn kafko_run(rt: &tokio::runtime::Runtime, values: &[Bytes], batch: usize) -> Duration {
    let dir = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "kafko-bench-kafko");
    let count = values.len() as u64;
    let window = (env_u64("KAFKO_BENCH_WINDOW", 8192) as usize / batch.max(1)).max(1);
    let mut src = Source::all(Side::Theirs, count);
    let elapsed = rt.block_on(async {
        let broker = kafko::Kafko::open(&dir).await.unwrap();
        broker.create_topic("t").await.unwrap();
        let producer = broker.producer_for("t").await.unwrap();
        let started = Instant::now();
        let mut in_flight = VecDeque::with_capacity(window);
        loop {
            let chunk: Vec<Bytes> = src
                .by_ref()
                .take(batch.max(1))
                .map(|i| values[i as usize].clone())
                .collect();
            if chunk.is_empty() {
                break;
            }
            if in_flight.len() == window {
                let sent: tokio::task::JoinHandle<kafko::Result<()>> =
                    in_flight.pop_front().unwrap();
                sent.await.unwrap().unwrap();
            }
            let p = producer.clone();
            in_flight.push_back(tokio::spawn(async move {
                if batch <= 1 {
                    let v = chunk.into_iter().next().unwrap();
                    p.send(None, v).await.map(drop)
                } else {
                    let items = chunk.into_iter().map(|v| (None, v)).collect();
                    p.send_batch(items).await.map(drop)
                }
            }));
        }
        for sent in in_flight {
            sent.await.unwrap().unwrap();
        }
        let sent_at = started.elapsed();
        drop(producer);
        broker.shutdown().await.unwrap();
        if std::env::var_os("KAFKO_BENCH_SPLIT").is_some() {
            eprintln!("kafko send {:?} total {:?}", sent_at, started.elapsed());
        }
        if fsync_at_end() {
            started.elapsed()
        } else {
            sent_at
        }
    });
    // Read back once, outside the timing: every record in kafko's segment files, decoded
    // by kafko's own `Record::decode` (which checks each record's CRC).
    let mut tally = Tally::default();
    for_each_kafko_record(&dir, |value| tally.add(index_of(value)));
    tally.assert_any_order(
        Side::Theirs,
        "persisted sends vs kafko",
        &Tally::of(0..count),
    );
    elapsed
}

/// Calls `f` with the value of every record in the segment files under `dir` (each
/// partition's `.log` files in name order, i.e. offset order), decoded by
/// `kafko::Record::decode`; panics on a record it cannot decode.
///
/// Not kafko's `Consumer`: its `next_record` reads a record with `Log::read_record_at`,
/// which reads the whole rest of the segment from the sparse index entry before the
/// record (kafko 0.3's `log.rs`: "read the entire remainder of the segment"). Reading
/// back N records of one segment that way copies O(N²) bytes: hours at 500,000 records
/// of 256 bytes (one 140 MB read per record).
fn for_each_kafko_record(dir: &Path, mut f: impl FnMut(&[u8])) {
    let mut logs = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "log") {
                logs.push(path);
            }
        }
    }
    logs.sort();
    for log in logs {
        let bytes = std::fs::read(&log).unwrap();
        let mut rest: &[u8] = &bytes;
        while !rest.is_empty() {
            let record = kafko::Record::decode(&mut rest).unwrap_or_else(|e| {
                panic!(
                    "persisted sends vs kafko: kafko (theirs)'s {} does not decode at byte {}: {e}",
                    log.display(),
                    bytes.len() - rest.len()
                )
            });
            f(record.value());
        }
    }
}

fn row(name: &str, rt: &tokio::runtime::Runtime, count: u64, batch: usize, pairs: usize) {
    let values = values(count);
    let only = std::env::var("KAFKO_BENCH_ONLY").unwrap_or_default();
    let rate = |t: Duration| count as f64 / t.as_secs_f64();
    let p = Pairs::interleave(
        pairs,
        || {
            rate(if only == "kafko" {
                Duration::from_secs(1)
            } else {
                logbus_run(&values, batch)
            })
        },
        || {
            rate(if only == "logbus" {
                Duration::from_secs(1)
            } else {
                kafko_run(rt, &values, batch)
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
    print_row(
        &format!("persisted sends, 256 B, {name}"),
        "kafko, pipelined",
        &p,
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
