//! The KV cache: keys and values of every layer for every position it must keep.
//!
//! A layer with full attention keeps every position of the context; a sliding-window layer keeps
//! only its window, as a ring (position `p` in slot `p % window`), so it is charged for exactly
//! that. Layers that keep as many positions share one store. Storage grows in chunks of
//! [`KV_CHUNK_TOKENS`] slots, each charged to the budget when it is allocated, up to the store's
//! size. Chunks are never moved or copied, so growing costs only the new chunk.

use crate::budget::{Charge, MemoryBudget};
use crate::error::EngineError;
use crate::model::ModelConfig;
use half::f16;
use half::slice::HalfFloatSliceExt;
use std::ops::Range;

pub(crate) mod compressed;
mod recurrent;
mod tile;
use compressed::CompressedRows;
use recurrent::RecurrentState;
pub(crate) use tile::{BLOCK, TILE_ROWS};

/// Positions per cache chunk.
pub const KV_CHUNK_TOKENS: usize = 64;

/// How keys and values are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    /// Half precision, as llama.cpp stores its cache by default.
    #[default]
    F16,
    /// Four bytes per element: exact, twice the memory.
    F32,
}

impl KvType {
    /// Bytes one cached element takes.
    pub fn bytes_per_element(self) -> u64 {
        match self {
            KvType::F16 => 2,
            KvType::F32 => 4,
        }
    }

    /// The name `--kv-type` takes.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::F32 => "f32",
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> Result<KvType, String> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(KvType::F16),
            "f32" => Ok(KvType::F32),
            _ => Err(format!("KV cache type {s:?}: expected f16 or f32")),
        }
    }
}

/// Bytes of the cache of `cfg` for a context of `ctx` positions (what [`KvCache`] charges when
/// full), the recurrent state of delta-net layers and its checkpoint included.
pub fn kv_cache_bytes(cfg: &ModelConfig, ctx: usize, ty: KvType) -> u64 {
    (0..cfg.n_layer_held())
        .map(|l| planes(cfg) as u64 * cfg.kv_dim() as u64 * cfg.kv_positions(l, ctx) as u64)
        .sum::<u64>()
        * ty.bytes_per_element()
        + 2 * RecurrentState::bytes(cfg)
        + compressed::rows_bytes(cfg, ctx, ty.bytes_per_element())
}

/// Bytes [`KvCache::save`] holds at most for a verify pass of `rows` positions: those rows of
/// every sliding-window layer (as f32) and the whole recurrent state.
pub fn rollback_bytes(cfg: &ModelConfig, ctx: usize, rows: usize) -> u64 {
    let ring_layers = (0..cfg.n_layer_held())
        .filter(|&l| !cfg.is_recurrent(l) && cfg.kv_positions(l, ctx) < ctx)
        .count() as u64;
    ring_layers * planes(cfg) as u64 * cfg.kv_dim() as u64 * rows as u64 * 4
        + RecurrentState::bytes(cfg)
}

/// A copy of what a speculative pass overwrites ([`KvCache::save`]).
#[derive(Default)]
pub(crate) struct Saved {
    /// `(store, position written over it)` of each saved ring slot, in the order of `rows`.
    slots: Vec<(usize, usize)>,
    rows: Vec<f32>,
    recurrent: Vec<f32>,
    charge: Option<Charge>,
}

/// Rows a position keeps per layer: a key and a value, or for multi-head latent attention
/// one row (the latent and the RoPE key) that serves as both: the values are the keys' rows,
/// whose first `kv_lora_rank` elements are the latent.
fn planes(cfg: &ModelConfig) -> usize {
    if cfg.mla.is_some() {
        1
    } else {
        2
    }
}

/// A cache element type: stored form of one f32. The tile kernels read the stored form
/// directly (f16 is widened in registers), so attention never copies a row.
trait Element: Copy + Default + Send + Sync + tile::TileAvx2 {
    /// The element as f32.
    fn widen(self) -> f32;
}

impl Element for f32 {
    #[inline]
    fn widen(self) -> f32 {
        self
    }
}

