//! The AVX2 kernels against the generated scalar reference: the activation quantizers bit
//! for bit, the block and float dots to f32 summation tolerance (they sum in a different
//! order than the reference), every rows kernel and one-row tile bit for bit against its
//! own single-row, single-token dot, and the multi-row tiles to the same tolerance.

use crate::dispatch::{kernels_for, scalar_kernels};
use crate::isa::Isa;
use crate::kernel_table::{Dot, Kernels, Rows, Tile, ROWS, TILE, TILE_ROWS};
use crate::GgmlType;
use half::f16;
use proptest::prelude::*;
use std::cell::Cell;

const BLOCK_TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::IQ4_NL,
    GgmlType::MXFP4,
];
const FLOAT_TYPES: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];
/// Row lengths in blocks: one, a partial group of four, whole groups, and long rows.
const BLOCK_COUNTS: [usize; 10] = [1, 2, 3, 4, 5, 7, 8, 9, 33, 48];

/// Fails the test on a CPU without the instructions these kernels need: a kernel test that
/// returned early there would report a check it never made as passed.
fn require_avx2() {
    assert!(
        Isa::Avx2.is_available(),
        "the AVX2 kernel tests need a CPU with AVX2, FMA and F16C"
    );
}

/// The instruction sets with VNNI tables, each tested against the AVX2 one.
const VNNI_ISAS: [Isa; 2] = [Isa::AvxVnni, Isa::Avx512Vnni];

thread_local! {
    /// The VNNI table [`fast`] hands out instead of the AVX2 one (set by [`on_vnni`] for the
    /// thread of one test).
    static VNNI: Cell<Option<Isa>> = const { Cell::new(None) };
}

/// The AVX2 kernels of `ty` (a VNNI table's inside [`on_vnni`]).
fn fast(ty: GgmlType) -> &'static Kernels {
    if let Some(isa) = VNNI.with(Cell::get) {
        return kernels_for(isa, ty).expect("a VNNI kernel for every listed type");
    }
    super::kernels(ty).expect("an AVX2 kernel for every listed type")
}

/// The VNNI instruction sets this CPU has; says which it lacks (their tests do not run:
/// AVX2-only machines still run every AVX2 test).
fn available_vnni() -> Vec<Isa> {
    VNNI_ISAS
        .into_iter()
        .filter(|isa| {
            let here = isa.is_available();
            if !here {
                eprintln!("no {isa} on this CPU: its kernel tests did not run");
            }
            here
        })
        .collect()
}

/// Runs `f` once per VNNI instruction set of this CPU, with [`fast`] handing out its table.
fn on_vnni(f: impl Fn()) {
    for isa in available_vnni() {
        VNNI.with(|v| v.set(Some(isa)));
        f();
        VNNI.with(|v| v.set(None));
    }
}

fn scalar(ty: GgmlType) -> &'static Kernels {
    scalar_kernels(ty).expect("a reference kernel for every listed type")
}

type VecDot = fn(&[u8], &[u8]) -> f32;

fn quant_dot(k: &Kernels) -> (GgmlType, VecDot) {
    match k.dot {
        Dot::Quant { act, vec_dot } => (act, vec_dot),
        Dot::Float(_) => panic!("a block format dots with quantized activations"),
    }
}

/// `rows[r]` (equally long) dotted with `acts[t]` by `k`'s tile: `out[r][t]`, and whether
/// each result must equal the `vec_dot` bit for bit (the one-row tiles) or only within
/// summation tolerance (the multi-row tiles, which sum each pair's lanes in another order).
fn quant_tile(
    k: &Kernels,
    rows: [&[u8]; TILE_ROWS],
    acts: [&[u8]; TILE],
) -> ([[f32; TILE]; TILE_ROWS], bool) {
    match k.tile {
        Some(Tile::Quant(f)) => (rows.map(|w| f(w, acts)), true),
        Some(Tile::QuantRows(f)) => (f(&rows.concat(), acts), false),
        _ => panic!("a block format has a quantized tile"),
    }
}

fn quant_rows(k: &Kernels) -> Rows {
    k.rows.expect("a block format has a rows kernel")
}

