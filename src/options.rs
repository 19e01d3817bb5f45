//! Options that shape a database, with their defaults and validation.

use std::sync::Arc;

use crate::batch::ONE_PUT_RECORD_OVERHEAD;
use crate::error::{Error, Result};
use crate::filter::budget::FilterBudget;
use crate::filter::{key_hash, BloomPolicy, Filter, FilterPolicy, Unfiltered, BUILTIN_NAME_PREFIX};
use crate::fs::{FileSystem, RealFs};
use crate::recovery::WalRecovery;
use crate::sstable::Compression;
use crate::wal::MAX_RECORD_PAYLOAD;

/// How a compaction out of level 1 or deeper chooses its input table.
///
/// The default is [`Rotation`](CompactionPick::Rotation): on the skewed
/// overwrite workload of `examples/compaction_pick.rs` it wrote less than
/// `MostDropped` (about 4% less, median of six runs; `MostDropped` kept
/// about 4% less on disk; measurements in `docs/statistics.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompactionPick {
    /// Rotate through the key space: each compaction takes the table after
    /// the last one compacted out of the level (LevelDB's policy).
    #[default]
    Rotation,
    /// Take the table whose merge with the overlapping tables below would
    /// drop the largest share of entries (entries minus the HyperLogLog
    /// union of their distinct keys, per byte written), when that share is
    /// worth it; otherwise rotate. Overwrite-heavy key ranges are compacted
    /// first.
    MostDropped,
}

/// Default [`Options::block_cache_bytes`].
pub const DEFAULT_BLOCK_CACHE_BYTES: usize = 0;

/// Largest accepted [`Options::block_cache_bytes`].
const MAX_BLOCK_CACHE_BYTES: u64 = 1 << 40;

