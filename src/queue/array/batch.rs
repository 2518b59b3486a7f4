//! The batch operations: a run of slots claimed at once, its messages copied in one loop
//! (see the layout notes in the parent module).

use std::mem::MaybeUninit;
use std::ptr;

use super::waiting::{Waited, POLICY};
use super::{Channel, Look};
use crate::queue::error::{RecvTimeoutError, TryRecvError, TrySendError};
use crate::sync::time::Instant;
use crate::sync::wait::Waiter;

impl<T> Channel<T> {
    /// Moves as many messages from the front of `batch` as fit right now (at most one lap's
    /// worth per claim) and returns how many went in. The messages are copied straight from
    /// the `Vec`'s buffer into the slots, and what is left is moved to the front once.
    pub(crate) fn try_send_batch(&self, batch: &mut Vec<T>) -> Result<usize, TrySendError<()>> {
        self.send_batch_now(batch, Look::TRY)
    }

    /// `try_send_batch`, with `look` as in `claim_send` (for the first claim; later ones
    /// only end the batch when they fail, and settle when it does). A settling batch is a
    /// sequence of sends: it stops short only when the queue was full at one instant.
    pub(super) fn send_batch_now(
        &self,
        batch: &mut Vec<T>,
        look: Look,
    ) -> Result<usize, TrySendError<()>> {
        let len = batch.len();
        let base = batch.as_mut_ptr();
        // SAFETY: 0 ≤ capacity. Until the length is restored below the `Vec` owns no
        // message, so nothing is dropped twice even if something here panicked (the rest
        // would leak instead).
        unsafe { batch.set_len(0) };
        let mut sent = 0;
        let result = loop {
            if sent == len {
                break Ok(());
            }
            let look = if sent == 0 { look } else { look.again() };
            match self.claim_send(len - sent, look) {
                Ok(claim) => {
                    let index = claim.pos & (self.mark_bit - 1);
                    for (i, cell) in self.cells[index..index + claim.n].iter().enumerate() {
                        // SAFETY: `sent + i < len`: an initialised message of the batch, read
                        // exactly once (`sent` moves past it below and the `Vec` no longer
                        // owns it).
                        let msg = unsafe { ptr::read(base.add(sent + i)) };
                        // SAFETY: `claim_send` gave this thread the slot (as in `publish`),
                        // and no receiver reads it before `publish_stamps`.
                        cell.with_mut(|p| unsafe { ptr::write(p, MaybeUninit::new(msg)) });
                    }
                    self.publish_stamps(&claim);
                    sent += claim.n;
                }
                Err(TrySendError::Full(())) if sent > 0 => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        // SAFETY: the messages `sent .. len` were not moved out; they go to the front of the
        // buffer (the ranges may overlap: `ptr::copy`) and the `Vec` owns them again.
        unsafe {
            ptr::copy(base.add(sent), base, len - sent);
            batch.set_len(len - sent);
        }
        result.map(|()| sent)
    }

    /// Appends up to `max` (≥ 1) waiting messages to `out`; `Empty`/`Disconnected` when none.
    pub(crate) fn try_recv_batch(
        &self,
        out: &mut Vec<T>,
        max: usize,
    ) -> Result<usize, TryRecvError> {
        self.recv_batch_now(out, max, Look::TRY)
    }

    /// `try_recv_batch`, with `look` as in `claim_recv` (for the first claim; later ones
    /// only end the batch when they fail).
    pub(super) fn recv_batch_now(
        &self,
        out: &mut Vec<T>,
        max: usize,
        look: Look,
    ) -> Result<usize, TryRecvError> {
        let mut got = 0;
        while got < max {
            // Reserve before claiming: nothing may panic between a claim and its
            // consumption (a claim takes at most `cap` slots).
            out.reserve((max - got).min(self.cap));
            let look = if got == 0 {
                look
            } else {
                // Later claims only end the batch when they fail.
                look.again()
            };
            match self.claim_recv(max - got, look) {
                Ok(claim) => {
                    let index = claim.pos & (self.mark_bit - 1);
                    // `claim.n ≤ (max - got).min(cap)`: the reservation above covers it.
                    let spare = &mut out.spare_capacity_mut()[..claim.n];
                    for (dst, cell) in spare.iter_mut().zip(&self.cells[index..]) {
                        // SAFETY: `claim_recv` gave this thread the slot, which holds an
                        // initialised message (as in `consume`), moved out exactly once
                        // (`free_run` hands the slot to the next lap after).
                        *dst = cell.with(|p| unsafe { ptr::read(p) });
                    }
                    // SAFETY: the `claim.n` elements after the length were just initialised.
                    unsafe { out.set_len(out.len() + claim.n) };
                    self.free_run(&claim);
                    got += claim.n;
                }
                Err(_) if got > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    /// Moves every message of `batch` into the queue, waiting for room as needed until
    /// `deadline` (forever with `None`); `Full` when the deadline passed first. Whatever
    /// was not sent stays in `batch`, in order.
    pub(crate) fn send_batch(
        &self,
        batch: &mut Vec<T>,
        deadline: Option<Instant>,
    ) -> Result<(), TrySendError<()>> {
        let mut waiting = Waiter::new(POLICY);
        // As in `send`.
        let mut look = Look::first(deadline);
        loop {
            let this = look;
            look = this.again();
            match self.send_batch_now(batch, this) {
                Ok(_) if batch.is_empty() => return Ok(()),
                Ok(0) | Err(TrySendError::Full(())) => {}
                // Progress: the next wait starts over with a dense poll.
                Ok(_) => (waiting, look) = (Waiter::new(POLICY), Look::first(deadline)),
                Err(e) => return Err(e),
            }
            if let Waited::Expired = self.wait(
                &self.senders,
                deadline,
                &mut waiting,
                Self::send_changed,
                Self::send_ready,
            ) {
                return Err(TrySendError::Full(()));
            }
        }
    }

    /// Appends between 1 and `max` (≥ 1) messages to `out`, waiting for the first until
    /// `deadline`.
    pub(crate) fn recv_batch(
        &self,
        out: &mut Vec<T>,
        max: usize,
        deadline: Option<Instant>,
    ) -> Result<usize, RecvTimeoutError> {
        self.recv_waiting(deadline, |look| self.recv_batch_now(out, max, look))
    }
}
