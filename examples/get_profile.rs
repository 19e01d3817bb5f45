//! Tight loop of point reads for profiling (not a benchmark).
use clap::Parser;
use sievedb::{Db, Options};

/// Tight loop of point reads for profiling (not a benchmark).
#[derive(Parser)]
#[command(name = "get_profile")]
struct Args {
    /// Track hot keys on the get path (`Options::track_hot_keys`).
    #[arg(long)]
    hot: bool,
    /// Get the keys that are missing instead of the present ones.
    #[arg(long)]
    missing: bool,
}

fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        track_hot_keys: args.hot,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let keys: Vec<Vec<u8>> = (0..400_000u64)
        .map(|i| format!("key{:013}", i).into_bytes())
        .collect();
    for k in keys.iter().step_by(2) {
        db.put(k, [7u8; 100]).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    let missing = args.missing;
    let start = std::time::Instant::now();
    let mut found = 0u64;
    let mut n = 0u64;
    for round in 0..10 {
        for (i, k) in keys.iter().enumerate() {
            if (i % 2 == 1) == missing && (i + round) % 3 == 0 {
                found += db.get(k).unwrap().is_some() as u64;
                n += 1;
            }
        }
    }
    eprintln!(
        "{} gets, found {found}, {:.0} ns/get, stats {:?}",
        n,
        start.elapsed().as_nanos() as f64 / n as f64,
        db.stats()
            .levels
            .iter()
            .map(|l| l.tables)
            .collect::<Vec<_>>()
    );
}
