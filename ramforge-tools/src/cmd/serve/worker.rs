//! The request side of the engine's thread: a bounded queue of jobs (`job`) and the guard that
//! cancels a job whose client hung up. The thread itself is the scheduler (`scheduler`).

use super::errors::ApiError;
pub use super::job::Event;
use super::job::{Job, Place};
use super::metrics::{QueueFigures, Telemetry};
use super::scheduler::{serve_jobs, Busiest};
use ramforge_engine::{Constraint, Engine, SamplingParams};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
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

/// The sending end of the queue; cloned into every request. The jobs it holds, waiting or
/// running, are counted against `limit`; the channel itself is unbounded (a job leaves it when
/// the engine takes it, long before it ends, and nothing is allocated for places not taken).
#[derive(Clone)]
pub struct Queue {
    sender: Sender<Job>,
    held: Arc<AtomicUsize>,
    limit: usize,
}

impl Queue {
    /// Queues a generation: the events to read and the guard that cancels it when dropped.
    /// A full queue (every slot running and every waiting place taken) is a 503.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
        constraint: Option<Constraint>,
    ) -> Result<(UnboundedReceiver<Event>, CancelOnDrop), ApiError> {
        let full = || ApiError::busy("the server is busy: its request queue is full; retry later");
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                (h < self.limit).then_some(h + 1)
            })
            .map_err(|_| full())?;
        let place = Place(Arc::clone(&self.held));
        let cancel = Arc::new(AtomicBool::new(false));
        let (events, receiver) = unbounded_channel();
        let job = Job {
            prompt,
            params,
            constraint,
            cancel: Arc::clone(&cancel),
            events,
            _place: place,
        };
        match self.sender.send(job) {
            Ok(()) => Ok((receiver, CancelOnDrop(cancel))),
            Err(_) => Err(ApiError::busy("the server is shutting down")),
        }
    }

    /// How full it is, for `/metrics`; `parallel` is what the engine decodes together.
    pub fn figures(&self, parallel: usize) -> QueueFigures {
        QueueFigures {
            held: self.held.load(Ordering::Acquire),
            capacity: self.limit,
            parallel,
        }
    }
}

/// Starts the engine thread with room for `waiting` queued requests besides those running
/// (up to [`Engine::max_sequences`] at once). The thread ends when every [`Queue`] is dropped
/// and no job is left, handing the engine back (its expert history is saved then).
pub fn start(
    engine: Engine,
    waiting: usize,
    telemetry: Arc<Telemetry>,
) -> std::io::Result<(Queue, Arc<Busiest>, JoinHandle<Engine>)> {
    let limit = waiting.saturating_add(engine.max_sequences());
    let (sender, jobs) = channel();
    let busiest = Arc::new(Busiest::default());
    let seen = Arc::clone(&busiest);
    let thread = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || serve_jobs(engine, jobs, &seen, &telemetry))?;
    let queue = Queue {
        sender,
        held: Arc::new(AtomicUsize::new(0)),
        limit,
    };
    Ok((queue, busiest, thread))
}
