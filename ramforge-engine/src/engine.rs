//! The engine: a model laid out under a budget, with its KV cache, scratch and thread pool.
//!
//! `Model::open` reads and checks the header and tensor table (nothing is charged, no weight is
//! read); `Engine::new` plans the memory, charges and fills the resident weights, and is then
//! ready to `eval` tokens or `generate` text.

use crate::budget::{tie_allocator_to_budget, ChargedVec, MemoryBudget};
use crate::error::EngineError;
use crate::forward::{block, output_rows, rope_tables, scale, LayerWeights, Rows, Scratch};
use crate::held_rows::HeldRows;
use crate::kv::KvCache;
use crate::model::arch::Role;
use crate::model::{Model, ModelConfig};
use crate::options::{EngineOptions, BUDGETED_MIN_BATCH, DEFAULT_CTX};
use crate::plan::{MemoryPlan, PlanRequest};
use crate::stream::depth::{DepthControl, DepthDecision, Ring};
use crate::stream::identity::{FileChange, ModelIdentity};
use crate::stream::{AlignedBuf, ResidencyStats};
use crate::thread_choice::ThreadChoice;
use crate::weights::experts::history::{self, ExpertHistory, HistoryError};
use crate::weights::{ExpertStore, Weights};
use ramforge_gguf::TensorInfo;
use ramforge_quant::parallel::WorkerPool;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A model ready to run under its budget.
pub struct Engine {
    pub(crate) model: Model,
    pub(crate) plan: MemoryPlan,
    pub(crate) budget: MemoryBudget,
    pub(crate) pool: Arc<WorkerPool>,
    threads: usize,
    /// Whether a single-sequence decoding step runs on all threads or one (measured).
    pub(crate) decode_threads: ThreadChoice,
    /// The same for batched steps.
    pub(crate) batch_threads: ThreadChoice,
    pub(crate) weights: Weights,
    pub(crate) kv: KvCache,
    pub(crate) scratch: Scratch,
    /// The logits of the last pass: one row, or one per sequence of a batched step.
    pub(crate) logits: ChargedVec<f32>,
    /// What a layer-major prefill holds of each prompt row between layers (the plan's
    /// `held_rows`; empty when nothing is streamed or the budget has no room).
    pub(crate) held: HeldRows,
    /// Every token in the context, in order.
    pub(crate) history: Vec<u32>,
    load_secs: f64,
    /// Called as a long prompt is processed: `(tokens_done, tokens_total)`.
    pub(crate) prompt_progress: Option<PromptProgress>,
    /// The open model files, to see one replaced while running.
    identity: ModelIdentity,
    /// Adapts the prefetch depth from measured read and compute times.
    depth_control: DepthControl,
    /// What the last verify pass overwrote, and the context length before it (`verify.rs`).
    pub(crate) saved: Option<(usize, crate::kv::Saved)>,
    /// After a rollback on a hybrid model: the recurrent state holds only `history[..n]`;
    /// the next pass evaluates the rest again first.
    pub(crate) stale: Option<usize>,
    /// Where [`Engine::generate`] takes drafts from (`None`: plain decoding).
    pub(crate) drafter: Option<crate::draft::Drafter>,
    /// Which hidden states the scratch holds for an MTP layer's drafts (`mtp.rs`).
    pub(crate) mtp: crate::forward::mtp::MtpState,
    /// Passes that wrote hidden states into the scratch (whose context's they are: `mtp`).
    pub(crate) mtp_passes: u64,
}

/// A callback for prompt processing: `(tokens_done, tokens_total)`, called per layer of each
/// batch (so a long prompt on a large model reports often enough for a progress bar).
pub type PromptProgress = Box<dyn FnMut(usize, usize) + Send>;

/// The plan of a model, here where the forward pass (whose activations it books) is known, so
/// that neither the model nor the plan depends on what comes after them on the data path.
impl Model {
    /// The context `options` resolve to for this model.
    pub fn resolve_ctx(&self, options: &EngineOptions) -> usize {
        options
            .ctx
            .unwrap_or_else(|| DEFAULT_CTX.min(self.config.n_ctx_train))
            .max(1)
    }

