//! Read I/O counters and the database's shape, as users see them.
//!
//! The engine counts what each point read cost: how many filters it asked,
//! how many said "absent" (a table skipped without I/O), how many said "maybe"
//! for a key the table did not hold (a false positive: a wasted data-block
//! read), and the data blocks and bytes it read. Counters are shared atomics
//! updated with relaxed ordering; a [`Stats`] value is a snapshot of them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters shared by the database and every table it opens.
#[derive(Debug, Default)]
pub struct ReadCounters {
    /// Point reads served.
    pub gets: AtomicU64,
    /// Filters asked (one per table consulted by a point read), counted
    /// when asked. [`Stats::filter_checks`] is not this count but the sum
    /// of the answers below and [`filter_checks_unanswered`], so that its
    /// identity holds in every snapshot and across a reset while reads are
    /// in flight (a read asked before a reset and answered after it left
    /// the identity false for good; found by review, thirty-first
    /// session). This raw count runs ahead of that sum by the checks in
    /// flight, and a [`reset`](Self::reset) while reads run can leave it
    /// above or below the sum for good: read the [`Stats`] snapshot
    /// ([`snapshot_into`](Self::snapshot_into)) rather than this field.
    ///
    /// [`filter_checks_unanswered`]: Self::filter_checks_unanswered
    pub filter_checks: AtomicU64,
    /// Filters that answered "absent": tables skipped without reading data.
    pub filter_negatives: AtomicU64,
    /// Filters that answered "maybe" for a key the table did not hold.
    pub filter_false_positives: AtomicU64,
    /// Filters that answered "maybe" for a key the table did hold.
    pub filter_true_positives: AtomicU64,
    /// Checks that answered "maybe" whose data block read then failed with
    /// an error (a damaged block): counted in none of the three answers.
    pub filter_checks_unanswered: AtomicU64,
    /// Data blocks read (by point reads and scans), whether the block cache
    /// served them or the file did.
    pub data_block_reads: AtomicU64,
    /// Of those, blocks the block cache served (no file read, no checksum).
    pub block_cache_hits: AtomicU64,
    /// Of those, blocks looked up in the block cache and read from the file
    /// instead (0 without a cache: then every read goes to the file).
    pub block_cache_misses: AtomicU64,
    /// Bytes of data blocks read, as stored in the file (a compressed
    /// block counts its compressed size).
    pub bytes_read: AtomicU64,
    /// Data blocks read by point reads only.
    pub get_data_block_reads: AtomicU64,
    /// Table filters asked about a key prefix by a prefix scan (tables
    /// whose filter holds prefixes of a length the scan's prefix covers),
    /// counted when asked: like [`filter_checks`](Self::filter_checks), a
    /// raw count that [`Stats::prefix_filter_checks`] does not use.
    pub prefix_filter_checks: AtomicU64,
    /// Prefix checks that answered "absent": tables a prefix scan skipped
    /// without reading them.
    pub prefix_filter_negatives: AtomicU64,
    /// Prefix checks that answered "maybe". [`Stats::prefix_filter_checks`]
    /// is this plus [`prefix_filter_negatives`](Self::prefix_filter_negatives),
    /// for the reason given at [`filter_checks`](Self::filter_checks).
    pub prefix_filter_maybes: AtomicU64,
}

