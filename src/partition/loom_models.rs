//! loom models of the partition's append, read, commit-gating and drop-oldest paths.

use super::*;
use crate::sync::loom_model as model;
use crate::sync::thread;

/// Loom's `Arc`: a value dropped twice or never fails the model.
type Value = crate::sync::Arc<u64>;

/// A partition of `capacity` records, gated by its groups or not.
fn partition_of<K, V>(capacity: usize, gated: bool) -> Arc<Partition<K, V>> {
    let config = PartitionConfig {
        capacity,
        gated,
        retention_ms: None,
    };
    Arc::new(Partition::new(config, Arc::new(WaitSet::new())).unwrap())
}

fn partition(gated: bool) -> Arc<Partition<(), Value>> {
    partition_of(2, gated)
}

/// A gated partition and the one group gating it (`"g"`, from offset 0).
fn gated_by_group() -> (Arc<Partition<(), Value>>, Arc<str>) {
    let (p, group, _) = with_group_g(2, true);
    (p, group)
}

fn entry(v: u64) -> Entry<(), Value> {
    Entry::plain(v as i64, crate::sync::Arc::new(v))
}

fn append(a: &mut Appender<(), Value>, v: u64, wait: AppendWait) -> u64 {
    a.append(entry(v), wait).map_err(|(_, e)| e).unwrap()
}

/// Reads `offset` until it is published: `Some(value)`, or `None` if it is out of range.
fn read_at(p: &Partition<(), Value>, offset: u64) -> Option<u64> {
    loop {
        let mut got = None;
        match p.read(offset, 1, 0, None, |_, e| got = Some(**e.entry().value())) {
            ReadOutcome::Read(1) => return got,
            ReadOutcome::OutOfRange { .. } => return None,
            _ => thread::yield_now(),
        }
    }
}

/// Append and read: two appenders race for the partition's one ring producer (its lock);
/// a reader sees each offset's record exactly once, with the value its appender was told
/// it got. Key ordering: the Release store of a slot's tag after the write (`slot::write`)
/// against the reader's Acquire CAS of the slot lock (`slot::read_locked`).
#[test]
fn concurrent_appends_are_read_at_their_offsets() {
    model(|| {
        let p = partition(true);
        let handles: Vec<_> = (0..2u64)
            .map(|k| {
                let mut a = p.appender();
                thread::spawn(move || {
                    let offset = append(&mut a, 10 + k, AppendWait::No);
                    (offset, 10 + k)
                })
            })
            .collect();
        let seen = [read_at(&p, 0), read_at(&p, 1)];
        let mut told: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        told.sort();
        for (offset, value) in told {
            assert_eq!(seen[offset as usize], Some(value));
        }
        assert_eq!(p.log_end(), 2);
    });
}

/// Two appenders, one waiting for room on a full gated partition while the other tries to
/// append: the waiting one holds nothing the other needs (its wait is outside the shared
/// producer's lock), so the other is refused at once, and a commit lets the waiting one
/// append (loom reports a deadlock or a lost wake-up otherwise). Key ordering: the gate's
/// wake-up against `Ring::wait_for_room`'s fenced re-check; holding the producer's lock
/// across the wait deadlocks this model.
#[test]
fn an_appender_waiting_for_room_blocks_no_other() {
    model(|| {
        let (p, group) = gated_by_group();
        let mut a = p.appender();
        let mut b = p.appender();
        append(&mut a, 0, AppendWait::No);
        append(&mut a, 1, AppendWait::No);
        let waiting = thread::spawn(move || append(&mut a, 2, AppendWait::Until(None)));
        match b.append(entry(9), AppendWait::No) {
            Err((Some(e), AppendError::Full)) => assert_eq!(**e.value(), 9),
            Err((_, e)) => panic!("{e:?}"),
            Ok(at) => panic!("appended at {at} over an uncommitted record"),
        }
        p.commit(&group, 1, 0).unwrap();
        assert_eq!(waiting.join().unwrap(), 2);
        assert_eq!(read_at(&p, 1), Some(1), "offset 1 is not committed yet");
    });
}

/// Commit gating: with a group gating at 0 on a capacity-2 partition, the producer's
/// third append waits until the group commits, and its fourth until the group commits
/// past offset 1: a record at or above the committed offset is never overwritten, and
/// the waiting producer always wakes (loom reports a lost wake-up as a deadlock).
/// Key ordering: the gate's wake-up (the gating reader's cursor store and notification
/// against the waiting producer's fenced re-check).
#[test]
fn commit_releases_a_waiting_producer() {
    model(|| {
        let (p, group) = gated_by_group();
        let mut a = p.appender();
        let producer = thread::spawn(move || {
            for v in 0..4 {
                assert_eq!(append(&mut a, v, AppendWait::Until(None)), v);
            }
        });
        assert_eq!(read_at(&p, 0), Some(0));
        assert_eq!(read_at(&p, 1), Some(1));
        // Nothing committed yet: offset 0 is still there.
        assert_eq!(read_at(&p, 0), Some(0));
        p.commit(&group, 1, 0).unwrap();
        assert_eq!(read_at(&p, 2), Some(2));
        assert_eq!(read_at(&p, 1), Some(1), "offset 1 is not committed yet");
        p.commit(&group, 3, 0).unwrap();
        assert_eq!(read_at(&p, 3), Some(3));
        producer.join().unwrap();
        assert_eq!(p.committed("g"), Some(3));
    });
}

