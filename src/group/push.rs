//! Push-style subscriptions: [`Broker::subscribe_with`] runs a group member's poll loop on
//! its own thread and calls a callback per record.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::broker::Broker;
use crate::consumer::{Consumer, ConsumerConfig, ConsumerRecord, OffsetReset};
use crate::group::TopicPartition;
use crate::sync::atomic::{AtomicBool, Ordering};
// Std's Arc (also under loom): see `sync::StdArc`.
use crate::sync::thread;
use crate::sync::StdArc as Arc;
use crate::{Error, Result};

/// How long one poll of the loop waits before it looks at the stop flag again.
const POLL_SLICE: Duration = Duration::from_millis(20);

/// What a push-style member did, reported when it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PushReport {
    /// Records the callback processed (returned from) — re-deliveries after a rebalance
    /// count again.
    pub records: u64,
    /// Commits that succeeded.
    pub commits: u64,
    /// Commits refused because a rebalance had moved on (the records are delivered again
    /// to the partitions' next owner: at-least-once).
    pub refused_commits: u64,
}

/// A running push-style member (see [`Broker::subscribe_with`]). Dropping it stops the
/// member and waits for it, discarding the report.
pub struct PushSubscription {
    member_id: String,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<Result<PushReport>>>,
}

impl fmt::Debug for PushSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushSubscription")
            .field("member_id", &self.member_id)
            .finish_non_exhaustive()
    }
}

impl PushSubscription {
    /// The member id the subscription joined with.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// Whether the member's thread ended (stopped, or its callback panicked).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().map_or(true, finished)
    }

    /// Stops the member: it finishes the record in hand, commits what its callback
    /// returned from, leaves the group (which rebalances), and its thread ends.
    ///
    /// # Errors
    ///
    /// [`Error::CallbackPanicked`] when the callback panicked: the member stopped there,
    /// committing the records before it, so the group reads that record again;
    /// otherwise the error that ended the poll loop (any error of
    /// [`Consumer::poll`] but a deleted topic, for example
    /// [`Error::NoOffsetForPartition`] under `OffsetReset::None`).
    pub fn stop(mut self) -> Result<PushReport> {
        self.finish()
    }

    fn finish(&mut self) -> Result<PushReport> {
        // Release: pairs with the Acquire load in the member's loop.
        self.stop.store(true, Ordering::Release);
        match self.thread.take() {
            Some(t) => match t.join() {
                Ok(r) => r,
                // The loop catches the callback's panics; anything else is logbus's bug,
                // reported rather than resumed.
                Err(_) => Err(Error::Closed {
                    what: format!("push member `{}` ended by a panic", self.member_id),
                }),
            },
            None => Ok(PushReport::default()),
        }
    }
}

#[cfg(not(logbus_loom))]
fn finished<T>(t: &thread::JoinHandle<T>) -> bool {
    t.is_finished()
}

#[cfg(logbus_loom)]
fn finished<T>(_: &thread::JoinHandle<T>) -> bool {
    false
}

impl Drop for PushSubscription {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

impl Broker {
    /// Starts a member of `group` reading `topics` on a thread of its own, calling
    /// `callback` for every record it gets (from the group's committed offsets, else the
    /// log start). After the callback has returned for every record of a poll, the member
    /// commits: at-least-once — a record is committed only after its callback returned,
    /// and a record whose commit did not happen (a rebalance, a crash) is delivered again.
    /// Call it once per member; [`subscribe_with_config`](Self::subscribe_with_config)
    /// takes a full [`ConsumerConfig`].
    ///
    /// # Errors
    ///
    /// As [`Consumer::subscribe`], plus [`Error::Io`] when the thread cannot be started.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use logbus::{Broker, Record, TopicConfig};
    ///
    /// let broker = Broker::in_memory();
    /// broker.create_topic::<(), u64>("orders", TopicConfig::new(4))?;
    /// let (tx, rx) = mpsc::channel();
    /// let member = broker.subscribe_with("billing", &["orders"], move |r: &logbus::ConsumerRecord<(), u64>| {
    ///     tx.send(r.value).unwrap();
    /// })?;
    /// broker.producer::<(), u64>().send(Record::new("orders", 42))?;
    /// assert_eq!(rx.recv().unwrap(), 42);
    /// let report = member.stop()?;
    /// assert_eq!(report.records, 1);
    /// # Ok::<(), logbus::Error>(())
    /// ```
    pub fn subscribe_with<K, V, S, F>(
        &self,
        group: &str,
        topics: &[S],
        callback: F,
    ) -> Result<PushSubscription>
    where
        K: Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
        S: AsRef<str>,
        F: FnMut(&ConsumerRecord<K, V>) + Send + 'static,
    {
        let config = ConsumerConfig::new()
            .group_id(group)
            .auto_offset_reset(OffsetReset::Earliest);
        self.subscribe_with_config(config, topics, callback)
    }

