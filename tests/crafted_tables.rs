//! Tables and manifests whose checksums are valid but whose contents are
//! inconsistent: each must give `Error::Corruption` (open, get, scan or
//! `Db::verify`) or a correct answer, never a silently wrong one.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sievedb::filter::{BloomPolicy, FilterPolicy};
use sievedb::key::{encode_internal_key, ValueKind};
use sievedb::manifest::{Manifest, ManifestState, TableRecord};
use sievedb::sstable::format::{
    decode_properties, encode_properties, encode_u64_property, get_varint32, put_varint64,
    BlockHandle, Footer, FOOTER_LEN, FORMAT_VERSION_1,
};
use sievedb::sstable::{Table, TableBuilder, TableOptions};
use sievedb::stats::ReadCounters;
use sievedb::{Db, Error, Options};

// ---------------------------------------------------------------- helpers

fn ikey(user: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::new();
    encode_internal_key(&mut k, user, seq, ValueKind::Put);
    k
}

/// Entry of a data block as decoded: (internal key, value).
type Entry = (Vec<u8>, Vec<u8>);

/// Encodes a block like the crate's builder (prefix compression, a
/// restart every `interval` entries).
fn encode_block(entries: &[Entry], interval: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut restarts = Vec::new();
    let mut last: Vec<u8> = Vec::new();
    for (i, (k, v)) in entries.iter().enumerate() {
        let shared = if i % interval == 0 {
            restarts.push(out.len() as u32);
            0
        } else {
            last.iter().zip(k).take_while(|(a, b)| a == b).count()
        };
        put_varint64(&mut out, shared as u64);
        put_varint64(&mut out, (k.len() - shared) as u64);
        put_varint64(&mut out, v.len() as u64);
        out.extend_from_slice(&k[shared..]);
        out.extend_from_slice(v);
        last = k.clone();
    }
    for r in &restarts {
        out.extend_from_slice(&r.to_le_bytes());
    }
    out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
    out
}

/// Decodes every entry of a (well-formed) block in order.
fn decode_block(b: &[u8]) -> Vec<Entry> {
    let n = u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap()) as usize;
    let end = b.len() - 4 - 4 * n;
    let mut out = Vec::new();
    let mut key: Vec<u8> = Vec::new();
    let mut p = 0;
    while p < end {
        let (shared, q) = get_varint32(b, p).unwrap();
        let (unshared, q) = get_varint32(b, q).unwrap();
        let (vlen, q) = get_varint32(b, q).unwrap();
        key.truncate(shared);
        key.extend_from_slice(&b[q..q + unshared]);
        out.push((key.clone(), b[q + unshared..q + unshared + vlen].to_vec()));
        p = q + unshared + vlen;
    }
    out
}

/// A version-1 table taken apart.
struct Parts {
    /// Raw contents of each data block.
    data: Vec<Vec<u8>>,
    index_keys: Vec<Vec<u8>>,
    filter: Vec<u8>,
    props: BTreeMap<String, Vec<u8>>,
}

fn take_apart(bytes: &[u8]) -> Parts {
    let footer = Footer::decode(&bytes[bytes.len() - FOOTER_LEN..]).unwrap();
    assert_eq!(footer.version, FORMAT_VERSION_1);
    let get = |h: BlockHandle| bytes[h.offset as usize..(h.offset + h.len) as usize].to_vec();
    let index = decode_block(&get(footer.index));
    let mut data = Vec::new();
    let mut index_keys = Vec::new();
    for (k, v) in index {
        data.push(get(BlockHandle::decode_varint(&v).unwrap()));
        index_keys.push(k);
    }
    Parts {
        data,
        index_keys,
        filter: get(footer.filter),
        props: decode_properties(&get(footer.properties)).unwrap(),
    }
}

