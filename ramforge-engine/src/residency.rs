//! The residency policy for cyclic layer access: which layers stay pinned in memory and how
//! many streaming buffers the rest cycle through.
//!
//! Decoding visits layers 0..n once per token, in order, forever. On such a scan an LRU cache
//! evicts exactly the layer needed next, so the policy never caches by recency: a fixed set of
//! layers is pinned for the engine's lifetime and every other layer is read, each pass, into a
//! ring of `buffers` budget-charged buffers by a prefetch thread that runs ahead of compute.
//!
//! The choice is a pure function of sizes and timings. For each ring depth that fits, layers are
//! pinned in order while they fit; the steady-state time per token of every candidate is then
//! computed by [`token_secs`] (a small exact model of the pipeline: one sequential reader, a
//! buffer is free again when the compute of the layer it held ends), and the fastest candidate
//! wins. Candidates within [`TIE_TOLERANCE`] of the fastest count as equally fast, and among
//! them the one that reads the fewest bytes (most pinned), then the shallowest ring, is taken.

/// Most streaming buffers the policy considers.
pub const MAX_BUFFERS: usize = 4;
/// Candidates this much slower than the fastest still count as equally fast.
pub const TIE_TOLERANCE: f64 = 0.01;
/// Assumed storage read rate before any read was measured (bytes/s).
pub const DEFAULT_READ_BYTES_PER_SEC: f64 = 1.5e9;
/// Assumed rate at which compute consumes a layer's weights before any was measured (bytes/s).
pub const DEFAULT_COMPUTE_BYTES_PER_SEC: f64 = 6.0e9;

/// Observed (or assumed) speeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Seconds to read one byte of a streamed layer.
    pub read_secs_per_byte: f64,
    /// Seconds to compute one layer for one token.
    pub compute_secs_per_layer: f64,
}

impl Timing {
    /// The assumed speeds for layers of `layer_bytes` (used until something is measured).
    pub fn assumed(layer_bytes: &[u64]) -> Timing {
        let mean = layer_bytes.iter().sum::<u64>() as f64 / layer_bytes.len().max(1) as f64;
        Timing {
            read_secs_per_byte: 1.0 / DEFAULT_READ_BYTES_PER_SEC,
            compute_secs_per_layer: mean / DEFAULT_COMPUTE_BYTES_PER_SEC,
        }
    }
}

/// What the policy decides from.
#[derive(Clone, Copy, Debug)]
pub struct ResidencyInput<'a> {
    /// Bytes each layer occupies when pinned.
    pub layer_bytes: &'a [u64],
    /// Bytes of one streaming buffer (it must hold any streamed layer's read).
    pub buffer_bytes: u64,
    /// Other weights that stay resident whatever is decided (charged to the same share).
    pub persistent_bytes: u64,
    /// The budget's share for persistent weights, pinned layers and streaming buffers.
    pub weight_budget: u64,
    /// The storage and compute speeds to plan for.
    pub timing: Timing,
}

/// The decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Residency {
    /// Which layers stay in memory.
    pub pinned: Vec<bool>,
    /// Streaming buffers (the prefetch depth); 0 when every layer is pinned.
    pub buffers: usize,
    /// The modelled steady-state seconds per decoded token.
    pub token_secs: f64,
}

impl Residency {
    /// Bytes of the pinned layers.
    pub fn pinned_bytes(&self, layer_bytes: &[u64]) -> u64 {
        layer_bytes
            .iter()
            .zip(&self.pinned)
            .filter(|(_, &p)| p)
            .map(|(b, _)| b)
            .sum()
    }
}

