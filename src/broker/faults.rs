//! The replication runtime behind [`Broker::faults`](crate::replica::Faults): started with
//! the first replicated topic, it runs the followers and the controller that the
//! fault-injection API crashes, stalls and restores.

use super::Broker;
use crate::replica::Faults;
// Std's Arc (also under loom): the broker shares unsized values (see `sync::StdArc`).
use crate::sync::StdArc as Arc;

impl Broker {
    /// The fault-injection handle for this broker's replicated topics ([`Faults`]).
    pub fn faults(&self) -> Faults {
        Faults::new(self.replication())
    }

    /// The replication runtime (created on first use).
    pub(crate) fn replication(&self) -> Arc<crate::replica::Runtime> {
        let mut r = self.inner.replication.lock();
        Arc::clone(r.get_or_insert_with(|| {
            Arc::new(crate::replica::Runtime::new(Arc::clone(&self.inner.clock)))
        }))
    }
}

impl Broker {
    /// Fault injection: delivers now, to partition `tp`, the end marker of producer
    /// `producer_id`'s transaction at `epoch` (a COMMIT, or an ABORT), as a coordinator's
    /// request delayed in the network would arrive (the case Jepsen found Kafka's protocol
    /// open to). `Ok(true)`: the partition took it (it closes the transaction open there
    /// at that epoch); `Ok(false)`: refused, nothing written (that transaction is over, or
    /// a later one of the producer is open there).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTopic`](crate::Error::UnknownTopic), [`Error::PartitionOutOfRange`](crate::Error::PartitionOutOfRange),
    /// errors of the append (not enough replicas, ...).
    pub fn deliver_delayed_marker(
        &self,
        tp: &crate::TopicPartition,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> crate::Result<bool> {
        self.topic_admin(&tp.topic)?.write_marker(
            tp.partition,
            &super::topic::MarkerWrite {
                producer_id,
                epoch,
                commit,
                coordinator_epoch: -1,
                now_ms: self.now_ms().clamp(0, crate::MAX_TIMESTAMP),
                policy: super::topic::marker_policy(std::time::Duration::from_secs(10)),
            },
        )
    }
}
