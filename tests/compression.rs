//! LZ4 compression of data blocks (`Options::compression`,
//! `TableOptions::compression`): a model test across compression turned on,
//! off and on again (tables of both format versions in one database),
//! incompressible blocks stored as they are, damaged compressed blocks
//! reported as corruption (with and without a repaired checksum), and
//! version-1 tables, including one written before compression existed.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{key, small_options, Rng};
use sievedb::filter::{key_hash, BloomPolicy, FilterPolicy, NoFilter};
use sievedb::fs::RealFs;
use sievedb::iter::InternalIterator;
use sievedb::key::{ValueKind, MAX_SEQUENCE};
use sievedb::sstable::format::{
    block_crc_v2, get_varint64, BlockHandle, Footer, BLOCK_TYPE_LZ4, BLOCK_TYPE_RAW, FOOTER_LEN,
    FORMAT_VERSION_1, FORMAT_VERSION_2,
};
use sievedb::sstable::{Compression, Found, Table, TableBuilder, TableOptions};
use sievedb::stats::ReadCounters;
use sievedb::{Db, Error, Options};

/// A value whose second half repeats one byte (like db_bench's
/// `--compression_ratio 0.5`): LZ4 roughly halves blocks of these.
fn half_compressible(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v = rng.bytes(len / 2);
    v.resize(len, b'x');
    v
}

fn options(compression: Compression, cache: usize) -> Options {
    let mut opts = small_options();
    opts.background_compaction = false;
    opts.compression = compression;
    opts.block_cache_bytes = cache;
    opts
}

fn tables(dir: &Path) -> Vec<PathBuf> {
    let mut t: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect();
    t.sort();
    t
}

/// The format versions of the database's table files.
fn versions(dir: &Path) -> Vec<u32> {
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::new(10.0));
    tables(dir)
        .iter()
        .map(|p| {
            Table::open(p, 0, &policy, Arc::default())
                .unwrap()
                .format_version()
        })
        .collect()
}

/// One round of puts (half of them compressible), overwrites and deletes,
/// then a flush or compaction, checked against the model with gets,
/// snapshot gets, and forward and backward scans.
fn round(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, rng: &mut Rng, r: u64) {
    const KEYS: u64 = 2_000;
    for _ in 0..1_500 {
        let k = key(rng.below(KEYS));
        match rng.below(6) {
            0 => {
                model.remove(&k);
                db.delete(&k).unwrap();
            }
            1 | 2 => {
                let len = 1 + rng.below(300) as usize;
                let v = rng.bytes(len);
                model.insert(k.clone(), v.clone());
                db.put(&k, &v).unwrap();
            }
            _ => {
                let len = 2 + rng.below(300) as usize;
                let v = half_compressible(rng, len);
                model.insert(k.clone(), v.clone());
                db.put(&k, &v).unwrap();
            }
        }
    }
    match r % 3 {
        0 => db.flush().unwrap(),
        1 => db.compact().unwrap(),
        _ => {}
    }
    let frozen = model.clone();
    let snap = db.snapshot().unwrap();
    for _ in 0..300 {
        let k = key(rng.below(KEYS));
        let v = vec![r as u8; 40];
        model.insert(k.clone(), v.clone());
        db.put(&k, &v).unwrap();
    }
    db.flush().unwrap();
    if r % 4 == 3 {
        db.compact_all().unwrap();
    }
    for pass in 0..2 {
        for i in (0..KEYS).step_by(1 + pass) {
            let k = key(i);
            assert_eq!(db.get(&k).unwrap(), model.get(&k).cloned(), "get {i}");
            assert_eq!(snap.get(&k).unwrap(), frozen.get(&k).cloned(), "snap {i}");
        }
    }
    let all: Vec<_> = db.iter().unwrap().map(|r| r.unwrap()).collect();
    let want: Vec<_> = model.clone().into_iter().collect();
    assert_eq!(all, want);
    let back: Vec<_> = db.iter().unwrap().rev().map(|r| r.unwrap()).collect();
    let want_back: Vec<_> = want.iter().rev().cloned().collect();
    assert_eq!(back, want_back);
    let from_snap: Vec<_> = snap.iter().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(from_snap, frozen.into_iter().collect::<Vec<_>>());
    let (lo, hi) = (key(KEYS / 3), key(KEYS / 2));
    let ranged: Vec<_> = model
        .range(lo.clone()..hi.clone())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let scanned: Vec<_> = db
        .scan(lo.clone()..hi.clone())
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(scanned, ranged);
    let scanned_back: Vec<_> = db.scan(lo..hi).unwrap().rev().map(|r| r.unwrap()).collect();
    assert_eq!(scanned_back, ranged.into_iter().rev().collect::<Vec<_>>());
}

