//! Record-log benchmarks.
//!
//! * `torn_tail_scan`: time for `scan_log` to classify a log whose last
//!   record is torn inside a payload of random bytes (the case where every
//!   later offset must be ruled out as the start of a valid record), against
//!   a naive scan that hashes every plausible candidate directly.
//! * `append`: `LogWriter::add_record` of 128-byte records (no fsync).
//!
//! Run: `cargo bench --bench wal -- --warm-up-time 1 --measurement-time 3`

use std::path::Path;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use sievedb::fs::RealFs;
use sievedb::wal::{scan_log, LogWriter, MAX_RECORD_PAYLOAD, RECORD_HEADER_LEN};

/// A log holding one record whose declared length runs past the end: `len`
/// random payload bytes survived a crash.
fn torn_log(len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut payload = vec![0u8; len];
    rng.fill(&mut payload[..]);
    let mut data = Vec::with_capacity(len + RECORD_HEADER_LEN);
    data.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    data.extend_from_slice(&((len * 2) as u32).to_le_bytes());
    data.extend_from_slice(&payload);
    data
}

/// The straightforward resync scan: hash every candidate whose length fits.
fn naive_any_valid_record_from(data: &[u8], from: usize) -> bool {
    let Some(last) = data.len().checked_sub(RECORD_HEADER_LEN) else {
        return false;
    };
    (from..=last).any(|pos| {
        let h = &data[pos..pos + RECORD_HEADER_LEN];
        let crc = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let start = pos + RECORD_HEADER_LEN;
        len <= MAX_RECORD_PAYLOAD
            && len <= data.len() - start
            && crc32fast::hash(&data[pos + 4..start + len]) == crc
    })
}

fn torn_tail_scan(c: &mut Criterion) {
    let mut group = c.benchmark_group("torn_tail_scan");
    group.sample_size(10);
    let path = Path::new("bench.log");
    for mib in [4usize, 32] {
        let data = torn_log(mib << 20);
        group.throughput(Throughput::Bytes(data.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("scan_log", format!("{mib}MiB")),
            &data,
            |b, d| {
                b.iter(|| {
                    let scan = scan_log(d, path).unwrap();
                    assert!(scan.torn_tail);
                })
            },
        );
        if mib == 4 {
            group.bench_with_input(
                BenchmarkId::new("naive", format!("{mib}MiB")),
                &data,
                |b, d| b.iter(|| assert!(!naive_any_valid_record_from(d, 1))),
            );
        }
    }
    group.finish();
}

fn append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("append");
    const RECORDS: usize = 1000;
    group.throughput(Throughput::Elements(RECORDS as u64));
    let payload = vec![0x5au8; 128];
    group.bench_function("add_record_128B_x1000", |b| {
        b.iter(|| {
            // A log is created exclusively: the last iteration's goes first.
            let path = dir.path().join("a.log");
            let _ = std::fs::remove_file(&path);
            let mut w = LogWriter::create(&RealFs, &path).unwrap();
            for _ in 0..RECORDS {
                w.add_record(&payload).unwrap();
            }
            w.len()
        })
    });
    group.finish();
}

criterion_group!(benches, torn_tail_scan, append);
criterion_main!(benches);
