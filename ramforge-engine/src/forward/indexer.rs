//! DeepSeek sparse attention's lightning indexer (`glm-dsa`), as llama.cpp's
//! `src/models/glm-dsa.cpp` computes it. Per token: a key of one head (`indexer.attn_k` of the
//! normed input, LayerNormed with its bias), queries of `indexer.head_count` heads
//! (`indexer.attn_q_b` of the normed q-LoRA latent), both RoPEd on their leading
//! `rope.dimension_count` elements (adjacent pairs) and rotated by the normalized Hadamard
//! matrix, and one weight per head (`indexer.proj` of the normed input, scaled by
//! `1/sqrt(key_length * head_count)`). The key is cached after the MLA row. A query at
//! position `p` scores each position `j <= p` as `sum_h weight_h * relu(q_h . key_j)` and
//! attends only to the `top_k` best; while `p < top_k` that is every position, and the dense
//! attention's result stands.

use super::matmul::matmul;
use super::ops::apply_rope;
use super::scratch::{mla_base_floats, Scratch};
use crate::error::EngineError;
use crate::kv::KvCache;
use crate::model::arch::Role;
use crate::model::ModelConfig;
use crate::weights::{LayerVectors, LayerView};

/// The normalized Walsh-Hadamard transform of `x` (a power of two long), in place. It is
/// orthogonal, so it keeps every dot product of two transformed vectors; llama.cpp applies
/// its Hadamard matrix to the indexer's queries and keys alike.
fn hadamard(x: &mut [f32]) {
    let n = x.len();
    let mut h = 1;
    while h < n {
        for block in x.chunks_exact_mut(2 * h) {
            let (lo, hi) = block.split_at_mut(h);
            for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
                (*a, *b) = (*a + *b, *a - *b);
            }
        }
        h *= 2;
    }
    let s = 1.0 / (n as f32).sqrt();
    for v in x {
        *v *= s;
    }
}

/// LayerNorm with weight and bias, in place (llama.cpp's `LLM_NORM`).
fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = x.len() as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, &w), &b) in x.iter_mut().zip(w).zip(b) {
        *v = (*v - mean) * inv * w + b;
    }
}

/// For the `n` rows of `s.xn` (normed input) whose normed q-LoRA latents MLA left in its
/// scratch: each row's indexer key into the tail of its cache row in `s.k`, its queries and
/// head weights into the indexer's scratch. Runs after [`super::mla::queries_and_latent`] and
/// before the rows are written to the cache.
pub(super) fn keys_and_queries(
    cfg: &ModelConfig,
    layer: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let (Some(m), Some(x)) = (cfg.mla, cfg.indexer) else {
        return Ok(());
    };
    let (hi, di, rope, hw) = (x.n_head, x.head_dim, cfg.rope_dim, cfg.head_dim);
    let row = rope + m.kv_lora_rank;
    if !cfg.indexer_is_full(layer) {
        // A shared layer has no indexer: its cache rows' indexer keys are never read.
        for t in 0..n {
            s.k[t * hw + row..][..di].fill(0.0);
        }
        return Ok(());
    }
    let style = cfg.arch.rope;
    let Scratch {
        xn,
        k,
        act,
        mla,
        rope: table,
        ..
    } = &mut *s;
    let (base, tail) = mla.split_at_mut(mla_base_floats(cfg, n));
    let lora = &base[n * cfg.n_head * (m.qk_nope + rope)..][..n * m.q_lora_rank];
    let (iq, rest) = tail.split_at_mut(n * hi * di);
    let (iw, rest) = rest.split_at_mut(n * hi);
    let ik = &mut rest[..n * di];
    matmul(
        [(w.matrix(Role::IndexerQB), &mut iq[..])],
        lora,
        n,
        act,
        per_token,
    )?;
    matmul(
        [
            (w.matrix(Role::IndexerK), &mut ik[..]),
            (w.matrix(Role::IndexerProj), &mut iw[..]),
        ],
        xn,
        n,
        act,
        per_token,
    )?;
    let (norm_w, norm_b) = (
        vecs.norm(Role::IndexerKNorm),
        vecs.norm(Role::IndexerKNormBias),
    );
    for key in ik.chunks_exact_mut(di) {
        layer_norm(key, norm_w, norm_b, x.norm_eps);
    }
    apply_rope(iq, n, hi, di, rope, style, table);
    apply_rope(ik, n, 1, di, rope, style, table);
    for v in iq.chunks_exact_mut(di).chain(ik.chunks_exact_mut(di)) {
        hadamard(v);
    }
    let scale = 1.0 / ((di * hi) as f32).sqrt();
    for v in iw.iter_mut() {
        *v *= scale;
    }
    for t in 0..n {
        k[t * hw + row..][..di].copy_from_slice(&ik[t * di..][..di]);
    }
    Ok(())
}

