//! A strict reader of one JSON object's fields: each is taken by name and type, `null` counts
//! as absent, and whatever is left untaken at the end is an unrecognized argument. Every error
//! names the field (`messages[1].content`), so the client is told exactly what is wrong.

use super::errors::ApiError;
use serde_json::{Map, Value};

/// The fields of one JSON object, not yet taken.
pub struct Fields {
    map: Map<String, Value>,
    /// Prefix of the field names in errors (`messages[0].`), empty at the top level.
    prefix: String,
}

impl Fields {
    /// The fields of `value`, which must be an object; `what` names it in the error.
    pub fn of(value: Value, what: &str, prefix: String) -> Result<Fields, ApiError> {
        match value {
            Value::Object(map) => Ok(Fields { map, prefix }),
            _ => Err(ApiError::invalid(
                (!what.is_empty()).then_some(what),
                format!(
                    "{} must be a JSON object",
                    if what.is_empty() {
                        "the request body"
                    } else {
                        what
                    }
                ),
            )),
        }
    }

    /// The full name of field `name`, for errors. A name that is empty or holds anything but
    /// printable non-space characters is written as a JSON string (`""`, `"a\nb"`), so the
    /// error still shows it, on one line.
    pub fn param(&self, name: &str) -> String {
        let plain = !name.is_empty()
            && name.chars().all(|c| {
                c.is_ascii_graphic() || (!c.is_ascii() && !c.is_control() && !c.is_whitespace())
            });
        if plain {
            format!("{}{name}", self.prefix)
        } else {
            format!("{}{}", self.prefix, Value::from(name))
        }
    }

    /// The raw value of `name`; `None` when absent or null.
    pub fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name).filter(|v| !v.is_null())
    }

    fn wrong_type(&self, name: &str, expected: &str) -> ApiError {
        let param = self.param(name);
        ApiError::invalid(Some(&param), format!("'{param}' must be {expected}"))
    }

    /// A string field.
    pub fn string(&mut self, name: &str) -> Result<Option<String>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.wrong_type(name, "a string")),
        }
    }

    /// A string field that must be present.
    pub fn required_string(&mut self, name: &str) -> Result<String, ApiError> {
        self.string(name)?.ok_or_else(|| self.missing(name))
    }

    /// The error for a required field that is absent.
    pub fn missing(&self, name: &str) -> ApiError {
        let param = self.param(name);
        ApiError::invalid(Some(&param), format!("'{param}' is required"))
    }

    /// A boolean field.
    pub fn bool(&mut self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(self.wrong_type(name, "a boolean")),
        }
    }

    /// A number field, within `range` (inclusive).
    pub fn number(&mut self, name: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
                _ => Err(self.wrong_type(name, &format!("a number from {lo} to {hi}"))),
            },
            Some(_) => Err(self.wrong_type(name, "a number")),
        }
    }

    /// An integer field of at least `min`.
    pub fn uint(&mut self, name: &str, min: u64) -> Result<Option<u64>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(x) if x >= min => Ok(Some(x)),
                _ => Err(self.wrong_type(name, &format!("an integer of at least {min}"))),
            },
            Some(_) => Err(self.wrong_type(name, "an integer")),
        }
    }

    /// A signed integer field.
    pub fn int(&mut self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.wrong_type(name, "an integer")),
            Some(_) => Err(self.wrong_type(name, "an integer")),
        }
    }

    /// A field this server does not implement: accepted only absent or when `harmless` holds
    /// for its value (e.g. `n: 1`, `logprobs: false`), else a 400 saying `why`.
    pub fn unsupported(
        &mut self,
        name: &str,
        harmless: impl Fn(&Value) -> bool,
        why: &str,
    ) -> Result<(), ApiError> {
        match self.take(name) {
            Some(v) if !harmless(&v) => Err(ApiError::unsupported(&self.param(name), why)),
            _ => Ok(()),
        }
    }

    /// Ends the reading: a field left untaken is unrecognized.
    pub fn finish(self) -> Result<(), ApiError> {
        match self.map.keys().next() {
            Some(name) => Err(ApiError::unrecognized(&self.param(name))),
            None => Ok(()),
        }
    }
}

/// True for JSON `false`, `0`, an empty array or object: the values that ask for nothing.
pub fn is_off(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// True for the number 1 (`n: 1`, `best_of: 1`).
pub fn is_one(v: &Value) -> bool {
    v.as_f64() == Some(1.0)
}

#[cfg(test)]
mod tests {
    use super::Fields;
    use serde_json::json;

    /// Found by the serve_request fuzz target: an unknown field named "" gave an error naming
    /// nothing.
    #[test]
    fn an_unknown_field_with_an_odd_name_is_named_on_one_line() {
        for (name, shown) in [
            ("", "\"\""),
            ("a\nb", "\"a\\nb\""),
            (" x", "\" x\""),
            ("top_q", "top_q"),
        ] {
            let mut body = serde_json::Map::new();
            body.insert(name.to_string(), json!(1));
            let f = Fields::of(body.into(), "", String::new()).unwrap();
            let e = f.finish().unwrap_err();
            assert_eq!(e.param.as_deref(), Some(shown), "{name:?}");
            assert!(
                e.message.ends_with(shown) && !e.message.contains('\n'),
                "{}",
                e.message
            );
        }
    }
}
