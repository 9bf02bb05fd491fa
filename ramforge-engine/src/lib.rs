//! ramforge-engine: memory budget, streaming model, KV cache, tokenizer, sampling, inference.

pub mod adaptive_depth;
pub mod budget;
pub mod chat;
pub mod config;
pub mod direct_io;
pub mod engine;
pub mod error;
pub mod file_identity;
pub mod forward;
pub mod generate;
pub mod kv;
pub mod mapped;
pub mod plan;
pub mod prefetch;
pub mod residency;
pub mod sampling;
pub mod sigbus;
pub mod tensors;
pub mod tokenizer;
pub mod weights;

pub use budget::{parse_memory_size, process_memory, MemoryBudget, ProcessMemory};
pub use config::{Arch, ModelConfig};
pub use engine::{Engine, EngineOptions, Model};
pub use error::EngineError;
pub use generate::{GenerationStats, StopReason};
pub use kv::KvType;
pub use plan::MemoryPlan;
pub use sampling::SamplingParams;
pub use weights::ResidencyStats;
