//! The mixture-of-experts FFN, as llama.cpp's `build_moe_ffn` runs it: the router's logits
//! (plus its bias) become probabilities by the architecture's gating (softmax, sigmoid, the
//! raw logits, or sqrt(softplus)); a selection bias and group limits may steer which experts
//! are chosen without entering their weights; the chosen weights may be softmaxed (gpt-oss),
//! renormalized and scaled; each chosen expert runs once for all the rows routed to it, with
//! its biases and activation; the weighted outputs are summed.

use super::gate::{gated, Gate};
use super::matmul::matmul;
use super::scratch::Scratch;
use crate::error::EngineError;
use crate::model::arch::{ExpertActivation, Gating, Role};
use crate::model::{ModelConfig, RouterConfig};
use crate::weights::{ExpertStore, LayerVectors, LayerView, MatrixView};

/// The smallest sum llama.cpp divides renormalized weights by (the smallest normal f16).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// The top `k` experts of one token's router `logits` (bias already added) and their weights,
/// as `r` routes: the plain softmax path keeps the arithmetic of the first MoE families
/// (softmax, the `k` largest, the lower index first among equals, renormalized).
pub(crate) fn route(
    r: &RouterConfig,
    logits: &[f32],
    selection_bias: Option<&[f32]>,
    k: usize,
    chosen: &mut Vec<(usize, f32)>,
) {
    let ne = logits.len();
    let probs: Vec<f32> = match r.gating {
        Gating::Softmax => {
            let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let exps: Vec<f32> = logits.iter().map(|&x| (x - max).exp()).collect();
            let total: f32 = exps.iter().sum();
            exps.iter().map(|&p| p / total).collect()
        }
        Gating::Sigmoid => logits.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect(),
        Gating::SoftmaxWeight => logits.to_vec(),
        Gating::SqrtSoftplus => logits.iter().map(|&x| softplus(x).sqrt()).collect(),
    };
    let mut selection: Vec<f32> = match selection_bias {
        Some(b) => probs.iter().zip(b).map(|(p, b)| p + b).collect(),
        None => probs.clone(),
    };
    if r.n_group > 1 {
        mask_groups(r, &mut selection);
    }
    let mut order: Vec<usize> = (0..ne).collect();
    order.sort_by(|&a, &b| selection[b].total_cmp(&selection[a]).then(a.cmp(&b)));
    chosen.clear();
    chosen.extend(order[..k].iter().map(|&e| (e, probs[e])));
    if r.gating == Gating::SoftmaxWeight {
        let max = chosen.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1));
        for c in chosen.iter_mut() {
            c.1 = (c.1 - max).exp();
        }
        let total: f32 = chosen.iter().map(|c| c.1).sum();
        for c in chosen.iter_mut() {
            c.1 /= total;
        }
    }
    weigh(r, chosen);
}

/// The chosen experts' weights renormalized to sum to one (the sum held above llama.cpp's
/// smallest) and scaled, as `r` says.
fn weigh(r: &RouterConfig, chosen: &mut [(usize, f32)]) {
    if r.normalize {
        let sum: f32 = chosen.iter().map(|&(_, w)| w).sum();
        let sum = sum.max(MIN_WEIGHT_SUM);
        for (_, w) in chosen.iter_mut() {
            *w /= sum;
        }
    }
    if r.scale != 1.0 {
        for (_, w) in chosen.iter_mut() {
            *w *= r.scale;
        }
    }
}

/// `ln(1 + e^x)`, as ggml computes it (`x` itself above 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// Group-limited routing (DeepSeek V3): each group of `n_expert / n_group` experts scores the
/// sum of its two best selection values; experts outside the `n_group_used` best groups
/// cannot be chosen.
fn mask_groups(r: &RouterConfig, selection: &mut [f32]) {
    let per = selection.len() / r.n_group;
    let score = |g: &[f32]| {
        let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for &v in g {
            if v > a {
                b = a;
                a = v;
            } else if v > b {
                b = v;
            }
        }
        a + b
    };
    let scores: Vec<f32> = selection.chunks(per).map(score).collect();
    let mut groups: Vec<usize> = (0..r.n_group).collect();
    groups.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    for &g in &groups[r.n_group_used..] {
        selection[g * per..(g + 1) * per].fill(f32::NEG_INFINITY);
    }
}

