//! GGUF metadata values and typed access to them.

use crate::error::GgufError;
use std::collections::HashMap;

/// The 13 GGUF metadata value types, by their on-disk id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The on-disk type id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The smallest number of bytes one value of this type occupies on disk; used to bound
    /// array counts by the bytes that remain before allocating.
    pub fn min_encoded_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Element type and elements (all of that type).
    Array(ValueType, Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer that fits i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I64(v) => Some(v),
            _ => self.as_u64().map(|v| v as i64).or(match *self {
                Value::I8(v) => Some(v as i64),
                Value::I16(v) => Some(v as i64),
                Value::I32(v) => Some(v as i64),
                _ => None,
            }),
        }
    }

    /// The value as a float, for any float or integer type.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            Value::U64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<(ValueType, &[Value])> {
        match self {
            Value::Array(t, v) => Some((*t, v)),
            _ => None,
        }
    }
}

/// The metadata key/value section, in file order, with lookup by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// Adds a key; returns false (and changes nothing) if the key is already present.
    pub fn insert(&mut self, key: String, value: Value) -> bool {
        if self.index.contains_key(&key) {
            return false;
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        true
    }

    /// Sets a key: replaces its value in place if present, else appends it.
    pub fn set(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.insert(key, value);
            }
        }
    }

    /// Removes a key and returns its value (the order of the others is kept).
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.index.remove(key)?;
        let (_, value) = self.entries.remove(i);
        for slot in self.index.values_mut() {
            if *slot > i {
                *slot -= 1;
            }
        }
        Some(value)
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    fn wrong(key: &str, expected: &'static str, found: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected,
            found: found.value_type().name(),
        }
    }

    /// An optional key read with one of the typed getters: `Ok(None)` when the key is absent,
    /// the getter's error when it is present with the wrong type.
    /// `md.opt("llama.rope.freq_base", Metadata::get_f32)?`
    pub fn opt<'a, T>(
        &'a self,
        key: &str,
        get: impl FnOnce(&'a Metadata, &str) -> Result<T, GgufError>,
    ) -> Result<Option<T>, GgufError> {
        if self.contains(key) {
            get(self, key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "string", v))
    }

    /// Any non-negative integer value, as u64.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| Self::wrong(key, "unsigned integer", v))
    }

    /// Any non-negative integer value that fits u32.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        let v = self.get_u64(key)?;
        u32::try_from(v).map_err(|_| GgufError::OutOfRange {
            key: key.to_string(),
            value: v.to_string(),
        })
    }

    /// Any integer value that fits i64.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        let v = self.require(key)?;
        v.as_i64().ok_or_else(|| Self::wrong(key, "integer", v))
    }

    /// Any integer or float value, as f32.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|f| f as f32)
            .ok_or_else(|| Self::wrong(key, "number", v))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| Self::wrong(key, "bool", v))
    }

    /// An array value (any element type).
    pub fn get_array(&self, key: &str) -> Result<(ValueType, &[Value]), GgufError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| Self::wrong(key, "array", v))
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        let (t, items) = self.get_array(key)?;
        if t != ValueType::String {
            return Err(GgufError::WrongType {
                key: key.to_string(),
                expected: "array of string",
                found: t.name(),
            });
        }
        Ok(items.iter().filter_map(Value::as_str).collect())
    }

    /// An array of numbers (any integer or float element type), as f32.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        let (t, items) = self.get_array(key)?;
        items
            .iter()
            .map(|v| v.as_f64().map(|f| f as f32))
            .collect::<Option<Vec<_>>>()
            .ok_or(GgufError::WrongType {
                key: key.to_string(),
                expected: "array of number",
                found: t.name(),
            })
    }

    /// An array of integers, as i64.
    pub fn get_i64_array(&self, key: &str) -> Result<Vec<i64>, GgufError> {
        let (t, items) = self.get_array(key)?;
        items
            .iter()
            .map(Value::as_i64)
            .collect::<Option<Vec<_>>>()
            .ok_or(GgufError::WrongType {
                key: key.to_string(),
                expected: "array of integer",
                found: t.name(),
            })
    }
}
