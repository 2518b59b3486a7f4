//! Claiming and publishing: the LMAX Disruptor's sequencers, single- and multi-producer.
//!
//! - **Single producer.** Claims are private: the producer bumps its own `next` and, after
//!   writing, stores the end of the run into the shared published cursor (a plain `Release`
//!   store, no read-modify-write). It re-reads the gating readers only when its cached limit
//!   says the ring may be full.
//! - **Multi-producer.** Producers claim runs with a CAS on the shared claim cursor (a CAS
//!   rather than the Disruptor's `fetch_add` because the claim must stay under the gating
//!   limit, and because the same word carries the closed bit). Each slot's tag is its
//!   availability stamp, so readers see out-of-order publishes correctly.
//!
//! Both write a run of slots and publish it once, then notify parked readers with the light
//! fence (no system call unless a reader is parked). A producer waits (yield, then park) only
//! for gating readers in [`LapPolicy::Block`](super::LapPolicy::Block) mode.
//!
//! # Why unlocked writes are sound
//!
//! A write takes the slot lock only when the producer's [`GateView`] says a non-gating reader
//! exists. Otherwise the only readers are gating ones, and the producer claims `s` only below
//! `min(gating cursors) + capacity`, so every gating reader has passed `s - capacity` (its
//! Release cursor store, read with Acquire) before its slot is overwritten. A non-gating
//! reader that joined after the producer's last refresh starts at or above the overwrite
//! floor, which no claim under a stale limit reaches (see `registry`).
//! An announcing reader (multi-producer rings, see `reader`) is not in the producer's view:
//! each claimed run checks for reads it announced, after the claim and a `SeqCst` fence,
//! and takes the locks for the run if one is in progress; the reader reads only above every
//! slot that a run claimed before its announcement overwrites.
//!
//! A single producer that also has plain data (no drop glue) goes one step further: it writes
//! only the value cells and publishes the run by its cursor store, leaving the slot tags to
//! lag (`slot`, "Stale tags"). Readers of a single-producer ring take publication from the
//! cursor, and every overwrite a non-gating reader could observe happens after the producer
//! saw that reader, hence under the slot lock with an exact tag.
//!
//! # Plain values
//!
//! Overwriting a slot normally moves the old value out to drop it (a read of the old line,
//! and a guard in case its `Drop` panics). A ring told which values drop as a no-op (the
//! partition's entries without headers: `Shared::plain`) skips that for the slots it knows
//! hold such values. Two questions are kept apart:
//!
//! - **Does the value a write replaces need its drop?** A single producer wrote every value
//!   the ring holds, so it answers from its own record (`impure_slots`, module `impure`):
//!   a bit per slot, set when it writes a value that is not plain, cleared when a write
//!   drops that value. A run of plain values overwrites unread every slot whose bit is
//!   clear and replaces each marked one with a tagged write that reads its value back: a
//!   partition's transaction markers (one boxed entry per transaction) cost one slot each,
//!   and the runs between them keep the batch path. The record is the handle's own memory,
//!   ordered with the writes by program order (and, for the partition's appenders, by the
//!   lock they share the handle under). Multi-producer rings ask `Shared::impure` per slot
//!   instead, after their Acquire load (or CAS) of the tag they replace: a producer whose
//!   run holds a value that is not plain sets it *before* its claim, hence before the
//!   Release store of each of its slots' tags.
//! - **May a published run hold a value that is not plain?** Readers that read in place
//!   without asking each value's shape (the partition's lending reads:
//!   `Shared::published_only_plain`) ask `Shared::impure`, set for good before the first
//!   such value is published (before the Release store of the cursor that publishes it).
//!
//! Slots written unread are overwritten without a drop; everything else drops as before.
//!
//! # Plain runs (multi-producer)
//!
//! A multi-producer run of plain values, written with no slot lock, goes in three passes
//! instead of one slot at a time: wait until every slot of the run holds its previous lap
//! (an Acquire load each), ask `impure` once (after all of those loads, so it sees the flag
//! of any impure value the run replaces), move the values into the cells, then store the
//! tags (Release, in order). Readers see each slot published only by its tag, as before;
//! the loops are tight enough for the compiler to unroll them. A multi-producer ring takes
//! no `plain` function (`Ring::multi_producer`), so its plain runs are those of a `T`
//! without drop glue, and nothing there sets `impure`: the path serves such rings (the
//! public `MultiProducer` of `Copy`-like values); the flag's check stays, one load per
//! run, so that the argument above does not depend on who may set it.

