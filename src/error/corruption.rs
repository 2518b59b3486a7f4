//! [`Corruption`]: what was wrong with a record batch or an index file.

use std::fmt;

/// What was wrong with a record batch or an index file (the `reason` of
/// [`Error::Corrupt`](super::Error::Corrupt) and
/// [`Error::Corrupt`](super::Error::Corrupt)).
///
/// Each variant carries the values read, so a message can say what was found and what is
/// valid. The rules are Kafka's (`DefaultRecordBatch`, `DefaultRecord`, `LogSegment.recover`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// Fewer bytes remain than a field or a declared length needs.
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// `batchLength` is below the size of a batch header.
    BatchLengthTooSmall {
        /// The batch length read.
        length: i32,
    },
    /// The magic byte is not 2 (logbus reads record format v2 only).
    BadMagic {
        /// The magic byte read.
        magic: i8,
    },
    /// The stored CRC-32C does not match the bytes it covers.
    CrcMismatch {
        /// The CRC stored in the batch.
        stored: u32,
        /// The CRC computed over the batch's bytes.
        computed: u32,
    },
    /// A varint ran past its maximum length (5 bytes for int32, 10 for int64).
    VarintTooLong {
        /// The maximum length in bytes.
        max_bytes: u8,
    },
    /// A count or length that must be non-negative (or -1 for null) is not.
    NegativeLength {
        /// The field.
        what: &'static str,
        /// The value read.
        value: i64,
    },
    /// A record did not consume exactly its declared `length`.
    RecordLengthMismatch {
        /// The declared length.
        declared: u64,
        /// The bytes its fields took.
        consumed: u64,
    },
    /// Bytes remain in a batch after its `recordsCount` records.
    TrailingBytes {
        /// How many bytes remain.
        count: u64,
    },
    /// A header key is not valid UTF-8.
    HeaderKeyNotUtf8,
    /// A batch's `baseOffset` is negative (Kafka's offsets are signed 64-bit, and only
    /// 0 ..= 2^63 − 1 is a valid offset).
    NegativeOffset {
        /// The `baseOffset` read.
        base_offset: i64,
    },
    /// A batch's offsets are not valid where it sits in the log.
    BadOffset {
        /// The batch's base offset.
        base_offset: u64,
        /// The batch's last offset.
        last_offset: u64,
        /// The rule broken, with the valid range.
        rule: String,
    },
    /// A record's offset delta lies outside its batch or does not increase.
    BadOffsetDelta {
        /// The record's offset delta.
        delta: i64,
        /// The smallest valid delta here (one past the previous record's).
        min: i64,
        /// The batch's `lastOffsetDelta`.
        last_offset_delta: i32,
    },
    /// A batch larger than the limit that bounds reads, whose bytes do not hold a valid
    /// batch (its CRC, computed without holding it in memory, does not match).
    BatchTooLarge {
        /// The size its length field claims.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// A compressed batch's records do not decompress: the codec's stream is corrupt or
    /// truncated (the CRC matched, so the bytes are as written: the writer wrote them so).
    BadCompressedData {
        /// The codec (`gzip`, `snappy`, `lz4`, `zstd`).
        codec: &'static str,
        /// What the decoder reported.
        detail: String,
    },
    /// A compressed batch's records decompress to more than the batch may hold (a
    /// decompression bomb, or a batch beyond logbus's limit): see
    /// [`MAX_DECOMPRESSED_BATCH`](crate::storage::record_batch::MAX_DECOMPRESSED_BATCH).
    DecompressedTooLarge {
        /// The codec.
        codec: &'static str,
        /// The limit for this batch, in bytes.
        limit: u64,
    },
    /// An index entry disagrees with the log or with the index's own ordering.
    BadIndexEntry {
        /// The entry's number in the index (0-based).
        entry: u64,
        /// What was wrong.
        rule: String,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::Truncated {
                what,
                needed,
                available,
            } => write!(f, "{what} needs {needed} bytes but only {available} remain"),
            Corruption::BatchLengthTooSmall { length } => write!(
                f,
                "batchLength {length} is below 49 (a batch is at least its 61-byte header)"
            ),
            Corruption::BadMagic { magic } => {
                write!(f, "magic byte {magic}, expected 2 (record format v2)")
            }
            Corruption::CrcMismatch { stored, computed } => write!(
                f,
                "CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            Corruption::VarintTooLong { max_bytes } => {
                write!(f, "varint longer than its maximum of {max_bytes} bytes")
            }
            Corruption::NegativeLength { what, value } => write!(
                f,
                "{what} is {value}; it must be >= 0 (or -1 where null is allowed)"
            ),
            Corruption::RecordLengthMismatch { declared, consumed } => write!(
                f,
                "record declares length {declared} but its fields take {consumed} bytes"
            ),
            Corruption::TrailingBytes { count } => write!(
                f,
                "{count} bytes remain after the declared records (incorrect declared batch size)"
            ),
            Corruption::HeaderKeyNotUtf8 => write!(f, "a header key is not valid UTF-8"),
            Corruption::BadCompressedData { codec, detail } => {
                write!(
                    f,
                    "the {codec} stream of the batch's records is corrupt: {detail}"
                )
            }
            Corruption::DecompressedTooLarge { codec, limit } => write!(
                f,
                "the {codec} stream of the batch's records decompresses to more than {limit} \
                 bytes, the most this batch may hold"
            ),
            Corruption::BadOffsetDelta {
                delta,
                min,
                last_offset_delta,
            } => write!(
                f,
                "record offset delta {delta} is out of place: record deltas increase strictly \
                 within [0, lastOffsetDelta = {last_offset_delta}], so this one must lie in \
                 [{min}, {last_offset_delta}]"
            ),
            Corruption::BatchTooLarge { size, max } => write!(
                f,
                "a batch of {size} bytes, over the {max}-byte limit, does not hold a valid batch \
                 (CRC-32C mismatch)"
            ),
            Corruption::NegativeOffset { base_offset } => write!(
                f,
                "baseOffset {base_offset} is negative; offsets lie in 0 ..= {}",
                i64::MAX
            ),
            Corruption::BadOffset {
                base_offset,
                last_offset,
                rule,
            } => write!(
                f,
                "batch with offsets [{base_offset}, {last_offset}] is out of place: {rule}"
            ),
            Corruption::BadIndexEntry { entry, rule } => write!(f, "index entry {entry}: {rule}"),
        }
    }
}