/// The experts of a hash-routed layer (DeepSeek V4's first layers): row `t`'s are `table`'s
/// row for `tokens[t]`, weighted by their gated probabilities.
fn hash_route(r: &RouterConfig, logits: &[f32], experts: &[f32], chosen: &mut Vec<(usize, f32)>) {
    chosen.clear();
    chosen.extend(experts.iter().map(|&x| {
        let x = x as usize;
        (x, softplus(logits[x]).sqrt())
    }));
    weigh(r, chosen);
}

/// DeepSeek V4's clamped SwiGLU into `gate`: `silu(min(gate, l)) * clamp(up, -l, l)`, as
/// ggml's `swiglu` after llama.cpp clamps both inputs (a limit of 0 clamps nothing).
pub(super) fn swiglu_clamped(gate: &mut [f32], up: &mut [f32], limit: f32) {
    if limit > 0.0 {
        for (g, u) in gate.iter_mut().zip(up.iter_mut()) {
            *g = g.min(limit);
            *u = u.clamp(-limit, limit);
        }
    }
    gated(Gate::Silu, gate, up);
}

/// The FFN output of the `n` normalized rows in `s.xn`, into `s.moe_out`: each selected expert
/// once for all the rows routed to it, from the layer's view, or from `store` when experts are
/// streamed one by one (which then reads only the selected ones). `per_token`: each row's
/// products as if it ran alone (batched decoding of several sequences). A hash-routed layer
/// takes its rows' experts by their token ids, `s.tokens`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn moe_ffn(
    cfg: &ModelConfig,
    layer: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    store: Option<&mut ExpertStore>,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let mut routes = vec![(0, 0.0); n * cfg.n_expert_used];
    route_rows(cfg, w, vecs, s, n, per_token, &mut routes)?;
    let Scratch {
        xn,
        moe_out,
        moe_in,
        gate,
        up,
        act,
        ..
    } = s;
    let rows = ExpertRows {
        input: &xn[..n * cfg.n_embd],
        routes: &routes,
        out: &mut moe_out[..n * cfg.n_embd],
        batch: n,
    };
    let work = ExpertWork {
        moe_in,
        gate,
        up,
        act,
    };
    routed_experts(cfg, layer, w, vecs, store, rows, work, per_token)
}

/// Each of the `n` normalized rows of `s.xn` routed: its `n_expert_used` experts and their
/// weights, row `t`'s at `routes[t * n_expert_used..]`.
pub(crate) fn route_rows(
    cfg: &ModelConfig,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
    routes: &mut [(usize, f32)],
) -> Result<(), EngineError> {
    let (ne, k) = (cfg.n_expert, cfg.n_expert_used);
    matmul(
        [(w.matrix(Role::FfnGateInp), &mut s.router)],
        &s.xn,
        n,
        &mut s.act,
        per_token,
    )?;
    if let Some(bias) = vecs.get(Role::FfnGateInpBias) {
        for row in s.router[..n * ne].chunks_exact_mut(ne) {
            for (x, b) in row.iter_mut().zip(bias) {
                *x += b;
            }
        }
    }
    let selection_bias = vecs.get(Role::FfnExpProbsBias);
    let hash = vecs.get(Role::FfnGateTid2eid);
    let mut chosen = Vec::with_capacity(k);
    for (t, out) in routes[..n * k].chunks_exact_mut(k).enumerate() {
        let logits = &s.router[t * ne..(t + 1) * ne];
        match hash {
            Some(table) => {
                let id = s.tokens[t] as usize;
                hash_route(
                    &cfg.router,
                    logits,
                    &table[id * k..(id + 1) * k],
                    &mut chosen,
                )
            }
            None => route(&cfg.router, logits, selection_bias, k, &mut chosen),
        }
        out.copy_from_slice(&chosen);
    }
    Ok(())
}

