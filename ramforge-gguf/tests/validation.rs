//! The reader against every validation rule, on hand-built byte buffers.

mod common;

use common::Raw;
use ramforge_gguf::{parse_header, GgmlType, GgufError, Metadata, Value, ValueType};

const F32: u32 = 0;
const Q4_0: u32 = 2;

/// The error a buffer must produce; its message must be one line.
fn err(raw: &Raw) -> GgufError {
    let e = raw.parse().expect_err("malformed header was accepted");
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "multi-line message: {msg}");
    e
}

/// One F32 tensor of 8 elements ("w", 32 bytes) after `kv` metadata entries.
fn one_tensor_file(n_kv: u64, kv: impl FnOnce(Raw) -> Raw) -> Raw {
    kv(Raw::header(3, 1, n_kv))
        .tensor("w", &[8], F32, 0)
        .data(32, 32)
}

#[test]
fn minimal_files_parse() {
    let h = Raw::header(3, 0, 0).parse().unwrap();
    assert_eq!((h.version, h.alignment, h.tensors.len()), (3, 32, 0));
    assert_eq!(h.data_offset, 32, "24 header bytes padded to 32");

    let h = one_tensor_file(1, |r| r.kv_str("general.architecture", "llama"))
        .parse()
        .unwrap();
    assert_eq!(h.metadata.get_str("general.architecture").unwrap(), "llama");
    let t = h.tensor("w").unwrap();
    assert_eq!(
        (t.ggml_type, t.n_elements, t.n_bytes),
        (GgmlType::F32, 8, 32)
    );
    assert_eq!(h.data_offset % 32, 0);
    assert_eq!(h.file_len, h.data_offset + 32);

    let v2 = Raw::header(2, 0, 1).kv_u32("a", 1).parse().unwrap();
    assert_eq!(v2.version, 2);
}

#[test]
fn huge_counts_fail_fast_without_allocating() {
    // The 20-byte file: magic, version, 2^60 tensors, and half a metadata count.
    let raw = Raw::header(3, 1 << 60, 0);
    let twenty = Raw(raw.0[..20].to_vec());
    assert!(matches!(
        err(&twenty),
        GgufError::Truncated { offset: 16, .. }
    ));
    // With a whole metadata count the tensor count itself is refused.
    match err(&raw) {
        GgufError::Truncated {
            what,
            needed,
            available,
            ..
        } => {
            assert!(what.contains("1152921504606846976 tensor infos"), "{what}");
            assert!(needed > 1 << 60, "{needed}");
            assert_eq!(available, 0);
        }
        e => panic!("{e}"),
    }
    // u64::MAX counts overflow the bound computation rather than the parser.
    assert!(matches!(
        err(&Raw::header(3, u64::MAX, u64::MAX)),
        GgufError::Truncated { .. }
    ));
    assert!(matches!(
        err(&Raw::header(3, 0, 1 << 62)),
        GgufError::Truncated { .. }
    ));
    // An array and a string claiming 2^60 elements/bytes.
    let arr = Raw::header(3, 0, 1)
        .str("a")
        .u32(9)
        .u32(4)
        .u64(1 << 60)
        .u32(1);
    assert!(matches!(err(&arr), GgufError::Truncated { .. }));
    let s = Raw::header(3, 0, 1)
        .str("a")
        .u32(8)
        .u64(1 << 60)
        .bytes(b"abc");
    assert!(matches!(err(&s), GgufError::Truncated { offset: 45, .. }));
    let key = Raw::header(3, 0, 1).u64(u64::MAX).bytes(b"k");
    assert!(matches!(err(&key), GgufError::Truncated { .. }));
}

#[test]
fn bad_magic_and_versions() {
    let mut raw = Raw::header(3, 0, 0);
    raw.0[..4].copy_from_slice(b"GGML");
    assert!(matches!(err(&raw), GgufError::BadMagic { found } if &found == b"GGML"));
    assert!(matches!(
        err(&Raw(b"GG".to_vec())),
        GgufError::Truncated { offset: 0, .. }
    ));
    assert!(matches!(err(&Raw(Vec::new())), GgufError::Truncated { .. }));

    let v1 = err(&Raw::header(1, 0, 0));
    assert!(
        v1.to_string().contains("unsupported GGUF version 1"),
        "{v1}"
    );
    assert!(matches!(
        err(&Raw::header(4, 0, 0)),
        GgufError::UnsupportedVersion { version: 4 }
    ));
    assert!(matches!(
        err(&Raw::header(0, 0, 0)),
        GgufError::UnsupportedVersion { version: 0 }
    ));
    let be = err(&Raw::header(3u32.swap_bytes(), 0, 0));
    assert!(matches!(be, GgufError::BigEndian { .. }), "{be}");
    assert!(be.to_string().contains("big-endian"));
}

