use super::backsub;
use super::layout::cpu_has_avx512;
use super::{
    has_popcnt, parity_mul, parity_popcnt, row_from_seeded, seeded, Row, SolvePath, W, WORD_BYTES,
};

/// Shards banded at once, each in its own band (see [`band_lanes_3`];
/// [`run_jobs`] has a function for each count up to this).
pub(super) const LANES: usize = 3;

/// Slots per bucket of the counting sort that orders rows by start.
const SLOTS_PER_BUCKET: usize = 64;

/// The band under construction: per slot, the row whose pivot it is.
#[derive(Default)]
pub(super) struct Band {
    coeffs: Vec<u128>,
    results: Vec<u32>,
    /// Seeded hashes in key order.
    seeded: Vec<u64>,
    /// Start slots of the band being built.
    num_starts: u64,
    /// Seeded hashes ordered by bucket of their start slot, then one zero
    /// hash (so that a lane can always compute the row after its current
    /// one, see [`Lane`]).
    sorted: Vec<u64>,
    bucket_next: Vec<usize>,
}

impl Band {
    /// Clears the band to `slots` slots and orders the keys' seeded hashes
    /// for `seed` by (roughly) increasing start: the start is monotone in
    /// the seeded hash, so a counting sort on its top bits puts consecutive
    /// rows within about `SLOTS_PER_BUCKET` slots of each other, and the
    /// elimination chains walk L1-resident slots instead of random L2 ones.
    pub(super) fn prepare(&mut self, key_hashes: &[u64], slots: usize, seed: u8) {
        self.coeffs.clear();
        self.coeffs.resize(slots, 0);
        self.results.clear();
        self.results.resize(slots, 0);
        let num_starts = (slots - (W - 1)) as u64;
        let buckets = (slots / SLOTS_PER_BUCKET)
            .next_power_of_two()
            .clamp(1, 1 << 16);
        let bucket_bits = buckets.trailing_zeros();
        let bucket_of = |h1: u64| h1.checked_shr(64 - bucket_bits).unwrap_or(0) as usize;
        self.sorted.clear();
        self.sorted.resize(key_hashes.len() + 1, 0);
        self.bucket_next.clear();
        self.bucket_next.resize(buckets, 0);
        self.seeded.clear();
        self.seeded
            .extend(key_hashes.iter().map(|&h| seeded(h, seed)));
        for &h1 in &self.seeded {
            self.bucket_next[bucket_of(h1)] += 1;
        }
        let mut sum = 0;
        for next in self.bucket_next.iter_mut() {
            let count = *next;
            *next = sum;
            sum += count;
        }
        for &h1 in &self.seeded {
            let next = &mut self.bucket_next[bucket_of(h1)];
            self.sorted[*next] = h1;
            *next += 1;
        }
        self.num_starts = num_starts;
    }

    /// Keys of the prepared band.
    pub(super) fn keys(&self) -> usize {
        self.sorted.len() - 1
    }

    /// The row of prepared key `index` (in start order).
    fn row(&self, index: usize) -> Row {
        row_from_seeded(self.sorted[index], self.num_starts)
    }

    /// Bands every key's row for `seed` into `slots` slots, one at a time;
    /// false if the system has no solution.
    #[cfg(test)]
    fn add_all(&mut self, key_hashes: &[u64], slots: usize, seed: u8) -> bool {
        self.prepare(key_hashes, slots, seed);
        (0..self.keys()).all(|i| self.add(self.row(i)))
    }

    #[inline]
    fn add(&mut self, row: Row) -> bool {
        add_in(&mut self.coeffs, &mut self.results, row)
    }

