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
//! 1. Check that the destination is absent or an empty directory; create
//!    it and sync its parent, so that its entry survives a crash.
//! 2. Flush: every write acknowledged before the call reaches a level-0
//!    table recorded in the manifest.
//! 3. Under the background lock (no flush or compaction can install a new
//!    state, and no table of the current state can be deleted meanwhile),
//!    take the manifest state and link or copy each of its table files.
//! 4. Write the manifest (one snapshot record, synced), sync the directory,
//!    then write `CURRENT` (temp file, sync, rename, sync the directory), as
//!    [`Manifest::create`] does for the database itself.
//!
//! `CURRENT` is written last, so a checkpoint interrupted by a crash has
//! none; on failure the files made so far are removed (best effort).
//! Tables flushed after step 3 began are not included: a checkpoint holds a
//! prefix of the write history (whole batches, since a batch lands in one
//! memtable and memtables flush in order).

use std::path::{Path, PathBuf};

use crate::db::DbInner;
use crate::error::{Error, Result};
use crate::manifest::{manifest_file_name, Manifest};
use crate::version::table_file_name;

impl DbInner {
    /// Writes a checkpoint of the database into `dest` (see the module
    /// documentation).
    pub(crate) fn checkpoint(&self, dest: &Path) -> Result<()> {
        let fs = self.fs.as_ref();
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
        // Directories this call creates: each one's entry is durable only
        // once its parent is synced.
        let created: Vec<&Path> = dest
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .collect();
        fs.create_dir_all(dest).map_err(|e| Error::io(dest, e))?;
        for dir in created.iter().rev() {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs.sync_dir(parent).map_err(|e| Error::io(parent, e))?;
            }
        }

        let mut made: Vec<PathBuf> = Vec::new();
        let result = (|| {
            let bg = self.bg.lock();
            if bg.shutdown {
                return Err(Error::Closed);
            }
            let mut state = bg.mstate.clone();
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
            made.push(dest.join(manifest_file_name(number)));
            Manifest::create(fs, dest, number, &state)?;
            Ok(())
        })();
        if result.is_err() {
            for path in made {
                let _ = fs.remove_file(&path);
            }
        }
        result
    }
}
