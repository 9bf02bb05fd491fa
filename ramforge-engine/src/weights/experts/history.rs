//! Expert history: each expert's share of its layer's routing as the expert cache counted it
//! ([`super::policy::ExpertUse::shares`]), saved when a process ends and loaded when the next
//! one starts on the same model, so a restarted `run` or `serve` begins with the experts its
//! router favours already in their slots (and counted as used, see
//! [`super::policy::ExpertUse::seed`]) instead of learning them again one miss at a time.
//!
//! The file lives in a cache directory the caller names, one per model path (its name hashes
//! the model's absolute path and shard count), and records the model's identity
//! ([`ModelIdentity::key`]: path, size, modification time, shards); it is never written inside
//! the model file. It is untrusted input: a small versioned binary of a size fixed by its
//! header (at most [`MAX_FILE_BYTES`]), checked whole (magic, version, identity, the layer
//! and expert counts the engine expects, every share a number in 0..=1, a checksum) before
//! any of it is used; whatever is wrong is one [`HistoryError`], never a panic. It is written
//! to a temporary file and renamed over the old one, so a reader sees the old file or the new
//! one, never half of one.
//!
//! Layout, little-endian: `b"RFXHIST\0"`, version `u32`, key length `u32`, MoE layers `u32`,
//! experts per layer `u32`, the key (UTF-8), `layers * experts` shares `f32`, then the FNV-1a
//! hash (`u64`) of every byte before it.

use crate::stream::identity::ModelIdentity;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"RFXHIST\0";
/// The format this code writes and reads.
pub const VERSION: u32 = 1;
/// Most bytes of the identity key.
const MAX_KEY_BYTES: usize = 4096;
/// Most shares (layers x experts): DeepSeek V3's 58 MoE layers x 256 experts is 14848.
const MAX_COUNTS: usize = 1 << 20;
/// A share is at most 1 (with room for rounding).
const MAX_SHARE: f32 = 1.0 + 1e-3;
const HEADER_BYTES: usize = 8 + 4 * 4;
/// The largest file read; a larger one is refused before a byte of it is read.
pub const MAX_FILE_BYTES: u64 = (HEADER_BYTES + MAX_KEY_BYTES + 4 * MAX_COUNTS + 8) as u64;

/// Why a history file was not used (each is one line; the caller warns and goes on without).
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// Reading or writing the file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Not a history file this version reads: wrong magic or version, cut short, too long,
    /// a share out of range, a bad checksum.
    #[error("malformed: {0}")]
    Malformed(String),
    /// Over [`MAX_FILE_BYTES`].
    #[error("{0} bytes, over the limit of {MAX_FILE_BYTES}")]
    TooLarge(u64),
    /// The history of another model, or of this path before the file changed.
    #[error("recorded for another model file (or this one before it changed)")]
    OtherModel,
    /// Reading the experts it names into the cache failed (the model file).
    #[error("preloading its experts: {0}")]
    Preload(String),
    /// The model's MoE layers or experts per layer differ from the file's.
    #[error("recorded for {file_layers} MoE layers of {file_experts} experts, the model has {layers} of {experts}")]
    Shape {
        /// The file's MoE layers.
        file_layers: usize,
        /// The file's experts per layer.
        file_experts: usize,
        /// The model's MoE layers.
        layers: usize,
        /// The model's experts per layer.
        experts: usize,
    },
}

/// Each expert's share of its MoE layer's routing.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpertHistory {
    layers: usize,
    n_expert: usize,
    /// `[layer * n_expert + expert]`.
    shares: Vec<f32>,
}

impl ExpertHistory {
    /// The history of `layers` MoE layers of `n_expert` experts; `None` when `shares` is not
    /// `layers * n_expert` long, the shape is past the format's limits, or a share is not a
    /// number in 0..=1.
    pub fn new(layers: usize, n_expert: usize, shares: Vec<f32>) -> Option<ExpertHistory> {
        let n = layers.checked_mul(n_expert)?;
        let ok = n == shares.len()
            && n <= MAX_COUNTS
            && shares.iter().all(|c| (0.0..=MAX_SHARE).contains(c));
        ok.then_some(ExpertHistory {
            layers,
            n_expert,
            shares,
        })
    }

