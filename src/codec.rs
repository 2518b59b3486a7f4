//! Turning keys and values into bytes and back.
//!
//! A [`Codec`] is needed where logbus must see bytes: hashing a key with the default
//! partitioner (the only encoding an in-memory topic does), and writing records to segment
//! files (persisted topics, encoded once, at send) or to a Kafka cluster (the bridge). Integers
//! are big-endian fixed-width, as Kafka's `IntegerSerializer`, `LongSerializer`,
//! `ShortSerializer`, `FloatSerializer`, `DoubleSerializer` and `BooleanSerializer` write
//! them, so keys hash to the partitions Kafka would choose and segment files read the same
//! from Java. Strings are UTF-8 (`StringSerializer`); `()` is empty.
//!
//! Every impl carries a [`TYPE_ID`](Codec::TYPE_ID): a stable name for the *encoding*, which a
//! persisted topic records in its metadata, so that reopening it with another type is
//! [`Error::TypeMismatch`]. (In memory, a topic checks its key and value types by `TypeId`.)
//! It is a constant rather than `std::any::type_name`, whose output may change between
//! compilers. Types with
//! the same bytes share an id (`Vec<u8>` and `Bytes`), so a topic written with one will be
//! readable with the other.
//!
//! # Null
//!
//! A Kafka record's value (and key) may be *null*: length −1 in the record, distinct from an
//! empty value (length 0). In a compacted topic a null value is a *tombstone*, deleting its
//! key. In logbus null is `None` of an [`Option<T>`] value type: `Topic<K, Option<V>>`, where
//! `Some(v)` is `v`'s encoding and `None` is null. A type that is not an `Option` has no null:
//! reading a null value (written by Kafka, or by a logbus topic of `Option` values) as such a
//! type is [`Error::Decode`], never an empty value. `Option<T>` records the type id of `T`
//! with [`NULLABLE`](Codec::NULLABLE) set, so a persisted topic of `Option<String>` values
//! reopens only as `Option<String>` (see [`type_name`]). `Option<Option<T>>` has no codec
//! (one null cannot be two values): using it fails to compile.
//!
//! With the `serde` feature, `serde_codec!` gives any serde type a codec in the compact
//! postcard format.
#![cfg_attr(
    feature = "serde",
    doc = "\n(See [`serde_codec!`](crate::serde_codec).)"
)]

use bytes::Bytes;

use crate::error::{Error, Result};

/// Encoding of a key or value type to bytes and back.
///
/// # Examples
///
/// ```
/// use logbus::Codec;
///
/// // Kafka's IntegerSerializer writes 42 as these four bytes.
/// assert_eq!(42i32.to_bytes(), [0, 0, 0, 42]);
/// assert_eq!(i32::decode(&[0, 0, 0, 42]).unwrap(), 42);
///
/// // Wrong length is a typed error, not a panic.
/// let err = i32::decode(&[1, 2]).unwrap_err();
/// assert_eq!(err.to_string(), "cannot decode logbus.i32: expected 4 bytes, got 2");
/// ```
pub trait Codec: Sized {
    /// A stable name for this encoding, recorded in a persisted topic's metadata and checked when
    /// it is reopened.
    const TYPE_ID: &'static str;

    /// Whether null (Kafka's length −1) is a value of this type: `true` only for
    /// [`Option<T>`], whose `None` is null.
    const NULLABLE: bool = false;

    /// Whether `self` is null, written as length −1 rather than through
    /// [`encode`](Self::encode). `false` (the default) for a type without null.
    fn is_null(&self) -> bool {
        false
    }

    /// The value a null (length −1) decodes to.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] naming this type (the default): a type that is not nullable has no
    /// value for null. An empty value is not null: it goes to [`decode`](Self::decode).
    fn decode_null() -> Result<Self> {
        Err(decode_error(
            Self::TYPE_ID,
            "null value (a tombstone) for a type without null: read it as an Option",
        ))
    }

