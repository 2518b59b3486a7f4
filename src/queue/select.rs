//! Waiting on several queue operations at once: [`Select`] and the
//! [`select!`](crate::select!) macro, with crossbeam-channel's API and fairness.
//!
//! # How a select waits
//!
//! Each round tries the arms in a random order (a fresh shuffle per round, so among ready
//! arms each is equally likely to go first). A receive arm *performs* its receive when it
//! tries (`try_recv`): the message is then held for the caller, so a selected receive
//! always completes. A send arm of [`select!`](crate::select!) performs a `try_send` with its
//! message (built the first time the arm is tried while the send could complete); a send
//! arm of [`Select`] only checks
//! that a send would complete now, and [`SelectedOperation::send`] sends.
//!
//! When no arm is ready after a short spin-and-yield, the selecting thread *watches* every
//! queue: it adds its [`Signal`] to the wait set its operation would park in (the array
//! flavour's senders or receivers, the list flavour's receivers, the rendezvous flavour's
//! state), tries every arm again, and parks on the signal. Any wake-up of those wait sets
//! raises the signal. No notification is lost: watching registers as a parked waiter
//! does (increment, then a `SeqCst` fence) before the re-check, so the notifier's load of
//! the waiter count after its progress and the selector's re-check after its registration
//! are ordered one way or the other (Dekker, as in `WaitSet`); an owned array queue's
//! notifier pays only a light fence, so watching it issues the heavy one. Timers need no
//! watching: the park ends at the earliest instant a timer arm is due.
//!
//! A rendezvous queue hands a message only to a receiver that is there: a watching select
//! counts as one for `try_send`, takes a message handed to it before it stops watching,
//! and while it watches, tries none of its own rendezvous send arms (it stops watching
//! first), so two selects offering each other rendezvous sends never wait on each other.
//!
//! # Notes for contributors
//!
//! `select!`/`Select` (`src/queue/select.rs`, the macro in `select_macro.rs`) run over every
//! flavour through one small trait (`Arm`). Its loom models sit beside it
//! (`queue::select::loom_models`): `a_select_sees_a_disconnect` deadlocks when
//! `WaitSet::watch` loses its `SeqCst` fence or when the select's re-check moves before its
//! registration, and so do `a_select_races_a_send_and_a_disconnect` and
//! `a_select_send_races_a_receive_and_a_disconnect` (each selects until it has seen both events,
//! removing an arm once its event is seen, so each event in turn is the only one that can end a
//! select; the unbounded arm goes first because its empty look has no fence of its own).
//! `a_select_send_waits_for_room` fails only on the second weakening (the bounded queue's `Full`
//! look fences by itself). Under loom a select skips its spin phase (a spin hint is a loom yield,
//! which would let the other threads finish before the select ever registers).
//!
//! To check the queue against crossbeam-channel's own expectations, copy its
//! `tests/{select,select_macro,ready,list,zero,array,after,tick,never,iter,same_channel,golang,
//! thread_locals}.rs`
//! into a scratch crate outside the repository (`crossbeam_channel` → `logbus::queue`; dev
//! dependencies `crossbeam-utils`, `rand` 0.8, `num_cpus`, `signal-hook`; `mpsc.rs` needs
//! crossbeam's internals and does not port) and run them there; never commit them. All pass
//! except two documented differences: `array.rs`'s `panic_on_drop` (logbus
//! drops the messages after a panicking one, crossbeam leaks them) and `zero.rs`'s
//! `recv_in_send` (a rendezvous send arm's message is built before a receiver is reserved, so
//! that test waits for good; run `zero.rs` with `--skip recv_in_send`). Whatever they find gets a
//! test of our own in `tests/queue/queue_select.rs` (or the flavour's test file).

use std::cell::Cell;
use std::fmt;
use std::hash::BuildHasher;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::error::{
    ReadyTimeoutError, RecvError, SelectTimeoutError, SendError, TryReadyError, TrySelectError,
    TrySendError,
};
use super::{Flavor, Receiver, Sender};
use crate::sync::{time, Arc, Backoff, Signal};

