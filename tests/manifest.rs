//! Manifest: edit encoding, apply semantics, the manifest log, CURRENT
//! switching and recovery from damage.

mod common;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sievedb::fs::{FileSystem, RealFs};
use sievedb::manifest::{
    manifest_file_name, parse_manifest_file_name, Manifest, ManifestState, TableRecord,
    VersionEdit, CURRENT_FILE_NAME, CURRENT_TEMP_FILE_NAME, MAX_LEVELS,
};
use sievedb::wal::{read_log, LogWriter, RECORD_HEADER_LEN};
use sievedb::Error;

fn table(level: u32, file_number: u64) -> TableRecord {
    TableRecord {
        level,
        file_number,
        file_size: 4096 + file_number,
        smallest: format!("key{file_number:04}a").into_bytes(),
        largest: format!("key{file_number:04}z").into_bytes(),
        smallest_seq: file_number,
        largest_seq: file_number * 10,
    }
}

fn corruption(err: &Error) -> (PathBuf, Option<u64>) {
    match err {
        Error::Corruption { file, offset, .. } => (file.clone(), *offset),
        other => panic!("expected corruption, got {other:?}"),
    }
}

fn p() -> &'static Path {
    Path::new("MANIFEST-000001")
}

#[test]
fn manifest_file_names() {
    assert_eq!(manifest_file_name(123), "MANIFEST-000123");
    assert_eq!(manifest_file_name(1_234_567), "MANIFEST-1234567");
    assert_eq!(parse_manifest_file_name("MANIFEST-000123"), Some(123));
    assert_eq!(
        parse_manifest_file_name("MANIFEST-1234567"),
        Some(1_234_567)
    );
    for bad in [
        "MANIFEST-",
        "MANIFEST-12",
        "MANIFEST-00012a",
        "MANIFEST-+00012",
        "manifest-000012",
        "CURRENT",
        "MANIFEST-99999999999999999999999",
    ] {
        assert_eq!(parse_manifest_file_name(bad), None, "{bad}");
    }
}

#[test]
fn empty_edit_encodes_to_nothing_and_back() {
    let e = VersionEdit::default();
    assert!(e.encode().is_empty());
    assert_eq!(VersionEdit::decode(&[], p(), 0).unwrap(), e);
}

