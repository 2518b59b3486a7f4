//! Same-run comparison harnesses of logbus against its peers: each bench runs logbus and a
//! peer interleaved (A B A B ...) in one process and prints the median of the per-pair
//! ratios (`cargo bench -p logbus-comparison --bench NAME`). See BENCHMARKS.md.
//!
//! This library holds what the harnesses share: settings from the environment, medians,
//! the per-pair samples of two sides, the checksums every reader asserts, the switch that
//! makes one side lose a record on purpose (`LOGBUS_BENCH_LOSE`), the stall bound of
//! readers that wait for a count, and the machine-readable row line `scripts/bench-table`
//! collects.

use std::str::FromStr;
use std::time::{Duration, Instant};

/// The environment variable `name` as a `u64`, or `default` when it is unset or not a
/// number.
pub fn env_u64(name: &str, default: u64) -> u64 {
    env_or(name, default)
}

/// The environment variable `name` as a `usize`, or `default` when it is unset or not a
/// number.
pub fn env_usize(name: &str, default: usize) -> usize {
    env_or(name, default)
}

fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `values`: the middle one, or the mean of the middle two for an even count
/// (NaN for none). NaNs sort last.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The smallest and largest of `values` (`(f64::MAX, f64::MIN)` for none).
pub fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// The per-pair figures of two sides run interleaved: logbus's (`ours`) and a peer's
/// (`theirs`), one of each per pair, in the order they ran. The figures are rates (higher
/// is better), so a pair's ratio `ours / theirs` above 1 favours logbus.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pairs {
    /// logbus's figure in each pair.
    pub ours: Vec<f64>,
    /// The peer's figure in each pair.
    pub theirs: Vec<f64>,
}

impl Pairs {
    /// Runs `ours` then `theirs`, `pairs` times (A B A B ...), each returning a rate.
    pub fn interleave(
        pairs: usize,
        mut ours: impl FnMut() -> f64,
        mut theirs: impl FnMut() -> f64,
    ) -> Self {
        let mut p = Self::default();
        for _ in 0..pairs {
            let a = ours();
            let b = theirs();
            p.push(a, b);
        }
        p
    }

    /// Records one pair.
    pub fn push(&mut self, ours: f64, theirs: f64) {
        self.ours.push(ours);
        self.theirs.push(theirs);
    }

    /// Each pair's ratio `ours / theirs`, in the order they ran.
    pub fn ratios(&self) -> Vec<f64> {
        self.ours
            .iter()
            .zip(&self.theirs)
            .map(|(a, b)| a / b)
            .collect()
    }

    /// The median of the per-pair ratios (the figure the bars are checked against).
    pub fn median_ratio(&self) -> f64 {
        median(&self.ratios())
    }

    /// The smallest and largest per-pair ratio.
    pub fn ratio_range(&self) -> (f64, f64) {
        min_max(&self.ratios())
    }

    /// The median of logbus's figures.
    pub fn ours_median(&self) -> f64 {
        median(&self.ours)
    }

    /// The median of the peer's figures.
    pub fn theirs_median(&self) -> f64 {
        median(&self.theirs)
    }
}

/// A 64-bit mix of `v` (the SplitMix64 finaliser): every input bit changes about half the
/// output bits, so a sum of mixed values changes when any value does.
#[inline(always)]
pub fn mix(v: u64) -> u64 {
    let mut z = v.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What a reader saw: how many values, and a checksum over them. `ordered` depends on the
/// order the values came in (for a reader the peer promises an order to: one partition, one
/// producer); `any_order` (a sum of mixed values) does not (several producers, several
/// consumers of one queue), and [`merge`](Self::merge) adds up several readers' tallies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Values seen.
    pub count: u64,
    /// An order-dependent fold of every value.
    pub ordered: u64,
    /// The wrapping sum of every value's [`mix`].
    pub any_order: u64,
}

impl Tally {
    /// Counts `v`, after the values already seen.
    #[inline(always)]
    pub fn add(&mut self, v: u64) {
        let m = mix(v);
        self.count += 1;
        // A polynomial hash over the mixed values: a value in another place changes it.
        self.ordered = self
            .ordered
            .wrapping_mul(0x0000_0100_0000_01b3)
            .wrapping_add(m);
        self.any_order = self.any_order.wrapping_add(m);
    }

