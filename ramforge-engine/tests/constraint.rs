//! Constrained sampling on a real model: output sampled at temperature 1 under a JSON schema,
//! a Lark and a GBNF grammar always matches it; hostile grammars are refused by a named limit.

mod common;

use common::{model, options};
use ramforge_engine::{Engine, Grammar, GrammarCompiler, SamplingParams};
use serde_json::{json, Value};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn engine() -> Engine {
    Engine::load(model(), &options(None)).unwrap()
}

fn sample(e: &mut Engine, prompt: &str, grammar: &Grammar, seed: u64, n: usize) -> String {
    let compiler = GrammarCompiler::new(Arc::clone(&e.model().tokenizer)).unwrap();
    let constraint = compiler.compile(grammar).unwrap();
    let prompt = e.model().tokenizer.encode(prompt, true, true);
    let params = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        max_tokens: n,
        ..SamplingParams::default()
    };
    let stats = e
        .generate_constrained(
            &prompt,
            &params,
            constraint,
            &mut |_, _| {},
            &AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(
        stats.stop_reason,
        ramforge_engine::StopReason::EndOfGeneration,
        "{:?}",
        stats.text
    );
    // The mask's time is measured, and is part of the decode's.
    assert!(
        stats.constraint_secs > 0.0 && stats.constraint_secs <= stats.decode_secs,
        "constraint {} s of decode {} s",
        stats.constraint_secs,
        stats.decode_secs
    );
    stats.text
}

#[test]
fn sampled_json_always_fits_the_schema() {
    let mut e = engine();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false,
    });
    for seed in 0..3 {
        let text = sample(
            &mut e,
            "A person as JSON:",
            &Grammar::JsonSchema(schema.clone()),
            seed,
            60,
        );
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{text}: {err}"));
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), 3, "{text}");
        assert!(o["name"].as_str().unwrap().chars().count() <= 12, "{text}");
        assert!((0..=150).contains(&o["age"].as_i64().unwrap()), "{text}");
        let tags = o["tags"].as_array().unwrap();
        assert!(
            tags.len() <= 3 && tags.iter().all(|t| t == "a" || t == "b"),
            "{text}"
        );
    }
    let text = sample(&mut e, "JSON:", &Grammar::JsonObject, 9, 60);
    assert!(
        serde_json::from_str::<Value>(&text).unwrap().is_object(),
        "{text}"
    );
}

#[test]
fn lark_and_gbnf_grammars_hold() {
    let mut e = engine();
    let lark = Grammar::Lark("start: (\"yes\" | \"no\") \" \" /[0-9]{2}/".into());
    for seed in 0..3 {
        let text = sample(&mut e, "Answer:", &lark, seed, 10);
        let (word, num) = text.split_once(' ').unwrap();
        assert!(word == "yes" || word == "no", "{text}");
        assert!(
            num.len() == 2 && num.bytes().all(|b| b.is_ascii_digit()),
            "{text}"
        );
    }
    let gbnf =
        Grammar::Gbnf("root ::= color \"!\"\ncolor ::= \"red\" | \"green\" | [b] \"lue\"\n".into());
    for seed in 0..3 {
        let text = sample(&mut e, "A color:", &gbnf, seed, 10);
        assert!(
            ["red!", "green!", "blue!"].contains(&text.as_str()),
            "{text}"
        );
    }
}

#[test]
fn hostile_grammars_are_refused_by_a_named_limit() {
    let e = engine();
    let compiler = GrammarCompiler::new(Arc::clone(&e.model().tokenizer)).unwrap();
    // Deeply nested: each level an object holding the next (three JSON levels each).
    let mut deep = json!({"type": "string"});
    for _ in 0..60 {
        deep = json!({"type": "object", "properties": {"a": deep}, "required": ["a"]});
    }
    // Huge and wide: grammars of many thousands of alternatives.
    let alternatives = |n: usize| {
        Grammar::Lark(format!(
            "start: {}",
            (0..n)
                .map(|i| format!("\"w{i}\""))
                .collect::<Vec<_>>()
                .join(" | ")
        ))
    };
    // Ambiguous and exponential in the lexer: (a|aa)* style regexes over a long bound.
    let blowup = Grammar::Lark("start: /(a|b)*a(a|b){40}/".into());
    // Within the depth limit, but as deep as it allows: compiles, on a test thread's stack.
    compiler
        .compile(&Grammar::JsonSchema(deep.clone()))
        .unwrap();
    for _ in 0..60 {
        deep = json!({"type": "object", "properties": {"a": deep}, "required": ["a"]});
    }
    for (what, g, refused) in [
        ("deep", Grammar::JsonSchema(deep), true),
        ("huge", alternatives(60_000), true),
        ("wide", alternatives(6_000), true),
        ("blowup", blowup, false),
    ] {
        let started = std::time::Instant::now();
        let outcome = compiler.compile(&g).and_then(|mut c| {
            // Compiled lazily: the first masks are where a step limit bites.
            let mut logits = vec![0f32; e.n_vocab()];
            for _ in 0..3 {
                c.mask(&mut logits)?;
                let id = logits.iter().position(|l| *l > f32::NEG_INFINITY).unwrap() as u32;
                c.commit(id)?;
            }
            Ok(())
        });
        eprintln!("{what}: {outcome:?} in {:?}", started.elapsed());
        if let Err(err) = &outcome {
            assert!(!err.contains('\n') && !err.is_empty(), "{what}: {err}");
        }
        assert!(refused == outcome.is_err(), "{what}: {outcome:?}");
        // A hang guard, not a speed test: the limits bound the work to well under a second.
        assert!(
            started.elapsed().as_secs() < 20,
            "{what}: {:?}",
            started.elapsed()
        );
    }
    let err = compiler
        .compile(&Grammar::Lark("start: nope".into()))
        .err()
        .unwrap();
    assert!(err.contains("nope"), "{err}");
}