impl Element for f16 {
    #[inline]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

enum ChunkData {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

/// Up to `KV_CHUNK_TOKENS` slots of every layer of a store, laid out
/// `[layer][k, v][slot][kv_dim]`.
struct Chunk {
    data: ChunkData,
    tokens: usize,
    _charge: Charge,
}

/// The layers that keep the same number of positions, `slots`: position `p` lives in slot
/// `p % slots`.
struct Store {
    n_layer: usize,
    slots: usize,
    chunks: Vec<Chunk>,
}

/// The cache of one engine.
pub struct KvCache {
    budget: MemoryBudget,
    ty: KvType,
    kv_dim: usize,
    /// 2 (keys, values) or 1 (keys that are also the values: latent attention).
    planes: usize,
    capacity: usize,
    stores: Vec<Store>,
    /// Each layer's store and its index among the store's layers.
    layers: Vec<(usize, usize)>,
    len: usize,
    /// The delta-net layers' state (hybrid models), DeepSeek V4's rings and compressors.
    recurrent: RecurrentState,
    /// DeepSeek V4's compressed rows.
    compressed: CompressedRows,
}

impl KvCache {
    /// An empty cache that may grow to `capacity` positions, layer `l` keeping the last
    /// `positions(l)` of them (at most `capacity`); nothing is allocated yet.
    pub fn new(
        budget: &MemoryBudget,
        ty: KvType,
        n_layer: usize,
        kv_dim: usize,
        capacity: usize,
        positions: impl Fn(usize) -> usize,
    ) -> KvCache {
        let mut stores: Vec<Store> = Vec::new();
        let mut layers = Vec::with_capacity(n_layer);
        for l in 0..n_layer {
            let slots = positions(l).clamp(1, capacity.max(1));
            let s = match stores.iter().position(|s| s.slots == slots) {
                Some(s) => s,
                None => {
                    stores.push(Store {
                        n_layer: 0,
                        slots,
                        chunks: Vec::new(),
                    });
                    stores.len() - 1
                }
            };
            layers.push((s, stores[s].n_layer));
            stores[s].n_layer += 1;
        }
        KvCache {
            budget: budget.clone(),
            ty,
            kv_dim,
            planes: 2,
            capacity,
            stores,
            layers,
            len: 0,
            recurrent: RecurrentState::none(),
            compressed: CompressedRows::for_model_none(),
        }
    }

    /// The cache `cfg` needs for a context of `capacity`.
    pub fn for_model(
        budget: &MemoryBudget,
        ty: KvType,
        cfg: &ModelConfig,
        capacity: usize,
    ) -> KvCache {
        let mut kv = KvCache::new(
            budget,
            ty,
            cfg.n_layer_held(),
            cfg.kv_dim(),
            capacity,
            |l| cfg.kv_positions(l, capacity),
        );
        kv.planes = planes(cfg);
        kv.recurrent = RecurrentState::for_model(cfg);
        kv.compressed = CompressedRows::for_model(cfg, ty == KvType::F16);
        kv
    }

    /// Whether this cache holds recurrent state (a hybrid model's delta-net layers), which
    /// cannot be cut back to a shorter prefix.
    pub fn is_recurrent(&self) -> bool {
        self.recurrent.exists()
    }

    /// Keeps a copy of the recurrent state as it stands now, after the positions it holds
    /// positions (the end of a prompt), for [`KvCache::restore_checkpoint`].
    pub(crate) fn checkpoint(&mut self) -> Result<(), EngineError> {
        self.recurrent.checkpoint(self.len, &self.budget)
    }

    /// The position the recurrent state's checkpoint was made at, if any.
    pub(crate) fn checkpoint_position(&self) -> Option<usize> {
        self.recurrent.checkpoint_position()
    }

    /// Cuts the context back to the checkpoint's position with the recurrent state it had
    /// there; returns that position, or `None` (nothing changed) without a checkpoint.
    pub(crate) fn restore_checkpoint(&mut self) -> Option<usize> {
        let position = self.recurrent.restore_checkpoint()?;
        self.len = position;
        Some(position)
    }

    /// DeepSeek V4 layer `layer`'s fixed state (`kv/compressed.rs`'s [`compressed::Fixed`]
    /// layout), its compressed rows, and whether rows are kept as f16; room must have been
    /// reserved.
    pub(crate) fn compressed_layer(
        &mut self,
        layer: usize,
    ) -> (&mut [f32], &mut CompressedRows, bool) {
        (
            self.recurrent.whole_layer(layer),
            &mut self.compressed,
            self.ty == KvType::F16,
        )
    }

