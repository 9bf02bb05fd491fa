//! `ramforge-tools tokenize` on the real models against llama.cpp's recorded ids.

mod common;

use common::{golden, model, tool};

fn stdout_ok(args: &[&str]) -> String {
    let o = tool(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

#[test]
fn file_of_golden_strings_gives_llama_cpp_ids() {
    let strings = golden("inputs/strings_public.txt");
    for m in [SMOL, GEMMA] {
        let out = stdout_ok(&["tokenize", &model(m), "--file", &strings, "--json"]);
        let got = json_lines(&out);
        let stem = m.strip_suffix(".gguf").unwrap();
        let want =
            json_lines(&std::fs::read_to_string(golden(&format!("tok-{stem}.jsonl"))).unwrap());
        assert_eq!(
            got.len(),
            want.len(),
            "{m}: one object per line of the file"
        );
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                g["text"], w["text"],
                "{m}: escapes decoded as the goldens expect"
            );
            assert_eq!(g["tokens"], w["tokens"], "{m}: {}", w["text"]);
        }
    }
}

#[test]
fn text_output_lists_ids_and_pieces() {
    let out = stdout_ok(&["tokenize", &model(SMOL), "--text", "Hello world"]);
    assert_eq!(out, "19556\t\"Hello\"\n905\t\" world\"\n");
}

#[test]
fn special_tokens_are_parsed_only_on_request() {
    let m = model(SMOL);
    let ids = |extra: &[&str]| {
        let mut args = vec!["tokenize", &m, "--text", "<|im_start|>user", "--json"];
        args.extend_from_slice(extra);
        json_lines(&stdout_ok(&args))[0]["tokens"].clone()
    };
    assert_eq!(ids(&["--parse-special"]), serde_json::json!([1, 4093]));
    let plain = ids(&[]);
    assert!(
        plain.as_array().unwrap().len() > 2 && plain[0] != 1,
        "{plain}"
    );
}

#[test]
fn no_bos_drops_the_models_bos() {
    let m = model(GEMMA);
    let with = json_lines(&stdout_ok(&["tokenize", &m, "--text", "a", "--json"]));
    let without = json_lines(&stdout_ok(&[
        "tokenize", &m, "--text", "a", "--json", "--no-bos",
    ]));
    assert_eq!(with[0]["tokens"], serde_json::json!([2, 236746]));
    assert_eq!(without[0]["tokens"], serde_json::json!([236746]));
}

#[test]
fn input_is_required_and_bad_models_fail_in_one_line() {
    let o = tool(&["tokenize", &model(SMOL)]);
    assert_eq!(o.status.code(), Some(2));
    let o = tool(&["tokenize", "/nonexistent.gguf", "--text", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
}
