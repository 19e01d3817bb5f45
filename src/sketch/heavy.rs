//! Heavy hitters: the most frequent items of a stream, from a count-min
//! sketch plus a small candidate list.
//!
//! Every observation goes into a conservative-update [`CountMinSketch`],
//! which returns the item's new estimate in the same pass over its rows. The
//! candidate list holds at most `2k` items with the estimate each had when
//! last observed; a stored count never exceeds the item's current estimate
//! (conservative counters only grow, and aging halves both alike). Hence,
//! once the list is full, an item whose new estimate does not exceed the
//! smallest stored count cannot be in the list and cannot displace anyone:
//! the common path (a cold item) is one sketch update and one comparison,
//! with no hashing of the key bytes, no map lookup and no allocation.
//!
//! Otherwise the item is looked up by its 64-bit key hash (an identity-hashed
//! map, the hash is already uniform), its count raised, or it replaces the
//! candidate with the smallest count (a linear scan of the `2k` entries,
//! only when a new item enters the list or the minimum itself moves).
//!
//! [`HeavyHitters::top`] re-reads every candidate's current estimate, sorts,
//! and returns the `k` largest. Two distinct keys with the same 64-bit hash
//! share their sketch counters anyway; of such a pair only the first to enter
//! the list is tracked.
//!
//! # Why `2k` candidates find the top `k`
//!
//! Without aging: suppose the `k`-th and `(k+1)`-th true counts differ by
//! more than the overcount `err` of every item's estimate, and a true
//! top-`k` item `x` is missing from the list at the end. Either `x` was
//! turned away at its last observation (the list was full and every stored
//! count was at least `estimate(x) >= f(x)`), or it was evicted later as the
//! minimum (every stored count was at least its stored `estimate(x) >=
//! f(x)`). Stored counts only grow and an eviction replaces the minimum with
//! a larger count, so the smallest stored count never decreases: at the end
//! `2k` items have stored counts, hence estimates, `>= f(x)`, and true counts
//! `>= f(x) - err > f(k+1)`. All `2k` would be in the true top `k`, a
//! contradiction. With every true top-`k` item in
//! the list, `top` ranks by estimates and returns exactly the true top `k`.
//!
//! This structure lives in memory only; it has no on-disk format.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::cms::{CountMinSketch, UpdateMode};
use crate::error::{Error, Result};
use crate::filter::key_hash;

/// Most items [`HeavyHitters`] may be asked to report.
pub const MAX_K: usize = 1 << 16;

/// The `k` most frequent items of a stream, approximately (see the
/// [module documentation](self)).
#[derive(Debug, Clone)]
pub struct HeavyHitters {
    k: usize,
    capacity: usize,
    sketch: CountMinSketch,
    candidates: Vec<Candidate>,
    by_hash: HashMap<u64, usize, BuildHasherDefault<KeyHashHasher>>,
    /// Smallest stored count; meaningful only while the list is full.
    min_count: u64,
    observed: u64,
}

#[derive(Debug, Clone)]
struct Candidate {
    hash: u64,
    key: Box<[u8]>,
    count: u64,
}

impl HeavyHitters {
    /// Tracks the `k` most frequent items, counting with a conservative
    /// count-min sketch of error `epsilon` (relative to the number of
    /// observations) with probability `1 - delta`
    /// ([`CountMinSketch::with_error`]). Keeps up to `2k` candidates.
    ///
    /// [`Error::InvalidArgument`] when `k` is 0 or above [`MAX_K`], or for an
    /// `epsilon`/`delta` that [`CountMinSketch::with_error`] rejects.
    pub fn new(k: usize, epsilon: f64, delta: f64) -> Result<Self> {
        if k == 0 || k > MAX_K {
            return Err(Error::invalid(format!(
                "heavy-hitter k = {k} is outside 1..={MAX_K}"
            )));
        }
        let sketch =
            CountMinSketch::with_error(epsilon, delta)?.with_mode(UpdateMode::Conservative);
        let capacity = 2 * k;
        Ok(HeavyHitters {
            k,
            capacity,
            sketch,
            candidates: Vec::with_capacity(capacity),
            by_hash: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            min_count: 0,
            observed: 0,
        })
    }

    /// Halves every count after each `period` observations so the list
    /// follows recent traffic (TinyLFU-style aging); `None` (the default)
    /// keeps all-time counts. [`Error::InvalidArgument`] for `Some(0)`.
    pub fn with_aging(mut self, period: Option<u64>) -> Result<Self> {
        self.sketch = self.sketch.with_aging(period)?;
        Ok(self)
    }

    /// How many items [`top`](Self::top) reports at most.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Observations since creation or the last [`clear`](Self::clear) (not
    /// affected by aging).
    pub fn total(&self) -> u64 {
        self.observed
    }

    /// Bytes held by the sketch counters (the candidate list adds about
    /// `2k` keys).
    pub fn len_bytes(&self) -> usize {
        self.sketch.len_bytes()
    }

    /// Forgets every observation.
    pub fn clear(&mut self) {
        self.sketch.clear();
        self.candidates.clear();
        self.by_hash.clear();
        self.min_count = 0;
        self.observed = 0;
    }

