//! Reading batches: a checked [`Batch`], its records decoded lazily, and the batches of a
//! file one after another.

use super::field;
use super::header::{be_i32, corrupt, crc32c, BatchHeader};
use super::{Compression, TimestampType};
use super::{CORRUPT_BELOW_BATCH_LENGTH, HEADER_SIZE, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD};
use crate::error::{Corruption, Error, Result};
use crate::storage::varint::{read_varint, read_varlong};

///
/// Records are decoded lazily by [`records`](Batch::records); their structure is checked as
/// they are read.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    header: BatchHeader,
    bytes: &'a [u8],
    position: u64,
}

impl<'a> Batch<'a> {
    /// Decodes the batch at the start of `buf` (which may continue with more bytes).
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] with the byte position (from the start of `buf`) and the rule
    /// broken: a short buffer, a bad `batchLength` or magic, or a CRC mismatch.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::storage::record_batch::{Batch, BatchBuilder};
    /// use logbus::error::{Corruption, Error};
    ///
    /// let mut bytes = BatchBuilder::new(0).with_record(0, None, Some(b"v"))?.finish().to_vec();
    /// let last = bytes.len() - 1;
    /// bytes[last] ^= 1; // flip a bit in the value
    /// assert!(matches!(
    ///     Batch::decode(&bytes),
    ///     Err(Error::Corrupt { file: None, position: 17, reason: Corruption::CrcMismatch { .. } })
    /// ));
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn decode(buf: &'a [u8]) -> Result<Self> {
        Self::decode_at(buf, 0)
    }

    /// As [`decode`](Batch::decode), for bytes that start at byte `position` of a larger
    /// whole (a file): errors and [`position`](Batch::position) are reported from there.
    ///
    /// # Errors
    ///
    /// As [`decode`](Batch::decode).
    pub fn decode_at(buf: &'a [u8], position: u64) -> Result<Self> {
        Self::decode_inner(buf, position, true)
    }

    /// As [`decode_at`](Batch::decode_at) without the CRC check, for bytes read again from
    /// a file that is never written again after a scan checked them (the cleaner's rewrite
    /// of a closed segment its key map's scan read whole).
    pub(crate) fn decode_unverified_at(buf: &'a [u8], position: u64) -> Result<Self> {
        Self::decode_inner(buf, position, false)
    }

    /// As [`decode_at`](Batch::decode_at), with the CRC check only when `check_crc`: for
    /// bytes whose CRC was checked when they were read (see [`BatchIter::crc_checked`]).
    fn decode_inner(buf: &'a [u8], position: u64, check_crc: bool) -> Result<Self> {
        let shift = |e: Error| match e {
            Error::Corrupt {
                file: None,
                position: p,
                reason,
            } => Error::Corrupt {
                file: None,
                position: position + p,
                reason,
            },
            other => other,
        };
        let header = BatchHeader::parse(buf).map_err(shift)?;
        let size = header.size();
        if (buf.len() as u64) < size {
            return Err(shift(corrupt(
                0,
                Corruption::Truncated {
                    what: "record batch",
                    needed: size,
                    available: buf.len() as u64,
                },
            )));
        }
        let bytes = &buf[..size as usize];
        if !check_crc {
            return Ok(Batch {
                header,
                bytes,
                position,
            });
        }
        let computed = crc32c(&bytes[field::ATTRIBUTES..]);
        if computed != header.crc {
            return Err(shift(corrupt(
                field::CRC,
                Corruption::CrcMismatch {
                    stored: header.crc,
                    computed,
                },
            )));
        }
        Ok(Batch {
            header,
            bytes,
            position,
        })
    }

    /// The batch header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch's bytes, header included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Bytes the batch occupies.
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Where the batch starts (0 for [`decode`](Batch::decode), the given position for
    /// [`decode_at`](Batch::decode_at) and [`BatchIter`]).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// An iterator over the records, checking each one's structure as it goes.
    ///
    /// An uncompressed batch's records are read in place (`buf` is not touched); a
    /// compressed batch's are decompressed once, into `buf` (cleared first; reuse it from
    /// batch to batch and nothing is allocated once it is large enough), and read from there.
    /// Decompression stops at [`decompressed_limit`](super::decompressed_limit).
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedCompression`] for a codec this build cannot read (ids 5–7, or a
    /// codec whose feature is off); [`Error::Corrupt`] when `recordsCount` is negative, or
    /// when the compressed stream does not decode ([`Corruption::BadCompressedData`],
    /// [`Corruption::DecompressedTooLarge`], reported at the stream's first byte). The
    /// iterator yields [`Error::Corrupt`] for a malformed record, a record whose offset
    /// delta is outside `[0, lastOffsetDelta]` or not above the previous record's (records
    /// may skip offsets, as compaction leaves them, but never leave their batch), or
    /// trailing bytes, then stops; in a compressed batch these are reported at the stream's
    /// first byte too (a position inside the decompressed bytes is no position in a file).
    pub fn records<'b>(&self, buf: &'b mut Vec<u8>) -> Result<BatchRecords<'b>>
    where
        'a: 'b,
    {
        if self.header.records_count < 0 {
            return Err(Error::Corrupt {
                file: None,
                position: self.position + field::RECORDS_COUNT as u64,
                reason: Corruption::NegativeLength {
                    what: "recordsCount",
                    value: i64::from(self.header.records_count),
                },
            });
        }
        let (bytes, pos, fixed_position): (&'b [u8], usize, Option<u64>) =
            if self.decompress(buf)? {
                (&buf[..], 0, Some(self.position + HEADER_SIZE as u64))
            } else {
                (self.bytes, HEADER_SIZE, None)
            };
        self.records_over(bytes, pos, fixed_position)
    }

    /// Decompresses a compressed batch's records into `buf` (cleared first): `true`; for an
    /// uncompressed batch `buf` is untouched: `false`. The records are then read from `buf`
    /// with [`records_of`](Batch::records_of) (for a caller that wants to own the buffer,
    /// as the consumers' read path does to share values out of it).
    ///
    /// # Errors
    ///
    /// As [`records`](Batch::records), for the stream.
    pub fn decompress(&self, buf: &mut Vec<u8>) -> Result<bool> {
        let compression = self.header.compression();
        if compression == Compression::None {
            return Ok(false);
        }
        if !super::codec_available(compression) {
            return Err(Error::UnsupportedCompression {
                file: None,
                position: self.position,
                codec: compression.to_string(),
            });
        }
        let limit = super::decompressed_limit(self.header.records_count);
        super::compression::decompress(compression, &self.bytes[HEADER_SIZE..], buf, limit)
            .map_err(|e| at_position(e, self.position + HEADER_SIZE as u64))?;
        Ok(true)
    }

    /// The records of a compressed batch from `decompressed`, what
    /// [`decompress`](Batch::decompress) put in its buffer (for an uncompressed batch pass
    /// anything: its records are read in place).
    ///
    /// # Errors
    ///
    /// As [`records`](Batch::records), less the stream's errors.
    pub fn records_of<'b>(&self, decompressed: &'b [u8]) -> Result<BatchRecords<'b>>
    where
        'a: 'b,
    {
        let (bytes, pos, fixed_position): (&'b [u8], usize, Option<u64>) =
            if self.header.compression() == Compression::None {
                (self.bytes, HEADER_SIZE, None)
            } else {
                (decompressed, 0, Some(self.position + HEADER_SIZE as u64))
            };
        self.records_over(bytes, pos, fixed_position)
    }

    fn records_over<'b>(
        &self,
        bytes: &'b [u8],
        pos: usize,
        fixed_position: Option<u64>,
    ) -> Result<BatchRecords<'b>> {
        if self.header.records_count < 0 {
            return Err(Error::Corrupt {
                file: None,
                position: self.position + field::RECORDS_COUNT as u64,
                reason: Corruption::NegativeLength {
                    what: "recordsCount",
                    value: i64::from(self.header.records_count),
                },
            });
        }
        Ok(BatchRecords {
            bytes,
            pos,
            remaining: self.header.records_count as u32,
            next_min_delta: 0,
            last_offset_delta: self.header.last_offset_delta,
            base_offset: self.header.base_offset,
            base_timestamp: self.header.base_timestamp,
            log_append_time: (self.header.timestamp_type() == TimestampType::LogAppendTime)
                .then_some(self.header.max_timestamp),
            position: self.position,
            fixed_position,
            done: false,
        })
    }

    /// Walks every record, checking Kafka's strictness rules: without allocating for an
    /// uncompressed batch, decompressing into one buffer for a compressed one.
    ///
    /// # Errors
    ///
    /// The first error [`records`](Batch::records) or its iterator reports.
    pub fn validate_records(&self) -> Result<()> {
        let mut buf = Vec::new();
        for record in self.records(&mut buf)? {
            record?;
        }
        Ok(())
    }

    /// Every record with its offset, owned.
    ///
    /// # Errors
    ///
    /// As [`validate_records`](Batch::validate_records).
    pub fn to_records(&self) -> Result<Vec<(u64, BatchRecord)>> {
        // No capacity from the declared count: it may be hostile. Growth is bounded by bytes.
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for record in self.records(&mut buf)? {
            let record = record?;
            out.push((record.offset, record.to_record()));
        }
        Ok(out)
    }
}

/// `e` (an error at position 0 of the compressed stream) moved to `position`.
fn at_position(e: Error, position: u64) -> Error {
    match e {
        Error::Corrupt {
            file: None, reason, ..
        } => Error::Corrupt {
            file: None,
            position,
            reason,
        },
        Error::UnsupportedCompression { file, codec, .. } => Error::UnsupportedCompression {
            file,
            position,
            codec,
        },
        other => other,
    }
}

/// One header of a record, borrowed from the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderView<'a> {
    /// The header's key (UTF-8).
    pub key: &'a str,
    /// The header's value; `None` is a null value.
    pub value: Option<&'a [u8]>,
}

/// One record, borrowed from its batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// `baseOffset + offsetDelta`.
    pub offset: u64,
    /// `baseTimestamp + timestampDelta`, or the batch's max timestamp under `LogAppendTime`.
    pub timestamp: i64,
    /// The key; `None` is a null key.
    pub key: Option<&'a [u8]>,
    /// The value; `None` is a null value.
    pub value: Option<&'a [u8]>,
    /// The headers, in order.
    pub headers: Vec<HeaderView<'a>>,
}

impl RecordView<'_> {
    /// An owned copy (without the offset).
    pub fn to_record(&self) -> BatchRecord {
        BatchRecord {
            timestamp: self.timestamp,
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.map(<[u8]>::to_vec),
            headers: self
                .headers
                .iter()
                .map(|h| Header {
                    key: h.key.to_owned(),
                    value: h.value.map(<[u8]>::to_vec),
                })
                .collect(),
        }
    }
}

/// A record header, owned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Header {
    /// The key (Kafka requires UTF-8).
    pub key: String,
    /// The value; `None` is a null value.
    pub value: Option<Vec<u8>>,
}

/// A record, owned: what is appended, and what is read back (its offset comes beside it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct BatchRecord {
    /// Milliseconds since the Unix epoch, or [`NO_TIMESTAMP`](super::NO_TIMESTAMP).
    pub timestamp: i64,
    /// The key; `None` is a null key.
    pub key: Option<Vec<u8>>,
    /// The value; `None` is a null value (a tombstone).
    pub value: Option<Vec<u8>>,
    /// The headers, in order.
    pub headers: Vec<Header>,
}

impl BatchRecord {
    /// A record with a timestamp, an optional key and a value, and no headers.
    pub fn new(timestamp: i64, key: Option<&[u8]>, value: &[u8]) -> Self {
        BatchRecord {
            timestamp,
            key: key.map(<[u8]>::to_vec),
            value: Some(value.to_vec()),
            headers: Vec::new(),
        }
    }
}

/// The records of a [`Batch`]; see [`Batch::records`].
#[derive(Debug, Clone)]
pub struct BatchRecords<'a> {
    bytes: &'a [u8],
    pos: usize,
    remaining: u32,
    /// The smallest offset delta the next record may have: deltas increase strictly.
    next_min_delta: i64,
    last_offset_delta: i32,
    base_offset: u64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    position: u64,
    /// Where errors are reported in a compressed batch (its stream's first byte).
    fixed_position: Option<u64>,
    done: bool,
}

impl<'a> Iterator for BatchRecords<'a> {
    type Item = Result<RecordView<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.remaining == 0 {
            self.done = true;
            let trailing = self.bytes.len() - self.pos;
            if trailing == 0 {
                return None;
            }
            return Some(Err(Error::Corrupt {
                file: None,
                position: self
                    .fixed_position
                    .unwrap_or(self.position + self.pos as u64),
                reason: Corruption::TrailingBytes {
                    count: trailing as u64,
                },
            }));
        }
        self.remaining -= 1;
        match self.next_record() {
            Ok(record) => Some(Ok(record)),
            Err(e) => {
                self.done = true;
                Some(Err(match self.fixed_position {
                    Some(p) => at_position(e, p),
                    None => e,
                }))
            }
        }
    }
}

/// A bounds-checked reader over one slice, reporting errors at absolute positions.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    fn err(&self, at: usize, reason: Corruption) -> Error {
        Error::Corrupt {
            file: None,
            position: self.base + at as u64,
            reason,
        }
    }

    fn varint(&mut self) -> Result<i32> {
        let at = self.pos;
        let (v, n) = read_varint(self.buf, at).map_err(|e| self.rebase(e))?;
        self.pos += n;
        Ok(v)
    }

    fn varlong(&mut self) -> Result<i64> {
        let at = self.pos;
        let (v, n) = read_varlong(self.buf, at).map_err(|e| self.rebase(e))?;
        self.pos += n;
        Ok(v)
    }

    fn rebase(&self, e: Error) -> Error {
        match e {
            Error::Corrupt {
                file: None,
                position,
                reason,
            } => Error::Corrupt {
                file: None,
                position: self.base + position,
                reason,
            },
            other => other,
        }
    }

    fn byte(&mut self, what: &'static str) -> Result<u8> {
        let b = self.take(1, what)?;
        Ok(b[0])
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let available = self.buf.len() - self.pos;
        if n > available {
            return Err(self.err(
                self.pos,
                Corruption::Truncated {
                    what,
                    needed: n as u64,
                    available: available as u64,
                },
            ));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// A length-prefixed byte string; -1 is null when `nullable`.
    fn bytes(&mut self, what: &'static str, nullable: bool) -> Result<Option<&'a [u8]>> {
        let at = self.pos;
        let len = self.varint()?;
        if len == -1 && nullable {
            return Ok(None);
        }
        if len < 0 {
            return Err(self.err(
                at,
                Corruption::NegativeLength {
                    what,
                    value: i64::from(len),
                },
            ));
        }
        self.take(len as usize, what).map(Some)
    }
}

impl<'a> BatchRecords<'a> {
    fn next_record(&mut self) -> Result<RecordView<'a>> {
        let mut outer = Cursor {
            buf: self.bytes,
            pos: self.pos,
            base: self.position,
        };
        // (In a compressed batch `next` moves every error to the stream's start.)
        let length_at = outer.pos;
        let length = outer.varint()?;
        if length < 0 {
            return Err(outer.err(
                length_at,
                Corruption::NegativeLength {
                    what: "record length",
                    value: i64::from(length),
                },
            ));
        }
        let body_start = outer.pos;
        let body = outer.take(length as usize, "record")?;
        self.pos = outer.pos;

        // Every field of the record is read from `body` alone, so none can read past it.
        let mut c = Cursor {
            buf: body,
            pos: 0,
            base: self.position + body_start as u64,
        };
        let _attributes = c.byte("record attributes")?;
        let timestamp_delta = c.varlong()?;
        let delta_at = c.pos;
        let offset_delta = c.varint()?;
        // A record's offset lies inside its batch, after the previous record's: otherwise a
        // read would serve offsets beyond the log end or out of order.
        let delta = i64::from(offset_delta);
        if delta < self.next_min_delta || delta > i64::from(self.last_offset_delta) {
            return Err(c.err(
                delta_at,
                Corruption::BadOffsetDelta {
                    delta,
                    min: self.next_min_delta,
                    last_offset_delta: self.last_offset_delta,
                },
            ));
        }
        self.next_min_delta = delta + 1;
        let key = c.bytes("record key length", true)?;
        let value = c.bytes("record value length", true)?;
        let count_at = c.pos;
        let header_count = c.varint()?;
        if header_count < 0 {
            return Err(c.err(
                count_at,
                Corruption::NegativeLength {
                    what: "header count",
                    value: i64::from(header_count),
                },
            ));
        }
        // Each header takes at least two bytes, so this loop ends when the body runs out.
        let mut headers = Vec::new();
        for _ in 0..header_count {
            let key_at = c.pos;
            let key_bytes = c.bytes("header key length", false)?.unwrap_or_default();
            let key = std::str::from_utf8(key_bytes)
                .map_err(|_| c.err(key_at, Corruption::HeaderKeyNotUtf8))?;
            let value = c.bytes("header value length", true)?;
            headers.push(HeaderView { key, value });
        }
        if c.pos != body.len() {
            return Err(c.err(
                0,
                Corruption::RecordLengthMismatch {
                    declared: body.len() as u64,
                    consumed: c.pos as u64,
                },
            ));
        }
        Ok(RecordView {
            // The delta was checked to lie in [0, lastOffsetDelta] above.
            offset: self.base_offset.saturating_add_signed(delta),
            timestamp: match self.log_append_time {
                Some(ts) => ts,
                None => self.base_timestamp.wrapping_add(timestamp_delta),
            },
            key,
            value,
            headers,
        })
    }
}

/// Iterates the batches of a sequence of bytes (a `.log` file's contents), as Kafka's
/// `FileLogInputStream` does.
///
/// Each item is a batch with its CRC checked, or the first corruption found (after which the
/// iterator ends). Fewer than 17 bytes left, or a batch running past the end, is the end of the
/// data (a partial final batch), not an error; [`valid_bytes`](BatchIter::valid_bytes) then
/// says where the complete batches end.
///
/// # Examples
///
/// ```
/// use logbus::storage::record_batch::{BatchBuilder, BatchIter};
///
/// let mut log = BatchBuilder::new(0).with_record(1, None, Some(b"a"))?.finish().to_vec();
/// let first = log.len();
/// log.extend_from_slice(BatchBuilder::new(1).with_record(2, None, Some(b"b"))?.finish());
/// log.truncate(log.len() - 3); // a torn final batch
///
/// let mut iter = BatchIter::new(&log);
/// assert_eq!(iter.next().unwrap()?.header().base_offset, 0);
/// assert!(iter.next().is_none());
/// assert_eq!(iter.valid_bytes(), first as u64);
/// # Ok::<(), logbus::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
    done: bool,
    check_crc: bool,
}

