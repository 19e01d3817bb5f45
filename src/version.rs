//! Versions: the set of tables that make up the tree at one moment, and the
//! order a point read consults them in.
//!
//! A [`Version`] is immutable. Flushes and compactions build a new one from
//! the old plus a manifest edit and swap it in; readers and iterators that
//! hold the old one keep its tables alive. A table removed by a compaction is
//! marked obsolete, and its file is deleted when the last version holding it
//! is dropped — never while a reader can still use it.
//!
//! Lookup order: level 0 newest table first (level-0 tables may overlap, and
//! a newer table holds newer versions); then, in each deeper level, the one
//! table whose key range covers the key, found by binary search.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::key::{compare_user_keys, SequenceNumber};
use crate::manifest::TableRecord;
use crate::sketch::HyperLogLog;
use crate::sstable::{Found, Table};
use crate::stats::{ReadCost, ReadSource};

/// Name of table file `number` inside the database directory.
pub(crate) fn table_file_name(number: u64) -> String {
    format!("{number:06}.sst")
}

/// Name of the table property holding the HyperLogLog of the table's user
/// keys (see [`crate::sketch::HyperLogLog`]).
pub(crate) const KEY_SKETCH_PROPERTY: &str = "sievedb.hll";

/// Precision of the per-table key sketch: 0.81% standard error, at most
/// 12,301 bytes per table (much less for small tables, which stay sparse).
pub(crate) const KEY_SKETCH_PRECISION: u8 = 14;

/// Whether the engine that opened a table still holds the directory's
/// `LOCK`. A [`Snapshot`](crate::Snapshot) or scan can keep table handles
/// alive past [`Db::close`](crate::Db::close); once the lock is released the
/// directory may belong to another instance (reopened, restored from a
/// checkpoint, recreated), so an obsolete handle must no longer delete its
/// file by name: the next open removes it as unreferenced.
#[derive(Debug)]
pub(crate) struct DirOwner {
    open: parking_lot::RwLock<bool>,
}

impl DirOwner {
    pub(crate) fn new() -> DirOwner {
        DirOwner {
            open: parking_lot::RwLock::new(true),
        }
    }

    /// Called before the `LOCK` is released: no handle deletes a file after.
    pub(crate) fn release(&self) {
        *self.open.write() = false;
    }
}

/// A live table: its manifest record and the open reader.
pub(crate) struct TableHandle {
    pub(crate) record: TableRecord,
    pub(crate) table: Arc<Table>,
    /// Distinct user keys of the table, from its properties (absent in
    /// tables written without one).
    pub(crate) key_sketch: Option<HyperLogLog>,
    obsolete: AtomicBool,
    fs: Arc<dyn FileSystem>,
    owner: Arc<DirOwner>,
    path: PathBuf,
}

impl TableHandle {
    /// Wraps an open table; fails with [`Error::Corruption`] if its key
    /// sketch property cannot be decoded.
    pub(crate) fn new(
        record: TableRecord,
        table: Arc<Table>,
        fs: Arc<dyn FileSystem>,
        owner: &Arc<DirOwner>,
        path: PathBuf,
    ) -> Result<Arc<TableHandle>> {
        let key_sketch = match table.property(KEY_SKETCH_PROPERTY) {
            Some(bytes) => {
                let sketch = HyperLogLog::from_bytes(bytes).map_err(|e| {
                    Error::corruption(&path, None, format!("bad key sketch property: {e}"))
                })?;
                check_key_sketch(&sketch, table.meta().distinct_keys, &path)?;
                Some(sketch)
            }
            None => None,
        };
        Ok(Arc::new(TableHandle {
            record,
            table,
            key_sketch,
            obsolete: AtomicBool::new(false),
            fs,
            owner: Arc::clone(owner),
            path,
        }))
    }

    /// Marks the table's file for deletion once no version holds it.
    pub(crate) fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    fn covers(&self, user_key: &[u8]) -> bool {
        compare_user_keys(&self.record.smallest, user_key).is_le()
            && compare_user_keys(user_key, &self.record.largest).is_le()
    }
}