/// What one try of an arm found.
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
    /// The operation completed (or, for a readiness check, could complete now).
    Done,
    /// It cannot complete now.
    NotReady,
    /// It could complete, but not while the select watches (a rendezvous send): stop
    /// watching and try again.
    AfterWatching,
}

/// A selecting thread's signal, as the arms see it. Opaque.
#[doc(hidden)]
pub struct Watch(Arc<Signal>);

/// One arm of a select. Implemented by the arm types of [`select!`](crate::select!) and
/// [`Select`]; not for use outside this crate's macro.
#[doc(hidden)]
pub trait Arm {
    /// Tries the operation once; `watching` says whether the select watches the queues now.
    fn attempt(&mut self, watching: bool) -> Step;
    /// Starts watching the arm's queue (see the module docs).
    fn watch(&self, w: &Watch);
    /// Stops watching it.
    fn unwatch(&self, w: &Watch);
    /// When a timer arm is next due.
    fn due(&self) -> Option<Instant>;
    /// The select is about to park: a rendezvous send puts its message where a receiver
    /// can take it, as a parked `send` does (`true` if it did). At most one arm per park.
    fn offer(&mut self, _w: &Watch) -> bool {
        false
    }
    /// The park ended: settles an offer. `true` when a receiver took the message (the arm
    /// completed); otherwise the message is back and the arm tries as before.
    fn withdraw(&mut self) -> bool {
        false
    }
}

/// Where an arm's queue watch goes.
fn watch_flavor<T>(f: &Flavor<T>, w: &Watch, sending: bool, on: bool) {
    match f {
        Flavor::Array(ch) => {
            if on {
                ch.watch(&w.0, sending);
            } else {
                ch.unwatch(&w.0, sending);
            }
        }
        // Sends never wait on an unbounded queue: nothing to watch.
        Flavor::List(ch) if !sending => {
            if on {
                ch.watch(&w.0);
            } else {
                ch.unwatch(&w.0);
            }
        }
        Flavor::List(_) => {}
        Flavor::Zero(ch) => {
            if on {
                ch.watch(&w.0, !sending);
            } else {
                ch.unwatch(&w.0, !sending);
            }
        }
        Flavor::Timer(..) => {}
    }
}

/// Whether a receive would complete now (a message, or disconnected).
fn recv_ready<T>(f: &Flavor<T>) -> bool {
    match f {
        Flavor::Array(ch) => ch.len() > 0 || ch.is_disconnected(),
        Flavor::List(ch) => ch.len() > 0 || ch.is_disconnected(),
        Flavor::Zero(ch) => ch.recv_ready(),
        Flavor::Timer(ch, to_msg) => to_msg.is_some() && ch.len() > 0,
    }
}

/// Whether a send would complete now (room, a receiver waiting, or disconnected).
fn send_ready<T>(f: &Flavor<T>) -> bool {
    match f {
        Flavor::Array(ch) => ch.is_disconnected() || ch.len() < ch.capacity(),
        Flavor::List(_) | Flavor::Timer(..) => true,
        Flavor::Zero(ch) => ch.send_ready(),
    }
}

fn timer_due<T>(f: &Flavor<T>) -> Option<Instant> {
    match f {
        Flavor::Timer(ch, Some(_)) => ch.due(),
        _ => None,
    }
}

/// A receive arm: performs the receive and keeps the outcome until the caller takes it.
#[doc(hidden)]
pub struct RecvArm<'a, T> {
    rx: &'a Receiver<T>,
    got: Option<Result<T, RecvError>>,
}

impl<'a, T> RecvArm<'a, T> {
    #[doc(hidden)]
    pub fn new(rx: &'a Receiver<T>) -> Self {
        Self { rx, got: None }
    }

    /// The received message, or `RecvError` when the queue was empty and disconnected.
    #[doc(hidden)]
    pub fn take(&mut self) -> Result<T, RecvError> {
        self.got
            .take()
            .expect("a selected receive arm holds its outcome")
    }
}

