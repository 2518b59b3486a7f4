//! `select!` and `Select` over logbus queues: every flavour, both protocols of the bounded
//! one, timers, fairness, timeouts, disconnection while selecting, several selecting threads.

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use logbus::queue::{
    after, bounded, never, tick, unbounded, ReadyTimeoutError, RecvError, Select,
    SelectTimeoutError, SendError, TryReadyError, TrySelectError,
};
use logbus::select;

/// Rounds of the fairness tests: with two ready arms the share of one is 0.5 ± 0.0035 (one
/// standard deviation), so the 0.45–0.55 band below fails by chance with a probability
/// far below 1e-40; a select that always favours one position fails it every time.
const ROUNDS: usize = 20_000;

#[test]
fn receives_from_whichever_flavour_is_ready() {
    let (_t1, r1) = bounded::<u32>(2);
    let (t2, r2) = unbounded::<u32>();
    let (_t3, r3) = bounded::<u32>(0);
    t2.send(7).unwrap();
    let got = select! {
        recv(r1) -> _ => unreachable!("empty"),
        recv(r2) -> m => m,
        recv(r3) -> _ => unreachable!("no sender waiting"),
    };
    assert_eq!(got, Ok(7));
}

#[test]
fn default_runs_when_nothing_is_ready() {
    let (tx, rx) = bounded::<u32>(1);
    tx.send(1).unwrap();
    let ran = select! {
        send(tx, 2) -> _ => "send",
        recv(never::<u32>()) -> _ => "never",
        default => "default",
    };
    assert_eq!(ran, "default");
    assert_eq!(rx.try_recv(), Ok(1));
    // Empty `select!` with a default.
    let v = select! { default => 3 };
    assert_eq!(v, 3);
}

#[test]
fn default_with_timeout_waits_then_runs() {
    let (_tx, rx) = unbounded::<u32>();
    let start = Instant::now();
    let timed_out = select! {
        recv(rx) -> _ => false,
        default(Duration::from_millis(20)) => true,
    };
    assert!(timed_out);
    assert!(start.elapsed() >= Duration::from_millis(20));
}

#[test]
fn send_arms_send_and_report_disconnection() {
    let (tx, rx) = bounded::<String>(1);
    let res = select! {
        send(tx, "a".to_string()) -> res => res,
        default => panic!("room for one"),
    };
    assert_eq!(res, Ok(()));
    assert_eq!(rx.recv().unwrap(), "a");
    drop(rx);
    let res = select! {
        send(tx, "b".to_string()) -> res => res,
    };
    assert_eq!(res, Err(SendError("b".to_string())));
}

#[test]
fn recv_arms_report_disconnection() {
    let (tx, rx) = bounded::<u32>(4);
    tx.send(1).unwrap();
    drop(tx);
    let first = select! { recv(rx) -> m => m };
    let second = select! { recv(rx) -> m => m };
    assert_eq!((first, second), (Ok(1), Err(RecvError)));
}

#[test]
fn timers_as_arms() {
    let (_tx, rx) = bounded::<u32>(1);
    let start = Instant::now();
    let which = select! {
        recv(rx) -> _ => "queue",
        recv(never::<u32>()) -> _ => "never",
        recv(after(Duration::from_millis(10))) -> t => {
            assert!(t.unwrap() >= start + Duration::from_millis(10));
            "after"
        }
    };
    assert_eq!(which, "after");
    let ticker = tick(Duration::from_millis(2));
    let mut ticks = 0;
    while ticks < 3 {
        select! {
            recv(ticker) -> t => { t.unwrap(); ticks += 1; }
            recv(rx) -> _ => unreachable!(),
        }
    }
}

/// Counts how often each arm is chosen among `ready` of them, over [`ROUNDS`] rounds in
/// which every ready arm has a message, and checks each share lies in 0.45–0.55 of its
/// fair share's neighbourhood.
fn check_shares(counts: &[usize], ready: usize) {
    let total: usize = counts.iter().sum();
    assert_eq!(total, ROUNDS);
    for (i, &c) in counts.iter().enumerate().take(ready) {
        let share = c as f64 / ROUNDS as f64 * ready as f64 / 2.0;
        assert!(
            (0.45..=0.55).contains(&share),
            "arm {i} chosen {c} times of {ROUNDS} ({counts:?})"
        );
    }
}

