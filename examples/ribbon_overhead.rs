//! Measures the Ribbon build failure rate per seed against the slot overhead
//! (slots / keys - 1) at several key counts, to choose
//! `sievedb::filter::ribbon::overhead_for_keys`.
//!
//! ```text
//! cargo run --release --example ribbon_overhead [trials_scale]
//! ```
//!
//! Each trial draws a fresh set of random key hashes and tries exactly one
//! seed; a failure is a build that falls back to Bloom. `trials_scale`
//! (default 1.0) multiplies the number of trials per cell.

use rand::{Rng, SeedableRng};
use sievedb::filter::RibbonPolicy;

fn main() {
    let scale: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let policy = RibbonPolicy::new(10.0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    // (keys, base trials, overheads to try)
    let cells: [(usize, usize, &[f64]); 5] = [
        (1_000, 400, &[0.01, 0.02, 0.03, 0.04]),
        (8_000, 400, &[0.01, 0.015, 0.02, 0.025, 0.03]),
        (130_000, 100, &[0.02, 0.025, 0.03, 0.035, 0.04]),
        (1_000_000, 40, &[0.025, 0.03, 0.035, 0.04, 0.045]),
        (4_000_000, 10, &[0.03, 0.035, 0.04, 0.045]),
    ];
    println!("| keys | overhead | trials | failed seeds | failure rate |");
    println!("|---:|---:|---:|---:|---:|");
    for (keys, base_trials, overheads) in cells {
        let trials = ((base_trials as f64 * scale).round() as usize).max(1);
        for &overhead in overheads {
            let mut failed = 0;
            for _ in 0..trials {
                let hashes: Vec<u64> = (0..keys).map(|_| rng.gen()).collect();
                let (_, outcome) = policy.build_with_overhead(&hashes, overhead, 1);
                if outcome.fell_back_to_bloom {
                    failed += 1;
                }
            }
            println!(
                "| {keys} | {:.1}% | {trials} | {failed} | {:.3} |",
                overhead * 100.0,
                failed as f64 / trials as f64
            );
        }
    }
}