/// splitmix64: a small deterministic generator (the crate has no `rand` dependency).
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
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// A finite f16, anywhere in its range (subnormals included).
    fn finite_f16(&mut self) -> [u8; 2] {
        loop {
            let h = f16::from_bits(self.next() as u16);
            if h.is_finite() {
                return h.to_le_bytes();
            }
        }
    }
    /// Random values with a per-block magnitude between 2^-8 and 2^8 and an offset, so that
    /// blocks with a min see both signs and one-sided ranges.
    fn values(&mut self, n: usize) -> Vec<f32> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n.div_ceil(32) {
            let scale = 2f32.powi((self.next() % 17) as i32 - 8);
            let offset = self.unit() * scale;
            for _ in 0..32 {
                v.push(self.unit() * scale + offset);
            }
        }
        v.truncate(n);
        v
    }
}

/// Offsets of the f16 fields (scale, min or sum) of a block of `ty`.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 => &[0, 2],
        // Its scale is the E8M0 byte `e` (2^(e - 128), levels doubled).
        GgmlType::MXFP4 => &[],
        _ => &[0],
    }
}

/// Random raw blocks of `ty` with finite f16 fields. For the activation types the quants are
/// kept in [-127, 127], the range the quantizers produce.
fn raw_blocks(rng: &mut Rng, ty: GgmlType, blocks: usize, activation: bool) -> Vec<u8> {
    let bytes = ty.type_size();
    let mut row = rng.bytes(blocks * bytes);
    for b in row.chunks_exact_mut(bytes) {
        for &off in f16_fields(ty) {
            b[off..off + 2].copy_from_slice(&rng.finite_f16());
        }
        if ty == GgmlType::MXFP4 {
            // Exponents 2^-128 (subnormal) .. 2^31: far larger ones overflow the dot to an
            // infinity in both kernels, which then cannot be compared.
            b[0] %= 160;
        }
        if activation {
            let qs = bytes - 32;
            for q in &mut b[qs..] {
                if *q == 0x80 {
                    *q = 0x81;
                }
            }
        }
    }
    row
}

/// Quantized with the reference quantizer.
fn quantized(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; ty.row_size(x.len()).unwrap()];
    (scalar(ty).quantize)(x, &mut out);
    out
}

fn dequantized(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / ty.type_size() * ty.block_size();
    let mut out = vec![0f32; n];
    (scalar(ty).dequantize)(bytes, &mut out);
    out
}

/// `sum_i |terms|` of the dot of weight row `w` (type `ty`) with activation row `a`: each
/// product split into its scale part and its min part, so that cancellation between the two
/// does not shrink the bound below the rounding the dot really does.
fn abs_terms(ty: GgmlType, act: GgmlType, w: &[u8], a: &[u8]) -> f64 {
    let (wd, ad) = (dequantized(ty, w), dequantized(act, a));
    let has_min = matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1);
    let mut sum = 0f64;
    for (b, (wb, ab)) in w
        .chunks_exact(ty.type_size())
        .zip(wd.chunks_exact(32).zip(ad.chunks_exact(32)))
    {
        let m = if has_min {
            f16::from_le_bytes([b[2], b[3]]).to_f64()
        } else {
            0.0
        };
        for (x, y) in wb.iter().zip(ab) {
            sum += ((*x as f64 - m).abs() + m.abs()) * (*y as f64).abs();
        }
    }
    sum
}

fn exact_dot(ty: GgmlType, act: GgmlType, w: &[u8], a: &[u8]) -> f64 {
    let (wd, ad) = (dequantized(ty, w), dequantized(act, a));
    wd.iter().zip(&ad).map(|(x, y)| *x as f64 * *y as f64).sum()
}

