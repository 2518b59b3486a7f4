//! Walking the batches of a `.log` file: [`scan_log`] checks each batch's size and CRC with
//! bounded memory, and `check_batch_offsets` is Kafka's rule for where a batch's offsets may
//! lie. Recovery, the verifier and `logbus dump` all read logs through here.

use std::path::Path;

use super::file_names::{file_name, LOG_SUFFIX, MAX_OFFSET};
use super::io::{Io, IoFile, OpenMode};
use super::record_batch::{
    Batch, Extent, CORRUPT_BELOW_BATCH_LENGTH, HEADER_SIZE, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD,
    MAGIC,
};
use crate::error::{Corruption, Error, Result};

/// Size of the reads recovery and [`scan_log`] make: small enough that the buffer stays in
/// the L2 cache between the kernel's copy into it and the CRC pass over it (larger reads
/// measured slower in recovery: BENCHMARKS.md, "Tuning constants"), large enough that syscalls are
/// few.
const SCAN_CHUNK: usize = 512 << 10;

/// How a scan of a `.log` ended.
#[derive(Debug)]
pub enum ScanEnd {
    /// Every byte up to the end formed valid batches.
    Complete,
    /// The last `bytes` bytes, from `position`, are an incomplete batch (a torn tail).
    Partial {
        /// Where the incomplete batch starts.
        position: u64,
        /// Its bytes.
        bytes: u64,
    },
    /// The batch at `position` is corrupt (or its offsets were rejected by the visitor).
    Corrupt {
        /// Where the bad batch starts.
        position: u64,
        /// What was wrong, as [`Error::Corrupt`] with the byte position of the field.
        error: Error,
    },
    /// The visitor asked to stop before the batch at `position`.
    Stopped {
        /// Where the next batch starts.
        position: u64,
    },
}

/// Iterates the batches of `file` (a `.log`) from byte `start` to byte `end`, checking each
/// one's size and CRC, and calls `visit` with each valid batch (its
/// [`position`](Batch::position) is its place in the file).
///
/// `visit` returns `Ok(true)` to go on, `Ok(false)` to stop, or an error to declare the batch
/// bad (the scan then ends with [`ScanEnd::Corrupt`] at that batch). Reads are large and
/// sequential; memory use is bounded by the larger of 512 KiB and `max_batch_bytes`, and never
/// exceeds what the file holds. A batch over `max_batch_bytes` is never held: its CRC is
/// checked as it streams by, and it ends the scan as corruption when the CRC fails, or with
/// [`Error::BatchTooLarge`] when it is a valid batch (the limit is too low for this log).
///
/// # Errors
///
/// [`Error::Io`] when reading fails; [`Error::BatchTooLarge`] for a valid batch over
/// `max_batch_bytes`. Corruption is not an error here: it is how the scan ends.
///
/// # Examples
///
/// ```
/// use logbus::storage::io::{FsIo, Io, OpenMode};
/// use logbus::storage::record_batch::BatchBuilder;
/// use logbus::storage::scan::{scan_log, ScanEnd};
/// use std::path::Path;
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("00000000000000000000.log");
/// let file = FsIo.open(&path, OpenMode::CreateNew)?;
/// let batch = BatchBuilder::new(0).with_record(5, None, Some(b"v"))?.finish().to_vec();
/// file.write_all_at(&batch, 0)?;
/// file.write_all_at(&batch[..10], batch.len() as u64)?; // a torn second batch
///
/// let mut offsets = Vec::new();
/// let end = scan_log(&*file, Path::new(&path), 0, file.len()?, 1 << 20, |b| {
///     offsets.push((b.position(), b.header().base_offset));
///     Ok(true)
/// })?;
/// assert_eq!(offsets, vec![(0, 0)]);
/// assert!(matches!(end, ScanEnd::Partial { bytes: 10, .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn scan_log(
    file: &dyn IoFile,
    path: &Path,
    start: u64,
    end: u64,
    max_batch_bytes: u64,
    visit: impl FnMut(Batch<'_>) -> Result<bool>,
) -> Result<ScanEnd> {
    scan_log_reusing(
        file,
        path,
        (start, end),
        max_batch_bytes,
        (&mut Vec::new(), SCAN_CHUNK),
        visit,
    )
}

