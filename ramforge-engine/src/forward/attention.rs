//! Causal grouped-query attention of a batch of queries over the KV cache, tiled: the query
//! rows of one key/value head (every query head of its group, for a run of queries) go
//! through the cache together in tiles of [`TILE_ROWS`], one block of positions at a time
//! with an online softmax, so no score row of the whole context is ever stored. The cached
//! positions are cut into fixed [`SPLIT`]-aligned splits whose partial softmaxes are folded in
//! order: a prompt's tiles fold as they go, a single query's splits run in parallel (so a
//! decoding step keeps every thread busy at a long context however few heads there are) and
//! are folded after. Either way each query's arithmetic is the same, whatever the batch, the
//! thread count or the split into work items. A sliding-window layer's queries see only the
//! positions its cache keeps.

use crate::kv::{KvCache, Partial, TILE_ROWS};
use crate::model::ModelConfig;
use ramforge_quant::parallel::for_each_chunk_mut;
use std::ops::Range;

/// Below this many key/value elements (heads x queries x positions x head size) attention
/// runs on the calling thread.
const ATTENTION_PARALLEL_MIN: usize = 64 * 1024;

/// Cached positions per split: the unit a single query's attention is spread over threads
/// by. Fixed (not derived from the thread count) so results do not depend on it.
pub(crate) const SPLIT: usize = 256;

/// The shapes of one layer's attention.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Heads {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub scale: f32,
}

impl Heads {
    pub(crate) fn of(cfg: &ModelConfig) -> Heads {
        Heads {
            n_head: cfg.n_head,
            n_head_kv: cfg.n_head_kv,
            head_dim: cfg.head_dim,
            scale: cfg.attn_scale,
        }
    }

    fn group(&self) -> usize {
        self.n_head / self.n_head_kv
    }

    /// Floats of partial softmax state [`attend`] needs for `batch` queries at a context of
    /// `ctx`: per key/value head, either every split of one tile of a few queries, or a
    /// running and a per-split partial for each tile of a batch.
    pub(crate) fn scratch_floats(&self, batch: usize, ctx: usize) -> usize {
        let hd = self.head_dim;
        let per_head = batch.max(1) * self.group();
        let splits = ctx.div_ceil(SPLIT) + 1;
        let split_parallel = splits * Partial::floats(per_head.min(TILE_ROWS), hd);
        let tiled = per_head.div_ceil(TILE_ROWS) * 2 * Partial::floats(TILE_ROWS, hd);
        self.n_head_kv * split_parallel.max(tiled)
    }
}

/// Causal grouped-query attention of the query rows `rows` of `q` (token-major, the first
/// at position `first`, the next at `first + 1` ...) over the cache; the results land in the
/// same rows of `att`. Each query attends to itself and the positions before it that `layer`
/// keeps. `part` is the scratch's partial state ([`Heads::scratch_floats`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    cfg: &ModelConfig,
    layer: usize,
    kv: &KvCache,
    first: usize,
    rows: Range<usize>,
    q: &[f32],
    sinks: Option<&[f32]>,
    part: &mut [f32],
    att: &mut [f32],
) {
    attend(Heads::of(cfg), layer, kv, q, sinks, first, rows, part, att);
}

