//! The data directory marker: `meta.properties` at the root of each data directory, in the
//! layout of Kafka's file of that name (`key=value` lines, `#` comments).
//!
//! ```text
//! version=1
//! cluster.id=<22 characters>          shared by every directory of one broker
//! node.id=0
//! directory.id=<22 characters>        this directory (KIP-858)
//! logbus.directories=<id>,<id>,...    every directory of the broker, in data_dirs order
//! ```
//!
//! Ids are Kafka's `Uuid` text: 16 bytes in URL-safe base64 without padding.
//!
//! A marker inside a directory cannot tell that the directory itself was deleted (or that
//! a failed mount left an empty path in its place), so two rules carry the weight: a path
//! without a marker becomes a data directory only when the user asks to create one, and
//! each marker lists its siblings, so a member of the set that comes back empty while the
//! others kept their markers is recognised as lost, not taken for a new, empty directory.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};

use super::super::io_err;
use crate::storage::{Io, OpenMode};
use crate::{Error, Result};

/// The marker's file name (Kafka's).
pub(crate) const MARKER: &str = "meta.properties";
const MARKER_TMP: &str = "meta.properties.tmp";
/// The only version written and read.
const VERSION: u32 = 1;
/// A real marker is a few hundred bytes; anything this large was not written by logbus,
/// and is not read into memory.
const MAX_BYTES: u64 = 64 << 10;
/// At most this many directories in one set (`logbus.directories`).
const MAX_DIRS: usize = 1024;

/// A data directory's marker (`meta.properties`), as read from its root.
///
/// # Examples
///
/// ```
/// use logbus::broker::Broker;
///
/// let dir = tempfile::tempdir()?;
/// let broker = Broker::builder().data_dir(dir.path()).create(true).open()?;
/// broker.close()?;
/// let marker = logbus::persist::read_dir_marker(dir.path())?.expect("formatted");
/// assert_eq!(marker.directories, vec![marker.directory_id.clone()]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DataDirMarker {
    /// The file layout's version (1).
    pub version: u32,
    /// The id every directory of one broker shares.
    pub cluster_id: String,
    /// The broker's node id (0: one broker per process).
    pub node_id: u32,
    /// This directory's id.
    pub directory_id: String,
    /// The ids of every directory of the broker, in the order they were formatted.
    pub directories: Vec<String>,
}

impl DataDirMarker {
    /// This directory's place in [`directories`](Self::directories).
    pub fn index(&self) -> Option<usize> {
        self.directories
            .iter()
            .position(|d| *d == self.directory_id)
    }

    fn to_text(&self) -> String {
        format!(
            "#logbus data directory: do not edit\nversion={}\ncluster.id={}\nnode.id={}\n\
             directory.id={}\nlogbus.directories={}\n",
            self.version,
            self.cluster_id,
            self.node_id,
            self.directory_id,
            self.directories.join(",")
        )
    }

