//! Page-cache hints for streamed reads: what was read is dropped by whole folios, so streaming
//! leaves no more in the cache than a chunk and the readahead window.

use std::fs::File;
use std::os::unix::io::AsRawFd;

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
    advise(file, start, to - start, libc::POSIX_FADV_DONTNEED);
}

/// A `posix_fadvise` hint; hints are advice, so a refusal is ignored.
pub fn advise(file: &File, offset: u64, len: u64, advice: libc::c_int) {
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            advice,
        );
    }
}
