//! The read path for streamed layers: large aligned reads with `O_DIRECT`, so streaming neither
//! doubles memory in the page cache nor competes with it under a memory limit, and buffered
//! positional reads (with `posix_fadvise` hints) where `O_DIRECT` is refused (e.g. tmpfs).
//!
//! A layer's seven matrices are read as a few segments: matrices that lie close together in the
//! file (only norms between them) are merged, and each segment is widened to [`ALIGN`]-aligned
//! file offsets and read whole into an aligned place in the buffer. A matrix is then used in
//! place, at its offset inside its segment.
//!
//! When the page cache already holds the file ([`ReadMode::Cached`]), segments are not copied
//! at all: each is mapped as a [`Window`] and the matrices are used in place.

use crate::budget::{Charge, MemoryBudget};
use crate::error::EngineError;
use crate::mapped::Window;
use crate::tensors::LayerTensors;
use ramforge_gguf::GgufError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Alignment of `O_DIRECT` offsets, lengths and buffer addresses (covers 512 B and 4 KiB
/// logical blocks).
pub const ALIGN: u64 = 4096;
/// Buffered streaming reads drop what they read from the page cache every this many bytes.
const DROP_CHUNK: usize = 4 << 20;
/// How far past a read the kernel's readahead may have gone (twice a large 8 MiB window,
/// asynchronous readahead included): dropped when the stream jumps elsewhere.
const READAHEAD_TAIL: u64 = 32 << 20;
/// The largest page-cache folio (a PMD on x86-64 and 4 KiB-page arm64): page-cache folios
/// are naturally aligned, so dropping from a multiple of this never splits one.
const FOLIO: u64 = 2 << 20;
/// Matrices closer than this in the file are read as one segment (what lies between them, the
/// norms, is read and ignored).
pub const MERGE_GAP: u64 = 256 << 10;

fn round_up(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// One matrix's place: its name (for errors), file range, and offset in the buffer.
#[derive(Clone, Debug)]
struct Placed {
    name: String,
    file_start: u64,
    len: u64,
    buf_start: usize,
    /// The segment that holds it.
    segment: usize,
}

/// One aligned read.
#[derive(Clone, Debug)]
struct Segment {
    file_start: u64,
    len: u64,
    buf_start: usize,
    /// The file offset up to which the segment's bytes are needed (a read may end at EOF
    /// past it).
    needed_end: u64,
}

/// Where a layer's matrices lie in the file and in a streaming buffer.
#[derive(Clone, Debug)]
pub struct LayerLayout {
    segments: Vec<Segment>,
    /// The seven matrices in [`LayerTensors::matrices`] order.
    placed: Vec<Placed>,
    buffer_len: usize,
}

/// The file range `(start, end)` that the ranges of one group cover together.
fn span(ranges: &[(u64, u64)], group: &[usize]) -> (u64, u64) {
    let start = group.iter().map(|&i| ranges[i].0).min().unwrap_or(0);
    let end = group
        .iter()
        .map(|&i| ranges[i].0 + ranges[i].1)
        .max()
        .unwrap_or(0);
    (start, end)
}

/// Merges the matrices' `(start, len)` ranges (relative or absolute offsets) into segments:
/// lists of matrix indices, in file order.
fn group(ranges: &[(u64, u64)]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].0);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut end = 0u64;
    for i in order {
        let (start, len) = ranges[i];
        match groups.last_mut() {
            Some(g) if start <= end.saturating_add(MERGE_GAP) => g.push(i),
            _ => groups.push(vec![i]),
        }
        end = end.max(start + len);
    }
    groups
}

