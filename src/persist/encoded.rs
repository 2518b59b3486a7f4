//! A partition's entry as a record batch takes it, for every writer of batches (the plain
//! persisted partition's writer, the replicas' disk stores).

use crate::codec::{encoding, nullable_encoding, Codec};
use crate::partition::Entry;
use crate::storage::record_batch::MAX_RECORD_OVERHEAD;
use crate::storage::BatchBuilder;
use crate::Result;

/// A header's key and value lengths in a record, at most (two varints).
const HEADER_LENGTHS: usize = 10;

/// An entry's key, value and headers as bytes: each codec's own bytes when it holds them,
/// else encoded into the caller's buffers (reused from record to record).
pub(crate) struct EncodedEntry<'a> {
    timestamp: i64,
    key: Option<&'a [u8]>,
    /// `None` for a null value (a tombstone), written as length −1.
    value: Option<&'a [u8]>,
    headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

impl<'a> EncodedEntry<'a> {
    pub(crate) fn new<K: Codec, V: Codec>(
        e: &'a Entry<K, V>,
        key: &'a mut Vec<u8>,
        value: &'a mut Vec<u8>,
    ) -> Self {
        if let Some(m) = e.txn().and_then(|t| t.control) {
            // Kafka's control record: key `version: i16 (0), type: i16` (0 ABORT, 1
            // COMMIT); value `version: i16 (0), coordinator epoch: i32`.
            key.clear();
            key.extend_from_slice(&0i16.to_be_bytes());
            key.extend_from_slice(&i16::from(m.commit).to_be_bytes());
            value.clear();
            value.extend_from_slice(&0i16.to_be_bytes());
            value.extend_from_slice(&m.coordinator_epoch.to_be_bytes());
            return Self {
                timestamp: e.timestamp(),
                key: Some(key),
                value: Some(value),
                headers: Vec::new(),
            };
        }
        let (timestamp, k, v, headers) = e.parts();
        Self {
            timestamp,
            key: k.map(|k| encoding(k, key)),
            value: nullable_encoding(v, value),
            headers: headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_deref()))
                .collect(),
        }
    }

    /// Its size in a batch, at most (every varint at its widest).
    pub(crate) fn bound(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len) + HEADER_LENGTHS)
            .sum();
        self.key.map_or(0, <[u8]>::len)
            + self.value.map_or(0, <[u8]>::len)
            + headers
            + MAX_RECORD_OVERHEAD
    }

    /// A control record's marker from its key and value bytes (`None`: not a marker
    /// Kafka's `EndTransactionMarker` reads).
    pub(crate) fn marker(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Option<crate::partition::ControlMarker> {
        let key = key?;
        let value = value?;
        if key.len() < 4 || value.len() < 6 {
            return None;
        }
        let commit = match i16::from_be_bytes([key[2], key[3]]) {
            0 => false,
            1 => true,
            _ => return None,
        };
        let coordinator_epoch = i32::from_be_bytes([value[2], value[3], value[4], value[5]]);
        Some(crate::partition::ControlMarker {
            commit,
            coordinator_epoch,
        })
    }

    /// Appends it to `builder`.
    ///
    /// # Errors
    ///
    /// [`BatchBuilder::append`]'s.
    pub(crate) fn append_to(&self, builder: &mut BatchBuilder) -> Result<()> {
        builder.append(self.timestamp, self.key, self.value, &self.headers)
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::MAX_TIMESTAMP;
    use bytes::Bytes;

    fn entry(
        timestamp: i64,
        key: Option<&str>,
        value: usize,
        headers: usize,
    ) -> Entry<String, Bytes> {
        Entry::new(
            timestamp,
            key.map(str::to_owned),
            Bytes::from(vec![7; value]),
            (0..headers)
                .map(|i| {
                    (
                        format!("h{i}"),
                        (i % 2 == 0).then(|| Bytes::from(vec![1; i])),
                    )
                })
                .collect(),
        )
    }

    /// The bound holds for each record appended, whatever its varints' widths: timestamps
    /// as far apart as they may be (a 9-byte delta), lengths across varint steps, many headers.
    #[test]
    fn the_bound_is_never_below_what_a_record_takes() {
        let cases = [
            entry(0, None, 0, 0),
            entry(MAX_TIMESTAMP, Some("k"), 1, 0),
            entry(0, Some(&"k".repeat(200)), 127, 3),
            entry(MAX_TIMESTAMP / 2, None, 16_384, 40),
            entry(1, Some(""), 2_097_152, 1),
        ];
        let (mut key, mut value) = (Vec::new(), Vec::new());
        let mut builder = BatchBuilder::new(0);
        for e in &cases {
            let encoded = EncodedEntry::new(e, &mut key, &mut value);
            let before = builder.size();
            encoded.append_to(&mut builder).unwrap();
            let took = builder.size() - before;
            assert!(took <= encoded.bound(), "{took} > {}", encoded.bound());
            // Not loose by more than the varints' slack.
            assert!(encoded.bound() - took <= MAX_RECORD_OVERHEAD + 10 * 40);
        }
        assert_eq!(builder.len(), cases.len());
    }
}