use super::impure::ImpureSlots;
use super::registry::GateView;
use super::shared::{Shared, CLOSED_BIT};
use super::wait;
use crate::sync::atomic::Ordering;
use crate::sync::time::Instant;
use crate::sync::{asym_fence, Arc, Backoff};

/// How long a publish may wait for space.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// Not at all.
    No,
    /// Until the deadline (`None`: forever).
    Until(Option<Instant>),
}

/// Why a publish stopped before publishing everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Full,
    Closed,
    Timeout,
}

enum Claim {
    /// `len` sequences from `first` are ours.
    Run {
        first: u64,
        len: u64,
    },
    Full {
        at: u64,
    },
    Closed,
}

/// Single producer: leaves a publish (everything claimed is published by now, `next` is the
/// end); finishes a close that raced with it.
fn leave_sp<T>(shared: &Shared<T>, next: u64) {
    debug_assert_eq!(shared.tail(), next);
    // Release: `close` loads it with Acquire, then `published`.
    shared.busy.store(false, Ordering::Release);
    asym_fence::light();
    if shared.is_close_requested() {
        shared.finish_close(next);
    }
}

/// A single-producer run being written by `publish_with`: publishes what was written when
/// dropped, and on unwind gives the unwritten rest of the claim back and leaves the publish.
struct SpRun<'a, T> {
    shared: &'a Shared<T>,
    next: &'a mut u64,
    first: u64,
    /// Slots written so far (in order from `first`).
    written: u64,
    len: u64,
    /// Set when the run ended normally; otherwise the drop is an unwind and must also leave
    /// the publish.
    done: bool,
}

impl<T> Drop for SpRun<'_, T> {
    fn drop(&mut self) {
        debug_assert!(self.written <= self.len);
        let end = self.first + self.written;
        // Unclaim the slots never written (nothing to undo in them: their tags and values
        // are untouched).
        *self.next = end;
        if self.shared.announces && self.written < self.len {
            // Relaxed: a lower claim only lowers an announcing reader's floor to where the
            // writes really went (what it reads is still ordered by the cursor).
            self.shared.claim.store(end, Ordering::Relaxed);
        }
        // Release: publishes the written slots to readers' Acquire loads.
        self.shared.published.store(end, Ordering::Release);
        self.shared.readers_wait.notify_all_light();
        if !self.done {
            leave_sp(self.shared, end);
        }
    }
}

/// One producer handle's private state.
#[derive(Debug)]
pub(crate) struct Sequencer<T> {
    pub(crate) shared: Arc<Shared<T>>,
    view: GateView,
    /// Claims stay below this (exclusive); see `registry`.
    limit: u64,
    /// Single producer: the next sequence to claim.
    next: u64,
    /// The sequence of the last entry this handle published ([`LAST_NONE`] before the first).
    last: u64,
    /// Single producer over a ring with a `plain` predicate: the slots that may hold a value
    /// that is not plain (module docs, "Plain values").
    impure_slots: ImpureSlots,
}

/// `Sequencer::last` before the handle published anything.
const LAST_NONE: u64 = u64::MAX;

