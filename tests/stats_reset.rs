//! `Stats`' identities (`filter_checks` is the sum of the three answers;
//! with a block cache, `data_block_reads` is hits plus misses) hold in
//! every snapshot, also while reads run and `reset_stats` is called
//! between a read's filter check and its answer. Found by review
//! (thirty-first session): the counters were zeroed one at a time, so a
//! read asked before a reset and answered after it left the identity
//! false for good.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sievedb::{Db, Options, Stats};

/// The identities, for the totals and every level; `cached`: the database
/// has a block cache.
fn check(s: &Stats, cached: bool, when: &str) {
    let answers = s.filter_negatives + s.filter_false_positives + s.filter_true_positives;
    assert_eq!(s.filter_checks, answers, "{when}: totals {s:?}");
    if cached {
        assert_eq!(
            s.data_block_reads,
            s.block_cache_hits + s.block_cache_misses,
            "{when}: totals {s:?}"
        );
    }
    for (i, l) in s.levels.iter().enumerate() {
        let answers = l.filter_negatives + l.filter_false_positives + l.filter_true_positives;
        assert_eq!(l.filter_checks, answers, "{when}: level {i} {l:?}");
        if cached {
            assert_eq!(
                l.data_block_reads,
                l.block_cache_hits + l.block_cache_misses,
                "{when}: level {i} {l:?}"
            );
        }
    }
}

fn resets_during_reads(block_cache_bytes: usize) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_bytes: 4 << 10,
        block_cache_bytes,
        ..Options::default()
    };
    let cached = block_cache_bytes > 0;
    let db = Arc::new(Db::open(dir.path(), opts).unwrap());
    for i in 0..2_000u32 {
        db.put(format!("k{i:05}"), format!("v{i}")).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    for trial in 0..5 {
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2u32)
            .map(|r| {
                let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut i = r;
                    while !stop.load(Ordering::Relaxed) {
                        // Present and absent keys: true positives and
                        // negatives, and block reads.
                        db.get(format!("k{:05}", i % 4_000)).unwrap();
                        i = i.wrapping_add(7);
                    }
                })
            })
            .collect();
        let mut reads_seen = 0;
        for round in 0..100 {
            std::thread::sleep(std::time::Duration::from_micros(200));
            let before = db.stats();
            check(
                &before,
                cached,
                &format!("trial {trial}, round {round}, reading"),
            );
            reads_seen += before.filter_checks;
            db.reset_stats();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        check(
            &db.stats(),
            cached,
            &format!("trial {trial}, no read in flight"),
        );
        assert!(reads_seen > 0, "the readers ran");
    }
}

#[test]
fn filter_checks_add_up_across_resets_during_reads() {
    resets_during_reads(0);
}

#[test]
fn cached_block_reads_add_up_across_resets_during_reads() {
    resets_during_reads(1 << 20);
}
