//! Runs the `sieve-bench` binary on a small key set and checks that its
//! numbers are complete and agree with each other: every policy present,
//! Ribbon smaller than Bloom, Bloom far below no filter on missing keys, and
//! measured data-block reads per missing get matching what the tables'
//! key ranges and the policies' false-positive rates predict.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sieve-bench");

/// Runs sieve-bench with `extra` and the given database directory and
/// output paths, returning what it printed and its exit status.
fn bench_output(extra: &[&str], db: &Path, json: &Path, chart: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(extra)
        .arg("--dir")
        .arg(db)
        .arg("--json")
        .arg(json)
        .arg("--chart")
        .arg(chart)
        .output()
        .expect("run sieve-bench")
}

fn run_bench(dir: &Path, extra: &[&str]) -> Value {
    let json = dir.join("results.json");
    let chart = dir.join("chart.svg");
    // 20,000 keys unless the test asks for another count.
    let num = if extra.contains(&"--num") {
        &[][..]
    } else {
        &["--num", "20000"][..]
    };
    let out = Command::new(BIN)
        .args(num)
        .args(["--seed", "7"])
        .arg("--dir")
        .arg(dir.join("db"))
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(&chart)
        .args(extra)
        .output()
        .expect("run sieve-bench");
    assert!(
        out.status.success(),
        "sieve-bench failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let svg = std::fs::read_to_string(&chart).expect("chart written");
    assert!(svg.contains("<svg"), "chart is not an SVG");
    serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
        .expect("valid json")
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number: {cur}"))
}

fn run_of<'a>(report: &'a Value, policy: &str) -> &'a Value {
    report["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["engine"] == "sievedb" && r["policy"] == policy)
        .unwrap_or_else(|| panic!("no sievedb run for policy {policy}"))
}

fn phase<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}"))
}

#[test]
fn default_workloads_agree_with_the_table_shape() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_bench(dir.path(), &[]);
    assert_eq!(report["runs"].as_array().unwrap().len(), 3);
    let reads = f(&report, &["reads"]);
    assert_eq!(reads, 20000.0, "default --reads is min(num, 200000)");

    for policy in ["bloom", "ribbon", "none"] {
        let run = run_of(&report, policy);
        for name in [
            "fillrandom",
            "compact",
            "readrandom",
            "readmissing",
            "readzipf",
            "scan",
            "scanrev",
        ] {
            let p = phase(run, name);
            assert!(f(p, &["ops_per_sec"]) > 0.0, "{policy} {name} ops/s");
        }
        // Every present get found its key and read at least the block
        // holding it.
        let rr = phase(run, "readrandom");
        assert_eq!(f(rr, &["found"]), reads, "{policy}");
        assert!(f(rr, &["io", "get_data_block_reads"]) >= reads, "{policy}");
        assert_eq!(f(phase(run, "readzipf"), &["found"]), reads, "{policy}");
        assert_eq!(f(phase(run, "readmissing"), &["found"]), 0.0, "{policy}");

        let m = &run["missing"];
        let covering = f(m, &["covering_tables_per_get"]);
        assert!(
            covering >= 1.0,
            "{policy}: every missing key sits inside some table"
        );
        // A missing key is checked against every table covering it.
        assert!(
            (f(m, &["filter_checks_per_get"]) - covering).abs() < 1e-9,
            "{policy}: filter checks {} vs covering tables {covering}",
            f(m, &["filter_checks_per_get"])
        );
        let measured = f(m, &["measured_blocks_per_get"]);
        let expected = f(m, &["expected_blocks_per_get"]);
        if policy == "none" {
            assert!(
                (measured - covering).abs() < 1e-9,
                "none: {measured} blocks per missing get, {covering} covering tables"
            );
        } else {
            // False positives are a Poisson count: allow five standard
            // deviations plus 15% for the rate's spread between tables.
            let sigma = (expected / reads).sqrt();
            assert!(
                (measured - expected).abs() <= 5.0 * sigma + 0.15 * expected,
                "{policy}: measured {measured} vs expected {expected} blocks per missing get"
            );
        }
    }

    let bloom = run_of(&report, "bloom");
    let ribbon = run_of(&report, "ribbon");
    let none = run_of(&report, "none");
    let fb = |r: &Value| f(r, &["shape", "filter_bytes"]);
    assert!(
        fb(ribbon) > 0.0 && fb(ribbon) < fb(bloom),
        "ribbon {} vs bloom {}",
        fb(ribbon),
        fb(bloom)
    );
    assert_eq!(fb(none), 0.0);
    let bpk = f(bloom, &["shape", "filter_bits_per_key"]);
    assert!((9.0..=11.5).contains(&bpk), "bloom bits/key {bpk}");
    let miss = |r: &Value| f(r, &["missing", "measured_blocks_per_get"]);
    assert!(
        miss(bloom) < miss(none),
        "bloom {} vs none {}",
        miss(bloom),
        miss(none)
    );
    assert!(
        miss(bloom) <= 0.05 * miss(none),
        "bloom {} vs none {}",
        miss(bloom),
        miss(none)
    );
    // Scans return the requested number of entries (starts near the end,
    // or for backward scans near the beginning, return fewer; the phase
    // itself fails on a wrong key or count).
    for name in ["scan", "scanrev"] {
        let scan = phase(bloom, name);
        assert!(f(scan, &["found"]) > f(scan, &["ops"]) * 90.0, "{name}");
    }
}