    /// Delta-net layer `layer`'s convolution inputs and state matrices (see
    /// `kv/recurrent.rs`); room must have been reserved.
    pub(crate) fn recurrent_layer(&mut self, layer: usize) -> (&mut [f32], &mut [f32]) {
        self.recurrent.layer(layer)
    }

    /// Whether the context it holds can be cut back to its first `keep` positions: not when a
    /// ring (a sliding-window layer's) has wrapped and a position after `keep` overwrote a
    /// slot that a query at `keep` still needs (one held past `keep + 1` and past the ring).
    pub(crate) fn ring_keeps(&self, keep: usize) -> bool {
        let last = self.len.saturating_sub(1);
        keep >= self.len
            || self
                .stores
                .iter()
                .enumerate()
                .filter(|&(si, st)| st.slots < self.capacity && !self.stands_in(si))
                .all(|(_, st)| last < (keep + 1).max(st.slots))
    }

    /// The most positions this cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Positions `layer` keeps: a query at `p` may attend to `p + 1 - slots(layer)..=p`.
    pub fn slots(&self, layer: usize) -> usize {
        self.stores[self.layers[layer].0].slots
    }

    /// Bytes allocated (and charged) now.
    #[cfg(test)]
    pub fn allocated_bytes(&self) -> u64 {
        self.stores
            .iter()
            .flat_map(|s| &s.chunks)
            .map(|c| c._charge.bytes())
            .sum()
    }

    /// Forgets every position and releases the storage.
    pub fn clear(&mut self) {
        for s in &mut self.stores {
            s.chunks.clear();
        }
        self.recurrent.clear();
        self.compressed.clear();
        self.len = 0;
    }

    /// Makes room for positions `0..n`, allocating chunks as needed.
    pub fn reserve(&mut self, n: usize) -> Result<(), EngineError> {
        if n > self.capacity {
            return Err(EngineError::ContextOverflow {
                prompt: n,
                needed: n,
                ctx: self.capacity,
            });
        }
        self.recurrent.reserve(&self.budget)?;
        self.compressed.reserve(&self.budget, n)?;
        for store in &mut self.stores {
            let want = n.min(store.slots);
            while store.chunks.len() * KV_CHUNK_TOKENS < want {
                let first = store.chunks.len() * KV_CHUNK_TOKENS;
                let tokens = KV_CHUNK_TOKENS.min(store.slots - first);
                let elems = self.planes * store.n_layer * tokens * self.kv_dim;
                let charge = self
                    .budget
                    .charge("KV cache", elems as u64 * self.ty.bytes_per_element())?;
                let data = match self.ty {
                    KvType::F16 => ChunkData::F16(vec![f16::ZERO; elems]),
                    KvType::F32 => ChunkData::F32(vec![0.0; elems]),
                };
                store.chunks.push(Chunk {
                    data,
                    tokens,
                    _charge: charge,
                });
            }
        }
        Ok(())
    }

    /// Element offset of (layer-in-store, k=0/v=1, slot-in-chunk) inside a chunk. With one
    /// plane the values are the keys.
    fn offset(&self, chunk_tokens: usize, layer: usize, which: usize, p: usize) -> usize {
        ((layer * self.planes + which.min(self.planes - 1)) * chunk_tokens + p) * self.kv_dim
    }

    /// Stores the key and value rows of `layer` at `pos` (room must have been reserved). In a
    /// layer that keeps fewer positions than the context, this overwrites `pos - slots`. A
    /// one-plane cache (latent attention) stores the key row only, `v` unused.
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (si, li) = self.layers[layer];
        let slot = pos % self.stores[si].slots;
        let (ci, p) = (slot / KV_CHUNK_TOKENS, slot % KV_CHUNK_TOKENS);
        let tokens = self.stores[si].chunks[ci].tokens;
        let ko = self.offset(tokens, li, 0, p);
        let vo = self.offset(tokens, li, 1, p);
        let d = self.kv_dim;
        match &mut self.stores[si].chunks[ci].data {
            ChunkData::F16(data) => {
                store(&mut data[ko..ko + d], k);
                if vo != ko {
                    store(&mut data[vo..vo + d], v);
                }
            }
            ChunkData::F32(data) => {
                data[ko..ko + d].copy_from_slice(k);
                if vo != ko {
                    data[vo..vo + d].copy_from_slice(v);
                }
            }
        }
    }

