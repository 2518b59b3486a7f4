//! Writing batches: [`BatchBuilder`] and [`encode_batch`].

use super::compression::{codec_available, compress, MAX_DECOMPRESSED_BATCH};
use super::field;
use super::header::crc32c;
use super::{
    BatchHeader, BatchRecord, Compression, HEADER_SIZE, LOG_OVERHEAD, MAGIC, NO_TIMESTAMP,
};
use crate::error::{Error, Result};
use crate::storage::varint::{put_varint, put_varlong, varint_size, varlong_size};

/// Builds one batch, record by record, into a reusable buffer: uncompressed, or compressed
/// with the codec set by [`set_compression`](BatchBuilder::set_compression).
///
/// Records are encoded as they are appended; a compressed batch's records are compressed
/// once, as one stream, by [`finish`](BatchBuilder::finish) (Kafka's layout: everything
/// after `recordsCount`). [`size`](BatchBuilder::size) is the uncompressed size, an upper
/// bound of the finished batch's: a compressed stream that would not be smaller than the
/// records is not used, and the batch is written uncompressed (codec bits 0); so is a batch
/// whose records exceed [`MAX_DECOMPRESSED_BATCH`], which no reader would decompress.
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
    base_offset: u64,
    partition_leader_epoch: i32,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    compression: Compression,
    /// The finished batch when compressed: header and stream (the records stay in `buf`,
    /// so `finish` may be called again and records appended after it).
    sealed: Vec<u8>,
    /// The size of the batch the last `finish` returned.
    finished: usize,
}

impl BatchBuilder {
    /// An empty batch starting at `base_offset`.
    pub fn new(base_offset: u64) -> Self {
        let mut b = BatchBuilder {
            buf: Vec::with_capacity(HEADER_SIZE + 64),
            start: 0,
            base_offset,
            partition_leader_epoch: 0,
            count: 0,
            base_timestamp: NO_TIMESTAMP,
            max_timestamp: NO_TIMESTAMP,
            compression: Compression::None,
            sealed: Vec::new(),
            finished: 0,
        };
        b.clear(base_offset);
        b
    }

