#![no_main]
//! Raw-bytes fuzzing of the GGUF header parser: any input is an error or a header whose
//! tensors lie inside the input; errors are one line; typed getters never panic.

use libfuzzer_sys::fuzz_target;
use ramforge_gguf::{parse_header, Metadata};

fuzz_target!(|data: &[u8]| {
    match parse_header(data, data.len() as u64) {
        Ok(h) => {
            for t in &h.tensors {
                assert!(h.data_offset + t.offset + t.n_bytes <= data.len() as u64);
                assert_eq!(t.n_rows() * t.row_bytes(), t.n_bytes);
            }
            exercise_getters(&h.metadata);
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
    }
});

fn exercise_getters(m: &Metadata) {
    for (key, _) in m.iter() {
        let _ = m.get_str(key);
        let _ = m.get_u32(key);
        let _ = m.get_u64(key);
        let _ = m.get_i64(key);
        let _ = m.get_f32(key);
        let _ = m.get_bool(key);
        let _ = m.get_str_array(key);
        let _ = m.get_f32_array(key);
        let _ = m.get_i64_array(key);
    }
}