    /// Parses a marker's bytes; `file` names it in errors.
    pub(crate) fn parse(file: &Path, bytes: &[u8]) -> Result<Self> {
        let bad = |reason: String| Error::InvalidDirMarker {
            file: file.to_path_buf(),
            reason,
        };
        let text = std::str::from_utf8(bytes).map_err(|e| {
            bad(format!(
                "not UTF-8 text (a bad byte at {}); expected `key=value` lines",
                e.valid_up_to()
            ))
        })?;
        if !text.is_empty() && !text.ends_with('\n') {
            return Err(bad("truncated: the last line has no line end".into()));
        }
        let mut keys: Vec<(&str, &str)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(bad(format!(
                    "line {}: expected `key=value`, found {line:?}",
                    n + 1
                )));
            };
            let (k, v) = (k.trim(), v.trim());
            if keys.iter().any(|(seen, _)| *seen == k) {
                return Err(bad(format!("line {}: key `{k}` appears twice", n + 1)));
            }
            keys.push((k, v));
        }
        let get = |k: &str| {
            keys.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| *v)
                .ok_or_else(|| bad(format!("key `{k}` missing")))
        };
        let version = get("version")?;
        if version != VERSION.to_string() {
            return Err(bad(format!(
                "version {version:?}: this logbus reads version {VERSION}"
            )));
        }
        let id = |k: &str| -> Result<String> {
            let v = get(k)?;
            if is_id(v) {
                Ok(v.to_owned())
            } else {
                Err(bad(format!(
                    "`{k}` = {v:?}: expected an id (22 characters of URL-safe base64)"
                )))
            }
        };
        let cluster_id = id("cluster.id")?;
        let directory_id = id("directory.id")?;
        let node_id = get("node.id")?
            .parse::<u32>()
            .map_err(|_| bad("`node.id`: expected a number from 0 to 2^32 - 1".into()))?;
        let list = get("logbus.directories")?;
        let directories: Vec<String> = list.split(',').map(str::to_owned).collect();
        if directories.len() > MAX_DIRS || !directories.iter().all(|d| is_id(d)) {
            return Err(bad(format!(
                "`logbus.directories`: expected 1 to {MAX_DIRS} ids separated by commas"
            )));
        }
        let mut distinct = directories.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() != directories.len() {
            return Err(bad("`logbus.directories` names a directory twice".into()));
        }
        let marker = DataDirMarker {
            version: VERSION,
            cluster_id,
            node_id,
            directory_id,
            directories,
        };
        if marker.index().is_none() {
            return Err(bad(format!(
                "`logbus.directories` does not list this directory's id {}",
                marker.directory_id
            )));
        }
        Ok(marker)
    }
}

/// Whether `s` is a directory or cluster id as written: 16 bytes in URL-safe base64
/// without padding (the last character carries 2 bits, so it is one of `AQgw`).
fn is_id(s: &str) -> bool {
    s.len() == 22
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && matches!(s.as_bytes()[21], b'A' | b'Q' | b'g' | b'w')
}

/// A new random id. Randomness from std's per-process hash keys, the time and the process
/// id: ids only need to tell directories apart, not to resist guessing.
fn new_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut bytes = [0u8; 16];
    for half in bytes.chunks_mut(8) {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(now);
        h.write_u32(std::process::id());
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    base64_url(&bytes)
}

fn base64_url(bytes: &[u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let mut n = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            n |= u32::from(*b) << (16 - 8 * i);
        }
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
        }
    }
    out
}

/// Reads the marker of data directory `dir` through `io`: `None` when it has none.
///
/// # Errors
///
/// [`Error::InvalidDirMarker`] for a marker that does not parse; I/O errors.
pub(crate) fn read(io: &dyn Io, dir: &Path) -> Result<Option<DataDirMarker>> {
    let path = dir.join(MARKER);
    if !io.exists(&path).map_err(|e| io_err("checking", &path, e))? {
        return Ok(None);
    }
    let file = io
        .open(&path, OpenMode::Read)
        .map_err(|e| io_err("opening", &path, e))?;
    let len = file.len().map_err(|e| io_err("reading", &path, e))?;
    if len > MAX_BYTES {
        return Err(Error::InvalidDirMarker {
            file: path,
            reason: format!("{len} bytes: a marker is at most {MAX_BYTES}"),
        });
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| io_err("reading", &path, e))?;
    DataDirMarker::parse(&path, &bytes).map(Some)
}

/// Reads the marker (`meta.properties`) of data directory `dir`: `None` when it has none
/// (not a data directory, or one written before markers). `logbus describe` and `logbus
/// verify` report it.
///
/// # Errors
///
/// [`Error::InvalidDirMarker`] for a marker that is truncated, corrupt, not UTF-8, too
/// large, of another version, or with a key missing, repeated or invalid; I/O errors.
pub fn read_dir_marker(dir: impl AsRef<Path>) -> Result<Option<DataDirMarker>> {
    read(&crate::storage::FsIo, dir.as_ref())
}

