//! The decoded layout of format 0x06: what a query needs of each shard,
//! computed once from the checked shard table, and the query path this CPU
//! takes.

use super::{seed_mask, Ribbon64Table, BLOCK_SLOTS, SMASH, W, WORD_BYTES};
// The AVX-512 check both Ribbon formats' paths share.
pub(super) use crate::filter::cpu_has_avx512;
use std::sync::{Arc, OnceLock};

/// What a query needs of one shard, decoded once by
/// [`Ribbon64Layout::parse`] so that a query does no byte parsing and no
/// seed arithmetic. 32 bytes on a 32-byte boundary: an entry never
/// straddles two cache lines, so a key's shard costs one line of the table.
///
/// The region's base, stride and lanes are in the entry rather than in a
/// per-region array indexed by `shard >= lower_shards` with 16-byte
/// entries: that array costs the comparison, and the shard's last start
/// then has to be computed, for a table half the size (at about a thousand
/// keys per shard a few percent of the filter either way). Measured with
/// `examples/ribbon64_query` (a prototype of both, interleaved, two runs):
/// the array's narrow query was 52 instructions against (then) 43, and 3-8%
/// slower at 10,000 keys (4.9-5.2 against 4.5-4.7 ns/query) and 1-4%
/// slower at 1,000,000 keys (6.8-7.1 against 6.5-6.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(32))]
pub(super) struct ShardQuery64 {
    /// XORed into the key hash before the rehash (`seed_mask(seed)`).
    pub(super) seed_mask: u64,
    /// Byte offset of the shard's region in the filter bytes.
    pub(super) base: u64,
    /// The shard's first slot within its region, minus [`SMASH`] (modulo
    /// `2^32`): a key's region slot is `bias + clamp(u, 32, num_slots -
    /// 32)` for its `u` in `0..num_slots` (see `smash_clamp`).
    pub(super) bias: u32,
    /// Bytes per block of the shard's region: `columns * 8`.
    pub(super) stride: u32,
    /// Slots of the shard: `64..=65535`.
    pub(super) num_slots: u16,
    /// `num_slots - 32`: the largest `u` the clamp keeps.
    pub(super) high: u16,
    /// `bzhi(0xff, columns)`: the load mask of the narrow queries (AVX-512 and AVX2)
    /// (bit `c` selects column `c`'s word) and the result bits it checks.
    pub(super) lanes: u8,
    /// Result columns of the shard: `1..=32`.
    pub(super) columns: u8,
}

/// The most slots a layout may have for the narrow queries, which
/// computes a key's region slot in 32-bit arithmetic (`smash_clamp`): with
/// at most this many, every region slot is below `2^32`. About four
/// billion keys.
pub(super) const NARROW_MAX_SLOTS: u64 = u32::MAX as u64;

impl ShardQuery64 {
    /// The shard's first slot within its region.
    #[inline(always)]
    pub(super) fn first(&self) -> u32 {
        self.bias.wrapping_add(SMASH as u32)
    }

    /// The region slot of the smashed start of a key whose fastrange is `u`
    /// (`u < num_slots`), modulo `2^32`: `first + min(u.saturating_sub(32),
    /// num_slots - 64)` as the spec defines it, written as `clamp(u, 32,
    /// num_slots - 32) - 32 + first` so that the query needs one
    /// comparison per side and one add of a stored value (`bias`). The
    /// clamp's bounds are in order (`num_slots >= 64`).
    #[inline(always)]
    pub(super) fn smash_clamp(&self, u: u32) -> u32 {
        u.max(SMASH as u32)
            .min(self.high as u32)
            .wrapping_add(self.bias)
    }
}

/// Where a key's row lives in the bytes, and the row itself: the key's 64
/// slots start at bit `shift` of its start block's words and run into the
/// next block's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Located64 {
    /// Byte offset of the start block (its column 0 word).
    pub(super) here: usize,
    /// Bytes per block of the key's region (`columns * 8`): the next
    /// block's words start `stride` bytes after `here`.
    pub(super) stride: usize,
    /// Result columns of the key's shard.
    pub(super) columns: usize,
    /// The key's region slot (`first + start`): `slot % 64` is its bit in
    /// the start block's words, `slot / 64` the start block.
    pub(super) slot: u64,
    /// Coefficients of the row (bit `k` for slot `slot + k`).
    pub(super) coeff: u64,
    /// Expected parities: bit `c` for column `c`.
    pub(super) result: u32,
}

