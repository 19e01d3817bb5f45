//! The database handle: open, recover, write, read, scan, flush, close.
//!
//! # Write path
//! 1. Validate every key and value of the batch (nothing is written if one
//!    is bad).
//! 2. Encode it as a log payload, outside every lock. With `sync_writes`,
//!    join a write group ([`crate::write_group`]): batches whose writers
//!    arrive while another group is being committed are committed together
//!    by one leader. Without it, the writer commits its batch alone (a
//!    group of one).
//! 3. The leader, under the writer lock: makes room (freeze a full memtable,
//!    start a new log; wait if flushes or level-0 compactions fall behind),
//!    assigns each batch consecutive sequence numbers, appends the group to
//!    the write-ahead log as one record (fsynced once when `sync_writes`),
//!    inserts it into the memtable, then publishes the last sequence number
//!    to readers before any member returns.
//!
//! # Read path
//! Take the current *super version* (memtable, frozen memtables, table set),
//! then the published sequence number as the snapshot. Look in the memtable,
//! the frozen memtables newest first, then the tables in lookup order (see
//! [`crate::version`]), hashing the key once for every table's filter.
//!
//! # Background work
//! A flush thread turns frozen memtables into level-0 tables, records each in
//! the manifest, then deletes the memtable's log. A compaction thread merges
//! tables down the levels (see [`crate::compaction`]).

use std::fs::File;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};

use crate::batch::{merge_payloads, read_payload, set_first_seq, WriteBatch};
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::filter::budget::{policy_for_run, FilterBudget};
use crate::filter::{key_hash, FilterPolicy, NoFilter, Unfiltered};
use crate::fs::FileSystem;
use crate::iter::InternalIterator;
use crate::key::{SequenceNumber, ValueKind, MAX_SEQUENCE};
use crate::manifest::{
    manifest_file_name, Manifest, ManifestState, TableRecord, VersionEdit, CURRENT_FILE_NAME,
    CURRENT_TEMP_FILE_NAME,
};
use crate::memtable::{MemLookup, Memtable};
use crate::merge::{DbIterator, LevelIterator, MergingIterator};
use crate::options::Options;
use crate::recovery::{replay_logs, set_aside_logs, RecoveryReport};
use crate::sketch::{HeavyHitters, HyperLogLog};
use crate::snapshot::Snapshot;
use crate::sstable::{Table, TableBuilder, TableMeta, TableOptions};
use crate::stats::{LevelStats, ReadCost, ReadCounters, ReadSource, Stats, TableInfo};
use crate::version::{
    table_file_name, DirOwner, TableHandle, Version, KEY_SKETCH_PRECISION, KEY_SKETCH_PROPERTY,
};
use crate::wal::{LogWriter, MAX_RECORD_PAYLOAD};
use crate::write_group::{PendingWrite, WriteQueue};

/// Most hot keys [`Db::hot_keys`] can report.
pub const HOT_KEYS_TRACKED: usize = 64;
/// Count-min error of the hot-key sketch, relative to the reads observed:
/// 2,719 counters per row, 4 rows (delta 2%) of 8 bytes: about 85 KiB,
/// L2-resident.
const HOT_KEYS_EPSILON: f64 = 0.001;
const HOT_KEYS_DELTA: f64 = 0.02;
/// Hot-key counts halve every this many sampled reads (2^23 reads), so the
/// list follows recent traffic.
const HOT_KEYS_AGING_PERIOD: u64 = 1 << 20;
/// On average one point read in this many feeds the hot-key sketch: a hot
/// key is read often enough to be sampled many times, and the sketch's cost
/// (a conservative count-min update, ~30-50 ns) is paid on one read in
/// eight instead of every read (a missing-key get is ~150 ns). Each read is
/// sampled independently with probability 1/8, not every eighth read: a
/// counter would alias with any access pattern whose period divides 8 (two
/// keys read in turn would show as one key read twice as often).
const HOT_KEYS_SAMPLE_EVERY: u32 = 8;
/// `log2(HOT_KEYS_SAMPLE_EVERY)`: a read is sampled when this many top bits
/// of the thread's next random number are zero.
const HOT_KEYS_SAMPLE_BITS: u32 = HOT_KEYS_SAMPLE_EVERY.trailing_zeros();
const _: () = assert!(HOT_KEYS_SAMPLE_EVERY.is_power_of_two());
/// Most dropped samples one taken sample carries (see `sample_read`).
const HOT_KEYS_MAX_CARRIED: u64 = 7;

/// The hot-key sketch, and the samples dropped while another thread held
/// it, which the next sample taken carries.
struct HotKeys {
    hitters: Mutex<HeavyHitters>,
    /// Samples dropped since a sample last took them on.
    dropped: AtomicU64,
}

thread_local! {
    /// This thread's xorshift64 state for hot-key sampling (never zero).
    static HOT_KEYS_SAMPLER: std::cell::Cell<u64> = std::cell::Cell::new(sampler_seed());
}

/// A distinct non-zero starting state for each thread's sampler: the
/// SplitMix64 output of a global counter's value, so that threads do not
/// sample in step.
fn sampler_seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let (_, output) = crate::filter::bloom::splitmix64(NEXT.fetch_add(1, Ordering::Relaxed));
    output | 1
}

/// True for a random one in [`HOT_KEYS_SAMPLE_EVERY`] calls on this thread.
#[inline]
fn sample_this_read() -> bool {
    HOT_KEYS_SAMPLER.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x >> (64 - HOT_KEYS_SAMPLE_BITS) == 0
    })
}

/// The read counters of `level`'s tables. Every level a table can be in has
/// a set (`Db::open` refuses manifests with tables past `num_levels`, and
/// compaction writes only to levels inside it); the clamp only keeps a
/// broken invariant from panicking in release builds.
pub(crate) fn counters_of(
    level_counters: &[Arc<ReadCounters>],
    level: usize,
) -> &Arc<ReadCounters> {
    debug_assert!(
        level < level_counters.len(),
        "level {level} has no counters"
    );
    &level_counters[level.min(level_counters.len() - 1)]
}

/// The bounds of `range` as owned keys.
pub(crate) fn owned_bounds<K: AsRef<[u8]>, R: RangeBounds<K>>(
    range: &R,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(range.start_bound()), own(range.end_bound()))
}

/// The key range holding exactly the keys that start with `prefix`:
/// from `prefix` itself up to, excluded, the shortest key greater than every
/// key starting with it (the prefix with its trailing `0xff` bytes dropped
/// and its last byte incremented; unbounded if it is all `0xff`).
pub(crate) fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let mut end = prefix.to_vec();
    while end.last() == Some(&0xff) {
        end.pop();
    }
    let upper = match end.last_mut() {
        Some(last) => {
            *last += 1;
            Bound::Excluded(end)
        }
        None => Bound::Unbounded,
    };
    (Bound::Included(prefix.to_vec()), upper)
}

/// Name of write-ahead log `number`.
pub(crate) fn log_file_name(number: u64) -> String {
    format!("{number:06}.log")
}

/// What a reader pins: the mutable memtable, the frozen ones (newest first)
/// and the table set.
pub(crate) struct SuperVersion {
    pub(crate) mem: Arc<Memtable>,
    pub(crate) imms: Vec<Arc<Memtable>>,
    pub(crate) version: Arc<Version>,
}

struct WriterState {
    wal: LogWriter,
    mem: Arc<Memtable>,
    last_seq: SequenceNumber,
}

/// State of the manifest and background jobs, under one mutex.
pub(crate) struct BgState {
    pub(crate) manifest: Manifest,
    pub(crate) mstate: ManifestState,
    pub(crate) shutdown: bool,
    /// A compaction is running (only one at a time).
    pub(crate) compacting: bool,
    /// Per level, the largest key of the last table compacted out of it, so
    /// the next pick starts after it (rotation through the key space).
    pub(crate) compact_pointer: Vec<Vec<u8>>,
}

#[derive(Default)]
pub(crate) struct EngineCounters {
    pub(crate) flushes: AtomicU64,
    pub(crate) flush_bytes_written: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) compaction_bytes_read: AtomicU64,
    pub(crate) compaction_bytes_written: AtomicU64,
    pub(crate) user_bytes_written: AtomicU64,
    pub(crate) batches_written: AtomicU64,
    pub(crate) log_appends: AtomicU64,
    pub(crate) manifest_rolls: AtomicU64,
}

/// Tries of [`DbInner::read_view`]'s lock-free loads before it takes the
/// writer lock: a write is published every few microseconds at most, the
/// loads take tens of nanoseconds, so a retry is rare and a second one
/// rarer.
const READ_VIEW_TRIES: usize = 4;

pub(crate) struct DbInner {
    pub(crate) dir: PathBuf,
    pub(crate) opts: Options,
    pub(crate) fs: Arc<dyn FileSystem>,
    /// Whether this engine still holds the directory (see [`DirOwner`]).
    pub(crate) owner: Arc<DirOwner>,
    /// The database's own read counters (`gets`).
    pub(crate) counters: Arc<ReadCounters>,
    /// One set per level, moved by that level's tables (a table is opened
    /// with its level's set and never changes level).
    pub(crate) level_counters: Vec<Arc<ReadCounters>>,
    /// The block cache every table is opened with (`None` when
    /// `Options::block_cache_bytes` is 0).
    pub(crate) block_cache: Option<Arc<BlockCache>>,
    /// What the open's replay of the write-ahead logs found.
    recovery: RecoveryReport,
    pub(crate) engine: EngineCounters,
    pub(crate) visible_seq: AtomicU64,
    /// The current super version: readers load it without locking.
    sv: ArcSwap<SuperVersion>,
    /// Serialises super-version updates (memtable switch, flush and
    /// compaction installs), each a read-modify-write of `sv`.
    sv_update: Mutex<()>,
    writer: Mutex<WriterState>,
    /// Writers waiting to be committed in a group (group commit); a
    /// group's leader commits it under `writer`.
    write_queue: WriteQueue,
    /// Held for a whole [`checkpoint`](Self::checkpoint): two calls into
    /// one destination would both find it empty, then remove or overwrite
    /// each other's files.
    pub(crate) checkpoint_lock: Mutex<()>,
    pub(crate) bg: Mutex<BgState>,
    /// Wakes the background threads (new frozen memtable, new level-0
    /// table, shutdown).
    pub(crate) bg_cv: Condvar,
    /// Signals waiters (stalled writers, `flush`, `compact`) that background
    /// work finished or failed.
    pub(crate) done_cv: Condvar,
    pub(crate) next_file: AtomicU64,
    /// Point reads' heavy hitters (when `track_hot_keys`).
    hot_keys: Option<HotKeys>,
    poison: Mutex<Option<String>>,
    poisoned: AtomicBool,
}

/// An open database.
///
/// `Db` is `Send + Sync`: share it across threads with `Arc<Db>`. Dropping
/// it (or calling [`close`](Db::close)) stops the background threads and
/// syncs the log; nothing acknowledged is lost.
pub struct Db {
    inner: Arc<DbInner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
    /// The directory's `LOCK`, held by the handle rather than by the
    /// engine's state: a [`Snapshot`] keeps that state alive (to read
    /// through it) past `close`, and must not keep the directory locked.
    /// Dropped after `Drop::drop` stopped the threads and sealed the log.
    _lock: DirLock,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("dir", &self.inner.dir).finish()
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

impl Db {
    /// Opens (creating if missing) the database in directory `path`.
    ///
    /// Recovery rebuilds the levels from the manifest, replays the
    /// write-ahead logs newer than it into a level-0 table, writes a fresh
    /// manifest and removes files no version references. Errors:
    /// [`Error::InvalidArgument`] for bad options, [`Error::Locked`] if the
    /// directory is open elsewhere, [`Error::Io`] (with the path) if it cannot
    /// be created or read, [`Error::Corruption`] naming a damaged file (a
    /// table the manifest names that is not in the directory is reported
    /// so, naming the manifest).
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        if path.as_ref().as_os_str().is_empty() {
            return Err(Error::invalid("Db::open: the database path is empty"));
        }
        // Every file name is joined to `dir`: an absolute path keeps them in
        // this directory when the process later changes its working one.
        let dir = std::path::absolute(path.as_ref()).map_err(io_err(path.as_ref()))?;
        let fs = Arc::clone(&opts.fs);
        if dir.exists() && !dir.is_dir() {
            return Err(Error::io(
                &dir,
                std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
            ));
        }
        // A newly created directory (and any ancestor created with it) is an
        // entry in its parent: sync the parents, or a power cut can take the
        // whole database, synced writes included.
        let created: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .map(Path::to_path_buf)
            .collect();
        fs.create_dir_all(&dir).map_err(io_err(&dir))?;
        for d in &created {
            let parent = match d.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            fs.sync_dir(parent).map_err(io_err(parent))?;
        }
        let lock = acquire_lock(&dir)?;
        let owner = Arc::new(DirOwner::new());
        let counters = Arc::new(ReadCounters::default());
        let level_counters: Vec<Arc<ReadCounters>> = (0..opts.num_levels)
            .map(|_| Arc::new(ReadCounters::default()))
            .collect();
        let block_cache = BlockCache::new(opts.block_cache_bytes)?;

