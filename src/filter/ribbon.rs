//! Standard Ribbon filter (Dillinger and Walzer, "Ribbon filter: practically
//! smaller than Bloom and Xor", 2021, arXiv 2103.02515), with 128-bit
//! coefficient rows.
//!
//! This module holds [`RibbonPolicy`] and format 0x05 (described below).
//! The policy builds format 0x06 ([`ribbon64`](super::ribbon64): 64-bit
//! rows, the same false-positive rates); format 0x05 is still read, and built when asked for (`BuildKnobs::format`, for
//! tests and benchmarks that compare the formats).
//!
//! # Idea
//!
//! Each key gets a *row*: a start slot `s`, a 128-bit coefficient vector `c`
//! (bit 0 forced to 1) covering slots `s..s+128`, and an `r`-bit result
//! fingerprint `f`. The filter stores a solution matrix `S` (one `r`-bit value
//! per slot) such that for every key, the XOR of `S[s + i]` over the set bits
//! `i` of `c` equals `f`. A query recomputes that XOR for its key and compares
//! it with `f`; an absent key matches each result bit with probability 1/2, so
//! the false-positive rate is `2^-r`.
//!
//! *Banding* (incremental Gaussian elimination): the band holds at most one
//! row per slot, the row whose first set bit (pivot) is that slot. A new row
//! goes to its start slot; if the slot is taken, the stored row is XORed into
//! it (coefficients and result), which clears bit 0, and the row moves right
//! to its new first set bit. It ends in an empty slot, or reduces to all
//! zeros: with a zero result it was redundant (a duplicate key), otherwise the
//! system has no solution and the build retries with another seed.
//!
//! *Back substitution* walks the slots from last to first: a slot without a
//! row gets 0; a slot with row `(c, f)` gets `f XOR (XOR of S[slot + i] for
//! set bits i > 0 of c)`, which only involves slots already solved.
//!
//! # Shards
//!
//! The overhead a single band needs for a given build-failure rate grows
//! with its size (measured: about 2.5% at 8,000 keys, 3.5% at 130,000, over
//! 4.5% at 1,000,000 for a 1-in-20 failure rate per seed), because a larger
//! band has more places where too many rows pile up. The keys are therefore
//! split by the high bits of their hash (`fastrange64(h, num_shards)`) into
//! shards of about [`SHARD_KEYS`] keys, each an independent Ribbon system
//! with its own size, seed and retries. The overhead stays that of a small
//! band at any filter size, a failed seed costs one shard's work, and the
//! band being solved fits in the L2 cache. The price is one extra 13-byte
//! table entry per shard (0.013 bits/key at 8,192 keys per shard). The
//! table is decoded once, when the filter is parsed, into an array of
//! per-shard query parameters (seed mask, start count, word offset, first
//! and last lower block, and for each column count the byte offset of
//! block 0, the block stride and the load mask), so a query reads one
//! 64-byte entry of that array instead of parsing bytes.
//!
//! The build bands three shards at a time, one elimination step of each in
//! turn: a single chain of steps is latency-bound (each slot to visit
//! depends on the previous XOR and trailing-zero count), unrelated ones
//! overlap in the CPU. The shards form a work queue: a lane whose shard is
//! solved (back substitution at once, into the output) or whose seed failed
//! (prepared again with the next seed) takes up its next work at once, so
//! retried seeds and the ends of unequal shards are banded next to other
//! shards rather than alone. A shard's bytes depend only on its keys and
//! seeds, so the schedule does not change them. Measured against banding
//! two shards at a time with retries alone: 1.12-1.16x faster builds at
//! 10,000 keys, 1.25-1.30x at 1,000,000; four lanes were slower (the loop
//! no longer keeps the lanes in registers), and so was a branch-free step
//! that removes the mispredicted branch at the end of each key's chain
//! (every step then stores and selects, and the loop is bound by its
//! instruction count); see docs/filters.md.
//!
//! # Fractional result bits
//!
//! To hit a false-positive rate `p` between `2^-u` and `2^-(u-1)`, the first
//! `upper_start_block` blocks of a shard store `u - 1` columns and the rest
//! store `u`. A key uses the column count of the block its start slot falls
//! in; a key that starts in an upper block only touches upper blocks, so the
//! whole system is solved with `u` columns and the extra column of the lower
//! blocks is simply not stored. The share of starts in upper blocks is
//! chosen so that `f * 2^-u + (1 - f) * 2^-(u-1) = p`. Shards are sized in
//! whole rows' widths (128 slots) and their first upper block is chosen on
//! that grid, then stored as blocks of 64 slots (twice as many, and twice
//! the first upper block): the sizes and rates of the 128-slot layout.
//!
//! # Layout
//!
//! ```text
//! +-----------------+-----+-------------------+-----------------------------+------------+-------+--------+------+
//! | shard 0         | ... | shard k-1         | shard table, k entries of   | num_shards | upper | crc32  | 0x05 |
//! | solution        |     | solution          | 13 bytes:                   | (k) u32 LE | cols  | u32 LE | (id) |
//! |                 |     |                   |  word_offset       u32 LE   |            | u8    |        |      |
//! |                 |     |                   |  num_blocks        u32 LE   |            | 1..=32|        |      |
//! |                 |     |                   |  upper_start_block u32 LE   |            |       |        |      |
//! |                 |     |                   |  seed              u8       |            |       |        |      |
//! +-----------------+-----+-------------------+-----------------------------+------------+-------+--------+------+
//!
//! shard solution: blocks 0..num_blocks of 64 slots, block q = cols(q)
//!   words of 8 bytes, one after another (column-major within the block)
//!   cols(q) = upper_cols - 1 if q < upper_start_block, else upper_cols
//!   word j of block q = column j of slots 64q..64q+64 (u64 LE, bit i =
//!   slot 64q+i)
//! word_offset: where the shard's solution starts, in 8-byte words; shards
//!   are contiguous and in order, the last one ends at the shard table
//! num_blocks >= 2 (at least one row's width, 128 slots)
//! crc32 (CRC-32/ISO-HDLC, crc32fast): over the shard table, num_shards and
//!   upper cols
//! ```
//!
//! Format id 0x05. Format 0x03 had the same rows, sizes, shard table and
//! trailer, but blocks of 128 slots of 16-byte words (`num_blocks`,
//! `upper_start_block` and `word_offset` counted in those): still read and
//! answered exactly, through a bounds-checked scalar query (no vector
//! code), never built. The first version used id 0x02 with the layout of
//! 0x03 but another row hashing; its bytes are not read (see
//! [`FORMAT_RIBBON_V1`](super::FORMAT_RIBBON_V1)).
//!
//! The table and trailer carry their own checksum because a damaged seed or
//! offset would still look consistent yet make queries wrong, giving false
//! negatives; with the checksum, such damage decodes to "may contain". The
//! solution bits themselves are covered by the table's block checksum.
//!
//! `num_starts = 64 * num_blocks - 127`: a key's start is
//! `fastrange64(h1, num_starts)`, so its 128 slots stay inside its shard.
//! Its window begins at bit `shift = start % 64` of its start block `q =
//! start / 64` and spans blocks `q`, `q + 1` and `q + 2` (only `q` and `q +
//! 1` when `shift` is 0: block `q + 2` then need not exist). Block `q + 1`
//! starts right after block `q`, and block `q + 2` right after block `q +
//! 1`, which has one word more than block `q` when `q + 1` is the first
//! upper block: a query reads `3 x cols x 8` bytes (168 at 7 columns) in
//! three runs at `here`, `here + stride` and `here + 2 x stride` (+ 8 at
//! that one block).
//!
//! # Query
//!
//! On CPUs with AVX-512 F, VL, VBMI2 and VPOPCNTDQ (and BMI2; detected once,
//! when the layout is parsed) the query checks up to eight columns in zmm
//! registers (`mod avx512`): three masked 64-byte loads, one per block,
//! lane `j` = column `j` (lanes past the key's columns are neither read
//! nor checked); two `vpshrdvq` funnel shifts by `start` (the count is
//! taken mod 64) give each column's 128-slot window as a low and a high
//! 64-bit word; one `vpandq` and one `vpternlogq` with the broadcast
//! coefficient halves, one `vpopcntq` and one `vptestmq` give the eight
//! parities as a mask, compared with the key's result bits. Filters of 2 to
//! 8 upper columns (rates of 2^-8 and above) whose solution is under 4 GiB
//! take a variant without a loop and without bounds checks (`parse` has
//! shown that the blocks a key can read lie in the solution); a decoded
//! [`Filter`](super::Filter) calls that variant directly through its one
//! query function pointer, a [`RibbonLayout::may_contain`] call checks the
//! length of its bytes once first. The block offsets come from values
//! precomputed at parse (`ShardQuery`): one comparison of the start block
//! with the last lower block gives both the block kind and whether the
//! third block is one word further. Other column counts loop over chunks
//! of eight columns with bounds-checked slices.
//!
//! Without AVX-512, on CPUs with AVX2 the query (`mod avx2`) splits the
//! key's coefficients once into three 64-bit masks (`coeff << shift` over
//! the three blocks) and checks four columns per chunk: one masked 32-byte
//! load per block, three ANDs and two XORs, six shift-XORs that bring each
//! lane's parity to its top bit, and one `vmovmskpd`. The scalar query
//! does the same one column at a time; it checks the first four columns
//! without branches and stops there if any disagrees with the fingerprint,
//! which an absent key does with probability 15/16; one exit branch that is
//! nearly always right is cheaper than a mispredicted exit per column
//! (measured: 1.4x faster absent queries, same present ones).
//!
//! Parity is POPCNT when the CPU has it (run-time detection; the scalar
//! query and back substitution are then compiled with that target feature),
//! else a multiply trick; all paths give identical bytes and answers
//! (tested). With AVX-512 the back substitution solves eight columns at
//! once in zmm registers (`backsub::solve_avx512`, same bytes).
//!
//! # Hashing
//!
//! The shard comes from the key hash `h` directly (XXH3 is already well
//! mixed). Then, with the shard's seed `s`:
//!
//! ```text
//! seed_mask = (s + 1) * 0x9e3779b97f4a7c15            (mod 2^64)
//! g  = (h ^ seed_mask) * 0xbf58476d1ce4e5b9            (mod 2^64)
//! h1 = g ^ (g >> 32)
//! start  = fastrange64(h1, num_starts)                (high bits of h1)
//! p      = h1 * 0xc28f82822b650bed                    (full 128-bit product)
//! coeff  = (high64(p) ^ rotl(low64(p), 32)) << 64 | low64(p) | 1
//! result = bits 0..cols of (h1 >> 32)
//! ```
//!
//! Three multiplications instead of the two SplitMix64 finalisers of the
//! first version (four multiplications and six xor-shifts): the key hash is
//! already uniform, so the rehash only has to make seeds differ. The rotated
//! low half is XORed into the high coefficients because the product's high
//! half alone is close to `h1 x 0.76`, which would give keys with nearly the
//! same start nearly the same top coefficient bits. The build failure rate
//! per seed was re-measured with this hashing (docs/filters.md).
//!
//! # Fallback
//!
//! Below [`MIN_SLOTS`] slots a blocked Bloom filter is smaller, and when a
//! shard fails [`MAX_SEEDS`] seeds the build gives up on Ribbon: in both
//! cases the bytes are a blocked Bloom filter (the current format, id 0x07,
//! [`FORMAT_BLOOM`](super::FORMAT_BLOOM)) at the
//! equivalent bits per key, which the generic decoder reads as such.

