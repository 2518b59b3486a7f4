//! Kafka's RecordBatch v2 (magic 2): the unit written to a `.log` file.
//!
//! A batch is a 61-byte header followed by its records; every field is big-endian, and the
//! CRC-32C (Castagnoli, computed with the CPU's instruction where there is one) covers the
//! bytes from `attributes` to the end of the batch. The layout, field by field, is in
//! `KAFKA_FORMAT.md` §1; the reading rules are Kafka's own (`DefaultRecordBatch`,
//! `DefaultRecord`, `FileLogInputStream`):
//!
//! - each record consumes exactly its declared `length`, and no bytes may follow the
//!   `recordsCount`-th record;
//! - negative counts and lengths (other than -1 for a null key, value or header value) are
//!   corrupt;
//! - in a sequence of batches ([`BatchIter`]) a partial final batch is the end of the data,
//!   while a `batchLength` below 14 is corruption (a zero-filled tail is caught this way).
//!
//! Hostile bytes are safe: every length is checked against the bytes actually present before
//! it is used, nothing is allocated in proportion to a declared count, and every loop consumes
//! at least one byte per step. Decoding never panics.
//!
//! logbus writes uncompressed batches with producer id, epoch and base sequence -1 (no
//! idempotence yet) and `CreateTime` timestamps. Reading a compressed batch's records is an
//! [`Error::UnsupportedCompression`]; its header and CRC can still be read and checked.
//!
//! # Examples
//!
//! ```
//! use logbus::storage::record_batch::{Batch, BatchBuilder};
//!
//! let mut builder = BatchBuilder::new(42);
//! builder.append(1_700_000_000_000, Some(b"k"), Some(b"v"), &[("h", None)])?;
//! builder.append(1_700_000_000_005, None, Some(b"second"), &[])?;
//! let bytes = builder.finish().to_vec();
//!
//! let batch = Batch::decode(&bytes)?;
//! assert_eq!(batch.header().base_offset, 42);
//! assert_eq!(batch.header().last_offset(), 43);
//! let records = batch.to_records()?;
//! assert_eq!(records[1].0, 43);
//! assert_eq!(records[1].1.value.as_deref(), Some(&b"second"[..]));
//! assert_eq!(records[0].1.headers[0].key, "h");
//! # Ok::<(), logbus::Error>(())
//! ```

use std::fmt;

use super::varint::{
    put_varint, put_varlong, read_varint, read_varlong, varint_size, varlong_size,
};
use crate::error::{Corruption, Error, Result};

/// The magic byte of record format v2.
pub const MAGIC: i8 = 2;
/// Bytes before `batchLength` counts: `baseOffset` (8) and `batchLength` (4).
pub const LOG_OVERHEAD: usize = 12;
/// Size of the batch header; the records start here.
pub const HEADER_SIZE: usize = 61;
/// The smallest valid `batchLength` (a batch with no records).
pub const MIN_BATCH_LENGTH: i32 = (HEADER_SIZE - LOG_OVERHEAD) as i32;
/// Bytes up to and including the magic byte: what a reader of a file looks at first.
pub const HEADER_SIZE_UP_TO_MAGIC: usize = 17;
/// Below this `batchLength` a batch in a file is corrupt rather than partial
/// (Kafka's `FileLogInputStream`).
pub const CORRUPT_BELOW_BATCH_LENGTH: i32 = 14;
/// The timestamp of a record without one.
pub const NO_TIMESTAMP: i64 = -1;

const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;

/// The compression codec named by attribute bits 0–2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Uncompressed (the only codec logbus reads and writes).
    None,
    /// gzip (1).
    Gzip,
    /// snappy (2).
    Snappy,
    /// lz4 (3).
    Lz4,
    /// zstd (4).
    Zstd,
    /// Codec ids 5–7, which Kafka does not define.
    Unknown(u8),
}

impl Compression {
    /// The codec named by a batch's attributes.
    pub fn from_attributes(attributes: i16) -> Self {
        match attributes & 0x7 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => Compression::Unknown(other as u8),
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::None => f.write_str("none"),
            Compression::Gzip => f.write_str("gzip"),
            Compression::Snappy => f.write_str("snappy"),
            Compression::Lz4 => f.write_str("lz4"),
            Compression::Zstd => f.write_str("zstd"),
            Compression::Unknown(id) => write!(f, "unknown({id})"),
        }
    }
}