impl<T> Sequencer<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>) -> Self {
        let next = shared.start;
        let impure_slots = ImpureSlots::new(shared.capacity);
        Self {
            shared,
            view: GateView::new(),
            // Forces a refresh before the first claim.
            limit: 0,
            next,
            last: LAST_NONE,
            impure_slots,
        }
    }

    /// The next sequence this producer will claim (single producer), or the ring's claim
    /// cursor (multi-producer).
    pub(crate) fn next_sequence(&self) -> u64 {
        if self.shared.multi {
            self.shared.tail()
        } else {
            self.next
        }
    }

    /// The sequence of the last entry this handle published, if any.
    pub(crate) fn last_sequence(&self) -> Option<u64> {
        (self.last != LAST_NONE).then_some(self.last)
    }

    /// Recomputes the claim limit at claim position `at`.
    fn refresh(shared: &Shared<T>, view: &mut GateView, at: u64) -> u64 {
        let blocks = shared.blocks();
        shared.registry.refresh(view, !shared.multi, |view| {
            let gate = match view.min_gate() {
                Some(g) if blocks => g.min(at),
                _ => at,
            };
            gate + shared.capacity
        })
    }

    /// Claims up to `want` sequences, at least `min_len` of them (else `Full`).
    fn claim(&mut self, want: u64, min_len: u64) -> Claim {
        if !self.shared.multi {
            if self.next + want > self.limit {
                self.limit = Self::refresh(&self.shared, &mut self.view, self.next);
                if self.next + min_len > self.limit {
                    return Claim::Full { at: self.next };
                }
            }
            let len = want.min(self.limit - self.next);
            let first = self.next;
            self.next += len;
            return Claim::Run { first, len };
        }
        let claim = &self.shared.claim;
        let mut backoff = Backoff::new();
        // Relaxed: the CAS below decides; this is its first guess.
        let mut c = claim.load(Ordering::Relaxed);
        loop {
            if c & CLOSED_BIT != 0 {
                return Claim::Closed;
            }
            if c + want > self.limit {
                self.limit = Self::refresh(&self.shared, &mut self.view, c);
                if c + min_len > self.limit {
                    return Claim::Full { at: c };
                }
            }
            let len = want.min(self.limit - c);
            // Relaxed on both: the claim only hands out sequence numbers; slot contents are
            // ordered by the slot tags (Acquire/Release in `slot`), gating by the cursors.
            match claim.compare_exchange_weak(c, c + len, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Claim::Run { first: c, len },
                Err(now) => {
                    c = now;
                    backoff.spin();
                }
            }
        }
    }

    /// Waits until a claim of `need` sequences at `at` might fit, the reader set changes,
    /// the ring closes or the deadline passes. Returns `false` on timeout.
    /// After a claim found the ring full at `at`: waits for `min_len` free slots as `wait`
    /// allows and returns `None` to claim again, or why the batch stops.
    fn wait_or_stop(&self, at: u64, min_len: u64, wait: Wait) -> Option<Stop> {
        if self.shared.is_close_requested() {
            return Some(Stop::Closed);
        }
        match wait {
            Wait::No => Some(Stop::Full),
            Wait::Until(deadline) => {
                (!self.wait_for_space(at, min_len, deadline)).then_some(Stop::Timeout)
            }
        }
    }

    fn wait_for_space(&self, at: u64, need: u64, deadline: Option<Instant>) -> bool {
        let shared = &*self.shared;
        let ready = || {
            shared.is_close_requested()
                || !shared.registry.is_current(&self.view)
                || self
                    .view
                    .min_gate()
                    .map_or(true, |g| g.saturating_add(shared.capacity) >= at + need)
        };
        wait::wait_until(&shared.producers_wait, deadline, ready)
    }

    /// Publishes `n` values read from `src` (moved out, in order), claiming and writing runs
    /// as space allows. Returns how many were published (moved into the ring) and why it
    /// stopped early, if it did.
    ///
    /// # Safety
    ///
    /// `src..src + n` are initialised values the caller gives up: the first `returned.0` of
    /// them are moved into the ring; the caller must neither use nor drop those, and keeps
    /// ownership of the rest.
    ///
    /// `plain`, when the caller knows it: whether every value drops as a no-op (else the
    /// ring asks `Shared::plain` of each).
    pub(crate) unsafe fn publish_from(
        &mut self,
        src: *const T,
        n: usize,
        wait: Wait,
        plain: Option<bool>,
    ) -> (usize, Option<Stop>) {
        // SAFETY: the caller gave us `n` initialised values at `src`.
        let values = || unsafe { std::slice::from_raw_parts(src, n) };
        let plain = match plain {
            Some(plain) => {
                debug_assert!(!plain || self.shared.all_plain(values()), "not plain");
                plain
            }
            None => self.shared.all_plain(values()),
        };
        // SAFETY: the caller gave us `n` initialised values at `src`, each taken at most
        // once (`publish_made` asks for each index once, in order); reading can't panic.
        unsafe { self.publish_made(n, move |i| src.add(i).read(), wait, plain) }
    }

    /// Publishes `n` values made by `make(i)` (`i` in `0..n`, in order), claiming and
    /// writing runs as space allows, as [`publish_from`](Self::publish_from) does for values
    /// read from memory. Returns how many were published and why it stopped early, if it
    /// did; `make` was called exactly that many times. `make` is `Copy` so that each run's
    /// loop holds its state in registers (a closure borrowed through the loop is reloaded
    /// after every slot write, which may alias it).
    ///
    /// # Safety
    ///
    /// `make` never panics (a claimed slot would be left unwritten) and touches no ring;
    /// `plain` only if every value it makes drops as a no-op and the ring tracks plain
    /// values (`Shared::plain` is set, or `T` has no drop glue): the single producer then
    /// overwrites unread the slots it knows hold plain values (module docs, "Plain values").
    pub(crate) unsafe fn publish_made(
        &mut self,
        n: usize,
        make: impl Fn(usize) -> T + Copy,
        wait: Wait,
        plain: bool,
    ) -> (usize, Option<Stop>) {
        // SAFETY: the caller's contract is the fast path's.
        if let Some(done) = unsafe { self.publish_made_fast(n, make, plain) } {
            return done;
        }
        if !self.shared.multi && !self.begin_sp() {
            return (0, Some(Stop::Closed));
        }
        let plain = plain || !std::mem::needs_drop::<T>();
        if !plain {
            // Before any claim (module docs, "Plain values").
            self.shared.mark_impure();
        }
        let mut done = 0usize;
        let mut stop = None;
        while done < n {
            let want = (n - done) as u64;
            // Blocking publishes wait for room for a whole run (up to the capacity), as the
            // Disruptor's batch claim does: fewer, larger runs, and fewer limit refreshes
            // than chasing the slowest reader one slot at a time.
            let min_len = match wait {
                Wait::No => 1,
                Wait::Until(_) => want.min(self.shared.capacity),
            };
            match self.claim(want, min_len) {
                Claim::Run { first, len } => {
                    let from = done;
                    // SAFETY: `first..first + len` are claimed by us; `make` gives the
                    // values `done..done + len` (len ≤ n - done), once each, without
                    // panicking (caller); `plain` as `write_run` requires (caller).
                    unsafe { self.write_run(first, len as usize, plain, move |i| make(from + i)) };
                    self.last = first + len - 1;
                    done += len as usize;
                }
                Claim::Closed => {
                    stop = Some(Stop::Closed);
                    break;
                }
                Claim::Full { at } => {
                    if let Some(why) = self.wait_or_stop(at, min_len, wait) {
                        stop = Some(why);
                        break;
                    }
                }
            }
        }
        if !self.shared.multi {
            self.end_sp();
            if done > 0 {
                // As in the fast path: the next run's lines, while the caller does other
                // work (this path runs at least once a lap, to refresh the limit).
                let next = self.next;
                self.shared
                    .slots
                    .prefetch_write_run(next, next.saturating_add(n as u64).min(self.limit));
            }
        }
        (done, stop)
    }

    /// [`publish_made`](Self::publish_made)'s common case in one straight line: a single
    /// producer whose cached limit already has room for all `n` values, no non-gating reader
    /// in its view, and plain values over a ring that held only plain ones — one run, written
    /// untagged (`slot`, "Stale tags") and published by one cursor store, with the publish's
    /// exit and the readers' notification sharing one light fence (as in
    /// [`try_fast_one`](Self::try_fast_one)). No loop over runs, no claim call, no unwind
    /// guard. Returns `None`, having touched nothing, when the general path must decide
    /// (multi-producer, a limit to refresh, a reader in view, values that may need drops).
    ///
    /// # Safety
    ///
    /// As [`publish_made`](Self::publish_made).
    #[inline(always)]
    unsafe fn publish_made_fast(
        &mut self,
        n: usize,
        make: impl Fn(usize) -> T + Copy,
        plain: bool,
    ) -> Option<(usize, Option<Stop>)> {
        let len = n as u64;
        let plain = plain || !std::mem::needs_drop::<T>();
        // `next + len <= limit` also bounds the run by the capacity (`limit` is at most the
        // claim position at its refresh plus the capacity, and `next` only grows).
        if self.shared.multi
            || n == 0
            || !plain
            || self.view.lossy()
            || self.next + len > self.limit
            // A slot of the run may hold a value that needs its drop (module docs, "Plain
            // values"); `len` is at most the capacity here (the limit's test above).
            || (std::mem::needs_drop::<T>()
                && self.impure_slots.next_marked(self.next, self.next + len) != self.next + len)
        {
            return None;
        }
        if !self.begin_sp() {
            return Some((0, Some(Stop::Closed)));
        }
        let first = self.next;
        let end = first + len;
        if self.announced_run(end) {
            // An announcing reader is reading: the general path's locked writes.
            self.next = end;
            // SAFETY: `first..end` is claimed by us (single producer, under the limit);
            // `make` and `plain` as the caller promised.
            unsafe { self.write_run(first, n, plain, make) };
            self.last = end - 1;
            self.end_sp();
            return Some((n, None));
        }
        let shared = &*self.shared;
        // SAFETY: `first..end` is below the limit, so ours (single producer) and at most
        // the capacity long; no non-gating reader is known and no read is announced (module
        // docs); the values written and those they replace drop as no-ops (`plain`, and no
        // slot of the run is marked in `impure_slots`, or `T` has no drop glue); `make`
        // does not panic (caller).
        unsafe {
            shared.slots.write_run_untagged(
                first,
                len,
                move |seq| make((seq - first) as usize),
                &mut 0,
            );
        }
        self.next = end;
        self.last = end - 1;
        // Release: publishes the run's slot writes to readers' Acquire loads.
        shared.published.store(end, Ordering::Release);
        // Leaving the publish (`leave_sp`) and notifying readers share one light fence.
        // Release: `close` loads `busy` with Acquire, then `published`.
        shared.busy.store(false, Ordering::Release);
        asym_fence::light();
        if shared.is_close_requested() {
            shared.finish_close(end);
        }
        shared.readers_wait.notify_all_after_light_fence();
        // The next run of the same length, as far as the limit allows (past it the reader
        // may still be reading): its lines cross from the reader's cache meanwhile.
        shared
            .slots
            .prefetch_write_run(end, end.saturating_add(len).min(self.limit));
        Some((n, None))
    }

    /// Single producer, one value, known space: the fast path of `publish`. Hands the value
    /// back when the slow path must decide (limit reached, ring closing, multi-producer).
    #[inline(always)]
    pub(crate) fn try_fast_one(&mut self, value: T) -> Result<(), T> {
        let shared = &*self.shared;
        if shared.multi || self.next >= self.limit {
            return Err(value);
        }
        let seq = self.next;
        if !self.begin_sp() {
            return Err(value);
        }
        let plain = shared.all_plain(std::slice::from_ref(&value));
        if !plain {
            // Before the write (module docs, "Plain values").
            shared.mark_impure();
        }
        // The write below drops what it replaces (or `T` has no drop glue).
        Self::note_slot(shared, &mut self.impure_slots, seq, plain);
        let lock = self.view.lossy() || self.announced_run(seq + 1);
        let old = if !lock && !std::mem::needs_drop::<T>() {
            let mut value = Some(value);
            // SAFETY: `seq < limit` is ours (single producer), no non-gating reader is known
            // (module docs), `T` has no drop glue.
            unsafe {
                shared.slots.write_run_untagged(
                    seq,
                    1,
                    |_| value.take().expect("one value"),
                    &mut 0,
                );
            }
            None
        } else {
            // SAFETY: `seq < limit` is ours (single producer); the slot holds
            // `seq - capacity` (or nothing) and, per our gate view, needs the lock only if a
            // non-gating reader exists (module docs).
            unsafe {
                shared
                    .slot(seq)
                    .write(seq, value, shared.prev_tag(seq), false, lock, || true)
            }
        };
        self.next = seq + 1;
        self.last = seq;
        // Release: publishes the slot write to readers' Acquire loads.
        shared.published.store(seq + 1, Ordering::Release);
        // Leaving the publish (`leave_sp`) and notifying readers share one light fence.
        // Release: `close` loads `busy` with Acquire, then `published`.
        shared.busy.store(false, Ordering::Release);
        asym_fence::light();
        if shared.is_close_requested() {
            shared.finish_close(seq + 1);
        }
        shared.readers_wait.notify_all_after_light_fence();
        drop(old);
        Ok(())
    }

    /// After claiming a run ending at `end` (before writing it): whether an announcing
    /// reader may be reading, so that the run's writes must take the slot locks (module
    /// docs). A single producer built for announcing readers first publishes its claim.
    #[inline]
    fn announced_run(&self, end: u64) -> bool {
        let shared = &*self.shared;
        if shared.multi {
            shared.reads_announced()
        } else if shared.announces {
            // Relaxed: ordered before the load of the count by `reads_announced`'s fence,
            // which pairs with the one in `Shared::announce` (Dekker's handshake).
            shared.claim.store(end, Ordering::Relaxed);
            shared.reads_announced()
        } else {
            false
        }
    }

    /// Single producer, before writing `seq` with a write that drops the value it replaces:
    /// records in `slots` whether the slot will hold a value that is not plain (module
    /// docs, "Plain values"). Only a ring with a `plain` predicate has plain values of a
    /// type with drop glue, so only there does any run consult the record.
    #[inline(always)]
    fn note_slot(shared: &Shared<T>, slots: &mut ImpureSlots, seq: u64, plain: bool) {
        // Without drop glue (known at compile time) nothing needs a drop.
        if std::mem::needs_drop::<T>() && shared.plain.is_some() {
            if plain {
                slots.clear(seq);
            } else {
                slots.mark(seq);
            }
        }
    }

    /// Single producer: enters a publish (the close handshake, see `Shared::close`).
    #[inline]
    fn begin_sp(&self) -> bool {
        let shared = &*self.shared;
        // Relaxed: ordered before the load below by the light fence, which pairs with the
        // heavy fence in `close`.
        shared.busy.store(true, Ordering::Relaxed);
        asym_fence::light();
        if shared.is_close_requested() {
            self.end_sp();
            return false;
        }
        true
    }

    /// Single producer: leaves a publish (everything claimed is published by now); finishes
    /// a close that raced with it.
    #[inline]
    fn end_sp(&self) {
        leave_sp(&self.shared, self.next);
    }

    /// Single producer: publishes `n` values made by `make(sequence)` straight into their
    /// slots, claiming and publishing whole runs (the Disruptor's batch publish). If `make`
    /// (or an old value's `Drop`) panics, what was written so far is published, the rest of
    /// the claim is given back, and the panic continues.
    pub(crate) fn publish_with(
        &mut self,
        n: usize,
        mut make: impl FnMut(u64) -> T,
        wait: Wait,
    ) -> (usize, Option<Stop>) {
        debug_assert!(!self.shared.multi, "publish_with is single-producer only");
        if !self.begin_sp() {
            return (0, Some(Stop::Closed));
        }
        let mut done = 0usize;
        let mut stop = None;
        while done < n {
            let want = (n - done) as u64;
            let min_len = match wait {
                Wait::No => 1,
                Wait::Until(_) => want.min(self.shared.capacity),
            };
            match self.claim(want, min_len) {
                Claim::Run { first, len } => {
                    let lock = self.view.lossy() || self.announced_run(first + len);
                    let mut run = SpRun {
                        shared: &self.shared,
                        next: &mut self.next,
                        first,
                        written: 0,
                        len,
                        done: false,
                    };
                    if !lock && !std::mem::needs_drop::<T>() {
                        let shared = run.shared;
                        // SAFETY: the run is claimed by us (single producer), no non-gating
                        // reader is known (module docs), `T` has no drop glue,
                        // `len <= capacity`.
                        unsafe {
                            shared.slots.write_run_untagged(
                                first,
                                len,
                                &mut make,
                                &mut run.written,
                            );
                        }
                        run.done = true;
                        drop(run);
                        self.last = first + len - 1;
                        done += len as usize;
                        continue;
                    }
                    for i in 0..len {
                        let seq = first + i;
                        let value = make(seq);
                        let shared = run.shared;
                        let plain = shared.plain.map_or(true, |plain| plain(&value));
                        if !plain {
                            // Before the write (module docs, "Plain values").
                            shared.mark_impure();
                        }
                        // The write below drops what it replaces.
                        Self::note_slot(shared, &mut self.impure_slots, seq, plain);
                        // SAFETY: `seq` is claimed by us (single producer: no previous-lap
                        // writer); `lock` follows our gate view (module docs).
                        let old = unsafe {
                            shared.slot(seq).write(
                                seq,
                                value,
                                shared.prev_tag(seq),
                                false,
                                lock,
                                || true,
                            )
                        };
                        run.written = i + 1;
                        drop(old);
                    }
                    run.done = true;
                    drop(run);
                    self.last = first + len - 1;
                    done += len as usize;
                }
                Claim::Closed => {
                    stop = Some(Stop::Closed);
                    break;
                }
                Claim::Full { at } => {
                    if let Some(why) = self.wait_or_stop(at, min_len, wait) {
                        stop = Some(why);
                        break;
                    }
                }
            }
        }
        self.end_sp();
        (done, stop)
    }

    /// Writes `len` values made by `make(i)` (`i` in `0..len`, in order, once each) into the
    /// claimed run `first..first + len` and publishes it. Old values are dropped after each
    /// write, outside the slot lock; if one's `Drop` panics, the rest of the run is still
    /// written (leaking what it replaces) and published, so a claimed slot is never left
    /// empty.
    ///
    /// With `plain` (every value of the run drops as a no-op), the old values known to be
    /// plain too are overwritten unread: a single producer's unmarked slots
    /// (`impure_slots`), every slot while `Shared::impure` is clear (module docs, "Plain
    /// values").
    ///
    /// # Safety
    ///
    /// `first..first + len` is claimed by this producer; `make` does not panic and its
    /// values are moved into the ring; `plain` only if each of them is plain.
    unsafe fn write_run(
        &mut self,
        first: u64,
        len: usize,
        plain: bool,
        make: impl Fn(usize) -> T + Copy,
    ) {
        struct Run<'a, T, F: FnMut(usize) -> T> {
            shared: &'a Shared<T>,
            first: u64,
            make: F,
            len: usize,
            written: usize,
            lock: bool,
            drop_old: bool,
            /// Set when the run ended normally; otherwise the drop is an unwind.
            done: bool,
        }
        impl<T, F: FnMut(usize) -> T> Run<'_, T, F> {
            /// # Safety
            /// `i < len`, not written yet; see `write_run`.
            unsafe fn write(&mut self, i: usize) -> Option<T> {
                let seq = self.first + i as u64;
                let shared = self.shared;
                // Each index once (`written` moves past it right after).
                let value = (self.make)(i);
                self.written = i + 1;
                let drop_old = self.drop_old;
                // SAFETY: `seq` is claimed by us; `wait_prev` covers a multi-producer
                // previous lap still being written; `lock` follows our gate view (see the
                // module docs for why unlocked writes are sound); the old value is read
                // back unless it is known plain (module docs, "Plain values").
                unsafe {
                    shared.slot(seq).write(
                        seq,
                        value,
                        shared.prev_tag(seq),
                        shared.multi,
                        self.lock,
                        || drop_old || shared.may_be_impure(),
                    )
                }
            }
        }
        impl<T, F: FnMut(usize) -> T> Drop for Run<'_, T, F> {
            fn drop(&mut self) {
                // Unwinding from an old value's Drop: finish the run, leaking what it replaces
                // (a second panic here would abort).
                while self.written < self.len {
                    // SAFETY: `written < len` and not written yet.
                    let old = unsafe { self.write(self.written) };
                    std::mem::forget(old);
                }
                let shared = self.shared;
                if !shared.multi {
                    // Release: publishes the run's slot writes to readers' Acquire loads.
                    shared
                        .published
                        .store(self.first + self.len as u64, Ordering::Release);
                }
                // Per run, not per entry; a fence-free check unless a reader is parked.
                shared.readers_wait.notify_all_light();
                if !self.done && !shared.multi {
                    // The unwind skips `publish_from`'s end: leave the publish here, so
                    // that a close racing it is finished (`Shared::close`).
                    leave_sp(shared, self.first + self.len as u64);
                }
            }
        }
        // Also while an announcing reader reads (module docs).
        let lock = self.view.lossy() || self.announced_run(first + len as u64);
        let plain = plain || !std::mem::needs_drop::<T>();
        if !lock && plain {
            // The common case for plain data: no slot locks and nothing to drop, so nothing
            // in the loop can panic and no unwind guard is needed — a tight loop.
            let shared = &*self.shared;
            if !shared.multi {
                // A single producer wrote every value the ring holds: stretches of slots
                // whose values are plain are overwritten unread, and each slot marked in
                // `impure_slots` is replaced by a tagged write that reads its value back
                // (module docs, "Plain values").
                let end = first + len as u64;
                let mut at = first;
                loop {
                    let stop = if std::mem::needs_drop::<T>() {
                        self.impure_slots.next_marked(at, end)
                    } else {
                        end
                    };
                    // SAFETY: `at..stop` is claimed by us (single producer), no non-gating
                    // reader is known and no read is announced (module docs); the values
                    // written are plain (`plain`), and so is each value they replace (no
                    // slot of `at..stop` is marked, or `T` has no drop glue); `make` does
                    // not panic (caller); `stop - at <= len <= capacity`.
                    unsafe {
                        shared.slots.write_run_untagged(
                            at,
                            stop - at,
                            move |seq| make((seq - first) as usize),
                            &mut 0,
                        );
                    }
                    if stop == end {
                        break;
                    }
                    // The value written is plain and the one replaced is dropped below.
                    self.impure_slots.clear(stop);
                    // SAFETY: `stop` is claimed by us (single producer: no previous-lap
                    // writer, the slot holds `stop - capacity`); no lock, as above; the old
                    // value is read back to be dropped.
                    let old = unsafe {
                        shared.slot(stop).write(
                            stop,
                            make((stop - first) as usize),
                            shared.prev_tag(stop),
                            false,
                            false,
                            || true,
                        )
                    };
                    at = stop + 1;
                    if let Some(old) = old {
                        // If its `Drop` panics, the guard writes the rest of the run
                        // (leaking what it replaces) and publishes it.
                        let guard = Run {
                            shared,
                            first,
                            make,
                            len,
                            written: (at - first) as usize,
                            lock: false,
                            drop_old: true,
                            done: false,
                        };
                        drop(old);
                        // No unwind: this loop writes the rest of the run.
                        std::mem::forget(guard);
                    }
                }
                // Release: publishes the run's slot writes to readers' Acquire loads.
                shared.published.store(end, Ordering::Release);
                // Per run, not per entry; a fence-free check unless a reader is parked.
                shared.readers_wait.notify_all_light();
                return;
            }
            // Multi-producer plain runs in three passes (module docs, "Plain runs"):
            // own every slot, ask the flag once, move the values in, publish the tags.
            shared
                .slots
                .wait_prev_run(first, len as u64, shared.start, shared.capacity);
            if !shared.may_be_impure() {
                // SAFETY: `first..first + len` is claimed by us and each slot's previous
                // lap was seen published (Acquire, just above), so no other producer
                // writes them; no non-gating reader is known and no read is announced
                // (`lock` is false), so no reader reads them; the flag, asked after
                // every one of those Acquire loads, says each value replaced is plain;
                // nothing here can panic (`make` does not: caller).
                unsafe {
                    shared.slots.write_run_untagged(
                        first,
                        len as u64,
                        move |seq| make((seq - first) as usize),
                        &mut 0,
                    );
                }
                shared.slots.publish_tags(first, len as u64);
                // Per run, not per entry; a fence-free check unless a reader is parked.
                shared.readers_wait.notify_all_light();
                return;
            }
            // A value replaced may be impure: slot by slot below (each slot already
            // holds its previous lap, so the writes do not wait again).
            for i in 0..len {
                let seq = first + i as u64;
                // SAFETY: `seq` is claimed by us and holds its previous lap (waited for
                // above); no non-gating reader is known, so no lock (module docs); the
                // replaced value is read back when it may need its drop.
                let old = unsafe {
                    shared
                        .slot(seq)
                        .write(seq, make(i), shared.prev_tag(seq), true, false, || {
                            shared.may_be_impure()
                        })
                };
                if let Some(old) = old {
                    // An impure value seen only now (types with drop glue only): the rest of
                    // the run goes through the guarded path, which also finishes it if this
                    // drop panics.
                    let mut run = Run {
                        shared,
                        first,
                        make,
                        len,
                        written: i + 1,
                        lock: false,
                        drop_old: true,
                        done: false,
                    };
                    drop(old);
                    for j in i + 1..len {
                        // SAFETY: `j < len`, written in order.
                        drop(unsafe { run.write(j) });
                    }
                    run.done = true;
                    return;
                }
            }
            // Per run, not per entry; a fence-free check unless a reader is parked.
            shared.readers_wait.notify_all_light();
            return;
        }
        if !plain && !self.shared.multi && self.shared.plain.is_some() {
            // Before the writes, so that an unwind leaves no such value unmarked.
            self.impure_slots.mark_run(first, len as u64);
        }
        let mut run = Run {
            shared: &self.shared,
            first,
            make,
            len,
            written: 0,
            lock,
            drop_old: !plain,
            done: false,
        };
        for i in 0..len {
            // SAFETY: `i < len`, written in order.
            drop(unsafe { run.write(i) });
        }
        run.done = true;
    }
}