/// Written with LZ4, reopened without compression (new tables are version
/// 1, old ones version 2, in one database), then with LZ4 again; with and
/// without a block cache (which holds decompressed blocks). Every answer
/// matches the model throughout, and `verify` finds nothing.
#[test]
fn model_across_compression_on_off_on() {
    for cache in [0usize, 8 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let mut model = BTreeMap::new();
        let mut rng = Rng(11 + cache as u64);
        let phases = [Compression::Lz4, Compression::None, Compression::Lz4];
        for (phase, &compression) in phases.iter().enumerate() {
            let db = Db::open(dir.path(), options(compression, cache)).unwrap();
            // What the previous phase wrote still reads back.
            for (k, v) in &model {
                assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "phase {phase}");
            }
            for r in 0..6 {
                round(&db, &mut model, &mut rng, r);
            }
            if phase == 1 {
                // Only the tables written in this phase are version 1;
                // the bottom level's compressed tables stay as they were
                // unless compaction rewrote them.
                let v = versions(dir.path());
                assert!(v.contains(&FORMAT_VERSION_1), "{v:?}");
            }
            let report = db.verify().unwrap();
            assert!(report.is_ok(), "{:?}", report.problems);
            let stats = db.stats();
            if cache > 0 {
                assert!(stats.block_cache_hits > 0, "{stats:?}");
            }
            db.close().unwrap();
        }
        let v = versions(dir.path());
        assert!(v.contains(&FORMAT_VERSION_2), "{v:?}");
        // A last open without compression reads everything.
        let db = Db::open(dir.path(), options(Compression::None, 0)).unwrap();
        let all: Vec<_> = db.iter().unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        db.close().unwrap();
    }
}

/// Tables of both versions side by side right after switching: v2 tables
/// from the first open, v1 tables from the second.
#[test]
fn tables_of_both_versions_coexist() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(5);
    let mut model = BTreeMap::new();
    for (i, compression) in [Compression::Lz4, Compression::None]
        .into_iter()
        .enumerate()
    {
        let db = Db::open(dir.path(), options(compression, 0)).unwrap();
        for j in 0..500u64 {
            let k = key(j * 2 + i as u64);
            let v = half_compressible(&mut rng, 100);
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.flush().unwrap();
        db.close().unwrap();
    }
    let mut v = versions(dir.path());
    v.sort();
    v.dedup();
    assert_eq!(v, vec![FORMAT_VERSION_1, FORMAT_VERSION_2]);
    let db = Db::open(dir.path(), options(Compression::Lz4, 0)).unwrap();
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    let back: Vec<_> = db.iter().unwrap().rev().map(|r| r.unwrap()).collect();
    assert_eq!(back, model.into_iter().rev().collect::<Vec<_>>());
}

// ---- table level ----

fn build(path: &Path, compression: Compression, values: &[Vec<u8>]) -> Table {
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::new(10.0));
    let opts = TableOptions {
        filter_policy: Arc::clone(&policy),
        compression,
        ..Default::default()
    };
    let mut b = TableBuilder::new(&RealFs, path, 1, opts).unwrap();
    for (i, v) in values.iter().enumerate() {
        b.add(&key(i as u64), 5, ValueKind::Put, v).unwrap();
    }
    b.finish().unwrap();
    Table::open(path, 1, &policy, Arc::new(ReadCounters::default())).unwrap()
}

