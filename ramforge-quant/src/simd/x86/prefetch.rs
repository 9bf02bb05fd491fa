//! Software prefetch for the decode kernels, which read every weight byte once per token.
//!
//! The hardware prefetchers follow a long sequential stream, but they stop at each 4 KiB page
//! and learn the stream again there, and a multi-row kernel reads its rows a block of each at
//! a time: short strided streams they barely learn before the rows end. So the kernels ask
//! for the weights they will read next by hand. A prefetch is a hint: it never faults, so
//! addresses past the end of a matrix only waste a few reads. (Measurements: benches/README.md.)

use std::arch::x86_64::*;

/// How far ahead of its loads a single-row dot prefetches, in bytes.
const ROW_AHEAD: usize = 4096;

/// Prefetches the cache line [`ROW_AHEAD`] bytes past `p`: called once per step of a
/// single-row dot, it keeps its stream that far ahead, across rows and pages.
#[inline(always)]
pub(super) unsafe fn line_ahead(p: *const u8) {
    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(ROW_AHEAD).cast::<i8>());
}

/// Prefetches the `i`-th of `steps` slices of the `w.len()` bytes that start one group past the
/// end of `w`, the rows (back to back) a multi-row call computes: over the call's `steps` block
/// steps, the group of rows after the next arrives as one linear stream, into the cache level
/// `HINT` names (`_MM_HINT_T0`, `_MM_HINT_T1`). One group ahead measured slower than two; two
/// to eight measured alike.
#[inline(always)]
pub(super) unsafe fn group_after_next<const HINT: i32>(w: &[u8], i: usize, steps: usize) {
    let next = w.as_ptr().wrapping_add(2 * w.len());
    let per = w.len().div_ceil(steps.max(1));
    let end = ((i + 1) * per).min(w.len());
    let mut off = i * per;
    while off < end {
        _mm_prefetch::<HINT>(next.wrapping_add(off).cast::<i8>());
        off += 64;
    }
}

/// For a decode call (one token) of a kernel without a multi-row prefetch: asks for the
/// `bytes`-long block [`ROW_AHEAD`] bytes past each row's current one (`wb`), line by line, so
/// each single-row stream stays ahead of its loads.
#[inline(always)]
pub(super) unsafe fn blocks_ahead<const R: usize>(wb: &[*const u8; R], bytes: usize) {
    for p in wb {
        for l in 0..bytes.div_ceil(64) {
            line_ahead(p.add(64 * l));
        }
    }
}
