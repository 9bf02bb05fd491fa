//! Multi-head latent attention (`deepseek2`), in the absorbed form llama.cpp runs: each token
//! caches one row, its RoPE key then its normed latent (`rope + kv_lora_rank` elements, the
//! layout of the layer's one-plane KV cache). Each head's query is the same layout: its RoPE
//! part, then its non-rotated part taken through that head's `attn_k_b` into the latent's
//! space. Attention over the cached rows is the shared tiled attention with one key/value head
//! whose values are the keys' rows; the latent part of each head's output goes through the
//! head's `attn_v_b`, and the heads' values through `attn_output`.

use super::matmul::matmul;
use super::ops::{apply_rope, rms_norm_in_place};
use super::scratch::Scratch;
use crate::error::EngineError;
use crate::model::arch::Role;
use crate::model::ModelConfig;
use crate::weights::{LayerVectors, LayerView, MatrixView};

/// Rows `first..first + count` of `w`.
fn row_slice<'a>(w: &MatrixView<'a>, first: usize, count: usize) -> MatrixView<'a> {
    let row_bytes = w.bytes.len() / w.rows;
    MatrixView {
        rows: count,
        bytes: &w.bytes[first * row_bytes..(first + count) * row_bytes],
        ..*w
    }
}

/// The first half of one MLA layer's attention for the `n` rows of `s.xn` (already normed):
/// each row's cache row (RoPE key, normed latent) into `s.k`, each head's query in the same
/// layout into `s.q`. Attention over the cache then leaves each head's output in `s.att`.
pub(super) fn queries_and_latent(
    cfg: &ModelConfig,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let m = cfg.mla.expect("an MLA layer of a model with MLA sizes");
    let (h, rope, kl) = (cfg.n_head, cfg.rope_dim, m.kv_lora_rank);
    let (nope, vh) = (m.qk_nope, m.v_head);
    let qh = nope + rope;
    let row = rope + kl;
    // Each cached row (and each head's query) is `hw` wide: the RoPE key and the latent, then
    // the indexer's key where the model has one (zero in the queries).
    let hw = cfg.head_dim;
    let style = cfg.arch.rope;
    let mat = |role| w.matrix(role);

    // Queries and the latent with its RoPE key, both from the normed input.
    {
        let Scratch {
            xn,
            q,
            k,
            v,
            act,
            mla,
            rope: table,
            ..
        } = &mut *s;
        let (q_raw, rest) = mla.split_at_mut(n * h * qh);
        let (lora, rest) = rest.split_at_mut(n * m.q_lora_rank.max(h * vh));
        let (head_in, rest) = rest.split_at_mut(n * nope.max(kl));
        let (head_out, k_rows) = rest.split_at_mut(n * kl.max(vh));
        if m.q_lora_rank > 0 {
            let ql = m.q_lora_rank;
            matmul(
                [
                    (mat(Role::AttnQA), &mut lora[..]),
                    (mat(Role::AttnKvAMqa), &mut v[..]),
                ],
                xn,
                n,
                act,
                per_token,
            )?;
            rms_norm_in_place(
                &mut lora[..n * ql],
                vecs.norm(Role::AttnQANorm),
                cfg.rms_eps,
            );
            matmul(
                [(mat(Role::AttnQB), &mut q_raw[..])],
                lora,
                n,
                act,
                per_token,
            )?;
        } else {
            matmul(
                [
                    (mat(Role::AttnQ), &mut q_raw[..]),
                    (mat(Role::AttnKvAMqa), &mut v[..]),
                ],
                xn,
                n,
                act,
                per_token,
            )?;
        }

        // The cached row: RoPE key first, then the normed latent.
        let kv_norm = vecs.norm(Role::AttnKvANorm);
        for t in 0..n {
            let src = &v[t * row..(t + 1) * row];
            let dst = &mut k[t * hw..t * hw + row];
            dst[..rope].copy_from_slice(&src[kl..]);
            dst[rope..].copy_from_slice(&src[..kl]);
            rms_norm_in_place(&mut dst[rope..], kv_norm, cfg.rms_eps);
        }
        apply_rope(k, n, 1, hw, rope, style, table);

        // Each head's query: its RoPE part, then its non-rotated part through attn_k_b.
        for t in 0..n {
            for hd in 0..h {
                let src = &q_raw[(t * h + hd) * qh..][..qh];
                let dst = &mut q[(t * h + hd) * hw..][..hw];
                dst[..rope].copy_from_slice(&src[nope..]);
                dst[row..].fill(0.0);
            }
        }
        apply_rope(q, n, h, hw, rope, style, table);
        if !m.absorbed {
            // attn_kv_b's key rows of each head (query · (W c) = (W^T query) · c), applied
            // transposed from their dequantized rows.
            let kv_b = mat(Role::AttnKvB);
            for hd in 0..h {
                let rows = row_slice(kv_b, hd * (nope + vh), nope);
                let row_bytes = rows.bytes.len() / nope;
                for (r, dst) in k_rows[..nope * kl].chunks_exact_mut(kl).enumerate() {
                    let src = &rows.bytes[r * row_bytes..(r + 1) * row_bytes];
                    ramforge_quant::dequantize_row_laid(rows.ty, rows.layout, src, dst)?;
                }
                for t in 0..n {
                    let (src, dst) = (
                        &q_raw[(t * h + hd) * qh..][..nope],
                        &mut q[(t * h + hd) * hw + rope..][..kl],
                    );
                    dst.fill(0.0);
                    for (&x, w) in src.iter().zip(k_rows.chunks_exact(kl)) {
                        for (d, &wv) in dst.iter_mut().zip(w) {
                            *d += x * wv;
                        }
                    }
                }
            }
        }
        for hd in (0..h).filter(|_| m.absorbed) {
            let k_b = mat(Role::AttnKB);
            for t in 0..n {
                head_in[t * nope..(t + 1) * nope]
                    .copy_from_slice(&q_raw[(t * h + hd) * qh..][..nope]);
            }
            matmul(
                [(&k_b.expert(hd, h), &mut head_out[..])],
                head_in,
                n,
                act,
                per_token,
            )?;
            for t in 0..n {
                q[(t * h + hd) * hw + rope..][..kl]
                    .copy_from_slice(&head_out[t * kl..(t + 1) * kl]);
            }
        }
    }

    Ok(())
}

