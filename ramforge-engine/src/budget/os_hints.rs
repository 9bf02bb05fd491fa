//! Hints to the kernel and the C allocator that make RSS follow the budget's ledger: huge
//! pages for large charged buffers, freed buffers handed back at once.

/// Asks the kernel to back the 2 MiB-aligned interior of a large, not yet touched buffer with
/// transparent huge pages (where THP is in `madvise` mode): weights are streamed through
/// once per token, and 4 KiB pages make that a TLB miss every 4 KiB. Only whole huge pages
/// inside the buffer are advised, so RSS never exceeds the buffer itself.
#[cfg(target_os = "linux")]
pub(crate) fn advise_huge_pages(ptr: *const u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + bytes) & !(HUGE - 1);
    if end > start {
        // SAFETY: the range lies inside a live allocation we own; MADV_HUGEPAGE changes only
        // how the kernel backs it, never its contents.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

/// Other systems have no transparent huge pages to ask for (macOS picks page sizes itself).
#[cfg(not(target_os = "linux"))]
pub(crate) fn advise_huge_pages(ptr: *const u8, bytes: usize) {
    let _ = (ptr, bytes);
}

/// Makes glibc return large freed buffers to the kernel at once, so the process's RSS follows
/// the budget's ledger: allocations of 128 KiB and more are mapped and unmapped individually
/// (fixing the threshold disables glibc's dynamic raise of it), the heap top is trimmed above
/// 1 MiB, one arena serves every thread (worker threads allocate only small, short-lived
/// buffers), and memory freed so far (e.g. by header parsing) is handed back now.
/// A no-op on other C libraries.
pub fn tie_allocator_to_budget() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt and malloc_trim only change allocator tunables and release free memory.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1024 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::malloc_trim(0);
    }
}
