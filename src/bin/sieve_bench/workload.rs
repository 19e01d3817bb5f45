//! The workloads: each phase runs a list of operations over the engine on
//! `--threads` threads, times every operation, checks every answer, and
//! records the engine's read counters and the device bytes read.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::cold;
use crate::engine::{Engine, ReadIo};
use crate::error::{BenchError, BenchResult};
use crate::keys::KeySpace;

/// The workloads `--benchmarks` accepts.
pub const WORKLOADS: &[&str] = &[
    "fillrandom",
    "fillseq",
    "compact",
    "compactall",
    "readrandom",
    "readmissing",
    "readzipf",
    "scan",
    "scanrev",
];

/// Zipf exponent of `readzipf` (YCSB's default).
pub const ZIPF_THETA: f64 = 0.99;

/// One phase's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    /// Workload name.
    pub name: String,
    /// Operations run (gets, puts, scans; 1 for `compact`).
    pub ops: u64,
    /// Wall-clock seconds of the phase.
    pub seconds: f64,
    /// `ops / seconds`.
    pub ops_per_sec: f64,
    /// Mean latency of one operation, microseconds. With one thread, the
    /// gap between it and `seconds / ops` is time spent outside operations:
    /// mostly the benchmark's own work per operation (making the key, two
    /// clock reads, checking the value: a review measured 19-28% of the
    /// wall time of filtered missing-key reads and 5-11% of present-key
    /// reads), and time descheduled. So `ops_per_sec` understates the
    /// fastest engine's speed more than a slower one's. With `T` threads
    /// `seconds / ops` is about `mean / T`.
    pub mean_us: f64,
    /// Threads that ran the phase's operations: the setting, or fewer when
    /// the phase has fewer operations than threads.
    pub threads: usize,
    /// Median latency of one operation, microseconds.
    pub p50_us: f64,
    /// 99th-percentile latency of one operation, microseconds.
    pub p99_us: f64,
    /// Gets that found their key / entries returned by scans.
    pub found: u64,
    /// The engine's read counters accumulated in the phase (sievedb only).
    pub io: Option<ReadIo>,
    /// Bytes fetched from the storage device during the phase
    /// (`/proc/self/io` `read_bytes`), where the kernel reports it.
    pub device_read_bytes: Option<u64>,
    /// Whether the page cache was emptied before the phase.
    pub cold: bool,
}

impl PhaseResult {
    /// Data blocks read by point reads per get (sievedb only).
    pub fn blocks_per_get(&self) -> Option<f64> {
        let io = self.io?;
        (io.gets > 0).then(|| io.get_data_block_reads as f64 / io.gets as f64)
    }
}

/// Per-thread buffers, reused across operations.
#[derive(Default)]
struct Scratch {
    key: Vec<u8>,
    value: Vec<u8>,
    expected: Vec<u8>,
}

/// What one operation did: its latency and whether it found something.
struct OpOutcome {
    nanos: u64,
    found: u64,
}

fn progress(label: &str, len: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{msg:28} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_string());
    bar
}

/// The nearest-rank `pct`-th percentile of `sorted` nanoseconds, in
/// microseconds: the smallest value with at least `pct`% of the values at
/// or below it (rank `ceil(len x pct / 100)`, counting from 1).
fn percentile(sorted: &[u64], pct: usize) -> f64 {
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or(0) as f64 / 1000.0
}

/// `items` cut into `threads` parts of sizes differing by at most one (no
/// empty part unless there are fewer items than threads).
fn split_even(items: &[u64], threads: usize) -> Vec<&[u64]> {
    let threads = threads.clamp(1, items.len().max(1));
    (0..threads)
        .map(|t| &items[items.len() * t / threads..items.len() * (t + 1) / threads])
        .collect()
}

