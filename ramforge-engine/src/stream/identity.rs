//! Whether the model file's path still names the file the engine loaded, unchanged.
//!
//! The engine reads streamed layers, embedding rows and output chunks through handles opened
//! at load. A file truncated in place shows up as a short read; a file replaced by rename (a
//! new download moved over it, `cp` to a temporary name and `mv`) does not: the handles keep
//! reading the old file, which stays whole, so generation would quietly go on with weights
//! that are no longer at the path. A file rewritten in place (`cp` over it, a download tool
//! writing into it) changes under the handles, so a pass could mix old and new weights. Both
//! are refused: before each pass that reads from the file, and after it, the engine compares
//! the path's (device, inode, size, modification time) with what it loaded (one `stat` each,
//! nothing next to a layer read) and stops with an error naming the file and the tensor the
//! pass reads first; a file cut shorter than it was is reported as the short read a read would
//! find (the first tensor it no longer holds, and where it ends). The engine stays usable:
//! after a rename it runs again once the path names the loaded file again (moved back); a new
//! engine loads the new file. A split model is checked shard by shard ([`ModelIdentity`]): the
//! error names the shard that changed.

use ramforge_gguf::{GgufError, GgufFile};
use std::fmt;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Every file of a model (one, or each shard of a split, by shard index) as loaded.
#[derive(Clone, Debug)]
pub struct ModelIdentity {
    files: Vec<FileIdentity>,
}

