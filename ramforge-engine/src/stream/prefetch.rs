//! Asynchronous prefetch of streamed layers: one I/O thread reads the next streamed layers, in
//! visiting order and cyclically (after the last, the first one for the next token), into a
//! ring of budget-charged buffers while the current layer computes.
//!
//! Buffers travel: free on this side, then with a request to the I/O thread, then back with
//! the result; the one in use by the compute is recycled at the next access. Each access that
//! finds its layer already read is a hit; one that has to wait is late, and the wait is
//! counted. An access out of the expected order (the first one, or after an error) drains what
//! is in flight and restarts the ring at the asked layer.
//!
//! From a warm page cache the thread maps layers in place instead ([`MappedLayer`]): a
//! buffer's charge then covers its layer's mapped windows, which are unmapped when the buffer
//! is recycled, after the layer is checked for pages that went missing under the compute.

use super::aligned::AlignedBuf;
use super::layout::{LayerLayout, MappedLayer};
use super::reader::StreamFile;
use super::stats::ResidencyStats;
use crate::error::EngineError;
use ramforge_gguf::GgufError;
use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

struct Request {
    layer: usize,
    /// Windows the compute is done with, unmapped here before `buf`'s charge is reused.
    retire: Option<MappedLayer>,
    buf: AlignedBuf,
}

struct Done {
    // Field order: unmapped before the buffer (and its charge) goes.
    mapped: Option<MappedLayer>,
    buf: AlignedBuf,
    result: Result<u64, GgufError>,
    secs: f64,
    /// Whether the reader still reads around the page cache after this read.
    direct: bool,
}

/// The layer the compute is using: its buffer, or the windows mapped under its charge.
struct InUse {
    layer: usize,
    // Field order: unmapped before the buffer (and its charge) goes.
    mapped: Option<MappedLayer>,
    buf: AlignedBuf,
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
    /// Windows of recycled layers, to be unmapped by the I/O thread (off the compute's
    /// path); they leave with the next request, whose buffer held their charge.
    retiring: Vec<MappedLayer>,
    free: Vec<AlignedBuf>,
    /// Layers requested and not yet taken, oldest first (the thread answers in this order).
    in_flight: VecDeque<usize>,
    /// The layer the compute is using, and its buffer.
    current: Option<InUse>,
    direct: bool,
    mapped: bool,
    /// The model's files (by shard), to tell where they end when a mapped layer faulted.
    files: Vec<std::fs::File>,
    /// Most buffers the ring keeps ([`Prefetcher::set_depth`]); surplus ones are dropped as
    /// they come back free.
    target: usize,
}

