//! Matrix products of a batch of activations with weights in their quantized form, several
//! products sharing one input in one parallel region (`ramforge-quant` does the arithmetic).

use crate::error::EngineError;
use crate::model::arch::Role;
use crate::weights::MatrixView;

/// The groups of matrices the block multiplies together, each group sharing one input (so
/// it is quantized once): the scratch for quantized activations is sized from these.
pub(crate) const MATMUL_GROUPS: [&[Role]; 27] = [
    &[Role::AttnQ, Role::AttnK, Role::AttnV],
    &[Role::AttnKvAMqa, Role::AttnQ, Role::AttnQA],
    &[Role::AttnQB],
    &[Role::AttnKB],
    &[Role::AttnVB],
    &[Role::AttnKvB],
    &[Role::AttnOutput],
    &[Role::FfnGate, Role::FfnUp],
    &[Role::FfnDown],
    &[Role::FfnGateInp],
    &[Role::FfnGateExps, Role::FfnUpExps],
    &[Role::FfnDownExps],
    &[Role::FfnGateShexp, Role::FfnUpShexp],
    &[Role::FfnDownShexp],
    &[Role::AttnQkv, Role::AttnGate, Role::SsmBeta, Role::SsmAlpha],
    &[Role::AttnQkv, Role::AttnGate, Role::SsmBetaAlpha],
    &[Role::SsmIn, Role::SsmBetaAlpha],
    &[Role::SsmOut],
    &[Role::NextnEhProj],
    &[Role::HcAttnFn],
    &[Role::HcFfnFn],
    &[Role::AttnQA, Role::AttnKv],
    &[Role::AttnCompressorKv, Role::AttnCompressorGate],
    &[
        Role::IndexerCompressorKv,
        Role::IndexerCompressorGate,
        Role::IndexerProj,
    ],
    &[Role::IndexerQB],
    &[Role::AttnOutputA],
    &[Role::AttnOutputB],
];

/// `ys[j] = ms[j] . x` for `n` rows of `x`, every product in one parallel region (one
/// fork-join instead of one per matrix), with `x` quantized once into `act`. The matrices
/// share their input, so they have the same `cols`. With `per_token` each row's results are
/// those it would get alone (batched decoding of several sequences).
pub(crate) fn matmul<const N: usize>(
    ms: [(&MatrixView<'_>, &mut [f32]); N],
    x: &[f32],
    n: usize,
    act: &mut [u8],
    per_token: bool,
) -> Result<(), EngineError> {
    let cols = ms[0].0.cols;
    debug_assert!(ms.iter().all(|(m, _)| m.cols == cols));
    let x = &x[..n * cols];
    let mut products = ms.map(|(m, y)| ramforge_quant::Product {
        ty: m.ty,
        layout: m.layout,
        weights: m.bytes,
        rows: m.rows,
        y: &mut y[..n * m.rows],
    });
    // The scratch is sized for the widest group of the model ([`super::scratch`]).
    if per_token {
        ramforge_quant::matmul_many_per_token(&mut products, cols, x, n, act)?;
    } else {
        ramforge_quant::matmul_many(&mut products, cols, x, n, act)?;
    }
    Ok(())
}
