//! Text in and out: the tokenizer (token-for-token as llama.cpp), chat templates (rendered as
//! Hugging Face does) and prompt building (the two together, with the BOS rule).

mod isolate;
pub mod limits;
pub mod prompt;
pub mod render_server;
pub mod template;
mod template_error;
pub mod tokenizer;

pub use prompt::ChatPrompt;
pub use template::{ChatError, ChatMessage};
pub use tokenizer::Tokenizer;
