//! [`FaultFs`]: a [`FileSystem`] for tests that simulates power loss and
//! fails chosen calls with I/O errors.
//!
//! # Durability model (close to ext4 / POSIX)
//!
//! * A file's **data** is durable up to the length it had at its last
//!   successful [`WritableFile::sync`] (or [`FileSystem::truncate`], which
//!   syncs). Bytes appended after that are *unsynced*: at a power cut the
//!   file is cut back to its synced length. Files are append-only in
//!   sievedb, so "the synced prefix" is exactly the durable content.
//! * A **directory entry** (a create, rename or removal) is durable once the
//!   directory holding it has been synced with [`FileSystem::sync_dir`]. At a
//!   power cut every directory returns to its state at its last sync: files
//!   created since then disappear (even if their data was synced), renames
//!   since then are undone (the old name is back, with the content it had
//!   when durable), removed files reappear with their durable content.
//! * A directory made by `create_dir_all` is itself a directory entry: it
//!   is durable once its parent directory has been synced; at a power cut a
//!   directory that is not vanishes with everything in it. Files the engine
//!   does not create through the filesystem interface (the `LOCK` file) are
//!   left alone.
//! * Files that existed before a `FaultFs` first saw them are taken to be
//!   durable as they are.
//! * **How unsynced bytes are lost** is set by [`FaultFs::set_writeback`].
//!   [`Writeback::InOrder`] (the default) loses them as a suffix: the file is
//!   cut back to its synced length. [`Writeback::RandomPages`] models a
//!   kernel that wrote back some of the file's dirty 4 KiB pages before the
//!   cut, in any order: each page holding unsynced bytes reached the disk or
//!   not, independently (a coin flip from the seed); the unsynced bytes of a
//!   page that did not read as zeros, and the file ends where the last page
//!   that did ends (at most at its length before the cut). A lost page
//!   followed by a written one is a *hole*: the damage a log written with
//!   `sync_writes = false` can show after a real power cut.
//!
//! Writes go straight through to the real files (so memory-mapped table
//! reads and [`FileSystem::read`] see them, as they would see the page cache);
//! the filesystem only tracks, per file, how much of it is synced, and per
//! directory, which names are durable. [`FaultFs::power_cut`] freezes the
//! filesystem (every later call fails with `EIO`, nothing more reaches the
//! disk), and [`FaultFs::reboot`] then rewrites the directories to their
//! durable state and makes the filesystem usable again.
//!
//! # Injected errors
//!
//! [`FaultFs::fail_nth`] makes the n-th matching call from now fail with
//! `ENOSPC` ("disk full") or `EIO`. A failing append first writes the first
//! half of its data (a torn write, as a full disk would leave), then fails;
//! any other failing call changes nothing. Only that one call fails; later
//! calls succeed (the disk got some space back).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{FileSystem, WritableFile};

/// The kinds of filesystem call a fault can be aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// [`FileSystem::create`] and [`FileSystem::open_append`].
    Create,
    /// [`WritableFile::append`].
    Append,
    /// [`WritableFile::sync`].
    Sync,
    /// [`FileSystem::rename`].
    Rename,
    /// [`FileSystem::remove_file`].
    Remove,
    /// [`FileSystem::sync_dir`].
    SyncDir,
    /// [`FileSystem::truncate`].
    Truncate,
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `ENOSPC`: no space left on device.
    DiskFull,
    /// `EIO`: an input/output error.
    Io,
}

impl FaultKind {
    fn error(self) -> io::Error {
        match self {
            FaultKind::DiskFull => io::Error::from_raw_os_error(libc::ENOSPC),
            FaultKind::Io => io::Error::from_raw_os_error(libc::EIO),
        }
    }
}

