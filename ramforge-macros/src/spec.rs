//! Reading and validating one block-format spec file (TOML). Every problem becomes a
//! message naming the file and what is wrong; nothing here panics on bad input.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A spec file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: String,
    id: u32,
    block: usize,
    bytes: usize,
    group: usize,
    activation: String,
    roundtrip_tolerance: f64,
    #[serde(default)]
    tables: BTreeMap<String, Vec<i64>>,
    field: Vec<RawField>,
    dequant: RawDequant,
    quantize: RawQuantize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    count: Option<usize>,
    offset: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDequant {
    quant: String,
    scale: String,
    min: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuantize {
    code: String,
}

/// The scalar type of a block field, as stored (little-endian) and as seen by expressions.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    F16,
    F32,
    U8,
    I8,
    U16,
    I16,
    U32,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "f16" => Kind::F16,
            "f32" => Kind::F32,
            "u8" => Kind::U8,
            "i8" => Kind::I8,
            "u16" => Kind::U16,
            "i16" => Kind::I16,
            "u32" => Kind::U32,
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            Kind::U8 | Kind::I8 => 1,
            Kind::F16 | Kind::U16 | Kind::I16 => 2,
            Kind::F32 | Kind::U32 => 4,
        }
    }
}

/// One named field of the block.
pub struct Field {
    pub name: String,
    pub kind: Kind,
    /// `Some(n)` for an array of `n` elements.
    pub count: Option<usize>,
    pub offset: usize,
}

/// A validated spec.
pub struct Spec {
    pub path: PathBuf,
    pub name: String,
    pub id: u32,
    pub block: usize,
    pub bytes: usize,
    pub group: usize,
    pub activation: String,
    pub roundtrip_tolerance: f64,
    pub tables: Vec<(String, Vec<i64>)>,
    pub fields: Vec<Field>,
    pub quant: syn::Expr,
    pub scale: syn::Expr,
    pub min: Option<syn::Expr>,
    pub quantize: syn::Block,
}

impl Spec {
    /// The module name of the generated code: the type name in lower case.
    pub fn module(&self) -> String {
        self.name.to_ascii_lowercase()
    }
}

/// Names the generated code binds itself; fields and tables may not shadow them.
const RESERVED: &[&str] = &[
    "j",
    "g",
    "x",
    "b",
    "q",
    "i",
    "act",
    "group_scales",
    "group_mins",
    "self",
    "crate",
    "super",
];

fn is_ident(s: &str) -> bool {
    syn::parse_str::<syn::Ident>(s).is_ok()
}