impl<T> Arm for RecvArm<'_, T> {
    fn attempt(&mut self, _watching: bool) -> Step {
        match self.rx.inner.try_recv() {
            Ok(m) => {
                self.got = Some(Ok(m));
                Step::Done
            }
            Err(super::TryRecvError::Disconnected) => {
                self.got = Some(Err(RecvError));
                Step::Done
            }
            Err(super::TryRecvError::Empty) => Step::NotReady,
        }
    }

    fn watch(&self, w: &Watch) {
        watch_flavor(&self.rx.inner, w, false, true);
    }

    fn unwatch(&self, w: &Watch) {
        watch_flavor(&self.rx.inner, w, false, false);
    }

    fn due(&self) -> Option<Instant> {
        timer_due(&self.rx.inner)
    }
}

/// A send arm of [`select!`](crate::select!): builds its message the first time it is
/// tried with room (or a receiver, or disconnected), then `try_send`s it; the outcome waits
/// for the caller.
#[doc(hidden)]
pub struct SendArm<'a, T, F> {
    tx: &'a Sender<T>,
    make: Option<F>,
    msg: Option<T>,
    /// The ticket of a message offered on a rendezvous queue while the select parks.
    offered: Option<u64>,
    sent: Option<Result<(), SendError<T>>>,
}

impl<'a, T, F: FnOnce() -> T> SendArm<'a, T, F> {
    #[doc(hidden)]
    pub fn new(tx: &'a Sender<T>, make: F) -> Self {
        Self {
            tx,
            make: Some(make),
            msg: None,
            offered: None,
            sent: None,
        }
    }

    /// `Ok` once sent, the message back when every receiver was gone.
    #[doc(hidden)]
    pub fn take(&mut self) -> Result<(), SendError<T>> {
        self.sent
            .take()
            .expect("a selected send arm holds its outcome")
    }
}

impl<T, F: FnOnce() -> T> Arm for SendArm<'_, T, F> {
    fn attempt(&mut self, watching: bool) -> Step {
        if watching && matches!(&*self.tx.inner, Flavor::Zero(_)) {
            // A rendezvous hand-over may wait for the receiver: never while watching.
            return if send_ready(&self.tx.inner) {
                Step::AfterWatching
            } else {
                Step::NotReady
            };
        }
        let msg = match self.msg.take() {
            Some(m) => m,
            // The message is built only once the send could complete (crossbeam builds it
            // once the arm is chosen): an arm that never gets room never runs the user's
            // expression. Another sender may still take the room first; the message then
            // waits for the next try.
            None if !send_ready(&self.tx.inner) => return Step::NotReady,
            None => match self.make.take() {
                Some(make) => make(),
                None => return Step::NotReady,
            },
        };
        match self.tx.try_send(msg) {
            Ok(()) => {
                self.sent = Some(Ok(()));
                Step::Done
            }
            Err(TrySendError::Disconnected(m)) => {
                self.sent = Some(Err(SendError(m)));
                Step::Done
            }
            Err(TrySendError::Full(m)) => {
                self.msg = Some(m);
                Step::NotReady
            }
        }
    }

    fn watch(&self, w: &Watch) {
        watch_flavor(&self.tx.inner, w, true, true);
    }

    fn unwatch(&self, w: &Watch) {
        watch_flavor(&self.tx.inner, w, true, false);
    }

    fn due(&self) -> Option<Instant> {
        None
    }

    fn offer(&mut self, w: &Watch) -> bool {
        let Flavor::Zero(ch) = &*self.tx.inner else {
            return false;
        };
        let msg = match self.msg.take() {
            Some(m) => m,
            None => match self.make.take() {
                Some(make) => make(),
                None => return false,
            },
        };
        match ch.offer(msg, &w.0) {
            Ok(ticket) => {
                self.offered = Some(ticket);
                true
            }
            Err(msg) => {
                self.msg = Some(msg);
                false
            }
        }
    }

    fn withdraw(&mut self) -> bool {
        let (Some(ticket), Flavor::Zero(ch)) = (self.offered.take(), &*self.tx.inner) else {
            return false;
        };
        match ch.withdraw(ticket) {
            None => {
                self.sent = Some(Ok(()));
                true
            }
            Some(msg) => {
                self.msg = Some(msg);
                false
            }
        }
    }
}

