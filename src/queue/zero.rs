//! The rendezvous flavour (`bounded(0)`): a send completes only when a receiver takes the
//! message, as in crossbeam-channel's zero-capacity channel.
//!
//! A hand-off slot under a mutex (the classic monitor solution of the rendezvous problem):
//! a sender waits for the slot to be free, puts its message there with a ticket number, and
//! waits until the receivers' count of taken messages reaches its ticket; a receiver takes
//! whatever is in the slot. `try_send` succeeds only when a receiver is already waiting,
//! `try_recv` only when a sender is already waiting. Rendezvous is a hand-off between two
//! parked threads by nature, so this flavour favours simplicity over speed.
//!
//! Tasks (the async API) use the same slot. An async send puts its message there as a
//! blocking send does and waits (`Pending`) until a receiver takes it, so two tasks meet
//! as two threads do; an async receive takes whatever is in the slot. Their wakers wait
//! in `tasks`, which every change of the state wakes. A waiting task does not count as a
//! waiting receiver for `try_send`: a `try_send` that handed its message to one would have
//! to block until that task runs, which on a single-threaded executor may be never.

use super::error::{RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError};
use crate::sync::time::{self, Instant};
use std::task::{Context, Poll};

use crate::sync::{Arc, Condvar, Mutex, MutexGuard, Signal, WaitSet, WakerSlot};

struct State<T> {
    /// The message being handed over, if any.
    slot: Option<T>,
    /// Messages put in the slot so far (the last one's ticket).
    placed: u64,
    /// Messages taken from the slot so far.
    taken: u64,
    /// Receivers inside a blocking `recv` (they check the slot before leaving).
    waiting_receivers: usize,
    /// Set once either side has lost its last handle.
    disconnected: bool,
    /// Threads selecting over this queue among others: every change raises their signals.
    watchers: Vec<Arc<Signal>>,
    /// How many of them have a receive arm here: they count as waiting receivers for
    /// `try_send`, and take a message handed to them before they stop watching.
    watching_receivers: usize,
}

/// A zero-capacity queue.
pub(crate) struct Channel<T> {
    state: Mutex<State<T>>,
    /// Every change of `state` is announced here (few waiters, so one condvar suffices).
    changed: Condvar,
    /// Tasks waiting for a change of `state` (both sides): every change wakes them.
    tasks: WaitSet,
}

