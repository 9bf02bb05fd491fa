//! Building GGUF files from metadata and tensors.
//!
//! The layout is the one gguf-py and llama.cpp write, so a real file's header and tensors
//! re-written here reproduce its bytes: header, zero padding up to the alignment, then each
//! tensor's data in order, each followed by zero padding up to the alignment.
//!
//! Whatever the writer is given, the header it produces is run through [`parse_header`]
//! before a byte is written, so it never emits a file the reader would refuse.

use crate::error::GgufError;
use crate::file::GgufFile;
use crate::limits::{align_up, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_WRITE_ALIGNMENT};
use crate::parse::{parse_header, GgufHeader};
use crate::split::{shard_path, SplitKeys, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT};
use crate::tensor::TensorInfo;
use crate::value::{Metadata, Value};
use ramforge_types::GgmlType;
use std::borrow::Cow;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Where a tensor's bytes come from when the file is written.
pub enum TensorData<'a> {
    /// The bytes themselves.
    Bytes(Cow<'a, [u8]>),
    /// A reader that yields exactly the tensor's bytes (e.g. [`GgufFile::tensor_reader`]).
    Reader(Box<dyn Read + 'a>),
}

impl From<Vec<u8>> for TensorData<'_> {
    fn from(v: Vec<u8>) -> Self {
        TensorData::Bytes(Cow::Owned(v))
    }
}

impl<'a> From<&'a [u8]> for TensorData<'a> {
    fn from(v: &'a [u8]) -> Self {
        TensorData::Bytes(Cow::Borrowed(v))
    }
}

impl<'a> From<&'a Vec<u8>> for TensorData<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        TensorData::Bytes(Cow::Borrowed(v))
    }
}

struct PendingTensor<'a> {
    info: TensorInfo,
    data: TensorData<'a>,
}

/// A GGUF file under construction: metadata (in order) plus tensors (in order).
///
/// `general.alignment` in the metadata, if present, sets the alignment of the data section.
pub struct GgufWriter<'a> {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor<'a>>,
}

