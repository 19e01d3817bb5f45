//! Merging cursors: many sorted sources seen as one, and the user-facing
//! scan that turns internal versions into live key/value pairs.
//!
//! [`MergingIterator`] yields the union of its children in internal-key
//! order. [`LevelIterator`] walks a sorted, disjoint level table by table,
//! opening each table's cursor only when the scan reaches it. [`DbIterator`]
//! sits on top: at a sequence-number snapshot it yields each live user key
//! once, with its newest visible value, hiding tombstones and versions newer
//! than the snapshot.

use std::ops::Bound;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{
    compare_internal, decode_internal_key, encode_internal_key, SequenceNumber, ValueKind,
    MAX_SEQUENCE,
};
use crate::version::TableHandle;

/// The union of several sorted cursors, in internal-key order.
///
/// It walks one way at a time: after [`seek`](InternalIterator::seek) or
/// [`seek_to_first`](InternalIterator::seek_to_first) only forward with
/// `next`, after [`seek_before`](InternalIterator::seek_before) or
/// [`seek_to_last`](InternalIterator::seek_to_last) only backward with
/// `prev`: every child then sits on its own next (or previous) entry, so
/// the current one is the smallest (or largest) of them. A scan that walks
/// both ways ([`DbIterator`] as a double-ended iterator) uses two.
pub(crate) struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    current: Option<usize>,
    backward: bool,
}

impl MergingIterator {
    pub(crate) fn new(children: Vec<Box<dyn InternalIterator>>) -> MergingIterator {
        MergingIterator {
            children,
            current: None,
            backward: false,
        }
    }

    /// Points `current` at the child with the largest key (the mirror of
    /// [`find_smallest`](Self::find_smallest)).
    fn find_largest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, child) in self.children.iter().enumerate() {
            if !child.valid() {
                continue;
            }
            best = match best {
                Some(b) if compare_internal(self.children[b].key(), child.key()).is_ge() => Some(b),
                _ => Some(i),
            };
        }
        self.current = best;
    }

    /// Points `current` at the child with the smallest key. A handful of
    /// children (memtables, level-0 tables, one cursor per deeper level)
    /// makes a linear scan cheaper than maintaining a heap.
    fn find_smallest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, child) in self.children.iter().enumerate() {
            if !child.valid() {
                continue;
            }
            best = match best {
                Some(b) if compare_internal(self.children[b].key(), child.key()).is_le() => Some(b),
                _ => Some(i),
            };
        }
        self.current = best;
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.backward = false;
        for child in &mut self.children {
            child.seek_to_first()?;
        }
        self.find_smallest();
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.backward = false;
        for child in &mut self.children {
            child.seek(target)?;
        }
        self.find_smallest();
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        debug_assert!(!self.backward, "next after a backward positioning");
        if let Some(i) = self.current {
            self.children[i].next()?;
            self.find_smallest();
        }
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.backward = true;
        for child in &mut self.children {
            child.seek_to_last()?;
        }
        self.find_largest();
        Ok(())
    }

    fn seek_before(&mut self, target: &[u8]) -> Result<()> {
        self.backward = true;
        for child in &mut self.children {
            child.seek_before(target)?;
        }
        self.find_largest();
        Ok(())
    }

    fn prev(&mut self) -> Result<()> {
        debug_assert!(self.backward, "prev after a forward positioning");
        if let Some(i) = self.current {
            self.children[i].prev()?;
            self.find_largest();
        }
        Ok(())
    }

    fn key(&self) -> &[u8] {
        match self.current {
            Some(i) => self.children[i].key(),
            None => &[],
        }
    }

    fn value(&self) -> &[u8] {
        match self.current {
            Some(i) => self.children[i].value(),
            None => &[],
        }
    }
}

/// A cursor over a sorted, disjoint level that opens one table at a time.
pub(crate) struct LevelIterator {
    tables: Vec<Arc<TableHandle>>,
    index: usize,
    current: Option<Box<dyn InternalIterator>>,
    /// Whether the tables' block reads count as user reads (a scan) or not
    /// (a compaction's input).
    counted: bool,
}

impl LevelIterator {
    /// A cursor over `tables`, sorted by key and disjoint, whose block reads
    /// count as user reads.
    pub(crate) fn new(tables: Vec<Arc<TableHandle>>) -> LevelIterator {
        LevelIterator {
            tables,
            index: 0,
            current: None,
            counted: true,
        }
    }

