//! Measures the accuracy of the key sketches and prints the markdown tables
//! of `docs/statistics.md`:
//!
//! * HyperLogLog: RMS and mean relative error over 20 seeds, per precision
//!   and distinct count, and the mean error of the sketch against the
//!   classic estimator around `2.5 m`, where the classic one is biased;
//! * count-min: overcount of plain vs conservative update on a Zipf stream;
//! * heavy hitters: recall of the true top k.
//!
//! Run with `cargo run --release --example sketch_accuracy`.

#[path = "../tests/support/streams.rs"]
mod streams;

use clap::Parser;
use sievedb::filter::key_hash;
use sievedb::sketch::{CountMinSketch, HeavyHitters, HyperLogLog, UpdateMode};
use streams::{rank_key, zipf_stream, SplitMix64};

/// Accuracy of the key sketches (HyperLogLog, count-min, heavy hitters).
/// Takes no arguments.
#[derive(Parser)]
#[command(name = "sketch_accuracy")]
struct Args {}

const SEEDS: u64 = 20;

fn main() {
    Args::parse();
    hll_table();
    hll_mid_range_table();
    cms_table();
    heavy_hitter_table();
}

fn hll_table() {
    let checkpoints: [u64; 8] = [
        100, 1_000, 10_000, 40_000, 50_000, 100_000, 1_000_000, 5_000_000,
    ];
    println!("### HyperLogLog relative error over {SEEDS} seeds (RMS / mean, %)\n");
    print!("| precision | bytes (dense) | 1.04/sqrt(m) |");
    for n in checkpoints {
        print!(" n = {n} |");
    }
    println!();
    println!("|---|---|---|{}", "---|".repeat(checkpoints.len()));
    for precision in [10u8, 12, 14, 16] {
        let mut squared = vec![0.0f64; checkpoints.len()];
        let mut sum = vec![0.0f64; checkpoints.len()];
        for seed in 0..SEEDS {
            let mut hll = HyperLogLog::try_new(precision).expect("valid precision");
            let mut stream = SplitMix64(seed.wrapping_mul(0x5851_f42d_4c95_7f2d) ^ 0xdead_beef);
            let mut inserted = 0u64;
            for (i, &n) in checkpoints.iter().enumerate() {
                while inserted < n {
                    hll.insert_hash(stream.next_key_hash());
                    inserted += 1;
                }
                let error = (hll.estimate() as f64 - n as f64) / n as f64;
                squared[i] += error * error;
                sum[i] += error;
            }
        }
        let m = (1u64 << precision) as f64;
        print!(
            "| {precision} | {} | {:.2} |",
            (6u64 << precision) / 8,
            104.0 / m.sqrt()
        );
        for i in 0..checkpoints.len() {
            let rms = (squared[i] / SEEDS as f64).sqrt() * 100.0;
            let mean = sum[i] / SEEDS as f64 * 100.0;
            print!(" {rms:.2} / {mean:+.2} |");
        }
        println!();
    }
    println!();
}

/// The classic HyperLogLog estimate (Flajolet et al. 2007): the raw
/// harmonic-mean estimate, replaced by linear counting below `2.5 m` while a
/// register is still empty. Computed from plain byte registers filled with
/// the same index/rank rule, for comparison only.
fn classic_estimate(registers: &[u8]) -> f64 {
    let m = registers.len() as f64;
    let harmonic: f64 = registers.iter().map(|&r| 2f64.powi(-(r as i32))).sum();
    let raw = 0.7213 / (1.0 + 1.079 / m) * m * m / harmonic;
    let empty = registers.iter().filter(|&&r| r == 0).count();
    if raw <= 2.5 * m && empty > 0 {
        m * (m / empty as f64).ln()
    } else {
        raw
    }
}

