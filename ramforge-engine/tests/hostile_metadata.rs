//! Hostile metadata: on copies of the real SmolLM2 file with one key or array changed, every
//! inconsistency (token ids out of the vocabulary, merges of unknown tokens, per-token arrays
//! of the wrong length, embedding rows that are not the vocabulary, head counts that do not
//! fit the tensors, absurd context lengths, widths and expert counts) makes `Model::open` fail
//! with one line naming the key, in a child under a 1 GiB address-space limit.

mod common;
mod hostile;

use common::model;
use hostile::{limited, one_line_naming};
use ramforge_engine::Model;
use ramforge_gguf::{GgufFile, GgufWriter, Metadata, Value, ValueType};
use std::path::PathBuf;

/// The error `Model::open` gives a copy of the model with `edit` applied to its metadata.
fn open_error(tag: &str, edit: impl FnOnce(&mut Metadata)) -> String {
    let src = GgufFile::open(model()).unwrap();
    let mut w = GgufWriter::copy_of(&src).unwrap();
    edit(w.metadata_mut());
    let shm = PathBuf::from("/dev/shm");
    let dir = if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
    .join(format!("ramforge-hostile-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.gguf");
    w.write_file(&path).unwrap();
    let e = Model::open(&path).err().map(|e| e.to_string());
    std::fs::remove_dir_all(&dir).ok();
    e.expect("the copy is refused")
}

/// Sets `key` to `value`, replacing what was there.
fn set(md: &mut Metadata, key: &str, value: Value) {
    md.remove(key);
    md.insert(key.into(), value);
}

/// The array under `key`, edited by `f`.
fn edit_array(md: &mut Metadata, key: &str, f: impl FnOnce(&mut Vec<Value>)) {
    let Some(Value::Array(t, mut items)) = md.get(key).cloned() else {
        panic!("{key} is not an array in the model");
    };
    f(&mut items);
    set(md, key, Value::Array(t, items));
}

/// Vocabulary size of the real file.
fn n_tokens() -> u32 {
    let f = GgufFile::open(model()).unwrap();
    let (_, tokens) = f
        .header()
        .metadata
        .get_array("tokenizer.ggml.tokens")
        .unwrap();
    tokens.len() as u32
}

#[test]
fn special_token_ids_outside_the_vocabulary_are_refused() {
    limited(
        "special_token_ids_outside_the_vocabulary_are_refused",
        || {
            let n = n_tokens();
            for key in [
                "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.eot_token_id",
                "tokenizer.ggml.padding_token_id",
                "tokenizer.ggml.unknown_token_id",
                "tokenizer.ggml.seperator_token_id",
            ] {
                let e = open_error("id", |md| set(md, key, Value::U32(n)));
                let expected =
                    format!("{key}: token id {n} is outside the vocabulary of {n} tokens");
                one_line_naming(&e, &[&expected]);
            }
        },
    );
}

#[test]
fn a_special_token_id_list_outside_the_vocabulary_is_refused() {
    limited(
        "a_special_token_id_list_outside_the_vocabulary_is_refused",
        || {
            let e = open_error("ids", |md| {
                let ids = vec![Value::I32(0), Value::I32(1 << 30)];
                set(
                    md,
                    "tokenizer.ggml.eog_token_ids",
                    Value::Array(ValueType::I32, ids),
                );
            });
            one_line_naming(&e, &["tokenizer.ggml.eog_token_ids: token id 1073741824"]);
        },
    );
}

#[test]
fn a_merge_of_tokens_that_do_not_exist_is_refused() {
    limited("a_merge_of_tokens_that_do_not_exist_is_refused", || {
        let e = open_error("merge", |md| {
            edit_array(md, "tokenizer.ggml.merges", |m| {
                m[5] = Value::String("qqqzz zzqqq".into())
            })
        });
        one_line_naming(
            &e,
            &["tokenizer.ggml.merges: merge 5 \"qqqzz zzqqq\": \"qqqzz\" is not in the vocabulary"],
        );
    });
}

#[test]
fn per_token_arrays_of_the_wrong_length_are_refused() {
    limited("per_token_arrays_of_the_wrong_length_are_refused", || {
        let n = n_tokens() as usize;
        let e = open_error("type", |md| {
            edit_array(md, "tokenizer.ggml.token_type", |t| t.push(Value::I32(1)))
        });
        let expected = format!(
            "tokenizer.ggml.token_type: {} entries for {n} tokens",
            n + 1
        );
        one_line_naming(&e, &[&expected]);
        let e = open_error("scores", |md| {
            let scores = vec![Value::F32(0.0); n - 1];
            set(
                md,
                "tokenizer.ggml.scores",
                Value::Array(ValueType::F32, scores),
            );
        });
        let expected = format!("tokenizer.ggml.scores: {} entries for {n} tokens", n - 1);
        one_line_naming(&e, &[&expected]);
    });
}

#[test]
fn embedding_rows_that_are_not_the_vocabulary_are_refused() {
    limited(
        "embedding_rows_that_are_not_the_vocabulary_are_refused",
        || {
            let n = n_tokens();
            let e = open_error("rows", |md| {
                edit_array(md, "tokenizer.ggml.tokens", |t| {
                    t.push(Value::String("<extra>".into()))
                });
                edit_array(md, "tokenizer.ggml.token_type", |t| t.push(Value::I32(1)));
            });
            let expected = format!(
                "tensor \"token_embd.weight\" has {n} rows but tokenizer.ggml.tokens has {} tokens",
                n + 1
            );
            one_line_naming(&e, &[&expected]);
        },
    );
}

#[test]
fn head_counts_and_sizes_that_do_not_fit_the_tensors_are_refused() {
    limited(
        "head_counts_and_sizes_that_do_not_fit_the_tensors_are_refused",
        || {
            let e = open_error("kv", |md| {
                set(md, "llama.attention.head_count_kv", Value::U32(1))
            });
            one_line_naming(
                &e,
                &["\"blk.0.attn_k.weight\" has shape [576, 192]; expected [576, 64]"],
            );
            let e = open_error("heads", |md| {
                set(md, "llama.attention.head_count", Value::U32(8))
            });
            one_line_naming(&e, &["llama.attention.head_count = 8 is not a multiple of"]);
            let e = open_error("keylen", |md| {
                set(md, "llama.attention.key_length", Value::U32(128))
            });
            one_line_naming(
                &e,
                &["\"blk.0.attn_q.weight\" has shape [576, 576]; expected [576, 1152]"],
            );
        },
    );
}

#[test]
fn absurd_context_lengths_and_widths_are_refused() {
    limited("absurd_context_lengths_and_widths_are_refused", || {
        for (key, value) in [
            ("llama.context_length", 1u64 << 40),
            ("llama.context_length", 0),
            ("llama.embedding_length", 1 << 40),
            ("llama.feed_forward_length", u64::MAX),
            ("llama.block_count", 1 << 20),
        ] {
            let e = open_error("bounds", |md| set(md, key, Value::U64(value)));
            let expected = format!("metadata {key} = {value} is outside 1..=");
            one_line_naming(&e, &[&expected]);
        }
    });
}

#[test]
fn absurd_expert_counts_are_refused() {
    limited("absurd_expert_counts_are_refused", || {
        let e = open_error("experts", |md| {
            set(md, "llama.expert_count", Value::U32(1 << 20));
            set(md, "llama.expert_used_count", Value::U32(2));
        });
        one_line_naming(
            &e,
            &["metadata llama.expert_count = 1048576 is outside 0..=512"],
        );
        let e = open_error("used", |md| {
            set(md, "llama.expert_count", Value::U32(8));
            set(md, "llama.expert_used_count", Value::U32(9));
        });
        one_line_naming(
            &e,
            &["metadata llama.expert_used_count = 9 must lie in 1..=8"],
        );
    });
}

/// The unchanged copy opens: the errors above come from the one change each makes.
#[test]
fn the_unchanged_copy_opens() {
    limited("the_unchanged_copy_opens", || {
        let src = GgufFile::open(model()).unwrap();
        let dir =
            std::env::temp_dir().join(format!("ramforge-hostile-{}-same", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.gguf");
        GgufWriter::copy_of(&src)
            .unwrap()
            .write_file(&path)
            .unwrap();
        let m = Model::open(&path);
        std::fs::remove_dir_all(&dir).ok();
        let m = m.unwrap();
        assert_eq!(m.tokenizer.vocab_size(), m.tensors.n_vocab);
    });
}

/// No false alarms: every real model file passes the cross-checks (the whole `Model::open` for
/// the architectures the engine runs, the tokenizer's for the others).
#[test]
fn every_real_model_passes_the_checks() {
    let mut opened = 0;
    for entry in std::fs::read_dir(common::models_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "gguf") {
            continue;
        }
        let file = GgufFile::open(&path).unwrap();
        let arch = file
            .header()
            .metadata
            .get_str("general.architecture")
            .unwrap();
        if ramforge_engine::Architecture::named(arch).is_some() {
            Model::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        } else {
            ramforge_engine::text::Tokenizer::from_gguf(&file.header().metadata)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        opened += 1;
    }
    assert!(opened >= 3, "{opened} model files");
}