#[test]
fn monkey_budget_runs_are_labelled_and_agree_with_their_tables() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_bench(
        dir.path(),
        &[
            "--num",
            "60000",
            "--reads",
            "20000",
            "--filter",
            "bloom",
            "--filter-budget",
            "monkey",
            "--benchmarks",
            "fillrandom,compact,readmissing",
        ],
    );
    let run = run_of(&report, "bloom+monkey");
    assert_eq!(f(phase(run, "readmissing"), &["found"]), 0.0);
    let m = &run["missing"];
    // The per-level counters add up to the totals.
    let per_level = m["per_level"].as_array().expect("per_level");
    assert!(!per_level.is_empty());
    let checks: f64 = per_level.iter().map(|l| l[1].as_f64().unwrap()).sum();
    assert!((checks - f(m, &["filter_checks_per_get"])).abs() < 1e-9);
    // The expected reads add each covering table's own rate, at the size
    // the table recorded. (The `compact` phase settles the tree first, so
    // no flush races the shape taken before the reads.)
    assert!(f(m, &["covering_tables_per_get"]) >= 1.0);
    assert_measured_blocks_near_expected(m, 20_000.0);
}

/// The missing-key phase `m`'s measured data blocks per get within five
/// standard deviations (of `reads` Poisson reads), plus 15%, of the
/// expected ones.
fn assert_measured_blocks_near_expected(m: &Value, reads: f64) {
    let (measured, expected) = (
        f(m, &["measured_blocks_per_get"]),
        f(m, &["expected_blocks_per_get"]),
    );
    let sigma = (expected / reads).sqrt();
    assert!(
        (measured - expected).abs() <= 5.0 * sigma + 0.15 * expected,
        "measured {measured} vs expected {expected} blocks per missing get"
    );
}

#[test]
fn no_last_level_filters_runs_are_labelled_and_agree_with_their_tables() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_bench(
        dir.path(),
        &[
            "--num",
            "60000",
            "--reads",
            "20000",
            "--filter",
            "bloom",
            "--no-last-level-filters",
            "--benchmarks",
            "fillrandom,compact,readmissing",
        ],
    );
    let run = run_of(&report, "bloom-lastlevel");
    assert_eq!(f(phase(run, "readmissing"), &["found"]), 0.0);
    let m = &run["missing"];
    // A covering table in the deepest level has no filter: the expected
    // reads count it as 1, and the measured ones follow.
    let (measured, expected) = (
        f(m, &["measured_blocks_per_get"]),
        f(m, &["expected_blocks_per_get"]),
    );
    assert!(expected > 0.3, "{expected}");
    let sigma = (expected / 20000.0).sqrt();
    assert!(
        (measured - expected).abs() <= 5.0 * sigma + 0.05 * expected,
        "measured {measured} vs expected {expected} blocks per missing get"
    );
}

/// `--sync-writes`: the run is labelled, every put is one batch, and the
/// fill phase reports the log's counters: one record per batch for one
/// writer, fewer (shared fsyncs, group commit) for four; without the flag
/// four writers still append one record each, as unsynced writes do not
/// group.
#[test]
fn sync_writes_runs_are_labelled_and_report_shared_log_appends() {
    let counters = |extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--num",
            "2000",
            "--reads",
            "2000",
            "--filter",
            "bloom",
            "--benchmarks",
            "fillrandom,readrandom",
        ];
        args.extend_from_slice(extra);
        let report = run_bench(dir.path(), &args);
        let label = if extra.contains(&"--sync-writes") {
            "bloom+sync"
        } else {
            "bloom"
        };
        let run = run_of(&report, label);
        assert_eq!(f(phase(run, "readrandom"), &["found"]), 2000.0);
        let fill = phase(run, "fillrandom");
        (
            f(fill, &["io", "batches_written"]),
            f(fill, &["io", "log_appends"]),
        )
    };
    let (batches, appends) = counters(&["--sync-writes"]);
    assert_eq!((batches, appends), (2000.0, 2000.0));
    let (batches, appends) = counters(&["--sync-writes", "--threads", "4"]);
    assert_eq!(batches, 2000.0);
    // Four writers each waiting about an fsync per put: 2,000 puts with
    // no two ever in one group would take every fsync ending before the
    // next writer arrived.
    assert!(
        (1.0..batches).contains(&appends),
        "{appends} appends for {batches} synced batches from 4 threads"
    );
    let (batches, appends) = counters(&["--threads", "4"]);
    assert_eq!((batches, appends), (2000.0, 2000.0));
}

