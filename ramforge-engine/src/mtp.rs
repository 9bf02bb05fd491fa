//! `--mtp` drafts: the model file's own MTP (nextn) layer predicts the token after next.
//!
//! As llama.cpp's MTP drafter does, the MTP layer keeps its own key/value rows (layer
//! `n_layer` of the KV cache, cut back with the others by a rollback): every pass over the
//! model also runs the MTP layer on its rows, row `p` taking token `x_p` and the model's
//! hidden state `h_{p-1}` (`forward/mtp.rs`). A draft starts from the token just sampled and
//! the hidden state of the last accepted position, and chains: each further step takes the
//! token the step before drafted and that step's own hidden state (normed by
//! `shared_head_norm`, the MTP output llama.cpp chains). The drafts only propose tokens; the
//! verify pass decides, so the output is plain decoding's whatever the MTP layer computes.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::forward::mtp::{self, MtpHidden, MtpState};
use crate::forward::Scratch;
use crate::forward::{block, rms_norm, rope_tables, LayerWeights, Rows};
use crate::kv::KvCache;
use crate::model::arch::Role;
use crate::model::Model;
use crate::sampling::argmax;
use crate::weights::Weights;

/// Runs the MTP layer on `tokens` at positions `pos..`, their hidden states from `source`:
/// embeddings, the layer's input (`forward/mtp.rs`), its block (its KV rows written). The
/// output rows are left in `s.x`.
#[allow(clippy::too_many_arguments)]
fn mtp_layer(
    model: &Model,
    weights: &mut Weights,
    kv: &mut KvCache,
    s: &mut Scratch,
    tokens: &[u32],
    pos: usize,
    source: MtpHidden,
    per_token: bool,
) -> Result<(), EngineError> {
    let (cfg, file, tensors) = (&model.config, &model.file, &model.tensors);
    let (e, n, l) = (cfg.n_embd, tokens.len(), cfg.n_layer);
    for (i, &t) in tokens.iter().enumerate() {
        weights
            .matrices
            .embed(file, tensors, t, &mut s.x[i * e..(i + 1) * e])?;
    }
    rope_tables(cfg, weights.vectors.rope_freqs.as_deref(), pos..pos + n, s);
    let view = weights.matrices.layer(file, tensors, l)?;
    let vectors = &weights.vectors.layers[l];
    mtp::input(cfg, &view, vectors, s, n, source, per_token)?;
    let layer = LayerWeights {
        matrices: &view,
        vectors,
        experts: weights.experts.as_mut(),
    };
    block(cfg, l, layer, s, Rows::Run(kv, pos..pos + n, per_token))
}

impl Engine {
    /// After a batch's blocks (its output rows in the scratch's `x`): keeps their hidden
    /// states and runs the MTP layer on the batch, so its KV rows follow the context.
    pub(crate) fn mtp_ingest(
        &mut self,
        tokens: &[u32],
        pos: usize,
        per_token: bool,
    ) -> Result<(), EngineError> {
        let cfg = &self.model.config;
        let (e, n) = (cfg.n_embd, tokens.len());
        let s = &mut self.scratch;
        // The hidden state before the batch's first row becomes the carried one (zeros where
        // the scratch no longer holds it, as llama.cpp's drafter starts a sequence).
        let before = pos
            .checked_sub(1)
            .and_then(|p| self.mtp.find(p, self.mtp_passes));
        {
            let (hidden, _, carry, _) = mtp::parts(&mut s.mtp, s.batch, e);
            match before {
                Some(MtpHidden::Row(i)) => carry.copy_from_slice(&hidden[i * e..(i + 1) * e]),
                Some(_) => {}
                None => carry.fill(0.0),
            }
        }
        mtp::keep_hidden(cfg, &self.weights.vectors.output_norm, s, n);
        self.mtp_passes += 1;
        self.mtp = MtpState::new((pos, n), before.and(pos.checked_sub(1)), self.mtp_passes);
        mtp_layer(
            &self.model,
            &mut self.weights,
            &mut self.kv,
            &mut self.scratch,
            tokens,
            pos,
            MtpHidden::Shifted,
            per_token,
        )
    }

