//! Build time of the Ribbon filter against the blocked Bloom filter at the
//! same false-positive rate (Ribbon at 10 Bloom-equivalent bits per key),
//! measured side by side: each round builds both, and the medians and their
//! ratio are printed.
//!
//! `cargo run --release --example ribbon_build -- [keys] [rounds]`
//! (defaults: 1,000,000 keys, 9 rounds).

use sievedb::filter::{key_hash, BloomPolicy, FilterPolicy, RibbonPolicy};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut number = |default: usize| -> usize {
        match args.next() {
            Some(text) => text.parse().unwrap_or_else(|_| {
                eprintln!("not a number: {text}");
                std::process::exit(2)
            }),
            None => default,
        }
    };
    let keys = number(1_000_000).max(1);
    let rounds = number(9).max(1);
    let hashes: Vec<u64> = (0..keys as u64)
        .map(|i| key_hash(&i.to_le_bytes()))
        .collect();
    let ribbon = RibbonPolicy::new(10.0);
    let bloom = BloomPolicy::new(10.0);
    let ns_per_key = |policy: &dyn FilterPolicy| {
        let start = Instant::now();
        black_box(policy.build(black_box(&hashes)));
        start.elapsed().as_nanos() as f64 / keys as f64
    };
    let (mut ribbon_ns, mut bloom_ns) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        ribbon_ns.push(ns_per_key(&ribbon));
        bloom_ns.push(ns_per_key(&bloom));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (r, b) = (median(ribbon_ns), median(bloom_ns));
    println!(
        "{keys} keys, median of {rounds} rounds: ribbon {r:.1} ns/key, bloom {b:.1} ns/key, ratio {:.2}x",
        r / b
    );
}
