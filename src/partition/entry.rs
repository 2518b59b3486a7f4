//! What a partition's ring holds for one record: [`Entry`], 16 bytes for a record without
//! key whose value is 8 bytes, so that four share a cache line.
//!
//! The producer and the consumer of a busy partition run on two cores, and what bounds them
//! is how many cache lines move between those cores per record: the entry's size
//! (`BENCHMARKS.md`, "Topics: 16-byte entries"). An entry is therefore three fields:
//!
//! - `stamp`: the timestamp in bits 0..62 (so valid timestamps are `0..=`[`MAX_TIMESTAMP`]),
//!   bit 62 set when the record has a key stored in the entry, bit 63 set when the record is
//!   boxed;
//! - `key`: the key, initialised exactly when bit 62 is set (no bytes for a key type of
//!   size 0, such as `()`);
//! - `body`: the value, or, for a boxed record, a box holding key, value and headers.
//!
//! Only records with headers are boxed. They paid for one allocation before (their headers'
//! box); the box now carries key and value with the headers, so no record allocates more
//! than it did, and a record without headers allocates nothing.
//!
//! `Send` and `Sync` fall out of the fields: an entry is `Send` exactly when `K` and `V`
//! are (the box holds only a `K`, a `V` and headers, which are `Send` and `Sync`), and
//! likewise `Sync`; no `unsafe impl` says otherwise.

use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr;

use bytes::Bytes;

use super::Headers;

/// The largest record timestamp logbus stores: `2^62 - 1` milliseconds since the Unix epoch
/// (some 146 million years). Record timestamps are valid in `0..=MAX_TIMESTAMP`; sends and
/// lookups by time refuse the rest with [`Error::InvalidTimestamp`](crate::Error::InvalidTimestamp),
/// and a record read from disk with a timestamp outside it is reported as corrupt.
pub const MAX_TIMESTAMP: i64 = (1 << 62) - 1;

/// Whether `timestamp` is a valid record timestamp (`0..=MAX_TIMESTAMP`).
#[inline(always)]
pub(crate) fn valid_timestamp(timestamp: i64) -> bool {
    // One test for both bounds: the two high bits are clear exactly in range.
    (timestamp as u64) >> 62 == 0
}

/// `stamp`'s bits holding the timestamp.
const TIME: u64 = (1 << 62) - 1;
/// Set when the entry holds a key in its `key` field (never when boxed).
const HAS_KEY: u64 = 1 << 62;
/// Set when `body` holds a box ([`Full`]).
const BOXED: u64 = 1 << 63;

/// A record with headers, whole, in the box of a boxed entry.
#[derive(Clone)]
struct Full<K, V> {
    key: Option<K>,
    value: V,
    headers: Headers,
}

/// An entry's value, or its box. Which one `Entry::stamp`'s `BOXED` bit says.
union Body<K, V> {
    value: ManuallyDrop<V>,
    boxed: ManuallyDrop<Box<Full<K, V>>>,
}

/// An entry's timestamp, key, value and headers, borrowed ([`Entry::parts`]).
pub(crate) type Parts<'a, K, V> = (i64, Option<&'a K>, &'a V, &'a [(String, Option<Bytes>)]);

/// What the ring of a partition holds for one record (module docs).
pub(crate) struct Entry<K, V> {
    /// Timestamp and the two flags (module docs). Invariants: with `BOXED` set, `body.boxed`
    /// is initialised, `HAS_KEY` is clear and `key` is not; with `BOXED` clear,
    /// `body.value` is initialised, and `key` is exactly when `HAS_KEY` is set.
    stamp: u64,
    key: MaybeUninit<K>,
    body: Body<K, V>,
}

/// The stamp of a record at `timestamp` with flags `flags`. Callers check timestamps
/// before they make entries; the mask keeps a timestamp the caller did not check from
/// setting a flag (which would make the union be read as the wrong field).
#[inline(always)]
fn stamp(timestamp: i64, flags: u64) -> u64 {
    debug_assert!(
        valid_timestamp(timestamp),
        "unchecked timestamp {timestamp}"
    );
    (timestamp as u64 & TIME) | flags
}

