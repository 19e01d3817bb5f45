//! Filter decoding: arbitrary filter bytes must decode to something that
//! answers without panicking; built filters damaged by the input likewise,
//! and undamaged ones never give a false negative. Ribbon bytes may have
//! their table checksum repaired first (mode bit 1 for raw bytes, a flip
//! list of length 1 mod 3 for damaged ones), so that crafted shard tables
//! reach the layout checks and the unchecked query; every query path of a
//! Ribbon layout must then give the portable path's answer (format 0x05) or
//! the reference's (format 0x06).
//!
//! Built filters: the Ribbon policy builds format 0x06. Odd modes with bit 7
//! set and bit 6 clear build format 0x06 from the input (`build_ribbon64`:
//! tiny shards, clustered hashes, duplicates, forced seed failures); with
//! both bits set, a Ribbon policy builds format 0x05 (still built when asked
//! for, and read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sievedb::filter::ribbon::{BuildKnobs, RibbonFormat, RibbonLayout};
use sievedb::filter::ribbon64::{Ribbon64Layout, Ribbon64Table};
use sievedb::filter::{key_hash, may_contain, Filter, RibbonPolicy};
use sievedb_fuzz::{
    apply_flips, build_ribbon64, chunks, craft_ribbon64, fix_ribbon64_crc, fix_ribbon_crc, policy,
};

/// Every path of a parsed Ribbon layout, on the bytes and on a prefix,
/// agrees with the portable one.
fn check_ribbon_paths(bytes: &[u8], hashes: impl Iterator<Item = u64> + Clone) {
    let Some(layout) = RibbonLayout::parse(bytes) else {
        return;
    };
    let paths: Vec<RibbonLayout> = ["avx512", "avx2", "scalar"]
        .iter()
        .filter_map(|p| layout.clone().on_path(p))
        .collect();
    let decoded = Filter::decode(bytes);
    for h in hashes {
        let want = layout.may_contain_portable(bytes, h);
        assert_eq!(decoded.may_contain(h), want, "Filter::decode");
        assert_eq!(may_contain(bytes, h), want, "filter::may_contain");
        for l in &paths {
            assert_eq!(l.may_contain(bytes, h), want, "path");
        }
        let cut = &bytes[..bytes.len() / 2];
        let want = layout.may_contain_portable(cut, h);
        for l in &paths {
            assert_eq!(l.may_contain(cut, h), want, "path, cut");
        }
    }
}