    /// The normed hidden states of rows `from..n` of the last batch into the scratch's `xn`
    /// (rows `0..n - from`), as the output projection takes them.
    pub(crate) fn mtp_output_rows(&mut self, from: usize, n: usize) {
        let e = self.model.config.n_embd;
        let s = &mut self.scratch;
        s.xn[..(n - from) * e].copy_from_slice(&s.mtp[from * e..n * e]);
    }

    /// The MTP layer's logits for `token` at the next position (`n_past`), after the hidden
    /// state of the last position: what it predicts follows `token`. `None` when the scratch
    /// no longer holds that hidden state (after a context cut). Its KV row is written past the
    /// context, where the next pass writes it again.
    pub fn mtp_logits(&mut self, token: u32) -> Result<Option<&[f32]>, EngineError> {
        let at = self.history.len();
        let Some(source) = at
            .checked_sub(1)
            .and_then(|p| self.mtp.find(p, self.mtp_passes))
        else {
            return Ok(None);
        };
        self.mtp_step(token, at, source)?;
        let v = self.n_vocab();
        Ok(Some(&self.logits[..v]))
    }

    /// One MTP step on `token` at `pos` with its hidden state from `source`: logits into
    /// the first row of `logits`, its output hidden state into the chained one.
    fn mtp_step(&mut self, token: u32, pos: usize, source: MtpHidden) -> Result<(), EngineError> {
        if !self.model.config.mtp {
            return Err(EngineError::Invalid(
                "the engine holds no MTP layer (--mtp)".into(),
            ));
        }
        if pos >= self.kv.capacity() {
            return Err(EngineError::ContextOverflow {
                prompt: 1,
                needed: pos + 1,
                ctx: self.kv.capacity(),
            });
        }
        self.kv.reserve(pos + 1)?;
        mtp_layer(
            &self.model,
            &mut self.weights,
            &mut self.kv,
            &mut self.scratch,
            &[token],
            pos,
            source,
            false,
        )?;
        let (cfg, file, tensors) = (&self.model.config, &self.model.file, &self.model.tensors);
        let e = cfg.n_embd;
        let s = &mut self.scratch;
        let norm = self.weights.vectors.layers[cfg.n_layer].norm(Role::NextnSharedHeadNorm);
        rms_norm(&s.x[..e], norm, cfg.rms_eps, &mut s.xn[..e]);
        let (_, _, _, chain) = mtp::parts(&mut s.mtp, s.batch, e);
        chain.copy_from_slice(&s.xn[..e]);
        let v = tensors.n_vocab;
        self.weights
            .matrices
            .logits(file, tensors, &s.xn[..e], 1, &mut self.logits[..v])
    }

    /// Up to `k` tokens the MTP layer drafts greedily after `token`, the token sampled for
    /// position `n_past`; none where the hidden state it starts from is gone.
    pub(crate) fn draft_mtp(&mut self, token: u32, k: usize) -> Result<Vec<u32>, EngineError> {
        let at = self.history.len();
        let room = self.kv.capacity().saturating_sub(at + 1);
        let k = k.min(room);
        let Some(mut source) = at
            .checked_sub(1)
            .and_then(|p| self.mtp.find(p, self.mtp_passes))
        else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(k);
        let mut t = token;
        for i in 0..k {
            self.mtp_step(t, at + i, source)?;
            t = argmax(&self.logits[..self.n_vocab()]) as u32;
            out.push(t);
            source = MtpHidden::Chain;
        }
        Ok(out)
    }

    /// The MTP layer's output hidden state of the last [`Engine::mtp_logits`] (normed by its
    /// `shared_head_norm`): what a chained draft step takes.
    pub fn mtp_hidden(&self) -> &[f32] {
        let (b, e) = (self.scratch.batch, self.model.config.n_embd);
        if self.model.config.mtp {
            mtp::chained(&self.scratch.mtp, b, e)
        } else {
            &[]
        }
    }

    /// Forgets the hidden states (a new context).
    pub(crate) fn mtp_forget(&mut self) {
        self.mtp = MtpState::default();
    }
}
