//! Filter query and build times compared in interleaved rounds, for
//! machines too noisy for one criterion row after another.
//!
//! `benches/filters.rs` measures each family for a few seconds, then the
//! next: on a shared machine the speed can change by 2x between two rows
//! of one run, and a ratio of two rows then says little. Here every round
//! times a short burst of each contestant back to back (in an order that
//! rotates each round), so both sides of a ratio see the same machine; the
//! report gives each contestant's median and, for each comparison the
//! issues name, the median and quartiles of the per-round ratios.
//!
//! Contestants, at 10 bits/key as in the bench: sievedb's blocked Bloom
//! filter and Ribbon filter (decoded [`Filter`]s, as a table queries
//! them), `sbbf-rs-safe`, `fastbloom` and xorf's `BinaryFuse8`.
//!
//! Run: `cargo run --release --example filter_race -- [keys] [rounds]`
//! (defaults 1,000,000 keys, 400 query rounds; build rounds are a tenth of
//! those, at least 5, and cycle through distinct key sets of 640,000 keys
//! in all, one set at 1,000,000 keys).

use std::hint::black_box;
use std::time::Instant;

use sievedb::filter::{BloomPolicy, Filter, FilterPolicy, RibbonPolicy};
use xorf::Filter as _;

#[path = "../benches/support/filter_peers.rs"]
mod filter_peers;
use filter_peers::{build_fastbloom, build_sbbf, PassThrough, BITS_PER_KEY};
#[path = "../benches/support/key_hashes.rs"]
mod key_hashes;
use key_hashes::{build_key_sets, key_hashes as hashes};

/// Queries per burst: long enough for the timer, short enough that a
/// round (all contestants, present and absent) lasts well under a
/// millisecond at a few ns per query.
const BURST: usize = 20_000;
/// Untimed queries before each timed burst.
const WARM: usize = 100_000;

/// The filter families compared.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    Bloom,
    Ribbon,
    Sbbf,
    Fastbloom,
    BinaryFuse8,
}

const FAMILIES: [Family; 5] = [
    Family::Bloom,
    Family::Ribbon,
    Family::Sbbf,
    Family::Fastbloom,
    Family::BinaryFuse8,
];

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Bloom => "bloom",
            Family::Ribbon => "ribbon",
            Family::Sbbf => "sbbf",
            Family::Fastbloom => "fastbloom",
            Family::BinaryFuse8 => "binary_fuse8",
        }
    }

    fn build(self, hashes: &[u64]) -> Built {
        match self {
            Family::Bloom => Built::Sieve(Box::new(Filter::decode(
                BloomPolicy::new(BITS_PER_KEY as f64).build(hashes),
            ))),
            Family::Ribbon => Built::Sieve(Box::new(Filter::decode(
                RibbonPolicy::new(BITS_PER_KEY as f64).build(hashes),
            ))),
            Family::Sbbf => Built::Sbbf(build_sbbf(hashes)),
            Family::Fastbloom => Built::Fastbloom(build_fastbloom(hashes)),
            Family::BinaryFuse8 => {
                Built::Fuse(xorf::BinaryFuse8::try_from(hashes).expect("binary fuse build"))
            }
        }
    }
}

/// A built filter of one family.
enum Built {
    Sieve(Box<Filter>),
    Sbbf(sbbf_rs_safe::Filter),
    Fastbloom(fastbloom::BloomFilter<512, PassThrough>),
    Fuse(xorf::BinaryFuse8),
}

/// How many of `hashes` `query` says may be present: one loop per family,
/// monomorphized, as the bench's rows are.
#[inline(never)]
fn count<F: Fn(u64) -> bool>(hashes: &[u64], query: F) -> usize {
    let mut hits = 0;
    for &h in hashes {
        hits += usize::from(query(black_box(h)));
    }
    hits
}

impl Built {
    fn count(&self, hashes: &[u64]) -> usize {
        match self {
            Built::Sieve(f) => count(hashes, |h| f.may_contain(h)),
            Built::Sbbf(f) => count(hashes, |h| f.contains_hash(h)),
            Built::Fastbloom(f) => count(hashes, |h| f.contains(&h)),
            Built::Fuse(f) => count(hashes, |h| f.contains(&h)),
        }
    }

    /// The filter's size in bits per key of `keys` keys.
    fn bits_per_key(&self, keys: usize) -> f64 {
        let bytes = match self {
            Built::Sieve(f) => f.len_bytes(),
            Built::Sbbf(f) => f.as_bytes().len(),
            Built::Fastbloom(f) => f.as_slice().len() * 8,
            Built::Fuse(f) => f.fingerprints.len(),
        };
        bytes as f64 * 8.0 / keys as f64
    }
}

