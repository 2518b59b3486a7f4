//! A producer thread's handle on a partition: appends to the ring (or the disk log or the
//! replicas) under the topic's overflow policy.

use super::*;

/// The partition ring's one producer handle, shared by every appender: taken for one
/// publish (a run, or one entry) at a time, never across a wait for room.
pub(super) type SharedProducer<K, V> = Arc<Mutex<super::tail::Tail<K, V>>>;

/// One producer thread's handle on a partition.
pub(crate) struct Appender<K, V> {
    /// In memory without compaction: appends go straight to the ring, inline (the one
    /// flag the send path looks at; every other kind goes the general way).
    pub(super) direct: bool,
    /// In-memory compacted partitions: where the records a publish overwrites are retained
    /// first (`compacted`).
    pub(super) compaction: Option<Arc<Compaction<K, V>>>,
    pub(super) handle: SharedProducer<K, V>,
    /// The ring, to wait for room without holding `handle`.
    pub(super) ring: Ring<Entry<K, V>>,
    pub(super) arrivals: Arc<WaitSet>,
    pub(super) disk: Option<Arc<dyn DiskLog<K, V>>>,
    /// The partition's flag: closed by `Broker::close` (see `closed_why`).
    pub(super) broker_closed: ClosedByBroker,
    pub(super) replicated: Option<Arc<dyn ReplicatedLog<K, V>>>,
    pub(super) policy: Arc<SendPolicy>,
    /// The latest pipelined append not yet known to be settled: `(epoch, offset)`
    /// (`Producer::flush` waits for it).
    pub(super) unsettled: Option<(i32, u64)>,
    /// A gated partition's group expiry, called while waiting for room (loom models no
    /// time, so no group expires there).
    #[cfg_attr(logbus_loom, allow(dead_code))]
    pub(super) expiry: Option<GateExpiry>,
    /// The partition's transaction state (`txn` module).
    pub(super) txn: Arc<super::txn::TxnShared>,
}

/// How often a producer waiting for room on a gated partition lets expired groups go:
/// the groups' timeout runs on the broker's clock (a manual one in tests), which no
/// thread watches, so the waiting producer looks itself. A look takes one lock.
pub(crate) const EXPIRY_LOOK: std::time::Duration = std::time::Duration::from_millis(10);

impl<K, V> fmt::Debug for Appender<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Appender").finish_non_exhaustive()
    }
}

impl<K, V> Appender<K, V> {
    /// The idempotent producer appending through this handle, if any (its epoch now).
    #[inline(always)]
    pub(crate) fn producer(&self) -> Option<ProducerIdentity> {
        self.policy.producer.as_ref().map(|h| h.current())
    }

    /// Whether appends go to replicas (they wait for acks, not for room).
    pub(crate) fn is_replicated(&self) -> bool {
        self.replicated.is_some()
    }

    /// With the producer's acks, retries and timeouts (used by replicated partitions).
    pub(crate) fn with_policy(mut self, policy: SendPolicy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// Under `acks = all` on a replicated partition, the log and policy a pipelined send
    /// appends with and later waits on (`None` elsewhere: a send completes at once there).
    pub(crate) fn pipeline(&self) -> Option<Pipeline<'_, K, V>> {
        match &self.replicated {
            Some(r) if self.policy.acks == Acks::All => Some((r, &self.policy)),
            _ => None,
        }
    }

    /// Notes a pipelined append at `at` (epoch, offset) for [`settle`](Self::settle).
    pub(crate) fn pipelined(&mut self, at: (i32, u64)) {
        self.unsettled = Some(self.unsettled.map_or(at, |u| u.max(at)));
    }

    /// Waits until the latest pipelined append is acknowledged or can no longer be, or
    /// `deadline`.
    pub(crate) fn settle(&mut self, deadline: Option<Instant>) {
        let unsettled = self.unsettled.take();
        if let (Some(r), Some((epoch, offset))) = (&self.replicated, unsettled) {
            r.settle(epoch, offset, deadline);
        } else if let (Some(disk), Some((_, offset))) = (&self.disk, unsettled) {
            // A persisted partition's `send_async` that left its fsync to its handle
            // (`try_append_unsynced`); an offline log's error is the handle's to report.
            let _ = disk.wait_acked(offset);
        }
    }

