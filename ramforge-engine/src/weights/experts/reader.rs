//! The expert reader: one I/O thread that reads missed experts, in the order they are asked
//! for, while the compute runs the experts before them. Buffers travel with the requests and
//! come back with the results, so the thread never shares memory with the compute.

use crate::error::EngineError;
use crate::stream::{AlignedBuf, LayerLayout, MappedLayer, StreamFile};
use ramforge_gguf::GgufError;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Instant;

/// One expert to read into `buf`, and windows the compute is done with.
pub(super) struct Request {
    /// Unmapped first: their charge is `buf`'s when `buf` is a staging buffer.
    pub retire: Vec<MappedLayer>,
    pub read: Option<Read>,
}

pub(super) struct Read {
    pub layout: LayerLayout,
    pub buf: AlignedBuf,
    /// Whether the expert may be mapped in place from a warm page cache instead of copied
    /// (it is used once; one the cache keeps must be copied into its slot).
    pub may_map: bool,
}

/// A read done: the buffer back, and the expert's windows when it was mapped instead.
pub(super) struct Done {
    // Field order: unmapped before the buffer (and its charge) goes.
    pub mapped: Option<MappedLayer>,
    pub buf: AlignedBuf,
    pub result: Result<u64, GgufError>,
    pub secs: f64,
    /// Whether the reader still reads around the page cache after this read (its first reads
    /// compare the two paths).
    pub direct: bool,
}

pub(super) struct ExpertReader {
    requests: Option<Sender<Request>>,
    done: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
    direct: bool,
}

impl ExpertReader {
    /// Starts the thread on `file`.
    pub fn start(mut file: StreamFile) -> Result<ExpertReader, EngineError> {
        let direct = file.is_direct();
        let (req_tx, req_rx) = channel::<Request>();
        let (done_tx, done_rx) = channel::<Done>();
        let thread = std::thread::Builder::new()
            .name("ramforge-experts".into())
            .spawn(move || {
                for req in req_rx {
                    drop(req.retire);
                    let Some(Read {
                        layout,
                        mut buf,
                        may_map,
                    }) = req.read
                    else {
                        continue;
                    };
                    let started = Instant::now();
                    let (result, mapped) = if may_map || !file.is_mapped() {
                        match file.fill(&layout, &mut buf) {
                            Ok((n, mapped)) => (Ok(n), mapped),
                            Err(e) => (Err(e), None),
                        }
                    } else {
                        (file.read_layer(&layout, buf.bytes_mut()), None)
                    };
                    let done = Done {
                        mapped,
                        buf,
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
                reason: format!("expert reader thread: {e}"),
            })?;
        Ok(ExpertReader {
            requests: Some(req_tx),
            done: done_rx,
            thread: Some(thread),
            direct,
        })
    }

    /// Whether reads go around the page cache (as of the last read taken).
    pub fn direct(&self) -> bool {
        self.direct
    }

    pub fn send(&self, request: Request) {
        if let Some(tx) = &self.requests {
            // The thread only stops when this side does.
            let _ = tx.send(request);
        }
    }

    /// The oldest read not yet taken (the thread answers in request order).
    pub fn recv(&mut self) -> Result<Done, EngineError> {
        let done = self.done.recv().map_err(|_| EngineError::Threads {
            threads: 1,
            reason: "the expert reader thread stopped".into(),
        })?;
        self.direct = done.direct;
        Ok(done)
    }
}

impl Drop for ExpertReader {
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
