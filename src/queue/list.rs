//! The unbounded flavour: a linked list of fixed-size blocks of slots, as crossbeam-channel's
//! list flavour (itself after Dmitry Vyukov's unbounded MPMC queue).
//!
//! # Indices
//!
//! `head` and `tail` are *indices* counting slots from the start of the queue's life,
//! shifted left by one: bit 0 of `tail` is the disconnect mark, bit 0 of `head` says the
//! tail is known to be in a later block (so a receiver need not read `tail`, which senders
//! keep writing, until it reaches the end of its block). A block holds `CAP` slots (a page
//! of them for small messages, at least 31), and each block spans `LAP = CAP + 1` indices: the last one is never a slot but a
//! *boundary*, held while the thread that claimed the block's last slot installs the next
//! block (others wait it out). Indices grow by one per message and never wrap in practice
//! (2^63 messages).
//!
//! # Claims
//!
//! A send claims the slot at `tail` with one CAS, writes the message, and sets the slot's
//! `WRITE` bit. A receive claims the slot at `head` with one CAS (after checking that
//! `tail` is ahead), waits for `WRITE`, reads, and sets `READ`. A thread whose CAS fails
//! never touches the block it loaded: its pointer may be stale. A thread whose CAS succeeds
//! holds a slot of that block, and the block lives until that slot is read (see below).
//! So a claim is an operation's linearization point, and a receiver that finds a slot
//! claimed but not yet written waits for it instead of reporting `Empty`, as the bounded
//! flavour does.
//!
//! # Freeing and recycling blocks
//!
//! The receiver of a block's last slot starts its *destruction*: it walks the other slots
//! and stops at the first one not yet `READ`, marking it `DESTROY`; that slot's reader,
//! seeing the mark when it sets `READ`, carries on from there. The thread that finds every
//! slot read owns the block. Instead of freeing it, it resets it and parks it in one of
//! `SPARES` spare slots, where the sender of some later block's last slot picks it up to
//! link next: a queue whose receivers keep up allocates nothing per message, and one whose
//! length swings by at most `SPARES` blocks allocates nothing at all once warm.

use std::alloc::{self, Layout};
use std::mem::MaybeUninit;
use std::ptr;

use super::error::{RecvTimeoutError, TryRecvError};
use crate::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::sync::time::Instant;
use crate::sync::{Arc, Backoff, CachePadded, Signal, UnsafeCell, WaitSet, WakerSlot};

/// Bytes of slots a block aims at: one page, so that small messages cross a block
/// boundary (where senders and receivers wait for the thread linking the next block, and a
/// block is allocated and freed) once per few hundred messages.
#[cfg(not(logbus_loom))]
const BLOCK_BYTES: usize = 4096;
/// Slots per block at least (crossbeam-channel's fixed count), so large messages do not
/// cross a boundary every few sends.
#[cfg(not(logbus_loom))]
const MIN_CAP: usize = 31;
/// Slots per block at most.
#[cfg(not(logbus_loom))]
const MAX_CAP: usize = 255;

/// Indices are stored shifted left by this much; the bit below carries a flag.
const SHIFT: usize = 1;
/// On `tail`: disconnected. On `head`: the tail is in a later block.
const MARK_BIT: usize = 1;

/// Slot state: the message is written.
const WRITE: usize = 1;
/// Slot state: the message is read.
const READ: usize = 2;
/// Slot state: the block's destruction stopped here; this slot's reader continues it.
const DESTROY: usize = 4;

/// Freed blocks kept for reuse.
const SPARES: usize = 4;

struct Slot<T> {
    msg: UnsafeCell<MaybeUninit<T>>,
    state: AtomicUsize,
}

/// A block's header; its `CAP` slots follow it in the same allocation.
#[repr(C)]
struct Block<T> {
    /// The next block, set by the sender that claimed this block's last slot before it
    /// writes that slot.
    next: AtomicPtr<Block<T>>,
    /// Where the slots start (`repr(C)`: after `next`, aligned for a slot). Empty as a
    /// field: reach the slots through `Block::slot` only.
    slots_start: [Slot<T>; 0],
}

impl<T> Block<T> {
    /// Slots per block: about `BLOCK_BYTES` of them, within `MIN_CAP..=MAX_CAP`.
    #[cfg(not(logbus_loom))]
    const CAP: usize = {
        let fit = BLOCK_BYTES / std::mem::size_of::<Slot<T>>();
        if fit < MIN_CAP {
            MIN_CAP
        } else if fit > MAX_CAP {
            MAX_CAP
        } else {
            fit
        }
    };
    /// Small under loom, so that a model with three messages crosses a block boundary.
    #[cfg(logbus_loom)]
    const CAP: usize = 2;
    /// Indices per block: its slots plus the boundary.
    const LAP: usize = Self::CAP + 1;

