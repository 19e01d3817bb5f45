//! Leveled compaction: picking what to merge, merging it, installing it.
//!
//! # Shape
//! Level 0 holds flushed tables whose key ranges may overlap. Levels 1 and
//! deeper hold disjoint tables sorted by key; level `n` targets
//! `level1_bytes * multiplier^(n-1)` bytes.
//!
//! # Picking
//! Each level has a score: level 0 `tables / level0_compaction_trigger`,
//! deeper levels `bytes / target`. A level needs a compaction when level
//! 0's score reaches 1 or a deeper level's exceeds 1 (the last level never
//! compacts downward); of those, the one with the highest score compacts. From level 0 every table is taken (they
//! overlap each other); from a deeper level one table, chosen by
//! `Options::compaction_pick`: by default (`CompactionPick::Rotation`) by
//! rotating through the key space with a per-level pointer, so every range
//! is visited; with `CompactionPick::MostDropped`, the table whose merge
//! with the overlapping tables below would drop the largest share of
//! entries (entries minus the HyperLogLog union of their distinct keys, per
//! byte written) when that share is worth it, else the rotation's. The
//! overlapping tables of the next level join the inputs.
//!
//! # Merging
//! A k-way merge of the inputs' internal keys keeps the newest version of
//! each user key and drops the rest: readers that might need an older version
//! pin the tables they read, so no live view depends on it. A tombstone is
//! dropped too when no level below the output can hold its key. Output is
//! cut into tables of about `table_bytes` at user-key boundaries, and each
//! output table's filter is built by the database's *current* policy from
//! the keys actually written to it — so switching policy migrates the tree
//! as it compacts (outputs to the deepest level get none when
//! `Options::last_level_filters` is off).
//!
//! # Installing
//! One manifest edit removes the inputs and adds the outputs. Until it is
//! synced the old tables are the live ones (outputs are unreferenced files the
//! next open deletes); after it, the new ones are. Input files are deleted
//! when the last version that holds them is dropped.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::db::{
    counters_of, filter_policy_for_final_run, filter_policy_for_write, finish_table, table_options,
    DbInner,
};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{decode_internal_key, ValueKind};
use crate::manifest::{TableRecord, VersionEdit};
use crate::merge::{LevelIterator, MergingIterator};
use crate::options::CompactionPick;
use crate::sstable::{Table, TableBuilder};
use crate::version::{table_file_name, TableHandle, Version};

/// One unit of compaction work.
pub(crate) struct CompactionJob {
    /// Level the inputs come from.
    pub(crate) level: usize,
    /// Level the outputs go to (`level + 1`, or `level` for a rewrite).
    pub(crate) output_level: usize,
    /// Input tables from `level`.
    pub(crate) inputs: Vec<Arc<TableHandle>>,
    /// Input tables from `output_level` that overlap them.
    pub(crate) overlaps: Vec<Arc<TableHandle>>,
    /// A `compact_all` merge into its bottom level, where the tree ends as
    /// one run: a Monkey budget sizes the outputs' filters for that run
    /// ([`filter_policy_for_final_run`]), not for the shape the write
    /// leaves (upper levels not yet drained). Not by passing every upper
    /// table as consumed: the shape's computation tests membership in that
    /// list for every table, quadratic in a large tree.
    pub(crate) into_final_run: bool,
}

/// Compaction score of every level but the last.
pub(crate) fn level_scores(version: &Version, opts: &crate::Options) -> Vec<f64> {
    let last = version.levels.len().saturating_sub(1);
    (0..last)
        .map(|level| {
            if level == 0 {
                version.levels[0].len() as f64 / opts.level0_compaction_trigger as f64
            } else {
                version.level_bytes(level) as f64 / opts.level_target_bytes(level) as f64
            }
        })
        .collect()
}

fn needs_compaction(level: usize, score: f64) -> bool {
    if level == 0 {
        score >= 1.0
    } else {
        score > 1.0
    }
}

