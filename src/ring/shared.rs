//! The state every handle of one ring shares: the slots, the producer cursors, the close
//! state, the reader registry and the two wait sets.

use super::config::{LapPolicy, RingConfig};
use super::registry::Registry;
use super::slot::{tag, Slot, Slots};
use crate::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{asym_fence, CachePadded, WaitSet};

/// The bit of `claim` that marks a closed multi-producer ring.
pub(crate) const CLOSED_BIT: u64 = 1 << 63;
/// `closed_at` while the ring is open.
pub(crate) const OPEN: u64 = u64::MAX;

pub(crate) struct Shared<T> {
    /// `capacity` slots; sequence `s` lives in slot `s & mask`.
    pub(crate) slots: Slots<T>,
    pub(crate) capacity: u64,
    /// The first sequence of the ring (0, or where a recovered log ends).
    pub(crate) start: u64,
    pub(crate) overflow: LapPolicy,
    pub(crate) multi: bool,
    /// For a `T` with drop glue: which values drop as a no-op (*plain*; the partition's
    /// entries without headers), so that overwriting them needs no drop (`sequencer`,
    /// "Plain values"). `None`: no value of a type with drop glue is plain.
    pub(crate) plain: Option<fn(&T) -> bool>,
    /// Set, for good, before the claim of a run holding a value that is not plain: for
    /// readers, whether a published run may hold one (`published_only_plain`); for
    /// multi-producer writers, whether a value they replace may need its drop (a single
    /// producer keeps an exact record of its own instead: `sequencer`, "Plain values").
    /// Written once, read per run: it sits among the read-mostly fields.
    pub(crate) impure: AtomicBool,
    /// Multi-producer: the next sequence to claim, plus [`CLOSED_BIT`] once closed. A single
    /// producer with `announces`: the end of its latest claim (never the closed bit).
    pub(crate) claim: CachePadded<AtomicU64>,
    /// Single producer: the end (exclusive) of its published prefix. Readers poll it.
    pub(crate) published: CachePadded<AtomicU64>,
    /// Single producer: true while it is inside a publish (the close handshake, see
    /// `close`). On its own line, which readers never read, so setting and clearing it per
    /// publish costs the producer no cache-line transfer.
    pub(crate) busy: CachePadded<AtomicBool>,
    /// Set by `close` (the ring refuses new publishes from then on).
    pub(crate) close_requested: AtomicBool,
    /// [`OPEN`], or the end (exclusive) of what will ever be published: readers at or past it
    /// are done.
    pub(crate) closed_at: CachePadded<AtomicU64>,
    /// Live producer handles; the last one to go closes the ring.
    pub(crate) producers: AtomicUsize,
    pub(crate) registry: Registry,
    /// Multi-producer, or a single producer with `announces`: reads in progress by
    /// announcing readers (see `reader`, "Announcing readers"). Padded: such reads write
    /// it, and every claimed run reads it.
    pub(crate) announced: CachePadded<AtomicU64>,
    /// Single producer: the ring was built for an announcing reader, so the producer
    /// stores the end of each claim in `claim` and checks `announced` after it.
    pub(crate) announces: bool,
    /// Readers parked on an empty ring. Producers notify with the light fence. Padded: a
    /// parking reader writes it, and the fields every publish reads must not share its line.
    pub(crate) readers_wait: CachePadded<WaitSet>,
    /// Producers parked on a full ring. Gating readers notify with the light fence. Padded
    /// for the same reason.
    pub(crate) producers_wait: CachePadded<WaitSet>,
}

