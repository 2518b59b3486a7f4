//! Loom models of the replication paths that race: HW advance against a follower's fetch
//! and a consumer's read, and an ISR shrink against an `acks = all` wait. RF 2, at most 3
//! threads.

use std::time::Duration;

use super::events::Events;
use super::runtime::fetch_step;
use super::set::{ReplicaSet, ReplicationConfig, Wake};
use crate::clock::{Clock, ManualClock};
use crate::partition::{Acks, AppendError, Entry, ReadOutcome, ReplicatedLog, SendPolicy};
use crate::sync::atomic::Ordering;
use crate::sync::loom_model as model;
use crate::sync::thread;
use crate::sync::StdArc as Arc;
use crate::sync::WaitSet;

type Set = ReplicaSet<(), u64>;

fn set(min_insync: usize, clock: Arc<ManualClock>) -> Arc<Set> {
    set_of(2, min_insync, clock)
}

fn set_of(replicas: u32, min_insync: usize, clock: Arc<ManualClock>) -> Arc<Set> {
    let wakes = (0..replicas).map(|_| Arc::new(Wake::default())).collect();
    set_woken_by(wakes, min_insync, clock)
}

/// A partition whose replica `i` lives on directory `i`, its fetcher woken by `wakes[i]`.
fn set_woken_by(wakes: Vec<Arc<Wake>>, min_insync: usize, clock: Arc<ManualClock>) -> Arc<Set> {
    set_with(wakes, min_insync, false, clock)
}

fn set_with(
    wakes: Vec<Arc<Wake>>,
    min_insync: usize,
    unclean: bool,
    clock: Arc<ManualClock>,
) -> Arc<Set> {
    let ids: Vec<u32> = (0..wakes.len() as u32).collect();
    Arc::new(ReplicaSet::new(
        Arc::from("t"),
        0,
        ReplicationConfig {
            min_insync,
            unclean,
            lag_max_ms: 1000,
            producer_expiration_ms: i64::MAX,
            capacity: 8,
        },
        &ids,
        wakes,
        Arc::new(WaitSet::new()),
        clock as Arc<dyn Clock>,
        Arc::new(Events::default()),
        |e: &Entry<(), u64>| Some(e.clone()),
        Default::default(),
    ))
}

fn entry(v: u64) -> Entry<(), u64> {
    Entry::plain(0, v)
}

/// No retries, no deadlines (loom models no time).
fn policy(acks: Acks) -> SendPolicy {
    SendPolicy {
        acks,
        retries: 0,
        delivery_timeout: Duration::MAX,
        request_timeout: Duration::MAX,
        counters: Arc::default(),
        producer: None,
        compression: crate::storage::record_batch::Compression::None,
    }
}

/// The leader appends two records (`acks = 1`), the follower fetches (at most twice, no
/// spinning), a consumer reads below HW twice: everything it reads is, at that moment, on
/// every in-sync replica, in order from offset 0. Key ordering: the follower appends a
/// fetched batch to its own log *before* it reports its new log end (`ReplicaSet::fetch`,
/// step 2); reporting the end at copy time (step 1) lets HW cover records the follower does
/// not hold, and this model fails at `assert_hw_is_replicated`.
#[test]
fn hw_advance_races_fetch_and_read() {
    model(|| {
        let clock = Arc::new(ManualClock::new(0));
        let s = set(1, clock);
        let producer = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                for v in 0..2 {
                    assert_eq!(
                        s.append(entry(v), &policy(Acks::Leader), None).ok(),
                        Some(v)
                    );
                }
            })
        };
        let follower = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                s.fetch(1);
                s.fetch(1);
            })
        };
        let mut next = 0;
        for _ in 0..2 {
            let mut got = Vec::new();
            match s.read(next, 2, &mut |o, e| got.push((o, *e.value()))) {
                ReadOutcome::Read(n) => {
                    s.assert_hw_is_replicated();
                    for (i, (o, v)) in got.into_iter().enumerate() {
                        assert_eq!((o, v), (next + i as u64, next + i as u64));
                    }
                    next += n as u64;
                }
                ReadOutcome::Empty => {}
                other => panic!("{other:?}"),
            }
        }
        producer.join().unwrap();
        follower.join().unwrap();
        s.assert_hw_is_replicated();
    });
}