impl Drop for TableHandle {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            // The manifest no longer references this file; a failure here only
            // leaves garbage that the next open removes. Only while this
            // engine holds the directory (read lock held across the removal).
            let open = self.owner.open.read();
            if *open {
                let _ = self.fs.remove_file(&self.path);
            }
        }
    }
}

/// The tables of every level at one moment.
#[derive(Clone, Default)]
pub(crate) struct Version {
    /// Level 0 newest first; deeper levels sorted by smallest key, disjoint.
    pub(crate) levels: Vec<Vec<Arc<TableHandle>>>,
}

impl Version {
    pub(crate) fn new(num_levels: usize) -> Version {
        Version {
            levels: vec![Vec::new(); num_levels],
        }
    }

    /// A new version with `removed` (level, file number) taken out and
    /// `added` put in, each level kept in lookup order.
    pub(crate) fn apply(&self, removed: &[(u32, u64)], added: Vec<Arc<TableHandle>>) -> Version {
        let mut levels = self.levels.clone();
        for &(level, number) in removed {
            if let Some(tables) = levels.get_mut(level as usize) {
                tables.retain(|t| t.record.file_number != number);
            }
        }
        for handle in added {
            let level = handle.record.level as usize;
            if level < levels.len() {
                levels[level].push(handle);
            }
        }
        if let Some(l0) = levels.first_mut() {
            l0.sort_by_key(|t| std::cmp::Reverse(t.record.file_number));
        }
        for tables in levels.iter_mut().skip(1) {
            tables.sort_by(|a, b| a.record.smallest.cmp(&b.record.smallest));
        }
        Version { levels }
    }

