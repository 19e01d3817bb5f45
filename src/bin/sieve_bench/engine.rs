//! The engine abstraction the workloads run against, and its sievedb
//! implementation. Peer engines (RocksDB, fjall) live in `peers.rs` behind
//! the `peers` feature; every workload is written once against [`Engine`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sievedb::filter::{BloomPolicy, FilterPolicy, NoFilter, RibbonPolicy};
use sievedb::{Compression, Db, FilterBudget, Options, Stats, TableInfo};

use crate::error::{BenchError, BenchResult};

/// Which point-read filter an engine builds into its tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Blocked Bloom filter at `--bits-per-key`.
    Bloom,
    /// Ribbon filter at the false-positive rate of Bloom at `--bits-per-key`.
    Ribbon,
    /// No filter: every covering table's data block is read.
    None,
}

impl PolicyKind {
    /// The name used on the command line, in tables and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Bloom => "bloom",
            PolicyKind::Ribbon => "ribbon",
            PolicyKind::None => "none",
        }
    }
}

/// Read counters an engine reports about itself, and the log's two write
/// counters (sievedb only: the peers' statistics are not comparable
/// counter by counter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadIo {
    /// Point reads served.
    pub gets: u64,
    /// Filters asked.
    pub filter_checks: u64,
    /// Filters that answered "absent".
    pub filter_negatives: u64,
    /// Filters that answered "maybe" for a key the table did not hold.
    pub filter_false_positives: u64,
    /// Filters that answered "maybe" for a key the table held.
    pub filter_true_positives: u64,
    /// Data blocks read by point reads.
    pub get_data_block_reads: u64,
    /// Data blocks read by point reads and scans.
    pub data_block_reads: u64,
    /// Bytes of data blocks read.
    pub bytes_read: u64,
    /// Data block reads the block cache served.
    pub block_cache_hits: u64,
    /// Data block reads that missed the block cache and went to the file.
    pub block_cache_misses: u64,
    /// Filter checks per level, level 0 first (levels past the tree's are 0).
    pub filter_checks_per_level: [u64; MAX_LEVELS],
    /// Filter false positives per level.
    pub filter_false_positives_per_level: [u64; MAX_LEVELS],
    /// Write batches committed (each put is one): the log's side of a
    /// fill phase.
    pub batches_written: u64,
    /// Log records appended for them: fewer than `batches_written` when
    /// synced writers shared records and fsyncs (group commit), so their
    /// ratio is the mean group size.
    pub log_appends: u64,
}

/// Most levels sievedb's options allow (`Options::num_levels` is at most 16).
pub const MAX_LEVELS: usize = 16;

impl ReadIo {
    /// Counts accumulated between `before` and `self`.
    pub fn since(&self, before: &ReadIo) -> ReadIo {
        ReadIo {
            gets: self.gets.saturating_sub(before.gets),
            filter_checks: self.filter_checks.saturating_sub(before.filter_checks),
            filter_negatives: self
                .filter_negatives
                .saturating_sub(before.filter_negatives),
            filter_false_positives: self
                .filter_false_positives
                .saturating_sub(before.filter_false_positives),
            filter_true_positives: self
                .filter_true_positives
                .saturating_sub(before.filter_true_positives),
            get_data_block_reads: self
                .get_data_block_reads
                .saturating_sub(before.get_data_block_reads),
            data_block_reads: self
                .data_block_reads
                .saturating_sub(before.data_block_reads),
            bytes_read: self.bytes_read.saturating_sub(before.bytes_read),
            block_cache_hits: self
                .block_cache_hits
                .saturating_sub(before.block_cache_hits),
            block_cache_misses: self
                .block_cache_misses
                .saturating_sub(before.block_cache_misses),
            filter_checks_per_level: std::array::from_fn(|i| {
                self.filter_checks_per_level[i].saturating_sub(before.filter_checks_per_level[i])
            }),
            filter_false_positives_per_level: std::array::from_fn(|i| {
                self.filter_false_positives_per_level[i]
                    .saturating_sub(before.filter_false_positives_per_level[i])
            }),
            batches_written: self.batches_written.saturating_sub(before.batches_written),
            log_appends: self.log_appends.saturating_sub(before.log_appends),
        }
    }

    fn from_stats(s: &Stats) -> ReadIo {
        ReadIo {
            gets: s.gets,
            filter_checks: s.filter_checks,
            filter_negatives: s.filter_negatives,
            filter_false_positives: s.filter_false_positives,
            filter_true_positives: s.filter_true_positives,
            get_data_block_reads: s.get_data_block_reads,
            data_block_reads: s.data_block_reads,
            bytes_read: s.bytes_read,
            block_cache_hits: s.block_cache_hits,
            block_cache_misses: s.block_cache_misses,
            filter_checks_per_level: std::array::from_fn(|i| {
                s.levels.get(i).map_or(0, |l| l.filter_checks)
            }),
            filter_false_positives_per_level: std::array::from_fn(|i| {
                s.levels.get(i).map_or(0, |l| l.filter_false_positives)
            }),
            batches_written: s.batches_written,
            log_appends: s.log_appends,
        }
    }
}

