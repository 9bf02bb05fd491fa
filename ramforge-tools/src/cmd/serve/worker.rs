//! The request side of the engine's thread: a bounded queue of jobs (`job`) and the guard that
//! cancels a job whose client hung up. The thread itself is the scheduler (`scheduler`).

use super::errors::ApiError;
pub use super::job::Event;
use super::job::Job;
use super::scheduler::{serve_jobs, Busiest};
use ramforge_engine::{Engine, SamplingParams};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

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

/// Starts the engine thread with room for `waiting` queued requests besides those running
/// (up to [`Engine::max_sequences`] at once). The thread ends when every [`Queue`] is dropped
/// and no job is left.
pub fn start(
    engine: Engine,
    waiting: usize,
) -> std::io::Result<(Queue, Arc<Busiest>, JoinHandle<()>)> {
    let (sender, jobs) = sync_channel(waiting);
    let busiest = Arc::new(Busiest::default());
    let seen = Arc::clone(&busiest);
    let thread = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || serve_jobs(engine, jobs, &seen))?;
    Ok((Queue(sender), busiest, thread))
}
