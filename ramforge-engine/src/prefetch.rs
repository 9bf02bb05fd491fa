//! Asynchronous prefetch of streamed layers: one I/O thread reads the next streamed layers, in
//! visiting order and cyclically (after the last, the first one for the next token), into a
//! ring of budget-charged buffers while the current layer computes.
//!
//! Buffers travel: free on this side, then with a request to the I/O thread, then back with
//! the result; the one in use by the compute is recycled at the next access. Each access that
//! finds its layer already read is a hit; one that has to wait is late, and the wait is
//! counted. An access out of the expected order (the first one, or after an error) drains what
//! is in flight and restarts the ring at the asked layer.

use crate::direct_io::{AlignedBuf, LayerLayout, StreamFile};
use crate::error::EngineError;
use crate::weights::ResidencyStats;
use ramforge_gguf::GgufError;
use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

struct Request {
    layer: usize,
    buf: AlignedBuf,
}

struct Done {
    buf: AlignedBuf,
    result: Result<u64, GgufError>,
    secs: f64,
    /// Whether the reader still reads around the page cache after this read.
    direct: bool,
}

/// The I/O thread and its ring of buffers.
pub struct Prefetcher {
    requests: Option<Sender<Request>>,
    done: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
    layouts: Arc<Vec<Option<LayerLayout>>>,
    /// Streamed layers in visiting order.
    order: Vec<usize>,
    /// Index into `order` of the next layer to request.
    next: usize,
    free: Vec<AlignedBuf>,
    /// Layers requested and not yet taken, oldest first (the thread answers in this order).
    in_flight: VecDeque<usize>,
    /// The layer the compute is using, and its buffer.
    current: Option<(usize, AlignedBuf)>,
    direct: bool,
}

impl Prefetcher {
    /// Starts the I/O thread on `file` with `buffers`; `layouts[i]` is `Some` for every
    /// streamed layer `i`.
    pub fn start(
        mut file: StreamFile,
        layouts: Vec<Option<LayerLayout>>,
        buffers: Vec<AlignedBuf>,
    ) -> Result<Prefetcher, EngineError> {
        let layouts = Arc::new(layouts);
        let order: Vec<usize> = (0..layouts.len())
            .filter(|&i| layouts[i].is_some())
            .collect();
        let direct = file.is_direct();
        let (req_tx, req_rx) = channel::<Request>();
        let (done_tx, done_rx) = channel::<Done>();
        let thread_layouts = Arc::clone(&layouts);
        let thread = std::thread::Builder::new()
            .name("ramforge-io".into())
            .spawn(move || {
                for mut req in req_rx {
                    let started = Instant::now();
                    let result = match &thread_layouts[req.layer] {
                        Some(layout) => layout.read_into(&mut file, req.buf.bytes_mut()),
                        None => Ok(0),
                    };
                    let done = Done {
                        buf: req.buf,
                        result,
                        secs: started.elapsed().as_secs_f64(),
                        direct: file.is_direct(),
                    };
                    if done_tx.send(done).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| EngineError::Threads {
                threads: 1,
                reason: format!("prefetch thread: {e}"),
            })?;
        Ok(Prefetcher {
            requests: Some(req_tx),
            done: done_rx,
            thread: Some(thread),
            layouts,
            order,
            next: 0,
            free: buffers,
            in_flight: VecDeque::new(),
            current: None,
            direct,
        })
    }

    /// Whether the first reads went around the page cache (`O_DIRECT`).
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Buffers in the ring.
    pub fn depth(&self) -> usize {
        self.free.len() + self.in_flight.len() + usize::from(self.current.is_some())
    }

    /// The layout of streamed layer `i`.
    pub fn layout(&self, i: usize) -> Option<&LayerLayout> {
        self.layouts[i].as_ref()
    }

    /// Marks the compute done with the current layer and keeps the reader busy.
    pub fn recycle(&mut self) -> Result<(), EngineError> {
        if let Some((_, buf)) = self.current.take() {
            self.free.push(buf);
        }
        self.top_up()
    }

    fn top_up(&mut self) -> Result<(), EngineError> {
        while let Some(buf) = self.free.pop() {
            let layer = self.order[self.next];
            let sent = self
                .requests
                .as_ref()
                .is_some_and(|tx| tx.send(Request { layer, buf }).is_ok());
            if !sent {
                return Err(stopped());
            }
            self.in_flight.push_back(layer);
            self.next = (self.next + 1) % self.order.len();
        }
        Ok(())
    }

    /// Waits for everything in flight and frees its buffers (their bytes were read: counted).
    fn drain(&mut self, stats: &mut ResidencyStats) {
        while self.in_flight.pop_front().is_some() {
            match self.done.recv() {
                Ok(d) => {
                    stats.read_secs += d.secs;
                    if let Ok(n) = d.result {
                        stats.bytes_read += n;
                    }
                    self.free.push(d.buf);
                }
                Err(_) => break,
            }
        }
    }

    /// The bytes of streamed layer `layer`, read ahead if it was expected, else now.
    pub fn get(&mut self, layer: usize, stats: &mut ResidencyStats) -> Result<&[u8], EngineError> {
        if let Some((_, buf)) = self.current.take() {
            self.free.push(buf);
        }
        if self.in_flight.front() != Some(&layer) {
            self.drain(stats);
            self.next = self
                .order
                .iter()
                .position(|&l| l == layer)
                .expect("get is only asked for streamed layers");
        }
        self.top_up()?;
        let done = match self.done.try_recv() {
            Ok(d) => {
                stats.prefetch_hits += 1;
                d
            }
            Err(TryRecvError::Empty) => {
                let started = Instant::now();
                let d = self.done.recv().map_err(|_| stopped())?;
                stats.prefetch_late += 1;
                stats.io_wait_secs += started.elapsed().as_secs_f64();
                d
            }
            Err(TryRecvError::Disconnected) => return Err(stopped()),
        };
        self.in_flight.pop_front();
        stats.read_secs += done.secs;
        stats.direct_io = done.direct;
        match done.result {
            Ok(n) => {
                stats.bytes_read += n;
                stats.layers_loaded += 1;
                let (_, buf) = self.current.insert((layer, done.buf));
                Ok(buf.bytes())
            }
            Err(e) => {
                // Whatever else is in flight was read from the same file: let it land, keep
                // every buffer, and restart from scratch at the next access.
                // The next access is most likely the start of a new pass.
                self.free.push(done.buf);
                self.drain(stats);
                self.next = 0;
                Err(e.into())
            }
        }
    }
}

fn stopped() -> EngineError {
    EngineError::Invalid("the prefetch thread stopped".into())
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        // Closing the request channel ends the thread after its current read; joining it
        // means every buffer (and its charge) is gone when the prefetcher is.
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
