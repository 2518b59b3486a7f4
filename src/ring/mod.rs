//! A lock-free ring of sequence-numbered slots: the LMAX Disruptor's structure.
//!
//! - **Slots and sequences.** A power-of-two number of slots, addressed by a 64-bit
//!   sequence (`slot = sequence & (capacity - 1)`). Sequences start at 0 or at any chosen
//!   value ([`RingConfig::start_sequence`], e.g. a partition's log end after recovery) and
//!   are never reused: they are the partition log's offsets.
//! - **Sequencers** (`sequencer`): a single-producer fast path ([`SingleProducer`]: a private claim
//!   counter and one `Release` store of the published cursor per run) and a multi-producer
//!   claim ([`MultiProducer`]: one CAS per run on the shared claim cursor). Both claim a run
//!   of slots, write it, and publish it once.
//! - **Per-slot publication** (`slot`): each slot's tag is its availability stamp (the
//!   sequence it holds), so multi-producer publishes that land out of order are seen
//!   correctly; readers only read a contiguous published prefix. A single producer of plain
//!   data with no non-gating reader skips the tag stores and publishes by its cursor alone
//!   (`slot`, "Stale tags").
//! - **Readers** (`reader`): any number, each with its own cursor, added and removed at run
//!   time, starting at any sequence still in the ring ([`Start`]). *Gating* readers hold
//!   producers back (a producer never overwrites a slot a gating reader has not passed);
//!   *non-gating* readers never do, and are told exactly how many entries they missed when
//!   they fall a lap behind ([`TryReadError::Lagged`]).
//! - **Lap policy** ([`LapPolicy`], what a producer does when it would lap the slowest
//!   reader): `Block` (producers wait for gating readers) or
//!   `DropOldest` (producers never wait for readers; the word topics and the observer use).
//! - **Async reads** (`task`): [`Reader::read_async`], [`Reader::read_batch_async`],
//!   [`Reader::read_run_async`] and the reader as a `futures_core::Stream` resolve as the
//!   blocking reads do, on any executor (`std::task` wakers, no runtime). Each is cancel
//!   safe: the position moves only in the poll that returns entries.
//! - **Waiting** (`wait`, over `sync::WaitSet`): check, yield, then park (a spin phase
//!   exists but is zero rounds by default: spinning measured worse than yielding on the
//!   2-vCPU VMs, see `wait`). Publishing and reading cost no system call and no
//!   `mfence` while nobody is parked: the notifying side uses an asymmetric (compiler-only)
//!   fence and the parking side pays a `membarrier` (see `sync::asym_fence`).
//!
//! # Reading is sound for any `T`, even while a producer overwrites
//!
//! Readers receive clones (`T: Clone`). A seqlock (read optimistically, check afterwards)
//! would be unsound here: cloning torn bytes of a non-`Copy` `T` is undefined behaviour.
//! Instead each slot's state word doubles as a reader/writer lock held for the length of one
//! clone (readers) or one move (writers): a producer may wait out one in-flight clone, never a
//! reader's progress. Gating readers need no lock at all (gating keeps producers away), and
//! producers skip the lock while no non-gating reader exists.
//!
//! # Guarantees
//!
//! - **Ordering:** every reader sees the entries it reads in sequence order; in a
//!   multi-producer ring each producer's entries keep their order.
//! - **Blocking:** only `publish*` (without `try_`) on a [`LapPolicy::Block`] ring whose
//!   gating readers lag a full lap, and `read*` on an empty ring. `try_*` never block, and
//!   neither do the `*_async` reads (their futures wait without blocking the thread).
//! - **Allocation:** none per entry. Creating a ring allocates the slots; adding a reader
//!   allocates its cursor; producers re-snapshot the reader list (allocating only if it
//!   grew) when readers join or leave; a single producer of a ring that tracks plain values
//!   allocates a bit per slot at its first value that is not plain (`impure`). Batch reads
//!   push into your `Vec`.
//! - **Drop:** every value is dropped exactly once: when overwritten, or when the ring's last
//!   handle goes.
//! - **Close:** [`Ring::close`] (or dropping the last producer) wakes every waiter; readers
//!   drain what was published and then get `Closed`; producers get their value back.
//!
//! # Examples
//!
//! ```
//! use logbus::ring::{LapPolicy, Ring, RingConfig, Start, TryReadError};
//!
//! // A ring that never blocks its producer: a late reader is told how much it missed.
//! let (mut producer, ring) =
//!     Ring::single_producer(RingConfig::new(4).overflow(LapPolicy::DropOldest))?;
//! let mut reader = ring.reader(Start::Tail)?;
//! for i in 0..10u64 {
//!     producer.publish(i).unwrap();
//! }
//! assert_eq!(reader.try_read(), Err(TryReadError::Lagged(6)));
//! assert_eq!(reader.try_read(), Ok(6));
//! # Ok::<(), logbus::Error>(())
//! ```

