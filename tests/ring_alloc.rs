//! No allocation per entry in steady state: a counting global allocator watches a window of
//! publishing and reading (single and batch forms, gating and non-gating readers, single-
//! and multi-producer, overwrite mode) after a warm-up, and must count zero.

mod alloc_common;

use alloc_common::allocations_during;

use logbus::ring::{LapPolicy, Ring, RingConfig, Start};

fn steady_state<P>(publish: &mut P, ring: &Ring<u64>, overflow: LapPolicy)
where
    P: FnMut(&mut Vec<u64>, u64),
{
    let mut gating =
        (overflow == LapPolicy::Block).then(|| ring.gating_reader(Start::Tail).unwrap());
    let mut lossy = ring.reader(Start::Tail).unwrap();
    let mut out = Vec::with_capacity(256);
    let mut batch = Vec::with_capacity(64);
    let mut round = |i: u64, out: &mut Vec<u64>, batch: &mut Vec<u64>| {
        publish(batch, i);
        if let Some(g) = gating.as_mut() {
            out.clear();
            g.try_read_batch(out, 256).unwrap();
            let mut sum = 0;
            g.try_read_with(256, |_, v| sum += v).ok();
        }
        out.clear();
        let _ = lossy.try_read_batch(out, 256);
        let _ = lossy.try_read();
    };
    // Warm-up: several laps (producers take their reader snapshots, Vecs reach capacity).
    for i in 0..100 {
        round(i, &mut out, &mut batch);
    }
    let n = allocations_during(|| {
        for i in 100..2_000 {
            round(i, &mut out, &mut batch);
        }
    });
    assert_eq!(n, 0, "allocations in steady state ({overflow:?})");
}

#[test]
fn no_allocation_per_entry_in_steady_state() {
    for overflow in [LapPolicy::Block, LapPolicy::DropOldest] {
        let config = RingConfig::new(64).overflow(overflow);
        let (mut sp, ring) = Ring::<u64>::single_producer(config).unwrap();
        steady_state(
            &mut |batch: &mut Vec<u64>, i| {
                sp.publish(i).unwrap();
                batch.extend(0..8);
                sp.publish_batch(batch).unwrap();
            },
            &ring,
            overflow,
        );
        let (mut mp, ring) = Ring::<u64>::multi_producer(config).unwrap();
        steady_state(
            &mut |batch: &mut Vec<u64>, i| {
                mp.try_publish(i).unwrap();
                batch.extend(0..8);
                mp.publish_batch(batch).unwrap();
            },
            &ring,
            overflow,
        );
    }
}