impl Located64 {
    /// The bytes of the key's two blocks, from `here`: the start block and
    /// the next one (`stride + columns * 8` bytes); `None` if `bytes` is too
    /// short. One bounds check covers both blocks.
    #[inline(always)]
    pub(super) fn words<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        bytes
            .get(self.here..)?
            .get(..self.stride + self.columns * WORD_BYTES)
    }

    /// The key's window `coeff` split into one mask per block: the parity
    /// of `window & coeff` over a column is that of `(w0 & m0) ^ (w1 &
    /// m1)` for its words `w0`, `w1` of the two blocks (`m1` is 0 for a
    /// block-aligned start).
    #[inline(always)]
    pub(super) fn masks(&self) -> [u64; 2] {
        let shift = (self.slot % BLOCK_SLOTS as u64) as u32;
        let carried = if shift == 0 {
            0
        } else {
            self.coeff >> (W as u32 - shift)
        };
        [self.coeff << shift, carried]
    }
}

/// `bzhi(0xff, columns)`: lane `c` for each of the first 8 columns.
fn column_lanes(columns: u32) -> u8 {
    ((1u32 << columns.min(8)) - 1) as u8
}

/// [`Ribbon64Layout::shard_shift`] for `num_shards` shards: `64 - k` for
/// `num_shards = 2^k` with `k >= 1`, else 0 (one shard, or a count that is
/// not a power of two: the queries then compute `fastrange64`).
pub(super) fn shard_shift(num_shards: u32) -> u32 {
    if num_shards >= 2 && num_shards.is_power_of_two() {
        64 - num_shards.trailing_zeros()
    } else {
        0
    }
}

/// Which code checks a key's columns, picked once per parsed layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Path64 {
    /// `mod avx512` for layouts of at most 8 upper columns (and at most
    /// [`NARROW_MAX_SLOTS`] slots): one masked load
    /// per block, no loop, no bounds checks after one length check.
    Avx512Narrow,
    /// `mod avx512` for any column count: chunks of up to 8 columns,
    /// bounds-checked.
    Avx512,
    /// `mod avx2` for layouts of at most 8 upper columns (and at most
    /// [`NARROW_MAX_SLOTS`] slots): all 8 column lanes at once, no loop,
    /// no bounds checks after one length check.
    Avx2Narrow,
    /// `mod avx2` for any column count: chunks of 4 columns,
    /// bounds-checked.
    Avx2,
    /// `mod popcnt` for layouts of at most 8 upper columns (and at most
    /// [`NARROW_MAX_SLOTS`] slots): one register per column, no bounds
    /// checks after one length check.
    PopcntNarrow,
    /// The scalar column loop with POPCNT.
    Popcnt,
    /// The scalar column loop with a portable parity.
    Portable,
}

impl Path64 {
    /// The best path this CPU runs for `upper_columns` columns.
    fn detect(upper_columns: u32, num_slots: u64) -> Path64 {
        if cpu_has_avx512() {
            Path64::avx512(upper_columns, num_slots)
        } else if cpu_has_avx2() && !cpu_splits_256_bit_vectors() {
            Path64::avx2(upper_columns, num_slots)
        } else if cpu_has_popcnt() {
            Path64::popcnt(upper_columns, num_slots)
        } else {
            Path64::Portable
        }
    }

    /// The AVX-512 path for `upper_columns` columns and `num_slots` slots:
    /// narrow for at most 8 columns (every shard then has 1 to 8) and at
    /// most [`NARROW_MAX_SLOTS`] slots.
    pub(super) fn avx512(upper_columns: u32, num_slots: u64) -> Path64 {
        if Path64::narrow(upper_columns, num_slots) {
            Path64::Avx512Narrow
        } else {
            Path64::Avx512
        }
    }

    /// The AVX2 path for `upper_columns` columns and `num_slots` slots:
    /// narrow under the same conditions as [`avx512`](Self::avx512).
    pub(super) fn avx2(upper_columns: u32, num_slots: u64) -> Path64 {
        if Path64::narrow(upper_columns, num_slots) {
            Path64::Avx2Narrow
        } else {
            Path64::Avx2
        }
    }

    /// The POPCNT path for `upper_columns` columns and `num_slots` slots:
    /// narrow under the same conditions as [`avx512`](Self::avx512).
    pub(super) fn popcnt(upper_columns: u32, num_slots: u64) -> Path64 {
        if Path64::narrow(upper_columns, num_slots) {
            Path64::PopcntNarrow
        } else {
            Path64::Popcnt
        }
    }

    /// Whether a layout of `upper_columns` columns and `num_slots` slots
    /// may take a narrow path: at most 8 columns (every shard then has 1 to
    /// 8) and at most [`NARROW_MAX_SLOTS`] slots.
    pub(super) fn narrow(upper_columns: u32, num_slots: u64) -> bool {
        upper_columns <= 8 && num_slots <= NARROW_MAX_SLOTS
    }

