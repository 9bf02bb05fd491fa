//! Code generation for one validated spec: the block type, the kernels, and the tests.
//! The generated code lives inside `ramforge-quant` and names its items by `crate::` paths.

use crate::spec::{Field, Kind, Spec};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

/// The storage type of one element of a field in the `#[repr(C)]` block (alignment 1).
fn storage(kind: Kind) -> TokenStream {
    match kind {
        Kind::U8 => quote!(u8),
        Kind::I8 => quote!(i8),
        k => {
            let n = k.size();
            quote!([u8; #n])
        }
    }
}

/// The type expressions see.
fn value_type(kind: Kind) -> TokenStream {
    match kind {
        Kind::F16 | Kind::F32 => quote!(f32),
        Kind::U8 => quote!(u8),
        Kind::I8 => quote!(i8),
        Kind::U16 => quote!(u16),
        Kind::I16 => quote!(i16),
        Kind::U32 => quote!(u32),
    }
}

fn decode(kind: Kind, s: TokenStream) -> TokenStream {
    match kind {
        Kind::F16 => quote!(::half::f16::from_le_bytes(#s).to_f32()),
        Kind::F32 => quote!(f32::from_le_bytes(#s)),
        Kind::U8 | Kind::I8 => s,
        Kind::U16 => quote!(u16::from_le_bytes(#s)),
        Kind::I16 => quote!(i16::from_le_bytes(#s)),
        Kind::U32 => quote!(u32::from_le_bytes(#s)),
    }
}

fn encode(kind: Kind, v: TokenStream) -> TokenStream {
    match kind {
        Kind::F16 => quote!(::half::f16::from_f32(#v).to_le_bytes()),
        Kind::U8 | Kind::I8 => v,
        _ => quote!((#v).to_le_bytes()),
    }
}

fn zero_storage(kind: Kind) -> TokenStream {
    match kind {
        Kind::U8 | Kind::I8 => quote!(0),
        k => {
            let n = k.size();
            quote!([0u8; #n])
        }
    }
}

/// `let name = <decoded field>;` for every field, reading block `b`.
fn bindings(fields: &[Field]) -> TokenStream {
    let lets = fields.iter().map(|f| {
        let name = format_ident!("{}", f.name);
        let vt = value_type(f.kind);
        match f.count {
            None => {
                let v = decode(f.kind, quote!(b.#name));
                quote!(let #name: #vt = #v;)
            }
            Some(n) if f.kind.size() == 1 => quote!(let #name: &[#vt; #n] = &b.#name;),
            Some(n) => {
                let v = decode(f.kind, quote!(b.#name[i]));
                quote!(let #name: [#vt; #n] = ::core::array::from_fn(|i| #v);)
            }
        }
    });
    quote!(#(#lets)*)
}

/// Generates the module of one format. `act` is the spec of its activation type.
pub fn format_module(spec: &Spec, act: &Spec) -> TokenStream {
    let module = format_ident!("{}", spec.module());
    let act_module = format_ident!("{}", act.module());
    let ty = format_ident!("{}", spec.name);
    let path = spec.path.to_string_lossy().into_owned();
    let (id, block, bytes, group) = (spec.id, spec.block, spec.bytes, spec.group);
    let tol = Literal::f32_suffixed(spec.roundtrip_tolerance as f32);
    let rms_tol = match spec.roundtrip_rms_tolerance {
        Some(r) => {
            let r = Literal::f32_suffixed(r as f32);
            quote!(Some(#r))
        }
        None => quote!(None),
    };
    let name = &spec.name;

    let tables = spec.tables.iter().map(|(t, values)| {
        let t = format_ident!("{}", t);
        let n = values.len();
        let vals = values.iter().map(|v| Literal::i8_unsuffixed(*v as i8));
        quote!(pub const #t: [i8; #n] = [#(#vals),*];)
    });
    let grids = spec.grids.iter().map(|g| {
        let t = format_ident!("{}", g.name);
        let (n, w) = (g.rows, g.width);
        let file = g.path.to_string_lossy().into_owned();
        let doc = format!(
            "Codebook grid `{}`: {n} rows of {w}, unpacked from `{file}`.",
            g.name
        );
        let rows = g.values.chunks(w).map(|r| {
            let vals = r.iter().map(|v| Literal::i8_unsuffixed(*v));
            quote!([#(#vals),*])
        });
        quote! {
            #[doc = #doc]
            pub const #t: [[i8; #w]; #n] = [#(#rows),*];
            const _: &[u8] = include_bytes!(#file);
        }
    });

    let field_names: Vec<_> = spec
        .fields
        .iter()
        .map(|f| format_ident!("{}", f.name))
        .collect();
    let field_types = spec.fields.iter().map(|f| {
        let s = storage(f.kind);
        match f.count {
            None => s,
            Some(n) => quote!([#s; #n]),
        }
    });
    let field_zeros = spec.fields.iter().map(|f| {
        let z = zero_storage(f.kind);
        match f.count {
            None => z,
            Some(n) => quote!([#z; #n]),
        }
    });
    let offsets: Vec<_> = spec.fields.iter().map(|f| f.offset).collect();
    let offset_names = field_names.clone();
    let offset_consts = spec.fields.iter().map(|f| {
        let c = format_ident!("OFFSET_{}", f.name.to_ascii_uppercase());
        let doc = format!("Byte offset of field `{}` in a block.", f.name);
        let o = f.offset;
        quote!(#[doc = #doc] pub const #c: usize = #o;)
    });

    let binds = bindings(&spec.fields);
    let quant = &spec.quant;
    let scale = &spec.scale;
    let has_min = spec.min.is_some();
    let min = spec
        .min
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(0.0f32));

    let locals = spec.fields.iter().map(|f| {
        let name = format_ident!("{}", f.name);
        let vt = value_type(f.kind);
        match f.count {
            None => quote!(let mut #name: #vt = Default::default();),
            Some(n) => quote!(let mut #name: [#vt; #n] = [Default::default(); #n];),
        }
    });
    let stores = spec.fields.iter().map(|f| {
        let name = format_ident!("{}", f.name);
        match f.count {
            None => {
                let v = encode(f.kind, quote!(#name));
                quote!(b.#name = #v;)
            }
            Some(_) if f.kind.size() == 1 => quote!(b.#name = #name;),
            Some(_) => {
                let v = encode(f.kind, quote!(#name[i]));
                quote!(b.#name = ::core::array::from_fn(|i| #v);)
            }
        }
    });
    let code = &spec.quantize;

    quote! {
        #[doc = concat!("The ", #name, " block format, generated from `", #path, "`.")]
        #[allow(unused, clippy::all, clippy::pedantic, non_upper_case_globals, non_snake_case)]
        pub mod #module {
            use crate::spec_support::*;
            use super::#act_module as act;

            /// Rebuild when the spec changes.
            const SPEC_SOURCE: &[u8] = include_bytes!(#path);

            pub const TYPE: crate::GgmlType = crate::GgmlType::#ty;
            /// The type activations are quantized to for `vec_dot`.
            pub const ACT: crate::GgmlType = act::TYPE;
            /// The ggml type id the spec declares (checked against `GgmlType` below).
            pub const ID: u32 = #id;
            /// Elements per block.
            pub const BLOCK: usize = #block;
            /// Bytes per block.
            pub const BYTES: usize = #bytes;
            /// Elements sharing one scale (and min).
            pub const GROUP: usize = #group;
            const GROUPS: usize = BLOCK / GROUP;
            const HAS_MIN: bool = #has_min;
            /// Bound on `|x - dequantize(quantize(x))|` relative to the block's max `|x|`.
            pub const ROUNDTRIP_TOLERANCE: f32 = #tol;
            /// Bound on a block's root-mean-square round-trip error relative to its max `|x|`
            /// (codebook formats).
            pub const ROUNDTRIP_RMS_TOLERANCE: Option<f32> = #rms_tol;
            #(#offset_consts)*
            #(#tables)*
            #(#grids)*

            const _: () = assert!(
                TYPE.id() == ID && TYPE.block_size() == BLOCK && TYPE.type_size() == BYTES,
                concat!(#path, ": id, block or bytes differ from the GgmlType table")
            );

            /// One block as stored in the file: fields of bytes, so alignment is 1.
            #[repr(C)]
            #[derive(Clone, Copy, Debug, PartialEq, Eq)]
            pub struct Block {
                #(pub #field_names: #field_types,)*
            }

            const _: () = assert!(::core::mem::size_of::<Block>() == BYTES, concat!(#name, ": block size differs from the spec"));
            const _: () = assert!(::core::mem::align_of::<Block>() == 1);
            #(const _: () = assert!(::core::mem::offset_of!(Block, #offset_names) == #offsets);)*

            pub const ZERO: Block = Block { #(#field_names: #field_zeros,)* };

            /// Views whole blocks of bytes as blocks.
            #[inline]
            pub fn blocks(bytes: &[u8]) -> &[Block] {
                assert!(bytes.len() % BYTES == 0, "not a whole number of blocks");
                // SAFETY: Block is repr(C) with alignment 1 and size BYTES, and is made of
                // integers only, so every byte pattern is a valid Block.
                unsafe { ::core::slice::from_raw_parts(bytes.as_ptr().cast::<Block>(), bytes.len() / BYTES) }
            }

            /// Views whole blocks of bytes as mutable blocks.
            #[inline]
            pub fn blocks_mut(bytes: &mut [u8]) -> &mut [Block] {
                assert!(bytes.len() % BYTES == 0, "not a whole number of blocks");
                // SAFETY: as in `blocks`; the borrow is exclusive.
                unsafe { ::core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<Block>(), bytes.len() / BYTES) }
            }

            /// The integer quant of every element.
            #[inline(always)]
            pub fn unpack(b: &Block, q: &mut [i8; BLOCK]) {
                #binds
                for j in 0..BLOCK {
                    let v: i32 = { #quant };
                    q[j] = v as i8;
                }
            }

            /// Scale and min of every group: element = scale * quant + min.
            #[inline(always)]
            pub fn group_params(b: &Block) -> ([f32; GROUPS], [f32; GROUPS]) {
                #binds
                let mut group_scales = [0f32; GROUPS];
                let mut group_mins = [0f32; GROUPS];
                for g in 0..GROUPS {
                    group_scales[g] = { #scale };
                    group_mins[g] = { #min };
                }
                (group_scales, group_mins)
            }

            /// Dequantizes one block into `out[..BLOCK]`.
            #[inline]
            pub fn dequantize_block(b: &Block, out: &mut [f32]) {
                let mut q = [0i8; BLOCK];
                unpack(b, &mut q);
                let (s, m) = group_params(b);
                for ((o, q), g) in out[..BLOCK].chunks_exact_mut(GROUP).zip(q.chunks_exact(GROUP)).zip(0..GROUPS) {
                    for (o, &q) in o.iter_mut().zip(q) {
                        *o = if HAS_MIN { s[g] * q as f32 + m[g] } else { s[g] * q as f32 };
                    }
                }
            }

            /// Dequantizes whole blocks: `src.len() / BYTES * BLOCK == dst.len()`.
            pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
                for (b, out) in blocks(src).iter().zip(dst.chunks_exact_mut(BLOCK)) {
                    dequantize_block(b, out);
                }
            }

            /// The reference quantizer for one block of `BLOCK` values.
            pub fn quantize_block(x: &[f32], b: &mut Block) {
                let x = &x[..BLOCK];
                #(#locals)*
                #code
                #(#stores)*
            }

            /// Quantizes whole blocks: `src.len() / BLOCK * BYTES == dst.len()`.
            pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
                for (x, b) in src.chunks_exact(BLOCK).zip(blocks_mut(dst)) {
                    quantize_block(x, b);
                }
            }

            /// Activation blocks per block (the activation type's blocks may be smaller).
            const ACT_BLOCKS: usize = BLOCK / act::BLOCK;
            /// Groups per activation block.
            const ACT_GROUPS: usize = act::BLOCK / GROUP;

            /// Dot product of a row of blocks with a row of activation blocks: integer
            /// products per group, scaled once per group (and per activation block).
            pub fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
                let mut acc = 0f32;
                let mut q = [0i8; BLOCK];
                let mut aq = [0i8; act::BLOCK];
                for (wb, abs) in blocks(w).iter().zip(act::blocks(a).chunks_exact(ACT_BLOCKS)) {
                    unpack(wb, &mut q);
                    let (s, m) = group_params(wb);
                    for (k, ab) in abs.iter().enumerate() {
                        act::unpack(ab, &mut aq);
                        let da = act::group_params(ab).0[0];
                        let qk = &q[k * act::BLOCK..(k + 1) * act::BLOCK];
                        let mut sum = 0f32;
                        for ((qg, ag), g) in qk.chunks_exact(GROUP).zip(aq.chunks_exact(GROUP)).zip(k * ACT_GROUPS..) {
                            sum += s[g] * int_dot(qg, ag) as f32;
                            if HAS_MIN {
                                sum += m[g] * int_sum(ag) as f32;
                            }
                        }
                        acc += da * sum;
                    }
                }
                acc
            }

            /// The single-threaded reference product `y[o] = sum_i W[o][i] x[i]`.
            pub fn matvec(weights: &[u8], cols: usize, x: &[f32], y: &mut [f32]) {
                let row = cols / BLOCK * BYTES;
                let mut xa = vec![0u8; cols / act::BLOCK * act::BYTES];
                act::quantize_row(x, &mut xa);
                for (yo, w) in y.iter_mut().zip(weights.chunks_exact(row)) {
                    *yo = vec_dot(w, &xa);
                }
            }

            /// The scalar reference kernels: what a fast path starts from and replaces parts of.
            pub(crate) const REFERENCE: crate::kernel_table::Kernels = crate::kernel_table::Kernels {
                dequantize: dequantize_row,
                quantize: quantize_row,
                dot: crate::kernel_table::Dot::Quant { act: ACT, vec_dot },
                tile: None,
                rows: None,
                arranged_acts: None,
            };
            pub(crate) static KERNELS: crate::kernel_table::Kernels = REFERENCE;
        }
    }
}

/// Generates the property tests of one format's module (`crate::formats::<module>`), which
/// go through the crate's public entry points.
pub fn format_tests(spec: &Spec) -> TokenStream {
    let module = format_ident!("{}", spec.module());
    quote! {
        #[allow(unused, clippy::all, clippy::pedantic, non_upper_case_globals, non_snake_case)]
        mod #module {
            use crate::formats::#module::*;

            use proptest::prelude::*;

            #[test]
            fn spec_agrees_with_the_type_table() {
                // Also a compile-time assertion in the format's module.
                assert_eq!(TYPE.id(), ID);
                assert_eq!(TYPE.block_size(), BLOCK);
                assert_eq!(TYPE.type_size(), BYTES);
            }

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(48))]

                #[test]
                fn round_trip_error_is_bounded(
                    x in prop::collection::vec(-1.0f32..1.0, 2 * BLOCK),
                    exp in -6i32..12,
                ) {
                    let x: Vec<f32> = x.iter().map(|v| v * 2f32.powi(exp)).collect();
                    let mut bytes = vec![0u8; 2 * BYTES];
                    crate::quantize_row(TYPE, &x, &mut bytes).unwrap();
                    let mut y = vec![0f32; 2 * BLOCK];
                    crate::dequantize_row(TYPE, &bytes, &mut y).unwrap();
                    for (xb, yb) in x.chunks(BLOCK).zip(y.chunks(BLOCK)) {
                        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                        for (a, b) in xb.iter().zip(yb) {
                            prop_assert!((a - b).abs() <= ROUNDTRIP_TOLERANCE * amax,
                                "{} -> {} (block max {})", a, b, amax);
                        }
                        if let Some(rms_tol) = ROUNDTRIP_RMS_TOLERANCE {
                            let sq: f64 = xb.iter().zip(yb).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
                            let rms = (sq / BLOCK as f64).sqrt();
                            prop_assert!(rms <= rms_tol as f64 * amax as f64,
                                "block rms error {} (block max {})", rms, amax);
                        }
                    }
                }

                #[test]
                fn matvec_matches_dequantized_dot(
                    w in prop::collection::vec(-1.0f32..1.0, 3 * 2 * BLOCK),
                    x in prop::collection::vec(-4.0f32..4.0, 2 * BLOCK),
                ) {
                    let (rows, cols) = (3, 2 * BLOCK);
                    let mut wq = vec![0u8; rows * 2 * BYTES];
                    crate::quantize_row(TYPE, &w, &mut wq).unwrap();
                    let mut wd = vec![0f32; rows * cols];
                    crate::dequantize_row(TYPE, &wq, &mut wd).unwrap();
                    let mut y = vec![0f32; rows];
                    crate::matvec(TYPE, &wq, rows, cols, &x, &mut y).unwrap();
                    let mut y_ref = vec![0f32; rows];
                    matvec(&wq, cols, &x, &mut y_ref);
                    for o in 0..rows {
                        let wrow = &wd[o * cols..(o + 1) * cols];
                        let exact: f64 = wrow.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
                        let tol = crate::matvec_tolerance(TYPE, wrow, &x).unwrap() as f64;
                        prop_assert!((y[o] as f64 - exact).abs() <= tol, "row {}: {} vs {} (tol {})", o, y[o], exact, tol);
                        if crate::isa::active() == crate::isa::Isa::Scalar {
                            prop_assert_eq!(y[o], y_ref[o]);
                        } else {
                            // A fast kernel adds the same integer products in another
                            // order: it may differ from the reference by f32 rounding (the
                            // 10x headroom covers the scale * quant and min terms that
                            // cancel inside w).
                            let terms: f64 = wrow.iter().zip(&x).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
                            let slack = 1e-4 * terms + 1e-30;
                            prop_assert!((y[o] as f64 - y_ref[o] as f64).abs() <= slack, "row {}: {} vs reference {}", o, y[o], y_ref[o]);
                        }
                    }
                }

                #[test]
                fn truncated_and_ragged_input_is_rejected(cut in 1usize..BYTES, extra in 1usize..BLOCK) {
                    let bytes = vec![0u8; 2 * BYTES];
                    let mut out = vec![0f32; 2 * BLOCK];
                    let truncated = crate::dequantize_row(TYPE, &bytes[..2 * BYTES - cut], &mut out);
                    prop_assert!(matches!(truncated, Err(crate::QuantError::ByteLength { .. })), "{:?}", truncated);
                    let mut ragged = vec![0f32; BLOCK + extra];
                    let r = crate::dequantize_row(TYPE, &bytes, &mut ragged);
                    prop_assert!(matches!(r, Err(crate::QuantError::RaggedRow { .. })), "{:?}", r);
                    let mut y = vec![0f32; 2];
                    let x = vec![0f32; BLOCK];
                    let m = crate::matvec(TYPE, &bytes[..2 * BYTES - cut], 2, BLOCK, &x, &mut y);
                    prop_assert!(matches!(m, Err(crate::QuantError::ByteLength { .. })), "{:?}", m);
                    let q = crate::quantize_row(TYPE, &ragged, &mut vec![0u8; 2 * BYTES]);
                    prop_assert!(matches!(q, Err(crate::QuantError::RaggedRow { .. })), "{:?}", q);
                }
            }
        }
    }
}

/// What concerns all formats together: the list of them (`ALL`, and `for_each_format!` for
/// code that needs each format's module by name) and the lookup of their scalar kernels.
pub fn dispatch(specs: &[Spec]) -> TokenStream {
    let types: Vec<_> = specs.iter().map(|s| format_ident!("{}", s.name)).collect();
    let modules: Vec<_> = specs
        .iter()
        .map(|s| format_ident!("{}", s.module()))
        .collect();
    quote! {
        /// Every block format a spec declares, in spec-file order.
        pub const ALL: &[crate::GgmlType] = &[#(crate::GgmlType::#types),*];

        /// `for_each_format!(callback)` expands to
        /// `callback! { (TYPE, module), ... }` with every format's `GgmlType` variant and
        /// module name (`Q4_0, q4_0`), in the order of [`ALL`]: for code that needs each
        /// format's items by name (tests, tables), so that a new spec needs no edit there.
        macro_rules! for_each_format {
            ($callback:ident) => {
                $callback! { #((#types, #modules)),* }
            };
        }
        pub(crate) use for_each_format;

        /// The scalar reference kernels generated for `ty`, if a spec declares it.
        pub(crate) fn kernels(ty: crate::GgmlType) -> Option<&'static crate::kernel_table::Kernels> {
            match ty {
                #(crate::GgmlType::#types => Some(&#modules::KERNELS),)*
                _ => None,
            }
        }
    }
}