/// [`scan_log`] over `[start, end)` reading `chunk` bytes at a time (the larger of it and
/// `max_batch_bytes` held at most) into `data`, a buffer the caller keeps from scan to scan
/// (a pass over several files allocates and zeroes it once); its contents on entry are
/// never read.
pub(crate) fn scan_log_reusing(
    file: &dyn IoFile,
    path: &Path,
    (start, end): (u64, u64),
    max_batch_bytes: u64,
    (data, chunk): (&mut Vec<u8>, usize),
    mut visit: impl FnMut(Batch<'_>) -> Result<bool>,
) -> Result<ScanEnd> {
    let mut buf = ScanBuf {
        data,
        len: 0,
        start,
        chunk,
    };
    let mut off = 0usize; // next batch in buf
    loop {
        let pos = buf.start + off as u64;
        if pos >= end {
            return Ok(ScanEnd::Complete);
        }
        let left_in_file = end - pos;
        let avail = (buf.len - off) as u64;
        if left_in_file < HEADER_SIZE_UP_TO_MAGIC as u64 {
            return Ok(ScanEnd::Partial {
                position: pos,
                bytes: left_in_file,
            });
        }
        if avail < HEADER_SIZE_UP_TO_MAGIC as u64 {
            // Asks for the header at least, so a read smaller than one still makes progress.
            buf.refill(file, path, &mut off, end, HEADER_SIZE_UP_TO_MAGIC)?;
            continue;
        }
        let extent = super::record_batch::next_batch_extent(&buf.data[off..buf.len]);
        let length = i32::from_be_bytes([
            buf.data[off + 8],
            buf.data[off + 9],
            buf.data[off + 10],
            buf.data[off + 11],
        ]);
        if length < CORRUPT_BELOW_BATCH_LENGTH {
            debug_assert!(matches!(extent, Extent::Corrupt(_)));
            return Ok(ScanEnd::Corrupt {
                position: pos,
                error: Error::Corrupt {
                    file: Some(path.to_path_buf()),
                    position: pos + 8,
                    reason: Corruption::BatchLengthTooSmall { length },
                },
            });
        }
        let size = LOG_OVERHEAD as u64 + length as u64;
        if size > left_in_file {
            return Ok(ScanEnd::Partial {
                position: pos,
                bytes: left_in_file,
            });
        }
        if size > max_batch_bytes {
            // Never held in memory: its CRC is computed as it streams by. Garbage (a sparse
            // file, a torn length) is corruption; a real batch over the limit is an error the
            // caller must see, never a cut.
            return match oversized_batch(file, path, pos, size, max_batch_bytes)? {
                Some(error) => Ok(ScanEnd::Corrupt {
                    position: pos,
                    error,
                }),
                None => Err(Error::BatchTooLarge {
                    file: path.to_path_buf(),
                    position: pos,
                    size,
                    max: max_batch_bytes,
                }),
            };
        }
        if size > avail {
            // `size <= left_in_file`: the buffer never grows beyond what the file holds.
            buf.refill(file, path, &mut off, end, size as usize)?;
            continue;
        }
        let bytes = &buf.data[off..off + size as usize];
        let batch = match Batch::decode_at(bytes, pos) {
            Ok(batch) => batch,
            Err(e) => {
                return Ok(ScanEnd::Corrupt {
                    position: pos,
                    error: e.in_file(path, 0),
                })
            }
        };
        match visit(batch) {
            Ok(true) => off += size as usize,
            Ok(false) => return Ok(ScanEnd::Stopped { position: pos }),
            Err(e) => {
                return Ok(ScanEnd::Corrupt {
                    position: pos,
                    error: e.in_file(path, 0),
                })
            }
        }
    }
}

/// Checks the batch of `size` bytes at `pos` (known to lie inside the file) without holding it:
/// `Some` corruption when its magic or its CRC is wrong, `None` when it is a valid batch.
fn oversized_batch(
    file: &dyn IoFile,
    path: &Path,
    pos: u64,
    size: u64,
    max: u64,
) -> Result<Option<Error>> {
    const CHUNK: usize = 256 << 10;
    let read = |buf: &mut [u8], at: u64| {
        file.read_exact_at(buf, at)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))
    };
    let mut head = [0u8; HEADER_SIZE];
    read(&mut head, pos)?;
    let corrupt = |at: u64, reason: Corruption| {
        Some(Error::Corrupt {
            file: Some(path.to_path_buf()),
            position: pos + at,
            reason,
        })
    };
    if head[16] != 2 {
        return Ok(corrupt(
            16,
            Corruption::BadMagic {
                magic: head[16] as i8,
            },
        ));
    }
    let stored = u32::from_be_bytes([head[17], head[18], head[19], head[20]]);
    let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    let mut buf = vec![0u8; CHUNK];
    let mut at = pos + 21;
    let end = pos + size;
    while at < end {
        let n = (end - at).min(CHUNK as u64) as usize;
        read(&mut buf[..n], at)?;
        crc.update(&buf[..n]);
        at += n as u64;
    }
    if crc.finalize() as u32 != stored {
        return Ok(corrupt(8, Corruption::BatchTooLarge { size, max }));
    }
    Ok(None)
}

