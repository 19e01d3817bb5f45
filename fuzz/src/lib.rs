//! Helpers shared by the fuzz targets: turning fuzz input into structured
//! files (valid tables and logs the fuzzer can then damage) and repairing
//! checksums so damage reaches the parsers behind them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sievedb::filter::{BloomPolicy, FilterPolicy, NoFilter, RibbonPolicy};
use sievedb::fs::RealFs;
use sievedb::key::ValueKind;
use sievedb::sstable::format::{
    block_crc, block_crc_v2, get_varint64, trailer_len, FOOTER_LEN, FORMAT_VERSION_2,
};
use sievedb::sstable::{Compression, TableBuilder, TableOptions};

/// A per-process scratch directory (fuzz processes are single-threaded).
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("scratch dir"))
        .path()
}

/// A scratch file path inside [`scratch_dir`].
pub fn scratch_file(name: &str) -> PathBuf {
    scratch_dir().join(name)
}

/// One of the built-in policies, chosen by `b`.
pub fn policy(b: u8) -> Arc<dyn FilterPolicy> {
    match b % 3 {
        0 => Arc::new(BloomPolicy::new(10.0)),
        1 => Arc::new(RibbonPolicy::new(10.0)),
        _ => Arc::new(NoFilter),
    }
}

/// Splits `data` into length-prefixed chunks (first byte = length).
pub fn chunks(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = data.split_first() {
        let len = (len as usize).min(rest.len());
        out.push(&rest[..len]);
        data = &rest[len..];
    }
    out
}

/// Writes a valid table at `path` holding entries derived from `data`
/// (keys from chunks, sorted and de-duplicated). Returns false if the
/// builder refused (e.g. no usable keys).
pub fn build_table(path: &Path, data: &[u8], policy_byte: u8) -> bool {
    let mut keys: Vec<Vec<u8>> = chunks(data)
        .into_iter()
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    keys.sort();
    keys.dedup();
    let opts = TableOptions {
        block_bytes: 64,
        restart_interval: 1 + (policy_byte as usize % 4),
        filter_policy: policy(policy_byte),
        // Some tables also hold 2-byte key prefixes in their filter.
        prefix_len: (policy_byte % 3 == 0).then_some(2),
        // Some tables are written with LZ4 (format version 2): blocks of
        // repetitive keys and values are stored compressed.
        compression: if policy_byte & 0x10 != 0 {
            Compression::Lz4
        } else {
            Compression::None
        },
    };
    // The builder creates its file exclusively; the scratch path holds the
    // previous input's table.
    let _ = std::fs::remove_file(path);
    let Ok(mut b) = TableBuilder::new(&RealFs, path, 1, opts) else {
        return false;
    };
    for (i, k) in keys.iter().enumerate() {
        let kind = if k[0] % 5 == 0 {
            ValueKind::Delete
        } else {
            ValueKind::Put
        };
        let value = if kind == ValueKind::Put {
            &k[..]
        } else {
            &[][..]
        };
        if b.add(k, i as u64 + 1, kind, value).is_err() {
            return false;
        }
    }
    b.finish().is_ok()
}

/// XORs bytes of `file` at positions from `flips` (3 bytes each: u16 LE
/// position modulo the length, then the xor mask).
pub fn apply_flips(file: &mut [u8], flips: &[u8]) {
    if file.is_empty() {
        return;
    }
    for f in flips.chunks_exact(3) {
        let pos = u16::from_le_bytes([f[0], f[1]]) as usize % file.len();
        file[pos] ^= f[2].max(1);
    }
}

fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?))
}