    /// Waits for room for `need` records from `at` (see `Ring::wait_for_room`), letting
    /// expired groups go now and then meanwhile (a group's gate going wakes the wait).
    fn wait_for_room(&self, at: u64, need: u64, deadline: Option<Instant>) -> bool {
        #[cfg(not(logbus_loom))]
        if let Some(expire) = &self.expiry {
            use crate::sync::time;
            loop {
                expire();
                let look = time::deadline_after(EXPIRY_LOOK);
                let until = match (deadline, look) {
                    (Some(d), Some(l)) => Some(d.min(l)),
                    (None, l) => l,
                    (d, None) => d,
                };
                if self.ring.wait_for_room(at, need, until) {
                    return true;
                }
                if deadline.is_some_and(time::expired) {
                    return false;
                }
            }
        }
        self.ring.wait_for_room(at, need, deadline)
    }

    /// Appends `entry`, returning its offset; hands it back when it was not appended.
    #[inline(always)]
    pub(crate) fn append(
        &mut self,
        entry: Entry<K, V>,
        wait: AppendWait,
    ) -> std::result::Result<u64, (Option<Entry<K, V>>, AppendError)> {
        if !self.direct {
            return self.append_any(entry, wait);
        }
        // An in-memory partition with room: one publish, inline (a single send's common
        // case); anything else (full, closed) goes the general way, which tries again.
        let producer = self.producer();
        let ts = if producer.is_some() {
            entry.timestamp()
        } else {
            0
        };
        let mut handle = self.handle.lock();
        let stamp = handle.stamp_next(producer);
        match handle.try_publish(entry) {
            Ok(()) => {
                let offset = handle
                    .last_sequence()
                    .expect("a successful publish records its sequence");
                handle.published(stamp, offset, 1, ts);
                drop(handle);
                // Fence-free unless a consumer is parked; waiters take the heavy fence.
                self.arrivals.notify_all_light();
                Ok(offset)
            }
            Err(e) => {
                drop(handle);
                self.append_any(e.into_inner(), wait)
            }
        }
    }

    /// [`append`](Self::append) for every kind of partition and outcome.
    #[inline(never)]
    fn append_any(
        &mut self,
        entry: Entry<K, V>,
        wait: AppendWait,
    ) -> std::result::Result<u64, (Option<Entry<K, V>>, AppendError)> {
        use crate::ring::TryPublishError;
        if let Some(r) = &self.replicated {
            // A replicated partition always has room (its replicas drop their oldest
            // records); a deadline bounds the wait for the acknowledgement instead.
            let deadline = match wait {
                AppendWait::Until(deadline) => deadline,
                AppendWait::No => None,
            };
            return r.append(entry, &self.policy, deadline);
        }
        if let Some(disk) = &self.disk {
            if let Err((size, max)) = disk.check_size(&entry) {
                return Err((Some(entry), AppendError::TooLarge(size, max)));
            }
            // Refused before it reaches the ring: under `EveryBatch` it would only come
            // back unacknowledged, under the other policies acknowledged but never written.
            if let Some(e) = disk.offline_error() {
                return Err((Some(entry), AppendError::Offline(Box::new(e))));
            }
        }
        let mut entry = entry;
        let producer = self.producer();
        let ts = entry.timestamp();
        let offset = loop {
            let mut handle = self.handle.lock();
            self.retain_overwritten(handle.next_sequence(), 1);
            let stamp = handle.stamp_next(producer);
            match handle.try_publish(entry) {
                Ok(()) => {
                    let offset = handle
                        .last_sequence()
                        .expect("a successful publish records its sequence");
                    handle.published(stamp, offset, 1, ts);
                    break offset;
                }
                Err(TryPublishError::Closed(v)) => {
                    return Err((Some(v), self.closed_why(AppendError::Closed)))
                }
                Err(TryPublishError::Full(v)) => {
                    let at = handle.next_sequence();
                    drop(handle);
                    entry = v;
                    let AppendWait::Until(deadline) = wait else {
                        return Err((Some(entry), AppendError::Full));
                    };
                    // Without the handle: other appenders keep their own waits and `try_`s.
                    if !self.wait_for_room(at, 1, deadline) {
                        return Err((Some(entry), AppendError::Timeout));
                    }
                }
            }
        };
        // Fence-free unless a consumer is parked; waiters take the heavy fence.
        self.arrivals.notify_all_light();
        if let Some(disk) = &self.disk {
            // The entry is in the log now: on a log gone offline there is nothing to hand
            // back (later sends fail: the writer closes the ring).
            if let Err(e) = disk.wait_acked(offset) {
                return Err((None, AppendError::Unacknowledged(Box::new(e))));
            }
        }
        Ok(offset)
    }