/// Reads and checks one spec file (everything that can be checked without its siblings).
pub fn load(path: &Path) -> Result<Spec, String> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("spec {shown}: cannot read: {e}"))?;
    let raw: RawSpec = toml::from_str(&text)
        .map_err(|e| format!("spec {shown}: {}", e.to_string().replace('\n', " ")))?;
    let bad = |what: String| format!("spec {shown}: {what}");

    if !is_ident(&raw.name) {
        return Err(bad(format!("name {:?} is not an identifier", raw.name)));
    }
    if raw.block == 0 || raw.group == 0 || !raw.block.is_multiple_of(raw.group) {
        return Err(bad(format!(
            "block ({}) must be a positive multiple of group ({})",
            raw.block, raw.group
        )));
    }
    if raw.block > 4096 {
        return Err(bad(format!("block {} is larger than 4096", raw.block)));
    }
    if !(raw.roundtrip_tolerance > 0.0 && raw.roundtrip_tolerance < 1.0) {
        return Err(bad(format!(
            "roundtrip_tolerance {} must lie in (0, 1)",
            raw.roundtrip_tolerance
        )));
    }

    let mut tables = Vec::new();
    for (name, values) in raw.tables {
        if !is_ident(&name) || RESERVED.contains(&name.as_str()) {
            return Err(bad(format!(
                "table name {name:?} is not a usable identifier"
            )));
        }
        if let Some(v) = values.iter().find(|v| !(-128..=127).contains(*v)) {
            return Err(bad(format!("table {name}: value {v} does not fit in i8")));
        }
        tables.push((name, values));
    }

    let mut fields = Vec::new();
    let mut at = 0usize;
    for f in raw.field {
        if !is_ident(&f.name) || RESERVED.contains(&f.name.as_str()) {
            return Err(bad(format!(
                "field name {:?} is not a usable identifier",
                f.name
            )));
        }
        if fields.iter().any(|g: &Field| g.name == f.name)
            || tables.iter().any(|(t, _)| *t == f.name)
        {
            return Err(bad(format!("field name {:?} is used twice", f.name)));
        }
        let kind = Kind::parse(&f.ty).ok_or_else(|| {
            bad(format!(
                "field {}: unknown type {:?} (expected f16, f32, u8, i8, u16, i16 or u32)",
                f.name, f.ty
            ))
        })?;
        if f.count == Some(0) {
            return Err(bad(format!("field {}: count must be at least 1", f.name)));
        }
        if f.count.is_some() && matches!(kind, Kind::F16 | Kind::F32 | Kind::U32) {
            return Err(bad(format!(
                "field {}: arrays of {} are not supported",
                f.name, f.ty
            )));
        }
        if f.offset != at {
            return Err(bad(format!(
                "field {} is declared at offset {} but the fields before it end at {at}",
                f.name, f.offset
            )));
        }
        at += kind.size() * f.count.unwrap_or(1);
        fields.push(Field {
            name: f.name,
            kind,
            count: f.count,
            offset: f.offset,
        });
    }
    if at != raw.bytes {
        return Err(bad(format!(
            "the fields take {at} bytes but bytes = {}",
            raw.bytes
        )));
    }

    let expr = |what: &str, src: &str| {
        syn::parse_str::<syn::Expr>(src)
            .map_err(|e| bad(format!("dequant.{what} is not a Rust expression: {e}")))
    };
    let quant = expr("quant", &raw.dequant.quant)?;
    let scale = expr("scale", &raw.dequant.scale)?;
    let min = raw
        .dequant
        .min
        .as_deref()
        .map(|m| expr("min", m))
        .transpose()?;
    let quantize = syn::parse_str::<syn::Block>(&format!("{{\n{}\n}}", raw.quantize.code))
        .map_err(|e| bad(format!("quantize.code is not a Rust block: {e}")))?;

    Ok(Spec {
        path: path.to_path_buf(),
        name: raw.name,
        id: raw.id,
        block: raw.block,
        bytes: raw.bytes,
        group: raw.group,
        activation: raw.activation,
        roundtrip_tolerance: raw.roundtrip_tolerance,
        tables,
        fields,
        quant,
        scale,
        min,
        quantize,
    })
}

/// Checks what needs all specs together: unique names and ids, and that each activation
/// type exists, has one scale per block and no min, and has the same block size.
pub fn check_set(specs: &[Spec]) -> Result<(), String> {
    for (i, s) in specs.iter().enumerate() {
        let shown = s.path.display();
        if let Some(o) = specs[..i].iter().find(|o| o.name == s.name || o.id == s.id) {
            return Err(format!(
                "spec {shown}: name or id clashes with {}",
                o.path.display()
            ));
        }
        let act = specs
            .iter()
            .find(|a| a.name == s.activation)
            .ok_or_else(|| {
                format!(
                    "spec {shown}: activation type {:?} has no spec in this directory",
                    s.activation
                )
            })?;
        if act.group != act.block || act.min.is_some() {
            return Err(format!(
                "spec {shown}: activation type {} must have one scale per block and no min",
                act.name
            ));
        }
        if act.block != s.block {
            return Err(format!(
                "spec {shown}: activation type {} has blocks of {}, not {}",
                act.name, act.block, s.block
            ));
        }
    }
    Ok(())
}