    /// The tally of `values`, in that order (what a reader should see).
    pub fn of(values: impl IntoIterator<Item = u64>) -> Self {
        let mut t = Self::default();
        for v in values {
            t.add(v);
        }
        t
    }

    /// `self` and `other` together, for the order-independent part (the ordered fold of a
    /// merge means nothing and is left at zero).
    pub fn merge(self, other: Self) -> Self {
        Self {
            count: self.count + other.count,
            ordered: 0,
            any_order: self.any_order.wrapping_add(other.any_order),
        }
    }

    /// Panics unless `self` (what `side`'s reader saw in `row`) has `want`'s count and
    /// ordered checksum.
    #[track_caller]
    pub fn assert_in_order(&self, side: Side, row: &str, want: &Tally) {
        self.assert_as(side, row, want, true);
    }

    /// Panics unless `self` has `want`'s count and order-independent checksum.
    #[track_caller]
    pub fn assert_any_order(&self, side: Side, row: &str, want: &Tally) {
        self.assert_as(side, row, want, false);
    }

    #[track_caller]
    fn assert_as(&self, side: Side, row: &str, want: &Tally, in_order: bool) {
        let (got_sum, want_sum, kind) = if in_order {
            (self.ordered, want.ordered, "ordered")
        } else {
            (self.any_order, want.any_order, "order-independent")
        };
        assert!(
            self.count == want.count && got_sum == want_sum,
            "{row}: {side}'s reader saw {} records, expected {}; {kind} checksum {got_sum:#018x}, expected {want_sum:#018x}",
            self.count,
            want.count,
        );
    }
}

/// One side of a comparison: logbus (`ours`) or the peer (`theirs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// logbus.
    Ours,
    /// The peer.
    Theirs,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Ours => "logbus (ours)",
            Side::Theirs => "the peer (theirs)",
        })
    }
}

/// The value `side`'s producers skip out of `0..total`, when `LOGBUS_BENCH_LOSE` names that
/// side (`ours` or `theirs`): the middle one, `total / 2`. Every harness's producers send
/// through [`Source`], so a lost record must make the run fail — that is what shows its
/// readers' checks can fail.
pub fn lost_value(side: Side, total: u64) -> Option<u64> {
    let want = match std::env::var("LOGBUS_BENCH_LOSE").as_deref() {
        Ok("ours") => Side::Ours,
        Ok("theirs") => Side::Theirs,
        _ => return None,
    };
    (want == side && total > 0).then_some(total / 2)
}

/// The values a producer sends: `range` in order, without the value `lost` (see
/// [`lost_value`]).
#[derive(Debug, Clone)]
pub struct Source {
    range: std::ops::Range<u64>,
    lost: Option<u64>,
}

impl Source {
    /// `range` without `lost`.
    pub fn new(range: std::ops::Range<u64>, lost: Option<u64>) -> Self {
        Self { range, lost }
    }

    /// `0..total` for `side`'s only producer (losing the middle value when
    /// `LOGBUS_BENCH_LOSE` names `side`).
    pub fn all(side: Side, total: u64) -> Self {
        Self::new(0..total, lost_value(side, total))
    }

    /// Fills `buf` from the front with the next values; returns how many (0 at the end).
    #[inline]
    pub fn fill(&mut self, buf: &mut [u64]) -> usize {
        let mut k = 0;
        while k < buf.len() {
            match self.next() {
                Some(v) => {
                    buf[k] = v;
                    k += 1;
                }
                None => break,
            }
        }
        k
    }
}

impl Iterator for Source {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        let v = self.range.next()?;
        if Some(v) == self.lost {
            return self.range.next();
        }
        Some(v)
    }
}

/// For a reader that waits for a count: panics once no record came for
/// `LOGBUS_BENCH_STALL_SECS` (default 10) seconds, naming the row, the side, and how many
/// it saw — so a harness that lost a record fails instead of hanging.
#[derive(Debug)]
pub struct Stall {
    last: Instant,
    bound: Duration,
}

