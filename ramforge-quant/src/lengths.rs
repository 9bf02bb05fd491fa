//! Length checks every entry point makes before it calls a kernel: whole blocks, and slices
//! of exactly the lengths the type and shape need, else the typed error saying why not.

use crate::{GgmlType, QuantError};

/// Bytes of a row of `n` elements of `ty`, or the error saying why there is none.
pub(crate) fn row_bytes(ty: GgmlType, n: usize) -> Result<usize, QuantError> {
    if !n.is_multiple_of(ty.block_size()) {
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
