//! Persisted topics against the disk's own speed, interleaved in one run (A B A B …) in one
//! directory under the target dir (a real file system, not tmpfs), each pair with the same
//! page-cache state; the table gives each side's median and the median per-pair ratio.
//!
//! Records: `size` bytes each, the first 8 the record's index (little-endian), the rest a
//! fill byte; both sides write the same records, built before the timing.
//!
//! Rows (`PERSIST_BENCH_ROWS` names them):
//! - `1k` / `100b` (`write 1024B` / `write 100B`): one partition, `send_batch` of 256
//!   records, `FlushPolicy::Bytes(1 MiB)`, ending with `Topic::fsync` (logbus's writer thread
//!   does the writes); against a raw baseline with a writer thread of its own, as logbus
//!   has: the caller hands the same 256-record batches through a channel (bound: 8192
//!   records, logbus's ring) to a thread that writes their bytes through a 64 KiB
//!   `BufWriter` with an `fdatasync` every 1 MiB and at the end; record bytes/s.
//! - `replay 1KiB` (with `1k`): a consumer seeks to 0 and reads the 1 KiB topic back from its
//!   segments (`poll_with` + `RecordRef::to_record`), against a plain sequential read of the same `.log` files.
//! - `everybatch`: `FlushPolicy::EveryBatch`, N producer threads each `send`ing 100-byte
//!   records one at a time (each waits for its fsync; concurrent ones share it), records/s.
//!
//! Checks: after the timing, each write run's data is read back once — the logbus topic
//! through a consumer, the raw file as records of `size` bytes — and the count, each
//! record's length and the ordered checksum of the indices must match what was to be sent
//! (the `everybatch` row: count and an order-independent checksum over its producers). The
//! timed replay asserts the same of what it read, the raw read that it read every byte of
//! the files. `LOGBUS_BENCH_LOSE=ours` (or `theirs`) makes that side skip its middle
//! record: the run must then panic naming the row and side. Each comparison also prints a
//! `ROW|…` line for `scripts/bench-table`.
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
use logbus_comparison::{
    env_u64, print_row, scratch_dir, write_persisted, Pairs, Side, Source, Stall, Tally,
};

/// The records of a run: `count` records of `size` bytes, record i starting with i.
fn records(size: usize, count: u64) -> Vec<Bytes> {
    (0..count)
        .map(|i| {
            let mut r = vec![0x5a; size];
            r[..8].copy_from_slice(&i.to_le_bytes());
            Bytes::from(r)
        })
        .collect()
}

/// The index a record carries (its first 8 bytes).
fn index_of(record: &[u8]) -> u64 {
    u64::from_le_bytes(record[..8].try_into().unwrap())
}

/// Records per batch, on both sides.
const BATCH: usize = 256;

/// Raw: the caller hands batches of records to a writer thread of its own, which writes
/// their bytes through a 64 KiB buffer and fdatasyncs every `sync_every` bytes and at the
/// end.
fn raw_write(dir: &Path, records: &[Bytes], sync_every: u64) -> Duration {
    let path = dir.join("raw.bin");
    let started = Instant::now();
    let file = File::create(&path).unwrap();
    let (tx, rx) = crossbeam_channel::bounded::<Vec<Bytes>>(8192 / BATCH);
    let writer = std::thread::spawn(move || {
        let mut w = BufWriter::with_capacity(64 << 10, file);
        let mut since = 0u64;
        for batch in rx {
            for record in &batch {
                w.write_all(record).unwrap();
                since += record.len() as u64;
                if since >= sync_every {
                    w.flush().unwrap();
                    w.get_ref().sync_data().unwrap();
                    since = 0;
                }
            }
        }
        w.flush().unwrap();
        w.get_ref().sync_data().unwrap();
    });
    let mut src = Source::all(Side::Theirs, records.len() as u64);
    loop {
        let batch: Vec<Bytes> = src
            .by_ref()
            .take(BATCH)
            .map(|i| records[i as usize].clone())
            .collect();
        if batch.is_empty() {
            break;
        }
        tx.send(batch).unwrap();
    }
    drop(tx);
    writer.join().unwrap();
    started.elapsed()
}

/// Reads the raw file back (after the timing) and asserts every record.
fn verify_raw(dir: &Path, size: usize, count: u64, row: &str) {
    let bytes = std::fs::read(dir.join("raw.bin")).unwrap();
    assert!(
        bytes.len() % size == 0,
        "{row}: the raw file holds {} bytes, not a whole number of {size}-byte records",
        bytes.len()
    );
    let mut tally = Tally::default();
    for record in bytes.chunks(size) {
        tally.add(index_of(record));
    }
    tally.assert_in_order(Side::Theirs, row, &Tally::of(0..count));
}