#[test]
fn cold_mode_reports_device_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_bench(
        dir.path(),
        &[
            "--cold",
            "--filter",
            "bloom",
            "--reads",
            "2000",
            "--benchmarks",
            "fillseq,compact,readrandom,readmissing",
        ],
    );
    assert_eq!(report["cold"], true);
    let run = run_of(&report, "bloom");
    for name in ["readrandom", "readmissing"] {
        let p = phase(run, name);
        assert_eq!(p["cold"], true);
        if Path::new("/proc/self/io").exists() {
            assert!(
                p["device_read_bytes"].is_u64(),
                "{name}: {}",
                p["device_read_bytes"]
            );
        }
    }
    assert_eq!(f(phase(run, "readrandom"), &["found"]), 2000.0);
}

/// The program's output for `args` with `--dir dir`.
fn run_in<I, S>(dir: &Path, args: I) -> std::process::Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(BIN)
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn bad_arguments_are_rejected_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["--num", "1000000", "--key-size", "4"],
        vec!["--benchmarks", "fillrandom,bogus"],
        vec!["--benchmarks", "readrandom"],
        vec!["--threads", "0"],
        vec!["--bits-per-key", "0.5"],
        vec!["--engine", "leveldb"],
        vec!["--engine", "sievedb,sievedb"],
        vec!["--reads", "18446744073709551615"],
        vec!["--scans", "0"],
        vec!["--memtable-kib", "18446744073709551615"],
        vec!["--level1-kib", "0", "--benchmarks", "fillseq,readrandom"],
    ] {
        let out = run_in(dir.path(), &args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid argument"), "{args:?}: {err}");
    }
    if !cfg!(feature = "peer-rocksdb") {
        let out = run_in(dir.path(), ["--engine", "sievedb,rocksdb", "--num", "100"]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("peers"));
    }
    // A peer's writes are not synced by the program: with one selected,
    // `--sync-writes` is refused rather than compared (only reachable in
    // a build with a peer).
    for (feature, peer) in [
        (cfg!(feature = "peer-rocksdb"), "sievedb,rocksdb"),
        (cfg!(feature = "peer-fjall"), "sievedb,fjall"),
    ] {
        if !feature {
            continue;
        }
        let out = run_in(
            dir.path(),
            ["--engine", peer, "--num", "100", "--sync-writes"],
        );
        assert!(!out.status.success(), "{peer}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--sync-writes is for sievedb only"), "{err}");
    }
}

#[test]
fn an_unwritable_output_path_fails_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // A directory where the JSON file should go, and a chart under a
    // regular file (its parent cannot be created).
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    for (flag, path) in [
        ("--json", dir.path().to_path_buf()),
        ("--chart", blocker.join("chart.svg")),
    ] {
        let out = Command::new(BIN)
            .args(["--num", "200000"])
            .arg("--dir")
            .arg(&db)
            .arg(flag)
            .arg(&path)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {path:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        // The JSON path is a directory holding `--dir`: refused as either.
        assert!(
            err.contains("I/O error on") || err.contains("invalid argument"),
            "{flag}: {err}"
        );
        // Nothing was loaded: the run never started.
        assert!(!db.exists(), "{flag}: the benchmark ran before failing");
        assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    }
    // An existing writable file passes the check and receives the report.
    let json = dir.path().join("old.json");
    std::fs::write(&json, b"previous").unwrap();
    let out = Command::new(BIN)
        .args(["--num", "1000", "--benchmarks", "fillrandom,readrandom"])
        .arg("--dir")
        .arg(&db)
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(dir.path().join("chart.svg"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&json).unwrap().contains("\"runs\""));
}

