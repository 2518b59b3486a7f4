//! A single producer's record of which slots may hold a value that needs its drop.
//!
//! A ring told which values drop as a no-op (`Shared::plain`) lets runs of such *plain*
//! values overwrite old values unread, as long as every value they replace is plain too
//! (`sequencer`, "Plain values"). With one producer, that producer wrote every value the
//! ring holds, so it can know exactly which slots hold one that is not plain: a bit per
//! slot, set when it writes such a value and cleared when it replaces the value and drops
//! it. A run of plain values then writes unread every slot whose bit is clear, and takes
//! the old value out (to drop it) only where the bit is set: a partition's transaction
//! markers, one boxed entry per transaction, cost one such slot each, not the whole ring's
//! batch path.
//!
//! The record is the producer handle's own memory, touched by nothing else: it needs no
//! atomic. Producers that share the handle behind a lock (the partition's appenders) are
//! ordered by that lock. Readers never consult it: what a reader may assume of a published
//! run is `Shared::impure` (`Shared::published_only_plain`).

/// One bit per slot (`slots`, indexed like the ring's: `sequence & mask`); allocated at
/// the first value that is not plain, so a ring that only ever holds plain values pays a
/// count's test per run.
///
/// Invariant: every slot that holds a value that is not plain has its bit set (a bit may
/// also be set over a plain value: that costs a read, never a leak); `marked` counts the
/// set bits.
#[derive(Debug)]
pub(crate) struct ImpureSlots {
    bits: Box<[u64]>,
    mask: u64,
    marked: usize,
}

impl ImpureSlots {
    /// No slot marked, for a ring of `capacity` slots (a power of two); allocates nothing.
    pub(crate) fn new(capacity: u64) -> Self {
        debug_assert!(capacity.is_power_of_two());
        Self {
            bits: Box::new([]),
            mask: capacity - 1,
            marked: 0,
        }
    }

    /// Records that the slot of `seq` holds a value that is not plain (or may hold one).
    pub(crate) fn mark(&mut self, seq: u64) {
        if self.bits.is_empty() {
            let words = (self.mask as usize + 1).div_ceil(64);
            self.bits = vec![0; words].into_boxed_slice();
        }
        let (word, bit) = self.position(seq);
        let w = &mut self.bits[word];
        if *w & bit == 0 {
            *w |= bit;
            self.marked += 1;
        }
    }

    /// [`mark`](Self::mark) for each of `first..first + len` (`len` at most the capacity).
    pub(crate) fn mark_run(&mut self, first: u64, len: u64) {
        for seq in first..first + len {
            self.mark(seq);
        }
    }

    /// Records that the slot of `seq` now holds a plain value, the one it replaced having
    /// been dropped.
    #[inline]
    pub(crate) fn clear(&mut self, seq: u64) {
        if self.marked == 0 {
            return;
        }
        let (word, bit) = self.position(seq);
        let w = &mut self.bits[word];
        if *w & bit != 0 {
            *w &= !bit;
            self.marked -= 1;
        }
    }

    /// The first sequence of `from..end` (at most a capacity long) whose slot is marked,
    /// or `end` when none is.
    #[inline]
    pub(crate) fn next_marked(&self, from: u64, end: u64) -> u64 {
        if self.marked == 0 {
            return end;
        }
        // Bits per word that belong to slots: 64, or the capacity when it is smaller (then
        // one word holds every slot and the run wraps within it).
        let span = (self.mask + 1).min(64);
        let mut seq = from;
        while seq < end {
            let (word, _) = self.position(seq);
            let shift = seq & self.mask & (span - 1);
            let rest = self.bits[word] >> shift;
            if rest != 0 {
                let found = seq + u64::from(rest.trailing_zeros());
                // Bits above `shift` in this word are slots `seq + 1..`, in order, up to
                // the word's (or the ring's) end.
                return found.min(end);
            }
            seq += span - shift;
        }
        end
    }

    /// The word and the bit of `seq`'s slot.
    #[inline(always)]
    fn position(&self, seq: u64) -> (usize, u64) {
        let index = seq & self.mask;
        ((index / 64) as usize, 1 << (index % 64))
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::ImpureSlots;

    /// What `next_marked` must answer: a scan of each sequence's slot.
    fn scan(marks: &[bool], mask: u64, from: u64, end: u64) -> u64 {
        (from..end)
            .find(|&s| marks[(s & mask) as usize])
            .unwrap_or(end)
    }

    /// Marks and clears slots of rings from 2 to 256 slots (one word, and several), and asks
    /// for the next marked slot over every run up to a capacity long, across the wrap:
    /// the answer is always the scan's.
    #[test]
    fn next_marked_finds_the_first_marked_slot_of_any_run() {
        for capacity in [2u64, 4, 8, 64, 128, 256] {
            let mut slots = ImpureSlots::new(capacity);
            let mut marks = vec![false; capacity as usize];
            assert_eq!(slots.next_marked(3, 3 + capacity), 3 + capacity);
            // A spread of marks, some set twice, a few cleared again.
            for k in 0..capacity / 2 + 1 {
                let seq = (k * 37 + 5) * 3;
                slots.mark(seq);
                marks[(seq % capacity) as usize] = true;
            }
            for k in 0..capacity / 4 + 1 {
                let seq = k * 11 + capacity * 5;
                slots.clear(seq);
                marks[(seq % capacity) as usize] = false;
            }
            assert_eq!(slots.marked, marks.iter().filter(|&&m| m).count());
            let base = capacity * 1000;
            for from in base..base + capacity {
                for len in 0..=capacity {
                    let end = from + len;
                    assert_eq!(
                        slots.next_marked(from, end),
                        scan(&marks, capacity - 1, from, end),
                        "capacity {capacity}, {from}..{end}"
                    );
                }
            }
            for seq in 0..capacity {
                slots.clear(seq);
            }
            assert_eq!(slots.marked, 0);
            assert_eq!(slots.next_marked(base, base + capacity), base + capacity);
        }
    }

    /// A run marks each of its slots once; clearing a slot that is not marked changes
    /// nothing.
    #[test]
    fn mark_run_counts_each_slot_once() {
        let mut slots = ImpureSlots::new(8);
        slots.clear(3);
        assert_eq!(slots.marked, 0);
        slots.mark_run(6, 4);
        slots.mark_run(7, 2);
        assert_eq!(slots.marked, 4);
        assert_eq!(slots.next_marked(10, 14), 14);
        assert_eq!(slots.next_marked(9, 14), 9);
        assert_eq!(slots.next_marked(2, 10), 6);
        slots.clear(16 + 7);
        assert_eq!(slots.next_marked(7, 10), 8);
    }
}