/// How long a select may wait.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    /// Not at all (`default`, `try_select`).
    No,
    /// Until the instant, or for good with `None`.
    Until(Option<Instant>),
}

impl Wait {
    /// Waiting at most `timeout`.
    #[doc(hidden)]
    pub fn timeout(timeout: Duration) -> Self {
        Wait::Until(time::deadline_after(timeout))
    }
}

/// A random permutation of the arms, new each round; on the stack up to 32 arms (all a
/// `select!` can have), so a select allocates nothing.
struct Order {
    idx: OrderIdx,
    /// Kept in the arms' order (`select_biased!`, `Select::new_biased`).
    biased: bool,
}

enum OrderIdx {
    Inline([u8; 32], usize),
    Heap(Vec<usize>),
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// xorshift64*, seeded per thread: the
/// shuffles need no quality beyond "each ready arm equally likely first".
fn random() -> u64 {
    RNG.with(|c| {
        let mut x = c.get();
        if x == 0 {
            // std's per-thread random hash keys, drawn from the OS once per process.
            x = std::collections::hash_map::RandomState::new().hash_one(0x9E37_79B9u64) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

impl Order {
    fn new(n: usize, biased: bool) -> Self {
        let idx = if n <= 32 {
            let mut idx = [0u8; 32];
            for (i, x) in idx.iter_mut().enumerate().take(n) {
                *x = i as u8;
            }
            OrderIdx::Inline(idx, n)
        } else {
            OrderIdx::Heap((0..n).collect())
        };
        Order { idx, biased }
    }

    fn len(&self) -> usize {
        match &self.idx {
            OrderIdx::Inline(_, n) => *n,
            OrderIdx::Heap(v) => v.len(),
        }
    }

    /// The arm tried `k`-th this round.
    fn get(&self, k: usize) -> usize {
        match &self.idx {
            OrderIdx::Inline(idx, _) => usize::from(idx[k]),
            OrderIdx::Heap(v) => v[k],
        }
    }

    /// Fisher–Yates, unless biased. Under loom the order stays fixed: a model must replay
    /// identically.
    fn shuffle(&mut self) {
        if self.biased || cfg!(logbus_loom) {
            return;
        }
        for i in (1..self.len()).rev() {
            let j = (random() % (i as u64 + 1)) as usize;
            match &mut self.idx {
                OrderIdx::Inline(idx, _) => idx.swap(i, j),
                OrderIdx::Heap(v) => v.swap(i, j),
            }
        }
    }
}

/// Runs a select over `arms`: the index of the arm that completed, or `None` when `wait`
/// ran out first. An empty list waits out `wait` (forever, with no deadline). `biased`
/// tries the arms in their order every round (`select_biased!`), so the first ready arm
/// wins; otherwise each round shuffles them.
#[doc(hidden)]
pub fn run(arms: &mut [&mut dyn Arm], wait: Wait, biased: bool) -> Option<usize> {
    let deadline = match wait {
        Wait::No => None,
        Wait::Until(d) => d,
    };
    let mut order = Order::new(arms.len(), biased);
    let mut backoff = Backoff::new();
    loop {
        order.shuffle();
        for k in 0..order.len() {
            let i = order.get(k);
            if arms[i].attempt(false) == Step::Done {
                return Some(i);
            }
        }
        if matches!(wait, Wait::No) || deadline.is_some_and(time::expired) {
            // A second look at every arm, all of it after the first: "nothing ready" then
            // means each arm was seen not ready once more after every other arm was. With
            // one look, a select over two queues could miss a message that moved from one
            // to the other while it looked (each arm looked at just when it held none),
            // which crossbeam's select never reports (its `linearizable_*` tests).
            for k in 0..order.len() {
                let i = order.get(k);
                if arms[i].attempt(false) == Step::Done {
                    return Some(i);
                }
            }
            return None;
        }
        // Under loom straight to watching: a spin hint there is a loom yield, which would run
        // the other threads to completion before the select ever registers, and the models
        // would never see an operation land between its last look and its registration.
        if !cfg!(logbus_loom) && !backoff.is_completed() {
            backoff.snooze();
            continue;
        }
        let w = Watch(Signal::for_this_thread());
        for a in arms.iter() {
            a.watch(&w);
        }
        let mut found = try_watching(arms, &order);
        if found.is_none() {
            let due = arms.iter().filter_map(|a| a.due()).min();
            let wake = match (due, deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // One rendezvous send (at most) offers its message while the select parks,
            // so a receiver's `try_recv` finds it as it would a parked sender's; settled
            // before any other arm is tried, so the select never completes two arms.
            let offered = (0..order.len())
                .map(|k| order.get(k))
                .find(|&i| arms[i].offer(&w));
            // With no arm and no deadline this blocks for good, as crossbeam's does.
            w.0.wait(wake);
            if let Some(i) = offered {
                if arms[i].withdraw() {
                    found = Some(Some(i));
                }
            }
            if found.is_none() {
                order.shuffle();
                found = try_watching(arms, &order);
            }
        }
        for a in arms.iter() {
            a.unwatch(&w);
        }
        if let Some(Some(i)) = found {
            return Some(i);
        }
    }
}

/// Tries the arms while watching: `Some(Some(i))` when arm `i` completed, `Some(None)` when
/// one is ready only after watching ends, `None` when none is ready.
fn try_watching(arms: &mut [&mut dyn Arm], order: &Order) -> Option<Option<usize>> {
    for k in 0..order.len() {
        let i = order.get(k);
        match arms[i].attempt(true) {
            Step::Done => return Some(Some(i)),
            Step::AfterWatching => return Some(None),
            Step::NotReady => {}
        }
    }
    None
}

/// A message received by a [`Select`], its type erased until
/// [`SelectedOperation::recv`] names it: a boxed `Result<T, RecvError>`.
struct Received {
    ptr: *mut (),
    drop_fn: unsafe fn(*mut ()),
}

/// Drops the box behind an erased pointer.
///
/// # Safety
///
/// `p` came from `Box::<U>::into_raw` and is dropped once.
unsafe fn drop_boxed<U>(p: *mut ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p.cast::<U>()) });
}

impl Received {
    fn new<T>(outcome: Result<T, RecvError>) -> Self {
        Self {
            ptr: Box::into_raw(Box::new(outcome)).cast(),
            drop_fn: drop_boxed::<Result<T, RecvError>>,
        }
    }

    /// # Safety
    ///
    /// `T` is the type this was made with.
    unsafe fn take<T>(self) -> Result<T, RecvError> {
        let ptr = self.ptr.cast::<Result<T, RecvError>>();
        std::mem::forget(self);
        // SAFETY: made by `new::<T>` (the caller's contract), and ownership moves out once:
        // `forget` above keeps `Drop` from freeing it again.
        *unsafe { Box::from_raw(ptr) }
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `drop_fn` were made together by `new`, and `take` forgets the
        // value it moves out, so this runs at most once per box.
        unsafe { (self.drop_fn)(self.ptr) }
    }
}

/// A handle a [`Select`] operates on, its message type erased.
trait Handle: Send + Sync {
    /// The queue's identity.
    fn id(&self) -> usize;
    /// Whether the operation could complete now.
    fn ready(&self) -> bool;
    /// A receive's attempt: its outcome when it completed.
    fn receive(&self) -> Option<Received>;
    /// Whether this is a send on a rendezvous queue (see `Step::AfterWatching`).
    fn rendezvous_send(&self) -> bool;
    fn watch(&self, w: &Watch, on: bool);
    fn due(&self) -> Option<Instant>;
}

impl<T: Send> Handle for Receiver<T> {
    fn id(&self) -> usize {
        self.inner.id()
    }

    fn ready(&self) -> bool {
        recv_ready(&self.inner)
    }

    fn receive(&self) -> Option<Received> {
        match self.inner.try_recv() {
            Ok(m) => Some(Received::new(Ok(m))),
            Err(super::TryRecvError::Disconnected) => Some(Received::new::<T>(Err(RecvError))),
            Err(super::TryRecvError::Empty) => None,
        }
    }

    fn rendezvous_send(&self) -> bool {
        false
    }

    fn watch(&self, w: &Watch, on: bool) {
        watch_flavor(&self.inner, w, false, on);
    }

    fn due(&self) -> Option<Instant> {
        timer_due(&self.inner)
    }
}

impl<T: Send> Handle for Sender<T> {
    fn id(&self) -> usize {
        self.inner.id()
    }

    fn ready(&self) -> bool {
        send_ready(&self.inner)
    }

    fn receive(&self) -> Option<Received> {
        None
    }

    fn rendezvous_send(&self) -> bool {
        matches!(&*self.inner, Flavor::Zero(_))
    }

    fn watch(&self, w: &Watch, on: bool) {
        watch_flavor(&self.inner, w, true, on);
    }

    fn due(&self) -> Option<Instant> {
        None
    }
}

/// One of [`Select`]'s operations, as added.
#[derive(Clone, Copy)]
struct Op<'a> {
    handle: &'a dyn Handle,
    receiving: bool,
}

/// An operation of a [`Select`] during one run: a receive performs itself (unless only
/// readiness is asked), a send only checks that it could complete.
struct OpArm<'a> {
    op: Op<'a>,
    check_only: bool,
    got: Option<Received>,
}

impl Arm for OpArm<'_> {
    fn attempt(&mut self, watching: bool) -> Step {
        let h = self.op.handle;
        if self.op.receiving && !self.check_only {
            return match h.receive() {
                Some(r) => {
                    self.got = Some(r);
                    Step::Done
                }
                None => Step::NotReady,
            };
        }
        match (h.ready(), watching && h.rendezvous_send()) {
            (false, _) => Step::NotReady,
            // As in `SendArm`: a rendezvous send is made after watching ends.
            (true, true) => Step::AfterWatching,
            (true, false) => Step::Done,
        }
    }