    /// Whether this is one of the narrow paths, which read without bounds
    /// checks once `bytes` holds the solution.
    #[cfg(test)]
    pub(super) fn is_narrow(self) -> bool {
        matches!(
            self,
            Path64::Avx512Narrow | Path64::Avx2Narrow | Path64::PopcntNarrow
        )
    }

    /// The function [`Ribbon64Layout::may_contain`] calls on this path. It
    /// may only be called if the CPU has the path's features: AVX-512 F,
    /// VL, VBMI2, VPOPCNTDQ and BMI2 for the AVX-512 paths
    /// ([`cpu_has_avx512`]), AVX2 for the AVX2 paths ([`cpu_has_avx2`]),
    /// POPCNT for
    /// `Popcnt`; `Portable` needs nothing.
    pub(super) fn query_fn(self) -> QueryFn64 {
        #[cfg(target_arch = "x86_64")]
        match self {
            Path64::Avx512Narrow => Ribbon64Layout::may_contain_avx512_narrow,
            Path64::Avx512 => Ribbon64Layout::may_contain_avx512,
            Path64::Avx2Narrow => Ribbon64Layout::may_contain_avx2_narrow,
            Path64::Avx2 => Ribbon64Layout::may_contain_avx2,
            Path64::PopcntNarrow => Ribbon64Layout::may_contain_popcnt_narrow,
            Path64::Popcnt => Ribbon64Layout::may_contain_popcnt,
            Path64::Portable => Ribbon64Layout::may_contain_portable_path,
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            // `detect` and `on_path` give `Portable` on other targets.
            let _ = self;
            Ribbon64Layout::may_contain_portable_path
        }
    }
}

/// A query path's function, called by [`Ribbon64Layout::may_contain`].
/// Calling it is `unsafe`: the vector and POPCNT paths need CPU features,
/// which [`Path64::query_fn`] documents and [`Ribbon64Layout`] guarantees
/// by storing only `path.query_fn()` for a `path` the CPU runs.
pub(super) type QueryFn64 = unsafe fn(&Ribbon64Layout, &[u8], u64) -> bool;

/// A format 0x06 Ribbon filter decoded for queries: the checked shard
/// table turned into one 32-byte entry per shard, the counts the
/// statistics need, and the query path this CPU takes.
///
/// Built once per filter by [`parse`](Self::parse); cloning is cheap (the
/// shard entries are shared).
#[derive(Debug, Clone)]
pub struct Ribbon64Layout {
    pub(super) num_shards: u32,
    /// `64 - log2(num_shards)` when the shard count is a power of two of
    /// at least 2, else 0. Then `fastrange64(h, num_shards)`, the key's
    /// shard, is `h >> shard_shift`: the narrow queries take that form
    /// (one shift instead of a 64 x 64 -> 128-bit multiply on the way to
    /// the shard entry), the same shard either way.
    pub(super) shard_shift: u32,
    pub(super) lower_shards: u32,
    pub(super) upper_columns: u32,
    /// Byte offset of the shard table: every solution word a key reads
    /// lies below it.
    pub(super) table_start: usize,
    /// Slots over all shards.
    pub(super) num_slots: u64,
    /// Bytes at least this long take a narrow query (AVX-512 or AVX2)
    /// without bounds checks: `table_start` for a parsed layout of at most
    /// 8 upper columns and [`NARROW_MAX_SLOTS`] slots (the narrow queries
    /// cover it), else `usize::MAX` (never).
    pub(super) unchecked_len: usize,
    /// `2^-columns` averaged over the shards.
    pub(super) fp_rate: f64,
    /// One entry per shard, in shard order; shared so that cloning a
    /// decoded filter is cheap.
    pub(super) shards: Arc<[ShardQuery64]>,
    /// The query path this CPU takes (checked once, at parse).
    pub(super) path: Path64,
    /// `path.query_fn()`: what [`may_contain`](Self::may_contain) calls, so
    /// that the dispatch is one load and one indirect jump.
    pub(super) query: QueryFn64,
    /// The narrow queries' constants, always [`NARROW_CONSTANTS`].
    pub(super) constants: NarrowConstants,
}

/// Constants of the narrow queries (AVX-512 and AVX2), kept in every layout so that the
/// query reads them as memory operands: as immediates, each 64-bit
/// multiplier costs a `movabs` before its multiply, and the parity bit a
/// shift before a `vptestmq` of the popcounts against themselves (the
/// compiler's rewrite of a test against a constant 1); from memory, `imul`,
/// `mulx` and `vptestmq` (with a `{1to8}` broadcast) take them directly,
/// three instructions fewer per query. The layout's line is in cache when
/// the query runs (it just read the shard count and table pointer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NarrowConstants {
    /// [`REHASH_MULT`](super::REHASH_MULT).
    pub(super) rehash_mult: u64,
    /// [`COEFF_MULT`](super::COEFF_MULT).
    pub(super) coeff_mult: u64,
    /// 1: the bit of a popcount that is its parity.
    pub(super) parity_bit: u64,
}

