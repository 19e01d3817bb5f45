//! Writes a table file from entries that arrive in internal-key order.
//!
//! Data blocks are streamed to the file as they fill; the index entries and
//! the key hash of every distinct user key stay in memory until
//! [`TableBuilder::finish`] builds the filter once and writes the filter,
//! properties and index blocks and the footer (layout in
//! [`crate::sstable`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::block::{user_part, BlockBuilder};
use super::format::{
    block_crc, block_crc_v2, encode_properties, encode_u64_property, lz4_compress_block,
    trailer_len, BlockHandle, Footer, BLOCK_TYPE_LZ4, BLOCK_TYPE_RAW, FORMAT_VERSION_1,
    FORMAT_VERSION_2, PROP_DATA_BLOCKS, PROP_DISTINCT_KEYS, PROP_DISTINCT_PREFIXES, PROP_ENTRIES,
    PROP_FILTER_BITS_PER_KEY, PROP_FILTER_BYTES, PROP_FILTER_POLICY, PROP_LARGEST_KEY,
    PROP_LARGEST_SEQ, PROP_PREFIX_LEN, PROP_SMALLEST_KEY, PROP_SMALLEST_SEQ, PROP_TOMBSTONES,
    RESERVED_PROPERTY_PREFIX,
};
use super::{Compression, TableMeta, TableOptions};
use crate::error::{Error, Result};
use crate::filter::{key_hash, prefix_hash};
use crate::fs::{FileSystem, WritableFile};
use crate::key::{encode_internal_key, pack_trailer, SequenceNumber, ValueKind, MAX_SEQUENCE};

/// Largest accepted user key (bytes). Keeps every block below the 4 GiB its
/// `u32` restart offsets can address.
pub const MAX_KEY_LEN: usize = 1 << 30;
/// Largest accepted value (bytes), for the same reason as [`MAX_KEY_LEN`].
pub const MAX_VALUE_LEN: usize = 1 << 30;
/// Accepted range of [`TableOptions::block_bytes`].
pub const BLOCK_BYTES_RANGE: std::ops::RangeInclusive<usize> = 64..=(64 << 20);
/// Accepted range of [`TableOptions::restart_interval`].
pub const RESTART_INTERVAL_RANGE: std::ops::RangeInclusive<usize> = 1..=1024;

/// Longest encoding of a [`BlockHandle`] in an index entry: two 64-bit
/// varints of at most 10 bytes each.
const MAX_HANDLE_VARINT_LEN: usize = 20;

/// Bytes gathered before one `append` to the file (fewer system calls than
/// one per block).
const WRITE_BUFFER_BYTES: usize = 256 << 10;

/// Streams sorted entries into a new table file.
pub struct TableBuilder {
    path: PathBuf,
    file: Box<dyn WritableFile>,
    file_number: u64,
    opts: TableOptions,
    /// The format version written: 1 without compression, 2 with.
    version: u32,
    /// File offset of the next block (bytes appended plus bytes buffered).
    offset: u64,
    write_buf: Vec<u8>,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    data_blocks: u64,
    /// The last entry's encoded internal key (empty before the first add).
    last_key: Vec<u8>,
    key_hashes: Vec<u64>,
    /// [`prefix_hash`] of each distinct key prefix, with
    /// [`TableOptions::prefix_len`] (keys arrive sorted, so equal prefixes
    /// are adjacent).
    prefix_hashes: Vec<u64>,
    entries: u64,
    tombstones: u64,
    smallest: Vec<u8>,
    smallest_seq: u64,
    largest_seq: u64,
    properties: BTreeMap<String, Vec<u8>>,
    bad_property: Option<String>,
    /// Set after an I/O error: the file is incomplete and every later call
    /// fails.
    failed: bool,
}

impl std::fmt::Debug for TableBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableBuilder")
            .field("path", &self.path)
            .field("entries", &self.entries)
            .field("offset", &self.offset)
            .finish()
    }
}