/// Lays the parts out again as a version-1 table, every checksum and
/// handle recomputed.
fn assemble(p: &Parts) -> Vec<u8> {
    let mut out = Vec::new();
    let put_block = |out: &mut Vec<u8>, b: &[u8]| {
        let h = BlockHandle {
            offset: out.len() as u64,
            len: b.len() as u64,
        };
        out.extend_from_slice(b);
        out.extend_from_slice(&crc32fast::hash(b).to_le_bytes());
        h
    };
    let mut index = Vec::new();
    for (b, k) in p.data.iter().zip(&p.index_keys) {
        let h = put_block(&mut out, b);
        let mut v = Vec::new();
        h.encode_varint(&mut v);
        index.push((k.clone(), v));
    }
    let filter = put_block(&mut out, &p.filter);
    let properties = put_block(&mut out, &encode_properties(&p.props));
    let index = put_block(&mut out, &encode_block(&index, 1));
    let footer = Footer {
        index,
        filter,
        properties,
        version: FORMAT_VERSION_1,
    };
    out.extend_from_slice(&footer.encode());
    out
}

fn table_name(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.sst"))
}

/// Builds a table with the crate's builder; `entries` are (user key, seq,
/// value), in order.
fn build_table(
    path: &Path,
    number: u64,
    entries: &[(&[u8], u64, &[u8])],
    restart_interval: usize,
    block_bytes: usize,
) -> sievedb::sstable::TableMeta {
    build_table_with(
        path,
        number,
        entries,
        restart_interval,
        block_bytes,
        Arc::new(BloomPolicy::new(10.0)),
    )
}

fn build_table_with(
    path: &Path,
    number: u64,
    entries: &[(&[u8], u64, &[u8])],
    restart_interval: usize,
    block_bytes: usize,
    filter_policy: Arc<dyn FilterPolicy>,
) -> sievedb::sstable::TableMeta {
    let opts = Options::default();
    let mut b = TableBuilder::new(
        opts.fs.as_ref(),
        path,
        number,
        TableOptions {
            block_bytes,
            restart_interval,
            filter_policy,
            ..TableOptions::default()
        },
    )
    .unwrap();
    for (k, seq, v) in entries {
        b.add(k, *seq, ValueKind::Put, v).unwrap();
    }
    b.finish().unwrap()
}

fn record(level: u32, meta: &sievedb::sstable::TableMeta) -> TableRecord {
    TableRecord::describing(level, meta)
}

/// Writes a manifest (numbered past every table) naming `tables`.
fn write_manifest(dir: &Path, tables: Vec<TableRecord>, last_sequence: u64) {
    let opts = Options::default();
    let mut levels = vec![Vec::new(); 7];
    let mut next = 1;
    for t in tables {
        next = next.max(t.file_number + 1);
        levels[t.level as usize].push(t);
    }
    let state = ManifestState {
        levels,
        next_file_number: next + 1,
        last_sequence,
        log_number: 0,
    };
    Manifest::create(opts.fs.as_ref(), dir, next, &state).unwrap();
}

/// Writes the patched table `parts` to `path` and a manifest recording it
/// in level 0 as `meta` describes it, at its new size.
fn install_patched(
    dir: &Path,
    path: &Path,
    parts: &Parts,
    meta: &sievedb::sstable::TableMeta,
    last_sequence: u64,
) {
    std::fs::write(path, assemble(parts)).unwrap();
    let mut rec = record(0, meta);
    rec.file_size = std::fs::metadata(path).unwrap().len();
    write_manifest(dir, vec![rec], last_sequence);
}

fn scan_all(db: &Db) -> sievedb::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    db.scan::<&[u8], _>(..)?.collect()
}

fn is_corruption<T>(r: &sievedb::Result<T>) -> bool {
    matches!(r, Err(Error::Corruption { .. }))
}

fn fresh_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("sievedb-crafted-{name}"))
        .tempdir()
        .unwrap()
}

// ---------------------------------------------------------------- tests

