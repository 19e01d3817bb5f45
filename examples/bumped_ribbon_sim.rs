//! How much a bumped Ribbon layer (BuRR) would store, bump and work, by
//! simulating its construction: no filter is built or queried.
//!
//! `examples/ribbon_layout_race.rs` measured that a Ribbon query with no
//! shard table to read first (a fixed geometry computed from the hash
//! alone) would cost about 1.2x the Bloom query instead of 2x. A fixed
//! geometry cannot size each shard to its keys, as format 0x06 does; the
//! bumped Ribbon (Dillinger, Hübschle-Schneider, Sanders and Walzer, "Fast
//! succinct retrieval and approximate membership using Ribbon", 2022)
//! absorbs the difference instead: a key whose row does not fit is
//! *bumped* to a next, much smaller layer, and each 64-slot bucket records
//! in a few bits which of the keys starting in it were bumped. This tool
//! runs that construction on format 0x06's rows (64-bit coefficients from
//! the 128-bit product of the rehash) and prints, per configuration, the
//! share of keys bumped, the elimination steps per key (undone rows
//! included) and an estimate of the whole filter's bits per key.
//!
//! The model:
//!
//! * keys go to fixed segments of `S = m x (1 + eps)` slots, `m` the mean
//!   keys per segment, by `fastrange64(hash, segments)`: a segment's keys
//!   vary as a Poisson count, which the bumping (and the slack of
//!   segments with fewer keys) absorbs, and segments band independently;
//! * a key's start is `fastrange64(g, S - 63)` in its segment (no smash:
//!   the bumping takes the ends' overload), its bucket `start / 64`, its
//!   bump byte bits 8-15 of `g`;
//! * buckets are banded in order, each bucket's keys by decreasing bump
//!   byte; when a row fails (reduces to zero), the bucket's threshold
//!   becomes the smallest level above the failing key's bump byte, every
//!   key of the bucket below the threshold is bumped, and the rows of the
//!   bucket already banded below it (the last ones banded) are undone;
//! * thresholds take `levels` values (2 bits per bucket for 4 levels);
//! * bits per key: the layer's slots at `COLUMNS_AVG` result bits each
//!   (format 0x06's average at 10 Bloom-equivalent bits/key), the
//!   thresholds, and the bumped keys in a format-0x06 filter at its 6.955
//!   bits/key.
//!
//! Run: `cargo run --release --example bumped_ribbon_sim -- [keys]`
//! (default 1,000,000).

#[path = "../benches/support/key_hashes.rs"]
mod key_hashes;
use key_hashes::key_hashes;

/// Format 0x06's rehash and coefficient multipliers.
const REHASH_MULT: u64 = 0xbf58_476d_1ce4_e5b9;
const COEFF_MULT: u64 = 0xc28f_8282_2b65_0bed;
/// Average result bits per slot at the Bloom filter's 0.955% (format 0x06
/// mixes 6 and 7 columns to this average).
const COLUMNS_AVG: f64 = 6.71;
/// Format 0x06's bits per key at 10 Bloom-equivalent bits/key, for the
/// bumped keys' filter.
const NEXT_LAYER_BITS_PER_KEY: f64 = 6.955;

fn fastrange64(hash: u64, n: u64) -> u64 {
    ((hash as u128 * n as u128) >> 64) as u64
}

/// A key's row in its segment.
struct Row {
    start: usize,
    coeff: u64,
    bump: u8,
}

impl Row {
    fn new(hash: u64, starts: usize) -> Row {
        let g = hash.wrapping_mul(REHASH_MULT);
        let product = g as u128 * COEFF_MULT as u128;
        Row {
            start: fastrange64(g, starts as u64) as usize,
            coeff: (product as u64 ^ (product >> 64) as u64) | 1,
            bump: (g >> 8) as u8,
        }
    }
}

/// Keys bumped and elimination steps of one segment of `slots` slots.
fn band_segment(hashes: &[u64], slots: usize, levels: &[u16]) -> (usize, u64) {
    let mut rows: Vec<Row> = hashes.iter().map(|&h| Row::new(h, slots - 63)).collect();
    rows.sort_unstable_by(|a, b| (a.start / 64, b.bump).cmp(&(b.start / 64, a.bump)));
    let mut cells = vec![0u64; slots];
    let (mut bumped, mut steps) = (0, 0);
    // The slots and bump bytes of the current bucket's banded rows.
    let mut banded: Vec<(usize, u8)> = Vec::new();
    for bucket in rows.chunk_by(|a, b| a.start / 64 == b.start / 64) {
        banded.clear();
        let mut threshold = 0u16;
        for row in bucket {
            if u16::from(row.bump) < threshold {
                bumped += 1;
                continue;
            }
            let (mut slot, mut coeff) = (row.start, row.coeff);
            let fits = loop {
                steps += 1;
                let existing = cells[slot];
                if existing == 0 {
                    cells[slot] = coeff;
                    break true;
                }
                coeff ^= existing;
                if coeff == 0 {
                    break false;
                }
                let tz = coeff.trailing_zeros() as usize;
                slot += tz;
                coeff >>= tz;
            };
            if fits {
                banded.push((slot, row.bump));
                continue;
            }
            bumped += 1;
            threshold = *levels
                .iter()
                .find(|&&level| level > u16::from(row.bump))
                .expect("the top level is 256");
            // The bucket's rows below the threshold were banded last (the
            // bucket goes by decreasing bump byte): undo them, last first.
            while let Some(&(slot, bump)) = banded.last() {
                if u16::from(bump) >= threshold {
                    break;
                }
                cells[slot] = 0;
                banded.pop();
                bumped += 1;
            }
        }
    }
    (bumped, steps)
}

fn main() {
    let keys: usize = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 1_000_000,
        Some(Ok(n)) if n >= 1_000 => n,
        _ => {
            eprintln!("usage: bumped_ribbon_sim [keys, at least 1000]");
            std::process::exit(2);
        }
    };
    let hashes = key_hashes(7, keys);
    println!("{keys} keys; bits/key = slots x {COLUMNS_AVG} + thresholds + bumped keys x {NEXT_LAYER_BITS_PER_KEY}");
    println!("| segment keys | levels | eps | bumped | steps/key | bits/key (est.) |");
    println!("|---|---|---|---|---|---|");
    let level_sets: [&[u16]; 2] = [&[0, 256], &[0, 64, 128, 256]];
    for segment_keys in [16_384usize, 65_536] {
        let segments = keys.div_ceil(segment_keys).max(1);
        let mut by_segment = vec![Vec::new(); segments];
        for &h in &hashes {
            by_segment[fastrange64(h, segments as u64) as usize].push(h);
        }
        let mean = keys as f64 / segments as f64;
        for levels in level_sets {
            let threshold_bits = (levels.len() as f64).log2().ceil();
            for eps in [-0.03, -0.01, 0.0, 0.01] {
                let slots = ((mean * (1.0 + eps)).ceil() as usize).max(128);
                let (mut bumped, mut steps) = (0, 0);
                for segment in &by_segment {
                    let (b, s) = band_segment(segment, slots, levels);
                    bumped += b;
                    steps += s;
                }
                let total_slots = (slots * segments) as f64;
                let bits = total_slots * (COLUMNS_AVG + threshold_bits / 64.0)
                    + bumped as f64 * NEXT_LAYER_BITS_PER_KEY;
                println!(
                    "| {segment_keys} | {levels:?} | {eps:+.2} | {:.2}% | {:.2} | {:.3} |",
                    100.0 * bumped as f64 / keys as f64,
                    steps as f64 / keys as f64,
                    bits / keys as f64
                );
            }
        }
    }
}
