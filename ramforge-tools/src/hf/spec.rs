//! `ORG/REPO[:QUANT|:FILE.gguf]`, the model reference of `--hf`, parsed and checked before it
//! becomes part of a URL or a cache path.

use std::fmt;

/// What to take from the repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The files whose names contain this quant tag, case-insensitively (`:Q4_K_M`).
    Quant(String),
    /// One file by its path or name (`:model-Q8_0.gguf`); a split model's first part brings all.
    File(String),
    /// Nothing named: `Q4_K_M` when the repository has it, else its only model.
    Default,
}

/// A parsed `--hf` reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfSpec {
    /// `ORG/REPO`, both parts checked to be plain names.
    pub repo: String,
    pub wanted: Wanted,
}

/// The longest organisation or repository name accepted (the Hub allows 96).
const MAX_NAME: usize = 96;

impl HfSpec {
    /// Parses `ORG/REPO[:QUANT|:FILE.gguf]`, refusing anything that is not a plain repository id.
    pub fn parse(text: &str) -> Result<HfSpec, String> {
        let (repo, tag) = match text.split_once(':') {
            Some((repo, tag)) => (repo, Some(tag)),
            None => (text, None),
        };
        let Some((org, name)) = repo.split_once('/') else {
            return Err(format!(
                "--hf {text:?}: expected ORG/REPO[:QUANT or :FILE.gguf], e.g. bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M"
            ));
        };
        for part in [org, name] {
            check_name(part).map_err(|why| format!("--hf {text:?}: {why}"))?;
        }
        let wanted = match tag {
            None => Wanted::Default,
            Some("") => return Err(format!("--hf {text:?}: nothing after ':'")),
            Some(t) if t.to_ascii_lowercase().ends_with(".gguf") => Wanted::File(t.to_string()),
            Some(t) => Wanted::Quant(t.to_string()),
        };
        Ok(HfSpec {
            repo: repo.to_string(),
            wanted,
        })
    }
}

impl fmt::Display for Wanted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wanted::Quant(q) => write!(f, "quant {q}"),
            Wanted::File(name) => write!(f, "file {name}"),
            Wanted::Default => write!(f, "the default quant (Q4_K_M, else the only model)"),
        }
    }
}

/// An organisation or repository name: letters, digits, `.`, `_`, `-`, not starting with a dot.
fn check_name(part: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err("empty organisation or repository name".into());
    }
    if part.len() > MAX_NAME {
        return Err(format!(
            "name {part:?} is longer than {MAX_NAME} characters"
        ));
    }
    if part.starts_with('.') || part.contains("..") {
        return Err(format!(
            "name {part:?} may not start with '.' or contain '..'"
        ));
    }
    if let Some(c) = part
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!("name {part:?} has the character {c:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        let q = HfSpec::parse("org/repo-GGUF:q4_k_m").unwrap();
        assert_eq!(q.repo, "org/repo-GGUF");
        assert_eq!(q.wanted, Wanted::Quant("q4_k_m".into()));
        let f = HfSpec::parse("org/repo:sub/model-Q8_0.GGUF").unwrap();
        assert_eq!(f.wanted, Wanted::File("sub/model-Q8_0.GGUF".into()));
        assert_eq!(HfSpec::parse("org/repo").unwrap().wanted, Wanted::Default);
    }

    #[test]
    fn refuses_what_is_not_a_repository_id() {
        for bad in [
            "repo",
            "org/",
            "/repo",
            "org/repo/extra",
            "org/..",
            "../repo",
            "org/re po",
            "org/repo?x=1",
            "org/repo:",
            "org/.hidden",
        ] {
            assert!(HfSpec::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
