//! The public entry points: ggml's reference rounding of the activation types, matmul and
//! parallel matvec against the generated single-threaded reference, and the errors.

use ramforge_quant::{
    dequantize_row, formats, is_supported, matmul, matvec, quantize_row, vec_dot_type, GgmlType,
    QuantError,
};

/// 127 (the block max), then values on rounding ties, then zeros.
fn ties(block: usize) -> Vec<f32> {
    let mut x = vec![0f32; block];
    x[..6].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -0.5, -1.5]);
    x
}

#[test]
fn q8_0_rounds_half_away_from_zero_like_ggml() {
    let mut b = vec![0u8; 34];
    quantize_row(GgmlType::Q8_0, &ties(32), &mut b).unwrap();
    assert_eq!(&b[..2], &half::f16::from_f32(1.0).to_le_bytes());
    let qs: Vec<i8> = b[2..8].iter().map(|&v| v as i8).collect();
    assert_eq!(qs, [127, 1, 2, 3, -1, -2]);
}

#[test]
fn q8_1_stores_d_times_the_quant_sum() {
    let mut b = vec![0u8; 36];
    quantize_row(GgmlType::Q8_1, &ties(32), &mut b).unwrap();
    assert_eq!(&b[..2], &half::f16::from_f32(1.0).to_le_bytes());
    assert_eq!(&b[2..4], &half::f16::from_f32(130.0).to_le_bytes());
    let qs: Vec<i8> = b[4..10].iter().map(|&v| v as i8).collect();
    assert_eq!(qs, [127, 1, 2, 3, -1, -2]);
}

#[test]
fn q8_k_maps_the_max_to_minus_127_and_rounds_ties_to_even() {
    let mut b = vec![0u8; 292];
    quantize_row(GgmlType::Q8_K, &ties(256), &mut b).unwrap();
    assert_eq!(f32::from_le_bytes(b[..4].try_into().unwrap()), -1.0);
    let qs: Vec<i8> = b[4..10].iter().map(|&v| v as i8).collect();
    assert_eq!(qs, [-127, 0, -2, -2, 0, 2]);
    let bsum0 = i16::from_le_bytes([b[260], b[261]]);
    assert_eq!(bsum0, -127 - 2 - 2 + 2);
    // The first value of largest magnitude maps to -127 whatever its sign (d < 0 here).
    let mut x = vec![0f32; 256];
    x[0] = -3.0;
    x[1] = 3.0;
    quantize_row(GgmlType::Q8_K, &x, &mut b).unwrap();
    assert_eq!((b[4] as i8, b[5] as i8), (-127, 127));
    assert_eq!(f32::from_le_bytes(b[..4].try_into().unwrap()), 3.0 / 127.0);
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    // A small LCG: deterministic, and no dev-dependency needed.
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn supported() -> Vec<GgmlType> {
    GgmlType::all().filter(|t| is_supported(*t)).collect()
}

#[test]
fn all_twenty_five_block_formats_and_three_float_types_are_supported() {
    assert_eq!(supported().len(), 28);
    for ty in [GgmlType::Q4_1, GgmlType::Q5_1] {
        assert_eq!(vec_dot_type(ty).unwrap(), Some(GgmlType::Q8_1));
    }
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
        GgmlType::MXFP4,
        GgmlType::NVFP4,
    ] {
        assert_eq!(vec_dot_type(ty).unwrap(), Some(GgmlType::Q8_0));
    }
    for ty in [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
    ] {
        assert_eq!(vec_dot_type(ty).unwrap(), Some(GgmlType::Q8_K));
    }
    assert_eq!(vec_dot_type(GgmlType::F16).unwrap(), None);
}

#[test]
fn matmul_equals_one_matvec_per_token() {
    for ty in supported() {
        let (rows, n) = (5, 3);
        let cols = 2 * ty.block_size().max(32);
        let w = random(rows * cols, 1);
        let mut wq = vec![0u8; ty.row_size(rows * cols).unwrap()];
        quantize_row(ty, &w, &mut wq).unwrap();
        let x = random(n * cols, 2);
        let mut y = vec![0f32; n * rows];
        matmul(ty, &wq, rows, cols, &x, n, &mut y).unwrap();
        for t in 0..n {
            let mut yt = vec![0f32; rows];
            matvec(ty, &wq, rows, cols, &x[t * cols..(t + 1) * cols], &mut yt).unwrap();
            assert_eq!(&y[t * rows..(t + 1) * rows], &yt[..], "{ty} token {t}");
        }
    }
}

