//! The gated delta rule on one value head's state, in the two forms llama.cpp uses
//! (`delta-net-base.cpp`): the recurrent step for decoding and the chunked form for a prompt.
//!
//! The state `S` is `d x d`, row `j` a value element, column `i` a key element. Per token,
//! with decay `a = exp(g)` and `b = sigmoid(beta)`: `S = a S + b (v - a S k) k^T`, and the
//! output is `o = S q` (after the update).
//!
//! The chunked form processes up to [`CHUNK`] tokens at once. Within a chunk, with
//! `G_t = g_1 + .. + g_t`, the corrections `u_t = b_t (v_t - k_t^T S_(t-1) a_t)` solve
//! `(I + L) U = diag(b) V - diag(b e^G) K S_0^T` with `L[t][s] = b_t (k_t.k_s) e^(G_t - G_s)`
//! for `s < t`; then `o_t = e^(G_t) S_0 q_t + sum_(s<=t) (q_t.k_s) e^(G_t - G_s) u_s` and
//! `S = e^(G_m) S_0 + sum_s e^(G_m - G_s) u_s k_s^T`. Both forms are the same arithmetic
//! up to rounding; a unit test holds them to each other.
//!
//! The loops are written with eight independent lanes so that they vectorize, and compiled
//! twice: for AVX2 + FMA where the CPU has them, and for the target's baseline.

/// Tokens per chunk of the chunked form (llama.cpp's).
pub(crate) const CHUNK: usize = 64;

/// f32 elements of the workspace one value head needs for the chunked form.
pub(crate) fn chunk_workspace_floats(head_dim: usize) -> usize {
    2 * CHUNK * CHUNK + 2 * CHUNK * head_dim + 4 * CHUNK
}

/// One token of one value head, its inputs prepared: `q` (normalized and scaled) and `k`
/// (normalized) of its key head, `v`, `b = sigmoid(beta)`, and `g`, the log of the decay.
pub(crate) struct Token<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub b: f32,
    pub g: f32,
}

/// Advances `state` by the tokens `token(0..n)` one after another, writing token `t`'s output
/// to `out[t * d..(t + 1) * d]`.
pub(crate) fn recurrent<'a>(
    state: &mut [f32],
    n: usize,
    token: impl Fn(usize) -> Token<'a>,
    out: &mut [f32],
) {
    recurrent_on(crate::simd::avx2_enabled(), state, n, token, out)
}

/// [`recurrent`], on the AVX2 build of the loops if `simd`.
fn recurrent_on<'a>(
    simd: bool,
    state: &mut [f32],
    n: usize,
    token: impl Fn(usize) -> Token<'a>,
    out: &mut [f32],
) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    for (t, o) in out
        .chunks_exact_mut(out.len() / n.max(1))
        .take(n)
        .enumerate()
    {
        let tok = token(t);
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: the CPU has AVX2 and FMA.
            unsafe { step_avx2(state, &tok, o) };
            continue;
        }
        step::<Portable>(state, &tok, o);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn step_avx2(state: &mut [f32], tok: &Token<'_>, o: &mut [f32]) {
    step::<Avx2>(state, tok, o)
}

#[inline(always)]
fn step<L: Lanes>(state: &mut [f32], tok: &Token<'_>, o: &mut [f32]) {
    let d = tok.k.len();
    let decay = tok.g.exp();
    let kq = L::dot(tok.k, tok.q);
    for (j, row) in state.chunks_exact_mut(d).enumerate() {
        // From the old row: (a S + delta k^T) q = a (S q) + delta (k . q).
        let (sk, sq) = L::dot2(row, tok.k, tok.q);
        let delta = (tok.v[j] - decay * sk) * tok.b;
        L::scale_add(row, decay, delta, tok.k);
        o[j] = decay * sq + delta * kq;
    }
}

