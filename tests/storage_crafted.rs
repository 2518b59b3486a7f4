//! Hostile partition directories, crafted one defect at a time: lengths, varints, magic
//! bytes, CRCs, offsets, gaps, names, sparse files, FIFOs, symlinks, swap files. Each is run
//! through `verify`, `dump` (the CLI, when built with the `cli` feature, in a child whose
//! address space is capped) and open → read → append → close → reopen. Nothing may panic or
//! hang, heap use stays bounded by configuration (not by what the files claim), and every
//! outcome is a typed error or a reported repair.
//!
//! Debug: `cargo test --features cli --test storage_crafted`; release: the same with
//! `--release`.

mod storage_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use logbus::storage::file_names::{file_name, MAX_OFFSET};
use logbus::storage::record_batch::{crc32c, encode_batch, BatchHeader};
use logbus::storage::verify::{verify_partition_with, VerifyConfig};
use logbus::storage::{BatchRecord, Checkpoints, FsIo, LogConfig, LogSetup, SegmentSet};
use logbus::Error;
use storage_common::*;

// ---------------------------------------------------------------------------------------------
// Peak heap bytes while measuring (every thread counts: a bound, never an undercount).

struct Peak;

static MEASURING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    if MEASURING.load(Ordering::Relaxed) {
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; it only counts bytes.
unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        grew(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Peak = Peak;

/// What a case may hold in memory at once: the 1 MiB default batch limit, the 10 MiB index
/// limit, buffers, with room to spare — far below what the crafted files claim (300 MiB to
/// 4.5 GiB).
const HEAP_BOUND: usize = 48 << 20;

// ---------------------------------------------------------------------------------------------
// The directory every case starts from, and ways to damage it.

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1200,
        index_interval_bytes: 150,
        ..LogConfig::default()
    }
}

/// Three or more segments of one-record batches, closed cleanly; returns the segment bases.
fn base_partition(dir: &Path) -> Vec<u64> {
    let (mut log, _) = SegmentSet::open(
        dir,
        LogSetup {
            config: config(),
            clock: clock(),
            ..LogSetup::default()
        },
    )
    .unwrap();
    for i in 0..30 {
        log.append(&[record(i, 40)]).unwrap();
    }
    let bases = log.segments().iter().map(|s| s.base_offset).collect();
    log.close().unwrap();
    bases
}

fn log_of(dir: &Path, base: u64) -> PathBuf {
    dir.join(file_name(base, "log"))
}

/// Batch start positions in a `.log`.
fn starts(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        out.push(pos);
        pos += BatchHeader::parse(&bytes[pos..]).unwrap().size() as usize;
    }
    out
}

/// Edits batch `k` of segment `seg` (by index into the bases) in place; `reseal` recomputes
/// the CRC afterwards so that only the edited rule is broken.
fn edit_batch(dir: &Path, seg: usize, k: usize, reseal: bool, f: impl FnOnce(&mut Vec<u8>)) {
    let bases = bases_of(dir);
    let path = log_of(dir, bases[seg]);
    let bytes = fs::read(&path).unwrap();
    let at = starts(&bytes);
    let (from, to) = (at[k], at.get(k + 1).copied().unwrap_or(bytes.len()));
    let mut batch = bytes[from..to].to_vec();
    f(&mut batch);
    if reseal {
        let crc = crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    let mut out = bytes[..from].to_vec();
    out.extend(batch);
    out.extend_from_slice(&bytes[to..]);
    fs::write(&path, out).unwrap();
}

/// Replaces batch `k` of the first segment with `batch` (its base offset set to the one it
/// replaces, so only the crafted rule is broken).
fn replace_batch(dir: &Path, k: usize, mut batch: Vec<u8>) {
    edit_batch(dir, 0, k, false, |b| {
        batch[0..8].copy_from_slice(&b[0..8]);
        *b = batch;
    });
}

fn bases_of(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let stem = name.strip_suffix(".log")?;
            (stem.len() == 20).then(|| stem.parse().ok()).flatten()
        })
        .collect();
    bases.sort();
    bases
}

