//! The one error type of the crate; every variant renders as one line naming the type.

use crate::GgmlType;
use std::fmt;

/// Why a quantization kernel refused its input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantError {
    /// The type has no kernels here (IQ1/IQ2/IQ3, TQ*, integer types, ...).
    Unsupported { ty: GgmlType },
    /// A row length that is not a whole number of blocks.
    RaggedRow { ty: GgmlType, elements: usize },
    /// `src`/`weights` byte length does not match the element count it should hold.
    ByteLength {
        ty: GgmlType,
        expected: usize,
        got: usize,
    },
    /// An f32 buffer (`x`, `y`, `dst`, `src`) of the wrong length.
    ElementLength {
        ty: GgmlType,
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// Bytes said to be [`crate::Layout::Arranged`] for a type the active instruction set
    /// has no arranged layout of.
    NoArrangedLayout { ty: GgmlType },
    /// An instruction set was chosen that this CPU does not have.
    IsaUnavailable { isa: &'static str },
    /// `RAMFORGE_ISA` names no instruction set (`choices`: the names it may take).
    UnknownIsa {
        name: String,
        choices: Vec<&'static str>,
    },
}

impl fmt::Display for QuantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantError::Unsupported { ty } => {
                write!(f, "ggml type {ty} (id {}) is not supported", ty.id())
            }
            QuantError::RaggedRow { ty, elements } => write!(
                f,
                "{ty}: {elements} elements is not a multiple of the block size {}",
                ty.block_size()
            ),
            QuantError::ByteLength { ty, expected, got } => {
                write!(f, "{ty}: expected {expected} bytes of blocks, got {got}")
            }
            QuantError::ElementLength {
                ty,
                what,
                expected,
                got,
            } => write!(f, "{ty}: {what} has {got} elements, expected {expected}"),
            QuantError::NoArrangedLayout { ty } => write!(
                f,
                "{ty}: the active instruction set's kernels have no arranged layout of this type"
            ),
            QuantError::IsaUnavailable { isa } => {
                write!(f, "instruction set {isa} is not available on this CPU")
            }
            QuantError::UnknownIsa { name, choices } => write!(
                f,
                "{name:?} is not an instruction set (one of: {})",
                choices.join(", ")
            ),
        }
    }
}

impl std::error::Error for QuantError {}
