//! `gemma3` on the real Gemma 3 270M file against llama.cpp: goldens recorded at test time on
//! plain text, the chat format, code, a non-English prompt and long prompts (one past the
//! 512-position sliding window, so the local layers' ring wraps), all-resident and streamed at
//! 40% of the file; and the invariants every architecture keeps (window-sized KV charge,
//! budget, identical greedy tokens across threads and budgets, batched prefill).

mod common;

use common::golden::{assert_within_quant, compare, record, Record, QUANT};
use common::model_file;
use ramforge_engine::{Engine, EngineOptions, SamplingParams};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

fn gemma() -> PathBuf {
    model_file("gemma-3-270m-q4_k_m.gguf")
}

const PARAGRAPH: &str =
    "The lighthouse stood on a narrow spit of rock at the mouth of the harbour, \
and for more than a century its keepers had written down the weather every evening in a \
leather-bound log. The entries were short: the direction of the wind, the height of the swell, \
whether the fishing boats had come home before dark. Read one after another they tell a slower \
story, of winters that grew milder, of storms that arrived later in the autumn, and of a \
village that shrank as the young people left for the cities inland. ";

fn prompts() -> Vec<String> {
    let long: String = PARAGRAPH.repeat(4) + "In the last entry, the keeper wrote that";
    let longer: String = [
        PARAGRAPH,
        "Mathematics offers a different kind of record. A proof, once found, does not weather; \
         the theorem that there are infinitely many primes is as true now as when Euclid wrote \
         it down, and every student who follows the argument rebuilds it from nothing. ",
    ]
    .concat()
    .repeat(6)
        + "Both kinds of record have one thing in common:";
    vec![
        "The history of the printing press begins in".into(),
        "<start_of_turn>user\nWhat is the boiling point of water at sea level?<end_of_turn>\n<start_of_turn>model\n".into(),
        "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n".into(),
        "Le château de Versailles fut construit sous le règne de".into(),
        long,
        longer,
    ]
}

/// llama.cpp's records for [`prompts`], recorded once per test binary.
fn goldens() -> &'static [Record] {
    static RECORDS: OnceLock<Vec<Record>> = OnceLock::new();
    RECORDS.get_or_init(|| {
        let p = prompts();
        let refs: Vec<&str> = p.iter().map(String::as_str).collect();
        let records = record(&gemma(), &refs, 16);
        assert!(
            records[4].tokens.len() >= 300,
            "{}",
            records[4].tokens.len()
        );
        assert!(
            records[5].tokens.len() > 512 + 16,
            "{}",
            records[5].tokens.len()
        );
        records
    })
}

fn options(ram: Option<u64>, ctx: usize) -> EngineOptions {
    EngineOptions {
        ram,
        ctx: Some(ctx),
        threads: 2,
        ..EngineOptions::default()
    }
}

fn golden_ctx() -> usize {
    goldens()
        .iter()
        .map(|r| r.tokens.len() + r.generated.len())
        .max()
        .unwrap()
}

#[test]
fn matches_llama_cpp_all_resident() {
    let mut e = Engine::load(gemma(), &options(None, golden_ctx())).unwrap();
    let f = compare(&mut e, goldens(), QUANT.2);
    assert_within_quant("gemma3 270M Q4_K_M, all resident", &f);
}

#[test]
fn matches_llama_cpp_streamed_at_40_percent_of_the_file() {
    let ram = std::fs::metadata(gemma()).unwrap().len() * 40 / 100;
    let mut e = Engine::load(gemma(), &options(Some(ram), golden_ctx())).unwrap();
    assert!(
        !e.plan().output_resident || e.plan().streamed_layers() > 0,
        "{:?}",
        e.plan()
    );
    let f = compare(&mut e, goldens(), QUANT.2);
    assert_within_quant("gemma3 270M Q4_K_M, ram 40% of the file", &f);
    assert!(e.budget().peak() <= ram);
}

#[test]
fn the_local_layers_cache_only_their_window() {
    let m = ramforge_engine::Model::open(gemma()).unwrap();
    let c = &m.config;
    assert_eq!((c.head_dim, c.n_head, c.n_head_kv), (256, 4, 1));
    assert_eq!(c.sliding_window, Some(512));
    let global: Vec<usize> = (0..c.n_layer).filter(|&l| c.window(l).is_none()).collect();
    assert_eq!(global, [5, 11, 17]);
    assert_eq!(c.rope_of(0), (10000.0, 1.0));
    assert_eq!(c.rope_of(5), (1e6, 1.0));
    let ctx = 2048;
    let plan = m.plan(&options(None, ctx)).unwrap();
    // 3 global layers keep 2048 positions, 15 local ones 512; K and V, 256 wide, f16.
    assert_eq!(plan.kv_bytes, 2 * 256 * 2 * (3 * 2048 + 15 * 512));
}

#[test]
fn prefill_in_batches_that_straddle_the_window_matches_llama_cpp() {
    // Batches of 7 put one batch across position 512, where the local layers' ring starts
    // to wrap (the golden run's batches of 64 meet it at a boundary).
    let long = &goldens()[5..];
    let o = EngineOptions {
        batch: 7,
        ..options(None, golden_ctx())
    };
    let mut e = Engine::load(gemma(), &o).unwrap();
    let f = compare(&mut e, long, QUANT.2);
    assert_within_quant("gemma3 270M Q4_K_M, batches of 7, 540+ tokens", &f);
}

/// Greedy tokens after `prompt` under `o`, with the engine's stats.
fn greedy(o: &EngineOptions, prompt: &str, n: usize) -> (Vec<u32>, Engine) {
    let mut e = Engine::load(gemma(), o).unwrap();
    let p = e.model().tokenizer.encode(prompt, true, true);
    let stats = e
        .generate(
            &p,
            &SamplingParams::greedy(n),
            &mut |_, _| {},
            &AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(stats.prompt_tokens, p.len());
    (stats.tokens, e)
}

#[test]
fn greedy_tokens_are_the_same_for_threads_and_budgets() {
    // Past the window, so the ring wraps during prefill and decode.
    let prompt = PARAGRAPH.repeat(6);
    let ctx = 700;
    let (resident, _) = greedy(&options(None, ctx), &prompt, 8);
    let one_thread = EngineOptions {
        threads: 1,
        ..options(None, ctx)
    };
    assert_eq!(greedy(&one_thread, &prompt, 8).0, resident);
    let ram = 60 << 20;
    let (streamed, e) = greedy(&options(Some(ram), ctx), &prompt, 8);
    assert_eq!(streamed, resident);
    let stats = e.residency();
    assert!(stats.layers_loaded > 0 && stats.bytes_read > 0, "{stats:?}");
    assert!(e.budget().peak() <= ram);
}
