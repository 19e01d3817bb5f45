//! Record log: round trips, torn tails, corruption detection, appending after
//! recovery, and robustness against arbitrary damage.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use sievedb::fs::{FileSystem, RealFs, WritableFile};

mod common;
use common::hooked_fs::{FsHooks, Hooked};
use sievedb::wal::{read_log, scan_log, LogWriter, MAX_RECORD_PAYLOAD, RECORD_HEADER_LEN};
use sievedb::Error;

/// Deterministic, non-repeating payload bytes, so no payload accidentally
/// contains a valid record.
fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn write_log(fs: &dyn FileSystem, path: &Path, records: &[Vec<u8>]) -> u64 {
    let mut w = LogWriter::create(fs, path).unwrap();
    for r in records {
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    w.len()
}

/// Offsets at which each record starts, plus the total length at the end.
fn boundaries(records: &[Vec<u8>]) -> Vec<u64> {
    let mut out = vec![0u64];
    for r in records {
        let last = *out.last().unwrap();
        out.push(last + (RECORD_HEADER_LEN + r.len()) as u64);
    }
    out
}

fn corruption_offset(err: &Error) -> Option<u64> {
    match err {
        Error::Corruption { offset, .. } => *offset,
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn empty_log_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("000001.log");
    let len = write_log(&RealFs, &path, &[]);
    assert_eq!(len, 0);
    let c = read_log(&RealFs, &path).unwrap();
    assert!(c.records.is_empty());
    assert_eq!(c.valid_len, 0);
    assert!(!c.torn_tail);
}

#[test]
fn one_and_many_records_round_trip_including_empty_and_1mib() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.log");
    let rec = vec![b"hello".to_vec()];
    write_log(&RealFs, &one, &rec);
    let c = read_log(&RealFs, &one).unwrap();
    assert_eq!(c.records, rec);
    assert_eq!(c.valid_len, 13);
    assert!(!c.torn_tail);

    let many_path = dir.path().join("many.log");
    let mut many: Vec<Vec<u8>> = Vec::new();
    many.push(Vec::new());
    for i in 0..500u64 {
        many.push(payload(i, (i as usize * 37) % 300));
    }
    many.push(payload(999, 1 << 20));
    many.push(Vec::new());
    many.push(b"tail".to_vec());
    let len = write_log(&RealFs, &many_path, &many);
    let on_disk = std::fs::metadata(&many_path).unwrap().len();
    assert_eq!(len, on_disk, "writer length matches the file");
    assert_eq!(len, *boundaries(&many).last().unwrap());
    let c = read_log(&RealFs, &many_path).unwrap();
    assert_eq!(c.records.len(), many.len());
    assert!(c.records == many);
    assert_eq!(c.valid_len, len);
    assert!(!c.torn_tail);
}

#[test]
fn scan_log_reports_offsets_and_payload_ranges() {
    let records = vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.log");
    write_log(&RealFs, &path, &records);
    let data = std::fs::read(&path).unwrap();
    let scan = scan_log(&data, &path).unwrap();
    let starts = boundaries(&records);
    for (i, span) in scan.records.iter().enumerate() {
        assert_eq!(span.offset, starts[i]);
        assert_eq!(&data[span.payload.clone()], records[i].as_slice());
    }
}

#[test]
fn truncation_at_every_offset_of_the_last_records_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.log");
    let records: Vec<Vec<u8>> = (0..6u64)
        .map(|i| payload(i, 20 + 40 * i as usize))
        .collect();
    write_log(&RealFs, &path, &records);
    let data = std::fs::read(&path).unwrap();
    let starts = boundaries(&records);
    // Every cut inside the last three records (and at their boundaries).
    let first_cut = starts[records.len() - 3];
    for cut in first_cut..=data.len() as u64 {
        let complete = starts.iter().filter(|&&b| b <= cut).count() - 1;
        let boundary = starts[complete];
        let scan = scan_log(&data[..cut as usize], &path)
            .unwrap_or_else(|e| panic!("cut at {cut}: unexpected error {e}"));
        assert_eq!(scan.records.len(), complete, "cut at {cut}");
        assert_eq!(scan.valid_len, boundary, "cut at {cut}");
        assert_eq!(scan.torn_tail, cut != boundary, "cut at {cut}");
    }
    // The same through the filesystem: truncate the real file mid-record.
    let cut = starts[records.len() - 1] + 5;
    RealFs.truncate(&path, cut).unwrap();
    let c = read_log(&RealFs, &path).unwrap();
    assert_eq!(c.records, records[..records.len() - 1].to_vec());
    assert_eq!(c.valid_len, starts[records.len() - 1]);
    assert!(c.torn_tail);
}

