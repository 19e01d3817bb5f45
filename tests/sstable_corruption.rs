//! Damaged table files: every open, point read and scan either returns the
//! right answer or `Error::Corruption` naming the file, never a panic, a
//! wrong value or a false "not found".

use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sievedb::filter::{key_hash, BloomPolicy, FilterPolicy, NoFilter, RibbonPolicy};
use sievedb::fs::RealFs;
use sievedb::iter::InternalIterator;
use sievedb::key::{InternalKey, ValueKind, MAX_SEQUENCE};
use sievedb::sstable::format::{Footer, FOOTER_LEN};
use sievedb::sstable::{Compression, Found, Table, TableBuilder, TableOptions};
use sievedb::stats::ReadCounters;
use sievedb::{Error, Result};

fn policies() -> Vec<Arc<dyn FilterPolicy>> {
    vec![
        Arc::new(BloomPolicy::new(10.0)),
        Arc::new(RibbonPolicy::new(10.0)),
        Arc::new(NoFilter),
    ]
}

struct Fixture {
    entries: Vec<(InternalKey, Vec<u8>)>,
    absent: Vec<Vec<u8>>,
    bytes: Vec<u8>,
}

fn fixture(policy: &Arc<dyn FilterPolicy>, dir: &Path) -> Fixture {
    let mut rng = StdRng::seed_from_u64(42);
    let mut entries = Vec::new();
    for i in 0..600u32 {
        let user = format!("key{:06}", i * 2).into_bytes();
        for seq in [30u64, 20] {
            let kind = if rng.gen_bool(0.2) {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            let value = match kind {
                ValueKind::Put => (0..rng.gen_range(0..60)).map(|_| rng.gen()).collect(),
                ValueKind::Delete => Vec::new(),
            };
            entries.push((InternalKey::new(user.clone(), seq + i as u64, kind), value));
        }
    }
    let path = dir.join("orig.sst");
    let opts = TableOptions {
        block_bytes: 512,
        restart_interval: 4,
        filter_policy: Arc::clone(policy),
        prefix_len: None,
        compression: Compression::None,
    };
    // Called once per policy into one directory; tables are created
    // exclusively.
    let _ = std::fs::remove_file(&path);
    let mut b = TableBuilder::new(&RealFs, &path, 1, opts).unwrap();
    for (k, v) in &entries {
        b.add(&k.user_key, k.seq, k.kind, v).unwrap();
    }
    b.set_property("sievedb.hll", vec![7; 40]);
    b.finish().unwrap();
    let absent = (0..600u32)
        .map(|i| format!("key{:06}", i * 2 + 1).into_bytes())
        .collect();
    Fixture {
        entries,
        absent,
        bytes: std::fs::read(&path).unwrap(),
    }
}

fn expect_corruption(err: Error, path: &Path, what: &str) {
    match err {
        Error::Corruption { file, .. } => assert_eq!(file, path, "{what}"),
        other => panic!("{what}: expected corruption, got {other}"),
    }
}

/// Opens, reads every key and absent key, and scans the (possibly damaged)
/// file; every answer must be right or a corruption error.
fn exercise(path: &Path, policy: &Arc<dyn FilterPolicy>, fx: &Fixture) -> (bool, usize) {
    let what = format!("{}", path.display());
    let table = match Table::open(path, 1, policy, Arc::new(ReadCounters::default())) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            expect_corruption(e, path, &what);
            return (false, 0);
        }
    };
    let mut errors = 0;
    let mut check = |r: Result<Option<Found>>, want: Option<Found>| match r {
        Ok(got) => assert_eq!(got, want, "{what}"),
        Err(e) => {
            errors += 1;
            expect_corruption(e, path, &what)
        }
    };
    for (k, v) in fx.entries.iter().step_by(2) {
        // Newest version (even index) at the newest snapshot.
        let want = Found {
            seq: k.seq,
            kind: k.kind,
            value: v.clone(),
        };
        check(
            table.get(&k.user_key, key_hash(&k.user_key), MAX_SEQUENCE),
            Some(want),
        );
    }
    for k in &fx.absent {
        check(table.get(k, key_hash(k), MAX_SEQUENCE), None);
    }
    // Scan: a prefix of the right entries, then either the end (only if
    // complete) or a corruption error.
    let mut it = table.iter();
    let mut i = 0;
    let mut r = it.seek_to_first();
    loop {
        match r {
            Err(e) => {
                errors += 1;
                expect_corruption(e, path, &what);
                break;
            }
            Ok(()) if !it.valid() => {
                assert_eq!(i, fx.entries.len(), "scan ended early without an error");
                break;
            }
            Ok(()) => {
                let (k, v) = &fx.entries[i];
                assert_eq!(it.key(), k.encode().as_slice(), "{what}");
                assert_eq!(it.value(), v.as_slice(), "{what}");
                i += 1;
                r = it.next();
            }
        }
    }
    (true, errors)
}