/// The chunked form: advances `state` by the `n` tokens `token(0..n)`, writing token `t`'s
/// output to `out[t * d..(t + 1) * d]`; `ws` holds at least [`chunk_workspace_floats`]
/// elements.
pub(crate) fn chunked<'a>(
    state: &mut [f32],
    n: usize,
    token: impl Fn(usize) -> Token<'a>,
    out: &mut [f32],
    ws: &mut [f32],
) {
    chunked_on(crate::simd::avx2_enabled(), state, n, token, out, ws)
}

/// [`chunked`], on the AVX2 build of the loops if `simd`.
fn chunked_on<'a>(
    simd: bool,
    state: &mut [f32],
    n: usize,
    token: impl Fn(usize) -> Token<'a>,
    out: &mut [f32],
    ws: &mut [f32],
) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    let d = out.len() / n.max(1);
    let mut start = 0;
    while start < n {
        let m = CHUNK.min(n - start);
        let toks: [Option<Token<'a>>; CHUNK] =
            std::array::from_fn(|i| (i < m).then(|| token(start + i)));
        let toks = ChunkTokens(&toks);
        let out = &mut out[start * d..(start + m) * d];
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: the CPU has AVX2 and FMA.
            unsafe { chunk_avx2(state, toks, m, out, ws) };
            start += m;
            continue;
        }
        chunk::<Portable>(state, toks, m, out, ws);
        start += m;
    }
}

/// The tokens of one chunk, the first `m` present.
#[derive(Clone, Copy)]
struct ChunkTokens<'t, 'a>(&'t [Option<Token<'a>>; CHUNK]);