#[test]
fn decode_rejects_damage_with_typed_errors_and_offsets() {
    let full = VersionEdit {
        added: vec![table(1, 7)],
        removed: vec![(0, 3)],
        next_file_number: Some(9),
        last_sequence: Some(70),
        log_number: Some(5),
    };
    let bytes = full.encode();
    assert_eq!(VersionEdit::decode(&bytes, p(), 0).unwrap(), full);

    // Every cut that lands inside a field is corruption; cuts at field
    // boundaries decode to a prefix of the fields.
    let mut boundary_cuts = 0;
    for cut in 0..bytes.len() {
        match VersionEdit::decode(&bytes[..cut], p(), 100) {
            Ok(_) => boundary_cuts += 1,
            Err(e) => {
                let (file, offset) = corruption(&e);
                assert_eq!(file, p());
                let offset = offset.expect("offset");
                assert!((100..100 + bytes.len() as u64).contains(&offset));
            }
        }
    }
    // Fields start at 0 and after each of the 3 counters and the removal.
    assert_eq!(boundary_cuts, 5);

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown tag", vec![6, 1]),
        ("zero tag", vec![0]),
        (
            "overlong varint",
            vec![
                1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        ),
        (
            "overflowing varint",
            vec![
                1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
            ],
        ),
        ("repeated counter", vec![1, 5, 1, 6]),
        ("level too high", vec![4, MAX_LEVELS as u8, 1]),
        ("key runs past end", vec![5, 0, 1, 1, 50, b'a']),
        (
            "huge key length",
            vec![
                5, 0, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        ),
        ("sequence above 2^56-1", {
            let mut v = vec![2];
            v.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
            v
        }),
    ];
    for (what, bytes) in cases {
        let err = VersionEdit::decode(&bytes, p(), 0).expect_err(what);
        assert!(err.is_corruption(), "{what}: {err:?}");
    }

    let mut inverted = table(0, 1);
    std::mem::swap(&mut inverted.smallest, &mut inverted.largest);
    let bad_keys = VersionEdit {
        added: vec![inverted],
        ..Default::default()
    }
    .encode();
    assert!(VersionEdit::decode(&bad_keys, p(), 0)
        .unwrap_err()
        .is_corruption());
    let mut inverted = table(0, 1);
    inverted.smallest_seq = inverted.largest_seq + 1;
    let bad_seqs = VersionEdit {
        added: vec![inverted],
        ..Default::default()
    }
    .encode();
    assert!(VersionEdit::decode(&bad_seqs, p(), 0)
        .unwrap_err()
        .is_corruption());
}

#[test]
fn validate_rejects_what_decode_would_reject() {
    assert!(VersionEdit::default().validate().is_ok());
    let mut t = table(MAX_LEVELS, 1);
    let e = VersionEdit {
        added: vec![t.clone()],
        ..Default::default()
    };
    assert!(matches!(e.validate(), Err(Error::InvalidArgument(_))));
    t.level = 0;
    t.smallest_seq = t.largest_seq + 1;
    let e = VersionEdit {
        added: vec![t],
        ..Default::default()
    };
    assert!(matches!(e.validate(), Err(Error::InvalidArgument(_))));
    let e = VersionEdit {
        removed: vec![(MAX_LEVELS, 1)],
        ..Default::default()
    };
    assert!(matches!(e.validate(), Err(Error::InvalidArgument(_))));
    let e = VersionEdit {
        last_sequence: Some(1 << 56),
        ..Default::default()
    };
    assert!(matches!(e.validate(), Err(Error::InvalidArgument(_))));
}

#[test]
fn apply_adds_removes_moves_and_sets_counters() {
    let mut s = ManifestState::default();
    s.apply(
        &VersionEdit {
            added: vec![table(0, 1), table(0, 2), table(2, 3)],
            next_file_number: Some(4),
            last_sequence: Some(30),
            log_number: Some(1),
            ..Default::default()
        },
        p(),
    )
    .unwrap();
    assert_eq!(s.levels.len(), 3);
    assert_eq!(s.level(0), &[table(0, 1), table(0, 2)]);
    assert!(s.level(1).is_empty());
    assert_eq!(s.level(2), &[table(2, 3)]);
    assert!(s.level(40).is_empty());
    assert_eq!(
        (s.next_file_number, s.last_sequence, s.log_number),
        (4, 30, 1)
    );
    assert_eq!(s.table_count(), 3);

    // Counters left as None keep their values; a compaction moves 1 and 2
    // into level 1 as table 4, and a trivial move re-adds 3 at level 3.
    s.apply(
        &VersionEdit {
            added: vec![table(1, 4), table(3, 3)],
            removed: vec![(0, 1), (0, 2), (2, 3)],
            next_file_number: Some(5),
            ..Default::default()
        },
        p(),
    )
    .unwrap();
    assert!(s.level(0).is_empty());
    assert_eq!(s.level(1), &[table(1, 4)]);
    assert!(s.level(2).is_empty());
    assert_eq!(s.level(3), &[table(3, 3)]);
    assert_eq!(
        (s.next_file_number, s.last_sequence, s.log_number),
        (5, 30, 1)
    );

    // Insertion order is kept within a level.
    s.apply(
        &VersionEdit {
            added: vec![table(1, 9), table(1, 6)],
            ..Default::default()
        },
        p(),
    )
    .unwrap();
    let order: Vec<u64> = s.level(1).iter().map(|t| t.file_number).collect();
    assert_eq!(order, vec![4, 9, 6]);
}

#[test]
fn apply_rejects_impossible_edits_and_leaves_state_unchanged() {
    let mut s = ManifestState::default();
    s.apply(
        &VersionEdit {
            added: vec![table(0, 1), table(1, 2)],
            ..Default::default()
        },
        p(),
    )
    .unwrap();
    let before = s.clone();
    let bad = [
        (
            "remove absent",
            VersionEdit {
                removed: vec![(0, 99)],
                ..Default::default()
            },
        ),
        (
            "remove at wrong level",
            VersionEdit {
                removed: vec![(1, 1)],
                ..Default::default()
            },
        ),
        (
            "remove twice",
            VersionEdit {
                removed: vec![(0, 1), (0, 1)],
                ..Default::default()
            },
        ),
        (
            "add duplicate of live",
            VersionEdit {
                added: vec![table(3, 2)],
                ..Default::default()
            },
        ),
        (
            "add twice in one edit",
            VersionEdit {
                added: vec![table(0, 5), table(1, 5)],
                ..Default::default()
            },
        ),
        (
            "level too high",
            VersionEdit {
                added: vec![table(MAX_LEVELS, 6)],
                ..Default::default()
            },
        ),
        (
            "valid part then invalid part",
            VersionEdit {
                added: vec![table(0, 7)],
                removed: vec![(0, 1), (0, 42)],
                next_file_number: Some(100),
                ..Default::default()
            },
        ),
    ];
    for (what, edit) in bad {
        let err = s.apply(&edit, p()).expect_err(what);
        let (file, _) = corruption(&err);
        assert_eq!(file, p(), "{what}");
        assert_eq!(s, before, "{what}: state changed");
        assert_eq!(s.levels, before.levels, "{what}: levels changed");
    }
}

#[test]
fn state_equality_ignores_trailing_empty_levels_only() {
    let mut a = ManifestState::default();
    a.apply(
        &VersionEdit {
            added: vec![table(2, 1)],
            ..Default::default()
        },
        p(),
    )
    .unwrap();
    let mut b = a.clone();
    b.levels.push(Vec::new());
    assert_eq!(a, b);
    b.levels[1].push(table(1, 2));
    assert_ne!(a, b);
    let mut c = a.clone();
    c.log_number = 3;
    assert_ne!(a, c);
}

/// Builds the edits of a small engine history (flushes into level 0, and
/// every fourth flush a compaction of level 0 into level 1) and the state
/// they produce.
fn history() -> (ManifestState, Vec<VersionEdit>) {
    let mut edits = Vec::new();
    let mut next = 10u64;
    let mut seq = 0u64;
    let mut level0: Vec<u64> = Vec::new();
    for round in 0..20u64 {
        let mut e = VersionEdit::default();
        e.added.push(table(0, next));
        level0.push(next);
        seq += 100;
        e.last_sequence = Some(seq);
        e.log_number = Some(next + 1);
        next += 2;
        if round % 4 == 3 {
            // The compaction's own edit: all of level 0 into one level-1 table.
            edits.push(e);
            e = VersionEdit::default();
            e.removed = level0.drain(..).map(|n| (0, n)).collect();
            e.added.push(table(1, next));
            next += 1;
        }
        e.next_file_number = Some(next);
        edits.push(e);
    }
    let mut state = ManifestState::default();
    for e in &edits {
        state.apply(e, p()).unwrap();
    }
    (state, edits)
}

#[test]
fn create_log_edits_recover_gives_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        Manifest::recover(&RealFs, dir.path()).unwrap().is_none(),
        "new database"
    );

    let (expected, edits) = history();
    assert!(expected.table_count() > 3);
    let mut m = Manifest::create(&RealFs, dir.path(), 1, &ManifestState::default()).unwrap();
    assert_eq!(m.number(), 1);
    assert_eq!(m.path(), dir.path().join("MANIFEST-000001"));
    for e in &edits {
        let before = m.file_size();
        m.log_edit(e).unwrap();
        assert!(m.file_size() > before);
    }
    let on_disk = std::fs::metadata(dir.path().join("MANIFEST-000001"))
        .unwrap()
        .len();
    assert_eq!(m.file_size(), on_disk);

    let (state, number) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    assert_eq!(number, 1);
    assert_eq!(state, expected);
    assert_eq!(state.levels, expected.levels);
    let current = std::fs::read_to_string(dir.path().join(CURRENT_FILE_NAME)).unwrap();
    assert_eq!(current, "MANIFEST-000001\n");
    assert!(!dir.path().join(CURRENT_TEMP_FILE_NAME).exists());
}

