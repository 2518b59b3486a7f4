//! Rebalance callbacks (Kafka's `ConsumerRebalanceListener`).

use crate::consumer::Consumer;
use crate::topic_partition::TopicPartition;

/// Called by a subscribed consumer when its partitions change, always on the consumer's own
/// thread, inside its [`poll`](Consumer::poll) (or `unsubscribe` / close).
///
/// Order, as in Kafka: under the eager protocol (range, round-robin, sticky) a member
/// first has every partition revoked, then, once the group's new generation is complete,
/// gets its whole new assignment; under the cooperative protocol (cooperative-sticky) only
/// the partitions that move are revoked, and `on_partitions_assigned` gets only the ones
/// added (possibly none). `on_partitions_revoked` runs *before* the partitions go, while
/// the consumer is still in a generation the group accepts commits from: commit there.
/// `on_partitions_lost` runs when the member was evicted (it did not poll within
/// `max_poll_interval`, or the group was deleted): another member may already own the
/// partitions, so a commit there is refused. A consumer closed (or dropped) after an
/// eviction it had not yet seen gets `on_partitions_lost` too, not `on_partitions_revoked`.
///
/// Every method has an empty default (`on_partitions_lost` calls `on_partitions_revoked`,
/// as Kafka's does). `on_partitions_revoked` and `on_partitions_lost` are called only with
/// a non-empty list; `on_partitions_assigned` after every completed rebalance.
///
/// # Examples
///
/// ```
/// use logbus::group::{RebalanceListener, TopicPartition};
/// use logbus::Consumer;
///
/// struct CommitOnRevoke;
/// impl RebalanceListener<(), u64> for CommitOnRevoke {
///     fn on_partitions_revoked(&mut self, consumer: &mut Consumer<(), u64>, _: &[TopicPartition]) {
///         let _ = consumer.commit_sync(); // what this member read is not read again
///     }
/// }
/// ```
pub trait RebalanceListener<K, V>: Send {
    /// `partitions` are about to be taken from this consumer.
    fn on_partitions_revoked(
        &mut self,
        consumer: &mut Consumer<K, V>,
        partitions: &[TopicPartition],
    ) {
        let _ = (consumer, partitions);
    }

    /// `partitions` were given to this consumer (positions: the group's committed offsets,
    /// else `auto_offset_reset`); seek here to start elsewhere.
    fn on_partitions_assigned(
        &mut self,
        consumer: &mut Consumer<K, V>,
        partitions: &[TopicPartition],
    ) {
        let _ = (consumer, partitions);
    }

    /// `partitions` were taken from this consumer without a revocation: it left the group
    /// (evicted) and they may have another owner already.
    fn on_partitions_lost(&mut self, consumer: &mut Consumer<K, V>, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(consumer, partitions);
    }
}

/// The listener of a consumer subscribed without one.
pub(crate) struct NoListener;

impl<K, V> RebalanceListener<K, V> for NoListener {}
