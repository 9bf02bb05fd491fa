//! Tensor binding: every tensor the forward pass needs, found by name as the architecture's
//! description lists it and checked for shape and type at load, before a single weight byte is
//! read. A layer tensor the description does not list is refused, never ignored.

use super::arch::{Dim, Presence, Role, Shape, TensorSpec};
use super::config::{FfnKind, ModelConfig};
use super::dsv4::HC_STREAMS;
use crate::error::EngineError;
use ramforge_gguf::{GgmlType, GgufFile, TensorInfo};

/// One layer's tensors, by role. Matrices are GGML layout: `rows` rows of `cols` elements.
#[derive(Clone, Debug)]
pub struct LayerTensors {
    by_role: [Option<TensorInfo>; Role::COUNT],
    /// The roles of the matrices, in the description's order: the order streaming lays them
    /// out and [`LayerTensors::matrices`] lists them.
    matrix_roles: Vec<Role>,
}

impl LayerTensors {
    /// The tensor playing `role`, if the layer has one.
    pub fn get(&self, role: Role) -> Option<&TensorInfo> {
        self.by_role[role as usize].as_ref()
    }

    /// The weight matrices (what a streamed layer reads), in the description's order.
    pub fn matrices(&self) -> impl Iterator<Item = &TensorInfo> + '_ {
        self.matrix_roles.iter().filter_map(|&r| self.get(r))
    }

    /// The roles of [`LayerTensors::matrices`], in the same order.
    pub fn matrix_roles(&self) -> &[Role] {
        &self.matrix_roles
    }

    /// Bytes of one expert's three slices (gate, up, down) in an MoE layer of `n_expert`
    /// experts; `None` in a dense layer.
    pub fn expert_bytes(&self, n_expert: usize) -> Option<u64> {
        let total: u64 = Role::EXPERT_STACKS
            .iter()
            .filter_map(|&r| self.get(r))
            .map(|t| t.n_bytes)
            .sum();
        (total > 0 && n_expert > 0).then(|| total / n_expert as u64)
    }

    /// The three expert stacks of an MoE layer (gate, up, down; GGUF `[cols, rows, n_expert]`,
    /// expert `x` is the `x`-th of `n_expert` equal slices of each); `None` in a dense layer.
    pub fn expert_stacks(&self) -> Option<[&TensorInfo; 3]> {
        let [gate, up, down] = Role::EXPERT_STACKS.map(|r| self.get(r));
        Some([gate?, up?, down?])
    }

    /// This layer without its expert stacks: what stays a layer (pinned or streamed whole)
    /// when experts are streamed one by one. The stacks stay reachable by role.
    pub fn without_experts(&self) -> LayerTensors {
        LayerTensors {
            by_role: self.by_role.clone(),
            matrix_roles: self
                .matrix_roles
                .iter()
                .copied()
                .filter(|r| !Role::EXPERT_STACKS.contains(r))
                .collect(),
        }
    }

    /// Bytes of the matrices (what a streamed layer reads from storage).
    pub fn matrix_bytes(&self) -> u64 {
        self.matrices().map(|t| t.n_bytes).sum()
    }

    /// The vectors kept resident as f32: norms and biases (expert biases: one row per
    /// expert), with their roles. Everything that is not a matrix.
    pub fn vectors(&self) -> impl Iterator<Item = (Role, &TensorInfo)> + '_ {
        Role::ALL
            .into_iter()
            .filter(|r| !self.matrix_roles.contains(r))
            .filter_map(|r| self.get(r).map(|t| (r, t)))
    }
}

/// Every tensor the forward pass reads.
#[derive(Clone, Debug)]
pub struct ModelTensors {
    /// The token embeddings, one row per token.
    pub token_embd: TensorInfo,
    /// The RMSNorm before the output projection.
    pub output_norm: TensorInfo,
    /// The output projection; `token_embd` itself when the file ties them.
    pub output: TensorInfo,
    /// Whether the output projection is `token_embd` itself.
    pub tied_output: bool,
    /// llama3-style per-frequency RoPE divisors.
    pub rope_freqs: Option<TensorInfo>,
    /// DeepSeek V4's head hyper-connection (`output_hc_fn`, `_base`, `_scale`): the streams'
    /// weights for the final state, kept resident as f32.
    pub output_hc: Option<[TensorInfo; 3]>,
    /// Each layer's tensors.
    pub layers: Vec<LayerTensors>,
    /// Vocabulary size (rows of the embeddings and the output).
    pub n_vocab: usize,
}

