//! One token's DeepSeek V4 attention in one layer, after its projections: the raw key row into
//! the window ring, the compressors' step (a compressed row, and in a ratio-4 layer an indexer
//! key, at the last token of each block), the lightning indexer's choice of compressed rows,
//! then one softmax per head over the window and the compressed rows with the head's sink,
//! values being the keys, and the output rotated back.

use super::super::ops::{rms_norm_in_place, rope_rows, RopeParams, Yarn};
use super::super::scratch::dsv4_work_lens;
use crate::kv::compressed::{CompressedRows, Fixed};
use crate::model::dsv4::Dsv4Config;
use crate::model::ModelConfig;
use half::f16;
use ramforge_quant::parallel::for_each_chunk_mut;

/// The RoPE of layer `l`: ratio-0 layers rotate with `rope.freq_base` unscaled; compressing
/// layers (their rows and indexer too) with `compress_rope_freq_base`, scaled by YaRN where
/// the file asks for it, its magnitude correction left out (llama.cpp cancels it).
pub(super) fn rope_params(cfg: &ModelConfig, l: usize) -> RopeParams<'static> {
    let d = cfg.dsv4.as_ref().expect("a deepseek4 model");
    if d.ratio(l) == 0 {
        return RopeParams {
            base: cfg.rope_base,
            scale: 1.0,
            dim: cfg.rope_dim,
            factors: None,
            yarn: None,
        };
    }
    let base = d.compress_rope_base;
    let scale = cfg.rope_freq_scale;
    RopeParams {
        base,
        scale,
        dim: cfg.rope_dim,
        factors: None,
        yarn: cfg.rope_yarn.filter(|_| scale != 1.0).map(|y| Yarn {
            mscale: 1.0,
            ..Yarn::new(
                cfg.rope_dim,
                base,
                y.n_ctx_orig,
                scale,
                (y.beta_fast, y.beta_slow),
                1.0,
            )
        }),
    }
}

/// cos then sin of each rotated pair at `pos` into `table` (`rope_dim` floats).
pub(super) fn angles(r: RopeParams<'_>, pos: usize, table: &mut [f32]) {
    rope_rows(r, std::iter::once(pos), table);
}

/// Rotates the last `table.len()` elements of each `head`-wide row of `x` by adjacent pairs
/// (or back, with `inverse`).
pub(super) fn rotate_tails(x: &mut [f32], head: usize, table: &[f32], inverse: bool) {
    let half = table.len() / 2;
    let (cos, sin) = table.split_at(half);
    let sign = if inverse { -1.0 } else { 1.0 };
    for row in x.chunks_exact_mut(head) {
        let tail = &mut row[head - 2 * half..];
        for j in 0..half {
            let (a, b) = (tail[2 * j], tail[2 * j + 1]);
            let (c, s) = (cos[j], sign * sin[j]);
            tail[2 * j] = a * c - b * s;
            tail[2 * j + 1] = a * s + b * c;
        }
    }
}

/// One row's inputs to [`attend`], all projected (and the queries normed and rotated).
pub(super) struct TokenInputs<'a> {
    /// Every head's query (`n_head * head_dim`).
    pub q: &'a [f32],
    /// The key/value row (normed, rotated).
    pub kv: &'a [f32],
    /// The compressor's entries and scores (position bias added), when the layer compresses.
    pub comp: Option<(&'a [f32], &'a [f32])>,
    /// The indexer's inputs, in a ratio-4 layer.
    pub idx: Option<IndexerInputs<'a>>,
}

/// One row's lightning-indexer inputs: its compressor's entries and scores, its queries
/// (rotated) and head weights (scaled).
#[derive(Clone, Copy)]
pub(super) struct IndexerInputs<'a> {
    pub kv: &'a [f32],
    pub score: &'a [f32],
    pub q: &'a [f32],
    pub weights: &'a [f32],
}

/// The norms a layer's compressors apply to a pooled row.
pub(super) struct Norms<'a> {
    pub comp: Option<&'a [f32]>,
    pub idx: Option<&'a [f32]>,
    pub sinks: &'a [f32],
}

/// Work buffers of [`attend`] (as many floats as the scratch's `dsv4_work_lens` says).
pub(super) struct Work<'a> {
    pub keys: &'a mut [f32],
    pub probs: &'a mut [f32],
    pub iscores: &'a mut [f32],
    pub row: &'a mut [f32],
    pub table: &'a mut [f32],
}

