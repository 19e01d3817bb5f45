//! Compares filter budgets on one tree shape: every table at the policy's
//! bits per key (`FilterBudget::Uniform`) against per-run sizes
//! (`FilterBudget::Monkey`), and uniform filters given the memory Monkey
//! ended up using.
//!
//! Run: `cargo run --release --example filter_budget [-- --keys N --policy bloom|ribbon --bits B
//! --memtable-kib K --level1-kib K]` (defaults: 2,000,000 keys, bloom, 10, 256, 1024)
//!
//! The load is deterministic: compactions run only at fixed points (every
//! 50,000 writes, after a flush), so every budget sees the same flushes and
//! nearly the same tree (compaction cuts tables by file size, filters
//! included, so levels differ by a few thousand keys). Prints, per budget: filter bytes and bits per
//! key, bits per key of each sorted run, data blocks read per missing get
//! (measured over 200,000 missing keys) and what the tables' own rates
//! predict, and missing-get throughput.

use std::sync::Arc;
use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::{Parser, ValueEnum};
use sievedb::filter::{BloomPolicy, FilterPolicy, RibbonPolicy};
use sievedb::{Db, FilterBudget, Options, TableInfo};

/// Uniform against Monkey filter budgets on one tree shape.
#[derive(Parser)]
#[command(name = "filter_budget")]
struct Args {
    /// Keys to load (at least 1).
    #[arg(long, value_name = "N", default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Filter policy.
    #[arg(long, value_enum, default_value_t = Policy::Bloom)]
    policy: Policy,
    /// Bits per key (Bloom-equivalent for Ribbon): a positive number.
    #[arg(long, value_name = "B", default_value_t = 10.0, value_parser = positive_number)]
    bits: f64,
    /// Memtable size in KiB (at least 1).
    #[arg(long, value_name = "K", default_value_t = 256,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    memtable_kib: usize,
    /// Level-1 target size in KiB (at least 1); x10 per deeper level.
    #[arg(long, value_name = "K", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    level1_kib: u64,
}

/// The filter policies the example can build.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Policy {
    /// `BloomPolicy`.
    Bloom,
    /// `RibbonPolicy` (at the Bloom-equivalent bits per key).
    Ribbon,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Bloom => "bloom",
            Policy::Ribbon => "ribbon",
        }
    }
}

/// A finite number greater than 0.
fn positive_number(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("expected a positive number, got {text:?}")),
    }
}

/// splitmix64: a small deterministic generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Loaded keys are even numbers, missing keys odd: both spread over the
/// whole key range.
fn key(i: u64) -> String {
    format!("key{:016}", i)
}

fn filter_policy(policy: Policy, bits: f64) -> Arc<dyn FilterPolicy> {
    match policy {
        Policy::Ribbon => Arc::new(RibbonPolicy::new(bits)),
        Policy::Bloom => Arc::new(BloomPolicy::new(bits)),
    }
}

/// (level, keys, filter bytes) per sorted run: each level-0 table alone,
/// each deeper level as one.
fn runs(tables: &[TableInfo]) -> Vec<(usize, u64, u64)> {
    let mut sorted: Vec<&TableInfo> = tables.iter().collect();
    sorted.sort_by_key(|t| t.level);
    let mut runs: Vec<(usize, u64, u64)> = Vec::new();
    for t in sorted {
        match runs.last_mut() {
            Some(r) if r.0 == t.level && t.level > 0 => {
                r.1 += t.entries;
                r.2 += t.filter_bytes;
            }
            _ => runs.push((t.level, t.entries, t.filter_bytes)),
        }
    }
    runs
}

struct Outcome {
    filter_bytes: u64,
    keys: u64,
    blocks_per_missing_get: f64,
    expected_per_missing_get: f64,
    missing_gets_per_sec: f64,
}

