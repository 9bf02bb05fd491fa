//! Parallel regions: the products' row chunks (and the engine's attention items) run on a
//! [`WorkerPool`] whose threads claim items from a shared counter.
//!
//! Why not rayon's pool for these: a decoding step is hundreds of short regions, and an idle
//! rayon worker calls `sched_yield` between them, which hands its core to any other runnable
//! process for a whole time slice. Here an idle worker spins (without yielding) for `SPIN`
//! before it sleeps, and the caller takes part in its own region. A claim takes a share of
//! the items left (at least one), so a region costs a few claims and its last items go one at
//! a time. [`WorkerPool::install_with`] can keep the regions on the calling thread, for when
//! waiting for a preempted worker costs more than it gives (the engine measures that).
//!
//! Without an installed pool, [`for_each`] runs on rayon's current pool, so the kernels'
//! public functions stay parallel for users of this crate alone.

use rayon::prelude::*;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker (or a caller waiting for its region's last items) spins before it
/// sleeps: longer than the serial work between two regions of a decoding step, short enough
/// that an idle server gives its cores back at once.
const SPIN: Duration = Duration::from_micros(200);

/// What the items of one region share, on its caller's stack.
struct RegionDesc<'f> {
    f: &'f (dyn Fn(usize) + Sync),
    caller: Thread,
}

/// Where a region is published: the double buffer of [`Shared::slots`], by epoch parity.
struct Slot {
    /// The region's description. Only dereferenced after claiming one of its items (see
    /// [`Shared::work`]): its caller does not return, and the description stays, before every
    /// claimed item is counted in `done`.
    desc: AtomicPtr<RegionDesc<'static>>,
    total: AtomicUsize,
}

struct Shared {
    /// The current region's epoch (high 32 bits) and next unclaimed item (low 32 bits).
    /// Claiming is one compare-exchange of this word, which fails for a region that ended.
    claim: AtomicU64,
    slots: [Slot; 2],
    /// Items of the current region that have finished (added once per thread per region).
    done: AtomicUsize,
    /// An item's panic, re-raised on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    workers: Vec<Worker>,
    stop: AtomicBool,
}

/// What a caller needs to wake a worker.
struct Worker {
    /// Set while it sleeps (or is about to).
    sleeping: AtomicBool,
    /// Its thread, registered when it starts.
    thread: OnceLock<Thread>,
}

const ITEM_BITS: u32 = 32;

fn epoch_of(word: u64) -> u64 {
    word >> ITEM_BITS
}

impl Shared {
    /// Runs items of the current region until none is left unclaimed; the thread whose count
    /// completes the region wakes its caller.
    fn work(&self) {
        let mut finished = 0usize;
        let mut region: Option<(&RegionDesc<'_>, usize)> = None;
        loop {
            let word = self.claim.load(Ordering::Acquire);
            let slot = &self.slots[(epoch_of(word) & 1) as usize];
            let total = slot.total.load(Ordering::Acquire);
            let item = (word & ((1 << ITEM_BITS) - 1)) as usize;
            if item >= total {
                break;
            }
            // Guided: a share of what is left (at least one item), so a region is a few claims
            // and its last items still go one at a time.
            let take = ((total - item) / (2 * (self.workers.len() + 1))).max(1);
            if self
                .claim
                .compare_exchange_weak(
                    word,
                    word + take as u64,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
            {
                continue;
            }
            // SAFETY: the compare-exchange claimed `item` of the region `word` names, so that
            // region was still running and its caller waits in `run` until this thread's count
            // (which includes `item`) is added: the description and the function it borrows
            // are alive. A thread's claims between two counts are all of one region.
            let (desc, _) = *region
                .get_or_insert_with(|| (unsafe { &*slot.desc.load(Ordering::Acquire) }, total));
            for i in item..item + take {
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| (desc.f)(i))) {
                    let mut first = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                    first.get_or_insert(p);
                }
            }
            finished += take;
        }
        if let Some((desc, total)) = region {
            // Cloned before the count: once the region is complete its description may go.
            let caller = desc.caller.clone();
            if self.done.fetch_add(finished, Ordering::AcqRel) + finished == total {
                caller.unpark();
            }
        }
    }
}

/// A fixed set of worker threads for [`for_each`] regions run on the thread that
/// [`WorkerPool::install`]ed it (which takes part: `threads` in all).
pub struct WorkerPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

thread_local! {
    /// The pool installed on this thread.
    static CURRENT: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
    /// Whether this thread is inside a region (a nested region then runs inline).
    static IN_REGION: Cell<bool> = const { Cell::new(false) };
    /// Whether regions run on this thread alone ([`WorkerPool::install_with`]).
    static SOLO: Cell<bool> = const { Cell::new(false) };
}

