//! The set of readers, as producers see it: gating cursors to wait for, and whether any
//! non-gating reader might be cloning a slot.
//!
//! Readers join and leave at run time under a mutex and bump `epoch`. Producers never take
//! the mutex on their fast path: each producer keeps a [`GateView`] (a snapshot of the gating
//! cursors, refreshed only when `epoch` moved) and a claim *limit* computed from it, and
//! re-checks only when a claim would pass that limit (the Disruptor's cached gating
//! sequence, rtrb's cached head).
//!
//! # The overwrite floor
//!
//! A producer with a stale view may still claim up to its limit. So that a joining reader
//! never starts where such a producer may overwrite, every producer publishes its limit into
//! `limit` (a maximum over all producers) *before* claiming under it, then re-reads `epoch`;
//! a joining reader bumps `epoch`, then reads `limit`. Both sides fence between
//! their store and their load (an asymmetric pair: `light` on the producer, `heavy` on the
//! reader), so either the producer sees the new reader (and recomputes
//! its limit and its locking with it) or the reader sees the producer's limit — and starts
//! no lower than `limit - capacity`, the *overwrite floor*: no claim under any limit
//! published so far evicts a sequence at or above it.

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{asym_fence, Arc, CachePadded, Mutex};

/// One reader's cursor, shared with producers.
#[derive(Debug)]
pub(crate) struct ReaderCursor {
    /// The next sequence the reader will read; every sequence below it has been read (or
    /// skipped as lagged). `u64::MAX` once the reader left (never gates again).
    pub(crate) next: CachePadded<AtomicU64>,
    /// Whether producers wait for this reader.
    pub(crate) gating: bool,
}

#[derive(Debug)]
pub(crate) struct Registry {
    /// Padded: joins, leaves and snapshots write the lock word.
    readers: CachePadded<Mutex<Vec<Arc<ReaderCursor>>>>,
    /// Bumped (under `readers`' lock) whenever a reader joins or leaves.
    epoch: CachePadded<AtomicU64>,
    /// The highest claim limit any producer has published (exclusive): every claim made so
    /// far, and every claim a producer with a stale view can still make, is below it.
    limit: CachePadded<AtomicU64>,
}

/// A producer's snapshot of the registry.
#[derive(Debug)]
pub(crate) struct GateView {
    epoch: u64,
    gating: Vec<Arc<ReaderCursor>>,
    lossy: bool,
}

impl GateView {
    pub(crate) fn new() -> Self {
        Self {
            // No registry epoch is MAX, so the first refresh takes a snapshot.
            epoch: u64::MAX,
            gating: Vec::new(),
            lossy: false,
        }
    }

    /// Whether a non-gating reader was registered at the last refresh: writes must then take
    /// each slot's lock.
    #[inline]
    pub(crate) fn lossy(&self) -> bool {
        self.lossy
    }

    /// The lowest gating cursor, or `None` without gating readers.
    pub(crate) fn min_gate(&self) -> Option<u64> {
        self.gating
            .iter()
            // Acquire: pairs with the reader's Release store of its cursor, so its reads of
            // the slots below happen before we overwrite them.
            .map(|c| c.next.load(Ordering::Acquire))
            .min()
    }
}

impl Registry {
    pub(crate) fn new(initial_limit: u64) -> Self {
        Self {
            readers: CachePadded::new(Mutex::new(Vec::new())),
            epoch: CachePadded::new(AtomicU64::new(0)),
            limit: CachePadded::new(AtomicU64::new(initial_limit)),
        }
    }

    /// Whether `view` is still current.
    #[inline]
    pub(crate) fn is_current(&self, view: &GateView) -> bool {
        // Acquire: pairs with the Release bump in `join`/`leave`, so a changed epoch comes
        // with the changed reader list (also guarded by the mutex taken in `refresh`).
        self.epoch.load(Ordering::Acquire) == view.epoch
    }

    /// Fills `view` with the current reader set (if it changed), without touching the claim
    /// limit: for a thread that only waits for room (a producer handle's waiter outside it).
    pub(crate) fn snapshot(&self, view: &mut GateView) {
        if !self.is_current(view) {
            let readers = self.readers.lock();
            // Relaxed: read under the lock that every change of the reader set holds.
            view.epoch = self.epoch.load(Ordering::Relaxed);
            view.gating.clear();
            view.gating
                .extend(readers.iter().filter(|r| r.gating).cloned());
            view.lossy = readers.iter().any(|r| !r.gating);
        }
    }

    /// Computes a producer's claim limit, publishing it (see the module docs).
    ///
    /// `limit_for(view)` turns a fresh view into a limit (it reads the gating cursors).
    pub(crate) fn refresh(
        &self,
        view: &mut GateView,
        sole_producer: bool,
        mut limit_for: impl FnMut(&GateView) -> u64,
    ) -> u64 {
        loop {
            self.snapshot(view);
            let limit = limit_for(view);
            if sole_producer {
                // The only writer of `limit`: a load and a store, no read-modify-write.
                // Relaxed: ordered before the epoch load by the fence below.
                if self.limit.load(Ordering::Relaxed) < limit {
                    self.limit.store(limit, Ordering::Relaxed);
                }
            } else {
                // Relaxed RMW: ordered before the epoch load by the fence below.
                self.limit.fetch_max(limit, Ordering::Relaxed);
            }
            // The light side of an asymmetric Dekker handshake with `join`'s heavy fence
            // (see the module docs): producers refresh often, readers join rarely.
            asym_fence::light();
            if self.is_current(view) {
                return limit;
            }
        }
    }

    /// Registers a reader and returns the overwrite floor it must start at or above.
    pub(crate) fn join(&self, cursor: Arc<ReaderCursor>, capacity: u64) -> u64 {
        let mut readers = self.readers.lock();
        readers.push(cursor);
        // Release: pairs with the Acquire in `is_current`.
        self.epoch.fetch_add(1, Ordering::Release);
        // The heavy side of the handshake with `refresh`'s light fence.
        asym_fence::heavy();
        // Relaxed: ordered by the fence above.
        let limit = self.limit.load(Ordering::Relaxed);
        drop(readers);
        limit.saturating_sub(capacity)
    }

    /// The current overwrite floor (a lower bound on what any reader may still join at).
    pub(crate) fn floor(&self, capacity: u64) -> u64 {
        // Heavy fence: as in `join`, for a caller that has already joined.
        asym_fence::heavy();
        // Relaxed: ordered by the fence above.
        self.limit.load(Ordering::Relaxed).saturating_sub(capacity)
    }

    /// Removes a reader (it stops gating at once: its cursor becomes `u64::MAX`).
    pub(crate) fn leave(&self, cursor: &Arc<ReaderCursor>) {
        // Release: a producer that sees MAX may overwrite everything this reader read.
        cursor.next.store(u64::MAX, Ordering::Release);
        let mut readers = self.readers.lock();
        readers.retain(|r| !Arc::ptr_eq(r, cursor));
        // Release: pairs with the Acquire in `is_current`.
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// How many readers are registered.
    pub(crate) fn len(&self) -> usize {
        self.readers.lock().len()
    }
}
