//! The repository's file list with each file's size and LFS sha256, from the Hub's tree API
//! (`GET /api/models/{repo}/tree/main?recursive=true`, paged with `Link: <...>; rel="next"`),
//! and its copy in the cache for offline use.

use super::client::{encode_path, Hub, HubError};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;

/// One file of the repository.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoFile {
    /// The path inside the repository, `/`-separated.
    pub path: String,
    /// Its size in bytes (the LFS object's, for LFS files).
    pub size: u64,
    /// The LFS object id, which is the content's sha256; `None` for files kept in git itself.
    pub sha256: Option<String>,
}

/// An entry of the tree API's answer; other fields (`oid`, `xetHash`, ...) are ignored.
#[derive(Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    lfs: Option<LfsInfo>,
}

#[derive(Deserialize)]
struct LfsInfo {
    oid: String,
    size: u64,
}

/// Most pages followed: a listing is a few pages even for large repositories.
const MAX_PAGES: usize = 1000;
/// Largest page body read (a page of 1000 entries is ~300 KB).
const MAX_PAGE_BYTES: u64 = 64 << 20;

/// The files of `repo` at `main`, every page.
pub fn fetch(hub: &Hub, repo: &str) -> Result<Vec<RepoFile>, HubError> {
    let what = format!("listing the files of {repo}");
    let mut url = format!(
        "{}/api/models/{}/tree/main?recursive=true",
        hub.endpoint,
        encode_path(repo)
    );
    let mut files = Vec::new();
    for _ in 0..MAX_PAGES {
        let response = hub.call(hub.get(&url), &what)?;
        let next = response.header("Link").and_then(next_link);
        let mut body = Vec::new();
        response
            .into_reader()
            .take(MAX_PAGE_BYTES + 1)
            .read_to_end(&mut body)
            .map_err(|e| HubError::Unreachable(format!("{what}: reading {url}: {e}")))?;
        if body.len() as u64 > MAX_PAGE_BYTES {
            return Err(HubError::Refused(format!(
                "{what}: {url} answered more than {MAX_PAGE_BYTES} bytes"
            )));
        }
        let entries: Vec<TreeEntry> = serde_json::from_slice(&body).map_err(|e| {
            HubError::Refused(format!("{what}: {url} did not answer a file list: {e}"))
        })?;
        files.extend(entries.into_iter().filter_map(repo_file));
        match next {
            None => return Ok(files),
            Some(link) if link.starts_with('/') => url = format!("{}{link}", hub.endpoint),
            Some(link) => url = link,
        }
    }
    Err(HubError::Refused(format!(
        "{what}: more than {MAX_PAGES} pages"
    )))
}

/// A file entry as a [`RepoFile`]; directories are dropped.
fn repo_file(entry: TreeEntry) -> Option<RepoFile> {
    if entry.kind != "file" {
        return None;
    }
    let (size, sha256) = match entry.lfs {
        Some(lfs) => (lfs.size, Some(lfs.oid.to_ascii_lowercase())),
        None => (entry.size, None),
    };
    Some(RepoFile {
        path: entry.path,
        size,
        sha256,
    })
}

/// The `rel="next"` target of a `Link` header (RFC 8288), as the Hub pages its listings.
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|link| {
        let (target, params) = link.split_once(';')?;
        let is_next = params.split(';').any(|p| {
            let p = p.trim().replace(' ', "");
            p == "rel=\"next\"" || p == "rel=next"
        });
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        is_next.then(|| target.to_string())
    })
}

/// Saves the listing in `file` (write then rename, so a reader never sees half of it).
pub fn save(file: &Path, files: &[RepoFile]) -> std::io::Result<()> {
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(files)?)?;
    std::fs::rename(&tmp, file)
}

/// The listing saved by [`save`], if there is one.
pub fn load(file: &Path) -> Option<Vec<RepoFile>> {
    serde_json::from_slice(&std::fs::read(file).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_next_page_from_a_link_header() {
        let h =
            "<https://hf.example/api/models/a/b/tree/main?recursive=true&cursor=xyz>; rel=\"next\"";
        assert_eq!(
            next_link(h).as_deref(),
            Some("https://hf.example/api/models/a/b/tree/main?recursive=true&cursor=xyz")
        );
        assert_eq!(next_link("<https://x/prev>; rel=\"prev\""), None);
        assert_eq!(
            next_link("<https://x/p>; rel=\"prev\", <https://x/n>; rel=\"next\"").as_deref(),
            Some("https://x/n")
        );
    }

    #[test]
    fn keeps_files_with_their_lfs_sha256() {
        let body = r#"[
            {"type":"directory","oid":"1","size":0,"path":"sub"},
            {"type":"file","oid":"2","size":1519,"path":"README.md"},
            {"type":"file","oid":"3","size":134,"path":"sub/m-Q4_K_M.gguf",
             "lfs":{"oid":"AB12","size":105,"pointerSize":134},"xetHash":"ff"}]"#;
        let entries: Vec<TreeEntry> = serde_json::from_str(body).unwrap();
        let files: Vec<RepoFile> = entries.into_iter().filter_map(repo_file).collect();
        assert_eq!(
            files,
            vec![
                RepoFile {
                    path: "README.md".into(),
                    size: 1519,
                    sha256: None
                },
                RepoFile {
                    path: "sub/m-Q4_K_M.gguf".into(),
                    size: 105,
                    sha256: Some("ab12".into())
                },
            ]
        );
    }
}