/// The AVX2 `vec_dot` of `w` with each activation row lies within f32 summation tolerance of
/// the reference and of the exact product; so does the tile's, on `w` and on `w` with its
/// blocks rotated (the other rows of a multi-row tile), and a one-row tile equals the
/// `vec_dot` bit for bit.
///
/// The tolerance is `1e-5 * sum_i |terms|` with every product split into its scale and min
/// parts ([`abs_terms`]): the kernel rounds per-lane partial sums of a block (and the
/// reference whole blocks), and each of those is bounded by the element-wise magnitudes,
/// not by the block's (possibly cancelling) `|da * dw * idot|`. Rows here have at most 48
/// blocks, so either order's rounding stays below `60 * 2^-24 < 1e-5` of that sum.
fn check_block_rows(ty: GgmlType, w: &[u8], acts: [&[u8]; TILE], what: &str) {
    let (act, fast_dot) = quant_dot(fast(ty));
    let (ref_act, ref_dot) = quant_dot(scalar(ty));
    assert_eq!(act, ref_act, "{ty}: activation type");
    let bytes = ty.type_size();
    let rows: Vec<Vec<u8>> = (0..TILE_ROWS)
        .map(|r| {
            let split = (r * bytes) % w.len().max(1);
            [&w[split..], &w[..split]].concat()
        })
        .collect();
    let (tiled, bitwise) = quant_tile(fast(ty), std::array::from_fn(|r| &rows[r][..]), acts);
    for (r, w) in rows.iter().enumerate() {
        for (t, a) in acts.iter().enumerate() {
            let got = fast_dot(w, a);
            let want = ref_dot(w, a);
            let tol = 1e-5 * abs_terms(ty, act, w, a) + 1e-30;
            let exact = exact_dot(ty, act, w, a);
            for (name, v) in [("vec_dot", got), ("tile", tiled[r][t])] {
                assert!(
                    (v as f64 - want as f64).abs() <= tol,
                    "{ty} {what}: {name} row {r} token {t}: {v} vs reference {want} (tol {tol})"
                );
                assert!(
                    (v as f64 - exact).abs() <= tol,
                    "{ty} {what}: {name} row {r} token {t}: {v} vs exact {exact} (tol {tol})"
                );
            }
            if bitwise {
                assert_eq!(
                    tiled[r][t].to_bits(),
                    got.to_bits(),
                    "{ty} {what}: tile row {r} token {t}"
                );
            }
        }
    }
}

/// The rows kernel on [`ROWS`] weight rows (`rows[r]`, equally long) and activation row
/// `a`: row r's result equals `vec_dot(rows[r], a)` bit for bit, and lies within summation
/// tolerance of the reference.
fn check_rows_kernel(ty: GgmlType, rows: &[Vec<u8>], a: &[u8], what: &str) {
    assert_eq!(rows.len(), ROWS);
    let (act, fast_dot) = quant_dot(fast(ty));
    let ref_dot = quant_dot(scalar(ty)).1;
    let packed: Vec<u8> = rows.concat();
    let got = quant_rows(fast(ty))(&packed, a);
    for (r, w) in rows.iter().enumerate() {
        assert_eq!(
            got[r].to_bits(),
            fast_dot(w, a).to_bits(),
            "{ty} {what}: rows lane {r} vs vec_dot"
        );
        let want = ref_dot(w, a);
        let tol = 1e-5 * abs_terms(ty, act, w, a) + 1e-30;
        assert!(
            (got[r] as f64 - want as f64).abs() <= tol,
            "{ty} {what}: rows lane {r}: {} vs reference {want} (tol {tol})",
            got[r]
        );
    }
}

#[test]
fn rows_kernels_equal_vec_dot_and_match_the_reference() {
    require_avx2();
    let mut rng = Rng(19);
    for ty in BLOCK_TYPES {
        let act = quant_dot(fast(ty)).0;
        for nb in BLOCK_COUNTS {
            let n = nb * 32;
            let quantized_w: Vec<Vec<u8>> =
                (0..ROWS).map(|_| quantized(ty, &rng.values(n))).collect();
            let raw_w: Vec<Vec<u8>> = (0..ROWS)
                .map(|_| raw_blocks(&mut rng, ty, nb, false))
                .collect();
            let quantized_a = quantized(act, &rng.values(n));
            let raw_a = raw_blocks(&mut rng, act, nb, true);
            for (w, wname) in [(&quantized_w, "quantized"), (&raw_w, "raw")] {
                for (a, aname) in [(&quantized_a, "quantized"), (&raw_a, "raw")] {
                    let what = format!("{nb} blocks, {wname} w, {aname} a");
                    check_rows_kernel(ty, w, a, &what);
                }
            }
        }
    }
}

