//! Storage benches: logbus against a plain-file baseline on the same disk, interleaved
//! (A B, B A, A B, ...: the appends alternate which side goes first), reporting the median of
//! the per-pair ratios (the project's rule: on a shared 2-vCPU VM single absolute figures mean
//! little).
//!
//! ```sh
//! cargo bench --bench storage                          # everything, recovery of 1 GiB
//! LOGBUS_BENCH_RECOVERY_MIB=128 cargo bench --bench storage   # a smaller recovery set
//! LOGBUS_BENCH_ONLY=append cargo bench --bench storage        # append | recovery | lookup
//! ```
//!
//! Settings (environment): `LOGBUS_BENCH_DIR` (where files go; default: a temporary
//! directory under the system temp dir — keep it on the disk you care about),
//! `LOGBUS_BENCH_PAIRS` (7), `LOGBUS_BENCH_APPEND_MIB` (64 per run), `LOGBUS_BENCH_RECOVERY_MIB`
//! (1024), `LOGBUS_BENCH_LOOKUP_MIB` (64), `LOGBUS_BENCH_WRITE_BUFFER` (the log's
//! `write_buffer_bytes`; default: the config's default).
//!
//! - **append**: logbus appends 1 KiB (then 100-byte) records, one record per batch, calling
//!   `sync` (fdatasync) after every 1 MiB of record bytes; the baseline writes 1 MiB buffers
//!   with `write` and calls `fdatasync` after each. Ratio = logbus record bytes/s ÷ raw
//!   bytes/s (bar for 1 KiB records: ≥ 0.8).
//! - **recovery**: a segment set of the given size (1 KiB records, one per batch) is opened
//!   with recovery point 0, so every batch is checked (CRC-32C, offsets) and the indexes are
//!   rebuilt; the baseline reads the same files once, sequentially, in 4 MiB reads. Both run on
//!   a warm page cache (the files were just written or read; the VM cannot drop caches).
//!   Ratio = recovery time ÷ read time (bar: ≤ 2).
//! - **lookup**: `read_records(offset, 1)` at a random offset, and `offset_for_timestamp` at a
//!   random time, against reading one batch at a known position with `pread` and decoding it.
//!   Ratio = lookup time ÷ direct read time.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use logbus::storage::record_batch::Batch;
use logbus::storage::{BatchRecord, Checkpoints, LogConfig, LogSetup, SegmentSet};
use logbus::{Clock, SystemClock};

const MIB: u64 = 1 << 20;
const T0: i64 = 1_700_000_000_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn config() -> LogConfig {
    let default = LogConfig::default();
    LogConfig {
        write_buffer_bytes: env_u64(
            "LOGBUS_BENCH_WRITE_BUFFER",
            default.write_buffer_bytes as u64,
        ) as usize,
        ..default
    }
}

fn open_set(dir: &Path, checkpoints: Checkpoints) -> SegmentSet {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    SegmentSet::open(
        dir,
        LogSetup {
            config: config(),
            clock,
            checkpoints,
            ..LogSetup::default()
        },
    )
    .expect("open")
    .0
}

/// logbus: `bytes` of records of `record_size`, one per batch, `sync` every MiB.
fn append_logbus(dir: &Path, record_size: usize, bytes: u64) -> Duration {
    let _ = fs::remove_dir_all(dir);
    let mut log = open_set(dir, Checkpoints::default());
    let record = BatchRecord {
        timestamp: T0,
        key: None,
        value: Some(vec![0x5a; record_size]),
        headers: Vec::new(),
    };
    let records = std::slice::from_ref(&record);
    let start = Instant::now();
    let mut since_sync = 0u64;
    let mut written = 0u64;
    while written < bytes {
        log.append(records).expect("append");
        since_sync += record_size as u64;
        written += record_size as u64;
        if since_sync >= MIB {
            log.fsync().expect("sync");
            since_sync = 0;
        }
    }
    log.fsync().expect("sync");
    let elapsed = start.elapsed();
    drop(log);
    fs::remove_dir_all(dir).expect("cleanup");
    elapsed
}

