//! The kernel table every public entry point dispatches through, and the row drivers
//! (matvec, matmul) that run a format's `vec_dot` over many rows, in parallel with rayon.

use crate::{float, formats, GgmlType, QuantError};
use rayon::prelude::*;

/// How a weight row is dotted with an activation vector.
#[derive(Clone, Copy)]
pub(crate) enum Dot {
    /// Plain float weights: dotted with the f32 activations directly.
    Float(fn(&[u8], &[f32]) -> f32),
    /// Block-quantized weights: activations are first quantized to `act`, then
    /// `vec_dot(weight_row_bytes, activation_row_bytes)` runs block by block.
    Quant {
        act: GgmlType,
        vec_dot: fn(&[u8], &[u8]) -> f32,
    },
}

/// Tokens a [`Tile`] kernel dots with one weight row at once.
pub(crate) const TILE: usize = 4;

/// The prefill GEMM's inner kernel: one weight row dotted with [`TILE`] tokens' activation
/// rows at once, so each weight block is loaded and unpacked once for all of them.
/// Results must equal `TILE` calls of the type's `Dot` up to f32 summation order.
#[derive(Clone, Copy)]
pub(crate) enum Tile {
    Float(fn(&[u8], [&[f32]; TILE]) -> [f32; TILE]),
    Quant(fn(&[u8], [&[u8]; TILE]) -> [f32; TILE]),
}

/// One type's kernels. The functions expect lengths already checked against the type
/// (whole blocks, `src.len() == ty.row_size(dst.len())`).
pub(crate) struct Kernels {
    pub dequantize: fn(&[u8], &mut [f32]),
    pub quantize: fn(&[f32], &mut [u8]),
    pub dot: Dot,
    /// The multi-token kernel, where a fast path has one (the matmul driver falls back to
    /// `dot` per token otherwise).
    pub tile: Option<Tile>,
}

static F32: Kernels = Kernels {
    dequantize: float::dequantize_f32,
    quantize: float::quantize_f32,
    dot: Dot::Float(float::dot_f32),
    tile: None,
};
static F16: Kernels = Kernels {
    dequantize: float::dequantize_f16,
    quantize: float::quantize_f16,
    dot: Dot::Float(float::dot_f16),
    tile: None,
};
static BF16: Kernels = Kernels {
    dequantize: float::dequantize_bf16,
    quantize: float::quantize_bf16,
    dot: Dot::Float(float::dot_bf16),
    tile: None,
};

/// The kernels for `ty` on the active instruction set ([`crate::isa`]), or `Unsupported`.
/// A type without a fast path on that instruction set gets its scalar reference kernels.
pub(crate) fn kernels(ty: GgmlType) -> Result<&'static Kernels, QuantError> {
    kernels_for(crate::isa::active(), ty)
}

/// The kernels for `ty` on `isa` (which the caller has checked the CPU supports).
pub(crate) fn kernels_for(
    isa: crate::isa::Isa,
    ty: GgmlType,
) -> Result<&'static Kernels, QuantError> {
    if let Some(k) = crate::simd::kernels(isa, ty) {
        return Ok(k);
    }
    scalar_kernels(ty)
}

/// The scalar reference kernels for `ty` (generated from the specs, or the plain float ones).
pub(crate) fn scalar_kernels(ty: GgmlType) -> Result<&'static Kernels, QuantError> {
    match ty {
        GgmlType::F32 => Ok(&F32),
        GgmlType::F16 => Ok(&F16),
        GgmlType::BF16 => Ok(&BF16),
        _ => formats::kernels(ty).ok_or(QuantError::Unsupported { ty }),
    }
}

/// Bytes of a row of `n` elements of `ty`, or the error saying why there is none.
pub(crate) fn row_bytes(ty: GgmlType, n: usize) -> Result<usize, QuantError> {
    if n % ty.block_size() != 0 {
        return Err(QuantError::RaggedRow { ty, elements: n });
    }
    ty.row_size(n).ok_or(QuantError::ByteLength {
        ty,
        expected: usize::MAX,
        got: 0,
    })
}

pub(crate) fn check_elements(
    ty: GgmlType,
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), QuantError> {
    if expected == got {
        Ok(())
    } else {
        Err(QuantError::ElementLength {
            ty,
            what,
            expected,
            got,
        })
    }
}

pub(crate) fn check_bytes(ty: GgmlType, expected: usize, got: usize) -> Result<(), QuantError> {
    if expected == got {
        Ok(())
    } else {
        Err(QuantError::ByteLength { ty, expected, got })
    }
}

/// Below this many weight bytes a product runs on the calling thread: splitting it would
/// cost more than it saves.
const PARALLEL_MIN_BYTES: usize = 64 * 1024;
/// Weight bytes per parallel work item: small enough to balance, large enough to amortize.
const CHUNK_BYTES: usize = 16 * 1024;

fn rows_per_chunk(row_bytes: usize) -> usize {
    (CHUNK_BYTES / row_bytes.max(1)).max(1)
}

/// Checked shapes of a weight matrix: (bytes per row).
fn check_matrix(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
) -> Result<usize, QuantError> {
    let row = row_bytes(ty, cols)?;
    let total = row.checked_mul(rows).ok_or(QuantError::ByteLength {
        ty,
        expected: usize::MAX,
        got: weights.len(),
    })?;
    check_bytes(ty, total, weights.len())?;
    Ok(row)
}

/// Activations quantized for `dot`: the f32 values for float weights, else `act` blocks.
enum Activations<'a> {
    Float(&'a [f32]),
    Quant(Vec<u8>, usize),
}

