//! Process-crash test: a child process (this test binary, re-executed)
//! writes batches with `sync_writes = true` and tiny memtables and levels, so
//! flushes and compactions run all the time, and prints each acknowledged
//! batch id on stdout. The parent kills it with SIGKILL at a random moment,
//! reopens the database, and checks that every acknowledged batch is fully
//! present, no batch is partly applied, and the database accepts writes (the
//! next round's child continues from where recovery left off). Odd rounds
//! run the child with `sync_writes = false`: a process crash must not lose
//! acknowledged writes either way.
//!
//! 25 rounds by default; `SIEVEDB_CRASH_ROUNDS` sets another number.

mod reliab;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use reliab::{batch, check, churn_options};
use sievedb::Db;

const CHILD_DIR: &str = "SIEVEDB_CRASH_CHILD_DIR";
const CHILD_START: &str = "SIEVEDB_CRASH_CHILD_START";
const CHILD_SYNC: &str = "SIEVEDB_CRASH_CHILD_SYNC";

/// Entry point of the child process; not a test on its own (it runs only
/// when `crash_recovery_rounds` starts it with the environment set).
#[test]
#[ignore = "child process of crash_recovery_rounds"]
fn crash_child_workload() {
    let dir = std::env::var(CHILD_DIR).expect("run by crash_recovery_rounds only");
    let start: u64 = std::env::var(CHILD_START)
        .expect("start id")
        .parse()
        .expect("start id is a number");
    // A process crash must lose nothing acknowledged even without fsync:
    // odd rounds run with `sync_writes = false`.
    let mut opts = churn_options();
    opts.sync_writes = std::env::var(CHILD_SYNC).as_deref() != Ok("0");
    let db = Db::open(&dir, opts).expect("child open");
    let mut out = std::io::stdout().lock();
    // libtest's "test ... " line has no newline yet: start a fresh line.
    writeln!(out).expect("stdout");
    for b in start.. {
        db.write(&batch(b)).expect("child write");
        // Acknowledged: the write returned, so it must survive the kill.
        writeln!(out, "ack {b}").expect("stdout");
        out.flush().expect("stdout");
        if b % 50 == 0 {
            db.flush().expect("child flush");
        }
        if b % 120 == 0 {
            db.compact().expect("child compact");
        }
    }
}

/// Highest id in complete `ack N` lines (a line cut by the kill is ignored).
fn last_ack(output: &str) -> Option<u64> {
    output
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| {
            let at = l.find("ack ")?;
            l[at + 4..].trim_end().parse().ok()
        })
        .max()
}

#[test]
fn crash_recovery_rounds() {
    let rounds: u64 = std::env::var("SIEVEDB_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let mut seed = 0x5eed_u64 ^ u64::from(std::process::id());
    let mut acked = 0u64;
    let mut next = 1u64;
    let mut tables_seen = 0;
    let mut stalled = 0u32;
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "crash_child_workload",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, dir.path())
            .env(CHILD_START, next.to_string())
            .env(CHILD_SYNC, if round % 2 == 0 { "1" } else { "0" })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // A child must start and open the database before it writes; on a
        // loaded machine that can take longer than the whole window, so
        // each round in a row without progress doubles it (up to 16x).
        let delay = (30 + (seed >> 33) % 400) << stalled.min(4);
        std::thread::sleep(Duration::from_millis(delay));
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            child.stderr.take().map(|mut e| e.read_to_string(&mut err));
            panic!("round {round}: child exited by itself ({status}): {err}");
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let mut output = String::new();
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut output)
            .expect("read acks");
        if let Some(a) = last_ack(&output) {
            acked = acked.max(a);
        }
        // The batch after the last ack may have been written before the kill.
        let db = Db::open(dir.path(), churn_options())
            .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
        let rec = check(&db, acked, acked + 1).unwrap_or_else(|e| {
            let tail: Vec<&str> = output.lines().rev().take(3).collect();
            let files: Vec<String> = std::fs::read_dir(dir.path())
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            panic!(
                "round {round} (killed after {delay} ms, child started at batch {next}, \
                 last acks {tail:?}, files {files:?}): {e}"
            )
        });
        let report = db.verify().expect("verify");
        assert!(report.is_ok(), "round {round}: {:?}", report.problems);
        tables_seen += db.stats().levels.iter().map(|l| l.tables).sum::<u64>();
        let progressed = rec.present.last().copied().unwrap_or(0) + 1;
        stalled = if progressed > next { 0 } else { stalled + 1 };
        next = progressed;
        acked = next - 1;
        db.close().expect("close");
    }
    // Writes still work and persist after the last crash.
    let db = Db::open(dir.path(), churn_options()).expect("final open");
    db.write(&batch(next)).expect("write after crashes");
    db.close().expect("close");
    let db = Db::open(dir.path(), churn_options()).expect("reopen");
    check(&db, next, next).expect("final state");
    assert!(
        next > rounds,
        "children made too little progress: {next} batches"
    );
    eprintln!("crash rounds: {rounds}, batches acknowledged and verified: {next}, live tables summed over the reopens: {tables_seen}");
}

/// Regression: a process killed between writing `CURRENT.tmp` and renaming
/// it left the file behind; the next open listed it, wrote and renamed its
/// own `CURRENT.tmp`, then failed with `Error::Io` (not found) trying to
/// delete the stale name it had listed. Open now treats an already-missing
/// obsolete file as removed.
#[test]
fn regression_open_after_crash_with_stray_current_tmp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), churn_options()).expect("open");
    for b in 1..=20 {
        db.write(&batch(b)).expect("write");
    }
    db.close().expect("close");
    std::fs::write(dir.path().join("CURRENT.tmp"), b"MANIFEST-00").expect("stray tmp");
    let db = Db::open(dir.path(), churn_options()).expect("open with a stray CURRENT.tmp");
    check(&db, 20, 20).expect("data intact");
    assert!(!dir.path().join("CURRENT.tmp").exists());
}

/// Regression: the directory lock was an `flock` lock, which belongs to the
/// open file description, and a child process forked by another thread
/// shares that until it calls `exec`. Closing a database and opening it
/// again while another thread spawned a process failed with
/// `Error::Locked` (this binary's other test spawns children:
/// `regression_open_after_crash_with_stray_current_tmp` failed so, 2 runs
/// in 131 under load). The lock is now a process-owned POSIX record lock.
#[test]
fn reopen_while_another_thread_spawns_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spawner = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut spawned = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // The test binary, listing its tests: a short-lived child.
                let status = Command::new(&exe)
                    .arg("--list")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .expect("spawn");
                assert!(status.success());
                spawned += 1;
            }
            spawned
        })
    };
    for round in 0..300 {
        let db = Db::open(dir.path(), churn_options())
            .unwrap_or_else(|e| panic!("open {round} while processes spawn: {e}"));
        db.write(&batch(round + 1)).expect("write");
        db.close().expect("close");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(spawner.join().expect("spawner") > 0);
    let db = Db::open(dir.path(), churn_options()).expect("final open");
    check(&db, 300, 300).expect("every round's batch");
}