    /// Back substitution into the interleaved layout `out` (exactly the
    /// shard's solution bytes): AVX-512 when the CPU has it, else the scalar
    /// solver with POPCNT when it has that, else the portable parity (all
    /// write the same bytes; `path` forces a slower one for tests).
    pub(super) fn solve(
        &self,
        upper: u32,
        upper_start_block: usize,
        out: &mut [u8],
        path: SolvePath,
    ) {
        let mut layout = Interleaved64 {
            out,
            block_end: None,
            upper_start_block,
            upper: upper as usize,
        };
        let columns = upper as usize;
        #[cfg(target_arch = "x86_64")]
        if path == SolvePath::Fastest && cpu_has_avx512() {
            // SAFETY: `cpu_has_avx512` just confirmed AVX-512 F, VBMI2 and
            // VPOPCNTDQ, all `solve_avx512` needs.
            return unsafe {
                backsub::solve_avx512(&self.coeffs, &self.results, columns, &mut layout)
            };
        }
        #[cfg(target_arch = "x86_64")]
        if path != SolvePath::Portable && has_popcnt() {
            // SAFETY: `solve_popcnt` only enables the `popcnt` target
            // feature, and `has_popcnt` just confirmed this CPU supports it.
            return unsafe { self.solve_popcnt(columns, &mut layout) };
        }
        backsub::solve_scalar(
            &self.coeffs,
            &self.results,
            columns,
            parity_mul,
            &mut layout,
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    fn solve_popcnt(&self, columns: usize, layout: &mut Interleaved64<'_>) {
        backsub::solve_scalar(&self.coeffs, &self.results, columns, parity_popcnt, layout)
    }
}

/// Writes solved words into a shard's interleaved solution (format 0x05):
/// block `q` (64 slots) holds one 8-byte word per column, `upper - 1`
/// columns below `upper_start_block`, `upper` from it, blocks one after
/// another.
struct Interleaved64<'a> {
    /// Exactly the shard's solution bytes.
    out: &'a mut [u8],
    /// Where the block after the one being written starts (`None`: the end).
    block_end: Option<usize>,
    upper_start_block: usize,
    upper: usize,
}

impl backsub::Solution for Interleaved64<'_> {
    fn emit(&mut self, q: usize, low: &[u64], _high: &[u64]) {
        let columns = self.upper - usize::from(q < self.upper_start_block);
        let end = self.block_end.unwrap_or(self.out.len());
        let start = end - columns * WORD_BYTES;
        for (j, &word) in low.iter().take(columns).enumerate() {
            let at = start + j * WORD_BYTES;
            self.out[at..at + WORD_BYTES].copy_from_slice(&word.to_le_bytes());
        }
        self.block_end = Some(start);
    }
}

/// Where a lane stands in its band: the row in progress (coefficient
/// words, start, result) and the index, in start order, of the key it came
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LaneRow {
    lo: u64,
    hi: u64,
    start: usize,
    result: u32,
    index: usize,
}

impl LaneRow {
    /// The row of prepared key `index` of `band`.
    pub(super) fn new(band: &Band, index: usize) -> LaneRow {
        LaneRow::from_row(band.row(index), index)
    }

    fn from_row(row: Row, index: usize) -> LaneRow {
        LaneRow {
            lo: row.coeff as u64,
            hi: (row.coeff >> 64) as u64,
            start: row.start,
            result: row.result,
            index,
        }
    }

    fn row(&self) -> Row {
        Row {
            start: self.start,
            coeff: ((self.hi as u128) << 64) | self.lo as u128,
            result: self.result,
        }
    }
}