impl WorkerPool {
    /// A pool of `threads` in all: the installing thread and `threads - 1` workers.
    pub fn new(threads: usize) -> std::io::Result<WorkerPool> {
        let helpers = threads.max(1) - 1;
        let slot = || Slot {
            desc: AtomicPtr::new(std::ptr::null_mut()),
            total: AtomicUsize::new(0),
        };
        let shared = Arc::new(Shared {
            claim: AtomicU64::new(0),
            slots: [slot(), slot()],
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
            workers: (0..helpers)
                .map(|_| Worker {
                    sleeping: AtomicBool::new(false),
                    thread: OnceLock::new(),
                })
                .collect(),
            stop: AtomicBool::new(false),
        });
        let mut workers = Vec::with_capacity(helpers);
        for w in 0..helpers {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("ramforge-{}", w + 1))
                .spawn(move || worker(&s, w));
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    // The pool's Drop stops and joins the workers already started.
                    drop(WorkerPool { shared, workers });
                    return Err(e);
                }
            }
        }
        Ok(WorkerPool { shared, workers })
    }

    /// Threads that run a region: the installing one and the workers.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f` with this pool installed on the calling thread: the [`for_each`] regions it
    /// runs (there, not on other threads) use the pool.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<Shared>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = previous);
            }
        }
        let previous = CURRENT.with(|c| c.borrow_mut().replace(Arc::clone(&self.shared)));
        let _restore = Restore(previous);
        f()
    }

    /// [`WorkerPool::install`], but with `solo` the regions `f` runs stay on the calling
    /// thread: for when another process holds part of the cores and waiting for a descheduled
    /// worker costs more than the worker gives (the engine measures which, step by step).
    pub fn install_with<R>(&self, solo: bool, f: impl FnOnce() -> R) -> R {
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                SOLO.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(SOLO.with(|c| c.replace(solo)));
        self.install(f)
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for h in &self.workers {
            h.thread().unpark();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(s: &Shared, index: usize) {
    let me = &s.workers[index];
    let _ = me.thread.set(std::thread::current());
    IN_REGION.with(|c| c.set(true));
    let mut seen = epoch_of(s.claim.load(Ordering::Acquire));
    loop {
        s.work();
        // Idle until the next region (or the pool's end); a caller wakes a sleeping worker.
        let idle = |order| epoch_of(s.claim.load(order)) == seen && !s.stop.load(order);
        wait_until(
            || !idle(Ordering::Acquire),
            || {
                me.sleeping.store(true, Ordering::SeqCst);
                if idle(Ordering::SeqCst) {
                    std::thread::park();
                }
                me.sleeping.store(false, Ordering::SeqCst);
            },
        );
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = epoch_of(s.claim.load(Ordering::Acquire));
    }
}

/// Returns once `ready()`: spins (without yielding the core) for [`SPIN`], then calls `sleep`
/// before each further check.
fn wait_until(ready: impl Fn() -> bool, mut sleep: impl FnMut()) {
    let start = Instant::now();
    let mut spins = 0u32;
    while !ready() {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && start.elapsed() >= SPIN {
            sleep();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Runs `f(i)` for every `i < total`, each once, on the installed pool's threads (the calling
/// thread among them), else on rayon's current pool. Returns when all have run; a panic of
/// any item is re-raised here once every item has finished.
pub fn for_each(total: usize, f: impl Fn(usize) + Sync) {
    if IN_REGION.with(Cell::get) {
        // Inside an item (or on a worker): the region's threads are busy already.
        (0..total).for_each(f);
        return;
    }
    match CURRENT.with(|c| c.borrow().clone()) {
        Some(s) if !s.workers.is_empty() && total > 1 && !SOLO.with(Cell::get) => {
            run(&s, total, &f)
        }
        Some(_) => (0..total).for_each(f),
        None => (0..total).into_par_iter().for_each(&f),
    }
}

fn run(s: &Shared, total: usize, f: &(dyn Fn(usize) + Sync)) {
    assert!(total < 1 << ITEM_BITS, "{total} items in one region");
    let desc = RegionDesc {
        f,
        caller: std::thread::current(),
    };
    // The previous region is complete (its caller waited for it), so no thread touches the
    // slot this one gets: the other region in it ended before the previous one started.
    let epoch = epoch_of(s.claim.load(Ordering::Acquire)) + 1;
    let slot = &s.slots[(epoch & 1) as usize];
    // SAFETY (lifetime erasure only): the description is dereferenced by other threads only
    // for items they claimed, and this function returns after all of them are counted.
    let erased =
        unsafe { std::mem::transmute::<*const RegionDesc<'_>, *mut RegionDesc<'static>>(&desc) };
    slot.desc.store(erased, Ordering::Relaxed);
    slot.total.store(total, Ordering::Relaxed);
    s.done.store(0, Ordering::Relaxed);
    s.claim.store(epoch << ITEM_BITS, Ordering::SeqCst);
    for w in &s.workers {
        if w.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = w.thread.get() {
                t.unpark();
            }
        }
    }
    IN_REGION.with(|c| c.set(true));
    s.work();
    IN_REGION.with(|c| c.set(false));
    // Wait for the items other threads still run; the one completing the count unparks.
    wait_until(
        || s.done.load(Ordering::Acquire) >= total,
        std::thread::park,
    );
    let panic = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(p) = panic {
        resume_unwind(p);
    }
}

/// [`for_each`] over the `chunk`-element pieces of `data` (the last may be shorter):
/// `f(i, piece_i)`, each piece given to one item only.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(chunk > 0, "chunk size 0");
    let len = data.len();
    let base = SendPtr(data.as_mut_ptr());
    for_each(len.div_ceil(chunk), |i| {
        let start = i * chunk;
        let n = chunk.min(len - start);
        // SAFETY: item i is the only one given elements start..start + n of `data`, which
        // is borrowed mutably for the whole call, and each item runs once.
        let piece = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), n) };
        f(i, piece)
    });
}