impl ModelTensors {
    /// Finds and checks every tensor for `cfg`.
    pub fn find(file: &GgufFile, cfg: &ModelConfig) -> Result<ModelTensors, EngineError> {
        let e = cfg.n_embd as u64;
        let get = |name: &str| -> Result<TensorInfo, EngineError> {
            file.header()
                .tensor(name)
                .cloned()
                .ok_or_else(|| EngineError::BadModel(format!("missing tensor {name:?}")))
        };
        let token_embd = get("token_embd.weight")?;
        let n_vocab = token_embd.shape.get(1).copied().unwrap_or(0);
        if n_vocab == 0 || n_vocab > u32::MAX as u64 {
            return Err(EngineError::BadModel(format!(
                "tensor \"token_embd.weight\" has shape {:?}; expected [{e}, n_vocab]",
                token_embd.shape
            )));
        }
        matrix(&token_embd, e, n_vocab)?;
        rows_match_vocabulary(file, n_vocab)?;
        let output_norm = get("output_norm.weight")?;
        vector(&output_norm, e)?;
        let (output, tied_output) = match file.header().tensor("output.weight") {
            Some(t) => {
                matrix(t, e, n_vocab)?;
                (t.clone(), false)
            }
            None => (token_embd.clone(), true),
        };
        let rope_freqs = match file.header().tensor("rope_freqs.weight") {
            Some(t) => {
                vector(t, (cfg.rope_dim / 2) as u64)?;
                Some(t.clone())
            }
            None => None,
        };
        refuse_unknown_layer_tensors(file, cfg)?;
        let layers = (0..cfg.n_layer)
            .map(|i| bind_layer(file, cfg, i))
            .collect::<Result<Vec<_>, _>>()?;
        for t in layers.iter().filter_map(|l| l.get(Role::FfnGateTid2eid)) {
            if t.shape[1] != n_vocab {
                return Err(EngineError::BadModel(format!(
                    "tensor {:?} has {} rows for a vocabulary of {n_vocab}",
                    t.name, t.shape[1]
                )));
            }
        }
        let output_hc = match cfg.dsv4 {
            Some(_) => {
                let h = HC_STREAMS as u64;
                Some([
                    matrix(&get("output_hc_fn.weight")?, h * e, h)?,
                    vector(&get("output_hc_base.weight")?, h)?,
                    vector(&get("output_hc_scale.weight")?, 1)?,
                ])
            }
            None => None,
        };
        Ok(ModelTensors {
            token_embd,
            output_norm,
            output,
            tied_output,
            rope_freqs,
            output_hc,
            layers,
            n_vocab: n_vocab as usize,
        })
    }

    /// Binds the first MTP (nextn) layer, `blk.{n_layer}`: its block as the architecture
    /// describes it plus the nextn tensors the drafts use (`eh_proj`, `enorm`, `hnorm`,
    /// `shared_head_norm`). A file whose nextn layer has its own embeddings or output head is
    /// refused: the drafts use the model's.
    pub fn bind_mtp_layer(file: &GgufFile, cfg: &ModelConfig) -> Result<LayerTensors, EngineError> {
        let i = cfg.n_layer;
        let mut layer = bind_layer(file, cfg, i)?;
        for extra in ["nextn.embed_tokens.weight", "nextn.shared_head_head.weight"] {
            let name = format!("blk.{i}.{extra}");
            if file.header().tensor(&name).is_some() {
                return Err(EngineError::Unsupported(format!(
                    "--mtp: tensor {name:?} (an MTP layer's own embeddings or output head) is \
                     not supported; the drafts use the model's"
                )));
            }
        }
        for role in Role::NEXTN {
            let spec = super::arch::layer_tensor(role);
            let name = format!("blk.{i}.{}", spec.name);
            let t = file.header().tensor(&name).ok_or_else(|| {
                EngineError::BadModel(format!("missing tensor {name:?} (MTP layer)"))
            })?;
            let t = match spec.shape {
                Shape::Vector(d) => vector(t, size(cfg, d, i))?,
                Shape::Matrix { cols, rows } => matrix(t, size(cfg, cols, i), size(cfg, rows, i))?,
                _ => unreachable!("the nextn tensors are matrices and vectors"),
            };
            if matches!(spec.shape, Shape::Matrix { .. }) {
                layer.matrix_roles.push(role);
            }
            layer.by_role[role as usize] = Some(t);
        }
        Ok(layer)
    }

