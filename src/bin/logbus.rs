//! `logbus`: look inside segment directories (logbus's, or Kafka's own: the format is the same).
//!
//! - `logbus dump <segment-or-dir>` prints the batches and records of `.log` files and the
//!   entries of `.index` and `.timeindex` files, in the layout of Kafka's `kafka-dump-log`
//!   (`DumpLogSegments`). Add `--print-data` for keys and values.
//! - `logbus verify <dir>` checks a partition directory, or every one below a directory, with
//!   [`logbus::storage::verify`], and names the file and byte position of the first problem;
//!   every offset must be present unless `--allow-gaps` is given. On a data directory it also
//!   reports the marker (`meta.properties`): a damaged one, or none beside topic metadata, is
//!   a problem.
//!
//! - `logbus describe <data-dir>` lists a broker's closed data directory: its persisted
//!   topics, each partition's log start and log end, and each group's committed offsets and
//!   lag, and its marker (its directory id and its broker's directories; it opens the
//!   directory, so recovery runs, and closes it cleanly); for replicated
//!   topics, each partition's replicas, leader, leader epoch, ISR and high watermark as last
//!   recorded, and the replica kept in this directory with its leader epochs.
//!
//! - `logbus export <data-dir> --bootstrap-servers host:port` copies persisted topics into
//!   a Kafka cluster (resumable); `logbus import <data-dir> --bootstrap-servers host:port
//!   --topic t` copies Kafka topics into a data directory (resumable too; the `kafka`
//!   feature; see `logbus::kafka::export` and `docs/storage-tools.md`).
//!
//! Exit status: 0 when all went well (for `verify`: every partition is consistent; for
//! `export` and `import`: the target holds every source record asked for, once and in
//! order, or the copy stopped at `--max-records` and says so), 1 when `verify` found a
//! problem, 2 for bad input (a missing path, a file that is not a segment, an unreadable
//! file, a dangling symlink, a special file), a usage error, or an export or import that
//! failed (its message names what the target lacks, or holds that it should not). A
//! partition or file that cannot be read is reported and skipped: every other one is still
//! verified or dumped, and the status is set at the end. `dump` prints what it can of
//! damaged files (a batch whose CRC does not match is shown with `isvalid: false`) and exits
//! 0; checking is `verify`'s job.
//!
//! Built only with the `cli` feature: `cargo run --features cli --bin logbus -- dump <path>`.

use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use logbus::storage::file_names::{parse_file_name, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use logbus::storage::record_batch::{
    crc32c, Batch, BatchHeader, TimestampType, CORRUPT_BELOW_BATCH_LENGTH, HEADER_SIZE,
    HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD,
};
use logbus::storage::verify::{partition_dirs, verify_path_with, VerifyConfig};
use logbus::storage::{
    offset_index, time_index, FsIo, Io, IoFile, OpenMode, VERIFY_MAX_BATCH_BYTES,
};
use logbus::Error;

#[derive(Debug, Parser)]
#[command(
    name = "logbus",
    version,
    about = "Dump and verify partition directories in Kafka's segment format; describe and compact a data directory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the batches, records and index entries of a segment file (.log, .index,
    /// .timeindex), a partition directory, or a directory of partition directories, as
    /// Kafka's kafka-dump-log does.
    Dump {
        /// A segment file or a directory.
        path: PathBuf,
        /// Also print each record's key and value (UTF-8 text as is, other bytes as 0x-hex).
        #[arg(long)]
        print_data: bool,
        /// Batches larger than this many bytes are not read into memory (a line says so).
        #[arg(long, default_value_t = VERIFY_MAX_BATCH_BYTES)]
        max_batch_bytes: u64,
    },
    /// Check every segment and index of a partition directory (or of each partition directory
    /// in a directory): exit 0 when all are consistent, 1 naming the file and byte position of
    /// the first problem otherwise.
    Verify {
        /// A partition directory, or a directory of them.
        path: PathBuf,
        /// Accept missing offsets (between segments, or inside compacted batches) where the
        /// storage layer's own checks allow them. By default every offset from the first
        /// segment's base offset to the log end must be present.
        #[arg(long)]
        allow_gaps: bool,
        /// Batches larger than this many bytes are not read into memory: a valid one is
        /// reported as a problem, unchecked.
        #[arg(long, default_value_t = VERIFY_MAX_BATCH_BYTES)]
        max_batch_bytes: u64,
    },
    /// List a broker's data directory (not in use): topics, partitions with log start and
    /// log end, groups with committed offsets and lag.
    Describe {
        /// The data directory.
        path: PathBuf,
    },
    /// Run the log cleaner offline over a data directory (not in use): one cleaning pass over
    /// every dirty partition of the topics whose cleanup policy compacts, whatever their
    /// min_cleanable_dirty_ratio. Prints what was removed and each partition's progress.
    Compact {
        /// The data directory.
        path: PathBuf,
    },
    /// Copy a data directory's persisted topics (not in use) into a Kafka cluster, keeping
    /// each record's partition, key, value, timestamp and headers (plus a
    /// `logbus.export.source` header naming the source record); run again to resume an
    /// interrupted export. Prints the offset mapping. (The `kafka` feature.)
    #[cfg(feature = "kafka")]
    Export(kafka::Args),
    /// Copy Kafka topics into a data directory as persisted topics of bytes; run again to
    /// resume an import stopped before the end. (The `kafka` feature.)
    #[cfg(feature = "kafka")]
    Import(kafka::Args),
}

