//! Low-level codecs of the table format: varints, block handles, the block
//! trailers (checksum, and in version 2 the block type), the fixed-size
//! footer, the properties block and the LZ4 framing of compressed blocks.
//!
//! The byte layouts are described in [`crate::sstable`] and `docs/format.md`.
//! Every decoder here works on untrusted bytes: it returns `None` or an error
//! for anything malformed and never indexes out of bounds.

use std::collections::BTreeMap;

/// Bytes after every block of a version-1 table: the CRC-32 (IEEE
/// polynomial, as `crc32fast` computes it) of the block contents, little
/// endian.
pub const BLOCK_TRAILER_LEN: usize = 4;

/// Bytes after every block of a version-2 table: the block type (one byte,
/// [`BLOCK_TYPE_RAW`] or [`BLOCK_TYPE_LZ4`]), then the CRC-32 of the stored
/// bytes followed by that type byte, little endian.
pub const BLOCK_TRAILER_LEN_V2: usize = 5;

/// Size of the footer at the end of every table file.
pub const FOOTER_LEN: usize = 64;

/// Table format version 1: blocks are stored as they are, each followed by
/// a 4-byte CRC ([`BLOCK_TRAILER_LEN`]). Written for tables without
/// compression.
pub const FORMAT_VERSION_1: u32 = 1;

/// Table format version 2: every block is followed by a type byte and a
/// CRC ([`BLOCK_TRAILER_LEN_V2`]); a data block may be stored compressed.
/// Written for tables built with compression.
pub const FORMAT_VERSION_2: u32 = 2;

/// The newest table format version this code writes and reads (it reads
/// every version from [`FORMAT_VERSION_1`] on).
pub const FORMAT_VERSION: u32 = FORMAT_VERSION_2;

/// Block type (version 2): the stored bytes are the block's contents.
pub const BLOCK_TYPE_RAW: u8 = 0;

/// Block type (version 2): the stored bytes are `varint32
/// uncompressed_len` followed by one LZ4 block (the LZ4 block format, no
/// frame) that decompresses to exactly `uncompressed_len` bytes. Only data
/// blocks are ever stored this way.
pub const BLOCK_TYPE_LZ4: u8 = 1;

/// Largest ratio of decompressed to compressed size an LZ4 block can
/// reach (a match's length grows by 255 per extra byte). A stored
/// `uncompressed_len` above [`max_decompressed_len`] of the stored size is
/// corruption, so a damaged length can never ask for a huge buffer.
pub const MAX_LZ4_RATIO: u64 = 255;

/// The length of a block's trailer in tables of format `version` (1 or 2).
#[inline]
pub fn trailer_len(version: u32) -> usize {
    if version >= FORMAT_VERSION_2 {
        BLOCK_TRAILER_LEN_V2
    } else {
        BLOCK_TRAILER_LEN
    }
}

/// The largest decompressed size accepted for an LZ4 block whose stored
/// payload (after the length varint) is `compressed_len` bytes: the LZ4
/// ratio bound, and below 4 GiB (a block's restart offsets are `u32`).
#[inline]
pub fn max_decompressed_len(compressed_len: usize) -> usize {
    let bound = (compressed_len as u64)
        .saturating_mul(MAX_LZ4_RATIO)
        .saturating_add(64)
        .min(u32::MAX as u64);
    usize::try_from(bound).unwrap_or(usize::MAX)
}

/// Compresses a data block's contents for storage as [`BLOCK_TYPE_LZ4`]
/// (`varint32 len | lz4 block`). `None` when that would not save at least
/// an eighth of the block (LevelDB's rule: the CPU to decompress is not
/// worth less), or when the block is outside what a reader accepts.
pub fn lz4_compress_block(contents: &[u8]) -> Option<Vec<u8>> {
    if contents.len() > u32::MAX as usize {
        return None;
    }
    let mut out = Vec::with_capacity(5 + lz4_flex::block::get_maximum_output_size(contents.len()));
    put_varint64(&mut out, contents.len() as u64);
    let header = out.len();
    out.resize(
        header + lz4_flex::block::get_maximum_output_size(contents.len()),
        0,
    );
    let n = lz4_flex::block::compress_into(contents, &mut out[header..]).ok()?;
    out.truncate(header + n);
    let saves_an_eighth = out.len() < contents.len() - contents.len() / 8;
    let readable = contents.len() <= max_decompressed_len(n);
    (saves_an_eighth && readable).then_some(out)
}

