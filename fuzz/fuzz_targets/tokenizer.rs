#![no_main]
//! Tokenizer fuzzing on the real vocabularies (SmolLM2's byte-level BPE, Gemma 3's
//! SentencePiece, from `$RAMFORGE_MODELS`): encoding any text and decoding any ids never
//! panics, ids stay in the vocabulary, and valid UTF-8 decodes back to itself, whole and
//! streamed -- the round trip `tests/tokenizer_behaviour.rs` asserts (plain encoding, no
//! special tokens added or parsed), where it holds: a byte the BPE vocabulary has no token for
//! is dropped (as llama.cpp drops it; SmolLM2 lacks 0x04 0x06 0x13 0x14 0x16 0x1D), and a
//! literal U+2581 reads back as a space in SentencePiece.

use libfuzzer_sys::fuzz_target;
use ramforge_engine::text::Tokenizer;
use ramforge_gguf::GgufFile;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::OnceLock;

const MODELS: [&str; 2] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma-3-270m-q4_k_m.gguf",
];

/// A tokenizer and, for byte-level BPE, which bytes its vocabulary has a token for.
struct Vocabulary {
    tok: Tokenizer,
    bytes: Option<[bool; 256]>,
}

impl Vocabulary {
    fn new(tok: Tokenizer) -> Vocabulary {
        let pieces: HashSet<&str> = (0..tok.vocab_size() as u32)
            .filter_map(|id| tok.token_text(id))
            .collect();
        // GPT-2's alphabet writes a space as "Ġ"; SentencePiece as "▁".
        let bpe = pieces.contains("\u{120}the");
        let bytes = bpe.then(|| {
            std::array::from_fn(|b| {
                let mut buf = [0; 4];
                pieces.contains(&*gpt2_char(b as u8).encode_utf8(&mut buf))
            })
        });
        Vocabulary { tok, bytes }
    }

    /// Whether `decode(encode(text)) == text` holds for this vocabulary.
    fn round_trips(&self, text: &str) -> bool {
        match &self.bytes {
            Some(has) => text.bytes().all(|b| has[b as usize]),
            None => !text.contains('\u{2581}'),
        }
    }
}

/// GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest for U+0100 on.
fn gpt2_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 33..=126 | 161..=172 | 174..=255);
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// The two tokenizers, loaded once; a missing model file stops the fuzzer loudly.
fn tokenizers() -> &'static [Vocabulary] {
    static TOKENIZERS: OnceLock<Vec<Vocabulary>> = OnceLock::new();
    TOKENIZERS.get_or_init(|| {
        let dir = std::env::var_os("RAMFORGE_MODELS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models"));
        MODELS
            .iter()
            .map(|m| {
                let path = dir.join(m);
                let file = GgufFile::open(&path).unwrap_or_else(|e| {
                    panic!(
                        "the tokenizer target needs {} ({e}); set RAMFORGE_MODELS",
                        path.display()
                    )
                });
                Vocabulary::new(Tokenizer::from_gguf(&file.header().metadata).unwrap())
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let vocabulary = &tokenizers()[usize::from(flags & 1)];
    let tok = &vocabulary.tok;
    let (add_special, parse_special) = (flags & 2 != 0, flags & 4 != 0);
    let text = String::from_utf8_lossy(rest);
    let ids = tok.encode(&text, add_special, parse_special);
    assert!(ids.iter().all(|&id| (id as usize) < tok.vocab_size()));
    let back = tok.decode(&ids);
    let plain = !add_special && !parse_special;
    if plain && std::str::from_utf8(rest).is_ok() && vocabulary.round_trips(&text) {
        assert_eq!(back, text, "decode(encode(s)) of {ids:?}");
        let mut dec = tok.decoder();
        let mut streamed: String = ids.iter().map(|&id| dec.push(id)).collect();
        streamed.push_str(&dec.finish());
        assert_eq!(streamed, text, "streamed decode of {ids:?}");
    }
    // Any ids at all, in range or not.
    let raw: Vec<u32> = rest
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) % (2 * tok.vocab_size() as u32))
        .collect();
    let _ = tok.decode(&raw);
    let mut dec = tok.decoder();
    for &id in &raw {
        let _ = dec.push(id);
    }
    let _ = dec.finish();
});
