//! Readers: independent cursors over the ring, gating or not.
//!
//! A reader keeps its position privately and stores it into its shared cursor once per read
//! call (for a long batch, every 128 entries, so a full ring refills behind a reader while
//! it reads). A gating reader can also borrow a published run in place ([`ReadRun`], the
//! Disruptor event poller's shape) instead of cloning. A **gating** reader holds producers back, so
//! it reads slots without locking them: it caches the end of the published prefix and looks at the
//! producers' cursor (single producer) or the slot tags (multi-producer) only when it has read
//! everything it knew about. A **non-gating** reader never holds producers back: it reads each
//! entry under the slot's shared lock (held for one clone), and when the slot already holds a later
//! lap it reports [`TryReadError::Lagged`] with the exact number of entries it skipped, and
//! continues from the oldest entry still available — tokio broadcast's rule.
//!
//! An **announcing** reader (multi-producer rings, and single-producer rings built for one;
//! [`Ring::announcing_reader`], crate private) is a non-gating reader that producers do not
//! keep in their view, so it costs them no slot locks while it is idle: instead each read
//! announces itself (a count, then a `SeqCst` fence, then the claim cursor), producers check
//! that count after each claimed run (after the claim — a single producer stores the end of
//! its claim for this — and a `SeqCst` fence, see `sequencer`) and take the locks while it
//! is non-zero, and the read stays above every slot a run claimed before its announcement
//! may overwrite unlocked. It reads any sequence still in the ring, like a non-gating reader
//! that joined at the start. On a single-producer ring its locked reads accept stale tags
//! as any non-gating reader's do (`slot`, "Stale tags"): every overwrite it could observe
//! comes from a run claimed after its announcement, hence locked and exactly tagged.
//!
//! [`Ring::announcing_reader`]: super::Ring::announcing_reader
//!
//! A blocking read that follows a read which caught up with the producers after a short run
//! first spins half a microsecond without touching shared memory ([`Reader::pace`]): a
//! reader on the producer's heels costs the producer a cache miss on every store.

use super::error::{GetError, ReadError, ReadTimeoutError, TryReadError};
use super::registry::ReaderCursor;
use super::shared::{Announced, Shared};
use super::slot::Probe;
use super::task::TaskWait;
use super::wait;
use crate::sync::atomic::Ordering;
use crate::sync::time::{self, Duration, Instant};
use crate::sync::Arc;

/// A gating reader moves its cursor at least this often within one long run.
const COMMIT_EVERY: u64 = 128;

/// A reader of a [`Ring`](super::Ring): its own position, its own pace.
///
/// Created by [`Ring::reader`](super::Ring::reader) (non-gating) or
/// [`Ring::gating_reader`](super::Ring::gating_reader). Dropping it removes it from the ring
/// (a gating reader stops holding producers back at once).
///
/// # Examples
///
/// ```
/// use logbus::ring::{Ring, RingConfig, Start, TryReadError};
///
/// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
/// let mut reader = ring.gating_reader(Start::Tail)?;
/// producer.publish(7u64).unwrap();
/// assert_eq!(reader.try_read(), Ok(7));
/// assert_eq!(reader.try_read(), Err(TryReadError::Empty));
/// # Ok::<(), logbus::Error>(())
/// ```
pub struct Reader<T> {
    pub(super) shared: Arc<Shared<T>>,
    cursor: Arc<ReaderCursor>,
    /// The next sequence to read.
    next: u64,
    /// Gating readers: every sequence below this is known to be published.
    known_end: u64,
    /// Gating, single producer: `known_end` was loaded by the wait that just ended.
    fresh: bool,
    /// The last read took everything published, and that was a short run: the next
    /// blocking read paces itself first ([`pace`](Self::pace)).
    caught_up: bool,
    /// Non-gating readers: the lowest sequence this reader may read (its overwrite floor at
    /// join time; see `registry`).
    floor: u64,
    gating: bool,
    /// Announces each read instead of being in producers' view (module docs).
    announcing: bool,
    /// The waiting state of the reader as a `Stream` (`task`).
    pub(super) stream_wait: TaskWait,
}

impl<T> std::fmt::Debug for Reader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("position", &self.next)
            .field("gating", &self.gating)
            .finish_non_exhaustive()
    }
}

