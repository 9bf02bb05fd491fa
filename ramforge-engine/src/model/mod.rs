//! The model: an opened, checked GGUF file with its hyper-parameters, architecture, bound tensors
//! and tokenizer. Nothing here reads a weight or charges the budget.

pub mod arch;
mod config;
pub mod dsv4;
mod hybrid;
mod mla;
#[cfg(test)]
mod mla_tests;
mod tensors;

pub use arch::{Architecture, RopeStyle};
pub use config::{
    AttentionKind, FfnKind, IndexerConfig, LayerKind, MlaConfig, ModelConfig, RouterConfig,
    YarnConfig,
};
pub use hybrid::DeltaNetConfig;
pub use tensors::{is_float_type, LayerTensors, ModelTensors};

use crate::error::EngineError;
use crate::text::Tokenizer;
use ramforge_gguf::GgufFile;
use std::path::Path;
use std::sync::Arc;

/// Metadata arrays dropped once the tokenizer is built (use `model.tokenizer` instead).
pub const DROPPED_METADATA: &[&str] = &[
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.scores",
];

/// An opened, checked model file: hyperparameters, tensor table and tokenizer. Holds no
/// weights. (The tokenizer's tables and the header are not charged to the budget.)
pub struct Model {
    /// The open file: header, metadata and the handle weights are read through.
    pub file: GgufFile,
    /// The hyperparameters.
    pub config: ModelConfig,
    /// Every tensor the forward pass reads, bound and checked.
    pub tensors: ModelTensors,
    /// The tokenizer built from the metadata.
    pub tokenizer: Arc<Tokenizer>,
}

impl Model {
    /// Opens a GGUF file and checks everything the forward pass needs.
    pub fn open(path: impl AsRef<Path>) -> Result<Model, EngineError> {
        let mut file = GgufFile::open(path)?;
        let config = ModelConfig::from_metadata(&file.header().metadata)?;
        let tensors = ModelTensors::find(&file, &config)?;
        let tokenizer = Tokenizer::from_gguf(&file.header().metadata)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        // The tokenizer has its own copy of these; as metadata values they would cost several
        // uncharged MiB for the engine's lifetime (chat templates get the BOS/EOS texts from
        // the tokenizer: `ChatPrompt::for_model`).
        for key in DROPPED_METADATA {
            file.metadata_mut().remove(key);
        }
        Ok(Model {
            file,
            config,
            tensors,
            tokenizer: Arc::new(tokenizer),
        })
    }

    /// Holds the file's first MTP (nextn) layer to draft with (`--mtp`): bound and checked
    /// here, then layer `n_layer` of the tensors, so the plan charges and pins it and the KV
    /// cache keeps its rows. Refused with one line where the file has none or the
    /// architecture's MTP layer is not one this engine runs.
    pub fn enable_mtp(&mut self) -> Result<(), EngineError> {
        let cfg = &self.config;
        if cfg.mtp {
            return Ok(());
        }
        if cfg.n_layer_nextn == 0 {
            return Err(EngineError::Unsupported(format!(
                "--mtp: this {} file has no MTP (nextn) layer ({}.nextn_predict_layers)",
                cfg.arch.name, cfg.arch.name
            )));
        }
        if !MTP_ARCHITECTURES.contains(&cfg.arch.name) {
            return Err(EngineError::Unsupported(format!(
                "--mtp: the MTP layers of {} files are not supported yet (only {})",
                cfg.arch.name,
                MTP_ARCHITECTURES.join(", ")
            )));
        }
        let layer = ModelTensors::bind_mtp_layer(&self.file, cfg)?;
        self.tensors.layers.push(layer);
        self.config.mtp = true;
        Ok(())
    }
}

/// Architectures whose MTP layer drafts (`--mtp`): each checked against llama.cpp's.
pub const MTP_ARCHITECTURES: &[&str] = &["glm4moe", "deepseek2", "glm-dsa", "qwen35moe"];
