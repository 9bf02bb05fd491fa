//! The low-bit AVX2 kernels against the generated scalar references: every dot to f32
//! summation tolerance of the reference and of the exact product of the dequantized rows, on
//! quantized rows, raw random blocks (any bit pattern with a finite scale is a valid block),
//! filled blocks and activations of -128; the tiles and `rows` kernels bit for bit against
//! their own `vec_dot`; the matvec and matmul drivers through them.

use super::kernels;
use crate::dispatch::scalar_kernels;
use crate::formats::{self, q8_k};
use crate::isa::Isa;
use crate::kernel_table::{Dot, Kernels, ROWS, TILE, TILE_ROWS};
use crate::simd::x86::kquant::tests::tile_rows_of;
use crate::GgmlType;
use proptest::prelude::*;

/// The AVX2 kernels of `ty`; these tests exist to run them, so a CPU without AVX2 fails them.
fn avx2(ty: GgmlType) -> &'static Kernels {
    assert!(
        Isa::Avx2.is_available(),
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

/// What the tests need of a weight format.
struct Format {
    ty: GgmlType,
    /// Makes a block's f16 scale finite (exponent 31 is infinity or NaN: drop its top bit).
    fix_scale: fn(&mut [u8]),
    /// Sets a block's f16 scale.
    set_scale: fn(&mut [u8], half::f16),
    /// `sum |scale * q * a|` over a row: the size of what the dot adds up.
    abs_terms: fn(&[u8], &[u8]) -> f64,
}

/// The f16 at `o` made finite.
fn finite_f16_at(b: &mut [u8], o: usize) {
    if b[o + 1] & 0x7C == 0x7C {
        b[o + 1] &= !0x40;
    }
}

/// IQ1_M's f16 scale, spread over the top nibbles of its four u16 `scales` (bits 4n .. 4n + 4
/// in the one at `48 + 2n`): exponent bit 14 is bit 6 of byte 55.
fn iq1m_d(b: &[u8]) -> u16 {
    (0..4).fold(0u16, |d, n| d | (((b[49 + 2 * n] >> 4) as u16) << (4 * n)))
}

fn iq1m_fix(b: &mut [u8]) {
    if iq1m_d(b) & 0x7C00 == 0x7C00 {
        b[55] &= !0x40;
    }
}

fn iq1m_set(b: &mut [u8], d: half::f16) {
    let bits = d.to_bits();
    for n in 0..4 {
        b[49 + 2 * n] = (b[49 + 2 * n] & 0x0F) | ((((bits >> (4 * n)) & 0xF) as u8) << 4);
    }
}

macro_rules! format_entry {
    ($ty:ident, $m:ident, d at $o:expr) => {
        Format {
            ty: GgmlType::$ty,
            fix_scale: |b| finite_f16_at(b, $o),
            set_scale: |b, d| b[$o..$o + 2].copy_from_slice(&d.to_le_bytes()),
            abs_terms: abs_terms!($m),
        }
    };
    ($ty:ident, $m:ident, fix $fix:expr, set $set:expr) => {
        Format {
            ty: GgmlType::$ty,
            fix_scale: $fix,
            set_scale: $set,
            abs_terms: abs_terms!($m),
        }
    };
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
                let s = formats::$m::group_params(wb).0;
                for j in 0..256 {
                    let w = s[j / formats::$m::GROUP] as f64 * q[j] as f64;
                    sum += (w * aq[j] as f64 * da).abs();
                }
            }
            sum
        }
    };
}

const FORMATS: [Format; 9] = [
    format_entry!(IQ2_XXS, iq2_xxs, d at 0),
    format_entry!(IQ3_XXS, iq3_xxs, d at 0),
    format_entry!(IQ2_XS, iq2_xs, d at 0),
    format_entry!(IQ2_S, iq2_s, d at 0),
    format_entry!(IQ3_S, iq3_s, d at 0),
    format_entry!(IQ1_S, iq1_s, d at 0),
    format_entry!(IQ1_M, iq1_m, fix iq1m_fix, set iq1m_set),
    format_entry!(TQ2_0, tq2_0, d at 64),
    format_entry!(TQ1_0, tq1_0, d at 52),
];