impl LayerLayout {
    /// The layout of `layer` in a file whose tensor data starts at `data_offset`.
    pub fn new(layer: &LayerTensors, data_offset: u64) -> LayerLayout {
        let matrices = layer.matrices();
        let ranges: Vec<(u64, u64)> = matrices
            .iter()
            .map(|t| (data_offset + t.offset, t.n_bytes))
            .collect();
        let mut placed: Vec<Option<Placed>> = vec![None; matrices.len()];
        let mut segments = Vec::new();
        let mut buf_at = 0usize;
        for g in group(&ranges) {
            let (start, end) = span(&ranges, &g);
            let file_start = start / ALIGN * ALIGN;
            let len = round_up(end) - file_start;
            for &i in &g {
                placed[i] = Some(Placed {
                    name: matrices[i].name.clone(),
                    file_start: ranges[i].0,
                    len: ranges[i].1,
                    buf_start: buf_at + (ranges[i].0 - file_start) as usize,
                    segment: segments.len(),
                });
            }
            segments.push(Segment {
                file_start,
                len,
                buf_start: buf_at,
                needed_end: end,
            });
            buf_at += len as usize;
        }
        LayerLayout {
            segments,
            placed: placed.into_iter().flatten().collect(),
            buffer_len: buf_at,
        }
    }

    /// The most bytes the layout of `layer` can need, wherever the tensor data starts (the
    /// plan sizes the streaming buffers with this before the file is opened for streaming).
    pub fn bound(layer: &LayerTensors) -> u64 {
        let ranges: Vec<(u64, u64)> = layer
            .matrices()
            .iter()
            .map(|t| (t.offset, t.n_bytes))
            .collect();
        group(&ranges)
            .iter()
            .map(|g| {
                let (start, end) = span(&ranges, g);
                round_up(end - start) + ALIGN
            })
            .sum()
    }

    /// Bytes of the buffer this layout fills.
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    /// Bytes read from the file to fill it.
    pub fn read_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }

    /// The matrix that holds file offset `offset` (or the last one before it), for errors.
    fn matrix_at(&self, offset: u64) -> &Placed {
        self.placed
            .iter()
            .filter(|p| p.file_start <= offset)
            .max_by_key(|p| p.file_start)
            .unwrap_or(&self.placed[0])
    }

    /// The error for a file that ends at `at`, inside the layer.
    fn short_read(&self, at: u64) -> GgufError {
        let m = self.matrix_at(at);
        GgufError::ShortRead {
            tensor: m.name.clone(),
            offset: at,
            wanted: m.len,
            got: at.saturating_sub(m.file_start).min(m.len),
        }
    }

    /// The short read of a file that ends at `size`, if that is before the layer's end: at
    /// the first segment the file does not hold whole, as [`LayerLayout::read_into`] reports.
    fn ends_short(&self, size: u64) -> Option<GgufError> {
        let s = self.segments.iter().find(|s| s.needed_end > size)?;
        Some(self.short_read(size.max(s.file_start)))
    }

    /// The error for a failure at file offset `at`: a short read where the file ends now
    /// (`size`) if it no longer holds the layer, else `source` at `at`.
    fn failed_at(&self, at: u64, size: Option<u64>, source: std::io::Error) -> GgufError {
        size.and_then(|size| self.ends_short(size))
            .unwrap_or_else(|| GgufError::ReadFailed {
                tensor: self.matrix_at(at).name.clone(),
                offset: at,
                source,
            })
    }

    /// The seven matrices' bytes (in [`LayerTensors::matrices`] order) in a buffer filled by
    /// [`LayerLayout::read_into`].
    pub fn buffered_matrices<'a>(&self, buf: &'a [u8]) -> [&'a [u8]; 7] {
        std::array::from_fn(|i| {
            let p = &self.placed[i];
            &buf[p.buf_start..p.buf_start + p.len as usize]
        })
    }

    /// The seven matrices' bytes in place in the windows of [`LayerLayout::map`].
    pub fn mapped_matrices<'a>(&self, mapped: &'a MappedLayer) -> [&'a [u8]; 7] {
        std::array::from_fn(|i| {
            let p = &self.placed[i];
            let at = (p.file_start - self.segments[p.segment].file_start) as usize;
            &mapped.windows[p.segment].bytes()[at..at + p.len as usize]
        })
    }

    /// Maps every segment of the layer from `file` and fills the windows' page tables.
    /// The file size is checked first, so a file cut short fails here (a short read naming
    /// the tensor and where the file ends) rather than faulting later.
    pub fn map(&self, file: &File) -> Result<MappedLayer, MapError> {
        let first = self.segments.first().map_or(0, |s| s.file_start);
        let size = file.metadata().map(|m| m.len());
        let size = size.map_err(|e| MapError::Failed(self.failed_at(first, None, e)))?;
        if let Some(e) = self.ends_short(size) {
            return Err(MapError::Failed(e));
        }
        let mut windows = Vec::with_capacity(self.segments.len());
        for s in &self.segments {
            windows.push(
                Window::map(file, s.file_start, s.len as usize).map_err(MapError::Unsupported)?,
            );
        }
        for (w, s) in windows.iter().zip(&self.segments) {
            if let Err(e) = w.populate() {
                let size = file.metadata().map(|m| m.len()).ok();
                return Err(MapError::Failed(self.failed_at(s.file_start, size, e)));
            }
        }
        Ok(MappedLayer { windows })
    }

    /// After the compute used `mapped`: fails if a read found a page missing (the file was
    /// cut, or storage failed) and so saw zeros, or if the file no longer holds the layer
    /// (a cut that left the pages the compute read mapped, zero-filled past the end).
    pub fn check(&self, mapped: &MappedLayer, file: &File) -> Result<(), GgufError> {
        let first = self.segments.first().map_or(0, |s| s.file_start);
        let size = file
            .metadata()
            .map_err(|e| self.failed_at(first, None, e))?
            .len();
        if let Some(e) = self.ends_short(size) {
            return Err(e);
        }
        match mapped.windows.iter().filter_map(Window::fault).min() {
            None => Ok(()),
            Some(at) => Err(self.failed_at(
                at,
                None,
                std::io::Error::other("bus error reading the mapped model file"),
            )),
        }
    }

    /// Reads every segment into `buf` (at least [`LayerLayout::buffer_len`] bytes, aligned).
    pub fn read_into(&self, file: &mut StreamFile, buf: &mut [u8]) -> Result<u64, GgufError> {
        let mut read = 0;
        for s in &self.segments {
            let dst = &mut buf[s.buf_start..s.buf_start + s.len as usize];
            let needed = (s.needed_end - s.file_start) as usize;
            read += file
                .read_segment(s.file_start, dst, needed)
                .map_err(|(got, e)| {
                    let at = s.file_start + got;
                    match e {
                        None => self.short_read(at),
                        Some(source) => self.failed_at(at, None, source),
                    }
                })?;
        }
        Ok(read)
    }
}

