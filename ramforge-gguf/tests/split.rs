//! Split models: the writer's shards as gguf-split lays them out, opened by the first shard as
//! one model, and every way a set of shards can be wrong refused with a one-line error naming
//! the shard.

use ramforge_gguf::split::{SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT};
use ramforge_gguf::{shard_path, GgmlType, GgufFile, GgufWriter, Metadata, Value};
use std::path::{Path, PathBuf};

/// A fresh directory for one test.
fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ramforge-split-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// F32 tensor `i`'s bytes: `n` values that say which tensor and element they are.
fn data(i: usize, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|k| ((i * 1000 + k) as f32).to_le_bytes())
        .collect()
}

/// Tensor sizes in elements: 40 (160 bytes), 24 (96), 8 (32), 50 (200, padded 224), 16 (64).
const SIZES: [usize; 5] = [40, 24, 8, 50, 16];

fn metadata() -> Metadata {
    let mut md = Metadata::new();
    md.set("general.architecture", Value::String("llama".into()));
    md.set("general.name", Value::String("split test".into()));
    md
}

fn writer() -> GgufWriter<'static> {
    let mut w = GgufWriter::new(metadata());
    for (i, &n) in SIZES.iter().enumerate() {
        w.add_tensor(format!("t{i}"), GgmlType::F32, &[n as u64], data(i, n))
            .unwrap();
    }
    w
}

/// One-line error of opening `path`.
fn refused(path: &Path) -> String {
    let e = GgufFile::open(path).expect_err("a bad split was accepted");
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "multi-line: {msg}");
    msg
}

/// Writes one shard by hand: `tensors` (indices into SIZES) with these split keys.
fn write_shard(path: &Path, no: u16, count: u16, total: i32, tensors: &[usize]) {
    let mut md = if no == 0 { metadata() } else { Metadata::new() };
    md.set(SPLIT_NO, Value::U16(no));
    md.set(SPLIT_COUNT, Value::U16(count));
    md.set(SPLIT_TENSORS_COUNT, Value::I32(total));
    let mut w = GgufWriter::new(md);
    for &i in tensors {
        w.add_tensor(
            format!("t{i}"),
            GgmlType::F32,
            &[SIZES[i] as u64],
            data(i, SIZES[i]),
        )
        .unwrap();
    }
    w.write_file(path).unwrap();
}

