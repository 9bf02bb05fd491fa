//! The engine's one error type; every variant renders as one line.

use crate::budget::{human_bytes, BudgetError};
use ramforge_gguf::GgufError;
use ramforge_quant::QuantError;

/// Why an engine call failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model file: unreadable, malformed, or cut short while running.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A charge the budget could not hold.
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// A kernel refused its inputs.
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
        /// The budget asked for, in bytes.
        budget: u64,
        /// The smallest budget that works, in bytes.
        minimum: u64,
        /// The context the minimum was computed for.
        ctx: usize,
    },
    /// The prompt (plus what is generated) does not fit in the context.
    #[error("the prompt has {prompt} tokens, {needed} with the tokens to generate, but the context holds {ctx}")]
    ContextOverflow {
        /// Tokens in the prompt.
        prompt: usize,
        /// Positions the prompt and the tokens to generate need.
        needed: usize,
        /// Positions the context holds.
        ctx: usize,
    },
    /// The model file's path no longer names the file the engine loaded, as it was (replaced,
    /// removed or written to while running; see `stream::identity`). `stopped` says
    /// whether the pass that reads `tensor` first was not started or was discarded.
    #[error("the model file {path} {change} while running; {stopped} tensor \"{tensor}\" at file offset {offset} (load the model again)")]
    ModelFileChanged {
        /// The model file.
        path: String,
        /// What happened to it.
        change: String,
        /// What became of the pass.
        stopped: &'static str,
        /// The tensor the pass reads first.
        tensor: String,
        /// Its file offset.
        offset: u64,
    },
    /// A call with arguments the engine cannot use.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The model's tokenizer tables are unusable.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The worker pool could not start.
    #[error("could not start {threads} worker threads: {reason}")]
    Threads {
        /// Threads asked for.
        threads: usize,
        /// Why the pool could not start.
        reason: String,
    },
}
