//! Choosing the next token from logits: greedy, or temperature sampling narrowed by top-k,
//! top-p and min-p, after a windowed repetition penalty and OpenAI's additive presence and
//! frequency penalties, from a seeded RNG; optionally with the log-probabilities of the
//! distribution it chose from.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// How to pick tokens and when to stop.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 (or less) = greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1 = off).
    pub top_p: f32,
    /// Drop tokens less likely than min_p times the most likely one (0 = off).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of recent tokens by this (1 = off).
    pub repeat_penalty: f32,
    /// How many recent tokens (prompt included) the penalty looks at.
    pub repeat_last_n: usize,
    /// OpenAI's `presence_penalty`: subtracted once from the logit of every token generated so
    /// far (0 = off; the prompt does not count).
    pub presence_penalty: f32,
    /// OpenAI's `frequency_penalty`: subtracted from a token's logit once per time it was
    /// generated so far (0 = off).
    pub frequency_penalty: f32,
    /// Report the log-probability of each chosen token and of this many most likely ones
    /// (`None` = off).
    pub logprobs: Option<usize>,
    /// Seed of the sampling RNG (same seed, same tokens).
    pub seed: u64,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Stop when the generated text contains one of these (the stop string is not emitted).
    pub stop: Vec<String>,
    /// Do not stop at end-of-generation tokens (for benchmarks).
    pub ignore_eos: bool,
    /// Print control tokens in the text (a tool-call convention whose markers are control
    /// tokens, e.g. Mistral's `[TOOL_CALLS]` or gpt-oss's `<|channel|>`, is parsed from it).
    pub show_control_tokens: bool,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logprobs: None,
            seed: 0,
            max_tokens: 128,
            stop: Vec::new(),
            ignore_eos: false,
            show_control_tokens: false,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding of up to `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> SamplingParams {
        SamplingParams {
            max_tokens,
            ..SamplingParams::default()
        }
    }

    /// Checks ranges; returns a message naming the bad parameter.
    pub fn validate(&self) -> Result<(), String> {
        if !self.temperature.is_finite() {
            return Err(format!("temperature {} is not finite", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top-p {} must lie in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min-p {} must lie in [0, 1]", self.min_p));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(format!(
                "repeat penalty {} must be positive",
                self.repeat_penalty
            ));
        }
        for (name, v) in [
            ("presence penalty", self.presence_penalty),
            ("frequency penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(format!("{name} {v} must lie in [-2, 2]"));
            }
        }
        if self.logprobs.is_some_and(|n| n > MAX_TOP_LOGPROBS) {
            return Err(format!(
                "at most {MAX_TOP_LOGPROBS} top log-probabilities are reported"
            ));
        }
        Ok(())
    }
}

/// Most alternatives [`SamplingParams::logprobs`] may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A token and its log-probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenLogprob {
    /// The token id.
    pub id: u32,
    /// Natural log of its probability.
    pub logprob: f32,
}

/// The log-probabilities of one sampling step: of the chosen token and the most likely ones,
/// most likely first. They are those of the distribution the sampler chose from: the logits
/// after the penalties and any constraint's mask, at temperature 1 (as OpenAI reports them),
/// so the first of `top` is the token greedy decoding takes.
#[derive(Clone, Debug, PartialEq)]
pub struct Logprobs {
    /// The token sampled.
    pub chosen: TokenLogprob,
    /// The most likely tokens, as many as asked for.
    pub top: Vec<TokenLogprob>,
}

/// Log-probabilities of `logits` (`-inf` for masked tokens): `chosen`'s and the `n` most
/// likely (ties by lower id).
pub fn logprobs_of(logits: &[f32], chosen: u32, n: usize) -> Logprobs {
    let max = logits
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|v| !v.is_nan())
        .map(|&v| ((v - max) as f64).exp())
        .sum();
    let log_z = max as f64 + sum.ln();
    let lp = |id: u32| {
        let v = logits
            .get(id as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY);
        TokenLogprob {
            id,
            logprob: if v.is_nan() {
                f32::NEG_INFINITY
            } else {
                (v as f64 - log_z) as f32
            },
        }
    };
    let mut ids: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| logits[i as usize] > f32::NEG_INFINITY)
        .collect();
    let by_logit = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    let n = n.min(ids.len());
    if n > 0 && n < ids.len() {
        ids.select_nth_unstable_by(n - 1, by_logit);
    }
    ids.truncate(n);
    ids.sort_unstable_by(by_logit);
    Logprobs {
        chosen: lp(chosen),
        top: ids.into_iter().map(lp).collect(),
    }
}

/// Index of the largest value (the lowest index on ties); NaN never wins.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}

/// A sampler: the parameters plus the RNG state and a reusable candidate list.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    candidates: Vec<(u32, f32)>,
    /// How often each token was sampled (for the presence and frequency penalties).
    counts: HashMap<u32, u32>,
    /// The log-probabilities of the last step, when asked for.
    last_logprobs: Option<Logprobs>,
}

impl Sampler {
    /// A sampler for `params`, seeded.
    pub fn new(params: &SamplingParams) -> Sampler {
        Sampler {
            params: params.clone(),
            rng: StdRng::seed_from_u64(params.seed),
            candidates: Vec::new(),
            counts: HashMap::new(),
            last_logprobs: None,
        }
    }

    /// Picks the next token. `logits` is modified by the penalties; `history` is every token in
    /// the context so far. Tokens whose logit is `-inf` (masked) are never picked, unless all
    /// are.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        self.sample_draft(logits, history, None)
    }

    /// [`Sampler::sample`] that checks a deterministic `draft` token (speculative sampling: a
    /// draft proposed with certainty): it is kept with the probability `p` the sampler gives it,
    /// else a token is drawn from `p` without it, renormalized, so the token returned follows
    /// `p` exactly. Greedy returns the most likely token, as `sample` does.
    pub fn sample_draft(&mut self, logits: &mut [f32], history: &[u32], draft: Option<u32>) -> u32 {
        let id = self.pick(logits, history, draft);
        *self.counts.entry(id).or_insert(0) += 1;
        self.last_logprobs = self.params.logprobs.map(|n| logprobs_of(logits, id, n));
        id
    }

    /// The log-probabilities of the last [`Sampler::sample`], when
    /// [`SamplingParams::logprobs`] asked for them.
    pub fn last_logprobs(&self) -> Option<&Logprobs> {
        self.last_logprobs.as_ref()
    }

    fn pick(&mut self, logits: &mut [f32], history: &[u32], draft: Option<u32>) -> u32 {
        let p = &self.params;
        if p.repeat_penalty != 1.0 && p.repeat_last_n > 0 {
            apply_repeat_penalty(logits, history, p.repeat_last_n, p.repeat_penalty);
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            apply_openai_penalties(
                logits,
                &self.counts,
                p.presence_penalty,
                p.frequency_penalty,
            );
        }
        if p.temperature <= 0.0 {
            return argmax(logits) as u32;
        }
        let c = &mut self.candidates;
        c.clear();
        c.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > f32::NEG_INFINITY)
                .map(|(i, &v)| (i as u32, v)),
        );
        if c.is_empty() {
            return argmax(logits) as u32;
        }
        // Most likely first; ties by id, so the order is deterministic.
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && p.top_k < c.len() {
            c.select_nth_unstable_by(p.top_k - 1, by_logit);
            c.truncate(p.top_k);
        }
        c.sort_unstable_by(by_logit);
        // Probabilities at temperature 1 for top-p and min-p (as llama.cpp's chain does).
        let probs = softmax(c.iter().map(|x| x.1));
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = c.len();
            for (i, pr) in probs.iter().enumerate() {
                acc += pr;
                if acc >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            c.truncate(keep);
        }
        if p.min_p > 0.0 {
            let floor = probs[0] * p.min_p as f64;
            let keep = probs[..c.len()]
                .iter()
                .take_while(|&&pr| pr >= floor)
                .count();
            c.truncate(keep.max(1));
        }
        let inv_t = 1.0 / p.temperature;
        let probs = softmax(c.iter().map(|x| x.1 * inv_t));
        // With a draft: keep it with its probability, else draw from the rest.
        let skip = draft.and_then(|d| c.iter().position(|x| x.0 == d));
        let mut scale = 1.0;
        if let Some(i) = skip {
            if self.rng.gen::<f64>() < probs[i] {
                return c[i].0;
            }
            scale = 1.0 - probs[i];
        }
        let r: f64 = self.rng.gen::<f64>() * scale;
        let mut acc = 0.0;
        let mut last = None;
        for (i, pr) in probs.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            acc += pr;
            last = Some(i);
            if r < acc {
                return c[i].0;
            }
        }
        c[last.or(skip).unwrap_or(0)].0
    }
}

/// Normalised probabilities of the values (in f64, so tiny tails do not vanish).
fn softmax(values: impl Iterator<Item = f32> + Clone) -> Vec<f64> {
    let max = values.clone().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = values.map(|v| (v as f64 - max).exp()).collect();
    let z: f64 = e.iter().sum();
    e.into_iter().map(|x| x / z).collect()
}

/// Penalises each distinct token among the last `window` of `history` once.
pub fn apply_repeat_penalty(logits: &mut [f32], history: &[u32], window: usize, penalty: f32) {
    let start = history.len().saturating_sub(window);
    let mut seen: Vec<u32> = history[start..].to_vec();
    seen.sort_unstable();
    seen.dedup();
    for id in seen {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
}

/// OpenAI's penalties: `logit -= count * frequency + (count > 0) * presence` for every token
/// sampled so far, `counts` of them.
pub fn apply_openai_penalties(
    logits: &mut [f32],
    counts: &HashMap<u32, u32>,
    presence: f32,
    frequency: f32,
) {
    for (&id, &n) in counts {
        if let Some(l) = logits.get_mut(id as usize) {
            *l -= n as f32 * frequency + if n > 0 { presence } else { 0.0 };
        }
    }
}

/// Holds back generated text that could be the start of a stop string, and finds stop strings
/// that span token boundaries.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

impl StopMatcher {
    /// A matcher for the stop strings `stops`.
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
        }
    }

    /// Adds new text; returns the text safe to show now, and whether a stop string was found
    /// (in which case the returned text ends just before it, and nothing more should be shown).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        self.pending.push_str(text);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            let shown = self.pending[..at].to_string();
            self.pending.clear();
            return (shown, true);
        }
        // Keep the longest tail that is a proper prefix of some stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > keep && self.pending.ends_with(&s[..i]) {
                    keep = i;
                }
            }
        }
        let cut = self.pending.len() - keep;
        let shown = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        (shown, false)
    }

    /// The text held back when generation ends without a stop string.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Speculative sampling of a deterministic draft keeps the distribution: for drafts likely,
    /// unlikely and outside top-k, the chosen tokens' frequencies over many draws match the
    /// probabilities plain sampling draws from (chi-square, 4 degrees of freedom at most, well
    /// under the 1e-5 tail of 25.7; the seeds are fixed, so this never flakes).
    #[test]
    fn a_checked_draft_keeps_the_distribution() {
        let logits = [2.0f32, 1.0, 0.5, 0.0, -1.0];
        for (top_k, drafts) in [(0, vec![0u32, 2, 4]), (3, vec![1, 4])] {
            let p = SamplingParams {
                top_k,
                ..params(0.8)
            };
            // The exact distribution: softmax at 1/T over the kept candidates.
            let kept = if top_k == 0 { logits.len() } else { top_k };
            let probs = softmax(logits[..kept].iter().map(|&l| l / 0.8));
            for draft in drafts {
                let mut sampler = Sampler::new(&SamplingParams {
                    seed: 7,
                    ..p.clone()
                });
                let n = 100_000;
                let mut counts = vec![0usize; logits.len()];
                for _ in 0..n {
                    let mut l = logits;
                    counts[sampler.sample_draft(&mut l, &[], Some(draft)) as usize] += 1;
                }
                assert!(counts[kept..].iter().all(|&c| c == 0), "{counts:?}");
                let chi2: f64 = probs
                    .iter()
                    .zip(&counts)
                    .map(|(&q, &c)| {
                        let want = q * n as f64;
                        (c as f64 - want).powi(2) / want
                    })
                    .sum();
                assert!(
                    chi2 < 25.7,
                    "top-k {top_k}, draft {draft}: chi2 {chi2}, {counts:?}"
                );
            }
        }
    }

    fn params(t: f32) -> SamplingParams {
        SamplingParams {
            temperature: t,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplingParams::default()
        }
    }

    #[test]
    fn greedy_takes_the_argmax_lowest_id_on_ties() {
        let mut s = Sampler::new(&params(0.0));
        assert_eq!(s.sample(&mut [0.1, 3.0, -1.0, 3.0], &[]), 1);
        assert_eq!(argmax(&[f32::NAN, -5.0, -4.0]), 2);
    }

    #[test]
    fn same_seed_same_tokens_and_different_seeds_differ() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let draw = |seed: u64| {
            let mut s = Sampler::new(&SamplingParams {
                seed,
                ..params(1.0)
            });
            (0..40)
                .map(|_| s.sample(&mut logits.clone(), &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn top_k_top_p_and_min_p_narrow_the_candidates() {
        let logits = [5.0f32, 4.0, 3.0, 0.0, -10.0];
        let seen = |p: SamplingParams| {
            let mut s = Sampler::new(&p);
            let mut set = std::collections::BTreeSet::new();
            for _ in 0..400 {
                set.insert(s.sample(&mut logits.to_vec(), &[]));
            }
            set.into_iter().collect::<Vec<_>>()
        };
        assert_eq!(
            seen(SamplingParams {
                top_k: 2,
                ..params(5.0)
            }),
            vec![0, 1]
        );
        // p(0) = 0.665, p(1) = 0.245: top-p 0.8 keeps two.
        assert_eq!(
            seen(SamplingParams {
                top_p: 0.8,
                ..params(5.0)
            }),
            vec![0, 1]
        );
        // min-p 0.2 drops token 2 (p = 0.09 < 0.2 * 0.665).
        assert_eq!(
            seen(SamplingParams {
                min_p: 0.2,
                ..params(5.0)
            }),
            vec![0, 1]
        );
        assert_eq!(seen(params(100.0)).len(), 5);
    }

    #[test]
    fn repetition_penalty_uses_the_window_and_sign() {
        let mut l = vec![2.0f32, -2.0, 2.0, 2.0];
        apply_repeat_penalty(&mut l, &[2, 0, 1, 0, 1], 4, 2.0);
        assert_eq!(l, vec![1.0, -4.0, 2.0, 2.0]);
        // It changes the greedy choice.
        let mut s = Sampler::new(&SamplingParams {
            repeat_penalty: 4.0,
            ..params(0.0)
        });
        assert_eq!(s.sample(&mut [3.0, 2.0], &[0]), 1);
    }

    #[test]
    fn presence_and_frequency_penalties_are_additive_over_generated_tokens() {
        let mut l = vec![1.0f32, 1.0, 1.0, -1.0];
        let counts = HashMap::from([(0, 3), (3, 1)]);
        apply_openai_penalties(&mut l, &counts, 0.5, 0.25);
        // token 0: 1 - 3 * 0.25 - 0.5; token 3: -1 - 0.25 - 0.5.
        assert_eq!(l, vec![-0.25, 1.0, 1.0, -1.75]);
        // Greedy with a strong presence penalty never repeats a token it generated, and the
        // prompt (history) does not count.
        let mut s = Sampler::new(&SamplingParams {
            presence_penalty: 2.0,
            ..params(0.0)
        });
        let logits = [3.0f32, 2.0, 1.5, 0.0];
        let picks: Vec<u32> = (0..3)
            .map(|_| s.sample(&mut logits.to_vec(), &[0, 0, 0]))
            .collect();
        assert_eq!(picks, vec![0, 1, 2]);
        // Frequency alone: each use costs 1, so token 0 (3.0) is taken twice before 1 (2.0).
        let mut s = Sampler::new(&SamplingParams {
            frequency_penalty: 0.75,
            ..params(0.0)
        });
        let picks: Vec<u32> = (0..4)
            .map(|_| s.sample(&mut logits.to_vec(), &[]))
            .collect();
        // 3.0 -> 0; 2.25 vs 2.0 -> 0; 1.5 vs 2.0 -> 1; 1.5 vs 1.25 -> 0.
        assert_eq!(picks, vec![0, 0, 1, 0]);
    }

    #[test]
    fn logprobs_are_the_log_softmax_and_the_top_entry_is_the_greedy_token() {
        let logits = [1.0f32, 3.0, f32::NEG_INFINITY, 2.0, 3.0];
        let lp = logprobs_of(&logits, 3, 3);
        let z: f64 = [1.0f64, 3.0, 2.0, 3.0].iter().map(|v| v.exp()).sum();
        let want = |v: f64| (v - z.ln()) as f32;
        assert_eq!(lp.chosen.id, 3);
        assert!((lp.chosen.logprob - want(2.0)).abs() < 1e-6);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.id).collect();
        assert_eq!(ids, vec![1, 4, 3], "ties by lower id, masked never listed");
        assert!((lp.top[0].logprob - want(3.0)).abs() < 1e-6);
        let total: f64 = [1.0f64, 3.0, 2.0, 3.0]
            .iter()
            .map(|&v| (want(v) as f64).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5);
        // The sampler reports them for what it chose, after the penalties.
        let mut s = Sampler::new(&SamplingParams {
            logprobs: Some(2),
            ..params(0.0)
        });
        let id = s.sample(&mut logits.to_vec(), &[]);
        let got = s.last_logprobs().unwrap();
        assert_eq!((id, got.chosen.id, got.top[0].id), (1, 1, 1));
        assert_eq!(got.top.len(), 2);
    }

    #[test]
    fn masked_tokens_are_never_sampled() {
        let mut s = Sampler::new(&params(1.0));
        for _ in 0..200 {
            let mut l = [5.0f32, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY];
            assert!(matches!(s.sample(&mut l, &[]), 0 | 2));
        }
    }

    #[test]
    fn stop_strings_are_found_across_pushes_and_held_back() {
        let mut m = StopMatcher::new(&["</s>".to_string(), "\n\n".to_string()]);
        assert_eq!(m.push("Hello <"), ("Hello ".to_string(), false));
        assert_eq!(m.push("/"), (String::new(), false));
        assert_eq!(m.push("x> world\n"), ("</x> world".to_string(), false));
        assert_eq!(m.push("\nmore"), (String::new(), true));
        let mut m = StopMatcher::new(&["END".to_string()]);
        assert_eq!(m.push("abc EN"), ("abc ".to_string(), false));
        assert_eq!(m.finish(), "EN");
        let mut m = StopMatcher::new(&[]);
        assert_eq!(m.push("héllo"), ("héllo".to_string(), false));
    }
}