impl ReadCounters {
    /// Adds `n` to a counter.
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets every counter to zero.
    pub fn reset(&self) {
        for c in [
            &self.gets,
            &self.filter_checks,
            &self.filter_negatives,
            &self.filter_false_positives,
            &self.filter_true_positives,
            &self.filter_checks_unanswered,
            &self.data_block_reads,
            &self.block_cache_hits,
            &self.block_cache_misses,
            &self.bytes_read,
            &self.get_data_block_reads,
            &self.prefix_filter_checks,
            &self.prefix_filter_negatives,
            &self.prefix_filter_maybes,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// The checks a snapshot reports: the answers given (as loaded by the
    /// caller) plus the checks left unanswered by an error. Derived rather
    /// than loaded from [`filter_checks`](Self::filter_checks), so the
    /// identity the [`Stats`] docs state holds in every snapshot.
    fn answered_checks(&self, negatives: u64, false_positives: u64, true_positives: u64) -> u64 {
        negatives
            .saturating_add(false_positives)
            .saturating_add(true_positives)
            .saturating_add(self.filter_checks_unanswered.load(Ordering::Relaxed))
    }

    /// Copies the counters that tables move into `level`'s read fields.
    pub(crate) fn snapshot_into_level(&self, level: &mut LevelStats) {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        level.filter_negatives = l(&self.filter_negatives);
        level.filter_false_positives = l(&self.filter_false_positives);
        level.filter_true_positives = l(&self.filter_true_positives);
        level.filter_checks = self.answered_checks(
            level.filter_negatives,
            level.filter_false_positives,
            level.filter_true_positives,
        );
        level.data_block_reads = l(&self.data_block_reads);
        level.block_cache_hits = l(&self.block_cache_hits);
        level.block_cache_misses = l(&self.block_cache_misses);
        level.get_data_block_reads = l(&self.get_data_block_reads);
        level.bytes_read = l(&self.bytes_read);
        level.prefix_filter_negatives = l(&self.prefix_filter_negatives);
        level.prefix_filter_checks = level
            .prefix_filter_negatives
            .saturating_add(l(&self.prefix_filter_maybes));
    }

    /// Adds `level`'s read fields (as [`snapshot_into_level`] read them)
    /// into `stats`' totals.
    ///
    /// [`snapshot_into_level`]: Self::snapshot_into_level
    pub(crate) fn add_level_into(level: &LevelStats, stats: &mut Stats) {
        stats.filter_checks += level.filter_checks;
        stats.filter_negatives += level.filter_negatives;
        stats.filter_false_positives += level.filter_false_positives;
        stats.filter_true_positives += level.filter_true_positives;
        stats.data_block_reads += level.data_block_reads;
        stats.block_cache_hits += level.block_cache_hits;
        stats.block_cache_misses += level.block_cache_misses;
        stats.get_data_block_reads += level.get_data_block_reads;
        stats.bytes_read += level.bytes_read;
        stats.prefix_filter_checks += level.prefix_filter_checks;
        stats.prefix_filter_negatives += level.prefix_filter_negatives;
    }

    /// Copies the counters into `stats`.
    pub fn snapshot_into(&self, stats: &mut Stats) {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        stats.gets = l(&self.gets);
        stats.filter_negatives = l(&self.filter_negatives);
        stats.filter_false_positives = l(&self.filter_false_positives);
        stats.filter_true_positives = l(&self.filter_true_positives);
        stats.filter_checks = self.answered_checks(
            stats.filter_negatives,
            stats.filter_false_positives,
            stats.filter_true_positives,
        );
        stats.data_block_reads = l(&self.data_block_reads);
        stats.block_cache_hits = l(&self.block_cache_hits);
        stats.block_cache_misses = l(&self.block_cache_misses);
        stats.bytes_read = l(&self.bytes_read);
        stats.get_data_block_reads = l(&self.get_data_block_reads);
        stats.prefix_filter_negatives = l(&self.prefix_filter_negatives);
        stats.prefix_filter_checks = stats
            .prefix_filter_negatives
            .saturating_add(l(&self.prefix_filter_maybes));
    }
}

/// What one point read cost, from [`Db::get_with_cost`] or
/// [`Snapshot::get_with_cost`]: the same quantities the database-wide
/// counters ([`Stats`]) add up, for this read alone, so the cost of a read
/// can be seen while other threads read too.
///
/// For a read that returns `Ok`, `filter_checks = filter_negatives +
/// filter_false_positives + filter_true_positives` and `block_cache_hits +
/// block_cache_misses` is `data_block_reads` with a block cache (both 0
/// without one). A table without a filter counts a check answered "maybe".
///
/// [`Db::get_with_cost`]: crate::Db::get_with_cost
/// [`Snapshot::get_with_cost`]: crate::Snapshot::get_with_cost
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadCost {
    /// Table filters asked: one per table whose key range covers the key,
    /// in lookup order, until one table answered.
    pub filter_checks: u64,
    /// Of those, "absent": tables skipped without reading a data block.
    pub filter_negatives: u64,
    /// Of those, "maybe" for a key the table did not hold: a data block
    /// read for nothing.
    pub filter_false_positives: u64,
    /// Of those, "maybe" for a key the table held (a value or a tombstone,
    /// or versions of it newer than the read's snapshot).
    pub filter_true_positives: u64,
    /// Data blocks read, whether the block cache or the file served them.
    pub data_block_reads: u64,
    /// Of those, blocks the block cache served.
    pub block_cache_hits: u64,
    /// Of those, blocks read from the file (and verified) with a block
    /// cache configured; 0 without one.
    pub block_cache_misses: u64,
    /// Bytes of the data blocks read, as stored in the file.
    pub bytes_read: u64,
    /// Where the answer came from.
    pub source: ReadSource,
}

impl std::ops::AddAssign for ReadCost {
    /// Adds `other`'s counts to these (the cost of a request made of several
    /// reads); `source` becomes `other`'s, the last read's.
    fn add_assign(&mut self, other: ReadCost) {
        self.filter_checks += other.filter_checks;
        self.filter_negatives += other.filter_negatives;
        self.filter_false_positives += other.filter_false_positives;
        self.filter_true_positives += other.filter_true_positives;
        self.data_block_reads += other.data_block_reads;
        self.block_cache_hits += other.block_cache_hits;
        self.block_cache_misses += other.block_cache_misses;
        self.bytes_read += other.bytes_read;
        self.source = other.source;
    }
}

/// Where a point read found its answer ([`ReadCost::source`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadSource {
    /// No memtable and no table held a version of the key visible to the
    /// read: the answer is `None` after every covering table was asked.
    #[default]
    Nowhere,
    /// A memtable held the newest visible version (a value or a
    /// tombstone); no table was asked.
    Memtable,
    /// A table held the newest visible version (a value or a tombstone).
    Table {
        /// The level the table is in.
        level: usize,
        /// The table's file number (as in [`TableInfo::file_number`]).
        file_number: u64,
    },
}

/// The shape of one level of the tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelStats {
    /// Tables in the level.
    pub tables: u64,
    /// Bytes of the level's table files.
    pub bytes: u64,
    /// Bytes of the level's filters (what they cost in memory).
    pub filter_bytes: u64,
    /// Of the level's tables, those whose filter bytes cannot be read
    /// under the configured policy (see
    /// [`Stats::undecodable_filter_tables`]).
    pub undecodable_filter_tables: u64,
    /// Entries (versions and tombstones) in the level's tables.
    pub entries: u64,
    /// Estimated distinct user keys in the level (merged HyperLogLog of its
    /// tables, plus the distinct-key counts of tables without a sketch:
    /// see [`Stats::tables_without_key_sketch`]).
    pub distinct_keys: u64,
    /// Of the level's tables, those without a key sketch (see
    /// [`Stats::tables_without_key_sketch`]).
    pub tables_without_key_sketch: u64,
    /// Filters of the level's tables asked by point reads (a table's reads
    /// count in the level it was written to; tables never change level).
    pub filter_checks: u64,
    /// Of those, answers "absent".
    pub filter_negatives: u64,
    /// Of those, "maybe" for a key the table did not hold.
    pub filter_false_positives: u64,
    /// Of those, "maybe" for a key the table held.
    pub filter_true_positives: u64,
    /// Data blocks of the level's tables read, by point reads and scans
    /// (compaction's reads are not counted here: see
    /// [`Stats::compaction_bytes_read`]).
    pub data_block_reads: u64,
    /// Of the level's data block reads, those the block cache served.
    pub block_cache_hits: u64,
    /// Of the level's data block reads, those that looked in the block
    /// cache and went to the file.
    pub block_cache_misses: u64,
    /// Data blocks of the level's tables read by point reads.
    pub get_data_block_reads: u64,
    /// Bytes of the level's data blocks read, as stored in the file (by
    /// point reads and scans).
    pub bytes_read: u64,
    /// Prefix scans that asked the filter of one of the level's tables
    /// about their prefix.
    pub prefix_filter_checks: u64,
    /// Of those, answers "absent": tables skipped without reading them.
    pub prefix_filter_negatives: u64,
}

