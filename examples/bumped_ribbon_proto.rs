//! A working prototype of a bumped Ribbon filter (BuRR: Dillinger,
//! Hübschle-Schneider, Sanders and Walzer, 2022), built and queried for
//! real, against the committed Bloom and Ribbon filters: bits per key,
//! measured false-positive rate, and query time in interleaved rounds.
//!
//! Not a filter format of the crate: the layout lives in this example
//! only, to measure whether a layout whose query needs no table read first
//! meets issue 3's query target with correct answers before a format is
//! committed to (docs/filters.md, "Twenty-third session"). Its build is a
//! plain one-row-at-a-time loop, not tuned; its build time is printed for
//! information only.
//!
//! Layout (format 0x06's rows and blocks, no shard table):
//!
//! * keys go to `segments` fixed segments of `S` slots (`S` a multiple
//!   of 64, about `(1 + eps)` times the mean keys per segment) by
//!   `fastrange64(hash, segments)`; `g = hash x REHASH_MULT`; the start is
//!   `fastrange64(g, S - 63)` in the segment; coefficients as format 0x06;
//!   the result the low `columns` bits of `g`;
//! * the first `lower` segments store `u - 1` result columns, the others
//!   `u` (the fractional split of format 0x06, by segment); a segment is
//!   `S / 64 + 1` blocks of one word per column;
//! * one bit per 64-slot bucket: set when the bucket's keys were *bumped*
//!   (a row of the bucket failed; the bucket's rows are then undone and
//!   all its keys go to the next layer);
//! * the bumped keys' filter: a format-0x06 filter of the committed
//!   `RibbonPolicy` (6.955 bits/key at 0.955%).
//!
//! A query: segment, `g`, start, then the bucket's bit; if set, the next
//! layer answers; else the two blocks' words of the segment's columns, the
//! window, the parities against the result, as format 0x06's narrow
//! query.
//!
//! Run: `cargo run --release --example bumped_ribbon_proto -- [keys]
//! [rounds] [segment_keys] [eps]` (defaults 1,000,000, 200, 16,384, 0).
//! Needs AVX-512 F, VL, VBMI2, VPOPCNTDQ and BMI2 for the timed query; the
//! answers are checked against a scalar query on every key.

use std::hint::black_box;
use std::time::Instant;

use sievedb::filter::bloom::{blocked_bloom_fp_rate, probes_for_bits_per_key};
use sievedb::filter::{BloomPolicy, Filter, FilterPolicy, RibbonPolicy};

#[path = "../benches/support/key_hashes.rs"]
mod key_hashes;
use key_hashes::key_hashes;

const REHASH_MULT: u64 = 0xbf58_476d_1ce4_e5b9;
const COEFF_MULT: u64 = 0xc28f_8282_2b65_0bed;
const BURST: usize = 20_000;

fn fastrange64(hash: u64, n: u64) -> u64 {
    ((hash as u128 * n as u128) >> 64) as u64
}

fn coeff_of(g: u64) -> u64 {
    let p = g as u128 * COEFF_MULT as u128;
    (p as u64 ^ (p >> 64) as u64) | 1
}

/// The prototype filter.
struct Bumped {
    segments: u64,
    /// Slots per segment (a multiple of 64).
    slots: usize,
    /// Start positions per segment: `slots - 63`.
    starts: u64,
    /// Blocks per segment: `slots / 64 + 1` (the last one holds no start:
    /// it is where the windows of the segment's last starts end).
    segment_blocks: usize,
    /// Blocks, counted over all segments, that store `upper - 1` columns
    /// (the first ones); the others store `upper`.
    lower_blocks: usize,
    upper: usize,
    /// The load masks of the lower and upper blocks' columns.
    lanes: [u8; 2],
    words: Vec<u64>,
    /// One bit per block (over all segments): its starts were bumped.
    bumped: Vec<u64>,
    next: Option<Filter>,
}