        let recovered = Manifest::recover_noting_tail(fs.as_ref(), &dir)?;
        let old_manifest = recovered.as_ref().map(|&(_, n, torn)| (n, torn));
        let mut mstate = match recovered {
            Some((state, _, _)) => state,
            None => ManifestState {
                levels: Vec::new(),
                next_file_number: 1,
                last_sequence: 0,
                log_number: 0,
            },
        };
        if mstate.levels.len() > opts.num_levels
            && mstate.levels[opts.num_levels..]
                .iter()
                .any(|l| !l.is_empty())
        {
            return Err(Error::invalid(format!(
                "database has {} levels but num_levels is {}",
                mstate.levels.len(),
                opts.num_levels
            )));
        }
        mstate.levels.resize(opts.num_levels, Vec::new());

        let all_names = fs.list_dir(&dir).map_err(io_err(&dir))?;
        let names = files_only(&dir, all_names.clone());
        // No `CURRENT` means a new database, unless the directory already
        // holds tables: only a flush or compaction writes one, and they run
        // after an open that wrote `CURRENT` (which is replaced by an atomic
        // rename, never removed). Opening such a directory as new would
        // delete every table as unreferenced, so a lost `CURRENT` is
        // reported instead.
        if old_manifest.is_none() {
            if let Some(table) = names.iter().find(|n| parse_numbered(n, ".sst").is_some()) {
                return Err(Error::corruption(
                    dir.join(CURRENT_FILE_NAME),
                    None,
                    format!(
                        "missing, but the directory holds tables ({table}): not opened as a \
                         new database; restore CURRENT (one line naming the newest MANIFEST-* \
                         file)"
                    ),
                ));
            }
        }
        // New files take numbers from past every number in use: the
        // manifest's next number, every file of ours in the directory, and
        // every table and log the manifest names (a manifest naming a live
        // table at or past its own next number would otherwise have that
        // number handed out again, and the new file truncate a table that
        // is mapped for reading).
        let mut max_number = mstate.next_file_number;
        let named = mstate.levels.iter().flatten().map(|r| r.file_number);
        for n in named.chain([mstate.log_number]) {
            max_number = max_number.max(n.saturating_add(1));
        }
        // Directories named like our files count too (they are not
        // replayed or deleted, but a new file of that name could not be
        // created: found by review, twenty-sixth session).
        for name in &all_names {
            if let Some(n) = engine_file_number(name) {
                max_number = max_number.max(n + 1);
            }
        }
        let mut logs: Vec<u64> = names
            .iter()
            .filter_map(|name| parse_numbered(name, ".log"))
            .filter(|&n| n >= mstate.log_number)
            .collect();
        logs.sort_unstable();
        // File names are capped (`parse_numbered`); a manifest whose next
        // file number, or a table or log it names, is not would make the
        // numbers wrap or collide.
        if max_number > MAX_FILE_NUMBER {
            let manifest = old_manifest
                .map(|(n, _)| dir.join(manifest_file_name(n)))
                .unwrap_or_else(|| dir.clone());
            return Err(Error::corruption(
                manifest,
                None,
                format!("next file number {max_number} is out of range"),
            ));
        }
        // The manifest's log number names the oldest log still needed. That
        // log is created (and its directory entry synced) before any
        // manifest edit names it, and deleted only after a later synced
        // edit names a newer one. So if the replay dropped a torn last edit
        // and that log is missing, the dropped edit was not torn by a crash
        // but complete and damaged afterwards (bit rot reads like a tear):
        // a flush's edit that had let the log go, whose writes are in a
        // table no replayed edit lists. Opening would silently lose them,
        // so refuse. (Without a dropped edit a missing log is left alone:
        // checkpoints written before they named no log carry their source's
        // log number and no log.)
        if let Some((number, true)) = old_manifest {
            if mstate.log_number != 0 && logs.first() != Some(&mstate.log_number) {
                return Err(Error::corruption(
                    dir.join(manifest_file_name(number)),
                    None,
                    format!(
                        "the manifest's last edit was dropped as torn, and the log it names \
                         as the oldest one still needed, {}, is missing: the dropped edit \
                         was complete (damaged, not torn) and had replaced that log",
                        log_file_name(mstate.log_number)
                    ),
                ));
            }
        }
        if mstate.log_number > mstate.next_file_number {
            return Err(Error::corruption(
                dir.join(manifest_file_name(old_manifest.map_or(0, |(n, _)| n))),
                None,
                format!(
                    "log number {} is past the next file number {}",
                    mstate.log_number, mstate.next_file_number
                ),
            ));
        }
        let next_file = AtomicU64::new(max_number);

