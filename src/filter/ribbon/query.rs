use super::layout::{
    cpu_has_avx2, cpu_has_avx512, Format, QueryPath, RibbonLayout, RibbonSource, SourceQueryFn,
};
#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512};
use super::{
    fastrange64, fold, has_popcnt, parity_mul, parity_popcnt, row_from_seeded, seeded_with_mask,
    BLOCK_SLOTS, EARLY_EXIT_COLUMNS, V3_BLOCK_SLOTS, V3_WORD_BYTES, W, WORD_BYTES,
};

/// Where a key's row lives in the solution (format 0x05), and the row
/// itself. The key's 128 slots start at bit `shift` of its start block's
/// words and run through the next block into the one after.
pub(super) struct Located {
    /// Byte offset of the key's first column word in its start block.
    pub(super) here: usize,
    /// Bytes from `here` to the first column word of the next block (the
    /// start block's `columns * 8`).
    pub(super) next: usize,
    /// Bytes from `here` to the first column word of the block after that
    /// (`next` plus the next block's size); `next` when `shift` is 0,
    /// whose window ends with the next block (which then may be the
    /// shard's last one).
    pub(super) last: usize,
    /// Result columns of the start block (the later blocks have at least
    /// as many).
    pub(super) columns: usize,
    /// Start slot within its block: `0..64`.
    pub(super) shift: u32,
    pub(super) coeff: u128,
    pub(super) result: u32,
}

impl Located {
    /// The bytes the key's columns live in, from `here`: `columns` words at
    /// offsets 0, `next` and `last`; `None` if `bytes` is too short. One
    /// bounds check covers the three blocks (`next <= last`).
    #[inline(always)]
    pub(super) fn words<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        bytes
            .get(self.here..)?
            .get(..self.last + self.columns * WORD_BYTES)
    }

    /// The key's window `coeff << shift` as three 64-bit masks of the
    /// start block's, the next block's and the last block's words (the
    /// last is 0 when `shift` is 0).
    #[inline(always)]
    pub(super) fn masks(&self) -> [u64; 3] {
        let shifted = self.coeff << self.shift;
        let carried = if self.shift == 0 {
            0
        } else {
            (self.coeff >> (W as u32 - self.shift)) as u64
        };
        [shifted as u64, (shifted >> 64) as u64, carried]
    }
}

impl RibbonLayout {
    /// Queries `bytes` (the bytes this layout was parsed from). Any bytes
    /// are safe: reads are bounds-checked, or (the narrow AVX-512 path)
    /// follow one check that `bytes` holds the whole solution; reads past
    /// the end of shorter bytes answer `true`.
    ///
    /// Uses AVX-512 over the result columns when the CPU has it (checked
    /// once, at parse), else AVX2, else POPCNT when the CPU has that
    /// (detected at run time), otherwise a portable parity; all give the
    /// same answer. Format 0x03 bytes take a bounds-checked scalar query.
    #[inline]
    pub fn may_contain(&self, bytes: &[u8], key_hash: u64) -> bool {
        // SAFETY: `query` is `path.query_fn()` (set together in `parse` and
        // `on_path`), and `path` is a vector path only if the CPU reported
        // every feature that path's function enables (`QueryPath::detect`,
        // `on_path`), which is all `query_fn` asks of its callers.
        unsafe { (self.query)(self, bytes, key_hash) }
    }

    /// The function a decoded filter `F` stores to answer its queries: on
    /// the narrow AVX-512 path, the query itself (reading the solution
    /// without bounds checks, which `F`'s contract allows), so that a query
    /// is one indirect call; on other paths, a call of
    /// [`may_contain`](Self::may_contain) on `F`'s bytes. `readable_len` is
    /// `F`'s [`RibbonSource::readable_len`].
    pub(crate) fn query_fn_for<F: RibbonSource>(&self, readable_len: usize) -> SourceQueryFn<F> {
        #[cfg(target_arch = "x86_64")]
        if self.path == QueryPath::Avx512Narrow {
            let tail = self.upper_columns as usize * WORD_BYTES;
            return if readable_len.saturating_sub(self.table_start) >= tail {
                query_narrow::<F, true>
            } else {
                query_narrow::<F, false>
            };
        }
        let _ = readable_len;
        query_via_layout::<F>
    }