    /// Appends `entry` as record `seq` of producer `id` (the sequence given, not the
    /// producer's next: a send retried from outside, e.g. after a broker restart): the
    /// leader's check decides (`producer_state`). A retry of a record the log holds is
    /// answered with its offset and not appended again.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append); [`AppendError::OutOfOrderSequence`] and
    /// [`AppendError::ProducerFenced`] (nothing appended, the entry handed back).
    pub(crate) fn append_sequenced(
        &mut self,
        entry: Entry<K, V>,
        id: ProducerIdentity,
        seq: i32,
    ) -> std::result::Result<u64, (Option<Entry<K, V>>, AppendError)> {
        use super::producer_state::Check;
        if let Some(r) = &self.replicated {
            return r.append_sequenced(entry, &self.policy, id, seq);
        }
        if let Some(disk) = &self.disk {
            if let Err((size, max)) = disk.check_size(&entry) {
                return Err((Some(entry), AppendError::TooLarge(size, max)));
            }
            if let Some(e) = disk.offline_error() {
                return Err((Some(entry), AppendError::Offline(Box::new(e))));
            }
        }
        let ts = entry.timestamp();
        let mut entry = entry;
        let offset = loop {
            let mut handle = self.handle.lock();
            let (check, stamp) = handle.check_next(id, seq, 1);
            match check {
                Check::Append => {}
                Check::Duplicate(_, last) => return Ok(last),
                Check::Fenced { current } => {
                    return Err((
                        Some(entry),
                        AppendError::ProducerFenced {
                            producer: id,
                            current,
                        },
                    ))
                }
                Check::OutOfOrder { expected } => {
                    return Err((
                        Some(entry),
                        AppendError::OutOfOrderSequence {
                            producer: id,
                            expected,
                            got: seq,
                        },
                    ))
                }
            }
            // The check above and this publish in one hold of the lock: no other append
            // comes between (loom model `idempotent_sequences_follow_the_log`).
            match handle.try_publish(entry) {
                Ok(()) => {
                    let offset = handle
                        .last_sequence()
                        .expect("a successful publish records its sequence");
                    handle.published(stamp, offset, 1, ts);
                    break offset;
                }
                Err(crate::ring::TryPublishError::Closed(v)) => {
                    return Err((Some(v), self.closed_why(AppendError::Closed)))
                }
                Err(crate::ring::TryPublishError::Full(v)) => {
                    let at = handle.next_sequence();
                    drop(handle);
                    entry = v;
                    if !self.wait_for_room(at, 1, None) {
                        return Err((Some(entry), AppendError::Timeout));
                    }
                }
            }
        };
        self.arrivals.notify_all_light();
        if let Some(disk) = &self.disk {
            if let Err(e) = disk.wait_acked(offset) {
                return Err((None, AppendError::Unacknowledged(Box::new(e))));
            }
        }
        Ok(offset)
    }

