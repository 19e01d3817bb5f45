//! `Db::multi_get`: the answers and read counters of as many `get`s, all at
//! one point in time.
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::sync::Arc;

use common::{key, policies, small_options, GroupWriter, Rng};
use sievedb::{Db, Error, Stats};

/// The counters a point read moves.
fn read_counters(s: &Stats) -> [u64; 6] {
    [
        s.gets,
        s.filter_checks,
        s.filter_negatives,
        s.filter_false_positives,
        s.filter_true_positives,
        s.get_data_block_reads,
    ]
}

#[test]
fn multi_get_answers_and_counts_like_get() {
    for policy in policies() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = small_options();
        opts.filter_policy = Arc::clone(&policy);
        // No compaction between the two ways of reading, so they see the
        // same tables.
        opts.background_compaction = false;
        let db = Db::open(dir.path(), opts).unwrap();
        let mut rng = Rng(11);
        // Keys 0..40,000 in several rounds of puts, overwrites and deletes,
        // spread over the memtable, level-0 tables and deeper levels.
        for round in 0..4u64 {
            for _ in 0..15_000 {
                let k = rng.below(40_000);
                if rng.below(10) == 0 {
                    db.delete(key(k)).unwrap();
                } else {
                    db.put(key(k), format!("{k}:{round}")).unwrap();
                }
            }
            db.flush().unwrap();
            if round == 1 {
                db.compact().unwrap();
            }
        }
        // A few hundred writes stay in the memtable (no flush starts while
        // the two ways of reading are compared).
        for _ in 0..300 {
            let k = rng.below(40_000);
            db.put(key(k), format!("{k}:memtable")).unwrap();
        }
        assert!(db.stats().levels[0].tables > 0);
        assert!(db.stats().levels.iter().skip(1).any(|l| l.tables > 0));

        for batch_len in [0usize, 1, 7, 64, 1_000, 5_000] {
            // Present, deleted and never-written keys (up to 50,000), with
            // repeats.
            let keys: Vec<Vec<u8>> = (0..batch_len).map(|_| key(rng.below(50_000))).collect();
            db.reset_stats();
            let singles: Vec<Option<Vec<u8>>> = keys.iter().map(|k| db.get(k).unwrap()).collect();
            let single_counts = read_counters(&db.stats());
            db.reset_stats();
            let batched = db.multi_get(&keys).unwrap();
            let batch_counts = read_counters(&db.stats());
            assert_eq!(batched, singles, "{} batch of {batch_len}", policy.name());
            assert_eq!(
                batch_counts,
                single_counts,
                "{} batch of {batch_len}: counters",
                policy.name()
            );
        }
    }
}

#[test]
fn multi_get_sees_one_point_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_options();
    opts.memtable_bytes = 16 << 10;
    let db = Arc::new(Db::open(dir.path(), opts).unwrap());
    let group: Vec<Vec<u8>> = (0..50).map(|i| key(i * 1_000)).collect();
    let writer = GroupWriter::spawn(&db, &group);
    let mut reads = 0;
    let mut seen_values = std::collections::HashSet::new();
    // Read until the writer has written enough rounds to have flushed
    // several memtables meanwhile.
    while reads < 3_000 || writer.rounds() < 500 {
        let values = db.multi_get(&group).unwrap();
        let first = &values[0];
        assert!(
            values.iter().all(|v| v == first),
            "read {reads} saw a batch half written: {values:?}"
        );
        seen_values.insert(first.clone());
        reads += 1;
    }
    let rounds = writer.finish();
    assert!(rounds > 0);
    // The reads overlapped the writes (not all of one state).
    assert!(seen_values.len() > 1, "{rounds} rounds written");
    assert!(db.stats().flushes > 0, "the group also lived in tables");
}

#[test]
fn multi_get_rejects_bad_keys_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_options()).unwrap();
    db.put(key(1), b"v").unwrap();
    db.reset_stats();
    let too_long = vec![b'k'; small_options().max_key_bytes + 1];
    for bad in [vec![key(1), Vec::new()], vec![key(1), too_long]] {
        let err = db.multi_get(&bad).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    assert_eq!(db.stats().gets, 0, "nothing read");
    assert_eq!(
        db.multi_get(&[key(1), key(2)]).unwrap(),
        vec![Some(b"v".to_vec()), None]
    );
    assert_eq!(
        db.multi_get::<Vec<u8>>(&[]).unwrap(),
        Vec::<Option<Vec<u8>>>::new()
    );
}

#[test]
fn multi_get_feeds_the_hot_key_sketch() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_options()).unwrap();
    for i in 0..100 {
        db.put(key(i), b"v").unwrap();
    }
    // One key read 800 times among 200 others read once each.
    let mut keys: Vec<Vec<u8>> = (0..200).map(|i| key(1_000 + i)).collect();
    keys.extend(std::iter::repeat_n(key(42), 800));
    db.multi_get(&keys).unwrap();
    let top = db.hot_keys(1);
    assert_eq!(
        top.first().map(|(k, _)| k.clone()),
        Some(key(42)),
        "{top:?}"
    );
}
