//! Compressed persisted topics against uncompressed ones, per codec, interleaved in one run
//! (A B A B …: the codec's topic, then the same records to an uncompressed topic) in one
//! directory under the target dir; the table gives each side's median and the median
//! per-pair ratio, and the bytes each side left on disk.
//!
//! Records: `COMPRESS_BENCH_SIZE` bytes each (256 by default), text as an application logs
//! or sends JSON (field names repeat, values vary): the record's index in 16 hex digits, then
//! fields drawn from a fixed seed. Both sides write the same records, built before the timing.
//!
//! Rows, for each codec (`COMPRESS_BENCH_CODECS`, default `gzip,snappy,lz4,zstd`):
//! - `compressed write <codec>`: one partition, `send_batch` of 256 records,
//!   `FlushPolicy::Bytes(1 MiB)`, ending with `Topic::fsync`; the topic's
//!   `compression.type` is the codec, against `uncompressed`; record MiB/s (uncompressed
//!   bytes sent per second).
//! - `compressed read <codec>`: a consumer seeks to 0 and reads the topic back from its
//!   segments (`poll_with` + `RecordRef::to_record`), against the same of the uncompressed
//!   topic; record MiB/s.
//! - the bytes of `.log` on disk, codec over uncompressed (`disk` in the printed line and a
//!   `SIZE|<codec>|<codec bytes>|<uncompressed bytes>|<ratio>` line).
//!
//! Checks: every write run's topic is read back (the count, each record's length and the
//! ordered checksum of the indices must match what was sent), and the timed reads assert
//! the same of what they read. `LOGBUS_BENCH_LOSE=ours` (the codec's side) or `theirs`
//! makes that side skip its middle record: the run must then panic naming the row and side.
//! Each comparison prints a `ROW|…` line for `scripts/bench-table` (ratio = codec / none).
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench compressed_vs_none
//! COMPRESS_BENCH_MB=256 COMPRESS_BENCH_PAIRS=7 cargo bench -p logbus-comparison --bench compressed_vs_none
//! COMPRESS_BENCH_CODECS=lz4 COMPRESS_BENCH_SIZE=1024 cargo bench -p logbus-comparison --bench compressed_vs_none
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use logbus::broker::{Broker, TopicPartition};
use logbus::consumer::{ConsumerConfig, OffsetReset};
use logbus::persist::{CompressionType, FlushPolicy, PersistConfig};
use logbus_comparison::{
    env_u64, print_row, scratch_dir, write_persisted, Pairs, Side, Stall, Tally,
};

/// `count` records of `size` bytes: record i's index in hex, then JSON-like fields.
fn records(size: usize, count: u64) -> Vec<Bytes> {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let names = ["alice", "bob", "carol", "dave", "erin", "frank", "grace"];
    let kinds = [
        "order.created",
        "order.paid",
        "order.shipped",
        "refund.issued",
    ];
    (0..count)
        .map(|i| {
            let mut r = format!("{i:016x}");
            while r.len() < size {
                let n = next();
                r.push_str(&format!(
                    " {{\"user\":\"{}\",\"event\":\"{}\",\"amount\":{},\"item\":{}}}",
                    names[(n % 7) as usize],
                    kinds[((n >> 8) % 4) as usize],
                    (n >> 16) % 10_000,
                    (n >> 32) % 500
                ));
            }
            r.truncate(size);
            Bytes::from(r)
        })
        .collect()
}

fn index_of(record: &[u8]) -> u64 {
    u64::from_str_radix(std::str::from_utf8(&record[..16]).unwrap(), 16).unwrap()
}

const BATCH: usize = 256;

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Ours => "codec",
        Side::Theirs => "uncompressed",
    }
}

/// Writes every record to a new topic with `compression`: the time taken and the broker.
fn write(
    dir: &Path,
    records: &[Bytes],
    compression: CompressionType,
    side: Side,
) -> (Duration, Broker) {
    let persist = PersistConfig::new()
        .flush(FlushPolicy::Bytes(1 << 20))
        .compression(compression);
    write_persisted(dir, records, persist, side, BATCH)
}

