//! Cross-checks of the tokenizer metadata against the vocabulary, before anything is built
//! from it: every special-token id (and id list) in range, and the per-token arrays exactly as
//! long as the vocabulary.

use super::error::TokenizerError;
use ramforge_gguf::{Metadata, Value};

/// Checks every `tokenizer.ggml.*_token_id` (bos, eos, eot, padding, unknown, separator, FIM,
/// ...) and every `tokenizer.ggml.*_token_ids` list: each id must name one of the `n` tokens.
pub fn special_ids_in_range(md: &Metadata, n: usize) -> Result<(), TokenizerError> {
    for (key, _) in md.iter() {
        let Some(name) = key.strip_prefix("tokenizer.ggml.") else {
            continue;
        };
        let ids = if name.ends_with("_token_id") {
            vec![md.get_u64(key)?]
        } else if name.ends_with("_token_ids") {
            let ids = md.get_i64_array(key)?;
            ids.into_iter()
                .map(|id| u64::try_from(id).unwrap_or(u64::MAX))
                .collect()
        } else {
            continue;
        };
        if let Some(&id) = ids.iter().find(|&&id| id >= n as u64) {
            return Err(TokenizerError::BadId {
                key: key.to_string(),
                msg: format!("token id {id} is outside the vocabulary of {n} tokens"),
            });
        }
    }
    Ok(())
}

/// Checks that the per-token arrays (`token_type`, `scores`), where present, have one entry
/// per token.
pub fn per_token_arrays(md: &Metadata, n: usize) -> Result<(), TokenizerError> {
    for key in ["tokenizer.ggml.token_type", "tokenizer.ggml.scores"] {
        if let Some(Value::Array(_, items)) = md.get(key) {
            one_per_token(key, items.len(), n)?;
        }
    }
    Ok(())
}

/// Checks that a per-token array has one entry per token.
fn one_per_token(key: &'static str, len: usize, n: usize) -> Result<(), TokenizerError> {
    if len != n {
        return Err(TokenizerError::Invalid {
            key,
            msg: format!(
                "{len} entries for {n} tokens (tokenizer.ggml.tokens); they must be equal"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramforge_gguf::ValueType;

    #[test]
    fn ids_and_lists_out_of_range_name_their_key() {
        let mut md = Metadata::new();
        md.insert("tokenizer.ggml.bos_token_id".into(), Value::U32(3));
        md.insert("general.something_token_id".into(), Value::U32(99));
        assert!(special_ids_in_range(&md, 4).is_ok());
        md.insert("tokenizer.ggml.padding_token_id".into(), Value::U32(4));
        let e = special_ids_in_range(&md, 4).unwrap_err().to_string();
        assert_eq!(
            e,
            "tokenizer.ggml.padding_token_id: token id 4 is outside the vocabulary of 4 tokens"
        );
        md.remove("tokenizer.ggml.padding_token_id");
        md.insert(
            "tokenizer.ggml.eog_token_ids".into(),
            Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(-1)]),
        );
        let e = special_ids_in_range(&md, 4).unwrap_err().to_string();
        assert!(
            e.starts_with("tokenizer.ggml.eog_token_ids: token id"),
            "{e}"
        );
    }

    #[test]
    fn per_token_arrays_must_match_exactly() {
        assert!(one_per_token("tokenizer.ggml.scores", 5, 5).is_ok());
        for len in [4, 6] {
            let e = one_per_token("tokenizer.ggml.scores", len, 5)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("tokenizer.ggml.scores: "), "{e}");
        }
    }
}
