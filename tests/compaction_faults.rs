//! An I/O error or a power cut at about 40 points spread over the
//! filesystem calls of a `compact_all` (or a flush and `compact`) over a
//! tree of overwrites and deletes, everything flushed first, under three
//! option variants (picking, filter budget, last-level filters): the
//! reopened database must hold exactly the model, with no key lost and no
//! deleted key back, and a `compact_all` after it must not change that.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::Rng;
use sievedb::fs::{FaultFs, FaultKind};
use sievedb::{CompactionPick, Db, FilterBudget, Options};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn options(fs: &FaultFs, variant: u64) -> Options {
    Options {
        memtable_bytes: 2 << 10,
        table_bytes: 1 << 10,
        level1_bytes: 2 << 10,
        level_size_multiplier: 2,
        num_levels: 4,
        level0_compaction_trigger: 2,
        level0_stop_writes: 4,
        block_bytes: 128,
        manifest_roll_bytes: 1024,
        background_compaction: false,
        compaction_pick: if variant.is_multiple_of(2) {
            CompactionPick::MostDropped
        } else {
            CompactionPick::Rotation
        },
        last_level_filters: !variant.is_multiple_of(3),
        filter_budget: if variant % 2 == 1 {
            FilterBudget::Monkey
        } else {
            FilterBudget::Uniform
        },
        fs: Arc::new(fs.clone()),
        ..Options::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("k{k:04}").into_bytes()
}

/// Builds the tree; returns the model.
fn build(db: &Db, seed: u64) -> Model {
    let mut rng = Rng(seed);
    let mut model = Model::new();
    for i in 0..3000u64 {
        let k = key(rng.below(150));
        if rng.below(3) == 0 {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("v{i}-{}", "x".repeat(rng.below(20) as usize)).into_bytes();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        if i % 700 == 699 {
            db.compact().unwrap();
        }
    }
    db.flush().unwrap();
    model
}

fn contents(db: &Db) -> Model {
    db.iter().unwrap().map(|r| r.unwrap()).collect()
}

fn check(dir: &Path, fs: &FaultFs, variant: u64, model: &Model, what: &str) {
    let db = Db::open(dir, options(fs, variant)).unwrap_or_else(|e| panic!("{what}: open {e}"));
    assert!(contents(&db) == *model, "{what}: contents differ");
    for k in 0..150 {
        assert_eq!(
            db.get(key(k)).unwrap().as_ref(),
            model.get(&key(k)),
            "{what}: get {k}"
        );
    }
    db.compact_all().unwrap();
    assert!(
        contents(&db) == *model,
        "{what}: contents differ after compact_all"
    );
}

#[test]
fn faults_during_full_compaction_lose_and_resurrect_nothing() {
    let base = tempfile::tempdir().unwrap();
    for variant in 0..3u64 {
        for op in 0..2u64 {
            // Calls of a clean run.
            let fs = FaultFs::new();
            let dir = base.path().join(format!("clean{variant}-{op}"));
            let db = Db::open(&dir, options(&fs, variant)).unwrap();
            let model = build(&db, variant);
            let before = fs.counts().mutations;
            if op == 0 {
                db.compact_all().unwrap();
            } else {
                db.put(b"k9999", b"z").unwrap();
                db.delete(b"k9999").unwrap();
                db.flush().unwrap();
                db.compact().unwrap();
            }
            let calls = fs.counts().mutations - before;
            drop(db);
            check(&dir, &fs, variant, &model, "clean");
            eprintln!("variant {variant} op {op}: {calls} calls");
            assert!(calls > 10);
            let step = (calls / 40).max(1);
            let mut n = 1;
            while n <= calls {
                for cut in [false, true] {
                    let fs = FaultFs::new();
                    let dir = base.path().join(format!("v{variant}-{op}-{n}-{cut}"));
                    let db = Db::open(&dir, options(&fs, variant)).unwrap();
                    let model = build(&db, variant);
                    if cut {
                        fs.cut_power_at(n).unwrap();
                    } else {
                        fs.fail_nth(None, n, FaultKind::Io).unwrap();
                    }
                    let _ = if op == 0 {
                        db.compact_all()
                    } else {
                        db.put(b"k9999", b"z")
                            .and_then(|()| db.delete(b"k9999"))
                            .and_then(|()| db.flush())
                            .and_then(|()| db.compact())
                    };
                    drop(db);
                    if cut {
                        fs.power_cut();
                    }
                    fs.reboot().unwrap();
                    fs.clear_faults();
                    let what = format!("variant {variant} op {op} call {n} of {calls} cut {cut}");
                    check(&dir, &fs, variant, &model, &what);
                    let _ = std::fs::remove_dir_all(&dir);
                }
                n += step;
            }
        }
    }
}
