//! `ramforge-tools synth`: write a synthetic GGUF model with seeded random weights.
//!
//! Used for benchmarks at sizes no shipped model has. Weights are uniform in
//! `±sqrt(3 / fan_in)` (unit-variance outputs for unit-variance inputs) so activations stay
//! finite through any depth; the pre-norms are 1, the per-head and post norms (qwen3, gemma3)
//! `1 ± 0.25`; tensors are generated and quantized row by row while
//! the file is written, so a 7B-class file needs only a few rows of memory. The tokenizer
//! metadata (`tokenizer.*`) is copied from a donor file.

use crate::error::{CmdError, CmdResult};
use crate::progress::progress_bar;
use ramforge_engine::budget::human_bytes;
use ramforge_gguf::{GgmlType, GgufFile, GgufWriter, Metadata, TensorData, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Read;
use std::path::PathBuf;

/// Write a synthetic GGUF model with seeded random weights.
#[derive(clap::Args)]
pub struct Args {
    /// Output GGUF file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Architecture: llama (adjacent-pair RoPE; with --experts the Mixtral layout), qwen2
    /// (neox RoPE, Q/K/V biases), qwen3 (per-head Q/K norms), qwen3moe (qwen3 with experts),
    /// gemma3 (Q/K norms, post-norms, GELU FFN, sliding-window layers), and the MoE families
    /// qwen2moe (gated shared expert), olmoe (whole-projection Q/K norms), glm4moe (dense
    /// leading layers, sigmoid routing with a selection bias, shared experts, MTP layers),
    /// minimax-m2 (whole-projection Q/K norms, partial RoPE, sigmoid routing) and gpt-oss
    /// (biases everywhere, attention sinks, alternating sliding-window layers, clamped SwiGLU
    /// experts), deepseek2 (multi-head latent attention in llama.cpp's absorbed layout, with
    /// --q-lora-rank, --kv-lora-rank; --head-dim is the query head, --rope-dim its rotated
    /// part; --kv-heads 1; dense leading layers, sigmoid routing with a selection bias, shared
    /// experts), glm-dsa (deepseek2's latent attention with a q-LoRA plus the lightning
    /// indexer of DeepSeek sparse attention: --indexer-heads, --indexer-dim,
    /// --indexer-top-k), and the hybrid qwen35moe (gated delta-net layers, every
    /// --full-attention-interval-th layer full attention with a gated query; a quarter of the
    /// head rotated, sectioned RoPE; experts and a gated shared expert) and qwen3next (the
    /// same with a joint beta/alpha projection and plain RoPE), and deepseek4 (DeepSeek V4:
    /// one key/value head whose key is also its value, a q-LoRA, grouped low-rank output,
    /// attention sinks, a sliding window over the raw positions plus per-block compressed
    /// positions (--compress-ratios; ratio 4 with the lightning indexer), hyper-connections of
    /// 4 streams, sqrt-softplus routing, the first --hash-layers blocks routed by token id,
    /// shared experts, clamped SwiGLU). Every tensor an architecture may carry is written,
    /// random.
    #[arg(long, value_parser = ARCHES)]
    pub arch: String,
    /// Transformer blocks.
    #[arg(long)]
    pub layers: u32,
    /// Embedding width (a multiple of the weight type's block size).
    #[arg(long)]
    pub embd: u64,
    /// Feed-forward width (a multiple of the weight type's block size).
    #[arg(long)]
    pub ffn: u64,
    /// Attention heads.
    #[arg(long)]
    pub heads: u64,
    /// Key/value heads (divides --heads).
    #[arg(long)]
    pub kv_heads: u64,
    /// Elements per head (`attention.key_length`), if not --embd / --heads.
    #[arg(long)]
    pub head_dim: Option<u64>,
    /// Experts per layer (llama: the Mixtral layout; the MoE families: required); each is
    /// --ffn wide.
    #[arg(long, default_value_t = 0)]
    pub experts: u64,
    /// Experts each token is routed to.
    #[arg(long, default_value_t = 0)]
    pub experts_used: u64,
    /// gemma3, gpt-oss, deepseek4: the local layers' attention window (deepseek4: every
    /// block's, over the raw positions).
    #[arg(long, default_value_t = 512)]
    pub sliding_window: u32,
    /// Rotated elements of each head (`rope.dimension_count`); default: the whole head, half
    /// of it for glm4moe and minimax-m2, a quarter for deepseek4.
    #[arg(long)]
    pub rope_dim: Option<u64>,
    /// glm4moe, deepseek2, glm-dsa, deepseek4: shared experts per MoE layer
    /// (`expert_shared_count`).
    #[arg(long, default_value_t = 1)]
    pub experts_shared: u64,
    /// qwen2moe: the shared expert's width (default --ffn).
    #[arg(long)]
    pub shared_ffn: Option<u64>,
    /// glm4moe: leading layers with a dense FFN (`leading_dense_block_count`).
    #[arg(long, default_value_t = 1)]
    pub dense_lead: u32,
    /// glm4moe: the dense leading layers' FFN width (default --ffn).
    #[arg(long)]
    pub dense_ffn: Option<u64>,
    /// YaRN RoPE scaling by this factor (`rope.scaling.*`, the original context --ctx / F),
    /// as gpt-oss files carry it.
    #[arg(long, value_name = "F")]
    pub yarn_factor: Option<f32>,
    /// deepseek2: the q-LoRA rank (`attention.q_lora_rank`; 0: a plain attn_q, the Lite
    /// layout); deepseek4: required.
    #[arg(long, default_value_t = 0)]
    pub q_lora_rank: u64,
    /// deepseek2: the cached latent's width (`attention.kv_lora_rank`).
    #[arg(long, default_value_t = 0)]
    pub kv_lora_rank: u64,
    /// deepseek2: each head's value width (`attention.value_length_mla`; default --head-dim
    /// minus --rope-dim).
    #[arg(long)]
    pub v_head_dim: Option<u64>,
    /// deepseek2: write the older unsplit attn_kv_b (per-head key and value widths in
    /// `attention.key_length`/`value_length`, as many key/value heads as heads) instead of the
    /// absorbed attn_k_b/attn_v_b.
    #[arg(long)]
    pub legacy_kv_b: bool,
    /// deepseek2: expert groups (`expert_group_count`) and the groups a token's experts may
    /// come from (`expert_group_used_count`), as G:U.
    #[arg(long, value_name = "G:U")]
    pub expert_groups: Option<String>,
    /// glm-dsa, deepseek4 (its ratio-4 blocks): the lightning indexer's heads
    /// (`attention.indexer.head_count`).
    #[arg(long, default_value_t = 16)]
    pub indexer_heads: u64,
    /// glm-dsa, deepseek4: the indexer's key width (`attention.indexer.key_length`; a power
    /// of two of at least 64, as llama.cpp's Hadamard rotation needs, not below --rope-dim).
    #[arg(long, default_value_t = 64)]
    pub indexer_dim: u64,
    /// glm-dsa, deepseek4: the positions (deepseek4: compressed positions) each query attends
    /// to (`attention.indexer.top_k`); small, so that short prompts take the sparse path.
    #[arg(long, default_value_t = 8)]
    pub indexer_top_k: u64,
    /// glm-dsa: per block, whether its indexer runs (1, "full") or it reuses the last full
    /// layer's choice (0, "shared", as GLM-5.2; written without indexer tensors), as a comma
    /// list (`attention.indexer.types`); absent: every block full, no key written.
    #[arg(long, value_name = "LIST")]
    pub indexer_types: Option<String>,
    /// glm4moe, deepseek2, glm-dsa, qwen35moe, deepseek4: MTP (nextn) layers after the blocks,
    /// written whole (`run --mtp` drafts with the first; deepseek4's have compress ratio 0).
    #[arg(long, default_value_t = 0)]
    pub nextn: u32,
    /// Type of the weight matrices (Q4_0, Q8_0, Q4_K, IQ2_XXS, TQ2_0, NVFP4, F16, ...); norms
    /// and biases are F32. MXFP4 with --experts: the routed experts in MXFP4, the other
    /// matrices in Q8_0, as released gpt-oss files have them.
    #[arg(long = "type", value_name = "T")]
    pub ty: String,
    /// Type of token_embd and output, if not --type (low-bit files keep these wider; the
    /// codebook quantizers search their grids, slow on vocabulary-sized matrices).
    #[arg(long = "embd-type", value_name = "T")]
    pub embd_ty: Option<String>,
    /// Donor GGUF whose tokenizer metadata (`tokenizer.*`) is copied; its vocabulary size
    /// sets the embedding and output rows.
    #[arg(long, value_name = "MODEL.gguf")]
    pub vocab_from: PathBuf,
    /// qwen35moe: every N-th layer is full attention, the others gated delta-net.
    #[arg(long, default_value_t = 4)]
    pub full_attention_interval: u32,
    /// qwen35moe: delta-net value heads (`ssm.time_step_rank`).
    #[arg(long, default_value_t = 4)]
    pub ssm_heads: u64,
    /// qwen35moe: delta-net key heads (`ssm.group_count`, divides --ssm-heads).
    #[arg(long, default_value_t = 2)]
    pub ssm_groups: u64,
    /// qwen35moe: elements of one delta-net head (`ssm.state_size`).
    #[arg(long, default_value_t = 32)]
    pub ssm_state: u64,
    /// qwen35moe: taps of the delta-net convolution (`ssm.conv_kernel`).
    #[arg(long, default_value_t = 4)]
    pub ssm_conv: u64,
    /// qwen3next: write the delta-net input projections as one `ssm_in` (grouped by key
    /// head, as the first converters did) instead of `attn_qkv` and `attn_gate`.
    #[arg(long)]
    pub ssm_in: bool,
    /// Skew the routing the way trained routers are skewed: in each MoE layer a few experts
    /// are chosen far more often than the rest. S is about the exponent of a Zipf law: every
    /// embedding value is shifted by 0.5 (a direction every hidden state keeps), and the
    /// router row of the expert a seeded per-layer order ranks r (from 0) gets a bias along it
    /// worth about -S * ln(1 + r) of its logit, so expert r's odds fall like (1 + r)^-S. At
    /// S = 2, top-4 of 32, the hottest expert is chosen by nearly every token and the 8
    /// hottest take over 90% of the choices; deeper layers, whose hidden state has grown,
    /// see less of the bias. 0 (the default) writes today's unskewed file.
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub router_skew: f32,
    /// deepseek4 (required): each block's KV compression ratio, as a comma list (0: the
    /// sliding window only; 4: plus a compressed position per 4, chosen by the lightning
    /// indexer; 128: plus one per 128, all attended) (`attention.compress_ratios`); at least
    /// one 4 and one 128, as llama.cpp needs.
    #[arg(long, value_name = "LIST")]
    pub compress_ratios: Option<String>,
    /// deepseek4: leading blocks whose experts a per-token table picks
    /// (`hash_layer_count`, `ffn_gate_tid2eid`) instead of the router's top-k.
    #[arg(long, default_value_t = 0)]
    pub hash_layers: u32,
    /// deepseek4: output projection groups (`attention.output_group_count`, divides --heads).
    #[arg(long, default_value_t = 1)]
    pub o_groups: u64,
    /// deepseek4: each output group's low rank (`attention.output_lora_rank`; default
    /// --head-dim).
    #[arg(long)]
    pub o_lora_rank: Option<u64>,
    /// deepseek4: Sinkhorn iterations of the hyper-connections' mixing matrix
    /// (`hyper_connection.sinkhorn_iterations`; DeepSeek V4 has 20).
    #[arg(long, default_value_t = 20)]
    pub hc_sinkhorn_iters: u32,
    /// deepseek4: the hyper-connections' epsilon (`hyper_connection.epsilon`).
    #[arg(long, default_value_t = 1e-6)]
    pub hc_eps: f32,
    /// deepseek4: RoPE base of the compressing blocks and the indexer
    /// (`attention.compress_rope_freq_base`; DeepSeek V4 has 160000).
    #[arg(long, default_value_t = 160000.0)]
    pub compress_rope_base: f32,
    /// deepseek4: the clamp of the routed and shared experts' SwiGLU (`swiglu_clamp_exp`,
    /// `swiglu_clamp_shexp`, one per block; DeepSeek V4 has 10).
    #[arg(long, default_value_t = 10.0)]
    pub swiglu_clamp: f32,
    /// Quantize at most N rows of each block-quantized matrix for real and make the others
    /// of those rows' blocks, picked at random (seeded): a file of a slow-to-quantize format
    /// (the codebook formats' quantizers search their grids) in seconds, every block a real
    /// quantized one, for speed measurements; 0 (the default) quantizes every row.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub quantized_rows: u64,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Context length written to the metadata.
    #[arg(long, default_value_t = 4096)]
    pub ctx: u32,
    /// RoPE frequency base.
    #[arg(long, default_value_t = 10000.0)]
    pub rope_base: f32,
    /// Write the model split in shards as llama.cpp's `gguf-split --split-max-size SIZE` does:
    /// at most SIZE of tensor data per shard (500M, 3G: 10^6 or 10^9 bytes), files named
    /// `OUTPUT-00001-of-0000n.gguf` (OUTPUT without its `.gguf`); open the first.
    #[arg(long, value_name = "SIZE", value_parser = ramforge_gguf::split::parse_split_size)]
    pub split_max_size: Option<u64>,
}

/// The architectures `synth` writes.
const ARCHES: [&str; 15] = [
    "llama",
    "qwen2",
    "qwen3",
    "qwen3moe",
    "gemma3",
    "qwen2moe",
    "olmoe",
    "glm4moe",
    "minimax-m2",
    "gpt-oss",
    "deepseek2",
    "glm-dsa",
    "qwen35moe",
    "qwen3next",
    "deepseek4",
];

pub fn run(args: Args) -> CmdResult {
    let weight_type = |name: &str| -> Result<GgmlType, CmdError> {
        let ty = GgmlType::from_name(name).ok_or_else(|| format!("unknown type {name:?}"))?;
        if !ramforge_quant::is_supported(ty) && ty != GgmlType::F32 {
            return Err(format!("type {ty} has no quantizer in ramforge-quant").into());
        }
        Ok(ty)
    };
    let requested = weight_type(&args.ty)?;
    // Released MXFP4 files (gpt-oss) keep MXFP4 for the routed experts only.
    let (ty, expert_ty) = if requested == GgmlType::MXFP4 && args.experts > 0 {
        (GgmlType::Q8_0, requested)
    } else {
        (requested, requested)
    };
    let embd_ty = match &args.embd_ty {
        Some(name) => weight_type(name)?,
        None => ty,
    };
    let shape = Shape::new(&args)?;
    if !(args.router_skew.is_finite() && args.router_skew >= 0.0) {
        return Err(format!("--router-skew {}: not a number >= 0", args.router_skew).into());
    }
    if args.router_skew > 0.0 && args.experts == 0 {
        return Err("--router-skew skews the routing of experts: it needs --experts".into());
    }
    let donor = GgufFile::open(&args.vocab_from)?;
    let donor_md = &donor.header().metadata;
    let vocab = donor_md.get_str_array("tokenizer.ggml.tokens")?.len() as u64;

    let mut md = Metadata::new();
    let arch = args.arch.as_str();
    let key = |k: &str| format!("{arch}.{k}");
    md.set("general.architecture", Value::String(arch.to_string()));
    md.set(
        "general.name",
        Value::String(if args.router_skew > 0.0 {
            format!(
                "synthetic {arch} seed {} router skew {}",
                args.seed, args.router_skew
            )
        } else {
            format!("synthetic {arch} seed {}", args.seed)
        }),
    );
    md.set(key("context_length"), Value::U32(args.ctx));
    md.set(
        key("embedding_length"),
        Value::U32(u32::try_from(shape.embd)?),
    );
    md.set(
        key("feed_forward_length"),
        Value::U32(u32::try_from(shape.ffn)?),
    );
    md.set(key("block_count"), Value::U32(args.layers + args.nextn));
    md.set(
        key("attention.head_count"),
        Value::U32(u32::try_from(shape.heads)?),
    );
    md.set(
        key("attention.head_count_kv"),
        Value::U32(u32::try_from(shape.kv_heads)?),
    );
    md.set(key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5));
    md.set(key("rope.freq_base"), Value::F32(args.rope_base));
    if let Some(f) = args.yarn_factor {
        if !(f.is_finite() && f > 1.0) {
            return Err(format!("--yarn-factor {f} must be a number above 1").into());
        }
        md.set(key("rope.scaling.type"), Value::String("yarn".into()));
        md.set(key("rope.scaling.factor"), Value::F32(f));
        md.set(
            key("rope.scaling.original_context_length"),
            Value::U32((args.ctx as f32 / f) as u32),
        );
        if arch == "deepseek2" {
            // As DeepSeek V3's converted files carry it: 0.1 x mscale_all_dim (1.0).
            md.set(key("rope.scaling.yarn_log_multiplier"), Value::F32(0.1));
        }
    }
    md.set(
        key("rope.dimension_count"),
        Value::U32(u32::try_from(shape.rope_dim)?),
    );
    if args.head_dim.is_some() {
        md.set(
            key("attention.key_length"),
            Value::U32(u32::try_from(shape.head_dim)?),
        );
        md.set(
            key("attention.value_length"),
            Value::U32(u32::try_from(shape.head_dim)?),
        );
    }
    if shape.experts > 0 {
        md.set(
            key("expert_count"),
            Value::U32(u32::try_from(shape.experts)?),
        );
        md.set(
            key("expert_used_count"),
            Value::U32(u32::try_from(args.experts_used)?),
        );
        if arch != "llama" && arch != "olmoe" {
            md.set(
                key("expert_feed_forward_length"),
                Value::U32(u32::try_from(shape.ffn)?),
            );
        }
        match arch {
            "qwen2moe" => md.set(
                key("expert_shared_feed_forward_length"),
                Value::U32(u32::try_from(shape.shared_ffn)?),
            ),
            "glm4moe" | "deepseek2" | "glm-dsa" => {
                md.set(
                    key("expert_shared_count"),
                    Value::U32(args.experts_shared as u32),
                );
                md.set(
                    key("leading_dense_block_count"),
                    Value::U32(args.dense_lead),
                );
                md.set(key("expert_weights_scale"), Value::F32(2.5));
                md.set(key("expert_weights_norm"), Value::Bool(true));
                md.set(key("expert_gating_func"), Value::U32(2));
                if matches!(arch, "glm4moe" | "deepseek2" | "glm-dsa") {
                    md.set(key("nextn_predict_layers"), Value::U32(args.nextn));
                }
                if let Some((g, u)) = &shape.groups {
                    md.set(key("expert_group_count"), Value::U32(*g));
                    md.set(key("expert_group_used_count"), Value::U32(*u));
                }
                md.set(
                    key("feed_forward_length"),
                    Value::U32(u32::try_from(shape.dense_ffn)?),
                );
            }
            "minimax-m2" => md.set(key("expert_gating_func"), Value::U32(2)),
            "deepseek4" => {
                md.set(
                    key("expert_shared_count"),
                    Value::U32(u32::try_from(args.experts_shared)?),
                );
                // DeepSeek V4's routed_scaling_factor, normalized top-k, and llama.cpp's
                // LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS (4), the only gating it loads.
                md.set(key("expert_weights_scale"), Value::F32(1.5));
                md.set(key("expert_weights_norm"), Value::Bool(true));
                md.set(key("expert_gating_func"), Value::U32(4));
                md.set(key("nextn_predict_layers"), Value::U32(args.nextn));
            }
            "qwen35moe" | "qwen3next" => md.set(
                key("expert_shared_feed_forward_length"),
                Value::U32(u32::try_from(shape.shared_ffn)?),
            ),
            _ => {}
        }
    }
    let hybrid = matches!(arch, "qwen35moe" | "qwen3next");
    if hybrid {
        let u = |v: u64| u32::try_from(v).map(Value::U32);
        md.set(key("ssm.conv_kernel"), u(args.ssm_conv)?);
        md.set(key("ssm.state_size"), u(args.ssm_state)?);
        md.set(key("ssm.group_count"), u(args.ssm_groups)?);
        md.set(key("ssm.time_step_rank"), u(args.ssm_heads)?);
        md.set(key("ssm.inner_size"), u(args.ssm_heads * args.ssm_state)?);
        md.set(
            key("full_attention_interval"),
            Value::U32(args.full_attention_interval),
        );
        md.set(key("nextn_predict_layers"), Value::U32(args.nextn));
        // Sections of the rotated pairs (time, height, width, extra) as Qwen3.5's [11, 11, 10,
        // 0] split its 32: a text position rotates every pair.
        let pairs = shape.rope_dim / 2;
        let sections = [pairs.div_ceil(3), (pairs + 1) / 3, pairs / 3, 0];
        if arch == "qwen35moe" {
            md.set(
                key("rope.dimension_sections"),
                Value::Array(
                    ramforge_gguf::ValueType::I32,
                    sections.iter().map(|&v| Value::I32(v as i32)).collect(),
                ),
            );
        }
    }
    if matches!(arch, "gemma3" | "gpt-oss" | "deepseek4") {
        md.set(
            key("attention.sliding_window"),
            Value::U32(args.sliding_window),
        );
    }
    if let Some(m) = &shape.mla {
        // llama.cpp's absorbed layout: the cache's key is the latent and the RoPE key, its
        // value the latent, one key/value head; the per-head sizes go in the _mla keys.
        let u = |v: u64| u32::try_from(v).map(Value::U32);
        md.set(key("attention.q_lora_rank"), u(m.q_lora)?);
        md.set(key("attention.kv_lora_rank"), u(m.kv_lora)?);
        if args.legacy_kv_b {
            md.set(key("attention.key_length"), u(shape.head_dim)?);
            md.set(key("attention.value_length"), u(m.v_head)?);
            md.set(key("attention.head_count_kv"), u(shape.heads)?);
        } else {
            md.set(key("attention.key_length"), u(m.kv_lora + shape.rope_dim)?);
            md.set(key("attention.value_length"), u(m.kv_lora)?);
            md.set(key("attention.key_length_mla"), u(shape.head_dim)?);
            md.set(key("attention.value_length_mla"), u(m.v_head)?);
            md.set(key("attention.head_count_kv"), Value::U32(1));
        }
        if let Some(x) = &m.indexer {
            md.set(key("attention.indexer.head_count"), u(x.heads)?);
            md.set(key("attention.indexer.key_length"), u(x.dim)?);
            md.set(key("attention.indexer.top_k"), u(x.top_k)?);
            if let Some(full) = &x.full {
                md.set(
                    key("attention.indexer.types"),
                    Value::Array(
                        ramforge_gguf::ValueType::I32,
                        full.iter().map(|&f| Value::I32(f as i32)).collect(),
                    ),
                );
            }
        }
    }
    if let Some(d) = &shape.dsv4 {
        let u = |v: u64| u32::try_from(v).map(Value::U32);
        // One key/value head, keys and values the same row of the head's width.
        md.set(key("attention.head_count_kv"), Value::U32(1));
        md.set(key("attention.key_length"), u(shape.head_dim)?);
        md.set(key("attention.value_length"), u(shape.head_dim)?);
        md.set(key("attention.q_lora_rank"), u(d.q_lora)?);
        md.set(key("attention.output_group_count"), u(d.o_groups)?);
        md.set(key("attention.output_lora_rank"), u(d.o_lora)?);
        md.set(key("attention.indexer.head_count"), u(d.indexer_heads)?);
        md.set(key("attention.indexer.key_length"), u(d.indexer_dim)?);
        md.set(key("attention.indexer.top_k"), u(args.indexer_top_k)?);
        md.set(
            key("attention.compress_ratios"),
            Value::Array(
                ramforge_gguf::ValueType::I32,
                d.ratios.iter().map(|&r| Value::I32(r as i32)).collect(),
            ),
        );
        md.set(
            key("attention.compress_rope_freq_base"),
            Value::F32(args.compress_rope_base),
        );
        md.set(key("hyper_connection.count"), u(HC)?);
        md.set(
            key("hyper_connection.sinkhorn_iterations"),
            Value::U32(args.hc_sinkhorn_iters),
        );
        md.set(key("hyper_connection.epsilon"), Value::F32(args.hc_eps));
        md.set(key("hash_layer_count"), Value::U32(d.hash_layers));
        // One clamp per block, as llama.cpp's converter writes DeepSeek V4's swiglu_limit.
        let clamps = Value::Array(
            ramforge_gguf::ValueType::F32,
            vec![Value::F32(args.swiglu_clamp); d.ratios.len()],
        );
        md.set(key("swiglu_clamp_exp"), clamps.clone());
        md.set(key("swiglu_clamp_shexp"), clamps);
    }
    md.set(key("vocab_size"), Value::U32(u32::try_from(vocab)?));
    for (k, v) in donor_md.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        md.set(k, v.clone());
    }

    let mut w = GgufWriter::new(md);
    // One bar over every tensor byte written; each tensor's source feeds it as it is read.
    let bar = progress_bar(0, "writing", true);
    let mut parameters = 0u64;
    // `shape_v`: GGUF dimensions, the first the row length.
    let skew = args.router_skew;
    let mut add = |name: String, ty: GgmlType, shape_v: Vec<u64>, fill: Fill| {
        let cols = shape_v[0];
        let rows = shape_v[1..].iter().product::<u64>();
        parameters += cols * rows;
        let seed = args.seed ^ fnv1a(name.as_bytes());
        let mut data = RowSource::new(ty, cols as usize, rows, fill, seed, bar.clone())?;
        data.quantized_rows = args.quantized_rows;
        if skew > 0.0 {
            if name == "token_embd.weight" {
                data.row_shift = Some(vec![SKEW_EMBD_SHIFT; rows as usize]);
            } else if name.ends_with(".ffn_gate_inp.weight") {
                data.row_shift = Some(router_skew(skew, cols, rows, seed));
            }
        }
        bar.inc_length(data.row.len() as u64 * rows);
        w.add_tensor(name, ty, &shape_v, TensorData::Reader(Box::new(data)))?;
        Ok::<_, CmdError>(())
    };
    let (e, q, kv, f, hd) = (
        shape.embd,
        shape.q_dim(),
        shape.kv_dim(),
        shape.ffn,
        shape.head_dim,
    );
    let near_one = Fill::Around(1.0, 0.25);
    let small = Fill::Uniform(0.1);
    add(
        "token_embd.weight".into(),
        embd_ty,
        dims(e, vocab),
        Fill::Uniform(1.0),
    )?;
    let f32v = GgmlType::F32;
    for l in 0..args.layers + args.nextn {
        let b = |n: &str| format!("blk.{l}.{n}");
        add(b("attn_norm.weight"), f32v, dims(e, 1), Fill::Ones)?;
        // MTP layers after the blocks attend in full.
        let delta_net =
            hybrid && l < args.layers && (l + 1) % args.full_attention_interval.max(1) != 0;
        if let Some(d) = &shape.dsv4 {
            let (h, ql) = (shape.heads, d.q_lora);
            add(b("attn_sinks.weight"), f32v, dims(h, 1), Fill::Uniform(1.0))?;
            add(b("attn_q_a.weight"), ty, dims(e, ql), Fill::fan_in(e))?;
            add(b("attn_q_a_norm.weight"), f32v, dims(ql, 1), near_one)?;
            add(b("attn_q_b.weight"), ty, dims(ql, q), Fill::fan_in(ql))?;
            add(b("attn_kv.weight"), ty, dims(e, hd), Fill::fan_in(e))?;
            add(b("attn_kv_a_norm.weight"), f32v, dims(hd, 1), near_one)?;
            // Grouped low-rank output: each group's heads to its own rank, then all to embd.
            let (group_in, lora) = (q / d.o_groups, d.o_groups * d.o_lora);
            add(
                b("attn_output_a.weight"),
                ty,
                dims(group_in, lora),
                Fill::fan_in(group_in),
            )?;
            add(
                b("attn_output_b.weight"),
                ty,
                dims(lora, e),
                Fill::fan_in(lora),
            )?;
            // Hyper-connections before the attention and the FFN: the mixes (pre, post and
            // the Sinkhorn-normalized combination) from the normed streams, kept in F32 as
            // the released files keep them.
            let (hc_dim, hc_mix) = (HC * e, (2 + HC) * HC);
            for site in ["attn", "ffn"] {
                add(
                    b(&format!("hc_{site}_fn.weight")),
                    f32v,
                    dims(hc_dim, hc_mix),
                    Fill::fan_in(hc_dim),
                )?;
                add(
                    b(&format!("hc_{site}_base.weight")),
                    f32v,
                    dims(hc_mix, 1),
                    Fill::Uniform(0.5),
                )?;
                add(
                    b(&format!("hc_{site}_scale.weight")),
                    f32v,
                    dims(3, 1),
                    Fill::Uniform(0.5),
                )?;
            }
            let ratio = d.ratios[l as usize] as u64;
            if ratio != 0 {
                // Ratio 4 compresses overlapping windows: twice the rows, the previous half.
                let coff = if ratio == 4 { 2 } else { 1 };
                for part in ["kv", "gate"] {
                    add(
                        b(&format!("attn_compressor_{part}.weight")),
                        ty,
                        dims(e, coff * hd),
                        Fill::fan_in(e),
                    )?;
                }
                add(
                    b("attn_compressor_ape.weight"),
                    f32v,
                    dims(coff * hd, ratio),
                    small,
                )?;
                add(
                    b("attn_compressor_norm.weight"),
                    f32v,
                    dims(hd, 1),
                    near_one,
                )?;
            }
            if ratio == 4 {
                let (ih, id) = (d.indexer_heads, d.indexer_dim);
                add(b("indexer.proj.weight"), ty, dims(e, ih), Fill::fan_in(e))?;
                add(
                    b("indexer.attn_q_b.weight"),
                    ty,
                    dims(ql, ih * id),
                    Fill::fan_in(ql),
                )?;
                for part in ["kv", "gate"] {
                    add(
                        b(&format!("indexer_compressor_{part}.weight")),
                        ty,
                        dims(e, 2 * id),
                        Fill::fan_in(e),
                    )?;
                }
                add(
                    b("indexer_compressor_ape.weight"),
                    f32v,
                    dims(2 * id, ratio),
                    small,
                )?;
                add(
                    b("indexer_compressor_norm.weight"),
                    f32v,
                    dims(id, 1),
                    near_one,
                )?;
            }
        } else if let Some(m) = &shape.mla {
            let (h, rope) = (shape.heads, shape.rope_dim);
            let nope = hd - rope;
            if m.q_lora > 0 {
                let ql = m.q_lora;
                add(b("attn_q_a.weight"), ty, dims(e, ql), Fill::fan_in(e))?;
                add(b("attn_q_a_norm.weight"), f32v, dims(ql, 1), near_one)?;
                add(b("attn_q_b.weight"), ty, dims(ql, q), Fill::fan_in(ql))?;
            } else {
                add(b("attn_q.weight"), ty, dims(e, q), Fill::fan_in(e))?;
            }
            let kl = m.kv_lora;
            add(
                b("attn_kv_a_mqa.weight"),
                ty,
                dims(e, kl + rope),
                Fill::fan_in(e),
            )?;
            add(b("attn_kv_a_norm.weight"), f32v, dims(kl, 1), near_one)?;
            if args.legacy_kv_b {
                let rows = h * (nope + m.v_head);
                add(b("attn_kv_b.weight"), ty, dims(kl, rows), Fill::fan_in(kl))?;
            } else {
                add(
                    b("attn_k_b.weight"),
                    ty,
                    vec![nope, kl, h],
                    Fill::fan_in(nope),
                )?;
                add(
                    b("attn_v_b.weight"),
                    ty,
                    vec![kl, m.v_head, h],
                    Fill::fan_in(kl),
                )?;
            }
            let vd = h * m.v_head;
            add(b("attn_output.weight"), ty, dims(vd, e), Fill::fan_in(vd))?;
            let runs_indexer = |x: &Indexer| {
                x.full
                    .as_ref()
                    .is_none_or(|full| full.get(l as usize).copied().unwrap_or(true))
            };
            if let Some(x) = m.indexer.as_ref().filter(|x| runs_indexer(x)) {
                let ql = m.q_lora;
                let iq = x.heads * x.dim;
                add(
                    b("indexer.attn_q_b.weight"),
                    ty,
                    dims(ql, iq),
                    Fill::fan_in(ql),
                )?;
                add(
                    b("indexer.attn_k.weight"),
                    ty,
                    dims(e, x.dim),
                    Fill::fan_in(e),
                )?;
                add(b("indexer.k_norm.weight"), f32v, dims(x.dim, 1), near_one)?;
                add(b("indexer.k_norm.bias"), f32v, dims(x.dim, 1), small)?;
                add(
                    b("indexer.proj.weight"),
                    ty,
                    dims(e, x.heads),
                    Fill::fan_in(e),
                )?;
            }
        } else if delta_net {
            let (hd_s, heads_v) = (args.ssm_state, args.ssm_heads);
            let (key_dim, value_dim) = (args.ssm_groups * hd_s, heads_v * hd_s);
            let channels = 2 * key_dim + value_dim;
            if args.ssm_in && arch == "qwen3next" {
                let rows = channels + value_dim;
                add(b("ssm_in.weight"), ty, dims(e, rows), Fill::fan_in(e))?;
            } else {
                add(b("attn_qkv.weight"), ty, dims(e, channels), Fill::fan_in(e))?;
                add(
                    b("attn_gate.weight"),
                    ty,
                    dims(e, value_dim),
                    Fill::fan_in(e),
                )?;
            }
            add(
                b("ssm_conv1d.weight"),
                f32v,
                dims(args.ssm_conv, channels),
                Fill::fan_in(args.ssm_conv),
            )?;
            add(b("ssm_dt.bias"), f32v, dims(heads_v, 1), Fill::Uniform(1.0))?;
            // -exp(A_log): negative decays.
            add(b("ssm_a"), f32v, dims(heads_v, 1), Fill::Around(-1.0, 0.5))?;
            if arch == "qwen3next" {
                add(
                    b("ssm_ba.weight"),
                    ty,
                    dims(e, 2 * heads_v),
                    Fill::fan_in(e),
                )?;
            } else {
                add(b("ssm_beta.weight"), ty, dims(e, heads_v), Fill::fan_in(e))?;
                add(b("ssm_alpha.weight"), ty, dims(e, heads_v), Fill::fan_in(e))?;
            }
            add(b("ssm_norm.weight"), f32v, dims(hd_s, 1), near_one)?;
            add(
                b("ssm_out.weight"),
                ty,
                dims(value_dim, e),
                Fill::fan_in(value_dim),
            )?;
        } else if hybrid {
            // The gated query: each head's query, then its output gate.
            add(b("attn_q.weight"), ty, dims(e, 2 * q), Fill::fan_in(e))?;
            add(b("attn_k.weight"), ty, dims(e, kv), Fill::fan_in(e))?;
            add(b("attn_v.weight"), ty, dims(e, kv), Fill::fan_in(e))?;
        } else {
            add(b("attn_q.weight"), ty, dims(e, q), Fill::fan_in(e))?;
            add(b("attn_k.weight"), ty, dims(e, kv), Fill::fan_in(e))?;
            add(b("attn_v.weight"), ty, dims(e, kv), Fill::fan_in(e))?;
        }
        if matches!(arch, "qwen2" | "qwen2moe" | "glm4moe" | "gpt-oss") {
            add(b("attn_q.bias"), f32v, dims(q, 1), small)?;
            add(b("attn_k.bias"), f32v, dims(kv, 1), small)?;
            add(b("attn_v.bias"), f32v, dims(kv, 1), small)?;
        }
        match arch {
            _ if delta_net => {}
            "qwen3" | "qwen3moe" | "gemma3" | "glm4moe" | "qwen35moe" | "qwen3next" => {
                add(b("attn_q_norm.weight"), f32v, dims(hd, 1), near_one)?;
                add(b("attn_k_norm.weight"), f32v, dims(hd, 1), near_one)?;
            }
            "olmoe" | "minimax-m2" => {
                add(b("attn_q_norm.weight"), f32v, dims(q, 1), near_one)?;
                add(b("attn_k_norm.weight"), f32v, dims(kv, 1), near_one)?;
            }
            _ => {}
        }
        if shape.mla.is_none() && shape.dsv4.is_none() && !delta_net {
            add(b("attn_output.weight"), ty, dims(q, e), Fill::fan_in(q))?;
        }
        if arch == "gpt-oss" {
            add(b("attn_output.bias"), f32v, dims(e, 1), small)?;
        }
        if arch == "gpt-oss" {
            add(
                b("attn_sinks.weight"),
                f32v,
                dims(shape.heads, 1),
                Fill::Uniform(2.0),
            )?;
        }
        if arch == "gemma3" {
            add(b("post_attention_norm.weight"), f32v, dims(e, 1), near_one)?;
            add(b("post_ffw_norm.weight"), f32v, dims(e, 1), near_one)?;
        }
        let ffn_norm = if matches!(arch, "glm4moe" | "gpt-oss" | "qwen35moe" | "qwen3next") {
            "post_attention_norm.weight"
        } else {
            "ffn_norm.weight"
        };
        add(b(ffn_norm), f32v, dims(e, 1), Fill::Ones)?;
        let lead = matches!(arch, "glm4moe" | "deepseek2" | "glm-dsa");
        let dense = shape.experts == 0 || (lead && l < args.dense_lead);
        if dense {
            let f = if lead { shape.dense_ffn } else { f };
            add(b("ffn_gate.weight"), ty, dims(e, f), Fill::fan_in(e))?;
            add(b("ffn_up.weight"), ty, dims(e, f), Fill::fan_in(e))?;
            add(b("ffn_down.weight"), ty, dims(f, e), Fill::fan_in(f))?;
        } else {
            let x = shape.experts;
            add(b("ffn_gate_inp.weight"), f32v, dims(e, x), Fill::fan_in(e))?;
            if arch == "gpt-oss" {
                add(b("ffn_gate_inp.bias"), f32v, dims(x, 1), Fill::Uniform(0.5))?;
            }
            match &shape.dsv4 {
                Some(d) if l < d.hash_layers => {
                    // Hash routing: each token's experts, distinct, by token id.
                    add(
                        b("ffn_gate_tid2eid.weight"),
                        GgmlType::I32,
                        dims(args.experts_used, vocab),
                        Fill::ExpertIds(x),
                    )?;
                }
                Some(_) => add(b("exp_probs_b.bias"), f32v, dims(x, 1), Fill::Uniform(0.5))?,
                None if matches!(arch, "glm4moe" | "minimax-m2" | "deepseek2" | "glm-dsa") => {
                    add(b("exp_probs_b.bias"), f32v, dims(x, 1), Fill::Uniform(0.5))?;
                }
                None => {}
            }
            let xt = expert_ty;
            add(
                b("ffn_gate_exps.weight"),
                xt,
                vec![e, f, x],
                Fill::fan_in(e),
            )?;
            add(b("ffn_up_exps.weight"), xt, vec![e, f, x], Fill::fan_in(e))?;
            add(
                b("ffn_down_exps.weight"),
                xt,
                vec![f, e, x],
                Fill::fan_in(f),
            )?;
            if arch == "gpt-oss" {
                add(b("ffn_gate_exps.bias"), f32v, dims(f, x), small)?;
                add(b("ffn_up_exps.bias"), f32v, dims(f, x), small)?;
                add(b("ffn_down_exps.bias"), f32v, dims(e, x), small)?;
            }
            let shared = match arch {
                "qwen2moe" | "qwen35moe" | "qwen3next" => shape.shared_ffn,
                "glm4moe" | "deepseek2" | "glm-dsa" | "deepseek4" => f * args.experts_shared,
                _ => 0,
            };
            if shared > 0 {
                if matches!(arch, "qwen2moe" | "qwen35moe" | "qwen3next") {
                    add(
                        b("ffn_gate_inp_shexp.weight"),
                        f32v,
                        dims(e, 1),
                        Fill::fan_in(e),
                    )?;
                }
                add(
                    b("ffn_gate_shexp.weight"),
                    ty,
                    dims(e, shared),
                    Fill::fan_in(e),
                )?;
                add(
                    b("ffn_up_shexp.weight"),
                    ty,
                    dims(e, shared),
                    Fill::fan_in(e),
                )?;
                add(
                    b("ffn_down_shexp.weight"),
                    ty,
                    dims(shared, e),
                    Fill::fan_in(shared),
                )?;
            }
        }
        if l >= args.layers {
            // An MTP layer's own tensors (llama.cpp's nextn.*), beside its block's.
            add(
                b("nextn.eh_proj.weight"),
                ty,
                dims(2 * e, e),
                Fill::fan_in(2 * e),
            )?;
            // Norms near one but not one, so a judge sees each applied.
            add(b("nextn.enorm.weight"), f32v, dims(e, 1), near_one)?;
            add(b("nextn.hnorm.weight"), f32v, dims(e, 1), near_one)?;
            add(
                b("nextn.shared_head_norm.weight"),
                f32v,
                dims(e, 1),
                near_one,
            )?;
        }
    }
    if shape.dsv4.is_some() {
        // The head's hyper-connection: the streams' weights for the final state.
        add(
            "output_hc_fn.weight".into(),
            GgmlType::F32,
            dims(HC * e, HC),
            Fill::fan_in(HC * e),
        )?;
        add(
            "output_hc_base.weight".into(),
            GgmlType::F32,
            dims(HC, 1),
            Fill::Uniform(0.5),
        )?;
        add(
            "output_hc_scale.weight".into(),
            GgmlType::F32,
            dims(1, 1),
            Fill::Uniform(0.5),
        )?;
    }
    add(
        "output_norm.weight".into(),
        GgmlType::F32,
        dims(e, 1),
        Fill::Ones,
    )?;
    add(
        "output.weight".into(),
        embd_ty,
        dims(e, vocab),
        Fill::fan_in(e),
    )?;

    let written = match args.split_max_size {
        None => w
            .write_file(&args.output)
            .map(|n| vec![(args.output.clone(), n)]),
        Some(max) => w.write_split(split_prefix(&args.output), max),
    };
    bar.finish_and_clear();
    let written = written?;
    let bytes = written.iter().map(|w| w.1).sum();
    let shards = match written.len() {
        1 => String::new(),
        n => format!(" in {n} shards"),
    };
    crate::note!(
        "wrote {}{shards} ({}, {} layers, {} parameters)",
        written[0].0.display(),
        human_bytes(bytes),
        args.layers,
        parameters
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// The prefix of a split's shard names: the output path without its `.gguf`.
fn split_prefix(output: &std::path::Path) -> PathBuf {
    match output.to_str().and_then(|s| s.strip_suffix(".gguf")) {
        Some(prefix) => PathBuf::from(prefix),
        None => output.to_path_buf(),
    }
}

/// GGUF dimensions of a `rows x cols` matrix (a vector when `rows` is 1).
fn dims(cols: u64, rows: u64) -> Vec<u64> {
    if rows == 1 {
        vec![cols]
    } else {
        vec![cols, rows]
    }
}

/// The model's widths, checked for consistency.
struct Shape {
    embd: u64,
    ffn: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    rope_dim: u64,
    experts: u64,
    shared_ffn: u64,
    dense_ffn: u64,
    /// deepseek2's latent attention.
    mla: Option<Mla>,
    /// Expert groups and groups used.
    groups: Option<(u32, u32)>,
    /// deepseek4's compressed attention, hyper-connections and hash routing.
    dsv4: Option<Dsv4>,
}

/// DeepSeek V4's sizes beyond the common ones.
struct Dsv4 {
    /// Per block (MTP layers included, theirs 0): 0, 4 or 128.
    ratios: Vec<u32>,
    /// Leading blocks routed by `ffn_gate_tid2eid`.
    hash_layers: u32,
    q_lora: u64,
    o_groups: u64,
    o_lora: u64,
    indexer_heads: u64,
    indexer_dim: u64,
}

/// llama.cpp's hyper-connection streams (`hyper_connection.count`): its graph takes 4 only.
const HC: u64 = 4;

impl Dsv4 {
    fn new(a: &Args, head_dim: u64, rope_dim: u64) -> Result<Dsv4, CmdError> {
        if a.kv_heads != 1 || a.q_lora_rank == 0 || a.legacy_kv_b || a.indexer_types.is_some() {
            return Err(
                "deepseek4 needs --kv-heads 1 and --q-lora-rank (no --legacy-kv-b, --indexer-types)"
                    .into(),
            );
        }
        if a.experts_shared == 0 {
            return Err("deepseek4 needs --experts-shared of at least 1".into());
        }
        let o_lora = a.o_lora_rank.unwrap_or(head_dim);
        if a.o_groups == 0 || !a.heads.is_multiple_of(a.o_groups) || o_lora == 0 {
            return Err(format!(
                "deepseek4: --o-groups {} must divide --heads {}, and --o-lora-rank be positive",
                a.o_groups, a.heads
            )
            .into());
        }
        let mut ratios = a
            .compress_ratios
            .as_deref()
            .unwrap_or("")
            .split(',')
            .filter(|v| !v.trim().is_empty())
            .map(|v| match v.trim() {
                "0" => Ok(0),
                "4" => Ok(4),
                "128" => Ok(128),
                other => Err(format!("--compress-ratios: {other:?} is not 0, 4 or 128")),
            })
            .collect::<Result<Vec<u32>, String>>()?;
        // llama.cpp (0.3.36) divides by zero building the Hadamard rotation of a compressed
        // cache no block uses: it runs only files with both kinds.
        if ratios.len() != a.layers as usize || !ratios.contains(&4) || !ratios.contains(&128) {
            return Err(format!(
                "deepseek4 needs --compress-ratios: one 0, 4 or 128 per layer ({}), at least one \
                 4 and one 128 (llama.cpp runs no file without both)",
                a.layers
            )
            .into());
        }
        // llama.cpp runs an MTP layer over the raw window only: it has no compressor.
        ratios.extend(std::iter::repeat_n(0, a.nextn as usize));
        if a.indexer_heads == 0
            || a.indexer_top_k == 0
            || !a.indexer_dim.is_power_of_two()
            || a.indexer_dim < 64
            || a.indexer_dim < rope_dim
        {
            return Err(format!(
                "deepseek4's ratio-4 blocks need --indexer-heads, --indexer-top-k and an \
                 --indexer-dim that is a power of two of at least 64 and --rope-dim {rope_dim}"
            )
            .into());
        }
        if a.hash_layers > a.layers {
            return Err("--hash-layers must not exceed --layers".into());
        }
        let positive = |v: f32| v.is_finite() && v > 0.0;
        if a.hc_sinkhorn_iters == 0
            || !positive(a.hc_eps)
            || !positive(a.compress_rope_base)
            || !positive(a.swiglu_clamp)
        {
            return Err(
                "deepseek4: --hc-sinkhorn-iters, --hc-eps, --compress-rope-base and \
                 --swiglu-clamp must be positive"
                    .into(),
            );
        }
        Ok(Dsv4 {
            ratios,
            hash_layers: a.hash_layers,
            q_lora: a.q_lora_rank,
            o_groups: a.o_groups,
            o_lora,
            indexer_heads: a.indexer_heads,
            indexer_dim: a.indexer_dim,
        })
    }
}

/// Multi-head latent attention's sizes.
struct Mla {
    q_lora: u64,
    kv_lora: u64,
    v_head: u64,
    /// glm-dsa's lightning indexer.
    indexer: Option<Indexer>,
}

/// The lightning indexer's sizes (glm-dsa).
struct Indexer {
    heads: u64,
    dim: u64,
    top_k: u64,
    /// Per block, whether its indexer runs (`--indexer-types`).
    full: Option<Vec<bool>>,
}

impl Shape {
    fn new(a: &Args) -> Result<Shape, CmdError> {
        if a.layers == 0 || a.embd == 0 || a.ffn == 0 || a.heads == 0 || a.kv_heads == 0 {
            return Err("--layers, --embd, --ffn, --heads and --kv-heads must be positive".into());
        }
        if (a.head_dim.is_none() && !a.embd.is_multiple_of(a.heads))
            || !a.heads.is_multiple_of(a.kv_heads)
        {
            return Err(format!(
                "--embd {} must be a multiple of --heads {} (or give --head-dim), and --heads \
                 of --kv-heads {}",
                a.embd, a.heads, a.kv_heads
            )
            .into());
        }
        let head_dim = a.head_dim.unwrap_or(a.embd / a.heads);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err("the head dimension must be even for RoPE".into());
        }
        let arch = a.arch.as_str();
        let moe_only = matches!(
            arch,
            "qwen3moe"
                | "qwen2moe"
                | "olmoe"
                | "glm4moe"
                | "minimax-m2"
                | "gpt-oss"
                | "deepseek2"
                | "glm-dsa"
                | "qwen35moe"
                | "qwen3next"
                | "deepseek4"
        );
        if a.experts > 0 && !moe_only && arch != "llama" {
            return Err(format!("--experts: {} has no expert layout", a.arch).into());
        }
        if moe_only && a.experts == 0 {
            return Err(format!("{arch} needs --experts and --experts-used").into());
        }
        let rope_dim = a.rope_dim.unwrap_or(
            if matches!(arch, "glm4moe" | "minimax-m2" | "deepseek2" | "glm-dsa") {
                head_dim / 2
            } else if matches!(arch, "qwen35moe" | "qwen3next" | "deepseek4") {
                (head_dim / 4).max(2) & !1
            } else {
                head_dim
            },
        );
        if rope_dim == 0 || rope_dim > head_dim || !rope_dim.is_multiple_of(2) {
            return Err(
                format!("--rope-dim {rope_dim} must be even and at most {head_dim}").into(),
            );
        }
        if arch == "olmoe" && a.kv_heads != a.heads {
            // llama.cpp sizes olmoe's K norm by n_embd: it has no grouped-query layout.
            return Err("olmoe: --kv-heads must equal --heads".into());
        }
        if a.nextn > 0
            && !matches!(
                arch,
                "glm4moe" | "deepseek2" | "glm-dsa" | "qwen35moe" | "deepseek4"
            )
        {
            return Err(concat!(
                "--nextn: only glm4moe, deepseek2, glm-dsa, qwen35moe and deepseek4 files carry ",
                "MTP layers here"
            )
            .into());
        }
        if matches!(arch, "glm4moe" | "deepseek2" | "glm-dsa") && a.dense_lead > a.layers {
            return Err("--dense-lead must not exceed --layers".into());
        }
        if matches!(arch, "qwen35moe" | "qwen3next")
            && (a.full_attention_interval == 0
                || a.ssm_heads == 0
                || a.ssm_groups == 0
                || !a.ssm_heads.is_multiple_of(a.ssm_groups)
                || a.ssm_state == 0
                || a.ssm_conv < 2)
        {
            return Err(concat!(
                "qwen35moe, qwen3next: --full-attention-interval, --ssm-heads, --ssm-groups ",
                "(dividing --ssm-heads) and --ssm-state must be positive, --ssm-conv at least 2"
            )
            .into());
        }
        if a.experts > 0 && (a.experts_used == 0 || a.experts_used > a.experts) {
            return Err("--experts-used must lie in 1..=--experts".into());
        }
        let mla = if matches!(arch, "deepseek2" | "glm-dsa") {
            if a.kv_lora_rank == 0 || a.kv_heads != 1 || rope_dim == head_dim {
                return Err(format!(
                    "{arch} needs --kv-lora-rank, --kv-heads 1 and a --rope-dim below \
                     --head-dim"
                )
                .into());
            }
            let indexer = if arch == "glm-dsa" {
                let dim = a.indexer_dim;
                if a.q_lora_rank == 0
                    || a.legacy_kv_b
                    || a.indexer_heads == 0
                    || a.indexer_top_k == 0
                    || !dim.is_power_of_two()
                    || dim < 64
                    || dim <= rope_dim
                {
                    return Err("glm-dsa needs --q-lora-rank, the split attn_k_b/attn_v_b, \
                         --indexer-heads, --indexer-top-k, and an --indexer-dim that is a \
                         power of two of at least 64 above --rope-dim"
                        .into());
                }
                let full = match &a.indexer_types {
                    None => None,
                    Some(list) => {
                        let full = list
                            .split(',')
                            .map(|v| match v.trim() {
                                "1" => Ok(true),
                                "0" => Ok(false),
                                other => Err(format!("--indexer-types: {other:?} is not 0 or 1")),
                            })
                            .collect::<Result<Vec<bool>, String>>()?;
                        if full.len() != a.layers as usize || full.first() != Some(&true) {
                            return Err(format!(
                                "--indexer-types needs one 0 or 1 per layer ({}), the first 1",
                                a.layers
                            )
                            .into());
                        }
                        Some(full)
                    }
                };
                Some(Indexer {
                    heads: a.indexer_heads,
                    dim,
                    top_k: a.indexer_top_k,
                    full,
                })
            } else {
                None
            };
            Some(Mla {
                q_lora: a.q_lora_rank,
                kv_lora: a.kv_lora_rank,
                v_head: a.v_head_dim.unwrap_or(head_dim - rope_dim),
                indexer,
            })
        } else {
            if (a.q_lora_rank > 0 && arch != "deepseek4")
                || a.kv_lora_rank > 0
                || a.v_head_dim.is_some()
            {
                return Err(concat!(
                    "--q-lora-rank: deepseek2, glm-dsa, deepseek4 only; --kv-lora-rank, ",
                    "--v-head-dim: deepseek2, glm-dsa only"
                )
                .into());
            }
            None
        };
        let dsv4 = if arch == "deepseek4" {
            Some(Dsv4::new(a, head_dim, rope_dim)?)
        } else {
            if a.compress_ratios.is_some() || a.hash_layers > 0 || a.o_lora_rank.is_some() {
                return Err(
                    "--compress-ratios, --hash-layers, --o-lora-rank: deepseek4 only".into(),
                );
            }
            None
        };
        let groups = match &a.expert_groups {
            None => None,
            Some(g) => {
                let parsed = g
                    .split_once(':')
                    .and_then(|(g, u)| Some((g.parse::<u32>().ok()?, u.parse::<u32>().ok()?)));
                match parsed {
                    Some((g, u)) if arch == "deepseek2" && u >= 1 && u <= g => Some((g, u)),
                    _ => {
                        return Err(format!(
                            "--expert-groups {g}: expected G:U with 1 <= U <= G (deepseek2)"
                        )
                        .into())
                    }
                }
            }
        };
        Ok(Shape {
            embd: a.embd,
            ffn: a.ffn,
            heads: a.heads,
            kv_heads: a.kv_heads,
            head_dim,
            rope_dim,
            experts: a.experts,
            shared_ffn: a.shared_ffn.unwrap_or(a.ffn),
            dense_ffn: a.dense_ffn.unwrap_or(a.ffn),
            mla,
            groups,
            dsv4,
        })
    }

    fn q_dim(&self) -> u64 {
        self.head_dim * self.heads
    }

    fn kv_dim(&self) -> u64 {
        self.head_dim * self.kv_heads
    }
}