#[test]
fn rows_kernels_at_extreme_quants() {
    require_avx2();
    // Every row a different extreme pattern, so each lane sees its own worst case.
    let fills = [0x00u8, 0xFF, 0x80, 0x7F, 0x88, 0x77, 0x0F, 0xF0];
    for ty in BLOCK_TYPES {
        let act = quant_dot(fast(ty)).0;
        for nb in [1, 2, 9] {
            let rows: Vec<Vec<u8>> = fills
                .iter()
                .map(|&f| filled_blocks(ty, nb, f, 1.5))
                .collect();
            for afill in [0x7Fu8, 0x81, 0x01, 0xFF] {
                let a = filled_blocks(act, nb, afill, 0.25);
                check_rows_kernel(ty, &rows, &a, &format!("{nb} blocks, a {afill:#04x}"));
            }
        }
    }
}

#[test]
fn block_dots_and_tiles_match_the_reference() {
    require_avx2();
    let mut rng = Rng(7);
    for ty in BLOCK_TYPES {
        let act = quant_dot(fast(ty)).0;
        for nb in BLOCK_COUNTS {
            let n = nb * 32;
            let quantized_w = quantized(ty, &rng.values(n));
            let raw_w = raw_blocks(&mut rng, ty, nb, false);
            let quantized_a: Vec<Vec<u8>> =
                (0..TILE).map(|_| quantized(act, &rng.values(n))).collect();
            let raw_a: Vec<Vec<u8>> = (0..TILE)
                .map(|_| raw_blocks(&mut rng, act, nb, true))
                .collect();
            for (w, wname) in [(&quantized_w, "quantized"), (&raw_w, "raw")] {
                for (a, aname) in [(&quantized_a, "quantized"), (&raw_a, "raw")] {
                    let acts = std::array::from_fn(|t| a[t].as_slice());
                    check_block_rows(ty, w, acts, &format!("{nb} blocks, {wname} w, {aname} a"));
                }
            }
        }
    }
}

/// Blocks whose quant bytes are all `fill` (f16 fields set to `scale`): the extremes of every
/// format's quant range, where the i16 pair sums (and Q4_1 / Q5_1's `hadd` of them) come
/// closest to overflowing.
fn filled_blocks(ty: GgmlType, blocks: usize, fill: u8, scale: f32) -> Vec<u8> {
    let mut row = vec![fill; blocks * ty.type_size()];
    for b in row.chunks_exact_mut(ty.type_size()) {
        for &off in f16_fields(ty) {
            b[off..off + 2].copy_from_slice(&f16::from_f32(scale).to_le_bytes());
        }
        if ty == GgmlType::MXFP4 {
            // The power of two nearest `scale`.
            b[0] = (scale.log2().round() as i32 + 128) as u8;
        }
    }
    row
}

#[test]
fn block_dots_match_the_reference_at_extreme_quants() {
    require_avx2();
    for ty in BLOCK_TYPES {
        let act = quant_dot(fast(ty)).0;
        for nb in [1, 4, 5] {
            // 0x00 / 0xFF / 0x80 / 0x7F / 0x88 / 0x77: every quant at its minimum, its
            // maximum, or the extreme nibble and high-bit patterns.
            for wfill in [0x00u8, 0xFF, 0x80, 0x7F, 0x88, 0x77] {
                let w = filled_blocks(ty, nb, wfill, 1.5);
                for afill in [0x7Fu8, 0x81, 0x01, 0xFF] {
                    let a = filled_blocks(act, nb, afill, 0.25);
                    let what = format!("{nb} blocks, w {wfill:#04x}, a {afill:#04x}");
                    check_block_rows(ty, &w, [&a, &a, &a, &a], &what);
                }
            }
        }
    }
}

#[test]
fn quantizers_are_bit_identical_on_random_rows() {
    require_avx2();
    let mut rng = Rng(11);
    for ty in [GgmlType::Q8_0, GgmlType::Q8_1] {
        for nb in BLOCK_COUNTS {
            let x = rng.values(nb * 32);
            assert_quantizer_matches(ty, &x);
        }
    }
}

fn assert_quantizer_matches(ty: GgmlType, x: &[f32]) {
    let want = quantized(ty, x);
    let mut got = vec![0xA5u8; want.len()];
    (fast(ty).quantize)(x, &mut got);
    assert_eq!(got, want, "{ty} quantizer on {x:?}");
}