fn run(
    label: &str,
    policy: Policy,
    bits: f64,
    budget: FilterBudget,
    keys: u64,
    (memtable_bytes, level1_bytes): (usize, u64),
) -> sievedb::Result<Outcome> {
    let dir = tempfile::tempdir().map_err(|e| sievedb::Error::Io {
        path: std::env::temp_dir(),
        source: e,
    })?;
    let opts = Options {
        filter_policy: filter_policy(policy, bits),
        filter_budget: budget,
        memtable_bytes,
        level1_bytes,
        table_bytes: level1_bytes / 4,
        background_compaction: false,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts)?;
    let value = [7u8; 32];
    for n in 0..keys {
        // A permutation of 0..keys (the multiplier is a prime larger than
        // any key count used), so every key is loaded once.
        let i = ((n as u128 * 2_305_843_009_213_693_951u128) % keys as u128) as u64;
        db.put(key(2 * i), value)?;
        if (n + 1) % 50_000 == 0 {
            db.flush()?;
            db.compact()?;
        }
    }
    db.flush()?;
    let tables = db.tables();
    let stats = db.stats();
    let keys_in_tables: u64 = tables.iter().map(|t| t.entries).sum();

    // What the tables predict: each covering table's own theoretical rate.
    let rate = |t: &TableInfo| {
        let b = t.filter_bits_per_key.unwrap_or(bits);
        match policy {
            Policy::Ribbon => RibbonPolicy::new(b).fp_rate(),
            Policy::Bloom => BloomPolicy::new(b).expected_fp_rate(),
        }
    };
    let rates: Vec<f64> = tables.iter().map(rate).collect();
    let missing: Vec<Vec<u8>> = (0..200_000u64)
        .map(|n| key(2 * (mix(n) % keys) + 1).into_bytes())
        .collect();
    let mut expected = 0.0;
    for k in &missing {
        for (t, r) in tables.iter().zip(&rates) {
            if t.smallest.as_slice() <= k.as_slice() && k.as_slice() <= t.largest.as_slice() {
                expected += r;
            }
        }
    }
    db.reset_stats();
    let start = Instant::now();
    for k in &missing {
        if db.get(k)?.is_some() {
            return Err(sievedb::Error::InvalidArgument(format!(
                "missing key {k:?} found"
            )));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let after = db.stats();
    let n = missing.len() as f64;
    let outcome = Outcome {
        filter_bytes: stats.filter_bytes(),
        keys: keys_in_tables,
        blocks_per_missing_get: after.get_data_block_reads as f64 / n,
        expected_per_missing_get: expected / n,
        missing_gets_per_sec: n / secs,
    };
    let per_run: Vec<String> = runs(&tables)
        .iter()
        .map(|&(level, k, bytes)| {
            format!(
                "L{level}:{}k@{:.1}",
                k / 1000,
                bytes as f64 * 8.0 / k as f64
            )
        })
        .collect();
    println!(
        "{label:<22} {:>12} {:>8.2} {:>10.4} {:>10.4} {:>12.0}   {}",
        outcome.filter_bytes,
        outcome.filter_bytes as f64 * 8.0 / outcome.keys as f64,
        outcome.blocks_per_missing_get,
        outcome.expected_per_missing_get,
        outcome.missing_gets_per_sec,
        per_run.join(" ")
    );
    db.close()?;
    Ok(outcome)
}

fn main() -> sievedb::Result<()> {
    let Args {
        keys,
        policy,
        bits,
        memtable_kib,
        level1_kib,
    } = Args::parse();
    let policy_name = policy.name();
    let sizes = (memtable_kib << 10, level1_kib << 10);
    println!(
        "{keys} keys (20 B keys, 32 B values), {policy_name} at {bits} bits/key; \
         {memtable_kib} KiB memtable, {level1_kib} KiB level 1, x10 per level"
    );
    println!(
        "{:<22} {:>12} {:>8} {:>10} {:>10} {:>12}   runs (keys@bits/key)",
        "budget", "filter bytes", "bits/key", "blk/miss", "expected", "miss gets/s"
    );
    let uniform = run("uniform", policy, bits, FilterBudget::Uniform, keys, sizes)?;
    let monkey = run("monkey", policy, bits, FilterBudget::Monkey, keys, sizes)?;
    // Uniform filters with the memory Monkey used, for a like-for-like
    // comparison.
    let matched = bits * monkey.filter_bytes as f64 / uniform.filter_bytes as f64;
    let label = format!("uniform at {matched:.2}");
    run(&label, policy, matched, FilterBudget::Uniform, keys, sizes)?;
    Ok(())
}
