#![no_main]
//! Structure-aware fuzzing: an arbitrary header description is written by `GgufWriter`
//! (which must produce a file the reader accepts and describes exactly), then the bytes are
//! mutated and truncated to reach the reader's deep validation paths.

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use ramforge_gguf::{parse_header, GgmlType, GgufError, GgufWriter, Metadata, Value, ValueType};

#[derive(Arbitrary, Debug, Clone)]
enum Leaf {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// Homogeneous by construction, nested through `Nested`, at most [`MAX_NESTING`] deep.
#[derive(Debug, Clone)]
enum Array {
    U8(Vec<u8>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    U64(Vec<u64>),
    Nested(Vec<Array>),
}

/// Nesting generated: past the reader's limit, but bounded. A derived `Arbitrary` recursed as
/// deep as the input allowed and overflowed the stack under AddressSanitizer.
const MAX_NESTING: usize = ramforge_gguf::MAX_ARRAY_DEPTH + 2;

impl<'a> Arbitrary<'a> for Array {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Array> {
        array_of_depth(u, 0)
    }
}

fn array_of_depth(u: &mut Unstructured<'_>, depth: usize) -> arbitrary::Result<Array> {
    let kinds = if depth < MAX_NESTING { 7 } else { 6 };
    Ok(match u.choose_index(kinds)? {
        0 => Array::U8(u.arbitrary()?),
        1 => Array::I32(u.arbitrary()?),
        2 => Array::F32(u.arbitrary()?),
        3 => Array::Bool(u.arbitrary()?),
        4 => Array::Str(u.arbitrary()?),
        5 => Array::U64(u.arbitrary()?),
        _ => {
            let n = u.arbitrary_len::<u8>()?;
            let mut items = Vec::new();
            for _ in 0..n {
                items.push(array_of_depth(u, depth + 1)?);
            }
            Array::Nested(items)
        }
    })
}

#[derive(Arbitrary, Debug)]
enum Entry {
    Leaf(Leaf),
    Array(Array),
}

#[derive(Arbitrary, Debug)]
struct Tensor {
    name: String,
    type_index: u8,
    blocks: u8,
    rest: Vec<u8>,
    fill: u8,
}

#[derive(Arbitrary, Debug)]
struct Input {
    v2: bool,
    /// log2 of general.alignment, if set.
    alignment_log2: Option<u8>,
    entries: Vec<(String, Entry)>,
    tensors: Vec<Tensor>,
    /// (position, xor mask) edits applied to the written bytes.
    edits: Vec<(u32, u8)>,
    /// Keep only this many bytes (modulo length + 1), if set.
    cut: Option<u32>,
}

fn leaf(l: Leaf) -> Value {
    match l {
        Leaf::U8(v) => Value::U8(v),
        Leaf::I8(v) => Value::I8(v),
        Leaf::U16(v) => Value::U16(v),
        Leaf::I16(v) => Value::I16(v),
        Leaf::U32(v) => Value::U32(v),
        Leaf::I32(v) => Value::I32(v),
        Leaf::F32(v) => Value::F32(v),
        Leaf::Bool(v) => Value::Bool(v),
        Leaf::Str(v) => Value::String(v),
        Leaf::U64(v) => Value::U64(v),
        Leaf::I64(v) => Value::I64(v),
        Leaf::F64(v) => Value::F64(v),
    }
}

fn array(a: Array) -> Value {
    fn of<T>(t: ValueType, v: Vec<T>, f: impl Fn(T) -> Value) -> Value {
        Value::Array(t, v.into_iter().map(f).collect())
    }
    match a {
        Array::U8(v) => of(ValueType::U8, v, Value::U8),
        Array::I32(v) => of(ValueType::I32, v, Value::I32),
        Array::F32(v) => of(ValueType::F32, v, Value::F32),
        Array::Bool(v) => of(ValueType::Bool, v, Value::Bool),
        Array::Str(v) => of(ValueType::String, v, Value::String),
        Array::U64(v) => of(ValueType::U64, v, Value::U64),
        Array::Nested(v) => of(ValueType::Array, v, array),
    }
}

/// Bit-exact equality, so NaN metadata written and read back compares equal.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(t, x), Value::Array(u, y)) => {
            t == u && x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        _ => a == b,
    }
}

fn build(input: &Input) -> Option<Vec<u8>> {
    let mut m = Metadata::new();
    if let Some(a) = input.alignment_log2 {
        m.set("general.alignment", Value::U64(1u64 << (a % 12)));
    }
    let entries: Vec<(String, Value)> = input
        .entries
        .iter()
        .take(16)
        .map(|(k, e)| {
            let v = match e {
                Entry::Leaf(l) => leaf(l.clone()),
                Entry::Array(a) => array(a.clone()),
            };
            (k.clone(), v)
        })
        .collect();
    for (k, v) in &entries {
        m.set(k.clone(), v.clone());
    }
    let types: Vec<GgmlType> = GgmlType::all().collect();
    let mut w = GgufWriter::new(m.clone()).with_version(if input.v2 { 2 } else { 3 });
    for t in input.tensors.iter().take(6) {
        let ty = types[t.type_index as usize % types.len()];
        let mut shape = vec![(1 + t.blocks as u64 % 4) * ty.block_size() as u64];
        shape.extend(t.rest.iter().take(3).map(|&d| 1 + d as u64 % 4));
        let n = shape.iter().product::<u64>() / ty.block_size() as u64 * ty.type_size() as u64;
        if w.add_tensor(&t.name, ty, &shape, vec![t.fill; n as usize])
            .is_err()
        {
            return None;
        }
    }
    let planned = match w.header() {
        Ok(h) => h,
        // Refusals must be the reader's own (bad names, duplicates, nesting), never I/O.
        Err(GgufError::WriteFailed { .. }) => panic!("in-memory write failed"),
        Err(_) => return None,
    };
    let bytes = w.to_bytes().expect("a planned file writes");
    // The oracle: whatever the writer emits, the reader accepts and describes exactly.
    let h = parse_header(&bytes, bytes.len() as u64).expect("writer output must parse");
    assert_eq!(h.tensors, planned.tensors);
    assert_eq!(h.metadata.len(), m.len());
    for ((k1, v1), (k2, v2)) in h.metadata.iter().zip(m.iter()) {
        assert!(k1 == k2 && same(v1, v2), "metadata {k1:?} changed");
    }
    Some(bytes)
}

fuzz_target!(|input: Input| {
    let Some(mut bytes) = build(&input) else {
        return;
    };
    for &(at, mask) in input.edits.iter().take(8) {
        let i = at as usize % bytes.len();
        bytes[i] ^= mask;
    }
    let keep = input
        .cut
        .map_or(bytes.len(), |c| c as usize % (bytes.len() + 1));
    match parse_header(&bytes[..keep], keep as u64) {
        Ok(h) => {
            for t in &h.tensors {
                assert!(h.data_offset + t.offset + t.n_bytes <= keep as u64);
            }
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
    }
});