    /// Appends every entry of `entries` in order (draining it): one claim per run the
    /// ring can take, one notification. `wait`: [`AppendWait::Until`] waits for room (for
    /// ever: its deadline is not used), [`AppendWait::No`] appends what fits now.
    ///
    /// # Errors
    ///
    /// [`AppendError::Full`] (`AppendWait::No` only), [`AppendError::Closed`] and
    /// [`AppendError::TooLarge`] (persisted, replicated or not: the entries before the
    /// first too-large one are appended, it is left first): the entries not appended stay
    /// in `entries`, in order.
    pub(crate) fn append_batch(
        &mut self,
        entries: &mut Vec<Entry<K, V>>,
        wait: AppendWait,
    ) -> std::result::Result<(), AppendError> {
        if let Some(r) = &self.replicated {
            // Always room (see `append`).
            return match r.append_batch(entries, &self.policy) {
                // Refused whole, nothing appended: one at a time, so that the entries
                // before the too-large one are appended and it is left first (as above,
                // for one replica). Only on this error path.
                Err(AppendError::TooLarge(..)) if entries.len() > 1 => {
                    let mut rest = std::mem::take(entries).into_iter();
                    for entry in rest.by_ref() {
                        if let Err((back, why)) = r.append(entry, &self.policy, None) {
                            entries.extend(back);
                            entries.extend(rest);
                            return Err(why);
                        }
                    }
                    Ok(())
                }
                done => done,
            };
        }
        if let Some(disk) = &self.disk {
            // One pass: encoding an entry to measure it is not free.
            let too_large = entries
                .iter()
                .enumerate()
                .find_map(|(at, e)| disk.check_size(e).err().map(|(size, max)| (at, size, max)));
            if let Some((at, size, max)) = too_large {
                // The entries before it are appended as a batch of their own (already
                // measured); the too-large one stays first of those not appended, as the
                // callers hand back "the one that failed first".
                let mut rest = entries.split_off(at);
                let done = if entries.is_empty() {
                    Ok(())
                } else {
                    self.publish_batch(entries, wait)
                };
                entries.append(&mut rest);
                return done.and(Err(AppendError::TooLarge(size, max)));
            }
        }
        self.publish_batch(entries, wait)
    }

    /// [`append_batch`](Self::append_batch) once every entry fits the disk's limit: the
    /// offline check, then the ring.
    fn publish_batch(
        &mut self,
        entries: &mut Vec<Entry<K, V>>,
        wait: AppendWait,
    ) -> std::result::Result<(), AppendError> {
        self.publish_batch_spans(entries, wait, &mut |_, _| {})
    }

    /// [`publish_batch`](Self::publish_batch), telling `published` the offsets of each
    /// claim, `from..end`, in order, while the ring's producer is still held (so before
    /// any later claim).
    pub(super) fn publish_batch_spans(
        &mut self,
        entries: &mut Vec<Entry<K, V>>,
        wait: AppendWait,
        published: &mut dyn FnMut(u64, u64),
    ) -> std::result::Result<(), AppendError> {
        use crate::ring::BatchClosed;
        if let Some(disk) = &self.disk {
            if let Some(e) = disk.offline_error() {
                return Err(AppendError::Offline(Box::new(e)));
            }
        }
        // Known here, in one branch-free pass the compiler inlines, instead of the ring
        // asking `Entry::is_plain` through a function pointer per entry.
        let plain = !std::mem::needs_drop::<K>()
            && !std::mem::needs_drop::<V>()
            && entries.iter().fold(true, |plain, e| plain & e.is_plain());
        // The last offset this call appended.
        let mut last = None;
        let producer = self.producer();
        let ts = match (producer, entries.last()) {
            (Some(_), Some(e)) => e.timestamp(),
            _ => 0,
        };
        let done = loop {
            let mut handle = self.handle.lock();
            let from = handle.next_sequence();
            let stamp = handle.stamp_next(producer);
            let claimed = if self.compaction.is_some() {
                // At most a lap per publish, so that every record it overwrites (even one
                // of this batch) is retained first.
                let cap = self.ring.capacity();
                let mut rest = entries.split_off(entries.len().min(cap));
                self.retain_overwritten(handle.next_sequence(), entries.len());
                let claimed = handle.try_publish_batch_known(entries, plain);
                entries.append(&mut rest);
                claimed
            } else {
                handle.try_publish_batch_known(entries, plain)
            };
            if matches!(claimed, Ok(1..) | Err(BatchClosed { published: 1.. })) {
                last = handle.last_sequence();
                if let Some(l) = last {
                    handle.published(stamp, from, l + 1 - from, ts);
                    published(from, l + 1);
                }
            }
            let at = handle.next_sequence();
            drop(handle);
            match claimed {
                Err(_) => break Err(AppendError::Closed),
                Ok(_) if entries.is_empty() => break Ok(()),
                Ok(1..) => {}
                Ok(0) => {
                    // Waits for room for a whole run, as a ring's blocking batch publish
                    // does, without the handle (see `append`); the deadline is not used.
                    let AppendWait::Until(_) = wait else {
                        break Err(AppendError::Full);
                    };
                    let need = (entries.len() as u64).min(self.ring.capacity() as u64);
                    self.wait_for_room(at, need, None);
                }
            }
        };
        if last.is_some() {
            self.arrivals.notify_all_light();
        }
        if let (Some(disk), Some(last)) = (&self.disk, last) {
            if let Err(e) = disk.wait_acked(last) {
                return Err(AppendError::Unacknowledged(Box::new(e)));
            }
        }
        done.map_err(|why| self.closed_why(why))
    }

