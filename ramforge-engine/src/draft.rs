//! Where speculative decoding's drafts come from, and how long they are: prompt lookup (the
//! tokens that followed the latest earlier occurrence of the context's last n-gram; nothing
//! held but the context itself) or a small draft model with the same vocabulary, run greedily
//! on its own engine. The draft length adapts to the measured acceptance.

use crate::budget::MemoryBudget;
use crate::error::EngineError;
use crate::model::Model;
use crate::options::EngineOptions;
use crate::stream::ResidencyStats;
use crate::text::Tokenizer;

/// The share of one budget a draft model that does not fit resident beside the target takes
/// (its layers then stream).
pub const DRAFT_SHARE: f64 = 0.25;

/// How one `--ram` budget is split between a target and its draft model (`None`: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DraftSplit {
    /// The draft model's budget: all it charges when every weight is resident, or
    /// [`DRAFT_SHARE`] of the budget (its layers then stream), whichever makes a pass read
    /// less ([`split_budget`]).
    pub draft: Option<u64>,
    /// The rest, for the target.
    pub target: Option<u64>,
    /// Whether the draft model is resident whole.
    pub draft_resident: bool,
    /// What the draft model charges with every weight resident.
    pub draft_whole: u64,
}

/// The split of `ram` between `target` and `draft` (both laid out under `options`, the
/// target's; the draft without drafting of its own). Two splits are weighed by the bytes one
/// speculative pass streams, the target's streamed bytes plus `options.draft` times the
/// draft's: the draft resident whole, the target the rest; or the draft in
/// [`DRAFT_SHARE`] of the budget. The draft runs several passes per target pass, so a draft
/// that streams usually costs more reads than the target saves; the resident split wins ties.
pub fn split_budget(
    target: &Model,
    draft: &Model,
    options: &EngineOptions,
    ram: Option<u64>,
) -> Result<DraftSplit, EngineError> {
    let draft_opts = draft_options(options);
    let whole = draft
        .plan(&EngineOptions {
            ram: None,
            ..draft_opts.clone()
        })?
        .total_bytes();
    let Some(ram) = ram else {
        return Ok(DraftSplit {
            draft: None,
            target: None,
            draft_resident: true,
            draft_whole: whole,
        });
    };
    let split = |draft_ram: u64| DraftSplit {
        draft: Some(draft_ram),
        target: Some(ram - draft_ram),
        draft_resident: draft_ram >= whole,
        draft_whole: whole,
    };
    // Bytes streamed per speculative pass with `draft_ram` for the draft, if both plans fit.
    let pass_bytes = |draft_ram: u64| -> Option<u64> {
        let t = target
            .plan(&EngineOptions {
                ram: Some(ram.checked_sub(draft_ram)?),
                ..options.clone()
            })
            .ok()?;
        let d = draft
            .plan(&EngineOptions {
                ram: Some(draft_ram),
                ..draft_opts.clone()
            })
            .ok()?;
        let drafted = options.draft.max(1) as u64;
        Some(t.streamed_bytes_per_token() + drafted * d.streamed_bytes_per_token())
    };
    let share = whole.min((ram as f64 * DRAFT_SHARE) as u64);
    Ok(match (pass_bytes(whole), pass_bytes(share)) {
        (Some(resident), Some(shared)) if resident <= shared => split(whole),
        (Some(_), None) => split(whole),
        _ => split(share),
    })
}

/// The draft engine's options: the target's context and threads, one sequence, no drafting.
pub fn draft_options(target: &EngineOptions) -> EngineOptions {
    EngineOptions {
        draft: 0,
        sequences: 1,
        ..target.clone()
    }
}

/// Why `draft` cannot draft for `target`, in one line, or `None` when their vocabularies are
/// the same (token count, and every token's text at its id).
pub fn vocabulary_difference(target: &Tokenizer, draft: &Tokenizer) -> Option<String> {
    let (n, m) = (target.vocab_size(), draft.vocab_size());
    if n != m {
        return Some(format!(
            "the vocabularies differ: the draft has {m} tokens, the target {n}"
        ));
    }
    (0..n as u32).find_map(|id| {
        let (a, b) = (target.token_text(id), draft.token_text(id));
        (a != b).then(|| {
            format!(
                "the vocabularies differ: token {id} is {a:?} in the target, {b:?} in the draft"
            )
        })
    })
}

/// Longest n-gram prompt lookup matches (it tries shorter ones after).
const MAX_NGRAM: usize = 4;

/// A source of drafts for [`Engine::generate`](crate::Engine::generate) (set with
/// [`Engine::set_drafter`](crate::Engine::set_drafter)).
pub enum Drafter {
    /// Prompt lookup: n-gram matches in the context so far.
    Lookup,
    /// A small model with the target's vocabulary, on its own engine (its own share of the
    /// budget), drafting greedily.
    Model(Box<dyn DraftModel + Send>),
    /// The target file's own MTP (nextn) layer, held by the target's engine (`mtp.rs`),
    /// drafting greedily.
    Mtp,
}