    /// Reads elements `first..first + dst.len()` of the (key) row of `layer` at `pos` as f32.
    pub(crate) fn read_row(&self, layer: usize, pos: usize, first: usize, dst: &mut [f32]) {
        let (si, li) = self.layers[layer];
        let slot = pos % self.stores[si].slots;
        let (ci, p) = (slot / KV_CHUNK_TOKENS, slot % KV_CHUNK_TOKENS);
        let tokens = self.stores[si].chunks[ci].tokens;
        let o = self.offset(tokens, li, 0, p) + first;
        let len = dst.len();
        match &self.stores[si].chunks[ci].data {
            ChunkData::F16(data) => {
                for (d, v) in dst.iter_mut().zip(&data[o..o + len]) {
                    *d = v.to_f32();
                }
            }
            ChunkData::F32(data) => dst.copy_from_slice(&data[o..o + len]),
        }
    }
    /// Whether store `si` holds only delta-net layers, whose one slot stands in for keys and
    /// values they do not have (nothing in it to save).
    fn stands_in(&self, si: usize) -> bool {
        self.layers
            .iter()
            .enumerate()
            .filter(|(_, &(s, _))| s == si)
            .all(|(l, _)| self.recurrent.holds(l))
    }

    /// Saves what writing positions `first..first + n` would overwrite that a context cut back
    /// to `first` still needs: each ring slot (sliding-window layers) whose position is still in
    /// its window, and the recurrent state, which summarizes every position and cannot be cut
    /// back. Charged to the budget while held (the plan books it, `rollback_bytes`).
    pub(crate) fn save(&self, first: usize, n: usize) -> Result<Saved, EngineError> {
        // Charged before anything is copied.
        let ring_rows: usize = self
            .stores
            .iter()
            .enumerate()
            .filter(|&(si, s)| s.slots < self.capacity && !self.stands_in(si))
            .map(|(_, s)| (first..first + n).filter(|&p| p >= s.slots).count() * s.n_layer)
            .sum();
        let ring = ring_rows * self.planes * self.kv_dim;
        let state = self.recurrent.data().map_or(0, <[f32]>::len);
        let charge = self
            .budget
            .charge("rollback copy", 4 * (ring + state) as u64)?;
        let mut saved = Saved {
            rows: Vec::with_capacity(ring),
            ..Saved::default()
        };
        for (si, store) in self.stores.iter().enumerate() {
            if store.slots >= self.capacity || self.stands_in(si) {
                continue;
            }
            for p in (first..first + n).filter(|&p| p >= store.slots) {
                saved.slots.push((si, p));
                self.for_rows(si, p % store.slots, |row| saved.rows.extend(row));
            }
        }
        if let Some(state) = self.recurrent.data() {
            saved.recurrent.extend_from_slice(state);
        }
        saved.charge = Some(charge);
        Ok(saved)
    }

    /// Puts back what [`KvCache::save`] saved, for a context cut back to `keep` positions: the
    /// ring slots of the positions from `keep` on (those before are kept: they are the cut
    /// context's own), and the recurrent state. [`KvCache::set_len`] then forgets the rest.
    pub(crate) fn restore(&mut self, saved: &Saved, keep: usize) {
        let d = self.kv_dim;
        let mut rows = saved.rows.chunks_exact(d);
        for &(si, pos) in &saved.slots {
            let per_slot = self.stores[si].n_layer * self.planes;
            if pos < keep {
                rows.nth(per_slot - 1);
                continue;
            }
            let slot = pos % self.stores[si].slots;
            let (ci, p) = (slot / KV_CHUNK_TOKENS, slot % KV_CHUNK_TOKENS);
            let tokens = self.stores[si].chunks[ci].tokens;
            for li in 0..self.stores[si].n_layer {
                for which in 0..self.planes {
                    let o = self.offset(tokens, li, which, p);
                    let row = rows.next().expect("saved rows match their slots");
                    match &mut self.stores[si].chunks[ci].data {
                        ChunkData::F16(data) => store(&mut data[o..o + d], row),
                        ChunkData::F32(data) => data[o..o + d].copy_from_slice(row),
                    }
                }
            }
        }
        if let Some(state) = self.recurrent.data_mut() {
            if state.len() == saved.recurrent.len() {
                state.copy_from_slice(&saved.recurrent);
            }
        }
    }

