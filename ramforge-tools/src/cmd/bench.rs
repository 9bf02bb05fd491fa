//! `ramforge-tools bench`: a quick built-in speed test: prefill and decode tokens/s, with the
//! storage traffic per token and the process's peak RSS.
//!
//! Like llama-bench, it feeds fixed synthetic token ids (speed does not depend on which ids), so
//! it needs no tokenizer: prefill is the prompt in one `eval` per batch, decode is one `eval` per
//! token of the greedy continuation. Ctrl-C stops it and prints what was measured so far.

use crate::cancel::cancel_flag;
use crate::error::CmdResult;
use crate::generate::load_engine;
use crate::progress::progress_bar;
use crate::verbosity::quiet;
use ramforge_engine::budget::human_bytes;
use ramforge_engine::sampling::argmax;
use ramforge_engine::{process_memory, Engine, EngineOptions, ResidencyStats};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Quick speed test: prefill and decode tokens/s, with peak RSS.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file (default: the default model, fetched on first use).
    #[arg(short, long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// RAM budget (e.g. 64M, 1.5G; powers of 1024). Default: no limit.
    #[arg(long, value_name = "SIZE", value_parser = crate::args::parse_ram)]
    pub ram: Option<u64>,
    /// Prompt tokens to process (the prefill measurement).
    #[arg(short = 'p', long, default_value_t = 128, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub prompt_tokens: u32,
    /// Tokens to generate one at a time (the decode measurement).
    #[arg(short = 'n', long, default_value_t = 32, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub gen_tokens: u32,
    /// Worker threads (0 = one per core).
    #[arg(short, long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    #[command(flatten)]
    pub prefill: crate::args::PromptBatch,
    /// Print the results as one JSON object (exact bytes and seconds).
    #[arg(long)]
    pub json: bool,
}

/// What one bench run measured.
#[derive(Default, serde::Serialize)]
struct Measured {
    prompt_tokens: usize,
    prefill_secs: f64,
    gen_tokens: usize,
    decode_secs: f64,
    cancelled: bool,
}

impl Measured {
    fn prefill_tps(&self) -> f64 {
        rate(self.prompt_tokens, self.prefill_secs)
    }
    fn decode_tps(&self) -> f64 {
        rate(self.gen_tokens, self.decode_secs)
    }
}

fn rate(tokens: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}

