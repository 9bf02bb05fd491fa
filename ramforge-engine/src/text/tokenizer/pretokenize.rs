//! Pre-tokenizers of byte-level BPE models: the text is cut into words by a list of regexes
//! chosen by `tokenizer.ggml.pre`, exactly as llama.cpp does it: each regex in turn splits every
//! piece left by the previous one, and the text between matches stays a piece of its own.
//!
//! The regexes are llama.cpp's (which adapts the models' `tokenizer.json` patterns, e.g. case
//! folding spelled out as `[sS]`), run by the linear-time `regex` crate with true Unicode
//! classes. That crate has no lookaround, so two constructs are rewritten without changing any
//! split: `(?=[\p{L}])([^a-z])` becomes the class `[\p{L}--a-z]`, and the usual tail
//! `\s+(?!\S)|\s+` becomes `\s+` plus a rule applied to each match ([`GiveBack`]): a
//! whitespace-only match of two or more characters followed by a non-space gives its last
//! character back to the next word (so " x" stays one word after "   ").

use super::error::TokenizerError;
use regex::Regex;
use std::ops::Range;

/// GPT-2's pattern; `\s+` stands for `\s+(?!\S)` (see the module doc).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";
/// Llama 3's pattern (numbers in groups of up to three); `\s+` stands for `\s+(?!\S)|\s+`.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";
/// Qwen 2's pattern: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";
/// GPT-4o's pattern as llama.cpp adapts it: runs of letters that are not a-z, then letters
/// that are not A-Z (or the reverse), written as class differences.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{L}--a-z]*[\p{L}--A-Z]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{L}--a-z]+[\p{L}--A-Z]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+";
/// CJK ranges used by the DeepSeek pre-tokenizers.
const DEEPSEEK_CJK: &str = "[一-龥ࠀ-一가-퟿]+";

const DEFAULT_LIST: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"];
const GPT2_LIST: &[&str] = &[GPT2];
const LLAMA3_LIST: &[&str] = &[LLAMA3];
const QWEN2_LIST: &[&str] = &[QWEN2];
const SMOLLM_LIST: &[&str] = &[r"\p{N}", GPT2];
const GPT4O_LIST: &[&str] = &[GPT4O];
const DEEPSEEK_CODER_LIST: &[&str] =
    &["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"];
const DEEPSEEK_LLM_LIST: &[&str] = &[
    "[\r\n]",
    concat!(
        "\\s?[",
        "\u{0041}-\u{005A}\u{0061}-\u{007A}\u{00B5}\u{00C0}-\u{00D6}\u{00D8}-\u{00F6}",
        "\u{00F8}-\u{01BA}\u{01BC}-\u{01BF}\u{01C4}-\u{0293}\u{0295}-\u{02AF}",
        "\u{0370}-\u{0373}\u{0376}\u{0377}\u{037B}-\u{037D}\u{037F}\u{0386}",
        "\u{0388}-\u{038A}\u{038C}\u{038E}-\u{03A1}\u{03A3}-\u{03F5}\u{03F7}-\u{0481}",
        "\u{048A}-\u{052F}\u{0531}-\u{0556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}",
        "\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}",
        "\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}",
        "\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}",
        "\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}",
        "\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}",
        "\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}",
        "\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}",
        "\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}",
        "\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}",
        "\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}",
        "\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}",
        "\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}",
        "\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}",
        "\u{1E900}-\u{1E943}",
        "]+"
    ),
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    DEEPSEEK_CJK,
    r"\p{N}+",
];

/// What a `tokenizer.ggml.pre` name selects.
#[derive(Clone, Copy, Debug)]
pub struct PreSpec {
    pub regexes: &'static [&'static str],
    /// A word that is itself a token is emitted whole, without running merges (Llama 3).
    pub ignore_merges: bool,
    /// llama.cpp's default for `add_bos_token` when the file does not say.
    pub add_bos: bool,
}

/// The pre-tokenizer names this crate knows (llama.cpp's spelling, plus `gpt2`).
pub const KNOWN: &[&str] = &[
    "default",
    "gpt2",
    "gpt-2",
    "phi-2",
    "mpt",
    "olmo",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "dbrx",
    "smaug-bpe",
    "qwen2",
    "deepseek-r1-qwen",
    "stablelm2",
    "megrez",
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva-7b",
    "deepseek-llm",
    "deepseek-coder",
    "gpt-4o",
    "llama4",
];

