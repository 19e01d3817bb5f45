//! Banding (incremental Gaussian elimination) of format 0x06's 64-bit rows.
//!
//! A band of `S` slots holds at most one row per slot, the row whose first
//! set coefficient bit (pivot) is that slot: per slot a `u64` coefficient
//! word (bit `k` = slot `slot + k`; 0 means empty, a stored row has bit 0
//! set) and its result bits. A new row goes to its start slot; while the
//! slot is taken the stored row is XORed into it, which clears bit 0, and
//! the row shifts right to its new pivot. It ends in an empty slot, or its
//! coefficients XOR to zero: redundant with a zero result (a duplicate
//! key), no solution otherwise. With 64-bit rows a pivot never leaves the
//! row's 64-slot window, and `start <= S - 64` keeps that window in the
//! band, so every step is one XOR, one trailing-zero count and one shift.
//!
//! A band small enough to sit in L1 (the default shards) takes its rows
//! as the keys come; a larger one gets them in (roughly) increasing start
//! ([`Band::prepare`]), so that the slots a chain visits were touched a
//! moment ago. The order changes neither the outcome nor the solution.
//! Several shards are banded at once, one step of each in turn
//! (`band_lanes_*`): one chain is latency-bound, unrelated chains overlap
//! in the CPU. [`run_jobs`] runs them as a work queue.
//!
//! **The lanes' step has no branch on the data.** A row ends its chain at
//! an empty slot after about 12.8 steps on average, at a random step: a
//! branch on "empty" mispredicts about once per key, and each mispredict
//! throws away the other lanes' work in flight too. So a step always does
//! the same thing: it XORs the slot's row into the lane's row (an empty
//! slot holds coefficients 0 and result 0, so that XOR leaves the row as it
//! is), stores the result to the slot if it was empty and to a sink cell if
//! not (the address is a conditional move), and then takes either the
//! shifted row or the next key's prepared row (conditional moves again).
//! Only the rare end of a lane (last key, a row reduced to zero) is a
//! branch. More instructions per step, no mispredicts: measured faster
//! than the branching step (numbers in docs/filters.md, "Format 0x06").

use std::cell::Cell;
use std::hint::select_unpredictable;
use std::marker::PhantomData;

use super::{coeff_of, start_of, Row, MAX_SHARD_SLOTS, W};

/// Most shards banded at once (bands a build keeps; [`run_jobs`] has a
/// function for each count up to this).
pub(crate) const MAX_LANES: usize = 4;

/// The stride ([`Band`]) of every band of a build whose shards have at
/// most `FIXED_STRIDE - 2` slots: every build of random hashes with the
/// default shard size (shards of at most about 1,800 slots).
///
/// Known when the lanes' loop is compiled, the stride becomes an
/// instruction's displacement: a result cell is addressed from the slot's
/// pointer alone, and the register that held the stride holds the sink
/// instead, which is what lets [`LANES_64`](super::LANES_64) lanes keep
/// most of their state in registers. Bands of larger shards (other shard
/// sizes, or skewed hashes such as many copies of one) run a copy of the
/// loop with the stride in a register. `8 * FIXED_STRIDE` is not a
/// multiple of 4,096, so a slot's two cells do not alias in the CPU's
/// store-to-load check (which compares the low 12 bits of addresses).
/// Measured in docs/filters.md, "Thirtieth session".
pub(crate) const FIXED_STRIDE: usize = 2_056;

/// Slots per bucket of the counting sort that orders rows by start.
const SLOTS_PER_BUCKET: usize = 64;

/// Bands of more slots than this have their rows sorted by start before
/// banding ([`Band::prepare`]); smaller ones (the default shards, about
/// 1,050 slots) fit in L1 whatever the order, and skip the sort. Measured
/// with `cargo run --release --example ribbon_build -- 1000000 <rounds>
/// <shard keys> 3`, unsorted against sorted: 19.2-19.3 against 19.8-20.4
/// ns/key with 1,024-key shards (1,046 slots), equal at 1,448 keys, 19.7
/// against 19.0 at 2,048 keys, 33.0 against 26.4 at 8,192.
const SORT_ABOVE_SLOTS: usize = 1_536;

/// A prepared key's row, as the lanes take it up: its coefficients, the
/// address of its start slot in the band's cells and its result bits.
///
/// The address is an integer (the cells' provenance is exposed in
/// [`Band::prepare`], and a lane turns it back into a pointer with
/// [`std::ptr::with_exposed_provenance_mut`]), so that the AVX-512 row
/// preparation ([`super::rows_avx512`]) may compute it in vector lanes.
/// `repr(C)`: that code writes the three fields as consecutive words.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct Prepared {
    pub(super) coeff: u64,
    pub(super) slot: usize,
    pub(super) result: u64,
}

/// One shard's band under construction, and its keys' rows in start order.
///
/// The cells hold the coefficients of slot `j` at `cells[j]` and its result
/// bits at `cells[stride + j]`: a fixed distance, so that a step reaches
/// both from one address. `cells[slots]` and `cells[stride + slots]` are
/// the sink a step stores to when its slot was taken (never read as a
/// slot; the lanes of one `band_lanes_*` call share the first lane's), and
/// `cells[slots + 1]` and `cells[stride + slots + 1]` the zero cell the
/// sentinel rows point at (never written by the lanes, so it stays 0).
/// Bands banded together in one `band_lanes_*` call have the same
/// `stride`.
#[derive(Default)]
pub(crate) struct Band {
    cells: Vec<u64>,
    /// Slots of the prepared shard.
    slots: usize,
    /// Distance from a slot's coefficients to its result bits, in cells:
    /// at least `slots + 2` (the slots, the sink and the zero cell).
    /// Cells between `slots + 2` and `stride`, and after `stride + slots +
    /// 2`, are never read.
    stride: usize,
    /// Prepared rows in (roughly) increasing start, then two sentinels
    /// (coefficients 0 at the zero cell): a lane takes up the first after
    /// the last key and stops at its next step, whose XOR gives 0 (the
    /// second is what that lane's next-row pointer then points at).
    rows: Vec<Prepared>,
    bucket_next: Vec<u32>,
}

