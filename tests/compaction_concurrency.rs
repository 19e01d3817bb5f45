//! Compaction racing everything else: one writer (puts and deletes over a
//! small key space) against a control thread calling `compact`,
//! `compact_all`, `wait_for_compactions`, `flush` and `checkpoint` and
//! taking snapshots, under random options (picking, filter budgets, last
//! level filters, prefix filters, level shapes). Every snapshot is compared
//! with the model at its sequence number, before and after compactions ran
//! under it; the final state is checked with scans and gets, before and
//! after `compact_all`; levels 1+ must not overlap; the state survives a
//! reopen with other options; every checkpoint holds a prefix of the writes
//! that includes all acknowledged before the call.
//!
//! Environment: `SIEVEDB_COMPACTION_SEEDS` (default 4) seeds;
//! `SIEVEDB_COMPACTION_EDGE=1` adds two-level trees, values larger than a
//! table and keys that are prefixes of each other ending in 00/01/fe/ff;
//! `SIEVEDB_COMPACTION_TWO=1` adds a thread looping the compaction calls.
//! (Found no bug when written, twenty-ninth session: 115 seeds over the
//! three settings.)
#![allow(clippy::field_reassign_with_default)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::Rng;
use sievedb::filter::{BloomPolicy, FilterPolicy, RibbonPolicy};
use sievedb::{CompactionPick, Db, FilterBudget, Options};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
/// One write: the key and its new value, `None` for a delete.
type Op = (Vec<u8>, Option<Vec<u8>>);