/// A pointer the items of one region share; each item derives a disjoint piece from it.
struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used by `for_each_chunk_mut`, whose items touch disjoint elements.
unsafe impl<T: Send> Send for SendPtr<T> {}
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once_on_the_pool_and_without_it() {
        for threads in [1, 2, 3] {
            let pool = WorkerPool::new(threads).unwrap();
            assert_eq!(pool.threads(), threads);
            for total in [0, 1, 2, 7, 1000] {
                let hits: Vec<AtomicUsize> = (0..total).map(|_| AtomicUsize::new(0)).collect();
                pool.install(|| {
                    for_each(total, |i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    })
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
        let hits: Vec<AtomicUsize> = (0..50).map(|_| AtomicUsize::new(0)).collect();
        for_each(50, |i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn items_run_on_several_threads_and_regions_nest_inline() {
        let pool = WorkerPool::new(2).unwrap();
        let caller = std::thread::current().id();
        let elsewhere = AtomicUsize::new(0);
        let nested = AtomicUsize::new(0);
        for _ in 0..200 {
            pool.install(|| {
                for_each(64, |_| {
                    if std::thread::current().id() != caller {
                        elsewhere.fetch_add(1, Ordering::Relaxed);
                    }
                    for_each(3, |_| {
                        nested.fetch_add(1, Ordering::Relaxed);
                    });
                    std::thread::sleep(Duration::from_micros(20));
                })
            });
        }
        assert_eq!(nested.load(Ordering::Relaxed), 200 * 64 * 3);
        assert!(
            elsewhere.load(Ordering::Relaxed) > 0,
            "the worker never ran an item"
        );
    }

    #[test]
    fn solo_regions_stay_on_the_calling_thread() {
        let pool = WorkerPool::new(2).unwrap();
        let caller = std::thread::current().id();
        let elsewhere = AtomicUsize::new(0);
        for _ in 0..50 {
            pool.install_with(true, || {
                for_each(64, |_| {
                    if std::thread::current().id() != caller {
                        elsewhere.fetch_add(1, Ordering::Relaxed);
                    }
                })
            });
        }
        assert_eq!(elsewhere.load(Ordering::Relaxed), 0);
        assert!(!SOLO.with(Cell::get), "install_with restores the mode");
    }

    #[test]
    fn chunks_are_disjoint_and_cover_the_slice() {
        let pool = WorkerPool::new(2).unwrap();
        let mut data = vec![0usize; 1001];
        pool.install(|| {
            for_each_chunk_mut(&mut data, 10, |i, piece| {
                for (j, v) in piece.iter_mut().enumerate() {
                    *v += i * 10 + j + 1;
                }
            })
        });
        assert!(data.iter().enumerate().all(|(k, &v)| v == k + 1));
    }

    #[test]
    fn a_panicking_item_is_raised_on_the_caller_after_the_region() {
        let pool = WorkerPool::new(2).unwrap();
        let ran = AtomicUsize::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.install(|| {
                for_each(100, |i| {
                    ran.fetch_add(1, Ordering::Relaxed);
                    if i == 37 {
                        panic!("item 37");
                    }
                })
            })
        }));
        let p = result.expect_err("the panic reaches the caller");
        assert_eq!(p.downcast_ref::<&str>(), Some(&"item 37"));
        assert_eq!(ran.load(Ordering::Relaxed), 100, "every item ran");
        // The pool still works.
        let count = AtomicUsize::new(0);
        pool.install(|| {
            for_each(10, |_| {
                count.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(count.load(Ordering::Relaxed), 10);
    }
}