/// Baseline: `bytes` in 1 MiB `write`s, `fdatasync` after each.
fn append_raw(dir: &Path, bytes: u64) -> Duration {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).expect("mkdir");
    let path = dir.join("raw.bin");
    let mut file = File::create(&path).expect("create");
    let buf = vec![0x5au8; MIB as usize];
    let start = Instant::now();
    let mut written = 0;
    while written < bytes {
        file.write_all(&buf).expect("write");
        file.sync_data().expect("fdatasync");
        written += MIB;
    }
    let elapsed = start.elapsed();
    drop(file);
    fs::remove_dir_all(dir).expect("cleanup");
    elapsed
}

fn bench_append(root: &Path, pairs: u64) {
    let bytes = env_u64("LOGBUS_BENCH_APPEND_MIB", 64) * MIB;
    for record_size in [1024usize, 100] {
        let mut ratios = Vec::new();
        let mut a_rates = Vec::new();
        let mut b_rates = Vec::new();
        for pair in 0..pairs {
            // Alternate which side goes first, so neither always follows the other's writeback.
            let (a, b) = if pair % 2 == 0 {
                let a = append_logbus(&root.join("append-logbus"), record_size, bytes);
                (a, append_raw(&root.join("append-raw"), bytes))
            } else {
                let b = append_raw(&root.join("append-raw"), bytes);
                (
                    append_logbus(&root.join("append-logbus"), record_size, bytes),
                    b,
                )
            };
            let a_rate = bytes as f64 / a.as_secs_f64() / 1e6;
            let b_rate = bytes as f64 / b.as_secs_f64() / 1e6;
            ratios.push(a_rate / b_rate);
            a_rates.push(a_rate);
            b_rates.push(b_rate);
        }
        println!(
            "append {record_size:>4}-byte records, sync every MiB: logbus / raw 1 MiB writes = \
             {:.2}x bytes/s (median of {pairs} pairs; medians {:.0} vs {:.0} MB/s; ratios {})",
            median(&mut ratios.clone()),
            median(&mut a_rates),
            median(&mut b_rates),
            fmt_ratios(&ratios)
        );
    }
}

