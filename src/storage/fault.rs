//! Test support: an in-memory file system that injects faults and simulates power loss.
//!
//! [`FaultyIo`] implements [`Io`] over memory, deterministically from a seed, so tests (in
//! this crate and downstream) can check what the storage layer does when disks fail:
//!
//! - **Faults.** [`inject`](FaultyIo::inject) makes a later write fail with `EIO`, return a
//!   short count, or an fsync fail; [`set_capacity`](FaultyIo::set_capacity) makes the disk
//!   full, so writes are cut short and then fail with `ENOSPC`.
//! - **Power loss.** [`crash`](FaultyIo::crash) keeps what was made durable —
//!   file contents at their last `sync_data`/`sync_all`, directory entries at their last
//!   `sync_dir` — and of everything since, only a random prefix (in the order it was done):
//!   file writes survive in whole 4096-byte pages, the last page possibly torn (cut at a random
//!   byte, the rest of the page lost or zero-filled as when a file's size reached the disk
//!   before its data). Handles opened before the crash fail afterwards, as a restarted process
//!   has none, and directory locks are released.
//! - **Process death.** [`kill`](FaultyIo::kill) ends the "process" without a power loss:
//!   handles fail and locks are released, but every write stays (the page cache survives).
//!
//! It is public, not `cfg(test)`, so that integration tests and fuzz targets can use it; it
//! is not meant for production use.
//!
//! # Examples
//!
//! ```
//! use std::path::Path;
//! use logbus::storage::fault::FaultyIo;
//! use logbus::storage::io::{Io, OpenMode};
//!
//! let fs = FaultyIo::new(7);
//! let dir = Path::new("/data");
//! fs.create_dir_all(dir)?;
//! let f = fs.open(&dir.join("a"), OpenMode::CreateNew)?;
//! f.write_all_at(b"durable", 0)?;
//! f.sync_data()?;
//! fs.sync_dir(dir)?;
//! f.write_all_at(b" and maybe not", 7)?;
//!
//! fs.crash();
//! let after = fs.read_file(&dir.join("a")).unwrap();
//! assert!(after.starts_with(b"durable"));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # Notes for contributors
//!
//! `storage::fault::FaultyIo` (feature `test-util`) is an in-memory `Io` that fails writes, cuts them short, fails
//! fsyncs, fills up (`ENOSPC`) and simulates power loss (un-fsynced writes survive as a random
//! page-granular prefix, the last page possibly torn or zero-filled; everything fsynced
//! survives), deterministically from a seed.
//!
//! ```sh
//! cargo test --test storage --test crash
//! LOGBUS_CRASH_SEEDS=5000 cargo test --test storage storage_faults::power_loss   # a longer crash search
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::io::{DirLock, Io, IoFile, OpenMode};
use crate::sync::{Arc, Mutex};

/// Page size of the simulated disk: writes not yet fsynced survive a crash in whole pages.
pub const PAGE_SIZE: usize = 4096;

/// A fault to inject with [`FaultyIo::inject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A write fails with `EIO`, writing nothing.
    WriteError,
    /// A write writes only part of its bytes and reports so (callers must retry).
    ShortWrite,
    /// A `sync_data`/`sync_all` fails with `EIO`; nothing becomes durable.
    SyncError,
    /// A `sync_dir` fails with `EIO`; no directory change becomes durable.
    DirSyncError,
}

#[derive(Debug, Clone)]
enum DataOp {
    Write { pos: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Changes since the last sync, in order.
    ops: Vec<DataOp>,
}

#[derive(Debug, Clone)]
enum NsOp {
    Link {
        path: PathBuf,
        ino: usize,
    },
    Unlink {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
        ino: usize,
    },
}

impl NsOp {
    fn dir(&self) -> PathBuf {
        let p = match self {
            NsOp::Link { path, .. } | NsOp::Unlink { path } => path,
            NsOp::Rename { to, .. } => to,
        };
        p.parent().map(Path::to_path_buf).unwrap_or_default()
    }

