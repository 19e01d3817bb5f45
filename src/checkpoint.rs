//! Checkpoints: a consistent, openable copy of a live database in another
//! directory, made without stopping writers.
//!
//! A checkpoint directory holds the table files of one manifest state, as
//! hard links where the filesystem allows (no data copied: tables are
//! immutable) or synced copies, plus a new manifest describing exactly
//! those tables and a `CURRENT` naming it. No write-ahead log is needed:
//! the memtable is flushed first, so every write acknowledged before the
//! call is in a table. Steps:
//!
//! 1. Check that the destination is absent or an empty directory.
//! 2. Flush: every write acknowledged before the call reaches a level-0
//!    table recorded in the manifest.
//! 3. Create the destination and sync its parent, so that its entry
//!    survives a crash.
//! 4. Under the background lock, take the manifest state and the current
//!    super version (installed together under that lock, so the super
//!    version holds a handle to every table the state lists). Release the
//!    lock; while the super version is pinned no file of those tables is
//!    deleted. Link or copy each table file.
//! 5. Write the manifest (one snapshot record, synced), sync the directory,
//!    then write `CURRENT` (temp file, sync, rename, sync the directory), as
//!    [`Manifest::create`] does for the database itself.
//!
//! `CURRENT` is written last, so a checkpoint interrupted by a crash has
//! none; on an error the files made so far are removed, newest first
//! (best effort), leaving the destination empty for a retry.
//! Tables flushed after step 4 took the manifest state are not included
//! (nor, of course, are writes no flush has reached by then): a checkpoint
//! holds a prefix of the write history (whole batches, since a batch lands in one
//! memtable and memtables flush in order).

use std::path::{Path, PathBuf};

use crate::db::DbInner;
use crate::error::{Error, Result};
use crate::manifest::{manifest_file_name, Manifest, CURRENT_FILE_NAME, CURRENT_TEMP_FILE_NAME};
use crate::version::table_file_name;

impl DbInner {
    /// Whether `path` is, or once created would be, an entry of the
    /// database directory whose name the engine uses or will use there: a
    /// numbered file (table, log, set-aside log, manifest), `CURRENT`,
    /// `CURRENT.tmp` or `LOCK`.
    fn is_reserved_name_in_db_dir(&self, path: &Path) -> bool {
        let Some(resolved) = resolve_to_be_created(path) else {
            return false;
        };
        let Some(name) = resolved.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        let reserved = crate::db::engine_file_number(name).is_some()
            || [
                CURRENT_FILE_NAME,
                CURRENT_TEMP_FILE_NAME,
                crate::db::LOCK_FILE_NAME,
            ]
            .contains(&name);
        reserved
            && match (resolved.parent(), self.dir.canonicalize()) {
                (Some(parent), Ok(db_dir)) => parent == db_dir,
                _ => false,
            }
    }