#[test]
fn current_switches_to_the_newest_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let (state, edits) = history();
    let mut first = Manifest::create(&RealFs, dir.path(), 1, &ManifestState::default()).unwrap();
    for e in &edits[..10] {
        first.log_edit(e).unwrap();
    }
    let (mid, n) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    assert_eq!(n, 1);
    // Reopen: a fresh manifest from the recovered state, then more edits.
    let mut second = Manifest::create(&RealFs, dir.path(), mid.next_file_number, &mid).unwrap();
    assert_eq!(second.number(), mid.next_file_number);
    for e in &edits[10..] {
        second.log_edit(e).unwrap();
    }
    // The old manifest is still there but CURRENT names the new one.
    assert!(dir.path().join(manifest_file_name(1)).exists());
    let (recovered, n) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    assert_eq!(n, mid.next_file_number);
    assert_eq!(recovered, state);
    // The new manifest starts with a single snapshot record.
    let log = read_log(&RealFs, second.path()).unwrap();
    assert_eq!(log.records.len(), 1 + edits.len() - 10);
    let snap = VersionEdit::decode(&log.records[0], second.path(), 0).unwrap();
    assert_eq!(snap, mid.snapshot_edit());
    // Removing the old manifest does not matter to recovery.
    RealFs
        .remove_file(&dir.path().join(manifest_file_name(1)))
        .unwrap();
    assert_eq!(
        Manifest::recover(&RealFs, dir.path()).unwrap().unwrap().0,
        state
    );
}

