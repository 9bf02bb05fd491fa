//! Why a tokenizer could not be built: one line naming the metadata key concerned.

/// Why a tokenizer could not be built; one line naming the metadata key concerned.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The tokenizer metadata is malformed.
    #[error(transparent)]
    Gguf(#[from] ramforge_gguf::GgufError),
    /// A `tokenizer.ggml.model` this tokenizer does not implement.
    #[error("unsupported tokenizer.ggml.model {0:?}: supported are \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece)")]
    UnknownModel(String),
    /// A `tokenizer.ggml.pre` this tokenizer does not know.
    #[error("unknown tokenizer.ggml.pre {name:?}: known pre-tokenizers are {known}")]
    UnknownPre {
        /// The name the file gives.
        name: String,
        /// The names known, for the message.
        known: String,
    },
    /// A tokenizer table or id that does not make sense.
    #[error("{key}: {msg}")]
    Invalid {
        /// The metadata key.
        key: &'static str,
        /// What is wrong with it.
        msg: String,
    },
    /// A special-token id (or id list) under a key not known in advance.
    #[error("{key}: {msg}")]
    BadId {
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        msg: String,
    },
}
