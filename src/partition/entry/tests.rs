use std::cell::Cell;
use std::mem::size_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use bytes::Bytes;

use super::*;

/// The layout entries had before (`BENCHMARKS.md`, "Topics: 16-byte entries"): an entry
/// must never be bigger than this.
#[allow(dead_code)]
struct Before<K, V> {
    timestamp: i64,
    key: Option<K>,
    value: V,
    headers: Option<Box<Headers>>,
}

#[test]
fn entries_are_16_bytes_without_key_and_24_with_a_u64_key() {
    assert_eq!(size_of::<Entry<(), u64>>(), 16);
    assert_eq!(size_of::<Entry<u64, u64>>(), 24);
    assert_eq!(size_of::<Entry<(), ()>>(), 8);
}

#[test]
fn no_entry_is_bigger_than_before() {
    fn check<K, V>() {
        let (now, before) = (size_of::<Entry<K, V>>(), size_of::<Before<K, V>>());
        assert!(
            now <= before,
            "{} {}: {now} > {before}",
            std::any::type_name::<K>(),
            std::any::type_name::<V>()
        );
    }
    check::<(), ()>();
    check::<(), u8>();
    check::<(), u64>();
    check::<u8, u8>();
    check::<u64, u64>();
    check::<u32, [u8; 3]>();
    check::<u128, u8>();
    check::<(), u128>();
    check::<String, Bytes>();
    check::<Bytes, Vec<u8>>();
    check::<[u8; 40], [u64; 5]>();
    check::<Box<u8>, ()>();
}

/// Compiles only when `T` is not `Send` (two candidate impls then, one of which fails).
trait AmbiguousIfSend<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
#[allow(dead_code)]
struct IsSend;
impl<T: ?Sized + Send> AmbiguousIfSend<IsSend> for T {}

/// As [`AmbiguousIfSend`], for `Sync`.
trait AmbiguousIfSync<A> {
    fn some_item() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
#[allow(dead_code)]
struct IsSync;
impl<T: ?Sized + Sync> AmbiguousIfSync<IsSync> for T {}

#[test]
fn send_and_sync_follow_the_key_and_the_value() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Entry<(), u64>>();
    send_sync::<Entry<String, Bytes>>();
    // Not `Send` nor `Sync` when the key or the value is not.
    <Entry<Rc<u8>, u64> as AmbiguousIfSend<_>>::some_item();
    <Entry<u64, Rc<u8>> as AmbiguousIfSend<_>>::some_item();
    <Entry<Rc<u8>, u64> as AmbiguousIfSync<_>>::some_item();
    <Entry<u64, Rc<u8>> as AmbiguousIfSync<_>>::some_item();
    // `Cell` is `Send` but not `Sync`.
    fn send<T: Send>() {}
    send::<Entry<Cell<u8>, Cell<u8>>>();
    <Entry<Cell<u8>, u64> as AmbiguousIfSync<_>>::some_item();
    <Entry<u64, Cell<u8>> as AmbiguousIfSync<_>>::some_item();
}

#[test]
fn timestamps_are_valid_from_0_to_2_pow_62_minus_1() {
    assert_eq!(MAX_TIMESTAMP, 4_611_686_018_427_387_903);
    for ts in [0, 1, 1_700_000_000_000, MAX_TIMESTAMP] {
        assert!(valid_timestamp(ts), "{ts}");
        let e = Entry::<u64, u64>::new(ts, Some(u64::MAX), u64::MAX, Vec::new());
        assert_eq!(e.parts(), (ts, Some(&u64::MAX), &u64::MAX, &[][..]));
        let e = Entry::<(), u64>::plain(ts, 7);
        assert_eq!(e.timestamp(), ts);
        let h = vec![("h".to_owned(), None)];
        let e = Entry::<(), u64>::new(ts, None, 7, h.clone());
        assert_eq!(e.parts(), (ts, None, &7, &h[..]));
    }
    for ts in [-1, i64::MIN, MAX_TIMESTAMP + 1, i64::MAX, 1 << 63 >> 1] {
        assert!(!valid_timestamp(ts), "{ts}");
    }
}