/// `--router-skew`: the shift of every embedding value, a direction every hidden state keeps
/// (its RMS-normed value about `SHIFT / sqrt(SHIFT^2 + 1/3)` per element at the first layer).
const SKEW_EMBD_SHIFT: f32 = 0.5;

/// `--router-skew S`: the shift of each router row (one per expert) of a router with `cols`
/// inputs: the expert ranked `r` by an order drawn from `seed` gets `-S * ln(1 + r)` of logit
/// from the shared direction (the normed shift, summed over `cols` inputs).
fn router_skew(s: f32, cols: u64, experts: u64, seed: u64) -> Vec<f32> {
    use rand::seq::SliceRandom;
    let mut order: Vec<usize> = (0..experts as usize).collect();
    order.shuffle(&mut StdRng::seed_from_u64(seed ^ 0x5ce3_d15c_0de5_0001));
    let normed = SKEW_EMBD_SHIFT / (SKEW_EMBD_SHIFT * SKEW_EMBD_SHIFT + 1.0 / 3.0).sqrt();
    let mut shift = vec![0.0; experts as usize];
    for (rank, &expert) in order.iter().enumerate() {
        shift[expert] = -s * (1.0 + rank as f32).ln() / (normed * cols as f32);
    }
    shift
}

/// How a tensor's values are drawn.
#[derive(Clone, Copy)]
enum Fill {
    Ones,
    /// Uniform in `±a`.
    Uniform(f32),
    /// Uniform in `c ± a`.
    Around(f32, f32),
    /// Distinct expert ids below the count, drawn per row (an I32 routing table).
    ExpertIds(u64),
}

