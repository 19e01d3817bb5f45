//! Cache-local blocked Bloom filter.
//!
//! # Layout
//!
//! ```text
//! +------------------------------+----------------+-----------+-----------+
//! | num_lines x 64-byte lines    | num_lines: u32 | probes: u8| 0x07 (id) |
//! +------------------------------+----------------+-----------+-----------+
//!                                  little endian     1..=30     FORMAT_BLOOM
//! ```
//!
//! `num_lines = ceil(ceil(n x bits_per_key) / 512)`, at least 1 for a
//! non-empty key set and 0 for an empty one (which rejects every key). Bit `b`
//! of a line is bit `b % 8` of byte `b / 8`; equivalently bit `b % 64` of the
//! little-endian 64-bit word `b / 64`, which is how the code reads and
//! writes it. The earlier formats, ids `0x04` ([`FORMAT_BLOOM_V2`]) and `0x01`
//! ([`FORMAT_BLOOM_V1`]), have the same layout and trailer and differ only in
//! how probes are drawn (below); they are still read, never written.
//!
//! # Probing
//!
//! Every key touches exactly one 64-byte (512-bit) line, so a query costs one
//! cache miss however many probes it makes. From the key's 64-bit hash `h`:
//!
//! * the low 32 bits choose the line: `line = (lo32 * num_lines) >> 32`
//!   (fastrange, no modulo);
//! * the high 32 bits, `s = hi32 | 1` (odd), place the probes by
//!   multiplication: a probe is the top 9 bits of `s x c` (mod 2^32) for a
//!   multiplier `c`, a bit position in the line. Multiplying by an odd
//!   number is a bijection on 32-bit words that moves low bits up, so the
//!   positions behave as independent without a second hash, and all of a
//!   key's probes are independent multiplications, computed at once in
//!   vector lanes.
//!
//! **Format 0x07** (what [`BloomPolicy`] builds): the probes are distinct
//! *by construction*. Bits 5..12 of the hash, `t = (h >> 5) & 127`, pick one
//! of 128 fixed random *shapes*, and probe `i` uses the multiplier
//! `c[t][i] = e[t][i] x 2^23 + L[t]`: the shape's 32 top-9-bit values
//! `e[t][i]` are distinct, and its low 23 bits `L[t]` are shared. Then
//! `s x c[t][i] = s x L[t] + (s x e[t][i]) x 2^23`, so probe `i` is
//! `A + s x e[t][i] mod 512` with `A` the top 9 bits of `s x L[t]`: an
//! affine map of distinct values, one-to-one because `s` is odd. A key's
//! probes never repeat, so no query looks for repeats. The shapes matter:
//! with one shape the probe sets of all keys are affine images of one set,
//! only 2^17 of them, whose shared structure measured 1.107% false
//! positives at 10 bits/key; with 128 random shapes the rate is within
//! 0.001% of that of uniformly random distinct probes (0.9558% measured,
//! 0.9548% theory;
//! `examples/bloom_probe_schemes.rs`, docs/filters.md). The shapes are
//! generated at compile time from a fixed SplitMix64 seed
//! (`shape_multipliers` below) and are part of the format. (Bits 5..12 take
//! part in choosing the line only in filters of more than 2^20 lines, 64
//! MiB.)
//!
//! The earlier formats draw probes from a multiply chain: chain value `i`
//! is the top 9 bits of `s x 0x9e3779b9^i`. **Format 0x04** takes the
//! first `probes` *distinct* chain values (repeats skipped, sampling
//! without replacement), so a query had to find the repeats of each key
//! whose first probe bits were all set, and **format 0x01** takes the first
//! `probes` chain values with `s = hi32`, repeats included, so about 3% of
//! keys (at 6 probes) test only 5 distinct bits (0.966% false positives at
//! 10 bits/key instead of 0.955%).
//!
//! The portable query tests every probe and ANDs the results (no early
//! exit). With AVX-512 (F, CD, VL, with POPCNT and BMI2) or AVX2, detected
//! at run time once per decoded filter, the probes are computed and tested
//! in vector lanes, one step. Format 0x07 needs one multiply by the shape's
//! multipliers (a 32-byte load from a 4 KiB table), two shifts, one permute
//! of the line, one rotate and one test, without a branch, for up to 8
//! probes with AVX-512 and AVX2 (the AVX2 path fetches the words with two
//! permutes and a blend) and up to 16 with AVX-512; more take the scalar
//! code. For the earlier formats both vector paths first test the first
//! `probes` chain values, which are all probes whatever the repeats, and
//! answer "absent" at the first clear bit among them. Only a format-0x04
//! key whose bits are all set looks for repeats: the AVX-512 path takes 16
//! chain values, finds repeats with the conflict instruction and picks the
//! first `probes` distinct lanes with `pdep`, without a branch (it falls
//! back to the scalar code above 16 probes, from 34 bits/key, or when 16
//! values hold fewer than `probes` distinct ones, which no odd state does
//! below 11 probes); the AVX2 path takes 8, compares the lanes with rotated
//! copies of themselves and falls back to the scalar code for keys whose
//! first probe bits are all set and repeat (~3% of present keys at 6
//! probes) and for more than 8 probes (over 14 bits/key). Every path gives
//! the same answers (unit-tested against a byte-level reference for every
//! probe count and format).
//!
//! A decoded [`Filter`](super::Filter) calls the query through one function
//! pointer chosen at decode for its scheme, probe count and CPU, and reads
//! its line without a bounds check (the decode checked the size once); the
//! most common query, format 0x07 with at most 8 probes on AVX-512, is
//! called directly instead (measured faster than the indirect call).
//!
//! # Probe count
//!
//! In a standard Bloom filter the best probe count is `bits/key x ln 2`. In a
//! blocked filter the load of a line varies (Poisson around its mean), and
//! heavily loaded lines dominate the false-positive rate; fewer probes than
//! the standard optimum do better. The table in [`probes_for_bits_per_key`]
//! (millibits/key upper bound to probe count) follows RocksDB's measurements
//! for 512-bit lines, about `bits/key / 2`.
//!
//! # False-positive rate
//!
//! With `lambda = 512 / bits_per_key` keys per line on average, the number
//! `j` of keys in the line an absent key maps to is Poisson(`lambda`). Each
//! of those keys set a uniformly random set of `k` distinct bits, and the
//! absent key is a false positive when all of its own `k` distinct bits are
//! set. Tracking how many of those `k` bits are covered after each key (a
//! key covers `x` of the `u` still clear ones with the hypergeometric
//! probability `C(u, x) C(512 - u, k - x) / C(512, k)`) gives the exact rate,
//! [`blocked_bloom_fp_rate`]: 0.955% at 10 bits/key and 6 probes, against
//! 0.819% for a standard Bloom filter with 7 probes. It holds for formats
//! 0x07 and 0x04 (measured within sampling error). For the first format,
//! whose probes may repeat, [`blocked_bloom_fp_rate_with_replacement`] does
//! the same over single probes (0.966% at 10 bits/key). The textbook
//! shortcut `(1 - (1 - 1/512)^(j k))^k` raises the *expected* fill to the
//! k-th power and comes out about 1% low at 10 bits/key (Jensen: the fill
//! varies from line to line *and* within a line).

use super::{
    fastrange32, FilterPolicy, BUILTIN_NAME_PREFIX, FORMAT_BLOOM, FORMAT_BLOOM_V1, FORMAT_BLOOM_V2,
};
use crate::error::{Error, Result};
use std::sync::Arc;

/// Bytes per cache line, and per filter line.
pub const LINE_BYTES: usize = 64;
const LINE_BITS: u32 = (LINE_BYTES * 8) as u32;
/// Bytes after the bit array: num_lines (4), probes (1), format id (1).
pub const TRAILER_BYTES: usize = 6;
/// Largest accepted bits per key.
pub const MAX_BITS_PER_KEY: f64 = 100.0;
const MAX_PROBES: u32 = 30;
const PROBE_MULTIPLIER: u32 = 0x9e37_79b9;

/// `PROBE_MULTIPLIER^i` for `i` in `0..32`: probe `i` of a key is
/// `state * PROBE_MULTIPLIER^i` (the same value as multiplying `i` times in
/// a row), so all probes of a key are independent multiplications the CPU
/// can run in parallel instead of one chain of dependent ones.
const PROBE_POWERS: [u32; 32] = {
    let mut powers = [1u32; 32];
    let mut i = 1;
    while i < 32 {
        powers[i] = powers[i - 1].wrapping_mul(PROBE_MULTIPLIER);
        i += 1;
    }
    powers
};

/// `PROBE_MULTIPLIER^i` for `i` in `0..CHAIN_LIMIT`: the chain values a
/// key's distinct probes are drawn from (see [`visit_distinct_probes`]).
const CHAIN_POWERS: [u32; CHAIN_LIMIT] = {
    let mut powers = [1u32; CHAIN_LIMIT];
    let mut i = 1;
    while i < CHAIN_LIMIT {
        powers[i] = powers[i - 1].wrapping_mul(PROBE_MULTIPLIER);
        i += 1;
    }
    powers
};

/// Number of shapes of format 0x07 (see the module documentation).
const SHAPES: usize = 128;
/// Values per shape: at least [`MAX_PROBES`].
const SHAPE_VALUES: usize = 32;
/// Seed of the SplitMix64 stream the shapes are drawn from. Part of format
/// 0x07: other shapes would place other probes.
const SHAPE_SEED: u64 = 0x5eed_b100_f11e_7e5d;

/// One step of SplitMix64: the next state and its output.
pub(crate) const fn splitmix64(state: u64) -> (u64, u64) {
    let state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (state, z ^ (z >> 31))
}

/// The multipliers of format 0x07: `[t][i]` is probe `i`'s multiplier in
/// shape `t`, `e x 2^23 + L`. From the SplitMix64 stream seeded with
/// [`SHAPE_SEED`], each shape takes one output for `L` (its low 23 bits,
/// forced odd), then outputs whose top 9 bits become the values `e`, an
/// output whose value the shape already holds being skipped, until it has
/// [`SHAPE_VALUES`] distinct values.
const fn shape_multipliers() -> [[u32; SHAPE_VALUES]; SHAPES] {
    let mut out = [[0u32; SHAPE_VALUES]; SHAPES];
    let mut state = SHAPE_SEED;
    let mut t = 0;
    while t < SHAPES {
        let (next, r) = splitmix64(state);
        state = next;
        let low = (r as u32 & 0x7f_ffff) | 1;
        let mut seen = [0u64; 8];
        let mut i = 0;
        while i < SHAPE_VALUES {
            let (next, r) = splitmix64(state);
            state = next;
            let value = (r >> 55) as u32;
            let (word, bit) = ((value >> 6) as usize, 1u64 << (value & 63));
            if seen[word] & bit == 0 {
                seen[word] |= bit;
                out[t][i] = value << 23 | low;
                i += 1;
            }
        }
        t += 1;
    }
    out
}

/// Every shape, all [`SHAPE_VALUES`] multipliers: the build and the scalar
/// query read these.
const SHAPE_MULTIPLIERS: [[u32; SHAPE_VALUES]; SHAPES] = shape_multipliers();

/// The first `N` multipliers of every shape, 64-byte aligned so that one
/// vector load reads a shape's entry: `N = 8` is 4 KiB (64 cache lines),
/// what queries of up to 8 probes touch.
#[repr(C, align(64))]
struct ShapeLanes<const N: usize>([[u32; N]; SHAPES]);

impl<const N: usize> ShapeLanes<N> {
    const fn first_lanes() -> ShapeLanes<N> {
        let mut out = [[0u32; N]; SHAPES];
        let mut t = 0;
        while t < SHAPES {
            let mut i = 0;
            while i < N {
                out[t][i] = SHAPE_MULTIPLIERS[t][i];
                i += 1;
            }
            t += 1;
        }
        ShapeLanes(out)
    }
}

/// Lanes 0..8 of every shape, for the 8-lane vector queries.
///
/// A constant reference, not a `static`: a `static` of this crate is an
/// exported symbol (generic code instantiated in a user's crate may name
/// it), so the query reached it through the global offset table, one load
/// more before the shape's; the constant's table is private to each crate
/// that uses it, and its address is one `lea`.
#[cfg(target_arch = "x86_64")]
const SHAPES_8: &ShapeLanes<8> = &ShapeLanes::first_lanes();
/// Lanes 0..16 of every shape, for the AVX-512 query of 9 to 16 probes
/// (a constant reference for the reason given at [`SHAPES_8`]).
#[cfg(target_arch = "x86_64")]
const SHAPES_16: &ShapeLanes<16> = &ShapeLanes::first_lanes();

/// The byte offset of a key's shape in [`SHAPES_8`] (32-byte entries):
/// `t x 32` with `t = (h >> 5) & 127`, which is `h & 0xfe0`.
const SHAPE_OFFSET_MASK_8: usize = (SHAPES - 1) << 5;

/// The shape of format 0x07 that `key_hash` uses.
#[inline(always)]
fn shape_index(key_hash: u64) -> usize {
    (key_hash as usize >> 5) & (SHAPES - 1)
}

/// Probe `i` of `key_hash` in format 0x07: a bit position in the line.
#[inline(always)]
fn shape_probe(key_hash: u64, i: usize) -> u32 {
    let state = (key_hash >> 32) as u32 | 1;
    state.wrapping_mul(SHAPE_MULTIPLIERS[shape_index(key_hash)][i % SHAPE_VALUES]) >> 23
}

/// The mean number of keys per line at `bits_per_key`, for the
/// false-positive theory; `None` when the rate is simply 1: no probes, a
/// non-positive or NaN size, or over 100,000 keys per line (every line
/// saturated).
fn keys_per_line(bits_per_key: f64, probes: u32) -> Option<f64> {
    if bits_per_key.is_nan() || bits_per_key <= 0.0 || probes == 0 {
        return None;
    }
    let lambda = LINE_BITS as f64 / bits_per_key;
    (lambda <= 100_000.0).then_some(lambda)
}

