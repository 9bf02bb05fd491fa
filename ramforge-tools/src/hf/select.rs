//! Which GGUF files of a repository a `--hf` reference means: the quant tag matched in the
//! file names case-insensitively (as llama.cpp's `-hf` does), or one file by name, with every
//! part of a split model (`NAME-00001-of-00003.gguf`).

use super::listing::RepoFile;
use super::spec::Wanted;

/// The quant taken when none is named (llama.cpp's `-hf` default too).
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// Most file names listed in an error.
const MAX_NAMES: usize = 20;

/// One model: a single file, or the parts of a split one in order.
#[derive(Debug)]
struct Group<'a> {
    /// The path with any `-NNNNN-of-NNNNN` removed: what the parts share.
    stem: String,
    parts: Vec<(Split, &'a RepoFile)>,
}

/// Where a file sits in a split model: part `index` of `count` (1 of 1 for a whole file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    index: u32,
    count: u32,
}

/// The files `wanted` names in `files` (of repository `repo`), in part order, or a one-line
/// error that names the GGUF files there are.
pub fn select<'a>(
    files: &'a [RepoFile],
    repo: &str,
    wanted: &Wanted,
) -> Result<Vec<&'a RepoFile>, String> {
    let ggufs: Vec<&RepoFile> = files.iter().filter(|f| is_gguf(&f.path)).collect();
    if ggufs.is_empty() {
        return Err(format!("{repo} has no .gguf files"));
    }
    let models: Vec<&RepoFile> = ggufs
        .iter()
        .copied()
        .filter(|f| !base_name(&f.path).to_ascii_lowercase().contains("mmproj"))
        .collect();
    let chosen: Vec<&RepoFile> = match wanted {
        Wanted::Quant(tag) => matching_tag(&models, tag),
        Wanted::File(name) => {
            let hits: Vec<&RepoFile> = ggufs
                .iter()
                .copied()
                .filter(|f| f.path == *name || base_name(&f.path) == name)
                .collect();
            // A split model's part names the whole model.
            let stems: Vec<String> = hits.iter().map(|f| split_of(&f.path).0).collect();
            ggufs
                .iter()
                .copied()
                .filter(|f| stems.contains(&split_of(&f.path).0))
                .collect()
        }
        Wanted::Default => {
            let q = matching_tag(&models, DEFAULT_QUANT);
            if q.is_empty() {
                models.clone()
            } else {
                q
            }
        }
    };
    let groups = group(&chosen);
    match groups.as_slice() {
        [] => Err(format!(
            "no GGUF file in {repo} matches {wanted}; the GGUF files there: {}",
            names(ggufs.iter().map(|f| f.path.as_str()))
        )),
        [one] => complete(one).map(|parts| parts.into_iter().map(|(_, f)| f).collect()),
        many => Err(format!(
            "{wanted} matches more than one model in {repo}: {}; name one with {repo}:FILE.gguf",
            names(many.iter().map(|g| g.parts[0].1.path.as_str()))
        )),
    }
}

fn is_gguf(path: &str) -> bool {
    path.to_ascii_lowercase().ends_with(".gguf")
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Files whose name contains `tag`, ignoring case.
fn matching_tag<'a>(files: &[&'a RepoFile], tag: &str) -> Vec<&'a RepoFile> {
    let tag = tag.to_ascii_lowercase();
    files
        .iter()
        .copied()
        .filter(|f| base_name(&f.path).to_ascii_lowercase().contains(&tag))
        .collect()
}

/// The stem and place of `path`: `a/X-00002-of-00003.gguf` is (`a/X.gguf`, 2 of 3).
fn split_of(path: &str) -> (String, Split) {
    let whole = (path.to_string(), Split { index: 1, count: 1 });
    let lower = path.to_ascii_lowercase();
    let Some(body) = lower.strip_suffix(".gguf") else {
        return whole;
    };
    // "-NNNNN-of-NNNNN" is 15 ASCII bytes at the end of the body.
    let Some(start) = body.len().checked_sub(15) else {
        return whole;
    };
    let tail = &body.as_bytes()[start..];
    let number = |digits: &[u8]| -> Option<u32> {
        digits.iter().all(u8::is_ascii_digit).then_some(())?;
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    if tail[0] != b'-' || &tail[6..10] != b"-of-" {
        return whole;
    }
    let (Some(index), Some(count)) = (number(&tail[1..6]), number(&tail[10..15])) else {
        return whole;
    };
    let stem = format!("{}{}", &path[..start], &path[body.len()..]);
    (stem, Split { index, count })
}

/// The files grouped into models, in first-seen order.
fn group<'a>(files: &[&'a RepoFile]) -> Vec<Group<'a>> {
    let mut groups: Vec<Group<'a>> = Vec::new();
    for f in files {
        let (stem, split) = split_of(&f.path);
        match groups.iter_mut().find(|g| g.stem == stem) {
            Some(g) => g.parts.push((split, f)),
            None => groups.push(Group {
                stem,
                parts: vec![(split, f)],
            }),
        }
    }
    groups
}