/// The shape of the engine's tables after loading, for the report and the
/// "expected block reads" column.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    /// Every live table with its key range (sievedb only).
    pub tables: Vec<TableInfo>,
    /// Bytes of all filters.
    pub filter_bytes: u64,
    /// Table count per level, level 0 first.
    pub tables_per_level: Vec<u64>,
    /// Bytes of all table files (sievedb only; 0 for peers).
    pub table_bytes: u64,
}

/// What a workload needs from a key-value engine. Implementations are shared
/// by reference across reader threads, hence `Sync`.
pub trait Engine: Sync {
    /// `"sievedb"`, `"rocksdb"` or `"fjall"`.
    fn name(&self) -> &'static str;
    /// Inserts or overwrites `key`.
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()>;
    /// The value of `key`, if present.
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>>;
    /// Writes the memtable to tables and compacts the tree: until no level
    /// is over its target and level 0 is empty (`full == false`; engines
    /// without that notion compact fully), or everything into one level
    /// (`full == true`).
    fn flush_compact(&self, full: bool) -> BenchResult<()>;
    /// Reads up to `limit` entries from the first key `>= start`; calls
    /// `visit` on each key and returns how many were read.
    fn scan(&self, start: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> BenchResult<usize>;
    /// Reads up to `limit` entries backward from the last key `<= end`;
    /// calls `visit` with each key in turn (largest first); returns how
    /// many.
    fn scan_rev(
        &self,
        end: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8]),
    ) -> BenchResult<usize>;
    /// Waits until the engine's background flushes and compactions have
    /// settled, so that reads that follow see one tree throughout.
    /// sievedb: [`Db::wait_for_compactions`]. The peers' adapters keep this
    /// default, which returns at once (no waiting call is wired up for
    /// them): their rows have no read counters or expected columns, and
    /// their shape is the one at the phase's start, while their own
    /// background work may still run.
    fn settle(&self) -> BenchResult<()> {
        Ok(())
    }
    /// The engine's own read counters, if it keeps comparable ones.
    fn read_io(&self) -> Option<ReadIo>;
    /// Table shape (filter bytes, tables); peers report what they can.
    fn shape(&self) -> Shape;
    /// Closes the engine, runs `between` (e.g. page-cache eviction) with the
    /// engine's directory while nothing holds its files open or mapped, then
    /// reopens it. Drops every in-process cache.
    fn reopen_with(&mut self, between: &mut dyn FnMut(&Path) -> BenchResult<()>)
        -> BenchResult<()>;
}

/// The scans of every adapter: calls `visit` with the keys of up to `limit`
/// entries of `entries` in turn, turning an engine's error into a
/// [`BenchError`] with `error`; returns how many.
pub(crate) fn visit_keys<K: AsRef<[u8]>, V, E>(
    entries: impl Iterator<Item = Result<(K, V), E>>,
    limit: usize,
    visit: &mut dyn FnMut(&[u8]),
    error: impl Fn(E) -> BenchError,
) -> BenchResult<usize> {
    let mut n = 0;
    for entry in entries.take(limit) {
        let (key, _value) = entry.map_err(&error)?;
        visit(key.as_ref());
        n += 1;
    }
    Ok(n)
}

/// Builds the sievedb filter policy for `kind`.
pub fn sieve_policy(kind: PolicyKind, bits_per_key: f64) -> BenchResult<Arc<dyn FilterPolicy>> {
    Ok(match kind {
        PolicyKind::Bloom => Arc::new(BloomPolicy::try_new(bits_per_key)?),
        PolicyKind::Ribbon => Arc::new(RibbonPolicy::try_new(bits_per_key)?),
        PolicyKind::None => Arc::new(NoFilter),
    })
}

/// The false-positive rate a policy's filters are built for (1 for no
/// filter: every check reads a block).
pub fn theoretical_fp_rate(kind: PolicyKind, bits_per_key: f64) -> BenchResult<f64> {
    Ok(match kind {
        PolicyKind::Bloom => BloomPolicy::try_new(bits_per_key)?.expected_fp_rate(),
        PolicyKind::Ribbon => RibbonPolicy::try_new(bits_per_key)?.fp_rate(),
        PolicyKind::None => 1.0,
    })
}

