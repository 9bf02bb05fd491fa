//! Greedy tokens of a short run, for the ARM check (scripts/arm.sh): the engine alone, so a
//! cross build for aarch64 compiles the engine's dependencies and not the server's.
//!
//! `greedy MODEL PROMPT N` prints the active instruction set (`RAMFORGE_ISA` may force one)
//! and the `N` greedy tokens after `PROMPT` (encoded as `ramforge-tools run` does): `ISA 1,2,3`.
use ramforge_engine::{Engine, EngineOptions, SamplingParams};
use std::sync::atomic::AtomicBool;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, prompt, n] = args.as_slice() else {
        return Err("usage: greedy MODEL PROMPT N".into());
    };
    let n: usize = n.parse()?;
    let mut engine = Engine::load(model, &EngineOptions::default())?;
    let prompt = engine.model().tokenizer.encode(prompt, true, true);
    let stats = engine.generate(
        &prompt,
        &SamplingParams::greedy(n),
        &mut |_, _| {},
        &AtomicBool::new(false),
    )?;
    let tokens: Vec<String> = stats.tokens.iter().map(u32::to_string).collect();
    println!(
        "{} {}",
        ramforge_quant::isa::active().name(),
        tokens.join(",")
    );
    Ok(())
}
