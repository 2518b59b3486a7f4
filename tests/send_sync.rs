//! Which public types are `Send`/`Sync`, checked at compile time (and what must not be).

use std::cell::Cell;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::rc::Rc;

use logbus::queue::{
    IntoIter, Iter, Receiver, RecvError, RecvTimeoutError, SendError, SendTimeoutError, Sender,
    TryIter, TryRecvError, TrySendError,
};

fn send_sync<T: Send + Sync>() {}
fn send<T: Send>() {}
fn unpin<T: Unpin>() {}
fn unwind_safe<T: UnwindSafe + RefUnwindSafe>() {}

#[test]
fn queue_handles_are_send_and_sync_for_send_payloads() {
    // `Cell` is Send but not Sync: the handles still are both.
    send_sync::<Sender<Cell<u32>>>();
    send_sync::<Receiver<Cell<u32>>>();
    send_sync::<Sender<Vec<u8>>>();
    send_sync::<Receiver<Vec<u8>>>();
    send::<IntoIter<Cell<u32>>>();
    send_sync::<Iter<'static, u32>>();
    send_sync::<TryIter<'static, u32>>();
    unpin::<Sender<Rc<u8>>>();
    send_sync::<SendError<u8>>();
    send_sync::<TrySendError<u8>>();
    send_sync::<SendTimeoutError<u8>>();
    send_sync::<RecvError>();
    send_sync::<TryRecvError>();
    send_sync::<RecvTimeoutError>();
}

#[test]
fn queue_handles_are_unwind_safe_as_crossbeam_channels_are() {
    // For any payload, even one that is neither (`Cell` is not `RefUnwindSafe`).
    unwind_safe::<Sender<Cell<u32>>>();
    unwind_safe::<Receiver<Cell<u32>>>();
    unwind_safe::<Iter<'static, Cell<u32>>>();
    unwind_safe::<TryIter<'static, Cell<u32>>>();
    unwind_safe::<IntoIter<Cell<u32>>>();
}

#[test]
fn a_send_wrapped_in_catch_unwind_compiles_and_the_queue_works_after() {
    let (tx, rx) = logbus::queue::bounded(2);
    // No `AssertUnwindSafe`: the closure borrows both handles.
    let r = std::panic::catch_unwind(|| {
        tx.send(1).unwrap();
        assert_eq!(rx.recv(), Ok(1));
        tx.send(2).unwrap();
        panic!("after the send");
    });
    assert!(r.is_err());
    assert_eq!(rx.try_recv(), Ok(2));
    tx.send(3).unwrap();
    assert_eq!(rx.recv(), Ok(3));
}
