//! Writes a seed corpus for the `gguf_parse` fuzz target: small files made by the writer
//! (every tensor type, every value type, nested arrays, several alignments, v2 and v3) and
//! shrunken copies of real headers (arrays cut to a few items, tensors cut to one block).
//!
//! `cargo run -p ramforge-gguf --example fuzz_corpus -- OUT_DIR [MODEL.gguf ...]`

use ramforge_gguf::{GgmlType, GgufFile, GgufWriter, Metadata, Value, ValueType};
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let Some((out, models)) = args.split_first() else {
        return Err("usage: fuzz_corpus OUT_DIR [MODEL.gguf ...]".into());
    };
    std::fs::create_dir_all(out)?;
    let mut n = 0;
    for (name, writer) in synthetic() {
        writer.write_file(out.join(format!("synthetic-{name}.gguf")))?;
        n += 1;
    }
    for model in models {
        let stem = model
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("model");
        shrunken(model)?.write_file(out.join(format!("real-{stem}.gguf")))?;
        n += 1;
    }
    println!("{n} seed files in {}", out.display());
    Ok(())
}

/// One value of every type, plus nested arrays.
fn every_value() -> Metadata {
    let mut m = Metadata::new();
    m.set("general.architecture", Value::String("llama".into()));
    m.set("u8", Value::U8(7));
    m.set("i8", Value::I8(-7));
    m.set("u16", Value::U16(700));
    m.set("i16", Value::I16(-700));
    m.set("u32", Value::U32(70_000));
    m.set("i32", Value::I32(-70_000));
    m.set("f32", Value::F32(0.5));
    m.set("bool", Value::Bool(true));
    m.set("u64", Value::U64(1 << 40));
    m.set("i64", Value::I64(-(1 << 40)));
    m.set("f64", Value::F64(-2.5));
    let strs = vec![Value::String("a".into()), Value::String("bc".into())];
    m.set("strs", Value::Array(ValueType::String, strs));
    let inner = Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(-2)]);
    let nested = Value::Array(ValueType::Array, vec![inner.clone(), inner]);
    m.set("nested", Value::Array(ValueType::Array, vec![nested]));
    m
}

fn synthetic() -> Vec<(String, GgufWriter<'static>)> {
    let mut out = vec![
        ("empty-v3".to_string(), GgufWriter::new(Metadata::new())),
        (
            "empty-v2".to_string(),
            GgufWriter::new(Metadata::new()).with_version(2),
        ),
        ("values".to_string(), GgufWriter::new(every_value())),
    ];
    for ty in GgmlType::all() {
        let mut m = Metadata::new();
        m.set(
            "general.alignment",
            Value::U32(if ty.block_size() == 1 { 8 } else { 64 }),
        );
        let mut w = GgufWriter::new(m);
        for (i, shape) in [vec![1u64], vec![2, 3], vec![1, 2, 1, 2]]
            .iter()
            .enumerate()
        {
            let mut shape = shape.clone();
            shape[0] *= ty.block_size() as u64;
            let bytes =
                shape.iter().product::<u64>() / ty.block_size() as u64 * ty.type_size() as u64;
            let data = (0..bytes)
                .map(|b| (b * 31 + i as u64) as u8)
                .collect::<Vec<u8>>();
            w.add_tensor(format!("t{i}.weight"), ty, &shape, data)
                .expect("valid tensor");
        }
        out.push((format!("type-{}", ty.name()), w));
    }
    out
}

/// A real file's header with every array cut to 8 items and every tensor cut to one block
/// (same names, types and number of dimensions), so the seed is small but realistic.
fn shrunken(path: &Path) -> Result<GgufWriter<'static>> {
    let f = GgufFile::open(path)?;
    let h = f.header();
    let mut m = Metadata::new();
    for (k, v) in h.metadata.iter() {
        let v = match v {
            Value::Array(t, items) => Value::Array(*t, items.iter().take(8).cloned().collect()),
            other => other.clone(),
        };
        m.set(k, v);
    }
    let mut w = GgufWriter::new(m).with_version(h.version);
    for t in &h.tensors {
        let mut shape = vec![1u64; t.shape.len()];
        shape[0] = t.ggml_type.block_size() as u64;
        w.add_tensor(
            &t.name,
            t.ggml_type,
            &shape,
            vec![0u8; t.ggml_type.type_size()],
        )?;
    }
    Ok(w)
}