#[test]
fn flipped_bytes_are_caught_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    for policy in policies() {
        let fx = fixture(&policy, dir.path());
        let path = dir.path().join("damaged.sst");
        let mut rng = StdRng::seed_from_u64(7);
        let (mut opened, mut failed_reads) = (0, 0);
        for _ in 0..200 {
            let mut bytes = fx.bytes.clone();
            let at = rng.gen_range(0..bytes.len());
            bytes[at] ^= rng.gen_range(1..=255u8);
            std::fs::write(&path, &bytes).unwrap();
            let (ok, errors) = exercise(&path, &policy, &fx);
            opened += ok as u32;
            failed_reads += errors;
            // Every flip is in some checksummed block (or the footer), so
            // it is detected by the open or by some read.
            assert!(!ok || errors > 0, "flip at {at} went unnoticed");
        }
        // Most of the file is data blocks, so most flips open fine and fail
        // the reads of one block.
        assert!(opened > 100, "{opened}");
        assert!(failed_reads > 0);
    }
}

#[test]
fn truncated_files_are_corruption() {
    let dir = tempfile::tempdir().unwrap();
    for policy in policies() {
        let fx = fixture(&policy, dir.path());
        let path = dir.path().join("short.sst");
        let mut rng = StdRng::seed_from_u64(8);
        let mut cuts: Vec<usize> = (0..46).map(|_| rng.gen_range(0..fx.bytes.len())).collect();
        cuts.extend([0, 1, FOOTER_LEN - 1, fx.bytes.len() - 1]);
        for cut in cuts {
            std::fs::write(&path, &fx.bytes[..cut]).unwrap();
            let r = Table::open(&path, 1, &policy, Arc::default());
            expect_corruption(r.unwrap_err(), &path, &format!("cut at {cut}"));
            let (ok, _) = exercise(&path, &policy, &fx);
            assert!(!ok);
        }
    }
}

fn footer_of(bytes: &[u8]) -> Footer {
    Footer::decode(&bytes[bytes.len() - FOOTER_LEN..]).unwrap()
}

fn corruption_offset(path: &Path, policy: &Arc<dyn FilterPolicy>) -> Option<u64> {
    match Table::open(path, 1, policy, Arc::default()) {
        Err(Error::Corruption { offset, file, .. }) => {
            assert_eq!(file, path);
            offset
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("damaged table opened"),
    }
}

#[test]
fn damage_is_reported_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let policy: Arc<dyn FilterPolicy> = Arc::new(BloomPolicy::default());
    let fx = fixture(&policy, dir.path());
    let path = dir.path().join("d.sst");
    let len = fx.bytes.len();
    let footer = footer_of(&fx.bytes);
    let write = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = fx.bytes.clone();
        f(&mut b);
        std::fs::write(&path, &b).unwrap();
    };

    // Wrong magic.
    write(&|b| b[len - 1] ^= 0x80);
    assert_eq!(corruption_offset(&path, &policy), Some(len as u64 - 8));
    // Unknown version (one past the newest), with a valid footer checksum.
    write(&|b| {
        let f = len - FOOTER_LEN;
        b[f + 48] = 3;
        let crc = crc32fast::hash(&b[f..f + 52]);
        b[f + 52..f + 56].copy_from_slice(&crc.to_le_bytes());
    });
    assert_eq!(corruption_offset(&path, &policy), Some(len as u64 - 16));
    // A flipped bit in the footer's handles.
    write(&|b| b[len - FOOTER_LEN + 3] ^= 1);
    assert_eq!(corruption_offset(&path, &policy), Some(len as u64 - 12));
    // A flipped bit in the filter block: caught at open, so the filter can
    // never answer a false "absent".
    write(&|b| b[footer.filter.offset as usize + 5] ^= 4);
    assert_eq!(
        corruption_offset(&path, &policy),
        Some(footer.filter.offset)
    );
    // Properties and index blocks.
    write(&|b| b[footer.properties.offset as usize] ^= 1);
    assert_eq!(
        corruption_offset(&path, &policy),
        Some(footer.properties.offset)
    );
    write(&|b| b[footer.index.offset as usize + 1] ^= 1);
    assert_eq!(corruption_offset(&path, &policy), Some(footer.index.offset));
    // A data block: open succeeds, reading its keys fails at its offset.
    write(&|b| b[10] ^= 1);
    let t = Table::open(&path, 1, &policy, Arc::default()).unwrap();
    let k = &fx.entries[0].0.user_key;
    match t.get(k, key_hash(k), MAX_SEQUENCE) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, Some(0)),
        other => panic!("{other:?}"),
    }
}
