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