impl<'a> GgufWriter<'a> {
    /// A GGUF v3 file with this metadata and no tensors yet.
    pub fn new(metadata: Metadata) -> GgufWriter<'a> {
        GgufWriter {
            version: 3,
            metadata,
            tensors: Vec::new(),
        }
    }

    /// A writer that reproduces `file`: same version, metadata and tensors, with the tensor
    /// bytes streamed from the file when written.
    pub fn copy_of(file: &'a GgufFile) -> Result<GgufWriter<'a>, GgufError> {
        let h = file.header();
        let mut metadata = h.metadata.clone();
        if file.shards().len() > 1 {
            // One file now: the split keys would send a reader looking for other shards.
            for key in [SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS_COUNT] {
                metadata.remove(key);
            }
        }
        let mut w = GgufWriter::new(metadata).with_version(h.version);
        for t in &h.tensors {
            let reader = Box::new(file.tensor_reader(t));
            w.add_tensor(&t.name, t.ggml_type, &t.shape, TensorData::Reader(reader))?;
        }
        Ok(w)
    }

    /// Sets the GGUF version written (2 or 3; others are refused when writing).
    pub fn with_version(mut self, version: u32) -> GgufWriter<'a> {
        self.version = version;
        self
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// Appends a tensor. Its byte size follows from type and shape; `Bytes` data must have
    /// exactly that length (a `Reader` is checked when the file is written).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ggml_type: GgmlType,
        shape: &[u64],
        data: impl Into<TensorData<'a>>,
    ) -> Result<&TensorInfo, GgufError> {
        let info = TensorInfo::new(name.into(), ggml_type, shape.to_vec(), 0)?;
        let data = data.into();
        if let TensorData::Bytes(b) = &data {
            if b.len() as u64 != info.n_bytes {
                return Err(GgufError::TensorDataLength {
                    tensor: info.name,
                    expected: info.n_bytes,
                    got: b.len() as u64,
                });
            }
        }
        self.tensors.push(PendingTensor { info, data });
        Ok(&self.tensors.last().expect("just pushed").info)
    }

    /// The header the written file will have (validated exactly as the reader validates).
    pub fn header(&self) -> Result<GgufHeader, GgufError> {
        self.plan().map(|(_, header)| header)
    }

    /// Writes the file to `out`; returns the number of bytes written.
    pub fn write_to<W: Write>(self, out: W) -> Result<u64, GgufError> {
        let (header_bytes, header) = self.plan()?;
        let mut out = CountingWriter { inner: out, n: 0 };
        out.put(&header_bytes)?;
        for (pending, info) in self.tensors.into_iter().zip(&header.tensors) {
            out.pad_to(header.data_offset + info.offset)?;
            match pending.data {
                TensorData::Bytes(bytes) => out.put(&bytes)?,
                TensorData::Reader(reader) => {
                    let at = out.n;
                    let copied = std::io::copy(&mut reader.take(info.n_bytes), &mut out)
                        .map_err(|source| GgufError::WriteFailed { offset: at, source })?;
                    if copied != info.n_bytes {
                        return Err(GgufError::TensorDataLength {
                            tensor: info.name.clone(),
                            expected: info.n_bytes,
                            got: copied,
                        });
                    }
                }
            }
        }
        out.pad_to(header.file_len)?;
        let n = out.n;
        out.inner
            .flush()
            .map_err(|source| GgufError::WriteFailed { offset: n, source })?;
        Ok(n)
    }

    /// The whole file in memory.
    pub fn to_bytes(self) -> Result<Vec<u8>, GgufError> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }

    /// Writes the file at `path` (created or truncated); returns its length.
    pub fn write_file(self, path: impl AsRef<Path>) -> Result<u64, GgufError> {
        let path = path.as_ref();
        let file = std::fs::File::create(path).map_err(|source| GgufError::Io {
            path: path.display().to_string(),
            source,
        })?;
        self.write_to(std::io::BufWriter::new(file))
    }

    /// Writes the model as the shards of a split, as llama.cpp's `gguf-split --split-max-size`
    /// does: tensors in order, a new shard started when the next tensor (padded to 32 bytes)
    /// would take the current one's tensor data past `max_bytes` (a tensor larger than that
    /// gets a shard of its own); every shard carries `split.no`, `split.count` and
    /// `split.tensors.count`, and the first also all the other metadata. The files are
    /// `PREFIX-00001-of-0000n.gguf` ...; returns each one's path and length. Every shard's
    /// header is validated before the first byte is written.
    pub fn write_split(
        self,
        prefix: impl AsRef<Path>,
        max_bytes: u64,
    ) -> Result<Vec<(PathBuf, u64)>, GgufError> {
        let total = self.tensors.len();
        let mut groups: Vec<Vec<PendingTensor<'a>>> = vec![Vec::new()];
        let mut size = 0u64;
        for t in self.tensors {
            let n = align_up(t.info.n_bytes, DEFAULT_ALIGNMENT).unwrap_or(u64::MAX);
            let current = groups.last_mut().expect("never empty");
            if size.saturating_add(n) > max_bytes && !current.is_empty() {
                groups.push(Vec::new());
                size = 0;
            }
            size = size.saturating_add(n);
            groups.last_mut().expect("never empty").push(t);
        }
        let count = u16::try_from(groups.len()).map_err(|_| GgufError::OutOfRange {
            key: SPLIT_COUNT.to_string(),
            value: format!("{} shards (at most 65535)", groups.len()),
        })?;
        let tensors = u32::try_from(total)
            .ok()
            .filter(|&n| i32::try_from(n).is_ok())
            .ok_or_else(|| GgufError::OutOfRange {
                key: SPLIT_TENSORS_COUNT.to_string(),
                value: total.to_string(),
            })?;
        let mut shards = Vec::with_capacity(groups.len());
        for (no, group) in groups.into_iter().enumerate() {
            let mut metadata = if no == 0 {
                self.metadata.clone()
            } else {
                Metadata::new()
            };
            let no = no as u16;
            SplitKeys {
                no,
                count,
                tensors: Some(tensors),
            }
            .write_to(&mut metadata);
            let w = GgufWriter {
                version: self.version,
                metadata,
                tensors: group,
            };
            w.header()?;
            shards.push((shard_path(prefix.as_ref(), no, count), w));
        }
        shards
            .into_iter()
            .map(|(path, w)| {
                let n = w.write_file(&path)?;
                Ok((path, n))
            })
            .collect()
    }

    /// Lays the file out: header bytes (padded to the data section) and the header as the
    /// reader will see it.
    fn plan(&self) -> Result<(Vec<u8>, GgufHeader), GgufError> {
        // An invalid alignment is refused below by `parse_header`, with its offset.
        let alignment = self
            .metadata
            .get(ALIGNMENT_KEY)
            .and_then(Value::as_u64)
            .filter(|a| a.is_power_of_two())
            .unwrap_or(DEFAULT_ALIGNMENT);
        if alignment > MAX_WRITE_ALIGNMENT {
            return Err(GgufError::OutOfRange {
                key: ALIGNMENT_KEY.to_string(),
                value: format!("{alignment} (the writer pads to at most {MAX_WRITE_ALIGNMENT})"),
            });
        }
        let overflow = |name: &str| GgufError::SizeOverflow {
            offset: None,
            tensor: name.to_string(),
        };
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut data_len = 0u64;
        for t in &self.tensors {
            let offset = align_up(data_len, alignment).ok_or_else(|| overflow(&t.info.name))?;
            data_len = offset
                .checked_add(t.info.n_bytes)
                .ok_or_else(|| overflow(&t.info.name))?;
            offsets.push(offset);
        }
        let data_len = align_up(data_len, alignment).ok_or_else(|| overflow("<data section>"))?;

        let mut bytes = Vec::new();
        bytes.extend_from_slice(&MAGIC);
        put_u32(&mut bytes, self.version);
        put_u64(&mut bytes, self.tensors.len() as u64);
        put_u64(&mut bytes, self.metadata.len() as u64);
        for (key, value) in self.metadata.iter() {
            put_str(&mut bytes, key);
            put_u32(&mut bytes, value.value_type().id());
            put_value(&mut bytes, key, value)?;
        }
        for (t, offset) in self.tensors.iter().zip(&offsets) {
            put_str(&mut bytes, &t.info.name);
            put_u32(&mut bytes, t.info.shape.len() as u32);
            for &d in &t.info.shape {
                put_u64(&mut bytes, d);
            }
            put_u32(&mut bytes, t.info.ggml_type.id());
            put_u64(&mut bytes, *offset);
        }
        let data_offset =
            align_up(bytes.len() as u64, alignment).ok_or_else(|| overflow("<data section>"))?;
        // Alignments up to 2^63 are valid; refuse padding we could never allocate.
        let padding = data_offset - bytes.len() as u64;
        usize::try_from(padding)
            .ok()
            .and_then(|p| bytes.try_reserve_exact(p).ok())
            .ok_or_else(|| overflow("<header padding>"))?;
        bytes.resize(data_offset as usize, 0);
        let file_len = data_offset
            .checked_add(data_len)
            .ok_or_else(|| overflow("<data section>"))?;

        let header = parse_header(&bytes, file_len)?;
        debug_assert_eq!(header.data_offset, data_offset);
        Ok((bytes, header))
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A value's payload (its type id is written by the caller; array elements carry none).
fn put_value(out: &mut Vec<u8>, key: &str, value: &Value) -> Result<(), GgufError> {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_str(out, s),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Array(elem, items) => {
            put_u32(out, elem.id());
            put_u64(out, items.len() as u64);
            for item in items {
                // A mixed array would be written as garbage that may still parse.
                if item.value_type() != *elem {
                    return Err(GgufError::WrongType {
                        key: key.to_string(),
                        expected: elem.name(),
                        found: item.value_type().name(),
                    });
                }
                put_value(out, key, item)?;
            }
        }
    }
    Ok(())
}

/// A writer that counts bytes, for padding and error offsets.
struct CountingWriter<W> {
    inner: W,
    n: u64,
}

impl<W: Write> CountingWriter<W> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), GgufError> {
        let at = self.n;
        self.write_all(bytes)
            .map_err(|source| GgufError::WriteFailed { offset: at, source })
    }

    fn pad_to(&mut self, offset: u64) -> Result<(), GgufError> {
        const ZEROS: [u8; 64] = [0; 64];
        while self.n < offset {
            let k = (offset - self.n).min(ZEROS.len() as u64) as usize;
            self.put(&ZEROS[..k])?;
        }
        Ok(())
    }
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
