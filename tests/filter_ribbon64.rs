//! Ribbon filters of format 0x06 from crafted bytes: shard tables and
//! trailers with a valid checksum (the CRC is not a MAC) and random
//! solution bits, not written by a builder. Consistent ones must answer
//! exactly as the format's reference query (`may_contain_reference`) on
//! every query path; damaged or inconsistent ones must be rejected without
//! panicking, and decode as undecodable.

mod common;

use common::filters::probes;
#[cfg(unix)]
use common::filters::Guarded;
use rand::{Rng, SeedableRng};
use sievedb::filter::ribbon64::{
    region_blocks, Ribbon64Layout, Ribbon64Table, Shard64, SHARD_ENTRY_BYTES, TRAILER_BYTES,
};
use sievedb::filter::{self, undecodable_filters, Filter, FORMAT_RIBBON64};

/// Every named path of `Ribbon64Layout::on_path`.
const PATHS: [&str; 7] = Ribbon64Layout::PATHS;

/// A crafted filter and what it was made of.
struct Crafted {
    bytes: Vec<u8>,
    num_shards: usize,
}

impl Crafted {
    fn table_start(&self) -> usize {
        self.bytes.len() - TRAILER_BYTES - self.num_shards * SHARD_ENTRY_BYTES
    }
}

