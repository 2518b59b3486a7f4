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
//! # Stale tags (single producer)
//!
//! A single producer that knows of no non-gating reader (and sees no announced read, see
//! `reader`) writes plain data without touching
//! the state words at all ([`Slots::write_run_untagged`]): the tag stores were half the
//! stores of a batch publish, and readers of a single-producer ring learn what is published
//! from the producer's cursor, not from the tags. So in a single-producer ring a tag may
//! *lag*: it is always the tag of some value the slot held, hence at most the tag of what it
//! holds now, and it is exact for every slot written since the producer saw a non-gating
//! reader. A non-gating reader therefore treats "tag below mine, and my sequence is below the
//! published cursor" as "the slot holds mine" ([`Slot::read_locked`]'s `published`), and a
//! writer taking the lock accepts any tag up to the one it replaces. Overwriting is always
//! tagged while a non-gating reader may read (the overwrite floor, see `registry`; an
//! announcing reader's floor, see `reader`), so "overwritten" is always seen exactly.
//!
//! Sequences stay below `2^56 - 1` (the ring refuses start sequences beyond
//! [`MAX_START`]; at 10^9 entries a second that leaves two years).

use std::mem::MaybeUninit;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{hint, Backoff, UnsafeCell};

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

/// The cache line size assumed by [`Slots::prefetch_run`].
const LINE: usize = 64;
/// The most cache lines [`Slots::prefetch_run`] asks for at once (4 KiB of values: well
/// inside L1, so prefetching never evicts what the reader is about to use).
const PREFETCH_LINES: u64 = 64;

