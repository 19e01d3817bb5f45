//! Query cost of Ribbon layouts that need no shard table, against the
//! committed Bloom and Ribbon queries, in interleaved rounds.
//!
//! The committed Ribbon query (format 0x06) reads its shard's table entry
//! first and computes everything else from it: about 42 instructions on a
//! chain of dependent steps, about 2x the Bloom query at 1,000,000 keys.
//! Before a new format is built, this tool measures the query a table-free
//! layout would have. The candidates' solution bits are random, so their
//! answers mean nothing: what is timed is the instructions and memory
//! accesses of a query of that shape, nothing else (docs/filters.md,
//! "Twenty-third session").
//!
//! Both candidates have format 0x06's rows and blocks (64-bit coefficient
//! rows from a 128-bit product, 7 result columns, blocks of 64 slots stored
//! as 7 column words) over one band of all keys, `1.02 x keys` slots, the
//! start `fastrange64(hash, slots - 63)`: no shard, no seed, no clamp.
//!
//! * `global`: that query alone. A build of such a band fails for
//!   1,000,000 keys at any overhead that keeps the size near 7 bits/key;
//!   the row is the floor a table-free layout starts from.
//! * `global+bump`: the bumped Ribbon idea (BuRR: Dillinger,
//!   Hübschle-Schneider, Sanders and Walzer, 2022), which makes such a band
//!   buildable: one threshold byte per 64-slot bucket, read first; a key
//!   whose bump byte (bits 3-10 of its hash) is below its bucket's
//!   threshold was left out of this layer and is looked up in a second,
//!   smaller layer of the same shape. `BUMPED` (default 40) is the
//!   threshold of every fourth bucket (the others 0): about `BUMPED / 1024`
//!   of the keys, 4% by default, go on to the second layer.
//!
//! Run: `cargo run --release --example ribbon_layout_race -- [keys]
//! [rounds] [bumped]` (defaults 1,000,000 keys, 200 rounds of 20,000
//! queries per contestant, 40). Needs AVX-512 F, VL, VBMI2 and VPOPCNTDQ
//! with BMI2 (the narrow query's features).

use std::hint::black_box;
use std::time::Instant;

use sievedb::filter::{BloomPolicy, Filter, FilterPolicy, RibbonPolicy};

#[path = "../benches/support/key_hashes.rs"]
mod key_hashes;
use key_hashes::key_hashes;

/// Queries per contestant and round.
const BURST: usize = 20_000;
/// Result columns of the candidates (format 0x06 at 10 Bloom-equivalent
/// bits/key stores 6 or 7).
const COLUMNS: usize = 7;
/// Format 0x06's coefficient multiplier.
const COEFF_MULT: u64 = 0xc28f_8282_2b65_0bed;

/// One layer of a candidate layout: the solution (random), the bucket
/// thresholds and the number of start positions.
struct Layer {
    words: Vec<u64>,
    thresholds: Vec<u8>,
    starts: u64,
}

impl Layer {
    /// A layer of `slots` slots (at least 64) whose every fourth bucket has
    /// threshold `bumped`.
    fn new(slots: usize, tag: u64, bumped: u8) -> Layer {
        let blocks = slots / 64 + 2;
        let words = key_hashes(tag, blocks * COLUMNS);
        let thresholds = key_hashes(tag + 1, blocks)
            .iter()
            .map(|h| if h % 4 == 0 { bumped } else { 0 })
            .collect();
        Layer {
            words,
            thresholds,
            starts: (slots - 63) as u64,
        }
    }
}

fn fastrange64(hash: u64, n: u64) -> u64 {
    ((hash as u128 * n as u128) >> 64) as u64
}

