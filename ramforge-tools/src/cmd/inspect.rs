//! `ramforge-tools inspect MODEL.gguf`: header, metadata and tensor table of a GGUF file (of
//! a split model, given its first shard: every shard, and which one holds each tensor).
//!
//! Only the header is read. Text output uses human sizes and summarizes long arrays and
//! strings; `--json` gives the same facts as one object with exact numbers (metadata in file
//! order, long arrays summarized as element type, length and first items).

use crate::error::CmdResult;
use ramforge_engine::budget::human_bytes;
use ramforge_gguf::{GgmlType, GgufFile, GgufHeader, Metadata, TensorInfo, Value};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

/// Arrays longer than this are summarized (length + the first `ARRAY_HEAD` items).
const ARRAY_FULL_MAX: usize = 16;
const ARRAY_HEAD: usize = 8;
/// Strings longer than this are cut in text output (JSON keeps them whole).
const TEXT_STRING_MAX: usize = 72;

/// Describe a GGUF file: header, metadata, tensors, per-type summary.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    pub model: PathBuf,
    /// Print everything as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let file = GgufFile::open(&args.model)?;
    let report = Report::new(&args.model, &file);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        report.write_text(&mut out)?;
    }
    out.flush()?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Everything `inspect` prints, in the shape of its JSON output.
#[derive(Serialize)]
struct Report<'a> {
    file: String,
    version: u32,
    alignment: u64,
    /// The first shard's, for a split model.
    data_offset: u64,
    /// The model's files: one, or each shard of a split in order.
    shards: Vec<ShardRow>,
    tensor_count: usize,
    metadata_count: usize,
    /// Bytes of the chat template (`tokenizer.chat_template`), `None` when the file has none:
    /// a template is a program the chat commands run, so its presence is worth a glance.
    chat_template_bytes: Option<usize>,
    /// The mixture-of-experts layers, `None` for a dense model.
    experts: Option<Experts>,
    metadata: MetadataJson<'a>,
    /// In file order (shard by shard); `offset` is relative to its shard's data section,
    /// `file_offset` absolute in its shard's file.
    tensors: Vec<TensorRow<'a>>,
    /// One row per tensor type, by descending bytes.
    types: Vec<TypeRow>,
    totals: Totals,
}

#[derive(Serialize)]
struct ShardRow {
    file: String,
    bytes: u64,
    data_offset: u64,
    tensors: usize,
}

#[derive(Serialize)]
struct TensorRow<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    ty: &'static str,
    shape: &'a [u64],
    /// Index of the shard (file) that holds its data: 0 in a file of its own.
    shard: usize,
    offset: u64,
    file_offset: u64,
    bytes: u64,
}

/// What the `blk.N.ffn_{gate,up,down}_exps` tensors hold, from the header alone (so a file
/// the engine refuses is still described): one expert is its three slices in one layer.
#[derive(Serialize)]
struct Experts {
    /// Experts per layer: the last dimension of the `_exps` tensors.
    count: u64,
    /// `<arch>.expert_used_count`, when the file has it.
    used: Option<u64>,
    /// Width of one expert's FFN: the output rows of its gate slice.
    feed_forward_length: u64,
    /// Layers with expert tensors.
    layers: usize,
    /// Bytes of one expert (gate + up + down slices of one layer; the largest layer's).
    bytes_per_expert: u64,
    /// Bytes of every expert of every layer.
    bytes: u64,
    /// Fraction of the weight bytes.
    share: f64,
}

impl Experts {
    fn new(h: &GgufHeader, weight_bytes: u64) -> Option<Experts> {
        let mut per_layer: BTreeMap<&str, u64> = BTreeMap::new();
        let mut count = 0;
        let mut width = 0;
        for t in &h.tensors {
            let Some(rest) = t.name.strip_prefix("blk.") else {
                continue;
            };
            let Some((layer, name)) = rest.split_once('.') else {
                continue;
            };
            if !name.starts_with("ffn_") || !name.ends_with("_exps.weight") {
                continue;
            }
            *per_layer.entry(layer).or_default() += t.n_bytes;
            count = count.max(t.shape.get(2).copied().unwrap_or(0));
            if name == "ffn_gate_exps.weight" {
                width = width.max(t.shape.get(1).copied().unwrap_or(0));
            }
        }
        if count == 0 {
            return None;
        }
        let used = h
            .metadata
            .get_str("general.architecture")
            .ok()
            .and_then(|arch| h.metadata.get(&format!("{arch}.expert_used_count")))
            .and_then(Value::as_u64);
        let bytes: u64 = per_layer.values().sum();
        Some(Experts {
            count,
            used,
            feed_forward_length: width,
            layers: per_layer.len(),
            bytes_per_expert: per_layer.values().max().copied().unwrap_or(0) / count,
            bytes,
            share: bytes as f64 / weight_bytes.max(1) as f64,
        })
    }
}

