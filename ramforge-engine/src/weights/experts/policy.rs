//! Which experts an MoE layer keeps in its cache slots: a pure policy made for routing.
//!
//! A router picks a few experts per token, and some far more often than others, so recency
//! (LRU) is the wrong measure: one token that routes elsewhere would evict the hot experts.
//! Each expert's use is counted with exponential decay per pass of its layer (the count a pass
//! ago weighs [`DECAY`] as much), and a missed expert is admitted into a slot only when a slot is
//! free or when it has been used more than the least-used expert the slots hold; otherwise it is
//! read into a staging buffer, used once and forgotten.

/// How much a use one pass ago counts against a use now.
pub const DECAY: f32 = 0.95;

/// How many tokens' worth of routing a loaded history weighs against this process's own in
/// [`ExpertUse::shares`]: a short run refines the history instead of replacing it.
pub const PRIOR_TOKENS: f64 = 256.0;

/// The passes of routing as the history describes it that a seeded count stands for: a weak
/// prior (a new text's own experts take over within a few passes, where counts seeded at
/// their steady state held experts that text did not use for dozens), yet more than one
/// pass's count, so the preloaded experts are not evicted by the first cold ones missed.
pub const SEED_PASSES: i32 = 4;

/// Decayed use counts of every expert of every layer, and the undecayed totals the expert
/// history keeps.
#[derive(Clone, Debug)]
pub struct ExpertUse {
    n_expert: usize,
    /// Experts the router picks per token.
    n_used: usize,
    /// `[layer * n_expert + expert]`: the count as of `stamp`.
    count: Vec<f32>,
    /// `[layer * n_expert + expert]`: rows routed to it in this process, undecayed.
    total: Vec<f64>,
    /// `[layer * n_expert + expert]`: the shares a loaded history gave (empty: none).
    prior: Vec<f32>,
    /// The layer pass at which `count` was last brought up to date.
    stamp: Vec<u32>,
    /// Passes of each layer so far.
    passes: Vec<u32>,
}

impl ExpertUse {
    /// No use yet of the `n_expert` experts of each of `layers` layers.
    pub fn new(layers: usize, n_expert: usize, n_used: usize) -> ExpertUse {
        ExpertUse {
            n_expert,
            n_used: n_used.max(1),
            count: vec![0.0; layers * n_expert],
            total: vec![0.0; layers * n_expert],
            prior: Vec::new(),
            stamp: vec![0; layers * n_expert],
            passes: vec![0; layers],
        }
    }

    /// A new pass of `layer` begins (a decode step or a prompt batch).
    pub fn next_pass(&mut self, layer: usize) {
        self.passes[layer] = self.passes[layer].wrapping_add(1);
    }

    /// `expert` of `layer` is used `times` in this pass (tokens routed to it).
    pub fn record(&mut self, layer: usize, expert: usize, times: usize) {
        let i = layer * self.n_expert + expert;
        self.count[i] = self.score(layer, expert) + times as f32;
        self.stamp[i] = self.passes[layer];
        self.total[i] += times as f64;
    }

    /// Layers counted.
    pub fn layers(&self) -> usize {
        self.passes.len()
    }

    /// Experts of each layer.
    pub fn n_expert(&self) -> usize {
        self.n_expert
    }

    /// Each expert's share of its layer's routing (`[layer * n_expert + expert]`, a layer's
    /// shares summing to 1 once it has run): this process's totals, blended with the shares
    /// it was seeded with weighing [`PRIOR_TOKENS`] tokens. What the expert history keeps for
    /// the next process: the router's long-run preferences, where the decayed counts would
    /// keep only the last few dozen passes (a text's repetitions more than the model's skew).
    pub fn shares(&self) -> Vec<f32> {
        let n = self.n_expert.max(1);
        let prior_rows = PRIOR_TOKENS * self.n_used as f64;
        let mut out = vec![0.0; self.total.len()];
        for (l, row) in out.chunks_mut(n).enumerate() {
            let total = &self.total[l * n..(l + 1) * n];
            let prior = self.prior.get(l * n..(l + 1) * n);
            let w = if prior.is_some() { prior_rows } else { 0.0 };
            let sum = total.iter().sum::<f64>() + w;
            if sum <= 0.0 {
                continue;
            }
            for (x, share) in row.iter_mut().enumerate() {
                let p = prior.map_or(0.0, |p| f64::from(p[x]));
                *share = ((total[x] + w * p) / sum) as f32;
            }
        }
        out
    }

    /// Starts from a previous process's `shares` (as [`ExpertUse::shares`] gives them): each
    /// count becomes the decayed count [`SEED_PASSES`] passes routed that way leave, so the
    /// experts preloaded from the history are kept until this process's routing says
    /// otherwise, and the shares are kept to blend with this process's. Lengths that differ
    /// change nothing.
    pub fn seed(&mut self, shares: &[f32]) {
        if shares.len() != self.count.len() {
            return;
        }
        let n = self.n_expert.max(1);
        let settle = self.n_used as f32 * (1.0 - DECAY.powi(SEED_PASSES)) / (1.0 - DECAY);
        for (i, &share) in shares.iter().enumerate() {
            self.count[i] = share * settle;
            self.stamp[i] = self.passes[i / n];
        }
        self.prior = shares.to_vec();
    }