/// A snapshot of the database's counters and shape, from `Db::stats`.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Point reads served.
    pub gets: u64,
    /// Filters asked. Every check ends as one of the next three counters
    /// (`filter_checks = filter_negatives + filter_false_positives +
    /// filter_true_positives`), except one whose data block read then
    /// fails with an error (a damaged block: `Error::Corruption`), which
    /// counts the check and the block read but no answer. A table without
    /// a filter (`NoFilter`, `Options::last_level_filters = false`, or
    /// filter bytes that cannot be decoded) counts a check answered
    /// "maybe", so its reads show as positives.
    pub filter_checks: u64,
    /// Filters that answered "absent".
    pub filter_negatives: u64,
    /// Filters that answered "maybe" for a key the table did not hold.
    pub filter_false_positives: u64,
    /// Filters that answered "maybe" for a key the table held.
    pub filter_true_positives: u64,
    /// Data blocks read, by point reads and scans: the blocks the reads
    /// needed, whether the block cache or the file served them.
    pub data_block_reads: u64,
    /// Of those, blocks the block cache served (no file read, no checksum
    /// check).
    pub block_cache_hits: u64,
    /// Of those, blocks not in the block cache: read from the file and
    /// verified. A point read caches a block on its second miss within the
    /// cache's admission window (not its first), if the block fits; scans
    /// never fill the cache. Without a cache this stays 0 and every data
    /// block read goes to the file.
    pub block_cache_misses: u64,
    /// Bytes of data blocks read (like `data_block_reads`, whether the
    /// block cache or the file served them), as stored in the file: a
    /// compressed block counts its compressed size.
    pub bytes_read: u64,
    /// Data blocks read by point reads.
    pub get_data_block_reads: u64,
    /// Table filters asked about a prefix by prefix scans: those of tables
    /// written with a prefix length (`Options::prefix_filter_len`) no
    /// longer than the prefix. A table written with a prefix length but
    /// without a filter (`NoFilter`) counts a check answered "maybe".
    pub prefix_filter_checks: u64,
    /// Prefix checks that answered "absent" (tables skipped unread).
    pub prefix_filter_negatives: u64,
    /// Bytes the block cache holds now (block contents plus a fixed
    /// per-block overhead); 0 without a cache.
    pub block_cache_bytes: u64,
    /// The block cache's capacity in bytes:
    /// [`Options::block_cache_bytes`](crate::Options::block_cache_bytes)
    /// rounded down to a multiple of the cache's shard count (1 below 2
    /// MiB, at most 16), so at most 15 bytes less.
    pub block_cache_capacity: u64,
    /// Data blocks the block cache holds now.
    pub block_cache_blocks: u64,
    /// Per-level shape, level 0 first.
    pub levels: Vec<LevelStats>,
    /// Live tables whose filter bytes cannot be read under the configured
    /// policy, so every point read that reaches them reads a data block.
    /// The usual cause: tables built by a custom
    /// [`FilterPolicy`](crate::filter::FilterPolicy) (built-in filters
    /// describe themselves and are read under any policy), opened with a
    /// policy of another name, for instance a checkpoint opened with
    /// `Options::default()`. Reads stay correct; compaction rewrites such
    /// tables with the configured policy ([`Db::compact_all`] rewrites all
    /// of them). Filter bytes of a built-in format that do not decode
    /// count here too (bytes damaged on disk fail the table's checksum
    /// first, and the table does not open).
    ///
    /// [`Db::compact_all`]: crate::Db::compact_all
    pub undecodable_filter_tables: u64,
    /// Estimated distinct user keys in the whole database: the union of the
    /// tables' HyperLogLog sketches and the memtables' keys. Unlike a sum of
    /// table entry counts it does not grow with overwrites. Keys whose newest
    /// version is a tombstone still count until compaction drops it.
    ///
    /// A table without a key sketch ([`tables_without_key_sketch`]) adds
    /// its own exact count of distinct keys instead, so its keys that other
    /// tables also hold count twice: the estimate is then too high by up to
    /// that table's count (the sketches' part keeps its own error of about
    /// 1% either way).
    ///
    /// [`tables_without_key_sketch`]: Stats::tables_without_key_sketch
    pub distinct_keys: u64,
    /// Live tables without a HyperLogLog key sketch. The engine writes one
    /// into every table it builds (flush and compaction) since the key
    /// statistics came in (2026-11-29), so only tables written with
    /// [`TableBuilder`](crate::sstable::TableBuilder) outside the engine,
    /// or by an engine older than that, lack one. A compaction that rewrites such a table gives
    /// it one ([`Db::compact_all`](crate::Db::compact_all) rewrites every
    /// table). They make [`distinct_keys`](Stats::distinct_keys) an upper
    /// bound.
    pub tables_without_key_sketch: u64,
    /// Memtable flushes completed since open.
    pub flushes: u64,
    /// Compactions completed since open.
    pub compactions: u64,
    /// Bytes read from input tables by compactions since open.
    pub compaction_bytes_read: u64,
    /// Bytes written to output tables by compactions since open.
    pub compaction_bytes_written: u64,
    /// Bytes written to level-0 tables by flushes since open.
    pub flush_bytes_written: u64,
    /// Bytes of user data (keys and values) accepted by writes since open.
    pub user_bytes_written: u64,
    /// Write batches (a `put` or `delete` is a batch of one) committed to
    /// the write-ahead log since open.
    pub batches_written: u64,
    /// Log records (one append each) that committed those batches: with
    /// [`Options::sync_writes`](crate::Options::sync_writes), batches whose
    /// writers wait for the same commit share one log record and one fsync
    /// (group commit), so `batches_written / log_appends` is the mean
    /// group size; without it, one per batch.
    pub log_appends: u64,
    /// Times the manifest was replaced by a fresh snapshot since open, on
    /// passing [`Options::manifest_roll_bytes`](crate::Options::manifest_roll_bytes).
    pub manifest_rolls: u64,
    /// Size in bytes of the manifest in use: its snapshot plus the edits
    /// logged since.
    pub manifest_bytes: u64,
}

