//! Table reader: open arbitrary or damaged table files, check every block and
//! entry, point-read keys, and walk the table cursor forward, backward and
//! both ways from seeks; nothing may panic.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sievedb::filter::key_hash;
use sievedb::iter::InternalIterator;
use sievedb::key::{encode_internal_key, ValueKind};
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
        let table = Arc::new(table);
        let mut cursor = table.iter();
        // Backward from the end, then forward from the start (bounded: a
        // damaged block ends the walk with an error).
        if cursor.seek_to_last().is_ok() {
            for _ in 0..256 {
                if !cursor.valid() || cursor.prev().is_err() {
                    break;
                }
            }
        }
        // Seeks and steps both ways, driven by the input.
        let mut target = Vec::new();
        for (i, key) in rest.chunks(5).take(8).enumerate() {
            target.clear();
            encode_internal_key(&mut target, key, u64::from(key[0]), ValueKind::Put);
            let positioned = if i % 2 == 0 {
                cursor.seek(&target)
            } else {
                cursor.seek_before(&target)
            };
            if positioned.is_err() {
                continue;
            }
            for &step in key.iter().take(8) {
                if !cursor.valid() {
                    break;
                }
                let moved = if step & 1 == 0 {
                    cursor.next()
                } else {
                    cursor.prev()
                };
                if moved.is_err() {
                    break;
                }
            }
        }
    }
});