    /// Appends `records` (timestamp, value) in order as entries without key or headers,
    /// each made straight in its ring slot (no entry gathered first): one claim per run the
    /// ring can take, one notification. `wait` as for [`append_batch`](Self::append_batch).
    /// Returns how many were appended and, when not all, why not (the rest are the ones
    /// after those). No user code runs while the ring's producer is held: `V: Copy` makes
    /// each entry by copying.
    pub(crate) fn append_copied(
        &mut self,
        records: &[(i64, V)],
        wait: AppendWait,
    ) -> (usize, std::result::Result<(), AppendError>)
    where
        V: Copy,
    {
        let entry = |&(timestamp, value): &(i64, V)| Entry::plain(timestamp, value);
        if !self.direct {
            // Their appends take whole entries (size checks, replica logs, acks, the
            // records a compacted partition retains).
            let mut entries: Vec<_> = records.iter().map(entry).collect();
            let done = self.append_batch(&mut entries, wait);
            return (records.len() - entries.len(), done);
        }
        // Without headers or key an entry drops as a no-op whenever `K` and `V` do; the
        // ring tracks plain entries exactly then (`Partition::with_ring`).
        let plain = !std::mem::needs_drop::<K>() && !std::mem::needs_drop::<V>();
        let mut done = 0;
        let producer = self.producer();
        let result = loop {
            let rest = &records[done..];
            let at = rest.as_ptr();
            let mut handle = self.handle.lock();
            let from = handle.next_sequence();
            let stamp = handle.stamp_next(producer);
            // SAFETY: the closure copies `rest[i]` for the `i < rest.len()` the ring asks
            // for (`at` points into `rest`, which outlives the call), so it cannot panic,
            // and touches no ring; `plain` as computed above.
            let published =
                unsafe { handle.try_publish_made(rest.len(), move |i| entry(&*at.add(i)), plain) };
            let (Ok(n) | Err(crate::ring::BatchClosed { published: n })) = published;
            if n > 0 {
                handle.published(stamp, from, n as u64, rest[n - 1].0);
            }
            // The handle is released where each arm leaves this iteration.
            match published {
                // The common case first: everything fit.
                Ok(n) if n == rest.len() => {
                    done += n;
                    break Ok(());
                }
                Ok(0) => {
                    // As in `append_batch`: wait for room for a whole run, without the
                    // handle.
                    let at = handle.next_sequence();
                    drop(handle);
                    let AppendWait::Until(_) = wait else {
                        break Err(AppendError::Full);
                    };
                    let need = ((records.len() - done) as u64).min(self.ring.capacity() as u64);
                    self.wait_for_room(at, need, None);
                }
                Ok(n) => done += n,
                Err(crate::ring::BatchClosed { published: n }) => {
                    done += n;
                    break Err(AppendError::Closed);
                }
            }
        };
        if done > 0 {
            self.arrivals.notify_all_light();
        }
        (done, result.map_err(|why| self.closed_why(why)))
    }

