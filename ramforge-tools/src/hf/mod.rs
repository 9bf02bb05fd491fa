//! `--hf ORG/REPO[:QUANT|:FILE.gguf]`: a GGUF model from the Hugging Face Hub, fetched into
//! the cache (`<cache>/hf/ORG/REPO/files/PATH`) and verified against the sha256 the repository
//! lists, then used from there, also offline.
//!
//! `spec` parses the reference, `client` speaks HTTP (`HF_ENDPOINT`, `HF_TOKEN`), `listing`
//! gets the file list, `select` picks the files, `download` fetches one file resumably.

mod client;
mod download;
mod listing;
mod select;
mod spec;

use crate::default_model::cache_dir;
use crate::error::CmdError;
use client::{Hub, HubError};
use listing::RepoFile;
use ramforge_engine::budget::human_bytes;
use std::fs;
use std::path::{Path, PathBuf};

pub use spec::HfSpec;

/// One file of the fetched model, now in the cache.
pub struct CachedFile {
    pub path: PathBuf,
    pub bytes: u64,
    pub sha256: String,
    /// Whether this run downloaded (some of) it.
    pub downloaded: bool,
}

/// Whether `HF_HUB_OFFLINE` (huggingface_hub's variable) asks for no network.
pub fn offline_from_env() -> bool {
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The model `spec` names, in the cache: downloaded and verified first unless it is there.
/// Offline (or when the Hub cannot be reached) the cached listing and files are used.
/// Notes go to stderr unless `quiet`; split models come as all their parts, in order.
pub fn ensure(spec: &HfSpec, offline: bool, quiet: bool) -> Result<Vec<CachedFile>, CmdError> {
    let repo_dir = cache_dir()?.join("hf").join(&spec.repo);
    let files_dir = repo_dir.join("files");
    let listing_file = repo_dir.join("listing.json");
    let hub = Hub::from_env();
    let cached_listing = || listing::load(&listing_file);
    let (files, online) = if offline {
        let files = cached_listing().ok_or_else(|| {
            format!(
                "offline, and {} has not been fetched before (no {})",
                spec.repo,
                listing_file.display()
            )
        })?;
        (files, false)
    } else {
        match listing::fetch(&hub, &spec.repo) {
            Ok(files) => {
                fs::create_dir_all(&repo_dir).map_err(|e| {
                    format!("cannot create cache directory {}: {e}", repo_dir.display())
                })?;
                listing::save(&listing_file, &files)
                    .map_err(|e| format!("cannot write {}: {e}", listing_file.display()))?;
                (files, true)
            }
            Err(HubError::Unreachable(why)) => match cached_listing() {
                Some(files) => {
                    if !quiet {
                        eprintln!("note: {why}; using the cached copy of {}", spec.repo);
                    }
                    (files, false)
                }
                None => return Err(why.into()),
            },
            Err(e) => return Err(e.into()),
        }
    };
    let chosen = select::select(&files, &spec.repo, &spec.wanted)?;
    let mut out = Vec::with_capacity(chosen.len());
    for file in chosen {
        out.push(fetch_one(&hub, spec, &files_dir, file, online, quiet)?);
    }
    Ok(out)
}

/// One selected file into the cache (or found there).
fn fetch_one(
    hub: &Hub,
    spec: &HfSpec,
    files_dir: &Path,
    file: &RepoFile,
    online: bool,
    quiet: bool,
) -> Result<CachedFile, CmdError> {
    let dest = files_dir.join(safe_relative(&file.path)?);
    let sha256 = file
        .sha256
        .as_deref()
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            format!(
                "{} in {} has no LFS sha256 in the repository listing, so it cannot be verified",
                file.path, spec.repo
            )
        })?;
    let done = |downloaded| CachedFile {
        path: dest.clone(),
        bytes: file.size,
        sha256: sha256.to_string(),
        downloaded,
    };
    if download::is_cached(&dest, file.size) {
        return Ok(done(false));
    }
    if !online {
        return Err(format!(
            "offline, and {} of {} is not in the cache ({})",
            file.path,
            spec.repo,
            dest.display()
        )
        .into());
    }
    if let Some(dir) = dest.parent() {
        fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create cache directory {}: {e}", dir.display()))?;
    }
    if !quiet {
        eprintln!(
            "fetching {} ({}) from {}/{} into {}",
            file.path,
            human_bytes(file.size),
            hub.endpoint,
            spec.repo,
            files_dir.display()
        );
    }
    let job = download::Job {
        url: format!(
            "{}/{}/resolve/main/{}",
            hub.endpoint,
            client::encode_path(&spec.repo),
            client::encode_path(&file.path)
        ),
        dest: &dest,
        size: file.size,
        sha256,
        label: &file.path,
    };
    let downloaded = download::fetch(hub, &job)?;
    Ok(done(downloaded))
}

/// A repository path as a relative path that stays inside the cache: the listing is untrusted.
fn safe_relative(path: &str) -> Result<PathBuf, String> {
    let bad = path.is_empty()
        || path.contains(['\\', '\0'])
        || path
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(format!(
            "the repository listing has the unsafe file path {path:?}"
        ));
    }
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_paths_cannot_leave_the_cache() {
        assert!(safe_relative("a/b.gguf").is_ok());
        for bad in [
            "",
            "/etc/x.gguf",
            "../x.gguf",
            "a/../../x.gguf",
            "a//b.gguf",
            "a\\..\\b.gguf",
            "./x.gguf",
        ] {
            assert!(safe_relative(bad).is_err(), "{bad:?}");
        }
    }
}
