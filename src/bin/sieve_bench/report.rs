//! Results: the per-run record written as JSON, the printed tables and the
//! SVG chart.

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::engine::ReadIo;
use crate::error::{io_err, BenchError, BenchResult};
use crate::workload::PhaseResult;

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// CPU model from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
}

impl Machine {
    /// Reads the machine description (fields are `"unknown"` where the
    /// system does not say).
    pub fn detect() -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            kernel,
        }
    }
}

/// Missing-key read I/O measured against what the table shape predicts.
#[derive(Debug, Clone, Serialize)]
pub struct MissingCheck {
    /// Average number of tables whose key range covers a missing key (the
    /// tables a missing get must consult).
    pub covering_tables_per_get: f64,
    /// Filter checks per missing get (equals the covering tables for an
    /// engine that checks every covering table).
    pub filter_checks_per_get: f64,
    /// The policy's false-positive rate (1 for no filter).
    pub theoretical_fp_rate: f64,
    /// The sum, over the tables covering each missing key, of that table's
    /// expected false-positive rate (at the bits per key it records, 1 for
    /// a table without a filter), averaged over the missing gets; equal to
    /// `covering_tables_per_get * theoretical_fp_rate` when every table
    /// has the policy's filter at the setting.
    pub expected_blocks_per_get: f64,
    /// Data blocks read per missing get, measured.
    pub measured_blocks_per_get: f64,
    /// False positives per filter check, measured; `None` (printed `-`)
    /// when no filter was checked (every missing get ended in a memtable).
    pub measured_fp_rate_per_check: Option<f64>,
    /// Per level that was checked, level 0 first: (level, filter checks per
    /// missing get, false positives per missing get), measured.
    pub per_level: Vec<(usize, f64, f64)>,
}

/// The shape of the tree the reads ran against.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeSummary {
    /// Tables per level, level 0 first (sievedb only).
    pub tables_per_level: Vec<u64>,
    /// Bytes of all filters (sievedb only; 0 for peers).
    pub filter_bytes: u64,
    /// `filter_bytes * 8 / keys`.
    pub filter_bits_per_key: f64,
    /// Bytes of all table files (sievedb only; 0 for peers).
    pub table_bytes: u64,
}

/// One engine under one policy: its phases and derived figures.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Engine name.
    pub engine: String,
    /// The run's label: the filter policy's name, for sievedb decorated
    /// with its non-default settings (e.g. `bloom+lz4`).
    pub policy: String,
    /// The filter policy's name alone (`bloom`, `ribbon`, `none`): what
    /// runs of different engines are paired by.
    pub filter: String,
    /// `--bits-per-key` (Ribbon: the Bloom-equivalent setting).
    pub bits_per_key_setting: f64,
    /// Loaded keys.
    pub keys: u64,
    /// The phases, in run order.
    pub phases: Vec<PhaseResult>,
    /// The tree's shape under the last read phase: taken at its start, once
    /// the background work had settled (sievedb; see `Engine::settle`).
    pub shape: Option<ShapeSummary>,
    /// Missing-key check (when `readmissing` ran on sievedb).
    pub missing: Option<MissingCheck>,
}

impl Run {
    /// The last phase named `name`, if it ran: the one the run's `shape`
    /// and `missing` figures describe when a workload runs more than once.
    pub fn phase(&self, name: &str) -> Option<&PhaseResult> {
        self.phases.iter().rev().find(|p| p.name == name)
    }
}

/// Everything a run of the program measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Whether read phases started with an empty page cache.
    pub cold: bool,
    /// Gets per read phase.
    pub reads: u64,
    /// Reader/writer threads.
    pub threads: usize,
    /// Every engine and policy run.
    pub runs: Vec<Run>,
    /// Total wall-clock seconds.
    pub total_seconds: f64,
}

