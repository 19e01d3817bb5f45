//! Keys, values and read orders.
//!
//! Key `j` is `j` in zero-padded decimal, `key_size` bytes wide. The loaded
//! keys are the even ones (`2i` for `i` in `0..num`); `readmissing` asks for
//! odd ones (`2i + 1`), which sort between loaded keys (the last after
//! them all), so almost every missing key falls inside a table's key range
//! and only a filter can rule it out; the few past the last key or between
//! two tables of a level are ruled out by the key ranges (the report's
//! covering-table count leaves them out). Values are `value_size` bytes derived from the seed and
//! the key index, so every read can be checked: the first `random_bytes`
//! pseudo-random, the rest one repeated byte (`--compression-ratio`, as in
//! LevelDB's db_bench; all random by default).
//!
//! Every sequence (fill order, read order) is drawn from `--seed` and the
//! phase name, so each engine and policy sees the same keys in the same order.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use splitmix::Rng64;

use crate::error::{BenchError, BenchResult};

/// The key and value layout of a run.
#[derive(Debug, Clone, Copy)]
pub struct KeySpace {
    /// Loaded keys.
    pub num: u64,
    /// Bytes per key.
    pub key_size: usize,
    /// Bytes per value.
    pub value_size: usize,
    /// Leading pseudo-random bytes of each value; the rest repeat one byte
    /// (`value_size` unless [`with_compression_ratio`](Self::with_compression_ratio)).
    pub random_bytes: usize,
    /// Seed of every sequence.
    pub seed: u64,
}

/// Decimal digits needed to write `n`.
fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

impl KeySpace {
    /// Checks that `num` keys and their interleaved missing keys fit in
    /// `key_size` decimal digits.
    pub fn new(num: u64, key_size: usize, value_size: usize, seed: u64) -> BenchResult<KeySpace> {
        if num == 0 {
            return Err(BenchError::Invalid("--num must be at least 1".into()));
        }
        let largest = num
            .checked_mul(2)
            .ok_or_else(|| BenchError::Invalid(format!("--num {num} is too large")))?;
        // The largest key number is the last missing key's, `2 * num - 1`.
        let need = digits(largest - 1);
        if key_size < need {
            return Err(BenchError::Invalid(format!(
                "--key-size {key_size} cannot hold {num} keys and the missing keys between them \
                 (needs {need} decimal digits)"
            )));
        }
        if key_size > 1024 {
            return Err(BenchError::Invalid(format!(
                "--key-size {key_size} is above the benchmark's limit of 1024"
            )));
        }
        if value_size > (16 << 20) {
            return Err(BenchError::Invalid(format!(
                "--value-size {value_size} is above the benchmark's limit of 16 MiB"
            )));
        }
        Ok(KeySpace {
            num,
            key_size,
            value_size,
            random_bytes: value_size,
            seed,
        })
    }

    /// Makes `ratio` (in (0, 1]) of each value's bytes pseudo-random and the
    /// rest one repeated byte, so values compress to about `ratio` of their
    /// size (`--compression-ratio`).
    pub fn with_compression_ratio(mut self, ratio: f64) -> BenchResult<KeySpace> {
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(BenchError::Invalid(format!(
                "--compression-ratio must be in (0, 1], got {ratio}"
            )));
        }
        self.random_bytes = ((self.value_size as f64 * ratio).ceil() as usize).min(self.value_size);
        Ok(self)
    }

    /// Writes key number `j` into `out` (replacing its contents).
    pub fn key_into(&self, j: u64, out: &mut Vec<u8>) {
        out.clear();
        let width = self.key_size;
        out.resize(width, b'0');
        let mut n = j;
        let mut pos = width;
        while pos > 0 {
            pos -= 1;
            if let Some(b) = out.get_mut(pos) {
                *b = b'0' + (n % 10) as u8;
            }
            n /= 10;
            if n == 0 {
                break;
            }
        }
    }

    /// The key of loaded key `i` (key number `2i`).
    pub fn present_key(&self, i: u64, out: &mut Vec<u8>) {
        self.key_into(2 * i, out);
    }

    /// The missing key just after loaded key `i` (key number `2i + 1`).
    pub fn missing_key(&self, i: u64, out: &mut Vec<u8>) {
        self.key_into(2 * i + 1, out);
    }

    /// The value stored under loaded key `i`.
    pub fn value_into(&self, i: u64, out: &mut Vec<u8>) {
        out.clear();
        // The start is scrambled by one SplitMix step: seeding key `i` with
        // `seed ^ i * increment` alone made key `i + 1`'s words key `i`'s
        // shifted by one (SplitMix advances by that same increment), so
        // neighbouring values shared most of their bytes and compressed
        // well, whatever `--compression-ratio` said.
        let start = Rng64::new(self.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next();
        let mut rng = Rng64::new(start);
        while out.len() < self.random_bytes {
            let word = rng.next().to_le_bytes();
            let take = (self.random_bytes - out.len()).min(8);
            out.extend_from_slice(&word[..take]);
        }
        out.resize(self.value_size, b'x');
    }

    fn rng(&self, phase: &str) -> rand::rngs::StdRng {
        let salt = sievedb::filter::key_hash(phase.as_bytes());
        rand::rngs::StdRng::seed_from_u64(self.seed ^ salt)
    }

    /// Every loaded key index once, in random order (`fillrandom`).
    pub fn shuffled(&self) -> Vec<u64> {
        let mut v: Vec<u64> = (0..self.num).collect();
        v.shuffle(&mut self.rng("fillrandom"));
        v
    }

    /// `n` uniformly random loaded key indices.
    pub fn uniform(&self, phase: &str, n: u64) -> Vec<u64> {
        let mut rng = self.rng(phase);
        (0..n).map(|_| rng.gen_range(0..self.num)).collect()
    }

    /// `n` loaded key indices drawn from a scrambled Zipf distribution.
    pub fn zipf(&self, phase: &str, n: u64, theta: f64) -> Vec<u64> {
        let zipf = Zipf::new(self.num, theta);
        let mut rng = self.rng(phase);
        (0..n)
            .map(|_| {
                let rank = zipf.sample(rng.gen::<f64>());
                // Scramble so the hot keys are spread over the key space
                // (and so over many tables) instead of all being the
                // smallest keys.
                sievedb::filter::key_hash(&rank.to_le_bytes()) % self.num
            })
            .collect()
    }
}

