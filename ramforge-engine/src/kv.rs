//! The KV cache: keys and values of every layer for every position seen so far.
//!
//! Storage grows in chunks of [`KV_CHUNK_TOKENS`] positions, each charged to the budget when it
//! is allocated, up to the context the engine was planned for. Chunks are never moved or copied,
//! so growing costs only the new chunk.

use crate::budget::{Charge, MemoryBudget};
use crate::error::EngineError;
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
    F32,
}

impl KvType {
    pub fn bytes_per_element(self) -> u64 {
        match self {
            KvType::F16 => 2,
            KvType::F32 => 4,
        }
    }

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

/// Bytes of the cache for `ctx` positions.
pub fn kv_cache_bytes(n_layer: usize, kv_dim: usize, ctx: usize, ty: KvType) -> u64 {
    2 * n_layer as u64 * kv_dim as u64 * ctx as u64 * ty.bytes_per_element()
}

/// A cache element type: stored form of one f32.
trait Element: Copy + Default + Send + Sync {
    /// Widens a row to f32 (vectorised for f16).
    fn load_row(src: &[Self], dst: &mut [f32]);
}

impl Element for f32 {
    fn load_row(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
}

impl Element for f16 {
    fn load_row(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
}

/// Widest head handled with a stack buffer; wider heads use a heap row.
const STACK_HEAD: usize = 256;

enum ChunkData {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

/// Up to `KV_CHUNK_TOKENS` positions of every layer, laid out `[layer][k, v][position][kv_dim]`.
struct Chunk {
    data: ChunkData,
    tokens: usize,
    _charge: Charge,
}

/// The cache of one engine.
pub struct KvCache {
    budget: MemoryBudget,
    ty: KvType,
    n_layer: usize,
    kv_dim: usize,
    capacity: usize,
    chunks: Vec<Chunk>,
    len: usize,
}

impl KvCache {
    /// An empty cache that may grow to `capacity` positions; nothing is allocated yet.
    pub fn new(
        budget: &MemoryBudget,
        ty: KvType,
        n_layer: usize,
        kv_dim: usize,
        capacity: usize,
    ) -> KvCache {
        KvCache {
            budget: budget.clone(),
            ty,
            n_layer,
            kv_dim,
            capacity,
            chunks: Vec::new(),
            len: 0,
        }
    }

    /// Positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions this cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes allocated (and charged) now.
    pub fn allocated_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c._charge.bytes()).sum()
    }

    /// Forgets every position and releases the storage.
    pub fn clear(&mut self) {
        self.chunks.clear();
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
        while self.chunks.len() * KV_CHUNK_TOKENS < n {
            let first = self.chunks.len() * KV_CHUNK_TOKENS;
            let tokens = KV_CHUNK_TOKENS.min(self.capacity - first);
            let elems = 2 * self.n_layer * tokens * self.kv_dim;
            let charge = self
                .budget
                .charge("KV cache", elems as u64 * self.ty.bytes_per_element())?;
            let data = match self.ty {
                KvType::F16 => ChunkData::F16(vec![f16::ZERO; elems]),
                KvType::F32 => ChunkData::F32(vec![0.0; elems]),
            };
            self.chunks.push(Chunk {
                data,
                tokens,
                _charge: charge,
            });
        }
        Ok(())
    }

    /// Element offset of (layer, k=0/v=1, position-in-chunk) inside a chunk.
    fn offset(&self, chunk_tokens: usize, layer: usize, which: usize, p: usize) -> usize {
        ((layer * 2 + which) * chunk_tokens + p) * self.kv_dim
    }

    /// Stores the key and value rows of `layer` at `pos` (room must have been reserved).
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (ci, p) = (pos / KV_CHUNK_TOKENS, pos % KV_CHUNK_TOKENS);
        let tokens = self.chunks[ci].tokens;
        let ko = self.offset(tokens, layer, 0, p);
        let vo = self.offset(tokens, layer, 1, p);
        let d = self.kv_dim;
        match &mut self.chunks[ci].data {
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
        debug_assert!(n <= self.chunks.len() * KV_CHUNK_TOKENS);
        self.len = n;
    }