/// The smallest and largest user keys of a set of tables.
fn key_range(tables: &[Arc<TableHandle>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let smallest = tables.iter().map(|t| &t.record.smallest).min()?.clone();
    let largest = tables.iter().map(|t| &t.record.largest).max()?.clone();
    Some((smallest, largest))
}

/// Share of a compaction's input entries that must be droppable (shadowed
/// versions, per the HyperLogLog union) before it is preferred over rotation.
/// Well above the sketches' ~1% estimation noise.
const MIN_DROP_SHARE: f64 = 0.05;

/// The table of `level` whose merge with its overlaps in `level + 1` would
/// drop the most entries per byte written, if any would drop at least
/// [`MIN_DROP_SHARE`] of its input entries.
fn most_dropped(
    version: &Version,
    level: usize,
    eligible: impl Fn(&TableHandle) -> bool,
) -> Option<Arc<TableHandle>> {
    let mut best: Option<(f64, &Arc<TableHandle>)> = None;
    for t in version.levels.get(level)?.iter().filter(|t| eligible(t)) {
        let overlaps = version.overlapping(level + 1, &t.record.smallest, &t.record.largest);
        let inputs: Vec<&Arc<TableHandle>> = std::iter::once(t).chain(overlaps.iter()).collect();
        if inputs.iter().any(|i| i.key_sketch.is_none()) {
            continue;
        }
        let entries = inputs
            .iter()
            .map(|i| i.table.meta().entries)
            .fold(0u64, u64::saturating_add);
        let bytes: u64 = inputs.iter().map(|i| i.record.file_size).sum();
        let distinct = Version::union_sketch(inputs.iter().copied()).estimate();
        let dropped = entries.saturating_sub(distinct);
        if entries == 0 || (dropped as f64) < MIN_DROP_SHARE * entries as f64 {
            continue;
        }
        let score = dropped as f64 / bytes.max(1) as f64;
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, t));
        }
    }
    best.map(|(_, t)| Arc::clone(t))
}

impl DbInner {
    /// The most urgent compaction, if any level needs one.
    pub(crate) fn pick_compaction(&self, compact_pointer: &[Vec<u8>]) -> Option<CompactionJob> {
        let version = Arc::clone(&self.current().version);
        let scores = level_scores(&version, &self.opts);
        // The highest score among the levels that need a compaction. (Taking
        // the highest of all first lost a tie: level 0 at its trigger, 1.0,
        // needs one, level 1 exactly at its target, also 1.0, does not, and
        // `max_by` keeps the last of equal scores: nothing was picked, and
        // with `level0_stop_writes == level0_compaction_trigger` writers
        // waited forever.)
        let (level, _) = scores
            .iter()
            .enumerate()
            .filter(|&(level, &score)| needs_compaction(level, score))
            .max_by(|a, b| a.1.total_cmp(b.1))?;
        self.job_at(&version, level, compact_pointer, |_| true)
    }

    /// The compaction out of `level` if that level needs one, taking only
    /// tables numbered below `born_before` as the table to move down (for
    /// level 0: only if one of its tables is, since all of level 0 moves at
    /// once).
    fn pick_compaction_in(
        &self,
        level: usize,
        compact_pointer: &[Vec<u8>],
        born_before: u64,
    ) -> Option<CompactionJob> {
        let version = Arc::clone(&self.current().version);
        let score = *level_scores(&version, &self.opts).get(level)?;
        if !needs_compaction(level, score) {
            return None;
        }
        self.job_at(&version, level, compact_pointer, |t| {
            t.record.file_number < born_before
        })
    }

    /// The compaction out of `level` into the next, moving the table the
    /// policy picks among the `eligible` ones (level 0: all of its tables,
    /// if any is eligible).
    fn job_at(
        &self,
        version: &Version,
        level: usize,
        compact_pointer: &[Vec<u8>],
        eligible: impl Fn(&TableHandle) -> bool,
    ) -> Option<CompactionJob> {
        let tables = version.levels.get(level)?;
        let inputs = if level == 0 {
            if !tables.iter().any(|t| eligible(t)) {
                return None;
            }
            tables.clone()
        } else {
            let by_drop = match self.opts.compaction_pick {
                CompactionPick::MostDropped => most_dropped(version, level, &eligible),
                CompactionPick::Rotation => None,
            };
            let pick = match by_drop {
                Some(t) => t,
                None => {
                    let pointer = compact_pointer.get(level).map(Vec::as_slice).unwrap_or(&[]);
                    let mut candidates = tables.iter().filter(|t| eligible(t));
                    let t = candidates
                        .clone()
                        .find(|t| pointer.is_empty() || t.record.smallest.as_slice() > pointer)
                        .or_else(|| candidates.next())?;
                    Arc::clone(t)
                }
            };
            vec![pick]
        };
        Some(self.job_for(version, level, level + 1, inputs))
    }