/// Blocks built to hit every branch of the reference quantizer.
fn edge_blocks() -> Vec<[f32; 32]> {
    let mut out = Vec::new();
    let from = |f: &dyn Fn(usize) -> f32| -> [f32; 32] { std::array::from_fn(f) };
    out.push([0.0; 32]);
    out.push([-0.0; 32]);
    out.push([3.5; 32]);
    out.push([-3.5; 32]);
    // amax 127 makes d = 1, so x * id lands exactly on halves: ties round away from zero.
    out.push(from(&|j| {
        if j == 0 {
            127.0
        } else {
            (j as f32 - 16.0) + 0.5
        }
    }));
    out.push(from(&|j| {
        if j == 0 {
            -127.0
        } else {
            -(j as f32) * 2.5
        }
    }));
    // Values just below and above a half after scaling.
    out.push(from(&|j| {
        if j == 0 {
            127.0
        } else {
            let h = (j as f32) + 0.5;
            if j % 2 == 0 {
                f32::from_bits(h.to_bits() - 1)
            } else {
                f32::from_bits(h.to_bits() + 1)
            }
        }
    }));
    // Huge values: d overflows f16, s overflows f16 too.
    out.push(from(&|j| (j as f32 - 15.5) * 1e37));
    out.push(from(&|j| if j == 3 { f32::MAX } else { -1e30 }));
    out.push(from(&|j| if j == 3 { -f32::MAX } else { 7.0 }));
    // Tiny values: d underflows to an f16 subnormal or zero; 1/d overflows to infinity.
    out.push(from(&|j| (j as f32 - 15.5) * 1e-39));
    out.push(from(&|j| (j as f32) * 1e-40));
    out.push(from(&|j| if j == 0 { 1e-45 } else { 0.0 }));
    out.push(from(&|j| if j % 3 == 0 { -1e-38 } else { 1e-39 }));
    out.push(from(&|j| (j as f32 - 15.5) * 1e-8));
    // Infinities and NaNs: the reference skips NaN in its max and turns NaN quants into 0.
    out.push(from(&|j| if j == 5 { f32::INFINITY } else { j as f32 }));
    out.push(from(&|j| if j == 5 { f32::NEG_INFINITY } else { 1.0 }));
    out.push(from(&|j| if j == 9 { f32::NAN } else { j as f32 - 3.0 }));
    out.push([f32::NAN; 32]);
    out.push(from(&|j| if j % 2 == 0 { f32::NAN } else { f32::INFINITY }));
    // Mixed signs, all negative.
    out.push(from(&|j| -(j as f32) - 1.0));
    out.push(from(&|j| if j % 2 == 0 { 1e3 } else { -1e-3 }));
    out
}

#[test]
fn quantizers_are_bit_identical_on_edge_inputs() {
    require_avx2();
    let blocks = edge_blocks();
    for ty in [GgmlType::Q8_0, GgmlType::Q8_1] {
        for b in &blocks {
            assert_quantizer_matches(ty, b);
        }
        let row: Vec<f32> = blocks.iter().flatten().copied().collect();
        assert_quantizer_matches(ty, &row);
    }
}

/// The float dot of `w` (type `ty`) with each row of `x` is within summation tolerance of
/// the reference; the multi-row tile (of `w` and its rotations) equals the dot bit for bit.
fn check_float_rows(ty: GgmlType, w: &[u8], x: [&[f32]; TILE]) {
    let (Dot::Float(fast_dot), Dot::Float(ref_dot)) = (fast(ty).dot, scalar(ty).dot) else {
        panic!("{ty}: float dots");
    };
    let Some(Tile::FloatRows(fast_tile)) = fast(ty).tile else {
        panic!("{ty}: float tile");
    };
    let rows: Vec<Vec<u8>> = (0..TILE_ROWS)
        .map(|r| {
            let mut row = w.to_vec();
            row.rotate_left(r * ty.type_size() % w.len().max(1));
            row
        })
        .collect();
    let tiled = fast_tile(&rows.concat(), x);
    for (r, row) in rows.iter().enumerate() {
        for (t, xs) in x.iter().enumerate() {
            assert_eq!(
                tiled[r][t].to_bits(),
                fast_dot(row, xs).to_bits(),
                "{ty} n={}: tile row {r} token {t}",
                xs.len()
            );
        }
    }
    let wd = dequantized(ty, w);
    for xs in x.iter() {
        let got = fast_dot(w, xs);
        let want = ref_dot(w, xs);
        let sum_abs: f64 = wd
            .iter()
            .zip(*xs)
            .map(|(a, b)| (*a as f64 * *b as f64).abs())
            .sum();
        let tol = 1e-5 * sum_abs + 1e-30;
        assert!(
            ((got - want) as f64).abs() <= tol,
            "{ty} n={}: {got} vs reference {want} (tol {tol})",
            xs.len()
        );
    }
}

