//! Count-min sketch: per-item frequency upper bounds in fixed memory.
//!
//! # Structure
//!
//! `depth` rows of `width` saturating `u64` counters. An item with key hash
//! `h` (from [`key_hash`]) touches one counter per
//! row, chosen by Kirsch–Mitzenmacher double hashing on the one 64-bit hash:
//!
//! ```text
//! h1 = h ^ seed
//! h2 = mix64(h ^ rotl(seed, 32)) | 1        (murmur3 finalizer, odd)
//! column(row i) = ((h1 + i * h2) * width) >> 64   (fastrange, no modulo)
//! ```
//!
//! `add` raises the item's counters by `count`; `estimate` is the minimum of
//! them. Every counter an item touches is at least its true count, so the
//! estimate never falls below it (Cormode & Muthukrishnan 2005). With
//! `width = ceil(e / epsilon)` and `depth = ceil(ln(1 / delta))` the estimate
//! exceeds the true count by more than `epsilon * N` (`N` = total count added)
//! with probability at most `delta`.
//!
//! # Conservative update
//!
//! In [`UpdateMode::Conservative`] (Estan & Varghese 2002) `add` raises each
//! counter only as far as `min + count`, where `min` is the item's current
//! estimate: the estimate stays an upper bound, and overcounts are much
//! smaller on skewed streams. Such counters are no longer sums of per-item
//! contributions, so two conservative sketches cannot be combined into the
//! sketch of the concatenated stream: [`CountMinSketch::merge`] still adds
//! them (the sum remains an upper bound for every item), but the result is
//! looser than a sketch fed the whole stream.
//!
//! # Aging
//!
//! With an aging period `N` (off by default), every `N`-th call to `add`
//! halves every counter (right shift), as TinyLFU does, so estimates follow
//! recent traffic. The never-underestimate guarantee then holds against the
//! *aged* true counts: each true count halved (rounded down) at the same
//! moments; `floor(c / 2) >= floor(f / 2)` whenever `c >= f`.
//!
//! # Serialized form (version 1)
//!
//! ```text
//! offset size
//!  0      4   magic "CMS1"
//!  4      1   version = 1
//!  5      1   flags: bit 0 = conservative; other bits zero
//!  6      2   zero
//!  8      4   width  u32 LE  (>= 1)
//! 12      4   depth  u32 LE  (1..=32)
//! 16      8   seed   u64 LE
//! 24      8   aging period u64 LE (0 = off)
//! 32      8   additions since the last halving u64 LE (< period when on)
//! 40      8   total count u64 LE
//! 48  8*w*d   counters, row-major, u64 LE (each <= total)
//! end     4   CRC-32 (IEEE) of every byte before it
//! ```
//!
//! [`CountMinSketch::from_bytes`] checks the length against the shape before
//! allocating, the checksum and every field; bad bytes give
//! [`Error::Corruption`].

use std::fmt;

use crate::error::{Error, Result};
use crate::filter::{fastrange64, key_hash};

/// Most rows a sketch may have (`delta` down to `e^-32`).
pub const MAX_DEPTH: u32 = 32;
/// Most counters a sketch may have (2^28 counters, 2 GiB).
pub const MAX_COUNTERS: u64 = 1 << 28;

const MAGIC: [u8; 4] = *b"CMS1";
const VERSION: u8 = 1;
const FLAG_CONSERVATIVE: u8 = 1;
const HEADER_LEN: usize = 48;
const CRC_LEN: usize = 4;
const BYTES_NAME: &str = "<CountMinSketch bytes>";

/// How [`CountMinSketch::add`] raises an item's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpdateMode {
    /// Add `count` to every counter of the item (mergeable by addition).
    #[default]
    Plain,
    /// Raise each counter only to `estimate + count` (tighter; merges only
    /// as an upper bound, see the [module documentation](self)).
    Conservative,
}

