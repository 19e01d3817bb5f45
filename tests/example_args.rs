//! The examples README.md and docs/ tell users to run handle bad command
//! lines strictly: a mistyped number, a value out of range, a misspelt
//! policy or budget, an unknown flag or a stray argument ends the run at
//! once with a non-zero exit code that is not a panic's (101) and an error
//! or usage message on stderr, instead of a backtrace or a silent default.
//! Cheap good command lines (`--help`, the documented shapes at tiny sizes)
//! still run.
//!
//! The examples are run as built: `cargo test --release` builds every
//! example into `target/<profile>/examples/` before it runs the tests.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A bad argument must fail fast; a good cheap run takes a second or two.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Every example that parses its command line with clap.
const CLAP_EXAMPLES: &[&str] = &[
    "affine_probe_trial",
    "block_cache",
    "bloom_fp_rate",
    "bloom_probe_schemes",
    "compaction_pick",
    "compression",
    "filter_batch",
    "filter_budget",
    "filters",
    "get_profile",
    "prefix_scan",
    "quickstart",
    "ribbon64_query",
    "ribbon_build",
    "ribbon_overhead",
    "sketch_accuracy",
];

/// The built example `name`, next to this test's executable:
/// `target/<profile>/deps/<test>` -> `target/<profile>/examples/<name>`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test executable sits in target/<profile>/deps");
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "example binary {} is missing: run the full `cargo test --release` \
         (it builds every example before running the tests), or \
         `cargo build --release --examples` first",
        path.display()
    );
    path
}