    /// Compresses the batches [`finish`](BatchBuilder::finish) returns from now on with
    /// `codec` ([`Compression::None`] by default).
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedCompression`] for [`Compression::Unknown`] or a codec whose cargo
    /// feature is off; the builder is then unchanged.
    pub fn set_compression(&mut self, codec: Compression) -> Result<()> {
        if !codec_available(codec) {
            return Err(Error::UnsupportedCompression {
                file: None,
                position: 0,
                codec: codec.to_string(),
            });
        }
        self.compression = codec;
        Ok(())
    }

    /// [`set_compression`](BatchBuilder::set_compression), chainable.
    ///
    /// # Errors
    ///
    /// As [`set_compression`](BatchBuilder::set_compression).
    pub fn with_compression(mut self, codec: Compression) -> Result<Self> {
        self.set_compression(codec)?;
        Ok(self)
    }

    /// The codec batches are compressed with.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// The size of the batch the last [`finish`](BatchBuilder::finish) returned (compressed,
    /// when it was).
    pub fn finished_size(&self) -> usize {
        self.finished
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
    pub fn clear(&mut self, base_offset: u64) {
        self.buf.truncate(self.start);
        self.buf.resize(self.start + HEADER_SIZE, 0);
        self.base_offset = base_offset;
        self.count = 0;
        self.base_timestamp = NO_TIMESTAMP;
        self.max_timestamp = NO_TIMESTAMP;
    }

    /// Changes the base offset (outside the CRC, as a leader assigning offsets does).
    pub fn set_base_offset(&mut self, base_offset: u64) {
        self.base_offset = base_offset;
    }

    /// The base offset.
    pub fn base_offset(&self) -> u64 {
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

    /// Bytes the finished batch will occupy uncompressed (at most what it occupies).
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

    /// Appends an owned [`BatchRecord`].
    ///
    /// # Errors
    ///
    /// As [`append`](BatchBuilder::append).
    pub fn append_record(&mut self, record: &BatchRecord) -> Result<()> {
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
    ///
    /// With a codec set, the records are compressed here, as one stream (each call
    /// compresses them again: call it once per batch).
    pub fn finish(&mut self) -> &[u8] {
        if self.compresses() {
            let mut sealed = std::mem::take(&mut self.sealed);
            sealed.clear();
            sealed.extend_from_slice(&self.buf[self.start..self.start + HEADER_SIZE]);
            let records = &self.buf[self.start + HEADER_SIZE..];
            if compress(self.compression, records, &mut sealed).is_ok()
                && sealed.len() < self.size()
            {
                let attributes = i16::from(self.compression.id());
                self.header_into(&mut sealed, attributes);
                self.sealed = sealed;
                self.finished = self.sealed.len();
                return &self.sealed;
            }
            self.sealed = sealed;
        }
        self.write_header(false);
        self.finished = self.size();
        &self.buf[self.start..]
    }

    /// Whether `finish` compresses this batch: a codec is set, and the records fit what a
    /// reader decompresses ([`MAX_DECOMPRESSED_BATCH`]: a batch past it, possible only with
    /// one huge record, is written uncompressed so that it stays readable).
    fn compresses(&self) -> bool {
        self.compression != Compression::None
            && self.count > 0
            && self.size() - HEADER_SIZE <= MAX_DECOMPRESSED_BATCH
    }

    /// Writes the header and the CRC (one pass over the contiguous batch bytes) and returns
    /// the header, built from what the builder knows rather than parsed back. A codec set
    /// compresses the records in place first (for [`encode_onto`](BatchBuilder::encode_onto),
    /// whose buffer holds nothing else after the batch).
    fn write_header(&mut self, compress_in_place: bool) -> BatchHeader {
        let mut attributes = 0i16;
        if compress_in_place && self.compresses() {
            let at = self.start + HEADER_SIZE;
            let mut stream = std::mem::take(&mut self.sealed);
            stream.clear();
            if compress(self.compression, &self.buf[at..], &mut stream).is_ok()
                && stream.len() < self.buf.len() - at
            {
                self.buf.truncate(at);
                self.buf.extend_from_slice(&stream);
                attributes = i16::from(self.compression.id());
            }
            self.sealed = stream;
        }
        let start = self.start;
        let mut buf = std::mem::take(&mut self.buf);
        let header = self.header_into(&mut buf[start..], attributes);
        self.buf = buf;
        header
    }

    /// Writes the header, with `attributes`, and the CRC into `b` (a whole batch).
    fn header_into(&self, b: &mut [u8], attributes: i16) -> BatchHeader {
        let batch_length = (b.len() - LOG_OVERHEAD) as i32;
        let last_offset_delta = (self.count - 1).max(0);
        put(b, field::BASE_OFFSET, &self.base_offset.to_be_bytes());
        put(b, field::BATCH_LENGTH, &batch_length.to_be_bytes());
        put(
            b,
            field::PARTITION_LEADER_EPOCH,
            &self.partition_leader_epoch.to_be_bytes(),
        );
        b[field::MAGIC] = MAGIC as u8;
        put(b, field::ATTRIBUTES, &attributes.to_be_bytes()); // codec, CreateTime
        put(
            b,
            field::LAST_OFFSET_DELTA,
            &last_offset_delta.to_be_bytes(),
        );
        put(b, field::BASE_TIMESTAMP, &self.base_timestamp.to_be_bytes());
        put(b, field::MAX_TIMESTAMP, &self.max_timestamp.to_be_bytes());
        put(b, field::PRODUCER_ID, &(-1i64).to_be_bytes()); // producer id
        put(b, field::PRODUCER_EPOCH, &(-1i16).to_be_bytes()); // producer epoch
        put(b, field::BASE_SEQUENCE, &(-1i32).to_be_bytes()); // base sequence
        put(b, field::RECORDS_COUNT, &self.count.to_be_bytes());
        let crc = crc32c(&b[field::ATTRIBUTES..]);
        put(b, field::CRC, &crc.to_be_bytes());
        BatchHeader {
            base_offset: self.base_offset,
            batch_length,
            partition_leader_epoch: self.partition_leader_epoch,
            magic: MAGIC,
            crc,
            attributes,
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
        base_offset: u64,
        records: &[BatchRecord],
    ) -> Result<BatchHeader> {
        let before = out.len();
        std::mem::swap(&mut self.buf, out);
        self.start = before;
        self.clear(base_offset);
        let result = records
            .iter()
            .try_for_each(|r| self.append_record(r))
            .map(|()| self.write_header(true));
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
/// use logbus::storage::record_batch::{encode_batch, Batch, BatchRecord};
///
/// let bytes = encode_batch(7, &[BatchRecord::new(1, None, b"x")])?;
/// assert_eq!(Batch::decode(&bytes)?.to_records()?[0].0, 7);
/// # Ok::<(), logbus::Error>(())
/// ```
pub fn encode_batch(base_offset: u64, records: &[BatchRecord]) -> Result<Vec<u8>> {
    let mut builder = BatchBuilder::new(base_offset);
    for record in records {
        builder.append_record(record)?;
    }
    Ok(builder.finish().to_vec())
}

/// Writes a field's big-endian bytes at its offset from [`field`].
fn put<const N: usize>(batch: &mut [u8], at: usize, bytes: &[u8; N]) {
    batch[at..at + N].copy_from_slice(bytes);
}
