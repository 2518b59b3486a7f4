//! Kafka's four codecs, each with the framing Kafka's Java client writes, so that Kafka, its
//! clients and logbus read each other's batches.
//!
//! With a codec set in attribute bits 0–2, everything after `recordsCount` is one compressed
//! stream of the records (the CRC covers the compressed bytes):
//!
//! | id | codec  | stream                                                                 |
//! |----|--------|------------------------------------------------------------------------|
//! | 1  | gzip   | a gzip stream (RFC 1952), as `GZIPOutputStream`                        |
//! | 2  | snappy | xerial framing, as `SnappyOutputStream`: the 16-byte header (magic `82 'SNAPPY' 00`, version 1, compatible 1) then blocks of at most 32 KiB, each a big-endian i32 length and a raw snappy block. Read: xerial-framed, or one raw snappy block (what some clients write) |
//! | 3  | lz4    | the LZ4 frame format (`KafkaLZ4BlockOutputStream` since magic v1): 64 KiB independent blocks, no checksums |
//! | 4  | zstd   | a zstd frame                                                           |
//!
//! Decompression is bounded: a batch's records never decompress to more than
//! [`MAX_DECOMPRESSED_BATCH`] bytes, nor to more than `recordsCount` records could take
//! ([`decompressed_limit`]); past that the stream is a decompression bomb (or a batch beyond
//! logbus's limits) and reading it is [`Corruption::DecompressedTooLarge`]. A stream that
//! does not decode is [`Corruption::BadCompressedData`]. Neither panics, and nothing is
//! allocated beyond the limit.
//!
//! A codec whose cargo feature is off is [`Error::UnsupportedCompression`], as are codec
//! ids 5–7.

use super::Compression;
use crate::error::{Corruption, Error, Result};

/// The most bytes the records of one compressed batch may decompress to: 64 MiB, the
/// largest `max_message_bytes` logbus accepts for a record (and four times the largest
/// request Kafka's producer sends by default). A batch whose records decompress to more
/// is refused as [`Corruption::DecompressedTooLarge`].
pub const MAX_DECOMPRESSED_BATCH: usize = 64 << 20;

/// The most bytes a batch of `records_count` records may decompress to:
/// [`MAX_DECOMPRESSED_BATCH`], or 0 for a batch declaring no record.
pub fn decompressed_limit(records_count: i32) -> usize {
    if records_count <= 0 {
        0
    } else {
        MAX_DECOMPRESSED_BATCH
    }
}

/// The snappy block size of Java's `SnappyOutputStream` (xerial), which Kafka uses.
#[cfg(feature = "snappy")]
const XERIAL_BLOCK: usize = 32 << 10;
/// xerial's stream header: magic, version 1, compatible version 1.
#[cfg(feature = "snappy")]
const XERIAL_HEADER: [u8; 16] = [
    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
];

/// Whether this build can read and write `codec`.
pub fn codec_available(codec: Compression) -> bool {
    match codec {
        Compression::None => true,
        Compression::Gzip => cfg!(feature = "gzip"),
        Compression::Snappy => cfg!(feature = "snappy"),
        Compression::Lz4 => cfg!(feature = "lz4"),
        Compression::Zstd => cfg!(feature = "zstd"),
        Compression::Unknown(_) => false,
    }
}

fn unsupported(codec: Compression) -> Error {
    Error::UnsupportedCompression {
        file: None,
        position: 0,
        codec: codec.to_string(),
    }
}

/// A stream error at position 0 (the caller moves it to the batch's records).
#[cfg(any(
    feature = "gzip",
    feature = "snappy",
    feature = "lz4",
    feature = "zstd"
))]
fn bad(codec: &'static str, detail: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        file: None,
        position: 0,
        reason: Corruption::BadCompressedData {
            codec,
            detail: detail.to_string(),
        },
    }
}

fn too_large(codec: &'static str, limit: usize) -> Error {
    Error::Corrupt {
        file: None,
        position: 0,
        reason: Corruption::DecompressedTooLarge {
            codec,
            limit: limit as u64,
        },
    }
}

