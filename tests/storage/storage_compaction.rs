//! Log compaction (`storage::cleaner`): a model test against a key → value map, a power loss
//! or a killed process at every I/O call of a pass, and hand-crafted leftovers of a swap.
//!
//! `LOGBUS_COMPACTION_CASES` runs more model cases (default 64).

use crate::storage_common;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use logbus::storage::cleaner::CleanConfig;
use logbus::storage::fault::FaultyIo;
use logbus::storage::file_names::file_name;
use logbus::storage::io::{DirLock, IoFile, OpenMode};
use logbus::storage::{BatchRecord, Checkpoints, Io, LogConfig, LogSetup, SegmentSet};
use logbus::{Clock, ManualClock};
use proptest::prelude::*;
use storage_common::*;

const RETENTION_MS: i64 = 10_000;
const LAG_MS: i64 = 3_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        write_buffer_bytes: 0,
        ..LogConfig::default()
    }
}

fn open_log(io: &Arc<dyn Io>, dir: &Path, clock: &Arc<ManualClock>, cp: Checkpoints) -> SegmentSet {
    let (log, report) = SegmentSet::open(
        dir,
        LogSetup {
            config: config(),
            io: io.clone(),
            clock: clock.clone() as Arc<dyn Clock>,
            checkpoints: cp,
        },
    )
    .expect("open");
    assert!(report.truncation.is_none(), "{report:?}");
    log
}

fn put(key: u32, value: Option<Vec<u8>>, ts: i64) -> BatchRecord {
    BatchRecord {
        timestamp: ts,
        key: Some(format!("k{key}").into_bytes()),
        value,
        headers: Vec::new(),
    }
}

/// A full replay: key → (offset, value) of each key's last record, tombstones removing it.
fn replay(records: &[(u64, BatchRecord)]) -> BTreeMap<Vec<u8>, (u64, Vec<u8>)> {
    let mut map = BTreeMap::new();
    for (o, r) in records {
        let k = r.key.clone().expect("keyed");
        match &r.value {
            Some(v) => {
                map.insert(k, (*o, v.clone()));
            }
            None => {
                map.remove(&k);
            }
        }
    }
    map
}

