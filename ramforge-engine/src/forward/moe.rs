//! The mixture-of-experts FFN, as llama.cpp runs it for Mixtral-style `llama` and `qwen3moe`:
//! softmax over the router's logits, the `expert_used_count` most probable experts, their
//! probabilities renormalized to sum to one, and the weighted sum of their SwiGLU outputs.
//! Tokens routed to the same expert are multiplied together.

use super::gate::{gated, Gate};
use super::matmul::matmul;
use super::scratch::Scratch;
use crate::error::EngineError;
use crate::model::arch::Role;
use crate::model::ModelConfig;
use crate::weights::{ExpertStore, LayerView, MatrixView};

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

/// The FFN output of the `n` normalized rows in `s.xn`, into `s.moe_out`: each selected expert
/// once for all the rows routed to it, from the layer's view, or from `store` when experts are
/// streamed one by one (which then reads only the selected ones). `per_token`: each row's
/// products as if it ran alone (batched decoding of several sequences).
pub(crate) fn moe_ffn(
    cfg: &ModelConfig,
    layer: usize,
    w: &LayerView<'_>,
    store: Option<&mut ExpertStore>,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let (e, ne) = (cfg.n_embd, cfg.n_expert);
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
    // The selected experts, in expert order, with the number of rows routed to each.
    let mut wanted: Vec<(usize, usize)> = Vec::new();
    for x in 0..ne {
        let rows = routes
            .iter()
            .filter(|r| r.iter().any(|&(ex, _)| ex == x))
            .count();
        if rows > 0 {
            wanted.push((x, rows));
        }
    }
    s.moe_out[..n * e].fill(0.0);
    let mut run = |x: usize, [gate, up, down]: [MatrixView<'_>; 3]| {
        expert_ffn(cfg, x, &routes, [&gate, &up, &down], s, per_token)
    };
    match store {
        Some(store) => store.for_each(layer, &wanted, run),
        None => {
            let stacks = Role::EXPERT_STACKS.map(|r| w.matrix(r));
            for &(x, _) in &wanted {
                run(x, stacks.map(|m| m.expert(x, ne)))?;
            }
            Ok(())
        }
    }
}

/// Adds expert `x`'s weighted SwiGLU output to `s.moe_out` for every row `routes` sends it.
fn expert_ffn(
    cfg: &ModelConfig,
    x: usize,
    routes: &[Vec<(usize, f32)>],
    [gate, up, down]: [&MatrixView<'_>; 3],
    s: &mut Scratch,
    per_token: bool,
) -> Result<(), EngineError> {
    let (e, ff) = (cfg.n_embd, cfg.n_ff_exp);
    let tokens: Vec<(usize, f32)> = routes
        .iter()
        .enumerate()
        .filter_map(|(t, r)| r.iter().find(|&&(ex, _)| ex == x).map(|&(_, w)| (t, w)))
        .collect();
    let m = tokens.len();
    for (j, &(t, _)) in tokens.iter().enumerate() {
        s.moe_in[j * e..(j + 1) * e].copy_from_slice(&s.xn[t * e..(t + 1) * e]);
    }
    matmul(
        [(gate, &mut s.gate), (up, &mut s.up)],
        &s.moe_in,
        m,
        &mut s.act,
        per_token,
    )?;
    gated(Gate::Silu, &mut s.gate[..m * ff], &s.up[..m * ff]);
    matmul([(down, &mut s.moe_in)], &s.gate, m, &mut s.act, per_token)?;
    for (j, &(t, weight)) in tokens.iter().enumerate() {
        let src = &s.moe_in[j * e..(j + 1) * e];
        for (o, &v) in s.moe_out[t * e..(t + 1) * e].iter_mut().zip(src) {
            *o += weight * v;
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
