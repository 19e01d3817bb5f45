//! Query-speed trial of the `AffE` probe scheme of
//! `examples/bloom_probe_schemes.rs` (tenth session): probes distinct by
//! construction, so neither present nor absent keys need a repeat check.
//! Probe `i` of a key is the top 9 bits of `s x c[t][i]`, with `s` the odd
//! high half of the hash and `c[t]` one of `T` random entries of eight
//! multipliers that share their low 23 bits (so probe `i` is `A + s e_i mod
//! 512` with the entry's distinct `e_i`). The AVX-512 query below is the
//! whole scheme: one table load, one multiply, two shifts, one permute of
//! the line, one rotate and one test, no branch.
//!
//! It runs the bench's loop (batches of 1,000 precomputed hashes walked in
//! order, each query a direct call of the AVX-512 function) over this
//! scheme, the library's current Bloom filter (`Filter::may_contain`) and
//! sbbf-rs-safe at the same memory, rounds interleaved, and prints medians.
//! The library adopted the scheme as Bloom format 0x07; this trial is how it
//! was first measured (docs/filters.md, "Format 0x07").
//!
//! Run: `cargo run --release --example affine_probe_trial -- [keys] [rounds] [table entries]`
//! (defaults 1,000,000, 15, 64; x86-64 with AVX-512 F and VL only).

use std::hint::black_box;
use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::Parser;

/// Query-speed trial of the `AffE` probe scheme against the library's Bloom
/// filter and sbbf-rs-safe (x86-64 with AVX-512 F and VL only).
#[derive(Parser)]
#[command(name = "affine_probe_trial")]
struct Args {
    /// Keys in each filter (at least 1,000: queries go in batches of 1,000).
    #[arg(value_name = "KEYS", default_value_t = 1_000_000,
          value_parser = RangedU64ValueParser::<usize>::new().range(1000..))]
    keys: usize,
    /// Interleaved timing rounds (at least 1).
    #[arg(value_name = "ROUNDS", default_value_t = 15,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    rounds: usize,
    /// Entries of the shape table (a power of two).
    #[arg(value_name = "TABLE_ENTRIES", default_value_t = 64, value_parser = power_of_two)]
    entries: usize,
}

/// A whole number that is a power of two (1, 2, 4, ...).
fn power_of_two(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n.is_power_of_two() => Ok(n),
        _ => Err(format!(
            "expected a power of two (1, 2, 4, ...), got {text:?}"
        )),
    }
}

/// One 64-byte line, 64-byte aligned so that it is one cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u64; 8]);

/// A table entry: eight multipliers, 32 bytes.
#[repr(C, align(32))]
#[derive(Clone, Copy)]
struct Shape([u32; 8]);

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `entries` random shapes: a shared odd low part, eight distinct 9-bit
/// values on top.
fn shapes(entries: usize) -> Vec<Shape> {
    let mut r = 12_345u64;
    (0..entries)
        .map(|_| {
            let low = (splitmix(&mut r) as u32) & ((1 << 23) - 1) | 1;
            let mut vals = [0u32; 8];
            let mut n = 0;
            while n < 8 {
                let v = (splitmix(&mut r) as u32) & 511;
                if !vals[..n].contains(&v) {
                    vals[n] = v;
                    n += 1;
                }
            }
            Shape(vals.map(|v| (v << 23) | low))
        })
        .collect()
}

struct Affine {
    lines: Vec<Line>,
    num_lines: u32,
    shapes: Vec<Shape>,
    /// Byte offset mask of an entry: `(entries - 1) x 32`.
    entry_mask: usize,
    /// 1 in the first `probes` lanes.
    ones: [u32; 8],
}

impl Affine {
    fn new(keys: &[u64], bits_per_key: f64, probes: usize, entries: usize) -> Affine {
        assert!(entries.is_power_of_two() && probes <= 8);
        let num_lines = ((keys.len() as f64 * bits_per_key).ceil() as u64).div_ceil(512) as u32;
        let mut filter = Affine {
            lines: vec![Line([0; 8]); num_lines as usize],
            num_lines,
            shapes: shapes(entries),
            entry_mask: (entries - 1) << 5,
            ones: std::array::from_fn(|lane| u32::from(lane < probes)),
        };
        for &h in keys {
            let line = ((h as u32 as u64 * u64::from(num_lines)) >> 32) as usize;
            let s = (h >> 32) as u32 | 1;
            let shape = filter.shapes[(h as usize & filter.entry_mask) >> 5];
            for &c in &shape.0[..probes] {
                let p = s.wrapping_mul(c) >> 23;
                filter.lines[line].0[(p >> 6) as usize] |= 1 << (p & 63);
            }
        }
        filter
    }