/// Normalized rows and their routes, for [`routed_experts`]: `input` holds the rows, `routes`
/// each row's `n_expert_used` experts, `out` receives each row's weighted sum of its experts'
/// outputs. An expert multiplies its rows `batch` rows of the input at a time (the rows of
/// one batch, whichever batches the rows span), so each product is the one the batch alone
/// would run.
pub(crate) struct ExpertRows<'a> {
    pub input: &'a [f32],
    pub routes: &'a [(usize, f32)],
    pub out: &'a mut [f32],
    pub batch: usize,
}

/// The scratch an expert's FFN runs in ([`Scratch`]'s buffers of those names).
pub(crate) struct ExpertWork<'a> {
    pub moe_in: &'a mut [f32],
    pub gate: &'a mut [f32],
    pub up: &'a mut [f32],
    pub act: &'a mut [u8],
}

/// Runs every expert `rows.routes` selects once, from the layer's view or from `store` (one
/// read of each missed expert for all the rows), over the rows routed to it, and leaves each
/// row's weighted sum in `rows.out`, experts added in expert order (as an all-resident batch
/// adds them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn routed_experts(
    cfg: &ModelConfig,
    layer: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    store: Option<&mut ExpertStore>,
    rows: ExpertRows<'_>,
    mut work: ExpertWork<'_>,
    per_token: bool,
) -> Result<(), EngineError> {
    let (ne, k) = (cfg.n_expert, cfg.n_expert_used);
    let ExpertRows {
        input,
        routes,
        out,
        batch,
    } = rows;
    let wanted = selected(routes, ne, k);
    out.fill(0.0);
    let biases = Role::EXPERT_BIASES.map(|r| vecs.get(r));
    let limit = cfg
        .dsv4
        .as_ref()
        .map_or(0.0, |d| d.clamp_exp.get(layer).copied().unwrap_or(0.0));
    let e = cfg.n_embd;
    let mut run = |x: usize, [gate, up, down]: [MatrixView<'_>; 3]| {
        // One product per batch the expert's rows fall in.
        for (b, routes) in routes.chunks(batch * k).enumerate() {
            let rows = b * batch..b * batch + routes.len() / k;
            expert_ffn(
                cfg,
                x,
                routes,
                [&gate, &up, &down],
                biases,
                limit,
                &input[rows.start * e..rows.end * e],
                &mut out[rows.start * e..rows.end * e],
                &mut work,
                per_token,
            )?;
        }
        Ok(())
    };
    match store {
        Some(store) => {
            // The cache counts each batch as a pass, however many run together.
            if routes.len() <= batch * k {
                store.count_pass(layer, &wanted);
            } else {
                for routes in routes.chunks(batch * k) {
                    store.count_pass(layer, &selected(routes, ne, k));
                }
            }
            store.for_each(layer, &wanted, run)
        }
        None => {
            let stacks = Role::EXPERT_STACKS.map(|r| w.matrix(r));
            for &(x, _) in &wanted {
                run(x, stacks.map(|m| m.expert(x, ne)))?;
            }
            Ok(())
        }
    }
}

/// The experts `routes` (each row's `k`) select, in expert order, with the number of rows
/// routed to each.
fn selected(routes: &[(usize, f32)], ne: usize, k: usize) -> Vec<(usize, usize)> {
    let mut counts = vec![0usize; ne];
    for row in routes.chunks_exact(k) {
        for (i, &(x, _)) in row.iter().enumerate() {
            if !row[..i].iter().any(|r| r.0 == x) {
                counts[x] += 1;
            }
        }
    }
    (0..ne)
        .filter(|&x| counts[x] > 0)
        .map(|x| (x, counts[x]))
        .collect()
}