impl Fill {
    /// Unit output variance for unit input variance: uniform in ±sqrt(3 / fan_in).
    fn fan_in(n: u64) -> Fill {
        Fill::Uniform((3.0 / n as f32).sqrt())
    }
}

/// A tensor's bytes, generated and quantized one row at a time as the writer reads them.
struct RowSource {
    ty: GgmlType,
    fill: Fill,
    rng: StdRng,
    values: Vec<f32>,
    row: Vec<u8>,
    /// Bytes of `row` already handed out.
    served: usize,
    rows_left: u64,
    rows: u64,
    /// Added to every value of row `i` (`--router-skew`).
    row_shift: Option<Vec<f32>>,
    /// The write's progress bar (hidden when stderr is not a terminal).
    progress: indicatif::ProgressBar,
    /// `--quantized-rows`: rows quantized for real (0: all); the others are made of their
    /// blocks, kept in `pool`.
    quantized_rows: u64,
    pool: Vec<u8>,
}

impl RowSource {
    fn new(
        ty: GgmlType,
        cols: usize,
        rows: u64,
        fill: Fill,
        seed: u64,
        progress: indicatif::ProgressBar,
    ) -> Result<RowSource, CmdError> {
        let row_bytes = ty.row_size(cols).ok_or_else(|| {
            format!(
                "rows of {cols} are not whole {ty} blocks of {}",
                ty.block_size()
            )
        })?;
        Ok(RowSource {
            ty,
            fill,
            rng: StdRng::seed_from_u64(seed),
            values: vec![0.0; cols],
            row: vec![0; row_bytes],
            served: row_bytes,
            rows_left: rows,
            rows,
            row_shift: None,
            progress,
            quantized_rows: 0,
            pool: Vec::new(),
        })
    }

