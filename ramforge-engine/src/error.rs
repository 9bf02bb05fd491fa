//! The engine's one error type; every variant renders as one line.

use crate::budget::{human_bytes, BudgetError};
use ramforge_gguf::GgufError;
use ramforge_quant::QuantError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Budget(#[from] BudgetError),
    #[error("kernel error: {0}")]
    Quant(#[from] QuantError),
    /// Something the file asks for that the engine does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A malformed model: a missing or misshaped tensor, a nonsensical hyperparameter.
    #[error("bad model: {0}")]
    BadModel(String),
    /// The budget cannot hold even the smallest working layout.
    #[error("a memory budget of {} is below the minimum of {} ({minimum} bytes) this model needs at a context of {ctx} tokens", human_bytes(*.budget), human_bytes(*.minimum))]
    BudgetTooSmall {
        budget: u64,
        minimum: u64,
        ctx: usize,
    },
    /// The prompt (plus what is generated) does not fit in the context.
    #[error("the prompt has {prompt} tokens, {needed} with the tokens to generate, but the context holds {ctx}")]
    ContextOverflow {
        prompt: usize,
        needed: usize,
        ctx: usize,
    },
    /// The model file's path no longer names the file the engine loaded, as it was (replaced,
    /// removed or written to while running; see `stream::identity`). `stopped` says
    /// whether the pass that reads `tensor` first was not started or was discarded.
    #[error("the model file {path} {change} while running; {stopped} tensor \"{tensor}\" at file offset {offset} (load the model again)")]
    ModelFileChanged {
        path: String,
        change: String,
        stopped: &'static str,
        tensor: String,
        offset: u64,
    },
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("could not start {threads} worker threads: {reason}")]
    Threads { threads: usize, reason: String },
}
