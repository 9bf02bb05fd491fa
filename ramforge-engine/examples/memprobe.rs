use ramforge_engine::*;
fn show(stage: &str) {
    let m = process_memory().unwrap();
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    let pick: Vec<&str> = rollup.lines().filter(|l| l.starts_with("Rss") || l.starts_with("Anonymous") || l.starts_with("Private_Clean")|| l.starts_with("Shared_Clean")).collect();
    eprintln!("{stage}: rss {:.1} MiB hwm {:.1} MiB | {}", m.rss as f64 / 1048576.0, m.peak_rss as f64 / 1048576.0, pick.join(" ").split_whitespace().collect::<Vec<_>>().join(" "));
}
fn main() {
    show("start");
    let path = std::env::args().nth(1).unwrap();
    let f = ramforge_gguf::GgufFile::open(&path).unwrap();
    show("header");
    let t = tokenizer::Tokenizer::from_gguf(&f.header().metadata).unwrap();
    show("tokenizer");
    eprintln!("tokenizer heap {}", t.heap_bytes());
    drop(t); drop(f);
    show("dropped");
    let model = Model::open(&path).unwrap();
    show("model");
    let opts = EngineOptions { ram: Some(4 << 20), ctx: Some(40), threads: 2, ..Default::default() };
    let mut e = Engine::new(model, &opts).unwrap();
    show("engine");
    let p = e.model().tokenizer.encode("The capital of France is", true, true);
    let st = e.generate(&p, &SamplingParams::greedy(8), &mut |_, _| {}, &std::sync::atomic::AtomicBool::new(false)).unwrap();
    show("generated");
    eprintln!("{:?} peak managed {}", st.text, e.budget().peak());
}