/// How many calls of each kind a [`FaultFs`] has seen, and what it did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Mutating calls (everything but `read` and `list_dir`), including
    /// failed ones.
    pub mutations: u64,
    /// `create` / `open_append` calls.
    pub creates: u64,
    /// `append` calls.
    pub appends: u64,
    /// Bytes appended.
    pub bytes_appended: u64,
    /// File `sync` calls.
    pub syncs: u64,
    /// `rename` calls.
    pub renames: u64,
    /// `remove_file` calls.
    pub removes: u64,
    /// `sync_dir` calls.
    pub dir_syncs: u64,
    /// `truncate` calls.
    pub truncates: u64,
    /// Errors injected by [`FaultFs::fail_nth`].
    pub injected_errors: u64,
    /// Power cuts applied by [`FaultFs::reboot`].
    pub power_cuts: u64,
    /// Unsynced bytes thrown away by power cuts.
    pub bytes_lost: u64,
    /// Files that vanished or reverted (entry not durable) at power cuts.
    pub entries_reverted: u64,
}

/// How a power cut loses a file's unsynced bytes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Writeback {
    /// The file is cut back to its synced length: unsynced bytes are lost
    /// as a suffix.
    #[default]
    InOrder,
    /// Each 4 KiB page holding unsynced bytes was written back or not, a
    /// coin flip per page drawn from `seed` (the same seed and history give
    /// the same pages); unwritten unsynced bytes before the last written
    /// page read as zeros.
    RandomPages {
        /// Seeds the coin flips.
        seed: u64,
    },
}

/// Bytes of one page for [`Writeback::RandomPages`].
const WRITEBACK_PAGE: u64 = 4096;

/// What a power cut leaves of a file whose bytes were `live` and whose
/// first `synced_len` bytes were durable, under `writeback`; `coin` draws
/// the per-page flips.
fn after_power_cut(
    mut live: Vec<u8>,
    synced_len: u64,
    writeback: Writeback,
    coin: &mut impl FnMut() -> bool,
) -> Vec<u8> {
    let synced = (synced_len as usize).min(live.len());
    match writeback {
        Writeback::InOrder => {
            live.truncate(synced);
            live
        }
        Writeback::RandomPages { .. } => {
            let page = WRITEBACK_PAGE as usize;
            let mut end = synced;
            let mut at = synced;
            while at < live.len() {
                // The rest of the page `at` is in.
                let page_end = ((at / page + 1) * page).min(live.len());
                if coin() {
                    end = page_end;
                } else {
                    live[at..page_end].fill(0);
                }
                at = page_end;
            }
            live.truncate(end);
            live
        }
    }
}

/// SplitMix64: the coin flips of [`Writeback::RandomPages`].
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[derive(Debug, Clone, Copy)]
struct FailPlan {
    op: Option<FaultOp>,
    /// Matching calls still to pass before the failing one.
    remaining: u64,
    kind: FaultKind,
}

#[derive(Debug, Default)]
struct Inode {
    len: u64,
    synced_len: u64,
    /// Durable content kept when the inode left the namespace (removed or
    /// replaced) while a durable directory entry still names it.
    saved: Option<Vec<u8>>,
}

#[derive(Debug, Default)]
struct State {
    next_inode: u64,
    inodes: HashMap<u64, Inode>,
    /// The namespace as programs see it: path -> inode.
    live: HashMap<PathBuf, u64>,
    /// The namespace as of each directory's last sync.
    durable: HashMap<PathBuf, u64>,
    /// Directories created whose entry in their parent is not durable yet.
    new_dirs: std::collections::HashSet<PathBuf>,
    /// Set by a power cut: every call fails until `reboot`.
    frozen: bool,
    /// Freeze when `mutations` reaches this value (before that call runs).
    cut_at: Option<u64>,
    fail: Option<FailPlan>,
    /// Bumped at each reboot: handles from before it are dead.
    generation: u64,
    /// How a power cut loses unsynced bytes.
    writeback: Writeback,
    /// The state of the coin flips of [`Writeback::RandomPages`].
    coin_state: u64,
    counts: FaultCounts,
}

fn dead() -> io::Error {
    io::Error::other("power was cut (simulated): the filesystem is frozen until reboot")
}

