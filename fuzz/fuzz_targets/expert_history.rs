#![no_main]
//! The expert history file (`ramforge_engine::ExpertHistory`), untrusted input read at start:
//! any bytes decode to a history of exactly the shape the engine asked for, whose shares are
//! numbers in 0..=1 and which encodes back to the same bytes, or to a one-line error; never a
//! panic or an allocation sized by an unchecked field. Input: a flag byte (bit 0: replace the
//! last 8 bytes by the checksum of the rest, so mutations get past it and reach the fields
//! behind it), the MoE layers and experts per layer the engine expects (a byte each), then the
//! file.

use libfuzzer_sys::fuzz_target;
use ramforge_engine::ExpertHistory;

const KEY: &str = "fuzz";

/// The file format's checksum (FNV-1a, 64 bits), as the writer computes it.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fuzz_target!(|data: &[u8]| {
    let [flags, layers, experts, file @ ..] = data else {
        return;
    };
    let mut file = file.to_vec();
    if flags & 1 == 1 && file.len() >= 8 {
        let body = file.len() - 8;
        let sum = fnv1a(&file[..body]);
        file[body..].copy_from_slice(&sum.to_le_bytes());
    }
    let (layers, experts) = (*layers as usize, *experts as usize);
    match ExpertHistory::decode(&file, KEY, layers, experts) {
        Ok(h) => {
            assert_eq!((h.layers(), h.n_expert()), (layers, experts));
            assert_eq!(h.shares().len(), layers * experts);
            assert!(h.shares().iter().all(|s| (0.0..=1.001).contains(s)));
            assert_eq!(h.encode(KEY), file, "a decoded history encodes back to its bytes");
            for layer in 0..layers {
                let top = h.top(layer, experts);
                assert!(top.iter().all(|&e| e < experts));
                assert!(top
                    .windows(2)
                    .all(|w| h.shares()[layer * experts + w[0]] >= h.shares()[layer * experts + w[1]]));
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.contains('\n'), "a multi-line error: {message}");
        }
    }
});