impl Default for Stall {
    fn default() -> Self {
        Self::new()
    }
}

impl Stall {
    /// Starts the clock.
    pub fn new() -> Self {
        Self {
            last: Instant::now(),
            bound: Duration::from_secs(env_u64("LOGBUS_BENCH_STALL_SECS", 10)),
        }
    }

    /// After a poll that returned `got` records (`seen` in all, of `want`): resets the clock
    /// on progress, and panics when there was none for the bound.
    #[track_caller]
    #[inline]
    pub fn after(&mut self, got: usize, side: Side, row: &str, seen: u64, want: u64) {
        if got > 0 {
            self.last = Instant::now();
        } else if self.last.elapsed() > self.bound {
            panic!(
                "{row}: {side}'s reader saw {seen} records, expected {want}; no record came for {:?}",
                self.bound
            );
        }
    }
}

/// Prints the machine-readable line of one comparison row (`scripts/bench-table` collects
/// them into the README's table): `ROW|<row>|<peer>|<median ratio>|<min>|<max>`, ratios
/// logbus / peer.
pub fn print_row(row: &str, peer: &str, pairs: &Pairs) {
    let (lo, hi) = pairs.ratio_range();
    println!(
        "ROW|{row}|{peer}|{:.2}|{lo:.2}|{hi:.2}",
        pairs.median_ratio()
    );
}

/// The lockstep cost harnesses' setup (`topics_poll_cost`, `topics_send_cost`): topic `"t"`,
/// one `Block` partition of 1024 records in memory, a consumer of group `"g"` reading it from
/// the earliest offset (up to 1024 records a poll), and a producer.
pub fn one_partition_in_lockstep(
    broker: &logbus::Broker,
) -> (logbus::Consumer<(), u64>, logbus::Producer<(), u64>) {
    use logbus::broker::{Overflow, TopicConfig, TopicPartition};
    use logbus::consumer::{ConsumerConfig, OffsetReset};
    broker
        .create_topic::<(), u64>(
            "t",
            TopicConfig::new(1)
                .records_in_memory(1024)
                .overflow(Overflow::Block),
        )
        .unwrap();
    let mut c = broker
        .consumer::<(), u64>(
            ConsumerConfig::new()
                .group_id("g")
                .auto_offset_reset(OffsetReset::Earliest)
                .max_poll_records(1024),
        )
        .unwrap();
    c.assign(&[TopicPartition::new("t", 0)]).unwrap();
    (c, broker.producer::<(), u64>())
}

