//! The format 0x06 query: dispatch through the path chosen at parse, the
//! scalar column loop (POPCNT or a portable parity), and the functions a
//! decoded [`Filter`](crate::filter::Filter) stores.

#[cfg(target_arch = "x86_64")]
use super::layout::cpu_has_avx2;
use super::layout::{cpu_has_avx512, cpu_has_popcnt, Located64, Path64, Ribbon64Layout};
#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512, popcnt};
use super::{coeff_of, fastrange64, rehash, BLOCK_SLOTS, SMASH, W, WORD_BYTES};

/// Columns the scalar loop checks without a branch before its first early
/// exit: one random absent key fails one of the first four with
/// probability 15/16, and a branch per column would mispredict on half of
/// them.
const EARLY_EXIT_COLUMNS: usize = 4;

/// Parity of the set bits of `v` without a population count instruction:
/// each nibble's parity lands in its low bit, and one multiplication sums
/// those 16 bits into the top nibble.
#[inline(always)]
fn parity_mul(mut v: u64) -> u32 {
    v ^= v >> 1;
    v ^= v >> 2;
    v = (v & 0x1111_1111_1111_1111).wrapping_mul(0x1111_1111_1111_1111);
    ((v >> 60) & 1) as u32
}

/// Parity of the set bits of `v` with `count_ones`: one POPCNT instruction
/// when inlined into a function compiled with that feature.
#[inline(always)]
fn parity_popcnt(v: u64) -> u32 {
    v.count_ones() & 1
}

/// A decoded filter, as the query functions that
/// [`Ribbon64Layout::query_fn_for`] returns read it.
///
/// # Safety
///
/// [`ribbon64`](Self::ribbon64) must return either
/// [`Ribbon64Layout::empty`] or what [`Ribbon64Layout::parse`] returned for
/// exactly the bytes [`ribbon64_bytes`](Self::ribbon64_bytes) returns
/// (possibly moved to another path by [`Ribbon64Layout::on_path`]), and
/// neither may change while `self` is borrowed.
pub(crate) unsafe trait Ribbon64Source {
    /// The filter's layout ([`Ribbon64Layout::empty`] if it is not a format
    /// 0x06 filter).
    fn ribbon64(&self) -> &Ribbon64Layout;
    /// The bytes the layout was parsed from.
    fn ribbon64_bytes(&self) -> &[u8];
}

/// A query function over a decoded filter `F`. Calling one is `unsafe`: it
/// must be the function [`Ribbon64Layout::query_fn_for`] returned for `F`'s
/// layout (it relies on the CPU features and layout that chose it).
pub(crate) type SourceQueryFn64<F> = unsafe fn(&F, u64) -> bool;

impl Ribbon64Layout {
    /// Queries `bytes` (the bytes this layout was parsed from): `false` only
    /// if the key hash was certainly not among the built ones. Any bytes
    /// are safe: reads are bounds-checked, or (the narrow paths)
    /// follow one check that `bytes` holds the whole solution; reads past
    /// the end of shorter bytes answer `true`.
    ///
    /// Uses AVX-512 when the CPU has it (checked once, at parse), else AVX2
    /// (except on CPUs that split 256-bit vectors, AMD Zen and Zen+, which
    /// take the POPCNT query), else POPCNT when it has that, otherwise a
    /// portable parity. On the
    /// bytes the layout was parsed from, every path gives the answer of
    /// [`Ribbon64Table::may_contain_reference`](super::Ribbon64Table::may_contain_reference);
    /// on shorter ones, every path the same answer.
    #[inline]
    pub fn may_contain(&self, bytes: &[u8], key_hash: u64) -> bool {
        // SAFETY: `query` is `path.query_fn()` (set together in `from_table`,
        // `empty` and `on_path`), and `path` needs a CPU feature only if the
        // CPU reported it (`Path64::detect`, `on_path`), which is all
        // `query_fn` asks of its callers.
        unsafe { (self.query)(self, bytes, key_hash) }
    }