/// A streamed layer mapped in place: one window per segment of its [`LayerLayout`]. Its pages
/// count in the process's RSS until it is dropped (unmapped).
pub struct MappedLayer {
    windows: Vec<Window>,
}

/// Why [`LayerLayout::map`] failed.
#[derive(Debug)]
pub enum MapError {
    /// The file cannot be mapped here (copy it instead).
    Unsupported(std::io::Error),
    /// The file does not hold the layer, or storage failed.
    Failed(GgufError),
}

/// How streamed layers are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Around the page cache (`O_DIRECT`), falling back to buffered reads that are dropped
    /// from the cache right after (`POSIX_FADV_DONTNEED`).
    Direct,
    /// Used in place from a page cache that already holds the file (mapped windows; a warm
    /// cache is faster than any storage, and dropping it would force the next pass to
    /// storage), falling back to buffered reads where the file cannot be mapped.
    Cached,
}

/// The share of the streamed layers that must be in the page cache for [`ReadMode::Cached`].
pub const WARM_FRACTION: f64 = 0.9;

/// Consecutive layer reads each path gets while [`StreamFile`] compares them (the first of
/// each run is not counted: it pays for the switch, e.g. readahead ramping up).
const PROBE_READS: u32 = 4;
/// How much faster buffered reads must measure to replace `O_DIRECT` (noise margin).
const BUFFERED_MARGIN: f64 = 1.25;

/// Bytes and seconds of the layer reads made one way.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadRate {
    pub bytes: u64,
    pub secs: f64,
}

impl ReadRate {
    fn per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 / self.secs
        } else {
            f64::INFINITY
        }
    }
}

