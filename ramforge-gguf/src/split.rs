//! Split models: the `split.*` keys and file names llama.cpp's `gguf-split` (and gguf-py's
//! writer) give the shards of one model.
//!
//! A model of `n` shards is the files `PREFIX-00001-of-0000n.gguf` .. `PREFIX-0000n-of-0000n.gguf`.
//! Every shard carries `split.no` (u16, its 0-based index), `split.count` (u16, `n`) and
//! `split.tensors.count` (i32, the tensors of the whole model); the first shard also carries
//! all the model's other metadata. Each shard is a complete GGUF file whose tensor offsets are
//! relative to its own data section. These are llama.cpp's exact key types: its loader
//! refuses any other.

use crate::error::GgufError;
use crate::value::{Metadata, Value};
use std::path::{Path, PathBuf};

/// This file's 0-based index in the split (u16).
pub const SPLIT_NO: &str = "split.no";
/// Shards in the split (u16).
pub const SPLIT_COUNT: &str = "split.count";
/// Tensors in the whole model, over all shards (i32).
pub const SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// What one file's split keys say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitKeys {
    /// 0-based index of this shard.
    pub no: u16,
    /// Shards in the split (at least 1).
    pub count: u16,
    /// Tensors of the whole model, when the key is present.
    pub tensors: Option<u32>,
}

impl SplitKeys {
    /// The split keys of a file's metadata: `None` when it has no `split.count` (a file of its
    /// own). Present keys must have llama.cpp's types and agree (`split.no < split.count`,
    /// a non-negative tensor count); `path` names the file in the error.
    pub fn of(metadata: &Metadata, path: &Path) -> Result<Option<SplitKeys>, GgufError> {
        let bad = |key: &str, reason: String| GgufError::SplitKey {
            path: path.display().to_string(),
            key: key.to_string(),
            reason,
        };
        let u16_key = |key: &str| match metadata.get(key) {
            None => Ok(None),
            Some(Value::U16(v)) => Ok(Some(*v)),
            Some(v) => Err(bad(
                key,
                format!("has type {}, expected u16", v.value_type().name()),
            )),
        };
        let Some(count) = u16_key(SPLIT_COUNT)? else {
            return Ok(None);
        };
        if count == 0 {
            return Err(bad(SPLIT_COUNT, "is 0".to_string()));
        }
        let no = u16_key(SPLIT_NO)?.unwrap_or(0);
        if no >= count {
            return Err(bad(
                SPLIT_NO,
                format!("is {no}, outside the {count} shards of split.count"),
            ));
        }
        let tensors = match metadata.get(SPLIT_TENSORS_COUNT) {
            None => None,
            Some(Value::I32(v)) => Some(u32::try_from(*v).map_err(|_| {
                bad(
                    SPLIT_TENSORS_COUNT,
                    format!("is {v}, a negative tensor count"),
                )
            })?),
            Some(v) => {
                return Err(bad(
                    SPLIT_TENSORS_COUNT,
                    format!("has type {}, expected i32", v.value_type().name()),
                ))
            }
        };
        Ok(Some(SplitKeys { no, count, tensors }))
    }

    /// The three keys as a shard of the writer carries them (in gguf-split's order).
    pub fn write_to(&self, metadata: &mut Metadata) {
        metadata.set(SPLIT_NO, Value::U16(self.no));
        metadata.set(SPLIT_COUNT, Value::U16(self.count));
        let tensors = i32::try_from(self.tensors.unwrap_or(0)).unwrap_or(i32::MAX);
        metadata.set(SPLIT_TENSORS_COUNT, Value::I32(tensors));
    }
}

/// The path of shard `no` (0-based) of `count`: `PREFIX-%05d-of-%05d.gguf`, numbered from 1.
pub fn shard_path(prefix: &Path, no: u16, count: u16) -> PathBuf {
    let mut name = prefix.as_os_str().to_os_string();
    name.push(format!("-{:05}-of-{:05}.gguf", u32::from(no) + 1, count));
    PathBuf::from(name)
}

