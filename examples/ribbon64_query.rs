//! The format 0x06 Ribbon query against the blocked Bloom filter's and
//! format 0x05's, side by side in interleaved rounds (a shared, noisy
//! machine slows all alike), until `benches/filters.rs` can build 0x06
//! filters.
//!
//! For each size (keys; default 10,000 and 1,000,000) it builds a Bloom
//! filter (`BloomPolicy::new(10.0)`) and a format 0x05 Ribbon filter
//! (`RibbonPolicy::new(10.0)`, built with `RibbonFormat::Rows128`: the
//! policy's default is format 0x06) over the same keys, and crafts a CRC-valid
//! format 0x06 filter of the size a build would give: shards of about
//! 1,020 keys and 1,045 slots, 23% of them lower shards of 6 columns, the
//! others 7 (about 1% false positives), random seeds and random solution
//! bits. Absent hashes are fresh random ones; present hashes of the 0x06
//! filter are random hashes it accepts (the query checks every column, as
//! for a stored key).
//!
//! Each round times one pass of 1,000,000 `Filter::may_contain` calls per
//! row, answers summed, hashes walked in order through an array of
//! 2,000,000 (as `benches/filters.rs` does); prints the median ns/query of
//! 15 rounds and the ratio to the Bloom row. The `ribbon64/<path>` rows
//! call `Ribbon64Layout::may_contain` on the bytes, on one forced path; the
//! `ribbon/<path>` rows likewise for format 0x05 (`RibbonLayout`), the
//! paths a CPU without AVX-512 takes.
//!
//! Run: `cargo run --release --example ribbon64_query [-- KEYS...]`

use std::hint::black_box;
use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat, RibbonLayout};
use sievedb::filter::ribbon64::{
    region_blocks, Ribbon64Layout, Shard64, SHARD_ENTRY_BYTES, WORD_BYTES,
};
use sievedb::filter::{BloomPolicy, Filter, FilterPolicy, RibbonPolicy, FORMAT_RIBBON64};

const QUERIES_PER_PASS: usize = 1_000_000;
const HASHES: usize = 2_000_000;
const ROUNDS: usize = 15;
/// Keys per shard of the crafted filter, and its slots per key.
const SHARD_KEYS: f64 = 1_020.0;
const SLOTS_PER_KEY: f64 = 1.025;
const LOWER_SHARE: f64 = 0.23;

#[path = "../benches/support/key_hashes.rs"]
mod key_hashes;
use key_hashes::key_hashes as hashes;

