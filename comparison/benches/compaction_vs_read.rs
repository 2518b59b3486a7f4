//! The log cleaner against a plain sequential read of the same bytes, interleaved in one run
//! (A B A B …) under the target dir (a real file system): how close a cleaning pass comes
//! to the disk's read speed (the goal: at least 0.3×).
//!
//! One log of `COMPACT_BENCH_MB` MiB (64 by default) of 200-byte values under keys drawn
//! from `COMPACT_BENCH_KEYS` (10,000) is written once, in 16 MiB segments. Each pair:
//! - ours: a fresh copy of the log (copied and fsynced before the timing) gets one full pass
//!   (`SegmentSet::plan_clean`, `CleanPlan::build`, `SegmentSet::commit_clean`: the key map
//!   over every closed segment, then every segment rewritten and swapped, durably); bytes of
//!   the old segments per second. Timed: what a cleaner thread's pass takes until its swap is
//!   durable and the log serves the cleaned segments. Not timed: the removal of the replaced
//!   files (`.deleted`), which the broker runs after the pass (its cleaner thread's next
//!   round, `compact_now`'s end, `close`), as Kafka's scheduler deletes them later; the
//!   harness removes them right after the timing, before the next pair;
//! - theirs: every closed segment's `.log` of the source read sequentially through a 1 MiB
//!   buffer; bytes per second.
//!
//! What the two sides do alike: both read every byte of the same closed segments, from the
//! page cache (the source is read on every pair; the copy was just written), with no file
//! dirty when the timing starts. What the pass does beyond a read, and must: it checks every
//! batch's CRC and parses, hashes and maps every key, reads again the batches it may keep
//! (Kafka's cleaner reads every batch twice; this one skips those whose records are all
//! superseded), writes the survivors and their indexes, and makes them durable: an
//! fsync of each cleaned file and of the directory at the swap's steps. Those fsyncs cost
//! milliseconds each on most disks whatever their size, so the ratio depends on the file
//! system as much as on the cleaner; `COMPACT_BENCH_PHASES=1` prints the pass's phases (the
//! swap is the part under the log's lock), the untimed removal of the old files (an unlink
//! updates the file system's journal), and the CPU time of the pass's thread against the
//! read's (from `/proc/thread-self/schedstat`), which tells waiting from work.
//!
//! Checks: after each pass, the log is read back (outside the timing): the survivors' count
//! and ordered checksum of their offsets must be the model's (each key's latest below the
//! active segment, and the active segment whole); the sequential read must see every byte,
//! with the same byte checksum each time. `LOGBUS_BENCH_LOSE=ours` drops one expected
//! survivor from the model (`theirs`: one byte from the count), and the run must panic.
//! Prints a `ROW|…` line for `scripts/bench-table`.
//!
//! ```sh
//! cargo bench -p logbus-comparison --bench compaction_vs_read
//! COMPACT_BENCH_MB=256 COMPACT_BENCH_PAIRS=7 cargo bench -p logbus-comparison --bench compaction_vs_read
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use logbus::storage::{BatchRecord, CleanConfig, LogConfig, LogSetup, SegmentSet};
use logbus_comparison::{env_u64, lost_value, mix, print_row, scratch_dir, Pairs, Side, Tally};

const ROW: &str = "compaction pass";

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 << 20,
        ..LogConfig::default()
    }
}

fn open(dir: &Path) -> SegmentSet {
    SegmentSet::open(
        dir,
        LogSetup {
            config: config(),
            ..LogSetup::default()
        },
    )
    .unwrap()
    .0
}

/// Writes the source log; returns the survivors' offsets (the model) and the closed
/// segments' files.
fn write_source(dir: &Path, bytes: u64, keys: u64) -> (Vec<u64>, Vec<PathBuf>) {
    let mut log = open(dir);
    let mut key_of = Vec::new();
    let mut i = 0u64;
    let mut written = 0u64;
    let value = vec![0x5au8; 200];
    while written < bytes {
        let records: Vec<BatchRecord> = (0..64)
            .map(|j| {
                let k = mix(i + j) % keys;
                BatchRecord::new(
                    1_700_000_000_000,
                    Some(format!("key-{k:08}").as_bytes()),
                    &value,
                )
            })
            .collect();
        for j in 0..64 {
            key_of.push(mix(i + j) % keys);
        }
        log.append(&records).unwrap();
        i += 64;
        written += 64 * 230;
    }
    log.roll().unwrap();
    let segments = log.segments();
    let active = segments.last().unwrap().base_offset;
    log.close().unwrap();
    let mut latest: HashMap<u64, u64> = HashMap::new();
    for (o, k) in key_of.iter().enumerate().take(active as usize) {
        latest.insert(*k, o as u64);
    }
    let mut survivors: Vec<u64> = latest.into_values().collect();
    survivors.extend(active..key_of.len() as u64);
    survivors.sort_unstable();
    let files = segments[..segments.len() - 1]
        .iter()
        .map(|s| dir.join(format!("{:020}.log", s.base_offset)))
        .collect();
    (survivors, files)
}