/// The prefix of `path` when it is named as shard `no` of `count` ([`shard_path`]'s inverse).
pub fn shard_prefix(path: &Path, no: u16, count: u16) -> Option<PathBuf> {
    let tail = format!("-{:05}-of-{:05}.gguf", u32::from(no) + 1, count);
    let s = path.to_str()?;
    s.strip_suffix(&tail)
        .filter(|p| !p.is_empty() && !p.ends_with('/'))
        .map(PathBuf::from)
}

/// Parses a file name `PREFIX-NNNNN-of-MMMMM.gguf` into (`PREFIX`, `NNNNN`, `MMMMM`); the
/// numbers as written (1-based).
pub fn parse_shard_name(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if prefix.is_empty() || !digits(no) || !digits(count) {
        return None;
    }
    Some((prefix, no.parse().ok()?, count.parse().ok()?))
}

/// How `--split-max-size` values are written, as gguf-split reads them: a positive integer
/// followed by `M` (10^6 bytes) or `G` (10^9 bytes).
pub fn parse_split_size(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.as_bytes().last() {
        Some(b'M') => (&s[..s.len() - 1], 1_000_000u64),
        Some(b'G') => (&s[..s.len() - 1], 1_000_000_000u64),
        _ => {
            return Err(format!(
            "{s:?}: a size is a number followed by M (megabytes) or G (gigabytes), e.g. 500M or 3G"
        ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: {digits:?} is not a whole number"))?;
    if n == 0 {
        return Err(format!("{s:?}: the size must be positive"));
    }
    n.checked_mul(unit)
        .ok_or_else(|| format!("{s:?}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_are_gguf_splits() {
        let p = shard_path(Path::new("/m/qwen"), 0, 5);
        assert_eq!(p, Path::new("/m/qwen-00001-of-00005.gguf"));
        assert_eq!(
            shard_prefix(&p, 0, 5).as_deref(),
            Some(Path::new("/m/qwen"))
        );
        assert_eq!(shard_prefix(&p, 1, 5), None);
        assert_eq!(shard_prefix(&p, 0, 4), None);
        assert_eq!(
            shard_prefix(Path::new("/m/-00001-of-00005.gguf"), 0, 5),
            None
        );
        assert_eq!(
            parse_shard_name("qwen-00003-of-00005.gguf"),
            Some(("qwen", 3, 5))
        );
        assert_eq!(
            parse_shard_name("a-b-00003-of-00005.gguf").unwrap().0,
            "a-b"
        );
        assert_eq!(parse_shard_name("qwen-3-of-5.gguf"), None);
        assert_eq!(parse_shard_name("qwen.gguf"), None);
    }

    #[test]
    fn sizes_read_as_gguf_split_reads_them() {
        assert_eq!(parse_split_size("3G"), Ok(3_000_000_000));
        assert_eq!(parse_split_size("500M"), Ok(500_000_000));
        for bad in ["", "3", "3K", "0M", "-1M", "M", "1.5G", "99999999999999G"] {
            assert!(parse_split_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn split_keys_must_have_llama_cpp_types_and_agree() {
        let path = Path::new("x.gguf");
        let mut md = Metadata::new();
        assert_eq!(SplitKeys::of(&md, path).unwrap(), None);
        let keys = SplitKeys {
            no: 1,
            count: 3,
            tensors: Some(7),
        };
        keys.write_to(&mut md);
        assert_eq!(SplitKeys::of(&md, path).unwrap(), Some(keys));

        let with = |key: &str, v: Value| {
            let mut m = md.clone();
            m.set(key, v);
            SplitKeys::of(&m, path).unwrap_err().to_string()
        };
        let e = with(SPLIT_COUNT, Value::U32(3));
        assert!(
            e.contains("split.count") && e.contains("expected u16"),
            "{e}"
        );
        let e = with(SPLIT_COUNT, Value::U16(0));
        assert!(e.contains("is 0"), "{e}");
        let e = with(SPLIT_NO, Value::U16(3));
        assert!(e.contains("outside the 3 shards"), "{e}");
        let e = with(SPLIT_TENSORS_COUNT, Value::I32(-1));
        assert!(e.contains("negative"), "{e}");
        let e = with(SPLIT_TENSORS_COUNT, Value::U64(7));
        assert!(
            e.contains("expected i32") && e.starts_with("x.gguf: "),
            "{e}"
        );
    }
}
