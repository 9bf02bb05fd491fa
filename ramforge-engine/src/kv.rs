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
/// full).
pub fn kv_cache_bytes(cfg: &ModelConfig, ctx: usize, ty: KvType) -> u64 {
    (0..cfg.n_layer)
        .map(|l| 2 * cfg.kv_dim() as u64 * cfg.kv_positions(l, ctx) as u64)
        .sum::<u64>()
        * ty.bytes_per_element()
}

/// A cache element type: stored form of one f32. The row kernels read the stored form
/// directly (f16 is widened in registers), so attention never copies a row.
trait Element: Copy + Default + Send + Sync {
    /// `sum_i row[i] q[i]`, in f32.
    fn dot(row: &[Self], q: &[f32], simd: bool) -> f32;
    /// `out[i] += w * row[i]`.
    fn axpy(w: f32, row: &[Self], out: &mut [f32], simd: bool);
}

impl Element for f32 {
    #[inline]
    fn dot(row: &[f32], q: &[f32], simd: bool) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: `simd` is only true when the CPU has AVX2, FMA and F16C.
            return unsafe { avx2::dot_f32(row, q) };
        }
        let _ = simd;
        row.iter().zip(q).map(|(k, qi)| k * qi).sum()
    }

    #[inline]
    fn axpy(w: f32, row: &[f32], out: &mut [f32], simd: bool) {
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: as above.
            return unsafe { avx2::axpy_f32(w, row, out) };
        }
        let _ = simd;
        for (o, v) in out.iter_mut().zip(row) {
            *o += w * v;
        }
    }
}

impl Element for f16 {
    #[inline]
    fn dot(row: &[f16], q: &[f32], simd: bool) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: as above.
            return unsafe { avx2::dot_f16(row, q) };
        }
        let _ = simd;
        row.iter().zip(q).map(|(k, qi)| k.to_f32() * qi).sum()
    }

    #[inline]
    fn axpy(w: f32, row: &[f16], out: &mut [f32], simd: bool) {
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: as above.
            return unsafe { avx2::axpy_f16(w, row, out) };
        }
        let _ = simd;
        for (o, v) in out.iter_mut().zip(row) {
            *o += w * v.to_f32();
        }
    }
}

/// Whether the row kernels may use AVX2 + FMA + F16C (the instruction set the quant kernels
/// run on, so `RAMFORGE_ISA=scalar` turns this off too).
fn simd_rows() -> bool {
    ramforge_quant::isa::active() == ramforge_quant::isa::Isa::Avx2
}

