//! Opens a table file and answers point reads.
//!
//! At open the file is memory-mapped, the footer validated and the index,
//! filter and properties blocks read and checksummed once; afterwards a point
//! read touches the file only for the one data block it needs, and only when
//! the filter does not rule the key out.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::block::{cmp_internal_parts, user_part, BlockCorruption, BlockView};
use super::format::{
    block_crc, block_crc_v2, decode_properties, decode_u64_property, lz4_decompress_block,
    trailer_len, BlockHandle, Footer, BLOCK_TYPE_LZ4, BLOCK_TYPE_RAW, FOOTER_LEN, FORMAT_VERSION_2,
    PROP_DATA_BLOCKS, PROP_DISTINCT_KEYS, PROP_DISTINCT_PREFIXES, PROP_ENTRIES,
    PROP_FILTER_BITS_PER_KEY, PROP_FILTER_BYTES, PROP_FILTER_POLICY, PROP_LARGEST_KEY,
    PROP_LARGEST_SEQ, PROP_PREFIX_LEN, PROP_SMALLEST_KEY, PROP_SMALLEST_SEQ, PROP_TOMBSTONES,
};
use super::iter::TableIter;
use super::{Found, TableMeta, MAX_KEY_LEN};
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::filter::{prefix_hash, Filter, FilterPolicy, BUILTIN_NAME_PREFIX};
use crate::key::{
    pack_trailer, unpack_trailer, SequenceNumber, ValueKind, MAX_SEQUENCE, TRAILER_LEN,
};
use crate::stats::{ReadCost, ReadCounters};

/// One index entry held in memory: the last key of a data block and where
/// the block lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexEntry {
    /// Range of the block's last encoded internal key in `index_keys`.
    pub(crate) key_start: usize,
    pub(crate) key_end: usize,
    pub(crate) handle: BlockHandle,
}

/// An open, immutable table file.
pub struct Table {
    path: PathBuf,
    mmap: Mmap,
    /// The table's format version (from the footer): 1 or 2.
    version: u32,
    meta: TableMeta,
    properties: BTreeMap<String, Vec<u8>>,
    filter: Filter,
    /// The prefix length the filter also holds prefixes of
    /// ([`PROP_PREFIX_LEN`]), if any.
    prefix_len: Option<usize>,
    /// Distinct prefixes the filter holds ([`PROP_DISTINCT_PREFIXES`]; 0
    /// without prefixes).
    distinct_prefixes: u64,
    index: Vec<IndexEntry>,
    index_keys: Vec<u8>,
    pub(crate) counters: Arc<ReadCounters>,
    /// The database's block cache, if it has one: point reads and scans
    /// look data blocks up in it, and point reads fill it.
    cache: Option<Arc<BlockCache>>,
}

impl Drop for Table {
    /// Erases the table's blocks from the block cache: a table is dropped
    /// when its file is obsolete (compacted away) or the database closes,
    /// and its blocks would otherwise hold memory until evicted.
    fn drop(&mut self) {
        if let Some(cache) = &self.cache {
            let file = self.meta.file_number;
            for e in &self.index {
                cache.remove(file, e.handle.offset);
            }
        }
    }
}

/// Where [`Table::read_data_block_from`] found a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockSource {
    /// The table has no block cache: read from the file.
    File,
    /// The block cache held it.
    Cache,
    /// The block cache did not hold it: read from the file.
    CacheMiss,
}

/// The verified contents of a data block: a view of the mapped file, or an
/// owned buffer (a block decompressed after its checksum matched, or the
/// block cache's copy, verified and decompressed when it entered the cache).
pub(crate) enum BlockBytes<'a> {
    /// Read from the mapped file (its checksum just matched).
    Mapped(&'a [u8]),
    /// A decompressed block or the block cache's copy.
    Owned(Arc<[u8]>),
}

impl BlockBytes<'_> {
    /// The block's contents.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            BlockBytes::Mapped(b) => b,
            BlockBytes::Owned(b) => b,
        }
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.path)
            .field("meta", &self.meta)
            .field("filter", &self.filter)
            .field("data_blocks", &self.index.len())
            .finish()
    }
}

