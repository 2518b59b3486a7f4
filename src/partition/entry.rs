//! What a partition's ring holds for one record: [`Entry`], 16 bytes for a record without
//! key whose value is 8 bytes, so that four share a cache line.
//!
//! The producer and the consumer of a busy partition run on two cores, and what bounds them
//! is how many cache lines move between those cores per record: the entry's size
//! (`BENCHMARKS.md`, "Topics: 16-byte entries"). An entry is therefore three fields:
//!
//! - `word`: for a record without headers, the timestamp in bits 0..62 (so valid
//!   timestamps are `0..=`[`MAX_TIMESTAMP`]) and bit 62 set when the record has a key; for
//!   a record with headers, bit 63 set and, in bits 0..63, the address of a box holding its
//!   timestamp, key and headers ([`Full`]), shifted right by one (the box is aligned to
//!   8, so no bit is lost);
//! - `key`: the key, initialised exactly when bit 62 is set (no bytes for a key type of
//!   size 0, such as `()`);
//! - `value`: the value, in place, so that reading it never depends on the shape; only a
//!   control record (a transaction's COMMIT or ABORT marker, always boxed) has none, and
//!   every read checks [`Entry::is_control`] before it hands an entry over.
//!
//! Only records with headers are boxed. They paid for one allocation before (their headers'
//! box); the box now carries timestamp and key with the headers, so no record allocates
//! more than it did, and a record without headers allocates nothing.
//!
//! `Send` and `Sync` fall out of the fields: the box is owned through an integer, and a
//! `PhantomData<Box<Full<K>>>` stands for it, so an entry is `Send` exactly when `K` and `V`
//! are (headers are `Send` and `Sync`), and likewise `Sync`; no `unsafe impl` says
//! otherwise.

use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};

use bytes::Bytes;

use super::Headers;

/// The largest record timestamp logbus stores: `2^62 - 1` milliseconds since the Unix epoch
/// (some 146 million years). Record timestamps are valid in `0..=MAX_TIMESTAMP`; sends and
/// lookups by time refuse the rest with [`Error::InvalidTimestamp`](crate::Error::InvalidTimestamp),
/// and a record read from disk with a timestamp outside it is reported as invalid
/// ([`Error::InvalidTimestamp`](crate::Error::InvalidTimestamp)).
pub const MAX_TIMESTAMP: i64 = (1 << 62) - 1;

/// Whether `timestamp` is a valid record timestamp (`0..=MAX_TIMESTAMP`).
#[inline(always)]
pub(crate) fn valid_timestamp(timestamp: i64) -> bool {
    // One test for both bounds: the two high bits are clear exactly in range.
    (timestamp as u64) >> 62 == 0
}

/// `word`'s bits holding the timestamp (not boxed).
const TIME: u64 = (1 << 62) - 1;
/// Set when the entry holds a key in its `key` field (never when boxed).
const HAS_KEY: u64 = 1 << 62;
/// Set when `word` holds the address of a box ([`Full`]).
const BOXED: u64 = 1 << 63;

/// A record's fields other than its value, in the box of a record with headers.
#[derive(Clone)]
struct Full<K> {
    timestamp: i64,
    key: Option<K>,
    headers: Headers,
    /// A transactional record's producer (KIP-98), or a control record (a COMMIT or ABORT
    /// marker, which has no value).
    txn: Option<TxnMark>,
}

/// What marks a record as part of a transaction, or as a transaction's end marker: the
/// batch header fields Kafka gives it (producer id and epoch, attribute bits 4 and 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxnMark {
    /// The producer id of the transaction.
    pub(crate) producer_id: i64,
    /// The producer epoch of the transaction (one per transaction: KIP-890).
    pub(crate) epoch: i16,
    /// `Some` for a control record: the transaction's end marker.
    pub(crate) control: Option<ControlMarker>,
}

/// A control record's content (Kafka's `EndTransactionMarker`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ControlMarker {
    /// COMMIT (`true`, control type 1) or ABORT (`false`, control type 0).
    pub(crate) commit: bool,
    /// The epoch of the transaction coordinator that wrote it.
    pub(crate) coordinator_epoch: i32,
}

