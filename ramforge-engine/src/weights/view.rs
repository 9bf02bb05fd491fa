//! Borrowed views of one layer's weights as the forward pass uses them: its matrices (from the
//! pinned store, a streaming buffer or mapped windows) and its resident f32 vectors, by role.

use crate::model::arch::Role;
use crate::model::LayerTensors;
use ramforge_gguf::{GgmlType, TensorInfo};
use ramforge_quant::Layout;

/// A weight matrix in memory: `rows` rows of `cols` elements of type `ty`, its blocks in
/// `layout` (a pinned layer's arranged for the kernels, a streamed one's as in the file).
#[derive(Clone, Copy)]
pub(crate) struct MatrixView<'a> {
    pub ty: GgmlType,
    pub layout: Layout,
    pub rows: usize,
    pub cols: usize,
    pub bytes: &'a [u8],
}

impl<'a> MatrixView<'a> {
    /// Expert `e`'s matrix of a stack of `n_expert` (GGUF `[cols, rows, n_expert]`: the
    /// experts lie one after another).
    pub fn expert(&self, e: usize, n_expert: usize) -> MatrixView<'a> {
        let rows = self.rows / n_expert;
        let len = self.bytes.len() / n_expert;
        MatrixView {
            rows,
            bytes: &self.bytes[e * len..(e + 1) * len],
            ..*self
        }
    }
}

/// One layer's matrices, by role.
pub(crate) struct LayerView<'a> {
    by_role: [Option<MatrixView<'a>>; Role::COUNT],
}

impl<'a> LayerView<'a> {
    /// The view of `layer` whose `i`-th matrix `t` (in [`LayerTensors::matrices`] order) lies
    /// in `bytes(i, t)`, held in the layout `bytes` also gives.
    pub fn new(
        layer: &LayerTensors,
        mut bytes: impl FnMut(usize, &TensorInfo) -> (&'a [u8], Layout),
    ) -> LayerView<'a> {
        let mut by_role = [None; Role::COUNT];
        for (i, (t, &role)) in layer.matrices().zip(layer.matrix_roles()).enumerate() {
            let (bytes, layout) = bytes(i, t);
            by_role[role as usize] = Some(MatrixView {
                ty: t.ggml_type,
                layout,
                rows: t.n_rows() as usize,
                cols: t.row_len() as usize,
                bytes,
            });
        }
        LayerView { by_role }
    }

    /// The matrix playing `role`, if the layer binds one (alternative forms of a layer).
    pub fn get(&self, role: Role) -> Option<&MatrixView<'a>> {
        self.by_role[role as usize].as_ref()
    }

    /// The matrix playing `role`; the architecture's description guarantees the block asks
    /// only for matrices the layer binds.
    pub fn matrix(&self, role: Role) -> &MatrixView<'a> {
        self.by_role[role as usize]
            .as_ref()
            .unwrap_or_else(|| panic!("the layer binds no {role:?} matrix"))
    }
}

/// A layer's norms and biases as f32 (always resident), by role.
pub(crate) struct LayerVectors {
    by_role: [Option<Vec<f32>>; Role::COUNT],
}

impl LayerVectors {
    /// The vectors given as `(role, values)`.
    pub fn new(vectors: impl IntoIterator<Item = (Role, Vec<f32>)>) -> LayerVectors {
        let mut by_role = [const { None }; Role::COUNT];
        for (role, v) in vectors {
            by_role[role as usize] = Some(v);
        }
        LayerVectors { by_role }
    }

    /// The vector playing `role`, if the layer has one (optional biases).
    pub fn get(&self, role: Role) -> Option<&[f32]> {
        self.by_role[role as usize].as_deref()
    }

    /// A norm the architecture requires.
    pub fn norm(&self, role: Role) -> &[f32] {
        self.get(role)
            .unwrap_or_else(|| panic!("the layer binds no {role:?} vector"))
    }
}