    fn job_for(
        &self,
        version: &Version,
        level: usize,
        output_level: usize,
        inputs: Vec<Arc<TableHandle>>,
    ) -> CompactionJob {
        let overlaps = if output_level == level {
            Vec::new()
        } else {
            match key_range(&inputs) {
                Some((lo, hi)) => version.overlapping(output_level, &lo, &hi),
                None => Vec::new(),
            }
        };
        CompactionJob {
            level,
            output_level,
            inputs,
            overlaps,
            into_final_run: false,
        }
    }

    /// Background thread: run compactions whenever a level needs one.
    pub(crate) fn compaction_loop(self: Arc<Self>) {
        loop {
            let job = {
                let mut bg = self.bg.lock();
                loop {
                    if bg.shutdown || self.is_poisoned() {
                        return;
                    }
                    if !bg.compacting {
                        if let Some(job) = self.pick_compaction(&bg.compact_pointer) {
                            bg.compacting = true;
                            break job;
                        }
                    }
                    self.bg_cv.wait(&mut bg);
                }
            };
            // A failure has poisoned the database; the loop then ends.
            let _ = self.run_claimed(job);
        }
    }

    /// Runs a claimed compaction and gives the claim back, however the job
    /// ends: a failure or a panic (caught, e.g. in a custom filter policy's
    /// `build`) poisons the database and comes back as `Error::Poisoned`.
    /// (A panic that skipped giving the claim back left every later
    /// compaction, foreground or background, waiting for it forever.)
    ///
    /// The job is dropped before the claim is given back: its inputs hold
    /// the last references to the tables it replaced, whose files go when
    /// those drop. Dropped after, a caller woken by the claim's release
    /// (`wait_for_compactions`, `compact`) could return while the files
    /// were still on disk (a review counted them right after the call in
    /// 575 of 3,000 rounds).
    /// Returns the file numbers of the tables it wrote.
    fn run_claimed(&self, job: CompactionJob) -> Result<Vec<u64>> {
        let (outputs, failed) =
            match self.run_background("compaction", || self.run_compaction(&job)) {
                Some(Ok(outputs)) => (outputs, None),
                Some(Err(e)) => {
                    self.set_poison(&e);
                    (Vec::new(), Some(e.to_string()))
                }
                // `run_background` poisoned the database with the panic.
                None => (Vec::new(), Some(self.poison_reason())),
            };
        drop(job);
        let mut bg = self.bg.lock();
        bg.compacting = false;
        self.bg_cv.notify_all();
        self.done_cv.notify_all();
        drop(bg);
        match failed {
            Some(why) => Err(Error::Poisoned(why)),
            None => Ok(outputs),
        }
    }

    /// Takes the right to compact (waiting while another compaction runs)
    /// and returns the job `pick` chooses, or `None` when there is nothing
    /// to do.
    fn claim(
        &self,
        mut pick: impl FnMut(&Self, &[Vec<u8>]) -> Option<CompactionJob>,
    ) -> Result<Option<CompactionJob>> {
        let mut bg = self.bg.lock();
        loop {
            if self.is_poisoned() {
                return Err(Error::Poisoned(self.poison_reason()));
            }
            if bg.shutdown {
                return Err(Error::Closed);
            }
            if !bg.compacting {
                let job = pick(self, &bg.compact_pointer);
                if job.is_some() {
                    bg.compacting = true;
                }
                return Ok(job);
            }
            self.done_cv.wait(&mut bg);
        }
    }

