//! Lending reads: a group's records passed to the reader in place, in the ring's slots.
//!
//! A group's gate (a gating reader at its committed offset) keeps producers off every
//! record at or after it. A read at or after the gate counts the published run under the
//! group's lock (an Acquire load of the single producer's cursor), registers itself as a lender and lets
//! go of the lock; it then passes each record to the caller by reference, straight from its
//! slot, with no lock held, no clone and no atomic per record. While any lender is in
//! progress the gate does not move forward (a commit stores the offset; the last lender
//! moves the gate there) and is not dropped (a removed group's gate goes with the last
//! lender), so no producer can overwrite a lent record. A commit backwards puts a lower
//! gate in place, which holds the run too.

use super::{advance, Entry, GroupSlot, Partition, Parts, ReadOutcome};

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
    /// in place (each record's timestamp, key, value and headers, borrowed), in offset
    /// order, with no lock held while `f` runs (module docs). While the partition never
    /// held a record with headers, the run is read without asking each entry's shape
    /// (`Entry::unboxed_parts`: the timestamp is the entry's word, masked). `None`
    /// when this read cannot lend (a replicated, persisted or drop-oldest partition, no
    /// gate, `offset` below the gate or out of range): [`read`](Self::read) serves it then.
    #[inline(always)]
    pub(crate) fn lend(
        &self,
        offset: u64,
        max: usize,
        now_ms: i64,
        group: &GroupSlot<K, V>,
        mut f: impl FnMut(u64, Parts<'_, K, V>),
    ) -> Option<ReadOutcome> {
        if self.has_transactions() {
            // Control records and aborted records are filtered by `read_as`.
            return None;
        }
        let n = match self.hold(offset, max, now_ms, group) {
            Ok(n) => n,
            Err(outcome) => return outcome,
        };
        let _lending = Lending { group };
        // Asked again after `hold` saw the run published: a transaction's appender marks
        // the partition (`activate`, Release) before it publishes its first record, so a
        // clear mark now means no record of the run is transactional. Asked only before
        // `hold`, it could miss a transaction whose records `hold` then sees published.
        if self.has_transactions() {
            return None;
        }
        // Asked after `hold` saw the run published (its Acquire, or the view the group's
        // lock passed on): the appender of an entry with headers marks the ring impure
        // before it publishes it (ring `Shared::published_only_plain`), so a clear flag
        // now means no entry of the run is boxed. Asked before `hold`, it could miss the
        // mark of an entry `hold` then sees published.
        let plain = self.ring.published_only_plain();
        // Why both reads below are sound: `offset..offset + n` was seen published, by
        // this thread or by one whose view the group's lock passed on (`published_run`);
        // the run lies within the ring (the gate is at or below `offset` and producers
        // stay within a lap of it, so `n` is at most the capacity); the gate was at or
        // below `offset` and, while `_lending` counts us, neither moves forward nor is
        // dropped (module docs).
        if plain {
            let f = |o, e: &Entry<K, V>| {
                // SAFETY: `plain`: no entry of the run is boxed (above).
                f(o, unsafe { e.unboxed_parts() })
            };
            // SAFETY: published, seen, within a lap and held (above).
            unsafe { self.ring.read_held_run(offset, n, f) };
        } else {
            // SAFETY: published, seen, within a lap and held (above).
            unsafe { self.ring.read_held_run(offset, n, |o, e| f(o, e.parts())) };
        }
        Some(ReadOutcome::Read(n))
    }

    /// The part of [`lend`](Self::lend) that takes the group's lock: registers a lender
    /// on `offset..offset + n` and returns `n` (the caller then owes a `Lending`), or what
    /// `lend` answers without lending. Out of line, so that `lend`'s loop is inlined into
    /// the caller's with the caller's closure: its state then stays in registers.
    fn hold(
        &self,
        offset: u64,
        max: usize,
        now_ms: i64,
        group: &GroupSlot<K, V>,
    ) -> Result<usize, Option<ReadOutcome>> {
        if self.replicated.is_some() || self.disk.is_some() || !self.config.gated || max == 0 {
            return Err(None);
        }
        // Only retention by age can put the log start above the gate (producers stay
        // within a lap of it): without it, an offset at or after the gate is in the log.
        if self.expires_by_age() && offset < self.ring_start(self.ring.cursor(), now_ms) {
            return Err(None);
        }
        let mut g = group.lock();
        if g.removed {
            return Err(None);
        }
        let gate = g.gate.as_mut().ok_or(None)?;
        // Counts the published run (an Acquire load of the producer's cursor when the
        // gate's known prefix falls short, which makes its records visible here); reads
        // nothing. Below the gate or past the log end: `read` answers.
        match gate.published_run(offset, max) {
            Ok(0) => Err(Some(ReadOutcome::Empty)),
            Ok(n) => {
                g.lenders += 1;
                Ok(n)
            }
            Err(_) => Err(None),
        }
    }
}

