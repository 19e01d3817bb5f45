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
//! * [`Strict`](WalRecovery::Strict): a torn tail (a crash in the middle
//!   of the last append) is dropped, and any other damage fails the open
//!   with [`Error::Corruption`] naming the log and the record's offset.
//!   Nothing is given up without the operator's say.
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
//! * [`Auto`](WalRecovery::Auto) (the default): point-in-time for exactly
//!   the damage a power cut can leave, strict for everything else.
//!
//! What a power cut can leave: when writes are not each synced
//! (`sync_writes = false`), a *hole* in the log, because the filesystem may
//! write back a later page of the log before an earlier one. The writes
//! after the hole were acknowledged but never made durable, which that
//! setting allows, and a strict open would refuse the whole database until
//! someone removed the log by hand (`tests/fault.rs`,
//! `unsynced_log_pages_written_back_out_of_order`: 15 of 24 simulated cuts
//! left a hole). A hole can only be in the *last* log: a memtable switch
//! syncs the old log whole before the new one takes a write. And only in a
//! log that does not end with a seal: a log is sealed when it takes no more
//! writes, after a sync of everything before it. So `Auto` stops at damaged
//! bytes in the last, unsealed log when `sync_writes` is false, and treats
//! any other break as
//! corruption: damage in an earlier or sealed log, or with `sync_writes` on;
//! a record that does not decode; a gap in the sequence numbers (a
//! power cut damages bytes, it does not renumber records). Its error says
//! that `PointInTime` would open the database.
//!
//! A seal vouches for the bytes before it because the log is synced
//! before the seal is appended (`tests/fault.rs`,
//! `no_power_cut_leaves_a_hole_before_a_seal`). One limit of the inference:
//! it reads `sync_writes` from the options of the open, not of the run that
//! wrote the log.

use std::path::{Path, PathBuf};

use crate::batch::{SequenceChain, WriteBatch};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::key::SequenceNumber;
use crate::memtable::Memtable;
use crate::wal::{first_valid_record_from, scan_log_prefix, RECORD_HEADER_LEN};

/// What [`Db::open`](crate::Db::open) does with a write-ahead log that is
/// damaged somewhere other than its torn tail. See
/// [`Options::wal_recovery`](crate::Options::wal_recovery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalRecovery {
    /// [`PointInTime`](Self::PointInTime) for damage a power cut can leave,
    /// [`Strict`](Self::Strict) otherwise (the default): the replay stops
    /// at damaged bytes with intact records after them only in the last
    /// log, when that log does not end with a seal and
    /// [`Options::sync_writes`](crate::Options::sync_writes) is false. Any
    /// other break is [`Error::Corruption`]. See the module docs for why.
    #[default]
    Auto,
    /// Drop a torn tail (a crash in the middle of the last append); fail
    /// the open with [`Error::Corruption`] at any other damage: a damaged
    /// record with intact records after it, a record that does not decode,
    /// or a gap in the records' sequence numbers. No write is given up
    /// without the operator choosing to.
    Strict,
    /// Replay up to the first damage (or gap) and stop there: the database
    /// opens with every write before that point, and the log holding the
    /// damage and every later log are kept as `<name>.dropped` rather than
    /// replayed (an open neither reads nor deletes those files).
    /// [`Db::recovery_report`](crate::Db::recovery_report) says where the
    /// replay stopped and why.
    PointInTime,
}

/// Appended to the reason of a damaged log record that
/// [`WalRecovery::Auto`] refuses: what the operator can do about it.
const AUTO_REFUSED_HINT: &str = " (not what a power cut leaves in a log written with \
     sync_writes = false: the log was ended and synced, or later logs with data follow it, or \
     sync_writes is true; WalRecovery::PointInTime opens the database as it was before \
     the damage)";