/// Chooses the pinned layers and the ring depth, or `None` when not even one streaming buffer
/// fits next to the persistent weights (and not every layer fits either).
pub fn choose(input: &ResidencyInput) -> Option<Residency> {
    let layers = input.layer_bytes;
    let share = input.weight_budget.checked_sub(input.persistent_bytes)?;
    let total: u64 = layers.iter().sum();
    let timing = input.timing;
    if total <= share {
        let pinned = vec![true; layers.len()];
        let token_secs = token_secs(&pinned, layers, 0, &timing);
        return Some(Residency {
            pinned,
            buffers: 0,
            token_secs,
        });
    }
    let mut candidates = Vec::new();
    for buffers in 1..=MAX_BUFFERS.min(layers.len()) {
        let Some(mut free) = input
            .buffer_bytes
            .checked_mul(buffers as u64)
            .and_then(|ring| share.checked_sub(ring))
        else {
            break;
        };
        let pinned: Vec<bool> = layers
            .iter()
            .map(|&bytes| {
                let pin = bytes <= free;
                if pin {
                    free -= bytes;
                }
                pin
            })
            .collect();
        let streamed = pinned.iter().filter(|&&p| !p).count();
        if buffers > streamed.max(1) {
            // More buffers than streamed layers buy nothing.
            break;
        }
        let token_secs = token_secs(&pinned, layers, buffers, &timing);
        candidates.push(Residency {
            pinned,
            buffers,
            token_secs,
        });
    }
    let fastest = candidates
        .iter()
        .map(|c| c.token_secs)
        .fold(f64::INFINITY, f64::min);
    candidates
        .into_iter()
        .filter(|c| c.token_secs <= fastest * (1.0 + TIE_TOLERANCE))
        // Most pinned bytes first, then fewest buffers (candidates come in buffer order, and
        // `max_by_key` keeps the last maximum, hence the reversed buffer count).
        .max_by_key(|c| (c.pinned_bytes(layers), std::cmp::Reverse(c.buffers)))
}

/// Reads are planned as if this much slower than their measured mean when the prefetch depth
/// is adapted: a measured mean hides the slow reads, and one slow read with no buffer ahead
/// stalls the compute (headroom for jittery storage).
pub const READ_MARGIN: f64 = 1.25;

/// The prefetch depth to use at run time (buffers in the ring: reads in flight plus the layer
/// in use) for the measured `timing`, with the pinned set fixed at load and at most `ring`
/// buffers (what the budget allows; also at most the streamed layers). It is the shallowest
/// depth whose modelled time per token ([`token_secs`], reads taken [`READ_MARGIN`] slower) is
/// within [`TIE_TOLERANCE`] of the fastest depth's: a deeper ring only holds memory unless
/// reads are slow enough to need it. 0 when nothing is streamed or there is no ring.
pub fn prefetch_depth(pinned: &[bool], layer_bytes: &[u64], ring: usize, timing: &Timing) -> usize {
    let streamed = pinned.iter().filter(|&&p| !p).count();
    let deepest = ring.min(streamed);
    if deepest == 0 {
        return 0;
    }
    let cautious = Timing {
        read_secs_per_byte: timing.read_secs_per_byte * READ_MARGIN,
        ..*timing
    };
    let secs: Vec<f64> = (1..=deepest)
        .map(|depth| token_secs(pinned, layer_bytes, depth, &cautious))
        .collect();
    let fastest = secs.iter().copied().fold(f64::INFINITY, f64::min);
    secs.iter()
        .position(|&s| s <= fastest * (1.0 + TIE_TOLERANCE))
        .map_or(deepest, |i| i + 1)
}