    /// Whether this partition's appends go straight to its ring (in memory, one replica,
    /// not compacted).
    #[inline]
    pub(crate) fn in_memory(&self) -> bool {
        self.direct
    }

    /// Before a publish of `n` records at `next` (holding the ring's producer): a compacted
    /// partition retains the records it will overwrite (`compacted`).
    #[inline]
    pub(super) fn retain_overwritten(&self, next: u64, n: usize) {
        if let Some(c) = &self.compaction {
            c.retain_for(next, n, self.ring.capacity() as u64);
        }
    }

    /// Moves the front of `values` into the ring, each made into an entry by `entry` straight
    /// in its slot (no entries gathered first): as many as fit now, in one run, with one
    /// notification. Returns how many; the others stay in `values`, in order. Only for
    /// [`in_memory`](Self::in_memory) partitions; a full or closed ring appends fewer (the
    /// caller's general path then waits, or says why).
    ///
    /// # Safety
    ///
    /// `entry(p)` takes the value at `p` (moves or drops each of its fields once: the
    /// value is gone after the call), never panics and runs no user code (it runs with
    /// ring slots claimed), and makes entries without key or headers.
    pub(crate) unsafe fn append_moved<R>(
        &mut self,
        values: &mut Vec<R>,
        entry: impl Fn(*mut R) -> Entry<K, V> + Copy,
    ) -> usize {
        debug_assert!(self.in_memory());
        // Without headers or key an entry drops as a no-op whenever `K` and `V` do (as in
        // `append_copied`).
        let plain = !std::mem::needs_drop::<K>() && !std::mem::needs_drop::<V>();
        let len = values.len();
        let at = values.as_mut_ptr();
        // While values are moved out the vector owns none: a panic would leak them, never
        // drop one twice.
        // SAFETY: shrinking only.
        unsafe { values.set_len(0) };
        let producer = self.producer();
        let mut handle = self.handle.lock();
        let from = handle.next_sequence();
        let stamp = handle.stamp_next(producer);
        // SAFETY: the ring calls `make(i)` once for each `i` it publishes, `0..n` in order,
        // so each value is taken once (`at` points to `len` values no longer owned by the
        // vector); `entry` neither panics nor touches a ring (the caller's contract);
        // `plain` as computed above, for entries without key or headers.
        let published = unsafe { handle.try_publish_made(len, move |i| entry(at.add(i)), plain) };
        let n = match published {
            Ok(n) => n,
            Err(crate::ring::BatchClosed { published }) => published,
        };
        // The values' timestamps are gone with them: the hot run keeps its latest.
        handle.published(stamp, from, n as u64, i64::MIN);
        drop(handle);
        // SAFETY: `0..n` were moved out; `n..len` are still initialised and move to the
        // front (possibly overlapping); the vector owns exactly those again.
        unsafe {
            std::ptr::copy(at.add(n), at, len - n);
            values.set_len(len - n);
        }
        if n > 0 {
            self.arrivals.notify_all_light();
        }
        n
    }

    /// `why`, unless it is `Closed` because the writer closed the ring when the log went
    /// offline (then the error that took it offline) or because the broker closed (then
    /// `BrokerClosed`): the topic was not deleted.
    pub(super) fn closed_why(&self, why: AppendError) -> AppendError {
        if let (AppendError::Closed, Some(disk)) = (&why, &self.disk) {
            if let Some(e) = disk.offline_error() {
                return AppendError::Offline(Box::new(e));
            }
        }
        match why {
            AppendError::Closed => self.broker_closed.why(),
            why => why,
        }
    }
}