#[test]
fn damaged_current_or_missing_manifest_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    Manifest::create(&RealFs, dir.path(), 3, &history().0).unwrap();
    let current = dir.path().join(CURRENT_FILE_NAME);
    for bad in [
        &b""[..],
        b"\n",
        b"garbage",
        b"MANIFEST-3\n",
        b"MANIFEST-00000x\n",
        b"MANIFEST-000003\n\n",
        b"MANIFEST-000003 \n",
        b"../MANIFEST-000003\n",
        b"\xff\xfe\n",
    ] {
        std::fs::write(&current, bad).unwrap();
        let err = Manifest::recover(&RealFs, dir.path()).unwrap_err();
        let (file, _) = corruption(&err);
        assert_eq!(file, current, "{bad:?}");
    }
    // A CURRENT without the trailing newline is still understood.
    std::fs::write(&current, b"MANIFEST-000003").unwrap();
    assert!(Manifest::recover(&RealFs, dir.path()).unwrap().is_some());
    // Naming a manifest that does not exist.
    std::fs::write(&current, b"MANIFEST-000004\n").unwrap();
    let err = Manifest::recover(&RealFs, dir.path()).unwrap_err();
    assert!(err.is_corruption());
    assert!(err.to_string().contains("MANIFEST-000004"), "{err}");
}

#[test]
fn a_corrupt_middle_edit_is_corruption_naming_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let (_, edits) = history();
    let mut m = Manifest::create(&RealFs, dir.path(), 1, &ManifestState::default()).unwrap();
    let mut offsets = Vec::new();
    for e in &edits {
        offsets.push(m.file_size());
        m.log_edit(e).unwrap();
    }
    let path = m.path().to_path_buf();
    let clean = std::fs::read(&path).unwrap();
    let victim = offsets[5];
    let mut data = clean.clone();
    data[victim as usize + RECORD_HEADER_LEN + 2] ^= 0x40;
    std::fs::write(&path, &data).unwrap();
    let err = Manifest::recover(&RealFs, dir.path()).unwrap_err();
    assert_eq!(corruption(&err), (path.clone(), Some(victim)));
}

