//! The block cache (`Options::block_cache_bytes`): answers identical with
//! and without it, hits and misses counted, cached copies that outlive
//! damage to the file while the file itself is still checked, compaction
//! and scans that do not fill it, its capacity, and tables that take their
//! blocks with them when compaction drops them.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use common::{key, small_options, Rng};
use sievedb::{Db, Error, Options, Stats};

/// Options with a block cache of `bytes` (0: none), no background
/// compaction (tests decide when tables change).
fn options(bytes: usize) -> Options {
    let mut opts = small_options();
    opts.background_compaction = false;
    opts.block_cache_bytes = bytes;
    opts
}

fn all(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.iter().unwrap().map(|r| r.unwrap()).collect()
}

fn level_sum(s: &Stats, f: impl Fn(&sievedb::LevelStats) -> u64) -> u64 {
    s.levels.iter().map(f).sum()
}

/// Puts, overwrites, deletes, flushes, compactions and snapshots applied to
/// databases without a cache, with one far too small for the data (constant
/// eviction) and with one that holds everything: every get, snapshot get
/// and scan agrees with a model and across the three.
#[test]
fn same_answers_with_and_without_cache() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let sizes = [0usize, 16 << 10, 64 << 20];
    let dbs: Vec<Db> = dirs
        .iter()
        .zip(sizes)
        .map(|(d, bytes)| Db::open(d.path(), options(bytes)).unwrap())
        .collect();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = Rng(7);
    const KEYS: u64 = 3_000;
    for round in 0..12u64 {
        for _ in 0..2_000 {
            let k = key(rng.below(KEYS));
            if rng.below(5) == 0 {
                model.remove(&k);
                for db in &dbs {
                    db.delete(&k).unwrap();
                }
            } else {
                let len = 1 + rng.below(60) as usize;
                let v = rng.bytes(len);
                model.insert(k.clone(), v.clone());
                for db in &dbs {
                    db.put(&k, &v).unwrap();
                }
            }
        }
        match round % 3 {
            0 => dbs.iter().for_each(|db| db.flush().unwrap()),
            1 => dbs.iter().for_each(|db| db.compact().unwrap()),
            _ => {}
        }
        // A snapshot taken now must keep answering as of now after the
        // overwrites and the compaction below.
        let frozen = model.clone();
        let snaps: Vec<_> = dbs.iter().map(|db| db.snapshot().unwrap()).collect();
        for _ in 0..500 {
            let k = key(rng.below(KEYS));
            if rng.below(2) == 0 {
                model.insert(k.clone(), vec![round as u8; 8]);
                for db in &dbs {
                    db.put(&k, vec![round as u8; 8]).unwrap();
                }
            }
        }
        dbs.iter().for_each(|db| db.flush().unwrap());
        if round % 4 == 3 {
            dbs.iter().for_each(|db| db.compact_all().unwrap());
        }
        // Every key read several times, so the cached databases serve
        // most of them from the cache.
        for pass in 0..3 {
            for i in (0..KEYS).step_by(1 + pass) {
                let k = key(i);
                for (db, snap) in dbs.iter().zip(&snaps) {
                    assert_eq!(db.get(&k).unwrap(), model.get(&k).cloned(), "get {i}");
                    assert_eq!(snap.get(&k).unwrap(), frozen.get(&k).cloned(), "snap {i}");
                }
            }
        }
        let expected: Vec<_> = model.clone().into_iter().collect();
        let frozen: Vec<_> = frozen.into_iter().collect();
        for (db, snap) in dbs.iter().zip(&snaps) {
            assert_eq!(all(db), expected);
            let from_snap: Vec<_> = snap.iter().unwrap().map(|r| r.unwrap()).collect();
            assert_eq!(from_snap, frozen);
            let lo = key(KEYS / 3);
            let hi = key(KEYS / 2);
            let scanned: Vec<_> = db
                .scan(lo.clone()..hi.clone())
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
            let want: Vec<_> = model
                .range(lo..hi)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(scanned, want);
        }
    }
    let stats: Vec<Stats> = dbs.iter().map(Db::stats).collect();
    assert_eq!(stats[0].block_cache_hits + stats[0].block_cache_misses, 0);
    assert_eq!(stats[0].block_cache_capacity, 0);
    for s in &stats[1..] {
        assert!(s.block_cache_hits > 0, "{s:?}");
        assert!(s.block_cache_misses > 0, "{s:?}");
    }
    // The cache that holds everything goes to the files less often.
    assert!(
        stats[2].block_cache_misses < stats[1].block_cache_misses,
        "{:?} {:?}",
        stats[1],
        stats[2]
    );
}

