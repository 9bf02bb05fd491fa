//! One generation as the engine thread sees it: the prompt and sampler, the cancel flag its
//! client's guard raises, and the channel of events back to the client (text as it is
//! produced, then the end). A leaf shared by the queue (`worker`) and the `scheduler`.

use super::reply::Usage;
use ramforge_engine::{Constraint, Logprobs, SamplingParams, StopReason};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// What the engine thread tells a request.
pub enum Event {
    /// Text that became visible.
    Text(String),
    /// The log-probabilities of a generated token (when asked for), with the token's bytes
    /// and those of the top tokens.
    Logprob(Logprobs, Vec<u8>, Vec<Vec<u8>>),
    /// The generation ended: why and what it used, or the engine's error.
    Done(Result<(StopReason, Usage), String>),
}

/// One generation for the engine thread.
pub(super) struct Job {
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    /// The compiled `response_format`, if any.
    pub constraint: Option<Constraint>,
    pub cancel: Arc<AtomicBool>,
    pub events: UnboundedSender<Event>,
    /// Its place among the jobs the server holds, waiting or running; held for its `Drop`.
    pub _place: Place,
}

/// One of the places the queue counts (`--queue` waiting + `--parallel` running), given back
/// when the job is dropped: finished, failed or abandoned.
pub(super) struct Place(pub Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Job {
    /// Whether its client is gone (the handler dropped its guard or its events).
    pub fn abandoned(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.events.is_closed()
    }

    /// Sends text that became visible; a client that is gone has the job cancelled.
    pub fn text(&self, text: &str) {
        if !text.is_empty() && self.events.send(Event::Text(text.to_string())).is_err() {
            self.cancel.store(true, Ordering::Relaxed);
        }
    }

    /// Sends a token's log-probabilities.
    pub fn logprob(&self, lp: Logprobs, bytes: Vec<u8>, top: Vec<Vec<u8>>) {
        let _ = self.events.send(Event::Logprob(lp, bytes, top));
    }

    /// Ends the job with its result.
    pub fn done(&self, result: Result<(StopReason, Usage), String>) {
        let _ = self.events.send(Event::Done(result));
    }
}
