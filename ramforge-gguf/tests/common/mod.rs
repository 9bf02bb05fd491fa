//! Shared test helpers: a raw GGUF byte builder (independent of the crate's writer, so it can
//! build the malformed files the writer refuses) and model-file location.

#![allow(dead_code)]

use std::path::PathBuf;

/// Little-endian GGUF bytes, appended field by field.
#[derive(Clone, Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version, tensor count, metadata count.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::default()
            .bytes(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u8(self, v: u8) -> Raw {
        self.bytes(&[v])
    }
    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A metadata entry with a u32 value.
    pub fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    /// A metadata entry with a string value.
    pub fn kv_str(self, key: &str, v: &str) -> Raw {
        self.str(key).u32(8).str(v)
    }
    /// A tensor info.
    pub fn tensor(self, name: &str, shape: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(shape.len() as u32);
        for &d in shape {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }
    /// Zero padding up to a multiple of `align`, then `n` data bytes.
    pub fn data(mut self, align: usize, n: usize) -> Raw {
        let pad = self.0.len().div_ceil(align) * align;
        self.0.resize(pad, 0);
        self.0.extend((0..n).map(|i| (i * 7 + 3) as u8));
        self
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Parses the bytes as a whole file.
    pub fn parse(&self) -> Result<ramforge_gguf::GgufHeader, ramforge_gguf::GgufError> {
        ramforge_gguf::parse_header(&self.0, self.0.len() as u64)
    }
}

/// The directory holding the real model files.
pub fn models_dir() -> PathBuf {
    std::env::var_os("RAMFORGE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models"))
}

/// The 18 real model files the project tests against.
pub const MODEL_FILES: [&str; 18] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma-3-270m-q4_k_m.gguf",
    "qwen2ish-Q4_1.gguf",
    "qwen2ish-Q8_0.gguf",
    "smollm2-BF16.gguf",
    "smollm2-F16.gguf",
    "smollm2-IQ4_NL.gguf",
    "smollm2-IQ4_XS.gguf",
    "smollm2-Q2_K-pure.gguf",
    "smollm2-Q3_K_M.gguf",
    "smollm2-Q3_K_S-pure.gguf",
    "smollm2-Q4_0.gguf",
    "smollm2-Q4_K_M.gguf",
    "smollm2-Q5_0.gguf",
    "smollm2-Q5_1.gguf",
    "smollm2-Q5_K_M.gguf",
    "smollm2-Q6_K.gguf",
    "smollm2-Q8_0.gguf",
];

/// The path of a real model file; panics (failing the test) with directions if it is missing.
pub fn model(name: &str) -> PathBuf {
    let p = models_dir().join(name);
    assert!(
        p.is_file(),
        "model file {} is missing: run scripts/test.sh (it fetches the models) or set RAMFORGE_MODELS",
        p.display()
    );
    p
}