    /// Writes a checkpoint of the database into `dest` (see the module
    /// documentation).
    pub(crate) fn checkpoint(&self, dest: &Path) -> Result<()> {
        // One checkpoint at a time: the emptiness check below and the
        // files written after it must not interleave with another call's.
        let _one_at_a_time = self.checkpoint_lock.lock();
        let fs = self.fs.as_ref();
        // An empty path lists as "not found" and creates as nothing: the
        // checkpoint would go, unchecked, into the working directory.
        if dest.as_os_str().is_empty() {
            return Err(Error::invalid("checkpoint destination is an empty path"));
        }
        // No directory this call makes inside the database directory may
        // take a name the engine writes there: one named like a numbered
        // file takes a number the engine will hand out, so the flush or
        // open that gets to it cannot create its file (found by review,
        // twenty-sixth session); `CURRENT`, `CURRENT.tmp` or `LOCK` stops
        // the next open or manifest roll. That holds for `dest` and for
        // every missing directory on the way to it (`db/000009.log/cp`
        // creates `db/000009.log`: found by review, twenty-eighth session).
        // Directories this call creates: each one's entry is durable only
        // once its parent is synced (the working directory for a relative
        // path's first component), below.
        let created: Vec<&Path> = dest
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .collect();
        for dir in std::iter::once(dest).chain(created.iter().copied()) {
            if self.is_reserved_name_in_db_dir(dir) {
                return Err(Error::invalid(format!(
                    "checkpoint destination {} would put a directory named like one of the \
                     database's own files ({}) in the database directory: choose another name",
                    dest.display(),
                    dir.display()
                )));
            }
        }
        if dest.exists() && !dest.is_dir() {
            return Err(Error::invalid(format!(
                "checkpoint destination {} is not a directory",
                dest.display()
            )));
        }
        match fs.list_dir(dest) {
            Ok(names) if names.is_empty() => {}
            Ok(_) => {
                return Err(Error::invalid(format!(
                    "checkpoint directory {} exists and is not empty",
                    dest.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(dest, e)),
        }
        self.flush()?;
        fs.create_dir_all(dest).map_err(|e| Error::io(dest, e))?;
        for dir in created.iter().rev() {
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            fs.sync_dir(parent).map_err(|e| Error::io(parent, e))?;
        }
        // A path through a directory this call created and then `..`
        // (`x/new/..`) listed as absent above and names an existing
        // directory, possibly the database's own: list it again now that
        // it exists. (Found by review: `checkpoint(db/sub/..)` replaced the
        // live database's CURRENT, and its later writes were lost at the
        // next open.) The directories created on the way stay, empty.
        if !fs
            .list_dir(dest)
            .map_err(|e| Error::io(dest, e))?
            .is_empty()
        {
            return Err(Error::invalid(format!(
                "checkpoint directory {} exists and is not empty",
                dest.display()
            )));
        }

        // The manifest state and the super version are installed together
        // under the background lock, so this super version holds a handle
        // to every table the state lists: while it is pinned, none of their
        // files is deleted, and the links or copies can run without the
        // lock (a copy across filesystems can take long; writers need the
        // lock at every memtable switch).
        let (mut state, _pinned) = {
            let bg = self.bg.lock();
            if bg.shutdown {
                return Err(Error::Closed);
            }
            (bg.mstate.clone(), self.current())
        };
        // Every file this call creates, in creation order: on failure they
        // are removed newest first, so a `CURRENT` never outlives the
        // manifest it names. A table is listed once linked or copied (a
        // failed `link_or_copy` leaves nothing of its own, and a name that
        // already existed is not this call's to remove); the manifest's
        // files are listed before `Manifest::create`, which may fail
        // between them (the directory was empty, so they are this call's).
        let mut made: Vec<PathBuf> = Vec::new();
        let result = (|| {
            for record in state.levels.iter().flatten() {
                let name = table_file_name(record.file_number);
                let (from, to) = (self.dir.join(&name), dest.join(&name));
                fs.link_or_copy(&from, &to).map_err(|e| Error::io(&to, e))?;
                made.push(to);
            }
            // The checkpoint's own file numbers continue after the
            // database's; its manifest takes the next one.
            let number = state.next_file_number;
            state.next_file_number = number + 1;
            // The copy has no log: everything it holds is in its tables.
            // Log number 0 says "no log is needed" (the open checks that
            // the log a manifest names as the oldest still needed exists).
            state.log_number = 0;
            made.push(dest.join(manifest_file_name(number)));
            made.push(dest.join(CURRENT_TEMP_FILE_NAME));
            made.push(dest.join(CURRENT_FILE_NAME));
            Manifest::create(fs, dest, number, &state)?;
            Ok(())
        })();
        if result.is_err() {
            for path in made.iter().rev() {
                let _ = fs.remove_file(path);
            }
            let _ = fs.sync_dir(dest);
        }
        result
    }
}

/// The absolute path `path` names once every missing directory on the way
/// to it is created: its longest existing ancestor, canonical, then the
/// remaining components with `.` and `..` applied as written (those
/// directories do not exist yet, so they are no links, and `new/..` is the
/// directory `new` is made in). `None` when that cannot be told (a
/// component such as a prefix or root after the existing part, or an
/// ancestor that cannot be canonicalized).
fn resolve_to_be_created(path: &Path) -> Option<PathBuf> {
    let base = path
        .ancestors()
        .find(|a| a.as_os_str().is_empty() || a.exists())?;
    let mut resolved = if base.as_os_str().is_empty() {
        Path::new(".").canonicalize().ok()?
    } else {
        base.canonicalize().ok()?
    };
    for component in path.strip_prefix(base).ok()?.components() {
        match component {
            std::path::Component::Normal(name) => resolved.push(name),
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                resolved.pop();
            }
            _ => return None,
        }
    }
    Some(resolved)
}
