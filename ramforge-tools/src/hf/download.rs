//! One file from the Hub into the cache: resumed from a `.part` file with an HTTP Range
//! request, hashed as it arrives, and renamed into place only when its sha256 is the one the
//! repository lists, so a cached file is always a verified one.

use super::client::{Hub, HubError};
use crate::progress::progress_bar;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// One file to fetch.
pub struct Job<'a> {
    /// Absolute URL of the file (the Hub's `/{repo}/resolve/main/{path}`).
    pub url: String,
    /// Where the verified file goes.
    pub dest: &'a Path,
    pub size: u64,
    /// Lower-case hex sha256 the file must have.
    pub sha256: &'a str,
    /// The name shown in progress and errors (the path in the repository).
    pub label: &'a str,
}

/// The `.part` file a download of `dest` grows in.
pub fn part_path(dest: &Path) -> PathBuf {
    let mut name = dest.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}

/// Whether `dest` is in the cache whole: it was verified before it was renamed there.
pub fn is_cached(dest: &Path, size: u64) -> bool {
    fs::metadata(dest).is_ok_and(|m| m.is_file() && m.len() == size)
}

/// Fetches `job` unless it is cached; returns whether anything was downloaded.
pub fn fetch(hub: &Hub, job: &Job) -> Result<bool, HubError> {
    if is_cached(job.dest, job.size) {
        return Ok(false);
    }
    let part = part_path(job.dest);
    let local = |e: io::Error| HubError::Refused(format!("{}: {e}", part.display()));
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&part)
        .map_err(local)?;
    let mut have = file.metadata().map_err(local)?.len();
    if have > job.size {
        // Longer than the file can be: not a prefix of it.
        file.set_len(0).map_err(local)?;
        have = 0;
    }
    let mut hasher = Sha256::new();
    if have < job.size {
        let bar = progress_bar(job.size, job.label, true);
        bar.set_position(have);
        let mut request = hub.get(&job.url);
        if have > 0 {
            request = request.set("Range", &format!("bytes={have}-"));
        }
        let response = hub.call(request, &format!("downloading {}", job.label))?;
        let start = response_start(&response, have, job.label)?;
        if start == 0 {
            file.set_len(0).map_err(local)?;
        }
        hash_prefix(&mut file, start, &mut hasher).map_err(local)?;
        let mut body = response.into_reader().take(job.size - start);
        let mut writer = Hashing {
            file: &mut file,
            hasher: &mut hasher,
            bar: &bar,
        };
        let copied = io::copy(&mut body, &mut writer);
        bar.finish_and_clear();
        let got = start + copied.as_ref().copied().unwrap_or(0);
        let got = got.max(file.metadata().map_err(local)?.len());
        if let Err(e) = copied {
            return Err(HubError::Unreachable(format!(
                "downloading {}: stopped at {got} of {} bytes ({e}); run the command again to resume",
                job.label, job.size
            )));
        }
        if got < job.size {
            return Err(HubError::Unreachable(format!(
                "downloading {}: the connection closed at {got} of {} bytes; run the command again to resume",
                job.label, job.size
            )));
        }
    } else {
        hash_prefix(&mut file, have, &mut hasher).map_err(local)?;
    }
    let got = hex(&hasher.finalize());
    if got != job.sha256 {
        return Err(HubError::Refused(format!(
            "{} has sha256 {got}, but the repository lists {}; the download is kept in {} (delete it to download again)",
            job.label,
            job.sha256,
            part.display()
        )));
    }
    file.sync_all().map_err(local)?;
    drop(file);
    fs::rename(&part, job.dest).map_err(|e| {
        HubError::Refused(format!("cannot move {} into place: {e}", part.display()))
    })?;
    Ok(true)
}

/// Where the answer's body starts in the file: `have` for a 206 that continues the `.part`,
/// 0 for a 200 with the whole file (a server that ignores Range).
fn response_start(response: &ureq::Response, have: u64, label: &str) -> Result<u64, HubError> {
    match response.status() {
        200 => Ok(0),
        206 => {
            let range = response.header("Content-Range").unwrap_or("");
            let first = range
                .strip_prefix("bytes ")
                .and_then(|r| r.split_once('-'))
                .and_then(|(first, _)| first.trim().parse::<u64>().ok());
            if first == Some(have) {
                Ok(have)
            } else {
                Err(HubError::Refused(format!(
                    "downloading {label}: asked for bytes {have}- and got Content-Range {range:?}"
                )))
            }
        }
        code => Err(HubError::Refused(format!(
            "downloading {label}: unexpected HTTP {code}"
        ))),
    }
}

/// Hashes the first `len` bytes of `file` (what an earlier run downloaded) and leaves the
/// file positioned after them.
fn hash_prefix(file: &mut File, len: u64, hasher: &mut Sha256) -> io::Result<()> {
    file.seek(SeekFrom::Start(0))?;
    let copied = io::copy(&mut (&mut *file).take(len), hasher)?;
    if copied != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the partial download shrank while it was read",
        ));
    }
    file.seek(SeekFrom::Start(len))?;
    Ok(())
}

/// Writes to the file, feeding the hash and the progress bar on the way.
struct Hashing<'a> {
    file: &'a mut File,
    hasher: &'a mut Sha256,
    bar: &'a indicatif::ProgressBar,
}

impl Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bar.inc(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
