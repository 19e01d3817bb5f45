//! Prefix scans with and without prefix filters (`Options::prefix_filter_len`).
//!
//! Run: `cargo run --release --example prefix_scan [-- --users N --items M --policy bloom|ribbon
//! --budget uniform|monkey]` (defaults: 200,000 user ids, 10 items each, bloom, uniform)
//!
//! Keys are `user:{id:08}/{item:04}` (the user part is 14 bytes); every
//! even id is loaded (in a scattered order), odd ids are missing. The load
//! is deterministic: 100-byte values, a full compaction, then three more
//! flushed rounds of one new item for every tenth user, so a scan meets
//! level-0 tables and deeper levels. Then, for each setting (no prefix
//! filter, `prefix_filter_len = 14`): `scan_prefix` of 20,000 missing users
//! and of 20,000 present users (each checked to find its items), timed,
//! with data blocks read per scan and the filters' memory.

use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use sievedb::filter::{BloomPolicy, FilterPolicy, RibbonPolicy};
use sievedb::{Db, FilterBudget, Options};

/// Prefix scans with and without prefix filters.
#[derive(Parser)]
#[command(name = "prefix_scan")]
struct Args {
    /// User ids 0..N (the even ones are loaded, the odd ones are missing).
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    users: u64,
    /// Items per loaded user.
    #[arg(long, value_name = "M", default_value_t = 10)]
    items: u64,
    /// Filter policy (10 bits/key; Bloom-equivalent for Ribbon).
    #[arg(long, value_enum, default_value_t = Policy::Bloom)]
    policy: Policy,
    /// Filter budget.
    #[arg(long, value_enum, default_value_t = Budget::Uniform)]
    budget: Budget,
}

/// The filter policies the example can build.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Policy {
    /// `BloomPolicy`.
    Bloom,
    /// `RibbonPolicy`.
    Ribbon,
}

/// `Options::filter_budget`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Budget {
    /// `FilterBudget::Uniform`.
    Uniform,
    /// `FilterBudget::Monkey`.
    Monkey,
}

const PREFIX_LEN: usize = 14;

fn user(id: u64) -> String {
    format!("user:{id:08}/")
}

/// splitmix64: a small deterministic generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn main() -> sievedb::Result<()> {
    let args = Args::parse();
    let (users, items) = (args.users, args.items);
    let budget = match args.budget {
        Budget::Monkey => FilterBudget::Monkey,
        Budget::Uniform => FilterBudget::Uniform,
    };
    let loaded = users / 2;
    // A stride coprime with `loaded`: `i * stride % loaded` visits every
    // loaded user once, scattered.
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut stride = loaded * 5 / 8 + 1;
    while gcd(stride, loaded) != 1 {
        stride += 1;
    }
    let policy: Arc<dyn FilterPolicy> = match args.policy {
        Policy::Ribbon => Arc::new(RibbonPolicy::new(10.0)),
        Policy::Bloom => Arc::new(BloomPolicy::new(10.0)),
    };
    println!(
        "{loaded} users (even ids of 0..{users}) x {items} items, {} filters at 10 bits/key, {budget:?} budget",
        policy.name()
    );
    println!(
        "{:<22} {:>12} {:>14} {:>12} {:>14} {:>12} {:>16}",
        "setting",
        "filter MiB",
        "missing blk/scan",
        "missing us",
        "present blk/scan",
        "present us",
        "prefix negatives"
    );
    for prefix_filter_len in [None, Some(PREFIX_LEN)] {
        let dir = tempfile::tempdir().map_err(|e| sievedb::Error::Io {
            path: std::env::temp_dir(),
            source: e,
        })?;
        let opts = Options {
            filter_policy: Arc::clone(&policy),
            prefix_filter_len,
            filter_budget: budget,
            background_compaction: false,
            memtable_bytes: 4 << 20,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts)?;
        let value = [7u8; 100];
        for i in 0..loaded {
            // Users in a scattered order, so every flush spans the key space.
            let id = 2 * (i * stride % loaded);
            for item in 0..items {
                db.put(format!("{}{item:04}", user(id)), value)?;
            }
        }
        db.flush()?;
        db.compact_all()?;
        for round in 0..3u64 {
            for id in (0..users).step_by(20) {
                db.put(format!("{}{:04}", user(id), items + round), value)?;
            }
            db.flush()?;
        }
        let stats = db.stats();
        let filter_mib = stats.filter_bytes() as f64 / (1 << 20) as f64;

        let sample = 20_000u64.min(loaded);
        let ids = |odd: u64| -> Vec<u64> {
            (0..sample)
                .map(|i| 2 * (mix(i + 1_000_000 * (odd + 1)) % loaded) + odd)
                .collect()
        };
        let mut row = Vec::new();
        for odd in [1, 0] {
            let ids = ids(odd);
            db.reset_stats();
            let start = Instant::now();
            let mut found = Vec::with_capacity(ids.len());
            for &id in &ids {
                found.push(db.scan_prefix(user(id))?.count() as u64);
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / ids.len() as f64;
            for (&id, &n) in ids.iter().zip(&found) {
                let at_least = if odd == 1 { 0 } else { items };
                let at_most = if odd == 1 { 0 } else { items + 3 };
                assert!((at_least..=at_most).contains(&n), "user {id}: {n} items");
            }
            let s = db.stats();
            row.push((
                s.data_block_reads as f64 / ids.len() as f64,
                us,
                s.prefix_filter_negatives,
            ));
        }
        println!(
            "{:<22} {:>12.2} {:>14.3} {:>12.2} {:>14.3} {:>12.2} {:>16}",
            match prefix_filter_len {
                None => "no prefix filter".to_string(),
                Some(n) => format!("prefix_filter_len {n}"),
            },
            filter_mib,
            row[0].0,
            row[0].1,
            row[1].0,
            row[1].1,
            row[0].2 + row[1].2
        );
        println!(
            "  tree: {}",
            stats
                .levels
                .iter()
                .enumerate()
                .filter(|(_, l)| l.tables > 0)
                .map(|(i, l)| format!("L{i} {} tables", l.tables))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
