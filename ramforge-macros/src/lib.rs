//! ramforge-macros: turns the block-format specs in `specs/` into quantization code.
//!
//! `block_formats!("../specs")` reads every `*.toml` spec in the directory (relative to the
//! invoking crate's `CARGO_MANIFEST_DIR`, or to `RAMFORGE_SPECS_BASE` when that is set, which
//! the compile-fail tests use) and expands, per format, to a module with a `#[repr(C)]` block
//! type (size and field offsets checked at compile time, offsets also as `OFFSET_<FIELD>`),
//! its geometry (`BLOCK`, `BYTES`, checked against the `GgmlType` table at compile time),
//! `dequantize_row`, a reference `quantize_row`, a block-wise `vec_dot` against the
//! activation type, a reference `matvec`; plus the list of all formats (`ALL`,
//! `for_each_format!`) and a `kernels(GgmlType)` lookup. `format_tests!` expands, from the same
//! specs, to each format's property tests. The expansion is meant for `ramforge-quant`: it
//! names `crate::GgmlType`, `crate::kernel_table`, `crate::spec_support` and (the tests) the
//! crate's public functions.
//!
//! A malformed spec is a compile error naming the spec file and what is wrong.

mod gen;
mod spec;

use proc_macro::TokenStream;
use std::path::{Path, PathBuf};

/// Generates the block formats declared by the spec files in a directory.
#[proc_macro]
pub fn block_formats(input: TokenStream) -> TokenStream {
    let dir = syn::parse_macro_input!(input as syn::LitStr);
    match expand(&dir.value()) {
        Ok(tokens) => tokens.into(),
        Err(msg) => syn::Error::new(dir.span(), msg).to_compile_error().into(),
    }
}

/// Generates the property tests of the formats `block_formats!` generated from the same
/// directory (they live in `crate::formats`).
#[proc_macro]
pub fn format_tests(input: TokenStream) -> TokenStream {
    let dir = syn::parse_macro_input!(input as syn::LitStr);
    match load_specs(&dir.value()) {
        Ok(specs) => {
            let tests = specs.iter().map(gen::format_tests);
            quote::quote!(#(#tests)*).into()
        }
        Err(msg) => syn::Error::new(dir.span(), msg).to_compile_error().into(),
    }
}

fn base_dir() -> PathBuf {
    std::env::var_os("RAMFORGE_SPECS_BASE")
        .or_else(|| std::env::var_os("CARGO_MANIFEST_DIR"))
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn spec_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("spec directory {}: cannot read: {e}", dir.display()))?;
    let mut files = Vec::new();
    for e in entries {
        let path = e
            .map_err(|e| format!("spec directory {}: {e}", dir.display()))?
            .path();
        if path.extension().is_some_and(|x| x == "toml") {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "spec directory {} holds no *.toml spec",
            dir.display()
        ));
    }
    Ok(files)
}

/// Reads and checks every spec of the directory.
fn load_specs(dir: &str) -> Result<Vec<spec::Spec>, String> {
    let dir = base_dir().join(dir);
    let dir = dir.canonicalize().unwrap_or(dir);
    let specs = spec_files(&dir)?
        .iter()
        .map(|p| spec::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    spec::check_set(&specs)?;
    Ok(specs)
}

fn expand(dir: &str) -> Result<proc_macro2::TokenStream, String> {
    let specs = load_specs(dir)?;
    let modules = specs.iter().map(|s| {
        let act = specs
            .iter()
            .find(|a| a.name == s.activation)
            .expect("checked by check_set");
        gen::format_module(s, act)
    });
    let dispatch = gen::dispatch(&specs);
    Ok(quote::quote!(#(#modules)* #dispatch))
}