/// Every path of a parsed format 0x06 layout, on the bytes and on a
/// prefix, agrees with the reference query (on the prefix: with the
/// portable path, never a false negative against the whole bytes).
fn check_ribbon64_paths(bytes: &[u8], hashes: impl Iterator<Item = u64>) {
    let (Some(table), Some(layout)) = (Ribbon64Table::parse(bytes), Ribbon64Layout::parse(bytes))
    else {
        assert!(Ribbon64Table::parse(bytes).is_none());
        assert!(Ribbon64Layout::parse(bytes).is_none());
        return;
    };
    let paths: Vec<Ribbon64Layout> = ["avx512", "avx512-general", "avx2", "popcnt", "portable"]
        .iter()
        .filter_map(|p| layout.clone().on_path(p))
        .collect();
    let decoded = Filter::decode(bytes);
    assert_eq!(decoded.format_name(), "ribbon");
    let cut = &bytes[..bytes.len() / 2];
    for h in hashes {
        let want = table.may_contain_reference(bytes, h);
        assert_eq!(decoded.may_contain(h), want, "Filter::decode");
        assert_eq!(may_contain(bytes, h), want, "filter::may_contain");
        assert_eq!(layout.may_contain(bytes, h), want, "layout");
        for l in &paths {
            assert_eq!(l.may_contain(bytes, h), want, "path");
        }
        let portable = layout.may_contain_portable(cut, h);
        assert!(portable || !want, "cut: false negative");
        for l in &paths {
            assert_eq!(l.may_contain(cut, h), portable, "path, cut");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let probes = |bytes: &[u8]| {
        let seeds: Vec<u64> = bytes
            .chunks(8)
            .take(32)
            .map(|h| {
                let mut w = [0u8; 8];
                w[..h.len()].copy_from_slice(h);
                u64::from_le_bytes(w)
            })
            .collect();
        seeds
            .into_iter()
            .chain((0..64u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
    };
    if mode % 2 == 0 && mode & 4 != 0 {
        let mut bytes = craft_ribbon64(rest);
        assert!(Ribbon64Layout::parse(&bytes).is_some(), "crafted 0x06");
        check_ribbon64_paths(&bytes, probes(rest));
        // Damage: byte `rest[0]` of the table and trailer (from the end)
        // set to `rest[1]`, the checksum repaired.
        if let [at, value, ..] = *rest {
            let len = bytes.len();
            let at = len - 1 - (at as usize % len.min(64));
            bytes[at] = value;
            fix_ribbon64_crc(&mut bytes);
            let filter = Filter::decode(&bytes);
            let _ = filter.format_name();
            check_ribbon64_paths(&bytes, probes(rest));
        }
        return;
    }
    if mode % 2 == 0 {
        let mut rest = rest.to_vec();
        if mode & 2 != 0 {
            fix_ribbon_crc(&mut rest);
            fix_ribbon64_crc(&mut rest);
        }
        let rest = &rest[..];
        let filter = Filter::decode(rest.to_vec());
        let hashes = rest.chunks(8).take(32).map(|h| {
            let mut w = [0u8; 8];
            w[..h.len()].copy_from_slice(h);
            u64::from_le_bytes(w)
        });
        for h in hashes.clone() {
            let _ = filter.may_contain(h);
            let _ = may_contain(rest, h);
        }
        check_ribbon_paths(
            rest,
            hashes.chain((0..64u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))),
        );
        check_ribbon64_paths(rest, probes(rest));
        let _ = (
            filter.len_bytes(),
            filter.format_name(),
            filter.unfiltered(),
        );
        return;
    }
    if mode & 0xc0 == 0x80 {
        // A format 0x06 build (see `build_ribbon64`): no false negative on
        // any path, and 0x06 bytes parse and answer as the reference.
        let (hashes, bytes) = build_ribbon64(rest);
        let filter = Filter::decode(&bytes);
        for &h in &hashes {
            assert!(filter.may_contain(h), "false negative (0x06 build)");
        }
        if bytes.last() == Some(&sievedb::filter::FORMAT_RIBBON64) {
            let table = Ribbon64Table::parse(&bytes).expect("built 0x06 bytes parse");
            for &h in &hashes {
                assert!(table.may_contain_reference(&bytes, h), "reference");
            }
            // A few hundred: `filter::may_contain` parses the whole
            // table per key (thousands of shards here).
            check_ribbon64_paths(&bytes, hashes.iter().copied().take(256));
        }
        return;
    }
    let split = rest.len() * 3 / 4;
    let (keys, flips) = rest.split_at(split);
    let hashes: Vec<u64> = chunks(keys).iter().map(|k| key_hash(k)).collect();
    let pol = policy(mode / 2);
    let mut bytes = if mode & 0xc0 == 0xc0 && pol.name() == RibbonPolicy::NAME {
        let knobs = BuildKnobs {
            format: RibbonFormat::Rows128,
            ..BuildKnobs::default()
        };
        RibbonPolicy::new(10.0).build_with(&hashes, knobs).0
    } else {
        pol.build(&hashes)
    };
    if flips.len() < 3 {
        let filter = Filter::decode(bytes.clone());
        for &h in &hashes {
            assert!(filter.may_contain(h), "false negative");
            assert!(pol.may_contain(&bytes, h), "false negative via policy");
        }
        check_ribbon_paths(&bytes, hashes.iter().copied());
        check_ribbon64_paths(&bytes, hashes.iter().copied());
        return;
    }
    apply_flips(&mut bytes, flips);
    if flips.len() % 3 == 1 {
        fix_ribbon_crc(&mut bytes);
        fix_ribbon64_crc(&mut bytes);
    }
    let filter = Filter::decode(bytes.clone());
    for &h in &hashes {
        let _ = filter.may_contain(h);
        let _ = pol.may_contain(&bytes, h);
    }
    check_ribbon_paths(&bytes, hashes.iter().copied());
    check_ribbon64_paths(&bytes, hashes.iter().copied());
});
