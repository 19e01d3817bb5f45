//! Build time of the Ribbon filter, formats 0x05 (128-bit rows) and 0x06
//! (64-bit rows), against the blocked Bloom filter at the same
//! false-positive rate (Ribbon at 10 Bloom-equivalent bits per key),
//! measured side by side: each round builds all three (format 0x06 twice:
//! also with the baseline copy of its banding loop, which CPUs without
//! BMI1 and BMI2 run, `BuildKnobs::band_baseline`), and the medians,
//! their ratios to Bloom, the median and quartiles of the per-round ratios
//! (each Ribbon build against the Bloom build of its own round: steadier
//! than a ratio of medians on a machine whose speed drifts) and the bits
//! per key are printed.
//!
//! `cargo run --release --example ribbon_build -- [keys] [rounds]
//! [shard_keys_64] [lanes_64] [overhead_64]` (defaults: 1,000,000 keys, 9
//! rounds, and the format 0x06 defaults: `SHARD_KEYS_64`, `LANES_64` and
//! `overhead64_for_keys`).

use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat};
use sievedb::filter::ribbon64::{LANES_64, SHARD_KEYS_64};
use sievedb::filter::{key_hash, BloomPolicy, FilterPolicy, RibbonPolicy};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut number = |default: f64| -> f64 {
        match args.next() {
            Some(text) => text.parse().unwrap_or_else(|_| {
                eprintln!("not a number: {text}");
                std::process::exit(2)
            }),
            None => default,
        }
    };
    let keys = (number(1_000_000.0) as usize).max(1);
    let rounds = (number(9.0) as usize).max(1);
    let shard_keys_64 = number(SHARD_KEYS_64 as f64) as usize;
    let lanes_64 = number(LANES_64 as f64) as usize;
    let overhead_64 = number(f64::NAN);
    let hashes: Vec<u64> = (0..keys as u64)
        .map(|i| key_hash(&i.to_le_bytes()))
        .collect();
    let ribbon = RibbonPolicy::new(10.0);
    let bloom = BloomPolicy::new(10.0);
    // Format 0x05 is only built when asked for; the policy's default is
    // format 0x06, built with the knobs given on the command line.
    let rows128 = BuildKnobs {
        format: RibbonFormat::Rows128,
        ..BuildKnobs::default()
    };
    let rows64 = BuildKnobs {
        format: RibbonFormat::Rows64,
        shard_keys_64,
        lanes_64,
        overhead: (!overhead_64.is_nan()).then_some(overhead_64),
        ..BuildKnobs::default()
    };
    let time = |build: &dyn Fn() -> Vec<u8>| {
        let start = Instant::now();
        let bytes = black_box(build());
        (start.elapsed().as_nanos() as f64 / keys as f64, bytes.len())
    };
    // Format 0x06 banded by the baseline copy of the lanes' loop, which
    // CPUs without BMI1 and BMI2 run (`BuildKnobs::band_baseline`).
    let rows64_baseline = BuildKnobs {
        band_baseline: true,
        ..rows64
    };
    let (mut r128, mut r64, mut r64_base, mut b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut sizes = [0usize; 3];
    let mut failed_64 = 0u64;
    let mut shards_64 = 0u64;
    for _ in 0..rounds {
        let (ns, len) = time(&|| ribbon.build_with(black_box(&hashes), rows128).0);
        r128.push(ns);
        sizes[0] = len;
        let (ns, len) = time(&|| {
            let (bytes, outcome) = ribbon.build_with(black_box(&hashes), rows64);
            assert!(
                !outcome.fell_back_to_bloom,
                "format 0x06 fell back to Bloom"
            );
            black_box(outcome.failed_seeds);
            bytes
        });
        r64.push(ns);
        sizes[1] = len;
        let (ns, _) = time(&|| ribbon.build_with(black_box(&hashes), rows64_baseline).0);
        r64_base.push(ns);
        let (ns, len) = time(&|| bloom.build(black_box(&hashes)));
        b.push(ns);
        sizes[2] = len;
    }
    let (_, outcome) = ribbon.build_with(&hashes, rows64);
    failed_64 += outcome.failed_seeds as u64;
    shards_64 += outcome.shards as u64;
    let quantile = |v: &[f64], q: f64| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    // "median [q1, q3]" of the per-round ratios of `r` to `to`.
    let per_round_to = |r: &[f64], to: &[f64]| {
        let ratios: Vec<f64> = r.iter().zip(to).map(|(x, y)| x / y).collect();
        format!(
            "{:.2}x [{:.2}, {:.2}]",
            quantile(&ratios, 0.5),
            quantile(&ratios, 0.25),
            quantile(&ratios, 0.75)
        )
    };
    let per_round = |r: &[f64]| per_round_to(r, &b);
    let (ratio128, ratio64) = (per_round(&r128), per_round(&r64));
    let copy_ratio = per_round_to(&r64, &r64_base);
    let r64_base = quantile(&r64_base, 0.5);
    let median = |v: Vec<f64>| quantile(&v, 0.5);
    let (r128, r64, b) = (median(r128), median(r64), median(b));
    let bpk = |len: usize| len as f64 * 8.0 / keys as f64;
    println!(
        "{keys} keys, median of {rounds} rounds (0x06: {shard_keys_64} keys/shard, {lanes_64} lanes, \
         overhead {}):",
        if overhead_64.is_nan() {
            "table".to_string()
        } else {
            format!("{:.2}%", overhead_64 * 100.0)
        }
    );
    println!(
        "  ribbon 0x05 {r128:.1} ns/key ({:.2}x bloom; per round {ratio128}; {:.3} bits/key)",
        r128 / b,
        bpk(sizes[0])
    );
    println!(
        "  ribbon 0x06 {r64:.1} ns/key ({:.2}x bloom; per round {ratio64}; {:.3} bits/key, {failed_64} failed seeds over {shards_64} shards: {:.3} per seed)",
        r64 / b,
        bpk(sizes[1]),
        failed_64 as f64 / (failed_64 + shards_64).max(1) as f64
    );
    println!(
        "  ribbon 0x06, baseline band copy {r64_base:.1} ns/key (the default copy's time / this one's, per round: {copy_ratio})"
    );
    println!(
        "  bloom       {b:.1} ns/key ({:.3} bits/key)",
        bpk(sizes[2])
    );
}
