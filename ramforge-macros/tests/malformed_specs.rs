//! A malformed spec must be a compile error naming the spec file and what is wrong.

#[test]
fn malformed_specs_are_compile_errors() {
    // The ui files name spec directories relative to this crate; trybuild compiles them
    // from its own project directory, so point the macro's base here.
    std::env::set_var("RAMFORGE_SPECS_BASE", env!("CARGO_MANIFEST_DIR"));
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
