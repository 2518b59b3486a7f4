//! Same-run comparison harnesses of logbus against its peers: each bench runs logbus and a
//! peer interleaved (A B A B ...) in one process and prints the median of the per-pair
//! ratios (`cargo bench -p logbus-comparison --bench NAME`). See BENCHMARKS.md.
//!
//! This library holds what the harnesses share: settings from the environment, medians,
//! and the per-pair samples of two sides.

use std::str::FromStr;

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
    fn env_or_falls_back_on_unset_and_unparsable_values() {
        assert_eq!(env_u64("LOGBUS_COMPARISON_TEST_UNSET_VARIABLE", 7), 7);
        // PATH is set on every machine these run on, and is not a number.
        assert_eq!(env_usize("PATH", 9), 9);
    }
}