/// sievedb settings beyond the filter policy: the filter budget and,
/// optionally, the memtable and level-1 sizes (the engine's defaults
/// otherwise), which set how many levels a load fills.
#[derive(Debug, Clone, Copy)]
pub struct SieveSettings {
    /// `Options::filter_budget`.
    pub filter_budget: FilterBudget,
    /// `Options::last_level_filters`.
    pub last_level_filters: bool,
    /// `Options::background_compaction`.
    pub background_compaction: bool,
    /// `Options::sync_writes`.
    pub sync_writes: bool,
    /// `Options::compression`.
    pub compression: Compression,
    /// `Options::memtable_bytes`, if not the default.
    pub memtable_bytes: Option<usize>,
    /// `Options::level1_bytes`, if not the default.
    pub level1_bytes: Option<u64>,
    /// `Options::block_cache_bytes`, if not the default.
    pub block_cache_bytes: Option<usize>,
}

/// sievedb with default options but the chosen filter policy and settings.
pub struct SieveEngine {
    dir: PathBuf,
    opts: Options,
    db: Option<Db>,
    /// Puts so far, to run the due flushes and compactions every
    /// [`SETTLE_EVERY_PUTS`] when background compaction is off.
    puts: AtomicU64,
}

/// With background compaction off, every this many puts the loading thread
/// waits for the frozen memtables' flushes and runs the compactions due
/// (`Db::wait_for_compactions`, a few microseconds when nothing is due).
/// The points depend only on the puts, so a single-threaded load builds
/// the same tree under every policy, grown as background compaction would
/// grow it (levels that overlap), not one merge of every table at the end.
const SETTLE_EVERY_PUTS: u64 = 1024;

impl SieveEngine {
    /// Opens (creating) a database in `dir`.
    pub fn open(
        dir: &Path,
        kind: PolicyKind,
        bits_per_key: f64,
        settings: SieveSettings,
    ) -> BenchResult<SieveEngine> {
        let defaults = Options::default();
        let opts = Options {
            filter_policy: sieve_policy(kind, bits_per_key)?,
            filter_budget: settings.filter_budget,
            last_level_filters: settings.last_level_filters,
            background_compaction: settings.background_compaction,
            sync_writes: settings.sync_writes,
            compression: settings.compression,
            memtable_bytes: settings.memtable_bytes.unwrap_or(defaults.memtable_bytes),
            level1_bytes: settings.level1_bytes.unwrap_or(defaults.level1_bytes),
            block_cache_bytes: settings
                .block_cache_bytes
                .unwrap_or(defaults.block_cache_bytes),
            ..defaults
        };
        let db = Db::open(dir, opts.clone())?;
        Ok(SieveEngine {
            dir: dir.to_path_buf(),
            opts,
            db: Some(db),
            puts: AtomicU64::new(0),
        })
    }

    fn db(&self) -> BenchResult<&Db> {
        self.db
            .as_ref()
            .ok_or_else(|| BenchError::Invalid("sievedb used after a failed reopen".into()))
    }
}

impl Engine for SieveEngine {
    fn name(&self) -> &'static str {
        "sievedb"
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        let db = self.db()?;
        db.put(key, value)?;
        if !self.opts.background_compaction
            && (self.puts.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(SETTLE_EVERY_PUTS)
        {
            db.wait_for_compactions()?;
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.db()?.get(key)?)
    }

    fn settle(&self) -> BenchResult<()> {
        Ok(self.db()?.wait_for_compactions()?)
    }

    fn flush_compact(&self, full: bool) -> BenchResult<()> {
        let db = self.db()?;
        db.flush()?;
        if full {
            db.compact_all()?;
        } else {
            db.compact()?;
        }
        Ok(())
    }

    fn scan(&self, start: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> BenchResult<usize> {
        let entries = self.db()?.scan(start..)?;
        visit_keys(entries, limit, visit, BenchError::from)
    }

    fn scan_rev(
        &self,
        end: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8]),
    ) -> BenchResult<usize> {
        let entries = self.db()?.scan(..=end)?.rev();
        visit_keys(entries, limit, visit, BenchError::from)
    }

    fn read_io(&self) -> Option<ReadIo> {
        self.db.as_ref().map(|db| ReadIo::from_stats(&db.stats()))
    }

    fn shape(&self) -> Shape {
        let Some(db) = self.db.as_ref() else {
            return Shape::default();
        };
        let stats = db.stats();
        let tables = db.tables();
        Shape {
            table_bytes: tables.iter().map(|t| t.file_size).sum(),
            tables,
            filter_bytes: stats.filter_bytes(),
            tables_per_level: stats.levels.iter().map(|l| l.tables).collect(),
        }
    }

    fn reopen_with(
        &mut self,
        between: &mut dyn FnMut(&Path) -> BenchResult<()>,
    ) -> BenchResult<()> {
        if let Some(db) = self.db.take() {
            db.close()?;
        }
        between(&self.dir)?;
        self.db = Some(Db::open(&self.dir, self.opts.clone())?);
        Ok(())
    }
}