        // Open every table the manifest references.
        let mut handles = Vec::new();
        for record in mstate.levels.iter().flatten() {
            let path = dir.join(table_file_name(record.file_number));
            // Opening a table may call into a custom policy (resized to the
            // size the table recorded): its panic is an error of this open.
            let table = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Table::open_with_cache(
                    &path,
                    record.file_number,
                    &opts.filter_policy,
                    Arc::clone(counters_of(&level_counters, record.level as usize)),
                    block_cache.clone(),
                )
            }))
            .map_err(|payload| {
                Error::invalid(format!(
                    "opening {}: the filter policy {:?} panicked ({}); open with a policy \
                     that works",
                    path.display(),
                    opts.filter_policy.name(),
                    panic_message(payload.as_ref())
                ))
            })?
            .map_err(|e| missing_table_is_corruption(e, old_manifest, &dir, &path))?;
            check_record_describes_table(record, table.meta(), &path)?;
            handles.push(TableHandle::new(
                record.clone(),
                Arc::new(table),
                Arc::clone(&fs),
                &owner,
                path,
            )?);
        }
        let manifest_path = old_manifest
            .map(|(n, _)| dir.join(manifest_file_name(n)))
            .unwrap_or_else(|| dir.clone());
        check_manifest_levels(&mstate, &manifest_path)?;
        let mut version = Version::new(opts.num_levels).apply(&[], handles);

        // Replay the logs newer than the manifest into one memtable.
        let replay = Arc::new(Memtable::new(0));
        let replayed = replay_logs(
            fs.as_ref(),
            &logs,
            |n| dir.join(log_file_name(n)),
            mstate.last_sequence,
            opts.wal_recovery,
            opts.sync_writes,
            &replay,
        )?;
        let last_seq = replayed.last_seq;
        // Before the new manifest lets the logs go: a crash after it would
        // have the next open delete them as obsolete.
        set_aside_logs(fs.as_ref(), &dir, &replayed.set_aside, |n| {
            dir.join(log_file_name(n))
        })?;
        if !replay.is_empty() {
            let number = next_file.fetch_add(1, Ordering::SeqCst);
            let written = filter_entries_of(&opts, &replay);
            let path = dir.join(table_file_name(number));
            let policy_name = opts.filter_policy.name().to_string();
            // A user's filter policy may panic in `build` (or in
            // `with_budget_bits_per_key`, when it is sized for the table):
            // that is an error of this open, not a panic out of it (the
            // table file is named by no manifest; it is removed here, or by
            // the next open).
            let (record, table) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let policy = filter_policy_for_write(&opts, &version, &[], 0, written);
                write_level0_table(
                    &dir,
                    &opts,
                    policy,
                    &level_counters[0],
                    block_cache.as_ref(),
                    &replay,
                    number,
                )
            }))
            .map_err(|payload| {
                let _ = fs.remove_file(&path);
                Error::invalid(format!(
                    "the filter policy {:?} panicked building the table of the replayed \
                     log ({}); open with a policy that works",
                    policy_name,
                    panic_message(payload.as_ref())
                ))
            })??;
            mstate.levels[0].push(record.clone());
            version = version.apply(
                &[],
                vec![TableHandle::new(
                    record,
                    Arc::new(table),
                    Arc::clone(&fs),
                    &owner,
                    path,
                )?],
            );
        }

        // A fresh manifest describing the recovered state, then a fresh log.
        let manifest_number = next_file.fetch_add(1, Ordering::SeqCst);
        let wal_number = next_file.fetch_add(1, Ordering::SeqCst);
        mstate.log_number = wal_number;
        mstate.last_sequence = last_seq;
        mstate.next_file_number = next_file.load(Ordering::SeqCst);
        let wal_path = dir.join(log_file_name(wal_number));
        let wal = LogWriter::create(fs.as_ref(), &wal_path)?;
        // The log's directory entry is durable before the manifest that
        // names it as the oldest log needed (see the check above).
        fs.sync_dir(&dir).map_err(io_err(&dir))?;
        let manifest = Manifest::create(fs.as_ref(), &dir, manifest_number, &mstate)?;

        // Remove what no version references: old logs and manifests, tables
        // of unfinished flushes or compactions, temporary files.
        let live: std::collections::HashSet<u64> = mstate
            .levels
            .iter()
            .flatten()
            .map(|r| r.file_number)
            .collect();
        for name in &names {
            let obsolete = if let Some(n) = parse_numbered(name, ".log") {
                n != wal_number
            } else if let Some(n) = parse_numbered(name, ".sst") {
                !live.contains(&n)
            } else if let Some(n) = name
                .strip_prefix("MANIFEST-")
                .and_then(|rest| parse_numbered(rest, ""))
            {
                n != manifest_number
            } else {
                // The only temporary file this engine writes.
                name == CURRENT_TEMP_FILE_NAME
            };
            if obsolete {
                let p = dir.join(name);
                match fs.remove_file(&p) {
                    // `names` was listed before the new manifest was written:
                    // a stray `CURRENT.tmp` left by a crash has since been
                    // replaced and renamed to `CURRENT` by this very open.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    other => other.map_err(io_err(&p))?,
                }
            }
        }
        fs.sync_dir(&dir).map_err(io_err(&dir))?;

        let mem = Arc::new(Memtable::new(wal_number));
        let sv = SuperVersion {
            mem: Arc::clone(&mem),
            imms: Vec::new(),
            version: Arc::new(version),
        };
        let num_levels = opts.num_levels;
        let inner = Arc::new(DbInner {
            dir,
            fs,
            owner,
            counters,
            level_counters,
            block_cache,
            recovery: replayed.report,
            engine: EngineCounters::default(),
            visible_seq: AtomicU64::new(last_seq),
            sv: ArcSwap::from_pointee(sv),
            sv_update: Mutex::new(()),
            writer: Mutex::new(WriterState { wal, mem, last_seq }),
            write_queue: WriteQueue::default(),
            checkpoint_lock: Mutex::new(()),
            bg: Mutex::new(BgState {
                manifest,
                mstate,
                shutdown: false,
                compacting: false,
                compact_pointer: vec![Vec::new(); num_levels],
            }),
            bg_cv: Condvar::new(),
            done_cv: Condvar::new(),
            next_file,
            hot_keys: if opts.track_hot_keys {
                Some(HotKeys {
                    hitters: Mutex::new(
                        HeavyHitters::new(HOT_KEYS_TRACKED, HOT_KEYS_EPSILON, HOT_KEYS_DELTA)?
                            .with_aging(Some(HOT_KEYS_AGING_PERIOD))?,
                    ),
                    dropped: AtomicU64::new(0),
                })
            } else {
                None
            },
            poison: Mutex::new(None),
            poisoned: AtomicBool::new(false),
            opts,
        });

        let flusher = Arc::clone(&inner);
        let flush_thread = std::thread::Builder::new()
            .name("sievedb-flush".into())
            .spawn(move || flusher.flush_loop())
            .map_err(|e| Error::io(&inner.dir, e))?;
        let db = Db {
            inner,
            threads: Mutex::new(vec![flush_thread]),
            closed: AtomicBool::new(false),
            _lock: lock,
        };
        if db.inner.opts.background_compaction {
            let compactor = Arc::clone(&db.inner);
            // On failure `db` is dropped: its shutdown stops and joins the
            // flush thread, whose handle on the database would otherwise
            // keep the directory locked for the rest of the process.
            let compact_thread = std::thread::Builder::new()
                .name("sievedb-compact".into())
                .spawn(move || compactor.compaction_loop())
                .map_err(|e| Error::io(&db.inner.dir, e))?;
            db.threads.lock().push(compact_thread);
        }
        Ok(db)
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.put(key, value);
        self.write(&batch)
    }

    /// Deletes `key` (a no-op if it is absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.delete(key);
        self.write(&batch)
    }

    /// Applies `batch` atomically: after a crash, all of it or none of it is
    /// present, and readers never see part of it.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.check_open()?;
        self.inner.write(batch)
    }

    /// The value of `key`, or `None` if it is absent or deleted.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        self.inner.get(key.as_ref())
    }

    /// [`get`](Self::get), with what this read alone cost: the filters it
    /// asked and their answers, the data blocks it read (from the block
    /// cache or the file) and where the answer came from. The read also
    /// moves the database-wide counters of [`stats`](Self::stats) exactly
    /// as `get` does; the cost is this read's share, exact even while other
    /// threads read.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// use sievedb::{Db, Options, ReadSource};
    /// let db = Db::open(dir.path(), Options::default())?;
    /// db.put(b"k", b"v")?;
    /// db.flush()?;
    /// let (value, cost) = db.get_with_cost(b"k")?;
    /// assert_eq!(value.as_deref(), Some(&b"v"[..]));
    /// assert!(matches!(cost.source, ReadSource::Table { level: 0, .. }));
    /// assert_eq!((cost.filter_checks, cost.data_block_reads), (1, 1));
    /// let (value, cost) = db.get_with_cost(b"absent")?;
    /// assert_eq!(value, None);
    /// assert_eq!(cost.source, ReadSource::Nowhere);
    /// // "absent" sorts before "k", outside the only table's key range:
    /// // no filter asked, nothing read.
    /// assert_eq!((cost.filter_checks, cost.data_block_reads), (0, 0));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Fails as [`get`](Self::get) does.
    pub fn get_with_cost(&self, key: impl AsRef<[u8]>) -> Result<(Option<Vec<u8>>, ReadCost)> {
        self.check_open()?;
        let sv = self.inner.sv.load();
        let snapshot = self.inner.visible_seq.load(Ordering::Acquire);
        let mut cost = ReadCost::default();
        let value = self
            .inner
            .get_in_costed(&sv, snapshot, key.as_ref(), &mut cost)?;
        Ok((value, cost))
    }

    /// The values of `keys`, all read at one point in time: answer `i` is
    /// what [`get`](Self::get)`(keys[i])` returns, with every key seen as of
    /// the same moment (a [`WriteBatch`] written meanwhile is seen whole or
    /// not at all, across all the keys; a loop of `get`s can see half of
    /// it). Keys may repeat and come in any order. The read counters move
    /// as they would for as many `get`s, and a batch costs about what the
    /// loop would (`benches/engine.rs`, `engine_multi_get`).
    ///
    /// Fails with [`Error::InvalidArgument`] if any key is empty or longer
    /// than [`Options::max_key_bytes`], before anything is read.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_open()?;
        self.inner.multi_get(keys)
    }

    /// A point-in-time scan of the keys in `range`, ascending (`.rev()`
    /// for descending). Any [`RangeBounds`] of byte strings: `a..b`,
    /// `a..=b`, `a..`, `..b` over `&[u8]`, `&str`, `Vec<u8>` or `String`,
    /// or a pair of [`Bound`]s. Byte-string literals are arrays of their
    /// own lengths, so `b"a"..b"z"` does not infer a key type: write
    /// `b"a".as_slice()..b"z".as_slice()` (or `"a".."z"`). For the whole
    /// key space use [`iter`](Self::iter) (`scan(..)` needs the key type
    /// named: `scan::<&[u8], _>(..)`).
    /// With borrowed slices in a pair of bounds, name the key type, since
    /// several types could borrow as `[u8]`:
    ///
    /// ```
    /// # fn main() -> sievedb::Result<()> {
    /// use std::ops::Bound::{Excluded, Included};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = sievedb::Db::open(dir.path(), sievedb::Options::default())?;
    /// for k in [b"a", b"b", b"c"] {
    ///     db.put(k, b"v")?;
    /// }
    /// let (from, to) = (b"a".as_slice(), b"c".as_slice());
    /// let keys: Vec<Vec<u8>> = db
    ///     .scan::<&[u8], _>((Excluded(from), Included(to)))?
    ///     .map(|item| item.map(|(key, _)| key))
    ///     .collect::<sievedb::Result<_>>()?;
    /// assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn scan<K, R>(&self, range: R) -> Result<DbIterator>
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        self.check_open()?;
        let (lower, upper) = owned_bounds(&range);
        Ok(self.inner.scan(lower, upper))
    }

    /// A point-in-time scan of the keys that start with `prefix`, ascending
    /// (an empty prefix scans everything).
    ///
    /// Each table whose filter was built with key prefixes of a length `n`
    /// (recorded per table, from [`Options::prefix_filter_len`] when it was
    /// written) is, for a prefix of at least `n` bytes, skipped without
    /// reading any of its blocks when its filter says no key starts with the
    /// prefix's first `n` bytes (counted in [`Stats::prefix_filter_checks`] and
    /// [`Stats::prefix_filter_negatives`]), as are tables whose key range
    /// cannot hold such a key. The answer is the same with or without the
    /// filter: only the blocks read differ.
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIterator> {
        self.check_open()?;
        Ok(self.inner.scan_prefix(prefix.as_ref()))
    }

    /// A read-only view of the database as of this moment: every read
    /// through it ([`Snapshot::get`], [`Snapshot::multi_get`],
    /// [`Snapshot::scan`]) sees exactly the writes acknowledged before the
    /// call, whatever is written, flushed or compacted afterwards. A
    /// [`WriteBatch`] is seen whole or not at all.
    ///
    /// The snapshot pins what it reads: the memtables and table files of
    /// this moment stay in memory and on disk until it is dropped (as for
    /// an open [`scan`](Self::scan)), so drop long-lived snapshots when done.
    /// Taking one costs a reference count. It does not borrow the `Db`: it
    /// can move to another thread or into a struct beside an `Arc<Db>`,
    /// and it keeps reading its moment after [`close`](Self::close) (as an
    /// open scan does), while the directory is free to be opened again.
    /// Once the `Db` is closed, table files a snapshot pins that
    /// compaction made obsolete are no longer deleted when it drops (the
    /// directory may belong to another instance by then): the next open of
    /// the directory removes them.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.check_open()?;
        let (sv, sequence) = self.inner.read_view();
        Ok(Snapshot::new(Arc::clone(&self.inner), sv, sequence))
    }

    /// A point-in-time scan of the whole key space, ascending.
    pub fn iter(&self) -> Result<DbIterator> {
        self.scan::<&[u8], _>(..)
    }

    /// Freezes the memtable and waits until it (and every memtable frozen
    /// before it) is a level-0 table recorded in the manifest: every write
    /// acknowledged before the call is then in a table. Memtables frozen
    /// by writes that run meanwhile are not waited for.
    pub fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.inner.flush()
    }

    /// Runs compactions until no level is over its target, then merges the
    /// level-0 tables present at the call into level 1 (also when they are
    /// below the trigger), blocking until done. After [`flush`](Self::flush)
    /// and without concurrent writes, level 0 is then empty, no level is
    /// over its target and a point read consults at most one table per
    /// level. With writers running it still returns: the levels are taken
    /// once each from the top, each moving only the tables it held when its
    /// turn came, so a level the writers keep refilling may stay over its
    /// target (later compactions see to it).
    ///
    /// With [`Options::num_levels`] = 2 the level-0 tables below the trigger
    /// stay: level 1 is then the whole database, and merging them would
    /// rewrite it.
    pub fn compact(&self) -> Result<()> {
        self.check_open()?;
        self.inner.compact_until_balanced()
    }

    /// Waits until the background work a reader could see has settled:
    /// the memtables already frozen are flushed, and compactions run (in
    /// the background, or in the caller's thread when none is free or
    /// [`Options::background_compaction`] is off) until no level is over
    /// its target. The tree is then the one the background compactions
    /// would leave, and stays so until the next write; benchmarks call it
    /// so that a read phase sees one tree throughout.
    ///
    /// Unlike [`compact`](Self::compact) it neither flushes the active
    /// memtable nor merges a level 0 below its trigger. With writers
    /// running it returns as [`compact`](Self::compact) does, after one
    /// turn per level over the tables the level held when its turn came.
    ///
    /// Errors: [`Error::Poisoned`] if a flush or compaction failed (now or
    /// before); a compaction's own failure comes back as that too.
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.check_open()?;
        self.inner.wait_for_compactions()
    }

    /// Rewrites every table (a full compaction): all data moves to the
    /// deepest level that holds data, and every table's filter is rebuilt by
    /// the current filter policy (none at all when
    /// [`Options::last_level_filters`] is off: everything is then in the
    /// deepest level). Use it after switching policy to migrate the whole
    /// tree at once.
    ///
    /// It first flushes the memtables, as [`flush`](Self::flush) does, then
    /// moves down every table holding a write acknowledged before the call
    /// (also when a background compaction has merged it into new tables
    /// meanwhile) and rewrites in place the deepest level's other tables
    /// (the tables this call's merges into it just wrote are already built
    /// by the current policy, under [`FilterBudget::Monkey`] for the one run
    /// the tree ends as, and are written once):
    /// every such write ends in one level, the deepest that held data when
    /// the call began, or the first level below it whose target size holds
    /// all the data (a level over its target would have a background
    /// compaction move part of it on; if the rewrite itself outgrows the
    /// level, e.g. after turning compression off, everything moves on to the
    /// next such level), or deeper if background compactions running for
    /// concurrent writers extend the tree meanwhile. Tables that
    /// concurrent writes flush meanwhile hold only newer writes and are left
    /// to the background compactions, so with writers running it returns
    /// rather than chasing them.
    pub fn compact_all(&self) -> Result<()> {
        self.check_open()?;
        self.inner.compact_all()
    }

    /// Writes a consistent copy of the database into directory `dest`
    /// (created if missing; it must be absent or empty), which
    /// [`Db::open`] opens as a database of its own. Writers and readers go
    /// on meanwhile.
    ///
    /// The copy holds every write acknowledged before the call (the
    /// memtable is flushed first) and possibly some made during it, always
    /// whole batches. Table files are hard-linked where the filesystem
    /// allows (no data copied; the two databases then share those
    /// immutable files, and each deletes only its own names), otherwise
    /// copied and synced; the copy's manifest and `CURRENT` are synced
    /// before this returns, so the checkpoint survives a crash.
    ///
    /// Errors: [`Error::InvalidArgument`] if `dest` exists and is not an
    /// empty directory (nothing is written; a path such as `x/new/..`,
    /// which names `x` once `new` is created, is refused too, leaving `new`
    /// behind, empty), or if `dest` or a directory this call would create
    /// on the way to it is an entry of this database's directory named as
    /// the engine names its own files (`000012.log`, `000012.sst`,
    /// `MANIFEST-000012`, `CURRENT`, `CURRENT.tmp`, `LOCK`, ...: nothing is
    /// created), [`Error::Io`] naming the file that failed (the files
    /// made so far are removed, best effort), [`Error::Poisoned`] if the
    /// database refuses writes (the checkpoint flushes first).
    pub fn checkpoint(&self, dest: impl AsRef<Path>) -> Result<()> {
        self.check_open()?;
        self.inner.checkpoint(dest.as_ref())
    }

    /// A snapshot of the read I/O counters and the tree's shape.
    ///
    /// Not free: `distinct_keys` hashes every memtable key and merges the
    /// tables' key sketches (about 0.6 ms with 60,000 keys in the memtable,
    /// 1.5 ms with 2,000,000 keys in 10 tables, measured by review; a get
    /// is under 1 µs). Poll it, do not call it per request; for what one
    /// read cost use [`get_with_cost`](Self::get_with_cost).
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The `k` most frequently read keys (by point reads; recent traffic
    /// weighted more: counts halve every 2^20 samples taken, 2^23 reads
    /// without contention, more when contention drops samples) with their
    /// estimated read counts, hottest first. Empty when `Options::track_hot_keys` is
    /// off. At most [`HOT_KEYS_TRACKED`] keys are reported (twice as many
    /// candidates are tracked).
    ///
    /// Each read is sampled with probability 1/8 (a per-thread random
    /// draw, so periodic read patterns are seen fairly), and a count is the
    /// sketch's count of the sampled reads times 8. A sample that finds the
    /// sketch busy with another thread's is not waited for: it is counted
    /// and the next sample taken, a read of the same moment's traffic,
    /// stands for it too (four threads reading one key lost up to 8.6% of
    /// their samples, and the counts with them, before: found by review).
    /// So contention adds noise, not a bias, if the contending threads read
    /// at about the same rate. A count carries two more errors:
    /// the sampling's binomial noise (about `1/sqrt(reads/8)` relative),
    /// and the count-min overcount, never negative and, with probability
    /// 98%, at most 0.001 of the sketch's aged total: the sampled reads
    /// since the counts last halved, plus half of those before, a quarter
    /// of those before that and so on (under 2^21 sampled reads), times 8
    /// (up to about 16,800 reads). Keys of skewed traffic stand far above
    /// that; on flat traffic it dominates: among 8,000 keys read about
    /// 1,000 times each (8,000,000 reads), keys were reported at 1,460 to
    /// 2,024 (found by review). Keys read only a handful of times are
    /// noise. The counts live in memory only: every open starts them
    /// empty.
    pub fn hot_keys(&self, k: usize) -> Vec<(Vec<u8>, u64)> {
        match &self.inner.hot_keys {
            Some(hot) => {
                let mut top = hot.hitters.lock().top();
                top.truncate(k);
                for (_, count) in &mut top {
                    *count = count.saturating_mul(HOT_KEYS_SAMPLE_EVERY as u64);
                }
                top
            }
            None => Vec::new(),
        }
    }

    /// Every live table, level by level (level 0 newest first).
    pub fn tables(&self) -> Vec<TableInfo> {
        let sv = self.inner.current();
        let mut out = Vec::new();
        for (level, tables) in sv.version.levels.iter().enumerate() {
            for t in tables {
                let meta = t.table.meta();
                out.push(TableInfo {
                    level,
                    file_number: t.record.file_number,
                    file_size: t.record.file_size,
                    entries: meta.entries,
                    smallest: t.record.smallest.clone(),
                    largest: t.record.largest.clone(),
                    filter_policy: meta.filter_policy.clone(),
                    filter_format: t.table.filter().format_name().to_string(),
                    filter_bytes: meta.filter_bytes,
                    filter_bits_per_key: t.table.filter_bits_per_key(),
                });
            }
        }
        out
    }

    /// Sets the read I/O counters to zero (the shape is not a counter).
    ///
    /// Safe to call while reads run: a read asked before the reset and
    /// answered after it counts in the new period, and [`Stats`]' identities
    /// (`filter_checks` the sum of the three answers, `prefix_filter_checks`
    /// at least `prefix_filter_negatives`; with a block cache,
    /// `data_block_reads` hits plus misses) hold in every snapshot. Other
    /// counters of a read in flight (say its `bytes_read` before the reset
    /// and its hit after it) may fall on either side.
    pub fn reset_stats(&self) {
        self.inner.counters.reset();
        for counters in &self.inner.level_counters {
            counters.reset();
        }
    }

    /// What [`open`](Self::open) found when it replayed the write-ahead
    /// logs: how much it replayed, torn tails dropped, and, when a
    /// point-in-time replay stopped early (see
    /// [`WalRecovery`](crate::WalRecovery)), where, why and which logs it
    /// set aside.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// The directory the database lives in: the path given to
    /// [`open`](Self::open), made absolute against the working directory
    /// of that moment (later changes of the working directory do not move
    /// the database).
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Stops the background threads, seals and syncs the log (also when
    /// the database is poisoned: the writes it acknowledged are in the log,
    /// unless the log itself failed, which `close` then reports). Dropping
    /// the handle does the same, ignoring errors; `close` reports them.
    ///
    /// `close` takes the handle by value. A database shared as `Arc<Db>`
    /// closes with `Arc::try_unwrap(db).map(Db::close)` once the other
    /// clones are gone (the last clone dropped closes it too, ignoring
    /// errors). To make acknowledged writes durable without closing, use
    /// [`Options::sync_writes`] or call [`flush`](Self::flush).
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// The shared state, for [`Db::verify`](crate::verify) (fails when closed).
    pub(crate) fn inner_for_verify(&self) -> Result<&Arc<DbInner>> {
        self.check_open()?;
        Ok(&self.inner)
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        {
            let mut bg = self.inner.bg.lock();
            bg.shutdown = true;
            self.inner.bg_cv.notify_all();
            self.inner.done_cv.notify_all();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        // Before the `LOCK` goes (with the handle): tables a snapshot or
        // scan still pins are left for the next open to remove.
        self.inner.owner.release();
        // A snapshot or scan may keep `inner` alive past close: it must pin
        // only its own moment, not the final version's tables and memtables.
        self.inner.update_sv(|_| SuperVersion {
            mem: Arc::new(Memtable::new(0)),
            imms: Vec::new(),
            version: Arc::new(Version::new(self.inner.opts.num_levels)),
        });
        // Even a poisoned database (a failed flush, say) seals and syncs
        // its log: the writes it acknowledged are in it, and with
        // `sync_writes = false` this sync is what makes them durable. A log
        // that itself failed refuses both, and that error is returned.
        let mut w = self.inner.writer.lock();
        let sealed = seal_log(&mut w).and_then(|()| w.wal.sync());
        w.mem = Arc::new(Memtable::new(0));
        sealed
    }
}

/// Poisons the database when dropped during a panic.
struct PoisonOnPanic<'a>(&'a DbInner);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .set_poison_reason("a write panicked while it was being committed".into());
        }
    }
}