impl Stats {
    /// Total bytes written to tables per byte of user data (write
    /// amplification, counting flushes and compactions), or 0 when nothing
    /// was written.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            0.0
        } else {
            (self.flush_bytes_written + self.compaction_bytes_written) as f64
                / self.user_bytes_written as f64
        }
    }

    /// Total bytes of filters across all levels.
    pub fn filter_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.filter_bytes).sum()
    }

    /// Total table count across all levels.
    pub fn tables(&self) -> u64 {
        self.levels.iter().map(|l| l.tables).sum()
    }
}

/// One live table, as listed by `Db::tables`.
#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    /// The level the table is in.
    pub level: usize,
    /// The table's file number (its file is `{number:06}.sst`).
    pub file_number: u64,
    /// Size of the table's file.
    pub file_size: u64,
    /// Entries (versions and tombstones) in the table.
    pub entries: u64,
    /// Smallest user key.
    pub smallest: Vec<u8>,
    /// Largest user key.
    pub largest: Vec<u8>,
    /// Name of the policy that built the table's filter.
    pub filter_policy: String,
    /// The decoded filter's format: `"bloom"`, `"ribbon"`, `"none"`,
    /// `"undecodable"` or a custom policy's name.
    pub filter_format: String,
    /// Bytes of the table's filter.
    pub filter_bytes: u64,
    /// The bits per key the table's filter was sized to (in the policy's
    /// unit: Bloom-equivalent for Ribbon), recorded for policies that report
    /// a size: the policy's own under [`FilterBudget::Uniform`], the run's
    /// share under [`FilterBudget::Monkey`].
    ///
    /// [`FilterBudget::Uniform`]: crate::FilterBudget::Uniform
    /// [`FilterBudget::Monkey`]: crate::FilterBudget::Monkey
    pub filter_bits_per_key: Option<f64>,
}
