//! Arbitrary bytes through the RecordBatch v2 decoder, as a `.log` file's contents and as one
//! batch: decoding never panics, never reads outside the input, and every allocation is
//! bounded by the input (run with `-malloc_limit_mb` to catch one sized by a hostile count).
//!
//! The CRC would stop almost every mutated input before the records are decoded, so each
//! input is also decoded a second time with every batch's CRC recomputed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use logbus::storage::record_batch::{
    crc32c, next_batch_extent, Batch, BatchHeader, BatchIter, Extent, MAX_DECOMPRESSED_BATCH,
};

/// Walks `data` as a file of batches, decoding every record; checks what the decoder reports
/// stays inside the input.
fn decode_all(data: &[u8]) {
    let mut iter = BatchIter::new(data);
    let mut end = 0u64;
    for batch in iter.by_ref() {
        let Ok(batch) = batch else { break };
        assert_eq!(batch.position(), end, "batches are contiguous");
        assert!(batch.position() + batch.size() <= data.len() as u64);
        end = batch.position() + batch.size();
        let h = batch.header();
        let _ = (
            h.last_offset(),
            h.next_offset(),
            h.compression(),
            h.timestamp_type(),
        );
        let mut decompressed = Vec::new();
        if let Ok(records) = batch.records(&mut decompressed) {
            let mut count = 0u64;
            for record in records {
                match record {
                    Ok(r) => {
                        count += 1;
                        let owned = r.to_record();
                        let key = owned.key.as_ref().map_or(0, Vec::len);
                        let value = owned.value.as_ref().map_or(0, Vec::len);
                        // Inside the batch, or inside what its stream decompressed to.
                        assert!(
                            key + value <= batch.as_bytes().len()
                                || key + value <= MAX_DECOMPRESSED_BATCH
                        );
                    }
                    Err(_) => break,
                }
            }
            // Every record takes at least one byte (of the batch, or of its decompressed
            // records, which are bounded).
            assert!(count <= batch.size().max(MAX_DECOMPRESSED_BATCH as u64));
        }
        let _ = batch.validate_records();
        let _ = batch.to_records();
    }
    assert_eq!(iter.valid_bytes(), end);
    assert!(iter.valid_bytes() as usize + iter.remaining().len() == data.len());

    let _ = BatchHeader::parse(data);
    if let Ok(batch) = Batch::decode(data) {
        assert!(batch.size() as usize <= data.len());
        let _ = batch.to_records();
    }
}

/// A copy of `data` with the CRC of every whole batch recomputed.
fn with_valid_crcs(data: &[u8]) -> Vec<u8> {
    let mut buf = data.to_vec();
    let mut pos = 0;
    while let Extent::Batch(size) = next_batch_extent(&buf[pos..]) {
        if size > 21 {
            let crc = crc32c(&buf[pos + 21..pos + size]);
            buf[pos + 17..pos + 21].copy_from_slice(&crc.to_be_bytes());
        }
        pos += size;
    }
    buf
}

fuzz_target!(|data: &[u8]| {
    decode_all(data);
    decode_all(&with_valid_crcs(data));
});
