//! A model test: random puts, deletes, batches, scans (both directions,
//! bounded and by prefix), snapshots, gets and `multi_get`s, with flushes,
//! compactions and reopens, under random option sets (block sizes, restart
//! intervals, Bloom or Ribbon, budgets, prefix filters, last-level filters,
//! LZ4, block cache), every answer compared with a `BTreeMap` of what it
//! should be. Scans are opened, then read only after more writes, flushes
//! and compactions; a snapshot is held through a whole round of churn. Keys
//! are 1-5 bytes over {00, 01, 7f, fe, ff} (`Rng::edge_key`), so neighbours such as `u`,
//! `u\0` and `u\xff` are common.
//!
//! `SIEVEDB_MODEL_SEEDS=n` runs `n` seeds (default 6; 80 took about a
//! minute on 2 shared cores).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{consume, model_range, Rng};
use sievedb::filter::{BloomPolicy, FilterPolicy, RibbonPolicy};
use sievedb::{Compression, Db, FilterBudget, Options, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
/// The entries a scan should yield, in order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;
/// A scan opened earlier, what it should yield, and where it was opened.
type Pending = (sievedb::DbIterator, Entries, String);
/// Whether `k` lies between the bounds.
/// Every read agrees with the model, whatever the options and the
/// background work in between.
#[test]
fn reads_match_a_model_under_random_options() {
    let seeds: u64 = std::env::var("SIEVEDB_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    for seed in 0..seeds {
        let mut rng = Rng(1000 + seed);
        let dir = tempfile::tempdir().unwrap();
        let mk = |rng: &mut Rng| {
            let policy: Arc<dyn FilterPolicy> = if rng.below(2) == 0 {
                Arc::new(BloomPolicy::new(6.0))
            } else {
                Arc::new(RibbonPolicy::new(6.0))
            };
            Options {
                memtable_bytes: 4 << 10,
                level1_bytes: 16 << 10,
                table_bytes: 4 << 10,
                block_bytes: [64usize, 128, 512][rng.below(3) as usize],
                restart_interval: [1usize, 2, 5, 16][rng.below(4) as usize],
                level0_compaction_trigger: 3,
                level0_stop_writes: 20,
                level_size_multiplier: 3,
                num_levels: 4,
                prefix_filter_len: [None, Some(1), Some(2), Some(3)][rng.below(4) as usize],
                compression: if rng.below(2) == 0 {
                    Compression::Lz4
                } else {
                    Compression::None
                },
                block_cache_bytes: if rng.below(2) == 0 { 0 } else { 32 << 10 },
                filter_budget: if rng.below(2) == 0 {
                    FilterBudget::Monkey
                } else {
                    FilterBudget::Uniform
                },
                last_level_filters: rng.below(2) == 0,
                filter_policy: policy,
                ..Options::default()
            }
        };
        let mut model = Model::new();
        let mut db = Db::open(dir.path(), mk(&mut rng)).unwrap();
        for round in 0..14 {
            // Pending scans & snapshots opened before more writes.
            let mut pending: Vec<Pending> = Vec::new();
            let snap = db.snapshot().unwrap();
            let snap_model = model.clone();
            for step in 0..1200 {
                let r = rng.below(100);
                if r < 55 {
                    let k = rng.edge_key(5);
                    let n = 1 + rng.below(20) as usize;
                    let v = rng.bytes(n);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                } else if r < 75 {
                    let k = rng.edge_key(5);
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else if r < 80 {
                    let mut b = WriteBatch::new();
                    for _ in 0..1 + rng.below(6) {
                        let k = rng.edge_key(5);
                        if rng.below(3) == 0 {
                            b.delete(&k);
                            model.remove(&k);
                        } else {
                            let v = rng.bytes(4);
                            b.put(&k, &v);
                            model.insert(k, v);
                        }
                    }
                    db.write(&b).unwrap();
                } else if r < 83 && pending.len() < 12 {
                    let (lo, hi) = (rng.edge_bound(5), rng.edge_bound(5));
                    let w = model_range(&model, &lo, &hi);
                    let it = db.scan((lo.clone(), hi.clone())).unwrap();
                    pending.push((
                        it,
                        w,
                        format!("seed {seed} round {round} step {step} scan {lo:?}..{hi:?}"),
                    ));
                } else if r < 85 && pending.len() < 12 {
                    let p = rng.edge_key(5);
                    let w: Vec<_> = model
                        .iter()
                        .filter(|(k, _)| k.starts_with(&p))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    let it = db.scan_prefix(&p).unwrap();
                    pending.push((
                        it,
                        w,
                        format!("seed {seed} round {round} step {step} prefix {p:?}"),
                    ));
                } else if r < 95 {
                    let keys: Vec<Vec<u8>> =
                        (0..1 + rng.below(5)).map(|_| rng.edge_key(5)).collect();
                    let got = db.multi_get(&keys).unwrap();
                    for (k, g) in keys.iter().zip(got) {
                        assert_eq!(
                            g.as_ref(),
                            model.get(k),
                            "seed {seed} round {round} multi_get {k:?}"
                        );
                        assert_eq!(
                            db.get(k).unwrap().as_ref(),
                            model.get(k),
                            "seed {seed} round {round} get {k:?}"
                        );
                    }
                } else if r < 96 {
                    db.flush().unwrap();
                } else if r < 97 && rng.below(4) == 0 {
                    db.compact().unwrap();
                } else if !pending.is_empty() && rng.below(2) == 0 {
                    let i = rng.below(pending.len() as u64) as usize;
                    let (it, w, ctx) = pending.swap_remove(i);
                    consume(it, &w, &mut rng, &ctx);
                }
            }
            for (it, w, ctx) in pending.drain(..) {
                consume(it, &w, &mut rng, &ctx);
            }
            // Snapshot checks after lots of churn.
            for _ in 0..30 {
                let (lo, hi) = (rng.edge_bound(5), rng.edge_bound(5));
                let w = model_range(&snap_model, &lo, &hi);
                consume(
                    snap.scan((lo.clone(), hi.clone())).unwrap(),
                    &w,
                    &mut rng,
                    &format!("seed {seed} round {round} snap {lo:?}..{hi:?}"),
                );
                let p = rng.edge_key(5);
                let n = 1 + rng.below(p.len() as u64) as usize;
                let p = p[..n].to_vec();
                let w: Vec<_> = snap_model
                    .iter()
                    .filter(|(k, _)| k.starts_with(&p))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                consume(
                    snap.scan_prefix(&p).unwrap(),
                    &w,
                    &mut rng,
                    &format!("seed {seed} round {round} snap prefix {p:?}"),
                );
                let k = rng.edge_key(5);
                assert_eq!(
                    snap.get(&k).unwrap().as_ref(),
                    snap_model.get(&k),
                    "seed {seed} round {round} snap get {k:?}"
                );
            }
            // Full-keyspace point reads.
            let mut all: Vec<Vec<u8>> = model.keys().cloned().collect();
            for _ in 0..50 {
                all.push(rng.edge_key(5));
            }
            let got = db.multi_get(&all).unwrap();
            for (k, g) in all.iter().zip(got) {
                assert_eq!(
                    g.as_ref(),
                    model.get(k),
                    "seed {seed} round {round} final multi_get {k:?}"
                );
            }
            drop(snap);
            if round % 5 == 4 {
                drop(db);
                db = Db::open(dir.path(), mk(&mut rng)).unwrap();
            }
        }
        eprintln!(
            "seed {seed}: tables {:?}",
            db.tables().iter().map(|t| t.level).collect::<Vec<_>>()
        );
    }
}