/// Inserts the operations of an encoded batch into `mem`, numbered from
/// the payload's first sequence number.
fn insert_payload(mem: &Memtable, payload: &[u8]) -> Result<()> {
    let malformed =
        |why: &str| Error::Poisoned(format!("a write group's batch is malformed: {why}"));
    let (first_seq, ops) = read_payload(payload).map_err(malformed)?;
    for (seq, op) in (first_seq..).zip(ops) {
        let op = op.map_err(malformed)?;
        mem.insert(op.key, seq, op.kind, op.value);
    }
    Ok(())
}

/// Ends a log that will take no more writes (at a memtable switch and at
/// close) with an empty batch record, the *seal*, unless the log is empty.
///
/// A damaged record with no intact record after it reads like a torn append
/// (a crash in the middle of it) and is dropped; with a seal after it, the
/// last write's record is followed by an intact one, so damage to it is
/// reported as corruption at the next open instead of silently losing that
/// write (`docs/reliability.md`). A damaged seal itself is dropped as a torn
/// tail and loses nothing. Only the log a crash interrupted ends without a
/// seal, and there a damaged last record and a torn one look alike.
///
/// The log is synced *before* the seal is appended (the caller syncs again
/// after it), so an intact seal vouches for every byte before it: a hole
/// before a seal is never what a power cut leaves, which
/// [`WalRecovery::Auto`](crate::WalRecovery::Auto) relies on. (Appending
/// the seal first left a window, until the sync after it, in which a power
/// cut could write back the seal's page but not an earlier one.)
fn seal_log(w: &mut WriterState) -> Result<()> {
    if w.wal.is_empty() {
        return Ok(());
    }
    w.wal.sync()?;
    let seal = WriteBatch::new().encode(w.last_seq.saturating_add(1).min(MAX_SEQUENCE));
    w.wal.add_record(&seal)
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// The directories this process has open as databases (see [`DirId`]):
/// the in-process half of [`DirLock`].
static OPEN_DIRS: Mutex<Vec<DirId>> = Mutex::new(Vec::new());

/// What identifies a directory in [`OPEN_DIRS`]: on Unix its device and
/// inode numbers, which a rename or a second mount point does not change
/// (a path would let a renamed open directory be opened again); elsewhere
/// its canonical path.
#[cfg(unix)]
type DirId = (u64, u64);
#[cfg(not(unix))]
type DirId = PathBuf;

fn dir_id(dir: &Path) -> Result<DirId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir).map_err(io_err(dir))?;
        Ok((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        dir.canonicalize().map_err(io_err(dir))
    }
}

/// The exclusive hold of a database directory: an entry in [`OPEN_DIRS`]
/// (against a second open in this process) and, on Unix, a POSIX record
/// lock (`fcntl(F_SETLK)`) on its `LOCK` file (against other processes).
///
/// Why not `flock` (`File::try_lock`), as before the fourteenth session:
/// an `flock` lock belongs to the open file description, which a child
/// process forked by any thread of this one shares until it calls `exec`.
/// Closing a database and opening it again while another thread spawned a
/// process then failed with `Error::Locked` (caught by `tests/crash.rs`,
/// whose other test spawns children, 2 runs in 131 under load). A POSIX
/// record lock belongs to the process and is not inherited; the price is
/// that closing *any* descriptor of the file drops it, so this process
/// opens `LOCK` only here, only after `OPEN_DIRS` said the directory is
/// not open, and closes it before removing the entry.
pub(crate) struct DirLock {
    file: Option<File>,
    dir: PathBuf,
    id: DirId,
}

impl std::fmt::Debug for DirLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirLock").field("dir", &self.dir).finish()
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Close first: once the entry is gone another open in this process
        // may lock the file, and a close after that would drop its lock.
        drop(self.file.take());
        OPEN_DIRS.lock().retain(|d| d != &self.id);
    }
}

fn acquire_lock(dir: &Path) -> Result<DirLock> {
    let canonical = dir.canonicalize().map_err(io_err(dir))?;
    let id = dir_id(&canonical)?;
    let mut open = OPEN_DIRS.lock();
    if open.contains(&id) {
        return Err(Error::Locked(dir.to_path_buf()));
    }
    let path = dir.join(LOCK_FILE_NAME);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))?;
    match lock_exclusive(&file) {
        Ok(true) => {}
        Ok(false) => return Err(Error::Locked(dir.to_path_buf())),
        Err(e) => return Err(Error::io(path, e)),
    }
    open.push(id);
    Ok(DirLock {
        file: Some(file),
        dir: canonical,
        id,
    })
}

