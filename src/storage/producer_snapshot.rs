//! Kafka's producer-state snapshot files (`ProducerStateManager`, snapshot version 1): one
//! file per snapshot, `<20-digit offset>.snapshot` in the partition directory, holding the
//! state of every producer id as of that offset (the records below it). Kafka writes one at
//! each segment roll (named by the new segment's base offset) and at a clean shutdown; on
//! recovery it loads the latest snapshot at or below the recovery point and rebuilds the rest
//! from the batches after it. logbus does the same.
//!
//! The layout, all big-endian (Kafka's `PID_SNAPSHOT_MAP_SCHEMA`):
//!
//! | field | type |
//! |---|---|
//! | `version` | i16, 1 |
//! | `crc` | u32: CRC-32C of every byte after this field |
//! | `producer_entries` | i32 count, then per entry: |
//! | · `producer_id` | i64 |
//! | · `epoch` | i16 |
//! | · `last_sequence` | i32 |
//! | · `last_offset` | i64 |
//! | · `offset_delta` | i32: last sequence − first sequence of the last batch |
//! | · `timestamp` | i64: max timestamp of the last batch |
//! | · `coordinator_epoch` | i32 |
//! | · `current_txn_first_offset` | i64, −1 when no transaction is open |
//!
//! A file that does not parse (short, a wrong version, a CRC mismatch, a count the bytes
//! do not hold) is [`Error::CorruptProducerSnapshot`]: recovery reports it, deletes it and
//! rebuilds from an older snapshot or from the log, never panics. Files are written
//! atomically (temp file, fsync, rename, directory fsync), through the [`Io`] trait.

use std::path::{Path, PathBuf};

use super::io::{Io, OpenMode};
use super::record_batch::crc32c;
use crate::error::{Error, Result};

/// The snapshot format version logbus writes and reads (Kafka's `PRODUCER_SNAPSHOT_VERSION`).
pub const VERSION: i16 = 1;
/// The file suffix.
pub const SUFFIX: &str = ".snapshot";
/// Bytes per entry.
pub const ENTRY_SIZE: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;
/// Bytes before the entries: version, CRC, count.
const HEAD: usize = 2 + 4 + 4;

/// One producer's entry in a snapshot (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotEntry {
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
    /// The sequence of its last record.
    pub last_sequence: i32,
    /// The offset of its last record.
    pub last_offset: i64,
    /// Last sequence − first sequence of its last batch.
    pub offset_delta: i32,
    /// Max timestamp of its last batch.
    pub timestamp: i64,
    /// The coordinator epoch of its last transaction marker (-1: none).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction (-1: none).
    pub current_txn_first_offset: i64,
}

/// The file name of the snapshot at `offset`.
pub fn file_name(offset: u64) -> String {
    format!("{offset:020}{SUFFIX}")
}