/// A block enters the cache on its second miss; from then on reads of it
/// are hits, counted in the level that holds the table, and
/// `data_block_reads` counts every block the reads needed either way.
#[test]
fn repeated_reads_hit() {
    for cached in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), options(if cached { 1 << 20 } else { 0 })).unwrap();
        for i in 0..1_000 {
            db.put(key(i), [3u8; 20]).unwrap();
        }
        db.flush().unwrap();
        db.reset_stats();
        for n in 1..=10u64 {
            assert_eq!(db.get(key(500)).unwrap(), Some(vec![3u8; 20]));
            let s = db.stats();
            assert_eq!(s.data_block_reads, n);
            assert_eq!(s.get_data_block_reads, n);
            if cached {
                assert_eq!(s.block_cache_misses, n.min(2), "read {n}");
                assert_eq!(s.block_cache_hits, n.saturating_sub(2), "read {n}");
                assert_eq!(s.levels[0].block_cache_hits, s.block_cache_hits);
                assert_eq!(s.levels[0].block_cache_misses, s.block_cache_misses);
                assert_eq!(level_sum(&s, |l| l.block_cache_hits), s.block_cache_hits);
            } else {
                assert_eq!((s.block_cache_hits, s.block_cache_misses), (0, 0));
            }
        }
        let s = db.stats();
        if cached {
            assert_eq!(s.block_cache_blocks, 1);
            assert!(s.block_cache_bytes > 0 && s.block_cache_bytes <= s.block_cache_capacity);
            assert_eq!(s.block_cache_capacity, 1 << 20);
        } else {
            assert_eq!((s.block_cache_blocks, s.block_cache_bytes), (0, 0));
        }
        db.reset_stats();
        let s = db.stats();
        assert_eq!((s.block_cache_hits, s.block_cache_misses), (0, 0));
    }
}

/// The one table file of `dir`.
fn only_table(dir: &Path) -> PathBuf {
    let tables: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect();
    assert_eq!(tables.len(), 1, "{tables:?}");
    tables.into_iter().next().unwrap()
}

/// Flips a byte of `file` in place (the open database's memory map sees
/// it, as it would see damage by another process or the device).
fn flip_byte(file: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(file)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).unwrap();
    f.sync_all().unwrap();
}

/// Twenty short keys: one data block, at offset 0 of the table file.
fn one_block_db(dir: &Path, cache_bytes: usize) -> Db {
    let db = Db::open(dir, options(cache_bytes)).unwrap();
    for i in 0..20 {
        db.put(key(i), format!("value{i}")).unwrap();
    }
    db.flush().unwrap();
    db
}

fn expect_corruption<T: std::fmt::Debug>(r: sievedb::Result<T>, what: &str) {
    match r {
        Err(Error::Corruption { .. }) => {}
        other => panic!("{what}: expected corruption, got {other:?}"),
    }
}

