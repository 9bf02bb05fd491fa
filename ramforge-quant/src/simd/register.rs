//! The one way a fast path registers kernels: `fast_kernels!` lists, per type, what the fast
//! path replaces of the reference kernels, and builds the lookup from type to table entry.

/// `fast_kernels! { entry; ... }` defines `kernels(ty) -> Option<&'static Kernels>` over the
/// listed types. Each entry names a type and how its fast kernels are made:
///
/// - `q4_0: block(kernel_module)`: the generated format `crate::formats::q4_0`, with its
///   `vec_dot`, `rows` and `PREFILL` (its tile kernel) from `kernel_module` (the activation type is the format's);
/// - `q8_k: block`: the generated format, its dots left as the reference's;
/// - `F16: float(kernel_module)`: a float type, its `dot` and `PREFILL` from `kernel_module`;
///
/// then any of the table's fields to replace as well (`, quantize: path`). Whatever is not
/// given is the reference's (`formats::<format>::REFERENCE`, `crate::float::<TYPE>`), so a
/// type's entry states only what the fast path adds.
///
/// `fast_kernels! { fn name; entry; ... }` names the lookup `name` instead (a second table in
/// one module, e.g. the AVX-VNNI entries beside the AVX2 ones).
macro_rules! fast_kernels {
    (fn $name:ident; $($key:ident: $kind:ident $(($($kernel:ident)::+))? $(, $field:ident: $value:path)*;)*) => {
        /// The fast kernels for `ty`, if written.
        pub(super) fn $name(ty: $crate::GgmlType) -> Option<&'static $crate::kernel_table::Kernels> {
            match ty {
                $($crate::simd::register::fast_kernels!(@type $kind $key) => {
                    static KERNELS: $crate::kernel_table::Kernels = $crate::simd::register::fast_kernels!(
                        @entry $kind $key ($($($kernel)::+)?) $($field: $value),*
                    );
                    Some(&KERNELS)
                })*
                _ => None,
            }
        }
    };
    (@type block $key:ident) => { $crate::formats::$key::TYPE };
    (@type float $key:ident) => { $crate::GgmlType::$key };
    (@entry block $key:ident ($($kernel:ident)::+) $($field:ident: $value:path),*) => {
        $crate::kernel_table::Kernels {
            $($field: $value,)*
            dot: $crate::kernel_table::Dot::Quant {
                act: $crate::formats::$key::ACT,
                vec_dot: $($kernel)::+::vec_dot,
            },
            tile: Some($($kernel)::+::PREFILL),
            rows: Some($($kernel)::+::rows),
            ..$crate::formats::$key::REFERENCE
        }
    };
    (@entry block $key:ident () $($field:ident: $value:path),*) => {
        $crate::kernel_table::Kernels {
            $($field: $value,)*
            ..$crate::formats::$key::REFERENCE
        }
    };
    (@entry float $key:ident ($($kernel:ident)::+) $($field:ident: $value:path),*) => {
        $crate::kernel_table::Kernels {
            $($field: $value,)*
            dot: $crate::kernel_table::Dot::Float($($kernel)::+::dot),
            tile: Some($($kernel)::+::PREFILL),
            ..$crate::float::$key
        }
    };
    ($($entries:tt)*) => {
        $crate::simd::register::fast_kernels!(fn kernels; $($entries)*);
    };
}
pub(super) use fast_kernels;

/// `encoding_tables! { [extra AVX2 entries] key: module; ... }`: the three x86 tables of
/// formats whose kernels are compiled once per encoding (`module::avx2`, `module::vex`,
/// `module::evex`, as `kquant::common::encodings!` makes them): `kernels`, `vnni_kernels`
/// and `vnni512_kernels`, from one list of formats; the bracketed entries go in the AVX2
/// table only.
#[cfg(target_arch = "x86_64")]
macro_rules! encoding_tables {
    ([$($avx2_only:tt)*] $($key:ident: $($module:ident)::+;)*) => {
        $crate::simd::register::fast_kernels! {
            $($avx2_only)*
            $($key: block($($module)::+::avx2);)*
        }
        $crate::simd::register::fast_kernels! {
            fn vnni_kernels;
            $($key: block($($module)::+::vex);)*
        }
        $crate::simd::register::fast_kernels! {
            fn vnni512_kernels;
            $($key: block($($module)::+::evex);)*
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(super) use encoding_tables;