/// True when the log `data`, damaged at `damage` (a record's offset, with
/// intact records after it), ends with a seal: the empty batch record a log
/// gets when it takes no more writes (a memtable switch or a clean close),
/// between two syncs.
///
/// Decided from the records themselves, not from the last bytes: the
/// records after the damage are read from the first valid one on (past
/// any further damage the same way), and the log is sealed when they
/// reach its end exactly and the last is a seal. A batch record ends with
/// its last value, so a value ending in the bytes of a seal record made a
/// log with a power-cut hole look sealed, and `Auto` refused it (found by
/// review, twenty-sixth session).
fn ends_with_seal(data: &[u8], damage: u64) -> bool {
    let mut from = damage as usize + 1;
    loop {
        let Some(at) = first_valid_record_from(data, from) else {
            return false;
        };
        let rest = &data[at..];
        match scan_log_prefix(rest) {
            (_, Some(more)) => from = at + more.offset as usize + 1,
            (scan, None) => {
                return !scan.torn_tail
                    && scan.valid_len as usize == rest.len()
                    && scan.records.last().is_some_and(|last| {
                        let payload = &rest[last.payload.clone()];
                        payload.len() == 12 && payload[8..12] == [0, 0, 0, 0]
                    });
            }
        }
    }
}

/// Whether a log followed by the logs `later` (by number; `path_of` names
/// their files) is the last one written to: every later log is empty.
///
/// A later log that exists but holds no byte comes from an open that
/// crashed between creating its new log and writing its manifest (the
/// next open then replays the same logs, plus that empty one), or from a
/// memtable switch whose new log took no write that reached the disk;
/// either way the log before it is the last one writes went to. Found by
/// review: a power cut during an open that was recovering a hole in the
/// last log left such an empty log, and the next open then refused the
/// hole as damage in an earlier log (135 of 447 cuts in the review's
/// sweep).
fn last_with_data(
    fs: &dyn FileSystem,
    later: &[u64],
    path_of: impl Fn(u64) -> PathBuf,
) -> Result<bool> {
    for &n in later {
        let path = path_of(n);
        if fs.file_len(&path).map_err(|e| Error::io(&path, e))? > 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether damaged bytes with intact records after them (not a torn tail)
/// stop the replay, rather than fail the open, in the log `data`, the last
/// log with data or not (`is_last`, [`last_with_data`]).
///
/// Under [`WalRecovery::Auto`] only what a power cut can leave does: a
/// hole in the last log (every earlier one was synced whole before the
/// next one took a write) that does not end with a seal (a sealed log was
/// synced whole), written without `sync_writes` (a synced write has no
/// hole before it).
fn damage_stops(
    mode: WalRecovery,
    sync_writes: bool,
    is_last: bool,
    data: &[u8],
    damage: u64,
) -> bool {
    match mode {
        WalRecovery::Strict => false,
        WalRecovery::PointInTime => true,
        WalRecovery::Auto => !sync_writes && is_last && !ends_with_seal(data, damage),
    }
}

/// Where a point-in-time replay stopped (see [`WalRecovery`]).
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
    /// When the break is a gap at the start of a log whose predecessor
    /// ended torn, that predecessor too: its torn tail is what is left of
    /// the lost writes (its records before the tail were replayed).
    pub set_aside: Vec<PathBuf>,
    /// Bytes not replayed: the damaged log's bytes from `offset` on, every
    /// later log's, and the torn tail of a predecessor set aside with it.
    pub bytes_dropped: u64,
}

/// What the replay of the write-ahead logs found when the database was
/// opened ([`Db::recovery_report`](crate::Db::recovery_report)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Logs with at least one record replayed, or replayed whole (in full
    /// or up to a torn tail); a log whose first record is where a
    /// point-in-time replay stopped is not counted.
    pub logs_replayed: usize,
    /// Write batches replayed (seals, the empty records a log ends with
    /// when it is closed, are not counted).
    pub batches_replayed: u64,
    /// Puts and deletes replayed.
    pub writes_replayed: u64,
    /// Torn tails dropped: logs whose last append was cut short.
    pub torn_tails: usize,
    /// Set when a point-in-time replay stopped before the end of the logs;
    /// always `None` under a strict one, which fails the open instead.
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
    /// Set when the break is a gap at the start of its log and the log
    /// before it ended torn: that tail is what is left of the lost writes,
    /// so that log is set aside too. Its valid length.
    torn_before: Option<u64>,
}

