//! loom models of a select racing sends, receives and disconnects.

use crate::queue::{bounded, unbounded, Receiver, RecvError, Select, SelectedOperation};
use crate::sync::loom_model as model;
use crate::sync::thread;

/// Selects until both arms have completed, each leaving the select once it has: the
/// `disconnect` arm, receiving from `r2` whose senders go, and the `other` arm, which
/// `complete` finishes.
fn select_both<'a>(
    sel: &mut Select<'a>,
    (disconnect, r2): (usize, &Receiver<u8>),
    other: usize,
    mut complete: impl FnMut(SelectedOperation<'a>),
) {
    for _ in 0..2 {
        let op = sel.select();
        let i = op.index();
        if i == disconnect {
            assert_eq!(op.recv(r2), Err(RecvError));
        } else {
            assert_eq!(i, other);
            complete(op);
        }
        sel.remove(i);
    }
}

/// A thread selects over a bounded and an unbounded queue, again and again until it has
/// seen both events, while one thread sends on the first and another disconnects the
/// second. An arm whose event it has seen leaves the select, so each event in turn is
/// the only one that can end a select: a wake-up lost between a select's last look and
/// its park is a deadlock loom reports. Fails when `WaitSet::watch` loses its `SeqCst`
/// fence, or when the select re-checks before it registers.
#[test]
fn a_select_races_a_send_and_a_disconnect() {
    model(|| {
        let (t1, r1) = bounded::<u8>(1);
        let (t2, r2) = unbounded::<u8>();
        let sender = thread::spawn(move || t1.send(7).unwrap());
        let dropper = thread::spawn(move || drop(t2));
        // The unbounded arm first (under loom the arms are tried in order): its look at
        // the queue has no fence of its own, so only the watch's fence orders it after
        // the registration (the bounded arm's look fences, and would hide a missing one).
        let mut sel = Select::new();
        let disconnect = sel.recv(&r2);
        let message = sel.recv(&r1);
        select_both(&mut sel, (disconnect, &r2), message, |op| {
            assert_eq!(op.recv(&r1), Ok(7));
        });
        sender.join().unwrap();
        dropper.join().unwrap();
    });
}

/// The send side of the race above: a select offering a message to a full bounded queue
/// and waiting to receive from an unbounded one, again and again until both completed,
/// while one thread frees a slot of the first and another disconnects the second. Each
/// event in turn is the only one that can end a select. Fails as the model above does.
#[test]
fn a_select_send_races_a_receive_and_a_disconnect() {
    model(|| {
        let (t1, r1) = bounded::<u8>(1);
        t1.send(1).unwrap();
        let (t2, r2) = unbounded::<u8>();
        let receiver = thread::spawn(move || {
            let first = r1.recv().unwrap();
            (first, r1.recv().unwrap())
        });
        let dropper = thread::spawn(move || drop(t2));
        // The unbounded arm first, as above.
        let mut sel = Select::new();
        let disconnect = sel.recv(&r2);
        let room = sel.send(&t1);
        select_both(&mut sel, (disconnect, &r2), room, |op| {
            op.send(&t1, 2).unwrap()
        });
        assert_eq!(receiver.join().unwrap(), (1, 2));
        dropper.join().unwrap();
    });
}

/// A select over an unbounded queue and a rendezvous queue, and a thread that
/// disconnects the first: the only event that can end the select. A wake-up lost
/// between the select's last look and its park is a deadlock loom reports.
#[test]
fn a_select_sees_a_disconnect() {
    model(|| {
        let (t2, r2) = unbounded::<u8>();
        let (_t0, r0) = bounded::<u8>(0);
        let dropper = thread::spawn(move || drop(t2));
        let got = crate::select! {
            recv(r2) -> m => m,
            recv(r0) -> _ => unreachable!(),
        };
        assert_eq!(got, Err(RecvError));
        dropper.join().unwrap();
    });
}

/// A select waiting to send into a full bounded queue, and to receive from a
/// rendezvous queue, while another thread frees a slot: the send goes through. Fails
/// when the select re-checks before it registers; a watch without its fence passes here
/// (the bounded queue's `Full` look fences by itself).
#[test]
fn a_select_send_waits_for_room() {
    model(|| {
        let (t1, r1) = bounded::<u8>(1);
        t1.send(1).unwrap();
        let (_t0, r0) = bounded::<u8>(0);
        let receiver = thread::spawn(move || {
            let first = r1.recv().unwrap();
            (first, r1.recv().unwrap())
        });
        crate::select! {
            send(t1, 2) -> res => res.unwrap(),
            recv(r0) -> _ => unreachable!(),
        }
        assert_eq!(receiver.join().unwrap(), (1, 2));
    });
}