/// Every entry by point read and by a forward and a backward scan.
fn check_table(t: &Arc<Table>, values: &[Vec<u8>]) {
    for (i, v) in values.iter().enumerate() {
        let k = key(i as u64);
        let got = t.get(&k, key_hash(&k), MAX_SEQUENCE).unwrap();
        assert_eq!(got.map(|f| f.value), Some(v.clone()), "get {i}");
    }
    let mut it = t.iter();
    it.seek_to_first().unwrap();
    let mut n = 0;
    while it.valid() {
        assert_eq!(it.value(), values[n].as_slice());
        n += 1;
        it.next().unwrap();
    }
    assert_eq!(n, values.len());
    it.seek_to_last().unwrap();
    while it.valid() {
        n -= 1;
        assert_eq!(it.value(), values[n].as_slice());
        it.prev().unwrap();
    }
    assert_eq!(n, 0);
}

/// The handles of a table's data blocks, from its index block (a restart at
/// every entry: `shared = 0 | unshared | value_len | key | handle`).
fn data_handles(bytes: &[u8]) -> Vec<BlockHandle> {
    let footer = Footer::decode(&bytes[bytes.len() - FOOTER_LEN..]).unwrap();
    let (o, l) = (footer.index.offset as usize, footer.index.len as usize);
    let index = &bytes[o..o + l];
    let n = u32::from_le_bytes(index[l - 4..].try_into().unwrap()) as usize;
    let entries_end = l - 4 - 4 * n;
    let mut out = Vec::new();
    let mut p = 0;
    while p < entries_end {
        let (_, q) = get_varint64(index, p).unwrap();
        let (unshared, q) = get_varint64(index, q).unwrap();
        let (vlen, q) = get_varint64(index, q).unwrap();
        let v = q + unshared as usize;
        out.push(BlockHandle::decode_varint(&index[v..v + vlen as usize]).unwrap());
        p = v + vlen as usize;
    }
    out
}

fn random_values(rng: &mut Rng, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|_| rng.bytes(100)).collect()
}

/// Blocks that LZ4 cannot shrink by an eighth are stored as they are: the
/// file is exactly one type byte per block longer than without
/// compression (data blocks plus filter, properties and index). Blocks of
/// half-compressible values are stored compressed and the file shrinks.
#[test]
fn incompressible_blocks_are_stored_raw() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(3);
    let random = random_values(&mut rng, 2_000);
    let off = build(&dir.path().join("a.sst"), Compression::None, &random);
    let on = Arc::new(build(&dir.path().join("b.sst"), Compression::Lz4, &random));
    assert_eq!(off.format_version(), FORMAT_VERSION_1);
    assert_eq!(on.format_version(), FORMAT_VERSION_2);
    assert_eq!(off.data_blocks(), on.data_blocks());
    assert_eq!(
        on.meta().file_size,
        off.meta().file_size + on.data_blocks() as u64 + 3
    );
    let bytes = std::fs::read(on.path()).unwrap();
    for h in data_handles(&bytes) {
        assert_eq!(bytes[(h.offset + h.len) as usize], BLOCK_TYPE_RAW);
    }
    check_table(&on, &random);

    let half: Vec<Vec<u8>> = (0..2_000)
        .map(|_| half_compressible(&mut rng, 100))
        .collect();
    let off = build(&dir.path().join("c.sst"), Compression::None, &half);
    let on = Arc::new(build(&dir.path().join("d.sst"), Compression::Lz4, &half));
    assert!(
        on.meta().file_size * 10 < off.meta().file_size * 7,
        "{} vs {}",
        on.meta().file_size,
        off.meta().file_size
    );
    let bytes = std::fs::read(on.path()).unwrap();
    let handles = data_handles(&bytes);
    assert_eq!(handles.len(), on.data_blocks());
    assert!(handles
        .iter()
        .all(|h| bytes[(h.offset + h.len) as usize] == BLOCK_TYPE_LZ4));
    check_table(&on, &half);
    // bytes_read counts the stored (compressed) size.
    let c = Arc::new(ReadCounters::default());
    let policy: Arc<dyn FilterPolicy> = Arc::new(NoFilter);
    let t = Table::open(on.path(), 1, &policy, Arc::clone(&c)).unwrap();
    let k = key(0);
    t.get(&k, key_hash(&k), MAX_SEQUENCE).unwrap().unwrap();
    assert_eq!(
        c.bytes_read.load(std::sync::atomic::Ordering::Relaxed),
        handles[0].len
    );
}