#[test]
fn a_read_before_the_first_fill_is_an_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    for order in [
        "readrandom,fillseq",
        "fillseq,readrandom,fillrandom",
        "scan",
    ] {
        let out = Command::new(BIN)
            .args(["--num", "100", "--filter", "bloom", "--benchmarks", order])
            .arg("--dir")
            .arg(dir.path().join("db"))
            .arg("--json")
            .arg(dir.path().join("r.json"))
            .arg("--chart")
            .arg(dir.path().join("c.svg"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if order.starts_with("fillseq") {
            assert!(out.status.success(), "{order}: {err}");
        } else {
            assert!(!out.status.success(), "{order} succeeded");
            assert!(err.contains("invalid argument"), "{order}: {err}");
            assert!(err.contains("need a fill first"), "{order}: {err}");
        }
    }
}

/// The missing-key check must use the tree its reads ran against (with no
/// filter, every covering table costs exactly one block and one filter
/// check, so measured equals expected and checks equal covering tables).
/// A compaction between read phases changes the tree; so do the background
/// compactions a fill without a `compact` phase leaves running, which the
/// program now waits for before each read phase (found by review,
/// seventeenth session: the shape was taken while they still ran).
#[test]
fn expected_blocks_use_the_shape_the_missing_reads_ran_against() {
    for (num, workloads) in [
        ("20000", "fillseq,readrandom,compact,readmissing"),
        ("200000", "fillrandom,readrandom,readzipf,readmissing"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let v = run_bench(
            dir.path(),
            &["--num", num, "--filter", "none", "--benchmarks", workloads],
        );
        let missing = &run_of(&v, "none")["missing"];
        let covering = f(missing, &["covering_tables_per_get"]);
        let checks = f(missing, &["filter_checks_per_get"]);
        let measured = f(missing, &["measured_blocks_per_get"]);
        let expected = f(missing, &["expected_blocks_per_get"]);
        assert!(measured > 0.5, "{workloads}: measured {measured}");
        assert!(
            (measured - expected).abs() < 1e-9 && (checks - covering).abs() < 1e-9,
            "{workloads}: measured {measured} blocks per missing get, expected {expected}; \
             {checks} filter checks against {covering} covering tables (shape {})",
            run_of(&v, "none")["shape"]
        );
    }
}

/// Regressions (found by review, fifteenth session) in what sieve-bench
/// reports: in cold mode the tree shape was taken before the reopen that
/// writes the log's contents into a level-0 table (so a tree without
/// tables was reported while the reads checked filters); a figure not
/// measured was drawn as 0 in the chart; a false-positive rate over zero
/// filter checks was printed as 0%.
#[test]
fn reported_figures_describe_what_was_measured() {
    // Cold, no flush before the reads: the reopen writes the only table.
    let dir = tempfile::tempdir().unwrap();
    let v = run_bench(
        dir.path(),
        &[
            "--cold",
            "--filter",
            "none",
            "--reads",
            "2000",
            "--benchmarks",
            "fillrandom,readmissing",
        ],
    );
    let run = run_of(&v, "none");
    assert!(f(run, &["shape", "table_bytes"]) > 0.0, "{}", run["shape"]);
    // The filter-memory panel, all bars 0, has an axis whose ticks read
    // as numbers (an axis to a millionth labelled every tick "0.0"; found
    // by review, thirtieth session): one "0.0" tick a panel at most.
    let svg = std::fs::read_to_string(dir.path().join("chart.svg")).unwrap();
    let zero_ticks = svg.lines().filter(|l| l.trim() == "0.0").count();
    assert!(zero_ticks <= 2, "{zero_ticks} ticks labelled 0.0");
    let missing = &run["missing"];
    let measured = f(missing, &["measured_blocks_per_get"]);
    assert!(measured > 0.5, "{missing}");
    assert!((f(missing, &["expected_blocks_per_get"]) - measured).abs() < 1e-9);

    // Warm, everything still in the memtable: no filter was checked, and
    // the rate is absent (null, printed "-"), not 0% or NaN.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = bench_output(
        &[
            "--num",
            "1000",
            "--filter",
            "bloom",
            "--benchmarks",
            "fillrandom,readmissing",
        ],
        &dir.path().join("db"),
        &json,
        &dir.path().join("c.svg"),
    );
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("NaN") && !stdout.contains("0.000%"),
        "{stdout}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let missing = &run_of(&v, "bloom")["missing"];
    assert!(missing["measured_fp_rate_per_check"].is_null(), "{missing}");
    assert_eq!(f(missing, &["filter_checks_per_get"]), 0.0);

    // No missing-key phase: the chart says n/a instead of a 0 bar.
    let dir = tempfile::tempdir().unwrap();
    run_bench(
        dir.path(),
        &[
            "--filter",
            "bloom",
            "--benchmarks",
            "fillrandom,compact,readrandom",
        ],
    );
    let svg = std::fs::read_to_string(dir.path().join("chart.svg")).unwrap();
    assert!(svg.contains("n/a"), "no n/a label in the chart");
}
/// Found by review: `--json` and `--chart` naming the same file. Both are "written"
/// (the program says so and exits 0), but the chart overwrites the JSON
/// report: the results are lost without an error.
#[test]
fn json_and_chart_at_one_path_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let same = dir.path().join("out");
    let out = bench_output(
        &[
            "--num",
            "100",
            "--filter",
            "bloom",
            "--benchmarks",
            "fillrandom,readrandom",
        ],
        &dir.path().join("db"),
        &same,
        &same,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("invalid argument"),
        "exit {:?}, stderr: {err}, stdout: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Found by review: `--dir` naming the `--json` path (or, next review, a
/// directory below it). `check_writable` promises
/// that an output path that is a directory "fails here instead of after
/// minutes of benchmarking", but the run then creates the directory itself
/// and only the final write fails, after every phase has run.
#[test]
fn a_dir_at_or_below_the_json_path_fails_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("results.json");
    for db in [json.clone(), json.join("db")] {
        let out = bench_output(
            &[
                "--num",
                "20000",
                "--filter",
                "bloom",
                "--benchmarks",
                "fillrandom,compact,readrandom",
            ],
            &db,
            &json,
            &dir.path().join("c.svg"),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--dir {db:?}: exit 0");
        assert!(err.contains("invalid argument"), "--dir {db:?}: {err}");
        assert!(
            stdout.is_empty(),
            "--dir {db:?}: the benchmark ran to the end before failing: {err}\n{stdout}"
        );
    }
}

/// Found by review: an output path in the directory a run deletes and
/// recreates (`<dir>/sievedb-bloom`), and a `--dir` that reaches the
/// `--json` path through a missing directory and `..`, were refused only
/// after the run, or not at all.
#[test]
fn outputs_in_a_run_directory_or_reached_through_dotdot_fail_before_the_run() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("d");
    let chart = t.path().join("c.svg");
    let cases = [
        (d.clone(), d.join("sievedb-bloom")),
        (d.clone(), d.join("sievedb-bloom").join("CURRENT")),
        (
            t.path().join("new").join("..").join("j"),
            t.path().join("j"),
        ),
    ];
    for (db, json) in cases {
        let out = bench_output(
            &[
                "--num",
                "2000",
                "--filter",
                "bloom",
                "--benchmarks",
                "fillrandom,readrandom",
            ],
            &db,
            &json,
            &chart,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("invalid argument"),
            "--dir {db:?} --json {json:?}: {err}"
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).is_empty(),
            "ran: {err}"
        );
        assert!(!chart.exists());
    }
}

