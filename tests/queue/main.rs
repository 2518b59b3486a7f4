//! The bounded and unbounded queues, their select and timers: one test binary, a module per
//! former file. The 64-token limit (`tests/queue_token_pool.rs`) and the allocation counts
//! (`tests/queue_alloc.rs`, `tests/queue_unbounded_alloc.rs`) keep binaries of their own:
//! their tests need the whole process.

mod queue;
mod queue_async;
mod queue_async_cancel;
mod queue_contract;
mod queue_panics;
mod queue_protocol;
mod queue_select;
mod queue_select_biased;
mod queue_timers;
mod queue_unbounded;