impl Compression {
    /// The codec's name, as Kafka's `compression.type` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::Unknown(_) => "unknown",
        }
    }

    /// The codec's id (attribute bits 0–2).
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
            Compression::Unknown(id) => id & 0x7,
        }
    }

    /// The codec named as Kafka's `compression.type` names it (`none`, `gzip`, `snappy`,
    /// `lz4`, `zstd`; `uncompressed` is `none`).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "none" | "uncompressed" => Compression::None,
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => return None,
        })
    }
}

/// Compresses `input` with `codec`, appending the stream to `out`.
///
/// # Errors
///
/// [`Error::UnsupportedCompression`] for a codec this build lacks (or `Unknown`).
pub(crate) fn compress(codec: Compression, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
    match codec {
        Compression::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        #[cfg(feature = "gzip")]
        Compression::Gzip => {
            use std::io::Write;
            // Level 6, zlib's and Java's `Deflater` default, as Kafka's gzip.
            let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::new(6));
            e.write_all(input).map_err(|e| bad("gzip", e))?;
            e.finish().map_err(|e| bad("gzip", e))?;
            Ok(())
        }
        #[cfg(feature = "snappy")]
        Compression::Snappy => {
            let mut enc = snap::raw::Encoder::new();
            out.extend_from_slice(&XERIAL_HEADER);
            for block in input.chunks(XERIAL_BLOCK) {
                let at = out.len();
                out.extend_from_slice(&[0; 4]);
                let max = snap::raw::max_compress_len(block.len());
                out.resize(at + 4 + max, 0);
                let n = enc
                    .compress(block, &mut out[at + 4..])
                    .map_err(|e| bad("snappy", e))?;
                out.truncate(at + 4 + n);
                out[at..at + 4].copy_from_slice(&(n as i32).to_be_bytes());
            }
            Ok(())
        }
        #[cfg(feature = "lz4")]
        Compression::Lz4 => {
            use std::io::Write;
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            e.write_all(input).map_err(|e| bad("lz4", e))?;
            e.finish().map_err(|e| bad("lz4", e))?;
            Ok(())
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => {
            // Level 3, zstd's default and Kafka's.
            ZSTD_CCTX.with(|c| {
                let mut c = c.borrow_mut();
                let start = out.len();
                out.resize(start + zstd::zstd_safe::compress_bound(input.len()), 0);
                let n = c
                    .compress2(&mut out[start..], input)
                    .map_err(|code| bad("zstd", zstd::zstd_safe::get_error_name(code)))?;
                out.truncate(start + n);
                Ok(())
            })
        }
        #[allow(unreachable_patterns)]
        other => Err(unsupported(other)),
    }
}

#[cfg(feature = "zstd")]
thread_local! {
    /// A compression context per thread: making one costs more than compressing a small batch.
    static ZSTD_CCTX: std::cell::RefCell<zstd::zstd_safe::CCtx<'static>> = std::cell::RefCell::new({
        let mut c = zstd::zstd_safe::CCtx::create();
        let _ = c.set_parameter(zstd::zstd_safe::CParameter::CompressionLevel(3));
        c
    });
    /// A decompression context per thread, for the same reason.
    static ZSTD_DCTX: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> =
        std::cell::RefCell::new(zstd::zstd_safe::DCtx::create());
}

