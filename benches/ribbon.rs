//! Ribbon vs blocked Bloom vs xorf BinaryFuse8 at 1,000,000 keys: build
//! ns/key, query ns (present, absent), bits/key and measured false-positive
//! rate (printed once at start).
//!
//! ```text
//! cargo bench --bench ribbon -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Ribbon and Bloom target the same false-positive rate (the blocked Bloom
//! filter at 10 bits/key, about 0.954%); BinaryFuse8 is a static filter at
//! about 9 bits/key and 0.39%. `build_1M/ribbon_overhead_4.7pct` builds the
//! Ribbon filter with twice its usual slot overhead, to show the space/time
//! trade of banding.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon::BuildKnobs;
use sievedb::filter::{key_hash, BloomPolicy, Filter, FilterPolicy, RibbonPolicy};
use xorf::{BinaryFuse8, Filter as _};

const KEYS: usize = 1_000_000;
const QUERIES: usize = 10_000;

struct Setup {
    keys: Vec<u64>,
    present: Vec<u64>,
    absent: Vec<u64>,
}

fn setup() -> Setup {
    let keys: Vec<u64> = (0..KEYS as u64)
        .map(|i| key_hash(&i.to_le_bytes()))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let present = (0..QUERIES).map(|_| keys[rng.gen_range(0..KEYS)]).collect();
    let absent = (0..QUERIES as u64)
        .map(|i| key_hash(&(i + (1 << 40)).to_le_bytes()))
        .collect();
    Setup {
        keys,
        present,
        absent,
    }
}

fn fp_rate(contains: impl Fn(u64) -> bool) -> f64 {
    let probes = 1_000_000u64;
    let hits = (0..probes)
        .filter(|i| contains(key_hash(&(i + (1 << 50)).to_le_bytes())))
        .count();
    hits as f64 / probes as f64
}

fn report(s: &Setup) {
    let ribbon = Filter::decode(RibbonPolicy::new(10.0).build(&s.keys));
    let bloom = Filter::decode(BloomPolicy::new(10.0).build(&s.keys));
    let fuse = BinaryFuse8::try_from(&s.keys).expect("binary fuse build");
    let bits = |bytes: usize| bytes as f64 * 8.0 / KEYS as f64;
    eprintln!("filter          bits/key  measured FP rate (1,000,000 absent keys)");
    eprintln!(
        "ribbon          {:8.3}  {:.4}%",
        bits(ribbon.len_bytes()),
        100.0 * fp_rate(|h| ribbon.may_contain(h))
    );
    eprintln!(
        "blocked bloom   {:8.3}  {:.4}%",
        bits(bloom.len_bytes()),
        100.0 * fp_rate(|h| bloom.may_contain(h))
    );
    eprintln!(
        "binary fuse 8   {:8.3}  {:.4}%",
        bits(fuse.fingerprints.len()),
        100.0 * fp_rate(|h| fuse.contains(&h))
    );
}

fn benches(c: &mut Criterion) {
    let s = setup();
    report(&s);

    let mut build = c.benchmark_group("build_1M");
    build.throughput(Throughput::Elements(KEYS as u64));
    build.sample_size(10);
    build.bench_function("ribbon", |b| {
        b.iter(|| RibbonPolicy::new(10.0).build(black_box(&s.keys)))
    });
    // The same filter with twice the slot overhead (4.7%, what a single
    // 1,000,000-key band needs): shows how much build time the space costs.
    let roomy = BuildKnobs {
        overhead: Some(0.047),
        ..BuildKnobs::default()
    };
    build.bench_function("ribbon_overhead_4.7pct", |b| {
        b.iter(|| RibbonPolicy::new(10.0).build_with(black_box(&s.keys), roomy))
    });
    build.bench_function("bloom", |b| {
        b.iter(|| BloomPolicy::new(10.0).build(black_box(&s.keys)))
    });
    build.bench_function("binary_fuse8", |b| {
        b.iter_batched(
            || s.keys.clone(),
            |keys| BinaryFuse8::try_from(keys).expect("binary fuse build"),
            BatchSize::LargeInput,
        )
    });
    build.finish();

    let ribbon = Filter::decode(RibbonPolicy::new(10.0).build(&s.keys));
    let bloom = Filter::decode(BloomPolicy::new(10.0).build(&s.keys));
    let fuse = BinaryFuse8::try_from(&s.keys).expect("binary fuse build");
    for (name, hashes) in [("present", &s.present), ("absent", &s.absent)] {
        let mut query = c.benchmark_group(format!("query_1M_{name}"));
        query.throughput(Throughput::Elements(QUERIES as u64));
        query.bench_function("ribbon", |b| {
            b.iter(|| hashes.iter().filter(|&&h| ribbon.may_contain(h)).count())
        });
        query.bench_function("bloom", |b| {
            b.iter(|| hashes.iter().filter(|&&h| bloom.may_contain(h)).count())
        });
        query.bench_function("binary_fuse8", |b| {
            b.iter(|| hashes.iter().filter(|&&h| fuse.contains(&h)).count())
        });
        query.finish();
    }
}

criterion_group!(ribbon_benches, benches);
criterion_main!(ribbon_benches);
