//! ramforge-engine: memory budget, streaming model, KV cache, tokenizer, sampling, inference.

pub mod chat;
pub mod tokenizer;
