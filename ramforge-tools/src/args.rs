//! The clap flags that several commands share, each defined once.
//!
//! Commands take them with `#[command(flatten)]`, so a flag means (and is documented as) the
//! same everywhere; one a single command has, or documents its own way, stays in that command.

use crate::error::CmdError;
use crate::hf::HfSpec;
use ramforge_engine::{KvType, SamplingParams};
use std::path::{Path, PathBuf};

/// Parses a `--ram` value (powers of 1024, e.g. 40M, 1.5G, 512MiB).
pub fn parse_ram(text: &str) -> Result<u64, String> {
    ramforge_engine::parse_memory_size(text).map_err(|e| e.to_string())
}

/// The model of `run`, `chat` and `serve`: a path, positional or as `--model`, or a Hugging
/// Face repository as `--hf`, else the default model (fetched on first use).
#[derive(clap::Args)]
pub struct ModelChoice {
    /// The GGUF model (default: SmolLM2-135M-Instruct Q4_1, fetched on first use).
    model: Option<PathBuf>,
    /// The model, as an option (same as the positional MODEL).
    #[arg(long = "model", value_name = "MODEL", conflicts_with = "model")]
    model_opt: Option<PathBuf>,
    /// A model from the Hugging Face Hub, ORG/REPO[:QUANT or :FILE.gguf], fetched into the
    /// cache and sha256-checked on first use (see `fetch --hf`).
    #[arg(long, value_name = "ORG/REPO[:QUANT]", value_parser = HfSpec::parse,
          conflicts_with_all = ["model", "model_opt"])]
    hf: Option<HfSpec>,
}

impl ModelChoice {
    /// The path to load: the one given, the `--hf` model's (its first part, for a split
    /// model), else the default model's (fetched now if needed, with progress on stderr
    /// unless `quiet`).
    pub fn path(&self, quiet: bool) -> Result<PathBuf, CmdError> {
        if let Some(spec) = &self.hf {
            let files = crate::hf::ensure(spec, crate::hf::offline_from_env(), quiet)?;
            return files
                .into_iter()
                .next()
                .map(|f| f.path)
                .ok_or_else(|| format!("{} gave no files", spec.repo).into());
        }
        crate::default_model::or_default(self.model.clone().or(self.model_opt.clone()), quiet)
    }
}

/// `--template FILE` of `run --chat`, `chat` and `chat-render`: a Jinja chat template to use
/// instead of the model's own.
#[derive(clap::Args)]
pub struct TemplateFile {
    /// Use the Jinja chat template in FILE instead of the model's `tokenizer.chat_template`.
    #[arg(long, value_name = "FILE")]
    pub template: Option<PathBuf>,
}

impl TemplateFile {
    /// The template text from the file, if one was given.
    pub fn read(&self) -> Result<Option<String>, CmdError> {
        read_template(self.template.as_deref())
    }
}

/// The text of the template file `path`, if there is one.
pub fn read_template(path: Option<&Path>) -> Result<Option<String>, CmdError> {
    let Some(path) = path else {
        return Ok(None);
    };
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|e| format!("cannot read template {}: {e}", path.display()).into())
}

/// `--ram` of `run` and `chat`: an optional budget.
#[derive(clap::Args)]
pub struct RamBudget {
    /// Memory budget, e.g. 40M, 1.5G, 512MiB (powers of 1024); default unlimited.
    #[arg(long, value_parser = parse_ram)]
    pub ram: Option<u64>,
}

/// `--lookup`, `--draft`, `--mtp` and `--draft-max` of `run`, `chat` and `serve`: speculative
/// decoding, whose output is that of plain decoding (greedy: token for token; sampled: in
/// distribution).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Speculation {
    /// Draft tokens by prompt lookup (what followed the context's last words where they
    /// occurred before) and verify them several per pass over the weights.
    #[arg(long, conflicts_with_all = ["draft", "mtp"])]
    pub lookup: bool,
    /// Draft tokens with the model file's own MTP (nextn) layer (glm4moe files that carry
    /// one), held resident and charged like the other weights.
    #[arg(long, conflicts_with = "draft")]
    pub mtp: bool,
    /// Draft tokens with this small model (the same vocabulary), inside the one --ram budget.
    #[arg(long, value_name = "MODEL.gguf")]
    pub draft: Option<PathBuf>,
    /// Most tokens drafted per pass (the length adapts to acceptance below it).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub draft_max: u16,
}

/// `--threads` of `run` and `chat`.
#[derive(clap::Args)]
pub struct Workers {
    /// Worker threads (0 = one per core).
    #[arg(short, long, default_value_t = 0)]
    pub threads: usize,
}

/// `--kv-type` of `run` and `plan`.
#[derive(clap::Args)]
pub struct KvCache {
    /// KV cache element type.
    #[arg(long, default_value = "f16")]
    pub kv_type: KvType,
}

/// `--batch` of `run`, `plan`, `bench` and `verify`.
#[derive(clap::Args)]
pub struct PromptBatch {
    /// Prompt tokens processed together at most (under --ram halved, down to 64, until their
    /// activations leave resident every weight a 64-token batch's plan keeps resident).
    #[arg(long, default_value_t = ramforge_engine::DEFAULT_BATCH)]
    pub batch: usize,
}

/// The sampling flags of `run` (`chat` has its own defaults for the two it takes).
#[derive(clap::Args)]
pub struct Sampling {
    /// Sampling temperature; 0 = greedy (the default).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling threshold (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens below this fraction of the top token's probability (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// How many recent tokens the repetition penalty looks at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// RNG seed (same seed, same text).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when the text contains this string (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens (benchmarks).
    #[arg(long)]
    pub ignore_eos: bool,
}

impl Sampling {
    /// The engine's parameters for these flags, generating at most `max_tokens`.
    pub fn params(&self, max_tokens: usize) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logprobs: None,
            seed: self.seed,
            max_tokens,
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            show_control_tokens: false,
        }
    }
}