/// The selection: a heap of at most `cap` positions (kept as f32, exact below 2^24), its root
/// the worst kept. A lower score is worse, and among equal scores the later position, so a
/// tie at the cut keeps the earlier position whatever order the positions come in.
struct TopK<'a> {
    score: &'a mut [f32],
    pos: &'a mut [f32],
    len: usize,
}

/// Whether `(s, p)` ranks below `(t, q)`: a lower score, or an equal one at a later position.
fn worse(s: f32, p: f32, t: f32, q: f32) -> bool {
    s < t || (s == t && p > q)
}

impl TopK<'_> {
    fn push(&mut self, score: f32, pos: usize) {
        let cap = self.score.len();
        let pos = pos as f32;
        let mut i = if self.len < cap {
            self.len += 1;
            let mut i = self.len - 1;
            while i > 0 {
                let p = (i - 1) / 2;
                if !worse(score, pos, self.score[p], self.pos[p]) {
                    break;
                }
                self.score[i] = self.score[p];
                self.pos[i] = self.pos[p];
                i = p;
            }
            self.score[i] = score;
            self.pos[i] = pos;
            return;
        } else if cap > 0 && worse(self.score[0], self.pos[0], score, pos) {
            0
        } else {
            return;
        };
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let (mut c, mut bs, mut bp) = (i, score, pos);
            for ch in [l, r] {
                if ch < cap && worse(self.score[ch], self.pos[ch], bs, bp) {
                    (c, bs, bp) = (ch, self.score[ch], self.pos[ch]);
                }
            }
            if c == i {
                break;
            }
            self.score[i] = self.score[c];
            self.pos[i] = self.pos[c];
            i = c;
        }
        self.score[i] = score;
        self.pos[i] = pos;
    }
}