#[test]
fn a_torn_last_edit_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (_, edits) = history();
    let mut m = Manifest::create(&RealFs, dir.path(), 1, &ManifestState::default()).unwrap();
    for e in &edits[..edits.len() - 1] {
        m.log_edit(e).unwrap();
    }
    let before_last = m.file_size();
    m.log_edit(edits.last().unwrap()).unwrap();
    let full = m.file_size();
    let path = m.path().to_path_buf();
    drop(m);
    let mut expected = ManifestState::default();
    for e in &edits[..edits.len() - 1] {
        expected.apply(e, p()).unwrap();
    }
    for cut in before_last + 1..full {
        RealFs.truncate(&path, cut).unwrap();
        let (state, _) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
        assert_eq!(state, expected, "cut at {cut}");
    }
    // Zeros after the last complete edit are a torn tail too.
    RealFs.truncate(&path, before_last).unwrap();
    let mut f = RealFs.open_append(&path).unwrap();
    f.append(&[0u8; 64]).unwrap();
    drop(f);
    let (state, _) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    assert_eq!(state, expected);
}

#[test]
fn recover_rejects_manifests_that_are_well_framed_but_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let name = manifest_file_name(2);
    let path = dir.path().join(&name);
    std::fs::write(dir.path().join(CURRENT_FILE_NAME), format!("{name}\n")).unwrap();
    let snapshot = ManifestState::default().snapshot_edit();
    // Each case writes the manifest anew (logs are created exclusively).
    let fresh_log = || {
        let _ = std::fs::remove_file(&path);
        LogWriter::create(&RealFs, &path).unwrap()
    };

    // Empty manifest (no snapshot record at all).
    fresh_log();
    assert_eq!(
        corruption(&Manifest::recover(&RealFs, dir.path()).unwrap_err()).0,
        path
    );

    // First record is not a snapshot.
    let mut w = fresh_log();
    w.add_record(
        &VersionEdit {
            added: vec![table(0, 1)],
            ..Default::default()
        }
        .encode(),
    )
    .unwrap();
    assert_eq!(
        corruption(&Manifest::recover(&RealFs, dir.path()).unwrap_err()),
        (path.clone(), Some(0))
    );

    // An edit that removes a table that is not live.
    let mut w = fresh_log();
    w.add_record(&snapshot.encode()).unwrap();
    let second = w.len();
    w.add_record(
        &VersionEdit {
            removed: vec![(0, 77)],
            ..Default::default()
        }
        .encode(),
    )
    .unwrap();
    w.add_record(
        &VersionEdit {
            log_number: Some(3),
            ..Default::default()
        }
        .encode(),
    )
    .unwrap();
    assert_eq!(
        corruption(&Manifest::recover(&RealFs, dir.path()).unwrap_err()),
        (path.clone(), Some(second))
    );

    // A record with a valid checksum but an undecodable payload.
    let mut w = fresh_log();
    w.add_record(&snapshot.encode()).unwrap();
    let second = w.len();
    w.add_record(&[9, 9, 9]).unwrap();
    let (file, offset) = corruption(&Manifest::recover(&RealFs, dir.path()).unwrap_err());
    assert_eq!(file, path);
    assert_eq!(offset, Some(second + RECORD_HEADER_LEN as u64));
}

