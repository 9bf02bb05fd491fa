//! Why a chat template could not be found or rendered, each reason one line.

/// The metadata key that holds a model's chat template.
pub const TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// Why a chat template could not be found or rendered; one line.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The model has no chat template.
    #[error("the model has no chat template ({TEMPLATE_KEY}); pass one from a file with --template FILE")]
    NoTemplate,
    /// The template metadata is not a string.
    #[error(transparent)]
    Metadata(#[from] ramforge_gguf::GgufError),
    /// The template does not parse.
    #[error("chat template does not compile: {0}; pass a working one with --template FILE")]
    Syntax(String),
    /// Rendering failed (e.g. `raise_exception`).
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// Rendering went past one of the hard limits (named in the message).
    #[error("chat template exceeded {0}")]
    Limit(String),
}