#[test]
fn alignment_must_be_a_nonzero_power_of_two() {
    for bad in [0u32, 3, 48, 1000] {
        let raw = one_tensor_file(1, |r| r.kv_u32("general.alignment", bad));
        match err(&raw) {
            GgufError::BadAlignment { offset, value } => {
                assert_eq!(value, bad as u64);
                // magic 4 + version 4 + counts 16 + key (8 + 17) + type 4
                assert_eq!(offset, 53);
            }
            e => panic!("{bad}: {e}"),
        }
    }
    let s = one_tensor_file(1, |r| r.kv_str("general.alignment", "64"));
    assert!(matches!(err(&s), GgufError::BadKeyType { key, .. } if key == "general.alignment"));
    let neg = one_tensor_file(1, |r| r.str("general.alignment").u32(5).u32(-32i32 as u32));
    assert!(matches!(err(&neg), GgufError::BadKeyType { .. }));

    // A valid alignment moves the data section and constrains tensor offsets.
    let raw = Raw::header(3, 1, 1)
        .kv_u32("general.alignment", 256)
        .tensor("w", &[8], F32, 0)
        .data(256, 32);
    let h = raw.parse().unwrap();
    assert_eq!((h.alignment, h.data_offset), (256, 256));
    let one = Raw::header(3, 1, 1)
        .kv_u32("general.alignment", 1)
        .tensor("w", &[8], F32, 0)
        .data(1, 32);
    assert_eq!(one.parse().unwrap().data_offset as usize, one.len() - 32);
}

#[test]
fn tensor_names_are_at_most_64_bytes() {
    let ok = "n".repeat(64);
    let raw = Raw::header(3, 1, 0).tensor(&ok, &[8], F32, 0).data(32, 32);
    assert_eq!(raw.parse().unwrap().tensors[0].name, ok);
    let long = "n".repeat(65);
    let raw = Raw::header(3, 1, 0)
        .tensor(&long, &[8], F32, 0)
        .data(32, 32);
    assert!(matches!(
        err(&raw),
        GgufError::TensorNameTooLong {
            offset: 24,
            len: 65
        }
    ));
    // A name length of 2^63 is refused by the limit, before any read or allocation.
    let huge = Raw::header(3, 1, 0).u64(1 << 63).bytes(&[0; 40]);
    assert!(matches!(err(&huge), GgufError::TensorNameTooLong { .. }));
}

#[test]
fn duplicates_are_refused() {
    let raw = Raw::header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
    match err(&raw) {
        GgufError::DuplicateKey { offset, key } => {
            assert_eq!(key, "a.b");
            assert_eq!(offset, 24 + 8 + 3 + 4 + 4, "offset of the second entry");
        }
        e => panic!("{e}"),
    }
    let raw = Raw::header(3, 2, 0)
        .tensor("w", &[8], F32, 0)
        .tensor("w", &[8], F32, 32)
        .data(32, 64);
    assert!(matches!(err(&raw), GgufError::DuplicateTensor { name, .. } if name == "w"));
}

#[test]
fn rows_must_be_whole_blocks() {
    let raw = Raw::header(3, 1, 0)
        .tensor("q", &[48, 2], Q4_0, 0)
        .data(32, 64);
    match err(&raw) {
        GgufError::RaggedRow {
            offset,
            tensor,
            ty,
            ne0,
            block_size,
        } => {
            assert_eq!(
                (offset, tensor.as_str(), ty),
                (Some(24), "q", GgmlType::Q4_0)
            );
            assert_eq!((ne0, block_size), (48, 32));
        }
        e => panic!("{e}"),
    }
    // 64 elements per row = 2 blocks of 18 bytes, 2 rows.
    let raw = Raw::header(3, 1, 0)
        .tensor("q", &[64, 2], Q4_0, 0)
        .data(32, 72);
    let t = raw.parse().unwrap().tensors.remove(0);
    assert_eq!(
        (t.row_len(), t.n_rows(), t.row_bytes(), t.n_bytes),
        (64, 2, 36, 72)
    );
}

