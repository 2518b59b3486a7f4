//! Codec round trips for every impl, Kafka-compatible integer bytes, and the error paths.

use bytes::Bytes;
use logbus::{Codec, Error};
use proptest::prelude::*;

fn round_trip<T: Codec + PartialEq + std::fmt::Debug>(value: T) {
    let bytes = value.to_bytes();
    assert_eq!(T::decode(&bytes).unwrap(), value);
}

proptest! {
    #[test]
    fn vec_round_trips(v in proptest::collection::vec(any::<u8>(), 0..512)) { round_trip(v) }
    #[test]
    fn bytes_round_trips(v in proptest::collection::vec(any::<u8>(), 0..512)) { round_trip(Bytes::from(v)) }
    #[test]
    fn string_round_trips(s in ".{0,64}") { round_trip(s) }
    #[test]
    fn bool_round_trips(b in any::<bool>()) { round_trip(b) }
    #[test]
    fn i8_round_trips(n in any::<i8>()) { round_trip(n) }
    #[test]
    fn u8_round_trips(n in any::<u8>()) { round_trip(n) }
    #[test]
    fn i16_round_trips(n in any::<i16>()) { round_trip(n) }
    #[test]
    fn u16_round_trips(n in any::<u16>()) { round_trip(n) }
    #[test]
    fn i32_round_trips(n in any::<i32>()) { round_trip(n) }
    #[test]
    fn u32_round_trips(n in any::<u32>()) { round_trip(n) }
    #[test]
    fn i64_round_trips(n in any::<i64>()) { round_trip(n) }
    #[test]
    fn u64_round_trips(n in any::<u64>()) { round_trip(n) }
    #[test]
    fn i128_round_trips(n in any::<i128>()) { round_trip(n) }
    #[test]
    fn u128_round_trips(n in any::<u128>()) { round_trip(n) }
    #[test]
    fn f32_round_trips_bitwise(n in any::<f32>()) {
        prop_assert_eq!(f32::decode(&n.to_bytes()).unwrap().to_bits(), n.to_bits());
    }
    #[test]
    fn f64_round_trips_bitwise(n in any::<f64>()) {
        prop_assert_eq!(f64::decode(&n.to_bytes()).unwrap().to_bits(), n.to_bits());
    }

    /// Kafka's IntegerSerializer / LongSerializer: `(byte) (data >>> 24)`, ... most
    /// significant byte first, two's complement.
    #[test]
    fn integers_are_kafka_big_endian(n in any::<i64>()) {
        let expected: Vec<u8> = (0..8).rev().map(|i| (n >> (8 * i)) as u8).collect();
        prop_assert_eq!(n.to_bytes(), expected);
        let m = n as i32;
        let expected: Vec<u8> = (0..4).rev().map(|i| (m >> (8 * i)) as u8).collect();
        prop_assert_eq!(m.to_bytes(), expected);
    }

    /// Any wrong length is a typed error, never a panic.
    #[test]
    fn wrong_lengths_are_errors(v in proptest::collection::vec(any::<u8>(), 0..20)) {
        if v.len() != 4 { prop_assert!(i32::decode(&v).is_err()); }
        if v.len() != 8 { prop_assert!(u64::decode(&v).is_err()); }
        if v.len() != 16 { prop_assert!(i128::decode(&v).is_err()); }
        if !v.is_empty() { prop_assert!(<()>::decode(&v).is_err()); }
    }
}

/// Byte vectors as Kafka's Java serializers produce them.
#[test]
fn known_kafka_serializer_bytes() {
    assert_eq!(1_000_000i32.to_bytes(), [0x00, 0x0F, 0x42, 0x40]);
    assert_eq!((-1i32).to_bytes(), [0xFF; 4]);
    assert_eq!(i32::MIN.to_bytes(), [0x80, 0, 0, 0]);
    assert_eq!(
        (-2i64).to_bytes(),
        [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE]
    );
    assert_eq!(
        1_700_000_000_000i64.to_bytes(),
        [0x00, 0x00, 0x01, 0x8B, 0xCF, 0xE5, 0x68, 0x00]
    );
    assert_eq!(0x1234i16.to_bytes(), [0x12, 0x34]);
    // FloatSerializer / DoubleSerializer: floatToRawIntBits / doubleToRawLongBits, big-endian.
    assert_eq!(1.5f32.to_bytes(), [0x3F, 0xC0, 0x00, 0x00]);
    assert_eq!(1.0f64.to_bytes(), [0x3F, 0xF0, 0, 0, 0, 0, 0, 0]);
    // BooleanSerializer: one byte, 1 or 0.
    assert_eq!(true.to_bytes(), [1]);
    assert_eq!(false.to_bytes(), [0]);
    // StringSerializer: UTF-8.
    assert_eq!("héllo".to_string().to_bytes(), "héllo".as_bytes());
    assert!(().to_bytes().is_empty());
}