/// How a batch's timestamps were assigned (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Set by the producer (what logbus writes).
    CreateTime,
    /// Set by the broker on append; every record then reports the batch's `max_timestamp`.
    LogAppendTime,
}

/// The 61-byte header of a batch, as stored (fixed-width fields, big-endian on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after this field; the batch occupies `12 + batch_length` bytes.
    pub batch_length: i32,
    /// The leader epoch under which the batch was appended (0 until replication sets it).
    pub partition_leader_epoch: i32,
    /// Always 2 in a header returned by [`BatchHeader::parse`].
    pub magic: i8,
    /// The stored CRC-32C of bytes `[21, end of batch)`.
    pub crc: u32,
    /// Compression (bits 0–2), timestamp type (3), transactional (4), control (5), delete
    /// horizon (6).
    pub attributes: i16,
    /// `last offset - base offset`.
    pub last_offset_delta: i32,
    /// The first record's timestamp (-1 for an empty batch).
    pub base_timestamp: i64,
    /// The largest record timestamp.
    pub max_timestamp: i64,
    /// -1 unless the producer is idempotent.
    pub producer_id: i64,
    /// -1 unless the producer is idempotent.
    pub producer_epoch: i16,
    /// -1 unless the producer is idempotent.
    pub base_sequence: i32,
    /// Number of records.
    pub records_count: i32,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Parses the header at the start of `buf` and checks `batchLength` and the magic byte
    /// (not the CRC: see [`Batch::decode`]).
    ///
    /// # Errors
    ///
    /// [`Error::CorruptBatch`] (positions from the start of `buf`) with
    /// [`Corruption::Truncated`] when `buf` is shorter than 61 bytes,
    /// [`Corruption::BatchLengthTooSmall`] or [`Corruption::BadMagic`].
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < HEADER_SIZE {
            return Err(corrupt(
                0,
                Corruption::Truncated {
                    what: "batch header",
                    needed: HEADER_SIZE as u64,
                    available: buf.len() as u64,
                },
            ));
        }
        let header = BatchHeader {
            base_offset: be_i64(buf, 0),
            batch_length: be_i32(buf, 8),
            partition_leader_epoch: be_i32(buf, 12),
            magic: buf[16] as i8,
            crc: be_i32(buf, CRC_OFFSET) as u32,
            attributes: be_i16(buf, ATTRIBUTES_OFFSET),
            last_offset_delta: be_i32(buf, 23),
            base_timestamp: be_i64(buf, 27),
            max_timestamp: be_i64(buf, 35),
            producer_id: be_i64(buf, 43),
            producer_epoch: be_i16(buf, 51),
            base_sequence: be_i32(buf, 53),
            records_count: be_i32(buf, 57),
        };
        if header.batch_length < MIN_BATCH_LENGTH {
            return Err(corrupt(
                8,
                Corruption::BatchLengthTooSmall {
                    length: header.batch_length,
                },
            ));
        }
        if header.magic != MAGIC {
            return Err(corrupt(
                16,
                Corruption::BadMagic {
                    magic: header.magic,
                },
            ));
        }
        Ok(header)
    }

    /// Total bytes the batch occupies (`12 + batch_length`).
    pub fn size(&self) -> u64 {
        LOG_OVERHEAD as u64 + self.batch_length.max(0) as u64
    }

    /// Offset of the last record (`base_offset + last_offset_delta`, saturating).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    /// The compression codec (attribute bits 0–2).
    pub fn compression(&self) -> Compression {
        Compression::from_attributes(self.attributes)
    }

    /// The timestamp type (attribute bit 3).
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & 0x08 != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether the batch belongs to a transaction (attribute bit 4).
    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    /// Whether the batch holds control records (attribute bit 5).
    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
}

fn corrupt(position: usize, reason: Corruption) -> Error {
    Error::CorruptBatch {
        position: position as u64,
        reason,
    }
}