use super::bloom::{self, blocked_bloom_fp_rate, probes_for_bits_per_key, BloomPolicy};
use super::shards::ShardedKeys;
use super::{fastrange64, FilterPolicy, BUILTIN_NAME_PREFIX, FORMAT_RIBBON};
use crate::error::{Error, Result};
use std::sync::Arc;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod backsub;
mod band;
mod layout;
mod query;

pub(crate) use layout::RibbonSource;
pub use layout::{RibbonLayout, RibbonShard};

use band::{run_jobs, Band, Job, LaneRow, LANES};

/// Bits per coefficient row (the row width): a key's row covers `W`
/// consecutive slots from its start.
const W: usize = 128;
/// Slots per block of the stored solution (format 0x05): one 64-bit word per
/// column and block.
const BLOCK_SLOTS: usize = 64;
/// Bytes per solution word (one column of one block).
const WORD_BYTES: usize = BLOCK_SLOTS / 8;
/// Slots per block, and bytes per word, of the retired layout of format
/// 0x03 (still read, never built).
const V3_BLOCK_SLOTS: usize = 128;
const V3_WORD_BYTES: usize = V3_BLOCK_SLOTS / 8;
/// Bytes per shard table entry: word_offset (4), num_blocks (4),
/// upper_start_block (4), seed (1).
pub const SHARD_ENTRY_BYTES: usize = 13;
/// Bytes after the shard table: num_shards (4), upper columns (1), crc32 (4),
/// format id (1).
pub const TRAILER_BYTES: usize = 10;
/// Most result bits (columns) a Ribbon filter stores: a false-positive rate
/// of about 2.3e-10. Rates below it are built with 32 columns.
pub const MAX_COLUMNS: u32 = 32;
/// Seeds a shard tries before the build falls back to a blocked Bloom filter
/// (RocksDB's bound as well).
pub const MAX_SEEDS: u32 = 256;
/// Filters that would have fewer slots than this are built as blocked Bloom
/// filters instead (RocksDB's threshold): at that size the Ribbon's fixed
/// costs are no longer paid back.
pub const MIN_SLOTS: usize = 1024;
/// Keys per shard the format 0x05 build aims at (shards hold
/// `n / ceil(n / SHARD_KEYS)` keys on average).
pub const SHARD_KEYS: usize = 8192;