/// Decompresses the stored bytes of a [`BLOCK_TYPE_LZ4`] block. Every
/// failure is a reason string (the caller reports it as corruption): a bad
/// length varint, a length above [`max_decompressed_len`], or LZ4 data
/// that does not decode to exactly that length.
pub fn lz4_decompress_block(stored: &[u8]) -> Result<Vec<u8>, String> {
    let (len, p) = get_varint32(stored, 0).ok_or("bad decompressed length in compressed block")?;
    let payload = &stored[p..];
    let max = max_decompressed_len(payload.len());
    if len > max {
        return Err(format!(
            "compressed block claims {len} decompressed bytes, more than {max} possible from {} stored bytes",
            payload.len()
        ));
    }
    let mut out = vec![0u8; len];
    match lz4_flex::block::decompress_into(payload, &mut out) {
        Ok(n) if n == len => Ok(out),
        Ok(n) => Err(format!(
            "compressed block decompressed to {n} bytes, not the {len} it records"
        )),
        Err(e) => Err(format!("compressed block does not decompress: {e}")),
    }
}

/// The last eight bytes of every table file (`"SIEVEsst"` read as a
/// little-endian `u64`).
pub const MAGIC: u64 = u64::from_le_bytes(*b"SIEVEsst");

/// Prefix of the property names the table itself records. Names under this
/// prefix are reserved; [`TableBuilder::set_property`](super::TableBuilder::set_property)
/// refuses them (at `finish`).
pub const RESERVED_PROPERTY_PREFIX: &str = "sievedb.table.";

/// Property: number of entries (versions and tombstones), varint64.
pub const PROP_ENTRIES: &str = "sievedb.table.entries";
/// Property: number of tombstones, varint64.
pub const PROP_TOMBSTONES: &str = "sievedb.table.tombstones";
/// Property: number of distinct user keys, varint64.
pub const PROP_DISTINCT_KEYS: &str = "sievedb.table.distinct_keys";
/// Property: smallest user key, raw bytes.
pub const PROP_SMALLEST_KEY: &str = "sievedb.table.smallest_key";
/// Property: largest user key, raw bytes.
pub const PROP_LARGEST_KEY: &str = "sievedb.table.largest_key";
/// Property: smallest sequence number of any entry, varint64.
pub const PROP_SMALLEST_SEQ: &str = "sievedb.table.smallest_seq";
/// Property: largest sequence number of any entry, varint64.
pub const PROP_LARGEST_SEQ: &str = "sievedb.table.largest_seq";
/// Property: name of the filter policy that built the filter block, UTF-8.
pub const PROP_FILTER_POLICY: &str = "sievedb.table.filter_policy";
/// Property: size of the filter block in bytes, varint64.
pub const PROP_FILTER_BYTES: &str = "sievedb.table.filter_bytes";
/// Property: the bits per key the filter policy was sized to
/// ([`FilterPolicy::budget_bits_per_key`](crate::filter::FilterPolicy::budget_bits_per_key)),
/// an `f64` as 8 little-endian bytes; absent for policies without a size.
pub const PROP_FILTER_BITS_PER_KEY: &str = "sievedb.table.filter_bits_per_key";
/// Property: the prefix length whose prefixes the filter also holds
/// ([`TableOptions::prefix_len`](super::TableOptions::prefix_len)), varint64;
/// absent for tables without prefixes in their filter.
pub const PROP_PREFIX_LEN: &str = "sievedb.table.prefix_len";
/// Property: number of distinct key prefixes added to the filter, varint64;
/// present with [`PROP_PREFIX_LEN`].
pub const PROP_DISTINCT_PREFIXES: &str = "sievedb.table.distinct_prefixes";
/// Property: number of data blocks, varint64.
pub const PROP_DATA_BLOCKS: &str = "sievedb.table.data_blocks";