/// The probe count that minimises the false-positive rate of a 512-bit
/// blocked Bloom filter at `bits_per_key` (RocksDB's measured table).
pub fn probes_for_bits_per_key(bits_per_key: f64) -> u32 {
    let millibits = (bits_per_key * 1000.0).round() as i64;
    const TABLE: [(i64, u32); 12] = [
        (2080, 1),
        (3580, 2),
        (5100, 3),
        (6640, 4),
        (8300, 5),
        (10070, 6),
        (11720, 7),
        (14001, 8),
        (16050, 9),
        (18300, 10),
        (22001, 11),
        (25501, 12),
    ];
    for (bound, probes) in TABLE {
        if millibits <= bound {
            return probes;
        }
    }
    // Beyond the table the optimum keeps growing at about bits/key / 2.
    (millibits / 2000).clamp(12, i64::from(MAX_PROBES)) as u32
}

/// Expected false-positive rate of a 512-bit blocked Bloom filter as
/// [`BloomPolicy`] builds it (distinct probes) with `bits_per_key` bits per
/// key and `probes` probes, for a large key set: averaged over the Poisson
/// number of keys in a line, each key setting a uniformly random set of
/// `probes` distinct bits (see the module documentation).
///
/// Returns 1 for NaN or non-positive `bits_per_key` or zero probes. Probe
/// counts above 30 (the most a filter can store) are computed as 30. Below
/// 0.00512 bits/key (over 100,000 keys per line) every line is saturated and
/// the rate is returned as 1.
pub fn blocked_bloom_fp_rate(bits_per_key: f64, probes: u32) -> f64 {
    let Some(lambda) = keys_per_line(bits_per_key, probes) else {
        return 1.0;
    };
    let k = probes.min(MAX_PROBES) as usize;
    let m = LINE_BITS as usize;
    // hit[u][x]: probability that a key's k distinct probes cover exactly
    // x of u given clear bits (hypergeometric: C(u, x) C(m - u, k - x) /
    // C(m, k)), computed through logarithms of binomials.
    let ln_choose =
        |n: usize, r: usize| -> f64 { (1..=r).map(|i| ((n - r + i) as f64 / i as f64).ln()).sum() };
    let ln_all = ln_choose(m, k);
    let hit: Vec<Vec<f64>> = (0..=k)
        .map(|u| {
            (0..=u)
                .map(|x| (ln_choose(u, x) + ln_choose(m - u, k - x) - ln_all).exp())
                .collect()
        })
        .collect();
    // covered[h]: probability that exactly h of the absent key's k bits are
    // set after the keys placed so far; a false positive needs all k.
    let mut covered = vec![0.0f64; k + 1];
    covered[0] = 1.0;
    let ln_lambda = lambda.ln();
    let upper = (lambda + 12.0 * lambda.sqrt() + 30.0).ceil() as u64;
    // ln P(j = 0): e^-lambda itself underflows below ~0.69 bits/key.
    let mut ln_poisson = -lambda;
    let mut total = 0.0;
    for j in 0..=upper {
        if j > 0 {
            ln_poisson += ln_lambda - (j as f64).ln();
        }
        total += ln_poisson.exp() * covered[k];
        let mut next = vec![0.0f64; k + 1];
        for (h, &p_h) in covered.iter().enumerate() {
            if p_h == 0.0 {
                continue;
            }
            for (x, &p_x) in hit[k - h].iter().enumerate() {
                next[h + x] += p_h * p_x;
            }
        }
        covered = next;
    }
    total.clamp(0.0, 1.0)
}

/// Expected false-positive rate of a 512-bit blocked Bloom filter in the
/// first format ([`FORMAT_BLOOM_V1`], probes drawn with replacement) with
/// `bits_per_key` bits per key and `probes` probes, for a large key set:
/// averaged over the Poisson number of keys in a line and over where each
/// probe lands, assuming a uniform hash (see the module documentation).
///
/// Returns 1 for NaN or non-positive `bits_per_key` or zero probes. Probe
/// counts above 30 (the most a filter can store) are computed as 30. Below
/// 0.00512 bits/key (over 100,000 keys per line) every line is saturated and
/// the rate is returned as 1.
pub fn blocked_bloom_fp_rate_with_replacement(bits_per_key: f64, probes: u32) -> f64 {
    let Some(lambda) = keys_per_line(bits_per_key, probes) else {
        return 1.0;
    };
    let k = probes.min(MAX_PROBES) as usize;
    let m = LINE_BITS as f64;

    // distinct[d]: probability that the absent key's k probes hit exactly d
    // distinct bits.
    let mut distinct = vec![0.0f64; k + 1];
    distinct[0] = 1.0;
    for _ in 0..k {
        for d in (1..=k).rev() {
            distinct[d] =
                distinct[d] * (d as f64 / m) + distinct[d - 1] * ((m - (d - 1) as f64) / m);
        }
        distinct[0] = 0.0;
    }

    // Poisson(lambda, j) is carried as its logarithm: computed directly,
    // e^-lambda underflows to 0 once lambda passes ~745 (below 0.69
    // bits/key) and the sum would wrongly come out as 0.
    let ln_lambda = lambda.ln();
    let upper = (lambda + 12.0 * lambda.sqrt() + 30.0).ceil() as u64;
    let mut total = 0.0;
    for (d, &p_d) in distinct.iter().enumerate().skip(1) {
        if p_d == 0.0 {
            continue;
        }
        // covered[h]: probability that exactly h of d given bits are set
        // after the probes of the keys placed so far.
        let mut covered = vec![0.0f64; d + 1];
        covered[0] = 1.0;
        let mut ln_poisson = -lambda; // ln P(j = 0)
        let mut sum_j = 0.0;
        for j in 0..=upper {
            if j > 0 {
                ln_poisson += ln_lambda - (j as f64).ln();
            }
            sum_j += ln_poisson.exp() * covered[d];
            // The next key's k probes: each sets one of the d - h still
            // clear bits with probability (d - h) / 512.
            for _ in 0..k {
                for h in (1..=d).rev() {
                    covered[h] = covered[h] * (1.0 - (d - h) as f64 / m)
                        + covered[h - 1] * ((d - h + 1) as f64 / m);
                }
                covered[0] *= 1.0 - d as f64 / m;
            }
        }
        total += p_d * sum_j;
    }
    total.clamp(0.0, 1.0)
}

/// Eight 32-bit lanes, 32-byte aligned: one vector load that never spans
/// two cache lines. Unaligned, the lanes of a layout inside a `Filter` on
/// the stack spanned two lines in some runs and not in others (the stack's
/// place varies from run to run), which made one binary's query time
/// bimodal: 1.2 or 1.7 ns at 10,000 keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(32))]
struct EightLanes([u32; 8]);

/// Parameters of a blocked Bloom filter read from its trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BloomLayout {
    num_lines: u32,
    probes: u32,
    /// How the probes of a key are drawn (from the format id).
    scheme: ProbeScheme,
    /// The query code path: the best this CPU runs (detected at parse), or
    /// the one [`on_path`](Self::on_path) forced. Same answers on every
    /// path.
    path: QueryPath,
    /// The query code: `path` specialised for this layout's scheme, probe
    /// count and size (see [`query_fn`](Self::query_fn)).
    query: Query,
    /// 1 in the lanes of the first eight probes that exist (all eight from
    /// 8 probes up), 0 in the rest: the vector paths shift (AVX2) or rotate
    /// (AVX-512) these into probe masks, so absent probes test nothing. Precomputed so a query does
    /// no lane arithmetic.
    first_lane_ones: EightLanes,
    /// 0 in the probe lanes, a distinct value above 511 in the others: ORed
    /// into the lanes' bit positions before the AVX2 repeat check, so
    /// lanes past the last probe never match anything.
    repeat_sentinels: EightLanes,
    /// The low `probes` bits set (at most 16): the AVX-512 path's probe
    /// lanes, or the pattern it deposits into the lanes of first occurrences.
    probe_lanes: u32,
    /// `query == Query::Avx2Shapes`, kept apart from `query` so that
    /// `Filter::may_contain`'s two tests for its inline queries stay two
    /// tests of two bytes: on one byte LLVM merged them into a switch that
    /// tested the AVX2 value first, two more instructions before every
    /// AVX-512 query in a loop whose test is not hoisted.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    shapes_avx2: bool,
}

impl BloomLayout {
    /// Reads and validates the trailer. `None` if the bytes are not a
    /// consistent blocked Bloom filter.
    pub fn parse(bytes: &[u8]) -> Option<BloomLayout> {
        let scheme = match bytes.last() {
            Some(&FORMAT_BLOOM) => ProbeScheme::Shapes,
            Some(&FORMAT_BLOOM_V2) => ProbeScheme::Distinct,
            Some(&FORMAT_BLOOM_V1) => ProbeScheme::WithReplacement,
            _ => return None,
        };
        if bytes.len() < TRAILER_BYTES {
            return None;
        }
        let t = &bytes[bytes.len() - TRAILER_BYTES..];
        let num_lines = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        let probes = t[4] as u32;
        if probes == 0 || probes > MAX_PROBES {
            return None;
        }
        let body = (num_lines as u64).checked_mul(LINE_BYTES as u64)?;
        if body + TRAILER_BYTES as u64 != bytes.len() as u64 {
            return None;
        }
        let layout = BloomLayout {
            num_lines,
            probes,
            scheme,
            path: QueryPath::Portable,
            query: Query::RejectAll,
            first_lane_ones: EightLanes(std::array::from_fn(|lane| {
                u32::from((lane as u32) < probes)
            })),
            repeat_sentinels: EightLanes(std::array::from_fn(|lane| {
                if (lane as u32) < probes {
                    0
                } else {
                    (lane as u32 + 1) << 12
                }
            })),
            probe_lanes: ((1u64 << probes.min(16)) - 1) as u32,
            shapes_avx2: false,
        };
        Some(layout.with_path(QueryPath::detect()))
    }

    /// The layout of an empty filter (no lines, rejects every key), for
    /// decoded filters of other kinds, which carry one they never read.
    pub(crate) fn empty() -> BloomLayout {
        BloomLayout {
            num_lines: 0,
            probes: 1,
            scheme: ProbeScheme::Shapes,
            path: QueryPath::Portable,
            query: Query::RejectAll,
            first_lane_ones: EightLanes([1, 0, 0, 0, 0, 0, 0, 0]),
            repeat_sentinels: EightLanes(std::array::from_fn(|lane| {
                if lane == 0 {
                    0
                } else {
                    (lane as u32 + 1) << 12
                }
            })),
            probe_lanes: 1,
            shapes_avx2: false,
        }
    }

    /// This layout queried through `path`, with the query function chosen
    /// for it.
    fn with_path(self, path: QueryPath) -> BloomLayout {
        let query = Query::choose(path, self.scheme, self.probes, self.num_lines);
        BloomLayout {
            path,
            query,
            #[cfg(target_arch = "x86_64")]
            shapes_avx2: query == Query::Avx2Shapes,
            ..self
        }
    }

    /// Number of 64-byte lines.
    pub fn num_lines(&self) -> u32 {
        self.num_lines
    }

    /// Probes per key.
    pub fn probes(&self) -> u32 {
        self.probes
    }

    /// This layout, queried through the named code path (`"portable"`,
    /// `"avx2"` or `"avx512"`) instead of the best one for this CPU; `None`
    /// if the name is unknown or the CPU cannot run that path. For
    /// benchmarks that compare the paths on one machine.
    #[doc(hidden)]
    pub fn on_path(self, name: &str) -> Option<BloomLayout> {
        let path = QueryPath::available()
            .into_iter()
            .find(|p| p.name() == name)?;
        Some(self.with_path(path))
    }

    /// The index of the line `key_hash` maps to (the line every query of it
    /// reads), or `None` for a filter with no lines. Always below
    /// [`num_lines`](Self::num_lines). Batched queries use it to prefetch a
    /// key's line ahead of the query.
    #[inline(always)]
    pub(crate) fn line_index(&self, key_hash: u64) -> Option<usize> {
        if self.num_lines == 0 {
            return None;
        }
        Some(fastrange32(key_hash as u32, self.num_lines) as usize)
    }

    /// Whether a key's probes are distinct bits (formats [`FORMAT_BLOOM`]
    /// and [`FORMAT_BLOOM_V2`]) or were drawn with replacement (the first
    /// format, [`FORMAT_BLOOM_V1`]).
    pub fn distinct_probes(&self) -> bool {
        self.scheme != ProbeScheme::WithReplacement
    }

    /// The format id these bytes carry.
    pub fn format(&self) -> u8 {
        match self.scheme {
            ProbeScheme::Shapes => FORMAT_BLOOM,
            ProbeScheme::Distinct => FORMAT_BLOOM_V2,
            ProbeScheme::WithReplacement => FORMAT_BLOOM_V1,
        }
    }

    /// Whether [`Filter`](super::Filter) may call [`shapes8_avx512`]
    /// directly for this layout: the query its layout chose is that one.
    #[inline(always)]
    pub(crate) fn queries_shapes8_avx512(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.query == Query::Avx512Shapes8
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Whether [`Filter`](super::Filter) may call [`shapes_avx2`]
    /// directly for this layout: the query its layout chose is that one
    /// (format 0x07, at most 8 probes, AVX2 without AVX-512).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) fn queries_shapes_avx2(&self) -> bool {
        self.shapes_avx2
    }

    /// Queries `bytes` (already validated by [`parse`](Self::parse)).
    ///
    /// Bytes that do not match this layout (too short) answer `true`.
    #[inline]
    pub fn may_contain(&self, bytes: &[u8], key_hash: u64) -> bool {
        match (self.num_lines as usize).checked_mul(LINE_BYTES) {
            Some(needed) if bytes.len() >= needed => {
                let lines = CheckedLines {
                    layout: self,
                    lines: bytes,
                };
                // SAFETY: the function `query_fn` chose for this layout, on
                // lines that `bytes` holds and that outlive the call.
                unsafe { self.query_fn()(&lines, key_hash) }
            }
            _ => true,
        }
    }

    /// The function that answers this layout's queries on a filter `F`:
    /// [`Filter`](super::Filter) stores it and calls it directly, so a query
    /// is one indirect call, with no branch on the filter's kind, the probe
    /// scheme or the CPU, and no bounds check (`F` promises the lines are
    /// there).
    pub(crate) fn query_fn<F: BloomLines>(&self) -> QueryFn<F> {
        self.query.function()
    }

