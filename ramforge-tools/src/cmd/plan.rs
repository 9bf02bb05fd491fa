//! `ramforge-tools plan MODEL --ram SIZE`: how the engine would lay the model out under a
//! budget (the engine's own arithmetic, `ramforge_engine::plan`): resident and streamed weights,
//! per-layer bytes, KV cache, the minimum workable budget and whether the budget fits.

use crate::args::{KvCache, PromptBatch, Speculation};
use crate::error::CmdResult;
use ramforge_engine::budget::human_bytes;
use ramforge_engine::plan::ExpertPlan;
use ramforge_engine::{
    split_budget, vocabulary_difference, DraftSplit, EngineError, EngineOptions, MemoryPlan, Model,
    BUDGETED_MIN_BATCH,
};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Show how a model would be laid out under a RAM budget.
///
/// Example: ramforge-tools plan model.gguf --ram 40M --ctx 512
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model.
    pub model: PathBuf,
    /// Memory budget, e.g. 40M, 1.5G (powers of 1024).
    #[arg(long, value_parser = crate::args::parse_ram)]
    pub ram: u64,
    /// Context positions to reserve in the KV cache (default: min(trained, 2048)).
    #[arg(long)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub prefill: PromptBatch,
    #[command(flatten)]
    pub kv: KvCache,
    /// Sequences decoded together, as `serve --parallel N` books them: a whole context of KV
    /// cache and a row of logits for each.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
    /// `--lookup` books a verify pass (its logits, the rollback copy); `--draft MODEL` also
    /// splits the budget, the draft model first, and shows the split; `--mtp` also holds the
    /// file's MTP layer.
    #[command(flatten)]
    pub speculation: Speculation,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(mut args: Args) -> CmdResult {
    let mut model = Model::open(&args.model)?;
    let spec = &args.speculation;
    if spec.mtp {
        model.enable_mtp()?;
    }
    let mut options = EngineOptions {
        ram: Some(args.ram),
        ctx: args.ctx,
        batch: args.prefill.batch.max(1),
        kv_type: args.kv.kv_type,
        sequences: args.parallel.into(),
        draft: if spec.lookup || spec.mtp || spec.draft.is_some() {
            usize::from(spec.draft_max.max(1))
        } else {
            0
        },
        ..EngineOptions::default()
    };
    // With a draft model the target is planned in what the draft leaves of the budget.
    let split = match &spec.draft {
        Some(path) => {
            let draft = Model::open(path)?;
            if let Some(why) = vocabulary_difference(&model.tokenizer, &draft.tokenizer) {
                return Err(format!("--draft {}: {why}", path.display()).into());
            }
            let split = split_budget(&model, &draft, &options, options.ram)?;
            options.ram = split.target;
            args.ram = split.target.unwrap_or(args.ram);
            Some(split)
        }
        None => None,
    };
    let plan = match model.plan(&options) {
        Ok(p) => Some(p),
        Err(EngineError::BudgetTooSmall { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    // The unlimited layout gives the sizes and the minimum even when the budget does not fit:
    // at the batch the budget settles on, else at the least a budget cuts it to.
    let sizes = model.plan(&EngineOptions {
        ram: None,
        batch: plan
            .as_ref()
            .map_or(options.batch.min(BUDGETED_MIN_BATCH), |p| p.request.batch),
        ..options.clone()
    })?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        let mut j = json(&model, &args, &sizes, plan.as_ref());
        j["verify_rows"] = sizes.request.verify_rows.into();
        j["rollback_bytes"] = sizes.rollback_bytes.into();
        j["draft"] = split.map_or(serde_json::Value::Null, |s| draft_json(&args, &s));
        writeln!(out, "{j}")?;
    } else {
        if let Some(s) = &split {
            write!(out, "{}", draft_text(&args, s))?;
        }
        write!(out, "{}", text(&model, &args, &sizes, plan.as_ref()))?;
    }
    out.flush()?;
    match plan {
        Some(_) => Ok(ExitCode::SUCCESS),
        None => Err(EngineError::BudgetTooSmall {
            budget: args.ram,
            minimum: sizes.minimum,
            ctx: sizes.request.ctx,
        }
        .into()),
    }
}

/// The budget split with a draft model, as JSON.
fn draft_json(args: &Args, s: &DraftSplit) -> serde_json::Value {
    let path = args
        .speculation
        .draft
        .as_ref()
        .map(|p| p.display().to_string());
    serde_json::json!({
        "model": path,
        "budget_bytes": s.draft,
        "resident": s.draft_resident,
        "whole_bytes": s.draft_whole,
        "target_budget_bytes": s.target,
    })
}

/// The budget split with a draft model: the line above the target's plan.
fn draft_text(args: &Args, s: &DraftSplit) -> String {
    let h = |b: Option<u64>| b.map_or("unlimited".into(), human_bytes);
    let path = args
        .speculation
        .draft
        .as_ref()
        .map(|p| p.display().to_string());
    format!(
        "draft {}: {} of the budget ({}); the target gets the rest, {}\n",
        path.unwrap_or_default(),
        h(s.draft),
        if s.draft_resident {
            "resident whole".to_string()
        } else {
            format!(
                "streamed: resident whole it needs {}, and the target would not fit or stream more",
                human_bytes(s.draft_whole)
            )
        },
        h(s.target),
    )
}

fn json(
    model: &Model,
    args: &Args,
    sizes: &MemoryPlan,
    plan: Option<&MemoryPlan>,
) -> serde_json::Value {
    let layers: Vec<serde_json::Value> = sizes
        .layer_bytes
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            serde_json::json!({
                "layer": i,
                "bytes": b,
                "resident": plan.map(|p| p.pinned[i]),
            })
        })
        .collect();
    serde_json::json!({
        "model": args.model.display().to_string(),
        "architecture": model.config.arch.name,
        "budget_bytes": args.ram,
        "fits": plan.is_some(),
        "minimum_budget_bytes": sizes.minimum,
        "ctx": sizes.request.ctx,
        "batch": sizes.request.batch,
        "parallel": sizes.request.sequences.max(1),
        "kv_type": sizes.request.kv_type.name(),
        "kv_cache_bytes": sizes.kv_bytes,
        "latent_cache": model.config.mla.is_some(),
        "full_kv_cache_bytes": full_kv_bytes(model, sizes),
        "scratch_bytes": sizes.scratch_bytes,
        "logits_bytes": sizes.logits_bytes,
        "vector_bytes": sizes.vector_bytes,
        "embedding_row_bytes": sizes.embd_row_bytes,
        "output_bytes": sizes.output_bytes,
        // What a decoded token reads when it uses every weight (every expert counted): the
        // figure the benchmarks' bandwidth roofs divide by.
        "weight_bytes_per_token": sizes.layer_bytes.iter().sum::<u64>()
            + sizes.output_bytes
            + sizes.embd_row_bytes,
        "output_tied": model.tensors.tied_output,
        "output_resident": plan.map(|p| p.output_resident),
        "output_chunk_bytes": plan.map(|p| p.output_chunk_bytes),
        "slot_bytes": plan.map(|p| p.slot_bytes),
        "stream_buffers": plan.map(|p| p.stream_buffers),
        "pinned_layer_bytes": plan.map(|p| p.pinned_bytes()),
        "streamed_layers": plan.map(|p| p.streamed_layers()),
        "streamed_bytes_per_token": plan.map(|p| p.streamed_bytes_per_token()),
        "planned_bytes": plan.map(|p| p.total_bytes()),
        "held_prompt_rows": plan.map(|p| p.held_rows),
        "held_prompt_bytes": plan.map(|p| p.held_bytes),
        "held_prompt_groups_experts": plan.map(|p| p.held_groups_experts),
        "experts": experts(model).map(|(count, used, bytes)| serde_json::json!({
            "count": count,
            "used": used,
            "bytes_per_expert": bytes,
            "dense_leading_layers": model.config.n_layer_dense_lead,
            "shared_expert_width": model.config.n_ff_shexp,
            "mtp_layers": model.config.n_layer_nextn,
        })),
        "expert_cache": plan.and_then(|p| p.experts.as_ref()).map(|x| serde_json::json!({
            "slots_per_layer": x.per_layer,
            "cached_fraction": x.cached_fraction(),
            "buffer_bytes": x.buffer_charge,
            "charged_bytes": x.charged_bytes(),
        })),
        "sliding_window": model.config.sliding_window,
        "layers": layers,
    })
}