impl State {
    /// Counts a mutating call and decides whether it runs: `Err` if power
    /// is (or now gets) cut or an injected fault hits it.
    fn begin(&mut self, op: FaultOp) -> io::Result<()> {
        if self.frozen {
            return Err(dead());
        }
        self.counts.mutations += 1;
        match op {
            FaultOp::Create => self.counts.creates += 1,
            FaultOp::Append => self.counts.appends += 1,
            FaultOp::Sync => self.counts.syncs += 1,
            FaultOp::Rename => self.counts.renames += 1,
            FaultOp::Remove => self.counts.removes += 1,
            FaultOp::SyncDir => self.counts.dir_syncs += 1,
            FaultOp::Truncate => self.counts.truncates += 1,
        }
        if self.cut_at.is_some_and(|n| self.counts.mutations >= n) {
            self.frozen = true;
            self.cut_at = None;
            return Err(dead());
        }
        if let Some(plan) = &mut self.fail {
            if plan.op.is_none_or(|o| o == op) {
                if plan.remaining == 0 {
                    let kind = plan.kind;
                    self.fail = None;
                    self.counts.injected_errors += 1;
                    return Err(kind.error());
                }
                plan.remaining -= 1;
            }
        }
        Ok(())
    }

    fn new_inode(&mut self, len: u64) -> u64 {
        self.next_inode += 1;
        let ino = self.next_inode;
        self.inodes.insert(
            ino,
            Inode {
                len,
                synced_len: len,
                saved: None,
            },
        );
        ino
    }

    /// Starts tracking a file that exists on disk but was never seen: it
    /// is taken to be durable as it is.
    fn adopt(&mut self, path: &Path) {
        if self.live.contains_key(path) {
            return;
        }
        if let Ok(meta) = fs::metadata(path) {
            if meta.is_file() {
                let ino = self.new_inode(meta.len());
                self.live.insert(path.to_path_buf(), ino);
                self.durable.insert(path.to_path_buf(), ino);
            }
        }
    }

    /// The inode at `path` is leaving the namespace; if a durable entry
    /// still names it, keep its durable content for a power cut. Call it
    /// while `path` still holds that inode's bytes. Returns what
    /// [`relink_live`](Self::relink_live) needs to undo it.
    fn unlink_live(&mut self, path: &Path) -> Option<Unlinked> {
        let ino = self.live.remove(path)?;
        let mut saved_here = false;
        if self.durable.values().any(|&d| d == ino) {
            if let Some(inode) = self.inodes.get_mut(&ino) {
                if inode.saved.is_none() {
                    let mut bytes = fs::read(path).unwrap_or_default();
                    bytes.truncate(inode.synced_len as usize);
                    inode.saved = Some(bytes);
                    saved_here = true;
                }
            }
        }
        Some(Unlinked { ino, saved_here })
    }

    /// Undoes [`unlink_live`](Self::unlink_live) after the real operation
    /// failed: `path` names its inode again, and content saved for it is
    /// dropped (a later unlink saves it afresh).
    fn relink_live(&mut self, path: &Path, undo: Option<Unlinked>) {
        let Some(Unlinked { ino, saved_here }) = undo else {
            return;
        };
        self.live.insert(path.to_path_buf(), ino);
        if saved_here {
            if let Some(inode) = self.inodes.get_mut(&ino) {
                inode.saved = None;
            }
        }
    }
}

/// What [`State::unlink_live`] did, for [`State::relink_live`].
struct Unlinked {
    ino: u64,
    /// The durable content was saved by this unlink (not before).
    saved_here: bool,
}

/// A [`FileSystem`] that simulates power loss and injects I/O errors, for
/// tests (see the module docs for the durability model).
///
/// Cheap to clone: clones share one state, so a test keeps one handle and
/// gives another to [`Options::fs`](crate::Options::fs).
#[derive(Clone, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("FaultFs")
            .field("files", &s.live.len())
            .field("frozen", &s.frozen)
            .field("counts", &s.counts)
            .finish()
    }
}

impl FaultFs {
    /// A fault-free filesystem with nothing tracked yet.
    pub fn new() -> FaultFs {
        FaultFs::default()
    }