/// Runs `op` over `items` on `threads` threads and measures the phase.
fn run_phase<F>(
    engine: &dyn Engine,
    name: &str,
    label: &str,
    threads: usize,
    items: &[u64],
    cold: bool,
    op: F,
) -> BenchResult<PhaseResult>
where
    F: Fn(u64, &mut Scratch) -> BenchResult<OpOutcome> + Sync,
{
    let bar = progress(label, items.len() as u64);
    let io_before = engine.read_io();
    let dev_before = cold::device_read_bytes();
    let parts = split_even(items, threads);
    let threads_used = parts.len();
    let start = Instant::now();
    let per_thread: Vec<BenchResult<(Vec<u64>, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| {
                let bar = bar.clone();
                let op = &op;
                s.spawn(move || {
                    let mut scratch = Scratch::default();
                    let mut lat = Vec::with_capacity(part.len());
                    let mut found = 0;
                    for (n, &item) in part.iter().enumerate() {
                        let out = op(item, &mut scratch)?;
                        lat.push(out.nanos);
                        found += out.found;
                        if n % 1024 == 1023 {
                            bar.inc(1024);
                        }
                    }
                    Ok((lat, found))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BenchError::Invalid("a benchmark thread panicked".into()))
                })
            })
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let mut latencies = Vec::with_capacity(items.len());
    let mut found = 0;
    for r in per_thread {
        let (lat, f) = r?;
        latencies.extend(lat);
        found += f;
    }
    latencies.sort_unstable();
    let mean_us = if latencies.is_empty() {
        0.0
    } else {
        latencies.iter().map(|&n| n as f64).sum::<f64>() / latencies.len() as f64 / 1000.0
    };
    let io = match (io_before, engine.read_io()) {
        (Some(b), Some(a)) => Some(a.since(&b)),
        _ => None,
    };
    let device_read_bytes = match (dev_before, cold::device_read_bytes()) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b)),
        _ => None,
    };
    let ops = items.len() as u64;
    Ok(PhaseResult {
        name: name.to_string(),
        ops,
        seconds,
        ops_per_sec: if seconds > 0.0 {
            ops as f64 / seconds
        } else {
            0.0
        },
        mean_us,
        threads: threads_used,
        p50_us: percentile(&latencies, 50),
        p99_us: percentile(&latencies, 99),
        found,
        io,
        device_read_bytes,
        cold,
    })
}

fn elapsed_nanos(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn wrong(engine: &dyn Engine, what: String) -> BenchError {
    BenchError::WrongAnswer {
        engine: engine.name().to_string(),
        what,
    }
}

/// Loads the keys of `order` (loaded key indices).
pub fn fill(
    engine: &dyn Engine,
    ks: &KeySpace,
    name: &str,
    label: &str,
    threads: usize,
    order: &[u64],
) -> BenchResult<PhaseResult> {
    run_phase(engine, name, label, threads, order, false, |i, s| {
        ks.present_key(i, &mut s.key);
        ks.value_into(i, &mut s.value);
        let t = Instant::now();
        engine.put(&s.key, &s.value)?;
        Ok(OpOutcome {
            nanos: elapsed_nanos(t),
            found: 0,
        })
    })
}

/// Flushes and compacts (`full`: rewrites every table into one level),
/// timed as one operation.
pub fn compact(engine: &dyn Engine, label: &str, full: bool) -> BenchResult<PhaseResult> {
    let name = if full { "compactall" } else { "compact" };
    run_phase(engine, name, label, 1, &[0], false, |_, _| {
        let t = Instant::now();
        engine.flush_compact(full)?;
        Ok(OpOutcome {
            nanos: elapsed_nanos(t),
            found: 0,
        })
    })
}

/// Gets loaded keys `indices`; every one must be found with its value.
#[allow(clippy::too_many_arguments)]
pub fn read_present(
    engine: &dyn Engine,
    ks: &KeySpace,
    name: &str,
    label: &str,
    threads: usize,
    indices: &[u64],
    cold: bool,
) -> BenchResult<PhaseResult> {
    run_phase(engine, name, label, threads, indices, cold, |i, s| {
        ks.present_key(i, &mut s.key);
        let t = Instant::now();
        let got = engine.get(&s.key)?;
        let nanos = elapsed_nanos(t);
        ks.value_into(i, &mut s.expected);
        match got {
            Some(v) if v == s.expected => Ok(OpOutcome { nanos, found: 1 }),
            Some(_) => Err(wrong(engine, format!("wrong value for loaded key {i}"))),
            None => Err(wrong(engine, format!("loaded key {i} not found"))),
        }
    })
}

/// Gets the missing keys after loaded keys `indices`; none may be found.
pub fn read_missing(
    engine: &dyn Engine,
    ks: &KeySpace,
    label: &str,
    threads: usize,
    indices: &[u64],
    cold: bool,
) -> BenchResult<PhaseResult> {
    run_phase(
        engine,
        "readmissing",
        label,
        threads,
        indices,
        cold,
        |i, s| {
            ks.missing_key(i, &mut s.key);
            let t = Instant::now();
            let got = engine.get(&s.key)?;
            let nanos = elapsed_nanos(t);
            match got {
                None => Ok(OpOutcome { nanos, found: 0 }),
                Some(_) => Err(wrong(engine, format!("missing key {} found", 2 * i + 1))),
            }
        },
    )
}

/// Which way a scan phase reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanDirection {
    /// `scan`: from each start key up.
    Forward,
    /// `scanrev`: from each start key down.
    Backward,
}