    /// Bytes of all weight matrices of all layers.
    pub fn layer_bytes_total(&self) -> u64 {
        self.layers.iter().map(LayerTensors::matrix_bytes).sum()
    }

    /// Bytes of the largest layer (the size of one streaming slot).
    pub fn max_layer_bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(LayerTensors::matrix_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Bytes of the norms, biases and RoPE factors, kept resident as f32.
    pub fn vector_bytes(&self) -> u64 {
        let per_layer: u64 = self
            .layers
            .iter()
            .flat_map(|l| l.vectors())
            .map(|(_, t)| t.n_elements * 4)
            .sum();
        per_layer
            + self.output_norm.n_elements * 4
            + self.rope_freqs.as_ref().map_or(0, |t| t.n_elements * 4)
            + self
                .output_hc
                .iter()
                .flatten()
                .map(|t| t.n_elements * 4)
                .sum::<u64>()
    }
}

/// The embedding (and so the output) rows must be the tokenizer's vocabulary: a token id the
/// tokenizer can produce must have a row, and a row no token names is a different model.
fn rows_match_vocabulary(file: &GgufFile, n_vocab: u64) -> Result<(), EngineError> {
    const TOKENS: &str = "tokenizer.ggml.tokens";
    if let Some(ramforge_gguf::Value::Array(_, tokens)) = file.header().metadata.get(TOKENS) {
        if tokens.len() as u64 != n_vocab {
            return Err(EngineError::BadModel(format!(
                "tensor \"token_embd.weight\" has {n_vocab} rows but {TOKENS} has {} tokens",
                tokens.len()
            )));
        }
    }
    Ok(())
}

/// The size of `dim` in `cfg` (at `layer`, for the dimensions that differ by layer).
fn size(cfg: &ModelConfig, dim: Dim, layer: usize) -> u64 {
    let mla = cfg.mla.unwrap_or(crate::model::MlaConfig {
        q_lora_rank: 0,
        kv_lora_rank: 0,
        qk_nope: 0,
        v_head: 0,
        absorbed: true,
    });
    let dn = cfg.delta_net.as_ref();
    let v4 = cfg.dsv4.as_ref();
    let indexer = cfg.indexer.or(v4.map(|d| d.indexer));
    (match dim {
        Dim::Embd => cfg.n_embd,
        Dim::EmbdPair => 2 * cfg.n_embd,
        Dim::Q => cfg.q_dim(),
        Dim::Kv => cfg.kv_dim(),
        Dim::Ff => cfg.n_ff,
        Dim::Head => cfg.head_dim,
        Dim::Experts => cfg.n_expert,
        Dim::FfExp => cfg.n_ff_exp,
        Dim::FfShexp => cfg.n_ff_shexp,
        Dim::Heads => cfg.n_head,
        Dim::QLora => v4.map_or(mla.q_lora_rank, |d| d.q_lora),
        Dim::KvLora => mla.kv_lora_rank,
        Dim::KvAMqa => mla.kv_lora_rank + cfg.rope_dim,
        Dim::QMla => cfg.n_head * (mla.qk_nope + cfg.rope_dim),
        Dim::QkNope => mla.qk_nope,
        Dim::VHead => mla.v_head,
        Dim::VMla => cfg.n_head * mla.v_head,
        Dim::KvB => cfg.n_head * (mla.qk_nope + mla.v_head),
        Dim::QGated => 2 * cfg.q_dim(),
        Dim::SsmChannels => dn.map_or(0, |d| d.channels()),
        Dim::SsmInner => dn.map_or(0, |d| d.value_dim()),
        Dim::SsmHeads => dn.map_or(0, |d| d.n_v_heads),
        Dim::SsmHeads2 => dn.map_or(0, |d| 2 * d.n_v_heads),
        Dim::SsmHeadDim => dn.map_or(0, |d| d.head_dim),
        Dim::SsmKernel => dn.map_or(0, |d| d.d_conv),
        Dim::SsmQkvz => dn.map_or(0, |d| d.channels() + d.value_dim()),
        Dim::IdxQ => indexer.map_or(0, |x| x.n_head * x.head_dim),
        Dim::IdxHead => indexer.map_or(0, |x| x.head_dim),
        Dim::IdxHeads => indexer.map_or(0, |x| x.n_head),
        Dim::HcIn => HC_STREAMS * cfg.n_embd,
        Dim::HcMix => (2 + HC_STREAMS) * HC_STREAMS,
        Dim::HcScales => 3,
        Dim::OGroupIn => v4.map_or(0, |d| cfg.q_dim() / d.o_groups),
        Dim::OLora => v4.map_or(0, |d| d.o_groups * d.o_lora),
        Dim::CompKv => v4.map_or(0, |d| d.comp_width(layer, cfg.head_dim)),
        Dim::CompRatio => v4.map_or(0, |d| d.ratio(layer)),
        Dim::IdxCompKv => v4.map_or(0, |d| 2 * d.indexer.head_dim),
        Dim::ExpertsUsed => cfg.n_expert_used,
    }) as u64
}

/// Binds layer `i`'s tensors as `cfg.arch` describes them: required ones must be there,
/// optional groups come all or none, and each is checked for shape and type.
fn bind_layer(file: &GgufFile, cfg: &ModelConfig, i: usize) -> Result<LayerTensors, EngineError> {
    let mut by_role: [Option<TensorInfo>; Role::COUNT] = [const { None }; Role::COUNT];
    let name = |s: &TensorSpec| format!("blk.{i}.{}", s.name);
    let moe = cfg.layer_kind(i).ffn == FfnKind::Moe;
    let recurrent = cfg.is_recurrent(i);
    for spec in cfg.arch.layer {
        let wanted = match spec.presence {
            Presence::Attention => !recurrent,
            Presence::Recurrent | Presence::RecurrentForm(_) => recurrent,
            Presence::Dense => !moe,
            Presence::Moe | Presence::MoeGroup(_) => moe,
            Presence::Shared => moe && cfg.n_ff_shexp > 0,
            Presence::Required | Presence::Group(_) => true,
            Presence::QLora(with) => cfg.mla.is_some_and(|m| (m.q_lora_rank > 0) == with),
            Presence::Absorbed(split) => cfg.mla.is_some_and(|m| m.absorbed == split),
            Presence::Indexer => cfg.indexer_is_full(i),
            Presence::Compressed => cfg.dsv4.as_ref().is_some_and(|d| d.ratio(i) != 0),
            Presence::CompressedIndexer => cfg.dsv4.as_ref().is_some_and(|d| d.ratio(i) == 4),
            Presence::HashRouted => moe && cfg.dsv4.as_ref().is_some_and(|d| i < d.hash_layers),
            Presence::ScoreRouted => moe && cfg.dsv4.as_ref().is_none_or(|d| i >= d.hash_layers),
        };
        let found = file.header().tensor(&name(spec));
        if !wanted {
            if found.is_some() && spec.presence == Presence::Indexer {
                if i >= cfg.n_layer {
                    // An MTP layer's (glm-dsa files carry them) stay unbound: it attends to
                    // every position (see `forward::indexer::sparse_attention`).
                    continue;
                }
                return Err(EngineError::BadModel(format!(
                    "tensor {:?} is not used by layer {i}, a shared indexer layer ({} is 0 \
                     there: it reuses the last full layer's choice)",
                    name(spec),
                    format_args!("{}.attention.indexer.types", cfg.arch.name),
                )));
            }
            if found.is_some()
                && matches!(
                    spec.presence,
                    Presence::Attention | Presence::Recurrent | Presence::RecurrentForm(_)
                )
            {
                return Err(EngineError::BadModel(format!(
                    "tensor {:?} is not used by layer {i}, a {} layer of this {} model",
                    name(spec),
                    if recurrent {
                        "delta-net"
                    } else {
                        "full-attention"
                    },
                    cfg.arch.name,
                )));
            }
            if found.is_some() {
                return Err(EngineError::BadModel(format!(
                    "tensor {:?} is not used by layer {i} of this {} model ({} = {}, \
                     {} = {}, shared expert width {})",
                    name(spec),
                    cfg.arch.name,
                    format_args!("{}.expert_count", cfg.arch.name),
                    cfg.n_expert,
                    format_args!("{}.leading_dense_block_count", cfg.arch.name),
                    cfg.n_layer_dense_lead,
                    cfg.n_ff_shexp,
                )));
            }
            continue;
        }
        let Some(t) = found else {
            if !matches!(
                spec.presence,
                Presence::Group(_) | Presence::MoeGroup(_) | Presence::RecurrentForm(_)
            ) {
                return Err(EngineError::BadModel(format!(
                    "missing tensor {:?}",
                    name(spec)
                )));
            }
            continue;
        };
        let size = |d| size(cfg, d, i);
        let t = match spec.shape {
            Shape::Vector(d) => vector(t, size(d))?,
            Shape::Matrix { cols, rows } => matrix(t, size(cols), size(rows))?,
            Shape::Experts { cols, rows } => {
                experts(t, size(cols), size(rows), cfg.n_expert as u64)?
            }
            Shape::ExpertVectors(len) => matrix(t, size(len), cfg.n_expert as u64)?,
            Shape::PerHead { cols, rows } => experts(t, size(cols), size(rows), cfg.n_head as u64)?,
            Shape::Table { cols, rows } => matrix(t, size(cols), size(rows))?,
            Shape::TokenTable(cols) => token_table(t, size(cols))?,
        };
        by_role[spec.role as usize] = Some(t);
    }
    for spec in cfg.arch.layer {
        let (Presence::Group(group) | Presence::MoeGroup(group) | Presence::RecurrentForm(group)) =
            spec.presence
        else {
            continue;
        };
        let members = || {
            cfg.arch
                .layer
                .iter()
                .filter(move |s| s.presence == spec.presence)
        };
        let present = members().any(|s| by_role[s.role as usize].is_some());
        let missing: Vec<String> = members()
            .filter(|s| by_role[s.role as usize].is_none())
            .map(name)
            .collect();
        if present && !missing.is_empty() {
            return Err(EngineError::BadModel(format!(
                "layer {i} has some {group} but not {}; they come all or none",
                missing.join(", ")
            )));
        }
    }
    let mut forms: Vec<&str> = cfg
        .arch
        .layer
        .iter()
        .filter_map(|s| match s.presence {
            Presence::RecurrentForm(form) => Some(form),
            _ => None,
        })
        .collect();
    forms.dedup();
    if recurrent && !forms.is_empty() {
        let present: Vec<&str> = cfg
            .arch
            .layer
            .iter()
            .filter(|s| by_role[s.role as usize].is_some())
            .filter_map(|s| match s.presence {
                Presence::RecurrentForm(form) => Some(form),
                _ => None,
            })
            .collect();
        let first = present.first().copied();
        if first.is_none() || present.iter().any(|&f| Some(f) != first) {
            return Err(EngineError::BadModel(format!(
                "delta-net layer {i} must have exactly one form of its input projections: {}",
                forms.join(" or ")
            )));
        }
    }
    let matrix_roles = cfg
        .arch
        .layer
        .iter()
        .filter(|s| {
            matches!(
                s.shape,
                Shape::Matrix { .. } | Shape::Experts { .. } | Shape::PerHead { .. }
            )
        })
        .map(|s| s.role)
        .filter(|&r| by_role[r as usize].is_some())
        .collect();
    Ok(LayerTensors {
        by_role,
        matrix_roles,
    })
}

/// The tensors of an MTP (nextn) layer beyond its block's own (llama.cpp's
/// `LLM_TENSOR_NEXTN_*`): tolerated, bound with `--mtp` ([`ModelTensors::bind_mtp_layer`]).
const NEXTN_TENSORS: [&str; 6] = [
    "nextn.eh_proj.weight",
    "nextn.enorm.weight",
    "nextn.hnorm.weight",
    "nextn.embed_tokens.weight",
    "nextn.shared_head_head.weight",
    "nextn.shared_head_norm.weight",
];

/// Refuses a `blk.N.*` tensor that the architecture does not use, or whose layer is past
/// `block_count`: running without it would silently compute another model. The MTP (nextn)
/// layers after the blocks may hold any block tensor and the nextn ones.
fn refuse_unknown_layer_tensors(file: &GgufFile, cfg: &ModelConfig) -> Result<(), EngineError> {
    let n_layer_all = cfg.n_layer + cfg.n_layer_nextn;
    for t in &file.header().tensors {
        let Some(rest) = t.name.strip_prefix("blk.") else {
            continue;
        };
        let (layer, suffix) = rest.split_once('.').unwrap_or((rest, ""));
        let known = cfg.arch.layer.iter().any(|s| s.name == suffix);
        match layer.parse::<usize>() {
            Ok(l) if l < cfg.n_layer && known => {}
            Ok(l)
                if l >= cfg.n_layer
                    && l < n_layer_all
                    && (known || NEXTN_TENSORS.contains(&suffix)) => {}
            Ok(l) if l < cfg.n_layer => {
                return Err(EngineError::Unsupported(format!(
                    "tensor {:?} is not used by architecture {}",
                    t.name, cfg.arch.name
                )))
            }
            _ => {
                return Err(EngineError::BadModel(format!(
                    "tensor {:?} names no layer of the {n_layer_all} (block_count)",
                    t.name
                )))
            }
        }
    }
    Ok(())
}

/// Checks a weight matrix: GGUF shape `[cols, rows]` and a type the kernels support.
fn matrix(t: &TensorInfo, cols: u64, rows: u64) -> Result<TensorInfo, EngineError> {
    if t.shape != [cols, rows] {
        return Err(EngineError::BadModel(format!(
            "tensor {:?} has shape {:?}; expected [{cols}, {rows}]",
            t.name, t.shape
        )));
    }
    supported(t)?;
    Ok(t.clone())
}

/// Checks a stack of expert matrices: GGUF shape `[cols, rows, n_expert]`.
fn experts(t: &TensorInfo, cols: u64, rows: u64, n: u64) -> Result<TensorInfo, EngineError> {
    if t.shape != [cols, rows, n] {
        return Err(EngineError::BadModel(format!(
            "tensor {:?} has shape {:?}; expected [{cols}, {rows}, {n}]",
            t.name, t.shape
        )));
    }
    supported(t)?;
    Ok(t.clone())
}

/// Checks a per-token table (GGUF `[cols, n_vocab]`, I32): its values are checked as they
/// are read (`weights::read_vector`), its rows against the vocabulary by [`ModelTensors::find`].
fn token_table(t: &TensorInfo, cols: u64) -> Result<TensorInfo, EngineError> {
    if t.shape.len() != 2 || t.shape[0] != cols || t.ggml_type != GgmlType::I32 {
        return Err(EngineError::BadModel(format!(
            "tensor {:?} has shape {:?} and type {}; expected [{cols}, n_vocab] of I32",
            t.name, t.shape, t.ggml_type
        )));
    }
    Ok(t.clone())
}

/// Checks a 1-D vector of `len` elements of a type that can be dequantized.
fn vector(t: &TensorInfo, len: u64) -> Result<TensorInfo, EngineError> {
    if t.shape != [len] {
        return Err(EngineError::BadModel(format!(
            "tensor {:?} has shape {:?}; expected [{len}]",
            t.name, t.shape
        )));
    }
    supported(t)?;
    Ok(t.clone())
}

fn supported(t: &TensorInfo) -> Result<(), EngineError> {
    if ramforge_quant::is_supported(t.ggml_type) {
        Ok(())
    } else {
        Err(EngineError::Unsupported(format!(
            "tensor {:?} has type {}, which has no kernels",
            t.name, t.ggml_type
        )))
    }
}

/// Whether a type is a plain float type (used to pick golden tolerances).
pub fn is_float_type(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}