/// Recomputes every checksum of a table file (data blocks named by the
/// index, filter, properties, index, footer) so that damage to the bytes
/// they cover reaches the decoders (and, for compressed blocks, the LZ4
/// decompressor) instead of being stopped by the CRC. The trailer layout
/// follows the footer's format version (1: `crc`, 2: `type | crc` with the
/// CRC over the stored bytes and the type). Handles that do not fit are
/// left alone.
pub fn fix_table_checksums(file: &mut [u8]) {
    let Some(footer_at) = file.len().checked_sub(FOOTER_LEN) else {
        return;
    };
    let f = footer_at;
    let (Some(io), Some(il), Some(fo), Some(fl), Some(po), Some(pl)) = (
        u64_at(file, f),
        u64_at(file, f + 8),
        u64_at(file, f + 16),
        u64_at(file, f + 24),
        u64_at(file, f + 32),
        u64_at(file, f + 40),
    ) else {
        return;
    };
    let version = file
        .get(f + 48..f + 52)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(1);
    let v2 = version == FORMAT_VERSION_2;
    let tl = trailer_len(version);
    let fix = |file: &mut [u8], off: u64, len: u64| {
        let (Ok(off), Ok(len)) = (usize::try_from(off), usize::try_from(len)) else {
            return;
        };
        let Some(end) = off.checked_add(len) else {
            return;
        };
        if end.checked_add(tl).is_none_or(|e| e > file.len()) {
            return;
        }
        if v2 {
            let crc = block_crc_v2(&file[off..end], file[end]);
            file[end + 1..end + 5].copy_from_slice(&crc.to_le_bytes());
        } else {
            let crc = block_crc(&file[off..end]);
            file[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        }
    };
    // Data blocks: walk the index block's entries (restart at every entry:
    // shared = 0, unshared, value_len, key, value = varint offset, len).
    if let (Ok(o), Ok(l)) = (usize::try_from(io), usize::try_from(il)) {
        if let Some(index) = o
            .checked_add(l)
            .filter(|&e| e <= file.len())
            .map(|e| file[o..e].to_vec())
        {
            let n = index
                .len()
                .checked_sub(4)
                .and_then(|p| index.get(p..))
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
                .unwrap_or(0);
            let entries_end = index.len().saturating_sub(4 + 4 * n.min(index.len()));
            let mut p = 0;
            while p < entries_end {
                let Some((_, q)) = get_varint64(&index, p) else {
                    break;
                };
                let Some((unshared, q)) = get_varint64(&index, q) else {
                    break;
                };
                let Some((vlen, q)) = get_varint64(&index, q) else {
                    break;
                };
                let Some(v) = q.checked_add(unshared as usize) else {
                    break;
                };
                let Some(end) = v.checked_add(vlen as usize).filter(|&e| e <= index.len()) else {
                    break;
                };
                if let Some((bo, r)) = get_varint64(&index, v) {
                    if let Some((bl, _)) = get_varint64(&index, r) {
                        fix(file, bo, bl);
                    }
                }
                p = end;
            }
        }
    }
    fix(file, fo, fl);
    fix(file, po, pl);
    fix(file, io, il);
    let crc = block_crc(&file[f..f + 52]);
    file[f + 52..f + 56].copy_from_slice(&crc.to_le_bytes());
}

/// Frames `payloads` as log records (`crc | len | payload`).
pub fn frame_records(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in payloads {
        let len = (p.len() as u32).to_le_bytes();
        let mut h = crc32fast::Hasher::new();
        h.update(&len);
        h.update(p);
        out.extend_from_slice(&h.finalize().to_le_bytes());
        out.extend_from_slice(&len);
        out.extend_from_slice(p);
    }
    out
}

/// Encodes a write batch payload the way the log stores one:
/// `first_seq u64 | count u32 | (kind u8 | key_len u32 | key | [value_len
/// u32 | value])*`, keys and values taken from chunks of `data` (an empty
/// key chunk becomes the key `[0]`: no write logs an empty key). Returns the
/// payload and its number of operations, which the next batch's `first_seq`
/// must follow (the log's sequence chain).
pub fn encode_batch(first_seq: u64, data: &[u8]) -> (Vec<u8>, u64) {
    let parts = chunks(data);
    let mut out = Vec::new();
    out.extend_from_slice(&first_seq.to_le_bytes());
    let ops: Vec<_> = parts.chunks(2).collect();
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    let count = ops.len() as u64;
    for op in ops {
        let key = if op[0].is_empty() { &[0u8][..] } else { op[0] };
        let value = op.get(1).copied();
        out.push(if value.is_some() { 1 } else { 0 });
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        if let Some(v) = value {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
    }
    (out, count)
}

/// Rewrites the checksum of Ribbon filter bytes (format 0x05 or 0x03) over
/// their shard table, shard count and column count, as the builder
/// computes it, so that crafted or damaged tables reach the layout checks
/// and the queries behind the checksum (which is not a MAC). Bytes that do
/// not end in a Ribbon id or whose table does not fit are left alone.
pub fn fix_ribbon_crc(bytes: &mut [u8]) {
    let len = bytes.len();
    if len < 10 || !matches!(bytes[len - 1], 0x03 | 0x05) {
        return;
    }
    let t = len - 10;
    let num_shards = u32::from_le_bytes([bytes[t], bytes[t + 1], bytes[t + 2], bytes[t + 3]]);
    let Some(table_start) = (num_shards as usize)
        .checked_mul(13)
        .and_then(|table| t.checked_sub(table))
    else {
        return;
    };
    let crc = crc32fast::hash(&bytes[table_start..t + 5]);
    bytes[t + 5..t + 9].copy_from_slice(&crc.to_le_bytes());
}

/// Rewrites the checksum of format 0x06 Ribbon filter bytes over their
/// shard table and the trailer's counts, as a builder computes it, so that
/// crafted or damaged tables reach the layout checks and the queries
/// behind the checksum. Bytes that do not end in id 0x06 or whose table
/// does not fit are left alone.
pub fn fix_ribbon64_crc(bytes: &mut [u8]) {
    use sievedb::filter::ribbon64::{SHARD_ENTRY_BYTES, TRAILER_BYTES};
    let len = bytes.len();
    if len < TRAILER_BYTES || bytes[len - 1] != sievedb::filter::FORMAT_RIBBON64 {
        return;
    }
    let t = len - TRAILER_BYTES;
    let num_shards = u32::from_le_bytes([bytes[t], bytes[t + 1], bytes[t + 2], bytes[t + 3]]);
    let Some(table_start) = (num_shards as usize)
        .checked_mul(SHARD_ENTRY_BYTES)
        .and_then(|table| t.checked_sub(table))
    else {
        return;
    };
    let crc = crc32fast::hash(&bytes[table_start..t + 9]);
    bytes[t + 9..t + 13].copy_from_slice(&crc.to_le_bytes());
}

/// A consistent format 0x06 filter made from fuzz input: the first bytes
/// pick the column count (1 to 32), the shard count (1 to 16) and the lower
/// shard count; each shard takes 3 bytes (its size, 64 to about 1,100
/// slots, and its seed); the regions are sized as the format defines and
/// filled with the rest of the input, repeated (zeros if none is left).
pub fn craft_ribbon64(data: &[u8]) -> Vec<u8> {
    use sievedb::filter::ribbon64::{region_blocks, Shard64, SHARD_ENTRY_BYTES, WORD_BYTES};
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let upper = u32::from(byte(0) % 32) + 1;
    let num_shards = usize::from(byte(1) % 16) + 1;
    let lower = if upper == 1 {
        0
    } else {
        u32::from(byte(2)) % (num_shards as u32 + 1)
    };
    let shards: Vec<Shard64> = (0..num_shards)
        .map(|i| {
            let at = 3 + 3 * i;
            Shard64 {
                num_slots: 64 + u16::from_le_bytes([byte(at), byte(at + 1) % 4]),
                seed: byte(at + 2),
            }
        })
        .collect();
    let rest = data.get(3 + 3 * num_shards..).unwrap_or(&[]);
    let mut out = Vec::new();
    for (region, columns) in [(0usize, upper - 1), (1, upper)] {
        let slots: u64 = shards
            .iter()
            .enumerate()
            .filter(|&(i, _)| usize::from(i as u32 >= lower) == region)
            .map(|(_, s)| s.num_slots as u64)
            .sum();
        let len = region_blocks(slots) as usize * columns as usize * WORD_BYTES;
        let from = out.len();
        out.extend((from..from + len).map(|i| {
            if rest.is_empty() {
                0
            } else {
                rest[i % rest.len()]
            }
        }));
    }
    let table_start = out.len();
    for s in &shards {
        let mut e = [0u8; SHARD_ENTRY_BYTES];
        s.write(&mut e);
        out.extend_from_slice(&e);
    }
    out.extend_from_slice(&(num_shards as u32).to_le_bytes());
    out.extend_from_slice(&lower.to_le_bytes());
    out.push(upper as u8);
    let crc = crc32fast::hash(&out[table_start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(sievedb::filter::FORMAT_RIBBON64);
    out
}

/// Key hashes and a format 0x06 build of them, both from fuzz input: the
/// first 5 bytes pick the build knobs (keys per shard 1 to 256, so that few
/// keys make many shards; lanes 1 to 4 and the solver; a fixed overhead
/// from -2% to 10% or the default; 1 to 16 seeds; the Ribbon policy's bits
/// per key 1 to 32) and a right shift of every hash (0 to 63: large shifts
/// put every key in the first shards and leave the others empty); every
/// chunk of the rest is one key, expanded into 1 to 64 hashes by its
/// first byte; the hashes keep their duplicates. Returns the hashes and the
/// bytes (format 0x06 or the Bloom fallback).
pub fn build_ribbon64(data: &[u8]) -> (Vec<u64>, Vec<u8>) {
    use sievedb::filter::key_hash;
    use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat, SolvePath};
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let shift = u32::from(byte(4) % 64);
    let mut hashes = Vec::new();
    for key in chunks(data.get(5..).unwrap_or(&[])) {
        let copies = 1 + key.first().map_or(0, |&b| b % 64);
        for copy in 0..copies {
            let h = key_hash(&[key, &[copy]].concat());
            hashes.push(h >> shift);
        }
    }
    let knobs = BuildKnobs {
        format: RibbonFormat::Rows64,
        shard_keys_64: 1 + usize::from(byte(0)),
        lanes_64: 1 + usize::from(byte(1) % 4),
        solve_path: [SolvePath::Fastest, SolvePath::Scalar, SolvePath::Portable]
            [usize::from(byte(1) / 4 % 3)],
        overhead: (byte(2) < 128).then(|| f64::from(byte(2)) / 1_000.0 - 0.02),
        max_seeds: 1 + u32::from(byte(3) % 16),
        ..BuildKnobs::default()
    };
    let bits = 1.0 + f64::from(byte(3) / 16) * 2.0;
    let bytes = RibbonPolicy::new(bits).build_with(&hashes, knobs).0;
    (hashes, bytes)
}