/// The pre-tokenizer for a `tokenizer.ggml.pre` name, or None when it is not one we know.
pub fn spec(name: &str) -> Option<PreSpec> {
    let plain = |regexes| PreSpec {
        regexes,
        ignore_merges: false,
        add_bos: false,
    };
    Some(match name {
        "default" => plain(DEFAULT_LIST),
        "gpt2" | "gpt-2" | "phi-2" | "mpt" | "olmo" => plain(GPT2_LIST),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" => PreSpec {
            regexes: LLAMA3_LIST,
            ignore_merges: true,
            add_bos: true,
        },
        "dbrx" | "smaug-bpe" => plain(LLAMA3_LIST),
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "megrez" => plain(QWEN2_LIST),
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            plain(SMOLLM_LIST)
        }
        "deepseek-llm" => plain(DEEPSEEK_LLM_LIST),
        "deepseek-coder" => plain(DEEPSEEK_CODER_LIST),
        "gpt-4o" | "llama4" => plain(GPT4O_LIST),
        _ => return None,
    })
}

/// How a pattern's final `\s+` branch stands for `\s+(?!\S)`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GiveBack {
    /// The pattern has no such branch.
    Never,
    /// Every whitespace-only match comes from it (GPT-2).
    Always,
    /// Whitespace-only matches that end in `\r`/`\n` come from `\s*[\r\n]+` (Llama 3 family).
    UnlessNewlineEnd,
}

fn give_back_rule(re: &str) -> GiveBack {
    if re == GPT2 {
        GiveBack::Always
    } else if [LLAMA3, QWEN2, GPT4O].contains(&re) {
        GiveBack::UnlessNewlineEnd
    } else {
        GiveBack::Never
    }
}

/// One compiled splitting regex.
struct Splitter {
    re: Regex,
    give_back: GiveBack,
}

/// A compiled list of splitting regexes.
pub struct PreTokenizer {
    splitters: Vec<Splitter>,
}

impl PreTokenizer {
    pub fn new(spec: &PreSpec) -> Result<PreTokenizer, TokenizerError> {
        let splitters = spec
            .regexes
            .iter()
            .map(|&re| {
                let compiled = Regex::new(re).map_err(|e| TokenizerError::Invalid {
                    key: "tokenizer.ggml.pre",
                    msg: format!("pre-tokenizer regex {re:?} does not compile: {e}"),
                })?;
                Ok(Splitter {
                    re: compiled,
                    give_back: give_back_rule(re),
                })
            })
            .collect::<Result<_, TokenizerError>>()?;
        Ok(PreTokenizer { splitters })
    }

    /// Cuts `text` into words (byte ranges, in order, covering all of it); `scratch` is reused.
    pub fn split(
        &self,
        text: &str,
        words: &mut Vec<Range<usize>>,
        scratch: &mut Vec<Range<usize>>,
    ) {
        words.clear();
        if text.is_empty() {
            return;
        }
        words.push(0..text.len());
        for sp in &self.splitters {
            std::mem::swap(words, scratch);
            words.clear();
            for piece in scratch.iter() {
                sp.split(&text[piece.clone()], piece.start, words);
            }
        }
    }
}

impl Splitter {
    /// Splits one piece (`hay`, at offset `base` of the text): matches and the gaps between
    /// them, in order.
    fn split(&self, hay: &str, base: usize, out: &mut Vec<Range<usize>>) {
        let (mut last, mut at) = (0, 0);
        while at < hay.len() {
            let Some(m) = self.re.find_at(hay, at) else {
                break;
            };
            let mut end = m.end();
            if self.give_back != GiveBack::Never {
                end = give_back_end(hay, m.start(), end, self.give_back);
            }
            if end == m.start() {
                // An empty match: step over one character.
                at = end + hay[end..].chars().next().map_or(1, char::len_utf8);
                continue;
            }
            if m.start() > last {
                out.push(base + last..base + m.start());
            }
            out.push(base + m.start()..base + end);
            last = end;
            at = end;
        }
        if last < hay.len() {
            out.push(base + last..base + hay.len());
        }
    }
}

