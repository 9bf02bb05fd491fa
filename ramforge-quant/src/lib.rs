//! ramforge-quant: GGML block-quantization kernels.
//!
//! One job: turn quantized GGML blocks into numbers (dequantize), numbers into blocks
//! (quantize), and multiply quantized matrices by vectors. It depends on no other RAMforge
//! crate but its proc macro and the type table (`ramforge-types`), so it can be used on its own.
//!
//! The block formats (Q4_0 ... Q8_K, IQ1_S ... IQ4_XS, TQ1_0, TQ2_0, MXFP4, NVFP4) are generated at compile time from the
//! declarative specs in `specs/` by `ramforge_macros::block_formats!`; F32, F16 and BF16 are
//! handled natively. Layout convention: a weight matrix of GGUF shape `[cols, rows]` is `rows`
//! rows of `cols` elements, and `y[o] = sum_i W[o][i] x[i]`.
//!
//! ```
//! use ramforge_quant::{matvec, quantize_row, GgmlType};
//! let (rows, cols) = (2, 32);
//! let w = vec![0.25f32; rows * cols];
//! let mut q = vec![0u8; GgmlType::Q8_0.row_size(rows * cols).unwrap()];
//! quantize_row(GgmlType::Q8_0, &w, &mut q)?;
//! let mut y = vec![0f32; rows];
//! matvec(GgmlType::Q8_0, &q, rows, cols, &vec![1.0; cols], &mut y)?;
//! assert!((y[0] - 8.0).abs() < 1e-3);
//! # Ok::<(), ramforge_quant::QuantError>(())
//! ```

mod dispatch;
mod drivers;
mod error;
mod float;
#[cfg(test)]
mod format_tests;
pub mod formats;
pub mod isa;
mod kernel_table;
mod lengths;
pub mod parallel;
mod simd;
mod spec_support;

pub use drivers::Product;
pub use error::QuantError;
pub use ramforge_types::GgmlType;

/// Whether `ty` has kernels here (dequantize, quantize, matvec).
pub fn is_supported(ty: GgmlType) -> bool {
    dispatch::kernels(ty).is_ok()
}

/// The type activations are quantized to before being dotted with `ty` weights, as ggml
/// pairs them (`None` for float weights, which dot with f32 activations).
pub fn vec_dot_type(ty: GgmlType) -> Result<Option<GgmlType>, QuantError> {
    Ok(match dispatch::kernels(ty)?.dot {
        kernel_table::Dot::Float(_) => None,
        kernel_table::Dot::Quant { act, .. } => Some(act),
    })
}

/// How a weight matrix's blocks lie in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// As in a GGUF file.
    #[default]
    Gguf,
    /// Rewritten in place by [`arrange_rows`] for the active instruction set's kernels: the
    /// same blocks and bytes, each block's quants in an order its decode kernel reads with
    /// fewer instructions, and the same results. Only this crate's products and
    /// [`dequantize_row_laid`] read it.
    Arranged,
}

/// The layout [`arrange_rows`] gives rows of `ty` on the active instruction set: `Arranged`
/// where its fast kernels have one.
pub fn resident_layout(ty: GgmlType) -> Layout {
    match dispatch::resident(ty) {
        Some(_) => Layout::Arranged,
        None => Layout::Gguf,
    }
}

/// Rewrites `bytes`, whole blocks of `ty` as a GGUF file holds them, in place into
/// [`resident_layout`]`(ty)` and returns it (unchanged bytes and `Gguf` where there is no
/// arranged layout). For weights kept in memory and read by every token: the rewrite costs
/// about one read of them, once.
pub fn arrange_rows(ty: GgmlType, bytes: &mut [u8]) -> Result<Layout, QuantError> {
    let Some(r) = dispatch::resident(ty) else {
        return Ok(Layout::Gguf);
    };
    let block = ty.type_size();
    if !bytes.len().is_multiple_of(block) {
        return Err(QuantError::ByteLength {
            ty,
            expected: bytes.len() / block * block,
            got: bytes.len(),
        });
    }
    (r.arrange)(bytes);
    Ok(Layout::Arranged)
}

/// Dequantizes one row: `dst.len()` elements from exactly `ty.row_size(dst.len())` bytes.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    dequantize_row_laid(ty, Layout::Gguf, src, dst)
}

/// [`dequantize_row`] of blocks held in `layout`.
pub fn dequantize_row_laid(
    ty: GgmlType,
    layout: Layout,
    src: &[u8],
    dst: &mut [f32],
) -> Result<(), QuantError> {
    let k = dispatch::kernels_laid(ty, layout)?;
    let bytes = lengths::row_bytes(ty, dst.len())?;
    lengths::check_bytes(ty, bytes, src.len())?;
    (k.dequantize)(src, dst);
    Ok(())
}

/// Quantizes one row: `src.len()` elements into exactly `ty.row_size(src.len())` bytes,
/// with the reference (round-to-nearest) quantizer. For Q8_0, Q8_1 and Q8_K the result is
/// bit-identical to ggml's reference quantizer.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let k = dispatch::kernels(ty)?;
    let bytes = lengths::row_bytes(ty, src.len())?;
    lengths::check_bytes(ty, bytes, dst.len())?;
    (k.quantize)(src, dst);
    Ok(())
}

