//! The timer flavours behind `after`, `at`, `tick` and `never`, as crossbeam-channel's:
//! receive-only queues whose messages are the instants at which they were due.
//!
//! No thread runs them: a receiver computes whether a message is due from the clock, and a
//! blocking receiver sleeps until the due time (or its own deadline, whichever is first).
//! Delivery is decided by an atomic compare-and-swap, so with cloned receivers each message
//! goes to exactly one of them. They never disconnect.
//!
//! A task receiving from a timer (the async API) that finds no message due asks the
//! process's one alarm thread (`alarm`, started on first use) to wake it at the due instant,
//! and looks again when polled. Nothing is due from `never` (nor from an `after` whose
//! message was taken): such a receive pends for good, registering nothing. A future keeps
//! one alarm (its key in its `WakerSlot`) and takes it back when it completes or is
//! dropped, so the alarm thread holds no waker of a future that is gone.

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::sync::WakerSlot;

use super::error::{RecvTimeoutError, TryRecvError};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a timer delivers.
pub(crate) enum Channel {
    /// One message at `when` (`after`, `at`).
    At { when: Instant, taken: AtomicBool },
    /// A message every `period`, the first at `start + period`; `next` counts nanoseconds
    /// from `start` to the next due instant. A tick missed by a slow receiver is not
    /// delivered late in a burst: the next one is due a period after it was received.
    Tick {
        start: Instant,
        period: Duration,
        next: AtomicU64,
    },
    /// Nothing, ever (`never`).
    Never,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Channel {
    pub(crate) fn at(when: Instant) -> Self {
        Channel::At {
            when,
            taken: AtomicBool::new(false),
        }
    }

    pub(crate) fn tick(period: Duration) -> Self {
        Channel::Tick {
            start: Instant::now(),
            period,
            next: AtomicU64::new(nanos(period)),
        }
    }

    /// When the next message is due (`None`: never, from this receiver's view now).
    pub(crate) fn due(&self) -> Option<Instant> {
        match self {
            // Relaxed: `taken` guards no other data; the swap in `try_recv` decides.
            Channel::At { when, taken } => (!taken.load(Ordering::Relaxed)).then_some(*when),
            Channel::Tick { start, next, .. } => {
                // Relaxed: as above, the CAS in `try_recv` decides.
                start.checked_add(Duration::from_nanos(next.load(Ordering::Relaxed)))
            }
            Channel::Never => None,
        }
    }

    pub(crate) fn try_recv(&self) -> Result<Instant, TryRecvError> {
        let now = Instant::now();
        match self {
            Channel::At { when, taken } => {
                // Relaxed: the flag guards no other data; the swap makes one receiver win.
                if now >= *when && !taken.swap(true, Ordering::Relaxed) {
                    return Ok(*when);
                }
                Err(TryRecvError::Empty)
            }
            Channel::Tick {
                start,
                period,
                next,
            } => {
                let elapsed = nanos(now.saturating_duration_since(*start));
                // Relaxed: as above, the CAS makes one receiver win each tick.
                let mut due = next.load(Ordering::Relaxed);
                while elapsed >= due {
                    let following = elapsed.saturating_add(nanos(*period));
                    match next.compare_exchange_weak(
                        due,
                        following,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Ok(*start + Duration::from_nanos(due)),
                        Err(now_due) => due = now_due,
                    }
                }
                Err(TryRecvError::Empty)
            }
            Channel::Never => Err(TryRecvError::Empty),
        }
    }

    pub(crate) fn recv(&self, deadline: Option<Instant>) -> Result<Instant, RecvTimeoutError> {
        loop {
            if let Ok(t) = self.try_recv() {
                return Ok(t);
            }
            let wake = match (self.due(), deadline) {
                (Some(d), Some(dl)) => Some(d.min(dl)),
                (d, dl) => d.or(dl),
            };
            match wake {
                Some(w) => {
                    let now = Instant::now();
                    if deadline.is_some_and(|dl| now >= dl) {
                        return Err(RecvTimeoutError::Timeout);
                    }
                    std::thread::sleep(w.saturating_duration_since(now));
                }
                // Nothing will ever come and there is no deadline: block for good, as
                // crossbeam's `never` (and a taken `after`) do.
                None => std::thread::sleep(Duration::from_secs(3600)),
            }
        }
    }

    /// 1 when a message is due and not yet taken.
    pub(crate) fn len(&self) -> usize {
        usize::from(self.due().is_some_and(|d| Instant::now() >= d))
    }

    pub(crate) fn capacity(&self) -> usize {
        match self {
            Channel::Never => 0,
            _ => 1,
        }
    }
}

impl Channel {
    /// Polls a task's receive: `Ready` with the instant due, or `Pending` with the task's
    /// waker left with the alarm thread for the due instant (none for a timer with nothing
    /// due ever).
    pub(crate) fn poll_recv(&self, cx: &mut Context<'_>, slot: &mut WakerSlot) -> Poll<Instant> {
        loop {
            if let Ok(t) = self.try_recv() {
                alarm::cancel(slot);
                return Poll::Ready(t);
            }
            let Some(when) = self.due() else {
                alarm::cancel(slot);
                return Poll::Pending;
            };
            if Instant::now() < when {
                alarm::wake_at(when, cx.waker(), slot);
                // Due meanwhile (or taken by another receiver): look again; the alarm
                // then wakes the task for nothing.
                if Instant::now() < when {
                    return Poll::Pending;
                }
            }
        }
    }