    /// Makes the `n`-th call (1-based, counted from now) that matches `op`
    /// (`None`: any mutating call) fail with `kind`. Replaces any earlier
    /// plan. `n = 0` is [`Error::InvalidArgument`](crate::Error).
    pub fn fail_nth(&self, op: Option<FaultOp>, n: u64, kind: FaultKind) -> crate::Result<()> {
        let remaining = n
            .checked_sub(1)
            .ok_or_else(|| crate::Error::invalid("calls are counted from 1"))?;
        self.state.lock().fail = Some(FailPlan {
            op,
            remaining,
            kind,
        });
        Ok(())
    }

    /// Cuts the power just before the `n`-th mutating call (1-based, counted
    /// from now): that call and every later one fail, as if the machine
    /// stopped there. `n = 0` is [`Error::InvalidArgument`](crate::Error).
    pub fn cut_power_at(&self, n: u64) -> crate::Result<()> {
        if n == 0 {
            return Err(crate::Error::invalid("calls are counted from 1"));
        }
        let mut s = self.state.lock();
        s.cut_at = Some(s.counts.mutations.saturating_add(n));
        Ok(())
    }

    /// Sets how the next power cuts lose unsynced bytes (see the module
    /// docs); [`Writeback::RandomPages`] restarts its coin flips from its
    /// seed.
    pub fn set_writeback(&self, writeback: Writeback) {
        let mut s = self.state.lock();
        s.writeback = writeback;
        if let Writeback::RandomPages { seed } = writeback {
            s.coin_state = seed;
        }
    }

    /// Cuts the power now: every later call fails until [`reboot`](Self::reboot).
    pub fn power_cut(&self) {
        self.state.lock().frozen = true;
    }

    /// True once the power has been cut (and not yet rebooted).
    pub fn is_cut(&self) -> bool {
        self.state.lock().frozen
    }

    /// Removes any pending injected fault and scheduled cut.
    pub fn clear_faults(&self) {
        let mut s = self.state.lock();
        s.fail = None;
        s.cut_at = None;
    }

    /// The call counts so far.
    pub fn counts(&self) -> FaultCounts {
        self.state.lock().counts
    }