/// One shard being banded by a `band_lanes_*` function: its band's slots,
/// its keys' seeded hashes in start order, the row in progress and the
/// next key's seeded hash.
struct Lane<'a> {
    /// The band's `coeffs` and `results` (`slots` each), as raw pointers:
    /// the row in progress is at `slot`, a pointer into `coeffs`, so that
    /// the dependent chain of steps needs no base register per lane.
    coeffs: *mut u128,
    results: *mut u32,
    slots: usize,
    /// `Band::sorted`, with the trailing zero hash.
    sorted: &'a [u64],
    num_starts: u64,
    /// The row in progress: coefficient words, `&coeffs[start]`, result.
    lo: u64,
    hi: u64,
    slot: *mut u128,
    result: u32,
    /// The next key's seeded hash, loaded when the current key started (so
    /// that its row is a few multiplications away when the current chain
    /// ends), and where the hash after it is: the current key's index plus
    /// 2, `sorted.len()` once the current key is the last one (`pending` is
    /// then the zero hash, never used).
    pending: u64,
    next: usize,
    /// Set when the lane has stopped: whether its system was solvable.
    solved: Option<bool>,
    band: std::marker::PhantomData<&'a mut [u128]>,
}

impl<'a> Lane<'a> {
    /// The lane of prepared `band` at `at` (a key of the band).
    fn new(band: &'a mut Band, at: LaneRow) -> Lane<'a> {
        let slots = band.coeffs.len();
        assert!(at.index < band.keys() && band.results.len() == slots && at.start < slots);
        let pending = band.sorted[at.index + 1];
        let coeffs = band.coeffs.as_mut_ptr();
        Lane {
            coeffs,
            results: band.results.as_mut_ptr(),
            slots,
            sorted: &band.sorted,
            num_starts: band.num_starts,
            lo: at.lo,
            hi: at.hi,
            // SAFETY: `at.start < slots` (asserted).
            slot: unsafe { coeffs.add(at.start) },
            result: at.result,
            pending,
            next: at.index + 2,
            solved: None,
            band: std::marker::PhantomData,
        }
    }

    fn state(&self) -> LaneRow {
        LaneRow {
            lo: self.lo,
            hi: self.hi,
            start: self.start(),
            result: self.result,
            index: self.next - 2,
        }
    }

    /// The start slot of the row in progress.
    #[inline(always)]
    fn start(&self) -> usize {
        // SAFETY: `slot` points into `coeffs`, at or after its start.
        unsafe { self.slot.offset_from(self.coeffs) as usize }
    }

    /// One elimination step (the scalar [`step_in`], on the lane's row):
    /// store the row if its start slot is empty and take the next key's
    /// row, else XOR the stored row in and shift to the next pivot. True
    /// when the lane needs [`attend`](Self::attend): its last row was
    /// stored (`solved` is set), or the low 64 coefficient bits XORed to
    /// zero (rare: a far pivot, a redundant row or no solution; nothing was
    /// written then).
    #[inline(always)]
    fn step(&mut self) -> bool {
        // Invariants while the lane runs: bit 0 of `lo` is set, `slot` is
        // `&coeffs[start]` with `start + 128 <= slots` (a row's pivot stays
        // in its 128-slot window, which `num_starts` keeps inside the band),
        // and `next <= sorted.len()`. Unchecked accesses measured 1.1x
        // faster builds than indexing with bounds checks.
        let slot = self.slot;
        let at = self.start();
        debug_assert!(at < self.slots && self.next <= self.sorted.len());
        // SAFETY: `slot` is `&coeffs[at]` with `at < slots` (above).
        let existing = unsafe { *slot };
        let e_lo = existing as u64;
        if e_lo == 0 {
            // The slot is empty (a stored row has bit 0 set).
            // SAFETY: `at < slots` (above).
            unsafe {
                *slot = ((self.hi as u128) << 64) | self.lo as u128;
                *self.results.add(at) = self.result;
            }
            if self.next == self.sorted.len() {
                self.solved = Some(true);
                return true;
            }
            let row = row_from_seeded(self.pending, self.num_starts);
            self.lo = row.coeff as u64;
            self.hi = (row.coeff >> 64) as u64;
            // SAFETY: a start is below `num_starts < slots`.
            self.slot = unsafe { self.coeffs.add(row.start) };
            self.result = row.result;
            // SAFETY: `next < sorted.len()` (checked above).
            self.pending = unsafe { *self.sorted.get_unchecked(self.next) };
            self.next += 1;
            return false;
        }
        let lo = self.lo ^ e_lo;
        if lo == 0 {
            return true;
        }
        let hi = self.hi ^ (existing >> 64) as u64;
        // SAFETY: `at < slots` (above).
        self.result ^= unsafe { *self.results.add(at) };
        // Below 64, so the 128-bit shift is two instructions (see `step_in`).
        let tz = lo.trailing_zeros() & 63;
        self.lo = (lo >> tz) | ((hi << 1) << (63 - tz));
        self.hi = hi >> tz;
        // SAFETY: the next pivot is still in the row's window (above).
        self.slot = unsafe { slot.add(tz as usize) };
        false
    }

    /// Handles what [`step`](Self::step) left (see [`attend`]). True when
    /// the lane has stopped (`solved` is set).
    #[inline(always)]
    fn attend(&mut self) -> bool {
        if self.solved.is_some() {
            return true;
        }
        let state = self.state();
        // SAFETY: the lane stands for its band's only borrow; these slices
        // are the band's `coeffs` and `results`, and are dropped before the
        // lane's pointers are used again.
        let (coeffs, results) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.coeffs, self.slots),
                std::slice::from_raw_parts_mut(self.results, self.slots),
            )
        };
        match attend(coeffs, results, self.sorted, self.num_starts, state) {
            Ok(at) => {
                self.lo = at.lo;
                self.hi = at.hi;
                // SAFETY: a row's pivot is below `slots`.
                self.slot = unsafe { self.coeffs.add(at.start) };
                self.result = at.result;
                if at.index != state.index {
                    self.pending = self.sorted[at.index + 1];
                    self.next = at.index + 2;
                }
                false
            }
            Err(solved) => {
                self.solved = Some(solved);
                true
            }
        }
    }
}

