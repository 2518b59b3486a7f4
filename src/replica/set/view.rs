//! Read-only views of a replicated partition: waiting until in sync, snapshots of every
//! replica's records, and `describe`.

use std::time::Duration;

use super::{ReplicaSet, Status};
use crate::partition::ReplicaLogs;
use crate::replica::{PartitionReplicas, ReplicaInfo};
use crate::sync::time;
use crate::sync::StdArc as Arc;

/// How often `wait_in_sync` re-checks without being notified.
const RECHECK: Duration = Duration::from_millis(10);

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> ReplicaSet<K, V> {
    /// Waits until every live replica is in the ISR and holds the leader's whole log.
    pub(crate) fn wait_in_sync(&self, timeout: Duration) -> bool {
        let deadline = time::deadline_after(timeout);
        let mut st = self.state.lock();
        let mut passed = false;
        loop {
            if let Some(l) = st.leader {
                let end = st.replicas[l].log.end();
                let synced = st.replicas.iter().enumerate().all(|(i, r)| {
                    r.status != Status::Online || (st.isr.contains(&i) && r.log.end() == end)
                });
                if synced && st.hw == end {
                    return true;
                }
            }
            if passed || deadline.is_some_and(time::expired) {
                return false;
            }
            // A follower catching up inside the ISR (HW already at the leader's end) wakes
            // nobody: look again every `RECHECK` rather than sleep to the deadline.
            match [deadline, time::deadline_after(RECHECK)]
                .into_iter()
                .flatten()
                .min()
            {
                None => self.changed.wait(&mut st),
                Some(until) => {
                    // The deadline's own wait timing out ends it, after one more look (the
                    // only way it ends under loom, where time does not pass).
                    passed = self.changed.wait_until(&mut st, until) && Some(until) == deadline;
                }
            }
        }
    }

    /// Every replica's records: `(id, log start, [(epoch, entry)])`, for checkers.
    pub(crate) fn snapshot(&self) -> ReplicaLogs<K, V> {
        let st = self.state.lock();
        st.replicas
            .iter()
            .map(|r| {
                // A copy of each record (the checkers' copy; `replica_logs` clones anyway):
                // a batch's records share one allocation and have no `Arc` of their own.
                let mut records = Vec::new();
                r.log.for_each(r.log.start(), r.log.end(), |_, epoch, e| {
                    records.extend((self.cloner)(e).map(|e| (epoch, Arc::new(e))));
                });
                (r.id, r.log.start(), records)
            })
            .collect()
    }

    /// Leader, ISR, epoch and per-replica offsets.
    pub(crate) fn describe(&self) -> PartitionReplicas {
        let st = self.state.lock();
        PartitionReplicas {
            partition: self.partition,
            leader: st.leader.map(|l| st.replicas[l].id),
            leader_epoch: st.epoch,
            isr: Self::isr_ids(&st),
            high_watermark: st.hw,
            replicas: st
                .replicas
                .iter()
                .enumerate()
                .map(|(i, r)| ReplicaInfo {
                    id: r.id,
                    log_start: r.log.log_start(),
                    log_end: r.log.end(),
                    online: r.status == Status::Online,
                    in_sync: st.isr.contains(&i),
                    stalled: r.stalled,
                    latest_epoch: r.log.latest_epoch(),
                    epochs: r.log.epochs().to_vec(),
                })
                .collect(),
        }
    }

    /// Checks, in one critical section, that every in-sync replica holds the leader's
    /// records below HW (the same entries): what a consumer reads is on the whole ISR.
    #[cfg(all(test, logbus_loom))]
    pub(crate) fn assert_hw_is_replicated(&self) {
        let st = self.state.lock();
        let Some(l) = st.leader else { return };
        let leader = &st.replicas[l].log;
        for &i in &st.isr {
            let log = &st.replicas[i].log;
            assert!(
                log.end() >= st.hw,
                "ISR member {i} ends at {} < HW {}",
                log.end(),
                st.hw
            );
            for o in leader.start().max(log.start())..st.hw {
                let (a, b) = (leader.get(o).unwrap(), log.get(o).unwrap());
                // The same record: one chunk shared by both logs.
                assert!(std::ptr::eq(a.1, b.1), "offset {o} differs on {i}");
            }
        }
    }
}