    /// Like [`may_contain`](Self::may_contain) but always on the portable
    /// (non-SIMD) path that CPUs without AVX2 take: same answers, exposed so
    /// benchmarks can compare the two paths on one machine.
    pub fn may_contain_portable(&self, bytes: &[u8], key_hash: u64) -> bool {
        let block = match line_for(self, bytes, key_hash) {
            Ok(block) => block,
            Err(answer) => return answer,
        };
        line_has_probes(block, key_hash, self)
    }
}

/// How the probes of a key are drawn inside its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeScheme {
    /// Format [`FORMAT_BLOOM`]: affine images of one of the 128 shapes,
    /// distinct by construction (see [`shape_probe`]).
    Shapes,
    /// Format [`FORMAT_BLOOM_V2`]: the first `probes` *distinct* values of
    /// the multiply chain (see [`visit_distinct_probes`]).
    Distinct,
    /// Format [`FORMAT_BLOOM_V1`]: the first `probes` values of the chain,
    /// repeats included.
    WithReplacement,
}

/// How many values of the multiply chain a key's distinct probes are drawn
/// from before giving up on finding more. Never reached: an exhaustive scan
/// of all 2^31 odd states (in review, not a test) found at least 46 distinct
/// values among every state's first 64, and 30 distinct values (the most
/// probes a filter has) within the first 41. The cap only makes the loop's
/// length visibly bounded.
const CHAIN_LIMIT: usize = 64;

/// The fewest distinct values among the first sixteen chain values of any
/// odd state: found by scanning all 2^31 of them
/// (`every_state_has_enough_distinct_values_among_sixteen`, 20-35 s on the
/// 2-core test machine).
/// Filters with at most this many probes always find their probes among
/// sixteen chain values, so the AVX-512 query skips counting them. (Were it
/// ever wrong, the query would test a subset of a key's probes: a false
/// positive, never a false negative.)
const MIN_DISTINCT_IN_16: u32 = 10;

/// Calls `visit(bit)` for each probe bit of a key in a [`FORMAT_BLOOM_V2`]
/// filter (a bit may be visited twice; visiting is idempotent for setting
/// and testing bits).
///
/// The probes are the first `probes` distinct values among the top 9 bits
/// of `s`, `s x M`, `s x M^2`, ... (`s = state | 1`, `M = 0x9e3779b9`): the
/// same multiply chain as the first format, with repeats skipped, which is
/// sampling without replacement. A key's own probes then always test
/// `probes` different bits, and the false-positive rate at 10 bits/key drops
/// from 0.966% (with replacement) to the 0.955% of uniformly random distinct
/// probes (docs/filters.md). Forcing the state odd keeps the chain from
/// collapsing: an even state `2^t x odd` would only ever vary its top
/// `32 - t` bits.
///
/// Build and every query path derive the probes from this definition; the
/// vector paths compute the first 8 (AVX2) or 16 (AVX-512) chain values at
/// once and fall back to this function when those do not settle the probe
/// set (see the module documentation).
#[inline(always)]
fn visit_distinct_probes<const PAIRWISE: bool>(
    state: u32,
    probes: u32,
    mut visit: impl FnMut(u32),
) {
    let state = state | 1;
    let first = (probes as usize).min(CHAIN_LIMIT);
    // The first `probes` chain values, each `state x M^i` by a precomputed
    // power (independent multiplies, no dependent chain). With `PAIRWISE`
    // (the build), up to eight of them are compared pairwise in registers to
    // detect a repeat: 1.4x faster builds than the `seen` bitmap, whose
    // 8-byte stores and reloads dominated. Queries, which also test each bit
    // against the line, measured faster with the bitmap.
    let mut bits = [0u32; 8];
    let repeated = if PAIRWISE && first <= bits.len() {
        for (b, &power) in bits.iter_mut().zip(&CHAIN_POWERS[..first]) {
            *b = state.wrapping_mul(power) >> 23;
        }
        let mut repeated = false;
        for i in 1..first {
            for j in 0..i {
                repeated |= bits[i] == bits[j];
            }
        }
        for &b in &bits[..first] {
            visit(b);
        }
        repeated
    } else {
        let mut seen = [0u64; 8];
        let mut repeated = 0u64;
        for &power in &CHAIN_POWERS[..first] {
            let bit = state.wrapping_mul(power) >> 23;
            let (word, one) = ((bit >> 6) as usize & 7, 1u64 << (bit & 63));
            repeated |= seen[word] & one;
            seen[word] |= one;
            visit(bit);
        }
        repeated != 0
    };
    if !repeated {
        return; // about 97% of keys at 6 probes
    }
    // A repeat: fewer than `probes` distinct bits so far; take further chain
    // values until there are enough.
    let mut seen = [0u64; 8];
    for &power in &CHAIN_POWERS[..first] {
        let bit = state.wrapping_mul(power) >> 23;
        seen[(bit >> 6) as usize & 7] |= 1u64 << (bit & 63);
    }
    let mut found: u32 = seen.iter().map(|w| w.count_ones()).sum();
    for &power in &CHAIN_POWERS[first..] {
        if found >= probes {
            break;
        }
        let bit = state.wrapping_mul(power) >> 23;
        let (word, one) = ((bit >> 6) as usize & 7, 1u64 << (bit & 63));
        if seen[word] & one == 0 {
            seen[word] |= one;
            found += 1;
            visit(bit);
        }
    }
}

/// The probe bits of a key in a [`FORMAT_BLOOM_V2`] filter as a 512-bit mask
/// (word `b / 64` holds bit `b % 64`).
#[cfg(test)]
fn distinct_probe_mask(state: u32, probes: u32) -> [u64; 8] {
    let mut mask = [0u64; 8];
    visit_distinct_probes::<false>(state, probes, |bit| {
        mask[(bit >> 6) as usize & 7] |= 1 << (bit & 63)
    });
    mask
}

/// Whether every distinct probe of `state` finds its bit set in `block`.
#[inline]
fn line_has_distinct(block: &[u8; LINE_BYTES], state: u32, probes: u32) -> bool {
    let mut all_set = 1u64;
    visit_distinct_probes::<false>(state, probes, |bit| {
        all_set &= line_word(block, bit >> 6) >> (bit & 63);
    });
    all_set & 1 == 1
}

/// Whether every format-0x07 probe of `key_hash` finds its bit set in
/// `block` (no early exit, like [`line_has_all`]).
#[inline]
fn line_has_shapes(block: &[u8; LINE_BYTES], key_hash: u64, probes: u32) -> bool {
    let mut all_set = 1u64;
    for i in 0..probes as usize {
        let bit = shape_probe(key_hash, i);
        all_set &= line_word(block, bit >> 6) >> (bit & 63);
    }
    all_set & 1 == 1
}

/// Whether every probe of `state` finds its bit set in `block`: the
/// portable path.
///
/// Branch-free: every probe is tested and the bits ANDed, instead of
/// returning at the first clear bit. An early exit mispredicts on about
/// half of the absent keys and throws away the work in flight; the line is
/// one cache line, so the extra probes cost little.
#[inline]
fn line_has_all(block: &[u8; LINE_BYTES], state: u32, probes: u32) -> bool {
    let mut all_set = 1u64;
    for &power in PROBE_POWERS.iter().take(probes as usize) {
        let bit = state.wrapping_mul(power) >> 23; // top 9 bits: 0..512
        all_set &= line_word(block, bit >> 6) >> (bit & 63);
    }
    all_set & 1 == 1
}

/// Which query code a CPU runs. All three give the same answers (tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueryPath {
    /// Plain Rust, any CPU.
    Portable,
    /// Up to 8 probes in one 256-bit step: two permutes and a blend fetch
    /// each probe's word from the two halves of the line. More probes, and
    /// keys whose first chain values repeat, take the scalar code.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// Up to 16 probes in one 512-bit step (more take the scalar code): one
    /// permute fetches each probe's word from all 16 words of the line, a
    /// variable rotate needs no mask for the bit number, and for distinct
    /// probes the conflict instruction finds repeats without a branch.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl QueryPath {
    fn detect() -> QueryPath {
        #[cfg(target_arch = "x86_64")]
        {
            // avx2, fma and f16c too: rustc treats avx512f as implying them,
            // and older std versions did not check them as part of it.
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
                && std::arch::is_x86_feature_detected!("avx512cd")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("popcnt")
                && std::arch::is_x86_feature_detected!("bmi2")
            {
                return QueryPath::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return QueryPath::Avx2;
            }
        }
        QueryPath::Portable
    }

    fn name(self) -> &'static str {
        match self {
            QueryPath::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx512 => "avx512",
        }
    }

    /// Every path this CPU can run.
    fn available() -> Vec<QueryPath> {
        let mut paths = vec![QueryPath::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                paths.push(QueryPath::Avx2);
            }
            if QueryPath::detect() == QueryPath::Avx512 {
                paths.push(QueryPath::Avx512);
            }
        }
        paths
    }
}

/// Probe powers 0..8, the multipliers of one vector step.
#[cfg(target_arch = "x86_64")]
const PROBE_POWERS_0_8: [u32; 8] = {
    let mut p = [0u32; 8];
    let mut i = 0;
    while i < 8 {
        p[i] = PROBE_POWERS[i];
        i += 1;
    }
    p
};

/// The scalar answer for a line, by scheme: the portable query, and what
/// the vector paths fall back to, with format 0x04's distinct probes, when
/// their chain values do not settle the probe set (AVX2: a repeat among a
/// key's first probes; AVX-512: sixteen values with fewer than `probes`
/// distinct ones, 11 probes and up). Out of line: rare on the vector paths.
/// Filters with more probes than a vector step holds take
/// `scalar::may_contain` instead.
#[inline(never)]
fn line_has_probes(block: &[u8; LINE_BYTES], key_hash: u64, layout: &BloomLayout) -> bool {
    let state = (key_hash >> 32) as u32;
    match layout.scheme {
        ProbeScheme::Shapes => line_has_shapes(block, key_hash, layout.probes),
        ProbeScheme::Distinct => line_has_distinct(block, state, layout.probes),
        ProbeScheme::WithReplacement => line_has_all(block, state, layout.probes),
    }
}

/// The line `key_hash` maps to, or the answer without reading one:
/// `Err(false)` for an empty filter (built from no keys), `Err(true)` for
/// bytes shorter than the layout (unreachable for the bytes it was parsed
/// from: the line is below `num_lines`).
#[inline(always)]
fn line_for<'a>(
    layout: &BloomLayout,
    bytes: &'a [u8],
    key_hash: u64,
) -> std::result::Result<&'a [u8; LINE_BYTES], bool> {
    if layout.num_lines == 0 {
        return Err(false);
    }
    let line = fastrange32(key_hash as u32, layout.num_lines) as usize;
    line_at(bytes, line).ok_or(true)
}

/// The code a query runs: the [`QueryPath`] specialised, at parse, for the
/// layout's probe scheme, probe count and size, so that the query does not
/// branch on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Query {
    /// No lines (an empty key set): every key is absent.
    RejectAll,
    /// `scalar::may_contain`: any CPU, scheme and probe count.
    Scalar,
    /// `avx2::may_contain_shapes`: format 0x07, at most 8 probes.
    #[cfg(target_arch = "x86_64")]
    Avx2Shapes,
    /// `avx512::may_contain_shapes::<true>`: format 0x07, at most 8 probes.
    #[cfg(target_arch = "x86_64")]
    Avx512Shapes8,
    /// `avx512::may_contain_shapes::<false>`: format 0x07, at most 16
    /// probes.
    #[cfg(target_arch = "x86_64")]
    Avx512Shapes16,
    /// `avx2::may_contain::<true>`: format 0x04's distinct probes, at most 8.
    #[cfg(target_arch = "x86_64")]
    Avx2Distinct,
    /// `avx2::may_contain::<false>`: the first format, at most 8 probes.
    #[cfg(target_arch = "x86_64")]
    Avx2WithReplacement,
    /// `avx512::may_contain_distinct`, narrow: distinct probes, at most 8.
    #[cfg(target_arch = "x86_64")]
    Avx512Distinct8,
    /// `avx512::may_contain_distinct`, no count check: distinct probes, at
    /// most [`MIN_DISTINCT_IN_16`], which every state's sixteen chain values
    /// hold.
    #[cfg(target_arch = "x86_64")]
    Avx512Distinct10,
    /// `avx512::may_contain_distinct` with the count check: distinct probes,
    /// at most 16.
    #[cfg(target_arch = "x86_64")]
    Avx512Distinct16,
    /// `avx512::may_contain_with_replacement`: the first format, at most 16
    /// probes.
    #[cfg(target_arch = "x86_64")]
    Avx512WithReplacement,
}

/// A decoded blocked Bloom filter, as the query functions read it.
///
/// # Safety
///
/// `lines()` must point to at least `layout().num_lines() * 64` readable
/// bytes that stay valid and unmodified while `self` is borrowed.
pub(crate) unsafe trait BloomLines {
    /// The filter's layout.
    fn layout(&self) -> &BloomLayout;
    /// The filter's first line.
    fn lines(&self) -> *const u8;
}

/// Bytes whose length [`BloomLayout::may_contain`] checked.
struct CheckedLines<'a> {
    layout: &'a BloomLayout,
    lines: &'a [u8],
}

// SAFETY: built only by `BloomLayout::may_contain`, after checking that the
// bytes at `lines` hold `num_lines` lines; they are borrowed for the call.
unsafe impl BloomLines for CheckedLines<'_> {
    fn layout(&self) -> &BloomLayout {
        self.layout
    }
    fn lines(&self) -> *const u8 {
        self.lines.as_ptr()
    }
}

/// A query function over a filter `F`.
///
/// Calling one is `unsafe`: it must be the function
/// [`BloomLayout::query_fn`] returned for `F`'s layout, since it relies on
/// the CPU features, probe count, scheme and size that chose it.
pub(crate) type QueryFn<F> = unsafe fn(&F, u64) -> bool;