/// The values of [`NarrowConstants`].
pub(super) const NARROW_CONSTANTS: NarrowConstants = NarrowConstants {
    rehash_mult: super::REHASH_MULT,
    coeff_mult: super::COEFF_MULT,
    parity_bit: 1,
};

/// A key as the narrow queries (AVX-512, AVX2, POPCNT) read it: what
/// [`Ribbon64Layout::narrow_key`] computes before the first load.
///
/// Invariant (for a layout the narrow queries cover, see `narrow_key`'s
/// `# Safety`): the `columns` words at `here` and at `here + stride` of the
/// solution are the key's start block's and the next block's, both inside
/// the solution (`table_start` bytes). Whatever the key's fastrange `u`,
/// `smash_clamp` gives `slot = first + start` with `start` in `0 ..=
/// num_slots - 64`, exact in 32 bits (the region has fewer than `2^32`
/// slots: a narrow-path condition), so the window `slot .. slot + 64` lies
/// in the shard, whose slots lie in the region (`parse` made `first` the
/// sum of the region's earlier shards and the region's slot count
/// `slots_j` their sum). So `slot + 64 <= slots_j`, and the next block
/// `slot / 64 + 1 <= slots_j / 64 = blocks_j - 1` exists: the spec's extra
/// block per region. Block `b` of the region is `stride` bytes at
/// `base + b * stride` (one word per column), inside the region's
/// `blocks_j * stride` bytes, which `parse` checked end at or before
/// `table_start`.
#[derive(Debug, Clone, Copy)]
pub(super) struct NarrowKey<'a> {
    /// The key's shard's query entry.
    pub(super) shard: &'a ShardQuery64,
    /// The key's rehash: its low bits are the key's result bits.
    pub(super) g: u64,
    /// The key's region slot: `slot % 64` is its bit in the start block.
    pub(super) slot: u64,
    /// Byte offset of the start block (its column 0 word).
    pub(super) here: usize,
    /// Bytes per block of the shard's region (`columns * 8`).
    pub(super) stride: usize,
    /// The layout's multiplier for the coefficients
    /// ([`COEFF_MULT`](super::COEFF_MULT), read from the layout: see
    /// `NarrowConstants`).
    coeff_mult: u64,
}

impl NarrowKey<'_> {
    /// The key's 64 coefficient bits (bit 0 set). A method, not a field,
    /// so each query computes them where its code needs them: computed
    /// before the AVX-512 query's loads they kept one more register live
    /// across them (a push and a pop more).
    #[inline(always)]
    pub(super) fn coeff(&self) -> u64 {
        let p = (self.g as u128).wrapping_mul(self.coeff_mult as u128);
        let coeff = (p as u64 ^ (p >> 64) as u64) | 1;
        debug_assert_eq!(coeff, super::coeff_of(self.g));
        coeff
    }
}

impl Ribbon64Layout {
    /// The key of `key_hash` as the narrow queries read it (see
    /// [`NarrowKey`] for what its offsets guarantee). `BY_SHIFT`: the
    /// key's shard is `key_hash >> shard_shift` (the same shard as
    /// `fastrange64`, for layouts whose shard count is a power of two),
    /// else `fastrange64`.
    ///
    /// # Safety
    ///
    /// `self` comes from `Ribbon64Layout::parse` (through `from_table`,
    /// possibly moved to another path by `on_path`) with at most 8 upper
    /// columns and at most `NARROW_MAX_SLOTS` slots (`Path64::narrow`), and
    /// if `BY_SHIFT`, `shard_shift != 0`.
    #[inline(always)]
    pub(super) unsafe fn narrow_key<const BY_SHIFT: bool>(&self, key_hash: u64) -> NarrowKey<'_> {
        debug_assert!(self.upper_columns <= 8);
        debug_assert!(!BY_SHIFT || self.shard_shift != 0);
        let index = if BY_SHIFT {
            (key_hash >> self.shard_shift) as usize
        } else {
            super::fastrange64(key_hash, self.num_shards as u64) as usize
        };
        debug_assert!(index < self.shards.len());
        // SAFETY: `fastrange64(h, n) < n` for `n >= 1`; with `BY_SHIFT`,
        // `shard_shift = 64 - k` for `num_shards = 2^k`, `k >= 1` (the
        // caller's contract, `shard_shift`), and `h >> (64 - k) < 2^k`.
        // `from_table` made one entry per shard of a parsed table
        // (`shards.len() == num_shards >= 1`).
        let shard = unsafe { self.shards.get_unchecked(index) };
        // `self.constants` rather than the constants themselves: see
        // `NarrowConstants`.
        let k = self.constants;
        debug_assert_eq!(k, NARROW_CONSTANTS);
        let g = (key_hash ^ shard.seed_mask).wrapping_mul(k.rehash_mult);
        // The key's region slot, exact: below `2^32` (`NARROW_MAX_SLOTS`, a
        // condition of the narrow paths).
        let slot = shard.smash_clamp(super::fastrange64(g, shard.num_slots as u64) as u32) as u64;
        let stride = shard.stride as usize;
        let here = shard.base as usize + (slot / BLOCK_SLOTS as u64) as usize * stride;
        NarrowKey {
            shard,
            g,
            slot,
            here,
            stride,
            coeff_mult: k.coeff_mult,
        }
    }
}

