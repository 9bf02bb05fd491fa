//! Dequantize and matvec throughput of every supported format (elements/s and weight
//! bytes/s). Small sample sizes: these are for comparing kernels, not for CI.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ramforge_quant::{dequantize_row, is_supported, matvec, quantize_row, GgmlType};
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::time::Duration;

const ROWS: usize = 256;
const COLS: usize = 4096;

/// A ROWS x COLS matrix of random weights in `ty`.
fn weights(ty: GgmlType, rng: &mut impl Rng) -> Vec<u8> {
    let src: Vec<f32> = (0..ROWS * COLS).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let mut dst = vec![0u8; ty.row_size(ROWS * COLS).expect("whole blocks")];
    quantize_row(ty, &src, &mut dst).expect("quantize");
    dst
}

fn formats() -> impl Iterator<Item = GgmlType> {
    GgmlType::all().filter(|t| is_supported(*t))
}

fn bench_dequantize(c: &mut Criterion) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut group = c.benchmark_group("dequantize");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(1));
    for ty in formats() {
        let w = weights(ty, &mut rng);
        let mut out = vec![0f32; ROWS * COLS];
        group.throughput(Throughput::Elements((ROWS * COLS) as u64));
        group.bench_function(ty.name(), |b| {
            b.iter(|| dequantize_row(ty, black_box(&w), &mut out).unwrap())
        });
    }
    group.finish();
}

fn bench_matvec(c: &mut Criterion) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let x: Vec<f32> = (0..COLS).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    for (label, elements) in [("matvec_elements", true), ("matvec_bytes", false)] {
        let mut group = c.benchmark_group(label);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300));
        group.measurement_time(Duration::from_secs(1));
        for ty in formats() {
            let w = weights(ty, &mut rng);
            let mut y = vec![0f32; ROWS];
            group.throughput(if elements {
                Throughput::Elements((ROWS * COLS) as u64)
            } else {
                Throughput::Bytes(w.len() as u64)
            });
            group.bench_function(ty.name(), |b| {
                pool.install(|| {
                    b.iter(|| matvec(ty, black_box(&w), ROWS, COLS, &x, &mut y).unwrap())
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_dequantize, bench_matvec);
criterion_main!(benches);
