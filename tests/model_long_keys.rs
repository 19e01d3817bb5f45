//! The engine against a `BTreeMap` model with long keys: `tests/model.rs`
//! uses keys of 1 to 5 bytes, so key-prefix sharing in blocks, index
//! separators, prefix filters and the key-length limit are met only at
//! their short end there. Here keys are 1 to 120 bytes (`max_key_bytes`),
//! with shared runs of 0 to 100 bytes around the 8-, 16-, 32- and 64-byte
//! boundaries and edge-byte tails (0x00, 0x01, 0x7f, 0xfe, 0xff), and some
//! exactly at the limit; values of 0 to 3,000 bytes; scan bounds up to 3
//! bytes past the limit. Each seed draws the table options (block size,
//! restart interval, compression, block cache, filter policy, budget,
//! last-level filters, prefix filter length) afresh at every reopen.
//! Written by a review in the thirty-seventh session; it found no bug.
//!
//! `SIEVEDB_LONG_KEY_SEEDS` (default 2) sets the number of seeds.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{consume, model_range, Rng, EDGE_BYTES};
use sievedb::filter::{BloomPolicy, FilterPolicy, RibbonPolicy};
use sievedb::{Compression, Db, FilterBudget, Options, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A key of the model: a run of `a` of one of the lengths around the
/// boundaries, then 1 to 4 edge bytes; one in ten is `max_key` bytes of
/// one edge byte.
fn long_key(rng: &mut Rng, max_key: usize) -> Vec<u8> {
    let base = [0usize, 7, 8, 15, 16, 31, 32, 33, 40, 64, 100][rng.below(11) as usize];
    let mut k: Vec<u8> = vec![0x61; base];
    let tail = 1 + rng.below(4) as usize;
    for _ in 0..tail {
        k.push(EDGE_BYTES[rng.below(5) as usize]);
    }
    if rng.below(10) == 0 {
        k = vec![EDGE_BYTES[rng.below(5) as usize]; max_key];
    }
    k.truncate(max_key);
    k
}

/// A scan bound: none, or a key (up to 3 bytes longer than any stored
/// one) included or excluded.
fn bound(rng: &mut Rng, max_key: usize) -> std::ops::Bound<Vec<u8>> {
    match rng.below(3) {
        0 => std::ops::Bound::Unbounded,
        1 => std::ops::Bound::Included(long_key(rng, max_key + 3)),
        _ => std::ops::Bound::Excluded(long_key(rng, max_key + 3)),
    }
}

/// Puts, deletes, batches, scans both ways, prefix scans, gets, flushes,
/// compactions and reopens under random options: every answer equals the
/// model's.
#[test]
fn long_keys_and_big_values_match_a_model() {
    let seeds: u64 = std::env::var("SIEVEDB_LONG_KEY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    for seed in 0..seeds {
        let mut rng = Rng(777 + seed);
        let dir = tempfile::tempdir().unwrap();
        let max_key = 120usize;
        let mk = |rng: &mut Rng| {
            let policy: Arc<dyn FilterPolicy> = if rng.below(2) == 0 {
                Arc::new(BloomPolicy::new(6.0))
            } else {
                Arc::new(RibbonPolicy::new(6.0))
            };
            Options {
                memtable_bytes: 8 << 10,
                level1_bytes: 32 << 10,
                table_bytes: 8 << 10,
                block_bytes: [64usize, 128, 512][rng.below(3) as usize],
                restart_interval: [1usize, 2, 5, 16][rng.below(4) as usize],
                level0_compaction_trigger: 3,
                level0_stop_writes: 20,
                level_size_multiplier: 3,
                num_levels: 4,
                max_key_bytes: max_key,
                prefix_filter_len: [None, Some(1), Some(8), Some(33), Some(120)]
                    [rng.below(5) as usize],
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
        for round in 0..8 {
            for step in 0..600 {
                let r = rng.below(100);
                if r < 55 {
                    let k = long_key(&mut rng, max_key);
                    let n = [0usize, 1, 63, 64, 65, 700, 3000][rng.below(7) as usize];
                    let v = rng.bytes(n);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                } else if r < 70 {
                    let k = long_key(&mut rng, max_key);
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else if r < 75 {
                    let mut b = WriteBatch::new();
                    for _ in 0..1 + rng.below(6) {
                        let k = long_key(&mut rng, max_key);
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
                } else if r < 83 {
                    let (lo, hi) = (bound(&mut rng, max_key), bound(&mut rng, max_key));
                    let w = model_range(&model, &lo, &hi);
                    let it = db.scan((lo.clone(), hi.clone())).unwrap();
                    consume(
                        it,
                        &w,
                        &mut rng,
                        &format!("seed {seed} round {round} step {step} scan {lo:?}..{hi:?}"),
                    );
                } else if r < 88 {
                    let p = long_key(&mut rng, max_key);
                    let n = rng.below(p.len() as u64 + 1) as usize;
                    let p = p[..n].to_vec();
                    let w: Vec<_> = model
                        .iter()
                        .filter(|(k, _)| k.starts_with(&p))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    let it = db.scan_prefix(&p).unwrap();
                    consume(
                        it,
                        &w,
                        &mut rng,
                        &format!("seed {seed} round {round} step {step} prefix {p:?}"),
                    );
                } else if r < 96 {
                    let k = long_key(&mut rng, max_key);
                    assert_eq!(
                        db.get(&k).unwrap().as_ref(),
                        model.get(&k),
                        "seed {seed} round {round} get {k:?}"
                    );
                } else if r < 98 {
                    db.flush().unwrap();
                } else {
                    db.compact().unwrap();
                }
            }
            let all: Vec<Vec<u8>> = model.keys().cloned().collect();
            let got = db.multi_get(&all).unwrap();
            for (k, g) in all.iter().zip(got) {
                assert_eq!(
                    g.as_ref(),
                    model.get(k),
                    "seed {seed} round {round} final {k:?}"
                );
            }
            if round % 3 == 2 {
                drop(db);
                db = Db::open(dir.path(), mk(&mut rng)).unwrap();
            }
        }
    }
}