/// Found by review: the tables are printed before the JSON and the chart
/// are written, with `println!`, which panics when stdout cannot be
/// written (a reader that has gone, `| head`, or a full disk): the run
/// ends in a panic backtrace (exit 101) and neither file is written.
#[test]
fn an_unwritable_stdout_is_an_error_not_a_panic_and_the_files_are_written() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("results.json");
    let chart = dir.path().join("chart.svg");
    // A pipe whose reader is gone before the program prints.
    let mut child = Command::new(BIN)
        .args(["--num", "1000", "--filter", "bloom", "--dir"])
        .arg(dir.path().join("db"))
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(&chart)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sieve-bench");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "closed stdout: {err}");
    assert_ne!(out.status.code(), Some(101), "closed stdout: {err}");
    assert!(json.exists(), "closed stdout: results.json not written");
    assert!(chart.exists(), "closed stdout: chart.svg not written");
    // A full device.
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        std::fs::remove_file(&json).unwrap();
        let out = Command::new(BIN)
            .args(["--num", "1000", "--filter", "bloom", "--dir"])
            .arg(dir.path().join("db"))
            .arg("--json")
            .arg(&json)
            .arg("--chart")
            .arg(&chart)
            .stdout(full)
            .output()
            .expect("run sieve-bench");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "stdout on /dev/full: {err}");
        assert!(!out.status.success(), "stdout on /dev/full succeeded");
        assert!(
            json.exists(),
            "stdout on /dev/full: results.json not written"
        );
    }
}

/// Found by review: at `--bits-per-key` below about 1.45 the Ribbon run's
/// `expected` column uses `RibbonPolicy::fp_rate` (above 1/2), but its
/// filters answer at 1/2 (one result column everywhere): at 1 bit/key,
/// measured 0.50 blocks per missing get against 0.63 expected, tens of
/// standard deviations apart.
#[test]
fn ribbon_expected_blocks_hold_at_the_lowest_bits_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_bench(
        dir.path(),
        &[
            "--filter",
            "ribbon",
            "--bits-per-key",
            "1",
            "--benchmarks",
            "fillrandom,compact,readmissing",
        ],
    );
    let m = &run_of(&report, "ribbon")["missing"];
    assert_measured_blocks_near_expected(m, 20_000.0);
}