impl<T> Reader<T> {
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        cursor: Arc<ReaderCursor>,
        next: u64,
        floor: u64,
        gating: bool,
    ) -> Self {
        Self {
            shared,
            cursor,
            next,
            known_end: next,
            fresh: false,
            caught_up: false,
            floor,
            gating,
            announcing: false,
            stream_wait: TaskWait::new(),
        }
    }

    /// An announcing reader at `next` (module docs): not registered; `shared` is
    /// multi-producer, or single-producer with `announces`.
    pub(crate) fn announcing(shared: Arc<Shared<T>>, cursor: Arc<ReaderCursor>, next: u64) -> Self {
        debug_assert!(shared.multi || shared.announces);
        let floor = shared.start;
        let mut r = Self::new(shared, cursor, next, floor, false);
        r.announcing = true;
        r
    }

    /// The next sequence this reader will read.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Whether producers wait for this reader.
    pub fn is_gating(&self) -> bool {
        self.gating
    }

    /// How many entries are published (or claimed) ahead of this reader: a hint, since
    /// producers keep going.
    pub fn backlog(&self) -> u64 {
        self.shared.tail().saturating_sub(self.next)
    }

    /// Stores the position into the shared cursor, and (gating) wakes producers parked on a
    /// full ring.
    #[inline]
    fn commit(&self) {
        // Release: pairs with the producers' Acquire loads in `GateView::min_gate`, so our
        // reads of the slots below `next` happen before they are overwritten.
        self.cursor.next.store(self.next, Ordering::Release);
        if self.gating {
            // Fence-free unless a producer is parked (it pays the heavy fence).
            self.shared.producers_wait.notify_all_light();
        }
    }

    /// Records whether a read that ended at `end` took everything known published in a
    /// run of `n` shorter than a quarter of the ring.
    #[inline]
    fn note_run(&mut self, n: u64, end: u64) {
        self.caught_up = n < self.shared.capacity / 4 && end >= self.known_end;
    }

    /// Whether the next blocking read will pace itself.
    #[cfg(all(test, not(logbus_loom)))]
    pub(super) fn paces_next(&self) -> bool {
        self.caught_up
    }

    /// Before a blocking read: if the last read caught up with the producers after a short
    /// run, spin a little without touching shared memory, so the next look finds a longer
    /// run.
    ///
    /// A reader that follows a fast producer closely keeps pulling the producer's cursor and
    /// the lines it is writing into its own cache (its loads, and the hardware prefetcher
    /// running ahead of them), and the producer stalls on every store to them. Half a
    /// microsecond of distance lets the producer run a few hundred entries ahead, and both
    /// sides then move whole lines once, and the reader's runs grow several-fold (measured
    /// with `ring_vs_disruptor`, single entries and batches: BENCHMARKS.md, "Tuning constants").
    /// The cost is at most that half microsecond of latency, only when the next entry is published
    /// during it (a reader that finds nothing then waits as before), and only on blocking reads:
    /// `try_` reads never wait.
    #[inline]
    pub(super) fn pace(&mut self) {
        if std::mem::take(&mut self.caught_up) {
            super::pace_reader();
        }
    }

    /// Gating: whether something is known published from the position, looking at the
    /// producers' side only when the cached prefix cannot fill a request for `max` — and not
    /// when a wait has just loaded it ([`wait`](Self::wait)). Every load of a producer's
    /// cursor can pull its cache line away from the producer, which then stalls on its next
    /// store to it; loading it twice per wake-up cost a fifth of the 1 → 1 batch throughput.
    #[inline]
    fn know_some(&mut self, max: u64) -> bool {
        let fresh = std::mem::take(&mut self.fresh);
        if self.known_end - self.next < max && !(fresh && self.known_end > self.next) {
            self.refresh_known();
        }
        self.known_end > self.next
    }

    /// Gating: extends `known_end` to the end of the published prefix. Returns whether
    /// something new is known.
    #[inline]
    fn refresh_known(&mut self) -> bool {
        let shared = &*self.shared;
        if shared.multi {
            let hi = shared.tail();
            let mut end = self.known_end.max(self.next);
            while end < hi && shared.slot(end).is_published(end) {
                end += 1;
            }
            self.known_end = end;
        } else {
            // Acquire (in `tail`): pairs with the producer's Release store of its cursor.
            self.known_end = shared.tail();
        }
        self.known_end > self.next
    }

    /// Non-gating: the end of what a single producer has published (Acquire), below which a
    /// lagging slot tag still means "published" (`slot`, "Stale tags"); 0 for a
    /// multi-producer ring, whose tags are exact.
    #[inline]
    fn published_end(&self) -> u64 {
        if self.shared.multi {
            0
        } else {
            self.shared.tail()
        }
    }

    /// `Empty` or `Closed` when nothing is available at `next`.
    #[inline]
    fn nothing(&self) -> TryReadError {
        if self.next >= self.shared.closed_at() {
            TryReadError::Closed
        } else {
            TryReadError::Empty
        }
    }

    /// Non-gating: the slot at `next` holds `later`; jump to the oldest entry still in the
    /// ring and say how many were skipped.
    fn lagged(&mut self, later: u64) -> TryReadError {
        let cap = self.shared.capacity;
        // Every sequence claimed so far is at most `later`'s or the tail; a sequence `x` is
        // gone once `x + capacity` was claimed.
        let newest_claimed_end = (later + 1).max(self.shared.tail());
        let to = (newest_claimed_end - cap).max(self.next + 1);
        let missed = to - self.next;
        self.next = to;
        self.commit();
        TryReadError::Lagged(missed)
    }

    /// Reads the next entry if one is available, without waiting.
    ///
    /// # Errors
    ///
    /// [`TryReadError::Empty`] when nothing new is published; [`TryReadError::Lagged`]`(n)`
    /// when a non-gating reader fell a lap behind (it missed exactly `n` entries and is now at
    /// the oldest one still available); [`TryReadError::Closed`] when the ring is closed and
    /// everything published was read.
    #[inline]
    pub fn try_read(&mut self) -> Result<T, TryReadError>
    where
        T: Clone,
    {
        self.try_read_with(1, |_, v| v.clone())
            .map(|(_, v)| v.expect("one entry read"))
    }

    /// Runs `f(sequence, &entry)` over up to `max` available entries in sequence order (a
    /// contiguous run), then moves the cursor once. Returns how many were read and the value
    /// of the last call of `f`.
    ///
    /// For a non-gating reader each call runs under the slot's shared lock: keep `f` short.
    ///
    /// # Errors
    ///
    /// As [`try_read`](Self::try_read) when not even one entry could be read.
    #[inline]
    pub fn try_read_with<R>(
        &mut self,
        max: usize,
        mut f: impl FnMut(u64, &T) -> R,
    ) -> Result<(usize, Option<R>), TryReadError> {
        if max == 0 {
            return Ok((0, None));
        }
        if self.gating {
            if !self.know_some(max as u64) {
                return Err(self.nothing());
            }
            let shared = &*self.shared;
            let n = (max as u64).min(self.known_end - self.next);
            let end = self.next + n;
            shared.slots.prefetch_run(self.next, end);
            // In a long run, hand slots back to producers every `COMMIT_EVERY` entries, so a
            // full ring refills behind us while we read (a pipeline, not a convoy).
            let mut last = None;
            while self.next < end {
                let stop = end.min(self.next + COMMIT_EVERY);
                // SAFETY: every sequence below `known_end` was seen published with Acquire;
                // we are a gating reader at `next`, so no producer overwrites them before
                // `commit`; the run is at most the capacity.
                let r = unsafe { shared.slots.read_run_unlocked(self.next, stop, &mut f) };
                if r.is_some() {
                    last = r;
                }
                self.next = stop;
                self.commit();
            }
            self.note_run(n, end);
            return Ok((n as usize, last));
        }
        let mut read = 0usize;
        let mut last = None;
        let mut lagged = None;
        let mut caught_up = false;
        let published_end = self.published_end();
        let (announced, floor) = read_floor(&self.shared, self.announcing, self.floor);
        if self.next < floor {
            // Overwritten (or being overwritten): as if the slot showed the lap that ends
            // at the claim cursor the announcement saw.
            lagged = Some(floor + self.shared.capacity - 1);
        }
        while lagged.is_none() && read < max {
            let seq = self.next;
            let published = seq < published_end;
            match self
                .shared
                .slot(seq)
                .read_locked(seq, published, |v| f(seq, v))
            {
                Ok(r) => {
                    last = Some(r);
                    read += 1;
                    self.next += 1;
                }
                Err(Probe::NotYet) => {
                    caught_up = true;
                    break;
                }
                Err(Probe::Overwritten(later)) => {
                    if read == 0 {
                        lagged = Some(later);
                    }
                    break;
                }
            }
        }
        drop(announced);
        if let Some(later) = lagged {
            return Err(self.lagged(later));
        }
        if read == 0 {
            return Err(self.nothing());
        }
        self.commit();
        self.caught_up = caught_up && (read as u64) < self.shared.capacity / 4;
        Ok((read, last))
    }

    /// Borrows up to `max` available entries in place, as an iterator of `&T` (no clones):
    /// `for entry in &mut run { .. }`. Dropping the run moves the cursor past the entries
    /// iterated (the Disruptor's event-poller shape). The producers cannot overwrite the run
    /// while it is alive, so keep it short.
    ///
    /// # Errors
    ///
    /// As [`try_read`](Self::try_read) when nothing is available.
    ///
    /// # Panics
    ///
    /// If the reader is not gating: a non-gating reader may not hold slots (producers never
    /// wait for it), so it reads with [`try_read_with`](Self::try_read_with) or clones.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::ring::{Ring, RingConfig, Start};
    ///
    /// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
    /// let mut reader = ring.gating_reader(Start::Tail)?;
    /// producer.publish_with(3, |seq| seq + 1).unwrap();
    /// let mut run = reader.try_read_run(usize::MAX).unwrap();
    /// let sum: u64 = (&mut run).sum();
    /// drop(run);
    /// assert_eq!(sum, 6);
    /// assert_eq!(reader.position(), 3);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn try_read_run(&mut self, max: usize) -> Result<ReadRun<'_, T>, TryReadError> {
        assert!(self.gating, "try_read_run needs a gating reader");
        let n = self.run_available(max)?;
        Ok(self.run_of(n))
    }

    /// Gating: how many entries (up to `max`) are known published from the position.
    pub(super) fn run_available(&mut self, max: usize) -> Result<u64, TryReadError> {
        if !self.know_some(max as u64) {
            return Err(self.nothing());
        }
        Ok((max as u64).min(self.known_end - self.next))
    }

    pub(super) fn run_of(&mut self, n: u64) -> ReadRun<'_, T> {
        let start = self.next;
        self.note_run(n, start + n);
        self.shared.slots.prefetch_run(start, start + n);
        let index = self.shared.slots.index(start);
        let stretch_end = (index + n as usize).min(self.shared.capacity as usize);
        ReadRun {
            reader: self,
            next: start,
            end: start + n,
            index,
            stretch_end,
        }
    }

    /// Like [`try_read_run`](Self::try_read_run), waiting until at least one entry is
    /// available.
    ///
    /// # Errors
    ///
    /// [`ReadError::Closed`] once the ring is closed and drained.
    ///
    /// # Panics
    ///
    /// As [`try_read_run`](Self::try_read_run).
    pub fn read_run(&mut self, max: usize) -> Result<ReadRun<'_, T>, ReadError> {
        assert!(self.gating, "read_run needs a gating reader");
        self.pace();
        loop {
            match self.run_available(max) {
                Ok(n) => return Ok(self.run_of(n)),
                Err(TryReadError::Empty) => {
                    self.wait(None);
                }
                Err(TryReadError::Lagged(n)) => return Err(ReadError::Lagged(n)),
                Err(_) => return Err(ReadError::Closed),
            }
        }
    }

    /// Appends up to `max` available entries to `out` (clones, in sequence order), moving the
    /// cursor once. Returns how many were appended. Allocates only if `out` must grow.
    ///
    /// # Errors
    ///
    /// As [`try_read`](Self::try_read) when nothing could be read.
    pub fn try_read_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<usize, TryReadError>
    where
        T: Clone,
    {
        self.try_read_with(max, |_, v| out.push(v.clone()))
            .map(|(n, _)| n)
    }

    /// Whether a read would not come back `Empty` (something published or overwritten at
    /// the position, or the ring closed).
    pub(super) fn readable(&self) -> bool {
        let seq = self.next;
        let shared = &*self.shared;
        let there = if !shared.multi {
            // A single producer's cursor (its slot tags may lag); an overwrite of `seq` also
            // moved the cursor past it.
            shared.tail() > seq
        } else {
            shared.slot(seq).reached(seq)
        };
        there || seq >= shared.closed_at()
    }

    /// Waits until [`readable`](Self::readable) or the deadline. Returns `false` on timeout.
    ///
    /// A gating reader of a single-producer ring keeps the producer's cursor it loaded as its
    /// known end (see [`know_some`](Self::know_some)).
    /// Waits (yield, then park) until an entry is readable at the position, the ring
    /// closes, or the deadline passes: for a reader that then reads by sequence (the
    /// persisted partition's writer). Returns whether it did not time out.
    pub(crate) fn wait_for_entry(&mut self, deadline: Option<Instant>) -> bool {
        self.wait(deadline)
    }

    fn wait(&mut self, deadline: Option<Instant>) -> bool {
        if !self.gating || self.shared.multi {
            return wait::wait_until(&self.shared.readers_wait, deadline, || self.readable());
        }
        let Self {
            shared,
            next,
            known_end,
            fresh,
            ..
        } = self;
        let seq = *next;
        wait::wait_until(&shared.readers_wait, deadline, || {
            // Acquire (in `tail`): as in `refresh_known`; the cursor only grows.
            *known_end = shared.tail();
            *fresh = true;
            *known_end > seq || seq >= shared.closed_at()
        })
    }

    fn read_with_deadline<R>(
        &mut self,
        deadline: Option<Instant>,
        mut attempt: impl FnMut(&mut Self) -> Result<R, TryReadError>,
    ) -> Result<R, ReadTimeoutError> {
        self.pace();
        loop {
            match attempt(self) {
                Ok(r) => return Ok(r),
                Err(TryReadError::Lagged(n)) => return Err(ReadTimeoutError::Lagged(n)),
                Err(TryReadError::Closed) => return Err(ReadTimeoutError::Closed),
                Err(TryReadError::Empty) => {
                    if !self.wait(deadline) {
                        return attempt(self).map_err(|e| match e {
                            TryReadError::Lagged(n) => ReadTimeoutError::Lagged(n),
                            TryReadError::Closed => ReadTimeoutError::Closed,
                            TryReadError::Empty => ReadTimeoutError::Timeout,
                        });
                    }
                }
            }
        }
    }

    /// Reads the next entry, waiting (yield, then park) until one is published.
    ///
    /// # Errors
    ///
    /// [`ReadError::Lagged`] (non-gating readers, see [`try_read`](Self::try_read)) or
    /// [`ReadError::Closed`] once the ring is closed and drained.
    pub fn read(&mut self) -> Result<T, ReadError>
    where
        T: Clone,
    {
        self.read_with_deadline(None, |r| r.try_read())
            .map_err(forever)
    }

    /// Like [`read`](Self::read), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// [`ReadTimeoutError::Timeout`] when nothing arrived in time, otherwise as `read`.
    pub fn read_timeout(&mut self, timeout: Duration) -> Result<T, ReadTimeoutError>
    where
        T: Clone,
    {
        self.read_deadline_opt(time::deadline_after(timeout))
    }

    /// Like [`read`](Self::read), giving up at `deadline`.
    ///
    /// # Errors
    ///
    /// [`ReadTimeoutError::Timeout`] when nothing arrived in time, otherwise as `read`.
    pub fn read_deadline(&mut self, deadline: Instant) -> Result<T, ReadTimeoutError>
    where
        T: Clone,
    {
        self.read_deadline_opt(Some(deadline))
    }

    fn read_deadline_opt(&mut self, deadline: Option<Instant>) -> Result<T, ReadTimeoutError>
    where
        T: Clone,
    {
        self.read_with_deadline(deadline, |r| r.try_read())
    }

    /// Appends up to `max` entries to `out`, waiting until at least one is available.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub fn read_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<usize, ReadError>
    where
        T: Clone,
    {
        self.read_with_deadline(None, |r| r.try_read_batch(out, max))
            .map_err(forever)
    }

    /// Runs `f(sequence, &entry)` over up to `max` entries like
    /// [`try_read_with`](Self::try_read_with), waiting until at least one is available.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub fn read_with<R>(
        &mut self,
        max: usize,
        mut f: impl FnMut(u64, &T) -> R,
    ) -> Result<(usize, Option<R>), ReadError> {
        self.read_with_deadline(None, |r| r.try_read_with(max, &mut f))
            .map_err(forever)
    }

    /// Like [`read_batch`](Self::read_batch), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// [`ReadTimeoutError::Timeout`] when nothing arrived in time, otherwise as `read`.
    pub fn read_batch_timeout(
        &mut self,
        out: &mut Vec<T>,
        max: usize,
        timeout: Duration,
    ) -> Result<usize, ReadTimeoutError>
    where
        T: Clone,
    {
        self.read_with_deadline(time::deadline_after(timeout), |r| {
            r.try_read_batch(out, max)
        })
    }

    /// [`read_batch`](Self::read_batch), waiting for the first entry until `deadline` at the
    /// latest.
    ///
    /// # Errors
    ///
    /// As [`read_batch_timeout`](Self::read_batch_timeout).
    pub fn read_batch_deadline(
        &mut self,
        out: &mut Vec<T>,
        max: usize,
        deadline: Instant,
    ) -> Result<usize, ReadTimeoutError>
    where
        T: Clone,
    {
        self.read_with_deadline(Some(deadline), |r| r.try_read_batch(out, max))
    }

    /// Runs `f` on the entry at `seq` if this reader may still see it, without moving the
    /// cursor: the partition layer's "read by offset from the ring". A gating reader may ask
    /// for any published sequence at or after its position; a non-gating reader for any
    /// sequence from where it joined that has not been overwritten.
    ///
    /// # Errors
    ///
    /// [`GetError::Evicted`] when the entry is gone (or behind a gating reader's cursor),
    /// [`GetError::NotPublished`] when it is not published yet.
    pub fn get_with<R>(&self, seq: u64, f: impl FnOnce(&T) -> R) -> Result<R, GetError> {
        let shared = &*self.shared;
        if self.gating {
            if seq < self.next {
                return Err(GetError::Evicted {
                    requested: seq,
                    oldest: self.next,
                });
            }
            // A single producer's cursor says it (its slot tags may lag); multi-producer
            // slots are published out of order, so their tags say it.
            if seq >= shared.tail() || (shared.multi && !shared.slot(seq).is_published(seq)) {
                return Err(GetError::NotPublished { requested: seq });
            }
            // SAFETY: seen published with Acquire (the cursor or `is_published`); we gate at
            // `next ≤ seq`, so no producer overwrites it while `&self` is borrowed.
            return Ok(unsafe { shared.slot(seq).read_unlocked(f) });
        }
        let (_announced, floor) = read_floor(&self.shared, self.announcing, self.floor);
        let oldest = || shared.tail().saturating_sub(shared.capacity).max(floor);
        if seq < floor {
            return Err(GetError::Evicted {
                requested: seq,
                oldest: oldest(),
            });
        }
        let published = seq < self.published_end();
        match shared.slot(seq).read_locked(seq, published, f) {
            Ok(r) => Ok(r),
            Err(Probe::NotYet) => Err(GetError::NotPublished { requested: seq }),
            Err(Probe::Overwritten(_)) => Err(GetError::Evicted {
                requested: seq,
                oldest: oldest(),
            }),
        }
    }

    /// Runs `f(sequence, &entry)` over the entries from `from` on, in order, up to `max` of
    /// them, without moving the cursor: [`get_with`](Self::get_with) for a run (the
    /// partition layer's read by offset), under the same rules. A gating reader reads the
    /// published entries at or after its position without locks (it holds producers back
    /// from them for as long as it is borrowed); a non-gating reader reads each entry under
    /// its slot's lock. Returns how many were read and, when fewer than `max`, why the run
    /// stopped.
    pub(crate) fn get_run_with(
        &self,
        from: u64,
        max: usize,
        mut f: impl FnMut(u64, &T),
    ) -> (usize, Option<GetError>) {
        let shared = &*self.shared;
        if self.gating {
            if from < self.next {
                return (
                    0,
                    Some(GetError::Evicted {
                        requested: from,
                        oldest: self.next,
                    }),
                );
            }
            // As in `get_with`: a single producer's cursor says what is published, a
            // multi-producer slot's tag does (counted first, in one tight pass).
            let end = shared.tail().min(from.saturating_add(max as u64));
            let end = if shared.multi && end > from {
                from + shared.slots.count_published(from, end)
            } else {
                end.max(from)
            };
            if end > from {
                // SAFETY: `from..end` seen published with Acquire (the cursor or the tags);
                // we gate at `next <= from` and `&self` is borrowed until we return, so the
                // cursor cannot move and no producer overwrites the slots meanwhile; a
                // gating reader's unread entries span at most the capacity.
                unsafe {
                    shared
                        .slots
                        .read_run_unlocked(from, end, |seq, v| f(seq, v))
                };
            }
            let n = (end - from) as usize;
            return (
                n,
                (n < max).then_some(GetError::NotPublished { requested: end }),
            );
        }
        let (_announced, floor) = read_floor(&self.shared, self.announcing, self.floor);
        let evicted = |seq: u64| GetError::Evicted {
            requested: seq,
            oldest: shared.tail().saturating_sub(shared.capacity).max(floor),
        };
        if from < floor {
            return (0, Some(evicted(from)));
        }
        let published_end = self.published_end();
        let mut n = 0;
        while n < max {
            let seq = from + n as u64;
            match shared
                .slot(seq)
                .read_locked(seq, seq < published_end, |v| f(seq, v))
            {
                Ok(()) => n += 1,
                Err(Probe::NotYet) => return (n, Some(GetError::NotPublished { requested: seq })),
                Err(Probe::Overwritten(_)) => return (n, Some(evicted(seq))),
            }
        }
        (n, None)
    }

    /// [`get_run_with`](Self::get_run_with) for a gating reader held mutably (the
    /// partition's gated reads): a run read from within the known published prefix extends
    /// it, so that moving the cursor over the same entries later needs no tag loads (for a
    /// multi-producer ring those are cache misses on lines the producers are writing).
    pub(crate) fn get_run_with_noting(
        &mut self,
        from: u64,
        max: usize,
        f: impl FnMut(u64, &T),
    ) -> (usize, Option<GetError>) {
        let (n, why) = self.get_run_with(from, max, f);
        if self.gating && from <= self.known_end.max(self.next) && from >= self.next {
            // Every sequence of `next..from` was known published, and `from..from + n`
            // were just seen published (Acquire) by the run.
            self.known_end = self.known_end.max(from + n as u64);
        }
        (n, why)
    }

    /// Gating: how many entries of `from..from + max` are published, for a caller that
    /// holds this reader in place (at or below `from`) while it reads them itself (the
    /// partition's lending reads). Looks at the producers' side only when the known
    /// published prefix cannot answer: a reader that keeps up loads the producer's cursor
    /// once per run, not once per question (each load can take the line from the producer).
    ///
    /// # Errors
    ///
    /// [`GetError::Evicted`] when `from` is below the position (this reader no longer holds
    /// it); [`GetError::NotPublished`] when `from` lies past the published end.
    pub(crate) fn published_run(&mut self, from: u64, max: usize) -> Result<usize, GetError> {
        debug_assert!(self.gating);
        if from < self.next {
            return Err(GetError::Evicted {
                requested: from,
                oldest: self.next,
            });
        }
        let want = from.saturating_add(max as u64);
        if self.known_end < want {
            // Acquire (the cursor) or the tags: pairs with the producers' publish, so the
            // entries counted here are visible to this thread.
            self.refresh_known();
        }
        if from > self.known_end {
            return Err(GetError::NotPublished { requested: from });
        }
        Ok((want.min(self.known_end) - from) as usize)
    }

    /// Gating: moves the position forward to `to`, or to the end of the published prefix if
    /// that comes first, without reading the entries (their reader read them while this
    /// reader held them: a group's gate after a commit). Returns the new position.
    pub(crate) fn skip_to(&mut self, to: u64) -> u64 {
        debug_assert!(self.gating);
        if to <= self.next {
            return self.next;
        }
        if self.known_end < to {
            self.refresh_known();
        }
        let end = to.min(self.known_published());
        if end > self.next {
            self.next = end;
            // Release (in `commit`): whatever read the skipped entries happened before this
            // (the caller's guarantee) happens before a producer overwrites them.
            self.commit();
        }
        self.next
    }

    /// Gating: every sequence below this is known published (at least the position).
    pub(crate) fn known_published(&self) -> u64 {
        self.known_end.max(self.next)
    }

    /// A clone of the entry at `seq`; see [`get_with`](Self::get_with).
    ///
    /// # Errors
    ///
    /// As [`get_with`](Self::get_with).
    pub fn get(&self, seq: u64) -> Result<T, GetError>
    where
        T: Clone,
    {
        self.get_with(seq, T::clone)
    }

    /// Whether the entry at `seq` is still in the ring for this reader ("is offset `seq`
    /// still in memory?").
    pub fn contains(&self, seq: u64) -> bool {
        self.get_with(seq, |_| ()).is_ok()
    }
}

