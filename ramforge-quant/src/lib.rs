//! ramforge-quant: GGML block-quantization kernels.
//!
//! One job: turn quantized GGML blocks into numbers (dequantize), numbers into blocks
//! (quantize), and multiply quantized matrices by vectors. It depends on no other RAMforge
//! crate, so it can be used on its own.

mod types;

pub use types::GgmlType;