impl Band {
    /// An empty band whose cells keep their results `stride` cells after
    /// their coefficients (bands with the same stride can be banded
    /// together; a shard prepared in it must have at most `stride - 2`
    /// slots).
    #[cfg(test)]
    pub(crate) fn with_stride(stride: usize) -> Band {
        Band {
            stride,
            ..Band::default()
        }
    }

    /// Clears the band to `slots` slots (`64..=65535`) and prepares the
    /// keys' rows for seed mask `mask`. Raises the stride to `slots + 2` if
    /// it is smaller.
    ///
    /// Bands of more than [`SORT_ABOVE_SLOTS`] slots get their rows in
    /// (roughly) increasing start: the smashed start is monotone in the
    /// rehashed key, so a counting sort on its top bits puts consecutive
    /// rows within about `SLOTS_PER_BUCKET` slots of each other, and the
    /// slots a chain visits were touched a moment ago. Smaller bands take
    /// the keys as they come. The order changes neither the outcome nor
    /// the solution: whether the rows are independent does not depend on
    /// it, nor do the pivot slots (those of the reduced echelon form of the
    /// rows), and back substitution with 0 in every slot without a pivot
    /// has one answer (the build tests compare bytes across lane counts,
    /// which band in different interleavings; a check of 126 builds gave
    /// the same bytes with and without the sort).
    ///
    /// The rows of the smaller bands are computed eight keys at a time on
    /// CPUs with AVX-512 F and DQ other than Intel's ([`RowCode::detect`];
    /// the same rows: on AMD Zen 5 0.94x-0.97x the build time with them
    /// computed one at a time, docs/filters.md, "Twentieth session"; on an
    /// Intel Xeon 1.05x-1.07x, "Twenty-third session").
    pub(crate) fn prepare(&mut self, key_hashes: &[u64], slots: usize, mask: u64) {
        self.prepare_with(RowCode::detect(), key_hashes, slots, mask);
    }

    /// [`prepare`](Self::prepare) with the rows computed by `code` (which
    /// the CPU must run: [`RowCode::detect`] or [`RowCode::Scalar`]).
    pub(crate) fn prepare_with(
        &mut self,
        code: RowCode,
        key_hashes: &[u64],
        slots: usize,
        mask: u64,
    ) {
        // The steps rely on it (no bounds checks): one check per band.
        assert!(
            (W..=MAX_SHARD_SLOTS).contains(&slots),
            "band of {slots} slots"
        );
        self.slots = slots;
        self.stride = self.stride.max(slots + 2);
        // Coefficients and results of every slot, the sink and the zero
        // cell: zero. Only those: with the fixed stride most of the cells
        // are never used.
        let stride = self.stride;
        if self.cells.len() == 2 * stride {
            self.cells[..slots + 2].fill(0);
            self.cells[stride..stride + slots + 2].fill(0);
        } else {
            self.cells.clear();
            self.cells.resize(2 * stride, 0);
        }
        // The lanes turn the rows' slot addresses back into pointers into
        // the cells (`Prepared`).
        let cells = self.cells.as_mut_ptr().expose_provenance();
        let row_of = |g: u64| Prepared {
            coeff: coeff_of(g),
            // A start is at most `slots - 64`: a cell of the band.
            slot: cells + 8 * start_of(g, slots as u64) as usize,
            result: g as u32 as u64,
        };
        let sentinel = Prepared {
            coeff: 0,
            // `slots + 1 < stride`: the zero cell, inside `cells`.
            slot: cells + 8 * (slots + 1),
            result: 0,
        };
        self.rows.clear();
        if slots <= SORT_ABOVE_SLOTS {
            self.rows.reserve(key_hashes.len() + 2);
            let mut done = 0;
            #[cfg(not(target_arch = "x86_64"))]
            let _ = code;
            #[cfg(target_arch = "x86_64")]
            if code == RowCode::Avx512 && super::rows_avx512::available() {
                // SAFETY: `available` just confirmed the CPU features
                // `extend` enables; `slots` is in `64..=65535` (asserted
                // above) and `cells` is the address of the band's
                // `2 * stride > slots + 1` cells.
                done = unsafe {
                    super::rows_avx512::extend(&mut self.rows, key_hashes, mask, slots, cells)
                };
            }
            self.rows.extend(
                key_hashes[done..]
                    .iter()
                    .map(|&h| row_of(super::rehash(h, mask))),
            );
            self.rows.extend([sentinel; 2]);
            return;
        }
        let buckets = (slots / SLOTS_PER_BUCKET).next_power_of_two().max(1);
        let shift = 64 - buckets.trailing_zeros();
        let bucket_of = |g: u64| g.checked_shr(shift).unwrap_or(0) as usize;
        self.bucket_next.clear();
        self.bucket_next.resize(buckets, 0);
        // The rehash is one multiply: cheaper to do twice than to store.
        for &h in key_hashes {
            self.bucket_next[bucket_of(super::rehash(h, mask))] += 1;
        }
        let mut sum = 0u32;
        for next in self.bucket_next.iter_mut() {
            let count = *next;
            *next = sum;
            sum += count;
        }
        self.rows.resize(key_hashes.len() + 2, sentinel);
        for &h in key_hashes {
            let g = super::rehash(h, mask);
            let next = &mut self.bucket_next[bucket_of(g)];
            self.rows[*next as usize] = row_of(g);
            *next += 1;
        }
    }

    /// Keys of the prepared band.
    pub(crate) fn keys(&self) -> usize {
        self.rows.len().saturating_sub(2)
    }

    /// The banded coefficients, one word per slot (0: empty).
    pub(crate) fn coeffs(&self) -> &[u64] {
        &self.cells[..self.slots]
    }

    /// The banded result bits, one word per slot (0 where empty; only the
    /// low 32 bits are used).
    pub(crate) fn results(&self) -> &[u64] {
        &self.cells[self.stride..self.stride + self.slots]
    }

    /// The row of prepared key `index` (in start order).
    fn row(&self, index: usize) -> Row {
        let p = self.rows[index];
        Row {
            start: (p.slot - self.cells.as_ptr() as usize) / 8,
            coeff: p.coeff,
            result: p.result as u32,
        }
    }

