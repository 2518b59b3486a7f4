//! Kafka's RecordBatch v2 (magic 2): the unit written to a `.log` file.
//!
//! A batch is a 61-byte header followed by its records; every field is big-endian, and the
//! CRC-32C (Castagnoli, computed with the CPU's instruction where there is one) covers the
//! bytes from `attributes` to the end of the batch. The layout, field by field, is the
//! `field` table below (Kafka's message format v2); the reading rules are Kafka's own (`DefaultRecordBatch`,
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
//! logbus writes batches with producer id, epoch and base sequence -1 (no idempotence yet)
//! and `CreateTime` timestamps, uncompressed or compressed with any of Kafka's four codecs
//! ([`BatchBuilder::set_compression`]; the framing of each is Kafka's, see
//! [`compression`](self#compression)). A compressed batch's records are one compressed stream
//! after `recordsCount`, covered by the CRC; [`Batch::records`] decompresses it once into a
//! buffer the caller reuses (an uncompressed batch's records are read in place), bounded by
//! [`MAX_DECOMPRESSED_BATCH`]. Codec ids 5–7, or a codec whose cargo feature is off, are
//! [`Error::UnsupportedCompression`](crate::Error::UnsupportedCompression); the header and
//! CRC can still be read and checked.
//!
//! # Compression
//!
//! | id | codec  | stream, as Kafka's Java client writes it | cost (write; read) |
//! |----|--------|------------------------------------------|--------------------|
//! | 0  | none   | the records as they are                  | none; zero-copy reads |
//! | 1  | gzip   | a gzip stream (level 6)                  | slowest to write, slow to read; good ratio |
//! | 2  | snappy | xerial framing: 16-byte header (`82 'SNAPPY' 00`, version 1, compatible 1), then 32 KiB blocks, each an i32 length and a raw snappy block; a raw snappy block is read too | fast both ways; modest ratio |
//! | 3  | lz4    | the LZ4 frame format, 64 KiB independent blocks | fastest both ways; modest ratio |
//! | 4  | zstd   | a zstd frame (level 3)                   | fast to read, moderate to write; best ratio |
//!
//! A batch whose compressed stream would be larger than its records (incompressible data)
//! is written uncompressed instead: any reader reads it, and no batch outgrows the limit its
//! records were cut to.
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

mod builder;
pub(crate) mod compression;
mod decoder;
mod header;
#[cfg(test)]
mod tests;

pub use builder::{encode_batch, BatchBuilder};
pub use compression::{codec_available, decompressed_limit, MAX_DECOMPRESSED_BATCH};
pub use decoder::{
    next_batch_extent, Batch, BatchIter, BatchRecord, BatchRecords, Extent, Header, HeaderView,
    RecordView,
};
pub use header::{crc32c, BatchHeader, Compression, TimestampType};

/// Where each header field starts, in bytes from the start of the batch: the one table the
/// parser ([`BatchHeader::parse`]) and the builder ([`BatchBuilder::finish`]) both read. Each
/// field starts where the one before it ends (sizes in the comments, as in Kafka's `DefaultRecordBatch`).
pub(crate) mod field {
    /// `baseOffset`, i64.
    pub const BASE_OFFSET: usize = 0;
    /// `batchLength`, i32: the bytes after it.
    pub const BATCH_LENGTH: usize = BASE_OFFSET + 8;
    /// `partitionLeaderEpoch`, i32.
    pub const PARTITION_LEADER_EPOCH: usize = BATCH_LENGTH + 4;
    /// `magic`, i8.
    pub const MAGIC: usize = PARTITION_LEADER_EPOCH + 4;
    /// `crc`, u32: CRC-32C of the bytes from `attributes` to the end of the batch.
    pub const CRC: usize = MAGIC + 1;
    /// `attributes`, i16: where the CRC's coverage starts.
    pub const ATTRIBUTES: usize = CRC + 4;
    /// `lastOffsetDelta`, i32.
    pub const LAST_OFFSET_DELTA: usize = ATTRIBUTES + 2;
    /// `baseTimestamp`, i64.
    pub const BASE_TIMESTAMP: usize = LAST_OFFSET_DELTA + 4;
    /// `maxTimestamp`, i64.
    pub const MAX_TIMESTAMP: usize = BASE_TIMESTAMP + 8;
    /// `producerId`, i64.
    pub const PRODUCER_ID: usize = MAX_TIMESTAMP + 8;
    /// `producerEpoch`, i16.
    pub const PRODUCER_EPOCH: usize = PRODUCER_ID + 8;
    /// `baseSequence`, i32.
    pub const BASE_SEQUENCE: usize = PRODUCER_EPOCH + 2;
    /// `recordsCount`, i32.
    pub const RECORDS_COUNT: usize = BASE_SEQUENCE + 4;
    /// The end of the header: the first record starts here.
    pub const END: usize = RECORDS_COUNT + 4;
}

/// The magic byte of record format v2.
pub const MAGIC: i8 = 2;
/// Bytes before `batchLength` counts: `baseOffset` (8) and `batchLength` (4).
pub const LOG_OVERHEAD: usize = field::PARTITION_LEADER_EPOCH;
/// Size of the batch header; the records start here.
pub const HEADER_SIZE: usize = field::END;
/// A record's encoding beyond its key, value and header bytes, at most: length, attributes,
/// timestamp delta, offset delta, key and value lengths, header count (varints at their
/// widest). Each header's two lengths are not included: count them with the header.
pub const MAX_RECORD_OVERHEAD: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;
/// The smallest valid `batchLength` (a batch with no records).
pub const MIN_BATCH_LENGTH: i32 = (HEADER_SIZE - LOG_OVERHEAD) as i32;
/// Bytes up to and including the magic byte: what a reader of a file looks at first.
pub const HEADER_SIZE_UP_TO_MAGIC: usize = field::CRC;
/// Below this `batchLength` a batch in a file is corrupt rather than partial
/// (Kafka's `FileLogInputStream`).
pub const CORRUPT_BELOW_BATCH_LENGTH: i32 = 14;
/// The timestamp of a record without one.
pub const NO_TIMESTAMP: i64 = -1;

// The table is Kafka's v2 header: 61 bytes, the CRC right after the magic byte.
const _: () = assert!(HEADER_SIZE == 61 && LOG_OVERHEAD == 12 && field::CRC == 17);