/// `blocks` random raw blocks of `f` with a finite scale.
fn raw_row(f: &Format, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let size = f.ty.type_size();
    let mut w = rng.bytes(blocks * size);
    for b in w.chunks_exact_mut(size) {
        (f.fix_scale)(b);
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

fn quantize_q8k(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / 256 * q8_k::BYTES];
    q8_k::quantize_row(x, &mut out);
    out
}

fn activations(blocks: usize, scale: f32, rng: &mut Rng) -> Vec<u8> {
    quantize_q8k(&rng.floats(blocks * 256, scale))
}

/// A Q8_K row of `blocks` blocks with scale `d` and quants `q(j)` (any i8, -128 included),
/// its bsums consistent with them.
fn q8k_row(blocks: usize, d: f32, q: &dyn Fn(usize) -> i8) -> Vec<u8> {
    let mut out = vec![0u8; blocks * q8_k::BYTES];
    for (b, block) in out.chunks_exact_mut(q8_k::BYTES).enumerate() {
        block[..4].copy_from_slice(&d.to_le_bytes());
        for g in 0..16 {
            let mut sum = 0i16;
            for l in 0..16 {
                let v = q(256 * b + 16 * g + l);
                block[q8_k::OFFSET_QS + 16 * g + l] = v as u8;
                sum += v as i16;
            }
            let at = q8_k::OFFSET_BSUMS + 2 * g;
            block[at..at + 2].copy_from_slice(&sum.to_le_bytes());
        }
    }
    out
}

/// The exact (f64) dot of the dequantized rows.
fn exact_dot(ty: GgmlType, w: &[u8], a: &[u8]) -> f64 {
    let n = w.len() / ty.type_size() * 256;
    let (mut wd, mut ad) = (vec![0f32; n], vec![0f32; n]);
    (scalar_kernels(ty).unwrap().dequantize)(w, &mut wd);
    q8_k::dequantize_row(a, &mut ad);
    wd.iter().zip(&ad).map(|(x, y)| *x as f64 * *y as f64).sum()
}

/// The AVX2 `vec_dot` of `w` and `a` within `1e-5 * sum |terms|` of the reference and of
/// the exact product (the reference scales per group, the kernel per block: f32 rounding).
fn assert_dot_matches(f: &Format, w: &[u8], a: &[u8], what: &str) {
    let fast = vec_dot_of(avx2(f.ty))(w, a);
    let slow = vec_dot_of(scalar_kernels(f.ty).unwrap())(w, a);
    let tol = 1e-5 * (f.abs_terms)(w, a) + 1e-30;
    assert!(
        ((fast - slow) as f64).abs() <= tol,
        "{} {what}: AVX2 {fast} vs reference {slow} (tolerance {tol})",
        f.ty
    );
    let exact = exact_dot(f.ty, w, a);
    assert!(
        (fast as f64 - exact).abs() <= tol,
        "{} {what}: AVX2 {fast} vs exact {exact} (tolerance {tol})",
        f.ty
    );
}

#[test]
fn every_low_bit_format_has_avx2_and_vnni_kernels() {
    for ty in FORMATS.iter().map(|f| f.ty).chain([GgmlType::NVFP4]) {
        let k = avx2(ty);
        assert!(k.rows.is_some() && k.tile.is_some(), "{ty}");
        for isa in [Isa::AvxVnni, Isa::Avx512Vnni] {
            let v = crate::simd::kernels(isa, ty).expect("VNNI kernels or the AVX2 ones");
            // NVFP4 has no `madd` + `add` pair for VNNI to fuse: its table is the AVX2 one.
            assert_eq!(std::ptr::eq(v, k), ty == GgmlType::NVFP4, "{isa} {ty}");
            assert!(v.rows.is_some() && v.tile.is_some(), "{isa} {ty}");
        }
    }
}

/// Every codebook format's VNNI kernels (`vpdpwssd` for `madd` + `add`; in the AVX512 table a
/// masked subtraction for the sign bits too) return bit for bit what its AVX2 ones do, so the instruction set never changes a result: `vec_dot`, `rows` and the
/// tile, on raw, quantized and filled blocks against random and extreme activations.
#[test]
fn vnni_kernels_equal_the_avx2_kernels() {
    let mut rng = Rng(31);
    for isa in [Isa::AvxVnni, Isa::Avx512Vnni] {
        if !isa.is_available() {
            eprintln!("no {isa} on this CPU: its low-bit kernels were not compared");
            continue;
        }
        for f in &FORMATS {
            let (a2, vn) = (avx2(f.ty), crate::simd::kernels(isa, f.ty).unwrap());
            for blocks in [1, 3, 6] {
                let q = rng.bytes(blocks * 256);
                let acts: Vec<Vec<u8>> = vec![
                    activations(blocks, 1.0, &mut rng),
                    q8k_row(blocks, 0.01, &|_| -128),
                    q8k_row(blocks, -0.5, &|j| if j % 3 == 0 { -128 } else { 127 }),
                    q8k_row(blocks, 0.25, &|j| q[j] as i8),
                ];
                let rows: Vec<Vec<u8>> = (0..TILE_ROWS)
                    .map(|r| match r % 3 {
                        0 => raw_row(f, blocks, &mut rng),
                        1 => quantized_row(f.ty, blocks, 1.0 + r as f32, &mut rng),
                        _ => {
                            let fill = [0xFFu8, 0x55, 0x00][r / 3];
                            let mut w = vec![fill; blocks * f.ty.type_size()];
                            for b in w.chunks_exact_mut(f.ty.type_size()) {
                                (f.set_scale)(b, half::f16::from_f32(0.5));
                            }
                            w
                        }
                    })
                    .collect();
                let acts_ref: [&[u8]; TILE] = std::array::from_fn(|t| &acts[t][..]);
                let (ta, tv) = (
                    tile_rows_of(a2, &rows, acts_ref),
                    tile_rows_of(vn, &rows, acts_ref),
                );
                let packed = rows[..ROWS].concat();
                for (t, a) in acts.iter().enumerate() {
                    let (ra, rv) = (
                        (a2.rows.unwrap())(&packed, a),
                        (vn.rows.unwrap())(&packed, a),
                    );
                    for (r, w) in rows.iter().enumerate() {
                        let what = format!("{isa} {} {blocks} blocks, row {r} token {t}", f.ty);
                        assert_eq!(
                            vec_dot_of(vn)(w, a).to_bits(),
                            vec_dot_of(a2)(w, a).to_bits(),
                            "{what}: vec_dot"
                        );
                        assert_eq!(tv[r][t].to_bits(), ta[r][t].to_bits(), "{what}: tile");
                        if r < ROWS {
                            assert_eq!(rv[r].to_bits(), ra[r].to_bits(), "{what}: rows");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn vec_dot_matches_the_reference_on_quantized_rows() {
    let mut rng = Rng(3);
    for f in &FORMATS {
        for blocks in [1, 2, 7] {
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
fn vec_dot_of_filled_blocks_matches_the_reference() {
    // Every weight byte one pattern (largest and smallest indices, scales, sign patterns)
    // against activations of +-127 and -128: the integer sums at their largest.
    for f in &FORMATS {
        for fill in [0x00u8, 0xFF, 0x80, 0x7F, 0x55, 0xAA] {
            let mut w = vec![fill; 4 * f.ty.type_size()];
            for b in w.chunks_exact_mut(f.ty.type_size()) {
                (f.set_scale)(b, half::f16::from_f32(0.5));
            }
            for q in [127i8, -127, -128] {
                let a = q8k_row(4, 0.01, &|_| q);
                assert_dot_matches(f, &w, &a, &format!("bytes {fill:#x}, activations {q}"));
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
            let a = q8k_row(blocks, 0.01, &|j| {
                if j % 2 == 0 {
                    -128
                } else {
                    q[j] as i8
                }
            });
            assert_dot_matches(f, &w, &a, &format!("{blocks} blocks, mixed -128"));
        }
    }
}

#[test]
fn tiles_and_rows_equal_their_vec_dot() {
    let mut rng = Rng(5);
    for f in &FORMATS {
        let k = avx2(f.ty);
        for blocks in [1, 3, 5] {
            let rows: Vec<Vec<u8>> = (0..ROWS.max(TILE_ROWS))
                .map(|r| {
                    if r % 2 == 0 {
                        raw_row(f, blocks, &mut rng)
                    } else {
                        quantized_row(f.ty, blocks, 1.0 + r as f32, &mut rng)
                    }
                })
                .collect();
            let mut acts: Vec<Vec<u8>> = (0..TILE)
                .map(|t| activations(blocks, 0.5 + t as f32, &mut rng))
                .collect();
            acts[TILE - 1] = q8k_row(blocks, 0.25, &|j| if j % 3 == 0 { -128 } else { 127 });
            let out = tile_rows_of(k, &rows[..TILE_ROWS], std::array::from_fn(|t| &acts[t][..]));
            for (t, a) in acts.iter().enumerate() {
                let by_rows = k.rows.unwrap()(&rows[..ROWS].concat(), a);
                for (r, w) in rows.iter().enumerate() {
                    let want = vec_dot_of(k)(w, a);
                    if r < TILE_ROWS {
                        assert_eq!(out[r][t].to_bits(), want.to_bits(), "{} tile {r} {t}", f.ty);
                    }
                    if r < ROWS {
                        assert_eq!(
                            by_rows[r].to_bits(),
                            want.to_bits(),
                            "{} rows {r} {t}",
                            f.ty
                        );
                    }
                    assert_dot_matches(f, w, a, &format!("row {r} token {t}"));
                }
            }
        }
    }
}

/// The decode and prefill paths of the drivers (groups of `ROWS` rows and a remainder, whole
/// tiles and a remainder) against the generated reference, row by row.
#[test]
fn matvec_and_matmul_through_the_kernels_match_the_reference() {
    let mut rng = Rng(10);
    let (rows, cols, n) = (2 * ROWS + 3, 512, TILE + 2);
    for f in &FORMATS {
        let w = quantized_row(f.ty, rows * cols / 256, 1.0, &mut rng);
        let x = rng.floats(n * cols, 2.0);
        let mut y = vec![0f32; rows * n];
        crate::drivers::matmul(f.ty, &w, rows, cols, &x, n, &mut y).unwrap();
        let mut y1 = vec![0f32; rows];
        crate::drivers::matvec(f.ty, &w, rows, cols, &x[..cols], &mut y1).unwrap();
        let row = cols / 256 * f.ty.type_size();
        for t in 0..n {
            let a = quantize_q8k(&x[t * cols..(t + 1) * cols]);
            for o in 0..rows {
                let wr = &w[o * row..(o + 1) * row];
                let fast = vec_dot_of(avx2(f.ty))(wr, &a);
                if t == 0 {
                    assert_eq!(y1[o].to_bits(), fast.to_bits(), "{} matvec row {o}", f.ty);
                }
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn vec_dot_matches_the_reference_on_any_row(
        which in 0usize..FORMATS.len(),
        blocks in 1usize..5,
        seed in any::<u64>(),
        raw in any::<bool>(),
        // The TQ formats' scale is the block maximum: past 2^15 the quantizer's f16 overflows to an
        // infinite scale, which is not a valid block.
        wexp in -20i32..15,
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

// NVFP4, against Q8_0 activations.

fn nvfp4_vec_dot(k: &Kernels) -> fn(&[u8], &[u8]) -> f32 {
    match k.dot {
        Dot::Quant { act, vec_dot } => {
            assert_eq!(act, GgmlType::Q8_0);
            vec_dot
        }
        Dot::Float(_) => panic!("a quantized type dots with quantized activations"),
    }
}

fn nvfp4_quantized(blocks: usize, scale: f32, rng: &mut Rng) -> Vec<u8> {
    let x = rng.floats(blocks * 64, scale);
    let mut w = vec![0u8; blocks * formats::nvfp4::BYTES];
    formats::nvfp4::quantize_row(&x, &mut w);
    w
}

/// A Q8_0 row for `blocks` NVFP4 blocks: quantized from random values, or with scale `d` and
/// quants `q(j)` (any i8, -128 included).
fn q8_0_acts(blocks: usize, scale: f32, rng: &mut Rng) -> Vec<u8> {
    let x = rng.floats(blocks * 64, scale);
    let mut a = vec![0u8; 2 * blocks * formats::q8_0::BYTES];
    formats::q8_0::quantize_row(&x, &mut a);
    a
}

fn q8_0_row(blocks: usize, d: f32, q: &dyn Fn(usize) -> i8) -> Vec<u8> {
    let bytes = formats::q8_0::BYTES;
    let mut out = vec![0u8; 2 * blocks * bytes];
    for (b, block) in out.chunks_exact_mut(bytes).enumerate() {
        let at = formats::q8_0::OFFSET_D;
        block[at..at + 2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        for l in 0..32 {
            block[formats::q8_0::OFFSET_QS + l] = q(32 * b + l) as u8;
        }
    }
    out
}

/// `sum |scale * q * a|` of an NVFP4 row with a Q8_0 row.
fn nvfp4_abs_terms(w: &[u8], a: &[u8]) -> f64 {
    let n = w.len() / formats::nvfp4::BYTES * 64;
    let (mut wd, mut ad) = (vec![0f32; n], vec![0f32; n]);
    formats::nvfp4::dequantize_row(w, &mut wd);
    formats::q8_0::dequantize_row(a, &mut ad);
    wd.iter()
        .zip(&ad)
        .map(|(x, y)| (*x as f64 * *y as f64).abs())
        .sum()
}

fn assert_nvfp4_dot_matches(w: &[u8], a: &[u8], what: &str) {
    let fast = nvfp4_vec_dot(avx2(GgmlType::NVFP4))(w, a);
    let slow = formats::nvfp4::vec_dot(w, a);
    let n = w.len() / formats::nvfp4::BYTES * 64;
    let (mut wd, mut ad) = (vec![0f32; n], vec![0f32; n]);
    formats::nvfp4::dequantize_row(w, &mut wd);
    formats::q8_0::dequantize_row(a, &mut ad);
    let exact: f64 = wd.iter().zip(&ad).map(|(x, y)| *x as f64 * *y as f64).sum();
    let tol = 1e-5 * nvfp4_abs_terms(w, a) + 1e-30;
    for (name, want) in [("reference", slow as f64), ("exact", exact)] {
        assert!(
            (fast as f64 - want).abs() <= tol,
            "NVFP4 {what}: AVX2 {fast} vs {name} {want} (tolerance {tol})"
        );
    }
}

#[test]
fn nvfp4_scale_table_equals_the_reference() {
    for x in 0..=255u8 {
        let want = crate::spec_support::ue4m3_half(x);
        assert_eq!(
            super::nvfp4::UE4M3_HALF[x as usize].to_bits(),
            want.to_bits(),
            "{x:#x}"
        );
    }
}

#[test]
fn nvfp4_dots_match_the_reference() {
    let mut rng = Rng(11);
    for blocks in [1, 2, 7, 16] {
        for (ws, xs) in [(1.0, 1.0), (1e-3, 50.0), (300.0, 1e-4)] {
            let w = nvfp4_quantized(blocks, ws, &mut rng);
            let a = q8_0_acts(blocks, xs, &mut rng);
            assert_nvfp4_dot_matches(&w, &a, &format!("{blocks} blocks, {ws} / {xs}"));
        }
        for round in 0..20 {
            // Raw blocks: every scale byte and nibble is valid.
            let w = rng.bytes(blocks * formats::nvfp4::BYTES);
            let a = q8_0_acts(blocks, 1.0, &mut rng);
            assert_nvfp4_dot_matches(&w, &a, &format!("raw, {blocks} blocks, round {round}"));
            let q = rng.bytes(2 * blocks * 32);
            let a = q8_0_row(blocks, 0.01, &|j| {
                if j % 2 == 0 {
                    -128
                } else {
                    q[j] as i8
                }
            });
            assert_nvfp4_dot_matches(&w, &a, &format!("raw, -128, {blocks} blocks, {round}"));
        }
    }
}

#[test]
fn nvfp4_tiles_and_rows_equal_their_vec_dot() {
    let mut rng = Rng(12);
    let k = avx2(GgmlType::NVFP4);
    for blocks in [1, 3, 6] {
        let rows: Vec<Vec<u8>> = (0..ROWS.max(TILE_ROWS))
            .map(|r| {
                if r % 2 == 0 {
                    rng.bytes(blocks * formats::nvfp4::BYTES)
                } else {
                    nvfp4_quantized(blocks, 1.0 + r as f32, &mut rng)
                }
            })
            .collect();
        let mut acts: Vec<Vec<u8>> = (0..TILE)
            .map(|t| q8_0_acts(blocks, 0.5 + t as f32, &mut rng))
            .collect();
        acts[TILE - 1] = q8_0_row(blocks, 0.25, &|j| if j % 3 == 0 { -128 } else { 127 });
        let out = tile_rows_of(k, &rows[..TILE_ROWS], std::array::from_fn(|t| &acts[t][..]));
        for (t, a) in acts.iter().enumerate() {
            let by_rows = k.rows.unwrap()(&rows[..ROWS].concat(), a);
            for (r, w) in rows.iter().enumerate() {
                let want = nvfp4_vec_dot(k)(w, a);
                assert_eq!(out[r][t].to_bits(), want.to_bits(), "tile {r} {t}");
                assert_eq!(by_rows[r].to_bits(), want.to_bits(), "rows {r} {t}");
                assert_nvfp4_dot_matches(w, a, &format!("row {r} token {t}"));
            }
        }
    }
}

#[test]
fn nvfp4_matvec_and_matmul_match_the_reference() {
    let mut rng = Rng(13);
    let (rows, cols, n) = (2 * ROWS + 3, 256, TILE + 2);
    let w = nvfp4_quantized(rows * cols / 64, 1.0, &mut rng);
    let x = rng.floats(n * cols, 2.0);
    let mut y = vec![0f32; rows * n];
    crate::drivers::matmul(GgmlType::NVFP4, &w, rows, cols, &x, n, &mut y).unwrap();
    let mut y1 = vec![0f32; rows];
    crate::drivers::matvec(GgmlType::NVFP4, &w, rows, cols, &x[..cols], &mut y1).unwrap();
    let row = cols / 64 * formats::nvfp4::BYTES;
    for t in 0..n {
        let mut a = vec![0u8; cols / 32 * formats::q8_0::BYTES];
        formats::q8_0::quantize_row(&x[t * cols..(t + 1) * cols], &mut a);
        for o in 0..rows {
            let wr = &w[o * row..(o + 1) * row];
            let fast = nvfp4_vec_dot(avx2(GgmlType::NVFP4))(wr, &a);
            if t == 0 {
                assert_eq!(y1[o].to_bits(), fast.to_bits(), "matvec row {o}");
            }
            let slow = formats::nvfp4::vec_dot(wr, &a);
            let tol = 1e-5 * nvfp4_abs_terms(wr, &a) + 1e-30;
            let got = y[t * rows + o];
            assert!(
                ((got - slow) as f64).abs() <= tol,
                "token {t} row {o}: {got} vs {slow}"
            );
        }
    }
}