/// Lending reads against a producer that overwrites as soon as the gate lets it (also run
/// under Miri: the reads are of slots a producer reuses).
#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::super::{AppendWait, PartitionConfig};
    use super::*;
    use crate::sync::StdArc as Arc;
    use crate::sync::WaitSet;

    fn entry(v: u64) -> Entry<(), Box<u64>> {
        Entry::plain(v as i64, Box::new(v))
    }

    /// A producer fills a capacity-4 partition as fast as the group's commits allow while
    /// the reader lends runs and commits after each (and once mid-run, which must wait
    /// for the run to end): every offset is lent once, in order, with its own value.
    #[test]
    fn lent_runs_are_never_overwritten_while_lent() {
        const N: u64 = if cfg!(miri) { 40 } else { 5_000 };
        let (p, group, slot) = crate::partition::with_group_g(4, true);
        let mut a = p.appender();
        let producer = crate::sync::thread::spawn(move || {
            for v in 0..N {
                let mut run = vec![entry(v)];
                a.append_batch(&mut run, AppendWait::Until(None)).unwrap();
            }
        });
        let mut next = 0;
        while next < N {
            let mut seen = 0;
            let outcome = p.lend(next, 3, 0, &slot, |offset, (_, _, value, _)| {
                assert_eq!((offset, **value), (next + seen, next + seen));
                seen += 1;
                // A commit past the run while it is lent: applied when the run ends.
                p.commit(&group, next + seen, 0).unwrap();
            });
            match outcome {
                Some(ReadOutcome::Read(n)) => {
                    assert_eq!(n as u64, seen);
                    next += seen;
                }
                Some(ReadOutcome::Empty) => crate::sync::thread::yield_now(),
                other => panic!("{other:?}"),
            }
        }
        producer.join().unwrap();
        assert_eq!(p.committed("g"), Some(N));
    }

    /// A partition whose key and value types have no drop glue lends runs in place without
    /// asking each entry's shape while it has held no record with headers
    /// (`Entry::unboxed_parts`), and asks again once one is published: keyed and unkeyed
    /// records, then one with headers, through a capacity-4 ring that wraps, lent as the
    /// producer appends. Every record must read with its own timestamp, key, value and
    /// headers (also run under Miri: the key cells are initialised only for keyed records).
    #[test]
    fn unboxed_reads_give_each_record_its_own_fields_before_and_after_headers() {
        const N: u64 = if cfg!(miri) { 24 } else { 2_000 };
        const HEADERS_AT: u64 = N / 2;
        fn record(v: u64) -> Entry<u32, u64> {
            let key = (v % 3 != 0).then_some(v as u32 + 7);
            let headers = if v == HEADERS_AT {
                vec![("h".to_string(), None)]
            } else {
                Vec::new()
            };
            Entry::new(v as i64 * 5, key, v, headers)
        }
        let (p, group, slot) = crate::partition::with_group_g(4, true);
        let mut a = p.appender();
        let producer = crate::sync::thread::spawn(move || {
            for v in 0..N {
                a.append_batch(&mut vec![record(v)], AppendWait::Until(None))
                    .unwrap();
            }
        });
        let mut next = 0;
        while next < N {
            let mut seen = 0;
            let outcome = p.lend(
                next,
                3,
                0,
                &slot,
                |offset, (timestamp, key, value, headers)| {
                    let v = next + seen;
                    let want = record(v);
                    let want = (
                        offset,
                        want.timestamp(),
                        want.key().copied(),
                        *want.value(),
                        want.headers().len(),
                    );
                    assert_eq!(
                        (offset, timestamp, key.copied(), *value, headers.len()),
                        want
                    );
                    seen += 1;
                },
            );
            match outcome {
                Some(ReadOutcome::Read(n)) => {
                    assert_eq!(n as u64, seen);
                    next += seen;
                    p.commit(&group, next, 0).unwrap();
                }
                Some(ReadOutcome::Empty) => crate::sync::thread::yield_now(),
                other => panic!("{other:?}"),
            }
        }
        producer.join().unwrap();
        assert!(
            !p.ring.published_only_plain(),
            "a record with headers was published"
        );
    }

    /// What cannot lend says so (`None`), for `read` to serve: a drop-oldest partition,
    /// and an offset below the group's gate.
    #[test]
    fn reads_that_cannot_lend_are_refused() {
        let config = PartitionConfig {
            capacity: 4,
            gated: false,
            retention_ms: None,
        };
        let p = Partition::new(config, Arc::new(WaitSet::new())).unwrap();
        let group: Arc<str> = Arc::from("g");
        p.register_group(&group, 0).unwrap();
        let mut a = p.appender();
        a.append_batch(&mut vec![entry(0)], AppendWait::No).unwrap();
        let slot = p.group_slot("g").unwrap();
        assert!(p.lend(0, 1, 0, &slot, |_, _| ()).is_none());

        let gated = PartitionConfig {
            gated: true,
            ..config
        };
        let p = Partition::new(gated, Arc::new(WaitSet::new())).unwrap();
        p.register_group(&group, 0).unwrap();
        let mut a = p.appender();
        a.append_batch(&mut (0..3).map(entry).collect(), AppendWait::No)
            .unwrap();
        p.commit(&group, 2, 0).unwrap();
        let slot = p.group_slot("g").unwrap();
        assert!(
            p.lend(1, 1, 0, &slot, |_, _| ()).is_none(),
            "below the gate"
        );
        let mut got = Vec::new();
        assert_eq!(
            p.lend(2, 5, 0, &slot, |o, (_, _, v, _)| got.push((o, **v))),
            Some(ReadOutcome::Read(1))
        );
        assert_eq!(got, [(2, 2)]);
        assert_eq!(p.lend(3, 5, 0, &slot, |_, _| ()), Some(ReadOutcome::Empty));
    }
}
