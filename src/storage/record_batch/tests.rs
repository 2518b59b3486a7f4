use super::*;
use crate::error::{Corruption, Error};

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
    for at in field::ATTRIBUTES..bytes.len() {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        assert!(
            matches!(
                Batch::decode(&b),
                Err(Error::Corrupt {
                    file: None,
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
    let crc = crc32c(&b[field::ATTRIBUTES..]);
    b[field::CRC..field::ATTRIBUTES].copy_from_slice(&crc.to_be_bytes());
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
        Err(Error::Corrupt {
            file: None,
            reason: Corruption::TrailingBytes { count: 1 },
            ..
        })
    ));

    // A record count larger than the records present.
    let mut b = sample();
    b[field::RECORDS_COUNT..field::END].copy_from_slice(&1_000_000i32.to_be_bytes());
    let b = reseal(b);
    assert!(Batch::decode(&b).unwrap().validate_records().is_err());

    // Negative count.
    let mut b = sample();
    b[field::RECORDS_COUNT..field::END].copy_from_slice(&(-3i32).to_be_bytes());
    let b = reseal(b);
    assert!(matches!(
        Batch::decode(&b).unwrap().records(&mut Vec::new()),
        Err(Error::Corrupt {
            file: None,
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

/// Compressible records: what a codec shrinks.
fn compressible(b: &mut BatchBuilder, n: usize) {
    for i in 0..n {
        let value = format!("value {i} {}", "abcdefgh".repeat(20));
        b.append(
            1_700_000_000_000 + i as i64,
            Some(format!("key-{i}").as_bytes()),
            Some(value.as_bytes()),
            &[("h", Some(b"x")), ("n", None)],
        )
        .unwrap();
    }
}

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

#[test]
fn every_codec_round_trips_and_shrinks() {
    let mut plain = BatchBuilder::new(7);
    compressible(&mut plain, 300);
    let plain = plain.finish().to_vec();
    let want = Batch::decode(&plain).unwrap().to_records().unwrap();
    for codec in CODECS {
        let mut b = BatchBuilder::new(7).with_compression(codec).unwrap();
        compressible(&mut b, 300);
        let bytes = b.finish().to_vec();
        assert_eq!(b.finished_size(), bytes.len());
        // Finishing again gives the same bytes.
        assert_eq!(b.finish(), &bytes[..]);
        assert!(
            bytes.len() < plain.len() / 3,
            "{codec}: {} of {}",
            bytes.len(),
            plain.len()
        );
        let batch = Batch::decode(&bytes).unwrap();
        assert_eq!(batch.header().compression(), codec);
        assert_eq!(batch.header().attributes & 7, i16::from(codec.id()));
        assert_eq!(batch.to_records().unwrap(), want, "{codec}");
        // One buffer serves batch after batch.
        let mut buf = Vec::new();
        for _ in 0..2 {
            let n = batch.records(&mut buf).unwrap().count();
            assert_eq!(n, 300);
        }
        // Through `encode_onto`, after other bytes in the buffer, as a segment stages it.
        let records: Vec<BatchRecord> = want.iter().map(|(_, r)| r.clone()).collect();
        let mut b = BatchBuilder::new(0).with_compression(codec).unwrap();
        for before in [0usize, 5] {
            let mut out = vec![9u8; before];
            let header = b.encode_onto(&mut out, 7, &records).unwrap();
            assert_eq!(&out[..before], &vec![9u8; before][..]);
            let batch = Batch::decode(&out[before..]).unwrap();
            assert_eq!(*batch.header(), header);
            assert_eq!(header.compression(), codec);
            assert_eq!(batch.to_records().unwrap(), want, "{codec} onto");
        }
    }
}

#[test]
fn incompressible_records_are_written_uncompressed() {
    let mut rng = fastrand::Rng::with_seed(3);
    let value: Vec<u8> = (0..4096).map(|_| rng.u8(..)).collect();
    for codec in CODECS {
        let mut b = BatchBuilder::new(0).with_compression(codec).unwrap();
        b.append(1, None, Some(&value), &[]).unwrap();
        let bytes = b.finish().to_vec();
        assert_eq!(bytes.len(), b.size());
        let batch = Batch::decode(&bytes).unwrap();
        assert_eq!(batch.header().compression(), Compression::None);
        assert_eq!(
            batch.to_records().unwrap()[0].1.value.as_deref(),
            Some(&value[..])
        );
    }
}

/// A batch of `codec` whose records are `stream`, resealed.
fn with_stream(codec_id: u8, stream: &[u8], count: i32) -> Vec<u8> {
    let mut b = sample();
    b.truncate(HEADER_SIZE);
    b.extend_from_slice(stream);
    let len = (b.len() - LOG_OVERHEAD) as i32;
    b[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&len.to_be_bytes());
    b[field::ATTRIBUTES + 1] = (b[field::ATTRIBUTES + 1] & !7) | codec_id;
    b[field::RECORDS_COUNT..field::END].copy_from_slice(&count.to_be_bytes());
    reseal(b)
}

#[test]
fn unknown_codecs_are_typed_errors() {
    for id in 5..=7u8 {
        let b = with_stream(id, b"whatever", 1);
        let batch = Batch::decode(&b).unwrap();
        match batch.records(&mut Vec::new()) {
            Err(Error::UnsupportedCompression {
                codec, position, ..
            }) => {
                assert_eq!(codec, format!("unknown({id})"));
                assert_eq!(position, 0);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(BatchBuilder::new(0)
            .with_compression(Compression::Unknown(id))
            .is_err());
    }
}

#[test]
fn corrupt_compressed_streams_are_typed_errors() {
    let mut good = BatchBuilder::new(0);
    compressible(&mut good, 50);
    let records = &good.finish()[HEADER_SIZE..].to_vec();
    for codec in CODECS {
        let mut stream = Vec::new();
        compression::compress(codec, records, &mut stream).unwrap();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("garbage", b"\x01\x02\x03 not a stream at all".to_vec()),
            ("empty", Vec::new()),
            ("cut in half", stream[..stream.len() / 2].to_vec()),
            ("flipped", {
                let mut s = stream.clone();
                let mid = s.len() / 2;
                s[mid] ^= 0x55;
                s[mid + 1] ^= 0xff;
                s
            }),
        ];
        for (what, s) in cases {
            let b = with_stream(codec.id(), &s, 50);
            let batch = Batch::decode(&b).unwrap();
            let result = batch.validate_records();
            match result {
                Err(Error::Corrupt { position, .. }) => {
                    assert_eq!(position, HEADER_SIZE as u64, "{codec} {what}")
                }
                other => panic!("{codec} {what}: {other:?}"),
            }
        }
    }
}

#[test]
fn decompression_bombs_stop_at_the_limit() {
    // 65 MiB of zeros: a few KiB compressed, past MAX_DECOMPRESSED_BATCH decompressed.
    let zeros = vec![0u8; MAX_DECOMPRESSED_BATCH + (1 << 20)];
    for codec in CODECS {
        let mut stream = Vec::new();
        compression::compress(codec, &zeros, &mut stream).unwrap();
        assert!(stream.len() < zeros.len() / 10);
        let b = with_stream(codec.id(), &stream, 1);
        let batch = Batch::decode(&b).unwrap();
        let mut buf = Vec::new();
        match batch.records(&mut buf) {
            Err(Error::Corrupt {
                position,
                reason: Corruption::DecompressedTooLarge { limit, .. },
                ..
            }) => {
                assert_eq!(position, HEADER_SIZE as u64);
                assert_eq!(limit, MAX_DECOMPRESSED_BATCH as u64);
            }
            other => panic!("{codec}: {:?}", other.map(|_| ())),
        }
        assert!(buf.capacity() <= MAX_DECOMPRESSED_BATCH * 2 + 64, "{codec}");
        // A batch declaring no record may decompress to nothing at all.
        let mut small = Vec::new();
        compression::compress(codec, b"x", &mut small).unwrap();
        let b = with_stream(codec.id(), &small, 0);
        assert!(matches!(
            Batch::decode(&b).unwrap().validate_records(),
            Err(Error::Corrupt {
                reason: Corruption::DecompressedTooLarge { limit: 0, .. },
                ..
            })
        ));
    }
}

#[test]
fn snappy_reads_raw_blocks_and_xerial_frames() {
    let mut good = BatchBuilder::new(0);
    compressible(&mut good, 50);
    let built = good.finish().to_vec();
    let want = Batch::decode(&built).unwrap().to_records().unwrap();
    let records = &built[HEADER_SIZE..];
    // Raw: one snappy block, as some clients write it.
    let raw = snap::raw::Encoder::new().compress_vec(records).unwrap();
    let b = with_stream(2, &raw, 50);
    let mut b = b;
    b[field::LAST_OFFSET_DELTA..field::LAST_OFFSET_DELTA + 4].copy_from_slice(&49i32.to_be_bytes());
    let b = reseal(b);
    let got = Batch::decode(&b).unwrap().to_records().unwrap();
    let values = |r: &[(u64, BatchRecord)]| r.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>();
    assert!(values(&got) == values(&want), "raw snappy records differ");
    // What logbus writes is xerial: the header, then 32 KiB blocks.
    let mut xerial = Vec::new();
    compression::compress(Compression::Snappy, records, &mut xerial).unwrap();
    assert_eq!(
        &xerial[..16],
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    );
}

#[test]
fn zero_tail_is_corrupt_and_positions_are_absolute() {
    let mut log = sample();
    let first = log.len();
    log.extend_from_slice(&[0u8; 40]);
    let mut it = BatchIter::with_base(&log, 1000);
    assert!(it.next().unwrap().is_ok());
    match it.next() {
        Some(Err(Error::Corrupt {
            file: None,
            position,
            reason: Corruption::BatchLengthTooSmall { length: 0 },
        })) => assert_eq!(position, 1000 + first as u64 + 8),
        other => panic!("unexpected {other:?}"),
    }
    assert!(it.next().is_none());
    assert_eq!(it.valid_bytes(), 1000 + first as u64);
}

#[test]
fn a_negative_base_offset_is_a_typed_error_naming_the_valid_range() {
    let mut bytes = sample();
    // The base offset lies outside the CRC, so the batch is otherwise valid.
    bytes[..8].copy_from_slice(&(-5i64).to_be_bytes());
    let err = Batch::decode_at(&bytes, 1000).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                file: None,
                position: 1000,
                reason: Corruption::NegativeOffset { base_offset: -5 },
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("0 ..= 9223372036854775807"),
        "{err}"
    );
    assert!(matches!(
        BatchHeader::parse(&bytes),
        Err(Error::Corrupt {
            file: None,
            reason: Corruption::NegativeOffset { base_offset: -5 },
            ..
        })
    ));
    // The largest offset there is still parses, and the batch's offsets saturate there.
    bytes[..8].copy_from_slice(&i64::MAX.to_be_bytes());
    let h = BatchHeader::parse(&bytes).unwrap();
    assert_eq!(h.base_offset, crate::storage::file_names::MAX_OFFSET);
    assert_eq!(h.last_offset(), crate::storage::file_names::MAX_OFFSET);
    assert_eq!(h.next_offset(), crate::storage::file_names::MAX_OFFSET);
}

/// The CRC-32C behind every batch agrees with an independent implementation (the `crc32c`
/// crate's CRC32-instruction path) at the check value and at every length and alignment the
/// SIMD paths split on (short tails, 16/64/256-byte blocks and beyond).
#[test]
fn crc32c_matches_an_independent_implementation() {
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    assert_eq!(crc32c(b""), 0);
    let mut rng = fastrand::Rng::with_seed(14);
    let data: Vec<u8> = (0..70_000).map(|_| rng.u8(..)).collect();
    let lengths = (0..=520).chain([1023, 1024, 1025, 4096, 4097, 65_535, 65_536, 69_000]);
    for len in lengths {
        for start in [0, 1, 7, 31] {
            let part = &data[start..start + len];
            assert_eq!(
                crc32c(part),
                ::crc32c::crc32c(part),
                "len {len}, start {start}"
            );
        }
    }
}

#[test]
fn a_batch_past_the_decompression_cap_is_written_uncompressed() {
    // One record whose encoding alone exceeds MAX_DECOMPRESSED_BATCH: compressed, no reader
    // would decompress it, so it is written as it is (and stays readable).
    let value = vec![b'a'; MAX_DECOMPRESSED_BATCH];
    let mut b = BatchBuilder::new(0)
        .with_compression(Compression::Zstd)
        .unwrap();
    b.append(1, None, Some(&value), &[]).unwrap();
    let bytes = b.finish().to_vec();
    let batch = Batch::decode(&bytes).unwrap();
    assert_eq!(batch.header().compression(), Compression::None);
    assert_eq!(batch.records(&mut Vec::new()).unwrap().count(), 1);
}