    /// Bands `row`; false if the system has no solution.
    fn add(&mut self, row: Row) -> bool {
        // The step count is a dead local once inlined.
        self.add_counting(row, &mut 0)
    }

    /// Bands `row` like [`add`](Self::add), counting elimination steps (a
    /// visit of a slot) into `steps`.
    #[inline(always)]
    fn add_counting(&mut self, mut row: Row, steps: &mut u64) -> bool {
        let stride = self.stride;
        loop {
            *steps += 1;
            let existing = self.cells[row.start];
            if existing == 0 {
                self.cells[row.start] = row.coeff;
                self.cells[stride + row.start] = row.result as u64;
                return true;
            }
            row.coeff ^= existing;
            row.result ^= self.cells[stride + row.start] as u32;
            if row.coeff == 0 {
                return row.result == 0;
            }
            let tz = row.coeff.trailing_zeros();
            row.start += tz as usize;
            row.coeff >>= tz;
        }
    }

    /// Bands the prepared keys from `index` on, one at a time; whether the
    /// system was solvable.
    pub(crate) fn add_from(&mut self, index: usize) -> bool {
        (index..self.keys()).all(|i| {
            let row = self.row(i);
            self.add(row)
        })
    }
}

/// Which code computes a band's prepared rows ([`Band::prepare_with`]):
/// the same rows either way (a test compares them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowCode {
    /// One key at a time, any CPU.
    Scalar,
    /// Eight keys at a time with AVX-512 F and DQ ([`super::rows_avx512`]),
    /// the rest one at a time. Used only when the CPU has them.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl RowCode {
    /// The code this CPU runs best, as measured on one machine of each
    /// kind: the vector code ([`vector`](Self::vector)) except on Intel
    /// CPUs, where one key at a time was the faster
    /// ([`super::rows_avx512::preferred`]).
    pub(crate) fn detect() -> RowCode {
        #[cfg(target_arch = "x86_64")]
        if super::rows_avx512::preferred() {
            return RowCode::Avx512;
        }
        RowCode::Scalar
    }

    /// The vector code, if this CPU runs it.
    pub(crate) fn vector() -> Option<RowCode> {
        #[cfg(target_arch = "x86_64")]
        if super::rows_avx512::available() {
            return Some(RowCode::Avx512);
        }
        None
    }
}

/// Memory a thread keeps in its spare bands between builds ([`Bands`]),
/// at most: the four bands of default builds kept 278-339 KB (measured by
/// review at 20,000 to 1,000,000 keys: cells of [`FIXED_STRIDE`] and the
/// prepared rows' vectors, grown by doubling).
const KEEP_BAND_BYTES: usize = 1 << 20;

thread_local! {
    /// Bands a finished build on this thread left for the next one.
    static SPARE_BANDS: Cell<Option<Box<[Band; MAX_LANES]>>> = const { Cell::new(None) };
}

/// The bands of one build, reused from the thread's previous build when
/// there is one and handed back when dropped (if they hold at most
/// [`KEEP_BAND_BYTES`]). A build of a few thousand keys otherwise spends a
/// measurable share of its time allocating, page-faulting and freeing
/// its bands: at 10,000 keys, building 64 different key sets in turn,
/// 18.6-18.7 ns/key with the spare bands against 21.7-22.2 without
/// (three alternating runs of a throwaway loop over `build_with`), and
/// `perf` no longer shows page faults.
pub(crate) struct Bands(Option<Box<[Band; MAX_LANES]>>);

impl Bands {
    /// The thread's spare bands (or new ones), each set to `stride`, or to
    /// [`FIXED_STRIDE`] if that is larger. New
    /// ones too when the thread's locals are being destroyed (a build from
    /// another thread-local's destructor): `SPARE_BANDS.take()` would
    /// panic there, which aborts the process.
    pub(crate) fn take(stride: usize) -> Bands {
        let stride = stride.max(FIXED_STRIDE);
        let mut bands = SPARE_BANDS
            .try_with(Cell::take)
            .ok()
            .flatten()
            .unwrap_or_default();
        for band in bands.iter_mut() {
            band.stride = stride;
            band.slots = 0;
            band.rows.clear();
        }
        Bands(Some(bands))
    }
}

impl std::ops::Deref for Bands {
    type Target = [Band; MAX_LANES];
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("bands until dropped")
    }
}

impl std::ops::DerefMut for Bands {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.as_mut().expect("bands until dropped")
    }
}

impl Drop for Bands {
    fn drop(&mut self) {
        let Some(bands) = self.0.take() else { return };
        let bytes: usize = bands
            .iter()
            .map(|band| {
                band.cells.capacity() * size_of::<u64>()
                    + band.rows.capacity() * size_of::<Prepared>()
                    + band.bucket_next.capacity() * size_of::<u32>()
            })
            .sum();
        if bytes <= KEEP_BAND_BYTES {
            // Dropped instead when the thread's locals are being destroyed.
            let _ = SPARE_BANDS.try_with(|spare| spare.set(Some(bands)));
        }
    }
}

/// Elimination steps (slot visits) banding `key_hashes` into one shard of
/// `slots` slots (clamped to `64..=65535`) takes, in build order, with
/// seeds from 0 until one solves or `max_seeds` have failed: `(steps over
/// all seeds tried, seeds tried, solved)`. For the overhead tool (the cost
/// of the build's banding, independent of the machine).
#[doc(hidden)]
pub fn elimination_steps(key_hashes: &[u64], slots: usize, max_seeds: u32) -> (u64, u32, bool) {
    let slots = slots.clamp(W, MAX_SHARD_SLOTS);
    let mut band = Band::default();
    let mut steps = 0;
    for seed in 0..max_seeds.min(256) {
        band.prepare(key_hashes, slots, super::seed_mask(seed as u8));
        let solved = (0..band.keys()).all(|i| {
            let row = band.row(i);
            band.add_counting(row, &mut steps)
        });
        if solved {
            return (steps, seed + 1, true);
        }
    }
    (steps, max_seeds.min(256), false)
}

