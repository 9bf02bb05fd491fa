//! Memory read bandwidth of this machine: `threads` threads each sum their share of a buffer
//! far larger than the caches, several passes, best pass reported. The figure a decode step
//! that streams every weight byte once per token is bounded by.
//!
//! `membw [MIB] [THREADS] [PASSES]` (defaults 512, 2, 5); prints `read GB/s: X` and, with
//! `--json` anywhere, one JSON object instead. GB = 1e9 bytes.

use std::time::Instant;

/// Sum of a slice with four independent accumulators, so the loop is load-bound (and
/// vectorised), not bound by one add chain.
fn sum(words: &[u64]) -> u64 {
    let mut acc = [0u64; 4];
    let chunks = words.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*w);
        }
    }
    let tail = rest.iter().fold(0u64, |a, w| a.wrapping_add(*w));
    acc.iter().fold(tail, |a, w| a.wrapping_add(*w))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let nums: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let mib = nums.first().copied().unwrap_or(512).max(1);
    let threads = nums.get(1).copied().unwrap_or(2).max(1);
    let passes = nums.get(2).copied().unwrap_or(5).max(1);

    let words = mib * (1 << 20) / 8;
    // Touch every page with distinct values, so nothing is a shared zero page.
    let buf: Vec<u64> = (0..words as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let share = words.div_ceil(threads);
    let mut best = f64::INFINITY;
    let mut check = 0u64;
    for _ in 0..passes {
        let started = Instant::now();
        let total = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(share)
                .map(|part| s.spawn(move || sum(part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("reader thread"))
                .fold(0u64, u64::wrapping_add)
        });
        best = best.min(started.elapsed().as_secs_f64());
        check = check.wrapping_add(total);
    }
    let gbs = (words * 8) as f64 / best / 1e9;
    if json {
        println!(
            "{{\"buffer_bytes\": {}, \"threads\": {threads}, \"passes\": {passes}, \"best_seconds\": {best}, \"read_gb_per_sec\": {gbs}, \"checksum\": {check}}}",
            words * 8
        );
    } else {
        println!("read GB/s: {gbs:.2} ({mib} MiB, {threads} threads, best of {passes}; checksum {check:x})");
    }
}