    /// Takes a task's alarm back (its receive completed or was dropped).
    pub(crate) fn cancel_recv(slot: &mut WakerSlot) {
        alarm::cancel(slot);
    }
}

/// The alarm thread: wakes tasks at the instants they wait for (timers' receives).
#[cfg(not(logbus_loom))]
mod alarm {
    use std::task::Waker;
    use std::time::Instant;

    use crate::sync::{thread, Condvar, Mutex, WakerSlot};

    struct Alarms {
        /// Instants, wakers and the keys of the futures they wake: one entry per future
        /// (its key in its `WakerSlot`), updated when it is polled again, removed when it
        /// completes or is dropped.
        due: Vec<(Instant, Waker, u64)>,
        next_key: u64,
        started: bool,
    }

    static ALARMS: Mutex<Alarms> = Mutex::new(Alarms {
        due: Vec::new(),
        next_key: 0,
        started: false,
    });
    static CHANGED: Condvar = Condvar::new();

    /// Wakes `waker` at `when` (or soon after): the alarm of the future whose slot is
    /// `slot`, set or moved.
    pub(super) fn wake_at(when: Instant, waker: &Waker, slot: &mut WakerSlot) {
        let mut alarms = ALARMS.lock();
        if let Some(key) = slot.key() {
            if let Some(entry) = alarms.due.iter_mut().find(|e| e.2 == key) {
                if entry.0 == when && entry.1.will_wake(waker) {
                    return;
                }
                entry.0 = when;
                let old = std::mem::replace(&mut entry.1, waker.clone());
                CHANGED.notify_all();
                drop(alarms);
                // Outside the lock: a waker's drop may run code that asks for an alarm.
                drop(old);
                return;
            }
        }
        let key = alarms.next_key;
        alarms.next_key += 1;
        slot.set_key(Some(key));
        alarms.due.push((when, waker.clone(), key));
        if !alarms.started {
            if thread::spawn_named("logbus-alarm".into(), run).is_err() {
                // No thread: the task polls again at once rather than wait for nothing.
                let entry = alarms.due.pop();
                slot.set_key(None);
                drop(alarms);
                drop(entry);
                waker.wake_by_ref();
                return;
            }
            alarms.started = true;
        }
        CHANGED.notify_all();
    }

    /// Takes back the alarm of the future whose slot is `slot`, if it has one.
    pub(super) fn cancel(slot: &mut WakerSlot) {
        let Some(key) = slot.key() else {
            return;
        };
        slot.set_key(None);
        let mut alarms = ALARMS.lock();
        let entry = alarms
            .due
            .iter()
            .position(|e| e.2 == key)
            .map(|i| alarms.due.swap_remove(i));
        drop(alarms);
        // Outside the lock, as above.
        drop(entry);
    }

    fn run() {
        let mut ripe = Vec::new();
        let mut alarms = ALARMS.lock();
        loop {
            let now = Instant::now();
            let mut next: Option<Instant> = None;
            let mut i = 0;
            while i < alarms.due.len() {
                let when = alarms.due[i].0;
                if when <= now {
                    ripe.push(alarms.due.swap_remove(i).1);
                } else {
                    next = Some(next.map_or(when, |n| n.min(when)));
                    i += 1;
                }
            }
            if !ripe.is_empty() {
                // Outside the lock: a waker may run code that asks for another alarm.
                drop(alarms);
                for waker in ripe.drain(..) {
                    waker.wake();
                }
                alarms = ALARMS.lock();
                continue;
            }
            match next {
                Some(when) => {
                    CHANGED.wait_until(&mut alarms, when);
                }
                None => CHANGED.wait(&mut alarms),
            }
        }
    }
}

/// Under loom (no threads outliving a model): a task waiting for a timer is woken at once
/// and polls again.
#[cfg(logbus_loom)]
mod alarm {
    use crate::sync::WakerSlot;

    pub(super) fn wake_at(_when: std::time::Instant, waker: &std::task::Waker, _: &mut WakerSlot) {
        waker.wake_by_ref();
    }

    pub(super) fn cancel(_: &mut WakerSlot) {}
}
