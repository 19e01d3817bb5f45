//! Table size and point-read latency with LZ4 compression off and on, side
//! by side in one process.
//!
//! For each value kind, two databases are loaded with the same keys and
//! values in the same random order (one with `Compression::None`, one with
//! `Compression::Lz4`), flushed and compacted. The table bytes of each are
//! printed; then every round times a slice of gets of present keys (uniform
//! over all keys) on each database in turn, the order alternating between
//! rounds, so the machine's noise falls on both alike; medians over the
//! rounds are printed. The block cache is off (the default), so every get
//! of a compressed table decompresses its block.
//!
//! Value kinds (`VALUE` bytes each):
//! - `half`: the first half pseudo-random, the second half one repeated
//!   byte (LevelDB's db_bench `--compression_ratio 0.5`);
//! - `random`: all pseudo-random bytes (incompressible).
//!
//! Run: `cargo run --release --example compression -- [keys] [rounds]`
//! (defaults 1000000, 9).

#[path = "../tests/support/streams.rs"]
mod streams;

use std::path::Path;
use std::time::Instant;

use clap::Parser;
use sievedb::{Compression, Db, Options};
use streams::SplitMix64;

const VALUE: usize = 100;
const GETS: u64 = 100_000;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:013}").into_bytes()
}

fn value(i: u64, kind: &str) -> Vec<u8> {
    let mut rng = SplitMix64(i.wrapping_mul(31).wrapping_add(7));
    let random = if kind == "half" { VALUE / 2 } else { VALUE };
    let mut v: Vec<u8> = (0..random.div_ceil(8))
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .take(random)
        .collect();
    v.resize(VALUE, b'x');
    v
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn load(dir: &Path, compression: Compression, keys: u64, kind: &str) -> sievedb::Result<Db> {
    let opts = Options {
        compression,
        ..Options::default()
    };
    let db = Db::open(dir, opts)?;
    let mut rng = SplitMix64(1);
    let mut order: Vec<u64> = (0..keys).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    for i in order {
        db.put(key(i), value(i, kind))?;
    }
    db.flush()?;
    db.compact()?;
    Ok(db)
}

/// Table size and point-read latency with LZ4 compression off and on.
#[derive(Parser)]
#[command(name = "compression")]
struct Args {
    /// Keys to load (at least 1,000).
    #[arg(value_name = "KEYS", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1000..))]
    keys: u64,
    /// Timing rounds (at least 1).
    #[arg(value_name = "ROUNDS", default_value_t = 9,
          value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
}

fn main() -> sievedb::Result<()> {
    let args = Args::parse();
    let keys = args.keys;
    let rounds = args.rounds as usize;
    let base = tempfile::tempdir().expect("tempdir");
    println!(
        "{keys} keys (16 B), {VALUE} B values, {GETS} present gets per round, {rounds} rounds"
    );
    println!(
        "{:<7} {:<5} {:>12} {:>7} {:>12} {:>12}",
        "values", "lz4", "table bytes", "ratio", "ns/get med", "ns/get min"
    );
    for kind in ["half", "random"] {
        let configs = [("off", Compression::None), ("on", Compression::Lz4)];
        let mut dbs = Vec::new();
        for (name, c) in configs {
            let dir = base.path().join(format!("{kind}-{name}"));
            dbs.push(load(&dir, c, keys, kind)?);
        }
        let bytes: Vec<u64> = dbs
            .iter()
            .map(|db| db.tables().iter().map(|t| t.file_size).sum())
            .collect();
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); dbs.len()];
        let mut rng = SplitMix64(99);
        for round in 0..rounds {
            let keys_this_round: Vec<Vec<u8>> =
                (0..GETS).map(|_| key(rng.next_u64() % keys)).collect();
            let mut order: Vec<usize> = (0..dbs.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let db = &dbs[i];
                let start = Instant::now();
                for k in &keys_this_round {
                    let v = db.get(k)?;
                    assert!(v.is_some_and(|v| v.len() == VALUE));
                }
                times[i].push(start.elapsed().as_nanos() as f64 / GETS as f64);
            }
        }
        for (i, (name, _)) in configs.iter().enumerate() {
            let min = times[i].iter().copied().fold(f64::INFINITY, f64::min);
            println!(
                "{:<7} {:<5} {:>12} {:>7.3} {:>12.0} {:>12.0}",
                kind,
                name,
                bytes[i],
                bytes[i] as f64 / bytes[0] as f64,
                median(&mut times[i]),
                min
            );
        }
        for db in dbs {
            db.close()?;
        }
    }
    Ok(())
}
