//! A message whose `Drop` panics, on every path where a message is dropped by or around
//! the queue: the panic unwinds once (never a second panic while unwinding, which aborts
//! the process), no message is dropped twice, every other message is still dropped once,
//! and the queue stays usable or cleanly disconnected.
//!
//! Its own test binary: before the fix, the first test below aborted the whole process.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use logbus::queue::{bounded, Receiver, Sender, TryRecvError, TrySendError};

/// A message that counts its drops and panics in `Drop` when armed.
#[derive(Debug)]
struct Bomb {
    armed: bool,
    id: u32,
    drops: Arc<AtomicUsize>,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        if self.armed {
            panic!("bomb {} went off", self.id);
        }
    }
}

struct Bombs(Arc<AtomicUsize>);

impl Bombs {
    fn new() -> Self {
        Self(Arc::new(AtomicUsize::new(0)))
    }
    fn armed(&self, id: u32) -> Bomb {
        Bomb {
            armed: true,
            id,
            drops: Arc::clone(&self.0),
        }
    }
    fn safe(&self, id: u32) -> Bomb {
        Bomb {
            armed: false,
            id,
            drops: Arc::clone(&self.0),
        }
    }
    fn dropped(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Fills a queue of capacity `cap` with `armed` armed bombs among `total`, from another
/// thread first when `owned_elsewhere` (so that the queue is owned by a thread other than
/// the one that drops it).
fn filled(bombs: &Bombs, cap: usize, total: u32, armed: &[u32]) -> (Sender<Bomb>, Receiver<Bomb>) {
    let (tx, rx) = bounded(cap);
    for id in 0..total {
        let bomb = if armed.contains(&id) {
            bombs.armed(id)
        } else {
            bombs.safe(id)
        };
        tx.send(bomb).unwrap();
    }
    (tx, rx)
}

/// The case: two messages whose `Drop` panics, the senders gone, the last receiver
/// dropped inside `catch_unwind`. One panic comes out; every message is dropped once.
#[test]
fn the_last_receiver_dropping_two_panicking_messages_unwinds_once() {
    let bombs = Bombs::new();
    let (tx, rx) = filled(&bombs, 4, 2, &[0, 1]);
    drop(tx);
    let r = catch_unwind(AssertUnwindSafe(move || drop(rx)));
    let msg = r.unwrap_err();
    assert_eq!(msg.downcast_ref::<String>().unwrap(), "bomb 0 went off");
    assert_eq!(bombs.dropped(), 2);
}

/// The last receiver goes while senders remain (the disconnection path): nothing is
/// dropped yet (the messages stay until the senders go, as in crossbeam-channel), the
/// senders see `Disconnected` with their message handed back, and the last sender's drop
/// drops every queued message once, one panic coming out of it.
#[test]
fn disconnecting_receivers_with_panicking_messages_leaves_senders_disconnected() {
    let bombs = Bombs::new();
    let (tx, rx) = filled(&bombs, 8, 6, &[1, 3, 4]);
    drop(rx);
    assert_eq!(bombs.dropped(), 0);
    assert_eq!(tx.len(), 6);
    match tx.try_send(bombs.safe(9)) {
        Err(TrySendError::Disconnected(b)) => assert_eq!(b.id, 9),
        other => panic!("expected Disconnected, got {other:?}"),
    }
    assert!(tx.send(bombs.safe(10)).is_err());
    assert_eq!(bombs.dropped(), 2);
    let tx2 = tx.clone();
    drop(tx);
    let r = catch_unwind(AssertUnwindSafe(move || drop(tx2)));
    let msg = r.unwrap_err();
    assert_eq!(msg.downcast_ref::<String>().unwrap(), "bomb 1 went off");
    assert_eq!(bombs.dropped(), 8);
}

/// Both sides dropped with messages in it: one panic, from the last handle's drop; each
/// message dropped once.
#[test]
fn dropping_the_queue_with_panicking_messages_unwinds_once() {
    let bombs = Bombs::new();
    let (tx, rx) = filled(&bombs, 4, 4, &[0, 2, 3]);
    drop(rx);
    let r = catch_unwind(AssertUnwindSafe(move || drop(tx)));
    assert!(r.is_err());
    assert_eq!(bombs.dropped(), 4);
}

/// A queue owned by other threads (the owned protocol) when it is dropped: the discard
/// revokes first and behaves the same.
#[test]
fn a_queue_owned_by_other_threads_discards_the_same_way() {
    let bombs = Arc::new(Bombs::new());
    let (tx, rx) = bounded(4);
    let b = Arc::clone(&bombs);
    let tx = thread::spawn(move || {
        for id in 0..3 {
            tx.send(b.armed(id)).unwrap();
        }
        tx
    })
    .join()
    .unwrap();
    let rx = thread::spawn(move || {
        // Take nothing: just become the receiving owner.
        assert!(!rx.is_empty());
        rx
    })
    .join()
    .unwrap();
    drop(tx);
    let r = catch_unwind(AssertUnwindSafe(move || drop(rx)));
    assert!(r.is_err());
    assert_eq!(bombs.dropped(), 3);
}

/// `recv`: a message whose `Drop` panics in the receiver's hands leaves the queue as it
/// was: the next messages come out in order and nothing is dropped twice.
#[test]
fn a_received_message_panicking_in_drop_leaves_the_queue_usable() {
    let bombs = Bombs::new();
    let (tx, rx) = filled(&bombs, 4, 3, &[0]);
    let r = catch_unwind(AssertUnwindSafe(|| drop(rx.recv().unwrap())));
    assert!(r.is_err());
    assert_eq!(rx.recv().unwrap().id, 1);
    tx.send(bombs.safe(3)).unwrap();
    assert_eq!(rx.try_recv().unwrap().id, 2);
    assert_eq!(rx.recv_timeout(std::time::Duration::ZERO).unwrap().id, 3);
    assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
    assert_eq!(bombs.dropped(), 4);
}

/// Batches: a received batch with panicking messages dropped by the caller, and a batch
/// handed back by a disconnected queue; the queue keeps working (or stays disconnected).
#[test]
fn batches_with_panicking_messages() {
    let bombs = Bombs::new();
    // One armed message per `Vec`: a `Vec` dropping a second one while unwinding from the
    // first aborts, queue or not.
    let (tx, rx) = filled(&bombs, 8, 5, &[1]);
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut out = Vec::new();
        assert_eq!(rx.recv_batch(&mut out, 4), Ok(4));
        drop(out); // `Vec`'s drop: 0, then 1 panics, 2 and 3 still dropped
    }));
    assert!(r.is_err());
    assert_eq!(bombs.dropped(), 4);
    let mut batch = vec![bombs.safe(10), bombs.armed(11)];
    tx.send_batch(&mut batch).unwrap();
    let mut out = Vec::new();
    assert_eq!(rx.try_recv_batch(&mut out, 8), Ok(3));
    assert_eq!(out.iter().map(|b| b.id).collect::<Vec<_>>(), [4, 10, 11]);
    let r = catch_unwind(AssertUnwindSafe(move || drop(out)));
    assert!(r.is_err());
    assert_eq!(bombs.dropped(), 7);

    drop(rx);
    let mut batch = vec![bombs.armed(20), bombs.safe(21)];
    assert_eq!(tx.send_batch(&mut batch).unwrap_err().sent, 0);
    // The messages not sent stay in the caller's `Vec`.
    assert_eq!(batch.len(), 2);
    assert!(catch_unwind(AssertUnwindSafe(move || drop(batch))).is_err());
    assert_eq!(bombs.dropped(), 9);
}