/// All slots of a ring, stored as two arrays (states, values) rather than an array of
/// pairs: a gating reader of a single-producer ring never touches the states, so it pulls
/// only value cache lines from the producer (8 `u64` entries per line instead of 4).
pub(crate) struct Slots<T> {
    /// See the module docs; `states[i]` governs `values[i]`.
    states: Box<[AtomicU64]>,
    /// `values[i]` is initialised when `states[i]`'s tag is non-zero (outside a write); a
    /// single producer's untagged writes may also leave it initialised under tag zero, but
    /// only with values that drop as a no-op (types without drop glue, or plain values),
    /// which need no drop.
    values: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// Where the processor has a write prefetch: [`prefetch_write_run`](Self::prefetch_write_run).
    write_prefetch: Option<hint::WritePrefetch>,
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
            write_prefetch: hint::WritePrefetch::detect(),
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
        // At most two contiguous stretches (before and after the wrap): no mask, no bounds
        // check and no index arithmetic per entry.
        let start = from as usize & self.mask;
        let n = (to - from) as usize;
        let first = n.min(values.len() - start);
        let mut last = None;
        let mut stretch = |cells: &[UnsafeCell<MaybeUninit<T>>], seq: u64| {
            for (i, cell) in cells.iter().enumerate() {
                last = Some(cell.with(|p| {
                    // SAFETY: the caller's guarantee (published, initialised, not
                    // overwritten).
                    f(seq + i as u64, unsafe { (*p).assume_init_ref() })
                }));
            }
        };
        stretch(&values[start..start + first], from);
        if n > first {
            stretch(&values[..n - first], from + first as u64);
        }
        last
    }

    /// Writes `make(seq)` into the value cells of `first..first + len`, leaving the state
    /// words alone: a single producer's plain-data fast path, published afterwards by its
    /// cursor (module docs, "Stale tags"), and the middle pass of a multi-producer plain
    /// run, published afterwards by [`publish_tags`](Self::publish_tags). `written`
    /// counts the cells written, so that a panicking `make` leaves the written prefix
    /// known.
    ///
    /// The run is written as at most two contiguous stretches (before and after the wrap),
    /// so for simple `make` the compiler writes several values per store.
    ///
    /// # Safety
    ///
    /// - The caller has claimed the range, and no reader can be reading its slots: every
    ///   gating reader has passed `seq - capacity`, and no non-gating reader may read at or
    ///   above this producer's overwrite floor (see `sequencer`), so nobody takes the
    ///   slots' locks either.
    /// - No other producer is writing the slots: a single producer, or a multi-producer
    ///   that saw each slot's previous lap published ([`Slot::wait_prev`]).
    /// - Every replaced value drops as a no-op (`T` has no drop glue, or `sequencer`'s
    ///   "Plain values"): they are overwritten without a drop.
    /// - `len <= capacity`.
    #[inline(always)]
    pub(crate) unsafe fn write_run_untagged(
        &self,
        first: u64,
        len: u64,
        mut make: impl FnMut(u64) -> T,
        written: &mut u64,
    ) {
        debug_assert!(len as usize <= self.values.len());
        // Hoisted: `make` may write through pointers the compiler cannot tell from ours.
        let values = &*self.values;
        let start = first as usize & self.mask;
        let head = (len as usize).min(values.len() - start);
        let mut seq = first;
        for stretch in [&values[start..start + head], &values[..len as usize - head]] {
            for cell in stretch {
                let value = make(seq);
                cell.with_mut(|p| {
                    // SAFETY: the caller owns the slot (no reader, no other writer); what it
                    // replaces drops as a no-op, so overwriting leaks nothing.
                    unsafe { (*p).write(value) };
                });
                seq += 1;
                *written += 1;
            }
        }
    }

    /// Multi-producer: waits until each slot of `first..first + len` holds its previous
    /// lap unlocked ([`Slot::wait_prev`] for each, in one tight loop), the first pass of a
    /// plain run. `start` and `capacity` are the ring's (a slot's first lap has tag 0
    /// before it).
    #[inline(always)]
    pub(crate) fn wait_prev_run(&self, first: u64, len: u64, start: u64, capacity: u64) {
        let states = &*self.states;
        for seq in first..first + len {
            let prev = if seq >= start + capacity {
                tag(seq - capacity)
            } else {
                0
            };
            // `seq & mask < states.len()`.
            let state = &states[seq as usize & self.mask];
            // Acquire: pairs with the previous writer's Release store of the tag (as in
            // `Slot::wait_prev`).
            if state.load(Ordering::Acquire) != prev << ACCESS_BITS {
                self.get(seq).wait_prev(prev);
            }
        }
    }

    /// How many of `from..end` are published, from `from` on (each slot's tag is its
    /// sequence's and no writer holds it; an Acquire load each, so the caller sees the
    /// values of those it counts): a multi-producer gating reader's run.
    #[inline(always)]
    pub(crate) fn count_published(&self, from: u64, end: u64) -> u64 {
        let states = &*self.states;
        let mut seq = from;
        while seq < end {
            // `seq & mask < states.len()`.
            let state = &states[seq as usize & self.mask];
            // Acquire: pairs with the writer's Release store of the tag.
            let st = state.load(Ordering::Acquire);
            if st >> ACCESS_BITS != tag(seq) || st & ACCESS_MASK == WRITING {
                break;
            }
            seq += 1;
        }
        seq - from
    }

    /// Publishes `first..first + len` by storing each slot's tag (Release), in order: the
    /// last pass of a multi-producer plain run whose values [`write_run_untagged`] wrote.
    /// The caller holds the slots (claimed, previous lap seen published) and wrote them
    /// unlocked (no non-gating reader may read them), so no access byte is set.
    ///
    /// [`write_run_untagged`]: Self::write_run_untagged
    #[inline(always)]
    pub(crate) fn publish_tags(&self, first: u64, len: u64) {
        let states = &*self.states;
        for seq in first..first + len {
            // `seq & mask < states.len()`.
            let state = &states[seq as usize & self.mask];
            // Release: publishes the value written before it; pairs with the Acquire loads
            // of readers (`is_published`) and of the next lap's writer (`wait_prev`).
            state.store(tag(seq) << ACCESS_BITS, Ordering::Release);
        }
    }

    /// Prefetches the value cells of `from..to` (at most [`PREFETCH_LINES`] cache lines from
    /// `from`), for a reader about to read them all: their misses then overlap instead of
    /// stalling the reader one line at a time. With a producer writing just ahead, each line
    /// is a transfer from the producer's core (the gain is measured in BENCHMARKS.md, "Tuning
    /// constants").
    #[inline]
    pub(crate) fn prefetch_run(&self, from: u64, to: u64) {
        let values = &*self.values;
        let step = (LINE / std::mem::size_of::<T>().max(1)).max(1);
        let n = (to.saturating_sub(from)).min(PREFETCH_LINES * step as u64) as usize;
        let start = from as usize & self.mask;
        // Two contiguous stretches, as in `read_run_unlocked`: a few instructions a line.
        let first = n.min(values.len() - start);
        let wrapped = (n - first).min(start);
        for stretch in [&values[start..start + first], &values[..wrapped]] {
            let mut i = 0;
            while i < stretch.len() {
                hint::prefetch_read(stretch[i].with(|p| p));
                i += step;
            }
        }
    }

    /// Asks for the cache lines of the value cells of `from..to` for writing (at most
    /// [`PREFETCH_LINES`] lines; nothing where the processor has no write prefetch): for a
    /// single producer that has just published a run and will write these next. A lap ago the
    /// reader read them, so each is in the reader's cache and a store must take it from
    /// there; asked for now, they cross while the caller does other work, where otherwise the
    /// next run's stores, and the first fence or lock after them, would wait for them. A read
    /// prefetch is slower than none there: it fetches the lines shared (both measured with the
    /// 1 → 1 batch benchmark: BENCHMARKS.md, "Tuning constants").
    #[inline]
    pub(crate) fn prefetch_write_run(&self, from: u64, to: u64) {
        let Some(prefetch) = self.write_prefetch else {
            return;
        };
        let values = &*self.values;
        let step = (LINE / std::mem::size_of::<T>().max(1)).max(1);
        let n = (to.saturating_sub(from) as usize)
            .min(values.len())
            .min(PREFETCH_LINES as usize * step);
        let start = from as usize & self.mask;
        // Two contiguous stretches, as in `read_run_unlocked`.
        let first = n.min(values.len() - start);
        for stretch in [&values[start..start + first], &values[..n - first]] {
            prefetch.lines(stretch.as_ptr().cast(), std::mem::size_of_val(stretch));
        }
    }

    /// The slot index of sequence `seq`.
    #[inline(always)]
    pub(crate) fn index(&self, seq: u64) -> usize {
        seq as usize & self.mask
    }

    /// The value cell at slot index `index` (for readers that hold the slot by gating).
    ///
    /// # Safety
    ///
    /// `index` is below the capacity.
    #[inline(always)]
    pub(crate) unsafe fn cell_at(&self, index: usize) -> &UnsafeCell<MaybeUninit<T>> {
        debug_assert!(index < self.values.len());
        // SAFETY: the caller's guarantee.
        unsafe { self.values.get_unchecked(index) }
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

    /// Multi-producer: waits until the slot holds `prev_tag` unlocked (the previous lap's
    /// value published, or never written for 0), so that the caller, who claimed the
    /// slot's next sequence, owns it: the previous writer's stores happen before what the
    /// caller does next.
    #[inline(always)]
    pub(crate) fn wait_prev(&self, prev_tag: u64) {
        let mut backoff = Backoff::new();
        // Acquire: pairs with the previous writer's Release store of the tag.
        while self.state.load(Ordering::Acquire) != prev_tag << ACCESS_BITS {
            backoff.snooze();
        }
    }

    /// Writes `value` as sequence `seq`, returning the value it replaces (to be dropped by
    /// the caller outside any lock) if `drop_old()` says so, asked once the slot is ours
    /// (after the Acquire that makes the previous writer's stores visible); otherwise the
    /// old value is overwritten in place, unread.
    ///
    /// `prev_tag` is the tag the slot must hold before this write: that of `seq - capacity`,
    /// or 0 on the ring's first lap. With `wait_prev` the writer waits until the slot holds
    /// it (another producer may still be writing the previous lap). With `lock` the writer
    /// takes the slot's lock, waiting out in-flight clones by non-gating readers.
    ///
    /// # Safety
    ///
    /// - The caller has claimed `seq` (no other producer writes `seq`).
    /// - Without `wait_prev` (single producer), the slot holds the value tagged `prev_tag`
    ///   (its state may show a lagging tag, module docs) and no producer is writing it.
    /// - Without `lock`, no reader can be reading the slot's value: every gating reader has
    ///   passed `seq - capacity` and no non-gating reader may read below this producer's
    ///   overwrite floor (see `sequencer`).
    /// - When `drop_old()` is false, the value replaced (if any) drops as a no-op
    ///   (`sequencer`, "Plain values").
    #[inline(always)]
    pub(crate) unsafe fn write(
        &self,
        seq: u64,
        value: T,
        prev_tag: u64,
        wait_prev: bool,
        lock: bool,
        drop_old: impl FnOnce() -> bool,
    ) -> Option<T> {
        let writing = (tag(seq) << ACCESS_BITS) | WRITING;
        if lock {
            let mut backoff = Backoff::new();
            loop {
                // Acquire (load and CAS): pairs with the Release decrement of the last
                // reader's clone and with the previous writer's Release store, so both
                // happen before this write.
                let st = self.state.load(Ordering::Acquire);
                // Multi-producer tags are exact; a single producer's may lag (module docs).
                let replaceable = if wait_prev {
                    st == prev_tag << ACCESS_BITS
                } else {
                    st & ACCESS_MASK == 0 && st >> ACCESS_BITS <= prev_tag
                };
                if replaceable
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
            debug_assert!(self.tag() <= prev_tag, "slot overwritten out of turn");
        }
        let old = self.value.with_mut(|p| {
            // SAFETY: we own the slot (the lock, or the caller's guarantee that nobody reads
            // it); a non-zero previous tag means the cell is initialised, and the read moves
            // the old value out before the write below overwrites it without dropping.
            unsafe {
                // Plain values are simply overwritten (no read of the old line).
                let old = (prev_tag != 0 && std::mem::needs_drop::<T>() && drop_old())
                    .then(|| (*p).assume_init_read());
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
    ///
    /// `published`: the caller saw `seq` below a single producer's published cursor (Acquire)
    /// and may not read below that producer's overwrite floor; then a lagging tag (below
    /// `seq`'s) means the slot holds `seq` (module docs, "Stale tags"). Multi-producer rings
    /// pass `false`: their tags are exact.
    #[inline]
    pub(crate) fn read_locked<R>(
        &self,
        seq: u64,
        published: bool,
        f: impl FnOnce(&T) -> R,
    ) -> Result<R, Probe> {
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
            if (t < want && !published) || access == WRITING {
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