    /// Appends the encoding of `self` to `out`.
    fn encode(&self, out: &mut Vec<u8>);

    /// Decodes a value from exactly `bytes`.
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] naming this type's id and what was wrong with the bytes.
    fn decode(bytes: &[u8]) -> Result<Self>;

    /// Decodes a value from exactly `bytes`, a part of `buffer`: a type that can share the
    /// buffer instead of copying out of it ([`Bytes`]) does so. Persisted topics decode what
    /// they read from disk this way. The default is [`decode`](Self::decode) of `bytes`.
    ///
    /// # Errors
    ///
    /// As [`decode`](Self::decode).
    fn decode_from(buffer: &Bytes, bytes: &[u8]) -> Result<Self> {
        let _ = buffer;
        Self::decode(bytes)
    }

    /// The encoding of `self` when `self` already holds it as one slice (byte strings,
    /// strings): persisted topics then size and write it without encoding into a buffer
    /// first. `None` (the default) means [`encode`](Self::encode) must run. When `Some`, it
    /// is exactly the bytes `encode` appends.
    fn encoded(&self) -> Option<&[u8]> {
        None
    }

    /// The encoding of `self` as a new vector.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

fn decode_error(type_id: &'static str, reason: impl Into<String>) -> Error {
    Error::Decode {
        type_id,
        reason: reason.into(),
    }
}

/// Kafka's null as `None`; `Some(v)` is `v`'s encoding.
///
/// # Examples
///
/// ```
/// use logbus::Codec;
///
/// let deleted: Option<String> = None;
/// assert!(deleted.is_null());
/// assert_eq!(Option::<String>::decode_null()?, None);
/// // An empty string is a value, not null.
/// assert!(!Some(String::new()).is_null());
/// assert_eq!(Option::<String>::decode(b"")?, Some(String::new()));
/// // A type without null refuses one.
/// assert!(String::decode_null().is_err());
/// # Ok::<(), logbus::Error>(())
/// ```
///
/// `Option<Option<T>>` has no codec: Kafka has one null, so `Some(None)` and `None` could not
/// both be written. Using it fails to compile:
///
/// ```compile_fail
/// use logbus::Codec;
///
/// let twice: Option<Option<u8>> = Some(None);
/// let _ = twice.is_null();
/// ```
impl<T: Codec> Codec for Option<T> {
    const TYPE_ID: &'static str = T::TYPE_ID;

    const NULLABLE: bool = true;

    fn is_null(&self) -> bool {
        const {
            assert!(
                !T::NULLABLE,
                "Option<Option<T>> has no codec: Kafka has one null"
            )
        };
        self.is_none()
    }

    fn decode_null() -> Result<Self> {
        const {
            assert!(
                !T::NULLABLE,
                "Option<Option<T>> has no codec: Kafka has one null"
            )
        };
        Ok(None)
    }

    /// Writes nothing for `None`: callers ask [`is_null`](Codec::is_null) first and write
    /// length −1.
    fn encode(&self, out: &mut Vec<u8>) {
        if let Some(v) = self {
            v.encode(out);
        }
    }

    fn encoded(&self) -> Option<&[u8]> {
        match self {
            Some(v) => v.encoded(),
            None => Some(&[]),
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        T::decode(bytes).map(Some)
    }

    fn decode_from(buffer: &Bytes, bytes: &[u8]) -> Result<Self> {
        T::decode_from(buffer, bytes).map(Some)
    }
}

/// The name of `C`'s encoding as persisted metadata records it: its
/// [`TYPE_ID`](Codec::TYPE_ID), in `nullable(...)` when it is [`NULLABLE`](Codec::NULLABLE).
///
/// # Examples
///
/// ```
/// assert_eq!(logbus::codec::type_name::<String>(), "logbus.string");
/// assert_eq!(logbus::codec::type_name::<Option<String>>(), "nullable(logbus.string)");
/// ```
pub fn type_name<C: Codec>() -> std::borrow::Cow<'static, str> {
    if C::NULLABLE {
        format!("nullable({})", C::TYPE_ID).into()
    } else {
        C::TYPE_ID.into()
    }
}

