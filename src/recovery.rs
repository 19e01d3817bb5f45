//! Replaying the write-ahead logs at open, and what the replay found.
//!
//! The logs newer than the manifest's log number are replayed in file
//! number order into one memtable. Their records' sequence numbers form
//! one unbroken chain starting after the manifest's last sequence
//! ([`SequenceChain`]), so a missing record shows even where the log bytes
//! around it look fine (a lost last record of an earlier log and its seal
//! read like a torn tail on their own).
//!
//! What a break in the logs does depends on [`WalRecovery`]:
//!
//! * [`Strict`](WalRecovery::Strict) (the default): a torn tail (a crash
//!   in the middle of the last append) is dropped, and any other damage
//!   fails the open with [`Error::Corruption`] naming the log and the
//!   record's offset. Nothing is given up without the operator's say.
//! * [`PointInTime`](WalRecovery::PointInTime): the replay stops at the
//!   first break (a damaged record with intact ones after it, a record
//!   that does not decode, a gap or a number out of place in the chain)
//!   and keeps every write before it: the database opens as it was at
//!   that point. The log holding the break and every later log are set
//!   aside: kept as `<name>.dropped` (hard-linked or copied before the new
//!   manifest lets the logs go, so a crash during the open loses neither),
//!   never read again by an open and never deleted by one, for whoever
//!   wants the bytes after the break. [`RecoveryReport::stopped`] says
//!   where the replay stopped and why.
//!
//! Point-in-time recovery is for a log whose writes were not each synced
//! (`sync_writes = false`): a power cut can then leave a hole where the
//! filesystem wrote back later pages of the log before earlier ones, and a
//! strict open refuses the database until someone removes the log by hand.
//! The writes after the hole were acknowledged but never made durable,
//! which `sync_writes = false` allows; writes before it are all kept.

use std::path::{Path, PathBuf};

use crate::batch::{SequenceChain, WriteBatch};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::key::SequenceNumber;
use crate::memtable::Memtable;
use crate::wal::{read_log, read_log_prefix, RECORD_HEADER_LEN};

/// What [`Db::open`](crate::Db::open) does with a write-ahead log that is
/// damaged somewhere other than its torn tail. See
/// [`Options::wal_recovery`](crate::Options::wal_recovery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalRecovery {
    /// Drop a torn tail (a crash in the middle of the last append); fail
    /// the open with [`Error::Corruption`] at any other damage: a damaged
    /// record with intact records after it, a record that does not decode,
    /// or a gap in the records' sequence numbers. The default: no write is
    /// given up without the operator choosing to.
    #[default]
    Strict,
    /// Replay up to the first damage (or gap) and stop there: the database
    /// opens with every write before that point, and the log holding the
    /// damage and every later log are kept as `<name>.dropped` rather than
    /// replayed (an open neither reads nor deletes those files). [`Db::recovery_report`](crate::Db::recovery_report)
    /// says where the replay stopped and why.
    PointInTime,
}

/// Where a [`WalRecovery::PointInTime`] replay stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryStop {
    /// The log holding the damage, by the name it had when the open found
    /// it.
    pub log: PathBuf,
    /// Offset of the damaged record's header in that log: the records
    /// before it were replayed, none from it on.
    pub offset: u64,
    /// What is wrong there.
    pub reason: String,
    /// The copies the logs were set aside as (`<name>.dropped`): the
    /// damaged log and every later one, in the order they were written.
    pub set_aside: Vec<PathBuf>,
    /// Bytes not replayed: the damaged log's bytes from `offset` on, plus
    /// every later log's.
    pub bytes_dropped: u64,
}

/// What the replay of the write-ahead logs found when the database was
/// opened ([`Db::recovery_report`](crate::Db::recovery_report)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Logs whose records were replayed (in full, up to a torn tail, or up
    /// to the point where a point-in-time replay stopped).
    pub logs_replayed: usize,
    /// Write batches replayed (seals, the empty records a log ends with
    /// when it is closed, are not counted).
    pub batches_replayed: u64,
    /// Puts and deletes replayed.
    pub writes_replayed: u64,
    /// Torn tails dropped: logs whose last append was cut short.
    pub torn_tails: usize,
    /// Set when a [`WalRecovery::PointInTime`] replay stopped before the
    /// end of the logs; always `None` under [`WalRecovery::Strict`], which
    /// fails the open instead.
    pub stopped: Option<RecoveryStop>,
}

/// The outcome of [`replay_logs`].
pub(crate) struct Replay {
    /// The last sequence number replayed (`after` if none was).
    pub(crate) last_seq: SequenceNumber,
    /// What the replay found.
    pub(crate) report: RecoveryReport,
    /// The logs to set aside, by number (their new names are in the
    /// report's stop).
    pub(crate) set_aside: Vec<u64>,
}

/// A log's new name when a point-in-time replay sets it aside.
pub(crate) fn set_aside_name(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_os_string();
    name.push(".dropped");
    PathBuf::from(name)
}

