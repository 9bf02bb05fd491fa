//! The OpenAI answer bodies: a whole `chat.completion` / `text_completion`, and the chunks of a
//! streamed one (`chat.completion.chunk`, or `text_completion` pieces), with `usage`.

use super::api::Endpoint;
use ramforge_engine::{Logprobs, SpeculationStats, StopReason};
use ramforge_tools::openai::tools::ToolCall;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// What one generation used, in tokens.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// What speculative decoding did for the request (`serve --lookup`, `--draft` or `--mtp`; `None`
    /// without, or for a request decoded plainly, one asking for logprobs).
    pub speculation: Option<SpeculationStats>,
}

impl Usage {
    fn json(&self) -> Value {
        let mut v = json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        });
        // Not OpenAI's: named as `run --json` names them.
        if let Some(x) = &self.speculation {
            v["speculation"] = json!({
                "passes": x.passes,
                "drafted": x.drafted,
                "accepted": x.accepted,
                "acceptance": x.acceptance(),
                "draft_bytes_read": x.draft_bytes_read,
            });
        }
        v
    }
}

/// OpenAI's `finish_reason`: `stop` for an end-of-generation token or a stop string, `length`
/// for the token limit or a full context. (A cancelled generation has no client to tell.)
pub fn finish_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::EndOfGeneration
        | StopReason::StopString
        | StopReason::Cancelled
        | StopReason::ConstraintFailed => "stop",
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The fixed parts of one answer: its id, time, model and shape.
pub struct Reply {
    id: String,
    created: u64,
    model: String,
    endpoint: Endpoint,
    /// The request asked for log-probabilities.
    pub wants_logprobs: bool,
}

/// One generated token's log-probabilities with its bytes and the top tokens' bytes.
pub type TokenLogprobs = (Logprobs, Vec<u8>, Vec<Vec<u8>>);

/// The `logprobs` of a choice in OpenAI's shape: chat's `{content: [{token, logprob, bytes,
/// top_logprobs}]}`, or completions' `{tokens, token_logprobs, top_logprobs, text_offset}`.
pub fn logprobs_json(endpoint: Endpoint, list: &[TokenLogprobs]) -> Value {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match endpoint {
        Endpoint::Chat => {
            let content: Vec<Value> = list
                .iter()
                .map(|(lp, bytes, top)| {
                    let tops: Vec<Value> = lp
                        .top
                        .iter()
                        .zip(top)
                        .map(|(t, b)| json!({"token": text(b), "logprob": t.logprob, "bytes": b}))
                        .collect();
                    json!({
                        "token": text(bytes),
                        "logprob": lp.chosen.logprob,
                        "bytes": bytes,
                        "top_logprobs": tops,
                    })
                })
                .collect();
            json!({"content": content, "refusal": null})
        }
        Endpoint::Completion => {
            let mut offset = 0;
            let mut offsets = Vec::new();
            for (_, bytes, _) in list {
                offsets.push(offset);
                offset += text(bytes).len();
            }
            let tops: Vec<Value> = list
                .iter()
                .map(|(lp, _, top)| {
                    let m: serde_json::Map<String, Value> = lp
                        .top
                        .iter()
                        .zip(top)
                        .map(|(t, b)| (text(b), json!(t.logprob)))
                        .collect();
                    Value::Object(m)
                })
                .collect();
            json!({
                "tokens": list.iter().map(|(_, b, _)| text(b)).collect::<Vec<_>>(),
                "token_logprobs": list.iter().map(|(lp, _, _)| lp.chosen.logprob).collect::<Vec<_>>(),
                "top_logprobs": tops,
                "text_offset": offsets,
            })
        }
    }
}