impl Query {
    /// The function that runs this query on a filter `F`.
    fn function<F: BloomLines>(self) -> QueryFn<F> {
        match self {
            Query::RejectAll => reject_all::<F>,
            Query::Scalar => scalar::may_contain::<F>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx2Shapes => avx2::may_contain_shapes::<F>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx512Shapes8 => avx512::may_contain_shapes::<F, true>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx512Shapes16 => avx512::may_contain_shapes::<F, false>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx2Distinct => avx2::may_contain::<F, true>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx2WithReplacement => avx2::may_contain::<F, false>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx512Distinct8 => avx512::may_contain_distinct::<F, true, false>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx512Distinct10 => avx512::may_contain_distinct::<F, false, false>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx512Distinct16 => avx512::may_contain_distinct::<F, false, true>,
            #[cfg(target_arch = "x86_64")]
            Query::Avx512WithReplacement => avx512::may_contain_with_replacement::<F>,
        }
    }

    /// The query for a layout on `path`. More probes than a vector step
    /// holds take the scalar code.
    fn choose(path: QueryPath, scheme: ProbeScheme, probes: u32, num_lines: u32) -> Query {
        if num_lines == 0 {
            return Query::RejectAll;
        }
        let distinct = scheme == ProbeScheme::Distinct;
        let shapes = scheme == ProbeScheme::Shapes;
        match path {
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx512 if probes <= 8 && shapes => Query::Avx512Shapes8,
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx512 if probes <= 16 && shapes => Query::Avx512Shapes16,
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx2 if probes <= 8 && shapes => Query::Avx2Shapes,
            _ if shapes => Query::Scalar,
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx512 if probes <= 8 && distinct => Query::Avx512Distinct8,
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx512 if probes <= MIN_DISTINCT_IN_16 && distinct => {
                Query::Avx512Distinct10
            }
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx512 if probes <= 16 && distinct => Query::Avx512Distinct16,
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx512 if probes <= 16 => Query::Avx512WithReplacement,
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx2 if probes <= 8 && distinct => Query::Avx2Distinct,
            #[cfg(target_arch = "x86_64")]
            QueryPath::Avx2 if probes <= 8 => Query::Avx2WithReplacement,
            _ => Query::Scalar,
        }
    }
}

/// Runs the query [`BloomLayout::queries_shapes8_avx512`] names on a decoded
/// filter, inline: [`Filter::may_contain`](super::Filter::may_contain) runs
/// it instead of calling through its function pointer (the indirect call
/// measured up to 0.4 ns slower per query than a direct one, and the query
/// inlined faster than the direct call on AMD Zen 4: docs/filters.md,
/// "Thirty-sixth session").
///
/// # Safety
///
/// `filter`'s layout must query with this function
/// (`queries_shapes8_avx512`), which also says the CPU runs it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn shapes8_avx512(filter: &super::Filter, key_hash: u64) -> bool {
    // Built for a CPU with these features (`-C target-cpu=native` on one),
    // the intrinsics function inlines into the caller, which is best.
    #[cfg(all(
        target_feature = "avx512f",
        target_feature = "avx512vl",
        target_feature = "bmi2"
    ))]
    // SAFETY: the caller's: this is the filter's own query function, and
    // `Filter`'s `BloomLines` contract holds.
    unsafe {
        avx512::may_contain_shapes::<super::Filter, true>(filter, key_hash)
    }
    // Otherwise a `#[target_feature]` function cannot inline into its
    // caller, and the call costs what the query costs; the same
    // instructions in `asm!` can (see `inline_asm`).
    #[cfg(not(all(
        target_feature = "avx512f",
        target_feature = "avx512vl",
        target_feature = "bmi2"
    )))]
    // SAFETY: the caller's (the layout chose this query, so the CPU has
    // AVX-512 F and VL and BMI2, and the filter has at most 8 probes and
    // at least one line); `Filter`'s `BloomLines` contract holds.
    unsafe {
        inline_asm::may_contain_shapes8(filter, key_hash)
    }
}

/// Runs the query [`BloomLayout::queries_shapes_avx2`] names on a decoded
/// filter: the direct call [`Filter::may_contain`](super::Filter::may_contain)
/// makes on CPUs with AVX2 but not AVX-512, as [`shapes8_avx512`] on those
/// with it (measured on AMD Zen: Bloom / sbbf-rs-safe query 1.32x against
/// 1.335x through the function pointer, three pairs; docs/filters.md).
///
/// # Safety
///
/// `filter`'s layout must query with this function
/// (`queries_shapes_avx2`), which also says the CPU runs it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn shapes_avx2(filter: &super::Filter, key_hash: u64) -> bool {
    // As in `shapes8_avx512`: the intrinsics when they can inline, else
    // the same query in `asm!`.
    #[cfg(target_feature = "avx2")]
    // SAFETY: the caller's: this is the filter's own query function, and
    // `Filter`'s `BloomLines` contract holds.
    unsafe {
        avx2::may_contain_shapes::<super::Filter>(filter, key_hash)
    }
    #[cfg(not(target_feature = "avx2"))]
    // SAFETY: the caller's (the layout chose this query, so the CPU has
    // AVX2, and the filter has at most 8 probes and at least one line);
    // `Filter`'s `BloomLines` contract holds.
    unsafe {
        inline_asm_avx2::may_contain_shapes8(filter, key_hash)
    }
}

/// The query of a filter built from no keys: nothing is in it.
///
/// # Safety
///
/// None needed (`unsafe` only to have the type of every query function).
unsafe fn reject_all<F>(_: &F, _: u64) -> bool {
    false
}

/// The line `key_hash` maps to in the lines at `lines`.
///
/// # Safety
///
/// `lines` must point to `layout.num_lines * 64` readable bytes, and
/// `num_lines` must be at least 1.
#[inline(always)]
unsafe fn line_ptr(layout: &BloomLayout, lines: *const u8, key_hash: u64) -> *const u8 {
    let line = fastrange32(key_hash as u32, layout.num_lines) as usize;
    // SAFETY: `line < num_lines` (fastrange with `num_lines >= 1`), so the
    // line's 64 bytes are inside the caller's `num_lines * 64`.
    unsafe { lines.add(line * LINE_BYTES) }
}

/// One of the inline Bloom queries (`inline_asm`, `inline_asm_avx2`): the
/// `asm!` template lines given, with the operands both share. In: `hash`
/// (the key hash, rewritten), `layout` (the `BloomLayout`, whose
/// `first_lane_ones` is at `layout + ones`), `num_lines`, `shape_mask`,
/// `shapes` (`SHAPES_8`), `lines` (the filter's lines). Out: `state` (a
/// scratch register), `hit` (the answer, 0 or 1), `eax` and `rdx` (for
/// `mul`). Every vector register from 0 to 15 is declared clobbered:
/// declaring `xmmN` clobbers all of `ymmN`/`zmmN` (one register to the
/// compiler), and the templates end with `vzeroupper`, which touches the
/// upper halves of all sixteen. Evaluates to the answer; must be expanded
/// inside an `unsafe` block whose comment justifies the template's reads.
#[cfg(all(
    target_arch = "x86_64",
    not(all(
        target_feature = "avx512f",
        target_feature = "avx512vl",
        target_feature = "bmi2"
    ))
))]
macro_rules! shapes8_query_asm {
    ($filter:expr, $key_hash:expr, $($line:literal,)+) => {{
        let filter = $filter;
        let layout = filter.layout();
        let hit: u8;
        std::arch::asm!(
            $($line,)+
            hash = inout(reg) $key_hash => _,
            state = out(reg) _,
            layout = in(reg) layout,
            num_lines = in(reg) layout.num_lines,
            shape_mask = const SHAPE_OFFSET_MASK_8,
            shapes = in(reg) SHAPES_8.0.as_ptr(),
            lines = in(reg) filter.lines(),
            ones = const std::mem::offset_of!(BloomLayout, first_lane_ones),
            hit = out(reg_byte) hit,
            out("eax") _,
            out("rdx") _,
            out("xmm0") _,
            out("xmm1") _,
            out("xmm2") _,
            out("xmm3") _,
            out("xmm4") _,
            out("xmm5") _,
            out("xmm6") _,
            out("xmm7") _,
            out("xmm8") _,
            out("xmm9") _,
            out("xmm10") _,
            out("xmm11") _,
            out("xmm12") _,
            out("xmm13") _,
            out("xmm14") _,
            out("xmm15") _,
            options(pure, readonly, nostack),
        );
        hit != 0
    }};
}

/// The AVX-512 query of up to 8 probes written as one `asm!` block, for
/// builds whose baseline lacks AVX-512 (the default `x86_64` target).
///
/// A `#[target_feature(enable = "avx512f")]` function cannot inline into a
/// caller compiled without those features, so every query through it pays
/// a call, and the loads of the filter's fields and constants that a loop
/// around an inlined query would do once: 30 instructions a query in the
/// query loop of `examples/filter_race.rs` through that function, 19 with
/// the intrinsics inlined (built with `-C target-cpu=native`), 24 with
/// this block (`objdump -d`).
/// At 1,000,000 keys the query is bound by how many of them the CPU keeps
/// in flight, which its instruction count sets (docs/filters.md), so the
/// call was a large part of its time (docs/filters.md, "Thirty-sixth
/// session": 1.10x-1.13x sbbf-rs-safe's time through the call, 0.93x-0.95x
/// inlined, in `filter_race` on AMD Zen 4). `asm!` is not bound by the
/// function's features: this block inlines anywhere, and the caller's
/// loop keeps the fields and the table's address in registers. (The
/// thirty-third session measured an earlier version of this on an Intel
/// Xeon slower in the criterion bench, whose loop keeps the query-kind
/// test, and reverted it; on Zen 4 that bench shows no slowdown: same
/// section.)
#[cfg(all(
    target_arch = "x86_64",
    not(all(
        target_feature = "avx512f",
        target_feature = "avx512vl",
        target_feature = "bmi2"
    ))
))]
mod inline_asm {
    use super::{BloomLayout, BloomLines, SHAPES_8, SHAPE_OFFSET_MASK_8};

    /// Same answer as `avx512::may_contain_shapes::<_, true>`, with the
    /// same instructions (its comments explain each step) but for three
    /// differences: `mul` takes `num_lines` in a register (which a loop
    /// of queries loads once), `first_lane_ones` is loaded unaligned, and
    /// the block ends with `vzeroupper`, as that function's return does.
    ///
    /// # Safety
    ///
    /// `num_lines` must be at least 1, `probes` at most 8, and the CPU must
    /// support AVX-512 F and VL and BMI2.
    #[inline(always)]
    pub(super) unsafe fn may_contain_shapes8<F: BloomLines>(filter: &F, key_hash: u64) -> bool {
        // SAFETY: reads 32 bytes of `SHAPES_8` at `hash & SHAPE_OFFSET_MASK_8`
        // (at most 127 x 32: one entry of the 128), the 64-byte line
        // `fastrange32(hash, num_lines)` of the `num_lines * 64` bytes at
        // `lines` (`F`'s contract; `num_lines >= 1`: caller) and the 32
        // bytes of `layout.first_lane_ones` (`layout` is a live `&`, the
        // field at its offset), nothing else; writes only the registers
        // `shapes8_query_asm` declares (all the vector registers
        // `vzeroupper` touches among them). The CPU runs every
        // instruction (caller). `vzeroupper` leaves the upper halves clean
        // for SSE code after the block, as the `#[target_feature]`
        // function's return does.
        unsafe {
            shapes8_query_asm!(
                filter,
                key_hash,
                "rorx {state}, {hash}, 32",
                "or {state:e}, 1",
                "mov eax, {hash:e}",
                "mul {num_lines:e}",
                "shl rdx, 6",
                "and {hash:e}, {shape_mask}",
                "vpbroadcastd ymm0, {state:e}",
                "vpmulld ymm0, ymm0, ymmword ptr [{shapes} + {hash}]",
                "vpsrld ymm1, ymm0, 28",
                "vpermd zmm1, zmm1, zmmword ptr [{lines} + rdx]",
                "vpsrld ymm0, ymm0, 23",
                "vmovdqu ymm2, ymmword ptr [{layout} + {ones}]",
                "vprolvd ymm0, ymm2, ymm0",
                "vptest ymm1, ymm0",
                "setc {hit}",
                "vzeroupper",
            )
        }
    }
}

/// The AVX2 query of up to 8 probes as one `asm!` block, for builds whose
/// baseline lacks AVX2 (the default `x86_64` target): inlinable for the
/// reason given at [`inline_asm`].
#[cfg(all(target_arch = "x86_64", not(target_feature = "avx2")))]
mod inline_asm_avx2 {
    use super::{BloomLayout, BloomLines, SHAPES_8, SHAPE_OFFSET_MASK_8};

    /// Same answer as `avx2::may_contain_shapes`, step for step (its
    /// comments and `avx2::missing_bits`'s explain each one): the state
    /// broadcast and multiplied by the shape entry; each lane's word from
    /// two permutes of the line's halves and a blend on the lane's sign
    /// bit; the wanted bit `1 << ((x << 4) >> 27)` in the first `probes`
    /// lanes; carry set when every wanted bit is in its word.
    ///
    /// # Safety
    ///
    /// `num_lines` must be at least 1, `probes` at most 8, and the CPU must
    /// support AVX2.
    #[inline(always)]
    pub(super) unsafe fn may_contain_shapes8<F: BloomLines>(filter: &F, key_hash: u64) -> bool {
        // SAFETY: reads 32 bytes of `SHAPES_8` at `hash & SHAPE_OFFSET_MASK_8`
        // (one entry of the 128), the 64-byte line `fastrange32(hash,
        // num_lines)` of the `num_lines * 64` bytes at `lines` (`F`'s
        // contract; `num_lines >= 1`: caller) and the 32 bytes of
        // `layout.first_lane_ones` (a live `&`), nothing else; writes only
        // the registers `shapes8_query_asm` declares (all the vector
        // registers `vzeroupper` touches among them). The CPU runs every
        // instruction (caller).
        unsafe {
            shapes8_query_asm!(
                filter,
                key_hash,
                "mov {state}, {hash}",
                "shr {state}, 32",
                "or {state:e}, 1",
                "mov eax, {hash:e}",
                "mul {num_lines:e}",
                "shl rdx, 6",
                "and {hash:e}, {shape_mask}",
                "vmovd xmm0, {state:e}",
                "vpbroadcastd ymm0, xmm0",
                "vpmulld ymm0, ymm0, ymmword ptr [{shapes} + {hash}]",
                "vpsrld ymm1, ymm0, 28",
                "vpermd ymm2, ymm1, ymmword ptr [{lines} + rdx]",
                "vpermd ymm1, ymm1, ymmword ptr [{lines} + rdx + 32]",
                "vblendvps ymm1, ymm2, ymm1, ymm0",
                "vpslld ymm0, ymm0, 4",
                "vpsrld ymm0, ymm0, 27",
                "vmovdqu ymm2, ymmword ptr [{layout} + {ones}]",
                "vpsllvd ymm0, ymm2, ymm0",
                "vptest ymm1, ymm0",
                "setc {hit}",
                "vzeroupper",
            )
        }
    }
}