#[test]
fn create_and_log_edit_reject_unrecoverable_input() {
    let dir = tempfile::tempdir().unwrap();
    let dup = ManifestState {
        levels: vec![vec![table(0, 1)], vec![table(1, 1)]],
        ..Default::default()
    };
    let err = Manifest::create(&RealFs, dir.path(), 1, &dup).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        RealFs.list_dir(dir.path()).unwrap().is_empty(),
        "nothing written"
    );

    let mut m = Manifest::create(&RealFs, dir.path(), 1, &ManifestState::default()).unwrap();
    // Reusing the live manifest's number would truncate it.
    let err = Manifest::create(&RealFs, dir.path(), 1, &ManifestState::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let size = m.file_size();
    let bad = VersionEdit {
        added: vec![table(MAX_LEVELS + 1, 5)],
        ..Default::default()
    };
    assert!(matches!(m.log_edit(&bad), Err(Error::InvalidArgument(_))));
    assert_eq!(m.file_size(), size);
    m.log_edit(&VersionEdit {
        added: vec![table(0, 5)],
        ..Default::default()
    })
    .unwrap();
    let (state, _) = Manifest::recover(&RealFs, dir.path()).unwrap().unwrap();
    assert_eq!(state.level(0), &[table(0, 5)]);
}

fn arb_table() -> impl Strategy<Value = TableRecord> {
    (
        0..MAX_LEVELS,
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..20),
        prop::collection::vec(any::<u8>(), 0..20),
        0..=sievedb::key::MAX_SEQUENCE,
        0..=sievedb::key::MAX_SEQUENCE,
    )
        .prop_map(
            |(level, file_number, file_size, a, b, s1, s2)| TableRecord {
                level,
                file_number,
                file_size,
                smallest: a.clone().min(b.clone()),
                largest: a.max(b),
                smallest_seq: s1.min(s2),
                largest_seq: s1.max(s2),
            },
        )
}