/// What the ring of a partition holds for one record (module docs).
pub(crate) struct Entry<K, V> {
    /// Timestamp and flags, or the box's address (module docs). Invariants: with `BOXED`
    /// set, `(word & !BOXED) << 1` is the exposed address of a `Box<Full<K>>` this entry
    /// owns, and `key` is not initialised; with `BOXED` clear, `key` is initialised exactly
    /// when `HAS_KEY` is set.
    word: u64,
    key: MaybeUninit<K>,
    /// Initialised unless the entry is a control record (boxed, its `Full::txn` holding a
    /// `control`): those carry no value, and every reader checks
    /// [`is_control`](Entry::is_control) before it looks at one.
    value: MaybeUninit<V>,
    /// The box `word` may own: for drop check and the auto traits.
    _box: PhantomData<Box<Full<K>>>,
}

/// An entry's timestamp, key, value and headers, borrowed ([`Entry::parts`]).
pub(crate) type Parts<'a, K, V> = (i64, Option<&'a K>, &'a V, &'a [(String, Option<Bytes>)]);

/// The word of a record at `timestamp` with flags `flags` (not boxed). Callers check
/// timestamps before they make entries; the mask keeps a timestamp the caller did not
/// check from setting a flag (which would make the word be taken for a box's address).
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
            word: stamp(timestamp, 0),
            key: MaybeUninit::uninit(),
            value: MaybeUninit::new(value),
            _box: PhantomData,
        }
    }

    /// A record; boxed only when it has headers. `timestamp` must be in
    /// `0..=MAX_TIMESTAMP` (checked by the caller).
    #[inline]
    pub(crate) fn new(timestamp: i64, key: Option<K>, value: V, headers: Headers) -> Self {
        if headers.is_empty() {
            return Self::unboxed(timestamp, key, value);
        }
        debug_assert!(
            valid_timestamp(timestamp),
            "unchecked timestamp {timestamp}"
        );
        Self::box_word_is_lossless();
        let full = Box::into_raw(Box::new(Full {
            timestamp,
            key,
            headers,
            txn: None,
        }));
        let address = full.expose_provenance() as u64;
        Self {
            word: (address >> 1) | BOXED,
            key: MaybeUninit::uninit(),
            value: MaybeUninit::new(value),
            _box: PhantomData,
        }
    }

    /// A record without headers.
    #[inline(always)]
    fn unboxed(timestamp: i64, key: Option<K>, value: V) -> Self {
        // (Here for every `K`: the boxed shape's word, below, relies on it.)
        Self::box_word_is_lossless();
        let (flags, key) = match key {
            Some(k) => (HAS_KEY, MaybeUninit::new(k)),
            None => (0, MaybeUninit::uninit()),
        };
        Self {
            word: stamp(timestamp, flags),
            key,
            value: MaybeUninit::new(value),
            _box: PhantomData,
        }
    }

    /// A box's address shifted right by one loses nothing: `Full` holds an `i64`, so its
    /// boxes are aligned to at least 4 and the low bit is clear; the shift frees the top
    /// bit for the flag.
    #[inline(always)]
    fn box_word_is_lossless() {
        const { assert!(std::mem::align_of::<Full<K>>() >= 2) };
    }

    #[inline(always)]
    fn is_boxed(&self) -> bool {
        self.word & BOXED != 0
    }

    /// The box of a boxed entry.
    ///
    /// # Safety
    ///
    /// `self` is boxed.
    #[inline(always)]
    unsafe fn full(&self) -> *mut Full<K> {
        debug_assert!(self.is_boxed());
        std::ptr::with_exposed_provenance_mut(((self.word & !BOXED) << 1) as usize)
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
    #[inline]
    pub(crate) fn timestamp(&self) -> i64 {
        self.any_timestamp()
    }

    /// The key, if any.
    #[inline]
    pub(crate) fn key(&self) -> Option<&K> {
        self.parts().1
    }

    /// The value.
    #[inline(always)]
    pub(crate) fn value(&self) -> &V {
        self.parts().2
    }

    /// The headers, in order (empty for most records).
    #[inline]
    pub(crate) fn headers(&self) -> &[(String, Option<Bytes>)] {
        self.parts().3
    }

    /// Timestamp, key, value and headers, with one test of the shape (the plain one
    /// first: it is the hot one). The value does not depend on the test.
    #[inline(always)]
    pub(crate) fn parts(&self) -> Parts<'_, K, V> {
        if self.word >> 62 == 0 {
            // No flag: the word is the timestamp.
            // SAFETY: not boxed, so not a control record: the value is initialised.
            return (
                self.word as i64,
                None,
                unsafe { self.value.assume_init_ref() },
                &[],
            );
        }
        if !self.is_boxed() {
            let key = if self.word & HAS_KEY != 0 {
                // SAFETY: `HAS_KEY` set (and `BOXED` clear) means `key` is initialised
                // (the invariant on `word`).
                Some(unsafe { self.key.assume_init_ref() })
            } else {
                None
            };
            // SAFETY: not boxed, so not a control record: the value is initialised.
            let value = unsafe { self.value.assume_init_ref() };
            return ((self.word & TIME) as i64, key, value, &[]);
        }
        // SAFETY: `BOXED` set: `full` is the box this entry owns, alive as long as `self`
        // (only `drop` and `into_parts` free it, which take `self`).
        let full = unsafe { &*self.full() };
        assert!(
            !is_control(full),
            "a control record has no value: reads skip them (Entry::is_control)"
        );
        // SAFETY: not a control record (checked above): the value is initialised.
        let value = unsafe { self.value.assume_init_ref() };
        (full.timestamp, full.key.as_ref(), value, &full.headers)
    }

    /// [`parts`](Self::parts) of an entry known not to be boxed (a run whose ring saw
    /// only plain entries: `Ring::published_only_plain`): the timestamp is a mask of the
    /// word, with no test of the shape; the key's test is dead code when the caller does
    /// not look at the key.
    ///
    /// # Safety
    ///
    /// `self` is not boxed.
    #[inline(always)]
    pub(crate) unsafe fn unboxed_parts(&self) -> Parts<'_, K, V> {
        debug_assert!(!self.is_boxed());
        let key = if self.word & HAS_KEY != 0 {
            // SAFETY: `HAS_KEY` set and `BOXED` clear (the caller's guarantee): `key` is
            // initialised (the invariant on `word`).
            Some(unsafe { self.key.assume_init_ref() })
        } else {
            None
        };
        // SAFETY: not boxed (the caller's guarantee), so not a control record: the value is
        // initialised.
        let value = unsafe { self.value.assume_init_ref() };
        ((self.word & TIME) as i64, key, value, &[])
    }

    /// The record's timestamp, key, value and headers, moved out.
    pub(crate) fn into_parts(self) -> (i64, Option<K>, V, Headers) {
        // The fields are moved out below, each once; nothing is left to drop.
        let this = ManuallyDrop::new(self);
        if this.is_boxed() {
            // SAFETY: `BOXED` set: the box this entry owns, taken back once (`this` is
            // never dropped).
            let full = unsafe { Box::from_raw(this.full()) };
            assert!(
                !is_control(&full),
                "a control record has no value: reads skip them (Entry::is_control)"
            );
            // SAFETY: not a control record: the value is initialised; read once, and
            // `this` is never dropped: the value has one owner.
            let value = unsafe { this.value.assume_init_read() };
            let Full {
                timestamp,
                key,
                headers,
                txn: _,
            } = *full;
            return (timestamp, key, value, headers);
        }
        // SAFETY: not boxed, so not a control record: the value is initialised; read once,
        // and `this` is never dropped: the value has one owner.
        let value = unsafe { this.value.assume_init_read() };
        let key = if this.word & HAS_KEY != 0 {
            // SAFETY: `HAS_KEY` set and `BOXED` clear: `key` is initialised; read once, and
            // `this` is never dropped.
            Some(unsafe { this.key.assume_init_read() })
        } else {
            None
        };
        ((this.word & TIME) as i64, key, value, Vec::new())
    }
}

