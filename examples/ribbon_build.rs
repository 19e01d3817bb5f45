//! Build time of the Ribbon filter, formats 0x05 (128-bit rows) and 0x06
//! (64-bit rows), against the blocked Bloom filter at the same
//! false-positive rate (Ribbon at 10 Bloom-equivalent bits per key),
//! measured side by side: each round builds all three (format 0x06 twice:
//! also with the baseline copy of its banding loop, which CPUs without
//! BMI1 and BMI2 run, `BuildKnobs::band_baseline`; and twice more with its
//! rows prepared one key at a time and eight at a time, the two
//! `BuildKnobs::rows` choices `RowPrep::Detect` picks between by CPU), and
//! the medians,
//! their ratios to Bloom, the median and quartiles of the per-round ratios
//! (each Ribbon build against the Bloom build of its own round: steadier
//! than a ratio of medians on a machine whose speed drifts) and the bits
//! per key are printed.
//!
//! `cargo run --release --example ribbon_build -- [keys] [rounds]
//! [shard_keys_64] [lanes_64] [overhead_64]` (defaults: 1,000,000 keys, 9
//! rounds, and the format 0x06 defaults: `SHARD_KEYS_64`, `LANES_64` and
//! `overhead64_for_keys`).

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat, RowPrep, MIN_SLOTS};
use sievedb::filter::ribbon64::{LANES_64, SHARD_KEYS_64};
use sievedb::filter::{key_hash, BloomPolicy, FilterPolicy, RibbonPolicy};
use std::hint::black_box;
use std::time::Instant;

/// Build time of the Ribbon filter (formats 0x05 and 0x06) against the
/// blocked Bloom filter at the same false-positive rate.
#[derive(Parser)]
#[command(name = "ribbon_build")]
struct Args {
    /// Keys to build over (at least 1,024: fewer make a Ribbon build fall
    /// back to Bloom).
    #[arg(value_name = "KEYS", default_value_t = 1_000_000,
          value_parser = RangedU64ValueParser::<usize>::new().range(MIN_SLOTS as u64..))]
    keys: usize,
    /// Timing rounds (at least 1).
    #[arg(value_name = "ROUNDS", default_value_t = 9,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    rounds: usize,
    /// Format 0x06: keys per shard to aim at, 1 to 60,000
    /// (`BuildKnobs::shard_keys_64`).
    #[arg(value_name = "SHARD_KEYS_64", default_value_t = SHARD_KEYS_64,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=60_000))]
    shard_keys_64: usize,
    /// Format 0x06: shards banded at once, 1 to 4 (`BuildKnobs::lanes_64`).
    #[arg(value_name = "LANES_64", default_value_t = LANES_64,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=4))]
    lanes_64: usize,
    /// Format 0x06: fixed slot overhead (slots / keys - 1) of every shard,
    /// from 0 to 10 [default: `overhead64_for_keys`].
    #[arg(value_name = "OVERHEAD_64", value_parser = overhead)]
    overhead_64: Option<f64>,
}

/// A slot overhead from 0 to 10 (`BuildKnobs::overhead` clamps to that).
fn overhead(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if (0.0..=10.0).contains(&x) => Ok(x),
        _ => Err(format!("expected a number from 0 to 10, got {text:?}")),
    }
}

fn main() {
    let args = Args::parse();
    let (keys, rounds) = (args.keys, args.rounds);
    let (shard_keys_64, lanes_64) = (args.shard_keys_64, args.lanes_64);
    let overhead_64 = args.overhead_64.unwrap_or(f64::NAN);
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
    // Format 0x06 with its rows prepared one key at a time (CPUs without
    // AVX-512 F and DQ, and Intel CPUs) and eight at a time (others with
    // AVX-512 F and DQ; one at a time on a CPU without them).
    let rows64_one = BuildKnobs {
        rows: RowPrep::OneAtATime,
        ..rows64
    };
    let rows64_eight = BuildKnobs {
        rows: RowPrep::EightAtATime,
        ..rows64
    };
    let (mut r128, mut r64, mut r64_base, mut r64_one, mut r64_eight, mut b) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let mut sizes = [0usize; 3];
    // Seeds and shards of one (untimed) format 0x06 build. Knobs that leave
    // a shard without a seed that solves (a tiny overhead, tiny shards)
    // make the build fall back to Bloom: that ends the run here, before any
    // timing.
    let (_, outcome) = ribbon.build_with(&hashes, rows64);
    if outcome.fell_back_to_bloom {
        eprintln!(
            "error: format 0x06 fell back to Bloom with {keys} keys, {shard_keys_64} keys/shard and \
             overhead {}; try a larger overhead",
            args.overhead_64
                .map_or("table".to_string(), |o| format!("{:.2}%", o * 100.0))
        );
        std::process::exit(1);
    }
    let failed_64 = outcome.failed_seeds as u64;
    let shards_64 = outcome.shards as u64;
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
        let (ns, _) = time(&|| ribbon.build_with(black_box(&hashes), rows64_one).0);
        r64_one.push(ns);
        let (ns, _) = time(&|| ribbon.build_with(black_box(&hashes), rows64_eight).0);
        r64_eight.push(ns);
        let (ns, len) = time(&|| bloom.build(black_box(&hashes)));
        b.push(ns);
        sizes[2] = len;
    }
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
    let rows_ratio = per_round_to(&r64_eight, &r64_one);
    let (r64_one, r64_eight) = (quantile(&r64_one, 0.5), quantile(&r64_eight, 0.5));
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
        "  ribbon 0x06, rows eight keys at a time {r64_eight:.1} ns/key, one at a time {r64_one:.1} (eight / one per round: {rows_ratio})"
    );
    println!(
        "  bloom       {b:.1} ns/key ({:.3} bits/key)",
        bpk(sizes[2])
    );
}