/// The table and trailer for `shards` after `solution`, with a valid CRC.
fn assemble(
    solution: &[u8],
    shards: &[Shard64],
    num_shards: u32,
    lower: u32,
    upper: u8,
) -> Vec<u8> {
    let mut out = solution.to_vec();
    let table_start = out.len();
    for s in shards {
        let mut e = [0u8; SHARD_ENTRY_BYTES];
        s.write(&mut e);
        out.extend_from_slice(&e);
    }
    out.extend_from_slice(&num_shards.to_le_bytes());
    out.extend_from_slice(&lower.to_le_bytes());
    out.push(upper);
    let crc = crc32fast::hash(&out[table_start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(FORMAT_RIBBON64);
    out
}

/// Bytes of the two regions of a consistent layout (sizes from the spec,
/// computed here from the shard sizes), filled with random bits; the bits
/// past each region's last slot are zero, as a builder writes them, unless
/// `dirty_padding`.
fn solution_for(
    rng: &mut impl Rng,
    shards: &[Shard64],
    lower: u32,
    upper: u32,
    dirty_padding: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    for region in 0..2 {
        let columns = if region == 0 { upper - 1 } else { upper } as usize;
        let in_region = |i: usize| (i as u32 >= lower) == (region == 1);
        let slots: u64 = (0..shards.len())
            .filter(|&i| in_region(i))
            .map(|i| shards[i].num_slots as u64)
            .sum();
        let blocks = region_blocks(slots) as usize;
        let mut words: Vec<u64> = (0..blocks * columns).map(|_| rng.gen()).collect();
        if !dirty_padding && blocks > 0 {
            // Clear bits from slot `slots` on, in every column.
            for b in 0..blocks {
                for c in 0..columns {
                    let first_slot = b as u64 * 64;
                    let w = &mut words[b * columns + c];
                    if first_slot >= slots {
                        *w = 0;
                    } else if slots - first_slot < 64 {
                        *w &= (1u64 << (slots - first_slot)) - 1;
                    }
                }
            }
        }
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    out
}

/// A random consistent filter: `num_shards` shards of random sizes in
/// `slots`, random seeds, `lower` lower shards, `upper` columns.
fn craft(
    rng: &mut impl Rng,
    num_shards: usize,
    slots: std::ops::RangeInclusive<u16>,
    lower: u32,
    upper: u32,
) -> Crafted {
    let shards: Vec<Shard64> = (0..num_shards)
        .map(|_| Shard64 {
            num_slots: rng.gen_range(slots.clone()),
            seed: rng.gen(),
        })
        .collect();
    let dirty = rng.gen_bool(0.3);
    let solution = solution_for(rng, &shards, lower, upper, dirty);
    Crafted {
        bytes: assemble(&solution, &shards, num_shards as u32, lower, upper as u8),
        num_shards,
    }
}

/// A lower shard count allowed with `upper` columns, often at the edges.
fn random_lower(rng: &mut impl Rng, num_shards: usize, upper: u32) -> u32 {
    if upper == 1 {
        return 0;
    }
    match rng.gen_range(0..4) {
        0 => 0,
        1 => num_shards as u32,
        _ => rng.gen_range(0..=num_shards as u32),
    }
}

/// Every way to query `bytes`, each compared with the reference.
fn check_all_paths(c: &Crafted, probes: &[u64]) {
    let bytes = &c.bytes[..];
    let table = Ribbon64Table::parse(bytes).expect("consistent crafted table");
    let layout = Ribbon64Layout::parse(bytes).expect("consistent crafted layout");
    assert_eq!(layout.num_shards() as usize, c.num_shards);
    assert_eq!(
        layout.shards_by_shift(),
        c.num_shards >= 2 && c.num_shards.is_power_of_two()
    );
    assert_eq!(layout.solution_bytes(), c.table_start());
    let decoded = Filter::decode(bytes);
    assert_eq!(decoded.format_name(), "ribbon");
    assert!(decoded.unfiltered().is_none());
    let paths: Vec<(&str, Ribbon64Layout)> = PATHS
        .iter()
        .filter_map(|&p| layout.clone().on_path(p).map(|l| (p, l)))
        .collect();
    assert!(paths.iter().any(|(p, _)| *p == "portable"));
    // The same bytes in an allocation of exactly their length, so that a
    // read past their end leaves the allocation (AddressSanitizer).
    let exact: Box<[u8]> = bytes.into();
    let name = format!(
        "{} shards, {} lower, {} columns",
        c.num_shards,
        layout.lower_shards(),
        layout.upper_columns()
    );
    let mut wants = Vec::with_capacity(probes.len());
    for &h in probes {
        let want = table.may_contain_reference(bytes, h);
        wants.push(want);
        assert_eq!(layout.may_contain(&exact, h), want, "layout, {name}");
        assert_eq!(decoded.may_contain(h), want, "Filter::decode, {name}");
        assert_eq!(filter::may_contain(&exact, h), want, "generic, {name}");
        assert_eq!(
            layout.may_contain_portable(&exact, h),
            want,
            "portable, {name}"
        );
        assert_eq!(layout.may_contain_scalar(&exact, h), want, "scalar, {name}");
        for answer in [
            layout.may_contain_avx512_narrow_path(&exact, h),
            layout.may_contain_avx512_general_path(&exact, h),
            layout.may_contain_avx2_path(&exact, h),
            layout.may_contain_avx2_narrow_path(&exact, h),
        ] {
            assert!(answer.is_none_or(|a| a == want), "avx512, {name}");
        }
        for (p, l) in &paths {
            assert_eq!(l.may_contain(&exact, h), want, "on_path({p}), {name}");
        }
    }
    let mut out = vec![false; probes.len()];
    decoded.may_contain_batch(probes, &mut out).expect("batch");
    assert_eq!(out, wants, "may_contain_batch, {name}");
    // A clone, and the decoder of tables recorded under a built-in name,
    // answer alike.
    let cloned = decoded.clone();
    let current: std::sync::Arc<dyn filter::FilterPolicy> = std::sync::Arc::new(filter::NoFilter);
    let by_name = Filter::for_policy("sievedb.AnyBuiltin", bytes, &current);
    assert_eq!(by_name.format_name(), "ribbon");
    for (i, &h) in probes.iter().enumerate().take(100) {
        assert_eq!(cloned.may_contain(h), wants[i], "clone, {name}");
        assert_eq!(by_name.may_contain(h), wants[i], "for_policy, {name}");
    }
    // Shorter bytes: the solution alone (every read still inside), then
    // less. Never a read past the end, never a false negative against the
    // whole filter's answer, every path the same answer.
    let table_start = c.table_start();
    for len in [table_start, table_start.saturating_sub(1), table_start / 2] {
        let cut: Box<[u8]> = bytes[..len].into();
        for (i, &h) in probes.iter().enumerate().take(64) {
            let portable = layout.may_contain_portable(&cut, h);
            assert!(portable || !wants[i], "cut {len}, {name}");
            if len == table_start {
                assert_eq!(portable, wants[i], "solution only, {name}");
            }
            assert_eq!(layout.may_contain(&cut, h), portable, "cut {len}, {name}");
            for (p, l) in &paths {
                assert_eq!(l.may_contain(&cut, h), portable, "cut {len}, {p}, {name}");
            }
            for answer in [
                layout.may_contain_avx512_narrow_path(&cut, h),
                layout.may_contain_avx512_general_path(&cut, h),
                layout.may_contain_avx2_path(&cut, h),
                layout.may_contain_avx2_narrow_path(&cut, h),
            ] {
                assert!(answer.is_none_or(|a| a == portable), "cut {len}, {name}");
            }
        }
    }
}

/// Every column count, shard counts from 1 to 2,000, random shard sizes
/// (64 to about 3,000 slots), seeds and lower shard counts: every path
/// answers as the reference.
#[test]
fn crafted_layouts_answer_as_the_reference_on_every_path() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0606);
    for upper in 1..=32u32 {
        // Powers of two among them: the narrow queries find the shard by
        // a shift there (`shards_by_shift`), by `fastrange64` elsewhere.
        let counts: &[usize] = if upper <= 9 || upper % 8 == 0 {
            &[1, 2, 3, 16, 17, 250, 256, 2_000, 2_048]
        } else {
            &[1, 2, 5, 40, 64]
        };
        for &num_shards in counts {
            let lower = random_lower(&mut rng, num_shards, upper);
            let c = craft(&mut rng, num_shards, 64..=3_000, lower, upper);
            let n = if num_shards >= 250 { 3_000 } else { 400 };
            let p = probes(&mut rng, n);
            check_all_paths(&c, &p);
        }
    }
}

/// The edges of the narrow query: shards of exactly 64 slots (one start),
/// of 65 and 127 and 128 (starts near a block's end), the largest shard,
/// empty lower or upper regions, one shard and many: every read must stay
/// inside its region and every path answer as the reference.
#[test]
fn crafted_layouts_at_the_edges() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(64);
    for upper in [1u32, 2, 3, 7, 8, 9, 16, 32] {
        for slots in [64..=64, 65..=65, 64..=127, 127..=129, 60_000..=65_535] {
            for num_shards in [1usize, 2, 5, 32, 33] {
                for lower in [0, 1, num_shards as u32 / 2, num_shards as u32] {
                    let lower = if upper == 1 { 0 } else { lower };
                    let c = craft(&mut rng, num_shards, slots.clone(), lower, upper);
                    let p = probes(&mut rng, 300);
                    check_all_paths(&c, &p);
                }
            }
        }
    }
}

