//! The memory budget: every byte that grows with the model or the context is charged here first.
//!
//! A [`Charge`] is an RAII guard: it is released when dropped, so a failed layer load, an error
//! half-way through a generation or a panic never leaves bytes booked. Charging past the limit is
//! an error naming who asked for how much and what is already held.
//!
//! Not charged (small and fixed, counted by the RSS acceptance figure instead): the program code,
//! thread stacks, the GGUF header and metadata, the tokenizer tables, the kernels' per-call
//! activation quantization buffers, and the allocator's own bookkeeping.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// 1 KiB, MiB, GiB, TiB.
const KIB: u64 = 1024;
const MIB: u64 = KIB * 1024;
const GIB: u64 = MIB * 1024;
const TIB: u64 = GIB * 1024;

/// Why a memory size string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error(
        "memory size {0:?}: expected a number with an optional unit (e.g. 8G, 512MiB, 1.5G, 800K)"
    )]
    Malformed(String),
    #[error("memory size {0:?}: unknown unit (use B, K/KB/KiB, M/MB/MiB, G/GB/GiB or T/TB/TiB; all are powers of 1024)")]
    UnknownUnit(String),
    #[error("memory size {0:?} is negative")]
    Negative(String),
    #[error("memory size {0:?} is zero")]
    Zero(String),
    #[error("memory size {0:?} does not fit in 64 bits")]
    Overflow(String),
}

/// Parses a memory size such as `8G`, `8GiB`, `8192M`, `512MiB`, `1.5G`, `800K` or `123456`.
///
/// Every unit is a power of 1024 (`800K` = 819200 bytes, `1GB` = 2^30 bytes), units are
/// case-insensitive, a fraction is allowed and rounded down to whole bytes, and the result is at
/// least one byte.
pub fn parse_memory_size(text: &str) -> Result<u64, SizeError> {
    let s = text.trim();
    if s.starts_with('-') {
        return Err(SizeError::Negative(text.to_string()));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(num_end);
    let unit = unit.trim();
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(SizeError::Malformed(text.to_string()));
    }
    let multiplier = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => TIB,
        _ => return Err(SizeError::UnknownUnit(text.to_string())),
    };
    let overflow = || SizeError::Overflow(text.to_string());
    // Integer arithmetic throughout, so 1.5G is exactly 1.5 * 2^30.
    let int_value: u128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse::<u128>().map_err(|_| overflow())?
    };
    let mut bytes = int_value
        .checked_mul(multiplier as u128)
        .ok_or_else(overflow)?;
    if !frac_part.is_empty() {
        // Only as many fraction digits as can matter for a u64 result are used.
        let digits = &frac_part[..frac_part.len().min(24)];
        let frac: u128 = digits.parse().map_err(|_| overflow())?;
        let scale = 10u128.pow(digits.len() as u32);
        bytes = bytes
            .checked_add(frac * multiplier as u128 / scale)
            .ok_or_else(overflow)?;
    }
    let bytes = u64::try_from(bytes).map_err(|_| overflow())?;
    if bytes == 0 {
        return Err(SizeError::Zero(text.to_string()));
    }
    Ok(bytes)
}

/// Formats a byte count for people: `512 B`, `1.5 KiB`, `40.0 MiB`, `1.25 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes < KIB {
        format!("{bytes} B")
    } else if bytes < MIB {
        format!("{:.1} KiB", b / KIB as f64)
    } else if bytes < GIB {
        format!("{:.1} MiB", b / MIB as f64)
    } else {
        format!("{:.2} GiB", b / GIB as f64)
    }
}

/// Charging beyond the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("memory budget exceeded: {what} asked for {}, but {} of the {} budget is held ({}); \
         {} is free", human_bytes(*.asked), human_bytes(*.held), human_bytes(*.limit), .holders, human_bytes(.limit - .held))]
pub struct BudgetError {
    /// Who asked.
    pub what: String,
    /// How many bytes they asked for.
    pub asked: u64,
    /// Bytes held when they asked.
    pub held: u64,
    /// The budget.
    pub limit: u64,
    /// The holders, largest first, as text.
    pub holders: String,
}

