//! Lending reads: a group's records passed to the reader in place, in the ring's slots.
//!
//! A group's gate (a gating reader at its committed offset) keeps producers off every
//! record at or after it. A read at or after the gate counts the published run under the
//! group's lock (an Acquire load of each slot's tag), registers itself as a lender and lets
//! go of the lock; it then passes each record to the caller by reference, straight from its
//! slot, with no lock held, no clone and no atomic per record. While any lender is in
//! progress the gate does not move forward (a commit stores the offset; the last lender
//! moves the gate there) and is not dropped (a removed group's gate goes with the last
//! lender), so no producer can overwrite a lent record. A commit backwards puts a lower
//! gate in place, which holds the run too.

use super::{advance, Entry, GroupSlot, Partition, ReadOutcome};
use crate::ring::GetError;

/// A lending read in progress on a group: ends it when dropped (also on unwind from the
/// caller's function).
struct Lending<'a, K, V> {
    group: &'a GroupSlot<K, V>,
}

impl<K, V> Drop for Lending<'_, K, V> {
    fn drop(&mut self) {
        let mut g = self.group.lock();
        g.lenders -= 1;
        if g.lenders > 0 {
            return;
        }
        if g.removed {
            let gate = g.gate.take();
            drop(g);
            drop(gate);
            return;
        }
        // The commits made while lending, applied now.
        if let (Some(committed), Some(gate)) = (g.committed, &mut g.gate) {
            if gate.position() < committed {
                advance(gate, committed);
            }
        }
    }
}

impl<K, V> Partition<K, V> {
    /// Passes the records from `offset` on (at most `max`, below the high watermark) to `f`
    /// in place, in offset order, with no lock held while `f` runs (module docs). `None`
    /// when this read cannot lend (a replicated, persisted or drop-oldest partition, no
    /// gate, `offset` below the gate or out of range): [`read`](Self::read) serves it then.
    pub(crate) fn lend(
        &self,
        offset: u64,
        max: usize,
        now_ms: i64,
        group: &GroupSlot<K, V>,
        f: impl FnMut(u64, &Entry<K, V>),
    ) -> Option<ReadOutcome> {
        if self.replicated.is_some() || self.disk.is_some() || !self.config.gated || max == 0 {
            return None;
        }
        let hw = self.high_watermark();
        if offset < self.log_start(now_ms) || offset > hw {
            return None;
        }
        let max = max.min((hw - offset).min(usize::MAX as u64) as usize);
        let n = {
            let mut g = group.lock();
            if g.removed {
                return None;
            }
            let gate = g.gate.as_mut()?;
            // Counts the published run (the tags' Acquire loads make its records visible
            // here); reads nothing.
            match gate.get_run_with_noting(offset, max, |_, _| ()) {
                (0, Some(GetError::NotPublished { .. })) => return Some(ReadOutcome::Empty),
                (0, _) => return None,
                (n, _) => {
                    g.lenders += 1;
                    n
                }
            }
        };
        let _lending = Lending { group };
        // SAFETY: this thread saw `offset..offset + n` published (the gate's read above);
        // `n <= max <= hw - offset`, within the ring (the gate is at or below `offset` and
        // producers stay within a lap of it); the gate was at or below `offset` and, while
        // `_lending` counts us, neither moves forward nor is dropped (module docs).
        unsafe { self.ring.read_held_run(offset, n, f) };
        Some(ReadOutcome::Read(n))
    }
}
