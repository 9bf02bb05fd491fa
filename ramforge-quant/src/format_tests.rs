//! The property tests of every generated format (round trip, matvec against the dequantized
//! dot, rejected lengths), generated from the same specs as the formats themselves.

ramforge_macros::format_tests!("../specs");
