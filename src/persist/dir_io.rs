//! One data directory's view of the file system: every call goes to the broker's [`Io`],
//! unless the directory was failed ([`DirIo::fail`]), after which every call — on files
//! opened before too — returns `EIO`, as a dead disk does. This is how
//! [`Faults::fail_data_dir`](crate::replica::Faults::fail_data_dir) fails a persisted directory: the
//! storage layer sees real I/O errors and takes the directory's logs offline.

use std::fmt;
use std::io;
use std::path::Path;

use crate::storage::{DirLock, Io, IoFile, OpenMode};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::Arc;

/// The failure switch, shared by the directory and every file opened through it.
#[derive(Debug, Default)]
struct Switch(AtomicBool);

impl Switch {
    fn check(&self) -> io::Result<()> {
        // Acquire: pairs with the Release store in `DirIo::fail`.
        if self.0.load(Ordering::Acquire) {
            return Err(io::Error::other("the data directory failed (injected)"));
        }
        Ok(())
    }
}

/// See the module docs.
pub(crate) struct DirIo {
    inner: Arc<dyn Io>,
    switch: Arc<Switch>,
}

impl fmt::Debug for DirIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirIo")
            .field("failed", &self.switch.check().is_err())
            .finish_non_exhaustive()
    }
}

impl DirIo {
    pub(crate) fn new(inner: Arc<dyn Io>) -> Self {
        Self {
            inner,
            switch: Arc::new(Switch::default()),
        }
    }

    /// The handle that fails or restores this directory.
    pub(crate) fn switch(&self) -> DirSwitch {
        DirSwitch(Arc::clone(&self.switch))
    }
}

/// Fails or restores one [`DirIo`].
#[derive(Debug, Clone)]
pub(crate) struct DirSwitch(Arc<Switch>);

impl DirSwitch {
    /// Fails (`true`) or restores the directory.
    pub(crate) fn fail(&self, failed: bool) {
        // Release: pairs with the Acquire in `Switch::check`.
        (self.0).0.store(failed, Ordering::Release);
    }
}

#[derive(Debug)]
struct DirFile {
    inner: Box<dyn IoFile>,
    switch: Arc<Switch>,
}

impl IoFile for DirFile {
    fn len(&self) -> io::Result<u64> {
        self.switch.check()?;
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.switch.check()?;
        self.inner.read_at(buf, pos)
    }
    fn write_at(&self, buf: &[u8], pos: u64) -> io::Result<usize> {
        self.switch.check()?;
        self.inner.write_at(buf, pos)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.switch.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.switch.check()?;
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.switch.check()?;
        self.inner.sync_all()
    }
    fn start_writeback(&self, pos: u64, len: u64) -> io::Result<()> {
        self.switch.check()?;
        self.inner.start_writeback(pos, len)
    }
}

impl Io for DirIo {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn IoFile>> {
        self.switch.check()?;
        Ok(Box::new(DirFile {
            inner: self.inner.open(path, mode)?,
            switch: Arc::clone(&self.switch),
        }))
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.switch.check()?;
        self.inner.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.switch.check()?;
        self.inner.create_dir_all(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.switch.check()?;
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.switch.check()?;
        self.inner.rename(from, to)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.switch.check()?;
        self.inner.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.switch.check()?;
        self.inner.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.switch.check()?;
        self.inner.exists(path)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        self.switch.check()?;
        self.inner.lock_dir(dir)
    }
}