/// Reads through a group's gate (no slot locks) while the producer waits on that gate
/// and the reader commits as it goes: every record is read once, in order, never while
/// it is overwritten. Key ordering: the Acquire load of a slot's tag in the gated read
/// (`slot::is_published`) against the writer's Release store.
#[test]
fn gated_reads_race_no_overwrite() {
    model(|| {
        let (p, group) = gated_by_group();
        let slot = p.group_slot("g").unwrap();
        let mut a = p.appender();
        let producer = thread::spawn(move || {
            for v in 0..3 {
                append(&mut a, v, AppendWait::Until(None));
            }
        });
        let mut next = 0;
        while next < 3 {
            let mut got = Vec::new();
            match p.read(next, 2, 0, Some(&slot), |o, e| {
                got.push((o, **e.entry().value()))
            }) {
                ReadOutcome::Read(n) => {
                    for (i, (o, v)) in got.into_iter().enumerate() {
                        assert_eq!((o, v), (next + i as u64, next + i as u64));
                    }
                    next += n as u64;
                    p.commit(&group, next, 0).unwrap();
                }
                ReadOutcome::Empty => thread::yield_now(),
                other => panic!("{other:?}"),
            }
        }
        producer.join().unwrap();
    });
}

/// Another member of the group commits past a gated read in progress: the commit
/// waits for the read (the group's lock), so the producer cannot overwrite what is
/// being read; the reader gets offset 0's value or is told it is gone.
#[test]
fn a_commit_racing_a_gated_read_waits_for_it() {
    model(|| {
        let (p, group) = gated_by_group();
        let slot = p.group_slot("g").unwrap();
        let mut a = p.appender();
        append(&mut a, 0, AppendWait::No);
        append(&mut a, 1, AppendWait::No);
        let (p2, g2) = (Arc::clone(&p), Arc::clone(&group));
        let member = thread::spawn(move || p2.commit(&g2, 2, 0).unwrap());
        let producer = thread::spawn(move || {
            append(&mut a, 2, AppendWait::Until(None));
            append(&mut a, 3, AppendWait::Until(None));
        });
        let mut got = None;
        match p.read(0, 1, 0, Some(&slot), |_, e| got = Some(**e.entry().value())) {
            ReadOutcome::Read(1) => assert_eq!(got, Some(0)),
            ReadOutcome::OutOfRange { start, .. } => assert!(start > 0),
            other => panic!("{other:?}"),
        }
        member.join().unwrap();
        producer.join().unwrap();
    });
}

/// Drop-oldest: the producer overwrites offset 0 while a reader clones it; the reader
/// gets offset 0's value or is told the offset is gone, never a torn or later value.
/// Key orderings: the anchor's announcement (count, `SeqCst` fence, claim cursor)
/// against the producer's claim (its store of the claim's end), `SeqCst` fence and Acquire load of the count
/// (`Shared::announce` / `reads_announced`: dropping either fence, or the Acquire,
/// fails this model); then the reader's Release of its share of the slot lock
/// (`ReadGuard`) against the writer's Acquire CAS that takes the slot.
#[test]
fn overwrite_never_races_a_reader() {
    model(|| {
        let p = partition(false);
        let mut a = p.appender();
        append(&mut a, 0, AppendWait::No);
        let producer = thread::spawn(move || {
            append(&mut a, 1, AppendWait::No);
            append(&mut a, 2, AppendWait::No);
        });
        let got = read_at(&p, 0);
        assert!(got.is_none() || got == Some(0), "{got:?}");
        producer.join().unwrap();
        assert_eq!(read_at(&p, 0), None);
        assert_eq!(read_at(&p, 2), Some(2));
    });
}

/// `offset_for_time` while the producer overwrites the record it is looking at: the
/// answer is the first record still there at or after the time, never one past the
/// new log start (offset 1 is in the ring whenever offset 0 is gone).
#[test]
fn offset_for_time_racing_an_overwrite_skips_nothing() {
    model(|| {
        let p = partition(false);
        let mut a = p.appender();
        append(&mut a, 0, AppendWait::No);
        append(&mut a, 1, AppendWait::No);
        let producer = thread::spawn(move || {
            append(&mut a, 2, AppendWait::No);
        });
        let found = p.offset_for_time(0, 0);
        assert!(matches!(found, Some((0, 0)) | Some((1, 1))), "{found:?}");
        producer.join().unwrap();
    });
}