struct Outcome {
    /// `None` when a signal ended the process.
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs example `name` with `args` and environment `env` (`Q` and `T`,
/// which `bloom_probe_schemes` reads, are removed unless given), killing
/// it if it runs longer than [`TIMEOUT`].
fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let mut command = Command::new(example(name));
    command
        .args(args)
        .env_remove("Q")
        .env_remove("T")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for &(key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"));
    // Drained on threads, so a chatty child never blocks on a full pipe.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the example") {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{name} {args:?} still ran after {TIMEOUT:?} (killed): \
                 a bad argument must fail fast, a good test run must be tiny"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Outcome {
        code: status.code(),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// `name args` is rejected cleanly: a non-zero exit code that is not a
/// panic's (101), no panic message, and stderr says "error" or "usage".
fn assert_rejected_with(name: &str, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let out = run(name, args, env);
    let shown = format!(
        "{name} {args:?} (env {env:?}): exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.code, out.stdout, out.stderr
    );
    match out.code {
        None => panic!("killed by a signal: {shown}"),
        Some(0) => panic!("a bad command line was accepted: {shown}"),
        Some(101) => panic!("panicked on a bad command line: {shown}"),
        Some(_) => {}
    }
    assert!(!out.stderr.contains("panicked"), "panicked: {shown}");
    let stderr = out.stderr.to_lowercase();
    assert!(
        stderr.contains("error") || stderr.contains("usage"),
        "stderr names no error or usage: {shown}"
    );
    out
}

fn assert_rejected(name: &str, args: &[&str]) -> Outcome {
    assert_rejected_with(name, args, &[])
}

/// `name args` runs to the end with exit code 0.
fn assert_runs(name: &str, args: &[&str]) -> Outcome {
    let out = run(name, args, &[]);
    assert_eq!(
        out.code,
        Some(0),
        "{name} {args:?} failed\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    out
}

#[test]
fn every_clap_example_prints_help() {
    for name in CLAP_EXAMPLES {
        let out = assert_runs(name, &["--help"]);
        assert!(
            out.stdout.contains("Usage:"),
            "{name} --help prints no usage:\n{}",
            out.stdout
        );
    }
}

#[test]
fn every_clap_example_rejects_unknown_flags_and_stray_arguments() {
    for name in CLAP_EXAMPLES {
        let out = assert_rejected(name, &["--no-such-flag"]);
        assert_eq!(out.code, Some(2), "{name}: clap's usage exit code");
    }
    // Examples without positional arguments reject any.
    for name in [
        "bloom_fp_rate",
        "bloom_probe_schemes",
        "compaction_pick",
        "filter_budget",
        "filters",
        "get_profile",
        "prefix_scan",
        "quickstart",
        "sketch_accuracy",
    ] {
        assert_rejected(name, &["1000"]);
    }
}

#[test]
fn mistyped_numbers_are_rejected_not_panicked_on() {
    let cases: &[(&str, &[&str])] = &[
        ("affine_probe_trial", &["1e6"]),
        ("affine_probe_trial", &["1000", "x"]),
        ("block_cache", &["2M"]),
        ("block_cache", &["2000000", "32MiB"]),
        ("block_cache", &["2000000", "32", "9", "extra"]),
        ("compaction_pick", &["--writes", "lots"]),
        ("compaction_pick", &["--writes"]),
        ("compression", &["1,000,000"]),
        ("compression", &["1000000", "nine"]),
        ("filter_batch", &["10k"]),
        ("filter_budget", &["--keys", "2M"]),
        ("filter_budget", &["--bits", "ten"]),
        ("filter_budget", &["--memtable-kib", "256k"]),
        ("filter_budget", &["--level1-kib", "-1"]),
        ("prefix_scan", &["--users", "many"]),
        ("prefix_scan", &["--items", "10.5"]),
        ("ribbon64_query", &["1m"]),
        ("ribbon_build", &["1e6"]),
        ("ribbon_build", &["1000000", "9", "1024", "three"]),
        (
            "ribbon_build",
            &["1000000", "9", "1024", "3", "0.02", "extra"],
        ),
        ("ribbon_overhead", &["one"]),
        ("ribbon_overhead", &["1", "64", "extra"]),
        ("filter_race", &["lots"]),
        ("filter_race", &["1000000", "400", "extra"]),
    ];
    for (name, args) in cases {
        assert_rejected(name, args);
    }
}

#[test]
fn values_out_of_range_are_rejected_not_panicked_on() {
    // Each of these used to panic (or crash) a long way into the run, or
    // was silently clamped.
    let cases: &[(&str, &[&str])] = &[
        ("affine_probe_trial", &["0"]),
        ("affine_probe_trial", &["999"]),
        ("affine_probe_trial", &["1000", "0"]),
        ("affine_probe_trial", &["1000", "1", "3"]),
        ("affine_probe_trial", &["1000", "1", "0"]),
        ("block_cache", &["999"]),
        ("block_cache", &["2000000", "32", "0"]),
        ("compression", &["999"]),
        ("compression", &["1000000", "0"]),
        ("filter_batch", &["999"]),
        ("filter_batch", &["10000", "0"]),
        ("filter_budget", &["--keys", "0"]),
        ("filter_budget", &["--bits", "0"]),
        ("filter_budget", &["--bits", "nan"]),
        ("filter_budget", &["--memtable-kib", "0"]),
        ("ribbon64_query", &["0"]),
        ("ribbon64_query", &["999"]),
        ("ribbon_build", &["1000"]),
        ("ribbon_build", &["1000000", "0"]),
        ("ribbon_build", &["1000000", "9", "0"]),
        ("ribbon_build", &["1000000", "9", "1024", "5"]),
        ("ribbon_build", &["1000000", "9", "1024", "3", "11"]),
        ("ribbon_overhead", &["0"]),
        ("ribbon_overhead", &["inf"]),
        ("ribbon_overhead", &["1", "65"]),
        ("filter_race", &["9999"]),
        ("filter_race", &["1000000", "0"]),
    ];
    for (name, args) in cases {
        assert_rejected(name, args);
    }
}

#[test]
fn misspelt_policies_and_budgets_are_rejected() {
    for (name, args, bad) in [
        ("filter_budget", ["--policy", "ribon"], "ribon"),
        ("filter_budget", ["--policy", "Bloom!"], "Bloom!"),
        ("prefix_scan", ["--policy", "ribon"], "ribon"),
        ("prefix_scan", ["--budget", "monky"], "monky"),
        ("prefix_scan", ["--budget", "uniformm"], "uniformm"),
    ] {
        let out = assert_rejected(name, &args);
        assert_eq!(out.code, Some(2), "{name} {args:?}: clap's usage exit code");
        assert!(
            out.stderr.contains(bad) && out.stderr.contains("possible values"),
            "{name} {args:?}: stderr names neither the bad value nor the choices:\n{}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{name} {args:?} started a run");
    }
}

#[test]
fn bad_environment_variables_are_rejected() {
    for env in [
        [("Q", "4M")],
        [("Q", "0")],
        [("T", "sixty-four")],
        [("T", "0")],
    ] {
        let out = assert_rejected_with("bloom_probe_schemes", &[], &env);
        assert_eq!(out.code, Some(2), "{env:?}");
        assert!(out.stdout.is_empty(), "{env:?} started a run");
    }
}

#[test]
fn documented_shapes_run_at_tiny_sizes() {
    // The command-line shapes of README.md and docs/*.md, with sizes small
    // enough for a test.
    let out = assert_runs(
        "filter_budget",
        &[
            "--keys",
            "2000",
            "--policy",
            "ribbon",
            "--bits",
            "10",
            "--memtable-kib",
            "1024",
            "--level1-kib",
            "4096",
        ],
    );
    assert!(
        out.stdout.contains("ribbon at 10 bits/key"),
        "{}",
        out.stdout
    );
    // Ribbon filters really are built: about 7 bits/key at Bloom's 10
    // bits/key rate (Bloom takes about 10).
    let uniform = out
        .stdout
        .lines()
        .find(|l| l.starts_with("uniform "))
        .expect("a uniform row");
    let bits_per_key: f64 = uniform.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(bits_per_key < 9.0, "not Ribbon filters: {uniform}");

    let out = assert_runs(
        "prefix_scan",
        &[
            "--users", "200", "--items", "2", "--policy", "ribbon", "--budget", "monkey",
        ],
    );
    assert!(
        out.stdout.contains("Ribbon filters") && out.stdout.contains("Monkey budget"),
        "{}",
        out.stdout
    );

    assert_runs("block_cache", &["1000", "1", "1"]);
    assert_runs("compression", &["1000", "1"]);
    assert_runs("filter_batch", &["1000"]);
    assert_runs("ribbon_build", &["2000", "1", "1024", "3", "0.022"]);
    // Prints a notice and exits 0 on a CPU without AVX-512.
    assert_runs("affine_probe_trial", &["1000", "1", "64"]);
    assert_runs("filter_race", &["10000", "1"]);
}
