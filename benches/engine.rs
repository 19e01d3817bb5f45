//! Point reads through the whole engine (memtable miss, then tables), the
//! cost of feeding the hot-key sketch on the get path, batches of reads by
//! `get` against `multi_get`, present gets with the block cache off, large
//! enough for every block, and too small for most (`engine_block_cache`),
//! and short range scans read forward against the same scans read backward
//! (`.rev()`).
//!
//! Run: `cargo bench --bench engine -- --warm-up-time 1 --measurement-time 3`
//! (`BATCH=n` sets the `engine_multi_get` batch size, default 64).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use sievedb::filter::BloomPolicy;
use sievedb::{Db, Options};

const KEYS: u64 = 200_000;

fn key(i: u64) -> Vec<u8> {
    format!("key{:013}", i).into_bytes()
}

fn load(track_hot_keys: bool) -> (tempfile::TempDir, Db) {
    load_with(Options {
        track_hot_keys,
        ..Options::default()
    })
}

/// Loads `KEYS` keys of 100-byte values (about 25 MB of data blocks) into
/// one compacted level under `opts` with a Bloom filter at 10 bits/key.
fn load_with(opts: Options) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        filter_policy: Arc::new(BloomPolicy::new(10.0)),
        ..opts
    };
    let db = Db::open(dir.path(), opts).expect("open");
    for i in 0..KEYS {
        db.put(key(i * 2), [7u8; 100]).expect("put");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    (dir, db)
}

/// `present/{label}` and `missing/{label}` rows: gets of loaded keys and of
/// the keys between them, visited with a stride so no two gets in a row
/// share a block.
fn present_and_missing(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: &str,
    db: &Db,
) {
    let mut i = 0u64;
    group.bench_function(format!("present/{label}"), |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            black_box(db.get(key(i * 2)).expect("get"))
        })
    });
    group.bench_function(format!("missing/{label}"), |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            black_box(db.get(key(i * 2 + 1)).expect("get"))
        })
    });
}

fn gets(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_get");
    for track in [false, true] {
        let (_dir, db) = load(track);
        let label = if track { "hot_keys_on" } else { "hot_keys_off" };
        present_and_missing(&mut group, label, &db);
    }
    group.finish();
}

/// Batches of `BATCH` keys read by a loop of `get`s and by one
/// `multi_get`, present and missing keys (the batches are built before
/// timing, so key formatting is not measured).
fn multi_gets(c: &mut Criterion) {
    let batch_len: u64 = std::env::var("BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    const BATCHES: u64 = 1024;
    let mut group = c.benchmark_group("engine_multi_get");
    group.throughput(criterion::Throughput::Elements(batch_len));
    let (_dir, db) = load(false);
    for (label, offset) in [("present", 0u64), ("missing", 1)] {
        let batches: Vec<Vec<Vec<u8>>> = (0..BATCHES)
            .map(|b| {
                (0..batch_len)
                    .map(|j| key(((b * batch_len + j) * 7919 % KEYS) * 2 + offset))
                    .collect()
            })
            .collect();
        let mut next = 0usize;
        group.bench_function(format!("{label}/get_loop/{batch_len}"), |b| {
            b.iter(|| {
                next = (next + 1) % batches.len();
                for k in &batches[next] {
                    black_box(db.get(k).expect("get"));
                }
            })
        });
        group.bench_function(format!("{label}/multi_get/{batch_len}"), |b| {
            b.iter(|| {
                next = (next + 1) % batches.len();
                black_box(db.multi_get(&batches[next]).expect("multi_get"))
            })
        });
    }
    group.finish();
}

/// Scans of `SCAN_LEN` keys from a random start, read forward and
/// backward (`.rev()` of the same range), over the compacted tables with a
/// memtable of recent overwrites in front of them.
fn scans(c: &mut Criterion) {
    const SCAN_LEN: u64 = 100;
    let mut group = c.benchmark_group("engine_scan");
    group.throughput(criterion::Throughput::Elements(SCAN_LEN));
    let (_dir, db) = load(false);
    for i in (0..KEYS).step_by(10) {
        db.put(key(i * 2), [8u8; 100]).expect("put");
    }
    let mut i = 0u64;
    let mut range = move || {
        i = (i + 7919) % (KEYS - SCAN_LEN);
        key(i * 2)..key((i + SCAN_LEN) * 2)
    };
    group.bench_function(format!("forward/{SCAN_LEN}"), |b| {
        b.iter(|| {
            let n = db.scan(range()).expect("scan").fold(0u64, |n, r| {
                black_box(r.expect("item"));
                n + 1
            });
            assert_eq!(n, SCAN_LEN);
            n
        })
    });
    group.bench_function(format!("reverse/{SCAN_LEN}"), |b| {
        b.iter(|| {
            let n = db.scan(range()).expect("scan").rev().fold(0u64, |n, r| {
                black_box(r.expect("item"));
                n + 1
            });
            assert_eq!(n, SCAN_LEN);
            n
        })
    });
    group.finish();
}

/// Present and missing gets with the block cache off (`cache_off`), large
/// enough to hold every data block (`cache_fits`, 64 MiB: after warm-up
/// every get hits) and far too small (`cache_1mib`: about 4% of the blocks
/// fit, so almost every get misses, verifies and copies its block in,
/// evicting another). Keys are visited with a stride, so no two gets in a
/// row share a block.
fn block_cache(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_block_cache");
    for (label, bytes) in [
        ("cache_off", 0usize),
        ("cache_fits", 64 << 20),
        ("cache_1mib", 1 << 20),
    ] {
        let (_dir, db) = load_with(Options {
            track_hot_keys: false,
            block_cache_bytes: bytes,
            ..Options::default()
        });
        present_and_missing(&mut group, label, &db);
    }
    group.finish();
}

criterion_group!(benches, gets, multi_gets, block_cache, scans);
criterion_main!(benches);
