//! The batch workload and checker shared by the reliability tests
//! (`crash.rs`, `fault.rs`, `corruption.rs`).
//!
//! Batch `b` (numbered from 1, written in order by one writer) writes
//! `keys_of(b)` fresh keys `b{b:08}-{j}` with values that encode `b` and `j`,
//! its marker `m{b:08}` = `b`, and the shared key `counter` = `b`. So after
//! recovery the checker can tell, for every batch, whether it is fully
//! present, absent, or (a bug) partly applied, and `counter` must name the
//! newest present batch.
#![allow(dead_code)]

use std::collections::BTreeMap;

use sievedb::{Db, Error, Options, WriteBatch};

/// How many fresh keys batch `b` writes (1 to 4).
pub fn keys_of(b: u64) -> u64 {
    1 + (b.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62)
}

/// Value of key `j` of batch `b`: encodes both, padded so memtables fill.
pub fn value_of(b: u64, j: u64) -> Vec<u8> {
    let pad = 40 + (b * 7 + j * 13) % 160;
    let mut v = format!("v{b}-{j}-").into_bytes();
    v.extend(std::iter::repeat_n(b'a' + (b % 26) as u8, pad as usize));
    v
}

/// The batch with id `b`.
pub fn batch(b: u64) -> WriteBatch {
    let mut wb = WriteBatch::new();
    for j in 0..keys_of(b) {
        wb.put(format!("b{b:08}-{j}"), value_of(b, j));
    }
    wb.put(format!("m{b:08}"), b.to_le_bytes());
    wb.put("counter", b.to_le_bytes());
    wb
}

/// Options with tiny memtables, tables and levels and synced writes, so a
/// few hundred batches go through many flushes and compactions.
pub fn churn_options() -> Options {
    Options {
        sync_writes: true,
        memtable_bytes: 8 << 10,
        table_bytes: 8 << 10,
        level1_bytes: 32 << 10,
        level_size_multiplier: 4,
        level0_compaction_trigger: 3,
        level0_stop_writes: 6,
        block_bytes: 512,
        // Small enough that the workloads replace the manifest several
        // times, so every sweep also crashes and fails inside a roll.
        manifest_roll_bytes: 1024,
        ..Options::default()
    }
}

/// What the checker found.
#[derive(Debug)]
pub struct Recovered {
    /// Batches fully present, in order (a prefix 1..=n when nothing is wrong).
    pub present: Vec<u64>,
}

/// Checks the database against the batch model: every batch in
/// `1..=acked` is fully present; every batch up to `attempted` is either
/// fully present or fully absent; the present batches form a prefix (batches
/// are logged in order); no other key exists; every value is the one
/// written; `counter` names the newest present batch.
/// Returns the recovered state or a description of the first violation.
pub fn check(db: &Db, acked: u64, attempted: u64) -> Result<Recovered, String> {
    let mut seen: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for item in db.iter().map_err(|e| format!("iter: {e}"))? {
        let (k, v) = item.map_err(|e| format!("scan: {e}"))?;
        seen.insert(k, v);
    }
    let mut present = Vec::new();
    for b in 1..=attempted {
        let marker = seen.remove(format!("m{b:08}").as_bytes());
        let mut found = 0;
        for j in 0..keys_of(b) {
            let key = format!("b{b:08}-{j}");
            match seen.remove(key.as_bytes()) {
                Some(v) if v == value_of(b, j) => found += 1,
                Some(_) => return Err(format!("batch {b}: key {key} has a value never written")),
                None => {}
            }
            // Point reads must agree with the scan.
            let got = db.get(&key).map_err(|e| format!("get {key}: {e}"))?;
            let expect_present = found == j + 1;
            if got.is_some() != expect_present {
                return Err(format!("batch {b}: get({key}) disagrees with the scan"));
            }
        }
        match (marker, found) {
            (Some(m), n) if n == keys_of(b) => {
                if m != b.to_le_bytes() {
                    return Err(format!("batch {b}: marker holds a value never written"));
                }
                present.push(b);
            }
            (None, 0) => {}
            (m, n) => {
                return Err(format!(
                    "batch {b} partly applied: marker {}, {n} of {} keys",
                    m.is_some(),
                    keys_of(b)
                ))
            }
        }
    }
    let counter = seen.remove(b"counter".as_slice());
    if !seen.is_empty() {
        let k = seen.keys().next().cloned().unwrap_or_default();
        return Err(format!("unexpected key {:?}", String::from_utf8_lossy(&k)));
    }
    for (i, &b) in present.iter().enumerate() {
        if b != i as u64 + 1 {
            return Err(format!(
                "present batches are not a prefix: {b} present, {} absent",
                i + 1
            ));
        }
    }
    let newest = present.last().copied().unwrap_or(0);
    if newest < acked {
        return Err(format!(
            "acknowledged batch {} lost (newest present {newest})",
            newest + 1
        ));
    }
    let counter = counter.map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0xff; 8])));
    if counter != (newest > 0).then_some(newest) {
        return Err(format!(
            "counter is {counter:?}, newest present batch {newest}"
        ));
    }
    Ok(Recovered { present })
}

/// True for the errors a write may return once an I/O call failed.
pub fn is_failure_error(e: &Error) -> bool {
    matches!(e, Error::Io { .. } | Error::Poisoned(_))
}
