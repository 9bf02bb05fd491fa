//! The shape of one type's entry in the kernel table ([`Kernels`]: dequantize, quantize,
//! dot, and the multi-token / multi-row kernels where a fast path has them), and the tile
//! sizes the row drivers and the fast kernels agree on.

use crate::GgmlType;

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
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // aarch64 tiles are multi-row
    Quant(fn(&[u8], [&[u8]; TILE]) -> [f32; TILE]),
    /// [`TILE_ROWS`] consecutive weight rows (back to back in the first argument) times
    /// [`TILE`] tokens: `out[r][t]`. Also amortises the per-token work (activation loads and
    /// scales) over the rows; a matrix's last rows that fill no group run per token.
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    QuantRows(RowsTile),
    /// The same for float weights and f32 activations; equals `TILE_ROWS * TILE` calls of
    /// the type's `Dot` bit for bit.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    FloatRows(FloatRowsTile),
    /// A one-row tile over weight rows unpacked first ([`Unpack`]): for formats whose
    /// unpacking (codebook lookups, sign tables) costs more than the products, the driver
    /// unpacks a work item's rows once and runs every token of the batch over them.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Unpacked(Unpack),
}

/// A format's rows in an unpacked form its [`Tile::Unpacked`] kernel reads: `unpack` writes
/// `block_bytes` per weight block of `packed_block_bytes`; `tile` dots [`UNPACKED_ROWS`]
/// unpacked rows (back to back) with [`TILE`] tokens, `out[r][t]`, bit for bit what the
/// format's `Dot` returns on the packed rows. Where `arrange` is given, the tile reads each
/// token's activation row as it writes it (same length; made once per token for a work
/// item's rows), not as quantized.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Unpack {
    pub packed_block_bytes: usize,
    pub block_bytes: usize,
    pub unpack: fn(&[u8], &mut [u8]),
    pub arrange: Option<Arrange>,
    pub tile: UnpackedTile,
}

/// An [`Unpack`]'s activation row rewrite: the quantized row in, the tile's form out.
pub(crate) type Arrange = fn(&[u8], &mut [u8]);

/// An [`Unpack`] tile kernel: `out[r][t]` is unpacked row r with token t.
pub(crate) type UnpackedTile = fn(&[u8], [&[u8]; TILE]) -> [[f32; TILE]; UNPACKED_ROWS];

/// Unpacked rows a [`Tile::Unpacked`] kernel dots at once.
pub(crate) const UNPACKED_ROWS: usize = 2;

impl Unpack {
    /// Unpacked bytes of a row of `row_bytes` packed bytes.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub fn row_bytes(&self, row_bytes: usize) -> usize {
        row_bytes / self.packed_block_bytes * self.block_bytes
    }
}

/// A [`Tile::QuantRows`] kernel: `out[r][t]` is weight row r with token t.
pub(crate) type RowsTile = fn(&[u8], [&[u8]; TILE]) -> [[f32; TILE]; TILE_ROWS];

/// A [`Tile::FloatRows`] kernel: `out[r][t]` is weight row r with token t's f32 activations.
pub(crate) type FloatRowsTile = fn(&[u8], [&[f32]; TILE]) -> [[f32; TILE]; TILE_ROWS];

/// Weight rows a [`Tile::QuantRows`] kernel dots at once.
pub(crate) const TILE_ROWS: usize = 8;

/// Weight rows a [`Rows`] kernel dots with one token at once.
pub(crate) const ROWS: usize = 8;

/// The decode (single-token) kernel: [`ROWS`] consecutive weight rows, back to back in the
/// first argument (`ROWS * row_bytes` bytes), dotted with one token's quantized activation
/// row, so each activation block is loaded (and its scale converted) once for all of them.
/// Results must equal `ROWS` calls of the type's `Dot` bit for bit: which rows share a call
/// depends on how the driver splits the work and must never change a result.
pub(crate) type Rows = fn(&[u8], &[u8]) -> [f32; ROWS];

/// One type's kernels. The functions expect lengths already checked against the type
/// (whole blocks, `src.len() == ty.row_size(dst.len())`).
pub(crate) struct Kernels {
    pub dequantize: fn(&[u8], &mut [f32]),
    pub quantize: fn(&[f32], &mut [u8]),
    pub dot: Dot,
    /// The multi-token kernel, where a fast path has one (the matmul driver falls back to
    /// `dot` per token otherwise).
    pub tile: Option<Tile>,
    /// The multi-row single-token kernel, where a fast path has one (block formats only; the
    /// driver falls back to `dot` per row otherwise).
    pub rows: Option<Rows>,
    /// Where every kernel of the entry (dot, rows, tile) reads each activation row as this
    /// writes it rather than as quantized (a [`Resident`] layout's kernels): the driver
    /// arranges each row once per product group.
    pub arranged_acts: Option<Arrange>,
}

/// A format's resident layout for the fast kernels of one instruction set
/// ([`crate::Layout::Arranged`]): the same blocks, each rewritten in place (`arrange`, whole
/// blocks) so the decode kernels need fewer shuffles, and the kernels that read it. Its
/// `dequantize` and `quantize` read and write the arranged blocks.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // x86 only, so far
pub(crate) struct Resident {
    pub arrange: fn(&mut [u8]),
    pub kernels: Kernels,
}