    /// As [`new`](Self::new), for a compaction's input: block reads are
    /// not counted as user reads.
    pub(crate) fn new_uncounted(tables: Vec<Arc<TableHandle>>) -> LevelIterator {
        LevelIterator {
            counted: false,
            ..LevelIterator::new(tables)
        }
    }

    fn open(&mut self, index: usize) {
        self.index = index;
        let counted = self.counted;
        self.current = self.tables.get(index).map(|t| {
            Box::new(if counted {
                t.table.iter()
            } else {
                t.table.iter_uncounted()
            }) as Box<dyn InternalIterator>
        });
    }

    /// Moves to preceding tables until one has an entry.
    fn skip_exhausted_back(&mut self) -> Result<()> {
        while let Some(cur) = &self.current {
            if cur.valid() {
                break;
            }
            let Some(before) = self.index.checked_sub(1) else {
                break;
            };
            self.open(before);
            if let Some(cur) = &mut self.current {
                cur.seek_to_last()?;
            }
        }
        Ok(())
    }

    /// Moves to following tables until one has an entry.
    fn skip_exhausted(&mut self) -> Result<()> {
        while let Some(cur) = &self.current {
            if cur.valid() {
                break;
            }
            self.open(self.index + 1);
            if let Some(cur) = &mut self.current {
                cur.seek_to_first()?;
            }
        }
        Ok(())
    }
}

impl InternalIterator for LevelIterator {
    fn valid(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.valid())
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.open(0);
        if let Some(cur) = &mut self.current {
            cur.seek_to_first()?;
        }
        self.skip_exhausted()
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let user = decode_internal_key(target)
            .map(|(u, _, _)| u)
            .unwrap_or(target);
        let idx = self
            .tables
            .partition_point(|t| t.record.largest.as_slice() < user);
        self.open(idx);
        if let Some(cur) = &mut self.current {
            cur.seek(target)?;
        }
        self.skip_exhausted()
    }

    fn next(&mut self) -> Result<()> {
        if let Some(cur) = &mut self.current {
            cur.next()?;
        }
        self.skip_exhausted()
    }

    fn seek_to_last(&mut self) -> Result<()> {
        let Some(last) = self.tables.len().checked_sub(1) else {
            self.current = None;
            return Ok(());
        };
        self.open(last);
        if let Some(cur) = &mut self.current {
            cur.seek_to_last()?;
        }
        self.skip_exhausted_back()
    }

    fn prev(&mut self) -> Result<()> {
        if let Some(cur) = &mut self.current {
            cur.prev()?;
        }
        self.skip_exhausted_back()
    }

    fn key(&self) -> &[u8] {
        self.current.as_ref().map(|c| c.key()).unwrap_or(&[])
    }

    fn value(&self) -> &[u8] {
        self.current.as_ref().map(|c| c.value()).unwrap_or(&[])
    }
}

/// Builds a fresh merged cursor over a scan's sources (memtables and
/// tables of one pinned read view). It owns what it reads from, so the
/// files stay alive as long as the scan does.
pub(crate) type CursorSource = Box<dyn Fn() -> MergingIterator + Send + Sync>;

/// A range scan over the database at a point-in-time snapshot.
///
/// Yields `(key, value)` pairs in ascending key order, each live key once
/// with its newest value as of the moment the scan started; writes, flushes
/// and compactions that happen while it runs do not affect it. Returned by
/// [`Db::scan`](crate::Db::scan), [`Db::scan_prefix`](crate::Db::scan_prefix),
/// [`Db::iter`](crate::Db::iter) and the same methods of
/// [`Snapshot`](crate::Snapshot).
///
/// It is also a [`DoubleEndedIterator`]: `.rev()` yields the same pairs in
/// descending key order, and `next` and `next_back` can be mixed; the two
/// ends meet and then both return `None`. Each end has its own cursor,
/// created on its first use: a scan read only forward never pays for the
/// backward one.
///
/// After an error (I/O or corruption) the iterator returns `None` from
/// both ends.
pub struct DbIterator {
    cursors: CursorSource,
    front: Option<MergingIterator>,
    back: Option<MergingIterator>,
    snapshot: SequenceNumber,
    /// The scan's lower bound (the back end also stops at
    /// `last_user_key`, where the front end has got to).
    lower: Bound<Vec<u8>>,
    /// Keys the back end may still yield end here; it becomes
    /// `Excluded(k)` once the back yields `k`, which stops the front end.
    upper: Bound<Vec<u8>>,
    done: bool,
    /// The last user key the front end decided on (yielded, or found
    /// deleted); every key up to it is the front's.
    last_user_key: Option<Vec<u8>>,
}