impl<K, V> Entry<K, V> {
    /// A record without key or headers: the copy path's entry, with no flag to set.
    /// `timestamp` must be in `0..=MAX_TIMESTAMP` (checked by the caller).
    #[inline(always)]
    pub(crate) fn plain(timestamp: i64, value: V) -> Self {
        Self {
            stamp: stamp(timestamp, 0),
            key: MaybeUninit::uninit(),
            body: Body {
                value: ManuallyDrop::new(value),
            },
        }
    }

    /// A record; boxed only when it has headers. `timestamp` must be in
    /// `0..=MAX_TIMESTAMP` (checked by the caller).
    #[inline]
    pub(crate) fn new(timestamp: i64, key: Option<K>, value: V, headers: Headers) -> Self {
        if headers.is_empty() {
            return Self::unboxed(timestamp, key, value);
        }
        Self {
            stamp: stamp(timestamp, BOXED),
            key: MaybeUninit::uninit(),
            body: Body {
                boxed: ManuallyDrop::new(Box::new(Full {
                    key,
                    value,
                    headers,
                })),
            },
        }
    }

    /// A record without headers.
    #[inline(always)]
    fn unboxed(timestamp: i64, key: Option<K>, value: V) -> Self {
        let (flags, key) = match key {
            Some(k) => (HAS_KEY, MaybeUninit::new(k)),
            None => (0, MaybeUninit::uninit()),
        };
        Self {
            stamp: stamp(timestamp, flags),
            key,
            body: Body {
                value: ManuallyDrop::new(value),
            },
        }
    }

    #[inline(always)]
    fn is_boxed(&self) -> bool {
        self.stamp & BOXED != 0
    }

    /// Whether dropping the entry does nothing beyond dropping its key and value: it is
    /// not boxed (it carries no headers).
    #[inline(always)]
    pub(crate) fn is_plain(&self) -> bool {
        !self.is_boxed()
    }

    /// Whether the record has headers.
    #[inline(always)]
    pub(crate) fn has_headers(&self) -> bool {
        self.is_boxed()
    }

    /// Milliseconds since the Unix epoch.
    #[inline(always)]
    pub(crate) fn timestamp(&self) -> i64 {
        (self.stamp & TIME) as i64
    }

    /// The key, if any.
    #[inline]
    pub(crate) fn key(&self) -> Option<&K> {
        self.parts().1
    }

    /// The value.
    #[inline]
    pub(crate) fn value(&self) -> &V {
        self.parts().2
    }

    /// The headers, in order (empty for most records).
    #[inline]
    pub(crate) fn headers(&self) -> &[(String, Option<Bytes>)] {
        self.parts().3
    }

    /// Timestamp, key, value and headers, with one test of the shape (the plain one
    /// first: it is the hot one).
    #[inline(always)]
    pub(crate) fn parts(&self) -> Parts<'_, K, V> {
        if !self.is_boxed() {
            let key = if self.stamp & HAS_KEY != 0 {
                // SAFETY: `HAS_KEY` set (and `BOXED` clear) means `key` is initialised
                // (the invariant on `stamp`).
                Some(unsafe { self.key.assume_init_ref() })
            } else {
                None
            };
            // SAFETY: `BOXED` clear: `body.value` is the initialised field.
            let value = unsafe { &*self.body.value };
            (self.timestamp(), key, value, &[])
        } else {
            // SAFETY: `BOXED` set: `body.boxed` is the initialised field.
            let full = unsafe { &**self.body.boxed };
            (
                self.timestamp(),
                full.key.as_ref(),
                &full.value,
                &full.headers,
            )
        }
    }

    /// The record's timestamp, key, value and headers, moved out.
    pub(crate) fn into_parts(self) -> (i64, Option<K>, V, Headers) {
        // The fields are moved out below, each once; nothing is left to drop.
        let this = ManuallyDrop::new(self);
        let timestamp = this.timestamp();
        if this.is_boxed() {
            // SAFETY: `BOXED` set: `body.boxed` is initialised; read once, and `this` is
            // never dropped, so the box has one owner.
            let full = unsafe { ManuallyDrop::into_inner(ptr::read(&this.body.boxed)) };
            let Full {
                key,
                value,
                headers,
            } = *full;
            return (timestamp, key, value, headers);
        }
        let key = if this.stamp & HAS_KEY != 0 {
            // SAFETY: `HAS_KEY` set and `BOXED` clear: `key` is initialised; read once, and
            // `this` is never dropped.
            Some(unsafe { this.key.assume_init_read() })
        } else {
            None
        };
        // SAFETY: `BOXED` clear: `body.value` is initialised; read once, and `this` is never
        // dropped.
        let value = unsafe { ManuallyDrop::into_inner(ptr::read(&this.body.value)) };
        (timestamp, key, value, Vec::new())
    }
}