/// A run of published entries borrowed in place from a gating [`Reader`]; see
/// [`Reader::try_read_run`]. Iterate it through `&mut run`; dropping it moves the reader's
/// cursor past what was iterated.
pub struct ReadRun<'r, T> {
    reader: &'r mut Reader<T>,
    /// The next sequence the iterator yields.
    next: u64,
    /// End (exclusive) of the run: every sequence below it was seen published.
    end: u64,
    /// Slot index of `next`, and the end (exclusive) of the contiguous stretch it is in: the
    /// iterator walks indices and wraps to 0 once, instead of masking every sequence.
    index: usize,
    stretch_end: usize,
}

impl<T> ReadRun<'_, T> {
    /// How many entries are left to iterate.
    pub fn len(&self) -> usize {
        (self.end - self.next) as usize
    }

    /// Whether the run is exhausted.
    pub fn is_empty(&self) -> bool {
        self.next == self.end
    }

    /// The sequence of the next entry the iterator yields.
    pub fn next_sequence(&self) -> u64 {
        self.next
    }
}

impl<'g, T> Iterator for &'g mut ReadRun<'_, T> {
    type Item = &'g T;

    #[inline]
    fn next(&mut self) -> Option<&'g T> {
        if self.index == self.stretch_end {
            if self.next == self.end {
                return None;
            }
            // The run wraps: the rest starts at slot 0.
            self.index = 0;
            self.stretch_end = (self.end - self.next) as usize;
        }
        // SAFETY: `index < stretch_end <= capacity` (`run_of`, and the wrap above: a run is
        // at most the capacity long).
        let cell = unsafe { self.reader.shared.slots.cell_at(self.index) };
        self.index += 1;
        self.next += 1;
        // SAFETY: the cell holds a sequence below `end`, seen published with Acquire; the
        // reader is gating and its cursor stays at or below it until the run drops, and the
        // returned reference borrows the run (`'g`), so it cannot outlive that: no producer
        // overwrites the slot while the reference lives.
        Some(unsafe { &*cell.with(|p| (*p).as_ptr()) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.end - self.next) as usize;
        (n, Some(n))
    }
}

