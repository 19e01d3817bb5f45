//! Seeded test streams shared by the sketch tests, the accuracy example and
//! the sketch benchmarks (included with `#[path]`).

#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// SplitMix64: a tiny seeded generator whose outputs are all distinct over
/// a period of 2^64, used to produce streams of distinct items.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next output.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The key hash of the next distinct item (the output's 8 bytes hashed
    /// with the engine's `key_hash`, as the engine would hash a key).
    pub fn next_key_hash(&mut self) -> u64 {
        sievedb::filter::key_hash(&self.next_u64().to_le_bytes())
    }
}

/// Zipf(s) over ranks `0..n`: rank `r` has weight `1 / (r + 1)^s`. Sampled
/// by inverse CDF: binary search of a uniform draw in the cumulative weights.
pub struct Zipf {
    cumulative: Vec<f64>,
    rng: StdRng,
}

impl Zipf {
    /// A seeded Zipf sampler.
    pub fn new(n: usize, s: f64, seed: u64) -> Zipf {
        let mut cumulative = Vec::with_capacity(n);
        let mut sum = 0.0;
        for rank in 0..n {
            sum += 1.0 / ((rank + 1) as f64).powf(s);
            cumulative.push(sum);
        }
        Zipf {
            cumulative,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The next rank (0 is the most frequent).
    pub fn sample(&mut self) -> usize {
        let total = *self.cumulative.last().expect("n > 0");
        let u = self.rng.gen::<f64>() * total;
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len() - 1)
    }
}

/// The key of rank `rank`: fixed-width so keys sort and look like an
/// engine's user keys.
pub fn rank_key(rank: usize) -> Vec<u8> {
    format!("key{rank:08}").into_bytes()
}

/// `events` draws from Zipf(s) over `n` ranks, and the true count per rank.
pub fn zipf_stream(n: usize, s: f64, events: usize, seed: u64) -> (Vec<u32>, Vec<u64>) {
    let mut zipf = Zipf::new(n, s, seed);
    let mut counts = vec![0u64; n];
    let stream: Vec<u32> = (0..events)
        .map(|_| {
            let rank = zipf.sample();
            counts[rank] += 1;
            rank as u32
        })
        .collect();
    (stream, counts)
}