impl DbIterator {
    pub(crate) fn new(
        cursors: CursorSource,
        snapshot: SequenceNumber,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
    ) -> DbIterator {
        DbIterator {
            cursors,
            front: None,
            back: None,
            snapshot,
            lower,
            upper,
            done: false,
            last_user_key: None,
        }
    }

    /// The front cursor, created and positioned at the lower bound on
    /// first use.
    fn start_front(&mut self) -> Result<()> {
        if self.front.is_none() {
            let mut cursor = (self.cursors)();
            match &self.lower {
                Bound::Unbounded => cursor.seek_to_first()?,
                Bound::Included(k) | Bound::Excluded(k) => {
                    let mut target = Vec::with_capacity(k.len() + 8);
                    encode_internal_key(&mut target, k, MAX_SEQUENCE, ValueKind::Put);
                    if let Bound::Excluded(k) = &self.lower {
                        self.last_user_key = Some(k.clone());
                    }
                    cursor.seek(&target)?;
                }
            }
            self.front = Some(cursor);
        }
        Ok(())
    }

    /// The back cursor, created and positioned at the upper bound on first
    /// use: on the last entry of the last user key the bound admits.
    fn start_back(&mut self) -> Result<()> {
        if self.back.is_none() {
            let mut cursor = (self.cursors)();
            let mut target = Vec::new();
            match &self.upper {
                Bound::Unbounded => cursor.seek_to_last()?,
                // Every entry of a key `<= u` sorts before the newest
                // possible version of `u ++ [0]`, the smallest longer key.
                Bound::Included(u) => {
                    let mut next_key = Vec::with_capacity(u.len() + 1);
                    next_key.extend_from_slice(u);
                    next_key.push(0);
                    encode_internal_key(&mut target, &next_key, MAX_SEQUENCE, ValueKind::Put);
                    cursor.seek_before(&target)?;
                }
                // ... and every entry of a key `< u` before that of `u`.
                Bound::Excluded(u) => {
                    encode_internal_key(&mut target, u, MAX_SEQUENCE, ValueKind::Put);
                    cursor.seek_before(&target)?;
                }
            }
            self.back = Some(cursor);
        }
        Ok(())
    }

    /// The next live pair from the front end.
    fn advance(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.start_front()?;
        let snapshot = self.snapshot;
        loop {
            let Some(cursor) = self.front.as_mut().filter(|c| c.valid()) else {
                return Ok(None);
            };
            let (user, seq, kind) =
                decode_internal_key(cursor.key()).ok_or_else(scan_corruption)?;
            // Before the version checks: entries past the bound (newer
            // than the snapshot or not) are never the scan's to walk.
            if past_upper(&self.upper, user) {
                return Ok(None);
            }
            if seq > snapshot || self.last_user_key.as_deref() == Some(user) {
                cursor.next()?;
                continue;
            }
            // The newest visible version of a new user key.
            let user = user.to_vec();
            let item = match kind {
                ValueKind::Put => Some((user.clone(), cursor.value().to_vec())),
                ValueKind::Delete => None,
            };
            cursor.next()?;
            self.last_user_key = Some(user);
            if item.is_some() {
                return Ok(item);
            }
        }
    }

    /// The next live pair from the back end. Walking backward, a user
    /// key's versions come oldest first, so the visible one is the last
    /// version at or below the snapshot before the key changes.
    fn retreat(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.start_back()?;
        let snapshot = self.snapshot;
        loop {
            let Some(cursor) = self.back.as_mut().filter(|c| c.valid()) else {
                return Ok(None);
            };
            let (user, _, _) = decode_internal_key(cursor.key()).ok_or_else(scan_corruption)?;
            let user = user.to_vec();
            // Keys up to the last one the front end decided on (yielded,
            // or found deleted) are the front's.
            if before_lower(&self.lower, &user)
                || self
                    .last_user_key
                    .as_deref()
                    .is_some_and(|front| user.as_slice() <= front)
            {
                return Ok(None);
            }
            // Stepping back meets the key's versions oldest first, so the
            // newest visible one is the last seen at or below the snapshot:
            // each visible put's value is copied into one buffer, which
            // grows to the largest and is not allocated again (as LevelDB's
            // backward step does; the cursor cannot come back to it).
            let mut newest: Option<ValueKind> = None;
            let mut value = Vec::new();
            while cursor.valid() {
                let (u, seq, kind) =
                    decode_internal_key(cursor.key()).ok_or_else(scan_corruption)?;
                if u != user.as_slice() {
                    break;
                }
                if seq <= snapshot {
                    if kind == ValueKind::Put {
                        value.clear();
                        value.extend_from_slice(cursor.value());
                    }
                    newest = Some(kind);
                }
                cursor.prev()?;
            }
            if newest == Some(ValueKind::Put) {
                self.upper = Bound::Excluded(user.clone());
                return Ok(Some((user, value)));
            }
        }
    }

