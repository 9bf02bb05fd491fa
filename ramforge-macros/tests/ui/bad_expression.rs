ramforge_macros::block_formats!("tests/bad_specs/bad_expression");

fn main() {}
