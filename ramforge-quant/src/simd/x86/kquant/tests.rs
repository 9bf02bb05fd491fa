//! The AVX2 kernels against the generated scalar references: the Q8_K quantizer bit for bit,
//! the dot products to f32 summation tolerance, the tiles against their own `vec_dot`.

use super::kernels;
use crate::dispatch::scalar_kernels;
use crate::formats::{self, q8_k};
use crate::kernel_table::{Dot, Kernels, Tile, ROWS, TILE, TILE_ROWS, UNPACKED_ROWS};
use crate::GgmlType;
use proptest::prelude::*;

/// The AVX2 kernels of `ty`; these tests exist to run them, so a CPU without AVX2 fails them.
fn avx2(ty: GgmlType) -> &'static Kernels {
    assert!(
        crate::isa::Isa::Avx2.is_available(),
        "the AVX2 kernel tests need a CPU with AVX2, FMA and F16C"
    );
    kernels(ty).expect("an AVX2 kernel table")
}

fn vec_dot_of(k: &Kernels) -> fn(&[u8], &[u8]) -> f32 {
    match k.dot {
        Dot::Quant { act, vec_dot } => {
            assert_eq!(act, GgmlType::Q8_K);
            vec_dot
        }
        Dot::Float(_) => panic!("a quantized type dots with quantized activations"),
    }
}

/// Deterministic pseudo-random numbers (splitmix64), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn floats(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.unit() * scale).collect()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn quantize_q8k_avx2(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0xAAu8; x.len() / 256 * 292];
    (avx2(GgmlType::Q8_K).quantize)(x, &mut out);
    out
}

fn quantize_q8k_reference(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / 256 * 292];
    q8_k::quantize_row(x, &mut out);
    out
}

fn assert_q8k_identical(x: &[f32], what: &str) {
    let (fast, slow) = (quantize_q8k_avx2(x), quantize_q8k_reference(x));
    if fast != slow {
        let at = fast.iter().zip(&slow).position(|(a, b)| a != b).unwrap();
        panic!(
            "{what}: Q8_K differs from the reference at byte {at} of {} ({} vs {})",
            fast.len(),
            fast[at],
            slow[at]
        );
    }
}

#[test]
fn q8k_quantizer_is_bit_identical_on_random_rows() {
    let mut rng = Rng(1);
    for exp in [-140, -126, -100, -30, -8, 0, 3, 20, 60, 100, 126] {
        let x = rng.floats(4 * 256, 2f32.powi(exp));
        assert_q8k_identical(&x, &format!("scale 2^{exp}"));
    }
}

#[test]
fn q8k_quantizer_is_bit_identical_on_edge_blocks() {
    let block = |f: &dyn Fn(usize) -> f32| -> Vec<f32> { (0..256).map(f).collect() };
    let cases: Vec<(&str, Vec<f32>)> = vec![
        ("zeros", vec![0.0; 256]),
        ("negative zeros", vec![-0.0; 256]),
        // max -127 gives iscale 1: every k + 0.5 is a rounding tie.
        (
            "ties",
            block(&|j| {
                if j == 0 {
                    -127.0
                } else {
                    (j % 254) as f32 - 126.5
                }
            }),
        ),
        (
            "ties, positive max",
            block(&|j| {
                if j == 5 {
                    127.0
                } else {
                    63.5 - (j % 128) as f32
                }
            }),
        ),
        // +amax and -amax: the first one decides the sign of d.
        (
            "equal magnitudes",
            block(&|j| if j % 2 == 0 { 3.0 } else { -3.0 }),
        ),
        (
            "equal magnitudes, negative first",
            block(&|j| if j % 2 == 0 { -3.0 } else { 3.0 }),
        ),
        (
            "one huge",
            block(&|j| if j == 200 { f32::MAX } else { 1.0 }),
        ),
        (
            "all huge",
            block(&|j| f32::MAX * if j % 3 == 0 { -1.0 } else { 0.999 }),
        ),
        ("tiny", block(&|j| f32::from_bits(j as u32 + 1))),
        (
            "tiny negative",
            block(&|j| -f32::from_bits(3 * j as u32 + 1)),
        ),
        (
            "smallest normal",
            block(&|j| f32::MIN_POSITIVE * (j as f32 - 100.0)),
        ),
        ("negative", block(&|j| -(j as f32) - 1.0)),
        ("one value", block(&|j| if j == 77 { -0.25 } else { 0.0 })),
        ("NaN", block(&|j| if j == 9 { f32::NAN } else { j as f32 })),
        (
            "infinity",
            block(&|j| if j == 31 { f32::INFINITY } else { -(j as f32) }),
        ),
        (
            "negative infinity",
            block(&|j| if j == 0 { f32::NEG_INFINITY } else { 1.0 }),
        ),
        ("all NaN", vec![f32::NAN; 256]),
        (
            "last element largest",
            block(&|j| if j == 255 { -9.0 } else { 1.0 }),
        ),
    ];
    for (what, x) in cases {
        assert_q8k_identical(&x, what);
    }
}

