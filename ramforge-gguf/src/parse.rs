//! Parsing and validation of the GGUF header: magic, version, metadata, tensor infos.
//!
//! Every count and length is checked against the bytes that remain before it sizes an
//! allocation, so hostile headers fail fast with small memory.

use crate::error::GgufError;
use crate::limits::{
    align_up, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_TENSOR_NAME,
};
use crate::tensor::TensorInfo;
use crate::value::{Metadata, Value, ValueType};
use ramforge_types::GgmlType;
use std::collections::HashSet;

/// Fewest bytes one metadata entry occupies: key length (8) + value type (4) + a 1-byte value.
const MIN_KV_BYTES: u64 = 13;
/// Fewest bytes one tensor info occupies: name length (8) + n_dims (4) + one dim (8) + type (4)
/// + offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 32;
/// Largest up-front reservation for an array; bigger arrays grow as their elements are
/// actually parsed, so a count that passes the bytes-remaining check still cannot make us
/// reserve memory before the bytes behind it have been seen.
const MAX_ARRAY_RESERVE: u64 = 1 << 16;

/// A parsed, validated GGUF header.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    pub alignment: u64,
    /// Absolute file offset where the tensor data section starts.
    pub data_offset: u64,
    /// Bytes of the file the header was validated against.
    pub file_len: u64,
    pub metadata: Metadata,
    /// Tensors in file order.
    pub tensors: Vec<TensorInfo>,
}

impl GgufHeader {
    /// The tensor with this name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Parses and validates a GGUF header from the start of a file.
///
/// `bytes` must hold at least the whole header (it may hold the whole file); `file_len` is
/// the size of the file, used to check that every tensor's data lies inside it.
pub fn parse_header(bytes: &[u8], file_len: u64) -> Result<GgufHeader, GgufError> {
    let mut c = Cursor { bytes, pos: 0 };
    let magic: [u8; 4] = c.array(&|| "magic".to_string())?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32(&|| "version".to_string())?;
    match version {
        2 | 3 => {}
        v if matches!(v.swap_bytes(), 2 | 3) => return Err(GgufError::BigEndian { version: v }),
        v => return Err(GgufError::UnsupportedVersion { version: v }),
    }
    let tensor_count = c.u64(&|| "tensor count".to_string())?;
    let kv_count = c.u64(&|| "metadata count".to_string())?;
    // Both counts bounded by the bytes left before either sizes anything.
    let min_bytes = kv_count
        .checked_mul(MIN_KV_BYTES)
        .and_then(|kv| {
            tensor_count
                .checked_mul(MIN_TENSOR_INFO_BYTES)?
                .checked_add(kv)
        })
        .unwrap_or(u64::MAX);
    c.ensure(min_bytes, &|| {
        format!("{kv_count} metadata entries and {tensor_count} tensor infos")
    })?;

    let (metadata, alignment) = parse_metadata(&mut c, kv_count)?;
    let tensors = parse_tensor_infos(&mut c, tensor_count, alignment)?;
    let data_offset = align_up(c.pos as u64, alignment).ok_or(GgufError::SizeOverflow {
        offset: Some(c.pos as u64),
        tensor: "<data section>".to_string(),
    })?;
    check_tensor_placement(&tensors, data_offset, file_len)?;

    Ok(GgufHeader {
        version,
        alignment,
        data_offset,
        file_len,
        metadata,
        tensors,
    })
}

/// Reads `kv_count` key/value entries and resolves the data alignment they set.
fn parse_metadata(c: &mut Cursor, kv_count: u64) -> Result<(Metadata, u64), GgufError> {
    let mut metadata = Metadata::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..kv_count {
        let key_at = c.pos as u64;
        let key = c.string(&|| format!("key of metadata entry {i}"))?;
        let type_at = c.pos as u64;
        let type_id = c.u32(&|| format!("type of metadata key {key:?}"))?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::BadValueType {
            offset: type_at,
            key: key.clone(),
            type_id,
        })?;
        let value_at = c.pos as u64;
        let value = c.value(ty, &key, 0)?;
        if metadata.contains(&key) {
            return Err(GgufError::DuplicateKey {
                offset: key_at,
                key,
            });
        }
        if key == ALIGNMENT_KEY {
            alignment = check_alignment(&value, value_at)?;
        }
        metadata.insert(key, value);
    }
    Ok((metadata, alignment))
}

/// `general.alignment` must be a non-negative integer that is a non-zero power of two.
fn check_alignment(value: &Value, offset: u64) -> Result<u64, GgufError> {
    let a = value.as_u64().ok_or_else(|| GgufError::BadKeyType {
        offset,
        key: ALIGNMENT_KEY.to_string(),
        expected: "unsigned integer",
        found: value.value_type().name(),
    })?;
    if a == 0 || !a.is_power_of_two() {
        return Err(GgufError::BadAlignment { offset, value: a });
    }
    Ok(a)
}

