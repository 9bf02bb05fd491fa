//! The Ctrl-C "stop generating" flag that `run`, `chat` and `bench` poll.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The process-wide "stop generating" flag, set by Ctrl-C. The first call installs the handler;
/// a second Ctrl-C while the flag is still set exits at once with status 130, as shells expect.
pub fn cancel_flag() -> &'static AtomicBool {
    static FLAG: OnceLock<&'static AtomicBool> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let installed = ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
        });
        if let Err(e) = installed {
            crate::note!("note: Ctrl-C will not stop generation cleanly ({e})");
        }
        flag
    })
}
