//! The transaction index (`NNNNNNNNNNNNNNNNNNNN.txnindex`, KIP-98): one entry per aborted
//! transaction, in the segment holding its ABORT marker, as Kafka's `TransactionIndex`
//! writes it. Each entry is 34 bytes, big-endian (Kafka's `AbortedTxn`):
//!
//! ```text
//! version i16 (0) | producerId i64 | firstOffset i64 | lastOffset i64 | lastStableOffset i64
//! ```
//!
//! `lastOffset` is the ABORT marker's offset, `firstOffset` the transaction's first record
//! on the partition, `lastStableOffset` the partition's LSO when the marker was written.
//!
//! The segment set tracks the open transactions from the batch headers it appends (a
//! transactional data batch opens its producer's transaction at its base offset, a control
//! batch closes it; an ABORT adds the entry). At open it rebuilds them by a scan of the batch
//! headers of the log (linear in the log; Kafka bounds it with producer snapshots), and
//! rewrites the active segment's index from what the log holds; a truncation drops the
//! entries whose marker it cut.

use std::collections::HashMap;
use std::path::Path;

use super::io::{Io, OpenMode};
use super::record_batch::{BatchHeader, BatchIter};
use crate::{Error, Result};

/// The file suffix.
pub const TXN_INDEX_SUFFIX: &str = "txnindex";

/// One entry's size.
pub const ENTRY_SIZE: usize = 34;

/// An aborted transaction as the index holds it (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnIndexEntry {
    /// The producer id.
    pub producer_id: i64,
    /// The transaction's first offset in the partition.
    pub first_offset: u64,
    /// The ABORT marker's offset.
    pub last_offset: u64,
    /// The LSO when the marker was written.
    pub last_stable_offset: u64,
}

impl TxnIndexEntry {
    /// Its 34 bytes.
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[0..2].copy_from_slice(&0i16.to_be_bytes());
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&(self.first_offset as i64).to_be_bytes());
        b[18..26].copy_from_slice(&(self.last_offset as i64).to_be_bytes());
        b[26..34].copy_from_slice(&(self.last_stable_offset as i64).to_be_bytes());
        b
    }

    /// The entries of an index file's bytes (a torn last entry is left out).
    pub fn decode_all(bytes: &[u8]) -> Vec<TxnIndexEntry> {
        bytes
            .chunks_exact(ENTRY_SIZE)
            .map(|b| {
                let i = |r: std::ops::Range<usize>| i64::from_be_bytes(b[r].try_into().unwrap());
                TxnIndexEntry {
                    producer_id: i(2..10),
                    first_offset: i(10..18) as u64,
                    last_offset: i(18..26) as u64,
                    last_stable_offset: i(26..34) as u64,
                }
            })
            .collect()
    }
}

/// The open transactions of a log, from its batch headers (module docs).
#[derive(Debug, Default)]
pub(crate) struct OpenTxns {
    open: HashMap<i64, u64>,
}

/// What one appended batch did to the transactions.
pub(crate) enum TxnEvent {
    None,
    Aborted(TxnIndexEntry),
}

impl OpenTxns {
    /// Applies an appended batch: its header, and (asked for control batches only) the
    /// control type of its record (0 ABORT, 1 COMMIT).
    pub(crate) fn apply(
        &mut self,
        h: &BatchHeader,
        control_type: impl FnOnce() -> Option<i16>,
    ) -> TxnEvent {
        if !h.is_transactional() || h.producer_id < 0 {
            return TxnEvent::None;
        }
        if !h.is_control() {
            self.open.entry(h.producer_id).or_insert(h.base_offset);
            return TxnEvent::None;
        }
        let abort = control_type() == Some(0);
        let first = self.open.remove(&h.producer_id);
        if !abort {
            return TxnEvent::None;
        }
        let first = first.unwrap_or(h.base_offset);
        let lso = self
            .open
            .values()
            .copied()
            .chain([first])
            .min()
            .unwrap_or(first);
        TxnEvent::Aborted(TxnIndexEntry {
            producer_id: h.producer_id,
            first_offset: first,
            last_offset: h.base_offset,
            last_stable_offset: lso,
        })
    }
}

/// The control type of the first record of the control batch in `bytes` (0 ABORT, 1
/// COMMIT).
pub(crate) fn control_type(bytes: &[u8]) -> Option<i16> {
    let batch = BatchIter::new(bytes).next()?.ok()?;
    batch_control_type(&batch)
}

/// The control type of a control batch's first record.
pub(crate) fn batch_control_type(batch: &super::record_batch::Batch<'_>) -> Option<i16> {
    // Control batches are uncompressed: the buffer a compressed one would need stays empty.
    let mut decompressed = Vec::new();
    let record = batch.records(&mut decompressed).ok()?.next()?.ok()?;
    let key = record.key?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
}

/// Appends `entry` to the index of the segment based at `base` in `dir`.
pub(crate) fn append(io: &dyn Io, dir: &Path, base: u64, entry: &TxnIndexEntry) -> Result<()> {
    let path = dir.join(super::file_names::file_name(base, TXN_INDEX_SUFFIX));
    let err = |e: std::io::Error| Error::Io {
        context: format!("appending to {}", path.display()),
        source: e,
    };
    let f = io.open(&path, OpenMode::Create).map_err(err)?;
    let end = f.len().map_err(err)?;
    // A torn entry of a crash is overwritten.
    let end = end - end % ENTRY_SIZE as u64;
    f.write_all_at(&entry.encode(), end).map_err(err)?;
    f.set_len(end + ENTRY_SIZE as u64).map_err(err)
}
