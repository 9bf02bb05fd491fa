//! How a model is laid out and run: the budget, context, threads, KV type and batch the caller
//! asks for.

use crate::kv::KvType;

/// Default number of prompt tokens processed together: each prompt pass unpacks (prefill
/// tiles) or streams (out of core) every weight once, so longer batches spread that cost.
pub const DEFAULT_BATCH: usize = 256;
/// The batch a budget cuts a longer one down to at the least (see [`EngineOptions::batch`]).
pub const BUDGETED_MIN_BATCH: usize = 64;
/// Default context when none is asked for (capped by the model's trained context).
pub const DEFAULT_CTX: usize = 2048;

/// How to lay a model out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// Memory budget in bytes; `None` = unlimited (every weight resident).
    pub ram: Option<u64>,
    /// Positions the KV cache must hold (prompt + generated); `None` = min(trained, 2048).
    pub ctx: Option<usize>,
    /// Worker threads; 0 = one per available core.
    pub threads: usize,
    /// How keys and values are cached.
    pub kv_type: KvType,
    /// Prompt tokens processed together at most: bounded by the context and, under a budget,
    /// halved (down to [`BUDGETED_MIN_BATCH`]) until its plan keeps resident what a
    /// [`BUDGETED_MIN_BATCH`]-token batch's plan keeps.
    pub batch: usize,
    /// Sequences decoded together at most ([`crate::Engine::decode_batch`]); the plan books
    /// a whole context of KV cache for each. 1 for everything but `serve --parallel`.
    pub sequences: usize,
    /// Most drafted tokens one speculative verify pass checks ([`crate::Engine::eval_verify`]);
    /// the plan books logits for all of them plus one, and the copy a rollback restores. 0 = off.
    pub draft: usize,
}

impl Default for EngineOptions {
    fn default() -> EngineOptions {
        EngineOptions {
            ram: None,
            ctx: None,
            threads: 0,
            kv_type: KvType::F16,
            batch: DEFAULT_BATCH,
            sequences: 1,
            draft: 0,
        }
    }
}
