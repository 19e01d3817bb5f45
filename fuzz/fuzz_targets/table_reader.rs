//! Table reader: open arbitrary or damaged table files, check every block and
//! entry, and point-read keys; nothing may panic.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sievedb::filter::key_hash;
use sievedb::sstable::Table;
use sievedb::stats::ReadCounters;
use sievedb::verify::check_table_file;
use sievedb_fuzz::{apply_flips, build_table, fix_table_checksums, policy, scratch_file};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let path = scratch_file("t.sst");
    let bytes = match mode % 4 {
        // Raw bytes, as they come, or with repaired checksums.
        0 => rest.to_vec(),
        1 => {
            let mut b = rest.to_vec();
            fix_table_checksums(&mut b);
            b
        }
        // A valid table built from the input, then damaged (and, in mode 3,
        // with checksums repaired so the damage reaches the block decoders).
        m => {
            let split = rest.len() * 2 / 3;
            let (entries, flips) = rest.split_at(split);
            if !build_table(&path, entries, mode / 4) {
                return;
            }
            let mut b = std::fs::read(&path).expect("read built table");
            apply_flips(&mut b, flips);
            if m == 3 {
                fix_table_checksums(&mut b);
            }
            b
        }
    };
    std::fs::write(&path, &bytes).expect("write scratch table");
    let pol = policy(mode / 4);
    let _ = check_table_file(&path, 1, None, &pol);
    if let Ok(table) = Table::open(&path, 1, &pol, Arc::new(ReadCounters::default())) {
        for key in rest.chunks(7).take(16) {
            let _ = table.get(key, key_hash(key), u64::MAX >> 8);
        }
    }
});
