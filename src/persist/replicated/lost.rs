//! Replicas whose log vanished with their data directory (wiped, then formatted again with
//! `BrokerBuilder::replace_lost_data_dirs`): such a replica is not a valid one. At reopen
//! it starts offline, so the saved ISR loses it before any election, and then rejoins as
//! an empty follower that must copy its leader's log to be in sync again. It is never
//! elected on the strength of the ISR it had, and never makes the others truncate.

use super::{partition_dir, DiskDirs, ReplicatedMeta};

impl DiskDirs {
    /// The replicas of `partition` whose log directory is gone while another replica's may
    /// hold records (present, or on a directory that cannot be read). When no replica's
    /// directory is there, the topic's creation stopped before its logs were made: none is
    /// lost. None either for a topic not reopened (`reopen` false: created now).
    pub(crate) fn lost_replicas(
        &self,
        meta: &ReplicatedMeta,
        partition: u32,
        replicas: &[u32],
        reopen: bool,
    ) -> Vec<u32> {
        if !reopen {
            return Vec::new();
        }
        let mut absent = Vec::new();
        let mut maybe_records = false;
        for &d in replicas {
            let dir = partition_dir(&self.paths[d as usize], &meta.topic.name, partition);
            match (self.is_failed(d), self.io(d).exists(&dir)) {
                (false, Ok(false)) => absent.push(d),
                _ => maybe_records = true,
            }
        }
        if maybe_records {
            absent
        } else {
            Vec::new()
        }
    }
}
