//! Kafka's variable-length integers: zig-zag, then protobuf's base-128 (LEB128).
//!
//! Zig-zag maps signed to unsigned so small magnitudes stay short (`0 → 0, -1 → 1, 1 → 2,
//! ...`): `(n << 1) ^ (n >> 31)` for an int32, `(n << 1) ^ (n >> 63)` for an int64. The result
//! is written 7 bits a byte, least significant group first, the high bit set on every byte but
//! the last. An int32 takes at most 5 bytes and an int64 at most 10; a longer encoding is
//! corrupt (Kafka's `ByteUtils.readVarint`/`readVarlong` throw "Varint is too long").
//!
//! # Examples
//!
//! ```
//! use logbus::storage::varint;
//!
//! let mut out = Vec::new();
//! varint::put_varint(&mut out, -1);
//! varint::put_varlong(&mut out, 300);
//! assert_eq!(out, [0x01, 0xd8, 0x04]);
//! assert_eq!(varint::read_varint(&out, 0).unwrap(), (-1, 1));
//! assert_eq!(varint::read_varlong(&out, 1).unwrap(), (300, 2));
//! ```

use crate::error::{Corruption, Error, Result};

/// Longest encoding of an int32.
pub const MAX_VARINT_BYTES: usize = 5;
/// Longest encoding of an int64.
pub const MAX_VARLONG_BYTES: usize = 10;

/// Appends `value` as a zig-zag varint (1 to 5 bytes).
pub fn put_varint(out: &mut Vec<u8>, value: i32) {
    let zigzag = ((value << 1) ^ (value >> 31)) as u32;
    put_unsigned(out, u64::from(zigzag));
}

/// Appends `value` as a zig-zag varlong (1 to 10 bytes).
pub fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let zigzag = ((value << 1) ^ (value >> 63)) as u64;
    put_unsigned(out, zigzag);
}

fn put_unsigned(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The number of bytes [`put_varint`] writes for `value`.
pub fn varint_size(value: i32) -> usize {
    unsigned_size(u64::from(((value << 1) ^ (value >> 31)) as u32))
}

/// The number of bytes [`put_varlong`] writes for `value`.
pub fn varlong_size(value: i64) -> usize {
    unsigned_size(((value << 1) ^ (value >> 63)) as u64)
}

fn unsigned_size(v: u64) -> usize {
    // One byte per started group of 7 bits; zero still takes one byte.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads a zig-zag varint starting at `buf[pos]`; returns the value and the bytes it took.
///
/// Bits beyond the 32 an int32 holds are dropped, as Kafka's reader drops them.
///
/// # Errors
///
/// [`Error::Corrupt`] at `pos` with [`Corruption::Truncated`] when `buf` ends inside the
/// varint, or [`Corruption::VarintTooLong`] when it runs past 5 bytes.
#[inline(always)]
pub fn read_varint(buf: &[u8], pos: usize) -> Result<(i32, usize)> {
    let (raw, len) = read_unsigned(buf, pos, MAX_VARINT_BYTES)?;
    let raw = raw as u32;
    Ok((((raw >> 1) as i32) ^ -((raw & 1) as i32), len))
}

/// Reads a zig-zag varlong starting at `buf[pos]`; returns the value and the bytes it took.
///
/// # Errors
///
/// As [`read_varint`], with a maximum of 10 bytes.
#[inline(always)]
pub fn read_varlong(buf: &[u8], pos: usize) -> Result<(i64, usize)> {
    let (raw, len) = read_unsigned(buf, pos, MAX_VARLONG_BYTES)?;
    Ok((((raw >> 1) as i64) ^ -((raw & 1) as i64), len))
}

#[inline(always)]
fn read_unsigned(buf: &[u8], pos: usize, max_bytes: usize) -> Result<(u64, usize)> {
    // Most of a record's fields take one byte (attributes, small deltas, short keys), and
    // most of the rest two (a record's length and its value's, up to 8 KiB).
    match buf.get(pos..).unwrap_or_default() {
        [b0, ..] if b0 & 0x80 == 0 => Ok((u64::from(*b0), 1)),
        [b0, b1, ..] if b1 & 0x80 == 0 => Ok((u64::from(b0 & 0x7f) | (u64::from(*b1) << 7), 2)),
        _ => read_unsigned_long(buf, pos, max_bytes),
    }
}

/// [`read_unsigned`] past its one- and two-byte cases.
fn read_unsigned_long(buf: &[u8], pos: usize, max_bytes: usize) -> Result<(u64, usize)> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        let Some(&byte) = pos.checked_add(i).and_then(|at| buf.get(at)) else {
            return Err(Error::Corrupt {
                file: None,
                position: pos as u64,
                reason: Corruption::Truncated {
                    what: "varint",
                    needed: i as u64 + 1,
                    available: buf.len().saturating_sub(pos) as u64,
                },
            });
        };
        // Shifts stay below 64 (at most 9 * 7 = 63); excess high bits are dropped.
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(Error::Corrupt {
        file: None,
        position: pos as u64,
        reason: Corruption::VarintTooLong {
            max_bytes: max_bytes as u8,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        let cases: [(i64, &[u8]); 6] = [
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
        ];
        for (v, bytes) in cases {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out, bytes, "varlong {v}");
            let mut out = Vec::new();
            put_varint(&mut out, v as i32);
            assert_eq!(out, bytes, "varint {v}");
        }
        let mut out = Vec::new();
        put_varint(&mut out, i32::MIN);
        assert_eq!(out, [0xff, 0xff, 0xff, 0xff, 0x0f]);
        let mut out = Vec::new();
        put_varlong(&mut out, i64::MIN);
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn too_long_and_truncated_are_typed_errors() {
        let six = [0x80u8, 0x80, 0x80, 0x80, 0x80, 0x00];
        match read_varint(&six, 0) {
            Err(Error::Corrupt {
                file: None,
                position: 0,
                reason: Corruption::VarintTooLong { max_bytes: 5 },
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(read_varlong(&six, 0).is_ok());
        match read_varlong(&[0x00, 0x80, 0x80], 1) {
            Err(Error::Corrupt {
                file: None,
                position: 1,
                reason: Corruption::Truncated { available: 2, .. },
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(read_varint(&[], 0).is_err());
        assert!(read_varint(&[1], 5).is_err());
    }

    proptest! {
        #[test]
        fn varint_round_trips(v in any::<i32>()) {
            let mut out = vec![0xaa];
            put_varint(&mut out, v);
            prop_assert_eq!(out.len() - 1, varint_size(v));
            prop_assert_eq!(read_varint(&out, 1).unwrap(), (v, out.len() - 1));
        }

        #[test]
        fn varlong_round_trips(v in any::<i64>()) {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            prop_assert_eq!(out.len(), varlong_size(v));
            prop_assert_eq!(read_varlong(&out, 0).unwrap(), (v, out.len()));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..12), pos in 0usize..14) {
            let _ = read_varint(&bytes, pos);
            let _ = read_varlong(&bytes, pos);
        }
    }
}