mod config;
mod error;
mod impure;
mod producer;
mod reader;
mod registry;
mod sequencer;
mod shared;
mod slot;
mod task;
mod wait;

#[cfg(all(test, not(logbus_loom)))]
mod tests;

/// A reader's pacing after a read that caught up with the producers after a short run
/// (`Reader::pace` says why): a few spin hints touching no shared memory, none under loom.
/// For readers that keep their own "caught up" mark outside a [`Reader`] (a consumer's
/// lending reads).
#[inline]
pub(crate) fn pace_reader() {
    crate::sync::wait::pace(&wait::POLICY);
}

pub use config::{LapPolicy, RingConfig};
pub use error::{
    BatchClosed, GetError, PublishBatchTimeoutError, PublishError, PublishTimeoutError, ReadError,
    ReadTimeoutError, TryPublishError, TryReadError,
};
pub use producer::{MultiProducer, SingleProducer};
pub use reader::{ReadRun, Reader};
pub use task::{ReadBatchFuture, ReadFuture, ReadRunFuture};

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::time::Instant;
use crate::sync::{Arc, CachePadded};
use crate::Error;
use registry::ReaderCursor;
use sequencer::Sequencer;
use shared::Shared;

/// Where a new reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the oldest entry still in the ring.
    Oldest,
    /// At the next entry to be published (reads only what comes after it joined).
    Tail,
    /// At this sequence; it must still be in the ring, or be the next to be published.
    At(u64),
}

/// A handle to a ring: adds readers, closes it, answers questions about it. `Clone` is
/// cheap (an `Arc`). `Send` and `Sync` when `T: Send + Sync` (readers clone entries on
/// several threads at once).
///
/// # Examples
///
/// ```
/// use logbus::ring::{Ring, RingConfig, Start, ReadError};
/// use std::thread;
///
/// let (mut producer, ring) = Ring::single_producer(RingConfig::new(8))?;
/// let mut reader = ring.gating_reader(Start::Tail)?;
/// let t = thread::spawn(move || {
///     for i in 0..100u64 {
///         producer.publish(i).unwrap(); // waits while the reader is a lap behind
///     }
/// }); // dropping the producer closes the ring
/// let mut sum = 0;
/// loop {
///     match reader.read() {
///         Ok(v) => sum += v,
///         Err(ReadError::Closed) => break,
///         Err(e) => panic!("{e}"),
///     }
/// }
/// t.join().unwrap();
/// assert_eq!(sum, 4950);
/// # Ok::<(), logbus::Error>(())
/// ```
pub struct Ring<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Ring<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> std::fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

impl<T> Ring<T> {
    /// A ring with one producer (the fast path). Dropping the producer closes the ring.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the capacity is not a power of two in `2..=2^32` or the
    /// start sequence exceeds 2^55.
    pub fn single_producer(config: RingConfig) -> Result<(SingleProducer<T>, Ring<T>), Error> {
        config.validate()?;
        let shared = Arc::new(Shared::new(&config, false));
        let ring = Ring {
            shared: Arc::clone(&shared),
        };
        Ok((SingleProducer::new(Sequencer::new(shared)), ring))
    }

    /// [`single_producer`](Self::single_producer) for a `T` with drop glue some of whose
    /// values drop as a no-op (`plain` says which: while only such values were published,
    /// the producer overwrites old values without reading them back to drop them;
    /// `sequencer`, "Plain values"), built for an announcing reader ([`announcing_reader`](Self::announcing_reader)): the producer publishes the
    /// end of each claim and takes slot locks only while such a reader reads. Runs of plain
    /// values are written without their slot tags (`slot`, "Stale tags").
    pub(crate) fn single_producer_plain(
        config: RingConfig,
        plain: Option<fn(&T) -> bool>,
    ) -> Result<(SingleProducer<T>, Ring<T>), Error> {
        config.validate()?;
        let mut shared = Shared::new(&config, false);
        shared.plain = plain;
        shared.announces = true;
        let shared = Arc::new(shared);
        let ring = Ring {
            shared: Arc::clone(&shared),
        };
        Ok((SingleProducer::new(Sequencer::new(shared)), ring))
    }