#[test]
fn a_ready_arm_is_chosen_at_random_by_the_macro() {
    // Two ready arms and, between them, one that is never ready: a select that starts at
    // a random arm and goes round would pick the arm after the idle one twice as often.
    let (t1, r1) = bounded::<u32>(4);
    let (_t2, r2) = unbounded::<u32>();
    let (t3, r3) = unbounded::<u32>();
    t1.send(0).unwrap();
    t3.send(0).unwrap();
    let mut counts = [0usize; 2];
    for _ in 0..ROUNDS {
        select! {
            recv(r1) -> m => { counts[0] += 1; t1.send(m.unwrap()).unwrap(); }
            recv(r2) -> _ => unreachable!(),
            recv(r3) -> m => { counts[1] += 1; t3.send(m.unwrap()).unwrap(); }
        }
    }
    check_shares(&counts, 2);
}

#[test]
fn a_ready_arm_is_chosen_at_random_by_select() {
    let (t1, r1) = unbounded::<u32>();
    let (t2, r2) = bounded::<u32>(1);
    let (t3, _r3) = bounded::<u32>(1);
    t3.send(0).unwrap(); // full: its send arm is never ready
    t1.send(0).unwrap();
    t2.send(0).unwrap();
    let mut sel = Select::new();
    let a = sel.recv(&r1);
    let idle = sel.send(&t3);
    let b = sel.recv(&r2);
    let mut counts = [0usize; 2];
    for _ in 0..ROUNDS {
        let oper = sel.select();
        match oper.index() {
            i if i == a => {
                counts[0] += 1;
                t1.send(oper.recv(&r1).unwrap()).unwrap();
            }
            i if i == b => {
                counts[1] += 1;
                t2.send(oper.recv(&r2).unwrap()).unwrap();
            }
            i => panic!("arm {i} (idle {idle}) was not ready"),
        }
    }
    check_shares(&counts, 2);
}

#[test]
fn send_arms_are_chosen_at_random_too() {
    let (t1, r1) = unbounded::<u8>();
    let (t2, r2) = bounded::<u8>(8);
    let mut counts = [0usize; 2];
    for _ in 0..ROUNDS {
        select! {
            send(t1, 1) -> res => { res.unwrap(); counts[0] += 1; r1.recv().unwrap(); }
            send(t2, 2) -> res => { res.unwrap(); counts[1] += 1; r2.recv().unwrap(); }
        }
    }
    check_shares(&counts, 2);
}

#[test]
fn a_parked_select_wakes_for_each_flavour() {
    // Bounded (owned by the sending thread), unbounded, rendezvous: a message sent after
    // the select has parked wakes it.
    for flavour in 0..3 {
        let (tb, rb) = bounded::<u32>(4);
        let (tu, ru) = unbounded::<u32>();
        let (tz, rz) = bounded::<u32>(0);
        let sender = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            match flavour {
                0 => tb.send(10).unwrap(),
                1 => tu.send(11).unwrap(),
                _ => tz.send(12).unwrap(),
            }
            (tb, tu, tz)
        });
        let got = select! {
            recv(rb) -> m => m.unwrap(),
            recv(ru) -> m => m.unwrap(),
            recv(rz) -> m => m.unwrap(),
        };
        assert_eq!(got, 10 + flavour);
        drop(sender.join().unwrap());
    }
}

#[test]
fn a_parked_send_arm_wakes_when_room_appears() {
    let (tx, rx) = bounded::<u32>(1);
    tx.send(1).unwrap();
    let receiver = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        let first = rx.recv().unwrap();
        let second = rx.recv().unwrap();
        (first, second)
    });
    select! {
        send(tx, 2) -> res => res.unwrap(),
        recv(never::<()>()) -> _ => unreachable!(),
    }
    assert_eq!(receiver.join().unwrap(), (1, 2));
}