/// Zipf ranks over `0..n` with exponent `theta` (Gray et al., "Quickly
/// generating billion-record synthetic databases", SIGMOD 1994, the
/// generator YCSB uses).
struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Zipf {
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(n.min(2));
        let alpha = 1.0 / (1.0 - theta);
        let eta = if n <= 2 {
            0.0
        } else {
            (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        };
        Zipf {
            n,
            theta,
            alpha,
            zetan,
            eta,
        }
    }

    /// The rank for a uniform `u` in `[0, 1)`.
    fn sample(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 || self.n == 1 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// A tiny splitmix64 generator for value bytes (cheap, seedable per key).
mod splitmix {
    /// splitmix64.
    pub struct Rng64(u64);

    impl Rng64 {
        pub fn new(seed: u64) -> Rng64 {
            Rng64(seed)
        }

        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbouring_values_share_no_words() {
        let ks = KeySpace::new(1000, 16, 64, 42).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..999 {
            ks.value_into(i, &mut a);
            ks.value_into(i + 1, &mut b);
            for w in a.chunks(8) {
                assert!(!b.chunks(8).any(|x| x == w), "key {i}");
            }
        }
        let half = ks.with_compression_ratio(0.5).unwrap();
        half.value_into(3, &mut a);
        assert_eq!(a.len(), 64);
        assert!(a[32..].iter().all(|&x| x == b'x'));
        assert!(ks.with_compression_ratio(0.0).is_err());
    }

    /// Regression (found by review, twenty-eighth session): the digits
    /// were counted for `2 * num`, one past the largest key number, so
    /// `--num 50 --key-size 2` (keys 00 to 99) was refused.
    #[test]
    fn key_size_fits_the_largest_key_number_exactly() {
        assert!(KeySpace::new(50, 2, 8, 1).is_ok());
        assert!(KeySpace::new(51, 2, 8, 1).is_err());
        assert!(KeySpace::new(5, 1, 8, 1).is_ok());
        assert!(KeySpace::new(6, 1, 8, 1).is_err());
        let ks = KeySpace::new(50, 2, 8, 1).unwrap();
        let mut key = Vec::new();
        ks.missing_key(49, &mut key);
        assert_eq!(key, b"99");
        ks.present_key(0, &mut key);
        assert_eq!(key, b"00");
    }

    #[test]
    fn missing_keys_sort_between_present_keys() {
        let ks = KeySpace::new(1000, 16, 8, 1).unwrap();
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..999 {
            ks.present_key(i, &mut a);
            ks.missing_key(i, &mut b);
            ks.present_key(i + 1, &mut c);
            assert!(a < b && b < c, "{i}");
            assert_eq!(b.len(), 16);
        }
        ks.key_into(1234, &mut a);
        assert_eq!(a, b"0000000000001234");
    }

    #[test]
    fn key_size_too_small_is_rejected() {
        assert!(matches!(
            KeySpace::new(1_000_000, 6, 8, 1),
            Err(BenchError::Invalid(_))
        ));
        assert!(KeySpace::new(1_000_000, 7, 8, 1).is_ok());
        assert!(matches!(
            KeySpace::new(0, 16, 8, 1),
            Err(BenchError::Invalid(_))
        ));
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let ks = KeySpace::new(10_000, 16, 8, 7).unwrap();
        let draws = ks.zipf("z", 100_000, 0.99);
        assert!(draws.iter().all(|&i| i < 10_000));
        let mut counts = std::collections::HashMap::new();
        for &d in &draws {
            *counts.entry(d).or_insert(0u64) += 1;
        }
        let mut c: Vec<u64> = counts.values().copied().collect();
        c.sort_unstable_by(|a, b| b.cmp(a));
        // Under theta = 0.99 the hottest key draws several percent of all
        // reads; a uniform draw would give each about 0.01%.
        assert!(c[0] > 3_000, "hottest key drawn {} times", c[0]);
        let uniform = ks.uniform("u", 100_000);
        assert_eq!(uniform, ks.uniform("u", 100_000));
        assert_ne!(uniform, ks.uniform("v", 100_000));
    }

    #[test]
    fn values_are_deterministic_and_sized() {
        let ks = KeySpace::new(10, 16, 100, 3).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        ks.value_into(4, &mut a);
        ks.value_into(4, &mut b);
        assert_eq!(a, b);
        assert_eq!(a.len(), 100);
        ks.value_into(5, &mut b);
        assert_ne!(a, b);
    }
}