#[derive(Debug, Default)]
struct Ledger {
    held: u64,
    peak: u64,
    /// Bytes held per label, for error messages and reports.
    by_label: BTreeMap<String, u64>,
}

#[derive(Debug)]
struct Shared {
    limit: u64,
    ledger: Mutex<Ledger>,
}

/// A hard memory budget shared by everything one engine allocates. Cloning shares the budget.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    shared: Arc<Shared>,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            shared: Arc::new(Shared {
                limit,
                ledger: Mutex::new(Ledger::default()),
            }),
        }
    }

    /// A budget that never refuses (still counts, so peaks are reported).
    pub fn unlimited() -> MemoryBudget {
        MemoryBudget::new(u64::MAX)
    }

    /// The limit in bytes (`u64::MAX` when unlimited).
    pub fn limit(&self) -> u64 {
        self.shared.limit
    }

    /// Whether this budget never refuses.
    pub fn is_unlimited(&self) -> bool {
        self.shared.limit == u64::MAX
    }

    /// Bytes held right now.
    pub fn held(&self) -> u64 {
        self.ledger().held
    }

    /// The most bytes ever held at once.
    pub fn peak(&self) -> u64 {
        self.ledger().peak
    }

    /// Bytes that can still be charged.
    pub fn available(&self) -> u64 {
        self.shared.limit - self.held()
    }

    /// Bytes held per label, largest first.
    pub fn holders(&self) -> Vec<(String, u64)> {
        let ledger = self.ledger();
        let mut v: Vec<(String, u64)> = ledger
            .by_label
            .iter()
            .map(|(k, &b)| (k.clone(), b))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Books `bytes` for `what` (e.g. "KV cache"), or fails without booking anything.
    pub fn charge(&self, what: &str, bytes: u64) -> Result<Charge, BudgetError> {
        self.book(what, bytes)?;
        Ok(Charge {
            budget: self.clone(),
            what: what.to_string(),
            bytes,
        })
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // The ledger is consistent after every statement, so a panic elsewhere while it was
        // locked does not make it wrong: recover from poisoning.
        self.shared
            .ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn book(&self, what: &str, bytes: u64) -> Result<(), BudgetError> {
        let mut ledger = self.ledger();
        let fits = ledger
            .held
            .checked_add(bytes)
            .is_some_and(|total| total <= self.shared.limit);
        if !fits {
            let held = ledger.held;
            drop(ledger);
            return Err(BudgetError {
                what: what.to_string(),
                asked: bytes,
                held,
                limit: self.shared.limit,
                holders: self.describe_holders(),
            });
        }
        ledger.held += bytes;
        ledger.peak = ledger.peak.max(ledger.held);
        if bytes > 0 {
            *ledger.by_label.entry(what.to_string()).or_insert(0) += bytes;
        }
        Ok(())
    }

    fn release(&self, what: &str, bytes: u64) {
        let mut ledger = self.ledger();
        ledger.held -= bytes;
        if let Some(b) = ledger.by_label.get_mut(what) {
            *b -= bytes;
            if *b == 0 {
                ledger.by_label.remove(what);
            }
        }
    }

    fn describe_holders(&self) -> String {
        let holders = self.holders();
        if holders.is_empty() {
            return "nothing else".to_string();
        }
        holders
            .iter()
            .map(|(k, b)| format!("{k}: {}", human_bytes(*b)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Bytes booked against a [`MemoryBudget`]; released when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: MemoryBudget,
    what: String,
    bytes: u64,
}

impl Charge {
    /// The bytes this charge holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Grows or shrinks the charge to `bytes`; on failure the charge is unchanged.
    pub fn resize(&mut self, bytes: u64) -> Result<(), BudgetError> {
        if bytes > self.bytes {
            self.budget.book(&self.what, bytes - self.bytes)?;
        } else {
            self.budget.release(&self.what, self.bytes - bytes);
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(&self.what, self.bytes);
    }
}

/// A zero-initialised buffer whose bytes are charged to a budget before they are allocated.
pub struct ChargedVec<T> {
    // Field order matters: the memory is freed before the charge is released.
    data: Vec<T>,
    _charge: Charge,
}

impl<T: Clone + Default> ChargedVec<T> {
    /// Charges `len * size_of::<T>()` bytes to `budget` as `what`, then allocates.
    pub fn zeroed(
        budget: &MemoryBudget,
        what: &str,
        len: usize,
    ) -> Result<ChargedVec<T>, BudgetError> {
        let bytes = (len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        let charge = budget.charge(what, bytes)?;
        let data = vec![T::default(); len];
        advise_huge_pages(data.as_ptr().cast(), bytes as usize);
        Ok(ChargedVec {
            data,
            _charge: charge,
        })
    }
}

/// Asks the kernel to back the 2 MiB-aligned interior of a large, not yet touched buffer with
/// transparent huge pages (where THP is in `madvise` mode): weights are streamed through
/// once per token, and 4 KiB pages make that a TLB miss every 4 KiB. Only whole huge pages
/// inside the buffer are advised, so RSS never exceeds the buffer itself.
fn advise_huge_pages(ptr: *const u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + bytes) & !(HUGE - 1);
    if end > start {
        // SAFETY: the range lies inside a live allocation we own; MADV_HUGEPAGE changes only
        // how the kernel backs it, never its contents.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

impl<T> ChargedVec<T> {
    /// Bytes charged for this buffer.
    pub fn charged_bytes(&self) -> u64 {
        self._charge.bytes()
    }
}

impl<T> std::ops::Deref for ChargedVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T> std::ops::DerefMut for ChargedVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
}

impl<T> fmt::Debug for ChargedVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ChargedVec({} elements, {} bytes)",
            self.data.len(),
            self._charge.bytes()
        )
    }
}

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

/// Makes glibc return large freed buffers to the kernel at once, so the process's RSS follows
/// the budget's ledger: allocations of 128 KiB and more are mapped and unmapped individually
/// (fixing the threshold disables glibc's dynamic raise of it), the heap top is trimmed above
/// 1 MiB, one arena serves every thread (worker threads allocate only small, short-lived
/// buffers), and memory freed so far (e.g. by header parsing) is handed back now.
/// A no-op on other C libraries.
pub fn tie_allocator_to_budget() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt and malloc_trim only change allocator tunables and release free memory.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1024 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_powers_of_1024_and_any_case() {
        let cases = [
            ("8G", 8 * GIB),
            ("8GiB", 8 * GIB),
            ("8gb", 8 * GIB),
            ("8192M", 8 * GIB),
            ("512MiB", 512 * MIB),
            ("512mib", 512 * MIB),
            ("1.5G", 3 * GIB / 2),
            ("800K", 819_200),
            ("800kb", 819_200),
            ("800KiB", 819_200),
            ("40M", 40 * MIB),
            ("1T", TIB),
            ("123456", 123_456),
            ("100B", 100),
            (" 2 MiB ", 2 * MIB),
            ("0.5K", 512),
            (".5K", 512),
            ("1.", 1),
        ];
        for (text, want) in cases {
            assert_eq!(parse_memory_size(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_sizes_are_refused_with_the_reason() {
        assert!(matches!(
            parse_memory_size(""),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            parse_memory_size("abc"),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            parse_memory_size("G"),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            parse_memory_size("1.2.3G"),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            parse_memory_size("12X"),
            Err(SizeError::UnknownUnit(_))
        ));
        assert!(matches!(
            parse_memory_size("12 MBs"),
            Err(SizeError::UnknownUnit(_))
        ));
        assert!(matches!(
            parse_memory_size("1e9"),
            Err(SizeError::UnknownUnit(_))
        ));
        assert!(matches!(
            parse_memory_size("-5M"),
            Err(SizeError::Negative(_))
        ));
        assert!(matches!(parse_memory_size("0"), Err(SizeError::Zero(_))));
        assert!(matches!(
            parse_memory_size("0.0001K"),
            Err(SizeError::Zero(_))
        ));
        assert!(matches!(parse_memory_size("0G"), Err(SizeError::Zero(_))));
        assert!(matches!(
            parse_memory_size("16777216T"),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(
            parse_memory_size("99999999999999999999999999999999999999999"),
            Err(SizeError::Overflow(_))
        ));
        assert_eq!(parse_memory_size("18446744073709551615"), Ok(u64::MAX));
        assert!(matches!(
            parse_memory_size("18446744073709551616"),
            Err(SizeError::Overflow(_))
        ));
        let msg = parse_memory_size("12X").unwrap_err().to_string();
        assert!(msg.contains("12X") && msg.contains("1024"), "{msg}");
    }

    #[test]
    fn charges_are_released_on_drop_and_peak_is_kept() {
        let budget = MemoryBudget::new(1000);
        let a = budget.charge("a", 600).unwrap();
        {
            let _b = budget.charge("b", 400).unwrap();
            assert_eq!(budget.held(), 1000);
        }
        assert_eq!(budget.held(), 600);
        drop(a);
        assert_eq!(budget.held(), 0);
        assert_eq!(budget.peak(), 1000);
        assert!(budget.holders().is_empty());
    }

    #[test]
    fn over_budget_says_who_asked_how_much_and_what_is_held() {
        let budget = MemoryBudget::new(10 * MIB);
        let _kv = budget.charge("KV cache", 6 * MIB).unwrap();
        let err = budget.charge("layer 3", 5 * MIB).unwrap_err();
        assert_eq!(err.asked, 5 * MIB);
        assert_eq!(err.held, 6 * MIB);
        let msg = err.to_string();
        assert!(msg.contains("layer 3 asked for 5.0 MiB"), "{msg}");
        assert!(msg.contains("KV cache: 6.0 MiB"), "{msg}");
        assert!(msg.contains("10.0 MiB budget"), "{msg}");
        // A refused charge books nothing.
        assert_eq!(budget.held(), 6 * MIB);
    }

    #[test]
    fn resize_grows_within_the_budget_and_fails_cleanly() {
        let budget = MemoryBudget::new(100);
        let mut c = budget.charge("kv", 10).unwrap();
        c.resize(90).unwrap();
        assert_eq!(budget.held(), 90);
        assert!(c.resize(101).is_err());
        assert_eq!(c.bytes(), 90);
        assert_eq!(budget.held(), 90);
        c.resize(5).unwrap();
        assert_eq!(budget.held(), 5);
        drop(c);
        assert_eq!(budget.held(), 0);
        assert_eq!(budget.peak(), 90);
    }

    #[test]
    fn charges_are_released_on_error_and_unwind() {
        let budget = MemoryBudget::new(1000);
        let failing = |b: &MemoryBudget| -> Result<(), BudgetError> {
            let _first = b.charge("first", 500)?;
            let _second = b.charge("second", 600)?;
            Ok(())
        };
        assert!(failing(&budget).is_err());
        assert_eq!(budget.held(), 0);

        let b2 = budget.clone();
        let result = std::panic::catch_unwind(move || {
            let _c = b2.charge("doomed", 700).unwrap();
            panic!("boom");
        });
        assert!(result.is_err());
        assert_eq!(budget.held(), 0);
        assert_eq!(budget.peak(), 700);
        // The budget is still usable after the unwind.
        assert!(budget.charge("after", 1000).is_ok());
    }

    #[test]
    fn charged_vec_books_its_bytes() {
        let budget = MemoryBudget::new(1 << 20);
        let v: ChargedVec<f32> = ChargedVec::zeroed(&budget, "scratch", 1000).unwrap();
        assert_eq!(budget.held(), 4000);
        assert_eq!(v.len(), 1000);
        assert!(ChargedVec::<f32>::zeroed(&budget, "big", 1 << 20).is_err());
        drop(v);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn proc_status_is_parsed() {
        let text = "Name:\tx\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t3\n";
        let m = parse_proc_status(text).unwrap();
        assert_eq!(m.peak_rss, 50 * MIB);
        assert_eq!(m.rss, 40 * MIB);
        let live = process_memory().expect("/proc/self/status is readable on Linux");
        assert!(live.peak_rss >= live.rss && live.rss > 0);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(40 * MIB), "40.0 MiB");
        assert_eq!(human_bytes(5 * GIB / 4), "1.25 GiB");
    }
}
