//! A cursor over a table's entries for range scans and compactions.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use super::block::{BlockCorruption, BlockView};
use super::reader::{trailer_of, BlockBytes, Table};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::TRAILER_LEN;

/// A cursor over one table's entries in internal-key order.
///
/// Owns an `Arc<Table>`, so it stays usable after the version that handed
/// the table out is gone. Each data block it loads is counted in the
/// table's `data_block_reads` and `bytes_read` and checksummed (or taken,
/// already verified, from the block cache); damage is returned as
/// [`Error::Corruption`] from the call that read it (a seek,
/// [`next`](InternalIterator::next) or [`prev`](InternalIterator::prev)),
/// after which the cursor is invalid.
#[derive(Debug)]
pub struct TableIter {
    table: Arc<Table>,
    /// Index of the loaded data block.
    block: usize,
    /// The loaded block (already checksummed when it was loaded).
    contents: Loaded,
    /// Offset, inside the loaded block, of the current entry.
    start: usize,
    /// Offset, inside the loaded block, of the entry after the current one.
    next_pos: usize,
    /// The current entry's encoded internal key.
    key: Vec<u8>,
    /// The current entry's value, as a range of the mapped file.
    value: Range<usize>,
    valid: bool,
    /// Whether block reads move the table's read counters.
    counted: bool,
    /// The restart interval a backward step decoded, in order, for the
    /// steps back that follow (each pops one instead of decoding the
    /// interval again): (offset, key range in `back_keys`, value range in
    /// the block, offset of the next entry). Only for the loaded block.
    back: Vec<(usize, Range<usize>, Range<usize>, usize)>,
    back_keys: Vec<u8>,
}

impl TableIter {
    pub(crate) fn new(table: Arc<Table>, counted: bool) -> TableIter {
        TableIter {
            counted,
            table,
            block: 0,
            contents: Loaded::default(),
            start: 0,
            next_pos: 0,
            key: Vec::new(),
            value: 0..0,
            valid: false,
            back: Vec::new(),
            back_keys: Vec::new(),
        }
    }

    /// The table this cursor reads.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// Reads block `i` (counted, checksummed) and makes it the loaded block.
    /// `false` past the last block.
    fn load(&mut self, i: usize) -> Result<bool> {
        let Some(entry) = self.table.index_entry(i) else {
            return Ok(false);
        };
        let handle = entry.handle;
        let start = handle.offset as usize;
        let bytes = if self.counted {
            self.table.read_data_block(handle, SCANS_FILL_CACHE)?
        } else {
            self.table.data_block_uncounted(handle)?
        };
        self.contents = match bytes {
            BlockBytes::Mapped(b) => Loaded::mapped(start, b.len()),
            BlockBytes::Owned(b) => Loaded {
                start,
                end: start + b.len(),
                owned: Some(b),
            },
        };
        self.block = i;
        self.next_pos = 0;
        self.back.clear();
        Ok(true)
    }

    /// Decodes the entry at `next_pos` of the loaded block, if any.
    fn step(&mut self) -> Result<bool> {
        // Borrows fields separately (no `Arc` clone per entry): the block
        // bytes come from `self.table` while `self.key` is rewritten.
        let base = self.contents.start;
        let path = self.table.path();
        let view = loaded_block(&self.table, &self.contents).map_err(|c| corruption(path, c))?;
        if self.next_pos >= view.entries_end() {
            return Ok(false);
        }
        let (value, next) = view
            .next_into(self.next_pos, &mut self.key)
            .map_err(|c| corruption(path, c))?;
        self.value = base + value.start..base + value.end;
        self.start = self.next_pos;
        self.next_pos = next;
        Ok(true)
    }

    /// Decodes the entry before offset `pos` of the loaded block (before
    /// its end with `None`), if any: from the interval a previous step
    /// back decoded when it holds that entry, otherwise by decoding the
    /// restart interval before `pos` and keeping it.
    fn step_back(&mut self, pos: Option<usize>) -> Result<bool> {
        let base = self.contents.start;
        let path = self.table.path();
        let view = loaded_block(&self.table, &self.contents).map_err(|c| corruption(path, c))?;
        let pos = pos.unwrap_or(view.entries_end());
        if self.back.last().is_none_or(|e| e.3 != pos) {
            self.back.clear();
            self.back_keys.clear();
            let (back, back_keys) = (&mut self.back, &mut self.back_keys);
            view.entries_before(pos, &mut self.key, |start, key, value, next| {
                let key_start = back_keys.len();
                back_keys.extend_from_slice(key);
                back.push((start, key_start..back_keys.len(), value, next));
            })
            .map_err(|c| corruption(path, c))?;
        }
        let Some((start, key, value, next)) = self.back.pop() else {
            return Ok(false);
        };
        self.key.clear();
        self.key.extend_from_slice(&self.back_keys[key]);
        self.value = base + value.start..base + value.end;
        self.start = start;
        self.next_pos = next;
        Ok(true)
    }

