//! ramforge-gguf: a strict GGUF reader and writer with file-backed tensor access.
//!
//! One job: be the front door for untrusted model files. The header is validated completely
//! (counts bounded by the bytes that remain, checked arithmetic, aligned, in-bounds and
//! non-overlapping tensor data) before anything is trusted, and tensor payloads are read only
//! on request, into caller-provided buffers or mapped views.
//!
//! A model split in shards (llama.cpp's `gguf-split`, [`split`]) opens by its first shard as
//! one [`GgufFile`]: every tensor knows its shard, and reads go to that shard's file.
//!
//! [`GgufWriter`] builds files in the layout gguf-py and llama.cpp write (re-writing a real
//! file reproduces its bytes); every header it emits passes [`parse_header`] first.

mod error;
mod file;
mod limits;
mod parse;
pub mod split;
mod tensor;
mod value;
mod write;

pub use error::GgufError;
pub use file::{page_size, GgufFile, Shard, TensorMap, TensorReader};
pub use limits::{
    ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_TENSOR_NAME,
};
pub use parse::{parse_header, GgufHeader};
pub use ramforge_types::GgmlType;
pub use split::{shard_path, SplitKeys};
pub use tensor::TensorInfo;
pub use value::{Metadata, Value, ValueType};
pub use write::{GgufWriter, TensorData};
