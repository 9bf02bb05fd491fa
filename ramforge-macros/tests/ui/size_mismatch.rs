ramforge_macros::block_formats!("tests/bad_specs/size_mismatch");

fn main() {}