/// Writes `marker` into `dir` atomically and durably: temp file, fsync, rename, fsync of
/// the directory and of its parent (which may have just been made).
fn write(io: &dyn Io, dir: &Path, marker: &DataDirMarker) -> Result<()> {
    let (tmp, path) = (dir.join(MARKER_TMP), dir.join(MARKER));
    let file = io
        .open(&tmp, OpenMode::Truncate)
        .map_err(|e| io_err("creating", &tmp, e))?;
    file.write_all_at(marker.to_text().as_bytes(), 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_err("writing", &tmp, e))?;
    drop(file);
    io.rename(&tmp, &path)
        .map_err(|e| io_err("renaming", &tmp, e))?;
    io.sync_dir(dir).map_err(|e| io_err("syncing", dir, e))?;
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => io.sync_dir(p).map_err(|e| io_err("syncing", p, e)),
        _ => Ok(()),
    }
}

/// How the broker treats paths without a marker (the builder's settings).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MarkerConfig {
    /// Format a missing or empty path when no sibling says it was formatted before.
    pub(crate) create: bool,
    /// Format again a member of the set that lost its marker.
    pub(crate) replace_lost: bool,
}

/// What one path holds.
enum Found {
    Missing,
    Empty,
    Marker(DataDirMarker),
}

/// Reads what `dir` holds: a marker, nothing, or (an error) something that is not ours.
fn look(io: &dyn Io, dir: &Path) -> Result<Found> {
    if !io.exists(dir).map_err(|e| io_err("checking", dir, e))? {
        return Ok(Found::Missing);
    }
    let names = io.list_dir(dir).map_err(|e| io_err("listing", dir, e))?;
    if names.iter().any(|n| n == MARKER) {
        if let Some(m) = read(io, dir)? {
            return Ok(Found::Marker(m));
        }
    }
    // A lock file left by an open that failed, or a marker write cut short: still empty.
    let mut rest = names
        .into_iter()
        .filter(|n| n != crate::storage::io::LOCK_FILE && n != MARKER_TMP && n != MARKER);
    match rest.next() {
        None => Ok(Found::Empty),
        Some(example) => Err(Error::DataDirUnformatted {
            dir: dir.to_path_buf(),
            missing: false,
            entries: 1 + rest.count(),
            example: Some(example),
        }),
    }
}

/// What opening the directories `paths` will do to their markers.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The marker each path will carry.
    pub(crate) markers: Vec<DataDirMarker>,
    /// Paths whose marker is new (a new or lost directory), then paths whose marker lists
    /// an old set: the order they are written in.
    write: Vec<usize>,
    /// Members of the set that lost their marker, formatted again (with `replace_lost`).
    pub(crate) lost: Vec<PathBuf>,
}

impl Plan {
    /// Writes the markers that change: the new and replaced directories' first, then the
    /// others' lists. A crash in between leaves at least one list naming every formatted
    /// directory, which the next open takes as the set.
    pub(crate) fn apply(&self, io: &dyn Io, paths: &[PathBuf]) -> Result<()> {
        for &i in &self.write {
            write(io, &paths[i], &self.markers[i])?;
        }
        Ok(())
    }
}