    /// The memory plan for `options` (the same the engine would use).
    pub fn plan(&self, options: &EngineOptions) -> Result<MemoryPlan, EngineError> {
        let ctx = self.resolve_ctx(options);
        // A verify pass evaluates the drafted tokens and one more in one batch.
        let verify_rows = if options.draft > 0 {
            (options.draft + 1).min(ctx)
        } else {
            0
        };
        // Twice: after a rollback on a hybrid model the accepted tokens join the next pass.
        let floor = 2 * verify_rows;
        let mut batch = options.batch.clamp(1, ctx).max(floor).min(ctx);
        // Under a budget a longer batch may not take resident weights from decoding: the
        // batch halves, down to `BUDGETED_MIN_BATCH`, until its plan keeps what that batch's
        // keeps resident (the same layers, output projection and expert slots, as many
        // streaming buffers); so the least batch also gives the smallest budget.
        let least = BUDGETED_MIN_BATCH.max(floor).min(batch);
        let scratch = |batch| Scratch::bytes(&self.config, &self.tensors, batch, ctx);
        let plan = |budget, batch| {
            MemoryPlan::new(
                &self.config,
                &self.tensors,
                PlanRequest {
                    budget,
                    ctx,
                    batch,
                    kv_type: options.kv_type,
                    sequences: options.sequences.max(1),
                    scratch_bytes: scratch(batch)?,
                    verify_rows,
                },
            )
        };
        // (Without a budget every plan keeps everything resident.)
        let base = plan(options.ram, least)?;
        while batch > least {
            match plan(options.ram, batch) {
                Ok(mut p) if p.keeps_resident(&base) => {
                    p.minimum = base.minimum;
                    return Ok(p);
                }
                Ok(_) | Err(EngineError::BudgetTooSmall { .. }) => batch = (batch / 2).max(least),
                Err(e) => return Err(e),
            }
        }
        Ok(base)
    }
}

impl Engine {
    /// Opens `path` and lays it out under `options`.
    pub fn load(path: impl AsRef<Path>, options: &EngineOptions) -> Result<Engine, EngineError> {
        let started = Instant::now();
        let model = Model::open(path)?;
        let mut engine = Engine::new(model, options)?;
        engine.load_secs = started.elapsed().as_secs_f64();
        Ok(engine)
    }

    /// Plans the memory, charges it and reads the resident weights.
    pub fn new(model: Model, options: &EngineOptions) -> Result<Engine, EngineError> {
        Engine::new_with_progress(model, options, &|_, _| {})
    }

