//! The one error type of this crate. Every variant renders as a single line that names the
//! byte offset and the key or tensor concerned.

use ramforge_types::GgmlType;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file: magic at offset 0 is {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {version} (offset 4); versions 2 and 3 are supported")]
    UnsupportedVersion { version: u32 },
    #[error("GGUF file is big-endian (version {version} byte-swapped at offset 4); only little-endian files are supported")]
    BigEndian { version: u32 },
    #[error("truncated file: {what} at offset {offset} needs {needed} bytes, {available} remain")]
    Truncated {
        offset: u64,
        what: String,
        needed: u64,
        available: u64,
    },
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 { offset: u64, what: String },
    #[error("metadata key {key:?} at offset {offset}: unknown value type id {type_id}")]
    BadValueType {
        offset: u64,
        key: String,
        type_id: u32,
    },
    #[error(
        "metadata key {key:?} at offset {offset}: arrays nested deeper than {max_depth} levels"
    )]
    NestingTooDeep {
        offset: u64,
        key: String,
        max_depth: usize,
    },
    #[error("duplicate metadata key {key:?} at offset {offset}")]
    DuplicateKey { offset: u64, key: String },
    #[error("duplicate tensor name {name:?} at offset {offset}")]
    DuplicateTensor { offset: u64, name: String },
    #[error("metadata key \"general.alignment\" at offset {offset}: {value} is not a non-zero power of two")]
    BadAlignment { offset: u64, value: u64 },
    #[error("metadata key {key:?} at offset {offset} has type {found}, expected {expected}")]
    BadKeyType {
        offset: u64,
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("tensor name at offset {offset} is {len} bytes long; at most 64 are allowed")]
    TensorNameTooLong { offset: u64, len: u64 },
    #[error("tensor {tensor:?}{}: {n_dims} dimensions; 1 to 4 are allowed", at(*.offset))]
    BadDims {
        /// Offset of the tensor info in the header (`None` for a tensor built in memory).
        offset: Option<u64>,
        tensor: String,
        n_dims: u32,
    },
    #[error("tensor {tensor:?}{}: dimension {dim} is {value}; dimensions must be at least 1", at(*.offset))]
    ZeroDim {
        /// Offset of the tensor info in the header (`None` for a tensor built in memory).
        offset: Option<u64>,
        tensor: String,
        dim: usize,
        value: u64,
    },
    #[error("tensor {tensor:?} at offset {offset}: unknown ggml type id {id}")]
    UnknownTensorType {
        offset: u64,
        tensor: String,
        id: u32,
    },
    #[error("tensor {tensor:?}{}: row length {ne0} is not a multiple of the {ty} block size {block_size}", at(*.offset))]
    RaggedRow {
        /// Offset of the tensor info in the header (`None` for a tensor built in memory).
        offset: Option<u64>,
        tensor: String,
        ty: GgmlType,
        ne0: u64,
        block_size: usize,
    },
    #[error("tensor {tensor:?}{}: element count or byte size overflows", at(*.offset))]
    SizeOverflow {
        /// Offset of the tensor info in the header (`None` for a tensor built in memory).
        offset: Option<u64>,
        tensor: String,
    },
    #[error("tensor {tensor:?}: data offset {offset} (relative to the data section) is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensor {tensor:?}: data at file offset {offset} ({size} bytes) runs past the end of the file ({file_len} bytes)")]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        size: u64,
        file_len: u64,
    },
    #[error("tensors {first:?} and {second:?} overlap in the data section at offset {offset}")]
    OverlappingTensors {
        first: String,
        second: String,
        offset: u64,
    },
    #[error("tensor {tensor:?}: {got} bytes of data or buffer given, its type and shape make {expected}")]
    TensorDataLength {
        tensor: String,
        expected: u64,
        got: u64,
    },
    #[error("write error at output offset {offset}: {source}")]
    WriteFailed {
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("missing metadata key {key:?}")]
    MissingKey { key: String },
    #[error("metadata key {key:?} has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("metadata key {key:?}: value {value} is out of range")]
    OutOfRange { key: String, value: String },
    #[error("no tensor named {name:?}")]
    MissingTensor { name: String },
    #[error(
        "tensor {tensor:?}: read of {len} bytes at tensor byte {start} is outside its {size} bytes"
    )]
    RangeOutOfTensor {
        tensor: String,
        start: u64,
        len: u64,
        size: u64,
    },
    #[error("tensor {tensor:?}: short read at file offset {offset}: wanted {wanted} bytes, got {got} (file truncated or replaced?)")]
    ShortRead {
        tensor: String,
        offset: u64,
        wanted: u64,
        got: u64,
    },
    #[error("tensor {tensor:?}: read error at file offset {offset}: {source}")]
    ReadFailed {
        tensor: String,
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("tensor {tensor:?} names shard {shard}; the model has {shards}")]
    NoSuchShard {
        tensor: String,
        shard: usize,
        shards: usize,
    },
    #[error("{path}: metadata key {key:?} {reason}")]
    SplitKey {
        path: String,
        key: String,
        reason: String,
    },
    #[error("{path}: {source}")]
    InShard {
        path: String,
        #[source]
        source: Box<GgufError>,
    },
    #[error("{path} is shard {} of {count}; open the first shard ({first})", *.no as u32 + 1)]
    NotFirstShard {
        path: String,
        no: u16,
        count: u16,
        first: String,
    },
    #[error("{path}: split.count says {count} shards, but the file is not named PREFIX-00001-of-{count:05}.gguf, so its other shards cannot be found")]
    ShardName { path: String, count: u16 },
    #[error("shard {} of {count} is missing: {path}: {source}", *.no as u32 + 1)]
    MissingShard {
        path: String,
        no: u16,
        count: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("shard {path}: {key} is {found}, expected {expected} (as the first shard says)")]
    ShardMismatch {
        path: String,
        key: &'static str,
        found: String,
        expected: String,
    },
    #[error("tensor {name:?} is in two shards: {first} and {second}")]
    TensorInTwoShards {
        name: String,
        first: String,
        second: String,
    },
    #[error(
        "{path}: split.tensors.count says {expected} tensors, the {shards} shards hold {found}"
    )]
    SplitTensorCount {
        path: String,
        expected: u64,
        shards: u16,
        found: u64,
    },
    #[error("{path} is named as a shard of this model, whose first shard says it has {count} shards; remove it or the whole set")]
    ExtraShard { path: String, count: u16 },
}

/// " at offset N" when the offset is known.
fn at(offset: Option<u64>) -> String {
    offset
        .map(|o| format!(" at offset {o}"))
        .unwrap_or_default()
}