    /// The AVX2 query. Out of line, like every path's function, so that
    /// [`may_contain`](Self::may_contain) is a tail call through
    /// [`query`](Self::query) and inlines into callers without making them
    /// save registers.
    ///
    /// Only called when `path` is `Avx2`, or after checking the CPU.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx2,bmi2")]
    pub(super) fn may_contain_avx2(&self, bytes: &[u8], key_hash: u64) -> bool {
        match self.locate_v5(bytes, key_hash) {
            Ok(key) => avx2::check_columns(bytes, &key),
            Err(answer) => answer,
        }
    }

    /// The scalar query (POPCNT when the CPU has it), kept out of line so
    /// that [`may_contain`](Self::may_contain), a dispatch to out-of-line
    /// vector functions, stays small enough to inline into its callers.
    #[inline(never)]
    pub(super) fn may_contain_scalar_path(&self, bytes: &[u8], key_hash: u64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if has_popcnt() {
            // SAFETY: `may_contain_popcnt` only enables the `popcnt`
            // target feature, and `has_popcnt` just confirmed this CPU
            // supports it.
            return unsafe { self.may_contain_popcnt(bytes, key_hash) };
        }
        self.query(bytes, key_hash, parity_mul)
    }

    /// [`may_contain`](Self::may_contain) with the portable parity only,
    /// whatever the CPU; for tests that compare both paths.
    #[doc(hidden)]
    pub fn may_contain_portable(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.query(bytes, key_hash, parity_mul)
    }

    /// This layout with [`may_contain`](Self::may_contain) forced onto the
    /// named path: `"avx512"`, `"avx2"` or `"scalar"` (POPCNT when the CPU
    /// has it); `None` for another name or a path this CPU cannot run. For
    /// benchmarks and tests. A format 0x03 layout has one path, which every
    /// name keeps.
    #[doc(hidden)]
    pub fn on_path(self, name: &str) -> Option<RibbonLayout> {
        let path = match name {
            "avx512" if cpu_has_avx512() => QueryPath::avx512(self.upper_columns, self.table_start),
            "avx2" if cpu_has_avx2() => QueryPath::Avx2,
            "scalar" => QueryPath::Scalar,
            _ => return None,
        };
        let path = if self.format == Format::V3 {
            QueryPath::Legacy
        } else {
            path
        };
        Some(RibbonLayout {
            path,
            query: path.query_fn(),
            ..self
        })
    }