impl<T> Channel<T> {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                slot: None,
                placed: 0,
                taken: 0,
                waiting_receivers: 0,
                disconnected: false,
                watchers: Vec::new(),
                watching_receivers: 0,
            }),
            changed: Condvar::new(),
            tasks: WaitSet::new(),
        }
    }

    /// Announces a change of `st` to the threads waiting here and to the watchers.
    fn announce(&self, st: &State<T>) {
        self.announce_except(st, None);
    }

    /// [`announce`](Self::announce), leaving out the watcher whose own change it is (its
    /// raised signal would end the park it is about to start).
    fn announce_except(&self, st: &State<T>, me: Option<&Arc<Signal>>) {
        self.changed.notify_all();
        for signal in &st.watchers {
            if !me.is_some_and(|me| Arc::ptr_eq(me, signal)) {
                signal.raise();
            }
        }
        // Under the state's lock, after the change: a task registers, then locks the state
        // to check it, so either it sees the change or this sees its registration.
        self.tasks.notify_all();
    }

    /// Starts watching (a select): every change raises `signal` from now on.
    pub(crate) fn watch(&self, signal: &Arc<Signal>, receiving: bool) {
        let mut st = self.state.lock();
        st.watchers.push(Arc::clone(signal));
        if receiving {
            st.watching_receivers += 1;
            // A `try_send` looks for receivers.
            self.announce_except(&st, Some(signal));
        }
    }

    /// Undoes [`watch`](Self::watch). A `try_send` waiting for a watching receiver to take
    /// its message takes it back once no receiver is left.
    pub(crate) fn unwatch(&self, signal: &Arc<Signal>, receiving: bool) {
        let mut st = self.state.lock();
        if let Some(i) = st.watchers.iter().position(|s| Arc::ptr_eq(s, signal)) {
            st.watchers.swap_remove(i);
        }
        if receiving {
            st.watching_receivers -= 1;
            self.announce(&st);
        }
    }

    /// A parking select's send: puts `msg` in the free slot, as a blocking `send` would,
    /// and returns its ticket without waiting (`Err(msg)` when the slot is taken or the
    /// queue disconnected). The select then parks, and settles the offer with
    /// [`withdraw`](Self::withdraw) before it tries anything else.
    pub(crate) fn offer(&self, msg: T, me: &Arc<Signal>) -> Result<u64, T> {
        let mut st = self.state.lock();
        if st.disconnected || st.slot.is_some() {
            return Err(msg);
        }
        st.slot = Some(msg);
        st.placed += 1;
        self.announce_except(&st, Some(me));
        Ok(st.placed)
    }

    /// Settles an [`offer`](Self::offer): `None` when a receiver took the message (the
    /// send completed), or the message back.
    pub(crate) fn withdraw(&self, ticket: u64) -> Option<T> {
        let mut st = self.state.lock();
        if st.taken >= ticket {
            return None;
        }
        Some(self.take_back(&mut st))
    }

    /// Whether a send would complete now (or fail: disconnected) without waiting for a
    /// receiver to arrive.
    pub(crate) fn send_ready(&self) -> bool {
        let st = self.state.lock();
        st.disconnected || (st.slot.is_none() && st.waiting_receivers + st.watching_receivers > 0)
    }

    /// Whether a receive would complete now (or fail: disconnected).
    pub(crate) fn recv_ready(&self) -> bool {
        let st = self.state.lock();
        st.disconnected || st.slot.is_some()
    }

    /// Takes back the caller's message, which no receiver took: it is still in the slot
    /// (only one message is there at a time).
    fn take_back(&self, st: &mut State<T>) -> T {
        let msg = st
            .slot
            .take()
            .expect("an untaken message stays in the slot");
        st.placed -= 1;
        self.announce(st);
        msg
    }

    /// Waits for a change; `true` when `deadline` has passed (the caller re-checks once).
    fn wait(&self, guard: &mut MutexGuard<'_, State<T>>, deadline: Option<Instant>) -> bool {
        match deadline {
            None => {
                self.changed.wait(guard);
                false
            }
            Some(d) => time::expired(d) || self.changed.wait_until(guard, d),
        }
    }

    /// Puts `msg` in the free slot and waits until a receiver takes it.
    fn hand_over(
        &self,
        mut st: MutexGuard<'_, State<T>>,
        msg: T,
        deadline: Option<Instant>,
        give_back: bool,
    ) -> Result<(), SendTimeoutError<T>> {
        debug_assert!(st.slot.is_none());
        st.slot = Some(msg);
        st.placed += 1;
        let ticket = st.placed;
        self.announce(&st);
        loop {
            if st.taken >= ticket {
                return Ok(());
            }
            // `give_back` (a `try_send`): the receivers it counted on may leave without
            // taking the message (a watching select that chose another arm).
            let abandoned = give_back && st.waiting_receivers + st.watching_receivers == 0;
            let expired = !st.disconnected && !abandoned && self.wait(&mut st, deadline);
            if st.taken >= ticket {
                return Ok(());
            }
            let abandoned = give_back && st.waiting_receivers + st.watching_receivers == 0;
            if st.disconnected || expired || abandoned {
                let msg = self.take_back(&mut st);
                return Err(if st.disconnected {
                    SendTimeoutError::Disconnected(msg)
                } else {
                    SendTimeoutError::Timeout(msg)
                });
            }
        }
    }

    pub(crate) fn send(
        &self,
        msg: T,
        deadline: Option<Instant>,
    ) -> Result<(), SendTimeoutError<T>> {
        let mut st = self.state.lock();
        loop {
            if st.disconnected {
                return Err(SendTimeoutError::Disconnected(msg));
            }
            if st.slot.is_none() {
                return self.hand_over(st, msg, deadline, false);
            }
            if self.wait(&mut st, deadline) && st.slot.is_some() && !st.disconnected {
                return Err(SendTimeoutError::Timeout(msg));
            }
        }
    }

    pub(crate) fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        let st = self.state.lock();
        if st.disconnected {
            return Err(TrySendError::Disconnected(msg));
        }
        if st.slot.is_some() || st.waiting_receivers + st.watching_receivers == 0 {
            return Err(TrySendError::Full(msg));
        }
        // A receiver is parked in `recv` and checks the slot before it leaves, even on
        // timeout, so the hand-over completes without waiting for anyone new; a watching
        // select takes it, or leaves and the message comes back (`Full`).
        self.hand_over(st, msg, None, true).map_err(|e| match e {
            SendTimeoutError::Timeout(m) => TrySendError::Full(m),
            SendTimeoutError::Disconnected(m) => TrySendError::Disconnected(m),
        })
    }

    fn take(&self, st: &mut MutexGuard<'_, State<T>>) -> Option<T> {
        let msg = st.slot.take()?;
        st.taken += 1;
        self.announce(st);
        Some(msg)
    }

    pub(crate) fn recv(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        let mut st = self.state.lock();
        st.waiting_receivers += 1;
        // Senders using `try_send` look for waiting receivers.
        self.announce(&st);
        let result = loop {
            if let Some(msg) = self.take(&mut st) {
                break Ok(msg);
            }
            if st.disconnected {
                break Err(RecvTimeoutError::Disconnected);
            }
            if self.wait(&mut st, deadline) {
                break self.take(&mut st).ok_or(if st.disconnected {
                    RecvTimeoutError::Disconnected
                } else {
                    RecvTimeoutError::Timeout
                });
            }
        };
        st.waiting_receivers -= 1;
        // A `try_send` counting on this receiver may have to take its message back.
        self.announce(&st);
        result
    }

    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut st = self.state.lock();
        match self.take(&mut st) {
            Some(msg) => Ok(msg),
            None if st.disconnected => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Polls a task's send of `msg`: once the slot is free, puts the message there (its
    /// ticket in `ticket`) and waits until a receiver takes it. `Ready(Ok)` once taken,
    /// `Ready(Err(msg))` when the queue is disconnected first (the message taken back).
    /// The caller settles an unfinished send with [`cancel_send`](Self::cancel_send).
    pub(crate) fn poll_send(
        &self,
        cx: &mut Context<'_>,
        slot: &mut WakerSlot,
        msg: &mut Option<T>,
        ticket: &mut Option<u64>,
    ) -> Poll<Result<(), T>> {
        self.tasks.poll_until(
            cx,
            slot,
            || false,
            || {
                let mut st = self.state.lock();
                match *ticket {
                    Some(t) if st.taken >= t => {
                        *ticket = None;
                        Some(Ok(()))
                    }
                    Some(_) if st.disconnected => {
                        *ticket = None;
                        Some(Err(self.take_back(&mut st)))
                    }
                    Some(_) => None,
                    None if st.disconnected => {
                        Some(Err(msg.take().expect("an unsent send holds its message")))
                    }
                    None if st.slot.is_none() => {
                        st.slot = msg.take();
                        st.placed += 1;
                        *ticket = Some(st.placed);
                        self.announce(&st);
                        None
                    }
                    None => None,
                }
            },
        )
    }

    /// Ends a task's send that will not be polled again: takes its registration off the
    /// set and, if its message is still in the slot (`ticket`), takes it back and returns
    /// it (the caller drops it, outside the lock); `None` when a receiver took it.
    pub(crate) fn cancel_send(&self, slot: &mut WakerSlot, ticket: &mut Option<u64>) -> Option<T> {
        self.tasks.cancel_waker(slot);
        let t = ticket.take()?;
        let mut st = self.state.lock();
        (st.taken < t).then(|| self.take_back(&mut st))
    }

    /// Polls a task's receive: `Ready(Ok(msg))` with the message in the slot,
    /// `Ready(Err(()))` when the queue is disconnected and the slot empty.
    pub(crate) fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        slot: &mut WakerSlot,
    ) -> Poll<Result<T, ()>> {
        self.tasks.poll_until(
            cx,
            slot,
            || false,
            || {
                let mut st = self.state.lock();
                match self.take(&mut st) {
                    Some(msg) => Some(Ok(msg)),
                    None if st.disconnected => Some(Err(())),
                    None => None,
                }
            },
        )
    }

    /// Takes a task's receive registration off the set.
    pub(crate) fn cancel_recv(&self, slot: &mut WakerSlot) {
        self.tasks.cancel_waker(slot);
    }

    pub(crate) fn disconnect(&self) {
        let mut st = self.state.lock();
        st.disconnected = true;
        self.announce(&st);
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::sync::{thread, Arc};
    use std::time::Duration;

    #[test]
    fn try_operations_need_a_partner() {
        let ch = Channel::new();
        assert_eq!(ch.try_send(1), Err(TrySendError::Full(1)));
        assert_eq!(ch.try_recv(), Err(TryRecvError::Empty));
        let soon = time::deadline_after(Duration::from_millis(2));
        assert_eq!(ch.send(1, soon), Err(SendTimeoutError::Timeout(1)));
        let soon = time::deadline_after(Duration::from_millis(2));
        assert_eq!(ch.recv(soon), Err(RecvTimeoutError::Timeout));
        ch.disconnect();
        assert_eq!(ch.try_send(1), Err(TrySendError::Disconnected(1)));
        assert_eq!(ch.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn hand_over_between_threads() {
        let n = if cfg!(miri) { 20 } else { 500 };
        let ch = Arc::new(Channel::new());
        let other = Arc::clone(&ch);
        let t = thread::spawn(move || {
            for i in 0..n {
                other.send(i, None).unwrap();
            }
        });
        for i in 0..n {
            assert_eq!(ch.recv(None), Ok(i));
        }
        t.join().unwrap();
    }
}
