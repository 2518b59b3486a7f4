//! Which public types are `Send`/`Sync`, checked at compile time (and what must not be).

use std::cell::Cell;
use std::rc::Rc;

use logbus::queue::{
    IntoIter, Iter, Receiver, RecvError, RecvTimeoutError, SendError, SendTimeoutError, Sender,
    TryIter, TryRecvError, TrySendError,
};

fn send_sync<T: Send + Sync>() {}
fn send<T: Send>() {}
fn unpin<T: Unpin>() {}

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
