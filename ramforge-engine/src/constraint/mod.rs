//! Constrained sampling: a grammar (a JSON schema, any JSON object, a Lark or GBNF grammar)
//! turned into a per-step mask of the tokens that keep the output inside it, by `llguidance`
//! (the library llama.cpp and mistral.rs use). A [`GrammarCompiler`] is made once per model (it
//! indexes the vocabulary); each request compiles its grammar into a [`Constraint`], which the
//! sequence's [`Decoding`](crate::Decoding) applies before sampling and advances after.
//!
//! Grammars come from requests and are untrusted: compiling and every mask run under
//! llguidance's fuel and size limits ([`limits`]), so a huge, deep or ambiguous grammar is an
//! error naming the limit, never a hang or an unbounded allocation.

mod gbnf;
mod tokenizer_env;

pub use gbnf::gbnf_to_lark;

use crate::text::Tokenizer;
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{InferenceCapabilities, TokEnv};
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// A value of this JSON schema (OpenAI's `json_schema`, strict).
    JsonSchema(serde_json::Value),
    /// A grammar in llguidance's Lark syntax.
    Lark(String),
    /// A grammar in llama.cpp's GBNF syntax (converted to Lark).
    Gbnf(String),
}

/// Most grammar symbols a compiled grammar may hold (llguidance's `max_grammar_size`).
pub const MAX_GRAMMAR_SIZE: usize = 100_000;
/// Most bytes of grammar text (a Lark or GBNF grammar, or a JSON schema as JSON) compiled: the
/// compile time grows faster than linearly with the grammar (60 000 alternatives take seconds),
/// and real schemas and grammars are a few kilobytes.
pub const MAX_GRAMMAR_BYTES: usize = 64 << 10;
/// Deepest nesting of arrays and objects a JSON schema may have (serde_json reads no deeper
/// from a request; llguidance compiles it
/// recursively).
pub const MAX_SCHEMA_DEPTH: usize = 128;
/// Most lexer states (each costs 1-2 KB; llguidance's `max_lexer_states`).
pub const MAX_LEXER_STATES: usize = 20_000;

/// The limits every grammar compiles and runs under: llguidance's defaults (fuel for building
/// the lexer and for each mask: tens of milliseconds at most), with the grammar size and the
/// lexer's memory cut to what a server can hold for many requests.
pub fn limits() -> ParserLimits {
    ParserLimits {
        max_grammar_size: MAX_GRAMMAR_SIZE,
        max_lexer_states: MAX_LEXER_STATES,
        verbose_errors: false,
        ..ParserLimits::default()
    }
}

/// Compiles grammars for one model's vocabulary.
pub struct GrammarCompiler {
    factory: ParserFactory,
    eog: Arc<[u32]>,
    vocab: usize,
}

impl GrammarCompiler {
    /// A compiler for `tokenizer`'s vocabulary (indexes every token's bytes: made once per
    /// model).
    pub fn new(tokenizer: Arc<Tokenizer>) -> Result<GrammarCompiler, String> {
        let eog: Arc<[u32]> = tokenizer.eog_ids().into();
        let vocab = tokenizer.vocab_size();
        let env: TokEnv = Arc::new(tokenizer_env::TokenizerEnv::new(tokenizer)?);
        let mut factory = ParserFactory::new(
            &env,
            InferenceCapabilities::default(),
            &llguidance::earley::SlicedBiasComputer::general_slices(),
        )
        .map_err(|e| one_line(&e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = limits();
        Ok(GrammarCompiler {
            factory,
            eog,
            vocab,
        })
    }

    /// Compiles `grammar`; the error (one line) says what is wrong or which limit it broke.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, String> {
        let bytes = match grammar {
            Grammar::JsonObject => 0,
            Grammar::JsonSchema(schema) => schema.to_string().len(),
            Grammar::Lark(text) | Grammar::Gbnf(text) => text.len(),
        };
        if bytes > MAX_GRAMMAR_BYTES {
            return Err(format!(
                "the grammar is {bytes} bytes, over the limit of {MAX_GRAMMAR_BYTES} bytes"
            ));
        }
        let top = match grammar {
            Grammar::JsonObject => {
                TopLevelGrammar::from_json_schema(serde_json::json!({"type": "object"}))
            }
            Grammar::JsonSchema(schema) => {
                if depth(schema) > MAX_SCHEMA_DEPTH {
                    return Err(format!(
                        "the JSON schema is nested deeper than the limit of {MAX_SCHEMA_DEPTH} levels"
                    ));
                }
                TopLevelGrammar::from_json_schema(schema.clone())
            }
            Grammar::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            Grammar::Gbnf(text) => TopLevelGrammar::from_lark(gbnf_to_lark(text)?),
        };
        let parser = self.factory.create_parser(top);
        let matcher = Matcher::new(parser);
        if let Some(e) = matcher.get_error() {
            return Err(one_line(&e));
        }
        Ok(Constraint {
            matcher,
            eog: Arc::clone(&self.eog),
            vocab: self.vocab,
        })
    }
}

/// One request's grammar, advanced token by token.
pub struct Constraint {
    matcher: Matcher,
    eog: Arc<[u32]>,
    vocab: usize,
}

impl Constraint {
    /// Sets the logits of the tokens the grammar does not allow next to `-inf`. When the
    /// output may end here, every end-of-generation token is allowed.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        let mask = self
            .matcher
            .compute_mask()
            .map_err(|e| one_line(&e.to_string()))?;
        let may_end = self.eog.iter().any(|&t| mask.is_allowed(t));
        for (id, l) in logits.iter_mut().enumerate() {
            let allowed = id < self.vocab
                && (mask.is_allowed(id as u32) || (may_end && self.eog.contains(&(id as u32))));
            if !allowed {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Advances past the sampled token `id` (one the mask allowed).
    pub fn commit(&mut self, id: u32) -> Result<(), String> {
        self.matcher
            .consume_token(id)
            .map_err(|e| one_line(&e.to_string()))
    }

    /// Whether the grammar is complete and allows nothing more (generation must end).
    pub fn is_stopped(&self) -> bool {
        self.matcher.is_stopped()
    }
}

/// How deep arrays and objects nest in `value` (a scalar is 0), found without recursion.
fn depth(value: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            serde_json::Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            serde_json::Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// The first line of an llguidance message, at most 300 bytes: an HTTP error's message.
fn one_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or("").trim();
    let mut end = line.len().min(300);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}
