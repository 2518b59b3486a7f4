//! Producer ids and epochs (Kafka's `ProducerIdManager` and the transaction coordinator's
//! `InitProducerId`): the broker hands every idempotent producer a fresh id at epoch 0, and
//! bumps an id's epoch to fence an older instance of the same producer (the transaction
//! coordinator does, for a `transactional.id` registered again; an idempotent producer does,
//! to restart its sequences after a send it gave up on, as KIP-360 lets it).
//!
//! Ids are never reused within a broker's life. A broker on a data directory must also not
//! hand out an id its logs may still hold from an earlier run (a new producer would have its
//! first records taken for retries of the old one's): Kafka allocates blocks of ids through
//! its controller for that. Here each run of a persisted broker starts its ids at a random
//! point of `2^40..2^62` (from the standard library's per-process random hash keys), and
//! counts up from there: two runs collide only if one hands out ids reaching another's
//! start, which takes on the order of `2^62 / ids per run` runs. An in-memory broker starts
//! at 0 (deterministic: it has no earlier run).

use std::collections::HashMap;

use crate::partition::ProducerIdentity;
use crate::sync::atomic::{AtomicI64, Ordering};
use crate::sync::Mutex;
use crate::{Broker, Error, Result};

/// The broker's producer-id allocator (module docs).
#[derive(Debug, Default)]
pub(crate) struct ProducerIds {
    /// The next id to hand out.
    next: AtomicI64,
    /// The current epoch of every id bumped. An id handed out and never bumped is at
    /// epoch 0 and takes no entry: a broker that makes a producer per task keeps none of
    /// them.
    epochs: Mutex<HashMap<i64, i16>>,
}

impl ProducerIds {
    /// The allocator of a broker, persisted or not (module docs).
    pub(crate) fn starting(persisted: bool) -> Self {
        let ids = Self::default();
        if persisted {
            use std::hash::{BuildHasher, Hasher};
            let r = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            ids.reserve_through((1i64 << 40) + (r % ((1u64 << 62) - (1 << 40))) as i64);
        }
        ids
    }

    /// A fresh producer id at epoch 0.
    pub(crate) fn allocate(&self) -> ProducerIdentity {
        // Relaxed: a counter; uniqueness needs only the atomic add.
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        ProducerIdentity { id, epoch: 0 }
    }

    /// Bumps `id`'s epoch, fencing `from` and older: the new identity. An epoch that would
    /// pass `i16::MAX` gives a fresh id at epoch 0 instead (Kafka's rule at epoch
    /// exhaustion).
    ///
    /// # Errors
    ///
    /// [`Error::ProducerFenced`] when `from` is older than the id's current epoch (another
    /// instance bumped it already).
    pub(crate) fn bump(&self, from: ProducerIdentity) -> Result<ProducerIdentity> {
        let mut epochs = self.epochs.lock();
        // An id without an entry was never bumped: at epoch 0 (or an earlier run's).
        let current = epochs.entry(from.id).or_insert(from.epoch.max(0));
        if from.epoch < *current {
            return Err(Error::ProducerFenced {
                producer_id: from.id,
                epoch: from.epoch,
                current_epoch: *current,
            });
        }
        if from.epoch == i16::MAX {
            drop(epochs);
            return Ok(self.allocate());
        }
        *current = from.epoch + 1;
        Ok(ProducerIdentity {
            id: from.id,
            epoch: *current,
        })
    }

    /// Ids up to and including `id` are never handed out (a recovered log names it).
    pub(crate) fn reserve_through(&self, id: i64) {
        // Relaxed: as in `allocate`.
        self.next.fetch_max(id.saturating_add(1), Ordering::Relaxed);
    }
}

impl Broker {
    /// A fresh producer id at epoch 0 (Kafka's `InitProducerId` for a producer without a
    /// `transactional.id`). Every idempotent [`Producer`](crate::Producer) gets one this
    /// way when it is made (each clone its own); the transaction coordinator calls it too.
    ///
    /// # Examples
    ///
    /// ```
    /// let broker = logbus::Broker::in_memory();
    /// let a = broker.init_producer_id();
    /// let b = broker.init_producer_id();
    /// assert_ne!(a.id, b.id);
    /// assert_eq!(a.epoch, 0);
    /// ```
    pub fn init_producer_id(&self) -> ProducerIdentity {
        self.inner.producer_ids.allocate()
    }

    /// Bumps the epoch of `from`'s producer id: records of `from` (and of any older epoch)
    /// are refused from then on with [`Error::ProducerFenced`] by every partition that has
    /// seen the newer epoch.
    ///
    /// # Errors
    ///
    /// [`Error::ProducerFenced`] when `from` is already fenced.
    ///
    /// # Examples
    ///
    /// ```
    /// let broker = logbus::Broker::in_memory();
    /// let a = broker.init_producer_id();
    /// let b = broker.bump_producer_epoch(a)?;
    /// assert_eq!((b.id, b.epoch), (a.id, 1));
    /// assert!(broker.bump_producer_epoch(a).is_err());
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn bump_producer_epoch(&self, from: ProducerIdentity) -> Result<ProducerIdentity> {
        self.inner.producer_ids.bump(from)
    }

    /// The allocator (for the transaction coordinator and recovery).
    #[allow(
        dead_code,
        reason = "for the transactions (issue 30, second half) and tools"
    )]
    pub(crate) fn producer_ids(&self) -> &ProducerIds {
        &self.inner.producer_ids
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;

    #[test]
    fn only_bumped_ids_take_an_entry() {
        let ids = ProducerIds::default();
        let made: Vec<_> = (0..1000).map(|_| ids.allocate()).collect();
        assert!(ids.epochs.lock().is_empty());
        let bumped = ids.bump(made[7]).unwrap();
        assert_eq!(
            bumped,
            ProducerIdentity {
                id: made[7].id,
                epoch: 1
            }
        );
        assert!(matches!(
            ids.bump(made[7]),
            Err(Error::ProducerFenced {
                current_epoch: 1,
                ..
            })
        ));
        assert!(matches!(
            ids.bump(ProducerIdentity {
                id: made[8].id,
                epoch: -1
            }),
            Err(Error::ProducerFenced {
                current_epoch: 0,
                ..
            })
        ));
        assert_eq!(ids.epochs.lock().len(), 2);
    }
}