/// `(experts per layer, used per token, bytes of one expert)` of an MoE model (its first
/// layer with experts: leading layers may be dense).
fn experts(model: &Model) -> Option<(usize, usize, u64)> {
    let cfg = &model.config;
    let bytes = model
        .tensors
        .layers
        .iter()
        .find_map(|l| l.expert_bytes(cfg.n_expert))?;
    Some((cfg.n_expert, cfg.n_expert_used, bytes))
}

/// How many layers have experts, and what else an MoE layer runs: the dense leading layers,
/// the shared expert, the MTP layers bound but not run.
fn moe_layout(model: &Model) -> Option<String> {
    let cfg = &model.config;
    if cfg.n_expert == 0 {
        return None;
    }
    let moe = (0..cfg.n_layer)
        .filter(|&l| cfg.layer_kind(l).ffn == ramforge_engine::model::FfnKind::Moe)
        .count();
    let mut s = format!("{moe} of {} layers route to experts", cfg.n_layer);
    if cfg.n_layer_dense_lead > 0 {
        s += &format!(" ({} leading dense)", cfg.n_layer_dense_lead);
    }
    if cfg.n_ff_shexp > 0 {
        s += &format!(
            "; a shared expert {} wide runs beside them (planned with its layer)",
            cfg.n_ff_shexp
        );
    }
    if cfg.mtp {
        s += "; its first MTP layer drafts (--mtp): pinned, charged, with its own KV rows";
    } else if cfg.n_layer_nextn > 0 {
        s += &format!(
            "; {} MTP layer(s), not run, not charged (--mtp drafts with the first)",
            cfg.n_layer_nextn
        );
    }
    Some(s)
}