    /// Calls `f` with each row (every layer of store `si`, keys then values) of `slot`, as f32
    /// (an f16 widened, which narrows back exactly).
    fn for_rows(&self, si: usize, slot: usize, mut f: impl FnMut(&mut dyn Iterator<Item = f32>)) {
        let d = self.kv_dim;
        let (ci, p) = (slot / KV_CHUNK_TOKENS, slot % KV_CHUNK_TOKENS);
        let chunk = &self.stores[si].chunks[ci];
        for li in 0..self.stores[si].n_layer {
            for which in 0..self.planes {
                let o = self.offset(chunk.tokens, li, which, p);
                match &chunk.data {
                    ChunkData::F16(data) => f(&mut data[o..o + d].iter().map(|x| x.widen())),
                    ChunkData::F32(data) => f(&mut data[o..o + d].iter().copied()),
                }
            }
        }
    }

    /// Marks positions `0..n` as filled.
    pub fn set_len(&mut self, n: usize) {
        self.len = n;
    }

    /// The runs of consecutive slots that hold positions `first..first + n` of store `si`:
    /// `(chunk, slot in chunk, count, offset of the run's first position from first)`.
    fn runs(&self, si: usize, first: usize, n: usize) -> impl Iterator<Item = Run> + '_ {
        let store = &self.stores[si];
        let mut done = 0;
        std::iter::from_fn(move || {
            if done == n {
                return None;
            }
            let slot = (first + done) % store.slots;
            let (chunk, at) = (slot / KV_CHUNK_TOKENS, slot % KV_CHUNK_TOKENS);
            let count = (store.chunks[chunk].tokens - at).min(n - done);
            let run = Run {
                chunk,
                at,
                count,
                offset: done,
            };
            done += count;
            Some(run)
        })
    }