#[test]
fn dims_must_be_one_to_four_and_nonzero() {
    for n in [0u32, 5] {
        let raw = Raw::header(3, 1, 0).str("w").u32(n).bytes(&[1; 64]);
        assert!(matches!(err(&raw), GgufError::BadDims { n_dims, .. } if n_dims == n));
    }
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[8, 0], F32, 0)
        .data(32, 32);
    assert!(matches!(err(&raw), GgufError::ZeroDim { dim: 1, .. }));
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[1, 1, 1, 8], F32, 0)
        .data(32, 32);
    assert_eq!(raw.parse().unwrap().tensors[0].shape, vec![1, 1, 1, 8]);
}

#[test]
fn sizes_use_checked_arithmetic() {
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[1 << 32, 1 << 32, 1 << 32], F32, 0)
        .data(32, 32);
    assert!(matches!(err(&raw), GgufError::SizeOverflow { .. }));
    // Fits u64 elements but not bytes.
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[1 << 62], F32, 0)
        .data(32, 32);
    assert!(matches!(err(&raw), GgufError::SizeOverflow { .. }));
    // Representable, but far larger than the file.
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[1 << 40], F32, 0)
        .data(32, 32);
    assert!(matches!(err(&raw), GgufError::TensorOutOfBounds { .. }));
    // An offset that overflows when added to the data section start.
    let raw = Raw::header(3, 1, 0)
        .tensor("w", &[8], F32, u64::MAX - 31)
        .data(32, 32);
    assert!(matches!(err(&raw), GgufError::TensorOutOfBounds { .. }));
}

#[test]
fn offsets_aligned_in_bounds_and_disjoint() {
    let raw = Raw::header(3, 1, 0).tensor("w", &[8], F32, 16).data(32, 64);
    assert!(matches!(
        err(&raw),
        GgufError::MisalignedTensor {
            offset: 16,
            alignment: 32,
            ..
        }
    ));

    let raw = Raw::header(3, 1, 0).tensor("w", &[8], F32, 0).data(32, 31);
    match err(&raw) {
        GgufError::TensorOutOfBounds {
            tensor,
            offset,
            size,
            file_len,
        } => {
            assert_eq!((tensor.as_str(), offset, size), ("w", 64, 32));
            assert_eq!(file_len, 95);
        }
        e => panic!("{e}"),
    }
    // file_len smaller than the bytes given: the reader trusts file_len for data bounds.
    let raw = Raw::header(3, 1, 0).tensor("w", &[8], F32, 0).data(32, 32);
    assert!(parse_header(&raw.0, raw.len() as u64 - 1).is_err());

    let raw = Raw::header(3, 2, 0)
        .tensor("a", &[16], F32, 0)
        .tensor("b", &[8], F32, 32)
        .data(32, 96);
    match err(&raw) {
        GgufError::OverlappingTensors { first, second, .. } => {
            assert_eq!((first.as_str(), second.as_str()), ("a", "b"));
        }
        e => panic!("{e}"),
    }
    // Same start, listed out of order: still an overlap.
    let raw = Raw::header(3, 2, 0)
        .tensor("a", &[8], F32, 32)
        .tensor("b", &[8], F32, 32)
        .data(32, 64);
    assert!(matches!(err(&raw), GgufError::OverlappingTensors { .. }));
    // Out of file order but disjoint is fine.
    let raw = Raw::header(3, 2, 0)
        .tensor("a", &[8], F32, 32)
        .tensor("b", &[8], F32, 0)
        .data(32, 64);
    assert_eq!(raw.parse().unwrap().tensors[0].name, "a");
}

