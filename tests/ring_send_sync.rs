//! The ring's handles are `Send`/`Sync` exactly when `T: Send + Sync` (readers clone entries
//! on several threads at once, producers move values in from other threads).

use std::cell::Cell;
use std::rc::Rc;

use logbus::ring::{MultiProducer, Producer, Reader, Ring};

fn is_send<T: Send>() {}
fn is_sync<T: Sync>() {}

#[test]
fn handles_are_send_and_sync_for_send_sync_payloads() {
    is_send::<Ring<String>>();
    is_sync::<Ring<String>>();
    is_send::<Producer<String>>();
    is_sync::<Producer<String>>();
    is_send::<MultiProducer<String>>();
    is_sync::<MultiProducer<String>>();
    is_send::<Reader<String>>();
    is_sync::<Reader<String>>();
}

/// Compile-time negative checks: a handle over `Rc` (not `Send`) or `Cell` (not `Sync`) is
/// neither `Send` nor `Sync`. (Asserted through trait-impl ambiguity: if the impl existed,
/// the two blanket impls below would make `is_not_send` ambiguous and fail to compile.)
#[test]
fn handles_are_not_send_for_rc_or_cell_payloads() {
    trait AmbiguousIfSend<A> {
        fn some_item() {}
    }
    impl<T: ?Sized> AmbiguousIfSend<()> for T {}
    struct Invalid;
    impl<T: ?Sized + Send> AmbiguousIfSend<Invalid> for T {}

    trait AmbiguousIfSync<A> {
        fn some_item() {}
    }
    impl<T: ?Sized> AmbiguousIfSync<()> for T {}
    impl<T: ?Sized + Sync> AmbiguousIfSync<Invalid> for T {}

    <Ring<Rc<u8>> as AmbiguousIfSend<_>>::some_item();
    <Ring<Cell<u8>> as AmbiguousIfSend<_>>::some_item();
    <Ring<Cell<u8>> as AmbiguousIfSync<_>>::some_item();
    <Reader<Cell<u8>> as AmbiguousIfSend<_>>::some_item();
    <Producer<Rc<u8>> as AmbiguousIfSend<_>>::some_item();
    <MultiProducer<Cell<u8>> as AmbiguousIfSync<_>>::some_item();
}