impl<T> ExactSizeIterator for &mut ReadRun<'_, T> {}

impl<T> Drop for ReadRun<'_, T> {
    fn drop(&mut self) {
        if self.next > self.reader.next {
            self.reader.next = self.next;
            self.reader.commit();
        }
    }
}

fn forever(e: ReadTimeoutError) -> ReadError {
    match e {
        ReadTimeoutError::Lagged(n) => ReadError::Lagged(n),
        ReadTimeoutError::Closed => ReadError::Closed,
        // No deadline was given.
        ReadTimeoutError::Timeout => unreachable!("a wait without deadline timed out"),
    }
}

/// Non-gating: starts an announced read if the reader announces (the guard ends it), and
/// returns the lowest sequence the read may touch (the reader's `floor` or higher).
#[inline]
fn read_floor<T>(shared: &Shared<T>, announcing: bool, floor: u64) -> (Option<Announced<'_>>, u64) {
    if announcing {
        let (guard, lowest) = shared.announce();
        (Some(guard), lowest.max(floor))
    } else {
        (None, floor)
    }
}

impl<T> Drop for Reader<T> {
    fn drop(&mut self) {
        let mut wait = std::mem::take(&mut self.stream_wait);
        self.cancel_wait(&mut wait);
        if !self.announcing {
            self.shared.registry.leave(&self.cursor);
        }
        if self.gating {
            // Full fence: leaving is rare, and parked producers must see the cursor at MAX.
            self.shared.producers_wait.notify_all();
        }
    }
}