fn fmt_ratios(r: &[f64]) -> String {
    r.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes a segment set of about `bytes` (1 KiB records, one per batch) and closes it.
fn build_set(dir: &Path, bytes: u64) -> u64 {
    let _ = fs::remove_dir_all(dir);
    let mut log = open_set(dir, Checkpoints::default());
    let value = vec![0xa5u8; 1024];
    let mut n = 0u64;
    while log.size_bytes() < bytes {
        let record = BatchRecord {
            timestamp: T0 + n as i64,
            key: Some(n.to_be_bytes().to_vec()),
            value: Some(value.clone()),
            headers: Vec::new(),
        };
        log.append(std::slice::from_ref(&record)).expect("append");
        n += 1;
    }
    log.close().expect("close");
    n
}

fn read_dir_plainly(dir: &Path) -> Duration {
    let mut buf = vec![0u8; 4 * MIB as usize];
    let start = Instant::now();
    let mut names: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    let mut total = 0u64;
    for path in names {
        let mut f = File::open(&path).expect("open");
        loop {
            let n = f.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    std::hint::black_box(total);
    start.elapsed()
}

fn bench_recovery(root: &Path, pairs: u64) {
    let bytes = env_u64("LOGBUS_BENCH_RECOVERY_MIB", 1024) * MIB;
    let dir = root.join("recovery");
    let records = build_set(&dir, bytes);
    read_dir_plainly(&dir); // warm the page cache for both sides
    let mut ratios = Vec::new();
    for _ in 0..pairs {
        let start = Instant::now();
        let (log, report) = SegmentSet::open(
            &dir,
            LogSetup {
                config: config(),
                ..LogSetup::default()
            },
        )
        .expect("open");
        let a = start.elapsed();
        assert!(report.truncation.is_none());
        assert_eq!(log.log_end_offset(), records);
        assert_eq!(report.bytes_validated, log.size_bytes());
        assert_eq!(report.batches_validated, records);
        drop(log);
        let b = read_dir_plainly(&dir);
        ratios.push(a.as_secs_f64() / b.as_secs_f64());
    }
    println!(
        "recovery of {} MiB ({records} batches) from offset 0 / one sequential read of its \
         files = {:.2}x the time (median of {pairs} pairs; ratios {})",
        bytes / MIB,
        median(&mut ratios.clone()),
        fmt_ratios(&ratios)
    );
}

fn bench_lookup(root: &Path, pairs: u64) {
    let dir = root.join("lookup");
    let records = build_set(&dir, env_u64("LOGBUS_BENCH_LOOKUP_MIB", 64) * MIB);
    let log = open_set(
        &dir,
        Checkpoints {
            recovery_point: records,
            log_start_offset: 0,
            clean_shutdown: true,
        },
    );
    // Every batch has the same size here (fixed-size keys and values, one record each), so
    // the baseline knows each batch's position without an index.
    let batch_size = log.read(0, 1).expect("read").len() as u64;
    let file = File::open(dir.join("00000000000000000000.log")).expect("open");
    let mut rng = fastrand::Rng::with_seed(7);
    let per_side = 2000;
    for (name, by_time) in [("offset", false), ("timestamp", true)] {
        let mut ratios = Vec::new();
        for _ in 0..pairs {
            let start = Instant::now();
            for _ in 0..per_side {
                let o = rng.u64(0..records);
                if by_time {
                    let found = log.offset_for_timestamp(T0 + o as i64).expect("find");
                    assert_eq!(found, Some((o, T0 + o as i64)));
                } else {
                    let got = log.read_records(o, 1).expect("read");
                    assert_eq!(got[0].0, o);
                }
            }
            let a = start.elapsed();
            let start = Instant::now();
            let mut buf = vec![0u8; batch_size as usize];
            for _ in 0..per_side {
                let o = rng.u64(0..records);
                std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, o * batch_size)
                    .expect("pread");
                let batch = Batch::decode(&buf).expect("decode");
                let recs = batch.to_records().expect("records");
                assert_eq!(recs[0].0, o);
            }
            let b = start.elapsed();
            ratios.push(a.as_secs_f64() / b.as_secs_f64());
        }
        println!(
            "lookup by {name} (index + scan + decode) / pread of the batch at a known position + \
             decode = {:.2}x the time (median of {pairs} pairs of {per_side} lookups; ratios {})",
            median(&mut ratios.clone()),
            fmt_ratios(&ratios)
        );
    }
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--bench` absent: do a tiny smoke run.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let pairs = if smoke {
        1
    } else {
        env_u64("LOGBUS_BENCH_PAIRS", 7)
    };
    let root_holder;
    let root = match std::env::var_os("LOGBUS_BENCH_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            root_holder = tempfile::tempdir().expect("tempdir");
            root_holder.path().to_path_buf()
        }
    };
    if smoke {
        std::env::set_var("LOGBUS_BENCH_APPEND_MIB", "1");
        std::env::set_var("LOGBUS_BENCH_RECOVERY_MIB", "2");
        std::env::set_var("LOGBUS_BENCH_LOOKUP_MIB", "2");
    }
    let only = std::env::var("LOGBUS_BENCH_ONLY").unwrap_or_default();
    println!("storage benches in {} ({pairs} pairs each)", root.display());
    if smoke {
        println!("(smoke run without --bench: tiny sizes, one pair; the figures mean nothing)");
    }
    if only.is_empty() || only == "append" {
        bench_append(&root, pairs);
    }
    if only.is_empty() || only == "recovery" {
        bench_recovery(&root, pairs);
    }
    if only.is_empty() || only == "lookup" {
        bench_lookup(&root, pairs);
    }
}
