//! Reverse and two-ended scans (`DbIterator` as a `DoubleEndedIterator`)
//! against a model: every bound kind, memtables, level-0 and deeper tables,
//! many versions per key, snapshots, prefix scans and damaged blocks.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use common::{key, model_range, small_options, Rng};
use sievedb::{Db, Error, Options};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn pairs(it: impl Iterator<Item = sievedb::Result<(Vec<u8>, Vec<u8>)>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(|r| r.expect("scan item")).collect()
}

/// A bound of each kind around a random key (sometimes one the database
/// holds, sometimes one it does not).
fn random_bound(rng: &mut Rng, keys: u64) -> Bound<Vec<u8>> {
    let mut k = key(rng.below(keys + 2));
    if rng.below(4) == 0 {
        k.push(b'!'); // between two keys
    }
    match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(k),
        _ => Bound::Excluded(k),
    }
}

/// Checks the scans `scan` makes (each a fresh iterator over the same
/// range) forward, backward and with the ends interleaved by a random
/// pattern: each must give `want`, in order, and the ends must meet
/// exactly. `ctx` names the case in failures.
fn check_scans(
    scan: &dyn Fn() -> sievedb::DbIterator,
    want: &[(Vec<u8>, Vec<u8>)],
    rng: &mut Rng,
    ctx: &str,
) {
    assert_eq!(pairs(scan()), want, "forward, {ctx}");
    let mut backward = pairs(scan().rev());
    backward.reverse();
    assert_eq!(backward, want, "backward, {ctx}");

    let mut it = scan();
    let (mut front, mut back) = (0usize, want.len());
    loop {
        let from_back = rng.below(2) == 0;
        let got = if from_back { it.next_back() } else { it.next() };
        match got {
            Some(item) => {
                let item = item.unwrap();
                if from_back {
                    back -= 1;
                    assert_eq!(item, want[back], "mixed, from the back, {ctx}");
                } else {
                    assert_eq!(item, want[front], "mixed, from the front, {ctx}");
                    front += 1;
                }
            }
            None => {
                assert_eq!(front, back, "ends met early, {ctx}");
                assert!(it.next().is_none() && it.next_back().is_none());
                break;
            }
        }
    }
}

/// [`check_scans`] of `db.scan(lo..hi)` against the model.
fn check_range(db: &Db, model: &Model, rng: &mut Rng, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) {
    let want = model_range(model, &lo, &hi);
    let ctx = format!("{lo:?}..{hi:?}");
    check_scans(
        &|| db.scan((lo.clone(), hi.clone())).unwrap(),
        &want,
        rng,
        &ctx,
    );
}

/// Random puts, overwrites and deletes through memtables, flushes and
/// compactions; after each round, random ranges read every way.
#[test]
fn reverse_and_mixed_scans_match_a_model() {
    for (seed, compact) in [(1u64, false), (2, true), (3, true)] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), small_options()).unwrap();
        let mut model = Model::new();
        let mut rng = Rng(seed);
        let keys = 3_000;
        for round in 0..8 {
            for _ in 0..2_500 {
                let k = key(rng.below(keys));
                if rng.below(5) == 0 {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else {
                    let len = 1 + rng.below(40) as usize;
                    let v = rng.bytes(len);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            if round % 3 == 1 {
                db.flush().unwrap();
            }
            if compact && round == 5 {
                db.compact().unwrap();
            }
            for _ in 0..12 {
                let lo = random_bound(&mut rng, keys);
                let hi = random_bound(&mut rng, keys);
                check_range(&db, &model, &mut rng, lo, hi);
            }
            check_range(&db, &model, &mut rng, Bound::Unbounded, Bound::Unbounded);
        }
        let tables = db.tables();
        assert!(
            tables.iter().any(|t| t.level > 0) || !compact,
            "the test should reach deeper levels"
        );
    }
}

/// Hundreds of versions of a few keys in the memtable (more than one
/// copy-out window of the memtable cursor), some deleted: a backward scan
/// must pick each key's newest version, also across window refills.
#[test]
fn many_versions_in_the_memtable() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let mut model = Model::new();
    for round in 0..300u32 {
        for k in 0..5u64 {
            let v = format!("{k}-{round}").into_bytes();
            db.put(key(k), &v).unwrap();
            model.insert(key(k), v);
        }
        if round % 7 == 3 {
            db.delete(key(2)).unwrap();
            model.remove(&key(2));
        }
    }
    for k in 100..400u64 {
        db.put(key(k), b"x").unwrap();
        model.insert(key(k), b"x".to_vec());
    }
    let mut want: Vec<_> = model_range(&model, &Bound::Unbounded, &Bound::Unbounded);
    want.reverse();
    assert_eq!(pairs(db.iter().unwrap().rev()), want);
    let mut rng = Rng(9);
    for _ in 0..40 {
        let lo = random_bound(&mut rng, 400);
        let hi = random_bound(&mut rng, 400);
        check_range(&db, &model, &mut rng, lo, hi);
    }
}