    /// Runs compactions in the caller's thread until no level needs one, then
    /// merges the level-0 tables present when it started into level 1 even
    /// below the trigger (every point read checks each of them, and how many
    /// are left would otherwise depend on when the background compactions
    /// ran), then balances the levels again. That merge is skipped when
    /// level 1 is the last level: there it would rewrite the whole
    /// database.
    ///
    /// Every step is bounded by the tables present when it began (see
    /// [`balance_levels`](Self::balance_levels)), so concurrent writers
    /// cannot keep it running.
    pub(crate) fn compact_until_balanced(&self) -> Result<()> {
        let level0_at_start: Vec<u64> = self.current().version.levels[0]
            .iter()
            .map(|t| t.record.file_number)
            .collect();
        self.balance_levels()?;
        let pick = |db: &Self, _: &[Vec<u8>]| {
            let version = Arc::clone(&db.current().version);
            let level0 = version.levels.first()?;
            let waiting = level0
                .iter()
                .any(|t| level0_at_start.contains(&t.record.file_number));
            // All of level 0 at once: its tables overlap, so older ones
            // must not stay behind newer ones.
            (waiting && version.levels.len() > 2)
                .then(|| db.job_for(&version, 0, 1, level0.clone()))
        };
        // One job takes every table of level 0, those present at the start
        // among them.
        if let Some(job) = self.claim(pick)? {
            self.run_claimed(job)?;
            self.balance_levels()?;
        }
        Ok(())
    }

    /// See [`Db::wait_for_compactions`](crate::Db::wait_for_compactions):
    /// the frozen memtables' flushes, then the compactions the background
    /// thread would run, taken by whichever thread is free first.
    pub(crate) fn wait_for_compactions(&self) -> Result<()> {
        self.wait_for_frozen_flushes()?;
        self.balance_levels()
    }

    /// Compacts the levels from the top down, each until it is within its
    /// target, in the caller's thread (or waiting for a background
    /// compaction running meanwhile). A level's turn moves only tables it
    /// held when the turn began (level 0: while one of those remains), so
    /// each turn ends: writers flushing new level-0 tables, and compactions
    /// from the level above, add only tables numbered after its start.
    /// (Picking by score until no level needed a compaction never returned
    /// while a writer kept level 0 at its trigger; found by review,
    /// twenty-fifth session.) Without concurrent writes no level is over
    /// its target afterwards: data only moves down, so a level balanced in
    /// its turn stays so.
    fn balance_levels(&self) -> Result<()> {
        for level in 0..self.opts.num_levels.saturating_sub(1) {
            let born_before = self.next_file.load(Ordering::SeqCst);
            while let Some(job) =
                self.claim(|db, pointer| db.pick_compaction_in(level, pointer, born_before))?
            {
                self.run_claimed(job)?;
            }
        }
        Ok(())
    }

    /// Rewrites every table: each level is merged into the next down to the
    /// bottom ([`compact_all_bottom`](Self::compact_all_bottom): the deepest
    /// level holding data, or deeper if it could not hold it all), whose
    /// other tables are then rewritten in place (this call's merges into
    /// it are not: they were just written, by the current policy, without
    /// tombstones or hidden versions, under a Monkey budget sized for the
    /// one run the tree ends as; rewriting them again doubled the bytes a
    /// full compaction wrote). Every table holding a write from
    /// before the call afterwards has a filter built by the current policy
    /// (or, with `Options::last_level_filters` off, none: all are in the
    /// deepest level).
    pub(crate) fn compact_all(&self) -> Result<()> {
        // Everything written before the call goes into tables first, so
        // that the level-0 tables present after this are the whole of it.
        // Its sequence numbers are at most `before`: a table holding one of
        // them holds data this call must move down.
        let before = self.visible_seq.load(Ordering::Acquire);
        self.flush()?;
        // The tables this call's merges wrote into the bottom: built by
        // the current policy, sized for the one run the tree ends as, with
        // no tombstones or hidden versions. The bottom's other tables are
        // rewritten in place (rewriting these too wrote the merged data
        // twice; keeping only the tables from before the call missed the
        // ones background compactions wrote there meanwhile, sized by a
        // Monkey budget for a shape with more runs: found by review).
        let mut final_outputs: HashSet<u64> = HashSet::new();
        let mut bottom = self.compact_all_bottom(1);
        let mut level = 0;
        loop {
            while level <= bottom {
                self.compact_all_pass(level, bottom, before, &mut final_outputs)?;
                level += 1;
            }
            // Background compactions (running for concurrent writers) may
            // have moved part of the old data below `bottom` meanwhile: the
            // old bottom is then a middle level, and its data moves on too.
            // And the rewrite may have outgrown the bottom's target (the
            // bottom was chosen by the tables' sizes before it, and an
            // option change, e.g. compression off, can make them larger):
            // a background compaction, or the next one asked for, would
            // move part of it on, leaving the data in two levels (found by
            // review), so it all moves on now.
            let deepest = self.deepest_level_with_data();
            let version = Arc::clone(&self.current().version);
            let last = version.levels.len() - 1;
            let overfull =
                bottom < last && version.level_bytes(bottom) > self.opts.level_target_bytes(bottom);
            if deepest <= bottom && !overfull {
                return Ok(());
            }
            level = bottom;
            bottom = self.compact_all_bottom(deepest.max(bottom + 1));
        }
    }