/// Appends `v` as a LEB128 varint (7 bits per byte, low bits first).
#[inline]
pub fn put_varint64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes a varint starting at `pos`. Returns the value and the position
/// after it, or `None` if the bytes end first or the value overflows 64 bits.
#[inline]
pub fn get_varint64(buf: &[u8], pos: usize) -> Option<(u64, usize)> {
    let first = *buf.get(pos)?;
    if first < 0x80 {
        return Some((first as u64, pos + 1));
    }
    let mut result = (first & 0x7f) as u64;
    let mut shift = 7u32;
    let mut p = pos + 1;
    loop {
        let b = *buf.get(p)?;
        p += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        result |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some((result, p));
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Decodes a varint that must fit in 32 bits, as a `usize` length.
#[inline]
pub fn get_varint32(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    let (v, p) = get_varint64(buf, pos)?;
    if v > u32::MAX as u64 {
        return None;
    }
    Some((v as usize, p))
}

/// Where a block lives in the file: the offset of its first byte and the
/// length of its stored bytes (the trailer follows and is not counted in
/// `len`; for a compressed block `len` is the compressed size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockHandle {
    /// Offset of the block's first byte in the file.
    pub offset: u64,
    /// Length of the block contents, without the checksum trailer.
    pub len: u64,
}

impl BlockHandle {
    /// Offset one past the block's checksum trailer in a version-1 table,
    /// or `None` on overflow.
    pub fn end_with_trailer(&self) -> Option<u64> {
        self.end_with_trailer_len(BLOCK_TRAILER_LEN)
    }

    /// Offset one past the block's trailer of `trailer_len` bytes (see
    /// [`trailer_len`]), or `None` on overflow.
    pub fn end_with_trailer_len(&self, trailer_len: usize) -> Option<u64> {
        self.offset
            .checked_add(self.len)?
            .checked_add(trailer_len as u64)
    }

    /// Appends the varint encoding (offset, then len), as used in index
    /// entries.
    pub fn encode_varint(&self, out: &mut Vec<u8>) {
        put_varint64(out, self.offset);
        put_varint64(out, self.len);
    }

    /// Decodes a varint handle that must fill `buf` exactly.
    pub fn decode_varint(buf: &[u8]) -> Option<BlockHandle> {
        let (offset, p) = get_varint64(buf, 0)?;
        let (len, p) = get_varint64(buf, p)?;
        (p == buf.len()).then_some(BlockHandle { offset, len })
    }
}

/// CRC-32 of a block's contents, as stored in its trailer (version 1).
#[inline]
pub fn block_crc(contents: &[u8]) -> u32 {
    crc32fast::hash(contents)
}

/// CRC-32 of a version-2 block: its stored bytes followed by its type byte
/// (so a damaged type is caught like damaged contents).
#[inline]
pub fn block_crc_v2(stored: &[u8], block_type: u8) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(stored);
    h.update(&[block_type]);
    h.finalize()
}

/// The fixed-size footer at the end of every table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// The index block.
    pub index: BlockHandle,
    /// The filter block.
    pub filter: BlockHandle,
    /// The properties block.
    pub properties: BlockHandle,
    /// The table format version ([`FORMAT_VERSION_1`] or
    /// [`FORMAT_VERSION_2`]); it decides the blocks' trailer layout.
    pub version: u32,
}

/// Why a footer was rejected, with the offset of the bad field relative to
/// the footer's first byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FooterError {
    /// Offset of the offending field inside the footer.
    pub offset_in_footer: u64,
    /// What was wrong.
    pub reason: String,
}

