//! Topics, producers, consumers and their codecs (an in-memory broker): one test binary, a
//! module per former file. The allocation count (`tests/topics_alloc.rs`) keeps a binary of
//! its own.

#[path = "../replay_common/mod.rs"]
mod replay_common;

mod batch_contract;
mod codec;
mod compacted;
mod offset_gaps;
mod partitioner;
mod producer_slices;
mod producer_waits;
mod send_sync;
mod topics;
mod topics_adversarial;
mod topics_async;
mod topics_borrowed;
mod topics_model;
mod topics_stress;