    fn watch(&self, w: &Watch) {
        self.op.handle.watch(w, true);
    }

    fn unwatch(&self, w: &Watch) {
        self.op.handle.watch(w, false);
    }

    fn due(&self) -> Option<Instant> {
        self.op.handle.due()
    }
}

/// Waits on a set of queue operations and picks one that is ready, as crossbeam-channel's
/// `Select`: add receive and send operations, then `select` (or `try_select`,
/// `select_timeout`, `select_deadline`) and complete the returned operation, or `ready`
/// (and its forms) to learn which one is ready without performing it. When several are
/// ready, each is equally likely to be chosen ([`Select::new_biased`]: the first added).
///
/// A selected receive has already taken its message (so it always completes); a selected
/// send could complete when it was chosen, and [`SelectedOperation::send`] completes it at
/// once unless another sender took the room meanwhile (it then waits as [`Sender::send`]
/// does). Messages must be `Send` (a `Select` may move between threads, as crossbeam's).
///
/// # Examples
///
/// ```
/// use logbus::queue::{bounded, unbounded, Select};
///
/// let (tx1, rx1) = bounded::<i32>(1);
/// let (tx2, rx2) = unbounded::<&str>();
/// tx2.send("two").unwrap();
///
/// let mut sel = Select::new();
/// let a = sel.recv(&rx1);
/// let b = sel.recv(&rx2);
/// let oper = sel.select();
/// match oper.index() {
///     i if i == a => println!("{:?}", oper.recv(&rx1)),
///     i if i == b => assert_eq!(oper.recv(&rx2), Ok("two")),
///     _ => unreachable!(),
/// }
/// # drop(tx1);
/// ```
#[derive(Clone, Default)]
pub struct Select<'a> {
    ops: Vec<Option<Op<'a>>>,
    /// Ready operations are chosen in the order they were added, not at random.
    biased: bool,
}

