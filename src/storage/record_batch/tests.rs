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
        Batch::decode(&b).unwrap().records(),
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