/// Reads `count` tensor infos: names unique and short, 1..=4 non-zero dims, known types,
/// whole blocks per row, sizes that fit, offsets aligned.
fn parse_tensor_infos(
    c: &mut Cursor,
    count: u64,
    alignment: u64,
) -> Result<Vec<TensorInfo>, GgufError> {
    // `count` was bounded by the bytes that remain (32 per info) in `parse_header`.
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(count as usize);
    let mut names = HashSet::new();
    for i in 0..count {
        let at = c.pos as u64;
        let what_name = || format!("name of tensor {i}");
        let name_len = c.u64(&what_name)?;
        if name_len > MAX_TENSOR_NAME {
            return Err(GgufError::TensorNameTooLong {
                offset: at,
                len: name_len,
            });
        }
        let name = c.string_body(name_len, &what_name)?;
        let what = || format!("info of tensor {name:?}");
        let n_dims = c.u32(&what)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(GgufError::BadDims {
                offset: Some(at),
                tensor: name,
                n_dims,
            });
        }
        let mut shape = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            shape.push(c.u64(&what)?);
        }
        let type_at = c.pos as u64;
        let type_id = c.u32(&what)?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            offset: type_at,
            tensor: name.clone(),
            id: type_id,
        })?;
        let offset = c.u64(&what)?;
        if !names.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor { offset: at, name });
        }
        let info = TensorInfo::build(name, ggml_type, shape, offset, Some(at))?;
        if info.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: info.name,
                offset: info.offset,
                alignment,
            });
        }
        tensors.push(info);
    }
    Ok(tensors)
}

/// Every tensor's data inside the file, and no two tensors sharing a byte.
fn check_tensor_placement(
    tensors: &[TensorInfo],
    data_offset: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    for t in tensors {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|start| start.checked_add(t.n_bytes));
        if end.is_none_or(|end| end > file_len) {
            return Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: data_offset.saturating_add(t.offset),
                size: t.n_bytes,
                file_len,
            });
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // Cannot overflow: both ends were checked against the file length above.
        if a.offset + a.n_bytes > b.offset {
            return Err(GgufError::OverlappingTensors {
                first: a.name.clone(),
                second: b.name.clone(),
                offset: data_offset + b.offset,
            });
        }
    }
    Ok(())
}

/// A bounds-checked little-endian reader over the header bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// Fails with `Truncated` unless `n` more bytes remain.
    fn ensure(&self, n: u64, what: &dyn Fn() -> String) -> Result<(), GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos as u64,
                what: what(),
                needed: n,
                available: self.remaining(),
            });
        }
        Ok(())
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        self.ensure(n, what)?;
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A length-prefixed UTF-8 string.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        self.string_body(len, what)
    }

    /// The `len` bytes of a string whose length prefix was already read.
    fn string_body(&mut self, len: u64, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let start = self.pos as u64;
        let raw = self.take(len, what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(GgufError::InvalidUtf8 {
                offset: start + e.valid_up_to() as u64,
                what: what(),
            }),
        }
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value, GgufError> {
        let what = || format!("value of metadata key {key:?}");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => {
                let at = self.pos as u64;
                match self.array::<1>(&what)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => {
                        return Err(GgufError::OutOfRange {
                            key: key.to_string(),
                            value: format!("bool byte {b} at offset {at}"),
                        })
                    }
                }
            }
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => self.array_value(key, depth)?,
        })
    }

    /// An array: element type, count, then the elements (themselves arrays when nested).
    fn array_value(&mut self, key: &str, depth: usize) -> Result<Value, GgufError> {
        let what = || format!("array header of metadata key {key:?}");
        let at = self.pos as u64;
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                offset: at,
                key: key.to_string(),
                max_depth: MAX_ARRAY_DEPTH,
            });
        }
        let type_id = self.u32(&what)?;
        let elem = ValueType::from_id(type_id).ok_or(GgufError::BadValueType {
            offset: at,
            key: key.to_string(),
            type_id,
        })?;
        let count = self.u64(&what)?;
        // Bound the count by the bytes left before allocating anything it sizes.
        let needed = count.saturating_mul(elem.min_encoded_size());
        self.ensure(needed, &|| {
            format!("array of {count} {} for metadata key {key:?}", elem.name())
        })?;
        let mut items = Vec::with_capacity(count.min(MAX_ARRAY_RESERVE) as usize);
        for _ in 0..count {
            items.push(self.value(elem, key, depth + 1)?);
        }
        Ok(Value::Array(elem, items))
    }
}