    fn apply(&self, names: &mut BTreeMap<PathBuf, usize>) {
        match self {
            NsOp::Link { path, ino } => {
                names.insert(path.clone(), *ino);
            }
            NsOp::Unlink { path } => {
                names.remove(path);
            }
            NsOp::Rename { from, to, ino } => {
                names.remove(from);
                names.insert(to.clone(), *ino);
            }
        }
    }
}

#[derive(Debug)]
struct State {
    inodes: Vec<Inode>,
    names: BTreeMap<PathBuf, usize>,
    durable_names: BTreeMap<PathBuf, usize>,
    dirs: BTreeSet<PathBuf>,
    pending_ns: Vec<NsOp>,
    /// Faults armed: (fault, matching operations still to let through).
    faults: Vec<(Fault, usize)>,
    capacity: Option<u64>,
    rng: fastrand::Rng,
    generation: u64,
    crashes: u64,
    /// Locked directories ([`Io::lock_dir`]), each with the id of the guard holding it.
    locks: BTreeMap<PathBuf, u64>,
    next_lock_id: u64,
}

impl State {
    /// Whether `fault` fires now (consuming it).
    fn fire(&mut self, fault: Fault) -> bool {
        let mut fired = false;
        self.faults.retain_mut(|(f, skip)| {
            if fired || *f != fault {
                return true;
            }
            if *skip == 0 {
                fired = true;
                false
            } else {
                *skip -= 1;
                true
            }
        });
        fired
    }

    fn used_bytes(&self) -> u64 {
        let live: BTreeSet<usize> = self.names.values().copied().collect();
        live.iter().map(|&i| self.inodes[i].data.len() as u64).sum()
    }
}

fn apply_op(data: &mut Vec<u8>, op: &DataOp) {
    match op {
        DataOp::Write { pos, bytes } => {
            let pos = *pos as usize;
            let end = pos + bytes.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[pos..end].copy_from_slice(bytes);
        }
        DataOp::SetLen(len) => data.resize(*len as usize, 0),
    }
}

/// An in-memory [`Io`] with injected faults and simulated power loss. Cloning gives another
/// handle to the same file system. See the [module docs](self).
#[derive(Clone)]
pub struct FaultyIo {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for FaultyIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.lock();
        f.debug_struct("FaultyIo")
            .field("files", &s.names.len())
            .field("crashes", &s.crashes)
            .finish_non_exhaustive()
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected I/O error ({what})"))
}

/// The `ENOSPC` error a full simulated disk returns.
pub fn no_space() -> io::Error {
    io::Error::from_raw_os_error(28)
}

impl FaultyIo {
    /// An empty file system (with a root directory `/`) whose random choices follow `seed`.
    pub fn new(seed: u64) -> Self {
        let mut dirs = BTreeSet::new();
        dirs.insert(PathBuf::from("/"));
        FaultyIo {
            state: Arc::new(Mutex::new(State {
                inodes: Vec::new(),
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                dirs,
                pending_ns: Vec::new(),
                faults: Vec::new(),
                capacity: None,
                rng: fastrand::Rng::with_seed(seed),
                generation: 0,
                crashes: 0,
                locks: BTreeMap::new(),
                next_lock_id: 0,
            })),
        }
    }

    /// Arms `fault`: the matching operation after the next `skip` ones fails (once).
    pub fn inject(&self, fault: Fault, skip: usize) {
        self.state.lock().faults.push((fault, skip));
    }

    /// Disarms every injected fault.
    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// Limits the bytes all files may hold together (`None`: unlimited). A write that would
    /// go beyond writes what fits and reports it, then fails with `ENOSPC`.
    pub fn set_capacity(&self, capacity: Option<u64>) {
        self.state.lock().capacity = capacity;
    }

    /// Bytes all files hold together.
    pub fn used_bytes(&self) -> u64 {
        self.state.lock().used_bytes()
    }

    /// Simulates the death of the process using this file system, without a power loss:
    /// every open handle stops working and every directory lock is released, while the files
    /// keep every write (the page cache survives a killed process) — synced or not.
    pub fn kill(&self) {
        let mut s = self.state.lock();
        s.generation += 1;
        s.locks.clear();
    }

    /// How many times [`crash`](FaultyIo::crash) ran.
    pub fn crashes(&self) -> u64 {
        self.state.lock().crashes
    }

