//! Whether the model file's path still names the file the engine reads.
//!
//! The engine reads streamed layers, embedding rows and output chunks through handles opened
//! at load. A file truncated in place shows up as a short read; a file replaced by rename (a
//! new download moved over it, `cp` to a temporary name and `mv`) does not: the handles keep
//! reading the old file, which stays whole, so generation would quietly go on with weights
//! that are no longer at the path. That is refused: before each pass that reads from the
//! file, the engine compares the path's (device, inode) with the open handle's (one `stat`
//! per pass, nothing next to a layer read) and stops with an error naming the file and what it
//! was about to read. The engine stays usable: it runs again once the path names the loaded
//! file again (moved back), and a new engine loads the new file.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The file an engine reads, by path and by (device, inode) of its open handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

/// How the path stopped naming the open file.
#[derive(Debug)]
pub enum FileChange {
    /// The path names another file now.
    Replaced,
    /// Nothing can be found at the path (removed, renamed away, unreadable directory).
    Gone(std::io::Error),
}

impl fmt::Display for FileChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileChange::Replaced => write!(f, "was replaced by another file"),
            FileChange::Gone(e) => write!(f, "is gone ({e})"),
        }
    }
}

impl FileIdentity {
    /// The identity of `file` (`fstat`: what is open, even if `path` changed since).
    pub fn of(path: &Path, file: &File) -> std::io::Result<FileIdentity> {
        let m = file.metadata()?;
        Ok(FileIdentity {
            path: path.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `Ok` while the path still names the open file.
    pub fn check(&self) -> Result<(), FileChange> {
        let m = std::fs::metadata(&self.path).map_err(FileChange::Gone)?;
        if (m.dev(), m.ino()) == (self.dev, self.ino) {
            Ok(())
        } else {
            Err(FileChange::Replaced)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_over_the_path_is_seen_and_moving_the_file_back_clears_it() {
        let dir = std::env::temp_dir().join(format!("ramforge-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.gguf");
        std::fs::write(&path, b"first").unwrap();
        let open = File::open(&path).unwrap();
        let id = FileIdentity::of(&path, &open).unwrap();
        assert!(id.check().is_ok());

        // Writing in place keeps the file (truncation is the reader's business).
        std::fs::write(&path, b"first, rewritten").unwrap();
        assert!(id.check().is_ok());

        let kept = dir.join("kept.gguf");
        std::fs::hard_link(&path, &kept).unwrap();
        let other = dir.join("other.gguf");
        std::fs::write(&other, b"second").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let err = id.check().unwrap_err();
        assert!(matches!(err, FileChange::Replaced), "{err}");

        std::fs::remove_file(&path).unwrap();
        let err = id.check().unwrap_err();
        assert!(matches!(err, FileChange::Gone(_)), "{err}");
        assert!(err.to_string().starts_with("is gone ("), "{err}");

        std::fs::rename(&kept, &path).unwrap();
        assert!(id.check().is_ok(), "the loaded file is back at the path");
        std::fs::remove_dir_all(&dir).ok();
    }
}