/// A partition of plain entries (`u64` values, no key): the ring overwrites them without
/// reading them back (ring `sequencer`, "Plain values").
fn plain_partition() -> Arc<Partition<(), u64>> {
    partition_of(2, false)
}

fn plain(v: u64) -> Entry<(), u64> {
    Entry::plain(v as i64, v)
}

/// A header value that holds a loom `Arc`: never dropping it fails the model (a leak).
struct Tracked {
    _alive: crate::sync::Arc<u64>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &[]
    }
}

/// An entry at `offset` (its timestamp and value) with one header whose bytes own a
/// `Tracked`: a leaked header leaks its `Arc`.
fn tracked_header_entry(offset: u64) -> Entry<(), u64> {
    Entry::new(
        offset as i64,
        None,
        offset,
        vec![(
            "h".to_owned(),
            Some(Bytes::from_owner(Tracked {
                _alive: crate::sync::Arc::new(7),
            })),
        )],
    )
}

/// Plain values: one producer appends a plain entry, then one with headers (not plain),
/// while another appends a plain run that may overwrite it: the overwriting write must
/// drop it (loom reports a leaked `Arc` otherwise), and the log holds the plain entries
/// after it. Key step: `impure`, set by the appender of the impure entry before its write
/// (the single-entry fast path too) and read by the next writer of the slot, which holds
/// the ring's one producer after it (its lock orders the two); not setting it on the fast
/// path fails this model (the header's `Arc` leaks).
#[test]
fn plain_runs_drop_the_headers_they_overwrite() {
    model(|| {
        let p = plain_partition();
        let mut a = p.appender();
        let mut b = p.appender();
        let impure = thread::spawn(move || {
            a.append(plain(100), AppendWait::No)
                .map_err(|(_, e)| e)
                .unwrap();
            let e = tracked_header_entry(101);
            a.append(e, AppendWait::No).map_err(|(_, e)| e).unwrap()
        });
        let mut run: Vec<_> = (0..2).map(plain).collect();
        b.append_batch(&mut run, AppendWait::No).unwrap();
        let at = impure.join().unwrap();
        assert_eq!(p.log_end(), 4);
        let mut seen = Vec::new();
        p.read(2, 2, 0, None, |o, e| {
            seen.push((o, e.entry().has_headers()))
        });
        assert_eq!(seen, [(2, at == 2), (3, at == 3)]);
    });
}

/// Plain values while a reader clones the entry being overwritten: the unlocked,
/// unread overwrite of plain entries still takes the slot lock while a read is
/// announced, so the reader gets offset 0's entry or is told it is gone (loom reports a
/// racing access to the slot's cell otherwise). Key ordering: as in
/// `overwrite_never_races_a_reader` (the announcement against `reads_announced`).
#[test]
fn plain_overwrite_never_races_a_reader() {
    model(|| {
        let p = plain_partition();
        let mut a = p.appender();
        a.append(plain(0), AppendWait::No)
            .map_err(|(_, e)| e)
            .unwrap();
        let producer = thread::spawn(move || {
            let mut run = vec![plain(1), plain(2)];
            a.append_batch(&mut run, AppendWait::No).unwrap();
        });
        let mut got = None;
        match p.read(0, 1, 0, None, |_, e| got = Some(*e.entry().value())) {
            ReadOutcome::Read(1) => assert_eq!(got, Some(0)),
            ReadOutcome::OutOfRange { start, .. } => assert!(start > 0),
            ReadOutcome::Empty => panic!("offset 0 was appended before the producer ran"),
            other => panic!("{other:?}"),
        }
        producer.join().unwrap();
    });
}

