//! Filter build and query speed, side by side with other Rust filters at the
//! same memory (10 bits/key) or the same false-positive rate.
//!
//! Every family gets the same precomputed XXH3-64 key hashes. Build is timed
//! per key (`build/<family>/<n>`); queries are timed per batch of 1,000
//! hashes (`query_present/...`, `query_absent/...`, throughput in
//! queries/s) taken from a long array walked in order, so at 1,000,000 keys
//! the lines touched are cold and the filter (1.25 MB) is larger than the
//! per-core L2 cache. sievedb's Bloom and Ribbon filters also get
//! `query_batch_present/...` and `query_batch_absent/...` rows: the same
//! batches answered by one `Filter::may_contain_batch` call (a different
//! API from the single queries, which the other families are measured on).
//!
//! The Ribbon filter (`RibbonPolicy::new(10.0)`, format 0x06; `ribbon128` is
//! the same policy building the previous format 0x05) aims at the
//! false-positive rate of the blocked Bloom filter at 10 bits/key (about
//! 0.955%) in about 7 bits/key; xorf's `BinaryFuse8` is a static filter with a fixed rate
//! (about 0.39%) at about 9 bits/key. Before the timings, the benchmark
//! prints the size of the filters whose size is not the 10 bits/key they
//! are given (the Ribbon formats, `BinaryFuse8`) and every filter's
//! false-positive rate measured over the 1,000,000 absent hashes, at every
//! size.
//!
//! One function per filter family; a new family is one more function that
//! calls [`family`], plus one line in [`all`].
//!
//! Run: `cargo bench --bench filters -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat};
use sievedb::filter::ribbon64::Ribbon64Layout;
use sievedb::filter::{BloomPolicy, Filter, FilterPolicy, RibbonPolicy};
use xorf::Filter as _;

#[path = "support/filter_peers.rs"]
mod filter_peers;
use filter_peers::{build_fastbloom, build_sbbf, BITS_PER_KEY};
#[path = "support/key_hashes.rs"]
mod key_hashes;
use key_hashes::{build_key_sets, key_hashes};

const SIZES: [usize; 2] = [10_000, 1_000_000];
const BATCH: usize = 1_000;

/// The hashes every family is built from and queried with.
struct Workload {
    /// Hashes of the `n` keys in the filter.
    present: Vec<u64>,
    /// Key sets of `n` hashes each that the build rows cycle through
    /// (`present` first; see `key_hashes::BUILD_KEYS_CYCLED`).
    build_sets: Vec<Vec<u64>>,
    /// Hashes of 1,000,000 keys not in the filter.
    absent: Vec<u64>,
}

impl Workload {
    fn new(n: usize) -> Workload {
        let hashes = key_hashes;
        let present = hashes(1, n);
        let build_sets = build_key_sets(&present);
        Workload {
            present,
            build_sets,
            absent: hashes(2, 1_000_000),
        }
    }
}

/// Benchmarks one filter family: `build` makes a filter from key hashes,
/// `query` asks it about one hash.
fn family<F>(
    c: &mut Criterion,
    name: &str,
    w: &Workload,
    build: impl Fn(&[u64]) -> F,
    query: impl Fn(&F, u64) -> bool,
) {
    let n = w.present.len();
    let mut group = c.benchmark_group("build");
    group.throughput(Throughput::Elements(n as u64));
    if n >= 1_000_000 {
        group.sample_size(20);
    }
    let mut next_set = 0usize;
    group.bench_function(BenchmarkId::new(name, n), |b| {
        b.iter(|| {
            let set = &w.build_sets[next_set % w.build_sets.len()];
            next_set += 1;
            build(black_box(set))
        })
    });
    group.finish();

    let filter = build(&w.present);
    assert!(
        w.present.iter().all(|&h| query(&filter, h)),
        "{name}: false negative"
    );
    let false_positives = w.absent.iter().filter(|&&h| query(&filter, h)).count();
    eprintln!(
        "{name}/{n}: measured FP rate {:.4}% over {} absent hashes",
        100.0 * false_positives as f64 / w.absent.len() as f64,
        w.absent.len()
    );
    for (op, hashes) in [("query_present", &w.present), ("query_absent", &w.absent)] {
        let mut group = c.benchmark_group(op);
        group.throughput(Throughput::Elements(BATCH as u64));
        let mut pos = 0usize;
        group.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter(|| {
                let batch = next_batch(&mut pos, hashes);
                let mut hits = 0usize;
                for &h in batch {
                    hits += usize::from(query(&filter, black_box(h)));
                }
                hits
            })
        });
        group.finish();
    }
}

