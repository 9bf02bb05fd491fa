//! Prompt building on real vocabularies: the chat template's rendering is tokenized with BOS
//! added only when the template did not write it itself.

mod common;

use common::{model, model_file};
use ramforge_engine::text::prompt::message;
use ramforge_engine::text::{ChatPrompt, Tokenizer};
use ramforge_gguf::GgufFile;

/// Gemma 3 adds BOS (`<bos>`) to plain text, so the rule matters there.
#[test]
fn bos_is_added_once_whether_or_not_the_template_writes_it() {
    let file = GgufFile::open(model_file("gemma-3-270m-q4_k_m.gguf")).unwrap();
    let meta = &file.header().metadata;
    let tok = Tokenizer::from_gguf(meta).unwrap();
    let bos = tok.bos_id().unwrap();
    assert_eq!(tok.encode("x", true, true)[0], bos, "Gemma 3 adds BOS");
    let messages = [message("user", "Hi there")];

    // A template that writes BOS itself: no second one.
    let writes = "{{ bos_token }}<start_of_turn>user\n{{ messages[0].content }}<end_of_turn>\n";
    let own = ChatPrompt::new(meta, Some(writes.into())).unwrap();
    let rendered = own.render(&messages, true).unwrap();
    assert!(rendered.starts_with("<bos>"), "{rendered:?}");
    let ids = own.tokens(&tok, &messages).unwrap();
    assert_eq!(ids, tok.encode(&rendered, false, true));
    assert_eq!(ids.iter().filter(|&&t| t == bos).count(), 1, "{ids:?}");

    // One that does not gets BOS from the tokenizer, as plain prompts do.
    let plain = ChatPrompt::new(meta, Some("Q: {{ messages[0].content }}\nA:".into())).unwrap();
    let ids = plain.tokens(&tok, &messages).unwrap();
    assert_eq!(ids, tok.encode("Q: Hi there\nA:", true, true));
    assert_eq!(ids[0], bos);
}

/// Without a template of its own and none given, a model's chat prompt names the key.
#[test]
fn a_model_without_a_template_says_so() {
    let file = GgufFile::open(model_file("gemma-3-270m-q4_k_m.gguf")).unwrap();
    let e = ChatPrompt::new(&file.header().metadata, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("tokenizer.chat_template"), "{e}");
    // SmolLM2 carries one.
    let smol = GgufFile::open(model()).unwrap();
    assert!(ChatPrompt::new(&smol.header().metadata, None).is_ok());
}

/// An opened model keeps no token texts in its metadata (`Model::open` drops them: several
/// uncharged MiB), yet its chat prompt gets the same BOS and EOS texts as one made from the
/// file's metadata.
#[test]
fn an_opened_models_prompt_has_the_files_bos_and_eos_texts() {
    for name in [
        "gemma-3-270m-q4_k_m.gguf",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
    ] {
        let path = model_file(name);
        let file = GgufFile::open(&path).unwrap();
        let opened = ramforge_engine::Model::open(&path).unwrap();
        let kept = &opened.file.header().metadata;
        assert!(!kept.contains("tokenizer.ggml.tokens"), "{name}");
        let both = "[{{ bos_token }}|{{ eos_token }}]";
        let from_file = ChatPrompt::new(&file.header().metadata, Some(both.into()))
            .unwrap()
            .render(&[message("user", "x")], false)
            .unwrap();
        let from_model = ChatPrompt::for_model(kept, &opened.tokenizer, Some(both.into()))
            .unwrap()
            .render(&[message("user", "x")], false)
            .unwrap();
        assert_eq!(from_model, from_file, "{name}");
        assert!(from_file.len() > "[|]".len(), "{name}: {from_file:?}");
    }
}