#[test]
fn truncating_a_small_log_anywhere_never_errors() {
    let records: Vec<Vec<u8>> = vec![Vec::new(), b"x".to_vec(), payload(3, 9), Vec::new()];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.log");
    write_log(&RealFs, &path, &records);
    let data = std::fs::read(&path).unwrap();
    let starts = boundaries(&records);
    for cut in 0..=data.len() {
        let scan = scan_log(&data[..cut], &path).unwrap();
        let complete = starts.iter().filter(|&&b| b <= cut as u64).count() - 1;
        assert_eq!(scan.records.len(), complete);
        assert_eq!(scan.torn_tail, starts[complete] != cut as u64);
    }
}

#[test]
fn zeros_or_garbage_after_the_last_record_are_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("z.log");
    let records: Vec<Vec<u8>> = (0..4u64).map(|i| payload(i, 50)).collect();
    let len = write_log(&RealFs, &path, &records);
    for tail in [1usize, 7, 8, 9, 4096] {
        let mut data = std::fs::read(&path).unwrap();
        data.resize(data.len() + tail, 0);
        let scan = scan_log(&data, &path).unwrap();
        assert_eq!(scan.records.len(), 4);
        assert_eq!(scan.valid_len, len);
        assert!(scan.torn_tail);

        let mut data = std::fs::read(&path).unwrap();
        data.extend(payload(77 + tail as u64, tail));
        let scan = scan_log(&data, &path).unwrap();
        assert_eq!(scan.records.len(), 4, "garbage tail of {tail}");
        assert_eq!(scan.valid_len, len);
        assert!(scan.torn_tail);
    }
    // Through the real file, with zeros appended by a writer.
    let mut f = RealFs.open_append(&path).unwrap();
    f.append(&[0u8; 100]).unwrap();
    drop(f);
    let c = read_log(&RealFs, &path).unwrap();
    assert_eq!(c.records, records);
    assert_eq!(c.valid_len, len);
    assert!(c.torn_tail);
}

#[test]
fn a_damaged_middle_record_is_corruption_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.log");
    let records: Vec<Vec<u8>> = (0..5u64).map(|i| payload(i, 30)).collect();
    write_log(&RealFs, &path, &records);
    let clean = std::fs::read(&path).unwrap();
    let starts = boundaries(&records);
    for victim in [0usize, 2, 3] {
        for at in starts[victim]..starts[victim + 1] {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut data = clean.clone();
                data[at as usize] ^= flip;
                let err = scan_log(&data, &path).expect_err("middle damage must be reported");
                assert_eq!(
                    corruption_offset(&err),
                    Some(starts[victim]),
                    "record {victim}, byte {at}, flip {flip:#x}"
                );
                if let Error::Corruption { file, .. } = &err {
                    assert_eq!(file, &path);
                }
            }
        }
    }
    // Through the real file.
    let mut data = clean.clone();
    data[starts[1] as usize + 12] ^= 0x10;
    std::fs::write(&path, &data).unwrap();
    let err = read_log(&RealFs, &path).unwrap_err();
    assert!(err.is_corruption());
    assert_eq!(corruption_offset(&err), Some(starts[1]));
}

#[test]
fn a_damaged_last_record_is_dropped_as_torn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.log");
    let records: Vec<Vec<u8>> = (0..3u64).map(|i| payload(i, 40)).collect();
    write_log(&RealFs, &path, &records);
    let clean = std::fs::read(&path).unwrap();
    let starts = boundaries(&records);
    for at in starts[2]..starts[3] {
        for flip in [0x01u8, 0x80] {
            let mut data = clean.clone();
            data[at as usize] ^= flip;
            let scan =
                scan_log(&data, &path).unwrap_or_else(|e| panic!("byte {at} flip {flip:#x}: {e}"));
            assert_eq!(scan.records.len(), 2);
            assert_eq!(scan.valid_len, starts[2]);
            assert!(scan.torn_tail);
        }
    }
}

