//! Persisted topics against the disk's own speed, interleaved in one run (A B A B …) in one
//! directory under the target dir (a real file system, not tmpfs), each pair with the same
//! page-cache state; the table gives each side's median and the median per-pair ratio.
//!
//! Rows (issue 14's bars in brackets):
//! - `write 1KiB` / `write 100B`: one partition, `send_batch` of 256 records, `FlushPolicy::
//!   Bytes(1 MiB)`, ending with `Topic::sync`; against raw sequential writes of the same record
//!   bytes through a 64 KiB `BufWriter` with an `fdatasync` every 1 MiB [≥ 0.7×, ≥ 0.6×
//!   record bytes/s].
//! - `everybatch N`: `FlushPolicy::EveryBatch`, N producer threads each `send`ing 100-byte
//!   records one at a time (each waits for its fsync; concurrent ones share it), records/s.
//! - `replay`: a consumer seeks to 0 and reads the 1 KiB topic back from its segments
//!   (`poll_into`), against a plain sequential read of the same `.log` files [≥ 0.5×].
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench persisted_vs_raw
//! PERSIST_BENCH_MB=256 PERSIST_BENCH_PAIRS=7 cargo bench -p logbus-comparison --bench persisted_vs_raw
//! PERSIST_BENCH_ROWS=1k,100b cargo bench -p logbus-comparison --bench persisted_vs_raw  # no EveryBatch rows
//! PERSIST_BENCH_ROWS=1k PERSIST_BENCH_PAIRS=1 PERSIST_BENCH_PROFILE_REPLAYS=40 perf record …  # replay 40× for a profile
//! ```

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use logbus::broker::{Broker, TopicConfig, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{FlushPolicy, PersistConfig};
use logbus::producer::Record;
use logbus_comparison::{env_u64, Pairs};

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Raw: the record bytes through a 64 KiB buffer, fdatasync every `sync_every` bytes.
fn raw_write(dir: &Path, record: &[u8], count: u64, sync_every: u64) -> Duration {
    let path = dir.join("raw.bin");
    let started = Instant::now();
    let file = File::create(&path).unwrap();
    let mut w = BufWriter::with_capacity(64 << 10, file);
    let mut since = 0u64;
    for _ in 0..count {
        w.write_all(record).unwrap();
        since += record.len() as u64;
        if since >= sync_every {
            w.flush().unwrap();
            w.get_ref().sync_data().unwrap();
            since = 0;
        }
    }
    w.flush().unwrap();
    w.get_ref().sync_data().unwrap();
    started.elapsed()
}

/// logbus: a persisted topic, batches of 256 sends, fsync every `sync_every` bytes.
fn logbus_write(dir: &Path, record: &Bytes, count: u64, sync_every: u64) -> (Duration, Broker) {
    let broker = Broker::builder().data_dir(dir).create(true).open().unwrap();
    let topic = broker
        .create_persisted_topic::<(), Bytes>(
            "t",
            TopicConfig::new(1).records_in_memory(8192),
            PersistConfig::new().flush(FlushPolicy::Bytes(sync_every)),
        )
        .unwrap();
    let producer = broker.producer::<(), Bytes>();
    let mut batch = Vec::with_capacity(256);
    let started = Instant::now();
    let mut sent = 0;
    while sent < count {
        let n = (count - sent).min(256);
        for _ in 0..n {
            batch.push(Record::new("t", record.clone()).partition(0).timestamp(1));
        }
        producer.send_batch(&mut batch).unwrap();
        sent += n;
    }
    topic.sync().unwrap();
    (started.elapsed(), broker)
}

fn replay_logbus(broker: &Broker, count: u64) -> Duration {
    let mut c = broker
        .consumer::<(), Bytes>(
            ConsumerConfig::new()
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(4096),
        )
        .unwrap();
    let tp = TopicPartition::new("t", 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek(&tp, 0).unwrap();
    let mut out = Vec::with_capacity(4096);
    let started = Instant::now();
    let mut read = 0u64;
    let mut bytes = 0usize;
    while read < count {
        out.clear();
        read += c.poll_into(&mut out, 4096, Duration::from_secs(1)).unwrap() as u64;
        bytes += out.iter().map(|r| r.value.len()).sum::<usize>();
    }
    std::hint::black_box(bytes);
    started.elapsed()
}

fn replay_raw(dir: &Path) -> Duration {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir.join("t-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let mut buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut total = 0usize;
    for path in logs {
        let mut f = File::open(path).unwrap();
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            total += n;
            std::hint::black_box(&buf[..n]);
        }
    }
    std::hint::black_box(total);
    started.elapsed()
}

fn report(name: &str, unit: &str, pairs: &Pairs) {
    println!(
        "{name:<14} logbus {:>10.1} {unit}   baseline {:>10.1} {unit}   ratio (median of pairs) {:.2}x",
        pairs.ours_median(),
        pairs.theirs_median(),
        pairs.median_ratio()
    );
}

fn write_row(size: usize, total_mb: u64, pairs: usize) {
    let record = Bytes::from(vec![0x5a; size]);
    let count = (total_mb << 20) / size as u64;
    let sync = 1 << 20;
    let (mut write, mut replay) = (Pairs::default(), Pairs::default());
    for _ in 0..pairs {
        let dir = scratch("persisted-bench");
        let (t_ours, broker) = logbus_write(&dir, &record, count, sync);
        let raw_dir = scratch("raw-bench");
        let t_raw = raw_write(&raw_dir, &record, count, sync);
        let mb = (count * size as u64) as f64 / (1 << 20) as f64;
        write.push(mb / t_ours.as_secs_f64(), mb / t_raw.as_secs_f64());
        if size == 1024 {
            // Both read warm files just written.
            for _ in 1..env_u64("PERSIST_BENCH_PROFILE_REPLAYS", 1) {
                replay_logbus(&broker, count);
            }
            let t_replay = replay_logbus(&broker, count);
            let t_read = replay_raw(&dir);
            replay.push(mb / t_replay.as_secs_f64(), mb / t_read.as_secs_f64());
        }
        broker.close().unwrap();
    }
    report(&format!("write {size}B"), "MiB/s", &write);
    if size == 1024 {
        report("replay 1KiB", "MiB/s", &replay);
    }
}

fn everybatch_row(producers: usize, per_producer: u64) {
    let dir = scratch("everybatch-bench");
    let broker = Broker::builder()
        .data_dir(&dir)
        .create(true)
        .open()
        .unwrap();
    broker
        .create_persisted_topic::<(), Bytes>(
            "t",
            TopicConfig::new(1).records_in_memory(4096),
            PersistConfig::new().flush(FlushPolicy::EveryBatch),
        )
        .unwrap();
    let record = Bytes::from(vec![0x5a; 100]);
    let started = Instant::now();
    let threads: Vec<_> = (0..producers)
        .map(|_| {
            let p = broker.producer::<(), Bytes>();
            let record = record.clone();
            std::thread::spawn(move || {
                for _ in 0..per_producer {
                    p.send(Record::new("t", record.clone()).partition(0))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed();
    let total = producers as u64 * per_producer;
    println!(
        "everybatch {producers:<3} {:>10.0} records/s ({total} acknowledged sends, each after its fsync)",
        total as f64 / elapsed.as_secs_f64()
    );
    broker.close().unwrap();
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let total_mb = env_u64("PERSIST_BENCH_MB", 64);
    let pairs = env_u64("PERSIST_BENCH_PAIRS", 5) as usize;
    println!(
        "persisted topics vs raw disk: {total_mb} MiB per run, {pairs} pairs, dir {}",
        env!("CARGO_TARGET_TMPDIR")
    );
    // `PERSIST_BENCH_ROWS=1k` (say) runs only the 1 KiB write and replay rows.
    let rows = std::env::var("PERSIST_BENCH_ROWS").unwrap_or_else(|_| "1k,100b,everybatch".into());
    let wanted = |row: &str| rows.split(',').any(|r| r.trim() == row);
    if wanted("1k") {
        write_row(1024, total_mb, pairs);
    }
    if wanted("100b") {
        write_row(100, total_mb, pairs);
    }
    if wanted("everybatch") {
        for n in [1, 4, 16] {
            everybatch_row(n, env_u64("PERSIST_BENCH_EVERYBATCH", 2000));
        }
    }
}
