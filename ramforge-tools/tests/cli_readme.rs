//! The README's "What it supports" section is generated from the code's own lists: this test
//! regenerates it and fails when the README differs. `RAMFORGE_BLESS=1` rewrites the README.

use ramforge_engine::model::arch::{
    ExpertActivation, Gating, Role, RopeStyle, SharedExpert, ALL as ARCHITECTURES,
};
use ramforge_engine::text::tokenizer::{KNOWN_PRE_TOKENIZERS, SUPPORTED_MODELS};
use ramforge_quant::GgmlType;
use std::fmt::Write;
use std::path::PathBuf;

const BEGIN: &str = "<!-- BEGIN GENERATED: supported (ramforge-tools/tests/cli_readme.rs) -->\n";
const END: &str = "<!-- END GENERATED: supported -->";

fn readme_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md")
}

fn code(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    names
        .into_iter()
        .map(|n| format!("`{}`", n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The section as the code describes it.
fn supported_section() -> String {
    let mut s = String::new();
    s.push_str("\n### Architectures (`general.architecture`)\n\n");
    s.push_str(
        "| architecture | RoPE rotates | experts (when the file has them) |\n|---|---|---|\n",
    );
    for arch in ARCHITECTURES {
        let pairs = match arch.rope {
            RopeStyle::Adjacent => "adjacent pairs `(x[2j], x[2j+1])`",
            RopeStyle::Neox => "neox pairs `(x[j], x[j+d/2])`",
        };
        let experts = if arch.spec(Role::FfnGateExps).is_none() {
            "-".to_string()
        } else {
            let r = arch.router;
            let mut parts = vec![match r.gating {
                Gating::Softmax => "softmax",
                Gating::Sigmoid => "sigmoid",
                Gating::SoftmaxWeight => "softmax over the chosen logits",
                Gating::SqrtSoftplus => "sqrt(softplus)",
            }
            .to_string()];
            if arch.spec(Role::FfnExpProbsBias).is_some() {
                parts.push("selection bias".into());
            }
            match r.shared {
                SharedExpert::None => {}
                SharedExpert::Gated => parts.push("gated shared expert".into()),
                SharedExpert::Counted => parts.push("shared experts".into()),
            }
            if r.dense_lead_key {
                parts.push("dense leading layers".into());
            }
            if arch.spec(Role::FfnGateTid2eid).is_some() {
                parts.push("hash-routed leading layers".into());
            }
            if matches!(
                r.activation,
                ExpertActivation::SwiGluOai | ExpertActivation::SwiGluClamped
            ) {
                parts.push("clamped SwiGLU".into());
            }
            parts.join(", ")
        };
        writeln!(s, "| `{}` | {pairs} | {experts} |", arch.name).unwrap();
    }

    s.push_str("\n### Tensor types\n\n");
    s.push_str("| type | elements per block | bytes per block | bits per weight |\n");
    s.push_str("|---|---:|---:|---:|\n");
    let (with, without): (Vec<GgmlType>, Vec<GgmlType>) =
        GgmlType::all().partition(|t| ramforge_quant::is_supported(*t));
    for t in &with {
        let bits = t.type_size() as f64 * 8.0 / t.block_size() as f64;
        let bits = format!("{bits:.4}");
        let bits = bits.trim_end_matches('0').trim_end_matches('.');
        writeln!(
            s,
            "| `{}` | {} | {} | {bits} |",
            t.name(),
            t.block_size(),
            t.type_size()
        )
        .unwrap();
    }
    writeln!(
        s,
        "\nKnown to the GGUF parser (and described by `inspect`), but without kernels, so a model \
         using them is refused at load with a one-line error: {}.",
        code(without.iter().map(|t| t.name()))
    )
    .unwrap();

    s.push_str("\n### Tokenizers (`tokenizer.ggml.model`)\n\n");
    s.push_str("| tokenizer | algorithm |\n|---|---|\n");
    for (name, algorithm) in SUPPORTED_MODELS {
        writeln!(s, "| `{name}` | {algorithm} |").unwrap();
    }
    writeln!(
        s,
        "\nPre-tokenizers (`tokenizer.ggml.pre`) for `gpt2` models: {}.",
        code(KNOWN_PRE_TOKENIZERS)
    )
    .unwrap();
    s.push('\n');
    s
}

#[test]
fn readme_support_section_matches_the_code() {
    let path = readme_path();
    let readme = std::fs::read_to_string(&path).expect("read README.md");
    let start = readme
        .find(BEGIN)
        .expect("README lacks the BEGIN GENERATED marker")
        + BEGIN.len();
    let end = readme[start..]
        .find(END)
        .map(|i| start + i)
        .expect("README lacks the END GENERATED marker");
    let want = supported_section();
    if readme[start..end] == want {
        return;
    }
    if std::env::var_os("RAMFORGE_BLESS").is_some() {
        let updated = format!("{}{}{}", &readme[..start], want, &readme[end..]);
        // Write-then-rename, so the other test never reads a half-written README.
        let tmp = path.with_extension("md.bless");
        std::fs::write(&tmp, updated).expect("write README.md");
        std::fs::rename(&tmp, &path).expect("replace README.md");
        return;
    }
    panic!(
        "README.md's support section is out of date; rerun with RAMFORGE_BLESS=1 to rewrite it. \
         It should read:\n{want}"
    );
}

#[test]
fn readme_names_the_two_commands() {
    let readme = std::fs::read_to_string(readme_path()).unwrap();
    // One screen: at most 250 lines, the two commands near the top.
    assert!(readme.lines().count() <= 250, "README.md is over 250 lines");
    let top: String = readme.lines().take(30).collect::<Vec<_>>().join("\n");
    assert!(
        top.contains("cargo run --release -p ramforge-tools -- run --prompt"),
        "{top}"
    );
    assert!(top.contains("scripts/test.sh"), "{top}");
    let ci = std::fs::read_to_string(readme_path().with_file_name(".ci/run")).unwrap();
    assert!(
        ci.contains("scripts/test.sh"),
        ".ci/run must run the README's test command"
    );
}