/// A count-min sketch: fixed-size frequency estimates that never fall below
/// the true count (see the [module documentation](self)).
#[derive(Clone, PartialEq, Eq)]
pub struct CountMinSketch {
    width: u32,
    depth: u32,
    seed: u64,
    mode: UpdateMode,
    aging_period: u64,
    additions_since_aging: u64,
    total: u64,
    counters: Vec<u64>,
}

impl fmt::Debug for CountMinSketch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountMinSketch")
            .field("width", &self.width)
            .field("depth", &self.depth)
            .field("seed", &self.seed)
            .field("mode", &self.mode)
            .field("aging_period", &self.aging_period)
            .field("total", &self.total)
            .finish()
    }
}

/// Row positions of one item.
#[derive(Clone, Copy)]
struct Probe {
    h1: u64,
    h2: u64,
}

impl CountMinSketch {
    /// A sketch of `depth` rows of `width` counters, plain updates, seed 0,
    /// no aging.
    ///
    /// [`Error::InvalidArgument`] when either size is zero, `depth` exceeds
    /// [`MAX_DEPTH`], or `width * depth` exceeds [`MAX_COUNTERS`].
    pub fn new(width: u32, depth: u32) -> Result<Self> {
        if width == 0 || depth == 0 {
            return Err(Error::invalid(format!(
                "count-min sketch of width {width} and depth {depth}: sizes must be positive"
            )));
        }
        if depth > MAX_DEPTH {
            return Err(Error::invalid(format!(
                "count-min depth {depth} exceeds {MAX_DEPTH}"
            )));
        }
        let cells = width as u64 * depth as u64;
        if cells > MAX_COUNTERS {
            return Err(Error::invalid(format!(
                "count-min sketch of {cells} counters exceeds {MAX_COUNTERS}"
            )));
        }
        Ok(CountMinSketch {
            width,
            depth,
            seed: 0,
            mode: UpdateMode::Plain,
            aging_period: 0,
            additions_since_aging: 0,
            total: 0,
            counters: vec![0; cells as usize],
        })
    }

    /// A sketch whose estimates exceed the true count by more than
    /// `epsilon * N` with probability at most `delta`: `width = ceil(e /
    /// epsilon)`, `depth = ceil(ln(1 / delta))`.
    ///
    /// [`Error::InvalidArgument`] unless both lie in `(0, 1)` and the sizes
    /// are within the limits of [`new`](Self::new).
    pub fn with_error(epsilon: f64, delta: f64) -> Result<Self> {
        let (width, depth) = dimensions_for_error(epsilon, delta)?;
        Self::new(width, depth)
    }

    /// Uses `seed` for the row hashes (sketches merge only with equal seeds).
    ///
    /// [`Error::InvalidArgument`] if the sketch already holds counts: under
    /// another seed every item reads other counters, so its estimates could
    /// fall below its true count (found by review). Choose the seed first.
    pub fn with_seed(mut self, seed: u64) -> Result<Self> {
        if self.total != 0 || self.counters.iter().any(|&c| c != 0) {
            return Err(Error::invalid(
                "with_seed on a count-min sketch that holds counts: its estimates \
                 would read other counters (set the seed before adding)",
            ));
        }
        self.seed = seed;
        Ok(self)
    }

    /// Sets the update mode.
    pub fn with_mode(mut self, mode: UpdateMode) -> Self {
        self.mode = mode;
        self
    }

    /// Halves every counter after each `period` calls to
    /// [`add`](Self::add) / [`add_hash`](Self::add_hash); `None` turns aging
    /// off (the default). [`Error::InvalidArgument`] for `Some(0)`.
    pub fn with_aging(mut self, period: Option<u64>) -> Result<Self> {
        self.aging_period = match period {
            Some(0) => return Err(Error::invalid("aging period must be positive")),
            Some(n) => n,
            None => 0,
        };
        self.additions_since_aging = 0;
        Ok(self)
    }