/// Where a lane stands: the row in progress and the index, in start
/// order, of the key it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneRow {
    row: Row,
    index: usize,
}

impl LaneRow {
    /// The first row of prepared `band` (which has at least one key).
    pub(crate) fn first(band: &Band) -> LaneRow {
        LaneRow {
            row: band.row(0),
            index: 0,
        }
    }
}

/// One shard being banded by a `band_lanes_*` function, its hot state
/// (coefficients, slot pointer, result, next prepared row) in locals the
/// compiler keeps in registers. Four registers a lane: the step's only
/// branch is on a row reduced to zero, which is also how a lane that has
/// taken up the sentinel after its last key stops, and the lanes share one
/// sink (`band_lanes_*`). With a pointer to the rows' end and a sink of
/// its own, a lane kept six, three lanes did not fit in the registers, and
/// every step also compared its next-row pointer with the end (measured in
/// docs/filters.md, "Twenty-second session"). Four lanes of four do not
/// fit either: the compiler keeps most next-row pointers on the stack,
/// off the chain of dependent instructions, and four lanes still measured
/// faster than three ([`LANES_64`](super::LANES_64)).
struct Lane<'a> {
    coeff: u64,
    /// The slot of the row in progress: a pointer into the band's cells,
    /// so the dependent chain of steps needs no index arithmetic.
    slot: *mut u64,
    result: u64,
    /// The prepared row of the key after the current one (a sentinel after
    /// the last key).
    next: *const Prepared,
    cells: *mut u64,
    rows: *const Prepared,
    band: PhantomData<&'a mut Band>,
}

impl<'a> Lane<'a> {
    fn new(band: &'a mut Band, at: LaneRow) -> Lane<'a> {
        let slots = band.slots;
        assert!(
            at.index < band.keys()
                && band
                    .rows
                    .get(band.keys())
                    .is_some_and(|sentinel| sentinel.coeff == 0)
                && slots + 2 <= band.stride
                && band.cells.len() == 2 * band.stride
                && at.row.start + W <= slots + (at.row.coeff.leading_zeros() as usize)
                && at.row.coeff & 1 == 1
        );
        let cells = band.cells.as_mut_ptr();
        let rows = band.rows.as_ptr();
        Lane {
            coeff: at.row.coeff,
            // In bounds: `at.row.start < slots` (asserted: the row's highest
            // set bit, at or after its start, is inside the band).
            slot: cells.wrapping_add(at.row.start),
            result: at.row.result as u64,
            next: rows.wrapping_add(at.index + 1),
            cells,
            rows,
            band: PhantomData,
        }
    }

    fn state(&self) -> LaneRow {
        LaneRow {
            row: Row {
                start: (self.slot as usize - self.cells as usize) / 8,
                coeff: self.coeff,
                result: self.result as u32,
            },
            index: (self.next as usize - self.rows as usize) / size_of::<Prepared>() - 1,
        }
    }

    /// One elimination step, without a branch on the data (module doc);
    /// true when the lane must stop and be looked at (rare: its row reduced
    /// to zero, or the sentinel after its last key). `stride_bytes` is the
    /// band's stride in bytes, `sink` the shared sink (a band's `cells[slots]`
    /// of the same stride). Unchecked accesses, as in format 0x05's band,
    /// where they measured 1.1x faster builds than indexing.
    #[inline(always)]
    fn step(&mut self, stride_bytes: usize, sink: *mut u64) -> bool {
        // Invariants while the lane runs: `slot` is `&cells[at]`, and
        // either bit 0 of `coeff` is set, `at < slots` and the highest set
        // bit of `coeff` stands for a slot below `slots` (a row's bits stay
        // in its 64-slot window from `start <= slots - 64`; XOR with a
        // stored row pivoted inside that window and a right shift keep them
        // there), or the lane holds the first sentinel: `coeff` 0 and `at =
        // slots + 1`, the zero cell. `next` points at a prepared row or a
        // sentinel; it is the second sentinel only while the lane holds the
        // first. The cells from `cells` are `2 * stride` words, `stride >=
        // slots + 2`, and `stride_bytes = 8 * stride`.
        let slot = self.slot;
        // SAFETY: `at <= slots + 1 < stride`: cell `at` and cell `stride +
        // at` are inside the band's cells.
        let (existing, stored_result) = unsafe { (*slot, *slot.byte_add(stride_bytes)) };
        let coeff = self.coeff ^ existing;
        let result = self.result ^ stored_result;
        if coeff == 0 {
            // Reduced to zero, or the sentinel (whose zero cell holds 0):
            // `run_jobs` decides.
            self.result = result;
            return true;
        }
        // Not the sentinel, so bit 0 of the lane's row is set and `at <
        // slots`. An empty slot holds 0 and result 0, so `coeff` and
        // `result` are then the lane's row, which goes there; a taken slot
        // keeps its row and the sink gets the write.
        let empty = existing == 0;
        let target = select_unpredictable(empty, slot, sink);
        // SAFETY: `target` is cell `at < slots` or the sink, a cell
        // `slots' < stride` of a band of the same stride (caller), so it
        // and the cell `stride` further are in that band's cells.
        unsafe {
            *target = coeff;
            *target.byte_add(stride_bytes) = result;
        }
        // 0 when the slot was empty (bit 0 of the lane's row is set).
        let tz = coeff.trailing_zeros();
        // SAFETY: `next` points at a prepared row or the first sentinel
        // (the lane does not hold a sentinel: the invariant above), inside
        // the rows.
        let next = unsafe { *self.next };
        self.coeff = select_unpredictable(empty, next.coeff, coeff >> tz);
        // The next slot is `base + tz`, with `tz` 0 when the slot was
        // empty: the selection waits only for the load, so the chain from
        // one step's load to the next is load, XOR, trailing-zero count and
        // add (selecting after the add made it one instruction longer:
        // docs/filters.md, "Thirtieth session"). In bounds either way: a
        // prepared row's start slot or the zero cell, or the new pivot, a
        // set bit of the row, inside the band (the invariant above).
        let base = select_unpredictable(
            empty,
            std::ptr::with_exposed_provenance_mut(next.slot),
            slot,
        );
        self.slot = base.wrapping_add(tz as usize);
        self.result = select_unpredictable(empty, next.result, result);
        self.next = select_unpredictable(empty, self.next.wrapping_add(1), self.next);
        false
    }
}

/// Which compiled copy of the lanes' loop a build runs.
///
/// The step shifts the row right by its trailing-zero count. Compiled for
/// the baseline x86-64 that is `shr r64, cl`, which Intel cores split into
/// several uops (it must keep the flags when the count is 0); with BMI2 it
/// is `shrx`, one uop. The loop is also compiled with BMI1 and BMI2, and a
/// build takes that copy when the CPU has them. Measured on an Intel
/// Emerald Rapids with `cargo run --release --example ribbon_build --
/// 1000000 15` (both copies each round): 0.92x and 0.95x the baseline
/// copy's time (median of per-round ratios, two runs); docs/filters.md,
/// "Thirteenth session".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BandCode {
    /// Compiled for the crate's target features.
    Baseline,
    /// Compiled with BMI1 and BMI2 (x86-64 only; chosen only when the CPU
    /// reports both).
    #[cfg(target_arch = "x86_64")]
    Bmi2,
}

