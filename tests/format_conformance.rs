//! Clean-room reader of sievedb's on-disk formats, written from
//! `docs/format.md` (and `docs/filters.md` for the Bloom trailer) alone,
//! without the engine's format code. It decodes the files a real `Db`
//! writes (tables of both versions, write-ahead logs, the manifest and
//! CURRENT) and checks them against a model of the writes.
//!
//! Kept as a conformance test: if the engine's bytes change and
//! `docs/format.md` does not, this reader stops agreeing with them and
//! fails. Change the documents first, then this file, then the engine.
#![allow(clippy::field_reassign_with_default, clippy::type_complexity)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sievedb::{Compression, Db, Options, WriteBatch};

// ---------------------------------------------------------------- basics

type R<T> = std::result::Result<T, String>;

fn u32le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64le(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// LEB128, at most `max` bytes. Returns (value, bytes used).
fn varint(b: &[u8], pos: usize, max: usize) -> R<(u64, usize)> {
    let mut v: u64 = 0;
    for i in 0..max {
        let Some(&byte) = b.get(pos + i) else {
            return Err(format!("varint at {pos} runs past end"));
        };
        let part = (byte & 0x7f) as u64;
        let shift = 7 * i as u32;
        if shift == 63 && part > 1 {
            return Err(format!("varint at {pos} overflows"));
        }
        v |= part << shift;
        if byte & 0x80 == 0 {
            if max == 5 && v > u32::MAX as u64 {
                return Err(format!("varint32 at {pos} overflows"));
            }
            return Ok((v, i + 1));
        }
    }
    Err(format!("varint at {pos} longer than {max} bytes"))
}
fn crc(b: &[u8]) -> u32 {
    crc32fast::hash(b)
}

// ---------------------------------------------------------------- tables

#[derive(Debug, Clone, Copy, PartialEq)]
struct Handle {
    off: u64,
    len: u64,
}

#[derive(Debug)]
struct Footer {
    index: Handle,
    filter: Handle,
    props: Handle,
    version: u32,
}

fn read_footer(f: &[u8]) -> R<Footer> {
    if f.len() < 64 {
        return Err("file shorter than footer".into());
    }
    let ft = &f[f.len() - 64..];
    if &ft[56..64] != b"SIEVEsst" {
        return Err(format!("bad magic {:?}", &ft[56..64]));
    }
    if crc(&ft[0..52]) != u32le(ft, 52) {
        return Err("footer crc".into());
    }
    let version = u32le(ft, 48);
    if version != 1 && version != 2 {
        return Err(format!("version {version}"));
    }
    let h = |i: usize| Handle {
        off: u64le(ft, i),
        len: u64le(ft, i + 8),
    };
    Ok(Footer {
        index: h(0),
        filter: h(16),
        props: h(32),
        version,
    })
}

fn trailer_len(version: u32) -> u64 {
    if version == 1 {
        4
    } else {
        5
    }
}

#[derive(Debug, Default)]
struct BlockStat {
    compressed: bool,
}

/// Reads a block's contents, verifying the trailer, decompressing type 1.
fn read_block(
    f: &[u8],
    h: Handle,
    version: u32,
    allow_lz4: bool,
    st: &mut BlockStat,
) -> R<Vec<u8>> {
    let off = h.off as usize;
    let end = off + h.len as usize;
    if end + trailer_len(version) as usize > f.len() {
        return Err(format!("block {h:?} past end"));
    }
    let stored = &f[off..end];
    if version == 1 {
        if crc(stored) != u32le(f, end) {
            return Err(format!("v1 crc of block at {off}"));
        }
        return Ok(stored.to_vec());
    }
    let ty = f[end];
    let mut h2 = crc32fast::Hasher::new();
    h2.update(stored);
    h2.update(&[ty]);
    if h2.finalize() != u32le(f, end + 1) {
        return Err(format!("v2 crc of block at {off}"));
    }
    match ty {
        0 => Ok(stored.to_vec()),
        1 if allow_lz4 => {
            st.compressed = true;
            let (ulen, n) = varint(stored, 0, 5)?;
            let body = &stored[n..];
            let bound = 255u64 * body.len() as u64 + 64;
            if ulen > bound {
                return Err(format!("ulen {ulen} above bound {bound}"));
            }
            let mut out = vec![0u8; ulen as usize];
            let got = lz4_flex::decompress_into(body, &mut out)
                .map_err(|e| format!("lz4 at {off}: {e}"))?;
            out.truncate(got);
            if out.len() as u64 != ulen {
                return Err(format!("lz4 at {off} decoded {} not {ulen}", out.len()));
            }
            Ok(out)
        }
        t => Err(format!(
            "block type {t} at {off} (lz4 allowed: {allow_lz4})"
        )),
    }
}

#[derive(Debug, Clone)]
struct BEntry {
    offset: usize,
    shared: usize,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// Parses a data/index block: entries and restart array.
fn parse_block(b: &[u8]) -> R<(Vec<BEntry>, Vec<u32>)> {
    if b.len() < 4 {
        return Err("block shorter than restart count".into());
    }
    let n = u32le(b, b.len() - 4) as usize;
    let arr = 4usize
        .checked_mul(n)
        .and_then(|x| x.checked_add(4))
        .filter(|&x| x <= b.len())
        .ok_or("restart array larger than block")?;
    let limit = b.len() - arr;
    let restarts: Vec<u32> = (0..n).map(|i| u32le(b, limit + 4 * i)).collect();
    for &r in &restarts {
        if r as usize >= limit {
            return Err(format!("restart {r} past entries {limit}"));
        }
    }
    let mut out = Vec::new();
    let mut pos = 0;
    let mut prev: Vec<u8> = Vec::new();
    while pos < limit {
        let start = pos;
        let e = &b[..limit];
        let (shared, a) = varint(e, pos, 5)?;
        pos += a;
        let (unshared, a) = varint(e, pos, 5)?;
        pos += a;
        let (vlen, a) = varint(e, pos, 5)?;
        pos += a;
        let (shared, unshared, vlen) = (shared as usize, unshared as usize, vlen as usize);
        if shared > prev.len() {
            return Err(format!("shared {shared} > prev {}", prev.len()));
        }
        if pos + unshared + vlen > limit {
            return Err("entry past entries".into());
        }
        let mut key = prev[..shared].to_vec();
        key.extend_from_slice(&e[pos..pos + unshared]);
        pos += unshared;
        let value = e[pos..pos + vlen].to_vec();
        pos += vlen;
        prev = key.clone();
        out.push(BEntry {
            offset: start,
            shared,
            key,
            value,
        });
    }
    Ok((out, restarts))
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Ent {
    key: Vec<u8>,
    seq: u64,
    kind: u8,
    value: Vec<u8>,
}

fn split_ikey(k: &[u8]) -> R<(Vec<u8>, u64, u8)> {
    if k.len() < 8 {
        return Err("internal key shorter than trailer".into());
    }
    let t = u64le(k, k.len() - 8);
    let kind = (t & 0xff) as u8;
    if kind > 1 {
        return Err(format!("unknown kind {kind}"));
    }
    Ok((k[..k.len() - 8].to_vec(), t >> 8, kind))
}

/// Internal-key order: user key ascending, trailer descending.
fn ikey_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (ua, ta) = (&a[..a.len() - 8], u64le(a, a.len() - 8));
    let (ub, tb) = (&b[..b.len() - 8], u64le(b, b.len() - 8));
    ua.cmp(ub).then(tb.cmp(&ta))
}

#[derive(Debug, Default)]
struct DecodedTable {
    version: u32,
    entries: Vec<Ent>,
    props: BTreeMap<String, Vec<u8>>,
    filter: Vec<u8>,
    data_blocks: usize,
    compressed_blocks: usize,
    raw_blocks_v2: usize,
    recompress_differs: usize,
    /// (contents len, contents len without its last entry and with one
    /// restart fewer if the last entry was a restart point)
    block_sizes: Vec<(usize, usize, usize)>,
}

fn prop_u64(props: &BTreeMap<String, Vec<u8>>, name: &str) -> R<u64> {
    let v = props.get(name).ok_or(format!("missing property {name}"))?;
    let (x, n) = varint(v, 0, 10)?;
    if n != v.len() {
        return Err(format!("property {name} not a single varint"));
    }
    Ok(x)
}

fn decode_table(f: &[u8], restart_interval: usize) -> R<DecodedTable> {
    let ft = read_footer(f)?;
    let tl = trailer_len(ft.version);
    let mut t = DecodedTable {
        version: ft.version,
        ..Default::default()
    };
    let mut st = BlockStat::default();

    // Index block: restart at every entry, value = handle filling it.
    let index = read_block(f, ft.index, ft.version, false, &mut st)?;
    let (ients, irest) = parse_block(&index)?;
    if irest.len() != ients.len() {
        return Err(format!(
            "index restarts {} != entries {}",
            irest.len(),
            ients.len()
        ));
    }
    for (e, &r) in ients.iter().zip(&irest) {
        if e.offset != r as usize || e.shared != 0 {
            return Err("index entry not a restart point".into());
        }
    }
    let mut handles = Vec::new();
    for e in &ients {
        let (off, a) = varint(&e.value, 0, 10)?;
        let (len, b) = varint(&e.value, a, 10)?;
        if a + b != e.value.len() {
            return Err("index value not exactly a handle".into());
        }
        handles.push(Handle { off, len });
    }
    for w in ients.windows(2) {
        if ikey_cmp(&w[0].key, &w[1].key) != std::cmp::Ordering::Less {
            return Err("index keys not strictly increasing".into());
        }
    }
    // Tiling.
    let mut expect = 0u64;
    for h in &handles {
        if h.off != expect {
            return Err(format!("data block at {} expected at {expect}", h.off));
        }
        expect = h.off + h.len + tl;
    }
    if ft.filter.off != expect {
        return Err(format!("filter at {} expected {expect}", ft.filter.off));
    }
    if ft.props.off != ft.filter.off + ft.filter.len + tl {
        return Err("properties do not follow filter".into());
    }
    if ft.index.off != ft.props.off + ft.props.len + tl {
        return Err("index does not follow properties".into());
    }
    if ft.index.off + ft.index.len + tl != f.len() as u64 - 64 {
        return Err("footer does not follow index".into());
    }

    // Filter and properties.
    t.filter = read_block(f, ft.filter, ft.version, false, &mut st)?;
    let pb = read_block(f, ft.props, ft.version, false, &mut st)?;
    let (count, mut p) = varint(&pb, 0, 5)?;
    let mut last: Option<Vec<u8>> = None;
    for _ in 0..count {
        let (nl, a) = varint(&pb, p, 5)?;
        p += a;
        let name = pb
            .get(p..p + nl as usize)
            .ok_or("prop name past end")?
            .to_vec();
        p += nl as usize;
        let (vl, a) = varint(&pb, p, 10)?;
        p += a;
        let val = pb
            .get(p..p + vl as usize)
            .ok_or("prop value past end")?
            .to_vec();
        p += vl as usize;
        if let Some(l) = &last {
            if *l >= name {
                return Err("property names not strictly ascending".into());
            }
        }
        last = Some(name.clone());
        t.props
            .insert(String::from_utf8(name).map_err(|_| "name not utf8")?, val);
    }
    if p != pb.len() {
        return Err("bytes after last property".into());
    }
    if prop_u64(&t.props, "sievedb.table.filter_bytes")? != ft.filter.len {
        return Err("filter_bytes != filter handle len".into());
    }
    if prop_u64(&t.props, "sievedb.table.data_blocks")? != handles.len() as u64 {
        return Err("data_blocks != index entries".into());
    }

    // Data blocks.
    for (bi, h) in handles.iter().enumerate() {
        let mut st = BlockStat::default();
        let b = read_block(f, *h, ft.version, true, &mut st)?;
        if st.compressed {
            t.compressed_blocks += 1;
            // Writer stores compressed only when smaller than len - len/8.
            if h.len as usize >= b.len() - b.len() / 8 {
                return Err(format!("block {bi} compressed but saves < 1/8"));
            }
        } else if ft.version == 2 {
            t.raw_blocks_v2 += 1;
        }
        if ft.version == 2 {
            let mut c = Vec::new();
            let mut x = b.len() as u64;
            loop {
                let byte = (x & 0x7f) as u8;
                x >>= 7;
                if x == 0 {
                    c.push(byte);
                    break;
                }
                c.push(byte | 0x80);
            }
            let mut buf = vec![0u8; 2 * b.len() + 64];
            let n = lz4_flex::compress_into(&b, &mut buf).unwrap();
            c.extend_from_slice(&buf[..n]);
            let stored = &f[h.off as usize..(h.off + h.len) as usize];
            let smaller = c.len() < b.len() - b.len() / 8;
            if st.compressed {
                if stored != &c[..] {
                    t.recompress_differs += 1;
                }
            } else if smaller {
                return Err(format!(
                    "block {bi} stored raw although lz4 ({} bytes) saves 1/8 of {}",
                    c.len(),
                    b.len()
                ));
            }
        }
        let (ents, rest) = parse_block(&b)?;
        if ents.is_empty() {
            return Err("empty data block".into());
        }
        // Restart points: every restart_interval-th entry, shared = 0.
        let want: Vec<u32> = ents
            .iter()
            .enumerate()
            .filter(|(i, _)| i % restart_interval == 0)
            .map(|(_, e)| e.offset as u32)
            .collect();
        if want != rest {
            return Err(format!("block {bi}: restarts {rest:?} want {want:?}"));
        }
        for (i, e) in ents.iter().enumerate() {
            if i % restart_interval == 0 && e.shared != 0 {
                return Err("restart entry with shared != 0".into());
            }
        }
        // Shared is maximal? (doc: "number of leading bytes in common")
        for w in ents.windows(2).enumerate() {
            let (i, w) = w;
            if (i + 1) % restart_interval == 0 {
                continue;
            }
            let common = w[0]
                .key
                .iter()
                .zip(&w[1].key)
                .take_while(|(a, b)| a == b)
                .count();
            if w[1].shared != common {
                return Err(format!("shared {} but common prefix {common}", w[1].shared));
            }
        }
        if ents.last().unwrap().key != ients[bi].key {
            return Err(format!("index key of block {bi} is not its last key"));
        }
        let last = ents.last().unwrap();
        let last_is_restart = (ents.len() - 1) % restart_interval == 0;
        let entries_wo_last = last.offset;
        let rest_wo_last = rest.len() - last_is_restart as usize;
        t.block_sizes.push((
            b.len(),
            entries_wo_last + 4 * rest_wo_last,
            entries_wo_last + 4 * rest_wo_last + 4,
        ));
        let mut prev: Option<Vec<u8>> = t.entries.last().map(|e: &Ent| {
            let mut k = e.key.clone();
            k.extend_from_slice(&((e.seq << 8) | e.kind as u64).to_le_bytes());
            k
        });
        for e in ents {
            if let Some(p) = &prev {
                if ikey_cmp(p, &e.key) != std::cmp::Ordering::Less {
                    return Err("entries not in internal-key order".into());
                }
            }
            prev = Some(e.key.clone());
            let (key, seq, kind) = split_ikey(&e.key)?;
            if kind == 0 && !e.value.is_empty() {
                return Err("tombstone with a value".into());
            }
            t.entries.push(Ent {
                key,
                seq,
                kind,
                value: e.value,
            });
        }
        t.data_blocks += 1;
    }
    Ok(t)
}

/// Checks the `sievedb.table.*` properties against the decoded entries.
fn check_table_props(t: &DecodedTable) -> R<()> {
    let p = &t.props;
    let n = t.entries.len() as u64;
    let tomb = t.entries.iter().filter(|e| e.kind == 0).count() as u64;
    let distinct: BTreeSet<&[u8]> = t.entries.iter().map(|e| &e.key[..]).collect();
    let chk = |name: &str, want: u64| -> R<()> {
        let got = prop_u64(p, name)?;
        if got != want {
            return Err(format!("{name} = {got}, decoded {want}"));
        }
        Ok(())
    };
    chk("sievedb.table.entries", n)?;
    chk("sievedb.table.tombstones", tomb)?;
    chk("sievedb.table.distinct_keys", distinct.len() as u64)?;
    chk(
        "sievedb.table.smallest_seq",
        t.entries.iter().map(|e| e.seq).min().unwrap_or(0),
    )?;
    chk(
        "sievedb.table.largest_seq",
        t.entries.iter().map(|e| e.seq).max().unwrap_or(0),
    )?;
    let sk = p
        .get("sievedb.table.smallest_key")
        .ok_or("no smallest_key")?;
    let lk = p.get("sievedb.table.largest_key").ok_or("no largest_key")?;
    if Some(&sk[..]) != distinct.first().copied() || Some(&lk[..]) != distinct.last().copied() {
        return Err("smallest/largest key mismatch".into());
    }
    if p.contains_key("sievedb.table.prefix_len") {
        let n = prop_u64(p, "sievedb.table.prefix_len")? as usize;
        let prefixes: BTreeSet<&[u8]> = distinct
            .iter()
            .filter(|k| k.len() >= n)
            .map(|k| &k[..n])
            .collect();
        let dp = prop_u64(p, "sievedb.table.distinct_prefixes")?;
        if dp != prefixes.len() as u64 {
            return Err(format!(
                "distinct_prefixes {dp}, decoded {}",
                prefixes.len()
            ));
        }
        PREFIX_TABLES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    } else if p.contains_key("sievedb.table.distinct_prefixes") {
        return Err("distinct_prefixes without prefix_len".into());
    }
    if t.filter.is_empty() && p.contains_key("sievedb.table.filter_bits_per_key") {
        NOFILTER_WITH_BPK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    if !p.contains_key("sievedb.table.filter_policy") {
        return Err("no filter_policy".into());
    }
    match p.get("sievedb.hll") {
        None => return Err("no sievedb.hll extra property".into()),
        Some(h) if h.len() > 12_301 => return Err(format!("hll of {} bytes", h.len())),
        _ => {}
    }
    for k in p.keys() {
        let known = [
            "entries",
            "tombstones",
            "distinct_keys",
            "smallest_key",
            "largest_key",
            "smallest_seq",
            "largest_seq",
            "filter_policy",
            "filter_bytes",
            "filter_bits_per_key",
            "data_blocks",
            "prefix_len",
            "distinct_prefixes",
        ];
        if let Some(rest) = k.strip_prefix("sievedb.table.") {
            if !known.contains(&rest) {
                return Err(format!("undocumented table property {k}"));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- Bloom filter

// NOT in the documents: the SplitMix64 seed and draw procedure of the
// format-0x07 shapes and the prefix-hash seed, taken from src/filter
// (bloom.rs SHAPE_SEED / shape_multipliers, mod.rs PREFIX_HASH_SEED) in step
// 3 of the review, to confirm that the documented probing rule holds once
// they are known.
const SHAPE_SEED: u64 = 0x5eed_b100_f11e_7e5d;
const PREFIX_HASH_SEED: u64 = 0x005e_ed0f_9e37_79b9;

fn splitmix64(state: u64) -> (u64, u64) {
    let state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (state, z ^ (z >> 31))
}

fn shapes() -> Vec<Vec<u32>> {
    let mut state = SHAPE_SEED;
    let mut out = Vec::new();
    for _ in 0..128 {
        let (n, r) = splitmix64(state);
        state = n;
        let low = (r as u32 & 0x7f_ffff) | 1;
        let mut vals: Vec<u32> = Vec::new();
        while vals.len() < 32 {
            let (n, r) = splitmix64(state);
            state = n;
            let e = (r >> 55) as u32;
            if !vals.contains(&e) {
                vals.push(e);
            }
        }
        out.push(vals.into_iter().map(|e| e << 23 | low).collect());
    }
    out
}

/// Format 0x07 query, following docs/filters.md "Probing" and "Format 0x07".
fn bloom07_may_contain(f: &[u8], shapes: &[Vec<u32>], h: u64) -> bool {
    let num_lines = u32le(f, f.len() - 6) as u64;
    let probes = f[f.len() - 2] as usize;
    if num_lines == 0 {
        return false;
    }
    let line = (((h as u32) as u64 * num_lines) >> 32) as usize;
    let s = (h >> 32) as u32 | 1;
    let t = ((h >> 5) & 127) as usize;
    (0..probes).all(|i| {
        let b = (s.wrapping_mul(shapes[t][i]) >> 23) as usize;
        f[line * 64 + b / 8] >> (b % 8) & 1 == 1
    })
}

static REBUILT_EXACT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static PREFIX_TABLES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static NOFILTER_WITH_BPK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static LINES_EMPTY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static LINES_ONE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// docs/filters.md "Probe count" table.
fn probes_for_bits_per_key(bpk: f64) -> u8 {
    let table = [
        (2.08, 1),
        (3.58, 2),
        (5.10, 3),
        (6.64, 4),
        (8.30, 5),
        (10.07, 6),
        (11.72, 7),
        (14.00, 8),
        (16.05, 9),
        (18.30, 10),
        (22.00, 11),
        (25.50, 12),
    ];
    for (ub, p) in table {
        if bpk <= ub {
            return p;
        }
    }
    ((bpk / 2.0) as u8).min(30)
}

/// What the documents allow checking of a format-0x07 filter: the trailer,
/// the size, and (for present keys) that the key's line has at least
/// `probes` bits set. The shape multipliers (SplitMix64 "with a fixed
/// seed") are not in the documents, so `may_contain` itself cannot be
/// written from them.
fn check_bloom(t: &DecodedTable) -> R<()> {
    let f = &t.filter;
    if f.is_empty() {
        // NoFilter: "Empty for NoFilter".
        return Ok(());
    }
    if f.len() < 6 {
        return Err(format!("filter of {} bytes", f.len()));
    }
    let id = f[f.len() - 1];
    if id != 0x07 {
        return Err(format!("filter format id {id:#x}"));
    }
    let num_lines = u32le(f, f.len() - 6) as u64;
    let probes = f[f.len() - 2];
    if num_lines * 64 + 6 != f.len() as u64 {
        return Err("filter length != num_lines * 64 + 6".into());
    }
    let bpk = f64::from_le_bytes(
        t.props
            .get("sievedb.table.filter_bits_per_key")
            .ok_or("no filter_bits_per_key")?[..]
            .try_into()
            .map_err(|_| "filter_bits_per_key not 8 bytes")?,
    );
    if probes != probes_for_bits_per_key(bpk) {
        return Err(format!(
            "probes {probes}, table says {}",
            probes_for_bits_per_key(bpk)
        ));
    }
    let n = prop_u64(&t.props, "sievedb.table.distinct_keys")?
        + t.props
            .get("sievedb.table.distinct_prefixes")
            .map(|_| prop_u64(&t.props, "sievedb.table.distinct_prefixes").unwrap())
            .unwrap_or(0);
    let want_lines = ((n as f64 * bpk).ceil() as u64).div_ceil(512);
    if num_lines != want_lines {
        return Err(format!(
            "num_lines {num_lines}, formula gives {want_lines} (n {n}, bpk {bpk})"
        ));
    }
    let keys: BTreeSet<&[u8]> = t.entries.iter().map(|e| &e.key[..]).collect();
    let mut per_line = vec![0u32; num_lines as usize];
    for k in keys {
        let h = xxhash_rust::xxh3::xxh3_64(k);
        let line = (((h as u32) as u64 * num_lines) >> 32) as usize;
        per_line[line] += 1;
        let bits: u32 = f[line * 64..line * 64 + 64]
            .iter()
            .map(|b| b.count_ones())
            .sum();
        if bits < probes as u32 {
            return Err(format!("key {k:?}: line {line} has only {bits} bits set"));
        }
    }
    let sh = shapes();
    let keys2: BTreeSet<&[u8]> = t.entries.iter().map(|e| &e.key[..]).collect();
    for k in &keys2 {
        if !bloom07_may_contain(f, &sh, xxhash_rust::xxh3::xxh3_64(k)) {
            return Err(format!("may_contain false for present key {k:?}"));
        }
    }
    if t.props.contains_key("sievedb.table.prefix_len") {
        let n = prop_u64(&t.props, "sievedb.table.prefix_len")? as usize;
        for k in keys2.iter().filter(|k| k.len() >= n) {
            if !bloom07_may_contain(
                f,
                &sh,
                xxhash_rust::xxh3::xxh3_64_with_seed(&k[..n], PREFIX_HASH_SEED),
            ) {
                return Err(format!("may_contain false for present prefix of {k:?}"));
            }
        }
    } else {
        // Exactly the keys' probe bits are set.
        let mut rebuilt = vec![0u8; f.len() - 6];
        for k in &keys2 {
            let h = xxhash_rust::xxh3::xxh3_64(k);
            let line = (((h as u32) as u64 * num_lines) >> 32) as usize;
            let s = (h >> 32) as u32 | 1;
            let t = ((h >> 5) & 127) as usize;
            for &c in sh[t].iter().take(probes as usize) {
                let b = (s.wrapping_mul(c) >> 23) as usize;
                rebuilt[line * 64 + b / 8] |= 1 << (b % 8);
            }
        }
        if rebuilt[..] != f[..f.len() - 6] {
            return Err("filter bits differ from a rebuild".into());
        }
        REBUILT_EXACT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    // Without prefixes the filter holds exactly these keys: a line no key
    // maps to is all zero, a line of one key has exactly `probes` bits
    // (probes are distinct by construction), j keys at most j * probes.
    if !t.props.contains_key("sievedb.table.prefix_len") {
        for (line, &j) in per_line.iter().enumerate() {
            let bits: u32 = f[line * 64..line * 64 + 64]
                .iter()
                .map(|b| b.count_ones())
                .sum();
            match j {
                0 => LINES_EMPTY.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                1 => LINES_ONE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                _ => 0,
            };
            let ok = if j == 0 {
                bits == 0
            } else if j == 1 {
                bits == probes as u32
            } else {
                bits <= j * probes as u32
            };
            if !ok {
                return Err(format!(
                    "line {line}: {j} keys but {bits} bits set ({probes} probes)"
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- record log

#[derive(Debug)]
struct Record {
    offset: usize,
    payload: Vec<u8>,
}

/// Parses a log; returns the records and whether a torn tail was dropped.
fn read_log(b: &[u8]) -> R<(Vec<Record>, bool)> {
    let mut out = Vec::new();
    let mut p = 0;
    let parse_at = |p: usize| -> Option<usize> {
        if b.len() - p < 8 {
            return None;
        }
        let c = u32le(b, p);
        let len = u32le(b, p + 4) as usize;
        if len > 1 << 30 || p + 8 + len > b.len() {
            return None;
        }
        if crc(&b[p + 4..p + 8 + len]) != c {
            return None;
        }
        Some(8 + len)
    };
    while p < b.len() {
        match parse_at(p) {
            Some(n) => {
                out.push(Record {
                    offset: p,
                    payload: b[p + 8..p + n].to_vec(),
                });
                p += n;
            }
            None => {
                if (p + 1..b.len()).any(|q| parse_at(q).is_some()) {
                    return Err(format!("corrupt log at {p}"));
                }
                return Ok((out, true));
            }
        }
    }
    Ok((out, false))
}

#[derive(Debug, Clone, PartialEq)]
struct Batch {
    first_seq: u64,
    ops: Vec<(u8, Vec<u8>, Vec<u8>)>,
}

fn decode_batch(b: &[u8]) -> R<Batch> {
    if b.len() < 12 {
        return Err("batch shorter than header".into());
    }
    let first_seq = u64le(b, 0);
    let count = u32le(b, 8);
    let mut p = 12;
    let mut ops = Vec::new();
    for _ in 0..count {
        let kind = *b.get(p).ok_or("op past end")?;
        p += 1;
        if kind > 1 {
            return Err(format!("bad kind {kind}"));
        }
        if p + 4 > b.len() {
            return Err("key_len past end".into());
        }
        let kl = u32le(b, p) as usize;
        p += 4;
        let key = b.get(p..p + kl).ok_or("key past end")?.to_vec();
        if key.is_empty() {
            return Err("empty key".into());
        }
        p += kl;
        let mut value = Vec::new();
        if kind == 1 {
            if p + 4 > b.len() {
                return Err("value_len past end".into());
            }
            let vl = u32le(b, p) as usize;
            p += 4;
            value = b.get(p..p + vl).ok_or("value past end")?.to_vec();
            p += vl;
        }
        ops.push((kind, key, value));
    }
    if p != b.len() {
        return Err("trailing bytes after batch".into());
    }
    Ok(Batch { first_seq, ops })
}

// ---------------------------------------------------------------- manifest

#[derive(Debug, Default, Clone)]
struct Edit {
    next_file: Option<u64>,
    last_seq: Option<u64>,
    log_number: Option<u64>,
    snapshot_records: Option<u64>,
    removed: Vec<(u64, u64)>,
    added: Vec<TableMeta>,
    tag_order: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct TableMeta {
    level: u64,
    number: u64,
    size: u64,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    smallest_seq: u64,
    largest_seq: u64,
}

fn decode_edit(b: &[u8]) -> R<Edit> {
    let mut e = Edit::default();
    let mut p = 0;
    let v = |p: &mut usize| -> R<u64> {
        let (x, n) = varint(b, *p, 10)?;
        *p += n;
        Ok(x)
    };
    let bytes = |p: &mut usize| -> R<Vec<u8>> {
        let (n, a) = varint(b, *p, 10)?;
        *p += a;
        let s = b.get(*p..*p + n as usize).ok_or("bytes past end")?.to_vec();
        *p += n as usize;
        Ok(s)
    };
    const MAXSEQ: u64 = (1 << 56) - 1;
    while p < b.len() {
        let tag = v(&mut p)?;
        e.tag_order.push(tag);
        match tag {
            1..=3 => {
                let x = v(&mut p)?;
                let slot = match tag {
                    1 => &mut e.next_file,
                    2 => &mut e.last_seq,
                    _ => &mut e.log_number,
                };
                if slot.is_some() {
                    return Err(format!("repeated tag {tag}"));
                }
                if tag == 2 && x > MAXSEQ {
                    return Err("last_sequence too big".into());
                }
                *slot = Some(x);
            }
            4 => {
                let level = v(&mut p)?;
                let num = v(&mut p)?;
                if level >= 64 {
                    return Err("level >= 64".into());
                }
                e.removed.push((level, num));
            }
            5 => {
                let level = v(&mut p)?;
                let number = v(&mut p)?;
                let size = v(&mut p)?;
                let smallest = bytes(&mut p)?;
                let largest = bytes(&mut p)?;
                let smallest_seq = v(&mut p)?;
                let largest_seq = v(&mut p)?;
                if level >= 64
                    || smallest > largest
                    || smallest_seq > largest_seq
                    || largest_seq > MAXSEQ
                {
                    return Err("bad added table".into());
                }
                e.added.push(TableMeta {
                    level,
                    number,
                    size,
                    smallest,
                    largest,
                    smallest_seq,
                    largest_seq,
                });
            }
            6 => {
                let n = v(&mut p)?;
                if n < 2 {
                    return Err("tag 6 with n < 2".into());
                }
                e.snapshot_records = Some(n);
            }
            t => return Err(format!("unknown tag {t}")),
        }
    }
    Ok(e)
}

#[derive(Debug, Default)]
struct MState {
    next_file: u64,
    last_seq: u64,
    log_number: u64,
    levels: BTreeMap<u64, Vec<TableMeta>>,
}

fn apply(s: &mut MState, e: &Edit) -> R<()> {
    for &(level, num) in &e.removed {
        let l = s.levels.entry(level).or_default();
        let i = l
            .iter()
            .position(|t| t.number == num)
            .ok_or(format!("remove {num} not live at {level}"))?;
        l.remove(i);
    }
    for t in &e.added {
        if s.levels.values().flatten().any(|x| x.number == t.number) {
            return Err(format!("add of live {}", t.number));
        }
        s.levels.entry(t.level).or_default().push(t.clone());
    }
    if let Some(x) = e.next_file {
        s.next_file = x;
    }
    if let Some(x) = e.last_seq {
        s.last_seq = x;
    }
    if let Some(x) = e.log_number {
        s.log_number = x;
    }
    Ok(())
}

fn read_current(dir: &Path) -> R<String> {
    let c = std::fs::read(dir.join("CURRENT")).map_err(|e| e.to_string())?;
    let s = String::from_utf8(c).map_err(|_| "CURRENT not utf8")?;
    let name = s.strip_suffix('\n').unwrap_or(&s);
    let num = name
        .strip_prefix("MANIFEST-")
        .ok_or("CURRENT: no MANIFEST- prefix")?;
    if num.len() < 6
        || !num.bytes().all(|b| b.is_ascii_digit())
        || (num.len() > 6 && num.starts_with('0'))
    {
        return Err(format!("CURRENT: non-canonical {name:?}"));
    }
    if !s.ends_with('\n') {
        return Err("CURRENT written without newline".into());
    }
    Ok(name.to_string())
}

fn read_manifest(dir: &Path) -> R<(MState, Vec<Edit>)> {
    let name = read_current(dir)?;
    let b = std::fs::read(dir.join(&name)).map_err(|e| e.to_string())?;
    let (recs, torn) = read_log(&b)?;
    if torn {
        return Err("manifest has torn tail".into());
    }
    let mut s = MState::default();
    let mut edits = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let e = decode_edit(&r.payload).map_err(|x| format!("record at {}: {x}", r.offset))?;
        // Encoder order: tags 1-3, then removes (4), then adds (5).
        let rank = |t: u64| match t {
            1..=3 => 0,
            6 => 0,
            4 => 1,
            _ => 2,
        };
        if e.tag_order.windows(2).any(|w| rank(w[0]) > rank(w[1])) {
            return Err(format!(
                "record {i}: tags out of documented order {:?}",
                e.tag_order
            ));
        }
        if i == 0
            && (e.next_file.is_none()
                || e.last_seq.is_none()
                || e.log_number.is_none()
                || !e.removed.is_empty())
        {
            return Err("first record is not a snapshot".into());
        }
        if i == 0 && e.added.windows(2).any(|w| w[0].level > w[1].level) {
            return Err("snapshot does not add tables level by level".into());
        }
        apply(&mut s, &e)?;
        edits.push(e);
    }
    Ok((s, edits))
}

// ---------------------------------------------------------------- directory

fn files_with_ext(dir: &Path, ext: &str) -> Vec<(u64, std::path::PathBuf)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let n = p.file_name()?.to_str()?.to_string();
            let stem = n.strip_suffix(ext)?;
            if stem.len() >= 6 && stem.bytes().all(|b| b.is_ascii_digit()) {
                Some((stem.parse().ok()?, p))
            } else {
                None
            }
        })
        .collect();
    v.sort();
    v
}

/// Decodes every `.log` file in number order; returns the batches.
fn read_all_logs(dir: &Path) -> R<Vec<(u64, Vec<Batch>, bool)>> {
    let mut out = Vec::new();
    for (num, p) in files_with_ext(dir, ".log") {
        let b = std::fs::read(&p).unwrap();
        let (recs, torn) = read_log(&b)?;
        let mut batches = Vec::new();
        for r in recs {
            batches.push(
                decode_batch(&r.payload).map_err(|e| format!("log {num} at {}: {e}", r.offset))?,
            );
        }
        out.push((num, batches, torn));
    }
    Ok(out)
}

// ---------------------------------------------------------------- model

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One write as the model sees it: (seq, kind, key, value).
type Op = (u64, u8, Vec<u8>, Vec<u8>);

struct Harness {
    db: Option<Db>,
    dir: std::path::PathBuf,
    seq: u64,
    all: Vec<Op>,
    /// Ops since the last flush (what the live logs must hold).
    unflushed: Vec<Op>,
    /// Ops per batch since the last flush.
    unflushed_batches: Vec<usize>,
    rng: Rng,
    restart_interval: usize,
    block_bytes: usize,
    log: Vec<String>,
}

impl Harness {
    fn value(&mut self, i: u64) -> Vec<u8> {
        let len = match self.rng.below(20) {
            0 => 3000 + self.rng.below(3000) as usize, // larger than a block
            1..=3 => 0,
            _ => 1 + self.rng.below(120) as usize,
        };
        if self.rng.below(3) == 0 {
            (0..len).map(|_| self.rng.next() as u8).collect() // incompressible
        } else {
            let s = format!("value-{i}-");
            s.bytes().cycle().take(len).collect()
        }
    }
    fn key(&mut self) -> Vec<u8> {
        let u = self.rng.below(40);
        match self.rng.below(10) {
            0 => format!("u{u:03}").into_bytes(), // short key, shorter than some prefixes
            1 => vec![0xff, u as u8, 0],          // binary key
            _ => format!("user{u:03}/item/{:04}", self.rng.below(60)).into_bytes(),
        }
    }
    /// A random write batch (one to ten ops) through put/delete/write.
    fn write_some(&mut self, n: usize) {
        for _ in 0..n {
            let ops = 1 + self.rng.below(10) as usize;
            let mut b = WriteBatch::new();
            let mut mine = Vec::new();
            for _ in 0..ops {
                let k = self.key();
                let del = self.rng.below(6) == 0;
                let i = self.rng.next();
                let v = if del { Vec::new() } else { self.value(i) };
                if del {
                    b.delete(&k);
                } else {
                    b.put(&k, &v);
                }
                mine.push((del, k, v));
            }
            let db = self.db.as_ref().unwrap();
            if ops == 1 && self.rng.below(2) == 0 {
                let (del, k, v) = &mine[0];
                if *del {
                    db.delete(k).unwrap()
                } else {
                    db.put(k, v).unwrap()
                }
            } else {
                db.write(&b).unwrap();
            }
            self.unflushed_batches.push(mine.len());
            for (del, k, v) in mine {
                self.seq += 1;
                let op = (self.seq, if del { 0 } else { 1 }, k, v);
                self.all.push(op.clone());
                self.unflushed.push(op);
            }
        }
    }

    /// The live logs hold exactly the unflushed ops, as one chain.
    fn check_logs(&mut self, expect_final_seal: bool) {
        let logs = read_all_logs(&self.dir).unwrap();
        let mut ops = Vec::new();
        let mut seals = 0;
        let mut next: Option<u64> = None;
        for (num, batches, torn) in &logs {
            assert!(!torn, "log {num} has a torn tail");
            for b in batches {
                if let Some(n) = next {
                    assert_eq!(b.first_seq, n, "log {num}: chain broken");
                }
                next = Some(b.first_seq + b.ops.len() as u64);
                if b.ops.is_empty() {
                    seals += 1;
                }
                for (i, (k, key, v)) in b.ops.iter().enumerate() {
                    ops.push((b.first_seq + i as u64, *k, key.clone(), v.clone()));
                }
            }
        }
        assert_eq!(ops, self.unflushed, "log contents != unflushed writes");
        let sizes: Vec<usize> = logs
            .iter()
            .flat_map(|l| &l.1)
            .filter(|b| !b.ops.is_empty())
            .map(|b| b.ops.len())
            .collect();
        assert_eq!(sizes, self.unflushed_batches, "one record per write batch");
        if expect_final_seal {
            let (_, batches, _) = logs.last().unwrap();
            let last = batches.last().unwrap();
            assert!(last.ops.is_empty(), "final log not sealed");
            assert_eq!(last.first_seq, self.seq + 1, "seal's first_seq");
        }
        self.log.push(format!(
            "logs {:?}: {} ops, {seals} seals",
            logs.iter().map(|l| l.0).collect::<Vec<_>>(),
            ops.len()
        ));
    }

    fn flush(&mut self) {
        self.check_logs(false);
        self.db.as_ref().unwrap().flush().unwrap();
        self.unflushed.clear();
        self.unflushed_batches.clear();
    }

    /// Decodes every live table and the manifest; checks them against the
    /// model and the engine's own view.
    fn check_tables(&mut self, expect_version: u32, all_versions: bool) -> Vec<DecodedTable> {
        let (ms, edits) = read_manifest(&self.dir).unwrap();
        let mtables: BTreeSet<TableMeta> = ms.levels.values().flatten().cloned().collect();
        // Engine's own view.
        if let Some(db) = &self.db {
            let info: BTreeSet<(u64, u64, u64, Vec<u8>, Vec<u8>)> = db
                .tables()
                .into_iter()
                .map(|t| {
                    (
                        t.level as u64,
                        t.file_number,
                        t.file_size,
                        t.smallest,
                        t.largest,
                    )
                })
                .collect();
            let mine: BTreeSet<_> = mtables
                .iter()
                .map(|t| {
                    (
                        t.level,
                        t.number,
                        t.size,
                        t.smallest.clone(),
                        t.largest.clone(),
                    )
                })
                .collect();
            assert_eq!(info, mine, "manifest table set != Db::tables()");
        }
        // Files on disk: exactly the manifest's tables.
        let on_disk: BTreeSet<u64> = files_with_ext(&self.dir, ".sst")
            .into_iter()
            .map(|x| x.0)
            .collect();
        let live: BTreeSet<u64> = mtables.iter().map(|t| t.number).collect();
        assert_eq!(on_disk, live, "table files != manifest tables");
        let max_num = files_with_ext(&self.dir, ".sst")
            .into_iter()
            .chain(files_with_ext(&self.dir, ".log"))
            .map(|x| x.0)
            .max()
            .unwrap_or(0);
        assert!(
            ms.next_file > max_num,
            "next_file_number {} <= file {max_num}",
            ms.next_file
        );
        let mnum: u64 = read_current(&self.dir).unwrap()["MANIFEST-".len()..]
            .parse()
            .unwrap();
        assert!(ms.next_file > mnum);
        for (num, _) in files_with_ext(&self.dir, ".log") {
            assert!(
                num >= ms.log_number,
                "log {num} below log_number {} still present",
                ms.log_number
            );
        }
        let flushed_max = self.all.len() as u64 - self.unflushed.len() as u64;
        assert!(
            ms.last_seq >= flushed_max,
            "manifest last_seq {} < flushed {flushed_max}",
            ms.last_seq
        );

        let mut decoded = Vec::new();
        let mut union: Vec<Ent> = Vec::new();
        for t in &mtables {
            let path = self.dir.join(format!("{:06}.sst", t.number));
            let f = std::fs::read(&path).unwrap();
            assert_eq!(f.len() as u64, t.size, "file size of {}", t.number);
            let d = decode_table(&f, self.restart_interval)
                .unwrap_or_else(|e| panic!("table {}: {e}", t.number));
            check_table_props(&d).unwrap_or_else(|e| panic!("table {}: {e}", t.number));
            check_bloom(&d).unwrap_or_else(|e| panic!("table {} filter: {e}", t.number));
            assert_eq!(d.version, expect_version, "table {} version", t.number);
            let p = &d.props;
            assert_eq!(p["sievedb.table.smallest_key"], t.smallest);
            assert_eq!(p["sievedb.table.largest_key"], t.largest);
            assert_eq!(
                prop_u64(p, "sievedb.table.smallest_seq").unwrap(),
                t.smallest_seq
            );
            assert_eq!(
                prop_u64(p, "sievedb.table.largest_seq").unwrap(),
                t.largest_seq
            );
            // Block sizes: every block but the last reached block_bytes,
            // and was below it before its last entry.
            let nb = d.block_sizes.len();
            for (i, &(sz, wo_last, wo_last_cnt)) in d.block_sizes.iter().enumerate() {
                if i + 1 < nb {
                    assert!(
                        sz >= self.block_bytes,
                        "table {} block {i} of {sz} bytes closed early",
                        t.number
                    );
                }
                let _ = wo_last;
                assert!(wo_last_cnt < self.block_bytes, "table {} block {i}: {wo_last_cnt} bytes before its last entry already reached block_bytes", t.number);
            }
            self.log.push(format!(
                "table {} L{} v{}: {} entries, {} blocks ({} lz4, {} raw v2, {} differ from lz4_flex), filter {} B ({:?}), sizes wo-last-entry {:?}",
                t.number,
                t.level,
                d.version,
                d.entries.len(),
                d.data_blocks,
                d.compressed_blocks,
                d.raw_blocks_v2,
                d.recompress_differs,
                d.filter.len(),
                String::from_utf8_lossy(&d.props["sievedb.table.filter_policy"]),
                d.block_sizes.iter().take(4).collect::<Vec<_>>()
            ));
            union.extend(d.entries.iter().cloned());
            decoded.push(d);
        }
        let _ = edits;
        // Against the model.
        let flushed: Vec<&Op> = self
            .all
            .iter()
            .filter(|o| !self.unflushed.contains(o))
            .collect();
        let model: BTreeMap<(Vec<u8>, u64), (u8, Vec<u8>)> = flushed
            .iter()
            .map(|(s, k, key, v)| ((key.clone(), *s), (*k, v.clone())))
            .collect();
        for e in &union {
            let m = model
                .get(&(e.key.clone(), e.seq))
                .unwrap_or_else(|| panic!("entry {:?}@{} not written", e.key, e.seq));
            assert_eq!(
                (m.0, &m.1),
                (e.kind, &e.value),
                "entry {:?}@{}",
                e.key,
                e.seq
            );
        }
        if all_versions {
            let mut got: Vec<_> = union.iter().map(|e| (e.key.clone(), e.seq)).collect();
            got.sort();
            let want: Vec<_> = model.keys().cloned().collect();
            assert!(
                got == want,
                "tables do not hold every version: {} decoded, {} written",
                got.len(),
                want.len()
            );
        }
        // Newest visible version of every key matches the model.
        let mut newest_model: BTreeMap<Vec<u8>, (u64, u8, Vec<u8>)> = BTreeMap::new();
        for (s, k, key, v) in flushed {
            newest_model.insert(key.clone(), (*s, *k, v.clone()));
        }
        let mut newest_tables: BTreeMap<Vec<u8>, (u64, u8, Vec<u8>)> = BTreeMap::new();
        for e in &union {
            let cur = newest_tables.entry(e.key.clone()).or_insert((0, 0, vec![]));
            if e.seq > cur.0 {
                *cur = (e.seq, e.kind, e.value.clone());
            }
        }
        let live_m: BTreeMap<_, _> = newest_model
            .into_iter()
            .filter(|(_, v)| v.1 == 1)
            .map(|(k, v)| (k, v.2))
            .collect();
        let live_t: BTreeMap<_, _> = newest_tables
            .into_iter()
            .filter(|(_, v)| v.1 == 1)
            .map(|(k, v)| (k, v.2))
            .collect();
        assert_eq!(live_m, live_t, "visible state of the tables != model");
        decoded
    }
}

fn run(compression: Compression, prefix: Option<usize>, expect_version: u32) -> Vec<String> {
    run_with(compression, prefix, expect_version, |_| {})
}

fn run_with(
    compression: Compression,
    prefix: Option<usize>,
    expect_version: u32,
    tweak: impl Fn(&mut Options),
) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    // The same options for the first open and the reopen.
    let options = || {
        let mut opts = Options::default();
        opts.background_compaction = false;
        opts.block_bytes = 512;
        opts.restart_interval = 4;
        opts.compression = compression;
        opts.prefix_filter_len = prefix;
        opts.table_bytes = 8 * 1024;
        tweak(&mut opts);
        opts
    };
    let db = Db::open(dir.path(), options()).unwrap();
    let mut h = Harness {
        db: Some(db),
        dir: dir.path().to_path_buf(),
        seq: 0,
        all: vec![],
        unflushed: vec![],
        unflushed_batches: vec![],
        rng: Rng(0x9e3779b97f4a7c15 ^ expect_version as u64 ^ prefix.unwrap_or(0) as u64),
        restart_interval: 4,
        block_bytes: 512,
        log: vec![],
    };
    // A fresh database: the manifest exists, no tables.
    let (ms, _) = read_manifest(&h.dir).unwrap();
    h.log.push(format!(
        "fresh manifest: next_file {}, last_seq {}, log_number {}",
        ms.next_file, ms.last_seq, ms.log_number
    ));
    assert!(ms.levels.values().all(|l| l.is_empty()));

    // Phase A: writes, flush: one level-0 table with every version.
    h.write_some(150);
    h.flush();
    h.check_tables(expect_version, false);
    // Phase B: more flushed tables in level 0.
    for _ in 0..3 {
        h.write_some(120);
        h.flush();
    }
    // (a flush may compact level 0 in the caller's thread)
    h.check_tables(expect_version, false);
    // Phase C: full compaction (possibly several output tables).
    h.db.as_ref().unwrap().compact_all().unwrap();
    h.check_tables(expect_version, false);
    // Phase D: more writes, one flush, unflushed writes, clean close.
    h.write_some(80);
    h.flush();
    h.write_some(40);
    h.check_logs(false);
    let (ms, edits) = read_manifest(&h.dir).unwrap();
    h.log.push(format!(
        "manifest: {} records, last_seq {}, next_file {}, log_number {}",
        edits.len(),
        ms.last_seq,
        ms.next_file,
        ms.log_number
    ));
    h.check_tables(expect_version, false);
    let db = h.db.take().unwrap();
    db.close().unwrap();
    // After a clean close: is the memtable flushed, or in a sealed log?
    let logs = read_all_logs(&h.dir).unwrap();
    let logged: usize = logs.iter().flat_map(|l| &l.1).map(|b| b.ops.len()).sum();
    h.log.push(format!(
        "after close: logs {:?} hold {logged} ops",
        logs.iter().map(|l| (l.0, l.1.len())).collect::<Vec<_>>()
    ));
    if logged > 0 {
        h.check_logs(true);
    } else {
        h.unflushed.clear();
        h.unflushed_batches.clear();
    }
    h.check_tables(expect_version, false);
    // Reopen reads what we read.
    let db = Db::open(dir.path(), options()).unwrap();
    let mut live: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (_, k, key, v) in &h.all {
        if *k == 1 {
            live.insert(key.clone(), v.clone());
        } else {
            live.remove(key);
        }
    }
    for (k, v) in &live {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    // The reopen replayed the log into a level-0 table and wrote a fresh
    // manifest (one snapshot record) naming a fresh log.
    let (ms, edits) = read_manifest(&h.dir).unwrap();
    h.log.push(format!(
        "after reopen: manifest {} with {} records, last_seq {}, log_number {}, logs {:?}",
        read_current(&h.dir).unwrap(),
        edits.len(),
        ms.last_seq,
        ms.log_number,
        files_with_ext(&h.dir, ".log")
            .iter()
            .map(|x| x.0)
            .collect::<Vec<_>>()
    ));
    assert_eq!(ms.last_seq, h.seq, "manifest last_sequence after replay");
    let manifests: Vec<_> = std::fs::read_dir(&h.dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.starts_with("MANIFEST-").then_some(n)
        })
        .collect();
    assert_eq!(
        manifests,
        vec![read_current(&h.dir).unwrap()],
        "old manifests left behind"
    );
    h.db = Some(db);
    h.unflushed.clear();
    h.unflushed_batches.clear();
    h.check_tables(expect_version, false);
    // The next batch continues the chain right after last_sequence.
    h.write_some(3);
    h.check_logs(false);
    let first = read_all_logs(&h.dir)
        .unwrap()
        .iter()
        .flat_map(|l| l.1.clone())
        .next()
        .unwrap();
    assert_eq!(first.first_seq, ms.last_seq + 1);
    drop(h.db.take());
    h.log
}

#[test]
fn cleanroom_version1_tables_logs_manifest() {
    for l in run(Compression::None, None, 1) {
        eprintln!("{l}");
    }
}

#[test]
fn cleanroom_version2_lz4_with_prefix_filter() {
    let log = run(Compression::Lz4, Some(7), 2);
    for l in &log {
        eprintln!("{l}");
    }
    assert!(
        log.iter()
            .any(|l| !l.contains(" 0 lz4") && l.contains("lz4")),
        "no compressed block seen"
    );
    assert!(PREFIX_TABLES.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

/// A table without entries: only reachable through the table builder, so
/// the check is limited to a database whose flush has nothing to write.
#[test]
fn cleanroom_empty_flush_and_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.flush().unwrap();
    db.flush().unwrap();
    let cp = dir.path().join("cp");
    db.checkpoint(&cp).unwrap();
    let (ms, _) = read_manifest(&cp).unwrap();
    let n = ms.levels.values().flatten().count();
    assert_eq!(n, 1);
    for (num, p) in files_with_ext(&cp, ".sst") {
        let f = std::fs::read(p).unwrap();
        let d = decode_table(&f, 16).unwrap_or_else(|e| panic!("{num}: {e}"));
        check_table_props(&d).unwrap();
        check_bloom(&d).unwrap();
        assert_eq!(
            d.entries,
            vec![Ent {
                key: b"k".to_vec(),
                seq: 1,
                kind: 1,
                value: b"v".to_vec()
            }]
        );
    }
}

#[test]
fn cleanroom_sparse_bloom_lines_check_key_hash() {
    // 100 bits/key: about 5 keys per 512-bit line and 30 probes, so the
    // per-line occupancy check in `check_bloom` pins down key_hash and the
    // line mapping.
    let log = run_with(Compression::None, None, 1, |o| {
        o.filter_policy = std::sync::Arc::new(sievedb::filter::BloomPolicy::new(100.0));
    });
    for l in &log {
        eprintln!("{l}");
    }
    let (e, o) = (
        LINES_EMPTY.load(std::sync::atomic::Ordering::Relaxed),
        LINES_ONE.load(std::sync::atomic::Ordering::Relaxed),
    );
    eprintln!(
        "lines checked: {e} with no key (all zero), {o} with one key (exactly `probes` bits)"
    );
    eprintln!(
        "filters rebuilt bit-exactly: {}",
        REBUILT_EXACT.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(e >= 3 && o >= 20);
}

#[test]
fn cleanroom_monkey_budget_and_no_last_level_filters() {
    let log = run_with(Compression::Lz4, None, 2, |o| {
        o.filter_budget = sievedb::FilterBudget::Monkey;
        o.last_level_filters = false;
    });
    for l in &log {
        eprintln!("{l}");
    }
    eprintln!(
        "NoFilter tables recording filter_bits_per_key: {}",
        NOFILTER_WITH_BPK.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A table without entries, written with the public table builder.
#[test]
fn cleanroom_empty_table() {
    use sievedb::sstable::{TableBuilder, TableOptions};
    let dir = tempfile::tempdir().unwrap();
    for comp in [Compression::None, Compression::Lz4] {
        let path = dir.path().join(format!("{comp:?}.sst"));
        let mut o = TableOptions::default();
        o.compression = comp;
        let b = TableBuilder::new(&sievedb::fs::RealFs, &path, 1, o).unwrap();
        b.finish().unwrap();
        let f = std::fs::read(&path).unwrap();
        let d = decode_table(&f, 16).unwrap();
        assert!(d.entries.is_empty());
        assert_eq!(d.data_blocks, 0);
        let p = &d.props;
        for n in [
            "entries",
            "tombstones",
            "distinct_keys",
            "smallest_seq",
            "largest_seq",
        ] {
            assert_eq!(
                prop_u64(p, &format!("sievedb.table.{n}")).unwrap(),
                0,
                "{n}"
            );
        }
        assert!(
            p["sievedb.table.smallest_key"].is_empty() && p["sievedb.table.largest_key"].is_empty()
        );
        // Index: only a zero restart count.
        let ft = read_footer(&f).unwrap();
        assert_eq!(ft.index.len, 4);
        assert_eq!(
            &f[ft.index.off as usize..ft.index.off as usize + 4],
            &[0, 0, 0, 0]
        );
        eprintln!(
            "empty {comp:?}: v{} {} bytes, filter {:?}, props {:?}",
            d.version,
            f.len(),
            d.filter,
            p.keys().collect::<Vec<_>>()
        );
        check_bloom(&d).unwrap();
    }
}

#[test]
fn cleanroom_manifest_rolls() {
    let log = run_with(Compression::None, None, 1, |o| {
        o.manifest_roll_bytes = 1024;
    });
    for l in log.iter().filter(|l| l.contains("manifest")) {
        eprintln!("{l}");
    }
}

// ---------------------------------------------------------------- crafted files

fn enc_record(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_le_bytes();
    let mut h = crc32fast::Hasher::new();
    h.update(&len);
    h.update(payload);
    let mut r = h.finalize().to_le_bytes().to_vec();
    r.extend_from_slice(&len);
    r.extend_from_slice(payload);
    r
}

fn enc_batch(first_seq: u64, ops: &[(u8, &[u8], &[u8])]) -> Vec<u8> {
    let mut b = first_seq.to_le_bytes().to_vec();
    b.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for (k, key, v) in ops {
        b.push(*k);
        b.extend_from_slice(&(key.len() as u32).to_le_bytes());
        b.extend_from_slice(key);
        if *k == 1 {
            b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            b.extend_from_slice(v);
        }
    }
    b
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() && e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Files written by this decoder's own encoder (from the document) are
/// read by the engine as the document says.
#[test]
fn cleanroom_engine_reads_crafted_files() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    {
        let mut o = Options::default();
        o.background_compaction = false;
        o.compression = Compression::Lz4;
        let db = Db::open(&src, o).unwrap();
        for i in 0..200u32 {
            db.put(format!("key{i:04}"), format!("value{i}").repeat(5))
                .unwrap();
        }
        db.flush().unwrap();
        db.put(b"tail", b"t").unwrap();
        db.close().unwrap();
    }
    let open = |d: &Path| {
        let mut o = Options::default();
        o.background_compaction = false;
        o.compression = Compression::Lz4;
        Db::open(d, o)
    };
    let last_seq = 201u64;

    // 1. A batch record appended after the seal continues the chain.
    let d = base.path().join("append");
    copy_dir(&src, &d);
    let (num, logp) = files_with_ext(&d, ".log").pop().unwrap();
    let mut lb = std::fs::read(&logp).unwrap();
    let (recs, _) = read_log(&lb).unwrap();
    let seal = decode_batch(&recs.last().unwrap().payload).unwrap();
    assert!(
        seal.ops.is_empty() && seal.first_seq == last_seq + 1,
        "log {num}: {seal:?}"
    );
    lb.extend(enc_record(&enc_batch(
        last_seq + 1,
        &[(1, b"crafted", b"yes"), (0, b"key0001", b"")],
    )));
    std::fs::write(&logp, &lb).unwrap();
    let db = open(&d).unwrap();
    assert_eq!(db.get(b"crafted").unwrap().as_deref(), Some(&b"yes"[..]));
    assert_eq!(db.get(b"key0001").unwrap(), None);
    assert_eq!(db.get(b"tail").unwrap().as_deref(), Some(&b"t"[..]));
    drop(db);

    // 2. Zeros after the last record: a torn tail, dropped.
    let d = base.path().join("zeros");
    copy_dir(&src, &d);
    let (_, logp) = files_with_ext(&d, ".log").pop().unwrap();
    let mut lb = std::fs::read(&logp).unwrap();
    lb.extend(std::iter::repeat_n(0u8, 100));
    std::fs::write(&logp, &lb).unwrap();
    let db = open(&d).unwrap();
    assert_eq!(db.get(b"tail").unwrap().as_deref(), Some(&b"t"[..]));
    drop(db);

    // 3. A damaged byte followed by a complete record: corruption.
    let d = base.path().join("midlog");
    copy_dir(&src, &d);
    let (_, logp) = files_with_ext(&d, ".log").pop().unwrap();
    let mut lb = std::fs::read(&logp).unwrap();
    lb.push(0x55);
    lb.extend(enc_record(&enc_batch(last_seq + 1, &[(1, b"x", b"y")])));
    std::fs::write(&logp, &lb).unwrap();
    match open(&d) {
        Err(e) => eprintln!("damage after seal + record: {e:?}"),
        Ok(db) => {
            eprintln!(
                "damage after seal + record: opened; x = {:?}, report {:?}, files {:?}",
                db.get(b"x").unwrap(),
                db.recovery_report(),
                std::fs::read_dir(&d)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect::<Vec<_>>()
            );
        }
    }
    // 3b. A damaged byte inside the first record of the sealed last log.
    let d = base.path().join("midlog2");
    copy_dir(&src, &d);
    let (_, logp) = files_with_ext(&d, ".log").pop().unwrap();
    let mut lb = std::fs::read(&logp).unwrap();
    lb[10] ^= 0x01;
    std::fs::write(&logp, &lb).unwrap();
    match open(&d) {
        Err(e) => eprintln!("damage in first record of sealed log: {e:?}"),
        Ok(db) => eprintln!(
            "damage in first record of sealed log: opened; tail = {:?}, report {:?}",
            db.get(b"tail").unwrap(),
            db.recovery_report()
        ),
    }

    // 4. CURRENT without its newline is accepted; a non-canonical name is not.
    let d = base.path().join("current");
    copy_dir(&src, &d);
    let name = read_current(&d).unwrap();
    std::fs::write(d.join("CURRENT"), name.as_bytes()).unwrap();
    drop(open(&d).unwrap());
    let name = read_current(&d).unwrap();
    let num: u64 = name["MANIFEST-".len()..].parse().unwrap();
    std::fs::write(d.join("CURRENT"), format!("MANIFEST-{num}\n")).unwrap();
    let e = open(&d)
        .map(drop)
        .expect_err("non-canonical CURRENT accepted");
    assert!(format!("{e:?}").contains("Corruption"), "{e:?}");

    // 5. Tables: footer version 3 (checksum repaired) is refused; a
    //    properties block re-typed as LZ4 (checksum repaired) is corrupt.
    let table_err = |mutate: &dyn Fn(&mut Vec<u8>)| -> String {
        let d = base.path().join(format!("t{}", rand_suffix()));
        copy_dir(&src, &d);
        let (_, tp) = files_with_ext(&d, ".sst").pop().unwrap();
        let mut f = std::fs::read(&tp).unwrap();
        mutate(&mut f);
        std::fs::write(&tp, &f).unwrap();
        match open(&d) {
            Err(e) => format!("open: {e:?}"),
            Ok(db) => {
                let mut r = String::from("read ok");
                for i in 0..200u32 {
                    if let Err(e) = db.get(format!("key{i:04}")) {
                        r = format!("get: {e:?}");
                        break;
                    }
                }
                r
            }
        }
    };
    let fix_footer = |f: &mut Vec<u8>| {
        let n = f.len();
        let c = crc(&f[n - 64..n - 12]);
        f[n - 12..n - 8].copy_from_slice(&c.to_le_bytes());
    };
    let r = table_err(&|f| {
        let n = f.len();
        f[n - 16..n - 12].copy_from_slice(&3u32.to_le_bytes());
        fix_footer(f);
    });
    eprintln!("footer version 3: {r}");
    assert!(r.contains("Corruption"), "{r}");
    let r = table_err(&|f| {
        let ft = read_footer(f).unwrap();
        let end = (ft.props.off + ft.props.len) as usize;
        f[end] = 1;
        let mut h = crc32fast::Hasher::new();
        h.update(&f[ft.props.off as usize..end]);
        h.update(&[1]);
        let c = h.finalize();
        f[end + 1..end + 5].copy_from_slice(&c.to_le_bytes());
    });
    eprintln!("properties typed LZ4: {r}");
    assert!(r.contains("Corruption"), "{r}");
    // A data block whose LZ4 length claims more than the bound allows.
    let r = table_err(&|f| {
        let ft = read_footer(f).unwrap();
        let mut st = BlockStat::default();
        let idx = read_block(f, ft.index, 2, false, &mut st).unwrap();
        let (ents, _) = parse_block(&idx).unwrap();
        for e in ents {
            let (off, a) = varint(&e.value, 0, 10).unwrap();
            let (len, _) = varint(&e.value, a, 10).unwrap();
            let end = (off + len) as usize;
            if f[end] != 1 {
                continue;
            }
            let (ulen, n) = varint(f, off as usize, 5).unwrap();
            let _ = len;
            // Re-encode uncompressed_len as one more, in the same n bytes if it fits.
            let want = ulen as usize + 1;
            let mut enc = Vec::new();
            let mut x = want;
            for i in 0..n {
                let byte = (x & 0x7f) as u8;
                x >>= 7;
                enc.push(if i + 1 < n { byte | 0x80 } else { byte });
            }
            if x != 0 {
                continue;
            }
            f[off as usize..off as usize + n].copy_from_slice(&enc);
            let mut h = crc32fast::Hasher::new();
            h.update(&f[off as usize..end]);
            h.update(&[1]);
            let c = h.finalize();
            f[end + 1..end + 5].copy_from_slice(&c.to_le_bytes());
        }
    });
    eprintln!("lz4 length off by one: {r}");
    assert!(r.contains("Corruption"), "{r}");
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The `sievedb.hll` property's documented size bounds (its byte format is
/// only in src/sketch/hll.rs, so only sizes are checked).
#[test]
fn cleanroom_hll_property_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Options::default();
    o.background_compaction = false;
    let db = Db::open(dir.path(), o).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:06}"), b"v").unwrap();
    }
    db.flush().unwrap();
    for i in 0..6000u32 {
        db.put(format!("big{i:06}"), b"v").unwrap();
    }
    db.flush().unwrap();
    let mut sizes = Vec::new();
    for (_, p) in files_with_ext(dir.path(), ".sst") {
        let d = decode_table(&std::fs::read(p).unwrap(), 16).unwrap();
        check_table_props(&d).unwrap();
        let n = prop_u64(&d.props, "sievedb.table.distinct_keys").unwrap();
        sizes.push((n, d.props["sievedb.hll"].len()));
    }
    eprintln!("(distinct keys, hll bytes): {sizes:?}");
    assert!(sizes.contains(&(100, 9 + 4 * 100 + 4)));
    assert!(sizes.contains(&(6000, 12_301)));
}
