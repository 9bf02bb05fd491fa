//! The read path for streamed layers: large aligned reads with `O_DIRECT`, so streaming neither
//! doubles memory in the page cache nor competes with it under a memory limit, and buffered
//! positional reads (with `posix_fadvise` hints) where `O_DIRECT` is refused (e.g. tmpfs).
//!
//! A layer is read as the aligned segments of its [`LayerLayout`]. The first cold reads compare
//! `O_DIRECT` with buffered reads dropped from the cache behind them, and keep the faster.
//!
//! When the page cache already holds the file ([`ReadMode::Cached`]), segments are not copied
//! at all: each is mapped (see [`super::mapped`]) and the matrices are used in place.

use super::aligned::AlignedBuf;
use super::layout::{LayerLayout, MapError, MappedLayer};
use super::page_cache::{
    advise_read, drop_range, drop_read, open_uncached, DROP_CHUNK, FOLIO, READAHEAD_TAIL,
};
use ramforge_gguf::{GgufError, GgufFile};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

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

/// The model's files (one, or each shard of a split) opened for streaming: with `O_DIRECT`
/// where the file system allows it, and a buffered handle each for the fallback. Indexed by
/// shard.
pub struct StreamFile {
    /// One `O_DIRECT` handle per shard, or none at all (the read path is the model's, not a
    /// shard's).
    direct: Option<Vec<File>>,
    buffered: Vec<File>,
    drop_cached: bool,
    /// Layers are mapped in place rather than read.
    mapped: bool,
    /// Reads use `direct` (when there is one) only while this holds: the probe alternates it.
    use_direct: bool,
    /// While `Some`, the first layer reads compare the two paths; then the slower one is
    /// dropped (see [`keep_direct`]).
    probe: Option<ReadProbe>,
    /// The shard and offset where the last buffered read that dropped its pages ended.
    read_end: Option<(usize, u64)>,
}

impl StreamFile {
    /// Opens the model's files for streaming.
    pub fn of_model(model: &GgufFile, mode: ReadMode) -> Result<StreamFile, GgufError> {
        let files: Vec<(&Path, &File)> = model
            .shards()
            .iter()
            .map(|s| (s.path(), s.file()))
            .collect();
        StreamFile::open(&files, mode).map_err(|source| GgufError::Io {
            path: model.path().display().to_string(),
            source,
        })
    }

    /// Opens `(path, handle)` of each shard for streaming; each handle is one on the file at
    /// its path (duplicated, so the engine's reads and these share the file even if the path
    /// is replaced later).
    pub fn open(files: &[(&Path, &File)], mode: ReadMode) -> std::io::Result<StreamFile> {
        // The kernel's default readahead, not POSIX_FADV_SEQUENTIAL's doubled window: what it
        // reads ahead sits in the page cache, under a memory limit that counts it.
        let buffered = files
            .iter()
            .map(|(_, f)| f.try_clone())
            .collect::<std::io::Result<Vec<File>>>()?;
        let direct = match mode {
            ReadMode::Direct => files
                .iter()
                .zip(&buffered)
                .map(|((path, _), b)| {
                    open_uncached(path)
                        .ok()
                        // Only if it is still the same file as the engine's handle.
                        .filter(|d| same_file(d, b))
                })
                .collect::<Option<Vec<File>>>(),
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
                Err(MapError::Unsupported) => self.mapped = false,
            }
        }
        let Some(probe) = &self.probe else {
            return Ok((self.read_layer(layout, buf.bytes_mut())?, None));
        };
        // Probing: a run of direct reads, then a run of buffered ones.
        let direct = probe.reads < PROBE_READS;
        let counted = probe.reads % PROBE_READS != 0;
        self.use_direct = direct;
        let started = std::time::Instant::now();
        let result = self.read_layer(layout, buf.bytes_mut());
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