/// Asserts that `bytes` are not a usable format 0x06 filter: parse rejects
/// them, the decoded filter is undecodable and counted, and every query
/// answers "may contain".
fn assert_undecodable(bytes: &[u8], name: &str) {
    assert!(Ribbon64Table::parse(bytes).is_none(), "{name}");
    assert!(Ribbon64Layout::parse(bytes).is_none(), "{name}");
    let before = undecodable_filters();
    let decoded = Filter::decode(bytes);
    let counted = undecodable_filters();
    if bytes.is_empty() {
        assert_eq!(decoded.format_name(), "none", "{name}");
    } else {
        assert_eq!(decoded.format_name(), "undecodable", "{name}");
        assert!(counted > before, "{name}");
    }
    for h in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0] {
        assert!(decoded.may_contain(h), "{name}");
        let before = undecodable_filters();
        assert!(filter::may_contain(bytes, h), "{name}");
        assert!(bytes.is_empty() || undecodable_filters() > before, "{name}");
    }
}

/// Truncated bytes, bytes with a damaged byte (CRC not repaired), and
/// tables that are inconsistent under a valid CRC: never a panic, always
/// undecodable.
#[test]
fn damaged_and_inconsistent_bytes_are_undecodable() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(6);
    let c = craft(&mut rng, 3, 64..=300, 1, 7);
    let bytes = &c.bytes;
    assert!(Ribbon64Layout::parse(bytes).is_some());
    // Every prefix and suffix: the trailer is gone or misread.
    for cut in 0..bytes.len() {
        if bytes[..cut].last() == Some(&FORMAT_RIBBON64) {
            assert_undecodable(&bytes[..cut], &format!("prefix {cut}"));
        }
        if cut > 0 {
            assert_undecodable(&bytes[cut..], &format!("suffix {cut}"));
        }
    }
    // A flipped bit in the table or the trailer (not the id): the CRC fails.
    let table_start = c.table_start();
    for at in table_start..bytes.len() - 1 {
        for bit in [0x01u8, 0x80] {
            let mut damaged = bytes.clone();
            damaged[at] ^= bit;
            assert_undecodable(&damaged, &format!("flip {at}"));
        }
    }
    // Inconsistent under a valid CRC.
    let s = |num_slots, seed| Shard64 { num_slots, seed };
    // (solution bytes, shards, num_shards, lower, upper)
    let region = |slots: u64, cols: u64| (region_blocks(slots) * cols * 8) as usize;
    let cases: Vec<(usize, Vec<Shard64>, u32, u32, u8)> = vec![
        (region(63, 7), vec![s(63, 0)], 1, 0, 7), // too few slots
        (0, vec![s(0, 0)], 1, 0, 7),              // no slots
        (region(64, 7) + 8, vec![s(64, 0)], 1, 0, 7), // a word too many
        (region(64, 7) - 8, vec![s(64, 0)], 1, 0, 7), // a word too few
        (region(64, 6), vec![s(64, 0)], 1, 0, 7), // lower-shard size
        (region(64, 7), vec![s(64, 0)], 1, 2, 7), // lower > shards
        (region(64, 1), vec![s(64, 0)], 1, 0, 0), // no columns
        (region(64, 33), vec![s(64, 0)], 1, 0, 33), // too many columns
        (region(64, 255), vec![s(64, 0)], 1, 0, 255), //
        (region(64, 1), vec![s(64, 0)], 1, 1, 1), // zero-column lower
        // The same with regions sized for what the counts would give
        // (zero-column lower shards, every shard lower): only the count
        // checks reject them.
        (0, vec![s(64, 0)], 1, 1, 1),
        (0, vec![s(64, 0), s(64, 1)], 2, 2, 1),
        (region(64, 6), vec![s(64, 0)], 1, 2, 7),
        (region(128, 6), vec![s(64, 0), s(64, 0)], 2, 3, 7),
        (region(64, 6), vec![s(64, 0)], 1, u32::MAX, 7),
        (region(64, 7), vec![s(64, 0)], 0, 0, 7), // no shards
        (region(64, 7), vec![s(64, 0)], 2, 0, 7), // table too short
        (region(64, 7), vec![s(64, 0)], u32::MAX, 0, 7), // huge shard count
        (region(64, 7), vec![s(64, 0)], u32::MAX / 3, 0, 7),
        (region(64, 7), vec![s(64, 0)], u32::MAX / 3 + 1, 0, 7),
        (64, vec![s(u16::MAX, 0), s(u16::MAX, 1)], 2, 1, 32), // regions larger than the bytes
    ];
    for (len, shards, num_shards, lower, upper) in cases {
        let solution = vec![0xa5u8; len];
        let bytes = assemble(&solution, &shards, num_shards, lower, upper);
        let name = format!("{len} {shards:?} {num_shards} {lower} {upper}");
        assert_undecodable(&bytes, &name);
    }
}

