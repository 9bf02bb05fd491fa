//! Budget-charged, [`ALIGN`]-aligned byte buffers: the streaming ring's slots (`O_DIRECT` needs
//! aligned addresses), with the charge formula the plan uses beside the allocator it sizes.

use crate::budget::{Charge, MemoryBudget};
use crate::error::EngineError;

/// Alignment of `O_DIRECT` offsets, lengths and buffer addresses (covers 512 B and 4 KiB
/// logical blocks).
pub const ALIGN: u64 = 4096;

/// `x` rounded up to a multiple of [`ALIGN`].
pub(crate) fn round_up(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// A budget-charged byte buffer whose usable part starts at an [`ALIGN`]-aligned address.
/// The memory is allocated on first use: a ring slot that holds mapped windows (under the
/// same charge) never allocates it.
pub struct AlignedBuf {
    // Field order: the memory is freed before the charge is released.
    data: Vec<u8>,
    start: usize,
    len: usize,
    _charge: Charge,
}

impl AlignedBuf {
    /// Charges `len` bytes plus the alignment slack to `budget` as `what`.
    pub fn new(budget: &MemoryBudget, what: &str, len: usize) -> Result<AlignedBuf, EngineError> {
        let charge = budget.charge(what, aligned_buf_charge(len as u64))?;
        Ok(AlignedBuf {
            data: Vec::new(),
            start: 0,
            len,
            _charge: charge,
        })
    }

    /// The bytes (empty until [`AlignedBuf::bytes_mut`] allocated them).
    pub fn bytes(&self) -> &[u8] {
        self.data
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.data.is_empty() {
            self.data = vec![0u8; self.len + ALIGN as usize];
            self.start = self.data.as_ptr().align_offset(ALIGN as usize);
        }
        &mut self.data[self.start..self.start + self.len]
    }
}

/// Bytes [`AlignedBuf::new`] charges for `len` usable bytes.
pub fn aligned_buf_charge(len: u64) -> u64 {
    len + ALIGN
}
