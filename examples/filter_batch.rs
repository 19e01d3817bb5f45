//! Batched against single Bloom queries, measured in interleaved rounds so
//! that a shared, noisy machine slows both alike.
//!
//! For each filter size (keys; default 10,000, 1,000,000 and 10,000,000 at
//! 10 bits/key) and for present and absent hashes, each round times one
//! pass of 1,000,000 queries per variant, in batches of 1,000 hashes walked
//! in order through the array (as `benches/filters.rs` does):
//!
//! * `single`: `Filter::may_contain` per hash, answers summed (the loop of
//!   the bench's `query_present` / `query_absent` rows);
//! * `batch`: one `Filter::may_contain_batch` per batch into a reused
//!   buffer, answers summed (the `query_batch_*` rows).
//!
//! Prints the median ns/query of 15 rounds per variant.
//!
//! Run: `cargo run --release --example filter_batch [-- SIZE...]`

use std::hint::black_box;
use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use sievedb::filter::{BloomPolicy, Filter, FilterPolicy};

const BATCH: usize = 1_000;
const QUERIES_PER_PASS: usize = 1_000_000;
const ROUNDS: usize = 15;

#[path = "../benches/support/key_hashes.rs"]
mod key_hashes;
use key_hashes::key_hashes as hashes;

/// Answers one batch and returns how many answers were "may contain".
type Variant = fn(&Filter, &[u64], &mut [bool]) -> usize;

fn single(filter: &Filter, batch: &[u64], _out: &mut [bool]) -> usize {
    batch
        .iter()
        .map(|&h| usize::from(filter.may_contain(black_box(h))))
        .sum()
}

fn batched(filter: &Filter, batch: &[u64], out: &mut [bool]) -> usize {
    filter.may_contain_batch(batch, out).expect("lengths match");
    out.iter().filter(|&&a| a).count()
}

/// Nanoseconds per query of one pass of `variant` over `hashes`.
fn pass(filter: &Filter, hashes: &[u64], out: &mut [bool], variant: Variant) -> f64 {
    let mut pos = 0;
    let mut hits = 0;
    let start = Instant::now();
    for _ in 0..QUERIES_PER_PASS / BATCH {
        if pos + BATCH > hashes.len() {
            pos = 0;
        }
        hits += variant(filter, black_box(&hashes[pos..pos + BATCH]), out);
        pos += BATCH;
    }
    black_box(hits);
    start.elapsed().as_nanos() as f64 / QUERIES_PER_PASS as f64
}

/// Batched against single Bloom queries, in interleaved rounds.
#[derive(Parser)]
#[command(name = "filter_batch")]
struct Args {
    /// Filter sizes in keys, each at least 1,000 (one batch) [default:
    /// 10000 1000000 10000000].
    #[arg(value_name = "SIZE",
          value_parser = RangedU64ValueParser::<usize>::new().range(BATCH as u64..))]
    sizes: Vec<usize>,
}

fn main() {
    let mut sizes = Args::parse().sizes;
    if sizes.is_empty() {
        sizes = vec![10_000, 1_000_000, 10_000_000];
    }
    let variants: [(&str, Variant); 2] = [("single", single), ("batch", batched)];
    let absent = hashes(2, 1_000_000);
    let mut out = vec![false; BATCH];
    println!("keys       hashes   ns/query (median of {ROUNDS} interleaved rounds)");
    for n in sizes {
        let present = hashes(1, n);
        let filter = Filter::decode(BloomPolicy::new(10.0).build(&present));
        for (set, hashes) in [("present", &present), ("absent", &absent)] {
            let mut times = vec![Vec::with_capacity(ROUNDS); variants.len()];
            for _ in 0..ROUNDS {
                for (times, (_, variant)) in times.iter_mut().zip(&variants) {
                    times.push(pass(&filter, hashes, &mut out, *variant));
                }
            }
            let mut line = format!("{n:<10} {set:<8}");
            for (times, (name, _)) in times.iter_mut().zip(&variants) {
                times.sort_by(f64::total_cmp);
                line += &format!("  {name} {:.2}", times[ROUNDS / 2]);
            }
            println!("{line}");
        }
    }
}
