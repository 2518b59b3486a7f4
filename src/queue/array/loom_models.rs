//! The owned protocol and its revocation (the public-API models in `loom-tests/` run
//! the shared protocol, see `Channel::with_capacity`). `Arc` payloads: a message lost or
//! delivered twice shows up as a leak or a double drop.
use super::super::owners::TRANSFER_BURST;
use super::*;
use crate::sync::atomic::AtomicU64;
use crate::sync::{asym_fence, thread, token_pool, Arc};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = crate::sync::loom_builder();
    builder.max_branches = 20_000;
    builder.check(f);
}

/// `model` for the changes of owner (a revocation, a transfer), with the owners' light
/// fences as loom's `SeqCst` fence: paired with the heavy fences as on the membarrier
/// build, these models run for many minutes each. The orderings the owners' cursors rely
/// on between two light fences are checked by the models without a change of owner, which
/// run paired (`owners_pass_messages_through_a_full_and_an_empty_queue`,
/// `owned_try_operations_are_linearizable`).
fn model_with_seqcst_light(f: impl Fn() + Sync + Send + 'static) {
    asym_fence::light_as_seqcst_fence(|| model(f));
}

/// One sending thread, one receiving thread, capacity 1: both own their sides, the
/// sender waits on a full queue and the receiver on an empty one, every message arrives
/// once and in order, and the last one is still delivered after the disconnection.
#[test]
fn owners_pass_messages_through_a_full_and_an_empty_queue() {
    model(|| {
        let ch = Arc::new(Channel::with_protocol(1, Owners::new()));
        let tx = Arc::clone(&ch);
        let sender = thread::spawn(move || {
            for i in 0..3u8 {
                tx.send(Arc::new(i), None).unwrap();
            }
            tx.disconnect();
        });
        let mut got = Vec::new();
        while let Ok(m) = ch.recv(None) {
            got.push(*m);
        }
        sender.join().unwrap();
        assert_eq!(got, [0, 1, 2]);
    });
}

/// Capacity 2 and four messages: the owners take runs of two, so the second message of
/// each run goes through the fast paths (`send_owned_fast`, `recv_owned_fast`, which
/// spend slots their last look found instead of claiming), and the sender refills each slot right after
/// the receiver frees it.
#[test]
fn owners_use_the_slots_they_already_know_of_on_the_fast_paths() {
    model(|| {
        let ch = Arc::new(Channel::with_protocol(2, Owners::new()));
        let tx = Arc::clone(&ch);
        let sender = thread::spawn(move || {
            for i in 0..4u8 {
                tx.send(Arc::new(i), None).unwrap();
            }
        });
        for i in 0..4u8 {
            assert_eq!(*ch.recv(None).unwrap(), i);
        }
        sender.join().unwrap();
    });
}

/// A second sending thread arrives while the owners run, with no owner change allowed:
/// the revocation converts the cursors into stamps between their operations, and both
/// messages arrive once.
#[test]
fn a_second_sender_revokes_the_owners_mid_stream() {
    model_with_seqcst_light(|| {
        let ch = Arc::new(Channel::with_protocol(2, Owners::with_burst(0)));
        let senders: Vec<_> = (0..2u8)
            .map(|p| {
                let tx = Arc::clone(&ch);
                thread::spawn(move || tx.send(Arc::new(p), None).unwrap())
            })
            .collect();
        let mut got = [*ch.recv(None).unwrap(), *ch.recv(None).unwrap()];
        for s in senders {
            s.join().unwrap();
        }
        got.sort_unstable();
        assert_eq!(got, [0, 1]);
        assert_eq!(ch.try_recv().unwrap_err(), TryRecvError::Empty);
    });
}

/// Two sending threads, one of them sending twice: whichever comes second revokes (no
/// owner change allowed), possibly between the first one's two sends or while the
/// receiver waits on an empty queue; every message arrives once and each sender's in
/// order.
#[test]
fn senders_in_order_across_a_revocation() {
    senders_in_order(0);
}

/// As `senders_in_order_across_a_revocation`, with owner changes allowed: the second
/// sender takes the sending side over (and the first may take it back), the queue
/// staying owned.
#[test]
fn senders_in_order_across_owner_changes() {
    senders_in_order(TRANSFER_BURST);
}

/// As above, with one change allowed: the first change is a transfer, a second one
/// makes the queue shared.
#[test]
fn senders_in_order_across_a_transfer_then_a_revocation() {
    senders_in_order(1);
}