    /// [`Engine::new`], calling `progress(bytes_read, bytes_to_read)` as the resident
    /// weights are read (for a progress bar; loading a large model takes a while).
    pub fn new_with_progress(
        model: Model,
        options: &EngineOptions,
        progress: &dyn Fn(u64, u64),
    ) -> Result<Engine, EngineError> {
        let started = Instant::now();
        tie_allocator_to_budget();
        let plan = model.plan(options)?;
        let budget = match options.ram {
            Some(limit) => MemoryBudget::new(limit),
            None => MemoryBudget::unlimited(),
        };
        let threads = if options.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            options.threads
        };
        let pool = WorkerPool::new(threads).map_err(|e| EngineError::Threads {
            threads,
            reason: e.to_string(),
        })?;
        let cfg = &model.config;
        let ctx = plan.request.ctx;
        let identity = ModelIdentity::of(&model.file)?;
        let weights = Weights::load(&model.file, &model.tensors, &plan, &budget, progress)?;
        let depth_control = DepthControl::new(weights.matrices.stats());
        let scratch = Scratch::new(&budget, cfg, &model.tensors, plan.request.batch, ctx)?;
        let rows = plan.request.sequences.max(plan.request.verify_rows).max(1);
        let logits = ChargedVec::zeroed(&budget, "logits", rows * model.tensors.n_vocab)?;
        let held = HeldRows::new(&budget, cfg, &plan)?;
        let kv = KvCache::for_model(&budget, plan.request.kv_type, cfg, ctx);
        Ok(Engine {
            model,
            plan,
            budget,
            pool: Arc::new(pool),
            threads,
            decode_threads: ThreadChoice::new(threads),
            batch_threads: ThreadChoice::new(threads),
            weights,
            kv,
            scratch,
            logits,
            held,
            history: Vec::new(),
            load_secs: started.elapsed().as_secs_f64(),
            prompt_progress: None,
            identity,
            depth_control,
            saved: None,
            stale: None,
            drafter: None,
            mtp: Default::default(),
            mtp_passes: 0,
        })
    }

    /// Fixes the prefetch depth (clamped to 1 ..= the plan's ring), or with `None` lets it
    /// adapt again from measurements. Returns the depth the ring keeps (it may stay shallower
    /// when the budget has no room for more buffers); 0 when nothing is streamed.
    pub fn set_prefetch_depth(&mut self, depth: Option<usize>) -> usize {
        self.depth_control.fix(depth, self.weights.matrices.stats());
        let ring = self.plan.stream_buffers;
        match depth {
            Some(d) => self.apply_prefetch_depth(d.clamp(1, ring.max(1))),
            None => self.weights.matrices.prefetcher().map_or(0, |p| p.depth()),
        }
    }

    /// The last prefetch depth decided from measured times (`None` before a window of passes
    /// was measured, or while the depth is fixed from the start).
    pub fn prefetch_decision(&self) -> Option<DepthDecision> {
        self.depth_control.last()
    }

    /// Asks the prefetch ring for `depth` buffers, charging new ones to the budget.
    fn apply_prefetch_depth(&mut self, depth: usize) -> usize {
        let (budget, len) = (&self.budget, self.plan.stream_buffer_len as usize);
        let Some(prefetcher) = self.weights.matrices.prefetcher() else {
            return 0;
        };
        prefetcher.set_depth(depth, |i| {
            AlignedBuf::new(budget, &format!("layer streaming buffer {i}"), len)
        })
    }

    /// Before a pass that starts with `token`: fails if the model file was replaced or
    /// written to (see [`crate::stream::identity`]), then adapts the prefetch depth when a window
    /// of measurements is complete.
    pub(crate) fn before_pass(&mut self, token: u32) -> Result<(), EngineError> {
        self.check_file(token, "stopped before reading")?;
        if let Some(depth) = self.depth_control.at_pass_start(
            Ring {
                pinned: &self.plan.pinned,
                layer_bytes: &self.plan.layer_bytes,
                buffers: self.plan.stream_buffers,
            },
            self.weights.matrices.stats(),
        ) {
            self.apply_prefetch_depth(depth);
        }
        Ok(())
    }

    /// Fails if a pass starting with `token` reads from the model file and the file is no
    /// longer the one loaded; `stopped` says what became of the pass.
    pub(crate) fn check_file(&self, token: u32, stopped: &'static str) -> Result<(), EngineError> {
        let Some((tensor, offset)) = self.first_file_read(token) else {
            return Ok(());
        };
        let (shard, change) = match self.identity.check() {
            Ok(()) => return Ok(()),
            Err(changed) => changed,
        };
        if let FileChange::Truncated { len } = change {
            // Said as a read would find it: the first tensor the file no longer holds.
            if let Some(e) = self.model.file.short_read_at(shard, len) {
                return Err(e.into());
            }
        }
        Err(EngineError::ModelFileChanged {
            path: self.identity.path(shard).display().to_string(),
            change: change.to_string(),
            stopped,
            tensor: tensor.name.clone(),
            offset,
        })
    }

    /// The tensor, and the file offset in it, that a pass starting with `token` reads from
    /// the file first: the token's embedding row (unless the resident tied output holds it),
    /// else the first streamed layer's first matrix in the file, else the streamed output
    /// projection. `None` when the pass reads nothing from the file.
    fn first_file_read(&self, token: u32) -> Option<(&TensorInfo, u64)> {
        let (file, tensors) = (&self.model.file, &self.model.tensors);
        let embd = &tensors.token_embd;
        if !(tensors.tied_output && self.plan.output_resident) {
            let row = u64::from(token).min(embd.n_rows().saturating_sub(1));
            return Some((embd, file.absolute_offset(embd) + row * embd.row_bytes()));
        }
        let streamed = tensors
            .layers
            .iter()
            .zip(&self.plan.pinned)
            .find(|(_, &pinned)| !pinned)
            .and_then(|(l, _)| l.matrices().min_by_key(|t| t.offset));
        let first = match streamed {
            Some(t) => t,
            None if !self.plan.output_resident => &tensors.output,
            // Experts streamed one by one: the first expert stack is a fair first read.
            None => match &self.plan.experts {
                Some(_) => tensors.layers.iter().find_map(|l| l.expert_stacks())?[0],
                None => return None,
            },
        };
        Some((first, file.absolute_offset(first)))
    }

    /// Sets (or clears) the callback told how far a multi-token [`Engine::eval`] has got.
    pub fn set_prompt_progress(&mut self, progress: Option<PromptProgress>) {
        self.prompt_progress = progress;
    }

    /// The model this engine runs.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &ModelConfig {
        &self.model.config
    }

    /// The memory plan the engine was laid out by.
    pub fn plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// The budget every growing allocation is charged to.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Worker threads computing the forward pass.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Decoding steps that ran on the calling thread alone, because one thread measured
    /// faster than all of them (another process sharing the cores).
    pub fn solo_steps(&self) -> u64 {
        self.decode_threads.solo_steps() + self.batch_threads.solo_steps()
    }

    /// Seconds spent opening the file and reading resident weights.
    pub fn load_secs(&self) -> f64 {
        self.load_secs
    }

    /// Positions the context holds at most.
    pub fn context_size(&self) -> usize {
        self.kv.capacity()
    }

    /// Tokens in the context now.
    pub fn n_past(&self) -> usize {
        self.history.len()
    }

    /// Every token in the context, in order.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// Storage traffic and layout figures so far.
    pub fn residency(&self) -> &ResidencyStats {
        self.weights.matrices.stats()
    }

    /// Each expert's share of its layer's routing so far (what the expert history saves):
    /// `None` unless an MoE model's experts are streamed one by one.
    pub fn expert_history(&self) -> Option<ExpertHistory> {
        self.weights.experts.as_ref().and_then(ExpertStore::history)
    }

    /// The file under the cache directory `dir` where this model's expert history lives
    /// ([`history::path_in`]); with its MTP layer held (`--mtp`, one more MoE layer) another,
    /// so that runs with and without it keep their own.
    pub fn expert_history_path(&self, dir: &Path) -> PathBuf {
        let path = history::path_in(dir, &self.identity);
        if self.model.config.mtp {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            path.with_file_name(format!("{stem}-mtp.bin"))
        } else {
            path
        }
    }

    /// Loads this model's expert history from the cache directory `dir`, if there is one, and
    /// preloads the cache with its most used experts (call it before the first pass). Returns
    /// the experts preloaded: 0 when experts are not streamed or there is no history yet. A
    /// history that is malformed, of another model or shape, or whose experts cannot be read
    /// is an error the caller reports and goes on without: the engine stays as it was (less
    /// what a failed preload read).
    pub fn load_expert_history(&mut self, dir: &Path) -> Result<u64, HistoryError> {
        let Some((layers, n_expert)) = self.weights.experts.as_ref().map(ExpertStore::shape) else {
            return Ok(0);
        };
        let path = self.expert_history_path(dir);
        let key = self.identity.key();
        let Some(h) = ExpertHistory::load(&path, &key, layers, n_expert)? else {
            return Ok(0);
        };
        self.weights
            .preload_experts(&h)
            .map_err(|e| HistoryError::Preload(e.to_string()))
    }

    /// Saves the expert cache's shares to this model's history under the cache directory
    /// `dir` (atomically), for the next process, and removes the histories of model files that
    /// are gone ([`history::prune`]). `Ok(false)` when there is nothing to save: experts not
    /// streamed, or none used.
    pub fn save_expert_history(&self, dir: &Path) -> Result<bool, HistoryError> {
        let Some(h) = self.expert_history() else {
            return Ok(false);
        };
        if h.shares().iter().all(|&c| c == 0.0) {
            return Ok(false);
        }
        let path = self.expert_history_path(dir);
        h.save(&path, &self.identity.key())?;
        history::prune(&path);
        Ok(true)
    }

    /// Vocabulary size (length of the logits).
    pub fn n_vocab(&self) -> usize {
        self.model.tensors.n_vocab
    }

    /// The logits after the last `eval`.
    pub fn logits(&self) -> &[f32] {
        &self.logits[..self.n_vocab()]
    }

    /// Empties the context and releases the KV cache.
    pub fn reset(&mut self) {
        self.kv.clear();
        self.history.clear();
        self.saved = None;
        self.stale = None;
        self.mtp_forget();
    }

    /// Keeps the first `n` tokens of the context (and their keys and values, still charged)
    /// and forgets the rest, so a prompt that starts with them evaluates only what follows.
    /// A hybrid model's recurrent state cannot be cut back: its context goes back to the
    /// state's checkpoint at the end of the last prompt when that is at `n`, else starts over;
    /// so does a context whose sliding-window ring no longer holds the window of `n`
    /// (`KvCache::ring_keeps`).
    pub fn truncate_context(&mut self, n: usize) {
        self.saved = None;
        if n < self.history.len() && !self.kv.ring_keeps(n) {
            self.reset();
            return;
        }
        if n < self.history.len() {
            if self.kv.is_recurrent() {
                if n == 0 || self.kv.checkpoint_position() != Some(n) {
                    self.reset();
                    return;
                }
                self.kv.restore_checkpoint();
                self.stale = None; // the checkpoint's state is exactly that of the n tokens
            }
            self.history.truncate(n);
            self.kv.set_len(n);
        }
    }

    /// Marks the end of a prompt: a hybrid model keeps a copy of its recurrent state here, so
    /// a later prompt that shares these tokens but not what was generated after them can
    /// still start from them.
    pub(crate) fn checkpoint_prompt(&mut self) -> Result<(), EngineError> {
        if self.kv.is_recurrent() {
            self.kv.checkpoint()?;
        }
        Ok(())
    }

    /// Appends `tokens` to the context and returns the logits that follow the last of them.
    /// On error the context is reset, so the engine stays usable.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<&[f32], EngineError> {
        self.eval_unless_cancelled(tokens, None)?;
        Ok(self.logits())
    }

    /// [`Engine::eval`] that checks `cancel` between batches: returns `Ok(false)`, with the
    /// context reset, when it was raised before the last batch finished.
    pub(crate) fn eval_unless_cancelled(
        &mut self,
        tokens: &[u32],
        cancel: Option<&AtomicBool>,
    ) -> Result<bool, EngineError> {
        if tokens.is_empty() {
            return Err(EngineError::Invalid("no tokens to evaluate".into()));
        }
        self.saved = None;
        if self.stale.is_some() {
            // A rolled-back recurrent state: evaluate the tokens it lacks first, exactly.
            self.eval_verify(&[])?;
        }
        let needed = self.history.len() + tokens.len();
        if needed > self.kv.capacity() {
            return Err(EngineError::ContextOverflow {
                prompt: tokens.len(),
                needed,
                ctx: self.kv.capacity(),
            });
        }
        let pool = Arc::clone(&self.pool);
        let decoding = tokens.len() == 1;
        let solo = decoding && self.decode_threads.next_is_solo(1);
        let started = Instant::now();
        let result = pool.install_with(solo, || self.eval_batches(tokens, cancel, 0));
        let secs = started.elapsed().as_secs_f64();
        let added = if matches!(result, Ok(true)) {
            tokens.len()
        } else {
            0
        };
        if decoding && added == 1 {
            self.decode_threads.record(secs);
        }
        self.weights.record_eval(secs, added);
        match result {
            Ok(false) => {
                self.reset();
                Ok(false)
            }
            Ok(true) => {
                self.history.extend_from_slice(tokens);
                self.kv.set_len(self.history.len());
                Ok(true)
            }
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }

    /// Runs `tokens` through the model a batch at a time, or layer-major over the plan's held
    /// rows (`layer_major.rs`); `Ok(false)` when `cancel` was raised between batches (layers).
    /// With `exact` rows (one batch at most) every product runs per token and the last
    /// `exact` rows get logits, each equal to what evaluating its token alone gives; with 0
    /// only the last row gets logits.
    pub(crate) fn eval_batches(
        &mut self,
        tokens: &[u32],
        cancel: Option<&AtomicBool>,
        exact: usize,
    ) -> Result<bool, EngineError> {
        self.before_pass(tokens[0])?;
        let first = self.history.len();
        self.kv.reserve(first + tokens.len())?;
        let mut done = 0;
        let mut out_rows = 1;
        // A prompt longer than a batch, with held rows: layer by layer over them (the same
        // numbers per row; each streamed layer read once per held rows, not per batch).
        // (The plan holds none for a model that cannot: `ModelConfig::prefills_layer_major`.)
        if self.plan.held_rows > 0 && exact == 0 && tokens.len() > self.scratch.batch {
            if !self.layer_major_pass(tokens, cancel, first)? {
                return Ok(false);
            }
            done = tokens.len();
        }
        while done < tokens.len() {
            if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Ok(false);
            }
            let cfg = &self.model.config;
            let (file, tensors) = (&self.model.file, &self.model.tensors);
            let s = &mut self.scratch;
            let n = s.batch.min(tokens.len() - done);
            let pos = first + done;
            let batch = &tokens[done..done + n];
            input_rows(&self.model, &mut self.weights, batch, pos..pos + n, s)?;
            for l in 0..cfg.n_layer {
                let view = self.weights.matrices.layer(file, tensors, l)?;
                let weights = LayerWeights {
                    matrices: &view,
                    vectors: &self.weights.vectors.layers[l],
                    experts: self.weights.experts.as_mut(),
                };
                let rows = Rows::Run(&mut self.kv, pos..pos + n, exact > 0);
                block(cfg, l, weights, s, rows)?;
                if let Some(report) = self.prompt_progress.as_mut().filter(|_| tokens.len() > 1) {
                    report(done + n * (l + 1) / cfg.n_layer, tokens.len());
                }
            }
            done += n;
            let last = done == tokens.len();
            // Only the last row needs logits, unless every row is verified.
            let from = n - exact.clamp(1, n);
            if cfg.mtp {
                // The MTP layer's rows; it keeps the hidden states, normed as below.
                self.mtp_ingest(batch, pos, exact > 0)?;
                if last {
                    self.mtp_output_rows(from, n);
                    out_rows = n - from;
                }
            } else if last {
                let v = &self.weights.vectors;
                output_rows(cfg, &v.output_norm, v.output_hc.as_ref(), s, from, n);
                out_rows = n - from;
            }
        }
        let (file, tensors) = (&self.model.file, &self.model.tensors);
        let e = self.model.config.n_embd;
        let v = tensors.n_vocab;
        self.weights.matrices.logits(
            file,
            tensors,
            &self.scratch.xn[..out_rows * e],
            out_rows,
            &mut self.logits[..out_rows * v],
        )?;
        // A file written to during the pass may have given it a mix of old and new weights.
        self.check_file(tokens[0], "discarded the pass that started reading")?;
        Ok(true)
    }
}

