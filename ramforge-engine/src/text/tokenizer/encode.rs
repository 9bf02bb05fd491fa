//! The tokenizer: built from GGUF metadata, encoding text into ids step by step as llama.cpp
//! does (special tokens split out first, then each fragment through BPE or SentencePiece).

use super::bpe::{Bpe, BpeScratch};
use super::checks::{per_token_arrays, special_ids_in_range};
use super::error::TokenizerError;
use super::special::{Fragment, SpecialTokens};
use super::spm::{Spm, SpmScratch};
use super::vocab::{TokenKind, Vocab};
use super::{pretokenize, spm};
use ramforge_gguf::{Metadata, Value, ValueType};

/// The `tokenizer.ggml.model` values a tokenizer can be built for, with their algorithm
/// (the README's support table is checked against it).
pub const SUPPORTED_MODELS: &[(&str, &str)] =
    &[("gpt2", "byte-level BPE"), ("llama", "SentencePiece")];

/// The model's tokenization algorithm.
pub(super) enum Model {
    Bpe(Bpe),
    Spm(Spm),
}

/// A model's tokenizer: text to token ids and back, as llama.cpp does it for the same file.
pub struct Tokenizer {
    pub(super) vocab: Vocab,
    pub(super) model: Model,
    pub(super) specials: SpecialTokens,
    pub(super) bos: Option<u32>,
    pub(super) eos: Option<u32>,
    pub(super) add_bos: bool,
    pub(super) add_eos: bool,
    /// SentencePiece: put a space before text that starts the input or follows a special token.
    pub(super) add_space_prefix: bool,
    /// End-of-generation tokens, sorted.
    pub(super) eog: Vec<u32>,
}

/// Token texts llama.cpp treats as end of generation (and as control tokens).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Fill-in-the-middle tokens: metadata key, the texts llama.cpp recognises when the key is
/// absent, and whether the token ends generation. Recognised ones become control tokens.
const FIM_SLOTS: &[(&str, &[&str], bool)] = &[
    (
        "tokenizer.ggml.fim_pre_token_id",
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
        false,
    ),
    (
        "tokenizer.ggml.fim_suf_token_id",
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
        false,
    ),
    (
        "tokenizer.ggml.fim_mid_token_id",
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
        false,
    ),
    (
        "tokenizer.ggml.fim_pad_token_id",
        &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
        true,
    ),
    (
        "tokenizer.ggml.fim_rep_token_id",
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
        true,
    ),
    ("tokenizer.ggml.fim_sep_token_id", &["<|file_sep|>"], true),
];

impl Tokenizer {
    /// Builds the tokenizer from a model's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(md: &Metadata) -> Result<Tokenizer, TokenizerError> {
        let model_name = md.get_str("tokenizer.ggml.model")?;
        let is_bpe = match model_name {
            "gpt2" => true,
            "llama" => false,
            other => return Err(TokenizerError::UnknownModel(other.to_string())),
        };
        let pre = if is_bpe { Some(pre_spec(md)?) } else { None };

        let tokens = string_array(md, "tokenizer.ggml.tokens")?;
        let n = tokens.len();
        per_token_arrays(md, n)?;
        let kinds = match md.get("tokenizer.ggml.token_type") {
            None => vec![TokenKind::Normal; n],
            Some(_) => {
                let types = md.get_i64_array("tokenizer.ggml.token_type")?;
                types.iter().map(|&t| TokenKind::from_type_id(t)).collect()
            }
        };
        let mut vocab = Vocab::new(tokens.into_iter(), kinds)?;
        special_ids_in_range(md, n)?;