    /// Simulates a power loss (see the [module docs](self)). Injected faults and the
    /// capacity limit stay as they were; open handles stop working.
    pub fn crash(&self) {
        let mut s = self.state.lock();
        let s = &mut *s;
        // Directory changes: a random prefix of those not yet synced survives.
        let keep = s.rng.usize(0..=s.pending_ns.len());
        let mut names = s.durable_names.clone();
        for op in &s.pending_ns[..keep] {
            op.apply(&mut names);
        }
        s.pending_ns.clear();
        s.durable_names = names.clone();
        s.names = names;
        // File contents: a random prefix of the changes since the last sync, at page
        // granularity, the last page possibly torn.
        for inode in &mut s.inodes {
            let mut data = std::mem::take(&mut inode.durable);
            let ops = std::mem::take(&mut inode.ops);
            let full = s.rng.usize(0..=ops.len());
            for op in &ops[..full] {
                apply_op(&mut data, op);
            }
            if let Some(op) = ops.get(full) {
                match op {
                    DataOp::SetLen(_) => {
                        if s.rng.bool() {
                            apply_op(&mut data, op);
                        }
                    }
                    DataOp::Write { pos, bytes } => {
                        // Pages the write touches: keep whole pages from its start.
                        let start = *pos as usize;
                        let end = start + bytes.len();
                        let mut page_ends = Vec::new();
                        let mut p = (start / PAGE_SIZE + 1) * PAGE_SIZE;
                        while p < end {
                            page_ends.push(p);
                            p += PAGE_SIZE;
                        }
                        page_ends.push(end);
                        let whole = s.rng.usize(0..page_ends.len());
                        let kept_to = if whole == 0 {
                            start
                        } else {
                            page_ends[whole - 1]
                        };
                        let torn_page_end = page_ends[whole];
                        let torn_to = s.rng.usize(kept_to..=torn_page_end);
                        let mut survived = bytes[..torn_to - start].to_vec();
                        if s.rng.bool() && torn_to < torn_page_end {
                            // The size reached the disk, the data did not: zeros.
                            survived.resize(torn_page_end - start, 0);
                        }
                        apply_op(
                            &mut data,
                            &DataOp::Write {
                                pos: *pos,
                                bytes: survived,
                            },
                        );
                    }
                }
            }
            inode.durable = data.clone();
            inode.data = data;
        }
        s.generation += 1;
        s.crashes += 1;
        s.locks.clear();
    }

    /// The current contents of the file at `path` (what a read would see), if it exists.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.state.lock();
        s.names.get(path).map(|&i| s.inodes[i].data.clone())
    }

    /// Replaces the contents of an existing file at `path` durably (for tests that damage
    /// files by hand); returns whether the file existed.
    pub fn write_file(&self, path: &Path, bytes: &[u8]) -> bool {
        let mut s = self.state.lock();
        let Some(&i) = s.names.get(path) else {
            return false;
        };
        let inode = &mut s.inodes[i];
        inode.data = bytes.to_vec();
        inode.durable = bytes.to_vec();
        inode.ops.clear();
        true
    }

    fn check_dir(s: &State, path: &Path) -> io::Result<()> {
        let parent = path.parent().unwrap_or(Path::new("/"));
        if s.dirs.contains(parent) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", parent.display()),
            ))
        }
    }
}

impl Io for FaultyIo {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>> {
        let mut s = self.state.lock();
        Self::check_dir(&s, path)?;
        let existing = s.names.get(path).copied();
        let ino = match (existing, mode) {
            (Some(_), OpenMode::CreateNew) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{}: exists", path.display()),
                ))
            }
            (Some(i), OpenMode::Truncate) => {
                let inode = &mut s.inodes[i];
                inode.data.clear();
                inode.ops.push(DataOp::SetLen(0));
                i
            }
            (Some(i), _) => i,
            (None, OpenMode::Read | OpenMode::ReadWrite) => return Err(not_found(path)),
            (None, _) => {
                let i = s.inodes.len();
                s.inodes.push(Inode::default());
                s.names.insert(path.to_path_buf(), i);
                s.pending_ns.push(NsOp::Link {
                    path: path.to_path_buf(),
                    ino: i,
                });
                i
            }
        };
        Ok(Box::new(SimFile {
            state: self.state.clone(),
            ino,
            generation: s.generation,
            writable: mode != OpenMode::Read,
            path: path.to_path_buf(),
        }))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let s = self.state.lock();
        if !s.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let mut out: Vec<String> = s
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        out.sort();
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        // Directories are durable at once (a simplification: logbus's directories exist
        // before it writes into them).
        for ancestor in dir.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                s.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        if s.names.remove(path).is_none() {
            return Err(not_found(path));
        }
        s.pending_ns.push(NsOp::Unlink {
            path: path.to_path_buf(),
        });
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        Self::check_dir(&s, to)?;
        let Some(ino) = s.names.remove(from) else {
            return Err(not_found(from));
        };
        s.names.insert(to.to_path_buf(), ino);
        s.pending_ns.push(NsOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            ino,
        });
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        if !s.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        if s.fire(Fault::DirSyncError) {
            return Err(eio("sync_dir"));
        }
        let s = &mut *s;
        let (mine, rest): (Vec<NsOp>, Vec<NsOp>) =
            s.pending_ns.drain(..).partition(|op| op.dir() == dir);
        for op in &mine {
            op.apply(&mut s.durable_names);
        }
        s.pending_ns = rest;
        Ok(())
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        if !s.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        // Unlinks not yet made durable count too: after a crash those files would be back
        // in a directory that is gone.
        let busy = s.names.keys().any(|p| p.starts_with(dir))
            || s.durable_names.keys().any(|p| p.starts_with(dir))
            || s.pending_ns.iter().any(|op| op.dir() == dir)
            || s.dirs.iter().any(|d| d != dir && d.starts_with(dir));
        if busy {
            return Err(io::Error::other(format!(
                "{}: directory not empty",
                dir.display()
            )));
        }
        // Durable at once, as `create_dir_all` is (callers `sync_dir` its unlinks first).
        s.dirs.remove(dir);
        Ok(())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let s = self.state.lock();
        Ok(s.names.contains_key(path) || s.dirs.contains(path))
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        let mut s = self.state.lock();
        if !s.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        if s.locks.contains_key(dir) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{}: locked", dir.display()),
            ));
        }
        let id = s.next_lock_id;
        s.next_lock_id += 1;
        s.locks.insert(dir.to_path_buf(), id);
        Ok(Box::new(SimLock {
            state: self.state.clone(),
            dir: dir.to_path_buf(),
            id,
        }))
    }
}

