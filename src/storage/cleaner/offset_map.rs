//! The key map of a cleaning pass, as Kafka's `SkimpyOffsetMap`: a key's 128-bit identity
//! ([`KeyHasher::identity`]: the key itself when short, else its keyed hash) → the key's
//! latest offset, in one flat array of 24-byte slots probed
//! linearly, within a fixed budget of entries.
//!
//! Kafka sizes its array from the dedupe buffer once; this one starts at a slot per KiB of
//! the bytes the pass maps (at least a few thousand slots) and doubles up to the same size,
//! so that a pass over few keys neither allocates nor touches the whole buffer, while a
//! pass over many rarely grows it: a rehash on growth re-places every entry so far, with a
//! cache miss for most, where setting up a slot per KiB costs a small part of reading that
//! KiB. A slot is
//! `[hash low, hash high, offset]`; an offset of `u64::MAX` (never a record's) marks it
//! empty. The slot of an identity is its [`KeyHasher::slot_hash`] scaled to the array's
//! length, so the length need not be a power of two and the array fills the buffer exactly.

use super::key_hash::KeyHasher;
use super::BYTES_PER_KEY;

/// The offset no record has: an empty slot.
const EMPTY: u64 = u64::MAX;
/// The fewest slots a map starts with.
const FIRST_SLOTS: usize = 1 << 12;
/// Bytes to map per slot the map starts with.
const BYTES_PER_FIRST_SLOT: u64 = 1 << 10;

/// A key of the batch being mapped, read but not yet recorded ([`OffsetMap::put_all`]): its
/// identity, its record's offset, and the slot its probe starts at in the array as the array
/// was when the key was read ([`OffsetMap::pending`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingKey {
    identity: u128,
    offset: u64,
    home: usize,
}

/// A key's hash → its latest offset, at most `max_entries` keys.
pub(super) struct OffsetMap {
    /// `[hash low, hash high, offset]`, `offset == EMPTY` when free; never full (at least
    /// one slot stays empty, so that every probe ends).
    slots: Vec<[u64; 3]>,
    len: usize,
    /// The slots the buffer allows (the array's last size).
    max_slots: usize,
    /// The keys the buffer allows: `max_slots` at Kafka's load factor, 0.9.
    max_entries: usize,
    /// The keys under this pass's random SipHash key.
    pub(super) hasher: KeyHasher,
}

impl OffsetMap {
    /// A map within `buffer_bytes` (24 bytes a slot), for at least one key, sized for a
    /// scan of `mapped_bytes` of log.
    pub(super) fn new(buffer_bytes: usize, mapped_bytes: u64) -> Self {
        let max_slots = (buffer_bytes / BYTES_PER_KEY).max(2);
        let max_entries = (max_slots - max_slots.div_ceil(10)).max(1);
        let first = usize::try_from(mapped_bytes / BYTES_PER_FIRST_SLOT).unwrap_or(usize::MAX);
        OffsetMap {
            slots: vec![[0, 0, EMPTY]; first.max(FIRST_SLOTS).min(max_slots)],
            len: 0,
            max_slots,
            max_entries,
            hasher: KeyHasher::random(),
        }
    }

    /// The slot where `hash`'s probe starts: its slot hash scaled to the array.
    #[inline]
    fn home(&self, hash: u128) -> usize {
        let h = self.hasher.slot_hash(hash);
        ((u128::from(h) * self.slots.len() as u128) >> 64) as usize
    }

    /// The slot holding `hash`, or the empty slot where it would go.
    #[inline]
    fn find(&self, hash: u128) -> usize {
        self.find_from(hash, self.home(hash))
    }

    /// [`find`](Self::find) from `home`, `hash`'s home slot.
    #[inline]
    fn find_from(&self, hash: u128, home: usize) -> usize {
        let (low, high) = (hash as u64, (hash >> 64) as u64);
        let mut i = home;
        loop {
            let [l, h, offset] = self.slots[i];
            if offset == EMPTY || (l == low && h == high) {
                return i;
            }
            i += 1;
            if i == self.slots.len() {
                i = 0;
            }
        }
    }

    /// Records each key of `keys` (one batch's, in offset order) at its offset as the key's
    /// latest, all of them or, when the new keys would overfill the map, none (`false`).
    pub(super) fn put_all(&mut self, keys: &[PendingKey]) -> bool {
        // Only near the budget are the new keys counted (a lookup each).
        if self.len + keys.len() > self.max_entries {
            let new = keys
                .iter()
                .filter(|k| self.slots[self.find(k.identity)][2] == EMPTY)
                .count();
            if self.len + new > self.max_entries {
                return false;
            }
        }
        let grown = self.reserve(keys.len());
        for &PendingKey {
            identity: k,
            offset,
            home,
        } in keys
        {
            // A home taken before the array grew is a slot of the old array.
            let home = if grown { self.home(k) } else { home };
            let i = self.find_from(k, home);
            let slot = &mut self.slots[i];
            if slot[2] == EMPTY {
                self.len += 1;
                *slot = [k as u64, (k >> 64) as u64, offset];
            } else {
                slot[2] = offset;
            }
        }
        debug_assert!(self.len <= self.max_entries);
        true
    }