    /// Records one occurrence of `item` (hashed with [`key_hash`]).
    pub fn observe(&mut self, item: &[u8]) {
        self.observe_hash(item, key_hash(item));
    }

    /// Records one occurrence of `item`, whose [`key_hash`] the caller has
    /// already computed (the engine's point reads do).
    ///
    /// `hash` must be `key_hash(item)`; a different hash counts a different
    /// item under `item`'s name.
    #[inline]
    pub fn observe_hash(&mut self, item: &[u8], hash: u64) {
        self.observe_hash_n(item, hash, 1);
    }

    /// Records `n` occurrences of `item` at once (`key_hash(item)` =
    /// `hash`), as `n` calls of [`observe_hash`](Self::observe_hash) would,
    /// except that with aging they advance its clock by one call. The
    /// engine uses it to hand on samples it had to drop: see
    /// [`Db::hot_keys`](crate::Db::hot_keys). `n = 0` records nothing.
    #[inline]
    pub fn observe_hash_n(&mut self, item: &[u8], hash: u64, n: u64) {
        if n == 0 {
            return;
        }
        self.observed = self.observed.saturating_add(n);
        let outcome = self.sketch.add_hash_and_estimate(hash, n);
        if outcome.aged {
            for candidate in &mut self.candidates {
                candidate.count /= 2;
            }
            self.min_count /= 2;
        }
        if self.candidates.len() == self.capacity && outcome.estimate <= self.min_count {
            return;
        }
        self.offer(item, hash, outcome.estimate);
    }

    /// The slow path: the item is, or may become, a candidate.
    fn offer(&mut self, item: &[u8], hash: u64, estimate: u64) {
        let full = self.candidates.len() == self.capacity;
        if let Some(&slot) = self.by_hash.get(&hash) {
            let Some(candidate) = self.candidates.get_mut(slot) else {
                return;
            };
            if *candidate.key != *item {
                return; // a 64-bit hash collision: see the module docs
            }
            let previous = candidate.count;
            candidate.count = previous.max(estimate);
            if full && previous == self.min_count {
                self.recompute_min();
            }
            return;
        }
        let entrant = Candidate {
            hash,
            key: item.into(),
            count: estimate,
        };
        if !full {
            self.by_hash.insert(hash, self.candidates.len());
            self.candidates.push(entrant);
            if self.candidates.len() == self.capacity {
                self.recompute_min();
            }
            return;
        }
        let Some(victim) = self.min_slot() else {
            return;
        };
        self.by_hash.remove(&self.candidates[victim].hash);
        self.by_hash.insert(hash, victim);
        self.candidates[victim] = entrant;
        self.recompute_min();
    }

    fn min_slot(&self) -> Option<usize> {
        self.candidates
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.count)
            .map(|(slot, _)| slot)
    }

    fn recompute_min(&mut self) {
        self.min_count = self.candidates.iter().map(|c| c.count).min().unwrap_or(0);
    }

    /// Up to `k` items with their estimated counts, largest first (ties by
    /// key). Counts are the sketch's current estimates: never below the true
    /// (aged) count.
    pub fn top(&self) -> Vec<(Vec<u8>, u64)> {
        let mut ranked: Vec<(Vec<u8>, u64)> = self
            .candidates
            .iter()
            .map(|c| (c.key.to_vec(), self.sketch.estimate_hash(c.hash)))
            .collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(self.k);
        ranked
    }

    /// The estimated count of `item` from the sketch (tracked or not).
    pub fn estimate(&self, item: &[u8]) -> u64 {
        self.sketch.estimate_hash(key_hash(item))
    }
}

/// A hasher for keys that already are uniform 64-bit hashes.
#[derive(Default, Clone, Copy)]
struct KeyHashHasher(u64);

impl Hasher for KeyHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; fold anything else in anyway.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_k() {
        assert!(HeavyHitters::new(0, 0.01, 0.01).is_err());
        assert!(HeavyHitters::new(MAX_K + 1, 0.01, 0.01).is_err());
        assert!(HeavyHitters::new(3, 0.0, 0.01).is_err());
    }

    #[test]
    fn min_count_tracks_the_list() {
        let mut hh = HeavyHitters::new(2, 0.01, 0.01).unwrap();
        for (key, times) in [(b"a", 5), (b"b", 3), (b"c", 2), (b"d", 1)] {
            for _ in 0..times {
                hh.observe(key);
            }
        }
        assert_eq!(hh.candidates.len(), 4);
        assert_eq!(
            hh.min_count,
            hh.candidates.iter().map(|c| c.count).min().unwrap()
        );
        for _ in 0..4 {
            hh.observe(b"e");
        }
        // "e" (4) displaced "d" (1).
        let keys: Vec<&[u8]> = hh.candidates.iter().map(|c| &*c.key).collect();
        assert!(
            keys.contains(&&b"e"[..]) && !keys.contains(&&b"d"[..]),
            "{keys:?}"
        );
        assert_eq!(hh.min_count, 2);
        assert_eq!(hh.by_hash.len(), 4);
        for (slot, c) in hh.candidates.iter().enumerate() {
            assert_eq!(hh.by_hash[&c.hash], slot);
        }
        assert_eq!(hh.top(), vec![(b"a".to_vec(), 5), (b"e".to_vec(), 4)]);
        assert_eq!(hh.total(), 15);
    }
}
