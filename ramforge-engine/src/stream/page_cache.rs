//! Page-cache hints for streamed reads: what was read is dropped by whole folios, so streaming
//! leaves no more in the cache than a chunk and the readahead window.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Buffered streaming reads drop what they read from the page cache every this many bytes.
pub(super) const DROP_CHUNK: usize = 4 << 20;
/// How far past a read the kernel's readahead may have gone (twice a large 8 MiB window,
/// asynchronous readahead included): dropped when the stream jumps elsewhere.
pub(super) const READAHEAD_TAIL: u64 = 32 << 20;
/// The largest page-cache folio (a PMD on x86-64 and 4 KiB-page arm64): page-cache folios
/// are naturally aligned, so dropping from a multiple of this never splits one.
pub(super) const FOLIO: u64 = 2 << 20;

/// Drops bytes `from..to` of `file`, just read, from the page cache. The kernel drops only
/// whole folios inside the range, so the drop starts at the folio boundary at or before
/// `from`: a folio that the previous read's drop left because it ran past that read's end
/// goes now, and successive reads drop everything they read.
pub fn drop_read(file: &File, from: u64, to: u64) {
    let start = from / FOLIO * FOLIO;
    drop_range(file, start, to - start);
}

/// Drops `len` bytes of `file` from `offset` out of the page cache (`len` 0: to the end); a
/// hint, so a refusal is ignored.
#[cfg(target_os = "linux")]
pub fn drop_range(file: &File, offset: u64, len: u64) {
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

/// macOS has no per-range drop of cached pages: cold reads there bypass the cache instead
/// (`F_NOCACHE`, see `reader.rs`), and buffered reads leave what they read to the kernel.
#[cfg(not(target_os = "linux"))]
pub fn drop_range(file: &File, offset: u64, len: u64) {
    let _ = (file.as_raw_fd(), offset, len);
}

/// Asks the kernel to read bytes `offset..offset + len` of `file` ahead, into the page cache,
/// before the buffered reads of them: macOS's `F_RDADVISE`, so a segment the stream jumps to
/// is read in one request rather than as its first reads fault in the readahead. Linux's own
/// readahead follows the sequential reads; nothing is asked there. A hint: a refusal is
/// ignored.
#[cfg(target_os = "macos")]
pub fn advise_read(file: &File, offset: u64, len: u64) {
    let advice = libc::radvisory {
        ra_offset: offset as libc::off_t,
        ra_count: len.min(i32::MAX as u64) as libc::c_int,
    };
    // SAFETY: F_RDADVISE reads the `radvisory` passed by pointer, alive for the call; the
    // descriptor is open.
    unsafe {
        libc::fcntl(file.as_raw_fd(), libc::F_RDADVISE, &advice);
    }
}

/// Elsewhere the kernel's readahead follows the sequential reads (see the macOS version).
#[cfg(not(target_os = "macos"))]
pub fn advise_read(file: &File, offset: u64, len: u64) {
    let _ = (file.as_raw_fd(), offset, len);
}

/// Opens `path` for reads that go around the page cache: `O_DIRECT` on Linux (aligned
/// offsets, lengths and buffers), `F_NOCACHE` on macOS.
#[cfg(target_os = "linux")]
pub fn open_uncached(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// Opens `path` for reads that go around the page cache: `O_DIRECT` on Linux (aligned
/// offsets, lengths and buffers), `F_NOCACHE` on macOS.
#[cfg(target_os = "macos")]
pub fn open_uncached(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new().read(true).open(path)?;
    // SAFETY: F_NOCACHE takes an integer argument and changes only how this descriptor reads.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_NOCACHE, 1) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Elsewhere reads cannot go around the cache: refused, so the buffered path is used.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn open_uncached(path: &Path) -> io::Result<File> {
    let _ = path;
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