/// Takes a process-owned write lock on the whole of `file` without
/// waiting: `Ok(false)` when another process holds one.
#[cfg(unix)]
fn lock_exclusive(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` is plain data; all-zero is a valid value of it.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as _;
    lock.l_whence = libc::SEEK_SET as _;
    lock.l_start = 0;
    // Zero length: to the end of the file, however long.
    lock.l_len = 0;
    // SAFETY: `file` is open for the whole call, so its descriptor is
    // valid; `F_SETLK` reads the `flock` we pass by pointer and keeps no
    // reference to it.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

/// Takes an exclusive lock on `file` without waiting (no `fork` to worry
/// about here): `Ok(false)` when another process holds one.
#[cfg(not(unix))]
fn lock_exclusive(file: &File) -> std::io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// The entries of `dir` that may be the engine's files: all but those the
/// real filesystem says are directories. A directory named like an engine
/// file (another program's, or a checkpoint made inside the database) was
/// taken for a log to replay or a file to delete, and the open failed
/// (found by review, twenty-fifth session). Names the real filesystem does
/// not know (a [`FileSystem`] of the caller's own) are kept.
pub(crate) fn list_files(fs: &dyn FileSystem, dir: &Path) -> std::io::Result<Vec<String>> {
    Ok(files_only(dir, fs.list_dir(dir)?))
}

/// `names` (entries of `dir`) without those the real filesystem says are
/// directories ([`list_files`]).
fn files_only(dir: &Path, mut names: Vec<String>) -> Vec<String> {
    names.retain(|n| std::fs::symlink_metadata(dir.join(n)).map_or(true, |m| !m.is_dir()));
    names
}

/// The number a name of `dir` would take from the engine's numbering: a
/// table, log, set-aside log or manifest name ([`parse_numbered`]).
pub(crate) fn engine_file_number(name: &str) -> Option<u64> {
    parse_numbered(name, ".log")
        .or_else(|| parse_numbered(name, ".sst"))
        .or_else(|| parse_numbered(name, ".log.dropped"))
        .or_else(|| {
            name.strip_prefix("MANIFEST-")
                .and_then(|rest| parse_numbered(rest, ""))
        })
}

/// The number of a file named as this engine names them (`{n:06}` and
/// `suffix`, as [`log_file_name`] and `table_file_name` write), or `None`.
/// Only exact names count: a directory may hold other programs' files (an
/// application's `1.log`), and the open deletes the files it takes for its
/// own obsolete ones. Numbers above [`MAX_FILE_NUMBER`] are not ours
/// either (the next number must not overflow).
pub(crate) fn parse_numbered(name: &str, suffix: &str) -> Option<u64> {
    let stem = name.strip_suffix(suffix)?;
    if !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = stem.parse().ok()?;
    (n < MAX_FILE_NUMBER && format!("{n:06}") == stem).then_some(n)
}

/// The largest file number this engine gives or accepts: far beyond any
/// database's lifetime (a new file every microsecond for 9,000 years), and
/// far below `u64::MAX`, so the next number never overflows.
pub(crate) const MAX_FILE_NUMBER: u64 = 1 << 58;

/// The file whose lock keeps a second process (or a second `Db` of this
/// process) from opening the database directory.
pub(crate) const LOCK_FILE_NAME: &str = "LOCK";

/// Table-building options: the database's block settings and
/// `filter_policy` (from [`filter_policy_for_write`]).
pub(crate) fn table_options(opts: &Options, filter_policy: Arc<dyn FilterPolicy>) -> TableOptions {
    TableOptions {
        block_bytes: opts.block_bytes,
        restart_interval: opts.restart_interval,
        filter_policy,
        prefix_len: opts.prefix_filter_len,
        compression: opts.compression,
    }
}

/// An upper bound on the hashes the filter of a table written from `mem`
/// holds: its versions, plus its distinct prefixes with
/// [`Options::prefix_filter_len`].
fn filter_entries_of(opts: &Options, mem: &Memtable) -> u64 {
    let prefixes = opts
        .prefix_filter_len
        .map_or(0, |n| mem.distinct_prefixes(n));
    mem.entries() as u64 + prefixes
}

/// The filter policy for tables a write (flush or compaction) adds to
/// `level` of `version`, consuming the tables numbered in `consumed` and
/// bringing about `written` entries: the configured policy, sized for the
/// written run under [`FilterBudget::Monkey`]; no filter for a level other
/// than 0 with no data below it when [`Options::last_level_filters`] is off.
pub(crate) fn filter_policy_for_write(
    opts: &Options,
    version: &Version,
    consumed: &[u64],
    level: usize,
    written: u64,
) -> Arc<dyn FilterPolicy> {
    // A compaction consumes tables at or above its output level only, so
    // "no deeper level holds data" is also true after the write.
    if !opts.last_level_filters && level > 0 && !version.holds_data_below(level) {
        return Arc::new(NoFilter);
    }
    if opts.filter_budget == FilterBudget::Uniform {
        return Arc::clone(&opts.filter_policy);
    }
    let (runs, run) = version.runs_after_write(consumed, level, written);
    policy_for_run(&opts.filter_policy, opts.filter_budget, &runs, run)
}

/// As [`filter_policy_for_write`] for a write into the one run the tree
/// will be once the write's caller (`compact_all`) has moved everything
/// into `level`: a Monkey budget gives a lone run its average.
pub(crate) fn filter_policy_for_final_run(
    opts: &Options,
    version: &Version,
    level: usize,
) -> Arc<dyn FilterPolicy> {
    if !opts.last_level_filters && level > 0 && !version.holds_data_below(level) {
        return Arc::new(NoFilter);
    }
    policy_for_run(&opts.filter_policy, opts.filter_budget, &[1], 0)
}

/// Stores the HyperLogLog of the table's distinct user keys in its
/// properties (from the key hashes the builder already computed for the
/// filter: no key is hashed twice), then finishes the table.
pub(crate) fn finish_table(mut builder: TableBuilder) -> Result<TableMeta> {
    let mut sketch = HyperLogLog::new(KEY_SKETCH_PRECISION);
    for &h in builder.key_hashes() {
        sketch.insert_hash(h);
    }
    builder.set_property(KEY_SKETCH_PROPERTY, sketch.to_bytes());
    builder.finish()
}

/// The error of opening a table the manifest names: a table file that is
/// not there is the database's damage, not an I/O failure to retry. The
/// engine deletes a table only after a synced manifest edit stops naming
/// it, so a missing one means the manifest lost that edit (a damaged last
/// edit, dropped as torn, reads this way: a compaction's edit whose input
/// tables were then deleted) or the file was removed behind the engine's
/// back. Reported as [`Error::Corruption`] naming the manifest, which is
/// what disagrees with the directory. Other errors pass through.
fn missing_table_is_corruption(
    error: Error,
    manifest: Option<(u64, bool)>,
    dir: &Path,
    table: &Path,
) -> Error {
    let Error::Io { source, .. } = &error else {
        return error;
    };
    if source.kind() != std::io::ErrorKind::NotFound {
        return error;
    }
    let Some((number, torn)) = manifest else {
        return error;
    };
    let dropped = if torn {
        " (its last edit was dropped as torn: a damaged compaction edit, complete before it was \
         damaged, leaves the tables it had replaced named and missing)"
    } else {
        ""
    };
    Error::corruption(
        dir.join(manifest_file_name(number)),
        None,
        format!(
            "the manifest names table {}, which is missing{dropped}",
            table.display()
        ),
    )
}

/// A table must be what the manifest recorded when it was added: the
/// reads trust the record's key range (which tables a get or scan
/// consults) and the table's sequence numbers (what a snapshot sees). Both
/// come from one builder, so any difference is damage or a crafted file.
pub(crate) fn check_record_describes_table(
    record: &TableRecord,
    meta: &TableMeta,
    path: &Path,
) -> Result<()> {
    let same = record.file_size == meta.file_size
        && record.smallest == meta.smallest
        && record.largest == meta.largest
        && record.smallest_seq == meta.smallest_seq
        && record.largest_seq == meta.largest_seq;
    if same {
        return Ok(());
    }
    Err(Error::corruption(
        path,
        None,
        format!(
            "the table does not match its manifest record: file size {} against {}, \
             keys {:?}..={:?} against {:?}..={:?}, sequences {}..={} against {}..={}",
            meta.file_size,
            record.file_size,
            String::from_utf8_lossy(&meta.smallest),
            String::from_utf8_lossy(&meta.largest),
            String::from_utf8_lossy(&record.smallest),
            String::from_utf8_lossy(&record.largest),
            meta.smallest_seq,
            meta.largest_seq,
            record.smallest_seq,
            record.largest_seq,
        ),
    ))
}

/// What reads assume of the manifest's levels: below level 0 the tables of
/// a level hold disjoint key ranges (a get consults one table per level, a
/// scan reads a level's tables one after another), and no table holds a
/// sequence number past the last one the manifest records (new writes
/// continue from it; one at or below a table's would hide behind it).
pub(crate) fn check_manifest_levels(state: &ManifestState, manifest: &Path) -> Result<()> {
    if let Some(level0) = state.levels.first() {
        let mut by_number: Vec<&TableRecord> = level0.iter().collect();
        by_number.sort_by_key(|t| t.file_number);
        for pair in by_number.windows(2) {
            if pair[0].largest_seq >= pair[1].smallest_seq {
                return Err(Error::corruption(
                    manifest,
                    None,
                    format!(
                        "level-0 table {} holds sequences up to {}, not below table {}'s {}",
                        pair[0].file_number,
                        pair[0].largest_seq,
                        pair[1].file_number,
                        pair[1].smallest_seq
                    ),
                ));
            }
        }
    }
    for (level, tables) in state.levels.iter().enumerate().skip(1) {
        let mut ranges: Vec<&TableRecord> = tables.iter().collect();
        ranges.sort_by(|a, b| a.smallest.cmp(&b.smallest));
        for pair in ranges.windows(2) {
            if pair[0].largest >= pair[1].smallest {
                return Err(Error::corruption(
                    manifest,
                    None,
                    format!(
                        "level {level} holds tables {} and {} with overlapping key ranges",
                        pair[0].file_number, pair[1].file_number
                    ),
                ));
            }
        }
    }
    if let Some(t) = state
        .levels
        .iter()
        .flatten()
        .find(|t| t.largest_seq > state.last_sequence)
    {
        return Err(Error::corruption(
            manifest,
            None,
            format!(
                "table {} holds sequence number {}, past the last one recorded ({})",
                t.file_number, t.largest_seq, state.last_sequence
            ),
        ));
    }
    Ok(())
}

/// The message a panic carried (`panic!` with a literal or a format), or
/// "no message".
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string())
}

/// Writes the newest version of every key of `mem` to level-0 table
/// `number` with filters built by `filter_policy`, synced, and opens it.
fn write_level0_table(
    dir: &Path,
    opts: &Options,
    filter_policy: Arc<dyn FilterPolicy>,
    counters: &Arc<ReadCounters>,
    block_cache: Option<&Arc<BlockCache>>,
    mem: &Memtable,
    number: u64,
) -> Result<(TableRecord, Table)> {
    let path = dir.join(table_file_name(number));
    let table_opts = table_options(opts, filter_policy);
    let written = (|| {
        let mut builder = TableBuilder::new(opts.fs.as_ref(), &path, number, table_opts)?;
        let mut prev: Option<Vec<u8>> = None;
        mem.for_each(|key, seq, kind, value| {
            // The memtable is frozen and every reader that could need an
            // older version pins the memtable itself, so only the newest
            // survives.
            if prev.as_deref() == Some(key) {
                return Ok(());
            }
            prev = Some(key.to_vec());
            builder.add(key, seq, kind, value)
        })?;
        let meta = finish_table(builder)?;
        let table = Table::open_with_cache(
            &path,
            number,
            &opts.filter_policy,
            Arc::clone(counters),
            block_cache.cloned(),
        )?;
        Ok((TableRecord::describing(0, &meta), table))
    })();
    if written.is_err() {
        // No manifest names the file: remove it now rather than leave it
        // to the next open (best effort).
        let _ = opts.fs.remove_file(&path);
    }
    written
}

impl DbInner {
    pub(crate) fn current(&self) -> Arc<SuperVersion> {
        self.sv.load_full()
    }

    /// Replaces the super version with one built from the current one.
    fn update_sv(&self, f: impl FnOnce(&SuperVersion) -> SuperVersion) {
        let _serial = self.sv_update.lock();
        let cur = self.sv.load_full();
        self.sv.store(Arc::new(f(&cur)));
    }

    /// Swaps in a new table set built from the current one.
    pub(crate) fn install_version(&self, f: impl FnOnce(&Version) -> Version) {
        self.update_sv(|sv| SuperVersion {
            mem: Arc::clone(&sv.mem),
            imms: sv.imms.clone(),
            version: Arc::new(f(&sv.version)),
        });
    }

    fn check_writable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned(self.poison_reason()));
        }
        Ok(())
    }

    /// Records a failure that leaves memory and disk possibly out of step:
    /// writes are refused until the database is reopened.
    pub(crate) fn set_poison(&self, err: &Error) {
        self.set_poison_reason(err.to_string());
    }

    /// Runs background job `job`; a panic in it (a bug, or a user's filter
    /// policy panicking in `build`) poisons the database like an error
    /// instead of ending the thread silently, which left writers waiting
    /// for a flush or compaction that would never come.
    pub(crate) fn run_background<T>(
        &self,
        what: &str,
        job: impl FnOnce() -> Result<T>,
    ) -> Option<Result<T>> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
            Ok(result) => Some(result),
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                self.set_poison_reason(format!("the {what} panicked: {message}"));
                None
            }
        }
    }

    /// Marks the database failed with `reason` (the first reason stays) and
    /// wakes every waiter.
    fn set_poison_reason(&self, reason: String) {
        {
            let mut p = self.poison.lock();
            if p.is_none() {
                *p = Some(reason);
            }
        }
        self.poisoned.store(true, Ordering::Release);
        // Notify under `bg`, the lock waiters check the flag under: a
        // notification between a waiter's check and its wait would be lost,
        // and `flush` would wait forever once the failed background thread
        // has exited (found by review; the callers hold at most the writer
        // lock, which comes before `bg`).
        let _bg = self.bg.lock();
        self.bg_cv.notify_all();
        self.done_cv.notify_all();
    }

    /// Why the database is poisoned (empty if it is not).
    pub(crate) fn poison_reason(&self) -> String {
        self.poison.lock().clone().unwrap_or_default()
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    fn validate_batch(&self, batch: &WriteBatch) -> Result<()> {
        // One batch is one log record: a larger one would be refused by
        // the log after its sequence numbers were taken, and that failure
        // poisoned the database.
        let encoded = batch.encoded_len();
        if encoded > MAX_RECORD_PAYLOAD {
            return Err(Error::invalid(format!(
                "batch of {encoded} encoded bytes exceeds the log's record limit \
                 ({MAX_RECORD_PAYLOAD} bytes): split it"
            )));
        }
        for op in batch.ops() {
            self.validate_key(&op.key)?;
            if op.value.len() > self.opts.max_value_bytes {
                return Err(Error::invalid(format!(
                    "value of {} bytes exceeds max_value_bytes ({})",
                    op.value.len(),
                    self.opts.max_value_bytes
                )));
            }
        }
        Ok(())
    }

    fn validate_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::invalid("keys must be at least 1 byte"));
        }
        if key.len() > self.opts.max_key_bytes {
            return Err(Error::invalid(format!(
                "key of {} bytes exceeds max_key_bytes ({})",
                key.len(),
                self.opts.max_key_bytes
            )));
        }
        Ok(())
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.validate_batch(batch)?;
        // Before the empty batch's early return: a poisoned database
        // acknowledges no write, not even an empty one (found by review,
        // twenty-eighth session).
        self.check_writable()?;
        if batch.is_empty() {
            return Ok(());
        }
        // Encoded here, outside every lock; the group's leader numbers it.
        let mut write = PendingWrite {
            payload: batch.encode(0),
            ops: batch.len() as u64,
            data_bytes: batch.data_bytes() as u64,
        };
        if self.opts.sync_writes {
            self.write_queue
                .submit(&self.writer, write, |w, group| self.commit_group(w, group))
        } else {
            // Unsynced writes take the writer lock one at a time: grouping
            // them saves a `write` system call each but measured slower
            // (docs/benchmarks.md, "Writes: group commit").
            let mut w = self.writer.lock();
            let mut results = self.commit_group(&mut w, std::slice::from_mut(&mut write));
            results
                .pop()
                .unwrap_or_else(|| Err(Error::Poisoned("a write's commit gave no result".into())))
        }
    }

    /// Commits a write group (see [`crate::write_group`]): numbers its
    /// batches, appends them to the log as one record (synced once when
    /// `sync_writes`), inserts them into the memtable and publishes the
    /// last sequence number. One result per member, in order.
    fn commit_group(&self, w: &mut WriterState, group: &mut [PendingWrite]) -> Vec<Result<()>> {
        // A panic past the log append (a bug) would leave logged records
        // whose sequence numbers the next commit reuses: refuse writes.
        let _poison_on_panic = PoisonOnPanic(self);
        let members = group.len();
        // The first member (the leader's own write) gets the error itself,
        // the others copies of it.
        let failed_all = |e: Error| -> Vec<Result<()>> {
            let mut results: Vec<Result<()>> = (1..members).map(|_| Err(e.duplicate())).collect();
            results.insert(0, Err(e));
            results
        };
        if let Err(e) = self
            .check_writable()
            .and_then(|()| self.make_room(w, false))
        {
            return failed_all(e);
        }
        // Number the batches in order; one that would run past the last
        // sequence number is refused alone (and the ones after it still
        // fit only if they are smaller).
        let mut next = w.last_seq + 1;
        let mut results: Vec<Result<()>> = Vec::with_capacity(group.len());
        for member in group.iter_mut() {
            if next - 1 + member.ops > MAX_SEQUENCE {
                results.push(Err(Error::invalid("sequence numbers exhausted")));
                continue;
            }
            set_first_seq(&mut member.payload, next);
            next += member.ops;
            results.push(Ok(()));
        }
        let accepted = || {
            group
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_ok())
                .map(|(m, _)| m)
        };
        let batches = accepted().count() as u64;
        if batches == 0 {
            return results;
        }
        // The group is one log record (see `merge_payloads`: a power cut
        // before its fsync must not leave a hole followed by intact
        // records, which a synced log reports as corruption).
        let merged;
        let record: &[u8] = if batches == 1 {
            accepted().next().map_or(&[], |m| m.payload.as_slice())
        } else {
            merged = merge_payloads(accepted().map(|m| m.payload.as_slice()));
            match &merged {
                Some(merged) => merged,
                None => {
                    return failed_all(Error::invalid(
                        "a write group's operations overflow one log record's count",
                    ))
                }
            }
        };
        let logged = w.wal.add_record(record).and_then(|()| {
            if self.opts.sync_writes {
                w.wal.sync()
            } else {
                Ok(())
            }
        });
        if let Err(e) = logged {
            self.set_poison(&e);
            return failed_all(e);
        }
        // The numbers are in the log now: taken even if what follows
        // fails (a log sealed at close carries the next unused one).
        w.last_seq = next - 1;
        if let Err(e) = insert_payload(&w.mem, record) {
            // The payload was encoded by `write` in this process, so
            // this is a bug; the memtable may hold part of the group.
            self.set_poison(&e);
            return failed_all(e);
        }
        let data_bytes: u64 = accepted().map(|m| m.data_bytes).sum();
        self.engine
            .user_bytes_written
            .fetch_add(data_bytes, Ordering::Relaxed);
        self.engine.log_appends.fetch_add(1, Ordering::Relaxed);
        self.engine
            .batches_written
            .fetch_add(batches, Ordering::Relaxed);
        self.visible_seq.store(w.last_seq, Ordering::Release);
        results
    }

    /// Freezes the memtable when it is full (or when `force` and it is not
    /// empty), waiting first if too many frozen memtables or level-0 tables
    /// are queued.
    fn make_room(&self, w: &mut WriterState, force: bool) -> Result<()> {
        loop {
            self.check_writable()?;
            let full = w.mem.approx_bytes() >= self.opts.memtable_bytes;
            if !full && (!force || w.mem.is_empty()) {
                return Ok(());
            }
            let sv = self.current();
            let too_many_imms = sv.imms.len() >= self.opts.max_immutable_memtables;
            // Too many level-0 tables make every read check more filters:
            // hold writers until compaction catches up.
            let l0_stall = self.opts.background_compaction
                && sv.version.levels[0].len() >= self.opts.level0_stop_writes;
            drop(sv);
            if too_many_imms || l0_stall {
                let mut bg = self.bg.lock();
                if bg.shutdown {
                    return Err(Error::Closed);
                }
                self.bg_cv.notify_all();
                self.done_cv
                    .wait_for(&mut bg, std::time::Duration::from_millis(50));
                continue;
            }
            return self.rotate(w);
        }
    }

    /// Freezes the memtable and starts a new log.
    fn rotate(&self, w: &mut WriterState) -> Result<()> {
        let number = self.next_file.fetch_add(1, Ordering::SeqCst);
        let path = self.dir.join(log_file_name(number));
        // The old log's memtable is about to be flushed; make it durable so
        // a power cut before the flush cannot lose it.
        // The new log's directory entry must be durable before any write
        // it holds is acknowledged: a synced record in a file whose entry a
        // power cut takes away is lost.
        let rotated = seal_log(w)
            .and_then(|()| w.wal.sync())
            .and_then(|()| LogWriter::create(self.fs.as_ref(), &path))
            .and_then(|wal| {
                self.fs
                    .sync_dir(&self.dir)
                    .map_err(io_err(&self.dir))
                    .map(|()| wal)
            });
        let wal = match rotated {
            Ok(wal) => wal,
            Err(e) => {
                self.set_poison(&e);
                return Err(e);
            }
        };
        let mem = Arc::new(Memtable::new(number));
        self.update_sv(|sv| {
            let mut imms = Vec::with_capacity(sv.imms.len() + 1);
            imms.push(Arc::clone(&w.mem));
            imms.extend(sv.imms.iter().cloned());
            SuperVersion {
                mem: Arc::clone(&mem),
                imms,
                version: Arc::clone(&sv.version),
            }
        });
        w.wal = wal;
        w.mem = mem;
        let _bg = self.bg.lock();
        self.bg_cv.notify_all();
        Ok(())
    }

    /// Feeds a random one in [`HOT_KEYS_SAMPLE_EVERY`] reads to the
    /// hot-key sketch, never waiting: under contention the observation is
    /// skipped rather than serialising readers on the sketch.
    #[inline]
    fn sample_read(&self, key: &[u8], hash: u64) {
        if let Some(hot) = &self.hot_keys {
            if sample_this_read() {
                match hot.hitters.try_lock() {
                    Some(mut hitters) => {
                        // This sample also stands for those dropped since
                        // the last one taken: a read of the same moment's
                        // traffic, so a key's count stays right however
                        // contention varies over time. (Scaling every count
                        // by one lifetime ratio of dropped samples inflated
                        // the counts of reads made after contention ended:
                        // found by review.) At most
                        // `HOT_KEYS_MAX_CARRIED` at a time: a thread
                        // descheduled while holding the sketch leaves
                        // thousands, which one key would otherwise take in
                        // one lump. A plain load first: the shared line is
                        // written only under contention.
                        let carried = if hot.dropped.load(Ordering::Relaxed) == 0 {
                            0
                        } else {
                            hot.dropped
                                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                                    Some(n - n.min(HOT_KEYS_MAX_CARRIED))
                                })
                                .map_or(0, |n| n.min(HOT_KEYS_MAX_CARRIED))
                        };
                        hitters.observe_hash_n(key, hash, 1 + carried);
                    }
                    None => {
                        hot.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // A short-lived guard: no reference-count traffic on the hot path.
        let sv = self.sv.load();
        let snapshot = self.visible_seq.load(Ordering::Acquire);
        self.get_in(&sv, snapshot, key)
    }

    /// A pinned read view: the published sequence number, then the current
    /// super version, then the sequence number again, until it did not
    /// change. A batch lands in one memtable before its last sequence
    /// number is published, and a later super version holds that memtable
    /// or the table it was flushed to, so every batch at or below the
    /// sequence is in the view, and the sequence hides the rest: the view
    /// holds exactly the writes numbered up to it. (The other order, which
    /// [`get`](Self::get) uses, is as consistent, but its sequence can
    /// exceed the last visible write: a batch published between the two
    /// loads can sit in a memtable the super version does not have.)
    ///
    /// Why the second load: a flush keeps only the newest version of each
    /// key of its memtable (the readers that need an older one pin the
    /// memtable), and so does compaction. If a write of key `k` numbered
    /// above the sequence was published, and its memtable flushed, between
    /// the first two loads, the super version holds `k` only at that new
    /// number, invisible at the sequence, and the version the sequence
    /// should see is gone: the view would answer with an older value of
    /// `k`, or none. While the sequence stays put, every table in the super
    /// version holds only writes at or below it, each key's newest among
    /// them kept. After [`READ_VIEW_TRIES`] changed sequences the writer
    /// lock (under which sequences are published) holds writes back for
    /// the two loads.
    pub(crate) fn read_view(&self) -> (Arc<SuperVersion>, SequenceNumber) {
        self.read_view_with(|| {})
    }

    /// [`read_view`](Self::read_view), running `between` before each load
    /// of the super version (a test puts a write and a flush there).
    fn read_view_with(&self, mut between: impl FnMut()) -> (Arc<SuperVersion>, SequenceNumber) {
        let mut snapshot = self.visible_seq.load(Ordering::Acquire);
        for _ in 0..READ_VIEW_TRIES {
            between();
            let sv = self.current();
            let again = self.visible_seq.load(Ordering::Acquire);
            if again == snapshot {
                return (sv, snapshot);
            }
            snapshot = again;
        }
        let _writer = self.writer.lock();
        let snapshot = self.visible_seq.load(Ordering::Acquire);
        (self.current(), snapshot)
    }

    /// [`get`](Self::get) in a pinned read view.
    #[inline]
    pub(crate) fn get_in(
        &self,
        sv: &SuperVersion,
        snapshot: SequenceNumber,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        self.get_in_costed(sv, snapshot, key, &mut ReadCost::default())
    }

    /// [`get_in`](Self::get_in), adding what the read cost to `cost`.
    #[inline]
    pub(crate) fn get_in_costed(
        &self,
        sv: &SuperVersion,
        snapshot: SequenceNumber,
        key: &[u8],
        cost: &mut ReadCost,
    ) -> Result<Option<Vec<u8>>> {
        self.validate_key(key)?;
        ReadCounters::add(&self.counters.gets, 1);
        let hash = key_hash(key);
        self.sample_read(key, hash);
        self.get_at(sv, snapshot, key, hash, cost)
    }

    /// The value of `key` (hashed to `hash`) in super version `sv` at
    /// sequence `snapshot`: memtables newest first, then the tables. What
    /// the read cost is added to `cost`, and `cost.source` says where the
    /// answer came from.
    #[inline]
    fn get_at(
        &self,
        sv: &SuperVersion,
        snapshot: SequenceNumber,
        key: &[u8],
        hash: u64,
        cost: &mut ReadCost,
    ) -> Result<Option<Vec<u8>>> {
        for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
            if mem.is_empty() {
                continue;
            }
            match mem.get(key, snapshot) {
                Some(MemLookup::Value(v)) => {
                    cost.source = ReadSource::Memtable;
                    return Ok(Some(v));
                }
                Some(MemLookup::Deleted) => {
                    cost.source = ReadSource::Memtable;
                    return Ok(None);
                }
                None => {}
            }
        }
        Ok(match sv.version.get(key, hash, snapshot, cost)? {
            Some(found) if found.kind == ValueKind::Put => Some(found.value),
            _ => None,
        })
    }

    fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        // One super version and one snapshot for every key.
        let sv = self.sv.load();
        let snapshot = self.visible_seq.load(Ordering::Acquire);
        self.multi_get_in(&sv, snapshot, keys)
    }

    /// [`multi_get`](Self::multi_get) in a pinned read view: every key is
    /// validated before anything is read or counted.
    pub(crate) fn multi_get_in<K: AsRef<[u8]>>(
        &self,
        sv: &SuperVersion,
        snapshot: SequenceNumber,
        keys: &[K],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        for key in keys {
            self.validate_key(key.as_ref())?;
        }
        ReadCounters::add(&self.counters.gets, keys.len() as u64);
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            let key = key.as_ref();
            let hash = key_hash(key);
            self.sample_read(key, hash);
            values.push(self.get_at(sv, snapshot, key, hash, &mut ReadCost::default())?);
        }
        Ok(values)
    }

    fn scan(&self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) -> DbIterator {
        let (sv, snapshot) = self.read_view();
        self.scan_in(sv, snapshot, lower, upper, None)
    }

    /// A scan of the keys starting with `prefix`, in the current read view.
    pub(crate) fn scan_prefix(&self, prefix: &[u8]) -> DbIterator {
        let (sv, snapshot) = self.read_view();
        let (lower, upper) = prefix_bounds(prefix);
        self.scan_in(sv, snapshot, lower, upper, Some(prefix))
    }

    /// A scan of `lower..upper` in a pinned read view; the iterator keeps
    /// `sv` (and so its memtables and table files) alive. With `prefix`
    /// (`lower..upper` then covers exactly the keys starting with it), the
    /// tables that [`Table::may_contain_prefix`] rules out are left out of
    /// the scan: they are never read.
    pub(crate) fn scan_in(
        &self,
        sv: Arc<SuperVersion>,
        snapshot: SequenceNumber,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
        prefix: Option<&[u8]>,
    ) -> DbIterator {
        let wanted = |t: &Arc<TableHandle>| prefix.is_none_or(|p| t.table.may_contain_prefix(p));
        let level0: Vec<Arc<TableHandle>> = sv
            .version
            .levels
            .first()
            .into_iter()
            .flatten()
            .filter(|t| wanted(t))
            .cloned()
            .collect();
        // Dropping tables keeps a deeper level sorted and disjoint.
        let deeper: Vec<Vec<Arc<TableHandle>>> = sv
            .version
            .levels
            .iter()
            .skip(1)
            .map(|tables| tables.iter().filter(|t| wanted(t)).cloned().collect())
            .filter(|kept: &Vec<Arc<TableHandle>>| !kept.is_empty())
            .collect();
        // Owns `sv`, which keeps the memtables and table files alive as
        // long as the scan.
        let cursors = move || {
            let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
            for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
                children.push(Box::new(mem.iter()));
            }
            for t in &level0 {
                children.push(Box::new(t.table.iter()));
            }
            for tables in &deeper {
                children.push(Box::new(LevelIterator::new(tables.clone())));
            }
            MergingIterator::new(children)
        };
        DbIterator::new(Box::new(cursors), snapshot, lower, upper)
    }

    pub(crate) fn flush(&self) -> Result<()> {
        // Every memtable frozen by now has a lower log number than the
        // active one, and every one frozen later a higher or equal one.
        // Waiting for those below it only: waiting for no frozen memtable
        // at all never ended while writers kept freezing new ones (found by
        // review).
        let active = {
            let mut w = self.writer.lock();
            self.check_writable()?;
            self.make_room(&mut w, true)?;
            w.mem.wal_number()
        };
        self.wait_for_flushes_below(active)
    }

    /// The number of the log writes go to now and the bytes written to it
    /// (whole records), read together under the writer lock.
    pub(crate) fn live_log(&self) -> (u64, u64) {
        let w = self.writer.lock();
        (w.mem.wal_number(), w.wal.len())
    }

    /// Waits for the flushes of the memtables frozen by now (the active one
    /// is not frozen).
    pub(crate) fn wait_for_frozen_flushes(&self) -> Result<()> {
        let active = {
            let w = self.writer.lock();
            self.check_writable()?;
            w.mem.wal_number()
        };
        self.wait_for_flushes_below(active)
    }

    /// Waits for the flushes of the memtables frozen before the one with
    /// log number `active`.
    fn wait_for_flushes_below(&self, active: u64) -> Result<()> {
        let mut bg = self.bg.lock();
        loop {
            self.check_writable()?;
            if self
                .current()
                .imms
                .iter()
                .all(|imm| imm.wal_number() >= active)
            {
                return Ok(());
            }
            if bg.shutdown {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            self.done_cv.wait(&mut bg);
        }
    }

    fn flush_loop(self: Arc<Self>) {
        loop {
            let imm = {
                let mut bg = self.bg.lock();
                loop {
                    if bg.shutdown || self.is_poisoned() {
                        return;
                    }
                    if let Some(imm) = self.current().imms.last().cloned() {
                        break imm;
                    }
                    self.bg_cv.wait(&mut bg);
                }
            };
            match self.run_background("flush", || self.flush_memtable(&imm)) {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    self.set_poison(&e);
                    return;
                }
                None => return,
            }
        }
    }

    /// Writes frozen memtable `imm` to a level-0 table, records it in the
    /// manifest, installs it, then deletes the memtable's log.
    /// Logs `edit` to the manifest (durable when `Ok`) and applies it to
    /// the manifest state, first replacing a manifest grown past
    /// [`Options::manifest_roll_bytes`] by a fresh one (see
    /// [`roll_manifest`](Self::roll_manifest)). The caller holds `bg`, so
    /// edits, rolls and `verify`'s reads of the manifest never interleave.
    pub(crate) fn log_and_apply(&self, bg: &mut BgState, edit: &VersionEdit) -> Result<()> {
        if bg.manifest.should_roll(self.opts.manifest_roll_bytes) {
            self.roll_manifest(bg)?;
        }
        // The edit read the next file number when it was built; a roll just
        // now took a number after that (the new manifest's own).
        let mut edit = edit.clone();
        if let Some(next) = &mut edit.next_file_number {
            *next = (*next).max(self.next_file.load(Ordering::SeqCst));
        }
        bg.manifest.log_edit(&edit)?;
        let manifest_path = self.dir.join(manifest_file_name(bg.manifest.number()));
        bg.mstate.apply(&edit, &manifest_path)
    }

    /// Replaces the manifest by a new file holding one snapshot of the live
    /// state ([`Manifest::create`]: written and synced, then `CURRENT`
    /// moved to it), then deletes the old file. Both describe the same
    /// state, so a crash anywhere in between reopens it. An error poisons
    /// the engine through the caller's flush or compaction: once the
    /// rename of `CURRENT` has been tried, which manifest it names on disk
    /// is unknown, so neither may take another edit.
    fn roll_manifest(&self, bg: &mut BgState) -> Result<()> {
        let number = self.next_file.fetch_add(1, Ordering::SeqCst);
        let mut state = bg.mstate.clone();
        state.next_file_number = state
            .next_file_number
            .max(self.next_file.load(Ordering::SeqCst));
        let old = bg.manifest.path().to_path_buf();
        bg.manifest = Manifest::create(self.fs.as_ref(), &self.dir, number, &state)?;
        bg.mstate = state;
        self.engine.manifest_rolls.fetch_add(1, Ordering::Relaxed);
        // Obsolete now; if removal fails, the next open removes it.
        let _ = self.fs.remove_file(&old);
        Ok(())
    }

    fn flush_memtable(&self, imm: &Arc<Memtable>) -> Result<()> {
        let mut added = Vec::new();
        let mut max_seq = 0;
        if !imm.is_empty() {
            let number = self.next_file.fetch_add(1, Ordering::SeqCst);
            let policy = filter_policy_for_write(
                &self.opts,
                &self.current().version,
                &[],
                0,
                filter_entries_of(&self.opts, imm),
            );
            let (record, table) = write_level0_table(
                &self.dir,
                &self.opts,
                policy,
                &self.level_counters[0],
                self.block_cache.as_ref(),
                imm,
                number,
            )?;
            max_seq = record.largest_seq;
            self.engine
                .flush_bytes_written
                .fetch_add(record.file_size, Ordering::Relaxed);
            let path = self.dir.join(table_file_name(number));
            match TableHandle::new(
                record,
                Arc::new(table),
                Arc::clone(&self.fs),
                &self.owner,
                path.clone(),
            ) {
                Ok(handle) => added.push(handle),
                Err(e) => {
                    let _ = self.fs.remove_file(&path); // named by no manifest
                    return Err(e);
                }
            }
        }
        if !added.is_empty() {
            // The table's directory entry must be durable before the
            // manifest edit that names it (and lets its log go).
            if let Err(e) = self.fs.sync_dir(&self.dir) {
                for t in &added {
                    t.mark_obsolete(); // named by no manifest: removed on drop
                }
                return Err(Error::io(&self.dir, e));
            }
        }
        {
            let mut bg = self.bg.lock();
            let cur = self.current();
            // Logs older than the oldest memtable still unflushed are obsolete.
            let log_number = cur
                .imms
                .iter()
                .rev()
                .find(|m| !Arc::ptr_eq(m, imm))
                .map(|m| m.wal_number())
                .unwrap_or_else(|| cur.mem.wal_number());
            let edit = VersionEdit {
                added: added.iter().map(|h| h.record.clone()).collect(),
                removed: Vec::new(),
                next_file_number: Some(self.next_file.load(Ordering::SeqCst)),
                last_sequence: Some(bg.mstate.last_sequence.max(max_seq)),
                log_number: Some(log_number),
            };
            self.log_and_apply(&mut bg, &edit)?;
            self.update_sv(|sv| SuperVersion {
                mem: Arc::clone(&sv.mem),
                imms: sv
                    .imms
                    .iter()
                    .filter(|m| !Arc::ptr_eq(m, imm))
                    .cloned()
                    .collect(),
                version: Arc::new(sv.version.apply(&[], added)),
            });
        }
        self.engine.flushes.fetch_add(1, Ordering::Relaxed);
        let log = self.dir.join(log_file_name(imm.wal_number()));
        // Obsolete now; if removal fails, the next open removes it.
        let _ = self.fs.remove_file(&log);
        let _bg = self.bg.lock();
        self.bg_cv.notify_all();
        self.done_cv.notify_all();
        Ok(())
    }

    fn stats(&self) -> Stats {
        // The database's own set moves `gets` only; tables move their
        // levels' sets, added below.
        let mut stats = Stats {
            gets: self.counters.gets.load(Ordering::Relaxed),
            ..Stats::default()
        };
        let sv = self.current();
        let mut all = Version::union_sketch(sv.version.levels.iter().flatten());
        // Tables without a sketch (built outside the engine, or by an
        // engine older than the sketches) add their exact distinct-key
        // counts: shared keys count twice (`Stats::tables_without_key_sketch`).
        let unsketched = |tables: &[Arc<TableHandle>]| -> u64 {
            tables
                .iter()
                .filter(|t| t.key_sketch.is_none())
                .fold(0u64, |sum, t| {
                    sum.saturating_add(t.table.meta().distinct_keys)
                })
        };
        for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
            let mut sketch = HyperLogLog::new(KEY_SKETCH_PRECISION);
            let _ = mem.for_each(|key, _, _, _| {
                sketch.insert_hash(key_hash(key));
                Ok(())
            });
            let _ = all.merge(&sketch);
        }
        stats.distinct_keys = all.estimate();
        for (i, tables) in sv.version.levels.iter().enumerate() {
            let unsketched = unsketched(tables);
            stats.distinct_keys = stats.distinct_keys.saturating_add(unsketched);
            let mut level = LevelStats {
                distinct_keys: Version::union_sketch(tables)
                    .estimate()
                    .saturating_add(unsketched),
                ..LevelStats::default()
            };
            // Each level's counters are read once, and the totals are summed
            // from what was read, so the levels add up to the totals even
            // while reads run.
            let counters = counters_of(&self.level_counters, i);
            counters.snapshot_into_level(&mut level);
            if self.block_cache.is_some() {
                // Every block read with a cache is a hit or a miss, counted
                // just after the read: derived from them, the identity
                // holds in every snapshot and across a reset while reads
                // are in flight (as `filter_checks` is derived).
                level.data_block_reads = level
                    .block_cache_hits
                    .saturating_add(level.block_cache_misses);
            }
            ReadCounters::add_level_into(&level, &mut stats);
            for t in tables {
                let meta = t.table.meta();
                // Saturating: the counts come from the tables' properties.
                level.tables += 1;
                level.bytes = level.bytes.saturating_add(t.record.file_size);
                level.filter_bytes = level.filter_bytes.saturating_add(meta.filter_bytes);
                level.entries = level.entries.saturating_add(meta.entries);
                if t.table.filter().unfiltered() == Some(Unfiltered::Undecodable) {
                    level.undecodable_filter_tables += 1;
                }
                if t.key_sketch.is_none() {
                    level.tables_without_key_sketch += 1;
                }
            }
            stats.undecodable_filter_tables += level.undecodable_filter_tables;
            stats.tables_without_key_sketch += level.tables_without_key_sketch;
            stats.levels.push(level);
        }
        if let Some(cache) = &self.block_cache {
            stats.block_cache_bytes = cache.usage();
            stats.block_cache_capacity = cache.capacity();
            stats.block_cache_blocks = cache.len() as u64;
        }
        let e = &self.engine;
        stats.flushes = e.flushes.load(Ordering::Relaxed);
        stats.flush_bytes_written = e.flush_bytes_written.load(Ordering::Relaxed);
        stats.compactions = e.compactions.load(Ordering::Relaxed);
        stats.compaction_bytes_read = e.compaction_bytes_read.load(Ordering::Relaxed);
        stats.compaction_bytes_written = e.compaction_bytes_written.load(Ordering::Relaxed);
        stats.user_bytes_written = e.user_bytes_written.load(Ordering::Relaxed);
        stats.batches_written = e.batches_written.load(Ordering::Relaxed);
        stats.log_appends = e.log_appends.load(Ordering::Relaxed);
        stats.manifest_rolls = e.manifest_rolls.load(Ordering::Relaxed);
        stats.manifest_bytes = self.bg.lock().manifest.file_size();
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::SequenceChain;

    /// Regression: `read_view` loaded the sequence, then the super version.
    /// A write of the same key published and flushed between the two
    /// (the flush keeps only the key's newest version) left a view that
    /// answered with the key's older, flushed-before value. Found by
    /// review; the interleaving is injected here.
    #[test]
    fn read_view_is_exact_when_a_flush_lands_between_its_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = Options {
            background_compaction: false,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).expect("open");
        db.put(b"k", b"old").expect("put");
        db.flush().expect("flush");
        db.put(b"k", b"mid").expect("put");
        let mut injected = false;
        let (sv, sequence) = db.inner.read_view_with(|| {
            if !injected {
                injected = true;
                db.put(b"k", b"new").expect("put");
                db.flush().expect("flush");
            }
        });
        assert!(injected);
        let got = db.inner.get_in(&sv, sequence, b"k").expect("get");
        // Each put is one sequence number: "mid" is 2, "new" is 3.
        let expected: &[u8] = if sequence >= 3 { b"new" } else { b"mid" };
        assert_eq!(got.as_deref(), Some(expected), "sequence {sequence}");
        assert_eq!(sequence, 3);
        // The same through the public API.
        let snapshot = db.snapshot().expect("snapshot");
        assert_eq!(
            snapshot.get(b"k").expect("get").as_deref(),
            Some(&b"new"[..])
        );
    }

    /// Regression: `set_poison` notified waiters without taking `bg`, so a
    /// waiter that had checked the poison flag under `bg` but not yet
    /// started waiting missed the wake-up (`flush` then waited forever once
    /// the failed background thread had exited). Here the waiter holds
    /// `bg` while the poisoning thread runs, then waits: with the fix the
    /// notification waits for the lock and reaches it.
    #[test]
    fn poisoning_wakes_a_waiter_between_its_check_and_its_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let inner = Arc::clone(&db.inner);
        let mut bg = inner.bg.lock();
        assert!(inner.check_writable().is_ok());
        let poisoner = {
            let inner = Arc::clone(&inner);
            std::thread::spawn(move || inner.set_poison(&Error::invalid("injected failure")))
        };
        // Let the poisoning thread run into the lock (or, before the fix,
        // notify nobody).
        std::thread::sleep(std::time::Duration::from_millis(100));
        let waited = inner
            .done_cv
            .wait_for(&mut bg, std::time::Duration::from_secs(10));
        assert!(!waited.timed_out(), "the poisoning's wake-up was lost");
        drop(bg);
        poisoner.join().expect("poisoner");
        assert!(matches!(inner.check_writable(), Err(Error::Poisoned(_))));
    }

    /// The real filesystem, except that the creation of the `n`-th table
    /// file (counting from 1) waits until gate `n` is opened.
    #[derive(Debug, Default)]
    struct GatedTables {
        created: Mutex<usize>,
        open_gates: Mutex<Vec<usize>>,
        changed: Condvar,
    }

    impl GatedTables {
        fn open_gate(&self, n: usize) {
            self.open_gates.lock().push(n);
            self.changed.notify_all();
        }
    }

    impl FileSystem for GatedTables {
        fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
            crate::fs::RealFs.create_dir_all(path)
        }
        fn create(&self, path: &Path) -> std::io::Result<Box<dyn crate::fs::WritableFile>> {
            if path.extension().is_some_and(|e| e == "sst") {
                let n = {
                    let mut created = self.created.lock();
                    *created += 1;
                    *created
                };
                let mut gates = self.open_gates.lock();
                while !gates.contains(&n) {
                    self.changed.wait(&mut gates);
                }
            }
            crate::fs::RealFs.create(path)
        }
        fn open_append(&self, path: &Path) -> std::io::Result<Box<dyn crate::fs::WritableFile>> {
            crate::fs::RealFs.open_append(path)
        }
        fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
            crate::fs::RealFs.read(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            crate::fs::RealFs.rename(from, to)
        }
        fn remove_file(&self, path: &Path) -> std::io::Result<()> {
            crate::fs::RealFs.remove_file(path)
        }
        fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
            crate::fs::RealFs.sync_dir(path)
        }
        fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
            crate::fs::RealFs.list_dir(path)
        }
        fn truncate(&self, path: &Path, len: u64) -> std::io::Result<()> {
            crate::fs::RealFs.truncate(path, len)
        }
    }

    /// Opens every gate of a [`GatedTables`] when dropped.
    struct OpenGatesOnDrop(Arc<GatedTables>);

    impl Drop for OpenGatesOnDrop {
        fn drop(&mut self) {
            for n in 1..1024 {
                self.0.open_gate(n);
            }
        }
    }

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let start = std::time::Instant::now();
        while !done() {
            assert!(
                start.elapsed().as_secs() < 20,
                "timed out waiting for {what}"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Regression: `flush` waited until no memtable at all was frozen, so
    /// while writers kept freezing new ones it could wait indefinitely. It
    /// now returns once the memtables frozen up to its call are tables.
    /// Here the memtable frozen after the call cannot be flushed (its
    /// table's creation is held back), and `flush` must still return.
    #[test]
    fn flush_does_not_wait_for_memtables_frozen_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = Arc::new(GatedTables::default());
        let opts = Options {
            background_compaction: false,
            memtable_bytes: 4 << 10,
            fs: fs.clone(),
            ..Options::default()
        };
        let db = Arc::new(Db::open(dir.path(), opts).expect("open"));
        db.put(b"before", b"the flush").expect("put");
        // The flush freezes memtable 1; its table (the first) waits.
        let (sent, returned) = std::sync::mpsc::channel();
        let flusher = {
            let db = Arc::clone(&db);
            std::thread::spawn(move || sent.send(db.flush()).expect("send"))
        };
        wait_until("the flush to freeze the memtable", || {
            db.inner.current().imms.len() == 1
        });
        // Writes fill and freeze memtable 2.
        let value = vec![7u8; 1024];
        let mut i = 0u32;
        while db.inner.current().imms.len() < 2 {
            db.put(i.to_be_bytes(), &value).expect("put");
            i += 1;
            assert!(i < 1000, "memtable 2 never froze");
        }
        // Table 1 may be written now; table 2 (memtable 2's) may not.
        fs.open_gate(1);
        let result = returned
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("flush returned while a later memtable waits");
        result.expect("flush");
        assert_eq!(db.inner.current().imms.len(), 1);
        assert_eq!(
            db.get(b"before").expect("get").as_deref(),
            Some(&b"the flush"[..])
        );
        fs.open_gate(2);
        flusher.join().expect("flusher");
        for n in 3..64 {
            fs.open_gate(n);
        }
    }

    /// The `.log` files of `dir`, oldest first.
    fn log_files(dir: &Path) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        logs
    }

    /// Regression (found by review, fifteenth session): three unflushed
    /// logs, the middle one's last write (deleting `k`) and its seal
    /// damaged. A torn-tail scan cannot tell that from a crash, so open
    /// dropped the delete and went on to the third log: `k` came back
    /// while a later write survived. The broken sequence chain is now
    /// reported, at open and by `verify`.
    #[test]
    fn a_damaged_end_of_an_earlier_log_is_corruption_not_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let copy = tempfile::tempdir().expect("tempdir");
        // No table is written while the logs are copied: every memtable
        // stays unflushed and every log stays.
        let fs = Arc::new(GatedTables::default());
        let opts = Options {
            memtable_bytes: 1024,
            max_immutable_memtables: 4,
            background_compaction: false,
            sync_writes: true,
            fs: fs.clone(),
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).expect("open");
        // Dropped before `db`, also when an assertion fails: the flush that
        // closing waits for can then write its tables.
        let _gates = OpenGatesOnDrop(Arc::clone(&fs));
        let big = vec![b'x'; 1100];
        db.put(b"k", &big).expect("put k"); // log A
        let mut batch = WriteBatch::new();
        batch.put(b"filler", &big).delete(b"k");
        db.write(&batch).expect("delete k"); // log B
        db.put(b"later", b"1").expect("put later"); // log C
        assert_eq!(log_files(dir.path()).len(), 3);
        for entry in std::fs::read_dir(dir.path()).expect("list") {
            let entry = entry.expect("entry");
            if entry.file_name() != "LOCK" {
                std::fs::copy(entry.path(), copy.path().join(entry.file_name())).expect("copy");
            }
        }
        // The copy is a healthy database: it opens, and verify is clean.
        {
            let healthy = tempfile::tempdir().expect("tempdir");
            for entry in std::fs::read_dir(copy.path()).expect("list") {
                let entry = entry.expect("entry");
                std::fs::copy(entry.path(), healthy.path().join(entry.file_name())).expect("copy");
            }
            let db = Db::open(healthy.path(), Options::default()).expect("healthy open");
            assert_eq!(db.get(b"k").expect("get"), None);
            assert_eq!(db.get(b"later").expect("get").as_deref(), Some(&b"1"[..]));
            let report = db.verify().expect("verify");
            assert!(report.problems.is_empty(), "{:?}", report.problems);
        }
        // Zero the middle log's last write and its seal.
        let damage = |middle: &Path| {
            let mut data = std::fs::read(middle).expect("read");
            let scan = crate::wal::scan_log(&data, middle).expect("scan");
            assert_eq!(scan.records.len(), 2, "the batch and the seal");
            let from = scan.records[0].offset as usize;
            data[from..].iter_mut().for_each(|b| *b = 0);
            std::fs::write(middle, &data).expect("write");
        };
        // `verify` on the live database sees it.
        damage(&log_files(dir.path())[1]);
        let report = db.verify().expect("verify");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.reason.contains("were lost")),
            "{:?}",
            report.problems
        );
        drop(_gates);
        drop(db);

        damage(&log_files(copy.path())[1]);
        match Db::open(copy.path(), Options::default()) {
            Err(Error::Corruption { file, .. }) => {
                assert!(file.ends_with(log_files(copy.path())[2].file_name().unwrap()));
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(db) => panic!(
                "opened: k = {:?} (deleted), later = {:?}",
                db.get(b"k").expect("get").map(|v| v.len()),
                db.get(b"later").expect("get")
            ),
        }
    }

    /// The chain itself: gaps and overlaps are refused, seals carry the
    /// next number (the last one after the last number), and a restart
    /// forgets the chain.
    #[test]
    fn sequence_chain_accepts_only_consecutive_records() {
        let mut chain = SequenceChain::default();
        assert!(chain.take(10, 3).is_ok()); // 10..=12
        assert!(chain.take(13, 0).is_ok()); // seal
        assert!(chain.take(13, 1).is_ok());
        let gap = chain.take(16, 1).unwrap_err();
        assert!(gap.contains("14..16 were lost"), "{gap}");
        assert!(chain.take(17, 1).is_ok(), "restarted from the gap");
        assert!(chain.take(17, 1).is_err(), "overlap");
        chain.restart();
        assert!(chain.take(5, 2).is_ok());
        assert!(
            chain.take(8, 0).is_err(),
            "a seal must carry the next number"
        );
        let mut chain = SequenceChain::default();
        assert!(chain.take(MAX_SEQUENCE - 1, 2).is_ok());
        assert!(
            chain.take(MAX_SEQUENCE, 0).is_ok(),
            "seal after the last number"
        );
        assert!(chain.take(MAX_SEQUENCE, 1).is_err());
    }

    /// Writes between every pair of loads: after `READ_VIEW_TRIES` the view
    /// is taken under the writer lock, still exact.
    #[test]
    fn read_view_under_constant_writes_falls_back_to_the_writer_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = Options {
            background_compaction: false,
            memtable_bytes: 4 << 10,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).expect("open");
        let mut writes = 0u64;
        let (sv, sequence) = db.inner.read_view_with(|| {
            writes += 1;
            db.put(b"k", writes.to_le_bytes()).expect("put");
            db.flush().expect("flush");
        });
        assert_eq!(writes, READ_VIEW_TRIES as u64);
        assert_eq!(sequence, writes);
        let got = db.inner.get_in(&sv, sequence, b"k").expect("get");
        assert_eq!(got, Some(writes.to_le_bytes().to_vec()));
    }
}
