//! Point reads through the whole engine (memtable miss, then tables), and the
//! cost of feeding the hot-key sketch on the get path.
//!
//! Run: `cargo bench --bench engine -- --warm-up-time 1 --measurement-time 3`

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
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        filter_policy: Arc::new(BloomPolicy::new(10.0)),
        track_hot_keys,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).expect("open");
    for i in 0..KEYS {
        db.put(key(i * 2), [7u8; 100]).expect("put");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    (dir, db)
}

fn gets(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine_get");
    for track in [false, true] {
        let (_dir, db) = load(track);
        let label = if track { "hot_keys_on" } else { "hot_keys_off" };
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
    group.finish();
}

criterion_group!(benches, gets);
criterion_main!(benches);