/// A data block holding keys past its own index key: block 0 holds a, b, c
/// but the index says it ends at b; block 1 holds d, e. Index keys still
/// increase and every entry is in order, so nothing checks the mismatch:
/// `get(c)` reads block 1 and answers `None` while a scan returns c, and
/// `Db::verify` finds nothing.
#[test]
fn data_block_beyond_its_index_key_is_not_silently_misread() {
    let tmp = fresh_dir("index-key");
    let dir = tmp.path().to_path_buf();
    let path = table_name(&dir, 1);
    let rows: Vec<(&[u8], u64, &[u8])> = vec![
        (b"a", 1, b"va"),
        (b"b", 2, b"vb"),
        (b"c", 3, b"vc"),
        (b"d", 4, b"vd"),
        (b"e", 5, b"ve"),
    ];
    let meta = build_table(&path, 1, &rows, 16, 4096);
    let mut parts = take_apart(&std::fs::read(&path).unwrap());
    assert_eq!(parts.data.len(), 1);
    // Split into blocks [a, b, c] and [d, e]; block 0's index key says b.
    let all = decode_block(&parts.data[0]);
    parts.data = vec![encode_block(&all[..3], 16), encode_block(&all[3..], 16)];
    parts.index_keys = vec![all[1].0.clone(), all[4].0.clone()];
    parts
        .props
        .insert("sievedb.table.data_blocks".into(), encode_u64_property(2));
    install_patched(&dir, &path, &parts, &meta, 5);

    let db = Db::open(&dir, Options::default()).unwrap();
    let scanned = scan_all(&db);
    let got = db.get(b"c");
    let report = db.verify().unwrap();
    let scan_has_c = matches!(&scanned, Ok(rows) if rows.iter().any(|(k, _)| k == b"c"));
    let consistent = match &got {
        Ok(v) => v.is_some() == scan_has_c,
        Err(_) => is_corruption(&got),
    };
    assert!(
        consistent || !report.is_ok(),
        "get(c) = {got:?} but scan = {scanned:?}, and verify found nothing: {report:?}"
    );
}

/// Two level-1 tables whose recorded ranges overlap: [a, m] holding k@5
/// and [c, z] holding k@10. A level >= 1 is consulted through one table
/// per key, so `get(k)` answers the older value; a scan concatenates the
/// level's tables and returns keys out of order, k twice; neither open nor
/// `Db::verify` reports the overlap.
#[test]
fn overlapping_tables_in_one_level_are_reported() {
    let tmp = fresh_dir("overlap");
    let dir = tmp.path().to_path_buf();
    let m1 = build_table(
        &table_name(&dir, 1),
        1,
        &[(b"a", 1, b"a"), (b"k", 5, b"old"), (b"m", 2, b"m")],
        16,
        4096,
    );
    let m2 = build_table(
        &table_name(&dir, 2),
        2,
        &[(b"c", 6, b"c"), (b"k", 10, b"new"), (b"z", 7, b"z")],
        16,
        4096,
    );
    write_manifest(&dir, vec![record(1, &m1), record(1, &m2)], 10);
    let db = match Db::open(&dir, Options::default()) {
        Ok(db) => db,
        Err(e) => {
            assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
            return;
        }
    };
    let got = db.get(b"k");
    let scanned = scan_all(&db);
    let report = db.verify().unwrap();
    // The tree holds k@10 = "new" and k@5 = "old": the newest is the answer,
    // and a scan is sorted, each key once.
    let scan_ok = match &scanned {
        Ok(rows) => {
            rows.windows(2).all(|w| w[0].0 < w[1].0)
                && rows
                    .iter()
                    .find(|(k, _)| k == b"k")
                    .map(|(_, v)| v.as_slice())
                    == Some(b"new".as_slice())
        }
        Err(_) => is_corruption(&scanned),
    };
    let get_ok = matches!(&got, Ok(Some(v)) if v == b"new") || is_corruption(&got);
    assert!(
        (get_ok && scan_ok) || !report.is_ok(),
        "get(k) = {got:?}, scan = {scanned:?}; verify found nothing"
    );
}