impl Prefetcher {
    /// Starts the I/O thread on `file` with `buffers`; `layouts[i]` is `Some` for every
    /// streamed layer `i`. `model_files` are other handles on the same files (by shard).
    pub fn start(
        mut file: StreamFile,
        model_files: Vec<std::fs::File>,
        layouts: Vec<Option<LayerLayout>>,
        buffers: Vec<AlignedBuf>,
    ) -> Result<Prefetcher, EngineError> {
        let layouts = Arc::new(layouts);
        let order: Vec<usize> = (0..layouts.len())
            .filter(|&i| layouts[i].is_some())
            .collect();
        let direct = file.is_direct();
        let mapped = file.is_mapped();
        let target = buffers.len();
        let (req_tx, req_rx) = channel::<Request>();
        let (done_tx, done_rx) = channel::<Done>();
        let thread_layouts = Arc::clone(&layouts);
        let thread = std::thread::Builder::new()
            .name("ramforge-io".into())
            .spawn(move || {
                for mut req in req_rx {
                    drop(req.retire.take());
                    let started = Instant::now();
                    let (result, mapped) = match &thread_layouts[req.layer] {
                        Some(layout) => match file.fill(layout, &mut req.buf) {
                            Ok((n, mapped)) => (Ok(n), mapped),
                            Err(e) => (Err(e), None),
                        },
                        None => (Ok(0), None),
                    };
                    let done = Done {
                        mapped,
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
            retiring: Vec::new(),
            free: buffers,
            in_flight: VecDeque::new(),
            current: None,
            direct,
            mapped,
            files: model_files,
            target,
        })
    }

    /// Whether the first reads went around the page cache (`O_DIRECT`).
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Whether layers are mapped in place from the page cache (no copy).
    pub fn mapped(&self) -> bool {
        self.mapped
    }

    /// Buffers in the ring.
    pub fn depth(&self) -> usize {
        self.free.len() + self.in_flight.len() + usize::from(self.current.is_some())
    }

    /// Marks the compute done with the current layer and keeps the reader busy. Fails if
    /// the layer was mapped and a page of it went missing while the compute read it (the
    /// compute saw zeros there); the ring then restarts, like after a failed read.
    pub fn recycle(&mut self, stats: &mut ResidencyStats) -> Result<(), EngineError> {
        self.release(stats)?;
        self.top_up()
    }

    /// Unmaps the current layer (checking it first) and frees its buffer.
    fn release(&mut self, stats: &mut ResidencyStats) -> Result<(), EngineError> {
        let Some(used) = self.current.take() else {
            return Ok(());
        };
        let checked = match (&used.mapped, &self.layouts[used.layer]) {
            (Some(mapped), Some(layout)) => layout.check(mapped, &self.files),
            _ => Ok(()),
        };
        self.retiring.extend(used.mapped);
        self.free.push(used.buf);
        checked.map_err(|e| {
            self.restart(stats);
            e.into()
        })
    }

    /// After a failure: lets whatever is in flight land (it came from the same file), keeps
    /// every buffer, and starts afresh at the next access, most likely the start of a pass.
    fn restart(&mut self, stats: &mut ResidencyStats) {
        self.drain(stats);
        self.next = 0;
    }

    /// Sets the prefetch depth (buffers in the ring, at least 1). A shallower ring drops its
    /// surplus buffers, and so returns their charge to the budget, as they come back from the
    /// reader (within one pass); a deeper one gets new buffers from `new_buffer(index)` now,
    /// and stays as deep as it got when that fails (the budget has no room). Returns the
    /// depth the ring keeps from now on.
    pub fn set_depth(
        &mut self,
        depth: usize,
        mut new_buffer: impl FnMut(usize) -> Result<AlignedBuf, EngineError>,
    ) -> usize {
        self.target = depth.max(1);
        while self.depth() < self.target {
            match new_buffer(self.depth()) {
                Ok(buf) => self.free.push(buf),
                Err(_) => {
                    self.target = self.depth().max(1);
                    break;
                }
            }
        }
        self.target
    }

    fn top_up(&mut self) -> Result<(), EngineError> {
        if self.depth() > self.target {
            // Buffers are about to go with their charge: unmap what they covered first.
            self.retiring.clear();
        }
        while self.depth() > self.target && self.free.pop().is_some() {}
        while let Some(buf) = self.free.pop() {
            let layer = self.order[self.next];
            let retire = self.retiring.pop();
            let sent = self
                .requests
                .as_ref()
                .is_some_and(|tx| tx.send(Request { layer, retire, buf }).is_ok());
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

    /// Streamed layer `layer`'s matrices, read (or mapped) ahead if it was expected, else now.
    pub fn get(
        &mut self,
        layer: usize,
        stats: &mut ResidencyStats,
    ) -> Result<StreamedLayer<'_>, EngineError> {
        self.release(stats)?;
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
        stats.mapped_io = done.mapped.is_some();
        match done.result {
            Ok(n) => {
                stats.bytes_read += n;
                stats.layers_loaded += 1;
                let used = self.current.insert(InUse {
                    layer,
                    mapped: done.mapped,
                    buf: done.buf,
                });
                let layout = self.layouts[layer]
                    .as_ref()
                    .expect("get is only asked for streamed layers");
                Ok(match &used.mapped {
                    Some(mapped) => StreamedLayer::Mapped { layout, mapped },
                    None => StreamedLayer::Buffered {
                        layout,
                        buf: used.buf.bytes(),
                    },
                })
            }
            Err(e) => {
                self.free.push(done.buf);
                self.restart(stats);
                Err(e.into())
            }
        }
    }
}

/// A streamed layer the compute may use: read into a ring buffer, or mapped in place.
pub enum StreamedLayer<'a> {
    Buffered {
        layout: &'a LayerLayout,
        buf: &'a [u8],
    },
    Mapped {
        layout: &'a LayerLayout,
        mapped: &'a MappedLayer,
    },
}

impl<'a> StreamedLayer<'a> {
    /// The bytes of the layer's `i`-th matrix (in [`crate::model::LayerTensors::matrices`]
    /// order).
    pub fn matrix(&self, i: usize) -> &'a [u8] {
        match *self {
            StreamedLayer::Buffered { layout, buf } => layout.buffered_matrix(buf, i),
            StreamedLayer::Mapped { layout, mapped } => layout.mapped_matrix(mapped, i),
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