/// Layouts are equal when they were parsed from the same table and take the
/// same path (`query` follows from `path`; function addresses are not
/// compared).
impl PartialEq for Ribbon64Layout {
    fn eq(&self, other: &Self) -> bool {
        self.num_shards == other.num_shards
            && self.shard_shift == other.shard_shift
            && self.lower_shards == other.lower_shards
            && self.upper_columns == other.upper_columns
            && self.table_start == other.table_start
            && self.num_slots == other.num_slots
            && self.unchecked_len == other.unchecked_len
            && self.fp_rate.to_bits() == other.fp_rate.to_bits()
            && self.shards == other.shards
            && self.path == other.path
    }
}

impl Eq for Ribbon64Layout {}

impl Ribbon64Layout {
    /// Reads and validates format 0x06 bytes ([`Ribbon64Table::parse`]: id,
    /// checksum, column count, shard sizes, region sizes adding up to the
    /// bytes before the shard table) and decodes the shard table for
    /// queries. `None` if the bytes are not a consistent format 0x06 filter.
    /// Never panics; one pass over the shard table.
    pub fn parse(bytes: &[u8]) -> Option<Ribbon64Layout> {
        Self::from_table(&Ribbon64Table::parse(bytes)?)
    }

    /// The layout of `table`, which [`Ribbon64Table::parse`] returned for
    /// the bytes the layout will query. Not public: the narrow query trusts
    /// the table's offsets and sizes, and a table with public fields could
    /// be made by hand.
    fn from_table(table: &Ribbon64Table) -> Option<Ribbon64Layout> {
        let num_shards = u32::try_from(table.shards.len()).ok()?;
        let mut num_slots = 0u64;
        let mut fp_sum = 0f64;
        let shards: Arc<[ShardQuery64]> = (0..table.shards.len())
            .map(|i| {
                let shard = table.shards[i];
                let columns = table.columns(i);
                num_slots += shard.num_slots as u64;
                fp_sum += 2f64.powi(-(columns as i32));
                ShardQuery64 {
                    seed_mask: seed_mask(shard.seed),
                    base: table.region_start(i) as u64,
                    bias: table.offsets[i].wrapping_sub(SMASH as u32),
                    // `parse` checked `num_slots >= 64`, so this is at
                    // least 32 (saturating only against panics).
                    high: shard.num_slots.saturating_sub(SMASH as u16),
                    stride: columns * WORD_BYTES as u32,
                    num_slots: shard.num_slots,
                    lanes: column_lanes(columns),
                    columns: columns as u8,
                }
            })
            .collect();
        let path = Path64::detect(table.upper_columns, num_slots);
        Some(Ribbon64Layout {
            num_shards,
            shard_shift: shard_shift(num_shards),
            lower_shards: table.lower_shards,
            upper_columns: table.upper_columns,
            table_start: table.table_start,
            num_slots,
            unchecked_len: if Path64::narrow(table.upper_columns, num_slots) {
                table.table_start
            } else {
                usize::MAX
            },
            fp_rate: if num_shards == 0 {
                1.0
            } else {
                fp_sum / num_shards as f64
            },
            shards,
            path,
            query: path.query_fn(),
            constants: NARROW_CONSTANTS,
        })
    }