/// The attention row kernels for AVX2 + FMA + F16C: 8 lanes, two accumulators, f16 widened
/// with `vcvtph2ps` as it is loaded. Tails (head sizes not a multiple of 8) run scalar.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use half::f16;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// 8 f16 at `p`, widened.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_f16(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    macro_rules! row_kernels {
        ($dot:ident, $axpy:ident, $t:ty, $load:ident, $scalar:path) => {
            /// `sum_i row[i] q[i]`. Caller: the CPU has AVX2, FMA and F16C.
            #[target_feature(enable = "avx2,fma,f16c")]
            pub(super) unsafe fn $dot(row: &[$t], q: &[f32]) -> f32 {
                let n = row.len().min(q.len());
                let (r, qp) = (row.as_ptr(), q.as_ptr());
                let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let mut i = 0;
                while i + 16 <= n {
                    a0 = _mm256_fmadd_ps($load(r.add(i)), _mm256_loadu_ps(qp.add(i)), a0);
                    a1 = _mm256_fmadd_ps($load(r.add(i + 8)), _mm256_loadu_ps(qp.add(i + 8)), a1);
                    i += 16;
                }
                if i + 8 <= n {
                    a0 = _mm256_fmadd_ps($load(r.add(i)), _mm256_loadu_ps(qp.add(i)), a0);
                    i += 8;
                }
                let mut s = hsum(_mm256_add_ps(a0, a1));
                for j in i..n {
                    s += $scalar(row[j]) * q[j];
                }
                s
            }

            /// `out[i] += w * row[i]`. Caller: the CPU has AVX2, FMA and F16C.
            #[target_feature(enable = "avx2,fma,f16c")]
            pub(super) unsafe fn $axpy(w: f32, row: &[$t], out: &mut [f32]) {
                let n = row.len().min(out.len());
                let (r, op) = (row.as_ptr(), out.as_mut_ptr());
                let wv = _mm256_set1_ps(w);
                let mut i = 0;
                while i + 8 <= n {
                    let o = _mm256_loadu_ps(op.add(i));
                    _mm256_storeu_ps(op.add(i), _mm256_fmadd_ps(wv, $load(r.add(i)), o));
                    i += 8;
                }
                for j in i..n {
                    out[j] += w * $scalar(row[j]);
                }
            }
        };
    }

    /// 8 f32 at `p`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_f32(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }

    row_kernels!(dot_f32, axpy_f32, f32, load_f32, f32::from);
    row_kernels!(dot_f16, axpy_f16, f16, load_f16, f16::to_f32);
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
    capacity: usize,
    stores: Vec<Store>,
    /// Each layer's store and its index among the store's layers.
    layers: Vec<(usize, usize)>,
    len: usize,
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
            capacity,
            stores,
            layers,
            len: 0,
        }
    }

    /// The cache `cfg` needs for a context of `capacity`.
    pub fn for_model(
        budget: &MemoryBudget,
        ty: KvType,
        cfg: &ModelConfig,
        capacity: usize,
    ) -> KvCache {
        KvCache::new(budget, ty, cfg.n_layer, cfg.kv_dim(), capacity, |l| {
            cfg.kv_positions(l, capacity)
        })
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
        for store in &mut self.stores {
            let want = n.min(store.slots);
            while store.chunks.len() * KV_CHUNK_TOKENS < want {
                let first = store.chunks.len() * KV_CHUNK_TOKENS;
                let tokens = KV_CHUNK_TOKENS.min(store.slots - first);
                let elems = 2 * store.n_layer * tokens * self.kv_dim;
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

    /// Element offset of (layer-in-store, k=0/v=1, slot-in-chunk) inside a chunk.
    fn offset(&self, chunk_tokens: usize, layer: usize, which: usize, p: usize) -> usize {
        ((layer * 2 + which) * chunk_tokens + p) * self.kv_dim
    }

    /// Stores the key and value rows of `layer` at `pos` (room must have been reserved). In a
    /// layer that keeps fewer positions than the context, this overwrites `pos - slots`.
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
                store(&mut data[vo..vo + d], v);
            }
            ChunkData::F32(data) => {
                data[ko..ko + d].copy_from_slice(k);
                data[vo..vo + d].copy_from_slice(v);
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

    /// Attention of one query head over positions `first..first + scores.len()` of `layer`
    /// (at most the positions it keeps), using key/value head `kv_head`:
    /// `out = softmax(q . K^T * scale) V`.
    pub fn attend(
        &self,
        (layer, kv_head): (usize, usize),
        q: &[f32],
        scale: f32,
        first: usize,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        let n_pos = scores.len();
        let (si, li) = self.layers[layer];
        debug_assert!(n_pos <= self.stores[si].slots);
        let hd = q.len();
        let col = kv_head * hd;
        let simd = simd_rows();
        let chunks = &self.stores[si].chunks;
        let mut max = f32::NEG_INFINITY;
        for r in self.runs(si, first, n_pos) {
            let chunk = &chunks[r.chunk];
            let base = self.offset(chunk.tokens, li, 0, r.at) + col;
            let s = &mut scores[r.offset..r.offset + r.count];
            match &chunk.data {
                ChunkData::F16(data) => dots(data, base, self.kv_dim, q, scale, s, simd),
                ChunkData::F32(data) => dots(data, base, self.kv_dim, q, scale, s, simd),
            }
            max = s.iter().fold(max, |m, &x| m.max(x));
        }
        let mut sum = 0.0f64;
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            sum += *s as f64;
        }
        let inv = (1.0 / sum) as f32;
        out.fill(0.0);
        for r in self.runs(si, first, n_pos) {
            let chunk = &chunks[r.chunk];
            let base = self.offset(chunk.tokens, li, 1, r.at) + col;
            let w = &scores[r.offset..r.offset + r.count];
            match &chunk.data {
                ChunkData::F16(data) => weighted_sum(data, base, self.kv_dim, w, out, simd),
                ChunkData::F32(data) => weighted_sum(data, base, self.kv_dim, w, out, simd),
            }
        }
        for o in out.iter_mut() {
            *o *= inv;
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

/// `scores[p] = scale * sum_i q[i] K[p][i]` for the rows starting at `base`, `stride` apart.
fn dots<T: Element>(
    data: &[T],
    base: usize,
    stride: usize,
    q: &[f32],
    scale: f32,
    scores: &mut [f32],
    simd: bool,
) {
    let hd = q.len();
    for (p, s) in scores.iter_mut().enumerate() {
        let row = &data[base + p * stride..base + p * stride + hd];
        *s = T::dot(row, q, simd) * scale;
    }
}

/// `out += sum_p w[p] V[p]` for the rows starting at `base`, `stride` apart.
fn weighted_sum<T: Element>(
    data: &[T],
    base: usize,
    stride: usize,
    w: &[f32],
    out: &mut [f32],
    simd: bool,
) {
    let hd = out.len();
    for (p, &wp) in w.iter().enumerate() {
        let row = &data[base + p * stride..base + p * stride + hd];
        T::axpy(wp, row, out, simd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let mut scores = vec![0.0; n];
            let mut out = vec![0.0; hd];
            kv.attend((layer, head), &q, 0.35, 0, &mut scores[..n], &mut out);
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
            let mut scores = vec![0.0; n - first];
            let mut out = vec![0.0; hd];
            kv.attend((layer, 0), &q, 0.5, first, &mut scores, &mut out);
            for (a, b) in out.iter().zip(&want) {
                assert!(
                    (a - b).abs() < 1e-5,
                    "layer {layer} from {first}: {a} vs {b}"
                );
            }
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

    #[test]
    fn simd_rows_match_the_scalar_rows() {
        if !ramforge_quant::isa::Isa::Avx2.is_available() {
            return; // Nothing to compare on this CPU: only the scalar rows exist.
        }
        let val =
            |i: usize, salt: usize| ((i * 2654435761 + salt * 97) % 1000) as f32 / 500.0 - 1.0;
        for hd in [1, 7, 8, 13, 16, 64, 72, 128, 200] {
            let q: Vec<f32> = (0..hd).map(|i| val(i, 1)).collect();
            let k32: Vec<f32> = (0..hd).map(|i| val(i, 2)).collect();
            let k16: Vec<f16> = k32.iter().map(|&v| f16::from_f32(v)).collect();
            let mag: f32 = k32.iter().zip(&q).map(|(a, b)| (a * b).abs()).sum();
            for (a, b) in [
                (f32::dot(&k32, &q, true), f32::dot(&k32, &q, false)),
                (f16::dot(&k16, &q, true), f16::dot(&k16, &q, false)),
            ] {
                assert!((a - b).abs() <= 1e-5 * mag, "hd {hd}: {a} vs {b}");
            }
            for simd_first in [true, false] {
                let mut o1: Vec<f32> = (0..hd).map(|i| val(i, 3)).collect();
                let mut o2 = o1.clone();
                f16::axpy(0.37, &k16, &mut o1, simd_first);
                f16::axpy(0.37, &k16, &mut o2, !simd_first);
                f32::axpy(-1.5, &k32, &mut o1, simd_first);
                f32::axpy(-1.5, &k32, &mut o2, !simd_first);
                for (a, b) in o1.iter().zip(&o2) {
                    assert!(
                        (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                        "hd {hd}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