thread_local! {
    /// Reused buffer for the prefix-decompressed key a point read scans, so
    /// `get` allocates nothing but the value it returns.
    static GET_KEY_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Table {
    /// Memory-maps the file, validates the footer, and reads and checksums
    /// the index, filter and properties blocks once. `current_policy`
    /// decodes filters recorded under a custom (non-`"sievedb."`) policy
    /// name (see [`Filter::for_policy`]). `counters` are updated by
    /// [`get`](Self::get) and iterators.
    ///
    /// Damage anywhere in those blocks or the footer (checksum mismatch,
    /// truncation, bad magic, unknown version, inconsistent handles or
    /// properties) is [`Error::Corruption`] naming the file and offset.
    pub fn open(
        path: &Path,
        file_number: u64,
        current_policy: &Arc<dyn FilterPolicy>,
        counters: Arc<ReadCounters>,
    ) -> Result<Table> {
        Table::open_with_cache(path, file_number, current_policy, counters, None)
    }

    /// [`open`](Self::open) for a table whose data blocks go through
    /// `cache` (the database's block cache).
    pub(crate) fn open_with_cache(
        path: &Path,
        file_number: u64,
        current_policy: &Arc<dyn FilterPolicy>,
        counters: Arc<ReadCounters>,
        cache: Option<Arc<BlockCache>>,
    ) -> Result<Table> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if file_len < FOOTER_LEN as u64 {
            return Err(Error::corruption(
                path,
                Some(file_len),
                format!(
                    "file of {file_len} bytes is too short to hold the {FOOTER_LEN}-byte footer"
                ),
            ));
        }
        // SAFETY: table files are immutable once finished and never modified
        // in place (the engine writes a new file, never reopens a finished
        // one for writing, and deletes old ones only after every reader of
        // its own has dropped them; a later open of the directory may
        // delete a file that a snapshot of a closed `Db` still maps, which
        // unlinks the name and leaves the mapped pages as they were), so
        // the mapped bytes cannot change under the `&[u8]` this hands out.
        // Every read of them is bounds-checked and checksummed.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        // Point reads touch one 4 KiB block here and there: without this
        // hint a page fault on a cold table reads ahead up to the device's
        // read-ahead window (8 MiB measured here), so a cold get cost
        // megabytes of device reads (docs/benchmarks.md, cold cache). Only a
        // hint: if the kernel refuses it, reads are still correct.
        let _ = mmap.advise(memmap2::Advice::Random);
        let file_len = mmap.len() as u64;
        let footer_at = file_len.checked_sub(FOOTER_LEN as u64).ok_or_else(|| {
            Error::corruption(path, Some(file_len), "file shrank below the footer size")
        })?;
        let footer = Footer::decode(&mmap[footer_at as usize..])
            .map_err(|e| Error::corruption(path, Some(footer_at + e.offset_in_footer), e.reason))?;

        // The blocks after the data follow each other exactly: filter,
        // properties, index, footer.
        let chain = [
            (footer.filter, footer.properties.offset, "filter"),
            (footer.properties, footer.index.offset, "properties"),
            (footer.index, footer_at, "index"),
        ];
        let trailer = trailer_len(footer.version);
        for (handle, next, what) in chain {
            if handle.end_with_trailer_len(trailer) != Some(next) {
                return Err(Error::corruption(
                    path,
                    Some(footer_at),
                    format!(
                        "footer's {what} block handle (offset {}, len {}) does not end where the next block starts ({next})",
                        handle.offset, handle.len
                    ),
                ));
            }
        }

        let mut table = Table {
            path: path.to_path_buf(),
            mmap,
            version: footer.version,
            meta: TableMeta {
                file_number,
                file_size: file_len,
                smallest: Vec::new(),
                largest: Vec::new(),
                smallest_seq: 0,
                largest_seq: 0,
                entries: 0,
                tombstones: 0,
                distinct_keys: 0,
                filter_bytes: 0,
                filter_policy: String::new(),
            },
            properties: BTreeMap::new(),
            filter: Filter::decode(Vec::new()),
            prefix_len: None,
            distinct_prefixes: 0,
            index: Vec::new(),
            index_keys: Vec::new(),
            counters,
            // Set once the table is fully open, so a table that fails to
            // open (and is dropped) has nothing to erase.
            cache: None,
        };

        let props_bytes = table.block(footer.properties)?;
        table.properties = decode_properties(props_bytes)
            .map_err(|r| table.corrupt(footer.properties.offset, r))?;
        table.load_index(footer.index, footer.filter.offset)?;
        table.load_meta(footer)?;
        let filter_bytes = table.block(footer.filter)?.to_vec();
        // A custom policy's filter is read by the policy at the size it was
        // built for, in the policy's own unit, whatever its range (a
        // built-in filter describes itself, and a policy without sizes
        // returns `None`). A recorded size that is not a positive number
        // cannot be honoured: the filter is then not consulted rather than
        // read at another size (false negatives).
        let custom = !table.meta.filter_policy.starts_with(BUILTIN_NAME_PREFIX);
        let name = &table.meta.filter_policy;
        table.filter = match table.recorded_filter_size() {
            Some(Some(bits)) if custom => match current_policy.with_budget_bits_per_key(bits) {
                Some(resized) => Filter::for_policy(name, filter_bytes, &resized),
                None => Filter::for_policy(name, filter_bytes, current_policy),
            },
            Some(None) if custom && current_policy.budget_bits_per_key().is_some() => {
                Filter::unreadable(filter_bytes)
            }
            _ => Filter::for_policy(name, filter_bytes, current_policy),
        };
        table.cache = cache;
        Ok(table)
    }

    /// The bits per key the table's filter was sized to
    /// ([`PROP_FILTER_BITS_PER_KEY`], in the unit of the policy's
    /// [`budget_bits_per_key`](crate::filter::FilterPolicy::budget_bits_per_key):
    /// built-in policies record values in [1, 100], a custom policy any
    /// positive number); `None` for tables whose policy reports no size,
    /// or whose recorded size is not a finite positive number.
    pub fn filter_bits_per_key(&self) -> Option<f64> {
        self.recorded_filter_size().flatten()
    }

    /// The recorded filter size: `None` when the table records none,
    /// `Some(None)` when the record is not a finite positive number (8
    /// bytes of an `f64`), `Some(Some(bits))` otherwise.
    fn recorded_filter_size(&self) -> Option<Option<f64>> {
        let bytes = self.property(PROP_FILTER_BITS_PER_KEY)?;
        Some(
            <[u8; 8]>::try_from(bytes)
                .ok()
                .map(f64::from_le_bytes)
                .filter(|bits| bits.is_finite() && *bits > 0.0),
        )
    }

    fn corrupt(&self, offset: u64, reason: impl Into<String>) -> Error {
        Error::corruption(&self.path, Some(offset), reason)
    }

    pub(crate) fn block_error(&self, c: BlockCorruption) -> Error {
        self.corrupt(c.offset, c.reason)
    }

    /// The stored bytes of the block at `h` and its type, after checking
    /// that it lies inside the file and that its checksum matches (a
    /// version-1 block is always [`BLOCK_TYPE_RAW`]).
    fn stored_block(&self, h: BlockHandle) -> Result<(&[u8], u8)> {
        let trailer_len = trailer_len(self.version);
        let range = h
            .end_with_trailer_len(trailer_len)
            .filter(|&end| end <= self.mmap.len() as u64)
            .map(|end| h.offset as usize..end as usize);
        let Some(bytes) = range.and_then(|r| self.mmap.get(r)) else {
            return Err(self.corrupt(
                h.offset,
                format!(
                    "block (offset {}, len {}) runs past the end of the file",
                    h.offset, h.len
                ),
            ));
        };
        let (stored, trailer) = bytes.split_at(bytes.len() - trailer_len);
        let (block_type, crc_bytes) = if self.version >= FORMAT_VERSION_2 {
            (trailer[0], &trailer[1..])
        } else {
            (BLOCK_TYPE_RAW, trailer)
        };
        let mut w = [0u8; 4];
        w.copy_from_slice(crc_bytes);
        let stored_crc = u32::from_le_bytes(w);
        let actual = if self.version >= FORMAT_VERSION_2 {
            block_crc_v2(stored, block_type)
        } else {
            block_crc(stored)
        };
        if stored_crc != actual {
            return Err(self.corrupt(
                h.offset,
                format!(
                    "block checksum mismatch (len {}, stored {stored_crc:#010x}, computed {actual:#010x})",
                    h.len
                ),
            ));
        }
        Ok((stored, block_type))
    }

    /// The contents of a block that is always stored uncompressed (index,
    /// filter, properties), after checking its place and checksum.
    pub(crate) fn block(&self, h: BlockHandle) -> Result<&[u8]> {
        match self.stored_block(h)? {
            (contents, BLOCK_TYPE_RAW) => Ok(contents),
            (_, t) => Err(self.corrupt(
                h.offset,
                format!("block of type {t} where only uncompressed blocks are allowed"),
            )),
        }
    }

    /// The contents of the data block at `h`, verified: a view of the file
    /// for a block stored as it is, a decompressed buffer for a compressed
    /// one. A damaged length or LZ4 stream is [`Error::Corruption`].
    fn data_block(&self, h: BlockHandle) -> Result<BlockBytes<'_>> {
        match self.stored_block(h)? {
            (contents, BLOCK_TYPE_RAW) => Ok(BlockBytes::Mapped(contents)),
            (stored, BLOCK_TYPE_LZ4) => {
                let contents =
                    lz4_decompress_block(stored).map_err(|r| self.corrupt(h.offset, r))?;
                Ok(BlockBytes::Owned(Arc::from(contents)))
            }
            (_, t) => Err(self.corrupt(h.offset, format!("unknown block type {t}"))),
        }
    }

    /// Reads a data block for a point read or a scan, counting it in
    /// `data_block_reads` and `bytes_read` (the block's stored size, so
    /// the compressed size for a compressed block) whether or not the
    /// block cache holds it. With a cache: a hit (`block_cache_hits`)
    /// returns the cached copy (decompressed) without reading the file,
    /// checking the checksum or decompressing; a miss (`block_cache_misses`)
    /// reads, verifies and decompresses the block from the file and, when
    /// `fill` and the cache admits it (a block's second miss within a
    /// window, see [`BlockCache::admit`]), caches the decompressed
    /// contents.
    pub(crate) fn read_data_block(&self, h: BlockHandle, fill: bool) -> Result<BlockBytes<'_>> {
        self.read_data_block_from(h, fill)
            .map(|(contents, _)| contents)
    }

    /// [`read_data_block`](Self::read_data_block), also saying where the
    /// block came from.
    fn read_data_block_from(
        &self,
        h: BlockHandle,
        fill: bool,
    ) -> Result<(BlockBytes<'_>, BlockSource)> {
        let c = &*self.counters;
        ReadCounters::add(&c.data_block_reads, 1);
        ReadCounters::add(&c.bytes_read, h.len);
        let Some(cache) = &self.cache else {
            return Ok((self.data_block(h)?, BlockSource::File));
        };
        let file = self.meta.file_number;
        if let Some(cached) = cache.get(file, h.offset) {
            ReadCounters::add(&c.block_cache_hits, 1);
            return Ok((BlockBytes::Owned(cached), BlockSource::Cache));
        }
        ReadCounters::add(&c.block_cache_misses, 1);
        let contents = self.data_block(h)?;
        if !fill || !cache.can_hold(contents.as_slice().len()) || !cache.admit(file, h.offset) {
            return Ok((contents, BlockSource::CacheMiss));
        }
        let copy: Arc<[u8]> = match contents {
            BlockBytes::Mapped(b) => Arc::from(b),
            BlockBytes::Owned(b) => b,
        };
        cache.insert(file, h.offset, Arc::clone(&copy));
        Ok((BlockBytes::Owned(copy), BlockSource::CacheMiss))
    }

    /// Reads a data block from the file without counting it and without
    /// the block cache (compaction input: the engine counts those bytes as
    /// `compaction_bytes_read`, the read counters describe what user reads
    /// cost, and a compaction's one pass over its inputs must not evict
    /// the blocks user reads need).
    /// The block is checked and parsed once here; the result holds its
    /// (decompressed) contents.
    pub(crate) fn data_block_uncounted(&self, h: BlockHandle) -> Result<BlockBytes<'_>> {
        let contents = self.data_block(h)?;
        BlockView::parse(contents.as_slice(), h.offset).map_err(|c| self.block_error(c))?;
        Ok(contents)
    }

    /// Decodes the whole index block into memory and checks that the data
    /// blocks it names tile `[0, data_end)` exactly and that its keys
    /// strictly increase.
    fn load_index(&mut self, h: BlockHandle, data_end: u64) -> Result<()> {
        let contents = self.block(h)?;
        let view = BlockView::parse(contents, h.offset).map_err(|c| self.block_error(c))?;
        let mut keys = Vec::new();
        let mut index = Vec::new();
        let mut key = Vec::new();
        let mut pos = 0;
        let mut expected_offset = 0u64;
        while pos < view.entries_end() {
            let (value, next) = view
                .next_into(pos, &mut key)
                .map_err(|c| self.block_error(c))?;
            let entry_at = h.offset + pos as u64;
            let handle = contents
                .get(value)
                .and_then(BlockHandle::decode_varint)
                .ok_or_else(|| self.corrupt(entry_at, "bad block handle in index entry"))?;
            if handle.offset != expected_offset {
                return Err(self.corrupt(entry_at, "index entries do not tile the data blocks"));
            }
            expected_offset = handle
                .end_with_trailer_len(trailer_len(self.version))
                .ok_or_else(|| self.corrupt(entry_at, "index block handle overflows"))?;
            if let Some(prev) = index.last() {
                let prev: &IndexEntry = prev;
                let prev_key = &keys[prev.key_start..prev.key_end];
                if super::compare_encoded(prev_key, &key) != Ordering::Less {
                    return Err(self.corrupt(entry_at, "index keys out of order"));
                }
            }
            if unpack_trailer(trailer_of(&key)).is_none() {
                return Err(self.corrupt(entry_at, "index key has an unknown kind"));
            }
            let key_start = keys.len();
            keys.extend_from_slice(&key);
            index.push(IndexEntry {
                key_start,
                key_end: keys.len(),
                handle,
            });
            pos = next;
        }
        if expected_offset != data_end {
            return Err(self.corrupt(
                h.offset,
                format!("data blocks end at {expected_offset}, but the filter block starts at {data_end}"),
            ));
        }
        self.index = index;
        self.index_keys = keys;
        Ok(())
    }

    /// Rebuilds the table's metadata from its properties block and checks it
    /// against the index and the footer.
    fn load_meta(&mut self, footer: Footer) -> Result<()> {
        let at = footer.properties.offset;
        let raw = |name: &str| -> Result<&[u8]> {
            self.properties
                .get(name)
                .map(Vec::as_slice)
                .ok_or_else(|| self.corrupt(at, format!("missing property {name}")))
        };
        let num = |name: &str| -> Result<u64> {
            decode_u64_property(raw(name)?)
                .ok_or_else(|| self.corrupt(at, format!("property {name} is not a number")))
        };
        let entries = num(PROP_ENTRIES)?;
        let tombstones = num(PROP_TOMBSTONES)?;
        let distinct_keys = num(PROP_DISTINCT_KEYS)?;
        let smallest_seq = num(PROP_SMALLEST_SEQ)?;
        let largest_seq = num(PROP_LARGEST_SEQ)?;
        let filter_bytes = num(PROP_FILTER_BYTES)?;
        let data_blocks = num(PROP_DATA_BLOCKS)?;
        let smallest = raw(PROP_SMALLEST_KEY)?.to_vec();
        let largest = raw(PROP_LARGEST_KEY)?.to_vec();
        let filter_policy = std::str::from_utf8(raw(PROP_FILTER_POLICY)?)
            .map_err(|_| self.corrupt(at, "filter policy name is not UTF-8"))?
            .to_string();

        // An entry takes at least 4 bytes of a data block (three lengths and
        // one key byte), and a compressed block stands for at most 255 times
        // its bytes (LZ4's limit): counts beyond 256 per byte of data are
        // damage, which would overflow the sums of statistics.
        let max_entries = footer.filter.offset.saturating_mul(256);
        let consistent = data_blocks == self.index.len() as u64
            && entries <= max_entries
            && filter_bytes == footer.filter.len
            && tombstones <= entries
            && distinct_keys <= entries
            && (entries == 0) == (data_blocks == 0)
            && (entries == 0 || distinct_keys > 0)
            && smallest_seq <= largest_seq
            && largest_seq <= MAX_SEQUENCE
            && (entries == 0 || smallest <= largest)
            && match self.index.last() {
                Some(e) => {
                    user_part(&self.index_keys[e.key_start..e.key_end]) == largest.as_slice()
                }
                None => true,
            };
        if !consistent {
            return Err(self.corrupt(at, "table properties contradict the index or footer"));
        }
        // Prefix length and count come together, and a table holds at most
        // one prefix per distinct key.
        let prefix = |name: &str| {
            self.properties
                .get(name)
                .map(|raw| decode_u64_property(raw))
        };
        (self.prefix_len, self.distinct_prefixes) =
            match (prefix(PROP_PREFIX_LEN), prefix(PROP_DISTINCT_PREFIXES)) {
                (None, None) => (None, 0),
                (Some(Some(n)), Some(Some(count)))
                    if (1..=MAX_KEY_LEN as u64).contains(&n) && count <= distinct_keys =>
                {
                    (Some(n as usize), count)
                }
                _ => {
                    return Err(self.corrupt(
                        at,
                        format!(
                        "properties {PROP_PREFIX_LEN} and {PROP_DISTINCT_PREFIXES} must both be \
                             absent, or a length in 1..={MAX_KEY_LEN} and a count of at most the \
                             distinct keys"
                    ),
                    ))
                }
            };
        self.meta = TableMeta {
            file_number: self.meta.file_number,
            file_size: self.meta.file_size,
            smallest,
            largest,
            smallest_seq,
            largest_seq,
            entries,
            tombstones,
            distinct_keys,
            filter_bytes,
            filter_policy,
        };
        Ok(())
    }

    /// Point lookup at `snapshot`: the newest version of `user_key` whose
    /// sequence number is `<= snapshot` (a tombstone is returned as a
    /// [`Found`] of kind [`ValueKind::Delete`]).
    ///
    /// 1. A key outside `[smallest, largest]` answers `None` without
    ///    touching any counter.
    /// 2. The filter is asked (`filter_checks`); "absent" answers `None`
    ///    (`filter_negatives`) without reading a data block.
    /// 3. The in-memory index is binary-searched for the block whose last
    ///    key is `>= (user_key, snapshot)`; that one block is read
    ///    (`data_block_reads`, `get_data_block_reads`, `bytes_read`): from
    ///    the block cache if the table has one and it holds the block
    ///    (`block_cache_hits`), else from the file with its checksum
    ///    verified and, if stored compressed, decompressed
    ///    (`block_cache_misses` with a cache), then cached if the cache
    ///    admits it (its second miss within the cache's admission window). Its
    ///    restart points are binary-searched and at most one restart
    ///    interval scanned.
    /// 4. `filter_false_positives` counts lookups of keys of which the table
    ///    holds no version at all; `filter_true_positives` the others (also
    ///    when every version is newer than the snapshot).
    pub fn get(
        &self,
        user_key: &[u8],
        key_hash: u64,
        snapshot: SequenceNumber,
    ) -> Result<Option<Found>> {
        if self.meta.entries == 0
            || user_key < self.meta.smallest.as_slice()
            || user_key > self.meta.largest.as_slice()
        {
            return Ok(None);
        }
        self.get_in_range(user_key, key_hash, snapshot, &mut ReadCost::default())
    }

    /// [`get`](Self::get) for a caller that has already checked that
    /// `user_key` lies in `[smallest, largest]` (the engine's lookup does,
    /// against the manifest's copy of the range): steps 2 to 4 only. A key
    /// outside the range still gets a correct answer (`None`), but is counted
    /// as a filter check. What the lookup cost is added to `cost` as well
    /// as to the table's counters.
    pub(crate) fn get_in_range(
        &self,
        user_key: &[u8],
        key_hash: u64,
        snapshot: SequenceNumber,
        cost: &mut ReadCost,
    ) -> Result<Option<Found>> {
        if self.meta.entries == 0 {
            return Ok(None);
        }
        let c = &*self.counters;
        ReadCounters::add(&c.filter_checks, 1);
        cost.filter_checks += 1;
        if !self.filter.may_contain(key_hash) {
            ReadCounters::add(&c.filter_negatives, 1);
            cost.filter_negatives += 1;
            return Ok(None);
        }
        let answer = self.get_after_positive(user_key, snapshot, cost);
        if answer.is_err() {
            // No answer to count: the snapshot's sum of answers still
            // accounts for this check.
            ReadCounters::add(&c.filter_checks_unanswered, 1);
        }
        answer
    }

    /// Steps 3 and 4 of [`get`](Self::get), after the filter answered
    /// "maybe": counts the answer unless it returns an error.
    fn get_after_positive(
        &self,
        user_key: &[u8],
        snapshot: SequenceNumber,
        cost: &mut ReadCost,
    ) -> Result<Option<Found>> {
        let c = &*self.counters;
        let trailer = pack_trailer(snapshot.min(MAX_SEQUENCE), ValueKind::Put);
        let i = self.find_block(user_key, trailer);
        let Some(entry) = self.index.get(i) else {
            // Every entry sorts before the target, yet user_key <= largest:
            // the table's last entries are versions of user_key newer than
            // the snapshot.
            ReadCounters::add(&c.filter_true_positives, 1);
            cost.filter_true_positives += 1;
            return Ok(None);
        };
        let prev_block_same_user = i > 0
            && self.index.get(i - 1).is_some_and(|p| {
                crate::key::same_user_key(
                    user_part(&self.index_keys[p.key_start..p.key_end]),
                    user_key,
                )
            });
        ReadCounters::add(&c.get_data_block_reads, 1);
        cost.data_block_reads += 1;
        cost.bytes_read += entry.handle.len;
        let (bytes, source) = self.read_data_block_from(entry.handle, true)?;
        match source {
            BlockSource::File => {}
            BlockSource::Cache => cost.block_cache_hits += 1,
            BlockSource::CacheMiss => cost.block_cache_misses += 1,
        }
        let block = BlockView::parse(bytes.as_slice(), entry.handle.offset)
            .map_err(|c| self.block_error(c))?;

        GET_KEY_BUF.with(|buf| {
            let mut key = buf.borrow_mut();
            let r = block
                .seek(user_key, trailer, &mut key)
                .map_err(|e| self.block_error(e))?;
            let Some((value, _)) = r.hit else {
                return Err(self.corrupt(
                    entry.handle.offset,
                    "data block holds no key up to its index key",
                ));
            };
            if crate::key::same_user_key(user_part(&key), user_key) {
                let (seq, kind) = unpack_trailer(trailer_of(&key)).ok_or_else(|| {
                    self.corrupt(entry.handle.offset, "entry has an unknown kind")
                })?;
                let value = block.contents().get(value).ok_or_else(|| {
                    self.corrupt(entry.handle.offset, "entry value runs past the block")
                })?;
                ReadCounters::add(&c.filter_true_positives, 1);
                cost.filter_true_positives += 1;
                return Ok(Some(Found {
                    seq,
                    kind,
                    value: value.to_vec(),
                }));
            }
            let newer_versions = if r.hit_is_first {
                prev_block_same_user
            } else {
                r.prev_same_user
            };
            if newer_versions {
                ReadCounters::add(&c.filter_true_positives, 1);
                cost.filter_true_positives += 1;
            } else {
                ReadCounters::add(&c.filter_false_positives, 1);
                cost.filter_false_positives += 1;
            }
            Ok(None)
        })
    }

    /// Index of the first data block whose last key is `>= (user_key,
    /// trailer)` (`index.len()` if none).
    #[inline]
    pub(crate) fn find_block(&self, user_key: &[u8], trailer: u64) -> usize {
        self.index.partition_point(|e| {
            cmp_internal_parts(&self.index_keys[e.key_start..e.key_end], user_key, trailer)
                == Ordering::Less
        })
    }

    pub(crate) fn index_key(&self, i: usize) -> Option<&[u8]> {
        let e = self.index.get(i)?;
        self.index_keys.get(e.key_start..e.key_end)
    }

    pub(crate) fn index_entry(&self, i: usize) -> Option<&IndexEntry> {
        self.index.get(i)
    }

    pub(crate) fn mmap_bytes(&self) -> &[u8] {
        &self.mmap
    }

    /// The table's format version: 1 (written without compression) or 2
    /// (with; see `docs/format.md`).
    pub fn format_version(&self) -> u32 {
        self.version
    }

    /// The table's metadata, rebuilt from its properties block.
    pub fn meta(&self) -> &TableMeta {
        &self.meta
    }

    /// A property by name: the table's own (`"sievedb.table.*"`, encoded as
    /// described in `docs/format.md`) or one set with
    /// [`TableBuilder::set_property`](super::TableBuilder::set_property).
    pub fn property(&self, name: &str) -> Option<&[u8]> {
        self.properties.get(name).map(Vec::as_slice)
    }

    /// The table's decoded filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// The prefix length whose prefixes the table's filter also holds
    /// ([`TableOptions::prefix_len`](super::TableOptions::prefix_len) when
    /// it was written), `None` for a filter of keys only.
    pub fn prefix_len(&self) -> Option<usize> {
        self.prefix_len
    }

    /// Hashes the table's filter was built from: its distinct keys plus,
    /// with [`prefix_len`](Self::prefix_len), its distinct prefixes.
    pub fn filter_entries(&self) -> u64 {
        // Saturating: both come from the properties block, whose counts a
        // damaged (checksum-valid) table could set near 2^64.
        self.meta
            .distinct_keys
            .saturating_add(self.distinct_prefixes)
    }

    /// False only if the table certainly holds no key (or tombstone)
    /// starting with `prefix`: its key range cannot hold one, or its filter
    /// was built with prefixes of length `n <= prefix.len()` and says the
    /// first `n` bytes of `prefix` are absent. Otherwise true (a filter of
    /// keys only, or a `prefix` shorter than `n`, cannot tell).
    ///
    /// A filter consulted counts in `prefix_filter_checks`, and its answer
    /// in `prefix_filter_negatives` ("no") or `prefix_filter_maybes`; the
    /// range test counts nothing.
    pub fn may_contain_prefix(&self, prefix: &[u8]) -> bool {
        if self.meta.entries == 0 || !range_may_hold_prefix(&self.meta, prefix) {
            return false;
        }
        let Some(n) = self.prefix_len.filter(|&n| n <= prefix.len()) else {
            return true;
        };
        let c = &*self.counters;
        ReadCounters::add(&c.prefix_filter_checks, 1);
        let maybe = self.filter.may_contain(prefix_hash(&prefix[..n]));
        if maybe {
            ReadCounters::add(&c.prefix_filter_maybes, 1);
        } else {
            ReadCounters::add(&c.prefix_filter_negatives, 1);
        }
        maybe
    }

    /// The table file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of data blocks.
    pub fn data_blocks(&self) -> usize {
        self.index.len()
    }

    /// A cursor over every entry, in internal-key order. It owns an `Arc`
    /// of the table, so it outlives whatever version handed the table out.
    pub fn iter(self: &Arc<Self>) -> TableIter {
        TableIter::new(Arc::clone(self), true)
    }

    /// A cursor whose block reads are not counted in the read counters
    /// (compaction input).
    pub(crate) fn iter_uncounted(self: &Arc<Self>) -> TableIter {
        TableIter::new(Arc::clone(self), false)
    }
}

/// The trailer of an encoded internal key of at least 8 bytes.
#[inline]
pub(crate) fn trailer_of(key: &[u8]) -> u64 {
    let mut w = [0u8; TRAILER_LEN];
    if let Some(t) = key.get(key.len().saturating_sub(TRAILER_LEN)..) {
        if t.len() == TRAILER_LEN {
            w.copy_from_slice(t);
        }
    }
    u64::from_le_bytes(w)
}

/// Whether a table with `meta`'s key range can hold a key starting with
/// `prefix`: some key `k` with `smallest <= k <= largest` starts with it
/// exactly when `largest >= prefix` and `smallest`'s first bytes are not
/// past it (`smallest[..len] <= prefix`).
pub(crate) fn range_may_hold_prefix(meta: &TableMeta, prefix: &[u8]) -> bool {
    let head = &meta.smallest[..meta.smallest.len().min(prefix.len())];
    meta.largest.as_slice() >= prefix && head <= prefix
}