    /// Positions on the last entry at or before block `i` (invalid if
    /// there is none).
    fn last_from_block(&mut self, mut i: usize) -> Result<()> {
        self.valid = false;
        loop {
            if !self.load(i)? {
                return Ok(());
            }
            if self.step_back(None)? {
                self.valid = true;
                return Ok(());
            }
            let Some(before) = i.checked_sub(1) else {
                return Ok(());
            };
            i = before;
        }
    }

    /// Positions on the first entry at or after block `i`.
    fn first_from_block(&mut self, mut i: usize) -> Result<()> {
        self.valid = false;
        while self.load(i)? {
            self.key.clear();
            if self.step()? {
                self.valid = true;
                return Ok(());
            }
            i += 1;
        }
        Ok(())
    }

    fn fail<T>(&mut self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.valid = false;
        }
        r
    }
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.valid
    }

    fn seek_to_first(&mut self) -> Result<()> {
        let r = self.first_from_block(0);
        self.fail(r)
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.valid = false;
        if target.len() < TRAILER_LEN {
            return Err(Error::invalid(format!(
                "seek target of {} bytes is not an encoded internal key",
                target.len()
            )));
        }
        let user_key = &target[..target.len() - TRAILER_LEN];
        let trailer = trailer_of(target);
        let i = self.table.find_block(user_key, trailer);
        let loaded = self.load(i);
        if !self.fail(loaded)? {
            return Ok(()); // every key is smaller than the target
        }
        let base = self.contents.start;
        let path = self.table.path();
        let sought = loaded_block(&self.table, &self.contents)
            .and_then(|view| view.seek(user_key, trailer, &mut self.key))
            .map_err(|c| corruption(path, c));
        let r = match sought {
            Ok(r) => r,
            Err(e) => {
                self.valid = false;
                return Err(e);
            }
        };
        match r.hit {
            Some((value, next)) => {
                self.value = base + value.start..base + value.end;
                self.start = r.hit_start;
                self.next_pos = next;
                self.valid = true;
                Ok(())
            }
            None => Err(Error::corruption(
                path,
                Some(base as u64),
                "data block holds no key up to its index key",
            )),
        }
    }

    fn next(&mut self) -> Result<()> {
        if !self.valid {
            return Err(Error::invalid("next on an invalid table iterator"));
        }
        let r = match self.step() {
            Ok(true) => Ok(()),
            Ok(false) => self.first_from_block(self.block + 1),
            Err(e) => Err(e),
        };
        self.fail(r)
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.valid = false;
        let Some(last) = self.table.data_blocks().checked_sub(1) else {
            return Ok(());
        };
        let r = self.last_from_block(last);
        self.fail(r)
    }

    fn prev(&mut self) -> Result<()> {
        if !self.valid {
            return Err(Error::invalid("prev on an invalid table iterator"));
        }
        let r = match self.step_back(Some(self.start)) {
            Ok(true) => Ok(()),
            Ok(false) => match self.block.checked_sub(1) {
                Some(before) => self.last_from_block(before),
                None => {
                    self.valid = false;
                    Ok(())
                }
            },
            Err(e) => Err(e),
        };
        self.fail(r)
    }

    fn key(&self) -> &[u8] {
        &self.key
    }

    fn value(&self) -> &[u8] {
        match &self.contents.owned {
            Some(b) => self
                .value
                .start
                .checked_sub(self.contents.start)
                .and_then(|at| b.get(at..at + self.value.len()))
                .unwrap_or_default(),
            None => self
                .table
                .mmap_bytes()
                .get(self.value.clone())
                .unwrap_or_default(),
        }
    }
}

/// Whether scans put the blocks they read from the file into the block
/// cache (RocksDB's `fill_cache`). They always use blocks already cached.
/// No: a long scan would evict the point reads' working set with blocks
/// read once, and copying each block into the cache cost scans more than
/// later hits saved (docs/benchmarks.md, "Block cache").
const SCANS_FILL_CACHE: bool = false;

/// Where the loaded block's bytes are: `start..end` of the mapped file,
/// or an owned copy (the block cache's, or a decompressed block) whose
/// byte `i` stands for file offset `start + i`.
#[derive(Debug, Default)]
struct Loaded {
    start: usize,
    end: usize,
    owned: Option<Arc<[u8]>>,
}

impl Loaded {
    fn mapped(start: usize, len: usize) -> Loaded {
        Loaded {
            start,
            end: start + len,
            owned: None,
        }
    }
}

/// The block loaded by [`TableIter::load`] (its checksum was verified
/// then, or it came from the block cache), as a view over the table's
/// mapped bytes or the owned copy. A free function so the caller can keep
/// writing the iterator's other fields while it is borrowed.
fn loaded_block<'a>(
    table: &'a Table,
    contents: &'a Loaded,
) -> std::result::Result<BlockView<'a>, BlockCorruption> {
    let bytes = match &contents.owned {
        Some(b) => b,
        None => table
            .mmap_bytes()
            .get(contents.start..contents.end)
            .unwrap_or_default(),
    };
    BlockView::parse(bytes, contents.start as u64)
}

fn corruption(path: &Path, c: BlockCorruption) -> Error {
    Error::corruption(path, Some(c.offset), c.reason)
}