    fn next_row(&mut self) -> std::io::Result<()> {
        let index = self.rows - self.rows_left;
        let pooled = self.quantized_rows > 0
            && !matches!(self.ty, GgmlType::F32 | GgmlType::I32)
            && !matches!(self.fill, Fill::ExpertIds(_))
            && self.row_shift.is_none();
        if pooled && index >= self.quantized_rows {
            let block = self.ty.type_size();
            let blocks = self.pool.len() / block;
            for dst in self.row.chunks_exact_mut(block) {
                let b = self.rng.gen_range(0..blocks);
                dst.copy_from_slice(&self.pool[b * block..(b + 1) * block]);
            }
            self.served = 0;
            self.rows_left -= 1;
            return Ok(());
        }
        match self.fill {
            Fill::Ones => self.values.fill(1.0),
            Fill::Uniform(a) => {
                for v in &mut self.values {
                    *v = self.rng.gen_range(-a..=a);
                }
            }
            Fill::Around(c, a) => {
                for v in &mut self.values {
                    *v = c + self.rng.gen_range(-a..=a);
                }
            }
            Fill::ExpertIds(n) => {
                use rand::seq::SliceRandom;
                let mut ids: Vec<u32> = (0..n as u32).collect();
                let (chosen, _) = ids.partial_shuffle(&mut self.rng, self.values.len());
                for (v, &id) in self.values.iter_mut().zip(chosen.iter()) {
                    *v = id as f32;
                }
            }
        }
        if let Some(shift) = &self.row_shift {
            let c = shift[(self.rows - self.rows_left) as usize];
            self.values.iter_mut().for_each(|v| *v += c);
        }
        if self.ty == GgmlType::F32 {
            for (dst, v) in self.row.chunks_exact_mut(4).zip(&self.values) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
        } else if self.ty == GgmlType::I32 {
            for (dst, v) in self.row.chunks_exact_mut(4).zip(&self.values) {
                dst.copy_from_slice(&(*v as i32).to_le_bytes());
            }
        } else {
            ramforge_quant::quantize_row(self.ty, &self.values, &mut self.row)
                .map_err(std::io::Error::other)?;
            if pooled {
                self.pool.extend_from_slice(&self.row);
            }
        }
        self.served = 0;
        self.rows_left -= 1;
        Ok(())
    }
}

impl Read for RowSource {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.served == self.row.len() {
            if self.rows_left == 0 {
                return Ok(0);
            }
            self.next_row()?;
        }
        let n = buf.len().min(self.row.len() - self.served);
        buf[..n].copy_from_slice(&self.row[self.served..self.served + n]);
        self.served += n;
        self.progress.inc(n as u64);
        Ok(n)
    }
}

/// A stable per-tensor seed offset, so each tensor's values depend only on seed and name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