/// A manifest whose last sequence number (5) is below the largest sequence
/// of a table it lists (100). Open believes it: reads run at snapshot 5, so
/// the table's k@100 is invisible; the next write gets sequence 6, and the
/// compaction that merges k@6 with k@100 keeps only k@100 (the newer
/// internal key), which reads at snapshot 6 cannot see: the acknowledged
/// write is gone and `get(k)` answers `None`.
#[test]
fn manifest_last_sequence_below_a_tables_sequences_loses_new_writes() {
    let tmp = fresh_dir("last-seq");
    let dir = tmp.path().to_path_buf();
    let m = build_table(&table_name(&dir, 1), 1, &[(b"k", 100, b"old")], 16, 4096);
    assert_eq!(m.largest_seq, 100);
    write_manifest(&dir, vec![record(0, &m)], 5);
    let db = match Db::open(&dir, Options::default()) {
        Ok(db) => db,
        Err(e) => {
            assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
            return;
        }
    };
    db.put(b"k", b"new").unwrap();
    let scanned = scan_all(&db);
    db.flush().unwrap();
    db.compact().unwrap();
    let got = db.get(b"k");
    let report = db.verify().unwrap();
    let acked = matches!(&got, Ok(Some(v)) if v == b"new")
        && matches!(&scanned, Ok(rows) if rows == &vec![(b"k".to_vec(), b"new".to_vec())]);
    assert!(
        acked || !report.is_ok(),
        "put(k, new) acknowledged, then scan = {scanned:?}, get after compaction = {got:?}; \
         verify found nothing"
    );
}

/// Like the test above, but the manifest's own record of the table agrees
/// with its last sequence (largest_seq 5) while the table's entries (and
/// properties) are at sequence 100.
#[test]
fn table_sequences_past_the_manifest_record_are_reported() {
    let tmp = fresh_dir("table-seq");
    let dir = tmp.path().to_path_buf();
    let m = build_table(&table_name(&dir, 1), 1, &[(b"k", 100, b"old")], 16, 4096);
    let mut rec = record(0, &m);
    rec.smallest_seq = 5;
    rec.largest_seq = 5;
    write_manifest(&dir, vec![rec], 5);
    let db = match Db::open(&dir, Options::default()) {
        Ok(db) => db,
        Err(e) => {
            assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
            return;
        }
    };
    db.put(b"k", b"new").unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    let got = db.get(b"k");
    let report = db.verify().unwrap();
    assert!(
        matches!(&got, Ok(Some(v)) if v == b"new") || !report.is_ok(),
        "put(k, new) acknowledged, get after compaction = {got:?}; verify found nothing"
    );
}

/// A filter block that does not hold the table's keys (the filter of
/// another table of the same size, its checksum valid): `get` of a stored
/// key answers `None` while a scan returns it, and `Db::verify` (which
/// never asks the filter) finds nothing.
#[test]
fn filter_that_misses_the_tables_keys_is_reported() {
    let tmp = fresh_dir("filter");
    let dir = tmp.path().to_path_buf();
    let keys: Vec<Vec<u8>> = (0..200u32)
        .map(|i| format!("key{i:05}").into_bytes())
        .collect();
    let other: Vec<Vec<u8>> = (0..200u32)
        .map(|i| format!("oth{i:05}").into_bytes())
        .collect();
    let rows = |ks: &[Vec<u8>]| -> Vec<(Vec<u8>, u64, Vec<u8>)> {
        ks.iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), i as u64 + 1, b"v".to_vec()))
            .collect()
    };
    let a = rows(&keys);
    let b = rows(&other);
    let a_ref: Vec<(&[u8], u64, &[u8])> = a
        .iter()
        .map(|(k, s, v)| (k.as_slice(), *s, v.as_slice()))
        .collect();
    let b_ref: Vec<(&[u8], u64, &[u8])> = b
        .iter()
        .map(|(k, s, v)| (k.as_slice(), *s, v.as_slice()))
        .collect();
    let meta = build_table(&table_name(&dir, 1), 1, &a_ref, 16, 4096);
    build_table(&dir.join("other.sst"), 9, &b_ref, 16, 4096);
    let mut parts = take_apart(&std::fs::read(table_name(&dir, 1)).unwrap());
    let donor = take_apart(&std::fs::read(dir.join("other.sst")).unwrap());
    assert_eq!(parts.filter.len(), donor.filter.len());
    parts.filter = donor.filter;
    std::fs::remove_file(dir.join("other.sst")).unwrap();
    install_patched(&dir, &table_name(&dir, 1), &parts, &meta, 200);

    let db = Db::open(&dir, Options::default()).unwrap();
    let scanned = scan_all(&db).unwrap();
    assert_eq!(scanned.len(), 200);
    let mut missing = 0;
    for k in &keys {
        match db.get(k) {
            Ok(Some(_)) => {}
            Ok(None) => missing += 1,
            Err(e) => assert!(matches!(e, Error::Corruption { .. })),
        }
    }
    let report = db.verify().unwrap();
    assert!(
        missing == 0 || !report.is_ok(),
        "{missing} of 200 stored keys read as absent through a wrong filter; verify found nothing"
    );
}