/// An `acks = all` send (min ISR 2) waits (no deadline) while the follower fetches (at
/// most twice) and the controller (the main thread) may expire it from the ISR; the main
/// thread then closes the partition so that no interleaving leaves the send waiting. The
/// send succeeds only with the record on both replicas; otherwise it reports
/// `NotEnoughReplicasAfterAppend` (the shrink let HW pass it with the leader alone),
/// `NotEnoughReplicas` (refused before the append) or `Closed`; a lost wake-up would show as
/// a deadlock. Key ordering: the waiter reads HW and the ISR size in one critical section
/// (`await_acks`); reading the ISR size once before waiting and trusting it when HW passes
/// the record acknowledges a record held by the leader alone, and this model fails at the
/// `Ok` branch's assertion.
#[test]
fn isr_shrink_races_an_acks_all_wait() {
    model(|| {
        let clock = Arc::new(ManualClock::new(0));
        let s = set(2, Arc::clone(&clock));
        // The follower was last caught up at 0: by 5 s it is out of sync if behind.
        clock.advance(Duration::from_secs(5));
        let follower = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                s.fetch(1);
                s.fetch(1);
            })
        };
        let producer = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let sent = s.append(entry(7), &policy(Acks::All), None);
                match sent {
                    Ok(0) => {
                        let d = s.describe();
                        assert!(
                            d.replicas[1].log_end >= 1,
                            "acknowledged on the leader alone"
                        );
                    }
                    Err((_, AppendError::NotEnoughReplicasAfterAppend(1, 2))) => {}
                    Err((_, AppendError::Closed)) => {}
                    Err((_, AppendError::NotEnoughReplicas(1, 2))) => {
                        assert_eq!(s.describe().replicas[0].log_end, 0, "refused, not appended")
                    }
                    other => panic!("{:?}", other.map_err(|e| e.1)),
                }
            })
        };
        s.check_isr(clock.now_ms());
        follower.join().unwrap();
        s.close();
        producer.join().unwrap();
    });
}

/// As `hw_advance_races_fetch_and_read` with RF 3: two followers fetch concurrently (4
/// threads); HW is the lower of their log ends, so what the consumer reads is on both.
#[test]
fn hw_is_the_minimum_over_two_concurrent_followers() {
    model(|| {
        let s = set_of(3, 1, Arc::new(ManualClock::new(0)));
        let producer = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                assert_eq!(
                    s.append(entry(0), &policy(Acks::Leader), None).ok(),
                    Some(0)
                );
            })
        };
        let followers: Vec<_> = (1..3)
            .map(|id| {
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    s.fetch(id);
                })
            })
            .collect();
        let mut got = None;
        if let ReadOutcome::Read(1) = s.read(0, 1, &mut |_, e| got = Some(*e.value())) {
            s.assert_hw_is_replicated();
            assert_eq!(got, Some(0));
        }
        producer.join().unwrap();
        for f in followers {
            f.join().unwrap();
        }
        s.assert_hw_is_replicated();
    });
}

/// A follower parked between fetches is woken for every record it lacks: the leader
/// appends three records (`acks = 1`; each append wakes the follower with `Wake::nudge`,
/// which skips the wake while one is pending), and the follower (the main thread) runs the
/// fetcher's steps (`runtime::fetch_step`: a busy fetcher leaves `pending` set between
/// rounds), parking without a deadline whenever a step copies nothing, until it holds all
/// three. A lost wake-up shows as a deadlock. Key ordering: `fetch_round` clears `pending`
/// before it fetches; clearing it after the fetches lets an append fall between a fetch
/// and the clear with its nudge skipped, and this model deadlocks.
#[test]
fn a_nudged_follower_never_sleeps_on_records_it_lacks() {
    model(|| {
        let wakes: Vec<Arc<Wake>> = (0..2).map(|_| Arc::new(Wake::default())).collect();
        let s = set_woken_by(wakes.clone(), 1, Arc::new(ManualClock::new(0)));
        let producer = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                for v in 0..3 {
                    assert!(s.append(entry(v), &policy(Acks::Leader), None).is_ok());
                }
            })
        };
        let sets = [Arc::clone(&s)];
        let wake = &wakes[1];
        let mut busy = false;
        while s.describe().replicas[1].log_end < 3 {
            if !fetch_step(&sets, 1, wake, &mut busy) {
                // Relaxed: read after the WaitSet's SeqCst fence (see `Wake::wake`).
                wake.set
                    .wait_until(None, || wake.pending.load(Ordering::Relaxed).then_some(()));
            }
        }
        producer.join().unwrap();
    });
}

