//! The engine's own thread: it takes jobs from a bounded queue one at a time and generates
//! each with [`Engine::generate_reusing`], so a conversation's next turn reuses the prefix the
//! context already holds. Text goes back to the request as it is produced; a request whose
//! client is gone has its cancel flag raised and is stopped (or skipped, if still queued).

use super::errors::ApiError;
use super::reply::Usage;
use ramforge_engine::{Engine, SamplingParams, StopReason};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What the engine thread tells a request.
pub enum Event {
    /// Text that became visible.
    Text(String),
    /// The generation ended: why and what it used, or the engine's error.
    Done(Result<(StopReason, Usage), String>),
}

/// One generation for the engine thread.
struct Job {
    prompt: Vec<u32>,
    params: SamplingParams,
    cancel: Arc<AtomicBool>,
    events: UnboundedSender<Event>,
}

/// Raises a request's cancel flag when dropped: when its handler or its stream is dropped
/// because the client hung up, the engine stops after the current token.
pub struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The sending end of the queue; cloned into every request.
#[derive(Clone)]
pub struct Queue(SyncSender<Job>);

impl Queue {
    /// Queues a generation: the events to read and the guard that cancels it when dropped.
    /// A full queue is a 503.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
    ) -> Result<(UnboundedReceiver<Event>, CancelOnDrop), ApiError> {
        let cancel = Arc::new(AtomicBool::new(false));
        let (events, receiver) = unbounded_channel();
        let job = Job {
            prompt,
            params,
            cancel: Arc::clone(&cancel),
            events,
        };
        match self.0.try_send(job) {
            Ok(()) => Ok((receiver, CancelOnDrop(cancel))),
            Err(TrySendError::Full(_)) => Err(ApiError::busy(
                "the server is busy: its request queue is full; retry later",
            )),
            Err(TrySendError::Disconnected(_)) => {
                Err(ApiError::busy("the server is shutting down"))
            }
        }
    }
}

/// Starts the engine thread with room for `waiting` queued requests besides the one running.
/// The thread ends when every [`Queue`] is dropped and the queue is empty.
pub fn start(engine: Engine, waiting: usize) -> std::io::Result<(Queue, JoinHandle<()>)> {
    let (sender, jobs) = sync_channel(waiting);
    let thread = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || serve_jobs(engine, jobs))?;
    Ok((Queue(sender), thread))
}

fn serve_jobs(mut engine: Engine, jobs: Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        if job.cancel.load(Ordering::Relaxed) || job.events.is_closed() {
            continue; // its client left while it waited
        }
        let (events, cancel) = (&job.events, &*job.cancel);
        let result = engine.generate_reusing(
            &job.prompt,
            &job.params,
            &mut |_, text| {
                if !text.is_empty() && events.send(Event::Text(text.to_string())).is_err() {
                    cancel.store(true, Ordering::Relaxed);
                }
            },
            cancel,
        );
        let done = result
            .map(|s| {
                let usage = Usage {
                    prompt_tokens: s.prompt_tokens,
                    cached_tokens: s.cached_tokens,
                    completion_tokens: s.generated_tokens,
                };
                (s.stop_reason, usage)
            })
            .map_err(|e| e.to_string());
        let _ = events.send(Event::Done(done));
    }
}