const SEED_MULT: u64 = 0x9e37_79b9_7f4a_7c15;
/// Odd multiplier of the per-seed rehash.
const REHASH_MULT: u64 = 0xbf58_476d_1ce4_e5b9;
/// Odd multiplier whose full 128-bit product with the rehashed key gives the
/// coefficients.
const COEFF_MULT: u64 = 0xc28f_8282_2b65_0bed;

/// A key's row for a given seed.
#[derive(Clone, Copy)]
struct Row {
    start: usize,
    coeff: u128,
    result: u32,
}

/// What a seed XORs into the key hash before the rehash.
#[inline]
fn seed_mask(seed: u8) -> u64 {
    (seed as u64 + 1).wrapping_mul(SEED_MULT)
}

/// The per-seed rehash: one multiply (its high bits, which pick the start,
/// depend on every input bit) and one xor-shift (so the low bits, which feed
/// the result and the low coefficients, depend on the high ones). The key
/// hash is already uniform (XXH3), so this only has to make different seeds
/// give unrelated rows, not to repair a weak hash.
#[inline(always)]
fn seeded_with_mask(key_hash: u64, seed_mask: u64) -> u64 {
    let h = (key_hash ^ seed_mask).wrapping_mul(REHASH_MULT);
    h ^ (h >> 32)
}