/// Whether cold layer reads should stay `O_DIRECT`, given what the first reads each way
/// measured: yes unless buffered reads (dropped from the cache right after) were clearly
/// faster. Some storage serves the page cache's asynchronous readahead much faster than
/// synchronous direct reads (this project's VM: about 1.7 GB/s against 0.75).
pub fn keep_direct(direct: ReadRate, buffered: ReadRate) -> bool {
    buffered.per_sec() <= BUFFERED_MARGIN * direct.per_sec()
}

/// The comparison of the two read paths over the first cold layer reads: a run of direct
/// reads, then a run of buffered ones (alternating single reads would defeat readahead).
#[derive(Default)]
struct ReadProbe {
    direct: ReadRate,
    buffered: ReadRate,
    reads: u32,
}

/// The model file opened for streaming: with `O_DIRECT` where the file system allows it, and a
/// buffered handle for the fallback.
pub struct StreamFile {
    direct: Option<File>,
    buffered: File,
    drop_cached: bool,
    /// Layers are mapped in place rather than read.
    mapped: bool,
    /// Reads use `direct` (when there is one) only while this holds: the probe alternates it.
    use_direct: bool,
    /// While `Some`, the first layer reads compare the two paths; then the slower one is
    /// dropped (see [`keep_direct`]).
    probe: Option<ReadProbe>,
    /// Where the last buffered read that dropped its pages ended.
    read_end: Option<u64>,
}

impl StreamFile {
    /// Opens `path` for streaming; `buffered` is a handle on the same file (duplicated, so the
    /// engine's reads and these share the file even if the path is replaced later).
    pub fn open(path: &Path, buffered: &File, mode: ReadMode) -> std::io::Result<StreamFile> {
        // The kernel's default readahead, not POSIX_FADV_SEQUENTIAL's doubled window: what it
        // reads ahead sits in the page cache, under a memory limit that counts it.
        let buffered = buffered.try_clone()?;
        let direct = match mode {
            ReadMode::Direct => OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .ok()
                // Only if it is still the same file as the engine's handle.
                .filter(|d| same_file(d, &buffered)),
            ReadMode::Cached => None,
        };
        let probe = direct.is_some().then(ReadProbe::default);
        Ok(StreamFile {
            direct,
            buffered,
            drop_cached: mode == ReadMode::Direct,
            mapped: mode == ReadMode::Cached,
            use_direct: true,
            probe,
            read_end: None,
        })
    }

    /// Whether reads still go around the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Whether layers are still mapped in place.
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// The buffered handle (mapped windows are made from it).
    pub fn file(&self) -> &File {
        &self.buffered
    }

    /// Makes `layout`'s layer available: mapped in place (returned) when the file is mapped,
    /// else read into `buf`. A file that cannot be mapped is read from then on. Returns the
    /// bytes read or mapped.
    pub fn fill(
        &mut self,
        layout: &LayerLayout,
        buf: &mut AlignedBuf,
    ) -> Result<(u64, Option<MappedLayer>), GgufError> {
        if self.mapped {
            match layout.map(&self.buffered) {
                Ok(m) => return Ok((layout.read_bytes(), Some(m))),
                Err(MapError::Failed(e)) => return Err(e),
                Err(MapError::Unsupported(_)) => self.mapped = false,
            }
        }
        let Some(probe) = &self.probe else {
            return Ok((layout.read_into(self, buf.bytes_mut())?, None));
        };
        // Probing: a run of direct reads, then a run of buffered ones.
        let direct = probe.reads < PROBE_READS;
        let counted = probe.reads % PROBE_READS != 0;
        self.use_direct = direct;
        let started = std::time::Instant::now();
        let result = layout.read_into(self, buf.bytes_mut());
        self.use_direct = true;
        let n = result?;
        let secs = started.elapsed().as_secs_f64();
        if let Some(probe) = &mut self.probe {
            let rate = if direct {
                &mut probe.direct
            } else {
                &mut probe.buffered
            };
            if counted {
                rate.bytes += n;
                rate.secs += secs;
            }
            probe.reads += 1;
            if probe.reads >= 2 * PROBE_READS {
                if !keep_direct(probe.direct, probe.buffered) {
                    self.direct = None;
                }
                self.probe = None;
            }
        }
        Ok((n, None))
    }