impl Reply {
    /// A new answer with a fresh id (`chatcmpl-…` or `cmpl-…`).
    pub fn new(endpoint: Endpoint, model: &str) -> Reply {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = match endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        };
        Reply {
            id: format!("{prefix}-{:08x}{n:x}", rand::random::<u32>()),
            created: unix_now(),
            model: model.to_string(),
            endpoint,
            wants_logprobs: false,
        }
    }

    fn object(&self, streamed: bool) -> &'static str {
        match (self.endpoint, streamed) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, streamed: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(streamed),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        })
    }

    /// The whole answer of a request that was not streamed.
    pub fn whole(
        &self,
        text: &str,
        logprobs: Option<&[TokenLogprobs]>,
        reason: StopReason,
        usage: Usage,
    ) -> Value {
        let lps = logprobs.map_or(Value::Null, |l| logprobs_json(self.endpoint, l));
        let choice = match self.endpoint {
            Endpoint::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": null},
                "logprobs": lps,
                "finish_reason": finish_reason(reason),
            }),
            Endpoint::Completion => json!({
                "index": 0,
                "text": text,
                "logprobs": lps,
                "finish_reason": finish_reason(reason),
            }),
        };
        let mut v = self.envelope(false, json!([choice]));
        v["usage"] = usage.json();
        v
    }

    /// The whole answer of a chat request whose output was parsed: its content (null when
    /// there is only a call), `reasoning_content` and `tool_calls` (then `finish_reason:
    /// "tool_calls"`).
    pub fn whole_chat(
        &self,
        content: Option<&str>,
        reasoning: Option<&str>,
        calls: &[ToolCall],
        logprobs: Option<&[TokenLogprobs]>,
        reason: StopReason,
        usage: Usage,
    ) -> Value {
        let mut v = self.whole(content.unwrap_or(""), logprobs, reason, usage);
        let choice = &mut v["choices"][0];
        if let Some(r) = reasoning {
            choice["message"]["reasoning_content"] = r.into();
        }
        if !calls.is_empty() {
            if content.is_none() {
                choice["message"]["content"] = Value::Null;
            }
            choice["message"]["tool_calls"] = calls.iter().map(ToolCall::json).collect();
            choice["finish_reason"] = "tool_calls".into();
        }
        v
    }

    /// A chunk carrying `text` (with the role, for the first chunk of a chat answer), or the
    /// closing chunk with its `finish_reason`.
    fn chunk(&self, text: Option<&str>, role: bool, reason: Option<StopReason>) -> Value {
        let finish = reason.map(finish_reason);
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let mut delta = json!({});
                if role {
                    delta["role"] = "assistant".into();
                }
                if let Some(t) = text {
                    delta["content"] = t.into();
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Completion => json!({
                "index": 0,
                "text": text.unwrap_or(""),
                "logprobs": null,
                "finish_reason": finish,
            }),
        };
        self.envelope(true, json!([choice]))
    }

    /// The first chunk of a stream: the assistant's role, for chat; none for completions.
    pub fn opening_chunk(&self) -> Option<Value> {
        (self.endpoint == Endpoint::Chat).then(|| self.chunk(Some(""), true, None))
    }

    /// A chunk of generated text.
    pub fn text_chunk(&self, text: &str) -> Value {
        self.chunk(Some(text), false, None)
    }

    /// A chunk carrying the log-probabilities of tokens whose text went before.
    pub fn logprob_chunk(&self, list: &[TokenLogprobs]) -> Value {
        let mut v = self.chunk(None, false, None);
        v["choices"][0]["logprobs"] = logprobs_json(self.endpoint, list);
        if self.endpoint == Endpoint::Completion {
            v["choices"][0]["text"] = "".into();
        }
        v
    }

    /// A chunk of reasoning (`delta.reasoning_content`).
    pub fn reasoning_chunk(&self, text: &str) -> Value {
        let mut v = self.chunk(None, false, None);
        v["choices"][0]["delta"]["reasoning_content"] = text.into();
        v
    }

    /// A chunk carrying the `index`th tool call whole (`delta.tool_calls`).
    pub fn tool_call_chunk(&self, index: usize, call: &ToolCall) -> Value {
        let mut v = self.chunk(None, false, None);
        let mut c = call.json();
        c["index"] = index.into();
        v["choices"][0]["delta"]["tool_calls"] = json!([c]);
        v
    }

    /// The chunk that ends the choice (`finish_reason: "tool_calls"` after calls).
    pub fn closing_chunk(&self, reason: StopReason, calls: bool) -> Value {
        let mut v = self.chunk(None, false, Some(reason));
        if calls {
            v["choices"][0]["finish_reason"] = "tool_calls".into();
        }
        v
    }

    /// The usage chunk (`stream_options.include_usage`): no choices.
    pub fn usage_chunk(&self, usage: Usage) -> Value {
        let mut v = self.envelope(true, json!([]));
        v["usage"] = usage.json();
        v
    }
}
