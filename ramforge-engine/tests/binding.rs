//! Tensor binding follows the architecture's description: on copies of the real model with a
//! tensor added, or relabelled as another architecture, a layer tensor the description does not
//! list, a partial all-or-none group and a tensor of a layer past `block_count` are each refused
//! with one line naming the tensor.

mod common;

use common::model;
use ramforge_engine::Model;
use ramforge_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use std::path::PathBuf;

/// A copy of the model with `arch` as its architecture (metadata keys renamed) and the f32
/// tensors `extra` (name, length) added; the error `Model::open` gives it.
fn open_error(tag: &str, arch: &str, extra: &[(&str, u64)]) -> String {
    let src = GgufFile::open(model()).unwrap();
    let mut w = GgufWriter::copy_of(&src).unwrap();
    if arch != "llama" {
        let md = w.metadata_mut();
        let renamed: Vec<(String, Value)> = md
            .iter()
            .filter(|(k, _)| k.starts_with("llama."))
            .map(|(k, v)| (k.replacen("llama.", &format!("{arch}."), 1), v.clone()))
            .collect();
        for (k, v) in renamed {
            md.insert(k, v);
        }
        md.remove("general.architecture");
        md.insert("general.architecture".into(), Value::String(arch.into()));
    }
    for (name, len) in extra {
        w.add_tensor(*name, GgmlType::F32, &[*len], vec![0u8; 4 * *len as usize])
            .unwrap();
    }
    let dir = std::env::temp_dir().join(format!("ramforge-binding-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("model.gguf");
    w.write_to(std::fs::File::create(&path).unwrap()).unwrap();
    let e = Model::open(&path)
        .err()
        .expect("the copy is refused")
        .to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn a_layer_tensor_the_architecture_does_not_use_is_refused() {
    let e = open_error("bias", "llama", &[("blk.3.attn_q.bias", 576)]);
    assert!(
        e.contains("\"blk.3.attn_q.bias\"") && e.contains("not used by architecture llama"),
        "{e}"
    );
}

#[test]
fn an_all_or_none_group_present_in_part_is_refused() {
    // As qwen2 the biases are optional, but a Q bias without K and V biases is not a model.
    let e = open_error("group", "qwen2", &[("blk.0.attn_q.bias", 576)]);
    assert!(
        e.contains("layer 0") && e.contains("blk.0.attn_k.bias") && e.contains("all or none"),
        "{e}"
    );
}

#[test]
fn a_tensor_of_a_layer_past_the_block_count_is_refused() {
    let e = open_error("layer", "llama", &[("blk.30.attn_norm.weight", 576)]);
    assert!(
        e.contains("\"blk.30.attn_norm.weight\"") && e.contains("block_count"),
        "{e}"
    );
}

#[test]
fn the_newer_architectures_name_what_a_relabelled_llama_lacks() {
    // As qwen3 a layer needs its per-head Q/K norms.
    let e = open_error("qwen3", "qwen3", &[]);
    assert!(e.contains("\"blk.0.attn_q_norm.weight\""), "{e}");
    // A dense llama has no router: the Mixtral tensors belong to a model with experts.
    let e = open_error("router", "llama", &[("blk.1.ffn_gate_inp.weight", 576)]);
    assert!(
        e.contains("\"blk.1.ffn_gate_inp.weight\"") && e.contains("llama.expert_count = 0"),
        "{e}"
    );
}