/// Copies the log and makes the copy durable, so that the pass starts, as the sequential
/// read does, on files that are in the page cache and clean: without the fsyncs, the copy's
/// write-back would run during the pass and land in its time (its own fsyncs wait behind it).
fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() != ".lock" {
            let copy = to.join(e.file_name());
            std::fs::copy(e.path(), &copy).unwrap();
            File::open(&copy).unwrap().sync_all().unwrap();
        }
    }
    File::open(to).unwrap().sync_all().unwrap();
}

/// The CPU time this thread has run so far, in nanoseconds (0 where the kernel does not say):
/// the first field of `/proc/thread-self/schedstat`.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Every offset the log holds, in order.
fn offsets(log: &SegmentSet) -> Tally {
    let mut t = Tally::default();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let records = log.read_records(next, 1 << 20).unwrap();
        let Some(last) = records.last() else { break };
        next = last.0 + 1;
        for (o, _) in &records {
            t.add(*o);
        }
    }
    t
}

fn main() {
    let mb = env_u64("COMPACT_BENCH_MB", 64);
    let keys = env_u64("COMPACT_BENCH_KEYS", 10_000);
    let pairs = env_u64("COMPACT_BENCH_PAIRS", 9) as usize;
    let source = scratch_dir(env!("CARGO_TARGET_TMPDIR"), "compaction_source");
    let (mut survivors, files) = write_source(&source, mb << 20, keys);
    if let Some(at) = lost_value(Side::Ours, survivors.len() as u64) {
        survivors.remove(at as usize);
    }
    let want = Tally::of(survivors.iter().copied());
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let want_bytes = total - u64::from(lost_value(Side::Theirs, total).is_some());
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compaction_work");
    let mut byte_sum: Option<u64> = None;
    let ours = || {
        copy_dir(&source, &work);
        let mut log = open(&work);
        let cpu_started = thread_cpu_ns();
        let started = Instant::now();
        let plan = log
            .plan_clean(&CleanConfig {
                dedupe_buffer_bytes: 128 << 20,
                ..CleanConfig::default()
            })
            .unwrap();
        let cleaned = plan.build().unwrap();
        let built = started.elapsed().as_secs_f64();
        let stats = log.commit_clean(cleaned).unwrap();
        let secs = started.elapsed().as_secs_f64();
        let cpu = thread_cpu_ns().saturating_sub(cpu_started);
        // Not timed: the broker removes the replaced files after the pass.
        let removing = Instant::now();
        log.take_deleted_files().remove().unwrap();
        let removed = removing.elapsed().as_secs_f64();
        if std::env::var_os("COMPACT_BENCH_PHASES").is_some() {
            eprintln!(
                "{ROW}: map and rewrite {built:.4} s, swap {:.4} s (pass {secs:.4} s, its CPU {:.4} s); \
                 untimed: old files removed {removed:.4} s",
                secs - built,
                cpu as f64 / 1e9
            );
        }
        assert_eq!(stats.bytes_read, total, "{ROW}: the pass read {stats:?}");
        offsets(&log).assert_in_order(Side::Ours, ROW, &want);
        drop(log);
        total as f64 / secs
    };
    let theirs = || {
        let cpu_started = thread_cpu_ns();
        let started = Instant::now();
        let mut buf = vec![0u8; 1 << 20];
        let (mut count, mut sum) = (0u64, 0u64);
        for f in &files {
            let mut file = File::open(f).unwrap();
            loop {
                let n = file.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                count += n as u64;
                // One word per 4 KiB page: the bytes are touched, the fold costs little.
                for chunk in buf[..n].chunks(4096) {
                    sum = sum.wrapping_mul(31).wrapping_add(chunk[0] as u64);
                }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        if std::env::var_os("COMPACT_BENCH_PHASES").is_some() {
            let cpu = thread_cpu_ns().saturating_sub(cpu_started);
            eprintln!(
                "{ROW}: sequential read {secs:.4} s, its CPU {:.4} s",
                cpu as f64 / 1e9
            );
        }
        assert_eq!(
            count,
            want_bytes,
            "{ROW}: {} read {count} bytes, expected {want_bytes}",
            Side::Theirs
        );
        assert!(
            byte_sum.is_none_or(|s| s == sum),
            "{ROW}: {}'s byte checksum changed between runs",
            Side::Theirs
        );
        byte_sum = Some(sum);
        total as f64 / secs
    };
    let pairs = Pairs::interleave(pairs, ours, theirs);
    println!(
        "{ROW}: {} MiB of closed segments, {} survivors; cleaner {:.0} MiB/s, sequential read {:.0} MiB/s, median ratio {:.3} (per pair {:?})",
        total >> 20,
        survivors.len(),
        pairs.ours_median() / (1 << 20) as f64,
        pairs.theirs_median() / (1 << 20) as f64,
        pairs.median_ratio(),
        pairs
            .ratios()
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
    );
    print_row(ROW, "sequential read", &pairs);
    let _ = std::fs::remove_dir_all(&source);
    let _ = std::fs::remove_dir_all(&work);
}
