//! Probe-scheme experiment for the blocked Bloom filter: the first format's
//! multiply-chain probes (`Old`, with replacement) against schemes whose
//! probes are distinct inside the 512-bit line (double hashing, partitioned,
//! one probe per 64-bit or 32-bit word, sampling without replacement, and
//! `ChainDistinct`: the first k distinct chain values, which format 0x04
//! adopted; the eighth session added `Quad`, a quadratic progression mod
//! 512, and `Words`, k distinct words with one bit each; the tenth added
//! `AffE` and its variants, affine images of random shapes). Measures FP rate over `Q` (default 10M) absent queries per seed
//! and query time, side by side. Not a benchmark of the library; see
//! docs/filters.md.
//!
//! Run: `cargo run --release --example bloom_probe_schemes` (set `Q=4000000`
//! for a shorter run).
#![allow(dead_code, clippy::needless_range_loop)]
// A research harness: terse names, every scheme inline, no library API.
use std::hint::black_box;
use std::time::Instant;

use clap::Parser;

/// Probe-scheme experiment for the blocked Bloom filter (FP rate and query
/// time per scheme). Takes no arguments; see the environment variables
/// below.
#[derive(Parser)]
#[command(
    name = "bloom_probe_schemes",
    after_help = "Environment:\n  Q  absent queries per seed (a whole number, at least 1; default 10000000)\n  T  random shapes of the AffE schemes (a whole number, at least 1; default 64)"
)]
struct Args {}

/// The whole number in environment variable `name` (at least 1), or
/// `default` when it is not set; anything else ends the process with a
/// usage message (exit code 2).
fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => default,
        Ok(text) => match text.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => env_error(&format!(
                "{name}: expected a whole number of at least 1, got {text:?}"
            )),
        },
        Err(std::env::VarError::NotUnicode(text)) => {
            env_error(&format!("{name}: not valid Unicode: {text:?}"))
        }
    }
}

fn env_error(message: &str) -> ! {
    eprintln!("error: {message}");
    eprintln!("usage: [Q=<queries per seed>] [T=<AffE shapes>] bloom_probe_schemes");
    std::process::exit(2)
}

const LINE_WORDS: usize = 8;
const PM: u32 = 0x9e37_79b9;

fn powers() -> [u32; 32] {
    let mut p = [1u32; 32];
    for i in 1..32 {
        p[i] = p[i - 1].wrapping_mul(PM);
    }
    p
}

#[derive(Clone, Copy, Debug)]
enum Scheme {
    Old,
    Ap,
    Part,
    ApXor,
    ApXm,
    ApXms,
    Seq,
    Word,
    W16Ap,
    ChainDistinct,
    /// a + b i + c i^2 mod 512 with b odd and c even: distinct by
    /// construction for i < 512 (the difference of two probes is (i - j)
    /// times an odd number), and cheap in vector lanes (eighth session).
    Quad,
    /// k distinct 64-bit words of the eight (the first k distinct values of
    /// the chain's top 3 bits), one chain-chosen bit in each: distinct by
    /// construction, testable with one `vpshufbitqmb` (eighth session).
    Words,
    /// Tenth session, distinct by construction without a repeat check:
    /// probe `i` is the top 9 bits of `s x c[t][i]` (`s` odd), where the
    /// multipliers of one table entry `t` share their low 23 bits, so probe
    /// `i` is `A + s e_i mod 512` for distinct `e_i`: an affine image of a
    /// random 16-element "shape". `t` (from hash bits 9 on) picks one of
    /// `T` random shapes (env `T`, default 64).
    AffE,
    /// `AffE` with one shape: a family of only 2^17 probe sets.
    AffE1,
    /// One shape XORed with `s` before the multiply (`c_i ^ s`).
    AffX,
    /// One shape, then `x ^ (x >> 5)`, XOR `s`, low bits cleared and a
    /// second multiply by `s`: a nonlinear bijection of the 9-bit values.
    N1,
    /// `N1` with the second multiplier `rotl(s, 16) | 1`.
    N3,
}

struct F {
    lines: Vec<[u64; LINE_WORDS]>,
    k: u32,
    pw: [u32; 32],
    scheme: Scheme,
    starts: Vec<u32>,
    sizes: Vec<u32>,
}