/// Versions of one key spread over the memtable, level 0 and a deeper
/// level; a snapshot taken between them reads backward what it reads
/// forward.
#[test]
fn snapshots_read_backward_at_their_moment() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_options()).unwrap();
    let mut models = Vec::new();
    let mut snaps = Vec::new();
    let mut model = Model::new();
    let mut rng = Rng(4);
    for round in 0..6u64 {
        for _ in 0..1_500 {
            let k = key(rng.below(800));
            if rng.below(4) == 0 {
                db.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("r{round}-{}", rng.below(1000)).into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        snaps.push(db.snapshot().unwrap());
        models.push(model.clone());
        match round {
            1 => db.flush().unwrap(),
            3 => db.compact().unwrap(),
            _ => {}
        }
    }
    for (snap, model) in snaps.iter().zip(&models) {
        let mut want = model_range(model, &Bound::Unbounded, &Bound::Unbounded);
        want.reverse();
        assert_eq!(pairs(snap.iter().unwrap().rev()), want);
        let lo = key(200);
        let hi = key(600);
        let mut want = model_range(
            model,
            &Bound::Included(lo.clone()),
            &Bound::Excluded(hi.clone()),
        );
        want.reverse();
        assert_eq!(pairs(snap.scan(lo..hi).unwrap().rev()), want);
    }
}

/// A reverse prefix scan yields the prefix's keys in descending order and
/// nothing else, with and without prefix filters.
#[test]
fn reverse_prefix_scans() {
    for prefix_filter_len in [None, Some(6)] {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = small_options();
        opts.prefix_filter_len = prefix_filter_len;
        let db = Db::open(dir.path(), opts).unwrap();
        let mut model = Model::new();
        for user in 0..200u32 {
            for item in 0..8u32 {
                let k = format!("u{user:04}/{item:02}").into_bytes();
                db.put(&k, b"v").unwrap();
                model.insert(k, b"v".to_vec());
            }
            if user % 50 == 49 {
                db.flush().unwrap();
            }
        }
        // A prefix ending in 0xff: its upper bound is not "prefix + 1".
        db.put([b'u', 0xff], b"w").unwrap();
        db.put([b'u', 0xff, 0], b"w").unwrap();
        model.insert(vec![b'u', 0xff], b"w".to_vec());
        model.insert(vec![b'u', 0xff, 0], b"w".to_vec());
        for prefix in [&b"u0042/"[..], b"u01", b"u", b"v", b"", &[b'u', 0xff]] {
            let mut want: Vec<_> = model
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            want.reverse();
            assert_eq!(
                pairs(db.scan_prefix(prefix).unwrap().rev()),
                want,
                "prefix {prefix:?}"
            );
        }
    }
}

/// Scanning backward while writers insert newer versions and new keys
/// sees exactly the data of the moment the scan was created.
#[test]
fn reverse_scans_are_point_in_time_under_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), small_options()).unwrap());
    for k in 0..2_000u64 {
        db.put(key(k * 2), b"old").unwrap();
    }
    let it = db.iter().unwrap();
    let writer = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            for k in 0..2_000u64 {
                db.put(key(k * 2 + 1), b"new").unwrap();
                db.put(key(k * 2), b"new").unwrap();
            }
        })
    };
    let got = pairs(it.rev());
    writer.join().unwrap();
    let want: Vec<_> = (0..2_000u64)
        .rev()
        .map(|k| (key(k * 2), b"old".to_vec()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(db.iter().unwrap().rev().count(), 4_000);
}

/// A data block damaged on disk is reported as corruption by a backward
/// scan (never a panic, never wrong pairs), after which the scan ends.
#[test]
fn reverse_scan_reports_a_damaged_block() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        background_compaction: false,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    for k in 0..5_000u64 {
        db.put(key(k), [7u8; 100]).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let table = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .expect("a table file");
    let mut bytes = std::fs::read(&table).unwrap();
    // Inside the last data blocks (the index, filter and footer follow,
    // so stay well before the end of the data).
    let at = bytes.len() * 3 / 4;
    bytes[at] ^= 0x55;
    std::fs::write(&table, &bytes).unwrap();

    let db = Db::open(dir.path(), opts).unwrap();
    let mut it = db.iter().unwrap().rev();
    let mut seen = 0u64;
    let err = loop {
        match it.next() {
            Some(Ok((k, v))) => {
                assert_eq!(k, key(4_999 - seen));
                assert_eq!(v, [7u8; 100]);
                seen += 1;
            }
            Some(Err(e)) => break e,
            None => panic!("the damaged block was not reported ({seen} pairs read)"),
        }
    };
    assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
    assert!(seen < 5_000);
    assert!(it.next().is_none(), "the scan ends after an error");
}

/// Keys of 1-4 bytes from {00, 01, 7f, fe, ff} (many `u`, `u ++ [0]`,
/// `u ++ [ff]` neighbours), many versions, a snapshot per round, restart
/// intervals 1-16, tiny blocks and prefix filters of 1-3 bytes: every range
/// and prefix read forward, backward and mixed, at the database and at the
/// snapshot (written by a reviewer of the change).
#[test]
fn byte_keys_versions_snapshots() {
    for (seed, ri, bb, pf) in [
        (11u64, 1usize, 256usize, None),
        (12, 3, 512, Some(1)),
        (13, 16, 4096, Some(2)),
        (14, 2, 128, Some(2)),
        (15, 1, 64, Some(3)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            memtable_bytes: 16 << 10,
            level1_bytes: 64 << 10,
            table_bytes: 16 << 10,
            block_bytes: bb,
            restart_interval: ri,
            level0_compaction_trigger: 4,
            level0_stop_writes: 12,
            prefix_filter_len: pf,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        let mut model = Model::new();
        let mut rng = Rng(seed);
        for round in 0..10 {
            for _ in 0..1500 {
                let k = rng.edge_key(4);
                if rng.below(4) == 0 {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else {
                    let n = 1 + rng.below(30) as usize;
                    let v = rng.bytes(n);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            let snap = db.snapshot().unwrap();
            let snap_model = model.clone();
            // writes after the snapshot
            for _ in 0..400 {
                let k = rng.edge_key(4);
                if rng.below(3) == 0 {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else {
                    let v = rng.bytes(5);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            if round % 3 == 1 {
                db.flush().unwrap();
            }
            if round == 6 {
                db.compact().unwrap();
            }
            for _ in 0..40 {
                let lo = rng.edge_bound(4);
                let hi = rng.edge_bound(4);
                let ctx = format!("seed {seed} round {round} db {lo:?}..{hi:?}");
                let want = model_range(&model, &lo, &hi);
                check_scans(
                    &|| db.scan((lo.clone(), hi.clone())).unwrap(),
                    &want,
                    &mut rng,
                    &ctx,
                );
                let ctx = format!("seed {seed} round {round} snapshot {lo:?}..{hi:?}");
                let want = model_range(&snap_model, &lo, &hi);
                check_scans(
                    &|| snap.scan((lo.clone(), hi.clone())).unwrap(),
                    &want,
                    &mut rng,
                    &ctx,
                );
            }
            if round == 9 {
                assert!(
                    db.tables().iter().any(|t| t.level > 0),
                    "seed {seed}: reach level 1"
                );
            }
            for _ in 0..10 {
                let p = rng.edge_key(4);
                let n = 1 + rng.below(p.len() as u64) as usize;
                let p = p[..n].to_vec();
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| k.starts_with(&p))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let ctx = format!("seed {seed} round {round} prefix {p:?}");
                check_scans(&|| db.scan_prefix(&p).unwrap(), &want, &mut rng, &ctx);
            }
        }
    }
}