    /// The function a decoded filter `F` stores to answer its queries: on
    /// a narrow path (AVX-512 or AVX2) the query itself, reading the solution
    /// without any length check (`F`'s contract says its bytes are the
    /// parsed ones), so that a query is one indirect call; on other paths a
    /// call of [`may_contain`](Self::may_contain) on `F`'s bytes.
    pub(crate) fn query_fn_for<F: Ribbon64Source>(&self) -> SourceQueryFn64<F> {
        // `unchecked_len` too: it is below `usize::MAX` only for a parsed
        // layout that the narrow query covers (never the empty layout).
        #[cfg(target_arch = "x86_64")]
        if self.unchecked_len != usize::MAX {
            let by_shift = self.shard_shift != 0;
            match (self.path, by_shift) {
                (Path64::Avx512Narrow, true) => return query_narrow::<F, true>,
                (Path64::Avx512Narrow, false) => return query_narrow::<F, false>,
                (Path64::Avx2Narrow, true) => return query_narrow_avx2::<F, true>,
                (Path64::Avx2Narrow, false) => return query_narrow_avx2::<F, false>,
                (Path64::PopcntNarrow, true) => return query_narrow_popcnt::<F, true>,
                (Path64::PopcntNarrow, false) => return query_narrow_popcnt::<F, false>,
                _ => {}
            }
        }
        query_via_layout::<F>
    }

    /// The key's shard, row and position; `None` if the layout has no
    /// shard for it (only the empty layout).
    #[inline(always)]
    pub(super) fn locate(&self, key_hash: u64) -> Option<Located64> {
        let index = fastrange64(key_hash, self.num_shards as u64) as usize;
        let shard = self.shards.get(index)?;
        let g = rehash(key_hash, shard.seed_mask);
        let max_start = (shard.num_slots as u64).saturating_sub(W as u64);
        let start = fastrange64(g, shard.num_slots as u64)
            .saturating_sub(SMASH)
            .min(max_start);
        let slot = shard.first() as u64 + start;
        let stride = shard.stride as usize;
        Some(Located64 {
            here: (shard.base as usize)
                .wrapping_add(((slot / BLOCK_SLOTS as u64) as usize).wrapping_mul(stride)),
            stride,
            columns: shard.columns as usize,
            slot,
            coeff: coeff_of(g),
            result: g as u32,
        })
    }

    /// The scalar column loop: one parity per result column, the first
    /// [`EARLY_EXIT_COLUMNS`] without a branch.
    #[inline(always)]
    fn check_columns(bytes: &[u8], key: &Located64, parity64: impl Fn(u64) -> u32) -> bool {
        let len = key.columns * WORD_BYTES;
        let [m0, m1] = key.masks();
        let Some(words) = key.words(bytes) else {
            return true;
        };
        let (a, b) = (&words[..len], &words[key.stride..]);
        let word = |chunk: &[u8]| <[u8; WORD_BYTES]>::try_from(chunk).map(u64::from_le_bytes);
        // `diff` collects mismatching columns.
        let mut diff = 0u32;
        let columns = a.chunks_exact(WORD_BYTES).zip(b.chunks_exact(WORD_BYTES));
        for (c, (wa, wb)) in columns.enumerate() {
            let (Ok(wa), Ok(wb)) = (word(wa), word(wb)) else {
                return true;
            };
            diff |= parity64((wa & m0) ^ (wb & m1)) ^ ((key.result >> c) & 1);
            if c + 1 == EARLY_EXIT_COLUMNS && diff != 0 {
                return false;
            }
        }
        diff == 0
    }

    #[inline(always)]
    fn query_scalar(&self, bytes: &[u8], key_hash: u64, parity64: impl Fn(u64) -> u32) -> bool {
        match self.locate(key_hash) {
            Some(key) => Self::check_columns(bytes, &key, parity64),
            None => true,
        }
    }