impl fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Select { .. }")
    }
}

impl<'a> Select<'a> {
    /// An empty set of operations; among ready ones, each is equally likely to be chosen.
    pub fn new() -> Self {
        Self {
            ops: Vec::new(),
            biased: false,
        }
    }

    /// An empty set of operations that, among ready ones, always chooses the one added
    /// first (as [`select_biased!`](crate::select_biased!) does): no fairness, and an
    /// operation that is always ready starves those after it.
    ///
    /// # Examples
    ///
    /// ```
    /// use logbus::queue::{unbounded, Select};
    ///
    /// let (tx1, rx1) = unbounded::<i32>();
    /// let (tx2, rx2) = unbounded::<i32>();
    /// tx1.send(1).unwrap();
    /// tx2.send(2).unwrap();
    ///
    /// let mut sel = Select::new_biased();
    /// let first = sel.recv(&rx1);
    /// sel.recv(&rx2);
    /// let oper = sel.select();
    /// assert_eq!(oper.index(), first);
    /// assert_eq!(oper.recv(&rx1), Ok(1));
    /// ```
    pub fn new_biased() -> Self {
        Self {
            ops: Vec::new(),
            biased: true,
        }
    }

    /// Adds a send operation on `s`; returns its index.
    pub fn send<T: Send>(&mut self, s: &'a Sender<T>) -> usize {
        self.ops.push(Some(Op {
            handle: s,
            receiving: false,
        }));
        self.ops.len() - 1
    }