#[test]
fn decode_errors_say_what_was_wrong() {
    let msg = |e: Error| e.to_string();
    assert_eq!(
        msg(u16::decode(&[1, 2, 3]).unwrap_err()),
        "cannot decode logbus.u16: expected 2 bytes, got 3"
    );
    assert_eq!(
        msg(String::decode(&[b'o', b'k', 0xFF]).unwrap_err()),
        "cannot decode logbus.string: invalid UTF-8 at byte 2"
    );
    assert_eq!(
        msg(bool::decode(&[2]).unwrap_err()),
        "cannot decode logbus.bool: expected byte 0 or 1, got 2"
    );
    assert_eq!(
        msg(bool::decode(&[]).unwrap_err()),
        "cannot decode logbus.bool: expected 1 byte, got 0"
    );
    assert_eq!(
        msg(<()>::decode(&[0]).unwrap_err()),
        "cannot decode logbus.unit: expected 0 bytes, got 1"
    );
}

#[test]
fn type_ids_are_stable_and_shared_by_equal_encodings() {
    assert_eq!(<Vec<u8>>::TYPE_ID, "logbus.bytes");
    assert_eq!(Bytes::TYPE_ID, <Vec<u8>>::TYPE_ID);
    assert_eq!(String::TYPE_ID, "logbus.string");
    assert_eq!(i64::TYPE_ID, "logbus.i64");
    assert_ne!(i64::TYPE_ID, u64::TYPE_ID);
}

#[cfg(feature = "serde")]
mod serde_types {
    use super::*;

    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Event {
        id: u64,
        name: String,
        tags: Vec<String>,
        score: Option<i32>,
    }
    logbus::serde_codec!(Event, "test.event.v1");

    proptest! {
        #[test]
        fn serde_round_trips(id in any::<u64>(), name in ".{0,16}",
                             tags in proptest::collection::vec(".{0,8}", 0..4),
                             score in any::<Option<i32>>()) {
            round_trip(Event { id, name, tags, score });
        }
    }

    #[test]
    fn serde_decode_errors_are_typed() {
        let bytes = Event {
            id: 1,
            name: "a".into(),
            tags: vec![],
            score: None,
        }
        .to_bytes();
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            Event::decode(&long).unwrap_err().to_string(),
            "cannot decode test.event.v1: 1 trailing bytes after the value"
        );
        assert!(matches!(
            Event::decode(&bytes[..1]).unwrap_err(),
            Error::Decode {
                type_id: "test.event.v1",
                ..
            }
        ));
    }
}

/// A codec's borrowed encoding, when it has one, is exactly what `encode` appends.
#[test]
fn borrowed_encodings_match_encode() {
    use bytes::Bytes;
    use logbus::Codec;
    fn check<C: Codec>(c: C) {
        if let Some(b) = c.encoded() {
            assert_eq!(b, c.to_bytes().as_slice());
        }
    }
    check(vec![1u8, 2, 3]);
    check(Bytes::from_static(b"abc"));
    check("héllo".to_string());
    check(Vec::<u8>::new());
    assert!(String::from("x").encoded().is_some());
    assert!(42u32.encoded().is_none());
}

/// `Option<T>`: `None` is Kafka's null (not encoded: callers write length −1), `Some(v)` is
/// `v`'s encoding, an empty `Some` is a value; a type without null refuses one with
/// `Error::Decode` naming it; the persisted type name says nullable.
#[test]
fn option_is_kafkas_null_and_an_empty_value_is_not() {
    use logbus::codec::type_name;
    assert!(Option::<String>::None.is_null());
    assert!(!Some(String::new()).is_null());
    assert!(!"x".to_string().is_null());
    assert_eq!(Some(7i32).to_bytes(), 7i32.to_bytes());
    assert_eq!(Option::<i32>::decode(&[0, 0, 0, 7]).unwrap(), Some(7));
    assert_eq!(Option::<String>::decode(b"").unwrap(), Some(String::new()));
    assert_eq!(Option::<String>::decode_null().unwrap(), None);
    assert!(
        Option::<i32>::decode(&[1]).is_err(),
        "T's errors pass through"
    );
    for err in [
        String::decode_null().unwrap_err(),
        i64::decode_null().map(|_| ()).unwrap_err(),
    ] {
        match &err {
            Error::Decode { type_id, reason } => {
                assert!(type_id.starts_with("logbus."), "{err}");
                assert!(reason.contains("null"), "{err}");
            }
            other => panic!("expected Decode, got {other:?}"),
        }
    }
    assert_eq!(<Option<String> as Codec>::TYPE_ID, String::TYPE_ID);
    const { assert!(<Option<String> as Codec>::NULLABLE && !String::NULLABLE) };
    assert_eq!(type_name::<String>(), "logbus.string");
    assert_eq!(type_name::<Option<Bytes>>(), "nullable(logbus.bytes)");
    // Zero-copy decoding carries over to `Option<Bytes>`.
    let buffer = Bytes::from_static(b"key:value");
    let value = Option::<Bytes>::decode_from(&buffer, &buffer[4..])
        .unwrap()
        .unwrap();
    assert_eq!(value.as_ptr(), buffer[4..].as_ptr());
}