/// Plain runs written untagged (ring `slot`, "Stale tags"): two appenders append runs of
/// plain entries to a gated partition, through its one ring producer, while its group
/// reads through the gate: every offset read holds a value of the run that claimed it, in
/// the run's order. Key ordering: the Release store of the producer's published cursor
/// after the run's values are written (`Sequencer::write_run`) against the gated read's
/// Acquire load of it (`Shared::tail`); a Relaxed store there fails this model (a racing
/// access to the slot's cell).
#[test]
fn plain_runs_are_read_whole_through_the_gate() {
    model(|| {
        let (p, _, slot) = with_group_g::<(), u64>(2, true);
        let runs: Vec<_> = (0..2u64)
            .map(|k| {
                let mut a = p.appender();
                thread::spawn(move || {
                    let mut run = vec![plain(10 * k), plain(10 * k + 1)];
                    // The run that finds the ring full keeps its entries.
                    let _ = a.append_batch(&mut run, AppendWait::No);
                    run.len()
                })
            })
            .collect();
        let mut seen = Vec::new();
        while seen.len() < 2 {
            match p.read(seen.len() as u64, 2, 0, Some(&slot), |_, e| {
                seen.push(*e.entry().value())
            }) {
                ReadOutcome::Read(_) => {}
                ReadOutcome::Empty => thread::yield_now(),
                other => panic!("{other:?}"),
            }
        }
        let left: usize = runs.into_iter().map(|h| h.join().unwrap()).sum();
        // Capacity 2: one run got both slots, the other found the ring full (the group
        // has not committed).
        assert_eq!(left, 2);
        assert_eq!(seen[1], seen[0] + 1, "{seen:?}");
        assert_eq!(seen[0] % 10, 0, "{seen:?}");
    });
}

/// Lending reads (`lend`): the group's member reads offsets 0 and 1 in place while
/// another member commits 2 and the producer appends offset 2 (waiting on the gate):
/// the commit takes effect only when the read ends, so the producer never overwrites a
/// record while it is lent (loom reports a racing access to the slot's cell otherwise),
/// and it is released afterwards (a deadlock otherwise). Key ordering: the lender count,
/// taken under the group's lock before the lock is let go, against the commit's forward
/// move of the gate (`commit_slot`); moving the gate while a read lends fails this model.
#[test]
fn a_commit_racing_a_lending_read_waits_for_it() {
    model(|| {
        let (p, group) = gated_by_group();
        let slot = p.group_slot("g").unwrap();
        let mut a = p.appender();
        append(&mut a, 0, AppendWait::No);
        append(&mut a, 1, AppendWait::No);
        let (p2, g2) = (Arc::clone(&p), Arc::clone(&group));
        let member = thread::spawn(move || p2.commit(&g2, 2, 0).unwrap());
        let producer = thread::spawn(move || append(&mut a, 2, AppendWait::Until(None)));
        let mut got = Vec::new();
        match p.lend(0, 2, 0, &slot, |o, (_, _, v, _)| got.push((o, **v))) {
            Some(ReadOutcome::Read(n)) => assert_eq!(got, [(0, 0), (1, 1)][..n]),
            // The commit came first: offset 0 may be gone, `read` answers then.
            None => {}
            other => panic!("{other:?}"),
        }
        member.join().unwrap();
        assert_eq!(producer.join().unwrap(), 2);
        assert_eq!(read_at(&p, 2), Some(2));
    });
}

/// A lending read (`lend`) races a partition's first transactional append: it never lends
/// the open transaction's record. Key ordering: the transaction mark (`activate`, Release,
/// before the publish) asked again after `hold` saw the run published (Acquire); asked only
/// before `hold`, the read could miss the mark and lend a record `hold` then sees.
#[test]
fn a_lending_read_never_lends_a_transaction_opening_meanwhile() {
    model(|| {
        let (p, _group) = gated_by_group();
        let slot = p.group_slot("g").unwrap();
        let writer = {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                let mut a = p.appender();
                let e = Entry::transactional(0, None, crate::sync::Arc::new(7), Vec::new(), 1, 0);
                assert!(a.append_txn(e, 1, 0, AppendWait::No).is_ok());
            })
        };
        let mut got = Vec::new();
        let _ = p.lend(0, 2, 0, &slot, |o, _| got.push(o));
        writer.join().unwrap();
        assert!(
            got.is_empty(),
            "lent offsets {got:?} of an open transaction"
        );
    });
}

/// The group is removed (`delete_group`) while one of its reads lends records in place:
/// the gate stays until the read ends, so the producer, released by the removal, never
/// overwrites a lent record (loom reports a racing access to the slot's cell otherwise).
/// Key ordering: `removed` and the lender count under the group's lock (`remove_group`
/// against `Lending::drop`); dropping the gate at once fails this model.
#[test]
fn a_group_removed_during_a_lending_read_keeps_its_gate_until_it_ends() {
    model(|| {
        let (p, _group) = gated_by_group();
        let slot = p.group_slot("g").unwrap();
        let mut a = p.appender();
        append(&mut a, 0, AppendWait::No);
        append(&mut a, 1, AppendWait::No);
        let p2 = Arc::clone(&p);
        let admin = thread::spawn(move || p2.remove_group("g"));
        let producer = thread::spawn(move || append(&mut a, 2, AppendWait::Until(None)));
        let mut got = Vec::new();
        match p.lend(0, 2, 0, &slot, |o, (_, _, v, _)| got.push((o, **v))) {
            Some(ReadOutcome::Read(n)) => assert_eq!(got, [(0, 0), (1, 1)][..n]),
            // Removed first: no gate to lend from.
            None => {}
            other => panic!("{other:?}"),
        }
        admin.join().unwrap();
        assert_eq!(producer.join().unwrap(), 2);
    });
}

