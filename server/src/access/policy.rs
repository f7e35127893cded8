//! The policy file (`OPREG_AUTH_FILE`, TOML): the principals, how each proves
//! who it is, and what each may do where. Read whole and checked whole, so a
//! file with one bad entry changes nothing.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{NamespacePattern, Principal, Role};
use crate::domain::ids::Namespace;

/// The principals of one read of the policy file, indexed by credential.
#[derive(Debug, Default)]
pub struct Policy {
    by_api_key: HashMap<[u8; 32], Arc<Principal>>,
    by_tls_identity: HashMap<String, Arc<Principal>>,
    by_name: HashMap<String, Arc<Principal>>,
    principals: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    principal: Vec<PrincipalEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrincipalEntry {
    name: String,
    api_key_sha256: Option<String>,
    tls_identity: Option<String>,
    namespaces: Vec<String>,
    roles: Vec<String>,
}

impl Policy {
    /// Reads and checks the file; the error says which entry is wrong and why.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        Self::parse(&text).map_err(|problem| format!("{}: {problem}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: PolicyFile = toml::from_str(text).map_err(|error| error.message().to_owned())?;
        let mut policy = Self::default();
        let mut names = HashSet::new();
        for (index, entry) in file.principal.into_iter().enumerate() {
            let label = format!("principal {} ({:?})", index + 1, entry.name);
            if entry.name.trim().is_empty() {
                return Err(format!("principal {}: name must not be empty", index + 1));
            }
            if !names.insert(entry.name.clone()) {
                return Err(format!("{label}: the name is used twice"));
            }
            let api_key = entry
                .api_key_sha256
                .as_deref()
                .map(parse_sha256)
                .transpose()
                .map_err(|problem| format!("{label}: api_key_sha256 {problem}"))?;
            let tls_identity = entry.tls_identity.filter(|identity| !identity.is_empty());
            if api_key.is_none() && tls_identity.is_none() {
                return Err(format!(
                    "{label}: needs api_key_sha256 or tls_identity to authenticate"
                ));
            }
            let principal = Arc::new(Principal {
                name: entry.name,
                api_key_sha256: api_key,
                tls_identity: tls_identity.clone(),
                namespaces: parse_all(&entry.namespaces, NamespacePattern::parse)
                    .map_err(|problem| format!("{label}: namespaces: {problem}"))?,
                roles: parse_all(&entry.roles, Role::parse)
                    .map_err(|problem| format!("{label}: roles: {problem}"))?,
            });
            if let Some(hash) = api_key
                && policy
                    .by_api_key
                    .insert(hash, Arc::clone(&principal))
                    .is_some()
            {
                return Err(format!("{label}: another principal has the same API key"));
            }
            if let Some(identity) = tls_identity
                && policy
                    .by_tls_identity
                    .insert(identity, Arc::clone(&principal))
                    .is_some()
            {
                return Err(format!(
                    "{label}: another principal has the same tls_identity"
                ));
            }
            policy
                .by_name
                .insert(principal.name.clone(), Arc::clone(&principal));
            policy.principals += 1;
        }
        Ok(policy)
    }

    pub fn principals(&self) -> usize {
        self.principals
    }

    /// The principal of this name (names are unique in a policy).
    pub fn by_name(&self, name: &str) -> Option<&Arc<Principal>> {
        self.by_name.get(name)
    }

    /// The principal whose key hashes to the SHA-256 of `api_key`.
    pub fn by_api_key(&self, api_key: &str) -> Option<&Arc<Principal>> {
        self.by_api_key
            .get(&<[u8; 32]>::from(Sha256::digest(api_key)))
    }

    /// The first principal named by one of a client certificate's identities.
    pub fn by_tls_identity<'a>(
        &self,
        identities: impl IntoIterator<Item = &'a String>,
    ) -> Option<&Arc<Principal>> {
        identities
            .into_iter()
            .find_map(|identity| self.by_tls_identity.get(identity))
    }
}

fn parse_sha256(text: &str) -> Result<[u8; 32], String> {
    if text.len() != 64
        || !text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    {
        return Err("must be 64 lowercase hex digits (the SHA-256 of the key)".into());
    }
    let mut hash = [0; 32];
    hex::decode_to_slice(text, &mut hash).map_err(|error| error.to_string())?;
    Ok(hash)
}

