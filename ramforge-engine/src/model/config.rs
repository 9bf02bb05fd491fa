//! Model hyperparameters, read from the GGUF metadata (`<arch>.*` keys) and checked for sense
//! before anything is sized from them.

use super::arch::{
    Architecture, ExpertActivation, ExpertWidth, Gating, LocalRopeBase, Normalize, Role,
    SharedExpert, SlidingWindow,
};
pub use super::mla::{IndexerConfig, MlaConfig};
use crate::error::EngineError;
use ramforge_gguf::Metadata;

/// The numbers that define a transformer: its architecture and the sizes it is built with.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// What the layers bind and run.
    pub arch: &'static Architecture,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width (residual stream).
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Elements per attention head (queries, keys and values).
    pub head_dim: usize,
    /// FFN hidden width.
    pub n_ff: usize,
    /// Trained context length.
    pub n_ctx_train: usize,
    /// The RMSNorm epsilon.
    pub rms_eps: f32,
    /// The RoPE frequency base.
    pub rope_base: f32,
    /// How many leading elements of each head are rotated.
    pub rope_dim: usize,
    /// Positions are multiplied by this (linear RoPE scaling; 1 when absent). With YaRN,
    /// 1 / its factor, and only the low frequencies are scaled ([`ModelConfig::rope_yarn`]).
    pub rope_freq_scale: f32,
    /// YaRN RoPE scaling (`rope.scaling.type = yarn`), when the file asks for it.
    pub rope_yarn: Option<YarnConfig>,
    /// The local layers' window (`attention.sliding_window`), for an architecture with
    /// [`SlidingWindow`] layers: a query sees itself and the `window - 1` positions before it.
    pub sliding_window: Option<usize>,
    /// The query scale of attention scores (`1/sqrt(head_dim)` unless the architecture says
    /// otherwise).
    pub attn_scale: f32,
    /// Experts of a mixture-of-experts FFN (`expert_count`; 0: a dense FFN).
    pub n_expert: usize,
    /// Experts each token is routed to (`expert_used_count`; 0 without experts).
    pub n_expert_used: usize,
    /// One expert's hidden width (0 without experts).
    pub n_ff_exp: usize,
    /// The shared expert's hidden width (0: none).
    pub n_ff_shexp: usize,
    /// Leading layers with a dense FFN in a model with experts (`leading_dense_block_count`).
    pub n_layer_dense_lead: usize,
    /// MTP (nextn) layers after the `n_layer` blocks (`nextn_predict_layers`): bound and run
    /// only for `--mtp` drafts ([`super::Model::enable_mtp`]).
    pub n_layer_nextn: usize,
    /// Whether the first MTP layer is held (its weights and KV rows) to draft with; it is
    /// then layer `n_layer` of the tensors, the plan and the KV cache, never of a pass.
    pub mtp: bool,
    /// How MoE layers route (meaningful only with experts).
    pub router: RouterConfig,
    /// Layers per local/global period of a sliding-window architecture.
    pub swa_period: usize,
    /// The RoPE base and position scale of local (sliding-window) layers.
    pub local_rope: (f32, f32),
    /// Multi-head latent attention's sizes (deepseek2). Its cache row is the latent and the
    /// RoPE key (`head_dim` = `kv_lora_rank + rope_dim`, one key/value head, no values).
    pub mla: Option<MlaConfig>,
    /// DeepSeek sparse attention's lightning indexer (glm-dsa). Its key is cached after the
    /// latent row (`head_dim` = `kv_lora_rank + rope_dim + indexer head`), where the heads'
    /// queries are zero.
    pub indexer: Option<IndexerConfig>,
    /// Per block, whether its indexer runs ("full") or it attends to the positions the last
    /// full layer before it chose ("shared", GLM-5.2; no indexer tensors, and its cache row's
    /// indexer key is unused). Empty without an indexer.
    pub indexer_full: Vec<bool>,
    /// A hybrid model's gated delta-net layers (`None`: attention on every layer).
    pub delta_net: Option<super::hybrid::DeltaNetConfig>,
    /// DeepSeek V4's compressed attention, hyper-connections and hash routing.
    pub dsv4: Option<super::dsv4::Dsv4Config>,
}

/// YaRN's settings from the file (`rope.scaling.*`), with llama.cpp's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YarnConfig {
    /// The context the model was trained at before scaling
    /// (`rope.scaling.original_context_length`, else `context_length`).
    pub n_ctx_orig: usize,
    /// The ramp's high-frequency corner (`rope.scaling.yarn_beta_fast`, 32).
    pub beta_fast: f32,
    /// The ramp's low-frequency corner (`rope.scaling.yarn_beta_slow`, 1).
    pub beta_slow: f32,
    /// `rope.scaling.attn_factor` (1).
    pub attn_factor: f32,
}