impl<'t, 'a> ChunkTokens<'t, 'a> {
    #[inline(always)]
    fn get(self, i: usize) -> &'t Token<'a> {
        self.0[i].as_ref().expect("a token of the chunk")
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn chunk_avx2(
    state: &mut [f32],
    toks: ChunkTokens<'_, '_>,
    m: usize,
    out: &mut [f32],
    ws: &mut [f32],
) {
    chunk::<Avx2>(state, toks, m, out, ws)
}

#[inline(always)]
fn chunk<L: Lanes>(
    state: &mut [f32],
    toks: ChunkTokens<'_, '_>,
    m: usize,
    out: &mut [f32],
    ws: &mut [f32],
) {
    let d = toks.get(0).k.len();
    let (t_mat, rest) = ws.split_at_mut(CHUNK * CHUNK);
    let (aqk, rest) = rest.split_at_mut(CHUNK * CHUNK);
    let (u, rest) = rest.split_at_mut(CHUNK * d);
    let (w, rest) = rest.split_at_mut(CHUNK * d);
    let (cum, rest) = rest.split_at_mut(CHUNK);
    let (lrow, rest) = rest.split_at_mut(CHUNK);
    let (eg, rest) = rest.split_at_mut(CHUNK);
    let tail = &mut rest[..CHUNK];

    let mut acc = 0.0f32;
    for i in 0..m {
        acc += toks.get(i).g;
        cum[i] = acc;
        eg[i] = acc.exp();
    }
    // The decay between each token and those at or before it, e^(G_i - G_s).
    for i in 0..m {
        for s in 0..=i {
            aqk[i * CHUNK + s] = (cum[i] - cum[s]).exp();
        }
    }
    // T = (I + L)^-1 by forward substitution, row by row: T[i] = e_i - sum_(s<i) L[i][s] T[s].
    for i in 0..m {
        let ti = toks.get(i);
        for (s, l) in lrow[..i].iter_mut().enumerate() {
            *l = ti.b * L::dot(ti.k, toks.get(s).k) * aqk[i * CHUNK + s];
        }
        let (done, row) = t_mat.split_at_mut(i * CHUNK);
        let row = &mut row[..CHUNK];
        row[..=i].fill(0.0);
        row[i] = 1.0;
        for (s, &l) in lrow[..i].iter().enumerate() {
            L::axpy(&mut row[..=s], -l, &done[s * CHUNK..][..=s]);
        }
    }
    // U = T diag(b) V and W = T diag(b e^G) K.
    for i in 0..m {
        let (ui, wi) = (&mut u[i * d..][..d], &mut w[i * d..][..d]);
        ui.fill(0.0);
        wi.fill(0.0);
        for s in 0..=i {
            let (ts, tok) = (t_mat[i * CHUNK + s] * toks.get(s).b, toks.get(s));
            L::axpy(ui, ts, tok.v);
            L::axpy(wi, ts * eg[s], tok.k);
        }
    }
    // The within-chunk attention of each query to the keys at or before it.
    for i in 0..m {
        let ti = toks.get(i);
        for s in 0..=i {
            aqk[i * CHUNK + s] *= L::dot(ti.q, toks.get(s).k);
        }
    }
    // With the state as the chunk found it: U -= W S^T (the corrections), o_t = e^G_t S q_t.
    for (j, row) in state.chunks_exact(d).enumerate() {
        for i in 0..m {
            let (sw, sq) = L::dot2(row, &w[i * d..][..d], toks.get(i).q);
            u[i * d + j] -= sw;
            out[i * d + j] = eg[i] * sq;
        }
    }
    for i in 0..m {
        let o = &mut out[i * d..][..d];
        for s in 0..=i {
            L::axpy(o, aqk[i * CHUNK + s], &u[s * d..][..d]);
        }
    }
    // S = e^G_m S + sum_s e^(G_m - G_s) u_s k_s^T.
    let last = cum[m - 1];
    for (s, e) in tail[..m].iter_mut().enumerate() {
        *e = (last - cum[s]).exp();
    }
    for (j, row) in state.chunks_exact_mut(d).enumerate() {
        L::scale_add(row, eg[m - 1], u[j] * tail[0], toks.get(0).k);
        for s in 1..m {
            L::axpy(row, u[s * d + j] * tail[s], toks.get(s).k);
        }
    }
}

/// The vector loops the two forms are made of, portable or in AVX2 + FMA registers.
trait Lanes {
    /// `a . b`.
    fn dot(a: &[f32], b: &[f32]) -> f32;
    /// `(row . a, row . b)` in one pass over `row`.
    fn dot2(row: &[f32], a: &[f32], b: &[f32]) -> (f32, f32);
    /// `y += a x`.
    fn axpy(y: &mut [f32], a: f32, x: &[f32]);
    /// `y = s y + a x`.
    fn scale_add(y: &mut [f32], s: f32, a: f32, x: &[f32]);
}

/// Eight independent lanes in plain Rust, which the compiler vectorizes.
struct Portable;

impl Lanes for Portable {
    #[inline(always)]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0.0f32; 8];
        let (ac, at) = a.as_chunks::<8>();
        let (bc, bt) = b[..a.len()].as_chunks::<8>();
        for (x, y) in ac.iter().zip(bc) {
            for l in 0..8 {
                acc[l] += x[l] * y[l];
            }
        }
        let mut sum = lanes_sum(acc);
        for (x, y) in at.iter().zip(bt) {
            sum += x * y;
        }
        sum
    }
    #[inline(always)]
    fn dot2(row: &[f32], a: &[f32], b: &[f32]) -> (f32, f32) {
        let (mut acc_a, mut acc_b) = ([0.0f32; 8], [0.0f32; 8]);
        let (rc, rt) = row.as_chunks::<8>();
        let (ac, at) = a[..row.len()].as_chunks::<8>();
        let (bc, bt) = b[..row.len()].as_chunks::<8>();
        for ((r, x), y) in rc.iter().zip(ac).zip(bc) {
            for l in 0..8 {
                acc_a[l] += r[l] * x[l];
                acc_b[l] += r[l] * y[l];
            }
        }
        let (mut sa, mut sb) = (lanes_sum(acc_a), lanes_sum(acc_b));
        for ((r, x), y) in rt.iter().zip(at).zip(bt) {
            sa += r * x;
            sb += r * y;
        }
        (sa, sb)
    }
    #[inline(always)]
    fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y += a * x;
        }
    }
    #[inline(always)]
    fn scale_add(y: &mut [f32], s: f32, a: f32, x: &[f32]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y = s * *y + a * x;
        }
    }
}