/// How many leading tokens of a prompt of `prompt_len` tokens a context of `held` tokens,
/// whose first `common` agree with the prompt, can keep: at least the last prompt token is
/// evaluated (for its logits), and a recurrent state (hybrid models) cannot be cut back to a
/// shorter prefix: it is kept whole, or back to its checkpoint at the end of the last prompt; a
/// wrapped sliding-window ring only where its slots still hold the prefix's window.
pub(crate) fn reusable_prefix(
    kv: &KvCache,
    common: usize,
    held: usize,
    prompt_len: usize,
) -> usize {
    let keep = common.min(prompt_len.saturating_sub(1));
    if kv.is_recurrent() && keep < held {
        kv.checkpoint_position().filter(|&c| c <= keep).unwrap_or(0)
    } else if !kv.ring_keeps(keep) {
        // A wrapped sliding-window ring no longer holds that prefix's window.
        0
    } else {
        keep
    }
}

/// The input of a pass: each of `tokens`' embedding rows into `s.x` (scaled where the
/// architecture scales them) and the RoPE tables for their `positions`. Shared by prompt
/// batches and batched decoding, so a row starts from the same numbers either way.
pub(crate) fn input_rows(
    model: &Model,
    weights: &mut Weights,
    tokens: &[u32],
    positions: impl ExactSizeIterator<Item = usize> + Clone,
    s: &mut Scratch,
) -> Result<(), EngineError> {
    let (cfg, file, tensors) = (&model.config, &model.file, &model.tensors);
    let (e, n) = (cfg.n_embd, tokens.len());
    // DeepSeek V4: every residual stream starts as the embedding.
    let streams = cfg.residual_streams();
    for (i, &t) in tokens.iter().enumerate() {
        let row = &mut s.x[i * streams * e..(i + 1) * streams * e];
        weights.matrices.embed(file, tensors, t, &mut row[..e])?;
        for h in 1..streams {
            row.copy_within(..e, h * e);
        }
    }
    s.tokens[..n].copy_from_slice(tokens);
    // DeepSeek V4's hash-routed layers: their experts follow from the token ids, so their
    // reads start now, ahead of the layers.
    if let (Some(d), Some(store)) = (&cfg.dsv4, weights.experts.as_mut()) {
        let k = cfg.n_expert_used;
        for h in 0..d.hash_layers {
            if let Some(table) = weights.vectors.layers[h].get(Role::FfnGateTid2eid) {
                let experts: Vec<usize> = tokens
                    .iter()
                    .flat_map(|&t| &table[t as usize * k..(t as usize + 1) * k])
                    .map(|&x| x as usize)
                    .collect();
                store.read_ahead(h, &experts);
            }
        }
    }
    if cfg.arch.scale_embeddings {
        scale(&mut s.x[..n * e], (e as f32).sqrt());
    }
    rope_tables(cfg, weights.vectors.rope_freqs.as_deref(), positions, s);
    Ok(())
}