    /// The allocation of a block: the header, then `CAP` slots.
    fn layout() -> Layout {
        let (layout, offset) = Layout::new::<Self>()
            .extend(Layout::array::<Slot<T>>(Self::CAP).expect("a block is a few KiB"))
            .expect("a block is a few KiB");
        debug_assert_eq!(offset, std::mem::offset_of!(Self, slots_start));
        layout.pad_to_align()
    }

    /// A new block: no next block, every slot empty.
    fn alloc() -> *mut Self {
        let layout = Self::layout();
        // SAFETY: the layout is not zero-sized (it holds `next`).
        let block = unsafe { alloc::alloc(layout) }.cast::<Self>();
        if block.is_null() {
            alloc::handle_alloc_error(layout);
        }
        // SAFETY: `block` is fresh, aligned and sized for the header and `CAP` slots, each
        // written once here before any reference to it is made.
        unsafe {
            ptr::addr_of_mut!((*block).next).write(AtomicPtr::new(ptr::null_mut()));
            let slots = ptr::addr_of_mut!((*block).slots_start).cast::<Slot<T>>();
            for i in 0..Self::CAP {
                slots.add(i).write(Slot {
                    msg: UnsafeCell::new(MaybeUninit::uninit()),
                    state: AtomicUsize::new(0),
                });
            }
        }
        block
    }

    /// Slot `i` of `block`.
    ///
    /// # Safety
    ///
    /// `block` came from `alloc`, is not freed for `'a`, and `i < CAP`.
    unsafe fn slot<'a>(block: *mut Self, i: usize) -> &'a Slot<T> {
        debug_assert!(i < Self::CAP);
        // SAFETY: the caller's contract; the pointer keeps the whole allocation's
        // provenance (taken from `block`, not from a reference to the header).
        unsafe { &*ptr::addr_of!((*block).slots_start).cast::<Slot<T>>().add(i) }
    }

    /// Frees a block (its messages, if any, are the caller's business: slots never drop
    /// them).
    ///
    /// # Safety
    ///
    /// `block` came from `alloc`, is freed once, and no other thread will access it.
    unsafe fn dealloc(block: *mut Self) {
        // SAFETY: the caller's contract: the header and `CAP` slots were written by `alloc`
        // and are ours alone; dropping them drops no message (`MaybeUninit`).
        unsafe {
            let slots = ptr::addr_of_mut!((*block).slots_start).cast::<Slot<T>>();
            ptr::drop_in_place(ptr::slice_from_raw_parts_mut(slots, Self::CAP));
            ptr::drop_in_place(block);
            alloc::dealloc(block.cast(), Self::layout());
        }
    }

    /// Waits until the next block is linked (its linker holds this block's last slot and
    /// links before it writes).
    fn wait_next(&self) -> *mut Self {
        let mut backoff = Backoff::new();
        loop {
            // Acquire: pairs with the Release store in `start_send`, so the new block's
            // contents (reset by its recycler or fresh) are visible.
            let next = self.next.load(Ordering::Acquire);
            if !next.is_null() {
                return next;
            }
            backoff.snooze();
        }
    }

    /// The message count of an index: slots before it, the boundary counting as the next
    /// block's start.
    fn messages_before(index: usize) -> usize {
        let mut i = index >> SHIFT;
        if i % Self::LAP == Self::CAP {
            i += 1;
        }
        i - i / Self::LAP
    }
}

struct Position<T> {
    index: AtomicUsize,
    block: AtomicPtr<Block<T>>,
}

/// An unbounded queue.
pub(crate) struct Channel<T> {
    head: CachePadded<Position<T>>,
    tail: CachePadded<Position<T>>,
    /// Blocks every slot of which has been read, reset, waiting to be linked again.
    spares: [AtomicPtr<Block<T>>; SPARES],
    /// Receivers parked on an empty queue.
    receivers: WaitSet,
}

// SAFETY: messages move between threads (hence `T: Send`), each slot is accessed by its
// claimant only (one sender writes it, then one receiver reads it, ordered by its `WRITE`
// bit), and blocks are freed or reused only by the thread that finds every slot read.
unsafe impl<T: Send> Send for Channel<T> {}
// SAFETY: as above; no `&T` is ever handed out, so `T: Sync` is not needed.
unsafe impl<T: Send> Sync for Channel<T> {}