    /// Brings the disk to what survives a power cut at this instant (see the
    /// module docs): unsynced data lost (as [`set_writeback`](Self::set_writeback)
    /// says), undurable directory changes
    /// undone. Clears the cut and any pending fault. Call it after dropping
    /// every database using this filesystem (their handles stay dead).
    pub fn reboot(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.frozen = true; // nothing else gets in while the disk is rewritten
        let by_inode: HashMap<u64, PathBuf> = s.live.iter().map(|(p, &i)| (i, p.clone())).collect();
        // A directory whose entry is not durable vanishes with everything
        // in it.
        let lost_dirs: Vec<PathBuf> = s
            .new_dirs
            .iter()
            .filter(|d| !d.ancestors().skip(1).any(|a| s.new_dirs.contains(a)))
            .cloned()
            .collect();
        let in_lost_dir = |p: &Path| lost_dirs.iter().any(|d| p.starts_with(d));
        let mut survivors: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        let mut lost = 0u64;
        let mut reverted = 0u64;
        let writeback = s.writeback;
        let mut coin_state = s.coin_state;
        // In path order, so that the same seed and history flip the same
        // pages.
        let mut durable: Vec<(&PathBuf, &u64)> = s.durable.iter().collect();
        durable.sort_unstable();
        for (path, ino) in durable {
            let Some(inode) = s.inodes.get(ino) else {
                continue;
            };
            let bytes = if let Some(saved) = &inode.saved {
                reverted += 1;
                saved.clone()
            } else if let Some(live_path) = by_inode.get(ino) {
                if live_path != path {
                    reverted += 1;
                }
                let b = fs::read(live_path)?;
                lost += (b.len() as u64).saturating_sub(inode.synced_len);
                let mut coin = || splitmix64(&mut coin_state) >> 63 == 1;
                after_power_cut(b, inode.synced_len, writeback, &mut coin)
            } else {
                continue;
            };
            if in_lost_dir(path) {
                reverted += 1;
                continue;
            }
            survivors.push((path.clone(), bytes));
        }
        for (path, ino) in &s.live {
            if s.durable.get(path) != Some(ino) {
                reverted += 1;
                if !s.durable.values().any(|d| d == ino) {
                    lost += s.inodes.get(ino).map_or(0, |i| i.len);
                }
            }
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        for d in &lost_dirs {
            match fs::remove_dir_all(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        s.new_dirs.clear();
        s.inodes.clear();
        s.live.clear();
        s.durable.clear();
        for (path, bytes) in survivors {
            fs::write(&path, &bytes)?;
            let ino = s.new_inode(bytes.len() as u64);
            s.live.insert(path.clone(), ino);
            s.durable.insert(path, ino);
        }
        s.coin_state = coin_state;
        s.counts.power_cuts += 1;
        s.counts.bytes_lost += lost;
        s.counts.entries_reverted += reverted;
        s.generation += 1;
        s.fail = None;
        s.cut_at = None;
        s.frozen = false;
        Ok(())
    }

    fn open_tracked(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.state.lock();
        s.begin(FaultOp::Create)?;
        if mode == OpenMode::New && fs::symlink_metadata(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", path.display()),
            ));
        }
        let truncate = mode != OpenMode::Append;
        s.adopt(path);
        if truncate {
            // A truncating create replaces the file: the old content stays
            // durable under this name until the directory is synced. Saved
            // before the open below empties the file.
            s.unlink_live(path);
        }
        let file = match mode {
            OpenMode::Truncate => OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)?,
            OpenMode::New => OpenOptions::new().write(true).create_new(true).open(path)?,
            OpenMode::Append => OpenOptions::new().append(true).create(true).open(path)?,
        };
        let ino = match s.live.get(path) {
            Some(&ino) if !truncate => ino,
            _ => {
                let ino = s.new_inode(0);
                if let Some(inode) = s.inodes.get_mut(&ino) {
                    inode.synced_len = 0;
                }
                s.live.insert(path.to_path_buf(), ino);
                ino
            }
        };
        Ok(Box::new(FaultFile {
            state: Arc::clone(&self.state),
            file,
            inode: ino,
            generation: s.generation,
        }))
    }
}

/// How [`FaultFs::open_tracked`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenMode {
    /// Create or truncate (`create`).
    Truncate,
    /// Create; the name must not exist (`create_new`).
    New,
    /// Create or append (`open_append`).
    Append,
}

struct FaultFile {
    state: Arc<Mutex<State>>,
    file: File,
    inode: u64,
    generation: u64,
}

impl WritableFile for FaultFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let mut s = self.state.lock();
        if s.generation != self.generation {
            return Err(dead());
        }
        if let Err(e) = s.begin(FaultOp::Append) {
            if e.raw_os_error().is_some() {
                // An injected fault: a torn write of the first half.
                let part = &data[..data.len() / 2];
                self.file.write_all(part)?;
                if let Some(inode) = s.inodes.get_mut(&self.inode) {
                    inode.len += part.len() as u64;
                }
            }
            return Err(e);
        }
        self.file.write_all(data)?;
        s.counts.bytes_appended += data.len() as u64;
        if let Some(inode) = s.inodes.get_mut(&self.inode) {
            inode.len += data.len() as u64;
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut s = self.state.lock();
        if s.generation != self.generation {
            return Err(dead());
        }
        s.begin(FaultOp::Sync)?;
        // No real fsync: durability is what this filesystem simulates.
        if let Some(inode) = s.inodes.get_mut(&self.inode) {
            inode.synced_len = inode.len;
        }
        Ok(())
    }
}