impl BandCode {
    /// The copy this CPU runs best.
    pub(crate) fn detect() -> BandCode {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2")
        {
            return BandCode::Bmi2;
        }
        BandCode::Baseline
    }

    /// Every copy this CPU can run (for tests that compare them).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<BandCode> {
        let mut codes = vec![BandCode::Baseline];
        if BandCode::detect() != BandCode::Baseline {
            codes.push(BandCode::detect());
        }
        codes
    }
}

/// The lanes' loop over `$rows` with `$stride_bytes` (an expression: a
/// constant or a local) and `$sink`: sets the lanes up, steps them until
/// one stops, writes their states back and evaluates to the stopped one's
/// position. A macro, expanded once per stride copy in `band_lanes!`: the
/// same code as a shared `#[inline(always)]` function called twice made
/// the compiler spill the sink in the fixed-stride copy, which measured
/// slower.
macro_rules! lanes_loop {
    ($rows:ident, $stride_bytes:expr, $sink:ident, $($lane:ident),+) => {{
        let mut i = 0;
        $(
            let mut $lane = Lane::new($lane, $rows[i]);
            i += 1;
        )+
        let stopped = 'steps: loop {
            let mut i = 0;
            $(
                if $lane.step($stride_bytes, $sink) {
                    break 'steps i;
                }
                i += 1;
            )+
        };
        let mut i = 0;
        $(
            $rows[i] = $lane.state();
            i += 1;
        )+
        stopped
    }};
}