/// A model that drafts: an [`crate::Engine`] of a small model (implemented in `generate.rs`,
/// so this file, which the engine's definition uses, does not depend on the engine).
pub trait DraftModel {
    /// `k` tokens it picks greedily after `context`, keeping what it already holds of it.
    fn draft(&mut self, context: &[u32], k: usize) -> Result<Vec<u32>, EngineError>;
    /// Its storage traffic so far.
    fn residency(&self) -> &ResidencyStats;
    /// Its budget.
    fn budget(&self) -> &MemoryBudget;
}

impl Drafter {
    /// Up to `k` tokens likely to follow `context`.
    pub(crate) fn draft(&mut self, context: &[u32], k: usize) -> Result<Vec<u32>, EngineError> {
        if k == 0 {
            return Ok(Vec::new());
        }
        match self {
            Drafter::Lookup => Ok(lookup(context, k)),
            Drafter::Model(model) => model.draft(context, k),
            // The target's engine drafts these (`Engine::speculative_pass`).
            Drafter::Mtp => Ok(Vec::new()),
        }
    }

    /// What drafts: `lookup`, `model` or `mtp` (as `run --json` reports it).
    pub fn name(&self) -> &'static str {
        match self {
            Drafter::Lookup => "lookup",
            Drafter::Model(_) => "model",
            Drafter::Mtp => "mtp",
        }
    }

    /// The draft model, if any.
    pub fn model(&self) -> Option<&(dyn DraftModel + Send)> {
        match self {
            Drafter::Lookup | Drafter::Mtp => None,
            Drafter::Model(m) => Some(m.as_ref()),
        }
    }
}

/// The tokens that followed the latest earlier occurrence of the longest suffix of `context`
/// (of at most [`MAX_NGRAM`] tokens) found in it, at most `k` of them.
pub fn lookup(context: &[u32], k: usize) -> Vec<u32> {
    let len = context.len();
    for n in (1..=MAX_NGRAM.min(len.saturating_sub(1))).rev() {
        let tail = &context[len - n..];
        if let Some(i) = (0..len - n).rev().find(|&i| &context[i..i + n] == tail) {
            return context[i + n..(i + n + k).min(len)].to_vec();
        }
    }
    Vec::new()
}

/// The draft length, adapted to acceptance: one more after a fully accepted draft, one past
/// the accepted count after a rejection; between 1 and the engine's verify capacity less one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DraftLength {
    k: usize,
    max: usize,
}

impl DraftLength {
    pub(crate) fn new(max: usize) -> DraftLength {
        DraftLength { k: 4.min(max), max }
    }

    pub(crate) fn get(&self) -> usize {
        self.k
    }

    /// After `accepted` of `drafted` tokens were accepted.
    pub(crate) fn update(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.k = if accepted == drafted {
            (self.k + 1).min(self.max)
        } else {
            (accepted + 1)
                .min(self.k.saturating_sub(1))
                .clamp(1, self.max.max(1))
        };
    }
}

/// One sequence's speculative decoding between passes: its adapted draft length and what it
/// did so far. [`crate::Engine::generate`] keeps one per generation, the server one per request
/// ([`crate::Engine::speculating`], [`crate::Engine::speculate_sequence`]).
#[derive(Clone, Copy, Debug)]
pub struct Speculating {
    pub(crate) length: DraftLength,
    /// What speculative decoding did for this sequence.
    pub stats: SpeculationStats,
}

impl Speculating {
    /// Drafts of at most `max` tokens.
    pub(crate) fn new(max: usize) -> Speculating {
        Speculating {
            length: DraftLength::new(max),
            stats: SpeculationStats::default(),
        }
    }
}

/// What speculative decoding did in one generation.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct SpeculationStats {
    /// Verify passes over the target's weights while decoding.
    pub passes: u64,
    /// Tokens drafted.
    pub drafted: u64,
    /// Drafted tokens the target accepted.
    pub accepted: u64,
    /// Bytes the draft model read from storage (0 for prompt lookup, or a resident draft; 0 for
    /// MTP drafts too, whose reads are the target engine's own and counted there).
    pub draft_bytes_read: u64,
}

impl SpeculationStats {
    /// Accepted over drafted tokens (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_continues_the_latest_longest_match() {
        let ctx = [1, 2, 3, 9, 1, 2, 3, 4, 5, 7, 2, 3];
        assert_eq!(lookup(&ctx, 2), vec![4, 5]);
        assert_eq!(lookup(&ctx, 10), vec![4, 5, 7, 2, 3]);
        assert_eq!(lookup(&[5, 6, 7], 3), Vec::<u32>::new());
        assert_eq!(lookup(&[], 3), Vec::<u32>::new());
    }

    #[test]
    fn draft_length_adapts() {
        let mut k = DraftLength::new(8);
        assert_eq!(k.get(), 4);
        k.update(4, 4);
        assert_eq!(k.get(), 5);
        k.update(5, 1);
        assert_eq!(k.get(), 2);
        k.update(2, 0);
        assert_eq!(k.get(), 1);
        k.update(1, 0);
        assert_eq!(k.get(), 1);
    }
}
