//! File-backed tensor access: positional reads into caller-provided buffers, and mapped views.

use crate::error::GgufError;
use crate::parse::{parse_header, GgufHeader};
use crate::tensor::TensorInfo;
use memmap2::{Mmap, MmapOptions};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// An open GGUF file: the validated header plus a handle for reading tensor data on demand.
/// Opening reads only the header; no tensor payload is touched.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    file: File,
    header: GgufHeader,
}

impl GgufFile {
    /// Opens and validates a GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| GgufError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = File::open(&path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let header = if file_len == 0 {
            parse_header(&[], 0)?
        } else {
            // The header is parsed from a temporary mapping that is dropped afterwards, so
            // only the header's pages were ever touched.
            // SAFETY: the mapping is read-only and private to this call; a concurrent writer
            // can at worst make the parser see inconsistent bytes, which it validates.
            let map = unsafe { MmapOptions::new().map(&file) }.map_err(io)?;
            parse_header(&map, file_len)?
        };
        Ok(GgufFile { path, file, header })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The metadata, mutable: a consumer may drop large arrays it has already turned into its
    /// own tables (the tensor infos stay immutable).
    pub fn metadata_mut(&mut self) -> &mut crate::value::Metadata {
        &mut self.header.metadata
    }

    /// The tensor with this name, or a `MissingTensor` error.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.header
            .tensor(name)
            .ok_or_else(|| GgufError::MissingTensor {
                name: name.to_string(),
            })
    }

    /// Absolute file offset of a tensor's first byte.
    pub fn absolute_offset(&self, t: &TensorInfo) -> u64 {
        self.header.data_offset.saturating_add(t.offset)
    }

    /// A `Read` over one tensor's bytes, served by positional reads as the caller asks
    /// (used to copy tensors, e.g. when rewriting a file, without holding them whole).
    pub fn tensor_reader<'a>(&'a self, t: &'a TensorInfo) -> TensorReader<'a> {
        TensorReader {
            file: self,
            tensor: t,
            pos: 0,
        }
    }

    /// Reads a whole tensor into `buf` (which must be exactly `t.n_bytes` long).
    pub fn read_tensor_into(&self, t: &TensorInfo, buf: &mut [u8]) -> Result<(), GgufError> {
        if buf.len() as u64 != t.n_bytes {
            return Err(GgufError::TensorDataLength {
                tensor: t.name.clone(),
                expected: t.n_bytes,
                got: buf.len() as u64,
            });
        }
        self.read_range_into(t, 0, buf)
    }

    /// Reads `buf.len()` bytes of tensor `t` starting at byte `start` of its data
    /// (e.g. a run of rows) with positional reads; the rest of the file is not touched.
    pub fn read_range_into(
        &self,
        t: &TensorInfo,
        start: u64,
        buf: &mut [u8],
    ) -> Result<(), GgufError> {
        let len = buf.len() as u64;
        if start.checked_add(len).is_none_or(|end| end > t.n_bytes) {
            return Err(GgufError::RangeOutOfTensor {
                tensor: t.name.clone(),
                start,
                len,
                size: t.n_bytes,
            });
        }
        let offset = self.absolute_offset(t).saturating_add(start);
        read_exact_at(&self.file, buf, offset).map_err(|(got, e)| match e {
            None => GgufError::ShortRead {
                tensor: t.name.clone(),
                offset: offset + got,
                wanted: len,
                got,
            },
            Some(source) => GgufError::ReadFailed {
                tensor: t.name.clone(),
                offset: offset + got,
                source,
            },
        })
    }

    /// The error a read finds in a file cut to `len` bytes: a short read of the first tensor
    /// (in file order) the file no longer holds whole, at the offset where the file ends or
    /// where that tensor starts. `None` when every tensor's data still lies within `len`.
    pub fn short_read_at(&self, len: u64) -> Option<GgufError> {
        let (start, t) = self
            .header
            .tensors
            .iter()
            .map(|t| (self.absolute_offset(t), t))
            .filter(|(start, t)| start.saturating_add(t.n_bytes) > len)
            .min_by_key(|(start, _)| *start)?;
        Some(GgufError::ShortRead {
            tensor: t.name.clone(),
            offset: len.max(start),
            wanted: t.n_bytes,
            got: len.saturating_sub(start),
        })
    }

    /// The underlying file handle (for callers that issue their own reads, e.g. O_DIRECT).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Bytes of tensor `t`'s pages that are in the page cache now (`mincore` on a temporary
    /// mapping, which touches no page), or `None` where that cannot be told.
    pub fn cached_bytes(&self, t: &TensorInfo) -> Option<u64> {
        let map = self.map_tensor(t).ok()?;
        let page = page_size();
        let (base, len) = (map.map.as_ptr(), map.map.len());
        let mut resident = vec![0u8; len.div_ceil(page)];
        // SAFETY: `base..base + len` is a live mapping owned by `map`, and `resident` has one
        // byte per page of it, as mincore requires.
        let rc = unsafe { libc::mincore(base as *mut libc::c_void, len, resident.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        let pages = resident.iter().filter(|&&r| r & 1 == 1).count() as u64;
        Some((pages * page as u64).min(t.n_bytes))
    }

    /// Maps a tensor's bytes read-only. Pages are loaded on first touch and count towards
    /// the process's RSS while mapped.
    pub fn map_tensor(&self, t: &TensorInfo) -> Result<TensorMap, GgufError> {
        let abs = self.absolute_offset(t);
        // A TensorInfo from another file could point past this one's end; mapping that
        // would "succeed" and fault on first touch.
        if abs
            .checked_add(t.n_bytes)
            .is_none_or(|end| end > self.header.file_len)
        {
            return Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: abs,
                size: t.n_bytes,
                file_len: self.header.file_len,
            });
        }
        let page = page_size() as u64;
        let aligned = abs / page * page;
        let lead = (abs - aligned) as usize;
        let len = lead + t.n_bytes as usize;
        // SAFETY: read-only mapping of a range validated to lie inside the file at open.
        // If the file is truncated while mapped, touching the lost pages raises SIGBUS; the
        // streaming engine uses positional reads for that reason and maps only on request.
        let map = unsafe { MmapOptions::new().offset(aligned).len(len).map(&self.file) }.map_err(
            |source| GgufError::ReadFailed {
                tensor: t.name.clone(),
                offset: abs,
                source,
            },
        )?;
        Ok(TensorMap { map, lead })
    }
}

