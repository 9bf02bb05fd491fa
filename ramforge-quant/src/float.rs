//! F32, F16 and BF16 rows: converted natively (the `half` crate), dotted with f32 activations.

use crate::kernel_table::{Dot, Kernels};
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

/// Elements converted per step of the half-precision dots (a stack buffer, no allocation).
const CHUNK: usize = 256;

/// Dot of a row of 16-bit floats with `x`: converts a chunk at a time with `half`'s slice
/// conversion (which uses F16C when the CPU has it), then dots f32s.
fn dot_half<T: Copy + Default>(
    row: &[u8],
    x: &[f32],
    decode: fn([u8; 2]) -> T,
    convert: fn(&[T], &mut [f32]),
) -> f32 {
    let mut halves = [T::default(); CHUNK];
    let mut wide = [0f32; CHUNK];
    let mut sum = 0f32;
    for (r, xs) in row.chunks(2 * CHUNK).zip(x.chunks(CHUNK)) {
        let n = xs.len();
        for (h, b) in halves[..n].iter_mut().zip(r.chunks_exact(2)) {
            *h = decode([b[0], b[1]]);
        }
        convert(&halves[..n], &mut wide[..n]);
        sum += dot_f32_slices(&wide[..n], xs);
    }
    sum
}

/// `sum a[i] * b[i]` in 8 independent lanes so that the compiler vectorizes it.
fn dot_f32_slices(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(p, q)| p * q)
        .sum();
    for (pa, pb) in ac.zip(bc) {
        for k in 0..8 {
            acc[k] += pa[k] * pb[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

pub(crate) fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    use half::slice::HalfFloatSliceExt;
    dot_half(row, x, f16::from_le_bytes, |h, w| h.convert_to_f32_slice(w))
}

pub(crate) fn dot_bf16(row: &[u8], x: &[f32]) -> f32 {
    use half::slice::HalfFloatSliceExt;
    dot_half(row, x, bf16::from_le_bytes, |h, w| {
        h.convert_to_f32_slice(w)
    })
}

/// The scalar kernels of the float types (a fast path replaces some of them per ISA).
pub(crate) const F32: Kernels = Kernels {
    dequantize: dequantize_f32,
    quantize: quantize_f32,
    dot: Dot::Float(dot_f32),
    tile: None,
    rows: None,
    arranged_acts: None,
};

pub(crate) const F16: Kernels = Kernels {
    dequantize: dequantize_f16,
    quantize: quantize_f16,
    dot: Dot::Float(dot_f16),
    tile: None,
    rows: None,
    arranged_acts: None,
};

pub(crate) const BF16: Kernels = Kernels {
    dequantize: dequantize_bf16,
    quantize: quantize_bf16,
    dot: Dot::Float(dot_bf16),
    tile: None,
    rows: None,
    arranged_acts: None,
};
