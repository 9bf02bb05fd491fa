//! read(write(x)) == x for generated files, and mutated written files never panic the reader.

use proptest::prelude::*;
use ramforge_gguf::{
    parse_header, GgmlType, GgufError, GgufFile, GgufWriter, Metadata, Value, ValueType,
};

/// A scalar or string value type (arrays are built from these).
fn leaf_type() -> impl Strategy<Value = ValueType> {
    (0u32..13)
        .prop_filter("leaf", |&id| id != 9)
        .prop_map(|id| ValueType::from_id(id).unwrap())
}

/// A value of the given leaf type (floats never NaN, so `==` is meaningful).
fn leaf(ty: ValueType) -> BoxedStrategy<Value> {
    use proptest::num::{f32 as pf32, f64 as pf64};
    match ty {
        ValueType::U8 => any::<u8>().prop_map(Value::U8).boxed(),
        ValueType::I8 => any::<i8>().prop_map(Value::I8).boxed(),
        ValueType::U16 => any::<u16>().prop_map(Value::U16).boxed(),
        ValueType::I16 => any::<i16>().prop_map(Value::I16).boxed(),
        ValueType::U32 => any::<u32>().prop_map(Value::U32).boxed(),
        ValueType::I32 => any::<i32>().prop_map(Value::I32).boxed(),
        ValueType::U64 => any::<u64>().prop_map(Value::U64).boxed(),
        ValueType::I64 => any::<i64>().prop_map(Value::I64).boxed(),
        ValueType::F32 => (pf32::NORMAL | pf32::SUBNORMAL | pf32::ZERO | pf32::INFINITE)
            .prop_map(Value::F32)
            .boxed(),
        ValueType::F64 => (pf64::NORMAL | pf64::ZERO | pf64::INFINITE)
            .prop_map(Value::F64)
            .boxed(),
        ValueType::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        ValueType::String => ".{0,12}".prop_map(Value::String).boxed(),
        ValueType::Array => unreachable!("not a leaf"),
    }
}

/// Any value: leaves, homogeneous arrays of leaves, and arrays of such arrays (up to 3 deep).
fn value() -> impl Strategy<Value = Value> {
    let leaf_value = leaf_type().prop_flat_map(leaf);
    let leaf_array = leaf_type()
        .prop_flat_map(|t| {
            prop::collection::vec(leaf(t), 0..6).prop_map(move |v| Value::Array(t, v))
        })
        .boxed();
    let array_of_arrays = |inner: BoxedStrategy<Value>| {
        prop::collection::vec(inner, 0..4).prop_map(|v| Value::Array(ValueType::Array, v))
    };
    let nested2 = array_of_arrays(leaf_array.clone()).boxed();
    let nested3 = array_of_arrays(nested2.clone()).boxed();
    prop_oneof![4 => leaf_value, 2 => leaf_array, 1 => nested2, 1 => nested3]
}

fn metadata() -> impl Strategy<Value = Metadata> {
    let alignment = prop_oneof![
        Just(None),
        prop::sample::select(vec![1u32, 8, 32, 64, 256]).prop_map(Some)
    ];
    (
        prop::collection::btree_map("[a-z]{1,8}(\\.[a-z_]{1,8}){0,2}", value(), 0..8),
        alignment,
    )
        .prop_map(|(entries, alignment)| {
            let mut m = Metadata::new();
            if let Some(a) = alignment {
                m.set("general.alignment", Value::U32(a));
            }
            for (k, v) in entries {
                m.set(k, v);
            }
            m
        })
}