/// A lending read of a partition that has held only plain entries reads each entry's
/// timestamp without asking its shape (`Entry::unboxed_parts`): an appender publishes a
/// plain entry and then one with headers while the group's member lends what is there.
/// Every record must read with its own timestamp and headers (else the box's address is
/// taken for a timestamp). Key ordering: the appender marks the ring impure before the
/// Release store of the published cursor (`Shared::mark_impure`, then `write_run` /
/// `try_fast_one`), and the reader asks the flag after its Acquire load of that cursor
/// (`lend`, after `hold`); asking it before `hold` fails this model (a box's address read
/// as offset 1's timestamp), and so does a Relaxed store of the cursor in `try_fast_one`
/// (a racing access to the slot's cell, reported first).
#[test]
fn a_lending_read_sees_the_headers_of_every_entry_it_lends() {
    model(|| {
        let (p, _, slot) = with_group_g::<(), u64>(2, true);
        let mut a = p.appender();
        let producer = thread::spawn(move || {
            a.append(plain(0), AppendWait::No)
                .map_err(|(_, e)| e)
                .unwrap();
            let e = tracked_header_entry(1);
            a.append(e, AppendWait::No).map_err(|(_, e)| e).unwrap()
        });
        let mut got = Vec::new();
        while got.len() < 2 {
            let from = got.len() as u64;
            let outcome = p.lend(from, 2, 0, &slot, |o, (timestamp, key, v, headers)| {
                got.push((o, timestamp, key.is_some(), *v, headers.len()))
            });
            match outcome {
                Some(ReadOutcome::Read(_)) => {}
                Some(ReadOutcome::Empty) => thread::yield_now(),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, [(0, 0, false, 0, 0), (1, 1, false, 1, 1)]);
        assert_eq!(producer.join().unwrap(), 1);
    });
}

/// The group's reader lends offsets 0 and 1, then commits 2, which moves the gate past the
/// run without reading it again (`Reader::skip_to`), while the producer tries to append
/// offset 2 (over offset 0's slot) without waiting: the lent read must happen before that
/// overwrite (loom reports a racing access to the slot's cell otherwise). Key ordering:
/// the Release store of the gate's cursor in `skip_to` (`Reader::commit`) against the
/// producer's Acquire load of it (`GateView::min_gate`); storing it Relaxed fails this
/// model.
#[test]
fn a_gate_moved_past_a_lent_run_hands_it_to_the_producer() {
    model(|| {
        let (p, group) = gated_by_group();
        let slot = p.group_slot("g").unwrap();
        let mut a = p.appender();
        append(&mut a, 0, AppendWait::No);
        append(&mut a, 1, AppendWait::No);
        let producer = thread::spawn(move || {
            let mut e = entry(2);
            loop {
                match a.append(e, AppendWait::No) {
                    Ok(offset) => return offset,
                    Err((Some(back), _)) => e = back,
                    Err((None, err)) => panic!("{err:?}"),
                }
                thread::yield_now();
            }
        });
        let mut got = Vec::new();
        let outcome = p.lend(0, 2, 0, &slot, |o, (_, _, v, _)| got.push((o, **v)));
        assert_eq!(outcome, Some(ReadOutcome::Read(2)));
        assert_eq!(got, [(0, 0), (1, 1)]);
        p.commit(&group, 2, 0).unwrap();
        assert_eq!(producer.join().unwrap(), 2);
    });
}

/// Copied runs (`Appender::append_copied`, under `PartitionProducer::send_slice`): as
/// `plain_runs_are_read_whole_through_the_gate`, with each entry made in its slot from a
/// `(timestamp, value)` instead of moved from a gathered vector. Key ordering: the Release
/// store of the published cursor after the run is written (`Sequencer::write_run`, its
/// single-producer untagged path) against the gated read's Acquire load of it; a Relaxed
/// store there fails this model (a racing access to the slot's cell).
#[test]
fn copied_runs_are_read_whole_through_the_gate() {
    model(|| {
        let (p, _, slot) = with_group_g::<(), u64>(2, true);
        let runs: Vec<_> = (0..2u64)
            .map(|k| {
                let mut a = p.appender();
                thread::spawn(move || {
                    let run = [(0, 10 * k), (1, 10 * k + 1)];
                    // The run that finds the ring full appends nothing.
                    a.append_copied(&run, AppendWait::No).0
                })
            })
            .collect();
        let mut seen = Vec::new();
        while seen.len() < 2 {
            match p.read(seen.len() as u64, 2, 0, Some(&slot), |_, e| {
                seen.push((e.entry().timestamp(), *e.entry().value()))
            }) {
                ReadOutcome::Read(_) => {}
                ReadOutcome::Empty => thread::yield_now(),
                other => panic!("{other:?}"),
            }
        }
        let sent: usize = runs.into_iter().map(|h| h.join().unwrap()).sum();
        // Capacity 2: one run got both slots, the other found the ring full.
        assert_eq!(sent, 2);
        let base = seen[0].1;
        assert_eq!(base % 10, 0, "{seen:?}");
        assert_eq!(seen, [(0, base), (1, base + 1)]);
    });
}

/// Copied runs overwriting an entry with headers: the overwrite must drop it (loom reports
/// the header's leaked `Arc` otherwise), though the run's own entries are plain. Key step:
/// the copied run's writer asks `impure` (set by the appender of the entry with headers
/// before its write, ordered by the ring producer's lock) before overwriting unread;
/// skipping that question in `write_run`'s untagged path fails this model.
#[test]
fn copied_runs_drop_the_headers_they_overwrite() {
    model(|| {
        let p = plain_partition();
        let mut a = p.appender();
        let mut b = p.appender();
        let impure = thread::spawn(move || {
            let e = tracked_header_entry(101);
            a.append(e, AppendWait::No).map_err(|(_, e)| e).unwrap()
        });
        let (sent, done) = b.append_copied(&[(0, 0), (1, 1)], AppendWait::No);
        assert_eq!(sent, 2);
        done.unwrap();
        let mut c = p.appender();
        let (sent, done) = c.append_copied(&[(2, 2), (3, 3)], AppendWait::No);
        assert_eq!(sent, 2);
        done.unwrap();
        let at = impure.join().unwrap();
        assert_eq!(p.log_end(), 5);
        let mut seen = Vec::new();
        p.read(3, 2, 0, None, |o, e| {
            seen.push((o, e.entry().has_headers()))
        });
        assert_eq!(seen, [(3, at == 3), (4, at == 4)]);
    });
}

/// Copied runs on a partition that holds an entry with headers (boxed, as a transaction's
/// marker is): the single producer writes the run's slots that hold plain entries unread
/// and replaces the marked one (the boxed entry's) with a write that drops it, all in its
/// batch path (ring `sequencer`, "Plain values"), while the group reads through the gate.
/// The group has read and committed the boxed entry at offset 0; one appender then copies
/// offset 1 and offset 2 (over offset 0's slot). Every offset must read whole and the box
/// be dropped once (loom reports its leaked `Arc` otherwise). Key ordering: the Release
/// store of the published cursor after that run (`Sequencer::write_run`, its
/// single-producer path over marked slots) against the gated read's Acquire load of it; a
/// Relaxed store there fails this model (a racing access to the slot's cell), and so does
/// writing the marked slot unread (the leak).
#[test]
fn copied_runs_over_a_boxed_entry_are_read_whole_through_the_gate() {
    model(|| {
        let (p, group, slot) = with_group_g::<(), u64>(2, true);
        let mut a = p.appender();
        a.append(tracked_header_entry(0), AppendWait::No)
            .map_err(|(_, e)| e)
            .unwrap();
        let mut headers = 0;
        p.read(0, 1, 0, Some(&slot), |_, e| {
            headers = e.entry().headers().len()
        });
        assert_eq!(headers, 1);
        p.commit(&group, 1, 0).unwrap();
        let producer = thread::spawn(move || {
            for v in 1..3 {
                let (sent, done) = a.append_copied(&[(v, v as u64)], AppendWait::No);
                assert_eq!(sent, 1);
                done.unwrap();
            }
        });
        let mut seen = Vec::new();
        while seen.len() < 2 {
            match p.read(1 + seen.len() as u64, 2, 0, Some(&slot), |_, e| {
                seen.push((e.entry().timestamp(), *e.entry().value()))
            }) {
                ReadOutcome::Read(_) => {}
                ReadOutcome::Empty => thread::yield_now(),
                other => panic!("{other:?}"),
            }
        }
        producer.join().unwrap();
        assert_eq!(seen, [(1, 1), (2, 2)]);
    });
}

/// Copied runs through the ring's straight-line path (`Sequencer::publish_made_fast`): the
/// second of two runs from one appender fits under the limit the first one refreshed, so it
/// is written and published without a claim; the group reads both through the gate, whole
/// and in order. Key ordering: the fast path's Release store of the published cursor after
/// the run is written against the gated read's Acquire load of it (`Shared::tail`); a
/// Relaxed store there fails this model (a racing access to the slot's cell).
#[test]
fn copied_runs_in_the_fast_path_are_read_whole_through_the_gate() {
    model(|| {
        let (p, _, slot) = with_group_g::<(), u64>(4, true);
        let mut a = p.appender();
        let producer = thread::spawn(move || {
            // The first run refreshes the limit (to the capacity: the gate is at 0), the
            // second fits under it.
            for run in [[(0, 0), (1, 1)], [(2, 2), (3, 3)]] {
                let (sent, done) = a.append_copied(&run, AppendWait::No);
                assert_eq!(sent, 2);
                done.unwrap();
            }
        });
        let mut seen = Vec::new();
        while seen.len() < 4 {
            match p.read(seen.len() as u64, 4, 0, Some(&slot), |_, e| {
                seen.push((e.entry().timestamp(), *e.entry().value()))
            }) {
                ReadOutcome::Read(_) => {}
                ReadOutcome::Empty => thread::yield_now(),
                other => panic!("{other:?}"),
            }
        }
        producer.join().unwrap();
        assert_eq!(seen, [(0, 0), (1, 1), (2, 2), (3, 3)]);
    });
}

/// Copied runs through the straight-line path overwriting an entry with headers: the path
/// must leave such a run to the general one, which drops what it overwrites (loom reports
/// the header's leaked `Arc` otherwise). One copied record per call on a drop-oldest
/// partition of capacity 2: the third call fits under the limit the second refreshed and
/// overwrites offset 1, which holds the entry with headers when that appender went second.
/// Key step: the fast path asks `impure` (set by the appender of the entry with headers
/// before its write, ordered by the ring producer's lock) before writing untagged;
/// skipping that question fails this model.
#[test]
fn copied_runs_in_the_fast_path_drop_the_headers_they_overwrite() {
    model(|| {
        let p = plain_partition();
        let mut a = p.appender();
        let mut b = p.appender();
        let impure = thread::spawn(move || {
            let e = tracked_header_entry(101);
            a.append(e, AppendWait::No).map_err(|(_, e)| e).unwrap()
        });
        for v in 0..3 {
            let (sent, done) = b.append_copied(&[(v, v as u64)], AppendWait::No);
            assert_eq!(sent, 1);
            done.unwrap();
        }
        let at = impure.join().unwrap();
        assert_eq!(p.log_end(), 4);
        let mut seen = Vec::new();
        p.read(2, 2, 0, None, |o, e| {
            seen.push((o, e.entry().has_headers()))
        });
        assert_eq!(seen, [(2, at == 2), (3, at == 3)]);
    });
}

/// A compacted partition of 2 records (`compacted`): the latest record of each key the
/// ring lets go is kept in its section, retained under the producer's lock before the
/// publish that overwrites it.
fn compacted_partition() -> Arc<Partition<u64, u64>> {
    let config = PartitionConfig {
        capacity: 2,
        gated: false,
        retention_ms: None,
    };
    let compaction = compacted::CompactionConfig {
        max_keys: 8,
        delete_retention_ms: 0,
        retention_ms: None,
    };
    let clock: Arc<dyn crate::clock::Clock> = Arc::new(crate::clock::ManualClock::new(0));
    let p = Partition::new(config, Arc::new(WaitSet::new()))
        .unwrap()
        .with_compaction(|start| {
            Arc::new(compacted::Section::<u64, u64>::new(
                compaction, clock, start,
            ))
        })
        .unwrap();
    Arc::new(p)
}

/// A replay from offset 0 racing the overwrites of a compacted partition: the reader moves
/// from the section to the ring while the producer overwrites the ring's oldest slot (the
/// record there retained first). It reads offsets in increasing order, each once, each with
/// the record appended there, and ends with every key's latest value: the key whose latest
/// record (offset 2) is overwritten during the replay included. Retaining after the publish
/// instead, or reporting an overwritten offset as out of range instead of reading the
/// section again, fails this model.
#[test]
fn a_replay_racing_compaction_reads_every_latest_value_once() {
    model(|| {
        let p = compacted_partition();
        let mut a = p.appender();
        let keyed = |key: u64, v: u64| Entry::new(v as i64, Some(key), v, Vec::new());
        // Keys by offset: 0 -> A, 1 -> B, 2 -> A, 3 -> C, 4 -> C.
        let keys = [0u64, 1, 0, 2, 2];
        for (v, &k) in keys.iter().enumerate().take(2) {
            a.append(keyed(k, v as u64), AppendWait::No)
                .map_err(|(_, e)| e)
                .unwrap();
        }
        let producer = thread::spawn(move || {
            for (v, &k) in keys.iter().enumerate().skip(2) {
                a.append(keyed(k, v as u64), AppendWait::No)
                    .map_err(|(_, e)| e)
                    .unwrap();
            }
        });
        let mut latest = std::collections::HashMap::new();
        let mut at = 0;
        while at < 5 {
            let mut last = None;
            let outcome = p.read(at, 2, 0, None, |o, e| {
                let e = e.entry();
                assert!(
                    last < Some(o) && o >= at,
                    "offset {o} after {last:?}, read from {at}"
                );
                assert_eq!((*e.key().unwrap(), *e.value()), (keys[o as usize], o));
                latest.insert(*e.key().unwrap(), *e.value());
                last = Some(o);
            });
            match outcome {
                ReadOutcome::Read(n) => at += n as u64,
                ReadOutcome::Sparse { next, .. } => at = next,
                ReadOutcome::Empty => thread::yield_now(),
                other => panic!("{other:?} at {at}"),
            }
        }
        producer.join().unwrap();
        assert_eq!(latest, [(0, 2), (1, 1), (2, 4)].into_iter().collect());
    });
}

/// A read-committed fetch racing the first record of a transaction (which never commits
/// here): the fetch's LSO snapshot (its high watermark loaded before the transaction
/// table's lock) never lets it read that record.
#[test]
fn a_read_committed_fetch_never_reads_a_transaction_opening_meanwhile() {
    model(|| {
        let p = partition(false);
        let writer = {
            let p = Arc::clone(&p);
            thread::spawn(move || {
                let mut a = p.appender();
                let e = Entry::transactional(0, None, crate::sync::Arc::new(7), Vec::new(), 1, 0);
                assert!(a.append_txn(e, 1, 0, AppendWait::No).is_ok());
            })
        };
        let mut got = Vec::new();
        let _ = p.read_as(txn::IsolationLevel::ReadCommitted, 0, 4, 0, None, |o, _| {
            got.push(o)
        });
        writer.join().unwrap();
        assert!(
            got.is_empty(),
            "read offsets {got:?} of an open transaction"
        );
        // Once it commits, a fetch reads it.
        let marker = ControlMarker {
            commit: true,
            coordinator_epoch: 0,
        };
        assert!(p
            .write_marker(
                1,
                0,
                marker,
                0,
                crate::sync::StdArc::new(SendPolicy::default()),
                std::time::Duration::MAX
            )
            .is_ok());
        let mut got = Vec::new();
        let _ = p.read_as(txn::IsolationLevel::ReadCommitted, 0, 4, 0, None, |o, _| {
            got.push(o)
        });
        assert_eq!(got, [0]);
    });
}

/// The idempotent producer on a one-replica partition: a fresh send (its sequence given
/// under the ring producer's lock) races a retry of sequence 0 from another handle
/// (`append_sequenced`, whose check must be atomic with its publish). Whatever the order,
/// sequence 0 is in the log once: either the retry finds it and answers with its offset,
/// or the retry appends it and the fresh send gets sequence 1; the producer's state ends at
/// the last offset with sequence `log end - 1`. Key lock: the ring producer's, held from the
/// check to the publish (`Tail::check_next` .. `published`); checking under one hold and
/// publishing under another appends sequence 0 twice. Idle producer ids expire here as on
/// a broker's partition (none is idle: the expiry's look at the states is in both paths).
#[test]
fn idempotent_sequences_follow_the_log() {
    use super::producer_state::{ProducerExpiry, ProducerHandle};
    model(|| {
        let clock: Arc<dyn crate::clock::Clock> = Arc::new(crate::clock::ManualClock::new(0));
        let config = PartitionConfig {
            capacity: 4,
            gated: false,
            retention_ms: None,
        };
        let p = Arc::new(
            Partition::<(), Value>::new(config, Arc::new(WaitSet::new()))
                .unwrap()
                .with_producer_expiry(ProducerExpiry::new(
                    clock,
                    std::time::Duration::from_secs(60),
                )),
        );
        let id = ProducerIdentity { id: 1, epoch: 0 };
        let policy = SendPolicy {
            producer: Some(Arc::new(ProducerHandle::new(id, Ok))),
            ..SendPolicy::default()
        };
        let mut fresh = p.appender().with_policy(policy.clone());
        let mut retry = p.appender().with_policy(policy);
        let t = thread::spawn(move || append(&mut fresh, 10, AppendWait::No));
        let again = retry
            .append_sequenced(entry(10), id, 0)
            .map_err(|(_, e)| e)
            .unwrap();
        let first = t.join().unwrap();
        let end = p.log_end();
        if again == first {
            assert_eq!(end, 1, "the retry was answered, not appended");
        } else {
            assert_eq!(end, 2);
            // Appended, the retry must have come first (sequence 0 at offset 0, the fresh
            // send's sequence 1 after it): after the fresh send, sequence 0 is there twice.
            assert!(
                again < first,
                "sequence 0 appended twice: the retry at {again} after the fresh send at {first}"
            );
        }
        let last = p.with_producers(|s| s.get(1).and_then(|e| e.last()));
        assert_eq!(last, Some(((end - 1) as i32, end - 1)));
    });
}