impl ModelIdentity {
    /// The identity of each of `model`'s open files.
    pub fn of(model: &GgufFile) -> Result<ModelIdentity, GgufError> {
        let files = model
            .shards()
            .iter()
            .map(|s| {
                FileIdentity::of(s.path(), s.file()).map_err(|source| GgufError::Io {
                    path: s.path().display().to_string(),
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(ModelIdentity { files })
    }

    /// `Ok` while every path still names its open file as it was at load; else the first
    /// shard that changed, and how.
    pub fn check(&self) -> Result<(), (usize, FileChange)> {
        for (shard, f) in self.files.iter().enumerate() {
            f.check().map_err(|change| (shard, change))?;
        }
        Ok(())
    }

    /// What names this model across processes, for state kept beside it (the expert history,
    /// [`crate::weights::experts::history`]): the first file's absolute path, size and
    /// modification time, and the number of shards. Not (device, inode): those say whether
    /// this process's handles still read the path, which a later process cannot ask.
    pub fn key(&self) -> String {
        let Some(first) = self.files.first() else {
            return String::new();
        };
        format!(
            "path={}\nbytes={}\nmtime={}.{:09}\nshards={}",
            Self::absolute(&first.path).display(),
            first.len,
            first.mtime.0,
            first.mtime.1,
            self.files.len()
        )
    }

    /// The first file's path made absolute (canonical when it can be resolved), so that the
    /// same model named from two working directories is one model.
    pub fn first_path(&self) -> PathBuf {
        self.files
            .first()
            .map_or_else(PathBuf::new, |f| Self::absolute(&f.path))
    }

    fn absolute(path: &Path) -> PathBuf {
        std::fs::canonicalize(path)
            .or_else(|_| std::path::absolute(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }

    /// Files: 1, or the shards of a split model.
    pub fn shards(&self) -> usize {
        self.files.len()
    }

    /// The path of shard `shard`.
    pub fn path(&self, shard: usize) -> &Path {
        self.files
            .get(shard)
            .or(self.files.first())
            .map_or(Path::new(""), FileIdentity::path)
    }
}

/// The file an engine reads: its path, and the (device, inode) and the size and
/// modification time its open handle had at load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    path: PathBuf,
    dev: u64,
    ino: u64,
    len: u64,
    /// Modification time, seconds and nanoseconds.
    mtime: (i64, i64),
}

/// How the path stopped naming the open file.
#[derive(Debug)]
pub enum FileChange {
    /// The path names another file now.
    Replaced,
    /// The loaded file was cut to `len` bytes, shorter than at load.
    Truncated { len: u64 },
    /// The loaded file was written to (its size or modification time changed).
    Modified,
    /// Nothing can be found at the path (removed, renamed away, unreadable directory).
    Gone(std::io::Error),
}

impl fmt::Display for FileChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileChange::Replaced => write!(f, "was replaced by another file"),
            FileChange::Truncated { len } => write!(f, "was cut to {len} bytes"),
            FileChange::Modified => write!(f, "was modified in place"),
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
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `Ok` while the path still names the open file, as it was at load.
    pub fn check(&self) -> Result<(), FileChange> {
        let m = std::fs::metadata(&self.path).map_err(FileChange::Gone)?;
        if (m.dev(), m.ino()) != (self.dev, self.ino) {
            Err(FileChange::Replaced)
        } else if m.len() < self.len {
            Err(FileChange::Truncated { len: m.len() })
        } else if (m.len(), (m.mtime(), m.mtime_nsec())) != (self.len, self.mtime) {
            Err(FileChange::Modified)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own holding `model.gguf` ("first"), the file open, and its identity.
    fn loaded(tag: &str) -> (PathBuf, PathBuf, File, FileIdentity) {
        let dir = std::env::temp_dir().join(format!("ramforge-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.gguf");
        std::fs::write(&path, b"first").unwrap();
        let open = File::open(&path).unwrap();
        let id = FileIdentity::of(&path, &open).unwrap();
        assert!(id.check().is_ok());
        (dir, path, open, id)
    }

    #[test]
    fn a_rename_over_the_path_is_seen_and_moving_the_file_back_clears_it() {
        let (dir, path, _open, id) = loaded("identity");

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

    #[test]
    fn every_shard_of_a_split_model_is_checked_and_the_changed_one_named() {
        use ramforge_gguf::{GgmlType, GgufWriter, Metadata};
        let dir = std::env::temp_dir().join(format!("ramforge-shards-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = GgufWriter::new(Metadata::new());
        for i in 0..3 {
            w.add_tensor(format!("t{i}"), GgmlType::F32, &[64], vec![i as u8; 256])
                .unwrap();
        }
        let shards = w.write_split(dir.join("m"), 300).unwrap();
        assert_eq!(shards.len(), 3);
        let model = GgufFile::open(&shards[0].0).unwrap();
        let id = ModelIdentity::of(&model).unwrap();
        assert!(id.check().is_ok());

        // The last shard replaced by rename: shard 2 is named, as is its path.
        let kept = dir.join("kept.gguf");
        std::fs::rename(&shards[2].0, &kept).unwrap();
        std::fs::write(&shards[2].0, b"other").unwrap();
        let (shard, change) = id.check().unwrap_err();
        assert_eq!(shard, 2);
        assert!(matches!(change, FileChange::Replaced), "{change}");
        assert_eq!(id.path(2), shards[2].0.as_path());
        std::fs::rename(&kept, &shards[2].0).unwrap();
        assert!(id.check().is_ok(), "moved back");

        // The middle shard cut short: a truncation of shard 1, and the read it would fail.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&shards[1].0)
            .unwrap()
            .set_len(100)
            .unwrap();
        let (shard, change) = id.check().unwrap_err();
        assert_eq!(shard, 1);
        assert!(
            matches!(change, FileChange::Truncated { len: 100 }),
            "{change}"
        );
        let e = model.short_read_at(1, 100).unwrap().to_string();
        assert!(e.starts_with("tensor \"t1\": short read"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn writing_into_the_file_shows_in_its_size_or_modification_time() {
        let (dir, path, open, id) = loaded("written");
        let loaded_mtime = open.metadata().unwrap().modified().unwrap();

        // Same size, new bytes: the modification time tells.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(loaded_mtime + std::time::Duration::from_millis(1))
            .unwrap();
        assert!(matches!(id.check(), Err(FileChange::Modified)));
        // Back to the loaded time but longer: the size tells.
        std::fs::write(&path, b"first, rewritten").unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_modified(loaded_mtime).unwrap();
        let err = id.check().unwrap_err();
        assert!(matches!(err, FileChange::Modified), "{err}");
        assert_eq!(err.to_string(), "was modified in place");
        // Shorter than at load: cut.
        f.set_len(3).unwrap();
        let err = id.check().unwrap_err();
        assert!(matches!(err, FileChange::Truncated { len: 3 }), "{err}");
        assert_eq!(err.to_string(), "was cut to 3 bytes");
        // Both as loaded again: the file cannot tell (nor can anything short of reading it).
        f.set_len(5).unwrap();
        f.set_modified(loaded_mtime).unwrap();
        assert!(id.check().is_ok());
        std::fs::remove_dir_all(&dir).ok();
    }
}
