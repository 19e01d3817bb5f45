//! Filter budgets: how many bits per key each sorted run's filters get.
//!
//! A point read for a key that is not in the database asks one filter per
//! sorted run that could hold it (every level-0 table, one table in each
//! deeper level), and each false positive costs a data-block read. With
//! false-positive rate `p_i` in run `i`, a missing key costs `sum_i p_i`
//! wasted reads: giving every run the same bits per key makes that `runs x
//! p`, and most of the memory sits in the largest run.
//!
//! Monkey (Dayan, Athanassoulis and Idreos, "Monkey: Optimal Navigable
//! Key-Value Store", SIGMOD 2017) minimises `sum_i p_i` for a fixed filter
//! memory `sum_i N_i b_i` (run `i` has `N_i` keys at `b_i` bits per key).
//! Over the range that matters the filter's rate falls exponentially with
//! its bits, `p(b) = p(b0) e^(-(b - b0) / c)`, and the Lagrange condition
//! `p'(b_i) = -lambda N_i` then gives `p_i` proportional to `N_i`: every run
//! pays the same false-positive rate *per key it holds*. In bits, with the
//! run's share `s_i = N_i / N` of the keys:
//!
//! ```text
//! b_i = B - c ln(s_i),   B chosen so that  sum_i s_i b_i = b_avg
//!     = b_avg - c (ln s_i + H),   H = -sum_j s_j ln s_j   (without clamping)
//! ```
//!
//! so a run with a tenth of the keys gets `c ln 10` (about 5.3) more bits
//! per key than one with all of them, and a missing key's expected wasted
//! reads fall from `runs x p(b_avg)` to `e^H x p(b_avg)`. Bits are clamped
//! to [`MIN_BITS_PER_KEY`, `MAX_BITS_PER_KEY`]; [`monkey_bits_per_key`]
//! finds `B` by bisection with the clamp applied, so the average stays
//! exactly `b_avg` whenever the clamps allow it.
//!
//! `c` is the local slope of the blocked Bloom filter's theoretical rate
//! ([`blocked_bloom_fp_rate`]) around `b_avg`: about 2.2 bits per factor
//! `e` between 6 and 10 bits/key, 2.5 between 10 and 16. A Ribbon filter's
//! size is given in Bloom-equivalent bits per key
//! ([`RibbonPolicy::new`](super::RibbonPolicy::new)), so the same curve and
//! the same allocation serve both; its real memory is about 0.7 of the
//! Bloom bits in every run, and the shares do not change.

use super::bloom::{blocked_bloom_fp_rate, probes_for_bits_per_key, MAX_BITS_PER_KEY};
use super::FilterPolicy;
use crate::error::{Error, Result};
use std::sync::Arc;

/// The fewest bits per key a run's filter is given.
pub const MIN_BITS_PER_KEY: f64 = 1.0;

/// How the engine sizes the filters of the tables it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FilterBudget {
    /// Every table's filter is built by
    /// [`Options::filter_policy`](crate::Options::filter_policy) as it is.
    #[default]
    Uniform,
    /// Each table's filter gets the bits per key [`monkey_bits_per_key`]
    /// gives the sorted run it is written to, computed from the tree's shape
    /// when the table is written (level-0 tables are runs of their own;
    /// each deeper level is one run), around the policy's own bits per key
    /// as the average. Small runs (level-0 tables, upper levels) get more
    /// bits, the largest run a little less, which lowers the expected
    /// false positives of a missing key at about the same total filter
    /// memory. Applies to policies that report a size
    /// ([`FilterPolicy::budget_bits_per_key`]: the blocked Bloom and Ribbon
    /// policies); others are used as they are. With
    /// [`Options::last_level_filters`](crate::Options::last_level_filters)
    /// off, the filterless deepest run still counts in the allocation, so
    /// the tree's average ends below the policy's.
    Monkey,
}

