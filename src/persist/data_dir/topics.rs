//! A persisted topic's life in the data directory: creation, opening (codecs checked
//! against the metadata), growth and deletion. The metadata file is the commit point of
//! each: partition directories it does not count are leftovers of a crash, removed before
//! their names are used again.

use crate::persist::append::CodecChoice;
use std::marker::PhantomData;

use super::{DataDir, OpenPartition, TopicMeta, TOPIC_SUFFIX};
use crate::codec::Codec;
use crate::partition::{Partition, ProducerExpiry};
use crate::persist::log::{segment_room, spawn_writer, LogCell, PartitionLog};
use crate::persist::ClampedOffset;
use crate::storage::{checkpoint, Checkpoints, LogSetup, SegmentSet};
use crate::sync::Arc as SyncArc;
use crate::sync::StdArc as Arc;
use crate::sync::{Mutex, WaitSet};
use crate::{Error, Result};

impl DataDir {
    /// Opens (creating) the segment set of partition `p` and registers its cell.
    pub(crate) fn open_partition_log(&self, meta: &TopicMeta, p: u32) -> Result<()> {
        let (set, _) = SegmentSet::open(
            self.dir.join(format!("{}-{p}", meta.name)),
            LogSetup {
                config: meta.log_config(),
                io: SyncArc::clone(&self.io),
                clock: SyncArc::clone(&self.clock),
                checkpoints: Checkpoints::default(),
            },
        )?;
        self.cells.lock().insert(
            (meta.name.clone(), p),
            Arc::new(LogCell::new(&meta.name, p, set)),
        );
        Ok(())
    }