/// Steady-state seconds per token of the pipeline: compute visits layers in order; streamed
/// layers are read one after another, in visiting order, cyclically, into `buffers` buffers;
/// a read starts when the previous read has ended and its buffer is free (the compute of the
/// layer that buffer held `buffers` reads ago has ended); a streamed layer's compute starts
/// when its read has ended and the previous layer's compute has.
pub fn token_secs(pinned: &[bool], layer_bytes: &[u64], buffers: usize, timing: &Timing) -> f64 {
    let c = timing.compute_secs_per_layer;
    if buffers == 0 || pinned.iter().all(|&p| p) {
        return c * pinned.len() as f64;
    }
    // Three tokens reach the steady state (the first fills the ring from cold).
    const TOKENS: usize = 3;
    let mut compute_end_of_read: Vec<f64> = Vec::new();
    let (mut now, mut reader_free_at) = (0.0f64, 0.0f64);
    let mut token_end = [0.0f64; TOKENS];
    for end in token_end.iter_mut() {
        for (layer, &is_pinned) in pinned.iter().enumerate() {
            if is_pinned {
                now += c;
                continue;
            }
            let k = compute_end_of_read.len();
            let buffer_free_at = if k >= buffers {
                compute_end_of_read[k - buffers]
            } else {
                0.0
            };
            let read_end = reader_free_at.max(buffer_free_at)
                + layer_bytes[layer] as f64 * timing.read_secs_per_byte;
            reader_free_at = read_end;
            now = now.max(read_end) + c;
            compute_end_of_read.push(now);
        }
        *end = now;
    }
    token_end[TOKENS - 1] - token_end[TOKENS - 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn timing(read_mb_per_sec: f64, compute_secs: f64) -> Timing {
        Timing {
            read_secs_per_byte: 1.0 / (read_mb_per_sec * MB as f64),
            compute_secs_per_layer: compute_secs,
        }
    }

    fn input(layers: &[u64], budget: u64, t: Timing) -> ResidencyInput<'_> {
        ResidencyInput {
            layer_bytes: layers,
            buffer_bytes: layers.iter().copied().max().unwrap(),
            persistent_bytes: 0,
            weight_budget: budget,
            timing: t,
        }
    }

    fn fits(r: &Residency, inp: &ResidencyInput) -> bool {
        r.pinned_bytes(inp.layer_bytes) + r.buffers as u64 * inp.buffer_bytes + inp.persistent_bytes
            <= inp.weight_budget
    }

    #[test]
    fn everything_fits_so_everything_is_pinned_without_a_ring() {
        let layers = [10 * MB; 8];
        let r = choose(&input(&layers, 80 * MB, timing(100.0, 0.01))).unwrap();
        assert_eq!(r.pinned, vec![true; 8]);
        assert_eq!(r.buffers, 0);
        assert!((r.token_secs - 0.08).abs() < 1e-12);
    }

    #[test]
    fn persistent_weights_come_out_of_the_share_first() {
        let layers = [10 * MB; 8];
        let mut inp = input(&layers, 80 * MB, timing(100.0, 0.01));
        inp.persistent_bytes = 5 * MB;
        let r = choose(&inp).unwrap();
        assert!(r.buffers >= 1 && r.pinned.iter().any(|&p| !p));
        assert!(fits(&r, &inp));
        inp.persistent_bytes = 75 * MB;
        assert_eq!(choose(&inp), None, "no room for one buffer");
    }

    #[test]
    fn a_tight_budget_pins_a_prefix_and_streams_the_rest_through_a_ring() {
        let layers = [10 * MB; 20];
        for budget_layers in [1u64, 2, 5, 9, 15, 19] {
            let inp = input(&layers, budget_layers * 10 * MB + MB, timing(500.0, 0.01));
            let r = choose(&inp).unwrap();
            assert!(r.buffers >= 1, "{budget_layers}: {r:?}");
            assert!(fits(&r, &inp));
            let n_pinned = r.pinned.iter().filter(|&&p| p).count();
            // Uniform layers: the pinned set is a prefix, and the whole share is used.
            assert!(r.pinned[..n_pinned].iter().all(|&p| p));
            assert_eq!(n_pinned + r.buffers, budget_layers as usize, "{r:?}");
        }
    }

    #[test]
    fn negligible_reads_take_one_buffer_slow_storage_a_deeper_ring() {
        // 22 layers of 28 MiB, room for 11 layers' worth; compute 10 ms per layer.
        let layers = [28 * MB; 22];
        let budget = 11 * 28 * MB;
        // Reads at 200 GiB/s: 0.14 ms per layer, negligible next to compute; a second buffer
        // would cost a pinned layer for nothing.
        let fast = choose(&input(&layers, budget, timing(200_000.0, 0.010))).unwrap();
        assert_eq!(fast.buffers, 1, "{fast:?}");
        // An SSD at 1.5 GiB/s: 18 ms per layer, slower than compute: with one buffer each
        // streamed layer costs read + compute in turn; two overlap them.
        let slow = choose(&input(&layers, budget, timing(1_500.0, 0.010))).unwrap();
        assert!(slow.buffers >= 2, "{slow:?}");
        assert!(slow.token_secs < token_secs(&fast.pinned, &layers, 1, &timing(1_500.0, 0.010)));
    }

    #[test]
    fn the_choice_is_deterministic_and_never_slower_than_another_candidate() {
        let layers = [3 * MB, 5 * MB, 4 * MB, 5 * MB, 2 * MB, 6 * MB, 5 * MB];
        for read in [50.0, 300.0, 2_000.0, 30_000.0] {
            for compute in [0.0005, 0.005, 0.05] {
                for budget in [7 * MB, 12 * MB, 20 * MB, 29 * MB] {
                    let t = timing(read, compute);
                    let inp = input(&layers, budget, t);
                    let r = choose(&inp).unwrap();
                    assert_eq!(Some(r.clone()), choose(&inp));
                    assert!(fits(&r, &inp));
                    for buffers in 1..=MAX_BUFFERS {
                        let mut free = budget.saturating_sub(buffers as u64 * 6 * MB);
                        if budget < buffers as u64 * 6 * MB {
                            continue;
                        }
                        let pinned: Vec<bool> = layers
                            .iter()
                            .map(|&b| {
                                let p = b <= free;
                                if p {
                                    free -= b;
                                }
                                p
                            })
                            .collect();
                        if pinned.iter().filter(|&&p| !p).count() < buffers {
                            continue;
                        }
                        let other = token_secs(&pinned, &layers, buffers, &t);
                        assert!(r.token_secs <= other * (1.0 + TIE_TOLERANCE) + 1e-12);
                    }
                }
            }
        }
    }

    /// Timing where reading one 28 MiB layer takes `fraction` of a 10 ms layer compute.
    fn read_fraction(fraction: f64) -> Timing {
        timing(28.0 / (0.010 * fraction), 0.010)
    }

    /// 10 pinned layers, then 12 streamed, 28 MiB each.
    fn pinned_prefix() -> ([u64; 22], Vec<bool>) {
        ([28 * MB; 22], (0..22).map(|i| i < 10).collect())
    }

    #[test]
    fn negligible_reads_keep_one_buffer_and_fast_reads_two() {
        let (layers, pinned) = pinned_prefix();
        // 200 GiB/s: 0.14 ms a layer, nothing to hide.
        assert_eq!(
            prefetch_depth(&pinned, &layers, 4, &timing(204_800.0, 0.010)),
            1
        );
        // A warm page cache (8 GiB/s, a third of the compute) or reads at 60% of it: with
        // one buffer each read waits for the compute before it (read + compute in turn); a
        // second hides it, and a third would only hold memory.
        assert_eq!(
            prefetch_depth(&pinned, &layers, 4, &timing(8_192.0, 0.010)),
            2
        );
        assert_eq!(prefetch_depth(&pinned, &layers, 4, &read_fraction(0.6)), 2);
    }

    #[test]
    fn reads_slower_than_compute_take_as_deep_a_ring_as_allowed() {
        // Reads 1.5x the compute: the reader is the bottleneck, and every buffer lets it read
        // further ahead while the pinned layers compute, up to what the ring allows.
        let (layers, pinned) = pinned_prefix();
        for ring in 1..=4 {
            assert_eq!(
                prefetch_depth(&pinned, &layers, ring, &read_fraction(1.5)),
                ring
            );
        }
        assert_eq!(
            prefetch_depth(&pinned, &layers, 4, &timing(1_000.0, 0.010)),
            4
        );
    }

    #[test]
    fn with_every_layer_streamed_two_buffers_keep_even_a_slow_reader_busy() {
        // Nothing is pinned: the reader only ever waits for a buffer the compute still uses,
        // and with two the compute always frees one before the next read is due.
        let layers = [28 * MB; 12];
        let streamed = [false; 12];
        assert_eq!(
            prefetch_depth(&streamed, &layers, 4, &read_fraction(3.0)),
            2
        );
        assert_eq!(
            prefetch_depth(&streamed, &layers, 4, &read_fraction(0.9)),
            2
        );
    }

    #[test]
    fn the_margin_for_slow_reads_deepens_a_ring_that_the_mean_says_is_enough() {
        // Reads at 90% of the compute: by the mean two buffers hide them, but a read 25%
        // slower than the mean would not fit behind one compute, so a third is kept.
        let (layers, pinned) = pinned_prefix();
        let t = read_fraction(0.9);
        let by_mean = Timing {
            read_secs_per_byte: t.read_secs_per_byte / READ_MARGIN,
            ..t
        };
        assert_eq!(prefetch_depth(&pinned, &layers, 4, &by_mean), 2);
        assert_eq!(prefetch_depth(&pinned, &layers, 4, &t), 3);
    }

    #[test]
    fn the_adapted_depth_is_deterministic_bounded_and_zero_without_streaming() {
        let layers = [3 * MB, 5 * MB, 4 * MB, 5 * MB, 2 * MB, 6 * MB, 5 * MB];
        assert_eq!(
            prefetch_depth(&[true; 7], &layers, 4, &timing(100.0, 0.01)),
            0
        );
        assert_eq!(
            prefetch_depth(&[false; 7], &layers, 0, &timing(100.0, 0.01)),
            0
        );
        let pinned = [true, true, false, true, false, false, true];
        for read in [10.0, 50.0, 300.0, 2_000.0, 30_000.0] {
            for compute in [0.0005, 0.005, 0.05] {
                for ring in 1..=MAX_BUFFERS {
                    let t = timing(read, compute);
                    let d = prefetch_depth(&pinned, &layers, ring, &t);
                    assert_eq!(d, prefetch_depth(&pinned, &layers, ring, &t));
                    // Within the ring and the three streamed layers.
                    assert!(d >= 1 && d <= ring.min(3), "{read} {compute} {ring}: {d}");
                    // The shallowest depth within the tolerance of the fastest one, with
                    // reads taken READ_MARGIN slower.
                    let slower = timing(read / READ_MARGIN, compute);
                    let secs: Vec<f64> = (1..=ring.min(3))
                        .map(|other| token_secs(&pinned, &layers, other, &slower))
                        .collect();
                    let fastest = secs.iter().copied().fold(f64::INFINITY, f64::min);
                    assert!(secs[d - 1] <= fastest * (1.0 + TIE_TOLERANCE));
                    assert!(secs[..d - 1]
                        .iter()
                        .all(|&s| s > fastest * (1.0 + TIE_TOLERANCE)));
                }
            }
        }
    }

    #[test]
    fn the_pipeline_model_matches_hand_computed_timelines() {
        let t = Timing {
            read_secs_per_byte: 1.0,
            compute_secs_per_layer: 1.0,
        };
        // Layer 0 pinned, layer 1 streamed (reads take 3): the read of the next token's layer 1
        // starts when its one buffer frees (end of compute), overlapping layer 0: 4 per token.
        assert_eq!(token_secs(&[true, false], &[1, 3], 1, &t), 4.0);
        // Both streamed, one buffer: read 3 + compute 1 + read 3 + compute 1 each token.
        assert_eq!(token_secs(&[false, false], &[3, 3], 1, &t), 8.0);
        // Both streamed, two buffers: the reader never waits: 6 per token.
        assert_eq!(token_secs(&[false, false], &[3, 3], 2, &t), 6.0);
        // All pinned: compute only.
        assert_eq!(token_secs(&[true, true, true], &[9, 9, 9], 0, &t), 3.0);
    }
}
