//! The proof that a member lost its data: before the fault its data directory holds the
//! server's files, and a marker left in it is gone once the member was restarted empty. A
//! deletion of some other path, or a directory the server does not write to, fails the proof.

use std::path::{Path, PathBuf};

/// The marker's file name.
const MARKER: &str = "quorumlock-compare-data-loss-marker";

/// A data directory about to be lost: how many of the server's files it held, and the marker
/// left in it.
#[derive(Debug)]
pub(super) struct Marked {
    files: usize,
    marker: PathBuf,
}

/// Counts the server's files under `dir` and leaves the marker there.
///
/// # Errors
///
/// When `dir` holds no file of the server's (nothing to lose) or the marker cannot be written.
pub(super) fn mark(dir: &Path) -> Result<Marked, String> {
    let files = count_files(dir);
    if files == 0 {
        return Err(format!("{} holds no data to lose", dir.display()));
    }
    let marker = dir.join(MARKER);
    std::fs::write(&marker, b"deleted with the member's data\n")
        .map_err(|e| format!("marking {}: {e}", dir.display()))?;
    Ok(Marked { files, marker })
}

/// Whether the marked directory was deleted: `Ok` with how many files went with it.
///
/// # Errors
///
/// When the marker is still there (the data was not deleted), or was never left.
pub(super) fn lost(marked: &Result<Marked, String>) -> Result<String, String> {
    let marked = marked.as_ref().map_err(Clone::clone)?;
    if marked.marker.exists() {
        let _ = std::fs::remove_file(&marked.marker);
        return Err(format!(
            "{} is still there: the data directory was not deleted",
            marked.marker.display()
        ));
    }
    Ok(format!(
        "its data directory ({} files) deleted",
        marked.files
    ))
}

fn count_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                count_files(&path)
            } else {
                1
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_deleted_directory_proves_the_loss() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("data");
        assert!(mark(&dir).is_err(), "no directory: nothing to lose");
        std::fs::create_dir_all(dir.join("member/wal")).expect("mkdir");
        assert!(mark(&dir).is_err(), "no file: nothing to lose");
        std::fs::write(dir.join("member/wal/0.wal"), b"x").expect("write");
        let marked = mark(&dir);
        assert!(lost(&marked).is_err(), "the directory is still there");
        let marked = mark(&dir);
        std::fs::remove_dir_all(&dir).expect("delete");
        assert_eq!(
            lost(&marked),
            Ok("its data directory (1 files) deleted".to_owned())
        );
    }
}
