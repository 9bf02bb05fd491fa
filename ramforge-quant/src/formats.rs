//! The block formats, generated at compile time from the spec files in `specs/` by
//! `ramforge_macros::block_formats!` (one module per format, plus the `kernels` lookup).

ramforge_macros::block_formats!("../specs");