#[test]
fn disconnection_wakes_a_parked_select() {
    for flavour in 0..3 {
        let (tb, rb) = bounded::<u32>(4);
        let (tu, ru) = unbounded::<u32>();
        let (tz, rz) = bounded::<u32>(0);
        // The senders of the other two queues stay alive here; the one whose queue this
        // round disconnects goes to the other thread, which drops it.
        let (tb, tu, tz) = (Some(tb), Some(tu), Some(tz));
        let (mut tb, mut tu, mut tz) = (tb, tu, tz);
        let doomed: Box<dyn std::any::Any + Send> = match flavour {
            0 => Box::new(tb.take()),
            1 => Box::new(tu.take()),
            _ => Box::new(tz.take()),
        };
        let dropper = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            drop(doomed);
        });
        let which = select! {
            recv(rb) -> m => { assert_eq!(m, Err(RecvError)); 0 }
            recv(ru) -> m => { assert_eq!(m, Err(RecvError)); 1 }
            recv(rz) -> m => { assert_eq!(m, Err(RecvError)); 2 }
        };
        assert_eq!(which, flavour);
        dropper.join().unwrap();
        drop((tb, tu, tz));
    }
}

#[test]
fn rendezvous_between_a_select_and_a_blocking_peer() {
    let (tx, rx) = bounded::<u32>(0);
    let receiver = thread::spawn(move || rx.recv().unwrap());
    select! {
        send(tx, 5) -> res => res.unwrap(),
    }
    assert_eq!(receiver.join().unwrap(), 5);

    let (tx, rx) = bounded::<u32>(0);
    let sender = thread::spawn(move || tx.send(6).unwrap());
    let got = select! { recv(rx) -> m => m.unwrap() };
    assert_eq!(got, 6);
    sender.join().unwrap();
}

/// Sends `0..n` on `tx` and receives `n` messages from `rx`, selecting over both while
/// both have work left.
fn exchange(
    tx: logbus::queue::Sender<usize>,
    rx: logbus::queue::Receiver<usize>,
    n: usize,
) -> Vec<usize> {
    let mut got = Vec::new();
    let mut sent = 0;
    while got.len() < n || sent < n {
        if sent == n {
            got.push(rx.recv().unwrap());
        } else if got.len() == n {
            tx.send(sent).unwrap();
            sent += 1;
        } else {
            select! {
                recv(rx) -> m => got.push(m.unwrap()),
                send(tx, sent) -> res => { res.unwrap(); sent += 1; }
            }
        }
    }
    got
}

