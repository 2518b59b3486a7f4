//! The fixed 61-byte batch header: its fields, attributes and CRC.

use std::fmt;

use super::field;
use super::{HEADER_SIZE, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH};
use crate::error::{Corruption, Error, Result};
use crate::storage::file_names::MAX_OFFSET;

/// The compression codec named by attribute bits 0–2 (framings and costs: the
/// [module docs](super#compression)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Uncompressed.
    #[default]
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
    /// Offset of the first record (stored as a signed 64-bit integer: [`BatchHeader::parse`]
    /// refuses a negative one, so a parsed header's lies in 0 ..= 2^63 − 1).
    pub base_offset: u64,
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

pub(super) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
pub(super) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(super) fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Parses the header at the start of `buf` and checks `batchLength` and the magic byte
    /// (not the CRC: see [`Batch::decode`](super::Batch::decode)).
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] (positions from the start of `buf`) with
    /// [`Corruption::Truncated`] when `buf` is shorter than 61 bytes,
    /// [`Corruption::NegativeOffset`], [`Corruption::BatchLengthTooSmall`] or
    /// [`Corruption::BadMagic`].
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
        let stored_base = be_i64(buf, field::BASE_OFFSET);
        let Ok(base_offset) = u64::try_from(stored_base) else {
            return Err(corrupt(
                field::BASE_OFFSET,
                Corruption::NegativeOffset {
                    base_offset: stored_base,
                },
            ));
        };
        let header = BatchHeader {
            base_offset,
            batch_length: be_i32(buf, field::BATCH_LENGTH),
            partition_leader_epoch: be_i32(buf, field::PARTITION_LEADER_EPOCH),
            magic: buf[field::MAGIC] as i8,
            crc: be_i32(buf, field::CRC) as u32,
            attributes: be_i16(buf, field::ATTRIBUTES),
            last_offset_delta: be_i32(buf, field::LAST_OFFSET_DELTA),
            base_timestamp: be_i64(buf, field::BASE_TIMESTAMP),
            max_timestamp: be_i64(buf, field::MAX_TIMESTAMP),
            producer_id: be_i64(buf, field::PRODUCER_ID),
            producer_epoch: be_i16(buf, field::PRODUCER_EPOCH),
            base_sequence: be_i32(buf, field::BASE_SEQUENCE),
            records_count: be_i32(buf, field::RECORDS_COUNT),
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

    /// Offset of the last record (`base_offset + last_offset_delta`, saturating at 0 and at
    /// [`MAX_OFFSET`], the largest offset Kafka's signed 64-bit field holds).
    pub fn last_offset(&self) -> u64 {
        self.base_offset
            .saturating_add_signed(i64::from(self.last_offset_delta))
            .min(MAX_OFFSET)
    }

    /// The offset after the batch (saturating at [`MAX_OFFSET`]).
    pub fn next_offset(&self) -> u64 {
        self.last_offset().saturating_add(1).min(MAX_OFFSET)
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

pub(super) fn corrupt(position: usize, reason: Corruption) -> Error {
    Error::Corrupt {
        file: None,
        position: position as u64,
        reason,
    }
}

/// CRC-32C of `bytes` (SIMD-accelerated where the CPU has it).
pub fn crc32c(bytes: &[u8]) -> u32 {
    // CRC-32/ISCSI is CRC-32C; its value fits 32 bits.
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}