/// Defines `$name`, which bands as many shards at once as it lists lanes,
/// running the copy of the loop `code` names.
/// A macro rather than a const-generic function over an array of lanes:
/// separate locals stay in registers, an array of lanes went to the stack
/// (format 0x05's band measured that as 1.3x slower).
macro_rules! band_lanes {
    ($(#[$doc:meta])* $name:ident, $n:literal, $($lane:ident),+) => {
        $(#[$doc])*
        #[inline(never)]
        fn $name(
            code: BandCode,
            bands: [&mut Band; $n],
            rows: &mut [LaneRow; $n],
        ) -> usize {
            /// The loop, inlined into each copy: once with the
            /// [`FIXED_STRIDE`] as a constant, once for any other stride.
            #[inline(always)]
            #[allow(unused_assignments)]
            fn body(bands: [&mut Band; $n], rows: &mut [LaneRow; $n]) -> usize {
                let stride = bands[0].stride;
                assert!(bands.iter().all(|band| band.stride == stride));
                // Every lane stores to the first band's sink: a cell of
                // no slot, `stride` cells from its result cell like any.
                // (`Vec::as_mut_ptr` does not invalidate earlier raw
                // pointers, so the lanes' own calls leave `sink` valid.)
                let sink = bands[0].cells.as_mut_ptr().wrapping_add(bands[0].slots);
                let [$($lane),+] = bands;
                if stride == FIXED_STRIDE {
                    const STRIDE_BYTES: usize = FIXED_STRIDE * size_of::<u64>();
                    return lanes_loop!(rows, STRIDE_BYTES, sink, $($lane),+);
                }
                let stride_bytes = stride * size_of::<u64>();
                lanes_loop!(rows, stride_bytes, sink, $($lane),+)
            }
            /// The loop compiled with BMI1 and BMI2.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "bmi1,bmi2")]
            fn with_bmi2(bands: [&mut Band; $n], rows: &mut [LaneRow; $n]) -> usize {
                body(bands, rows)
            }
            match code {
                BandCode::Baseline => body(bands, rows),
                // SAFETY: `BandCode::Bmi2` is only made by `detect` (and
                // `available`, from `detect`) when the CPU reports BMI1
                // and BMI2, the features `with_bmi2` is compiled with.
                #[cfg(target_arch = "x86_64")]
                BandCode::Bmi2 => unsafe { with_bmi2(bands, rows) },
            }
        }
    };
}

band_lanes!(
    /// Bands two shards at once (see [`band_lanes_4`]).
    band_lanes_2,
    2,
    a,
    b
);
band_lanes!(
    /// Bands three shards at once (see [`band_lanes_4`]).
    band_lanes_3,
    3,
    a,
    b,
    c
);
band_lanes!(
    /// Bands four shards at once from where they stand (`rows[i]` is the
    /// row in progress in `bands[i]`, updated on return) until one of them
    /// stops (its row reduced to zero, or the sentinel after its last key:
    /// [`run_jobs`] tells them apart); returns that one's position. Each
    /// pass of the loop does one elimination step of each lane.
    band_lanes_4,
    4,
    a,
    b,
    c,
    d
);

/// A shard in a lane of the build: which shard, which band, the seed being
/// tried and the row in progress.
pub(crate) struct Job {
    /// The shard's index.
    pub(crate) shard: usize,
    /// The band (of the build's [`MAX_LANES`]) it is prepared in.
    pub(crate) band: usize,
    /// The seed being tried.
    pub(crate) seed: u32,
    /// The row in progress.
    pub(crate) at: LaneRow,
}

/// Bands the shards of `jobs` (each in its own band, `jobs.len()` from 1
/// to [`MAX_LANES`]) until one stops; returns its position in `jobs` and
/// whether its system was solvable. The others' `at` is updated (one may
/// then already be done: the next call returns it without banding).
pub(crate) fn run_jobs(
    code: BandCode,
    bands: &mut [Band; MAX_LANES],
    jobs: &mut [Job],
) -> (usize, bool) {
    type Lanes<const N: usize> = fn(BandCode, [&mut Band; N], &mut [LaneRow; N]) -> usize;
    fn lanes<const N: usize>(
        code: BandCode,
        bands: &mut [Band; MAX_LANES],
        jobs: &mut [Job],
        band_lanes: Lanes<N>,
    ) -> (usize, bool) {
        let ids: [usize; N] = std::array::from_fn(|i| jobs[i].band);
        let mut bands = bands.get_disjoint_mut(ids).expect("one band per job");
        let mut rows: [LaneRow; N] = std::array::from_fn(|i| jobs[i].at);
        let stopped = loop {
            // A lane at index `keys` has stored every row: it holds the
            // sentinel after its last key (it stopped there, or took it up
            // in the pass another lane stopped in, or in an earlier call),
            // or its last row was redundant (below). `Lane::new` never
            // takes such a lane up.
            if let Some(done) = (0..N).find(|&j| rows[j].index == bands[j].keys()) {
                break (done, true);
            }
            let i = band_lanes(code, bands.each_mut().map(|band| &mut **band), &mut rows);
            if rows[i].index == bands[i].keys() {
                // The sentinel: done, above.
                continue;
            }
            if rows[i].row.result != 0 {
                // Reduced to zero with a nonzero result: no solution.
                break (i, false);
            }
            // A redundant row (a duplicate key): on to the next key (the
            // first sentinel's row after the last key: done, above).
            let next = rows[i].index + 1;
            rows[i] = LaneRow {
                row: bands[i].row(next),
                index: next,
            };
        };
        for (job, row) in jobs.iter_mut().zip(rows) {
            job.at = row;
        }
        stopped
    }
    match jobs.len() {
        1 => {
            let job = &jobs[0];
            let band = &mut bands[job.band];
            if job.at.index == band.keys() {
                // Done in an earlier call (it holds its sentinel).
                return (0, true);
            }
            let solved = band.add(job.at.row) && band.add_from(job.at.index + 1);
            (0, solved)
        }
        2 => lanes(code, bands, jobs, band_lanes_2),
        3 => lanes(code, bands, jobs, band_lanes_3),
        4 => lanes(code, bands, jobs, band_lanes_4),
        n => unreachable!("{n} jobs"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::hashes;
    use super::super::{row, seed_mask};
    use super::*;

    #[test]
    fn prepared_rows_are_the_spec_rows_in_start_order() {
        let keys = hashes(1_900, 1);
        let slots = 2_000;
        assert!(slots > SORT_ABOVE_SLOTS);
        let mut band = Band::default();
        band.prepare(&keys, slots, seed_mask(4));
        let mut expected: Vec<Row> = keys
            .iter()
            .map(|&h| row(h, seed_mask(4), slots as u64))
            .collect();
        let mut got: Vec<Row> = (0..band.keys()).map(|i| band.row(i)).collect();
        // Buckets of 64 slots (of `u`, before smashing): starts never go
        // down by more than a bucket.
        assert!(got.windows(2).all(|w| w[1].start + 64 >= w[0].start));
        assert!(got.windows(2).any(|w| w[1].start < w[0].start));
        let key = |r: &Row| (r.start, r.coeff, r.result);
        expected.sort_by_key(key);
        got.sort_by_key(key);
        assert_eq!(got, expected);
    }

    #[test]
    fn small_bands_take_the_spec_rows_in_key_order() {
        for slots in [64, 1_000, SORT_ABOVE_SLOTS] {
            let keys = hashes(slots as u64 - 10, slots as u64);
            let mut band = Band::default();
            band.prepare(&keys, slots, seed_mask(9));
            let expected: Vec<Row> = keys
                .iter()
                .map(|&h| row(h, seed_mask(9), slots as u64))
                .collect();
            let got: Vec<Row> = (0..band.keys()).map(|i| band.row(i)).collect();
            assert_eq!(got, expected, "{slots} slots");
        }
    }

    /// Every row code this CPU runs.
    fn row_codes() -> Vec<RowCode> {
        let mut codes = vec![RowCode::Scalar];
        codes.extend(RowCode::vector());
        codes
    }

    #[test]
    fn every_row_code_prepares_the_spec_rows() {
        // Every tail length of the eight-key chunks, hashes at the ends of
        // the range (the multiplies' carries), and slot counts at the
        // ends of the unsorted bands.
        let mut extreme = vec![0, u64::MAX, 1 << 63, (1 << 63) - 1, u32::MAX as u64];
        extreme.extend(hashes(60, 77));
        for code in row_codes() {
            for slots in [64, 65, 1_000, SORT_ABOVE_SLOTS] {
                for count in (0..=17).chain([63, 64, 65]) {
                    let keys = &extreme[..count];
                    for seed in [0, 200] {
                        let mut band = Band::default();
                        band.prepare_with(code, keys, slots, seed_mask(seed));
                        let expected: Vec<Row> = keys
                            .iter()
                            .map(|&h| row(h, seed_mask(seed), slots as u64))
                            .collect();
                        let got: Vec<Row> = (0..band.keys()).map(|i| band.row(i)).collect();
                        assert_eq!(got, expected, "{code:?}, {slots} slots, {count} keys");
                        // The two sentinels after the rows: coefficients 0
                        // at the zero cell, which holds 0.
                        assert_eq!(band.rows.len(), count + 2);
                        for sentinel in &band.rows[count..] {
                            let zero_cell = band.cells.as_ptr() as usize + 8 * (slots + 1);
                            assert_eq!(sentinel.slot, zero_cell);
                            assert_eq!((sentinel.coeff, sentinel.result), (0, 0));
                        }
                        assert_eq!(band.cells[slots + 1], 0);
                        assert_eq!(band.cells[band.stride + slots + 1], 0);
                    }
                }
            }
        }
    }

    /// The vector rows for slot counts the unsorted bands never have (the
    /// function claims `64..=65535`).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_rows_match_the_spec_for_any_band_size() {
        if !super::super::rows_avx512::available() {
            return;
        }
        let keys = hashes(4_000, 3);
        for slots in [64, 4_097, 65_535] {
            let mut rows = Vec::new();
            let cells = 0x1000_0000usize;
            // SAFETY: `available()` confirmed the CPU features.
            let done = unsafe {
                super::super::rows_avx512::extend(&mut rows, &keys, seed_mask(1), slots, cells)
            };
            assert_eq!(done, keys.len());
            for (h, got) in keys.iter().zip(&rows) {
                let want = row(*h, seed_mask(1), slots as u64);
                assert_eq!(
                    (got.coeff, got.slot, got.result),
                    (want.coeff, cells + 8 * want.start, want.result as u64),
                    "{slots} slots"
                );
            }
        }
    }

    #[test]
    fn insertion_order_changes_neither_outcome_nor_solution() {
        use super::super::backsub::solve;
        use super::super::{region_blocks, WORD_BYTES};
        use crate::filter::ribbon::SolvePath;
        let columns = 7;
        let mut solved = 0;
        let mut different_bands = 0;
        for seed in 0..12u8 {
            let (n, slots) = [(900u64, 925usize), (1_000, 1_022), (300, 308)][seed as usize % 3];
            let keys = hashes(n, 50 + seed as u64);
            let mut reversed = keys.clone();
            reversed.reverse();
            let mut bands = [Band::default(), Band::default()];
            bands[0].prepare(&keys, slots, seed_mask(seed));
            bands[1].prepare(&reversed, slots, seed_mask(seed));
            let outcome = [bands[0].add_from(0), bands[1].add_from(0)];
            assert_eq!(outcome[0], outcome[1], "seed {seed}");
            if !outcome[0] {
                continue;
            }
            solved += 1;
            different_bands += usize::from(bands[0].coeffs() != bands[1].coeffs());
            let regions = bands.each_ref().map(|band| {
                let mut region =
                    vec![0u8; region_blocks(slots as u64) as usize * columns * WORD_BYTES];
                solve(
                    band.coeffs(),
                    band.results(),
                    0,
                    columns,
                    &mut region,
                    SolvePath::Fastest,
                );
                region
            });
            assert!(regions[0] == regions[1], "seed {seed}: solutions differ");
        }
        // Both outcomes occur, and the orders do give different bands.
        assert!((4..12).contains(&solved), "{solved}");
        assert!(
            different_bands >= solved / 2,
            "{different_bands} of {solved}"
        );
    }

    #[test]
    fn band_rejects_inconsistent_duplicate_rows_and_passes_redundant_ones() {
        let mut band = Band::default();
        band.prepare(&[], 1024, 0);
        let row = |result| Row {
            start: 5,
            coeff: 0b1011,
            result,
        };
        assert!(band.add(row(3)));
        assert!(band.add(row(3)), "same row and result is redundant");
        assert!(!band.add(row(2)), "same row, other result has no solution");
        // A row that reduces to zero through two stored rows.
        assert!(band.add(Row {
            start: 6,
            coeff: 0b101,
            result: 1
        }));
        assert!(band.add(Row {
            start: 5,
            coeff: 0b1011 ^ 0b1010,
            result: 3 ^ 1
        }));
        assert!(!band.add(Row {
            start: 5,
            coeff: 0b1011 ^ 0b1010,
            result: 3
        }));
    }

    /// A shard for the lane tests: keys, slots, seed.
    type Shard = (Vec<u64>, usize, u8);

    /// The strides to band `shards` with: the smallest that holds them
    /// (the loop with the stride in a register), and [`FIXED_STRIDE`] (the
    /// loop with it as a constant) if that holds them.
    fn strides(shards: &[Shard]) -> Vec<usize> {
        let smallest = shards.iter().map(|s| s.1).max().unwrap() + 2;
        let mut strides = vec![smallest];
        if smallest < FIXED_STRIDE {
            strides.push(FIXED_STRIDE);
        }
        strides
    }

    /// Bands `shards` the way the build does, up to `lanes` at a time
    /// through [`run_jobs`], a finished lane taking the next shard, in
    /// bands of `stride`, and checks each outcome and band against banding
    /// the shard alone, one row at a time; returns the outcomes.
    fn check_lanes_match_one_at_a_time(
        shards: &[Shard],
        lanes: usize,
        code: BandCode,
        stride: usize,
    ) -> Vec<bool> {
        let mut bands: [Band; MAX_LANES] = std::array::from_fn(|_| Band::with_stride(stride));
        check_lanes_in(&mut bands, shards, lanes, code)
    }

    /// [`check_lanes_match_one_at_a_time`] in the bands given, with
    /// whatever earlier calls left in their cells; also checks that the
    /// zero cell of each solved band is still 0.
    fn check_lanes_in(
        bands: &mut [Band; MAX_LANES],
        shards: &[Shard],
        lanes: usize,
        code: BandCode,
    ) -> Vec<bool> {
        let mut jobs: Vec<Job> = Vec::new();
        let mut outcomes = vec![None; shards.len()];
        let mut next = 0;
        let mut check = |band: &Band, shard: usize, solved: bool| {
            let (keys, slots, seed) = &shards[shard];
            let mut alone = Band::default();
            alone.prepare(keys, *slots, seed_mask(*seed));
            assert_eq!(alone.add_from(0), solved, "shard {shard}");
            if solved {
                assert!(
                    alone.coeffs() == band.coeffs(),
                    "shard {shard}: coefficients"
                );
                assert!(alone.results() == band.results(), "shard {shard}: results");
                assert_eq!(band.cells[band.slots + 1], 0, "shard {shard}: zero cell");
            }
            outcomes[shard] = Some(solved);
        };
        loop {
            while jobs.len() < lanes && next < shards.len() {
                let band = (0..MAX_LANES)
                    .find(|&b| jobs.iter().all(|job| job.band != b))
                    .unwrap();
                let (keys, slots, seed) = &shards[next];
                bands[band].prepare(keys, *slots, seed_mask(*seed));
                if bands[band].keys() == 0 {
                    check(&bands[band], next, true);
                } else {
                    jobs.push(Job {
                        shard: next,
                        band,
                        seed: *seed as u32,
                        at: LaneRow::first(&bands[band]),
                    });
                }
                next += 1;
            }
            if jobs.is_empty() {
                break;
            }
            let (stopped, solved) = run_jobs(code, bands, &mut jobs);
            let job = jobs.swap_remove(stopped);
            check(&bands[job.band], job.shard, solved);
        }
        outcomes.into_iter().map(Option::unwrap).collect()
    }

    /// Bands reused through [`Bands::take`] by builds of different
    /// strides on one thread (fixed, larger, fixed again after dense
    /// shards left nonzero cells everywhere), with shards at the edges of
    /// the fixed stride: 64, 65, `FIXED_STRIDE - 2` (the largest the fixed
    /// copy of the loop takes) and `FIXED_STRIDE - 1` (the smallest the
    /// register copy takes). Written by review (thirtieth session); it also
    /// ran under Miri with a smaller round count.
    #[test]
    fn bands_reused_across_strides_band_like_one_shard_at_a_time() {
        let dense = |slots: usize, tag: u64| -> Shard {
            (hashes((slots as u64 * 97) / 100, tag), slots, tag as u8)
        };
        let sparse =
            |keys: u64, slots: usize, tag: u64| -> Shard { (hashes(keys, tag), slots, tag as u8) };
        let fixed: Vec<Shard> = vec![
            sparse(60, FIXED_STRIDE - 2, 1),
            sparse(63, 64, 2),
            sparse(64, 64, 3),
            sparse(30, 65, 4),
            sparse(50, 1_000, 5),
            sparse(120, FIXED_STRIDE - 2, 6),
            sparse(2, 64, 7),
        ];
        let large: Vec<Shard> = vec![
            sparse(80, 5_000, 11),
            sparse(40, 64, 12),
            sparse(70, FIXED_STRIDE - 1, 13),
            sparse(90, FIXED_STRIDE - 2, 14),
            sparse(30, 2_100, 15),
            sparse(60, 64, 16),
        ];
        let dense_small = vec![
            dense(300, 21),
            dense(64, 22),
            dense(500, 23),
            dense(FIXED_STRIDE - 2, 24),
            dense(1_500, 25),
        ];
        for lanes in 1..=MAX_LANES {
            for code in BandCode::available() {
                for (stride, shards) in [
                    (100, &fixed),
                    (5_002, &large),
                    (FIXED_STRIDE, &fixed),
                    (0, &dense_small),
                    (FIXED_STRIDE + 1, &fixed),
                    (50, &fixed),
                ] {
                    let mut bands = Bands::take(stride);
                    let solved = check_lanes_in(&mut bands, shards, lanes, code);
                    assert!(
                        solved.iter().filter(|&&s| s).count() >= 3,
                        "stride {stride}, {lanes} lanes: {solved:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn lanes_band_like_one_shard_at_a_time() {
        let sizes = [1u64, 1_000, 2, 700, 1_950, 40, 1, 1_500, 0, 1_200, 64, 63];
        let shards: Vec<Shard> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let slots = ((n as f64 * 1.05).ceil() as usize).max(W);
                (hashes(n, i as u64), slots, i as u8)
            })
            .collect();
        for code in BandCode::available() {
            for stride in strides(&shards) {
                for lanes in 1..=MAX_LANES {
                    let solved = check_lanes_match_one_at_a_time(&shards, lanes, code, stride);
                    assert!(solved.iter().filter(|&&s| s).count() >= 9, "{solved:?}");
                }
            }
        }
    }

    #[test]
    fn lanes_fail_and_find_redundant_rows_like_one_shard_at_a_time() {
        let unique = hashes(1_000, 77);
        let mut with_duplicates = unique.clone();
        with_duplicates.extend_from_slice(&unique[..500]);
        with_duplicates.extend_from_slice(&unique[700..]);
        let mut inconsistent_hashes = hashes(300, 3);
        inconsistent_hashes.extend(hashes(300, 3));
        let mut shards: Vec<Shard> = Vec::new();
        for seed in 0..4u8 {
            // Duplicates only: redundant rows inside a lane, solvable.
            shards.push((with_duplicates.clone(), 1_100, seed));
            // More keys than slots: the lane fails part-way.
            shards.push((hashes(1_000, 5 + seed as u64), 990, seed));
            // Tight: some seeds fail near the end of the band.
            shards.push((hashes(1_000, 9), 1_010, seed));
            shards.push((inconsistent_hashes.clone(), 400, seed));
        }
        for code in BandCode::available() {
            for stride in strides(&shards) {
                for lanes in 1..=MAX_LANES {
                    let solved = check_lanes_match_one_at_a_time(&shards, lanes, code, stride);
                    for (i, s) in solved.iter().enumerate() {
                        match i % 4 {
                            0 | 3 => assert!(s, "duplicates, shard {i}"),
                            1 => assert!(!s, "too few slots, shard {i}"),
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn lanes_on_the_smallest_bands() {
        // 64 slots: one start (0) for every key, chains run to the last
        // slot; 65 and 100: the smashed edges.
        let mut shards: Vec<Shard> = Vec::new();
        for i in 0..30u64 {
            let n = [1u64, 2, 30, 55, 64, 70][i as usize % 6];
            let mut keys = hashes(n, 1_000 + i);
            if i % 4 == 3 {
                keys.extend(keys.clone());
            }
            let slots = [64, 65, 100][i as usize / 10];
            shards.push((keys, slots, i as u8));
        }
        for code in BandCode::available() {
            for stride in strides(&shards) {
                for lanes in 1..=MAX_LANES {
                    let solved = check_lanes_match_one_at_a_time(&shards, lanes, code, stride);
                    assert!(solved[0] && solved[1], "{solved:?}");
                    assert!(!solved[5], "{solved:?}");
                }
            }
        }
    }
}