pub fn run(args: Args) -> CmdResult {
    let path = crate::default_model::or_default(args.model.clone(), quiet())?;
    let n_prompt = args.prompt_tokens as usize;
    let n_gen = args.gen_tokens as usize;
    let options = EngineOptions {
        ram: args.ram,
        ctx: Some(n_prompt + n_gen),
        threads: args.threads,
        batch: args.prefill.batch.max(1),
        ..EngineOptions::default()
    };
    let mut engine = load_engine(ramforge_engine::Model::open(&path)?, &options)?;
    let cancel = cancel_flag();
    cancel.store(false, Ordering::SeqCst);

    let n_vocab = engine.n_vocab() as u64;
    let prompt: Vec<u32> = (0..n_prompt as u64)
        .map(|i| ((i * 7919 + 13) % n_vocab) as u32)
        .collect();
    let mut m = Measured::default();

    // Prefill, a batch at a time so Ctrl-C is noticed between batches (or a run of the rows
    // a budget holds, which one eval takes layer by layer).
    let bar = progress_bar(n_prompt as u64, "prefill", false);
    let plan = engine.plan();
    let batch = plan.request.batch.max(plan.held_rows).max(1);
    let mut next = 0u32;
    let started = Instant::now();
    for chunk in prompt.chunks(batch) {
        if cancel.load(Ordering::SeqCst) {
            m.cancelled = true;
            break;
        }
        next = argmax(engine.eval(chunk)?) as u32;
        m.prompt_tokens += chunk.len();
        bar.inc(chunk.len() as u64);
    }
    m.prefill_secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();

    // Decode: one token at a time, greedy.
    let bar = progress_bar(n_gen as u64, "decode", false);
    let before_decode = *engine.residency();
    let started = Instant::now();
    while !m.cancelled && m.gen_tokens < n_gen {
        if cancel.load(Ordering::SeqCst) {
            m.cancelled = true;
            break;
        }
        next = argmax(engine.eval(&[next])?) as u32;
        m.gen_tokens += 1;
        bar.inc(1);
    }
    m.decode_secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let decode = engine.residency().since(&before_decode);

    report(&args, &path, &engine, &m, &decode)?;
    Ok(if m.cancelled {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// `decode` is the storage traffic of the decode phase alone: its bytes per token are per
/// decoded token (the prefill reads each streamed layer once per batch, not per token).
fn report(
    args: &Args,
    path: &std::path::Path,
    engine: &Engine,
    m: &Measured,
    decode: &ResidencyStats,
) -> CmdResult {
    let mem = process_memory().unwrap_or_default();
    let stats = engine.residency();
    let cfg = engine.config();
    let budget = engine.budget();
    let file_bytes = std::fs::metadata(path)?.len();
    if args.json {
        let out = serde_json::json!({
            "model": path,
            "model_bytes": file_bytes,
            "architecture": cfg.arch.name,
            "layers": cfg.n_layer,
            "threads": engine.threads(),
            "isa": ramforge_quant::isa::active().name(),
            "solo_steps": engine.solo_steps(),
            "ram_budget": args.ram,
            "budget_peak_bytes": budget.peak(),
            "load_secs": engine.load_secs(),
            "prompt_tokens": m.prompt_tokens,
            "prefill_secs": m.prefill_secs,
            "prefill_tokens_per_sec": m.prefill_tps(),
            "gen_tokens": m.gen_tokens,
            "decode_secs": m.decode_secs,
            "decode_tokens_per_sec": m.decode_tps(),
            "bytes_read_per_token": decode.bytes_read_per_token(),
            "decode_bytes_read": decode.bytes_read,
            "prefill_bytes_read": stats.bytes_read - decode.bytes_read,
            "decode_io_wait_secs": decode.io_wait_secs,
            "decode_compute_secs": decode.compute_secs(),
            "decode_prefetch_hits": decode.prefetch_hits,
            "decode_prefetch_late": decode.prefetch_late,
            "prefetch_depth": stats.prefetch_depth,
            "pinned_layers": stats.pinned_layers,
            "streamed_layers": stats.streamed_layers,
            "pinned_layer_bytes": stats.pinned_bytes,
            "streamed_layer_bytes": stats.streamed_bytes,
            "stream_buffers": stats.stream_buffers,
            "direct_io": stats.direct_io,
            "mapped_io": stats.mapped_io,
            "peak_rss_bytes": mem.peak_rss,
            "cancelled": m.cancelled,
            "experts": crate::expert_stats::json(stats, decode),
        });
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let budget_text = match args.ram {
        Some(limit) => format!(
            "{} (peak charged {})",
            human_bytes(limit),
            human_bytes(budget.peak())
        ),
        None => format!("unlimited (peak charged {})", human_bytes(budget.peak())),
    };
    println!(
        "model      {name} ({}, {}, {} layers)",
        human_bytes(file_bytes),
        cfg.arch.name,
        cfg.n_layer
    );
    println!("budget     {budget_text}");
    println!(
        "layers     {} pinned ({}), {} streamed ({}) through {} buffers ({})",
        stats.pinned_layers,
        human_bytes(stats.pinned_bytes),
        stats.streamed_layers,
        human_bytes(stats.streamed_bytes),
        stats.stream_buffers,
        stats.read_path()
    );
    println!(
        "threads    {} (kernels: {})",
        engine.threads(),
        ramforge_quant::isa::active()
    );
    println!("load       {:.2} s", engine.load_secs());
    println!(
        "prefill    {} tokens in {:.2} s = {:.1} tok/s",
        m.prompt_tokens,
        m.prefill_secs,
        m.prefill_tps()
    );
    println!(
        "decode     {} tokens in {:.2} s = {:.1} tok/s",
        m.gen_tokens,
        m.decode_secs,
        m.decode_tps()
    );
    println!(
        "disk read  {} per decoded token; prefetch {} hits, {} late, depth {}; decode I/O wait {:.2} s, compute {:.2} s",
        human_bytes(decode.bytes_read_per_token() as u64),
        decode.prefetch_hits,
        decode.prefetch_late,
        stats.prefetch_depth,
        decode.io_wait_secs,
        decode.compute_secs()
    );
    println!("peak RSS   {}", human_bytes(mem.peak_rss));
    if m.cancelled {
        println!("(interrupted: the figures cover what ran before Ctrl-C)");
    }
    Ok(ExitCode::SUCCESS)
}