fn set_i32(b: &mut [u8], at: usize, v: i32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn set_i64(b: &mut [u8], at: usize, v: i64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

fn sparse(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn append_bytes(path: &Path, extra: &[u8]) {
    let mut b = fs::read(path).unwrap();
    b.extend_from_slice(extra);
    fs::write(path, b).unwrap();
}

/// A one-record batch whose record is `body` (length-prefixed by `raw_record`-like callers).
fn one(record: Vec<u8>) -> Vec<u8> {
    raw_batch(0, 0, 0, -1, &[record])
}

/// A record with hand-picked varints: `fields` is everything after the length prefix.
fn record_with(fields: &[i64], tail: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8];
    for &f in fields {
        put_varint(&mut body, f);
    }
    body.extend_from_slice(tail);
    let mut out = Vec::new();
    put_varint(&mut out, body.len() as i64);
    out.extend(body);
    out
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let _ = fs::remove_file(path);
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) {
    let _ = fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).unwrap();
}

type Craft = fn(&Path, &Path);

/// Every case: a name and how it damages the directory (the second path is a scratch
/// directory outside it, for symlink targets).
fn cases() -> Vec<(&'static str, Craft)> {
    let mut cases: Vec<(&'static str, Craft)> = vec![
        // Lengths.
        ("batch length 0", |d, _| {
            edit_batch(d, 0, 0, false, |b| set_i32(b, 8, 0))
        }),
        ("batch length 13", |d, _| {
            edit_batch(d, 0, 1, false, |b| set_i32(b, 8, 13))
        }),
        ("batch length 48", |d, _| {
            edit_batch(d, 0, 1, false, |b| set_i32(b, 8, 48))
        }),
        ("batch length -1", |d, _| {
            edit_batch(d, 1, 0, false, |b| set_i32(b, 8, -1))
        }),
        ("batch length i32::MAX", |d, _| {
            edit_batch(d, 0, 2, false, |b| set_i32(b, 8, i32::MAX))
        }),
        ("batch length one too long", |d, _| {
            edit_batch(d, 0, 0, false, |b| {
                let l = i32::from_be_bytes([b[8], b[9], b[10], b[11]]);
                set_i32(b, 8, l + 1)
            })
        }),
        ("batch length one too short", |d, _| {
            edit_batch(d, 0, 0, false, |b| {
                let l = i32::from_be_bytes([b[8], b[9], b[10], b[11]]);
                set_i32(b, 8, l - 1)
            })
        }),
        ("log cut mid-header", |d, _| {
            let p = log_of(d, 0);
            let b = fs::read(&p).unwrap();
            let second = starts(&b)[1];
            fs::write(&p, &b[..second + 10]).unwrap();
        }),
        ("log cut mid-batch", |d, _| {
            let p = log_of(d, 0);
            let b = fs::read(&p).unwrap();
            fs::write(&p, &b[..b.len() - 5]).unwrap();
        }),
        ("log emptied", |d, _| fs::write(log_of(d, 0), b"").unwrap()),
        ("zero tail of 17 bytes", |d, _| {
            append_bytes(&log_of(d, 0), &[0; 17])
        }),
        ("zero tail of a page", |d, _| {
            append_bytes(&log_of(d, 0), &[0; 4096])
        }),
        ("garbage tail", |d, _| {
            append_bytes(&log_of(d, 0), &[0xa5; 300])
        }),
        ("one byte tail", |d, _| append_bytes(&log_of(d, 0), &[7])),
        // Varints and record structure (CRC valid around them).
        ("record length varint too long", |d, _| {
            let mut r = vec![0xff; 10];
            r.push(0);
            replace_batch(d, 1, one(r));
        }),
        ("key length -5", |d, _| {
            replace_batch(d, 1, one(raw_record(0, -5, b"", b"v")))
        }),
        ("key length past the record", |d, _| {
            replace_batch(d, 1, one(raw_record(0, 1000, b"k", b"v")))
        }),
        ("value length -2", |d, _| {
            replace_batch(d, 1, one(record_with(&[0, 0, -1, -2, 0], b"")))
        }),
        ("header count -3", |d, _| {
            replace_batch(d, 1, one(record_with(&[0, 0, -1, -1, -3], b"")))
        }),
        ("header count huge", |d, _| {
            replace_batch(
                d,
                1,
                one(record_with(&[0, 0, -1, -1, i32::MAX as i64], b"")),
            )
        }),
        ("header key not UTF-8", |d, _| {
            let mut tail = Vec::new();
            put_varint(&mut tail, 2);
            tail.extend_from_slice(&[0xc3, 0x28]);
            put_varint(&mut tail, -1);
            replace_batch(d, 1, one(record_with(&[0, 0, -1, -1, 1], &tail)));
        }),
        ("record length longer than its fields", |d, _| {
            let mut r = raw_record(0, 1, b"k", b"v");
            r[0] += 2; // zig-zag: declares one more byte
            r.push(0);
            replace_batch(d, 1, one(r));
        }),
        ("trailing bytes after the records", |d, _| {
            let mut b = one(raw_record(0, 1, b"k", b"v"));
            b.extend_from_slice(&[1, 2, 3]);
            let len = (b.len() - 12) as i32;
            set_i32(&mut b, 8, len);
            let crc = crc32c(&b[21..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            replace_batch(d, 1, b);
        }),
        ("records count -1", |d, _| {
            edit_batch(d, 0, 1, true, |b| set_i32(b, 57, -1))
        }),
        ("records count above the records", |d, _| {
            edit_batch(d, 0, 1, true, |b| set_i32(b, 57, 5))
        }),
        ("offset delta past lastOffsetDelta", |d, _| {
            replace_batch(d, 1, one(raw_record(3, 1, b"k", b"v")))
        }),
        ("offset delta negative", |d, _| {
            replace_batch(d, 1, one(raw_record(-1, 1, b"k", b"v")))
        }),
        ("offset deltas out of order", |d, _| {
            let b = raw_batch(
                0,
                1,
                0,
                -1,
                &[raw_record(1, 1, b"a", b"x"), raw_record(0, 1, b"b", b"y")],
            );
            replace_batch(d, 1, b);
        }),
        // Magic and CRC.
        ("magic 0", |d, _| edit_batch(d, 0, 1, false, |b| b[16] = 0)),
        ("magic 1", |d, _| edit_batch(d, 0, 1, false, |b| b[16] = 1)),
        ("magic 3", |d, _| edit_batch(d, 1, 0, false, |b| b[16] = 3)),
        ("magic 0xff", |d, _| {
            edit_batch(d, 2, 0, false, |b| b[16] = 0xff)
        }),
        ("bit flip in a value", |d, _| {
            edit_batch(d, 0, 2, false, |b| {
                let last = b.len() - 3;
                b[last] ^= 0x10
            })
        }),
        ("bit flip in the CRC", |d, _| {
            edit_batch(d, 0, 0, false, |b| b[18] ^= 1)
        }),
        ("gzip attribute, CRC fixed", |d, _| {
            edit_batch(d, 0, 1, true, |b| b[22] |= 1)
        }),
        ("unknown codec 7, CRC fixed", |d, _| {
            edit_batch(d, 1, 0, true, |b| b[22] |= 7)
        }),
        ("control batch with a user record", |d, _| {
            edit_batch(d, 0, 1, true, |b| b[22] |= 0x30)
        }),
        // Offsets (the base offset is outside the CRC).
        ("base offset -1", |d, _| {
            edit_batch(d, 0, 1, false, |b| set_i64(b, 0, -1))
        }),
        ("base offset below the previous batch", |d, _| {
            edit_batch(d, 0, 2, false, |b| set_i64(b, 0, 0))
        }),
        ("base offset i64::MAX", |d, _| {
            edit_batch(d, 0, 1, false, |b| set_i64(b, 0, i64::MAX))
        }),
        ("base offset high bit", |d, _| {
            edit_batch(d, 1, 0, false, |b| b[0] ^= 0x40)
        }),
        ("base offset below its segment", |d, _| {
            edit_batch(d, 1, 0, false, |b| set_i64(b, 0, 0))
        }),
        ("base offset inside the next segment", |d, _| {
            let next = i64::try_from(bases_of(d)[2]).expect("a valid offset");
            edit_batch(d, 1, 0, false, |b| set_i64(b, 0, next + 1))
        }),
        ("lastOffsetDelta -1, CRC fixed", |d, _| {
            edit_batch(d, 0, 1, true, |b| set_i32(b, 23, -1))
        }),
        ("lastOffsetDelta i32::MAX, CRC fixed", |d, _| {
            edit_batch(d, 0, 1, true, |b| set_i32(b, 23, i32::MAX))
        }),
        (
            "lastOffsetDelta reaching the next segment, CRC fixed",
            |d, _| edit_batch(d, 0, 1, true, |b| set_i32(b, 23, 400)),
        ),
        // Gaps (legal ones must be kept).
        ("middle segment deleted", |d, _| {
            let base = bases_of(d)[1];
            fs::remove_file(log_of(d, base)).unwrap();
        }),
        ("first segment deleted", |d, _| {
            fs::remove_file(log_of(d, 0)).unwrap()
        }),
        ("gap before the first batch and between batches", |d, _| {
            let mut b = raw_batch(3, 0, 0, -1, &[raw_record(0, 1, b"k", b"a")]);
            b.extend(raw_batch(7, 2, 0, -1, &[raw_record(2, 1, b"k", b"b")]));
            fs::write(log_of(d, 0), b).unwrap();
            fs::write(d.join(file_name(0, "index")), b"").unwrap();
        }),
        ("empty batch (compacted away)", |d, _| {
            let mut b = fs::read(log_of(d, 0)).unwrap();
            let end = starts(&b).len() as i64;
            b.extend(raw_batch(end, 4, 0, -1, &[]));
            fs::write(log_of(d, 0), b).unwrap();
        }),
        ("batch missing its first records", |d, _| {
            let mut b = fs::read(log_of(d, 0)).unwrap();
            let end = starts(&b).len() as i64;
            b.extend(raw_batch(end, 5, 0, -1, &[raw_record(5, 1, b"k", b"z")]));
            fs::write(log_of(d, 0), b).unwrap();
        }),
        // Names.
        ("name 2^64 - 1", |d, _| {
            fs::write(d.join("18446744073709551615.log"), b"").unwrap()
        }),
        ("name 2^63", |d, _| {
            fs::write(
                d.join("09223372036854775808.log"),
                encode_batch(0, &[record(0, 5)]).unwrap(),
            )
            .unwrap()
        }),
        ("name i64::MAX with an empty log", |d, _| {
            fs::write(d.join(file_name(MAX_OFFSET, "log")), b"").unwrap()
        }),
        ("name i64::MAX - 1 with a batch", |d, _| {
            let base = MAX_OFFSET - 1;
            fs::write(
                d.join(file_name(base, "log")),
                encode_batch(base, &[record(0, 5)]).unwrap(),
            )
            .unwrap()
        }),
        ("19-digit name", |d, _| {
            fs::write(d.join("9223372036854775807.log"), b"x").unwrap()
        }),
        ("non-digit name", |d, _| {
            fs::write(d.join("00000000000000000abc.log"), b"x").unwrap()
        }),
        ("leftover .deleted", |d, _| {
            fs::write(d.join("00000000000000000000.log.deleted"), b"x").unwrap()
        }),
        ("stray index", |d, _| {
            fs::write(d.join(file_name(999, "index")), [0u8; 8]).unwrap()
        }),
        ("a directory named like a segment", |d, _| {
            fs::create_dir(d.join(file_name(5000, "log"))).unwrap()
        }),
        ("a directory named .lock", |d, _| {
            let _ = fs::remove_file(d.join(".lock"));
            fs::create_dir(d.join(".lock")).unwrap()
        }),
        // Indexes.
        ("index garbage", |d, _| {
            fs::write(d.join(file_name(0, "index")), [0x5a; 64]).unwrap()
        }),
        ("index cut mid-entry", |d, _| {
            let p = d.join(file_name(0, "index"));
            let b = fs::read(&p).unwrap();
            fs::write(&p, &b[..b.len() - 3]).unwrap();
        }),
        ("index entries out of order", |d, _| {
            let p = d.join(file_name(0, "index"));
            let mut b = fs::read(&p).unwrap();
            b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
            fs::write(&p, b).unwrap();
        }),
        ("index past the log", |d, _| {
            fs::write(d.join(file_name(0, "index")), [0, 0, 0, 1, 0, 1, 0, 0]).unwrap()
        }),
        ("time index garbage", |d, _| {
            fs::write(d.join(file_name(0, "timeindex")), [0x77; 36]).unwrap()
        }),
        ("index missing", |d, _| {
            fs::remove_file(d.join(file_name(0, "index"))).unwrap()
        }),
        ("time index missing", |d, _| {
            let base = bases_of(d)[1];
            fs::remove_file(d.join(file_name(base, "timeindex"))).unwrap()
        }),
        // Sparse files.
        ("sparse 300 MiB index", |d, _| {
            sparse(&d.join(file_name(0, "index")), 300 << 20)
        }),
        ("sparse 300 MiB time index", |d, _| {
            sparse(&d.join(file_name(0, "timeindex")), 300 << 20)
        }),
        ("sparse 300 MiB log after its batches", |d, _| {
            sparse(&log_of(d, 0), 300 << 20)
        }),
        ("batch claiming 300 MiB in a sparse file", |d, _| {
            edit_batch(d, 0, 0, false, |b| set_i32(b, 8, (300 << 20) - 12));
            sparse(&log_of(d, 0), 300 << 20);
        }),
        ("sparse 4.5 GiB log", |d, _| {
            sparse(&log_of(d, 0), (4 << 30) + (512 << 20))
        }),
        ("valid 2 MiB batch over the 1 MiB limit", |d, _| {
            let base = bases_of(d).last().copied().unwrap();
            let mut b = fs::read(log_of(d, base)).unwrap();
            let next = 30;
            b.extend(
                encode_batch(next, &[BatchRecord::new(T0, None, &vec![9u8; 2 << 20])]).unwrap(),
            );
            fs::write(log_of(d, base), b).unwrap();
        }),
        // Swap and cleaner files.
        ("empty .log.swap", |d, _| {
            fs::write(d.join(format!("{}.swap", file_name(0, "log"))), b"").unwrap()
        }),
        ("full .log.swap", |d, _| {
            let b = fs::read(log_of(d, 0)).unwrap();
            fs::write(
                d.join(format!("{}.swap", file_name(0, "log"))),
                &b[..b.len() / 2],
            )
            .unwrap()
        }),
        (".index.swap", |d, _| {
            fs::write(d.join(format!("{}.swap", file_name(0, "index"))), [1; 8]).unwrap()
        }),
        (".cleaned", |d, _| {
            fs::write(d.join(format!("{}.cleaned", file_name(0, "log"))), b"x").unwrap()
        }),
    ];
    #[cfg(unix)]
    cases.extend([
        ("FIFO as a log", (|d, _| mkfifo(&log_of(d, 0))) as Craft),
        ("FIFO as an index", |d, _| {
            mkfifo(&d.join(file_name(0, "index")))
        }),
        ("FIFO as .lock", |d, _| mkfifo(&d.join(".lock"))),
        ("symlink log outside", |d, o| {
            let target = o.join("outside.log");
            fs::copy(log_of(d, 0), &target).unwrap();
            append_bytes(&target, &[1, 2, 3]);
            symlink(&target, &log_of(d, 0));
        }),
        ("symlink log to /dev/zero", |d, _| {
            symlink(Path::new("/dev/zero"), &log_of(d, 0))
        }),
        ("dangling symlink log", |d, o| {
            symlink(&o.join("nothing"), &log_of(d, 0))
        }),
        ("dangling symlink index", |d, o| {
            symlink(&o.join("nothing"), &d.join(file_name(0, "index")))
        }),
        ("symlink time index outside", |d, o| {
            let target = o.join("outside.timeindex");
            fs::write(&target, [0x11; 24]).unwrap();
            symlink(&target, &d.join(file_name(0, "timeindex")));
        }),
    ]);
    cases
}

// ---------------------------------------------------------------------------------------------
// Running a case.

/// The errors a hostile directory may produce: each says what was wrong with which file.
fn typed(e: &Error) -> bool {
    matches!(
        e,
        Error::NotASegment { .. }
            | Error::NotRegularFile { .. }
            | Error::SegmentTooLarge { .. }
            | Error::BatchTooLarge { .. }
            | Error::Corrupt { file: Some(_), .. }
            | Error::UnsupportedCompression { .. }
    )
}

/// Open → read everything → append → close → reopen → read the appended record.
fn life(dir: &Path, checkpoints: Checkpoints) -> Result<String, String> {
    let open = |cp| {
        SegmentSet::open(
            dir,
            LogSetup {
                config: config(),
                clock: clock(),
                checkpoints: cp,
                ..LogSetup::default()
            },
        )
    };
    let (mut log, report) = match open(checkpoints) {
        Ok(x) => x,
        Err(e) if typed(&e) => return Ok(format!("refused: {e}")),
        Err(e) => return Err(format!("untyped open error: {e:?}")),
    };
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        match log.read_records(next, 4096) {
            Ok(records) if records.is_empty() => break,
            Ok(records) => {
                let last = records.last().unwrap().0;
                if last < next {
                    return Err(format!("read at {next} went back to {last}"));
                }
                next = last + 1;
            }
            // Only a log opened without revalidation may hold a bad batch; a compressed one
            // (its CRC holds: Kafka may have written it) is kept and refused when read.
            Err(e) if typed(&e) && checkpoints.clean_shutdown => break,
            Err(e @ Error::UnsupportedCompression { .. }) => {
                let _ = e.to_string();
                break;
            }
            Err(e) => return Err(format!("read at {next}: {e:?} after {report:?}")),
        }
    }
    let end = log.log_end_offset();
    let appended = match log.append(&[record(end % 1000, 10)]) {
        Ok(info) => info.base_offset,
        // A log ending at the last offset there is takes no more.
        Err(Error::OffsetOutOfRange { .. }) if end >= MAX_OFFSET - 1 => {
            return Ok("opened, full".into())
        }
        Err(e) => return Err(format!("append: {e:?}")),
    };
    let cp = log.close().map_err(|e| format!("close: {e:?}"))?;
    let (log, again) = open(cp).map_err(|e| format!("reopen: {e:?}"))?;
    let got = log
        .read_records(appended, 4096)
        .map_err(|e| format!("read back: {e:?}"))?;
    if got.first().map(|r| r.0) != Some(appended) {
        return Err(format!("the appended record is not at {appended}: {got:?}"));
    }
    if again.truncation.is_some() || !again.deleted_segments.is_empty() {
        return Err(format!("a clean close left damage: {again:?}"));
    }
    Ok(format!(
        "opened: {}",
        if report.is_clean() {
            "clean"
        } else {
            "repaired"
        }
    ))
}

/// Runs `logbus dump` and `logbus verify` on the directory in a child whose address space is
/// capped at 1 GiB: reading what a sparse file claims would abort it.
#[cfg(feature = "cli")]
fn cli(dir: &Path) -> Result<(), String> {
    for command in ["dump", "verify"] {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v 1048576; exec "$0" "$1" "$2""#)
            .arg(env!("CARGO_BIN_EXE_logbus"))
            .arg(command)
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0..=2) if !stderr.contains("panicked") => {}
            code => return Err(format!("logbus {command}: status {code:?}: {stderr}")),
        }
    }
    Ok(())
}