impl Report {
    /// The threads the phases ran on, for the header: `--threads`, and the
    /// counts actually used where a phase had fewer pieces of work than
    /// threads.
    pub fn threads_note(&self) -> String {
        let mut used: Vec<usize> = self
            .runs
            .iter()
            .flat_map(|r| r.phases.iter().map(|p| p.threads))
            .collect();
        used.sort_unstable();
        used.dedup();
        match used.as_slice() {
            [] => format!("{} thread(s)", self.threads),
            [one] if *one == self.threads => format!("{one} thread(s)"),
            _ => format!(
                "{} thread(s) asked for, {} used (per phase in the JSON)",
                self.threads,
                used.iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join("/")
            ),
        }
    }
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

fn kops(p: Option<&PhaseResult>) -> String {
    p.map_or_else(|| "-".into(), |p| format!("{:.0}", p.ops_per_sec))
}

fn lat(p: Option<&PhaseResult>) -> String {
    p.map_or_else(
        || "-".into(),
        // Two decimals: a filtered missing get takes about 0.1 µs, and
        // one decimal printed Bloom's and Ribbon's medians alike.
        |p| format!("{:.2}/{:.2}", p.p50_us, p.p99_us),
    )
}

/// The main table: one row per engine and policy.
pub fn main_table(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<8} {:<7} {:>12} {:>8} {:>9} {:>12} {:>12} {:>12} {:>12} {:>12} {:>13} {:>13}",
        "engine",
        "policy",
        "filter bytes",
        "bits/key",
        "FP rate",
        "blk/miss",
        "expected",
        "blk/present",
        "ops/s miss",
        "ops/s pres",
        "p50/p99 miss",
        "p50/p99 pres",
    ));
    if report.cold {
        out.push_str(&format!(" {:>13} {:>13}", "dev B/miss", "dev B/pres"));
    }
    out.push('\n');
    for run in &report.runs {
        let miss = run.phase("readmissing");
        let pres = run.phase("readrandom");
        let (fb, bpk) = match &run.shape {
            Some(s) if run.engine == "sievedb" => (
                s.filter_bytes.to_string(),
                format!("{:.2}", s.filter_bits_per_key),
            ),
            _ => ("-".into(), "-".into()),
        };
        let m = run.missing.as_ref();
        out.push_str(&format!(
            "{:<8} {:<7} {:>12} {:>8} {:>9} {:>12} {:>12} {:>12} {:>12} {:>12} {:>13} {:>13}",
            run.engine,
            run.policy,
            fb,
            bpk,
            m.and_then(|m| m.measured_fp_rate_per_check)
                .map_or_else(|| "-".into(), |r| format!("{:.3}%", r * 100.0)),
            fmt_opt(m.map(|m| m.measured_blocks_per_get), 4),
            fmt_opt(m.map(|m| m.expected_blocks_per_get), 4),
            fmt_opt(pres.and_then(PhaseResult::blocks_per_get), 4),
            kops(miss),
            kops(pres),
            lat(miss),
            lat(pres),
        ));
        if report.cold {
            let dev = |p: Option<&PhaseResult>| {
                fmt_opt(
                    p.and_then(|p| p.device_read_bytes.map(|b| b as f64 / p.ops.max(1) as f64)),
                    0,
                )
            };
            out.push_str(&format!(" {:>13} {:>13}", dev(miss), dev(pres)));
        }
        out.push('\n');
    }
    out
}

/// Share of the phase's block-cache lookups that hit, or `-` without
/// lookups (no cache, a peer engine, or a phase that read no blocks).
fn cache_hit_rate(io: Option<ReadIo>) -> String {
    match io {
        Some(io) if io.block_cache_hits + io.block_cache_misses > 0 => format!(
            "{:.1}%",
            io.block_cache_hits as f64 * 100.0
                / (io.block_cache_hits + io.block_cache_misses) as f64
        ),
        _ => "-".into(),
    }
}

/// Every phase of every run: ops/s and latency.
pub fn phase_table(report: &Report) -> String {
    let mut out = format!(
        "{:<8} {:<7} {:<12} {:>9} {:>9} {:>12} {:>10} {:>10} {:>10} {:>12} {:>10} {:>14}\n",
        "engine",
        "policy",
        "phase",
        "ops",
        "secs",
        "ops/s",
        "mean us",
        "p50 us",
        "p99 us",
        "blk/op",
        "cache hit",
        "dev bytes"
    );
    for run in &report.runs {
        for p in &run.phases {
            out.push_str(&format!(
                "{:<8} {:<7} {:<12} {:>9} {:>9.3} {:>12.0} {:>10.2} {:>10.2} {:>10.2} {:>12} {:>10} {:>14}\n",
                run.engine,
                run.policy,
                p.name,
                p.ops,
                p.seconds,
                p.ops_per_sec,
                p.mean_us,
                p.p50_us,
                p.p99_us,
                fmt_opt(
                    p.io.map(|io| io.data_block_reads as f64 / p.ops.max(1) as f64),
                    4
                ),
                cache_hit_rate(p.io),
                p.device_read_bytes
                    .map_or_else(|| "-".into(), |b| b.to_string()),
            ));
        }
    }
    out
}

