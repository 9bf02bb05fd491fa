//! ramforge-macros: turns the block-format specs in `specs/` into quantization code.