    /// Reads every segment of `layout` into `buf` (at least [`LayerLayout::buffer_len`]
    /// bytes, aligned).
    pub(crate) fn read_layer(
        &mut self,
        layout: &LayerLayout,
        buf: &mut [u8],
    ) -> Result<u64, GgufError> {
        let mut read = 0;
        for s in layout.segments() {
            let dst = &mut buf[s.buf_start..s.buf_start + s.len as usize];
            let needed = (s.needed_end - s.file_start) as usize;
            read += self
                .read_segment(s.shard, s.file_start, dst, needed)
                .map_err(|(got, e)| {
                    let at = s.file_start + got;
                    match e {
                        None => layout.short_read(s.shard, at),
                        Some(source) => layout.failed_at(s.shard, at, None, source),
                    }
                })?;
        }
        Ok(read)
    }

    /// Reads `dst.len()` bytes at the aligned `offset` of shard `shard`; reaching the end of
    /// the file is fine once `needed` bytes are in. On failure: the bytes read and the error
    /// (`None`: end of file).
    fn read_segment(
        &mut self,
        shard: usize,
        offset: u64,
        dst: &mut [u8],
        needed: usize,
    ) -> Result<u64, (u64, Option<std::io::Error>)> {
        if shard >= self.buffered.len() {
            let e = std::io::Error::other(format!(
                "shard {shard} of a model of {} files",
                self.buffered.len()
            ));
            return Err((0, Some(e)));
        }
        let direct = self.direct.as_ref().and_then(|d| d.get(shard));
        if let Some(direct) = direct.filter(|_| self.use_direct) {
            match read_at_least(direct, dst, offset, needed) {
                Err((0, Some(e))) if e.raw_os_error() == Some(libc::EINVAL) => {
                    // The file system (or this buffer) does not do O_DIRECT: buffered from now on.
                    self.direct = None;
                }
                other => return other,
            }
        }
        let buffered = &self.buffered[shard];
        advise_read(buffered, offset, needed as u64);
        if !self.drop_cached {
            return read_at_least(buffered, &mut dst[..needed], offset, needed);
        }
        // Streamed bytes are not wanted in the page cache: they are read again next pass, long
        // after a cache under memory pressure would have kept them. Dropping them chunk by
        // chunk keeps the cache's share to a chunk plus the readahead window; a whole segment
        // at once can overrun a memory limit's headroom and make every read reclaim.
        let stale = self.stale_readahead(shard, offset);
        let mut done = 0usize;
        while done < needed {
            let end = (done + DROP_CHUNK).min(needed);
            let r = read_at_least(
                buffered,
                &mut dst[done..end],
                offset + done as u64,
                end - done,
            );
            drop_read(buffered, offset + done as u64, offset + end as u64);
            r.map_err(|(got, e)| (done as u64 + got, e))?;
            done = end;
        }
        self.read_end = Some((shard, offset + needed as u64));
        if let Some((stale_shard, range)) = stale {
            // Dropped only now: at the jump the readahead there was still in flight, and
            // pages under I/O are not dropped.
            drop_range(
                &self.buffered[stale_shard],
                range.start,
                range.end - range.start,
            );
        }
        Ok(done as u64)
    }

    /// What the kernel read ahead past the last read (in its shard), when a read at `offset`
    /// of `shard` does not continue it (the stream skips pinned layers, moves to another
    /// shard, or starts the next pass): that will not be read next, and would sit in the page
    /// cache until reclaimed.
    fn stale_readahead(&self, shard: usize, offset: u64) -> Option<(usize, std::ops::Range<u64>)> {
        let (last, end) = self
            .read_end
            .filter(|&(last, end)| (last, end) != (shard, offset))?;
        // The folio holding `end` was read up to there; a read further on in the same file
        // stops the range at its own folio.
        let start = end / FOLIO * FOLIO;
        let stop = if last == shard && offset > end {
            offset / FOLIO * FOLIO
        } else {
            u64::MAX
        };
        let range = start..(end + READAHEAD_TAIL).min(stop);
        (range.end > range.start).then_some((last, range))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::MemoryBudget;
    use crate::stream::aligned::{round_up, ALIGN};
    use std::os::unix::io::AsRawFd;
    use std::path::PathBuf;

    /// SmolLM2-135M-Instruct Q4_1 under `RAMFORGE_MODELS` (default `<workspace>/models`);
    /// missing, the test fails with what to do.
    fn real_model() -> PathBuf {
        let dir = std::env::var_os("RAMFORGE_MODELS").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../models"),
            PathBuf::from,
        );
        let p = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
        assert!(
            p.is_file(),
            "model {} not found: run scripts/test.sh or set RAMFORGE_MODELS",
            p.display()
        );
        p
    }

