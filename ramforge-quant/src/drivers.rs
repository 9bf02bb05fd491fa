//! The row drivers: matvec (one token), matmul (a batch of tokens) and the fused form that
//! runs several matrices of the same activations in one parallel region, each running a
//! type's kernels over many rows, in parallel (`parallel::for_each`: the installed
//! `WorkerPool`, else rayon's current pool).

use crate::dispatch::{kernels, kernels_laid, resident};
use crate::kernel_table::{
    Arrange, Dot, Kernels, Rows, Tile, Unpack, ROWS, TILE, TILE_ROWS, UNPACKED_ROWS,
};
use crate::lengths::{check_bytes, check_elements, row_bytes};
use crate::parallel;
use crate::{GgmlType, Layout, QuantError};
use std::cell::RefCell;

/// Below this many weight bytes times tokens a product runs on the calling thread: waking
/// the pool would cost more than it saves.
const PARALLEL_MIN_BYTES: usize = 64 * 1024;
/// Weight bytes per parallel work item. Small enough that the threads balance a decode step
/// even when another process takes part of a core (the item a descheduled worker holds is
/// the most the others wait for), large enough to amortise the claim.
const CHUNK_BYTES: usize = 16 * 1024;
/// Quantized activation bytes of one token block in the batched product: a block stays in
/// L1 while every weight row of the item (in L2) is dotted with it.
const TOKEN_BLOCK_BYTES: usize = 16 * 1024;
/// Products one fused call runs together (Q, K, V and spare); longer lists run in groups.
const MAX_PRODUCTS: usize = 4;
/// Tokens below which a product with a [`Tile::Unpacked`] kernel runs token by token.
const UNPACKED_MIN_TOKENS: usize = 2 * TILE;
/// L1 data cache bytes a [`Tile::Unpacked`] kernel's working set is sized for (32 KiB: Zen 1-5;
/// Intel cores have 32-48). A thread holds as many unpacked weight rows as fit beside one
/// tile of tokens' activations ([`unpacked_group`]): the tile then reads its weights from L1
/// and its activations from L2 once per group, instead of every weight byte from L2.
const UNPACKED_L1_BYTES: usize = 32 * 1024;
/// Most bytes a work item's rows unpack to for the item to be unpacked once ([`run_unpacked`]);
/// wider items unpack a group at a time.
const UNPACKED_ITEM_BYTES: usize = 256 * 1024;
/// Activation bytes of the token blocks that visit an item unpacked whole: a block stays in L2
/// (half of Zen 1's 512 KiB, the smallest of the CPUs these kernels target) while every group
/// of the item reads it.
const UNPACKED_L2_BYTES: usize = 256 * 1024;

/// Alignment of each token's row in an arranged activation copy (its stride rounded up to
/// it, the copy's start aligned in the scratch): the kernels reading arranged rows load
/// their quants as whole vectors, which measured slower where they cross a cache line.
const ARRANGED_ALIGN: usize = 64;

/// The distance between tokens' rows of `act_row` bytes in an arranged copy.
fn arranged_stride(act_row: usize) -> usize {
    act_row.next_multiple_of(ARRANGED_ALIGN)
}

thread_local! {
    /// Each thread's unpacked weight rows ([`Tile::Unpacked`]): at most
    /// [`UNPACKED_ITEM_BYTES`], or one group ([`UNPACKED_ROWS`] rows where those unpack to
    /// more), whatever the batch; a fixed cost per thread.
    static UNPACKED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One matrix of a fused product (the public `matmul_many`): `rows` rows of `cols` elements of
/// type `ty` held in `layout`, and where its result goes: `y[t * rows + o]` for token `t`, row
/// `o`.
pub struct Product<'a> {
    pub ty: GgmlType,
    pub layout: Layout,
    pub weights: &'a [u8],
    pub rows: usize,
    pub y: &'a mut [f32],
}

/// A token-major output written by several work items at once; each item writes only the
/// rows `o` it owns (`y[t * rows + o]`), so no two items touch the same element.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: items write disjoint elements (see `run_item`), and the pointer outlives the
// parallel region that uses it (it comes from a `&mut [f32]` borrowed for the whole call).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// Activations quantized for a type's `dot`: the f32 rows for float weights, else the
/// `act`-type rows.
#[derive(Clone, Copy)]
enum Acts<'a> {
    Float(&'a [f32]),
    Quant(QuantRows<'a>),
}

/// Tokens' quantized (or arranged) activation rows of `row` bytes, `stride` apart in `buf`.
#[derive(Clone, Copy)]
struct QuantRows<'a> {
    buf: &'a [u8],
    row: usize,
    stride: usize,
}

impl<'a> QuantRows<'a> {
    /// Token `t`'s row.
    fn token(&self, t: usize) -> &'a [u8] {
        &self.buf[t * self.stride..t * self.stride + self.row]
    }
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

/// One product, checked and ready to run.
#[derive(Clone, Copy)]
struct Prepared<'a> {
    dot: Dot,
    tile: Option<Tile>,
    rows_kernel: Option<Rows>,
    weights: &'a [u8],
    /// Bytes of one weight row.
    row: usize,
    rows: usize,
    /// Weight rows per work item.
    chunk_rows: usize,
    acts: Acts<'a>,
    /// The activations as the tile's [`Unpack::arrange`] wrote them, where it has one and
    /// the batch runs unpacked tiles.
    arranged: Option<QuantRows<'a>>,
    y: OutPtr,
    /// Each token's dots as for `n = 1` (the rows kernel and the dot, or a tile that equals
    /// the dot bit for bit), so a token's results do not depend on the others in the batch.
    per_token: bool,
    /// With `per_token`: the tile is, per token, exactly the dot, so it may run.
    exact_tile: bool,
}

impl Prepared<'_> {
    fn items(&self) -> usize {
        self.rows.div_ceil(self.chunk_rows)
    }
}

/// The activation type of `dot` (`None` for float weights).
fn act_type(dot: Dot) -> Option<GgmlType> {
    match dot {
        Dot::Float(_) => None,
        Dot::Quant { act, .. } => Some(act),
    }
}

/// Scratch bytes [`matmul_many`] needs to quantize `n` tokens of `cols` activations once for
/// every distinct activation type among `types` (and once more for each type some kernel
/// reads arranged: a batch that unpacks ([`Unpack::arrange`]), or weights held in a
/// [`Layout::Arranged`] layout). Sized for either layout of each type: the arranged one's
/// kernels, where the type has one, take the same activation type and always arrange.
pub(crate) fn activation_scratch_bytes(
    types: &[GgmlType],
    cols: usize,
    n: usize,
) -> Result<usize, QuantError> {
    let mut most = 0usize;
    // matmul_many runs long lists in groups, each quantizing into the same scratch.
    for group in types.chunks(MAX_PRODUCTS) {
        let mut ks: [Option<&Kernels>; MAX_PRODUCTS] = [None; MAX_PRODUCTS];
        for (slot, &ty) in ks.iter_mut().zip(group) {
            *slot = Some(match resident(ty) {
                Some(r) => &r.kernels,
                None => kernels(ty)?,
            });
        }
        most = most.max(group_scratch_bytes(group, &ks, cols, n)?);
    }
    Ok(most)
}