    /// Counters per row.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Number of rows.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The row-hash seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The update mode.
    pub fn mode(&self) -> UpdateMode {
        self.mode
    }

    /// The aging period, if aging is on.
    pub fn aging_period(&self) -> Option<u64> {
        (self.aging_period > 0).then_some(self.aging_period)
    }

    /// Sum of all counts added (halved along with the counters when aging),
    /// the `N` of the `epsilon * N` error bound. Saturates at `u64::MAX`.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes of counters held in memory.
    pub fn len_bytes(&self) -> usize {
        self.counters.len() * 8
    }

    /// Sets every counter, the total and the aging clock to zero.
    pub fn clear(&mut self) {
        self.counters.fill(0);
        self.total = 0;
        self.additions_since_aging = 0;
    }

    #[inline]
    fn probe(&self, hash: u64) -> Probe {
        let h1 = hash ^ self.seed;
        let h2 = mix64(hash ^ self.seed.rotate_left(32)) | 1;
        Probe { h1, h2 }
    }

    #[inline]
    fn cell(&self, probe: Probe, row: u32) -> usize {
        let column = fastrange64(
            probe.h1.wrapping_add((row as u64).wrapping_mul(probe.h2)),
            self.width as u64,
        );
        row as usize * self.width as usize + column as usize
    }

    /// Adds `count` occurrences of `item` (hashed with [`key_hash`]).
    pub fn add(&mut self, item: &[u8], count: u64) {
        self.add_hash(key_hash(item), count);
    }

    /// Adds `count` occurrences of the item whose [`key_hash`] is `hash`.
    pub fn add_hash(&mut self, hash: u64, count: u64) {
        self.add_hash_and_estimate(hash, count);
    }

    /// Adds, ages if due, and returns the item's estimate afterwards (one
    /// pass over the rows instead of two for a separate query).
    #[inline]
    pub(crate) fn add_hash_and_estimate(&mut self, hash: u64, count: u64) -> AddOutcome {
        let probe = self.probe(hash);
        let mut estimate = u64::MAX;
        match self.mode {
            UpdateMode::Plain => {
                for row in 0..self.depth {
                    let cell = self.cell(probe, row);
                    let counter = &mut self.counters[cell];
                    *counter = counter.saturating_add(count);
                    estimate = estimate.min(*counter);
                }
            }
            UpdateMode::Conservative => {
                let mut cells = [0usize; MAX_DEPTH as usize];
                let cells = &mut cells[..self.depth as usize];
                let mut current = u64::MAX;
                for (row, cell) in cells.iter_mut().enumerate() {
                    *cell = self.cell(probe, row as u32);
                    current = current.min(self.counters[*cell]);
                }
                estimate = current.saturating_add(count);
                for &cell in cells.iter() {
                    let counter = &mut self.counters[cell];
                    // Only the rows at the minimum usually need raising;
                    // skipping the other stores keeps their lines clean.
                    if *counter < estimate {
                        *counter = estimate;
                    }
                }
            }
        }
        self.total = self.total.saturating_add(count);
        let mut aged = false;
        if self.aging_period > 0 {
            self.additions_since_aging += 1;
            if self.additions_since_aging >= self.aging_period {
                self.halve();
                estimate /= 2;
                aged = true;
            }
        }
        AddOutcome { estimate, aged }
    }

    /// Halves every counter and the total now (what aging does every period).
    pub fn halve(&mut self) {
        for counter in &mut self.counters {
            *counter >>= 1;
        }
        self.total >>= 1;
        self.additions_since_aging = 0;
    }

    /// The estimated count of `item`: never below its true (aged) count.
    pub fn estimate(&self, item: &[u8]) -> u64 {
        self.estimate_hash(key_hash(item))
    }