/// AVX2 + FMA; only instantiated inside the `#[target_feature(enable = "avx2,fma")]` entry
/// points above, into which its bodies are inlined.
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2 {
    #[inline(always)]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        use std::arch::x86_64::*;
        let n = a.len().min(b.len());
        let full = n / 8 * 8;
        // SAFETY: every load is of 8 elements below `full <= len`; the caller runs on a CPU
        // with AVX2 and FMA (the entry points' target features).
        unsafe {
            let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i + 16 <= full {
                s0 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(a.as_ptr().add(i)),
                    _mm256_loadu_ps(b.as_ptr().add(i)),
                    s0,
                );
                s1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(a.as_ptr().add(i + 8)),
                    _mm256_loadu_ps(b.as_ptr().add(i + 8)),
                    s1,
                );
                i += 16;
            }
            if i < full {
                s0 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(a.as_ptr().add(i)),
                    _mm256_loadu_ps(b.as_ptr().add(i)),
                    s0,
                );
            }
            let mut sum = hsum(_mm256_add_ps(s0, s1));
            for j in full..n {
                sum += a[j] * b[j];
            }
            sum
        }
    }

    #[inline(always)]
    fn dot2(row: &[f32], a: &[f32], b: &[f32]) -> (f32, f32) {
        use std::arch::x86_64::*;
        let n = row.len().min(a.len()).min(b.len());
        let full = n / 8 * 8;
        // SAFETY: as in `dot`.
        unsafe {
            let (mut sa, mut sb) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i < full {
                let r = _mm256_loadu_ps(row.as_ptr().add(i));
                sa = _mm256_fmadd_ps(r, _mm256_loadu_ps(a.as_ptr().add(i)), sa);
                sb = _mm256_fmadd_ps(r, _mm256_loadu_ps(b.as_ptr().add(i)), sb);
                i += 8;
            }
            let (mut x, mut y) = (hsum(sa), hsum(sb));
            for j in full..n {
                x += row[j] * a[j];
                y += row[j] * b[j];
            }
            (x, y)
        }
    }

    #[inline(always)]
    fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
        use std::arch::x86_64::*;
        let n = y.len().min(x.len());
        let full = n / 8 * 8;
        // SAFETY: as in `dot`; the stores are to `y`, borrowed mutably.
        unsafe {
            let av = _mm256_set1_ps(a);
            let mut i = 0;
            while i < full {
                let p = y.as_mut_ptr().add(i);
                _mm256_storeu_ps(
                    p,
                    _mm256_fmadd_ps(av, _mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(p)),
                );
                i += 8;
            }
        }
        for j in full..n {
            y[j] += a * x[j];
        }
    }

    #[inline(always)]
    fn scale_add(y: &mut [f32], s: f32, a: f32, x: &[f32]) {
        use std::arch::x86_64::*;
        let n = y.len().min(x.len());
        let full = n / 8 * 8;
        // SAFETY: as in `axpy`.
        unsafe {
            let (sv, av) = (_mm256_set1_ps(s), _mm256_set1_ps(a));
            let mut i = 0;
            while i < full {
                let p = y.as_mut_ptr().add(i);
                let scaled = _mm256_mul_ps(sv, _mm256_loadu_ps(p));
                _mm256_storeu_ps(
                    p,
                    _mm256_fmadd_ps(av, _mm256_loadu_ps(x.as_ptr().add(i)), scaled),
                );
                i += 8;
            }
        }
        for j in full..n {
            y[j] = s * y[j] + a * x[j];
        }
    }
}

/// The sum of a register's eight lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY: the caller runs with AVX enabled.
    unsafe {
        let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)))
    }
}