impl<T> Channel<T> {
    pub(crate) fn new() -> Self {
        let first = Block::alloc();
        Self {
            head: CachePadded::new(Position {
                index: AtomicUsize::new(0),
                block: AtomicPtr::new(first),
            }),
            tail: CachePadded::new(Position {
                index: AtomicUsize::new(0),
                block: AtomicPtr::new(first),
            }),
            spares: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            receivers: WaitSet::new(),
        }
    }

    /// A block to link next: a spare if there is one, else a new one.
    fn take_block(&self) -> *mut Block<T> {
        for spare in &self.spares {
            // Relaxed: a hint, the swap decides.
            if !spare.load(Ordering::Relaxed).is_null() {
                // Acquire: pairs with the Release CAS in `recycle`, so the block's reset is
                // visible.
                let block = spare.swap(ptr::null_mut(), Ordering::Acquire);
                if !block.is_null() {
                    return block;
                }
            }
        }
        Block::alloc()
    }

    /// Takes back a block nobody else can reach any more: resets it and keeps it as a spare
    /// or frees it.
    ///
    /// # Safety
    ///
    /// `block` came from `take_block`/`Block::alloc`, holds no message, and no other thread
    /// will access it (every slot read, or it was never linked).
    unsafe fn recycle(&self, block: *mut Block<T>) {
        // SAFETY: the caller owns the block.
        let b = unsafe { &*block };
        // Relaxed: the block is this thread's alone; the Release CAS below publishes it.
        b.next.store(ptr::null_mut(), Ordering::Relaxed);
        for i in 0..Block::<T>::CAP {
            // SAFETY: as above, and `i < CAP`.
            // Relaxed: as above.
            unsafe { Block::slot(block, i) }
                .state
                .store(0, Ordering::Relaxed);
        }
        for spare in &self.spares {
            // Release: pairs with the Acquire swap in `take_block`. Relaxed on failure: the
            // block stays ours.
            if spare
                .compare_exchange(ptr::null_mut(), block, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
        // SAFETY: allocated by `Block::alloc`, owned by us, holds no message.
        unsafe { Block::dealloc(block) };
    }

    /// Continues the destruction of `block` from slot `start` (see the module docs).
    ///
    /// # Safety
    ///
    /// The caller read the block's last slot (`start == 0`) or read slot `start - 1` and
    /// found `DESTROY` on it.
    unsafe fn destroy(&self, block: *mut Block<T>, start: usize) {
        // The last slot's reader started this, so it is read: skip it.
        for i in start..Block::<T>::CAP - 1 {
            // SAFETY: the block lives until every slot is read, and slot `i` is not known
            // to be read yet.
            let slot = unsafe { Block::slot(block, i) };
            // Acquire: pairs with the reader's AcqRel `fetch_or(READ)`, so its read of the
            // message happens before the block is reused. AcqRel on the RMW likewise.
            if slot.state.load(Ordering::Acquire) & READ == 0
                && slot.state.fetch_or(DESTROY, Ordering::AcqRel) & READ == 0
            {
                // That slot's reader will continue.
                return;
            }
        }
        // SAFETY: every slot is read; nobody else reaches the block (senders and receivers
        // are past it, and stale pointers to it are never dereferenced).
        unsafe { self.recycle(block) };
    }

    /// Claims a slot for a message; `None` once the queue is disconnected.
    fn start_send(&self) -> Option<(*mut Block<T>, usize)> {
        let mut backoff = Backoff::new();
        let mut next_block: *mut Block<T> = ptr::null_mut();
        let claimed = loop {
            // Acquire: pairs with the Release of the index update that moved the tail into
            // its block, so the block pointer loaded next is that block or a later one.
            let tail = self.tail.index.load(Ordering::Acquire);
            if tail & MARK_BIT != 0 {
                break None;
            }
            let offset = (tail >> SHIFT) % Block::<T>::LAP;
            if offset == Block::<T>::CAP {
                // Another sender is linking the next block.
                backoff.snooze();
                continue;
            }
            // Acquire: pairs with the Release store of the block pointer below.
            let block = self.tail.block.load(Ordering::Acquire);
            if offset + 1 == Block::<T>::CAP && next_block.is_null() {
                // Taken before the claim, so nobody waits on our allocation at the boundary.
                next_block = self.take_block();
            }
            let new_tail = tail + (1 << SHIFT);
            // SeqCst: the claim is the send's linearization point; receivers' SeqCst loads
            // of `tail` in `start_recv` order against it (see there).
            match self.tail.index.compare_exchange_weak(
                tail,
                new_tail,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if offset + 1 == Block::<T>::CAP {
                        let next = std::mem::replace(&mut next_block, ptr::null_mut());
                        // Release: pairs with the Acquire load of senders that see the index
                        // move past the boundary.
                        self.tail.block.store(next, Ordering::Release);
                        // SeqCst RMW, not a store: `disconnect` may set the mark meanwhile.
                        self.tail.index.fetch_add(1 << SHIFT, Ordering::SeqCst);
                        // SAFETY: we hold the block's last slot, so it lives.
                        // Release: pairs with the Acquire in `wait_next`.
                        unsafe { (*block).next.store(next, Ordering::Release) };
                    }
                    break Some((block, offset));
                }
                Err(_) => backoff.spin(),
            }
        };
        if !next_block.is_null() {
            // SAFETY: never linked, so ours alone.
            unsafe { self.recycle(next_block) };
        }
        claimed
    }

    /// Sends `msg` (never waits for room).
    // Out of line: keeps the handles' dispatch small, so the bounded flavour's fast
    // path stays inlined into callers.
    #[inline(never)]
    pub(crate) fn send(&self, msg: T) -> Result<(), T> {
        let Some((block, offset)) = self.start_send() else {
            return Err(msg);
        };
        // SAFETY: we claimed this slot, so its block lives and no other thread accesses
        // the message cell until it sees `WRITE`.
        let slot = unsafe { Block::slot(block, offset) };
        // SAFETY: as above: the cell is ours to write.
        slot.msg
            .with_mut(|p| unsafe { p.write(MaybeUninit::new(msg)) });
        // SeqCst RMW: Release publishes the message to the receiver's Acquire load; the
        // SeqCst RMW is what lets `notify_all_after_rmw` skip its fence (a parked
        // receiver's check follows its registration fence, see `WaitSet`). An RMW because
        // a destroying receiver may set `DESTROY` on the slot concurrently.
        slot.state.fetch_or(WRITE, Ordering::SeqCst);
        self.receivers.notify_all_after_rmw();
        Ok(())
    }

    /// Claims the slot at the head, or says why there is none.
    fn start_recv(&self) -> Result<(*mut Block<T>, usize), TryRecvError> {
        let mut backoff = Backoff::new();
        loop {
            // Acquire: as in `start_send`, for the head.
            let head = self.head.index.load(Ordering::Acquire);
            let offset = (head >> SHIFT) % Block::<T>::LAP;
            if offset == Block::<T>::CAP {
                // Another receiver is moving the head to the next block.
                backoff.snooze();
                continue;
            }
            // Acquire: pairs with the Release store of the head's block pointer.
            let block = self.head.block.load(Ordering::Acquire);
            let mut new_head = head + (1 << SHIFT);
            if new_head & MARK_BIT == 0 {
                // SeqCst: an `Empty` answer is taken at this load, which must see every
                // send whose claim precedes it in the SeqCst order (so a thread that sent
                // on one queue and then found another empty, and one doing the reverse,
                // cannot both report `Empty`).
                let tail = self.tail.index.load(Ordering::SeqCst);
                if head >> SHIFT == tail >> SHIFT {
                    // Head never passes tail, so they were equal at this instant.
                    return Err(if tail & MARK_BIT != 0 {
                        TryRecvError::Disconnected
                    } else {
                        TryRecvError::Empty
                    });
                }
                if (head >> SHIFT) / Block::<T>::LAP != (tail >> SHIFT) / Block::<T>::LAP {
                    new_head |= MARK_BIT;
                }
            }
            // SeqCst: the claim is the receive's linearization point.
            match self.head.index.compare_exchange_weak(
                head,
                new_head,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if offset + 1 == Block::<T>::CAP {
                        // SAFETY: we hold the block's last slot, so it lives.
                        let next = unsafe { (*block).wait_next() };
                        let mut next_index = (new_head & !MARK_BIT) + (1 << SHIFT);
                        // SAFETY: `next` is linked, so it lives at least until its slots
                        // are read, which needs the head we are about to publish.
                        // Relaxed: a hint that the tail is further on; the receiver that
                        // trusts it still waits for each slot's `WRITE`.
                        if !unsafe { (*next).next.load(Ordering::Relaxed) }.is_null() {
                            next_index |= MARK_BIT;
                        }
                        // Release: pairs with the Acquire loads at the top of this loop.
                        self.head.block.store(next, Ordering::Release);
                        self.head.index.store(next_index, Ordering::Release);
                    }
                    return Ok((block, offset));
                }
                Err(_) => backoff.spin(),
            }
        }
    }