impl TableBuilder {
    /// Creates the file through the filesystem interface (all writes go
    /// through [`FileSystem`], never `std::fs`); `path` must not exist.
    ///
    /// Fails with [`Error::InvalidArgument`] if `opts.block_bytes` lies
    /// outside [`BLOCK_BYTES_RANGE`] or `opts.restart_interval` outside
    /// [`RESTART_INTERVAL_RANGE`], and with [`Error::Io`] if the file cannot
    /// be created, among others when it exists (kind `AlreadyExists`; the
    /// file is left as it was: a table number used twice must not truncate
    /// a live table).
    pub fn new(
        fs: &dyn FileSystem,
        path: &Path,
        file_number: u64,
        opts: TableOptions,
    ) -> Result<TableBuilder> {
        if !BLOCK_BYTES_RANGE.contains(&opts.block_bytes) {
            return Err(Error::invalid(format!(
                "block_bytes must be in {BLOCK_BYTES_RANGE:?}, got {}",
                opts.block_bytes
            )));
        }
        if !RESTART_INTERVAL_RANGE.contains(&opts.restart_interval) {
            return Err(Error::invalid(format!(
                "restart_interval must be in {RESTART_INTERVAL_RANGE:?}, got {}",
                opts.restart_interval
            )));
        }
        // The reader accepts exactly these lengths: a table written with
        // any other would not open (found by review: `TableBuilder` took
        // 2^30 + 1 and `Table::open` called the table corrupt).
        if let Some(n) = opts.prefix_len.filter(|n| !(1..=MAX_KEY_LEN).contains(n)) {
            return Err(Error::invalid(format!(
                "prefix_len must be in 1..={MAX_KEY_LEN} (None turns prefixes off), got {n}"
            )));
        }
        let file = fs.create_new(path).map_err(|e| Error::io(path, e))?;
        Ok(TableBuilder {
            path: path.to_path_buf(),
            file,
            file_number,
            data_block: BlockBuilder::new(opts.restart_interval),
            // Restart at every index entry: the reader decodes the whole
            // index at open, and full keys keep that decode trivial.
            index_block: BlockBuilder::new(1),
            version: match opts.compression {
                Compression::None => FORMAT_VERSION_1,
                Compression::Lz4 => FORMAT_VERSION_2,
            },
            opts,
            offset: 0,
            write_buf: Vec::with_capacity(WRITE_BUFFER_BYTES),
            data_blocks: 0,
            last_key: Vec::new(),
            key_hashes: Vec::new(),
            prefix_hashes: Vec::new(),
            entries: 0,
            tombstones: 0,
            smallest: Vec::new(),
            smallest_seq: u64::MAX,
            largest_seq: 0,
            properties: BTreeMap::new(),
            bad_property: None,
            failed: false,
        })
    }

    fn check_not_failed(&self) -> Result<()> {
        if self.failed {
            return Err(Error::invalid(format!(
                "table builder for {} failed earlier; the file is incomplete",
                self.path.display()
            )));
        }
        Ok(())
    }

    /// Adds the next entry; entries must arrive in strictly increasing
    /// internal-key order (user key ascending, sequence descending), else
    /// [`Error::InvalidArgument`] and the entry is not added. `value` is
    /// empty for [`ValueKind::Delete`] (a non-empty tombstone value is
    /// refused). Sequence numbers above [`MAX_SEQUENCE`], keys above
    /// [`MAX_KEY_LEN`] and values above [`MAX_VALUE_LEN`] are refused too.
    pub fn add(
        &mut self,
        user_key: &[u8],
        seq: SequenceNumber,
        kind: ValueKind,
        value: &[u8],
    ) -> Result<()> {
        self.check_not_failed()?;
        if seq > MAX_SEQUENCE {
            return Err(Error::invalid(format!(
                "sequence number {seq} exceeds the maximum {MAX_SEQUENCE}"
            )));
        }
        if user_key.len() > MAX_KEY_LEN {
            return Err(Error::invalid(format!(
                "key of {} bytes exceeds the maximum {MAX_KEY_LEN}",
                user_key.len()
            )));
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::invalid(format!(
                "value of {} bytes exceeds the maximum {MAX_VALUE_LEN}",
                value.len()
            )));
        }
        if kind == ValueKind::Delete && !value.is_empty() {
            return Err(Error::invalid("a tombstone carries no value"));
        }
        let trailer = pack_trailer(seq, kind);
        let same_user_key = if self.entries > 0 {
            let order = super::block::cmp_internal_parts(&self.last_key, user_key, trailer);
            if order != std::cmp::Ordering::Less {
                return Err(Error::invalid(format!(
                    "entries out of order: ({}, seq {seq}) does not follow the previous entry",
                    super::show_key(user_key)
                )));
            }
            crate::key::same_user_key(user_part(&self.last_key), user_key)
        } else {
            self.smallest = user_key.to_vec();
            false
        };

