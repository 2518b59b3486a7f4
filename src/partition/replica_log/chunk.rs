//! The records of a replicated partition, shared by the replicas' logs: a [`Chunk`] holds
//! a batch (its records as sent) or the single records of one leader (an *open* chunk,
//! filled one slot at a time), and a log holds runs of chunks (`super::Run`).
//!
//! An open chunk's slots are written once each, in order: `filled` counts those written,
//! and a write claims slot `filled` (a compare-and-swap that sets `BUSY`) before it writes,
//! then publishes `filled + 1`. So a slot is never written twice, even by two logs whose
//! runs both end at it, and a reader sees a slot only once it is written (it reads below
//! `filled`, loaded with `Acquire`). Which log may write is the log's business
//! (`ReplicaLog::append_one`: the one whose last run ends at the chunk's `filled`); the
//! chunk only keeps the writes sound.

use std::mem::MaybeUninit;

use crate::partition::Entry;
use crate::sync::atomic::{AtomicU32, Ordering};
// Std's Arc: chunks are shared between the replicas' logs. Its count is invisible to loom;
// what an open chunk's slots need ordered goes through `filled`, a loom-visible atomic.
use crate::sync::StdArc as Arc;
use crate::sync::UnsafeCell;

/// Records one chunk holds at most (a run's bounds are `u32`).
pub(crate) const CHUNK_MAX: usize = u32::MAX as usize;

/// The records of one send (or a piece of a huge batch, `CHUNK_MAX`), or a leader's
/// single records (an open chunk), shared by the logs holding them: one pointer, so a
/// log's run stays small.
pub(crate) struct Chunk<K, V>(Arc<Body<K, V>>);

enum Body<K, V> {
    Many(Vec<Entry<K, V>>),
    /// Slots filled one record at a time, in order (module docs).
    Open(Slots<K, V>),
}

/// Set in `Slots::filled` while the slot at its count is being written.
const BUSY: u32 = 1 << 31;

/// One slot of an open chunk: a record once written.
type Cell<K, V> = UnsafeCell<MaybeUninit<Entry<K, V>>>;

/// An open chunk's slots (module docs).
struct Slots<K, V> {
    cells: Box<[Cell<K, V>]>,
    /// Slots `0..filled` hold records, written once each; `BUSY` is set while slot
    /// `filled` is written. Fewer than `BUSY` slots (`Chunk::open` caps them).
    filled: AtomicU32,
}

// SAFETY: a slot's record is moved in by one thread (`fill`) and dropped or moved out by
// the one that holds the chunk last (`Drop`, `into_vec`), so the records must be `Send`;
// holders of the chunk share `&Entry`s across threads, so they must be `Sync`. The slots
// themselves are written only through the claim in `fill`, never while read (module docs).
unsafe impl<K: Send, V: Send> Send for Slots<K, V> {}
// SAFETY: as above.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for Slots<K, V> {}

impl<K, V> Slots<K, V> {
    fn new(room: usize, first: Entry<K, V>) -> Self {
        let room = room.clamp(1, BUSY as usize - 1);
        let cells: Box<[_]> = (0..room)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        cells[0].with_mut(|p| {
            // SAFETY: the chunk is not shared yet, and slot 0 is empty.
            unsafe { (*p).write(first) };
        });
        Self {
            cells,
            filled: AtomicU32::new(1),
        }
    }

    /// Slots written: those below may be read.
    #[inline]
    fn filled(&self) -> u32 {
        // Acquire: pairs with the Release store in `fill`: the slots below the count read
        // here are written.
        self.filled.load(Ordering::Acquire) & !BUSY
    }

