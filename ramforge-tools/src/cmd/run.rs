//! `ramforge-tools run`: generate text from a model (the default model if none is given),
//! streamed to stdout as it is produced, under an optional RAM budget.

use crate::args::{
    read_template, KvCache, ModelChoice, PromptBatch, RamBudget, Sampling, Speculation, Workers,
};
use crate::error::{CmdError, CmdResult};
use crate::expert_history::ExpertHistoryFlag;
use crate::generate::{generate_to_stdout, load_speculative};
use crate::verbosity::{quiet, verbose};
use ramforge_engine::budget::human_bytes;
use ramforge_engine::text::prompt::message;
use ramforge_engine::text::ChatPrompt;
use ramforge_engine::{
    process_memory, Constraint, Engine, EngineOptions, GenerationStats, Grammar, GrammarCompiler,
    Model, StopReason,
};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// Generate text from a model (the default model if none is given).
///
/// Examples:
///   ramforge-tools run --prompt "The capital of France is"
///   ramforge-tools run model.gguf --ram 40M --prompt "Once upon a time" --max-tokens 64 --verbose
///   ramforge-tools run model.gguf --chat --prompt "Write a haiku" --temperature 0.7 --seed 1
///   ramforge-tools run --chat --prompt "A person as JSON" --json-schema person.json
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelChoice,
    /// The prompt text (special tokens such as <|im_start|> are recognised).
    #[arg(short, long)]
    pub prompt: String,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// A system message for --chat.
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// With --chat: use the Jinja chat template in FILE instead of the model's
    /// `tokenizer.chat_template`.
    #[arg(long, value_name = "FILE", requires = "chat")]
    pub template: Option<PathBuf>,
    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub budget: RamBudget,
    /// Context positions to reserve (default: prompt tokens + --max-tokens).
    #[arg(long)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub workers: Workers,
    #[command(flatten)]
    pub sampling: Sampling,
    #[command(flatten)]
    pub kv: KvCache,
    #[command(flatten)]
    pub prefill: PromptBatch,
    #[command(flatten)]
    pub speculation: Speculation,
    /// Print one JSON object (text and statistics) at the end instead of streaming text.
    #[arg(long)]
    pub json: bool,
    /// Hold the output to the JSON schema in FILE (constrained sampling, llguidance).
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    pub json_schema: Option<PathBuf>,
    /// Hold the output to the grammar in FILE: llama.cpp's GBNF, or llguidance's Lark when
    /// the name ends in `.lark`.
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,
    #[command(flatten)]
    pub history: ExpertHistoryFlag,
}