/// A CRC-valid format 0x06 filter for `keys` keys (see the module doc).
fn craft_ribbon64(keys: usize, rng: &mut impl Rng) -> Vec<u8> {
    let num_shards = ((keys as f64 / SHARD_KEYS).round() as usize).max(1);
    let lower = (num_shards as f64 * LOWER_SHARE).round() as u32;
    let upper = 7u32;
    let per_shard = keys as f64 / num_shards as f64 * SLOTS_PER_KEY;
    let shards: Vec<Shard64> = (0..num_shards)
        .map(|_| Shard64 {
            num_slots: (per_shard + rng.gen_range(-8.0..8.0)).clamp(64.0, 65_535.0) as u16,
            seed: rng.gen_range(0..4),
        })
        .collect();
    let mut out = Vec::new();
    for (region, columns) in [(0usize, upper - 1), (1, upper)] {
        let slots: u64 = shards
            .iter()
            .enumerate()
            .filter(|&(i, _)| usize::from(i as u32 >= lower) == region)
            .map(|(_, s)| s.num_slots as u64)
            .sum();
        let words = region_blocks(slots) as usize * columns as usize;
        out.extend((0..words * WORD_BYTES).map(|_| rng.gen::<u8>()));
    }
    let table_start = out.len();
    for s in &shards {
        let mut e = [0u8; SHARD_ENTRY_BYTES];
        s.write(&mut e);
        out.extend_from_slice(&e);
    }
    out.extend_from_slice(&(num_shards as u32).to_le_bytes());
    out.extend_from_slice(&lower.to_le_bytes());
    out.push(upper as u8);
    let crc = crc32fast::hash(&out[table_start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(FORMAT_RIBBON64);
    out
}

/// One way to answer a query, timed as a row.
enum Query {
    Filter(Filter),
    Layout(Ribbon64Layout, Vec<u8>),
    Layout05(RibbonLayout, Vec<u8>),
}

impl Query {
    #[inline(always)]
    fn ask(&self, h: u64) -> bool {
        match self {
            Query::Filter(f) => f.may_contain(h),
            Query::Layout(l, bytes) => l.may_contain(bytes, h),
            Query::Layout05(l, bytes) => l.may_contain(bytes, h),
        }
    }
}

/// Nanoseconds per query of one pass over `hashes` from `*pos`.
fn pass(query: &Query, hashes: &[u64], pos: &mut usize) -> f64 {
    let mut hits = 0usize;
    let start = Instant::now();
    match query {
        // Separate loops, so that the filter rows time exactly
        // `Filter::may_contain` (one indirect call) in their loop.
        Query::Filter(f) => {
            for i in 0..QUERIES_PER_PASS {
                let h = hashes[(*pos + i) % hashes.len()];
                hits += usize::from(f.may_contain(black_box(h)));
            }
        }
        Query::Layout(..) | Query::Layout05(..) => {
            for i in 0..QUERIES_PER_PASS {
                let h = hashes[(*pos + i) % hashes.len()];
                hits += usize::from(query.ask(black_box(h)));
            }
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / QUERIES_PER_PASS as f64;
    *pos = (*pos + QUERIES_PER_PASS) % hashes.len();
    black_box(hits);
    ns
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run(keys: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(keys as u64);
    let present = hashes(1, keys);
    let absent = hashes(2, HASHES);
    let bloom = Filter::decode(BloomPolicy::new(10.0).build(&present));
    // `RibbonPolicy` builds format 0x06 by default; format 0x05 when asked.
    let knobs05 = BuildKnobs {
        format: RibbonFormat::Rows128,
        ..BuildKnobs::default()
    };
    let bytes05 = RibbonPolicy::new(10.0).build_with(&present, knobs05).0;
    let layout05 = RibbonLayout::parse(&bytes05).expect("format 0x05");
    let ribbon = Filter::decode(&bytes05);
    let bytes64 = craft_ribbon64(keys, &mut rng);
    let layout = Ribbon64Layout::parse(&bytes64).expect("crafted 0x06 filter");
    let ribbon64 = Filter::decode(&bytes64);
    assert_eq!(ribbon64.format_name(), "ribbon");
    // Hashes the crafted filter accepts: its "present" keys.
    let mut accepted = Vec::with_capacity(HASHES);
    while accepted.len() < HASHES {
        let h: u64 = rng.gen();
        if ribbon64.may_contain(h) {
            accepted.push(h);
        }
    }
    let present_cycled: Vec<u64> = present.iter().copied().cycle().take(HASHES).collect();
    println!(
        "{keys} keys: bloom {} B, ribbon 0x05 {} B, ribbon64 {} B ({} shards, fp {:.4}, {:.2} bits/key)",
        bloom.len_bytes(),
        ribbon.len_bytes(),
        bytes64.len(),
        layout.num_shards(),
        layout.expected_fp_rate(),
        bytes64.len() as f64 * 8.0 / keys as f64,
    );
    let mut rows: Vec<(String, Query, &[u64])> = vec![
        ("absent/bloom".into(), Query::Filter(bloom.clone()), &absent),
        (
            "absent/ribbon".into(),
            Query::Filter(ribbon.clone()),
            &absent,
        ),
        (
            "absent/ribbon64".into(),
            Query::Filter(ribbon64.clone()),
            &absent,
        ),
        (
            "present/bloom".into(),
            Query::Filter(bloom),
            &present_cycled,
        ),
        (
            "present/ribbon".into(),
            Query::Filter(ribbon),
            &present_cycled,
        ),
        (
            "present/ribbon64".into(),
            Query::Filter(ribbon64),
            &accepted,
        ),
    ];
    for path in [
        "avx512",
        "avx2",
        "avx2-general",
        "popcnt-narrow",
        "popcnt",
        "portable",
    ] {
        if let Some(l) = layout.clone().on_path(path) {
            rows.push((
                format!("absent/ribbon64/{path}"),
                Query::Layout(l.clone(), bytes64.clone()),
                &absent,
            ));
            rows.push((
                format!("present/ribbon64/{path}"),
                Query::Layout(l, bytes64.clone()),
                &accepted,
            ));
        }
    }
    for path in ["avx2", "scalar"] {
        if let Some(l) = layout05.clone().on_path(path) {
            rows.push((
                format!("absent/ribbon/{path}"),
                Query::Layout05(l, bytes05.clone()),
                &absent,
            ));
        }
    }
    let mut times = vec![Vec::new(); rows.len()];
    let mut positions = vec![0usize; rows.len()];
    for _ in 0..ROUNDS {
        for (i, (_, query, hashes)) in rows.iter().enumerate() {
            times[i].push(pass(query, hashes, &mut positions[i]));
        }
    }
    let medians: Vec<f64> = times.into_iter().map(median).collect();
    for (i, (name, _, _)) in rows.iter().enumerate() {
        let base = if name.starts_with("present") {
            medians[3]
        } else {
            medians[0]
        };
        println!(
            "  {name:28} {:7.2} ns/query  {:5.2}x bloom",
            medians[i],
            medians[i] / base
        );
    }
    println!(
        "  ribbon64 / ribbon 0x05: absent {:.3}, present {:.3}",
        medians[2] / medians[1],
        medians[5] / medians[4]
    );
}

/// The format 0x06 Ribbon query against the blocked Bloom filter's and
/// format 0x05's, in interleaved rounds.
#[derive(Parser)]
#[command(name = "ribbon64_query")]
struct Args {
    /// Filter sizes in keys, each at least 1,000 (fewer make format 0x05
    /// fall back to Bloom) [default: 10000 1000000].
    #[arg(value_name = "KEYS",
          value_parser = RangedU64ValueParser::<usize>::new().range(1000..))]
    sizes: Vec<usize>,
}

fn main() {
    let sizes = Args::parse().sizes;
    let sizes = if sizes.is_empty() {
        vec![10_000, 1_000_000]
    } else {
        sizes
    };
    for keys in sizes {
        run(keys);
    }
}