/// The table's `smallest_key` property is larger than its real first key
/// (the manifest's record is right). `scan_prefix` skips the table by the
/// property's range and misses keys a full scan returns; neither open nor
/// `Db::verify` compares the property with the entries.
#[test]
fn smallest_key_property_above_the_first_key_is_reported() {
    let tmp = fresh_dir("smallest-prop");
    let dir = tmp.path().to_path_buf();
    let path = table_name(&dir, 1);
    let meta = build_table(
        &path,
        1,
        &[(b"aa", 1, b"1"), (b"ab", 2, b"2"), (b"ba", 3, b"3")],
        16,
        4096,
    );
    let mut parts = take_apart(&std::fs::read(&path).unwrap());
    parts
        .props
        .insert("sievedb.table.smallest_key".into(), b"b".to_vec());
    install_patched(&dir, &path, &parts, &meta, 3);
    // The table alone (no manifest record to compare with): verify
    // compares its entries with its own properties.
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::new(10.0));
    let alone = sievedb::verify::check_table_file(&path, 1, None, &policy);
    assert!(!alone.is_ok(), "verify of the table alone found nothing");

    let db = match Db::open(&dir, Options::default()) {
        Ok(db) => db,
        Err(e) => {
            assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
            return;
        }
    };
    let full = scan_all(&db).unwrap();
    let a_rows: Vec<_> = full
        .iter()
        .filter(|(k, _)| k.starts_with(b"a"))
        .cloned()
        .collect();
    let prefixed: sievedb::Result<Vec<_>> = db.scan_prefix(b"a").unwrap().collect();
    let report = db.verify().unwrap();
    assert!(
        matches!(&prefixed, Ok(rows) if *rows == a_rows)
            || is_corruption(&prefixed)
            || !report.is_ok(),
        "scan_prefix(a) = {prefixed:?}, full scan has {a_rows:?}; verify found nothing"
    );
}