/// A read buffer reused across refills: `data[..len]` holds file bytes from `start`; each
/// refill reads up to `chunk` bytes.
struct ScanBuf<'a> {
    data: &'a mut Vec<u8>,
    len: usize,
    start: u64,
    chunk: usize,
}

impl ScanBuf<'_> {
    /// Moves the bytes from `off` to the front and reads more, up to the larger of `need`
    /// and a chunk in all, never past `end`. Memory is only zeroed when the buffer grows.
    fn refill(
        &mut self,
        file: &dyn IoFile,
        path: &Path,
        off: &mut usize,
        end: u64,
        need: usize,
    ) -> Result<()> {
        self.data.copy_within(*off..self.len, 0);
        self.len -= *off;
        self.start += *off as u64;
        *off = 0;
        let file_left = end - (self.start + self.len as u64);
        let want = need.max(self.chunk).saturating_sub(self.len) as u64;
        let add = want.min(file_left) as usize;
        if self.data.len() < self.len + add {
            self.data.resize(self.len + add, 0);
        }
        file.read_exact_at(
            &mut self.data[self.len..self.len + add],
            self.start + self.len as u64,
        )
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        self.len += add;
        Ok(())
    }
}

/// Kafka's offset checks for `batch`, the next batch of the segment based at `base` after
/// offset `expected` (one past the previous batch's last offset, or the segment's base offset):
/// offsets strictly increase but may jump (compaction, transactions and replicas leave gaps),
/// so the batch starts at or above `expected` and at or above `min_offset` (the previous
/// segment's end); its last offset delta is non-negative; its offsets stay within the
/// segment's 32-bit relative range, below `upper` (the next segment's base) and below
/// `i64::MAX` (the offset after the last must exist). Returns the batch's last offset.
/// Recovery and `verify_dir` both apply it.
pub(crate) fn check_batch_offsets(
    batch: &Batch<'_>,
    base: u64,
    expected: u64,
    min_offset: u64,
    upper: Option<u64>,
) -> Result<u64> {
    let h = batch.header();
    let bad = |rule: String| {
        Err(Error::Corrupt {
            file: None,
            position: batch.position(),
            reason: Corruption::BadOffset {
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
                rule,
            },
        })
    };
    let floor = expected.max(min_offset);
    if h.base_offset < floor {
        return bad(if batch.position() > 0 {
            format!("base offset must be at least {floor} (offsets increase strictly)")
        } else {
            format!(
                "base offset must be at least {floor} (the segment's base offset, and past the \
                 previous segment's last offset)"
            )
        });
    }
    if h.last_offset_delta < 0 {
        return bad("lastOffsetDelta must be >= 0".into());
    }
    let last = h.last_offset();
    if last >= MAX_OFFSET {
        return bad(format!(
            "offsets must be below {MAX_OFFSET} (the offset after the last must exist)"
        ));
    }
    if last - base > i32::MAX as u64 {
        return bad(format!(
            "offsets must lie within [{base}, {}] in this segment",
            base + i32::MAX as u64
        ));
    }
    if let Some(upper) = upper {
        if last >= upper {
            return bad(format!(
                "offsets must be below {upper}, the next segment's base offset"
            ));
        }
    }
    Ok(last)
}

