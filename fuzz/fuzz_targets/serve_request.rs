#![no_main]
//! The server's request reading (`ramforge_tools::openai::request`, as `serve` runs it): any
//! bytes as the body of `/v1/chat/completions` and `/v1/completions`, parsed as JSON the way the
//! server does, are a request within the sampler's ranges or a 400 whose one-line message and
//! `param` name the field at fault; never a panic. The error's JSON body has OpenAI's shape.
//! The same bytes as a model's output go through the tool-call and reasoning parser of every
//! convention: whole and streamed in two pieces they agree, and every call's arguments are a
//! JSON object.

use libfuzzer_sys::fuzz_target;
use ramforge_tools::openai::errors::ApiError;
use ramforge_tools::openai::request::{chat_request, completion_request, GenRequest, Prompt};
use ramforge_tools::openai::tools::{parse_output, OutputParser, Piece, ToolFormat};
use serde_json::Value;

const FORMATS: [Option<ToolFormat>; 8] = [
    None,
    Some(ToolFormat::Hermes),
    Some(ToolFormat::Llama3),
    Some(ToolFormat::Mistral),
    Some(ToolFormat::MistralArgs),
    Some(ToolFormat::Harmony),
    Some(ToolFormat::Glm),
    Some(ToolFormat::DeepSeek),
];

/// `text` as model output in each convention.
fn check_output(text: &str) {
    for (i, format) in FORMATS.into_iter().enumerate() {
        let harmony = format == Some(ToolFormat::Harmony);
        let (reasoning, thinking) = (i % 2 == 0, i % 3 == 0);
        let (content, reasoned, calls) =
            parse_output(OutputParser::new(format, reasoning, thinking, harmony), text);
        for c in &calls {
            let args: Value = serde_json::from_str(&c.arguments).expect("arguments are JSON");
            assert!(args.is_object() && !c.name.trim().is_empty(), "{c:?}");
        }
        // Streamed in two pieces, split at a character boundary.
        let mut cut = text.len() / 2;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut p = OutputParser::new(format, reasoning, thinking, harmony);
        let mut pieces = p.push(&text[..cut]);
        pieces.extend(p.push(&text[cut..]));
        let (rest, streamed_calls) = p.finish();
        pieces.extend(rest);
        let (mut c2, mut r2) = (String::new(), String::new());
        for piece in pieces {
            match piece {
                Piece::Content(s) => c2.push_str(&s),
                Piece::Reasoning(s) => r2.push_str(&s),
            }
        }
        assert_eq!(content.unwrap_or_default(), c2, "{format:?}");
        assert_eq!(reasoned.unwrap_or_default(), r2, "{format:?}");
        assert_eq!(calls.len(), streamed_calls.len(), "{format:?}");
    }
}

fn check(read: Result<GenRequest, ApiError>) {
    match read {
        Ok(r) => {
            let p = &r.params;
            assert!((0.0..=2.0).contains(&p.temperature), "{}", p.temperature);
            assert!(p.top_p > 0.0 && p.top_p <= 1.0, "{}", p.top_p);
            assert!((0.0..=1.0).contains(&p.min_p), "{}", p.min_p);
            assert!(p.repeat_penalty > 0.0, "{}", p.repeat_penalty);
            assert!(p.stop.len() <= 4 && p.stop.iter().all(|s| !s.is_empty()));
            assert!(!r.include_usage || r.stream);
            if let Prompt::Chat(messages) = &r.prompt {
                assert!(!messages.is_empty());
            }
        }
        Err(e) => {
            assert_eq!(e.status.as_u16(), 400, "{e:?}");
            assert!(!e.message.is_empty() && !e.message.contains('\n'), "{e:?}");
            if let Some(param) = &e.param {
                assert!(!param.is_empty(), "{e:?}");
            }
            let body = e.body();
            assert!(body["error"]["message"].is_string(), "{body}");
            assert!(body["error"]["type"].is_string(), "{body}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check_output(&String::from_utf8_lossy(data));
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    check(chat_request(body.clone()));
    check(completion_request(body));
});
