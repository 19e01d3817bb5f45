//! Sorted string tables: immutable files of sorted internal keys, each with
//! a point-read filter that is consulted before any data block.
//!
//! [`TableBuilder`] streams entries (in internal-key order, see
//! [`crate::key`]) into a new file; [`Table`] opens one through a memory map
//! and answers point reads ([`Table::get`]) and range scans
//! ([`Table::iter`]).
//!
//! # File format (versions 1 and 2)
//!
//! All integers are little endian; `varint` is LEB128 (7 bits per byte, low
//! bits first). In version 1 (written with [`Compression::None`]) every
//! block is followed by a 4-byte trailer, the CRC-32 (IEEE, as computed by
//! `crc32fast`) of the block's contents. In version 2 (written with
//! [`Compression::Lz4`]) every block is followed by a 5-byte trailer,
//! `type: u8 | crc32: u32`, the CRC over the stored bytes and the type;
//! type 0 stores the contents as they are, type 1 (data blocks only) stores
//! `varint32 uncompressed_len | LZ4 block`. A *handle* `(offset, len)`
//! names a block's first byte and its stored length without the trailer.
//! The footer's version field says which; both are read.
//!
//! ```text
//! +--------------+-----+----------------+--------+------------+-------+--------+
//! | data block 0 | ... | data block n-1 | filter | properties | index | footer |
//! +--------------+-----+----------------+--------+------------+-------+--------+
//!   each block is followed by its trailer                               64 bytes
//! ```
//!
//! * **Data blocks** hold entries in internal-key order. A block is closed
//!   once its size reaches [`TableOptions::block_bytes`] (default 4 KiB), so
//!   a block holding a large value is larger. Each entry is
//!   `varint shared | varint unshared | varint value_len | key[shared..] |
//!   value`, where the key is the encoded internal key (`user_key ++
//!   trailer`, trailer = `u64 LE (seq << 8) | kind`, kind 0 = delete, 1 =
//!   put; a tombstone's value is empty) and `shared` is the prefix it has in
//!   common with the previous key. Every [`TableOptions::restart_interval`]
//!   entries (default 16) is a restart point that stores its whole key. The
//!   block ends with the restart offsets (`u32` each) and their count
//!   (`u32`), so a reader binary-searches the restart points and scans at
//!   most one interval.
//! * **Filter block**: the bytes the table's [`FilterPolicy`] built, once,
//!   from the [`key_hash`](crate::filter::key_hash) (XXH3-64) of every
//!   distinct user key. Empty for [`NoFilter`](crate::filter::NoFilter).
//!   Built-in filters describe themselves (last byte = format id); the
//!   policy name is recorded in the properties so a custom policy's filter
//!   finds its decoder.
//! * **Properties block**: `varint count`, then per property, in strictly
//!   ascending name order, `varint name_len | name (UTF-8) | varint
//!   value_len | value`. The table records, as varints unless noted:
//!   `sievedb.table.entries`, `.tombstones`, `.distinct_keys`,
//!   `.smallest_key` and `.largest_key` (raw user-key bytes),
//!   `.smallest_seq`, `.largest_seq`, `.filter_policy` (UTF-8 name),
//!   `.filter_bytes` (size of the filter block) and `.data_blocks`, and,
//!   when the policy reports a size, `.filter_bits_per_key` (an `f64` as 8
//!   little-endian bytes: the bits per key the filter was built for). Any
//!   other name is an extra property set with
//!   [`TableBuilder::set_property`] (e.g. `sievedb.hll`, the key-statistics
//!   sketch).
//! * **Index block**: a block in the data-block format with a restart at
//!   every entry; one entry per data block, in order, whose key is the
//!   block's *last internal key* (unshortened) and whose value is the
//!   block's handle as `varint offset | varint len`. The reader decodes it
//!   into memory at open.
//! * **Footer** (64 bytes): index handle, filter handle, properties handle
//!   (each `u64 offset, u64 len`: bytes 0..48), format version `u32` = 1
//!   or 2 (48..52), CRC-32 of bytes 0..52 (52..56), magic `u64` =
//!   `"SIEVEsst"` read little endian (56..64).
//!
//! A table with no entries is valid: no data blocks, an empty index block
//! (just a zero restart count), properties with `entries = 0` and empty
//! smallest/largest keys, and a filter built from no keys.
//!
//! # Damage
//!
//! The footer and the index, filter and properties blocks are checksummed at
//! open, each data block whenever it is read from the file (a copy in the
//! database's block cache was verified when it was made, and is read
//! without the file). A checksum mismatch, a
//! truncated file, a bad magic number, an unknown version, handles that do
//! not tile the file, an entry whose lengths run past its block, or
//! properties that contradict the index are all [`Error::Corruption`]
//! naming the file and the offset.
//!
//! [`Error::Corruption`]: crate::Error::Corruption