#[inline]
fn seeded(key_hash: u64, seed: u8) -> u64 {
    seeded_with_mask(key_hash, seed_mask(seed))
}

/// The row of a rehashed key: start from the high bits (`fastrange64`),
/// coefficients from one 64x64->128-bit multiplication, result from the
/// high 32 bits.
///
/// The product's high half alone would be close to `h1 * COEFF_MULT / 2^64`,
/// so keys with nearly the same start (same top bits of `h1`) would get
/// nearly the same top coefficient bits, i.e. dependent rows; XORing in the
/// rotated low half, whose bits depend on the low bits of `h1`, removes that.
/// The result comes from other bits than the low coefficients, so that it is
/// not close to a linear function of them.
#[inline(always)]
fn row_from_seeded(h1: u64, num_starts: u64) -> Row {
    let product = (h1 as u128).wrapping_mul(COEFF_MULT as u128);
    let lo = product as u64;
    let hi = (product >> 64) as u64 ^ lo.rotate_left(32);
    Row {
        start: fastrange64(h1, num_starts) as usize,
        coeff: ((hi as u128) << 64) | (lo | 1) as u128,
        result: (h1 >> 32) as u32,
    }
}

/// Parity of the set bits of `v`, portable.
///
/// Without a multiply: the default x86-64 target has no POPCNT instruction,
/// and `count_ones` then expands to about 15 instructions. Here each
/// nibble's parity lands in its low bit, and one multiplication sums those 16
/// bits into the top nibble (Bit Twiddling Hacks, "parity with a multiply").
#[inline(always)]
pub(super) fn parity_mul(mut v: u64) -> u32 {
    v ^= v >> 1;
    v ^= v >> 2;
    v = (v & 0x1111_1111_1111_1111).wrapping_mul(0x1111_1111_1111_1111);
    ((v >> 60) & 1) as u32
}

/// Parity of the set bits of `v` with `count_ones`: one POPCNT instruction
/// when inlined into a function compiled with that feature.
#[inline(always)]
pub(super) fn parity_popcnt(v: u64) -> u32 {
    v.count_ones() & 1
}

/// XOR of the two halves: same parity as `x`.
#[inline(always)]
fn fold(x: u128) -> u64 {
    x as u64 ^ (x >> 64) as u64
}

/// Whether this CPU has POPCNT (cached by `std` after the first call).
#[inline(always)]
pub(super) fn has_popcnt() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Other targets either have a native population count in their
        // baseline or gain nothing from the detour; `count_ones` is right.
        true
    }
}

/// Columns a query checks before its first early exit. An absent key fails
/// one of them with probability 15/16, so the exit branch is predictable,
/// while the columns themselves are computed without branches (measured
/// against one exit per column, see docs/filters.md).
const EARLY_EXIT_COLUMNS: usize = 4;

/// Slot overhead (slots / keys - 1) a format 0x05 shard of `num_keys` keys
/// is built with, chosen from measurement (`cargo run --release --example
/// ribbon_overhead`, see docs/filters.md) so that about 1 seed in 20
/// fails. The slot count is then rounded to the nearest whole 128-slot block
/// (nearest rather than up, so rounding adds nothing on average).
pub fn overhead_for_keys(num_keys: usize) -> f64 {
    // (log2 keys, overhead) points, linear in log2(keys) between them; past
    // the last point +0.38% per doubling (RocksDB's growth rate).
    const POINTS: [(f64, f64); 6] = [
        (10.0, 0.022),
        (12.0, 0.022),
        (13.0, 0.0235),
        (15.0, 0.0295),
        (17.0, 0.032),
        (20.0, 0.039),
    ];
    let x = (num_keys.max(1) as f64).log2();
    if x <= POINTS[0].0 {
        return POINTS[0].1;
    }
    for pair in POINTS.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if x <= x1 {
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
        }
    }
    let (xl, yl) = POINTS[POINTS.len() - 1];
    yl + 0.0038 * (x - xl)
}