    /// Writes `entry` into slot `i` if `i` is the first empty slot and exists; else hands
    /// it back.
    #[inline]
    fn fill(&self, i: u32, entry: Entry<K, V>) -> Result<(), Entry<K, V>> {
        let Some(cell) = self.cells.get(i as usize) else {
            return Err(entry);
        };
        // Claims slot `i`: only one caller moves the count from `i` to `i | BUSY`, and no
        // other claim succeeds until the store below (it expects a count without `BUSY`).
        // Acquire on success: pairs with the Release store of the previous fill (whatever
        // was written before, this write comes after). Relaxed on failure: nothing is read
        // through it.
        if self
            .filled
            .compare_exchange(i, i | BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(entry);
        }
        cell.with_mut(|p| {
            // SAFETY: slot `i` is at the count, so empty (slots below it are the written
            // ones), and claimed by this call alone; no reader reads it (readers stop below
            // the count without `BUSY`, which is `i`).
            unsafe { (*p).write(entry) };
        });
        // Release: pairs with the Acquire loads in `filled` (readers) and the claim above
        // (the next writer): the record is written before the count covers it.
        self.filled.store(i + 1, Ordering::Release);
        Ok(())
    }

    /// Records `lo..hi`, cut to the written ones.
    #[inline]
    fn slice(&self, lo: u32, hi: u32) -> &[Cell<K, V>] {
        let hi = hi.min(self.filled()) as usize;
        self.cells.get((lo as usize).min(hi)..hi).unwrap_or(&[])
    }

    /// The written records, moved out (the chunk then drops none).
    fn into_vec(self) -> Vec<Entry<K, V>> {
        let n = self.filled() as usize;
        let mut out = Vec::with_capacity(n);
        // Relaxed: `self` is owned; nothing else reads the count. Cleared first, so a panic
        // below (none is possible: the pushes fit) could leak records, never drop one twice.
        self.filled.store(0, Ordering::Relaxed);
        for cell in &self.cells[..n] {
            cell.with(|p| {
                // SAFETY: slot below the count: written; read out once, as the count is
                // now zero and `Drop` drops none.
                out.push(unsafe { (*p).assume_init_read() });
            });
        }
        out
    }
}

impl<K, V> Drop for Slots<K, V> {
    fn drop(&mut self) {
        let n = self.filled() as usize;
        for cell in &self.cells[..n] {
            cell.with_mut(|p| {
                // SAFETY: slot below the count: written, and dropped once, here (the chunk
                // is gone with this call).
                unsafe { (*p).assume_init_drop() };
            });
        }
    }
}

/// The records of a chunk between two bounds, in order.
pub(crate) enum Entries<'a, K, V> {
    Slice(std::slice::Iter<'a, Entry<K, V>>),
    Slots(std::slice::Iter<'a, Cell<K, V>>),
}

impl<'a, K, V> Iterator for Entries<'a, K, V> {
    type Item = &'a Entry<K, V>;

    #[inline]
    fn next(&mut self) -> Option<&'a Entry<K, V>> {
        match self {
            Self::Slice(it) => it.next(),
            Self::Slots(it) => it.next().map(|cell| {
                cell.with(|p| {
                    // SAFETY: `Slots::slice` yields written slots only, and a written slot
                    // is never written again; it is dropped only with the chunk, which the
                    // `'a` borrow keeps.
                    unsafe { (*p).assume_init_ref() }
                })
            }),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Self::Slice(it) => it.size_hint(),
            Self::Slots(it) => it.size_hint(),
        }
    }
}

impl<K, V> Clone for Chunk<K, V> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<K, V> Chunk<K, V> {
    #[cfg(all(test, not(logbus_loom)))]
    pub(crate) fn one(entry: Entry<K, V>) -> Self {
        Self::many(vec![entry])
    }

    /// At most `CHUNK_MAX` records (the caller splits larger batches).
    pub(crate) fn many(entries: Vec<Entry<K, V>>) -> Self {
        debug_assert!(entries.len() <= CHUNK_MAX);
        Self(Arc::new(Body::Many(entries)))
    }

