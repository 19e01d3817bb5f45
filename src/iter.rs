//! The cursor interface shared by memtables, tables and merging iterators.
//!
//! Cursors walk *encoded internal keys* (see [`crate::key`]) in internal-key
//! order. They are positioned explicitly with [`seek`](InternalIterator::seek)
//! or [`seek_to_first`](InternalIterator::seek_to_first) and report I/O or
//! corruption as errors from the call that hit it.

use crate::error::Result;

/// A cursor over encoded internal keys in internal-key order.
pub trait InternalIterator: Send {
    /// True while the cursor is on an entry.
    fn valid(&self) -> bool;
    /// Moves to the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
    /// Moves to the first entry whose encoded internal key is `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Moves to the next entry. Requires [`valid`](Self::valid).
    fn next(&mut self) -> Result<()>;
    /// The current entry's encoded internal key. Requires `valid()`.
    fn key(&self) -> &[u8];
    /// The current entry's value (empty for tombstones). Requires `valid()`.
    fn value(&self) -> &[u8];
}
