//! The I/O trait under every file access of the storage layer, and its real implementation.
//!
//! Everything the storage layer does to a disk goes through [`Io`] (directories, names) and
//! [`IoFile`] (one open file), so that a test can substitute
//! `storage::fault::FaultyIo` (feature `test-util`), which injects failures and simulates
//! power loss.
//! Files are only ever read and written with positioned calls (`pread`/`pwrite` on Unix);
//! nothing is memory-mapped, so a full disk is an error, never a `SIGBUS`.
//!
//! Durability follows POSIX: data is durable after [`IoFile::sync_data`] (or `sync_all`),
//! and a new, renamed or removed name after [`Io::sync_dir`] on its directory.
//!
//! # Examples
//!
//! ```
//! use logbus::storage::io::{FsIo, Io, OpenMode};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("hello");
//! let file = FsIo.open(&path, OpenMode::CreateNew)?;
//! file.write_all_at(b"hello", 0)?;
//! file.sync_data()?;
//! FsIo.sync_dir(dir.path())?;
//!
//! let mut buf = [0u8; 5];
//! file.read_exact_at(&mut buf, 0)?;
//! assert_eq!(&buf, b"hello");
//! assert_eq!(FsIo.list_dir(dir.path())?, vec!["hello".to_string()]);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fmt;
use std::fs;
use std::io;
use std::path::Path;

// Defined with the error type (below this layer), so that `error` never calls up into storage.
pub use crate::error::not_regular_file::NotRegularFile;

/// How [`Io::open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write, creating the file if it is missing (contents kept).
    Create,
    /// Read and write a new, empty file; an existing file is an error (`AlreadyExists`).
    CreateNew,
    /// Read and write, creating the file or emptying an existing one.
    Truncate,
}

/// One open file. Every method takes `&self`: positioned reads and writes need no cursor.
pub trait IoFile: Send + Sync + fmt::Debug {
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;

    /// Reads up to `buf.len()` bytes at `pos`; returns how many were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize>;

    /// Writes up to `buf.len()` bytes at `pos`; returns how many were written (a short write
    /// is allowed, as for `pwrite`).
    fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<usize>;

    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Makes the file's data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;

    /// Makes the file's data and metadata durable (`fsync`).
    fn sync_all(&self) -> io::Result<()>;

    /// A hint: start writing the bytes `[pos, pos + len)` back to the device now, without
    /// waiting (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`, as RocksDB's `bytes_per_sync`
    /// does), so the device works while the caller goes on and a later
    /// [`sync_data`](IoFile::sync_data) has less left to wait for. It makes nothing durable
    /// and promises nothing; the default does nothing.
    ///
    /// # Errors
    ///
    /// The underlying error; callers may ignore it (the next `sync_data` reports a failed
    /// write-back).
    fn start_writeback(&self, pos: u64, len: u64) -> io::Result<()> {
        let _ = (pos, len);
        Ok(())
    }

    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Reads exactly `buf.len()` bytes at `pos`.
    ///
    /// # Errors
    ///
    /// `UnexpectedEof` when the file ends first, or the underlying error.
    fn read_exact_at(&self, mut buf: &mut [u8], mut pos: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, pos) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("file ends before byte {}", pos + buf.len() as u64),
                    ))
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes all of `buf` at `pos`, retrying short writes.
    ///
    /// # Errors
    ///
    /// `WriteZero` when a write makes no progress, or the underlying error (after a failure,
    /// a prefix of `buf` may have been written).
    fn write_all_at(&self, mut buf: &[u8], mut pos: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, pos) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "write made no progress",
                    ))
                }
                Ok(n) => {
                    buf = &buf[n..];
                    pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads the whole file.
    ///
    /// # Errors
    ///
    /// The underlying error.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = self.len()?;
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "file too large"))?;
        let mut buf = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            match self.read_at(&mut buf[filled..], filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(filled);
        Ok(buf)
    }
}

/// A file system: opening files and changing directory entries.
///
/// Implementations must be usable from several threads (`Send + Sync`), though the storage
/// layer itself calls them from one thread at a time.
pub trait Io: Send + Sync + fmt::Debug {
    /// Opens `path` as `mode` says.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>>;

    /// The names of the entries of `dir` (not `.` or `..`), sorted; names that are not UTF-8
    /// are skipped (the storage layer never creates any).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;

    /// Creates `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Removes the file `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Renames `from` to `to`, replacing `to` atomically if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes the empty directory `dir` (an error if it holds anything).
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;

    /// Makes the entries of `dir` (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> io::Result<bool>;

