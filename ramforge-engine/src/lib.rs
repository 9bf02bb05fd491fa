//! ramforge-engine: memory budget, streaming model, KV cache, tokenizer, sampling, inference.