    /// The scalar query (POPCNT when the CPU has it, else the portable
    /// parity), whatever path [`may_contain`](Self::may_contain) takes; for
    /// tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_scalar(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.may_contain_scalar_path(bytes, key_hash)
    }

    /// Whether [`may_contain`](Self::may_contain) takes the AVX2 path on
    /// this CPU (it has AVX2 and BMI2 but not the AVX-512 features of
    /// [`uses_avx512`](Self::uses_avx512)); for tests.
    #[doc(hidden)]
    pub fn uses_avx2(&self) -> bool {
        self.path == QueryPath::Avx2
    }

    /// Whether [`may_contain`](Self::may_contain) takes the AVX-512 path on
    /// this CPU (AVX-512 F, VL, VBMI2, VPOPCNTDQ and BMI2); for tests.
    #[doc(hidden)]
    pub fn uses_avx512(&self) -> bool {
        matches!(self.path, QueryPath::Avx512 | QueryPath::Avx512Narrow)
    }

    /// The AVX2 query whatever path [`may_contain`](Self::may_contain)
    /// takes; `None` if the CPU lacks AVX2 or BMI2. For tests that compare
    /// the paths.
    #[doc(hidden)]
    pub fn may_contain_avx2_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_avx2() {
            // SAFETY: `cpu_has_avx2` just confirmed AVX2 and BMI2, the
            // target features `may_contain_avx2` enables.
            return Some(unsafe { self.may_contain_avx2(bytes, key_hash) });
        }
        let _ = (bytes, key_hash);
        None
    }

    /// The AVX-512 query whatever path [`may_contain`](Self::may_contain)
    /// takes (the narrow one where the layout allows it); `None` if the CPU
    /// lacks one of its features. For tests that compare the paths.
    #[doc(hidden)]
    pub fn may_contain_avx512_path(&self, bytes: &[u8], key_hash: u64) -> Option<bool> {
        #[cfg(target_arch = "x86_64")]
        if cpu_has_avx512() {
            return Some(
                if QueryPath::avx512(self.upper_columns, self.table_start)
                    == QueryPath::Avx512Narrow
                {
                    // SAFETY: `cpu_has_avx512` just confirmed every target
                    // feature `may_contain_avx512_narrow` enables.
                    unsafe { self.may_contain_avx512_narrow(bytes, key_hash) }
                } else {
                    // SAFETY: as above, for `may_contain_avx512`.
                    unsafe { self.may_contain_avx512(bytes, key_hash) }
                },
            );
        }
        let _ = (bytes, key_hash);
        None
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    fn may_contain_popcnt(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.query(bytes, key_hash, parity_popcnt)
    }

    /// The AVX-512 query: every column count, no scalar fallback.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    pub(super) fn may_contain_avx512(&self, bytes: &[u8], key_hash: u64) -> bool {
        match self.locate_v5(bytes, key_hash) {
            Ok(key) => avx512::check_columns(bytes, &key),
            Err(answer) => answer,
        }
    }

    /// The AVX-512 query for format 0x05 layouts of 2 to 8 upper columns
    /// (every start block has 1 to 8): one chunk.
    ///
    /// One length check per call (`bytes` covers the solution, which
    /// [`parse`](Self::parse) checked holds every read a key can make), then
    /// no bounds checks; shorter bytes, and layouts this query does not
    /// cover, go to the bounds-checked scalar path.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
    pub(super) fn may_contain_avx512_narrow(&self, bytes: &[u8], key_hash: u64) -> bool {
        if bytes.len() < self.unchecked_len {
            return self.may_contain_checked(bytes, key_hash);
        }
        // SAFETY: `unchecked_len` is below `usize::MAX` only for a format
        // 0x05 layout that `QueryPath::avx512` gives the narrow path (else
        // `usize::MAX`, which no slice length reaches), so this layout,
        // which came from `parse`, meets `narrow_unchecked`'s conditions on
        // it, and `bytes` has at least `table_start` readable bytes, and
        // `8 * upper_columns` more if `tail_readable` (`unchecked_len`, just
        // checked); the CPU has every feature `narrow_unchecked` needs (this
        // function's target features).
        unsafe {
            if self.tail_readable {
                avx512::narrow_unchecked::<true>(self, bytes.as_ptr(), key_hash)
            } else {
                avx512::narrow_unchecked::<false>(self, bytes.as_ptr(), key_hash)
            }
        }
    }

    /// The narrow AVX-512 query's answer for bytes shorter than the solution
    /// this layout was parsed from (or a layout it does not cover): the
    /// bounds-checked scalar query, whose reads past the end answer "may
    /// contain" (the answer every path gives).
    #[cold]
    #[inline(never)]
    fn may_contain_checked(&self, bytes: &[u8], key_hash: u64) -> bool {
        self.may_contain_scalar_path(bytes, key_hash)
    }

    /// The key's shard, row and position in a format 0x05 solution; `None`
    /// if the layout has no shard for it (impossible for a parsed layout).
    ///
    /// Branch-free after the shard lookup: each block's first word comes
    /// from `min` rather than a test against the first upper block.
    #[inline(always)]
    fn locate(&self, key_hash: u64) -> Option<Located> {
        debug_assert_eq!(self.format, Format::V5);
        let index = fastrange64(key_hash, self.num_shards as u64) as usize;
        let shard = self.shards.get(index)?;
        let h1 = seeded_with_mask(key_hash, shard.seed_mask);
        let row = row_from_seeded(h1, shard.num_starts);
        let upper = self.upper_columns as usize;
        let block = row.start / BLOCK_SLOTS;
        let shift = (row.start % BLOCK_SLOTS) as u32;
        let first_upper = shard.upper_start_block as usize;
        let columns = upper - usize::from(block < first_upper);
        // Blocks are contiguous: the next block follows the start block,
        // and the one after follows the next block.
        let next = columns * WORD_BYTES;
        let next_columns = upper - usize::from(block + 1 < first_upper);
        Some(Located {
            here: shard.block_word(block, upper) * WORD_BYTES,
            next,
            last: if shift == 0 {
                next
            } else {
                next + next_columns * WORD_BYTES
            },
            columns,
            shift,
            coeff: row.coeff,
            result: row.result,
        })
    }

    /// For the vector paths: the key's row in a format 0x05 layout, or the
    /// answer when there is nothing for them to check (a format 0x03 layout,
    /// answered by its own bounds-checked query, or a key without a shard).
    #[inline(always)]
    fn locate_v5(&self, bytes: &[u8], key_hash: u64) -> std::result::Result<Located, bool> {
        if self.format == Format::V3 {
            return Err(self.may_contain_scalar_path(bytes, key_hash));
        }
        self.locate(key_hash).ok_or(true)
    }

    #[inline(always)]
    fn query(&self, bytes: &[u8], key_hash: u64, parity64: impl Fn(u64) -> u32) -> bool {
        if self.format == Format::V3 {
            return self.query_v3(bytes, key_hash, parity64);
        }
        match self.locate(key_hash) {
            Some(key) => Self::check_columns(bytes, &key, parity64),
            None => true,
        }
    }

    /// The scalar column loop (format 0x05): one parity per result column.
    #[inline(always)]
    fn check_columns(bytes: &[u8], key: &Located, parity64: impl Fn(u64) -> u32) -> bool {
        let len = key.columns * WORD_BYTES;
        // Rather than shifting every solution word into the window, split
        // the coefficients once into a mask per block.
        let [m0, m1, m2] = key.masks();
        let Some(words) = key.words(bytes) else {
            return true;
        };
        let (a, b, c) = (
            &words[..len],
            &words[key.next..key.next + len],
            &words[key.last..],
        );
        let word = |chunk: &[u8]| <[u8; WORD_BYTES]>::try_from(chunk).map(u64::from_le_bytes);
        // Columns are checked in a branch-free group of EARLY_EXIT_COLUMNS,
        // then the rest: `diff` collects mismatching columns.
        let mut diff = 0u32;
        let columns = a
            .chunks_exact(WORD_BYTES)
            .zip(b.chunks_exact(WORD_BYTES))
            .zip(c.chunks_exact(WORD_BYTES));
        for (j, ((wa, wb), wc)) in columns.enumerate() {
            let (Ok(wa), Ok(wb), Ok(wc)) = (word(wa), word(wb), word(wc)) else {
                return true;
            };
            diff |= parity64((wa & m0) ^ (wb & m1) ^ (wc & m2)) ^ ((key.result >> j) & 1);
            if j + 1 == EARLY_EXIT_COLUMNS && diff != 0 {
                return false;
            }
        }
        diff == 0
    }

    /// Format 0x03: the key's start block of 128 slots holds bits
    /// `shift..128` of its window, the next block (which directly follows
    /// and stores at least as many columns) the rest.
    #[inline(always)]
    fn query_v3(&self, bytes: &[u8], key_hash: u64, parity64: impl Fn(u64) -> u32) -> bool {
        let index = fastrange64(key_hash, self.num_shards as u64) as usize;
        let Some(shard) = self.shards.get(index) else {
            return true;
        };
        let row = row_from_seeded(
            seeded_with_mask(key_hash, shard.seed_mask),
            shard.num_starts,
        );
        let upper = self.upper_columns as usize;
        let block = row.start / V3_BLOCK_SLOTS;
        let shift = (row.start % V3_BLOCK_SLOTS) as u32;
        let columns = upper - usize::from(block < shard.upper_start_block as usize);
        let here = shard.block_word(block, upper) * V3_WORD_BYTES;
        let len = columns * V3_WORD_BYTES;
        let low = row.coeff << shift;
        let high = if shift == 0 {
            0
        } else {
            row.coeff >> (W as u32 - shift)
        };
        // With a block-aligned start the window ends with the start block,
        // which may be the shard's last: read it again (ANDed with zero).
        let next = if shift == 0 { here } else { here + len };
        let (Some(this_block), Some(next_block)) =
            (bytes.get(here..here + len), bytes.get(next..next + len))
        else {
            return true;
        };
        let word = |chunk: &[u8]| <[u8; V3_WORD_BYTES]>::try_from(chunk).map(u128::from_le_bytes);
        let pairs = this_block
            .chunks_exact(V3_WORD_BYTES)
            .zip(next_block.chunks_exact(V3_WORD_BYTES));
        for (j, (c0, c1)) in pairs.enumerate() {
            let (Ok(w0), Ok(w1)) = (word(c0), word(c1)) else {
                return true;
            };
            if parity64(fold((w0 & low) ^ (w1 & high))) != (row.result >> j) & 1 {
                return false;
            }
        }
        true
    }
}