/// CRC-32C of `bytes` (hardware-accelerated where the CPU has the instruction).
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// One complete batch whose header, size and CRC have been checked, borrowing its bytes.
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
    /// [`Error::CorruptBatch`] with the byte position (from the start of `buf`) and the rule
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
    ///     Err(Error::CorruptBatch { position: 17, reason: Corruption::CrcMismatch { .. } })
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
        let shift = |e: Error| match e {
            Error::CorruptBatch {
                position: p,
                reason,
            } => Error::CorruptBatch {
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
        let computed = crc32c(&bytes[ATTRIBUTES_OFFSET..]);
        if computed != header.crc {
            return Err(shift(corrupt(
                CRC_OFFSET,
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
    /// # Errors
    ///
    /// [`Error::UnsupportedCompression`] for a compressed batch; [`Error::CorruptBatch`] when
    /// `recordsCount` is negative. The iterator yields [`Error::CorruptBatch`] for a malformed
    /// record, a record whose offset delta is outside `[0, lastOffsetDelta]` or not above the
    /// previous record's (records may skip offsets, as compaction leaves them, but never leave
    /// their batch), or trailing bytes, then stops.
    pub fn records(&self) -> Result<Records<'a>> {
        let compression = self.header.compression();
        if compression != Compression::None {
            return Err(Error::UnsupportedCompression {
                file: None,
                position: self.position,
                codec: compression.to_string(),
            });
        }
        if self.header.records_count < 0 {
            return Err(Error::CorruptBatch {
                position: self.position + 57,
                reason: Corruption::NegativeLength {
                    what: "recordsCount",
                    value: i64::from(self.header.records_count),
                },
            });
        }
        Ok(Records {
            bytes: self.bytes,
            pos: HEADER_SIZE,
            remaining: self.header.records_count as u32,
            next_min_delta: 0,
            last_offset_delta: self.header.last_offset_delta,
            base_offset: self.header.base_offset,
            base_timestamp: self.header.base_timestamp,
            log_append_time: (self.header.timestamp_type() == TimestampType::LogAppendTime)
                .then_some(self.header.max_timestamp),
            position: self.position,
            done: false,
        })
    }

    /// Walks every record without allocating, checking Kafka's strictness rules.
    ///
    /// # Errors
    ///
    /// The first error [`records`](Batch::records) or its iterator reports.
    pub fn validate_records(&self) -> Result<()> {
        for record in self.records()? {
            record?;
        }
        Ok(())
    }

    /// Every record with its offset, owned.
    ///
    /// # Errors
    ///
    /// As [`validate_records`](Batch::validate_records).
    pub fn to_records(&self) -> Result<Vec<(i64, Record)>> {
        // No capacity from the declared count: it may be hostile. Growth is bounded by bytes.
        let mut out = Vec::new();
        for record in self.records()? {
            let record = record?;
            out.push((record.offset, record.to_record()));
        }
        Ok(out)
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
    pub offset: i64,
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
    pub fn to_record(&self) -> Record {
        Record {
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
pub struct Record {
    /// Milliseconds since the Unix epoch, or [`NO_TIMESTAMP`].
    pub timestamp: i64,
    /// The key; `None` is a null key.
    pub key: Option<Vec<u8>>,
    /// The value; `None` is a null value (a tombstone).
    pub value: Option<Vec<u8>>,
    /// The headers, in order.
    pub headers: Vec<Header>,
}

impl Record {
    /// A record with a timestamp, an optional key and a value, and no headers.
    pub fn new(timestamp: i64, key: Option<&[u8]>, value: &[u8]) -> Self {
        Record {
            timestamp,
            key: key.map(<[u8]>::to_vec),
            value: Some(value.to_vec()),
            headers: Vec::new(),
        }
    }
}

/// The records of a [`Batch`]; see [`Batch::records`].
#[derive(Debug, Clone)]
pub struct Records<'a> {
    bytes: &'a [u8],
    pos: usize,
    remaining: u32,
    /// The smallest offset delta the next record may have: deltas increase strictly.
    next_min_delta: i64,
    last_offset_delta: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    position: u64,
    done: bool,
}

impl<'a> Iterator for Records<'a> {
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
            return Some(Err(Error::CorruptBatch {
                position: self.position + self.pos as u64,
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
                Some(Err(e))
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
        Error::CorruptBatch {
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
            Error::CorruptBatch { position, reason } => Error::CorruptBatch {
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

impl<'a> Records<'a> {
    fn next_record(&mut self) -> Result<RecordView<'a>> {
        let mut outer = Cursor {
            buf: self.bytes,
            pos: self.pos,
            base: self.position,
        };
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
            offset: self.base_offset.wrapping_add(i64::from(offset_delta)),
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
        }
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
                Some(Err(Error::CorruptBatch {
                    position: position + 8,
                    reason: Corruption::BatchLengthTooSmall { length },
                }))
            }
            Extent::Batch(size) => match Batch::decode_at(&rest[..size], position) {
                Ok(batch) => {
                    self.pos += size;
                    Some(Ok(batch))
                }
                Err(e) => {
                    self.done = true;
                    Some(Err(e))
                }
            },
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
    let length = be_i32(rest, 8);
    if length < CORRUPT_BELOW_BATCH_LENGTH {
        return Extent::Corrupt(length);
    }
    let size = LOG_OVERHEAD as u64 + length as u64;
    if size > rest.len() as u64 {
        return Extent::End;
    }
    Extent::Batch(size as usize)
}

/// Builds one uncompressed batch, record by record, into a reusable buffer.
///
/// Offsets are dense from the base offset (record `i` gets offset delta `i`); the first
/// record's timestamp is the base timestamp. Producer id, epoch and base sequence are -1;
/// the partition leader epoch is 0 unless set with
/// [`with_partition_leader_epoch`](BatchBuilder::with_partition_leader_epoch).
/// [`finish`](BatchBuilder::finish) fills in the header and the CRC.
///
/// # Examples
///
/// ```
/// use logbus::storage::record_batch::{Batch, BatchBuilder};
///
/// let mut b = BatchBuilder::new(0);
/// b.append(10, None, None, &[])?; // null key and null value
/// assert_eq!(b.len(), 1);
/// let batch_bytes = b.finish().to_vec();
/// assert_eq!(Batch::decode(&batch_bytes)?.header().records_count, 1);
///
/// b.clear(1); // reuse the buffer for the next batch
/// assert!(b.is_empty());
/// # Ok::<(), logbus::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    /// The batch occupies `buf[start..]`; `start` is 0 except inside
    /// [`encode_onto`](BatchBuilder::encode_onto), which builds at the end of another buffer.
    buf: Vec<u8>,
    start: usize,
    base_offset: i64,
    partition_leader_epoch: i32,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchBuilder {
    /// An empty batch starting at `base_offset`.
    pub fn new(base_offset: i64) -> Self {
        let mut b = BatchBuilder {
            buf: Vec::with_capacity(HEADER_SIZE + 64),
            start: 0,
            base_offset,
            partition_leader_epoch: 0,
            count: 0,
            base_timestamp: NO_TIMESTAMP,
            max_timestamp: NO_TIMESTAMP,
        };
        b.clear(base_offset);
        b
    }

    /// Sets the partition leader epoch written in the header (0 by default).
    pub fn with_partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Sets the partition leader epoch of this and later batches built with this builder.
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) {
        self.partition_leader_epoch = epoch;
    }

    /// Empties the builder for a new batch at `base_offset`, keeping its buffer (and the
    /// partition leader epoch).
    pub fn clear(&mut self, base_offset: i64) {
        self.buf.truncate(self.start);
        self.buf.resize(self.start + HEADER_SIZE, 0);
        self.base_offset = base_offset;
        self.count = 0;
        self.base_timestamp = NO_TIMESTAMP;
        self.max_timestamp = NO_TIMESTAMP;
    }

    /// Changes the base offset (outside the CRC, as a leader assigning offsets does).
    pub fn set_base_offset(&mut self, base_offset: i64) {
        self.base_offset = base_offset;
    }

    /// The base offset.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Number of records appended.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether no record was appended.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the finished batch will occupy.
    pub fn size(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Appends one record.
    ///
    /// # Errors
    ///
    /// [`Error::RecordTooLarge`] when the record or the batch would exceed what the format's
    /// 32-bit lengths and counts can express; the builder is then unchanged.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> Result<()> {
        let too_large = |size: usize| Error::RecordTooLarge {
            what: "record",
            size: size as u64,
            max: i32::MAX as u64,
        };
        if self.count == i32::MAX {
            return Err(Error::RecordTooLarge {
                what: "record batch (record count)",
                size: i32::MAX as u64 + 1,
                max: i32::MAX as u64,
            });
        }
        let base_timestamp = if self.count == 0 {
            timestamp
        } else {
            self.base_timestamp
        };
        let timestamp_delta = timestamp.wrapping_sub(base_timestamp);
        let offset_delta = self.count;
        let len_of = |b: Option<&[u8]>| -> Result<(i32, usize)> {
            match b {
                None => Ok((-1, 0)),
                Some(b) => i32::try_from(b.len())
                    .map(|l| (l, b.len()))
                    .map_err(|_| too_large(b.len())),
            }
        };
        let (key_len, key_size) = len_of(key)?;
        let (value_len, value_size) = len_of(value)?;
        let header_count = i32::try_from(headers.len()).map_err(|_| too_large(headers.len()))?;
        let mut body: usize = 1
            + varlong_size(timestamp_delta)
            + varint_size(offset_delta)
            + varint_size(key_len)
            + key_size
            + varint_size(value_len)
            + value_size
            + varint_size(header_count);
        let mut header_lens = Vec::new();
        for (hk, hv) in headers {
            let (hk_len, hk_size) = len_of(Some(hk.as_bytes()))?;
            let (hv_len, hv_size) = len_of(*hv)?;
            body = body
                .saturating_add(varint_size(hk_len) + hk_size)
                .saturating_add(varint_size(hv_len) + hv_size);
            header_lens.push((hk_len, hv_len));
        }
        let body_len = i32::try_from(body).map_err(|_| too_large(body))?;
        let total = self.size() as u64 + varint_size(body_len) as u64 + body as u64;
        if total - LOG_OVERHEAD as u64 > i32::MAX as u64 {
            return Err(Error::RecordTooLarge {
                what: "record batch",
                size: total,
                max: i32::MAX as u64 + LOG_OVERHEAD as u64,
            });
        }

        let out = &mut self.buf;
        out.reserve(varint_size(body_len) + body);
        put_varint(out, body_len);
        out.push(0); // record attributes: unused, always 0
        put_varlong(out, timestamp_delta);
        put_varint(out, offset_delta);
        put_varint(out, key_len);
        out.extend_from_slice(key.unwrap_or_default());
        put_varint(out, value_len);
        out.extend_from_slice(value.unwrap_or_default());
        put_varint(out, header_count);
        for ((hk, hv), (hk_len, hv_len)) in headers.iter().zip(header_lens) {
            put_varint(out, hk_len);
            out.extend_from_slice(hk.as_bytes());
            put_varint(out, hv_len);
            out.extend_from_slice(hv.unwrap_or_default());
        }

        self.base_timestamp = base_timestamp;
        self.max_timestamp = if self.count == 0 {
            timestamp
        } else {
            self.max_timestamp.max(timestamp)
        };
        self.count += 1;
        Ok(())
    }

    /// Appends an owned [`Record`].
    ///
    /// # Errors
    ///
    /// As [`append`](BatchBuilder::append).
    pub fn append_record(&mut self, record: &Record) -> Result<()> {
        let headers: Vec<(&str, Option<&[u8]>)> = record
            .headers
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_deref()))
            .collect();
        self.append(
            record.timestamp,
            record.key.as_deref(),
            record.value.as_deref(),
            &headers,
        )
    }

    /// [`append`](BatchBuilder::append) without headers, chainable.
    ///
    /// # Errors
    ///
    /// As [`append`](BatchBuilder::append).
    pub fn with_record(
        mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Self> {
        self.append(timestamp, key, value, &[])?;
        Ok(self)
    }

    /// Writes the header and CRC and returns the batch's bytes (the builder keeps them until
    /// the next [`clear`](BatchBuilder::clear); calling `finish` again is harmless).
    pub fn finish(&mut self) -> &[u8] {
        self.write_header();
        &self.buf[self.start..]
    }

    /// Writes the header and the CRC (one pass over the contiguous batch bytes) and returns
    /// the header, built from what the builder knows rather than parsed back.
    fn write_header(&mut self) -> BatchHeader {
        let b = &mut self.buf[self.start..];
        let batch_length = (b.len() - LOG_OVERHEAD) as i32;
        let last_offset_delta = (self.count - 1).max(0);
        b[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        b[8..12].copy_from_slice(&batch_length.to_be_bytes());
        b[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        b[16] = MAGIC as u8;
        b[21..23].copy_from_slice(&0i16.to_be_bytes()); // no compression, CreateTime
        b[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
        b[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        b[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        b[43..51].copy_from_slice(&(-1i64).to_be_bytes()); // producer id
        b[51..53].copy_from_slice(&(-1i16).to_be_bytes()); // producer epoch
        b[53..57].copy_from_slice(&(-1i32).to_be_bytes()); // base sequence
        b[57..61].copy_from_slice(&self.count.to_be_bytes());
        let crc = crc32c(&b[ATTRIBUTES_OFFSET..]);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        BatchHeader {
            base_offset: self.base_offset,
            batch_length,
            partition_leader_epoch: self.partition_leader_epoch,
            magic: MAGIC,
            crc,
            attributes: 0,
            last_offset_delta,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: self.count,
        }
    }

    /// Encodes `records` as one batch at `base_offset` straight onto the end of `out` (its
    /// earlier bytes stay), so a caller's write buffer receives the batch without an
    /// intermediate copy. Returns the batch's header; the batch is `out[len before..]`.
    ///
    /// # Errors
    ///
    /// As [`append`](BatchBuilder::append); `out` is then as it was.
    pub(crate) fn encode_onto(
        &mut self,
        out: &mut Vec<u8>,
        base_offset: i64,
        records: &[Record],
    ) -> Result<BatchHeader> {
        let before = out.len();
        std::mem::swap(&mut self.buf, out);
        self.start = before;
        self.clear(base_offset);
        let result = records
            .iter()
            .try_for_each(|r| self.append_record(r))
            .map(|()| self.write_header());
        if result.is_err() {
            self.buf.truncate(before);
        }
        std::mem::swap(&mut self.buf, out);
        self.start = 0;
        self.clear(base_offset);
        result
    }
}

/// Encodes `records` as one batch at `base_offset` (a convenience over [`BatchBuilder`]).
///
/// # Errors
///
/// As [`BatchBuilder::append`].
///
/// # Examples
///
/// ```
/// use logbus::storage::record_batch::{encode_batch, Batch, Record};
///
/// let bytes = encode_batch(7, &[Record::new(1, None, b"x")])?;
/// assert_eq!(Batch::decode(&bytes)?.to_records()?[0].0, 7);
/// # Ok::<(), logbus::Error>(())
/// ```
pub fn encode_batch(base_offset: i64, records: &[Record]) -> Result<Vec<u8>> {
    let mut builder = BatchBuilder::new(base_offset);
    for record in records {
        builder.append_record(record)?;
    }
    Ok(builder.finish().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut b = BatchBuilder::new(100).with_partition_leader_epoch(5);
        b.append(1_700_000_000_000, Some(b"k0"), Some(b"v0"), &[])
            .unwrap();
        b.append(
            1_700_000_000_005,
            None,
            Some(b"v1"),
            &[("h", Some(b"x")), ("n", None)],
        )
        .unwrap();
        b.finish().to_vec()
    }

    #[test]
    fn header_fields_are_kafkas() {
        let bytes = sample();
        let batch = Batch::decode(&bytes).unwrap();
        let h = batch.header();
        assert_eq!(h.base_offset, 100);
        assert_eq!(h.size(), bytes.len() as u64);
        assert_eq!(h.partition_leader_epoch, 5);
        assert_eq!(h.magic, 2);
        assert_eq!(h.last_offset_delta, 1);
        assert_eq!(h.base_timestamp, 1_700_000_000_000);
        assert_eq!(h.max_timestamp, 1_700_000_000_005);
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (-1, -1, -1)
        );
        assert_eq!(h.records_count, 2);
        assert_eq!(h.compression(), Compression::None);
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        let recs = batch.to_records().unwrap();
        assert_eq!(recs[1].0, 101);
        assert_eq!(recs[1].1.timestamp, 1_700_000_000_005);
        assert_eq!(recs[1].1.headers[1].value, None);
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let bytes = sample();
        for cut in 0..bytes.len() {
            assert!(Batch::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            let mut it = BatchIter::new(&bytes[..cut]);
            assert!(it.next().is_none(), "partial batch is end of data");
            assert_eq!(it.valid_bytes(), 0);
        }
    }

    #[test]
    fn every_bit_flip_under_the_crc_is_caught() {
        let bytes = sample();
        for at in ATTRIBUTES_OFFSET..bytes.len() {
            let mut b = bytes.clone();
            b[at] ^= 0x10;
            assert!(
                matches!(
                    Batch::decode(&b),
                    Err(Error::CorruptBatch {
                        reason: Corruption::CrcMismatch { .. },
                        ..
                    })
                ),
                "flip at {at}"
            );
        }
    }

    /// Re-seals a batch whose record bytes were edited, so the CRC passes and the record
    /// rules are what is tested.
    fn reseal(mut b: Vec<u8>) -> Vec<u8> {
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c(&b[ATTRIBUTES_OFFSET..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn strict_record_rules() {
        // Trailing bytes after the declared records.
        let mut b = sample();
        b.push(0);
        let b = reseal(b);
        let batch = Batch::decode(&b).unwrap();
        assert!(matches!(
            batch.validate_records(),
            Err(Error::CorruptBatch {
                reason: Corruption::TrailingBytes { count: 1 },
                ..
            })
        ));

        // A record count larger than the records present.
        let mut b = sample();
        b[57..61].copy_from_slice(&1_000_000i32.to_be_bytes());
        let b = reseal(b);
        assert!(Batch::decode(&b).unwrap().validate_records().is_err());

        // Negative count.
        let mut b = sample();
        b[57..61].copy_from_slice(&(-3i32).to_be_bytes());
        let b = reseal(b);
        assert!(matches!(
            Batch::decode(&b).unwrap().records(),
            Err(Error::CorruptBatch {
                reason: Corruption::NegativeLength { .. },
                ..
            })
        ));

        // A record length one larger than its fields: the record would swallow the next one.
        let mut b = sample();
        b[HEADER_SIZE] += 2; // zig-zag: +1
        let b = reseal(b);
        assert!(Batch::decode(&b).unwrap().validate_records().is_err());

        // A hostile key length.
        let mut b = BatchBuilder::new(0)
            .with_record(0, Some(b"k"), None)
            .unwrap()
            .finish()
            .to_vec();
        // record: length, attrs, tsDelta, offDelta, keyLen(at HEADER_SIZE + 4)
        b[HEADER_SIZE + 4] = 0xfe; // keyLen varint continues...
        b.insert(HEADER_SIZE + 5, 0xff);
        b.insert(HEADER_SIZE + 6, 0x0f);
        let b = reseal(b);
        assert!(Batch::decode(&b).unwrap().validate_records().is_err());
    }

    #[test]
    fn compressed_batches_are_typed_errors() {
        let mut b = sample();
        b[22] |= 2; // snappy
        let b = reseal(b);
        let batch = Batch::decode(&b).unwrap();
        match batch.records() {
            Err(Error::UnsupportedCompression {
                codec, position, ..
            }) => {
                assert_eq!(codec, "snappy");
                assert_eq!(position, 0);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn zero_tail_is_corrupt_and_positions_are_absolute() {
        let mut log = sample();
        let first = log.len();
        log.extend_from_slice(&[0u8; 40]);
        let mut it = BatchIter::with_base(&log, 1000);
        assert!(it.next().unwrap().is_ok());
        match it.next() {
            Some(Err(Error::CorruptBatch {
                position,
                reason: Corruption::BatchLengthTooSmall { length: 0 },
            })) => assert_eq!(position, 1000 + first as u64 + 8),
            other => panic!("unexpected {other:?}"),
        }
        assert!(it.next().is_none());
        assert_eq!(it.valid_bytes(), 1000 + first as u64);
    }
}