/// The router of a model's MoE layers, as its architecture and file set it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterConfig {
    /// Logits to probabilities.
    pub gating: Gating,
    /// Whether the chosen weights are renormalized to sum to one.
    pub normalize: bool,
    /// What the weights are multiplied by (1: nothing).
    pub scale: f32,
    /// Expert groups (1: no group-limited routing).
    pub n_group: usize,
    /// Groups a token's experts may come from.
    pub n_group_used: usize,
    /// Each expert's activation.
    pub activation: ExpertActivation,
}

/// The kind of one layer's feed-forward network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnKind {
    /// One dense gated FFN.
    Dense,
    /// Routed experts (and the shared expert, where the model has one).
    Moe,
}

/// The kind of one layer's attention, which fixes its per-sequence state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// Every earlier position: a key/value cache of the whole context.
    Full,
    /// The last `window` positions: a key/value ring of the window.
    Window(usize),
    /// Multi-head latent attention over every earlier position: a cache of one latent and
    /// one RoPE key per position, no values ([`MlaConfig`]).
    Latent,
    /// A gated delta-net (linear attention) layer: a fixed-size recurrent state instead of
    /// keys and values (`forward/delta_net.rs`).
    DeltaNet,
    /// DeepSeek V4's: a raw sliding window joined by compressed rows (`forward/dsv4/`); its
    /// ring, compressor state and compressed rows live in `kv/compressed.rs`.
    Compressed,
}

/// What one block is made of: an attention kind and an FFN kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerKind {
    /// Its attention.
    pub attention: AttentionKind,
    /// Its feed-forward network.
    pub ffn: FfnKind,
}

/// Bounds that keep a hostile header from asking for absurd work or memory before the tensor
/// shapes (which are checked against the file's size) are compared.
const MAX_DIM: u64 = 1 << 20;
const MAX_LAYERS: u64 = 4096;
/// The most experts a mixture-of-experts layer may have (llama.cpp's LLAMA_MAX_EXPERTS).
const MAX_EXPERTS: u64 = 512;