#[test]
fn a_parked_rendezvous_send_arm_is_found_by_try_recv() {
    // A blocking select whose only ready-able arm is a rendezvous send parks as a blocking
    // `send` would: with its message where a receiver's `try_recv` finds it. (Found by
    // crossbeam-channel's own `try_recv` select test: the select used to wait for a
    // receiver to be parked in `recv`, so `try_recv` never saw its message.)
    let (tx, rx) = bounded::<u32>(0);
    let sender = thread::spawn(move || {
        select! {
            send(tx, 7) -> res => res.unwrap(),
            recv(never::<u32>()) -> _ => unreachable!(),
        }
    });
    // Poll without ever waiting in `recv` (which would let the select send the usual
    // way); give up after ~10 s of polling, long after the select has parked.
    let mut got = None;
    for _ in 0..10_000 {
        if let Ok(v) = rx.try_recv() {
            got = Some(v);
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        got,
        Some(7),
        "try_recv never saw the parked select's message"
    );
    sender.join().unwrap();
}

#[test]
fn two_selects_meet_on_a_rendezvous_queue() {
    // Both sides select (neither waits in `send` or `recv` while the other has work), in
    // both directions at once: each select's receive arm must meet the other's send arm.
    let n = if cfg!(miri) { 10 } else { 2_000 };
    let (ab_tx, ab_rx) = bounded::<usize>(0);
    let (ba_tx, ba_rx) = bounded::<usize>(0);
    let other = thread::spawn(move || exchange(ba_tx, ab_rx, n));
    let got = exchange(ab_tx, ba_rx, n);
    let theirs = other.join().unwrap();
    assert_eq!(got, (0..n).collect::<Vec<_>>());
    assert_eq!(theirs, (0..n).collect::<Vec<_>>());
}

#[test]
fn several_threads_select_over_the_same_queues() {
    // Two producers send into a bounded (capacity 8) and an unbounded queue; four threads
    // select over both at once: every message arrives exactly once, each producer's in
    // order within each selecting thread.
    let per = if cfg!(miri) { 50 } else { 20_000 };
    let (tb, rb) = bounded::<usize>(8);
    let (tu, ru) = unbounded::<usize>();
    let start = Arc::new(Barrier::new(6));
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let (tb, tu, start) = (tb.clone(), tu.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for i in 0..per {
                    let m = p * per + i;
                    if i % 2 == 0 {
                        tb.send(m).unwrap();
                    } else {
                        tu.send(m).unwrap();
                    }
                }
            })
        })
        .collect();
    drop((tb, tu));
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            let (rb, ru, start) = (rb.clone(), ru.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let mut got = Vec::new();
                let (mut b_open, mut u_open) = (true, true);
                while b_open || u_open {
                    let mut sel = Select::new();
                    let ib = b_open.then(|| sel.recv(&rb));
                    let iu = u_open.then(|| sel.recv(&ru));
                    let oper = sel.select();
                    if Some(oper.index()) == ib {
                        match oper.recv(&rb) {
                            Ok(m) => got.push(m),
                            Err(RecvError) => b_open = false,
                        }
                    } else if Some(oper.index()) == iu {
                        match oper.recv(&ru) {
                            Ok(m) => got.push(m),
                            Err(RecvError) => u_open = false,
                        }
                    }
                }
                got
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let mut all = HashSet::new();
    for c in consumers {
        let got = c.join().unwrap();
        // Within one consumer, each producer's messages through one queue keep their order.
        for p in 0..2 {
            for parity in 0..2 {
                let mine: Vec<_> = got
                    .iter()
                    .filter(|&&m| m / per == p && (m % per) % 2 == parity)
                    .collect();
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "order within a queue");
            }
        }
        for m in got {
            assert!(all.insert(m), "{m} received twice");
        }
    }
    assert_eq!(all.len(), 2 * per);
}

#[test]
fn owned_and_shared_bounded_queues_under_select() {
    // One producer thread: the queue runs the owned protocol on its side, and the select
    // thread takes the receiving side. Then a second producer joins (a change of owner, or
    // the shared protocol), and the select still sees every message once, in order per
    // producer.
    let n = if cfg!(miri) { 50 } else { 20_000 };
    let (tx, rx) = bounded::<(u8, usize)>(4);
    let tx2 = tx.clone();
    let first = thread::spawn(move || {
        for i in 0..n {
            tx.send((0, i)).unwrap();
        }
    });
    let mut next = [0usize; 2];
    let mut second = None;
    let mut tx2 = Some(tx2);
    while next != [n, n] {
        if next[0] == n / 2 {
            if let Some(tx2) = tx2.take() {
                second = Some(thread::spawn(move || {
                    for i in 0..n {
                        tx2.send((1, i)).unwrap();
                    }
                }));
            }
        }
        let (p, i) = select! {
            recv(rx) -> m => m.unwrap(),
            recv(never::<(u8, usize)>()) -> _ => unreachable!(),
        };
        assert_eq!(next[p as usize], i, "producer {p} out of order");
        next[p as usize] += 1;
        if next[0] == n && tx2.is_some() {
            // The first producer finished before the second one was started.
            let tx2 = tx2.take().unwrap();
            second = Some(thread::spawn(move || {
                for i in 0..n {
                    tx2.send((1, i)).unwrap();
                }
            }));
        }
    }
    first.join().unwrap();
    second.unwrap().join().unwrap();
}