/// The encoding of `c` as a record holds it: `None` for null.
pub(crate) fn nullable_encoding<'a, C: Codec>(c: &'a C, buf: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    if c.is_null() {
        None
    } else {
        Some(encoding(c, buf))
    }
}

/// Decodes a record's value or key as read: `None` (null) by [`Codec::decode_null`].
pub(crate) fn decode_nullable<C: Codec>(bytes: Option<&[u8]>) -> Result<C> {
    match bytes {
        Some(bytes) => C::decode(bytes),
        None => C::decode_null(),
    }
}

/// As [`decode_nullable`], sharing `buffer` where the type can ([`Codec::decode_from`]).
pub(crate) fn decode_nullable_from<C: Codec>(buffer: &Bytes, bytes: Option<&[u8]>) -> Result<C> {
    match bytes {
        Some(bytes) => C::decode_from(buffer, bytes),
        None => C::decode_null(),
    }
}

impl Codec for Vec<u8> {
    const TYPE_ID: &'static str = "logbus.bytes";

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }

    fn encoded(&self) -> Option<&[u8]> {
        Some(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(bytes.to_vec())
    }
}

impl Codec for Bytes {
    const TYPE_ID: &'static str = "logbus.bytes";

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }

    fn encoded(&self) -> Option<&[u8]> {
        Some(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(Bytes::copy_from_slice(bytes))
    }

    /// A view of `buffer` when `bytes` lies inside it (no copy: the value keeps the whole
    /// buffer alive, so a value kept long apart from its neighbours should be copied out
    /// with [`Bytes::copy_from_slice`]); a copy otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use bytes::Bytes;
    /// use logbus::Codec;
    ///
    /// let buffer = Bytes::from_static(b"key:value");
    /// let value = Bytes::decode_from(&buffer, &buffer[4..])?;
    /// assert_eq!(value, &b"value"[..]);
    /// assert_eq!(value.as_ptr(), buffer[4..].as_ptr()); // shared, not copied
    /// assert_eq!(Bytes::decode_from(&buffer, b"elsewhere")?, &b"elsewhere"[..]);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    fn decode_from(buffer: &Bytes, bytes: &[u8]) -> Result<Self> {
        Ok(share(buffer, bytes))
    }
}

/// `part` as a view of `buffer` when it lies inside it, else a copy.
pub(crate) fn share(buffer: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(buffer.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if start <= buffer.len() && end <= buffer.len() => buffer.slice(start..end),
        _ => Bytes::copy_from_slice(part),
    }
}

impl Codec for String {
    const TYPE_ID: &'static str = "logbus.string";

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }

    fn encoded(&self) -> Option<&[u8]> {
        Some(self.as_bytes())
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(decode_error(
                Self::TYPE_ID,
                format!("invalid UTF-8 at byte {}", e.valid_up_to()),
            )),
        }
    }
}

impl Codec for () {
    const TYPE_ID: &'static str = "logbus.unit";

    fn encode(&self, _out: &mut Vec<u8>) {}

    fn decode(bytes: &[u8]) -> Result<Self> {
        if bytes.is_empty() {
            Ok(())
        } else {
            Err(decode_error(
                Self::TYPE_ID,
                format!("expected 0 bytes, got {}", bytes.len()),
            ))
        }
    }
}

impl Codec for bool {
    const TYPE_ID: &'static str = "logbus.bool";

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        match bytes {
            [0] => Ok(false),
            [1] => Ok(true),
            [b] => Err(decode_error(
                Self::TYPE_ID,
                format!("expected byte 0 or 1, got {b}"),
            )),
            _ => Err(decode_error(
                Self::TYPE_ID,
                format!("expected 1 byte, got {}", bytes.len()),
            )),
        }
    }
}