    /// The layout of a filter with no shards, which answers "may contain"
    /// for every key: what a decoded filter of another kind holds in place
    /// of a format 0x06 layout. Never on the narrow AVX-512 path.
    pub(crate) fn empty() -> Ribbon64Layout {
        // One shared empty table: decoding a filter of another kind
        // allocates nothing for it.
        static NO_SHARDS: OnceLock<Arc<[ShardQuery64]>> = OnceLock::new();
        let path = Path64::Portable;
        Ribbon64Layout {
            num_shards: 0,
            shard_shift: 0,
            lower_shards: 0,
            upper_columns: 1,
            table_start: 0,
            num_slots: 0,
            unchecked_len: usize::MAX,
            fp_rate: 1.0,
            shards: Arc::clone(NO_SHARDS.get_or_init(|| Arc::from(Vec::new()))),
            path,
            query: path.query_fn(),
            constants: NARROW_CONSTANTS,
        }
    }

    /// Number of shards.
    pub fn num_shards(&self) -> u32 {
        self.num_shards
    }

    /// Shards `0..lower_shards` store `upper_columns - 1` result columns.
    pub fn lower_shards(&self) -> u32 {
        self.lower_shards
    }

    /// Result columns of the upper shards: `1..=32`.
    pub fn upper_columns(&self) -> u32 {
        self.upper_columns
    }

    /// Slots over all shards (a solved filter has a few percent more slots
    /// than keys).
    pub fn num_slots(&self) -> u64 {
        self.num_slots
    }

    /// Bytes of the two regions (the solution): the shard table starts
    /// there.
    pub fn solution_bytes(&self) -> usize {
        self.table_start
    }

    /// The false-positive rate the layout implies for a random absent key:
    /// shards are equally likely, and a shard of `c` columns passes a
    /// random key with probability `2^-c`.
    pub fn expected_fp_rate(&self) -> f64 {
        self.fp_rate
    }

    /// Whether [`may_contain`](Self::may_contain) takes an AVX-512 path on
    /// this CPU; for tests.
    #[doc(hidden)]
    pub fn uses_avx512(&self) -> bool {
        matches!(self.path, Path64::Avx512 | Path64::Avx512Narrow)
    }

    /// Whether [`may_contain`](Self::may_contain) takes the narrow AVX-512
    /// path on this CPU; for tests.
    #[doc(hidden)]
    pub fn uses_avx512_narrow(&self) -> bool {
        self.path == Path64::Avx512Narrow
    }

    /// Whether the narrow queries find a key's shard by a shift (the shard
    /// count is a power of two of at least 2) rather than by
    /// `fastrange64`; for tests.
    #[doc(hidden)]
    pub fn shards_by_shift(&self) -> bool {
        self.shard_shift != 0
    }

    /// Whether [`may_contain`](Self::may_contain) takes the narrow POPCNT
    /// path on this CPU; for tests.
    #[doc(hidden)]
    pub fn uses_popcnt_narrow(&self) -> bool {
        self.path == Path64::PopcntNarrow
    }

    /// Whether [`may_contain`](Self::may_contain) takes the narrow AVX2
    /// path on this CPU; for tests.
    #[doc(hidden)]
    pub fn uses_avx2_narrow(&self) -> bool {
        self.path == Path64::Avx2Narrow
    }

    /// Every name [`on_path`](Self::on_path) knows, fastest first; for
    /// benchmarks and tests.
    #[doc(hidden)]
    pub const PATHS: [&'static str; 7] = [
        "avx512",
        "avx512-general",
        "avx2",
        "avx2-general",
        "popcnt-narrow",
        "popcnt",
        "portable",
    ];

    /// This layout with [`may_contain`](Self::may_contain) forced onto the
    /// named path (one of [`PATHS`](Self::PATHS)): `"avx512"` (narrow where the columns allow),
    /// `"avx512-general"` (chunks of 8 columns, any count), `"avx2"`
    /// (narrow where the columns allow), `"avx2-general"` (chunks of 4
    /// columns), `"popcnt-narrow"` (narrow where the columns allow),
    /// `"popcnt"` (the bounds-checked column loop) or `"portable"`; `None` for another name or a path this CPU cannot run.
    /// For benchmarks and tests.
    #[doc(hidden)]
    pub fn on_path(self, name: &str) -> Option<Ribbon64Layout> {
        let path = match name {
            "avx512" if cpu_has_avx512() => Path64::avx512(self.upper_columns, self.num_slots),
            "avx512-general" if cpu_has_avx512() => Path64::Avx512,
            "avx2" if cpu_has_avx2() => Path64::avx2(self.upper_columns, self.num_slots),
            "avx2-general" if cpu_has_avx2() => Path64::Avx2,
            "popcnt" if cpu_has_popcnt() => Path64::Popcnt,
            "popcnt-narrow" if cpu_has_popcnt() => {
                Path64::popcnt(self.upper_columns, self.num_slots)
            }
            "portable" => Path64::Portable,
            _ => return None,
        };
        Some(Ribbon64Layout {
            path,
            query: path.query_fn(),
            ..self
        })
    }
}