impl ModelConfig {
    /// Reads the hyperparameters of a model of any architecture in [`super::arch::ALL`].
    pub fn from_metadata(meta: &Metadata) -> Result<ModelConfig, EngineError> {
        let arch_name = meta.get_str("general.architecture")?;
        let arch = Architecture::named(arch_name).ok_or_else(|| {
            EngineError::Unsupported(format!(
                "architecture {arch_name:?} (general.architecture); supported: {}",
                Architecture::supported_names()
            ))
        })?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let bounded = |k: &str, max: u64| -> Result<usize, EngineError> {
            let full = key(k);
            let v = meta.get_u64(&full)?;
            if v == 0 || v > max {
                return Err(EngineError::BadModel(format!(
                    "metadata {full} = {v} is outside 1..={max}"
                )));
            }
            Ok(v as usize)
        };
        let optional = |k: &str, max: u64| -> Result<Option<usize>, EngineError> {
            if meta.contains(&key(k)) {
                bounded(k, max).map(Some)
            } else {
                Ok(None)
            }
        };

        let n_layer_all = bounded("block_count", MAX_LAYERS)?;
        let n_layer_nextn = match optional_u64(meta, &key("nextn_predict_layers"))? {
            Some(v) if v < n_layer_all as u64 => v as usize,
            Some(v) => {
                return Err(EngineError::BadModel(format!(
                    "metadata {} = {v} must be below {} = {n_layer_all}",
                    key("nextn_predict_layers"),
                    key("block_count")
                )))
            }
            None => 0,
        };
        let n_layer = n_layer_all - n_layer_nextn;
        let n_embd = bounded("embedding_length", MAX_DIM)?;
        let n_ff = bounded("feed_forward_length", MAX_DIM)?;
        let n_head = bounded("attention.head_count", MAX_DIM)?;
        let n_head_kv = optional("attention.head_count_kv", MAX_DIM)?.unwrap_or(n_head);
        let n_ctx_train = bounded("context_length", 1 << 24)?;
        if n_embd % n_head != 0 && !meta.contains(&key("attention.key_length")) {
            return Err(EngineError::BadModel(format!(
                "{} = {n_embd} is not a multiple of {} = {n_head}",
                key("embedding_length"),
                key("attention.head_count")
            )));
        }
        let head_dim = optional("attention.key_length", MAX_DIM)?.unwrap_or(n_embd / n_head);
        let is_mla = arch.spec(Role::AttnKvAMqa).is_some();
        if let Some(v) = optional("attention.value_length", MAX_DIM)? {
            if v != head_dim && !is_mla {
                return Err(EngineError::Unsupported(format!(
                    "{} = {v} differs from the key length {head_dim}",
                    key("attention.value_length")
                )));
            }
        }
        if n_head % n_head_kv != 0 {
            return Err(EngineError::BadModel(format!(
                "{} = {n_head} is not a multiple of {} = {n_head_kv}",
                key("attention.head_count"),
                key("attention.head_count_kv")
            )));
        }
        let rope_dim = optional("rope.dimension_count", MAX_DIM)?.unwrap_or(head_dim);
        if rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(EngineError::BadModel(format!(
                "{} = {rope_dim} must be even and at most the head size {head_dim}",
                key("rope.dimension_count")
            )));
        }
        let rope_base = if meta.contains(&key("rope.freq_base")) {
            meta.get_f32(&key("rope.freq_base"))?
        } else {
            10000.0
        };
        if !(rope_base.is_finite() && rope_base > 1.0) {
            return Err(EngineError::BadModel(format!(
                "{} = {rope_base} must be a finite number above 1",
                key("rope.freq_base")
            )));
        }
        let (rope_freq_scale, rope_yarn) = rope_scaling(meta, &key, n_ctx_train)?;
        check_experts(meta, &key)?;
        let rms_eps = meta.get_f32(&key("attention.layer_norm_rms_epsilon"))?;
        if !(rms_eps.is_finite() && rms_eps > 0.0 && rms_eps < 1.0) {
            return Err(EngineError::BadModel(format!(
                "{} = {rms_eps} must lie in (0, 1)",
                key("attention.layer_norm_rms_epsilon")
            )));
        }
        let (swa_period, local_rope) =
            local_layers(meta, arch, &key, n_layer, rope_base, rope_freq_scale)?;
        let sliding_window = match arch.sliding_window {
            Some(_) if !meta.contains(&key("attention.sliding_window")) => {
                return Err(EngineError::Unsupported(format!(
                    "{arch_name} without {} (full attention on every layer, logit \
                     soft-capping) is not implemented",
                    key("attention.sliding_window")
                )))
            }
            Some(_) => Some(bounded("attention.sliding_window", 1 << 24)?),
            None => None,
        };
        // llama.cpp: 1/sqrt(n_embd/n_head) for the 62-layer Gemma 3 27B, else 1/sqrt(head_dim).
        let attn_scale = if arch.sliding_window.is_some() && n_layer == 62 {
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };
        let experts = experts(meta, arch, &key, n_ff, n_layer)?;
        let (mla, attn_scale, rope_yarn) = if is_mla {
            let m = super::mla::read(meta, &key, head_dim, n_head_kv, rope_dim)?;
            let (scale, factor) = super::mla::scales(
                meta,
                &key,
                &m,
                rope_dim,
                rope_freq_scale,
                rope_yarn.map(|y| y.attn_factor),
            )?;
            let yarn = rope_yarn.map(|y| YarnConfig {
                attn_factor: factor.unwrap_or(y.attn_factor),
                ..y
            });
            (Some(m), scale, yarn)
        } else {
            (None, attn_scale, rope_yarn)
        };
        let (indexer, indexer_full) = match mla {
            Some(m) if arch.spec(Role::IndexerK).is_some() => {
                let (x, full) =
                    super::mla::read_indexer(meta, &key, &m, rope_dim, n_ctx_train, n_layer)?;
                (Some(x), full)
            }
            _ => (None, Vec::new()),
        };
        // Latent attention caches one row of the latent and the RoPE key per position (and
        // the indexer's key after them): one key/value head that wide, whatever layout the
        // file's attention keys describe.
        let (head_dim, n_head_kv) = match mla {
            Some(m) => (
                m.kv_lora_rank + rope_dim + indexer.map_or(0, |x| x.head_dim),
                1,
            ),
            None => (head_dim, n_head_kv),
        };
        let delta_net = super::hybrid::DeltaNetConfig::from_metadata(
            meta,
            arch,
            n_layer,
            n_layer_all,
            rope_dim,
        )?;
        let dsv4 = if arch.spec(Role::HcAttnFn).is_some() {
            Some(super::dsv4::read(
                meta,
                &key,
                n_layer,
                n_layer_all,
                (n_head, n_head_kv, head_dim, rope_dim),
            )?)
        } else {
            None
        };
        Ok(ModelConfig {
            arch,
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_ctx_train,
            rms_eps,
            rope_base,
            rope_dim,
            rope_freq_scale,
            rope_yarn,
            sliding_window,
            attn_scale,
            n_expert: experts.count,
            n_expert_used: experts.used,
            n_ff_exp: experts.width,
            n_ff_shexp: experts.shared_width,
            n_layer_dense_lead: experts.dense_lead,
            n_layer_nextn,
            mtp: false,
            router: experts.router,
            swa_period,
            local_rope,
            mla,
            indexer,
            indexer_full,
            delta_net,
            dsv4,
        })
    }

    /// Whether layer `layer` runs its own lightning indexer (glm-dsa's full layers; a shared
    /// layer reuses the last full layer's choice).
    pub fn indexer_is_full(&self, layer: usize) -> bool {
        self.indexer_full.get(layer).copied().unwrap_or(false)
    }

    /// Whether some layer reuses another's indexer choice (GLM-5.2's shared layers), so a
    /// pass keeps each row's choice for the layers after the one that made it.
    pub fn indexer_has_shared_layers(&self) -> bool {
        self.indexer_full.iter().any(|&full| !full)
    }

    /// Layers whose weights and KV rows are held: the blocks, and the MTP layer with `mtp`.
    pub fn n_layer_held(&self) -> usize {
        self.n_layer + usize::from(self.mtp)
    }

    /// What layer `layer` is made of.
    pub fn layer_kind(&self, layer: usize) -> LayerKind {
        LayerKind {
            attention: match self.window(layer) {
                _ if self.mla.is_some() => AttentionKind::Latent,
                _ if self.dsv4.is_some() => AttentionKind::Compressed,
                _ if self.is_recurrent(layer) => AttentionKind::DeltaNet,
                Some(w) => AttentionKind::Window(w),
                None => AttentionKind::Full,
            },
            ffn: if self.n_expert > 0 && layer >= self.n_layer_dense_lead {
                FfnKind::Moe
            } else {
                FfnKind::Dense
            },
        }
    }

    /// The sliding window of `layer` if it is a local layer, `None` for a global one.
    pub fn window(&self, layer: usize) -> Option<usize> {
        self.arch.sliding_window?;
        let period = self.swa_period;
        (layer % period < period - 1).then_some(self.sliding_window?)
    }

    /// The RoPE base and position scale of `layer` (local layers have their own base and no
    /// scaling).
    pub fn rope_of(&self, layer: usize) -> (f32, f32) {
        match self.window(layer) {
            Some(_) => self.local_rope,
            None => (self.rope_base, self.rope_freq_scale),
        }
    }

    /// Positions of `layer` a cache for a context of `ctx` must keep: the window of a local
    /// layer, else the whole context.
    pub fn kv_positions(&self, layer: usize, ctx: usize) -> usize {
        if self.is_recurrent(layer) || self.dsv4.is_some() {
            // No keys or values there (a delta-net layer's state, DeepSeek V4's ring and
            // compressed rows are kept apart); the cache's smallest store (one slot) stands in.
            return 1;
        }
        self.window(layer).map_or(ctx, |w| w.min(ctx))
    }

    /// Whether `layer` is a gated delta-net layer.
    pub fn is_recurrent(&self, layer: usize) -> bool {
        self.delta_net
            .as_ref()
            .is_some_and(|d| d.is_recurrent(layer))
    }

    /// Whether a prompt may run layer by layer over several batches: not where a layer reuses
    /// what an earlier layer left in the batch's scratch (glm-dsa's shared indexer layers, its
    /// selections) or where each batch feeds an MTP layer (`--mtp`).
    pub fn prefills_layer_major(&self) -> bool {
        !self.mtp && !self.indexer_has_shared_layers()
    }

    /// Residual streams per token: DeepSeek V4's hyper-connections keep several.
    pub fn residual_streams(&self) -> usize {
        if self.dsv4.is_some() {
            super::dsv4::HC_STREAMS
        } else {
            1
        }
    }

    /// Width of all query heads together.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}