/// Build knobs for tests and the overhead tool.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuildKnobs {
    /// Fixed slot overhead for every shard instead of [`overhead_for_keys`]
    /// (format 0x05) or
    /// [`overhead64_for_keys`](super::ribbon64::overhead64_for_keys) (0x06),
    /// clamped to [-1, 10]
    /// (may be negative to force failures).
    pub overhead: Option<f64>,
    /// Seeds a shard may try (at most [`MAX_SEEDS`]).
    pub max_seeds: u32,
    /// Keys per shard to aim at in format 0x05 (default [`SHARD_KEYS`]).
    pub shard_keys: usize,
    /// The back substitution to use (every one must write the same bytes).
    pub solve_path: SolvePath,
    /// The format to build (default: [`RibbonFormat::Rows64`], 0x06).
    pub format: RibbonFormat,
    /// Keys per shard to aim at in format 0x06 (default
    /// [`SHARD_KEYS_64`](super::ribbon64::SHARD_KEYS_64); at most 60,000
    /// are used, so that a shard's slots fit its 16-bit size).
    pub shard_keys_64: usize,
    /// Shards format 0x06 bands at once, 1 to 4 (default
    /// [`LANES_64`](super::ribbon64::LANES_64)).
    pub lanes_64: usize,
    /// Band format 0x06 with the copy of the lanes' loop compiled for the
    /// crate's baseline target even on a CPU with BMI1 and BMI2, which
    /// otherwise gets the copy compiled with them (default `false`; both
    /// write the same bytes; for tests and benchmarks that compare them).
    pub band_baseline: bool,
    /// How format 0x06's rows are prepared (default [`RowPrep::Detect`];
    /// every choice writes the same bytes; for tests and benchmarks that
    /// compare them).
    pub rows: RowPrep,
    /// Split format 0x06 builds into exactly `ceil(keys / shard_keys_64)`
    /// shards, as builds before the twenty-sixth session did, instead of
    /// the nearest power of two (default `false`; see
    /// [`shard_count_64`](super::ribbon64::shard_count_64); for tests of
    /// the queries' `fastrange64` form and benchmarks that compare them).
    pub exact_shard_count_64: bool,
}

/// How a format-0x06 build prepares its rows ([`BuildKnobs::rows`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowPrep {
    /// What measured faster on this kind of CPU: eight keys at a time
    /// with AVX-512 F and DQ, except on Intel CPUs, one at a time.
    #[default]
    Detect,
    /// One key at a time, on any CPU.
    OneAtATime,
    /// Eight keys at a time if the CPU has AVX-512 F and DQ, else one at
    /// a time.
    EightAtATime,
}

/// Which Ribbon format a build writes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RibbonFormat {
    /// Format 0x05: 128-bit rows, shards of about [`SHARD_KEYS`] keys. Built
    /// only when asked for (tests, and benchmarks that compare the formats).
    Rows128,
    /// Format 0x06, what [`RibbonPolicy`] builds: 64-bit rows with smashed
    /// starts, small shards with one column count each (see
    /// [`ribbon64`](super::ribbon64)).
    #[default]
    Rows64,
}

impl BuildKnobs {
    /// The slot overhead for a shard of `keys` keys: the `overhead` knob,
    /// or else `default_for(keys)`, clamped to [-1, 10] (0 if not finite).
    pub(crate) fn overhead_for(&self, keys: usize, default_for: fn(usize) -> f64) -> f64 {
        let o = self.overhead.unwrap_or_else(|| default_for(keys));
        if o.is_finite() {
            o.clamp(-1.0, 10.0)
        } else {
            0.0
        }
    }
}

impl Default for BuildKnobs {
    fn default() -> Self {
        BuildKnobs {
            overhead: None,
            max_seeds: MAX_SEEDS,
            shard_keys: SHARD_KEYS,
            solve_path: SolvePath::Fastest,
            format: RibbonFormat::Rows64,
            shard_keys_64: super::ribbon64::SHARD_KEYS_64,
            lanes_64: super::ribbon64::LANES_64,
            band_baseline: false,
            rows: RowPrep::Detect,
            exact_shard_count_64: false,
        }
    }
}

/// What a build did (for tests and the overhead tool).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BuildOutcome {
    /// Shards built (0 when the Ribbon build was not attempted).
    pub shards: u32,
    /// Seeds that failed, over all shards.
    pub failed_seeds: u32,
    /// True when the bytes are a blocked Bloom filter.
    pub fell_back_to_bloom: bool,
}

/// Policy for the standard Ribbon filter: builds format 0x06
/// ([`ribbon64`](super::ribbon64)), or a blocked Bloom filter where a
/// Ribbon filter would be tiny or its build fails (see the module doc's
/// fallback); reads every Ribbon format.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RibbonPolicy {
    fp_rate: f64,
    bloom_bits_per_key: f64,
    /// The Bloom-equivalent bits per key the policy was made for: what a
    /// filter budget sizes it by ([`FilterPolicy::budget_bits_per_key`]).
    /// Equal to `bloom_bits_per_key` except under the rate cap, which
    /// raises the fallback's bits but not the budget (found by review).
    budget_bits_per_key: f64,
}

impl RibbonPolicy {
    /// The name recorded in tables built with this policy.
    pub const NAME: &'static str = "sievedb.Ribbon";