/// A block damaged on disk after it was cached is still served, correctly,
/// from the copy (by gets and scans); without the cache, or once the cache
/// no longer holds it, the damage is reported as corruption.
#[test]
fn cached_copy_outlives_damage_file_reads_still_checked() {
    let expected: Vec<(Vec<u8>, Vec<u8>)> = (0..20)
        .map(|i| (key(i), format!("value{i}").into_bytes()))
        .collect();

    // Cached: two misses admit the block, the third read is a hit.
    let dir = tempfile::tempdir().unwrap();
    let db = one_block_db(dir.path(), 1 << 20);
    for _ in 0..3 {
        assert_eq!(db.get(key(3)).unwrap(), Some(b"value3".to_vec()));
    }
    assert_eq!(db.stats().block_cache_hits, 1);
    let table = only_table(dir.path());
    flip_byte(&table, 10);
    for i in 0..20 {
        assert_eq!(
            db.get(key(i)).unwrap(),
            Some(format!("value{i}").into_bytes())
        );
    }
    assert_eq!(all(&db), expected, "scans use the cached copy too");
    let s = db.stats();
    assert_eq!(s.block_cache_misses, 2, "{s:?}");
    drop(db);
    // Reopened, the cache is empty: the file is read, and its damage shows.
    let db = Db::open(dir.path(), options(1 << 20)).unwrap();
    expect_corruption(db.get(key(3)), "get after reopen");
    expect_corruption(
        db.iter().unwrap().collect::<sievedb::Result<Vec<_>>>(),
        "scan after reopen",
    );
    drop(db);

    // No cache: the same damage is reported by the very next read.
    let dir = tempfile::tempdir().unwrap();
    let db = one_block_db(dir.path(), 0);
    for _ in 0..3 {
        assert_eq!(db.get(key(3)).unwrap(), Some(b"value3".to_vec()));
    }
    flip_byte(&only_table(dir.path()), 10);
    expect_corruption(db.get(key(3)), "get without cache");
    expect_corruption(
        db.iter().unwrap().collect::<sievedb::Result<Vec<_>>>(),
        "scan without cache",
    );
}

/// Evicted blocks are read from the file again, and checked again.
#[test]
fn evicted_block_is_checked_again() {
    let dir = tempfile::tempdir().unwrap();
    // Room for a couple of 4 KiB blocks only.
    let mut opts = options(12 << 10);
    opts.memtable_bytes = 1 << 20;
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..2_000 {
        db.put(key(i), [9u8; 40]).unwrap();
    }
    db.flush().unwrap();
    let table = only_table(dir.path());
    for _ in 0..3 {
        db.get(key(0)).unwrap();
    }
    assert_eq!(db.stats().block_cache_hits, 1);
    flip_byte(&table, 10); // inside block 0, which holds key 0
    assert_eq!(db.get(key(0)).unwrap(), Some(vec![9u8; 40]));
    // Read many other blocks (twice each, so they are admitted) until the
    // first is evicted.
    for _ in 0..2 {
        for i in (100..2_000).step_by(20) {
            assert_eq!(db.get(key(i)).unwrap(), Some(vec![9u8; 40]));
        }
    }
    expect_corruption(db.get(key(0)), "get after eviction");
}

/// Compactions read their inputs without the cache and do not fill it;
/// scans use it but do not fill it; gets do.
#[test]
fn compaction_and_scans_do_not_fill_cache() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(64 << 20)).unwrap();
    for round in 0..6u8 {
        for i in 0..3_000 {
            db.put(key(i), [round; 30]).unwrap();
        }
        db.flush().unwrap();
    }
    db.compact_all().unwrap();
    let s = db.stats();
    assert!(s.compaction_bytes_read > 0);
    assert_eq!((s.block_cache_blocks, s.block_cache_bytes), (0, 0), "{s:?}");
    for _ in 0..3 {
        assert_eq!(all(&db).len(), 3_000);
    }
    let s = db.stats();
    assert!(s.data_block_reads > 0);
    assert_eq!(s.block_cache_misses, s.data_block_reads);
    assert_eq!(s.block_cache_blocks, 0, "scans filled the cache");
    for _ in 0..2 {
        for i in 0..3_000 {
            db.get(key(i)).unwrap();
        }
    }
    let filled = db.stats().block_cache_blocks;
    assert!(filled > 0);
    // Now scans hit.
    db.reset_stats();
    assert_eq!(all(&db).len(), 3_000);
    let s = db.stats();
    assert_eq!(s.block_cache_hits, s.data_block_reads, "{s:?}");
    assert_eq!(s.block_cache_misses, 0);
}

