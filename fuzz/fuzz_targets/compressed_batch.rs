//! The decompressing decoder: arbitrary bytes as the compressed records of a batch of each
//! codec (gzip, snappy raw and xerial-framed, lz4 frame, zstd, and ids 5-7), with a valid
//! CRC so that decompression runs. Decoding never panics and never allocates past the
//! decompression cap (`MAX_DECOMPRESSED_BATCH`, 64 MiB: run with `-malloc_limit_mb=160`, the
//! cap plus the decoders' state); a stream that does not decode, or decompresses past the
//! cap, is a typed error at the stream's first byte.
//!
//! The same bytes also go the other way: cut into records, written as a batch of the codec,
//! they must read back equal (so the encoder and decoder agree on every framing).
//!
//! Input: byte 0 picks the codec (low 3 bits) and, for snappy, whether to prefix xerial's
//! header (bit 3); bytes 1..5 are the declared record count (big-endian i32); the rest is the
//! stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use logbus::error::{Corruption, Error};
use logbus::storage::record_batch::{
    crc32c, Batch, BatchBuilder, Compression, HEADER_SIZE, MAX_DECOMPRESSED_BATCH,
};

const XERIAL: [u8; 16] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1];

fn batch_of(codec_id: u8, count: i32, stream: &[u8]) -> Vec<u8> {
    let mut b = BatchBuilder::new(0)
        .with_record(1, None, Some(b"x"))
        .unwrap()
        .finish()
        .to_vec();
    b.truncate(HEADER_SIZE);
    b.extend_from_slice(stream);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    b[22] = (b[22] & !7) | (codec_id & 7);
    b[23..27].copy_from_slice(&count.saturating_sub(1).max(0).to_be_bytes());
    b[57..61].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let codec_id = data[0] & 7;
    let count = i32::from_be_bytes([data[1], data[2], data[3], data[4]]);
    let mut stream = Vec::new();
    if codec_id == 2 && data[0] & 8 != 0 {
        stream.extend_from_slice(&XERIAL);
    }
    stream.extend_from_slice(&data[5..]);

    // Decoding arbitrary streams: a typed result, bounded.
    let bytes = batch_of(codec_id, count, &stream);
    let batch = Batch::decode(&bytes).expect("a well-formed header and CRC");
    let mut buf = Vec::new();
    match batch.records(&mut buf) {
        Ok(records) => {
            for r in records {
                if r.is_err() {
                    break;
                }
            }
            assert!(buf.len() <= MAX_DECOMPRESSED_BATCH);
        }
        Err(Error::Corrupt { position, reason, .. }) => {
            if matches!(
                reason,
                Corruption::BadCompressedData { .. } | Corruption::DecompressedTooLarge { .. }
            ) {
                assert_eq!(position, HEADER_SIZE as u64);
            }
        }
        Err(Error::UnsupportedCompression { .. }) => assert!(codec_id >= 5),
        Err(e) => panic!("untyped error {e:?}"),
    }
    let _ = batch.to_records();

    // Round trip: the bytes as records, written with the codec, read back equal.
    let codec = Compression::from_attributes(i16::from(codec_id));
    let Ok(mut builder) = BatchBuilder::new(7).with_compression(codec) else {
        return;
    };
    let mut want = Vec::new();
    for (i, chunk) in data[5..].chunks(97).enumerate() {
        builder
            .append(i as i64, Some(&chunk[..chunk.len() / 3]), Some(chunk), &[("h", None)])
            .unwrap();
        want.push(chunk.to_vec());
    }
    if want.is_empty() {
        return;
    }
    let written = builder.finish().to_vec();
    let got = Batch::decode(&written).unwrap().to_records().unwrap();
    let values: Vec<Vec<u8>> = got.into_iter().map(|(_, r)| r.value.unwrap()).collect();
    assert_eq!(values, want);
});