fn expect_corruption<T: std::fmt::Debug>(r: sievedb::Result<T>, what: &str) {
    match r {
        Err(Error::Corruption { .. }) => {}
        other => panic!("{what}: expected corruption, got {other:?}"),
    }
}

/// Reads everything from a possibly damaged table: each answer is right or
/// `Error::Corruption`, never a panic or another error. Returns how many
/// reads failed.
fn read_all_or_corruption(path: &Path, values: &[Vec<u8>]) -> usize {
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::new(10.0));
    let t = match Table::open(path, 1, &policy, Arc::default()) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            expect_corruption::<()>(Err(e), "open");
            return 1;
        }
    };
    let mut errors = 0;
    for (i, v) in values.iter().enumerate() {
        let k = key(i as u64);
        match t.get(&k, key_hash(&k), MAX_SEQUENCE) {
            // With a repaired checksum a damaged byte can decode to another
            // value: the CRC is not a MAC. Only the shape is checked then.
            Ok(Some(Found { .. })) | Ok(None) => {}
            Err(e) => {
                errors += 1;
                expect_corruption::<()>(Err(e), "get");
            }
        }
        let _ = v;
    }
    for forward in [true, false] {
        let mut it = t.iter();
        let mut r = if forward {
            it.seek_to_first()
        } else {
            it.seek_to_last()
        };
        let mut steps = 0;
        while r.is_ok() && it.valid() && steps < 10 * values.len() {
            steps += 1;
            r = if forward { it.next() } else { it.prev() };
        }
        if r.is_err() {
            errors += 1;
            expect_corruption(r, "scan");
        }
    }
    errors
}