/// The parts of `group` in order, or which part is missing or repeated.
fn complete<'a>(group: &Group<'a>) -> Result<Vec<(Split, &'a RepoFile)>, String> {
    let mut parts = group.parts.clone();
    parts.sort_by_key(|(s, _)| s.index);
    let count = parts[0].0.count;
    for (i, (split, file)) in parts.iter().enumerate() {
        let expected = i as u32 + 1;
        if split.count != count || split.index != expected {
            let (missing, _) = split_of(&file.path);
            return Err(format!(
                "split model {missing} is incomplete in the repository listing: expected part {expected:05}-of-{count:05}, found {}",
                file.path
            ));
        }
    }
    if parts.len() as u32 != count {
        return Err(format!(
            "split model {} is incomplete in the repository listing: {} of {count} parts",
            group.stem,
            parts.len()
        ));
    }
    Ok(parts)
}

/// Up to [`MAX_NAMES`] names joined, with how many more there are.
fn names<'a>(all: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = all.collect();
    let mut text = all[..all.len().min(MAX_NAMES)].join(", ");
    if all.len() > MAX_NAMES {
        text.push_str(&format!(" and {} more", all.len() - MAX_NAMES));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(paths: &[&str]) -> Vec<RepoFile> {
        paths
            .iter()
            .map(|p| RepoFile {
                path: p.to_string(),
                size: 1,
                sha256: Some("00".into()),
            })
            .collect()
    }

    fn pick(files: &[RepoFile], wanted: Wanted) -> Result<Vec<String>, String> {
        select(files, "o/r", &wanted).map(|v| v.into_iter().map(|f| f.path.clone()).collect())
    }

    const REPO: [&str; 7] = [
        "README.md",
        "m-Q8_0.gguf",
        "m-q4_k_m.gguf",
        "mmproj-m-Q4_K_M.gguf",
        "big/m-Q6_K-00002-of-00003.gguf",
        "big/m-Q6_K-00001-of-00003.gguf",
        "big/m-Q6_K-00003-of-00003.gguf",
    ];

    #[test]
    fn a_quant_tag_matches_names_ignoring_case() {
        let files = listing(&REPO);
        assert_eq!(
            pick(&files, Wanted::Quant("Q4_K_M".into())).unwrap(),
            ["m-q4_k_m.gguf"]
        );
        assert_eq!(
            pick(&files, Wanted::Quant("q8_0".into())).unwrap(),
            ["m-Q8_0.gguf"]
        );
        assert_eq!(pick(&files, Wanted::Default).unwrap(), ["m-q4_k_m.gguf"]);
    }

    #[test]
    fn a_split_model_comes_whole_and_in_order() {
        let files = listing(&REPO);
        let want = [
            "big/m-Q6_K-00001-of-00003.gguf",
            "big/m-Q6_K-00002-of-00003.gguf",
            "big/m-Q6_K-00003-of-00003.gguf",
        ];
        assert_eq!(pick(&files, Wanted::Quant("Q6_K".into())).unwrap(), want);
        let by_part = Wanted::File("m-Q6_K-00001-of-00003.gguf".into());
        assert_eq!(pick(&files, by_part).unwrap(), want);
    }

    #[test]
    fn a_missing_part_is_named() {
        let files = listing(&["m-Q6_K-00001-of-00003.gguf", "m-Q6_K-00003-of-00003.gguf"]);
        let err = pick(&files, Wanted::Quant("Q6_K".into())).unwrap_err();
        assert!(err.contains("expected part 00002-of-00003"), "{err}");
    }

    #[test]
    fn no_match_lists_the_files_and_two_matches_are_refused() {
        let files = listing(&REPO);
        let err = pick(&files, Wanted::Quant("IQ2_XS".into())).unwrap_err();
        assert!(err.starts_with("no GGUF file in o/r matches quant IQ2_XS; the GGUF files there: m-Q8_0.gguf, m-q4_k_m.gguf, mmproj-m-Q4_K_M.gguf"), "{err}");
        let err = pick(&files, Wanted::Quant("m-".into())).unwrap_err();
        assert!(err.contains("matches more than one model"), "{err}");
        let err = pick(&listing(&["README.md"]), Wanted::Default).unwrap_err();
        assert_eq!(err, "o/r has no .gguf files");
    }

    #[test]
    fn an_exact_file_is_taken_by_path_or_name() {
        let files = listing(&REPO);
        assert_eq!(
            pick(&files, Wanted::File("m-Q8_0.gguf".into())).unwrap(),
            ["m-Q8_0.gguf"]
        );
        assert!(pick(&files, Wanted::File("m-Q8_0.GGUF".into())).is_err());
    }
}
