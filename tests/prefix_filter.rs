//! Prefix filters: with `Options::prefix_filter_len = Some(n)` a table's
//! filter also holds its keys' `n`-byte prefixes, and `Db::scan_prefix`
//! skips, unread, the tables that cannot hold the prefix. The answers are
//! those of a plain range scan whatever the setting; only the blocks read
//! differ.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{policies, small_options, Rng};
use sievedb::filter::{prefix_hash, FilterPolicy, NoFilter};
use sievedb::fs::RealFs;
use sievedb::sstable::{Table, TableBuilder, TableOptions};
use sievedb::{Db, Error, Options};

/// Key `item` of user `user`: the user part `u{user:04}/` is 6 bytes.
fn key(user: u64, item: u64) -> Vec<u8> {
    format!("u{user:04}/{item:03}").into_bytes()
}

fn user_prefix(user: u64) -> Vec<u8> {
    format!("u{user:04}/").into_bytes()
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn scan_prefix(db: &Db, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.scan_prefix(prefix)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn expected(model: &Model, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Loads users 0..400 (even users only when `even_only`) with puts,
/// overwrites and deletes over several flushes and compactions, plus a few
/// keys with `0xff` bytes.
fn load(db: &Db, model: &mut Model, seed: u64, even_only: bool) {
    let mut rng = Rng(seed);
    for round in 0..4u64 {
        for _ in 0..5_000 {
            let mut user = rng.below(400);
            if even_only {
                user &= !1;
            }
            let k = key(user, rng.below(40));
            if rng.below(6) == 0 {
                db.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("{round}-{}", rng.next_u64()).into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        if round == 1 {
            db.compact_all().unwrap();
        }
    }
    for tail in [&[0xffu8][..], &[0xff, 0xff], &[0xff, 0x00], &[0xfe, 0xff]] {
        let mut k = b"u9999/".to_vec();
        k.extend_from_slice(tail);
        db.put(&k, b"edge").unwrap();
        model.insert(k, b"edge".to_vec());
        let mut k = vec![0xff; 6];
        k.extend_from_slice(tail);
        db.put(&k, b"edge").unwrap();
        model.insert(k, b"edge".to_vec());
    }
    db.flush().unwrap();
}

#[test]
fn scan_prefix_answers_like_the_model_with_and_without_prefix_filters() {
    for policy in policies() {
        for prefix_len in [None, Some(6)] {
            let dir = tempfile::tempdir().unwrap();
            let mut opts = small_options();
            opts.filter_policy = Arc::clone(&policy);
            opts.prefix_filter_len = prefix_len;
            let db = Db::open(dir.path(), opts).unwrap();
            let mut model = Model::new();
            load(&db, &mut model, 5, true);
            let what = format!("{} {prefix_len:?}", policy.name());
            let mut prefixes: Vec<Vec<u8>> = Vec::new();
            for user in (0..420).step_by(3) {
                prefixes.push(user_prefix(user)); // odd users are absent
                prefixes.push(key(user, 1)[..8].to_vec()); // longer than 6
                prefixes.push(key(user, 7)); // a whole key
            }
            for short in ["u00", "u012", "u0", "u", ""] {
                prefixes.push(short.as_bytes().to_vec()); // shorter than 6
            }
            prefixes.extend([
                b"u9999/\xff".to_vec(),
                b"u9999/\xff\xff".to_vec(),
                vec![0xff; 6],
                vec![0xff; 7],
                vec![0xff; 9],
            ]);
            for p in &prefixes {
                assert_eq!(scan_prefix(&db, p), expected(&model, p), "{what} {p:?}");
            }
            let s = db.stats();
            assert!(s.prefix_filter_negatives <= s.prefix_filter_checks);
            match prefix_len {
                Some(_) if policy.name() == NoFilter.name() => {
                    assert_eq!(s.prefix_filter_negatives, 0, "{what}")
                }
                Some(_) => assert!(s.prefix_filter_negatives > 0, "{what}: {s:?}"),
                None => assert_eq!(s.prefix_filter_checks, 0, "{what}"),
            }
        }
    }
}

#[test]
fn a_tombstone_above_is_never_skipped_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.prefix_filter_len = Some(6);
    opts.background_compaction = false;
    let db = Db::open(dir.path(), opts).unwrap();
    for item in 0..50 {
        db.put(key(7, item), b"old").unwrap();
    }
    db.compact_all().unwrap(); // user 7 lives in the deepest level
    for item in 0..50 {
        if item % 2 == 0 {
            db.delete(key(7, item)).unwrap();
        }
    }
    db.flush().unwrap(); // the tombstones sit in a level-0 table
    assert!(db.stats().levels[0].tables > 0);
    let got: Vec<Vec<u8>> = db
        .scan_prefix(user_prefix(7))
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    let want: Vec<Vec<u8>> = (0..50).filter(|i| i % 2 == 1).map(|i| key(7, i)).collect();
    assert_eq!(got, want);
}

#[test]
fn missing_prefixes_skip_tables_without_reading_them() {
    let mut blocks = Vec::new();
    for prefix_len in [None, Some(6)] {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = small_options();
        opts.prefix_filter_len = prefix_len;
        opts.background_compaction = false;
        let db = Db::open(dir.path(), opts).unwrap();
        let mut model = Model::new();
        load(&db, &mut model, 9, true);
        // A few level-0 tables over the deeper levels.
        for round in 0..3 {
            for user in (0..400).step_by(2) {
                db.put(key(user, 100 + round), b"top").unwrap();
                model.insert(key(user, 100 + round), b"top".to_vec());
            }
            db.flush().unwrap();
        }
        let s = db.stats();
        assert!(s.levels[0].tables >= 3 && s.levels.iter().skip(1).any(|l| l.tables > 0));
        db.reset_stats();
        for user in (1..400).step_by(2) {
            assert!(scan_prefix(&db, &user_prefix(user)).is_empty());
        }
        let missing = db.stats();
        db.reset_stats();
        for user in (0..400).step_by(2) {
            let p = user_prefix(user);
            assert_eq!(scan_prefix(&db, &p), expected(&model, &p));
        }
        let present = db.stats();
        blocks.push((missing, present));
    }
    let (without, with) = (&blocks[0], &blocks[1]);
    // 200 missing users: without prefixes each scan reads a block in every
    // table whose range covers the user (level-0 tables and one per level).
    assert!(without.0.data_block_reads >= 200 * 3, "{:?}", without.0);
    assert!(
        with.0.data_block_reads * 20 <= without.0.data_block_reads,
        "with {} against {} blocks",
        with.0.data_block_reads,
        without.0.data_block_reads
    );
    assert!(with.0.prefix_filter_negatives > 0);
    assert_eq!(without.0.prefix_filter_checks, 0);
    // Present users: never more blocks than without.
    assert!(with.1.data_block_reads <= without.1.data_block_reads);
}

#[test]
fn tables_written_under_another_prefix_setting_read_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    for (i, prefix_len) in [Some(6), None, Some(4), Some(8)].into_iter().enumerate() {
        let mut opts = small_options();
        opts.prefix_filter_len = prefix_len;
        let db = Db::open(dir.path(), opts).unwrap();
        load(&db, &mut model, 100 + i as u64, false);
        for user in (0..400).step_by(7) {
            for p in [user_prefix(user), key(user, 3)[..5].to_vec(), key(user, 3)] {
                assert_eq!(scan_prefix(&db, &p), expected(&model, &p), "{prefix_len:?}");
            }
        }
        db.close().unwrap();
    }
}

#[test]
fn a_snapshot_scans_a_prefix_as_of_its_moment() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.prefix_filter_len = Some(6);
    let db = Db::open(dir.path(), opts).unwrap();
    let mut model = Model::new();
    load(&db, &mut model, 3, true);
    let snap = db.snapshot().unwrap();
    let frozen = model.clone();
    load(&db, &mut model, 4, false);
    db.compact_all().unwrap();
    for user in (0..400).step_by(5) {
        let p = user_prefix(user);
        let got: Vec<(Vec<u8>, Vec<u8>)> =
            snap.scan_prefix(&p).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got, expected(&frozen, &p));
        assert_eq!(scan_prefix(&db, &p), expected(&model, &p));
    }
}

#[test]
fn bad_prefix_lengths_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [Some(0), Some(Options::default().max_key_bytes + 1)] {
        let mut opts = Options::default();
        opts.prefix_filter_len = bad;
        let err = Db::open(dir.path(), opts).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err}");
    }
    let opts = TableOptions {
        prefix_len: Some(0),
        ..TableOptions::default()
    };
    let err = TableBuilder::new(&RealFs, &dir.path().join("t.sst"), 1, opts).err();
    assert!(matches!(err, Some(Error::InvalidArgument(_))));
}

