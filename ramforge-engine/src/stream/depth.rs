//! The prefetch depth at run time: the plan gives the ring as many buffers as the budget
//! allows for the speeds assumed at load; while generating, the read and compute times are
//! measured over windows of passes, and after each window the depth is set to what
//! [`prefetch_depth`] says for them (never deeper than the plan's ring).
//!
//! Each window is measured on its own, so the depth follows the workload (a long prompt's
//! batches compute far longer per layer than decoded tokens). The measured read time is the
//! reader's own time per byte, so it does not depend on the depth in use, and a decision does
//! not feed on itself.

use super::stats::ResidencyStats;
use crate::residency::{prefetch_depth, Timing};

/// Passes over the streamed layers measured before each decision.
pub const WINDOW_PASSES: u64 = 4;

/// One decision: the speeds measured over a window, and the depth they call for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DepthDecision {
    /// The speeds the decision was made from.
    pub timing: Timing,
    /// The depth chosen.
    pub depth: usize,
}

/// Decides the depth from windows of measurements, unless it was fixed.
#[derive(Clone, Debug)]
pub struct DepthControl {
    /// The stats when the current window began.
    window_start: ResidencyStats,
    fixed: Option<usize>,
    last: Option<DepthDecision>,
}

impl DepthControl {
    /// Starts the first window at `stats`.
    pub fn new(stats: &ResidencyStats) -> DepthControl {
        DepthControl {
            window_start: *stats,
            fixed: None,
            last: None,
        }
    }

    /// Fixes the depth (`Some`) or lets it adapt again from a fresh window at `stats`.
    pub fn fix(&mut self, depth: Option<usize>, stats: &ResidencyStats) {
        self.fixed = depth;
        self.window_start = *stats;
    }

    /// The last decision made from measurements.
    pub fn last(&self) -> Option<DepthDecision> {
        self.last
    }

    /// Called at the start of a pass: the depth to use from now on when the window holds
    /// [`WINDOW_PASSES`] passes over the streamed layers (a new window starts then), else
    /// `None`. Always `None` when the depth is fixed or nothing is streamed. `ring`: the
    /// plan's layers (`pinned`, `layer_bytes`) and streaming buffers.
    pub fn at_pass_start(&mut self, ring: Ring<'_>, stats: &ResidencyStats) -> Option<usize> {
        let streamed = ring.pinned.iter().filter(|&&p| !p).count() as u64;
        if ring.buffers == 0 || streamed == 0 || self.fixed.is_some() {
            return None;
        }
        let window = stats.since(&self.window_start);
        if window.layers_loaded < WINDOW_PASSES * streamed {
            return None;
        }
        self.window_start = *stats;
        let timing = window.measured_timing()?;
        let depth = prefetch_depth(ring.pinned, ring.layer_bytes, ring.buffers, &timing);
        self.last = Some(DepthDecision { timing, depth });
        Some(depth)
    }
}

/// What the plan decided about the streamed layers, as the depth control reads it.
#[derive(Clone, Copy, Debug)]
pub struct Ring<'a> {
    /// Which layers are pinned.
    pub pinned: &'a [bool],
    /// Bytes of each layer.
    pub layer_bytes: &'a [u64],
    /// Streaming buffers.
    pub buffers: usize,
}
