//! Loom models of logbus live in `tests/`; this crate has no code of its own.
//!
//! Run them with `scripts/test-all.sh`, or by hand:
//!
//! ```text
//! RUSTFLAGS="--cfg logbus_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p logbus-loom-tests --release --target-dir target/loom
//! ```
