//! Open a database, write, read, scan, read a snapshot, switch the filter policy across a
//! reopen, and print the read I/O statistics.
//!
//! Run: `cargo run --release --example quickstart`

#![allow(clippy::field_reassign_with_default)]

use std::sync::Arc;

use clap::Parser;
use sievedb::filter::{BloomPolicy, RibbonPolicy};
use sievedb::{Db, Options, WriteBatch};

/// Open a database, write, read, scan, read a snapshot, switch the filter
/// policy, print the read statistics. Takes no arguments.
#[derive(Parser)]
#[command(name = "quickstart")]
struct Args {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    Args::parse();
    let dir = tempfile::tempdir()?;

    // 1. Open with the default blocked Bloom filter (10 bits/key).
    let mut opts = Options {
        filter_policy: Arc::new(BloomPolicy::new(10.0)),
        memtable_bytes: 1 << 20,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts.clone())?;

    db.put(b"apple", b"red")?;
    db.put(b"banana", b"yellow")?;
    db.delete(b"apple")?;
    let mut batch = WriteBatch::new();
    batch.put(b"cherry", b"dark red").put(b"date", b"brown");
    db.write(&batch)?; // atomic
    for i in 0..20_000u32 {
        db.put(format!("user:{i:06}"), i.to_le_bytes())?;
    }
    db.flush()?;

    // A snapshot keeps answering as of its moment while the database moves on.
    let snap = db.snapshot()?;
    db.put(b"banana", b"green")?;
    db.compact_all()?;
    println!(
        "banana now {:?}, in the snapshot {:?}",
        db.get(b"banana")?.map(String::from_utf8),
        snap.get(b"banana")?.map(String::from_utf8)
    );
    drop(snap);

    println!("banana = {:?}", db.get(b"banana")?.map(String::from_utf8));
    println!("apple  = {:?}", db.get(b"apple")?);
    for item in db.scan(b"b".as_slice()..b"e".as_slice())? {
        let (k, v) = item?;
        println!(
            "scan: {} = {}",
            String::from_utf8_lossy(&k),
            String::from_utf8_lossy(&v)
        );
    }
    db.close()?;

    // 2. Reopen under a Ribbon filter with the same false-positive rate.
    //    Old tables keep their Bloom filters (decoded from their bytes); new
    //    tables and compaction outputs get Ribbon filters.
    opts.filter_policy = Arc::new(RibbonPolicy::new(10.0));
    let db = Db::open(dir.path(), opts)?;
    let bloom_filter_bytes = db.stats().filter_bytes();
    db.compact_all()?; // rewrite every table under the new policy
    let ribbon_filter_bytes = db.stats().filter_bytes();

    db.reset_stats();
    for i in 0..20_000u32 {
        assert!(db.get(format!("user:{i:06}"))?.is_some());
        assert!(db.get(format!("user:{i:06}-missing"))?.is_none());
    }
    let s = db.stats();
    println!();
    println!("filter bytes: bloom {bloom_filter_bytes} -> ribbon {ribbon_filter_bytes}");
    println!(
        "gets {} | filter checks {} | negatives {} | false positives {} | data blocks read {}",
        s.gets, s.filter_checks, s.filter_negatives, s.filter_false_positives, s.data_block_reads
    );
    for (level, l) in s.levels.iter().enumerate().filter(|(_, l)| l.tables > 0) {
        println!(
            "L{level}: {} tables, {} bytes, {} filter bytes, {} entries",
            l.tables, l.bytes, l.filter_bytes, l.entries
        );
    }
    db.close()?;
    Ok(())
}