/// The slope `c` of the blocked Bloom filter's theoretical false-positive
/// rate around `bits_per_key`: bits per key that divide the rate by `e`
/// (see the module documentation), from the rates 2 bits below and above
/// (within [1, 100]). `bits_per_key` is clamped to [1, 100] (NaN counts as
/// 10). About 2.2 at 6-10 bits/key, 2.5 at 10-16, up to 9.6 near 60, where
/// the probe count stops growing.
pub fn fp_slope_bits(bits_per_key: f64) -> f64 {
    const SPAN: f64 = 2.0;
    let b = if bits_per_key.is_nan() {
        10.0
    } else {
        bits_per_key.clamp(MIN_BITS_PER_KEY, MAX_BITS_PER_KEY)
    };
    let lo = (b - SPAN).max(MIN_BITS_PER_KEY);
    let hi = (b + SPAN).min(MAX_BITS_PER_KEY);
    let fp = |b: f64| blocked_bloom_fp_rate(b, probes_for_bits_per_key(b));
    let ratio = (fp(lo) / fp(hi)).ln();
    if ratio.is_finite() && ratio > 0.0 {
        (hi - lo) / ratio
    } else {
        // Not reached for the theory as it is (its rate is positive and
        // falls over the whole range, 1.6e-10 at 100 bits/key); a guard
        // against a division by zero should it ever flatten: the slope of
        // an ideal Bloom filter.
        1.0 / (std::f64::consts::LN_2 * std::f64::consts::LN_2)
    }
}

