//! The value types of settings that clap does not know: retentions that may
//! be `forever`, and per-namespace overrides.

use std::str::FromStr;
use std::time::Duration;

use crate::domain::ids::Namespace;
use crate::domain::policy::PerNamespace;

/// A default that may be absent (unlimited), with per-namespace values.
pub(super) fn optional_per_namespace(
    default: Option<u32>,
    overrides: &Overrides<u32>,
) -> PerNamespace<Option<u32>> {
    PerNamespace {
        default,
        overrides: overrides
            .0
            .iter()
            .map(|(namespace, value)| (namespace.clone(), Some(*value)))
            .collect(),
    }
}

/// How long finished operations are kept; `forever` keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention(pub Option<Duration>);

impl FromStr for Retention {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim() == "forever" {
            return Ok(Self(None));
        }
        humantime::parse_duration(text.trim())
            .map(|kept| Self(Some(kept)))
            .map_err(|error| format!("{text:?} is neither a duration nor `forever`: {error}"))
    }
}

/// `namespace=value` pairs separated by commas; empty for none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides<T>(pub Vec<(String, T)>);

impl<T: FromStr<Err: std::fmt::Display>> FromStr for Overrides<T> {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut pairs = Vec::new();
        for pair in text
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            let (namespace, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not namespace=value"))?;
            let namespace = Namespace::parse("namespace", namespace.trim().to_owned())
                .map_err(|violation| format!("{pair:?}: namespace {}", violation.description))?;
            let value = value
                .trim()
                .parse()
                .map_err(|error| format!("{pair:?}: {error}"))?;
            pairs.push((namespace.into_string(), value));
        }
        Ok(Self(pairs))
    }
}