/// The second half: each head's value from the latent part of its attention output in
/// `s.att` (through its `attn_v_b`), then the output projection into `s.xn`.
pub(super) fn output(
    cfg: &ModelConfig,
    w: &LayerView<'_>,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let m = cfg.mla.expect("an MLA layer of a model with MLA sizes");
    let (h, rope, kl) = (cfg.n_head, cfg.rope_dim, m.kv_lora_rank);
    let (nope, vh) = (m.qk_nope, m.v_head);
    let (qh, hw) = (nope + rope, cfg.head_dim);
    let mat = |role| w.matrix(role);
    let Scratch {
        xn, att, act, mla, ..
    } = &mut *s;
    let (_, rest) = mla.split_at_mut(n * h * qh);
    let (values, rest) = rest.split_at_mut(n * m.q_lora_rank.max(h * vh));
    let (head_in, rest) = rest.split_at_mut(n * nope.max(kl));
    let head_out = &mut rest[..n * kl.max(vh)];
    for hd in 0..h {
        let v_b = if m.absorbed {
            mat(Role::AttnVB).expert(hd, h)
        } else {
            row_slice(mat(Role::AttnKvB), hd * (nope + vh) + nope, vh)
        };
        for t in 0..n {
            head_in[t * kl..(t + 1) * kl].copy_from_slice(&att[(t * h + hd) * hw + rope..][..kl]);
        }
        matmul([(&v_b, &mut head_out[..])], head_in, n, act, per_token)?;
        for t in 0..n {
            values[(t * h + hd) * vh..][..vh].copy_from_slice(&head_out[t * vh..(t + 1) * vh]);
        }
    }
    matmul(
        [(mat(Role::AttnOutput), &mut xn[..])],
        values,
        n,
        act,
        per_token,
    )?;
    Ok(())
}
