//! `ramforge-tools serve` end to end, over loopback HTTP on an ephemeral port: routes and
//! errors (`errors`), generation against the CLI's own output and streamed against plain
//! (`generation`), a conversation with a hybrid model from its cached state (`hybrid`), hang-ups and SIGTERM (`lifecycle`), `/metrics` and `/status` (`metrics`), the
//! chat page in headless Chromium (`page`), several requests decoded together (`parallel`), logprobs, penalties and structured output
//! (`sampling`), speculative decoding equal to plain (`speculative`), tool calls and reasoning
//! (`tools`), and the real `openai` python
//! client (`openai_client`).

#[path = "../common/mod.rs"]
mod common;
mod errors;
mod generation;
mod hybrid;
mod lifecycle;
mod metrics;
mod openai_client;
mod page;
mod parallel;
mod sampling;
mod server;
mod speculative;
mod tools;
