//! Tensor descriptions from the GGUF header.

use crate::error::GgufError;
use ramforge_quant::GgmlType;

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
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Elements in the tensor.
    pub n_elements: u64,
    /// Bytes of data.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Builds a tensor info, checking that rows are whole blocks and sizes do not overflow.
    pub fn new(
        name: String,
        ggml_type: GgmlType,
        shape: Vec<u64>,
        offset: u64,
    ) -> Result<TensorInfo, GgufError> {
        let overflow = || GgufError::SizeOverflow {
            tensor: name.clone(),
        };
        let ne0 = shape.first().copied().unwrap_or(1);
        let bs = ggml_type.block_size() as u64;
        if ne0 % bs != 0 {
            return Err(GgufError::RaggedRow {
                tensor: name,
                ty: ggml_type,
                ne0,
                block_size: bs as usize,
            });
        }
        let n_elements = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(overflow)?;
        let n_bytes = (n_elements / bs)
            .checked_mul(ggml_type.type_size() as u64)
            .ok_or_else(overflow)?;
        // Keep every size representable as usize on this platform.
        usize::try_from(n_bytes).map_err(|_| overflow())?;
        Ok(TensorInfo {
            name,
            ggml_type,
            shape,
            offset,
            n_elements,
            n_bytes,
        })
    }

    /// Elements per row (`shape[0]`).
    pub fn row_len(&self) -> u64 {
        self.shape[0]
    }

    /// Number of rows (product of the other dimensions).
    pub fn n_rows(&self) -> u64 {
        self.n_elements / self.shape[0]
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> u64 {
        self.n_bytes / self.n_rows()
    }
}