    /// Reads the claimed slot and does its share of the block's destruction.
    ///
    /// # Safety
    ///
    /// `(block, offset)` came from a successful `start_recv` and is read once.
    unsafe fn read(&self, block: *mut Block<T>, offset: usize) -> T {
        // SAFETY: the block lives until this slot is read (the caller's claim).
        let slot = unsafe { Block::slot(block, offset) };
        let mut backoff = Backoff::new();
        // Acquire: pairs with the sender's `fetch_or(WRITE)`, so the message is visible.
        // A claimed slot is written a few instructions after its claim; the wait is what
        // keeps `try_recv` linearizable (the send took effect at its claim).
        while slot.state.load(Ordering::Acquire) & WRITE == 0 {
            backoff.snooze();
        }
        // SAFETY: `WRITE` says the cell holds a message, and only this claimant reads it.
        let msg = slot.msg.with(|p| unsafe { p.read().assume_init() });
        if offset + 1 == Block::<T>::CAP {
            // SAFETY: we read the last slot.
            unsafe { self.destroy(block, 0) };
        } else if slot.state.fetch_or(READ, Ordering::AcqRel) & DESTROY != 0 {
            // AcqRel: Release hands our read of the cell to the destroyer; Acquire takes the
            // destroyer's view when we continue its work.
            // SAFETY: the destruction stopped at our slot, which is now read.
            unsafe { self.destroy(block, offset + 1) };
        }
        msg
    }

