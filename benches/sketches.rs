//! Costs of the key sketches: HyperLogLog insert/estimate/merge, count-min
//! add/estimate, and `HeavyHitters::observe_hash` (the per-point-read cost the
//! engine will pay), with `key_hash` of an 11-byte key for scale.
//!
//! `cargo bench --bench sketches -- --warm-up-time 1 --measurement-time 3`

#[path = "../tests/support/streams.rs"]
mod streams;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sievedb::filter::key_hash;
use sievedb::sketch::{CountMinSketch, HeavyHitters, HyperLogLog, UpdateMode};
use streams::{rank_key, zipf_stream, SplitMix64};

const BATCH: usize = 4_096;

fn hashes(count: usize, seed: u64) -> Vec<u64> {
    let mut stream = SplitMix64(seed);
    (0..count).map(|_| stream.next_key_hash()).collect()
}

fn hyperloglog(c: &mut Criterion) {
    let mut group = c.benchmark_group("hll");
    let fresh = hashes(BATCH, 1);
    group.throughput(Throughput::Elements(BATCH as u64));

    let mut dense = HyperLogLog::default();
    for h in hashes(100_000, 2) {
        dense.insert_hash(h);
    }
    group.bench_function("insert_hash/dense_p14", |b| {
        b.iter(|| {
            for &h in &fresh {
                dense.insert_hash(black_box(h));
            }
        })
    });

    // Filling an empty sketch with 3,000 distinct keys: the whole sparse life.
    let sparse_fill = hashes(3_000, 3);
    group.throughput(Throughput::Elements(sparse_fill.len() as u64));
    group.bench_function("insert_hash/sparse_fill_3000", |b| {
        b.iter_batched(
            HyperLogLog::default,
            |mut hll| {
                for &h in &sparse_fill {
                    hll.insert_hash(black_box(h));
                }
                hll
            },
            BatchSize::SmallInput,
        )
    });

    // Overwrites: keys the sparse sketch already holds.
    let mut sparse = HyperLogLog::default();
    for &h in &sparse_fill {
        sparse.insert_hash(h);
    }
    group.bench_function("insert_hash/sparse_repeat_3000", |b| {
        b.iter(|| {
            for &h in &sparse_fill {
                sparse.insert_hash(black_box(h));
            }
        })
    });

    group.throughput(Throughput::Elements(1));
    group.bench_function("estimate/dense_p14", |b| {
        b.iter(|| black_box(&dense).estimate())
    });
    group.bench_function("estimate/sparse_3000", |b| {
        b.iter(|| black_box(&sparse).estimate())
    });
    let mut other = HyperLogLog::default();
    for h in hashes(100_000, 4) {
        other.insert_hash(h);
    }
    group.bench_function("merge/dense_p14", |b| {
        b.iter_batched(
            || dense.clone(),
            |mut d| {
                d.merge(black_box(&other)).unwrap();
                d
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn count_min(c: &mut Criterion) {
    let mut group = c.benchmark_group("cms");
    let keys = hashes(BATCH, 5);
    group.throughput(Throughput::Elements(BATCH as u64));
    for mode in [UpdateMode::Plain, UpdateMode::Conservative] {
        let mut sketch = CountMinSketch::with_error(0.001, 0.01)
            .unwrap()
            .with_mode(mode);
        group.bench_function(format!("add_hash/{mode:?}_2719x5"), |b| {
            b.iter(|| {
                for &h in &keys {
                    sketch.add_hash(black_box(h), 1);
                }
            })
        });
        group.bench_function(format!("estimate_hash/{mode:?}_2719x5"), |b| {
            b.iter(|| {
                let mut sum = 0u64;
                for &h in &keys {
                    sum = sum.wrapping_add(sketch.estimate_hash(black_box(h)));
                }
                sum
            })
        });
    }
    group.finish();
}

fn heavy_hitters(c: &mut Criterion) {
    let mut group = c.benchmark_group("heavy_hitters");
    let keys: Vec<Vec<u8>> = (0..100_000).map(rank_key).collect();
    let key_hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
    group.throughput(Throughput::Elements(BATCH as u64));

    // A skewed read stream (Zipf 1.1 over 100,000 keys): hot keys take the
    // candidate-list path, the tail the cheap path.
    let (zipf, _) = zipf_stream(keys.len(), 1.1, BATCH, 6);
    // A uniform stream over the same keys: nearly every read is cold.
    let mut uniform_rng = SplitMix64(7);
    let uniform: Vec<u32> = (0..BATCH)
        .map(|_| (uniform_rng.next_u64() % keys.len() as u64) as u32)
        .collect();
    for (name, ranks) in [("zipf1.1", &zipf), ("uniform", &uniform)] {
        // Resolve each read's key and hash up front, as a point read has
        // them at hand: the loop then measures observe_hash, not a walk
        // over a 2.4 MB array of key headers.
        let stream: Vec<(&[u8], u64)> = ranks
            .iter()
            .map(|&r| (keys[r as usize].as_slice(), key_hashes[r as usize]))
            .collect();
        for k in [10usize, 100] {
            let mut hh = HeavyHitters::new(k, 0.001, 0.01).unwrap();
            let (warm, _) = zipf_stream(keys.len(), 1.1, 200_000, 8);
            for &r in &warm {
                hh.observe_hash(&keys[r as usize], key_hashes[r as usize]);
            }
            group.bench_function(format!("observe_hash/{name}/k{k}"), |b| {
                b.iter(|| {
                    for &(key, hash) in &stream {
                        hh.observe_hash(black_box(key), black_box(hash));
                    }
                })
            });
        }
    }
    let zipf_reads: Vec<(&[u8], u64)> = zipf
        .iter()
        .map(|&r| (keys[r as usize].as_slice(), key_hashes[r as usize]))
        .collect();
    group.bench_function("key_hash_11_byte_key", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for &(key, _) in &zipf_reads {
                sum = sum.wrapping_add(key_hash(black_box(key)));
            }
            sum
        })
    });
    group.finish();
}

criterion_group!(benches, hyperloglog, count_min, heavy_hitters);
criterion_main!(benches);
