//! Which protocol a bounded queue runs (`Sender::protocol`) and `bounded_shared`. The
//! 64-token limit has a binary of its own (`queue_token_pool.rs`): while it holds every
//! token, the queues of tests running beside it would go shared.

use std::thread;

use logbus::queue::{bounded, bounded_shared, unbounded, Protocol, TryRecvError};

#[test]
fn bounded_starts_owned_and_one_thread_per_side_keeps_it_so() {
    let (tx, rx) = bounded(4);
    assert_eq!(tx.protocol(), Protocol::Owned);
    let producer = thread::spawn(move || {
        for i in 0..1000 {
            tx.send(i).unwrap();
        }
        tx
    });
    for i in 0..1000 {
        assert_eq!(rx.recv(), Ok(i));
    }
    let tx = producer.join().unwrap();
    assert_eq!(tx.protocol(), Protocol::Owned);
    assert_eq!(rx.protocol(), Protocol::Owned);
}

#[test]
fn bounded_shared_is_shared_from_the_start_and_works_as_bounded() {
    let (tx, rx) = bounded_shared(2);
    assert_eq!(tx.protocol(), Protocol::Shared);
    assert_eq!(rx.protocol(), Protocol::Shared);
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    assert!(tx.try_send(3).is_err(), "capacity 2");
    assert_eq!(tx.capacity(), Some(2));
    let senders: Vec<_> = (0..4)
        .map(|p| {
            let tx = tx.clone();
            thread::spawn(move || {
                for i in 0..500 {
                    tx.send(10 + p * 1000 + i).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let mut got: Vec<i32> = rx.iter().collect();
    for s in senders {
        s.join().unwrap();
    }
    assert_eq!(got.len(), 2002);
    got.sort_unstable();
    got.dedup();
    assert_eq!(got.len(), 2002, "each message once");
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    // Capacity 0 is the rendezvous queue, shared as always.
    assert_eq!(bounded_shared::<u8>(0).0.protocol(), Protocol::Shared);
}

#[test]
fn unbounded_and_rendezvous_queues_report_shared() {
    assert_eq!(unbounded::<u8>().1.protocol(), Protocol::Shared);
    assert_eq!(bounded::<u8>(0).1.protocol(), Protocol::Shared);
}