/// Keeps a copy of each log in `logs` (by number; `path_of` names their
/// files) under its [`set_aside_name`], durable in `dir` on return: a hard
/// link where the filesystem allows one. Called after a point-in-time
/// replay and before the new manifest lets the logs go, so that a crash at
/// any point leaves either the logs (the next open replays them again, to
/// the same point) or their copies. A copy left by an open that crashed
/// before its manifest is replaced.
pub(crate) fn set_aside_logs(
    fs: &dyn FileSystem,
    dir: &Path,
    logs: &[u64],
    path_of: impl Fn(u64) -> PathBuf,
) -> Result<()> {
    for &n in logs {
        let from = path_of(n);
        let to = set_aside_name(&from);
        match fs.remove_file(&to) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.map_err(|e| Error::io(&to, e))?,
        }
        fs.link_or_copy(&from, &to).map_err(|e| Error::io(&to, e))?;
    }
    if !logs.is_empty() {
        fs.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
    }
    Ok(())
}

/// A break found in the logs under point-in-time recovery, before the
/// byte counts of the logs it drops are known.
struct Break {
    log_index: usize,
    offset: u64,
    reason: String,
}

/// Replays the logs numbered `logs` (ascending; `path_of` names their
/// files) into `into`, chaining their sequence numbers from `after + 1`.
/// Under [`WalRecovery::Strict`] any damage but a torn tail is
/// [`Error::Corruption`]; under [`WalRecovery::PointInTime`] the replay
/// stops at the first break. Writes nothing: the caller keeps the logs in
/// [`Replay::set_aside`] with [`set_aside_logs`].
pub(crate) fn replay_logs(
    fs: &dyn FileSystem,
    logs: &[u64],
    path_of: impl Fn(u64) -> PathBuf,
    after: SequenceNumber,
    mode: WalRecovery,
    into: &Memtable,
) -> Result<Replay> {
    let mut last_seq = after;
    let mut chain = SequenceChain::starting_at(after.saturating_add(1));
    let mut report = RecoveryReport::default();
    let mut found: Option<Break> = None;
    'logs: for (log_index, &n) in logs.iter().enumerate() {
        let path = path_of(n);
        let (contents, damage) = match mode {
            WalRecovery::Strict => (read_log(fs, &path)?, None),
            WalRecovery::PointInTime => read_log_prefix(fs, &path)?,
        };
        let mut offset = 0u64;
        let mut replayed_any = false;
        for record in &contents.records {
            let record_offset = offset;
            offset += (record.len() + RECORD_HEADER_LEN) as u64;
            let corrupt = |reason: String| Error::corruption(&path, Some(record_offset), reason);
            let checked =
                WriteBatch::decode(record, |why| corrupt(format!("bad batch record: {why}")))
                    .and_then(|(first_seq, batch)| {
                        // A gap means lost records: the last write of an earlier log
                        // and its seal look like a torn tail on their own. The chain
                        // starts after the manifest's last sequence (a first log
                        // that is missing, or one reusing numbers a flush already
                        // recorded, is a gap too), and refuses numbers no write was
                        // given (damage the checksum missed).
                        chain.take(first_seq, batch.len()).map_err(corrupt)?;
                        Ok((first_seq, batch))
                    });
            let (first_seq, batch) = match (checked, mode) {
                (Ok(decoded), _) => decoded,
                (Err(e), WalRecovery::Strict) => return Err(e),
                (Err(e), WalRecovery::PointInTime) => {
                    let reason = match e {
                        Error::Corruption { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    found = Some(Break {
                        log_index,
                        offset: record_offset,
                        reason,
                    });
                    if replayed_any {
                        report.logs_replayed += 1;
                    }
                    break 'logs;
                }
            };
            replayed_any = true;
            for (i, op) in batch.ops().iter().enumerate() {
                into.insert(&op.key, first_seq + i as u64, op.kind, &op.value);
            }
            if !batch.is_empty() {
                report.batches_replayed += 1;
                report.writes_replayed += batch.len() as u64;
                last_seq = last_seq.max(first_seq + batch.len() as u64 - 1);
            }
        }
        report.logs_replayed += 1;
        if let Some(damage) = damage {
            found = Some(Break {
                log_index,
                offset: damage.offset,
                reason: format!("{}, and a valid record follows it", damage.reason),
            });
            break;
        }
        if contents.torn_tail {
            report.torn_tails += 1;
        }
    }
    let mut set_aside = Vec::new();
    if let Some(b) = found {
        let log = path_of(logs[b.log_index]);
        let mut bytes_dropped = 0u64;
        let mut kept_as = Vec::new();
        for &n in &logs[b.log_index..] {
            let path = path_of(n);
            let len = fs.read(&path).map_err(|e| Error::io(&path, e))?.len() as u64;
            bytes_dropped += if n == logs[b.log_index] {
                len.saturating_sub(b.offset)
            } else {
                len
            };
            kept_as.push(set_aside_name(&path));
            set_aside.push(n);
        }
        report.stopped = Some(RecoveryStop {
            log,
            offset: b.offset,
            reason: b.reason,
            set_aside: kept_as,
            bytes_dropped,
        });
    }
    Ok(Replay {
        last_seq,
        report,
        set_aside,
    })
}