/// The next `BATCH` hashes of `hashes` from `pos`, wrapping to the start
/// when fewer are left.
fn next_batch<'a>(pos: &mut usize, hashes: &'a [u64]) -> &'a [u64] {
    if *pos + BATCH > hashes.len() {
        *pos = 0;
    }
    let batch = &hashes[*pos..*pos + BATCH];
    *pos += BATCH;
    batch
}

/// Batched queries of a decoded [`Filter`] (`query_batch_present/...`,
/// `query_batch_absent/...`): the same hashes as the single-query rows,
/// 1,000 per iteration, answered by one `Filter::may_contain_batch` call
/// into a reused buffer. Same throughput unit (queries/s).
fn batch_rows(c: &mut Criterion, name: &str, w: &Workload, filter: &Filter) {
    let n = w.present.len();
    let mut out = vec![false; BATCH];
    filter
        .may_contain_batch(&w.present[..BATCH.min(n)], &mut out[..BATCH.min(n)])
        .expect("lengths match");
    assert!(
        out[..BATCH.min(n)].iter().all(|&a| a),
        "{name}: false negative in a batch"
    );
    for (op, hashes) in [
        ("query_batch_present", &w.present),
        ("query_batch_absent", &w.absent),
    ] {
        let mut group = c.benchmark_group(op);
        group.throughput(Throughput::Elements(BATCH as u64));
        let mut pos = 0usize;
        group.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter(|| {
                let batch = next_batch(&mut pos, hashes);
                filter
                    .may_contain_batch(black_box(batch), &mut out)
                    .expect("lengths match");
                out.iter().filter(|&&a| a).count()
            })
        });
        group.finish();
    }
}

/// sievedb's blocked Bloom filter, queried as a table does: decoded once
/// into a [`Filter`], then `Filter::may_contain`.
fn bloom(c: &mut Criterion, w: &Workload) {
    let policy = BloomPolicy::new(BITS_PER_KEY as f64);
    family(
        c,
        "bloom",
        w,
        |hashes| Filter::decode(policy.build(hashes)),
        |filter, h| filter.may_contain(h),
    );
    batch_rows(c, "bloom", w, &Filter::decode(policy.build(&w.present)));
}

/// The same filter forced onto another query path: `avx2` (what CPUs
/// without AVX-512 run; skipped if this CPU lacks AVX2) and `portable` (no
/// SIMD).
fn bloom_on_path(c: &mut Criterion, w: &Workload, path: &str) {
    let policy = BloomPolicy::new(BITS_PER_KEY as f64);
    if Filter::decode(policy.build(&w.present[..1]))
        .with_bloom_path(path)
        .is_none()
    {
        eprintln!("bloom_{path}: this CPU cannot run the path, skipped");
        return;
    }
    family(
        c,
        &format!("bloom_{path}"),
        w,
        |hashes| {
            Filter::decode(policy.build(hashes))
                .with_bloom_path(path)
                .expect("checked above")
        },
        |filter, h| filter.may_contain(h),
    );
}