/// Replays the logs numbered `logs` (ascending; `path_of` names their
/// files) into `into`, chaining their sequence numbers from `after + 1`.
/// `mode` and `sync_writes` decide whether the replay stops at the first
/// break or fails with [`Error::Corruption`] at any damage but a torn tail
/// (see [`WalRecovery`]). Writes nothing: the caller keeps the logs in
/// [`Replay::set_aside`] with [`set_aside_logs`].
pub(crate) fn replay_logs(
    fs: &dyn FileSystem,
    logs: &[u64],
    path_of: impl Fn(u64) -> PathBuf,
    after: SequenceNumber,
    mode: WalRecovery,
    sync_writes: bool,
    into: &Memtable,
) -> Result<Replay> {
    let mut last_seq = after;
    let mut chain = SequenceChain::starting_at(after.saturating_add(1));
    let mut report = RecoveryReport::default();
    let mut found: Option<Break> = None;
    // The last log that ended torn: (index, valid length).
    let mut torn: Option<(usize, u64)> = None;
    // The length of each log read so far, so that counting the bytes a
    // stop gives up reads again only the logs the replay never reached.
    let mut lens: Vec<u64> = Vec::with_capacity(logs.len());
    'logs: for (log_index, &n) in logs.iter().enumerate() {
        let path = path_of(n);
        let data = fs.read(&path).map_err(|e| Error::io(&path, e))?;
        lens.push(data.len() as u64);
        let (scan, damage) = scan_log_prefix(&data);
        if let Some(d) = &damage {
            let is_last = last_with_data(fs, &logs[log_index + 1..], &path_of)?;
            if !damage_stops(mode, sync_writes, is_last, &data, d.offset) {
                let mut reason = format!("{}, and a valid record follows it", d.reason);
                if mode == WalRecovery::Auto {
                    reason.push_str(AUTO_REFUSED_HINT);
                }
                return Err(Error::corruption(&path, Some(d.offset), reason));
            }
        }
        let records = scan.records.iter().map(|span| &data[span.payload.clone()]);
        let mut offset = 0u64;
        let mut replayed_any = false;
        for record in records {
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
            let (first_seq, batch) = match checked {
                Ok(decoded) => decoded,
                Err(e) if mode != WalRecovery::PointInTime => return Err(e),
                Err(e) => {
                    let reason = match e {
                        Error::Corruption { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    let torn_before = torn
                        .filter(|&(i, _)| record_offset == 0 && i + 1 == log_index)
                        .map(|(_, valid_len)| valid_len);
                    found = Some(Break {
                        log_index,
                        offset: record_offset,
                        reason,
                        torn_before,
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
        if let Some(damage) = damage {
            if replayed_any {
                report.logs_replayed += 1;
            }
            found = Some(Break {
                log_index,
                offset: damage.offset,
                reason: format!("{}, and a valid record follows it", damage.reason),
                torn_before: None,
            });
            break;
        }
        report.logs_replayed += 1;
        if scan.torn_tail {
            report.torn_tails += 1;
            torn = Some((log_index, scan.valid_len));
        }
    }
    let mut set_aside = Vec::new();
    if let Some(b) = found {
        let log = path_of(logs[b.log_index]);
        let mut bytes_dropped = 0u64;
        let mut kept_as = Vec::new();
        let from = b.log_index - usize::from(b.torn_before.is_some());
        for (i, &n) in logs.iter().enumerate().skip(from) {
            let path = path_of(n);
            let len = match lens.get(i) {
                Some(&len) => len,
                None => fs.file_len(&path).map_err(|e| Error::io(&path, e))?,
            };
            bytes_dropped += if i < b.log_index {
                len.saturating_sub(b.torn_before.unwrap_or(len))
            } else if i == b.log_index {
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
