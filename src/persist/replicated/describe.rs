//! What a closed data directory records of its replicated topics (`logbus describe`): each
//! partition's state from the directory's copy of the metadata, and the replica kept there.

use std::path::Path;

use super::super::replica_store::{partition_dir, EPOCH_FILE};
use super::read_metas;
use crate::clock::Clock;
use crate::persist::io_err;
use crate::storage::{checkpoint, Io};
use crate::sync::Arc as SyncArc;
use crate::Result;

/// A replicated persisted partition as a closed data directory records it (`logbus
/// describe`): the partition state from the directory's copy of the topic's metadata, and
/// the replica this directory holds, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredPartition {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The replicas' ids (data directory indexes), the preferred leader first.
    pub replicas: Vec<u32>,
    /// The leader when the metadata was last written (`None`: none could lead).
    pub leader: Option<u32>,
    /// The leader epoch then.
    pub leader_epoch: i32,
    /// The in-sync replicas then.
    pub isr: Vec<u32>,
    /// The high watermark then (a lower bound after a crash).
    pub high_watermark: u64,
    /// The metadata's generation (each election and ISR change writes a new one; the
    /// directory with the highest has the latest).
    pub generation: u64,
    /// The replica kept in this directory.
    pub local: Option<LocalReplica>,
}

/// A replica as its directory keeps it ([`StoredPartition::local`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalReplica {
    /// Its log start offset.
    pub log_start: u64,
    /// Its log end offset.
    pub log_end: u64,
    /// Its `leader-epoch-checkpoint`: `(epoch, start offset)`, oldest first.
    pub epochs: Vec<(i32, u64)>,
}

/// A replicated topic as `logbus describe` lists it: `(name, partitions, replication
/// factor, key codec type id, value codec type id)`.
pub type StoredTopic = (String, u32, u32, String, String);

/// Reads the replicated topics' metadata kept in data directory `dir` and the replicas
/// stored there (each opened, recovered, and closed again). `(name, partitions,
/// replication factor, key type, value type)` per topic, and the partitions.
///
/// # Errors
///
/// [`Error::InvalidCheckpoint`] for damaged metadata or epoch files; the storage layer's
/// errors from opening a replica.
pub(crate) fn describe_dir(
    io: SyncArc<dyn Io>,
    clock: SyncArc<dyn Clock>,
    dir: &Path,
) -> Result<(Vec<StoredTopic>, Vec<StoredPartition>)> {
    let (metas, _) = read_metas(&*io, &[dir.to_path_buf()])?;
    let mut topics = Vec::new();
    let mut parts = Vec::new();
    for m in metas.values() {
        let t = &m.topic;
        topics.push((
            t.name.clone(),
            t.partitions,
            m.replication_factor,
            t.key_type.clone(),
            t.value_type.clone(),
        ));
        for (p, s) in m.parts.iter().enumerate() {
            let pdir = partition_dir(dir, &t.name, p as u32);
            let local = if io.exists(&pdir).map_err(|e| io_err("checking", &pdir, e))? {
                let (set, _) = crate::storage::SegmentSet::open(
                    pdir.clone(),
                    crate::storage::LogSetup {
                        config: t.log_config(),
                        io: SyncArc::clone(&io),
                        clock: SyncArc::clone(&clock),
                        checkpoints: crate::storage::Checkpoints::default(),
                    },
                )?;
                let epochs =
                    checkpoint::read::<checkpoint::EpochEntry>(&*io, &pdir.join(EPOCH_FILE))?
                        .unwrap_or_default()
                        .into_iter()
                        .map(|e| (e.epoch, e.start_offset))
                        .collect();
                let (start, end) = (set.log_start_offset(), set.log_end_offset());
                set.close()?;
                Some(LocalReplica {
                    log_start: start,
                    log_end: end,
                    epochs,
                })
            } else {
                None
            };
            parts.push(StoredPartition {
                topic: t.name.clone(),
                partition: p as u32,
                replicas: s.replicas.clone(),
                leader: s.leader,
                leader_epoch: s.epoch,
                isr: s.isr.clone(),
                high_watermark: s.hw,
                generation: m.generation,
                local,
            });
        }
    }
    Ok((topics, parts))
}