    /// The scalar query with the portable parity. Out of line, like every
    /// path's function, so that [`may_contain`](Self::may_contain) is a
    /// tail call through `query`.
    #[inline(never)]
    pub(super) fn may_contain_portable_path(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.query_scalar(bytes, key_hash, parity_mul)
    }

    /// The scalar query with POPCNT. Only called when `path` is `Popcnt`,
    /// or after checking the CPU.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "popcnt")]
    pub(super) fn may_contain_popcnt(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.query_scalar(bytes, key_hash, parity_popcnt)
    }

    /// The AVX2 query: chunks of 4 columns, bounds-checked. Only called
    /// when `path` is `Avx2`, or after checking the CPU.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    pub(super) fn may_contain_avx2(&self, bytes: &[u8], key_hash: u64) -> bool {
        match self.locate(key_hash) {
            Some(key) => avx2::check_columns(bytes, &key),
            None => true,
        }
    }

    /// The general AVX-512 query: any column count, in chunks of 8,
    /// bounds-checked. Only called when `path` is an AVX-512 one, or after
    /// checking the CPU.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    pub(super) fn may_contain_avx512(&self, bytes: &[u8], key_hash: u64) -> bool {
        match self.locate(key_hash) {
            Some(key) => avx512::check_columns(bytes, &key),
            None => true,
        }
    }

    /// The narrow AVX-512 query (at most 8 upper columns): one length check
    /// (`bytes` holds the solution, which `parse` checked holds every read
    /// a key can make), then no bounds checks. Shorter bytes, and layouts
    /// this query does not cover, take the bounds-checked scalar query.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    pub(super) fn may_contain_avx512_narrow(&self, bytes: &[u8], key_hash: u64) -> bool {
        if bytes.len() < self.unchecked_len {
            return self.may_contain_checked(bytes, key_hash);
        }
        // SAFETY: `unchecked_len` is below `usize::MAX` only for a layout
        // `from_table` made from a table `Ribbon64Table::parse` checked (and
        // `on_path` keeps those fields), with at most 8 upper columns and
        // `NARROW_MAX_SLOTS` slots (`empty()` sets `usize::MAX`, which no
        // slice length reaches), and
        // then equals `table_start`: `bytes` holds the whole solution. The
        // CPU has every feature `narrow_unchecked` needs (this function's
        // target features), and the shift form is taken only with
        // `shard_shift != 0`.
        unsafe {
            if self.shard_shift != 0 {
                avx512::narrow_unchecked::<true>(self, bytes.as_ptr(), key_hash)
            } else {
                avx512::narrow_unchecked::<false>(self, bytes.as_ptr(), key_hash)
            }
        }
    }

    /// The narrow AVX2 query (at most 8 upper columns): as the narrow
    /// AVX-512 one, one length check and then no bounds checks.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    pub(super) fn may_contain_avx2_narrow(&self, bytes: &[u8], key_hash: u64) -> bool {
        if bytes.len() < self.unchecked_len {
            return self.may_contain_checked(bytes, key_hash);
        }
        // SAFETY: as in `may_contain_avx512_narrow`: `unchecked_len` is
        // below `usize::MAX` only for a parsed layout the narrow queries
        // cover, and then equals `table_start`, so `bytes` holds the whole
        // solution. The CPU has AVX2 (this function's target feature), and
        // the shift form is taken only with `shard_shift != 0`.
        unsafe {
            if self.shard_shift != 0 {
                avx2::narrow_unchecked::<true>(self, bytes.as_ptr(), key_hash)
            } else {
                avx2::narrow_unchecked::<false>(self, bytes.as_ptr(), key_hash)
            }
        }
    }

    /// The narrow POPCNT query (at most 8 upper columns): as the narrow
    /// AVX-512 one, one length check and then no bounds checks.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "popcnt")]
    pub(super) fn may_contain_popcnt_narrow(&self, bytes: &[u8], key_hash: u64) -> bool {
        if bytes.len() < self.unchecked_len {
            return self.may_contain_checked(bytes, key_hash);
        }
        // SAFETY: as in `may_contain_avx512_narrow`: `unchecked_len` is
        // below `usize::MAX` only for a parsed layout the narrow queries
        // cover, and then equals `table_start`, so `bytes` holds the whole
        // solution. The CPU has POPCNT (this function's target feature), and
        // the shift form is taken only with `shard_shift != 0`.
        unsafe {
            if self.shard_shift != 0 {
                popcnt::narrow_unchecked::<true>(self, bytes.as_ptr(), key_hash)
            } else {
                popcnt::narrow_unchecked::<false>(self, bytes.as_ptr(), key_hash)
            }
        }
    }

    /// A narrow query's answer for bytes shorter than the
    /// solution (or a layout it does not cover): the bounds-checked scalar
    /// query, whose reads past the end answer "may contain".
    #[cold]
    #[inline(never)]
    fn may_contain_checked(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.may_contain_scalar(bytes, key_hash)
    }

    /// The scalar query (POPCNT when the CPU has it, else the portable
    /// parity), whatever path [`may_contain`](Self::may_contain) takes; for
    /// tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_scalar(&self, bytes: &[u8], key_hash: u64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_popcnt() {
            // SAFETY: `may_contain_popcnt` only enables `popcnt`, which
            // `cpu_has_popcnt` just confirmed.
            return unsafe { self.may_contain_popcnt(bytes, key_hash) };
        }
        self.may_contain_portable_path(bytes, key_hash)
    }

    /// [`may_contain`](Self::may_contain) with the portable parity only,
    /// whatever the CPU; for tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_portable(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.may_contain_portable_path(bytes, key_hash)
    }

    /// The narrow AVX-512 query whatever path
    /// [`may_contain`](Self::may_contain) takes; `None` if the CPU lacks one
    /// of its features or the layout has more than 8 upper columns. For
    /// tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_avx512_narrow_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        let on = self.clone().on_path("avx512")?;
        (on.path == Path64::Avx512Narrow).then(|| on.may_contain(bytes, key_hash))
    }

    /// The narrow AVX2 query whatever path
    /// [`may_contain`](Self::may_contain) takes; `None` if the CPU lacks
    /// AVX2 or the layout does not qualify (more than 8 upper columns). For
    /// tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_avx2_narrow_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        let on = self.clone().on_path("avx2")?;
        (on.path == Path64::Avx2Narrow).then(|| on.may_contain(bytes, key_hash))
    }

    /// The general AVX2 query (chunks of 4 columns, bounds-checked)
    /// whatever path [`may_contain`](Self::may_contain) takes; `None` if
    /// the CPU lacks AVX2. For tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_avx2_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_avx2() {
            // SAFETY: `cpu_has_avx2` just confirmed AVX2, the target feature
            // `may_contain_avx2` enables.
            return Some(unsafe { self.may_contain_avx2(bytes, key_hash) });
        }
        let _ = (bytes, key_hash);
        None
    }

    /// The general AVX-512 query (chunks of 8 columns, bounds-checked)
    /// whatever path [`may_contain`](Self::may_contain) takes; `None` if the
    /// CPU lacks one of its features. For tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_avx512_general_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_avx512() {
            // SAFETY: `cpu_has_avx512` just confirmed every target feature
            // `may_contain_avx512` enables.
            return Some(unsafe { self.may_contain_avx512(bytes, key_hash) });
        }
        let _ = (bytes, key_hash);
        None
    }
}