impl<T> Shared<T> {
    pub(crate) fn new(config: &RingConfig, multi: bool) -> Self {
        let capacity = config.capacity as u64;
        asym_fence::init();
        Self {
            slots: Slots::new(config.capacity),
            capacity,
            start: config.start,
            overflow: config.overflow,
            multi,
            plain: None,
            impure: AtomicBool::new(false),
            claim: CachePadded::new(AtomicU64::new(config.start)),
            published: CachePadded::new(AtomicU64::new(config.start)),
            busy: CachePadded::new(AtomicBool::new(false)),
            close_requested: AtomicBool::new(false),
            closed_at: CachePadded::new(AtomicU64::new(OPEN)),
            producers: AtomicUsize::new(1),
            registry: Registry::new(config.start + capacity),
            announced: CachePadded::new(AtomicU64::new(0)),
            announces: false,
            readers_wait: CachePadded::new(WaitSet::new()),
            producers_wait: CachePadded::new(WaitSet::new()),
        }
    }

    /// Whether every value of `values` is plain (drops as a no-op).
    #[inline]
    pub(crate) fn all_plain(&self, values: &[T]) -> bool {
        if !std::mem::needs_drop::<T>() {
            return true;
        }
        self.plain.is_some_and(|plain| values.iter().all(plain))
    }

    /// Before claiming a run whose values are not all plain: from now on, writers drop what
    /// they overwrite (`sequencer`, "Plain values").
    #[inline]
    pub(crate) fn mark_impure(&self) {
        // Relaxed (load and store): the Release store of each slot's tag after its write
        // orders it before every later writer's Acquire load of that tag (`may_be_impure`).
        if !self.impure.load(Ordering::Relaxed) {
            self.impure.store(true, Ordering::Relaxed);
        }
    }

    /// For a multi-producer writer that holds a slot (it loaded the previous value's tag
    /// with Acquire), or a writer taking slot locks: whether that value may be impure, and
    /// so must be dropped.
    #[inline]
    pub(crate) fn may_be_impure(&self) -> bool {
        // Relaxed: ordered after the previous writer's `mark_impure` by the slot's tag
        // (its Release store, our Acquire load).
        self.impure.load(Ordering::Relaxed)
    }

    /// For a reader that saw a run published (an Acquire load of `published`, or a view
    /// of it passed on by a lock): whether every value of the run is plain. Only a ring
    /// with a `plain` predicate can say so: writers mark the ring impure before they
    /// publish a value it calls not plain (`sequencer`, "Plain values"); without one, a
    /// value with drop glue marks nothing on some paths.
    #[inline(always)]
    pub(crate) fn published_only_plain(&self) -> bool {
        // Relaxed: every writer of a value that is not plain stores `impure` before the
        // Release store of `published` that publishes it; the caller's Acquire load of that
        // store (or of a later one) orders our load after the flag's store.
        self.plain.is_some() && !self.impure.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn slot(&self, seq: u64) -> Slot<'_, T> {
        self.slots.get(seq)
    }

    /// The tag a slot must hold before `seq` is written into it.
    #[inline]
    pub(crate) fn prev_tag(&self, seq: u64) -> u64 {
        if seq >= self.start + self.capacity {
            tag(seq - self.capacity)
        } else {
            0
        }
    }

    /// The next sequence producers will claim (single producer: the end of the published
    /// prefix, since its claims are private until published).
    #[inline]
    pub(crate) fn tail(&self) -> u64 {
        if self.multi {
            // Acquire: pairs with the claimers' CAS; only a hint for readers.
            self.claim.load(Ordering::Acquire) & !CLOSED_BIT
        } else {
            // Acquire: pairs with the producer's Release store of its cursor.
            self.published.load(Ordering::Acquire)
        }
    }

    /// After claiming a run (a single producer: after storing its end in `claim`): whether
    /// its writes must take the slot locks
    /// because an announcing reader may be reading (`reader`, "Announcing readers").
    #[inline]
    pub(crate) fn reads_announced(&self) -> bool {
        // SeqCst: Dekker's handshake with `announce` (our claim CAS, fence, load; its
        // increment, fence, load of the claim cursor): either we see its count, or it sees
        // our claim and never reads a slot this run overwrites.
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release decrement that ends an announced read, so its
        // clones happen before our unlocked overwrite.
        self.announced.load(Ordering::Acquire) != 0
    }