    #[test]
    fn aligned_layer_reads_hold_every_matrix_and_fall_back_to_buffered_reads() {
        let m = crate::Model::open(real_model()).unwrap();
        let data_offsets = m.file.data_offsets();
        let budget = MemoryBudget::unlimited();
        let bound = m
            .tensors
            .layers
            .iter()
            .map(LayerLayout::bound)
            .max()
            .unwrap();
        let mut buf = AlignedBuf::new(&budget, "test buffer", bound as usize + 1).unwrap();
        let mut file = StreamFile::of_model(&m.file, ReadMode::Direct).unwrap();
        // The fixture lives on a disk file system here; where it does not (tmpfs), the first read
        // already falls back, which the rest of the test still checks.
        let started_direct = file.is_direct();
        for (i, layer) in m.tensors.layers.iter().enumerate() {
            let layout = LayerLayout::new(layer, &data_offsets);
            assert!(layout.buffer_len() as u64 <= LayerLayout::bound(layer));
            let matrix_bytes = layer.matrix_bytes();
            assert!(
                layout.read_bytes() as f64 <= 1.05 * matrix_bytes as f64 + 65536.0,
                "layer {i}: reads {} for {matrix_bytes} bytes of matrices",
                layout.read_bytes()
            );
            // Odd layers into a buffer one byte off alignment: O_DIRECT refuses it (EINVAL) and
            // the reader falls back to buffered reads for good.
            let off = i % 2;
            let dst = &mut buf.bytes_mut()[off..off + layout.buffer_len()];
            file.read_layer(&layout, dst).unwrap();
            for (j, t) in layer.matrices().enumerate() {
                let got = layout.buffered_matrix(dst, j);
                let mut want = vec![0u8; t.n_bytes as usize];
                m.file.read_tensor_into(t, &mut want).unwrap();
                assert!(got == &want[..], "{} differs", t.name);
            }
            if i == 0 {
                assert_eq!(file.is_direct(), started_direct);
            }
        }
        assert!(
            !file.is_direct(),
            "a refused O_DIRECT read falls back to buffered reads"
        );
    }

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
        drop_range(&file, 0, 0);
        assert_eq!(cached_pages(&file, 0..len as u64), 0, "evicted");
        (path, file)
    }

    /// A stream on `path` that reads buffered, dropping what it read from the page cache.
    fn buffered_stream(path: &Path) -> StreamFile {
        let file = File::open(path).unwrap();
        let mut stream = StreamFile::open(&[(path, &file)], ReadMode::Direct).unwrap();
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
            assert_eq!(libc::mincore(at, len, vec.as_mut_ptr().cast()), 0);
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
            .read_segment(0, offset, &mut dst, needed)
            .unwrap();
        assert_eq!(got, needed as u64);
        assert!(dst[..needed] == bytes[offset as usize..]);

        // A file cut inside the second chunk: the error counts exactly the bytes read.
        let cut = DROP_CHUNK + 5000;
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let (got, err) = buffered_stream(&path)
            .read_segment(0, 0, &mut dst, len)
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
                .read_segment(0, start, &mut dst[..needed], needed)
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
                .read_segment(0, start, &mut dst[..needed], needed)
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