    /// The newest version of `user_key` visible at `snapshot`, searching
    /// tables in lookup order.
    ///
    /// What the lookup cost is added to `cost`, and `cost.source` names the
    /// table that answered, if one did.
    pub(crate) fn get(
        &self,
        user_key: &[u8],
        key_hash: u64,
        snapshot: SequenceNumber,
        cost: &mut ReadCost,
    ) -> Result<Option<Found>> {
        let answered = |level: usize, handle: &TableHandle, cost: &mut ReadCost| {
            cost.source = ReadSource::Table {
                level,
                file_number: handle.record.file_number,
            };
        };
        if let Some(l0) = self.levels.first() {
            for handle in l0 {
                if handle.covers(user_key) {
                    if let Some(found) = handle
                        .table
                        .get_in_range(user_key, key_hash, snapshot, cost)?
                    {
                        answered(0, handle, cost);
                        return Ok(Some(found));
                    }
                }
            }
        }
        for (level, tables) in self.levels.iter().enumerate().skip(1) {
            if let Some(handle) = find_covering(tables, user_key) {
                if let Some(found) = handle
                    .table
                    .get_in_range(user_key, key_hash, snapshot, cost)?
                {
                    answered(level, handle, cost);
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// The union of the key sketches of `tables` (tables without one are
    /// skipped).
    pub(crate) fn union_sketch<'a>(
        tables: impl IntoIterator<Item = &'a Arc<TableHandle>>,
    ) -> HyperLogLog {
        let mut union = HyperLogLog::new(KEY_SKETCH_PRECISION);
        for t in tables {
            if let Some(sketch) = &t.key_sketch {
                // Same precision by construction; a sketch of another
                // precision is folded down by merge.
                let _ = union.merge(sketch);
            }
        }
        union
    }

    /// Whether any level below `level` holds a table.
    pub(crate) fn holds_data_below(&self, level: usize) -> bool {
        self.levels
            .iter()
            .skip(level + 1)
            .any(|tables| !tables.is_empty())
    }

    /// Total file bytes of `level`.
    pub(crate) fn level_bytes(&self, level: usize) -> u64 {
        self.levels
            .get(level)
            .map(|t| t.iter().map(|h| h.record.file_size).sum())
            .unwrap_or(0)
    }

    /// Keys of each sorted run once a write lands, for sizing the written
    /// tables' filters: see [`run_keys_after_write`]. A table counts what
    /// its filter holds: its distinct keys, plus its distinct prefixes when
    /// built with a prefix length.
    pub(crate) fn runs_after_write(
        &self,
        consumed: &[u64],
        level: usize,
        written: u64,
    ) -> (Vec<u64>, usize) {
        let levels: Vec<Vec<(u64, u64)>> = self
            .levels
            .iter()
            .map(|tables| {
                tables
                    .iter()
                    .map(|h| (h.record.file_number, h.table.filter_entries()))
                    .collect()
            })
            .collect();
        run_keys_after_write(&levels, consumed, level, written)
    }

    /// Tables of `level` whose key range intersects `[smallest, largest]`.
    pub(crate) fn overlapping(
        &self,
        level: usize,
        smallest: &[u8],
        largest: &[u8],
    ) -> Vec<Arc<TableHandle>> {
        self.levels
            .get(level)
            .map(|tables| {
                tables
                    .iter()
                    .filter(|t| {
                        t.record.largest.as_slice() >= smallest
                            && t.record.smallest.as_slice() <= largest
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A table's key sketch is built from the same key hashes as its distinct
/// key count, at [`KEY_SKETCH_PRECISION`]: one that is not, or whose
/// estimate is far from that count, is damage (a checksum-valid sketch of
/// full registers made `Stats::distinct_keys` 2^64 - 1 for a table of 3
/// keys, and a coarse one would have dragged every union down to its
/// precision: found by review).
fn check_key_sketch(sketch: &HyperLogLog, distinct_keys: u64, path: &Path) -> Result<()> {
    let estimate = sketch.estimate();
    // The standard error at precision 14 is 0.81%: an eighth of the count
    // (plus a little for tiny tables) is over 15 of them.
    let slack = distinct_keys / 8 + 16;
    if sketch.precision() != KEY_SKETCH_PRECISION
        || estimate > distinct_keys.saturating_add(slack)
        || estimate.saturating_add(slack) < distinct_keys
    {
        return Err(Error::corruption(
            path,
            None,
            format!(
                "key sketch (precision {}, estimate {estimate}) does not describe the \
                 table's {distinct_keys} distinct keys",
                sketch.precision()
            ),
        ));
    }
    Ok(())
}

/// The table of a sorted, disjoint level whose range covers `user_key`.
#[inline]
pub(crate) fn find_covering<'a>(
    tables: &'a [Arc<TableHandle>],
    user_key: &[u8],
) -> Option<&'a Arc<TableHandle>> {
    // `compare_user_keys`, not the slices' `<`: a missing key's get is
    // mostly this search, and the slices' order calls `memcmp` at every
    // probe (docs/benchmarks.md, "Missing keys: the level search").
    let idx = tables.partition_point(|t| compare_user_keys(&t.record.largest, user_key).is_lt());
    tables
        .get(idx)
        .filter(|t| compare_user_keys(&t.record.smallest, user_key).is_le())
}

/// Keys of each sorted run once a write lands, for sizing the written
/// tables' filters ([`FilterBudget::Monkey`](crate::FilterBudget::Monkey)).
/// `levels` holds each level's tables as (file number, keys). Every
/// level-0 table is a run of its own and each deeper level one run (empty
/// ones left out). The write removes the tables numbered in `consumed` (a
/// compaction's inputs) and brings `written` entries to `level`: a new run
/// of its own at level 0, otherwise that level's run. Returns the counts and
/// the index of the written run.
pub(crate) fn run_keys_after_write(
    levels: &[Vec<(u64, u64)>],
    consumed: &[u64],
    level: usize,
    written: u64,
) -> (Vec<u64>, usize) {
    let live = |t: &&(u64, u64)| !consumed.contains(&t.0);
    let entries = |t: &(u64, u64)| t.1;
    let mut runs: Vec<u64> = Vec::new();
    let mut written_run = None;
    let mut level0_runs = 0;
    for (l, tables) in levels.iter().enumerate() {
        if l == 0 {
            runs.extend(tables.iter().filter(live).map(entries));
            if level == 0 {
                written_run = Some(runs.len());
                runs.push(written);
            }
            level0_runs = runs.len();
            continue;
        }
        // Saturating: table counts come from properties blocks.
        let mut run: u64 = tables
            .iter()
            .filter(live)
            .map(entries)
            .fold(0, u64::saturating_add);
        if l == level {
            run = run.saturating_add(written);
            written_run = Some(runs.len());
        } else if run == 0 {
            continue;
        }
        runs.push(run);
    }
    let index = written_run.unwrap_or_else(|| {
        // A level past the tree (not produced by the engine): its own run.
        runs.push(written);
        runs.len() - 1
    });
    // The deepest level is still growing while it holds fewer keys than a
    // level above it (a load fills the levels top down): count it at the
    // size of the largest level above, so the tables written into it while
    // it is small are sized as the largest run they are about to be part
    // of. Counting it as it is gave those tables many bits per key that
    // they kept as the level grew (examples/filter_budget.rs with 1 MiB
    // memtables and a 4 MiB level 1: 7% more filter memory than the
    // average asked for, and 1.07x fewer false positives than uniform
    // filters of that memory, against 1.27x at the average with this rule).
    let level_runs = &mut runs[level0_runs..];
    if let Some((bottom, above)) = level_runs.split_last_mut() {
        if let Some(&largest_above) = above.iter().max() {
            *bottom = (*bottom).max(largest_above);
        }
    }
    (runs, index)
}

#[cfg(test)]
mod tests {
    use super::run_keys_after_write;

    /// Levels as (file number, entries), files numbered from 1 in order.
    fn levels(shape: &[&[u64]]) -> Vec<Vec<(u64, u64)>> {
        let mut number = 0;
        shape
            .iter()
            .map(|level| {
                level
                    .iter()
                    .map(|&entries| {
                        number += 1;
                        (number, entries)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_flush_is_a_run_of_its_own_after_the_level0_tables() {
        let tree = levels(&[&[10, 20], &[100, 100], &[], &[5_000]]);
        assert_eq!(
            run_keys_after_write(&tree, &[], 0, 7),
            (vec![10, 20, 7, 200, 5_000], 2)
        );
        let empty = levels(&[&[], &[], &[]]);
        assert_eq!(run_keys_after_write(&empty, &[], 0, 7), (vec![7], 0));
    }

    #[test]
    fn a_compaction_moves_its_inputs_into_the_output_level() {
        // Files 1 and 2 (level 0) and 3 (level 1) merge into level 1.
        let tree = levels(&[&[10, 20], &[100, 50], &[], &[5_000]]);
        assert_eq!(
            run_keys_after_write(&tree, &[1, 2, 3], 1, 130),
            (vec![180, 5_000], 0)
        );
        // Into an empty level between two others: its run appears.
        assert_eq!(
            run_keys_after_write(&tree, &[4], 2, 50),
            (vec![10, 20, 100, 50, 5_000], 3)
        );
    }

    #[test]
    fn a_growing_deepest_level_counts_as_the_largest_above_it() {
        // Level 3 is being filled from level 2: it counts as 900 keys.
        let tree = levels(&[&[10], &[90], &[900], &[30]]);
        assert_eq!(
            run_keys_after_write(&tree, &[], 3, 20),
            (vec![10, 90, 900, 900], 3)
        );
        // Once it is the largest it counts as itself; level-0 tables never
        // raise it.
        let tree = levels(&[&[10_000], &[90], &[900], &[3_000]]);
        assert_eq!(
            run_keys_after_write(&tree, &[], 2, 10),
            (vec![10_000, 90, 910, 3_000], 2)
        );
        let tree = levels(&[&[10_000], &[90]]);
        assert_eq!(
            run_keys_after_write(&tree, &[], 1, 10),
            (vec![10_000, 100], 1)
        );
    }
}