    // Out of line: keeps the handles' dispatch small, so the bounded flavour's fast
    // path stays inlined into callers.
    #[inline(never)]
    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        let (block, offset) = self.start_recv()?;
        // SAFETY: just claimed.
        Ok(unsafe { self.read(block, offset) })
    }

    // Out of line: keeps the handles' dispatch small, so the bounded flavour's fast
    // path stays inlined into callers.
    #[inline(never)]
    pub(crate) fn recv(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        let attempt = || match self.try_recv() {
            Ok(msg) => Some(Ok(msg)),
            Err(TryRecvError::Disconnected) => Some(Err(RecvTimeoutError::Disconnected)),
            Err(TryRecvError::Empty) => None,
        };
        let mut backoff = Backoff::new();
        loop {
            if let Some(r) = attempt() {
                return r;
            }
            if backoff.is_completed() {
                break;
            }
            backoff.snooze();
        }
        self.receivers
            .wait_until(deadline, attempt)
            .unwrap_or(Err(RecvTimeoutError::Timeout))
    }

    /// Polls a receive for a task (the async API): `Ready(Ok(msg))`, `Ready(Err(()))` once
    /// the queue is empty and disconnected; otherwise registers the task's waker in the
    /// receivers' set (as `recv` parks there) and returns `Pending`. The caller cancels
    /// `slot` ([`cancel_recv`](Self::cancel_recv)) if it stops polling before `Ready`.
    pub(crate) fn poll_recv(
        &self,
        cx: &mut std::task::Context<'_>,
        slot: &mut WakerSlot,
    ) -> std::task::Poll<Result<T, ()>> {
        // Senders notify with `notify_all_after_rmw`: `try_recv`'s SeqCst load of `tail`,
        // after the registration's fence, is the check that argument needs (as in `recv`).
        self.receivers.poll_until(
            cx,
            slot,
            || false,
            || match self.try_recv() {
                Ok(msg) => Some(Ok(msg)),
                Err(TryRecvError::Disconnected) => Some(Err(())),
                Err(TryRecvError::Empty) => None,
            },
        )
    }

    /// Takes a receive future's registration off the receivers' set.
    pub(crate) fn cancel_recv(&self, slot: &mut WakerSlot) {
        self.receivers.cancel_waker(slot);
    }

    /// Marks the queue disconnected and wakes parked receivers; `false` if it already was.
    pub(crate) fn disconnect(&self) -> bool {
        // SeqCst: ordered with the claims (a send after the mark fails, one before it is
        // received), and the notify's fence follows it.
        let first = self.tail.index.fetch_or(MARK_BIT, Ordering::SeqCst) & MARK_BIT == 0;
        if first {
            self.receivers.notify_all();
        }
        first
    }

    /// Whether the queue is disconnected.
    pub(crate) fn is_disconnected(&self) -> bool {
        // SeqCst: in the total order with the disconnect mark's `fetch_or`.
        self.tail.index.load(Ordering::SeqCst) & MARK_BIT != 0
    }

    /// A select watches the receivers' wait set (sends never wait): every wake-up raises
    /// `signal`. The caller re-checks the queue after this returns.
    pub(crate) fn watch(&self, signal: &Arc<Signal>) {
        self.receivers.watch(signal);
    }

    /// Undoes [`watch`](Self::watch).
    pub(crate) fn unwatch(&self, signal: &Arc<Signal>) {
        self.receivers.unwatch(signal);
    }

    /// The number of messages in the queue.
    pub(crate) fn len(&self) -> usize {
        loop {
            // SeqCst: a consistent snapshot of both indices (re-checked below).
            let tail = self.tail.index.load(Ordering::SeqCst);
            let head = self.head.index.load(Ordering::SeqCst);
            if self.tail.index.load(Ordering::SeqCst) == tail {
                return Block::<T>::messages_before(tail & !MARK_BIT)
                    - Block::<T>::messages_before(head & !MARK_BIT);
            }
        }
    }

    /// Moves the head's message out, for the queue's drop (every handle gone, so every
    /// claimed slot is written and no other thread touches the queue).
    fn take_for_discard(&mut self) -> Option<T> {
        // Relaxed: `&mut self`, nobody else accesses the queue.
        let head = self.head.index.load(Ordering::Relaxed) & !MARK_BIT;
        let tail = self.tail.index.load(Ordering::Relaxed) & !MARK_BIT;
        if head >> SHIFT == tail >> SHIFT {
            return None;
        }
        let offset = (head >> SHIFT) % Block::<T>::LAP;
        debug_assert!(
            offset < Block::<T>::CAP,
            "a finished send leaves no index at a boundary"
        );
        let block = self.head.block.load(Ordering::Relaxed);
        // SAFETY: the head block is live (only read blocks are recycled), and its slot at
        // the head was claimed and written by a send that has finished.
        let msg = unsafe {
            Block::slot(block, offset)
                .msg
                .with(|p| p.read().assume_init())
        };
        if offset + 1 == Block::<T>::CAP {
            // SAFETY: the block's last slot was sent, so its sender linked the next block.
            let next = unsafe { (*block).next.load(Ordering::Relaxed) };
            // SAFETY: the block is ours alone and holds no message any more (slots before
            // the head were read, the rest are past the tail or just moved out).
            unsafe { Block::dealloc(block) };
            self.head.block.store(next, Ordering::Relaxed);
            self.head
                .index
                .store(head + (2 << SHIFT), Ordering::Relaxed);
        } else {
            self.head
                .index
                .store(head + (1 << SHIFT), Ordering::Relaxed);
        }
        Some(msg)
    }
}