/// Recomputes the CRC of format 0x06 bytes whose trailer is readable, so
/// that random damage to the table reaches the layout checks.
fn fix_crc(bytes: &mut [u8]) {
    let Some(t) = bytes.len().checked_sub(TRAILER_BYTES) else {
        return;
    };
    let num_shards = u32::from_le_bytes(bytes[t..t + 4].try_into().unwrap()) as usize;
    let Some(table_start) = num_shards
        .checked_mul(SHARD_ENTRY_BYTES)
        .and_then(|len| t.checked_sub(len))
    else {
        return;
    };
    let crc = crc32fast::hash(&bytes[table_start..t + 9]);
    bytes[t + 9..t + 13].copy_from_slice(&crc.to_le_bytes());
}

/// Random damage to the shard table, the trailer and the lengths, with the
/// CRC repaired: whatever parses answers as the reference on every path
/// (it is a consistent filter, whoever made it), whatever does not is
/// undecodable. Never a panic, never a read out of bounds.
#[test]
fn damaged_tables_with_repaired_crc_are_rejected_or_answer_as_defined() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xdead);
    let mut parsed = 0;
    for round in 0..400 {
        let upper = rng.gen_range(1..=12u32);
        let num_shards = rng.gen_range(1..=6usize);
        let lower = random_lower(&mut rng, num_shards, upper);
        let mut c = craft(&mut rng, num_shards, 64..=400, lower, upper);
        let table_start = c.table_start();
        let len = c.bytes.len();
        for _ in 0..rng.gen_range(1..=3) {
            match rng.gen_range(0..4) {
                // A table byte (sizes, seeds).
                0 => {
                    let at = rng.gen_range(table_start..len - TRAILER_BYTES);
                    c.bytes[at] = rng.gen();
                }
                // A trailer count byte (num_shards, lower_shards, upper).
                1 => {
                    let at = rng.gen_range(len - TRAILER_BYTES..len - 5);
                    c.bytes[at] ^= 1 << rng.gen_range(0..8);
                }
                // A size moved by one slot or one block.
                2 => {
                    let i = rng.gen_range(0..num_shards);
                    let at = table_start + i * SHARD_ENTRY_BYTES;
                    let old = u16::from_le_bytes([c.bytes[at], c.bytes[at + 1]]);
                    let new = match rng.gen_range(0..4) {
                        0 => old.wrapping_add(1),
                        1 => old.wrapping_sub(1),
                        2 => old.wrapping_add(64),
                        _ => old.wrapping_sub(64),
                    };
                    c.bytes[at..at + 2].copy_from_slice(&new.to_le_bytes());
                }
                // lower_shards moved by one.
                _ => {
                    let at = len - TRAILER_BYTES + 4;
                    let old = u32::from_le_bytes(c.bytes[at..at + 4].try_into().unwrap());
                    let new = if rng.gen() {
                        old.wrapping_add(1)
                    } else {
                        old.wrapping_sub(1)
                    };
                    c.bytes[at..at + 4].copy_from_slice(&new.to_le_bytes());
                }
            }
        }
        fix_crc(&mut c.bytes);
        let name = format!("round {round}");
        match Ribbon64Layout::parse(&c.bytes) {
            Some(layout) => {
                parsed += 1;
                c.num_shards = layout.num_shards() as usize;
                let p = probes(&mut rng, 200);
                check_all_paths(&c, &p);
            }
            None => assert_undecodable(&c.bytes, &name),
        }
    }
    // Some damage keeps the table consistent (a seed, a size moved within
    // its region's last block): those must have been checked too.
    assert!(parsed > 10, "{parsed}");
}