/// sievedb's Ribbon filter at the Bloom filter's false-positive rate, as
/// `RibbonPolicy` builds it (format 0x06, 64-bit rows), decoded once into a
/// [`Filter`] like the Bloom filter above.
fn ribbon(c: &mut Criterion, w: &Workload) {
    let policy = RibbonPolicy::new(BITS_PER_KEY as f64);
    let bytes = policy.build(&w.present);
    eprintln!(
        "ribbon/{}: {:.3} bits/key",
        w.present.len(),
        bytes.len() as f64 * 8.0 / w.present.len() as f64
    );
    family(
        c,
        "ribbon",
        w,
        |hashes| Filter::decode(policy.build(hashes)),
        |filter, h| filter.may_contain(h),
    );
    batch_rows(c, "ribbon", w, &Filter::decode(bytes));
}

/// The same policy building the previous format, 0x05 (128-bit rows,
/// shards of about 8,192 keys, two column counts inside each shard), which
/// is still read and can be built on request: the rows that show what
/// format 0x06 changed.
fn ribbon128(c: &mut Criterion, w: &Workload) {
    let policy = RibbonPolicy::new(BITS_PER_KEY as f64);
    let knobs = BuildKnobs {
        format: RibbonFormat::Rows128,
        ..BuildKnobs::default()
    };
    let bytes = policy.build_with(&w.present, knobs).0;
    eprintln!(
        "ribbon128/{}: {:.3} bits/key",
        w.present.len(),
        bytes.len() as f64 * 8.0 / w.present.len() as f64
    );
    family(
        c,
        "ribbon128",
        w,
        |hashes| Filter::decode(policy.build_with(hashes, knobs).0),
        |filter, h| filter.may_contain(h),
    );
}

/// The default Ribbon filter on the portable query path (parity by
/// multiply, no SIMD), which CPUs without POPCNT take.
fn ribbon_portable(c: &mut Criterion, w: &Workload) {
    let policy = RibbonPolicy::new(BITS_PER_KEY as f64);
    family(
        c,
        "ribbon_portable",
        w,
        |hashes| {
            let bytes = policy.build(hashes);
            let layout = Ribbon64Layout::parse(&bytes).expect("freshly built format 0x06");
            (layout, bytes)
        },
        |(layout, bytes), h| layout.may_contain_portable(bytes, h),
    );
}

/// xorf's `BinaryFuse8`: a static filter, 8-bit fingerprints (about 0.39%
/// false positives at about 9 bits/key), three lookups per query.
fn binary_fuse8(c: &mut Criterion, w: &Workload) {
    let fuse = xorf::BinaryFuse8::try_from(w.present.as_slice()).expect("binary fuse build");
    eprintln!(
        "binary_fuse8/{}: {:.3} bits/key",
        w.present.len(),
        fuse.fingerprints.len() as f64 * 8.0 / w.present.len() as f64
    );
    family(
        c,
        "binary_fuse8",
        w,
        |hashes| xorf::BinaryFuse8::try_from(hashes).expect("binary fuse build"),
        |filter, h| filter.contains(&h),
    );
}

/// Parquet's split-block Bloom filter (`sbbf-rs-safe`): 32-byte blocks,
/// 8 probes with SIMD.
fn sbbf(c: &mut Criterion, w: &Workload) {
    family(c, "sbbf", w, build_sbbf, |filter, h| {
        filter.contains_hash(h)
    });
}

/// `fastbloom` 0.9, its default `BloomFilter`, at the same number of bits.
fn fastbloom(c: &mut Criterion, w: &Workload) {
    family(c, "fastbloom", w, build_fastbloom, |filter, h| {
        filter.contains(&h)
    });
}

fn all(c: &mut Criterion) {
    // Families run one after another at each size, so that their numbers
    // are measured close together in time on a noisy machine.
    for n in SIZES {
        let w = Workload::new(n);
        bloom(c, &w);
        bloom_on_path(c, &w, "avx2");
        bloom_on_path(c, &w, "portable");
        ribbon(c, &w);
        ribbon128(c, &w);
        ribbon_portable(c, &w);
        binary_fuse8(c, &w);
        sbbf(c, &w);
        fastbloom(c, &w);
    }
}

criterion_group!(benches, all);
criterion_main!(benches);
