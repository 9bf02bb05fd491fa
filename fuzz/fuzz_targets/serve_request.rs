#![no_main]
//! The server's request reading (`ramforge_tools::openai::request`, as `serve` runs it): any
//! bytes as the body of `/v1/chat/completions` and `/v1/completions`, parsed as JSON the way the
//! server does, are a request within the sampler's ranges or a 400 whose one-line message and
//! `param` name the field at fault; never a panic. The error's JSON body has OpenAI's shape.

use libfuzzer_sys::fuzz_target;
use ramforge_tools::openai::errors::ApiError;
use ramforge_tools::openai::request::{chat_request, completion_request, GenRequest, Prompt};
use serde_json::Value;

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
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    check(chat_request(body.clone()));
    check(completion_request(body));
});