/// [`activation_scratch_bytes`] of one group of products whose kernels are `ks[i]`: per
/// activation type, one quantized copy and one more per distinct arrangement its products read
/// ([`arrangement`]).
fn group_scratch_bytes(
    group: &[GgmlType],
    ks: &[Option<&Kernels>; MAX_PRODUCTS],
    cols: usize,
    n: usize,
) -> Result<usize, QuantError> {
    let mut total = 0usize;
    let mut acts: [Option<GgmlType>; MAX_PRODUCTS] = [None; MAX_PRODUCTS];
    let mut arranged: [Option<(GgmlType, Arrange)>; MAX_PRODUCTS] = [None; MAX_PRODUCTS];
    for (i, &ty) in group.iter().enumerate() {
        let k = ks[i].ok_or(QuantError::Unsupported { ty })?;
        let Some(act) = act_type(k.dot) else {
            continue;
        };
        let mut copies = 0usize;
        if !acts.contains(&Some(act)) {
            acts[i] = Some(act);
            copies += 1;
        }
        if let Some(arrange) = arrangement(k, n, false) {
            let known = arranged
                .iter()
                .flatten()
                .any(|&(a, f)| a == act && std::ptr::fn_addr_eq(f, arrange));
            if !known {
                arranged[i] = Some((act, arrange));
                copies += 1;
            }
        }
        if copies == 0 {
            continue;
        }
        let act_row = row_bytes(act, cols)?;
        let too_big = QuantError::ByteLength {
            ty: act,
            expected: usize::MAX,
            got: 0,
        };
        let quantized = act_row.checked_mul(n).ok_or(too_big.clone())?;
        // An arranged copy: aligned rows, and room to align its start.
        let arranged = arranged_stride(act_row)
            .checked_mul(n)
            .and_then(|b| b.checked_add(ARRANGED_ALIGN))
            .ok_or(too_big)?;
        let bytes = if acts[i].is_some() {
            quantized.saturating_add(arranged.saturating_mul(copies - 1))
        } else {
            arranged.saturating_mul(copies)
        };
        total = total.saturating_add(bytes);
    }
    Ok(total)
}

/// How a product with kernels `k` reads its activations arranged, if it does: its kernels'
/// [`Kernels::arranged_acts`] (an arranged layout's), or, where a batch of `n` tokens runs
/// unpacked tiles (not `per_token`), its tile's [`Unpack::arrange`]. Products of one group
/// that arrange the same activation type differently (a codebook format's unpacked tile
/// beside a resident K-quant) each get their own arranged copy; those arranging it alike
/// share one.
fn arrangement(k: &Kernels, n: usize, per_token: bool) -> Option<Arrange> {
    let tiles_unpack = n >= UNPACKED_MIN_TOKENS && !per_token;
    k.arranged_acts.or(match k.tile {
        Some(Tile::Unpacked(u)) if tiles_unpack => u.arrange,
        _ => None,
    })
}

