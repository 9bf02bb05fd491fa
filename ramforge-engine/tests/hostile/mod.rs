//! What the hostile-input tests share: each case runs in a child process (this test binary,
//! re-executed for that one test) under a 1 GiB address-space limit and a 10 s deadline, so a
//! case that would allocate without bound or hang fails instead of taking the machine down.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

/// The environment variable that marks the re-executed child.
const CHILD: &str = "RAMFORGE_HOSTILE_CHILD";

/// The address-space limit of every case.
pub const ADDRESS_SPACE: u64 = 1 << 30;

/// How long a case may take, child start included.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Runs `case` (the body of the test named `name`) in a child under [`ADDRESS_SPACE`]; the
/// test fails if the child fails, crashes or passes [`DEADLINE`].
pub fn limited(name: &str, case: impl FnOnce()) {
    if std::env::var_os(CHILD).is_some() {
        let lim = libc::rlimit {
            rlim_cur: ADDRESS_SPACE,
            rlim_max: ADDRESS_SPACE,
        };
        // SAFETY: sets this process's own limit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
        case();
        return;
    }
    let start = Instant::now();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(
                status.success(),
                "{name} under a 1 GiB address space: {status}\n{text}"
            );
            assert!(
                text.contains("1 passed"),
                "{name}: the child ran no test\n{text}"
            );
            return;
        }
        if start.elapsed() > DEADLINE {
            child.kill().ok();
            panic!("{name} took more than {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts `e` is one line containing every one of `needles`.
pub fn one_line_naming(e: &str, needles: &[&str]) {
    assert!(!e.contains('\n'), "one line: {e}");
    for n in needles {
        assert!(e.contains(n), "expected {n:?} in: {e}");
    }
}