impl Footer {
    /// Encodes the footer (64 bytes, see the module docs of
    /// [`crate::sstable`]).
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut out = [0u8; FOOTER_LEN];
        let fields = [
            self.index.offset,
            self.index.len,
            self.filter.offset,
            self.filter.len,
            self.properties.offset,
            self.properties.len,
        ];
        for (i, v) in fields.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        out[48..52].copy_from_slice(&self.version.to_le_bytes());
        let crc = crc32fast::hash(&out[..52]);
        out[52..56].copy_from_slice(&crc.to_le_bytes());
        out[56..64].copy_from_slice(&MAGIC.to_le_bytes());
        out
    }

    /// Decodes and validates a footer: magic first (is this a table at
    /// all?), then the checksum, then the version.
    pub fn decode(bytes: &[u8]) -> Result<Footer, FooterError> {
        let err = |offset_in_footer: u64, reason: String| FooterError {
            offset_in_footer,
            reason,
        };
        let b: &[u8; FOOTER_LEN] = bytes
            .try_into()
            .map_err(|_| err(0, format!("footer is {} bytes, not 64", bytes.len())))?;
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let u32_at = |i: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[i..i + 4]);
            u32::from_le_bytes(w)
        };
        let magic = u64_at(56);
        if magic != MAGIC {
            return Err(err(56, format!("bad magic number {magic:#018x}")));
        }
        let stored = u32_at(52);
        let actual = crc32fast::hash(&b[..52]);
        if stored != actual {
            return Err(err(
                52,
                format!(
                    "footer checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"
                ),
            ));
        }
        let version = u32_at(48);
        if !(FORMAT_VERSION_1..=FORMAT_VERSION).contains(&version) {
            return Err(err(48, format!("unknown table format version {version}")));
        }
        let h = |i: usize| BlockHandle {
            offset: u64_at(i),
            len: u64_at(i + 8),
        };
        Ok(Footer {
            index: h(0),
            filter: h(16),
            properties: h(32),
            version,
        })
    }
}

/// Encodes the properties block: `varint32 count`, then per property in
/// ascending name order `varint32 name_len, name (UTF-8), varint64
/// value_len, value`.
pub fn encode_properties(props: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint64(&mut out, props.len() as u64);
    for (name, value) in props {
        put_varint64(&mut out, name.len() as u64);
        out.extend_from_slice(name.as_bytes());
        put_varint64(&mut out, value.len() as u64);
        out.extend_from_slice(value);
    }
    out
}

/// Decodes a properties block. Rejects truncated entries, names that are
/// not UTF-8, names out of ascending order (or repeated) and trailing bytes.
pub fn decode_properties(buf: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, &'static str> {
    let (count, mut p) = get_varint32(buf, 0).ok_or("bad property count")?;
    let mut out = BTreeMap::new();
    let mut last: Option<String> = None;
    for _ in 0..count {
        let (name_len, q) = get_varint32(buf, p).ok_or("bad property name length")?;
        let name_end = q.checked_add(name_len).ok_or("property name too long")?;
        let name = buf
            .get(q..name_end)
            .ok_or("property name runs past block")?;
        let name = std::str::from_utf8(name).map_err(|_| "property name is not UTF-8")?;
        let (value_len, q) = get_varint64(buf, name_end).ok_or("bad property value length")?;
        let value_end = usize::try_from(value_len)
            .ok()
            .and_then(|l| q.checked_add(l))
            .ok_or("property value too long")?;
        let value = buf
            .get(q..value_end)
            .ok_or("property value runs past block")?;
        if let Some(prev) = &last {
            if prev.as_str() >= name {
                return Err("property names out of order");
            }
        }
        last = Some(name.to_string());
        out.insert(name.to_string(), value.to_vec());
        p = value_end;
    }
    if p != buf.len() {
        return Err("trailing bytes after properties");
    }
    Ok(out)
}

/// Encodes a number property value.
pub fn encode_u64_property(v: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    put_varint64(&mut out, v);
    out
}