    /// The typed partition `p` over its log, with its groups' offsets restored and its
    /// writer started.
    pub(crate) fn start_partition<K, V>(
        &self,
        meta: &TopicMeta,
        p: u32,
        arrivals: &Arc<WaitSet>,
    ) -> Result<(Arc<Partition<K, V>>, OpenPartition)>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        let cell = self
            .cells
            .lock()
            .get(&(meta.name.clone(), p))
            .cloned()
            .ok_or_else(|| Error::UnknownTopic {
                topic: format!("{}-{p}", meta.name),
            })?;
        // The writer's batches, and the largest record one can hold.
        let batch_limit = meta
            .persist
            .segment_bytes
            .min(meta.log_config().max_batch_bytes);
        let codec = CodecChoice::new(meta.persist.compression_type());
        let disk = Arc::new(PartitionLog::<K, V> {
            codec: crate::sync::StdArc::clone(&codec),
            cell: Arc::clone(&cell),
            buf: Mutex::new(bytes::Bytes::new()),
            policy: meta.persist.flush,
            max_message_bytes: meta.persist.max_message_bytes,
            segment_room: segment_room(batch_limit),
            _types: PhantomData,
        });
        let config = meta.topic_config();
        let (partition, gate) = Partition::persisted(
            config.partition_config(),
            Arc::clone(arrivals),
            cell.written(),
            disk,
        )?;
        // Before the writer restores the states on disk (expired at once there).
        let partition = Arc::new(partition.with_producer_expiry(ProducerExpiry::new(
            Arc::clone(&self.broker_clock),
            config.producer_expiration(),
        )));
        partition.rebuild_transactions();
        // The groups' offsets, clamped to the recovered log end. They stay in `loaded`
        // until `track_open` has the partition in `open`: a
        // checkpoint taken in between must still find them (a crash then would lose every
        // group's offset here).
        self.restore_offsets(&meta.name, p, cell.written(), &partition);
        let writer = spawn_writer(
            cell,
            Arc::clone(&partition),
            gate,
            meta.persist.flush,
            batch_limit as usize,
            codec,
        )?;
        let open = OpenPartition {
            topic: meta.name.clone(),
            partition: p,
            committed: {
                let part = Arc::clone(&partition);
                Box::new(move || part.committed_all())
            },
            close: {
                let part = Arc::clone(&partition);
                Box::new(move || part.close())
            },
            sync: {
                let part = Arc::clone(&partition);
                Box::new(move || part.sync_disk(true))
            },
            writer: Some(writer),
        };
        Ok((partition, open))
    }

    /// Restores the checkpointed offsets of every group on partition `p` of `topic` into
    /// `partition`, each clamped to `end` (the recovered log end) and reported when it was
    /// beyond it.
    fn restore_offsets<K, V>(&self, topic: &str, p: u32, end: u64, partition: &Partition<K, V>) {
        let mine: Vec<_> = self
            .loaded
            .lock()
            .iter()
            .filter(|((_, t, q), _)| t == topic && *q == p)
            .map(|(k, o)| (k.0.clone(), *o))
            .collect();
        for (group, committed) in mine {
            let offset = committed.min(end);
            if committed > end {
                self.clamped.lock().push(ClampedOffset {
                    group: group.clone(),
                    topic: topic.to_owned(),
                    partition: p,
                    committed,
                    log_end: end,
                });
            }
            let group: Arc<str> = Arc::from(group.as_str());
            // At most `end`: within the partition's range, accepted.
            let _ = partition.commit(&group, offset, 0);
        }
    }

    /// Restores the groups' offsets on a replicated persisted topic's partitions (clamped
    /// to each one's high watermark as recovered at open: the end of what its consumers
    /// read) and hands their live commits to the offsets checkpoint, as `start_partition`
    /// and `track_open` do for a single-copy topic. The replicas' files and writers are
    /// the replication layer's; the checkpoint only reads the partitions' commits.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once `close` began.
    pub(crate) fn track_replicated_commits<K, V>(
        &self,
        topic: &str,
        partitions: &[Arc<Partition<K, V>>],
    ) -> Result<()>
    where
        K: Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        let mut started = Vec::new();
        for (p, partition) in (0u32..).zip(partitions) {
            self.restore_offsets(topic, p, partition.log_end(), partition);
            started.push(OpenPartition {
                topic: topic.to_owned(),
                partition: p,
                committed: {
                    let part = Arc::clone(partition);
                    Box::new(move || part.committed_all())
                },
                close: Box::new(|| {}),
                sync: Box::new(|| Ok(())),
                writer: None,
            });
        }
        self.track_open(started)
    }

    /// Forgets the committed offsets of a deleted replicated persisted topic (its
    /// partitions' live commits and any left from the checkpoint), so that no later
    /// checkpoint has them. Under `checkpointing`: a checkpoint snapshots both or neither.
    pub(crate) fn forget_commits(&self, topic: &str) {
        let _writing = self.checkpointing.lock();
        self.open.lock().retain(|p| p.topic != topic);
        self.loaded.lock().retain(|(_, t, _), _| t != topic);
    }

    /// Before a topic named `topic` is created: the offsets and cleaner checkpoints may
    /// still hold a deleted topic's offsets under this name (a crash came before the next
    /// checkpoint), rewritten without them, durably, before the new metadata exists, so
    /// that a reopen never applies them to the new topic. The cleaner's first dirty offset
    /// goes too: kept, the new log's records below it would count as cleaned, and an
    /// expired tombstone there would be dropped while its key's older value stayed.
    /// Forgotten in memory first: a name no checkpoint file may hold (`checkpoints_may_name`,
    /// asked after that) is in none of them durably either, and no later write puts it back,
    /// so the files are not rewritten.
    pub(crate) fn clear_namesake_for_creation(&self, topic: &str) -> Result<()> {
        self.forget_commits(topic);
        self.forget_cleaner_progress(topic);
        if !self.checkpoints_may_name(topic)? {
            return Ok(());
        }
        self.write_offsets()?;
        self.write_cleaner_checkpoint()
    }

    /// Grows topic `name` from `from` to `to` persisted partitions: their directories
    /// first, then the metadata (atomically), then their writers.
    pub(crate) fn add_partitions<K, V>(
        &self,
        name: &str,
        from: u32,
        to: u32,
        arrivals: &Arc<WaitSet>,
    ) -> Result<Vec<Arc<Partition<K, V>>>>
    where
        K: Codec + Send + Sync + 'static,
        V: Codec + Send + Sync + 'static,
    {
        self.check_open()?;
        let mut metas = self.metas.lock();
        let meta = metas
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopic {
                topic: name.to_owned(),
            })?;
        if meta.partitions != from {
            return Err(Error::InvalidCheckpoint {
                file: self.meta_path(name),
                line: 0,
                reason: format!(
                    "the metadata counts {} partitions, the open topic {from}",
                    meta.partitions
                ),
            });
        }
        let grown = TopicMeta {
            partitions: to,
            ..meta
        };
        let made = (from..to).try_for_each(|p| {
            self.remove_partition_dir(name, p)?;
            self.open_partition_log(&grown, p)
        });
        let made =
            made.and_then(|()| checkpoint::write(&*self.io, &self.meta_path(name), &grown.lines()));
        if let Err(e) = made {
            // The metadata still counts `from`: the new directories are leftovers.
            for p in from..to {
                self.close_partition_log(name, p);
                let _ = self.remove_partition_dir(name, p);
            }
            return Err(e);
        }
        metas.insert(name.to_owned(), grown.clone());
        drop(metas);
        let mut partitions = Vec::new();
        for p in from..to {
            let (partition, open) = self.start_partition::<K, V>(&grown, p, arrivals)?;
            self.track_open(vec![open])?;
            partitions.push(partition);
        }
        Ok(partitions)
    }

    /// Deletes topic `name` (its partitions already closed): the metadata file goes first
    /// (the topic is gone once that is durable), then the writers stop, then every file of
    /// its partition directories and the directories.
    pub(crate) fn delete_topic(&self, name: &str) -> Result<()> {
        self.check_open()?;
        // Held to the end: a creation of the same name waits until the old partition
        // directories are gone, rather than making its own for this delete to remove.
        let _opening = self.opening.lock();
        let Some(meta) = self.metas.lock().remove(name) else {
            return Ok(());
        };
        let path = self.meta_path(name);
        let removed = self
            .io
            .remove_file(&path)
            .and_then(|()| self.io.sync_dir(&self.dir));
        if let Err(e) = removed {
            self.metas.lock().insert(name.to_owned(), meta);
            return Err(Error::io(format!("removing {}", path.display()), e));
        }
        let mine: Vec<OpenPartition> = {
            let mut open = self.open.lock();
            let (mine, rest) = std::mem::take(&mut *open)
                .into_iter()
                .partition(|p| p.topic == name);
            *open = rest;
            mine
        };
        for p in &mine {
            (p.close)();
        }
        for mut p in mine {
            if let Some(w) = p.writer.take() {
                let _ = w.join();
            }
        }
        self.loaded.lock().retain(|(_, t, _), _| t != name);
        let mut first_error = None;
        for p in 0..meta.partitions {
            self.close_partition_log(name, p);
            if let Err(e) = self.remove_partition_dir(name, p) {
                first_error.get_or_insert(e);
            }
        }
        // After every pass over its logs has ended (`close_partition_log` waits for them).
        self.forget_cleaner_progress(name);
        first_error.map_or(Ok(()), Err)
    }

    /// Forgets partition `p`'s cell and closes its segment set (readers holding the cell
    /// find it closed).
    pub(crate) fn close_partition_log(&self, name: &str, p: u32) {
        let cell = self.cells.lock().remove(&(name.to_owned(), p));
        if let Some(cell) = cell {
            // After a pass over it: never a `.cleaned` file written into a removed directory.
            let _cleaning = cell.cleaning.lock();
            drop(cell.log.lock().take());
        }
    }

    /// Removes `<data dir>/<name>-<p>/` and every file in it, if it exists. Topic names are
    /// checked (Kafka's characters, never `.` or `..`), so the path is a child of the
    /// data directory; by Kafka's length, so that a topic found on disk under a longer name
    /// than new topics may take can still be deleted.
    pub(crate) fn remove_partition_dir(&self, name: &str, p: u32) -> Result<()> {
        crate::partition::topic_config::validate_kafka_topic_name(name)?;
        let dir = self.dir.join(format!("{name}-{p}"));
        let err = |what: &str, path: &std::path::Path, e| {
            Error::io(
                format!("{what} {} (deleting a partition)", path.display()),
                e,
            )
        };
        if !self.io.exists(&dir).map_err(|e| err("checking", &dir, e))? {
            return Ok(());
        }
        for file in self
            .io
            .list_dir(&dir)
            .map_err(|e| err("listing", &dir, e))?
        {
            let path = dir.join(file);
            // Already gone is removed: a cleaning pass's replaced files are removed after
            // the pass, without the log (`data_dir/removals.rs`).
            match self.io.remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(err("removing", &path, e))
                }
                _ => {}
            }
        }
        self.io
            .sync_dir(&dir)
            .map_err(|e| err("syncing", &dir, e))?;
        self.io
            .remove_dir(&dir)
            .map_err(|e| err("removing", &dir, e))?;
        self.io
            .sync_dir(&self.dir)
            .map_err(|e| err("syncing", &self.dir, e))
    }

    /// The codec type ids of persisted topic `name`, if the directory holds it.
    /// `None` while it is being created (not registered yet).
    pub(crate) fn meta_types(&self, name: &str) -> Option<(String, String)> {
        let metas = self.metas.lock();
        if self.creating.lock().as_deref() == Some(name) {
            return None;
        }
        metas
            .get(name)
            .map(|m| (m.key_type.clone(), m.value_type.clone()))
    }

    pub(crate) fn meta_path(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(format!("{name}{TOPIC_SUFFIX}"))
    }
}
