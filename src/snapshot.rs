//! Snapshots: a pinned, read-only view of the database at one sequence
//! number.
//!
//! A snapshot holds the super version (memtable, frozen memtables, table
//! set) current when it was taken and the sequence number published then.
//! Later writes carry higher sequence numbers and are skipped; later
//! flushes and compactions build new super versions and leave the pinned
//! one as it was: its memtables stay in memory and its table files stay on
//! disk (a table whose file compaction made obsolete is deleted when the
//! last handle to it drops), so every read through the snapshot answers
//! from the data of its moment.

use std::ops::RangeBounds;
use std::sync::Arc;

use crate::db::{owned_bounds, prefix_bounds, DbInner, SuperVersion};
use crate::error::Result;
use crate::key::SequenceNumber;
use crate::merge::DbIterator;
use crate::stats::ReadCost;

/// A read-only view of a [`Db`](crate::Db) as of the moment
/// [`Db::snapshot`](crate::Db::snapshot) was called.
///
/// Reads through it count in [`Db::stats`](crate::Db::stats) like any
/// other read and feed [`Db::hot_keys`](crate::Db::hot_keys). It pins the
/// memtables and table files of its moment until dropped. It owns what it
/// reads (no borrow of the `Db`): it may be sent to another thread, kept
/// beside an `Arc<Db>`, and read after the database was closed (the
/// directory's `LOCK` goes with the `Db` handle, not with snapshots). After
/// close it holds only its own moment, its reads move the closed
/// instance's counters (which no one reads any more), and the files it
/// pinned are left for the next open to remove.
pub struct Snapshot {
    inner: Arc<DbInner>,
    sv: Arc<SuperVersion>,
    sequence: SequenceNumber,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("sequence", &self.sequence)
            .finish()
    }
}

impl Snapshot {
    pub(crate) fn new(
        inner: Arc<DbInner>,
        sv: Arc<SuperVersion>,
        sequence: SequenceNumber,
    ) -> Snapshot {
        Snapshot {
            inner,
            sv,
            sequence,
        }
    }

    /// The sequence number of the last write the snapshot sees (0 for an
    /// empty database): every write numbered at or below it is visible,
    /// none above it. A later snapshot has an equal or higher one.
    pub fn sequence(&self) -> SequenceNumber {
        self.sequence
    }

    /// The value of `key` as of the snapshot, or `None` if it was absent or
    /// deleted then.
    ///
    /// Fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for an empty key or one longer than
    /// [`Options::max_key_bytes`](crate::Options::max_key_bytes).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.inner.get_in(&self.sv, self.sequence, key.as_ref())
    }

    /// [`get`](Self::get), with what this read alone cost, as
    /// [`Db::get_with_cost`](crate::Db::get_with_cost) reports it.
    pub fn get_with_cost(&self, key: impl AsRef<[u8]>) -> Result<(Option<Vec<u8>>, ReadCost)> {
        let mut cost = ReadCost::default();
        let value = self
            .inner
            .get_in_costed(&self.sv, self.sequence, key.as_ref(), &mut cost)?;
        Ok((value, cost))
    }

    /// The values of `keys` as of the snapshot: answer `i` is what
    /// [`get`](Self::get)`(keys[i])` returns. Every key is validated before
    /// anything is read.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        self.inner.multi_get_in(&self.sv, self.sequence, keys)
    }

    /// The keys in `range` as of the snapshot, ascending. The iterator
    /// holds its own pin: it stays valid after the snapshot is dropped.
    pub fn scan<K, R>(&self, range: R) -> Result<DbIterator>
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        let (lower, upper) = owned_bounds(&range);
        Ok(self
            .inner
            .scan_in(Arc::clone(&self.sv), self.sequence, lower, upper, None))
    }

    /// The keys starting with `prefix` as of the snapshot, ascending, with
    /// the table skipping of [`Db::scan_prefix`](crate::Db::scan_prefix).
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIterator> {
        let prefix = prefix.as_ref();
        let (lower, upper) = prefix_bounds(prefix);
        Ok(self.inner.scan_in(
            Arc::clone(&self.sv),
            self.sequence,
            lower,
            upper,
            Some(prefix),
        ))
    }

    /// The whole key space as of the snapshot, ascending.
    pub fn iter(&self) -> Result<DbIterator> {
        self.scan::<&[u8], _>(..)
    }
}