#[derive(Serialize)]
struct TypeRow {
    #[serde(rename = "type")]
    ty: &'static str,
    count: usize,
    bytes: u64,
    /// Fraction of the weight bytes.
    share: f64,
}

#[derive(Serialize)]
struct Totals {
    file_bytes: u64,
    /// Bytes of all tensor data.
    weight_bytes: u64,
    /// What the tensors would take as F32.
    f32_bytes: u64,
    elements: u64,
}

impl<'a> Report<'a> {
    fn new(path: &std::path::Path, file: &'a GgufFile) -> Report<'a> {
        let h = file.header();
        let tensors = h.tensors.iter().map(|t| tensor_row(file, t)).collect();
        let shards = file
            .shards()
            .iter()
            .enumerate()
            .map(|(i, s)| ShardRow {
                file: s.path().display().to_string(),
                bytes: s.len(),
                data_offset: s.data_offset(),
                tensors: h.tensors.iter().filter(|t| t.shard == i).count(),
            })
            .collect();
        let weight_bytes: u64 = h.tensors.iter().map(|t| t.n_bytes).sum();
        let elements: u64 = h.tensors.iter().map(|t| t.n_elements).sum();
        Report {
            file: path.display().to_string(),
            version: h.version,
            alignment: h.alignment,
            data_offset: h.data_offset,
            shards,
            tensor_count: h.tensors.len(),
            metadata_count: h.metadata.len(),
            chat_template_bytes: h
                .metadata
                .get_str(ramforge_engine::text::template::TEMPLATE_KEY)
                .ok()
                .map(str::len),
            experts: Experts::new(h, weight_bytes),
            metadata: MetadataJson(&h.metadata),
            tensors,
            types: type_rows(&h.tensors, weight_bytes),
            totals: Totals {
                file_bytes: file.total_len(),
                weight_bytes,
                f32_bytes: elements * 4,
                elements,
            },
        }
    }

    fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(out, "{}", self.file)?;
        writeln!(out, "  GGUF version   {}", self.version)?;
        writeln!(out, "  tensors        {}", self.tensor_count)?;
        writeln!(out, "  metadata keys  {}", self.metadata_count)?;
        writeln!(out, "  alignment      {}", self.alignment)?;
        match self.chat_template_bytes {
            Some(n) => writeln!(
                out,
                "  chat template  {} ({n} bytes)",
                human_bytes(n as u64)
            )?,
            None => writeln!(out, "  chat template  none (no tokenizer.chat_template)")?,
        }
        if let Some(e) = &self.experts {
            let used = e
                .used
                .map_or(String::new(), |u| format!(", {u} used per token"));
            writeln!(
                out,
                "  experts        {} per layer{used}, width {}, {} each; {} layers, {} ({:.1}% of weights)",
                e.count,
                e.feed_forward_length,
                human_bytes(e.bytes_per_expert),
                e.layers,
                human_bytes(e.bytes),
                e.share * 100.0
            )?;
        }
        writeln!(
            out,
            "  data offset    {} ({})",
            self.data_offset,
            human_bytes(self.data_offset)
        )?;
        let split = self.shards.len() > 1;
        if split {
            writeln!(out, "  shards         {}", self.shards.len())?;
            for (i, s) in self.shards.iter().enumerate() {
                writeln!(
                    out,
                    "    {i:>3}  {}  {}, {} tensors, data at {}",
                    s.file,
                    human_bytes(s.bytes),
                    s.tensors,
                    s.data_offset
                )?;
            }
        }

        writeln!(out, "\nmetadata:")?;
        let key_width = self
            .metadata
            .0
            .iter()
            .map(|(k, _)| k.len())
            .max()
            .unwrap_or(0);
        for (key, value) in self.metadata.0.iter() {
            writeln!(
                out,
                "  {key:key_width$}  {:<8} {}",
                type_label(value),
                text_value(value)
            )?;
        }

        writeln!(out, "\ntensors:")?;
        let name_width = self.tensors.iter().map(|t| t.name.len()).max().unwrap_or(4);
        let shard_head = if split { "shard " } else { "" };
        writeln!(
            out,
            "  {:name_width$}  {:<7} {:<22} {shard_head}{:>12} {:>10}",
            "name", "type", "shape", "offset", "size"
        )?;
        for t in &self.tensors {
            let shard = if split {
                format!("{:>5} ", t.shard)
            } else {
                String::new()
            };
            writeln!(
                out,
                "  {:name_width$}  {:<7} {:<22} {shard}{:>12} {:>10}",
                t.name,
                t.ty,
                format!("{:?}", t.shape),
                t.offset,
                human_bytes(t.bytes)
            )?;
        }

        writeln!(out, "\ntypes:")?;
        writeln!(
            out,
            "  {:<8} {:>6} {:>11} {:>7}",
            "type", "count", "size", "share"
        )?;
        for r in &self.types {
            writeln!(
                out,
                "  {:<8} {:>6} {:>11} {:>6.1}%",
                r.ty,
                r.count,
                human_bytes(r.bytes),
                r.share * 100.0
            )?;
        }

        let t = &self.totals;
        writeln!(out, "\ntotals:")?;
        writeln!(out, "  file            {}", human_bytes(t.file_bytes))?;
        writeln!(out, "  weights         {}", human_bytes(t.weight_bytes))?;
        writeln!(
            out,
            "  as F32          {} ({:.2} bits per weight)",
            human_bytes(t.f32_bytes),
            t.weight_bytes as f64 * 8.0 / t.elements.max(1) as f64
        )?;
        writeln!(out, "  parameters      {}", t.elements)
    }
}

