//! A long-lived chat template renderer, for a caller that renders many templates (the
//! fuzzer): the limits of [`super::template::render_chat`] (a forked child under an
//! address-space limit and the deadline), but one fork for many renders instead of one each.
//! A render that breaks the memory or time limit costs the child; the next render forks anew.

#[cfg(target_os = "linux")]
use super::limits::{RenderLimits, TEMPLATE_TIME_LIMIT};
#[cfg(target_os = "linux")]
use super::template::input_limits;
use super::template::{render_in_process, ChatError, ChatMessage};
use serde::{Deserialize, Serialize};

/// One render, as the child receives it.
#[derive(Serialize, Deserialize)]
struct Request {
    template: String,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    bos: String,
    eos: String,
}

impl Request {
    fn render(&self) -> Result<String, ChatError> {
        render_in_process(
            &self.template,
            &self.messages,
            self.add_generation_prompt,
            &self.bos,
            &self.eos,
        )
    }

    #[cfg(target_os = "linux")]
    fn limits(&self) -> RenderLimits {
        input_limits(&self.messages, &self.bos, &self.eos)
    }
}

/// Renders chat templates in a child process it keeps between renders.
#[derive(Default)]
pub struct RenderServer {
    #[cfg(target_os = "linux")]
    child: Option<linux::Child>,
}

impl RenderServer {
    /// A server with no child yet (the first render forks it).
    pub fn new() -> RenderServer {
        RenderServer::default()
    }

    /// What [`super::template::render_chat`] gives for the same arguments.
    pub fn render(
        &mut self,
        template: &str,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String, ChatError> {
        let request = Request {
            template: template.to_string(),
            messages: messages.to_vec(),
            add_generation_prompt,
            bos: bos_token.to_string(),
            eos: eos_token.to_string(),
        };
        #[cfg(target_os = "linux")]
        {
            linux::render(&mut self.child, &request)
        }
        #[cfg(not(target_os = "linux"))]
        {
            request.render()
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::super::isolate::linux::{current_address_space, describe, prepare_child};
    use super::super::isolate::{decode, encode};
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::time::Instant;

    /// The renderer process and this side's end of its socket.
    pub struct Child {
        pid: libc::pid_t,
        sock: UnixStream,
    }

    impl Child {
        fn spawn() -> Option<Child> {
            let (ours, theirs) = UnixStream::pair().ok()?;
            // SAFETY: the child only serves renders (allocation is fork-safe in glibc) and
            // leaves with _exit, never returning into the caller's code.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return None;
            }
            if pid == 0 {
                drop(ours);
                serve(theirs);
            }
            Some(Child { pid, sock: ours })
        }

        /// Ends the child (killed: it may be stuck in a render) and reaps it; its status.
        pub fn end(self) -> i32 {
            let mut status = 0;
            // SAFETY: `pid` is our child, not yet reaped.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, &mut status, 0);
            }
            status
        }

        /// The child's status once it has exited by itself (after it closed the socket).
        fn reap(self) -> i32 {
            let mut status = 0;
            // SAFETY: reaps our own child, which has closed its end (it is exiting).
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
            status
        }

        /// Writes one length-prefixed frame (no SIGPIPE if the child is gone).
        fn send(&self, bytes: &[u8]) -> bool {
            let mut frame = (bytes.len() as u64).to_le_bytes().to_vec();
            frame.extend_from_slice(bytes);
            let mut at = 0;
            while at < frame.len() {
                // SAFETY: sends from a live buffer on a socket we own.
                let n = unsafe {
                    libc::send(
                        self.sock.as_raw_fd(),
                        frame[at..].as_ptr().cast(),
                        frame.len() - at,
                        libc::MSG_NOSIGNAL,
                    )
                };
                if n < 0 {
                    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return false;
                }
                at += n as usize;
            }
            true
        }

        /// One length-prefixed answer, read by `deadline`, of at most `cap` bytes.
        fn recv(&mut self, deadline: Instant, cap: usize) -> Answer {
            let mut got = Vec::new();
            let mut len = None;
            let mut buf = [0u8; 64 << 10];
            loop {
                let want = len.map_or(8, |n| 8 + n);
                if got.len() >= want {
                    match len {
                        None => {
                            let n = u64::from_le_bytes(got[..8].try_into().unwrap()) as usize;
                            if n > cap {
                                return Answer::TooLong;
                            }
                            len = Some(n);
                            continue;
                        }
                        Some(_) => return Answer::Done(got.split_off(8)),
                    }
                }
                let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                    return Answer::TimedOut;
                };
                let left = left.max(std::time::Duration::from_millis(1));
                if self.sock.set_read_timeout(Some(left)).is_err() {
                    return Answer::Died;
                }
                let take = (want - got.len()).min(buf.len());
                match self.sock.read(&mut buf[..take]) {
                    Ok(0) => return Answer::Died,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => return Answer::Died,
                }
            }
        }
    }

    enum Answer {
        Done(Vec<u8>),
        Died,
        TimedOut,
        TooLong,
    }