fn quantize_activations<'a>(
    dot: Dot,
    x: &'a [f32],
    n: usize,
    cols: usize,
) -> Result<Activations<'a>, QuantError> {
    match dot {
        Dot::Float(_) => Ok(Activations::Float(x)),
        Dot::Quant { act, .. } => {
            let act_row = row_bytes(act, cols)?;
            let quantize = kernels(act)?.quantize;
            let mut buf = vec![0u8; act_row * n];
            for (dst, src) in buf.chunks_exact_mut(act_row).zip(x.chunks_exact(cols)) {
                quantize(src, dst);
            }
            Ok(Activations::Quant(buf, act_row))
        }
    }
}

/// The dot of weight row `row` with token `t`'s activations.
#[inline]
fn dot_token(dot: Dot, acts: &Activations<'_>, cols: usize, row: &[u8], t: usize) -> f32 {
    match (dot, acts) {
        (Dot::Float(f), Activations::Float(x)) => f(row, &x[t * cols..(t + 1) * cols]),
        (Dot::Quant { vec_dot, .. }, Activations::Quant(buf, act_row)) => {
            vec_dot(row, &buf[t * act_row..(t + 1) * act_row])
        }
        _ => unreachable!("activations are built from the same Dot"),
    }
}

/// The dots of weight row `row` with tokens `t .. t + TILE`.
#[inline]
fn dot_tile(tile: Tile, acts: &Activations<'_>, cols: usize, row: &[u8], t: usize) -> [f32; TILE] {
    match (tile, acts) {
        (Tile::Float(f), Activations::Float(x)) => f(
            row,
            std::array::from_fn(|k| &x[(t + k) * cols..(t + k + 1) * cols]),
        ),
        (Tile::Quant(f), Activations::Quant(buf, act_row)) => f(
            row,
            std::array::from_fn(|k| &buf[(t + k) * act_row..(t + k + 1) * act_row]),
        ),
        _ => unreachable!("a type's tile kernel matches its dot kernel"),
    }
}

/// `y[o] = sum_i W[o][i] x[i]`; see [`crate::matvec`].
pub(crate) fn matvec(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), QuantError> {
    let dot = kernels(ty)?.dot;
    let row = check_matrix(ty, weights, rows, cols)?;
    check_elements(ty, "x", cols, x.len())?;
    check_elements(ty, "y", rows, y.len())?;
    if rows == 0 {
        return Ok(());
    }
    let acts = quantize_activations(dot, x, 1, cols)?;
    let run = |ys: &mut [f32], ws: &[u8]| {
        for (yo, w) in ys.iter_mut().zip(ws.chunks_exact(row)) {
            *yo = dot_token(dot, &acts, cols, w, 0);
        }
    };
    if weights.len() < PARALLEL_MIN_BYTES || row == 0 {
        run(y, weights);
    } else {
        let chunk = rows_per_chunk(row);
        y.par_chunks_mut(chunk)
            .zip(weights.par_chunks(chunk * row))
            .for_each(|(ys, ws)| run(ys, ws));
    }
    Ok(())
}

/// `y[t*rows + o] = sum_i W[o][i] x[t*cols + i]`; see [`crate::matmul`].
pub(crate) fn matmul(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    let dot = kernels(ty)?.dot;
    let row = check_matrix(ty, weights, rows, cols)?;
    let x_len = cols.checked_mul(n).ok_or(QuantError::ElementLength {
        ty,
        what: "x",
        expected: usize::MAX,
        got: x.len(),
    })?;
    check_elements(ty, "x", x_len, x.len())?;
    let y_len = rows.checked_mul(n).ok_or(QuantError::ElementLength {
        ty,
        what: "y",
        expected: usize::MAX,
        got: y.len(),
    })?;
    check_elements(ty, "y", y_len, y.len())?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    if n == 1 {
        return matvec(ty, weights, rows, cols, x, y);
    }
    let tile = kernels(ty)?.tile;
    let acts = quantize_activations(dot, x, n, cols)?;
    // Results by weight row (yt[o*n + t]) so that each chunk of weight rows owns a
    // contiguous slice; the chunk's weights stay in cache while every token visits them.
    let mut yt = vec![0f32; y_len];
    let chunk = rows_per_chunk(row);
    let run = |ys: &mut [f32], ws: &[u8]| {
        let mut t = 0;
        if let Some(tile) = tile {
            while t + TILE <= n {
                for (o, w) in ws.chunks_exact(row).enumerate() {
                    let out = dot_tile(tile, &acts, cols, w, t);
                    ys[o * n + t..o * n + t + TILE].copy_from_slice(&out);
                }
                t += TILE;
            }
        }
        for t in t..n {
            for (o, w) in ws.chunks_exact(row).enumerate() {
                ys[o * n + t] = dot_token(dot, &acts, cols, w, t);
            }
        }
    };
    if weights.len().saturating_mul(n) < PARALLEL_MIN_BYTES {
        for (ys, ws) in yt.chunks_mut(chunk * n).zip(weights.chunks(chunk * row)) {
            run(ys, ws);
        }
    } else {
        yt.par_chunks_mut(chunk * n)
            .zip(weights.par_chunks(chunk * row))
            .for_each(|(ys, ws)| run(ys, ws));
    }
    for (o, yo) in yt.chunks_exact(n).enumerate() {
        for (t, v) in yo.iter().enumerate() {
            y[t * rows + o] = *v;
        }
    }
    Ok(())
}