#[test]
fn a_table_records_its_prefixes_and_never_denies_one_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut all: Vec<Arc<dyn FilterPolicy>> = policies();
    all.push(Arc::new(NoFilter));
    for (i, policy) in all.iter().enumerate() {
        let path = dir.path().join(format!("{i}.sst"));
        let opts = TableOptions {
            filter_policy: Arc::clone(policy),
            prefix_len: Some(6),
            ..TableOptions::default()
        };
        let mut b = TableBuilder::new(&RealFs, &path, 1, opts).unwrap();
        // Users 100..3,100 step 3, five items each; one key shorter than 6.
        b.add(b"u01", 1, sievedb::key::ValueKind::Put, b"short")
            .unwrap();
        for user in (100..3_100).step_by(3) {
            for item in 0..5 {
                b.add(&key(user, item), 2, sievedb::key::ValueKind::Put, b"v")
                    .unwrap();
            }
        }
        b.finish().unwrap();
        let t = Table::open(&path, 1, policy, Arc::default()).unwrap();
        assert_eq!(t.prefix_len(), Some(6));
        let distinct = t.property("sievedb.table.distinct_prefixes").unwrap();
        assert_eq!(distinct, &[0xe8, 0x07][..], "1,000 prefixes as a varint");
        // The filter was built from 5,001 keys and 1,000 prefixes.
        assert_eq!(t.filter_entries(), 5_001 + 1_000);
        for user in (100..3_100).step_by(3) {
            assert!(
                t.may_contain_prefix(&user_prefix(user)),
                "{}",
                policy.name()
            );
            assert!(t.may_contain_prefix(&key(user, 4)));
        }
        // Outside the key range: no without asking the filter.
        assert!(!t.may_contain_prefix(b"u0000/"));
        assert!(!t.may_contain_prefix(b"v"));
        // Shorter than 6: the filter cannot tell.
        assert!(t.may_contain_prefix(b"u02"));
        // Absent users inside the key range: only the filter can deny them.
        let denied = (101..3_095)
            .step_by(3)
            .filter(|&u| !t.may_contain_prefix(&user_prefix(u)))
            .count();
        if policy.name() == NoFilter.name() {
            assert_eq!(denied, 0);
        } else {
            assert!(
                denied > 900,
                "{}: {denied} of 1,000 absent users denied",
                policy.name()
            );
        }
        // The filter holds prefix hashes, not the prefix as a key.
        assert!(t.filter().may_contain(prefix_hash(b"u0100/")));
    }
}