impl<'a> Work<'a> {
    /// The buffers at the start of `buf`, sized by the scratch's `dsv4_work_lens`.
    pub(super) fn carve(cfg: &ModelConfig, ctx: usize, buf: &'a mut [f32]) -> Work<'a> {
        let [keys, probs, iscores, row, table] = dsv4_work_lens(cfg, ctx);
        let (keys, rest) = buf.split_at_mut(keys);
        let (probs, rest) = rest.split_at_mut(probs);
        let (iscores, rest) = rest.split_at_mut(iscores);
        let (row, rest) = rest.split_at_mut(row);
        Work {
            keys,
            probs,
            iscores,
            row,
            table: &mut rest[..table],
        }
    }
}

/// Rounds `x` to what the cache keeps (f16, as llama.cpp's default cache type).
fn round(x: &mut [f32], half: bool) {
    if half {
        for v in x {
            *v = f16::from_f32(*v).to_f32();
        }
    }
}

/// Pushes one token's compressor entries and scores (`width` channels; twice that at ratio 4)
/// into the pending slots; at the last token of a block pools them into `out` (per channel,
/// a softmax of the scores weighting the entries; ratio 4 pools the previous block's first
/// halves with this block's second halves) and returns true.
fn compress(
    pending: &mut [f32],
    ratio: usize,
    width: usize,
    p: usize,
    (kv, score): (&[f32], &[f32]),
    out: &mut [f32],
) -> bool {
    let cw = if ratio == 4 { 2 * width } else { width };
    let slots = Dsv4Config::pending_tokens(ratio);
    let slot = &mut pending[(p % slots) * 2 * cw..][..2 * cw];
    slot[..cw].copy_from_slice(&kv[..cw]);
    slot[cw..].copy_from_slice(&score[..cw]);
    if !(p + 1).is_multiple_of(ratio) {
        return false;
    }
    let start = p + 1 - ratio;
    // (position, channel offset) of every entry pooled.
    let mut entries: Vec<(usize, usize)> = Vec::with_capacity(2 * ratio);
    if ratio == 4 {
        if start >= 4 {
            entries.extend((start - 4..start).map(|q| (q, 0)));
        }
        entries.extend((start..=p).map(|q| (q, width)));
    } else {
        entries.extend((start..=p).map(|q| (q, 0)));
    }
    let at = |q: usize, off: usize, c: usize| {
        let s = &pending[(q % slots) * 2 * cw..][..2 * cw];
        (s[off + c], s[cw + off + c])
    };
    for (c, o) in out[..width].iter_mut().enumerate() {
        let max = entries
            .iter()
            .fold(f32::NEG_INFINITY, |m, &(q, off)| m.max(at(q, off, c).1));
        let (mut num, mut den) = (0.0f32, 0.0f32);
        for &(q, off) in &entries {
            let (v, s) = at(q, off, c);
            let w = (s - max).exp();
            num += w * v;
            den += w;
        }
        *o = num / den;
    }
    true
}

/// Runs one token at position `p` of layer `l` over its sequence's state (`fixed`, `rows`):
/// stores its raw row and compressors' entries, then attends every head into `att`
/// (`n_head * head_dim`), rotated back.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend(
    cfg: &ModelConfig,
    l: usize,
    p: usize,
    x: &TokenInputs<'_>,
    norms: &Norms<'_>,
    (whole, rows, half): (&mut [f32], &mut CompressedRows, bool),
    w: &mut Work<'_>,
    att: &mut [f32],
) {
    let d = cfg.dsv4.as_ref().expect("a deepseek4 model");
    let (hd, nh, win) = (cfg.head_dim, cfg.n_head, d.window);
    let ratio = d.ratio(l);
    let fixed = Fixed::split(cfg, l, whole);
    let rope = rope_params(cfg, l);

    // The raw row, as the cache keeps it.
    let slot = &mut fixed.ring[(p % win) * hd..][..hd];
    slot.copy_from_slice(&x.kv[..hd]);
    round(slot, half);

    // The compressors' step: every token's entries; a row at the last token of a block.
    if let Some(entries) = x.comp {
        let di = d.indexer.head_dim;
        let (row, key) = w.row.split_at_mut(hd);
        let emitted = compress(fixed.comp, ratio, hd, p, entries, row);
        if let Some(idx) = x.idx {
            compress(fixed.idx, ratio, di, p, (idx.kv, idx.score), &mut key[..di]);
        }
        if emitted {
            let b = p / ratio;
            rms_norm_in_place(row, norms.comp.expect("compressor norm"), cfg.rms_eps);
            angles(rope, ratio * b, w.table);
            rotate_tails(row, hd, w.table, false);
            if x.idx.is_some() {
                let key = &mut key[..di];
                rms_norm_in_place(
                    key,
                    norms.idx.expect("indexer compressor norm"),
                    cfg.rms_eps,
                );
                rotate_tails(key, di, w.table, false);
            }
            rows.put(l, b, w.row);
        }
    }

    // The keys: the window, then the compressed rows this query sees.
    let lo = (p + 1).saturating_sub(win);
    let mut nk = 0;
    for q in lo..=p {
        w.keys[nk * hd..(nk + 1) * hd].copy_from_slice(&fixed.ring[(q % win) * hd..][..hd]);
        nk += 1;
    }
    let visible = (p + 1).checked_div(ratio).unwrap_or(0);
    match x.idx {
        Some(IndexerInputs {
            q: iq, weights: iw, ..
        }) if visible > d.indexer.top_k => {
            // The lightning indexer: sum over heads of relu(q . key) times the head's weight;
            // the top_k highest (the earlier first among equals), attended in order.
            let di = d.indexer.head_dim;
            let key = &mut w.row[..di];
            for j in 0..visible {
                rows.get(l, j, hd, key);
                w.iscores[j] = (0..d.indexer.n_head)
                    .map(|h| {
                        let dot: f32 = iq[h * di..(h + 1) * di]
                            .iter()
                            .zip(key.iter())
                            .map(|(a, b)| a * b)
                            .sum();
                        dot.max(0.0) * iw[h]
                    })
                    .sum();
            }
            // The k-th highest score, found in a copy; then every row above it and, in
            // order, as many of those equal to it as the top_k still takes.
            let k = d.indexer.top_k;
            let (scores, sorted) = w.iscores.split_at_mut(visible);
            let sorted = &mut sorted[..visible];
            sorted.copy_from_slice(scores);
            let (_, &mut cut, _) = sorted.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            let mut ties = k - scores.iter().filter(|s| s.total_cmp(&cut).is_gt()).count();
            for (j, s) in scores.iter().enumerate() {
                let take = match s.total_cmp(&cut) {
                    std::cmp::Ordering::Greater => true,
                    std::cmp::Ordering::Equal if ties > 0 => {
                        ties -= 1;
                        true
                    }
                    _ => false,
                };
                if take {
                    rows.get(l, j, 0, &mut w.keys[nk * hd..(nk + 1) * hd]);
                    nk += 1;
                }
            }
        }
        _ => {
            for j in 0..visible {
                rows.get(l, j, 0, &mut w.keys[nk * hd..(nk + 1) * hd]);
                nk += 1;
            }
        }
    }

    // One softmax per head over every key, the sink in its denominator; values are keys.
    let keys = &w.keys[..nk * hd];
    let scale = cfg.attn_scale;
    for_each_chunk_mut(&mut w.probs[..nh * nk], nk, |h, probs| {
        let q = &x.q[h * hd..(h + 1) * hd];
        for (pr, k) in probs.iter_mut().zip(keys.chunks_exact(hd)) {
            *pr = q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale;
        }
        let sink = norms.sinks[h];
        let max = probs.iter().fold(sink, |m, &v| m.max(v));
        let mut sum = (sink - max).exp();
        for pr in probs.iter_mut() {
            *pr = (*pr - max).exp();
            sum += *pr;
        }
        for pr in probs.iter_mut() {
            *pr /= sum;
        }
    });
    let probs = &w.probs[..nh * nk];
    for_each_chunk_mut(&mut att[..nh * hd], hd, |h, out| {
        out.fill(0.0);
        for (&pr, k) in probs[h * nk..(h + 1) * nk]
            .iter()
            .zip(keys.chunks_exact(hd))
        {
            for (o, &v) in out.iter_mut().zip(k) {
                *o += pr * v;
            }
        }
    });
    angles(rope, p, w.table);
    rotate_tails(&mut att[..nh * hd], hd, w.table, true);
}
