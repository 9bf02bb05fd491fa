//! The process's resident memory (VmRSS, VmHWM) as the kernel reports it: the figure the budget is judged by.

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
pub fn process_memory() -> Option<ProcessMemory> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_proc_status(&status)
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