    /// An open chunk of `room` slots (at least one) holding `entry` in the first.
    pub(super) fn open(room: usize, entry: Entry<K, V>) -> Self {
        Self(Arc::new(Body::Open(Slots::new(room, entry))))
    }

    /// Writes `entry` into slot `i` of an open chunk: `Err` (the record back) if the chunk
    /// is not open, has no slot `i`, or slot `i` is not the first empty one.
    #[inline]
    pub(super) fn fill(&self, i: u32, entry: Entry<K, V>) -> Result<(), Entry<K, V>> {
        match &*self.0 {
            Body::Open(slots) => slots.fill(i, entry),
            Body::Many(_) => Err(entry),
        }
    }

    /// Its records (an open chunk's written slots).
    pub(crate) fn len(&self) -> usize {
        match &*self.0 {
            Body::Many(v) => v.len(),
            Body::Open(slots) => slots.filled() as usize,
        }
    }

    /// Its record `i`, if written.
    #[cfg(test)]
    pub(crate) fn get(&self, i: usize) -> Option<&Entry<K, V>> {
        let i = u32::try_from(i).ok()?;
        self.slice(i, i.saturating_add(1)).next()
    }

    /// Its records, in order.
    pub(crate) fn entries(&self) -> Entries<'_, K, V> {
        self.slice(0, u32::MAX)
    }

    /// Its records `lo..hi` (cut to those it holds), in order.
    #[inline]
    pub(crate) fn slice(&self, lo: u32, hi: u32) -> Entries<'_, K, V> {
        match &*self.0 {
            Body::Many(v) => {
                let hi = (hi as usize).min(v.len());
                Entries::Slice(v.get((lo as usize).min(hi)..hi).unwrap_or(&[]).iter())
            }
            Body::Open(slots) => Entries::Slots(slots.slice(lo, hi).iter()),
        }
    }

    /// Its records, owned if nothing else holds them, else copied with `copy` (those it
    /// cannot copy are lost with the log's copy).
    pub(crate) fn take(
        self,
        copy: impl Fn(&Entry<K, V>) -> Option<Entry<K, V>>,
    ) -> Vec<Entry<K, V>> {
        match Arc::try_unwrap(self.0) {
            Ok(Body::Many(v)) => v,
            Ok(Body::Open(slots)) => slots.into_vec(),
            Err(shared) => Self(shared).entries().filter_map(copy).collect(),
        }
    }

    /// Its record at `i`, owned if nothing else holds the chunk, else copied (`take`).
    pub(crate) fn take_at(
        self,
        i: u32,
        copy: impl Fn(&Entry<K, V>) -> Option<Entry<K, V>>,
    ) -> Option<Entry<K, V>> {
        match Arc::try_unwrap(self.0) {
            Ok(Body::Many(v)) => v.into_iter().nth(i as usize),
            Ok(Body::Open(slots)) => slots.into_vec().into_iter().nth(i as usize),
            Err(shared) => Self(shared)
                .slice(i, i.saturating_add(1))
                .next()
                .and_then(copy),
        }
    }

    /// The same allocation (so two slices of it may join).
    #[inline]
    pub(super) fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A send's records, as its append, its retries and a failed send's hand-back need them.
pub(crate) enum SendRecords<K, V> {
    /// One record in no log yet: the leader moves it into its open chunk.
    One(Entry<K, V>),
    /// One record appended once: slot `.1` of chunk `.0` (a retry appends it again, shared).
    Placed(Chunk<K, V>, u32),
    /// A batch, in chunks appended whole.
    Chunks(Vec<Chunk<K, V>>),
    /// Lent to a queued request (`combine`), for the lock's holder to append.
    Lent,
}

impl<K, V> SendRecords<K, V> {
    /// How many records.
    pub(crate) fn count(&self) -> usize {
        match self {
            Self::One(_) | Self::Placed(..) => 1,
            Self::Chunks(chunks) => chunks.iter().map(Chunk::len).sum(),
            Self::Lent => 0,
        }
    }