    /// MoE layers.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Experts per layer.
    pub fn n_expert(&self) -> usize {
        self.n_expert
    }

    /// Every share, `[layer * n_expert + expert]`.
    pub fn shares(&self) -> &[f32] {
        &self.shares
    }

    /// The at most `n` most used experts of MoE layer `layer` (ever used: share above 0),
    /// most used first, ties by index.
    pub fn top(&self, layer: usize, n: usize) -> Vec<usize> {
        let Some(row) = self
            .shares
            .get(layer * self.n_expert..(layer + 1) * self.n_expert)
        else {
            return Vec::new();
        };
        let mut order: Vec<usize> = (0..row.len()).filter(|&x| row[x] > 0.0).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        order.truncate(n);
        order
    }

    /// The file's bytes, naming the model by `key`.
    pub fn encode(&self, key: &str) -> Vec<u8> {
        let key = &key.as_bytes()[..key.len().min(MAX_KEY_BYTES)];
        let mut out = Vec::with_capacity(HEADER_BYTES + key.len() + 4 * self.shares.len() + 8);
        out.extend_from_slice(MAGIC);
        for v in [
            VERSION,
            key.len() as u32,
            self.layers as u32,
            self.n_expert as u32,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(key);
        for c in &self.shares {
            out.extend_from_slice(&c.to_le_bytes());
        }
        let sum = fnv1a(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Reads `bytes` as the history of the model named `key`, with `layers` MoE layers of
    /// `n_expert` experts; every field is checked before anything is kept.
    pub fn decode(
        bytes: &[u8],
        key: &str,
        layers: usize,
        n_expert: usize,
    ) -> Result<ExpertHistory, HistoryError> {
        let bad = |why: &str| HistoryError::Malformed(why.to_string());
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(HistoryError::TooLarge(bytes.len() as u64));
        }
        if bytes.len() < HEADER_BYTES + 8 {
            return Err(bad("shorter than its header"));
        }
        if &bytes[..8] != MAGIC {
            return Err(bad("not an expert history file"));
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let version = u32_at(8);
        if version != VERSION {
            return Err(HistoryError::Malformed(format!(
                "version {version}, this build reads {VERSION}"
            )));
        }
        let (key_len, file_layers, file_experts) = (
            u32_at(12) as usize,
            u32_at(16) as usize,
            u32_at(20) as usize,
        );
        if key_len > MAX_KEY_BYTES {
            return Err(bad("key too long"));
        }
        let n = file_layers
            .checked_mul(file_experts)
            .filter(|&n| n <= MAX_COUNTS)
            .ok_or_else(|| bad("too many counts"))?;
        let want = HEADER_BYTES + key_len + 4 * n + 8;
        if bytes.len() != want {
            return Err(HistoryError::Malformed(format!(
                "{} bytes, its header says {want}",
                bytes.len()
            )));
        }
        let body = want - 8;
        let sum = u64::from_le_bytes(bytes[body..].try_into().unwrap());
        if sum != fnv1a(&bytes[..body]) {
            return Err(bad("checksum mismatch"));
        }
        let file_key = &bytes[HEADER_BYTES..HEADER_BYTES + key_len];
        if file_key != &key.as_bytes()[..key.len().min(MAX_KEY_BYTES)] {
            return Err(HistoryError::OtherModel);
        }
        if (file_layers, file_experts) != (layers, n_expert) {
            return Err(HistoryError::Shape {
                file_layers,
                file_experts,
                layers,
                experts: n_expert,
            });
        }
        let shares = bytes[HEADER_BYTES + key_len..body]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        ExpertHistory::new(layers, n_expert, shares).ok_or_else(|| bad("a share out of range"))
    }

    /// The history in `path` for the model named `key` (see [`ExpertHistory::decode`]);
    /// `Ok(None)` when there is no such file. A file over [`MAX_FILE_BYTES`] is refused
    /// before it is read.
    pub fn load(
        path: &Path,
        key: &str,
        layers: usize,
        n_expert: usize,
    ) -> Result<Option<ExpertHistory>, HistoryError> {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking: a FIFO put at the path must not hang the start.
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(HistoryError::Malformed("not a regular file".into()));
        }
        let len = meta.len();
        if len > MAX_FILE_BYTES {
            return Err(HistoryError::TooLarge(len));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        // Bounded even if the file grows while it is read.
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
        ExpertHistory::decode(&bytes, key, layers, n_expert).map(Some)
    }

    /// Writes the history to `path` for the model named `key`: into a temporary file beside
    /// it, then renamed over it (a reader never sees half a file). Creates the directory.
    pub fn save(&self, path: &Path, key: &str) -> Result<(), HistoryError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(&self.encode(key))?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
        Ok(())
    }
}

/// Where the history of the model `identity` names lives under the cache directory `dir`:
/// `dir/expert-history/<hash of its absolute path and shard count>.bin`. One file per path,
/// so a model replaced at its path overwrites its old history instead of adding a file.
pub fn path_in(dir: &Path, identity: &ModelIdentity) -> PathBuf {
    let name = identity.first_path();
    let mut bytes = name.as_os_str().as_encoded_bytes().to_vec();
    bytes.extend_from_slice(&(identity.shards() as u64).to_le_bytes());
    let h = fnv1a(&bytes);
    dir.join("expert-history").join(format!("{h:016x}.bin"))
}

/// Most files [`prune`] looks at.
const PRUNE_SCAN: usize = 1024;

/// Removes from the directory of `keep` (an `expert-history/` folder) the histories of model
/// files that are gone (deleted, or a test's temporary file), so the folder holds one small
/// file per model that still exists. Looks at most [`PRUNE_SCAN`] entries and the header of
/// each; leaves alone what it cannot read, what is not a regular file or not a history, and
/// `keep`.
pub fn prune(keep: &Path) {
    let Some(dir) = keep.parent() else { return };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten().take(PRUNE_SCAN) {
        let path = entry.path();
        // Regular files only (not followed through links): a FIFO would block the read.
        let file = entry.file_type().is_ok_and(|t| t.is_file());
        if !file || path == keep || path.extension().is_none_or(|e| e != "bin") {
            continue;
        }
        if let Some(model) = recorded_model(&path) {
            if !model.exists() {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// The model path a history file's key names, from its header alone.
fn recorded_model(path: &Path) -> Option<PathBuf> {
    let mut head = [0u8; HEADER_BYTES];
    let mut f = std::fs::File::open(path).ok()?;
    f.read_exact(&mut head).ok()?;
    let key_len = u32::from_le_bytes(head[12..16].try_into().ok()?) as usize;
    if &head[..8] != MAGIC || key_len > MAX_KEY_BYTES {
        return None;
    }
    let mut key = vec![0u8; key_len];
    f.read_exact(&mut key).ok()?;
    let key = String::from_utf8(key).ok()?;
    let first = key.lines().next()?.strip_prefix("path=")?;
    Some(PathBuf::from(first))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ExpertHistory {
        let shares = (0..3 * 8).map(|i| (i % 5) as f32 * 0.1).collect();
        ExpertHistory::new(3, 8, shares).unwrap()
    }

    #[test]
    fn a_history_round_trips_and_top_orders_by_count() {
        let h = sample();
        let bytes = h.encode("model-a");
        assert_eq!(bytes.len(), HEADER_BYTES + 7 + 4 * 24 + 8);
        assert_eq!(ExpertHistory::decode(&bytes, "model-a", 3, 8).unwrap(), h);
        // Layer 1 holds counts of experts 8..16: i % 5 for i = 8..16 is 3,4,0,1,2,3,4,0.
        assert_eq!(h.top(1, 3), [1, 6, 0]);
        assert_eq!(
            h.top(1, 100).len(),
            6,
            "never-used experts are not preloaded"
        );
        assert!(h.top(7, 3).is_empty());
    }

    #[test]
    fn every_kind_of_bad_file_is_one_error_never_a_panic() {
        let good = sample().encode("model-a");
        let err = |b: &[u8]| ExpertHistory::decode(b, "model-a", 3, 8).unwrap_err();
        assert!(matches!(
            ExpertHistory::decode(&good, "model-b", 3, 8),
            Err(HistoryError::OtherModel)
        ));
        assert!(matches!(
            ExpertHistory::decode(&good, "model-a", 3, 16),
            Err(HistoryError::Shape { .. })
        ));
        // Every truncation, and every single flipped byte.
        for n in 0..good.len() {
            assert!(matches!(err(&good[..n]), HistoryError::Malformed(_)), "{n}");
            let mut flipped = good.clone();
            flipped[n] ^= 0x41;
            let _ = ExpertHistory::decode(&flipped, "model-a", 3, 8).unwrap_err();
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(matches!(err(&longer), HistoryError::Malformed(_)));
        assert!(matches!(
            err(&vec![7u8; MAX_FILE_BYTES as usize + 1]),
            HistoryError::TooLarge(_)
        ));
        // A header claiming a huge shape.
        let mut huge = good.clone();
        huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(&huge).to_string().contains("too many counts"));
        // A well-formed file whose shares are not shares.
        let nan = ExpertHistory {
            layers: 3,
            n_expert: 8,
            shares: vec![f32::NAN; 24],
        };
        assert!(matches!(
            err(&nan.encode("model-a")),
            HistoryError::Malformed(_)
        ));
        assert!(ExpertHistory::new(3, 8, vec![-1.0; 24]).is_none());
        assert!(ExpertHistory::new(3, 8, vec![2.0; 24]).is_none());
        assert!(ExpertHistory::new(3, 8, vec![1.0; 23]).is_none());
    }

    #[test]
    fn save_replaces_the_file_whole_and_load_refuses_a_huge_one_unread() {
        let dir = std::env::temp_dir().join(format!("ramforge-history-{}", std::process::id()));
        let path = dir.join("sub").join("h.bin");
        assert!(ExpertHistory::load(&path, "k", 3, 8).unwrap().is_none());
        let h = sample();
        h.save(&path, "k").unwrap();
        assert_eq!(ExpertHistory::load(&path, "k", 3, 8).unwrap(), Some(h));
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left behind");
        // Another history whose model is gone is pruned; one whose model exists is kept.
        let gone = dir.join("sub").join("gone.bin");
        std::fs::write(
            &gone,
            sample().encode("path=/nonexistent/model.gguf\nbytes=1"),
        )
        .unwrap();
        let kept = dir.join("sub").join("kept.bin");
        let key = format!("path={}\nbytes=1", path.display());
        std::fs::write(&kept, sample().encode(&key)).unwrap();
        prune(&path);
        assert!(!gone.exists() && kept.exists() && path.exists());
        // A FIFO or a device at the path is refused, not waited on or read forever.
        let fifo = dir.join("sub").join("fifo.bin");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path it is given.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for special in [fifo.as_path(), Path::new("/dev/zero")] {
            let e = ExpertHistory::load(special, "k", 3, 8).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        std::fs::remove_file(&fifo).unwrap();
        std::fs::File::create(&path)
            .unwrap()
            .set_len(MAX_FILE_BYTES + 1)
            .unwrap();
        assert!(matches!(
            ExpertHistory::load(&path, "k", 3, 8),
            Err(HistoryError::TooLarge(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