fn senders_in_order(burst: usize) {
    model_with_seqcst_light(move || {
        let ch = Arc::new(Channel::with_protocol(2, Owners::with_burst(burst)));
        let senders: Vec<_> = (0..2u8)
            .map(|p| {
                let tx = Arc::clone(&ch);
                thread::spawn(move || {
                    for i in 0..2 - p {
                        tx.send(Arc::new((p, i)), None).unwrap();
                    }
                })
            })
            .collect();
        let mut next = [0u8; 2];
        for _ in 0..3 {
            let m = ch.recv(None).unwrap();
            let (p, i) = *m;
            assert_eq!(next[p as usize], i, "sender {p} out of order");
            next[p as usize] += 1;
        }
        for s in senders {
            s.join().unwrap();
        }
        assert_eq!(next, [2, 1]);
    });
}

/// A second receiving thread revokes (no owner change allowed) while the first receives
/// and the sender sends: each message is taken exactly once.
#[test]
fn a_second_receiver_revokes_the_owners() {
    receivers_take_each_once(0);
}

/// As `a_second_receiver_revokes_the_owners`, the second receiver taking the receiving
/// side over instead.
#[test]
fn a_second_receiver_takes_the_side_over() {
    receivers_take_each_once(TRANSFER_BURST);
}

fn receivers_take_each_once(burst: usize) {
    model_with_seqcst_light(move || {
        let ch = Arc::new(Channel::<Arc<u8>>::with_protocol(
            2,
            Owners::with_burst(burst),
        ));
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                let rx = Arc::clone(&ch);
                thread::spawn(move || *rx.recv(None).unwrap())
            })
            .collect();
        ch.send(Arc::new(0u8), None).unwrap();
        ch.send(Arc::new(1u8), None).unwrap();
        let mut got: Vec<u8> = receivers.into_iter().map(|r| r.join().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, [0, 1]);
    });
}

/// Linearizability of the owned protocol's `try_` paths: the sending owner sends `a` and
/// `b` into a queue of 2, then `try_send`s; the receiving owner takes `a`, then
/// `try_recv`s. `Full` on the third send says `a` was still there after `b` went in;
/// `Empty` after taking `a` says `b` had not gone in: no order of the operations gives
/// both. The cursors move by plain stores, so without the fences before `Full`/`Empty`
/// (`claim_send_owned`, `claim_recv_owned`) each side may read the other's old cursor;
/// taking out either fence makes this model fail.
#[test]
fn owned_try_operations_are_linearizable() {
    model(|| {
        let ch = Arc::new(Channel::<Arc<u8>>::with_protocol(2, Owners::new()));
        let rx = Arc::clone(&ch);
        let receiver = thread::spawn(move || {
            // Whether it took `a`, and then what its next look found.
            let first = rx.try_recv().ok().map(|m| *m);
            first.map(|a| (a, rx.try_recv().map(|m| *m)))
        });
        ch.try_send(Arc::new(0u8)).unwrap();
        ch.try_send(Arc::new(1u8)).unwrap();
        let third = ch.try_send(Arc::new(2u8));
        let full = matches!(third, Err(TrySendError::Full(_)));
        if let Some((a, second)) = receiver.join().unwrap() {
            assert_eq!(a, 0);
            assert!(
                !(full && second == Err(TryRecvError::Empty)),
                "`Full` with `a` taken, `Empty` with `b` sent"
            );
        }
    });
}

/// The receiving side disconnects (revoking) while the sending owner sends: each send
/// either lands, and its message is received or discarded exactly once, or hands its
/// message back; none lands after a send saw the disconnection.
#[test]
fn a_disconnection_revokes_the_sending_owner_mid_send() {
    model(|| {
        let ch = Arc::new(Channel::with_protocol(2, Owners::new()));
        let tx = Arc::clone(&ch);
        let sender = thread::spawn(move || {
            let first = tx.try_send(Arc::new(1u8)).is_ok();
            let second = tx.try_send(Arc::new(2u8)).is_ok();
            (first, second)
        });
        let got = ch.try_recv().ok().map(|m| *m);
        ch.disconnect();
        let (first, second) = sender.join().unwrap();
        assert!(
            first || !second,
            "a send landed after one saw the disconnection"
        );
        if let Some(v) = got {
            assert_eq!(v, 1);
            assert!(first);
        }
        ch.discard_all();
        assert!(ch.try_send(Arc::new(3)).is_err());
    });
}