fn arb_edit() -> impl Strategy<Value = VersionEdit> {
    (
        prop::collection::vec(arb_table(), 0..6),
        prop::collection::vec((0..MAX_LEVELS, any::<u64>()), 0..6),
        prop::option::of(any::<u64>()),
        prop::option::of(0..=sievedb::key::MAX_SEQUENCE),
        prop::option::of(any::<u64>()),
    )
        .prop_map(
            |(added, removed, next_file_number, last_sequence, log_number)| VersionEdit {
                added,
                removed,
                next_file_number,
                last_sequence,
                log_number,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn edits_round_trip(edit in arb_edit()) {
        prop_assert!(edit.validate().is_ok());
        let bytes = edit.encode();
        prop_assert_eq!(VersionEdit::decode(&bytes, p(), 0).unwrap(), edit);
    }

    #[test]
    fn decoding_arbitrary_or_damaged_bytes_never_panics(
        edit in arb_edit(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        junk in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = edit.encode();
        if !bytes.is_empty() {
            for (at, x) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= x;
            }
        }
        for input in [&bytes[..], &junk[..]] {
            match VersionEdit::decode(input, p(), 0) {
                Ok(decoded) => {
                    // Whatever decodes is a well-formed edit; applying it
                    // either works or is a typed error.
                    prop_assert!(decoded.validate().is_ok());
                    let mut state = ManifestState::default();
                    if let Err(e) = state.apply(&decoded, p()) {
                        prop_assert!(e.is_corruption());
                    }
                }
                Err(e) => prop_assert!(e.is_corruption()),
            }
        }
    }
}

/// Copies every file of `from` but the lock into `to`.
fn copy_db(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// A database whose manifest names its one table by `table_number`, with
/// next file number `next` (both set by rewriting the manifest, CRCs valid).
fn renumbered(table_number: u64, next: u64) -> (tempfile::TempDir, sievedb::Options) {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let opts = sievedb::Options {
        background_compaction: false,
        ..sievedb::Options::default()
    };
    let db = sievedb::Db::open(src.path(), opts.clone()).unwrap();
    for i in 0..5000u32 {
        db.put(format!("key{i:08}"), [b'v'; 200]).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    copy_db(src.path(), dst.path());
    let (mut state, number) = Manifest::recover(&RealFs, dst.path()).unwrap().unwrap();
    let record = state.levels.iter_mut().flatten().next().unwrap();
    std::fs::rename(
        dst.path().join(format!("{:06}.sst", record.file_number)),
        dst.path().join(format!("{table_number:06}.sst")),
    )
    .unwrap();
    record.file_number = table_number;
    state.next_file_number = next;
    Manifest::create(&RealFs, dst.path(), number + 1000, &state).unwrap();
    (dst, opts)
}

/// Regression (found by review, fifteenth session): open took its next
/// file number from the manifest's counter and the directory's names only,
/// so a manifest naming a live table past its own counter (valid checksums,
/// crafted or damaged contents) had that number handed out again: a flush
/// created the new table with `O_TRUNC` over the mapped live one, and the
/// next read of it died of SIGBUS. Numbers now start past every table the
/// manifest names, and a name past the file-number cap is corruption.
#[test]
fn open_never_reuses_the_number_of_a_table_the_manifest_names() {
    // Below the cap: the table keeps its number, new files go past it.
    let (dir, opts) = renumbered(5_000, 10);
    let db = sievedb::Db::open(dir.path(), opts).unwrap();
    for round in 0..10u32 {
        db.put(format!("new{round}"), b"1").unwrap();
        db.flush().unwrap();
    }
    for i in (0..5000u32).step_by(97) {
        assert_eq!(
            db.get(format!("key{i:08}")).unwrap().as_deref(),
            Some(&[b'v'; 200][..])
        );
    }
    assert!(db.tables().iter().any(|t| t.file_number == 5_000));
    assert!(db.tables().iter().all(|t| t.file_number >= 5_000));
    drop(db);

    // At or past the cap (2^58): refused, nothing overwritten.
    let (dir, opts) = renumbered((1 << 58) + 4, 1 << 58);
    match sievedb::Db::open(dir.path(), opts) {
        Err(Error::Corruption { .. }) => {}
        other => panic!("expected Corruption, got {:?}", other.map(|_| ())),
    }
    let table = dir.path().join(format!("{:06}.sst", (1u64 << 58) + 4));
    assert!(std::fs::metadata(table).unwrap().len() > 100_000);
}

/// Options under which an open database replaces its manifest often: small
/// memtables and tables (a flush or compaction every few writes) and the
/// smallest roll size.
fn rolling_options() -> sievedb::Options {
    sievedb::Options {
        memtable_bytes: 4 << 10,
        table_bytes: 4 << 10,
        level1_bytes: 16 << 10,
        level_size_multiplier: 4,
        block_bytes: 512,
        manifest_roll_bytes: 1024,
        ..sievedb::Options::default()
    }
}

fn manifest_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("MANIFEST-"))
        .collect()
}

/// An open database replaces a manifest grown past
/// `Options::manifest_roll_bytes` (it used to grow by every flush and
/// compaction until the next open): one manifest file is left, its size
/// stays near the limit, `verify` running beside the writes never sees a
/// replaced manifest as damage, and a reopen finds every write.
#[test]
fn an_open_database_replaces_its_manifest_past_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = std::sync::Arc::new(sievedb::Db::open(dir.path(), rolling_options()).expect("open"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let verifier = {
        let (db, stop) = (std::sync::Arc::clone(&db), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut runs = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let report = db.verify().expect("verify");
                assert!(report.is_ok(), "verify run {runs}: {:?}", report.problems);
                runs += 1;
            }
            runs
        })
    };
    let mut largest = 0;
    for i in 0..6_000u32 {
        db.put(format!("k{:06}", i % 2_500), format!("v{i:08}-{:0>60}", i))
            .expect("put");
        if i % 200 == 0 {
            largest = largest.max(db.stats().manifest_bytes);
        }
    }
    db.wait_for_compactions().expect("compactions");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let verify_runs = verifier.join().expect("verifier");
    let stats = db.stats();
    assert!(
        stats.flushes + stats.compactions >= 80,
        "the workload must log many edits: {stats:?}"
    );
    assert!(stats.manifest_rolls >= 3, "{stats:?}");
    // Each roll starts from a snapshot of at most a few dozen tables.
    assert!(
        largest <= 8 << 10,
        "the manifest grew to {largest} bytes: {stats:?}"
    );
    let names = manifest_files(dir.path());
    assert_eq!(names.len(), 1, "old manifests are deleted: {names:?}");
    let on_disk = std::fs::metadata(dir.path().join(&names[0]))
        .expect("manifest")
        .len();
    assert_eq!(on_disk, stats.manifest_bytes);
    assert!(verify_runs >= 1);
    drop(db);

    let db = sievedb::Db::open(dir.path(), rolling_options()).expect("reopen");
    for k in 0..2_500u32 {
        let newest = (0..6_000u32)
            .filter(|i| i % 2_500 == k)
            .max()
            .expect("written");
        assert_eq!(
            db.get(format!("k{k:06}")).expect("get"),
            Some(format!("v{newest:08}-{:0>60}", newest).into_bytes()),
            "key {k}"
        );
    }
}

#[test]
fn a_manifest_roll_size_below_1024_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = sievedb::Options {
        manifest_roll_bytes: 1023,
        ..sievedb::Options::default()
    };
    match sievedb::Db::open(dir.path(), opts) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("manifest_roll_bytes"), "{why}"),
        other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
    }
}

