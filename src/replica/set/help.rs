//! A waiting sender copies for its followers (`send::await_acks`): one fetch for every
//! follower under the lock it already holds, then HW moved and waiters woken once.

use super::{Fetched, ReplicaSet, State, Status, FETCH_MAX};

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicaSet<K, V> {
    /// One fetch for every follower that may fetch now, under the lock the caller holds
    /// (a sender waiting for acks): step 1 and step 2 back to back. Returns whether any
    /// copied something.
    ///
    /// An in-memory follower in the plain case (online, not stalled, slowed or due to
    /// truncate, its log end within the leader's memory) is copied to directly, and HW is
    /// moved and waiters woken once for all of them; any other goes through the fetcher's
    /// two steps (`fetch_batch`, `fetch_append`), which settle HW each.
    pub(super) fn fetch_all_locked(&self, st: &mut State<K, V>) -> bool {
        let Some(l) = st.leader else {
            return false;
        };
        if st.closed {
            return false;
        }
        let mut now = None;
        let mut copied = false;
        let mut direct = false;
        let mut expanded = false;
        for i in 0..st.replicas.len() {
            if i == l {
                continue;
            }
            if let Some(c) = self.copy_direct(st, l, i, &mut now) {
                direct = true;
                copied |= c;
                // Most followers are in the ISR already: skip the expansion's look-ups.
                if !st.isr.contains(&i) {
                    expanded |= self.maybe_expand(st, i);
                }
                continue;
            }
            copied |= match self.fetch_batch(st, i, &mut now) {
                Fetched::Done(copied) => copied,
                Fetched::Batch(batch) => self.fetch_append(st, i, batch),
            };
        }
        if direct {
            let moved = self.advance_hw(st);
            if expanded || moved {
                self.notify(moved);
            }
        }
        copied
    }

    /// Step 1 and step 2 of a fetch for in-memory follower `i` of leader `l` in one, when
    /// nothing calls for more (`fetch_all_locked`): `Some(copied)`, or `None` to go the
    /// long way. Leaves HW and the ISR to the caller.
    fn copy_direct(
        &self,
        st: &mut State<K, V>,
        l: usize,
        i: usize,
        now: &mut Option<i64>,
    ) -> Option<bool> {
        let r = &st.replicas[i];
        let leader = &st.replicas[l].log;
        let from = r.log.end();
        let leader_end = leader.end();
        if r.status != Status::Online
            || r.stalled
            || r.slow_ms > 0
            || r.needs_truncation
            || r.store.is_some()
            || from < leader.start()
            || from > leader_end
        {
            return None;
        }
        let to = leader_end.min(from + FETCH_MAX as u64);
        let copied = from < to;
        if copied {
            // The leader's log and the follower's, borrowed apart (`i != l`).
            let (leader, follower) = if l < i {
                let (a, b) = st.replicas.split_at_mut(i);
                (&a[l], &mut b[0])
            } else {
                let (a, b) = st.replicas.split_at_mut(l);
                (&b[0], &mut a[i])
            };
            follower.log.copy_from(&leader.log, to, &mut st.spare);
            follower.log.trim(self.config.capacity, u64::MAX);
        }
        let r = &mut st.replicas[i];
        // Reported only now that the records are in the follower's log.
        r.known_leo = r.log.end();
        if r.known_leo >= leader_end {
            r.last_caught_up_ms = *now.get_or_insert_with(|| self.clock.now_ms());
        }
        Some(copied)
    }
}