#[test]
fn unknown_types_are_reported_by_id() {
    for id in [4u32, 5, 31, 36, 41, 1000, u32::MAX] {
        let raw = Raw::header(3, 1, 0).tensor("w", &[32], id, 0).data(32, 128);
        match err(&raw) {
            GgufError::UnknownTensorType {
                id: got,
                tensor,
                offset,
            } => {
                assert_eq!((got, tensor.as_str()), (id, "w"));
                assert_eq!(offset, 24 + 8 + 1 + 4 + 8);
                assert!(err(&raw).to_string().contains(&format!("id {id}")));
            }
            e => panic!("{id}: {e}"),
        }
    }
    let raw = Raw::header(3, 0, 1).str("k").u32(13).u32(0);
    assert!(matches!(
        err(&raw),
        GgufError::BadValueType {
            type_id: 13,
            offset: 33,
            ..
        }
    ));
    let raw = Raw::header(3, 0, 1).str("k").u32(9).u32(77).u64(0);
    assert!(matches!(
        err(&raw),
        GgufError::BadValueType { type_id: 77, .. }
    ));
}

#[test]
fn all_value_types_and_nested_arrays() {
    let raw = Raw::header(3, 0, 14)
        .str("u8")
        .u32(0)
        .u8(200)
        .str("i8")
        .u32(1)
        .u8(0xff)
        .str("u16")
        .u32(2)
        .bytes(&60000u16.to_le_bytes())
        .str("i16")
        .u32(3)
        .bytes(&(-2i16).to_le_bytes())
        .str("u32")
        .u32(4)
        .u32(4_000_000_000)
        .str("i32")
        .u32(5)
        .u32(-5i32 as u32)
        .str("f32")
        .u32(6)
        .bytes(&1.5f32.to_le_bytes())
        .str("bool")
        .u32(7)
        .u8(1)
        .str("str")
        .u32(8)
        .str("héllo")
        .str("u64")
        .u32(10)
        .u64(u64::MAX)
        .str("i64")
        .u32(11)
        .u64(-7i64 as u64)
        .str("f64")
        .u32(12)
        .bytes(&(-0.25f64).to_le_bytes())
        // [[1, 2], [], [3]] as an array of u8 arrays.
        .str("nested")
        .u32(9)
        .u32(9)
        .u64(3)
        .u32(0)
        .u64(2)
        .u8(1)
        .u8(2)
        .u32(0)
        .u64(0)
        .u32(0)
        .u64(1)
        .u8(3)
        .str("strs")
        .u32(9)
        .u32(8)
        .u64(2)
        .str("a")
        .str("");
    let h = raw.parse().unwrap();
    let m = &h.metadata;
    assert_eq!(m.get("u8"), Some(&Value::U8(200)));
    assert_eq!(m.get("i8"), Some(&Value::I8(-1)));
    assert_eq!(m.get("u16"), Some(&Value::U16(60000)));
    assert_eq!(m.get("i16"), Some(&Value::I16(-2)));
    assert_eq!(m.get_u32("u32").unwrap(), 4_000_000_000);
    assert_eq!(m.get("i32"), Some(&Value::I32(-5)));
    assert_eq!(m.get_f32("f32").unwrap(), 1.5);
    assert!(m.get_bool("bool").unwrap());
    assert_eq!(m.get_str("str").unwrap(), "héllo");
    assert_eq!(m.get_u64("u64").unwrap(), u64::MAX);
    assert_eq!(m.get_i64("i64").unwrap(), -7);
    assert_eq!(m.get("f64"), Some(&Value::F64(-0.25)));
    let (t, items) = m.get_array("nested").unwrap();
    assert_eq!((t, items.len()), (ValueType::Array, 3));
    assert_eq!(
        items[0],
        Value::Array(ValueType::U8, vec![Value::U8(1), Value::U8(2)])
    );
    assert_eq!(items[1], Value::Array(ValueType::U8, vec![]));
    assert_eq!(m.get_str_array("strs").unwrap(), vec!["a", ""]);
    let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
    assert_eq!(keys[..3], ["u8", "i8", "u16"], "file order kept");
}

#[test]
fn nesting_is_bounded() {
    // Arrays nested MAX_ARRAY_DEPTH deep parse; one more level is refused.
    let nest = |levels: usize| {
        let mut r = Raw::header(3, 0, 1).str("deep").u32(9);
        for _ in 1..levels {
            r = r.u32(9).u64(1);
        }
        r.u32(0).u64(1).u8(7)
    };
    let ok = nest(ramforge_gguf::MAX_ARRAY_DEPTH).parse().unwrap();
    assert!(ok.metadata.get_array("deep").is_ok());
    let deep = nest(ramforge_gguf::MAX_ARRAY_DEPTH + 1);
    assert!(matches!(err(&deep), GgufError::NestingTooDeep { key, .. } if key == "deep"));
}

