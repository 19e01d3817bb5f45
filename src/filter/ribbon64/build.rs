//! The build of format 0x06: keys partitioned into shards, each shard
//! banded (several at once, [`band`](super::band)) and back-substituted
//! straight into its region ([`backsub`]), then the shard
//! table and trailer of the module doc.

use super::backsub;
use super::band::{run_jobs, Band, BandCode, Bands, Job, LaneRow, RowCode, MAX_LANES};
use super::{
    region_blocks, seed_mask, Shard64, FORMAT_RIBBON64, MAX_COLUMNS, MAX_SHARD_SLOTS,
    MIN_SHARD_SLOTS, SHARD_ENTRY_BYTES, TRAILER_BYTES, WORD_BYTES,
};
use crate::filter::ribbon::{BuildKnobs, BuildOutcome, RowPrep, MAX_SEEDS, MIN_SLOTS};
use crate::filter::shards::ShardedKeys;

/// Keys per shard format 0x06 aims at (shards hold
/// `n / ceil(n / SHARD_KEYS_64)` keys on average).
///
/// Chosen with [`overhead64_for_keys`] (see there): at 1,000,000 keys,
/// shards of 512, 1,024 and 2,048 keys at the most overhead that keeps
/// 6.96 bits/key (1.9%, 2.2%, 2.5%) built in 22.1-22.6, 21.4-21.5 and
/// 21.3-21.4 ns/key with four lanes (`cargo run --release --example
/// ribbon_build -- 1000000 9 <shard keys> 4 <overhead>`, two runs each),
/// and failed 2.8%, 10% and 20% of seeds; 4,096-key shards fail over a
/// third of their seeds at that size. 1,024 is as fast as 2,048, fails
/// half as often and keeps more room under 6.96 bits/key.
pub const SHARD_KEYS_64: usize = 1024;

/// Shards a format 0x06 build bands at once by default.
///
/// Four since the thirtieth session, when the bands of default shards got
/// a stride fixed at compile time (`band::FIXED_STRIDE`) and the step a
/// shorter dependent chain: four lanes then built in 24.0-25.6 ns/key
/// against 25.7-27.7 for three and 26.0-27.8 for the previous code's three
/// (`cargo run --release --example ribbon_build -- 1000000 9 1024
/// <lanes>`, five alternating rounds, Intel Xeon; docs/filters.md,
/// "Thirtieth session"). The step keeps four registers per lane, so the
/// compiler keeps three of the four next-row pointers and one lane's
/// result on the stack (`objdump -d`); the chain of
/// dependent instructions, not the instruction count, bounds the loop, so
/// a fourth chain in flight gains more than the spill costs. Before that
/// change three lanes were the fastest: 19.4-20.5 ns/key against
/// 21.7-22.4 for two and 22.5-23.0 for four (three rounds, another
/// machine).
pub const LANES_64: usize = 4;

/// The most keys a shard is given whatever the shard size knob says, so
/// that its slots fit the 16-bit size with room for overhead.
const MAX_SHARD_KEYS: usize = 60_000;

