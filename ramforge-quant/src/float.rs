//! F32, F16 and BF16 rows: converted natively (the `half` crate), dotted with f32 activations.

use half::{bf16, f16};

/// Element decoders for the plain float types, little-endian.
pub(crate) fn f32_at(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn f16_at(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

fn bf16_at(b: &[u8]) -> f32 {
    bf16::from_le_bytes([b[0], b[1]]).to_f32()
}

pub(crate) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32_at(s);
    }
}

pub(crate) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f16_at(s);
    }
}

pub(crate) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = bf16_at(s);
    }
}

pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(4).zip(src) {
        d.copy_from_slice(&s.to_le_bytes());
    }
}

pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&f16::from_f32(*s).to_le_bytes());
    }
}

pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&bf16::from_f32(*s).to_le_bytes());
    }
}

/// Dot of one row with `x`, accumulated in 8 independent lanes so the compiler vectorizes it.
fn dot_with(row: &[u8], x: &[f32], width: usize, at: impl Fn(&[u8]) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let mut rows = row.chunks_exact(8 * width);
    let mut xs = x.chunks_exact(8);
    for (r, xv) in (&mut rows).zip(&mut xs) {
        for k in 0..8 {
            acc[k] += at(&r[k * width..]) * xv[k];
        }
    }
    let mut tail = 0f32;
    for (r, xv) in rows.remainder().chunks_exact(width).zip(xs.remainder()) {
        tail += at(r) * xv;
    }
    acc.iter().sum::<f32>() + tail
}

pub(crate) fn dot_f32(row: &[u8], x: &[f32]) -> f32 {
    dot_with(row, x, 4, f32_at)
}

pub(crate) fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    dot_with(row, x, 2, f16_at)
}

pub(crate) fn dot_bf16(row: &[u8], x: &[f32]) -> f32 {
    dot_with(row, x, 2, bf16_at)
}