/// A new, empty directory `name` under `base` (a harness passes its
/// `env!("CARGO_TARGET_TMPDIR")`): what an earlier run left there is removed first.
pub fn scratch_dir(base: &str, name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(base).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `records` (in `side`'s order, see [`Source`]) to partition 0 of topic `t`, created
/// with `persist` on a new broker in `dir`, in `send_batch`es of `batch` records, then
/// fsyncs the topic: the time from the first send to the fsync's return, and the broker
/// (for the caller's read back).
pub fn write_persisted(
    dir: &std::path::Path,
    records: &[logbus::Bytes],
    persist: logbus::persist::PersistConfig,
    side: Side,
    batch: usize,
) -> (Duration, logbus::Broker) {
    use logbus::producer::Record;
    let broker = logbus::Broker::builder()
        .data_dir(dir)
        .create(true)
        .open()
        .unwrap();
    let topic = broker
        .create_topic::<(), logbus::Bytes>(
            "t",
            logbus::TopicConfig::new(1)
                .records_in_memory(8192)
                .persist(persist),
        )
        .unwrap();
    let producer = broker.producer::<(), logbus::Bytes>();
    let mut sends = Vec::with_capacity(batch);
    let mut src = Source::all(side, records.len() as u64);
    let started = Instant::now();
    loop {
        sends.extend(src.by_ref().take(batch).map(|i| {
            Record::new("t", records[i as usize].clone())
                .partition(0)
                .timestamp(1)
        }));
        if sends.is_empty() {
            break;
        }
        producer.send_batch(&mut sends).unwrap();
    }
    topic.fsync().unwrap();
    (started.elapsed(), broker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_even_and_empty_sets() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(min_max(&[2.0, -1.0, 5.0]), (-1.0, 5.0));
    }

    #[test]
    fn pairs_run_interleaved_and_ratio_per_pair() {
        let mut order = Vec::new();
        let mut n = 0.0;
        let order_cell = std::cell::RefCell::new(&mut order);
        let p = Pairs::interleave(
            3,
            || {
                order_cell.borrow_mut().push('a');
                n += 1.0;
                n * 10.0
            },
            || {
                order_cell.borrow_mut().push('b');
                5.0
            },
        );
        assert_eq!(order, ['a', 'b', 'a', 'b', 'a', 'b']);
        assert_eq!(p.ratios(), [2.0, 4.0, 6.0]);
        assert_eq!(p.median_ratio(), 4.0);
        assert_eq!(p.ratio_range(), (2.0, 6.0));
        assert_eq!((p.ours_median(), p.theirs_median()), (20.0, 5.0));
    }

    #[test]
    fn a_lost_a_duplicated_and_a_reordered_value_change_the_tally() {
        let want = Tally::of(0..100);
        let lost = Tally::of((0..100).filter(|&v| v != 50));
        let dup = Tally::of((0..100).chain([50]));
        let reordered = Tally::of((0..100).map(|v| match v {
            10 => 11,
            11 => 10,
            v => v,
        }));
        assert_ne!((lost.count, lost.ordered), (want.count, want.ordered));
        assert_ne!(lost.any_order, want.any_order);
        assert_ne!(dup.ordered, want.ordered);
        assert_ne!(dup.any_order, want.any_order);
        // A reordering keeps the count and the order-independent sum, not the ordered one.
        assert_eq!(
            (reordered.count, reordered.any_order),
            (want.count, want.any_order)
        );
        assert_ne!(reordered.ordered, want.ordered);
        // A swapped pair of values keeps a plain sum; the mix keeps `any_order` from
        // accepting a value changed by +1 in one place and -1 in another.
        let shifted = Tally::of((0..100).map(|v| match v {
            10 => 11,
            20 => 19,
            v => v,
        }));
        assert_ne!(shifted.any_order, want.any_order);
    }

    #[test]
    fn merged_tallies_add_up_in_any_order() {
        let a = Tally::of((0..100).filter(|v| v % 2 == 0));
        let b = Tally::of((0..100).filter(|v| v % 2 == 1));
        let m = b.merge(a);
        assert_eq!((m.count, m.any_order), (100, Tally::of(0..100).any_order));
    }

    #[test]
    #[should_panic(expected = "row x: logbus (ours)'s reader saw 99 records, expected 100")]
    fn a_short_tally_fails_its_assertion_naming_the_side_and_the_counts() {
        Tally::of(1..100).assert_in_order(Side::Ours, "row x", &Tally::of(0..100));
    }

    #[test]
    #[should_panic(expected = "order-independent checksum")]
    fn a_changed_value_fails_the_order_independent_assertion() {
        Tally::of((0..100).map(|v| if v == 7 { 1000 } else { v })).assert_any_order(
            Side::Theirs,
            "row y",
            &Tally::of(0..100),
        );
    }

    #[test]
    fn a_source_skips_only_its_lost_value() {
        let s: Vec<u64> = Source::new(0..6, Some(3)).collect();
        assert_eq!(s, [0, 1, 2, 4, 5]);
        assert_eq!(Source::new(0..3, None).count(), 3);
        let mut src = Source::new(0..5, Some(0));
        let mut buf = [0u64; 3];
        assert_eq!(src.fill(&mut buf), 3);
        assert_eq!(buf, [1, 2, 3]);
        assert_eq!(src.fill(&mut buf), 1);
        assert_eq!(buf[0], 4);
        assert_eq!(src.fill(&mut buf), 0);
    }

    #[test]
    fn env_or_falls_back_on_unset_and_unparsable_values() {
        assert_eq!(env_u64("LOGBUS_COMPARISON_TEST_UNSET_VARIABLE", 7), 7);
        // PATH is set on every machine these run on, and is not a number.
        assert_eq!(env_usize("PATH", 9), 9);
    }
}
