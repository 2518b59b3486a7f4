//! Loom models of the queue's async API: tasks (`loom::future::block_on` on loom threads)
//! waiting beside threads, their registrations racing the other side's publication, a
//! cancellation racing a wake-up. A lost wake-up shows up as a deadlock in `block_on`;
//! `Arc` payloads show a lost or doubled message as a leak or a double drop. Under loom
//! `bounded` runs the shared protocol; the owned protocol's task model is
//! `queue::array::loom_models::a_task_waiting_on_an_owned_queue_gets_its_wake_up`.
#![cfg(logbus_loom)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, RawWaker, RawWakerVTable, Waker};

use logbus::queue::{bounded, unbounded};
use loom::future::block_on;
use loom::sync::Arc;
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.max_branches = 20_000;
    builder.check(f);
}

/// A waker that does nothing (for a future polled once and dropped).
fn noop_waker() -> Waker {
    const VTABLE: RawWakerVTable = RawWakerVTable::new(
        |_| RawWaker::new(std::ptr::null(), &VTABLE),
        |_| {},
        |_| {},
        |_| {},
    );
    // SAFETY: every function of the vtable ignores the data pointer, which is never
    // dereferenced.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// One task waits for a message a thread sends while the task registers: it is woken (no
/// lost wake-up between its registration and the sender's publication).
#[test]
fn a_task_receives_a_message_sent_while_it_registers() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(1);
        let sender = thread::spawn(move || tx.send(Arc::new(1)).unwrap());
        let got = block_on(rx.recv_async()).unwrap();
        assert_eq!(*got, 1);
        sender.join().unwrap();
    });
}

/// The same on the unbounded queue (its senders notify without a fence of their own).
#[test]
fn a_task_receives_from_the_unbounded_queue() {
    model(|| {
        let (tx, rx) = unbounded::<Arc<u8>>();
        let sender = thread::spawn(move || tx.send(Arc::new(1)).unwrap());
        let got = block_on(rx.recv_async()).unwrap();
        assert_eq!(*got, 1);
        sender.join().unwrap();
    });
}

/// Two tasks on two threads wait on one empty queue; a thread sends one message and
/// disconnects: one task gets the message, the other the end (every wake-up reaches every
/// waiting task, and the disconnection's too).
#[test]
fn two_waiting_tasks_one_message_and_the_end() {
    model(|| {
        let (tx, rx) = unbounded::<Arc<u8>>();
        let rx2 = rx.clone();
        let other = thread::spawn(move || block_on(rx2.recv_async()).map(|m| *m).ok());
        let sender = thread::spawn(move || tx.send(Arc::new(1)).unwrap());
        let mine = block_on(rx.recv_async()).map(|m| *m).ok();
        let theirs = other.join().unwrap();
        sender.join().unwrap();
        assert_eq!(mine.or(theirs), Some(1));
        assert!(mine.is_none() || theirs.is_none());
    });
}

/// A task registers for a message (nothing is sent yet), then another task registers
/// behind it; a thread sends one message while the first task's future is dropped
/// (cancelled), racing the wake-up. The second task still gets the message: a wake-up
/// wakes every registered task, so the one it may have spent on the cancelled future is
/// not the only one.
#[test]
fn a_cancelled_receive_racing_a_wake_up_loses_nothing() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(1);
        // The canceller says, through a queue of its own, when it has registered.
        let (registered_tx, registered_rx) = unbounded::<()>();
        let rx2 = rx.clone();
        let canceller = thread::spawn(move || {
            let waker = noop_waker();
            let mut cx = Context::from_waker(&waker);
            let mut fut = rx2.recv_async();
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
            registered_tx.send(()).unwrap();
            let sender = thread::spawn(move || tx.send(Arc::new(1)).unwrap());
            drop(fut);
            sender.join().unwrap();
        });
        registered_rx.recv().unwrap();
        let got = block_on(rx.recv_async()).unwrap();
        assert_eq!(*got, 1);
        canceller.join().unwrap();
    });
}

/// A thread parked in `recv` and a task awaiting `recv_async` on one queue, two messages
/// sent by a third thread: both get one.
#[test]
fn a_parked_thread_and_a_waiting_task_share_a_queue() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(2);
        let rx2 = rx.clone();
        let parked = thread::spawn(move || *rx2.recv().unwrap());
        let sender = thread::spawn(move || {
            tx.send(Arc::new(1)).unwrap();
            tx.send(Arc::new(2)).unwrap();
        });
        let mine = *block_on(rx.recv_async()).unwrap();
        let theirs = parked.join().unwrap();
        sender.join().unwrap();
        assert_eq!(mine + theirs, 3);
    });
}

/// A task sending into a full queue is woken by a thread's receive.
#[test]
fn a_task_waits_for_room() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(1);
        tx.send(Arc::new(0)).unwrap();
        let receiver = thread::spawn(move || {
            let a = *rx.recv().unwrap();
            let b = *rx.recv().unwrap();
            (a, b)
        });
        block_on(tx.send_async(Arc::new(1))).unwrap();
        assert_eq!(receiver.join().unwrap(), (0, 1));
    });
}

/// Two tasks meet on a rendezvous queue: the sender's message waits in the hand-off slot
/// and the receiver takes it; the sender completes only then.
#[test]
fn two_tasks_meet_on_a_rendezvous_queue() {
    model(|| {
        let (tx, rx) = bounded::<Arc<u8>>(0);
        let receiver = thread::spawn(move || *block_on(rx.recv_async()).unwrap());
        block_on(tx.send_async(Arc::new(5))).unwrap();
        assert_eq!(receiver.join().unwrap(), 5);
    });
}