#[cfg(feature = "kafka")]
#[path = "logbus/kafka.rs"]
mod kafka;

/// Why a command failed.
enum Failure {
    /// The input was bad (or unreadable): exit 2.
    Input(Error),
    /// Writing the output failed (e.g. a closed pipe).
    Output(io::Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Input(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Output(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let result = match &cli.command {
        Command::Dump {
            path,
            print_data,
            max_batch_bytes,
        } => dump(&mut out, path, *print_data, *max_batch_bytes),
        Command::Verify {
            path,
            allow_gaps,
            max_batch_bytes,
        } => verify(&mut out, path, *allow_gaps, *max_batch_bytes),
        Command::Describe { path } => describe(&mut out, path),
        Command::Compact { path } => compact(&mut out, path),
        #[cfg(feature = "kafka")]
        Command::Export(args) => kafka::export(&mut out, args),
        #[cfg(feature = "kafka")]
        Command::Import(args) => kafka::import(&mut out, args),
    };
    let result = result.and_then(|code| {
        out.flush()?;
        Ok(code)
    });
    match result {
        Ok(code) => code,
        // `logbus dump ... | head`: the reader is gone, nothing more to say.
        Err(Failure::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(e)) => {
            eprintln!("logbus: cannot write the output: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Input(e)) => {
            drop(out.flush());
            eprintln!("logbus: {}", chain(&e));
            ExitCode::from(2)
        }
    }
}

/// An error with its sources, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let _ = write!(text, ": {s}");
        source = s.source();
    }
    text
}

// ---------------------------------------------------------------------------------------------
// describe

fn describe(out: &mut dyn Write, path: &Path) -> Result<ExitCode, Failure> {
    if !path.is_dir() {
        return Err(Failure::Input(Error::Io {
            context: format!("opening data directory {}", path.display()),
            source: io::Error::new(io::ErrorKind::NotFound, "not a directory"),
        }));
    }
    let d = logbus::persist::describe_data_dir(path)?;
    writeln!(out, "Data directory {}", path.display())?;
    if let Some(m) = &d.marker {
        writeln!(out, "{}", marker_line(m))?;
    }
    for (name, partitions, key, value) in &d.topics {
        writeln!(
            out,
            "Topic: {name}\tPartitions: {partitions}\tKey: {key}\tValue: {value}"
        )?;
        for (_, p, start, end) in d.partitions.iter().filter(|x| x.0 == *name) {
            writeln!(
                out,
                "\tPartition: {p}\tLogStartOffset: {start}\tLogEndOffset: {end}"
            )?;
            if let Some((_, _, c)) = d.cleaner.iter().find(|c| c.0 == *name && c.1 == *p) {
                writeln!(out, "\tPartition: {p}\t{}", cleaner_line(c))?;
            }
        }
    }
    let ids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    for (name, partitions, rf, key, value) in &d.replicated_topics {
        writeln!(
            out,
            "Topic: {name}\tPartitions: {partitions}\tReplicationFactor: {rf}\tKey: {key}\tValue: {value}"
        )?;
        for r in d.replicated.iter().filter(|r| r.topic == *name) {
            let leader = r
                .leader
                .map_or_else(|| "none".to_string(), |l| l.to_string());
            writeln!(
                out,
                "\tPartition: {}\tLeader: {leader}\tLeaderEpoch: {}\tReplicas: {}\tIsr: {}\tHighWatermark: {}\tGeneration: {}",
                r.partition,
                r.leader_epoch,
                ids(&r.replicas),
                ids(&r.isr),
                r.high_watermark,
                r.generation
            )?;
            if let Some(local) = &r.local {
                let (start, end) = (local.log_start, local.log_end);
                let epochs: Vec<String> = local
                    .epochs
                    .iter()
                    .map(|(e, o)| format!("{e}@{o}"))
                    .collect();
                writeln!(
                    out,
                    "\tPartition: {}\tReplicaHere: LogStartOffset: {start}\tLogEndOffset: {end}\tLeaderEpochs: {}",
                    r.partition,
                    epochs.join(" ")
                )?;
            }
        }
    }
    for (group, topic, p, offset) in &d.groups {
        let end = d
            .partitions
            .iter()
            .find(|x| x.0 == *topic && x.1 == *p)
            .map_or(*offset, |x| x.3);
        writeln!(
            out,
            "Group: {group}\tTopic: {topic}\tPartition: {p}\tCommitted: {offset}\tLogEndOffset: {end}\tLag: {}",
            end.saturating_sub(*offset)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A compacted partition's cleaner progress, one line.
fn cleaner_line(c: &logbus::persist::CleanerProgress) -> String {
    format!(
        "Cleaner: FirstDirtyOffset: {}\tDirtyRatio: {:.3}\tCleanBytes: {}\tDirtyBytes: {}",
        c.first_dirty,
        c.dirty_ratio(),
        c.clean_bytes,
        c.dirty_bytes
    )
}

// ---------------------------------------------------------------------------------------------
// compact

fn compact(out: &mut dyn Write, path: &Path) -> Result<ExitCode, Failure> {
    if !path.is_dir() {
        return Err(Failure::Input(Error::Io {
            context: format!("opening data directory {}", path.display()),
            source: io::Error::new(io::ErrorKind::NotFound, "not a directory"),
        }));
    }
    let (stats, progress) = match logbus::persist::compact_data_dir(path) {
        Ok(done) => done,
        Err(Error::DirectoryLocked { dir, lock_file }) => {
            eprintln!(
                "logbus: {} is in use (locked through {}): a running broker compacts its own \
                 topics (its log cleaner threads, or Broker::compact_now); stop it to compact \
                 offline",
                dir.display(),
                lock_file.display()
            );
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(Failure::Input(e)),
    };
    writeln!(
        out,
        "Compacted {}\tSegmentsCleaned: {}\tRecordsRead: {}\tRecordsRemoved: {}\t\
         TombstonesRemoved: {}\tBytesRead: {}\tBytesWritten: {}",
        path.display(),
        stats.segments_cleaned,
        stats.records_read,
        stats.records_removed,
        stats.tombstones_removed,
        stats.bytes_read,
        stats.bytes_written
    )?;
    for (topic, p, c) in &progress {
        writeln!(out, "Topic: {topic}\tPartition: {p}\t{}", cleaner_line(c))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A data directory's marker, one line: its id, its broker's (cluster) id, its place in
/// the broker's directories.
fn marker_line(m: &logbus::persist::DataDirMarker) -> String {
    format!(
        "Marker: meta.properties\tVersion: {}\tDirectoryId: {}\tClusterId: {}\tNodeId: {}\t\
         Directory: {} of {}\tDirectories: {}",
        m.version,
        m.directory_id,
        m.cluster_id,
        m.node_id,
        m.index().map_or_else(|| "?".to_string(), |i| i.to_string()),
        m.directories.len(),
        m.directories.join(",")
    )
}

// ---------------------------------------------------------------------------------------------
// verify

/// Reports the marker of `path` when it is a data directory: its line, or a problem when it
/// is damaged or missing from a directory holding logbus topics (a broker refuses to open
/// it). `true` for a problem. Kafka's and logbus's partition directories have no marker.
fn verify_marker(out: &mut dyn Write, path: &Path) -> Result<bool, Failure> {
    if !path.is_dir() {
        return Ok(false);
    }
    match logbus::persist::read_dir_marker(path) {
        Ok(Some(m)) => {
            writeln!(out, "{}: {}", path.display(), marker_line(&m))?;
            Ok(false)
        }
        Err(e) => {
            writeln!(out, "{}: PROBLEM in the marker: {e}", path.display())?;
            Ok(true)
        }
        Ok(None) => {
            let ours = std::fs::read_dir(path)
                .map(|entries| {
                    entries.filter_map(|e| e.ok()).any(|e| {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        name.ends_with(".topic") || name.ends_with(".replicas")
                    })
                })
                .unwrap_or(false);
            if ours {
                writeln!(
                    out,
                    "{}: PROBLEM: a logbus data directory (it holds topic metadata) without \
                     its marker, meta.properties: a broker refuses to open it",
                    path.display()
                )?;
            }
            Ok(ours)
        }
    }
}

fn verify(
    out: &mut dyn Write,
    path: &Path,
    allow_gaps: bool,
    max_batch_bytes: u64,
) -> Result<ExitCode, Failure> {
    let options = VerifyConfig::default()
        .dense_offsets(!allow_gaps)
        .max_batch_bytes(max_batch_bytes);
    let report = verify_path_with(path, options)?;
    let marker_bad = verify_marker(out, path)?;
    for partition in &report.partitions {
        let r = &partition.report;
        if let Some(error) = &partition.error {
            writeln!(
                out,
                "{}: ERROR: cannot be checked: {error}",
                partition.dir.display()
            )?;
            continue;
        }
        match &r.problem {
            None => writeln!(
                out,
                "{}: OK ({} segments, {} batches)",
                partition.dir.display(),
                r.segments,
                r.batches
            )?,
            Some(p) => {
                // The reason of a corrupt batch repeats the file and position: say them once.
                let prefix = format!(
                    "corrupt file {}: at byte {}: ",
                    p.file.display(),
                    p.position
                );
                let reason = p.reason.strip_prefix(&prefix).unwrap_or(&p.reason);
                let stopped = match r.unchecked_segments {
                    0 => String::new(),
                    n => format!(" (stopped at the problem: {n} later segment(s) not checked)"),
                };
                writeln!(
                    out,
                    "{}: PROBLEM in {} at byte {}: {reason}{stopped}",
                    partition.dir.display(),
                    p.file.display(),
                    p.position
                )?
            }
        }
    }
    let bad = report.problems().count() + usize::from(marker_bad);
    let unreadable = report.errors().count();
    let mut summary = Vec::new();
    if bad > 0 {
        summary.push(format!("{bad} with problems"));
    }
    if unreadable > 0 {
        summary.push(format!("{unreadable} could not be checked"));
    }
    // Verification of a partition stops at its first problem: say how far it got.
    let segments = match report.unchecked_segments() {
        0 => format!("{} segment(s)", report.segments()),
        n => format!(
            "{} of {} segment(s) (the other {n} follow a problem: not checked)",
            report.segments(),
            report.segments() + n
        ),
    };
    writeln!(
        out,
        "verified {} partition(s), {segments}, {} batch(es): {}",
        report.partitions.len(),
        report.batches(),
        if summary.is_empty() {
            "all consistent".to_string()
        } else {
            summary.join(", ")
        }
    )?;
    for (dir, error) in report.errors() {
        eprintln!("logbus: {}: {error}", dir.display());
    }
    // Every partition was reported above; the exit status sums them up.
    Ok(if unreadable > 0 {
        ExitCode::from(2)
    } else if bad > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// dump

/// What a segment file holds, by its suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Log,
    Index,
    TimeIndex,
}

/// The base offset and kind of a segment file, from its name.
fn classify(name: &str) -> Option<(u64, Kind)> {
    let (base, suffix) = parse_file_name(name)?;
    let kind = match suffix {
        LOG_SUFFIX => Kind::Log,
        INDEX_SUFFIX => Kind::Index,
        TIME_INDEX_SUFFIX => Kind::TimeIndex,
        _ => return None,
    };
    Some((base, kind))
}

fn dump(
    out: &mut dyn Write,
    path: &Path,
    print_data: bool,
    max_batch: u64,
) -> Result<ExitCode, Failure> {
    let is_dir = std::fs::metadata(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
        .is_dir();
    if !is_dir {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some((base, kind)) = classify(name) else {
            return Err(Error::NotASegment {
                path: path.to_path_buf(),
                reason: "not a segment file: expected a name like 00000000000000000000.log \
                         (.index, .timeindex), or a directory"
                    .into(),
            }
            .into());
        };
        dump_file(out, path, base, kind, print_data, max_batch)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut first = true;
    let mut failed = 0usize;
    // A file or partition that cannot be read is reported and skipped: every other one is
    // still dumped, and the exit status says something failed.
    let mut report = |e: Error| {
        failed += 1;
        eprintln!("logbus: {}", chain(&e));
    };
    for dir in partition_dirs(path)? {
        let names = match FsIo.list_dir(&dir) {
            Ok(names) => names,
            Err(e) => {
                report(Error::io(format!("listing {}", dir.display()), e));
                continue;
            }
        };
        let mut files: Vec<(u64, Kind, String)> = names
            .into_iter()
            .filter_map(|n| classify(&n).map(|(base, kind)| (base, kind, n)))
            .collect();
        files.sort();
        for (base, kind, name) in files {
            if !first {
                writeln!(out)?;
            }
            first = false;
            match dump_file(out, &dir.join(name), base, kind, print_data, max_batch) {
                Ok(()) => {}
                Err(Failure::Input(e)) => report(e),
                Err(output) => return Err(output),
            }
        }
    }
    Ok(if failed > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn open(path: &Path) -> Result<(Box<dyn IoFile>, u64), Error> {
    let file = FsIo
        .open(path, OpenMode::Read)
        .map_err(|e| Error::opening("opening", path, e))?;
    let len = file
        .len()
        .map_err(|e| Error::io(format!("reading the length of {}", path.display()), e))?;
    Ok((file, len))
}

fn read_at(file: &dyn IoFile, path: &Path, buf: &mut [u8], pos: u64) -> Result<(), Error> {
    file.read_exact_at(buf, pos)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

fn dump_file(
    out: &mut dyn Write,
    path: &Path,
    base: u64,
    kind: Kind,
    print_data: bool,
    max_batch: u64,
) -> Result<(), Failure> {
    writeln!(out, "Dumping {}", path.display())?;
    match kind {
        Kind::Log => dump_log(out, path, base, print_data, max_batch),
        Kind::Index => dump_index(out, path, base, offset_index::ENTRY_SIZE),
        Kind::TimeIndex => dump_index(out, path, base, time_index::ENTRY_SIZE),
    }
}

fn dump_index(out: &mut dyn Write, path: &Path, base: u64, entry: usize) -> Result<(), Failure> {
    // Read in chunks of whole entries: a (sparse) index of any length takes bounded memory.
    const CHUNK: usize = 8 << 13; // a multiple of both entry sizes, 8 and 12 bytes: 64 KiB
    let (file, len) = open(path)?;
    let whole = len / entry as u64 * entry as u64;
    let mut chunk = vec![0u8; CHUNK.min(whole as usize)];
    let mut at = 0u64;
    let mut shown = 0u64;
    while at < whole {
        let n = (whole - at).min(CHUNK as u64) as usize;
        read_at(&*file, path, &mut chunk[..n], at)?;
        let bytes = &chunk[..n];
        // An all-zero entry after the first ends the entries (Kafka's preallocated tail).
        if at > 0 && bytes[..entry].iter().all(|&b| b == 0) {
            break;
        }
        let count = if entry == offset_index::ENTRY_SIZE {
            let entries = offset_index::parse(bytes, base);
            for e in &entries {
                writeln!(out, "offset: {} position: {}", e.offset, e.position)?;
            }
            entries.len()
        } else {
            let entries = time_index::parse(bytes, base);
            for e in &entries {
                writeln!(out, "timestamp: {} offset: {}", e.timestamp, e.offset)?;
            }
            entries.len()
        };
        shown += (count * entry) as u64;
        if count * entry < n {
            break;
        }
        at += n as u64;
    }
    if shown < whole {
        writeln!(
            out,
            "Stopped at the all-zero entry at byte {shown}: {} unused bytes (an untrimmed, \
             preallocated index)",
            whole - shown
        )?;
    }
    if whole < len {
        writeln!(
            out,
            "Found {} trailing bytes at byte {whole} that do not form a whole {entry}-byte entry",
            len - whole
        )?;
    }
    Ok(())
}

fn dump_log(
    out: &mut dyn Write,
    path: &Path,
    base: u64,
    print_data: bool,
    max_batch: u64,
) -> Result<(), Failure> {
    let (file, len) = open(path)?;
    writeln!(out, "Log starting offset: {base}")?;
    let mut pos = 0u64;
    let mut head = [0u8; HEADER_SIZE];
    let mut buf = Vec::new();
    while pos < len {
        let left = len - pos;
        if left < HEADER_SIZE_UP_TO_MAGIC as u64 {
            return partial_tail(out, path, pos, left);
        }
        let head_len = left.min(HEADER_SIZE as u64) as usize;
        read_at(&*file, path, &mut head[..head_len], pos)?;
        let length = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        if length < CORRUPT_BELOW_BATCH_LENGTH {
            writeln!(
                out,
                "Found a corrupt batch at byte {pos}: batchLength {length} is below \
                 {CORRUPT_BELOW_BATCH_LENGTH}; {left} bytes from there not shown"
            )?;
            return Ok(());
        }
        let size = LOG_OVERHEAD as u64 + length as u64;
        if size > left {
            return partial_tail(out, path, pos, left);
        }
        if size > max_batch {
            // Not read into memory (a sparse file can claim anything).
            writeln!(
                out,
                "Found a batch of {size} bytes at byte {pos}, over --max-batch-bytes \
                 {max_batch}: not shown"
            )?;
            pos += size;
            continue;
        }
        // `size <= left`: never more than the file holds.
        buf.resize(size as usize, 0);
        read_at(&*file, path, &mut buf, pos)?;
        let header = match BatchHeader::parse(&buf) {
            Ok(h) => h,
            Err(e) => {
                writeln!(
                    out,
                    "Found an unreadable batch at byte {pos}: {}; {left} bytes from there not \
                     shown",
                    chain(&e.in_file(path, pos))
                )?;
                return Ok(());
            }
        };
        let valid = crc32c(&buf[21..]) == header.crc;
        write_batch(out, &header, pos, valid)?;
        if valid {
            match Batch::decode_at(&buf, pos) {
                Ok(batch) => write_records(out, &batch, path, print_data)?,
                Err(e) => writeln!(out, "| records not shown: {}", e.in_file(path, 0))?,
            }
        } else {
            writeln!(out, "| records not shown: the CRC does not match")?;
        }
        pos += size;
    }
    Ok(())
}

fn partial_tail(out: &mut dyn Write, path: &Path, pos: u64, bytes: u64) -> Result<(), Failure> {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    writeln!(
        out,
        "Found {bytes} invalid bytes at the end of {name} (from byte {pos}: an incomplete batch)"
    )?;
    Ok(())
}

fn timestamp_type(header: &BatchHeader) -> &'static str {
    match header.timestamp_type() {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

/// A record's offset delta: the decoder keeps record offsets within
/// `[base, base + lastOffsetDelta]`, so it fits an `i32`.
fn delta_of(offset: u64, base: u64) -> i64 {
    i64::try_from(offset.saturating_sub(base)).unwrap_or(i64::MAX)
}

/// A record's sequence number: the base sequence plus its offset delta, wrapping from
/// `i32::MAX` to 0, or -1 when the producer is not idempotent (Kafka's
/// `DefaultRecordBatch.incrementSequence`).
fn sequence(base_sequence: i32, delta: i64) -> i64 {
    if base_sequence < 0 {
        return -1;
    }
    let span = i64::from(i32::MAX) + 1;
    (i64::from(base_sequence) + delta.rem_euclid(span)) % span
}

fn write_batch(
    out: &mut dyn Write,
    h: &BatchHeader,
    position: u64,
    valid: bool,
) -> Result<(), Failure> {
    writeln!(
        out,
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} \
         producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} \
         isControl: {} position: {position} {}: {} size: {} magic: {} compresscodec: {} \
         crc: {} isvalid: {valid}",
        h.base_offset,
        h.last_offset(),
        h.records_count,
        h.base_sequence,
        sequence(h.base_sequence, i64::from(h.last_offset_delta)),
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.is_transactional(),
        h.is_control(),
        timestamp_type(h),
        h.max_timestamp,
        h.size(),
        h.magic,
        h.compression(),
        h.crc,
    )?;
    Ok(())
}

fn write_records(
    out: &mut dyn Write,
    batch: &Batch<'_>,
    path: &Path,
    print_data: bool,
) -> Result<(), Failure> {
    let h = batch.header();
    // A compressed batch is decompressed here, once (its codec is on the batch's line).
    let mut decompressed = Vec::new();
    let records = match batch.records(&mut decompressed) {
        Ok(records) => records,
        Err(e) => {
            writeln!(out, "| records not shown: {}", e.in_file(path, 0))?;
            return Ok(());
        }
    };
    for record in records {
        let r = match record {
            Ok(r) => r,
            Err(e) => {
                writeln!(out, "| invalid record: {}", e.in_file(path, 0))?;
                break;
            }
        };
        let size = |b: Option<&[u8]>| b.map_or(-1, |b| b.len() as i64);
        let header_keys: Vec<&str> = r.headers.iter().map(|h| h.key).collect();
        let mut line = format!(
            "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
            r.offset,
            timestamp_type(h),
            r.timestamp,
            size(r.key),
            size(r.value),
            sequence(h.base_sequence, delta_of(r.offset, h.base_offset)),
            header_keys.join(",")
        );
        if h.is_control() {
            line.push_str(&control_marker(r.key, r.value));
        } else if print_data {
            // As Kafka's tool: a null key or value is left out (its size says -1).
            if let Some(key) = r.key {
                let _ = write!(line, " key: {}", show_bytes(key));
            }
            if let Some(value) = r.value {
                let _ = write!(line, " payload: {}", show_bytes(value));
            }
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// A control record's meaning: key = int16 version, int16 type; a transaction marker's value
/// = int16 version, int32 coordinator epoch.
fn control_marker(key: Option<&[u8]>, value: Option<&[u8]>) -> String {
    let Some(&[_, _, t0, t1, ..]) = key else {
        return " controlType: unknown (key shorter than 4 bytes)".into();
    };
    let kind = i16::from_be_bytes([t0, t1]);
    let name = match kind {
        0 => "ABORT",
        1 => "COMMIT",
        _ => return format!(" controlType: {kind}"),
    };
    match value {
        Some(&[_, _, e0, e1, e2, e3, ..]) => format!(
            " endTxnMarker: {name} coordinatorEpoch: {}",
            i32::from_be_bytes([e0, e1, e2, e3])
        ),
        _ => format!(" endTxnMarker: {name}"),
    }
}

/// Bytes for a terminal: valid UTF-8 as text (control characters escaped), anything else as
/// `0x` and hex digits.
fn show_bytes(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text
            .chars()
            .flat_map(|c| {
                let escape = c.is_control();
                let s: Vec<char> = if escape {
                    c.escape_default().collect()
                } else {
                    vec![c]
                };
                s
            })
            .collect(),
        Err(_) => {
            let mut s = String::with_capacity(2 + 2 * bytes.len());
            s.push_str("0x");
            for b in bytes {
                let _ = write!(s, "{b:02x}");
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap() {
        assert_eq!(sequence(-1, 5), -1);
        assert_eq!(sequence(10, 5), 15);
        assert_eq!(sequence(i32::MAX, 1), 0);
        assert_eq!(sequence(i32::MAX - 1, 3), 1);
    }

    #[test]
    fn bytes_for_a_terminal() {
        assert_eq!(show_bytes(b"k0"), "k0");
        assert_eq!(show_bytes(b"a\nb"), "a\\nb");
        assert_eq!(show_bytes(&[0xff, 0x00]), "0xff00");
        assert_eq!(show_bytes(b""), "");
    }

    #[test]
    fn control_records() {
        let key = [0, 0, 0, 1];
        let value = [0, 0, 0, 0, 0, 7];
        assert_eq!(
            control_marker(Some(&key), Some(&value)),
            " endTxnMarker: COMMIT coordinatorEpoch: 7"
        );
        assert_eq!(control_marker(Some(&[0, 0, 0, 5]), None), " controlType: 5");
        assert!(control_marker(None, None).contains("unknown"));
    }

    #[test]
    fn names() {
        assert_eq!(classify("00000000000000000042.log"), Some((42, Kind::Log)));
        assert_eq!(
            classify("00000000000000000042.timeindex"),
            Some((42, Kind::TimeIndex))
        );
        assert_eq!(classify("00000000000000000042.txnindex"), None);
        assert_eq!(classify("42.log"), None);
    }
}
