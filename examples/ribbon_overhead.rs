//! Measures the Ribbon build failure rate per seed against the slot overhead
//! (slots / keys - 1) at several band sizes, to choose
//! `sievedb::filter::ribbon::overhead_for_keys` and the shard size of
//! format 0x05 (built here explicitly: `RibbonPolicy` builds format 0x06 by
//! default).
//!
//! ```text
//! cargo run --release --example ribbon_overhead [trials_scale]
//! cargo run --release --example ribbon_overhead -- [trials_scale] 64
//! ```
//!
//! Each cell fixes a band of `slots` slots (a multiple of 128) and puts
//! `floor(slots / (1 + overhead))` keys in it, so the overhead is exact (no
//! rounding to whole blocks). Each trial draws a fresh set of random key
//! hashes and builds it as a single band (one shard), retrying seeds until
//! one solves; the failure rate per seed is failed seeds / seeds tried.
//! `trials_scale` (default 1.0) multiplies the number of trials per cell.
//!
//! With a second argument `64`, the same for format 0x06 (64-bit rows,
//! `sievedb::filter::ribbon64::overhead64_for_keys` and `SHARD_KEYS_64`),
//! measured the way the build runs: each trial builds 1,000,000 random key
//! hashes with shards of about `shard keys` keys at a fixed overhead
//! (about 1,000,000 / shard keys shards, whose key counts vary as they do
//! in real builds), and reports the failure rate per seed over all shards
//! of all trials, the bits per key, and the median build time of the
//! trials next to a blocked Bloom build of the same keys (10 bits per
//! key) in the same trial; and the elimination steps (slot visits) per
//! key of banding 200 shards of exactly `shard keys` keys one at a time,
//! counting the steps of failed seeds too. The Ribbon rate is that of 10 Bloom-equivalent
//! bits per key (about 0.95%), so bits/key must stay at most 6.96.

use clap::{Parser, ValueEnum};
use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat, RibbonLayout};
use sievedb::filter::ribbon64::{elimination_steps, Ribbon64Table, LANES_64};
use sievedb::filter::{BloomPolicy, FilterPolicy, RibbonPolicy};
use std::time::Instant;

/// Ribbon build failure rate per seed against the slot overhead.
#[derive(Parser)]
#[command(name = "ribbon_overhead")]
struct Args {
    /// Multiplies the number of trials per cell: a positive number.
    #[arg(value_name = "TRIALS_SCALE", default_value_t = 1.0, value_parser = positive_number)]
    trials_scale: f64,
    /// `64`: measure format 0x06 (64-bit rows) instead of format 0x05.
    #[arg(value_name = "FORMAT", value_enum)]
    format: Option<Format>,
}

/// The second argument: only `64`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Format 0x06, 64-bit rows.
    #[value(name = "64")]
    Rows64,
}

/// A finite number greater than 0.
fn positive_number(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("expected a positive number, got {text:?}")),
    }
}

