//! Tiled attention against a plain f64 softmax attention on random data: causal, grouped
//! heads, a sliding-window ring, F16 and F32 caches, prompts cut into batches in several ways
//! and single decoding steps over many splits.

use super::*;
use crate::budget::MemoryBudget;
use crate::kv::KvType;
use half::f16;

/// A small deterministic generator (values in -1..1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * amp).collect()
    }
}

/// `x` as the cache stores it.
fn stored(x: &[f32], ty: KvType) -> Vec<f32> {
    match ty {
        KvType::F32 => x.to_vec(),
        KvType::F16 => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
    }
}

/// Softmax attention in f64 of query head `h` at `pos` over the positions it sees.
#[allow(clippy::too_many_arguments)]
fn reference(
    h: Heads,
    keys: &[Vec<f32>],
    vals: &[Vec<f32>],
    q: &[f32],
    head: usize,
    pos: usize,
    slots: usize,
) -> Vec<f64> {
    let hd = h.head_dim;
    let g = head / h.group();
    let seen = (pos + 1).saturating_sub(slots)..pos + 1;
    let s: Vec<f64> = seen
        .clone()
        .map(|p| {
            let k = &keys[p][g * hd..(g + 1) * hd];
            k.iter()
                .zip(q)
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum::<f64>()
                * h.scale as f64
        })
        .collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
    let z: f64 = e.iter().sum();
    let mut out = vec![0.0; hd];
    for (w, p) in e.iter().zip(seen) {
        for (o, v) in out.iter_mut().zip(&vals[p][g * hd..(g + 1) * hd]) {
            *o += w / z * *v as f64;
        }
    }
    out
}

struct Case {
    heads: Heads,
    ty: KvType,
    /// Positions the layer keeps (a ring when less than the context).
    slots: usize,
    ctx: usize,
    /// Prompt batch sizes, repeated until the context is full.
    batches: Vec<usize>,
}

/// Runs the prompt through `attend` as the forward pass does (keys written batch by batch,
/// one token at a time once a ring wraps) and returns every query's output,
/// token-major, with the reference.
fn run(c: &Case, seed: u64) -> (Vec<f32>, Vec<f64>) {
    let h = c.heads;
    let (hd, kvd, qd) = (h.head_dim, h.n_head_kv * h.head_dim, h.n_head * h.head_dim);
    let mut rng = Lcg(seed);
    // Large-ish scores so the softmax is peaked somewhere and flat elsewhere.
    let keys: Vec<Vec<f32>> = (0..c.ctx)
        .map(|_| stored(&rng.vec(kvd, 2.0), c.ty))
        .collect();
    let vals: Vec<Vec<f32>> = (0..c.ctx)
        .map(|_| stored(&rng.vec(kvd, 1.0), c.ty))
        .collect();
    let q = rng.vec(c.ctx * qd, 2.0);
    let budget = MemoryBudget::new(1 << 30);
    let mut kv = KvCache::new(&budget, c.ty, 1, kvd, c.ctx, |_| c.slots);
    kv.reserve(c.ctx).unwrap();
    let max_batch = *c.batches.iter().max().unwrap();
    let mut part = vec![0.0; h.scratch_floats(max_batch, c.ctx)];
    let mut att = vec![f32::NAN; c.ctx * qd];
    let mut first = 0;
    let mut b = 0;
    while first < c.ctx {
        let want = c.batches[b % c.batches.len()].min(c.ctx - first);
        b += 1;
        // As `attend_run`: a ring must not overwrite a key the same batch still needs.
        let len = if first + want <= c.slots {
            want
        } else if first < c.slots {
            c.slots - first
        } else {
            1
        };
        for p in first..first + len {
            kv.write(0, p, &keys[p], &vals[p]);
        }
        kv.set_len(first + len);
        attend(
            h,
            0,
            &kv,
            &q,
            None,
            first,
            first..first + len,
            &mut part,
            &mut att,
        );
        first += len;
    }
    let mut want = Vec::with_capacity(c.ctx * qd);
    for pos in 0..c.ctx {
        for head in 0..h.n_head {
            let qh = &q[pos * qd + head * hd..][..hd];
            want.extend(reference(h, &keys, &vals, qh, head, pos, c.slots));
        }
    }
    (att, want)
}

fn heads(n_head: usize, n_head_kv: usize, head_dim: usize) -> Heads {
    Heads {
        n_head,
        n_head_kv,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
    }
}

/// Every output within 2e-5 of the f64 reference (values are at most 1, so this is about
/// 100 f32 ulps: rounding of f32 sums over up to 700 positions and ggml's 1.5-ulp exp).
#[test]
fn tiled_attention_matches_an_f64_softmax() {
    let cases = [
        // SmolLM2's shape: 9 heads on 3, head size 64; batches that cut blocks and splits.
        (heads(9, 3, 64), 700, 700, vec![64, 37, 200, 1]),
        // One key/value head for all (tiles split a query's heads), odd head size.
        (heads(20, 1, 36), 300, 300, vec![5, 64]),
        // No grouping, a ring of 70 slots (not a multiple of the block) over 400 positions.
        (heads(4, 4, 16), 70, 400, vec![33, 64]),
        // Gemma-like: head size 256, a ring of 512 over 700 positions.
        (heads(4, 1, 256), 512, 700, vec![64]),
    ];
    for (h, slots, ctx, batches) in cases {
        for ty in [KvType::F32, KvType::F16] {
            let c = Case {
                heads: h,
                ty,
                slots,
                ctx,
                batches: batches.clone(),
            };
            let (got, want) = run(&c, 7);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (*a as f64 - b).abs() <= 2e-5,
                    "{h:?} {ty:?} slots {slots}: element {i} (position {}): {a} vs {b}",
                    i / (h.n_head * h.head_dim)
                );
            }
        }
    }
}

/// A query's output is the same bit for bit however the prompt is cut into batches (a single
/// decoding step included): prefill and decode, streamed or not, agree.
#[test]
fn a_query_gets_the_same_result_in_any_batch() {
    for (h, slots, ctx) in [(heads(9, 3, 64), 900, 900), (heads(4, 2, 40), 100, 300)] {
        for ty in [KvType::F16, KvType::F32] {
            let mut outs = Vec::new();
            for batches in [vec![1], vec![64], vec![7, 130, 3], vec![512]] {
                let c = Case {
                    heads: h,
                    ty,
                    slots,
                    ctx,
                    batches,
                };
                outs.push(run(&c, 11).0);
            }
            for o in &outs[1..] {
                assert!(o.iter().zip(&outs[0]).all(|(a, b)| a == b), "{h:?} {ty:?}");
            }
        }
    }
}