    /// A Ribbon filter with the false-positive rate of a blocked Bloom filter
    /// at `bloom_equivalent_bits_per_key` (10.0 gives about 0.954% at about
    /// 7 bits/key). Out-of-range values are clamped like
    /// [`BloomPolicy::new`]: below 1 becomes 1, above 100 becomes 100, NaN
    /// becomes 10. Use [`try_new`](Self::try_new) to reject them.
    ///
    /// Below about 1.45 bits per key the Bloom filter's rate is above 1/2,
    /// and a Ribbon filter stores at least one result bit per key: it is
    /// then built at 1/2 ([`MAX_FP_RATE`](Self::MAX_FP_RATE)), fewer false
    /// positives than the Bloom filter's, in about 1.02 bits per key.
    pub fn new(bloom_equivalent_bits_per_key: f64) -> RibbonPolicy {
        let bpk = BloomPolicy::new(bloom_equivalent_bits_per_key).bits_per_key();
        Self::from_bloom_bits(bpk)
    }

    /// Like [`new`](Self::new) but returns [`Error::InvalidArgument`] for NaN,
    /// infinite, values below 1 or above 100.
    pub fn try_new(bloom_equivalent_bits_per_key: f64) -> Result<RibbonPolicy> {
        let bpk = BloomPolicy::try_new(bloom_equivalent_bits_per_key)
            .map_err(|_| {
                Error::invalid(format!(
                    "ribbon bloom-equivalent bits per key must be in [1, 100], \
                     got {bloom_equivalent_bits_per_key}"
                ))
            })?
            .bits_per_key();
        Ok(Self::from_bloom_bits(bpk))
    }

    fn from_bloom_bits(bpk: f64) -> RibbonPolicy {
        Self::capped(
            blocked_bloom_fp_rate(bpk, probes_for_bits_per_key(bpk)),
            bpk,
        )
    }

    /// The most false positives a Ribbon filter has: one result bit per
    /// key. A policy asked for more is built at this rate
    /// ([`fp_rate`](Self::fp_rate) says so).
    pub const MAX_FP_RATE: f64 = 0.5;

    /// The policy for rate `p` with a Bloom fallback of `bloom_bits_per_key`,
    /// the rate capped at [`MAX_FP_RATE`](Self::MAX_FP_RATE) (found by
    /// review: the policy reported the Bloom rate, 0.632 at 1 bit per key,
    /// while its filters answered at 1/2). A capped policy's fallback gets
    /// the Bloom bits for 1/2 too, so that no table of it is worse.
    fn capped(p: f64, bloom_bits_per_key: f64) -> RibbonPolicy {
        if p <= Self::MAX_FP_RATE {
            return RibbonPolicy {
                fp_rate: p,
                bloom_bits_per_key,
                budget_bits_per_key: bloom_bits_per_key,
            };
        }
        let half = BloomPolicy::with_fp_rate(Self::MAX_FP_RATE)
            .map(|b| b.bits_per_key())
            .unwrap_or(bloom::MAX_BITS_PER_KEY);
        RibbonPolicy {
            fp_rate: Self::MAX_FP_RATE,
            bloom_bits_per_key: bloom_bits_per_key.max(half),
            budget_bits_per_key: bloom_bits_per_key,
        }
    }

    /// A Ribbon filter with false-positive rate `p`, which must lie in
    /// (0, 1). Rates below `2^-32` are built with 32 result bits, rates
    /// above 1/2 at 1/2 ([`MAX_FP_RATE`](Self::MAX_FP_RATE)). The Bloom
    /// fallback uses the bits per key [`BloomPolicy::with_fp_rate`] picks
    /// (100 where that is not enough).
    pub fn with_fp_rate(p: f64) -> Result<RibbonPolicy> {
        if p.is_nan() || p <= 0.0 || p >= 1.0 {
            return Err(Error::invalid(format!(
                "false-positive rate must be in (0, 1), got {p}"
            )));
        }
        let bloom_bits_per_key = BloomPolicy::with_fp_rate(p)
            .map(|b| b.bits_per_key())
            .unwrap_or(bloom::MAX_BITS_PER_KEY);
        Ok(Self::capped(p, bloom_bits_per_key))
    }

    /// The false-positive rate this policy's filters are built for: the
    /// rate asked for, or [`MAX_FP_RATE`](Self::MAX_FP_RATE) if that was
    /// higher.
    pub fn fp_rate(&self) -> f64 {
        self.fp_rate
    }

    /// Bits per key of the blocked Bloom filter built as the fallback.
    pub fn bloom_bits_per_key(&self) -> f64 {
        self.bloom_bits_per_key
    }

    /// `(upper_columns, share of starts that should use upper_columns)` for
    /// this policy's rate: `f * 2^-u + (1 - f) * 2^-(u-1) = p`.
    fn columns(&self) -> (u32, f64) {
        let bits = -self.fp_rate.log2();
        if bits >= MAX_COLUMNS as f64 {
            return (MAX_COLUMNS, 1.0);
        }
        let upper = (bits.ceil() as u32).clamp(1, MAX_COLUMNS);
        let lower_fp = 2f64.powi(1 - upper as i32);
        let upper_fp = 2f64.powi(-(upper as i32));
        let share = ((lower_fp - self.fp_rate) / (lower_fp - upper_fp)).clamp(0.0, 1.0);
        (upper, share)
    }

