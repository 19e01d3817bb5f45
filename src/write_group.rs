//! Group commit: writers that arrive while another write is being logged
//! are logged together, as one record and one fsync for the whole group.
//! `Db` queues its writes here only under `sync_writes`; unsynced writes
//! commit one at a time under the writer lock, which measured faster
//! (docs/benchmarks.md, "Writes: group commit").
//!
//! # Protocol
//!
//! Each writer encodes its batch into a log payload on its own thread, then
//! joins the [`WriteQueue`]:
//!
//! * If no group is being committed, it **leads** a group of itself (the
//!   common case without concurrent writers: two uncontended locks more
//!   than a plain mutex, and no allocation in the queue).
//! * Otherwise it waits in line on its own ticket. When the group before
//!   it is committed, its leader hands each member its result and the lead
//!   to the first writer in line, which takes the writers queued behind it
//!   (up to [`group_byte_limit`]) into its group.
//!
//! The leader commits under the writer lock (in `Db`: number the batches,
//! append them as one record, sync once, insert them into the
//! memtable, publish the last sequence number). A member returns only once
//! its batch is published, so a writer reads its own write; batches are
//! numbered and logged in the order their writers joined. LevelDB and
//! RocksDB group writes the same way, and the byte limit is LevelDB's (a
//! small write is not held behind a megabyte of others).
//!
//! A waiting writer spins briefly, then yields, before it sleeps: a group
//! that commits in a few microseconds hands the lead on sooner than a
//! sleeping thread wakes on a virtual machine (a version that slept at once
//! loaded unsynced writes at a third of the speed; docs/benchmarks.md,
//! "Writes: group commit"), while a writer behind an fsync soon sleeps.
//!
//! A panic in a commit (a bug) still hands every member an error and the
//! lead on: no writer waits forever.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// Most payload bytes a group takes.
const MAX_GROUP_BYTES: usize = 1 << 20;
/// A group led by a batch of at most this many bytes takes at most this
/// many more.
const SMALL_BATCH_BYTES: usize = 128 << 10;
/// Checks of its ticket a waiting writer makes with a spin-loop hint
/// between them before it starts yielding.
const SPINS: u32 = 256;
/// How long a waiting writer yields its core between checks before it
/// sleeps.
const YIELD_FOR: Duration = Duration::from_micros(50);

/// How many payload bytes a group whose first payload is `first` bytes may
/// hold (the first included; it is always taken, however large).
pub(crate) fn group_byte_limit(first: usize) -> usize {
    if first <= SMALL_BATCH_BYTES {
        first + SMALL_BATCH_BYTES
    } else {
        MAX_GROUP_BYTES
    }
}

/// One writer's batch, encoded, as a group member.
#[derive(Debug)]
pub(crate) struct PendingWrite {
    /// The batch's log payload ([`WriteBatch::encode`]); the commit sets
    /// its first sequence number.
    ///
    /// [`WriteBatch::encode`]: crate::batch::WriteBatch::encode
    pub(crate) payload: Vec<u8>,
    /// Operations in the batch (sequence numbers it takes).
    pub(crate) ops: u64,
    /// Bytes of keys and values in the batch.
    pub(crate) data_bytes: u64,
}

/// Writers waiting to join a group, and whether a group is being
/// committed.
#[derive(Default)]
pub(crate) struct WriteQueue {
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    /// A leader is committing a group. While one is, arriving writers wait
    /// in `waiting`; while none is, `waiting` is empty.
    leading: bool,
    waiting: VecDeque<Waiter>,
}

struct Waiter {
    write: PendingWrite,
    ticket: Arc<Ticket>,
}

const WAITING: u8 = 0;
const LEAD: u8 = 1;
const DONE: u8 = 2;

/// Where a waiting writer learns its fate: `state` says whether to lead
/// the next group or that its group is done (then `result` holds its
/// result). Set once; `sleep` is for the wait after the spinning.
struct Ticket {
    state: AtomicU8,
    result: Mutex<Option<Result<()>>>,
    sleep: Mutex<()>,
    woken: Condvar,
}

