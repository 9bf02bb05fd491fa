//! Rebuild when any spec is added, removed or changed (the macro also `include_bytes!`s each).
fn main() {
    println!("cargo:rerun-if-changed=../specs");
}