impl<T> Drop for Channel<T> {
    fn drop(&mut self) {
        // Every message left, each once, each after it left the list (a panic from one
        // resumes once the blocks are freed; `drop_remaining` says why the rest are caught).
        let panic = super::drop_remaining::drop_each(|| self.take_for_discard());
        let head = self.head.block.load(Ordering::Relaxed);
        // SAFETY: the last block, holding no message now; blocks before it were recycled or
        // freed by the receivers and `take_for_discard`.
        unsafe { Block::dealloc(head) };
        for spare in &self.spares {
            let block = spare.swap(ptr::null_mut(), Ordering::Relaxed);
            if !block.is_null() {
                // SAFETY: spares are reset blocks owned by the queue.
                unsafe { Block::dealloc(block) };
            }
        }
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;
    use crate::sync::atomic::AtomicUsize as Counter;
    use crate::sync::{thread, Arc};

    #[derive(Debug)]
    struct Tracked(Arc<Counter>, u64);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn messages_before_skips_the_boundaries() {
        type B = Block<u64>;
        let at = |block: usize, offset: usize| (block * B::LAP + offset) << SHIFT;
        assert_eq!(B::messages_before(at(0, 0)), 0);
        assert_eq!(B::messages_before(at(0, 5)), 5);
        assert_eq!(B::messages_before(at(0, B::CAP)), B::CAP);
        assert_eq!(B::messages_before(at(1, 0)), B::CAP);
        assert_eq!(B::messages_before(at(3, 2) | MARK_BIT), 3 * B::CAP + 2);
    }

    #[test]
    fn a_block_holds_a_page_of_small_messages_and_31_large_ones() {
        assert_eq!(Block::<u64>::CAP, MAX_CAP);
        assert_eq!(Block::<()>::CAP, MAX_CAP);
        assert_eq!(Block::<[u64; 5]>::CAP, BLOCK_BYTES / 48);
        assert_eq!(Block::<[u8; 1024]>::CAP, MIN_CAP);
        assert!(Block::<[u64; 5]>::layout().size() <= BLOCK_BYTES + 8);
        let big = Block::<[u8; 1024]>::layout();
        assert!(big.size() >= 8 + MIN_CAP * 1032 && big.size() % big.align() == 0);
    }

    #[test]
    fn large_messages_cross_blocks_in_order() {
        let ch = Channel::new();
        let n = 2 * Block::<[u64; 128]>::CAP as u64 + 3;
        for round in 0..2 {
            for i in 0..n {
                ch.send([i; 128]).unwrap();
            }
            assert_eq!(ch.len(), n as usize);
            for i in 0..n {
                assert_eq!(ch.try_recv(), Ok([i; 128]), "round {round}");
            }
        }
        assert_eq!(ch.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn fifo_across_blocks_with_len() {
        let ch = Channel::new();
        let n = 3 * Block::<u64>::CAP as u64 + 5;
        for i in 0..n {
            ch.send(i).unwrap();
            assert_eq!(ch.len(), i as usize + 1);
        }
        for i in 0..n {
            assert_eq!(ch.try_recv(), Ok(i));
        }
        assert_eq!(ch.len(), 0);
        assert_eq!(ch.try_recv(), Err(TryRecvError::Empty));
        assert!(ch.disconnect());
        assert!(!ch.disconnect());
        assert_eq!(ch.send(7), Err(7));
        assert_eq!(ch.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn blocks_are_reused() {
        let ch = Channel::<u64>::new();
        let first = ch.head.block.load(Ordering::Relaxed);
        // Fill and drain two blocks: the first comes back as a spare and is linked again.
        for round in 0..3 {
            for i in 0..Block::<u64>::CAP as u64 {
                ch.send(i).unwrap();
            }
            for i in 0..Block::<u64>::CAP as u64 {
                assert_eq!(ch.try_recv(), Ok(i), "round {round}");
            }
        }
        let linked = ch.head.block.load(Ordering::Relaxed);
        let spare = ch.spares[0].load(Ordering::Relaxed);
        assert!(
            linked == first || spare == first,
            "the first block was not recycled"
        );
        // A recycled block comes back empty: a stale `READ` would let a destruction free
        // it while a receiver still waits on a slot.
        assert!(!spare.is_null());
        for i in 0..Block::<u64>::CAP {
            // SAFETY: a spare block, owned by the queue, which this thread alone uses.
            let state = unsafe { Block::slot(spare, i) }
                .state
                .load(Ordering::Relaxed);
            assert_eq!(state, 0, "slot {i} of a spare block");
        }
        // SAFETY: as above.
        assert!(unsafe { (*spare).next.load(Ordering::Relaxed) }.is_null());
    }

    #[test]
    fn drop_drops_what_is_left_once() {
        let drops = Arc::new(Counter::new(0));
        let ch = Channel::new();
        let cap = Block::<Tracked>::CAP;
        let n = 2 * cap as u64 + 3;
        for i in 0..n {
            ch.send(Tracked(Arc::clone(&drops), i)).unwrap();
        }
        for i in 0..cap as u64 + 1 {
            assert_eq!(ch.try_recv().map(|t| t.1), Ok(i));
        }
        assert_eq!(drops.load(Ordering::Relaxed), cap + 1);
        drop(ch);
        assert_eq!(drops.load(Ordering::Relaxed), n as usize);
    }

    #[test]
    fn a_panicking_drop_leaves_the_rest_dropped_once() {
        #[derive(Debug)]
        struct Bomb(Arc<Counter>, bool);
        impl Drop for Bomb {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
                if self.1 {
                    panic!("bomb");
                }
            }
        }
        let drops = Arc::new(Counter::new(0));
        let ch = Channel::new();
        let n = Block::<Bomb>::CAP + 4;
        for i in 0..n {
            ch.send(Bomb(Arc::clone(&drops), i % 3 == 1)).unwrap();
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(ch)));
        assert!(r.is_err());
        assert_eq!(drops.load(Ordering::Relaxed), n);
    }

    #[test]
    fn senders_and_receivers_across_threads() {
        let per = if cfg!(miri) { 40 } else { 20_000 };
        let ch = Arc::new(Channel::new());
        let senders: Vec<_> = (0..2u64)
            .map(|s| {
                let ch = Arc::clone(&ch);
                thread::spawn(move || {
                    for i in 0..per {
                        ch.send((s, i)).unwrap();
                    }
                })
            })
            .collect();
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                let ch = Arc::clone(&ch);
                thread::spawn(move || {
                    let mut last = [None::<u64>; 2];
                    let mut got = Vec::new();
                    while let Ok((s, i)) = ch.recv(None) {
                        let s = s as usize;
                        assert!(last[s].map_or(true, |l| l < i), "order of sender {s}");
                        last[s] = Some(i);
                        got.push((s, i));
                    }
                    got
                })
            })
            .collect();
        for s in senders {
            s.join().unwrap();
        }
        ch.disconnect();
        let mut all: Vec<_> = receivers
            .into_iter()
            .flat_map(|r| r.join().unwrap())
            .collect();
        all.sort_unstable();
        let want: Vec<_> = (0..2usize)
            .flat_map(|s| (0..per).map(move |i| (s, i)))
            .collect();
        assert_eq!(all, want);
    }
}

/// Loom models (`Block::CAP` is 2 under loom, so two messages cross a block boundary).
/// `Arc` payloads: a message lost or delivered twice shows up as a
/// leak or a double drop.
#[cfg(all(test, logbus_loom))]
mod loom_models {
    use super::*;
    use crate::sync::{thread, Arc};

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = crate::sync::loom_builder();
        builder.max_branches = 50_000;
        builder.check(f);
    }