/// The scalar query; see [`Query::Scalar`].
mod scalar {
    use super::{
        line_has_all, line_has_distinct, line_has_shapes, line_ptr, BloomLines, ProbeScheme,
        LINE_BYTES,
    };

    /// Same answer as `BloomLayout::may_contain_portable`.
    ///
    /// # Safety
    ///
    /// `num_lines` must be at least 1.
    #[inline(never)]
    pub(super) unsafe fn may_contain<F: BloomLines>(filter: &F, key_hash: u64) -> bool {
        let layout = filter.layout();
        // SAFETY: `F`'s contract and `num_lines >= 1` (caller); `[u8; 64]`
        // has alignment 1.
        let block =
            unsafe { &*line_ptr(layout, filter.lines(), key_hash).cast::<[u8; LINE_BYTES]>() };
        // The probe loops inline here rather than through
        // `line_has_probes`, which the vector paths keep out of line: one
        // call less (up to 1.17x faster in one noisy A/B run).
        let state = (key_hash >> 32) as u32;
        match layout.scheme {
            ProbeScheme::Shapes => line_has_shapes(block, key_hash, layout.probes),
            ProbeScheme::Distinct => line_has_distinct(block, state, layout.probes),
            ProbeScheme::WithReplacement => line_has_all(block, state, layout.probes),
        }
    }
}

/// The AVX-512 queries; see [`QueryPath::Avx512`].
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{
        fastrange32, line_has_probes, line_ptr, BloomLayout, BloomLines, CHAIN_POWERS, LINE_BYTES,
        SHAPES_16, SHAPES_8, SHAPE_OFFSET_MASK_8,
    };
    use std::arch::x86_64::*;

    /// Same answer as `BloomLayout::may_contain_portable` for format 0x07
    /// ([`FORMAT_BLOOM`](super::FORMAT_BLOOM)): at most 8 probes with
    /// `NARROW`, else at most 16.
    ///
    /// The probes are distinct by construction, so the whole query is one
    /// step with no branch: the key's shape entry times its state gives
    /// each probe's bit position in the top 9 bits of a lane; the top 4
    /// pick the line's 32-bit word (one permute of the line held in one
    /// register), and a rotate of 1 by the position (taken modulo 32) the
    /// bit in it. With `NARROW` the multiply runs on eight lanes and the
    /// test is one `vptest` of the first eight against the probe bits of
    /// the first `probes` (`first_lane_ones`); otherwise sixteen lanes and a
    /// masked test of the first `probes`.
    ///
    /// # Safety
    ///
    /// `num_lines` must be at least 1, `probes` at most 8 with `NARROW` and
    /// at most 16 otherwise, and the CPU must support AVX-512 F and VL.
    #[target_feature(enable = "avx512f,avx512vl,bmi2")]
    pub(super) unsafe fn may_contain_shapes<F: BloomLines, const NARROW: bool>(
        filter: &F,
        key_hash: u64,
    ) -> bool {
        let layout = filter.layout();
        // The shape's entry: `t x 32` bytes into `SHAPES_8` (see
        // `SHAPE_OFFSET_MASK_8`), `t x 64` into `SHAPES_16`.
        let offset = key_hash as usize & SHAPE_OFFSET_MASK_8;
        // The state and the line's byte offset in five instructions
        // where the compiler emits eight: `rorx` swaps the hash's
        // halves into another register (no copy first), and a 32-bit
        // `mul` by `num_lines` in memory leaves `fastrange32`'s line in
        // `edx` (no copy, load, 64-bit multiply, shift and mask; LLVM
        // turns the same arithmetic written in Rust back into those).
        // The query is out-of-cache bound by how many of them the
        // CPU's window holds, so instructions count: measured in
        // docs/filters.md, "Eleventh session" (issue-2 targets).
        let state: u64;
        let line_offset: u64;
        // SAFETY: reads the 4 bytes of `layout.num_lines` (a live `&`)
        // and nothing else; writes only the named registers; BMI2
        // (`rorx`) is enabled for this function.
        unsafe {
            std::arch::asm!(
                "rorx {state}, {hash}, 32",
                "or {state:e}, 1",
                "mov eax, {hash:e}",
                "mul dword ptr [{layout} + {num_lines}]",
                "shl rdx, 6",
                hash = in(reg) key_hash,
                layout = in(reg) layout,
                num_lines = const std::mem::offset_of!(BloomLayout, num_lines),
                state = out(reg) state,
                out("eax") _,
                out("rdx") line_offset,
                options(pure, readonly, nostack),
            );
        }
        debug_assert_eq!(state as u32, (key_hash >> 32) as u32 | 1);
        debug_assert_eq!(
            line_offset,
            fastrange32(key_hash as u32, layout.num_lines) as u64 * LINE_BYTES as u64
        );
        let state = state as u32 as i32;
        // SAFETY: `line_offset` is `fastrange32(key_hash, num_lines) x
        // 64` (the `mul` leaves the product's high half in `edx`),
        // inside the `num_lines * 64` bytes of `F`'s contract
        // (`num_lines >= 1`: caller).
        let line = unsafe { filter.lines().add(line_offset as usize) };
        // SAFETY: `line` is one of the lines, 64 readable bytes (an
        // unaligned load: `F` does not promise alignment).
        let words = unsafe { _mm512_loadu_si512(line.cast::<__m512i>()) };
        if NARROW {
            // SAFETY: `offset <= 127 x 32`, so the 32 bytes at it are one
            // entry of `SHAPES_8` (128 entries of 32 bytes, 64-byte
            // aligned: the load is aligned); `first_lane_ones` is 8 u32.
            let (shape, ones) = unsafe {
                (
                    _mm256_load_si256(SHAPES_8.0.as_ptr().cast::<u8>().add(offset).cast()),
                    _mm256_load_si256(layout.first_lane_ones.0.as_ptr().cast()),
                )
            };
            let x = _mm256_mullo_epi32(_mm256_set1_epi32(state), shape);
            // The permute's upper eight index lanes are don't-cares: only
            // the lower eight results are tested.
            let word = _mm512_castsi512_si256(_mm512_permutexvar_epi32(
                _mm512_castsi256_si512(_mm256_srli_epi32(x, 28)),
                words,
            ));
            // The bit each probe wants in its word: `ones` (bit 0 in the
            // first `probes` lanes, nothing in the others) rotated left by
            // the probe's position (modulo 32, bits 23..28 of x). Carry set
            // when the words hold every wanted bit. Made apart from the
            // line, so only two instructions (permute, test) wait for its
            // load, a cache miss in a large filter, where rotating each
            // word to bit 0 made three: docs/filters.md, "Eleventh
            // session" (issue-2 targets).
            let wanted = _mm256_rolv_epi32(ones, _mm256_srli_epi32(x, 23));
            _mm256_testc_si256(word, wanted) != 0
        } else {
            // SAFETY: `2 x offset <= 127 x 64`: one 64-byte entry of
            // `SHAPES_16` (64-byte aligned).
            let shape = unsafe {
                _mm512_load_si512(SHAPES_16.0.as_ptr().cast::<u8>().add(2 * offset).cast())
            };
            let x = _mm512_mullo_epi32(_mm512_set1_epi32(state), shape);
            let bit = _mm512_srli_epi32(x, 23);
            let word = _mm512_permutexvar_epi32(_mm512_srli_epi32(x, 28), words);
            let probe = _mm512_rolv_epi32(_mm512_set1_epi32(1), bit);
            _mm512_mask_testn_epi32_mask(layout.probe_lanes as u16, word, probe) == 0
        }
    }

    /// The first sixteen chain values of `state` and the line words they
    /// fall in: lane `i` of the first vector is chain value `i`, a bit
    /// position `b` in the line, and lane `i` of the second is the line's
    /// 32-bit word `b / 32`.
    ///
    /// # Safety
    ///
    /// `line` must point to 64 readable bytes; the CPU must support
    /// AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn chain_words(line: *const u8, state: u32) -> (__m512i, __m512i) {
        // SAFETY: `line` is 64 readable bytes (caller) and `CHAIN_POWERS`
        // holds at least 16 u32: one unaligned 64-byte load each.
        let (words, powers) = unsafe {
            (
                _mm512_loadu_si512(line.cast::<__m512i>()),
                _mm512_loadu_si512(CHAIN_POWERS.as_ptr().cast::<__m512i>()),
            )
        };
        // x = state * M^i: its top 9 bits are chain value b, its top 4 the
        // word b / 32 (the permute reads the index's low four bits).
        let x = _mm512_mullo_epi32(_mm512_set1_epi32(state as i32), powers);
        let bit = _mm512_srli_epi32(x, 23);
        (
            bit,
            _mm512_permutexvar_epi32(_mm512_srli_epi32(x, 28), words),
        )
    }

    /// Bit `i` set when chain value `i` (lane `i` of `bit`) misses: its bit
    /// `b % 32` is clear in `word` (the rotate takes its count modulo 32).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn missed(bit: __m512i, word: __m512i) -> u32 {
        let probe = _mm512_rolv_epi32(_mm512_set1_epi32(1), bit);
        u32::from(_mm512_testn_epi32_mask(word, probe))
    }

    /// Same answer as `BloomLayout::may_contain_portable` for distinct
    /// probes ([`FORMAT_BLOOM`](super::FORMAT_BLOOM)): `NARROW` for at most
    /// 8 probes, otherwise at most 16, and `COUNT_CHECK` unless at most
    /// [`MIN_DISTINCT_IN_16`](super::MIN_DISTINCT_IN_16).
    ///
    /// The probes are the first `probes` distinct chain values, so every
    /// one of the first `probes` chain values is a probe, repeated or not: a
    /// clear bit among them answers "absent" before anything looks for
    /// repeats. That is nearly every absent key. With `NARROW` that test is
    /// one `vptest` of the first eight lanes against the probe bits of the
    /// first `probes` (computed from the hash while the line is loading),
    /// which sets the flag the branch reads: only the permute and the test
    /// wait for the line (measured 1.07x against 1.23x sbbf-rs-safe's time
    /// with a mask test, docs/filters.md).
    ///
    /// For a key whose first `probes` bits are all set, the conflict
    /// instruction marks every lane that repeats an earlier one, and the
    /// probes are the first `probes` lanes that do not (`pdep` of the low
    /// `probes` bits into the mask of first occurrences), tested without a
    /// branch on whether the key has a repeat (about 3% do at 6 probes: a
    /// branch there measured 1.2x-1.5x slower present-key queries from its
    /// mispredictions). With `COUNT_CHECK`, when sixteen values hold fewer
    /// than `probes` distinct ones, the scalar code answers.
    ///
    /// # Safety
    ///
    /// `num_lines` must be at least 1, `probes` at most 8 with `NARROW`, at
    /// most `MIN_DISTINCT_IN_16` without `COUNT_CHECK` and at most 16
    /// otherwise, and the CPU must support AVX-512 F, CD and VL, POPCNT and
    /// BMI2.
    #[target_feature(enable = "avx512f,avx512cd,avx512vl,popcnt,bmi2")]
    pub(super) unsafe fn may_contain_distinct<
        F: BloomLines,
        const NARROW: bool,
        const COUNT_CHECK: bool,
    >(
        filter: &F,
        key_hash: u64,
    ) -> bool {
        let layout = filter.layout();
        let state = (key_hash >> 32) as u32 | 1;
        // SAFETY: `F`'s contract and `num_lines >= 1` (caller).
        let line = unsafe { line_ptr(layout, filter.lines(), key_hash) };
        // SAFETY: `line` is one of the lines, 64 readable bytes.
        let (bit, word) = unsafe { chain_words(line, state) };
        if NARROW {
            // SAFETY: `first_lane_ones` is 8 u32: one 32-byte load.
            let ones = unsafe { _mm256_loadu_si256(layout.first_lane_ones.0.as_ptr().cast()) };
            // The probe bit of each of the first `probes` lanes, zero in the
            // others (1 rotated by b, modulo 32).
            let probe = _mm256_rolv_epi32(ones, _mm512_castsi512_si256(bit));
            // Carry set when every probe bit is set in its word.
            if _mm256_testc_si256(_mm512_castsi512_si256(word), probe) == 0 {
                return false;
            }
        }
        let missed = missed(bit, word);
        if !NARROW && missed & layout.probe_lanes != 0 {
            return false;
        }
        // Lane i of the conflict vector has bit j set when an earlier lane
        // j holds the same value: zero marks a first occurrence.
        let conflicts = _mm512_conflict_epi32(bit);
        let first_seen = u32::from(_mm512_testn_epi32_mask(conflicts, conflicts));
        if COUNT_CHECK && first_seen.count_ones() < layout.probes {
            // SAFETY: `line` is 64 readable bytes.
            return unsafe { scalar_line(layout, line, key_hash) };
        }
        _pdep_u32(layout.probe_lanes, first_seen) & missed == 0
    }

    /// The scalar answer for `line`: keys whose probes are not among their
    /// first sixteen chain values.
    ///
    /// # Safety
    ///
    /// `line` must point to 64 readable bytes.
    #[cold]
    #[inline(never)]
    unsafe fn scalar_line(layout: &BloomLayout, line: *const u8, key_hash: u64) -> bool {
        // SAFETY: 64 readable bytes (caller); `[u8; 64]` has alignment 1.
        let block = unsafe { &*line.cast::<[u8; LINE_BYTES]>() };
        line_has_probes(block, key_hash, layout)
    }

    /// Same answer as `BloomLayout::may_contain_portable` for probes drawn
    /// with replacement ([`FORMAT_BLOOM_V1`](super::FORMAT_BLOOM_V1)), at
    /// most 16: the first `probes` chain values are the probes.
    ///
    /// # Safety
    ///
    /// `num_lines` must be at least 1, `probes` at most 16, and the CPU
    /// must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn may_contain_with_replacement<F: BloomLines>(
        filter: &F,
        key_hash: u64,
    ) -> bool {
        let layout = filter.layout();
        // SAFETY: `F`'s contract and `num_lines >= 1` (caller).
        let line = unsafe { line_ptr(layout, filter.lines(), key_hash) };
        // SAFETY: `line` is one of the lines, 64 readable bytes.
        let (bit, word) = unsafe { chain_words(line, (key_hash >> 32) as u32) };
        missed(bit, word) & layout.probe_lanes == 0
    }
}