impl Ticket {
    fn new() -> Ticket {
        Ticket {
            state: AtomicU8::new(WAITING),
            result: Mutex::new(None),
            sleep: Mutex::new(()),
            woken: Condvar::new(),
        }
    }

    fn lead(&self) {
        self.set(LEAD);
    }

    fn finish(&self, result: Result<()>) {
        *self.result.lock() = Some(result);
        self.set(DONE);
    }

    fn set(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        // Under `sleep`: a waiter checks `state` under it before it sleeps,
        // so the notification cannot fall between its check and its sleep.
        let _sleep = self.sleep.lock();
        self.woken.notify_one();
    }

    /// Waits until the ticket is set: `None` to lead the next group, or the
    /// result of the group that took this writer.
    fn wait(&self) -> Option<Result<()>> {
        let state = self.await_state();
        if state == LEAD {
            return None;
        }
        // DONE is stored after the result, with release ordering.
        Some(
            self.result
                .lock()
                .take()
                .unwrap_or_else(|| Err(abandoned())),
        )
    }

    fn await_state(&self) -> u8 {
        for _ in 0..SPINS {
            let state = self.state.load(Ordering::Acquire);
            if state != WAITING {
                return state;
            }
            std::hint::spin_loop();
        }
        let start = Instant::now();
        while start.elapsed() < YIELD_FOR {
            let state = self.state.load(Ordering::Acquire);
            if state != WAITING {
                return state;
            }
            std::thread::yield_now();
        }
        let mut sleep = self.sleep.lock();
        loop {
            let state = self.state.load(Ordering::Acquire);
            if state != WAITING {
                return state;
            }
            self.woken.wait(&mut sleep);
        }
    }
}

impl WriteQueue {
    /// Commits `write`, alone or in a group with writes of other threads,
    /// and returns its result.
    ///
    /// The leader runs `commit` under `writer` with the group's writes in
    /// order (its own first); it returns one result per write.
    pub(crate) fn submit<S>(
        &self,
        writer: &Mutex<S>,
        write: PendingWrite,
        commit: impl FnOnce(&mut S, &mut [PendingWrite]) -> Vec<Result<()>>,
    ) -> Result<()> {
        let mut queue = self.state.lock();
        let (mut alone, mut group, tickets) = if queue.leading {
            let ticket = Arc::new(Ticket::new());
            queue.waiting.push_back(Waiter {
                write,
                ticket: Arc::clone(&ticket),
            });
            drop(queue);
            if let Some(result) = ticket.wait() {
                return result;
            }
            let (group, tickets) = take_group(&mut self.state.lock());
            (None, group, tickets)
        } else {
            queue.leading = true;
            drop(queue);
            (Some(write), Vec::new(), Vec::new())
        };
        // This thread leads from here. The hand-off runs when `handoff` is
        // dropped, however the commit ends, so no member waits forever.
        let mut handoff = Handoff {
            queue: self,
            tickets,
            results: Vec::new(),
        };
        let writes: &mut [PendingWrite] = match alone.as_mut() {
            Some(write) => std::slice::from_mut(write),
            None => &mut group,
        };
        let mut results = commit(&mut writer.lock(), writes);
        if results.len() != writes.len() {
            // A commit must answer every write: a wrong count is treated
            // like a failed commit rather than acknowledging unanswered
            // writes.
            results.clear();
        }
        if results.is_empty() {
            return Err(abandoned());
        }
        let own_result = results.remove(0);
        handoff.results = results;
        own_result
    }
}

/// Moves the group of the writer first in line (the new leader, whose
/// write comes first) out of the queue: its writes, and the tickets of all
/// but the first.
fn take_group(queue: &mut QueueState) -> (Vec<PendingWrite>, Vec<Arc<Ticket>>) {
    let mut writes = Vec::new();
    let mut tickets = Vec::new();
    let Some(first) = queue.waiting.front() else {
        return (writes, tickets);
    };
    let limit = group_byte_limit(first.write.payload.len());
    let mut bytes = 0usize;
    while let Some(next) = queue.waiting.front() {
        let size = next.write.payload.len();
        if !writes.is_empty() && bytes + size > limit {
            break;
        }
        bytes += size;
        let Some(waiter) = queue.waiting.pop_front() else {
            break;
        };
        if !writes.is_empty() {
            tickets.push(waiter.ticket);
        }
        writes.push(waiter.write);
    }
    (writes, tickets)
}