/// What every read of a compacted log must satisfy against every record ever appended
/// (`all`, by offset): offsets strictly increasing, each record the one appended at its
/// offset, the replay equal to the replay of everything, and every record younger than the
/// lag (at `now`) and every key's latest record present (tombstones only until expired).
fn check_log(
    log: &SegmentSet,
    all: &BTreeMap<u64, BatchRecord>,
    now: i64,
) -> Result<(), TestCaseError> {
    let got = read_all(log);
    for w in got.windows(2) {
        prop_assert!(
            w[0].0 < w[1].0,
            "offsets not increasing: {} then {}",
            w[0].0,
            w[1].0
        );
    }
    for (o, r) in &got {
        prop_assert_eq!(Some(r), all.get(o), "the record at {} changed", o);
    }
    let everything: Vec<(u64, BatchRecord)> = all.iter().map(|(o, r)| (*o, r.clone())).collect();
    prop_assert_eq!(replay(&got), replay(&everything));
    let present: std::collections::BTreeSet<u64> = got.iter().map(|(o, _)| *o).collect();
    let mut latest: HashMap<&[u8], u64> = HashMap::new();
    for (o, r) in all {
        latest.insert(r.key.as_deref().unwrap(), *o);
        if r.timestamp > now - LAG_MS {
            prop_assert!(
                present.contains(o),
                "a record younger than the lag went: {}",
                o
            );
        }
    }
    for (_, &o) in latest.iter() {
        let r = &all[&o];
        if r.value.is_some() || r.timestamp > now - RETENTION_MS {
            prop_assert!(
                present.contains(&o),
                "the latest record of a key went: {}",
                o
            );
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Op {
    /// A batch of (key, value length or tombstone).
    Append(Vec<(u32, Option<u8>)>),
    Roll,
    Advance(u32),
    /// A pass with a dedupe buffer of this many keys (at least a batch's).
    Clean(u16),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => proptest::collection::vec((0u32..24, prop_oneof![4 => any::<u8>().prop_map(Some), 1 => Just(None)]), 1..5)
            .prop_map(Op::Append),
        1 => Just(Op::Roll),
        2 => (0u32..6_000).prop_map(Op::Advance),
        3 => prop_oneof![Just(10_000u16), 5u16..40].prop_map(Op::Clean),
        1 => Just(Op::Reopen),
    ]
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fs = FaultyIo::new(1);
    let io: Arc<dyn Io> = Arc::new(fs);
    let dir = PathBuf::from("/c/t-0");
    let clock = Arc::new(ManualClock::new(T0));
    let mut log = open_log(&io, &dir, &clock, Checkpoints::default());
    let mut all: BTreeMap<u64, BatchRecord> = BTreeMap::new();
    let mut first_dirty = 0;
    for op in ops {
        match op {
            Op::Append(specs) => {
                let now = clock.now_ms();
                let records: Vec<BatchRecord> = specs
                    .iter()
                    .map(|&(k, v)| put(k, v.map(|n| vec![n; 1 + n as usize % 40]), now))
                    .collect();
                let info = log.append(&records).expect("append");
                for (i, r) in records.into_iter().enumerate() {
                    all.insert(info.base_offset + i as u64, r);
                }
            }
            Op::Roll => log.roll().expect("roll"),
            Op::Advance(ms) => clock.advance(Duration::from_millis(u64::from(ms))),
            Op::Clean(keys) => {
                let before_end = log.log_end_offset();
                let stats = log
                    .clean(&CleanConfig {
                        first_dirty,
                        limit_offset: u64::MAX,
                        delete_retention_ms: RETENTION_MS,
                        keep_tombstones_from: u64::MAX,
                        min_compaction_lag_ms: LAG_MS,
                        dedupe_buffer_bytes: usize::from(keys) * 24 * 10 / 9 + 24 * 8,
                    })
                    .expect("clean");
                prop_assert!(stats.first_dirty >= first_dirty || stats.segments_cleaned == 0);
                first_dirty = stats.first_dirty;
                prop_assert_eq!(log.log_end_offset(), before_end);
                check_log(&log, &all, clock.now_ms())?;
            }
            Op::Reopen => {
                let cp = log.close().expect("close");
                log = open_log(&io, &dir, &clock, cp);
            }
        }
    }
    check_log(&log, &all, clock.now_ms())?;
    assert_consistent(&*io, &dir);
    Ok(())
}

fn cases() -> u32 {
    std::env::var("LOGBUS_COMPACTION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Random appends, overwrites and tombstones against a map, with passes between them on
    /// a manual clock: after every pass the replay equals the map's, survivors keep their
    /// offsets, and nothing younger than the lag goes.
    #[test]
    fn compaction_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}

/// An `Io` that counts calls once armed and, at call `at`, cuts the power (or kills the
/// process) of the `FaultyIo` under it; every later call fails.
#[derive(Debug)]
struct CutAt {
    fs: FaultyIo,
    left: AtomicI64,
    power_loss: bool,
    cut: AtomicBool,
}

impl CutAt {
    fn tick(&self) -> io::Result<()> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(io::Error::other("cut"));
        }
        if self.left.load(Ordering::SeqCst) < 0 {
            return Ok(());
        }
        if self.left.fetch_sub(1, Ordering::SeqCst) == 0 {
            self.cut.store(true, Ordering::SeqCst);
            if self.power_loss {
                self.fs.crash();
            } else {
                self.fs.kill();
            }
            return Err(io::Error::other("cut"));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct CutFile {
    inner: Box<dyn IoFile>,
    io: Arc<CutAt>,
}

impl IoFile for CutFile {
    fn len(&self) -> io::Result<u64> {
        self.io.tick()?;
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.io.tick()?;
        self.inner.read_at(buf, pos)
    }
    fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<usize> {
        self.io.tick()?;
        self.inner.write_at(buf, pos)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.io.tick()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.io.tick()?;
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.io.tick()?;
        self.inner.sync_all()
    }
}

#[derive(Debug, Clone)]
struct CutIo(Arc<CutAt>);

impl Io for CutIo {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>> {
        self.0.tick()?;
        Ok(Box::new(CutFile {
            inner: self.0.fs.open(path, mode)?,
            io: self.0.clone(),
        }))
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.0.tick()?;
        self.0.fs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.0.tick()?;
        self.0.fs.create_dir_all(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.tick()?;
        self.0.fs.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.tick()?;
        self.0.fs.rename(from, to)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.0.tick()?;
        self.0.fs.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.0.tick()?;
        self.0.fs.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.0.tick()?;
        self.0.fs.exists(path)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        self.0.tick()?;
        self.0.fs.lock_dir(dir)
    }
}

/// A log of overwrites and tombstones over several segments, closed cleanly; returns every
/// record by offset.
fn build_log(io: &Arc<dyn Io>, dir: &Path, clock: &Arc<ManualClock>) -> BTreeMap<u64, BatchRecord> {
    let mut log = open_log(io, dir, clock, Checkpoints::default());
    let mut all = BTreeMap::new();
    for round in 0..12u32 {
        let now = clock.now_ms();
        let records: Vec<BatchRecord> = (0..6u32)
            .map(|i| {
                let key = (round * 7 + i * 5) % 13;
                let value = (i + round) % 5 != 0;
                put(key, value.then(|| vec![round as u8; 30 + i as usize]), now)
            })
            .collect();
        let info = log.append(&records).expect("append");
        for (i, r) in records.into_iter().enumerate() {
            all.insert(info.base_offset + i as u64, r);
        }
        clock.advance(Duration::from_millis(500));
    }
    log.close().expect("close");
    all
}

fn pass_config() -> CleanConfig {
    CleanConfig {
        first_dirty: 0,
        limit_offset: u64::MAX,
        delete_retention_ms: 2_000,
        keep_tombstones_from: u64::MAX,
        min_compaction_lag_ms: 0,
        dedupe_buffer_bytes: 1 << 16,
    }
}

/// Cuts every pass at each of its I/O calls in turn, and after its last, by a power loss or
/// a killed process: the log reopens valid (verify finds nothing), no record twice, every
/// record the one appended at its offset, and the replay the same as before the pass. Each
/// cut is reopened as after an unclean shutdown either from offset 0 (every segment
/// revalidated) or from the recovery point the log had before the pass (`trusted`: the
/// segments below it, cleaned ones included, opened on their indexes unchecked, which must
/// then be durable and right).
#[test]
fn a_cut_at_every_io_call_of_a_pass_loses_no_latest_value() {
    let dir = PathBuf::from("/c/t-0");
    // Second: a pass over segments cleaned once already.
    let runs = [
        (true, false, false),
        (false, false, false),
        (true, true, false),
        (false, true, false),
        (true, false, true),
        (true, true, true),
    ];
    for (power_loss, second, trusted) in runs {
        let mut at = 0i64;
        loop {
            let fs = FaultyIo::new(at as u64 + 17);
            let clock = Arc::new(ManualClock::new(T0));
            let plain: Arc<dyn Io> = Arc::new(fs.clone());
            let mut all = build_log(&plain, &dir, &clock);
            clock.advance(Duration::from_secs(60));
            if second {
                let mut log = open_log(&plain, &dir, &clock, Checkpoints::default());
                log.clean(&pass_config()).expect("first pass");
                let now = clock.now_ms();
                for i in 0..20u32 {
                    let r = put(i % 7, (i % 4 != 0).then(|| vec![i as u8; 40]), now);
                    let info = log.append(std::slice::from_ref(&r)).expect("append");
                    all.insert(info.base_offset, r);
                }
                log.roll().expect("roll");
                log.close().expect("close");
                clock.advance(Duration::from_secs(60));
            }
            let cut = Arc::new(CutAt {
                fs: fs.clone(),
                left: AtomicI64::new(-1),
                power_loss,
                cut: AtomicBool::new(false),
            });
            let io: Arc<dyn Io> = Arc::new(CutIo(cut.clone()));
            let mut log = open_log(&io, &dir, &clock, Checkpoints::default());
            let reopen = Checkpoints {
                recovery_point: if trusted { log.recovery_point() } else { 0 },
                ..Checkpoints::default()
            };
            cut.left.store(at, Ordering::SeqCst);
            let done = log.clean(&pass_config());
            let finished = !cut.cut.load(Ordering::SeqCst);
            if finished {
                let stats = done.expect("an uncut pass");
                assert!(stats.records_removed > 0, "{stats:?}");
            }
            drop(log);
            if !power_loss {
                fs.kill();
            } else if finished {
                // The cut after the pass's last call: what it left only in the page cache goes.
                fs.crash();
            }
            let log = open_log(&plain, &dir, &clock, reopen);
            check_log(&log, &all, clock.now_ms()).unwrap_or_else(|e| {
                panic!(
                    "cut at call {at} (power loss {power_loss}, second {second}, trusted \
                     {trusted}): {e}"
                )
            });
            drop(log);
            assert_consistent(&*plain, &dir);
            let names = plain.list_dir(&dir).unwrap();
            assert!(
                !names
                    .iter()
                    .any(|n| n.ends_with(".swap") || n.ends_with(".cleaned")),
                "leftovers after the open: {names:?}"
            );
            if finished {
                assert!(at > 10, "the pass made only {at} I/O calls");
                break;
            }
            at += 1;
        }
    }
}

/// Writes a file by hand, durably.
fn craft(io: &Arc<dyn Io>, path: &Path, bytes: &[u8]) {
    let f = io.open(path, OpenMode::Truncate).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_data().unwrap();
    io.sync_dir(path.parent().unwrap()).unwrap();
}

type Setup = (
    FaultyIo,
    Arc<dyn Io>,
    PathBuf,
    Arc<ManualClock>,
    BTreeMap<u64, BatchRecord>,
);

fn swap_setup() -> Setup {
    let fs = FaultyIo::new(3);
    let io: Arc<dyn Io> = Arc::new(fs.clone());
    let dir = PathBuf::from("/c/t-0");
    let clock = Arc::new(ManualClock::new(T0));
    let all = build_log(&io, &dir, &clock);
    clock.advance(Duration::from_secs(60));
    (fs, io, dir, clock, all)
}

/// The cleaned bytes of the first group of a pass (made in a copy of the log), as a swap
/// file would hold them, and the bases of the segments it covers.
fn cleaned_first_group() -> (Vec<u8>, Vec<u64>) {
    let (fs, io, dir, clock, _) = swap_setup();
    let before: Vec<u64> = {
        let log = open_log(&io, &dir, &clock, Checkpoints::default());
        log.segments().iter().map(|s| s.base_offset).collect()
    };
    let mut log = open_log(&io, &dir, &clock, Checkpoints::default());
    // The first pass shrinks the segments, the second cleans them again in groups of
    // several (groups are sized by the segments' bytes, as Kafka's).
    log.clean(&pass_config()).expect("clean");
    log.clean(&pass_config()).expect("clean");
    let after: Vec<u64> = log.segments().iter().map(|s| s.base_offset).collect();
    drop(log);
    let first = fs.read_file(&dir.join(file_name(after[0], "log"))).unwrap();
    let covered = before
        .iter()
        .copied()
        .filter(|b| after.get(1).map_or(true, |n| b < n))
        .collect();
    (first, covered)
}

/// A `.swap` beside the old segments it covers (a pass cut after its rename): the open
/// finishes the swap, replacing them, and serves nothing twice.
#[test]
fn a_crafted_swap_beside_its_old_segments_replaces_them() {
    let (cleaned, covered) = cleaned_first_group();
    assert!(covered.len() >= 2, "{covered:?}");
    let (_fs, io, dir, clock, all) = swap_setup();
    let swap = dir.join(format!("{}.swap", file_name(0, "log")));
    craft(&io, &swap, &cleaned);
    let log = open_log(&io, &dir, &clock, Checkpoints::default());
    check_log(&log, &all, clock.now_ms()).unwrap();
    let bases: Vec<u64> = log.segments().iter().map(|s| s.base_offset).collect();
    for b in &covered[1..] {
        assert!(!bases.contains(b), "old segment {b} still there: {bases:?}");
    }
    drop(log);
    assert_consistent(&*io, &dir);
}

/// A `.swap` whose old segments are already gone (removed before the cut): it becomes the
/// segment.
#[test]
fn a_crafted_swap_whose_old_segments_are_gone_becomes_the_segment() {
    let (cleaned, covered) = cleaned_first_group();
    let (_fs, io, dir, clock, all) = swap_setup();
    for b in &covered {
        for s in ["log", "index", "timeindex"] {
            let p = dir.join(file_name(*b, s));
            if io.exists(&p).unwrap() {
                io.remove_file(&p).unwrap();
            }
        }
    }
    craft(
        &io,
        &dir.join(format!("{}.swap", file_name(0, "log"))),
        &cleaned,
    );
    let (log, report) = SegmentSet::open(
        &dir,
        LogSetup {
            config: config(),
            io: io.clone(),
            clock: clock.clone() as Arc<dyn Clock>,
            checkpoints: Checkpoints::default(),
        },
    )
    .unwrap();
    assert_eq!(report.swaps_completed.len(), 1, "{report:?}");
    check_log(&log, &all, clock.now_ms()).unwrap();
    drop(log);
    assert_consistent(&*io, &dir);
}

/// Stray `.cleaned` files and index `.swap` files go; a damaged `.swap` beside its old
/// segment is set aside (never served); a `.deleted` file goes.
#[test]
fn crafted_cleaned_deleted_and_damaged_swap_files_at_open() {
    let (_fs, io, dir, clock, all) = swap_setup();
    let log0 = file_name(0, "log");
    craft(&io, &dir.join(format!("{log0}.cleaned")), b"half a pass");
    craft(
        &io,
        &dir.join(format!("{}.swap", file_name(0, "index"))),
        &[0; 16],
    );
    craft(
        &io,
        &dir.join(format!("{log0}.swap")),
        b"not a batch at all",
    );
    craft(
        &io,
        &dir.join(format!("{}.deleted", file_name(3, "log"))),
        b"x",
    );
    let (log, report) = SegmentSet::open(
        &dir,
        LogSetup {
            config: config(),
            io: io.clone(),
            clock: clock.clone() as Arc<dyn Clock>,
            checkpoints: Checkpoints::default(),
        },
    )
    .unwrap();
    assert!(report.swaps_completed.is_empty(), "{report:?}");
    assert_eq!(report.set_aside.len(), 1, "{report:?}");
    check_log(&log, &all, clock.now_ms()).unwrap();
    assert_eq!(
        read_all(&log).len(),
        all.len(),
        "nothing was cleaned or lost"
    );
    drop(log);
    let names = io.list_dir(&dir).unwrap();
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with(".cleaned") || n.ends_with(".swap") || n.ends_with(".deleted")),
        "{names:?}"
    );
}

/// A group whose records were all superseded or expired once kept its last batch whole: a
/// superseded value there outlived the expired tombstone of a later group, and the key came
/// back (found by `compaction_model`). The group now keeps that batch's header only.
#[test]
fn an_emptied_group_keeps_no_value_behind_a_dropped_tombstone() {
    let fs = FaultyIo::new(5);
    let io: Arc<dyn Io> = Arc::new(fs);
    let dir = PathBuf::from("/c/t-0");
    let clock = Arc::new(ManualClock::new(T0));
    let mut log = open_log(&io, &dir, &clock, Checkpoints::default());
    let mut all = BTreeMap::new();
    let mut append = |log: &mut SegmentSet, r: BatchRecord| {
        let info = log.append(std::slice::from_ref(&r)).unwrap();
        all.insert(info.base_offset, r);
    };
    // Segment 1: k1's value, superseded by segment 2's k1 value, then deleted in segment 3
    // (segments 2 and 3 make one group, where the tombstone is not the last batch).
    append(&mut log, put(1, Some(vec![1; 900]), T0));
    log.roll().unwrap();
    append(&mut log, put(1, Some(vec![2; 900]), T0));
    log.roll().unwrap();
    append(&mut log, put(1, None, T0));
    append(&mut log, put(3, Some(vec![4; 10]), T0));
    log.roll().unwrap();
    append(&mut log, put(2, Some(vec![3; 10]), T0));
    clock.advance(Duration::from_secs(60));
    let config = CleanConfig {
        delete_retention_ms: 1_000,
        ..pass_config()
    };
    log.clean(&config).unwrap();
    check_log(&log, &all, clock.now_ms()).unwrap();
    log.clean(&config).unwrap();
    check_log(&log, &all, clock.now_ms()).unwrap();
    let keys: Vec<_> = read_all(&log).into_iter().map(|(_, r)| r.key).collect();
    assert_eq!(keys, [Some(b"k3".to_vec()), Some(b"k2".to_vec())]);
}

/// The open that finishes a swap, cut at each of its I/O calls (power loss or kill): the
/// next open finishes it, and nothing is lost or served twice.
#[test]
fn a_cut_during_the_open_that_finishes_a_swap() {
    let (cleaned, covered) = cleaned_first_group();
    assert!(covered.len() >= 2, "{covered:?}");
    for power_loss in [true, false] {
        let mut at = 0i64;
        loop {
            let (fs, plain, dir, clock, all) = swap_setup();
            craft(
                &plain,
                &dir.join(format!("{}.swap", file_name(0, "log"))),
                &cleaned,
            );
            let cut = Arc::new(CutAt {
                fs: fs.clone(),
                left: AtomicI64::new(at),
                power_loss,
                cut: AtomicBool::new(false),
            });
            let io: Arc<dyn Io> = Arc::new(CutIo(cut.clone()));
            let opened = SegmentSet::open(
                &dir,
                LogSetup {
                    config: config(),
                    io,
                    clock: clock.clone() as Arc<dyn Clock>,
                    checkpoints: Checkpoints::default(),
                },
            );
            let finished = !cut.cut.load(Ordering::SeqCst);
            drop(opened);
            if !power_loss {
                fs.kill();
            }
            let log = open_log(&plain, &dir, &clock, Checkpoints::default());
            check_log(&log, &all, clock.now_ms()).unwrap_or_else(|e| {
                panic!("cut at call {at} of the open (power loss {power_loss}): {e}")
            });
            let bases: Vec<u64> = log.segments().iter().map(|s| s.base_offset).collect();
            for b in &covered[1..] {
                assert!(
                    !bases.contains(b),
                    "cut at {at}: old segment {b} back: {bases:?}"
                );
            }
            drop(log);
            assert_consistent(&*plain, &dir);
            if finished {
                break;
            }
            at += 1;
        }
    }
}

/// A log of 24 one-record batches (keys 0..12 twice: the second round supersedes the
/// first) at `segment_index_bytes` = `index_bytes`, an offset entry for each batch after a
/// segment's first; rolled, and reopened at `segment_index_bytes` = 24 (three entries).
fn index_limited_log(
    io: &Arc<dyn Io>,
    dir: &Path,
    clock: &Arc<ManualClock>,
    index_bytes: u64,
) -> (SegmentSet, BTreeMap<u64, BatchRecord>) {
    let setup = |index_bytes| LogSetup {
        config: LogConfig {
            segment_bytes: 1 << 20,
            segment_index_bytes: index_bytes,
            index_interval_bytes: 0,
            write_buffer_bytes: 0,
            ..LogConfig::default()
        },
        io: io.clone(),
        clock: clock.clone() as Arc<dyn Clock>,
        checkpoints: Checkpoints::default(),
    };
    let (mut log, _) = SegmentSet::open(dir, setup(index_bytes)).expect("open");
    let mut all = BTreeMap::new();
    for i in 0..24u32 {
        let r = put(i % 12, Some(vec![i as u8; 20]), clock.now_ms());
        let info = log.append(std::slice::from_ref(&r)).expect("append");
        all.insert(info.base_offset, r);
    }
    log.roll().expect("roll");
    log.close().expect("close");
    clock.advance(Duration::from_secs(60));
    let (log, _) = SegmentSet::open(dir, setup(24)).expect("reopen");
    (log, all)
}

/// The `.index` files of the closed segments, by base offset: their entry counts.
fn index_entries(log: &SegmentSet, io: &dyn Io, dir: &Path) -> Vec<(u64, usize)> {
    let segments = log.segments();
    segments[..segments.len() - 1]
        .iter()
        .map(|s| {
            let path = dir.join(file_name(s.base_offset, "index"));
            let len = io.open(&path, OpenMode::Read).unwrap().len().unwrap();
            (s.base_offset, len as usize / 8)
        })
        .collect()
}

/// Segments rolled on full indexes: the cleaned groups' survivors would fit one segment,
/// but each group's offset index stays within `segment_index_bytes` (three entries), as
/// Kafka's grouping bounds it; the log reopens whole and consistent.
#[test]
fn cleaned_groups_keep_their_indexes_within_the_limit() {
    let io: Arc<dyn Io> = Arc::new(FaultyIo::new(3));
    let dir = PathBuf::from("/c/index-limit-0");
    let clock = Arc::new(ManualClock::new(T0));
    let (mut log, all) = index_limited_log(&io, &dir, &clock, 24);
    let before = log.segments().len();
    assert!(before > 4, "{:?}", log.segments());
    let stats = log.clean(&pass_config()).expect("clean");
    assert_eq!(stats.records_removed, 12, "{stats:?}");
    let entries = index_entries(&log, &*io, &dir);
    assert!(entries.iter().all(|&(_, n)| n <= 3), "{entries:?}");
    assert!(
        log.segments().len() < before,
        "small survivors merge: {:?}",
        log.segments()
    );
    check_log(&log, &all, clock.now_ms()).unwrap();
    log.close().expect("close");
    let (log, report) = SegmentSet::open(
        &dir,
        LogSetup {
            config: LogConfig {
                segment_index_bytes: 24,
                ..config()
            },
            io: io.clone(),
            clock: clock.clone() as Arc<dyn Clock>,
            checkpoints: Checkpoints::default(),
        },
    )
    .expect("reopen");
    assert!(report.rebuilt_indexes.is_empty(), "{report:?}");
    check_log(&log, &all, clock.now_ms()).unwrap();
    drop(log);
    assert_consistent(&*io, &dir);
}

/// A segment written under a larger `segment_index_bytes` than the log has now: alone in
/// its group, its cleaned offset index outgrows the limit and is not read back as written;
/// the swap rebuilds it from the log rather than failing, and the log reopens whole and
/// consistent.
#[test]
fn a_cleaned_segment_whose_index_outgrows_the_limit_is_swapped_in() {
    let io: Arc<dyn Io> = Arc::new(FaultyIo::new(4));
    let dir = PathBuf::from("/c/index-limit-1");
    let clock = Arc::new(ManualClock::new(T0));
    let (mut log, all) = index_limited_log(&io, &dir, &clock, 10 << 20);
    assert_eq!(log.segments().len(), 2, "{:?}", log.segments());
    let stats = log.clean(&pass_config()).expect("clean");
    assert_eq!(stats.records_removed, 12, "{stats:?}");
    let entries = index_entries(&log, &*io, &dir);
    assert!(entries.iter().any(|&(_, n)| n > 3), "{entries:?}");
    check_log(&log, &all, clock.now_ms()).unwrap();
    drop(log);
    assert_consistent(&*io, &dir);
}

/// The old files a pass renamed `.deleted` are removed after the commit, without the lock:
/// until then they are there; one already gone (a retention pass reused its name and removed
/// it) is no error; and a log dropped before the removal leaves them to the next open.
#[test]
fn deleted_files_are_removed_after_the_commit() {
    let fs = FaultyIo::new(5);
    let io: Arc<dyn Io> = Arc::new(fs.clone());
    let dir = PathBuf::from("/c/deleted-0");
    let clock = Arc::new(ManualClock::new(T0));
    let mut all = build_log(&io, &dir, &clock);
    clock.advance(Duration::from_secs(60));
    let deleted = |io: &Arc<dyn Io>| -> Vec<String> {
        let mut names = io.list_dir(&dir).unwrap();
        names.retain(|n| n.ends_with(".deleted"));
        names
    };
    for drop_first in [false, true] {
        let mut log = open_log(&io, &dir, &clock, Checkpoints::default());
        let cleaned = log.plan_clean(&pass_config()).unwrap().build().unwrap();
        log.commit_clean(cleaned).expect("commit");
        let files = log.take_deleted_files();
        let left = deleted(&io);
        assert!(!left.is_empty(), "nothing renamed .deleted");
        if drop_first {
            drop(files);
            drop(log);
            let log = open_log(&io, &dir, &clock, Checkpoints::default());
            assert!(deleted(&io).is_empty(), "the open removes them");
            check_log(&log, &all, clock.now_ms()).unwrap();
        } else {
            io.remove_file(&dir.join(&left[0])).unwrap();
            files.remove().expect("a file already gone is no error");
            assert!(deleted(&io).is_empty());
            check_log(&log, &all, clock.now_ms()).unwrap();
            // New dirty data for the second round's pass.
            let r = put(1, Some(vec![9; 40]), clock.now_ms());
            let info = log.append(std::slice::from_ref(&r)).unwrap();
            all.insert(info.base_offset, r);
            log.roll().unwrap();
            log.close().unwrap();
            clock.advance(Duration::from_secs(60));
        }
    }
}

/// An `Io` that, before the next file removal, removes the `.deleted` files a cleaning pass
/// left to remove (`DeletedFiles`, whose removal runs without the set's lock, so at any
/// moment of another operation).
#[derive(Debug, Clone)]
struct RemoveAtSync {
    fs: FaultyIo,
    pending: Arc<std::sync::Mutex<Option<logbus::storage::cleaner::DeletedFiles>>>,
}

impl Io for RemoveAtSync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>> {
        self.fs.open(path, mode)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.fs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.fs.create_dir_all(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let pending = self.pending.lock().unwrap().take();
        if let Some(files) = pending {
            files.remove().map_err(io::Error::other)?;
        }
        self.fs.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.fs.rename(from, to)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.fs.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.fs.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.fs.exists(path)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        self.fs.lock_dir(dir)
    }
}

/// Retention deletes the cleaned segments while the pass's old files still wait for their
/// removal under the same `.deleted` names: the cleaner's removal, running between
/// retention's renames and its own removals, takes retention's files too. Retention must
/// take that as done (as the cleaner's removal takes a file already gone), not fail and
/// take the log offline.
#[test]
fn retention_shares_deleted_names_with_a_passs_pending_removal() {
    let fs = FaultyIo::new(6);
    let pending = Arc::new(std::sync::Mutex::new(None));
    let io: Arc<dyn Io> = Arc::new(RemoveAtSync {
        fs: fs.clone(),
        pending: pending.clone(),
    });
    let dir = PathBuf::from("/c/deleted-retention-0");
    let clock = Arc::new(ManualClock::new(T0));
    build_log(&io, &dir, &clock);
    clock.advance(Duration::from_secs(60));
    let (mut log, _) = SegmentSet::open(
        &dir,
        LogSetup {
            config: LogConfig {
                retention_ms: 1_000,
                ..config()
            },
            io: io.clone(),
            clock: clock.clone() as Arc<dyn Clock>,
            checkpoints: Checkpoints::default(),
        },
    )
    .expect("open");
    let cleaned = log.plan_clean(&pass_config()).unwrap().build().unwrap();
    let stats = log.commit_clean(cleaned).expect("commit");
    assert!(stats.segments_cleaned > 0, "{stats:?}");
    *pending.lock().unwrap() = Some(log.take_deleted_files());
    let end = log.log_end_offset();
    let gone = log
        .delete_old_segments(end)
        .expect("retention beside a pending removal");
    assert!(!gone.is_empty() && gone[0] == 0, "{gone:?}");
    assert!(pending.lock().unwrap().is_none(), "the removal ran");
    let names = io.list_dir(&dir).unwrap();
    assert!(!names.iter().any(|n| n.ends_with(".deleted")), "{names:?}");
    // Still online: it takes appends.
    log.append(&[put(1, Some(vec![1]), clock.now_ms())])
        .expect("append after retention");
}

/// Offset and time lookups on cleaned segments, at every offset and every timestamp (and
/// one past each): each finds the first surviving record at or after it, as a full read
/// does, right after the pass and after reopening on the cleaned indexes (trusted) or with
/// every segment revalidated. The timestamps go up and down, so a batch's max timestamp is
/// often one a filtered batch lost, and segments' maxima lie mid-segment.
#[test]
fn lookups_on_cleaned_segments_at_every_offset_and_timestamp() {
    let fs = FaultyIo::new(7);
    let io: Arc<dyn Io> = Arc::new(fs.clone());
    let dir = PathBuf::from("/c/lookups-0");
    let clock = Arc::new(ManualClock::new(T0));
    let mut log = open_log(&io, &dir, &clock, Checkpoints::default());
    for round in 0..30u32 {
        let now = clock.now_ms();
        let n = 1 + round % 4;
        let records: Vec<BatchRecord> = (0..n)
            .map(|i| {
                let key = (round * 3 + i * 7) % 11;
                // Up and down around `now`, by key: a key's old values carry the large ones.
                let ts = now + i64::from((key * 37 + round * 13) % 29) * 100 - 1_400;
                put(
                    key,
                    Some(vec![round as u8; 10 + (i * 17 % 40) as usize]),
                    ts,
                )
            })
            .collect();
        log.append(&records).expect("append");
        clock.advance(Duration::from_millis(300));
    }
    log.roll().expect("roll");
    clock.advance(Duration::from_secs(60));
    let stats = log.clean(&pass_config()).expect("clean");
    assert!(stats.records_removed > 0, "{stats:?}");
    let check = |log: &SegmentSet, when: &str| {
        let all = read_all(log);
        let end = log.log_end_offset();
        for o in log.log_start_offset()..end {
            let want = all.iter().find(|(x, _)| *x >= o).map(|(x, _)| *x);
            let got = log
                .read_records(o, 1)
                .unwrap_or_else(|e| panic!("{when}: read at {o}: {e}"))
                .first()
                .map(|(x, _)| *x);
            assert_eq!(got, want, "{when}: the first record at or after offset {o}");
        }
        let mut stamps: Vec<i64> = all.iter().map(|(_, r)| r.timestamp).collect();
        stamps.sort_unstable();
        stamps.dedup();
        for ts in stamps.iter().flat_map(|&t| [t - 1, t, t + 1]) {
            let want = all
                .iter()
                .find(|(_, r)| r.timestamp >= ts)
                .map(|(o, r)| (*o, r.timestamp));
            let got = log
                .offset_for_timestamp(ts)
                .unwrap_or_else(|e| panic!("{when}: time lookup {ts}: {e}"));
            assert_eq!(got, want, "{when}: the first record at or after time {ts}");
        }
    };
    check(&log, "after the pass");
    let trusted = log.recovery_point();
    log.close().expect("close");
    for recovery_point in [trusted, 0] {
        let reopen = Checkpoints {
            recovery_point,
            ..Checkpoints::default()
        };
        let log = open_log(&io, &dir, &clock, reopen);
        check(
            &log,
            &format!("reopened at recovery point {recovery_point}"),
        );
    }
    assert_consistent(&*io, &dir);
}

/// A batch whose CRC fails only because a key was changed to another valid key (its
/// structure intact): the key-map pass reads CRCs unchecked, so it maps the wrong key, and
/// the rewrite, which checks, must fail the pass before anything is swapped; the log keeps
/// every segment as it was.
#[test]
fn a_key_changed_under_a_bad_crc_fails_the_pass_before_any_swap() {
    let (fs, io, dir, clock, _all) = swap_setup();
    let path = dir.join(file_name(0, "log"));
    let mut bytes = fs.read_file(&path).unwrap();
    // A key in the segment's last batch, `k<digit>`, changed to another key.
    let at = (61..bytes.len() - 1)
        .rev()
        .find(|&i| bytes[i] == b'k' && bytes[i + 1].is_ascii_digit())
        .expect("a key");
    bytes[at + 1] = if bytes[at + 1] == b'1' { b'2' } else { b'1' };
    craft(&io, &path, &bytes);
    let mut log = open_log(
        &io,
        &dir,
        &clock,
        Checkpoints {
            recovery_point: u64::MAX,
            ..Checkpoints::default()
        },
    );
    let before: Vec<u64> = log.segments().iter().map(|s| s.base_offset).collect();
    let done = log.clean(&pass_config());
    assert!(
        matches!(done, Err(logbus::Error::Corrupt { .. })),
        "a pass over a bad CRC: {done:?}"
    );
    let after: Vec<u64> = log.segments().iter().map(|s| s.base_offset).collect();
    assert_eq!(before, after);
    assert_eq!(
        fs.read_file(&path).unwrap(),
        bytes,
        "the segment is untouched"
    );
    let names = io.list_dir(&dir).unwrap();
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with(".swap") || n.ends_with(".cleaned") || n.ends_with(".deleted")),
        "{names:?}"
    );
}

/// The log reopened while the last instance's pass still has its old files to remove (the
/// data directory's cleaner removes them after the lock): the open removes the same
/// `.deleted` files, and one the pending removal took first is no error.
#[test]
fn an_open_beside_a_pending_removal_of_the_same_deleted_files() {
    let fs = FaultyIo::new(8);
    let pending = Arc::new(std::sync::Mutex::new(None));
    let io: Arc<dyn Io> = Arc::new(RemoveAtSync {
        fs: fs.clone(),
        pending: pending.clone(),
    });
    let dir = PathBuf::from("/c/deleted-reopen-0");
    let clock = Arc::new(ManualClock::new(T0));
    let all = build_log(&io, &dir, &clock);
    clock.advance(Duration::from_secs(60));
    let mut log = open_log(&io, &dir, &clock, Checkpoints::default());
    let cleaned = log.plan_clean(&pass_config()).unwrap().build().unwrap();
    log.commit_clean(cleaned).expect("commit");
    let files = log.take_deleted_files();
    drop(log);
    *pending.lock().unwrap() = Some(files);
    let log = open_log(&io, &dir, &clock, Checkpoints::default());
    assert!(pending.lock().unwrap().is_none(), "the removal ran");
    check_log(&log, &all, clock.now_ms()).unwrap();
    drop(log);
    assert_consistent(&*io, &dir);
}

/// The rewrite drops a batch of the dirty section whole, unread, when none of its offsets is
/// a key's latest; a batch holding a keyless record is read again and that record kept
/// (its keyed records superseded all the same), wherever it lies among dropped batches.
#[test]
fn batches_dropped_unread_never_take_a_keyless_record() {
    let tmp = tempfile::tempdir().unwrap();
    let io: Arc<dyn Io> = Arc::new(logbus::storage::FsIo);
    let clock = Arc::new(ManualClock::new(1_000_000));
    let mut log = open_log(&io, tmp.path(), &clock, Checkpoints::default());
    let mut all = BTreeMap::new();
    let mut keyless = Vec::new();
    for b in 0..60u32 {
        let mut batch: Vec<BatchRecord> =
            (0..4).map(|k| put(k, Some(vec![b as u8; 40]), 1)).collect();
        // Every seventh batch carries a keyless record, first, in the middle or last.
        if b % 7 == 3 {
            let at = (b as usize / 7) % 5;
            batch.insert(at.min(4), BatchRecord::new(1, None, &[0xee; 40]));
        }
        let first = log.log_end_offset();
        log.append(&batch).unwrap();
        for (i, r) in batch.into_iter().enumerate() {
            let o = first + i as u64;
            if r.key.is_none() {
                keyless.push(o);
            }
            all.insert(o, r);
        }
    }
    log.roll().unwrap();
    assert!(log.segments().len() > 4, "{:?}", log.segments());
    let stats = log.clean(&pass_config()).unwrap();
    let active = log.segments().last().unwrap().base_offset;
    let mut kept: Vec<(u64, BatchRecord)> = Vec::new();
    let mut next = 0;
    while next < log.log_end_offset() {
        let records = log.read_records(next, 1 << 20).unwrap();
        let Some(last) = records.last() else { break };
        next = last.0 + 1;
        kept.extend(records);
    }
    let offsets: Vec<u64> = kept.iter().map(|r| r.0).collect();
    for o in &keyless {
        assert!(
            offsets.contains(o),
            "keyless record at {o} lost: {offsets:?}"
        );
    }
    let mut latest: HashMap<Vec<u8>, u64> = HashMap::new();
    for (o, r) in all.range(..active) {
        if let Some(k) = &r.key {
            latest.insert(k.clone(), *o);
        }
    }
    let mut want: Vec<u64> = latest
        .into_values()
        .chain(keyless.iter().copied())
        .collect();
    want.extend(all.range(active..).map(|(o, _)| *o));
    want.sort_unstable();
    want.dedup();
    assert_eq!(offsets, want, "{stats:?}");
    for (o, r) in &kept {
        assert_eq!(r, &all[o], "record at {o}");
    }
    assert_eq!(
        stats.records_removed,
        (all.len() - want.len()) as u64,
        "{stats:?}"
    );
}

/// A wholly superseded batch (which the rewrite drops unread) with a bad CRC fails the pass
/// before any swap: the key map's scan checks every batch it reads.
#[test]
fn a_bad_crc_in_a_batch_dropped_unread_fails_the_pass() {
    let (fs, io, dir, clock, _all) = swap_setup();
    let path = dir.join(file_name(0, "log"));
    let mut bytes = fs.read_file(&path).unwrap();
    // A byte of the first batch's last record (its value), past the header.
    let len = i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize + 12;
    bytes[len - 2] ^= 0x55;
    craft(&io, &path, &bytes);
    let mut log = open_log(
        &io,
        &dir,
        &clock,
        Checkpoints {
            recovery_point: u64::MAX,
            ..Checkpoints::default()
        },
    );
    let before: Vec<u64> = log.segments().iter().map(|s| s.base_offset).collect();
    let done = log.clean(&pass_config());
    assert!(
        matches!(done, Err(logbus::Error::Corrupt { .. })),
        "a pass over a bad CRC: {done:?}"
    );
    let after: Vec<u64> = log.segments().iter().map(|s| s.base_offset).collect();
    assert_eq!(before, after);
}