    /// Starts an announced read (multi-producer, or a single producer with `announces`).
    /// Returns the guard that ends it and the lowest sequence it may read under slot locks:
    /// every lower one is overwritten or being overwritten, possibly by an unlocked write.
    #[inline]
    pub(crate) fn announce(&self) -> (Announced<'_>, u64) {
        debug_assert!(self.multi || self.announces);
        // Relaxed: ordered before the claim load by the fence.
        self.announced.fetch_add(1, Ordering::Relaxed);
        let guard = Announced(&self.announced);
        // SeqCst: the other side of `reads_announced`'s fence.
        fence(Ordering::SeqCst);
        // Relaxed: ordered after our increment by the fence; a claim it misses sees our
        // count and locks.
        let claimed = self.claim.load(Ordering::Relaxed) & !CLOSED_BIT;
        (guard, claimed.saturating_sub(self.capacity).max(self.start))
    }

    /// The end (exclusive) of what will ever be published, once closed.
    #[inline]
    pub(crate) fn closed_at(&self) -> u64 {
        // Acquire: pairs with the Release in `finish_close`, so everything published below
        // it is visible with it.
        self.closed_at.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn is_close_requested(&self) -> bool {
        // Relaxed: a hint on the fast path; the handshake in `close` decides.
        self.close_requested.load(Ordering::Relaxed)
    }

    /// Closes the ring: refuses new publishes, and lets readers finish once they drained what
    /// was published. Wakes every parked producer and reader. Idempotent.
    pub(crate) fn close(&self) {
        // SeqCst: one side of the close handshake with the single producer (below).
        self.close_requested.store(true, Ordering::SeqCst);
        if self.multi {
            // AcqRel: claims are CASes on this word; after this no claim succeeds, and every
            // claim below the returned value is (or will be) published by its producer.
            let end = self.claim.fetch_or(CLOSED_BIT, Ordering::AcqRel) & !CLOSED_BIT;
            self.finish_close(end);
        } else {
            // The handshake: we store `close_requested`, heavy-fence, load `busy`; the
            // producer stores `busy` (set or cleared), light-fences, loads `close_requested`.
            // Either we see it idle (and its next publish sees the request and refuses), or
            // it sees the request when it ends the publish in flight and finishes the close
            // itself.
            asym_fence::heavy();
            // Acquire: pairs with the producer's Release store of `busy = false`, which
            // follows its store of `published`.
            if !self.busy.load(Ordering::Acquire) {
                self.finish_close(self.tail());
            }
        }
        self.producers_wait.notify_all();
    }

    /// Records where the closed ring ends and wakes readers.
    pub(crate) fn finish_close(&self, end: u64) {
        // Release: pairs with the Acquire in `closed_at`. `fetch_min`: both sides of the
        // close handshake may get here, with the same end.
        self.closed_at.fetch_min(end, Ordering::Release);
        self.readers_wait.notify_all();
    }

    /// Whether the ring is closed (no publish will succeed any more).
    pub(crate) fn is_closed(&self) -> bool {
        self.is_close_requested()
    }

    /// Whether producers may wait for gating readers.
    #[inline]
    pub(crate) fn blocks(&self) -> bool {
        self.overflow == LapPolicy::Block
    }
}

/// An announced read in progress; dropping it ends the read (also on unwind).
pub(crate) struct Announced<'a>(&'a AtomicU64);

impl Drop for Announced<'_> {
    fn drop(&mut self) {
        // Release: the clones of the read happen before a producer's Acquire load that sees
        // the count drop (then it overwrites without locks).
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl<T> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity)
            .field("start", &self.start)
            .field("overflow", &self.overflow)
            .field("multi_producer", &self.multi)
            .field("tail", &self.tail())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}
