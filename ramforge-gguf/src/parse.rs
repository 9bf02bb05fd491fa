//! Parsing and validation of the GGUF header: magic, version, metadata, tensor infos.
//!
//! Every count and length is checked against the bytes that remain before it sizes an
//! allocation, so hostile headers fail fast with small memory.

use crate::error::GgufError;
use crate::tensor::TensorInfo;
use crate::value::{Metadata, Value, ValueType};
use ramforge_quant::GgmlType;

/// GGUF magic bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest tensor name GGUF allows.
pub const MAX_TENSOR_NAME: u64 = 64;
/// Deepest array nesting accepted (arrays of arrays of ...).
pub const MAX_ARRAY_DEPTH: usize = 4;
/// Most dimensions a tensor may have.
pub const MAX_DIMS: u32 = 4;

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

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos as u64,
                what: what(),
                needed: n,
                available: self.remaining(),
            });
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        Ok(s.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        let start = self.pos as u64;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| GgufError::InvalidUtf8 {
            offset: start,
            what: what(),
        })
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
            ValueType::Array => {
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
                let needed = count.checked_mul(elem.min_encoded_size()).unwrap_or(u64::MAX);
                if needed > self.remaining() {
                    return Err(GgufError::Truncated {
                        offset: self.pos as u64,
                        what: format!("array of {count} {} for metadata key {key:?}", elem.name()),
                        needed,
                        available: self.remaining(),
                    });
                }
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

fn align_up(x: u64, align: u64) -> Option<u64> {
    x.checked_add(align - 1).map(|v| v / align * align)
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
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let tensor_count = c.u64(&|| "tensor count".to_string())?;
    let kv_count = c.u64(&|| "metadata count".to_string())?;

    // Each key/value needs at least 8 (key length) + 4 (type) + 1 bytes.
    let kv_min = kv_count.checked_mul(13).unwrap_or(u64::MAX);
    if kv_min > c.remaining() {
        return Err(GgufError::Truncated {
            offset: c.pos as u64,
            what: format!("{kv_count} metadata entries"),
            needed: kv_min,
            available: c.remaining(),
        });
    }
    let mut metadata = Metadata::new();
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
        let value = c.value(ty, &key, 0)?;
        if metadata.contains(&key) {
            return Err(GgufError::DuplicateKey { offset: key_at, key });
        }
        metadata.insert(key, value);
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => {
            let a = v.as_u64().unwrap_or(0);
            if a == 0 || !a.is_power_of_two() {
                return Err(GgufError::BadAlignment { value: a });
            }
            a
        }
    };

    // Each tensor info needs at least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
    let ti_min = tensor_count.checked_mul(32).unwrap_or(u64::MAX);
    if ti_min > c.remaining() {
        return Err(GgufError::Truncated {
            offset: c.pos as u64,
            what: format!("{tensor_count} tensor infos"),
            needed: ti_min,
            available: c.remaining(),
        });
    }
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(tensor_count as usize);
    let mut names = std::collections::HashSet::new();
    for i in 0..tensor_count {
        let at = c.pos as u64;
        let name_len = u64::from_le_bytes(c.array(&|| format!("name of tensor {i}"))?);
        if name_len > MAX_TENSOR_NAME {
            return Err(GgufError::TensorNameTooLong {
                offset: at,
                len: name_len,
            });
        }
        c.pos -= 8;
        let name = c.string(&|| format!("name of tensor {i}"))?;
        let what = || format!("info of tensor {name:?}");
        let n_dims = c.u32(&what)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(GgufError::BadDims {
                offset: at,
                tensor: name,
                n_dims,
            });
        }
        let mut shape = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims as usize {
            let v = c.u64(&what)?;
            if v == 0 {
                return Err(GgufError::ZeroDim {
                    offset: at,
                    tensor: name,
                    dim: d,
                    value: v,
                });
            }
            shape.push(v);
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
        let info = TensorInfo::new(name, ggml_type, shape, offset)?;
        if info.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: info.name,
                offset: info.offset,
                alignment,
            });
        }
        tensors.push(info);
    }

    let data_offset = align_up(c.pos as u64, alignment).ok_or(GgufError::SizeOverflow {
        tensor: "<data section>".to_string(),
    })?;

    // Every tensor inside the file, and no two overlapping.
    for t in &tensors {
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    offset: data_offset.saturating_add(t.offset),
                    size: t.n_bytes,
                    file_len,
                })
            }
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].offset);
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        if a.offset + a.n_bytes > b.offset {
            return Err(GgufError::OverlappingTensors {
                first: a.name.clone(),
                second: b.name.clone(),
                offset: data_offset + b.offset,
            });
        }
    }

    Ok(GgufHeader {
        version,
        alignment,
        data_offset,
        file_len,
        metadata,
        tensors,
    })
}