#[derive(Debug, Clone)]
struct GenTensor {
    name: String,
    ty: GgmlType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

fn tensor(index: usize) -> impl Strategy<Value = GenTensor> {
    let types: Vec<GgmlType> = GgmlType::all().collect();
    (
        prop::sample::select(types),
        1u64..3,
        prop::collection::vec(1u64..4, 0..3),
        any::<u64>(),
    )
        .prop_map(move |(ty, blocks, rest, seed)| {
            let mut shape = vec![blocks * ty.block_size() as u64];
            shape.extend(rest);
            let n = shape.iter().product::<u64>() / ty.block_size() as u64 * ty.type_size() as u64;
            let data = (0..n)
                .map(|i| (seed.wrapping_mul(i + 1) >> 7) as u8)
                .collect();
            GenTensor {
                name: format!("blk.{index}.weight"),
                ty,
                shape,
                data,
            }
        })
}

fn tensors() -> impl Strategy<Value = Vec<GenTensor>> {
    (0usize..5).prop_flat_map(|n| (0..n).map(tensor).collect::<Vec<_>>())
}

fn write(version: u32, m: &Metadata, ts: &[GenTensor]) -> Vec<u8> {
    let mut w = GgufWriter::new(m.clone()).with_version(version);
    for t in ts {
        w.add_tensor(&t.name, t.ty, &t.shape, &t.data).unwrap();
    }
    w.to_bytes().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn read_of_write_is_identity(
        version in 2u32..4,
        m in metadata(),
        ts in tensors(),
    ) {
        let bytes = write(version, &m, &ts);
        let h = parse_header(&bytes, bytes.len() as u64).unwrap();
        prop_assert_eq!(h.version, version);
        prop_assert_eq!(&h.metadata, &m);
        prop_assert_eq!(h.file_len % h.alignment, 0);
        prop_assert_eq!(h.tensors.len(), ts.len());
        for (info, t) in h.tensors.iter().zip(&ts) {
            prop_assert_eq!(&info.name, &t.name);
            prop_assert_eq!(info.ggml_type, t.ty);
            prop_assert_eq!(&info.shape, &t.shape);
            let start = (h.data_offset + info.offset) as usize;
            prop_assert!(bytes[start..start + info.n_bytes as usize] == t.data[..]);
        }
        // Writing what was read gives the same bytes.
        let again: Vec<GenTensor> = h.tensors.iter().zip(&ts).map(|(i, t)| GenTensor {
            name: i.name.clone(), ty: i.ggml_type, shape: i.shape.clone(), data: t.data.clone(),
        }).collect();
        prop_assert!(write(h.version, &h.metadata, &again) == bytes);
    }

    #[test]
    fn mutated_files_are_errors_or_valid_never_panics(
        m in metadata(),
        ts in tensors(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = write(3, &m, &ts);
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let keep = cut.index(bytes.len() + 1);
        if let Ok(h) = parse_header(&bytes[..keep], keep as u64) {
            // Anything accepted must describe tensors that lie inside what was kept.
            for t in &h.tensors {
                prop_assert!(h.data_offset + t.offset + t.n_bytes <= keep as u64);
            }
        }
    }
}

#[test]
fn written_file_reads_back_through_gguf_file() {
    let mut m = Metadata::new();
    m.set("general.architecture", Value::String("llama".into()));
    m.set("general.alignment", Value::U32(64));
    let a: Vec<u8> = (0..18 * 4).map(|i| i as u8).collect();
    let b: Vec<u8> = (0..12).map(|i| 100 + i as u8).collect();
    let mut w = GgufWriter::new(m);
    w.add_tensor("a", GgmlType::Q4_0, &[64, 2], &a).unwrap();
    let info = w.add_tensor("b", GgmlType::F32, &[3], &b).unwrap();
    assert_eq!(info.n_bytes, 12);
    let path = std::env::temp_dir().join(format!("ramforge-gguf-rt-{}.gguf", std::process::id()));
    let len = w.write_file(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.header().file_len, len);
    assert_eq!(f.header().alignment, 64);
    let t = f.tensor("b").unwrap();
    assert_eq!(t.offset, 128, "Q4_0 tensor is 72 bytes, padded to 128");
    let mut got = vec![0; 12];
    f.read_tensor_into(t, &mut got).unwrap();
    assert_eq!(got, b);

    // What a read finds in the file cut short: the first tensor it no longer holds whole.
    let data = f.header().data_offset;
    assert!(
        f.short_read_at(0, len).is_none(),
        "the whole file holds everything"
    );
    assert!(
        f.short_read_at(0, data + 128 + 12).is_none(),
        "only padding cut"
    );
    let in_b = f.short_read_at(0, data + 128 + 5).unwrap().to_string();
    assert!(
        in_b.contains("\"b\"") && in_b.contains(&format!("offset {}", data + 133)),
        "{in_b}"
    );
    assert!(in_b.contains("wanted 12 bytes, got 5"), "{in_b}");
    // Cut in the padding after "a": "b" is the first tensor not held, from its start.
    let gap = f.short_read_at(0, data + 100).unwrap().to_string();
    assert!(
        gap.contains("\"b\"") && gap.contains(&format!("offset {}", data + 128)),
        "{gap}"
    );
    assert!(gap.contains("got 0"), "{gap}");
    let in_a = f.short_read_at(0, data + 10).unwrap().to_string();
    assert!(in_a.contains("\"a\"") && in_a.contains("got 10"), "{in_a}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn writer_refuses_what_the_reader_would() {
    let w = |m: Metadata| GgufWriter::new(m);
    let e = w(Metadata::new())
        .add_tensor("q", GgmlType::Q4_0, &[48], vec![0; 27])
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(e, GgufError::RaggedRow { offset: None, .. }),
        "{e}"
    );
    let e = w(Metadata::new())
        .add_tensor("f", GgmlType::F32, &[4], vec![0; 15])
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(
        e,
        GgufError::TensorDataLength {
            expected: 16,
            got: 15,
            ..
        }
    ));
    let e = w(Metadata::new())
        .add_tensor("f", GgmlType::F32, &[], vec![])
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(e, GgufError::BadDims { offset: None, .. }));