    /// Adds a receive operation on `r`; returns its index.
    pub fn recv<T: Send>(&mut self, r: &'a Receiver<T>) -> usize {
        self.ops.push(Some(Op {
            handle: r,
            receiving: true,
        }));
        self.ops.len() - 1
    }

    /// Removes the operation with index `index` (indices of the others stay).
    ///
    /// # Panics
    ///
    /// If no operation has that index (never added, or removed already), as
    /// crossbeam-channel's does.
    pub fn remove(&mut self, index: usize) {
        let op = self.ops.get_mut(index).and_then(Option::take);
        assert!(op.is_some(), "no operation has index {index}");
    }

    fn run(&mut self, wait: Wait, check_only: bool) -> Option<(usize, Option<Received>)> {
        let mut live: Vec<(usize, OpArm<'a>)> = self
            .ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| {
                op.map(|op| {
                    (
                        i,
                        OpArm {
                            op,
                            check_only,
                            got: None,
                        },
                    )
                })
            })
            .collect();
        let mut arms: Vec<&mut dyn Arm> = live.iter_mut().map(|(_, a)| a as &mut dyn Arm).collect();
        let k = run(&mut arms, wait, self.biased)?;
        drop(arms);
        let (index, arm) = live.swap_remove(k);
        Some((index, arm.got))
    }

