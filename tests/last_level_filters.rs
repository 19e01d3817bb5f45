//! `Options::last_level_filters = false`: tables written to the deepest
//! level that holds data get no filter; level 0 and shallower levels keep
//! theirs; answers are unchanged, present-key gets read no more blocks, and
//! missing keys read a block in the last level.
#![allow(clippy::field_reassign_with_default)]

mod common;

use common::{key, small_options, Rng};
use sievedb::{Db, Options, TableInfo};

fn deepest(tables: &[TableInfo]) -> usize {
    tables.iter().map(|t| t.level).max().unwrap()
}

fn load(db: &Db, range: std::ops::Range<u64>, rng: &mut Rng) {
    for i in range {
        db.put(key(2 * i), rng.bytes(40)).unwrap();
    }
}

#[test]
fn the_deepest_level_is_written_without_filters() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.last_level_filters = false;
    let db = Db::open(dir.path(), opts).unwrap();
    let mut rng = Rng(3);
    // The first flush makes level 0 the only level: it keeps its filter.
    load(&db, 0..100, &mut rng);
    db.flush().unwrap();
    assert!(db
        .tables()
        .iter()
        .all(|t| t.level == 0 && t.filter_bytes > 0));
    load(&db, 100..40_000, &mut rng);
    db.compact().unwrap();
    let tables = db.tables();
    let last = deepest(&tables);
    assert!(last >= 2, "a tree of several levels: {last}");
    for t in &tables {
        if t.level == last {
            assert_eq!(t.filter_bytes, 0, "{t:?}");
            assert_eq!(t.filter_policy, "sievedb.NoFilter");
        }
    }
    // New writes: level-0 tables get filters, and compaction outputs in a
    // level above the deepest get filters too.
    let before = tables.iter().map(|t| t.file_number).max().unwrap();
    load(&db, 40_000..44_000, &mut rng);
    db.flush().unwrap();
    let tables = db.tables();
    let fresh_l0: Vec<&TableInfo> = tables.iter().filter(|t| t.level == 0).collect();
    assert!(!fresh_l0.is_empty());
    assert!(fresh_l0.iter().all(|t| t.filter_bytes > 0));
    db.compact().unwrap();
    let tables = db.tables();
    let last = deepest(&tables);
    let upper_new: Vec<&TableInfo> = tables
        .iter()
        .filter(|t| t.file_number > before && t.level > 0 && t.level < last)
        .collect();
    assert!(
        !upper_new.is_empty(),
        "compaction wrote above the deepest level"
    );
    assert!(
        upper_new.iter().all(|t| t.filter_bytes > 0),
        "{upper_new:?}"
    );
    assert!(tables
        .iter()
        .filter(|t| t.file_number > before && t.level == last)
        .all(|t| t.filter_bytes == 0));
}

#[test]
fn reads_are_right_and_only_missing_keys_pay() {
    let mut results = Vec::new();
    for last_level_filters in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = small_options();
        opts.last_level_filters = last_level_filters;
        opts.background_compaction = false;
        let db = Db::open(dir.path(), opts).unwrap();
        let mut rng = Rng(8);
        load(&db, 0..30_000, &mut rng);
        db.compact_all().unwrap();
        let filter_bytes: u64 = db.tables().iter().map(|t| t.filter_bytes).sum();
        db.reset_stats();
        for i in 0..5_000 {
            assert!(db.get(key(2 * i)).unwrap().is_some());
        }
        let present = db.stats().get_data_block_reads;
        db.reset_stats();
        for i in 0..5_000 {
            assert_eq!(db.get(key(2 * i + 1)).unwrap(), None);
        }
        let missing = db.stats().get_data_block_reads;
        results.push((filter_bytes, present, missing));
    }
    let (with, without) = (results[0], results[1]);
    // After a full compaction everything is in the deepest level.
    assert!(with.0 > 0);
    assert_eq!(without.0, 0);
    assert_eq!(with.1, without.1, "present keys: same blocks");
    assert!(with.2 < 200, "{with:?}");
    assert!(
        without.2 >= 4_900,
        "missing keys read the last level: {without:?}"
    );
}

#[test]
fn the_default_keeps_filters_everywhere() {
    assert!(Options::default().last_level_filters);
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_options()).unwrap();
    load(&db, 0..20_000, &mut Rng(1));
    db.compact_all().unwrap();
    assert!(db.tables().iter().all(|t| t.filter_bytes > 0));
}

#[test]
fn two_levels_and_monkey_and_prefixes_keep_answers_right() {
    for (num_levels, budget, prefix) in [
        (2, sievedb::FilterBudget::Uniform, None),
        (7, sievedb::FilterBudget::Monkey, Some(7)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = small_options();
        opts.last_level_filters = false;
        opts.num_levels = num_levels;
        opts.filter_budget = budget;
        opts.prefix_filter_len = prefix;
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let mut rng = Rng(5);
        load(&db, 0..20_000, &mut rng);
        db.compact().unwrap();
        load(&db, 20_000..21_000, &mut rng);
        drop(db); // the last writes are replayed from the log at open
        let db = Db::open(dir.path(), opts).unwrap();
        let tables = db.tables();
        let last = deepest(&tables);
        assert!(tables
            .iter()
            .all(|t| (t.level == last) == (t.filter_bytes == 0) || t.level > 0 && t.level < last));
        for i in (0..21_000).step_by(7) {
            assert!(db.get(key(2 * i)).unwrap().is_some());
            assert_eq!(db.get(key(2 * i + 1)).unwrap(), None);
        }
        let all: Vec<Vec<u8>> = db
            .scan_prefix(b"key0000")
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        let want: Vec<Vec<u8>> = (0..5_000).map(|i| key(2 * i)).collect();
        assert_eq!(all, want, "{num_levels} levels");
    }
}
