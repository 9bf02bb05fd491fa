//! Tokenizer behaviour on the real SmolLM2 (byte-level BPE) and Gemma 3 (SentencePiece)
//! vocabularies: flags, end-of-generation tokens, streaming decode that never splits a
//! character, pathological inputs that must stay linear, compact tables, load errors.

mod common;

use common::model_file;
use ramforge_engine::text::tokenizer::{TokenKind, Tokenizer, TokenizerError};
use ramforge_gguf::{GgufFile, Metadata, Value};

fn metadata(name: &str) -> Metadata {
    GgufFile::open(model_file(name))
        .unwrap()
        .header()
        .metadata
        .clone()
}

fn smollm() -> Tokenizer {
    Tokenizer::from_gguf(&metadata("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap()
}

fn gemma() -> Tokenizer {
    Tokenizer::from_gguf(&metadata("gemma-3-270m-q4_k_m.gguf")).unwrap()
}

/// Texts that exercise multi-byte characters, byte fallback and whitespace.
const TEXTS: &[&str] = &[
    "emoji 🙂 and 👍🏽 and 🇫🇷",
    "日本語のテキスト 你好，世界 Привет مرحبا",
    "rare: 𓀀𓁐 ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u{10FFFD}",
    "  leading\ttabs\n\nand trailing   ",
    "<|im_start|>user\nHi<|im_end|>",
];

/// Decoding token by token gives exactly the text: partial characters are held back, never
/// printed as U+FFFD.
fn assert_streams_back(tok: &Tokenizer, name: &str) {
    for text in TEXTS {
        let ids = tok.encode(text, false, false);
        let mut dec = tok.decoder();
        let mut out = String::new();
        let mut held_back = 0;
        for &id in &ids {
            let piece = dec.push(id);
            held_back += usize::from(piece.is_empty());
            out.push_str(&piece);
        }
        out.push_str(&dec.finish());
        assert_eq!(&out, text, "{name}: stream of {ids:?}");
        assert_eq!(tok.decode(&ids), *text, "{name}");
        if text.starts_with("rare") {
            assert!(
                held_back > 0,
                "{name}: rare characters should span several tokens"
            );
        }
    }
}

#[test]
fn streaming_decode_never_splits_characters() {
    assert_streams_back(&smollm(), "SmolLM2");
    assert_streams_back(&gemma(), "Gemma 3");
}

#[test]
fn stream_of_a_cut_character_ends_in_a_replacement() {
    let tok = gemma();
    // "𓀀" is not in Gemma's vocabulary: four <0xXX> byte tokens.
    let ids = tok.encode("𓀀", false, false);
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(ids
        .iter()
        .all(|&id| tok.token_kind(id) == Some(TokenKind::Byte)));
    let mut dec = tok.decoder();
    assert_eq!(dec.push(ids[0]), "");
    assert_eq!(dec.push(ids[1]), "");
    assert_eq!(dec.finish(), "\u{FFFD}");
}

#[test]
fn control_tokens_are_not_printed_unless_asked() {
    let tok = smollm();
    let ids = tok.encode("<|im_start|>user\nHi<|im_end|>", false, true);
    assert_eq!(ids[0], 1);
    assert_eq!(*ids.last().unwrap(), 2);
    assert_eq!(tok.decode(&ids), "user\nHi");
    let mut dec = tok.decoder().with_control_tokens();
    let shown: String = ids.iter().map(|&id| dec.push(id)).collect();
    assert_eq!(shown, "<|im_start|>user\nHi<|im_end|>");
}

#[test]
fn bos_eos_and_end_of_generation_follow_the_files() {
    let s = smollm();
    assert_eq!(s.vocab_size(), 49152);
    assert_eq!(
        (s.bos_id(), s.eos_id(), s.adds_bos()),
        (Some(1), Some(2), false)
    );
    assert_eq!(s.encode("Hello", true, false), [19556]);
    assert!(
        s.is_eog(2) && s.is_eog(0),
        "<|im_end|> and <|endoftext|> end generation"
    );
    assert!(!s.is_eog(1) && !s.is_eog(19556));
    assert_eq!(s.token_text(2), Some("<|im_end|>"));
    assert_eq!(s.token_text(49152), None);

    let g = gemma();
    assert_eq!(g.vocab_size(), 262144);
    assert_eq!(
        (g.bos_id(), g.eos_id(), g.adds_bos()),
        (Some(2), Some(1), true)
    );
    assert_eq!(g.encode("a", true, false), [2, 236746]);
    assert_eq!(g.encode("a", false, false), [236746]);
    let eot = g.encode("<end_of_turn>", false, true);
    assert_eq!(eot.len(), 1);
    assert!(g.is_eog(1) && g.is_eog(eot[0]));
}

#[test]
fn pathological_inputs_round_trip() {
    let many_a = "a".repeat(100_000);
    let no_spaces: String = "abcdefghij0123456789.,;!?éü日本🙂"
        .chars()
        .cycle()
        .take(200_000)
        .collect();
    let spaces = format!("x{}y", " ".repeat(50_000));
    for (name, tok) in [("SmolLM2", smollm()), ("Gemma 3", gemma())] {
        for text in [&many_a, &no_spaces, &spaces] {
            let ids = tok.encode(text, false, false);
            assert!(ids.len() < text.len(), "{name}: merges happened");
            assert_eq!(tok.decode(&ids), *text, "{name}: {}", &text[..20]);
        }
    }
}

#[test]
fn smollm2_tables_are_compact() {
    let bytes = smollm().heap_bytes();
    assert!(
        bytes < 4 << 20,
        "SmolLM2 tokenizer uses {bytes} bytes of tables"
    );
}

/// SmolLM2's metadata with one key replaced.
fn smollm_with(key: &str, value: Value) -> Metadata {
    let mut md = Metadata::new();
    for (k, v) in metadata("SmolLM2-135M-Instruct.Q4_1.gguf").iter() {
        md.insert(
            k.to_string(),
            if k == key { value.clone() } else { v.clone() },
        );
    }
    md
}

fn load_error(md: &Metadata) -> String {
    match Tokenizer::from_gguf(md) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unknown_or_malformed_metadata_is_a_load_error_naming_it() {
    let e = load_error(&smollm_with(
        "tokenizer.ggml.pre",
        Value::String("mystery-pre".into()),
    ));
    assert!(
        e.contains("tokenizer.ggml.pre") && e.contains("mystery-pre"),
        "{e}"
    );
    let e = load_error(&smollm_with(
        "tokenizer.ggml.model",
        Value::String("t5".into()),
    ));
    assert!(
        e.contains("tokenizer.ggml.model") && e.contains("t5"),
        "{e}"
    );
    let e = load_error(&smollm_with(
        "tokenizer.ggml.eos_token_id",
        Value::U32(70_000),
    ));
    assert!(
        e.contains("tokenizer.ggml.eos_token_id") && e.contains("70000"),
        "{e}"
    );
    let e = load_error(&smollm_with("tokenizer.ggml.merges", Value::U32(3)));
    assert!(e.contains("tokenizer.ggml.merges"), "{e}");
    assert!(matches!(
        Tokenizer::from_gguf(&Metadata::new()),
        Err(TokenizerError::Gguf(_))
    ));
}
