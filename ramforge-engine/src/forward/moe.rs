//! The mixture-of-experts FFN, as llama.cpp runs it for Mixtral-style `llama` and `qwen3moe`:
//! softmax over the router's logits, the `expert_used_count` most probable experts, their
//! probabilities renormalized to sum to one, and the weighted sum of their SwiGLU outputs.
//! Tokens routed to the same expert are multiplied together.

use super::matmul::matmul;
use super::ops::swiglu;
use super::scratch::Scratch;
use crate::error::EngineError;
use crate::model::arch::Role;
use crate::model::ModelConfig;
use crate::weights::LayerView;

/// The top `k` experts of one token's router `logits` and their weights: softmax, the `k`
/// largest probabilities (the lower index first among equals), renormalized.
pub(crate) fn route(logits: &[f32], k: usize, chosen: &mut Vec<(usize, f32)>) {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let probs: Vec<f32> = logits.iter().map(|&x| (x - max).exp()).collect();
    let total: f32 = probs.iter().sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    chosen.clear();
    chosen.extend(order[..k].iter().map(|&e| (e, probs[e] / total)));
    let sum: f32 = chosen.iter().map(|&(_, w)| w).sum();
    for (_, w) in chosen.iter_mut() {
        *w /= sum;
    }
}

/// The FFN output of the `n` normalized rows in `s.xn`, into `s.moe_out`.
pub(crate) fn moe_ffn(
    cfg: &ModelConfig,
    w: &LayerView<'_>,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let (e, ne, ff) = (cfg.n_embd, cfg.n_expert, cfg.n_ff_exp);
    matmul(
        [(w.matrix(Role::FfnGateInp), &mut s.router)],
        &s.xn,
        n,
        &mut s.act,
        per_token,
    )?;
    // routes[t]: token t's experts and weights.
    let mut routes = Vec::with_capacity(n);
    for t in 0..n {
        let mut chosen = Vec::with_capacity(cfg.n_expert_used);
        route(
            &s.router[t * ne..(t + 1) * ne],
            cfg.n_expert_used,
            &mut chosen,
        );
        routes.push(chosen);
    }
    s.moe_out[..n * e].fill(0.0);
    let (gate, up, down) = (
        w.matrix(Role::FfnGateExps),
        w.matrix(Role::FfnUpExps),
        w.matrix(Role::FfnDownExps),
    );
    let mut tokens = Vec::with_capacity(n);
    for x in 0..ne {
        tokens.clear();
        tokens.extend((0..n).filter_map(|t| {
            routes[t]
                .iter()
                .find(|&&(ex, _)| ex == x)
                .map(|&(_, weight)| (t, weight))
        }));
        if tokens.is_empty() {
            continue;
        }
        let m = tokens.len();
        for (j, &(t, _)) in tokens.iter().enumerate() {
            s.moe_in[j * e..(j + 1) * e].copy_from_slice(&s.xn[t * e..(t + 1) * e]);
        }
        matmul(
            [
                (&gate.expert(x, ne), &mut s.gate),
                (&up.expert(x, ne), &mut s.up),
            ],
            &s.moe_in,
            m,
            &mut s.act,
            per_token,
        )?;
        swiglu(&mut s.gate[..m * ff], &s.up[..m * ff]);
        matmul(
            [(&down.expert(x, ne), &mut s.moe_in)],
            &s.gate,
            m,
            &mut s.act,
            per_token,
        )?;
        for (j, &(t, weight)) in tokens.iter().enumerate() {
            let src = &s.moe_in[j * e..(j + 1) * e];
            for (o, &v) in s.moe_out[t * e..(t + 1) * e].iter_mut().zip(src) {
                *o += weight * v;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn routing_renormalizes_the_top_k_softmax_probabilities() {
        let logits = [0.0f32, 2.0, 1.0, 2.0, -1.0];
        let mut chosen = Vec::new();
        route(&logits, 2, &mut chosen);
        // Experts 1 and 3 tie at the top: equal weights.
        assert_eq!(chosen.iter().map(|c| c.0).collect::<Vec<_>>(), [1, 3]);
        assert!(
            chosen.iter().all(|c| (c.1 - 0.5).abs() < 1e-6),
            "{chosen:?}"
        );
        route(&logits, 3, &mut chosen);
        // Softmax of the selected logits 2, 2, 1.
        let z = 2.0 * 2f32.exp() + 1f32.exp();
        assert_eq!(chosen[2].0, 2);
        assert!((chosen[0].1 - 2f32.exp() / z).abs() < 1e-6);
        assert!((chosen[2].1 - 1f32.exp() / z).abs() < 1e-6);
    }
}