/// Side-by-side ratios: for every workload and policy, each engine's ops/s
/// and median latency, and sievedb's speed relative to each peer (ops/s
/// ratio and inverse p50 ratio: above 1 means sievedb is faster).
pub fn peer_table(report: &Report) -> Option<String> {
    let mut engines: Vec<&str> = Vec::new();
    for r in &report.runs {
        if !engines.contains(&r.engine.as_str()) {
            engines.push(r.engine.as_str());
        }
    }
    if engines.len() < 2 {
        return None;
    }
    let mut out = format!("{:<12} {:<7}", "workload", "policy");
    for e in &engines {
        out.push_str(&format!(" {:>16} {:>12}", format!("{e} ops/s"), "p50 us"));
    }
    for e in engines.iter().filter(|e| **e != "sievedb") {
        out.push_str(&format!(
            " {:>18} {:>18}",
            format!("ops/s sieve/{e}"),
            format!("p50 {e}/sieve")
        ));
    }
    out.push('\n');
    // One row per phase (by position: every run has the plan's phases in
    // order, a workload named twice gives two rows) and sievedb run; each
    // peer run paired by its filter policy alone, as sievedb's label may
    // carry settings the peers do not have (`bloom+lz4`).
    let workloads: Vec<&str> = report
        .runs
        .first()
        .map(|r| r.phases.iter().map(|p| p.name.as_str()).collect())
        .unwrap_or_default();
    for (i, w) in workloads.iter().enumerate() {
        for sieve_run in report.runs.iter().filter(|r| r.engine == "sievedb") {
            fn phase_at<'r>(run: &'r Run, i: usize, w: &str) -> Option<&'r PhaseResult> {
                run.phases.get(i).filter(|p| p.name == w)
            }
            let Some(sieve) = phase_at(sieve_run, i, w) else {
                continue;
            };
            let phase = |e: &str| {
                if e == "sievedb" {
                    return Some(sieve);
                }
                report
                    .runs
                    .iter()
                    .find(|r| r.engine == e && r.filter == sieve_run.filter)
                    .and_then(|r| phase_at(r, i, w))
            };
            out.push_str(&format!("{w:<12} {:<7}", sieve_run.policy));
            for e in &engines {
                let p = phase(e);
                out.push_str(&format!(
                    " {:>16} {:>12}",
                    fmt_opt(p.map(|p| p.ops_per_sec), 0),
                    fmt_opt(p.map(|p| p.p50_us), 2)
                ));
            }
            for e in engines.iter().filter(|e| **e != "sievedb") {
                let p = phase(e);
                out.push_str(&format!(
                    " {:>18} {:>18}",
                    fmt_opt(
                        p.filter(|p| p.ops_per_sec > 0.0)
                            .map(|p| sieve.ops_per_sec / p.ops_per_sec),
                        2
                    ),
                    fmt_opt(
                        p.filter(|_| sieve.p50_us > 0.0)
                            .map(|p| p.p50_us / sieve.p50_us),
                        2
                    )
                ));
            }
            out.push('\n');
        }
    }
    Some(out)
}

fn ensure_parent(path: &Path) -> BenchResult<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => std::fs::create_dir_all(p).map_err(io_err(p)),
        _ => Ok(()),
    }
}

/// Checks, before a run, that `path` can be written when the run ends: its
/// parent directory is created, an existing file is opened for writing (not
/// truncated) and a new one is created and removed again. A path that is a
/// directory, or lies in one that cannot be written, fails here instead of
/// after minutes of benchmarking.
pub fn check_writable(path: &Path) -> BenchResult<()> {
    ensure_parent(path)?;
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(io_err(path))
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io_err(path))?;
        std::fs::remove_file(path).map_err(io_err(path))
    }
}