#[test]
fn parallel_matvec_equals_the_generated_reference() {
    let (rows, cols) = (300, 1024);
    let w = random(rows * cols, 3);
    let x = random(cols, 4);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    type Reference = fn(&[u8], usize, &[f32], &mut [f32]);
    let cases: [(GgmlType, Reference); 4] = [
        (GgmlType::Q4_0, formats::q4_0::matvec),
        (GgmlType::Q4_K, formats::q4_k::matvec),
        (GgmlType::Q6_K, formats::q6_k::matvec),
        (GgmlType::IQ4_XS, formats::iq4_xs::matvec),
    ];
    for (ty, reference) in cases {
        let mut wq = vec![0u8; ty.row_size(rows * cols).unwrap()];
        quantize_row(ty, &w, &mut wq).unwrap();
        let mut y = vec![0f32; rows];
        pool.install(|| matvec(ty, &wq, rows, cols, &x, &mut y))
            .unwrap();
        let mut y_ref = vec![0f32; rows];
        reference(&wq, cols, &x, &mut y_ref);
        if ramforge_quant::isa::active() == ramforge_quant::isa::Isa::Scalar {
            assert_eq!(y, y_ref, "{ty}");
            continue;
        }
        // A fast kernel adds the same products in another order: one thread gives the same
        // bits as three, and the reference agrees up to f32 rounding (10x headroom for the
        // terms that cancel inside each weight).
        let mut y1 = vec![0f32; rows];
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        one.install(|| matvec(ty, &wq, rows, cols, &x, &mut y1))
            .unwrap();
        assert_eq!(y, y1, "{ty}");
        let mut wd = vec![0f32; rows * cols];
        dequantize_row(ty, &wq, &mut wd).unwrap();
        for (o, wrow) in wd.chunks_exact(cols).enumerate() {
            let terms: f64 = wrow.iter().zip(&x).map(|(a, b)| (a * b).abs() as f64).sum();
            let err = (y[o] - y_ref[o]).abs() as f64;
            assert!(
                err <= 1e-4 * terms,
                "{ty} row {o}: {} vs {}",
                y[o],
                y_ref[o]
            );
        }
    }
}

#[test]
fn unsupported_and_malformed_input_is_a_typed_error() {
    let mut out = vec![0f32; 256];
    let e = dequantize_row(GgmlType::I8, &[0u8; 256], &mut out).unwrap_err();
    assert_eq!(e, QuantError::Unsupported { ty: GgmlType::I8 });
    assert!(e.to_string().contains("I8"), "{e}");
    let e = matvec(
        GgmlType::Q4_0,
        &[0u8; 36],
        2,
        32,
        &[0f32; 31],
        &mut [0f32; 2],
    )
    .unwrap_err();
    assert!(
        matches!(e, QuantError::ElementLength { what: "x", .. }),
        "{e}"
    );
    let e = matvec(
        GgmlType::Q4_0,
        &[0u8; 36],
        2,
        32,
        &[0f32; 32],
        &mut [0f32; 3],
    )
    .unwrap_err();
    assert!(
        matches!(e, QuantError::ElementLength { what: "y", .. }),
        "{e}"
    );
    let e = matvec(
        GgmlType::Q4_0,
        &[0u8; 36],
        2,
        33,
        &[0f32; 33],
        &mut [0f32; 2],
    )
    .unwrap_err();
    assert!(matches!(e, QuantError::RaggedRow { .. }), "{e}");
    let e = quantize_row(GgmlType::F16, &[0f32; 4], &mut [0u8; 7]).unwrap_err();
    assert!(
        matches!(
            e,
            QuantError::ByteLength {
                expected: 8,
                got: 7,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn float_types_round_trip_natively() {
    let x = random(64, 5);
    for (ty, tol) in [
        (GgmlType::F32, 0.0),
        (GgmlType::F16, 1e-3),
        (GgmlType::BF16, 8e-3),
    ] {
        let mut b = vec![0u8; ty.row_size(64).unwrap()];
        quantize_row(ty, &x, &mut b).unwrap();
        let mut y = vec![0f32; 64];
        dequantize_row(ty, &b, &mut y).unwrap();
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= tol * a.abs(), "{ty}: {a} vs {b}");
        }
    }
}