/// Matrix-vector product `y[o] = sum_i W[o][i] x[i]`, where `weights` holds `rows` rows of
/// `cols` elements of type `ty` (GGUF shape `[cols, rows]`).
///
/// `x` is quantized once to the type's activation type ([`vec_dot_type`]), then each row is
/// dotted block by block. Large products run in parallel on the [`parallel::WorkerPool`]
/// installed on the calling thread (`WorkerPool::install` chooses the thread count), else on
/// the current rayon pool.
pub fn matvec(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), QuantError> {
    drivers::matvec(ty, weights, rows, cols, x, y)
}

/// Batched product for prompt processing: `x` is `n` rows of `cols`, `y` is `n` rows of
/// `rows`: `y[t*rows + o] = sum_i W[o][i] x[t*cols + i]`.
///
/// Each token's activations are quantized once; each chunk of weight rows is visited by
/// every token while it is in cache, so this is never slower than `n` [`matvec`] calls.
pub fn matmul(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    drivers::matmul(ty, weights, rows, cols, x, n, y)
}

/// Several products of the same activations in one parallel region (Q, K and V of a layer;
/// gate and up): `x` is `n` rows of `cols`, and each product writes its own `y`
/// (`y[t * rows + o]`, as [`matmul`]).
///
/// `x` is quantized once per distinct activation type into `scratch`, which must hold at
/// least [`activation_scratch_bytes`] of the products' types; the caller owns (and can
/// account for) that memory, and nothing is allocated here. Results equal separate
/// [`matmul`] calls exactly.
pub fn matmul_many(
    products: &mut [Product<'_>],
    cols: usize,
    x: &[f32],
    n: usize,
    scratch: &mut [u8],
) -> Result<(), QuantError> {
    drivers::matmul_many_in(products, cols, x, n, scratch, false)
}

/// [`matmul_many`] where each token's results equal, bit for bit, those of the same product
/// with that token alone (`n = 1`): the tile kernels, which sum in another order, are not
/// used. Each chunk of weights is still read once for all `n` tokens, so batched decoding of
/// several sequences reads a layer once per step and each sequence gets exactly the numbers
/// it would get decoded alone.
pub fn matmul_many_per_token(
    products: &mut [Product<'_>],
    cols: usize,
    x: &[f32],
    n: usize,
    scratch: &mut [u8],
) -> Result<(), QuantError> {
    drivers::matmul_many_in(products, cols, x, n, scratch, true)
}

/// [`matmul`] with each token's results equal to [`matvec`] of that token alone (see
/// [`matmul_many_per_token`]).
pub fn matmul_per_token(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    drivers::matmul_per_token(ty, Layout::Gguf, weights, rows, cols, x, n, y)
}

/// [`matmul_per_token`] of weights held in `layout` ([`arrange_rows`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_per_token_laid(
    ty: GgmlType,
    layout: Layout,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    drivers::matmul_per_token(ty, layout, weights, rows, cols, x, n, y)
}

/// Bytes of scratch [`matmul_many`] needs for products of `types` over `n` tokens of `cols`
/// activations (0 when every type is a float type).
pub fn activation_scratch_bytes(
    types: &[GgmlType],
    cols: usize,
    n: usize,
) -> Result<usize, QuantError> {
    drivers::activation_scratch_bytes(types, cols, n)
}

/// How far [`matvec`] may lie from the exact `sum_i W[o][i] x[i]` of the dequantized row `w`
/// (the tolerance `ramforge-tools verify` and the tests apply).
///
/// Quantizing activations to 8 bits moves each `x[i]` by at most `d/2` plus the f16 rounding
/// of `d` (`d = amax/127` of its activation block), so the product moves by at most
/// `sum_i |w[i]| * err(block of i)`; on top, `1e-5 * sum_i |w[i] x[i]|` covers f32 summation.
/// Float weights dot with f32 activations and get only the summation term.
pub fn matvec_tolerance(ty: GgmlType, w: &[f32], x: &[f32]) -> Result<f32, QuantError> {
    lengths::check_elements(ty, "x", w.len(), x.len())?;
    let sum_abs: f64 = w
        .iter()
        .zip(x)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum();
    let mut tol = 1e-5 * sum_abs + 1e-30;
    if let Some(act) = vec_dot_type(ty)? {
        // Q8_K keeps its scale in f32; the others round it to f16 (2^-11 relative, or 2^-25
        // absolute when subnormal).
        let (rel, abs) = if act == GgmlType::Q8_K {
            (0.5 + 1e-4, 0.0)
        } else {
            (0.5 + 127.0 * 2f64.powi(-11) + 1e-4, 127.0 * 2f64.powi(-25))
        };
        let block = act.block_size();
        for (wb, xb) in w.chunks(block).zip(x.chunks(block)) {
            let amax = xb.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let err = amax / 127.0 * rel + abs;
            tol += err * wb.iter().map(|v| v.abs() as f64).sum::<f64>();
        }
    }
    Ok(tol as f32)
}
