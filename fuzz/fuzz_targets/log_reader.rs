//! Log reader: frame checking, torn-tail detection and batch decoding over
//! arbitrary bytes and over valid logs that were then damaged.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sievedb::verify::check_log_bytes;
use sievedb::wal::scan_log;
use sievedb_fuzz::{apply_flips, chunks, encode_batch, frame_records};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let path = Path::new("fuzz.log");
    if mode % 2 == 0 {
        let report = check_log_bytes(rest, path);
        if let Ok(scan) = scan_log(rest, path) {
            assert!(scan.valid_len as usize <= rest.len());
            for r in &scan.records {
                assert!(r.payload.end <= rest.len());
            }
        }
        drop(report);
        return;
    }
    // Well-formed batches from the input, framed, then optionally damaged.
    let split = rest.len() * 3 / 4;
    let (body, flips) = rest.split_at(split);
    // Each batch starts right after the previous one's last sequence.
    let mut next_seq = 1;
    let payloads: Vec<Vec<u8>> = chunks(body)
        .iter()
        .map(|c| {
            let (payload, count) = encode_batch(next_seq, c);
            next_seq += count;
            payload
        })
        .collect();
    let mut log = frame_records(&payloads);
    if flips.len() < 3 {
        // Undamaged: every record must come back and decode.
        let report = check_log_bytes(&log, path);
        assert!(
            report.is_ok(),
            "valid log reported damaged: {:?}",
            report.problems
        );
        assert_eq!(report.log_records as usize, payloads.len());
        return;
    }
    apply_flips(&mut log, flips);
    let report = check_log_bytes(&log, path);
    // Whatever is reported names the log and lies inside it.
    for p in &report.problems {
        assert_eq!(p.file, path);
        assert!(p.offset.is_none_or(|o| o as usize <= log.len()));
    }
});