/// The lock-free acknowledged check (`acked_now`, the fast path of `PendingSend::wait`) racing
/// an unclean election: epoch 0 acknowledged offsets 0 and 1 on the leader alone (the
/// follower crashed), then the leader crashes and the empty follower leads epoch 1, where
/// nothing is acknowledged. Whatever the check answers must be what the lock says. Key
/// orderings: `acked_now` reads the epoch before `acked` (Acquire) and again after, and
/// `mirror_epoch` stores `acked` before the epoch; dropping the first read, making it
/// Relaxed, or storing the epoch first each lets the check pair epoch 0's `acked` (2) with
/// epoch 1 and acknowledge offset 0 of epoch 1, and this model fails at the assertion.
#[test]
fn lock_free_ack_check_races_an_election() {
    model(|| {
        let wakes = (0..2).map(|_| Arc::new(Wake::default())).collect();
        let s = set_with(wakes, 1, true, Arc::new(ManualClock::new(0)));
        s.crash(1, None, false);
        for v in 0..2 {
            assert!(s.append(entry(v), &policy(Acks::Leader), None).is_ok());
        }
        let checker = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                for (epoch, last) in [(1, 0), (0, 1)] {
                    if s.acked_now(epoch, last) {
                        assert!(
                            s.acked_locked(epoch, last),
                            "({epoch}, {last}) was not acked"
                        );
                    }
                }
            })
        };
        s.crash(0, None, false);
        s.restart(1, false);
        checker.join().unwrap();
        assert_eq!(s.describe().leader_epoch, 1);
        assert!(!s.acked_locked(1, 0));
    });
}

/// A sender waiting under `acks = all` fetches for the follower itself (both fetch steps
/// under the lock it holds) while the follower's fetcher (the main thread) fetches too,
/// releasing the lock between its steps: the record is copied once, and the wait returns
/// only once the follower holds it. The send is pipelined (`begin` on the main thread,
/// then the producer's `finish` waits):
/// a blocking send appends and helps in one critical section, so no fetch can start
/// between them, but a pipelined one releases the lock after the append. Key ordering: a
/// fetch appends its batch only if the follower's log still ends where the batch starts
/// (`fetch_append`); without that check the fetcher's copy lands after the sender's, and
/// this model fails at the log-end assertion.
#[test]
fn a_helping_sender_and_the_fetcher_copy_each_record_once() {
    model(|| {
        let s = set(2, Arc::new(ManualClock::new(0)));
        let sent = s.begin(entry(7), &policy(Acks::All)).ok().unwrap();
        let producer = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                assert_eq!(s.finish(sent, &policy(Acks::All)).ok(), Some(0));
                assert!(
                    s.describe().replicas[1].log_end >= 1,
                    "acknowledged too early"
                );
            })
        };
        s.fetch(1);
        producer.join().unwrap();
        s.assert_hw_is_replicated();
        assert_eq!(s.describe().replicas[1].log_end, 1, "copied twice");
    });
}

/// Two blocking `acks = all` senders (min ISR 2) race for the partition: one may find the
/// lock held and queue its record for the holder (`set::combine`), which appends it with its
/// own and copies both for the follower; the spawned thread then sends again, and may
/// hand that send to the main thread (delegation is on once a queued send was served)
/// while the lock is free. Each record is appended exactly once, every send is acknowledged at
/// its own offset, and both logs hold all three records. Key check: a sender that takes
/// the lock after queueing looks at whether the holder appended its record already
/// (`Queued::done`, read under the lock) before it appends it itself; without that look a
/// served record is appended a second time, and this model fails at the log-end assertion.
#[test]
fn combined_sends_are_appended_once() {
    model(|| {
        let s = set(2, Arc::new(ManualClock::new(0)));
        let other = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let first = s.append(entry(1), &policy(Acks::All), None).ok();
                (first, s.append(entry(2), &policy(Acks::All), None).ok())
            })
        };
        let mine = s.append(entry(0), &policy(Acks::All), None).ok();
        let (first, second) = other.join().unwrap();
        let (Some(a), Some(b), Some(c)) = (mine, first, second) else {
            panic!("a send failed: {mine:?} {first:?} {second:?}");
        };
        assert!(a != b && b != c && a != c, "two sends at one offset");
        let d = s.describe();
        assert_eq!(d.replicas[0].log_end, 3, "appended twice");
        assert_eq!(d.high_watermark, 3);
        s.assert_hw_is_replicated();
    });
}