    /// The deepest level holding a table (at least 1).
    fn deepest_level_with_data(&self) -> usize {
        self.current()
            .version
            .levels
            .iter()
            .rposition(|l| !l.is_empty())
            .unwrap_or(0)
            .max(1)
    }

    /// Where `compact_all` puts everything: the deepest level holding data
    /// (or `from`, if deeper), or the first level below it whose target
    /// holds all of it (the last level has none). A level over its target
    /// would have a background compaction move part of the data on at
    /// once, leaving it in two levels.
    fn compact_all_bottom(&self, from: usize) -> usize {
        let version = Arc::clone(&self.current().version);
        let total: u64 = (0..version.levels.len())
            .map(|l| version.level_bytes(l))
            .sum();
        let last = version.levels.len() - 1;
        let deepest = self.deepest_level_with_data().max(from).min(last);
        (deepest..=last)
            .find(|&l| l == last || total <= self.opts.level_target_bytes(l))
            .unwrap_or(last)
    }

    /// One level of `compact_all`: moves the level's tables holding data
    /// from before the call (sequence numbers up to `before`) one level
    /// down, or, at `bottom`, rewrites in place the tables present but for
    /// `final_outputs`; adds the tables its jobs write into `bottom` to
    /// `final_outputs`.
    fn compact_all_pass(
        &self,
        level: usize,
        bottom: usize,
        before: u64,
        final_outputs: &mut HashSet<u64>,
    ) -> Result<()> {
        // The tables present now; outputs of this pass get new file numbers
        // and are not rewritten again.
        let targets: HashSet<u64> = self
            .current()
            .version
            .levels
            .get(level)
            .map(|tables| {
                tables
                    .iter()
                    .map(|t| t.record.file_number)
                    .filter(|n| level != bottom || !final_outputs.contains(n))
                    .collect()
            })
            .unwrap_or_default();
        loop {
            let pick = |db: &Self, _: &[Vec<u8>]| -> Option<CompactionJob> {
                let version = Arc::clone(&db.current().version);
                let tables = version.levels.get(level)?;
                if level == 0 {
                    // Only the tables present at the call: flushes of
                    // concurrent writes keep refilling level 0, and
                    // waiting for it to empty may never end. The others
                    // are newer than every target, so merging the
                    // targets below them keeps the lookup order.
                    let present: Vec<_> = tables
                        .iter()
                        .filter(|t| targets.contains(&t.record.file_number))
                        .cloned()
                        .collect();
                    if present.is_empty() {
                        return None;
                    }
                    let mut job = db.job_for(&version, 0, 1, present);
                    job.into_final_run = bottom == 1;
                    return Some(job);
                }
                // Above the bottom: every table holding data from before
                // the call, not only the ones present when the pass began.
                // A background compaction may meanwhile have merged a
                // target into new tables (concurrent level-0 compactions
                // take level-1 tables along); the old data is in those now.
                // Each job moves such data down and nothing brings it back
                // up, so this ends. At the bottom tables are rewritten in
                // place, so there the targets are the tables present but
                // for this call's outputs into the bottom (each rewritten
                // once).
                let output = if level == bottom { level } else { level + 1 };
                let first = tables.iter().find(|t| {
                    if level == bottom {
                        targets.contains(&t.record.file_number)
                    } else {
                        t.record.smallest_seq <= before
                    }
                })?;
                let mut job = db.job_for(&version, level, output, vec![Arc::clone(first)]);
                job.into_final_run = output == bottom;
                Some(job)
            };
            match self.claim(pick)? {
                Some(job) => {
                    let into_bottom = job.into_final_run;
                    let outputs = self.run_claimed(job)?;
                    if into_bottom {
                        final_outputs.extend(outputs);
                    }
                }
                None => return Ok(()),
            }
        }
    }