#[test]
fn q8k_quantizer_stores_the_block_sums() {
    let mut rng = Rng(2);
    let x = rng.floats(3 * 256, 5.0);
    let out = quantize_q8k_avx2(&x);
    for b in q8_k::blocks(&out) {
        for g in 0..16 {
            let sum: i16 = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
            assert_eq!(i16::from_le_bytes(b.bsums[g]), sum);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn q8k_quantizer_is_bit_identical_on_any_floats(
        x in prop::collection::vec(prop::num::f32::ANY, 512),
    ) {
        let (fast, slow) = (quantize_q8k_avx2(&x), quantize_q8k_reference(&x));
        prop_assert_eq!(fast, slow);
    }

    #[test]
    fn q8k_quantizer_is_bit_identical_on_scaled_floats(
        x in prop::collection::vec(-1.0f32..1.0, 256),
        exp in -149i32..127,
    ) {
        let x: Vec<f32> = x.iter().map(|v| v * 2f32.powi(exp)).collect();
        let (fast, slow) = (quantize_q8k_avx2(&x), quantize_q8k_reference(&x));
        prop_assert_eq!(fast, slow);
    }
}

/// What the dot tests need of a weight format.
struct Format {
    ty: GgmlType,
    /// Byte offsets of its f16 scales, which random raw blocks must keep finite.
    f16_fields: &'static [usize],
    /// `sum |scale * q * a| + |min * a|` over a row: the size of what the dot adds up.
    abs_terms: fn(&[u8], &[u8]) -> f64,
}

macro_rules! abs_terms {
    ($m:ident) => {
        |w: &[u8], a: &[u8]| -> f64 {
            let (mut q, mut aq) = ([0i8; 256], [0i8; 256]);
            let mut sum = 0f64;
            for (wb, ab) in formats::$m::blocks(w).iter().zip(q8_k::blocks(a)) {
                formats::$m::unpack(wb, &mut q);
                q8_k::unpack(ab, &mut aq);
                let da = q8_k::group_params(ab).0[0] as f64;
                let (s, m) = formats::$m::group_params(wb);
                for j in 0..256 {
                    let g = j / formats::$m::GROUP;
                    let w = (s[g] as f64 * q[j] as f64).abs() + (m[g] as f64).abs();
                    sum += w * (aq[j] as f64 * da).abs();
                }
            }
            sum
        }
    };
}

const FORMATS: [Format; 6] = [
    Format {
        ty: GgmlType::Q4_K,
        f16_fields: &[0, 2],
        abs_terms: abs_terms!(q4_k),
    },
    Format {
        ty: GgmlType::Q6_K,
        f16_fields: &[208],
        abs_terms: abs_terms!(q6_k),
    },
    Format {
        ty: GgmlType::IQ4_XS,
        f16_fields: &[0],
        abs_terms: abs_terms!(iq4_xs),
    },
    Format {
        ty: GgmlType::Q5_K,
        f16_fields: &[0, 2],
        abs_terms: abs_terms!(q5_k),
    },
    Format {
        ty: GgmlType::Q3_K,
        f16_fields: &[108],
        abs_terms: abs_terms!(q3_k),
    },
    Format {
        ty: GgmlType::Q2_K,
        f16_fields: &[80, 82],
        abs_terms: abs_terms!(q2_k),
    },
];

/// `blocks` random raw blocks of `f`, with every f16 scale made finite.
fn raw_row(f: &Format, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let size = f.ty.type_size();
    let mut w = rng.bytes(blocks * size);
    for b in w.chunks_exact_mut(size) {
        for &o in f.f16_fields {
            // Exponent 31 is infinity or NaN: drop its top bit.
            if b[o + 1] & 0x7C == 0x7C {
                b[o + 1] &= !0x40;
            }
        }
    }
    w
}

/// `blocks` blocks of `f` with every byte `fill` but the f16 scales, which are 0.5.
fn filled_row(f: &Format, blocks: usize, fill: u8) -> Vec<u8> {
    let mut w = vec![fill; blocks * f.ty.type_size()];
    for b in w.chunks_exact_mut(f.ty.type_size()) {
        for &o in f.f16_fields {
            b[o..o + 2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        }
    }
    w
}

/// A row quantized from random values by the generated quantizer.
fn quantized_row(ty: GgmlType, blocks: usize, scale: f32, rng: &mut Rng) -> Vec<u8> {
    let x = rng.floats(blocks * 256, scale);
    let mut w = vec![0u8; blocks * ty.type_size()];
    (scalar_kernels(ty).unwrap().quantize)(&x, &mut w);
    w
}

fn activations(blocks: usize, scale: f32, rng: &mut Rng) -> Vec<u8> {
    quantize_q8k_reference(&rng.floats(blocks * 256, scale))
}

fn assert_dot_matches(f: &Format, w: &[u8], a: &[u8], what: &str) {
    let fast = vec_dot_of(avx2(f.ty))(w, a);
    let slow = vec_dot_of(scalar_kernels(f.ty).unwrap())(w, a);
    let tol = 1e-5 * (f.abs_terms)(w, a) + 1e-30;
    assert!(
        ((fast - slow) as f64).abs() <= tol,
        "{} {what}: AVX2 {fast} vs reference {slow} (tolerance {tol})",
        f.ty
    );
}

#[test]
fn vec_dot_matches_the_reference_on_quantized_rows() {
    let mut rng = Rng(3);
    for f in &FORMATS {
        for blocks in [1, 2, 7, 16] {
            for (ws, xs) in [(1.0, 1.0), (1e-3, 50.0), (300.0, 1e-4)] {
                let w = quantized_row(f.ty, blocks, ws, &mut rng);
                let a = activations(blocks, xs, &mut rng);
                assert_dot_matches(f, &w, &a, &format!("{blocks} blocks, scales {ws} / {xs}"));
            }
        }
    }
}

#[test]
fn vec_dot_matches_the_reference_on_raw_blocks() {
    let mut rng = Rng(4);
    for f in &FORMATS {
        for blocks in [1, 3, 12] {
            for round in 0..20 {
                let w = raw_row(f, blocks, &mut rng);
                let a = activations(blocks, 1.0, &mut rng);
                assert_dot_matches(f, &w, &a, &format!("raw, {blocks} blocks, round {round}"));
            }
        }
    }
}

#[test]
fn vec_dot_of_extreme_quants_matches_the_reference() {
    // Every weight byte 0xFF or 0x00 (largest / smallest quants and scales) against
    // activations of +-127: the integer sums at their largest.
    for f in &FORMATS {
        for fill in [0x00u8, 0xFF, 0x80, 0x7F] {
            let w = filled_row(f, 4, fill);
            for x in [1.0f32, -1.0] {
                let a = quantize_q8k_reference(&vec![x; 4 * 256]);
                assert_dot_matches(f, &w, &a, &format!("bytes {fill:#x}, activations {x}"));
            }
        }
    }
}

#[test]
fn tiles_of_extreme_quants_equal_their_vec_dot() {
    // The largest integer sums (every quant and scale at its largest, activations of -128 and
    // 127): the folded tiles add two groups' `maddubs` pairs as i16 before their `madd`.
    for f in &FORMATS {
        let k = avx2(f.ty);
        for fill in [0xFFu8, 0x00, 0x80, 0x7F] {
            let rows: Vec<Vec<u8>> = (0..TILE_ROWS).map(|_| filled_row(f, 3, fill)).collect();
            let acts = [-128i8, 127, -127, -128].map(|q| q8k_row(3, 1.0, &move |_| q));
            let out = tile_rows_of(k, &rows, std::array::from_fn(|t| &acts[t][..]));
            for (r, w) in rows.iter().enumerate() {
                for (t, a) in acts.iter().enumerate() {
                    assert_eq!(
                        out[r][t],
                        vec_dot_of(k)(w, a),
                        "{} bytes {fill:#x} token {t}",
                        f.ty
                    );
                    assert_dot_matches(f, w, a, &format!("bytes {fill:#x}, token {t}"));
                }
            }
        }
    }
}

/// `k`'s prefill tile on `TILE_ROWS` equally long rows: the one-row kernel once per row, the
/// multi-row kernel on the rows back to back, or the unpacked kernel on the rows unpacked (in
/// pairs) with the activations arranged as the driver does. `out[r][t]`: row r, token t.
pub(in crate::simd::x86) fn tile_rows_of(
    k: &Kernels,
    rows: &[Vec<u8>],
    a: [&[u8]; TILE],
) -> Vec<[f32; TILE]> {
    assert_eq!(rows.len(), TILE_ROWS);
    match k.tile {
        Some(Tile::Quant(tile)) => rows.iter().map(|w| tile(w, a)).collect(),
        Some(Tile::QuantRows(tile)) => tile(&rows.concat(), a).to_vec(),
        Some(Tile::Unpacked(u)) => {
            let arranged: Vec<Vec<u8>> = a
                .iter()
                .map(|a| match u.arrange {
                    Some(arrange) => {
                        let mut out = vec![0x5Au8; a.len()];
                        arrange(a, &mut out);
                        out
                    }
                    None => a.to_vec(),
                })
                .collect();
            let a: [&[u8]; TILE] = std::array::from_fn(|t| &arranged[t][..]);
            rows.chunks_exact(UNPACKED_ROWS)
                .flat_map(|pair| {
                    let urow = u.row_bytes(pair[0].len());
                    let mut unpacked = vec![0xA5u8; UNPACKED_ROWS * urow];
                    for (w, out) in pair.iter().zip(unpacked.chunks_exact_mut(urow)) {
                        (u.unpack)(w, out);
                    }
                    (u.tile)(&unpacked, a)
                })
                .collect()
        }
        _ => panic!("no quantized tile"),
    }
}

#[test]
fn tiles_equal_their_vec_dot() {
    let mut rng = Rng(5);
    for f in &FORMATS {
        let k = avx2(f.ty);
        for blocks in [1, 5, 40, 41, 130] {
            let rows: Vec<Vec<u8>> = (0..TILE_ROWS)
                .map(|_| {
                    if blocks == 1 {
                        raw_row(f, blocks, &mut rng)
                    } else {
                        quantized_row(f.ty, blocks, 1.0, &mut rng)
                    }
                })
                .collect();
            let acts: Vec<Vec<u8>> = (0..TILE)
                .map(|t| activations(blocks, 0.5 + t as f32, &mut rng))
                .collect();
            let out = tile_rows_of(k, &rows, std::array::from_fn(|t| &acts[t][..]));
            for (r, w) in rows.iter().enumerate() {
                for (t, a) in acts.iter().enumerate() {
                    assert_eq!(out[r][t], vec_dot_of(k)(w, a), "{} row {r} token {t}", f.ty);
                    assert_dot_matches(f, w, a, &format!("tile row {r} token {t}"));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn vec_dot_matches_the_reference_on_any_row(
        which in 0usize..6,
        blocks in 1usize..5,
        seed in any::<u64>(),
        raw in any::<bool>(),
        wexp in -20i32..20,
        xexp in -20i32..20,
    ) {
        let f = &FORMATS[which];
        let mut rng = Rng(seed);
        let w = if raw {
            raw_row(f, blocks, &mut rng)
        } else {
            quantized_row(f.ty, blocks, 2f32.powi(wexp), &mut rng)
        };
        let a = activations(blocks, 2f32.powi(xexp), &mut rng);
        assert_dot_matches(f, &w, &a, "proptest");
    }
}

/// The matmul driver through the tiles: whole tiles and a remainder, against the generated
/// single-token reference.
#[test]
fn matmul_through_tiles_matches_the_reference() {
    let mut rng = Rng(6);
    let (rows, cols, n) = (3, 512, TILE + 2);
    for f in &FORMATS {
        let w = quantized_row(f.ty, rows * cols / 256, 1.0, &mut rng);
        let x = rng.floats(n * cols, 2.0);
        let mut y = vec![0f32; rows * n];
        crate::drivers::matmul(f.ty, &w, rows, cols, &x, n, &mut y).unwrap();
        let row = cols / 256 * f.ty.type_size();
        for t in 0..n {
            let a = quantize_q8k_reference(&x[t * cols..(t + 1) * cols]);
            for o in 0..rows {
                let wr = &w[o * row..(o + 1) * row];
                let slow = vec_dot_of(scalar_kernels(f.ty).unwrap())(wr, &a);
                let tol = 1e-5 * (f.abs_terms)(wr, &a) + 1e-30;
                let got = y[t * rows + o];
                assert!(
                    ((got - slow) as f64).abs() <= tol,
                    "{} token {t} row {o}: {got} vs {slow}",
                    f.ty
                );
            }
        }
    }
}

/// A Q8_K row of `blocks` blocks with scale `d` and quants `q(j)` (any i8, -128 included),
/// its bsums consistent with them.
fn q8k_row(blocks: usize, d: f32, q: &dyn Fn(usize) -> i8) -> Vec<u8> {
    let mut out = vec![0u8; blocks * 292];
    for (b, block) in out.chunks_exact_mut(292).enumerate() {
        block[..4].copy_from_slice(&d.to_le_bytes());
        for g in 0..16 {
            let mut sum = 0i16;
            for l in 0..16 {
                let v = q(256 * b + 16 * g + l);
                block[4 + 16 * g + l] = v as u8;
                sum += v as i16;
            }
            block[260 + 2 * g..262 + 2 * g].copy_from_slice(&sum.to_le_bytes());
        }
    }
    out
}

/// `ROWS` weight rows back to back through the type's `rows` kernel, each against its own
/// `vec_dot`: the same bits (NaN and infinities included).
fn assert_rows_equal_vec_dot(f: &Format, w: &[u8], a: &[u8], what: &str) {
    let k = avx2(f.ty);
    let rows = k.rows.unwrap_or_else(|| panic!("{}: no rows kernel", f.ty));
    let out = rows(w, a);
    let row = w.len() / ROWS;
    for (o, got) in out.iter().enumerate() {
        let want = vec_dot_of(k)(&w[o * row..(o + 1) * row], a);
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{} {what} row {o}: rows {got} vs vec_dot {want}",
            f.ty
        );
    }
}

#[test]
fn rows_equal_their_vec_dot_on_random_rows() {
    let mut rng = Rng(7);
    for f in &FORMATS {
        for blocks in [1, 2, 6, 9] {
            for round in 0..4 {
                let w: Vec<u8> = (0..ROWS)
                    .flat_map(|o| {
                        if (o + round) % 2 == 0 {
                            raw_row(f, blocks, &mut rng)
                        } else {
                            quantized_row(f.ty, blocks, 1.0 + o as f32, &mut rng)
                        }
                    })
                    .collect();
                let a = activations(blocks, 0.5 + round as f32, &mut rng);
                assert_rows_equal_vec_dot(f, &w, &a, &format!("{blocks} blocks, round {round}"));
            }
        }
    }
}

#[test]
fn rows_equal_their_vec_dot_on_edge_values() {
    let mut rng = Rng(8);
    // f16 scales: largest finite, smallest subnormal, negative, zero.
    let scales = [0x7BFFu16, 0x0001, 0xC000, 0x0000];
    // Activations: all -128, all 127, alternating extremes, random bytes (-128 included).
    let acts: [(&str, Vec<u8>); 4] = [
        ("all -128", q8k_row(3, 1.0, &|_| -128)),
        ("all 127", q8k_row(3, 3e38, &|_| 127)),
        (
            "alternating",
            q8k_row(3, -1e-30, &|j| if j % 3 == 0 { -128 } else { 127 }),
        ),
        ("random", {
            let q = rng.bytes(3 * 256);
            q8k_row(3, 0.25, &|j| q[j] as i8)
        }),
    ];
    for f in &FORMATS {
        let size = f.ty.type_size();
        for fill in [0x00u8, 0xFF, 0x80, 0x7F, 0x55] {
            let mut w = vec![fill; ROWS * 3 * size];
            for (n, b) in w.chunks_exact_mut(size).enumerate() {
                for &o in f.f16_fields {
                    b[o..o + 2].copy_from_slice(&scales[n % scales.len()].to_le_bytes());
                }
            }
            for (what, a) in &acts {
                assert_rows_equal_vec_dot(f, &w, a, &format!("bytes {fill:#x}, {what}"));
            }
        }
    }
}

#[test]
fn dots_of_minus_128_activations_match_the_reference() {
    // Q8_K's quantizer never makes -128, but a block may hold it: every kernel multiplies it
    // exactly (no sign flip of -128 wraps).
    let mut rng = Rng(9);
    for f in &FORMATS {
        for blocks in [1, 4] {
            let w = quantized_row(f.ty, blocks, 1.0, &mut rng);
            let q = rng.bytes(blocks * 256);
            for (what, a) in [
                ("all -128", q8k_row(blocks, 0.01, &|_| -128)),
                (
                    "mixed",
                    q8k_row(blocks, 0.01, &|j| {
                        if j % 2 == 0 {
                            -128
                        } else {
                            q[j] as i8
                        }
                    }),
                ),
            ] {
                assert_dot_matches(f, &w, &a, &format!("{blocks} blocks, {what}"));
                let rows = vec![w.clone(); TILE_ROWS];
                let out = tile_rows_of(avx2(f.ty), &rows, [&a[..]; TILE]);
                let want = vec_dot_of(avx2(f.ty))(&w, &a);
                assert!(
                    out.iter().flatten().all(|v| v.to_bits() == want.to_bits()),
                    "{} tile {what}",
                    f.ty
                );
            }
        }
    }
}

/// The decode path of the matmul driver (one token, groups of `ROWS` rows and a remainder)
/// against the generated reference, row by row.
#[test]
fn matvec_through_rows_matches_the_reference() {
    let mut rng = Rng(10);
    let (rows, cols) = (2 * ROWS + 3, 768);
    for f in &FORMATS {
        let w = quantized_row(f.ty, rows * cols / 256, 1.0, &mut rng);
        let x = rng.floats(cols, 2.0);
        let mut y = vec![0f32; rows];
        crate::drivers::matvec(f.ty, &w, rows, cols, &x, &mut y).unwrap();
        let a = quantize_q8k_reference(&x);
        let row = cols / 256 * f.ty.type_size();
        for (o, got) in y.iter().enumerate() {
            let wr = &w[o * row..(o + 1) * row];
            let fast = vec_dot_of(avx2(f.ty))(wr, &a);
            assert_eq!(got.to_bits(), fast.to_bits(), "{} row {o}", f.ty);
            let slow = vec_dot_of(scalar_kernels(f.ty).unwrap())(wr, &a);
            let tol = 1e-5 * (f.abs_terms)(wr, &a) + 1e-30;
            assert!(
                ((got - slow) as f64).abs() <= tol,
                "{} row {o}: {got} vs {slow}",
                f.ty
            );
        }
    }
}

/// A kernel table's lookup by type.
type Table = fn(GgmlType) -> Option<&'static Kernels>;

/// The entries of `all` whose instruction set this CPU has, each named; says which it lacks
/// (their comparisons of `what` do not run: an AVX2-only machine still runs every AVX2 test).
fn available<T>(
    all: Vec<(crate::isa::Isa, &'static str, T)>,
    what: &str,
) -> Vec<(&'static str, T)> {
    all.into_iter()
        .filter(|(isa, name, _)| {
            let here = isa.is_available();
            if !here {
                eprintln!("no {name} on this CPU: its {what} were not compared");
            }
            here
        })
        .map(|(_, name, entry)| (name, entry))
        .collect()
}

/// The VNNI tables of this CPU (AVX-VNNI, AVX512-VNNI), each named.
fn vnni_tables() -> Vec<(&'static str, Table)> {
    use crate::isa::Isa;
    available(
        vec![
            (Isa::AvxVnni, "AVX-VNNI", super::vnni_kernels as Table),
            (Isa::Avx512Vnni, "AVX512-VNNI", super::vnni512_kernels),
        ],
        "K-quant kernels",
    )
}

/// `TILE_ROWS` rows against `TILE` activation rows through the AVX2 table and a VNNI one: every
/// `vec_dot`, `rows` and tile result the same bits.
fn assert_vnni_equals_avx2(
    vnni: &Kernels,
    name: &str,
    f: &Format,
    rows: &[Vec<u8>],
    acts: &[Vec<u8>],
    what: &str,
) {
    let a2 = avx2(f.ty);
    let acts_ref: [&[u8]; TILE] = std::array::from_fn(|t| &acts[t][..]);
    let (ta, tv) = (
        tile_rows_of(a2, rows, acts_ref),
        tile_rows_of(vnni, rows, acts_ref),
    );
    let packed = rows[..ROWS].concat();
    for (t, a) in acts.iter().enumerate() {
        let ra = (a2.rows.unwrap())(&packed, a);
        let rv = (vnni.rows.unwrap())(&packed, a);
        for (r, w) in rows.iter().enumerate() {
            let (da, dv) = (vec_dot_of(a2)(w, a), vec_dot_of(vnni)(w, a));
            assert_eq!(
                dv.to_bits(),
                da.to_bits(),
                "{name} {} {what}: vec_dot row {r} token {t}",
                f.ty
            );
            assert_eq!(
                tv[r][t].to_bits(),
                ta[r][t].to_bits(),
                "{name} {} {what}: tile row {r} token {t}",
                f.ty
            );
            if r < ROWS {
                assert_eq!(
                    rv[r].to_bits(),
                    ra[r].to_bits(),
                    "{name} {} {what}: rows row {r} token {t}",
                    f.ty
                );
            }
        }
    }
}

/// Every K-quant kernel of the VNNI tables (`vpdpwssd` for `madd` + `add`) returns bit for bit
/// what its AVX2 form does, so the instruction set never changes a result: on quantized and
/// raw blocks, at the extreme quants and scales, and against activations of -128 and 127.
#[test]
fn vnni_kernels_equal_the_avx2_kernels() {
    for f in &FORMATS {
        assert!(
            super::vnni_kernels(f.ty).is_some(),
            "{}: AVX-VNNI kernels",
            f.ty
        );
        assert!(
            super::vnni512_kernels(f.ty).is_some(),
            "{}: AVX512-VNNI kernels",
            f.ty
        );
    }
    let mut rng = Rng(11);
    for (name, table) in vnni_tables() {
        for f in &FORMATS {
            let vnni = table(f.ty).unwrap();
            for blocks in [1, 3, 8] {
                let quantized: Vec<Vec<u8>> = (0..TILE_ROWS)
                    .map(|r| quantized_row(f.ty, blocks, 0.5 + r as f32, &mut rng))
                    .collect();
                let raw: Vec<Vec<u8>> = (0..TILE_ROWS)
                    .map(|_| raw_row(f, blocks, &mut rng))
                    .collect();
                let filled: Vec<Vec<u8>> = [0x00u8, 0xFF, 0x80, 0x7F, 0x55, 0xAA, 0x0F, 0xF0]
                    .iter()
                    .map(|&fill| filled_row(f, blocks, fill))
                    .collect();
                let q = rng.bytes(blocks * 256);
                let random_acts: Vec<Vec<u8>> = (0..TILE)
                    .map(|t| activations(blocks, 0.5 + t as f32, &mut rng))
                    .collect();
                let extreme_acts: Vec<Vec<u8>> = vec![
                    q8k_row(blocks, 0.01, &|_| -128),
                    q8k_row(blocks, 0.01, &|_| 127),
                    q8k_row(blocks, -0.5, &|j| if j % 3 == 0 { -128 } else { 127 }),
                    q8k_row(blocks, 0.25, &|j| q[j] as i8),
                ];
                for (w, wname) in [
                    (&quantized, "quantized"),
                    (&raw, "raw"),
                    (&filled, "filled"),
                ] {
                    for (a, aname) in [(&random_acts, "random"), (&extreme_acts, "extreme")] {
                        let what = format!("{blocks} blocks, {wname} weights, {aname} activations");
                        assert_vnni_equals_avx2(vnni, name, f, w, a, &what);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn vnni_kernels_equal_the_avx2_kernels_on_any_rows(
        which in 0usize..6,
        blocks in 1usize..6,
        seed in any::<u64>(),
    ) {
        let f = &FORMATS[which];
        let mut rng = Rng(seed);
        let rows: Vec<Vec<u8>> = (0..TILE_ROWS).map(|_| raw_row(f, blocks, &mut rng)).collect();
        let acts: Vec<Vec<u8>> = (0..TILE).map(|_| {
            let q = rng.bytes(blocks * 256);
            q8k_row(blocks, 0.125, &|j| q[j] as i8)
        }).collect();
        for (name, table) in vnni_tables() {
            assert_vnni_equals_avx2(table(f.ty).unwrap(), name, f, &rows, &acts, "proptest");
        }
    }
}

/// The arranged layout (Q4_K, Q6_K) of the AVX2 table and of each VNNI table this CPU has:
/// rows rewritten by its `arrange` and activations by its `arranged_acts` give, through its
/// `vec_dot`, `rows` and tile, the bits of the AVX2 kernels on the file's rows; and its
/// `dequantize` the reference's numbers.
#[test]
fn arranged_layouts_give_the_file_layouts_bits() {
    use crate::isa::Isa;
    // AVX2 always (the kernel tests need it: `avx2` below asserts it), VNNI where present.
    let mut tables = vec![("AVX2", Isa::Avx2)];
    tables.extend(available(
        vec![
            (Isa::AvxVnni, "AVX-VNNI", Isa::AvxVnni),
            (Isa::Avx512Vnni, "AVX512-VNNI", Isa::Avx512Vnni),
        ],
        "arranged layouts",
    ));
    let mut rng = Rng(23);
    for (name, isa) in tables {
        for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
            let f = FORMATS.iter().find(|f| f.ty == ty).unwrap();
            let resident = super::resident(isa, ty)
                .unwrap_or_else(|| panic!("{name} {ty}: an arranged layout"));
            let (k, a2) = (&resident.kernels, avx2(ty));
            let arrange_acts = k.arranged_acts.expect("arranged activations");
            for blocks in [1, 3] {
                let mut rows: Vec<Vec<u8>> = (0..TILE_ROWS / 2)
                    .map(|r| quantized_row(ty, blocks, 0.5 + r as f32, &mut rng))
                    .collect();
                rows.extend((0..TILE_ROWS / 2).map(|_| raw_row(f, blocks, &mut rng)));
                let arranged: Vec<Vec<u8>> = rows
                    .iter()
                    .map(|w| {
                        let mut wa = w.clone();
                        (resident.arrange)(&mut wa);
                        wa
                    })
                    .collect();
                let q = rng.bytes(blocks * 256);
                let mut acts: Vec<Vec<u8>> = (0..TILE - 2)
                    .map(|t| activations(blocks, 0.5 + t as f32, &mut rng))
                    .collect();
                acts.push(q8k_row(blocks, -0.5, &|j| {
                    if j % 3 == 0 {
                        -128
                    } else {
                        127
                    }
                }));
                acts.push(q8k_row(blocks, 0.25, &|j| q[j] as i8));
                let what = |s: &str| format!("{name} {ty} {blocks} blocks: {s}");
                for (w, wa) in rows.iter().zip(&arranged) {
                    let (mut file, mut laid) = (vec![0f32; blocks * 256], vec![0f32; blocks * 256]);
                    (scalar_kernels(ty).unwrap().dequantize)(w, &mut file);
                    (k.dequantize)(wa, &mut laid);
                    assert_eq!(bits(&laid), bits(&file), "{}", what("dequantized"));
                }
                let acts_ref: [&[u8]; TILE] = std::array::from_fn(|t| &acts[t][..]);
                let (want, got) = (
                    tile_rows_of(a2, &rows, acts_ref),
                    tile_rows_of(k, &arranged, acts_ref),
                );
                let (packed, packed_arranged) = (rows[..ROWS].concat(), arranged[..ROWS].concat());
                for (t, a) in acts.iter().enumerate() {
                    let mut aa = vec![0u8; a.len()];
                    arrange_acts(a, &mut aa);
                    let (ra, rv) = (
                        (a2.rows.unwrap())(&packed, a),
                        (k.rows.unwrap())(&packed_arranged, &aa),
                    );
                    assert_eq!(
                        bits(&rv),
                        bits(&ra),
                        "{}",
                        what(&format!("rows, token {t}"))
                    );
                    for (r, (w, wa)) in rows.iter().zip(&arranged).enumerate() {
                        let (d, dv) = (vec_dot_of(a2)(w, a), vec_dot_of(k)(wa, &aa));
                        assert_eq!(
                            dv.to_bits(),
                            d.to_bits(),
                            "{}",
                            what(&format!("vec_dot row {r} token {t}"))
                        );
                        assert_eq!(
                            got[r][t].to_bits(),
                            want[r][t].to_bits(),
                            "{}",
                            what(&format!("tile row {r} token {t}"))
                        );
                    }
                }
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
