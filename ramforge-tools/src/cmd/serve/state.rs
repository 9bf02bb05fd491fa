//! What every request handler shares: the model's name and tokenizer, the chat template, the
//! context size, the engine's queue, the API key and the figures `/metrics` reports.

use super::metrics::Telemetry;
use super::scheduler::Busiest;
use super::worker::Queue;
use ramforge_engine::text::{ChatPrompt, Tokenizer};
use serde_json::{json, Value};
use std::sync::Arc;

/// The server's shared state.
pub struct State {
    /// The id clients name in `model` (the file name without `.gguf`).
    pub model_id: String,
    /// When the model was loaded (Unix seconds), its `created` in `/v1/models`.
    pub loaded: u64,
    pub tokenizer: Arc<Tokenizer>,
    /// `None` when the model has no chat template and none was given.
    pub chat: Option<ChatPrompt>,
    /// Context positions: prompt and reply together.
    pub ctx: usize,
    pub queue: Queue,
    /// Requests decoded together at most.
    pub parallel: usize,
    /// The most requests one decoding step has served so far.
    pub busiest: Arc<Busiest>,
    pub api_key: Option<String>,
    /// What `/metrics` and `/status` report.
    pub telemetry: Arc<Telemetry>,
    /// Compiles `response_format` grammars for the model's vocabulary, made on first use (an
    /// error: e.g. the model has no end-of-generation token, so a grammar could not end).
    pub grammars: std::sync::OnceLock<Result<Arc<ramforge_engine::GrammarCompiler>, String>>,
}

impl State {
    /// The model's entry in `/v1/models`.
    pub fn model_card(&self) -> Value {
        json!({
            "id": self.model_id,
            "object": "model",
            "created": self.loaded,
            "owned_by": "ramforge",
        })
    }
}