impl Bumped {
    /// Columns of block `block` (over all segments).
    fn columns_of(&self, block: usize) -> usize {
        self.upper - usize::from(block < self.lower_blocks)
    }

    /// Offset of block `block`'s first word.
    fn block_words(&self, block: usize) -> usize {
        block * self.upper - block.min(self.lower_blocks)
    }

    fn is_bumped(&self, block: usize) -> bool {
        self.bumped[block / 64] >> (block % 64) & 1 == 1
    }

    fn build(hashes: &[u64], segment_keys: usize, eps: f64) -> Bumped {
        let segments = hashes.len().div_ceil(segment_keys).max(1);
        let mean = hashes.len() as f64 / segments as f64;
        let slots = (((mean * (1.0 + eps)).ceil() as usize).div_ceil(64) * 64).max(128);
        // The fractional split: `share` of the blocks at `upper - 1` columns.
        let p = blocked_bloom_fp_rate(10.0, probes_for_bits_per_key(10.0));
        let upper = (1.0 / p).log2().ceil() as usize;
        let share = (p * (1u64 << upper) as f64 - 1.0).clamp(0.0, 1.0);
        let segment_blocks = slots / 64 + 1;
        let blocks = segments * segment_blocks;
        let lower_blocks = (share * blocks as f64).round() as usize;
        let lane_mask = |columns: usize| ((1u16 << columns) - 1) as u8;
        let mut filter = Bumped {
            segments: segments as u64,
            slots,
            starts: (slots - 63) as u64,
            segment_blocks,
            lower_blocks,
            upper,
            lanes: [lane_mask(upper), lane_mask(upper - 1)],
            words: Vec::new(),
            bumped: vec![0; blocks.div_ceil(64)],
            next: None,
        };
        filter.words = vec![0; filter.block_words(blocks)];
        let mut by_segment = vec![Vec::new(); segments];
        for &h in hashes {
            by_segment[fastrange64(h, segments as u64) as usize].push(h);
        }
        let mut next_keys = Vec::new();
        let mut coeffs = vec![0u64; slots];
        let mut results = vec![0u64; slots];
        let start_of = |g: u64| fastrange64(g, (slots - 63) as u64) as usize;
        for (segment, keys) in by_segment.iter().enumerate() {
            coeffs.fill(0);
            results.fill(0);
            let first_block = segment * segment_blocks;
            let mut rows: Vec<(u64, u64)> = keys
                .iter()
                .map(|&h| (h, h.wrapping_mul(REHASH_MULT)))
                .collect();
            rows.sort_unstable_by_key(|&(_, g)| start_of(g) / 64);
            for bucket in rows.chunk_by(|a, b| start_of(a.1) / 64 == start_of(b.1) / 64) {
                let block = first_block + start_of(bucket[0].1) / 64;
                let mask = (1u64 << filter.columns_of(block)) - 1;
                let mut filled = Vec::new();
                let fits = bucket.iter().all(|&(_, g)| {
                    let mut at = start_of(g);
                    let mut coeff = coeff_of(g);
                    let mut result = g & mask;
                    loop {
                        if coeffs[at] == 0 {
                            coeffs[at] = coeff;
                            results[at] = result;
                            filled.push(at);
                            return true;
                        }
                        coeff ^= coeffs[at];
                        result ^= results[at];
                        if coeff == 0 {
                            // A duplicate key (result 0) needs no row.
                            return result == 0;
                        }
                        let tz = coeff.trailing_zeros() as usize;
                        at += tz;
                        coeff >>= tz;
                    }
                });
                if !fits {
                    for at in filled {
                        coeffs[at] = 0;
                        results[at] = 0;
                    }
                    filter.bumped[block / 64] |= 1 << (block % 64);
                    next_keys.extend(bucket.iter().map(|&(h, _)| h));
                }
            }
            // Back substitution, last slot first: `state[c]` holds column
            // c's solution bits of the 64 slots after the current one. A
            // row whose key stores fewer columns than its pivot's block
            // solves the extra column from bits no key checks: harmless.
            let mut state = vec![0u64; upper];
            for at in (0..slots).rev() {
                let block = first_block + at / 64;
                let columns = filter.columns_of(block);
                for (c, s) in state.iter_mut().enumerate() {
                    let shifted = *s << 1;
                    let bit = ((coeffs[at] & shifted).count_ones() as u64 ^ results[at] >> c) & 1;
                    *s = shifted | bit;
                    if bit == 1 && c < columns {
                        let word = filter.block_words(block) + c;
                        filter.words[word] |= 1 << (at % 64);
                    }
                }
            }
        }
        if !next_keys.is_empty() {
            filter.next = Some(Filter::decode(RibbonPolicy::new(10.0).build(&next_keys)));
        }
        filter
    }

