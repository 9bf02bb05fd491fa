//! Kernel throughput of every supported format: `dequantize_row`, `matvec` (one token, the
//! decode step) and `matmul` (a batch of 64 tokens, prompt processing), at the shapes of real
//! models, reported as weight bytes per second (criterion `Throughput::Bytes`).
//!
//! Shapes are written as the GGUF tensor shape `[cols, rows]` = `[in, out]`: `576x1536` is
//! SmolLM2-135M's FFN up/gate projection (1536 rows of 576 elements), `2048x5632` a 1B llama's,
//! `4096x11008` a 7B llama's. The product is `y[o] = sum_i W[o][i] x[i]` over `rows` outputs.
//!
//! Threads: 1 by default (comparing kernels), `RAMFORGE_BENCH_THREADS=N` for the parallel
//! drivers. `RAMFORGE_ISA=scalar` benchmarks the reference kernels. Samples are few and short:
//! these compare kernels, they are not for CI (which only compiles them). Filter with
//! criterion's argument, e.g. `cargo bench -p ramforge-benches --bench quant -- '2048x5632/matvec/Q4_0'`.

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use ramforge_quant::{dequantize_row, is_supported, matmul, matvec, quantize_row, GgmlType};
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::time::Duration;

/// `(cols, rows)`: GGUF `[in, out]`.
const SHAPES: [(usize, usize); 3] = [(576, 1536), (2048, 5632), (4096, 11008)];
/// Tokens of the batched product.
const BATCH: usize = 64;
/// Distinct rows quantized per matrix; the rest repeat them (quantizing 45M elements per
/// format would dominate the run; repeated rows still stream from memory like real ones).
const DISTINCT_ROWS: usize = 32;

/// A `rows x cols` matrix of random weights in `ty`.
fn weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut impl Rng) -> Vec<u8> {
    let distinct = DISTINCT_ROWS.min(rows);
    let src: Vec<f32> = (0..distinct * cols)
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let mut block = vec![0u8; ty.row_size(distinct * cols).expect("whole blocks")];
    quantize_row(ty, &src, &mut block).expect("quantize");
    let row = block.len() / distinct;
    let mut dst = Vec::with_capacity(row * rows);
    while dst.len() < row * rows {
        let take = (row * rows - dst.len()).min(block.len());
        dst.extend_from_slice(&block[..take]);
    }
    dst
}

/// The formats to measure: every supported one whose block size divides every shape's cols.
fn formats(cols: usize) -> impl Iterator<Item = GgmlType> {
    GgmlType::all().filter(move |t| is_supported(*t) && cols.checked_rem(t.block_size()) == Some(0))
}

fn pool() -> rayon::ThreadPool {
    let threads = std::env::var("RAMFORGE_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool")
}

fn configure<M: criterion::measurement::Measurement>(group: &mut BenchmarkGroup<'_, M>) {
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1));
}

fn bench_dequantize(c: &mut Criterion) {
    let (rows, cols) = (256, 4096);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut group = c.benchmark_group("dequantize");
    configure(&mut group);
    for ty in formats(cols) {
        let w = weights(ty, rows, cols, &mut rng);
        let mut out = vec![0f32; rows * cols];
        group.throughput(Throughput::Bytes(w.len() as u64));
        group.bench_function(ty.name(), |b| {
            b.iter(|| dequantize_row(ty, black_box(&w), &mut out).unwrap())
        });
    }
    group.finish();
}

fn bench_products(c: &mut Criterion) {
    let pool = pool();
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for (cols, rows) in SHAPES {
        let x: Vec<f32> = (0..BATCH * cols)
            .map(|_| rng.gen_range(-1.0..1.0))
            .collect();
        let mut y = vec![0f32; BATCH * rows];
        // One group per shape, so only one format's matrix is alive at a time.
        let mut group = c.benchmark_group(format!("{cols}x{rows}"));
        configure(&mut group);
        for ty in formats(cols) {
            let w = weights(ty, rows, cols, &mut rng);
            group.throughput(Throughput::Bytes(w.len() as u64));
            group.bench_function(format!("matvec/{}", ty.name()), |b| {
                pool.install(|| {
                    b.iter(|| {
                        matvec(ty, black_box(&w), rows, cols, &x[..cols], &mut y[..rows]).unwrap()
                    })
                })
            });
            group.bench_function(format!("matmul{BATCH}/{}", ty.name()), |b| {
                pool.install(|| {
                    b.iter(|| matmul(ty, black_box(&w), rows, cols, &x, BATCH, &mut y).unwrap())
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_dequantize, bench_products);
criterion_main!(benches);