    /// The decayed count of `expert` of `layer` now.
    pub fn score(&self, layer: usize, expert: usize) -> f32 {
        let i = layer * self.n_expert + expert;
        let age = self.passes[layer].wrapping_sub(self.stamp[i]);
        self.count[i] * DECAY.powi(age.min(4096) as i32)
    }
}

/// What one cache slot of a layer holds when a missed expert needs a place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Slot {
    /// Nothing.
    Free,
    /// An expert with this decayed use count; `busy` when this pass still needs it.
    Held { score: f32, busy: bool },
}

/// Where a missed expert is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Into cache slot `i` (free, or its expert is evicted).
    Into(usize),
    /// Into a staging buffer: the cache keeps what it holds.
    Bypass,
}

/// The place for a missed expert whose decayed use count is `score`, given its layer's slots:
/// the first free slot; else the slot of the least-used expert not busy this pass, if the
/// missed one has been used more; else [`Admit::Bypass`].
pub fn admit(score: f32, slots: &[Slot]) -> Admit {
    if let Some(i) = slots.iter().position(|s| *s == Slot::Free) {
        return Admit::Into(i);
    }
    let victim = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match *s {
            Slot::Held { score, busy: false } => Some((i, score)),
            _ => None,
        })
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    match victim {
        Some((i, least)) if score > least => Admit::Into(i),
        _ => Admit::Bypass,
    }
}

/// Where one expert of a layer's pass comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Cache slot `i` holds it.
    Hit(usize),
    /// It is read to `into`; into a slot, only once the compute is done with `wanted[after]`,
    /// an expert of the same pass that slot held before.
    Read { into: Admit, after: Option<usize> },
}