    /// The reference query, one column at a time.
    fn may_contain_scalar(&self, hash: u64) -> bool {
        let segment = fastrange64(hash, self.segments) as usize;
        let g = hash.wrapping_mul(REHASH_MULT);
        let start = fastrange64(g, self.starts) as usize;
        let block = segment * self.segment_blocks + start / 64;
        if self.is_bumped(block) {
            return self.next.as_ref().is_none_or(|f| f.may_contain(hash));
        }
        let columns = self.columns_of(block);
        let (at, next_at) = (self.block_words(block), self.block_words(block + 1));
        let coeff = coeff_of(g);
        let s = start % 64;
        (0..columns).all(|c| {
            let low = self.words[at + c];
            let high = self.words[next_at + c];
            let window = if s == 0 {
                low
            } else {
                low >> s | high << (64 - s)
            };
            (window & coeff).count_ones() as u64 & 1 == g >> c & 1
        })
    }

    fn bytes(&self) -> usize {
        self.words.len() * 8
            + self.bumped.len() * 8
            + self.next.as_ref().map_or(0, Filter::len_bytes)
    }
}

/// A bumped key's query, out of the hot path.
#[cold]
#[inline(never)]
fn next_layer(f: &Bumped, hash: u64) -> bool {
    f.next.as_ref().is_none_or(|next| next.may_contain(hash))
}