/// `expected_fp_rate` and `num_slots` follow from the table.
#[test]
fn layout_statistics() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let c = craft(&mut rng, 100, 900..=1_100, 23, 7);
    let table = Ribbon64Table::parse(&c.bytes).unwrap();
    let layout = Ribbon64Layout::parse(&c.bytes).unwrap();
    let slots: u64 = table.shards.iter().map(|s| s.num_slots as u64).sum();
    assert_eq!(layout.num_slots(), slots);
    let rate = (23.0 / 64.0 + 77.0 / 128.0) / 100.0;
    assert!((layout.expected_fp_rate() - rate).abs() < 1e-12);
    assert_eq!(layout.upper_columns(), 7);
    assert_eq!(layout.lower_shards(), 23);
    // Random absent keys pass at about that rate.
    let n = 200_000;
    let passed = (0..n)
        .filter(|_| layout.may_contain(&c.bytes, rng.gen()))
        .count();
    let measured = passed as f64 / n as f64;
    assert!((measured - rate).abs() < 0.003, "{measured} vs {rate}");
}

/// The solution alone (no table, no trailer) followed by an inaccessible
/// page, queried on every path: the narrow AVX-512 query reads it without
/// bounds checks (its length is the solution's), so a read of a block past
/// the last region's extra block would fault. Regions ending in every
/// position of their last block, the upper or the lower region last, small
/// shards so that many keys start in the last shard's last slots.
#[cfg(unix)]
#[test]
fn queries_never_read_past_the_solution() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    for upper in [1u32, 2, 5, 8, 9] {
        for slots in [64..=64, 64..=200, 100..=130] {
            for num_shards in [1usize, 2, 7] {
                for lower in [0, num_shards as u32] {
                    let lower = if upper == 1 { 0 } else { lower };
                    let c = craft(&mut rng, num_shards, slots.clone(), lower, upper);
                    let table = Ribbon64Table::parse(&c.bytes).unwrap();
                    let layout = Ribbon64Layout::parse(&c.bytes).unwrap();
                    let paths: Vec<Ribbon64Layout> = PATHS
                        .iter()
                        .filter_map(|&p| layout.clone().on_path(p))
                        .collect();
                    let table_start = c.table_start();
                    for len in [c.bytes.len(), table_start, table_start.saturating_sub(8)] {
                        let guarded = Guarded::new(&c.bytes[..len]);
                        let cut = guarded.bytes();
                        for h in probes(&mut rng, 300) {
                            let want = layout.may_contain_portable(cut, h);
                            if len >= table_start {
                                assert_eq!(want, table.may_contain_reference(&c.bytes, h));
                            }
                            assert_eq!(layout.may_contain(cut, h), want, "length {len}");
                            for l in &paths {
                                assert_eq!(l.may_contain(cut, h), want, "length {len}");
                            }
                            for answer in [
                                layout.may_contain_avx512_narrow_path(cut, h),
                                layout.may_contain_avx512_general_path(cut, h),
                                layout.may_contain_avx2_path(cut, h),
                                layout.may_contain_avx2_narrow_path(cut, h),
                            ] {
                                assert!(answer.is_none_or(|a| a == want), "length {len}");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// On this CPU the layout takes the path its features allow: the narrow
/// AVX-512 one for at most 8 columns when the CPU has AVX-512, else the
/// narrow AVX2 one for at most 8 columns when it has AVX2.
#[test]
fn path_choice() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for upper in [1u32, 8, 9, 32] {
        let c = craft(&mut rng, 2, 64..=100, 0, upper);
        let layout = Ribbon64Layout::parse(&c.bytes).unwrap();
        if layout.uses_avx512() {
            assert_eq!(layout.uses_avx512_narrow(), upper <= 8);
            assert!(!layout.uses_avx2_narrow());
            assert!(!layout.uses_popcnt_narrow());
        } else {
            assert!(!layout.uses_avx512_narrow());
            assert!(layout.clone().on_path("avx512").is_none());
            // Without AVX-512 a narrow layout takes a narrow query: AVX2's,
            // or POPCNT's on CPUs that split 256-bit vectors (and on CPUs
            // without AVX2).
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                layout.uses_avx2_narrow() || layout.uses_popcnt_narrow(),
                upper <= 8 && std::arch::is_x86_feature_detected!("popcnt")
            );
            assert!(!(layout.uses_avx2_narrow() && layout.uses_popcnt_narrow()));
        }
        let avx2_narrow = layout.may_contain_avx2_narrow_path(&c.bytes, 1);
        let avx2_general = layout.may_contain_avx2_path(&c.bytes, 1);
        assert_eq!(avx2_narrow.is_some(), avx2_general.is_some() && upper <= 8);
        assert!(layout.clone().on_path("portable").is_some());
        assert!(layout.on_path("nonsense").is_none());
    }
}