#[test]
fn select_api_errors_timeouts_and_remove() {
    let (tx, rx) = bounded::<u32>(1);
    let mut sel = Select::new();
    let r = sel.recv(&rx);
    assert_eq!(sel.try_select().err(), Some(TrySelectError));
    assert_eq!(sel.try_ready(), Err(TryReadyError));
    assert_eq!(
        sel.select_timeout(Duration::from_millis(5)).err(),
        Some(SelectTimeoutError)
    );
    assert_eq!(
        sel.ready_timeout(Duration::from_millis(5)),
        Err(ReadyTimeoutError)
    );
    let s = sel.send(&tx);
    assert_eq!(sel.ready(), s);
    let oper = sel.select();
    assert_eq!(oper.index(), s);
    oper.send(&tx, 9).unwrap();
    // `ready` does not take the message.
    sel.remove(s);
    assert_eq!(sel.ready(), r);
    assert_eq!(sel.ready(), r);
    let oper = sel.try_select().unwrap();
    assert_eq!(oper.index(), r);
    assert_eq!(oper.recv(&rx), Ok(9));
    assert!(sel
        .select_deadline(Instant::now() + Duration::from_millis(2))
        .is_err());
    assert_eq!(
        TrySelectError.to_string(),
        "all operations in select would block"
    );
    assert_eq!(
        SelectTimeoutError.to_string(),
        "timed out waiting on select"
    );
    assert_eq!(
        TryReadyError.to_string(),
        "all operations in select would block"
    );
    assert_eq!(ReadyTimeoutError.to_string(), "timed out waiting on ready");
}

#[test]
fn a_select_with_default_never_misses_a_message_moving_between_queues() {
    // One thread sends into `q1` and then selects (with a default) over `q1` and `q2`;
    // meanwhile the other sends into `q2` and then takes `q1`'s message. At every instant
    // one of the two queues holds a message, so the default must never run. With a single
    // look at each arm it could: `q2` looked at before the other thread's send, `q1` after
    // its take. Rendezvous queues pace the rounds.
    let rounds = if cfg!(miri) { 50 } else { 20_000 };
    for unbounded_queues in [false, true] {
        let ((s1, r1), (s2, r2)) = if unbounded_queues {
            (unbounded::<u32>(), unbounded::<u32>())
        } else {
            (bounded::<u32>(1), bounded::<u32>(1))
        };
        let (start_tx, start_rx) = bounded::<()>(0);
        let (end_tx, end_rx) = bounded::<()>(0);
        let (r1_mine, r2_mine) = (r1.clone(), r2.clone());
        let selector = thread::spawn(move || {
            let (r1, r2) = (r1_mine, r2_mine);
            let mut defaults = 0;
            for _ in 0..rounds {
                start_tx.send(()).unwrap();
                s1.send(1).unwrap();
                select! {
                    recv(r1) -> _ => {}
                    recv(r2) -> _ => {}
                    default => defaults += 1,
                }
                end_tx.send(()).unwrap();
                let _ = r2.try_recv();
            }
            defaults
        });
        for _ in 0..rounds {
            start_rx.recv().unwrap();
            s2.send(1).unwrap();
            let _ = r1.try_recv();
            end_rx.recv().unwrap();
        }
        assert_eq!(
            selector.join().unwrap(),
            0,
            "the default ran with a message queued"
        );
    }
}

/// A send arm builds its message only when its send could complete: while the queue is
/// full the expression is never evaluated (crossbeam evaluates it once the arm is chosen).
#[test]
fn a_send_arm_builds_its_message_only_when_it_could_send() {
    let (tx, rx) = bounded::<u32>(1);
    tx.send(1).unwrap();
    let built = std::cell::Cell::new(0);
    let make = || {
        built.set(built.get() + 1);
        2
    };
    let ran_default = select! {
        send(tx, make()) -> _ => false,
        default => true,
    };
    assert!(ran_default);
    let timed_out = select! {
        send(tx, make()) -> _ => false,
        default(Duration::from_millis(20)) => true,
    };
    assert!(timed_out);
    assert_eq!(built.get(), 0);
    // Room appears while the select waits: the message is built once, and sent.
    let freer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        let first = rx.recv().unwrap();
        (first, rx.recv().unwrap())
    });
    select! {
        send(tx, make()) -> res => res.unwrap(),
    }
    assert_eq!(built.get(), 1);
    assert_eq!(freer.join().unwrap(), (1, 2));
    // A disconnected queue could "complete" the send (with an error): built, and handed back.
    let res = select! {
        send(tx, make()) -> res => res,
    };
    assert_eq!((res, built.get()), (Err(SendError(2)), 2));
}
