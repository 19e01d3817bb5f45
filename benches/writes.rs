//! Puts through the whole write path (log append, memtable insert, with
//! flushes and compactions running in the background), from one thread and
//! from several at once: what group commit changes.
//!
//! * `write/put/{threads}`: time per put of a 16-byte key and a 100-byte
//!   value, `threads` threads putting at once (so with more threads the
//!   time per put is the inverse of the total throughput);
//! * `write/sync_put/{threads}`: the same with `Options::sync_writes` (each
//!   write fsynced before it returns; a group shares one fsync).
//!
//! Run: `cargo bench --bench writes -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sievedb::{Db, Options};

/// A key of 16 hex digits, spread over the key space.
fn key(i: u64) -> [u8; 16] {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    let mut out = [0u8; 16];
    for (d, byte) in out.iter_mut().enumerate() {
        *byte = b"0123456789abcdef"[((z >> (60 - 4 * d)) & 15) as usize];
    }
    out
}

/// `iters` puts split over `threads` threads; the wall time of them all.
fn put_from(db: &Db, next: &AtomicU64, threads: u64, iters: u64) -> Duration {
    let per_thread = iters.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    db.put(key(i), black_box([7u8; 100])).expect("put");
                }
            });
        }
    });
    start.elapsed()
}

fn writes(c: &mut Criterion) {
    let mut group = c.benchmark_group("write");
    for (name, sync_writes, thread_counts) in
        [("put", false, [1u64, 2, 4]), ("sync_put", true, [1, 2, 4])]
    {
        for threads in thread_counts {
            let dir = tempfile::tempdir().expect("tempdir");
            let db = Db::open(
                dir.path(),
                Options {
                    sync_writes,
                    ..Options::default()
                },
            )
            .expect("open");
            let next = AtomicU64::new(0);
            group.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| put_from(&db, &next, threads, iters))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, writes);
criterion_main!(benches);