    /// Turns one end's step into the iterator's answer; the scan ends (at
    /// both ends) at the first `None` or error.
    fn finish(
        &mut self,
        step: Result<Option<(Vec<u8>, Vec<u8>)>>,
    ) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        match step {
            Ok(Some(item)) => Some(Ok(item)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

fn past_upper(upper: &Bound<Vec<u8>>, user_key: &[u8]) -> bool {
    match upper {
        Bound::Unbounded => false,
        Bound::Included(u) => user_key > u.as_slice(),
        Bound::Excluded(u) => user_key >= u.as_slice(),
    }
}

fn before_lower(lower: &Bound<Vec<u8>>, user_key: &[u8]) -> bool {
    match lower {
        Bound::Unbounded => false,
        Bound::Included(l) => user_key < l.as_slice(),
        Bound::Excluded(l) => user_key <= l.as_slice(),
    }
}

fn scan_corruption() -> Error {
    Error::corruption("<scan>", None, "malformed internal key in scan")
}

impl Iterator for DbIterator {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = self.advance();
        self.finish(step)
    }
}

impl DoubleEndedIterator for DbIterator {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = self.retreat();
        self.finish(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memtable::Memtable;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A cursor that counts the entries stepped over.
    struct Counting {
        inner: Box<dyn InternalIterator>,
        steps: Arc<AtomicUsize>,
    }

    impl InternalIterator for Counting {
        fn valid(&self) -> bool {
            self.inner.valid()
        }
        fn seek_to_first(&mut self) -> Result<()> {
            self.inner.seek_to_first()
        }
        fn seek(&mut self, target: &[u8]) -> Result<()> {
            self.inner.seek(target)
        }
        fn next(&mut self) -> Result<()> {
            self.steps.fetch_add(1, Ordering::Relaxed);
            self.inner.next()
        }
        fn seek_to_last(&mut self) -> Result<()> {
            self.inner.seek_to_last()
        }
        fn prev(&mut self) -> Result<()> {
            self.steps.fetch_add(1, Ordering::Relaxed);
            self.inner.prev()
        }
        fn key(&self) -> &[u8] {
            self.inner.key()
        }
        fn value(&self) -> &[u8] {
            self.inner.value()
        }
    }

    /// Regression (found by review, sixteenth session): the front end
    /// skipped entries newer than its snapshot before checking its upper
    /// bound, so a bounded scan, once past its last key, stepped over every
    /// newer entry beyond the bound (a long-lived snapshot's small scans
    /// each walked the rest of the memtable). The bound now comes first.
    #[test]
    fn a_bounded_scan_stops_at_its_bound_before_newer_entries() {
        let mem = Arc::new(Memtable::new(0));
        mem.insert(b"a", 1, ValueKind::Put, b"1");
        for i in 0..1_000u32 {
            let key = format!("b{i:04}");
            mem.insert(key.as_bytes(), 2 + u64::from(i), ValueKind::Put, b"v");
        }
        let steps = Arc::new(AtomicUsize::new(0));
        let source: CursorSource = {
            let (mem, steps) = (Arc::clone(&mem), Arc::clone(&steps));
            Box::new(move || {
                MergingIterator::new(vec![Box::new(Counting {
                    inner: Box::new(mem.iter()),
                    steps: Arc::clone(&steps),
                })])
            })
        };
        // Snapshot 1: only `a` is visible; the scan is `a..=a`.
        let mut scan = DbIterator::new(
            source,
            1,
            Bound::Included(b"a".to_vec()),
            Bound::Included(b"a".to_vec()),
        );
        assert_eq!(
            scan.next().unwrap().unwrap(),
            (b"a".to_vec(), b"1".to_vec())
        );
        assert!(scan.next().is_none());
        let stepped = steps.load(Ordering::Relaxed);
        assert!(stepped <= 2, "stepped over {stepped} entries of 1,001");
    }
}
