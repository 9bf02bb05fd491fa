//! Causal grouped-query attention of a batch of queries over the KV cache, heads in parallel.

use super::scratch::Scratch;
use crate::kv::KvCache;
use crate::model::ModelConfig;
use rayon::prelude::*;

/// Below this many key/value elements (heads x queries x positions x head size) attention
/// runs on the calling thread.
const ATTENTION_PARALLEL_MIN: usize = 64 * 1024;

/// Causal grouped-query attention of the `n` query rows in `s.q` over the cache, heads in
/// parallel; the result lands token-major in `s.att`.
pub(crate) fn attention(
    cfg: &ModelConfig,
    layer: usize,
    s: &mut Scratch,
    kv: &KvCache,
    first: usize,
    n: usize,
) {
    let hd = cfg.head_dim;
    let qd = cfg.q_dim();
    let group = cfg.n_head / cfg.n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let q = &s.q;
    let ctx = s.ctx;
    let head = |h: usize, out: &mut [f32], scores: &mut [f32]| {
        for i in 0..n {
            let qrow = &q[i * qd + h * hd..i * qd + (h + 1) * hd];
            let o = &mut out[i * hd..(i + 1) * hd];
            kv.attend(
                layer,
                h / group,
                qrow,
                scale,
                &mut scores[..first + i + 1],
                o,
            );
        }
    };
    // Key/value elements read, summed over the heads: a short context's attention is cheaper
    // than waking the pool for it.
    let work = cfg.n_head * n * (first + n) * hd;
    if work < ATTENTION_PARALLEL_MIN {
        let heads = s.att_heads[..n * qd].chunks_mut(n * hd);
        for (h, (out, scores)) in heads.zip(s.scores.chunks_mut(ctx)).enumerate() {
            head(h, out, scores);
        }
    } else {
        s.att_heads[..n * qd]
            .par_chunks_mut(n * hd)
            .zip(s.scores.par_chunks_mut(ctx))
            .enumerate()
            .for_each(|(h, (out, scores))| head(h, out, scores));
    }
    for h in 0..cfg.n_head {
        for i in 0..n {
            let src = &s.att_heads[h * n * hd + i * hd..][..hd];
            s.att[i * qd + h * hd..][..hd].copy_from_slice(src);
        }
    }
}