/// The AVX2 query: eight probes per step, the way RocksDB's FastLocalBloom
/// and Parquet's split-block filter test them.
///
/// Measured faster than the portable loop (`bloom` vs `bloom_portable` in
/// `benches/filters.rs`, numbers in docs/filters.md), which is why this
/// module has `unsafe`: `#[target_feature]` functions and the vector loads
/// need it.
///
/// The whole query (line choice, probes) is one function: a
/// `#[target_feature]` function cannot be inlined into a caller without the
/// feature, so every call boundary on this path is a real call, and at a
/// few nanoseconds per query the instructions around the probes matter as
/// much as the probes (the CPU overlaps the cache misses of independent
/// queries; what limits it is how many instructions each one issues).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{
        line_has_probes, line_ptr, BloomLines, LINE_BYTES, PROBE_POWERS_0_8, SHAPES_8,
        SHAPE_OFFSET_MASK_8,
    };
    use std::arch::x86_64::*;

    /// The probe bits of the eight lanes of `x` that the 64-byte line at
    /// `line` lacks: lane `i`'s top 9 bits are a bit position `b` in the
    /// line, and lane `i` of the result is `ones[i] << (b % 32)` with the
    /// bits word `b / 32` of the line holds cleared. Zero when every probe
    /// (every lane with a 1 in `ones`) finds its bit.
    ///
    /// # Safety
    ///
    /// `line` must point to 64 readable bytes; the CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn missing_bits(line: *const u8, x: __m256i, ones: __m256i) -> __m256i {
        // The line as 16 little-endian 32-bit words: 0..8 in `lo`, 8..16 in
        // `hi`. Bit b of the line is bit b % 32 of word b / 32.
        // SAFETY: `line` is 64 readable bytes; both loads are unaligned
        // loads of 32 bytes inside it.
        let (lo, hi) = unsafe {
            (
                _mm256_loadu_si256(line.cast::<__m256i>()),
                _mm256_loadu_si256(line.add(32).cast::<__m256i>()),
            )
        };
        // Word b / 32 is x >> 28; the permute reads only its low three bits
        // (the word within a half) and x's sign bit (b >= 256) picks the
        // half.
        let word_index = _mm256_srli_epi32(x, 28);
        let from_lo = _mm256_permutevar8x32_epi32(lo, word_index);
        let from_hi = _mm256_permutevar8x32_epi32(hi, word_index);
        let words = _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(from_lo),
            _mm256_castsi256_ps(from_hi),
            _mm256_castsi256_ps(x),
        ));
        // b % 32 is bits 23..28 of x. One bit per probe lane.
        let bit_in_word = _mm256_srli_epi32(_mm256_slli_epi32(x, 4), 27);
        let wanted = _mm256_sllv_epi32(ones, bit_in_word);
        _mm256_andnot_si256(words, wanted)
    }

    /// Same answer as `BloomLayout::may_contain_portable` for format 0x07
    /// ([`FORMAT_BLOOM`](super::FORMAT_BLOOM)), at most 8 probes: one
    /// multiply of the key's shape entry by its state, then one test, no
    /// branch (the probes are distinct by construction).
    ///
    /// # Safety
    ///
    /// `num_lines` must be at least 1, `probes` at most 8, and the CPU must
    /// support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn may_contain_shapes<F: BloomLines>(filter: &F, key_hash: u64) -> bool {
        let layout = filter.layout();
        let state = (key_hash >> 32) as u32 | 1;
        let offset = key_hash as usize & SHAPE_OFFSET_MASK_8;
        // SAFETY: `F`'s contract and `num_lines >= 1` (caller).
        let line = unsafe { line_ptr(layout, filter.lines(), key_hash) };
        // SAFETY: `offset <= 127 x 32`: one 32-byte entry of `SHAPES_8`
        // (64-byte aligned); `first_lane_ones` is 8 u32.
        let (shape, ones) = unsafe {
            (
                _mm256_load_si256(SHAPES_8.0.as_ptr().cast::<u8>().add(offset).cast()),
                _mm256_loadu_si256(layout.first_lane_ones.0.as_ptr().cast::<__m256i>()),
            )
        };
        let x = _mm256_mullo_epi32(_mm256_set1_epi32(state as i32), shape);
        // SAFETY: `line` is 64 readable bytes.
        let missing = unsafe { missing_bits(line, x, ones) };
        _mm256_testz_si256(missing, missing) != 0
    }

    /// Same answer as `BloomLayout::may_contain_portable`, for at most 8
    /// probes: distinct ones (`DISTINCT`) or the first format's.
    ///
    /// As in the AVX-512 query, a clear bit among the first `probes` chain
    /// values answers "absent" whatever the scheme; only a key whose bits
    /// are all set checks for repeats (distinct probes), and the ~3% with a
    /// repeat take the scalar code.
    ///
    /// # Safety
    ///
    /// `num_lines` must be at least 1, `probes` at most 8, and the CPU must
    /// support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn may_contain<F: BloomLines, const DISTINCT: bool>(
        filter: &F,
        key_hash: u64,
    ) -> bool {
        let layout = filter.layout();
        let state = (key_hash >> 32) as u32 | u32::from(DISTINCT);
        // SAFETY: `F`'s contract and `num_lines >= 1` (caller).
        let line = unsafe { line_ptr(layout, filter.lines(), key_hash) };
        // SAFETY: `first_lane_ones` and `PROBE_POWERS_0_8` are 8 u32 each.
        let (ones, powers) = unsafe {
            (
                _mm256_loadu_si256(layout.first_lane_ones.0.as_ptr().cast::<__m256i>()),
                _mm256_loadu_si256(PROBE_POWERS_0_8.as_ptr().cast::<__m256i>()),
            )
        };
        // x's top 9 bits are the probe's bit position b in the line.
        let x = _mm256_mullo_epi32(_mm256_set1_epi32(state as i32), powers);
        // SAFETY: `line` is 64 readable bytes.
        let missing = unsafe { missing_bits(line, x, ones) };
        if _mm256_testz_si256(missing, missing) == 0 {
            return false;
        }
        if DISTINCT {
            // SAFETY: `repeat_sentinels` is 8 u32.
            let sentinels =
                unsafe { _mm256_loadu_si256(layout.repeat_sentinels.0.as_ptr().cast::<__m256i>()) };
            if has_repeat(_mm256_or_si256(_mm256_srli_epi32(x, 23), sentinels)) {
                // SAFETY: 64 readable bytes; `[u8; 64]` has alignment 1.
                let block = unsafe { &*line.cast::<[u8; LINE_BYTES]>() };
                return line_has_probes(block, key_hash, layout);
            }
        }
        true
    }

    /// Whether two of the eight lanes hold the same value: each lane is
    /// compared with the lanes 1, 2, 3 and 4 places further round, which
    /// covers every pair once or twice.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn has_repeat(v: __m256i) -> bool {
        // The permute reads each index modulo 8.
        let r1 = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8));
        let r2 = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(2, 3, 4, 5, 6, 7, 8, 9));
        let r3 = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(3, 4, 5, 6, 7, 8, 9, 10));
        let r4 = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(4, 5, 6, 7, 8, 9, 10, 11));
        let eq = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi32(v, r1), _mm256_cmpeq_epi32(v, r2)),
            _mm256_or_si256(_mm256_cmpeq_epi32(v, r3), _mm256_cmpeq_epi32(v, r4)),
        );
        _mm256_testz_si256(eq, eq) == 0
    }
}

/// The 64-byte line `line` of `bytes`, or `None` past the end.
#[inline]
fn line_at(bytes: &[u8], line: usize) -> Option<&[u8; LINE_BYTES]> {
    let start = line.checked_mul(LINE_BYTES)?;
    let end = start.checked_add(LINE_BYTES)?;
    bytes.get(start..end)?.try_into().ok()
}

/// Word `word` (taken modulo 8) of a line, read little endian, so that bit
/// `b` of the line (byte `b / 8`, bit `b % 8`) is bit `b % 64` of word
/// `b / 64`: the byte-level on-disk layout read 64 bits at a time.
#[inline]
fn line_word(block: &[u8; LINE_BYTES], word: u32) -> u64 {
    let off = (word as usize & 7) * 8;
    u64::from_le_bytes([
        block[off],
        block[off + 1],
        block[off + 2],
        block[off + 3],
        block[off + 4],
        block[off + 5],
        block[off + 6],
        block[off + 7],
    ])
}

/// Number of 64-byte lines for `num_keys` keys at `bits_per_key`: at least
/// one line for a non-empty set, none for an empty one.
fn lines_for(num_keys: usize, bits_per_key: f64) -> u32 {
    if num_keys == 0 {
        return 0;
    }
    let total_bits = (num_keys as f64 * bits_per_key).ceil();
    // `as` saturates: NaN gives 0 and huge values u64::MAX, both clamped.
    (total_bits as u64)
        .div_ceil(LINE_BITS as u64)
        .clamp(1, u32::MAX as u64) as u32
}

/// `build` (a builder of any format taking a line count and a probe count)
/// sized for `bits_per_key`: the lines that budget buys for the keys, and
/// the probe count chosen for it.
fn at_bits_per_key(
    key_hashes: &[u64],
    bits_per_key: f64,
    build: fn(&[u64], u32, u32) -> Vec<u8>,
) -> Vec<u8> {
    build(
        key_hashes,
        lines_for(key_hashes.len(), bits_per_key),
        probes_for_bits_per_key(bits_per_key),
    )
}

/// Builds blocked Bloom filter bytes for `key_hashes` at `bits_per_key`.
pub(crate) fn build_bloom(key_hashes: &[u64], bits_per_key: f64) -> Vec<u8> {
    at_bits_per_key(key_hashes, bits_per_key, build_lines)
}

/// Builds a filter of exactly `lines` lines with `probes` probes per key,
/// in the current format ([`FORMAT_BLOOM`], probes from shapes).
fn build_lines(key_hashes: &[u64], lines: u32, probes: u32) -> Vec<u8> {
    filter_bytes(lines, probes, FORMAT_BLOOM, |bits| {
        with_constant_probes(probes, |probes| {
            set_shape_bits(bits, key_hashes, lines, probes)
        })
    })
}

/// Calls `f(probes)` with `probes` as a constant for the counts up to 12
/// (25 bits/key): `f` inlined into each arm sees a constant count, so the
/// compiler unrolls its probe loop (8.4 -> 6.5 ns/key at 6 probes and
/// 10,000 keys when this was added, and the pairwise repeat check of format
/// 0x04 stays in registers). Larger counts get the variable.
#[inline(always)]
fn with_constant_probes(probes: u32, mut f: impl FnMut(u32)) {
    match probes {
        1 => f(1),
        2 => f(2),
        3 => f(3),
        4 => f(4),
        5 => f(5),
        6 => f(6),
        7 => f(7),
        8 => f(8),
        9 => f(9),
        10 => f(10),
        11 => f(11),
        12 => f(12),
        _ => f(probes),
    }
}

/// Sets the `probes` format-0x07 probe bits of every key in `bits`
/// (`lines` lines). Always inlined, so that each constant `probes` of
/// [`with_constant_probes`] gets its own unrolled copy.
#[inline(always)]
fn set_shape_bits(bits: &mut [u8], key_hashes: &[u64], lines: u32, probes: u32) {
    for_each_key_line(bits, key_hashes, lines, |h, block| {
        for i in 0..probes as usize {
            set_line_bit(block, shape_probe(h, i));
        }
    });
}

/// How many keys ahead the build asks the CPU for the line it will set
/// bits in (see [`for_each_key_line`]).
const BUILD_PREFETCH_DISTANCE: usize = 16;

/// Calls `set(h, line)` for every key hash `h` with the line of `bits`
/// (`lines` lines) it maps to: the loop every build format shares, which
/// differ only in the probe bits `set` sets.
///
/// Before it sets key `i`'s bits it prefetches the line of key `i + 16`.
/// Without that, each key's read-modify-writes of a line outside the cache
/// wait for the line, and so do the stores of the keys after it (stores
/// leave the CPU in order), so few keys' misses overlap: a build of
/// 1,000,000 keys (a 1.25 MB filter, outside a 512 KiB L2) took 10.0 ns/key
/// on Zen 3 and 7.7 with the prefetch, with no change at 10,000 and 100,000
/// keys (docs/filters.md, "Build prefetch").
#[inline(always)]
fn for_each_key_line(
    bits: &mut [u8],
    key_hashes: &[u64],
    lines: u32,
    mut set: impl FnMut(u64, &mut [u8; LINE_BYTES]),
) {
    for (i, &h) in key_hashes.iter().enumerate() {
        if let Some(&ahead) = key_hashes.get(i + BUILD_PREFETCH_DISTANCE) {
            let ahead_line = fastrange32(ahead as u32, lines) as usize;
            if let Some(byte) = bits.get(ahead_line * LINE_BYTES) {
                super::prefetch_read(byte);
            }
        }
        let line = fastrange32(h as u32, lines) as usize;
        let Some(block) = line_at_mut(bits, line) else {
            continue; // unreachable: fastrange32 < lines
        };
        set(h, block);
    }
}

/// Builds a filter in the second format ([`FORMAT_BLOOM_V2`], the first
/// distinct chain values), which sievedb no longer writes but still reads:
/// for tests and for measuring the formats side by side.
#[doc(hidden)]
pub fn build_v2(key_hashes: &[u64], bits_per_key: f64) -> Vec<u8> {
    at_bits_per_key(key_hashes, bits_per_key, build_lines_v2)
}