/// Fixed-width big-endian numbers (Kafka's serializers for `short`, `int`, `long`, `float`,
/// `double`; the unsigned and 8- and 128-bit widths follow the same rule).
macro_rules! big_endian_codec {
    ($($ty:ty => $id:literal),* $(,)?) => {$(
        impl Codec for $ty {
            const TYPE_ID: &'static str = $id;

            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }

            fn decode(bytes: &[u8]) -> Result<Self> {
                match <[u8; std::mem::size_of::<$ty>()]>::try_from(bytes) {
                    Ok(array) => Ok(<$ty>::from_be_bytes(array)),
                    Err(_) => Err(decode_error(
                        Self::TYPE_ID,
                        format!(
                            "expected {} bytes, got {}",
                            std::mem::size_of::<$ty>(),
                            bytes.len()
                        ),
                    )),
                }
            }
        }
    )*};
}

big_endian_codec! {
    i8 => "logbus.i8", u8 => "logbus.u8",
    i16 => "logbus.i16", u16 => "logbus.u16",
    i32 => "logbus.i32", u32 => "logbus.u32",
    i64 => "logbus.i64", u64 => "logbus.u64",
    i128 => "logbus.i128", u128 => "logbus.u128",
    f32 => "logbus.f32", f64 => "logbus.f64",
}

/// Implements [`Codec`] for a serde type, encoded with [postcard](https://docs.rs/postcard)
/// (compact, varint-based, a stable documented wire format). Needs the `serde` feature.
///
/// The second argument is the type's stable id: choose a name that says what the bytes are,
/// and change it when the encoding changes incompatibly.
///
/// # Examples
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use logbus::Codec;
///
/// #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
/// struct Order { id: u64, item: String }
/// logbus::serde_codec!(Order, "shop.order.v1");
///
/// let order = Order { id: 7, item: "tea".into() };
/// assert_eq!(Order::decode(&order.to_bytes()).unwrap(), order);
/// assert_eq!(Order::TYPE_ID, "shop.order.v1");
/// # }
/// ```
#[cfg(feature = "serde")]
#[macro_export]
macro_rules! serde_codec {
    ($ty:ty, $id:literal) => {
        impl $crate::Codec for $ty {
            const TYPE_ID: &'static str = $id;

            fn encode(&self, out: &mut ::std::vec::Vec<u8>) {
                $crate::codec::__private::postcard_encode(self, out)
            }

            fn decode(bytes: &[u8]) -> $crate::Result<Self> {
                $crate::codec::__private::postcard_decode(Self::TYPE_ID, bytes)
            }
        }
    };
}

/// Support for [`serde_codec!`]; not a public API.
#[cfg(feature = "serde")]
#[doc(hidden)]
pub mod __private {
    use super::{decode_error, Result};

    /// Appends the postcard encoding of `value` to `out`.
    ///
    /// # Panics
    ///
    /// If the type's `Serialize` impl itself fails (a custom impl returning an error);
    /// derived impls never do.
    pub fn postcard_encode<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
        let taken = std::mem::take(out);
        *out = postcard::to_extend(value, taken)
            .expect("serde type's Serialize impl failed (postcard cannot fail on its own)");
    }

    /// Decodes exactly `bytes` as a `T`.
    pub fn postcard_decode<T: serde::de::DeserializeOwned>(
        type_id: &'static str,
        bytes: &[u8],
    ) -> Result<T> {
        match postcard::take_from_bytes::<T>(bytes) {
            Ok((value, [])) => Ok(value),
            Ok((_, rest)) => Err(decode_error(
                type_id,
                format!("{} trailing bytes after the value", rest.len()),
            )),
            Err(e) => Err(decode_error(type_id, e.to_string())),
        }
    }
}

/// The encoding of `c`: its own bytes when it holds them, else encoded into `buf`.
pub(crate) fn encoding<'a, C: Codec>(c: &'a C, buf: &'a mut Vec<u8>) -> &'a [u8] {
    match c.encoded() {
        Some(bytes) => bytes,
        None => {
            buf.clear();
            c.encode(buf);
            buf
        }
    }
}