/// Whether a box is a control record's (it has no value).
#[inline(always)]
fn is_control<K>(full: &Full<K>) -> bool {
    full.txn.is_some_and(|t| t.control.is_some())
}

impl<K, V> Entry<K, V> {
    /// A record of a transaction: always boxed (the box carries the producer id and epoch).
    pub(crate) fn transactional(
        timestamp: i64,
        key: Option<K>,
        value: V,
        headers: Headers,
        producer_id: i64,
        epoch: i16,
    ) -> Self {
        Self::boxed(
            timestamp,
            key,
            MaybeUninit::new(value),
            headers,
            Some(TxnMark {
                producer_id,
                epoch,
                control: None,
            }),
        )
    }

    /// A transaction's end marker (a control record: no key, no value).
    pub(crate) fn control(
        timestamp: i64,
        producer_id: i64,
        epoch: i16,
        marker: ControlMarker,
    ) -> Self {
        Self::boxed(
            timestamp,
            None,
            MaybeUninit::uninit(),
            Vec::new(),
            Some(TxnMark {
                producer_id,
                epoch,
                control: Some(marker),
            }),
        )
    }

    /// A boxed entry; `value` is initialised unless `txn` is a control record's.
    fn boxed(
        timestamp: i64,
        key: Option<K>,
        value: MaybeUninit<V>,
        headers: Headers,
        txn: Option<TxnMark>,
    ) -> Self {
        debug_assert!(
            valid_timestamp(timestamp),
            "unchecked timestamp {timestamp}"
        );
        Self::box_word_is_lossless();
        let full = Box::into_raw(Box::new(Full {
            timestamp,
            key,
            headers,
            txn,
        }));
        let address = full.expose_provenance() as u64;
        Self {
            word: (address >> 1) | BOXED,
            key: MaybeUninit::uninit(),
            value,
            _box: PhantomData,
        }
    }

