//! Fetched messages in batches: each assigned partition's librdkafka queue is forwarded to
//! a queue of the consumer's own, read with `rd_kafka_consume_batch_queue` (one lock and
//! two clock reads per batch, where `BaseConsumer::poll` takes one event, with its clock
//! reads and an `Arc`, per message). Rebalance, commit-result and error events stay on the
//! consumer queue, served by `BaseConsumer::poll` as before: the batch call must never see
//! them (it answers a rebalance with an empty assignment of its own, and aborts on a
//! commit result).

use std::ffi::CString;
use std::ptr::{self, NonNull};

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer as _};

use super::GroupContext;
use crate::codec::Codec;
use crate::consumer::ConsumerRecord;
use crate::error::Result;
use crate::TopicPartition;

/// Messages taken from the queue in one call.
pub(super) const BATCH: usize = 256;

/// The consumer's own queue and the partition queues forwarded to it.
pub(super) struct Fetched {
    queue: NonNull<rd::rd_kafka_queue_t>,
    /// Every partition this consumer was assigned, with its queue handle (kept after a
    /// revocation: forwarding one again is cheaper than looking it up again).
    partitions: Vec<(TopicPartition, NonNull<rd::rd_kafka_queue_t>)>,
}

// SAFETY: the handles are librdkafka queue handles, which librdkafka locks itself on every
// call (forward, consume, destroy); nothing here is tied to the thread that made it.
unsafe impl Send for Fetched {}

impl Fetched {
    /// A new queue of `client`'s, nothing forwarded to it yet. `None` if librdkafka cannot
    /// make one (it then never fails: the consumer falls back to the consumer queue).
    pub(super) fn new(client: &BaseConsumer<GroupContext>) -> Option<Self> {
        // SAFETY: the client handle is alive for the call; the queue made belongs to it and
        // is destroyed (in `Drop`) before the client is (`KafkaConsumer` declares this field
        // before `client`).
        let queue = unsafe { rd::rd_kafka_queue_new(client.client().native_ptr()) };
        Some(Self {
            queue: NonNull::new(queue)?,
            partitions: Vec::new(),
        })
    }

    /// Forwards the queues of `assigned` to this one. librdkafka clears a partition's
    /// forwarding when it stops fetching it (an assignment replaced, a seek that reassigns),
    /// and then queues its messages on the partition's own queue: so this runs at every poll
    /// and before every wait, and a partition it cannot forward keeps the consumer queue.
    pub(super) fn forward<'a>(
        &mut self,
        client: &BaseConsumer<GroupContext>,
        assigned: impl Iterator<Item = &'a TopicPartition>,
    ) {
        for tp in assigned {
            let handle = match self.partitions.iter().find(|(p, _)| p == tp) {
                Some(&(_, h)) => h,
                None => {
                    let Ok(topic) = CString::new(tp.topic.as_str()) else {
                        continue;
                    };
                    // SAFETY: the client handle is alive; `topic` is NUL-terminated and
                    // outlives the call; the handle returned is destroyed in `Drop`.
                    let h = unsafe {
                        rd::rd_kafka_queue_get_partition(
                            client.client().native_ptr(),
                            topic.as_ptr(),
                            tp.partition as i32,
                        )
                    };
                    let Some(h) = NonNull::new(h) else { continue };
                    self.partitions.push((tp.clone(), h));
                    h
                }
            };
            // SAFETY: both handles are alive (destroyed only in `Drop`); forwarding moves
            // what the partition queue holds onto this one, under librdkafka's locks.
            unsafe { rd::rd_kafka_queue_forward(handle.as_ptr(), self.queue.as_ptr()) };
        }
    }

    /// Takes up to `buf.len()` messages into `buf`, waiting up to `timeout_ms` (0: not at
    /// all) for the queue to fill `buf`; returns how many. Each message taken is the
    /// caller's to destroy (see [`Taken`]).
    pub(super) fn take(
        &mut self,
        buf: &mut [*mut rd::rd_kafka_message_t],
        timeout_ms: i32,
    ) -> usize {
        // SAFETY: the queue is alive; `buf` is valid for `buf.len()` writes of pointers.
        let n = unsafe {
            rd::rd_kafka_consume_batch_queue(
                self.queue.as_ptr(),
                timeout_ms,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        usize::try_from(n).unwrap_or(0).min(buf.len())
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        for (_, h) in self.partitions.drain(..) {
            // SAFETY: the handle is alive until destroyed here, once; the client is still
            // alive (this field is dropped before it). Forwarding is undone first so that
            // nothing librdkafka fetches from now on goes to a queue being destroyed.
            unsafe {
                rd::rd_kafka_queue_forward(h.as_ptr(), ptr::null_mut());
                rd::rd_kafka_queue_destroy(h.as_ptr());
            }
        }
        // SAFETY: this queue was made by `new` and is destroyed here, once; the messages
        // still on it are freed with it.
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

/// Messages taken from the queue, destroyed when dropped (or handed out one by one).
pub(super) struct Taken<'a> {
    buf: &'a mut [*mut rd::rd_kafka_message_t],
    next: usize,
}

impl<'a> Taken<'a> {
    pub(super) fn new(buf: &'a mut [*mut rd::rd_kafka_message_t]) -> Self {
        Self { buf, next: 0 }
    }

    /// How many messages are left.
    pub(super) fn left(&self) -> usize {
        self.buf.len() - self.next
    }

    /// The next message, if any: the caller destroys it by dropping the [`Message`].
    pub(super) fn next_message(&mut self) -> Option<Message> {
        let m = *self.buf.get(self.next)?;
        self.next += 1;
        NonNull::new(m).map(Message)
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        while self.next_message().is_some() {}
    }
}

/// One message taken from the queue, destroyed when dropped.
pub(super) struct Message(NonNull<rd::rd_kafka_message_t>);

impl Message {
    pub(super) fn raw(&self) -> &rd::rd_kafka_message_t {
        // SAFETY: librdkafka handed this message to us and it lives until we destroy it.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        // SAFETY: the message was taken by `rd_kafka_consume_batch_queue` and is destroyed
        // once, here (its client outlives it: messages never outlive a poll).
        unsafe { rd::rd_kafka_message_destroy(self.0.as_ptr()) }
    }
}

/// The topic name of a message, if it carries one (an error may not).
pub(super) fn topic_of(m: &rd::rd_kafka_message_t) -> Option<&str> {
    if m.rkt.is_null() {
        return None;
    }
    // SAFETY: `rkt` is the message's topic handle, kept alive by the message; librdkafka
    // returns its NUL-terminated name, valid as long as the handle.
    let name = unsafe { std::ffi::CStr::from_ptr(rd::rd_kafka_topic_name(m.rkt)) };
    name.to_str().ok()
}

/// The bytes `ptr` and `len` describe in a message (`None` for a null pointer).
///
/// # Safety
///
/// `ptr`, if not null, points to `len` bytes that live as long as `'a`.
unsafe fn bytes<'a>(ptr: *const std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    if ptr.is_null() {
        None
    } else {
        // SAFETY: per the function's contract.
        Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }
}