impl F {
    fn new(n: usize, bpk: f64, k: u32, scheme: Scheme) -> F {
        let bits = (n as f64 * bpk).ceil() as u64;
        let nl = bits.div_ceil(512) as usize;
        let mut starts = vec![];
        let mut sizes = vec![];
        let mut s = 0;
        for i in 0..k {
            let sz = 512 / k + u32::from(i < 512 % k);
            starts.push(s);
            sizes.push(sz);
            s += sz;
        }
        F {
            lines: vec![[0; 8]; nl],
            k,
            pw: powers(),
            scheme,
            starts,
            sizes,
        }
    }
    #[inline(always)]
    fn seq_positions(&self, st: u32, out: &mut [u32; 32]) {
        // sampling without replacement: r_i uniform in 0..512-i, mapped to
        // the r_i-th bit not yet chosen (sorted picks, ascending).
        let mut sorted = [0u32; 32];
        for i in 0..self.k as usize {
            let x = st.wrapping_mul(self.pw[i]);
            let mut r = ((x as u64 * (512 - i as u64)) >> 32) as u32;
            let mut ins = i;
            for j in 0..i {
                if r >= sorted[j] {
                    r += 1;
                } else if ins == i {
                    ins = j;
                }
            }
            // r >= sorted[j] for j < ins; insert at ins
            let mut j = i;
            while j > ins {
                sorted[j] = sorted[j - 1];
                j -= 1;
            }
            sorted[ins] = r;
            out[i] = r;
        }
    }
    /// The first k distinct values of the multiply chain (top 9 bits of
    /// st * M^i, i = 0, 1, 2, ...): rejection sampling without replacement.
    #[inline(always)]
    fn chain_distinct(&self, st: u32, out: &mut [u32; 32]) {
        let mut taken = [0u64; 8];
        let mut n = 0;
        // Odd, as in format 0x04: an even state keeps its low zero bits
        // through the chain, and a state with many (2^31: one value)
        // would loop here forever.
        let mut x = st | 1;
        while n < self.k as usize {
            let p = x >> 23;
            let bit = 1u64 << (p & 63);
            if taken[(p >> 6) as usize] & bit == 0 {
                taken[(p >> 6) as usize] |= bit;
                out[n] = p;
                n += 1;
            }
            x = x.wrapping_mul(PM);
        }
    }
    /// `Words`: the first k distinct words of the chain's top 3 bits, each
    /// with the bit its chain value's next 6 bits name (k <= 8).
    #[inline(always)]
    fn distinct_words(&self, st: u32, out: &mut [u32; 32]) {
        let mut taken = 0u32;
        let mut n = 0;
        let mut x = st | 1;
        while n < self.k as usize {
            let w = x >> 29;
            if taken & (1 << w) == 0 {
                taken |= 1 << w;
                out[n] = (w << 6) | ((x >> 23) & 63);
                n += 1;
            }
            x = x.wrapping_mul(PM);
        }
    }
    #[inline(always)]
    fn pos(&self, st: u32, i: usize) -> u32 {
        match self.scheme {
            Scheme::Old => st.wrapping_mul(self.pw[i]) >> 23,
            Scheme::Ap => {
                let a = st >> 23;
                let b = ((st >> 14) & 511) | 1;
                (a.wrapping_add(i as u32 * b)) & 511
            }
            Scheme::ApXor => {
                let a = st >> 23;
                let b = ((st >> 14) & 511) | 1;
                let d = (st >> 5) & 511;
                ((a.wrapping_add(i as u32 * b)) & 511) ^ d
            }
            Scheme::ApXm | Scheme::ApXms => {
                let a = st >> 23;
                let b = ((st >> 14) & 511) | 1;
                let d = (st >> 5) & 511;
                let c = ((st & 31) << 1) | 1;
                let mut x = ((((a.wrapping_add(i as u32 * b)) & 511) ^ d) * c) & 511;
                if let Scheme::ApXms = self.scheme {
                    x ^= x >> 4;
                }
                x
            }
            Scheme::Seq | Scheme::ChainDistinct | Scheme::Words => unreachable!(),
            Scheme::Quad => {
                let a = st >> 23;
                let b = (((st >> 15) & 255) << 1) | 1;
                let c = ((st >> 7) & 255) << 1;
                let i = i as u32;
                a.wrapping_add(b.wrapping_mul(i))
                    .wrapping_add(c.wrapping_mul(i * i))
                    & 511
            }
            Scheme::Word => {
                // probe i in word (w0 + i*s) & 7 (s odd: distinct words for
                // i < 8), bit inside the word from the multiply chain.
                let w0 = st & 7;
                let sstep = ((st >> 3) & 3) * 2 + 1;
                let w = (w0 + i as u32 * sstep) & 7;
                (w << 6) | (st.wrapping_mul(self.pw[i]) >> 26)
            }
            Scheme::W16Ap => {
                // probe i in 32-bit word (w0 + i*s) & 15 (s odd: distinct
                // words for i < 16), bit inside the word from a salt multiply.
                let w0 = st & 15;
                let sstep = ((st >> 4) & 7) * 2 + 1;
                let w = (w0 + i as u32 * sstep) & 15;
                (w << 5) | (st.wrapping_mul(self.pw[i + 1]) >> 27)
            }
            Scheme::AffE | Scheme::AffE1 => {
                // p_i = top9(s * c_i), c_i sharing their low 23 bits: p_i =
                // top9(s c_0) + s e_i mod 512, distinct for odd s.
                let st = st | 1;
                let t = if let Scheme::AffE1 = self.scheme {
                    0
                } else {
                    ((st >> 9) as usize) % AFF.len()
                };
                st.wrapping_mul(AFF[t][i]) >> 23
            }
            Scheme::AffX => {
                let st = st | 1;
                st.wrapping_mul(AFF[0][i] ^ st) >> 23
            }
            Scheme::N1 => {
                let st = st | 1;
                let x = AFF[0][i].wrapping_mul(st);
                let y = ((x ^ (x >> 5)) ^ st) & 0xff80_0000;
                y.wrapping_mul(st) >> 23
            }
            Scheme::N3 => {
                let st = st | 1;
                let x = AFF[0][i].wrapping_mul(st);
                let y = ((x ^ (x >> 5)) ^ st) & 0xff80_0000;
                y.wrapping_mul(st.rotate_left(16) | 1) >> 23
            }
            Scheme::Part => {
                let x = st.wrapping_mul(self.pw[i]);
                self.starts[i] + ((x as u64 * self.sizes[i] as u64) >> 32) as u32
            }
        }
    }
    fn add(&mut self, h: u64) {
        let l = ((h as u32 as u64 * self.lines.len() as u64) >> 32) as usize;
        let st = (h >> 32) as u32;
        let mut ps = [0u32; 32];
        if let Scheme::Seq = self.scheme {
            self.seq_positions(st, &mut ps);
        }
        if let Scheme::ChainDistinct = self.scheme {
            self.chain_distinct(st, &mut ps);
        }
        if let Scheme::Words = self.scheme {
            self.distinct_words(st, &mut ps);
        }
        for i in 0..self.k as usize {
            let p = if matches!(
                self.scheme,
                Scheme::Seq | Scheme::ChainDistinct | Scheme::Words
            ) {
                ps[i]
            } else {
                self.pos(st, i)
            };
            self.lines[l][(p >> 6) as usize] |= 1 << (p & 63);
        }
    }
    #[inline(always)]
    fn q(&self, h: u64) -> bool {
        let l = ((h as u32 as u64 * self.lines.len() as u64) >> 32) as usize;
        let st = (h >> 32) as u32;
        let line = &self.lines[l];
        let mut all = 1u64;
        let mut ps = [0u32; 32];
        if let Scheme::Seq = self.scheme {
            self.seq_positions(st, &mut ps);
        }
        if let Scheme::ChainDistinct = self.scheme {
            self.chain_distinct(st, &mut ps);
        }
        if let Scheme::Words = self.scheme {
            self.distinct_words(st, &mut ps);
        }
        for i in 0..self.k as usize {
            let p = if matches!(
                self.scheme,
                Scheme::Seq | Scheme::ChainDistinct | Scheme::Words
            ) {
                ps[i]
            } else {
                self.pos(st, i)
            };
            all &= line[(p >> 6) as usize] >> (p & 63);
        }
        all & 1 == 1
    }
}

