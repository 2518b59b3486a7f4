//! `select_biased!` and `Select::new_biased`: among ready operations the first one in the
//! order written (added) is chosen, every time; waiting, timeouts and disconnection behave
//! as in the unbiased forms.

use std::thread;
use std::time::Duration;

use logbus::queue::{
    bounded, never, unbounded, Receiver, RecvError, Select, SelectTimeoutError, SendError, Sender,
    TryReadyError, TrySelectError,
};
use logbus::select_biased;

const ROUNDS: usize = 2_000;

type Pair = (Sender<usize>, Receiver<usize>);

/// Three queues: the first two hold `ROUNDS` messages each, the third one. The senders are
/// returned too: a queue whose senders are gone is ready (disconnected) once empty.
fn three_loaded() -> [Pair; 3] {
    let (t1, r1) = unbounded();
    let (t2, r2) = unbounded();
    let (t3, r3) = unbounded();
    for i in 0..ROUNDS {
        t1.send(i).unwrap();
        t2.send(i).unwrap();
    }
    t3.send(0).unwrap();
    [(t1, r1), (t2, r2), (t3, r3)]
}

#[test]
fn the_macro_takes_the_first_ready_arm_every_time() {
    let [(_t1, r1), (_t2, r2), (_t3, r3)] = three_loaded();
    let mut hits = [0usize; 3];
    for _ in 0..ROUNDS {
        select_biased! {
            recv(r1) -> _ => hits[0] += 1,
            recv(r2) -> _ => hits[1] += 1,
            recv(r3) -> _ => hits[2] += 1,
        }
    }
    assert_eq!(hits, [ROUNDS, 0, 0]);
    // The first queue is empty now: the second arm is the first ready one.
    for _ in 0..ROUNDS {
        select_biased! {
            recv(r1) -> _ => hits[0] += 1,
            recv(r2) -> _ => hits[1] += 1,
            recv(r3) -> _ => hits[2] += 1,
            default(Duration::from_secs(10)) => unreachable!("two arms are ready"),
        }
    }
    assert_eq!(hits, [ROUNDS, ROUNDS, 0]);
    let last = select_biased! {
        recv(r1) -> _ => 0,
        recv(r2) -> _ => 1,
        recv(r3) -> m => { assert_eq!(m, Ok(0)); 2 }
        default => unreachable!("the third arm is ready"),
    };
    assert_eq!(last, 2);
    let nothing = select_biased! {
        recv(r1) -> _ => false,
        recv(r2) -> _ => false,
        recv(r3) -> _ => false,
        default => true,
    };
    assert!(nothing);
}

#[test]
fn send_arms_are_biased_too() {
    let (t1, r1) = unbounded::<u8>();
    let (t2, r2) = bounded::<u8>(ROUNDS);
    for _ in 0..ROUNDS {
        select_biased! {
            send(t2, 2) -> res => res.unwrap(),
            send(t1, 1) -> res => res.unwrap(),
        }
    }
    assert_eq!((r1.len(), r2.len()), (0, ROUNDS));
    // `t2`'s queue is full: the send falls to the next arm.
    select_biased! {
        send(t2, 2) -> _ => unreachable!("full"),
        send(t1, 1) -> res => res.unwrap(),
    }
    assert_eq!(r1.try_recv(), Ok(1));
    drop(r2);
    let res = select_biased! {
        send(t2, 2) -> res => res,
        send(t1, 1) -> _ => unreachable!("a disconnected arm is ready and comes first"),
    };
    assert_eq!(res, Err(SendError(2)));
}

#[test]
fn a_biased_select_parks_and_wakes_for_any_arm() {
    let (t1, r1) = bounded::<u32>(1);
    let (t2, r2) = unbounded::<u32>();
    let sender = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        t2.send(9).unwrap();
        t1
    });
    let got = select_biased! {
        recv(r1) -> _ => unreachable!("nothing is sent on the first queue"),
        recv(never::<u32>()) -> _ => unreachable!("never"),
        recv(r2) -> m => m,
    };
    assert_eq!(got, Ok(9));
    drop(sender.join().unwrap());
    let got = select_biased! {
        recv(r1) -> m => m,
        recv(r2) -> _ => unreachable!("the first arm is disconnected, so it is ready"),
    };
    assert_eq!(got, Err(RecvError));
}

#[test]
fn new_biased_chooses_the_first_added_in_every_form() {
    let [(_t1, r1), (_t2, r2), (_t3, r3)] = three_loaded();
    let mut sel = Select::new_biased();
    let a = sel.recv(&r1);
    let b = sel.recv(&r2);
    let c = sel.recv(&r3);
    for round in 0..ROUNDS {
        let op = match round % 3 {
            0 => sel.select(),
            1 => sel.try_select().unwrap(),
            _ => sel.select_timeout(Duration::from_secs(10)).unwrap(),
        };
        assert_eq!(op.index(), a);
        assert_eq!(op.recv(&r1), Ok(round));
    }
    // `ready` performs nothing: asked twice, it names the same first ready operation.
    assert_eq!(sel.ready(), b);
    assert_eq!(sel.try_ready(), Ok(b));
    assert_eq!(sel.ready_timeout(Duration::from_secs(10)), Ok(b));
    assert_eq!(r2.len(), ROUNDS);
    sel.remove(b);
    assert_eq!(sel.ready(), c);
    let op = sel.select();
    assert_eq!((op.index(), op.recv(&r3)), (c, Ok(0)));
    assert_eq!(sel.try_select().err(), Some(TrySelectError));
    assert_eq!(sel.try_ready(), Err(TryReadyError));
    assert_eq!(
        sel.select_timeout(Duration::from_millis(5)).err(),
        Some(SelectTimeoutError)
    );
}

#[test]
fn an_unbiased_select_stays_fair_beside_a_biased_one() {
    // The bias belongs to one select: the same queues under `Select::new` still see both
    // ready arms chosen.
    let [(_t1, r1), (_t2, r2), _] = three_loaded();
    let mut sel = Select::new();
    let a = sel.recv(&r1);
    sel.recv(&r2);
    let mut first = 0;
    for _ in 0..ROUNDS {
        let op = sel.select();
        if op.index() == a {
            first += 1;
            op.recv(&r1).unwrap();
        } else {
            op.recv(&r2).unwrap();
        }
        if r1.is_empty() || r2.is_empty() {
            break;
        }
    }
    // Each arm is chosen with probability 1/2 per round: 0 or all of ~2,000 is beyond chance.
    assert!(first > 0 && first < ROUNDS, "{first}");
}