#[test]
fn float_dots_and_tiles_match_the_reference() {
    require_avx2();
    let mut rng = Rng(13);
    for ty in FLOAT_TYPES {
        for n in [
            1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 576, 1000, 1536, 2056, 2063,
        ] {
            let w = quantized(ty, &rng.values(n));
            let xs: Vec<Vec<f32>> = (0..TILE).map(|_| rng.values(n)).collect();
            check_float_rows(ty, &w, std::array::from_fn(|t| xs[t].as_slice()));
            // Raw bytes: finite f16 / bf16 / f32 patterns.
            let mut raw = rng.bytes(n * ty.type_size());
            for e in raw.chunks_exact_mut(ty.type_size()) {
                if ty == GgmlType::F16 {
                    e.copy_from_slice(&rng.finite_f16());
                } else {
                    // Clear the exponent's top bit: finite, magnitude below 2^1.
                    e[e.len() - 1] &= 0xBF;
                }
            }
            check_float_rows(ty, &raw, std::array::from_fn(|t| xs[t].as_slice()));
        }
    }
}

#[test]
fn f16_dequantize_equals_the_reference() {
    require_avx2();
    let mut rng = Rng(17);
    for n in [1, 8, 9, 100, 1024] {
        let src = rng.bytes(2 * n);
        let (mut got, mut want) = (vec![0f32; n], vec![0f32; n]);
        (fast(GgmlType::F16).dequantize)(&src, &mut got);
        (scalar(GgmlType::F16).dequantize)(&src, &mut want);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{g} vs {w}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn quantizers_are_bit_identical_on_any_bits(bits in prop::collection::vec(any::<u32>(), 64)) {
        require_avx2();
        let x: Vec<f32> = bits.iter().map(|b| f32::from_bits(*b)).collect();
        for ty in [GgmlType::Q8_0, GgmlType::Q8_1] {
            let want = quantized(ty, &x);
            let mut got = vec![0u8; want.len()];
            (fast(ty).quantize)(&x, &mut got);
            prop_assert_eq!(got, want, "{}", ty);
        }
    }

    #[test]
    fn quantizers_are_bit_identical_near_halves(
        amax in 1e-30f32..1e30,
        steps in prop::collection::vec(-254i32..=254, 31),
        nudge in prop::collection::vec(-2i32..=2, 31),
    ) {
        require_avx2();
        // Values near (k + 1/2) * d, the quantizer's rounding boundaries.
        let d = amax / 127.0;
        let mut x = vec![amax];
        for (s, u) in steps.iter().zip(&nudge) {
            let v = *s as f32 * 0.5 * d;
            x.push(f32::from_bits((v.to_bits() as i32 + u) as u32));
        }
        for ty in [GgmlType::Q8_0, GgmlType::Q8_1] {
            let want = quantized(ty, &x);
            let mut got = vec![0u8; want.len()];
            (fast(ty).quantize)(&x, &mut got);
            prop_assert_eq!(got, want, "{}", ty);
        }
    }

    #[test]
    fn block_dots_match_the_reference_on_raw_blocks(seed in any::<u64>(), nb in 1usize..24, t in 0usize..BLOCK_TYPES.len()) {
        require_avx2();
        let ty = BLOCK_TYPES[t];
        let act = quant_dot(fast(ty)).0;
        let mut rng = Rng(seed);
        let w = raw_blocks(&mut rng, ty, nb, false);
        let a: Vec<Vec<u8>> = (0..TILE).map(|_| raw_blocks(&mut rng, act, nb, true)).collect();
        check_block_rows(ty, &w, std::array::from_fn(|t| a[t].as_slice()), "proptest");
    }

    #[test]
    fn rows_kernels_equal_vec_dot_on_raw_blocks(seed in any::<u64>(), nb in 1usize..24, t in 0usize..BLOCK_TYPES.len()) {
        require_avx2();
        let ty = BLOCK_TYPES[t];
        let act = quant_dot(fast(ty)).0;
        let mut rng = Rng(seed);
        let rows: Vec<Vec<u8>> = (0..ROWS).map(|_| raw_blocks(&mut rng, ty, nb, false)).collect();
        let a = raw_blocks(&mut rng, act, nb, true);
        check_rows_kernel(ty, &rows, &a, "proptest");
    }
}

/// The block-kernel checks above on the AVX-VNNI table: dots, rows and tiles against the
/// reference, rows and one-row tiles against their own `vec_dot`, the quantizers.
#[test]
fn vnni_kernels_match_the_reference() {
    on_vnni(|| {
        rows_kernels_equal_vec_dot_and_match_the_reference();
        rows_kernels_at_extreme_quants();
        block_dots_and_tiles_match_the_reference();
        block_dots_match_the_reference_at_extreme_quants();
        quantizers_are_bit_identical_on_random_rows();
    });
}

/// `TILE_ROWS` rows and `TILE` activation rows through the AVX2 table and `isa`'s VNNI table:
/// every tile, dot and rows result the same bits.
fn check_vnni_equals_avx2(
    isa: Isa,
    ty: GgmlType,
    rows: &[Vec<u8>],
    acts: [&[u8]; TILE],
    what: &str,
) {
    let (a2, vn) = (super::kernels(ty).unwrap(), kernels_for(isa, ty).unwrap());
    let refs: [&[u8]; TILE_ROWS] = std::array::from_fn(|r| &rows[r][..]);
    let (ta, tv) = (quant_tile(a2, refs, acts).0, quant_tile(vn, refs, acts).0);
    let packed = rows.concat();
    let ((_, da), (_, dv)) = (quant_dot(a2), quant_dot(vn));
    for (t, a) in acts.iter().enumerate() {
        let (ra, rv) = (quant_rows(a2)(&packed, a), quant_rows(vn)(&packed, a));
        for (r, w) in rows.iter().enumerate() {
            assert_eq!(
                tv[r][t].to_bits(),
                ta[r][t].to_bits(),
                "{isa} {ty} {what}: tile row {r} token {t}"
            );
            assert_eq!(
                dv(w, a).to_bits(),
                da(w, a).to_bits(),
                "{isa} {ty} {what}: vec_dot row {r} token {t}"
            );
            assert_eq!(
                rv[r].to_bits(),
                ra[r].to_bits(),
                "{isa} {ty} {what}: rows row {r} token {t}"
            );
        }
    }
}

/// Every VNNI kernel (AVX-VNNI and AVX512-VNNI) returns bit for bit what the AVX2 one does (so
/// the instruction set never changes a result): on quantized and raw blocks, and at the
/// extreme quants.
#[test]
fn vnni_kernels_equal_the_avx2_kernels() {
    for ty in BLOCK_TYPES {
        assert!(super::vnni_kernels(ty).is_some(), "{ty}: AVX-VNNI kernels");
        assert!(
            super::vnni512_kernels(ty).is_some(),
            "{ty}: AVX512-VNNI kernels"
        );
    }
    for isa in available_vnni() {
        vnni_kernels_equal_the_avx2_kernels_on(isa);
    }
}

fn vnni_kernels_equal_the_avx2_kernels_on(isa: Isa) {
    let mut rng = Rng(29);
    let fills = [0x00u8, 0xFF, 0x80, 0x7F, 0x88, 0x77, 0x0F, 0xF0];
    for ty in BLOCK_TYPES {
        let act = quant_dot(fast(ty)).0;
        for nb in BLOCK_COUNTS {
            let n = nb * 32;
            let quantized_w: Vec<Vec<u8>> = (0..TILE_ROWS)
                .map(|_| quantized(ty, &rng.values(n)))
                .collect();
            let raw_w: Vec<Vec<u8>> = (0..TILE_ROWS)
                .map(|_| raw_blocks(&mut rng, ty, nb, false))
                .collect();
            let filled_w: Vec<Vec<u8>> = fills
                .iter()
                .map(|&f| filled_blocks(ty, nb, f, 1.5))
                .collect();
            let quantized_a: Vec<Vec<u8>> =
                (0..TILE).map(|_| quantized(act, &rng.values(n))).collect();
            let raw_a: Vec<Vec<u8>> = (0..TILE)
                .map(|_| raw_blocks(&mut rng, act, nb, true))
                .collect();
            let filled_a: Vec<Vec<u8>> = [0x7Fu8, 0x81, 0x01, 0xFF]
                .iter()
                .map(|&f| filled_blocks(act, nb, f, 0.25))
                .collect();
            for (w, wname) in [
                (&quantized_w, "quantized"),
                (&raw_w, "raw"),
                (&filled_w, "filled"),
            ] {
                for (a, aname) in [
                    (&quantized_a, "quantized"),
                    (&raw_a, "raw"),
                    (&filled_a, "filled"),
                ] {
                    let acts = std::array::from_fn(|t| a[t].as_slice());
                    check_vnni_equals_avx2(
                        isa,
                        ty,
                        w,
                        acts,
                        &format!("{nb} blocks, {wname} w, {aname} a"),
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn vnni_kernels_equal_the_avx2_kernels_on_raw_blocks(
        seed in any::<u64>(),
        nb in 1usize..24,
        t in 0usize..BLOCK_TYPES.len(),
    ) {
        for isa in VNNI_ISAS.into_iter().filter(|isa| isa.is_available()) {
            let ty = BLOCK_TYPES[t];
            let act = quant_dot(fast(ty)).0;
            let mut rng = Rng(seed);
            let w: Vec<Vec<u8>> = (0..TILE_ROWS).map(|_| raw_blocks(&mut rng, ty, nb, false)).collect();
            let a: Vec<Vec<u8>> = (0..TILE).map(|_| raw_blocks(&mut rng, act, nb, true)).collect();
            check_vnni_equals_avx2(isa, ty, &w, std::array::from_fn(|t| a[t].as_slice()), "proptest");
        }
    }
}

/// `Bf16::load8` of the 16 bytes at `p`, in a function with AVX2 enabled (so its intrinsics
/// inline: `intrinsics_are_inlined_not_called`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bf16_load8_avx2(p: *const u8) -> [f32; 8] {
    use super::float::{Bf16, Float};
    let mut out = [0f32; 8];
    std::arch::x86_64::_mm256_storeu_ps(out.as_mut_ptr(), Bf16::load8(p));
    out
}

#[test]
fn bf16_loads_widen_every_bit_pattern_in_place() {
    require_avx2();
    let mut rng = Rng(23);
    let mut patterns: Vec<Vec<u8>> = (0..2000).map(|_| rng.bytes(16)).collect();
    // Every 16-bit pattern once (NaNs, infinities, subnormals, signed zeros included).
    let all: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
    patterns.extend(all.chunks_exact(16).map(<[u8]>::to_vec));
    for bytes in &patterns {
        // SAFETY: AVX2 is present (checked above) and `bytes` holds the 16 bytes read.
        let got = unsafe { bf16_load8_avx2(bytes.as_ptr()) };
        for (j, g) in got.iter().enumerate() {
            let want = (u16::from_le_bytes([bytes[2 * j], bytes[2 * j + 1]]) as u32) << 16;
            assert_eq!(g.to_bits(), want, "lane {j} of {bytes:02x?}");
        }
    }
}

/// MXFP4's scale conversion, every exponent byte (the subnormal 2^-128 and 2^-127 included,
/// which the dot tolerances cannot see) bit for bit the reference's `e8m0_half`.
#[test]
fn e8m0_scales_equal_the_reference_for_every_byte() {
    use super::common::e8m0_half_x8;
    require_avx2();
    let bytes: Vec<u8> = (0..=255).collect();
    for group in bytes.chunks_exact(8) {
        let ptrs: [*const u8; 8] = std::array::from_fn(|k| group[k..].as_ptr());
        // SAFETY: AVX2 is present (checked above); each pointer reads its own byte.
        let got: [f32; 8] = unsafe { std::mem::transmute(e8m0_half_x8_avx2(ptrs)) };
        for (k, &e) in group.iter().enumerate() {
            let want = crate::spec_support::e8m0_half(e);
            assert_eq!(got[k].to_bits(), want.to_bits(), "e = {e}");
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn e8m0_half_x8_avx2(p: [*const u8; 8]) -> std::arch::x86_64::__m256 {
        e8m0_half_x8(p, 0)
    }
}