/// The `AffE` shapes: `T` entries of 16 multipliers, each entry's
/// multipliers sharing a random odd low part and carrying 16 distinct
/// random 9-bit values on top.
static AFF: std::sync::LazyLock<Vec<[u32; 16]>> = std::sync::LazyLock::new(|| {
    let mut r = xs(0xabcdef);
    (0..env_count("T", 64))
        .map(|_| {
            let low = (r() as u32) & ((1 << 23) - 1) | 1;
            let mut e = [0u32; 16];
            let mut n = 0;
            while n < 16 {
                let v = (r() as u32) & 511;
                if !e[..n].contains(&v) {
                    e[n] = v;
                    n += 1;
                }
            }
            e.map(|v| (v << 23) | low)
        })
        .collect()
});

fn xs(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// fp for uniformly random distinct k-subsets (no-collision formula).
fn theory_distinct(bpk: f64, k: usize) -> f64 {
    let m = 512usize;
    let lambda = 512.0 / bpk;
    // hypergeometric: key picks k of m, hits x of u uncovered targets.
    let lnc =
        |n: usize, r: usize| -> f64 { (1..=r).map(|i| ((n - r + i) as f64 / i as f64).ln()).sum() };
    let mut cov = vec![0.0f64; k + 1]; // cov[h]: h of the k targets covered
    cov[0] = 1.0;
    let mut lp = -lambda;
    let mut total = 0.0;
    let upper = (lambda + 12.0 * lambda.sqrt() + 30.0) as usize;
    for j in 0..=upper {
        if j > 0 {
            lp += lambda.ln() - (j as f64).ln();
        }
        total += lp.exp() * cov[k];
        let mut next = vec![0.0; k + 1];
        for h in 0..=k {
            let u = k - h;
            for x in 0..=u.min(k) {
                let p = (lnc(u, x) + lnc(m - u, k - x) - lnc(m, k)).exp();
                next[h + x] += cov[h] * p;
            }
        }
        cov = next;
    }
    total
}

fn main() {
    Args::parse();
    // Both variables are checked before any work (`T` is read again where
    // the shapes are made).
    let queries = env_count("Q", 10_000_000);
    env_count("T", 64);
    let n = 1_000_000usize;
    let seeds = [1u64, 2, 3, 4, 5];
    for (bpk, k) in [(6.0, 4u32), (10.0, 6), (16.0, 9)] {
        println!(
            "bpk {bpk} k {k}: old theory {:.4}%  distinct theory {:.4}%",
            100.0 * sievedb::filter::bloom::blocked_bloom_fp_rate_with_replacement(bpk, k),
            100.0 * theory_distinct(bpk, k as usize)
        );
        for scheme in [
            Scheme::Old,
            Scheme::ChainDistinct,
            Scheme::Seq,
            Scheme::Quad,
            Scheme::Words,
            Scheme::AffE,
            Scheme::AffE1,
            Scheme::AffX,
            Scheme::N1,
            Scheme::N3,
        ] {
            if matches!(scheme, Scheme::Words) && k > 8 {
                continue; // eight words hold at most eight probes
            }
            let mut fps = 0u64;
            let mut per = vec![];
            for &seed in &seeds {
                let mut r = xs(seed * 0x1234_5678_9abc);
                let mut f = F::new(n, bpk, k, scheme);
                let keys: Vec<u64> = (0..n).map(|_| r()).collect();
                for &h in &keys {
                    f.add(h);
                }
                assert!(keys.iter().all(|&h| f.q(h)));
                let mut c = 0u64;
                for _ in 0..queries {
                    c += u64::from(f.q(r()));
                }
                per.push(100.0 * c as f64 / queries as f64);
                fps += c;
            }
            let tot = (queries * seeds.len()) as f64;
            let p = fps as f64 / tot;
            let se = (p * (1.0 - p) / tot).sqrt();
            println!(
                "  {:?}: FP {:.4}% ± {:.4}% (1 s.e., {} queries) per seed {:?}",
                scheme,
                100.0 * p,
                100.0 * se,
                tot,
                per.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>()
            );
        }
    }
    // query ns, side by side, interleaved rounds, 1M-key filter at 10 bpk
    let mut r = xs(99);
    let keys: Vec<u64> = (0..n).map(|_| r()).collect();
    let absent: Vec<u64> = (0..n).map(|_| r()).collect();
    let mut fs: Vec<F> = [Scheme::Old, Scheme::Ap, Scheme::ChainDistinct]
        .into_iter()
        .map(|s| {
            let mut f = F::new(n, 10.0, 6, s);
            for &h in &keys {
                f.add(h);
            }
            f
        })
        .collect();
    let lib = sievedb::filter::Filter::decode(sievedb::filter::FilterPolicy::build(
        &sievedb::filter::BloomPolicy::new(10.0),
        &keys,
    ));
    let mut times = vec![vec![]; 4];
    for _round in 0..11 {
        for (i, f) in fs.iter_mut().enumerate() {
            let t = Instant::now();
            let c = absent.iter().filter(|&&h| f.q(black_box(h))).count();
            times[i].push(t.elapsed().as_nanos() as f64 / n as f64);
            black_box(c);
        }
        let t = Instant::now();
        let c = absent
            .iter()
            .filter(|&&h| lib.may_contain(black_box(h)))
            .count();
        times[3].push(t.elapsed().as_nanos() as f64 / n as f64);
        black_box(c);
    }
    for (name, mut t) in [
        "old portable",
        "ap portable",
        "chain-distinct portable",
        "library (format 0x04, best SIMD path)",
    ]
    .into_iter()
    .zip(times)
    {
        t.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.2} ns/query absent (min {:.2})",
            t[t.len() / 2],
            t[0]
        );
    }
}