fn tensor_row<'a>(file: &GgufFile, t: &'a TensorInfo) -> TensorRow<'a> {
    TensorRow {
        name: &t.name,
        ty: t.ggml_type.name(),
        shape: &t.shape,
        shard: t.shard,
        offset: t.offset,
        file_offset: file.absolute_offset(t),
        bytes: t.n_bytes,
    }
}

fn type_rows(tensors: &[TensorInfo], weight_bytes: u64) -> Vec<TypeRow> {
    let mut by_type: BTreeMap<GgmlType, (usize, u64)> = BTreeMap::new();
    for t in tensors {
        let e = by_type.entry(t.ggml_type).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    let mut rows: Vec<TypeRow> = by_type
        .into_iter()
        .map(|(ty, (count, bytes))| TypeRow {
            ty: ty.name(),
            count,
            bytes,
            share: bytes as f64 / weight_bytes.max(1) as f64,
        })
        .collect();
    rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.ty.cmp(b.ty)));
    rows
}

/// "u32", "string", "[f32]", "[[i32]]".
fn type_label(v: &Value) -> String {
    match v.as_array() {
        Some((_, items)) if matches!(items.first(), Some(Value::Array(..))) => {
            format!("[{}]", type_label(&items[0]))
        }
        Some((elem, _)) => format!("[{}]", elem.name()),
        None => v.value_type().name().to_string(),
    }
}

/// A value for people: strings quoted and cut, long arrays as length + first items.
fn text_value(v: &Value) -> String {
    match v {
        Value::String(s) => quoted_cut(s),
        Value::Array(_, items) => {
            let shown: Vec<String> = items
                .iter()
                .take(if items.len() > ARRAY_FULL_MAX {
                    ARRAY_HEAD
                } else {
                    ARRAY_FULL_MAX
                })
                .map(text_value)
                .collect();
            if items.len() > ARRAY_FULL_MAX {
                format!("{} items: [{}, ...]", items.len(), shown.join(", "))
            } else {
                format!("[{}]", shown.join(", "))
            }
        }
        Value::F32(f) => f.to_string(),
        Value::F64(f) => f.to_string(),
        other => other
            .as_i64()
            .map(|i| i.to_string())
            .or_else(|| other.as_u64().map(|u| u.to_string()))
            .or_else(|| other.as_bool().map(|b| b.to_string()))
            .unwrap_or_default(),
    }
}

/// A string in escaped, quoted form, cut to `TEXT_STRING_MAX` characters.
fn quoted_cut(s: &str) -> String {
    let n = s.chars().count();
    if n <= TEXT_STRING_MAX {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(TEXT_STRING_MAX).collect();
    format!("{head:?}... ({n} chars)")
}

/// Metadata as a JSON object in file order.
struct MetadataJson<'a>(&'a Metadata);

impl Serialize for MetadataJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0.iter() {
            map.serialize_entry(k, &ValueJson(v))?;
        }
        map.end()
    }
}

/// A value as JSON: numbers exact, arrays of up to `ARRAY_FULL_MAX` items in full, longer
/// ones as `{"array_of", "len", "first"}`.
struct ValueJson<'a>(&'a Value);

impl Serialize for ValueJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::U8(v) => s.serialize_u8(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::U16(v) => s.serialize_u16(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::U32(v) => s.serialize_u32(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::U64(v) => s.serialize_u64(*v),
            Value::I64(v) => s.serialize_i64(*v),
            // f32 widened exactly, so the JSON number is the stored value.
            Value::F32(v) => s.serialize_f64(f64::from(*v)),
            Value::F64(v) => s.serialize_f64(*v),
            Value::Bool(v) => s.serialize_bool(*v),
            Value::String(v) => s.serialize_str(v),
            Value::Array(elem, items) if items.len() > ARRAY_FULL_MAX => {
                let mut map = s.serialize_map(Some(3))?;
                map.serialize_entry("array_of", elem.name())?;
                map.serialize_entry("len", &items.len())?;
                let head: Vec<ValueJson> = items.iter().take(ARRAY_HEAD).map(ValueJson).collect();
                map.serialize_entry("first", &head)?;
                map.end()
            }
            Value::Array(_, items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&ValueJson(item))?;
                }
                seq.end()
            }
        }
    }
}