/// Mixture-of-experts counts (`<arch>.expert_count`, `<arch>.expert_used_count`), where
/// present, must make sense before anything is sized from them: at most [`MAX_EXPERTS`]
/// experts, and between one and all of them used per token.
fn check_experts(meta: &Metadata, key: &dyn Fn(&str) -> String) -> Result<(), EngineError> {
    let (count_key, used_key) = (key("expert_count"), key("expert_used_count"));
    let read = |k: &str| -> Result<Option<u64>, EngineError> {
        Ok(if meta.contains(k) {
            Some(meta.get_u64(k)?)
        } else {
            None
        })
    };
    let count = read(&count_key)?.unwrap_or(0);
    let used = read(&used_key)?.unwrap_or(0);
    if count > MAX_EXPERTS {
        return Err(EngineError::BadModel(format!(
            "metadata {count_key} = {count} is outside 0..={MAX_EXPERTS}"
        )));
    }
    if used > count || (count > 0 && used == 0) {
        return Err(EngineError::BadModel(format!(
            "metadata {used_key} = {used} must lie in 1..={count} ({count_key})"
        )));
    }
    Ok(())
}

/// What a model's experts are: zeros for a dense model.
struct Experts {
    count: usize,
    used: usize,
    width: usize,
    shared_width: usize,
    dense_lead: usize,
    router: RouterConfig,
}

/// An optional unsigned key.
fn optional_u64(meta: &Metadata, key: &str) -> Result<Option<u64>, EngineError> {
    Ok(if meta.contains(key) {
        Some(meta.get_u64(key)?)
    } else {
        None
    })
}