    /// Calls `f` with its records, in order.
    pub(crate) fn with_entries<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = &Entry<K, V>>) -> R,
    ) -> R {
        match self {
            Self::One(e) => f(&mut std::iter::once(e)),
            Self::Placed(chunk, i) => f(&mut chunk.slice(*i, i.saturating_add(1))),
            Self::Chunks(chunks) => f(&mut chunks.iter().flat_map(Chunk::entries)),
            Self::Lent => f(&mut std::iter::empty()),
        }
    }

    /// A single send's record handed back: owned if no log holds it any more, else copied
    /// with `copy` (`None`: cannot, or a batch).
    pub(crate) fn take_one(
        self,
        copy: impl Fn(&Entry<K, V>) -> Option<Entry<K, V>>,
    ) -> Option<Entry<K, V>> {
        match self {
            Self::One(e) => Some(e),
            Self::Placed(chunk, i) => chunk.take_at(i, copy),
            Self::Chunks(_) | Self::Lent => None,
        }
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;

    /// An open chunk hands its written records back owned when nothing else holds it (a
    /// failed send's record, a batch taken back), copies them when shared, and drops each
    /// written record once either way.
    #[test]
    fn an_open_chunk_moves_out_or_copies_its_written_records() {
        let value = Arc::new(());
        let entry = |v: &Arc<()>| Entry::<(), Arc<()>>::plain(0, Arc::clone(v));
        let chunk = Chunk::open(4, entry(&value));
        assert!(chunk.fill(1, entry(&value)).is_ok());
        assert!(
            chunk.fill(3, entry(&value)).is_err(),
            "not the first empty slot"
        );
        assert_eq!(
            Arc::strong_count(&value),
            3,
            "two written, the refused one dropped"
        );
        let shared = chunk.clone();
        let copy = chunk.take_at(1, |e| Some(Entry::plain(0, Arc::clone(e.value()))));
        assert!(copy.is_some());
        assert_eq!(Arc::strong_count(&value), 4, "a copy while shared");
        drop(copy);
        let owned = shared.take(|_| None);
        assert_eq!(owned.len(), 2, "moved out, nothing else holds it");
        assert_eq!(Arc::strong_count(&value), 3);
        drop(owned);
        assert_eq!(Arc::strong_count(&value), 1);
        let full = Chunk::open(1, entry(&value));
        assert!(full.fill(1, entry(&value)).is_err(), "no slot 1");
        assert_eq!(full.take_at(0, |_| None).map(|_| ()), Some(()));
        assert_eq!(Arc::strong_count(&value), 1);
    }

    /// Readers on other threads read an open chunk (whole, and a slot at a time, as a failed
    /// send's hand-back copies its record outside the partition's lock) while one writer
    /// fills it and a second writer races for each slot: each reader sees a prefix of the
    /// writes, each record whole, and every record is dropped once, by whichever thread
    /// lets go last. Run under Miri, whose race detector checks the slot accesses.
    #[test]
    fn open_chunk_read_while_filled_on_other_threads() {
        const ROOM: u32 = if cfg!(miri) { 6 } else { 64 };
        let live = Arc::new(());
        // Every other record has headers (a boxed entry, dropped through its box).
        let entry = |v: u64| {
            let headers = if v % 4 == 0 {
                vec![("h".to_owned(), None)]
            } else {
                Vec::new()
            };
            Entry::<u64, Arc<()>>::new(0, Some(v), Arc::clone(&live), headers)
        };
        let chunk = Chunk::open(ROOM as usize, entry(0));
        std::thread::scope(|s| {
            for _ in 0..2 {
                let chunk = chunk.clone();
                s.spawn(move || loop {
                    let seen: Vec<u64> = chunk.entries().map(|e| *e.key().unwrap()).collect();
                    for (i, k) in seen.iter().enumerate() {
                        assert_eq!(*k, i as u64 * 2);
                    }
                    let last = u32::try_from(seen.len()).unwrap() - 1;
                    let one = chunk
                        .slice(last, last + 1)
                        .next()
                        .map(|e| *e.key().unwrap());
                    assert_eq!(one, Some(u64::from(last) * 2));
                    if last + 1 == ROOM {
                        break;
                    }
                    crate::sync::thread::yield_now();
                });
            }
            let rival = chunk.clone();
            let rival_entry = entry(1);
            s.spawn(move || {
                // Tries the last written slot again and again with a record no reader
                // expects: refused every time, handed back whole.
                let mut back = rival_entry;
                loop {
                    let n = u32::try_from(rival.len()).unwrap();
                    match rival.fill(n - 1, back) {
                        Ok(()) => panic!("the rival wrote slot {}", n - 1),
                        Err(e) => back = e,
                    }
                    if n == ROOM {
                        break;
                    }
                    crate::sync::thread::yield_now();
                }
            });
            for i in 1..ROOM {
                assert!(chunk.fill(i, entry(u64::from(i) * 2)).is_ok());
                crate::sync::thread::yield_now();
            }
        });
        assert_eq!(chunk.len(), ROOM as usize);
        drop(chunk);
        assert_eq!(Arc::strong_count(&live), 1, "every record dropped");
    }
}