fn opts(rng: &mut Rng) -> Options {
    let policy: Arc<dyn FilterPolicy> = if rng.below(2) == 0 {
        Arc::new(BloomPolicy::new(8.0))
    } else {
        Arc::new(RibbonPolicy::new(8.0))
    };
    let trigger = 1 + rng.below(4) as usize;
    Options {
        memtable_bytes: 2 << 10,
        level1_bytes: 4 << 10,
        table_bytes: 1 << 10,
        block_bytes: 128,
        level_size_multiplier: 2 + rng.below(2),
        num_levels: if std::env::var("SIEVEDB_COMPACTION_EDGE").is_ok() {
            2 + rng.below(3) as usize
        } else {
            3 + rng.below(3) as usize
        },
        level0_compaction_trigger: trigger,
        level0_stop_writes: trigger + rng.below(3) as usize,
        compaction_pick: if rng.below(2) == 0 {
            CompactionPick::MostDropped
        } else {
            CompactionPick::Rotation
        },
        filter_budget: if rng.below(2) == 0 {
            FilterBudget::Monkey
        } else {
            FilterBudget::Uniform
        },
        last_level_filters: rng.below(2) == 0,
        prefix_filter_len: [None, Some(2)][rng.below(2) as usize],
        background_compaction: rng.below(4) != 0,
        manifest_roll_bytes: 2048,
        sync_writes: false,
        filter_policy: policy,
        ..Options::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    if std::env::var("SIEVEDB_COMPACTION_EDGE").is_ok() {
        // Keys that are prefixes of each other and end in 00/ff.
        let mut v = vec![b'k'];
        let mut x = k;
        while x > 0 {
            v.push([0x00u8, 0x01, 0xfe, 0xff][(x % 4) as usize]);
            x /= 4;
        }
        v
    } else {
        format!("k{k:04}").into_bytes()
    }
}

fn model_at(ops: &[Op], n: usize) -> Model {
    let mut m = Model::new();
    for (k, v) in &ops[..n] {
        match v {
            Some(v) => {
                m.insert(k.clone(), v.clone());
            }
            None => {
                m.remove(k);
            }
        }
    }
    m
}

fn contents(db: &Db) -> Model {
    db.iter().unwrap().map(|r| r.unwrap()).collect()
}

#[test]
fn concurrent_compactions_keep_every_snapshot_right() {
    let seeds: u64 = std::env::var("SIEVEDB_COMPACTION_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        let mut rng = Rng(77 + seed);
        let dir = tempfile::tempdir().unwrap();
        let o = opts(&mut rng);
        let desc = format!("seed {seed} {o:?}");
        let db = Db::open(dir.path(), o).unwrap();
        let ops: Mutex<Vec<Op>> = Mutex::new(Vec::new());
        let done = AtomicBool::new(false);
        let keys = 200 + rng.below(400);
        let total = 15_000u64;
        let checkpoint_dir = tempfile::tempdir().unwrap();
        let mut checkpoints = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut rng = Rng(991 + seed);
                for i in 0..total {
                    let k = key(rng.below(keys));
                    let del = rng.below(4) == 0;
                    let v = if del {
                        None
                    } else {
                        let mut v = i.to_le_bytes().to_vec();
                        let big = if std::env::var("SIEVEDB_COMPACTION_EDGE").is_ok()
                            && rng.below(20) == 0
                        {
                            3000
                        } else {
                            40
                        };
                        v.extend(std::iter::repeat_n(b'v', rng.below(big) as usize));
                        Some(v)
                    };
                    {
                        ops.lock().unwrap().push((k.clone(), v.clone()));
                    }
                    match v {
                        Some(v) => db.put(&k, &v).unwrap(),
                        None => db.delete(&k).unwrap(),
                    }
                }
                done.store(true, Ordering::SeqCst);
            });
            if std::env::var("SIEVEDB_COMPACTION_TWO").is_ok() {
                s.spawn(|| {
                    let mut r = Rng(17 + seed);
                    while !done.load(Ordering::SeqCst) {
                        match r.below(3) {
                            0 => db.compact_all().unwrap(),
                            1 => db.compact().unwrap(),
                            _ => db.wait_for_compactions().unwrap(),
                        }
                    }
                });
            }
            let mut crng = Rng(5 + seed);
            let mut n = 0;
            while !done.load(Ordering::SeqCst) {
                n += 1;
                match crng.below(7) {
                    0 => db.compact().unwrap(),
                    1 => db.compact_all().unwrap(),
                    2 => db.wait_for_compactions().unwrap(),
                    3 => db.flush().unwrap(),
                    4 if checkpoints.len() < 3 => {
                        let cp = checkpoint_dir.path().join(format!("cp{n}"));
                        let before = ops.lock().unwrap().len();
                        db.checkpoint(&cp).unwrap();
                        checkpoints.push((cp, before));
                    }
                    _ => {
                        let snap = db.snapshot().unwrap();
                        let seq = snap.sequence() as usize;
                        let got: Model = snap.iter().unwrap().map(|r| r.unwrap()).collect();
                        // Churn, then read the snapshot again.
                        let _ = db.wait_for_compactions();
                        let again: Model = snap.iter().unwrap().map(|r| r.unwrap()).collect();
                        let want = model_at(&ops.lock().unwrap(), seq);
                        assert!(got == want, "{desc}: snapshot at {seq} differs");
                        assert!(again == want, "{desc}: snapshot at {seq} differs later");
                        for (k, v) in want.iter().take(50) {
                            assert_eq!(snap.get(k).unwrap().as_ref(), Some(v), "{desc}");
                        }
                    }
                }
            }
        });
        let all = ops.into_inner().unwrap();
        let want = model_at(&all, all.len());
        assert!(contents(&db) == want, "{desc}: final contents differ");
        for k in 0..keys {
            assert_eq!(
                db.get(key(k)).unwrap().as_ref(),
                want.get(&key(k)),
                "{desc}: get {k}"
            );
        }
        db.compact_all().unwrap();
        assert!(contents(&db) == want, "{desc}: after compact_all");
        for k in 0..keys {
            assert_eq!(
                db.get(key(k)).unwrap().as_ref(),
                want.get(&key(k)),
                "{desc}: get {k}"
            );
        }
        let tables = db.tables();
        for level in 1..8 {
            let mut l: Vec<_> = tables.iter().filter(|t| t.level == level).collect();
            l.sort_by(|a, b| a.smallest.cmp(&b.smallest));
            for p in l.windows(2) {
                assert!(
                    p[0].largest < p[1].smallest,
                    "{desc}: overlap at level {level}"
                );
            }
        }
        db.close().unwrap();
        let mut o2 = opts(&mut rng);
        o2.num_levels = 5;
        let db = Db::open(dir.path(), o2).unwrap();
        assert!(contents(&db) == want, "{desc}: after reopen");
        for k in 0..keys {
            assert_eq!(
                db.get(key(k)).unwrap().as_ref(),
                want.get(&key(k)),
                "{desc}: get {k}"
            );
        }
        drop(db);
        for (cp, before) in checkpoints {
            let db = Db::open(&cp, Options::default()).unwrap();
            let got = contents(&db);
            // Some prefix of at least `before` ops.
            let before = before.saturating_sub(1); // one op may be in flight
            let mut m = model_at(&all, before);
            let mut ok = m == got;
            for (k, v) in &all[before..] {
                if ok {
                    break;
                }
                match v {
                    Some(v) => {
                        m.insert(k.clone(), v.clone());
                    }
                    None => {
                        m.remove(k);
                    }
                }
                ok = m == got;
            }
            assert!(ok, "{desc}: checkpoint is no prefix from {before}");
            drop(db);
            let _ = std::fs::remove_dir_all(&cp);
        }
        eprintln!("seed {seed} ok");
    }
}