/// The sum of [`Portable`]'s eight lanes, pairwise.
#[inline(always)]
fn lanes_sum(acc: [f32; 8]) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uniform values in `-1..1` from a fixed seed.
    fn noise(seed: u64, len: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn unit(v: &mut [f32]) {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
    }

    /// q, k, v (`n` rows of `d`), b and g (`n` each).
    type Inputs = (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>);

    /// `n` tokens of head size `d`: unit q and k, decays `exp(g)` in `0.37..1`.
    fn tokens(n: usize, d: usize) -> Inputs {
        let (mut q, mut k) = (noise(1, n * d), noise(2, n * d));
        q.chunks_exact_mut(d).for_each(unit);
        k.chunks_exact_mut(d).for_each(unit);
        let b = noise(4, n).iter().map(|x| 0.5 + 0.5 * x).collect();
        let g = noise(5, n).iter().map(|x| 0.5 * (x - 1.0)).collect();
        (q, k, noise(3, n * d), b, g)
    }

    /// The delta rule as written: `S *= a`, `S[j] += k b (v[j] - S[j].k)`, `o[j] = S[j].q`,
    /// in f64.
    fn reference(state: &mut [f64], q: &[f32], k: &[f32], v: &[f32], b: f32, g: f32) -> Vec<f64> {
        let d = k.len();
        let a = (g as f64).exp();
        let mut o = vec![0.0; d];
        for (j, row) in state.chunks_exact_mut(d).enumerate() {
            row.iter_mut().for_each(|x| *x *= a);
            let sk: f64 = row.iter().zip(k).map(|(x, &y)| x * y as f64).sum();
            let delta = (v[j] as f64 - sk) * b as f64;
            row.iter_mut()
                .zip(k)
                .for_each(|(x, &y)| *x += y as f64 * delta);
            o[j] = row.iter().zip(q).map(|(x, &y)| x * y as f64).sum();
        }
        o
    }

    fn max_diff(a: &[f32], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| (x as f64 - y).abs())
            .fold(0.0, f64::max)
    }

    /// Both forms against the rule as written, over several chunks (and a partial one),
    /// from a non-zero state, on both instruction sets where the CPU has AVX2.
    #[test]
    fn recurrent_and_chunked_forms_follow_the_rule() {
        for (n, d) in [(1, 16), (7, 32), (150, 32), (64, 128), (130, 20)] {
            let (q, k, v, b, g) = tokens(n, d);
            let start: Vec<f32> = noise(6, d * d).iter().map(|x| 0.3 * x).collect();
            let mut want_state: Vec<f64> = start.iter().map(|&x| x as f64).collect();
            let mut want_out = Vec::new();
            for t in 0..n {
                let r = t * d..(t + 1) * d;
                want_out.extend(reference(
                    &mut want_state,
                    &q[r.clone()],
                    &k[r.clone()],
                    &v[r],
                    b[t],
                    g[t],
                ));
            }
            let token = |t: usize| Token {
                q: &q[t * d..(t + 1) * d],
                k: &k[t * d..(t + 1) * d],
                v: &v[t * d..(t + 1) * d],
                b: b[t],
                g: g[t],
            };
            let simd_sets = [false, crate::simd::avx2_enabled()];
            for simd in simd_sets.into_iter().take(if simd_sets[1] { 2 } else { 1 }) {
                let (mut s1, mut o1) = (start.clone(), vec![0.0; n * d]);
                recurrent_on(simd, &mut s1, n, token, &mut o1);
                let (mut s2, mut o2) = (start.clone(), vec![0.0; n * d]);
                let mut ws = vec![f32::NAN; chunk_workspace_floats(d)];
                chunked_on(simd, &mut s2, n, token, &mut o2, &mut ws);
                for (form, s, o) in [("recurrent", &s1, &o1), ("chunked", &s2, &o2)] {
                    let (ds, dout) = (max_diff(s, &want_state), max_diff(o, &want_out));
                    assert!(
                        ds < 2e-4 && dout < 2e-4,
                        "{form} (simd {simd}) n={n} d={d}: state off by {ds}, output by {dout}"
                    );
                }
            }
        }
    }
}
