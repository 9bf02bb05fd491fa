//! File-backed tensor access: positional reads into caller-provided buffers, and mapped views,
//! over a model of one file or of the shards of a split (see [`crate::split`]).

use crate::error::GgufError;
use crate::parse::{parse_header, GgufHeader};
use crate::split::{
    parse_shard_name, shard_path, shard_prefix, SplitKeys, SPLIT_COUNT, SPLIT_NO,
    SPLIT_TENSORS_COUNT,
};
use crate::tensor::TensorInfo;
use memmap2::{Mmap, MmapOptions};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// An open GGUF model: the validated header plus a handle per file for reading tensor data on
/// demand. Opening reads only the headers; no tensor payload is touched.
///
/// A split model is opened by its first shard: the others are found by name
/// (`PREFIX-00002-of-0000n.gguf` ...), each checked to be the shard its name says (same
/// `split.count` and `split.tensors.count`, its own `split.no`), their tensors merged into one
/// table (a name in two shards is refused) and counted against `split.tensors.count`, and a
/// file named as a shard beyond the count is refused. The header is the first shard's
/// (its metadata is the model's; `data_offset` and `file_len` are the first shard's) with every
/// shard's tensors, each [`TensorInfo::shard`] saying whose data section its offset is in.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    shards: Vec<Shard>,
    header: GgufHeader,
}

/// One file of a model: its path, an open handle, and where its tensor data starts.
#[derive(Debug)]
pub struct Shard {
    path: PathBuf,
    file: File,
    data_offset: u64,
    len: u64,
}

impl Shard {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open handle (for callers that issue their own reads, e.g. O_DIRECT).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Absolute file offset where this file's tensor data section starts.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Bytes of the file at open.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Opens and validates one GGUF file.
fn open_one(path: &Path, file: File) -> Result<(Shard, GgufHeader), GgufError> {
    let io = |source| GgufError::Io {
        path: path.display().to_string(),
        source,
    };
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
    let shard = Shard {
        path: path.to_path_buf(),
        file,
        data_offset: header.data_offset,
        len: file_len,
    };
    Ok((shard, header))
}

impl GgufFile {
    /// Opens and validates a GGUF file, or every shard of the split model whose first shard
    /// it is.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| GgufError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let (shard, header) = open_one(&path, file)?;
        let keys = SplitKeys::of(&header.metadata, &path)?;
        let mut model = GgufFile {
            path,
            shards: vec![shard],
            header,
        };
        if let Some(keys) = keys {
            model.open_other_shards(keys)?;
        }
        Ok(model)
    }

    /// Opens shards 2.. of the split whose first shard is open, as `keys` (the first shard's)
    /// describe it, and merges their tensors.
    fn open_other_shards(&mut self, keys: SplitKeys) -> Result<(), GgufError> {
        let count = keys.count;
        if keys.no != 0 {
            let first = shard_prefix(&self.path, keys.no, count).map_or_else(
                || format!("the file named PREFIX-00001-of-{count:05}.gguf"),
                |p| shard_path(&p, 0, count).display().to_string(),
            );
            return Err(GgufError::NotFirstShard {
                path: self.path.display().to_string(),
                no: keys.no,
                count,
                first,
            });
        }
        let expected = match keys.tensors {
            Some(n) => u64::from(n),
            None if count == 1 => self.header.tensors.len() as u64,
            None => {
                return Err(GgufError::SplitKey {
                    path: self.path.display().to_string(),
                    key: SPLIT_TENSORS_COUNT.to_string(),
                    reason: format!("is missing (a model split in {count} shards must give it)"),
                })
            }
        };
        if count > 1 {
            let prefix =
                shard_prefix(&self.path, 0, count).ok_or_else(|| GgufError::ShardName {
                    path: self.path.display().to_string(),
                    count,
                })?;
            let mut owner: HashMap<String, usize> = self
                .header
                .tensors
                .iter()
                .map(|t| (t.name.clone(), 0))
                .collect();
            for no in 1..count {
                let (shard, header) = open_shard(&shard_path(&prefix, no, count), no, keys)?;
                for mut t in header.tensors {
                    if let Some(&first) = owner.get(&t.name) {
                        return Err(GgufError::TensorInTwoShards {
                            name: t.name,
                            first: self.shards[first].path.display().to_string(),
                            second: shard.path.display().to_string(),
                        });
                    }
                    owner.insert(t.name.clone(), self.shards.len());
                    t.shard = self.shards.len();
                    self.header.tensors.push(t);
                }
                // Only the first shard's metadata is the model's; the others' is dropped.
                self.shards.push(shard);
            }
            refuse_extra_shards(&prefix, count)?;
        }
        let found = self.header.tensors.len() as u64;
        if found != expected {
            return Err(GgufError::SplitTensorCount {
                path: self.path.display().to_string(),
                expected,
                shards: count,
                found,
            });
        }
        Ok(())
    }

    /// The path the model was opened by (its first shard).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model's files: one, or every shard of a split in order.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Bytes of all the model's files together.
    pub fn total_len(&self) -> u64 {
        self.shards.iter().map(|s| s.len).sum()
    }

