//! Where a streamed layer's matrices lie: in the file, grouped into a few aligned segments, and
//! in a streaming buffer (or in place in mapped windows).
//!
//! Matrices that lie close together in the file (only norms between them) are merged into one
//! segment, and each segment is widened to [`ALIGN`]-aligned file offsets and read whole into an
//! aligned place in the buffer. A matrix is then used in place, at its offset inside its segment.

use super::aligned::{round_up, ALIGN};
use super::mapped::Window;
use crate::model::LayerTensors;
use ramforge_gguf::{GgufError, TensorInfo};
use std::fs::File;

/// Matrices closer than this in the file are read as one segment (what lies between them, the
/// norms, is read and ignored).
pub const MERGE_GAP: u64 = 256 << 10;

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
pub(super) struct Segment {
    pub(super) file_start: u64,
    pub(super) len: u64,
    pub(super) buf_start: usize,
    /// The file offset up to which the segment's bytes are needed (a read may end at EOF
    /// past it).
    pub(super) needed_end: u64,
}

/// Where a layer's matrices lie in the file and in a streaming buffer.
#[derive(Clone, Debug)]
pub struct LayerLayout {
    segments: Vec<Segment>,
    /// The matrices in [`LayerTensors::matrices`] order.
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
/// Ranges closer than `gap` share a segment.
fn group(ranges: &[(u64, u64)], gap: u64) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].0);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut end = 0u64;
    for i in order {
        let (start, len) = ranges[i];
        match groups.last_mut() {
            Some(g) if start <= end.saturating_add(gap) => g.push(i),
            _ => groups.push(vec![i]),
        }
        end = end.max(start + len);
    }
    groups
}

/// The most bytes the aligned segments of these `(start, len)` ranges can need, wherever the
/// data starts.
fn bound_of(ranges: &[(u64, u64)], gap: u64) -> u64 {
    group(ranges, gap)
        .iter()
        .map(|g| {
            let (start, end) = span(ranges, g);
            round_up(end - start) + ALIGN
        })
        .sum()
}

impl LayerLayout {
    /// The layout of `layer` in a file whose tensor data starts at `data_offset`.
    pub fn new(layer: &LayerTensors, data_offset: u64) -> LayerLayout {
        let pieces = layer
            .matrices()
            .map(|t| (t.name.clone(), data_offset + t.offset, t.n_bytes))
            .collect();
        LayerLayout::of_pieces(pieces, MERGE_GAP)
    }

    /// The layout of expert `x`'s three slices (in the order of `stacks`: gate, up, down) of
    /// an MoE layer with `n_expert` experts. Slices are never merged across a gap: what lies
    /// between them is other experts, which the router did not select.
    pub fn of_expert(
        stacks: &[TensorInfo; 3],
        x: usize,
        n_expert: usize,
        data_offset: u64,
    ) -> LayerLayout {
        let pieces = stacks
            .iter()
            .map(|t| {
                let len = t.n_bytes / n_expert as u64;
                (
                    format!("{} (expert {x})", t.name),
                    data_offset + t.offset + x as u64 * len,
                    len,
                )
            })
            .collect();
        LayerLayout::of_pieces(pieces, 0)
    }

    /// The layout of named `(name, absolute file offset, length)` pieces, used in this order;
    /// pieces closer than `gap` are read as one segment.
    fn of_pieces(pieces: Vec<(String, u64, u64)>, gap: u64) -> LayerLayout {
        let ranges: Vec<(u64, u64)> = pieces.iter().map(|p| (p.1, p.2)).collect();
        let mut placed: Vec<Option<Placed>> = vec![None; pieces.len()];
        let mut segments = Vec::new();
        let mut buf_at = 0usize;
        for g in group(&ranges, gap) {
            let (start, end) = span(&ranges, &g);
            let file_start = start / ALIGN * ALIGN;
            let len = round_up(end) - file_start;
            for &i in &g {
                placed[i] = Some(Placed {
                    name: pieces[i].0.clone(),
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
        let ranges: Vec<(u64, u64)> = layer.matrices().map(|t| (t.offset, t.n_bytes)).collect();
        bound_of(&ranges, MERGE_GAP)
    }

    /// [`LayerLayout::bound`] for one expert's slices, the largest over the layer's
    /// `n_expert` experts (what one expert buffer must hold).
    pub fn expert_bound(layer: &LayerTensors, n_expert: usize) -> u64 {
        let Some(stacks) = layer.expert_stacks() else {
            return 0;
        };
        (0..n_expert as u64)
            .map(|x| {
                let ranges: Vec<(u64, u64)> = stacks
                    .iter()
                    .map(|t| {
                        let len = t.n_bytes / n_expert as u64;
                        (t.offset + x * len, len)
                    })
                    .collect();
                bound_of(&ranges, 0)
            })
            .max()
            .unwrap_or(0)
    }

    /// The aligned reads that fill the buffer, in file order.
    pub(super) fn segments(&self) -> &[Segment] {
        &self.segments
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
    pub(super) fn short_read(&self, at: u64) -> GgufError {
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
    pub(super) fn failed_at(
        &self,
        at: u64,
        size: Option<u64>,
        source: std::io::Error,
    ) -> GgufError {
        size.and_then(|size| self.ends_short(size))
            .unwrap_or_else(|| GgufError::ReadFailed {
                tensor: self.matrix_at(at).name.clone(),
                offset: at,
                source,
            })
    }

    /// The bytes of the `i`-th matrix (in [`LayerTensors::matrices`] order) in a buffer
    /// filled by [`super::reader::StreamFile::read_layer`].
    pub fn buffered_matrix<'a>(&self, buf: &'a [u8], i: usize) -> &'a [u8] {
        let p = &self.placed[i];
        &buf[p.buf_start..p.buf_start + p.len as usize]
    }

    /// The bytes of the `i`-th matrix in place in the windows of [`LayerLayout::map`].
    pub fn mapped_matrix<'a>(&self, mapped: &'a MappedLayer, i: usize) -> &'a [u8] {
        let p = &self.placed[i];
        let at = (p.file_start - self.segments[p.segment].file_start) as usize;
        &mapped.windows[p.segment].bytes()[at..at + p.len as usize]
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
                Window::map(file, s.file_start, s.len as usize)
                    .map_err(|_| MapError::Unsupported)?,
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
    Unsupported,
    /// The file does not hold the layer, or storage failed.
    Failed(GgufError),
}
