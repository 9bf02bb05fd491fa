//! Bus errors in mapped model windows become recorded faults instead of a crash.
//!
//! A read-only file mapping whose file shrinks (truncated while running) or whose storage fails
//! raises `SIGBUS` on the next touch of a lost page. A process-wide handler looks the faulting
//! address up among the registered windows: inside one, it maps a zero page over the faulting
//! page (so the interrupted read completes with zeros), records the fault in the window's slot
//! and returns; the engine checks the slot after the layer computes and ends the generation
//! with an error. Any other `SIGBUS` goes to the handler that was installed before (Rust's
//! stack-overflow handler, or the default action).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// Windows that can be registered at once (a few per streamed layer in flight).
const SLOTS: usize = 256;
/// `fault` of a slot without a fault.
const NO_FAULT: u64 = u64::MAX;

struct Slot {
    claimed: AtomicBool,
    /// Start address of the window; 0 while the slot is free or being set up.
    start: AtomicUsize,
    len: AtomicUsize,
    /// Offset in the window of the lowest faulting page.
    fault: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // a template for the array, never used itself
const FREE: Slot = Slot {
    claimed: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fault: AtomicU64::new(NO_FAULT),
};

static WINDOWS: [Slot; SLOTS] = [FREE; SLOTS];
static INSTALL: Once = Once::new();
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// A window registered with the handler; unregistered when dropped (before its memory is
/// unmapped).
pub struct Registration {
    slot: usize,
}

impl Registration {
    /// Registers `start..start + len` (a live mapping), installing the handler on first use;
    /// `None` when every slot is taken.
    pub fn new(start: *const u8, len: usize) -> Option<Registration> {
        install();
        let slot = WINDOWS.iter().position(|s| {
            s.claimed
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        let s = &WINDOWS[slot];
        s.fault.store(NO_FAULT, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        // Published last: the handler only matches a slot whose start is set.
        s.start.store(start as usize, Ordering::Release);
        Some(Registration { slot })
    }

    /// Offset in the window of the lowest page that faulted, if any did.
    pub fn fault(&self) -> Option<u64> {
        match WINDOWS[self.slot].fault.load(Ordering::Acquire) {
            NO_FAULT => None,
            at => Some(at),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let s = &WINDOWS[self.slot];
        s.start.store(0, Ordering::Release);
        s.claimed.store(false, Ordering::Release);
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf reads a constant; sigaction is given a zeroed, then filled, struct
        // and a place for the previous one, which is kept for chaining.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &action, &mut previous) == 0 {
                let _ = PREVIOUS.set(previous);
            }
        }
    });
}

/// The handler. Only async-signal-safe work: atomics and one `mmap`.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for s in &WINDOWS {
        let start = s.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr - start >= s.len.load(Ordering::Acquire) {
            continue;
        }
        let at = addr & !(page - 1);
        // SAFETY: the page lies inside a registered window, a mapping that only RAMforge's
        // windows use; replacing it with a zero page only changes what those reads see.
        let zero = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if zero == libc::MAP_FAILED {
            break;
        }
        s.fault
            .fetch_min(at.saturating_sub(start) as u64, Ordering::AcqRel);
        return;
    }
    // SAFETY: passing the signal on as the previous disposition would have handled it.
    unsafe { chain(sig, info, ctx) }
}

/// Hands a `SIGBUS` outside any window to the previous handler; with the default (or no)
/// handler, restores the default action and returns, so the faulting access repeats and
/// ends the process as it would have without RAMforge.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    match PREVIOUS.get() {
        Some(prev) if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN => {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(prev.sa_sigaction);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
                f(sig);
            }
        }
        _ => {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
        }
    }
}