/// Rewrites the value of property `name` in the table at `path` (same
/// length), fixing the properties block's checksum, so only the property
/// is wrong.
fn rewrite_property(path: &std::path::Path, name: &str, value: &[u8]) {
    use sievedb::sstable::format::{
        block_crc, decode_properties, encode_properties, Footer, FOOTER_LEN,
    };
    let mut bytes = std::fs::read(path).unwrap();
    let footer = Footer::decode(&bytes[bytes.len() - FOOTER_LEN..]).unwrap();
    let (at, len) = (
        footer.properties.offset as usize,
        footer.properties.len as usize,
    );
    let mut props = decode_properties(&bytes[at..at + len]).unwrap();
    let old = props.insert(name.to_string(), value.to_vec());
    assert_eq!(old.map(|v| v.len()), Some(value.len()), "same length");
    let encoded = encode_properties(&props);
    assert_eq!(encoded.len(), len);
    bytes[at..at + len].copy_from_slice(&encoded);
    bytes[at + len..at + len + 4].copy_from_slice(&block_crc(&encoded).to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn inconsistent_prefix_properties_are_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sst");
    let build = || {
        let opts = TableOptions {
            prefix_len: Some(6),
            ..TableOptions::default()
        };
        // Each case builds the table anew (tables are created exclusively).
        let _ = std::fs::remove_file(&path);
        let mut b = TableBuilder::new(&RealFs, &path, 1, opts).unwrap();
        for user in 0..50 {
            b.add(&key(user, 0), 1, sievedb::key::ValueKind::Put, b"v")
                .unwrap();
        }
        b.finish().unwrap();
    };
    let open = || {
        Table::open(
            &path,
            1,
            &(Arc::new(NoFilter) as Arc<dyn FilterPolicy>),
            Arc::default(),
        )
    };
    build();
    let t = open().unwrap();
    assert_eq!((t.prefix_len(), t.filter_entries()), (Some(6), 50 + 50));
    drop(t);
    // A length of 0, and more prefixes than distinct keys (51 > 50).
    for (name, value) in [
        ("sievedb.table.prefix_len", vec![0u8]),
        ("sievedb.table.distinct_prefixes", vec![51]),
    ] {
        build();
        rewrite_property(&path, name, &value);
        match open() {
            Err(Error::Corruption { file, .. }) => assert_eq!(file, path),
            other => panic!("{name} = {value:?}: {other:?}"),
        }
    }
}

#[test]
fn a_prefix_equal_to_the_edge_keys_of_tables_finds_them() {
    // Each flushed table's smallest and largest key is scanned as a prefix
    // (and the keys one byte shorter): a table left out wrongly would lose
    // them.
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.prefix_filter_len = Some(6);
    opts.background_compaction = false;
    let db = Db::open(dir.path(), opts).unwrap();
    let mut model = Model::new();
    for batch in 0..6u64 {
        for user in (batch * 10)..(batch * 10 + 10) {
            for item in 0..3 {
                db.put(key(user, item), b"v").unwrap();
                model.insert(key(user, item), b"v".to_vec());
            }
        }
        db.flush().unwrap();
    }
    let tables = db.tables();
    assert!(tables.len() >= 6);
    for t in &tables {
        for edge in [&t.smallest, &t.largest] {
            for p in [
                edge.clone(),
                edge[..edge.len() - 1].to_vec(),
                edge[..6].to_vec(),
            ] {
                assert_eq!(scan_prefix(&db, &p), expected(&model, &p), "{p:?}");
            }
        }
    }
    let s = db.stats();
    assert!(s.prefix_filter_negatives <= s.prefix_filter_checks);
    assert!(s.prefix_filter_checks > 0);
    // Per level, adding up to the totals.
    let per_level = |f: fn(&sievedb::LevelStats) -> u64| s.levels.iter().map(f).sum::<u64>();
    assert_eq!(
        per_level(|l| l.prefix_filter_checks),
        s.prefix_filter_checks
    );
    assert_eq!(
        per_level(|l| l.prefix_filter_negatives),
        s.prefix_filter_negatives
    );
    assert!(s.levels[0].prefix_filter_checks > 0);
}

/// Regression (found by review, thirty-first session): `TableBuilder`
/// refused only a prefix length of 0, while `Table::open` reads 1 to
/// `MAX_KEY_LEN`, so a table built with a longer one did not open
/// ("corruption"). The builder refuses what the reader would.
#[test]
fn the_builder_takes_exactly_the_prefix_lengths_tables_open_with() {
    use sievedb::key::ValueKind;
    use sievedb::sstable::MAX_KEY_LEN;
    use sievedb::stats::ReadCounters;
    let dir = tempfile::tempdir().unwrap();
    let policy: Arc<dyn FilterPolicy> = Arc::new(sievedb::filter::BloomPolicy::new(10.0));
    for (number, n) in [0, 1, 3, MAX_KEY_LEN, MAX_KEY_LEN + 1, usize::MAX]
        .into_iter()
        .enumerate()
    {
        let path = dir.path().join(format!("{:06}.sst", number + 1));
        let opts = TableOptions {
            prefix_len: Some(n),
            filter_policy: Arc::clone(&policy),
            ..TableOptions::default()
        };
        let built = TableBuilder::new(&RealFs, &path, number as u64 + 1, opts).and_then(|mut b| {
            b.add(b"apple", 2, ValueKind::Put, b"1")?;
            b.add(b"banana", 1, ValueKind::Put, b"2")?;
            b.finish()
        });
        if (1..=MAX_KEY_LEN).contains(&n) {
            built.unwrap_or_else(|e| panic!("prefix length {n}: {e}"));
            let table = Table::open(
                &path,
                number as u64 + 1,
                &policy,
                Arc::new(ReadCounters::default()),
            )
            .unwrap_or_else(|e| panic!("prefix length {n}: {e}"));
            assert_eq!(table.prefix_len(), Some(n));
        } else {
            assert!(
                matches!(built, Err(Error::InvalidArgument(_))),
                "prefix length {n}: {built:?}"
            );
            assert!(!path.exists(), "prefix length {n}: a file was created");
        }
    }
}