/// Whether `a` and `b` name one file: the same absolute path once their
/// directories (where they exist) are resolved, links included.
pub fn same_path(a: &Path, b: &Path) -> bool {
    match (resolved(a), resolved(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Whether `inner` is `outer` or lies below it (paths resolved as by
/// [`same_path`]).
pub fn is_within(inner: &Path, outer: &Path) -> bool {
    match (resolved(inner), resolved(outer)) {
        (Some(x), Some(y)) => x.starts_with(y),
        _ => inner.starts_with(outer),
    }
}

/// `p` made absolute, its longest existing prefix resolved (links
/// included) and the rest applied component by component, `..` taking one
/// off (as the kernel resolves it once the missing directories exist).
fn resolved(p: &Path) -> Option<std::path::PathBuf> {
    use std::path::Component;
    let abs = std::path::absolute(p).ok()?;
    let components: Vec<Component> = abs.components().collect();
    // The longest prefix that exists (at least the root).
    let mut split = components.len();
    let mut out = loop {
        let prefix: std::path::PathBuf = components[..split].iter().collect();
        if let Ok(real) = std::fs::canonicalize(&prefix) {
            break real;
        }
        split = split.checked_sub(1)?;
    };
    for c in &components[split..] {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// Writes the report as pretty JSON.
pub fn write_json(report: &Report, path: &Path) -> BenchResult<()> {
    ensure_parent(path)?;
    let text = serde_json::to_string_pretty(report).map_err(|e| BenchError::Output {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    std::fs::write(path, text).map_err(io_err(path))
}

/// One bar of the chart: the run's label, its data blocks per missing get
/// and its filter memory in KiB, each when measured.
type Bar = (String, Option<f64>, Option<f64>);

/// Draws two bar panels: data blocks read per missing get and filter memory,
/// one bar per sievedb policy.
pub fn write_chart(report: &Report, path: &Path) -> BenchResult<()> {
    ensure_parent(path)?;
    // A figure the run did not measure (no `readmissing`, no read phase)
    // is labelled "n/a", not drawn as 0.
    let bars: Vec<Bar> = report
        .runs
        .iter()
        .filter(|r| r.engine == "sievedb")
        .map(|r| {
            (
                r.policy.clone(),
                r.missing.as_ref().map(|m| m.measured_blocks_per_get),
                r.shape.as_ref().map(|s| s.filter_bytes as f64 / 1024.0),
            )
        })
        .collect();
    let out_err = |e: String| BenchError::Output {
        path: path.to_path_buf(),
        message: e,
    };
    let root = SVGBackend::new(path, (1000, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| out_err(e.to_string()))?;
    let title = format!(
        "sieve-bench: {} keys, {} reads/phase{}",
        report.runs.first().map_or(0, |r| r.keys),
        report.reads,
        if report.cold { ", cold cache" } else { "" }
    );
    let root = root
        .titled(&title, ("sans-serif", 20))
        .map_err(|e| out_err(e.to_string()))?;
    let panels = root.split_evenly((1, 2));
    type Value = fn(&Bar) -> Option<f64>;
    let specs: [(&str, Value, &str); 2] = [
        ("data blocks read per missing get", |b| b.1, "blocks / get"),
        ("filter memory", |b| b.2, "KiB"),
    ];
    let colors = [
        RGBColor(52, 101, 164),
        RGBColor(115, 210, 22),
        RGBColor(204, 0, 0),
    ];
    for (panel, (caption, value, unit)) in panels.iter().zip(specs) {
        let top = bars.iter().filter_map(value).fold(0.0f64, f64::max);
        // Room above the tallest bar for its label. With every bar at 0
        // (filter memory of `none`) an axis to 1: one to a millionth
        // labelled each tick "0.0".
        let max = if top > 0.0 { top * 1.2 } else { 1.0 };
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..bars.len().max(1) as f64, 0f64..max)
            .map_err(|e| out_err(e.to_string()))?;
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len().max(1) * 2 + 1)
            .x_label_formatter(&|x| {
                let centre = x - x.floor();
                if (centre - 0.5).abs() < 0.01 {
                    names.get(x.floor() as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(unit)
            .draw()
            .map_err(|e| out_err(e.to_string()))?;
        for (i, b) in bars.iter().enumerate() {
            let color = colors[i % colors.len()];
            let x0 = i as f64 + 0.15;
            let x1 = i as f64 + 0.85;
            let Some(v) = value(b) else {
                chart
                    .draw_series(std::iter::once(Text::new(
                        "n/a".to_string(),
                        (x0, max * 0.07),
                        ("sans-serif", 14),
                    )))
                    .map_err(|e| out_err(e.to_string()))?;
                continue;
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, v)],
                    color.filled(),
                )))
                .map_err(|e| out_err(e.to_string()))?;
            chart
                .draw_series(std::iter::once(Text::new(
                    if v == 0.0 {
                        "0".to_string()
                    } else if v >= 100.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.4}")
                    },
                    (x0, v + max * 0.07),
                    ("sans-serif", 14),
                )))
                .map_err(|e| out_err(e.to_string()))?;
        }
    }
    root.present().map_err(|e| out_err(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &str, ops_per_sec: f64) -> PhaseResult {
        PhaseResult {
            name: name.into(),
            ops: 100,
            seconds: 100.0 / ops_per_sec,
            ops_per_sec,
            mean_us: 1.0,
            threads: 1,
            p50_us: 1.0,
            p99_us: 2.0,
            found: 0,
            io: None,
            device_read_bytes: None,
            cold: false,
        }
    }

    fn run(engine: &str, policy: &str, filter: &str, phases: Vec<PhaseResult>) -> Run {
        Run {
            engine: engine.into(),
            policy: policy.into(),
            filter: filter.into(),
            bits_per_key_setting: 10.0,
            keys: 100,
            phases,
            shape: None,
            missing: None,
        }
    }

    /// A workload run twice: the figures come from its last run, which
    /// `shape` and `missing` describe too.
    #[test]
    fn a_repeated_phase_reports_its_last_run() {
        let r = run(
            "sievedb",
            "bloom",
            "bloom",
            vec![
                phase("readrandom", 1.0),
                phase("compact", 1.0),
                phase("readrandom", 7.0),
            ],
        );
        assert_eq!(r.phase("readrandom").map(|p| p.ops_per_sec), Some(7.0));
    }

    /// The header names the threads the phases used, not only the setting
    /// (`--num 1 --threads 4` ran on one thread and said four).
    #[test]
    fn the_header_names_the_threads_used() {
        let mut one = phase("readrandom", 1.0);
        let mut four = phase("fillrandom", 1.0);
        four.threads = 4;
        let report = |phases: Vec<PhaseResult>| Report {
            command: String::new(),
            machine: Machine::detect(),
            cold: false,
            reads: 100,
            threads: 4,
            runs: vec![run("sievedb", "bloom", "bloom", phases)],
            total_seconds: 1.0,
        };
        assert_eq!(report(vec![four.clone()]).threads_note(), "4 thread(s)");
        let mixed = report(vec![four, one.clone()]).threads_note();
        assert!(mixed.contains("4 thread(s) asked for, 1/4 used"), "{mixed}");
        one.threads = 2;
        assert!(report(vec![one]).threads_note().contains("2 used"));
    }

    /// Peers are paired by filter policy, whatever settings decorate
    /// sievedb's label, and a repeated workload gets a row per run.
    #[test]
    fn peer_rows_pair_decorated_labels_and_repeated_phases() {
        let report = Report {
            command: String::new(),
            machine: Machine::detect(),
            cold: false,
            reads: 100,
            threads: 1,
            runs: vec![
                run(
                    "sievedb",
                    "bloom+lz4",
                    "bloom",
                    vec![phase("readrandom", 200.0), phase("readrandom", 300.0)],
                ),
                run(
                    "rocksdb",
                    "bloom",
                    "bloom",
                    vec![phase("readrandom", 100.0), phase("readrandom", 100.0)],
                ),
            ],
            total_seconds: 1.0,
        };
        let table = peer_table(&report).expect("two engines");
        let rows: Vec<&str> = table.lines().skip(1).collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert!(
            rows[0].contains("bloom+lz4") && rows[0].contains("2.00"),
            "{table}"
        );
        assert!(rows[1].contains("3.00"), "{table}");
    }
}
