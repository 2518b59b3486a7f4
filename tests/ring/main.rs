//! The ring and the observer bus: one test binary, a module per former file. The
//! allocation count (`tests/ring_alloc.rs`) keeps a binary of its own.

mod observer;
mod observer_async;
mod ring;
mod ring_async;