/// The source of each expert of `wanted` (a pass of one layer, in compute order), given what
/// the layer's slots `held` and each expert's decayed use count: the misses are placed one
/// after another with [`admit`], each seeing the slots as the misses before it left them, and
/// an expert still needed later in the pass is never evicted. Deciding all of them before any
/// read is what lets the reads run ahead of the compute.
pub fn sources(
    held: &[Option<usize>],
    wanted: &[usize],
    score: impl Fn(usize) -> f32,
) -> Vec<Source> {
    let mut held = held.to_vec();
    // The index in `wanted` of the last expert taken from each slot in this pass.
    let mut used_at: Vec<Option<usize>> = vec![None; held.len()];
    let mut out = Vec::with_capacity(wanted.len());
    for (k, &x) in wanted.iter().enumerate() {
        if let Some(i) = held.iter().position(|&h| h == Some(x)) {
            used_at[i] = Some(k);
            out.push(Source::Hit(i));
            continue;
        }
        let later = &wanted[k + 1..];
        let view: Vec<Slot> = held
            .iter()
            .map(|h| match *h {
                None => Slot::Free,
                Some(e) => Slot::Held {
                    score: score(e),
                    busy: later.contains(&e),
                },
            })
            .collect();
        let into = admit(score(x), &view);
        let after = match into {
            Admit::Into(i) => {
                held[i] = Some(x);
                used_at[i].replace(k)
            }
            Admit::Bypass => None,
        };
        out.push(Source::Read { into, after });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(score: f32) -> Slot {
        Slot::Held { score, busy: false }
    }

    #[test]
    fn a_free_slot_is_taken_first() {
        assert_eq!(
            admit(0.1, &[held(5.0), Slot::Free, Slot::Free]),
            Admit::Into(1)
        );
        assert_eq!(admit(0.1, &[]), Admit::Bypass);
    }

    #[test]
    fn the_least_used_expert_is_evicted_only_by_a_more_used_one() {
        let slots = [held(3.0), held(0.5), held(2.0)];
        assert_eq!(admit(1.0, &slots), Admit::Into(1));
        assert_eq!(
            admit(0.5, &slots),
            Admit::Bypass,
            "ties keep what is cached"
        );
        assert_eq!(admit(0.2, &slots), Admit::Bypass);
    }

    #[test]
    fn an_expert_this_pass_still_needs_is_never_evicted() {
        let slots = [
            Slot::Held {
                score: 0.1,
                busy: true,
            },
            held(2.0),
        ];
        assert_eq!(admit(1.0, &slots), Admit::Bypass);
        assert_eq!(admit(3.0, &slots), Admit::Into(1));
    }

    /// A cyclic scan over more experts than slots (what LRU handles worst) does not flush
    /// experts that are used on every pass.
    #[test]
    fn hot_experts_survive_a_scan_of_cold_ones() {
        let (slots_n, hot) = (4, [0usize, 1]);
        let mut use_ = ExpertUse::new(1, 64, 3);
        let mut slots: Vec<Option<usize>> = vec![None; slots_n];
        let mut hits_on_hot = 0;
        for pass in 0..200 {
            use_.next_pass(0);
            let cold = 2 + pass % 62;
            for x in [hot[0], hot[1], cold] {
                use_.record(0, x, 1);
                if slots.contains(&Some(x)) {
                    hits_on_hot += usize::from(hot.contains(&x));
                    continue;
                }
                let view: Vec<Slot> = slots
                    .iter()
                    .map(|s| match s {
                        None => Slot::Free,
                        Some(e) => Slot::Held {
                            score: use_.score(0, *e),
                            busy: [hot[0], hot[1], cold].contains(e),
                        },
                    })
                    .collect();
                if let Admit::Into(i) = admit(use_.score(0, x), &view) {
                    slots[i] = Some(x);
                }
            }
        }
        // Every pass after the first hits both hot experts.
        assert_eq!(hits_on_hot, 2 * 199);
    }

    #[test]
    fn use_decays_so_a_shift_in_routing_takes_over() {
        let mut use_ = ExpertUse::new(2, 8, 1);
        for _ in 0..50 {
            use_.next_pass(1);
            use_.record(1, 3, 1);
        }
        let old = use_.score(1, 3);
        assert!(old > 10.0, "{old}");
        for _ in 0..50 {
            use_.next_pass(1);
            use_.record(1, 5, 1);
        }
        assert!(use_.score(1, 5) > use_.score(1, 3));
        assert!((use_.score(1, 3) - old * DECAY.powi(50)).abs() < 1e-4);
        // Layers count separately.
        assert_eq!(use_.score(0, 3), 0.0);
    }
    #[test]
    fn shares_seed_the_next_process_and_blend_with_its_routing() {
        let mut a = ExpertUse::new(2, 4, 1);
        for pass in 0..100 {
            a.next_pass(0);
            a.record(0, if pass % 4 == 0 { 1 } else { 2 }, 1);
        }
        let saved = a.shares();
        assert_eq!(saved.len(), 8);
        assert_eq!(&saved[..4], [0.0, 0.25, 0.75, 0.0]);
        assert_eq!(
            &saved[4..],
            [0.0; 4],
            "a layer that never ran has no shares"
        );
        let mut b = ExpertUse::new(2, 4, 1);
        b.seed(&saved);
        // Seeded at the count SEED_PASSES passes of that routing leave.
        let four = 1.0 + DECAY + DECAY * DECAY + DECAY.powi(3);
        assert!((b.score(0, 2) - 0.75 * four).abs() < 1e-4);
        assert_eq!(
            b.shares(),
            saved,
            "nothing routed yet: the history as it was"
        );
        // PRIOR_TOKENS tokens all routed to expert 3 weigh as much as the history.
        for _ in 0..PRIOR_TOKENS as usize {
            b.next_pass(0);
            b.record(0, 3, 1);
        }
        let blended = b.shares();
        assert!((blended[3] - 0.5).abs() < 1e-6 && (blended[2] - 0.375).abs() < 1e-6);
        assert!(
            b.score(0, 3) > b.score(0, 2),
            "and the decayed counts followed"
        );
        // A history of another shape is not taken.
        let mut c = ExpertUse::new(2, 4, 1);
        c.seed(&saved[..7]);
        assert_eq!(c.shares(), [0.0; 8]);
    }

    #[test]
    fn sources_place_misses_in_turn_and_wait_for_earlier_users_of_a_slot() {
        // Slots hold experts 7 and 2; the pass wants 2 (a hit), then 4 and 9 (misses).
        let score = |x: usize| match x {
            7 => 0.5,
            2 => 1.0,
            4 => 3.0,
            9 => 2.0,
            _ => 0.0,
        };
        let got = sources(&[Some(7), Some(2)], &[2, 4, 9], score);
        assert_eq!(
            got,
            [
                Source::Hit(1),
                // 4 evicts 7 (least used, not needed): no earlier use of slot 0.
                Source::Read {
                    into: Admit::Into(0),
                    after: None
                },
                // 9 (2.0) beats 2 (1.0), which was used at index 0: its read waits for it.
                Source::Read {
                    into: Admit::Into(1),
                    after: Some(0)
                },
            ]
        );
        // An expert used more than every cached one, but all of them still needed: staging.
        let got = sources(&[Some(7), Some(2)], &[4, 7, 2], score);
        assert_eq!(
            got[0],
            Source::Read {
                into: Admit::Bypass,
                after: None
            }
        );
        assert_eq!(&got[1..], [Source::Hit(0), Source::Hit(1)]);
        // A slot filled earlier in the pass and evicted again waits for that use.
        let got = sources(&[None], &[2, 4], score);
        assert_eq!(
            got,
            [
                Source::Read {
                    into: Admit::Into(0),
                    after: None
                },
                Source::Read {
                    into: Admit::Into(0),
                    after: Some(0)
                },
            ]
        );
    }
}
