//! `ramforge-tools serve`: an OpenAI-compatible HTTP server (chat and text completions, plain
//! and streamed) for one model under the RAM budget.
//!
//! One engine runs on its own thread (`scheduler`), decoding up to `--parallel` queued
//! requests together (`worker` is the queue to it); the HTTP side (tokio + axum, `http`) reads
//! requests strictly (`api`, the library's `ramforge_tools::openai`), answers with OpenAI's
//! shapes (`reply`, `answer`) and errors (`errors`). `observe` serves the chat page at `/`,
//! `/metrics` (Prometheus) and `/status` (JSON) from the figures in `metrics`. SIGINT or SIGTERM stops accepting
//! connections, lets the requests in flight finish, and exits 0.

mod answer;
mod http;
mod job;
mod metrics;
mod observe;
mod reply;
mod scheduler;
mod state;
mod worker;

// The request reader and error shapes are the library's (fuzzed there).
use ramforge_tools::openai::{errors, request as api};

use crate::args::{ModelChoice, RamBudget, Speculation, TemplateFile, Workers};
use crate::error::CmdResult;
use crate::expert_history::ExpertHistoryFlag;
use crate::generate::load_speculative;
use crate::note;
use crate::verbosity::quiet;
use ramforge_engine::text::ChatPrompt;
use ramforge_engine::{EngineOptions, Model};
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::Arc;

/// Serve a model over HTTP with OpenAI's API (chat and text completions, streamed or not).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelChoice,
    /// Address to listen on (the default takes connections from this machine only).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on; 0 picks a free one (the address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    #[command(flatten)]
    pub budget: RamBudget,
    /// Context positions, prompt and reply together (default: min(trained, 2048)).
    #[arg(long)]
    pub ctx: Option<usize>,
    #[command(flatten)]
    pub workers: Workers,
    /// Require `Authorization: Bearer KEY` on /v1/* (/health stays open).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    #[command(flatten)]
    pub template: TemplateFile,
    /// Requests that may wait while others are generated; more get 503 with Retry-After.
    #[arg(long, default_value_t = 16)]
    pub queue: usize,
    /// Requests decoded together: one pass over the weights per token serves all of them.
    /// The budget holds a whole context of KV cache for each.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
    #[command(flatten)]
    pub history: ExpertHistoryFlag,
    /// Speculative decoding while one request is decoded alone (see the scheduler).
    #[command(flatten)]
    pub speculation: Speculation,
}

pub fn run(args: Args) -> CmdResult {
    let path = args.model.path(quiet())?;
    let model = Model::open(&path)?;
    let meta = &model.file.header().metadata;
    let chat = match (
        ChatPrompt::for_model(meta, &model.tokenizer, args.template.read()?),
        &args.template.template,
    ) {
        (Ok(chat), _) => Some(chat),
        (Err(e), Some(_)) => return Err(e.into()),
        (Err(e), None) => {
            note!("note: /v1/chat/completions is off: {e}");
            None
        }
    };
    let options = EngineOptions {
        ram: args.budget.ram,
        ctx: args.ctx,
        threads: args.workers.threads,
        sequences: args.parallel.into(),
        ..EngineOptions::default()
    };
    let mut engine = load_speculative(model, &options, &args.speculation)?;
    args.history.load(&mut engine);
    let parallel = engine.max_sequences();
    let tokenizer = Arc::clone(&engine.model().tokenizer);
    let ctx = engine.context_size();
    // Made on the first `response_format` request: its vocabulary index is not charged to the
    // budget, so a server that never constrains output keeps the budget's promise.
    let grammars = std::sync::OnceLock::new();
    let telemetry = Arc::new(metrics::Telemetry::new(&engine));
    let (queue, busiest, engine_thread) =
        worker::start(engine, args.queue, Arc::clone(&telemetry))?;
    let state = Arc::new(state::State {
        model_id: model_id(&path),
        loaded: reply::unix_now(),
        tokenizer,
        chat,
        ctx,
        queue,
        parallel,
        busiest,
        api_key: args.api_key.clone(),
        telemetry,
        grammars,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(listen(state, args.host, args.port, args.queue))?;
    drop(runtime);
    // Every queue handle went with the router: the engine thread ends once it is idle.
    let engine = engine_thread
        .join()
        .map_err(|_| "the engine thread panicked")?;
    args.history.save(&engine);
    note!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// Binds, announces the address on stderr (one line, even with --quiet: scripts wait for
/// it), and serves until SIGINT or SIGTERM, then until the requests in flight are done.
async fn listen(
    state: Arc<state::State>,
    host: IpAddr,
    port: u16,
    queue: usize,
) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let listener = tokio::net::TcpListener::bind((host, port)).await?;
    let addr = listener.local_addr()?;
    eprintln!(
        "listening on http://{addr} (model {}, context {}, queue {queue}, parallel {})",
        state.model_id, state.ctx, state.parallel
    );
    let stop = async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        note!("stopping: no new connections; finishing the requests in flight");
    };
    axum::serve(listener, http::router(state))
        .with_graceful_shutdown(stop)
        .await
}

/// The model's id in the API: its file name without `.gguf`, and for a split model's first
/// shard without `-00001-of-0000n` (the model, not the shard).
fn model_id(path: &std::path::Path) -> String {
    let name = path.file_name().map(|s| s.to_string_lossy().into_owned());
    if let Some((prefix, _, _)) = name
        .as_deref()
        .and_then(ramforge_gguf::split::parse_shard_name)
    {
        return prefix.to_string();
    }
    path.file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::model_id;
    use std::path::Path;

    #[test]
    fn a_split_model_is_named_without_its_shard_numbers() {
        assert_eq!(
            model_id(Path::new("/m/GLM-4.6-Q2_K-00001-of-00003.gguf")),
            "GLM-4.6-Q2_K"
        );
        assert_eq!(model_id(Path::new("/m/SmolLM2.Q4_1.gguf")), "SmolLM2.Q4_1");
        assert_eq!(model_id(Path::new("/m/x-1-of-3.gguf")), "x-1-of-3");
    }
}
