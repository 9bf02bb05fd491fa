//! Causal grouped-query attention of a batch of queries over the KV cache, heads in parallel;
//! a sliding-window layer's queries see only the positions its cache keeps.

use super::scratch::Scratch;
use crate::kv::KvCache;
use crate::model::ModelConfig;
use rayon::prelude::*;
use std::ops::Range;

/// Below this many key/value elements (heads x queries x positions x head size) attention
/// runs on the calling thread.
const ATTENTION_PARALLEL_MIN: usize = 64 * 1024;

/// Causal grouped-query attention of the query rows `rows` of `s.q` (the first at position
/// `first`, the next at `first + 1` ...) over the cache, heads in parallel; the results land
/// in the same rows of `s.att`. Each query attends to itself and the positions before it that
/// `layer` keeps.
pub(crate) fn attention(
    cfg: &ModelConfig,
    layer: usize,
    s: &mut Scratch,
    kv: &KvCache,
    first: usize,
    rows: Range<usize>,
) {
    let hd = cfg.head_dim;
    let qd = cfg.q_dim();
    let group = cfg.n_head / cfg.n_head_kv;
    let scale = cfg.attn_scale;
    let slots = kv.slots(layer);
    let n = rows.len();
    let q = &s.q;
    let ctx = s.ctx;
    // The positions query `i` sees: the last `slots` up to its own.
    let start = rows.start;
    let seen = |i: usize| {
        let end = first + (i - start) + 1;
        end.saturating_sub(slots)..end
    };
    let head = |h: usize, out: &mut [f32], scores: &mut [f32]| {
        for (j, i) in rows.clone().enumerate() {
            let qrow = &q[i * qd + h * hd..i * qd + (h + 1) * hd];
            let o = &mut out[j * hd..(j + 1) * hd];
            let keys = seen(i);
            kv.attend(
                (layer, h / group),
                qrow,
                scale,
                keys.start,
                &mut scores[..keys.len()],
                o,
            );
        }
    };
    // Key/value elements read, summed over the heads: a short context's attention is cheaper
    // than waking the pool for it.
    let work = cfg.n_head * n * seen(rows.end - 1).len() * hd;
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
        for (j, i) in rows.clone().enumerate() {
            let src = &s.att_heads[h * n * hd + j * hd..][..hd];
            s.att[i * qd + h * hd..][..hd].copy_from_slice(src);
        }
    }
}
