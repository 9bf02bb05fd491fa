//! The memory budget: every byte that grows with the model or the context is charged here first.
//!
//! A [`Charge`] is an RAII guard: it is released when dropped, so a failed layer load, an error
//! half-way through a generation or a panic never leaves bytes booked. Charging past the limit is
//! an error naming who asked for how much and what is already held.
//!
//! Not charged (small and fixed, counted by the RSS acceptance figure instead): the program code,
//! thread stacks, the GGUF header and metadata, the tokenizer tables, the kernels' per-call
//! activation quantization buffers, each worker's unpacked weight rows for the low-bit prefill
//! tiles (256 KiB a thread, or two rows where rows are wider), and the allocator's own bookkeeping.

mod os_hints;
mod process;
mod size;

pub use os_hints::tie_allocator_to_budget;
pub use process::{parse_proc_status, process_memory, ProcessMemory};
pub use size::{human_bytes, parse_memory_size, SizeError};

use os_hints::advise_huge_pages;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::size::MIB;
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
}