    /// Merges a job's inputs into new tables and installs them; returns
    /// their file numbers.
    pub(crate) fn run_compaction(&self, job: &CompactionJob) -> Result<Vec<u64>> {
        let all_inputs: Vec<&Arc<TableHandle>> =
            job.inputs.iter().chain(job.overlaps.iter()).collect();
        // One cursor per level-0 input (they may overlap); one cursor that
        // walks the tables in key order for the inputs of a deeper level
        // and for the output level's overlaps (sorted and disjoint there).
        // The merge compares the current keys of all its cursors at every
        // step, so a cursor per table made each step cost in proportion to
        // the tables overlapped: docs/benchmarks.md, "Compactions: one
        // cursor per level". Compaction's reads are
        // `compaction_bytes_read`, not user reads.
        let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
        // Taken from a level's table list, which `Version` keeps sorted by
        // key for every level but 0, so already in key order.
        let sorted_run = |tables: &[Arc<TableHandle>]| {
            Box::new(LevelIterator::new_uncounted(tables.to_vec())) as Box<dyn InternalIterator>
        };
        if job.level == 0 {
            for t in &job.inputs {
                children.push(Box::new(t.table.iter_uncounted()));
            }
        } else if !job.inputs.is_empty() {
            children.push(sorted_run(&job.inputs));
        }
        if !job.overlaps.is_empty() {
            children.push(sorted_run(&job.overlaps));
        }
        let mut merged = MergingIterator::new(children);
        merged.seek_to_first()?;

        let version = Arc::clone(&self.current().version);
        let deeper_levels = &version.levels[job.output_level + 1..];
        let bytes_read: u64 = all_inputs.iter().map(|t| t.record.file_size).sum();

        let consumed: Vec<u64> = all_inputs.iter().map(|t| t.record.file_number).collect();
        // An upper bound: keys (and prefixes) in several inputs count once
        // per input.
        let written = all_inputs
            .iter()
            .map(|t| t.table.filter_entries())
            .fold(0u64, u64::saturating_add);
        let filter_policy = if job.into_final_run {
            // `compact_all` is moving everything into this level.
            filter_policy_for_final_run(&self.opts, &version, job.output_level)
        } else {
            filter_policy_for_write(&self.opts, &version, &consumed, job.output_level, written)
        };
        let mut outputs: Vec<Arc<TableHandle>> = Vec::new();
        let mut builder: Option<(u64, TableBuilder)> = None;
        // The previous entry's user key, in one buffer reused for every
        // entry (a fresh `Vec` per entry was a tenth of a merge's time).
        let mut last_user: Vec<u8> = Vec::new();
        let mut have_last = false;
        let mut last_seq = 0;
        let result = (|| -> Result<()> {
            while merged.valid() {
                let key = merged.key();
                let (user, seq, kind) = decode_internal_key(key).ok_or_else(|| {
                    Error::corruption(
                        self.dir.clone(),
                        None,
                        "malformed internal key in compaction input",
                    )
                })?;
                // The merge of sorted inputs never goes back, in user key
                // or, within one key, in sequence (newest first): an input
                // table is damaged (its checksums held). Reported as that,
                // not as the builder's refusal of the caller's order, and
                // not by keeping an older version in place of a newer one
                // (found by review).
                let order = have_last.then(|| crate::key::compare_user_keys(user, &last_user));
                let older = seq < last_seq;
                last_seq = seq;
                match order {
                    Some(std::cmp::Ordering::Equal) if older => {
                        merged.next()?; // an older, shadowed version
                        continue;
                    }
                    Some(std::cmp::Ordering::Equal | std::cmp::Ordering::Less) => {
                        return Err(Error::corruption(
                            self.dir.clone(),
                            None,
                            format!(
                                "compaction input tables {consumed:?} hold keys out of order \
                                 (`verify` names the table)"
                            ),
                        ));
                    }
                    _ => {}
                }
                last_user.clear();
                last_user.extend_from_slice(user);
                have_last = true;
                if kind == ValueKind::Delete
                    && !deeper_levels
                        .iter()
                        .any(|tables| crate::version::find_covering(tables, user).is_some())
                {
                    merged.next()?; // nothing below for the tombstone to hide
                    continue;
                }
                if let Some((_, b)) = &builder {
                    if b.estimated_file_size() >= self.opts.table_bytes {
                        let (number, b) = builder.take().expect("checked");
                        outputs.push(self.finish_output(number, b, job.output_level)?);
                    }
                }
                if builder.is_none() {
                    let number = self.next_file.fetch_add(1, Ordering::SeqCst);
                    let path = self.dir.join(table_file_name(number));
                    let b = TableBuilder::new(
                        self.fs.as_ref(),
                        &path,
                        number,
                        table_options(&self.opts, Arc::clone(&filter_policy)),
                    )?;
                    builder = Some((number, b));
                }
                let (_, b) = builder.as_mut().expect("just set");
                b.add(user, seq, kind, merged.value())?;
                merged.next()?;
            }
            if let Some((number, b)) = builder.take() {
                outputs.push(self.finish_output(number, b, job.output_level)?);
            }
            Ok(())
        })();
        if let Err(e) = result {
            // Unreferenced outputs: remove them now (or at the next open).
            for o in &outputs {
                o.mark_obsolete();
            }
            if let Some((number, _)) = builder {
                let _ = self.fs.remove_file(&self.dir.join(table_file_name(number)));
            }
            return Err(e);
        }
        let bytes_written: u64 = outputs.iter().map(|t| t.record.file_size).sum();
        // The outputs' directory entries must be durable before the manifest
        // edit that names them (the edit also lets the inputs be deleted).
        if !outputs.is_empty() {
            if let Err(e) = self.fs.sync_dir(&self.dir) {
                for o in &outputs {
                    o.mark_obsolete();
                }
                return Err(Error::io(&self.dir, e));
            }
        }

        let mut bg = self.bg.lock();
        let removed: Vec<(u32, u64)> = job
            .inputs
            .iter()
            .map(|t| (job.level as u32, t.record.file_number))
            .chain(
                job.overlaps
                    .iter()
                    .map(|t| (job.output_level as u32, t.record.file_number)),
            )
            .collect();
        let edit = VersionEdit {
            added: outputs.iter().map(|t| t.record.clone()).collect(),
            removed: removed.clone(),
            next_file_number: Some(self.next_file.load(Ordering::SeqCst)),
            last_sequence: None,
            log_number: None,
        };
        // On failure the outputs are kept (not marked obsolete): the edit may
        // be in the manifest even though the call failed (appended whole,
        // then the sync failed), and then the next open needs them. If it is
        // not, that open deletes them as unreferenced.
        self.log_and_apply(&mut bg, &edit)?;
        self.install_version(|v| v.apply(&removed, outputs.clone()));
        for t in job.inputs.iter().chain(job.overlaps.iter()) {
            t.mark_obsolete();
        }
        if job.level > 0 {
            if let Some(last) = job.inputs.iter().map(|t| &t.record.largest).max() {
                bg.compact_pointer[job.level] = last.clone();
            }
        }
        drop(bg);
        self.engine.compactions.fetch_add(1, Ordering::Relaxed);
        self.engine
            .compaction_bytes_read
            .fetch_add(bytes_read, Ordering::Relaxed);
        self.engine
            .compaction_bytes_written
            .fetch_add(bytes_written, Ordering::Relaxed);
        Ok(outputs.iter().map(|t| t.record.file_number).collect())
    }

    fn finish_output(
        &self,
        number: u64,
        builder: TableBuilder,
        level: usize,
    ) -> Result<Arc<TableHandle>> {
        let path = self.dir.join(table_file_name(number));
        let handle = finish_table(builder).and_then(|meta| {
            let table = Table::open_with_cache(
                &path,
                number,
                &self.opts.filter_policy,
                Arc::clone(counters_of(&self.level_counters, level)),
                self.block_cache.clone(),
            )?;
            TableHandle::new(
                TableRecord::describing(level as u32, &meta),
                Arc::new(table),
                Arc::clone(&self.fs),
                &self.owner,
                path.clone(),
            )
        });
        if handle.is_err() {
            // No manifest names the file and no handle owns it: remove it
            // now rather than leave it to the next open (best effort).
            let _ = self.fs.remove_file(&path);
        }
        handle
    }
}
