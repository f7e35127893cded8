//! Parameter fingerprints, part of the contract: RFC 8785 canonical JSON
//! hashed with SHA-256, computed the same way by the server and every client.
//!
//! The rule, shared with every client:
//! - object members whose value is `null` are dropped, at every depth; `null`
//!   inside an array is kept;
//! - members are ordered by the UTF-16 code units of their names;
//! - numbers are written as ECMAScript's `Number.prototype.toString` writes
//!   them (`100.0` → `100`, `1e21` → `1e+21`, `-0` → `0`); NaN and ±Infinity
//!   are invalid;
//! - strings escape only `"`, `\` and control characters below U+0020;
//! - the digest is SHA-256 over the UTF-8 bytes of that text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use prost_types::value::Kind;
use sha2::{Digest, Sha256};

/// Digest lengths a caller may send in place of parameters.
pub const CALLER_DIGEST_LEN: std::ops::RangeInclusive<usize> = 16..=64;

/// How an operation's parameters are identified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// The SHA-256 of the canonical form (or the caller's digest).
    pub digest: Vec<u8>,
    /// The canonical text, when the parameters themselves were given.
    pub canonical: Option<String>,
}

impl Fingerprint {
    /// Canonicalises a Struct; `None` when it holds NaN or an infinity.
    pub fn from_struct(parameters: &prost_types::Struct) -> Result<Self, NonFiniteNumber> {
        let canonical = canonical_text(&Json::from_struct(parameters))?;
        Ok(Self::from_canonical(canonical))
    }

    /// Canonicalises JSON parameters, as a client does before sending a digest.
    pub fn from_json(parameters: &serde_json::Value) -> Result<Self, NonFiniteNumber> {
        let canonical = canonical_text(&Json::from_serde(parameters))?;
        Ok(Self::from_canonical(canonical))
    }

    /// The fingerprint of parameters already in canonical form.
    pub fn from_canonical(canonical: String) -> Self {
        Self {
            digest: Sha256::digest(canonical.as_bytes()).to_vec(),
            canonical: Some(canonical),
        }
    }

    /// A digest the caller computed; the parameters stay unknown here.
    pub fn from_caller_digest(digest: Vec<u8>) -> Self {
        Self {
            digest,
            canonical: None,
        }
    }
}

/// JSON as a protobuf Struct (`ClaimRequest.parameters`, `Operation.parameters`);
/// anything but an object is an empty Struct. Integers beyond 2^53 lose
/// precision, as they would in any JSON number.
pub fn json_to_struct(json: serde_json::Value) -> prost_types::Struct {
    match json_to_value(json).kind {
        Some(Kind::StructValue(object)) => object,
        _ => prost_types::Struct::default(),
    }
}

fn json_to_value(json: serde_json::Value) -> prost_types::Value {
    let kind = match json {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        serde_json::Value::String(s) => Kind::StringValue(s),
        serde_json::Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.into_iter().map(json_to_value).collect(),
        }),
        serde_json::Value::Object(members) => Kind::StructValue(prost_types::Struct {
            fields: members
                .into_iter()
                .map(|(k, v)| (k, json_to_value(v)))
                .collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// How big a Struct is before anything is computed from it: values (object
/// members and array items, at every depth) and nesting depth (the top-level
/// object is depth 1). Servers bound both before canonicalising.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Object members and array items, at every depth.
    pub values: usize,
    /// The deepest nesting of objects and arrays.
    pub depth: usize,
}

impl Shape {
    /// The shape of `object`.
    pub fn of(object: &prost_types::Struct) -> Self {
        let mut shape = Self::default();
        shape.visit_struct(object, 1);
        shape
    }

    fn visit_struct(&mut self, object: &prost_types::Struct, depth: usize) {
        self.depth = self.depth.max(depth);
        for value in object.fields.values() {
            self.visit_value(value, depth);
        }
    }

    fn visit_value(&mut self, value: &prost_types::Value, depth: usize) {
        self.values += 1;
        match &value.kind {
            Some(Kind::StructValue(object)) => self.visit_struct(object, depth + 1),
            Some(Kind::ListValue(list)) => {
                self.depth = self.depth.max(depth + 1);
                for item in &list.values {
                    self.visit_value(item, depth + 1);
                }
            }
            _ => {}
        }
    }
}

/// A number that JSON cannot carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("parameters hold NaN or an infinite number")]
pub struct NonFiniteNumber;

/// The JSON data model the canonical form is defined over.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`: dropped as an object member, kept in an array.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A finite number (JSON has no others).
    Number(f64),
    /// A string.
    String(String),
    /// An array, in order.
    Array(Vec<Json>),
    /// An object; its members sort by key in the canonical form.
    Object(BTreeMap<String, Json>),
}

