//! Kafka's default partitioner: `murmur2` against the cases of Kafka's
//! `UtilsTest.testMurmur2`, and `partition_for_key` against partitions Kafka's
//! `BuiltInPartitioner.partitionForKey` gives.

use logbus::broker::{Broker, TopicConfig};
use logbus::producer::{murmur2, partition_for_key, to_positive, Record};
use logbus::Codec;

/// Kafka's `UtilsTest.testMurmur2` cases (the keys are the strings' bytes).
const KAFKA_MURMUR2: [(&[u8], i32); 6] = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
        -58897971,
    ),
    (b"abc", 479470107),
];

#[test]
fn murmur2_matches_kafkas_utils_test() {
    for (key, expected) in KAFKA_MURMUR2 {
        assert_eq!(murmur2(key), expected, "{:?}", String::from_utf8_lossy(key));
    }
}

/// Short keys of every tail length (1 to 5 bytes), with the values Akka's sharding pins
/// as "expected correct hash values from the kafka murmur2 impl".
#[test]
fn murmur2_covers_every_tail_length() {
    for (key, expected) in [
        ("1", -1993445489),
        ("12", 126087238),
        ("123", -267702483),
        ("1234", -1614185708),
        ("12345", -1188365604),
    ] {
        assert_eq!(murmur2(key.as_bytes()), expected, "{key}");
    }
}

#[test]
fn partition_for_key_is_to_positive_murmur2_mod_n() {
    // Keys "a".."e" on 10 partitions, as asserted against BuiltInPartitioner.partitionForKey.
    for (key, partition) in [("a", 4), ("b", 6), ("c", 4), ("d", 3), ("e", 4)] {
        assert_eq!(partition_for_key(key.as_bytes(), 10), partition, "{key}");
    }
    for (key, hash) in KAFKA_MURMUR2 {
        for n in [1, 2, 3, 7, 12, 100, 1 << 16] {
            assert_eq!(partition_for_key(key, n), (hash & 0x7fffffff) as u32 % n);
        }
    }
    // toPositive clears the sign bit; it is not abs (i32::MIN stays representable).
    assert_eq!(to_positive(i32::MIN), 0);
    assert_eq!(to_positive(-1), 0x7fffffff);
    assert_eq!(partition_for_key(b"x", 0), 0, "no partitions: no panic");
}

#[test]
fn producers_put_keys_where_partition_for_key_says_over_codec_bytes() {
    let broker = Broker::in_memory();
    broker
        .create_topic::<i32, ()>("ints", TopicConfig::new(12))
        .unwrap();
    let p = broker.producer::<i32, ()>();
    for k in [-5, 0, 1, 42, i32::MAX] {
        let m = p.send(Record::new("ints", ()).key(k)).unwrap();
        // Kafka's IntegerSerializer: four big-endian bytes.
        assert_eq!(m.partition, partition_for_key(&k.to_bytes(), 12));
        assert_eq!(k.to_bytes(), k.to_be_bytes());
    }
}
