//! Time as logbus reads it: record timestamps, retention, roll by age, poll intervals.
//!
//! Everything that depends on wall-clock time takes a [`Clock`], so tests can drive time by
//! hand with [`ManualClock`] instead of sleeping. Timestamps are milliseconds since the Unix
//! epoch, as in Kafka.
//!
//! (Deadlines for blocking calls are a different thing: they use the monotonic clock through
//! the `sync` layer, because loom must be able to stand in for them.)

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A source of time.
///
/// # Examples
///
/// ```
/// use logbus::{Clock, SystemClock};
///
/// let now = SystemClock.now_ms();
/// assert!(now > 1_600_000_000_000); // after September 2020
/// ```
pub trait Clock: Send + Sync + fmt::Debug {
    /// Wall-clock time in milliseconds since the Unix epoch (Kafka's timestamp unit).
    fn now_ms(&self) -> i64;

    /// A monotonic reading in nanoseconds from an arbitrary origin, for measuring intervals
    /// (never goes backwards, unlike [`now_ms`](Clock::now_ms)).
    fn monotonic_ns(&self) -> u64;
}

/// The operating system's clocks: `SystemTime` for timestamps, `Instant` for intervals.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[cfg(target_os = "linux")]
    fn now_ms(&self) -> i64 {
        // The clock `SystemTime::now` reads, without its `Duration` arithmetic: a send
        // that takes its timestamp here reads it once per record.
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_REALTIME always exists.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        debug_assert_eq!(rc, 0);
        // `time_t` and `c_long` are `i32` on 32-bit targets.
        #[allow(clippy::useless_conversion)]
        i64::from(ts.tv_sec)
            .saturating_mul(1000)
            .saturating_add(i64::from(ts.tv_nsec) / 1_000_000)
    }

    #[cfg(not(target_os = "linux"))]
    fn now_ms(&self) -> i64 {
        use std::time::{SystemTime, UNIX_EPOCH};
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            // A system clock set before 1970: report it as negative milliseconds.
            Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }

    fn monotonic_ns(&self) -> u64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told to, for tests.
///
/// Both readings advance together: [`advance`](ManualClock::advance) moves the wall clock and
/// the monotonic clock by the same amount; [`set_ms`](ManualClock::set_ms) moves only the wall
/// clock (as an administrator changing the system time would).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use logbus::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_700_000_000_000);
/// clock.advance(Duration::from_secs(7 * 24 * 3600));
/// assert_eq!(clock.now_ms(), 1_700_000_000_000 + 604_800_000);
/// ```
#[derive(Debug)]
pub struct ManualClock {
    wall_ms: AtomicI64,
    monotonic_ns: AtomicU64,
}

impl ManualClock {
    /// A clock showing `start_ms` milliseconds since the epoch.
    pub fn new(start_ms: i64) -> Self {
        Self {
            wall_ms: AtomicI64::new(start_ms),
            monotonic_ns: AtomicU64::new(0),
        }
    }

    /// Moves both readings forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // A compare-exchange loop each: `fetch_update` is deprecated on nightly, and its
        // replacement `update` is newer than the MSRV (1.89). Relaxed (load and both CAS
        // orderings): the clock's readings order nothing else; each is a single value, and
        // the CAS alone keeps concurrent advances from losing one.
        macro_rules! saturating_add {
            ($atomic:expr, $by:expr) => {{
                let mut v = $atomic.load(Ordering::Relaxed);
                while let Err(now) = $atomic.compare_exchange_weak(
                    v,
                    v.saturating_add($by),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    v = now;
                }
            }};
        }
        saturating_add!(self.wall_ms, ms);
        saturating_add!(self.monotonic_ns, ns);
    }

    /// Sets the wall clock (the monotonic reading is unchanged).
    pub fn set_ms(&self, ms: i64) {
        // Relaxed: see `advance`.
        self.wall_ms.store(ms, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        // Relaxed: see `advance`.
        self.wall_ms.load(Ordering::Relaxed)
    }

    fn monotonic_ns(&self) -> u64 {
        // Relaxed: see `advance`.
        self.monotonic_ns.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn system_clock_is_monotonic_and_near_wall_time() {
        let a = SystemClock.monotonic_ns();
        let b = SystemClock.monotonic_ns();
        assert!(b >= a);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        // The same clock as `SystemTime` (read between two readings of it).
        let ms = SystemClock.now_ms();
        let after = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!(wall <= ms && ms <= after, "{wall} {ms} {after}");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(5);
        assert_eq!((c.now_ms(), c.monotonic_ns()), (5, 0));
        c.advance(Duration::from_millis(3));
        assert_eq!((c.now_ms(), c.monotonic_ns()), (8, 3_000_000));
        c.set_ms(-10);
        assert_eq!((c.now_ms(), c.monotonic_ns()), (-10, 3_000_000));
        c.advance(Duration::MAX);
        assert_eq!((c.now_ms(), c.monotonic_ns()), (i64::MAX - 10, u64::MAX));
    }
}