    fn selected(&self, (index, got): (usize, Option<Received>)) -> SelectedOperation<'a> {
        let op = self.ops[index].expect("a selected operation exists");
        SelectedOperation {
            index,
            queue: op.handle.id(),
            receiving: op.receiving,
            got,
            _handles: PhantomData,
        }
    }

    /// Waits until one operation completes (a receive) or could (a send), and returns it.
    pub fn select(&mut self) -> SelectedOperation<'a> {
        let chosen = self
            .run(Wait::Until(None), false)
            .expect("a select without deadline returns an operation");
        self.selected(chosen)
    }

    /// As [`select`](Self::select), without waiting.
    ///
    /// # Errors
    ///
    /// [`TrySelectError`] when no operation was ready.
    pub fn try_select(&mut self) -> Result<SelectedOperation<'a>, TrySelectError> {
        match self.run(Wait::No, false) {
            Some(c) => Ok(self.selected(c)),
            None => Err(TrySelectError),
        }
    }

    /// As [`select`](Self::select), waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`SelectTimeoutError`] when no operation was ready in time.
    pub fn select_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<SelectedOperation<'a>, SelectTimeoutError> {
        match self.run(Wait::timeout(timeout), false) {
            Some(c) => Ok(self.selected(c)),
            None => Err(SelectTimeoutError),
        }
    }

    /// As [`select`](Self::select), waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// [`SelectTimeoutError`] when no operation was ready in time.
    pub fn select_deadline(
        &mut self,
        deadline: Instant,
    ) -> Result<SelectedOperation<'a>, SelectTimeoutError> {
        match self.run(Wait::Until(Some(deadline)), false) {
            Some(c) => Ok(self.selected(c)),
            None => Err(SelectTimeoutError),
        }
    }

    /// Waits until an operation is ready and returns its index, performing nothing: the
    /// caller then tries it (another thread may have taken it meanwhile).
    pub fn ready(&mut self) -> usize {
        self.run(Wait::Until(None), true)
            .expect("a wait without deadline returns an operation")
            .0
    }

    /// As [`ready`](Self::ready), without waiting.
    ///
    /// # Errors
    ///
    /// [`TryReadyError`] when no operation was ready.
    pub fn try_ready(&mut self) -> Result<usize, TryReadyError> {
        self.run(Wait::No, true).map(|c| c.0).ok_or(TryReadyError)
    }

    /// As [`ready`](Self::ready), waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`ReadyTimeoutError`] when no operation was ready in time.
    pub fn ready_timeout(&mut self, timeout: Duration) -> Result<usize, ReadyTimeoutError> {
        self.run(Wait::timeout(timeout), true)
            .map(|c| c.0)
            .ok_or(ReadyTimeoutError)
    }

    /// As [`ready`](Self::ready), waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// [`ReadyTimeoutError`] when no operation was ready in time.
    pub fn ready_deadline(&mut self, deadline: Instant) -> Result<usize, ReadyTimeoutError> {
        self.run(Wait::Until(Some(deadline)), true)
            .map(|c| c.0)
            .ok_or(ReadyTimeoutError)
    }
}

/// The operation a [`Select`] chose; complete it with [`recv`](Self::recv) or
/// [`send`](Self::send) on the same handle. Dropping it without completing a selected
/// receive drops the message it took (crossbeam-channel panics instead).
pub struct SelectedOperation<'a> {
    index: usize,
    queue: usize,
    receiving: bool,
    /// A receive's outcome.
    got: Option<Received>,
    _handles: PhantomData<&'a ()>,
}

impl fmt::Debug for SelectedOperation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("SelectedOperation { .. }")
    }
}

impl SelectedOperation<'_> {
    /// The index [`Select::send`] or [`Select::recv`] returned for this operation.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Completes a selected receive: the message, or [`RecvError`] when the queue was
    /// empty and disconnected.
    ///
    /// # Errors
    ///
    /// [`RecvError`] as above.
    ///
    /// # Panics
    ///
    /// If `r` is not the receiver (or a clone of it) this operation was added with, as
    /// crossbeam-channel's does.
    pub fn recv<T>(mut self, r: &Receiver<T>) -> Result<T, RecvError> {
        assert!(
            self.receiving && self.queue == r.inner.id(),
            "passed a receiver that was not selected"
        );
        let got = self
            .got
            .take()
            .expect("a selected receive holds its outcome");
        // SAFETY: `got` was made by `Handle::receive` of a receiver of the same queue as `r`
        // (checked above; the selected handle is borrowed for `'a`, so the queue is alive
        // and its address names no other), and a queue holds messages of one type, so it
        // holds a `Result<T, RecvError>` of this `T`.
        unsafe { got.take::<T>() }
    }

    /// Completes a selected send of `msg`.
    ///
    /// # Errors
    ///
    /// [`SendError`] with the message when every receiver is gone.
    ///
    /// # Panics
    ///
    /// If `s` is not the sender (or a clone of it) this operation was added with.
    pub fn send<T>(self, s: &Sender<T>, msg: T) -> Result<(), SendError<T>> {
        assert!(
            !self.receiving && self.queue == s.inner.id(),
            "passed a sender that was not selected"
        );
        match s.try_send(msg) {
            Ok(()) => Ok(()),
            Err(TrySendError::Disconnected(m)) => Err(SendError(m)),
            Err(TrySendError::Full(m)) => s.send(m),
        }
    }
}

/// Loom models of a select's registration against the queues' notifications.
#[cfg(all(test, logbus_loom))]
mod loom_models;