    /// Builds with explicit knobs; the normal build uses
    /// `BuildKnobs::default()`. For tests and the overhead-measuring tool: a
    /// tiny or negative overhead forces failed seeds and the Bloom fallback.
    #[doc(hidden)]
    pub fn build_with(&self, key_hashes: &[u64], knobs: BuildKnobs) -> (Vec<u8>, BuildOutcome) {
        let fallback = |outcome: BuildOutcome| {
            let outcome = BuildOutcome {
                fell_back_to_bloom: true,
                ..outcome
            };
            (
                bloom::build_bloom(key_hashes, self.bloom_bits_per_key),
                outcome,
            )
        };
        if knobs.format == RibbonFormat::Rows64 {
            let (upper, share) = self.columns();
            return match super::ribbon64::build(key_hashes, upper, share, &knobs) {
                (Some(bytes), outcome) => (bytes, outcome),
                (None, outcome) => fallback(outcome),
            };
        }
        let n = key_hashes.len();
        let overhead_of = |keys: usize| knobs.overhead_for(keys, overhead_for_keys);
        let total_slots = ((n as f64 * (1.0 + overhead_of(n))).ceil() as usize).div_ceil(W) * W;
        if n == 0 || total_slots < MIN_SLOTS {
            return fallback(BuildOutcome::default());
        }
        let num_shards = n.div_ceil(knobs.shard_keys.max(1)).min(u32::MAX as usize);
        let (upper, share) = self.columns();

        // Partition the hashes by shard.
        let sharded = ShardedKeys::new(key_hashes, num_shards);

        // Shard sizes first, so the output is allocated once.
        let mut shards = Vec::with_capacity(num_shards);
        let mut word_offset = 0u64;
        for i in 0..num_shards {
            let keys = sharded.keys(i).len();
            let wanted = (keys as f64 * (1.0 + overhead_of(keys))).ceil();
            // Sized in whole rows' widths (128 slots), as the first layout
            // was, then stored as blocks of 64 slots.
            let rows_wide = ((wanted / W as f64).round() as usize).max(1);
            // Upper blocks sit at the end; pick their number so the share of
            // starts in them matches `share`.
            let num_starts = (rows_wide * W - (W - 1)) as f64;
            let upper_wide = ((share * num_starts + (W - 1) as f64) / W as f64).round() as usize;
            let upper_wide = if share <= 0.0 {
                0
            } else {
                upper_wide.clamp(1, rows_wide)
            };
            let per_row = W / BLOCK_SLOTS;
            let num_blocks = rows_wide * per_row;
            if num_blocks > u32::MAX as usize {
                return fallback(BuildOutcome::default());
            }
            let shard = RibbonShard {
                word_offset: word_offset as u32,
                num_blocks: num_blocks as u32,
                upper_start_block: ((rows_wide - upper_wide) * per_row) as u32,
                seed: 0,
            };
            word_offset += shard.words(upper);
            if word_offset > u32::MAX as u64 {
                return fallback(BuildOutcome::default());
            }
            shards.push(shard);
        }
        let solution_bytes = word_offset as usize * WORD_BYTES;
        let table_bytes = num_shards * SHARD_ENTRY_BYTES;
        let mut out = vec![0u8; solution_bytes + table_bytes + TRAILER_BYTES];

        let mut outcome = BuildOutcome {
            shards: num_shards as u32,
            ..BuildOutcome::default()
        };
        // Shards are banded up to LANES at a time (`run_jobs`), started in
        // shard order; a lane tries its shard's seeds in order until one
        // solves, then the shard is solved into `out` and the lane takes the
        // next shard. Each shard's bytes depend only on its own keys and
        // seeds, so the schedule does not change them.
        let max_seeds = knobs.max_seeds.min(MAX_SEEDS);
        let mut bands: [Band; LANES] = Default::default();
        // Seeds failed per shard.
        let mut failures = vec![0u32; num_shards];
        // The lowest shard that failed every seed (`num_shards`: none yet);
        // shards after it are not worth banding.
        let mut exhausted = num_shards;
        let mut jobs: Vec<Job> = Vec::with_capacity(LANES);
        let mut next_shard = 0;
        let solve = |band: &Band, shard: &mut RibbonShard, seed: u32, out: &mut [u8]| {
            shard.seed = seed as u8;
            let at = shard.word_offset as usize * WORD_BYTES;
            let len = shard.words(upper) as usize * WORD_BYTES;
            band.solve(
                upper,
                shard.upper_start_block as usize,
                &mut out[at..at + len],
                knobs.solve_path,
            );
        };
        loop {
            while jobs.len() < LANES && next_shard < exhausted {
                let shard = next_shard;
                next_shard += 1;
                if max_seeds == 0 {
                    exhausted = shard;
                    break;
                }
                let band = (0..LANES)
                    .find(|&b| jobs.iter().all(|job| job.band != b))
                    .expect("a free band");
                let slots = shards[shard].num_blocks as usize * BLOCK_SLOTS;
                bands[band].prepare(sharded.keys(shard), slots, 0);
                if bands[band].keys() == 0 {
                    solve(&bands[band], &mut shards[shard], 0, &mut out);
                    continue;
                }
                jobs.push(Job {
                    shard,
                    band,
                    seed: 0,
                    at: LaneRow::new(&bands[band], 0),
                });
            }
            if jobs.is_empty() {
                break;
            }
            let (stopped, solved) = run_jobs(&mut bands, &mut jobs);
            let job = &mut jobs[stopped];
            if solved {
                solve(&bands[job.band], &mut shards[job.shard], job.seed, &mut out);
                jobs.swap_remove(stopped);
                continue;
            }
            failures[job.shard] += 1;
            job.seed += 1;
            if job.seed < max_seeds {
                let band = &mut bands[job.band];
                let slots = shards[job.shard].num_blocks as usize * BLOCK_SLOTS;
                band.prepare(sharded.keys(job.shard), slots, job.seed as u8);
                job.at = LaneRow::new(band, 0);
            } else {
                exhausted = exhausted.min(job.shard);
                jobs.retain(|job| job.shard < exhausted);
            }
        }
        if exhausted < num_shards {
            // As if the shards had been built one after another: the failures
            // up to the first shard that failed every seed.
            outcome.failed_seeds = failures[..=exhausted].iter().sum();
            return fallback(outcome);
        }
        outcome.failed_seeds = failures.iter().sum();

        for (i, shard) in shards.iter().enumerate() {
            let at = solution_bytes + i * SHARD_ENTRY_BYTES;
            shard.write(&mut out[at..at + SHARD_ENTRY_BYTES]);
        }
        let t = solution_bytes + table_bytes;
        out[t..t + 4].copy_from_slice(&(num_shards as u32).to_le_bytes());
        out[t + 4] = upper as u8;
        let crc = crc32fast::hash(&out[solution_bytes..t + 5]);
        out[t + 5..t + 9].copy_from_slice(&crc.to_le_bytes());
        out[t + 9] = FORMAT_RIBBON;
        (out, outcome)
    }
}