/// Bits per key for each sorted run under [`FilterBudget::Monkey`]:
/// `run_keys[i]` keys in run `i`, an average of `avg_bits_per_key` bits per
/// key over all keys. Runs without keys get [`MAX_BITS_PER_KEY`] (they cost
/// nothing). An empty `run_keys` gives an empty allocation.
///
/// Returns [`Error::InvalidArgument`] unless `avg_bits_per_key` is finite
/// and within [[`MIN_BITS_PER_KEY`], [`MAX_BITS_PER_KEY`]].
///
/// ```
/// use sievedb::filter::budget::monkey_bits_per_key;
/// // A level with 90% of the keys, one with 9.9%, four small level-0 tables.
/// let bits = monkey_bits_per_key(10.0, &[25, 25, 25, 25, 9_900, 90_000]).unwrap();
/// let avg = (bits[0] * 100.0 + bits[4] * 9_900.0 + bits[5] * 90_000.0) / 100_000.0;
/// assert!((avg - 10.0).abs() < 1e-6);
/// assert!(bits[0] > bits[4] && bits[4] > bits[5]);
/// ```
pub fn monkey_bits_per_key(avg_bits_per_key: f64, run_keys: &[u64]) -> Result<Vec<f64>> {
    if !avg_bits_per_key.is_finite()
        || !(MIN_BITS_PER_KEY..=MAX_BITS_PER_KEY).contains(&avg_bits_per_key)
    {
        return Err(Error::invalid(format!(
            "average filter bits per key must be in [{MIN_BITS_PER_KEY}, {MAX_BITS_PER_KEY}], \
             got {avg_bits_per_key}"
        )));
    }
    let total: f64 = run_keys.iter().map(|&n| n as f64).sum();
    if total == 0.0 {
        return Ok(vec![MAX_BITS_PER_KEY; run_keys.len()]);
    }
    let c = fp_slope_bits(avg_bits_per_key);
    let shares: Vec<f64> = run_keys.iter().map(|&n| n as f64 / total).collect();
    let bits_at = |level: f64, share: f64| {
        if share == 0.0 {
            MAX_BITS_PER_KEY
        } else {
            (level - c * share.ln()).clamp(MIN_BITS_PER_KEY, MAX_BITS_PER_KEY)
        }
    };
    let average = |level: f64| -> f64 { shares.iter().map(|&s| s * bits_at(level, s)).sum() };
    // `average` is continuous and nondecreasing in the level; it runs from
    // MIN_BITS_PER_KEY (every run clamped low) to MAX_BITS_PER_KEY (every
    // run clamped high) over this interval, since -c ln s lies in [0, c ln
    // total] for the runs with keys.
    let (mut lo, mut hi) = (
        MIN_BITS_PER_KEY - c * total.ln() - 1.0,
        MAX_BITS_PER_KEY + 1.0,
    );
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if average(mid) < avg_bits_per_key {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let level = 0.5 * (lo + hi);
    Ok(shares.iter().map(|&s| bits_at(level, s)).collect())
}

/// The policy that builds a table for run `run` of a tree whose runs hold
/// `run_keys` keys (the table's run included, with an estimate of its keys
/// after the write): `policy` itself under [`FilterBudget::Uniform`], for a
/// policy without a size, or when the allocation fails; otherwise `policy`
/// resized to the run's [`monkey_bits_per_key`].
pub(crate) fn policy_for_run(
    policy: &Arc<dyn FilterPolicy>,
    budget: FilterBudget,
    run_keys: &[u64],
    run: usize,
) -> Arc<dyn FilterPolicy> {
    if budget == FilterBudget::Uniform {
        return Arc::clone(policy);
    }
    let resized = policy.budget_bits_per_key().and_then(|avg| {
        let bits = *monkey_bits_per_key(avg, run_keys).ok()?.get(run)?;
        policy.with_budget_bits_per_key(bits)
    });
    resized.unwrap_or_else(|| Arc::clone(policy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{BloomPolicy, NoFilter, RibbonPolicy};

    fn weighted_average(bits: &[f64], keys: &[u64]) -> f64 {
        let total: f64 = keys.iter().map(|&n| n as f64).sum();
        bits.iter()
            .zip(keys)
            .map(|(b, &n)| b * n as f64)
            .sum::<f64>()
            / total
    }

    #[test]
    fn one_run_gets_the_average() {
        for avg in [1.0, 6.0, 10.0, 16.0, 100.0] {
            let bits = monkey_bits_per_key(avg, &[12_345]).unwrap();
            assert!((bits[0] - avg).abs() < 1e-9, "{avg}: {bits:?}");
        }
    }

    #[test]
    fn equal_runs_get_equal_bits() {
        let bits = monkey_bits_per_key(10.0, &[500, 500, 500]).unwrap();
        for b in bits {
            assert!((b - 10.0).abs() < 1e-9);
        }
    }

    #[test]
    fn the_closed_form_holds_without_clamping() {
        let keys = [100u64, 1_000, 10_000, 100_000];
        let bits = monkey_bits_per_key(10.0, &keys).unwrap();
        let c = fp_slope_bits(10.0);
        let total: f64 = keys.iter().map(|&n| n as f64).sum();
        let shares: Vec<f64> = keys.iter().map(|&n| n as f64 / total).collect();
        let entropy: f64 = -shares.iter().map(|s| s * s.ln()).sum::<f64>();
        for (b, s) in bits.iter().zip(&shares) {
            let expected = 10.0 - c * (s.ln() + entropy);
            assert!((b - expected).abs() < 1e-6, "{b} vs {expected}");
        }
        // Neighbouring runs a factor 10 apart differ by c ln 10 bits.
        assert!((bits[0] - bits[1] - c * 10f64.ln()).abs() < 1e-6);
        assert!((weighted_average(&bits, &keys) - 10.0).abs() < 1e-6);
    }

    #[test]
    fn clamps_keep_the_average_where_they_can() {
        // At 60 bits per key on average, a run of one key among ten
        // million would want far more than 100.
        let keys = [1u64, 10_000_000, 1_000];
        let bits = monkey_bits_per_key(60.0, &keys).unwrap();
        assert_eq!(bits[0], MAX_BITS_PER_KEY);
        assert!(bits[2] > bits[1], "{bits:?}");
        assert!((weighted_average(&bits, &keys) - 60.0).abs() < 1e-6);
        // At the lowest average every run is at the floor.
        let bits = monkey_bits_per_key(MIN_BITS_PER_KEY, &keys).unwrap();
        assert!(bits.iter().all(|&b| (b - MIN_BITS_PER_KEY).abs() < 1e-6));
        let bits = monkey_bits_per_key(MAX_BITS_PER_KEY, &keys).unwrap();
        assert!(bits.iter().all(|&b| (b - MAX_BITS_PER_KEY).abs() < 1e-6));
    }

    #[test]
    fn the_allocation_lowers_the_summed_false_positive_rate() {
        let keys = [2_000u64, 2_000, 2_000, 60_000, 600_000];
        let bits = monkey_bits_per_key(10.0, &keys).unwrap();
        let fp = |b: f64| blocked_bloom_fp_rate(b, probes_for_bits_per_key(b));
        let uniform = keys.len() as f64 * fp(10.0);
        let monkey: f64 = bits.iter().map(|&b| fp(b)).sum();
        assert!(monkey < 0.7 * uniform, "{monkey} vs {uniform}");
        assert!((weighted_average(&bits, &keys) - 10.0).abs() < 1e-6);
    }

    #[test]
    fn empty_runs_and_bad_averages() {
        assert!(monkey_bits_per_key(10.0, &[]).unwrap().is_empty());
        assert_eq!(
            monkey_bits_per_key(10.0, &[0, 0]).unwrap(),
            vec![MAX_BITS_PER_KEY; 2]
        );
        let bits = monkey_bits_per_key(10.0, &[0, 50]).unwrap();
        assert_eq!(bits[0], MAX_BITS_PER_KEY);
        assert!((bits[1] - 10.0).abs() < 1e-6);
        for bad in [f64::NAN, f64::INFINITY, 0.5, 100.5, -3.0] {
            assert!(matches!(
                monkey_bits_per_key(bad, &[1, 2]),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    #[test]
    fn the_slope_follows_the_theory() {
        let c = fp_slope_bits(10.0);
        assert!((2.0..3.0).contains(&c), "{c}");
        for b in (4..=400).map(|q| q as f64 / 4.0) {
            let c = fp_slope_bits(b);
            assert!(c.is_finite() && (1.0..12.0).contains(&c), "{b}: {c}");
        }
        assert_eq!(fp_slope_bits(f64::NAN), fp_slope_bits(10.0));
        assert_eq!(fp_slope_bits(-5.0), fp_slope_bits(1.0));
        assert_eq!(fp_slope_bits(1e9), fp_slope_bits(100.0));
    }

    #[test]
    fn policies_are_resized_only_when_they_can_be() {
        let keys = [1_000u64, 100_000];
        let bloom: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::new(10.0));
        let small = policy_for_run(&bloom, FilterBudget::Monkey, &keys, 0);
        let large = policy_for_run(&bloom, FilterBudget::Monkey, &keys, 1);
        let expected = monkey_bits_per_key(10.0, &keys).unwrap();
        assert_eq!(small.budget_bits_per_key(), Some(expected[0]));
        assert_eq!(large.budget_bits_per_key(), Some(expected[1]));
        assert_eq!(small.name(), BloomPolicy::NAME);
        let same = policy_for_run(&bloom, FilterBudget::Uniform, &keys, 0);
        assert_eq!(same.budget_bits_per_key(), Some(10.0));

        let ribbon: Arc<dyn FilterPolicy> = Arc::new(RibbonPolicy::new(10.0));
        let small = policy_for_run(&ribbon, FilterBudget::Monkey, &keys, 0);
        assert_eq!(small.name(), RibbonPolicy::NAME);
        assert_eq!(small.budget_bits_per_key(), Some(expected[0]));

        let none: Arc<dyn FilterPolicy> = Arc::new(NoFilter);
        let same = policy_for_run(&none, FilterBudget::Monkey, &keys, 0);
        assert!(Arc::ptr_eq(&same, &none));
        // A run index past the shape leaves the policy as it is.
        let same = policy_for_run(&bloom, FilterBudget::Monkey, &keys, 7);
        assert!(Arc::ptr_eq(&same, &bloom));
    }
}
