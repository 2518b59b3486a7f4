//! The manual clock under loom: concurrent advances are never lost.
#![cfg(logbus_loom)]

use std::time::Duration;

use logbus::{Clock, ManualClock};
use loom::sync::Arc;

#[test]
fn concurrent_advances_add_up() {
    loom::model(|| {
        let clock = Arc::new(ManualClock::new(0));
        let other = Arc::clone(&clock);
        let t = loom::thread::spawn(move || other.advance(Duration::from_millis(2)));
        clock.advance(Duration::from_millis(3));
        t.join().unwrap();
        assert_eq!(clock.now_ms(), 5);
        assert_eq!(clock.monotonic_ns(), 5_000_000);
    });
}
