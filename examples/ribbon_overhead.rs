//! Measures the Ribbon build failure rate per seed against the slot overhead
//! (slots / keys - 1) at several band sizes, to choose
//! `sievedb::filter::ribbon::overhead_for_keys` and the shard size.
//!
//! ```text
//! cargo run --release --example ribbon_overhead [trials_scale]
//! ```
//!
//! Each cell fixes a band of `slots` slots (a multiple of 128) and puts
//! `floor(slots / (1 + overhead))` keys in it, so the overhead is exact (no
//! rounding to whole blocks). Each trial draws a fresh set of random key
//! hashes and builds it as a single band (one shard), retrying seeds until
//! one solves; the failure rate per seed is failed seeds / seeds tried.
//! `trials_scale` (default 1.0) multiplies the number of trials per cell.

use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon::{BuildKnobs, RibbonLayout};
use sievedb::filter::RibbonPolicy;

fn main() {
    let scale: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
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