/// A rendezvous queue: a handed-over message panicking in the receiver's hands, and one
/// handed back to a sender whose receiver left.
#[test]
fn rendezvous_with_panicking_messages() {
    let bombs = Arc::new(Bombs::new());
    let (tx, rx) = bounded::<Bomb>(0);
    let b = Arc::clone(&bombs);
    let sender = thread::spawn(move || {
        tx.send(b.armed(0)).unwrap();
        tx
    });
    let r = catch_unwind(AssertUnwindSafe(|| drop(rx.recv().unwrap())));
    assert!(r.is_err());
    let tx = sender.join().unwrap();
    drop(rx);
    let back = tx.send(bombs.armed(1)).unwrap_err().into_inner();
    assert!(catch_unwind(AssertUnwindSafe(move || drop(back))).is_err());
    assert_eq!(bombs.dropped(), 2);
}

/// A thread that panics while it holds the queue's last handles drops the queue while
/// unwinding: a message panicking then must not escape (a panic escaping a destructor during
/// unwinding aborts the process). The thread ends with its own panic; every message is
/// dropped once.
#[test]
fn a_thread_unwinding_with_the_last_handles_drops_the_queue_without_aborting() {
    let bombs = Arc::new(Bombs::new());
    let b = Arc::clone(&bombs);
    let r = thread::spawn(move || {
        let (tx, _rx) = filled(&b, 4, 3, &[0, 2]);
        let _keep = tx;
        panic!("the thread's own panic");
    })
    .join();
    let msg = r.unwrap_err();
    assert_eq!(
        *msg.downcast_ref::<&str>().unwrap(),
        "the thread's own panic"
    );
    assert_eq!(bombs.dropped(), 3);
}
