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
pub(crate) struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    current: Option<usize>,
}

impl MergingIterator {
    pub(crate) fn new(children: Vec<Box<dyn InternalIterator>>) -> MergingIterator {
        MergingIterator {
            children,
            current: None,
        }
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
        for child in &mut self.children {
            child.seek_to_first()?;
        }
        self.find_smallest();
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        for child in &mut self.children {
            child.seek(target)?;
        }
        self.find_smallest();
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        if let Some(i) = self.current {
            self.children[i].next()?;
            self.find_smallest();
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
}

impl LevelIterator {
    pub(crate) fn new(tables: Vec<Arc<TableHandle>>) -> LevelIterator {
        LevelIterator {
            tables,
            index: 0,
            current: None,
        }
    }

    fn open(&mut self, index: usize) {
        self.index = index;
        self.current = self
            .tables
            .get(index)
            .map(|t| Box::new(t.table.iter()) as Box<dyn InternalIterator>);
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

    fn key(&self) -> &[u8] {
        self.current.as_ref().map(|c| c.key()).unwrap_or(&[])
    }

    fn value(&self) -> &[u8] {
        self.current.as_ref().map(|c| c.value()).unwrap_or(&[])
    }
}

/// A range scan over the database at a point-in-time snapshot.
///
/// Yields `(key, value)` pairs in ascending key order, each live key once
/// with its newest value as of the moment the scan started; writes, flushes
/// and compactions that happen while it runs do not affect it. Returned by
/// [`Db::scan`](crate::Db::scan) and [`Db::iter`](crate::Db::iter).
pub struct DbIterator {
    // Keeps memtables and table files alive for the scan's lifetime.
    _pin: Box<dyn Send + Sync>,
    inner: MergingIterator,
    snapshot: SequenceNumber,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    started: bool,
    done: bool,
    last_user_key: Option<Vec<u8>>,
}

impl DbIterator {
    pub(crate) fn new(
        pin: Box<dyn Send + Sync>,
        inner: MergingIterator,
        snapshot: SequenceNumber,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
    ) -> DbIterator {
        DbIterator {
            _pin: pin,
            inner,
            snapshot,
            lower,
            upper,
            started: false,
            done: false,
            last_user_key: None,
        }
    }

    fn start(&mut self) -> Result<()> {
        self.started = true;
        match &self.lower {
            Bound::Unbounded => self.inner.seek_to_first(),
            Bound::Included(k) | Bound::Excluded(k) => {
                let mut target = Vec::with_capacity(k.len() + 8);
                encode_internal_key(&mut target, k, MAX_SEQUENCE, ValueKind::Put);
                if let Bound::Excluded(k) = &self.lower {
                    self.last_user_key = Some(k.clone());
                }
                self.inner.seek(&target)
            }
        }
    }

    fn past_upper(&self, user_key: &[u8]) -> bool {
        match &self.upper {
            Bound::Unbounded => false,
            Bound::Included(u) => user_key > u.as_slice(),
            Bound::Excluded(u) => user_key >= u.as_slice(),
        }
    }

    fn advance(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if !self.started {
            self.start()?;
        }
        while self.inner.valid() {
            let (user, seq, kind) = decode_internal_key(self.inner.key()).ok_or_else(|| {
                Error::corruption("<scan>", None, "malformed internal key in scan")
            })?;
            if seq > self.snapshot || self.last_user_key.as_deref() == Some(user) {
                self.inner.next()?;
                continue;
            }
            if self.past_upper(user) {
                return Ok(None);
            }
            // The newest visible version of a new user key.
            let user = user.to_vec();
            let item = match kind {
                ValueKind::Put => Some((user.clone(), self.inner.value().to_vec())),
                ValueKind::Delete => None,
            };
            self.last_user_key = Some(user);
            self.inner.next()?;
            if item.is_some() {
                return Ok(item);
            }
        }
        Ok(None)
    }
}

impl Iterator for DbIterator {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.advance() {
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