/// [`attention`] on plain slices: `q` and `att` token-major (`q_dim` per token), `part` at
/// least [`Heads::scratch_floats`] long. `sinks`: one logit per query head that joins each
/// softmax without a value (gpt-oss).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend(
    h: Heads,
    layer: usize,
    kv: &KvCache,
    q: &[f32],
    sinks: Option<&[f32]>,
    first: usize,
    rows: Range<usize>,
    part: &mut [f32],
    att: &mut [f32],
) {
    let n = rows.len();
    if n == 0 {
        return;
    }
    let (hd, group) = (h.head_dim, h.group());
    let qd = h.n_head * hd;
    let slots = kv.slots(layer);
    let lo = (first + 1).saturating_sub(slots);
    let hi = first + n;
    let first_split = lo / SPLIT;
    let n_splits = (hi - 1) / SPLIT - first_split + 1;
    let split = |k: usize| {
        let a = (first_split + k) * SPLIT;
        a..a + SPLIT
    };
    // Row `r` of key/value head `g`: query `r / group`, head `g * group + r % group`.
    let per_head = n * group;
    let tiles = per_head.div_ceil(TILE_ROWS);
    let tile = |t: usize| t * TILE_ROWS..((t + 1) * TILE_ROWS).min(per_head);
    let at = |g: usize, r: usize| (rows.start + r / group) * qd + (g * group + r % group) * hd;
    let sink = |g: usize, r: usize| sinks.map(|s| s[g * group + r % group]);
    let pos = |r: usize| first + r / group;
    let compute = |g: usize, t: Range<usize>, k: usize, buf: &mut [f32]| {
        let mut qs: [&[f32]; TILE_ROWS] = [&[]; TILE_ROWS];
        let mut ps = [0usize; TILE_ROWS];
        for (i, r) in t.clone().enumerate() {
            qs[i] = &q[at(g, r)..at(g, r) + hd];
            ps[i] = pos(r);
        }
        let m = t.len();
        kv.attend_split(
            (layer, g),
            &qs[..m],
            &ps[..m],
            h.scale,
            split(k),
            Partial::of(buf, m, hd),
        );
    };
    let work = h.n_head * n * (hi - lo) * hd;
    let parallel = work >= ATTENTION_PARALLEL_MIN;

    if tiles == 1 && n_splits > 1 {
        // A few queries (one decoding step): every (head, split) is a work item; each head's
        // splits are then folded in order into its first.
        let pf = Partial::floats(per_head, hd);
        let region = &mut part[..h.n_head_kv * n_splits * pf];
        let item =
            |i: usize, buf: &mut [f32]| compute(i / n_splits, 0..per_head, i % n_splits, buf);
        if parallel {
            for_each_chunk_mut(region, pf, item);
        } else {
            region
                .chunks_mut(pf)
                .enumerate()
                .for_each(|(i, buf)| item(i, buf));
        }
        for (g, splits) in region.chunks_mut(n_splits * pf).enumerate() {
            let (head, rest) = splits.split_at_mut(pf);
            let mut acc = Partial::of(head, per_head, hd);
            for other in rest.chunks_mut(pf) {
                acc.fold(&Partial::of(other, per_head, hd), hd);
            }
            for r in 0..per_head {
                acc.finish_row(r, hd, sink(g, r), &mut att[at(g, r)..at(g, r) + hd]);
            }
        }
        return;
    }

    // A batch of queries: every (head, tile) is a work item folding its splits as it goes.
    let pf = Partial::floats(TILE_ROWS, hd);
    let region = &mut part[..h.n_head_kv * tiles * 2 * pf];
    let item = |i: usize, buf: &mut [f32]| {
        let (g, t) = (i / tiles, tile(i % tiles));
        let (acc_buf, part_buf) = buf.split_at_mut(pf);
        compute(g, t.clone(), 0, acc_buf);
        for k in 1..n_splits {
            compute(g, t.clone(), k, part_buf);
            let m = t.len();
            Partial::of(acc_buf, m, hd).fold(&Partial::of(part_buf, m, hd), hd);
        }
    };
    if parallel {
        for_each_chunk_mut(region, 2 * pf, item);
    } else {
        region
            .chunks_mut(2 * pf)
            .enumerate()
            .for_each(|(i, buf)| item(i, buf));
    }
    for (i, buf) in region.chunks_mut(2 * pf).enumerate() {
        let (g, t) = (i / tiles, tile(i % tiles));
        let acc = Partial::of(buf, t.len(), hd);
        for (j, r) in t.enumerate() {
            acc.finish_row(j, hd, sink(g, r), &mut att[at(g, r)..at(g, r) + hd]);
        }
    }
}

#[cfg(test)]
mod tests;
