//! Running a chat template render in a forked child process under an address-space limit and
//! a deadline (Linux), so that a template whose values grow without bound (no instruction
//! count catches `s ~ s` doubled forty times) costs the caller neither memory nor time.
//! Elsewhere the render runs in-process under the instruction, recursion, loop and output
//! limits alone.

use super::limits::RenderLimits;
#[cfg(target_os = "linux")]
use super::limits::TEMPLATE_TIME_LIMIT;
use super::template_error::ChatError;

/// Runs `render` under `limits`; its result comes back as if it had run here. A panic in the
/// child is a panic here too (a bug, not a limit).
pub fn run_isolated(
    limits: &RenderLimits,
    render: impl FnOnce() -> Result<String, ChatError>,
) -> Result<String, ChatError> {
    #[cfg(target_os = "linux")]
    {
        linux::run(limits, render)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = limits;
        render()
    }
}

/// The child's answer on the pipe: a tag byte, then the text.
#[cfg(target_os = "linux")]
pub(super) fn encode(result: std::thread::Result<Result<String, ChatError>>) -> Vec<u8> {
    let (tag, text) = match result {
        Ok(Ok(s)) => (b'O', s),
        Ok(Err(ChatError::Syntax(s))) => (b'S', s),
        Ok(Err(ChatError::Limit(s))) => (b'L', s),
        Ok(Err(e)) => (b'R', e.to_string()),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            (b'P', msg)
        }
    };
    let mut out = vec![tag];
    out.extend_from_slice(text.as_bytes());
    out
}

/// The child's answer, or None when it is not one (the child died before finishing it).
#[cfg(target_os = "linux")]
pub(super) fn decode(bytes: Vec<u8>) -> Option<Result<String, ChatError>> {
    let (&tag, text) = bytes.split_first()?;
    let text = String::from_utf8(text.to_vec()).ok()?;
    Some(match tag {
        b'O' => Ok(text),
        b'S' => Err(ChatError::Syntax(text)),
        b'L' => Err(ChatError::Limit(text)),
        b'R' => Err(ChatError::Render(
            text.strip_prefix("chat template failed to render: ")
                .unwrap_or(&text)
                .to_string(),
        )),
        b'P' => panic!("chat template rendering panicked: {text}"),
        _ => return None,
    })
}

#[cfg(target_os = "linux")]
pub(super) mod linux {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::time::Instant;

    pub fn run(
        limits: &RenderLimits,
        render: impl FnOnce() -> Result<String, ChatError>,
    ) -> Result<String, ChatError> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return render();
        }
        // SAFETY: both descriptors were just created and are owned here only.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let address_space = current_address_space().saturating_add(limits.memory_bytes as u64);
        // SAFETY: the child only renders (allocation is fork-safe in glibc), writes to the pipe
        // and leaves with _exit, never returning into the caller's code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return render();
        }
        if pid == 0 {
            drop(read_end);
            child(write_end, address_space, render);
        }
        drop(write_end);
        let deadline = Instant::now() + TEMPLATE_TIME_LIMIT;
        let answer = read_until(read_end, deadline, limits.output_bytes + 4096);
        let timed_out = answer.is_none();
        if timed_out {
            // SAFETY: `pid` is our child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let mut status = 0;
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if timed_out {
            return Err(ChatError::Limit(format!(
                "the time limit (TEMPLATE_TIME_LIMIT = {} s)",
                TEMPLATE_TIME_LIMIT.as_secs_f32()
            )));
        }
        decode(answer.unwrap_or_default()).unwrap_or_else(|| {
            Err(ChatError::Limit(format!(
                "{} (the render died with {})",
                limits.memory_message(),
                describe(status)
            )))
        })
    }

    fn child(
        write_end: OwnedFd,
        address_space: u64,
        render: impl FnOnce() -> Result<String, ChatError>,
    ) -> ! {
        let mut lim = prepare_child();
        lim.rlim_cur = address_space.min(lim.rlim_max);
        // SAFETY: sets this process's own limit.
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) };
        let answer = encode(catch_unwind(AssertUnwindSafe(render)));
        let mut pipe = std::fs::File::from(write_end);
        let code = if pipe.write_all(&answer).is_ok() {
            0
        } else {
            1
        };
        // SAFETY: leaves the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) }
    }

    /// Readies a forked render child: default crash handlers, stderr to /dev/null, no core
    /// dumps. Returns its address-space limit as inherited.
    pub(in crate::text) fn prepare_child() -> libc::rlimit {
        // SAFETY: plain system calls on this (single-threaded) child's own state.
        unsafe {
            // A fuzzer's or test harness's crash handlers are not the child's business; an
            // allocation failure under the limit aborts quietly and the parent reports it.
            for sig in [libc::SIGABRT, libc::SIGSEGV, libc::SIGBUS] {
                libc::signal(sig, libc::SIG_DFL);
            }
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            if null >= 0 {
                libc::dup2(null, 2);
            }
            // No core dump for a render that dies at the memory limit (writing one is slow).
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            let mut lim = no_core;
            libc::getrlimit(libc::RLIMIT_AS, &mut lim);
            lim
        }
    }

    /// Everything the child writes, or None when it is not done by `deadline` (or writes more
    /// than `cap`).
    fn read_until(fd: OwnedFd, deadline: Instant, cap: usize) -> Option<Vec<u8>> {
        use std::os::fd::AsRawFd;
        let mut file = std::fs::File::from(fd);
        let mut out = Vec::new();
        let mut buf = [0u8; 64 << 10];
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let mut pfd = libc::pollfd {
                fd: file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: polls one descriptor we own.
            let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
            if ready < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return None;
            }
            if ready == 0 {
                continue;
            }
            match file.read(&mut buf) {
                Ok(0) => return Some(out),
                Ok(n) if out.len() + n <= cap => out.extend_from_slice(&buf[..n]),
                Ok(_) => return None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Some(out),
            }
        }
    }

    /// Bytes of address space this process has now (`/proc/self/statm`).
    pub(in crate::text) fn current_address_space() -> u64 {
        let pages = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        pages * page
    }

    pub(in crate::text) fn describe(status: i32) -> String {
        if libc::WIFSIGNALED(status) {
            format!("signal {}", libc::WTERMSIG(status))
        } else {
            format!("exit status {}", libc::WEXITSTATUS(status))
        }
    }
}