#[test]
fn bad_bytes_in_values() {
    let raw = Raw::header(3, 0, 1).str("b").u32(7).u8(2);
    assert!(matches!(err(&raw), GgufError::OutOfRange { key, .. } if key == "b"));
    let raw = Raw::header(3, 0, 1)
        .str("s")
        .u32(8)
        .u64(3)
        .bytes(&[b'a', 0xff, b'b']);
    assert!(matches!(
        err(&raw),
        GgufError::InvalidUtf8 { offset: 46, .. }
    ));
    let raw = Raw::header(3, 0, 1)
        .u64(2)
        .bytes(&[0xc3, 0x28])
        .u32(4)
        .u32(0);
    assert!(matches!(
        err(&raw),
        GgufError::InvalidUtf8 { offset: 32, .. }
    ));
    let raw = Raw::header(3, 1, 0)
        .u64(2)
        .bytes(&[0xc3, 0x28])
        .bytes(&[0; 40]);
    assert!(matches!(err(&raw), GgufError::InvalidUtf8 { .. }));
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let infos = Raw::header(3, 3, 4)
        .kv_str("general.architecture", "llama")
        .kv_u32("general.alignment", 64)
        .str("arr")
        .u32(9)
        .u32(8)
        .u64(2)
        .str("x")
        .str("yz")
        .str("nest")
        .u32(9)
        .u32(9)
        .u64(1)
        .u32(6)
        .u64(1)
        .bytes(&2.0f32.to_le_bytes())
        .tensor("a", &[32, 2], Q4_0, 0)
        .tensor("b", &[3], F32, 64)
        .tensor("c", &[5, 1, 1], F32, 128);
    let header_end = infos.len();
    let raw = infos.data(64, 128 + 20);
    let full = raw.parse().unwrap();
    assert_eq!(full.tensors.len(), 3);
    for n in 0..raw.len() {
        let prefix = &raw.0[..n];
        // The prefix as a whole (short) file, and as the start of a file of full length.
        assert!(
            parse_header(prefix, n as u64).is_err(),
            "prefix {n} accepted"
        );
        let as_start = parse_header(prefix, raw.len() as u64);
        assert_eq!(as_start.is_ok(), n >= header_end, "prefix {n}");
    }
}

#[test]
fn typed_getters_say_what_is_wrong() {
    let mut m = Metadata::new();
    m.set("n", Value::U32(7));
    m.set("neg", Value::I32(-1));
    m.set("s", Value::String("x".into()));
    m.set("big", Value::U64(u64::MAX));
    m.set(
        "fs",
        Value::Array(ValueType::F32, vec![Value::F32(0.5), Value::F32(2.0)]),
    );
    m.set(
        "ss",
        Value::Array(ValueType::String, vec![Value::String("a".into())]),
    );
    let msg = |e: GgufError| e.to_string();
    assert_eq!(
        msg(m.get_u32("missing").unwrap_err()),
        "missing metadata key \"missing\""
    );
    assert_eq!(
        msg(m.get_u32("s").unwrap_err()),
        "metadata key \"s\" has type string, expected unsigned integer"
    );
    assert!(matches!(
        m.get_u32("big"),
        Err(GgufError::OutOfRange { .. })
    ));
    assert!(matches!(m.get_u64("neg"), Err(GgufError::WrongType { .. })));
    assert_eq!(m.get_i64("neg").unwrap(), -1);
    assert_eq!(m.get_f32("n").unwrap(), 7.0);
    assert_eq!(m.get_f32_array("fs").unwrap(), vec![0.5, 2.0]);
    assert!(matches!(
        m.get_str_array("fs"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        m.get_f32_array("ss"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        m.get_i64_array("fs"),
        Err(GgufError::WrongType { .. })
    ));
    assert_eq!(m.opt("n", Metadata::get_u32).unwrap(), Some(7));
    assert_eq!(m.opt("missing", Metadata::get_u32).unwrap(), None);
    assert!(m.opt("s", Metadata::get_u32).is_err());
    // `set` replaces in place and keeps the order.
    m.set("n", Value::U8(1));
    assert_eq!(m.iter().next().unwrap(), ("n", &Value::U8(1)));
    assert!(!m.insert("n".into(), Value::U8(2)), "insert never replaces");
}