/// The query a decoded filter stores on paths other than the narrow
/// ones (AVX-512 and AVX2): its layout's [`may_contain`](Ribbon64Layout::may_contain)
/// on its bytes.
///
/// # Safety
///
/// None needed (`unsafe` only to have the type of every query function).
unsafe fn query_via_layout<F: Ribbon64Source>(filter: &F, key_hash: u64) -> bool {
    filter
        .ribbon64()
        .may_contain(filter.ribbon64_bytes(), key_hash)
}

/// The narrow AVX2 query of a decoded filter, with no length check:
/// `F`'s contract says its bytes are those the layout was parsed from.
///
/// # Safety
///
/// Must be the function [`Ribbon64Layout::query_fn_for`] returned for the
/// filter's layout (its path is the narrow AVX2 one, so the CPU has AVX2;
/// `BY_SHIFT` only if its `shard_shift` is not 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn query_narrow_avx2<F: Ribbon64Source, const BY_SHIFT: bool>(
    filter: &F,
    key_hash: u64,
) -> bool {
    let layout = filter.ribbon64();
    debug_assert_eq!(layout.path, Path64::Avx2Narrow);
    debug_assert!(filter.ribbon64_bytes().len() >= layout.table_start);
    // SAFETY: as in `query_narrow`: `query_fn_for` returns this function
    // only for a layout on the narrow AVX2 path whose `unchecked_len` is not
    // `usize::MAX` (a parsed layout the narrow queries cover, on that path
    // only when the CPU has AVX2), with `BY_SHIFT` only if its
    // `shard_shift` is not 0, and by `F`'s contract the layout was
    // parsed from exactly `ribbon64_bytes()`, at least `table_start` long.
    unsafe {
        avx2::narrow_unchecked::<BY_SHIFT>(layout, filter.ribbon64_bytes().as_ptr(), key_hash)
    }
}