    /// Receives `n` messages and checks each sender's order; senders tag messages
    /// `(sender, seq)`.
    fn receive_in_order(ch: &Channel<Arc<(usize, usize)>>, n: usize, senders: usize) {
        let mut next = vec![0; senders];
        for _ in 0..n {
            let msg = ch.recv(None).unwrap();
            let (s, i) = *msg;
            assert_eq!(i, next[s], "sender {s} out of order");
            next[s] += 1;
        }
    }

    /// Two senders and a blocking receiver across a block boundary: two messages fill the
    /// first block of two, so the sender of the second links the next block (while the
    /// other may be waiting at the boundary), the receiver of the second moves the head
    /// there and recycles the first block (its destruction may stop at the first slot and
    /// be finished by that slot's reader), and the receiver may be parked or waiting for
    /// `WRITE` meanwhile.
    #[test]
    fn two_senders_one_receiver_across_a_block_boundary() {
        model(|| {
            let ch = Arc::new(Channel::new());
            let senders: Vec<_> = [1usize, 1]
                .into_iter()
                .enumerate()
                .map(|(s, count)| {
                    let ch = Arc::clone(&ch);
                    thread::spawn(move || {
                        for i in 0..count {
                            ch.send(Arc::new((s, i))).unwrap();
                        }
                    })
                })
                .collect();
            receive_in_order(&ch, 2, 2);
            for s in senders {
                s.join().unwrap();
            }
            assert_eq!(ch.try_recv().map(|_| ()), Err(TryRecvError::Empty));
        });
    }