/// Found by review: without `--dir` the databases go to a temporary
/// directory "removed at exit" (`--help`), but Ctrl-C (SIGINT) ends the
/// process without removing it: each interrupted default run leaves up to
/// a few hundred MB in the temporary directory.
#[test]
fn ctrl_c_removes_the_temporary_database_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut child = long_run(tmp.path(), out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run sieve-bench");
    wait_for_temp_run_dir(tmp.path());
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: signals a child this test spawned and has not yet reaped.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert_eq!(
        temp_run_dirs(tmp.path()),
        Vec::<String>::new(),
        "left in the temporary directory"
    );
}

/// Found by review: each run directory under `--dir` is deleted and
/// recreated without asking whether a database in it is open: a second
/// sieve-bench with the same `--dir` (or any process holding the
/// database's `LOCK`) has its live database deleted under it (the first
/// run then fails with "No such file or directory" on a table it writes).
#[test]
fn a_run_directory_holding_an_open_database_is_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("db").join("sievedb-bloom");
    std::fs::create_dir_all(&run_dir).unwrap();
    let db = sievedb::Db::open(&run_dir, sievedb::Options::default()).unwrap();
    db.put(b"mine", b"keep me").unwrap();
    db.flush().unwrap();
    let out = bench_output(
        &["--num", "1000", "--filter", "bloom"],
        &dir.path().join("db"),
        &dir.path().join("results.json"),
        &dir.path().join("chart.svg"),
    );
    assert!(
        !out.status.success(),
        "sieve-bench ran in a directory whose database is open"
    );
    drop(db);
    let db = sievedb::Db::open(&run_dir, sievedb::Options::default()).unwrap();
    assert_eq!(db.get(b"mine").unwrap(), Some(b"keep me".to_vec()));
}

/// A run long enough to interrupt (300,000 keys, no filter), its
/// temporary directory under `tmp` and its JSON and chart under `out`.
fn long_run(tmp: &Path, out: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--num", "300000", "--filter", "none", "--json"])
        .arg(out.join("results.json"))
        .arg("--chart")
        .arg(out.join("chart.svg"))
        .env("TMPDIR", tmp);
    cmd
}

/// The entries of `tmp` that are sieve-bench's temporary directories.
fn temp_run_dirs(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sieve-bench-"))
        .collect()
}

/// Waits (up to 30 s) until a sieve-bench started with `TMPDIR=tmp` has
/// created its temporary directory, and so installed its signal handler.
fn wait_for_temp_run_dir(tmp: &Path) {
    let start = std::time::Instant::now();
    while temp_run_dirs(tmp).is_empty() && start.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!temp_run_dirs(tmp).is_empty(), "no temporary directory");
}

/// Found by review of the Ctrl-C handler (419d469): the handler exits with
/// status 130 instead of dying by the signal, so a shell running
/// sieve-bench in a script (`for b in 4 8 12; do sieve-bench
/// --bits-per-key $b; done`) takes the Ctrl-C as handled by the program
/// and goes on with the next command (bash's "wait and cooperative exit":
/// a foreground command that did not die of SIGINT handled it). Before the
/// handler, and with `--dir` still, Ctrl-C stops the whole script.
#[test]
fn ctrl_c_stops_the_shell_script_running_sieve_bench() {
    use std::os::unix::process::CommandExt;
    if Command::new("bash").arg("-c").arg("true").status().is_err() {
        return; // no bash to run the script
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let script = format!(
        "'{BIN}' --num 300000 --filter none --json '{}' --chart '{}' >/dev/null 2>&1; \
         echo \"sieve-bench exited $?\"; echo the script went on",
        out.path().join("results.json").display(),
        out.path().join("chart.svg").display(),
    );
    let child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("run bash");
    wait_for_temp_run_dir(tmp.path());
    std::thread::sleep(std::time::Duration::from_millis(200));
    // Ctrl-C at a terminal: SIGINT to the whole foreground process group.
    // SAFETY: signals the process group of a child this test spawned.
    let rc = unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGINT) };
    assert_eq!(rc, 0);
    let done = child.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&done.stdout);
    assert!(
        !printed.contains("the script went on"),
        "Ctrl-C did not stop the script: {printed:?}"
    );
    assert_eq!(temp_run_dirs(tmp.path()), Vec::<String>::new());
}