/// Database options. Public fields with sensible defaults; [`Db::open`]
/// validates them and rejects nonsense with [`Error::InvalidArgument`].
///
/// [`Db::open`]: crate::Db::open
#[derive(Clone)]
pub struct Options {
    /// The filter policy new tables (flushes and compaction outputs) are
    /// built with. Tables built under another *built-in* policy stay
    /// readable and filtered: their filter bytes describe themselves. A
    /// table built by a custom policy is filtered only while a policy of
    /// the same [`name`](FilterPolicy::name) is configured; under any other
    /// (a checkpoint opened with `Options::default()`, say) it reads
    /// correctly but unfiltered, a data block per get that reaches it,
    /// until compaction rewrites it ([`Stats::undecodable_filter_tables`]
    /// counts such tables). Default: blocked Bloom, 10 bits/key.
    ///
    /// [`Stats::undecodable_filter_tables`]: crate::Stats::undecodable_filter_tables
    pub filter_policy: Arc<dyn FilterPolicy>,
    /// Memtable size, in bytes of keys, values and overhead, at which it is
    /// frozen and flushed to a level-0 table. Default 4 MiB.
    pub memtable_bytes: usize,
    /// Immutable memtables allowed to wait for a flush before writers wait.
    /// Default 2.
    pub max_immutable_memtables: usize,
    /// Target size of a table's data blocks. Default 4 KiB.
    pub block_bytes: usize,
    /// Entries between restart points inside a data block. Default 16.
    pub restart_interval: usize,
    /// When true, every write's log record is fsynced before the write
    /// returns; writers that wait for the same fsync share it (group
    /// commit: their batches are appended together and synced once, see
    /// [`Stats::log_appends`](crate::stats::Stats::log_appends)). When false (the default), a write is in the OS page cache
    /// when it returns: it survives a process crash but not a power loss
    /// until the log is synced, which happens at the next memtable switch
    /// (when the memtable fills, or at [`Db::flush`](crate::Db::flush)) and
    /// at [`Db::close`](crate::Db::close).
    pub sync_writes: bool,
    /// What [`Db::open`](crate::Db::open) does with a write-ahead log that
    /// is damaged other than at its torn tail: fail with
    /// [`Error::Corruption`] ([`WalRecovery::Strict`]), or open the
    /// database as it was just before the damage and set the rest of the
    /// logs aside ([`WalRecovery::PointInTime`]). The default,
    /// [`WalRecovery::Auto`], is point-in-time for exactly what a power cut
    /// can leave when `sync_writes` is false (a hole in the last log with data, whose
    /// pages the filesystem may write back out of order) and strict for
    /// everything else.
    pub wal_recovery: WalRecovery,
    /// Largest accepted key, in bytes. Default 64 KiB. Keys must be at least
    /// 1 byte. The limit applies to writes and to point reads (`get` and
    /// `multi_get`, on the database or a snapshot), not to scans: after
    /// reopening with a smaller limit, keys stored under a larger one still
    /// appear in scans, but a `get` of such a key is
    /// [`Error::InvalidArgument`], and so is a `delete` of it (a delete is
    /// a write): such keys stay until the database is reopened with a
    /// limit that admits them again.
    pub max_key_bytes: usize,
    /// Largest accepted value, in bytes. Default 64 MiB. A write batch is
    /// one log record of at most 1 GiB, so
    /// `max_key_bytes + max_value_bytes + 21` (a batch's header and one
    /// put's lengths) must not pass 2^30; a
    /// batch of several operations whose encoding passes 1 GiB is refused
    /// with [`Error::InvalidArgument`].
    pub max_value_bytes: usize,
    /// Number of levels, level 0 included. Default 7.
    pub num_levels: usize,
    /// Level-0 table count that triggers a compaction into level 1.
    /// Default 4.
    pub level0_compaction_trigger: usize,
    /// Level-0 table count at which writers wait for compaction: a write
    /// that must switch to a new memtable while level 0 holds at least
    /// this many tables waits until a compaction brings it below. Only with
    /// [`background_compaction`](Self::background_compaction) on (without
    /// it nothing would ever end the wait). Default 12.
    pub level0_stop_writes: usize,
    /// Target size of level 1 in bytes. Default 64 MiB.
    pub level1_bytes: u64,
    /// Each level below level 1 targets this many times the size of the one
    /// above. Default 10.
    pub level_size_multiplier: u64,
    /// Target size of a compaction output table. Default 8 MiB: small enough
    /// that a compaction from level n picks one table out of several and
    /// rewrites about `multiplier` tables below it (not whole levels), large
    /// enough that filters and indexes stay a small fraction of the files.
    pub table_bytes: u64,
    /// How compactions from level 1 and deeper pick their input table.
    /// Default [`CompactionPick::Rotation`].
    pub compaction_pick: CompactionPick,
    /// Run compactions on a background thread (default true). When false,
    /// compactions run only in the thread of a call that asks for them:
    /// [`Db::compact`](crate::Db::compact),
    /// [`Db::compact_all`](crate::Db::compact_all) or
    /// [`Db::wait_for_compactions`](crate::Db::wait_for_compactions).
    pub background_compaction: bool,
    /// Feed point reads to a heavy-hitter sketch so
    /// [`Db::hot_keys`](crate::Db::hot_keys) can report the hottest keys.
    /// Default true.
    pub track_hot_keys: bool,
    /// How the filters of new tables are sized: all by `filter_policy` as
    /// it is ([`FilterBudget::Uniform`], the default), or per sorted run
    /// around its bits per key ([`FilterBudget::Monkey`]: more bits for
    /// level-0 tables and small upper levels, fewer for the largest level,
    /// so a missing key meets fewer false positives for the same memory).
    pub filter_budget: FilterBudget,
    /// When `Some(n)`, every new table's filter also holds the first `n`
    /// bytes of each of its keys (keys shorter than `n` add no prefix), so
    /// [`Db::scan_prefix`](crate::Db::scan_prefix) with a prefix of at
    /// least `n` bytes skips, unread, the tables whose filter says no key
    /// starts with it. Pick `n` as the length of the prefixes you scan
    /// (e.g. a fixed-width user id). The filter holds keys plus distinct
    /// prefixes, and is sized for both. The length is recorded per table:
    /// tables written without prefixes are never skipped by their filter,
    /// and a table written with another length `m` (before the option
    /// changed) is asked about the scanned prefix's first `m` bytes when
    /// the prefix has at least `m`, and otherwise not skipped by its
    /// filter. Either way the answers are correct. Must be in
    /// `1..=max_key_bytes`. Default: `None`.
    pub prefix_filter_len: Option<usize>,
    /// Whether tables written to the deepest level that holds data get a
    /// filter. `false` (RocksDB's `optimize_filters_for_hits`) writes them
    /// with [`NoFilter`](crate::filter::NoFilter): that level usually holds
    /// about 90% of the keys, so this saves about 90% of filter memory, and
    /// a get of a key that exists loses nothing (its table's filter would
    /// have said "maybe"), but a get of a missing key reads a data block in
    /// that level (one per missing get instead of about one in a hundred).
    /// For workloads whose gets almost always hit. Level-0 tables always
    /// get a filter, and a table keeps what it was written with until
    /// compaction rewrites it (a level that later stops being the deepest
    /// keeps its tables without filters until then). Default: `true`.
    pub last_level_filters: bool,
    /// Bytes of memory for the block cache: copies of data blocks that
    /// point reads read from table files, made after their checksum
    /// matched, shared by all the database's tables. A read whose block is
    /// cached skips the file's pages and the checksum; a miss reads and
    /// verifies the block as without a cache, and a block that misses twice
    /// within a short window is then copied in. Scans use cached blocks but
    /// do not add the blocks they read; compactions neither use nor fill
    /// the cache. At most 1 TiB.
    ///
    /// Default 0 (no cache): tables are memory-mapped, so the OS page
    /// cache already keeps recently read blocks in memory, and the copy
    /// only saves the checksum. Measured (`docs/benchmarks.md`, "Block
    /// cache"), that pays when the blocks read are few enough to stay in
    /// the CPU's caches (about 1.1x faster gets on a 2 MiB hot set) and
    /// costs when reads spread over much more data than the cache holds.
    /// Counters: [`Stats::block_cache_hits`](crate::Stats::block_cache_hits),
    /// [`Stats::block_cache_misses`](crate::Stats::block_cache_misses),
    /// [`Stats::block_cache_bytes`](crate::Stats::block_cache_bytes).
    pub block_cache_bytes: usize,
    /// How new tables (flushes and compaction outputs) store their data
    /// blocks. [`Compression::Lz4`] compresses each data block with LZ4 and
    /// keeps the compressed form when it saves at least an eighth; index,
    /// filter and properties blocks stay uncompressed. Tables keep what
    /// they were written with until compaction rewrites them, and every
    /// table is read correctly whatever this is set to now, so it can be
    /// turned on or off between opens. A compressed block is decompressed
    /// on every read unless the block cache holds it (the cache keeps the
    /// decompressed copy); `bytes_read` counts the stored (compressed)
    /// bytes. Default [`Compression::None`] (measurements in
    /// `docs/benchmarks.md`, "Compression").
    pub compression: Compression,
    /// Size in bytes past which the manifest (the log of table-set edits,
    /// one small record per flush and compaction) is replaced: before the
    /// next edit, a new manifest is written holding one snapshot of the
    /// live table set, `CURRENT` is pointed at it, and the old file is
    /// deleted. Without this the manifest of a database that stays open
    /// grows by every flush and compaction until the next open rewrites
    /// it, and that open replays every edit. A manifest is also never
    /// replaced before it is twice the size of the snapshot it started
    /// with, so a large table set does not rewrite its snapshot on every
    /// edit. At least 1024; default 4 MiB (RocksDB's
    /// `max_manifest_file_size` does the same at 1 GiB).
    pub manifest_roll_bytes: u64,
    /// The filesystem all writes go through (tests substitute one that
    /// simulates power loss and I/O errors). Default: the real one.
    pub fs: Arc<dyn FileSystem>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("filter_policy", &self.filter_policy.name())
            .field("filter_budget", &self.filter_budget)
            .field("prefix_filter_len", &self.prefix_filter_len)
            .field("last_level_filters", &self.last_level_filters)
            .field("memtable_bytes", &self.memtable_bytes)
            .field("max_immutable_memtables", &self.max_immutable_memtables)
            .field("block_bytes", &self.block_bytes)
            .field("restart_interval", &self.restart_interval)
            .field("sync_writes", &self.sync_writes)
            .field("wal_recovery", &self.wal_recovery)
            .field("max_key_bytes", &self.max_key_bytes)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("num_levels", &self.num_levels)
            .field("level0_compaction_trigger", &self.level0_compaction_trigger)
            .field("level0_stop_writes", &self.level0_stop_writes)
            .field("level1_bytes", &self.level1_bytes)
            .field("level_size_multiplier", &self.level_size_multiplier)
            .field("table_bytes", &self.table_bytes)
            .field("compaction_pick", &self.compaction_pick)
            .field("background_compaction", &self.background_compaction)
            .field("track_hot_keys", &self.track_hot_keys)
            .field("block_cache_bytes", &self.block_cache_bytes)
            .field("compression", &self.compression)
            .field("manifest_roll_bytes", &self.manifest_roll_bytes)
            .field("fs", &self.fs)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            filter_policy: Arc::new(BloomPolicy::new(10.0)),
            filter_budget: FilterBudget::Uniform,
            prefix_filter_len: None,
            last_level_filters: true,
            memtable_bytes: 4 << 20,
            max_immutable_memtables: 2,
            block_bytes: 4096,
            restart_interval: 16,
            sync_writes: false,
            wal_recovery: WalRecovery::Auto,
            max_key_bytes: 64 << 10,
            max_value_bytes: 64 << 20,
            num_levels: 7,
            level0_compaction_trigger: 4,
            level0_stop_writes: 12,
            level1_bytes: 64 << 20,
            level_size_multiplier: 10,
            table_bytes: 8 << 20,
            compaction_pick: CompactionPick::Rotation,
            background_compaction: true,
            track_hot_keys: true,
            block_cache_bytes: DEFAULT_BLOCK_CACHE_BYTES,
            compression: Compression::None,
            manifest_roll_bytes: 4 << 20,
            fs: Arc::new(RealFs),
        }
    }
}