thread_local! {
    /// Quantized activations of [`matvec`]/[`matmul`] called without caller scratch: grows to
    /// the widest product this thread has run (one token-batch of activations).
    static ACT_SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` with this thread's activation scratch, at least `len` bytes long. The buffer is
/// taken out of the cell while in use, so a nested call (a worker running another product
/// while it waits) gets its own rather than a double borrow.
fn with_thread_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut buf = ACT_SCRATCH.with(|c| c.take());
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let r = f(&mut buf[..len]);
    ACT_SCRATCH.with(|c| c.set(buf));
    r
}

/// `y[o] = sum_i W[o][i] x[i]`: the public `matvec`.
pub(crate) fn matvec(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), QuantError> {
    matmul(ty, weights, rows, cols, x, 1, y)
}

/// `y[t*rows + o] = sum_i W[o][i] x[t*cols + i]`: the public `matmul`.
pub(crate) fn matmul(
    ty: GgmlType,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    matmul_in(ty, Layout::Gguf, weights, rows, cols, x, n, y, false)
}

/// [`matmul`] of weights held in `layout` with each token's dots as `n = 1` computes them:
/// the public `matmul_per_token` and `matmul_per_token_laid`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_per_token(
    ty: GgmlType,
    layout: Layout,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    matmul_in(ty, layout, weights, rows, cols, x, n, y, true)
}

#[allow(clippy::too_many_arguments)]
fn matmul_in(
    ty: GgmlType,
    layout: Layout,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    per_token: bool,
) -> Result<(), QuantError> {
    let need = activation_scratch_bytes(&[ty], cols, n)?;
    with_thread_scratch(need, |scratch| {
        matmul_many_in(
            &mut [Product {
                ty,
                layout,
                weights,
                rows,
                y,
            }],
            cols,
            x,
            n,
            scratch,
            per_token,
        )
    })
}

/// Every product of `products` with the same `n` tokens of activations `x` (`n` rows of
/// `cols`), in one parallel region: the public `matmul_many`, or with `per_token` the public
/// `matmul_many_per_token` (each token's dots computed as for `n = 1`, no tiles).
pub(crate) fn matmul_many_in(
    products: &mut [Product<'_>],
    cols: usize,
    x: &[f32],
    n: usize,
    scratch: &mut [u8],
    per_token: bool,
) -> Result<(), QuantError> {
    for group in products.chunks_mut(MAX_PRODUCTS) {
        let mut ks: [Option<&Kernels>; MAX_PRODUCTS] = [None; MAX_PRODUCTS];
        for (slot, p) in ks.iter_mut().zip(group.iter()) {
            *slot = Some(kernels_laid(p.ty, p.layout)?);
        }
        run_group(group, &ks, cols, x, n, &mut *scratch, per_token)?;
    }
    Ok(())
}

/// [`matmul_many`] for at most [`MAX_PRODUCTS`] products whose kernels are `ks[i]`.
fn run_group(
    products: &mut [Product<'_>],
    ks: &[Option<&Kernels>; MAX_PRODUCTS],
    cols: usize,
    x: &[f32],
    n: usize,
    scratch: &mut [u8],
    per_token: bool,
) -> Result<(), QuantError> {
    debug_assert!(products.len() <= MAX_PRODUCTS);
    // Check every shape before touching anything.
    let mut rows_bytes = [0usize; MAX_PRODUCTS];
    for (i, p) in products.iter().enumerate() {
        let ty = p.ty;
        rows_bytes[i] = check_matrix(ty, p.weights, p.rows, cols)?;
        let x_len = cols.checked_mul(n).ok_or(QuantError::ElementLength {
            ty,
            what: "x",
            expected: usize::MAX,
            got: x.len(),
        })?;
        check_elements(ty, "x", x_len, x.len())?;
        let y_len = p.rows.checked_mul(n).ok_or(QuantError::ElementLength {
            ty,
            what: "y",
            expected: usize::MAX,
            got: p.y.len(),
        })?;
        check_elements(ty, "y", y_len, p.y.len())?;
    }
    if n == 0 {
        return Ok(());
    }

    // Quantize the activations once per distinct activation type, and arrange them once per
    // distinct arrangement some product's kernels read; each product's (row bytes, quantized
    // offset, arranged offset) in `acts_of`.
    let mut quantized_at: [Option<(GgmlType, usize)>; MAX_PRODUCTS] = [None; MAX_PRODUCTS];
    let mut arranged_at: [Option<(GgmlType, Arrange, usize)>; MAX_PRODUCTS] = [None; MAX_PRODUCTS];
    let mut acts_of: [Option<(usize, usize, Option<usize>)>; MAX_PRODUCTS] = [None; MAX_PRODUCTS];
    let mut used = 0usize;
    for (i, p) in products.iter().enumerate() {
        let k = ks[i].ok_or(QuantError::Unsupported { ty: p.ty })?;
        let Some(act) = act_type(k.dot) else {
            continue;
        };
        let act_row = row_bytes(act, cols)?;
        let bytes = act_row * n;
        let parallel_rows = n >= 8 && bytes >= PARALLEL_MIN_BYTES / 4;
        let len = scratch.len();
        let take = |used: &mut usize| {
            let start = *used;
            let end = start.checked_add(bytes).filter(|&e| e <= len);
            *used = end.ok_or(QuantError::ByteLength {
                ty: act,
                expected: start.saturating_add(bytes),
                got: len,
            })?;
            Ok::<usize, QuantError>(start)
        };
        let base = match quantized_at.iter().flatten().find(|(a, _)| *a == act) {
            Some(&(_, off)) => off,
            None => {
                let off = take(&mut used)?;
                let quantize = kernels(act)?.quantize;
                let region = &mut scratch[off..off + bytes];
                if parallel_rows {
                    parallel::for_each_chunk_mut(region, act_row, |t, dst| {
                        quantize(&x[t * cols..(t + 1) * cols], dst)
                    });
                } else {
                    for (dst, src) in region.chunks_exact_mut(act_row).zip(x.chunks_exact(cols)) {
                        quantize(src, dst);
                    }
                }
                quantized_at[i] = Some((act, off));
                off
            }
        };
        acts_of[i] = Some((act_row, base, None));
        let Some(arrange) = arrangement(k, n, per_token) else {
            continue;
        };
        let known = arranged_at
            .iter()
            .flatten()
            .find(|&&(a, f, _)| a == act && std::ptr::fn_addr_eq(f, arrange));
        if let Some(&(_, _, at)) = known {
            acts_of[i] = Some((act_row, base, Some(at)));
            continue;
        }
        // Aligned rows, from an aligned start (the scratch sizes count both).
        let stride = arranged_stride(act_row);
        let start = scratch.as_ptr() as usize + used;
        used += start.next_multiple_of(ARRANGED_ALIGN) - start;
        let off = used;
        let end =
            off.checked_add(stride * n)
                .filter(|&e| e <= len)
                .ok_or(QuantError::ByteLength {
                    ty: act,
                    expected: off.saturating_add(stride * n),
                    got: len,
                })?;
        used = end;
        let (done, rest) = scratch.split_at_mut(off);
        let (region, dst) = (&done[base..base + bytes], &mut rest[..stride * n]);
        if parallel_rows {
            parallel::for_each_chunk_mut(dst, stride, |t, dst| {
                arrange(&region[t * act_row..(t + 1) * act_row], &mut dst[..act_row])
            });
        } else {
            for (dst, src) in dst
                .chunks_exact_mut(stride)
                .zip(region.chunks_exact(act_row))
            {
                arrange(src, &mut dst[..act_row]);
            }
        }
        arranged_at[i] = Some((act, arrange, off));
        acts_of[i] = Some((act_row, base, Some(off)));
    }
    let scratch: &[u8] = scratch;

    let mut prepared: [Option<Prepared<'_>>; MAX_PRODUCTS] = [None; MAX_PRODUCTS];
    let mut total_bytes = 0usize;
    for (i, p) in products.iter_mut().enumerate() {
        let k = ks[i].ok_or(QuantError::Unsupported { ty: p.ty })?;
        let (acts, arranged) = match acts_of[i] {
            None => (Acts::Float(x), None),
            Some((act_row, off, arranged)) => {
                let arranged = arranged.map(|at| {
                    let stride = arranged_stride(act_row);
                    QuantRows {
                        buf: &scratch[at..at + stride * n],
                        row: act_row,
                        stride,
                    }
                });
                let quantized = match k.arranged_acts {
                    Some(_) => arranged.expect("arranged for a kernel reading them so"),
                    None => QuantRows {
                        buf: &scratch[off..off + act_row * n],
                        row: act_row,
                        stride: act_row,
                    },
                };
                (Acts::Quant(quantized), arranged)
            }
        };
        if p.rows == 0 {
            continue;
        }
        let row = rows_bytes[i];
        total_bytes = total_bytes.saturating_add(p.weights.len());
        prepared[i] = Some(Prepared {
            dot: k.dot,
            tile: k.tile,
            rows_kernel: k.rows,
            weights: p.weights,
            row,
            rows: p.rows,
            chunk_rows: chunk_rows(
                row,
                p.rows,
                k.rows.is_some() || k.tile.is_some_and(is_multi_row),
            ),
            acts,
            arranged,
            y: OutPtr(p.y.as_mut_ptr()),
            per_token,
            exact_tile: per_token && crate::simd::tile_is_exact(crate::isa::active(), p.ty),
        });
    }

    // Work items: product 0's row chunks, then product 1's, ...
    let mut first_item = [0usize; MAX_PRODUCTS + 1];
    for i in 0..MAX_PRODUCTS {
        first_item[i + 1] = first_item[i] + prepared[i].map_or(0, |p| p.items());
    }
    let total_items = first_item[MAX_PRODUCTS];
    let run = |item: usize| {
        let i = first_item.partition_point(|&f| f <= item) - 1;
        let p = prepared[i]
            .as_ref()
            .expect("items only of prepared products");
        run_item(p, cols, n, item - first_item[i]);
    };
    if total_bytes.saturating_mul(n) < PARALLEL_MIN_BYTES || total_items < 2 {
        (0..total_items).for_each(run);
    } else {
        parallel::for_each(total_items, run);
    }
    Ok(())
}

/// Weight rows per work item: about [`CHUNK_BYTES`] of weights, a multiple of [`ROWS`] (and
/// so of [`TILE_ROWS`]) when the type has a [`Rows`] kernel or a multi-row tile (so items
/// split no group but the matrix's last).
fn chunk_rows(row_bytes: usize, rows: usize, grouped: bool) -> usize {
    const _: () = assert!(ROWS.is_multiple_of(TILE_ROWS));
    let chunk = (CHUNK_BYTES / row_bytes.max(1)).max(1);
    let chunk = if grouped {
        (chunk / ROWS).max(1) * ROWS
    } else {
        chunk
    };
    chunk.min(rows).max(1)
}

/// Rows `item * chunk_rows ..` of one product, for every token.
fn run_item(p: &Prepared<'_>, cols: usize, n: usize, item: usize) {
    let o0 = item * p.chunk_rows;
    let o1 = (o0 + p.chunk_rows).min(p.rows);
    let write = |t: usize, o: usize, v: f32| {
        debug_assert!(o0 <= o && o < o1 && t < n);
        // SAFETY: `o` is in this item's rows `o0..o1` (items own disjoint row ranges of
        // their product, and products own distinct `y` slices), `t < n` and
        // `y.len() == rows * n` was checked, so the write is in bounds and no other item
        // writes this element.
        unsafe { *p.y.0.add(t * p.rows + o) = v };
    };
    let weight_row = |o: usize| &p.weights[o * p.row..(o + 1) * p.row];
    // Unpacking pays for itself only over several tiles of tokens (an expert's few tokens
    // run as single tokens instead).
    let few_for_unpacking = matches!(p.tile, Some(Tile::Unpacked(_))) && n < UNPACKED_MIN_TOKENS;
    if n == 1 || p.per_token || few_for_unpacking {
        let mut t0 = 0;
        match (p.exact_tile, p.tile) {
            (true, Some(tile @ Tile::Quant(_))) => {
                while t0 + TILE <= n {
                    for o in o0..o1 {
                        let out = dot_tile(tile, p.acts, weight_row(o), t0);
                        for (k, v) in out.into_iter().enumerate() {
                            write(t0 + k, o, v);
                        }
                    }
                    t0 += TILE;
                }
            }
            // An exact multi-row tile (aarch64's); rows that fill no group run per token.
            (true, Some(tile @ Tile::QuantRows(_))) => {
                while t0 + TILE <= n {
                    let mut o = o0;
                    while o + TILE_ROWS <= o1 {
                        let w = &p.weights[o * p.row..(o + TILE_ROWS) * p.row];
                        for (r, out) in dot_rows_tile(tile, p.acts, cols, w, t0)
                            .into_iter()
                            .enumerate()
                        {
                            for (k, v) in out.into_iter().enumerate() {
                                write(t0 + k, o + r, v);
                            }
                        }
                        o += TILE_ROWS;
                    }
                    for o in o..o1 {
                        for t in t0..t0 + TILE {
                            write(t, o, dot_token(p.dot, p.acts, cols, weight_row(o), t));
                        }
                    }
                    t0 += TILE;
                }
            }
            _ => {}
        }
        // The item's weight rows stay in cache while each token visits them.
        for t in t0..n {
            let mut o = o0;
            if let (Some(rows), Acts::Quant(acts)) = (p.rows_kernel, p.acts) {
                let act = acts.token(t);
                while o + ROWS <= o1 {
                    let out = rows(&p.weights[o * p.row..(o + ROWS) * p.row], act);
                    for (k, v) in out.into_iter().enumerate() {
                        write(t, o + k, v);
                    }
                    o += ROWS;
                }
            }
            for o in o..o1 {
                write(t, o, dot_token(p.dot, p.acts, cols, weight_row(o), t));
            }
        }
        return;
    }
    if let Some(Tile::Unpacked(u)) = p.tile {
        run_unpacked(p, u, n, o0..o1, &write);
        return;
    }
    // Token blocks sized to stay in L1; every weight row of the item visits each block.
    let act_row = match p.acts {
        Acts::Float(_) => cols * 4,
        Acts::Quant(acts) => acts.row,
    };
    let block = (TOKEN_BLOCK_BYTES / act_row.max(1) / TILE * TILE).max(TILE);
    let mut t0 = 0;
    while t0 < n {
        let t1 = (t0 + block).min(n);
        let mut o = o0;
        if let Some(tile) = p.tile.filter(|&t| is_multi_row(t)) {
            while o + TILE_ROWS <= o1 {
                let w = &p.weights[o * p.row..(o + TILE_ROWS) * p.row];
                let mut t = t0;
                while t + TILE <= t1 {
                    for (r, out) in dot_rows_tile(tile, p.acts, cols, w, t)
                        .into_iter()
                        .enumerate()
                    {
                        for (k, v) in out.into_iter().enumerate() {
                            write(t + k, o + r, v);
                        }
                    }
                    t += TILE;
                }
                for t in t..t1 {
                    for r in o..o + TILE_ROWS {
                        write(t, r, dot_token(p.dot, p.acts, cols, weight_row(r), t));
                    }
                }
                o += TILE_ROWS;
            }
        }
        for o in o..o1 {
            let w = weight_row(o);
            let mut t = t0;
            // Left-over rows of a multi-row tile run per token.
            if let Some(tile) = p.tile.filter(|&t| !is_multi_row(t)) {
                while t + TILE <= t1 {
                    let out = dot_tile(tile, p.acts, w, t);
                    for (k, v) in out.into_iter().enumerate() {
                        write(t + k, o, v);
                    }
                    t += TILE;
                }
            }
            for t in t..t1 {
                write(t, o, dot_token(p.dot, p.acts, cols, w, t));
            }
        }
        t0 = t1;
    }
}

/// Rows `rows` of one product through its [`Tile::Unpacked`] kernel, in groups of
/// [`unpacked_group`] rows, [`TILE`] tokens and [`UNPACKED_ROWS`] rows a call (a group's last
/// row, if it fills no call, with a copy of itself), a last tile short of tokens with its last
/// token repeated; the activations as the kernel's [`Unpack::arrange`] wrote them where it has
/// one. Where the item's rows unpack to at most [`UNPACKED_ITEM_BYTES`] they are unpacked once
/// and the tokens visit them a block of [`UNPACKED_L2_BYTES`] of activations at a time (each
/// block stays in L2 while every group reads it), so a long batch costs one unpacking; wider
/// rows are unpacked a group at a time, every token visiting each group.
fn run_unpacked(
    p: &Prepared<'_>,
    u: Unpack,
    n: usize,
    rows: std::ops::Range<usize>,
    write: &impl Fn(usize, usize, f32),
) {
    let Acts::Quant(quantized) = p.acts else {
        unreachable!("an unpacked tile belongs to a block format")
    };
    let act_row = quantized.row;
    let urow = u.row_bytes(p.row);
    let group = unpacked_group(urow, act_row);
    let weight_row = |o: usize| &p.weights[o * p.row..(o + 1) * p.row];
    // Group `k` of a unit starting at group `first`: rows `g0..g1`, unpacked (whole calls)
    // into bytes `at..at + bytes` of the unit (`group` is a whole number of calls).
    let n_groups = rows.len().div_ceil(group);
    let group_at = |k: usize, first: usize| {
        let g0 = rows.start + k * group;
        let g1 = (g0 + group).min(rows.end);
        let bytes = (g1 - g0).div_ceil(UNPACKED_ROWS) * UNPACKED_ROWS * urow;
        (g0, g1, (k - first) * group * urow, bytes)
    };
    let item_bytes = (0..n_groups).map(|k| group_at(k, 0).3).sum::<usize>();
    let whole_item = item_bytes <= UNPACKED_ITEM_BYTES;
    let (unit_groups, token_block) = if whole_item {
        let block = (UNPACKED_L2_BYTES / quantized.stride.max(1) / TILE * TILE).max(TILE);
        (n_groups, block)
    } else {
        (1, n)
    };
    let acts = match u.arrange {
        Some(_) => p
            .arranged
            .expect("activations arranged for an arranging tile"),
        None => quantized,
    };
    UNPACKED.with_borrow_mut(|unpacked| {
        for first in (0..n_groups).step_by(unit_groups) {
            let unit = first..(first + unit_groups).min(n_groups);
            let need = unit.clone().map(|k| group_at(k, first).3).sum::<usize>();
            if unpacked.len() < need {
                unpacked.resize(need, 0);
            }
            for k in unit.clone() {
                let (g0, g1, at, bytes) = group_at(k, first);
                let held = &mut unpacked[at..at + bytes];
                for (o, out) in (g0..g1).zip(held.chunks_exact_mut(urow)) {
                    (u.unpack)(weight_row(o), out);
                }
                for j in g1 - g0..bytes / urow {
                    held.copy_within((j - 1) * urow..j * urow, j * urow);
                }
            }
            for t0 in (0..n).step_by(token_block) {
                let t1 = (t0 + token_block).min(n);
                for k in unit.clone() {
                    let (g0, g1, at, bytes) = group_at(k, first);
                    let held = &unpacked[at..at + bytes];
                    // A last, short tile repeats its last token; only the real tokens are
                    // written.
                    for t in (t0..t1).step_by(TILE) {
                        let a = std::array::from_fn(|j| acts.token((t + j).min(n - 1)));
                        let tokens = TILE.min(n - t);
                        for (c, ur) in held.chunks_exact(UNPACKED_ROWS * urow).enumerate() {
                            for (r, out) in (u.tile)(ur, a).into_iter().enumerate() {
                                let o = g0 + c * UNPACKED_ROWS + r;
                                if o < g1 {
                                    for (j, &v) in out[..tokens].iter().enumerate() {
                                        write(t + j, o, v);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    });
}

/// Rows of `urow` unpacked bytes a thread unpacks at once: a whole number of
/// [`UNPACKED_ROWS`] calls, as many as fit [`UNPACKED_L1_BYTES`] beside a [`TILE`] of
/// activation rows of `act_row` bytes, at least one call.
fn unpacked_group(urow: usize, act_row: usize) -> usize {
    let room = UNPACKED_L1_BYTES.saturating_sub(TILE * act_row);
    (room / urow.max(1) / UNPACKED_ROWS).max(1) * UNPACKED_ROWS
}

/// The dot of weight row `row` with token `t`'s activations.
#[inline]
fn dot_token(dot: Dot, acts: Acts<'_>, cols: usize, row: &[u8], t: usize) -> f32 {
    match (dot, acts) {
        (Dot::Float(f), Acts::Float(x)) => f(row, &x[t * cols..(t + 1) * cols]),
        (Dot::Quant { vec_dot, .. }, Acts::Quant(acts)) => vec_dot(row, acts.token(t)),
        _ => unreachable!("activations are built from the same Dot"),
    }
}

/// Whether a tile kernel takes [`TILE_ROWS`] weight rows at once.
fn is_multi_row(tile: Tile) -> bool {
    matches!(tile, Tile::QuantRows(_) | Tile::FloatRows(_))
}

/// The dots of the [`TILE_ROWS`] weight rows `w` (back to back) with tokens `t .. t + TILE`.
#[inline]
fn dot_rows_tile(
    tile: Tile,
    acts: Acts<'_>,
    cols: usize,
    w: &[u8],
    t: usize,
) -> [[f32; TILE]; TILE_ROWS] {
    match (tile, acts) {
        (Tile::FloatRows(f), Acts::Float(x)) => f(
            w,
            std::array::from_fn(|k| &x[(t + k) * cols..(t + k + 1) * cols]),
        ),
        (Tile::QuantRows(f), Acts::Quant(acts)) => f(w, std::array::from_fn(|k| acts.token(t + k))),
        _ => unreachable!("a type's multi-row tile kernel matches its dot kernel"),
    }
}

/// The dots of weight row `row` with tokens `t .. t + TILE`.
#[inline]
fn dot_tile(tile: Tile, acts: Acts<'_>, row: &[u8], t: usize) -> [f32; TILE] {
    match (tile, acts) {
        (Tile::Quant(f), Acts::Quant(acts)) => f(row, std::array::from_fn(|k| acts.token(t + k))),
        _ => unreachable!("a type's one-row tile kernel matches its dot kernel"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::scalar_kernels;
    use crate::{float, formats};

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn supported() -> Vec<GgmlType> {
        GgmlType::all().filter(|t| kernels(*t).is_ok()).collect()
    }

    /// A tile kernel that is `TILE` calls of the type's scalar dot: exercises the driver's
    /// tile indexing on every type, whether or not a fast tile exists yet.
    fn per_token_tile(ty: GgmlType) -> Tile {
        macro_rules! quant {
            ($(($t:ident, $m:ident)),* $(,)?) => {
                match ty {
                    $(GgmlType::$t => Tile::Quant(|w, a| {
                        std::array::from_fn(|k| formats::$m::vec_dot(w, a[k]))
                    }),)*
                    GgmlType::F32 => Tile::FloatRows(|w, x| {
                        let rb = w.len() / TILE_ROWS;
                        std::array::from_fn(|r| {
                            std::array::from_fn(|k| float::dot_f32(&w[r * rb..(r + 1) * rb], x[k]))
                        })
                    }),
                    GgmlType::F16 => Tile::FloatRows(|w, x| {
                        let rb = w.len() / TILE_ROWS;
                        std::array::from_fn(|r| {
                            std::array::from_fn(|k| float::dot_f16(&w[r * rb..(r + 1) * rb], x[k]))
                        })
                    }),
                    GgmlType::BF16 => Tile::FloatRows(|w, x| {
                        let rb = w.len() / TILE_ROWS;
                        std::array::from_fn(|r| {
                            std::array::from_fn(|k| float::dot_bf16(&w[r * rb..(r + 1) * rb], x[k]))
                        })
                    }),
                    _ => panic!("no test tile for {ty}"),
                }
            };
        }
        formats::for_each_format!(quant)
    }

    /// A multi-row tile that is `TILE_ROWS * TILE` calls of the type's scalar dot: exercises
    /// the driver's row-group indexing (and its left-over rows) on every block type.
    fn per_pair_tile(ty: GgmlType) -> Option<Tile> {
        macro_rules! quant {
            ($(($t:ident, $m:ident)),* $(,)?) => {
                match ty {
                    $(GgmlType::$t => Some(Tile::QuantRows(|w: &[u8], a: [&[u8]; TILE]| {
                        let rb = w.len() / TILE_ROWS;
                        std::array::from_fn(|r| {
                            std::array::from_fn(|t| formats::$m::vec_dot(&w[r * rb..(r + 1) * rb], a[t]))
                        })
                    })),)*
                    _ => None,
                }
            };
        }
        formats::for_each_format!(quant)
    }

    /// An unpacked tile that is `UNPACKED_ROWS * TILE` calls of the type's scalar dot, each
    /// unpacked block the packed one and padding (so a few rows fill [`UNPACKED_L1_BYTES`] and an
    /// item's rows run in several groups, unpacked a group at a time): exercises the driver's
    /// unpacked path on every block type.
    fn per_token_unpacked_tile(ty: GgmlType) -> Option<Tile> {
        padded_unpacked_tile::<40_000>(ty)
    }

    /// [`per_token_unpacked_tile`] with `PAD` bytes after each block.
    fn padded_unpacked_tile<const PAD: usize>(ty: GgmlType) -> Option<Tile> {
        macro_rules! quant {
            ($(($t:ident, $m:ident)),* $(,)?) => {
                match ty {
                    $(GgmlType::$t => Some(Tile::Unpacked(Unpack {
                        packed_block_bytes: formats::$m::BYTES,
                        block_bytes: formats::$m::BYTES + PAD,
                        unpack: |w, out| {
                            let unpacked = out.chunks_exact_mut(formats::$m::BYTES + PAD);
                            for (b, u) in w.chunks_exact(formats::$m::BYTES).zip(unpacked) {
                                u[..formats::$m::BYTES].copy_from_slice(b);
                            }
                        },
                        // Every activation byte inverted, and back in `tile`: a driver
                        // that skipped or misplaced the arranged rows gives wrong sums.
                        arrange: Some(|a, out| {
                            for (o, &b) in out.iter_mut().zip(a) {
                                *o = !b;
                            }
                        }),
                        tile: |u, a| {
                            let a: [Vec<u8>; TILE] =
                                std::array::from_fn(|k| a[k].iter().map(|b| !b).collect());
                            let w: Vec<u8> = u
                                .chunks_exact(formats::$m::BYTES + PAD)
                                .flat_map(|b| b[..formats::$m::BYTES].iter().copied())
                                .collect();
                            let rb = w.len() / UNPACKED_ROWS;
                            std::array::from_fn(|r| {
                                std::array::from_fn(|k| formats::$m::vec_dot(&w[r * rb..(r + 1) * rb], &a[k]))
                            })
                        },
                    })),)*
                    _ => None,
                }
            };
        }
        formats::for_each_format!(quant)
    }

    /// A rows kernel that is `ROWS` calls of the type's scalar dot: exercises the driver's
    /// row grouping on every block type, whether or not a fast one exists yet.
    fn per_row_rows(ty: GgmlType) -> Option<Rows> {
        macro_rules! quant {
            ($(($t:ident, $m:ident)),* $(,)?) => {
                match ty {
                    $(GgmlType::$t => Some(|w: &[u8], a: &[u8]| {
                        let rb = w.len() / ROWS;
                        std::array::from_fn(|k| formats::$m::vec_dot(&w[k * rb..(k + 1) * rb], a))
                    }),)*
                    _ => None,
                }
            };
        }
        formats::for_each_format!(quant)
    }

    /// `base`'s kernels with the tile and rows kernels replaced.
    fn with_tile(base: &Kernels, tile: Option<Tile>, rows: Option<Rows>) -> Kernels {
        Kernels {
            dequantize: base.dequantize,
            quantize: base.quantize,
            dot: base.dot,
            tile,
            rows,
            arranged_acts: base.arranged_acts,
        }
    }

    /// One product through `run_group` with kernels `k`.
    fn product_with(
        k: &Kernels,
        ty: GgmlType,
        w: &[u8],
        rows: usize,
        cols: usize,
        x: &[f32],
        n: usize,
    ) -> Vec<f32> {
        let mut y = vec![f32::NAN; rows * n];
        let ks = [Some(k), None, None, None];
        let mut scratch = vec![0u8; group_scratch_bytes(&[ty], &ks, cols, n).unwrap()];
        let mut p = [Product {
            ty,
            layout: Layout::Gguf,
            weights: w,
            rows,
            y: &mut y,
        }];
        run_group(&mut p, &ks, cols, x, n, &mut scratch, false).unwrap();
        y
    }

    fn quantized(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let w = random(rows * cols, seed);
        let mut wq = vec![0u8; ty.row_size(rows * cols).unwrap()];
        (kernels(ty).unwrap().quantize)(&w, &mut wq);
        let mut wd = vec![0f32; rows * cols];
        (kernels(ty).unwrap().dequantize)(&wq, &mut wd);
        (wq, wd)
    }

    #[test]
    fn per_token_matmul_equals_matvec_of_each_token_bit_for_bit() {
        let pool = crate::parallel::WorkerPool::new(3).unwrap();
        let rows = 67;
        for ty in supported() {
            let cols = 2 * ty.block_size().max(256);
            let (wq, _) = quantized(ty, rows, cols, 3);
            for n in [1, 2, 4, 7] {
                let x = random(n * cols, 11 + n as u64);
                let mut got = vec![f32::NAN; rows * n];
                pool.install(|| {
                    matmul_per_token(ty, Layout::Gguf, &wq, rows, cols, &x, n, &mut got)
                })
                .unwrap();
                for t in 0..n {
                    let mut want = vec![0f32; rows];
                    let xt = &x[t * cols..(t + 1) * cols];
                    pool.install(|| matvec(ty, &wq, rows, cols, xt, &mut want))
                        .unwrap();
                    assert_eq!(
                        &got[t * rows..(t + 1) * rows],
                        &want[..],
                        "{ty} n={n} t={t}"
                    );
                }
            }
        }
    }

    #[test]
    fn matmul_equals_per_token_matvec_for_odd_batches_with_and_without_tiles() {
        let pool = crate::parallel::WorkerPool::new(3).unwrap();
        let rows = 67;
        for ty in supported() {
            let cols = 2 * ty.block_size().max(256);
            let (wq, wd) = quantized(ty, rows, cols, 1);
            let (active, scalar) = (kernels(ty).unwrap(), scalar_kernels(ty).unwrap());
            // (what, kernels, whether they must equal the active or the scalar dot exactly)
            let mut variants = vec![
                (
                    "active kernels",
                    with_tile(active, active.tile, active.rows),
                    None,
                ),
                ("no tile", with_tile(active, None, active.rows), Some(true)),
                // Rows kernels equal their dots bit for bit.
                ("no rows", with_tile(active, active.tile, None), Some(true)),
                (
                    "scalar per-token tile and per-row rows",
                    with_tile(scalar, Some(per_token_tile(ty)), per_row_rows(ty)),
                    Some(false),
                ),
            ];
            if let Some(tile) = per_pair_tile(ty) {
                variants.push((
                    "scalar per-pair multi-row tile",
                    with_tile(scalar, Some(tile), per_row_rows(ty)),
                    Some(false),
                ));
            }
            if let Some(tile) = per_token_unpacked_tile(ty) {
                variants.push((
                    "scalar per-token unpacked tile",
                    with_tile(scalar, Some(tile), per_row_rows(ty)),
                    Some(false),
                ));
            }
            let scalar_no_tile = with_tile(scalar, None, None);
            for n in [1, 3, 4, 5, 9, 11, 64] {
                let x = random(n * cols, 2 + n as u64);
                // The reference: one public matvec per token.
                let mut want = vec![0f32; rows * n];
                for t in 0..n {
                    let xt = &x[t * cols..(t + 1) * cols];
                    let yt = &mut want[t * rows..(t + 1) * rows];
                    pool.install(|| matvec(ty, &wq, rows, cols, xt, yt))
                        .unwrap();
                }
                // The scalar reference, token by token.
                let mut want_scalar = vec![0f32; rows * n];
                for t in 0..n {
                    let xt = &x[t * cols..(t + 1) * cols];
                    let yt = product_with(&scalar_no_tile, ty, &wq, rows, cols, xt, 1);
                    want_scalar[t * rows..(t + 1) * rows].copy_from_slice(&yt);
                }
                for (what, k, exact) in &variants {
                    // A multi-row tile sums in another order than the dot it replaces.
                    let multi_row = matches!(k.tile, Some(Tile::QuantRows(_)));
                    let exact = match exact {
                        Some(true) if n > 1 && multi_row => &None,
                        e => e,
                    };
                    let got = pool.install(|| product_with(k, ty, &wq, rows, cols, &x, n));
                    for t in 0..n {
                        for o in 0..rows {
                            let (g, e) = (got[t * rows + o], want[t * rows + o]);
                            // Tiles may sum in another order: 1e-5 of sum |w x|.
                            let mag: f32 = wd[o * cols..(o + 1) * cols]
                                .iter()
                                .zip(&x[t * cols..(t + 1) * cols])
                                .map(|(a, b)| (a * b).abs())
                                .sum();
                            assert!(
                                (g - e).abs() <= 1e-5 * mag + 1e-6,
                                "{ty} {what} n={n} t={t} o={o}: {g} vs {e}"
                            );
                            match exact {
                                Some(true) => assert_eq!(g, e, "{ty} {what} n={n} t={t} o={o}"),
                                Some(false) => assert_eq!(
                                    g,
                                    want_scalar[t * rows + o],
                                    "{ty} {what} n={n} t={t} o={o}"
                                ),
                                None => {}
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fused_products_equal_separate_ones_across_activation_types() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let cols = 512;
        // Three activation types (Q8_1, Q8_0, Q8_K, the last for two K-quants whose tiles both
        // read it arranged) and a float type, six products: two groups.
        let types = [
            (GgmlType::Q4_1, 70),
            (GgmlType::Q4_K, 129),
            (GgmlType::Q6_K, 40),
            (GgmlType::Q8_0, 33),
            (GgmlType::F16, 5),
            (GgmlType::Q5_0, 64),
        ];
        let tys: Vec<GgmlType> = types.iter().map(|t| t.0).collect();
        for n in [1, 6, 9] {
            let x = random(n * cols, 9);
            let ws: Vec<Vec<u8>> = types
                .iter()
                .enumerate()
                .map(|(i, &(ty, rows))| quantized(ty, rows, cols, 20 + i as u64).0)
                .collect();
            let mut ys: Vec<Vec<f32>> = types.iter().map(|&(_, r)| vec![0f32; r * n]).collect();
            let need = activation_scratch_bytes(&tys, cols, n).unwrap();
            let mut products: Vec<Product<'_>> = types
                .iter()
                .zip(&ws)
                .zip(ys.iter_mut())
                .map(|((&(ty, rows), w), y)| Product {
                    ty,
                    layout: Layout::Gguf,
                    weights: w,
                    rows,
                    y,
                })
                .collect();
            // Too little scratch is a typed error, not a panic (`need` also counts an arranged
            // copy these file-layout products may not use: half of it is short either way).
            let mut small = vec![0u8; need / 2];
            assert!(matches!(
                matmul_many_in(&mut products, cols, &x, n, &mut small, false),
                Err(QuantError::ByteLength { .. })
            ));
            let mut scratch = vec![0u8; need];
            pool.install(|| matmul_many_in(&mut products, cols, &x, n, &mut scratch, false))
                .unwrap();
            drop(products);
            for (((ty, rows), w), y) in types.iter().zip(&ws).zip(&ys) {
                let mut want = vec![0f32; rows * n];
                matmul(*ty, w, *rows, cols, &x, n, &mut want).unwrap();
                assert_eq!(y, &want, "{ty} n={n}");
            }
        }
    }

    /// Wide rows (10240 columns, so a few rows make an item and a 256 KiB token block holds
    /// ~20 tokens) through the unpacked path: an item unpacked once and visited by several token
    /// blocks, each by several groups (the last padded with a copy of its last row), gives each
    /// token's own dots: bit for bit where the tile is exact, else within 1e-5 of sum |w x|;
    /// for every type with a fast unpacked tile, and through a scalar unpacked tile (unpadded:
    /// whole items; padded: a group at a time) for one without.
    #[test]
    fn wide_rows_unpacked_once_in_token_blocks_equal_each_tokens_dots() {
        let pool = crate::parallel::WorkerPool::new(2).unwrap();
        let (rows, cols, n) = (19, 40 * 256, 67);
        let row = GgmlType::Q8_K.row_size(cols).unwrap();
        let item_tokens = UNPACKED_L2_BYTES / arranged_stride(row);
        assert!(item_tokens * 2 < n, "several token blocks: {item_tokens}");
        // (type, kernels, whether they are the type's fast ones)
        let mut cases: Vec<(GgmlType, Kernels, bool)> = supported()
            .into_iter()
            .filter(|&ty| matches!(kernels(ty).unwrap().tile, Some(Tile::Unpacked(_))))
            .map(|ty| {
                let fast = kernels(ty).unwrap();
                (ty, with_tile(fast, fast.tile, None), true)
            })
            .collect();
        let q4_0 = scalar_kernels(GgmlType::Q4_0).unwrap();
        for tile in [
            padded_unpacked_tile::<0>(GgmlType::Q4_0),
            per_token_unpacked_tile(GgmlType::Q4_0),
        ] {
            cases.push((GgmlType::Q4_0, with_tile(q4_0, tile, None), false));
        }
        let x = random(n * cols, 91);
        for (ty, k, fast) in &cases {
            let (wq, wd) = quantized(*ty, rows, cols, 92);
            let got = pool.install(|| product_with(k, *ty, &wq, rows, cols, &x, n));
            let exact = *fast && crate::simd::tile_is_exact(crate::isa::active(), *ty);
            for t in 0..n {
                let xt = &x[t * cols..(t + 1) * cols];
                let mut want = vec![0f32; rows];
                pool.install(|| matvec(*ty, &wq, rows, cols, xt, &mut want))
                    .unwrap();
                for o in 0..rows {
                    let (g, e) = (got[t * rows + o], want[o]);
                    if exact {
                        assert_eq!(g.to_bits(), e.to_bits(), "{ty} t={t} o={o}: {g} vs {e}");
                    }
                    let mag: f32 = wd[o * cols..(o + 1) * cols]
                        .iter()
                        .zip(xt)
                        .map(|(a, b)| (a * b).abs())
                        .sum();
                    assert!(
                        (g - e).abs() <= 1e-5 * mag + 1e-6,
                        "{ty} t={t} o={o}: {g} vs {e}"
                    );
                }
            }
        }
    }

    /// Products that read one activation type arranged in different ways, fused in one
    /// group: a codebook format whose tile reads the activations offset (IQ2_XXS), one that
    /// reads them folded (IQ1_S), a resident K-quant that reads its own arrangement (Q4_K
    /// arranged where the CPU has that layout, in octs), and Q6_K, whose tile reads them in
    /// pairs. Each gets its own arranged copy (four here, and the quantized one: the scratch
    /// size counts them) and returns bit for bit what it does alone, on every batch size.
    #[test]
    fn fused_products_each_read_their_own_arrangement() {
        let cols = 512;
        let pool = crate::parallel::WorkerPool::new(2).unwrap();
        let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let types = [
            (GgmlType::IQ2_XXS, 19),
            (GgmlType::IQ1_S, 26),
            (GgmlType::Q4_K, 23),
            (GgmlType::Q6_K, 9),
        ];
        let tys: Vec<GgmlType> = types.iter().map(|t| t.0).collect();
        let ws: Vec<(Vec<u8>, Layout)> = types
            .iter()
            .enumerate()
            .map(|(i, &(ty, rows))| {
                let (mut w, _) = quantized(ty, rows, cols, 70 + i as u64);
                let layout = match ty {
                    GgmlType::Q4_K => crate::arrange_rows(ty, &mut w).unwrap(),
                    _ => Layout::Gguf,
                };
                (w, layout)
            })
            .collect();
        let arranging = cfg!(target_arch = "x86_64") && ws[2].1 == Layout::Arranged;
        for n in [1, 8, 9, 21] {
            let x = random(n * cols, 80 + n as u64);
            let need = activation_scratch_bytes(&tys, cols, n).unwrap();
            let q8k = GgmlType::Q8_K.row_size(cols).unwrap() * n;
            if arranging && n >= UNPACKED_MIN_TOKENS {
                let row = GgmlType::Q8_K.row_size(cols).unwrap();
                let arranged = arranged_stride(row) * n + ARRANGED_ALIGN;
                assert_eq!(
                    need,
                    q8k + 4 * arranged,
                    "n={n}: the quantized copy and four arrangements, aligned"
                );
            }
            let mut ys: Vec<Vec<f32>> = types.iter().map(|&(_, r)| vec![f32::NAN; r * n]).collect();
            let mut products: Vec<Product<'_>> = types
                .iter()
                .zip(&ws)
                .zip(ys.iter_mut())
                .map(|((&(ty, rows), (w, layout)), y)| Product {
                    ty,
                    layout: *layout,
                    weights: w,
                    rows,
                    y,
                })
                .collect();
            let mut scratch = vec![0u8; need];
            pool.install(|| matmul_many_in(&mut products, cols, &x, n, &mut scratch, false))
                .unwrap();
            drop(products);
            for (((ty, rows), (w, layout)), y) in types.iter().zip(&ws).zip(&ys) {
                let mut want = vec![f32::NAN; rows * n];
                let mut alone = [Product {
                    ty: *ty,
                    layout: *layout,
                    weights: w,
                    rows: *rows,
                    y: &mut want,
                }];
                let mut scratch = vec![0u8; activation_scratch_bytes(&[*ty], cols, n).unwrap()];
                pool.install(|| matmul_many_in(&mut alone, cols, &x, n, &mut scratch, false))
                    .unwrap();
                assert_eq!(bits(y), bits(&want), "{ty} n={n}");
            }
        }
    }

    /// Q4_K and Q6_K weights held in the arranged layout give the file layout's results bit
    /// for bit, alone and fused with a product in the file's layout on the same activations
    /// (so one quantized and one arranged copy of them), on every path: decode rows, per-token
    /// dots and unpacked tiles; and dequantize to the same numbers.
    #[test]
    fn arranged_layout_gives_the_file_layouts_bits() {
        use crate::isa::Isa;
        let arranging = cfg!(target_arch = "x86_64")
            && matches!(
                crate::isa::active(),
                Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni
            );
        let cols = 768;
        let pool = crate::parallel::WorkerPool::new(2).unwrap();
        let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        // Each arranged type beside a product of the other type in the file's layout.
        for (ty, rows, other, other_rows) in [
            (GgmlType::Q4_K, 83, GgmlType::Q6_K, 21),
            (GgmlType::Q6_K, 37, GgmlType::Q4_K, 16),
        ] {
            let expected = if arranging {
                Layout::Arranged
            } else {
                Layout::Gguf
            };
            assert_eq!(crate::resident_layout(ty), expected, "{ty}");
            let (w, _) = quantized(ty, rows, cols, 5);
            let (wo, _) = quantized(other, other_rows, cols, 6);
            let mut wa = w.clone();
            assert_eq!(crate::arrange_rows(ty, &mut wa).unwrap(), expected);
            if expected == Layout::Gguf {
                // No arranged layout on this instruction set: the bytes stay as they were.
                assert_eq!(wa, w);
                continue;
            }
            assert_ne!(wa, w, "{ty}");
            assert!(crate::arrange_rows(ty, &mut wa[..100]).is_err());
            let (mut file, mut arranged) = (vec![0f32; rows * cols], vec![0f32; rows * cols]);
            crate::dequantize_row(ty, &w, &mut file).unwrap();
            crate::dequantize_row_laid(ty, Layout::Arranged, &wa, &mut arranged).unwrap();
            assert_eq!(file, arranged, "{ty} dequantized");
            for n in [1, 3, 8, 9, 20] {
                let x = random(n * cols, 40 + n as u64);
                let need = activation_scratch_bytes(&[ty, other], cols, n).unwrap();
                for per_token in [false, true] {
                    let run = |layout: Layout, w: &[u8]| {
                        let mut y = vec![f32::NAN; rows * n];
                        let mut yo = vec![f32::NAN; other_rows * n];
                        let mut products = [
                            Product {
                                ty,
                                layout,
                                weights: w,
                                rows,
                                y: &mut y,
                            },
                            Product {
                                ty: other,
                                layout: Layout::Gguf,
                                weights: &wo,
                                rows: other_rows,
                                y: &mut yo,
                            },
                        ];
                        let mut scratch = vec![0u8; need];
                        pool.install(|| {
                            matmul_many_in(&mut products, cols, &x, n, &mut scratch, per_token)
                        })
                        .unwrap();
                        (bits(&y), bits(&yo))
                    };
                    let want = run(Layout::Gguf, &w);
                    assert_eq!(
                        run(Layout::Arranged, &wa),
                        want,
                        "{ty} n={n} per_token={per_token}"
                    );
                }
            }
        }
    }

    #[test]
    fn empty_products_and_bad_shapes() {
        let (wq, _) = quantized(GgmlType::Q4_0, 4, 64, 3);
        let x = random(64 * 2, 4);
        let mut y = vec![0f32; 8];
        // n = 0 and rows = 0 do nothing.
        matmul(GgmlType::Q4_0, &wq, 4, 64, &x[..0], 0, &mut y[..0]).unwrap();
        matmul(GgmlType::Q4_0, &[], 0, 64, &x, 2, &mut y[..0]).unwrap();
        let e = matmul(GgmlType::Q4_0, &wq, 4, 64, &x, 2, &mut y[..7]).unwrap_err();
        assert!(
            matches!(e, QuantError::ElementLength { what: "y", .. }),
            "{e}"
        );
        let e = matmul(GgmlType::Q4_0, &wq[1..], 4, 64, &x, 2, &mut y).unwrap_err();
        assert!(matches!(e, QuantError::ByteLength { .. }), "{e}");
    }
}
