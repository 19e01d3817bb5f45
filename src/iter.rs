//! The cursor interface shared by memtables, tables and merging iterators.
//!
//! Cursors walk *encoded internal keys* (see [`crate::key`]) in internal-key
//! order, forward with [`next`](InternalIterator::next) or backward with
//! [`prev`](InternalIterator::prev). They are positioned explicitly with
//! [`seek`](InternalIterator::seek),
//! [`seek_to_first`](InternalIterator::seek_to_first),
//! [`seek_before`](InternalIterator::seek_before) or
//! [`seek_to_last`](InternalIterator::seek_to_last) and report I/O or
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
    /// Moves to the last entry.
    fn seek_to_last(&mut self) -> Result<()>;
    /// Moves to the previous entry (invalid before the first). Requires
    /// [`valid`](Self::valid).
    fn prev(&mut self) -> Result<()>;
    /// Moves to the last entry whose encoded internal key is `< target`
    /// (strictly less: a backward scan bounded above by `target` starts
    /// there).
    fn seek_before(&mut self, target: &[u8]) -> Result<()> {
        self.seek(target)?;
        if self.valid() {
            self.prev()
        } else {
            self.seek_to_last()
        }
    }
    /// The current entry's encoded internal key. Requires `valid()`.
    fn key(&self) -> &[u8];
    /// The current entry's value (empty for tombstones). Requires `valid()`.
    fn value(&self) -> &[u8];
}
