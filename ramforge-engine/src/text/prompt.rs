//! Prompt building: a conversation rendered with a chat template and tokenized, with BOS added
//! only when the template did not write it itself.

use super::template::{
    bos_eos_texts, model_chat_template, render_chat, render_chat_tools, ChatError, ChatMessage,
};
use super::tokenizer::Tokenizer;
use ramforge_gguf::Metadata;

/// A chat template bound to a model's BOS and EOS texts: turns conversations into prompt
/// tokens the way `run --chat`, `chat` and the server all do.
#[derive(Clone, Debug)]
pub struct ChatPrompt {
    template: String,
    bos: String,
    eos: String,
}

/// `template` when given (e.g. from `--template FILE`), else the model's own.
fn chosen_template(meta: &Metadata, template: Option<String>) -> Result<String, ChatError> {
    match template {
        Some(t) => Ok(t),
        None => Ok(model_chat_template(meta)?.to_string()),
    }
}

impl ChatPrompt {
    /// The model's own template (`tokenizer.chat_template`), or `template` instead when
    /// given (e.g. from `--template FILE`).
    pub fn new(meta: &Metadata, template: Option<String>) -> Result<ChatPrompt, ChatError> {
        let template = chosen_template(meta, template)?;
        let (bos, eos) = bos_eos_texts(meta);
        Ok(ChatPrompt { template, bos, eos })
    }

    /// [`ChatPrompt::new`] for an opened model, whose metadata no longer holds the token texts
    /// (`Model::open` drops them): the BOS and EOS texts come from its tokenizer.
    pub fn for_model(
        meta: &Metadata,
        tokenizer: &Tokenizer,
        template: Option<String>,
    ) -> Result<ChatPrompt, ChatError> {
        let template = chosen_template(meta, template)?;
        let text = |key: &str| {
            meta.get_u32(key)
                .ok()
                .and_then(|id| tokenizer.token_text(id))
                .unwrap_or_default()
                .to_string()
        };
        let (bos, eos) = (
            text("tokenizer.ggml.bos_token_id"),
            text("tokenizer.ggml.eos_token_id"),
        );
        Ok(ChatPrompt { template, bos, eos })
    }

    /// The conversation rendered as text, ending with the assistant's turn when
    /// `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        render_chat(
            &self.template,
            messages,
            add_generation_prompt,
            &self.bos,
            &self.eos,
        )
    }

    /// The conversation as prompt tokens, ending with the assistant's turn. A template that
    /// writes BOS itself does not get a second one.
    pub fn tokens(
        &self,
        tokenizer: &Tokenizer,
        messages: &[ChatMessage],
    ) -> Result<Vec<u32>, ChatError> {
        Ok(self.prompt(tokenizer, messages, None)?.1)
    }

    /// The template's text (the server reads its tool-call convention from it).
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The conversation with `tools` (the template's `tools` variable) rendered, ending with
    /// the assistant's turn, and its tokens (BOS as in [`ChatPrompt::tokens`]).
    pub fn prompt(
        &self,
        tokenizer: &Tokenizer,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
    ) -> Result<(String, Vec<u32>), ChatError> {
        let rendered =
            render_chat_tools(&self.template, messages, tools, true, &self.bos, &self.eos)?;
        let add_special = self.bos.is_empty() || !rendered.starts_with(&self.bos);
        let tokens = tokenizer.encode(&rendered, add_special, true);
        Ok((rendered, tokens))
    }
}

/// A message of `role` saying `content`.
pub fn message(role: &str, content: &str) -> ChatMessage {
    ChatMessage {
        role: role.to_string(),
        content: content.to_string(),
        ..ChatMessage::default()
    }
}