/// The query a decoded filter stores on paths other than the narrow
/// AVX-512 one: its layout's [`may_contain`](RibbonLayout::may_contain) on
/// its bytes; `true` ("may contain") for a filter that is not a Ribbon one.
///
/// # Safety
///
/// None needed (`unsafe` only to have the type of every query function).
unsafe fn query_via_layout<F: RibbonSource>(filter: &F, key_hash: u64) -> bool {
    filter.ribbon().may_contain(filter.ribbon_bytes(), key_hash)
}

/// The narrow AVX-512 query of a decoded filter, with no length check:
/// `F`'s contract says its bytes are those the layout was parsed from.
///
/// # Safety
///
/// Must be the function [`RibbonLayout::query_fn_for`] returned for the
/// filter's layout (its path is the narrow AVX-512 one, so the CPU has
/// AVX-512 F, VL, VBMI2, VPOPCNTDQ and BMI2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512vbmi2,avx512vpopcntdq,bmi2")]
unsafe fn query_narrow<F: RibbonSource, const TAIL_READABLE: bool>(
    filter: &F,
    key_hash: u64,
) -> bool {
    let layout = filter.ribbon();
    debug_assert_eq!(layout.path, QueryPath::Avx512Narrow);
    debug_assert!(
        !TAIL_READABLE
            || filter.readable_len() >= layout.table_start + layout.upper_columns as usize * 8
    );
    // SAFETY: `query_fn_for` returns this function only for a layout on the
    // narrow path, with `TAIL_READABLE` only if `F`'s `readable_len` (which
    // does not change) is at least `table_start + 8 * upper_columns`;
    // `parse` (or `on_path`, which keeps the parsed fields) chooses that
    // path only for a format 0x05 layout that meets `narrow_unchecked`'s
    // conditions and only when the CPU has its features (`empty()` never
    // does), and layouts are not modified after that. By `F`'s contract the
    // layout was parsed from exactly `ribbon_bytes()`, whose length `parse`
    // checked is at least `table_start`, and `readable_len` bytes are
    // readable from its first.
    unsafe {
        avx512::narrow_unchecked::<TAIL_READABLE>(layout, filter.ribbon_bytes().as_ptr(), key_hash)
    }
}