#[cfg(not(feature = "cli"))]
fn cli(_: &Path) -> Result<(), String> {
    Ok(())
}

fn run_case(craft: Craft) -> Result<String, String> {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let dir = root.path().join("t-0");
    base_partition(&dir);
    craft(&dir, outside.path());
    let before: Vec<(PathBuf, Option<Vec<u8>>)> = fs::read_dir(outside.path())
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let bytes = fs::read(&p).ok();
            (p, bytes)
        })
        .collect();

    let mut outcomes = Vec::new();
    for dense in [true, false] {
        let options = VerifyConfig::default().dense_offsets(dense);
        let verified = peak_checked(|| verify_partition_with(&FsIo, &dir, options))?;
        outcomes.push(match verified {
            Ok(r) => format!("verify: {:?}", r.problem.map(|p| p.reason)),
            Err(e) if typed(&e) => format!("verify refused: {e}"),
            Err(e) => return Err(format!("untyped verify error: {e:?}")),
        });
    }
    cli(&dir)?;
    // Once as after a crash (everything revalidated), once trusting a clean shutdown.
    let trusting = Checkpoints {
        recovery_point: u64::MAX / 2,
        log_start_offset: 0,
        clean_shutdown: true,
    };
    for cp in [trusting, Checkpoints::default()] {
        outcomes.push(peak_checked(|| life(&dir, cp))??);
    }
    // Nothing outside the directory was written through a link.
    for (path, bytes) in before {
        if fs::read(&path).ok() != bytes {
            return Err(format!("{} was changed through a link", path.display()));
        }
    }
    Ok(outcomes.join("; "))
}

/// Runs `f`, failing when the heap grew past [`HEAP_BOUND`] meanwhile.
fn peak_checked<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let start = LIVE.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    MEASURING.store(true, Ordering::Relaxed);
    let out = f();
    MEASURING.store(false, Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(start);
    if peak > HEAP_BOUND {
        return Err(format!("{peak} heap bytes"));
    }
    Ok(out)
}

#[test]
fn hostile_directories_end_in_typed_errors_or_reported_repairs() {
    let cases = cases();
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let mut failures = Vec::new();
    // One case at a time (the heap measure is process-wide), each on a thread so that a
    // hang is a failure instead of a stuck test run.
    for (name, craft) in cases {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(run_case(craft));
        });
        // A guard against a hang, not a timing assertion: any finite time passes.
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(outcome)) => println!("{name}: {outcome}"),
            Ok(Err(failure)) => failures.push(format!("{name}: {failure}")),
            Err(mpsc::RecvTimeoutError::Timeout) => failures.push(format!("{name}: hung")),
            Err(mpsc::RecvTimeoutError::Disconnected) => failures.push(format!("{name}: panicked")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
