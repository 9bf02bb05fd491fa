//! Every aarch64 kernel against the generated reference, bit for bit, on each instruction
//! set (NEON, `sdot`, `smmla`): `vec_dot`, `rows` and the multi-row tile of each format, on
//! random rows of blocks the reference quantized and on blocks of random bytes (every quant value, grid row and sign) under a
//! finite scale, against quantized activations and one of random quants.

use crate::isa::Isa;
use crate::kernel_table::{Dot, Kernels, Tile, ROWS, TILE, TILE_ROWS};
use crate::{dispatch, formats, GgmlType};

const FORMATS: [GgmlType; 24] = [
    GgmlType::IQ2_XXS,
    GgmlType::IQ3_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
    GgmlType::TQ2_0,
    GgmlType::TQ1_0,
    GgmlType::NVFP4,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::IQ4_XS,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::IQ4_NL,
    GgmlType::MXFP4,
];

/// xorshift64*: reproducible noise without a dependency.
struct Noise(u64);
impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn float(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

fn reference(ty: GgmlType) -> &'static Kernels {
    dispatch::kernels_for(Isa::Scalar, ty).unwrap()
}

fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; ty.row_size(x.len()).unwrap()];
    (reference(ty).quantize)(x, &mut out);
    out
}

/// The bits of a block that hold its float scale, `(byte, mask)`, which [`weights`] keeps so
/// that the scale stays finite: the f16 at the start of most formats (MXFP4 keeps its 1-byte
/// scale and a byte of quants), Q4_1/Q5_1's scale and min, the TQ formats' f16 at the end,
/// IQ1_M's f16 over the top nibbles of its four u16 scales; NVFP4's E4M3 scales are finite
/// whatever their bits.
fn scale_bits(ty: GgmlType) -> &'static [(usize, u8)] {
    match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[(0, 0xFF), (1, 0xFF), (2, 0xFF), (3, 0xFF)],
        GgmlType::TQ2_0 => &[(64, 0xFF), (65, 0xFF)],
        GgmlType::TQ1_0 => &[(52, 0xFF), (53, 0xFF)],
        GgmlType::IQ1_M => &[(49, 0xF0), (51, 0xF0), (53, 0xF0), (55, 0xF0)],
        GgmlType::NVFP4 => &[],
        _ => &[(0, 0xFF), (1, 0xFF)],
    }
}

/// `rows` rows of `cols` weights: quantized from noise, then every second block's bits made
/// random but for its [`scale_bits`].
fn weights(ty: GgmlType, rows: usize, cols: usize, noise: &mut Noise) -> Vec<u8> {
    let x: Vec<f32> = (0..rows * cols).map(|_| noise.float()).collect();
    let mut w = quantize(ty, &x);
    for block in w.chunks_exact_mut(ty.type_size()).step_by(2) {
        let kept: Vec<u8> = block.to_vec();
        for b in block.iter_mut() {
            *b = noise.next() as u8;
        }
        for &(i, mask) in scale_bits(ty) {
            block[i] = (kept[i] & mask) | (block[i] & !mask);
        }
    }
    w
}

/// The quants of activation row `a` made random bytes: every i8, -128 too, which the
/// quantizer never gives. The dots read only the quants and the scale, not Q8_1's sum or
/// Q8_K's group sums, so the row stays one the kernels must get right.
fn random_quants(act: GgmlType, a: &mut [u8], noise: &mut Noise) {
    let (qs, n) = match act {
        GgmlType::Q8_0 => (formats::q8_0::OFFSET_QS, formats::q8_0::BLOCK),
        GgmlType::Q8_1 => (formats::q8_1::OFFSET_QS, formats::q8_1::BLOCK),
        GgmlType::Q8_K => (formats::q8_k::OFFSET_QS, formats::q8_k::BLOCK),
        _ => unreachable!("the activation types"),
    };
    for block in a.chunks_exact_mut(act.type_size()) {
        for b in &mut block[qs..qs + n] {
            *b = noise.next() as u8;
        }
    }
}

/// A block format's dot: weight row bytes, activation row bytes.
type VecDot = fn(&[u8], &[u8]) -> f32;

fn vec_dot(k: &Kernels) -> (GgmlType, VecDot) {
    match k.dot {
        Dot::Quant { act, vec_dot } => (act, vec_dot),
        Dot::Float(_) => unreachable!("block formats only"),
    }
}

#[test]
fn every_kernel_equals_the_reference_bit_for_bit() {
    const { assert!(ROWS == TILE_ROWS) };
    let isas: Vec<Isa> = [Isa::Neon, Isa::Dotprod, Isa::I8mm]
        .into_iter()
        .filter(|i| i.is_available())
        .collect();
    assert!(isas.contains(&Isa::Neon), "every aarch64 CPU has NEON");
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let cols = 2 * 256;
    for ty in FORMATS {
        let (act, reference_dot) = vec_dot(reference(ty));
        let w = weights(ty, ROWS, cols, &mut noise);
        let row = ty.row_size(cols).unwrap();
        let acts: Vec<Vec<u8>> = (0..TILE)
            .map(|t| {
                let x: Vec<f32> = (0..cols).map(|_| 4.0 * noise.float()).collect();
                let mut a = quantize(act, &x);
                if t == TILE - 1 {
                    random_quants(act, &mut a, &mut noise);
                }
                a
            })
            .collect();
        let want: Vec<Vec<u32>> = w
            .chunks_exact(row)
            .map(|r| acts.iter().map(|a| reference_dot(r, a).to_bits()).collect())
            .collect();
        for &isa in &isas {
            let k = crate::simd::kernels(isa, ty).unwrap_or_else(|| panic!("{ty:?} on {isa}"));
            let (fast_act, fast_dot) = vec_dot(k);
            assert_eq!(fast_act, act, "{ty:?} on {isa}: activation type");
            for (r, wr) in w.chunks_exact(row).enumerate() {
                for (t, a) in acts.iter().enumerate() {
                    assert_eq!(
                        fast_dot(wr, a).to_bits(),
                        want[r][t],
                        "{ty:?} on {isa}: row {r} token {t}"
                    );
                }
            }
            let rows = k.rows.expect("a rows kernel");
            for (t, a) in acts.iter().enumerate() {
                let got = rows(&w, a).map(f32::to_bits);
                let expected: Vec<u32> = want.iter().map(|r| r[t]).collect();
                assert_eq!(got.to_vec(), expected, "{ty:?} on {isa}: rows, token {t}");
            }
            let Some(Tile::QuantRows(tile)) = k.tile else {
                panic!("{ty:?} on {isa}: a multi-row tile");
            };
            let a: [&[u8]; TILE] = std::array::from_fn(|t| acts[t].as_slice());
            for (r, got) in tile(&w, a).into_iter().enumerate() {
                let got = got.map(f32::to_bits);
                assert_eq!(got.to_vec(), want[r], "{ty:?} on {isa}: tile, row {r}");
            }
            assert!(crate::simd::tile_is_exact(isa, ty));
        }
    }
}

#[test]
fn detection_picks_the_widest_neon_set() {
    let best = [Isa::I8mm, Isa::Dotprod, Isa::Neon]
        .into_iter()
        .find(|i| i.is_available())
        .expect("every aarch64 CPU has NEON");
    eprintln!("detected: {}", crate::isa::detected());
    assert_eq!(crate::isa::detected(), best);
    assert_eq!(Isa::from_name("i8mm"), Some(Isa::I8mm));
}