/// [`build_v2`] with exactly `lines` lines and `probes` probes.
fn build_lines_v2(key_hashes: &[u64], lines: u32, probes: u32) -> Vec<u8> {
    // An AVX-512 build (the query's conflict and pdep steps, then one
    // read-modify-write per probe) measured slower: 8.3 vs 6.7 ns/key at
    // 10,000 keys.
    filter_bytes(lines, probes, FORMAT_BLOOM_V2, |bits| {
        build_distinct_portable(bits, key_hashes, lines, probes)
    })
}

/// Filter bytes of `lines` zeroed lines, filled in by `set_bits`, then the
/// trailer.
fn filter_bytes(lines: u32, probes: u32, format: u8, set_bits: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let body = lines as usize * LINE_BYTES;
    let mut out = vec![0u8; body + TRAILER_BYTES];
    set_bits(&mut out[..body]);
    out[body..body + 4].copy_from_slice(&lines.to_le_bytes());
    out[body + 4] = probes as u8;
    out[body + 5] = format;
    out
}

/// Sets every key's distinct probe bits in `bits`.
fn build_distinct_portable(bits: &mut [u8], key_hashes: &[u64], lines: u32, probes: u32) {
    with_constant_probes(probes, |probes| {
        set_distinct_bits(bits, key_hashes, lines, probes)
    })
}

/// Sets the `probes` distinct probe bits of every key in `bits` (`lines`
/// lines). Always inlined, so that each constant `probes` of
/// [`with_constant_probes`] gets its own unrolled copy.
#[inline(always)]
fn set_distinct_bits(bits: &mut [u8], key_hashes: &[u64], lines: u32, probes: u32) {
    for_each_key_line(bits, key_hashes, lines, |h, block| {
        visit_distinct_probes::<true>((h >> 32) as u32, probes, |bit| set_line_bit(block, bit));
    });
}

/// Builds a filter in the first format ([`FORMAT_BLOOM_V1`], probes with
/// replacement), which sievedb no longer writes but still reads: for tests
/// and for measuring the two formats side by side.
#[doc(hidden)]
pub fn build_v1(key_hashes: &[u64], bits_per_key: f64) -> Vec<u8> {
    at_bits_per_key(key_hashes, bits_per_key, build_lines_v1)
}

/// [`build_v1`] with exactly `lines` lines and `probes` probes.
fn build_lines_v1(key_hashes: &[u64], lines: u32, probes: u32) -> Vec<u8> {
    filter_bytes(lines, probes, FORMAT_BLOOM_V1, |bits| {
        for_each_key_line(bits, key_hashes, lines, |h, block| {
            let state = (h >> 32) as u32;
            for &power in PROBE_POWERS.iter().take(probes as usize) {
                set_line_bit(block, state.wrapping_mul(power) >> 23);
            }
        });
    })
}

/// Sets bit `bit` (taken modulo 512) of a line: one 64-bit read-modify-write
/// of the little-endian word that holds it (see [`line_word`]).
#[inline]
fn set_line_bit(block: &mut [u8; LINE_BYTES], bit: u32) {
    let word = (bit >> 6) & 7;
    let value = line_word(block, word) | (1u64 << (bit & 63));
    let off = word as usize * 8;
    block[off..off + 8].copy_from_slice(&value.to_le_bytes());
}

/// The mutable 64-byte line `line` of `bytes`, or `None` past the end.
#[inline]
fn line_at_mut(bytes: &mut [u8], line: usize) -> Option<&mut [u8; LINE_BYTES]> {
    let start = line.checked_mul(LINE_BYTES)?;
    let end = start.checked_add(LINE_BYTES)?;
    bytes.get_mut(start..end)?.try_into().ok()
}

/// Policy for the cache-local blocked Bloom filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BloomPolicy {
    bits_per_key: f64,
}

impl BloomPolicy {
    /// The name recorded in tables built with this policy.
    pub const NAME: &'static str = "sievedb.BlockedBloom";

    /// A blocked Bloom filter with `bits_per_key` bits per key (fractional
    /// values work). Out-of-range values are clamped, not rejected: values
    /// below 1 become 1, above [`MAX_BITS_PER_KEY`] become 100, and NaN
    /// becomes the default 10. Use [`try_new`](Self::try_new) to reject them.
    pub fn new(bits_per_key: f64) -> BloomPolicy {
        let bits_per_key = if bits_per_key.is_nan() {
            10.0
        } else {
            bits_per_key.clamp(1.0, MAX_BITS_PER_KEY)
        };
        BloomPolicy { bits_per_key }
    }

    /// Like [`new`](Self::new) but returns [`Error::InvalidArgument`] for
    /// NaN, infinite, values below 1 or above 100 bits per key.
    pub fn try_new(bits_per_key: f64) -> Result<BloomPolicy> {
        if !bits_per_key.is_finite() || !(1.0..=MAX_BITS_PER_KEY).contains(&bits_per_key) {
            return Err(Error::invalid(format!(
                "bloom bits per key must be in [1, 100], got {bits_per_key}"
            )));
        }
        Ok(BloomPolicy { bits_per_key })
    }

    /// The smallest bits/key (to 0.01) whose theoretical blocked-Bloom
    /// false-positive rate is at most `p`. `p` must lie in (0, 1).
    pub fn with_fp_rate(p: f64) -> Result<BloomPolicy> {
        if p.is_nan() || p <= 0.0 || p >= 1.0 {
            return Err(Error::invalid(format!(
                "false-positive rate must be in (0, 1), got {p}"
            )));
        }
        let fp = |bpk: f64| blocked_bloom_fp_rate(bpk, probes_for_bits_per_key(bpk));
        if fp(MAX_BITS_PER_KEY) > p {
            return Err(Error::invalid(format!(
                "false-positive rate {p} needs more than {MAX_BITS_PER_KEY} bits per key"
            )));
        }
        // Over bits/key in whole hundredths (so the answer is exactly what
        // was tested), the probe count steps up at the table's bounds and the
        // rate jumps *up* at some of those steps (from 30 bits/key, where
        // the count grows by one every 2 bits/key); between steps, with a
        // fixed probe count, it falls as the bits grow. So take the runs of
        // one probe count in order, test each run's last (best) size, and
        // bisect inside the first run that reaches `p`.
        let probes_at = |centi: u32| probes_for_bits_per_key(f64::from(centi) / 100.0);
        let fp_at = |centi: u32| fp(f64::from(centi) / 100.0);
        const FIRST: u32 = 100;
        const LAST: u32 = (MAX_BITS_PER_KEY * 100.0) as u32;
        let mut start = FIRST;
        while start <= LAST {
            // The run's last size: the probe count never falls as bits grow.
            let probes = probes_at(start);
            let (mut lo, mut hi) = (start, LAST);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if probes_at(mid) == probes {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            let end = lo;
            if fp_at(end) <= p {
                // The smallest size of the run whose rate reaches `p`.
                let (mut lo, mut hi) = (start, end);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if fp_at(mid) <= p {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                return Ok(BloomPolicy {
                    bits_per_key: f64::from(lo) / 100.0,
                });
            }
            start = end + 1;
        }
        // Not reached: the last run ends at MAX_BITS_PER_KEY, checked above.
        Ok(BloomPolicy {
            bits_per_key: MAX_BITS_PER_KEY,
        })
    }

    /// Bits per key this policy builds with.
    pub fn bits_per_key(&self) -> f64 {
        self.bits_per_key
    }

    /// Probes per key this policy builds with.
    pub fn probes(&self) -> u32 {
        probes_for_bits_per_key(self.bits_per_key)
    }

    /// Theoretical false-positive rate of filters built by this policy.
    pub fn expected_fp_rate(&self) -> f64 {
        blocked_bloom_fp_rate(self.bits_per_key, self.probes())
    }
}

impl Default for BloomPolicy {
    fn default() -> Self {
        BloomPolicy::new(10.0)
    }
}

impl FilterPolicy for BloomPolicy {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn build(&self, key_hashes: &[u64]) -> Vec<u8> {
        build_bloom(key_hashes, self.bits_per_key)
    }

    fn may_contain(&self, filter: &[u8], key_hash: u64) -> bool {
        super::may_contain(filter, key_hash)
    }

    /// [`bits_per_key`](Self::bits_per_key).
    fn budget_bits_per_key(&self) -> Option<f64> {
        Some(self.bits_per_key)
    }

    /// [`BloomPolicy::new`]`(bits_per_key)` (clamped like it).
    fn with_budget_bits_per_key(&self, bits_per_key: f64) -> Option<Arc<dyn FilterPolicy>> {
        Some(Arc::new(BloomPolicy::new(bits_per_key)))
    }
}

const _: () = assert!(BUILTIN_NAME_PREFIX.len() < BloomPolicy::NAME.len());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theory_matches_known_values() {
        // A standard Bloom filter of m bits, n keys, k probes has
        // fp ~ (1 - e^(-kn/m))^k; a blocked one is worse. At 10 bits/key and
        // 6 probes the standard figure is 0.843%, the blocked one ~0.97%.
        let fp10 = blocked_bloom_fp_rate(10.0, 6);
        let standard10 = (1.0 - (-0.6f64).exp()).powi(6);
        assert!(fp10 > standard10 && fp10 < 0.0098, "{fp10}");
        let fp16 = blocked_bloom_fp_rate(16.0, 9);
        let standard16 = (1.0 - (-9.0f64 / 16.0).exp()).powi(9);
        assert!(fp16 > standard16 && fp16 < 0.00090, "{fp16}");
        // One key alone in one line with one probe: a query is a false
        // positive exactly when it probes the key's bit.
        let one = blocked_bloom_fp_rate(512.0, 1);
        let poisson1 = (-1.0f64).exp();
        let expected: f64 = (1..60)
            .map(|j| {
                let pj = poisson1 / (1..=j).map(|i| i as f64).product::<f64>();
                pj * (1.0 - (1.0 - 1.0 / 512.0f64).powi(j))
            })
            .sum();
        assert!((one - expected).abs() < 1e-12, "{one} vs {expected}");
    }

    #[test]
    fn probe_table() {
        assert_eq!(probes_for_bits_per_key(10.0), 6);
        assert_eq!(probes_for_bits_per_key(16.0), 9);
        assert_eq!(probes_for_bits_per_key(1.0), 1);
        assert_eq!(probes_for_bits_per_key(100.0), 30);
        // Far beyond any policy (policies clamp to 100): still the cap, not a
        // wrapped count.
        assert_eq!(probes_for_bits_per_key(1e10), 30);
        assert_eq!(probes_for_bits_per_key(f64::MAX), 30);
    }

    #[test]
    fn with_fp_rate_inverts_theory() {
        let p = BloomPolicy::with_fp_rate(0.01).unwrap();
        assert!(p.expected_fp_rate() <= 0.01);
        assert!(p.bits_per_key() > 9.0 && p.bits_per_key() < 10.5);
        assert!(BloomPolicy::with_fp_rate(0.0).is_err());
        assert!(BloomPolicy::with_fp_rate(1.0).is_err());
        assert!(BloomPolicy::with_fp_rate(f64::NAN).is_err());
    }

    /// The shapes of format 0x07 as the module doc and
    /// `shape_multipliers` describe them, written out naively.
    fn reference_shapes() -> &'static [(u32, Vec<u32>)] {
        static SHAPES: std::sync::OnceLock<Vec<(u32, Vec<u32>)>> = std::sync::OnceLock::new();
        SHAPES.get_or_init(generate_reference_shapes)
    }

    fn generate_reference_shapes() -> Vec<(u32, Vec<u32>)> {
        let mut x = SHAPE_SEED;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        (0..128)
            .map(|_| {
                let low = (next() as u32 % (1 << 23)) | 1;
                let mut values = Vec::new();
                while values.len() < 32 {
                    let v = (next() >> 55) as u32;
                    if !values.contains(&v) {
                        values.push(v);
                    }
                }
                (low, values)
            })
            .collect()
    }

    /// A key's probe bits as the module doc defines them, written out
    /// naively. Format 0x07: the top 9 bits of `(hi32 | 1) x (e << 23 |
    /// L)` over the shape `(h >> 5) % 128`'s first values. Earlier formats:
    /// the first `probes` values of the chain (distinct ones only in format
    /// 0x04; at most 64 chain values).
    fn reference_probes(h: u64, probes: u8, format: u8) -> Vec<usize> {
        if format == FORMAT_BLOOM {
            let (low, values) = &reference_shapes()[(h >> 5) as usize % 128];
            let state = (h >> 32) as u32 | 1;
            return values[..probes as usize]
                .iter()
                .map(|&e| (state.wrapping_mul(e << 23 | low) >> 23) as usize)
                .collect();
        }
        let distinct = format == FORMAT_BLOOM_V2;
        let mut state = (h >> 32) as u32;
        if distinct {
            state |= 1;
        }
        let mut out = Vec::new();
        for _ in 0..64 {
            if out.len() == probes as usize {
                break;
            }
            let bit = (state >> 23) as usize;
            if !distinct || !out.contains(&bit) {
                out.push(bit);
            }
            state = state.wrapping_mul(0x9e37_79b9);
        }
        out
    }

    /// The on-disk format, written out byte by byte as the module doc
    /// describes it: bit `b` of a line is bit `b % 8` of byte `b / 8`.
    fn reference_build(hashes: &[u64], bits_per_key: f64, format: u8) -> Vec<u8> {
        let probes = probes_for_bits_per_key(bits_per_key) as u8;
        let lines = lines_for(hashes.len(), bits_per_key);
        let mut out = vec![0u8; lines as usize * LINE_BYTES];
        for &h in hashes {
            let line = ((h as u32 as u64 * lines as u64) >> 32) as usize;
            for bit in reference_probes(h, probes, format) {
                out[line * LINE_BYTES + bit / 8] |= 1 << (bit % 8);
            }
        }
        out.extend_from_slice(&lines.to_le_bytes());
        out.push(probes);
        out.push(format);
        out
    }

