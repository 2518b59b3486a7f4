//! The 64-token limit of the owned protocol (`logbus::queue::protocol`). Alone in its
//! binary: while it holds every token, any other test's queues would go shared.

use std::sync::{Arc, Barrier};
use std::thread;

use logbus::queue::{bounded, Protocol, TryRecvError};

/// While 64 live threads hold the pool's tokens (each used some queue), a further thread
/// cannot own: its first operation makes a fresh bounded queue shared. Once they exit, a
/// new thread owns again.
#[test]
fn a_thread_beyond_the_64_tokens_makes_the_queue_it_uses_shared() {
    const POOL: usize = 64;
    let hold = Arc::new(Barrier::new(POOL + 1));
    let holders: Vec<_> = (0..POOL)
        .map(|_| {
            let hold = Arc::clone(&hold);
            thread::spawn(move || {
                // Any queue operation takes a token.
                let (_tx, rx) = bounded::<u8>(1);
                assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
                hold.wait(); // every holder has its token
                hold.wait(); // the check below is done
            })
        })
        .collect();
    hold.wait();
    let beyond = fresh_queue_in_a_new_thread();
    hold.wait();
    for h in holders {
        h.join().unwrap();
    }
    assert_eq!(beyond, Protocol::Shared, "no token left: shared");
    let after = fresh_queue_in_a_new_thread();
    assert_eq!(after, Protocol::Owned, "tokens given back: owned again");
}

/// The protocol of a fresh bounded queue after a new thread sent and received one message.
fn fresh_queue_in_a_new_thread() -> Protocol {
    thread::spawn(|| {
        let (tx, rx) = bounded::<u8>(4);
        tx.send(1).unwrap();
        assert_eq!(rx.recv(), Ok(1));
        tx.protocol()
    })
    .join()
    .unwrap()
}