/// The offset a snapshot file name stands for, if it is one.
pub fn offset_of(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(SUFFIX)?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// The bytes of a snapshot of `entries`.
pub fn encode(entries: &[SnapshotEntry]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEAD + entries.len() * ENTRY_SIZE);
    b.extend_from_slice(&VERSION.to_be_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&(entries.len() as i32).to_be_bytes());
    for e in entries {
        b.extend_from_slice(&e.producer_id.to_be_bytes());
        b.extend_from_slice(&e.epoch.to_be_bytes());
        b.extend_from_slice(&e.last_sequence.to_be_bytes());
        b.extend_from_slice(&e.last_offset.to_be_bytes());
        b.extend_from_slice(&e.offset_delta.to_be_bytes());
        b.extend_from_slice(&e.timestamp.to_be_bytes());
        b.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
        b.extend_from_slice(&e.current_txn_first_offset.to_be_bytes());
    }
    let crc = crc32c(&b[6..]);
    b[2..6].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Parses a snapshot's bytes; `path` names the file in the error.
///
/// # Errors
///
/// [`Error::CorruptProducerSnapshot`] (module docs).
pub fn decode(path: &Path, b: &[u8]) -> Result<Vec<SnapshotEntry>> {
    let corrupt = |reason: String| Error::CorruptProducerSnapshot {
        path: path.to_path_buf(),
        reason,
    };
    if b.len() < HEAD {
        return Err(corrupt(format!(
            "{} bytes, shorter than its header",
            b.len()
        )));
    }
    let version = i16::from_be_bytes([b[0], b[1]]);
    if version != VERSION {
        return Err(corrupt(format!("version {version}, expected {VERSION}")));
    }
    let crc = u32::from_be_bytes([b[2], b[3], b[4], b[5]]);
    let actual = crc32c(&b[6..]);
    if crc != actual {
        return Err(corrupt(format!(
            "CRC-32C {actual:#010x}, the header says {crc:#010x}"
        )));
    }
    let count = i32::from_be_bytes([b[6], b[7], b[8], b[9]]);
    let body = &b[HEAD..];
    if count < 0 || body.len() != count as usize * ENTRY_SIZE {
        return Err(corrupt(format!(
            "{count} entries declared, {} bytes of entries",
            body.len()
        )));
    }
    let i64_at = |c: &[u8], at: usize| i64::from_be_bytes(c[at..at + 8].try_into().unwrap());
    let i32_at = |c: &[u8], at: usize| i32::from_be_bytes(c[at..at + 4].try_into().unwrap());
    Ok(body
        .chunks_exact(ENTRY_SIZE)
        .map(|c| SnapshotEntry {
            producer_id: i64_at(c, 0),
            epoch: i16::from_be_bytes([c[8], c[9]]),
            last_sequence: i32_at(c, 10),
            last_offset: i64_at(c, 14),
            offset_delta: i32_at(c, 22),
            timestamp: i64_at(c, 26),
            coordinator_epoch: i32_at(c, 34),
            current_txn_first_offset: i64_at(c, 38),
        })
        .collect())
}

/// Writes the snapshot at `offset` in `dir`, atomically and durably.
///
/// # Errors
///
/// [`Error::Io`] when a step fails (no file at the final name then).
pub fn write(io: &dyn Io, dir: &Path, offset: u64, entries: &[SnapshotEntry]) -> Result<()> {
    let path = dir.join(file_name(offset));
    let tmp = dir.join(format!("{}.tmp", file_name(offset)));
    let ctx = |what: &str, p: &Path| format!("{what} {}", p.display());
    let file = io
        .open(&tmp, OpenMode::Truncate)
        .map_err(|e| Error::io(ctx("creating", &tmp), e))?;
    file.write_all_at(&encode(entries), 0)
        .map_err(|e| Error::io(ctx("writing", &tmp), e))?;
    file.sync_all()
        .map_err(|e| Error::io(ctx("syncing", &tmp), e))?;
    drop(file);
    io.rename(&tmp, &path)
        .map_err(|e| Error::io(ctx("renaming", &tmp), e))?;
    io.sync_dir(dir)
        .map_err(|e| Error::io(ctx("syncing directory", dir), e))
}

/// The snapshots in `dir`, by offset.
///
/// # Errors
///
/// [`Error::Io`] when the directory cannot be listed.
pub fn list(io: &dyn Io, dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out: Vec<(u64, PathBuf)> = io
        .list_dir(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?
        .into_iter()
        .filter_map(|n| offset_of(&n).map(|o| (o, dir.join(n))))
        .collect();
    out.sort();
    Ok(out)
}

/// What [`load_latest`] found: the snapshot used (its offset and entries), if any, and the
/// files it skipped and deleted as corrupt (each an [`Error::CorruptProducerSnapshot`]).
pub type Loaded = (Option<(u64, Vec<SnapshotEntry>)>, Vec<Error>);

/// Loads the latest snapshot of `dir` whose offset is in `from..=to` (Kafka: at or below
/// the recovery point, at or above the log start); deletes the corrupt ones it meets,
/// reporting them. (Strays above the log end: [`remove_outside`].)
///
/// # Errors
///
/// [`Error::Io`] when the directory cannot be listed.
pub fn load_latest(io: &dyn Io, dir: &Path, from: u64, to: u64) -> Result<Loaded> {
    let mut skipped = Vec::new();
    for (offset, path) in list(io, dir)?.into_iter().rev() {
        if offset > to {
            continue;
        }
        if offset < from {
            break;
        }
        let read = io
            .open(&path, OpenMode::Read)
            .and_then(|f| f.read_all())
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))
            .and_then(|b| decode(&path, &b));
        match read {
            Ok(entries) => return Ok((Some((offset, entries)), skipped)),
            Err(e) => {
                let _ = io.remove_file(&path);
                skipped.push(e);
            }
        }
    }
    Ok((None, skipped))
}

/// Deletes the snapshots of `dir` above `offset` (a truncation) or below `below` (their
/// segments were deleted), keeping the latest below `below`.
pub fn remove_outside(io: &dyn Io, dir: &Path, below: u64, offset: u64) {
    let Ok(all) = list(io, dir) else { return };
    let keep_low = all.iter().rev().find(|(o, _)| *o <= below).map(|(o, _)| *o);
    for (o, path) in all {
        if o > offset || (o < below && Some(o) != keep_low) {
            let _ = io.remove_file(&path);
        }
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_typed() {
        let e = SnapshotEntry {
            producer_id: 7,
            epoch: 2,
            last_sequence: 40,
            last_offset: 1000,
            offset_delta: 3,
            timestamp: 1_700_000_000_000,
            coordinator_epoch: -1,
            current_txn_first_offset: -1,
        };
        let bytes = encode(&[e, e]);
        assert_eq!(bytes.len(), HEAD + 2 * ENTRY_SIZE);
        let p = Path::new("00000000000000000010.snapshot");
        assert_eq!(decode(p, &bytes).unwrap(), vec![e, e]);
        for cut in [0, 5, HEAD, bytes.len() - 1] {
            assert!(matches!(
                decode(p, &bytes[..cut]),
                Err(Error::CorruptProducerSnapshot { .. })
            ));
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(matches!(
            decode(p, &flipped),
            Err(Error::CorruptProducerSnapshot { .. })
        ));
        assert_eq!(offset_of(&file_name(42)), Some(42));
        assert_eq!(offset_of("00000000000000000042.log"), None);
    }
}