/// A fetched message (no error set) as a logbus record, `topic` being its topic's name.
pub(super) fn decode<K: Codec, V: Codec>(
    m: &rd::rd_kafka_message_t,
    topic: &'static str,
) -> Result<ConsumerRecord<K, V>> {
    // SAFETY: a fetched message's key and payload point into its buffer, alive as long as
    // the message, which `m` borrows.
    let (key, payload) = unsafe { (bytes(m.key, m.key_len), bytes(m.payload, m.len)) };
    let key = match key {
        Some(k) => Some(K::decode(k)?),
        None => None,
    };
    let value = V::decode(payload.unwrap_or(&[]))?;
    let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    // SAFETY: `m` is a live message; `kind` is valid for the write.
    let ts = unsafe { rd::rd_kafka_message_timestamp(m, &mut kind) };
    let timestamp = match kind {
        rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => 0,
        _ if ts == -1 => 0,
        _ => ts,
    };
    Ok(ConsumerRecord {
        topic,
        partition: m.partition.max(0) as u32,
        offset: m.offset.max(0) as u64,
        timestamp,
        key,
        value,
        headers: headers(m),
    })
}

/// A message's headers, in order.
fn headers(m: &rd::rd_kafka_message_t) -> crate::Headers {
    let mut hdrs: *mut rd::rd_kafka_headers_t = ptr::null_mut();
    // SAFETY: `m` is a live message; librdkafka parses its headers into a list owned by
    // the message (not by us) and writes it to `hdrs`.
    let err = unsafe { rd::rd_kafka_message_headers(m, &mut hdrs) };
    let mut out = Vec::new();
    if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || hdrs.is_null() {
        return out;
    }
    for idx in 0.. {
        let mut name: *const std::ffi::c_char = ptr::null();
        let mut value: *const std::ffi::c_void = ptr::null();
        let mut size = 0usize;
        // SAFETY: `hdrs` is the message's header list, alive with it; the out-pointers are
        // valid for writes; librdkafka reports an error past the last header.
        let err =
            unsafe { rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size) };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            break;
        }
        // SAFETY: librdkafka's header names are NUL-terminated and live with the list;
        // a value is `size` bytes (or null for a null value), alive with the list.
        let (name, value) = unsafe { (std::ffi::CStr::from_ptr(name), bytes(value, size)) };
        out.push((
            name.to_string_lossy().into_owned(),
            value.map(bytes::Bytes::copy_from_slice),
        ));
    }
    out
}
