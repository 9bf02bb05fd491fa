//! ramforge-types: the ggml tensor type table: every type id ggml has assigned, supported or not.
//!
//! Names, ids, block geometry and row sizes only, no kernels, and no dependencies: so that a
//! file format reader (`ramforge-gguf`) can describe tensors without compiling the kernels of
//! `ramforge-quant`, which re-exports [`GgmlType`].

use std::fmt;

/// A ggml tensor element type, as stored in GGUF tensor infos.
///
/// Every id ggml has ever assigned a live type is listed, so that a file holding a type we
/// cannot compute with is still described precisely (name, block geometry) before it is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
}

/// (type, ggml id, name, elements per block, bytes per block)
const TABLE: &[(GgmlType, u32, &str, usize, usize)] = &[
    (GgmlType::F32, 0, "F32", 1, 4),
    (GgmlType::F16, 1, "F16", 1, 2),
    (GgmlType::Q4_0, 2, "Q4_0", 32, 18),
    (GgmlType::Q4_1, 3, "Q4_1", 32, 20),
    (GgmlType::Q5_0, 6, "Q5_0", 32, 22),
    (GgmlType::Q5_1, 7, "Q5_1", 32, 24),
    (GgmlType::Q8_0, 8, "Q8_0", 32, 34),
    (GgmlType::Q8_1, 9, "Q8_1", 32, 36),
    (GgmlType::Q2_K, 10, "Q2_K", 256, 84),
    (GgmlType::Q3_K, 11, "Q3_K", 256, 110),
    (GgmlType::Q4_K, 12, "Q4_K", 256, 144),
    (GgmlType::Q5_K, 13, "Q5_K", 256, 176),
    (GgmlType::Q6_K, 14, "Q6_K", 256, 210),
    (GgmlType::Q8_K, 15, "Q8_K", 256, 292),
    (GgmlType::IQ2_XXS, 16, "IQ2_XXS", 256, 66),
    (GgmlType::IQ2_XS, 17, "IQ2_XS", 256, 74),
    (GgmlType::IQ3_XXS, 18, "IQ3_XXS", 256, 98),
    (GgmlType::IQ1_S, 19, "IQ1_S", 256, 50),
    (GgmlType::IQ4_NL, 20, "IQ4_NL", 32, 18),
    (GgmlType::IQ3_S, 21, "IQ3_S", 256, 110),
    (GgmlType::IQ2_S, 22, "IQ2_S", 256, 82),
    (GgmlType::IQ4_XS, 23, "IQ4_XS", 256, 136),
    (GgmlType::I8, 24, "I8", 1, 1),
    (GgmlType::I16, 25, "I16", 1, 2),
    (GgmlType::I32, 26, "I32", 1, 4),
    (GgmlType::I64, 27, "I64", 1, 8),
    (GgmlType::F64, 28, "F64", 1, 8),
    (GgmlType::IQ1_M, 29, "IQ1_M", 256, 56),
    (GgmlType::BF16, 30, "BF16", 1, 2),
    (GgmlType::TQ1_0, 34, "TQ1_0", 256, 54),
    (GgmlType::TQ2_0, 35, "TQ2_0", 256, 66),
    (GgmlType::MXFP4, 39, "MXFP4", 32, 17),
    (GgmlType::NVFP4, 40, "NVFP4", 64, 36),
];

/// The table is in enum order: a compile error otherwise.
const _: () = {
    let mut i = 0;
    while i < TABLE.len() {
        assert!(TABLE[i].0 as usize == i, "TABLE is not in enum order");
        i += 1;
    }
};

impl GgmlType {
    /// All known types, in ggml id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|e| e.0)
    }

    const fn entry(self) -> &'static (GgmlType, u32, &'static str, usize, usize) {
        // The table is in enum order (checked below and in the tests), so the discriminant
        // indexes it.
        &TABLE[self as usize]
    }

    /// The type for a ggml id, or `None` for ids ggml never assigned (or retired).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|e| e.1 == id).map(|e| e.0)
    }

    /// The ggml type id.
    pub const fn id(self) -> u32 {
        self.entry().1
    }

    /// ggml's name for the type ("Q4_K", "F16", ...).
    pub const fn name(self) -> &'static str {
        self.entry().2
    }

    /// The type whose `name()` is `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE
            .iter()
            .find(|e| e.2.eq_ignore_ascii_case(name))
            .map(|e| e.0)
    }

    /// Elements per block (1 for plain scalar types).
    pub const fn block_size(self) -> usize {
        self.entry().3
    }

    /// Bytes per block.
    pub const fn type_size(self) -> usize {
        self.entry().4
    }

    /// Bytes of a row of `n` elements, or `None` if `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_size(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_enum_order_and_ids_round_trip() {
        for (i, e) in TABLE.iter().enumerate() {
            assert_eq!(e.0 as usize, i, "{} out of order", e.2);
            assert_eq!(GgmlType::from_id(e.1), Some(e.0));
            assert_eq!(GgmlType::from_name(e.2), Some(e.0));
        }
        assert_eq!(GgmlType::from_id(4), None, "Q4_2 was retired");
        assert_eq!(GgmlType::from_id(1000), None);
    }

    #[test]
    fn row_size_needs_whole_blocks() {
        assert_eq!(GgmlType::Q4_0.row_size(64), Some(36));
        assert_eq!(GgmlType::Q4_0.row_size(33), None);
        assert_eq!(GgmlType::Q6_K.row_size(512), Some(420));
        assert_eq!(GgmlType::F32.row_size(3), Some(12));
    }
}
