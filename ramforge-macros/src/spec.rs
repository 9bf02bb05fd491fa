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
    roundtrip_rms_tolerance: Option<f64>,
    #[serde(default)]
    tables: BTreeMap<String, Vec<i64>>,
    #[serde(default)]
    grids: BTreeMap<String, RawGrid>,
    field: Vec<RawField>,
    dequant: RawDequant,
    quantize: RawQuantize,
}

/// A codebook grid: rows of `shape[1]` values, packed as gguf-py packs its `grid_hex`
/// (hexadecimal bytes, each holding `8 / ceil(log2(levels))` level indices, lowest bits first).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrid {
    /// The packed grid, relative to the spec file's directory.
    file: String,
    shape: [usize; 2],
    levels: Vec<i64>,
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

/// A codebook grid unpacked: `rows` rows of `width` values, row-major.
pub struct Grid {
    pub name: String,
    pub path: PathBuf,
    pub rows: usize,
    pub width: usize,
    pub values: Vec<i8>,
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
    /// Bound on a block's root-mean-square round-trip error relative to its max `|x|`, for
    /// codebook formats whose worst element says little (a value off every grid row).
    pub roundtrip_rms_tolerance: Option<f64>,
    pub tables: Vec<(String, Vec<i64>)>,
    pub grids: Vec<Grid>,
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
    if !(raw.roundtrip_tolerance > 0.0 && raw.roundtrip_tolerance < 2.0) {
        return Err(bad(format!(
            "roundtrip_tolerance {} must lie in (0, 2)",
            raw.roundtrip_tolerance
        )));
    }
    if let Some(r) = raw
        .roundtrip_rms_tolerance
        .filter(|r| !(*r > 0.0 && *r < 1.0))
    {
        return Err(bad(format!(
            "roundtrip_rms_tolerance {r} must lie in (0, 1)"
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

    let mut grids = Vec::new();
    for (name, raw_grid) in raw.grids {
        if !is_ident(&name)
            || RESERVED.contains(&name.as_str())
            || tables.iter().any(|(t, _)| *t == name)
        {
            return Err(bad(format!(
                "grid name {name:?} is not a usable identifier"
            )));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        grids.push(load_grid(&dir.join(&raw_grid.file), name, &raw_grid).map_err(bad)?);
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
            || grids.iter().any(|g| g.name == f.name)
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
        roundtrip_rms_tolerance: raw.roundtrip_rms_tolerance,
        tables,
        grids,
        fields,
        quant,
        scale,
        min,
        quantize,
    })
}

/// Reads and unpacks one grid file.
fn load_grid(file: &Path, name: String, raw: &RawGrid) -> Result<Grid, String> {
    let shown = file.display();
    let [rows, width] = raw.shape;
    if rows == 0 || width == 0 || rows * width > 1 << 16 {
        return Err(format!(
            "grid {name}: shape {rows} x {width} is empty or too large"
        ));
    }
    if raw.levels.len() < 2 || raw.levels.len() > 16 {
        return Err(format!("grid {name}: needs 2 to 16 levels"));
    }
    if let Some(v) = raw.levels.iter().find(|v| !(-128..=127).contains(*v)) {
        return Err(format!("grid {name}: level {v} does not fit in i8"));
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("grid {name}: cannot read {shown}: {e}"))?;
    let hex: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let mut bytes = Vec::with_capacity(hex.len() / 2);
    for pair in hex.chunks(2) {
        let digit = |c: u8| (c as char).to_digit(16);
        match (pair, pair.first().and_then(|&c| digit(c))) {
            ([_, lo], Some(hi)) if digit(*lo).is_some() => {
                bytes.push((hi * 16 + digit(*lo).unwrap_or(0)) as u8)
            }
            _ => return Err(format!("grid {name}: {shown} is not hexadecimal bytes")),
        }
    }
    // As gguf-py's init_grid: ceil(log2(levels)) bits an index, 8 / bits indices a byte.
    let bits = usize::BITS - (raw.levels.len() - 1).leading_zeros();
    let per_byte = (8 / bits) as usize;
    let step = 8 / per_byte;
    let mask = (1u8 << bits) - 1;
    if bytes.len() * per_byte != rows * width {
        return Err(format!(
            "grid {name}: {shown} holds {} values, the shape needs {}",
            bytes.len() * per_byte,
            rows * width
        ));
    }
    let mut values = Vec::with_capacity(rows * width);
    for b in bytes {
        for k in 0..per_byte {
            let index = ((b >> (k * step)) & mask) as usize;
            let level = raw.levels.get(index).ok_or_else(|| {
                format!(
                    "grid {name}: {shown} names level {index} of {}",
                    raw.levels.len()
                )
            })?;
            values.push(*level as i8);
        }
    }
    Ok(Grid {
        name,
        path: file.to_path_buf(),
        rows,
        width,
        values,
    })
}

/// Checks what needs all specs together: unique names and ids, and that each activation
/// type exists, has one scale per block and no min, and has blocks that tile the format's
/// block and are tiled by its groups (so each group meets one activation scale).
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
        if !s.block.is_multiple_of(act.block) || !act.block.is_multiple_of(s.group) {
            return Err(format!(
                "spec {shown}: activation type {} has blocks of {}, which must divide {} and be a multiple of the group {}",
                act.name, act.block, s.block, s.group
            ));
        }
    }
    Ok(())
}