/// Replaces the dense attention output in `s.att` of every row whose position is at least
/// `top_k` by attention over the `top_k` positions its indexer scores highest. The rows'
/// cache rows (the latent row and the indexer key) must already be stored.
/// Row `t` of the `n` rows belongs to the sequence `at(t)` names, at its position. A shared
/// layer (GLM-5.2) attends to the positions the last full layer chose for the same row, kept
/// in the scratch between the layers of a pass. The MTP layer (`--mtp`) keeps its dense result.
pub(super) fn sparse_attention<'k>(
    cfg: &ModelConfig,
    layer: usize,
    s: &mut Scratch,
    n: usize,
    at: impl Fn(usize) -> (&'k KvCache, usize),
) -> Result<(), EngineError> {
    let (Some(m), Some(x)) = (cfg.mla, cfg.indexer) else {
        return Ok(());
    };
    if layer >= cfg.n_layer {
        // The MTP layer attends to every position, as llama.cpp's MTP graph runs it: drafts
        // from its own indexer's choice differ from llama.cpp's once top-k cuts.
        return Ok(());
    }
    let (h, hi, di, hw) = (cfg.n_head, x.n_head, x.head_dim, cfg.head_dim);
    let row = cfg.rope_dim + m.kv_lora_rank;
    let full = cfg.indexer_is_full(layer);
    let Scratch { q, att, mla, .. } = &mut *s;
    let tail = &mut mla[mla_base_floats(cfg, n)..];
    let (iq, rest) = tail.split_at_mut(n * hi * di);
    let (iw, rest) = rest.split_at_mut(n * hi);
    let rest = &mut rest[n * di..];
    let (sel_s, rest) = rest.split_at_mut(x.top_k);
    // Each row's choice, its count first: kept per row when later layers share it.
    let kept = if cfg.indexer_has_shared_layers() {
        n
    } else {
        1
    };
    let (choices, rest) = rest.split_at_mut(kept * (x.top_k + 1));
    let (run_m, rest) = rest.split_at_mut(h);
    let (run_s, rest) = rest.split_at_mut(h);
    let buf = &mut rest[..hw];
    for t in 0..n {
        let (kv, p) = at(t);
        if p < x.top_k {
            continue;
        }
        if p >= 1 << 24 {
            return Err(EngineError::Unsupported(format!(
                "sparse attention at position {p} (at most 2^24)"
            )));
        }
        let (count, sel_p) = choices[(t % kept) * (x.top_k + 1)..][..x.top_k + 1]
            .split_first_mut()
            .expect("room for the count");
        if full {
            // Score every earlier position by the indexer; keep the best top_k. As
            // llama.cpp's fused `ggml_lightning_indexer`: the queries in f32, each cached key
            // widened to f32.
            let mut top = TopK {
                score: &mut sel_s[..],
                pos: &mut sel_p[..],
                len: 0,
            };
            let (qs, ws) = (&iq[t * hi * di..][..hi * di], &iw[t * hi..][..hi]);
            for j in 0..=p {
                let key = &mut buf[..di];
                kv.read_row(layer, j, row, key);
                let mut score = 0.0f32;
                for (qh, &wh) in qs.chunks_exact(di).zip(ws) {
                    let d: f32 = qh.iter().zip(key.iter()).map(|(a, b)| a * b).sum();
                    score += d.max(0.0) * wh;
                }
                top.push(score, j);
            }
            let len = top.len;
            *count = len as f32;
            sel_p[..len].sort_by(|a, b| a.total_cmp(b));
        }
        let chosen = &sel_p[..*count as usize];
        // Attention over the chosen positions, online softmax per head.
        let out = &mut att[t * h * hw..][..h * hw];
        out.fill(0.0);
        run_m.fill(f32::NEG_INFINITY);
        run_s.fill(0.0);
        for &jf in chosen.iter() {
            let r = &mut buf[..row];
            kv.read_row(layer, jf as usize, 0, r);
            for hd in 0..h {
                let qh = &q[(t * h + hd) * hw..][..row];
                let sc = cfg.attn_scale * qh.iter().zip(r.iter()).map(|(a, b)| a * b).sum::<f32>();
                let acc = &mut out[hd * hw..][..row];
                if sc > run_m[hd] {
                    let c = (run_m[hd] - sc).exp();
                    run_s[hd] *= c;
                    for v in acc.iter_mut() {
                        *v *= c;
                    }
                    run_m[hd] = sc;
                }
                let wgt = (sc - run_m[hd]).exp();
                run_s[hd] += wgt;
                for (a, &v) in acc.iter_mut().zip(r.iter()) {
                    *a += wgt * v;
                }
            }
        }
        for hd in 0..h {
            let inv = 1.0 / run_s[hd];
            for v in &mut out[hd * hw..][..row] {
                *v *= inv;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{hadamard, TopK};

    /// llama.cpp's rotation matrix (`ggml_gen_hadamard`): Sylvester's construction from
    /// `1/sqrt(n)`, row-major.
    fn sylvester(n: usize) -> Vec<f32> {
        let mut m = vec![0.0f32; n * n];
        m[0] = 1.0 / (n as f32).sqrt();
        let mut s = 1;
        while s < n {
            for i in 0..s {
                for j in 0..s {
                    let v = m[i * n + j];
                    m[(i + s) * n + j] = v;
                    m[i * n + j + s] = v;
                    m[(i + s) * n + j + s] = -v;
                }
            }
            s *= 2;
        }
        m
    }

    fn vector(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
                x as f32 / (1 << 24) as f32 - 0.5
            })
            .collect()
    }

    #[test]
    fn hadamard_is_the_sylvester_matrix_product() {
        for n in [1, 2, 4, 64, 128, 256] {
            let (m, x) = (sylvester(n), vector(n, 7));
            let mut y = x.clone();
            hadamard(&mut y);
            for (i, &got) in y.iter().enumerate() {
                let want: f32 = m[i * n..][..n].iter().zip(&x).map(|(a, b)| a * b).sum();
                assert!(
                    (got - want).abs() <= 1e-5,
                    "n {n}, row {i}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn hadamard_is_orthogonal_and_its_own_inverse() {
        let n = 128;
        let (a, b) = (vector(n, 1), vector(n, 2));
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        let (mut ha, mut hb) = (a.clone(), b.clone());
        hadamard(&mut ha);
        hadamard(&mut hb);
        // Dot products (the indexer's scores) and norms are kept.
        assert!((dot(&ha, &hb) - dot(&a, &b)).abs() <= 1e-5);
        assert!((dot(&ha, &ha) - dot(&a, &a)).abs() <= 1e-5);
        // H is symmetric and orthogonal, so H H = I.
        hadamard(&mut ha);
        for (x, y) in ha.iter().zip(&a) {
            assert!((x - y).abs() <= 1e-6);
        }
        // Rows of the matrix are orthonormal.
        let m = sylvester(n);
        for i in 0..n {
            for j in 0..n {
                let d = dot(&m[i * n..][..n], &m[j * n..][..n]);
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((d - want).abs() <= 1e-5, "rows {i}, {j}: {d}");
            }
        }
    }

    /// The positions [`TopK`] keeps of `scores` (pushed in order), sorted.
    fn top(scores: &[f32], k: usize) -> Vec<usize> {
        let (mut s, mut p) = (vec![0.0; k], vec![0.0; k]);
        let mut t = TopK {
            score: &mut s,
            pos: &mut p,
            len: 0,
        };
        for (j, &v) in scores.iter().enumerate() {
            t.push(v, j);
        }
        let len = t.len;
        let mut kept: Vec<usize> = p[..len].iter().map(|&v| v as usize).collect();
        kept.sort_unstable();
        kept
    }

    /// The reference: the `k` best by score, the earlier position first among equals.
    fn naive(scores: &[f32], k: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        let mut kept = order[..k.min(scores.len())].to_vec();
        kept.sort_unstable();
        kept
    }

    #[test]
    fn top_k_keeps_the_best_scores() {
        let scores: Vec<f32> = vector(300, 3).iter().map(|v| v * 10.0).collect();
        for k in [1, 2, 7, 8, 64, 299] {
            assert_eq!(top(&scores, k), naive(&scores, k), "k {k}");
        }
        // k = 1: the maximum, wherever it is.
        let mut s = vec![0.5f32; 9];
        s[4] = 2.0;
        assert_eq!(top(&s, 1), vec![4]);
        s[0] = 3.0;
        assert_eq!(top(&s, 1), vec![0]);
        s[8] = 4.0;
        assert_eq!(top(&s, 1), vec![8]);
    }

    #[test]
    fn top_k_of_k_or_more_keeps_every_position() {
        let scores = [0.3f32, -1.0, 0.0, 7.0, 0.3];
        assert_eq!(top(&scores, 5), vec![0, 1, 2, 3, 4]);
        assert_eq!(top(&scores, 8), vec![0, 1, 2, 3, 4]);
        assert_eq!(top(&scores[..1], 1), vec![0]);
    }

    #[test]
    fn top_k_ties_keep_the_earlier_position() {
        // Equal scores at the cut: the position seen first stays.
        let scores = [1.0f32, 2.0, 1.0, 1.0, 2.0, 0.0];
        assert_eq!(top(&scores, 1), vec![1]);
        assert_eq!(top(&scores, 2), vec![1, 4]);
        assert_eq!(top(&scores, 3), vec![0, 1, 4]);
        assert_eq!(top(&scores, 4), vec![0, 1, 2, 4]);
        assert_eq!(top(&[0.0f32; 6], 3), vec![0, 1, 2]);
        for k in 1..=6 {
            assert_eq!(top(&scores, k), naive(&scores, k), "k {k}");
        }
    }
}