    /// The key of identity `identity` at `offset`, for [`put_all`](Self::put_all), its home
    /// slot found and loading into the cache meanwhile: the scan takes each key of a batch
    /// as it parses the batch, so that by the time `put_all` probes them, the batch's slots
    /// (cache misses, most of them, once the scan has streamed the log through the cache)
    /// have come in together rather than one after another.
    #[inline(always)]
    pub(super) fn pending(&self, identity: u128, offset: u64) -> PendingKey {
        let home = self.home(identity);
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let slot: *const [u64; 3] = &self.slots[home];
            // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 processor has; a prefetch
            // only hints the cache (it never faults, and reads nothing into the program), and
            // `slot` points into the array anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(slot.cast()) };
        }
        PendingKey {
            identity,
            offset,
            home,
        }
    }

    /// Grows the array (doubling, up to `max_slots`) so that `more` new keys keep it at
    /// most half full, or as full as the budget allows at its last size: short probes, as
    /// the slots a probe reads are mostly cache misses once the scan has streamed the log
    /// through the cache. Whether it grew.
    fn reserve(&mut self, more: usize) -> bool {
        let want = (self.len + more).min(self.max_entries);
        let mut slots = self.slots.len();
        while slots < self.max_slots && want > slots / 2 {
            slots = slots.saturating_mul(2).min(self.max_slots);
        }
        if slots == self.slots.len() {
            return false;
        }
        let old = std::mem::replace(&mut self.slots, vec![[0, 0, EMPTY]; slots]);
        for [low, high, offset] in old {
            if offset != EMPTY {
                let hash = (u128::from(high) << 64) | u128::from(low);
                let i = self.find(hash);
                self.slots[i] = [low, high, offset];
            }
        }
        true
    }

    /// The latest offset of the key whose hash is `hash`.
    pub(super) fn get(&self, hash: u128) -> Option<u64> {
        let offset = self.slots[self.find(hash)][2];
        (offset != EMPTY).then_some(offset)
    }

    /// Every key's latest offset, in no order.
    pub(super) fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots
            .iter()
            .map(|s| s[2])
            .filter(|&offset| offset != EMPTY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `put_all` of `(identity, offset)` pairs.
    fn put(map: &mut OffsetMap, keys: &[(u128, u64)]) -> bool {
        let keys: Vec<PendingKey> = keys.iter().map(|&(k, o)| map.pending(k, o)).collect();
        map.put_all(&keys)
    }

    #[test]
    fn many_keys_each_find_their_own_latest_offset() {
        let mut map = OffsetMap::new(64 << 20, 0);
        let hasher = map.hasher;
        // Half the keys short (their own identity), half long (hashed).
        let hash = |k: u64| match k % 2 {
            0 => hasher.identity(format!("key-{k}").as_bytes()),
            _ => hasher.identity(format!("a key longer than 16 bytes: {k}").as_bytes()),
        };
        // 200,000 keys, each written twice: the second offset is the latest.
        let keys: Vec<(u128, u64)> = (0..200_000u64).map(|k| (hash(k), k)).collect();
        for chunk in keys.chunks(64) {
            assert!(put(&mut map, chunk));
        }
        let again: Vec<(u128, u64)> = keys.iter().map(|&(h, k)| (h, k + 1_000_000)).collect();
        for chunk in again.chunks(100) {
            assert!(put(&mut map, chunk));
        }
        assert_eq!(map.len, 200_000);
        for (k, &(h, _)) in keys.iter().enumerate() {
            assert_eq!(map.get(h), Some(k as u64 + 1_000_000), "key {k}");
        }
        assert_eq!(map.get(map.hasher.identity(b"never written")), None);
        let mut offsets: Vec<u64> = map.offsets().collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (1_000_000..1_200_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_full_map_takes_no_key_of_a_batch_that_overfills_it() {
        // 100 slots: 90 keys.
        let mut map = OffsetMap::new(100 * BYTES_PER_KEY, 1 << 30);
        let hasher = map.hasher;
        let hash = |k: u64| hasher.identity(&k.to_be_bytes());
        let batch = |from: u64, n: u64| (from..from + n).map(|k| (hash(k), k)).collect::<Vec<_>>();
        assert!(put(&mut map, &batch(0, 80)));
        // 11 new keys would make 91: none is taken.
        assert!(!put(&mut map, &batch(80, 11)));
        assert_eq!(map.len, 80);
        assert_eq!(map.get(hash(80)), None);
        // Known keys cost nothing: 80 old and 10 new make 90.
        let mut mixed = batch(0, 80);
        mixed.extend(batch(80, 10));
        assert!(put(&mut map, &mixed));
        assert_eq!(map.len, 90);
        // Updates of known keys still fit a full map.
        assert!(put(&mut map, &[(hash(3), 500)]));
        assert_eq!(map.get(hash(3)), Some(500));
        assert!(!put(&mut map, &batch(1000, 1)));
        assert_eq!(map.len, 90);
    }

    #[test]
    fn a_buffer_below_one_slot_still_maps_one_key() {
        let mut map = OffsetMap::new(0, 1 << 30);
        let (a, b) = (map.hasher.identity(b"a"), map.hasher.identity(b"b"));
        assert!(put(&mut map, &[(a, 1)]));
        assert!(put(&mut map, &[(a, 2)]));
        assert!(!put(&mut map, &[(b, 3)]));
        assert_eq!((map.get(a), map.get(b)), (Some(2), None));
    }
}
