//! An appender's non-blocking appends, for a send awaited as a future
//! (`Producer::send_async`): the append either happens now or hands the entry back, and the
//! waits a blocking append would do (for room on a gated partition, for the fsync of a
//! persisted one) are left to the caller's task.

use std::task::{Context, Poll};

use super::*;
use crate::sync::WakerSlot;

/// Where a non-blocking append left its record.
pub(crate) enum Unsynced<K, V> {
    /// Appended and acknowledged: its offset.
    Acked(u64),
    /// Appended at this offset; its log's flush policy acknowledges it later
    /// ([`DiskLog::poll_acked`]).
    Syncing(Arc<dyn DiskLog<K, V>>, u64),
}

impl<K, V> Appender<K, V> {
    /// Appends `entry` to a partition that is not replicated, without waiting: for room
    /// ([`AppendError::Full`] hands it back; [`poll_room`](Self::poll_room) waits for it),
    /// or for the flush policy's acknowledgement ([`Unsynced::Syncing`], noted for
    /// [`settle`](Self::settle)).
    pub(crate) fn try_append_unsynced(
        &mut self,
        entry: Entry<K, V>,
    ) -> std::result::Result<Unsynced<K, V>, Refused<K, V>> {
        use crate::ring::TryPublishError;
        debug_assert!(self.replicated.is_none());
        if let Some(disk) = &self.disk {
            if let Err((size, max)) = disk.check_size(&entry) {
                return Err((Some(entry), AppendError::TooLarge(size, max)));
            }
            // Refused before it reaches the ring, as a blocking append is.
            if let Some(e) = disk.offline_error() {
                return Err((Some(entry), AppendError::Offline(Box::new(e))));
            }
        }
        let producer = self.producer();
        let ts = entry.timestamp();
        let mut handle = self.handle.lock();
        self.retain_overwritten(handle.next_sequence(), 1);
        let stamp = handle.stamp_next(producer);
        let offset = match handle.try_publish(entry) {
            Ok(()) => {
                let offset = handle
                    .last_sequence()
                    .expect("a successful publish records its sequence");
                handle.published(stamp, offset, 1, ts);
                offset
            }
            Err(TryPublishError::Closed(v)) => {
                drop(handle);
                return Err((Some(v), self.closed_why(AppendError::Closed)));
            }
            Err(TryPublishError::Full(v)) => return Err((Some(v), AppendError::Full)),
        };
        drop(handle);
        // Fence-free unless a consumer is parked; waiters take the heavy fence.
        self.arrivals.notify_all_light();
        Ok(match &self.disk {
            Some(disk) => {
                self.unsettled = Some(
                    self.unsettled
                        .map_or((0, offset), |(e, o)| (e, o.max(offset))),
                );
                Unsynced::Syncing(Arc::clone(disk), offset)
            }
            None => Unsynced::Acked(offset),
        })
    }

    /// `Ready` once the next append might find room (see [`Ring::poll_for_room`]);
    /// otherwise registers the task in `slot`. Lets expired groups go first, as a blocking
    /// wait for room does now and then.
    pub(crate) fn poll_room(&self, cx: &mut Context<'_>, slot: &mut WakerSlot) -> Poll<()> {
        #[cfg(not(logbus_loom))]
        if let Some(expire) = &self.expiry {
            expire();
        }
        let at = self.handle.lock().next_sequence();
        self.ring.poll_for_room(cx, slot, at, 1)
    }

    /// Takes a registration of [`poll_room`](Self::poll_room) off.
    pub(crate) fn cancel_room(&self, slot: &mut WakerSlot) {
        self.ring.cancel_room_waker(slot);
    }
}
