//! The process's resident memory as the kernel reports it: the figure the budget is judged by.
//! Linux: VmRSS and VmHWM from `/proc`. macOS: the physical footprint and its lifetime
//! maximum (`proc_pid_rusage`), what Activity Monitor shows as a process's memory; it counts
//! dirty and compressed pages but not clean file pages mapped in place.

use super::size::KIB;

/// The process's resident memory as the kernel reports it in `/proc/self/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Resident set size now (VmRSS), bytes.
    pub rss: u64,
    /// Peak resident set size (VmHWM), bytes.
    pub peak_rss: u64,
}

/// Reads VmRSS and VmHWM of this process; `None` where `/proc` is unavailable.
#[cfg(not(target_os = "macos"))]
pub fn process_memory() -> Option<ProcessMemory> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_proc_status(&status)
}

/// Reads this process's physical footprint now and at its peak; `None` if the kernel refuses.
#[cfg(target_os = "macos")]
pub fn process_memory() -> Option<ProcessMemory> {
    // SAFETY: an all-zero rusage_info_v4 is a valid value of this plain C struct.
    let mut info: libc::rusage_info_v4 = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_INFO_V4 asks for exactly a rusage_info_v4, which `info` is.
    let rc = unsafe {
        libc::proc_pid_rusage(
            std::process::id() as libc::c_int,
            libc::RUSAGE_INFO_V4,
            (&mut info as *mut libc::rusage_info_v4).cast(),
        )
    };
    (rc == 0).then_some(ProcessMemory {
        rss: info.ri_phys_footprint,
        peak_rss: info.ri_lifetime_max_phys_footprint,
    })
}

/// Parses the VmRSS and VmHWM lines of a `/proc/<pid>/status` text.
pub fn parse_proc_status(status: &str) -> Option<ProcessMemory> {
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let rest = line[name.len()..].trim();
        let kb = rest.strip_suffix("kB").unwrap_or(rest).trim();
        kb.parse::<u64>().ok().map(|k| k * KIB)
    };
    Some(ProcessMemory {
        rss: field("VmRSS:")?,
        peak_rss: field("VmHWM:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::size::MIB;
    #[test]
    fn proc_status_is_parsed() {
        let text = "Name:\tx\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t3\n";
        let m = parse_proc_status(text).unwrap();
        assert_eq!(m.peak_rss, 50 * MIB);
        assert_eq!(m.rss, 40 * MIB);
        let live = process_memory().expect("/proc/self/status is readable on Linux");
        assert!(live.peak_rss >= live.rss && live.rss > 0);
    }
}
