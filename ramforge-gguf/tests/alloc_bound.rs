//! Hostile counts must fail before they size an allocation: the parser's peak heap use is
//! measured with a counting global allocator (this test binary only).

mod common;

use common::Raw;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), SeqCst) + layout.size();
            PEAK.fetch_max(now, SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), SeqCst);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak extra heap bytes while parsing `bytes` (which must fail).
fn peak_while_failing(bytes: &[u8]) -> usize {
    let base = CURRENT.load(SeqCst);
    PEAK.store(base, SeqCst);
    let r = ramforge_gguf::parse_header(bytes, bytes.len() as u64);
    let peak = PEAK.load(SeqCst) - base;
    assert!(r.is_err(), "hostile header accepted");
    drop(r);
    peak
}

// One test function, so no other test thread allocates while we measure.
#[test]
fn hostile_counts_fail_with_small_memory() {
    let small = [
        Raw::header(3, 1 << 60, 0),
        Raw(Raw::header(3, 1 << 60, 0).0[..20].to_vec()),
        Raw::header(3, 0, 1 << 60),
        Raw::header(3, 1, 1)
            .str("a")
            .u32(9)
            .u32(8)
            .u64(1 << 60)
            .bytes(&[0; 64]),
        Raw::header(3, 0, 1)
            .str("a")
            .u32(8)
            .u64(1 << 60)
            .bytes(&[0; 64]),
        Raw::header(3, 0, 1)
            .str("a")
            .u32(9)
            .u32(9)
            .u64(1 << 59)
            .bytes(&[0; 64]),
        Raw::header(3, 1, 0).u64(1 << 62).bytes(&[0; 64]),
    ];
    for raw in &small {
        let peak = peak_while_failing(&raw.0);
        assert!(
            peak < 4096,
            "{} bytes allocated for a {}-byte file",
            peak,
            raw.len()
        );
    }

    // A count the bytes do allow, but whose first element is already invalid: the up-front
    // reservation is capped, so the 2^20 bools cost far less than 2^20 parsed values.
    let n = 1usize << 20;
    let mut raw = Raw::header(3, 0, 1).str("a").u32(9).u32(7).u64(n as u64);
    raw.0.extend(std::iter::repeat_n(2u8, n));
    let peak = peak_while_failing(&raw.0);
    let value_size = std::mem::size_of::<ramforge_gguf::Value>();
    assert!(
        peak < n * value_size / 8,
        "{peak} bytes reserved for an array that fails at its first element"
    );
}