/// What a write gets when its group's commit ended without answering it (a
/// panic in the commit, or a wrong number of results).
fn abandoned() -> Error {
    Error::Poisoned("the write's group failed before committing it".into())
}

/// Hands the members their results and the lead on when dropped, so also
/// when a commit panics.
struct Handoff<'a> {
    queue: &'a WriteQueue,
    /// The members other than the leader, in group order.
    tickets: Vec<Arc<Ticket>>,
    /// Their results, in the same order (empty if the commit did not
    /// answer).
    results: Vec<Result<()>>,
}

impl Drop for Handoff<'_> {
    fn drop(&mut self) {
        // The next leader first: its group's commit is what the writers
        // still waiting wait for, and this group's members are done.
        {
            let mut queue = self.queue.state.lock();
            match queue.waiting.front() {
                Some(next) => next.ticket.lead(),
                None => queue.leading = false,
            }
        }
        let mut results = std::mem::take(&mut self.results).into_iter();
        for ticket in self.tickets.drain(..) {
            ticket.finish(results.next().unwrap_or_else(|| Err(abandoned())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Barrier;

    fn write(tag: u8, len: usize) -> PendingWrite {
        PendingWrite {
            payload: vec![tag; len],
            ops: 1,
            data_bytes: len as u64,
        }
    }

    fn all_ok(_: &mut (), group: &mut [PendingWrite]) -> Vec<Result<()>> {
        group.iter().map(|_| Ok(())).collect()
    }

    fn idle(queue: &WriteQueue) -> bool {
        let state = queue.state.lock();
        !state.leading && state.waiting.is_empty()
    }

    #[test]
    fn a_lone_write_is_a_group_of_one() {
        let (queue, lock) = (WriteQueue::default(), Mutex::new(()));
        let mut seen = Vec::new();
        let result = queue.submit(&lock, write(7, 3), |_, group| {
            seen.extend(group.iter().map(|w| w.payload.clone()));
            vec![Ok(())]
        });
        assert!(result.is_ok());
        assert_eq!(seen, vec![vec![7u8; 3]]);
        assert!(idle(&queue));
    }

    #[test]
    fn writes_get_their_own_results() {
        let (queue, lock) = (WriteQueue::default(), Mutex::new(()));
        let refused = queue.submit(&lock, write(1, 1), |_, _| vec![Err(Error::invalid("no"))]);
        assert!(matches!(refused, Err(Error::InvalidArgument(_))));
        // A commit that answers the wrong number of writes fails them all.
        let short = queue.submit(&lock, write(1, 1), |_, _| Vec::new());
        assert!(matches!(short, Err(Error::Poisoned(_))));
        assert!(queue.submit(&lock, write(1, 1), all_ok).is_ok());
        assert!(idle(&queue));
    }

    /// Writes queued while a group commits are committed together in a
    /// later group, each exactly once and in each thread's order, one
    /// group at a time; a member's result is its own.
    #[test]
    fn concurrent_writes_are_grouped_and_each_committed_once() {
        const THREADS: usize = 4;
        const WRITES: usize = 300;
        let (queue, lock) = (WriteQueue::default(), Mutex::new(()));
        let committing = AtomicUsize::new(0);
        let committed = Mutex::new(Vec::new());
        let largest_group = AtomicUsize::new(0);
        let start = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (queue, lock, committing, committed, largest_group, start) = (
                    &queue,
                    &lock,
                    &committing,
                    &committed,
                    &largest_group,
                    &start,
                );
                s.spawn(move || {
                    start.wait();
                    for i in 0..WRITES {
                        let mut w = write(t as u8, 8);
                        w.payload[1..5].copy_from_slice(&(i as u32).to_le_bytes());
                        let result = queue.submit(lock, w, |_, group| {
                            assert_eq!(committing.fetch_add(1, Ordering::SeqCst), 0);
                            largest_group.fetch_max(group.len(), Ordering::Relaxed);
                            committed
                                .lock()
                                .extend(group.iter().map(|w| w.payload.clone()));
                            // Long enough for the others to queue up.
                            std::thread::sleep(Duration::from_micros(100));
                            committing.fetch_sub(1, Ordering::SeqCst);
                            // Every third write (by its number) is refused.
                            group
                                .iter()
                                .map(|w| {
                                    let i = u32::from_le_bytes(w.payload[1..5].try_into().unwrap());
                                    if i % 3 == 0 {
                                        Err(Error::invalid(format!("{i}")))
                                    } else {
                                        Ok(())
                                    }
                                })
                                .collect()
                        });
                        match result {
                            Err(Error::InvalidArgument(m)) => assert_eq!(m, format!("{i}")),
                            other => assert_eq!(other.is_ok(), i % 3 != 0),
                        }
                    }
                });
            }
        });
        let committed = committed.into_inner();
        assert_eq!(committed.len(), THREADS * WRITES);
        for t in 0..THREADS {
            let order: Vec<u32> = committed
                .iter()
                .filter(|p| p[0] == t as u8)
                .map(|p| u32::from_le_bytes(p[1..5].try_into().unwrap()))
                .collect();
            assert_eq!(order, (0..WRITES as u32).collect::<Vec<_>>());
        }
        assert!(largest_group.load(Ordering::Relaxed) > 1, "no group formed");
        assert!(idle(&queue));
    }

    /// A commit that panics still answers the other writes of its group
    /// (with an error) and passes the lead on: later writes go through.
    #[test]
    fn a_panicking_commit_fails_its_group_and_passes_the_lead() {
        let (queue, lock) = (WriteQueue::default(), Mutex::new(()));
        let first_committing = Barrier::new(3);
        let outcomes = std::thread::scope(|s| {
            let (queue, lock, first_committing) = (&queue, &lock, &first_committing);
            // The first group holds the lead until two more writers are in
            // line, so those two form the next group.
            let first = s.spawn(move || {
                queue.submit(lock, write(0, 1), |_, g| {
                    first_committing.wait();
                    while queue.state.lock().waiting.len() < 2 {
                        std::thread::yield_now();
                    }
                    g.iter().map(|_| Ok(())).collect()
                })
            });
            let next: Vec<_> = (1..3u8)
                .map(|tag| {
                    s.spawn(move || {
                        first_committing.wait();
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            queue.submit(lock, write(tag, 1), |_, _| panic!("commit failed"))
                        }))
                    })
                })
                .collect();
            assert!(first.join().unwrap().is_ok());
            next.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        // One of the two led and panicked; the other was in its group and
        // got an error instead of waiting forever.
        assert_eq!(outcomes.iter().filter(|o| o.is_err()).count(), 1);
        assert!(outcomes
            .iter()
            .any(|o| matches!(o, Ok(Err(Error::Poisoned(_))))));
        assert!(queue.submit(&lock, write(3, 1), all_ok).is_ok());
        assert!(idle(&queue));
    }

    #[test]
    fn a_group_takes_writes_up_to_its_byte_limit() {
        let mut state = QueueState {
            leading: true,
            waiting: VecDeque::new(),
        };
        for len in [100, SMALL_BATCH_BYTES / 2, SMALL_BATCH_BYTES / 2, 1] {
            state.waiting.push_back(Waiter {
                write: write(0, len),
                ticket: Arc::new(Ticket::new()),
            });
        }
        // 100 + 64 KiB + 64 KiB is exactly the limit of a 100-byte first
        // write (100 + 128 KiB); one byte more is not taken. The first
        // write's ticket stays with its writer.
        let (writes, tickets) = take_group(&mut state);
        assert_eq!(
            (writes.len(), tickets.len(), state.waiting.len()),
            (3, 2, 1)
        );
        assert_eq!(group_byte_limit(SMALL_BATCH_BYTES + 1), MAX_GROUP_BYTES);
        // The first write is always taken, however large.
        state.waiting.push_front(Waiter {
            write: write(0, 2 * MAX_GROUP_BYTES),
            ticket: Arc::new(Ticket::new()),
        });
        assert_eq!(take_group(&mut state).0.len(), 1);
        assert_eq!(take_group(&mut state).0.len(), 1);
        assert!(take_group(&mut state).0.is_empty());
    }
}