fn hll_mid_range_table() {
    let precision = 14u32;
    let m = 1usize << precision;
    let checkpoints: [u64; 9] = [
        20_000, 30_000, 38_000, 40_000, 42_500, 45_000, 50_000, 60_000, 80_000,
    ];
    let mut sketch_sum = vec![0.0f64; checkpoints.len()];
    let mut classic_sum = vec![0.0f64; checkpoints.len()];
    for seed in 0..SEEDS {
        let mut hll = HyperLogLog::try_new(precision as u8).expect("valid precision");
        let mut registers = vec![0u8; m];
        let mut stream = SplitMix64(seed.wrapping_mul(0x5851_f42d_4c95_7f2d) ^ 0xdead_beef);
        let mut inserted = 0u64;
        for (i, &n) in checkpoints.iter().enumerate() {
            while inserted < n {
                let hash = stream.next_key_hash();
                hll.insert_hash(hash);
                let index = (hash >> (64 - precision)) as usize;
                let rank = ((hash << precision).leading_zeros() + 1).min(65 - precision) as u8;
                registers[index] = registers[index].max(rank);
                inserted += 1;
            }
            sketch_sum[i] += (hll.estimate() as f64 - n as f64) / n as f64;
            classic_sum[i] += (classic_estimate(&registers) - n as f64) / n as f64;
        }
    }
    println!(
        "### HyperLogLog mean relative error around 2.5 m = 40,960 (p = 14, {SEEDS} seeds, %)\n"
    );
    print!("| estimator |");
    for n in checkpoints {
        print!(" n = {n} |");
    }
    println!();
    println!("|---|{}", "---|".repeat(checkpoints.len()));
    for (name, sums) in [
        ("sievedb (Ertl)", &sketch_sum),
        ("classic (raw + linear counting)", &classic_sum),
    ] {
        print!("| {name} |");
        for sum in sums.iter() {
            print!(" {:+.2} |", sum / SEEDS as f64 * 100.0);
        }
        println!();
    }
    println!();
}

fn cms_table() {
    let (keys, events) = (100_000usize, 1_000_000usize);
    let (stream, counts) = zipf_stream(keys, 1.1, events, 1);
    let key_hashes: Vec<u64> = (0..keys).map(|r| key_hash(&rank_key(r))).collect();
    println!(
        "### Count-min overcount, Zipf(1.1), {events} events over {keys} keys, delta = 0.01\n"
    );
    println!("| epsilon | width x depth | mode | mean overcount | p99 overcount | max overcount | queries over eps*N | underestimates |");
    println!("|---|---|---|---|---|---|---|---|");
    for epsilon in [0.01, 0.001, 0.0001] {
        for mode in [UpdateMode::Plain, UpdateMode::Conservative] {
            let mut sketch = CountMinSketch::with_error(epsilon, 0.01)
                .expect("valid error bounds")
                .with_mode(mode);
            for &rank in &stream {
                sketch.add_hash(key_hashes[rank as usize], 1);
            }
            let mut over: Vec<i128> = (0..keys)
                .map(|r| sketch.estimate_hash(key_hashes[r]) as i128 - counts[r] as i128)
                .collect();
            let under = over.iter().filter(|&&o| o < 0).count();
            let bound = epsilon * events as f64;
            let beyond = over.iter().filter(|&&o| o as f64 > bound).count();
            let mean = over.iter().sum::<i128>() as f64 / keys as f64;
            over.sort_unstable();
            println!(
                "| {epsilon} | {} x {} | {mode:?} | {mean:.2} | {} | {} | {:.3}% | {under} |",
                sketch.width(),
                sketch.depth(),
                over[keys * 99 / 100],
                over[keys - 1],
                beyond as f64 / keys as f64 * 100.0
            );
        }
    }
    println!();
}

fn heavy_hitter_table() {
    let (keys, events) = (100_000usize, 1_000_000usize);
    println!("### Heavy hitters: recall of the true top k, {events} events over {keys} keys, delta = 0.01\n");
    println!("| Zipf s | k | epsilon | sketch bytes | recall | exact order |");
    println!("|---|---|---|---|---|---|");
    let names: Vec<Vec<u8>> = (0..keys).map(rank_key).collect();
    let hashes: Vec<u64> = names.iter().map(|k| key_hash(k)).collect();
    for s in [0.9, 1.1] {
        let (stream, counts) = zipf_stream(keys, s, events, 2);
        let mut order: Vec<usize> = (0..keys).collect();
        order.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
        for k in [10usize, 100] {
            for epsilon in [0.001, 0.0001] {
                let mut hh = HeavyHitters::new(k, epsilon, 0.01).expect("valid parameters");
                for &rank in &stream {
                    hh.observe_hash(&names[rank as usize], hashes[rank as usize]);
                }
                let top = hh.top();
                let truth: std::collections::HashSet<&[u8]> =
                    order[..k].iter().map(|&r| names[r].as_slice()).collect();
                let hits = top
                    .iter()
                    .filter(|(key, _)| truth.contains(key.as_slice()))
                    .count();
                let exact = top
                    .iter()
                    .zip(&order[..k])
                    .all(|((key, _), &r)| key.as_slice() == names[r].as_slice());
                println!(
                    "| {s} | {k} | {epsilon} | {} | {hits}/{k} | {} |",
                    hh.len_bytes(),
                    if exact { "yes" } else { "no" }
                );
            }
        }
    }
    println!();
}
