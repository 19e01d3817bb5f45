//! Filter decoding: arbitrary filter bytes must decode to something that
//! answers without panicking; built filters damaged by the input likewise,
//! and undamaged ones never give a false negative.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sievedb::filter::{key_hash, may_contain, Filter};
use sievedb_fuzz::{apply_flips, chunks, policy};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let filter = Filter::decode(rest.to_vec());
        for h in rest.chunks(8).take(32) {
            let mut w = [0u8; 8];
            w[..h.len()].copy_from_slice(h);
            let h = u64::from_le_bytes(w);
            let _ = filter.may_contain(h);
            let _ = may_contain(rest, h);
        }
        let _ = (
            filter.len_bytes(),
            filter.format_name(),
            filter.unfiltered(),
        );
        return;
    }
    let split = rest.len() * 3 / 4;
    let (keys, flips) = rest.split_at(split);
    let hashes: Vec<u64> = chunks(keys).iter().map(|k| key_hash(k)).collect();
    let pol = policy(mode / 2);
    let mut bytes = pol.build(&hashes);
    if flips.len() < 3 {
        let filter = Filter::decode(bytes.clone());
        for &h in &hashes {
            assert!(filter.may_contain(h), "false negative");
            assert!(pol.may_contain(&bytes, h), "false negative via policy");
        }
        return;
    }
    apply_flips(&mut bytes, flips);
    let filter = Filter::decode(bytes.clone());
    for &h in &hashes {
        let _ = filter.may_contain(h);
        let _ = pol.may_contain(&bytes, h);
    }
});
