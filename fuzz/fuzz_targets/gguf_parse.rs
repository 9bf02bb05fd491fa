#![no_main]
//! Raw-bytes fuzzing of the GGUF header parser: any input is an error or a header whose
//! tensors lie inside the input; errors are one line; typed getters never panic. A header's
//! split keys (`split.no`, `split.count`, `split.tensors.count`) are read as a split model's
//! first shard reads them: an error (one line) or keys that agree; shard names and split sizes
//! parse or fail without a panic.

use libfuzzer_sys::fuzz_target;
use ramforge_gguf::split::{parse_shard_name, parse_split_size};
use ramforge_gguf::{parse_header, Metadata, SplitKeys};

fuzz_target!(|data: &[u8]| {
    match parse_header(data, data.len() as u64) {
        Ok(h) => {
            for t in &h.tensors {
                assert!(h.data_offset + t.offset + t.n_bytes <= data.len() as u64);
                assert_eq!(t.n_rows() * t.row_bytes(), t.n_bytes);
            }
            exercise_getters(&h.metadata);
            match SplitKeys::of(&h.metadata, std::path::Path::new("fuzz.gguf")) {
                Ok(Some(k)) => assert!(k.count >= 1 && k.no < k.count, "{k:?}"),
                Ok(None) => {}
                Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
            }
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
    }
    if let Ok(s) = std::str::from_utf8(data) {
        if let Some((prefix, no, count)) = parse_shard_name(s) {
            assert!(!prefix.is_empty() && no <= 99_999 && count <= 99_999);
        }
        let _ = parse_split_size(s);
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