    /// [`subscribe_with`](Self::subscribe_with) with a full consumer configuration (its
    /// group id is the group; auto-commit is turned off: the member commits after each
    /// poll's callbacks).
    ///
    /// # Errors
    ///
    /// As [`subscribe_with`](Self::subscribe_with); [`Error::NoGroupId`] without a group id.
    pub fn subscribe_with_config<K, V, S, F>(
        &self,
        config: ConsumerConfig,
        topics: &[S],
        mut callback: F,
    ) -> Result<PushSubscription>
    where
        K: Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
        S: AsRef<str>,
        F: FnMut(&ConsumerRecord<K, V>) + Send + 'static,
    {
        let max = config.poll_records();
        let mut consumer: Consumer<K, V> = self.consumer(config.enable_auto_commit(false))?;
        consumer.subscribe(topics)?;
        let member_id = consumer.member_id().unwrap_or_default().to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let id = member_id.clone();
        let thread = thread::spawn_named(format!("logbus-{member_id}"), move || {
            run(&mut consumer, &flag, &id, max, &mut callback)
        })
        .map_err(|source| Error::Io {
            context: format!("starting the thread of push member `{member_id}`"),
            source,
        })?;
        Ok(PushSubscription {
            member_id,
            stop,
            thread: Some(thread),
        })
    }
}

/// The member's loop: poll, call back, commit; until stopped or the callback panics.
fn run<K, V, F>(
    consumer: &mut Consumer<K, V>,
    stop: &AtomicBool,
    member: &str,
    max: usize,
    callback: &mut F,
) -> Result<PushReport>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    F: FnMut(&ConsumerRecord<K, V>),
{
    let mut report = PushReport::default();
    let mut batch = Vec::with_capacity(max);
    let commit = |c: &mut Consumer<K, V>, report: &mut PushReport| match c.commit_sync() {
        Ok(()) => report.commits += 1,
        Err(Error::StaleGeneration { .. }) => report.refused_commits += 1,
        Err(_) => {}
    };
    // Acquire: pairs with the Release store in `finish`.
    while !stop.load(Ordering::Acquire) {
        batch.clear();
        match consumer.poll_with(max, POLL_SLICE, |r| batch.push(r.to_record())) {
            Ok(_) => {}
            // A deleted topic: the rebalance it causes takes it away at the next poll.
            Err(Error::UnknownTopic { .. }) => continue,
            // Anything else (a position out of range under `OffsetReset::None`, ...)
            // would come back at every poll: the member stops and reports it.
            Err(e) => {
                commit(consumer, &mut report);
                consumer.unsubscribe();
                return Err(e);
            }
        }
        for (i, record) in batch.iter().enumerate() {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| callback(record))) {
                rewind(consumer, &batch[i..]);
                commit(consumer, &mut report);
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic with a non-string payload".into());
                // Leaving the group now: the record goes to the partition's next owner.
                consumer.unsubscribe();
                return Err(Error::CallbackPanicked {
                    member: member.to_owned(),
                    topic: record.topic.to_owned(),
                    partition: record.partition,
                    offset: record.offset,
                    message,
                });
            }
            report.records += 1;
        }
        if !batch.is_empty() {
            commit(consumer, &mut report);
        }
    }
    commit(consumer, &mut report);
    consumer.unsubscribe();
    Ok(report)
}

/// Moves each partition of `unprocessed` back to its first record there.
fn rewind<K, V>(consumer: &mut Consumer<K, V>, unprocessed: &[ConsumerRecord<K, V>])
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    let mut done: Vec<TopicPartition> = Vec::new();
    for r in unprocessed {
        let tp = TopicPartition::new(r.topic, r.partition);
        if !done.contains(&tp) {
            let _ = consumer.seek(&tp, r.offset);
            done.push(tp);
        }
    }
}
