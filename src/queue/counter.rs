//! Counting the handles on each side, to disconnect the queue when the last handle of a
//! side goes away.
//!
//! The shared state lives in an [`Arc`]; the two counters decide *disconnection*, the `Arc`
//! decides *deallocation* (whichever handle goes last frees the queue and drops what is left
//! in it). The flavour is told about a side's disconnection through [`Disconnect`].

use std::ops::Deref;

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::Arc;

/// What a flavour does when one side loses its last handle.
pub(crate) trait Disconnect {
    /// Every sender is gone: wake receivers, which drain and then see `Disconnected`.
    fn disconnect_senders(&self);
    /// Every receiver is gone: wake senders (their sends fail from now on).
    fn disconnect_receivers(&self);
}

/// The queue plus its handle counts.
struct Counter<C> {
    senders: AtomicUsize,
    receivers: AtomicUsize,
    chan: C,
}

/// One handle's share of the queue: a sender or a receiver, depending on how it was made.
pub(crate) struct Handle<C: Disconnect> {
    counter: Arc<Counter<C>>,
    is_sender: bool,
}

/// A new queue with one sender and one receiver.
pub(crate) fn new<C: Disconnect>(chan: C) -> (Handle<C>, Handle<C>) {
    let counter = Arc::new(Counter {
        senders: AtomicUsize::new(1),
        receivers: AtomicUsize::new(1),
        chan,
    });
    let sender = Handle {
        counter: Arc::clone(&counter),
        is_sender: true,
    };
    (
        sender,
        Handle {
            counter,
            is_sender: false,
        },
    )
}

impl<C: Disconnect> Handle<C> {
    fn count(&self) -> &AtomicUsize {
        if self.is_sender {
            &self.counter.senders
        } else {
            &self.counter.receivers
        }
    }

    /// Whether both handles refer to the same queue.
    /// The queue's identity (its allocation's address), for telling handles apart.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.counter) as *const () as usize
    }

    pub(crate) fn same_queue(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.counter, &other.counter)
    }
}

impl<C: Disconnect> Clone for Handle<C> {
    fn clone(&self) -> Self {
        // Relaxed: a new handle is made from a live one, so the count cannot reach zero
        // concurrently (the same argument as `Arc::clone`).
        let old = self.count().fetch_add(1, Ordering::Relaxed);
        assert!(old < usize::MAX / 2, "too many queue handles");
        Self {
            counter: Arc::clone(&self.counter),
            is_sender: self.is_sender,
        }
    }
}

impl<C: Disconnect> Drop for Handle<C> {
    fn drop(&mut self) {
        // AcqRel: the last handle of a side acquires every other handle's release, so all
        // their operations happen before the disconnection it performs.
        if self.count().fetch_sub(1, Ordering::AcqRel) == 1 {
            if self.is_sender {
                self.counter.chan.disconnect_senders();
            } else {
                self.counter.chan.disconnect_receivers();
            }
        }
    }
}

impl<C: Disconnect> Deref for Handle<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.counter.chan
    }
}