/// A thread that exits while owning the sending side gives its token back to the pool; a
/// later thread that draws the same token inherits the side with no change of owner (its
/// `hold` finds its own token) and sends on from the first one's cursor and `OwnerCache`.
/// Nothing of the owners' handshake orders the two: the first thread's operations happen
/// before the heir's only through the pool's hand-over (`token_pool`: the Release
/// give-back, the Acquire take). Weakening either to Relaxed makes this model fail (the
/// heir writes the first message's slot again). Two senders each try once to draw the
/// pool's one free slot and, if they get it, take its token, send and give it back; main
/// receives after both are done (no thread parks or spins, so executions stay short).
#[test]
fn an_heir_to_a_token_inherits_the_side_it_owned() {
    model(|| {
        const SLOT: usize = 5;
        let ch = Arc::new(Channel::with_protocol(2, Owners::new()));
        let pool = Arc::new(AtomicU64::new(!(1 << SLOT)));
        let senders: Vec<_> = (1..=2u8)
            .map(|m| {
                let (tx, pool) = (Arc::clone(&ch), Arc::clone(&pool));
                thread::spawn(move || {
                    let s = token_pool::take(&pool)?;
                    thread::set_token(thread::FIRST_TOKEN + s);
                    tx.try_send(Arc::new(m)).unwrap();
                    token_pool::give_back(&pool, s);
                    Some(m)
                })
            })
            .collect();
        let sent: Vec<u8> = senders
            .into_iter()
            .filter_map(|s| s.join().unwrap())
            .collect();
        let mut got = Vec::new();
        while let Ok(m) = ch.try_recv() {
            got.push(*m);
        }
        got.sort_unstable();
        assert_eq!(got, sent, "each message sent arrives once");
        assert!(!sent.is_empty());
        assert!(!ch.owners.is_shared(), "inherited, not revoked");
    });
}

/// The drain of a disconnected queue (`take_for_discard`) racing a send that claimed its
/// slot before the disconnection: the drain waits for the slot's stamp, then moves the
/// message out. Only `read_awaited`'s Acquire (`AWAITED_LOAD`, paired with the sender's
/// Release stamp store) orders that read after the sender's write; weakened, loom reports a
/// causality violation. The crate drains only in the queue's drop, once every handle is
/// gone, so this calls the drain directly, while the sender still runs.
#[test]
fn a_drain_waits_out_a_send_claimed_before_the_disconnection() {
    model(|| {
        let ch = Arc::new(Channel::with_protocol(1, Owners::shared()));
        let probe = Arc::new(1u8);
        let (tx, msg) = (Arc::clone(&ch), Arc::clone(&probe));
        let sender = thread::spawn(move || tx.try_send(msg).is_ok());
        ch.disconnect();
        ch.discard_all();
        sender.join().unwrap();
        // Landed and discarded, or handed back and dropped: once either way.
        assert_eq!(Arc::strong_count(&probe), 1);
        assert_eq!(ch.try_recv().unwrap_err(), TryRecvError::Disconnected);
    });
}

/// A task waits on an owned queue, whose sender notifies with the light fence only: the
/// task's registration completes the handshake with the heavy fence, so the message sent
/// while it registers still wakes it (loom reports a deadlock in `block_on` otherwise).
#[test]
fn a_task_waiting_on_an_owned_queue_gets_its_wake_up() {
    model(|| {
        let ch = Arc::new(Channel::with_protocol(1, Owners::new()));
        let tx = Arc::clone(&ch);
        let sender = thread::spawn(move || tx.send(Arc::new(1u8), None).unwrap());
        let mut slot = crate::sync::WakerSlot::new();
        let got = loom::future::block_on(std::future::poll_fn(|cx| ch.poll_recv(cx, &mut slot)));
        assert_eq!(*got.unwrap(), 1);
        sender.join().unwrap();
        assert!(!ch.is_shared());
    });
}

/// The sending side of the above: a task sending into a full owned queue is woken by the
/// receiving owner's light-fenced notification.
#[test]
fn a_task_waiting_for_room_in_an_owned_queue_gets_its_wake_up() {
    model(|| {
        let ch = Arc::new(Channel::with_protocol(1, Owners::new()));
        ch.send(Arc::new(0u8), None).unwrap();
        let rx = Arc::clone(&ch);
        let receiver = thread::spawn(move || (*rx.recv(None).unwrap(), *rx.recv(None).unwrap()));
        let mut slot = crate::sync::WakerSlot::new();
        let mut msg = Some(Arc::new(1u8));
        loom::future::block_on(std::future::poll_fn(|cx| {
            ch.poll_send(cx, &mut slot, &mut msg)
        }))
        .unwrap();
        assert_eq!(receiver.join().unwrap(), (0, 1));
    });
}