fn median(v: &mut [f64]) -> f64 {
    quantile(v, 0.5)
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Per-family samples of one measurement, one per round.
struct Samples(Vec<Vec<f64>>);

impl Samples {
    fn new() -> Samples {
        Samples(vec![Vec::new(); FAMILIES.len()])
    }
    fn of(&self, f: Family) -> &[f64] {
        &self.0[FAMILIES.iter().position(|&g| g == f).expect("a family")]
    }
    fn push(&mut self, i: usize, v: f64) {
        self.0[i].push(v);
    }
    /// "median [q1, q3]" of the per-round ratios `a / b`.
    fn ratio(&self, a: Family, b: Family) -> String {
        let mut r: Vec<f64> = self
            .of(a)
            .iter()
            .zip(self.of(b))
            .map(|(x, y)| x / y)
            .collect();
        let (q1, q3) = (quantile(&mut r, 0.25), quantile(&mut r, 0.75));
        format!("{:.3}x [{q1:.3}, {q3:.3}]", median(&mut r))
    }
}

/// The fewest keys a race takes (the smallest filter size the bench
/// measures).
const MIN_KEYS: usize = 10_000;

/// `[keys] [rounds]`, with their defaults.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<(usize, usize), String> {
    let mut number = |what: &str, default: usize, min: usize| -> Result<usize, String> {
        match args.next() {
            None => Ok(default),
            Some(a) => match a.parse::<usize>() {
                Ok(n) if n >= min => Ok(n),
                _ => Err(format!(
                    "{what}: expected a whole number of at least {min}, got {a:?}"
                )),
            },
        }
    };
    let keys = number("keys", 1_000_000, MIN_KEYS)?;
    let rounds = number("rounds", 400, 1)?;
    if let Some(extra) = args.next() {
        return Err(format!("unexpected argument {extra:?}"));
    }
    Ok((keys, rounds))
}

fn main() {
    let (keys, rounds) = match parse_args(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("filter_race: {message}");
            eprintln!("usage: filter_race [keys (at least {MIN_KEYS})] [rounds (at least 1)]");
            std::process::exit(2);
        }
    };
    let build_rounds = (rounds / 10).max(5);
    let present = hashes(1, keys);
    let absent = hashes(2, 1_000_000);
    let burst = BURST.min(keys);
    let warm = hashes(3, 1_000_000);

    let built: Vec<Built> = FAMILIES.iter().map(|f| f.build(&present)).collect();
    println!("{keys} keys, {BITS_PER_KEY} bits/key for the Bloom filters, {rounds} query rounds of {burst} queries, {build_rounds} build rounds");
    println!();
    println!("| family | bits/key | FP rate |");
    println!("|---|---|---|");
    for (f, b) in FAMILIES.iter().zip(&built) {
        assert_eq!(b.count(&present), keys, "{}: false negative", f.name());
        let fp = b.count(&absent) as f64 / absent.len() as f64;
        println!(
            "| {} | {:.3} | {:.4}% |",
            f.name(),
            b.bits_per_key(keys),
            100.0 * fp
        );
    }

    let mut present_ns = Samples::new();
    let mut absent_ns = Samples::new();
    let (mut at_present, mut at_absent) = (0usize, 0usize);
    for round in 0..rounds {
        // The present and absent slices of this round, the same for every
        // family.
        if at_present + burst > present.len() {
            at_present = 0;
        }
        if at_absent + burst > absent.len() {
            at_absent = 0;
        }
        let p = &present[at_present..at_present + burst];
        let a = &absent[at_absent..at_absent + burst];
        at_present += burst;
        at_absent += burst;
        for k in 0..FAMILIES.len() {
            let i = (round + k) % FAMILIES.len();
            // Bring the filter back into the caches the other families'
            // bursts took it out of, as a criterion row (which queries one
            // filter for seconds) has it: untimed queries of other hashes.
            black_box(built[i].count(&warm[(round * WARM) % (warm.len() - WARM)..][..WARM]));
            for (slice, samples) in [(p, &mut present_ns), (a, &mut absent_ns)] {
                let start = Instant::now();
                black_box(built[i].count(slice));
                samples.push(i, start.elapsed().as_nanos() as f64 / burst as f64);
            }
        }
    }
    drop(built);

    // Builds cycle through distinct key sets, as `benches/filters.rs` does
    // (a review measured Ribbon builds 10-15% faster on one 10,000-key set
    // than on cycled ones; Bloom builds 1-5%). One set at 1,000,000 keys.
    let build_sets = build_key_sets(&present);
    let mut build_ns = Samples::new();
    for round in 0..build_rounds {
        let set = &build_sets[round % build_sets.len()];
        for k in 0..FAMILIES.len() {
            let i = (round + k) % FAMILIES.len();
            let start = Instant::now();
            black_box(FAMILIES[i].build(black_box(set)));
            build_ns.push(i, start.elapsed().as_nanos() as f64 / keys as f64);
        }
    }

    println!();
    println!("| family | build ns/key | query present ns | query absent ns |");
    println!("|---|---|---|---|");
    for f in FAMILIES {
        let m = |s: &Samples| median(&mut s.of(f).to_vec());
        println!(
            "| {} | {:.2} | {:.3} | {:.3} |",
            f.name(),
            m(&build_ns),
            m(&present_ns),
            m(&absent_ns)
        );
    }
    println!();
    println!("Per-round ratios, median [quartiles]:");
    use Family::*;
    for (a, b) in [(Bloom, Sbbf), (Bloom, Fastbloom), (Ribbon, Bloom)] {
        println!(
            "- {} / {}: query present {}, absent {}, build {}",
            a.name(),
            b.name(),
            present_ns.ratio(a, b),
            absent_ns.ratio(a, b),
            build_ns.ratio(a, b)
        );
    }
}