/// Range scans of up to `len` entries from loaded keys `starts`, each way
/// [`ScanDirection`] says; each must return the loaded keys from its start
/// on (or down), in order, and as many as there are up to `len`.
#[allow(clippy::too_many_arguments)]
pub fn scan(
    engine: &dyn Engine,
    ks: &KeySpace,
    label: &str,
    threads: usize,
    starts: &[u64],
    len: usize,
    cold: bool,
    direction: ScanDirection,
) -> BenchResult<PhaseResult> {
    let (name, what) = match direction {
        ScanDirection::Forward => ("scan", "scan"),
        ScanDirection::Backward => ("scanrev", "backward scan"),
    };
    run_phase(engine, name, label, threads, starts, cold, |i, s| {
        ks.present_key(i, &mut s.key);
        // The loaded key the next visited key must be (`None` past the
        // last one or below the first).
        let mut next = Some(i);
        let mut bad: Option<String> = None;
        let expected = &mut s.expected;
        let mut check = |k: &[u8]| {
            if bad.is_some() {
                return;
            }
            let Some(at) = next else {
                bad = Some("a key beyond the loaded keys".to_string());
                return;
            };
            ks.present_key(at, expected);
            if k != expected.as_slice() {
                bad = Some(format!("wrong key where loaded key {at} belongs"));
            }
            next = match direction {
                ScanDirection::Forward => Some(at + 1).filter(|&n| n < ks.num),
                ScanDirection::Backward => at.checked_sub(1),
            };
        };
        let t = Instant::now();
        let n = match direction {
            ScanDirection::Forward => engine.scan(&s.key, len, &mut check)?,
            ScanDirection::Backward => engine.scan_rev(&s.key, len, &mut check)?,
        };
        let nanos = elapsed_nanos(t);
        let available = match direction {
            ScanDirection::Forward => ks.num - i,
            ScanDirection::Backward => i + 1,
        };
        let want = available.min(len as u64);
        if let Some(problem) = bad {
            return Err(wrong(
                engine,
                format!("{what} from loaded key {i}: {problem}"),
            ));
        }
        if n as u64 != want {
            return Err(wrong(
                engine,
                format!("{what} from loaded key {i} returned {n} entries, expected {want}"),
            ));
        }
        Ok(OpOutcome {
            nanos,
            found: n as u64,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::{percentile, split_even};

    #[test]
    fn percentiles_are_nearest_rank() {
        // 2, 4, ..., 200 ms.
        let v: Vec<u64> = (1..=100).map(|i| i * 2_000_000).collect();
        assert_eq!(percentile(&v, 50), 100_000.0);
        assert_eq!(percentile(&v, 99), 198_000.0);
        assert_eq!(percentile(&v, 100), 200_000.0);
        assert_eq!(percentile(&[7_000], 99), 7.0);
        assert_eq!(percentile(&[], 50), 0.0);
        // 200,000 values: p99 is value 198,000 (1-based), not the next.
        let w: Vec<u64> = (1..=200_000).collect();
        assert_eq!(percentile(&w, 99), 198.0);
    }

    #[test]
    fn work_is_split_over_every_thread() {
        let items: Vec<u64> = (0..5).collect();
        let parts = split_even(&items, 4);
        assert_eq!(parts.len(), 4);
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [1, 1, 1, 2]
        );
        assert_eq!(parts.concat(), items);
        assert_eq!(split_even(&items, 8).len(), 5);
        assert_eq!(split_even(&[], 3).len(), 1);
    }
}