/// Slot overhead (slots / keys - 1) a format 0x06 shard of `num_keys` keys
/// is built with: the most overhead (fastest build: fewer elimination
/// steps and failed seeds) that keeps a 1,000,000-key filter at 10
/// Bloom-equivalent bits per key (0.95% false positives, columns 7 and 6)
/// at or below 6.96 bits/key with shards of that size.
///
/// Measured with `cargo run --release --example ribbon_overhead -- 1 64`
/// (1,000,000 random key hashes, seven trials per cell; failure rate per
/// seed over all shards of all trials, bits/key of the whole filter,
/// elimination steps per key over 200 single shards including the steps
/// of failed seeds):
///
/// | shard keys | overhead | failure rate per seed | bits/key | steps/key |
/// |---:|---:|---:|---:|---:|
/// | 512 | 1.5% | 0.035 | 6.933 | 15.2 |
/// | 512 | 1.8% | 0.028 | 6.953 | 14.3 |
/// | 512 | 2.0% | 0.024 | 6.966 | 14.1 |
/// | 512 | 2.5% | 0.017 | 7.001 | 13.6 |
/// | 1024 | 1.5% | 0.153 | 6.907 | 14.5 |
/// | 1024 | 2.0% | 0.117 | 6.941 | 13.5 |
/// | 1024 | 2.2% | 0.103 | 6.954 | 12.8 |
/// | 1024 | 2.5% | 0.093 | 6.974 | 12.1 |
/// | 1024 | 3.0% | 0.066 | 7.008 | 11.3 |
/// | 2048 | 2.0% | 0.286 | 6.926 | 14.6 |
/// | 2048 | 2.2% | 0.252 | 6.940 | 12.9 |
/// | 2048 | 2.5% | 0.211 | 6.960 | 12.0 |
/// | 2048 | 3.0% | 0.162 | 6.995 | 10.6 |
/// | 4096 | 2.5% | 0.390 | 6.956 | 13.1 |
/// | 4096 | 3.0% | 0.284 | 6.990 | 11.3 |
///
/// Points at 512 (1.9%), 1,024 (2.2%) and 2,048 keys (2.5%), linear in
/// log2(keys) between them, flat outside. Each shard is sized by its own
/// key count; shards well below [`SHARD_KEYS_64`] keys occur when the keys
/// split into few shards (1,500 keys: two of about 750), larger ones only
/// with the shard size knob.
pub fn overhead64_for_keys(num_keys: usize) -> f64 {
    const POINTS: [(f64, f64); 3] = [(9.0, 0.019), (10.0, 0.022), (11.0, 0.025)];
    let x = (num_keys.max(1) as f64).log2();
    if x <= POINTS[0].0 {
        return POINTS[0].1;
    }
    for pair in POINTS.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if x <= x1 {
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
        }
    }
    POINTS[POINTS.len() - 1].1
}

/// Shards a format 0x06 build splits `num_keys` keys into, aiming at
/// `shard_keys` keys per shard (clamped to `1..=60,000`).
///
/// With `exact`, `ceil(num_keys / shard_keys)`; otherwise the power of two
/// nearest to it (on a log scale; 1 or more), provided the shards keep at
/// most 60,000 keys on average. The format reads any count, and a query
/// finds a key's shard as `fastrange64(h, num_shards)`; for a power of two
/// `2^k` that is `h >> (64 - k)`, which the narrow queries compute with
/// one shift instead of a 128-bit multiply before they can load the shard's
/// entry. With the default 1,024 keys a shard then holds between about 724
/// and 1,448 keys, all within the points of [`overhead64_for_keys`].
/// Measured with `cargo run --release --example filter_race -- 1000000
/// 200` (1,024 shards of 977 keys against 977 of 1,024, the committed
/// binary and the change in turn, three pairs): ribbon / bloom query 1.82x,
/// 1.91x, 1.87x against 1.88x, 1.94x, 1.99x for present keys, 1.84x,
/// 1.93x, 1.95x against 1.98x, 2.01x, 2.06x for absent ones.
pub fn shard_count_64(num_keys: usize, shard_keys: usize, exact: bool) -> usize {
    let shard_keys = shard_keys.clamp(1, MAX_SHARD_KEYS);
    let count = num_keys.div_ceil(shard_keys).max(1);
    if exact || count.is_power_of_two() {
        return count;
    }
    let Some(up) = count.checked_next_power_of_two() else {
        return count;
    };
    let down = up / 2;
    // `count` nearer `down` than `up` on a log scale: count / down < up /
    // count, i.e. count^2 < up * down (no overflow: count < up <= 2^63 only
    // for absurd key counts, so compare in f64).
    let nearer_down = (count as f64) * (count as f64) < (up as f64) * (down as f64);
    if nearer_down && num_keys.div_ceil(down) <= MAX_SHARD_KEYS {
        down
    } else {
        up
    }
}

