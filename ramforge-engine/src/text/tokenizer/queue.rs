//! The priority queue of candidate merges shared by BPE and SentencePiece: entries are
//! (rank, position) and come out lowest rank first, leftmost among equal ranks.
//!
//! Short words use a plain binary heap. Over a long word (a megabyte without spaces) such a
//! heap spends its time in cache misses, so long words group entries by rank instead: each
//! rank's positions mostly arrive in increasing order and are a vector read front to back;
//! positions that arrive out of order go to a small per-rank heap. Every operation stays
//! O(log n) at worst.

use hashbrown::HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Words with more symbols than this use the bucketed queue.
const SMALL: usize = 512;

/// Candidate merges, lowest (rank, position) first.
#[derive(Default)]
pub struct MergeQueue {
    /// Whether the current word uses the buckets (else `heap`).
    bucketed: bool,
    /// (rank << 32 | position) entries of a short word.
    heap: BinaryHeap<Reverse<u64>>,
    /// Ranks with a live bucket, lowest first.
    ranks: BinaryHeap<Reverse<u32>>,
    /// Rank -> index of its bucket in `buckets`.
    index: HashMap<u32, usize>,
    /// Buckets (reused across `clear`, so their vectors keep their capacity).
    buckets: Vec<Bucket>,
    used: usize,
}

#[derive(Default)]
struct Bucket {
    /// Positions pushed in increasing order; `sorted[head..]` are still queued.
    sorted: Vec<u32>,
    head: usize,
    /// Positions pushed out of order.
    extra: BinaryHeap<Reverse<u32>>,
}

impl MergeQueue {
    /// Empties the queue for a word of `symbols` symbols.
    pub fn reset(&mut self, symbols: usize) {
        self.bucketed = symbols > SMALL;
        self.heap.clear();
        self.ranks.clear();
        self.index.clear();
        for b in &mut self.buckets[..self.used] {
            b.sorted.clear();
            b.head = 0;
            b.extra.clear();
        }
        self.used = 0;
    }

    pub fn push(&mut self, rank: u32, pos: u32) {
        if !self.bucketed {
            self.heap.push(Reverse((rank as u64) << 32 | pos as u64));
            return;
        }
        let slot = match self.index.get(&rank) {
            Some(&slot) => slot,
            None => {
                let slot = self.used;
                if slot == self.buckets.len() {
                    self.buckets.push(Bucket::default());
                }
                self.used += 1;
                self.index.insert(rank, slot);
                self.ranks.push(Reverse(rank));
                slot
            }
        };
        let b = &mut self.buckets[slot];
        if b.head == b.sorted.len() {
            b.sorted.clear();
            b.head = 0;
        }
        match b.sorted.last() {
            Some(&last) if pos <= last => b.extra.push(Reverse(pos)),
            _ => b.sorted.push(pos),
        }
    }

    /// The lowest (rank, position) entry.
    pub fn pop(&mut self) -> Option<(u32, u32)> {
        if !self.bucketed {
            let Reverse(key) = self.heap.pop()?;
            return Some(((key >> 32) as u32, key as u32));
        }
        loop {
            let &Reverse(rank) = self.ranks.peek()?;
            let b = &mut self.buckets[self.index[&rank]];
            let next_sorted = b.sorted.get(b.head).copied();
            let next_extra = b.extra.peek().map(|r| r.0);
            let pos = match (next_sorted, next_extra) {
                (Some(s), Some(e)) if e < s => {
                    b.extra.pop();
                    e
                }
                (Some(s), _) => {
                    b.head += 1;
                    s
                }
                (None, Some(e)) => {
                    b.extra.pop();
                    e
                }
                (None, None) => {
                    // Emptied: a later push of this rank starts a fresh bucket.
                    self.ranks.pop();
                    self.index.remove(&rank);
                    continue;
                }
            };
            return Some((rank, pos));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pops come out in (rank, position) order, like a binary heap of pairs, whatever the
        /// interleaving of pushes and pops.
        #[test]
        fn pops_in_rank_then_position_order(
            ops in proptest::collection::vec((0u32..6, 0u32..50, proptest::bool::weighted(0.3)), 0..200),
            symbols in proptest::sample::select(vec![10usize, 100_000]),
        ) {
            let mut q = MergeQueue::default();
            q.reset(symbols);
            let mut model = BinaryHeap::new();
            for (rank, pos, pop) in ops {
                if pop {
                    prop_assert_eq!(q.pop(), model.pop().map(|Reverse(x)| x));
                } else {
                    q.push(rank, pos);
                    model.push(Reverse((rank, pos)));
                }
            }
            while let Some(Reverse(x)) = model.pop() {
                prop_assert_eq!(q.pop(), Some(x));
            }
            prop_assert_eq!(q.pop(), None);
            q.reset(symbols);
            q.push(3, 1);
            prop_assert_eq!(q.pop(), Some((3, 1)));
        }
    }
}