impl Json {
    /// The JSON value of a protobuf Struct.
    pub fn from_struct(object: &prost_types::Struct) -> Self {
        Self::Object(
            object
                .fields
                .iter()
                .map(|(name, value)| (name.clone(), Self::from_value(value)))
                .collect(),
        )
    }

    fn from_value(value: &prost_types::Value) -> Self {
        match &value.kind {
            None | Some(Kind::NullValue(_)) => Self::Null,
            Some(Kind::BoolValue(b)) => Self::Bool(*b),
            Some(Kind::NumberValue(n)) => Self::Number(*n),
            Some(Kind::StringValue(s)) => Self::String(s.clone()),
            Some(Kind::ListValue(list)) => {
                Self::Array(list.values.iter().map(Self::from_value).collect())
            }
            Some(Kind::StructValue(object)) => Self::from_struct(object),
        }
    }

    /// The JSON value of a serde_json value.
    pub fn from_serde(value: &serde_json::Value) -> Self {
        match value {
            serde_json::Value::Null => Self::Null,
            serde_json::Value::Bool(b) => Self::Bool(*b),
            serde_json::Value::Number(n) => Self::Number(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::String(s) => Self::String(s.clone()),
            serde_json::Value::Array(items) => {
                Self::Array(items.iter().map(Self::from_serde).collect())
            }
            serde_json::Value::Object(members) => Self::Object(
                members
                    .iter()
                    .map(|(name, value)| (name.clone(), Self::from_serde(value)))
                    .collect(),
            ),
        }
    }
}

/// The RFC 8785 text of `value`, with null object members dropped.
pub fn canonical_text(value: &Json) -> Result<String, NonFiniteNumber> {
    let mut out = String::new();
    write_value(&mut out, value)?;
    Ok(out)
}

fn write_value(out: &mut String, value: &Json) -> Result<(), NonFiniteNumber> {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => write_number(out, *n)?,
        Json::String(s) => write_string(out, s),
        Json::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(out, item)?;
            }
            out.push(']');
        }
        Json::Object(members) => {
            out.push('{');
            for (index, (name, member)) in sorted_members(members).into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(out, name);
                out.push(':');
                write_value(out, member)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// Non-null members ordered by the UTF-16 code units of their names (RFC 8785 §3.2.3).
fn sorted_members(members: &BTreeMap<String, Json>) -> Vec<(&String, &Json)> {
    let mut present: Vec<_> = members
        .iter()
        .filter(|(_, value)| !matches!(value, Json::Null))
        .collect();
    present.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
    present
}

fn write_number(out: &mut String, n: f64) -> Result<(), NonFiniteNumber> {
    if !n.is_finite() {
        return Err(NonFiniteNumber);
    }
    if n == 0.0 {
        // ECMAScript prints negative zero as "0".
        out.push('0');
    } else {
        out.push_str(ryu_js::Buffer::new().format_finite(n));
    }
    Ok(())
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < '\u{20}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Top-level member names whose canonical values differ between two canonical
/// texts (present on one side only counts as different), in canonical order.
pub fn differing_fields(stored: &str, requested: &str) -> Vec<String> {
    let (Some(stored), Some(requested)) = (top_level_members(stored), top_level_members(requested))
    else {
        return Vec::new();
    };
    let mut names: Vec<&String> = stored.keys().chain(requested.keys()).collect();
    names.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    names.dedup();
    names
        .into_iter()
        .filter(|name| stored.get(*name) != requested.get(*name))
        .cloned()
        .collect()
}

/// Canonical text of each top-level member of a canonical object.
fn top_level_members(canonical: &str) -> Option<BTreeMap<String, String>> {
    let serde_json::Value::Object(members) = serde_json::from_str(canonical).ok()? else {
        return None;
    };
    members
        .iter()
        .map(|(name, value)| Some((name.clone(), canonical_text(&Json::from_serde(value)).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {

    #[test]
    fn shape_counts_every_value_and_the_deepest_nesting() {
        let object = |fields: Vec<(&str, prost_types::Value)>| prost_types::Struct {
            fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        };
        let leaf = || prost_types::Value {
            kind: Some(Kind::NumberValue(1.0)),
        };
        let list = prost_types::Value {
            kind: Some(Kind::ListValue(prost_types::ListValue {
                values: vec![leaf(), leaf()],
            })),
        };
        let inner = prost_types::Value {
            kind: Some(Kind::StructValue(object(vec![("l", list)]))),
        };
        let shape = Shape::of(&object(vec![("a", leaf()), ("inner", inner)]));
        assert_eq!(
            shape,
            Shape {
                values: 5,
                depth: 3
            }
        );
        assert_eq!(
            Shape::of(&prost_types::Struct::default()),
            Shape {
                values: 0,
                depth: 1
            }
        );
    }

    use super::*;
    use proptest::prelude::*;

    fn canonical_of(json: &str) -> String {
        canonical_text(&Json::from_serde(&serde_json::from_str(json).unwrap())).unwrap()
    }

    #[test]
    fn numbers_follow_ecmascript() {
        assert_eq!(
            canonical_of("[100.0, 1e21, -0.0, 0.000001, 1e-7, 123456789012345680000]"),
            "[100,1e+21,0,0.000001,1e-7,123456789012345680000]"
        );
    }

    #[test]
    fn members_sort_by_utf16_and_nulls_drop_outside_arrays() {
        assert_eq!(
            canonical_of(
                r#"{"b":1,"a":{"z":null,"y":[null,2]},"\ud83d\ude00":1,"\ufb33":2,"n":null}"#
            ),
            "{\"a\":{\"y\":[null,2]},\"b\":1,\"\u{1f600}\":1,\"\u{fb33}\":2}"
        );
    }

    #[test]
    fn strings_escape_only_what_rfc8785_requires() {
        assert_eq!(
            canonical_of(r#""\u0001\n\"\\/é\u2028\u007f""#),
            "\"\\u0001\\n\\\"\\\\/é\u{2028}\u{7f}\""
        );
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        assert_eq!(
            canonical_text(&Json::Number(f64::NAN)),
            Err(NonFiniteNumber)
        );
        assert_eq!(
            canonical_text(&Json::Array(vec![Json::Number(f64::INFINITY)])),
            Err(NonFiniteNumber)
        );
    }

    fn json() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<f64>()
                .prop_filter("finite", |n| n.is_finite())
                .prop_map(Json::Number),
            any::<i32>().prop_map(|n| Json::Number(f64::from(n))),
            ".{0,6}".prop_map(Json::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                prop::collection::btree_map(".{0,4}", inner, 0..4).prop_map(Json::Object),
            ]
        })
    }

    proptest! {
        /// The canonical text is JSON that parses back to the same canonical
        /// text: numbers round-trip exactly and nothing is lost but null members.
        #[test]
        fn canonical_text_is_a_fixed_point(value in json()) {
            let text = canonical_text(&value).unwrap();
            let reparsed: serde_json::Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(canonical_text(&Json::from_serde(&reparsed)).unwrap(), text);
        }

        #[test]
        fn numbers_round_trip(n in any::<f64>().prop_filter("finite", |n| n.is_finite())) {
            let text = canonical_text(&Json::Number(n)).unwrap();
            let parsed: f64 = text.parse().unwrap();
            prop_assert!(parsed == n, "{} -> {}", n, text);
        }
    }

    /// The vectors every client checks, produced by an independent implementation.
    #[test]
    fn shared_vectors_match() {
        let vectors: Vec<serde_json::Value> =
            serde_json::from_str(include_str!("../client/testdata/parameter_digests.json"))
                .unwrap();
        assert!(vectors.len() >= 10);
        for vector in vectors {
            let input: serde_json::Value =
                serde_json::from_str(vector["input"].as_str().unwrap()).unwrap();
            let fingerprint = Fingerprint::from_json(&input).unwrap();
            assert_eq!(
                fingerprint.canonical.as_deref(),
                vector["canonical"].as_str(),
                "{}",
                vector["name"]
            );
            let hex: String = fingerprint
                .digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                Some(hex.as_str()),
                vector["sha256"].as_str(),
                "{}",
                vector["name"]
            );
        }
    }

    #[test]
    fn differing_fields_names_top_level_members() {
        let stored = canonical_of(r#"{"amount":100,"account":"A","meta":{"x":1}}"#);
        let requested = canonical_of(r#"{"amount":101,"account":"A","meta":{"x":2},"extra":true}"#);
        assert_eq!(
            differing_fields(&stored, &requested),
            ["amount", "extra", "meta"]
        );
    }
}