/// Builds format 0x06 bytes for `key_hashes` with `upper_columns` (`1..=32`)
/// result columns in the upper shards, `upper_share` (`0..=1`) the share of
/// keys that should use them (the others use one column less), and the
/// format 0x06 knobs of `knobs` (`overhead`, `max_seeds`, `shard_keys_64`,
/// `lanes_64`, `solve_path`).
///
/// `None` when the filter would be tiny (fewer than
/// [`MIN_SLOTS`] slots), too large for
/// the format, or a shard failed every seed it may try: the caller then
/// builds the blocked Bloom fallback. The outcome counts shards and failed
/// seeds either way (`fell_back_to_bloom` is left to the caller).
pub(crate) fn build(
    key_hashes: &[u64],
    upper_columns: u32,
    upper_share: f64,
    knobs: &BuildKnobs,
) -> (Option<Vec<u8>>, BuildOutcome) {
    let none = |outcome| (None, outcome);
    let n = key_hashes.len();
    let upper = upper_columns.clamp(1, MAX_COLUMNS);
    let overhead_of = |keys: usize| knobs.overhead_for(keys, overhead64_for_keys);
    if n == 0 || (n as f64 * (1.0 + overhead_of(n))) < MIN_SLOTS as f64 {
        return none(BuildOutcome::default());
    }
    let num_shards = shard_count_64(n, knobs.shard_keys_64, knobs.exact_shard_count_64);
    if num_shards > u32::MAX as usize {
        return none(BuildOutcome::default());
    }
    // The key-weighted rate mix: shards hold about equal numbers of keys,
    // so the share of lower shards is the share of lower keys.
    let lower_shards = if upper == 1 {
        0
    } else {
        let lower_share = (1.0 - upper_share).clamp(0.0, 1.0);
        ((lower_share * num_shards as f64).round() as usize).min(num_shards)
    };
    let columns_of = |i: usize| (upper - u32::from(i < lower_shards)) as usize;

    // Partition the hashes by shard, as queries find them.
    let sharded = ShardedKeys::new(key_hashes, num_shards);

    // Shard sizes and region offsets first, so the output is allocated once.
    let mut shards = Vec::with_capacity(num_shards);
    let mut offsets = Vec::with_capacity(num_shards);
    let mut region_slots = [0u64; 2];
    for i in 0..num_shards {
        let keys = sharded.keys(i).len();
        let wanted = (keys as f64 * (1.0 + overhead_of(keys))).ceil();
        let slots = if wanted.is_finite() {
            wanted as usize
        } else {
            0
        };
        let slots = slots.clamp(MIN_SHARD_SLOTS, MAX_SHARD_SLOTS);
        let region = usize::from(i >= lower_shards);
        offsets.push(region_slots[region] as usize);
        region_slots[region] += slots as u64;
        shards.push(Shard64 {
            num_slots: slots as u16,
            seed: 0,
        });
    }
    if region_slots.iter().any(|&s| s > u32::MAX as u64) {
        return none(BuildOutcome::default());
    }
    let region_bytes = |region: usize, columns: u32| {
        region_blocks(region_slots[region]) as usize * columns as usize * WORD_BYTES
    };
    let region0 = region_bytes(0, upper - 1);
    let region1 = region_bytes(1, upper);
    let table_start = region0 + region1;
    let table_bytes = num_shards * SHARD_ENTRY_BYTES;
    let mut out = vec![0u8; table_start + table_bytes + TRAILER_BYTES];

    let mut outcome = BuildOutcome {
        shards: num_shards as u32,
        ..BuildOutcome::default()
    };
    // Shards are banded up to `lanes` at a time (`run_jobs`), started in
    // shard order; a lane tries its shard's seeds in order until one
    // solves, the shard is then solved into `out` and the lane takes the
    // next shard. A shard's bytes depend only on its keys and seeds, so
    // the schedule does not change them.
    let lanes = knobs.lanes_64.clamp(1, MAX_LANES);
    let code = if knobs.band_baseline {
        BandCode::Baseline
    } else {
        BandCode::detect()
    };
    let rows = match knobs.rows {
        RowPrep::Detect => RowCode::detect(),
        RowPrep::OneAtATime => RowCode::Scalar,
        RowPrep::EightAtATime => RowCode::vector().unwrap_or(RowCode::Scalar),
    };
    let max_seeds = knobs.max_seeds.min(MAX_SEEDS);
    // One stride for every band, so any of them can be banded together:
    // room for the largest shard's slots, its sink and its zero cell.
    let stride = shards
        .iter()
        .map(|s| s.num_slots as usize)
        .max()
        .unwrap_or(0)
        + 2;
    let mut bands = Bands::take(stride);
    let mut failures = vec![0u32; num_shards];
    // The lowest shard that failed every seed (`num_shards`: none yet);
    // shards after it are not worth banding.
    let mut exhausted = num_shards;
    let mut jobs: Vec<Job> = Vec::with_capacity(lanes);
    let mut next_shard = 0;
    let (regions0, regions1) = out.split_at_mut(region0);
    let regions1 = &mut regions1[..region1];
    let mut solve = |band: &Band, i: usize| {
        let region = if i < lower_shards {
            &mut *regions0
        } else {
            &mut *regions1
        };
        backsub::solve(
            band.coeffs(),
            band.results(),
            offsets[i],
            columns_of(i),
            region,
            knobs.solve_path,
        );
    };
    loop {
        while jobs.len() < lanes && next_shard < exhausted {
            let shard = next_shard;
            next_shard += 1;
            if max_seeds == 0 {
                exhausted = shard;
                break;
            }
            let keys = sharded.keys(shard);
            if keys.is_empty() {
                // Nothing to solve: its slots stay 0, seed 0.
                continue;
            }
            let band = (0..MAX_LANES)
                .find(|&b| jobs.iter().all(|job| job.band != b))
                .expect("a free band");
            bands[band].prepare_with(rows, keys, shards[shard].num_slots as usize, seed_mask(0));
            jobs.push(Job {
                shard,
                band,
                seed: 0,
                at: LaneRow::first(&bands[band]),
            });
        }
        if jobs.is_empty() {
            break;
        }
        let (stopped, solved) = run_jobs(code, &mut bands, &mut jobs);
        let job = &mut jobs[stopped];
        if solved {
            shards[job.shard].seed = job.seed as u8;
            solve(&bands[job.band], job.shard);
            jobs.swap_remove(stopped);
            continue;
        }
        failures[job.shard] += 1;
        job.seed += 1;
        if job.seed < max_seeds {
            let band = &mut bands[job.band];
            band.prepare_with(
                rows,
                sharded.keys(job.shard),
                shards[job.shard].num_slots as usize,
                seed_mask(job.seed as u8),
            );
            job.at = LaneRow::first(band);
        } else {
            exhausted = exhausted.min(job.shard);
            jobs.retain(|job| job.shard < exhausted);
        }
    }
    if exhausted < num_shards {
        // As if the shards had been built one after another: the failures
        // up to the first shard that failed every seed.
        outcome.failed_seeds = failures[..=exhausted].iter().sum();
        return none(outcome);
    }
    outcome.failed_seeds = failures.iter().sum();

    for (i, shard) in shards.iter().enumerate() {
        shard.write(&mut out[table_start + i * SHARD_ENTRY_BYTES..]);
    }
    let t = table_start + table_bytes;
    out[t..t + 4].copy_from_slice(&(num_shards as u32).to_le_bytes());
    out[t + 4..t + 8].copy_from_slice(&(lower_shards as u32).to_le_bytes());
    out[t + 8] = upper as u8;
    let crc = crc32fast::hash(&out[table_start..t + 9]);
    out[t + 9..t + 13].copy_from_slice(&crc.to_le_bytes());
    out[t + 13] = FORMAT_RIBBON64;
    (Some(out), outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_table_is_monotone_and_bounded() {
        let mut last = 0.0;
        for keys in (0..40).map(|i| (1.5f64.powi(i) as usize).max(1)) {
            let o = overhead64_for_keys(keys);
            assert!((0.019..=0.025).contains(&o) && o >= last, "{keys}: {o}");
            last = o;
        }
        assert_eq!(overhead64_for_keys(SHARD_KEYS_64), 0.022);
    }
}