/// Loom models of an open chunk's slots written while other holders read (`fill`, `slice`).
#[cfg(all(test, logbus_loom))]
mod loom_models {
    use super::*;
    use crate::sync::loom_model as model;
    use crate::sync::thread;

    fn entry(v: u64) -> Entry<(), u64> {
        Entry::plain(0, v)
    }

    /// A writer fills slots 1 and 2 while a reader holding the chunk reads every slot it
    /// finds written, then the last holder drops it: the reader sees a prefix of the
    /// writes, each record whole. Key ordering: `fill` publishes the count with `Release`
    /// after writing the slot, and `filled` loads it with `Acquire`. With that store made
    /// `Relaxed`, the reader reads a slot the writer wrote without a happens-before edge,
    /// and loom reports the cell accesses as racing.
    #[test]
    fn a_reader_sees_only_written_slots() {
        model(|| {
            let chunk = Chunk::open(3, entry(0));
            let reader = {
                let chunk = chunk.clone();
                thread::spawn(move || {
                    let seen: Vec<u64> = chunk.entries().map(|e| *e.value()).collect();
                    assert!((1..=3).contains(&seen.len()), "{seen:?}");
                    for (i, v) in seen.into_iter().enumerate() {
                        assert_eq!(v, i as u64);
                    }
                })
            };
            assert!(chunk.fill(1, entry(1)).is_ok());
            assert!(chunk.fill(2, entry(2)).is_ok());
            reader.join().unwrap();
            assert_eq!(chunk.len(), 3);
        });
    }

    /// Two writers whose runs both end at slot 1 (a log cut inside the chunk, say, and the
    /// leader) try it at once: exactly one record lands, the other is handed back, and the
    /// chunk drops exactly the records written. Key step: the claim's compare-and-swap;
    /// with a load then a store instead, both write slot 1 and loom reports the race.
    #[test]
    fn two_writers_of_one_slot_write_once() {
        model(|| {
            let chunk = Chunk::open(2, entry(0));
            let other = {
                let chunk = chunk.clone();
                thread::spawn(move || chunk.fill(1, entry(10)).is_ok())
            };
            let mine = chunk.fill(1, entry(20)).is_ok();
            let theirs = other.join().unwrap();
            assert!(mine != theirs, "exactly one write of slot 1");
            let got = chunk.get(1).map(|e| *e.value());
            assert_eq!(got, Some(if mine { 20 } else { 10 }));
            assert_eq!(chunk.take(|_| None).len(), 2);
        });
    }
}