/// Found by review of the Ctrl-C handler (419d469): it exits with 130 (the
/// status of SIGINT) on SIGTERM too, so whoever sent SIGTERM (a job
/// runner, `kill`, `timeout`) sees an interrupt from the keyboard rather
/// than its own signal. Expected: death by SIGTERM (or 143) after the
/// cleanup.
#[test]
fn sigterm_is_reported_as_sigterm() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut child = long_run(tmp.path(), out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run sieve-bench");
    wait_for_temp_run_dir(tmp.path());
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "finished too soon");
    // SAFETY: signals a child this test spawned and has not yet reaped.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    assert!(
        status.signal() == Some(libc::SIGTERM) || status.code() == Some(143),
        "SIGTERM reported as {status:?}"
    );
    assert_eq!(temp_run_dirs(tmp.path()), Vec::<String>::new());
}

/// Found by review of the Ctrl-C handler (419d469): `ctrlc::set_handler`
/// (feature `termination`) replaces the disposition of SIGINT, SIGTERM and
/// SIGHUP even where the run was started with it ignored. A long run
/// started with `nohup sieve-bench ... &` is then ended (status 130, its
/// databases deleted, no results) when the terminal closes and SIGHUP
/// arrives; before the handler, and with `--dir` still, it goes on.
#[test]
fn a_run_started_with_sighup_ignored_survives_a_hangup() {
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("results.json");
    let mut cmd = long_run(tmp.path(), out.path());
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // What `nohup` does before it runs the command.
    // SAFETY: `signal` is async-signal-safe, as `pre_exec` requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("run sieve-bench");
    wait_for_temp_run_dir(tmp.path());
    assert!(child.try_wait().unwrap().is_none(), "finished too soon");
    // SAFETY: signals a child this test spawned and has not yet reaped.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0);
    let done = child.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "a hangup ended a run that ignores it: {:?}, {}",
        done.status,
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(json.exists(), "results.json not written");
}

/// Whether a process holds a POSIX record lock on `lock` (the engine's
/// `LOCK`), asked with `F_GETLK` (which takes no lock): `None` if there
/// is no such file.
fn lock_is_held(lock: &Path) -> Option<bool> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(lock)
        .ok()?;
    // SAFETY: `flock` is plain data; all-zero is a valid value of it.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    // SAFETY: the descriptor is open for the call; `F_GETLK` writes only
    // into the `flock` passed by pointer.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut fl) };
    assert_eq!(rc, 0, "F_GETLK: {}", std::io::Error::last_os_error());
    Some(i32::from(fl.l_type) != libc::F_UNLCK)
}