        // In range: every `*_token_id` was checked above.
        let special_id = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
            if !md.contains(key) {
                return Ok(None);
            }
            Ok(Some(md.get_u32(key)?))
        };
        // llama.cpp's defaults for SentencePiece files that do not name these tokens.
        let spm_default = |id: u32| (!is_bpe && (id as usize) < n).then_some(id);
        let bos = special_id("tokenizer.ggml.bos_token_id")?.or(spm_default(1));
        let eos = special_id("tokenizer.ggml.eos_token_id")?.or(spm_default(2));
        let unk = special_id("tokenizer.ggml.unknown_token_id")?.or(spm_default(0));

        let mut eog = Vec::new();
        eog.extend(eos);
        eog.extend(special_id("tokenizer.ggml.eot_token_id")?);
        eog.extend(special_id("tokenizer.ggml.eom_token_id")?);
        for text in EOG_TEXTS {
            if let Some(id) = vocab.id_of(text) {
                eog.push(id);
                vocab.set_kind(id, TokenKind::Control);
            }
        }
        for &(key, texts, ends_generation) in FIM_SLOTS {
            let id = match special_id(key)? {
                Some(id) => Some(id),
                None => texts.iter().filter_map(|t| vocab.id_of(t)).min(),
            };
            if let Some(id) = id {
                vocab.set_kind(id, TokenKind::Control);
                if ends_generation {
                    eog.push(id);
                }
            }
        }
        eog.sort_unstable();
        eog.dedup();

        let add_bos = opt_bool(md, "tokenizer.ggml.add_bos_token")?
            .unwrap_or(pre.map_or(!is_bpe, |p| p.add_bos));
        let add_eos = opt_bool(md, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(TokenizerError::Invalid {
                key: "tokenizer.ggml.bos_token_id",
                msg: "missing, but add_bos_token is true".into(),
            });
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::Invalid {
                key: "tokenizer.ggml.eos_token_id",
                msg: "missing, but add_eos_token is true".into(),
            });
        }
        let add_space_prefix =
            !is_bpe && opt_bool(md, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);

        let model = match pre {
            Some(pre) => {
                let merges = string_array(md, "tokenizer.ggml.merges")?;
                Model::Bpe(Bpe::new(&vocab, merges.into_iter(), &pre)?)
            }
            None => {
                let scores = md.get_f32_array("tokenizer.ggml.scores")?;
                Model::Spm(Spm::new(&vocab, scores, unk)?)
            }
        };
        let specials = SpecialTokens::new(&vocab)?;
        Ok(Tokenizer {
            vocab,
            model,
            specials,
            bos,
            eos,
            add_bos,
            add_eos,
            add_space_prefix,
            eog,
        })
    }

    /// Text to token ids.
    /// `add_special`: add BOS/EOS per the model's `add_bos_token`/`add_eos_token` (llama.cpp's
    /// add_special). `parse_special`: recognise control tokens like `<|im_start|>` in the text
    /// (llama.cpp's parse_special); user-defined tokens are always recognised.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        let fragments = self.specials.partition(&self.vocab, text, parse_special);
        match &self.model {
            Model::Bpe(bpe) => {
                let mut scratch = BpeScratch::default();
                for f in fragments {
                    match f {
                        Fragment::Text(r) => {
                            bpe.encode(&self.vocab, &text[r], &mut out, &mut scratch)
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Model::Spm(spm) => {
                let mut scratch = SpmScratch::default();
                let mut escaped = String::new();
                let mut prev_special = true;
                for f in fragments {
                    match f {
                        Fragment::Text(r) => {
                            escaped.clear();
                            if self.add_space_prefix && prev_special {
                                escaped.push('\u{2581}');
                            }
                            spm::escape_spaces(&text[r], &mut escaped);
                            spm.encode(&self.vocab, &escaped, &mut out, &mut scratch);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        out
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The BOS token id, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The EOS token id, if the model has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// End of generation: EOS, EOT, `<|im_end|>`-style tokens, as llama.cpp determines them.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The end-of-generation tokens, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// The bytes a token prints as (control tokens included; may be part of a character).
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let mut out = Vec::new();
        self.piece_bytes(id, true, &mut out);
        out
    }

    /// The raw vocabulary piece of a token.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.vocab.len()).then(|| self.vocab.piece(id))
    }

    /// What kind of token `id` is (after llama.cpp's promotions of EOG/FIM tokens to control).
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        ((id as usize) < self.vocab.len()).then(|| self.vocab.kind(id))
    }

    /// Bytes of heap memory the tokenizer's tables use.
    pub fn heap_bytes(&self) -> usize {
        let model = match &self.model {
            Model::Bpe(b) => b.heap_bytes(),
            Model::Spm(s) => s.heap_bytes(),
        };
        self.vocab.heap_bytes() + model + self.specials.heap_bytes() + self.eog.capacity() * 4
    }
}

/// The pre-tokenizer a gpt2 model names; missing or unknown names are errors.
fn pre_spec(md: &Metadata) -> Result<pretokenize::PreSpec, TokenizerError> {
    if !md.contains("tokenizer.ggml.pre") {
        return Err(TokenizerError::Invalid {
            key: "tokenizer.ggml.pre",
            msg: "missing; a gpt2 tokenizer needs its pre-tokenizer named (re-convert the model with a current llama.cpp)".into(),
        });
    }
    let name = md.get_str("tokenizer.ggml.pre")?;
    pretokenize::spec(name).ok_or_else(|| TokenizerError::UnknownPre {
        name: name.to_string(),
        known: pretokenize::KNOWN.join(", "),
    })
}

/// The elements of an array of strings, without copying them.
fn string_array<'a>(md: &'a Metadata, key: &'static str) -> Result<Vec<&'a str>, TokenizerError> {
    let (t, items) = md.get_array(key)?;
    if t != ValueType::String {
        return Err(TokenizerError::Invalid {
            key,
            msg: format!(
                "expected an array of string, found an array of {}",
                t.name()
            ),
        });
    }
    Ok(items.iter().filter_map(Value::as_str).collect())
}

fn opt_bool(md: &Metadata, key: &str) -> Result<Option<bool>, TokenizerError> {
    if md.contains(key) {
        Ok(Some(md.get_bool(key)?))
    } else {
        Ok(None)
    }
}