    let mut long = w(Metadata::new());
    long.add_tensor("x".repeat(65), GgmlType::F32, &[1], vec![0; 4])
        .unwrap();
    assert!(matches!(
        long.to_bytes(),
        Err(GgufError::TensorNameTooLong { .. })
    ));

    let mut dup = w(Metadata::new());
    dup.add_tensor("t", GgmlType::F32, &[1], vec![0; 4])
        .unwrap();
    dup.add_tensor("t", GgmlType::F32, &[1], vec![0; 4])
        .unwrap();
    assert!(matches!(
        dup.to_bytes(),
        Err(GgufError::DuplicateTensor { .. })
    ));

    let mut m = Metadata::new();
    m.set("general.alignment", Value::U32(48));
    assert!(matches!(
        w(m).to_bytes(),
        Err(GgufError::BadAlignment { value: 48, .. })
    ));

    // Found by the gguf_structured fuzz target: a valid but huge alignment made the writer
    // allocate gigabytes of padding. It writes alignments up to 1 MiB.
    let mut m = Metadata::new();
    m.set("general.alignment", Value::U64(1 << 40));
    let e = w(m).to_bytes().unwrap_err();
    assert!(
        matches!(&e, GgufError::OutOfRange { key, .. } if key == "general.alignment"),
        "{e}"
    );
    let mut m = Metadata::new();
    m.set("general.alignment", Value::U64(1 << 20));
    let mut big = w(m);
    big.add_tensor("t", GgmlType::F32, &[1], vec![0; 4])
        .unwrap();
    assert_eq!(big.to_bytes().unwrap().len() as u64, 2 << 20);

    let mut m = Metadata::new();
    m.set(
        "mixed",
        Value::Array(ValueType::U32, vec![Value::U32(1), Value::I32(2)]),
    );
    assert!(matches!(w(m).to_bytes(), Err(GgufError::WrongType { .. })));

    assert!(matches!(
        w(Metadata::new()).with_version(1).to_bytes(),
        Err(GgufError::UnsupportedVersion { version: 1 })
    ));

    // A reader that comes up short is caught at write time.
    let mut short = w(Metadata::new());
    let data: &[u8] = &[1, 2, 3];
    short
        .add_tensor(
            "s",
            GgmlType::F32,
            &[1],
            ramforge_gguf::TensorData::Reader(Box::new(data)),
        )
        .unwrap();
    assert!(matches!(
        short.to_bytes(),
        Err(GgufError::TensorDataLength {
            expected: 4,
            got: 3,
            ..
        })
    ));
}