    /// Where each shard's tensor data starts, by shard index.
    pub fn data_offsets(&self) -> Vec<u64> {
        self.shards.iter().map(|s| s.data_offset).collect()
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

    /// The file that holds tensor `t`'s data.
    pub fn shard_of(&self, t: &TensorInfo) -> Result<&Shard, GgufError> {
        self.shards
            .get(t.shard)
            .ok_or_else(|| GgufError::NoSuchShard {
                tensor: t.name.clone(),
                shard: t.shard,
                shards: self.shards.len(),
            })
    }

    /// Absolute offset of a tensor's first byte in its shard's file (`u64::MAX` for a tensor
    /// naming a shard this model does not have).
    pub fn absolute_offset(&self, t: &TensorInfo) -> u64 {
        self.shards
            .get(t.shard)
            .map_or(u64::MAX, |s| s.data_offset.saturating_add(t.offset))
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
        let shard = self.shard_of(t)?;
        let offset = self.absolute_offset(t).saturating_add(start);
        read_exact_at(&shard.file, buf, offset).map_err(|(got, e)| match e {
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

    /// The error a read finds in shard `shard` cut to `len` bytes: a short read of the first
    /// tensor (in file order) the file no longer holds whole, at the offset where the file
    /// ends or where that tensor starts. `None` when every tensor's data still lies within
    /// `len`.
    pub fn short_read_at(&self, shard: usize, len: u64) -> Option<GgufError> {
        let (start, t) = self
            .header
            .tensors
            .iter()
            .filter(|t| t.shard == shard)
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

    /// Bytes of tensor `t`'s pages that are in the page cache now (`mincore` on a temporary
    /// mapping, which touches no page), or `None` where that cannot be told.
    pub fn cached_bytes(&self, t: &TensorInfo) -> Option<u64> {
        let map = self.map_tensor(t).ok()?;
        let page = page_size();
        let (base, len) = (map.map.as_ptr(), map.map.len());
        let mut resident = vec![0u8; len.div_ceil(page)];
        // SAFETY: `base..base + len` is a live mapping owned by `map`, and `resident` has one
        // byte per page of it, as mincore requires.
        let rc =
            unsafe { libc::mincore(base as *mut libc::c_void, len, resident.as_mut_ptr().cast()) };
        if rc != 0 {
            return None;
        }
        let pages = resident.iter().filter(|&&r| r & 1 == 1).count() as u64;
        Some((pages * page as u64).min(t.n_bytes))
    }

    /// Maps a tensor's bytes read-only. Pages are loaded on first touch and count towards
    /// the process's RSS while mapped.
    pub fn map_tensor(&self, t: &TensorInfo) -> Result<TensorMap, GgufError> {
        let shard = self.shard_of(t)?;
        let abs = self.absolute_offset(t);
        // A TensorInfo from another file could point past this one's end; mapping that
        // would "succeed" and fault on first touch.
        if abs.checked_add(t.n_bytes).is_none_or(|end| end > shard.len) {
            return Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: abs,
                size: t.n_bytes,
                file_len: shard.len,
            });
        }
        let page = page_size() as u64;
        let aligned = abs / page * page;
        let lead = (abs - aligned) as usize;
        let len = lead + t.n_bytes as usize;
        // SAFETY: read-only mapping of a range validated to lie inside the file at open.
        // If the file is truncated while mapped, touching the lost pages raises SIGBUS; the
        // streaming engine uses positional reads for that reason and maps only on request.
        let map = unsafe { MmapOptions::new().offset(aligned).len(len).map(&shard.file) }.map_err(
            |source| GgufError::ReadFailed {
                tensor: t.name.clone(),
                offset: abs,
                source,
            },
        )?;
        Ok(TensorMap { map, lead })
    }
}

/// Opens shard `no` at `path` and checks that its split keys say what the first shard's
/// (`first`) say, with its own index.
fn open_shard(path: &Path, no: u16, first: SplitKeys) -> Result<(Shard, GgufHeader), GgufError> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|source| GgufError::MissingShard {
        path: shown.clone(),
        no,
        count: first.count,
        source,
    })?;
    let (shard, header) = open_one(path, file).map_err(|e| GgufError::InShard {
        path: shown.clone(),
        source: Box::new(e),
    })?;
    let mismatch = |key, found: String, expected: String| GgufError::ShardMismatch {
        path: shown.clone(),
        key,
        found,
        expected,
    };
    let keys = SplitKeys::of(&header.metadata, path)?
        .ok_or_else(|| mismatch(SPLIT_COUNT, "absent".into(), first.count.to_string()))?;
    if keys.count != first.count {
        return Err(mismatch(
            SPLIT_COUNT,
            keys.count.to_string(),
            first.count.to_string(),
        ));
    }
    if keys.no != no {
        return Err(mismatch(SPLIT_NO, keys.no.to_string(), no.to_string()));
    }
    if keys.tensors != first.tensors {
        let show = |n: Option<u32>| n.map_or_else(|| "absent".to_string(), |n| n.to_string());
        return Err(mismatch(
            SPLIT_TENSORS_COUNT,
            show(keys.tensors),
            show(first.tensors),
        ));
    }
    Ok((shard, header))
}

/// Fails if the directory of a split holds a file named as a shard of `prefix` that is not one
/// of its `count` shards (`PREFIX-00004-of-00003.gguf`, or `PREFIX-00001-of-00004.gguf` beside a
/// 3-shard set): a leftover of another split that would otherwise be silently ignored. A
/// directory that cannot be listed is not checked (its shards were opened by name).
fn refuse_extra_shards(prefix: &Path, count: u16) -> Result<(), GgufError> {
    let Some(stem) = prefix.file_name().and_then(|s| s.to_str()) else {
        return Ok(());
    };
    let dir = match prefix.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((p, no, n)) = name.to_str().and_then(parse_shard_name) else {
            continue;
        };
        if p == stem && !(n == u32::from(count) && (1..=n).contains(&no)) {
            return Err(GgufError::ExtraShard {
                path: entry.path().display().to_string(),
                count,
            });
        }
    }
    Ok(())
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
