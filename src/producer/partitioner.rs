//! Kafka's default partitioner (`Utils.murmur2`, `BuiltInPartitioner.partitionForKey`)
//! and the trait for a user's own.

/// Kafka's `Utils.murmur2`: the 32-bit murmur2 hash (seed `0x9747b28c`) that Kafka's
/// default partitioner applies to a record's key bytes.
///
/// # Examples
///
/// ```
/// // One of the cases of Kafka's UtilsTest.testMurmur2.
/// assert_eq!(logbus::producer::murmur2(b"21"), -973932308);
/// ```
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Kafka computes on Java ints: wrapping arithmetic, unsigned shifts (`>>>`).
    let mut h: u32 = SEED ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let mut k = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        if tail.len() >= 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which overflows on
/// `i32::MIN`).
pub fn to_positive(n: i32) -> u32 {
    (n & 0x7fff_ffff) as u32
}

/// Kafka's `BuiltInPartitioner.partitionForKey`: `toPositive(murmur2(key)) % partitions`,
/// the partition a key's bytes land on in a topic of `partitions` partitions.
///
/// `partitions` of 0 returns 0 (there is no valid answer; a topic has at least one).
///
/// # Examples
///
/// ```
/// use logbus::producer::partition_for_key;
///
/// assert_eq!(partition_for_key(b"a", 10), 4);
/// ```
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    to_positive(murmur2(key))
        .checked_rem(partitions)
        .unwrap_or(0)
}

/// Chooses partitions for a producer's records (Kafka's `Partitioner`).
///
/// Called for records without an explicit partition. Returning `None` lets the built-in
/// choice decide (key hash, else sticky batches); a number at or above `partition_count`
/// fails the send with [`Error::PartitionOutOfRange`](crate::Error::PartitionOutOfRange).
///
/// # Examples
///
/// ```
/// use logbus::producer::Partitioner;
///
/// /// Every record with an even key to partition 0.
/// struct Evens;
/// impl Partitioner<u64> for Evens {
///     fn partition(&self, _topic: &str, key: Option<&u64>, _partitions: u32) -> Option<u32> {
///         key.filter(|k| *k % 2 == 0).map(|_| 0)
///     }
/// }
/// ```
pub trait Partitioner<K>: Send + Sync + 'static {
    /// The partition for a record of `topic` with `key`, out of `partition_count`.
    fn partition(&self, topic: &str, key: Option<&K>, partition_count: u32) -> Option<u32>;
}