        if !same_user_key {
            self.key_hashes.push(key_hash(user_key));
            if let Some(n) = self.opts.prefix_len {
                // A new prefix unless the previous key (the last one added,
                // still in `last_key`) starts with the same `n` bytes.
                let previous = user_part(&self.last_key);
                let fresh = self.entries == 0
                    || previous.len() < n
                    || previous[..n] != user_key[..n.min(user_key.len())];
                if user_key.len() >= n && fresh {
                    self.prefix_hashes.push(prefix_hash(&user_key[..n]));
                }
            }
        }
        self.last_key.clear();
        encode_internal_key(&mut self.last_key, user_key, seq, kind);
        self.data_block.add(&self.last_key, value);
        self.entries += 1;
        if kind == ValueKind::Delete {
            self.tombstones += 1;
        }
        self.smallest_seq = self.smallest_seq.min(seq);
        self.largest_seq = self.largest_seq.max(seq);

        if self.data_block.estimated_size() >= self.opts.block_bytes {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Appends a block plus its trailer and returns its handle. Version 1:
    /// the contents and their CRC. Version 2: the stored bytes (a data
    /// block LZ4-compressed when [`Compression::Lz4`] and that saves an
    /// eighth, otherwise the contents), the type byte, and the CRC of both.
    fn write_block(&mut self, contents_from: BlockSource) -> Result<BlockHandle> {
        let is_data = matches!(contents_from, BlockSource::Data);
        let contents: &[u8] = match &contents_from {
            BlockSource::Data => self.data_block.finish(),
            BlockSource::Index => self.index_block.finish(),
            BlockSource::Bytes(b) => b,
        };
        let compressed = match self.opts.compression {
            Compression::Lz4 if is_data => lz4_compress_block(contents),
            _ => None,
        };
        let (stored, block_type) = match &compressed {
            Some(c) => (c.as_slice(), BLOCK_TYPE_LZ4),
            None => (contents, BLOCK_TYPE_RAW),
        };
        let handle = BlockHandle {
            offset: self.offset,
            len: stored.len() as u64,
        };
        self.write_buf.extend_from_slice(stored);
        if self.version == FORMAT_VERSION_2 {
            self.write_buf.push(block_type);
            let crc = block_crc_v2(stored, block_type);
            self.write_buf.extend_from_slice(&crc.to_le_bytes());
        } else {
            let crc = block_crc(stored);
            self.write_buf.extend_from_slice(&crc.to_le_bytes());
        }
        self.offset += (stored.len() + trailer_len(self.version)) as u64;
        if self.write_buf.len() >= WRITE_BUFFER_BYTES {
            self.flush_write_buf()?;
        }
        Ok(handle)
    }

    fn flush_write_buf(&mut self) -> Result<()> {
        if self.write_buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.append(&self.write_buf) {
            self.failed = true;
            return Err(Error::io(&self.path, e));
        }
        self.write_buf.clear();
        Ok(())
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.data_block.is_empty() {
            return Ok(());
        }
        // A data block stays far below 4 GiB (`block_bytes` plus one entry
        // of at most `MAX_KEY_LEN + MAX_VALUE_LEN`), but the index gathers
        // one full key per data block: with keys near `MAX_KEY_LEN`, a few
        // thousand blocks (a table of gigabytes) would overflow its `u32`
        // restart offsets and write a table that reads back wrong. Refuse
        // instead; the entries already added cannot be written.
        if !self
            .index_block
            .has_room_for(self.data_block.last_key().len(), MAX_HANDLE_VARINT_LEN)
        {
            self.failed = true;
            return Err(Error::invalid(format!(
                "the index block of {} would exceed 4 GiB (too many data blocks with long keys); \
                 write smaller tables or shorter keys",
                self.path.display()
            )));
        }
        let handle = self.write_block(BlockSource::Data)?;
        let mut value = Vec::with_capacity(MAX_HANDLE_VARINT_LEN);
        handle.encode_varint(&mut value);
        self.index_block.add(self.data_block.last_key(), &value);
        self.data_block.reset();
        self.data_blocks += 1;
        Ok(())
    }

    /// Bytes the file will have if finished now (excluding the filter,
    /// properties and index blocks, which are small next to the data).
    pub fn estimated_file_size(&self) -> u64 {
        self.offset
            + if self.data_block.is_empty() {
                0
            } else {
                self.data_block.estimated_size() as u64
            }
    }

    /// Entries (versions and tombstones) added so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Adds a named property (bytes) to the properties block, e.g.
    /// `"sievedb.hll"`. Must be called before [`finish`](Self::finish); a
    /// later call with the same name replaces the value. Names starting with
    /// [`RESERVED_PROPERTY_PREFIX`] belong to the table itself: `finish`
    /// then fails with [`Error::InvalidArgument`].
    pub fn set_property(&mut self, name: &str, value: Vec<u8>) {
        if name.starts_with(RESERVED_PROPERTY_PREFIX) {
            self.bad_property.get_or_insert_with(|| name.to_string());
            return;
        }
        self.properties.insert(name.to_string(), value);
    }

    /// The [`key_hash`] of every distinct user key added so far, in key
    /// order (what the filter is built from).
    pub fn key_hashes(&self) -> &[u64] {
        &self.key_hashes
    }

    /// Writes the last data block, the filter block (built once here from
    /// the key hash of every distinct user key), the properties block, the
    /// index block and the footer, then syncs the file before returning.
    ///
    /// A table without entries is valid: it has no data blocks, an empty
    /// index, and every lookup in it answers "absent" without I/O.
    ///
    /// On an error the file is left incomplete (it will not open as a
    /// table); the caller removes it.
    pub fn finish(mut self) -> Result<TableMeta> {
        self.check_not_failed()?;
        if let Some(name) = &self.bad_property {
            return Err(Error::invalid(format!(
                "property name {name:?} uses the reserved prefix {RESERVED_PROPERTY_PREFIX:?}"
            )));
        }
        self.flush_data_block()?;

        let filter_bytes = if self.prefix_hashes.is_empty() {
            self.opts.filter_policy.build(&self.key_hashes)
        } else {
            let mut all = Vec::with_capacity(self.key_hashes.len() + self.prefix_hashes.len());
            all.extend_from_slice(&self.key_hashes);
            all.extend_from_slice(&self.prefix_hashes);
            self.opts.filter_policy.build(&all)
        };
        let filter_len = filter_bytes.len() as u64;
        let filter = self.write_block(BlockSource::Bytes(filter_bytes))?;

        let largest = user_part(&self.last_key).to_vec();
        let (smallest_seq, largest_seq) = if self.entries == 0 {
            (0, 0)
        } else {
            (self.smallest_seq, self.largest_seq)
        };
        let policy_name = self.opts.filter_policy.name().to_string();
        let mut props = std::mem::take(&mut self.properties);
        let num = |v: u64| encode_u64_property(v);
        props.insert(PROP_ENTRIES.into(), num(self.entries));
        props.insert(PROP_TOMBSTONES.into(), num(self.tombstones));
        props.insert(PROP_DISTINCT_KEYS.into(), num(self.key_hashes.len() as u64));
        props.insert(PROP_SMALLEST_KEY.into(), self.smallest.clone());
        props.insert(PROP_LARGEST_KEY.into(), largest.clone());
        props.insert(PROP_SMALLEST_SEQ.into(), num(smallest_seq));
        props.insert(PROP_LARGEST_SEQ.into(), num(largest_seq));
        props.insert(PROP_FILTER_POLICY.into(), policy_name.clone().into_bytes());
        props.insert(PROP_FILTER_BYTES.into(), num(filter_len));
        if let Some(bits) = self.opts.filter_policy.budget_bits_per_key() {
            props.insert(PROP_FILTER_BITS_PER_KEY.into(), bits.to_le_bytes().to_vec());
        }
        props.insert(PROP_DATA_BLOCKS.into(), num(self.data_blocks));
        if let Some(n) = self.opts.prefix_len {
            props.insert(PROP_PREFIX_LEN.into(), num(n as u64));
            props.insert(
                PROP_DISTINCT_PREFIXES.into(),
                num(self.prefix_hashes.len() as u64),
            );
        }
        let properties = self.write_block(BlockSource::Bytes(encode_properties(&props)))?;

        let index = self.write_block(BlockSource::Index)?;
        let footer = Footer {
            index,
            filter,
            properties,
            version: self.version,
        };
        let footer = footer.encode();
        self.write_buf.extend_from_slice(&footer);
        self.offset += footer.len() as u64;
        self.flush_write_buf()?;
        self.file.sync().map_err(|e| Error::io(&self.path, e))?;

        Ok(TableMeta {
            file_number: self.file_number,
            file_size: self.offset,
            smallest: std::mem::take(&mut self.smallest),
            largest,
            smallest_seq,
            largest_seq,
            entries: self.entries,
            tombstones: self.tombstones,
            distinct_keys: self.key_hashes.len() as u64,
            filter_bytes: filter_len,
            filter_policy: policy_name,
        })
    }
}

enum BlockSource {
    Data,
    Index,
    Bytes(Vec<u8>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::RealFs;

    /// A builder whose data blocks close after every entry (64-byte
    /// blocks, 100-byte keys), so its index gains one full key per entry.
    fn one_entry_blocks(dir: &std::path::Path, number: u64) -> TableBuilder {
        let opts = TableOptions {
            block_bytes: 64,
            ..TableOptions::default()
        };
        let path = dir.join(format!("{number:06}.sst"));
        TableBuilder::new(&RealFs, &path, number, opts).unwrap()
    }

    fn key(i: u32) -> Vec<u8> {
        let mut k = vec![b'k'; 100];
        k[96..].copy_from_slice(&i.to_be_bytes());
        k
    }

    #[test]
    fn an_index_block_past_its_limit_is_refused_not_truncated() {
        let dir = tempfile::tempdir().unwrap();
        // The index may hold about 5 entries of 108-byte internal keys.
        let mut b = one_entry_blocks(dir.path(), 1);
        b.index_block = BlockBuilder::new(1).with_limit(700);
        let mut refused_at = None;
        for i in 0..20 {
            if let Err(e) = b.add(&key(i), 1, ValueKind::Put, b"v") {
                assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
                assert!(e.to_string().contains("index block"), "{e}");
                refused_at = Some(i);
                break;
            }
        }
        let refused_at = refused_at.expect("the index limit was never enforced");
        assert!(
            (4..=7).contains(&refused_at),
            "refused at entry {refused_at}"
        );
        // The builder is spent: nothing more is added, and it cannot finish.
        assert!(b.add(&key(100), 1, ValueKind::Put, b"v").is_err());
        assert!(b.finish().is_err());

        // The same entries with the real limit build a table.
        let mut b = one_entry_blocks(dir.path(), 2);
        for i in 0..20 {
            b.add(&key(i), 1, ValueKind::Put, b"v").unwrap();
        }
        assert_eq!(b.finish().unwrap().entries, 20);
    }
}
