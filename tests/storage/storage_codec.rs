//! RecordBatch v2 codec: encode → decode round trips with random records, and hostile bytes.

use logbus::storage::record_batch::{Batch, BatchBuilder, BatchIter, BatchRecord, Header};
use logbus::Error;
use proptest::prelude::*;

fn bytes_opt() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        4 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Some),
    ]
}

fn header() -> impl Strategy<Value = Header> {
    ("[a-zé]{0,6}", bytes_opt()).prop_map(|(key, value)| Header { key, value })
}

fn record() -> impl Strategy<Value = BatchRecord> {
    (
        prop_oneof![
            Just(-1i64),
            any::<i64>(),
            1_600_000_000_000i64..1_800_000_000_000
        ],
        bytes_opt(),
        bytes_opt(),
        proptest::collection::vec(header(), 0..3),
    )
        .prop_map(|(timestamp, key, value, headers)| BatchRecord {
            timestamp,
            key,
            value,
            headers,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn batch_round_trips(
        base in 0u64..u64::MAX / 4,
        epoch in any::<i32>(),
        records in proptest::collection::vec(record(), 1..12),
    ) {
        let mut builder = BatchBuilder::new(base).with_partition_leader_epoch(epoch);
        for r in &records {
            builder.append_record(r).unwrap();
        }
        let bytes = builder.finish().to_vec();
        let batch = Batch::decode(&bytes).unwrap();
        let h = *batch.header();
        prop_assert_eq!(h.base_offset, base);
        prop_assert_eq!(h.partition_leader_epoch, epoch);
        prop_assert_eq!(h.records_count as usize, records.len());
        prop_assert_eq!(h.last_offset(), base + records.len() as u64 - 1);
        prop_assert_eq!(h.base_timestamp, records[0].timestamp);
        prop_assert_eq!(h.max_timestamp, records.iter().map(|r| r.timestamp).max().unwrap());
        prop_assert_eq!(h.size(), bytes.len() as u64);
        let decoded = batch.to_records().unwrap();
        prop_assert_eq!(decoded.len(), records.len());
        for (i, ((offset, got), want)) in decoded.iter().zip(&records).enumerate() {
            prop_assert_eq!(*offset, base + i as u64);
            prop_assert_eq!(got, want);
        }
        // The iterator over a sequence of batches sees the same batch and nothing more.
        let mut it = BatchIter::new(&bytes);
        prop_assert_eq!(it.next().unwrap().unwrap().as_bytes(), &bytes[..]);
        prop_assert!(it.next().is_none());
        prop_assert_eq!(it.valid_bytes(), bytes.len() as u64);
    }

    /// Arbitrary bytes, and valid batches with arbitrary edits and re-sealed CRCs, decode to a
    /// value or a typed error: never a panic, never an allocation beyond the input.
    #[test]
    fn hostile_bytes_never_panic(
        records in proptest::collection::vec(record(), 1..4),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        noise in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut b = BatchBuilder::new(0);
        for r in &records {
            b.append_record(r).unwrap();
        }
        let mut bytes = b.finish().to_vec();
        for (at, v) in edits {
            let at = at % bytes.len();
            bytes[at] = v;
        }
        if bytes.len() > 21 {
            let crc = crc32c::crc32c(&bytes[21..]);
            bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        for input in [&bytes[..], &noise[..]] {
            for batch in BatchIter::new(input) {
                match batch {
                    Ok(batch) => {
                        if let Ok(records) = batch.records(&mut Vec::new()) {
                            for r in records {
                                if r.is_err() { break; }
                            }
                        }
                        let _ = batch.to_records();
                    }
                    Err(e) => {
                        let typed = matches!(e, Error::Corrupt { file: None, .. });
                        prop_assert!(typed, "unexpected error {:?}", e);
                    }
                }
            }
            let _ = Batch::decode(input);
        }
    }
}
