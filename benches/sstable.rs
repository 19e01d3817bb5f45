//! Point reads on a 1,000,000-entry table (16-byte keys, 100-byte values),
//! present and absent keys, per filter policy.
//!
//! Run: `cargo bench --bench sstable -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sievedb::filter::{key_hash, BloomPolicy, FilterPolicy, NoFilter};
use sievedb::fs::RealFs;
use sievedb::key::{ValueKind, MAX_SEQUENCE};
use sievedb::sstable::{Table, TableBuilder, TableOptions};
use sievedb::stats::{ReadCounters, Stats};

const ENTRIES: u64 = 1_000_000;
const PROBES: usize = 100_000;

/// The policies compared; one more line adds another.
fn policies() -> Vec<(&'static str, Arc<dyn FilterPolicy>)> {
    vec![
        ("bloom10", Arc::new(BloomPolicy::new(10.0))),
        ("nofilter", Arc::new(NoFilter)),
    ]
}

/// Present keys are the even numbers, absent ones the odd numbers between
/// them (inside the table's key range, so only the filter can skip them).
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(format!("{i:016}").as_bytes());
    k
}

fn build(dir: &std::path::Path, name: &str, policy: &Arc<dyn FilterPolicy>) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.sst"));
    let opts = TableOptions {
        filter_policy: Arc::clone(policy),
        ..TableOptions::default()
    };
    let mut b = TableBuilder::new(&RealFs, &path, 1, opts).expect("create table");
    let value = [0x5au8; 100];
    for i in 0..ENTRIES {
        b.add(&key(i * 2), i + 1, ValueKind::Put, &value)
            .expect("add");
    }
    b.finish().expect("finish");
    path
}

fn probes(odd: bool) -> Vec<([u8; 16], u64)> {
    let mut rng = StdRng::seed_from_u64(if odd { 2 } else { 1 });
    let mut idx: Vec<u64> = (0..ENTRIES - 1).collect();
    idx.shuffle(&mut rng);
    idx.truncate(PROBES);
    idx.into_iter()
        .map(|i| {
            let k = key(i * 2 + odd as u64);
            (k, key_hash(&k))
        })
        .collect()
}

fn bench_get(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let present = probes(false);
    let absent = probes(true);
    let mut group = c.benchmark_group("sstable_get");
    for (name, policy) in policies() {
        let path = build(dir.path(), name, &policy);
        let counters = Arc::new(ReadCounters::default());
        let table = Table::open(&path, 1, &policy, Arc::clone(&counters)).expect("open");

        // What the filter saves, in I/O: data blocks per absent get.
        for (k, h) in &absent {
            assert!(table.get(k, *h, MAX_SEQUENCE).expect("get").is_none());
        }
        let mut s = Stats::default();
        counters.snapshot_into(&mut s);
        println!(
            "{name}: {} absent gets, data blocks read per absent get = {:.4} \
             (filter false positives {}), filter {} bytes = {:.2} bits/key, {} data blocks",
            absent.len(),
            s.get_data_block_reads as f64 / absent.len() as f64,
            s.filter_false_positives,
            table.meta().filter_bytes,
            table.meta().filter_bytes as f64 * 8.0 / ENTRIES as f64,
            table.data_blocks(),
        );

        let mut i = 0usize;
        group.bench_function(format!("present/{name}"), |b| {
            b.iter(|| {
                let (k, h) = &present[i % present.len()];
                i += 1;
                black_box(table.get(k, *h, MAX_SEQUENCE).expect("get"))
            })
        });
        let mut i = 0usize;
        group.bench_function(format!("absent/{name}"), |b| {
            b.iter(|| {
                let (k, h) = &absent[i % absent.len()];
                i += 1;
                black_box(table.get(k, *h, MAX_SEQUENCE).expect("get"))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_get);
criterion_main!(benches);