/// The narrow AVX-512 query (up to 8 columns).
///
/// # Safety
///
/// The CPU supports AVX-512 F, VL, VBMI2 and VPOPCNTDQ and BMI2, and the
/// filter has at most 8 columns.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
unsafe fn may_contain_avx512(f: &Bumped, hash: u64) -> bool {
    use std::arch::x86_64::*;
    let segment = fastrange64(hash, f.segments) as usize;
    let g = hash.wrapping_mul(REHASH_MULT);
    let start = fastrange64(g, f.starts) as usize;
    let block = segment * f.segment_blocks + start / 64;
    // SAFETY: `segment < segments` and `start / 64 < segment_blocks`, so
    // `block` is below `segments * segment_blocks`, which the bits cover.
    let bits = unsafe { *f.bumped.get_unchecked(block / 64) };
    if bits >> (block % 64) & 1 == 1 {
        return next_layer(f, hash);
    }
    // The start block's columns: `upper - 1` before `lower_blocks`.
    let lower = usize::from(block < f.lower_blocks);
    let lanes = f.lanes[lower];
    let at = block * f.upper - block.min(f.lower_blocks);
    let next = at + f.upper - lower;
    let words = f.words.as_ptr();
    // SAFETY: `block + 1` is a block of the same segment (`start / 64 <
    // slots / 64 = segment_blocks - 1`), so both blocks' words are inside
    // `words`; each load reads at most the start block's columns (`lanes`),
    // and the next block has at least as many; masked-off lanes are not
    // accessed.
    let (low, high) = unsafe {
        (
            _mm512_maskz_loadu_epi64(lanes, words.add(at).cast()),
            _mm512_maskz_loadu_epi64(lanes, words.add(next).cast()),
        )
    };
    let window = _mm512_shrdv_epi64(low, high, _mm512_set1_epi64(start as i64));
    let x = _mm512_and_si512(window, _mm512_set1_epi64(coeff_of(g) as i64));
    let odd = _mm512_test_epi64_mask(_mm512_popcnt_epi64(x), _mm512_set1_epi64(1));
    odd == g as u8 & lanes
}

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
    let mut arg = |default: f64| {
        args.next()
            .map_or(Some(default), |s| s.parse().ok())
            .unwrap_or_else(|| {
                eprintln!("usage: bumped_ribbon_proto [keys] [rounds] [segment_keys] [eps]");
                std::process::exit(2)
            })
    };
    let keys = (arg(1e6) as usize).max(1_000);
    let rounds = (arg(200.0) as usize).max(1);
    let segment_keys = (arg(16_384.0) as usize).max(256);
    let eps = arg(0.0).clamp(-0.2, 0.2);
    let present = key_hashes(1, keys);
    let absent = key_hashes(2, 1_000_000);
    let queries = key_hashes(3, BURST);

    let start = Instant::now();
    let bumped = Bumped::build(&present, segment_keys, eps);
    let build_ns = start.elapsed().as_nanos() as f64 / keys as f64;
    let bloom = Filter::decode(BloomPolicy::new(10.0).build(&present));
    let ribbon = Filter::decode(RibbonPolicy::new(10.0).build(&present));

    // Correctness first: no false negative, both queries agree.
    for &h in present.iter().chain(&absent) {
        // SAFETY: the features were checked above; at most 8 columns
        // (`upper_columns` is 7 at 10 Bloom-equivalent bits/key).
        let fast = unsafe { may_contain_avx512(&bumped, h) };
        assert_eq!(fast, bumped.may_contain_scalar(h), "queries differ");
    }
    assert!(
        present.iter().all(|&h| bumped.may_contain_scalar(h)),
        "a false negative"
    );
    let fp = |f: &dyn Fn(u64) -> bool| {
        absent.iter().filter(|&&h| f(h)).count() as f64 / absent.len() as f64
    };
    let blocks = bumped.segments as usize * bumped.segment_blocks;
    let bumped_buckets = (0..blocks).filter(|&b| bumped.is_bumped(b)).count();
    println!(
        "{keys} keys, {} segments of {} slots ({} of {blocks} blocks at {} columns), eps {eps}: {bumped_buckets} buckets bumped",
        bumped.segments,
        bumped.slots,
        bumped.lower_blocks,
        bumped.upper - 1,
    );
    println!(
        "| filter | bits/key | FP rate |\n|---|---|---|\n| bumped | {:.3} | {:.4}% |\n| ribbon 0x06 | {:.3} | {:.4}% |\n| bloom | {:.3} | {:.4}% |",
        bumped.bytes() as f64 * 8.0 / keys as f64,
        100.0 * fp(&|h| bumped.may_contain_scalar(h)),
        ribbon.len_bytes() as f64 * 8.0 / keys as f64,
        100.0 * fp(&|h| ribbon.may_contain(h)),
        bloom.len_bytes() as f64 * 8.0 / keys as f64,
        100.0 * fp(&|h| bloom.may_contain(h)),
    );
    println!("bumped build (plain loop, untuned): {build_ns:.1} ns/key");

    let names = ["bloom", "ribbon 0x06", "bumped"];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        for k in 0..names.len() {
            let which = (k + round) % names.len();
            let start = Instant::now();
            let hits = match which {
                0 => count(&queries, |h| bloom.may_contain(h)),
                1 => count(&queries, |h| ribbon.may_contain(h)),
                // SAFETY: as above.
                _ => count(&queries, |h| unsafe { may_contain_avx512(&bumped, h) }),
            };
            black_box(hits);
            times[which].push(start.elapsed().as_nanos() as f64 / BURST as f64);
        }
    }
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
    eprintln!("bumped_ribbon_proto needs an x86-64 CPU with AVX-512");
}