use std::cmp::Ordering;
use std::sync::Arc;

use crate::filter::{BloomPolicy, FilterPolicy};
use crate::key::{SequenceNumber, ValueKind};

pub(crate) mod block;
mod builder;
pub mod format;
mod iter;
mod reader;

pub use builder::{
    TableBuilder, BLOCK_BYTES_RANGE, MAX_KEY_LEN, MAX_VALUE_LEN, RESTART_INTERVAL_RANGE,
};
pub use iter::TableIter;
pub use reader::Table;

/// How a table is written.
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// Target size of a data block's contents in bytes (default 4096). A
    /// block is closed as soon as it reaches this size. Must lie in
    /// [`BLOCK_BYTES_RANGE`].
    pub block_bytes: usize,
    /// Entries between restart points in a data block (default 16). Must
    /// lie in [`RESTART_INTERVAL_RANGE`].
    pub restart_interval: usize,
    /// Builds the table's filter; its name is recorded in the table.
    pub filter_policy: Arc<dyn FilterPolicy>,
    /// When `Some(n)`, the filter also holds the [`prefix_hash`] of the
    /// first `n` bytes of every key at least `n` bytes long (each distinct
    /// prefix once), and the table records `n`
    /// ([`Table::may_contain_prefix`]). The filter is sized for keys plus
    /// prefixes. `None` (the default): keys only. Lengths outside
    /// `1..=`[`MAX_KEY_LEN`] are refused by [`TableBuilder::new`].
    ///
    /// [`prefix_hash`]: crate::filter::prefix_hash
    pub prefix_len: Option<usize>,
    /// How data blocks are stored (default [`Compression::None`]).
    /// [`Compression::None`] writes a format-version-1 table, exactly as
    /// before compression existed; [`Compression::Lz4`] writes version 2,
    /// whose every block records whether it is stored compressed.
    pub compression: Compression,
}

/// How a table's data blocks are stored.
///
/// Whatever a table was written with, it is read correctly under any
/// setting: each table records its format version and each version-2 block
/// its type, so tables of both kinds coexist in one database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Blocks are stored as they are (format version 1). The default.
    #[default]
    None,
    /// Each data block is compressed with LZ4 (the `lz4_flex` crate's block
    /// format) and stored compressed when that saves at least an eighth of
    /// its size, otherwise stored as it is (format version 2). Index,
    /// filter and properties blocks are never compressed.
    Lz4,
}

impl Default for TableOptions {
    /// 4 KiB blocks, a restart every 16 entries, a blocked Bloom filter at
    /// 10 bits per key.
    fn default() -> Self {
        TableOptions {
            block_bytes: 4096,
            restart_interval: 16,
            filter_policy: Arc::new(BloomPolicy::new(10.0)),
            prefix_len: None,
            compression: Compression::None,
        }
    }
}

/// What the engine needs to know about a finished table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    /// The table's file number.
    pub file_number: u64,
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Smallest user key (empty for a table without entries).
    pub smallest: Vec<u8>,
    /// Largest user key (empty for a table without entries).
    pub largest: Vec<u8>,
    /// Smallest sequence number of any entry (0 without entries).
    pub smallest_seq: u64,
    /// Largest sequence number of any entry (0 without entries).
    pub largest_seq: u64,
    /// Entries: versions and tombstones.
    pub entries: u64,
    /// Tombstones among the entries.
    pub tombstones: u64,
    /// Distinct user keys.
    pub distinct_keys: u64,
    /// Size of the filter block in bytes.
    pub filter_bytes: u64,
    /// Name of the policy that built the filter.
    pub filter_policy: String,
}

/// The version of a key a point read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Sequence number of the version.
    pub seq: SequenceNumber,
    /// Put or tombstone.
    pub kind: ValueKind,
    /// The value (empty for a tombstone).
    pub value: Vec<u8>,
}

/// Compares two encoded internal keys of at least 8 bytes each.
pub(crate) fn compare_encoded(a: &[u8], b: &[u8]) -> Ordering {
    block::cmp_internal_parts(a, block::user_part(b), reader::trailer_of(b))
}

/// A short printable form of a key for error messages.
pub(crate) fn show_key(key: &[u8]) -> String {
    const SHOWN: usize = 32;
    let head = &key[..key.len().min(SHOWN)];
    let mut s = String::from("b\"");
    for &b in head {
        s.extend(std::ascii::escape_default(b).map(char::from));
    }
    s.push('"');
    if key.len() > SHOWN {
        s.push_str(&format!("... ({} bytes)", key.len()));
    }
    s
}
