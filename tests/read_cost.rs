//! `Db::get_with_cost` and `Snapshot::get_with_cost`: what one point read
//! cost, exactly, and where its answer came from.
#![allow(clippy::field_reassign_with_default)]

use std::sync::Arc;

use sievedb::filter::{BloomPolicy, NoFilter};
use sievedb::{Db, Error, Options, ReadCost, ReadSource, Stats};

fn options() -> Options {
    let mut opts = Options::default();
    opts.background_compaction = false;
    opts
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// The table that holds `key` at `level`, from `Db::tables`.
fn table_at(db: &Db, level: usize, key: &[u8]) -> u64 {
    db.tables()
        .into_iter()
        .find(|t| t.level == level && t.smallest.as_slice() <= key && key <= t.largest.as_slice())
        .map(|t| t.file_number)
        .expect("a table holds the key")
}

#[test]
fn a_memtable_answer_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.delete(b"b").unwrap();
    let (value, cost) = db.get_with_cost(b"a").unwrap();
    assert_eq!(value.as_deref(), Some(&b"1"[..]));
    let mut want = cost_zero();
    want.source = ReadSource::Memtable;
    assert_eq!(cost, want);
    // A tombstone in the memtable answers too.
    let (value, cost) = db.get_with_cost(b"b").unwrap();
    assert_eq!(value, None);
    assert_eq!(cost.source, ReadSource::Memtable);
    assert_eq!(cost.filter_checks, 0);
    // An empty database: nowhere, nothing asked.
    let (value, cost) = db.get_with_cost(b"c").unwrap();
    assert_eq!(value, None);
    assert_eq!(cost, cost_zero());
}

fn cost_zero() -> ReadCost {
    ReadCost::default()
}

/// Without filters every covering table costs a block read: a hit is a
/// true positive in its table, a miss a false positive in each covering
/// table; the answer names the table.
#[test]
fn every_covering_table_is_counted_and_the_answering_one_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options();
    opts.filter_policy = Arc::new(NoFilter);
    let db = Db::open(dir.path(), opts).unwrap();
    // Level 1 (after compact): even keys 0..200. Level 0: odd keys 1..199.
    for i in (0..200).step_by(2) {
        db.put(key(i), b"deep").unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    for i in (1..200).step_by(2) {
        db.put(key(i), b"top").unwrap();
    }
    db.delete(key(100)).unwrap(); // a tombstone at level 0 over a level-1 value
    db.flush().unwrap();
    assert!(db.tables().iter().any(|t| t.level == 0));
    assert!(db.tables().iter().any(|t| t.level >= 1));

    // Odd key: answered by level 0 at the first table asked.
    let (value, cost) = db.get_with_cost(key(51)).unwrap();
    assert_eq!(value.as_deref(), Some(&b"top"[..]));
    assert_eq!(
        cost.source,
        ReadSource::Table {
            level: 0,
            file_number: table_at(&db, 0, &key(51))
        }
    );
    assert_eq!(
        (
            cost.filter_checks,
            cost.filter_true_positives,
            cost.data_block_reads
        ),
        (1, 1, 1)
    );
    assert_eq!((cost.filter_negatives, cost.filter_false_positives), (0, 0));
    assert!(cost.bytes_read > 0);

    // Even key: level 0 covers it and has no filter (a wasted block read),
    // then the deeper table answers.
    let (value, cost) = db.get_with_cost(key(52)).unwrap();
    assert_eq!(value.as_deref(), Some(&b"deep"[..]));
    let ReadSource::Table { level, file_number } = cost.source else {
        panic!("{cost:?}")
    };
    assert!(level >= 1, "{cost:?}");
    assert_eq!(file_number, table_at(&db, level, &key(52)));
    assert_eq!(
        (
            cost.filter_checks,
            cost.filter_false_positives,
            cost.filter_true_positives,
            cost.data_block_reads
        ),
        (2, 1, 1, 2)
    );

    // The tombstone answers at level 0: None, and level 1 is not asked.
    let (value, cost) = db.get_with_cost(key(100)).unwrap();
    assert_eq!(value, None);
    assert_eq!(
        cost.source,
        ReadSource::Table {
            level: 0,
            file_number: table_at(&db, 0, &key(100))
        }
    );
    assert_eq!((cost.filter_checks, cost.data_block_reads), (1, 1));

    // A key absent everywhere but inside both tables' ranges: two wasted
    // reads, answered nowhere.
    let (value, cost) = db.get_with_cost(b"key00050x").unwrap();
    assert_eq!(value, None);
    assert_eq!(cost.source, ReadSource::Nowhere);
    assert_eq!(
        (
            cost.filter_checks,
            cost.filter_false_positives,
            cost.data_block_reads
        ),
        (2, 2, 2)
    );
    // Outside every table's range: nothing asked.
    let (_, cost) = db.get_with_cost(b"zzz").unwrap();
    assert_eq!(cost, cost_zero());
}