    /// The estimated count of the item whose [`key_hash`] is `hash`.
    #[inline]
    pub fn estimate_hash(&self, hash: u64) -> u64 {
        let probe = self.probe(hash);
        let mut estimate = u64::MAX;
        for row in 0..self.depth {
            estimate = estimate.min(self.counters[self.cell(probe, row)]);
        }
        estimate
    }

    /// Adds `other`'s counters to `self`'s (saturating).
    ///
    /// For plain sketches the result equals the sketch of the concatenated
    /// streams. For conservative sketches it is only an upper bound (each
    /// item's estimate is still at least its true count in the combined
    /// stream, but looser than a conservative sketch of that stream).
    /// [`Error::InvalidArgument`] unless both have the same width, depth,
    /// seed and update mode. Merging never triggers aging; the aging clock
    /// of `self` is kept.
    pub fn merge(&mut self, other: &CountMinSketch) -> Result<()> {
        if self.width != other.width
            || self.depth != other.depth
            || self.seed != other.seed
            || self.mode != other.mode
        {
            return Err(Error::invalid(format!(
                "cannot merge count-min sketches of different shapes: \
                 {}x{} seed {} {:?} vs {}x{} seed {} {:?}",
                self.width,
                self.depth,
                self.seed,
                self.mode,
                other.width,
                other.depth,
                other.seed,
                other.mode
            )));
        }
        for (mine, theirs) in self.counters.iter_mut().zip(&other.counters) {
            *mine = mine.saturating_add(*theirs);
        }
        self.total = self.total.saturating_add(other.total);
        Ok(())
    }

    /// Serializes the sketch (format in the [module documentation](self)).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.len_bytes() + CRC_LEN);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(match self.mode {
            UpdateMode::Plain => 0,
            UpdateMode::Conservative => FLAG_CONSERVATIVE,
        });
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.width.to_le_bytes());
        out.extend_from_slice(&self.depth.to_le_bytes());
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.extend_from_slice(&self.aging_period.to_le_bytes());
        out.extend_from_slice(&self.additions_since_aging.to_le_bytes());
        out.extend_from_slice(&self.total.to_le_bytes());
        for counter in &self.counters {
            out.extend_from_slice(&counter.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a sketch written by [`to_bytes`](Self::to_bytes), checking every
    /// field; damaged bytes give [`Error::Corruption`], never a panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<CountMinSketch> {
        let bad = |offset: usize, reason: String| {
            Error::corruption(BYTES_NAME, Some(offset as u64), reason)
        };
        if bytes.len() < HEADER_LEN + CRC_LEN {
            return Err(bad(
                0,
                format!("{} bytes is shorter than a header", bytes.len()),
            ));
        }
        let (body, crc_bytes) = bytes.split_at(bytes.len() - CRC_LEN);
        if crc32fast::hash(body) != u32::from_le_bytes(array(crc_bytes)) {
            return Err(bad(body.len(), "checksum mismatch".to_string()));
        }
        if body[0..4] != MAGIC {
            return Err(bad(0, "bad magic".to_string()));
        }
        if body[4] != VERSION {
            return Err(bad(4, format!("unknown version {}", body[4])));
        }
        let mode = match body[5] {
            0 => UpdateMode::Plain,
            FLAG_CONSERVATIVE => UpdateMode::Conservative,
            flags => return Err(bad(5, format!("unknown flags {flags:#x}"))),
        };
        if body[6..8] != [0, 0] {
            return Err(bad(6, "reserved bytes are not zero".to_string()));
        }
        let width = u32::from_le_bytes(array(&body[8..12]));
        let depth = u32::from_le_bytes(array(&body[12..16]));
        let seed = u64::from_le_bytes(array(&body[16..24]));
        let aging_period = u64::from_le_bytes(array(&body[24..32]));
        let additions_since_aging = u64::from_le_bytes(array(&body[32..40]));
        let total = u64::from_le_bytes(array(&body[40..48]));
        // Check the length against the shape before allocating anything, so
        // a damaged header cannot ask for gigabytes.
        // In 128 bits: two `u32`s times 8 can pass `u64::MAX`.
        let expected = width as u128 * depth as u128 * 8;
        if (body.len() - HEADER_LEN) as u128 != expected {
            return Err(bad(
                HEADER_LEN,
                format!(
                    "{} counter bytes for a {width}x{depth} sketch ({expected} expected)",
                    body.len() - HEADER_LEN
                ),
            ));
        }
        let mut sketch =
            CountMinSketch::new(width, depth).map_err(|e| bad(8, format!("bad shape: {e}")))?;
        if aging_period > 0 && additions_since_aging >= aging_period {
            return Err(bad(
                32,
                format!("aging clock {additions_since_aging} not below period {aging_period}"),
            ));
        }
        if aging_period == 0 && additions_since_aging != 0 {
            return Err(bad(32, "aging clock set while aging is off".to_string()));
        }
        for (i, (counter, chunk)) in sketch
            .counters
            .iter_mut()
            .zip(body[HEADER_LEN..].chunks_exact(8))
            .enumerate()
        {
            *counter = u64::from_le_bytes(array(chunk));
            // Adds, halvings and merges move a counter and the total
            // together (saturating alike), so no counter exceeds the
            // total; one that does makes the `epsilon * total` bound
            // meaningless (found by review).
            if *counter > total {
                return Err(bad(
                    HEADER_LEN + 8 * i,
                    format!("counter {i} is {counter}, above the total {total}"),
                ));
            }
        }
        sketch.seed = seed;
        sketch.mode = mode;
        sketch.aging_period = aging_period;
        sketch.additions_since_aging = additions_since_aging;
        sketch.total = total;
        Ok(sketch)
    }
}

