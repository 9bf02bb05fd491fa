//! The GGUF format's fixed numbers (magic, alignment, size limits) that the reader, the
//! tensor descriptions and the writer all check against.

/// GGUF magic bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The largest alignment the writer pads to. The reader accepts any power of two, but a larger
/// alignment only makes padding (real files use 32), up to gigabytes of zeros per tensor.
pub const MAX_WRITE_ALIGNMENT: u64 = 1 << 20;
/// Longest tensor name GGUF allows.
pub const MAX_TENSOR_NAME: u64 = 64;
/// Deepest array nesting accepted (arrays of arrays of ...).
pub const MAX_ARRAY_DEPTH: usize = 4;
/// Most dimensions a tensor may have.
pub const MAX_DIMS: u32 = 4;

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    x.checked_add(align - 1).map(|v| v / align * align)
}