impl FileSystem for FaultFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        if s.frozen {
            return Err(dead());
        }
        let missing: Vec<PathBuf> = path
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .map(Path::to_path_buf)
            .collect();
        fs::create_dir_all(path)?;
        s.new_dirs.extend(missing);
        Ok(())
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.open_tracked(path, OpenMode::Truncate)
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.open_tracked(path, OpenMode::New)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.open_tracked(path, OpenMode::Append)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let s = self.state.lock();
        if s.frozen {
            return Err(dead());
        }
        let mut out = Vec::new();
        File::open(path)?.read_to_end(&mut out)?;
        Ok(out)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin(FaultOp::Rename)?;
        if from == to {
            // POSIX: renaming a name onto itself changes nothing.
            return fs::metadata(from).map(drop);
        }
        s.adopt(from);
        s.adopt(to);
        // Keep the replaced file's durable content before the rename
        // overwrites its name (read after it, `to` holds `from`'s bytes).
        let undo = s.unlink_live(to);
        if let Err(e) = fs::rename(from, to) {
            s.relink_live(to, undo);
            return Err(e);
        }
        if let Some(ino) = s.live.remove(from) {
            s.live.insert(to.to_path_buf(), ino);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin(FaultOp::Remove)?;
        s.adopt(path);
        // Keep the durable content before the bytes go away.
        let undo = s.unlink_live(path);
        if let Err(e) = fs::remove_file(path) {
            s.relink_live(path, undo);
            return Err(e);
        }
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin(FaultOp::SyncDir)?;
        // `Path::parent` of a one-component relative path is "", which
        // names the same directory as ".".
        let dir = |p: &Path| -> PathBuf {
            if p.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                p.to_path_buf()
            }
        };
        let synced = dir(path);
        let in_dir = |p: &Path| p.parent().map(dir).as_deref() == Some(synced.as_path());
        s.durable.retain(|p, _| !in_dir(p));
        let now: Vec<(PathBuf, u64)> = s
            .live
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        s.durable.extend(now);
        s.new_dirs.retain(|d| !in_dir(d));
        // Inodes no entry names any more need no saved content.
        let named: std::collections::HashSet<u64> =
            s.durable.values().chain(s.live.values()).copied().collect();
        s.inodes.retain(|ino, _| named.contains(ino));
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        {
            let s = self.state.lock();
            if s.frozen {
                return Err(dead());
            }
        }
        super::RealFs.list_dir(path)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.begin(FaultOp::Truncate)?;
        s.adopt(path);
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(len)?;
        if let Some(inode) = s.live.get(path).copied().and_then(|i| s.inodes.get_mut(&i)) {
            inode.len = inode.len.min(len);
            inode.synced_len = inode.len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8 + 1).collect()
    }

    #[test]
    fn in_order_writeback_keeps_the_synced_prefix() {
        let live = bytes(10_000);
        let out = after_power_cut(live.clone(), 5_000, Writeback::InOrder, &mut || true);
        assert_eq!(out, live[..5_000]);
    }

    #[test]
    fn random_pages_zero_the_pages_not_written_and_end_at_the_last_written() {
        let live = bytes(5 * 4096 + 100);
        let pages = Writeback::RandomPages { seed: 0 };
        // Every page written: nothing lost.
        assert_eq!(
            after_power_cut(live.clone(), 1_000, pages, &mut || true),
            live
        );
        // None written: the synced prefix.
        assert_eq!(
            after_power_cut(live.clone(), 1_000, pages, &mut || false),
            live[..1_000]
        );
        // Pages from the one holding byte 1,000: written, lost, written,
        // lost, lost, lost.
        let mut flips = [true, false, true, false, false, false].into_iter();
        let out = after_power_cut(live.clone(), 1_000, pages, &mut || flips.next().unwrap());
        assert_eq!(out.len(), 3 * 4096, "ends with the last written page");
        assert_eq!(out[..4096], live[..4096], "synced bytes and a written page");
        assert!(out[4096..2 * 4096].iter().all(|&b| b == 0), "a hole");
        assert_eq!(out[2 * 4096..], live[2 * 4096..3 * 4096]);
        // A lost first page keeps its synced bytes.
        let mut flips = [false, true].into_iter().chain(std::iter::repeat(false));
        let out = after_power_cut(live.clone(), 1_000, pages, &mut || flips.next().unwrap());
        assert_eq!(out[..1_000], live[..1_000]);
        assert!(out[1_000..4096].iter().all(|&b| b == 0));
        assert_eq!(out[4096..], live[4096..2 * 4096]);
    }
}
