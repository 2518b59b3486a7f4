//! Fetched messages in batches: each assigned partition's librdkafka queue is forwarded to
//! a queue of the consumer's own, read with `rd_kafka_consume_batch_queue` (one lock and
//! two clock reads per batch, where `BaseConsumer::poll` takes one event, with its clock
//! reads and an `Arc`, per message). Rebalance, commit-result and error events stay on the
//! consumer queue, served by `BaseConsumer::poll` as before: the batch call must never see
//! them (it answers a rebalance with an empty assignment of its own, and aborts on a
//! commit result).

use std::collections::HashSet;
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

/// The consumer's own queue and the partitions forwarded to it.
pub(super) struct Fetched {
    /// The client's handle: alive as long as this (`KafkaConsumer` declares its `Fetched`
    /// before its client, so it is dropped first).
    client: NonNull<rd::rd_kafka_t>,
    queue: NonNull<rd::rd_kafka_queue_t>,
    /// The consumer queue, for its length.
    consumer: NonNull<rd::rd_kafka_queue_t>,
    /// Every partition forwarded so far (forwarding is undone for each on drop).
    partitions: HashSet<TopicPartition>,
}

// SAFETY: the pointers are a librdkafka client handle and queue handles, which librdkafka
// locks itself on every call made here (forward, length, consume, destroy); nothing is tied
// to the thread that made them.
unsafe impl Send for Fetched {}

impl Fetched {
    /// A new queue of `client`'s, nothing forwarded to it yet. `None` if librdkafka cannot
    /// make one (the consumer then reads the consumer queue alone).
    pub(super) fn new(client: &BaseConsumer<GroupContext>) -> Option<Self> {
        let rk = NonNull::new(client.client().native_ptr())?;
        // SAFETY: the client handle is alive for the call; both queue handles belong to it
        // and are destroyed (in `Drop`) before the client is.
        let (queue, consumer) = unsafe {
            (
                rd::rd_kafka_queue_new(rk.as_ptr()),
                rd::rd_kafka_queue_get_consumer(rk.as_ptr()),
            )
        };
        let queue = NonNull::new(queue);
        let consumer = NonNull::new(consumer);
        match (queue, consumer) {
            (Some(queue), Some(consumer)) => Some(Self {
                client: rk,
                queue,
                consumer,
                partitions: HashSet::new(),
            }),
            (q, c) => {
                for h in [q, c].into_iter().flatten() {
                    // SAFETY: made just above, destroyed once, here.
                    unsafe { rd::rd_kafka_queue_destroy(h.as_ptr()) };
                }
                None
            }
        }
    }

    /// Points the fetch queue of `tp` at `to` (null: back to none). The partition's queue
    /// is looked up each time, not kept: librdkafka may replace a partition's state (and
    /// its queue) while it is not assigned.
    fn point(&self, tp: &TopicPartition, to: *mut rd::rd_kafka_queue_t) -> bool {
        let Ok(topic) = CString::new(tp.topic.as_str()) else {
            return false;
        };
        // SAFETY: the client handle is alive; `topic` is NUL-terminated and outlives the
        // call.
        let h = unsafe {
            rd::rd_kafka_queue_get_partition(
                self.client.as_ptr(),
                topic.as_ptr(),
                tp.partition as i32,
            )
        };
        let Some(h) = NonNull::new(h) else {
            return false;
        };
        // SAFETY: `h` was just made and is destroyed once, here; `to` is this consumer's
        // queue (alive) or null. Forwarding moves what the partition queue holds onto `to`,
        // under librdkafka's locks, and outlives the handle (it is the queue's setting).
        unsafe {
            rd::rd_kafka_queue_forward(h.as_ptr(), to);
            rd::rd_kafka_queue_destroy(h.as_ptr());
        }
        true
    }

    /// Forwards the queues of `assigned` to this one. librdkafka clears a partition's
    /// forwarding when it stops fetching it (an assignment replaced, a seek that
    /// reassigns) and then keeps its messages on the partition's own queue: so this runs
    /// before every assignment and every wait. A partition it cannot forward keeps the
    /// consumer queue.
    pub(super) fn forward<'a>(&mut self, assigned: impl Iterator<Item = &'a TopicPartition>) {
        for tp in assigned {
            if self.point(tp, self.queue.as_ptr()) && !self.partitions.contains(tp) {
                self.partitions.insert(tp.clone());
            }
        }
    }

    /// Whether the consumer queue holds nothing (no event, no message).
    pub(super) fn consumer_queue_empty(&self) -> bool {
        // SAFETY: the consumer queue handle is alive (destroyed in `Drop`).
        unsafe { rd::rd_kafka_queue_length(self.consumer.as_ptr()) == 0 }
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
        // Nothing librdkafka fetches from now on goes to a queue being destroyed.
        for tp in std::mem::take(&mut self.partitions) {
            self.point(&tp, ptr::null_mut());
        }
        // SAFETY: both handles were made by `new` and are destroyed here, once, the client
        // still alive; the messages still on the own queue are freed with it.
        unsafe {
            rd::rd_kafka_queue_destroy(self.consumer.as_ptr());
            rd::rd_kafka_queue_destroy(self.queue.as_ptr());
        }
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
    let value = crate::codec::decode_nullable(payload)?;
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