fn main() {
    let args = Args::parse();
    let scale = args.trials_scale;
    if args.format == Some(Format::Rows64) {
        return rows64(scale);
    }
    let policy = RibbonPolicy::new(10.0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    // (slots, trials, overheads to try)
    let cells: [(usize, usize, &[f64]); 7] = [
        (1 << 10, 1000, &[0.01, 0.015, 0.02, 0.025, 0.03]),
        (1 << 11, 800, &[0.01, 0.015, 0.02, 0.025, 0.03]),
        (1 << 12, 600, &[0.01, 0.015, 0.02, 0.025, 0.03]),
        (1 << 13, 400, &[0.015, 0.02, 0.025, 0.03]),
        (1 << 15, 120, &[0.02, 0.025, 0.03, 0.035]),
        (1 << 17, 30, &[0.025, 0.03, 0.035, 0.04]),
        (1 << 20, 6, &[0.035, 0.04, 0.045, 0.05]),
    ];
    println!("| slots per band | overhead | keys | trials | seeds tried | failed | failure rate per seed |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for (slots, base_trials, overheads) in cells {
        let trials = ((base_trials as f64 * scale).round() as usize).max(1);
        for &overhead in overheads {
            let keys = (slots as f64 / (1.0 + overhead)).floor() as usize;
            let knobs = BuildKnobs {
                format: RibbonFormat::Rows128,
                overhead: Some(overhead),
                shard_keys: usize::MAX,
                ..BuildKnobs::default()
            };
            let (mut failed, mut tried) = (0u64, 0u64);
            for _ in 0..trials {
                let hashes: Vec<u64> = (0..keys).map(|_| rng.gen()).collect();
                let (bytes, outcome) = policy.build_with(&hashes, knobs);
                failed += outcome.failed_seeds as u64;
                tried += outcome.failed_seeds as u64 + outcome.shards as u64;
                let layout = RibbonLayout::parse(&bytes).expect("built a ribbon filter");
                assert_eq!(layout.num_slots(&bytes), slots as u64);
            }
            println!(
                "| {slots} | {:.1}% | {keys} | {trials} | {tried} | {failed} | {:.3} |",
                overhead * 100.0,
                failed as f64 / tried as f64
            );
        }
    }
}

/// The format 0x06 table (see the module doc).
fn rows64(scale: f64) {
    const KEYS: usize = 1_000_000;
    let policy = RibbonPolicy::new(10.0);
    let bloom = BloomPolicy::new(10.0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_0064);
    let trials = ((7.0 * scale).round() as usize).max(1);
    let shard_sizes = [512usize, 1024, 2048, 4096];
    let overheads = [0.015, 0.018, 0.02, 0.022, 0.025, 0.03];
    println!(
        "{KEYS} keys per trial, {trials} trials per cell, {LANES_64} lanes; build times are medians over the trials"
    );
    println!("| shard keys | overhead | shards | seeds tried | failed | failure rate per seed | bits/key | steps/key | 0x06 ns/key | bloom ns/key | ratio |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for shard_keys_64 in shard_sizes {
        for overhead in overheads {
            let knobs = BuildKnobs {
                format: RibbonFormat::Rows64,
                overhead: Some(overhead),
                shard_keys_64,
                ..BuildKnobs::default()
            };
            let (mut failed, mut tried, mut shards) = (0u64, 0u64, 0u64);
            let (mut ribbon_ns, mut bloom_ns) = (Vec::new(), Vec::new());
            let mut bits_per_key = 0.0;
            for _ in 0..trials {
                let hashes: Vec<u64> = (0..KEYS).map(|_| rng.gen()).collect();
                let start = Instant::now();
                let (bytes, outcome) = policy.build_with(&hashes, knobs);
                ribbon_ns.push(start.elapsed().as_nanos() as f64 / KEYS as f64);
                let start = Instant::now();
                std::hint::black_box(bloom.build(&hashes));
                bloom_ns.push(start.elapsed().as_nanos() as f64 / KEYS as f64);
                assert!(!outcome.fell_back_to_bloom, "{outcome:?}");
                assert!(Ribbon64Table::parse(&bytes).is_some());
                failed += outcome.failed_seeds as u64;
                tried += outcome.failed_seeds as u64 + outcome.shards as u64;
                shards = outcome.shards as u64;
                bits_per_key = bytes.len() as f64 * 8.0 / KEYS as f64;
            }
            let median = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (r, b) = (median(ribbon_ns), median(bloom_ns));
            let slots = (shard_keys_64 as f64 * (1.0 + overhead)).ceil() as usize;
            let mut steps = 0u64;
            for _ in 0..200 {
                let hashes: Vec<u64> = (0..shard_keys_64).map(|_| rng.gen()).collect();
                steps += elimination_steps(&hashes, slots, 256).0;
            }
            let steps_per_key = steps as f64 / (200 * shard_keys_64) as f64;
            println!(
                "| {shard_keys_64} | {:.1}% | {shards} | {tried} | {failed} | {:.3} | {bits_per_key:.3} | {steps_per_key:.1} | {r:.1} | {b:.1} | {:.2}x |",
                overhead * 100.0,
                failed as f64 / tried as f64,
                r / b
            );
        }
    }
}