/// The model's experts as its architecture's router reads them. Refuses experts in an
/// architecture without an expert layout, and every count that does not make sense.
fn experts(
    meta: &Metadata,
    arch: &Architecture,
    key: &dyn Fn(&str) -> String,
    n_ff: usize,
    n_layer: usize,
) -> Result<Experts, EngineError> {
    let read = |k: &str| optional_u64(meta, &key(k));
    let r = arch.router;
    let mut out = Experts {
        count: 0,
        used: 0,
        width: 0,
        shared_width: 0,
        dense_lead: 0,
        router: RouterConfig {
            gating: r.gating,
            normalize: false,
            scale: 1.0,
            n_group: 1,
            n_group_used: 1,
            activation: r.activation,
        },
    };
    let count_key = key("expert_count");
    let n_expert = read("expert_count")?.unwrap_or(0);
    let has_layout = arch.spec(Role::FfnGateExps).is_some();
    let needs_experts = arch.spec(Role::FfnDown).is_none();
    if n_expert == 0 {
        if needs_experts {
            return Err(EngineError::BadModel(format!(
                "{count_key} must be above 0 for {}",
                arch.name
            )));
        }
        return Ok(out);
    }
    if !has_layout {
        return Err(EngineError::Unsupported(format!(
            "{count_key} = {n_expert}: experts in {} are not implemented",
            arch.name
        )));
    }
    let used_key = key("expert_used_count");
    let used = read("expert_used_count")?.ok_or_else(|| {
        EngineError::BadModel(format!("{used_key} is missing ({count_key} = {n_expert})"))
    })?;
    // check_experts has bounded both counts.
    out.count = n_expert as usize;
    out.used = used as usize;
    let gating_key = key("expert_gating_func");
    match read("expert_gating_func")? {
        Some(g) if r.gating_key => {
            out.router.gating = Gating::from_id(g).ok_or_else(|| {
                EngineError::Unsupported(format!(
                    "{gating_key} = {g}: supported are 1 (softmax), 2 (sigmoid), \
                     3 (softmax of the chosen), 4 (sqrt softplus)"
                ))
            })?;
        }
        // An architecture whose gating is fixed: a file naming another is refused rather than
        // run with the fixed one.
        Some(g) if Gating::from_id(g) != Some(r.gating) => {
            return Err(EngineError::Unsupported(format!(
                "{gating_key} = {g}: {} routes with {:?} only",
                arch.name, r.gating
            )));
        }
        // llama.cpp's "none" (0) keeps the architecture's default.
        _ => {}
    }
    out.router.normalize = match r.normalize {
        Normalize::Always => true,
        Normalize::Never => false,
        Normalize::Key => {
            let k = key("expert_weights_norm");
            meta.contains(&k) && meta.get_bool(&k)?
        }
    };
    if r.scale_key {
        let k = key("expert_weights_scale");
        if meta.contains(&k) {
            let v = meta.get_f32(&k)?;
            if !(v.is_finite() && v > 0.0 && v <= 1e4) {
                return Err(EngineError::BadModel(format!(
                    "metadata {k} = {v} must lie in (0, 10000]"
                )));
            }
            out.router.scale = v;
        }
    }
    if r.groups_key {
        let (gk, uk) = (key("expert_group_count"), key("expert_group_used_count"));
        let groups = read("expert_group_count")?.unwrap_or(1).max(1);
        let groups_used = read("expert_group_used_count")?.unwrap_or(groups);
        if n_expert % groups != 0 || groups_used == 0 || groups_used > groups {
            return Err(EngineError::BadModel(format!(
                "metadata {gk} = {groups} must divide {count_key} = {n_expert}, \
                 and {uk} = {groups_used} must lie in 1..={groups}"
            )));
        }
        let per_group = n_expert / groups;
        if groups > 1 && (per_group < 2 || groups_used * per_group < used) {
            return Err(EngineError::BadModel(format!(
                "metadata {gk} = {groups}, {uk} = {groups_used}: {groups_used} groups of \
                 {per_group} experts cannot supply {used_key} = {used}"
            )));
        }
        out.router.n_group = groups as usize;
        out.router.n_group_used = groups_used as usize;
    }
    let width = |k: &str, default: usize| -> Result<usize, EngineError> {
        match read(k)? {
            Some(v) if v > 0 && v <= MAX_DIM => Ok(v as usize),
            Some(v) => Err(EngineError::BadModel(format!(
                "metadata {} = {v} is outside 1..={MAX_DIM}",
                key(k)
            ))),
            None => Ok(default),
        }
    };
    // llama.cpp: Mixtral's and olmoe's experts are feed_forward_length wide; the others'
    // expert_feed_forward_length wide (n_ff / n_expert_used when absent).
    out.width = match r.expert_width {
        ExpertWidth::FeedForward => n_ff,
        ExpertWidth::ExpertKey => width("expert_feed_forward_length", n_ff / out.used)?,
    };
    if out.width == 0 {
        return Err(EngineError::BadModel(format!(
            "{} / {used_key} leaves experts 0 wide",
            key("feed_forward_length")
        )));
    }
    out.shared_width = match r.shared {
        SharedExpert::None => 0,
        SharedExpert::Gated => width("expert_shared_feed_forward_length", n_ff)?,
        SharedExpert::Counted => {
            let k = key("expert_shared_count");
            match read("expert_shared_count")? {
                None | Some(0) => 0,
                Some(c) if c <= 64 => out.width * c as usize,
                Some(c) => {
                    return Err(EngineError::BadModel(format!(
                        "metadata {k} = {c} is outside 0..=64"
                    )))
                }
            }
        }
    };
    if r.dense_lead_key {
        let k = key("leading_dense_block_count");
        match read("leading_dense_block_count")? {
            Some(v) if v <= n_layer as u64 => out.dense_lead = v as usize,
            Some(v) => {
                return Err(EngineError::BadModel(format!(
                    "metadata {k} = {v} exceeds the {n_layer} blocks"
                )))
            }
            None => {}
        }
    }
    Ok(out)
}