/// The cache never holds more than its capacity plus one block.
/// The cache's shards each took their share rounded up, so a capacity
/// that was not a multiple of the shard count came out (and was held) a few
/// bytes above the option (found by review).
#[test]
fn capacity_is_never_above_the_option() {
    for bytes in [
        1usize,
        4095,
        (2 << 20) + 1,
        (3 << 20) + 5,
        (16 << 20) + 15,
        100 << 20,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), options(bytes)).unwrap();
        let capacity = db.stats().block_cache_capacity;
        assert!(
            capacity <= bytes as u64 && capacity + 15 >= bytes as u64,
            "block_cache_bytes {bytes}: capacity {capacity}"
        );
    }
}

#[test]
fn capacity_respected() {
    for capacity in [8usize << 10, 64 << 10, 3 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = options(capacity);
        opts.memtable_bytes = 256 << 10;
        let db = Db::open(dir.path(), opts).unwrap();
        let mut rng = Rng(capacity as u64);
        for i in 0..40_000 {
            let len = 1 + rng.below(100) as usize;
            db.put(key(i), rng.bytes(len)).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
        let one_entry = 4096 + 200 + 64;
        let mut peak = 0;
        for n in 0..60_000u64 {
            // A hot range read over and over and cold keys everywhere.
            let i = if n % 2 == 0 {
                rng.below(2_000)
            } else {
                rng.below(40_000)
            };
            db.get(key(i)).unwrap();
            if n % 500 == 0 {
                let s = db.stats();
                assert_eq!(s.block_cache_capacity, capacity as u64);
                assert!(
                    s.block_cache_bytes <= s.block_cache_capacity + one_entry,
                    "{} bytes held, capacity {}",
                    s.block_cache_bytes,
                    capacity
                );
                peak = peak.max(s.block_cache_bytes);
            }
        }
        let s = db.stats();
        assert!(s.block_cache_hits > 0);
        // Filled to a fair share of its capacity (the data is larger).
        assert!(peak * 2 >= capacity as u64, "peak {peak} of {capacity}");
    }
}

/// Tables dropped by compaction erase their blocks from the cache.
#[test]
fn compacted_tables_take_their_blocks_along() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(64 << 20)).unwrap();
    for round in 0..3u8 {
        for i in 0..4_000 {
            db.put(key(i), [round; 30]).unwrap();
        }
        db.flush().unwrap();
    }
    for _ in 0..2 {
        for i in 0..4_000 {
            assert_eq!(db.get(key(i)).unwrap(), Some(vec![2u8; 30]));
        }
    }
    let before = db.stats();
    assert!(before.block_cache_blocks > 0);
    db.compact_all().unwrap();
    let s = db.stats();
    assert_eq!((s.block_cache_blocks, s.block_cache_bytes), (0, 0), "{s:?}");
    // The new tables fill it again.
    for _ in 0..2 {
        for i in 0..4_000 {
            assert_eq!(db.get(key(i)).unwrap(), Some(vec![2u8; 30]));
        }
    }
    assert!(db.stats().block_cache_blocks > 0);
}

#[test]
fn cache_size_is_validated() {
    assert_eq!(
        Options::default().block_cache_bytes,
        sievedb::DEFAULT_BLOCK_CACHE_BYTES
    );
    let mut opts = Options::default();
    opts.block_cache_bytes = 0;
    assert!(opts.validate().is_ok());
    if let Ok(huge) = usize::try_from(1u64 << 41) {
        opts.block_cache_bytes = huge;
        assert!(matches!(opts.validate(), Err(Error::InvalidArgument(_))));
        let dir = tempfile::tempdir().unwrap();
        assert!(Db::open(dir.path(), opts).is_err());
    }
}