fn parse_all<T>(
    values: &[String],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    if values.is_empty() {
        return Err("must not be empty".into());
    }
    values.iter().map(|value| parse(value)).collect()
}

impl NamespacePattern {
    /// `*` (every namespace), `prefix*`, or an exact namespace.
    fn parse(text: &str) -> Result<Self, String> {
        let invalid = |violation: crate::domain::error::FieldViolation| {
            format!("{text:?} {}", violation.description)
        };
        match text.strip_suffix('*') {
            Some(prefix) if !prefix.contains('*') => {
                if !prefix.is_empty() {
                    Namespace::parse("namespace", prefix.to_owned()).map_err(invalid)?;
                }
                Ok(Self::Prefix(prefix.to_owned()))
            }
            _ if text.contains('*') => {
                Err(format!("{text:?}: `*` may only end a pattern (`prefix*`)"))
            }
            _ => Namespace::parse("namespace", text.to_owned())
                .map(|namespace| Self::Exact(namespace.into_string()))
                .map_err(invalid),
        }
    }
}

impl Role {
    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "reader" => Ok(Self::Reader),
            "worker" => Ok(Self::Worker),
            "admin" => Ok(Self::Admin),
            other => Err(format!("{other:?} is not a role (reader, worker, admin)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn the_documented_shape_parses_and_finds_principals_by_credential() {
        let policy = Policy::parse(&format!(
            r#"
            [[principal]]
            name = "payments-worker"
            api_key_sha256 = "{KEY_HASH}"
            namespaces = ["payments", "tenant-*"]
            roles = ["worker"]

            [[principal]]
            name = "ops"
            tls_identity = "spiffe://example.org/ops"
            namespaces = ["*"]
            roles = ["admin", "reader"]
            "#
        ))
        .unwrap();
        assert_eq!(policy.principals(), 2);
        let worker = policy.by_api_key("test").unwrap();
        assert_eq!(worker.name, "payments-worker");
        assert!(policy.by_api_key("tset").is_none());
        let identities = ["dns:x".to_owned(), "spiffe://example.org/ops".to_owned()];
        assert_eq!(policy.by_tls_identity(&identities).unwrap().name, "ops");
    }

    #[test]
    fn a_bad_entry_is_refused_with_its_reason() {
        let cases = [
            (
                "name = \"a\"\nnamespaces = [\"x\"]\nroles = [\"worker\"]",
                "needs api_key_sha256",
            ),
            (
                &format!(
                    "name = \"a\"\napi_key_sha256 = \"{}\"\nnamespaces = [\"x\"]\nroles = [\"worker\"]",
                    KEY_HASH.to_uppercase()
                ),
                "lowercase hex",
            ),
            (
                &format!(
                    "name = \"a\"\napi_key_sha256 = \"{KEY_HASH}\"\nnamespaces = [\"x\"]\nroles = [\"owner\"]"
                ),
                "not a role",
            ),
            (
                &format!(
                    "name = \"a\"\napi_key_sha256 = \"{KEY_HASH}\"\nnamespaces = [\"a*b\"]\nroles = [\"reader\"]"
                ),
                "may only end",
            ),
            (
                &format!(
                    "name = \"a\"\napi_key_sha256 = \"{KEY_HASH}\"\nnamespaces = []\nroles = [\"reader\"]"
                ),
                "must not be empty",
            ),
            (
                &format!(
                    "name = \"a\"\napi_key = \"plain\"\napi_key_sha256 = \"{KEY_HASH}\"\nnamespaces = [\"x\"]\nroles = [\"reader\"]"
                ),
                "unknown field",
            ),
        ];
        for (entry, expected) in cases {
            let refused = Policy::parse(&format!("[[principal]]\n{entry}\n")).unwrap_err();
            assert!(refused.contains(expected), "{entry}: {refused}");
        }
        let twice = format!(
            "[[principal]]\nname = \"a\"\napi_key_sha256 = \"{KEY_HASH}\"\nnamespaces = [\"x\"]\nroles = [\"reader\"]\n\
             [[principal]]\nname = \"b\"\napi_key_sha256 = \"{KEY_HASH}\"\nnamespaces = [\"x\"]\nroles = [\"reader\"]\n"
        );
        assert!(Policy::parse(&twice).unwrap_err().contains("same API key"));
    }
}