/// Decides what to do with the marker of each of `paths` (reads only). `whole_set`: also
/// check that every directory of their set is listed (once the directories are locked);
/// without it, the formatted directories' locks are probed instead, so that a directory
/// another broker holds fails as locked, not as part of a partial or foreign set.
///
/// # Errors
///
/// [`Error::DataDirUnformatted`] for a directory holding something without a marker (even
/// with `create`), or an empty one without `create`; [`Error::DataDirUnformatted`] for a
/// missing path without `create`; [`Error::DataDirLost`] for a member of the set without its
/// marker (without `replace_lost`); [`Error::InvalidDirMarker`]; [`Error::ForeignDataDir`]
/// for a marker of another broker or set; without `whole_set`,
/// [`Error::DirectoryLocked`]; with it, [`Error::InvalidConfig`] (`data_dirs`) when a
/// directory of the set is not listed.
pub(crate) fn plan(
    io: &dyn Io,
    paths: &[PathBuf],
    options: MarkerConfig,
    whole_set: bool,
) -> Result<Plan> {
    let found: Vec<Found> = paths.iter().map(|p| look(io, p)).collect::<Result<_>>()?;
    let unformatted = |i: usize| -> Result<()> {
        match (&found[i], options.create) {
            (Found::Marker(_), _) | (_, true) => Ok(()),
            (Found::Missing, false) => Err(Error::DataDirUnformatted {
                dir: paths[i].clone(),
                missing: true,
                entries: 0,
                example: None,
            }),
            (Found::Empty, false) => Err(Error::DataDirUnformatted {
                dir: paths[i].clone(),
                missing: false,
                entries: 0,
                example: None,
            }),
        }
    };
    let formatted: Vec<(usize, &DataDirMarker)> = found
        .iter()
        .enumerate()
        .filter_map(|(i, f)| match f {
            Found::Marker(m) => Some((i, m)),
            _ => None,
        })
        .collect();
    let Some(&(first_at, first)) = formatted.first() else {
        // A new broker: every path is formatted, as one set.
        (0..paths.len()).try_for_each(unformatted)?;
        let cluster_id = new_id();
        let mut ids = Vec::new();
        while ids.len() < paths.len() {
            let id = fresh_id(&ids);
            if id != cluster_id {
                ids.push(id);
            }
        }
        let markers = ids
            .iter()
            .map(|id| DataDirMarker {
                version: VERSION,
                cluster_id: cluster_id.clone(),
                node_id: 0,
                directory_id: id.clone(),
                directories: ids.clone(),
            })
            .collect();
        return Ok(Plan {
            markers,
            write: (0..paths.len()).collect(),
            lost: Vec::new(),
        });
    };
    let found_ids: Vec<&str> = formatted
        .iter()
        .map(|(_, m)| m.directory_id.as_str())
        .collect();
    // The set: the newest list, i.e. one naming every formatted directory found.
    let set = formatted
        .iter()
        .map(|(_, m)| &m.directories)
        .find(|list| found_ids.iter().all(|id| list.iter().any(|x| x == id)));
    if !whole_set {
        // A directory another broker holds is reported as locked, before the set's checks
        // (its siblings may be that broker's too): a probe, released at once.
        for &(i, _) in &formatted {
            if let Err(e) = io.lock_dir(&paths[i]) {
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    return Err(Error::DirectoryLocked {
                        dir: paths[i].clone(),
                        lock_file: paths[i].join(crate::storage::io::LOCK_FILE),
                    });
                }
            }
        }
    }
    check_set(paths, &formatted, set)?;
    let recorded = set.unwrap_or(&first.directories);
    // Each unformatted path: a lost member when the set's id at its place is found
    // nowhere, else a new directory (appended to the set).
    let mut ids: Vec<Option<String>> = Vec::new();
    let mut next = recorded.clone();
    let mut lost = Vec::new();
    let mut fresh = Vec::new();
    for (i, f) in found.iter().enumerate() {
        if let Found::Marker(m) = f {
            ids.push(Some(m.directory_id.clone()));
            continue;
        }
        let was = recorded
            .get(i)
            .filter(|id| !found_ids.contains(&id.as_str()));
        match was {
            Some(id) if !options.replace_lost => {
                return Err(Error::DataDirLost {
                    dir: paths[i].clone(),
                    index: i,
                    directory_id: id.clone(),
                    missing: matches!(f, Found::Missing),
                })
            }
            Some(_) => {
                let id = fresh_id(&next);
                next[i] = id.clone();
                ids.push(Some(id));
                lost.push(i);
            }
            None => {
                unformatted(i)?;
                ids.push(None);
            }
        }
        fresh.push(i);
    }
    if whole_set {
        // A recorded directory neither found nor replaced was left out of `data_dirs`.
        let unlisted = recorded
            .iter()
            .enumerate()
            .find(|(j, id)| !found_ids.contains(&id.as_str()) && !lost.contains(j));
        if let Some((index, id)) = unlisted {
            return Err(Error::InvalidConfig {
                name: "data_dirs",
                value: format!("{} directories", paths.len()),
                valid: format!(
                    "every directory of the broker ({} recorded in {}): directory {index} \
                     (id {id}) is not listed; list it again (if it is lost, list an empty \
                     directory in its place and open with \
                     BrokerBuilder::replace_lost_data_dirs(true))",
                    recorded.len(),
                    paths[first_at].join(MARKER).display()
                ),
            });
        }
    }
    let ids: Vec<String> = ids
        .into_iter()
        .map(|id| {
            id.unwrap_or_else(|| {
                let id = fresh_id(&next);
                next.push(id.clone());
                id
            })
        })
        .collect();
    let mut write = fresh;
    for (i, m) in &formatted {
        if m.directories != next {
            write.push(*i);
        }
    }
    let markers = ids
        .into_iter()
        .map(|directory_id| DataDirMarker {
            version: VERSION,
            cluster_id: first.cluster_id.clone(),
            node_id: first.node_id,
            directory_id,
            directories: next.clone(),
        })
        .collect();
    Ok(Plan {
        markers,
        write,
        lost: lost.into_iter().map(|i| paths[i].clone()).collect(),
    })
}