    /// Reads `dst.len()` bytes at the aligned `offset`; reaching the end of the file is fine
    /// once `needed` bytes are in. On failure: the bytes read and the error (`None`: end of
    /// file).
    fn read_segment(
        &mut self,
        offset: u64,
        dst: &mut [u8],
        needed: usize,
    ) -> Result<u64, (u64, Option<std::io::Error>)> {
        if let Some(direct) = self.direct.as_ref().filter(|_| self.use_direct) {
            match read_at_least(direct, dst, offset, needed) {
                Err((0, Some(e))) if e.raw_os_error() == Some(libc::EINVAL) => {
                    // The file system (or this buffer) does not do O_DIRECT: buffered from now on.
                    self.direct = None;
                }
                other => return other,
            }
        }
        if !self.drop_cached {
            return read_at_least(&self.buffered, &mut dst[..needed], offset, needed);
        }
        // Streamed bytes are not wanted in the page cache: they are read again next pass, long
        // after a cache under memory pressure would have kept them. Dropping them chunk by
        // chunk keeps the cache's share to a chunk plus the readahead window; a whole segment
        // at once can overrun a memory limit's headroom and make every read reclaim.
        let stale = self.stale_readahead(offset);
        let mut done = 0usize;
        while done < needed {
            let end = (done + DROP_CHUNK).min(needed);
            let r = read_at_least(
                &self.buffered,
                &mut dst[done..end],
                offset + done as u64,
                end - done,
            );
            drop_read(&self.buffered, offset + done as u64, offset + end as u64);
            r.map_err(|(got, e)| (done as u64 + got, e))?;
            done = end;
        }
        self.read_end = Some(offset + needed as u64);
        if let Some(range) = stale {
            // Dropped only now: at the jump the readahead there was still in flight, and
            // pages under I/O are not dropped.
            advise(
                &self.buffered,
                range.start,
                range.end - range.start,
                libc::POSIX_FADV_DONTNEED,
            );
        }
        Ok(done as u64)
    }

    /// What the kernel read ahead past the last read, when a read at `offset` does not
    /// continue it (the stream skips pinned layers, or starts the next pass): that will not
    /// be read next, and would sit in the page cache until reclaimed.
    fn stale_readahead(&self, offset: u64) -> Option<std::ops::Range<u64>> {
        let end = self.read_end.filter(|&end| end != offset)?;
        // The folio holding `end` was read up to there; a read further on stops the range
        // at its own folio.
        let start = end / FOLIO * FOLIO;
        let stop = if offset > end {
            offset / FOLIO * FOLIO
        } else {
            u64::MAX
        };
        let range = start..(end + READAHEAD_TAIL).min(stop);
        (range.end > range.start).then_some(range)
    }
}

/// Reads into `dst` from `offset` until it is full or the file ends with at least `needed`
/// bytes in.
fn read_at_least(
    file: &File,
    dst: &mut [u8],
    offset: u64,
    needed: usize,
) -> Result<u64, (u64, Option<std::io::Error>)> {
    let mut got = 0usize;
    while got < dst.len() {
        match file.read_at(&mut dst[got..], offset + got as u64) {
            Ok(0) if got >= needed => break,
            Ok(0) => return Err((got as u64, None)),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err((got as u64, Some(e))),
        }
    }
    Ok(got as u64)
}

fn same_file(a: &File, b: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (a.metadata(), b.metadata()) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Drops bytes `from..to` of `file`, just read, from the page cache. The kernel drops only
/// whole folios inside the range, so the drop starts at the folio boundary at or before
/// `from`: a folio that the previous read's drop left because it ran past that read's end
/// goes now, and successive reads drop everything they read.
pub fn drop_read(file: &File, from: u64, to: u64) {
    let start = from / FOLIO * FOLIO;
    advise(file, start, to - start, libc::POSIX_FADV_DONTNEED);
}

/// A `posix_fadvise` hint; hints are advice, so a refusal is ignored.
pub fn advise(file: &File, offset: u64, len: u64, advice: libc::c_int) {
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            advice,
        );
    }
}

