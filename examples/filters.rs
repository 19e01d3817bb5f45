//! The main job until the benchmark program exists: builds a filter under
//! each policy over 1,000,000 random keys and prints, per policy, its real
//! size in bits/key, probe count (result bits for Ribbon), false-positive rate measured over
//! 1,000,000 absent keys next to the theory, query time for present and
//! absent keys, and build time.
//!
//! Run: `cargo run --release --example filters`
//!
//! Times are medians of 5 passes over all 1,000,000 keys (queried in hash
//! order, so every query lands on a random line of the filter).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use sievedb::filter::bloom::{blocked_bloom_fp_rate, BloomLayout};
use sievedb::filter::ribbon::RibbonLayout;
use sievedb::filter::ribbon64::Ribbon64Layout;
use sievedb::filter::{key_hash, BloomPolicy, Filter, FilterPolicy, NoFilter, RibbonPolicy};

/// Each filter policy's size, false-positive rate, query and build time.
/// Takes no arguments.
#[derive(Parser)]
#[command(name = "filters")]
struct Args {}

const KEYS: usize = 1_000_000;
const PASSES: usize = 5;

/// What the table says about a built filter beyond what is measured: its
/// probe count and theoretical false-positive rate, read from its bytes.
type Describe = fn(bytes: &[u8], num_keys: usize) -> (String, f64);

fn describe_bloom(bytes: &[u8], num_keys: usize) -> (String, f64) {
    match BloomLayout::parse(bytes) {
        Some(layout) => {
            let bits_per_key = layout.num_lines() as f64 * 512.0 / num_keys as f64;
            (
                layout.probes().to_string(),
                blocked_bloom_fp_rate(bits_per_key, layout.probes()),
            )
        }
        None => ("?".into(), 1.0),
    }
}

/// A Ribbon filter has no probes; the "probes" column shows its result bits
/// per slot (upper shards in format 0x06, which `RibbonPolicy` builds;
/// upper blocks in format 0x05), the theory is the mix of its shards'
/// result bits. Small sets are built as Bloom filters.
fn describe_ribbon(bytes: &[u8], num_keys: usize) -> (String, f64) {
    if let Some(layout) = Ribbon64Layout::parse(bytes) {
        return (
            format!("{} result bits", layout.upper_columns()),
            layout.expected_fp_rate(),
        );
    }
    match RibbonLayout::parse(bytes) {
        Some(layout) => (
            format!("{} result bits", layout.upper_columns()),
            layout.expected_fp_rate(bytes),
        ),
        None => describe_bloom(bytes, num_keys),
    }
}

fn describe_none(_bytes: &[u8], _num_keys: usize) -> (String, f64) {
    ("-".into(), 1.0)
}

/// The policies compared, one line each.
fn policies() -> Vec<(&'static str, Arc<dyn FilterPolicy>, Describe)> {
    vec![
        ("bloom", Arc::new(BloomPolicy::new(6.0)), describe_bloom),
        ("bloom", Arc::new(BloomPolicy::new(10.0)), describe_bloom),
        ("bloom", Arc::new(BloomPolicy::new(16.0)), describe_bloom),
        ("ribbon", Arc::new(RibbonPolicy::new(10.0)), describe_ribbon),
        ("ribbon", Arc::new(RibbonPolicy::new(16.0)), describe_ribbon),
        ("none", Arc::new(NoFilter), describe_none),
    ]
}

/// Hashes of `n` random 16-byte keys whose first byte is `tag`, so that
/// sets with different tags are disjoint.
fn random_key_hashes(rng: &mut StdRng, n: usize, tag: u8) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let mut key = [0u8; 16];
            rng.fill_bytes(&mut key);
            key[0] = tag;
            key_hash(&key)
        })
        .collect()
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median ns per query over `PASSES` passes of `hashes`, and how many
/// answered "may contain" in one pass.
fn time_queries(filter: &Filter, hashes: &[u64]) -> (f64, usize) {
    let mut hits = 0;
    let times = (0..PASSES)
        .map(|_| {
            let start = Instant::now();
            hits = hashes
                .iter()
                .filter(|&&h| filter.may_contain(black_box(h)))
                .count();
            start.elapsed().as_nanos() as f64 / hashes.len() as f64
        })
        .collect();
    (median(times), hits)
}

fn main() {
    Args::parse();
    let mut rng = StdRng::seed_from_u64(0x5eed_f117e7);
    let present = random_key_hashes(&mut rng, KEYS, 0);
    let absent = random_key_hashes(&mut rng, KEYS, 1);

    println!("{KEYS} keys in the filter, {KEYS} absent keys queried; times are medians of {PASSES} passes.\n");
    println!(
        "| policy | bits/key | probes | measured FP rate | theory | ns/query present | ns/query absent | build ns/key |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (label, policy, describe) in policies() {
        let build_times = (0..PASSES)
            .map(|_| {
                let start = Instant::now();
                black_box(policy.build(black_box(&present)));
                start.elapsed().as_nanos() as f64 / KEYS as f64
            })
            .collect();
        let build_ns = median(build_times);
        let bytes = policy.build(&present);
        let bits_per_key = bytes.len() as f64 * 8.0 / KEYS as f64;
        let (probes, theory) = describe(&bytes, KEYS);
        let filter = Filter::for_policy(policy.name(), bytes, &policy);

        let (present_ns, true_positives) = time_queries(&filter, &present);
        assert_eq!(
            true_positives, KEYS,
            "{label}: false negatives (a bug, never expected)"
        );
        let (absent_ns, false_positives) = time_queries(&filter, &absent);
        let fp_rate = false_positives as f64 / KEYS as f64;
        println!(
            "| {label} | {bits_per_key:.2} | {probes} | {:.4}% | {:.4}% | {present_ns:.1} | {absent_ns:.1} | {build_ns:.1} |",
            fp_rate * 100.0,
            theory * 100.0,
        );
    }
}