    /// A ring for any number of producers (clone the [`MultiProducer`]). Dropping the last
    /// producer closes the ring.
    ///
    /// # Errors
    ///
    /// As [`single_producer`](Self::single_producer).
    pub fn multi_producer(config: RingConfig) -> Result<(MultiProducer<T>, Ring<T>), Error> {
        config.validate()?;
        // No `plain` function (`Shared::plain`): its one user, the partition, went
        // single-producer (`single_producer_plain`). A multi-producer run is plain only
        // when `T` has no drop glue (`sequencer`, "Plain runs").
        let shared = Arc::new(Shared::new(&config, true));
        let ring = Ring {
            shared: Arc::clone(&shared),
        };
        Ok((MultiProducer::new(Sequencer::new(shared)), ring))
    }

    /// A non-gating reader: producers never wait for it; if it falls a lap behind it gets
    /// [`TryReadError::Lagged`] with the number of entries it missed.
    ///
    /// # Errors
    ///
    /// [`Error::SequenceOutOfRange`] with the valid range when `start` is
    /// [`Start::At`] a sequence no longer (or not yet) in the ring.
    pub fn reader(&self, start: Start) -> Result<Reader<T>, Error> {
        self.add_reader(start, false)
    }

    /// A gating reader: producers never overwrite an entry it has not read, and wait for it
    /// when the ring is full (the partition log's disk writer).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] on an [`LapPolicy::DropOldest`] ring;
    /// [`Error::SequenceOutOfRange`] as for [`reader`](Self::reader).
    pub fn gating_reader(&self, start: Start) -> Result<Reader<T>, Error> {
        if !self.shared.blocks() {
            return Err(Error::InvalidConfig {
                name: "overflow",
                value: "DropOldest".into(),
                valid: "gating readers need LapPolicy::Block".into(),
            });
        }
        self.add_reader(start, true)
    }

    /// A non-gating reader at the oldest entry that costs producers nothing while it is
    /// idle: each read announces itself (`reader`, "Announcing readers"). For readers that
    /// read by sequence now and then (the partition's reads by offset). On a single-producer
    /// ring not built for one ([`single_producer`](Self::single_producer)) it is a plain
    /// non-gating reader.
    ///
    /// # Errors
    ///
    /// As [`reader`](Self::reader).
    pub(crate) fn announcing_reader(&self) -> Result<Reader<T>, Error> {
        if !self.shared.multi && !self.shared.announces {
            return self.reader(Start::Oldest);
        }
        let cursor = Arc::new(ReaderCursor {
            next: CachePadded::new(AtomicU64::new(self.shared.start)),
            gating: false,
        });
        Ok(Reader::announcing(
            Arc::clone(&self.shared),
            cursor,
            self.shared.start,
        ))
    }

    /// Waits, outside any producer handle, until a claim of `need` sequences at `at` might
    /// fit (as a producer waiting for gating readers does), the reader set changes, the ring
    /// closes, or `deadline` passes (returns `false` then). For producers that share one
    /// handle behind a lock and wait without holding it; the caller claims again after.
    pub(crate) fn wait_for_room(&self, at: u64, need: u64, deadline: Option<Instant>) -> bool {
        let shared = &*self.shared;
        let mut view = registry::GateView::new();
        shared.registry.snapshot(&mut view);
        let ready = || {
            !shared.blocks()
                || shared.is_close_requested()
                || !shared.registry.is_current(&view)
                || view
                    .min_gate()
                    .map_or(true, |g| g.saturating_add(shared.capacity) >= at + need)
        };
        wait::wait_until(&shared.producers_wait, deadline, ready)
    }

    /// The asynchronous [`wait_for_room`](Self::wait_for_room): `Ready` once a claim of
    /// `need` sequences at `at` might fit, the reader set changed, or the ring is closing;
    /// otherwise registers the task in `slot` and returns `Pending` (the caller claims
    /// again when woken, and calls [`cancel_room_waker`](Self::cancel_room_waker) if it
    /// stops waiting). Gating readers wake producers with the light fence: the
    /// registration completes the handshake with the heavy one.
    pub(crate) fn poll_for_room(
        &self,
        cx: &mut std::task::Context<'_>,
        slot: &mut crate::sync::WakerSlot,
        at: u64,
        need: u64,
    ) -> std::task::Poll<()> {
        let shared = &*self.shared;
        let mut view = registry::GateView::new();
        shared.registry.snapshot(&mut view);
        let ready = || {
            (!shared.blocks()
                || shared.is_close_requested()
                || !shared.registry.is_current(&view)
                || view
                    .min_gate()
                    .map_or(true, |g| g.saturating_add(shared.capacity) >= at + need))
            .then_some(())
        };
        shared.producers_wait.poll_until(cx, slot, || true, ready)
    }