/// A restart offset pointing into a value whose bytes decode as entries
/// (shared = 0): the point read's binary search starts there and returns a
/// key/value the block's entries do not hold, while a scan (which decodes
/// from offset 0) never shows it. `Db::verify` walks the entries forward
/// and never looks at the restart array past its first offset.
#[test]
fn restart_offset_into_a_value_is_reported() {
    let tmp = fresh_dir("restart");
    let dir = tmp.path().to_path_buf();
    let path = table_name(&dir, 1);
    // A value for "a" whose bytes are two fake entries: "b"@1 -> "x" and
    // "bb"@1 -> "FAKE", the second's value running to the end of the value.
    let fake1 = ikey(b"b", 1);
    let fake2 = ikey(b"bb", 1);
    let mut value = Vec::new();
    value.extend_from_slice(&[0, fake1.len() as u8, 1]);
    value.extend_from_slice(&fake1);
    value.push(b'x');
    value.extend_from_slice(&[0, fake2.len() as u8, 4]);
    value.extend_from_slice(&fake2);
    value.extend_from_slice(b"FAKE");
    let meta = build_table_with(
        &path,
        1,
        &[(b"a", 2, &value), (b"c", 3, b"vc")],
        16,
        4096,
        Arc::new(sievedb::filter::NoFilter),
    );
    let mut parts = take_apart(&std::fs::read(&path).unwrap());
    let block = &mut parts.data[0];
    // Entry 0 is: 0, 9, value_len (1 byte), key (9 bytes), value.
    let value_at = 3 + 9;
    assert_eq!(&block[value_at..value_at + value.len()], value.as_slice());
    // Restart array [0] -> [0, value_at]; count 1 -> 2.
    let n = block.len();
    block.truncate(n - 4);
    block.extend_from_slice(&(value_at as u32).to_le_bytes());
    block.extend_from_slice(&2u32.to_le_bytes());
    install_patched(&dir, &path, &parts, &meta, 3);

    let mut opts = Options::default();
    opts.filter_policy = Arc::new(sievedb::filter::NoFilter);
    let db = Db::open(&dir, opts).unwrap();
    let scanned = scan_all(&db);
    let got = db.get(b"bb");
    let report = db.verify().unwrap();
    assert!(
        matches!(&got, Ok(None)) || is_corruption(&got) || !report.is_ok(),
        "get(bb) = {got:?} though the scan holds {scanned:?}; verify found nothing"
    );
}

