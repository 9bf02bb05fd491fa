//! Where a streamed layer's matrices lie: in the file, grouped into a few aligned segments, and
//! in a streaming buffer (or in place in mapped windows).
//!
//! Matrices that lie close together in the file (only norms between them) are merged into one
//! segment, and each segment is widened to [`ALIGN`]-aligned file offsets and read whole into an
//! aligned place in the buffer. A matrix is then used in place, at its offset inside its segment.
//!
//! A split model's layer may lie in two shards: every piece and segment names its shard (the
//! index of the model's file, 0 for a file of its own), offsets are in that shard's file, and
//! only pieces of the same shard are merged.

use super::aligned::{round_up, ALIGN};
use super::mapped::Window;
use crate::model::LayerTensors;
use ramforge_gguf::{GgufError, TensorInfo};
use std::fs::File;

/// Matrices closer than this in the file are read as one segment (what lies between them, the
/// norms, is read and ignored).
pub const MERGE_GAP: u64 = 256 << 10;

/// One matrix's place: its name (for errors), shard and file range, and offset in the buffer.
#[derive(Clone, Debug)]
struct Placed {
    name: String,
    shard: usize,
    file_start: u64,
    len: u64,
    buf_start: usize,
    /// The segment that holds it.
    segment: usize,
}

/// One aligned read.
#[derive(Clone, Debug)]
pub(super) struct Segment {
    /// The model file (shard) read.
    pub(super) shard: usize,
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
fn span(ranges: &[Range], group: &[usize]) -> (u64, u64) {
    let start = group.iter().map(|&i| ranges[i].start).min().unwrap_or(0);
    let end = group
        .iter()
        .map(|&i| ranges[i].start.saturating_add(ranges[i].len))
        .max()
        .unwrap_or(0);
    (start, end)
}

/// A piece's place in the model's files: shard, offset (relative or absolute) and length.
#[derive(Clone, Copy, Debug)]
struct Range {
    shard: usize,
    start: u64,
    len: u64,
}

/// Merges the matrices' ranges into segments: lists of matrix indices, in file order (shard
/// by shard). Ranges of one shard closer than `gap` share a segment.
fn group(ranges: &[Range], gap: u64) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| (ranges[i].shard, ranges[i].start));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let (mut shard, mut end) = (0usize, 0u64);
    for i in order {
        let r = ranges[i];
        match groups.last_mut() {
            Some(g) if r.shard == shard && r.start <= end.saturating_add(gap) => g.push(i),
            _ => {
                groups.push(vec![i]);
                (shard, end) = (r.shard, 0);
            }
        }
        end = end.max(r.start.saturating_add(r.len));
    }
    groups
}

/// The most bytes the aligned segments of these ranges can need, wherever the data starts.
fn bound_of(ranges: &[Range], gap: u64) -> u64 {
    group(ranges, gap)
        .iter()
        .map(|g| {
            let (start, end) = span(ranges, g);
            round_up(end - start) + ALIGN
        })
        .sum()
}

impl LayerLayout {
    /// The layout of `layer` in a model whose shards' tensor data start at `data_offsets`
    /// ([`ramforge_gguf::GgufFile::data_offsets`]).
    pub fn new(layer: &LayerTensors, data_offsets: &[u64]) -> LayerLayout {
        let pieces = layer
            .matrices()
            .map(|t| Piece {
                name: t.name.clone(),
                at: Range {
                    shard: t.shard,
                    start: absolute(data_offsets, t, 0),
                    len: t.n_bytes,
                },
            })
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
        data_offsets: &[u64],
    ) -> LayerLayout {
        let pieces = stacks
            .iter()
            .map(|t| {
                let len = t.n_bytes / n_expert as u64;
                Piece {
                    name: format!("{} (expert {x})", t.name),
                    at: Range {
                        shard: t.shard,
                        start: absolute(data_offsets, t, x as u64 * len),
                        len,
                    },
                }
            })
            .collect();
        LayerLayout::of_pieces(pieces, 0)
    }