/// A flipped byte in a compressed block is caught by its checksum: reads
/// of that block are `Error::Corruption`, reads of other blocks still
/// answer right. With the checksum recomputed after the damage, the LZ4
/// decoder (or the block parser behind it) sees garbage: never a panic, a
/// damaged length is always corruption.
#[test]
fn damaged_compressed_blocks_are_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(9);
    let values: Vec<Vec<u8>> = (0..600).map(|_| half_compressible(&mut rng, 100)).collect();
    let orig = dir.path().join("orig.sst");
    let table = build(&orig, Compression::Lz4, &values);
    let blocks = table.data_blocks();
    drop(table);
    let bytes = std::fs::read(&orig).unwrap();
    let handles = data_handles(&bytes);
    assert_eq!(handles.len(), blocks);
    assert!(blocks >= 5);
    let h = handles[2];
    let (start, end) = (h.offset as usize, (h.offset + h.len) as usize);
    assert_eq!(bytes[end], BLOCK_TYPE_LZ4);
    let damaged = dir.path().join("damaged.sst");
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::new(10.0));

    // Every key is read after each flip: those of the damaged block fail,
    // every other one answers right.
    let in_block: Vec<usize> = (0..values.len()).collect();

    // 1. Plain flips, checksum left alone.
    let mut failing_keys = None;
    for at in [
        start,
        start + 1,
        start + h.len as usize / 2,
        end - 1,
        end,
        end + 2,
    ] {
        let mut b = bytes.clone();
        b[at] ^= 0x5a;
        std::fs::write(&damaged, &b).unwrap();
        let t = Table::open(&damaged, 1, &policy, Arc::default()).unwrap();
        let mut failed = Vec::new();
        for &i in &in_block {
            let k = key(i as u64);
            match t.get(&k, key_hash(&k), MAX_SEQUENCE) {
                Ok(got) => assert_eq!(got.unwrap().value, values[i], "flip at {at}, key {i}"),
                Err(e) => {
                    expect_corruption::<()>(Err(e), "flipped");
                    failed.push(i);
                }
            }
        }
        assert!(!failed.is_empty(), "flip at {at} went unnoticed");
        // The same keys fail whichever byte of the block is hit: exactly
        // those of the damaged block.
        match &failing_keys {
            None => failing_keys = Some(failed),
            Some(f) => assert_eq!(f, &failed),
        }
        let mut it = Arc::new(t).iter();
        let mut r = it.seek_to_first();
        while r.is_ok() && it.valid() {
            r = it.next();
        }
        expect_corruption(r, "scan over flipped block");
    }
    assert!(failing_keys.unwrap().len() < values.len());

    let repair = |b: &mut Vec<u8>| {
        let crc = block_crc_v2(&b[start..end], b[end]);
        b[end + 1..end + 5].copy_from_slice(&crc.to_le_bytes());
    };
    // 2. A damaged decompressed length (the leading varint), checksum
    // repaired: too long, too short, and far too long.
    for (first, second) in [(0xffu8, 0x7fu8), (0x80, 0x01), (0x85, 0x20), (0xff, 0xff)] {
        let mut b = bytes.clone();
        b[start] = first;
        b[start + 1] = second;
        repair(&mut b);
        std::fs::write(&damaged, &b).unwrap();
        let errors = read_all_or_corruption(&damaged, &values);
        assert!(errors > 0, "length {first:#x} {second:#x} went unnoticed");
    }
    // 3. Every byte of the LZ4 payload flipped in turn, checksum repaired:
    // no panic, only corruption errors (or answers).
    for at in start..end {
        for mask in [0x01u8, 0xff] {
            let mut b = bytes.clone();
            b[at] ^= mask;
            repair(&mut b);
            std::fs::write(&damaged, &b).unwrap();
            read_all_or_corruption(&damaged, &values);
        }
    }
    // 4. The type byte changed, checksum repaired: unknown type 2 is
    // corruption; type 0 makes the parser read LZ4 bytes as a block.
    for t in [2u8, 0xff, BLOCK_TYPE_RAW] {
        let mut b = bytes.clone();
        b[end] = t;
        repair(&mut b);
        std::fs::write(&damaged, &b).unwrap();
        let errors = read_all_or_corruption(&damaged, &values);
        if t != BLOCK_TYPE_RAW {
            assert!(errors > 0, "type {t}");
        }
    }
}

/// The index, filter and properties blocks must be stored as they are: a
/// compressed type there (checksum repaired) is corruption at open.
#[test]
fn compressed_type_on_a_meta_block_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(1);
    let values: Vec<Vec<u8>> = (0..200).map(|_| half_compressible(&mut rng, 50)).collect();
    let path = dir.path().join("t.sst");
    drop(build(&path, Compression::Lz4, &values));
    let bytes = std::fs::read(&path).unwrap();
    let footer = Footer::decode(&bytes[bytes.len() - FOOTER_LEN..]).unwrap();
    for h in [footer.index, footer.filter, footer.properties] {
        let mut b = bytes.clone();
        let (s, e) = (h.offset as usize, (h.offset + h.len) as usize);
        assert_eq!(b[e], BLOCK_TYPE_RAW);
        b[e] = BLOCK_TYPE_LZ4;
        let crc = block_crc_v2(&b[s..e], b[e]);
        b[e + 1..e + 5].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &b).unwrap();
        let policy: Arc<dyn FilterPolicy> = Arc::new(NoFilter);
        expect_corruption(Table::open(&path, 1, &policy, Arc::default()), "meta type");
    }
}