/// `\s+(?!\S)`: a whitespace-only match of two or more characters that is followed by a
/// non-space ends one character early.
fn give_back_end(hay: &str, start: usize, end: usize, rule: GiveBack) -> usize {
    let run = &hay[start..end];
    let followed_by_text = hay[end..]
        .chars()
        .next()
        .is_some_and(|c| !c.is_whitespace());
    if !followed_by_text
        || !run.chars().all(char::is_whitespace)
        || (rule == GiveBack::UnlessNewlineEnd && run.ends_with(['\r', '\n']))
    {
        return end;
    }
    let mut chars = run.char_indices();
    match (chars.next(), chars.next_back()) {
        (Some(_), Some((last_start, _))) => start + last_start,
        _ => end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        let p = PreTokenizer::new(&spec(pre).unwrap()).unwrap();
        let (mut w, mut s) = (Vec::new(), Vec::new());
        p.split(text, &mut w, &mut s);
        w.into_iter().map(|r| text[r].to_string()).collect()
    }

    #[test]
    fn every_known_name_compiles() {
        for name in KNOWN {
            PreTokenizer::new(&spec(name).unwrap()).unwrap();
        }
        assert!(spec("no-such-pre").is_none());
    }

    #[test]
    fn smollm_splits_digits_then_gpt2_words() {
        assert_eq!(
            words("smollm", "The year 2024 had  x"),
            ["The", " year", " ", "2", "0", "2", "4", " had", " ", " x"]
        );
        assert_eq!(
            words("smollm", "I'm\ttabs  "),
            ["I", "'m", "\t", "tabs", "  "]
        );
        assert_eq!(words("gpt2", "a  \n  b"), ["a", "  \n ", " b"]);
    }

    #[test]
    fn llama3_groups_digits_by_three_and_newlines() {
        assert_eq!(
            words("llama-bpe", "12345 ab\n\n  cd"),
            ["123", "45", " ab", "\n\n", " ", " cd"]
        );
    }

    #[test]
    fn qwen2_splits_single_digits() {
        assert_eq!(words("qwen2", "x 123"), ["x", " ", "1", "2", "3"]);
    }

    /// llama.cpp's patterns, with lookarounds, as a backtracking engine runs them.
    const ORIGINAL: &[(&str, &str)] = &[
        (
            "gpt2",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        ),
        (
            "llama-bpe",
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ),
        (
            "qwen2",
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ),
        (
            "gpt-4o",
            r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ),
    ];

    /// Splits with the original pattern: matches and the gaps between them.
    fn original_words(re: &fancy_regex::Regex, text: &str) -> Vec<String> {
        let (mut out, mut last) = (Vec::new(), 0);
        for m in re.find_iter(text) {
            let m = m.unwrap();
            if m.start() > last {
                out.push(text[last..m.start()].to_string());
            }
            out.push(m.as_str().to_string());
            last = m.end();
        }
        if last < text.len() {
            out.push(text[last..].to_string());
        }
        out
    }

    /// Both sides of the comparison, compiled once.
    fn compiled() -> &'static [(PreTokenizer, fancy_regex::Regex)] {
        static ALL: std::sync::OnceLock<Vec<(PreTokenizer, fancy_regex::Regex)>> =
            std::sync::OnceLock::new();
        ALL.get_or_init(|| {
            ORIGINAL
                .iter()
                .map(|(name, re)| {
                    let ours = PreTokenizer::new(&spec(name).unwrap()).unwrap();
                    (ours, fancy_regex::Regex::new(re).unwrap())
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        /// The lookaround-free rewrites split exactly like llama.cpp's patterns.
        #[test]
        fn rewrites_split_like_the_lookaround_patterns(
            text in proptest::collection::vec(
                proptest::sample::select(vec![
                    " ", " ", "  ", "\t", "\n", "\r\n", "\u{a0}", "\u{3000}", "a", "Z", "é", "Ö", "ß",
                    "日", "ж", "Ж", "1", "٣", "²", "'", "s", "ll", "!", ".", "/", "🙂", "\u{301}", "_",
                ]),
                0..24,
            ).prop_map(|v| v.concat())
        ) {
            for ((name, _), (ours, original)) in ORIGINAL.iter().zip(compiled()) {
                let (mut w, mut s) = (Vec::new(), Vec::new());
                ours.split(&text, &mut w, &mut s);
                let got: Vec<String> = w.into_iter().map(|r| text[r].to_string()).collect();
                prop_assert_eq!(got, original_words(original, &text), "{} on {:?}", name, text);
            }
        }
    }
}