    /// Partial attention of up to [`TILE_ROWS`] query rows `qs` (row `r` at position `pos[r]`)
    /// over the positions of `split` that each row sees (itself and the positions before it
    /// that `layer` keeps), using key/value head `kv_head`. Writes into `part` (see
    /// [`Partial`]) each row's running max, sum of `exp(score - max)` and unnormalised output,
    /// computed block by block over [`BLOCK`]-aligned positions with an online softmax. A row
    /// that sees nothing of `split` gets max `-inf` and sum 0.
    pub(crate) fn attend_split(
        &self,
        (layer, kv_head): (usize, usize),
        qs: &[&[f32]],
        pos: &[usize],
        scale: f32,
        split: Range<usize>,
        part: Partial<'_>,
    ) {
        let rows = qs.len();
        assert!(rows <= TILE_ROWS && pos.len() == rows && rows > 0);
        let hd = qs[0].len();
        let (si, li) = self.layers[layer];
        let slots = self.stores[si].slots;
        let chunks = &self.stores[si].chunks;
        let simd = crate::simd::avx2_enabled();
        let col = kv_head * hd;
        let Partial { max, sum, out } = part;
        max[..rows].fill(f32::NEG_INFINITY);
        sum[..rows].fill(0.0);
        out[..rows * hd].fill(0.0);
        // What each row sees of the split, and the union.
        let seen = |r: usize| {
            let end = pos[r] + 1;
            end.saturating_sub(slots).max(split.start)..end.min(split.end)
        };
        let seeing = (0..rows).map(seen).filter(|s| !s.is_empty());
        let Some(lo) = seeing.clone().map(|s| s.start).min() else {
            return;
        };
        let hi = seeing.map(|s| s.end).max().unwrap_or(lo);
        let mut tile = [[0.0f32; BLOCK]; TILE_ROWS];
        let tile = &mut tile[..rows];
        let mut b = lo - lo % BLOCK;
        while b < hi {
            let (b0, b1) = (b.max(lo), (b + BLOCK).min(hi));
            for row in tile.iter_mut() {
                row.fill(f32::NEG_INFINITY);
            }
            for r in self.runs(si, b0, b1 - b0) {
                let chunk = &chunks[r.chunk];
                let base = self.offset(chunk.tokens, li, 0, r.at) + col;
                let col0 = b0 - b + r.offset;
                match &chunk.data {
                    ChunkData::F16(d) => tile::dots(
                        &d[base..],
                        self.kv_dim,
                        r.count,
                        qs,
                        scale,
                        tile,
                        col0,
                        simd,
                    ),
                    ChunkData::F32(d) => tile::dots(
                        &d[base..],
                        self.kv_dim,
                        r.count,
                        qs,
                        scale,
                        tile,
                        col0,
                        simd,
                    ),
                }
            }
            for (r, row) in tile.iter_mut().enumerate() {
                let s = seen(r);
                let (c0, c1) = (
                    s.start.max(b).min(b + BLOCK) - b,
                    s.end.min(b + BLOCK).max(b) - b,
                );
                if c0 >= c1 {
                    row.fill(0.0);
                    continue;
                }
                row[..c0].fill(f32::NEG_INFINITY);
                row[c1..].fill(f32::NEG_INFINITY);
                let block_max = row[c0..c1].iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let new_max = max[r].max(block_max);
                let c = (max[r] - new_max).exp();
                let w = tile::exp_row(row, new_max, simd);
                sum[r] = sum[r] * c + w;
                max[r] = new_max;
                for o in &mut out[r * hd..(r + 1) * hd] {
                    *o *= c;
                }
            }
            for r in self.runs(si, b0, b1 - b0) {
                let chunk = &chunks[r.chunk];
                let base = self.offset(chunk.tokens, li, 1, r.at) + col;
                let col0 = b0 - b + r.offset;
                let o = &mut out[..rows * hd];
                match &chunk.data {
                    ChunkData::F16(d) => {
                        tile::accumulate(&d[base..], self.kv_dim, r.count, tile, col0, o, hd, simd)
                    }
                    ChunkData::F32(d) => {
                        tile::accumulate(&d[base..], self.kv_dim, r.count, tile, col0, o, hd, simd)
                    }
                }
            }
            b += BLOCK;
        }
    }
}

/// The running softmax state of a tile of query rows: per row its max score, its sum of
/// `exp(score - max)` and its output (rows `hd` apart), not yet divided by the sum.
pub(crate) struct Partial<'a> {
    pub max: &'a mut [f32],
    pub sum: &'a mut [f32],
    pub out: &'a mut [f32],
}

impl Partial<'_> {
    /// Floats one partial of `rows` rows of `hd` takes in a flat buffer.
    pub(crate) fn floats(rows: usize, hd: usize) -> usize {
        rows * (hd + 2)
    }

    /// The partial of `rows` rows of `hd` laid out at the start of `buf`.
    pub(crate) fn of(buf: &mut [f32], rows: usize, hd: usize) -> Partial<'_> {
        let (out, rest) = buf.split_at_mut(rows * hd);
        let (max, rest) = rest.split_at_mut(rows);
        Partial {
            max,
            sum: &mut rest[..rows],
            out,
        }
    }

    /// Folds `other` (the next split of the same rows) into `self`: the softmax of the
    /// union. A row of `other` that saw nothing leaves `self`'s row as it was.
    pub(crate) fn fold(&mut self, other: &Partial<'_>, hd: usize) {
        for r in 0..self.max.len() {
            if other.sum[r] == 0.0 && other.max[r] == f32::NEG_INFINITY {
                continue;
            }
            let m = self.max[r].max(other.max[r]);
            let (ca, cb) = ((self.max[r] - m).exp(), (other.max[r] - m).exp());
            self.sum[r] = self.sum[r] * ca + other.sum[r] * cb;
            self.max[r] = m;
            let a = &mut self.out[r * hd..(r + 1) * hd];
            let b = &other.out[r * hd..(r + 1) * hd];
            for (x, y) in a.iter_mut().zip(b) {
                *x = *x * ca + *y * cb;
            }
        }
    }

    /// Writes row `r`'s attention output (the output divided by the sum) to `dst`.
    pub(crate) fn finish_row(&self, r: usize, hd: usize, sink: Option<f32>, dst: &mut [f32]) {
        // A sink is one more score with a zero value: it only adds to the denominator, in
        // units of the running max (or rescales everything when it is the larger).
        let inv = match sink {
            None => 1.0 / self.sum[r],
            Some(z) if z > self.max[r] => {
                let shrink = (self.max[r] - z).exp();
                shrink / (self.sum[r] * shrink + 1.0)
            }
            Some(z) => 1.0 / (self.sum[r] + (z - self.max[r]).exp()),
        };
        for (d, o) in dst.iter_mut().zip(&self.out[r * hd..(r + 1) * hd]) {
            *d = o * inv;
        }
    }
}