impl Options {
    /// Checks every field; the first problem found is returned as
    /// [`Error::InvalidArgument`].
    pub fn validate(&self) -> Result<()> {
        fn check(ok: bool, what: &str) -> Result<()> {
            if ok {
                Ok(())
            } else {
                Err(Error::invalid(what.to_string()))
            }
        }
        check(
            self.memtable_bytes >= 1024,
            "memtable_bytes must be at least 1024",
        )?;
        check(
            self.max_immutable_memtables >= 1,
            "max_immutable_memtables must be at least 1",
        )?;
        check(
            (64..=(64 << 20)).contains(&self.block_bytes),
            "block_bytes must be in 64..=64 MiB",
        )?;
        check(
            (1..=1024).contains(&self.restart_interval),
            "restart_interval must be in 1..=1024",
        )?;
        check(
            (1..=(1 << 20)).contains(&self.max_key_bytes),
            "max_key_bytes must be in 1..=1 MiB",
        )?;
        // A put of the largest key and value must fit one log record.
        check(
            self.max_value_bytes
                <= MAX_RECORD_PAYLOAD - ONE_PUT_RECORD_OVERHEAD - self.max_key_bytes,
            "max_value_bytes must leave room in one log record (1 GiB) for the largest key \
             and 21 bytes of framing: max_key_bytes + max_value_bytes + 21 <= 2^30",
        )?;
        check(
            (2..=16).contains(&self.num_levels),
            "num_levels must be in 2..=16",
        )?;
        check(
            self.level0_compaction_trigger >= 1,
            "level0_compaction_trigger must be at least 1",
        )?;
        check(
            self.level0_stop_writes >= self.level0_compaction_trigger,
            "level0_stop_writes must be at least level0_compaction_trigger",
        )?;
        check(
            self.level1_bytes >= 1024,
            "level1_bytes must be at least 1024",
        )?;
        check(
            self.level_size_multiplier >= 2,
            "level_size_multiplier must be at least 2",
        )?;
        check(
            self.table_bytes >= 1024,
            "table_bytes must be at least 1024",
        )?;
        check(
            self.prefix_filter_len
                .is_none_or(|n| (1..=self.max_key_bytes).contains(&n)),
            "prefix_filter_len must be in 1..=max_key_bytes",
        )?;
        check(
            self.block_cache_bytes as u64 <= MAX_BLOCK_CACHE_BYTES,
            "block_cache_bytes must be at most 1 TiB",
        )?;
        check(
            self.manifest_roll_bytes >= 1024,
            "manifest_roll_bytes must be at least 1024",
        )?;
        check_reserved_policy_name(&self.filter_policy)?;
        Ok(())
    }