/// The local layers' period and `(RoPE base, position scale)` of a sliding-window
/// architecture; `(1, global)` for one without local layers.
fn local_layers(
    meta: &Metadata,
    arch: &Architecture,
    key: &dyn Fn(&str) -> String,
    n_layer: usize,
    rope_base: f32,
    rope_freq_scale: f32,
) -> Result<(usize, (f32, f32)), EngineError> {
    let Some(SlidingWindow {
        period,
        period_key,
        local_rope_base,
        local_rope_scaled,
    }) = arch.sliding_window
    else {
        return Ok((1, (rope_base, rope_freq_scale)));
    };
    let pattern_key = key("attention.sliding_window_pattern");
    let period = match optional_u64(meta, &pattern_key)? {
        Some(p) if period_key && (1..=n_layer.max(1) as u64).contains(&p) => p as usize,
        Some(p) if period_key => {
            return Err(EngineError::BadModel(format!(
                "metadata {pattern_key} = {p} is outside 1..={n_layer}"
            )))
        }
        _ => period,
    };
    let base = match local_rope_base {
        LocalRopeBase::Fixed(b) => b,
        LocalRopeBase::Key => {
            let k = key("rope.freq_base_swa");
            if meta.contains(&k) {
                let b = meta.get_f32(&k)?;
                if !(b.is_finite() && b > 1.0) {
                    return Err(EngineError::BadModel(format!(
                        "{k} = {b} must be a finite number above 1"
                    )));
                }
                b
            } else {
                rope_base
            }
        }
    };
    let scale = if local_rope_scaled {
        rope_freq_scale
    } else {
        1.0
    };
    Ok((period, (base, scale)))
}