    pub fn render(slot: &mut Option<Child>, request: &Request) -> Result<String, ChatError> {
        let limits = request.limits();
        // Serializing plain strings and booleans cannot fail.
        let bytes = serde_json::to_vec(request).unwrap_or_default();
        let child = match slot.take().filter(|c| c.send(&bytes)) {
            Some(c) => c,
            // No child yet (or it is gone): a new one.
            None => match Child::spawn().filter(|c| c.send(&bytes)) {
                Some(c) => c,
                None => return request.render(),
            },
        };
        let mut child = child;
        match child.recv(
            Instant::now() + TEMPLATE_TIME_LIMIT,
            limits.output_bytes + 4096,
        ) {
            Answer::Done(answer) => match decode(answer) {
                Some(result) => {
                    // A template can leak what it builds into a reference cycle (a namespace
                    // holding itself); the next render's limit counts from the child's size, so
                    // a child grown past RETIRE_RSS is replaced.
                    if resident_bytes(child.pid) > RETIRE_RSS {
                        child.end();
                    } else {
                        *slot = Some(child);
                    }
                    result
                }
                None => Err(died(&limits, child.end())),
            },
            Answer::Died => Err(died(&limits, child.reap())),
            Answer::TimedOut | Answer::TooLong => {
                child.end();
                Err(ChatError::Limit(format!(
                    "the time limit (TEMPLATE_TIME_LIMIT = {} s)",
                    TEMPLATE_TIME_LIMIT.as_secs_f32()
                )))
            }
        }
    }

    /// Resident bytes past which a child is replaced after its render.
    const RETIRE_RSS: u64 = 512 << 20;

    /// Resident bytes of process `pid` (`/proc/PID/statm`; 0 if unreadable).
    fn resident_bytes(pid: libc::pid_t) -> u64 {
        let pages = std::fs::read_to_string(format!("/proc/{pid}/statm"))
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        pages * page
    }

    fn died(limits: &RenderLimits, status: i32) -> ChatError {
        ChatError::Limit(format!(
            "{} (the render died with {})",
            limits.memory_message(),
            describe(status)
        ))
    }

    /// The child's loop: a request, its render under the address-space limit of its input,
    /// the answer; until this side closes the socket.
    fn serve(mut sock: UnixStream) -> ! {
        let base = prepare_child();
        let set_address_space = |bytes: u64| {
            let lim = libc::rlimit {
                rlim_cur: bytes.min(base.rlim_max),
                rlim_max: base.rlim_max,
            };
            // SAFETY: sets this process's own limit.
            unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) };
        };
        let code = loop {
            let mut len = [0u8; 8];
            if sock.read_exact(&mut len).is_err() {
                break 0;
            }
            let mut bytes = vec![0u8; u64::from_le_bytes(len) as usize];
            if sock.read_exact(&mut bytes).is_err() {
                break 1;
            }
            let Ok(request) = serde_json::from_slice::<Request>(&bytes) else {
                break 2;
            };
            drop(bytes);
            let limits = request.limits();
            set_address_space(current_address_space().saturating_add(limits.memory_bytes as u64));
            let answer = encode(catch_unwind(AssertUnwindSafe(|| request.render())));
            set_address_space(base.rlim_cur);
            let mut frame = (answer.len() as u64).to_le_bytes().to_vec();
            frame.extend_from_slice(&answer);
            if sock.write_all(&frame).is_err() {
                break 1;
            }
        };
        // SAFETY: leaves the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) }
    }
}

impl Drop for RenderServer {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(child) = self.child.take() {
            child.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::template::render_chat;

    fn msgs() -> Vec<ChatMessage> {
        vec![
            ChatMessage {
                role: "user".into(),
                content: "hi".into(),
                ..ChatMessage::default()
            },
            ChatMessage {
                role: "assistant".into(),
                content: "hello".into(),
                ..ChatMessage::default()
            },
        ]
    }

    /// The server answers as a fork per render does, for renders that pass and for each
    /// limit, and keeps serving after a render that cost it its child.
    #[test]
    fn the_server_renders_as_render_chat_does_and_survives_each_limit() {
        let templates = [
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
            // Doubling a string forty times: the memory limit.
            "{% set s = namespace(v='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set s.v = s.v ~ s.v %}{% endfor %}{{ s.v|length }}",
            // Nested loops: the fuel limit.
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "{{ messages[0].content.nonexistent_method() }}",
            "{% if %}",
            "{{ bos_token }}{{ messages[1].content }}{{ eos_token }}",
        ];
        let expect = [
            "<user>hi<assistant>hello<assistant>",
            "exceeded the memory limit",
            "exceeded the instruction budget",
            "exceeded the recursion limit",
            "no method named nonexistent_method",
            "does not compile",
            "<s>hello</s>",
        ];
        let mut server = RenderServer::new();
        for round in 0..2 {
            for (t, expect) in templates.into_iter().zip(expect) {
                let want = render_chat(t, &msgs(), true, "<s>", "</s>").map_err(|e| e.to_string());
                let got = server
                    .render(t, &msgs(), true, "<s>", "</s>")
                    .map_err(|e| e.to_string());
                assert_eq!(got, want, "round {round}, template {t}");
                let text = got.unwrap_or_else(|e| e);
                assert!(text.contains(expect), "{t}: {text}");
            }
        }
        assert_eq!(
            server
                .render(templates[0], &msgs(), false, "<s>", "</s>")
                .unwrap(),
            "<user>hi<assistant>hello"
        );
    }
}
