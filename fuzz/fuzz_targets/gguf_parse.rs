#![no_main]
//! Raw-bytes fuzzing of the GGUF header parser.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ramforge_gguf::parse_header(data, data.len() as u64);
});
