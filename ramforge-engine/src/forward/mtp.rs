//! The input of an MTP (nextn) layer, as llama.cpp's MTP graphs build it: row `p` joins the
//! RMS-normed embedding of token `x_p` (`enorm`) and the RMS-normed hidden state `h_{p-1}`
//! (`hnorm`) the model had one position earlier, and `eh_proj` projects the pair back to the
//! residual stream; the layer's block then runs on it and predicts `x_{p+1}`.
//!
//! The scratch's `mtp` buffer holds, for `batch` rows of `n_embd`: the last pass's hidden
//! states `H` (normed by the output norm, as the output projection and llama.cpp's nextn
//! output take them), the pairs (`2 n_embd` each), the carried state (the hidden state before
//! a pass's first row) and the chained state (a draft step's own output, the next step's
//! hidden state).

use super::matmul::matmul;
use super::ops::rms_norm;
use super::Scratch;
use crate::error::EngineError;
use crate::model::arch::Role;
use crate::model::ModelConfig;
use crate::weights::{LayerVectors, LayerView};

/// Where the hidden state of each MTP row comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MtpHidden {
    /// Row `r` takes `H` row `r - 1`; row 0 the carried state.
    Shifted,
    /// One row, taking `H` row `i`.
    Row(usize),
    /// One row, taking the carried state.
    Carry,
    /// One row, taking the chained state.
    Chain,
}

/// Which hidden states the scratch holds for the MTP layer, for one context (it travels with
/// a server slot's sequence; another context's pass over the scratch outdates it).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MtpState {
    /// The first position and count of the rows of `H` (the last pass's last batch).
    rows: Option<(usize, usize)>,
    /// The position whose hidden state is the carried one.
    carry: Option<usize>,
    /// The engine's count of MTP passes when this context's ran (the engine's `mtp_passes`).
    pass: u64,
}

impl MtpState {
    /// `H` holding `rows` (first position, count), `carry` the hidden state of that position,
    /// written by the engine's `passes`-th MTP pass.
    pub(crate) fn new(rows: (usize, usize), carry: Option<usize>, passes: u64) -> MtpState {
        MtpState {
            rows: Some(rows),
            carry,
            pass: passes,
        }
    }

    /// Where the hidden state of position `p` is, if the scratch still holds it: the last
    /// pass over the scratch (`passes`) was this context's.
    pub(crate) fn find(&self, p: usize, passes: u64) -> Option<MtpHidden> {
        if self.pass != passes {
            return None;
        }
        match self.rows {
            Some((first, n)) if (first..first + n).contains(&p) => Some(MtpHidden::Row(p - first)),
            _ => (self.carry == Some(p)).then_some(MtpHidden::Carry),
        }
    }
}

/// The parts of the scratch's `mtp` buffer (`batch` rows of `e`): `(H, pairs, carry, chain)`.
pub(crate) fn parts(
    mtp: &mut [f32],
    batch: usize,
    e: usize,
) -> (&mut [f32], &mut [f32], &mut [f32], &mut [f32]) {
    let (hidden, rest) = mtp.split_at_mut(batch * e);
    let (pairs, rest) = rest.split_at_mut(2 * batch * e);
    let (carry, chain) = rest.split_at_mut(e);
    (hidden, pairs, carry, &mut chain[..e])
}

/// The chained state of the scratch's `mtp` buffer (the last of [`parts`]).
pub(crate) fn chained(mtp: &[f32], batch: usize, e: usize) -> &[f32] {
    let at = 3 * batch * e + e;
    &mtp[at..at + e]
}

/// Rows `0..n` of `s.x` (a pass's output) normed by `output_norm` into `H`.
pub(crate) fn keep_hidden(cfg: &ModelConfig, output_norm: &[f32], s: &mut Scratch, n: usize) {
    let (e, eps) = (cfg.n_embd, cfg.rms_eps);
    let (hidden, x) = (&mut s.mtp[..s.batch * e], &s.x);
    for r in 0..n {
        rms_norm(
            &x[r * e..(r + 1) * e],
            output_norm,
            eps,
            &mut hidden[r * e..(r + 1) * e],
        );
    }
}

/// The MTP layer's input for the `n` rows whose token embeddings are in `s.x`: each row's
/// normed embedding and normed hidden state (from `source`), projected by `eh_proj` into
/// `s.x`.
pub(crate) fn input(
    cfg: &ModelConfig,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    n: usize,
    source: MtpHidden,
    per_token: bool,
) -> Result<(), EngineError> {
    let (e, eps) = (cfg.n_embd, cfg.rms_eps);
    debug_assert!(n == 1 || source == MtpHidden::Shifted);
    let (enorm, hnorm) = (vecs.norm(Role::NextnEnorm), vecs.norm(Role::NextnHnorm));
    let (hidden, pairs, carry, chain) = parts(&mut s.mtp, s.batch, e);
    for r in 0..n {
        let pair = &mut pairs[r * 2 * e..(r + 1) * 2 * e];
        let (embd, h) = pair.split_at_mut(e);
        rms_norm(&s.x[r * e..(r + 1) * e], enorm, eps, embd);
        let from: &[f32] = match (source, r) {
            (MtpHidden::Shifted, 0) | (MtpHidden::Carry, _) => carry,
            (MtpHidden::Shifted, r) => &hidden[(r - 1) * e..r * e],
            (MtpHidden::Row(i), _) => &hidden[i * e..(i + 1) * e],
            (MtpHidden::Chain, _) => chain,
        };
        rms_norm(from, hnorm, eps, h);
    }
    matmul(
        [(w.matrix(Role::NextnEhProj), &mut s.x)],
        pairs,
        n,
        &mut s.act,
        per_token,
    )
}
