//! One slot of the ring: a value cell and the state word that says which sequence it holds
//! and who is touching it.
//!
//! # The state word
//!
//! ```text
//!  63                                   8 7        0
//! +--------------------------------------+----------+
//! |  tag = sequence + 1 of the value     |  access  |
//! +--------------------------------------+----------+
//! ```
//!
//! - `tag == 0`: the slot has never been written; the value cell is uninitialised.
//! - `tag == s + 1`, `access` in `0..=MAX_READERS`: the slot holds the published value of
//!   sequence `s`, and `access` readers are cloning it right now.
//! - `tag == s + 1`, `access == WRITING`: a producer is writing sequence `s` into the slot;
//!   the cell holds the previous value or is being replaced, and nobody may read it.
//!
//! The tag is Disruptor's per-slot availability stamp (so out-of-order multi-producer
//! publishes are seen correctly, and a reader tells "not yet written" from "overwritten");
//! the access byte is a per-slot reader/writer lock held for the length of one clone or one
//! write. A writer takes the lock only when a non-gating reader might be cloning the slot
//! (see `sequencer`): gating readers are protected by gating alone.
//!
//! Sequences stay below `2^56 - 1` (the ring refuses start sequences beyond
//! [`MAX_START`]; at 10^9 entries a second that leaves two years).

use std::mem::MaybeUninit;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Backoff, UnsafeCell};

/// Bits of the access byte.
const ACCESS_BITS: u32 = 8;
const ACCESS_MASK: u64 = (1 << ACCESS_BITS) - 1;
/// The access byte while a producer writes the slot.
const WRITING: u64 = ACCESS_MASK;
/// The most readers that clone one slot at the same time (more wait their turn).
const MAX_READERS: u64 = WRITING - 1;

/// The largest sequence a ring may start at (sequences must fit in 56 bits).
pub(crate) const MAX_START: u64 = 1 << 55;

/// The tag of sequence `seq`.
#[inline]
pub(crate) const fn tag(seq: u64) -> u64 {
    seq + 1
}

/// What a locked read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The sequence is not published yet (never written, or still being written).
    NotYet,
    /// The slot already holds a later sequence: the asked one was overwritten. Carries the
    /// later sequence.
    Overwritten(u64),
}

/// All slots of a ring, stored as two arrays (states, values) rather than an array of
/// pairs: a gating reader of a single-producer ring never touches the states, so it pulls
/// only value cache lines from the producer (8 `u64` entries per line instead of 4).
pub(crate) struct Slots<T> {
    /// See the module docs; `states[i]` governs `values[i]`.
    states: Box<[AtomicU64]>,
    /// `values[i]` is initialised exactly when `states[i]`'s tag is non-zero (outside a
    /// write).
    values: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
}

// SAFETY: the slots hand out `&T` to several reader threads at once (clones run concurrently
// under the shared access count) and move values in from producer threads and out to the
// thread that drops the ring: that needs `T: Send + Sync`. Every access to a value follows
// the protocol on its state word (or the gating argument in `sequencer`), so there are no
// data races.
unsafe impl<T: Send + Sync> Sync for Slots<T> {}

impl<T> Slots<T> {
    /// `capacity` empty slots (a power of two).
    pub(crate) fn new(capacity: usize) -> Self {
        debug_assert!(capacity.is_power_of_two());
        Self {
            states: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            values: (0..capacity)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            mask: capacity - 1,
        }
    }

    /// Runs `f(seq, &value)` over the values of `from..to` without taking slot locks.
    ///
    /// # Safety
    ///
    /// As [`Slot::read_unlocked`] for every sequence of the range (all published, seen with
    /// Acquire, and protected by the caller's gating cursor); `to - from <= capacity`.
    #[inline(always)]
    pub(crate) unsafe fn read_run_unlocked<R>(
        &self,
        from: u64,
        to: u64,
        mut f: impl FnMut(u64, &T) -> R,
    ) -> Option<R> {
        // Hoisted out of the loop: the caller's closure may write through pointers the
        // compiler cannot tell apart from ours.
        let values = &*self.values;
        let mask = self.mask;
        let mut last = None;
        for seq in from..to {
            // SAFETY: `seq & mask < values.len()`.
            let cell = unsafe { values.get_unchecked(seq as usize & mask) };
            last = Some(cell.with(|p| {
                // SAFETY: the caller's guarantee (published, initialised, not overwritten).
                f(seq, unsafe { (*p).assume_init_ref() })
            }));
        }
        last
    }

