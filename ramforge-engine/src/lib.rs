//! Budget-true streaming inference for GGUF language models on CPU.
//!
//! A model larger than the memory it is given runs under a hard budget: every allocation that
//! grows with the model or the context is charged to a [`MemoryBudget`] before it is made, the
//! weights that fit are pinned, and the rest stream from storage layer by layer, read ahead by
//! an I/O thread while the current layer computes.
//!
//! # The data path
//!
//! 1. [`Model::open`] (`model/`) parses the GGUF header, reads the hyper-parameters
//!    ([`ModelConfig`]), finds the [`Architecture`] description and binds every tensor it lists,
//!    checked for shape and type; builds the [`Tokenizer`](text::Tokenizer) (`text/`). No
//!    weight byte is read, nothing is charged.
//! 2. [`Model::plan`] (`plan/`) lays the model out under the budget: the working set (KV cache,
//!    scratch, logits, vectors) first, then pinned layers and a ring of streaming buffers as the
//!    pure residency policy ([`residency`]) chooses. `ramforge-tools plan` prints it.
//! 3. [`Engine::new`] charges and reads the resident weights (`weights/`) and starts the
//!    prefetch thread for the streamed layers (`stream/`: layout, cold readers, mapped windows,
//!    adaptive depth, file identity), then allocates the KV cache (`kv`) and scratch.
//! 4. [`Engine::eval`] runs batches through the blocks (`forward/`: the architecture's block
//!    composed from shared ops; matrix products in `ramforge-quant`, on the quantized weights).
//!    [`Engine::generate`] samples (`sampling`), streams text and stops as asked; the traffic
//!    is in [`ResidencyStats`], the timings in [`GenerationStats`].
//!
//! ```no_run
//! use ramforge_engine::{Engine, EngineOptions, SamplingParams};
//! use std::sync::atomic::AtomicBool;
//!
//! let options = EngineOptions { ram: Some(64 << 20), ..EngineOptions::default() };
//! let mut engine = Engine::load("model.gguf", &options)?;
//! let prompt = engine.model().tokenizer.encode("The capital of France is", true, true);
//! let stats = engine.generate(
//!     &prompt,
//!     &SamplingParams::greedy(32),
//!     &mut |_id, text| print!("{text}"),
//!     &AtomicBool::new(false),
//! )?;
//! eprintln!("\n{:.1} tok/s", stats.decode_tokens_per_sec());
//! # Ok::<(), ramforge_engine::EngineError>(())
//! ```
#![warn(missing_docs)]
// The docs describe the internals too and link them (`cargo doc --document-private-items`).
#![allow(rustdoc::private_intra_doc_links)]

mod batch;
pub mod budget;
pub mod constraint;
mod decoding;
mod draft;
mod engine;
mod error;
mod forward;
mod generate;
mod held_rows;
mod kv;
mod layer_major;
pub mod model;
mod mtp;
mod options;
pub mod plan;
pub mod residency;
pub mod sampling;
mod sequence;
mod simd;
pub mod stream;
pub mod text;
mod thread_choice;
mod verify;
mod weights;

/// The README's example, compiled as a doctest so it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctest;

pub use budget::{parse_memory_size, process_memory, MemoryBudget, ProcessMemory};
pub use constraint::{Constraint, Grammar, GrammarCompiler};
pub use decoding::{Decoding, Next, StopReason};
pub use draft::{
    draft_options, lookup, split_budget, vocabulary_difference, DraftModel, DraftSplit, Drafter,
    Speculating, SpeculationStats, DRAFT_SHARE,
};
pub use engine::{Engine, PromptProgress};
pub use error::EngineError;
pub use generate::{GenerationStats, WINDOW_EVALS};
pub use kv::KvType;
pub use model::{Architecture, Model, ModelConfig};
pub use options::{EngineOptions, BUDGETED_MIN_BATCH, DEFAULT_BATCH, DEFAULT_CTX};
pub use plan::MemoryPlan;
pub use sampling::{Logprobs, SamplingParams, TokenLogprob};
pub use sequence::Sequence;
pub use stream::ResidencyStats;
pub use weights::experts::history::{ExpertHistory, HistoryError};
