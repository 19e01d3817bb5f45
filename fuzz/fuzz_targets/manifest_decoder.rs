//! Manifest decoder: version-edit decoding (with an encode/decode round trip
//! for everything accepted) and whole-manifest replay.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sievedb::manifest::VersionEdit;
use sievedb::verify::check_manifest_bytes;
use sievedb_fuzz::{chunks, frame_records};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let path = Path::new("MANIFEST-000001");
    match mode % 3 {
        0 => {
            if let Ok(edit) = VersionEdit::decode(rest, path, 0) {
                let again = VersionEdit::decode(&edit.encode(), path, 0)
                    .expect("re-decoding an encoded edit");
                assert_eq!(edit, again);
            }
        }
        1 => {
            let _ = check_manifest_bytes(rest, path);
        }
        _ => {
            // Raw edits framed as valid records: exercises replay.
            let payloads: Vec<Vec<u8>> = chunks(rest).into_iter().map(<[u8]>::to_vec).collect();
            let _ = check_manifest_bytes(&frame_records(&payloads), path);
        }
    }
});