/// The markers found must be one broker's (one cluster id) and one set's (a list naming
/// every directory found).
fn check_set(
    paths: &[PathBuf],
    formatted: &[(usize, &DataDirMarker)],
    set: Option<&Vec<String>>,
) -> Result<()> {
    let (first_at, first) = formatted[0];
    for &(i, m) in formatted {
        if m.cluster_id != first.cluster_id {
            return Err(Error::ForeignDataDir {
                dir: paths[i].clone(),
                reason: format!(
                    "its cluster id is {}, {}'s is {} (a directory of another broker)",
                    m.cluster_id,
                    paths[first_at].display(),
                    first.cluster_id
                ),
            });
        }
    }
    if set.is_some() {
        return Ok(());
    }
    let (i, m) = formatted
        .iter()
        .find(|(_, m)| m.directories != first.directories)
        .copied()
        .unwrap_or(formatted[formatted.len() - 1]);
    Err(Error::ForeignDataDir {
        dir: paths[i].clone(),
        reason: format!(
            "its marker lists the directories {}, {}'s lists {}: no list names every \
             directory given",
            m.directories.join(","),
            paths[first_at].display(),
            first.directories.join(",")
        ),
    })
}

/// An id not in `taken`.
fn fresh_id(taken: &[String]) -> String {
    loop {
        let id = new_id();
        if !taken.contains(&id) {
            return id;
        }
    }
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::*;

    #[test]
    fn ids_are_kafka_uuid_text_and_distinct() {
        let a: Vec<String> = (0..100).map(|_| new_id()).collect();
        assert!(a.iter().all(|id| is_id(id)), "{a:?}");
        let mut d = a.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), a.len());
        // 16 zero bytes and 16 0xFF bytes, as Kafka's Uuid prints them.
        assert_eq!(base64_url(&[0; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(base64_url(&[0xFF; 16]), "_____________________w");
    }

    #[test]
    fn a_marker_reads_back_as_written() {
        let m = DataDirMarker {
            version: 1,
            cluster_id: new_id(),
            node_id: 0,
            directory_id: new_id(),
            directories: Vec::new(),
        };
        let m = DataDirMarker {
            directories: vec![new_id(), m.directory_id.clone()],
            ..m
        };
        let back = DataDirMarker::parse(Path::new("m"), m.to_text().as_bytes()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.index(), Some(1));
    }
}
