//! Why a partition is closed: by its broker (`Broker::close`) or by a delete. The fact is
//! the partition's, kept once: its appenders and, when it is replicated, its replica set
//! hold the same flag and read it when an append finds the partition closed, so a send
//! says "the broker was closed" rather than "the topic was deleted".

use super::AppendError;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::StdArc as Arc;

/// A partition's "closed by the broker" flag (module docs). Clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClosedByBroker(Arc<AtomicBool>);

impl ClosedByBroker {
    /// Records that the broker closes the partition. Call it before closing what appends
    /// look at (the ring, the replica set), so that an append that finds it closed reads
    /// the flag set.
    pub(crate) fn mark(&self) {
        // Release: pairs with the Acquire in `why`; stored before the close (the ring's, or
        // the replica set's under its lock) that an append failing as closed has seen.
        self.0.store(true, Ordering::Release);
    }

    /// What an append that found the partition closed says: [`AppendError::BrokerClosed`]
    /// once [`mark`](Self::mark)ed, else [`AppendError::Closed`] (its topic was deleted).
    pub(crate) fn why(&self) -> AppendError {
        // Acquire: pairs with the Release store in `mark`.
        if self.0.load(Ordering::Acquire) {
            AppendError::BrokerClosed
        } else {
            AppendError::Closed
        }
    }
}