/// logbus: a persisted topic, batches of 256 sends, fsync every `sync_every` bytes.
fn logbus_write(dir: &Path, records: &[Bytes], sync_every: u64) -> (Duration, Broker) {
    let persist = PersistConfig::new().flush(FlushPolicy::Bytes(sync_every));
    write_persisted(dir, records, persist, Side::Ours, BATCH)
}

/// Reads the logbus topic back from offset 0 (after the timing, or timed for the replay
/// row) and asserts every record: its length and the ordered checksum of the indices.
fn read_logbus(broker: &Broker, size: usize, count: u64, row: &str) {
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
    let mut tally = Tally::default();
    let mut stall = Stall::new();
    while tally.count < count {
        out.clear();
        let k = c
            .poll_with(4096, Duration::from_millis(100), |r| {
                out.push(r.to_record())
            })
            .unwrap();
        for r in &out {
            assert_eq!(r.value.len(), size, "{row}: a record of the wrong length");
            tally.add(index_of(&r.value));
        }
        stall.after(k, Side::Ours, row, tally.count, count);
    }
    tally.assert_in_order(Side::Ours, row, &Tally::of(0..count));
}

fn replay_logbus(broker: &Broker, count: u64) -> Duration {
    let started = Instant::now();
    read_logbus(broker, 1024, count, "replay 1KiB");
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
    let took = started.elapsed();
    let on_disk: u64 = std::fs::read_dir(dir.join("t-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| p.metadata().unwrap().len())
        .sum();
    assert_eq!(
        total as u64, on_disk,
        "replay 1KiB: the raw read got {total} bytes of {on_disk}"
    );
    took
}

fn report(name: &str, peer: &str, unit: &str, pairs: &Pairs) {
    print_row(&format!("persisted {name}"), peer, pairs);
    println!(
        "{name:<14} logbus {:>10.1} {unit}   baseline {:>10.1} {unit}   ratio (median of pairs) {:.2}x",
        pairs.ours_median(),
        pairs.theirs_median(),
        pairs.median_ratio()
    );
}

fn write_row(size: usize, total_mb: u64, pairs: usize) {
    let count = (total_mb << 20) / size as u64;
    let records = records(size, count);
    let sync = 1 << 20;
    let row = format!("write {size}B");
    let (mut write, mut replay) = (Pairs::default(), Pairs::default());
    for _ in 0..pairs {
        let dir = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "persisted-bench");
        let (t_ours, broker) = logbus_write(&dir, &records, sync);
        let raw_dir = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "raw-bench");
        let t_raw = raw_write(&raw_dir, &records, sync);
        // Both sides' data, read back once outside the timing.
        read_logbus(&broker, size, count, &row);
        verify_raw(&raw_dir, size, count, &row);
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
    report(
        &format!("write {size}B"),
        "raw disk, writer thread + BufWriter + fdatasync",
        "MiB/s",
        &write,
    );
    if size == 1024 {
        report(
            "replay 1KiB",
            "sequential read of the same .log files",
            "MiB/s",
            &replay,
        );
    }
}

fn everybatch_row(producers: usize, per_producer: u64) {
    let dir = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "everybatch-bench");
    let broker = Broker::builder()
        .data_dir(&dir)
        .create(true)
        .open()
        .unwrap();
    broker
        .create_topic::<(), Bytes>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(4096)
                .persist(PersistConfig::new().flush(FlushPolicy::EveryBatch)),
        )
        .unwrap();
    let total = producers as u64 * per_producer;
    let records = records(100, total);
    let lost = logbus_comparison::lost_value(Side::Ours, total);
    let started = Instant::now();
    let threads: Vec<_> = (0..producers as u64)
        .map(|i| {
            let p = broker.producer::<(), Bytes>();
            let mine: Vec<Bytes> = Source::new(i * per_producer..(i + 1) * per_producer, lost)
                .map(|v| records[v as usize].clone())
                .collect();
            std::thread::spawn(move || {
                for record in mine {
                    p.send(Record::new("t", record).partition(0)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed();
    // Read back once, outside the timing: every producer's records, in any order.
    let row = format!("everybatch {producers}");
    let mut c = broker
        .consumer::<(), Bytes>(ConsumerConfig::new().auto_offset_reset(OffsetReset::Earliest))
        .unwrap();
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    let mut tally = Tally::default();
    let mut stall = Stall::new();
    let mut out = Vec::new();
    while tally.count < total {
        out.clear();
        let k = c
            .poll_with(4096, Duration::from_millis(100), |r| {
                out.push(r.to_record())
            })
            .unwrap();
        for r in &out {
            tally.add(index_of(&r.value));
        }
        stall.after(k, Side::Ours, &row, tally.count, total);
    }
    tally.assert_any_order(Side::Ours, &row, &Tally::of(0..total));
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
