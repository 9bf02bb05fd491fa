//! The reader and writer on the real model files (see `common::MODEL_FILES`).

mod common;

use common::{model, MODEL_FILES};
use ramforge_gguf::{GgmlType, GgufError, GgufFile, GgufWriter};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};

#[test]
fn every_real_file_opens_and_is_consistent() {
    for name in MODEL_FILES {
        let f = GgufFile::open(model(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let h = f.header();
        assert_eq!(h.version, 3, "{name}");
        assert_eq!(h.file_len, std::fs::metadata(model(name)).unwrap().len());
        assert_eq!(h.data_offset % h.alignment, 0);
        assert!(h.metadata.get_str("general.architecture").is_ok(), "{name}");
        // The last tensor ends at the end of the file (all of them are written packed).
        let end = h
            .tensors
            .iter()
            .map(|t| t.offset + t.n_bytes)
            .max()
            .unwrap();
        assert_eq!(h.data_offset + end, h.file_len, "{name}");
        for t in &h.tensors {
            assert_eq!(t.n_rows() * t.row_bytes(), t.n_bytes, "{name} {}", t.name);
            assert_eq!(f.tensor(&t.name).unwrap(), t);
        }
    }
}

#[test]
fn known_facts_of_smollm2_and_gemma() {
    let f = GgufFile::open(model("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let h = f.header();
    let m = &h.metadata;
    assert_eq!(m.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(m.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(m.get_u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(m.get_u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(m.get_u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(m.get_f32("llama.rope.freq_base").unwrap(), 100000.0);
    assert_eq!(m.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(
        m.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );
    assert_eq!(h.tensors.len(), 272);
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.shape, vec![576, 49152]);
    assert_eq!((emb.row_len(), emb.n_rows()), (576, 49152));

    let g = GgufFile::open(model("gemma-3-270m-q4_k_m.gguf")).unwrap();
    let gm = &g.header().metadata;
    assert_eq!(gm.get_str("general.architecture").unwrap(), "gemma3");
    assert_eq!(
        gm.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        262144
    );
    assert_eq!(
        gm.get_f32_array("tokenizer.ggml.scores").unwrap().len(),
        262144
    );
    assert_eq!(
        gm.get_i64_array("tokenizer.ggml.token_type").unwrap().len(),
        262144
    );
    assert!(gm.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert_eq!(g.header().tensors.len(), 236);
}

/// Bytes `[start, start + len)` of a file, read plainly.
fn file_bytes(path: &std::path::Path, start: u64, len: usize) -> Vec<u8> {
    let mut f = File::open(path).unwrap();
    f.seek(SeekFrom::Start(start)).unwrap();
    let mut v = vec![0; len];
    f.read_exact(&mut v).unwrap();
    v
}

#[test]
fn tensor_access_paths_agree() {
    let path = model("smollm2-Q8_0.gguf");
    let f = GgufFile::open(&path).unwrap();
    let t = f.tensor("blk.3.ffn_down.weight").unwrap();
    assert_eq!(t.ggml_type, GgmlType::Q8_0);
    assert_eq!(t.shape, vec![1536, 576]);
    let plain = file_bytes(&path, f.absolute_offset(t), t.n_bytes as usize);

    let mut whole = vec![0; t.n_bytes as usize];
    f.read_tensor_into(t, &mut whole).unwrap();
    assert!(whole == plain);

    let rb = t.row_bytes() as usize;
    assert_eq!(rb, 1536 / 32 * 34);
    let mut rows = vec![0; 3 * rb];
    f.read_range_into(t, 100 * rb as u64, &mut rows).unwrap();
    assert!(rows[..] == plain[100 * rb..103 * rb]);

    let map = f.map_tensor(t).unwrap();
    map.advise_willneed().unwrap();
    map.advise_sequential().unwrap();
    assert!(map.bytes() == &plain[..]);
    map.advise_dontneed().unwrap();
    assert!(map.bytes() == &plain[..], "pages come back after dontneed");

    let mut streamed = Vec::new();
    f.tensor_reader(t).read_to_end(&mut streamed).unwrap();
    assert!(streamed == plain);
}

#[test]
fn tensor_access_errors() {
    let path = model("smollm2-Q8_0.gguf");
    let f = GgufFile::open(&path).unwrap();
    let t = f.tensor("output_norm.weight").unwrap();
    let mut buf = vec![0; 8];
    let e = f.read_range_into(t, t.n_bytes - 4, &mut buf).unwrap_err();
    assert!(matches!(e, GgufError::RangeOutOfTensor { .. }), "{e}");
    let e = f.read_range_into(t, u64::MAX, &mut buf).unwrap_err();
    assert!(matches!(e, GgufError::RangeOutOfTensor { .. }), "{e}");
    let e = f.read_tensor_into(t, &mut buf).unwrap_err();
    assert!(matches!(e, GgufError::TensorDataLength { .. }), "{e}");
    assert!(matches!(
        f.tensor("nope"),
        Err(GgufError::MissingTensor { .. })
    ));

    // A tensor from a bigger file cannot be mapped or read through this one.
    let big = GgufFile::open(model("smollm2-F16.gguf")).unwrap();
    let last = big
        .header()
        .tensors
        .iter()
        .max_by_key(|t| t.offset)
        .unwrap();
    assert!(matches!(
        f.map_tensor(last),
        Err(GgufError::TensorOutOfBounds { .. })
    ));
    let mut buf = vec![0; last.n_bytes as usize];
    assert!(matches!(
        f.read_tensor_into(last, &mut buf),
        Err(GgufError::ShortRead { .. })
    ));

    let e = GgufFile::open("/nonexistent/x.gguf").unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }) && e.to_string().contains("/nonexistent/x.gguf"));
}

#[test]
fn truncated_real_file_fails_at_open() {
    let src = model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let dir = std::env::temp_dir().join(format!("ramforge-gguf-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = GgufFile::open(&src).unwrap();
    let data_offset = f.header().data_offset;
    // Cut inside the token list, just before the data section, and inside the last tensor.
    for cut in [4096, data_offset - 1, f.header().file_len - 1] {
        let p = dir.join("cut.gguf");
        std::fs::write(&p, file_bytes(&src, 0, cut as usize)).unwrap();
        let e = GgufFile::open(&p).unwrap_err();
        assert!(
            matches!(
                e,
                GgufError::Truncated { .. } | GgufError::TensorOutOfBounds { .. }
            ),
            "cut {cut}: {e}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `Write` that compares everything written against a file, byte for byte, without
/// holding either copy.
struct CompareWithFile {
    expected: BufReader<File>,
    pos: u64,
    first_mismatch: Option<u64>,
}

impl Write for CompareWithFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut want = vec![0; buf.len()];
        let n = read_full(&mut self.expected, &mut want)?;
        if self.first_mismatch.is_none() {
            if let Some(i) = (0..buf.len()).find(|&i| i >= n || buf[i] != want[i]) {
                self.first_mismatch = Some(self.pos + i as u64);
            }
        }
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[test]
fn rewriting_real_files_reproduces_their_bytes() {
    // Written by llama.cpp's quantizer (Q4_1, Q4_K_M) and by gguf-py (qwen2ish).
    for name in [
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gemma-3-270m-q4_k_m.gguf",
        "qwen2ish-Q4_1.gguf",
    ] {
        let path = model(name);
        let f = GgufFile::open(&path).unwrap();
        let writer = GgufWriter::copy_of(&f).unwrap();
        assert_eq!(
            &writer.header().unwrap(),
            f.header(),
            "{name}: planned header"
        );
        let mut cmp = CompareWithFile {
            expected: BufReader::with_capacity(1 << 20, File::open(&path).unwrap()),
            pos: 0,
            first_mismatch: None,
        };
        let written = writer.write_to(&mut cmp).unwrap();
        assert_eq!(cmp.first_mismatch, None, "{name}: first differing byte");
        assert_eq!(written, f.header().file_len, "{name}: length");
        let mut rest = [0u8; 1];
        assert_eq!(
            cmp.expected.read(&mut rest).unwrap(),
            0,
            "{name}: original is longer"
        );
    }
}

#[test]
fn every_truncation_of_a_shrunken_real_header_is_an_error() {
    // The real metadata and tensor table of SmolLM2 (arrays cut to 8 items, each tensor cut
    // to one block, so the file is ~27 KB), truncated at every byte.
    let f = GgufFile::open(model("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let h = f.header();
    let mut m = ramforge_gguf::Metadata::new();
    for (k, v) in h.metadata.iter() {
        let v = match v {
            ramforge_gguf::Value::Array(t, items) => {
                ramforge_gguf::Value::Array(*t, items.iter().take(8).cloned().collect())
            }
            other => other.clone(),
        };
        m.set(k, v);
    }
    let mut w = GgufWriter::new(m);
    for t in &h.tensors {
        let mut shape = vec![1u64; t.shape.len()];
        shape[0] = t.ggml_type.block_size() as u64;
        w.add_tensor(
            &t.name,
            t.ggml_type,
            &shape,
            vec![7u8; t.ggml_type.type_size()],
        )
        .unwrap();
    }
    let bytes = w.to_bytes().unwrap();
    let full = ramforge_gguf::parse_header(&bytes, bytes.len() as u64).unwrap();
    assert_eq!(full.tensors.len(), 272);
    let last_end = full.data_offset
        + full
            .tensors
            .iter()
            .map(|t| t.offset + t.n_bytes)
            .max()
            .unwrap();
    for n in 0..bytes.len() {
        let r = ramforge_gguf::parse_header(&bytes[..n], n as u64);
        assert_eq!(r.is_ok(), n as u64 >= last_end, "prefix {n}");
    }
}