    /// Writes `make(seq)` into the slots of `first..first + len` without locks, for a type
    /// without drop glue (the replaced values need no drop), tagging each slot in order (if
    /// `make` panics, the written prefix is the run of slots carrying their new tags).
    ///
    /// # Safety
    ///
    /// As [`Slot::write`] without `lock` and without `wait_prev`, for every sequence of the
    /// range; `T` has no drop glue; `len <= capacity`.
    #[inline(always)]
    pub(crate) unsafe fn write_run_unlocked(
        &self,
        first: u64,
        len: u64,
        mut make: impl FnMut(u64) -> T,
    ) {
        debug_assert!(!std::mem::needs_drop::<T>());
        // Hoisted: `make` may write through pointers the compiler cannot tell from ours.
        let states = &*self.states;
        let values = &*self.values;
        let mask = self.mask;
        for i in 0..len {
            let seq = first + i;
            let idx = seq as usize & mask;
            let value = make(seq);
            // SAFETY: `idx <= mask` indexes both arrays; the caller owns the slot (as for
            // `Slot::write`); `T` has no drop glue, so overwriting leaks nothing.
            unsafe {
                values.get_unchecked(idx).with_mut(|p| {
                    (*p).write(value);
                });
                // Release: publishes the value (see `Slot::write`).
                states
                    .get_unchecked(idx)
                    .store(tag(seq) << ACCESS_BITS, Ordering::Release);
            }
        }
    }

    /// The value cell of sequence `seq` (for readers that hold the slot by gating).
    #[inline(always)]
    pub(crate) fn value_cell(&self, seq: u64) -> &UnsafeCell<MaybeUninit<T>> {
        // SAFETY: `values` has `mask + 1` elements and the index is at most `mask`.
        unsafe { self.values.get_unchecked(seq as usize & self.mask) }
    }

    /// The slot of sequence `seq`.
    #[inline(always)]
    pub(crate) fn get(&self, seq: u64) -> Slot<'_, T> {
        let i = seq as usize & self.mask;
        debug_assert!(i < self.states.len() && i < self.values.len());
        // SAFETY: both arrays have `mask + 1` elements, and `i <= mask`.
        unsafe {
            Slot {
                state: self.states.get_unchecked(i),
                value: self.values.get_unchecked(i),
            }
        }
    }
}