fn text(model: &Model, args: &Args, sizes: &MemoryPlan, plan: Option<&MemoryPlan>) -> String {
    let h = human_bytes;
    let mut s = String::new();
    let cfg = &model.config;
    s += &format!(
        "{}: {} model, {} layers, width {}, vocabulary {}\n",
        args.model.display(),
        cfg.arch.name,
        cfg.n_layer,
        cfg.n_embd,
        model.tensors.n_vocab
    );
    if let Some((count, used, bytes)) = experts(model) {
        s += &format!(
            "experts: {count} per layer, {used} used per token, {} each\n",
            h(bytes)
        );
    }
    if let Some(layout) = moe_layout(model) {
        s += &format!("  {layout}\n");
    }
    if let Some(w) = cfg.sliding_window {
        s += &format!("sliding-window attention: {w} positions on the local layers (their KV cache holds only the window)\n");
    }
    if let (Some(m), Some(full)) = (cfg.mla, full_kv_bytes(model, sizes)) {
        s += &format!(
            "multi-head latent attention: the cache holds a latent of {} and a RoPE key of {} per position and layer (full keys and values of {} heads would take {})\n",
            m.kv_lora_rank,
            cfg.rope_dim,
            cfg.n_head,
            h(full)
        );
    }
    if let Some(x) = cfg.indexer {
        s += &format!(
            "DeepSeek sparse attention: the cache row also holds the lightning indexer's key of {} per position and layer; each query attends to the {} positions its {} indexer heads score highest\n",
            x.head_dim, x.top_k, x.n_head
        );
    }
    let parallel = match sizes.request.sequences {
        0 | 1 => String::new(),
        n => format!(", {n} sequences in parallel"),
    };
    s += &format!(
        "working set (context {}, batch {}{parallel}): {} {} ({}), scratch {}, logits {}, norms/biases {}\n",
        sizes.request.ctx,
        sizes.request.batch,
        if cfg.mla.is_some() {
            "latent cache"
        } else {
            "KV cache"
        },
        h(sizes.kv_bytes),
        sizes.request.kv_type.name(),
        h(sizes.scratch_bytes),
        h(sizes.logits_bytes),
        h(sizes.vector_bytes)
    );
    let max_layer = sizes.layer_bytes.iter().copied().max().unwrap_or(0);
    s += &format!(
        "weights: {} layers of up to {} ({} in all), output projection {}{}\n",
        sizes.layer_bytes.len(),
        h(max_layer),
        h(sizes.layer_bytes.iter().sum()),
        h(sizes.output_bytes),
        if model.tensors.tied_output {
            " (tied to the token embedding)"
        } else {
            ""
        }
    );
    s += &format!(
        "minimum budget: {} ({} bytes)\n",
        h(sizes.minimum),
        sizes.minimum
    );
    match plan {
        None => {
            s += &format!("budget {}: does NOT fit\n", h(args.ram));
        }
        Some(p) => {
            s += &format!(
                "budget {}: fits, {} planned\n  output projection: {}\n  layers resident: {} of {} ({}), streamed through a {} ring of {} buffers: {}\n  read from storage per token: {}\n",
                h(args.ram),
                h(p.total_bytes()),
                if p.output_resident {
                    "resident".to_string()
                } else {
                    format!("streamed in chunks of {} ({})", p.output_chunk_rows, h(p.output_chunk_bytes))
                },
                p.pinned.iter().filter(|&&x| x).count(),
                p.pinned.len(),
                h(p.pinned_bytes()),
                h(p.slot_bytes),
                p.stream_buffers,
                p.streamed_layers(),
                h(p.streamed_bytes_per_token())
            );
            if let Some(x) = &p.experts {
                s += &format!(
                    "  experts streamed one by one (layers above are without them): cache of {} per layer ({:.0}% of the experts, {}) + {} staging buffers of {}\n",
                    x.per_layer,
                    100.0 * x.cached_fraction(),
                    h(x.charged_bytes() - x.staging_bytes()),
                    ExpertPlan::STAGING_BUFFERS,
                    h(x.buffer_charge)
                );
            }
            if p.held_rows > 0 {
                s += &format!(
                    "  prompt: {} rows held ({}), each streamed {} read once per {} prompt tokens\n",
                    p.held_rows,
                    h(p.held_bytes),
                    if p.held_groups_experts {
                        "layer and expert"
                    } else {
                        "layer"
                    },
                    p.held_rows
                );
            }
            s += "  per layer:";
            for (i, (&b, &pin)) in p.layer_bytes.iter().zip(&p.pinned).enumerate() {
                if i % 6 == 0 {
                    s += "\n   ";
                }
                s += &format!(" {i}:{}{}", h(b), if pin { "*" } else { "" });
            }
            s += "\n  (* = resident)\n";
        }
    }
    s
}

/// What full keys and values of every head would take for a multi-head latent attention
/// model's context (the cache it would need without the latent), `None` for another model.
fn full_kv_bytes(model: &Model, sizes: &MemoryPlan) -> Option<u64> {
    let cfg = &model.config;
    let m = cfg.mla?;
    let per_position = (cfg.n_head * (m.qk_nope + cfg.rope_dim + m.v_head)) as u64;
    Some(
        sizes.request.sequences.max(1) as u64
            * cfg.n_layer as u64
            * sizes.request.ctx as u64
            * per_position
            * sizes.request.kv_type.bytes_per_element(),
    )
}