    /// Takes a task's registration of [`poll_for_room`](Self::poll_for_room) off.
    pub(crate) fn cancel_room_waker(&self, slot: &mut crate::sync::WakerSlot) {
        self.shared.producers_wait.cancel_waker(slot);
    }

    fn add_reader(&self, start: Start, gating: bool) -> Result<Reader<T>, Error> {
        let shared = &self.shared;
        let cap = shared.capacity;
        // A provisional position no higher than the floor we will get: safe for producers
        // that see the cursor before we store the real one.
        let provisional = shared.registry.floor(cap).max(shared.start);
        let cursor = Arc::new(ReaderCursor {
            next: CachePadded::new(AtomicU64::new(provisional)),
            gating,
        });
        let floor = shared
            .registry
            .join(Arc::clone(&cursor), cap)
            .max(shared.start);
        let tail = shared.tail();
        let newest = tail.max(floor);
        let oldest = tail.saturating_sub(cap).max(floor);
        let pos = match start {
            Start::Oldest => oldest,
            Start::Tail => newest,
            Start::At(s) if (oldest..=newest).contains(&s) => s,
            Start::At(s) => {
                shared.registry.leave(&cursor);
                return Err(Error::SequenceOutOfRange {
                    requested: s,
                    oldest,
                    newest,
                });
            }
        };
        // Release: pairs with producers' Acquire loads of gating cursors.
        cursor.next.store(pos, Ordering::Release);
        if gating {
            shared.producers_wait.notify_all();
        }
        Ok(Reader::new(Arc::clone(shared), cursor, pos, floor, gating))
    }

    /// Runs `f(seq, &entry)` over `from..from + n` in place: no clone, no slot lock, no
    /// atomic per entry (a lending read of a run a gating reader holds).
    ///
    /// # Safety
    ///
    /// This thread saw every sequence of the run published (Acquire: through a gating
    /// reader's read of it), `n <= capacity`, and until this returns some gating reader of
    /// this ring stays registered at or below `from`, so no producer overwrites the run.
    #[inline(always)]
    pub(crate) unsafe fn read_held_run(&self, from: u64, n: usize, mut f: impl FnMut(u64, &T)) {
        let slots = &self.shared.slots;
        slots.prefetch_run(from, from + n as u64);
        // SAFETY: the caller's guarantee (published, seen, and held by a gate).
        unsafe { slots.read_run_unlocked(from, from + n as u64, |seq, v| f(seq, v)) };
    }

    /// Whether every value of a run this thread saw published (with Acquire, as
    /// [`read_held_run`](Self::read_held_run) requires) passes the ring's `plain` predicate
    /// ([`single_producer_plain`](Self::single_producer_plain)): `true` only while no value
    /// that fails it was ever published. `false` without a predicate.
    #[inline(always)]
    pub(crate) fn published_only_plain(&self) -> bool {
        self.shared.published_only_plain()
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.capacity as usize
    }

    /// The ring's first sequence.
    pub fn start_sequence(&self) -> u64 {
        self.shared.start
    }

    /// The producers' cursor: the next sequence to be published (single producer) or claimed
    /// (multi-producer; claimed entries are published shortly after).
    pub fn cursor(&self) -> u64 {
        self.shared.tail()
    }

    /// How many entries the ring holds (at most the capacity).
    pub fn len(&self) -> usize {
        let s = &*self.shared;
        (s.tail() - s.start).min(s.capacity) as usize
    }

    /// Whether nothing was ever published.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The oldest sequence a new reader could start at now (a hint: producers move on).
    pub fn oldest(&self) -> u64 {
        let s = &*self.shared;
        s.tail()
            .saturating_sub(s.capacity)
            .max(s.registry.floor(s.capacity))
            .max(s.start)
    }

    /// The number of readers attached.
    pub fn reader_count(&self) -> usize {
        self.shared.registry.len()
    }

    /// Closes the ring: publishes fail from now on (handing values back), readers read what
    /// was published and then get `Closed`, and every parked producer and reader wakes.
    /// Idempotent.
    pub fn close(&self) {
        self.shared.close();
    }

    /// Whether [`close`](Self::close) was called (or every producer is gone).
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// The overflow mode.
    pub fn overflow(&self) -> LapPolicy {
        self.shared.overflow
    }
}