    /// A drained block goes back to the senders as a spare and is written again: with two
    /// slots a block, the sender of message 3 takes the first block back once the receiver
    /// has read messages 0 and 1, and writes message 4 into it. The spare's hand-off
    /// (Release CAS in `recycle`, Acquire swap in `take_block`) orders the receiver's read
    /// of each slot and its reset before the sender's next write there; without it loom
    /// reports the race on the message cell.
    #[test]
    fn a_recycled_block_is_written_again_by_another_thread() {
        model(|| {
            let ch = Arc::new(Channel::new());
            let tx = Arc::clone(&ch);
            let sender = thread::spawn(move || {
                for i in 0..5 {
                    tx.send(Arc::new((0, i))).unwrap();
                }
            });
            receive_in_order(&ch, 5, 1);
            sender.join().unwrap();
            assert_eq!(ch.try_recv().map(|_| ()), Err(TryRecvError::Empty));
        });
    }

    /// The last sender leaves (disconnect) while the receiver drains and parks: it gets
    /// every message, then `Disconnected`, and a message left unreceived is dropped with
    /// the queue.
    #[test]
    fn disconnect_races_a_parked_receiver() {
        model(|| {
            let ch = Arc::new(Channel::new());
            let tx = Arc::clone(&ch);
            let sender = thread::spawn(move || {
                tx.send(Arc::new((0, 0))).unwrap();
                tx.send(Arc::new((0, 1))).unwrap();
                tx.disconnect();
            });
            assert_eq!(ch.recv(None).map(|m| m.1), Ok(0));
            let second = ch.recv(None).map(|m| m.1);
            assert_eq!(second, Ok(1));
            assert_eq!(
                ch.recv(None).map(|m| m.1),
                Err(RecvTimeoutError::Disconnected)
            );
            sender.join().unwrap();
        });
    }
}