/// Reads the topic from offset 0, asserting the count, each length and the ordered checksum.
fn read(broker: &Broker, size: usize, count: u64, row: &str, side: Side) -> Duration {
    let started = Instant::now();
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
            assert_eq!(
                r.value.len(),
                size,
                "{row} ({}): a record of the wrong length",
                side_name(side)
            );
            tally.add(index_of(&r.value));
        }
        stall.after(k, side, row, tally.count, count);
    }
    tally.assert_in_order(side, row, &Tally::of(0..count));
    started.elapsed()
}

fn bytes_on_disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("t-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| p.metadata().unwrap().len())
        .sum()
}

fn report(name: &str, pairs: &Pairs) {
    print_row(name, "uncompressed", pairs);
    println!(
        "{name:<24} codec {:>9.1} MiB/s   uncompressed {:>9.1} MiB/s   ratio (median of pairs) {:.2}x",
        pairs.ours_median(),
        pairs.theirs_median(),
        pairs.median_ratio()
    );
}

fn codec_rows(name: &str, codec: CompressionType, size: usize, total_mb: u64, pairs: usize) {
    let count = (total_mb << 20) / size as u64;
    let records = records(size, count);
    let mb = (count * size as u64) as f64 / (1 << 20) as f64;
    let (mut writes, mut reads) = (Pairs::default(), Pairs::default());
    let (mut codec_bytes, mut none_bytes) = (0, 0);
    let write_row = format!("compressed write {name}");
    let read_row = format!("compressed read {name}");
    for _ in 0..pairs {
        let dir_a = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "compressed-bench-codec");
        let (t_a, broker_a) = write(&dir_a, &records, codec, Side::Ours);
        let dir_b = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "compressed-bench-none");
        let (t_b, broker_b) = write(
            &dir_b,
            &records,
            CompressionType::Uncompressed,
            Side::Theirs,
        );
        // Both sides' data read back once, outside the timing.
        read(&broker_a, size, count, &write_row, Side::Ours);
        read(&broker_b, size, count, &write_row, Side::Theirs);
        writes.push(mb / t_a.as_secs_f64(), mb / t_b.as_secs_f64());
        // Timed reads, A then B, each of files just written and read once (warm).
        let r_a = read(&broker_a, size, count, &read_row, Side::Ours);
        let r_b = read(&broker_b, size, count, &read_row, Side::Theirs);
        reads.push(mb / r_a.as_secs_f64(), mb / r_b.as_secs_f64());
        broker_a.close().unwrap();
        broker_b.close().unwrap();
        codec_bytes = bytes_on_disk(&dir_a);
        none_bytes = bytes_on_disk(&dir_b);
    }
    report(&write_row, &writes);
    report(&read_row, &reads);
    let ratio = codec_bytes as f64 / none_bytes as f64;
    println!("SIZE|{name}|{codec_bytes}|{none_bytes}|{ratio:.3}");
    println!(
        "{:<24} codec {codec_bytes} B   uncompressed {none_bytes} B   on disk {ratio:.3}x",
        format!("disk {name}")
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test` runs benches with no argument: once, tiny.
    let quick = !std::env::args().any(|a| a == "--bench");
    let size = env_u64("COMPRESS_BENCH_SIZE", 256) as usize;
    let total_mb = env_u64("COMPRESS_BENCH_MB", if quick { 1 } else { 64 });
    let pairs = env_u64("COMPRESS_BENCH_PAIRS", if quick { 1 } else { 5 }) as usize;
    let codecs =
        std::env::var("COMPRESS_BENCH_CODECS").unwrap_or_else(|_| "gzip,snappy,lz4,zstd".into());
    println!("compressed vs uncompressed: {size}-byte records, {total_mb} MiB, {pairs} pairs");
    for name in codecs.split(',').filter(|s| !s.is_empty()) {
        let codec = CompressionType::from_name(name)
            .unwrap_or_else(|| panic!("COMPRESS_BENCH_CODECS: unknown codec {name}"));
        codec_rows(name, codec, size, total_mb, pairs);
    }
}