    /// The layout of named pieces at absolute file offsets, used in this order; pieces of a
    /// shard closer than `gap` are read as one segment.
    fn of_pieces(pieces: Vec<Piece>, gap: u64) -> LayerLayout {
        let ranges: Vec<Range> = pieces.iter().map(|p| p.at).collect();
        let mut placed: Vec<Option<Placed>> = vec![None; pieces.len()];
        let mut segments = Vec::new();
        let mut buf_at = 0usize;
        for g in group(&ranges, gap) {
            let (start, end) = span(&ranges, &g);
            let file_start = start / ALIGN * ALIGN;
            let len = round_up(end) - file_start;
            let shard = ranges[g[0]].shard;
            for &i in &g {
                placed[i] = Some(Placed {
                    name: pieces[i].name.clone(),
                    shard,
                    file_start: ranges[i].start,
                    len: ranges[i].len,
                    buf_start: buf_at + (ranges[i].start - file_start) as usize,
                    segment: segments.len(),
                });
            }
            segments.push(Segment {
                shard,
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
        let ranges: Vec<Range> = layer
            .matrices()
            .map(|t| Range {
                shard: t.shard,
                start: t.offset,
                len: t.n_bytes,
            })
            .collect();
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
                let ranges: Vec<Range> = stacks
                    .iter()
                    .map(|t| {
                        let len = t.n_bytes / n_expert as u64;
                        Range {
                            shard: t.shard,
                            start: t.offset + x * len,
                            len,
                        }
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

    /// The matrix that holds offset `offset` of shard `shard` (or the last one before it),
    /// for errors.
    fn matrix_at(&self, shard: usize, offset: u64) -> &Placed {
        self.placed
            .iter()
            .filter(|p| p.shard == shard && p.file_start <= offset)
            .max_by_key(|p| p.file_start)
            .or_else(|| self.placed.iter().find(|p| p.shard == shard))
            .unwrap_or(&self.placed[0])
    }

    /// The error for shard `shard` ending at `at`, inside the layer.
    pub(super) fn short_read(&self, shard: usize, at: u64) -> GgufError {
        let m = self.matrix_at(shard, at);
        GgufError::ShortRead {
            tensor: m.name.clone(),
            offset: at,
            wanted: m.len,
            got: at.saturating_sub(m.file_start).min(m.len),
        }
    }

    /// The short read of shard `shard` ending at `size`, if that is before the layer's end
    /// there: at the first segment the file does not hold whole, as
    /// [`super::reader::StreamFile::read_layer`] reports.
    fn ends_short(&self, shard: usize, size: u64) -> Option<GgufError> {
        let s = self
            .segments
            .iter()
            .find(|s| s.shard == shard && s.needed_end > size)?;
        Some(self.short_read(shard, size.max(s.file_start)))
    }

    /// The error for a failure at offset `at` of shard `shard`: a short read where the file
    /// ends now (`size`) if it no longer holds the layer, else `source` at `at`.
    pub(super) fn failed_at(
        &self,
        shard: usize,
        at: u64,
        size: Option<u64>,
        source: std::io::Error,
    ) -> GgufError {
        size.and_then(|size| self.ends_short(shard, size))
            .unwrap_or_else(|| GgufError::ReadFailed {
                tensor: self.matrix_at(shard, at).name.clone(),
                offset: at,
                source,
            })
    }

    /// The first shard whose file (`files`, by shard) no longer holds its part of the layer,
    /// as a short read; or the error telling its size.
    fn file_ends_short(&self, files: &[File]) -> Result<(), GgufError> {
        for s in &self.segments {
            let file = shard_file(files, s.shard)?;
            let size = file
                .metadata()
                .map_err(|e| self.failed_at(s.shard, s.file_start, None, e))?
                .len();
            if let Some(e) = self.ends_short(s.shard, size) {
                return Err(e);
            }
        }
        Ok(())
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

    /// Maps every segment of the layer from the model's `files` (by shard) and fills the
    /// windows' page tables. The files' sizes are checked first, so a file cut short fails
    /// here (a short read naming the tensor and where the file ends) rather than faulting
    /// later.
    pub fn map(&self, files: &[File]) -> Result<MappedLayer, MapError> {
        self.file_ends_short(files).map_err(MapError::Failed)?;
        let mut windows = Vec::with_capacity(self.segments.len());
        for s in &self.segments {
            let file = shard_file(files, s.shard).map_err(MapError::Failed)?;
            windows.push(
                Window::map(file, s.file_start, s.len as usize)
                    .map_err(|_| MapError::Unsupported)?,
            );
        }
        for (w, s) in windows.iter().zip(&self.segments) {
            if let Err(e) = w.populate() {
                let size = files[s.shard].metadata().map(|m| m.len()).ok();
                return Err(MapError::Failed(self.failed_at(
                    s.shard,
                    s.file_start,
                    size,
                    e,
                )));
            }
        }
        Ok(MappedLayer { windows })
    }

    /// After the compute used `mapped`: fails if a read found a page missing (the file was
    /// cut, or storage failed) and so saw zeros, or if the file no longer holds the layer
    /// (a cut that left the pages the compute read mapped, zero-filled past the end).
    pub fn check(&self, mapped: &MappedLayer, files: &[File]) -> Result<(), GgufError> {
        self.file_ends_short(files)?;
        let fault = mapped
            .windows
            .iter()
            .zip(&self.segments)
            .filter_map(|(w, s)| Some((s.shard, w.fault()?)))
            .min();
        match fault {
            None => Ok(()),
            Some((shard, at)) => Err(self.failed_at(
                shard,
                at,
                None,
                std::io::Error::other("bus error reading the mapped model file"),
            )),
        }
    }
}

/// A named piece of a layout, at an absolute file offset.
struct Piece {
    name: String,
    at: Range,
}

/// Byte `at` of tensor `t` as an absolute offset in its shard's file.
fn absolute(data_offsets: &[u64], t: &TensorInfo, at: u64) -> u64 {
    // A shard the model does not have cannot come from its own tensor table; should one, the
    // read past any file's end fails as a short read naming the tensor.
    data_offsets
        .get(t.shard)
        .map_or(u64::MAX, |d| d.saturating_add(t.offset).saturating_add(at))
}

/// The file of shard `shard`, or the error for a layout asking for a shard not given.
fn shard_file(files: &[File], shard: usize) -> Result<&File, GgufError> {
    files.get(shard).ok_or_else(|| GgufError::NoSuchShard {
        tensor: "<streamed layer>".to_string(),
        shard,
        shards: files.len(),
    })
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