#[test]
fn append_to_after_a_torn_tail_continues_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    let first: Vec<Vec<u8>> = (0..3u64).map(|i| payload(i, 25)).collect();
    write_log(&RealFs, &path, &first);
    // A crash mid-append: half of a fourth record reaches the disk.
    let mut f = RealFs.open_append(&path).unwrap();
    let mut partial = Vec::new();
    partial.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    partial.extend_from_slice(&100u32.to_le_bytes());
    partial.extend_from_slice(&[7u8; 30]);
    f.append(&partial).unwrap();
    drop(f);

    let c = read_log(&RealFs, &path).unwrap();
    assert!(c.torn_tail);
    assert_eq!(c.records, first);
    RealFs.truncate(&path, c.valid_len).unwrap();
    let mut w = LogWriter::append_to(&RealFs, &path, c.valid_len).unwrap();
    assert_eq!(w.len(), c.valid_len);
    let more: Vec<Vec<u8>> = (10..14u64).map(|i| payload(i, 33)).collect();
    for r in &more {
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    assert_eq!(w.len(), std::fs::metadata(&path).unwrap().len());
    assert_eq!(w.path(), path.as_path());

    let c = read_log(&RealFs, &path).unwrap();
    assert!(!c.torn_tail);
    let expected: Vec<Vec<u8>> = first.iter().chain(more.iter()).cloned().collect();
    assert_eq!(c.records, expected);
    assert_eq!(c.valid_len, w.len());
}

#[test]
fn oversized_payload_is_invalid_argument_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.log");
    let mut w = LogWriter::create(&RealFs, &path).unwrap();
    // calloc-backed and never touched, so this costs no real memory.
    let huge = vec![0u8; MAX_RECORD_PAYLOAD + 1];
    let err = w.add_record(&huge).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(w.len(), 0);
    w.add_record(b"still usable").unwrap();
    w.sync().unwrap();
    assert_eq!(
        read_log(&RealFs, &path).unwrap().records,
        vec![b"still usable".to_vec()]
    );
}

#[test]
fn reading_a_missing_log_is_an_io_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.log");
    match read_log(&RealFs, &path) {
        Err(Error::Io { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected Io error, got {other:?}"),
    }
}

/// A filesystem whose files fail the n-th append (counted across files), and
/// fail every sync while `fail_syncs` is set.
#[derive(Debug, Default)]
struct FailingFs {
    appends_left: Arc<AtomicUsize>,
    fail_syncs: Arc<AtomicBool>,
}

struct FailingFile {
    inner: Box<dyn WritableFile>,
    appends_left: Arc<AtomicUsize>,
    fail_syncs: Arc<AtomicBool>,
}

impl WritableFile for FailingFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let left = self.appends_left.load(Ordering::SeqCst);
        if left == 0 {
            // Half the data reaches the file, as in a real short write.
            self.inner.append(&data[..data.len() / 2])?;
            return Err(io::Error::other("injected append failure"));
        }
        self.appends_left.store(left - 1, Ordering::SeqCst);
        self.inner.append(data)
    }
    fn sync(&mut self) -> io::Result<()> {
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected sync failure"));
        }
        self.inner.sync()
    }
}

impl FsHooks for FailingFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        Ok(Box::new(FailingFile {
            inner: RealFs.create(path)?,
            appends_left: self.appends_left.clone(),
            fail_syncs: self.fail_syncs.clone(),
        }))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        Ok(Box::new(FailingFile {
            inner: RealFs.open_append(path)?,
            appends_left: self.appends_left.clone(),
            fail_syncs: self.fail_syncs.clone(),
        }))
    }
}

