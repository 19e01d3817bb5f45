//! Point reads with the block cache off and on, side by side in one
//! process: one database is loaded and compacted, checkpointed (tables
//! hard-linked, so every copy shares the same page cache), and each copy is
//! opened with its own `Options::block_cache_bytes`. Every round times a
//! slice of gets on each copy in turn (the order alternating between
//! rounds), so the machine's noise falls on all of them alike; the medians
//! over the rounds are printed.
//!
//! Workloads, all of present keys:
//! - `hot-1%`: uniform over 1% of the keys, consecutive (a hot set of a
//!   few hundred blocks, fits any cache and the CPU's caches);
//! - `hot-16MiB`: uniform over consecutive keys holding about 16 MiB of
//!   data blocks (fits a 32 MiB cache, not the CPU's caches);
//! - `uniform`: uniform over every key (the data is many times the cache).
//!
//! Run: `cargo run --release --example block_cache -- [keys] [cache MiB]
//! [rounds]` (defaults 2000000, 32, 9).

#[path = "../tests/support/streams.rs"]
mod streams;

use std::time::Instant;

use clap::Parser;
use sievedb::{Db, Options};
use streams::SplitMix64;

/// Point reads with the block cache off and on, side by side in one process.
#[derive(Parser)]
#[command(name = "block_cache")]
struct Args {
    /// Keys to load (at least 1,000).
    #[arg(value_name = "KEYS", default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(1000..))]
    keys: u64,
    /// Block cache size in MiB of the "on" copy.
    #[arg(value_name = "CACHE_MIB", default_value_t = 32)]
    cache_mib: u64,
    /// Timing rounds (at least 1).
    #[arg(value_name = "ROUNDS", default_value_t = 9,
          value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:013}").into_bytes()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> sievedb::Result<()> {
    let args = Args::parse();
    let keys = args.keys;
    let cache_mib = args.cache_mib;
    let rounds = args.rounds as usize;
    const VALUE: usize = 100;
    const GETS: u64 = 200_000;

    let base = tempfile::tempdir().expect("tempdir");
    let load_dir = base.path().join("load");
    {
        let db = Db::open(&load_dir, Options::default())?;
        let mut rng = SplitMix64(1);
        let mut order: Vec<u64> = (0..keys).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        for i in order {
            db.put(key(i), [b'v'; VALUE])?;
        }
        db.flush()?;
        db.compact()?;
        let bytes: u64 = db.tables().iter().map(|t| t.file_size).sum();
        println!(
            "{keys} keys, {VALUE}-byte values, {:.1} MiB of tables; cache {cache_mib} MiB",
            bytes as f64 / (1 << 20) as f64
        );
    }
    let configs = [("off", 0usize), ("on", (cache_mib as usize) << 20)];
    let mut dbs = Vec::new();
    for (name, bytes) in configs {
        let dir = base.path().join(name);
        {
            let db = Db::open(&load_dir, Options::default())?;
            db.checkpoint(&dir)?;
        }
        let opts = Options {
            block_cache_bytes: bytes,
            track_hot_keys: false,
            background_compaction: false,
            ..Options::default()
        };
        dbs.push((name, Db::open(&dir, opts)?));
    }
    // About 120 bytes of data block per key.
    let hot16 = ((16u64 << 20) / 120).min(keys);
    let workloads = [
        ("hot-1%", keys / 100),
        ("hot-16MiB", hot16),
        ("uniform", keys),
    ];
    println!(
        "{:<10} {:>12} {:>12} {:>8} {:>10} {:>10}",
        "workload", "off ns/get", "on ns/get", "on/off", "hit rate", "cache MiB"
    );
    for (wname, span) in workloads {
        let start = (keys - span) / 2;
        // Warm both (the cache admits a block on its second miss).
        for (_, db) in &dbs {
            let mut rng = SplitMix64(7);
            for _ in 0..(3 * span).min(4 * GETS) {
                db.get(key(start + rng.next_u64() % span))?;
            }
            db.reset_stats();
        }
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); dbs.len()];
        for round in 0..rounds {
            for j in 0..dbs.len() {
                let j = if round % 2 == 0 { j } else { dbs.len() - 1 - j };
                let db = &dbs[j].1;
                let mut rng = SplitMix64(round as u64 * 31 + 11);
                let t = Instant::now();
                for _ in 0..GETS {
                    let v = db.get(key(start + rng.next_u64() % span))?;
                    assert!(v.is_some());
                }
                times[j].push(t.elapsed().as_nanos() as f64 / GETS as f64);
            }
        }
        let off = median(&mut times[0]);
        let on = median(&mut times[1]);
        let s = dbs[1].1.stats();
        let lookups = (s.block_cache_hits + s.block_cache_misses).max(1);
        println!(
            "{:<10} {:>12.0} {:>12.0} {:>8.3} {:>9.1}% {:>10.1}",
            wname,
            off,
            on,
            on / off,
            s.block_cache_hits as f64 * 100.0 / lookups as f64,
            s.block_cache_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}