/// Whether this CPU has AVX2 (the 4-column vector query).
pub(super) fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU runs 256-bit vector operations as two 128-bit halves:
/// AMD family 17h below model 30h (Zen and Zen+; Zen 2 has full-width
/// units). There the narrow POPCNT query, one 64-bit register per column
/// with an early exit, is faster than the narrow AVX2 one, all columns in
/// two 256-bit halves (docs/filters.md, "The narrow POPCNT query"), and
/// [`Path64::detect`] takes it instead. Read once per process.
pub(super) fn cpu_splits_256_bit_vectors() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static SPLITS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *SPLITS.get_or_init(|| {
            use std::arch::x86_64::__cpuid;
            // Leaves 0 (vendor) and 1 (signature) exist on every x86-64 CPU.
            let (vendor, signature) = (__cpuid(0), __cpuid(1));
            let amd = [vendor.ebx, vendor.edx, vendor.ecx] == AUTHENTIC_AMD;
            amd && splits_256_bit_vectors(signature.eax)
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// "AuthenticAMD" as CPUID leaf 0 returns it in EBX, EDX, ECX.
#[cfg(target_arch = "x86_64")]
const AUTHENTIC_AMD: [u32; 3] = [
    u32::from_le_bytes(*b"Auth"),
    u32::from_le_bytes(*b"enti"),
    u32::from_le_bytes(*b"cAMD"),
];

/// Whether an AMD CPU of processor signature `eax` (CPUID leaf 1) is a Zen
/// or Zen+ core: family 17h (base family Fh plus extended family 8h),
/// model below 30h (extended model in bits 16..20, base model in 4..8).
/// (x86-64 only, and for its test everywhere: other targets never ask.)
#[cfg(any(target_arch = "x86_64", test))]
pub(super) fn splits_256_bit_vectors(eax: u32) -> bool {
    let base_family = (eax >> 8) & 0xf;
    let family = if base_family == 0xf {
        base_family + ((eax >> 20) & 0xff)
    } else {
        base_family
    };
    let model = ((eax >> 16) & 0xf) << 4 | ((eax >> 4) & 0xf);
    family == 0x17 && model < 0x30
}

/// Whether this CPU has the POPCNT instruction (x86_64 only; other targets
/// take the portable parity, `count_ones` being no faster there without a
/// native instruction in the baseline).
pub(super) fn cpu_has_popcnt() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `smash_clamp` is the spec's `first + min(u.saturating_sub(32), S -
    /// 64)` for every `u` below `S`, including first slots below 32 (the
    /// bias wraps) and near the top of the 32-bit range.
    #[test]
    fn smash_clamp_is_the_spec_start() {
        for num_slots in [64u16, 65, 95, 96, 97, 127, 128, 129, 1_000, 65_535] {
            for first in [0u32, 1, 31, 32, 33, 1_000, u32::MAX - 65_535] {
                let shard = ShardQuery64 {
                    seed_mask: 0,
                    base: 0,
                    bias: first.wrapping_sub(SMASH as u32),
                    stride: 8,
                    num_slots,
                    high: num_slots - SMASH as u16,
                    lanes: 1,
                    columns: 1,
                };
                assert_eq!(shard.first(), first);
                for u in 0..num_slots as u64 {
                    let start = u.saturating_sub(SMASH).min(num_slots as u64 - W as u64);
                    assert_eq!(
                        shard.smash_clamp(u as u32) as u64,
                        first as u64 + start,
                        "{num_slots} {first} {u}"
                    );
                }
            }
        }
    }

    /// Zen and Zen+ (family 17h, models 00h-2Fh) split 256-bit vectors;
    /// Zen 2 (17h from model 30h), Zen 3 (19h) and Intel cores do not.
    /// Signatures as CPUID leaf 1 reports them (stepping in bits 0..4).
    #[test]
    fn zen_and_zen_plus_split_256_bit_vectors() {
        for (eax, splits) in [
            (0x0080_0f12, true),  // EPYC 7551 (Naples), family 17h model 01h
            (0x0080_0f82, true),  // Ryzen 7 2700X (Zen+), model 08h
            (0x0081_0f10, true),  // Ryzen 5 2500U (Raven Ridge), model 11h
            (0x0082_0f01, true),  // Athlon (Dali), model 20h
            (0x0083_0f10, false), // EPYC 7002 (Rome, Zen 2), model 31h
            (0x0087_0f10, false), // Ryzen 3000 (Matisse, Zen 2), model 71h
            (0x00a0_0f11, false), // EPYC 7003 (Milan, Zen 3), family 19h
            (0x000a_06a0, false), // Intel family 6
            (0x0000_0f43, false), // family Fh, no extended family
        ] {
            assert_eq!(splits_256_bit_vectors(eax), splits, "{eax:#x}");
        }
    }

    /// The narrow path needs at most 8 columns and at most
    /// `NARROW_MAX_SLOTS` slots.
    #[test]
    fn narrow_path_conditions() {
        assert_eq!(Path64::avx512(1, 64), Path64::Avx512Narrow);
        assert_eq!(Path64::avx512(8, NARROW_MAX_SLOTS), Path64::Avx512Narrow);
        assert_eq!(Path64::avx512(9, 64), Path64::Avx512);
        assert_eq!(Path64::avx512(8, NARROW_MAX_SLOTS + 1), Path64::Avx512);
        assert_eq!(Path64::avx2(1, 64), Path64::Avx2Narrow);
        assert_eq!(Path64::avx2(8, NARROW_MAX_SLOTS), Path64::Avx2Narrow);
        assert_eq!(Path64::avx2(9, 64), Path64::Avx2);
        assert_eq!(Path64::avx2(8, NARROW_MAX_SLOTS + 1), Path64::Avx2);
        assert_eq!(Path64::popcnt(1, 64), Path64::PopcntNarrow);
        assert_eq!(Path64::popcnt(8, NARROW_MAX_SLOTS), Path64::PopcntNarrow);
        assert_eq!(Path64::popcnt(9, 64), Path64::Popcnt);
        assert_eq!(Path64::popcnt(8, NARROW_MAX_SLOTS + 1), Path64::Popcnt);
        assert_eq!(std::mem::size_of::<ShardQuery64>(), 32);
        assert_eq!(std::mem::align_of::<ShardQuery64>(), 32);
    }

    /// A table of 65,537 shards of 65,535 slots (exactly `u32::MAX`
    /// slots) and `last` more slots in one more shard, whose region offset
    /// is then `u32::MAX`. Made by hand: its bytes (over 512 MiB per
    /// column) are too large to craft.
    fn table_at_the_slot_limit(last: Option<u16>) -> super::super::Ribbon64Table {
        use super::super::{region_blocks, Ribbon64Table, Shard64};
        let mut shards = vec![
            Shard64 {
                num_slots: u16::MAX,
                seed: 7,
            };
            65_537
        ];
        shards.extend(last.map(|num_slots| Shard64 { num_slots, seed: 9 }));
        let mut offsets = Vec::new();
        let mut total = 0u64;
        for s in &shards {
            offsets.push(u32::try_from(total).unwrap());
            total += s.num_slots as u64;
        }
        Ribbon64Table {
            shards,
            lower_shards: 0,
            upper_columns: 8,
            offsets,
            region1_start: 0,
            table_start: (region_blocks(total) * 8 * WORD_BYTES as u64) as usize,
        }
    }

    /// The narrow path (32-bit region slots, unchecked reads) is taken up
    /// to `NARROW_MAX_SLOTS` slots and never past it, whatever the path a
    /// caller asks for; past it a key's region slot is exact in 64 bits,
    /// and bytes too short for the solution answer "may contain" on every
    /// path without a read.
    #[test]
    fn layouts_past_the_narrow_slot_limit_are_bounds_checked() {
        let at_limit = Ribbon64Layout::from_table(&table_at_the_slot_limit(None)).unwrap();
        assert_eq!(at_limit.num_slots, NARROW_MAX_SLOTS);
        assert_eq!(at_limit.unchecked_len, at_limit.table_start);
        let table = table_at_the_slot_limit(Some(1_000));
        let past = Ribbon64Layout::from_table(&table).unwrap();
        assert_eq!(past.num_slots, NARROW_MAX_SLOTS + 1_000);
        assert_eq!(past.unchecked_len, usize::MAX);
        assert!(!past.path.is_narrow());
        for name in Ribbon64Layout::PATHS {
            let Some(on) = past.clone().on_path(name) else {
                continue;
            };
            assert!(!on.path.is_narrow(), "{name}");
            assert_eq!(on.unchecked_len, usize::MAX, "{name}");
            for h in [0, 1 << 63, u64::MAX - 1, u64::MAX] {
                assert!(on.may_contain(&[0u8; 4096], h), "{name}");
            }
        }
        // `u64::MAX` and its neighbours land in the last shard, at region
        // slots from `u32::MAX` on.
        for h in (0..64).map(|i| u64::MAX - i * 0x1_0000_0001) {
            let key = past.locate(h).unwrap();
            let r = super::super::row(h, seed_mask(9), 1_000);
            assert_eq!(key.slot, u32::MAX as u64 + r.start as u64);
            assert_eq!(key.columns, 8);
        }
    }
}