/// What one addition left behind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddOutcome {
    /// The item's estimate after the addition (and the halving, if any).
    pub estimate: u64,
    /// True when this addition triggered a halving of every counter.
    pub aged: bool,
}

/// `(width, depth)` for an `(epsilon, delta)` guarantee.
pub(crate) fn dimensions_for_error(epsilon: f64, delta: f64) -> Result<(u32, u32)> {
    let in_unit = |x: f64| x > 0.0 && x < 1.0;
    if !in_unit(epsilon) || !in_unit(delta) {
        return Err(Error::invalid(format!(
            "count-min epsilon {epsilon} and delta {delta} must both lie in (0, 1)"
        )));
    }
    let width = (std::f64::consts::E / epsilon).ceil();
    let depth = (1.0 / delta).ln().ceil().max(1.0);
    if width > MAX_COUNTERS as f64 || depth > MAX_DEPTH as f64 {
        return Err(Error::invalid(format!(
            "count-min epsilon {epsilon}, delta {delta} need {width}x{depth} counters: too many"
        )));
    }
    Ok((width as u32, depth as u32))
}

/// Murmur3's 64-bit finalizer: a bijection that spreads every input bit.
#[inline]
fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    for (o, b) in out.iter_mut().zip(bytes) {
        *o = *b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_follow_the_formulas() {
        assert_eq!(dimensions_for_error(0.01, 0.01).unwrap(), (272, 5));
        assert_eq!(dimensions_for_error(0.001, 0.05).unwrap(), (2719, 3));
        assert!(dimensions_for_error(0.0, 0.1).is_err());
        assert!(dimensions_for_error(0.1, 1.0).is_err());
        assert!(dimensions_for_error(f64::NAN, 0.1).is_err());
        assert!(dimensions_for_error(1e-12, 0.1).is_err());
    }

    #[test]
    fn rows_use_different_columns() {
        let sketch = CountMinSketch::new(1000, 8).unwrap();
        let probe = sketch.probe(key_hash(b"some key"));
        let columns: Vec<usize> = (0..8)
            .map(|r| sketch.cell(probe, r) - r as usize * 1000)
            .collect();
        let mut distinct = columns.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() >= 6, "{columns:?}");
    }
}