    /// Target size in bytes of `level` (>= 1).
    pub fn level_target_bytes(&self, level: usize) -> u64 {
        let mut target = self.level1_bytes;
        for _ in 1..level {
            target = target.saturating_mul(self.level_size_multiplier);
        }
        target
    }
}

/// A policy whose name starts with [`BUILTIN_NAME_PREFIX`] has its filters
/// read back as built-in filter bytes, whatever it wrote. A custom policy
/// under such a name (a wrapper that salts the hashes, say) would then be
/// queried the wrong way: false negatives, keys that exist reported
/// absent. Or its bytes would not decode at all, and every table would
/// carry a filter that costs memory and never saves a read. So such a
/// policy must build filters that decode as built-in ones and read back
/// without a false negative, checked on 256 key hashes.
fn check_reserved_policy_name(policy: &Arc<dyn FilterPolicy>) -> Result<()> {
    // The user's code too: the name is asked for first here, and again
    // when `open` describes the options and when tables are built, so a
    // `name` that panics is refused with the options rather than escaping
    // `open` (or, later, a background thread).
    let name = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy.name().to_string()))
        .map_err(|payload| {
            Error::invalid(format!(
                "the filter policy's name() panicked ({})",
                crate::db::panic_message(payload.as_ref())
            ))
        })?;
    let name = name.as_str();
    if !name.starts_with(BUILTIN_NAME_PREFIX) {
        return Ok(());
    }
    let hashes: Vec<u64> = (0..256u64).map(|i| key_hash(&i.to_le_bytes())).collect();
    // The user's code: a panic is an error of these options, as it is
    // when open builds a table (found by review: it escaped `Db::open`).
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| policy.build(&hashes)))
        .map_err(|payload| {
            Error::invalid(format!(
                "filter policy {name:?} panicked building a filter ({})",
                crate::db::panic_message(payload.as_ref())
            ))
        })?;
    let filter = Filter::for_policy(name, built, policy);
    let decodes = filter.unfiltered() != Some(Unfiltered::Undecodable);
    if decodes && hashes.iter().all(|&h| filter.may_contain(h)) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "filter policy {name:?} uses the reserved prefix {BUILTIN_NAME_PREFIX:?}, \
             but its filters do not read back as built-in ones: rename it"
        )))
    }
}