/// The narrow POPCNT query of a decoded filter, with no length check:
/// `F`'s contract says its bytes are those the layout was parsed from.
///
/// # Safety
///
/// Must be the function [`Ribbon64Layout::query_fn_for`] returned for the
/// filter's layout (its path is the narrow POPCNT one, so the CPU has
/// POPCNT; `BY_SHIFT` only if its `shard_shift` is not 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn query_narrow_popcnt<F: Ribbon64Source, const BY_SHIFT: bool>(
    filter: &F,
    key_hash: u64,
) -> bool {
    let layout = filter.ribbon64();
    debug_assert_eq!(layout.path, Path64::PopcntNarrow);
    debug_assert!(filter.ribbon64_bytes().len() >= layout.table_start);
    // SAFETY: as in `query_narrow_avx2`, for the narrow POPCNT path (taken
    // only when the CPU has POPCNT).
    unsafe {
        popcnt::narrow_unchecked::<BY_SHIFT>(layout, filter.ribbon64_bytes().as_ptr(), key_hash)
    }
}

/// The narrow AVX-512 query of a decoded filter, with no length check:
/// `F`'s contract says its bytes are those the layout was parsed from.
///
/// # Safety
///
/// Must be the function [`Ribbon64Layout::query_fn_for`] returned for the
/// filter's layout (its path is the narrow AVX-512 one, so the CPU has
/// AVX-512 F, VL, VBMI2, VPOPCNTDQ and BMI2; `BY_SHIFT` only if its
/// `shard_shift` is not 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
unsafe fn query_narrow<F: Ribbon64Source, const BY_SHIFT: bool>(filter: &F, key_hash: u64) -> bool {
    let layout = filter.ribbon64();
    debug_assert_eq!(layout.path, Path64::Avx512Narrow);
    debug_assert!(filter.ribbon64_bytes().len() >= layout.table_start);
    // SAFETY: `query_fn_for` returns this function only for a layout on the
    // narrow path whose `unchecked_len` is not `usize::MAX`: one that
    // `from_table` made from a table `Ribbon64Table::parse` checked (`on_path`
    // keeps those fields), with at most 8 upper columns and
    // `NARROW_MAX_SLOTS` slots, and on that path only when the CPU has its
    // features (`detect`, `on_path`); layouts are not modified after that.
    // By `F`'s contract the layout was parsed from exactly
    // `ribbon64_bytes()`, whose length `parse` checked is at least
    // `table_start`. `query_fn_for` sets `BY_SHIFT` only if the layout's
    // `shard_shift` is not 0.
    unsafe {
        avx512::narrow_unchecked::<BY_SHIFT>(layout, filter.ribbon64_bytes().as_ptr(), key_hash)
    }
}