    /// The record's transaction mark: its producer, and whether it is a control record.
    #[inline(always)]
    pub(crate) fn txn(&self) -> Option<TxnMark> {
        if !self.is_boxed() {
            return None;
        }
        // SAFETY: `BOXED` set: the box this entry owns, alive as long as `self`.
        unsafe { (*self.full()).txn }
    }

    /// Whether the entry is a control record (no value: readers skip it).
    #[inline(always)]
    pub(crate) fn is_control(&self) -> bool {
        self.txn().is_some_and(|t| t.control.is_some())
    }

    /// The timestamp of any entry, a control record's too.
    pub(crate) fn any_timestamp(&self) -> i64 {
        if !self.is_boxed() {
            return (self.word & TIME) as i64;
        }
        // SAFETY: `BOXED` set: the box this entry owns, alive as long as `self`.
        unsafe { (*self.full()).timestamp }
    }
}

impl<K: Clone, V: Clone> Clone for Entry<K, V> {
    #[inline]
    fn clone(&self) -> Self {
        if self.is_boxed() {
            // SAFETY: `BOXED` set: the box this entry owns, alive as long as `self`.
            let full = unsafe { &*self.full() };
            // The value first: if a later clone panics, it is a local that drops on its own.
            let value = if is_control(full) {
                None
            } else {
                // SAFETY: not a control record: the value is initialised.
                Some(unsafe { self.value.assume_init_ref() }.clone())
            };
            // The value stays an `Option<V>` until nothing can panic: it drops on unwind.
            let full = Box::new(full.clone());
            let value = value.map_or(MaybeUninit::uninit(), MaybeUninit::new);
            let address = Box::into_raw(full).expose_provenance() as u64;
            return Self {
                word: (address >> 1) | BOXED,
                key: MaybeUninit::uninit(),
                value,
                _box: PhantomData,
            };
        }
        // SAFETY: not boxed, so not a control record: the value is initialised.
        let value = unsafe { self.value.assume_init_ref() }.clone();
        let key = self.key().cloned();
        Self::unboxed((self.word & TIME) as i64, key, value)
    }
}

impl<K, V> Drop for Entry<K, V> {
    #[inline]
    fn drop(&mut self) {
        if self.is_boxed() {
            // SAFETY: `BOXED` set: the box this entry owns, freed once (here).
            let full = unsafe { Box::from_raw(self.full()) };
            let control = is_control(&full);
            // The value is dropped even if the box's contents panic on drop.
            struct DropValue<'a, V>(&'a mut MaybeUninit<V>, bool);
            impl<V> Drop for DropValue<'_, V> {
                fn drop(&mut self) {
                    if self.1 {
                        // SAFETY: set only for an entry that is not a control record,
                        // whose value is initialised; dropped once (here).
                        unsafe { self.0.assume_init_drop() };
                    }
                }
            }
            let _value = DropValue(&mut self.value, !control);
            drop(full);
            return;
        }
        struct DropValue<'a, V>(&'a mut MaybeUninit<V>);
        impl<V> Drop for DropValue<'_, V> {
            fn drop(&mut self) {
                // SAFETY: not boxed, so not a control record: the value is initialised;
                // dropped once (here).
                unsafe { self.0.assume_init_drop() };
            }
        }
        let _value = DropValue(&mut self.value);
        if self.word & HAS_KEY != 0 {
            // SAFETY: `HAS_KEY` set and `BOXED` clear: `key` is initialised, and dropped
            // once (here).
            unsafe { self.key.assume_init_drop() };
        }
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
                // Most records have none: no call into the slice's clone.
                let headers = if headers.is_empty() {
                    Vec::new()
                } else {
                    headers.to_vec()
                };
                (timestamp, key, value, headers)
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
