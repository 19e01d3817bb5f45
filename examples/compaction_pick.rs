//! Compares the two compaction picking policies on an overwrite-heavy
//! workload: rotation through the key space (LevelDB's policy) and picking
//! the table whose merge drops the most entries per byte written, estimated
//! from the tables' HyperLogLog sketches.
//!
//! Run: `cargo run --release --example compaction_pick [-- --writes N]`
//!
//! Prints, per policy: compactions, bytes written by compactions, write
//! amplification, entries and bytes on disk after the load (before any
//! final compaction), i.e. the space the tree carries while it runs.

use std::time::Instant;

use clap::Parser;
use sievedb::{CompactionPick, Db, Options};

/// Compares the compaction picking policies on an overwrite-heavy workload.
#[derive(Parser)]
#[command(name = "compaction_pick")]
struct Args {
    /// Overwrites after the 400,000 keys are loaded.
    #[arg(long, value_name = "N", default_value_t = 2_000_000)]
    writes: u64,
}

/// splitmix64: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn main() -> sievedb::Result<()> {
    let writes = Args::parse().writes;
    let keys: u64 = 400_000;
    println!("workload: {keys} keys loaded once, then {writes} overwrites; 80% of them to a hot 5% of the keys");
    println!(
        "{:<12} {:>11} {:>14} {:>9} {:>12} {:>12} {:>8}",
        "pick", "compactions", "compact bytes", "write amp", "entries", "disk bytes", "secs"
    );
    for pick in [CompactionPick::Rotation, CompactionPick::MostDropped] {
        let dir = tempfile::tempdir().map_err(|e| sievedb::Error::Io {
            path: std::env::temp_dir(),
            source: e,
        })?;
        let opts = Options {
            memtable_bytes: 1 << 20,
            level1_bytes: 4 << 20,
            table_bytes: 512 << 10,
            compaction_pick: pick,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts)?;
        let start = Instant::now();
        let value = [7u8; 64];
        for i in 0..keys {
            db.put(
                format!("key{:010}", i.wrapping_mul(0x9e37_79b9) % keys),
                value,
            )?;
        }
        let mut rng = Rng(42);
        let hot = keys / 20;
        for _ in 0..writes {
            let r = rng.next();
            // The hot range sits in the middle of the key space.
            let k = if r % 10 < 8 {
                keys / 2 + (r >> 8) % hot
            } else {
                (r >> 8) % keys
            };
            db.put(format!("key{k:010}"), value)?;
        }
        db.flush()?;
        db.compact()?;
        let s = db.stats();
        let entries: u64 = s.levels.iter().map(|l| l.entries).sum();
        let bytes: u64 = s.levels.iter().map(|l| l.bytes).sum();
        println!(
            "{:<12} {:>11} {:>14} {:>9.2} {:>12} {:>12} {:>8.1}",
            format!("{pick:?}"),
            s.compactions,
            s.compaction_bytes_written,
            s.write_amplification(),
            entries,
            bytes,
            start.elapsed().as_secs_f64()
        );
        db.close()?;
    }
    Ok(())
}