/// Reads `r` to its end into `out`, refusing more than `limit` bytes.
#[cfg(any(feature = "gzip", feature = "lz4"))]
fn read_bounded(
    codec: &'static str,
    r: impl std::io::Read,
    compressed: usize,
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<()> {
    use std::io::Read;
    let start = out.len();
    // Room for a typical ratio up front: growing by doubling from nothing copies the
    // records several times over.
    out.reserve(compressed.saturating_mul(4).min(limit.saturating_add(1)));
    r.take(limit as u64 + 1)
        .read_to_end(out)
        .map_err(|e| bad(codec, e))?;
    if out.len() - start > limit {
        out.truncate(start);
        return Err(too_large(codec, limit));
    }
    Ok(())
}

/// Decompresses the `codec` stream `input` into `out` (cleared first), refusing to produce
/// more than `limit` bytes.
///
/// # Errors
///
/// [`Error::UnsupportedCompression`] for a codec this build lacks; [`Error::Corrupt`] at
/// position 0 with [`Corruption::BadCompressedData`] or
/// [`Corruption::DecompressedTooLarge`].
pub(crate) fn decompress(
    codec: Compression,
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<()> {
    out.clear();
    match codec {
        Compression::None => {
            if input.len() > limit {
                return Err(too_large("none", limit));
            }
            out.extend_from_slice(input);
            Ok(())
        }
        #[cfg(feature = "gzip")]
        Compression::Gzip => {
            // Several members are one stream (as `GZIPInputStream` reads them).
            let d = flate2::read::MultiGzDecoder::new(input);
            read_bounded("gzip", d, input.len(), out, limit)
        }
        #[cfg(feature = "snappy")]
        Compression::Snappy => {
            let mut dec = snap::raw::Decoder::new();
            let mut block = |b: &[u8], out: &mut Vec<u8>| -> Result<()> {
                let n = snap::raw::decompress_len(b).map_err(|e| bad("snappy", e))?;
                if n > limit - out.len() {
                    return Err(too_large("snappy", limit));
                }
                let at = out.len();
                out.resize(at + n, 0);
                let got = dec
                    .decompress(b, &mut out[at..])
                    .map_err(|e| bad("snappy", e))?;
                out.truncate(at + got);
                Ok(())
            };
            if input.len() >= 8 && input[..8] == XERIAL_HEADER[..8] {
                // xerial: the 16-byte header, then length-prefixed blocks.
                if input.len() < 16 {
                    return Err(bad("snappy", "xerial header cut short"));
                }
                let mut rest = &input[16..];
                while !rest.is_empty() {
                    if rest.len() < 4 {
                        return Err(bad("snappy", "xerial block length cut short"));
                    }
                    let len = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
                    let Ok(len) = usize::try_from(len) else {
                        return Err(bad("snappy", format!("negative xerial block length {len}")));
                    };
                    if len > rest.len() - 4 {
                        return Err(bad(
                            "snappy",
                            format!("xerial block of {len} bytes, {} remain", rest.len() - 4),
                        ));
                    }
                    block(&rest[4..4 + len], out)?;
                    rest = &rest[4 + len..];
                }
                Ok(())
            } else {
                block(input, out)
            }
        }
        #[cfg(feature = "lz4")]
        Compression::Lz4 => {
            let d = lz4_flex::frame::FrameDecoder::new(input);
            read_bounded("lz4", d, input.len(), out, limit)
        }
        #[cfg(feature = "zstd")]
        Compression::Zstd => ZSTD_DCTX.with(|d| {
            use zstd::zstd_safe::{InBuffer, OutBuffer};
            let mut d = d.borrow_mut();
            let _ = d.reset(zstd::zstd_safe::ResetDirective::SessionOnly);
            let mut src = InBuffer::around(input);
            // Grow the output as the stream needs, never past `limit` + 1 (to tell a
            // stream of exactly `limit` bytes from a longer one).
            let cap = limit.saturating_add(1);
            out.reserve_exact(input.len().saturating_mul(4).max(64).min(cap));
            loop {
                if out.len() == out.capacity() {
                    if out.len() >= cap {
                        out.clear();
                        return Err(too_large("zstd", limit));
                    }
                    let more = out.capacity().max(64).min(cap - out.len());
                    out.reserve_exact(more);
                }
                let pos = out.len();
                let hint = {
                    let mut dst = OutBuffer::around_pos(out, pos);
                    d.decompress_stream(&mut dst, &mut src)
                        .map_err(|code| bad("zstd", zstd::zstd_safe::get_error_name(code)))?
                };
                if out.len() > limit {
                    out.clear();
                    return Err(too_large("zstd", limit));
                }
                if hint == 0 {
                    // A frame ended: more frames may follow (zstd concatenates them).
                    if src.pos() == input.len() {
                        return Ok(());
                    }
                } else if src.pos() == input.len() && out.len() < out.capacity() {
                    return Err(bad("zstd", "the stream is cut short"));
                }
            }
        }),
        #[allow(unreachable_patterns)]
        other => Err(unsupported(other)),
    }
}
