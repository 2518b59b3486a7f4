//! Tasks waiting on the bounded flavour (the async API, `queue::future`): each poll tries
//! the operation as `try_send`/`try_recv` do, and when the queue is full (empty) registers
//! the task's waker in the `senders` (`receivers`) wait set, tries once more and returns
//! `Pending` ([`WaitSet::poll_until`]). The notifications are the ones parked threads get:
//! the other side's operations wake the set after they publish, whatever mix of threads and
//! tasks waits there.
//!
//! The owned protocol's notifiers use the light fence only (`publish_stamps`, `free_run`):
//! a task that registers while the queue is owned completes that handshake with the heavy
//! fence, once per registration, as a parking thread does once per park
//! (`poll_until`'s `light_notifiers`). A registration costs a `membarrier` then, on top of
//! the lock; the alternative, making the queue shared at a task's first registration,
//! would put a locked instruction on every later message of every side instead. Tasks on a
//! multi-threaded executor move between threads, and each move is a change of owner, so
//! such a queue usually goes shared on its own (`owners`); a queue whose tasks stay on one
//! thread (a current-thread runtime) keeps the owned protocol and pays the fence only when
//! a side actually waits.

use std::task::{Context, Poll};

use super::Channel;
use crate::queue::error::{TryRecvError, TrySendError};
use crate::sync::wait::{Policy, Waiter};
use crate::sync::WakerSlot;

/// How a task waits before it registers: the dense poll of a blocking operation
/// (`waiting::POLICY`), skipped while the same side's polls keep missing, and no spin
/// rounds or yields (a task hands its thread back to the executor instead). A registration
/// costs the wait set's lock, a wake-up the notifier's lock and the executor's scheduling,
/// and while the queue is owned the registration's `membarrier`: a reply that comes within
/// the poll saves all of those.
#[cfg(not(logbus_loom))]
const TASK_POLICY: Policy = Policy {
    dense_polls: 128,
    skip_after_misses: 2,
    spin_rounds: 0,
    yields: 0,
    pace_spins: 0,
};
/// Under loom, no poll (a spin hint is a loom yield).
#[cfg(logbus_loom)]
const TASK_POLICY: Policy = Policy {
    dense_polls: 0,
    skip_after_misses: 0,
    spin_rounds: 0,
    yields: 0,
    pace_spins: 0,
};

impl<T> Channel<T> {
    /// Whether the other side may notify with the light fence (the queue is owned): a
    /// registering task then issues the heavy one (`WaitSet::poll_until`).
    fn light_notifiers(&self) -> bool {
        !self.owners.is_shared()
    }

    /// A task's operation on one side (`sending`): `attempt` at once; when it cannot
    /// complete, the dense poll of [`TASK_POLICY`] on the hint a blocking operation polls,
    /// then the registration and the last attempt of [`WaitSet::poll_until`].
    ///
    /// [`WaitSet::poll_until`]: crate::sync::WaitSet::poll_until
    fn poll_side<R>(
        &self,
        cx: &mut Context<'_>,
        slot: &mut WakerSlot,
        sending: bool,
        mut attempt: impl FnMut() -> Option<R>,
    ) -> Poll<R> {
        let (set, history, changed): (_, _, fn(&Self) -> bool) = if sending {
            (&*self.senders, &self.send_cache.polls, Self::send_changed)
        } else {
            (&*self.receivers, &self.recv_cache.polls, Self::recv_changed)
        };
        if let Some(r) = attempt() {
            set.cancel_waker(slot);
            return Poll::Ready(r);
        }
        let _ = Waiter::new(TASK_POLICY).dense_poll_adaptive(history, || changed(self));
        set.poll_until(cx, slot, || self.light_notifiers(), attempt)
    }

    /// Polls a send of `msg` (taken out when sent; put back while the queue is full):
    /// `Ready(Ok)` once sent, `Ready(Err(msg))` when every receiver is gone. The caller
    /// cancels `slot` in the senders' set ([`cancel_send`](Self::cancel_send)) if it stops
    /// polling before `Ready`.
    pub(crate) fn poll_send(
        &self,
        cx: &mut Context<'_>,
        slot: &mut WakerSlot,
        msg: &mut Option<T>,
    ) -> Poll<Result<(), T>> {
        self.poll_side(cx, slot, true, || {
            let m = msg.take().expect("a pending send holds its message");
            match self.try_send(m) {
                Ok(()) => Some(Ok(())),
                Err(TrySendError::Full(m)) => {
                    *msg = Some(m);
                    None
                }
                Err(TrySendError::Disconnected(m)) => Some(Err(m)),
            }
        })
    }

    /// Polls a batch send: sends what fits from the front of `batch` at each try, and is
    /// `Ready(Ok)` once `batch` is empty; `Ready(Err(()))` when every receiver is gone (what
    /// was not sent stays in `batch`).
    pub(crate) fn poll_send_batch(
        &self,
        cx: &mut Context<'_>,
        slot: &mut WakerSlot,
        batch: &mut Vec<T>,
    ) -> Poll<Result<(), ()>> {
        self.poll_side(cx, slot, true, || match self.try_send_batch(batch) {
            _ if batch.is_empty() => Some(Ok(())),
            Err(TrySendError::Disconnected(())) => Some(Err(())),
            Ok(_) | Err(TrySendError::Full(())) => None,
        })
    }

    /// Polls a receive: `Ready(Ok(msg))`, or `Ready(Err(()))` once the queue is empty and
    /// disconnected.
    pub(crate) fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        slot: &mut WakerSlot,
    ) -> Poll<Result<T, ()>> {
        self.poll_side(cx, slot, false, || match self.try_recv() {
            Ok(m) => Some(Ok(m)),
            Err(TryRecvError::Disconnected) => Some(Err(())),
            Err(TryRecvError::Empty) => None,
        })
    }

    /// Polls a batch receive of up to `max` (≥ 1) messages appended to `out`.
    pub(crate) fn poll_recv_batch(
        &self,
        cx: &mut Context<'_>,
        slot: &mut WakerSlot,
        out: &mut Vec<T>,
        max: usize,
    ) -> Poll<Result<usize, ()>> {
        self.poll_side(cx, slot, false, || match self.try_recv_batch(out, max) {
            Ok(n) => Some(Ok(n)),
            Err(TryRecvError::Disconnected) => Some(Err(())),
            Err(TryRecvError::Empty) => None,
        })
    }

    /// Takes a send future's registration off the senders' set (it was dropped or will not
    /// be polled again).
    pub(crate) fn cancel_send(&self, slot: &mut WakerSlot) {
        self.senders.cancel_waker(slot);
    }

    /// Takes a receive future's registration off the receivers' set.
    pub(crate) fn cancel_recv(&self, slot: &mut WakerSlot) {
        self.receivers.cancel_waker(slot);
    }
}