#[test]
fn the_block_cache_share_of_a_read_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options();
    opts.block_cache_bytes = 4 << 20;
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..100 {
        db.put(key(i), b"v").unwrap();
    }
    db.flush().unwrap();
    // First and second miss (the second admits the block), then hits.
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (value, cost) = db.get_with_cost(key(7)).unwrap();
        assert_eq!(value.as_deref(), Some(&b"v"[..]));
        assert_eq!(cost.data_block_reads, 1);
        seen.push((cost.block_cache_hits, cost.block_cache_misses));
    }
    assert_eq!(seen, vec![(0, 1), (0, 1), (1, 0), (1, 0)]);
    // Without a cache neither moves.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.flush().unwrap();
    let (_, cost) = db.get_with_cost(b"k").unwrap();
    assert_eq!(
        (
            cost.data_block_reads,
            cost.block_cache_hits,
            cost.block_cache_misses
        ),
        (1, 0, 0)
    );
}

/// The read counters `get_with_cost` reports, summed over reads, are
/// exactly what the database-wide counters moved by, also with reads on
/// several threads at once.
#[test]
fn costs_add_up_to_the_database_counters() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options();
    opts.filter_policy = Arc::new(BloomPolicy::new(4.0)); // many false positives
    opts.memtable_bytes = 16 << 10;
    opts.block_cache_bytes = 1 << 20;
    let db = Db::open(dir.path(), opts).unwrap();
    for round in 0..4u32 {
        for i in (round..4000).step_by(4) {
            db.put(key(i), format!("v{round}")).unwrap();
        }
        db.flush().unwrap();
        if round == 1 {
            db.compact().unwrap();
        }
    }
    assert!(db.tables().len() > 2);
    db.reset_stats();
    let before = db.stats();
    let totals: Vec<ReadCost> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..3u32)
            .map(|t| {
                let db = &db;
                s.spawn(move || {
                    let mut sum = ReadCost::default();
                    for i in 0..3000u32 {
                        let n = (i * 7 + t * 1013) % 8000; // half of them absent
                        let (value, cost) = db.get_with_cost(key(n)).unwrap();
                        assert_eq!(value.is_some(), n < 4000, "key {n}");
                        assert_eq!(
                            cost.filter_checks,
                            cost.filter_negatives
                                + cost.filter_false_positives
                                + cost.filter_true_positives
                        );
                        assert_eq!(
                            cost.data_block_reads,
                            cost.block_cache_hits + cost.block_cache_misses
                        );
                        assert_eq!(
                            value.is_some(),
                            matches!(cost.source, ReadSource::Table { .. })
                        );
                        sum += cost;
                    }
                    sum
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut sum = ReadCost::default();
    for t in &totals {
        sum += *t;
    }
    let after = db.stats();
    let delta = |f: fn(&Stats) -> u64| f(&after) - f(&before);
    assert_eq!(delta(|s| s.gets), 9000);
    assert_eq!(sum.filter_checks, delta(|s| s.filter_checks));
    assert_eq!(sum.filter_negatives, delta(|s| s.filter_negatives));
    assert_eq!(
        sum.filter_false_positives,
        delta(|s| s.filter_false_positives)
    );
    assert_eq!(
        sum.filter_true_positives,
        delta(|s| s.filter_true_positives)
    );
    assert_eq!(sum.data_block_reads, delta(|s| s.data_block_reads));
    assert_eq!(sum.data_block_reads, delta(|s| s.get_data_block_reads));
    assert_eq!(sum.block_cache_hits, delta(|s| s.block_cache_hits));
    assert_eq!(sum.block_cache_misses, delta(|s| s.block_cache_misses));
    assert_eq!(sum.bytes_read, delta(|s| s.bytes_read));
    // The workload exercised every kind of answer.
    assert!(sum.filter_negatives > 0 && sum.filter_false_positives > 0);
    assert!(sum.block_cache_hits > 0 && sum.block_cache_misses > 0);
}

#[test]
fn a_snapshot_read_names_the_table_of_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    db.put(b"k", b"old").unwrap();
    db.flush().unwrap();
    let old_table = table_at(&db, 0, b"k");
    let snap = db.snapshot().unwrap();
    db.put(b"k", b"new").unwrap();
    db.flush().unwrap();
    let new_table = table_at(&db, 0, b"k");
    assert_ne!(old_table, new_table);
    let (value, cost) = db.get_with_cost(b"k").unwrap();
    assert_eq!(value.as_deref(), Some(&b"new"[..]));
    assert_eq!(
        cost.source,
        ReadSource::Table {
            level: 0,
            file_number: new_table
        }
    );
    // The snapshot pinned the tables of its moment: only the older table
    // is asked, and answers.
    let (value, cost) = snap.get_with_cost(b"k").unwrap();
    assert_eq!(value.as_deref(), Some(&b"old"[..]));
    assert_eq!(
        cost.source,
        ReadSource::Table {
            level: 0,
            file_number: old_table
        }
    );
    assert_eq!((cost.filter_checks, cost.filter_true_positives), (1, 1));
}

#[test]
fn bad_keys_and_closed_databases_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    assert!(matches!(
        db.get_with_cost(b""),
        Err(Error::InvalidArgument(_))
    ));
    let long = vec![b'x'; Options::default().max_key_bytes + 1];
    assert!(matches!(
        db.get_with_cost(&long),
        Err(Error::InvalidArgument(_))
    ));
    let snap = db.snapshot().unwrap();
    assert!(matches!(
        snap.get_with_cost(b""),
        Err(Error::InvalidArgument(_))
    ));
}