impl<T> Drop for Slots<T> {
    fn drop(&mut self) {
        for (state, value) in self.states.iter_mut().zip(self.values.iter_mut()) {
            // Relaxed: `&mut self`, no other thread can touch the slot.
            let st = state.load(Ordering::Relaxed);
            debug_assert_ne!(st & ACCESS_MASK, WRITING);
            if st >> ACCESS_BITS != 0 {
                value.with_mut(|p| {
                    // SAFETY: a non-zero tag means the cell is initialised; `&mut self`
                    // means no one else uses it; the tag is cleared below so it is dropped
                    // once.
                    unsafe { (*p).assume_init_drop() }
                });
                state.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// One slot: its state word and its value cell.
pub(crate) struct Slot<'a, T> {
    state: &'a AtomicU64,
    value: &'a UnsafeCell<MaybeUninit<T>>,
}

impl<T> Slot<'_, T> {
    /// The tag currently stored (ignores the access byte).
    #[inline]
    pub(crate) fn tag(&self) -> u64 {
        // Acquire: pairs with the Release store in `write`, so a caller that sees a tag sees
        // the value written under it.
        self.state.load(Ordering::Acquire) >> ACCESS_BITS
    }

    /// Whether the slot holds the published value of `seq` (not mid-write).
    #[inline]
    pub(crate) fn is_published(&self, seq: u64) -> bool {
        // Acquire: as in `tag`.
        let st = self.state.load(Ordering::Acquire);
        st >> ACCESS_BITS == tag(seq) && st & ACCESS_MASK != WRITING
    }

    /// Whether the slot holds `seq` or a later sequence, published or being written: used by
    /// parked readers to decide whether to wake.
    #[inline]
    pub(crate) fn reached(&self, seq: u64) -> bool {
        // Acquire: as in `tag`.
        let st = self.state.load(Ordering::Acquire);
        let t = st >> ACCESS_BITS;
        t > tag(seq) || (t == tag(seq) && st & ACCESS_MASK != WRITING)
    }

    /// Writes `value` as sequence `seq`, returning the value it replaces (to be dropped by
    /// the caller outside any lock).
    ///
    /// `prev_tag` is the tag the slot must hold before this write: that of `seq - capacity`,
    /// or 0 on the ring's first lap. With `wait_prev` the writer waits until the slot holds
    /// it (another producer may still be writing the previous lap). With `lock` the writer
    /// takes the slot's lock, waiting out in-flight clones by non-gating readers.
    ///
    /// # Safety
    ///
    /// - The caller has claimed `seq` (no other producer writes `seq`).
    /// - Without `wait_prev`, the slot already holds `prev_tag` and no producer is writing it.
    /// - Without `lock`, no reader can be reading the slot's value: every gating reader has
    ///   passed `seq - capacity` and no non-gating reader may read below this producer's
    ///   overwrite floor (see `sequencer`).
    #[inline(always)]
    pub(crate) unsafe fn write(
        &self,
        seq: u64,
        value: T,
        prev_tag: u64,
        wait_prev: bool,
        lock: bool,
    ) -> Option<T> {
        let writing = (tag(seq) << ACCESS_BITS) | WRITING;
        if lock {
            let mut backoff = Backoff::new();
            loop {
                // Acquire (load and CAS): pairs with the Release decrement of the last
                // reader's clone and with the previous writer's Release store, so both
                // happen before this write.
                let st = self.state.load(Ordering::Acquire);
                if st == prev_tag << ACCESS_BITS
                    && self
                        .state
                        .compare_exchange_weak(st, writing, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    break;
                }
                // A clone in flight, or the previous lap still being written: both finish
                // in bounded time (a clone, a write), so spin and yield, never park.
                backoff.snooze();
            }
        } else if wait_prev {
            let mut backoff = Backoff::new();
            // Acquire: pairs with the previous writer's Release store.
            while self.state.load(Ordering::Acquire) != prev_tag << ACCESS_BITS {
                backoff.snooze();
            }
        } else {
            debug_assert_eq!(self.tag(), prev_tag, "slot overwritten out of turn");
        }
        let old = self.value.with_mut(|p| {
            // SAFETY: we own the slot (the lock, or the caller's guarantee that nobody reads
            // it); a non-zero previous tag means the cell is initialised, and the read moves
            // the old value out before the write below overwrites it without dropping.
            unsafe {
                // Types without drop glue are simply overwritten (no read of the old line).
                let old =
                    (prev_tag != 0 && std::mem::needs_drop::<T>()).then(|| (*p).assume_init_read());
                (*p).write(value);
                old
            }
        });
        // Release: publishes the value; pairs with the Acquire loads of readers and of the
        // next lap's writer.
        self.state.store(tag(seq) << ACCESS_BITS, Ordering::Release);
        old
    }

    /// Runs `f` on the value of `seq` without taking the lock.
    ///
    /// # Safety
    ///
    /// The caller has seen `seq` published in this slot (an Acquire load of the tag or of
    /// the producer's cursor) and is a gating reader that has not passed `seq`, so no
    /// producer can overwrite the slot until it does.
    #[inline(always)]
    pub(crate) unsafe fn read_unlocked<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.value.with(|p| {
            // SAFETY: published (initialised) and not overwritten while the caller's cursor
            // stays at or below `seq` (the caller's guarantee).
            f(unsafe { (*p).assume_init_ref() })
        })
    }

    /// Runs `f` on the value of `seq` under the slot's shared lock, or says why it cannot.
    #[inline]
    pub(crate) fn read_locked<R>(&self, seq: u64, f: impl FnOnce(&T) -> R) -> Result<R, Probe> {
        let want = tag(seq);
        let mut backoff = Backoff::new();
        loop {
            // Acquire: pairs with the writer's Release store of the tag (see `write`).
            let st = self.state.load(Ordering::Acquire);
            let t = st >> ACCESS_BITS;
            let access = st & ACCESS_MASK;
            if t > want {
                return Err(Probe::Overwritten(t - 1));
            }
            if t < want || access == WRITING {
                return Err(Probe::NotYet);
            }
            if access == MAX_READERS {
                backoff.snooze();
                continue;
            }
            // Acquire: as above (a failed or successful CAS reads the latest release
            // sequence of the writer's store).
            if self
                .state
                .compare_exchange_weak(st, st + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                backoff.spin();
                continue;
            }
            let _unlock = ReadGuard(self.state);
            return Ok(self.value.with(|p| {
                // SAFETY: the tag says `seq` is published (initialised), and our share of the
                // access count keeps writers out until `_unlock` drops.
                f(unsafe { (*p).assume_init_ref() })
            }));
        }
    }
}

/// Releases a reader's share of a slot's access count, also on unwind from a panicking
/// `Clone`.
struct ReadGuard<'a>(&'a AtomicU64);

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        // Release: the clone happens before a writer's Acquire CAS that sees the count drop.
        self.0.fetch_sub(1, Ordering::Release);
    }
}