/// A directory lock of [`FaultyIo`]; released on drop unless a kill or crash released it
/// already (then another guard may hold the directory, which this one must not release).
struct SimLock {
    state: Arc<Mutex<State>>,
    dir: PathBuf,
    id: u64,
}

impl fmt::Debug for SimLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLock").field("dir", &self.dir).finish()
    }
}

impl DirLock for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut s = self.state.lock();
        if s.locks.get(&self.dir) == Some(&self.id) {
            s.locks.remove(&self.dir);
        }
    }
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    ino: usize,
    generation: u64,
    writable: bool,
    path: PathBuf,
}

impl SimFile {
    fn live<'a>(&self, s: &'a mut State) -> io::Result<&'a mut Inode> {
        if s.generation != self.generation {
            return Err(io::Error::other(format!(
                "{}: handle opened before a simulated crash",
                self.path.display()
            )));
        }
        Ok(&mut s.inodes[self.ino])
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: opened read-only", self.path.display()),
            ))
        }
    }

    fn sync(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        self.live(&mut s)?;
        if s.fire(Fault::SyncError) {
            return Err(eio("fsync"));
        }
        let inode = self.live(&mut s)?;
        inode.durable = inode.data.clone();
        inode.ops.clear();
        Ok(())
    }
}

impl IoFile for SimFile {
    fn len(&self) -> io::Result<u64> {
        let mut s = self.state.lock();
        Ok(self.live(&mut s)?.data.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let mut s = self.state.lock();
        let data = &self.live(&mut s)?.data;
        let Ok(pos) = usize::try_from(pos) else {
            return Ok(0);
        };
        if pos >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - pos);
        buf[..n].copy_from_slice(&data[pos..pos + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<usize> {
        self.check_writable()?;
        let mut s = self.state.lock();
        self.live(&mut s)?;
        if buf.is_empty() {
            return Ok(0);
        }
        if s.fire(Fault::WriteError) {
            return Err(eio("write"));
        }
        let mut n = buf.len();
        if s.fire(Fault::ShortWrite) {
            n = s.rng.usize(1..=buf.len().div_ceil(2));
        }
        if let Some(capacity) = s.capacity {
            let used = s.used_bytes();
            let cur_len = s.inodes[self.ino].data.len() as u64;
            let end = pos + n as u64;
            let growth = end.saturating_sub(cur_len);
            if used + growth > capacity {
                let room = capacity.saturating_sub(used);
                let fits = (cur_len + room).saturating_sub(pos).min(n as u64) as usize;
                if fits == 0 {
                    return Err(no_space());
                }
                n = fits;
            }
        }
        let op = DataOp::Write {
            pos,
            bytes: buf[..n].to_vec(),
        };
        let inode = self.live(&mut s)?;
        apply_op(&mut inode.data, &op);
        inode.ops.push(op);
        Ok(n)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let mut s = self.state.lock();
        let inode = self.live(&mut s)?;
        let op = DataOp::SetLen(len);
        apply_op(&mut inode.data, &op);
        inode.ops.push(op);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync()
    }
}
