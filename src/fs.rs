//! The one small filesystem interface every write goes through.
//!
//! All file creation, appends, syncs, renames and removals the engine makes
//! go through a [`FileSystem`], so tests can substitute an implementation that
//! loses unsynced data at a simulated power cut or fails the n-th call with
//! an I/O error. [`RealFs`], the default, maps each call onto `std::fs`.
//! Reads of immutable table files use memory maps of the real files; a test
//! filesystem keeps real files on disk and changes them only at a cut.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;

mod fault;
pub use fault::{FaultCounts, FaultFs, FaultKind, FaultOp, Writeback};

/// A file open for appending.
pub trait WritableFile: Send {
    /// Appends all of `data`.
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (fsync / fdatasync).
    fn sync(&mut self) -> io::Result<()>;
}

/// Filesystem operations used by the engine.
pub trait FileSystem: Send + Sync + fmt::Debug {
    /// Creates `path` and its parents if missing.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates (or truncates) `path` for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Creates `path` for writing; fails with
    /// [`io::ErrorKind::AlreadyExists`] if it exists, leaving it as it is.
    ///
    /// The engine creates every table, log and manifest with this: each
    /// has a file number never handed out before, so an existing file of
    /// that name means the numbering went wrong, and truncating it could
    /// destroy a live table (one a reader has mapped). The default looks
    /// for the name in [`list_dir`](Self::list_dir) of the parent, then
    /// calls [`create`](Self::create); an implementation that can create
    /// exclusively (`O_EXCL`, as [`RealFs`] does) should.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = path.file_name().and_then(|n| n.to_str());
        if let Some(name) = name {
            if self.list_dir(parent)?.iter().any(|n| n == name) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} already exists", path.display()),
                ));
            }
        }
        self.create(path)
    }
    /// Opens `path` for appending, creating it if missing.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Reads the whole of `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The length of the file `path` in bytes. The default reads it whole
    /// ([`read`](Self::read)); [`RealFs`] asks the filesystem.
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        self.read(path).map(|data| data.len() as u64)
    }
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Names of the entries of directory `path`, every one (a name that is
    /// not UTF-8 converted lossily).
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Truncates `path` to `len` bytes (used to drop a torn log tail).
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Makes `to` (which must not exist) a file with the contents of the
    /// immutable file `from`, its data durable on return and its name once
    /// `to`'s directory is synced: a hard link where the filesystem allows
    /// one, otherwise a synced copy. Used by
    /// [`Db::checkpoint`](crate::Db::checkpoint) for table files.
    ///
    /// The default copies through [`read`](Self::read),
    /// [`create`](Self::create) and [`WritableFile::sync`], so an
    /// implementation that tracks those calls sees the copy.
    fn link_or_copy(&self, from: &Path, to: &Path) -> io::Result<()> {
        let data = self.read(from)?;
        let mut file = self.create(to)?;
        let written = file.append(&data).and_then(|()| file.sync());
        if written.is_err() {
            drop(file);
            let _ = self.remove_file(to);
        }
        written
    }
}

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct RealFile {
    file: File,
}

impl WritableFile for RealFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}

impl FileSystem for RealFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(RealFile { file }))
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(RealFile { file }))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().append(true).create(true).open(path)?;
        Ok(Box::new(RealFile { file }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        File::open(path)?.read_to_end(&mut out)?;
        Ok(out)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        // Every entry, a name that is not UTF-8 included (lossily: it then
        // holds U+FFFD, so it is never taken for one of the engine's own
        // file names); dropping them made a directory holding only such
        // names list as empty (found by review: a checkpoint wrote into
        // one).
        for entry in fs::read_dir(path)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(len)?;
        f.sync_all()
    }
    fn link_or_copy(&self, from: &Path, to: &Path) -> io::Result<()> {
        // A hard link shares the data; it fails across filesystems and on
        // some that lack links, where a copy does. The linked data is
        // synced too: a table's already is (a cheap no-op), but a log set
        // aside by a point-in-time open may still have its tail only in
        // the page cache after a process crash (found by review).
        match fs::hard_link(from, to) {
            Ok(()) => {
                let synced = File::open(to).and_then(|f| f.sync_all());
                if synced.is_err() {
                    let _ = fs::remove_file(to);
                }
                return synced;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(e),
            Err(_) => {}
        }
        let copied = fs::copy(from, to).and_then(|_| File::open(to)?.sync_all());
        if copied.is_err() {
            let _ = fs::remove_file(to);
        }
        copied
    }
}
