//! The real filesystem with a few calls changed, for tests that inject
//! failures or waits: a test implements only the [`FsHooks`] methods it
//! changes, and [`Hooked`] sends every other call to [`RealFs`].

use std::io;
use std::ops::Deref;
use std::path::Path;

use sievedb::fs::{FileSystem, RealFs, WritableFile};

/// The calls a test may change; each default is the real filesystem's.
pub trait FsHooks: Send + Sync + std::fmt::Debug {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        RealFs.create_dir_all(path)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        RealFs.create(path)
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        RealFs.open_append(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        RealFs.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealFs.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        RealFs.sync_dir(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        RealFs.list_dir(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        RealFs.truncate(path, len)
    }
}

/// A [`FileSystem`] made of the hooks `H` (derefs to `H` for its state).
/// `link_or_copy` is the trait's default, a copy through `read` and
/// `create`, so the hooks see checkpoint copies too.
#[derive(Debug, Default)]
pub struct Hooked<H>(pub H);

impl<H> Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.0
    }
}

impl<H: FsHooks> FileSystem for Hooked<H> {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.0.create_dir_all(path)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.0.create(path)
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.0.open_append(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.0.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.0.sync_dir(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.0.list_dir(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.0.truncate(path, len)
    }
}