/// The rare step of [`Lane::step`], redone by the general code: the row
/// moves to its next pivot past the low 64 bits (`Ok`, same key), or it
/// is redundant (`Ok` with the next key's row, or `Err(true)` if it was the
/// last key), or the system has no solution (`Err(false)`). Out of line,
/// and taking the lane's row by value, so that the lanes' rows stay in
/// registers.
#[cold]
#[inline(never)]
fn attend(
    coeffs: &mut [u128],
    results: &mut [u32],
    sorted: &[u64],
    num_starts: u64,
    at: LaneRow,
) -> std::result::Result<LaneRow, bool> {
    let mut row = at.row();
    match step_in(coeffs, results, &mut row) {
        None => Ok(LaneRow::from_row(row, at.index)),
        Some(false) => Err(false),
        Some(true) if at.index + 1 < sorted.len() - 1 => {
            let index = at.index + 1;
            Ok(LaneRow::from_row(
                row_from_seeded(sorted[index], num_starts),
                index,
            ))
        }
        Some(true) => Err(true),
    }
}

/// Defines `$name`, which bands as many shards at once as it lists lanes
/// (see [`band_lanes_3`]). A macro rather than a const-generic function
/// over an array of lanes: the compiler keeps the lanes held in separate
/// local variables in registers, but left an array of them in memory, so
/// that every step went through the stack (measured 1.3x slower).
macro_rules! band_lanes {
    ($(#[$doc:meta])* $name:ident, $n:literal, $($lane:ident),+) => {
        $(#[$doc])*
        #[inline(never)]
        #[allow(unused_assignments)]
        fn $name(bands: [&mut Band; $n], rows: &mut [LaneRow; $n]) -> (usize, bool) {
            let [$($lane),+] = bands;
            let mut i = 0;
            $(
                let mut $lane = Lane::new($lane, rows[i]);
                i += 1;
            )+
            let stopped = 'steps: loop {
                let mut i = 0;
                $(
                    if $lane.step() && $lane.attend() {
                        break 'steps i;
                    }
                    i += 1;
                )+
            };
            let mut i = 0;
            let mut solved = false;
            $(
                rows[i] = $lane.state();
                if i == stopped {
                    solved = $lane.solved == Some(true);
                }
                i += 1;
            )+
            (stopped, solved)
        }
    };
}

band_lanes!(
    /// Bands two shards at once, one elimination step of each in turn (see
    /// [`band_lanes_3`]).
    band_lanes_2,
    2,
    a,
    b
);
band_lanes!(
    /// Bands three shards at once from where they stand (`rows[i]` is the
    /// row in progress in `bands[i]`, updated on return) until one of them
    /// stops; returns that one's position and whether its system was
    /// solvable.
    ///
    /// Each pass of the loop does one elimination step of each lane
    /// ([`Lane::step`]). A single chain of steps is latency-bound (each
    /// slot to visit depends on the previous XOR and trailing-zero count);
    /// unrelated chains overlap in the CPU.
    band_lanes_3,
    3,
    a,
    b,
    c
);
/// Bands the rows of `band` from `at` on, one at a time (the last lane
/// left); whether the system was solvable.
fn band_alone(band: &mut Band, at: LaneRow) -> bool {
    band.add(at.row())
        && (at.index + 1..band.keys()).all(|i| {
            let row = band.row(i);
            band.add(row)
        })
}

/// A shard in a lane of the build: which shard, which band, the seed being
/// tried and the row in progress.
pub(super) struct Job {
    pub(super) shard: usize,
    pub(super) band: usize,
    pub(super) seed: u32,
    pub(super) at: LaneRow,
}

/// Bands the shards of `jobs` (each in its own band, `jobs.len()` from 1
/// to [`LANES`]) until one stops; returns its position in `jobs` and
/// whether its system was solvable.
pub(super) fn run_jobs(bands: &mut [Band; LANES], jobs: &mut [Job]) -> (usize, bool) {
    type Lanes<const N: usize> = fn([&mut Band; N], &mut [LaneRow; N]) -> (usize, bool);
    fn lanes<const N: usize>(
        bands: &mut [Band; LANES],
        jobs: &mut [Job],
        band_lanes: Lanes<N>,
    ) -> (usize, bool) {
        let ids: [usize; N] = std::array::from_fn(|i| jobs[i].band);
        let bands = bands.get_disjoint_mut(ids).expect("one band per job");
        let mut rows: [LaneRow; N] = std::array::from_fn(|i| jobs[i].at);
        let stopped = band_lanes(bands, &mut rows);
        for (job, row) in jobs.iter_mut().zip(rows) {
            job.at = row;
        }
        stopped
    }
    match jobs.len() {
        1 => (0, band_alone(&mut bands[jobs[0].band], jobs[0].at)),
        2 => lanes(bands, jobs, band_lanes_2),
        3 => lanes(bands, jobs, band_lanes_3),
        n => unreachable!("{n} jobs"),
    }
}

/// Bands `row` into the band `coeffs`, `results` (see [`step_in`]).
#[inline]
fn add_in(coeffs: &mut [u128], results: &mut [u32], mut row: Row) -> bool {
    loop {
        if let Some(ok) = step_in(coeffs, results, &mut row) {
            return ok;
        }
    }
}

/// One elimination step of `row` in the band `coeffs`, `results`:
/// `Some(true)` when it was stored or was redundant, `Some(false)` when the
/// system has no solution, `None` when it moved on to its next pivot.
#[inline(always)]
fn step_in(coeffs: &mut [u128], results: &mut [u32], row: &mut Row) -> Option<bool> {
    // Invariants: bit 0 of `coeff` is set and `start + 128 <= slots`, so
    // every index below is in bounds; a stored row at `start` also has
    // bit 0 set, hence the XOR clears it and the pivot moves right.
    let existing = coeffs[row.start];
    if existing == 0 {
        coeffs[row.start] = row.coeff;
        results[row.start] = row.result;
        return Some(true);
    }
    row.coeff ^= existing;
    row.result ^= results[row.start];
    let low = row.coeff as u64;
    if low != 0 {
        // The usual case: the next pivot is within 64 slots. With the
        // shift known to be below 64 the 128-bit shift is two
        // instructions, without the general shift's test and moves on
        // this dependent chain.
        let tz = low.trailing_zeros() & 63;
        row.start += tz as usize;
        row.coeff >>= tz;
        return None;
    }
    if row.coeff == 0 {
        // Redundant (e.g. a duplicate key) if the results agree.
        return Some(row.result == 0);
    }
    let tz = row.coeff.trailing_zeros();
    row.start += tz as usize;
    row.coeff >>= tz;
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn band_rejects_inconsistent_duplicate_rows() {
        let mut band = Band::default();
        assert!(band.add_all(&[], 1024, 0));
        let row = |result| Row {
            start: 5,
            coeff: 0b1011,
            result,
        };
        assert!(band.add(row(3)));
        assert!(band.add(row(3)), "same row and result is redundant");
        assert!(!band.add(row(2)), "same row, other result has no solution");
    }

    fn test_hashes(n: u64, tag: u64) -> Vec<u64> {
        (0..n)
            .map(|i| crate::filter::key_hash(&[tag.to_le_bytes(), i.to_le_bytes()].concat()))
            .collect()
    }

    /// A shard for the lane tests: keys, slots, seed.
    type Shard = (Vec<u64>, usize, u8);

    /// Bands `shards` the way the build does, up to [`LANES`] at a time
    /// through [`run_jobs`], a finished lane taking the next shard, and
    /// checks each outcome and band against banding the shard alone, one
    /// row at a time.
    fn check_lanes_match_one_at_a_time(shards: &[Shard]) -> Vec<bool> {
        let mut bands: [Band; LANES] = Default::default();
        let mut jobs: Vec<Job> = Vec::new();
        let mut outcomes = vec![None; shards.len()];
        let mut next = 0;
        let mut check = |band: &Band, shard: usize, solved: bool| {
            let (keys, slots, seed) = &shards[shard];
            let mut alone = Band::default();
            assert_eq!(alone.add_all(keys, *slots, *seed), solved, "shard {shard}");
            assert!(alone.coeffs == band.coeffs, "shard {shard}: coefficients");
            assert!(alone.results == band.results, "shard {shard}: results");
            outcomes[shard] = Some(solved);
        };
        loop {
            while jobs.len() < LANES && next < shards.len() {
                let band = (0..LANES)
                    .find(|&b| jobs.iter().all(|job| job.band != b))
                    .unwrap();
                let (keys, slots, seed) = &shards[next];
                bands[band].prepare(keys, *slots, *seed);
                if bands[band].keys() == 0 {
                    check(&bands[band], next, true);
                } else {
                    jobs.push(Job {
                        shard: next,
                        band,
                        seed: *seed as u32,
                        at: LaneRow::new(&bands[band], 0),
                    });
                }
                next += 1;
            }
            if jobs.is_empty() {
                break;
            }
            let (stopped, solved) = run_jobs(&mut bands, &mut jobs);
            let job = jobs.swap_remove(stopped);
            check(&bands[job.band], job.shard, solved);
        }
        outcomes.into_iter().map(Option::unwrap).collect()
    }

    #[test]
    fn lanes_band_like_one_shard_at_a_time() {
        // Lanes of very different lengths finish at different times (one
        // key, a few, thousands); every lane count from LANES down to one
        // runs.
        let sizes = [1u64, 3_000, 2, 700, 5_000, 40, 1, 2_500, 0, 4_000];
        let shards: Vec<Shard> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let slots = (((n as f64 * 1.03) as usize).div_ceil(W) * W).max(W);
                (test_hashes(n, i as u64), slots, i as u8)
            })
            .collect();
        let solved = check_lanes_match_one_at_a_time(&shards);
        assert!(solved.iter().all(|&s| s), "{solved:?}");
    }

    #[test]
    fn lanes_fail_and_find_redundant_rows_like_one_shard_at_a_time() {
        let unique = test_hashes(3_000, 77);
        let mut with_duplicates = unique.clone();
        with_duplicates.extend_from_slice(&unique[..1_500]);
        with_duplicates.extend_from_slice(&unique[2_000..]);
        let mut shards: Vec<Shard> = Vec::new();
        for seed in 0..4u8 {
            // Duplicates only: redundant rows inside a lane, solvable.
            shards.push((with_duplicates.clone(), 3_200, seed));
            // Too few slots: the lane fails part-way, while others run on.
            shards.push((test_hashes(2_000, 5 + seed as u64), 1_920, seed));
            // Tight: some seeds fail near the end of the band.
            shards.push((test_hashes(3_000, 9), 3_072, seed));
        }
        let solved = check_lanes_match_one_at_a_time(&shards);
        for (i, s) in solved.iter().enumerate() {
            match i % 3 {
                0 => assert!(s, "duplicates, shard {i}"),
                1 => assert!(!s, "too few slots, shard {i}"),
                _ => {}
            }
        }
    }

    #[test]
    fn lanes_on_the_smallest_bands() {
        // 128 slots: one start (0) for every key, so chains run through the
        // whole band to its last slot; 192: starts 0..65. One key, a few,
        // about as many keys as slots (solvable or not) and more than
        // slots (never), with and without duplicates; lanes stop at very
        // different times.
        let mut shards: Vec<Shard> = Vec::new();
        for i in 0..24u64 {
            let n = [1u64, 2, 60, 110, 128, 140][i as usize % 6];
            let mut keys = test_hashes(n, 1_000 + i);
            if i % 4 == 3 {
                keys.extend(keys.clone());
            }
            let slots = if i % 12 < 6 { 128 } else { 192 };
            shards.push((keys, slots, i as u8));
        }
        let solved = check_lanes_match_one_at_a_time(&shards);
        assert!(solved[0] && solved[1], "{solved:?}");
        assert!(!solved[5], "{solved:?}");
    }

    #[test]
    fn attend_moves_a_row_past_the_low_64_bits() {
        // A stored row and a new one at the same slot with the same low 64
        // coefficient bits: the XOR leaves only high bits, a pivot 64 or
        // more slots on, which `Lane::step` leaves to `attend`.
        let mut band = Band::default();
        band.prepare(&[1, 2], 1024, 0);
        let stored = Row {
            start: 10,
            coeff: (0b1010 << 64) | 0xff,
            result: 6,
        };
        assert!(band.add(stored));
        let row = Row {
            start: 10,
            coeff: (0b0110 << 64) | 0xff,
            result: 5,
        };
        let sorted = band.sorted.clone();
        let num_starts = band.num_starts;
        let mut attend_row = |row: LaneRow| {
            attend(
                &mut band.coeffs,
                &mut band.results,
                &sorted,
                num_starts,
                row,
            )
        };
        let moved = attend_row(LaneRow::from_row(row, 0)).expect("moved on");
        assert_eq!(moved.index, 0, "same key");
        assert_eq!(moved.start, 10 + 64 + 2);
        assert_eq!((moved.lo, moved.hi, moved.result), (0b11, 0, 3));
        // The same row again is redundant: on to the next key's row.
        let next = attend_row(LaneRow::from_row(stored, 0)).expect("next key");
        assert_eq!(next.index, 1);
        // Redundant on the last key: done; inconsistent: no solution.
        assert_eq!(attend_row(LaneRow::from_row(stored, 1)), Err(true));
        let inconsistent = Row {
            result: 7,
            ..stored
        };
        assert_eq!(attend_row(LaneRow::from_row(inconsistent, 0)), Err(false));
        assert_eq!(next.row().coeff, band.row(1).coeff);
    }
}