/// The position multiplier of `<arch>.rope.scaling.*` and, for YaRN, its settings: none,
/// linear or yarn; anything else is refused rather than silently ignored.
fn rope_scaling(
    meta: &Metadata,
    key: &dyn Fn(&str) -> String,
    n_ctx_train: usize,
) -> Result<(f32, Option<YarnConfig>), EngineError> {
    let kind_key = key("rope.scaling.type");
    let kind = if meta.contains(&kind_key) {
        meta.get_str(&kind_key)?
    } else {
        "none"
    };
    let f32_or = |k: &str, default: f32| -> Result<f32, EngineError> {
        let full = key(k);
        if !meta.contains(&full) {
            return Ok(default);
        }
        let v = meta.get_f32(&full)?;
        if v.is_finite() && v > 0.0 && v <= 1e6 {
            Ok(v)
        } else {
            Err(EngineError::BadModel(format!(
                "metadata {full} = {v} must lie in (0, 1e6]"
            )))
        }
    };
    let factor_key = key("rope.scaling.factor");
    let factor = if meta.contains(&factor_key) {
        meta.get_f32(&factor_key)?
    } else {
        0.0
    };
    let scale = match kind {
        "none" => return Ok((1.0, None)),
        _ if factor == 0.0 || factor == 1.0 => 1.0,
        _ if factor.is_finite() && factor > 0.0 => 1.0 / factor,
        _ => {
            return Err(EngineError::BadModel(format!(
                "{factor_key} = {factor} must be a positive number"
            )))
        }
    };
    match kind {
        "linear" => Ok((scale, None)),
        "yarn" => {
            let orig_key = key("rope.scaling.original_context_length");
            let n_ctx_orig = match optional_u64(meta, &orig_key)? {
                Some(v) if (1..=1 << 24).contains(&v) => v as usize,
                Some(v) => {
                    return Err(EngineError::BadModel(format!(
                        "metadata {orig_key} = {v} is outside 1..={}",
                        1 << 24
                    )))
                }
                None => n_ctx_train,
            };
            let yarn = YarnConfig {
                n_ctx_orig,
                beta_fast: f32_or("rope.scaling.yarn_beta_fast", 32.0)?,
                beta_slow: f32_or("rope.scaling.yarn_beta_slow", 1.0)?,
                attn_factor: f32_or("rope.scaling.attn_factor", 1.0)?,
            };
            Ok((scale, Some(yarn)))
        }
        other => Err(EngineError::Unsupported(format!(
            "RoPE scaling {other:?} ({kind_key}); supported: none, linear, yarn"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::{Gating, RopeStyle};
    use ramforge_gguf::Value;

    fn meta(arch: &str, extra: &[(&str, Value)]) -> Metadata {
        let mut m = Metadata::new();
        m.insert("general.architecture".into(), Value::String(arch.into()));
        let base = [
            ("block_count", Value::U32(2)),
            ("embedding_length", Value::U32(64)),
            ("feed_forward_length", Value::U32(128)),
            ("attention.head_count", Value::U32(4)),
            ("attention.head_count_kv", Value::U32(2)),
            ("context_length", Value::U32(256)),
            ("attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ];
        for (k, v) in extra {
            m.insert(format!("{arch}.{k}"), v.clone());
        }
        for (k, v) in base {
            m.insert(format!("{arch}.{k}"), v);
        }
        m
    }

    #[test]
    fn llama_and_qwen2_read_with_defaults() {
        let c = ModelConfig::from_metadata(&meta("llama", &[])).unwrap();
        assert_eq!(c.arch.name, "llama");
        assert_eq!(c.arch.rope, RopeStyle::Adjacent);
        assert_eq!(
            (c.head_dim, c.rope_dim, c.q_dim(), c.kv_dim()),
            (16, 16, 64, 32)
        );
        assert_eq!(c.rope_base, 10000.0);
        let q = ModelConfig::from_metadata(&meta(
            "qwen2",
            &[
                ("rope.freq_base", Value::F32(1e6)),
                ("rope.dimension_count", Value::U32(8)),
            ],
        ))
        .unwrap();
        assert_eq!(q.arch.rope, RopeStyle::Neox);
        assert_eq!((q.rope_base, q.rope_dim), (1e6, 8));
    }

    #[test]
    fn unknown_architecture_and_bad_values_are_named() {
        let e = ModelConfig::from_metadata(&meta("phi3", &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("phi3") && e.contains("llama, qwen2"), "{e}");
        let e = ModelConfig::from_metadata(&meta(
            "llama",
            &[("attention.head_count_kv", Value::U32(3))],
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("head_count"), "{e}");
        let e = ModelConfig::from_metadata(&meta(
            "llama",
            &[("rope.scaling.type", Value::String("longrope".into()))],
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("longrope"), "{e}");
        let mut m = meta("llama", &[]);
        m = {
            let mut n = Metadata::new();
            for (k, v) in m.iter() {
                if k != "llama.block_count" {
                    n.insert(k.to_string(), v.clone());
                }
            }
            n
        };
        let e = ModelConfig::from_metadata(&m).unwrap_err().to_string();
        assert!(e.contains("llama.block_count"), "{e}");
    }

    #[test]
    fn gemma3_reads_its_window_layer_pattern_and_scale() {
        let c = ModelConfig::from_metadata(&meta(
            "gemma3",
            &[
                ("attention.key_length", Value::U32(32)),
                ("attention.sliding_window", Value::U32(8)),
                ("block_count", Value::U32(12)),
                ("rope.freq_base", Value::F32(1e6)),
            ],
        ))
        .unwrap();
        assert_eq!((c.head_dim, c.q_dim()), (32, 128));
        let windows: Vec<Option<usize>> = (0..12).map(|l| c.window(l)).collect();
        let local = Some(8);
        assert_eq!(
            windows,
            [local, local, local, local, local, None, local, local, local, local, local, None]
        );
        assert_eq!((c.rope_of(0), c.rope_of(5)), ((10000.0, 1.0), (1e6, 1.0)));
        assert_eq!((c.kv_positions(0, 100), c.kv_positions(5, 100)), (8, 100));
        assert_eq!(c.kv_positions(0, 4), 4);
        assert_eq!(c.attn_scale, 1.0 / 32f32.sqrt());
        let e = ModelConfig::from_metadata(&meta("gemma3", &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("gemma3.attention.sliding_window"), "{e}");
    }

    #[test]
    fn experts_are_read_and_what_is_not_implemented_is_named() {
        let moe = |arch: &str, extra: &[(&str, Value)]| {
            let mut all = extra.to_vec();
            for (k, v) in [
                ("expert_count", Value::U32(8)),
                ("expert_used_count", Value::U32(2)),
            ] {
                if extra.iter().all(|(e, _)| *e != k) {
                    all.push((k, v));
                }
            }
            ModelConfig::from_metadata(&meta(arch, &all))
        };
        let c = moe(
            "qwen3moe",
            &[("expert_feed_forward_length", Value::U32(32))],
        )
        .unwrap();
        assert_eq!((c.n_expert, c.n_expert_used, c.n_ff_exp), (8, 2, 32));
        let c = moe("qwen3moe", &[]).unwrap();
        assert_eq!(c.n_ff_exp, 128 / 2);
        let c = moe("llama", &[]).unwrap();
        assert_eq!((c.n_expert, c.n_ff_exp), (8, 128));
        let dense = ModelConfig::from_metadata(&meta("llama", &[])).unwrap();
        assert_eq!((dense.n_expert, dense.n_expert_used), (0, 0));
        let err = |r: Result<ModelConfig, EngineError>| r.unwrap_err().to_string();
        let e = err(moe("llama", &[("expert_gating_func", Value::U32(2))]));
        assert!(e.contains("llama.expert_gating_func"), "{e}");
        let e = err(moe("qwen2", &[]));
        assert!(e.contains("qwen2.expert_count"), "{e}");
        let e = err(moe("llama", &[("expert_used_count", Value::U32(9))]));
        assert!(e.contains("llama.expert_used_count"), "{e}");
        let e = err(ModelConfig::from_metadata(&meta("qwen3moe", &[])));
        assert!(e.contains("qwen3moe.expert_count"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn expert_counts_are_bounded() {
        let with = |count: Option<u32>, used: Option<u32>| {
            let mut extra = Vec::new();
            extra.extend(count.map(|c| ("expert_count", Value::U32(c))));
            extra.extend(used.map(|u| ("expert_used_count", Value::U32(u))));
            ModelConfig::from_metadata(&meta("llama", &extra)).map_err(|e| e.to_string())
        };
        assert!(with(Some(8), Some(2)).is_ok());
        assert!(with(Some(0), Some(0)).is_ok());
        let e = with(Some(100_000), Some(2)).unwrap_err();
        assert!(e.contains("llama.expert_count = 100000"), "{e}");
        let e = with(Some(8), Some(9)).unwrap_err();
        assert!(
            e.contains("llama.expert_used_count = 9 must lie in 1..=8"),
            "{e}"
        );
        let e = with(None, Some(1)).unwrap_err();
        assert!(
            e.contains("llama.expert_used_count = 1 must lie in 1..=0"),
            "{e}"
        );
        let e = with(Some(4), None).unwrap_err();
        assert!(e.contains("llama.expert_used_count = 0"), "{e}");
    }

    #[test]
    fn the_moe_families_read_their_router_and_refuse_nonsense_in_one_line() {
        let moe = |arch: &str, extra: &[(&str, Value)]| {
            let mut all = vec![
                ("expert_count", Value::U32(8)),
                ("expert_used_count", Value::U32(2)),
                ("block_count", Value::U32(4)),
            ];
            for (k, v) in extra {
                all.retain(|(a, _)| a != k);
                all.push((k, v.clone()));
            }
            ModelConfig::from_metadata(&meta(arch, &all)).map_err(|e| e.to_string())
        };
        let c = moe(
            "glm4moe",
            &[
                ("expert_feed_forward_length", Value::U32(32)),
                ("expert_shared_count", Value::U32(2)),
                ("leading_dense_block_count", Value::U32(1)),
                ("expert_weights_scale", Value::F32(2.5)),
                ("expert_weights_norm", Value::Bool(true)),
                ("expert_gating_func", Value::U32(2)),
                ("nextn_predict_layers", Value::U32(1)),
            ],
        )
        .unwrap();
        assert_eq!(
            (c.n_layer, c.n_layer_nextn, c.n_layer_dense_lead),
            (3, 1, 1)
        );
        assert_eq!((c.n_ff_exp, c.n_ff_shexp), (32, 64));
        assert_eq!(c.router.gating, Gating::Sigmoid);
        assert!(c.router.normalize);
        assert_eq!(c.router.scale, 2.5);
        assert_eq!(c.layer_kind(0).ffn, FfnKind::Dense);
        assert_eq!(c.layer_kind(1).ffn, FfnKind::Moe);
        let q = moe("qwen2moe", &[]).unwrap();
        assert_eq!((q.n_ff_exp, q.n_ff_shexp), (64, 128));
        assert!(!q.router.normalize);
        let g = moe(
            "gpt-oss",
            &[
                ("attention.sliding_window", Value::U32(16)),
                ("rope.freq_base", Value::F32(150000.0)),
            ],
        )
        .unwrap();
        assert_eq!(g.router.gating, Gating::SoftmaxWeight);
        let kinds: Vec<AttentionKind> = (0..4).map(|l| g.layer_kind(l).attention).collect();
        use AttentionKind::{Full, Window};
        assert_eq!(kinds, [Window(16), Full, Window(16), Full]);
        assert_eq!(g.rope_of(0), (150000.0, 1.0));

        for (arch, extra, named) in [
            (
                "gpt-oss",
                vec![
                    ("attention.sliding_window", Value::U32(16)),
                    ("attention.sliding_window_pattern", Value::U32(0)),
                ],
                "gpt-oss.attention.sliding_window_pattern = 0",
            ),
            (
                "glm4moe",
                vec![("nextn_predict_layers", Value::U32(4))],
                "glm4moe.nextn_predict_layers = 4",
            ),
            (
                "glm4moe",
                vec![("leading_dense_block_count", Value::U32(9))],
                "glm4moe.leading_dense_block_count = 9",
            ),
            (
                "glm4moe",
                vec![("expert_weights_scale", Value::F32(f32::NAN))],
                "glm4moe.expert_weights_scale",
            ),
            (
                "glm4moe",
                vec![("expert_gating_func", Value::U32(9))],
                "glm4moe.expert_gating_func = 9",
            ),
            (
                "glm4moe",
                vec![("expert_shared_count", Value::U32(1000))],
                "glm4moe.expert_shared_count = 1000",
            ),
            (
                "qwen3moe",
                vec![("expert_gating_func", Value::U32(2))],
                "qwen3moe.expert_gating_func = 2",
            ),
            (
                "minimax-m2",
                vec![("expert_used_count", Value::U32(0))],
                "minimax-m2.expert_used_count = 0",
            ),
        ] {
            let e = moe(arch, &extra).unwrap_err();
            assert!(e.contains(named) && !e.contains('\n'), "{arch}: {e}");
        }
    }
}