impl<K: Clone, V: Clone> Clone for Entry<K, V> {
    #[inline]
    fn clone(&self) -> Self {
        if self.is_boxed() {
            // SAFETY: `BOXED` set: `body.boxed` is initialised.
            let full = unsafe { &**self.body.boxed };
            return Self {
                stamp: self.stamp,
                key: MaybeUninit::uninit(),
                body: Body {
                    boxed: ManuallyDrop::new(Box::new(full.clone())),
                },
            };
        }
        // The key is cloned into an `Option` first: if the value's clone panics, the
        // key's clone is dropped with it, not leaked.
        let (timestamp, key, value, _) = self.parts();
        let key = key.cloned();
        Self::unboxed(timestamp, key, value.clone())
    }
}

impl<K, V> Drop for Entry<K, V> {
    #[inline]
    fn drop(&mut self) {
        if self.is_boxed() {
            // SAFETY: `BOXED` set: `body.boxed` is initialised, and dropped once (here).
            unsafe { ManuallyDrop::drop(&mut self.body.boxed) };
            return;
        }
        /// Drops the value when dropped: also if the key's drop panics, as a struct's
        /// fields are dropped.
        struct DropValue<'a, V>(&'a mut ManuallyDrop<V>);
        impl<V> Drop for DropValue<'_, V> {
            fn drop(&mut self) {
                // SAFETY: made below from the initialised `body.value` of an entry being
                // dropped; dropped once (here).
                unsafe { ManuallyDrop::drop(self.0) }
            }
        }
        // SAFETY: `BOXED` clear: `body.value` is the initialised field.
        let value = DropValue(unsafe { &mut self.body.value });
        if self.stamp & HAS_KEY != 0 {
            // SAFETY: `HAS_KEY` set and `BOXED` clear: `key` is initialised, and dropped
            // once (here).
            unsafe { self.key.assume_init_drop() };
        }
        drop(value);
    }
}

/// A record as a read hands it over: lent from the ring, or owned when it was decoded from
/// disk for this read (taking it then saves a clone and a drop per record).
pub(crate) enum Handed<'a, K, V> {
    /// A ring slot's entry: clone what you keep.
    Lent(&'a Entry<K, V>),
    /// Decoded for this read alone.
    Owned(Entry<K, V>),
}

impl<K: Clone, V: Clone> Handed<'_, K, V> {
    /// The entry, cloning only a lent one.
    #[inline]
    pub(crate) fn into_entry(self) -> Entry<K, V> {
        match self {
            Handed::Lent(e) => e.clone(),
            Handed::Owned(e) => e,
        }
    }

    /// The record's timestamp, key, value and headers: a lent entry's cloned one by one
    /// (no box made for its headers), an owned one's moved out.
    #[inline]
    pub(crate) fn into_parts(self) -> (i64, Option<K>, V, Headers) {
        match self {
            Handed::Lent(e) => {
                let (timestamp, key, value, headers) = e.parts();
                // Each clone is a local that drops on its own if a later clone panics.
                let key = key.cloned();
                let value = value.clone();
                (timestamp, key, value, headers.to_vec())
            }
            Handed::Owned(e) => e.into_parts(),
        }
    }
}

#[cfg(all(test, logbus_loom))]
impl<K, V> Handed<'_, K, V> {
    /// The entry, lent either way.
    pub(crate) fn entry(&self) -> &Entry<K, V> {
        match self {
            Handed::Lent(e) => e,
            Handed::Owned(e) => e,
        }
    }
}

/// Every shape of entry, its drops counted (also run under Miri: the test script's
/// `partition::entry::` filter).
#[cfg(all(test, not(logbus_loom)))]
mod tests;
