//! Read counters per level: each table's reads count in its level's
//! `LevelStats`, and the levels add up to the totals.
#![allow(clippy::field_reassign_with_default)]

mod common;

use common::{key, small_options};
use sievedb::{Db, Stats};

fn level_sum(s: &Stats, f: impl Fn(&sievedb::LevelStats) -> u64) -> u64 {
    s.levels.iter().map(f).sum()
}

#[test]
fn reads_count_in_the_level_that_served_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.background_compaction = false;
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    for i in 0..20_000 {
        db.put(key(2 * i), [1u8; 24]).unwrap();
    }
    db.compact_all().unwrap();
    let deep = db.tables().iter().map(|t| t.level).max().unwrap();
    assert!(deep >= 1);
    // Newer versions of a few keys in level 0.
    for i in 0..100 {
        db.put(key(2 * i), [2u8; 24]).unwrap();
    }
    db.flush().unwrap();
    db.reset_stats();
    assert_eq!(
        db.stats()
            .levels
            .iter()
            .map(|l| l.filter_checks)
            .sum::<u64>(),
        0
    );

    // Keys only in the deep level: one data block there each, none in L0.
    for i in 5_000..5_500 {
        assert_eq!(db.get(key(2 * i)).unwrap(), Some(vec![1u8; 24]));
    }
    let s = db.stats();
    assert_eq!(s.levels[deep].get_data_block_reads, 500);
    assert_eq!(s.levels[deep].filter_true_positives, 500);
    assert_eq!(
        s.levels[0].get_data_block_reads,
        s.levels[0].filter_false_positives
    );

    // Keys in level 0: served there, the deep level never asked.
    db.reset_stats();
    for i in 0..100 {
        assert_eq!(db.get(key(2 * i)).unwrap(), Some(vec![2u8; 24]));
    }
    let s = db.stats();
    assert_eq!(s.levels[0].filter_true_positives, 100);
    assert_eq!(s.levels[deep].filter_checks, 0);

    // Missing keys: the levels' counters add up to the totals.
    for i in 0..3_000 {
        assert_eq!(db.get(key(2 * i + 1)).unwrap(), None);
    }
    let _ = db
        .scan(key(0).as_slice()..key(400).as_slice())
        .unwrap()
        .count();
    let s = db.stats();
    assert_eq!(level_sum(&s, |l| l.filter_checks), s.filter_checks);
    assert_eq!(level_sum(&s, |l| l.filter_negatives), s.filter_negatives);
    assert_eq!(
        level_sum(&s, |l| l.filter_false_positives),
        s.filter_false_positives
    );
    assert_eq!(
        level_sum(&s, |l| l.filter_true_positives),
        s.filter_true_positives
    );
    assert_eq!(level_sum(&s, |l| l.data_block_reads), s.data_block_reads);
    assert_eq!(
        level_sum(&s, |l| l.get_data_block_reads),
        s.get_data_block_reads
    );
    assert!(
        s.data_block_reads > s.get_data_block_reads,
        "the scan read blocks too"
    );
    assert_eq!(level_sum(&s, |l| l.bytes_read), s.bytes_read);
    assert!(s.levels[deep].bytes_read > 0 && s.levels[0].bytes_read > 0);
    assert!(s.levels[deep].filter_negatives > 0 && s.levels[0].filter_negatives > 0);

    // Counters survive no reopen, but per-level attribution holds after one.
    drop(db);
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 6_000..6_100 {
        assert!(db.get(key(2 * i)).unwrap().is_some());
    }
    assert_eq!(db.stats().levels[deep].filter_true_positives, 100);
}

#[test]
fn every_level_of_a_deep_tree_counts_its_own_reads_and_compaction_counts_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.background_compaction = false;
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..60_000 {
        db.put(key(2 * i), [1u8; 24]).unwrap();
    }
    db.flush().unwrap();
    db.reset_stats();
    db.compact().unwrap();
    // Compaction reads its inputs, but not as user reads.
    let s = db.stats();
    assert_eq!((s.data_block_reads, s.bytes_read), (0, 0));
    assert!(s.compaction_bytes_read > 0);
    let tables = db.tables();
    let levels: std::collections::BTreeSet<usize> = tables.iter().map(|t| t.level).collect();
    assert!(levels.iter().any(|&l| l >= 2), "levels {levels:?}");
    // Each key was written once, so it lives in exactly one table: a get of
    // a table's smallest key is a true positive in that table's level only.
    for &level in &levels {
        let t = tables.iter().find(|t| t.level == level).unwrap();
        db.reset_stats();
        assert!(db.get(&t.smallest).unwrap().is_some());
        let s = db.stats();
        assert_eq!(s.levels[level].filter_true_positives, 1, "level {level}");
        assert_eq!(level_sum(&s, |l| l.filter_true_positives), 1);
        assert_eq!(
            s.levels[level].get_data_block_reads,
            1 + s.levels[level].filter_false_positives
        );
    }
}