#[test]
fn one_append_per_record_and_writer_refuses_after_a_failed_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.log");
    let fs = Hooked(FailingFs {
        appends_left: Arc::new(AtomicUsize::new(3)),
        ..Default::default()
    });
    let mut w = LogWriter::create(&fs, &path).unwrap();
    // Exactly three appends succeed, so three records means one append each.
    for i in 0..3u64 {
        w.add_record(&payload(i, 64)).unwrap();
    }
    let good_len = w.len();
    match w.add_record(b"this one fails") {
        Err(Error::Io { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected Io error, got {other:?}"),
    }
    assert_eq!(w.len(), good_len);
    fs.appends_left.store(100, Ordering::SeqCst);
    assert!(matches!(w.add_record(b"later"), Err(Error::Io { .. })));
    assert!(matches!(w.sync(), Err(Error::Io { .. })));
    // What reached the disk: three records plus half a record, a torn tail.
    let c = read_log(&RealFs, &path).unwrap();
    assert_eq!(c.records.len(), 3);
    assert_eq!(c.valid_len, good_len);
    assert!(c.torn_tail);
}

#[test]
fn writer_refuses_after_a_failed_sync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.log");
    let fs = Hooked(FailingFs {
        appends_left: Arc::new(AtomicUsize::new(usize::MAX)),
        ..Default::default()
    });
    let mut w = LogWriter::create(&fs, &path).unwrap();
    w.add_record(b"one").unwrap();
    w.sync().unwrap();
    w.add_record(b"two").unwrap();
    fs.fail_syncs.store(true, Ordering::SeqCst);
    match w.sync() {
        Err(Error::Io { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected Io error, got {other:?}"),
    }
    // Even once the device recovers, the writer does not pretend the lost
    // sync happened.
    fs.fail_syncs.store(false, Ordering::SeqCst);
    assert!(matches!(w.sync(), Err(Error::Io { .. })));
    assert!(matches!(w.add_record(b"three"), Err(Error::Io { .. })));
}

fn arb_records() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..12)
}

fn encode_all(records: &[Vec<u8>]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.log");
    write_log(&RealFs, &path, records);
    std::fs::read(&path).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn truncation_yields_a_prefix_and_never_errors(records in arb_records(), cut in any::<prop::sample::Index>()) {
        let data = encode_all(&records);
        let cut = cut.index(data.len() + 1);
        let path = PathBuf::from("p.log");
        let scan = scan_log(&data[..cut], &path).unwrap();
        let starts = boundaries(&records);
        let complete = starts.iter().filter(|&&b| b <= cut as u64).count() - 1;
        prop_assert_eq!(scan.records.len(), complete);
        prop_assert_eq!(scan.valid_len, starts[complete]);
        for (span, rec) in scan.records.iter().zip(&records) {
            prop_assert_eq!(&data[span.payload.clone()], rec.as_slice());
        }
    }

    #[test]
    fn damage_never_panics_and_never_returns_wrong_records(
        records in arb_records(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in any::<prop::sample::Index>(),
        garbage in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut data = encode_all(&records);
        if data.is_empty() {
            return Ok(());
        }
        for (at, x) in &flips {
            let i = at.index(data.len());
            data[i] ^= x;
        }
        let cut = cut.index(data.len() + 1);
        data.truncate(cut);
        data.extend_from_slice(&garbage);
        let path = PathBuf::from("p.log");
        match scan_log(&data, &path) {
            Ok(scan) => {
                // Whatever is returned must be records that were written, in
                // order (the first damaged record and everything after it is
                // dropped or reported).
                prop_assert!(scan.records.len() <= records.len());
                for (span, rec) in scan.records.iter().zip(&records) {
                    prop_assert_eq!(&data[span.payload.clone()], rec.as_slice());
                }
                prop_assert!(scan.valid_len <= data.len() as u64);
            }
            Err(e) => prop_assert!(e.is_corruption(), "{:?}", e),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..600)) {
        let path = PathBuf::from("g.log");
        match scan_log(&data, &path) {
            Ok(scan) => prop_assert!(scan.valid_len <= data.len() as u64),
            Err(e) => prop_assert!(e.is_corruption()),
        }
    }

    #[test]
    fn single_byte_damage_in_a_non_last_record_is_always_reported(
        records in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..100), 2..8),
        victim in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        x in 1u8..=255,
    ) {
        let mut data = encode_all(&records);
        let starts = boundaries(&records);
        let victim = victim.index(records.len() - 1);
        let span = (starts[victim + 1] - starts[victim]) as usize;
        let i = starts[victim] as usize + at.index(span);
        data[i] ^= x;
        let err = scan_log(&data, Path::new("p.log")).unwrap_err();
        prop_assert_eq!(corruption_offset(&err), Some(starts[victim]));
    }
}