/// Found by review of `remove_run_dir` (419d469): with `--cold`, every read
/// phase evicts the database's files from the page cache with the engine
/// open (`cold::evict_dir` after `settle`), opening and closing each file,
/// `LOCK` included, and closing any descriptor of a file drops this
/// process's POSIX record locks on it. From the first read phase on, the
/// database is open but unlocked: a second sieve-bench with the same
/// `--dir` deletes it under the first (the guard this change added sees
/// no lock), and any process can open it beside the first.
#[test]
fn a_cold_run_keeps_its_database_locked_while_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let lock = db.join("sievedb-bloom").join("LOCK");
    let mut first = Command::new(BIN)
        .args([
            "--num", "20000", "--filter", "bloom", "--cold", "--reads", "3000000",
        ])
        .args(["--benchmarks", "fillrandom,readrandom", "--dir"])
        .arg(&db)
        .arg("--json")
        .arg(dir.path().join("first.json"))
        .arg("--chart")
        .arg(dir.path().join("first.svg"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sieve-bench");
    // Once the database was seen locked, an unlocked stretch of more than
    // 500 ms while the run goes on is the read phase (the reopen around
    // the eviction is a few milliseconds).
    let mut seen_locked = false;
    let mut unlocked_since: Option<std::time::Instant> = None;
    let mut second = None;
    while first.try_wait().unwrap().is_none() {
        match lock_is_held(&lock) {
            Some(true) => {
                seen_locked = true;
                unlocked_since = None;
            }
            Some(false) if seen_locked => {
                let since = *unlocked_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed().as_millis() > 500 && second.is_none() {
                    second = Some(bench_output(
                        &["--num", "1000", "--filter", "bloom"],
                        &db,
                        &dir.path().join("second.json"),
                        &dir.path().join("second.svg"),
                    ));
                    break;
                }
            }
            _ => {}
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let first = first.wait_with_output().unwrap();
    if let Some(second) = second {
        panic!(
            "the first run's database was unlocked for 500 ms while it read; a second \
             run with the same --dir then exited {:?} (first run: {:?}, {})",
            second.status,
            first.status,
            String::from_utf8_lossy(&first.stderr)
        );
    }
    assert!(seen_locked, "never saw the database locked");
    assert!(first.status.success());
}

/// Found by review of the Ctrl-C handler (419d469): the handler deletes the
/// temporary directory while the run's threads still write in it, and
/// nothing stops the main thread from failing on the vanished files and
/// ending the process first: exit status 1 and "I/O error ... No such file
/// or directory" instead of "interrupted" (3 of 100 and 2 of 40 random
/// interrupts in one review, 1 of 60 in another). A stress test: each
/// attempt interrupts a run at a random moment.
#[test]
#[ignore = "stress: 60 interrupted runs, about 50 s; run with --ignored"]
fn ctrl_c_at_any_moment_exits_as_interrupted() {
    use std::os::unix::process::ExitStatusExt;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for attempt in 0..60 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = 20 + seed % 1_500;
        let tmp = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let child = Command::new(BIN)
            .args(["--num", "100000", "--threads", "2", "--memtable-kib", "256"])
            .arg("--json")
            .arg(out.path().join("results.json"))
            .arg("--chart")
            .arg(out.path().join("chart.svg"))
            .env("TMPDIR", tmp.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run sieve-bench");
        wait_for_temp_run_dir(tmp.path());
        std::thread::sleep(std::time::Duration::from_millis(delay));
        // SAFETY: signals a child this test spawned and has not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        let done = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        if done.status.success() {
            continue; // finished before the signal
        }
        assert!(
            (done.status.code() == Some(130) || done.status.signal() == Some(libc::SIGINT))
                && !err.contains("error"),
            "attempt {attempt}, interrupted after {delay} ms: {:?}, {err}",
            done.status
        );
        assert_eq!(temp_run_dirs(tmp.path()), Vec::<String>::new());
    }
}

/// Found by review of the signal thread (7d7c205): it reported the
/// interrupt with `eprintln!`, which panics when standard error is a closed
/// pipe (`sieve-bench ... 2>&1 | tee log` and Ctrl-C: tee dies of the same
/// SIGINT). The thread then died before it raised the signal, the main
/// thread, whose run failed on the removed files, parked forever, and every
/// further SIGINT/SIGTERM/SIGHUP was blocked: the process hung.
#[test]
fn ctrl_c_with_stderr_a_closed_pipe_still_ends_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut child = long_run(tmp.path(), out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sieve-bench");
    // The reader of its standard error goes away (as `tee` does on Ctrl-C).
    drop(child.stderr.take());
    wait_for_temp_run_dir(tmp.path());
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "finished too soon");
    // SAFETY: signals a child this test spawned and has not yet reaped.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed().as_secs() >= 20 {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    if status.is_none() {
        child.kill().unwrap(); // SIGKILL: the only signal it still takes
        child.wait().unwrap();
    }
    assert!(
        status.is_some_and(|s| !s.success()),
        "sieve-bench still running 20 s after Ctrl-C (status {status:?})"
    );
    assert_eq!(temp_run_dirs(tmp.path()), Vec::<String>::new());
}

/// The policies of one run are compared side by side, so the tree they
/// read must not depend on when compactions ran. With sievedb's background
/// compactions off during the load (the benchmark's default: the loading
/// thread runs the due flushes and compactions every 1,024 puts) two runs
/// build the same tree for each policy, and Bloom and Ribbon the same tree
/// as each other. (The policy still reaches the shape through its filters'
/// bytes, which count toward a level's size, so no filter can differ.)
/// With background compactions a review saw `[0,0,3,2]` against
/// `[0,1,3,2]` and 1.27 against 2.38 covering tables per missing get
/// between the policies of one run.
#[test]
fn a_load_builds_the_same_tree_every_run_and_for_bloom_and_ribbon() {
    let shapes = |report: &Value| -> Vec<(String, String, f64)> {
        report["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["policy"].as_str().unwrap().to_string(),
                    r["shape"]["tables_per_level"].to_string(),
                    f(r, &["missing", "covering_tables_per_get"]),
                )
            })
            .collect()
    };
    let args = [
        "--num",
        "150000",
        "--reads",
        "5000",
        "--memtable-kib",
        "512",
        "--level1-kib",
        "1024",
        "--benchmarks",
        "fillrandom,compact,readmissing",
    ];
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    let a = shapes(&run_bench(first.path(), &args));
    let b = shapes(&run_bench(second.path(), &args));
    assert_eq!(a.len(), 3, "bloom, ribbon and none: {a:?}");
    assert_eq!(a, b, "two runs of the same load built different trees");
    let (bloom, ribbon) = (&a[0], &a[1]);
    assert_eq!((&bloom.1, bloom.2), (&ribbon.1, ribbon.2), "{a:?}");
    let levels = bloom
        .1
        .trim_matches(['[', ']'])
        .split(',')
        .filter(|n| *n != "0")
        .count();
    assert!(levels >= 2, "the load fills at least two levels: {a:?}");
}
