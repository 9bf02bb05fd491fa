use ramforge_engine::tokenizer::Tokenizer;
use ramforge_gguf::GgufFile;
#[test]
#[ignore]
fn profile() {
    for f in ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"] {
        let g = GgufFile::open(format!("/work/models/{f}")).unwrap();
        let t = Tokenizer::from_gguf(&g.header().metadata).unwrap();
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let t0 = std::time::Instant::now();
        let mut n = 0;
        for _ in 0..2000 { n += t.encode(&text, false, false).len(); }
        eprintln!("{f} prompt: {} ids, {:?} per call", n / 2000, t0.elapsed() / 2000);
    }
}