/// Adds `bias`'s row for expert `x` (rows of `width`) to each of the `m` rows of `out`.
fn add_expert_bias(out: &mut [f32], bias: Option<&[f32]>, x: usize, width: usize, m: usize) {
    if let Some(b) = bias {
        let row = &b[x * width..(x + 1) * width];
        for o in out[..m * width].chunks_exact_mut(width) {
            for (v, b) in o.iter_mut().zip(row) {
                *v += b;
            }
        }
    }
}

/// gpt-oss's clamped SwiGLU into `gate`: `g = min(gate, 7)`, `u = clamp(up, -7, 7)`,
/// `g * sigmoid(1.702 g) * (u + 1)`.
fn swiglu_oai(gate: &mut [f32], up: &[f32]) {
    const ALPHA: f32 = 1.702;
    const LIMIT: f32 = 7.0;
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = g.min(LIMIT);
        let y = u.clamp(-LIMIT, LIMIT);
        *g = x / (1.0 + (-ALPHA * x).exp()) * (y + 1.0);
    }
}

/// Adds expert `x`'s weighted output to `out` for every row of `input` that `routes` (each
/// row's `n_expert_used` experts) sends it, as one product over those rows.
#[allow(clippy::too_many_arguments)]
fn expert_ffn(
    cfg: &ModelConfig,
    x: usize,
    routes: &[(usize, f32)],
    [gate, up, down]: [&MatrixView<'_>; 3],
    [gate_b, up_b, down_b]: [Option<&[f32]>; 3],
    limit: f32,
    input: &[f32],
    out: &mut [f32],
    work: &mut ExpertWork<'_>,
    per_token: bool,
) -> Result<(), EngineError> {
    let (e, ff, k) = (cfg.n_embd, cfg.n_ff_exp, cfg.n_expert_used);
    let tokens: Vec<(usize, f32)> = routes
        .chunks_exact(k)
        .enumerate()
        .filter_map(|(t, r)| r.iter().find(|&&(ex, _)| ex == x).map(|&(_, w)| (t, w)))
        .collect();
    let m = tokens.len();
    if m == 0 {
        return Ok(());
    }
    let ExpertWork {
        moe_in,
        gate: g,
        up: u,
        act,
    } = work;
    for (j, &(t, _)) in tokens.iter().enumerate() {
        moe_in[j * e..(j + 1) * e].copy_from_slice(&input[t * e..(t + 1) * e]);
    }
    matmul(
        [(gate, &mut **g), (up, &mut **u)],
        moe_in,
        m,
        act,
        per_token,
    )?;
    add_expert_bias(g, gate_b, x, ff, m);
    add_expert_bias(u, up_b, x, ff, m);
    match cfg.router.activation {
        ExpertActivation::SwiGlu => gated(Gate::Silu, &mut g[..m * ff], &u[..m * ff]),
        ExpertActivation::SwiGluOai => swiglu_oai(&mut g[..m * ff], &u[..m * ff]),
        ExpertActivation::SwiGluClamped => {
            swiglu_clamped(&mut g[..m * ff], &mut u[..m * ff], limit)
        }
    }
    matmul([(down, &mut **moe_in)], g, m, act, per_token)?;
    add_expert_bias(moe_in, down_b, x, e, m);
    for (j, &(t, weight)) in tokens.iter().enumerate() {
        let src = &moe_in[j * e..(j + 1) * e];
        for (o, &v) in out[t * e..(t + 1) * e].iter_mut().zip(src) {
            *o += weight * v;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(gating: Gating, normalize: bool) -> RouterConfig {
        RouterConfig {
            gating,
            normalize,
            scale: 1.0,
            n_group: 1,
            n_group_used: 1,
            activation: ExpertActivation::SwiGlu,
        }
    }

    #[test]
    fn routing_renormalizes_the_top_k_softmax_probabilities() {
        let logits = [0.0f32, 2.0, 1.0, 2.0, -1.0];
        let r = router(Gating::Softmax, true);
        let mut chosen = Vec::new();
        route(&r, &logits, None, 2, &mut chosen);
        // Experts 1 and 3 tie at the top: equal weights.
        assert_eq!(chosen.iter().map(|c| c.0).collect::<Vec<_>>(), [1, 3]);
        assert!(
            chosen.iter().all(|c| (c.1 - 0.5).abs() < 1e-6),
            "{chosen:?}"
        );
        route(&r, &logits, None, 3, &mut chosen);
        // Softmax of the selected logits 2, 2, 1.
        let z = 2.0 * 2f32.exp() + 1f32.exp();
        assert_eq!(chosen[2].0, 2);
        assert!((chosen[0].1 - 2f32.exp() / z).abs() < 1e-6);
        assert!((chosen[2].1 - 1f32.exp() / z).abs() < 1e-6);
    }

    #[test]
    fn unnormalized_softmax_keeps_the_probabilities_of_all_experts() {
        let logits = [0.0f32, 1.0, 2.0];
        let mut chosen = Vec::new();
        route(
            &router(Gating::Softmax, false),
            &logits,
            None,
            1,
            &mut chosen,
        );
        let z = 1.0 + 1f32.exp() + 2f32.exp();
        assert_eq!(chosen[0].0, 2);
        assert!((chosen[0].1 - 2f32.exp() / z).abs() < 1e-6);
    }

    #[test]
    fn the_selection_bias_chooses_but_does_not_weight() {
        // Sigmoid gating with a bias that makes expert 0 win although its logit is lowest.
        let logits = [-1.0f32, 0.5, 1.0];
        let bias = [5.0f32, 0.0, 0.0];
        let mut r = router(Gating::Sigmoid, true);
        r.scale = 2.5;
        let mut chosen = Vec::new();
        route(&r, &logits, Some(&bias), 2, &mut chosen);
        assert_eq!(chosen.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 2]);
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        let sum = sig(-1.0) + sig(1.0);
        assert!((chosen[0].1 - 2.5 * sig(-1.0) / sum).abs() < 1e-6);
        assert!((chosen[1].1 - 2.5 * sig(1.0) / sum).abs() < 1e-6);
    }

    #[test]
    fn softmax_weight_gating_softmaxes_the_chosen_raw_logits() {
        let logits = [3.0f32, -2.0, 1.0, 0.0];
        let mut chosen = Vec::new();
        route(
            &router(Gating::SoftmaxWeight, false),
            &logits,
            None,
            2,
            &mut chosen,
        );
        assert_eq!(chosen.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 2]);
        let z = 1.0 + (-2f32).exp();
        assert!((chosen[0].1 - 1.0 / z).abs() < 1e-6);
        assert!((chosen[1].1 - (-2f32).exp() / z).abs() < 1e-6);
    }

    #[test]
    fn group_limited_routing_picks_from_the_best_groups_only() {
        // Four groups of two; group scores (sum of both): 1.0, 1.9, 0.2, 1.8.
        let logits = [0.9f32, 0.1, 1.0, 0.9, 0.1, 0.1, 0.95, 0.85];
        let mut r = router(Gating::SoftmaxWeight, false);
        r.n_group = 4;
        r.n_group_used = 2;
        let mut chosen = Vec::new();
        route(&r, &logits, None, 3, &mut chosen);
        // Expert 0 (0.9) is in a masked group; the best three of groups 1 and 3 win.
        assert_eq!(chosen.iter().map(|c| c.0).collect::<Vec<_>>(), [2, 6, 3]);
    }

    #[test]
    fn sqrt_softplus_and_the_clamped_swiglu_match_their_formulas() {
        assert!((softplus(0.0) - 2f32.ln()).abs() < 1e-7);
        assert_eq!(softplus(30.0), 30.0);
        let mut g = [10.0f32, -1.0, 0.5];
        swiglu_oai(&mut g, &[9.0, -9.0, 0.25]);
        let f = |x: f32, y: f32| x / (1.0 + (-1.702 * x).exp()) * (y + 1.0);
        assert!((g[0] - f(7.0, 7.0)).abs() < 1e-5);
        assert!((g[1] - f(-1.0, -7.0)).abs() < 1e-6);
        assert!((g[2] - f(0.5, 0.25)).abs() < 1e-6);
    }
}