#[test]
fn the_writer_splits_as_gguf_split_and_the_first_shard_opens_the_model() {
    let d = dir("roundtrip");
    let prefix = d.join("model");
    // At most 300 bytes of 32-padded tensor data per shard: 160 + 96 + 32 = 288 fits, + 224
    // does not, so gguf-split's rule gives [t0 t1 t2] [t3 t4] (224 + 64 = 288).
    let shards = writer().write_split(&prefix, 300).unwrap();
    let names: Vec<_> = shards
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["model-00001-of-00002.gguf", "model-00002-of-00002.gguf"]
    );
    for (p, len) in &shards {
        assert_eq!(std::fs::metadata(p).unwrap().len(), *len);
    }

    let m = GgufFile::open(&shards[0].0).unwrap();
    assert_eq!(m.shards().len(), 2);
    assert_eq!(m.total_len(), shards.iter().map(|s| s.1).sum::<u64>());
    let h = m.header();
    let md = &h.metadata;
    assert_eq!(md.get_str("general.name").unwrap(), "split test");
    assert_eq!(md.get(SPLIT_NO), Some(&Value::U16(0)));
    assert_eq!(md.get(SPLIT_COUNT), Some(&Value::U16(2)));
    assert_eq!(md.get(SPLIT_TENSORS_COUNT), Some(&Value::I32(5)));
    let where_: Vec<(String, usize)> = h
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.shard))
        .collect();
    assert_eq!(
        where_,
        [("t0", 0), ("t1", 0), ("t2", 0), ("t3", 1), ("t4", 1)].map(|(n, s)| (n.to_string(), s))
    );
    // Offsets are per shard: the second shard's first tensor is at its data section's start.
    assert_eq!(h.tensor("t3").unwrap().offset, 0);
    for (i, &n) in SIZES.iter().enumerate() {
        let t = m.tensor(&format!("t{i}")).unwrap();
        let mut buf = vec![0u8; t.n_bytes as usize];
        m.read_tensor_into(t, &mut buf).unwrap();
        assert_eq!(buf, data(i, n), "t{i}");
        assert_eq!(
            m.map_tensor(t).unwrap().bytes(),
            &data(i, n)[..],
            "t{i} mapped"
        );
        let mut row = vec![0u8; 8];
        m.read_range_into(t, 8, &mut row).unwrap();
        assert_eq!(row, data(i, n)[8..16]);
    }
    // The second shard's own metadata is the split keys and nothing else.
    let second = GgufFile::open(&shards[1].0);
    let e = second.unwrap_err().to_string();
    assert!(e.contains("is shard 2 of 2; open the first shard"), "{e}");

    // Copied into one file, the model is the one written unsplit, byte for byte.
    let whole = writer().to_bytes().unwrap();
    assert_eq!(GgufWriter::copy_of(&m).unwrap().to_bytes().unwrap(), whole);
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_tensor_larger_than_the_limit_gets_a_shard_of_its_own() {
    let d = dir("large");
    let shards = writer().write_split(d.join("m"), 130).unwrap();
    // 160 | 96 32 | 224 | 64: each shard's padded tensor data stays within 130 bytes unless
    // one tensor alone is larger.
    assert_eq!(shards.len(), 4);
    let m = GgufFile::open(&shards[0].0).unwrap();
    let per_shard: Vec<usize> = m.header().tensors.iter().map(|t| t.shard).collect();
    assert_eq!(per_shard, [0, 1, 1, 2, 3]);
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_single_shard_split_opens_as_one_file() {
    let d = dir("single");
    let shards = writer().write_split(d.join("m"), 1 << 30).unwrap();
    assert_eq!(shards.len(), 1);
    assert!(shards[0].0.ends_with("m-00001-of-00001.gguf"));
    let m = GgufFile::open(&shards[0].0).unwrap();
    assert_eq!((m.shards().len(), m.header().tensors.len()), (1, 5));
    std::fs::remove_dir_all(&d).ok();
}

/// A good 3-shard set by hand (t0 t1 | t2 | t3 t4) in a fresh directory; returns the paths.
fn three_shards(tag: &str) -> (PathBuf, [PathBuf; 3]) {
    let d = dir(tag);
    let prefix = d.join("m");
    let p = [0, 1, 2].map(|no| shard_path(&prefix, no, 3));
    write_shard(&p[0], 0, 3, 5, &[0, 1]);
    write_shard(&p[1], 1, 3, 5, &[2]);
    write_shard(&p[2], 2, 3, 5, &[3, 4]);
    assert_eq!(GgufFile::open(&p[0]).unwrap().header().tensors.len(), 5);
    (d, p)
}

#[test]
fn a_missing_shard_is_named() {
    let (d, p) = three_shards("missing");
    std::fs::remove_file(&p[1]).unwrap();
    let e = refused(&p[0]);
    assert!(
        e.starts_with(&format!("shard 2 of 3 is missing: {}: ", p[1].display())),
        "{e}"
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_shard_that_claims_another_count_or_index_is_named() {
    let (d, p) = three_shards("mismatch");
    write_shard(&p[2], 2, 4, 5, &[3, 4]);
    let e = refused(&p[0]);
    assert_eq!(
        e,
        format!(
            "shard {}: split.count is 4, expected 3 (as the first shard says)",
            p[2].display()
        )
    );
    write_shard(&p[2], 1, 3, 5, &[3, 4]);
    let e = refused(&p[0]);
    assert_eq!(
        e,
        format!(
            "shard {}: split.no is 1, expected 2 (as the first shard says)",
            p[2].display()
        )
    );
    // A shard of another model's split (its own tensor total) is no shard of this one.
    write_shard(&p[2], 2, 3, 6, &[3, 4]);
    let e = refused(&p[0]);
    assert!(e.contains("split.tensors.count is 6, expected 5"), "{e}");
    // A file of its own in a shard's place.
    GgufWriter::new(Metadata::new()).write_file(&p[2]).unwrap();
    let e = refused(&p[0]);
    assert!(e.contains("split.count is absent, expected 3"), "{e}");
    // Not even a GGUF file.
    std::fs::write(&p[2], b"GGUF\x03\x00\x00\x00").unwrap();
    let e = refused(&p[0]);
    assert!(
        e.starts_with(&format!("{}: truncated file", p[2].display())),
        "{e}"
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_tensor_in_two_shards_is_refused() {
    let (d, p) = three_shards("duplicate");
    write_shard(&p[2], 2, 3, 5, &[3, 1]);
    let e = refused(&p[0]);
    assert_eq!(
        e,
        format!(
            "tensor \"t1\" is in two shards: {} and {}",
            p[0].display(),
            p[2].display()
        )
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn the_tensor_total_must_match_split_tensors_count() {
    let (d, p) = three_shards("count");
    for (no, t) in [(0u16, &[0usize, 1][..]), (1, &[2]), (2, &[3])] {
        write_shard(&p[no as usize], no, 3, 5, t);
    }
    let e = refused(&p[0]);
    assert_eq!(
        e,
        format!(
            "{}: split.tensors.count says 5 tensors, the 3 shards hold 4",
            p[0].display()
        )
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn an_extra_shard_file_is_named() {
    let (d, p) = three_shards("extra");
    let extra = d.join("m-00004-of-00003.gguf");
    std::fs::copy(&p[2], &extra).unwrap();
    let e = refused(&p[0]);
    assert!(
        e.starts_with(&format!("{} is named as a shard", extra.display())),
        "{e}"
    );
    std::fs::remove_file(&extra).unwrap();
    // A shard of a 4-shard split of the same name beside the 3-shard one.
    let other = d.join("m-00001-of-00004.gguf");
    std::fs::copy(&p[0], &other).unwrap();
    let e = refused(&p[0]);
    assert!(
        e.contains("m-00001-of-00004.gguf is named as a shard"),
        "{e}"
    );
    std::fs::remove_file(&other).unwrap();
    // Other files in the directory are none of its business.
    std::fs::write(d.join("m.gguf"), b"x").unwrap();
    std::fs::write(d.join("n-00001-of-00009.gguf"), b"x").unwrap();
    assert!(GgufFile::open(&p[0]).is_ok());
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_split_must_be_opened_by_its_first_shard_named_as_gguf_split_names_it() {
    let (d, p) = three_shards("naming");
    let e = refused(&p[1]);
    assert_eq!(
        e,
        format!(
            "{} is shard 2 of 3; open the first shard ({})",
            p[1].display(),
            p[0].display()
        )
    );
    let renamed = d.join("model.gguf");
    std::fs::rename(&p[0], &renamed).unwrap();
    let e = refused(&renamed);
    assert!(e.contains("is not named PREFIX-00001-of-00003.gguf"), "{e}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_huge_split_count_fails_at_the_first_missing_shard() {
    let d = dir("huge");
    let prefix = d.join("m");
    let first = shard_path(&prefix, 0, u16::MAX);
    write_shard(&first, 0, u16::MAX, i32::MAX, &[0]);
    let e = refused(&first);
    assert!(e.starts_with("shard 2 of 65535 is missing: "), "{e}");
    // A split.count of 0, a split.no outside it, keys of the wrong type: the key is named.
    let mut md = metadata();
    md.set(SPLIT_COUNT, Value::U32(2));
    GgufWriter::new(md).write_file(&first).unwrap();
    let e = refused(&first);
    assert!(
        e.contains("\"split.count\" has type u32, expected u16"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).ok();
}