    /// The same answer as the AVX-512 query, one probe at a time.
    fn may_contain_scalar(&self, h: u64) -> bool {
        let line = &self.lines[((h as u32 as u64 * u64::from(self.num_lines)) >> 32) as usize];
        let s = (h >> 32) as u32 | 1;
        let shape = self.shapes[(h as usize & self.entry_mask) >> 5];
        shape.0.iter().zip(self.ones).all(|(&c, one)| {
            let p = s.wrapping_mul(c) >> 23;
            one == 0 || line.0[(p >> 6) as usize] >> (p & 63) & 1 == 1
        })
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Affine;
    use std::arch::x86_64::*;

    /// # Safety
    ///
    /// The CPU must support AVX-512 F and VL, and the filter must have at
    /// least one line.
    #[target_feature(enable = "avx512f,avx512vl")]
    #[inline(never)]
    pub unsafe fn may_contain(filter: &Affine, h: u64) -> bool {
        let line = ((h as u32 as u64 * u64::from(filter.num_lines)) >> 32) as usize;
        let s = (h >> 32) as u32 | 1;
        // SAFETY: `line < num_lines` (fastrange), and `lines` holds
        // `num_lines` 64-byte lines; the entry offset is masked to the
        // table's `entries x 32` bytes; both loads are in bounds.
        let (words, shape) = unsafe {
            (
                _mm512_load_si512(filter.lines.as_ptr().add(line).cast()),
                _mm256_load_si256(
                    filter
                        .shapes
                        .as_ptr()
                        .cast::<u8>()
                        .add(h as usize & filter.entry_mask)
                        .cast(),
                ),
            )
        };
        let x = _mm256_mullo_epi32(_mm256_set1_epi32(s as i32), shape);
        let bit = _mm256_srli_epi32(x, 23);
        let word = _mm512_castsi512_si256(_mm512_permutexvar_epi32(
            _mm512_castsi256_si512(_mm256_srli_epi32(x, 28)),
            words,
        ));
        // SAFETY: `ones` is eight u32, 32 readable bytes.
        let ones = unsafe { _mm256_loadu_si256(filter.ones.as_ptr().cast()) };
        _mm256_testc_si256(word, _mm256_rolv_epi32(ones, bit)) != 0
    }
}

fn main() {
    // Arguments are checked first, on every machine.
    let args = Args::parse();
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
        run(args);
        return;
    }
    let _ = args; // checked, but there is nothing to run them on
    eprintln!("this trial needs x86-64 with AVX-512 F and VL");
}

#[cfg(target_arch = "x86_64")]
fn run(args: Args) {
    let (n, rounds, entries) = (args.keys, args.rounds, args.entries);
    let mut r = 7u64;
    let present: Vec<u64> = (0..n).map(|_| splitmix(&mut r)).collect();
    let absent: Vec<u64> = (0..n.max(1_000_000)).map(|_| splitmix(&mut r)).collect();
    let affine = black_box(Affine::new(&present, 10.0, 6, entries));
    // SAFETY: `main` checked AVX-512 F and VL; the filter has lines.
    let affine_query = |h| unsafe { avx512::may_contain(&affine, h) };
    assert!(present.iter().all(|&h| affine_query(h)), "false negative");
    assert!(
        absent[..100_000]
            .iter()
            .all(|&h| affine_query(h) == affine.may_contain_scalar(h)),
        "vector and scalar answers differ"
    );
    let fp = absent.iter().filter(|&&h| affine_query(h)).count() as f64 / absent.len() as f64;
    let library = sievedb::filter::Filter::decode(sievedb::filter::FilterPolicy::build(
        &sievedb::filter::BloomPolicy::new(10.0),
        &present,
    ));
    let library_fp =
        absent.iter().filter(|&&h| library.may_contain(h)).count() as f64 / absent.len() as f64;
    let mut sbbf = sbbf_rs_safe::Filter::new(10, n);
    for &h in &present {
        sbbf.insert_hash(h);
    }
    println!(
        "{n} keys, 10 bits/key, {entries} shapes: FP affine {:.4}%, library {:.4}%",
        100.0 * fp,
        100.0 * library_fp
    );
    let names = ["affine", "library", "sbbf-rs-safe"];
    for (label, hashes) in [("present", &present), ("absent", &absent)] {
        let mut times = vec![vec![]; 3];
        for _ in 0..rounds {
            for (which, samples) in times.iter_mut().enumerate() {
                let batches = 2000;
                let mut pos = 0usize;
                let mut hits = 0usize;
                let start = Instant::now();
                for _ in 0..batches {
                    if pos + 1000 > hashes.len() {
                        pos = 0;
                    }
                    let batch = &hashes[pos..pos + 1000];
                    pos += 1000;
                    match which {
                        0 => {
                            for &h in batch {
                                hits += usize::from(affine_query(black_box(h)));
                            }
                        }
                        1 => {
                            for &h in batch {
                                hits += usize::from(library.may_contain(black_box(h)));
                            }
                        }
                        _ => {
                            for &h in batch {
                                hits += usize::from(sbbf.contains_hash(black_box(h)));
                            }
                        }
                    }
                }
                black_box(hits);
                samples.push(start.elapsed().as_nanos() as f64 / (batches * 1000) as f64);
            }
        }
        let medians: Vec<f64> = times
            .into_iter()
            .map(|mut t| {
                t.sort_by(f64::total_cmp);
                t[t.len() / 2]
            })
            .collect();
        for (name, median) in names.iter().zip(&medians) {
            println!(
                "{label:>7} {name:>13}: {median:.3} ns/query ({:.2}x sbbf-rs-safe)",
                median / medians[2]
            );
        }
    }
}