    fn reference_query(bytes: &[u8], h: u64) -> bool {
        let n = bytes.len();
        let lines = u32::from_le_bytes(bytes[n - 6..n - 2].try_into().unwrap());
        let probes = bytes[n - 2];
        if lines == 0 {
            return false;
        }
        let line = ((h as u32 as u64 * lines as u64) >> 32) as usize;
        reference_probes(h, probes, bytes[n - 1])
            .into_iter()
            .all(|bit| bytes[line * LINE_BYTES + bit / 8] & (1 << (bit % 8)) != 0)
    }

    /// A xorshift64 stream from `seed` (not 0): test hashes.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn word_level_code_keeps_the_byte_level_format() {
        let mut next = xorshift(0x0123_4567_89ab_cdefu64);
        for (n, bpk) in [(1usize, 10.0), (100, 6.0), (5000, 10.0), (3000, 16.5)] {
            let hashes: Vec<u64> = (0..n).map(|_| next()).collect();
            for (bytes, format) in [
                (build_bloom(&hashes, bpk), FORMAT_BLOOM),
                (build_v2(&hashes, bpk), FORMAT_BLOOM_V2),
                (build_v1(&hashes, bpk), FORMAT_BLOOM_V1),
            ] {
                let expected = reference_build(&hashes, bpk, format);
                assert_eq!(bytes, expected, "n={n} bpk={bpk} format={format}");
                let layout = BloomLayout::parse(&bytes).unwrap();
                assert_eq!(layout.format(), format);
                assert_eq!(layout.distinct_probes(), format != FORMAT_BLOOM_V1);
                for _ in 0..20_000 {
                    let h = next();
                    assert_eq!(layout.may_contain(&bytes, h), reference_query(&bytes, h));
                }
            }
        }
    }

    #[test]
    fn distinct_probes_are_distinct_even_for_degenerate_states() {
        let mut states = vec![
            0u32,
            1,
            2,
            0x8000_0000,
            0xffff_ffff,
            0x0080_0000,
            0xff80_0000,
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            states.push(x as u32);
        }
        for &state in &states {
            for probes in 1..=MAX_PROBES {
                let mask = distinct_probe_mask(state, probes);
                let bits: u32 = mask.iter().map(|w| w.count_ones()).sum();
                assert_eq!(bits, probes, "state {state:#x} probes {probes}");
            }
        }
    }

    #[test]
    fn shapes_hold_distinct_values_over_a_shared_low_part() {
        let reference = reference_shapes();
        for (t, shape) in SHAPE_MULTIPLIERS.iter().enumerate() {
            let (low, values) = &reference[t];
            for (i, &c) in shape.iter().enumerate() {
                assert_eq!(c, values[i] << 23 | low, "shape {t} value {i}");
            }
            let mut tops: Vec<u32> = shape.iter().map(|c| c >> 23).collect();
            tops.sort_unstable();
            tops.dedup();
            assert_eq!(tops.len(), SHAPE_VALUES, "shape {t}");
        }
        #[cfg(target_arch = "x86_64")]
        for (t, shape) in SHAPE_MULTIPLIERS.iter().enumerate() {
            assert_eq!(SHAPES_8.0[t], shape[..8]);
            assert_eq!(SHAPES_16.0[t], shape[..16]);
        }
    }

    /// Format 0x07's probes are distinct for every key, even states with
    /// many trailing zeros, whatever the shape and probe count.
    #[test]
    fn shape_probes_are_distinct_for_every_key() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut hashes: Vec<u64> = [0u32, 1, 2, 0x8000_0000, 0xffff_ffff, 0x0080_0000]
            .iter()
            .flat_map(|&hi| (0..128u64).map(move |t| u64::from(hi) << 32 | t << 5))
            .collect();
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            hashes.push(x);
        }
        for &h in &hashes {
            let mut seen = [0u64; 8];
            for i in 0..MAX_PROBES as usize {
                let bit = shape_probe(h, i);
                let (word, one) = ((bit >> 6) as usize, 1u64 << (bit & 63));
                assert_eq!(seen[word] & one, 0, "hash {h:#x} probe {i}");
                seen[word] |= one;
            }
        }
    }

    #[test]
    fn every_probe_count_answers_like_the_reference_on_every_path() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let hashes: Vec<u64> = (0..700).map(|_| next()).collect();
        let every_format = (1..=MAX_PROBES).flat_map(|probes| {
            [
                (probes, build_lines(&hashes, 11, probes)),
                (probes, build_lines_v2(&hashes, 11, probes)),
                (probes, build_lines_v1(&hashes, 11, probes)),
            ]
        });
        for (probes, bytes) in every_format {
            let layout = BloomLayout::parse(&bytes).unwrap();
            assert_eq!(layout.probes(), probes);
            for path in QueryPath::available() {
                let on_path = layout.with_path(path);
                // The same path through a decoded `Filter` (its function
                // pointer, unchecked line reads).
                let filter = crate::filter::Filter::decode(&bytes)
                    .with_bloom_path(path.name())
                    .expect("a path this CPU runs");
                assert_eq!(
                    layout.may_contain_portable(&bytes, 7),
                    on_path.may_contain(&bytes, 7)
                );
                let mut x = 0x5851_f42d_4c95_7f2du64 ^ u64::from(probes);
                for i in 0..20_000 {
                    let h = if i < hashes.len() {
                        hashes[i]
                    } else {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x
                    };
                    let expected = reference_query(&bytes, h);
                    assert_eq!(
                        on_path.may_contain(&bytes, h),
                        expected,
                        "k={probes} {path:?}"
                    );
                    assert_eq!(filter.may_contain(h), expected, "k={probes} {path:?}");
                    if i < hashes.len() {
                        assert!(expected, "false negative at k={probes}");
                    }
                }
            }
            // An empty key set rejects everything on every path.
            let empty = build_lines(&[], 0, probes);
            let empty_layout = BloomLayout::parse(&empty).unwrap();
            for path in QueryPath::available() {
                let on_path = empty_layout.with_path(path);
                assert!(!on_path.may_contain(&empty, 12345), "{path:?}");
            }
        }
    }

    /// The decoded filter's query on every path this CPU runs (the direct
    /// calls of `Filter::may_contain` on AVX-512 and AVX2, the function
    /// pointer on the others) over line counts small and large, odd and
    /// even, whose line index needs the high half of the 32 x 32-bit
    /// product: the reference's answer for every hash, members included.
    #[test]
    fn decoded_query_answers_like_the_reference_at_many_line_counts() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        for num_lines in [1u32, 2, 3, 64, 65, 4_097, 70_001, 262_144] {
            for probes in [1, 6, 8] {
                let members: Vec<u64> = (0..num_lines.min(40_000)).map(|_| next()).collect();
                let bytes = build_lines(&members, num_lines, probes);
                let queries: Vec<u64> = (0..20_000).map(|_| next()).collect();
                for path in QueryPath::available() {
                    let filter = crate::filter::Filter::decode(&bytes)
                        .with_bloom_path(path.name())
                        .expect("a path this CPU runs");
                    for (i, &h) in members.iter().chain(&queries).enumerate() {
                        let expected = reference_query(&bytes, h);
                        assert_eq!(
                            filter.may_contain(h),
                            expected,
                            "{num_lines} lines, k={probes}, {path:?}"
                        );
                        assert!(expected || i >= members.len(), "false negative");
                    }
                }
            }
        }
    }

    /// The inline queries (`inline_asm`, `inline_asm_avx2`) declare every
    /// vector register they touch clobbered (and `vzeroupper` touches the
    /// upper halves of sixteen): a caller compiled with AVX2 that keeps
    /// twelve 256-bit accumulators live across each query ends with the
    /// same accumulators as without the queries, on every path. Without
    /// the declarations the compiler may leave accumulators in
    /// `ymm0`-`ymm15` across the query, which rewrites or halves them
    /// (this test failed, in the thirty-third session, with only three
    /// registers declared).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn inline_queries_keep_the_callers_vector_registers() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let hashes: Vec<u64> = (0..5_000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 29))
            .collect();
        let bytes = build_lines(&hashes[..2_000], 40, 7);
        for path in QueryPath::available() {
            let filter = crate::filter::Filter::decode(&bytes)
                .with_bloom_path(path.name())
                .expect("a path this CPU runs");
            // SAFETY: the CPU has AVX2 (checked above).
            let (with, hits) = unsafe { accumulate(&filter, &hashes, true) };
            // SAFETY: as above.
            let (without, _) = unsafe { accumulate(&filter, &hashes, false) };
            assert_eq!(with, without, "{path:?}");
            assert!((2_000..5_000).contains(&hits), "{path:?}: {hits}");
        }
    }

    /// Twelve 256-bit sums of `hashes`, each lane with its own offset,
    /// with a query of `filter` between the additions when `query`; and
    /// the number of hits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn accumulate(
        filter: &crate::filter::Filter,
        hashes: &[u64],
        query: bool,
    ) -> (Vec<u64>, usize) {
        use std::arch::x86_64::*;
        let mut acc: [__m256i; 12] =
            std::array::from_fn(|i| _mm256_set1_epi64x(i as i64 * 0x0101_0101));
        let mut hits = 0;
        for &h in hashes {
            if query {
                hits += usize::from(filter.may_contain(std::hint::black_box(h)));
            }
            for (i, a) in acc.iter_mut().enumerate() {
                let lane = _mm256_set_epi64x(h as i64, (h >> 1) as i64, (h >> 2) as i64, i as i64);
                *a = _mm256_add_epi64(_mm256_xor_si256(*a, lane), lane);
            }
        }
        let mut out = vec![0u64; 48];
        for (i, a) in acc.iter().enumerate() {
            // SAFETY: `out` holds 48 u64: 4 per accumulator.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(4 * i).cast(), *a) };
        }
        (out, hits)
    }

    /// The states with the fewest distinct values among their first sixteen
    /// chain values (ten: found by the exhaustive scan below), around the
    /// probe counts where the AVX-512 query starts counting them (9..=12):
    /// every path answers like the reference, with the line holding exactly
    /// the key's probes and with each probe removed in turn.
    #[test]
    fn states_with_the_fewest_distinct_chain_values_answer_like_the_reference() {
        for hi in [0x079c_b303u32, 0x879c_b303, 0x079c_b302, 0x879c_b302] {
            assert_eq!(
                {
                    let mut seen = [0u64; 8];
                    for &power in &CHAIN_POWERS[..16] {
                        let bit = (hi | 1).wrapping_mul(power) >> 23;
                        seen[(bit >> 6) as usize] |= 1 << (bit & 63);
                    }
                    seen.iter().map(|w| w.count_ones()).sum::<u32>()
                },
                MIN_DISTINCT_IN_16,
                "{hi:#x}"
            );
            for probes in 9..=12u8 {
                let h = u64::from(hi) << 32 | 0x1234_5678;
                let probe_bits = reference_probes(h, probes, FORMAT_BLOOM_V2);
                // One line: every key maps to it.
                let mut full = vec![0u8; LINE_BYTES];
                for &b in &probe_bits {
                    full[b / 8] |= 1 << (b % 8);
                }
                let mut lines = vec![full.clone()];
                for &b in &probe_bits {
                    let mut missing_one = full.clone();
                    missing_one[b / 8] &= !(1 << (b % 8));
                    lines.push(missing_one);
                }
                for (i, line) in lines.into_iter().enumerate() {
                    let mut bytes = line;
                    bytes.extend_from_slice(&1u32.to_le_bytes());
                    bytes.push(probes);
                    bytes.push(FORMAT_BLOOM_V2);
                    let expected = reference_query(&bytes, h);
                    assert_eq!(expected, i == 0, "k={probes} {hi:#x} line {i}");
                    let layout = BloomLayout::parse(&bytes).unwrap();
                    for path in QueryPath::available() {
                        assert_eq!(
                            layout.with_path(path).may_contain(&bytes, h),
                            expected,
                            "k={probes} {hi:#x} line {i} {path:?}"
                        );
                    }
                }
            }
        }
    }

    /// Checks [`MIN_DISTINCT_IN_16`] over every odd state, on all cores.
    #[test]
    fn every_state_has_enough_distinct_values_among_sixteen() {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
        let chunk = (1u64 << 31).div_ceil(threads);
        let fewest = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || {
                        let mut fewest = u32::MAX;
                        let end = ((t + 1) * chunk).min(1 << 31);
                        for half in t * chunk..end {
                            let state = (half as u32) << 1 | 1;
                            let mut seen = [0u64; 8];
                            for &power in &CHAIN_POWERS[..16] {
                                let bit = state.wrapping_mul(power) >> 23;
                                seen[(bit >> 6) as usize] |= 1 << (bit & 63);
                            }
                            let distinct = seen.iter().map(|w| w.count_ones()).sum::<u32>();
                            fewest = fewest.min(distinct);
                        }
                        fewest
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap())
                .min()
                .unwrap()
        });
        assert!(fewest >= MIN_DISTINCT_IN_16, "{fewest}");
    }

    #[test]
    fn probe_table_is_near_optimal() {
        for half_bits in 2..=52 {
            let bits_per_key = half_bits as f64 / 2.0;
            let chosen = blocked_bloom_fp_rate(bits_per_key, probes_for_bits_per_key(bits_per_key));
            // The optimum up to 26 bits/key is 13 probes; more only cost time.
            let best = (1..=16)
                .map(|k| blocked_bloom_fp_rate(bits_per_key, k))
                .fold(f64::INFINITY, f64::min);
            assert!(chosen <= best * 1.02, "{bits_per_key}: {chosen} vs {best}");
        }
    }

    #[test]
    fn theory_survives_tiny_bits_per_key() {
        // Below ~0.69 bits/key the Poisson mean passes 745 and e^-mean
        // underflows; the rate must still come out near 1, not 0.
        let fp = blocked_bloom_fp_rate(0.01, 1);
        assert!(fp > 0.99, "{fp}");
        let fp = blocked_bloom_fp_rate(0.5, 1);
        assert!(fp > 0.8 && fp <= 1.0, "{fp}");
    }

    #[test]
    fn empty_set_rejects_everything() {
        let bytes = build_bloom(&[], 10.0);
        let layout = BloomLayout::parse(&bytes).unwrap();
        assert!(!layout.may_contain(&bytes, 12345));
    }
}