/// Copied runs (`append_copied`) through the ring's straight-line publish and its exits.
#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::super::{with_group_g, AppendWait, ReadOutcome};
    use super::*;

    /// The records still in memory: from the log end less the capacity on.
    fn read_all(p: &Partition<(), u64>) -> Vec<(u64, i64, u64)> {
        let mut seen = Vec::new();
        let from = p.log_end().saturating_sub(p.capacity());
        let outcome = p.read(from, 64, 0, None, |o, e| {
            let e = e.into_entry();
            seen.push((o, e.timestamp(), *e.value()))
        });
        assert!(
            matches!(outcome, ReadOutcome::Read(_) | ReadOutcome::Empty),
            "{outcome:?}"
        );
        seen
    }

    /// Moved runs: a gated capacity-4 partition takes what fits under the gate from the
    /// front of the vector and leaves the rest there, in order; after a commit the rest
    /// moves in. Every value (boxed, so a double drop or a leak shows, also under Miri) is
    /// read back once and dropped once.
    #[test]
    fn moved_runs_take_the_front_and_leave_the_rest_in_order() {
        let (p, group, _) = with_group_g::<(), Box<u64>>(4, true);
        let mut a = p.appender();
        let entry = |v: *mut (i64, Box<u64>)| {
            // SAFETY: `append_moved` passes each value once, initialised, unowned.
            let (timestamp, value) = unsafe { std::ptr::read(v) };
            Entry::plain(timestamp, value)
        };
        let mut values: Vec<(i64, Box<u64>)> = (0..6).map(|v| (v as i64, Box::new(v))).collect();
        // SAFETY: `entry` takes each value (moves it out) and cannot panic; no key, no
        // headers.
        assert_eq!(unsafe { a.append_moved(&mut values, entry) }, 4);
        let left: Vec<u64> = values.iter().map(|(_, v)| **v).collect();
        assert_eq!(left, [4, 5]);
        p.commit(&group, 4, 0).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { a.append_moved(&mut values, entry) }, 2);
        assert!(values.is_empty());
        let mut seen = Vec::new();
        let outcome = p.read(2, 8, 0, None, |o, e| {
            let e = e.into_entry();
            seen.push((o, e.timestamp(), **e.value()))
        });
        assert!(matches!(outcome, ReadOutcome::Read(4)), "{outcome:?}");
        assert_eq!(seen, (2..6).map(|v| (v, v as i64, v)).collect::<Vec<_>>());
    }

    /// A gated capacity-8 partition: a first run refreshes the limit, the next ones fit
    /// under it (the straight-line path), one that does not fit is cut at the gate and says
    /// `Full`, an empty one appends nothing, and once the partition is closed (its topic
    /// deleted) a run that would fit under the cached limit appends nothing and says
    /// `Closed`. Nothing lost or duplicated: the log holds each appended record once.
    #[test]
    fn copied_runs_fill_to_the_gate_then_stop_when_closed() {
        let (p, group, _) = with_group_g::<(), u64>(8, true);
        let mut a = p.appender();
        let run = |from: u64, n: u64| (from..from + n).map(|v| (v as i64, v)).collect::<Vec<_>>();
        for from in [0, 2, 4] {
            let (sent, done) = a.append_copied(&run(from, 2), AppendWait::No);
            assert_eq!(sent, 2);
            done.unwrap();
        }
        let (sent, done) = a.append_copied(&run(6, 4), AppendWait::No);
        assert_eq!(sent, 2, "the gate at 0 holds offsets 8 and 9");
        assert!(matches!(done, Err(AppendError::Full)), "{done:?}");
        let (sent, done) = a.append_copied(&[], AppendWait::No);
        assert_eq!(sent, 0);
        done.unwrap();
        p.commit(&group, 4, 0).unwrap();
        let (sent, done) = a.append_copied(&run(8, 1), AppendWait::No);
        assert_eq!(sent, 1);
        done.unwrap();
        p.close();
        let (sent, done) = a.append_copied(&run(9, 1), AppendWait::No);
        assert_eq!(sent, 0);
        assert!(matches!(done, Err(AppendError::Closed)), "{done:?}");
        assert_eq!(p.log_end(), 9);
        let want: Vec<_> = (1..9).map(|v| (v, v as i64, v)).collect();
        assert_eq!(read_all(&p), want);
    }
}