/// The candidate query: `second` is the layer a bumped key goes on to
/// (`None`: no thresholds are read, the `global` candidate).
///
/// # Safety
///
/// The CPU supports AVX-512 F, VL, VBMI2 and VPOPCNTDQ and BMI2.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
unsafe fn query(layer: &Layer, second: Option<&Layer>, hash: u64) -> bool {
    use std::arch::x86_64::*;
    let mut layer = layer;
    let mut hash = hash;
    let mut start = fastrange64(hash, layer.starts);
    if let Some(next) = second {
        // SAFETY: `start < starts = slots - 63` (`Layer::new`), so its
        // bucket is below `slots / 64 + 2`, the thresholds' length.
        let threshold = unsafe { *layer.thresholds.get_unchecked((start / 64) as usize) };
        if ((hash >> 3) as u8) < threshold {
            // Bumped: the second layer, with another hash of the key.
            layer = next;
            hash = hash.rotate_left(17);
            start = fastrange64(hash, layer.starts);
        }
    }
    let block = (start / 64) as usize;
    let at = layer.words.as_ptr().wrapping_add(block * COLUMNS);
    let lanes = (1u8 << COLUMNS) - 1;
    // SAFETY: `start < slots - 63` (`Layer::new`), so blocks `block` and
    // `block + 1` are below `slots / 64 + 2` and both loads read the 7
    // words of a block inside `words` (no per-query check, as the
    // committed query's decode checks its table once); masked-off lanes
    // are not accessed.
    let (low, high) = unsafe {
        (
            _mm512_maskz_loadu_epi64(lanes, at.cast()),
            _mm512_maskz_loadu_epi64(lanes, at.wrapping_add(COLUMNS).cast()),
        )
    };
    let product = (hash as u128).wrapping_mul(COEFF_MULT as u128);
    let coeff = (product as u64 ^ (product >> 64) as u64) | 1;
    let window = _mm512_shrdv_epi64(low, high, _mm512_set1_epi64(start as i64));
    let bits = _mm512_and_si512(window, _mm512_set1_epi64(coeff as i64));
    let odd = _mm512_test_epi64_mask(_mm512_popcnt_epi64(bits), _mm512_set1_epi64(1));
    odd == hash as u8 & lanes
}

/// How many of `hashes` `contains` says may be present, one query at a
/// time (as `examples/filter_race.rs` counts).
#[inline(never)]
fn count(hashes: &[u64], contains: impl Fn(u64) -> bool) -> usize {
    hashes
        .iter()
        .map(|&h| usize::from(contains(black_box(h))))
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::arch::is_x86_feature_detected as has;
    if !(has!("avx512f")
        && has!("avx512vl")
        && has!("avx512vbmi2")
        && has!("avx512vpopcntdq")
        && has!("bmi2"))
    {
        eprintln!("this CPU lacks AVX-512 F, VL, VBMI2, VPOPCNTDQ or BMI2");
        std::process::exit(1);
    }
    let mut args = std::env::args().skip(1);
    let mut arg = |default: u64| {
        args.next()
            .map_or(Some(default), |s| s.parse().ok())
            .unwrap_or_else(|| {
                eprintln!("usage: ribbon_layout_race [keys] [rounds] [bumped 0-255]");
                std::process::exit(2)
            })
    };
    let keys = arg(1_000_000).max(1000) as usize;
    let rounds = arg(200).max(1) as usize;
    let bumped = arg(40).min(255) as u8;
    let present = key_hashes(1, keys);
    let queries = key_hashes(2, BURST);
    let bloom = Filter::decode(BloomPolicy::new(10.0).build(&present));
    let ribbon = Filter::decode(RibbonPolicy::new(10.0).build(&present));
    let first = Layer::new(keys * 102 / 100, 3, bumped);
    let second = Layer::new(keys / 20 + 64, 5, 0);
    let names = ["bloom", "ribbon 0x06", "global", "global+bump"];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        for k in 0..names.len() {
            let which = (k + round) % names.len();
            let start = Instant::now();
            let hits = match which {
                0 => count(&queries, |h| bloom.may_contain(h)),
                1 => count(&queries, |h| ribbon.may_contain(h)),
                // SAFETY: the CPU's features were checked above.
                2 => count(&queries, |h| unsafe { query(&first, None, h) }),
                _ => count(&queries, |h| unsafe { query(&first, Some(&second), h) }),
            };
            black_box(hits);
            times[which].push(start.elapsed().as_nanos() as f64 / BURST as f64);
        }
    }
    println!("{keys} keys, {rounds} rounds of {BURST} queries, threshold {bumped} in every fourth bucket");
    for (name, t) in names.iter().zip(&times) {
        let ratios: Vec<f64> = t.iter().zip(&times[0]).map(|(x, b)| x / b).collect();
        println!(
            "{name:>12}: {:.3} ns per query, {:.3}x the Bloom query (median of per-round ratios)",
            median(t.clone()),
            median(ratios)
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("ribbon_layout_race needs an x86-64 CPU with AVX-512");
}