impl<'a> BatchIter<'a> {
    /// Batches from the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self::with_base(buf, 0)
    }

    /// Batches of bytes that start at byte `base` of a file: positions are reported from
    /// there.
    pub fn with_base(buf: &'a [u8], base: u64) -> Self {
        BatchIter {
            buf,
            pos: 0,
            base,
            done: false,
            check_crc: true,
        }
    }

    /// Skips the CRC check: for bytes that [`SegmentSet::read_into`] returned, whose
    /// batches' CRCs it checked (everything else is checked as usual).
    ///
    /// [`SegmentSet::read_into`]: crate::storage::SegmentSet::read_into
    pub(crate) fn crc_checked(mut self) -> Self {
        self.check_crc = false;
        self
    }

    /// The position (from `base`) just after the last complete, valid batch returned.
    pub fn valid_bytes(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes after [`valid_bytes`](BatchIter::valid_bytes) that did not form a whole batch
    /// (meaningful once the iterator has returned `None`).
    pub fn remaining(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<Batch<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let position = self.base + self.pos as u64;
        match next_batch_extent(rest) {
            Extent::End => {
                self.done = true;
                None
            }
            Extent::Corrupt(length) => {
                self.done = true;
                Some(Err(Error::Corrupt {
                    file: None,
                    position: position + 8,
                    reason: Corruption::BatchLengthTooSmall { length },
                }))
            }
            Extent::Batch(size) => {
                match Batch::decode_inner(&rest[..size], position, self.check_crc) {
                    Ok(batch) => {
                        self.pos += size;
                        Some(Ok(batch))
                    }
                    Err(e) => {
                        self.done = true;
                        Some(Err(e))
                    }
                }
            }
        }
    }
}

/// Where the next batch of a file ends, by Kafka's `FileLogInputStream` rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// Not enough bytes for a whole batch: the end of the data.
    End,
    /// `batchLength` (the value carried) is below 14: corruption.
    Corrupt(i32),
    /// A whole batch of this many bytes is present (not yet validated).
    Batch(usize),
}

/// Classifies the bytes at the start of `rest` (see [`Extent`]).
pub fn next_batch_extent(rest: &[u8]) -> Extent {
    if rest.len() < HEADER_SIZE_UP_TO_MAGIC {
        return Extent::End;
    }
    let length = be_i32(rest, field::BATCH_LENGTH);
    if length < CORRUPT_BELOW_BATCH_LENGTH {
        return Extent::Corrupt(length);
    }
    let size = LOG_OVERHEAD as u64 + length as u64;
    if size > rest.len() as u64 {
        return Extent::End;
    }
    Extent::Batch(size as usize)
}