/// A budget-charged byte buffer whose usable part starts at an [`ALIGN`]-aligned address.
/// The memory is allocated on first use: a ring slot that holds mapped windows (under the
/// same charge) never allocates it.
pub struct AlignedBuf {
    // Field order: the memory is freed before the charge is released.
    data: Vec<u8>,
    start: usize,
    len: usize,
    _charge: Charge,
}

impl AlignedBuf {
    /// Charges `len` bytes plus the alignment slack to `budget` as `what`.
    pub fn new(budget: &MemoryBudget, what: &str, len: usize) -> Result<AlignedBuf, EngineError> {
        let charge = budget.charge(what, len as u64 + ALIGN)?;
        Ok(AlignedBuf {
            data: Vec::new(),
            start: 0,
            len,
            _charge: charge,
        })
    }

    /// The bytes (empty until [`AlignedBuf::bytes_mut`] allocated them).
    pub fn bytes(&self) -> &[u8] {
        self.data
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.data.is_empty() {
            self.data = vec![0u8; self.len + ALIGN as usize];
            self.start = self.data.as_ptr().align_offset(ALIGN as usize);
        }
        &mut self.data[self.start..self.start + self.len]
    }
}

/// Bytes [`AlignedBuf::new`] charges for `len` usable bytes.
pub fn aligned_buf_charge(len: u64) -> u64 {
    len + ALIGN
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(mib: u64, secs: f64) -> ReadRate {
        ReadRate {
            bytes: mib << 20,
            secs,
        }
    }

    /// A file of `len` bytes where byte `i` is `(i * 7 + i / 4093) as u8` (no period that
    /// a chunk or page size would hide), next to the test binary: on disk, where the page
    /// cache can drop it (unlike tmpfs, a common temp dir).
    fn patterned_file(tag: &str, len: usize) -> (std::path::PathBuf, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4093) as u8).collect();
        let exe = std::env::current_exe().unwrap();
        let path = exe.with_file_name(format!("ramforge-dio-{tag}-{}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    /// A [`patterned_file`] none of whose pages the page cache holds, and a handle on it.
    fn evicted_file(tag: &str, len: usize) -> (std::path::PathBuf, File) {
        let (path, _) = patterned_file(tag, len);
        let file = File::open(&path).unwrap();
        // Written pages are dirty, and only clean ones can be dropped.
        file.sync_all().unwrap();
        advise(&file, 0, 0, libc::POSIX_FADV_DONTNEED);
        assert_eq!(cached_pages(&file, 0..len as u64), 0, "evicted");
        (path, file)
    }

    /// A stream on `path` that reads buffered, dropping what it read from the page cache.
    fn buffered_stream(path: &Path) -> StreamFile {
        let file = File::open(path).unwrap();
        let mut stream = StreamFile::open(path, &file, ReadMode::Direct).unwrap();
        stream.use_direct = false;
        stream
    }

    /// Pages of `file` in `range` that the page cache holds.
    fn cached_pages(file: &File, range: std::ops::Range<u64>) -> usize {
        let len = (range.end - range.start) as usize;
        // SAFETY: a fresh shared read-only mapping of an open file, unmapped below; mincore
        // writes one byte per page of it into `vec`, which has that many.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                range.start as libc::off_t,
            );
            assert_ne!(at, libc::MAP_FAILED);
            let mut vec = vec![0u8; len.div_ceil(4096)];
            assert_eq!(libc::mincore(at, len, vec.as_mut_ptr()), 0);
            libc::munmap(at, len);
            vec.iter().filter(|&&b| b & 1 != 0).count()
        }
    }

    #[test]
    fn buffered_reads_across_drop_chunks_return_every_byte_in_place() {
        let len = 2 * DROP_CHUNK + 3 * ALIGN as usize + 123;
        let (path, bytes) = patterned_file("chunks", len);
        // A segment from an aligned offset to past the end of the file: the last chunk is
        // short, and the end of the file after `needed` bytes is fine.
        let offset = ALIGN;
        let needed = len - offset as usize;
        let mut dst = vec![0u8; round_up(len as u64) as usize];
        let got = buffered_stream(&path)
            .read_segment(offset, &mut dst, needed)
            .unwrap();
        assert_eq!(got, needed as u64);
        assert!(dst[..needed] == bytes[offset as usize..]);

        // A file cut inside the second chunk: the error counts exactly the bytes read.
        let cut = DROP_CHUNK + 5000;
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let (got, err) = buffered_stream(&path)
            .read_segment(0, &mut dst, len)
            .unwrap_err();
        assert_eq!(got, cut as u64);
        assert!(err.is_none(), "the end of the file is not an I/O error");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn buffered_reads_leave_nothing_they_read_in_the_page_cache() {
        // Segments that start and end off the folio grid, as layers do: every whole folio
        // they covered is dropped, including the ones split by a chunk's end.
        // Long enough for readahead to ramp up to folios of FOLIO bytes.
        let len = 20 * FOLIO as usize;
        let (path, file) = evicted_file("dropped", len);
        let mut stream = buffered_stream(&path);
        let mut dst = vec![0u8; len];
        let first = (ALIGN, 2 * FOLIO + 5 * ALIGN);
        let second = (first.1, 19 * FOLIO + 3 * ALIGN);
        for (start, end) in [first, second] {
            let needed = (end - start) as usize;
            stream
                .read_segment(start, &mut dst[..needed], needed)
                .unwrap();
        }
        // Everything read, from the first folio to the last one the reads finished.
        let dropped = 0..second.1 / FOLIO * FOLIO;
        let cached = cached_pages(&file, dropped.clone());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(cached, 0, "pages of {dropped:?} still cached");
    }

    #[test]
    fn a_jump_drops_what_the_kernel_read_ahead_past_the_last_read() {
        let len = 20 * FOLIO as usize;
        let (path, file) = evicted_file("tail", len);
        let mut stream = buffered_stream(&path);
        let mut dst = vec![0u8; len];
        // Each read, then time for the readahead past it to land (as a layer's compute
        // gives it): pages still under I/O are not dropped.
        let mut read = |(start, end): (u64, u64)| {
            let needed = (end - start) as usize;
            stream
                .read_segment(start, &mut dst[..needed], needed)
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        // A long sequential read (readahead runs past its end), then one back at the start
        // (the next pass), then one further on (past pinned layers).
        let first = (2 * FOLIO + ALIGN, 8 * FOLIO + 3 * ALIGN);
        let back = (0, FOLIO);
        let ahead = (16 * FOLIO, 17 * FOLIO);
        read(first);
        read(back);
        let past_first = first.1 / FOLIO * FOLIO..len as u64;
        let cached = cached_pages(&file, past_first.clone());
        assert_eq!(cached, 0, "pages of {past_first:?} still cached");
        read(ahead);
        let between = back.1..ahead.0;
        let cached = cached_pages(&file, between.clone());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(cached, 0, "pages of {between:?} still cached");
    }

    #[test]
    fn direct_reads_stay_unless_buffered_ones_are_clearly_faster() {
        // Equal, or buffered a little faster (noise): O_DIRECT stays.
        assert!(keep_direct(rate(300, 0.5), rate(300, 0.5)));
        assert!(keep_direct(rate(300, 0.5), rate(300, 0.42)));
        // Buffered readahead twice as fast (this project's VM): buffered reads.
        assert!(!keep_direct(rate(300, 0.5), rate(300, 0.25)));
        // Direct faster: stays, whatever the margin.
        assert!(keep_direct(rate(300, 0.2), rate(300, 0.9)));
        // A path that measured nothing (zero time) counts as infinitely fast.
        assert!(!keep_direct(rate(300, 0.5), rate(0, 0.0)));
        assert!(keep_direct(rate(0, 0.0), rate(300, 0.1)));
    }
}
