//! Zero-copy windows on the model file: a streamed layer used in place from a warm page cache.
//!
//! Copying a layer out of the page cache costs a read and a write of every byte, on a core
//! the compute wants, before the compute reads it again. Mapping it instead only sets up page
//! table entries (filled ahead by the I/O thread with `MADV_POPULATE_READ`), and unmapping it
//! after use drops them from the process's RSS again. A window is registered with the
//! [`super::sigbus`] handler while mapped, so a file that shrinks under it gives a recorded
//! fault, not a crash.

use super::sigbus::Registration;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

/// Huge-page size the page cache may hold a file in (transparent huge pages on x86-64 and
/// arm64 with 4 KiB pages).
const HUGE: usize = 2 << 20;

/// A read-only mapping of a file range.
pub struct Window {
    // Field order: unregistered before unmapped.
    registration: Registration,
    map: Mapping,
    file_start: u64,
}

/// The mapped pages: `bytes` lie at `skew` into the `len`-byte mapping at `base`.
struct Mapping {
    base: *mut u8,
    len: usize,
    skew: usize,
    bytes: usize,
}

// SAFETY: the mapping is read-only memory owned by the window; reading it from any thread
// is sound.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `bytes` bytes of `file` at `file_start`, at an address that is congruent to the
    /// file offset modulo [`HUGE`]: where the page cache holds the file in huge pages, every
    /// whole one inside the range is then mapped by one page-table entry instead of 512
    /// (much cheaper to fill and to drop, and fewer TLB misses).
    fn new(file: &File, file_start: u64, bytes: usize) -> io::Result<Mapping> {
        let page = page_size();
        let offset = file_start / page as u64 * page as u64;
        let skew = (file_start - offset) as usize;
        let len = (skew + bytes).div_ceil(page) * page;
        // SAFETY: an anonymous, inaccessible reservation; only its own pages are unmapped
        // or replaced below.
        unsafe {
            let reserved = libc::mmap(
                std::ptr::null_mut(),
                len + HUGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if reserved == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let r = reserved as usize;
            let at = r + (offset as usize % HUGE + HUGE - r % HUGE) % HUGE;
            let base = libc::mmap(
                at as *mut libc::c_void,
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                offset as libc::off_t,
            );
            let err = io::Error::last_os_error();
            if base == libc::MAP_FAILED {
                libc::munmap(reserved, len + HUGE);
                return Err(err);
            }
            // Give back the reservation around the mapping.
            if at > r {
                libc::munmap(reserved, at - r);
            }
            let tail = r + len + HUGE - (at + len);
            if tail > 0 {
                libc::munmap((at + len) as *mut libc::c_void, tail);
            }
            Ok(Mapping {
                base: base as *mut u8,
                len,
                skew,
                bytes,
            })
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `skew + bytes <= len` bytes are mapped readable at `base` while `self`
        // lives.
        unsafe { std::slice::from_raw_parts(self.base.add(self.skew), self.bytes) }
    }

    fn advise(&self, advice: libc::c_int) -> io::Result<()> {
        // SAFETY: madvise on this mapping only changes how its pages are loaded.
        let rc = unsafe { libc::madvise(self.base as *mut libc::c_void, self.len, advice) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly this mapping, which nothing borrows any more.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a constant.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}

impl Window {
    /// Maps `len` bytes of `file` from `file_start`. Fails with `Unsupported` when no handler
    /// slot is free, and as `mmap` fails (e.g. `ENODEV`: the file system cannot map files).
    pub fn map(file: &File, file_start: u64, len: usize) -> io::Result<Window> {
        let map = Mapping::new(file, file_start, len)?;
        let registration = Registration::new(map.base, map.len).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "every mapped-window slot is taken",
            )
        })?;
        Ok(Window {
            registration,
            file_start: file_start - map.skew as u64,
            map,
        })
    }

    /// Maps every page of the window from the page cache now (reading what is not cached),
    /// so the compute does not take the faults. Fails with `EFAULT` where the file ends
    /// before the window does.
    pub fn populate(&self) -> io::Result<()> {
        #[cfg(not(target_os = "linux"))]
        return self.map.advise(libc::MADV_WILLNEED);
        #[cfg(target_os = "linux")]
        match self.map.advise(libc::MADV_POPULATE_READ) {
            // Kernels before 5.14: start the reads; the compute takes the faults.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.map.advise(libc::MADV_WILLNEED)
            }
            other => other,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }

    /// The file offset of the lowest page a read found missing (the file shrank, or storage
    /// failed) since the window was mapped; such pages read as zeros.
    pub fn fault(&self) -> Option<u64> {
        self.registration.fault().map(|at| self.file_start + at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_window_over_a_truncated_file_records_the_fault_and_reads_zeros() {
        let path = std::env::temp_dir().join(format!("ramforge-window-{}", std::process::id()));
        let page = 4096usize;
        let data: Vec<u8> = (0..4 * page).map(|i| (i % 251) as u8 + 1).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let file = File::open(&path).unwrap();
        let w = Window::map(&file, page as u64, 3 * page).unwrap();
        w.populate().unwrap();
        assert_eq!(w.bytes(), &data[page..]);
        assert_eq!(w.fault(), None);

        // Cut the file inside the window's second page: its head still reads, the pages
        // past the end fault, read as zeros, and the lowest one is recorded.
        let cut = 2 * page + 100;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();
        let bytes = w.bytes();
        // SAFETY: reads inside the live mapping; volatile, so each access really happens.
        let read = |i: usize| unsafe { std::ptr::read_volatile(bytes.as_ptr().add(i)) };
        assert_eq!(
            read(page + 10),
            data[2 * page + 10],
            "the page holding the end reads"
        );
        assert_eq!(
            read(page + 200),
            0,
            "the cut-off tail of that page reads as zeros"
        );
        assert_eq!(w.fault(), None);
        assert_eq!(read(2 * page + 5), 0, "the page past the end faults");
        assert_eq!(w.fault(), Some(3 * page as u64));
        assert_eq!(
            read(page + 10),
            data[2 * page + 10],
            "other pages are untouched"
        );

        // A window mapped after the cut fails to populate, without a signal.
        let late = Window::map(&file, page as u64, 3 * page).unwrap();
        let err = late.populate().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EFAULT), "{err}");
        assert_eq!(late.fault(), None);
        drop((w, late));
        std::fs::remove_file(&path).ok();
    }
}