#[test]
fn every_shape_keeps_its_fields() {
    let headers = || {
        vec![
            ("a".to_owned(), Some(Bytes::from_static(b"x"))),
            ("b".to_owned(), None),
        ]
    };
    // A key of size 0, absent and present.
    let e = Entry::<(), u64>::new(5, None, 9, Vec::new());
    assert_eq!(e.parts(), (5, None, &9, &[][..]));
    assert!(e.is_plain() && !e.has_headers());
    let e = Entry::<(), u64>::new(5, Some(()), 9, Vec::new());
    assert_eq!((e.key(), e.value(), e.timestamp()), (Some(&()), &9, 5));
    assert!(e.is_plain());
    assert_eq!(e.clone().into_parts(), (5, Some(()), 9, Vec::new()));
    let e = Entry::<(), u64>::new(5, Some(()), 9, headers());
    assert!(!e.is_plain() && e.has_headers());
    assert_eq!(e.parts(), (5, Some(&()), &9, &headers()[..]));
    assert_eq!(e.clone().into_parts(), (5, Some(()), 9, headers()));
    // A key with bytes, absent and present, with and without headers.
    for key in [None, Some("k".to_owned())] {
        for h in [Vec::new(), headers()] {
            let e = Entry::new(3, key.clone(), Bytes::from_static(b"v"), h.clone());
            assert_eq!(e.key(), key.as_ref());
            assert_eq!(e.value(), &Bytes::from_static(b"v"));
            assert_eq!(e.headers(), &h[..]);
            assert_eq!(e.has_headers(), !h.is_empty());
            let c = e.clone();
            assert_eq!(c.parts(), e.parts());
            assert_eq!(
                e.into_parts(),
                (3, key.clone(), Bytes::from_static(b"v"), h.clone())
            );
        }
    }
    // Empty headers do not box.
    assert!(Entry::<(), u64>::new(0, None, 1, Vec::with_capacity(4)).is_plain());
}

/// Counts its live instances (made minus dropped) in a shared cell; panics on clone when
/// told to.
struct Counted {
    live: Rc<Cell<isize>>,
    panic_on_clone: bool,
    id: u32,
}

impl Counted {
    fn new(live: &Rc<Cell<isize>>, id: u32, panic_on_clone: bool) -> Self {
        live.set(live.get() + 1);
        Self {
            live: Rc::clone(live),
            panic_on_clone,
            id,
        }
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        assert!(!self.panic_on_clone, "told to panic");
        Self::new(&self.live, self.id, false)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.set(self.live.get() - 1);
    }
}

/// Every entry of counted keys and values, in every shape.
fn shapes(
    live: &Rc<Cell<isize>>,
    panic_key: bool,
    panic_value: bool,
) -> Vec<Entry<Counted, Counted>> {
    let mut all = Vec::new();
    for key in [false, true] {
        for headers in [false, true] {
            let k = key.then(|| Counted::new(live, 1, panic_key));
            let v = Counted::new(live, 2, panic_value);
            let h = if headers {
                vec![("h".to_owned(), None)]
            } else {
                Vec::new()
            };
            all.push(Entry::new(1, k, v, h));
        }
    }
    all
}

#[test]
fn every_key_and_value_is_dropped_once() {
    let live = Rc::new(Cell::new(0));
    let all = shapes(&live, false, false);
    assert_eq!(live.get(), 6);
    let clones = all.clone();
    assert_eq!(live.get(), 12);
    for (a, b) in all.iter().zip(&clones) {
        assert_eq!(a.key().map(|k| k.id), b.key().map(|k| k.id));
        assert_eq!(a.value().id, b.value().id);
    }
    drop(all);
    assert_eq!(live.get(), 6);
    // Moved out whole: the parts hold the only instances left.
    let parts: Vec<_> = clones.into_iter().map(Entry::into_parts).collect();
    assert_eq!(live.get(), 6);
    drop(parts);
    assert_eq!(live.get(), 0);
}

#[test]
fn a_panicking_clone_drops_what_it_made_and_nothing_else() {
    for (panic_key, panic_value) in [(true, false), (false, true)] {
        let live = Rc::new(Cell::new(0));
        let all = shapes(&live, panic_key, panic_value);
        let before = live.get();
        for e in &all {
            let cloned = catch_unwind(AssertUnwindSafe(|| e.clone()));
            // A clone that panicked leaves no instance behind (the key cloned before a
            // value that panicked is dropped); one that did not panic made its own.
            if let Ok(c) = cloned {
                assert!(live.get() > before);
                drop(c);
            }
            assert_eq!(live.get(), before, "{panic_key} {panic_value}");
        }
        drop(all);
        assert_eq!(live.get(), 0);
    }
}

/// Panics when dropped, after counting the drop.
struct PanicOnDrop(Rc<Cell<isize>>);

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
        panic!("told to panic");
    }
}

#[test]
fn a_key_that_panics_when_dropped_still_lets_the_value_drop() {
    let live = Rc::new(Cell::new(0));
    let key = PanicOnDrop(Rc::clone(&live));
    live.set(1);
    let value = Counted::new(&live, 2, false);
    let e = Entry::new(0, Some(key), value, Vec::new());
    assert!(catch_unwind(AssertUnwindSafe(|| drop(e))).is_err());
    assert_eq!(live.get(), 0);
}