/// The bounds a segment's batches must keep (see [`check_batch_offsets`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentBounds {
    /// The segment's base offset (from its file name).
    pub(crate) base: u64,
    /// The previous segment's end: no batch starts below it.
    pub(crate) min_offset: u64,
    /// The next segment's base offset: every offset lies below it.
    pub(crate) upper: Option<u64>,
}

/// Walks a segment's `.log` from its start as [`scan_log`] does, holding every batch to
/// Kafka's rules for a segment: its offsets ([`check_batch_offsets`]) and its records'
/// structure (a compressed batch's records are decompressed, once, into a buffer reused
/// from batch to batch; only a codec this build lacks leaves them to the CRC).
/// `visit` sees each batch that passes, with its last offset; a batch that fails ends the
/// scan as [`ScanEnd::Corrupt`]. Recovery and the verifier both check segments through here.
///
/// # Errors
///
/// As [`scan_log`].
pub(crate) fn scan_segment(
    file: &dyn IoFile,
    path: &Path,
    len: u64,
    max_batch_bytes: u64,
    bounds: SegmentBounds,
    mut visit: impl FnMut(&Batch<'_>, u64) -> Result<bool>,
) -> Result<ScanEnd> {
    let mut expected = bounds.base;
    let mut decompressed = Vec::new();
    scan_log(file, path, 0, len, max_batch_bytes, |batch| {
        let last = check_batch_offsets(
            &batch,
            bounds.base,
            expected,
            bounds.min_offset,
            bounds.upper,
        )?;
        // A CRC can seal malformed records too: such a batch is corrupt, or a reader from
        // below it would be stuck there.
        match batch.records(&mut decompressed) {
            Ok(records) => {
                for record in records {
                    record?;
                }
            }
            Err(Error::UnsupportedCompression { .. }) => {}
            Err(e) => return Err(e),
        }
        expected = last + 1;
        visit(&batch, last)
    })
}

/// Whether the `.log` at `path`, of the segment based at `base`, starts like a segment: with
/// a valid batch (size, CRC, records, offsets at or above `base`), or with the head of a
/// damaged or torn one that says it is this segment's first batch (its base offset, which
/// a log rolls at, and magic 2): a segment to recover, not a stray file. An empty file, a
/// few stray bytes or garbage start with neither.
///
/// # Errors
///
/// [`Error::Io`] when the file cannot be read.
pub(crate) fn starts_like_a_segment(
    io: &dyn Io,
    path: &Path,
    base: u64,
    max_batch_bytes: u64,
) -> Result<bool> {
    let file = io
        .open(path, OpenMode::Read)
        .map_err(|e| Error::opening("opening", path, e))?;
    let len = file
        .len()
        .map_err(|e| Error::io(format!("reading length of {}", path.display()), e))?;
    if len < HEADER_SIZE_UP_TO_MAGIC as u64 {
        return Ok(false);
    }
    let mut head = [0u8; HEADER_SIZE_UP_TO_MAGIC];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let (offset, magic) = head.split_at(8);
    let offset = u64::from_be_bytes(offset.try_into().unwrap_or_default());
    if offset == base && magic[magic.len() - 1] as i8 == MAGIC {
        return Ok(true);
    }
    let bounds = SegmentBounds {
        base,
        min_offset: base,
        upper: None,
    };
    let mut found = false;
    match scan_segment(&*file, path, len, max_batch_bytes, bounds, |_, _| {
        found = true;
        Ok(false)
    }) {
        Ok(_) => Ok(found),
        // A valid batch, larger than this scan holds: not garbage.
        Err(Error::BatchTooLarge { .. }) => Ok(true),
        Err(e) => Err(e),
    }
}

/// The `.log` files of a partition directory sorted into segments and stray files, by the
/// one rule recovery and the verifier share. A log never leaves a segment behind before
/// its first batch is durable (it fsyncs a segment before it rolls, and replaces an empty
/// active segment rather than rolling past it), so:
/// - a `.log` that does not start like a segment ([`starts_like_a_segment`]) and is not the
///   last is a stray file: left in place, it would cut the segment before it
///   at its base offset and, through that cut, drop every segment after it;
/// - the last `.log` may be an empty or torn segment rolled just before a crash, based at
///   the log end or past it; when it does not start like a segment, it is a stray file
///   only if the segment before it holds offsets at or past its base offset (a log rolls
///   at its end, never inside it), which is known once that segment is read: meanwhile it
///   bounds nothing ([`upper`](Self::upper)).
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentPlan {
    /// The segments' base offsets, ascending (the last possibly unproven).
    pub(crate) bases: Vec<u64>,
    /// Base offsets of stray `.log` files (not the last one).
    pub(crate) strays: Vec<u64>,
    /// The last `.log` does not start like a segment.
    pub(crate) last_unproven: bool,
}

impl SegmentPlan {
    /// Sorts the `.log` files based at `bases` (see the type's docs).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when a file cannot be read.
    pub(crate) fn new(
        io: &dyn Io,
        dir: &Path,
        bases: impl IntoIterator<Item = u64>,
        max_batch_bytes: u64,
    ) -> Result<Self> {
        let all: Vec<u64> = bases.into_iter().collect();
        let mut plan = SegmentPlan::default();
        for (i, &base) in all.iter().enumerate() {
            let path = dir.join(file_name(base, LOG_SUFFIX));
            let proven = starts_like_a_segment(io, &path, base, max_batch_bytes)?;
            if proven {
                plan.bases.push(base);
            } else if i + 1 < all.len() {
                plan.strays.push(base);
            } else {
                plan.bases.push(base);
                plan.last_unproven = true;
            }
        }
        Ok(plan)
    }

    /// The bound on the offsets of segment `i`: the next segment's base offset, unless the
    /// next is the unproven last one (it bounds nothing until it is known to be a segment).
    pub(crate) fn upper(&self, i: usize) -> Option<u64> {
        let next = i + 1;
        if self.last_unproven && next + 1 == self.bases.len() {
            return None;
        }
        self.bases.get(next).copied()
    }

    /// Whether segment `i` is the unproven last `.log` and a stray file after all: the
    /// segment before it ends at `previous_end`, past its base offset.
    pub(crate) fn last_is_stray(&self, i: usize, previous_end: Option<u64>) -> bool {
        self.last_unproven
            && i + 1 == self.bases.len()
            && previous_end.is_some_and(|end| end > self.bases[i])
    }
}

/// Why the `.log` at `path` is a stray file (for reports and the verifier).
pub(crate) fn stray_reason(path: &Path) -> String {
    format!(
        "stray segment file {}: it does not start like a segment (it is empty, too short or \
         garbage: no batch, valid or damaged, based at its name's offset) where no log leaves \
         such a file (a segment follows it, or the segment before it holds its offsets); \
         recovery sets it aside as `<name>.stray`, to be looked at and deleted",
        path.display()
    )
}

/// Why the `.log` at `path` is a stray copy: `previous`, the segment before it, holds a
/// batch based at its base offset (for reports and the verifier).
pub(crate) fn stray_copy_reason(path: &Path, previous: &Path) -> String {
    format!(
        "stray segment file {}: {} holds a batch based at its base offset (a log rolls at its \
         end, never inside it: this file is a copy); recovery sets it aside as `<name>.stray`, \
         to be looked at and deleted",
        path.display(),
        previous.display()
    )
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::storage::io::FsIo;
    use crate::storage::record_batch::BatchBuilder;
    use proptest::prelude::*;

    /// How a scan ended, without the error's wording.
    fn end_of(end: Result<ScanEnd>) -> String {
        match end {
            Ok(ScanEnd::Complete) => "complete".into(),
            Ok(ScanEnd::Partial { position, bytes }) => format!("partial at {position}, {bytes}"),
            Ok(ScanEnd::Corrupt { position, .. }) => format!("corrupt at {position}"),
            Ok(ScanEnd::Stopped { position }) => format!("stopped at {position}"),
            Err(Error::BatchTooLarge { position, .. }) => format!("too large at {position}"),
            Err(e) => format!("error {e:?}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever the read size, a scan visits the batches a model of the file says, ends as
        /// it says (a torn tail, a bad CRC, a batch over the limit), and holds at most the
        /// larger of a read and the limit, never more than the file.
        #[test]
        fn a_scan_ends_alike_for_every_read_size(
            values in prop::collection::vec(prop::collection::vec(0usize..3000, 1..4), 1..8),
            cut in any::<prop::sample::Index>(),
            torn in any::<bool>(),
            flip in proptest::option::of((any::<prop::sample::Index>(), any::<prop::sample::Index>())),
            max_batch_bytes in prop_oneof![61u64..9000, Just(1u64 << 30)],
            chunks in prop::collection::vec(prop_oneof![1usize..100, 100usize..10_000, Just(SCAN_CHUNK), Just(2usize << 20)], 1..4),
        ) {
            let mut bytes = Vec::new();
            let mut batches = Vec::new(); // (position, size, base offset)
            let mut base = 0u64;
            for sizes in &values {
                let mut b = BatchBuilder::new(base);
                for (i, &n) in sizes.iter().enumerate() {
                    let value: Vec<u8> = (0..n).map(|j| (j * 31 + i) as u8).collect();
                    b = b.with_record(1, Some(b"k"), Some(&value)).unwrap();
                }
                let batch = b.finish().to_vec();
                batches.push((bytes.len() as u64, batch.len() as u64, base));
                bytes.extend_from_slice(&batch);
                base += sizes.len() as u64;
            }
            let mut bad = None;
            if let Some((which, at)) = flip {
                let (p, size, _) = batches[which.index(batches.len())];
                let at = p as usize + 21 + at.index(size as usize - 21);
                bytes[at] ^= 0x5a;
                bad = Some(p);
            }
            if torn {
                let len = cut.index(bytes.len());
                bytes.truncate(len);
            }
            let file_len = bytes.len() as u64;
            // The model: batches in order until the first that cannot be visited.
            let mut want = Vec::new();
            let mut want_end = "complete".to_string();
            for &(p, size, base) in &batches {
                if p >= file_len {
                    break;
                }
                let left = file_len - p;
                if left < HEADER_SIZE_UP_TO_MAGIC as u64 || size > left {
                    want_end = format!("partial at {p}, {left}");
                    break;
                }
                if bad == Some(p) {
                    want_end = format!("corrupt at {p}");
                    break;
                }
                if size > max_batch_bytes {
                    want_end = format!("too large at {p}");
                    break;
                }
                want.push((p, base));
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("00000000000000000000.log");
            let file = FsIo.open(&path, OpenMode::CreateNew).unwrap();
            file.write_all_at(&bytes, 0).unwrap();
            let mut data = Vec::new();
            for chunk in chunks {
                let mut seen = Vec::new();
                let end = scan_log_reusing(&*file, &path, (0, file_len), max_batch_bytes, (&mut data, chunk), |b| {
                    seen.push((b.position(), b.header().base_offset));
                    Ok(true)
                });
                prop_assert_eq!(&seen, &want, "chunk {}", chunk);
                prop_assert_eq!(end_of(end), want_end.clone(), "chunk {}", chunk);
                let bound = (chunk as u64).max(max_batch_bytes).min(file_len);
                prop_assert!(data.len() as u64 <= bound, "held {} of a {}-byte file, chunk {}", data.len(), file_len, chunk);
                data.clear();
            }
        }
    }
}