impl Default for RibbonPolicy {
    fn default() -> Self {
        RibbonPolicy::new(10.0)
    }
}

/// Which back substitution a build uses (tests compare their bytes).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SolvePath {
    /// AVX-512 if the CPU has it, else scalar with POPCNT if it has that,
    /// else portable.
    Fastest,
    /// Scalar, with POPCNT if the CPU has it.
    Scalar,
    /// Scalar with the portable parity.
    Portable,
}

impl FilterPolicy for RibbonPolicy {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn build(&self, key_hashes: &[u64]) -> Vec<u8> {
        self.build_with(key_hashes, BuildKnobs::default()).0
    }

    fn may_contain(&self, filter: &[u8], key_hash: u64) -> bool {
        super::may_contain(filter, key_hash)
    }

    /// The Bloom-equivalent bits per key the policy was made for (also
    /// [`bloom_bits_per_key`](RibbonPolicy::bloom_bits_per_key), except
    /// below about 1.45, where the fallback gets the bits of rate 1/2).
    fn budget_bits_per_key(&self) -> Option<f64> {
        Some(self.budget_bits_per_key)
    }

    /// [`RibbonPolicy::new`]`(bits_per_key)`: the rate of a blocked Bloom
    /// filter at that many bits per key (clamped like it).
    fn with_budget_bits_per_key(&self, bits_per_key: f64) -> Option<Arc<dyn FilterPolicy>> {
        Some(Arc::new(RibbonPolicy::new(bits_per_key)))
    }
}

const _: () = assert!(BUILTIN_NAME_PREFIX.len() < RibbonPolicy::NAME.len());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_solve_the_mix() {
        let p = RibbonPolicy::new(10.0);
        let (u, f) = p.columns();
        assert_eq!(u, 7);
        let mix = f * 2f64.powi(-7) + (1.0 - f) * 2f64.powi(-6);
        assert!(
            (mix - p.fp_rate()).abs() < 1e-12,
            "{mix} vs {}",
            p.fp_rate()
        );
        let (u, f) = RibbonPolicy::with_fp_rate(1.0 / 256.0).unwrap().columns();
        assert_eq!((u, f), (8, 1.0));
        let (u, f) = RibbonPolicy::with_fp_rate(1e-15).unwrap().columns();
        assert_eq!((u, f), (MAX_COLUMNS, 1.0));
    }

    #[test]
    fn overhead_table_is_monotone() {
        let mut last = 0.0;
        for shift in 8..30 {
            let o = overhead_for_keys(1 << shift);
            assert!(o >= last && o < 0.2, "{shift}: {o}");
            last = o;
        }
    }
}