/// Holds `verify`'s read of `CURRENT` (once armed) until `CURRENT` is
/// replaced or a second passes.
#[derive(Debug, Default)]
struct SlowCurrentFs {
    armed: std::sync::atomic::AtomicBool,
    reading: std::sync::atomic::AtomicBool,
    replaced: parking_lot::Mutex<bool>,
    replaced_cv: parking_lot::Condvar,
}

impl common::hooked_fs::FsHooks for SlowCurrentFs {
    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        use std::sync::atomic::Ordering::SeqCst;
        if path.ends_with(CURRENT_FILE_NAME) && self.armed.swap(false, SeqCst) {
            self.reading.store(true, SeqCst);
            let mut replaced = self.replaced.lock();
            if !*replaced {
                self.replaced_cv
                    .wait_for(&mut replaced, std::time::Duration::from_secs(1));
            }
        }
        RealFs.read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        RealFs.rename(from, to)?;
        if to.ends_with(CURRENT_FILE_NAME) {
            *self.replaced.lock() = true;
            self.replaced_cv.notify_all();
        }
        Ok(())
    }
}

/// Regression: `verify` took the manifest's number and length under the
/// engine's lock but read `CURRENT` and the manifest after releasing it; a
/// manifest replaced in between was reported as "CURRENT names another
/// manifest" (or as a missing file). The filesystem here holds `verify`'s
/// read of `CURRENT` until a flush has replaced the manifest.
#[test]
fn verify_is_not_fooled_by_a_manifest_replaced_while_it_runs() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = std::sync::Arc::new(common::hooked_fs::Hooked(SlowCurrentFs::default()));
    let opts = sievedb::Options {
        memtable_bytes: 1 << 20,
        background_compaction: false,
        level0_compaction_trigger: 100,
        level0_stop_writes: 100,
        manifest_roll_bytes: 1024,
        fs: fs.clone(),
        ..sievedb::Options::default()
    };
    let db = std::sync::Arc::new(sievedb::Db::open(dir.path(), opts).expect("open"));
    // Flush until the next edit replaces the manifest.
    let mut i = 0;
    while db.stats().manifest_bytes < 1024 {
        db.put(format!("k{i}"), "v").expect("put");
        db.flush().expect("flush");
        i += 1;
    }
    assert_eq!(db.stats().manifest_rolls, 0);
    // (Open replaced `CURRENT` too.)
    *fs.replaced.lock() = false;
    fs.armed.store(true, SeqCst);
    let verifier = {
        let db = std::sync::Arc::clone(&db);
        std::thread::spawn(move || db.verify().expect("verify"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !fs.reading.load(SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "verify never read CURRENT"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    db.put("last", "v").expect("put");
    db.flush().expect("flush");
    let report = verifier.join().expect("verifier");
    assert_eq!(
        db.stats().manifest_rolls,
        1,
        "the flush replaced the manifest"
    );
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(db.verify().expect("verify").is_ok());
}