/// Consecutive slots of one chunk holding consecutive positions.
struct Run {
    chunk: usize,
    at: usize,
    count: usize,
    offset: usize,
}

fn store(dst: &mut [f16], src: &[f32]) {
    dst.convert_from_f32_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One query at position `first + n - 1` over positions `first..first + n` (one split).
    fn attend_one(
        kv: &KvCache,
        head: (usize, usize),
        q: &[f32],
        scale: f32,
        first: usize,
        n: usize,
    ) -> Vec<f32> {
        let hd = q.len();
        let mut buf = vec![0.0; Partial::floats(1, hd)];
        kv.attend_split(
            head,
            &[q],
            &[first + n - 1],
            scale,
            first..first + n,
            Partial::of(&mut buf, 1, hd),
        );
        let mut out = vec![0.0; hd];
        Partial::of(&mut buf, 1, hd).finish_row(0, hd, None, &mut out);
        out
    }

    fn naive(q: &[f32], ks: &[Vec<f32>], vs: &[Vec<f32>], scale: f32) -> Vec<f32> {
        let s: Vec<f64> = ks
            .iter()
            .map(|k| {
                k.iter()
                    .zip(q)
                    .map(|(a, b)| (*a as f64) * (*b as f64))
                    .sum::<f64>()
                    * scale as f64
            })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        let mut out = vec![0.0f64; q.len()];
        for (w, v) in e.iter().zip(vs) {
            for (o, x) in out.iter_mut().zip(v) {
                *o += w / z * *x as f64;
            }
        }
        out.into_iter().map(|x| x as f32).collect()
    }

    #[test]
    fn attention_over_several_chunks_matches_a_naive_softmax() {
        let (n_layer, hd, n_kv) = (2, 8, 2);
        let kv_dim = hd * n_kv;
        let n = KV_CHUNK_TOKENS * 2 + 5;
        let val =
            |p: usize, i: usize, salt: usize| (((p * 31 + i * 7 + salt) % 17) as f32 - 8.0) / 8.0;
        for ty in [KvType::F32, KvType::F16] {
            let budget = MemoryBudget::new(1 << 20);
            let mut kv = KvCache::new(&budget, ty, n_layer, kv_dim, n + 10, |_| n + 10);
            kv.reserve(n).unwrap();
            assert_eq!(kv.allocated_bytes(), budget.held());
            for p in 0..n {
                for l in 0..n_layer {
                    let k: Vec<f32> = (0..kv_dim).map(|i| val(p, i, l)).collect();
                    let v: Vec<f32> = (0..kv_dim).map(|i| val(p, i, 5 + l)).collect();
                    kv.write(l, p, &k, &v);
                }
            }
            kv.set_len(n);
            let q: Vec<f32> = (0..hd).map(|i| val(3, i, 1)).collect();
            let (layer, head) = (1, 1);
            let ks: Vec<Vec<f32>> = (0..n)
                .map(|p| (0..hd).map(|i| val(p, head * hd + i, layer)).collect())
                .collect();
            let vs: Vec<Vec<f32>> = (0..n)
                .map(|p| (0..hd).map(|i| val(p, head * hd + i, 5 + layer)).collect())
                .collect();
            let want = naive(&q, &ks, &vs, 0.35);
            let out = attend_one(&kv, (layer, head), &q, 0.35, 0, n);
            for (a, b) in out.iter().zip(&want) {
                // Values are multiples of 1/8, exact in f16.
                assert!((a - b).abs() < 1e-5, "{ty:?}: {a} vs {b}");
            }
            kv.clear();
            assert_eq!(budget.held(), 0);
        }
    }

    #[test]
    fn a_window_layer_keeps_and_is_charged_for_only_its_window_as_a_ring() {
        // Layer 0 full, layer 1 a window of 70 (two chunks, the second cut short).
        let (hd, window, n) = (8, 70, 3 * KV_CHUNK_TOKENS + 9);
        let val =
            |p: usize, i: usize, salt: usize| (((p * 13 + i * 5 + salt) % 11) as f32 - 5.0) / 4.0;
        let budget = MemoryBudget::new(1 << 20);
        let mut kv = KvCache::new(&budget, KvType::F32, 2, hd, n, |l| {
            if l == 1 {
                window
            } else {
                n
            }
        });
        assert_eq!(kv.slots(1), window);
        kv.reserve(n).unwrap();
        assert_eq!(budget.held(), (2 * hd * (n + window) * 4) as u64);
        for p in 0..n {
            for l in 0..2 {
                let k: Vec<f32> = (0..hd).map(|i| val(p, i, l)).collect();
                let v: Vec<f32> = (0..hd).map(|i| val(p, i, 7 + l)).collect();
                kv.write(l, p, &k, &v);
            }
        }
        let q: Vec<f32> = (0..hd).map(|i| val(1, i, 3)).collect();
        for (layer, first) in [(1, n - window), (1, n - 20), (0, 0), (0, n - window)] {
            let ks: Vec<Vec<f32>> = (first..n)
                .map(|p| (0..hd).map(|i| val(p, i, layer)).collect())
                .collect();
            let vs: Vec<Vec<f32>> = (first..n)
                .map(|p| (0..hd).map(|i| val(p, i, 7 + layer)).collect())
                .collect();
            let want = naive(&q, &ks, &vs, 0.5);
            let out = attend_one(&kv, (layer, 0), &q, 0.5, first, n - first);
            for (a, b) in out.iter().zip(&want) {
                assert!(
                    (a - b).abs() < 1e-5,
                    "layer {layer} from {first}: {a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn a_latent_cache_keeps_one_row_per_position_that_serves_as_key_and_value() {
        let (hd, n) = (12, KV_CHUNK_TOKENS + 7);
        let val = |p: usize, i: usize| (((p * 7 + i * 3) % 13) as f32 - 6.0) / 8.0;
        let budget = MemoryBudget::new(1 << 20);
        let mut kv = KvCache::new(&budget, KvType::F32, 2, hd, n, |_| n);
        kv.planes = 1;
        kv.reserve(n).unwrap();
        // One plane: half the bytes of keys and values.
        assert_eq!(budget.held(), (2 * n * hd * 4) as u64);
        let garbage = vec![f32::NAN; hd];
        for p in 0..n {
            for l in 0..2 {
                let k: Vec<f32> = (0..hd).map(|i| val(p + l, i)).collect();
                kv.write(l, p, &k, &garbage);
            }
        }
        let q: Vec<f32> = (0..hd).map(|i| val(5, i)).collect();
        let ks: Vec<Vec<f32>> = (0..n)
            .map(|p| (0..hd).map(|i| val(p + 1, i)).collect())
            .collect();
        let want = naive(&q, &ks, &ks, 0.3);
        let out = attend_one(&kv, (1, 0), &q, 0.3, 0, n);
        for (a, b) in out.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    #[test]
    fn growth_is_bounded_by_capacity_and_budget() {
        let budget = MemoryBudget::new(1 << 20);
        let mut kv = KvCache::new(&budget, KvType::F16, 1, 4, 100, |_| 100);
        kv.reserve(1).unwrap();
        assert_eq!(budget.held(), (2 * 4 * KV_CHUNK_TOKENS * 2) as u64);
        kv.reserve(100).unwrap();
        // The last chunk is cut at the capacity.
        assert_eq!(budget.held(), 2 * 4 * 100 * 2);
        assert!(matches!(
            kv.reserve(101),
            Err(EngineError::ContextOverflow { .. })
        ));
        let small = MemoryBudget::new(100);
        let mut kv = KvCache::new(&small, KvType::F32, 1, 4, 100, |_| 100);
        let e = kv.reserve(1).unwrap_err().to_string();
        assert!(e.contains("KV cache"), "{e}");
        assert_eq!(small.held(), 0);
    }
}