/// `tests/data/v1_table.sst` was written by sievedb before compression
/// existed (format version 1; see `write_v1_fixture` below for the
/// entries). It still reads, and a table built today without compression
/// is byte-for-byte the same file, given the filter bytes of the time
/// (Bloom format 0x04, which `BloomPolicy` built then: [`SecondBloomFormat`]).
#[test]
fn version_1_fixture_reads_and_is_still_written() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v1_table.sst");
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::new(10.0));
    let t = Arc::new(Table::open(&fixture, 7, &policy, Arc::default()).unwrap());
    assert_eq!(t.format_version(), FORMAT_VERSION_1);
    let expected = v1_fixture_entries();
    for (k, seq, kind, v) in &expected {
        let got = t.get(k, key_hash(k), MAX_SEQUENCE).unwrap().unwrap();
        assert_eq!((got.seq, got.kind, &got.value), (*seq, *kind, v));
    }
    let mut it = t.iter();
    it.seek_to_last().unwrap();
    let mut n = expected.len();
    while it.valid() {
        n -= 1;
        assert_eq!(it.value(), expected[n].3.as_slice());
        it.prev().unwrap();
    }
    assert_eq!(n, 0);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("today.sst");
    write_v1_fixture(&path, Compression::None, Arc::new(SecondBloomFormat));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&fixture).unwrap()
    );
    // Today's filter (format 0x07) changes the filter block only.
    write_v1_fixture(&path, Compression::None, Arc::new(BloomPolicy::new(10.0)));
    let t = Table::open(&path, 7, &policy, Arc::default()).unwrap();
    assert_eq!(t.format_version(), FORMAT_VERSION_1);
    assert_ne!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&fixture).unwrap()
    );
    for (k, seq, kind, v) in &expected {
        let got = t.get(k, key_hash(k), MAX_SEQUENCE).unwrap().unwrap();
        assert_eq!((got.seq, got.kind, &got.value), (*seq, *kind, v));
    }
    // The same entries with LZ4: version 2, same answers.
    write_v1_fixture(&path, Compression::Lz4, Arc::new(BloomPolicy::new(10.0)));
    let t = Table::open(&path, 7, &policy, Arc::default()).unwrap();
    assert_eq!(t.format_version(), FORMAT_VERSION_2);
    for (k, seq, kind, v) in &expected {
        let got = t.get(k, key_hash(k), MAX_SEQUENCE).unwrap().unwrap();
        assert_eq!((got.seq, got.kind, &got.value), (*seq, *kind, v));
    }
}

fn v1_fixture_entries() -> Vec<(Vec<u8>, u64, ValueKind, Vec<u8>)> {
    (0..200u64)
        .map(|i| {
            let k = format!("key{i:05}").into_bytes();
            if i % 10 == 3 {
                (k, 1000 - i, ValueKind::Delete, Vec::new())
            } else {
                let v = format!("value-{i}-").repeat(1 + (i % 4) as usize);
                (k, 1000 - i, ValueKind::Put, v.into_bytes())
            }
        })
        .collect()
}

/// `BloomPolicy::new(10.0)` as it was when the fixture was written: the
/// same name, building Bloom format 0x04 (`bloom::build_v2`).
struct SecondBloomFormat;

impl FilterPolicy for SecondBloomFormat {
    fn name(&self) -> &str {
        BloomPolicy::NAME
    }
    fn build(&self, key_hashes: &[u64]) -> Vec<u8> {
        sievedb::filter::bloom::build_v2(key_hashes, 10.0)
    }
    fn may_contain(&self, filter: &[u8], key_hash: u64) -> bool {
        sievedb::filter::may_contain(filter, key_hash)
    }
    fn budget_bits_per_key(&self) -> Option<f64> {
        Some(10.0)
    }
}

/// How the fixture was written (by the code before compression, with
/// `..Default::default()` for the rest of the options, and the filter
/// policy `SecondBloomFormat`).
fn write_v1_fixture(path: &Path, compression: Compression, filter_policy: Arc<dyn FilterPolicy>) {
    let opts = TableOptions {
        block_bytes: 256,
        restart_interval: 4,
        filter_policy,
        compression,
        ..Default::default()
    };
    // Tables are created exclusively; the callers write one path in turn.
    let _ = std::fs::remove_file(path);
    let mut b = TableBuilder::new(&RealFs, path, 7, opts).unwrap();
    for (k, seq, kind, v) in v1_fixture_entries() {
        b.add(&k, seq, kind, &v).unwrap();
    }
    b.finish().unwrap();
}