/// Decodes a number property value that must fill `buf` exactly.
pub fn decode_u64_property(buf: &[u8]) -> Option<u64> {
    let (v, p) = get_varint64(buf, 0)?;
    (p == buf.len()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_rejects() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint64(&mut b, v);
            assert_eq!(get_varint64(&b, 0), Some((v, b.len())));
            assert_eq!(get_varint64(&b[..b.len() - 1], 0), None);
        }
        // 11 continuation bytes overflow.
        assert_eq!(get_varint64(&[0xff; 11], 0), None);
        // A 10th byte above 1 overflows.
        let mut b = vec![0xff; 9];
        b.push(0x02);
        assert_eq!(get_varint64(&b, 0), None);
        let mut b = Vec::new();
        put_varint64(&mut b, u32::MAX as u64 + 1);
        assert_eq!(get_varint32(&b, 0), None);
    }

    #[test]
    fn footer_round_trip_and_checks() {
        let f = Footer {
            index: BlockHandle { offset: 1, len: 2 },
            filter: BlockHandle { offset: 3, len: 4 },
            properties: BlockHandle { offset: 5, len: 6 },
            version: FORMAT_VERSION_2,
        };
        let enc = f.encode();
        assert_eq!(Footer::decode(&enc), Ok(f));
        let mut bad = enc;
        bad[63] ^= 1;
        assert_eq!(Footer::decode(&bad).unwrap_err().offset_in_footer, 56);
        let mut bad = enc;
        bad[3] ^= 1;
        assert_eq!(Footer::decode(&bad).unwrap_err().offset_in_footer, 52);
        // A valid checksum over an unknown version is still refused.
        let mut bad = enc;
        bad[48] = 9;
        let crc = crc32fast::hash(&bad[..52]);
        bad[52..56].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Footer::decode(&bad).unwrap_err().offset_in_footer, 48);
        assert!(Footer::decode(&enc[1..]).is_err());
        let v1 = Footer {
            version: FORMAT_VERSION_1,
            ..f
        };
        assert_eq!(Footer::decode(&v1.encode()), Ok(v1));
    }

    #[test]
    fn lz4_block_round_trip_and_rejects() {
        let contents: Vec<u8> = (0..4096u32).map(|i| (i % 7) as u8).collect();
        let stored = lz4_compress_block(&contents).expect("compressible");
        assert!(stored.len() < contents.len() / 2);
        assert_eq!(lz4_decompress_block(&stored).unwrap(), contents);
        // Incompressible bytes are not worth storing compressed.
        let mut x = 0x9e3779b97f4a7c15u64;
        let random: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(lz4_compress_block(&random).is_none());
        // A length above the ratio bound is refused before allocating.
        let mut huge = Vec::new();
        put_varint64(&mut huge, u32::MAX as u64);
        huge.extend_from_slice(&stored[2..]);
        assert!(lz4_decompress_block(&huge)
            .unwrap_err()
            .contains("more than"));
        // A wrong (but plausible) length is refused.
        let mut short = Vec::new();
        put_varint64(&mut short, 4000);
        short.extend_from_slice(&stored[2..]);
        assert!(lz4_decompress_block(&short).is_err());
        assert!(lz4_decompress_block(&[]).is_err());
        // Every truncation and every single-byte change is an error or a
        // block of the recorded length, never a panic.
        for cut in 0..stored.len() {
            let _ = lz4_decompress_block(&stored[..cut]);
        }
        for i in 0..stored.len() {
            for bit in [1u8, 0x80, 0xff] {
                let mut bad = stored.clone();
                bad[i] ^= bit;
                if let Ok(out) = lz4_decompress_block(&bad) {
                    assert!(out.len() <= max_decompressed_len(bad.len()));
                }
            }
        }
    }

    #[test]
    fn properties_round_trip_and_rejects() {
        let mut p = BTreeMap::new();
        p.insert("a".to_string(), vec![1, 2, 3]);
        p.insert("b".to_string(), vec![]);
        let enc = encode_properties(&p);
        assert_eq!(decode_properties(&enc), Ok(p));
        assert!(decode_properties(&enc[..enc.len() - 1]).is_err());
        let mut extra = enc.clone();
        extra.push(0);
        assert!(decode_properties(&extra).is_err());
        // Out of order names.
        let mut bad = Vec::new();
        put_varint64(&mut bad, 2);
        for n in ["b", "a"] {
            put_varint64(&mut bad, 1);
            bad.extend_from_slice(n.as_bytes());
            put_varint64(&mut bad, 0);
        }
        assert!(decode_properties(&bad).is_err());
    }
}