pub fn run(args: Args) -> CmdResult {
    let started = Instant::now();
    let path = args.model.path(quiet() || args.json)?;
    let model = Model::open(&path)?;
    let prompt = prompt_tokens(&model, &args)?;
    let constraint = constraint(&model, &args)?;
    let options = EngineOptions {
        ram: args.budget.ram,
        ctx: Some(args.ctx.unwrap_or(prompt.len() + args.max_tokens)),
        threads: args.workers.threads,
        kv_type: args.kv.kv_type,
        batch: args.prefill.batch.max(1),
        sequences: 1,
        ..EngineOptions::default()
    };
    let mut engine = load_speculative(model, &options, &args.speculation)?;
    args.history.load(&mut engine);
    let load_secs = started.elapsed().as_secs_f64();
    let params = args.sampling.params(args.max_tokens);
    let stats = generate_to_stdout(&mut engine, &prompt, &params, constraint, !args.json, false)?;
    args.history.save(&engine);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mem = process_memory().unwrap_or_default();
    if args.json {
        let report = json_report(&path, &engine, &stats, load_secs, mem);
        writeln!(out, "{report}")?;
    } else {
        writeln!(out)?;
        // Ctrl-C shows what was gathered so far, as the closing stats of an interrupted run.
        let interrupted = stats.stop_reason == StopReason::Cancelled;
        if verbose() || (interrupted && !quiet()) {
            eprint!("{}", text_report(&engine, &stats, load_secs, mem));
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The compiled `--json-schema` or `--grammar`, if one is given; a file that cannot be read or
/// compiled is an error naming it.
fn constraint(model: &Model, args: &Args) -> Result<Option<Constraint>, CmdError> {
    let (path, grammar) = match (&args.json_schema, &args.grammar) {
        (Some(path), _) => {
            let text = read_limited(path)?;
            let schema: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| format!("--json-schema {}: not JSON: {e}", path.display()))?;
            (path, Grammar::JsonSchema(schema))
        }
        (None, Some(path)) => {
            let text = read_limited(path)?;
            let lark = path.extension().is_some_and(|e| e == "lark");
            (
                path,
                if lark {
                    Grammar::Lark(text)
                } else {
                    Grammar::Gbnf(text)
                },
            )
        }
        (None, None) => return Ok(None),
    };
    let compiler = GrammarCompiler::new(Arc::clone(&model.tokenizer)).map_err(|e| {
        format!(
            "{}: constrained output is off for this model: {e}",
            path.display()
        )
    })?;
    let c = compiler
        .compile(&grammar)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(c))
}

/// A grammar or schema file's text, refused past the grammar size limit before it is read.
fn read_limited(path: &std::path::Path) -> Result<String, CmdError> {
    let limit = ramforge_engine::constraint::MAX_GRAMMAR_BYTES as u64;
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if len > limit {
        return Err(format!(
            "{}: {len} bytes, over the grammar limit of {limit} bytes",
            path.display()
        )
        .into());
    }
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// The prompt as token ids: plain text with BOS per the model, or a chat-template rendering.
fn prompt_tokens(model: &Model, args: &Args) -> Result<Vec<u32>, CmdError> {
    let tok = &model.tokenizer;
    if !args.chat {
        return Ok(tok.encode(&args.prompt, true, true));
    }
    let prompt = ChatPrompt::for_model(
        &model.file.header().metadata,
        &model.tokenizer,
        read_template(args.template.as_deref())?,
    )?;
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(message("system", system));
    }
    messages.push(message("user", &args.prompt));
    Ok(prompt.tokens(tok, &messages)?)
}

fn json_report(
    path: &std::path::Path,
    engine: &Engine,
    s: &GenerationStats,
    load_secs: f64,
    mem: ramforge_engine::ProcessMemory,
) -> serde_json::Value {
    let plan = engine.plan();
    let r = &s.residency;
    let d = &s.decode_residency;
    // Two objects: one json! of every key passes serde_json's macro recursion limit.
    let mut report = serde_json::json!({
        "model": path.display().to_string(),
        "text": s.text,
        "tokens": s.tokens,
        "prompt_tokens": s.prompt_tokens,
        "generated_tokens": s.generated_tokens,
        "stop_reason": s.stop_reason,
        "load_secs": load_secs,
        "prompt_secs": s.prompt_secs,
        "prompt_tokens_per_sec": s.prompt_tokens_per_sec(),
        "decode_secs": s.decode_secs,
        "decode_tokens_per_sec": s.decode_tokens_per_sec(),
        "threads": engine.threads(),
        "solo_steps": engine.solo_steps(),
        "ctx": engine.context_size(),
        "budget_bytes": (!engine.budget().is_unlimited()).then(|| engine.budget().limit()),
        "minimum_budget_bytes": plan.minimum,
        "peak_managed_bytes": s.peak_managed_bytes,
        "peak_rss_bytes": mem.peak_rss,
        "rss_bytes": mem.rss,
        "bytes_read": r.bytes_read,
        "bytes_read_per_token": per_token(s),
        "decode_bytes_read": d.bytes_read,
        "decode_evals": d.tokens,
        "load_bytes": r.load_bytes,
        "layers_loaded": r.layers_loaded,
        "pinned_layers": r.pinned_layers,
        "streamed_layers": r.streamed_layers,
        "output_resident": plan.output_resident,
        "peak_resident_weight_bytes": r.peak_resident,
        "read_secs": r.read_secs,
        "io_wait_secs": r.io_wait_secs,
        "compute_secs": r.compute_secs(),
        "prefetch_hits": r.prefetch_hits,
        "prefetch_late": r.prefetch_late,
        "prefetch_depth": r.prefetch_depth,
        "pinned_layer_bytes": r.pinned_bytes,
        "streamed_layer_bytes": r.streamed_bytes,
        "stream_buffers": r.stream_buffers,
        "direct_io": r.direct_io,
        "mapped_io": r.mapped_io,
        "experts": crate::expert_stats::json(r, d).map(|mut x| {
            crate::expert_stats::add_windows(&mut x, s);
            x
        }),
    });
    report["bytes_read_per_generated_token"] = per_generated(s).into();
    report["constraint_secs"] = s.constraint_secs.into();
    report["speculation"] = speculation_json(engine, s);
    // Not charged to the budget: see `Model`.
    report["tokenizer_bytes"] = engine.model().tokenizer.heap_bytes().into();
    report["isa"] = ramforge_quant::isa::active().name().into();
    report
}

/// Bytes read while decoding (the draft model's included) per generated token: with drafts
/// a pass over the weights can yield several tokens.
fn per_generated(s: &GenerationStats) -> f64 {
    let draft = s.speculation.map_or(0, |x| x.draft_bytes_read);
    (s.decode_residency.bytes_read + draft) as f64 / s.generated_tokens.max(1) as f64
}

/// Passes over the weights per generated token's worth: tokens per verify pass.
fn tokens_per_pass(s: &GenerationStats) -> f64 {
    let passes = s.speculation.map_or(0, |x| x.passes);
    s.generated_tokens as f64 / passes.max(1) as f64
}

/// What speculative decoding did (`null` without `--lookup`, `--draft` or `--mtp`).
fn speculation_json(engine: &Engine, s: &GenerationStats) -> serde_json::Value {
    let Some(x) = s.speculation else {
        return serde_json::Value::Null;
    };
    let draft = engine.drafter().and_then(|d| d.model());
    serde_json::json!({
        "drafter": engine.drafter().map_or("lookup", |d| d.name()),
        "passes": x.passes,
        "drafted": x.drafted,
        "accepted": x.accepted,
        "acceptance": x.acceptance(),
        "tokens_per_pass": tokens_per_pass(s),
        "draft_bytes_read": x.draft_bytes_read,
        "draft_budget_bytes": draft
            .filter(|d| !d.budget().is_unlimited())
            .map(|d| d.budget().limit()),
        "draft_peak_managed_bytes": draft.map(|d| d.budget().peak()),
    })
}

/// The text report's line on speculative decoding (empty without it).
fn speculation_line(s: &GenerationStats) -> String {
    let Some(x) = s.speculation else {
        return String::new();
    };
    format!(
        "speculation: {} tokens in {} passes ({:.2} per pass), {} of {} drafted accepted ({:.0}%), {}/generated token read\n",
        s.generated_tokens,
        x.passes,
        tokens_per_pass(s),
        x.accepted,
        x.drafted,
        100.0 * x.acceptance(),
        human_bytes(per_generated(s) as u64),
    )
}

/// Bytes read per decoded token (decode evals only: the prompt's batches read each layer once
/// per batch, not per token); the whole call's figure when nothing was decoded.
fn per_token(s: &GenerationStats) -> f64 {
    if s.decode_residency.tokens > 0 {
        s.decode_residency.bytes_read_per_token()
    } else {
        s.residency.bytes_read_per_token()
    }
}

fn text_report(
    engine: &Engine,
    s: &GenerationStats,
    load_secs: f64,
    mem: ramforge_engine::ProcessMemory,
) -> String {
    let plan = engine.plan();
    let r = &s.residency;
    let budget = if engine.budget().is_unlimited() {
        "no budget".to_string()
    } else {
        format!("{} budget", human_bytes(engine.budget().limit()))
    };
    format!(
        "load: {load_secs:.2} s ({} threads, context {})\n\
         prompt: {} tokens in {:.2} s ({:.1} tok/s)\n\
         decode: {} tokens in {:.2} s ({:.1} tok/s, {} steps on one thread), stopped by {:?}\n\
         memory: peak managed {} of {budget} (minimum {}), peak RSS {}\n\
         storage: read {} while generating ({}/decoded token), {} layer loads; {} of {} layers pinned ({}), {} streamed, output {}\n\
         streaming: {} buffers ({} in use), {} reads, prefetch {} hits / {} late; I/O wait {:.2} s, compute {:.2} s\n",
        engine.threads(),
        engine.context_size(),
        s.prompt_tokens,
        s.prompt_secs,
        s.prompt_tokens_per_sec(),
        s.generated_tokens,
        s.decode_secs,
        s.decode_tokens_per_sec(),
        engine.solo_steps(),
        s.stop_reason,
        human_bytes(s.peak_managed_bytes),
        human_bytes(plan.minimum),
        human_bytes(mem.peak_rss),
        human_bytes(r.bytes_read),
        human_bytes(per_token(s) as u64),
        r.layers_loaded,
        r.pinned_layers,
        r.pinned_layers + r.streamed_layers,
        human_bytes(r.pinned_bytes),
        human_bytes(r.streamed_bytes),
        if plan.output_resident { "resident" } else { "streamed" },
        r.stream_buffers,
        r.prefetch_depth,
        r.read_path(),
        r.prefetch_hits,
        r.prefetch_late,
        r.io_wait_secs,
        r.compute_secs(),
    ) + &expert_line(r, &s.decode_residency)
        + &speculation_line(s)
        + &expert_windows(s)
}

/// The expert cache's hit rate over the first and last decoding windows, and what the expert
/// history preloaded, when experts are streamed.
fn expert_windows(s: &GenerationStats) -> String {
    if !s.residency.streams_experts() {
        return String::new();
    }
    let n = ramforge_engine::WINDOW_EVALS;
    format!(
        "experts: {:.0}% hit rate over the first {n} decoded tokens, {:.0}% over the last {n}; {} preloaded from the expert history\n",
        100.0 * s.first_decode_residency.expert_hit_rate(),
        100.0 * s.last_decode_residency.expert_hit_rate(),
        s.residency.experts_preloaded,
    )
}

/// The expert cache's figures, when an MoE model's experts are streamed one by one: counts of
/// the whole call, per-token figures of decoding (`decode`) when it decoded anything.
fn expert_line(
    r: &ramforge_engine::stream::ResidencyStats,
    decode: &ramforge_engine::stream::ResidencyStats,
) -> String {
    let per = if decode.tokens > 0 { decode } else { r };
    if !r.streams_experts() {
        return String::new();
    }
    let ahead = if r.experts_read_ahead > 0 {
        format!(
            " ({} read ahead for hash-routed layers, waited {:.2} s)",
            r.experts_read_ahead, r.ahead_wait_secs
        )
    } else {
        String::new()
    };
    format!(
        "experts: {} hits / {} misses ({:.0}% hit rate, {} slots per layer), {:.1} expert reads and {}/token, {} admitted, {} used in place; reads {:.2} s, of which the compute waited {:.2} s{ahead}\n",
        r.expert_hits,
        r.expert_misses,
        100.0 * r.expert_hit_rate(),
        r.expert_slots_per_layer,
        per.expert_reads_per_token(),
        human_bytes((per.expert_bytes_read as f64 / per.tokens.max(1) as f64) as u64),
        r.experts_admitted,
        r.experts_mapped,
        r.expert_read_secs,
        r.expert_wait_secs,
    )
}