    /// Takes the exclusive lock of the directory `dir` (which must exist), held until the
    /// returned guard is dropped or the process dies: one writer per partition directory, as
    /// Kafka locks its log directories with a `.lock` file.
    ///
    /// # Errors
    ///
    /// `WouldBlock` when the lock is held (by this process or another), or the underlying
    /// error.
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>>;
}

/// The name of the file [`FsIo::lock_dir`] locks in a partition directory.
pub const LOCK_FILE: &str = ".lock";

/// A held directory lock ([`Io::lock_dir`]); dropping it releases the lock.
pub trait DirLock: Send + Sync + fmt::Debug {}

/// The real file system, through `std::fs`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FsIo;

#[derive(Debug)]
struct FsFile(fs::File);

impl Io for FsIo {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>> {
        Ok(Box::new(FsFile(open_regular(path, mode)?)))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        #[cfg(unix)]
        {
            fs::File::open(dir)?.sync_all()
        }
        // std cannot open a directory as a file outside Unix: there this is best effort.
        #[cfg(not(unix))]
        {
            let _ = dir;
            Ok(())
        }
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    /// An exclusive, non-blocking lock on `dir/.lock` (created if missing), through std's
    /// [`File::try_lock`](fs::File::try_lock) on every platform (`flock` on Unix, `LockFileEx`
    /// on Windows). The lock belongs to the open file, so a second open in the same process
    /// conflicts too, and the operating system drops it when the process dies.
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        let file = open_regular(&dir.join(LOCK_FILE), OpenMode::Create)?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(FsDirLock(file))),
            Err(fs::TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// The locked `.lock` file: closing it releases the lock.
#[derive(Debug)]
struct FsDirLock(#[allow(dead_code)] fs::File);

impl DirLock for FsDirLock {}

/// Opens `path` as `mode` says, only if it is a regular file: a symbolic link is not followed
/// (`O_NOFOLLOW`) and the open does not block (`O_NONBLOCK`, so a FIFO cannot hang it); anything
/// else is a [`NotRegularFile`] error.
fn open_regular(path: &Path, mode: OpenMode) -> io::Result<fs::File> {
    let mut o = fs::OpenOptions::new();
    match mode {
        OpenMode::Read => o.read(true),
        OpenMode::ReadWrite => o.read(true).write(true),
        OpenMode::Create => o.read(true).write(true).create(true),
        OpenMode::CreateNew => o.read(true).write(true).create_new(true),
        OpenMode::Truncate => o.read(true).write(true).create(true).truncate(true),
    };
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    // Without the flags (libc is a Linux-only dependency), a look first: racy, but it keeps
    // a symlink or a FIFO found in a directory from being followed or blocked on.
    #[cfg(not(target_os = "linux"))]
    if let Ok(meta) = fs::symlink_metadata(path) {
        let kind = meta.file_type();
        if kind.is_symlink() {
            return Err(NotRegularFile::error("a symbolic link"));
        }
        if !kind.is_file() && !kind.is_dir() {
            return Err(NotRegularFile::error(
                "a special file (FIFO, socket or device)",
            ));
        }
    }
    let file = match o.open(path) {
        Ok(file) => file,
        #[cfg(target_os = "linux")]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(NotRegularFile::error("a symbolic link"))
        }
        #[cfg(target_os = "linux")]
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Err(NotRegularFile::error("a directory"))
        }
        Err(e) => return Err(e),
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else {
            "a special file (FIFO, socket or device)"
        };
        return Err(NotRegularFile::error(what));
    }
    // Reads and writes of a regular file ignore O_NONBLOCK; only the open needed it.
    Ok(file)
}

impl IoFile for FsFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_at(&self.0, buf, pos)
        }
        #[cfg(windows)]
        {
            std::os::windows::fs::FileExt::seek_read(&self.0, buf, pos)
        }
    }

    fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<usize> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::write_at(&self.0, buf, pos)
        }
        #[cfg(windows)]
        {
            std::os::windows::fs::FileExt::seek_write(&self.0, buf, pos)
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn start_writeback(&self, pos: u64, len: u64) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::io::AsRawFd;
            let (Ok(pos), Ok(len)) = (i64::try_from(pos), i64::try_from(len)) else {
                return Ok(()); // beyond what the call can name: nothing to hint
            };
            // SAFETY: `sync_file_range` only reads its integer arguments; the descriptor is
            // open for as long as `self.0` lives, which outlasts the call.
            let rc = unsafe {
                libc::sync_file_range(self.0.as_raw_fd(), pos, len, libc::SYNC_FILE_RANGE_WRITE)
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (pos, len);
            Ok(())
        }
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
}