/// Entries out of order in a compaction input, checksums valid (found by
/// review): keys (a, c, b) made the table builder refuse the order, and the
/// database was poisoned with "invalid argument", the error for a caller's
/// bad input; versions of one key (a@1 before a@5) made the merge skip the
/// newer one as shadowed, so compaction succeeded with the old value and
/// `verify` passed afterwards, the damage gone for good. Both must be
/// reported as the damaged table they come from.
#[test]
fn entries_out_of_order_in_a_compaction_input_are_corruption() {
    type Row = (&'static [u8], u64, &'static [u8]);
    /// The case's name, its rows as built, the two entries swapped, and
    /// the last sequence number.
    type Case = (&'static str, [Row; 3], (usize, usize), u64);
    let cases: [Case; 2] = [
        (
            "a, c, b",
            [(b"a", 1, b"va"), (b"b", 2, b"vb"), (b"c", 3, b"vc")],
            (1, 2),
            3,
        ),
        (
            "a@1, a@5, b",
            [(b"a", 5, b"new"), (b"a", 1, b"old"), (b"b", 6, b"vb")],
            (0, 1),
            6,
        ),
    ];
    for (what, rows, (x, y), last_sequence) in cases {
        let tmp = fresh_dir("order");
        let dir = tmp.path().to_path_buf();
        let path = table_name(&dir, 1);
        let meta = build_table(&path, 1, &rows, 16, 4096);
        let mut parts = take_apart(&std::fs::read(&path).unwrap());
        assert_eq!(parts.data.len(), 1);
        let mut entries = decode_block(&parts.data[0]);
        entries.swap(x, y);
        parts.data[0] = encode_block(&entries, 16);
        install_patched(&dir, &path, &parts, &meta, last_sequence);

        let mut opts = Options::default();
        opts.background_compaction = false;
        let db = Db::open(&dir, opts).unwrap();
        // A failed compaction poisons the database and names the failure.
        let compacted = db.compact_all();
        assert!(
            is_corruption(&compacted)
                || matches!(&compacted, Err(Error::Poisoned(why)) if why.starts_with("corruption")),
            "compacting a table holding {what} gave {compacted:?}; get(a) now {:?}",
            db.get(b"a")
        );
        let report = db.verify().unwrap();
        assert!(!report.is_ok(), "{what}: verify passed the table");
    }
}

/// A dense precision-14 key sketch (format 1) whose every register holds
/// `rank`, with a valid checksum.
fn dense_hll_bytes(rank: u8) -> Vec<u8> {
    let p = 14u8;
    let mut out = b"HL".to_vec();
    out.extend_from_slice(&[1, p, 1]); // version, precision, dense
    out.extend_from_slice(&(1u32 << p).to_le_bytes());
    let r = rank as u32;
    let word = r | r << 6 | r << 12 | r << 18;
    for _ in 0..(1usize << p) / 4 {
        out.extend_from_slice(&word.to_le_bytes()[..3]);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A table of three keys whose key sketch says otherwise (found by
/// review): every register full made `Stats::distinct_keys` 2^64 - 1, and
/// a valid sketch of the right keys at precision 4 dragged every union
/// down to that precision. Open must report it.
#[test]
fn a_key_sketch_that_contradicts_its_table_is_not_believed() {
    let mut coarse = sievedb::sketch::HyperLogLog::new(4);
    for k in [b"a", b"b", b"c"] {
        coarse.insert(k);
    }
    for (what, sketch) in [
        ("full registers", dense_hll_bytes(51)),
        ("precision 4", coarse.to_bytes()),
    ] {
        let tmp = fresh_dir("sketch");
        let dir = tmp.path().to_path_buf();
        let path = table_name(&dir, 1);
        let rows: Vec<(&[u8], u64, &[u8])> =
            vec![(b"a", 1, b"v"), (b"b", 2, b"v"), (b"c", 3, b"v")];
        let meta = build_table(&path, 1, &rows, 16, 4096);
        let mut parts = take_apart(&std::fs::read(&path).unwrap());
        parts.props.insert("sievedb.hll".into(), sketch);
        install_patched(&dir, &path, &parts, &meta, 3);
        let opened = Db::open(&dir, Options::default()).map(|db| db.stats());
        assert!(
            is_corruption(&opened),
            "{what}: open of 3 keys gave {:?}",
            opened.map(|s| (s.distinct_keys, s.levels[0].distinct_keys))
        );
    }
}

/// Two tables whose properties each claim 2^63 entries (found by review):
/// `Db::stats` panicked on the overflow in debug builds and reported 0
/// entries in release.
#[test]
fn huge_entry_counts_are_reported_not_summed_with_overflow() {
    let tmp = fresh_dir("huge-entries");
    let dir = tmp.path().to_path_buf();
    let mut records = Vec::new();
    for (n, keys) in [(1u64, [b"a", b"b", b"c"]), (2, [b"d", b"e", b"f"])] {
        let path = table_name(&dir, n);
        let entries: Vec<(&[u8], u64, &[u8])> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (&k[..], n * 10 + i as u64, &b"v"[..]))
            .collect();
        let meta = build_table(&path, n, &entries, 16, 4096);
        let mut parts = take_apart(&std::fs::read(&path).unwrap());
        parts
            .props
            .insert("sievedb.table.entries".into(), encode_u64_property(1 << 63));
        std::fs::write(&path, assemble(&parts)).unwrap();
        let mut rec = record(0, &meta);
        rec.file_size = std::fs::metadata(&path).unwrap().len();
        records.push(rec);
    }
    write_manifest(&dir, records, 30);
    let db = match Db::open(&dir, Options::default()) {
        Ok(db) => db,
        Err(e) => {
            assert!(matches!(e, Error::Corruption { .. }), "{e:?}");
            return;
        }
    };
    let stats = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.stats()))
        .expect("Db::stats panicked");
    let entries = stats.levels[0].entries;
    assert!(
        entries >= 6,
        "level 0 holds two tables of 3 entries; Stats says {entries} entries"
    );
}

/// Sanity check of the helpers: a table taken apart and assembled again
/// unchanged opens and reads as the original.
#[test]
fn helpers_round_trip() {
    let tmp = fresh_dir("round-trip");
    let dir = tmp.path().to_path_buf();
    let path = table_name(&dir, 1);
    build_table(&path, 1, &[(b"a", 1, b"1"), (b"b", 2, b"2")], 16, 4096);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(assemble(&take_apart(&bytes)), bytes);
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::new(10.0));
    let t = Table::open(&path, 1, &policy, Arc::new(ReadCounters::default())).unwrap();
    assert_eq!(t.meta().entries, 2);
}