#[test]
fn long_records_take_the_same_torn_and_corrupt_decisions() {
    // Records longer than the direct-hash limit exercise the prefix-checksum
    // path of the resync scan.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.log");
    let records: Vec<Vec<u8>> = (0..4u64)
        .map(|i| payload(i, 5000 + 700 * i as usize))
        .collect();
    write_log(&RealFs, &path, &records);
    let clean = std::fs::read(&path).unwrap();
    let starts = boundaries(&records);
    for victim in 0..records.len() {
        for at in [0u64, 3, 4, 7, 8, 100, 4999] {
            let mut data = clean.clone();
            data[(starts[victim] + at) as usize] ^= 0x20;
            let result = scan_log(&data, &path);
            if victim + 1 < records.len() {
                let err = result.expect_err("damage before a valid long record");
                assert_eq!(corruption_offset(&err), Some(starts[victim]));
            } else {
                let scan = result.unwrap();
                assert!(scan.torn_tail);
                assert_eq!(scan.valid_len, starts[victim]);
            }
        }
    }
    // A multi-MiB record torn halfway, followed by nothing.
    let big = payload(5, 3 << 20);
    std::fs::remove_file(&path).unwrap();
    let mut w = LogWriter::create(&RealFs, &path).unwrap();
    w.add_record(b"first").unwrap();
    w.add_record(&big).unwrap();
    w.sync().unwrap();
    RealFs
        .truncate(&path, 13 + 8 + (big.len() as u64) / 2)
        .unwrap();
    let c = read_log(&RealFs, &path).unwrap();
    assert_eq!(c.records, vec![b"first".to_vec()]);
    assert_eq!(c.valid_len, 13);
    assert!(c.torn_tail);
}

/// The real filesystem with no call changed: [`Hooked`] over it uses the
/// trait's default `create_new`.
#[derive(Debug, Default)]
struct Plain;

impl FsHooks for Plain {}

/// Tables, logs and manifests are created with `create_new`: a file number
/// used twice must fail, not truncate a live (possibly mapped) file. Every
/// filesystem refuses an existing name and leaves the file as it was; a new
/// name is created.
#[test]
fn create_new_refuses_an_existing_file_and_leaves_it_alone() {
    let filesystems: Vec<(&str, Box<dyn FileSystem>)> = vec![
        ("RealFs", Box::new(RealFs)),
        ("FaultFs", Box::new(sievedb::fs::FaultFs::new())),
        ("trait default", Box::new(Hooked(Plain))),
    ];
    for (name, fs) in filesystems {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("000007.log");
        std::fs::write(&log, b"live contents").unwrap();
        match LogWriter::create(fs.as_ref(), &log) {
            Err(Error::Io { path, source }) => {
                assert_eq!(path, log, "{name}");
                assert_eq!(source.kind(), io::ErrorKind::AlreadyExists, "{name}");
            }
            other => panic!("{name}: a log over an existing file: {other:?}"),
        }
        assert_eq!(std::fs::read(&log).unwrap(), b"live contents", "{name}");

        let table = dir.path().join("000008.sst");
        std::fs::write(&table, b"a mapped table").unwrap();
        let built = sievedb::sstable::TableBuilder::new(
            fs.as_ref(),
            &table,
            8,
            sievedb::sstable::TableOptions::default(),
        );
        assert!(
            matches!(&built, Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists),
            "{name}: a table over an existing file: {:?}",
            built.err()
        );
        assert_eq!(std::fs::read(&table).unwrap(), b"a mapped table", "{name}");

        let fresh = dir.path().join("000009.log");
        let mut w = LogWriter::create(fs.as_ref(), &fresh).unwrap();
        w.add_record(b"x").unwrap();
        w.sync().unwrap();
        drop(w);
        assert_eq!(
            read_log(fs.as_ref(), &fresh).unwrap().records,
            vec![b"x".to_vec()]
        );
    }
}
