//! Tensor descriptions from the GGUF header.

use crate::error::GgufError;
use crate::limits::MAX_DIMS;
use ramforge_types::GgmlType;

/// One tensor's description.
///
/// GGML layout: `shape[0]` is the row length (the fastest-varying dimension). For a 2-D
/// weight of GGUF shape `[in, out]` there are `out` rows of `in` elements, and
/// `y[o] = sum_i W[o][i] * x[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub ggml_type: GgmlType,
    /// ggml `ne`: `shape[0]` elements per row.
    pub shape: Vec<u64>,
    /// Offset of the data relative to the start of the data section of its file.
    pub offset: u64,
    /// The shard of a split model whose data section holds the data (0 in a file of its
    /// own; see [`crate::GgufFile`]).
    pub shard: usize,
    /// Elements in the tensor.
    pub n_elements: u64,
    /// Bytes of data.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Builds a tensor info, checking 1 to 4 non-zero dimensions, that rows are whole blocks and sizes do not overflow.
    pub fn new(
        name: String,
        ggml_type: GgmlType,
        shape: Vec<u64>,
        offset: u64,
    ) -> Result<TensorInfo, GgufError> {
        TensorInfo::build(name, ggml_type, shape, offset, None)
    }

    /// `new`, with the offset of the tensor info in the header for error messages.
    pub(crate) fn build(
        name: String,
        ggml_type: GgmlType,
        shape: Vec<u64>,
        offset: u64,
        info_at: Option<u64>,
    ) -> Result<TensorInfo, GgufError> {
        let overflow = |name: &str| GgufError::SizeOverflow {
            offset: info_at,
            tensor: name.to_string(),
        };
        if shape.is_empty() || shape.len() > MAX_DIMS as usize {
            return Err(GgufError::BadDims {
                offset: info_at,
                tensor: name,
                n_dims: shape.len() as u32,
            });
        }
        if let Some(dim) = shape.iter().position(|&d| d == 0) {
            return Err(GgufError::ZeroDim {
                offset: info_at,
                tensor: name,
                dim,
                value: 0,
            });
        }
        let ne0 = shape[0];
        let bs = ggml_type.block_size() as u64;
        if !ne0.is_multiple_of(bs) {
            return Err(GgufError::RaggedRow {
                offset: info_at,
                tensor: name,
                ty: ggml_type,
                ne0,
                block_size: bs as usize,
            });
        }
        let n_elements = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| overflow(&name))?;
        let n_bytes = (n_elements / bs)
            .checked_mul(ggml_type.type_size() as u64)
            .ok_or_else(|| overflow(&name))?;
        // Keep every size representable as usize (and as ggml's signed 64-bit sizes).
        if usize::try_from(n_bytes).is_err() || i64::try_from(n_elements).is_err() {
            return Err(overflow(&name));
        }
        Ok(TensorInfo {
            name,
            ggml_type,
            shape,
            offset,
            shard: 0,
            n_elements,
            n_bytes,
        })
    }

    /// Elements per row (`shape[0]`).
    pub fn row_len(&self) -> u64 {
        self.shape.first().copied().unwrap_or(1)
    }

    /// Number of rows (product of the other dimensions).
    pub fn n_rows(&self) -> u64 {
        self.n_elements.checked_div(self.row_len()).unwrap_or(0)
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> u64 {
        self.n_bytes.checked_div(self.n_rows()).unwrap_or(0)
    }
}