/// A `Read` over one tensor's bytes (see [`GgufFile::tensor_reader`]).
pub struct TensorReader<'a> {
    file: &'a GgufFile,
    tensor: &'a TensorInfo,
    pos: u64,
}

impl std::io::Read for TensorReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.tensor.n_bytes - self.pos;
        let n = (buf.len() as u64).min(left) as usize;
        self.file
            .read_range_into(self.tensor, self.pos, &mut buf[..n])
            .map_err(std::io::Error::other)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Reads exactly `buf.len()` bytes at `offset`; on failure returns how many bytes were read
/// and the error (`None` for end of file).
fn read_exact_at(
    file: &File,
    mut buf: &mut [u8],
    mut offset: u64,
) -> Result<(), (u64, Option<std::io::Error>)> {
    let mut got = 0u64;
    while !buf.is_empty() {
        match file.read_at(buf, offset) {
            Ok(0) => return Err((got, None)),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
                got += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err((got, Some(e))),
        }
    }
    Ok(())
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

/// A read-only mapped view of one tensor's bytes, with page-advice helpers.
pub struct TensorMap {
    map: Mmap,
    lead: usize,
}

impl TensorMap {
    /// The tensor's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map[self.lead..]
    }

    /// Hints that the pages will be needed soon (read-ahead).
    pub fn advise_willneed(&self) -> std::io::Result<()> {
        self.map.advise(memmap2::Advice::WillNeed)
    }

    /// Hints that the pages will be read sequentially.
    pub fn advise_sequential(&self) -> std::io::Result<()> {
        self.map.advise(memmap2::Advice::Sequential)
    }

    /// Drops the mapping's resident pages (they are re-read from the file if touched again).
    pub fn advise_dontneed(&self) -> std::io::Result<()> {
        // SAFETY: the mapping is read-only and file-backed, so discarding pages loses nothing.
        unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        }
    }
}