    /// Attention of one query head over positions `0..scores.len()` of `layer`, using
    /// key/value head `kv_head`: `out = softmax(q . K^T * scale) V`.
    pub fn attend(
        &self,
        layer: usize,
        kv_head: usize,
        q: &[f32],
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        let n_pos = scores.len();
        let hd = q.len();
        let col = kv_head * hd;
        // Scores, chunk by chunk.
        let mut max = f32::NEG_INFINITY;
        for (ci, chunk) in self.chunks.iter().enumerate() {
            let first = ci * KV_CHUNK_TOKENS;
            if first >= n_pos {
                break;
            }
            let count = chunk.tokens.min(n_pos - first);
            let base = self.offset(chunk.tokens, layer, 0, 0) + col;
            let s = &mut scores[first..first + count];
            match &chunk.data {
                ChunkData::F16(data) => dots(data, base, self.kv_dim, q, scale, s),
                ChunkData::F32(data) => dots(data, base, self.kv_dim, q, scale, s),
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
        for (ci, chunk) in self.chunks.iter().enumerate() {
            let first = ci * KV_CHUNK_TOKENS;
            if first >= n_pos {
                break;
            }
            let count = chunk.tokens.min(n_pos - first);
            let base = self.offset(chunk.tokens, layer, 1, 0) + col;
            let w = &scores[first..first + count];
            match &chunk.data {
                ChunkData::F16(data) => weighted_sum(data, base, self.kv_dim, w, out),
                ChunkData::F32(data) => weighted_sum(data, base, self.kv_dim, w, out),
            }
        }
        for o in out.iter_mut() {
            *o *= inv;
        }
    }
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
) {
    let hd = q.len();
    let mut stack = [0.0f32; STACK_HEAD];
    let mut heap = Vec::new();
    let row_f32: &mut [f32] = if hd <= STACK_HEAD {
        &mut stack[..hd]
    } else {
        heap.resize(hd, 0.0);
        &mut heap
    };
    for (p, s) in scores.iter_mut().enumerate() {
        T::load_row(&data[base + p * stride..base + p * stride + hd], row_f32);
        let acc: f32 = row_f32.iter().zip(q).map(|(k, qi)| k * qi).sum();
        *s = acc * scale;
    }
}

/// `out += sum_p w[p] V[p]` for the rows starting at `base`, `stride` apart.
fn weighted_sum<T: Element>(data: &[T], base: usize, stride: usize, w: &[f32], out: &mut [f32]) {
    let hd = out.len();
    let mut stack = [0.0f32; STACK_HEAD];
    let mut heap = Vec::new();
    let row_f32: &mut [f32] = if hd <= STACK_HEAD {
        &mut stack[..hd]
    } else {
        heap.resize(hd, 0.0);
        &mut heap
    };
    for (p, &wp) in w.iter().enumerate() {
        T::load_row(&data[base + p * stride..base + p * stride + hd], row_f32);
        for (o, v) in out.iter_mut().zip(row_f32.iter()) {
            *o += wp * v;
        }
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
            let mut kv = KvCache::new(&budget, ty, n_layer, kv_dim, n + 10);
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
            kv.attend(layer, head, &q, 0.35, &mut scores[..n], &mut out);
            for (a, b) in out.iter().zip(&want) {
                // Values are multiples of 1/8, exact in f16.
                assert!((a - b).abs() < 1e-5, "{ty:?}: {a} vs {b}");
            }
            kv.clear();
            assert_eq!(budget.held(), 0);
        }
    }

    #[test]
    fn growth_is_bounded_by_capacity_and_budget() {
        let budget = MemoryBudget::new(1 << 20);
        let mut kv = KvCache::new(&budget, KvType::F16, 1, 4, 100);
        kv.reserve(1).unwrap();
        assert_eq!(
            budget.held(),
            kv_cache_bytes(1, 4, KV_CHUNK_TOKENS, KvType::F16)
        );
        kv.reserve(100).unwrap();
        // The last chunk is cut at the capacity.
        assert_eq!(budget.held(), kv_cache_bytes(1, 4, 100, KvType::F16));
        assert!(matches!(
            kv.reserve(101),
            Err(EngineError::ContextOverflow { .. })
        ));
        let small = MemoryBudget::new(100);
        let mut kv = KvCache::new(&small, KvType::F32, 1, 4, 100);
        let e = kv.reserve(1).unwrap_err().to_string();
        assert!(e.contains("KV cache"), "{e}");
        assert_eq!(small.held(), 0);
    }
}
